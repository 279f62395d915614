/* SPDX-License-Identifier: MIT */
/*
 * passthrough.c - FUSE passthrough for files being written, and the INIT
 * flags libfuse 3.14 cannot negotiate.
 *
 * Linux >= 6.9 can bind an open FUSE file to a "backing" file of the
 * daemon: the kernel then reads and writes the backing file itself and
 * the daemon sees no READ or WRITE requests.  For a dirty file that means
 * a write() costs what it costs on the cache disk (one copy into the page
 * cache) instead of two more copies and a round trip through /dev/fuse
 * per MiB.  libfuse exposes this from 3.16; Debian 12 ships 3.14, which
 * speaks protocol 7.38 and has neither the flag nor the reply fields.
 *
 * What 3.14 does have is fuse_session_custom_io(): our own read and
 * writev for /dev/fuse.  Through them this file adds the two pieces of
 * protocol 7.40 that passthrough needs, and nothing else:
 *   - the INIT reply: FUSE_PASSTHROUGH (flags2 bit 5, with FUSE_INIT_EXT)
 *     and max_stack_depth 1, only when the kernel offered FUSE_PASSTHROUGH
 *     in its INIT request;
 *   - an OPEN or CREATE reply the calling thread marked with
 *     fs_pt_mark_reply(): FOPEN_PASSTHROUGH and the backing id in
 *     fuse_open_out (the field 7.38 calls padding).
 * Backing ids come from the FUSE_DEV_IOC_BACKING_OPEN ioctl, which needs
 * CAP_SYS_ADMIN: without it (or on an older kernel) fs->pt_on stays false
 * and every open takes the usual path.  When libfuse >= 3.16 is the
 * baseline, this file gives way to FUSE_CAP_PASSTHROUGH and
 * fuse_passthrough_open().
 *
 * The kernel's rule that shapes the callers (fs/fuse/iomode.c): while a
 * file of an inode is open through a backing file, every other open of
 * that inode must use the same backing file, and an inode open the usual
 * way cannot be opened through one.  A mismatch fails the open with EIO.
 * So fs.c and write.c keep, per inode, the backing id in use and how many
 * handles use it (fs_inode_x.pt_id / pt_open), and pass through only when
 * no handle of the inode is open the usual way.
 *
 * One more INIT flag rides the same reply: FUSE_HANDLE_KILLPRIV_V2
 * (7.33, which 3.14 cannot ask for either).  Without it the kernel clears
 * SB_NOSEC on every FUSE mount, so each write() - passthrough or not -
 * first asks the daemon for "security.capability" (file_remove_privs), a
 * GETXATTR round trip per call: 8 KiB writes went at 1/7 of the local
 * disk's speed.  With it the kernel latches S_NOSEC on an inode after its
 * first write and asks no more.  It makes the daemon the one to drop
 * set-id bits and capabilities on write and truncate; fmfs stores no
 * capabilities (only user.* names are accepted) and is mounted nosuid, so
 * there is nothing to drop, and the flag is asked for only when no
 * "-o suid" overrides that.  The custom I/O is installed on every mount
 * for it; passthrough's parts still need --passthrough (the default).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs_int.h"

/* Protocol 7.40 pieces absent from libfuse 3.14's headers. */
#define FS_PT_MIN_ROOM (1ull << 30)

#define PT_OP_INIT 26u
#define PT_INIT_EXT (1u << 30)        /* FUSE_INIT_EXT: flags2 is valid */
#define PT_FLAGS2_PASSTHROUGH (1u << 5) /* FUSE_PASSTHROUGH (1ULL << 37) */
#define PT_FLAGS2_URING (1u << 9)     /* FUSE_OVER_IO_URING (1ULL << 41) */
#define PT_HANDLE_KILLPRIV_V2 (1u << 28) /* 7.33 */
#define PT_FOPEN_PASSTHROUGH (1u << 7)
#define PT_FOPEN_KEEP_CACHE (1u << 1)

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};

#define PT_IOC_BACKING_OPEN _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* Offsets in the wire structs (include/uapi/linux/fuse.h, 7.40). */
#define PT_IN_HEADER 40u   /* fuse_in_header */
#define PT_INIT_IN_FLAGS 12u
#define PT_INIT_IN_FLAGS2 16u
#define PT_INIT_OUT_FLAGS 12u
#define PT_INIT_OUT_FLAGS2 32u
#define PT_INIT_OUT_STACK 36u
#define PT_INIT_OUT_SIZE 64u
#define PT_OPEN_OUT_SIZE 16u  /* fh, open_flags, backing_id */

