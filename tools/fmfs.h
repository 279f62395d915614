/* SPDX-License-Identifier: MIT */
/*
 * fmfs.h - shared by fmfs's files (tools/fmfs*.c): the subcommands the
 * table in fmfs.c dispatches to, and what mount and the control verbs
 * both use.
 *
 * fmfs_mount.c: mount (checks, then a daemon that serves the mount and
 * its control socket).  fmfs_ctl.c: umount, flush, status, prefetch,
 * evict, the verbs that find a running mount's control socket through an
 * xattr on its root and talk to the daemon there.  fmfs_obj.c: obj, the
 * object-store client by hand.  Each cmd_<verb>() gets argv[0] the verb
 * and returns an exit code of tools.h.
 */
#ifndef FMFS_TOOLS_FMFS_H
#define FMFS_TOOLS_FMFS_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "tools.h"

int cmd_mount(int argc, char **argv);     /* fmfs_mount.c */
int cmd_umount(int argc, char **argv);    /* fmfs_ctl.c */
int cmd_flush(int argc, char **argv);
int cmd_restart(int argc, char **argv);  /* fmfs_ctl.c */
int cmd_status(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_prefetch(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_obj(int argc, char **argv);       /* fmfs_obj.c */
/* mount.fmfs SOURCE DIR [-sfnv] [-o OPTIONS] (fmfs_helper.c). */
int fmfs_mount_helper(int argc, char **argv);

/* fmfs mount's long options, ending with a NULL name: the helper's -o
 * spellings. */
struct option;
const struct option *fmfs_mount_options(void);

/* Is real (a path realpath made) the root of a mount, per
 * /proc/self/mountinfo?  mount refuses a busy mountpoint; umount still
 * unmounts one whose daemon is gone. */
bool fmfs_is_mounted(const char *real);

/* The topmost mount on real, per /proc/self/mountinfo. */
struct fmfs_mount_info {
	char fstype[64];     /* "fuse.fmfs" for an fmfs mount */
	long long owner_uid; /* a FUSE mount's user_id=, else -1 */
};
/* Fills mi and returns true if something is mounted on real. */
bool fmfs_mount_find(const char *real, struct fmfs_mount_info *mi);

/* "alice (uid 1000)" for a mount's owner_uid ("another user" for -1):
 * whom to ask, in messages. */
void fmfs_owner_str(long long uid, char *buf, size_t len);

/* The absolute path of p without resolving its last component, which
 * may be a dead mount or one this user may not enter (realpath fails
 * there).  0, or -1. */
int fmfs_abs_path(const char *p, char *out, size_t len);

/* fmfs_cachedir.c: a cache dir the mount refuses (inside mnt_real, the
 * file:// store of url or around it, holding files fmfs did not make),
 * with the message on stderr: EXIT_USAGE, else EXIT_OK. */
int fmfs_cache_place_check(const char *cache_dir, const char *mnt_real,
			   const char *url);
/* Whether path is a directory with nothing in it. */
bool fmfs_dir_is_empty(const char *path);
/* After a failed mount: removes what it made in cache_dir (made: the
 * topmost directory it created, or ""; was_empty: the dir was there,
 * empty); never touches a cache dir that held anything before. */
void fmfs_cache_undo(const char *cache_dir, const char *made,
		     bool was_empty);

/* The errno a dead mount answers, as one: ENOTCONN, and ECONNABORTED
 * for a moment after the daemon died, while the kernel aborts the
 * connection.  e itself otherwise. */
static inline int fmfs_dead_errno(int e)
{
	return e == ECONNABORTED ? ENOTCONN : e;
}

/* Unmounts real: umount2() as root, else fusermount3 -u (its messages
 * go to stderr); lazy detaches it even while busy.  0, or -1. */
int fmfs_unmount(const char *real, bool lazy);
/* Where control sockets live: /run/fmfs for root, else
 * $XDG_RUNTIME_DIR, else /tmp (made 0700 if missing). */
const char *fmfs_rundir(void);
/* Removes this user's control sockets in rundir that nobody listens on
 * (left by daemons killed with kill -9), up to 256 a call (fmfs_ctl.c). */
void fmfs_ctl_sweep(const char *rundir);

/* A mount's membership of a cache group (fmfs_group.c).  check: reads
 * and checks the list and the secret (0, or -errno with msg).  start:
 * the same, then the peer client and server beside cache c, and a
 * re-reader for a list given as a file; transport is --peer-transport
 * (NULL: auto).  stop_serving: no more requests
 * from peers (before the cache closes).  free: the rest (after it). */
struct cache;
struct fmfs_group;
int fmfs_group_check(const char *peers, const char *listen,
		     const char *secret_file, const char *transport,
		     char *msg, size_t ml);
int fmfs_group_start(const char *peers, const char *listen,
		     const char *secret_file, unsigned timeout_ms,
		     unsigned total_ms, const char *transport, struct cache *c,
		     struct fmfs_group **out, char *msg, size_t ml);
void fmfs_group_stop_serving(struct fmfs_group *gr);
void fmfs_group_free(struct fmfs_group *gr);

/* fmfs_keeper.c: runs the daemons of a --keeper mount, each a fork
 * calling serve (docs/keeper.md); the last one's exit status. */
struct mount_opts;
#define EXIT_TAKEOVER_REFUSED FS_TK_EXIT_REFUSED /* fs/fs.h */
int fmfs_keeper_run(struct mount_opts *o, int ready_fd,
		    int (*serve)(struct mount_opts *, int, char *, size_t));
/* The daemon a keeper ran again for `fmfs restart` (the environment
 * names its descriptors and paths): serves, and returns its status;
 * -1 when this process is no such daemon. */
int fmfs_keeper_daemon(int argc, char **argv,
		       int (*serve)(struct mount_opts *, int, char *, size_t));

/* fmfs_mount_opts.c: `fmfs mount`'s options, for fmfs_mount.c */
struct mount_opts {
	struct obj_config obj;
	const char *url, *mountpoint, *cache_dir, *fuse_opts;
	const char *metrics_addr; /* --metrics */
	const char *peers, *peer_listen, *peer_secret_file; /* the group */
	unsigned peer_timeout_ms;
	const char *peer_transport;  /* auto, tcp or a libfabric provider */
	bool peer_keep_local;
	/* The group's files as absolute paths: the daemon runs in /. */
	char peers_real[PATH_MAX], secret_real[PATH_MAX];
	const char *cache_size_arg;   /* as given, for messages */
	uint64_t cache_size;
	int mode;
	unsigned refresh_s, negative_refresh_s, threads, fetch_timeout_s;
	unsigned meta_heads;        /* --meta-heads */
	unsigned async_delay_s, upload_parallel;
	bool foreground, debug, no_passthrough, no_uring;
	/* A keeper (docs/keeper.md): on unless --no-keeper, or
	 * --foreground/--debug without --keeper.  keeper_given: --keeper. */
	bool keeper, keeper_given, no_keeper;
	/* Set by the keeper for the daemon it forks: fs_config's tk_fd,
	 * keeper_sock and tk_fuse_fd (0 or less: none). */
	int tk_fd, keeper_sock, tk_fuse_fd;
	/* For `fmfs restart` (fmfs_keeper.c): the command line of `fmfs
	 * mount` and its working directory, run again by the keeper. */
	int argc;
	char **argv;
	char cwd[PATH_MAX];
	int file_mode, dir_mode;    /* -1: fs's defaults (attr_opt) */
	int64_t uid, gid;
	bool no_allow_other;
	uint64_t mem_entries, mem_inodes, namespace_bytes; /* 0: defaults */
	bool disconnected;          /* the store did not answer (precheck) */
	char mnt_real[PATH_MAX], cache_real[PATH_MAX], ctl_path[256];
	char cache_def[PATH_MAX];   /* the default cache dir, when chosen */
	/* What this mount made, for a failed one to remove (undo_cache_dir):
	 * the topmost directory it created on the way to cache_dir, or the
	 * cache dir's contents when it was there but empty. */
	char cache_made[PATH_MAX];
	bool cache_was_empty;
};
/* Parses and checks argv into o (--help prints the usage and exits 0):
 * 0, or -1 once it has said what was wrong (exit EXIT_USAGE). */
int fmfs_parse_mount_opts(int argc, char **argv, struct mount_opts *o);

#endif /* FMFS_TOOLS_FMFS_H */
