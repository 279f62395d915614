/* SPDX-License-Identifier: MIT */
/*
 * tk_int.h - the takeover region's layout, shared by takeover.c (the
 * region, its journal, the handles and INIT of a new daemon) and
 * tk_replay.c (the journal read back by a new daemon): docs/keeper.md.
 */
#ifndef FMFS_FS_TK_INT_H
#define FMFS_FS_TK_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "fs_int.h"

#define TK_MAGIC "fmfstk1"
#define TK_HEAD 4096u
#define TK_HALF (64u << 20)     /* sparse: only what is written is used */
#define TK_COMPACT_MIN (4u << 20) /* a log this long may be compacted */
#define TK_REC_TYPICAL 48         /* an inode's record, its name included:
                                   * compact_due's estimate of the live
                                   * set */
#define TK_PINNED (1ull << 40)  /* lookup count of a replayed inode */

enum { TK_INODE = 1, TK_MOVE, TK_UNLINKED, TK_DROP, TK_OPEN, TK_CLOSE,
       TK_LINK, TK_LINKGONE, TK_DIRTIME };

struct tk_head {
	char magic[8];
	uint32_t init_len;
	unsigned char init[256];   /* the kernel's INIT request, as read */
	_Atomic uint64_t state;    /* half << 63 | end of the log */
	_Atomic uint64_t next_ino;
	_Atomic uint32_t flags;    /* TK_F_* */
	_Atomic uint32_t takeovers;
	_Atomic int64_t last_ms;   /* when the last one began */
	_Atomic int64_t last_took_ms; /* until the new daemon served */
	_Atomic int32_t keeper_pid, daemon_pid;
	_Atomic uint32_t resent;   /* requests sent again, last takeover */
	_Atomic uint32_t given;    /* of those, answered from tk_replies.c */
	char cause[128];           /* of the last one */
	char refused[256];         /* why the last one was refused */
	_Atomic uint32_t done_before; /* of those, found done (intents) */
};

_Static_assert(sizeof(struct tk_head) <= TK_HEAD, "the region's head");

#define TK_F_RING 1u            /* a daemon used FUSE over io_uring */
#define TK_F_FULL 2u            /* the log ran out of room */

struct tk_rec {                 /* followed by the name */
	uint32_t len;           /* of the whole record, 8-aligned */
	uint32_t type;
	uint64_t a, b;          /* INODE/MOVE: ino, parent; OPEN: fh, ino;
	                         * LINK/LINKGONE: ino, dir; DIRTIME: ino,
	                         * mtime_ns (ctime_ns in c, d: low, high) */
	uint32_t c, d;          /* INODE: is_dir, ftype; OPEN: flags, kind */
};

struct tk_old {                 /* a dead daemon's open handle */
	uint64_t fh;
	fuse_ino_t ino;
	uint32_t flags, kind;
	void *now;              /* reopened: ours */
	struct tk_old *next;
};

struct fs_tk {
	struct tk_head *head;
	char *base;
	pthread_mutex_t lock;   /* appends, the live handles */
	struct tk_old *live;    /* open handles, for compaction */
	struct tk_old *old;     /* a dead daemon's, reopened or not yet */
	uint64_t compacted;     /* the log's end after the last compaction */
	bool root_times;        /* replay: the root's mtime and ctime */
	int64_t root_mtime_ns, root_ctime_ns;
};

static inline char *tk_half_base(struct fs_tk *t, uint64_t state)
{
	return t->base + TK_HEAD + (state >> 63) * (size_t)TK_HALF;
}

/* Takes the handle fh out of list (t->lock held, or before serving). */
void tk_old_remove(struct tk_old **list, uint64_t fh);
/* The new daemon: the inode table, the hard links and the open handles
 * of the daemon before, from the journal; 0, or -errno with why set
 * (the takeover is then refused). */
int fs_tk_replay(struct fs *fs, char *why, size_t wl);

#endif