/* The backing id for the next OPEN/CREATE reply sent by this thread. */
static __thread int32_t pt_next_reply;

static uint32_t get32(const void *p, size_t off)
{
	uint32_t v;

	memcpy(&v, (const char *)p + off, sizeof(v));
	return v;
}

static void put32(void *p, size_t off, uint32_t v)
{
	memcpy((char *)p + off, &v, sizeof(v));
}

/* libfuse mounts nosuid unless -o suid asks otherwise. */
static bool mount_nosuid(const struct fs *fs)
{
	const char *o = fs->cfg.fuse_opts;
	size_t n;

	while (o && *o) {
		n = strcspn(o, ",");
		if (n == 4 && !strncmp(o, "suid", 4))
			return false;
		o += n + (o[n] == ',');
	}
	return true;
}

static ssize_t pt_read(int fd, void *buf, size_t len, void *userdata)
{
	struct fs *fs = userdata;
	ssize_t n = fs_tk_init_read(fs, buf, len); /* a new daemon's INIT */

	if (n < 0) {
		do
			n = read(fd, buf, len);
		/* a resent request the dead daemon had answered */
		while (n >= 16 && fs_tkr_answer(fs, fd, buf, (size_t)n));
	}
	fs_tkr_look(fs, buf, n < 0 ? 0 : (size_t)n); /* begun before? */
	if (n >= 16 && atomic_load(&fs->tk_init_done))
		fs_tk_count_resent(fs, buf);
	/* The kernel's first request is INIT: does it offer passthrough? */
	if (n >= (ssize_t)(PT_IN_HEADER + PT_INIT_IN_FLAGS2 + 4) &&
	    !atomic_load(&fs->pt_init_seen) &&
	    get32(buf, 4) == PT_OP_INIT) {
		uint32_t flags = get32(buf, PT_IN_HEADER + PT_INIT_IN_FLAGS);
		uint32_t flags2 = get32(buf, PT_IN_HEADER + PT_INIT_IN_FLAGS2);
		uint64_t unique;

		memcpy(&unique, (char *)buf + 8, sizeof(unique));
		if (fs->cfg.passthrough && (flags & PT_INIT_EXT) &&
		    (flags2 & PT_FLAGS2_PASSTHROUGH)) {
			atomic_store(&fs->pt_offered, true);
			atomic_store(&fs->pt_init_unique, unique);
		}
		if (fs->cfg.uring && (flags & PT_INIT_EXT) &&
		    (flags2 & PT_FLAGS2_URING) && fs->tk) {
			/* A new daemon cannot take the ring's requests
			 * over: docs/keeper.md "The ring". */
			atomic_store(&fs->ur_kept, true);
		} else if (fs->cfg.uring && (flags & PT_INIT_EXT) &&
			   (flags2 & PT_FLAGS2_URING)) {
			atomic_store(&fs->ur_offered, true);
			atomic_store(&fs->pt_init_unique, unique);
		}
		if ((flags & PT_HANDLE_KILLPRIV_V2) && mount_nosuid(fs)) {
			atomic_store(&fs->pt_killpriv2, true);
			atomic_store(&fs->pt_init_unique, unique);
		}
		fs_tk_init_seen(fs, buf, (size_t)n);
		atomic_store(&fs->pt_init_seen, true);
	}
	return n;
}

/* A reply to a request that came by the ring goes back by it. */
static ssize_t pt_send(struct fs *fs, int fd, struct iovec *iov, int count)
{
	ssize_t sent;

	if (atomic_load(&fs->ur_on) && fs_uring_reply(fs, iov, count, &sent))
		return sent;
	return writev(fd, iov, count);
}

/* pt_send, its reply kept until the kernel has it when it must not be
 * carried out twice (tk_replies.c). */
static ssize_t pt_send_kept(struct fs *fs, int fd, struct iovec *iov,
			    int count)
{
	int slot = fs_tkr_record(fs, iov, count);
	ssize_t n = pt_send(fs, fd, iov, count);

	if (n > 0)
		fs_tkr_sent(fs, slot, iov);
	fs_tkr_intent_end(fs); /* answered (or the request is gone) */
	return n;
}

