/* SPDX-License-Identifier: MIT */
/*
 * fs.h - the FUSE filesystem of fmfs (libfuse3 low-level API) over the
 * cache (cache/) and the object store (objstore/): prefixes appear as
 * directories, listings come from paginated ListObjectsV2 cached for
 * `refresh_s`, file bytes come from the cache, files written through the
 * mount go to the bucket by the cache's write-back (cache/wb.h), and a
 * control socket answers `fmfs status / flush / prefetch / evict` and the
 * drain of `fmfs umount`.
 *
 * fs_run mounts, serves until the filesystem is unmounted (fusermount3 -u,
 * `fmfs umount`) or the process gets SIGTERM/SIGINT/SIGHUP, then unmounts
 * and returns.  It does not fork: daemonizing is the caller's business.
 */
#ifndef FMFS_FS_H
#define FMFS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "objstore/objstore.h"

enum fs_mode {
	FS_MODE_RO = 0,  /* read-only: writes fail with EROFS */
	FS_MODE_SW,      /* single writer (this cache) */
	FS_MODE_IW,      /* independent writers: revalidate */
	FS_MODE_LU,      /* local updates, never pushed */
};
/* "ro" -> FS_MODE_RO ...; -1 if unknown. */
int fs_mode_parse(const char *s);
const char *fs_mode_name(enum fs_mode m);

struct fs_config {
	const char *mountpoint;
	const char *store_url;      /* for messages and `fmfs status` */
	struct obj_store *st;       /* borrowed */
	struct cache *cache;        /* borrowed */
	enum fs_mode mode;
	unsigned refresh_s;         /* listing/attribute revalidation */
	unsigned negative_refresh_s; /* a name missing from a listing this
	                             * old is asked of the store (at most
	                             * refresh_s) */
	unsigned meta_heads;        /* HEADs behind listings at once (ns) */
	unsigned async_delay_ms;    /* upload this long after close/fsync */
	unsigned uploaders;         /* files uploaded at once; 0: 4 */
	unsigned threads;           /* FUSE worker threads; 0: 8 */
	const char *fuse_opts;      /* extra -o options, or NULL */
	const char *ctl_path;       /* control socket path */
	int ready_fd;               /* written "ok\n" once mounted; -1 none */
	bool debug;                 /* FUSE debug output */
	bool passthrough;           /* FUSE passthrough for dirty files, if
	                             * the kernel has it and we may use it */
	bool uring;                 /* FUSE over io_uring, if the kernel
	                             * offers it */
	/* What an object shows while the attributes stored with it are not
	 * known (or it has none): -1 for the defaults, FS_FILE_MODE,
	 * FS_DIR_MODE and the user who mounted. */
	int file_mode, dir_mode;
	int64_t uid, gid;
	bool no_allow_other;        /* root mounts add allow_other unless */
	/* Directory entries of the listings kept in memory; more come from
	 * the cache index (docs/semantics.md "Memory").  0: FS_MEM_ENTRIES */
	uint64_t listing_mem_entries;
	/* Inodes the kernel may hold; past it, it is asked to drop names
	 * that no open file or link needs, in hash order, down to 90%
	 * (fs_inodes_trim; an LRU would cost 16 bytes an inode).
	 * 0: FS_MEM_INODES */
	uint64_t inode_max;
	bool disconnected;          /* the store did not answer at mount:
	                             * start from what the cache knows */
	const char *metrics_addr;   /* serve /metrics there, or NULL */
	/* A keeper (docs/keeper.md): the takeover region (fs_tk_region_*),
	 * -1 without; the socket to hand it /dev/fuse by, -1 none; and for
	 * a new daemon, the mount's /dev/fuse to serve instead of
	 * mounting.  0 or less: none (0-2 are the standard streams, so a
	 * config that does not name them leaves them off). */
	int tk_fd, keeper_sock, tk_fuse_fd;
};

#define FS_MEM_ENTRIES 65536
#define FS_MEM_INODES 65536

#define FS_FILE_MODE 0600
#define FS_DIR_MODE 0755

/* Mounts and serves.  Returns 0 after a clean unmount, FS_RUN_RESTART
 * when `fmfs restart` asked for a new daemon (the mount stays, for the
 * keeper's next daemon: docs/keeper.md), or -errno with msg set when
 * mounting failed. */
#define FS_RUN_RESTART 1
int fs_run(const struct fs_config *cfg, char *msg, size_t msg_len);

/* The keeper's side of a takeover (fs/takeover.c, docs/keeper.md).
 * A region: a memfd, or -errno.  begin: notes a takeover for cause
 * (counted, shown by `fmfs status`), 0 if it can be trusted, else
 * -errno with why.  refused: the reason a new daemon wrote.  The
 * /dev/fuse descriptor goes from a daemon to its keeper by SCM_RIGHTS. */
#define FS_TK_EXIT_REFUSED 86 /* a new daemon's exit: no takeover */
#define FS_TK_EXIT_RESTART 87 /* `fmfs restart`: take over, a new binary */
int fs_tk_region_create(void);
int fs_tk_region_begin(int fd, const char *cause, char *why, size_t wl);
int fs_tk_region_refused(int fd, char *why, size_t wl);
int fs_tk_send_fd(int sock, int fd);
int fs_tk_recv_fd(int sock);   /* the descriptor, or -errno */

/* Whether libfuse takes opts as extra -o options (fs_config.fuse_opts),
 * without mounting: 0, or -EINVAL with libfuse's reason in msg.  For a
 * check before the daemon starts; not thread-safe (it redirects
 * libfuse's log while it asks). */
int fs_check_fuse_opts(const char *opts, char *msg, size_t msg_len);

/* Name of the xattr on the mount's root directory whose value is the
 * control socket's path. */
#define FS_CTL_XATTR "user.fmfs.control"

/* Control protocol (one request per connection, a line each way):
 *   "restart"           -> "ok", then this daemon stops serving and exits
 *                          without unmounting, for its keeper to start a
 *                          new one ("error MESSAGE" without a keeper)
 *   "status"            -> text lines "name: value"
 *   "status-json"       -> one JSON object
 *   "prefetch[-wait] P" -> warm path P (a file or a directory tree,
 *                          relative to the mount root); "-wait" answers
 *                          after the bytes are cached: "ok N files B bytes
 *                          E errors" (or "error MESSAGE")
 *   "evict P"           -> drop P's cached blocks ("ok N" / "error ...")
 *   "flush[-wait] T P"  -> upload what is dirty under P ("" or "." for
 *                          all) now; "-wait" answers once it is in the
 *                          bucket ("ok") or after T seconds / when every
 *                          file left failed once: "error N not uploaded"
 *                          then one "KEY: ERROR" line each
 *   "drain T P"         -> flush-wait, but "ok" in modes lu and ro (umount)
 * Answers end with the connection closing. */

#endif /* FMFS_FS_H */