static ssize_t pt_writev(int fd, struct iovec *iov, int count,
			 void *userdata)
{
	struct fs *fs = userdata;
	int32_t err;
	uint64_t unique, init = atomic_load(&fs->pt_init_unique);
	bool start_ring = false;
	ssize_t n;

	if (count != 2 || iov[0].iov_len < 16)
		return pt_send_kept(fs, fd, iov, count); /* an error */
	memcpy(&err, (char *)iov[0].iov_base + 4, sizeof(err));
	memcpy(&unique, (char *)iov[0].iov_base + 8, sizeof(unique));
	if (pt_next_reply > 0 && !err && iov[1].iov_len >= PT_OPEN_OUT_SIZE) {
		/* fuse_open_out ends the reply (OPEN, and CREATE after the
		 * entry); libfuse built it in a buffer of its own. */
		char *o = (char *)iov[1].iov_base + iov[1].iov_len -
			  PT_OPEN_OUT_SIZE;
		uint32_t of = get32(o, 8);

		of = (of | PT_FOPEN_PASSTHROUGH) & ~PT_FOPEN_KEEP_CACHE;
		put32(o, 8, of);
		put32(o, 12, (uint32_t)pt_next_reply);
		pt_next_reply = 0;
	} else if (init && unique == init && !err &&
		   iov[1].iov_len >= PT_INIT_OUT_SIZE) {
		char *o = iov[1].iov_base;

		if (atomic_load(&fs->pt_killpriv2))
			put32(o, PT_INIT_OUT_FLAGS, get32(o, PT_INIT_OUT_FLAGS) |
						    PT_HANDLE_KILLPRIV_V2);
		if (atomic_load(&fs->pt_offered)) {
			put32(o, PT_INIT_OUT_FLAGS,
			      get32(o, PT_INIT_OUT_FLAGS) | PT_INIT_EXT);
			put32(o, PT_INIT_OUT_FLAGS2,
			      get32(o, PT_INIT_OUT_FLAGS2) |
			      PT_FLAGS2_PASSTHROUGH);
			/* backing files: not stacked */
			put32(o, PT_INIT_OUT_STACK, 1);
			atomic_store(&fs->pt_on, true);
		}
		if (atomic_load(&fs->ur_offered)) {
			put32(o, PT_INIT_OUT_FLAGS,
			      get32(o, PT_INIT_OUT_FLAGS) | PT_INIT_EXT);
			put32(o, PT_INIT_OUT_FLAGS2,
			      get32(o, PT_INIT_OUT_FLAGS2) | PT_FLAGS2_URING);
			start_ring = true;
		}
		atomic_store(&fs->pt_init_unique, 0);
	}
	if (fs_tk_init_reply(fs, unique, fd)) {
		for (n = 0; count-- > 0; iov++)
			n += (ssize_t)iov->iov_len;
		return n;
	}
	n = pt_send_kept(fs, fd, iov, count);
	/* The kernel takes the ring's commands once it has the reply. */
	if (start_ring && n > 0)
		fs_uring_start(fs, FS_MAX_READ > (1u << 20) ? FS_MAX_READ :
			       1u << 20);
	return n;
}

/* libfuse takes requests into a pipe of its own (as large as its
 * buffer).  Just after a takeover, while replies of the daemon before may
 * be asked for again (tk_replies.c), the request is read and its header
 * looked at first, then written into the pipe. */
static ssize_t pt_splice_receive(int fdin, off_t *offin, int fdout,
				 off_t *offout, size_t len, unsigned flags,
				 void *userdata)
{
	struct fs *fs = userdata;
	ssize_t n, w;
	char *buf;

	/* A new daemon's: nothing is read before the handles are open
	 * again and the kernel asked to resend (fs_tk_init_reply). */
	fs_tk_init_wait(fs);
	fs_tkr_look(fs, NULL, 0);
	if (!fs_tkr_pending(fs) || offin || offout || !(buf = malloc(len)))
		return splice(fdin, offin, fdout, offout, len, flags);
	do
		n = read(fdin, buf, len);
	while (n >= 16 && fs_tkr_answer(fs, fdin, buf, (size_t)n));
	fs_tkr_look(fs, buf, n < 0 ? 0 : (size_t)n); /* begun before? */
	if (n >= 16 && atomic_load(&fs->tk_init_done))
		fs_tk_count_resent(fs, buf);
	for (w = 0; n > 0 && w < n;) {
		ssize_t k = write(fdout, buf + w, (size_t)(n - w));

		if (k <= 0) {
			n = -1;
			break;
		}
		w += k;
	}
	free(buf);
	return n;
}

static ssize_t pt_splice_send(int fdin, off_t *offin, int fdout,
			      off_t *offout, size_t len, unsigned flags,
			      void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int fs_pt_install(struct fs *fs)
{
	static const struct fuse_custom_io io = {
		.read = pt_read,
		.writev = pt_writev,
		.splice_receive = pt_splice_receive,
		.splice_send = pt_splice_send,
	};

	return fuse_session_custom_io(fs->se, &io, fuse_session_fd(fs->se));
}

int fs_pt_open(struct fs *fs, int fd)
{
	struct pt_backing_map m = { .fd = fd };
	int id;

	if (!atomic_load(&fs->pt_on))
		return -EOPNOTSUPP;
	id = ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_OPEN, &m);
	if (id > 0)
		return id;
	id = id < 0 ? errno : EIO;
	/* EPERM (no CAP_SYS_ADMIN), ENOTTY (no passthrough after all):
	 * the usual path from now on. */
	if (atomic_exchange(&fs->pt_on, false))
		fprintf(stderr, "fmfs: FUSE passthrough unavailable (%s); "
			"writes go through the daemon\n", strerror(id));
	return -id;
}

void fs_pt_close(struct fs *fs, int id)
{
	uint32_t v = (uint32_t)id;

	if (id > 0 && ioctl(fuse_session_fd(fs->se), PT_IOC_BACKING_CLOSE,
			    &v) < 0)
		fprintf(stderr, "fmfs: closing passthrough backing %d: %s\n",
			id, strerror(errno));
}

void fs_pt_mark_reply(int id)
{
	pt_next_reply = id;
}

/* h joins the inode's backing file: h's dirty file becomes x->pt_w
 * (the one the kernel writes), held while h is open. */
static void join(struct fs_inode_x *x, struct fs_handle *h)
{
	struct cache_wfile *old = h->w;
	bool held = h->writer || h->pin;

	if (old != x->pt_w) {
		cache_w_ref(x->pt_w);
		cache_w_writer(x->pt_w, true);
		h->w = x->pt_w;
		if (old && held)
			cache_w_writer(old, false);
		cache_w_put(old);
	} else if (!held) {
		cache_w_writer(x->pt_w, true);
	}
	if (!h->writer)
		h->pin = true;
}

int fs_pt_choose(struct fs *fs, struct fs_inode *in, struct fs_handle *h)
{
	struct fs_inode_x *x = in->x; /* made by fs_pt_choose_open */
	uint64_t room, cap;
	int id;

	util_assert(x);
	if (x->pt_open && !x->pt_w)
		/* The backing is a clean file: a writer is making it the
		 * dirty file (h found that one early), or h's dirty file is
		 * another, which the kernel would refuse. */
		return x->pt_adopting ? -EAGAIN : -EBUSY;
	if (x->pt_open) {
		/* The kernel allows one backing file per inode: whatever h
		 * found (the clean copy, another dirty file after a race with
		 * a rename), it uses the inode's. */
		join(x, h);
		x->pt_open++;
		h->pt = true;
		return x->pt_id;
	}
	if (!h->w || in->nopen || !atomic_load(&fs->pt_on))
		return 0;   /* open the usual way, as the others are */
	/* A write must drop set-id bits (fs_write_kill_suid), which a
	 * write through the kernel would not tell us about. */
	if (h->writer && in->has_attr && (in->mode & (S_ISUID | S_ISGID)))
		return 0;
	/* The cap is charged for what the kernel wrote only when we look
	 * (close, fsync, stat): a writer needs room to spare, and near a
	 * full cache writes take the usual path, which says ENOSPC. */
	room = cache_w_room(fs->cfg.cache, &cap);
	if (h->writer && (room < FS_PT_MIN_ROOM || room < cap / 4))
		return 0;
	id = fs_pt_open(fs, cache_w_fd(h->w));
	if (id <= 0)
		return 0;
	x->pt_id = id;
	x->pt_w = h->w;
	cache_w_ref(h->w);   /* the inode's, until its last such handle */
	join(x, h);
	x->pt_open = 1;
	h->pt = true;
	return id;
}

/* Checking a file at open reads it all once: a larger file takes the
 * usual path, which checks block by block as it is read, rather than
 * hold its open for seconds. */
#define FS_PT_CLEAN_MAX (1ull << 30)

void fs_pt_restore(struct fs *fs, struct fs_inode *in, struct fs_handle *h,
		   int id, uint64_t size)
{
	struct fs_inode_x *x = in->x; /* made by fs_handle_reopen */

	(void)fs;
	util_assert(x);
	if (!x->pt_open) {
		x->pt_id = id;
		if (h->w) {           /* a dirty file: as fs_pt_choose */
			x->pt_w = h->w;
			cache_w_ref(h->w);
		} else {              /* a clean one: as fs_pt_choose_clean */
			x->pt_cf = h->cf;
			x->pt_cf_size = size;
			h->cf = NULL;
		}
	} else if (x->pt_id != id) {
		fprintf(stderr, "fmfs: takeover: node id %llu had backing ids "
			"%d and %d\n", (unsigned long long)in->ino, x->pt_id,
			id);
	}
	if (x->pt_w)
		join(x, h);
	x->pt_open++;
	h->pt = true;
}

bool fs_pt_clean_wanted(struct fs *fs, struct fs_handle *h, int flags)
{
	struct cache_stats st;

	if (fs->cfg.mode == FS_MODE_IW || !atomic_load(&fs->pt_on) ||
	    !h->cf || (flags & O_ACCMODE) != O_RDONLY || !h->size_bytes ||
	    h->size_bytes > FS_PT_CLEAN_MAX)
		return false;
	cache_get_stats(fs->cfg.cache, &st);
	/* Pinned whole while open: at most a quarter of the cache. */
	return h->size_bytes <= st.cap_bytes / 4 &&
	       cache_file_complete(h->cf);
}

int fs_pt_choose_clean(struct fs *fs, struct fs_inode *in,
		       struct fs_handle *h, bool pinned, bool *kept)
{
	struct fs_inode_x *x = in->x; /* made by fs_pt_choose_open */
	int id;

	util_assert(x);
	*kept = false;
	if (x->pt_open && !x->pt_cf) {
		/* A dirty backing (read-write mounts): h reads it, held as
		 * the inode's dirty file while open, as in fs_pt_choose. */
		join(x, h);
		x->pt_open++;
		h->pt = true;
		return x->pt_id;
	}
	if (x->pt_open) {
		/* One backing file per inode: a later open reads the version
		 * the first one opened, until the last of them closes (on a
		 * read-write mount, or until a writer makes it the dirty
		 * file: then it reads the writes). */
		x->pt_open++;
		h->pt = true;
		return x->pt_id;
	}
	if (!pinned || in->nopen)
		return 0;   /* open the usual way, as the others are */
	/* Read-write mounts: not while a dirty copy is being made or was
	 * made since h looked (h would read the old bytes), and not a
	 * set-id file (its writer must take the usual path to drop the
	 * bits, which a clean backing would forbid). */
	if (fs->cfg.mode != FS_MODE_RO &&
	    (x->w_making || atomic_load(&in->wgen) != atomic_load(&h->wgen) ||
	     (in->has_attr && (in->mode & (S_ISUID | S_ISGID)))))
		return 0;
	id = fs_pt_open(fs, cache_file_fd(h->cf));
	if (id <= 0)
		return 0;
	x->pt_id = id;
	x->pt_cf = h->cf;
	x->pt_cf_size = h->size_bytes;
	h->cf = NULL;
	x->pt_open = 1;
	h->pt = true;
	*kept = true;
	return id;
}

void fs_pt_opened(struct fs_handle *h)
{
	if (h->pt)
		atomic_fetch_add(&h->fs->pt_opens, 1);
	if (h->pt && h->cf) {   /* joined from the clean path */
		cache_file_close(h->cf);
		h->cf = NULL;
	}
	if (h->pin && !h->pt) {   /* the usual path: no need to hold it */
		cache_w_writer(h->w, false);
		h->pin = false;
	}
	if (h->pt && h->writer)
		cache_w_external(h->w, true);
}
