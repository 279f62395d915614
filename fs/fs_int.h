/* SPDX-License-Identifier: MIT */
/*
 * fs_int.h - shared by the files of the fs module: the inode table and
 * cached directory listings (inode.c), the FUSE operations (fs.c,
 * write.c, names.c, link.c) and the control socket (ctl.c).
 */
#ifndef FMFS_FS_INT_H
#define FMFS_FS_INT_H

/* 312: fuse_session_loop_mt then takes the fuse_loop_cfg_* config we
 * build.  With an older version it is the 3.2 entry point, which reads
 * that config as the old struct (max_idle_threads 1): a worker thread
 * started and ended for every request, writes ran at half speed. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/wb.h"
#include "fs.h"
#include "metrics/metrics.h"
#include "ns/ns.h"
#include "util/util.h"

/* The FUSE operations, for their counts and latency (metrics.c). */
enum fs_op {
	FSOP_lookup, FSOP_forget, FSOP_forget_multi, FSOP_getattr,
	FSOP_setattr, FSOP_readlink, FSOP_mknod, FSOP_mkdir, FSOP_unlink,
	FSOP_rmdir, FSOP_symlink, FSOP_rename, FSOP_link, FSOP_open,
	FSOP_read, FSOP_flush, FSOP_release, FSOP_fsync, FSOP_opendir,
	FSOP_readdir, FSOP_releasedir, FSOP_statfs, FSOP_setxattr,
	FSOP_getxattr, FSOP_listxattr, FSOP_removexattr, FSOP_create,
	FSOP_write_buf, FSOP_readdirplus, FSOP_N
};
/* fuse_reply_err, counting errors of the operation this thread runs
 * (metrics.c): every error reply of the module is made with it. */
int fs_reply_err(fuse_req_t req, int err);

/* The largest read request: 1 MiB less 16 KiB, so that a reply, its
 * header and libfuse's slack fit a pipe of pipe-max-size (1 MiB) and go
 * to /dev/fuse by splice; at 1 MiB libfuse needs a bigger pipe, which
 * takes CAP_SYS_RESOURCE, and falls back to a copy through a buffer. */
#define FS_MAX_READ ((1u << 20) - (16u << 10))
#define FS_LINK_BUCKETS 1024 /* hash of hard links' extra names */
#define FS_LINK_MAX 1000     /* names of one file (st_nlink, EMLINK) */
#define FS_TRIM_MAX 65536    /* names the kernel is asked to drop a second */
#define FS_PROVISIONAL_S 1.0 /* attributes shown from a listing: kept by
                              * the kernel this long at most */

/* What only some inodes need: an open file's or directory's state, a
 * file's hard links, its cached user metadata.  Allocated at the first
 * open, opendir, link or xattr read (fs_inode_x), freed with the inode;
 * the many names a walk leaves with the kernel never need one
 * (docs/performance.md, "Namespace: warm remounts, a million objects").
 * Protected by fs->lock. */
struct fs_inode_x {
	uint64_t open_etag;        /* version at the last open (keep_cache):
	                            * fs_etag_hash of its ETag, 0 none */
	uint64_t rd_fetched_ms;    /* a directory's listing the kernel last
	                            * cached (opendir) */
	unsigned pt_open;          /* of the open handles, those through
	                            * backing pt_id: 0 or nopen (see
	                            * passthrough.c) */
	int pt_id;
	struct cache_wfile *pt_w;  /* the backing file (a reference) */
	struct cache_file *pt_cf;  /* or a clean file's, every block pinned
	                            * (on a read-write mount its name kept:
	                            * cache_file_keep_name) */
	uint64_t pt_cf_size;
	unsigned w_making;         /* dirty copies of the object being made
	                            * (fs_materialize): no clean backing now */
	unsigned held_deletes;     /* tombstones waiting for the last close */
	struct cache_wfile *w_dead; /* its dirty file once unlinked, for
	                            * attributes */
	bool pt_w_pin;             /* the inode holds pt_w as a writer: the
	                            * clean backing became it (fs_materialize)
	                            * under handles that hold nothing */
	bool pt_adopting;          /* a writer is turning pt_cf into a dirty
	                            * file: other opens wait for pt_w */
	/* Hard links (link.c): the file's other names, each a copy in the
	 * bucket; while there is one the inode is kept (not freed at
	 * nlookup 0). */
	unsigned nlinks;
	struct fs_link *links;
	/* user metadata (xattrs) and Content-Type (NULL: none), fetched
	 * by HEAD; a metadata rewrite keeps both */
	struct obj_kv *meta;
	size_t nmeta;
	char *ctype;
	uint64_t meta_ms;
	uint32_t rdev;             /* a device node's (else 0) */
	bool restored;             /* from a dead daemon's journal, its
	                            * attributes not yet asked for
	                            * (tk_replay.c) */
	bool tk_times;             /* restored: mtime_ns and ctime_ns are the
	                            * journal's, to stand over the store's */
};

/* All zero: what an inode without its fs_inode_x has (fs_xr). */
extern const struct fs_inode_x fs_inode_x_none;

struct fs_inode {
	fuse_ino_t ino;
	struct fs_inode *parent;   /* holds a reference while we exist */
	char *key;                 /* file: "a/b"; dir: "a/b/"; root: "";
	                            * one allocation with the name, at
	                            * name_off (fs_iname) */
	/* Each field beside one of its size, the flags together: there is
	 * one of these per name the kernel holds (docs/performance.md,
	 * "Namespace: warm remounts, a million objects"). */
	unsigned children;         /* inodes and links naming us as parent */
	atomic_uint wgen;          /* bumped when a new dirty file is made:
	                            * read handles look for it (fs_handle_w) */
	uint16_t name_off;         /* the name: key + name_off ("" for the
	                            * root) */
	uint16_t mode;             /* permission bits (below) */
	uint8_t ftype_c;           /* ftype >> 12 (fs_ftype): ns_entry's
	                            * ftype; set once, never changed (the
	                            * kernel's type of an inode is fixed) */
	bool is_dir;
	bool has_attr;             /* mode/uid/gid/mtime_ns below are set:
	                            * the object's as stored, the defaults
	                            * for what it does not store */
	bool unlinked;             /* out of the namespace (unlink, replaced) */
	/* attributes; protected by fs->lock */
	uint64_t size_bytes;
	int64_t mtime_s;
	struct util_etag etag;     /* its version (util/etag.c) */
	uint32_t attr_ds;          /* when last confirmed with the store:
	                            * util_now_ms() / 100, 0 never
	                            * (fs_attr_age_ms) */
	/* POSIX attributes from object metadata or our own writes; without
	 * them (has_attr false) the inode shows the configured defaults
	 * (fs_fill_attr), which are never more than FS_FILE_MODE's; a
	 * device's rdev, and a restored inode's marks, are in its
	 * fs_inode_x */
	uint32_t uid, gid;
	unsigned nopen;            /* open handles (a delete waits for 0) */
	int64_t mtime_ns;
	int64_t ctime_ns, atime_ns; /* 0: as mtime_ns */
	uint64_t nlookup;          /* kernel references; protected by lock */
	struct fs_inode_x *x;      /* NULL until needed (fs_inode_x) */
	struct fs_inode *next_ino, *next_name; /* hash chains */
	char kbuf[];               /* the key and name made with the inode
	                            * (key points here until a rename gives
	                            * it a block of its own): one allocation
	                            * an inode, not two */
};

/* in's type: its S_IFMT bits (0: a regular file), and to set it. */
static inline uint32_t fs_ftype(const struct fs_inode *in)
{
	return (uint32_t)in->ftype_c << 12;
}

static inline void fs_set_ftype(struct fs_inode *in, uint32_t ftype)
{
	in->ftype_c = (uint8_t)((ftype & S_IFMT) >> 12);
}

/* in's attributes confirmed with the store now, forgotten, and how long
 * ago they were (UINT64_MAX: never). */
static inline void fs_attr_confirmed(struct fs_inode *in)
{
	uint64_t ds = util_now_ms() / 100;

	in->attr_ds = ds ? (uint32_t)ds : 1;
}

static inline uint64_t fs_attr_age_ms(const struct fs_inode *in)
{
	uint64_t now = util_now_ms();

	if (!in->attr_ds || now < (uint64_t)in->attr_ds * 100)
		return in->attr_ds ? 0 : UINT64_MAX;
	return now - (uint64_t)in->attr_ds * 100;
}

/* in's name in its directory. */
static inline const char *fs_iname(const struct fs_inode *in)
{
	return in->key + in->name_off;
}

/* in's fs_inode_x to read: all zero when it has none. */
static inline const struct fs_inode_x *fs_xr(const struct fs_inode *in)
{
	return in->x ? in->x : &fs_inode_x_none;
}

/* in's fs_inode_x to change, made if it has none (fs->lock held); NULL
 * when out of memory. */
struct fs_inode_x *fs_inode_x(struct fs_inode *in);

/* The fields of fs_inode_x that a plain inode leaves zero, set (fs->lock
 * held; a value other than zero on an inode without one makes it: false
 * when out of memory). */
static inline bool fs_set_rdev(struct fs_inode *in, uint32_t rdev)
{
	struct fs_inode_x *x = rdev || in->x ? fs_inode_x(in) : NULL;

	if (x)
		x->rdev = rdev;
	return x || !rdev;
}

static inline bool fs_set_restored(struct fs_inode *in, bool restored,
				   bool tk_times)
{
	struct fs_inode_x *x = restored || tk_times || in->x ?
			       fs_inode_x(in) : NULL;

	if (x) {
		x->restored = restored;
		x->tk_times = tk_times;
	}
	return x || (!restored && !tk_times);
}

/* One more name of a file (a hard link, link.c): dir/name, whose key
 * holds a copy of the file that follows each of its changes.  The
 * file's first name stays in->parent, fs_iname(in), in->key. */
struct fs_link {
	struct fs_inode *in;
	struct fs_inode *dir;      /* counted in dir->children */
	char *name;
	struct fs_link *next_hash; /* fs->links */
	struct fs_link *next_in;   /* fs_inode_x.links */
	uint64_t synced;           /* cache_w_version of the dirty file last
	                            * copied here (0: none); link_lock */
};

struct fs {
	struct fs_config cfg;
	struct fuse_session *se;
	pthread_mutex_t lock;      /* inode tables and attributes */
	struct fs_inode **by_ino, **by_name;
	size_t nbuckets, ninodes;
	fuse_ino_t next_ino;
	struct fs_inode *root;
	struct ns *ns;             /* names, listings, metadata (ns/ns.h) */
	/* hard links by (dir, name), FS_LINK_BUCKETS; protected by lock */
	struct fs_link **links;
	atomic_uint links_total;   /* their number */
	/* Held by every change of a file with links or of its names (link,
	 * unlink, rename, the copies' updates), so that the copies are made
	 * under the names of the moment; taken before lock.  The table
	 * changes only under both. */
	pthread_mutex_t link_lock;
	/* counters for `fmfs status` */
	atomic_uint_fast64_t lookups, opens, reads;
	atomic_uint_fast64_t getxattrs, open_files;
	pthread_mutex_t probe_lock; /* probe_stop; probe_cond wakes it */
	pthread_cond_t probe_cond;
	pthread_t probe_thread;
	bool probe_stop, probe_started;
	size_t trim_cursor;        /* where fs_inodes_trim looks next (lock) */
	uint64_t inodes_freed;     /* inodes freed, ever (lock); the prober
	                            * gives the heap's free pages back once
	                            * it stops moving */
	atomic_uint_fast64_t trimmed; /* names the kernel was asked to drop */
	/* control socket */
	int ctl_fd;
	pthread_t ctl_thread;
	atomic_bool stopping;
	uint64_t started_ms;
	time_t mount_time_s;       /* directories' mtime */
	/* FUSE passthrough (passthrough.c) */
	atomic_bool pt_on;         /* the kernel took it; backing ids work */
	atomic_bool pt_init_seen;
	/* Takeover (takeover.c, docs/keeper.md): the region shared with the
	 * keeper, NULL without one; our handles' tag (low 4 bits of fh);
	 * the INIT of a new daemon, replayed to libfuse. */
	struct fs_tk *tk;
	struct fs_tkr *tkr;        /* tk_replies.c */
	unsigned tk_tag;
	bool tk_init_due;
	atomic_bool tk_init_done;  /* read without the lock once set */
	atomic_bool tk_restart;    /* `fmfs restart`: exit, keep the mount */
	uint64_t tk_init_unique;
	pthread_mutex_t tk_init_lock;
	pthread_cond_t tk_init_cond;
	atomic_bool pt_offered;    /* the kernel's INIT offered it */
	atomic_uint_fast64_t pt_init_unique; /* INIT to amend, unanswered */
	atomic_bool pt_killpriv2;  /* the INIT reply asks for
	                            * FUSE_HANDLE_KILLPRIV_V2 */
	atomic_uint_fast64_t pt_opens;       /* handles opened through one */
	atomic_uint_fast64_t pt_adopts;      /* clean backings made dirty
	                                      * files (fs_materialize) */
	/* FUSE over io_uring (uring.c) */
	atomic_bool ur_offered;    /* the kernel's INIT offered it, and
	                            * --no-uring was not given */
	atomic_bool ur_on;         /* its queues are registered */
	struct fs_uring *ur;       /* set once, before ur_on */
	char ur_why[160];          /* why not, when setting up failed */
	atomic_bool ur_kept;       /* offered, not used: a keeper's mount
	                            * (docs/keeper.md "The ring") */
	/* metrics (metrics.c) */
	struct util_hist op_hist[FSOP_N];   /* latency by operation */
	atomic_uint_fast64_t op_errs[FSOP_N];
	atomic_uint_fast64_t read_bytes;     /* answered to FUSE reads */
	atomic_uint_fast64_t prefetch_bytes; /* warmed by fmfs prefetch */
	struct metrics_http *metrics;        /* --metrics, or NULL */
};

/* The fs a request is for. */
static inline struct fs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* metrics.c */
/* Replaces each operation of ops with one that times it. */
void fs_metrics_wrap(struct fuse_lowlevel_ops *ops);
int fs_metrics_cur_op(void);  /* FSOP_* this thread runs, or -1 */
void fs_metrics_write(struct fs *fs, FILE *out);
void fs_metrics_render(FILE *out, void *fs); /* metrics_render_fn */

/* An open file: either a clean object read through the cache (cf, with
 * the reader's readahead state) or a dirty file of the write-back (w).  A
 * read holds a reference until it has unpinned its blocks: once its reply
 * is sent the kernel may deliver RELEASE on another thread. */
struct fs_handle {
	atomic_int refs;
	struct fs *fs;
	struct fs_inode *in;    /* for the open count (fs->lock) */
	struct cache_file *cf;
	struct cache_wfile *w;  /* a reader's may change: see fs_handle_w */
	struct cache_wfile **retired; /* a reader's earlier w: alive until the
	                               * handle goes (protected by lock) */
	size_t nretired;
	bool writer;            /* opened for writing: w is set */
	bool pt;                /* through a backing file: no READ/WRITE */
	bool pin;               /* a reader holding w as a writer would */
	atomic_uint wgen;          /* in->wgen when w was last looked up */
	pthread_mutex_t lock;   /* protects rd, and w of a reader */
	struct cache_reader rd;
	uint64_t size_bytes;
};

/* takeover.c: a mount that outlives its daemon (docs/keeper.md).  Every
 * call is a no-op without a keeper (fs->tk NULL). */
enum { FS_TK_DIR = 1, FS_TK_FILE };
struct fs_tk_info {
	int daemon_pid, keeper_pid;
	unsigned takeovers;
	int64_t last_ms, last_took_ms;
	unsigned resent;           /* requests the kernel sent again */
	unsigned given;            /* of those, answered as the daemon
	                            * before had (tk_replies.c) */
	unsigned done_before;      /* of those, found done by their
	                            * intent and answered so */
	char cause[128], refused[256];
	int keeper_lost;           /* the keeper's pid, gone (0: not) */
};
int fs_tk_attach(struct fs *fs, char *why, size_t wl); /* replays */
void fs_tk_detach(struct fs *fs);
/* Journal of what the kernel knows; fs->lock held for the inodes'. */
void fs_tk_inode_new(struct fs *fs, const struct fs_inode *in);
void fs_tk_inode_move(struct fs *fs, const struct fs_inode *in);
void fs_tk_inode_unlinked(struct fs *fs, const struct fs_inode *in);
void fs_tk_inode_drop(struct fs *fs, fuse_ino_t ino);
/* A directory's mtime and ctime changed (fs_dir_touch, setattr): they
 * are in this mount's memory only.  fs->lock held. */
void fs_tk_dir_times(struct fs *fs, const struct fs_inode *in);
/* A hard link's name dir/name of in (link.c) came, went (gone), or
 * moved to ndir/nname (both given): fs->lock held. */
void fs_tk_link(struct fs *fs, const struct fs_inode *in,
		const struct fs_inode *dir, const char *name, bool gone,
		const struct fs_inode *ndir, const char *nname);
void fs_tk_maybe_compact(struct fs *fs);
/* A handle's fh (p tagged) and back; a dead daemon's is reopened when
 * open_it (NULL with *err set when it cannot be; NULL and *err 0 when
 * !open_it and it never was). */
uint64_t fs_tk_fh(const struct fs *fs, const void *p);
void *fs_tk_handle(struct fs *fs, uint64_t fh, bool open_it, int *err);
void fs_tk_handle_open(struct fs *fs, uint64_t fh, fuse_ino_t ino,
		       int flags, int kind, int pt_id);
void fs_tk_handle_close(struct fs *fs, uint64_t fh);
/* passthrough.c's custom I/O: INIT kept, and given again to libfuse by
 * a new daemon (its reply swallowed, FUSE_NOTIFY_RESEND sent). */
void fs_tk_init_seen(struct fs *fs, const void *buf, size_t n);
ssize_t fs_tk_init_read(struct fs *fs, void *buf, size_t len);
bool fs_tk_init_reply(struct fs *fs, uint64_t unique, int fd);
void fs_tk_ring_used(struct fs *fs);
/* The keeper died (or was killed): a crash of this daemon now ends the
 * mount, as without one. */
bool fs_tk_keeper_lost(struct fs *fs);
bool fs_tk_ring_was_used(struct fs *fs);
void fs_tk_count_resent(struct fs *fs, const void *req); /* after INIT */
void fs_tk_init_wait(struct fs *fs); /* until the takeover serves */
void fs_tk_status(struct fs *fs, struct fs_tk_info *out);
size_t fs_tk_replies_off(void);  /* the replies' room in the region */
void fs_tk_count_given(struct fs *fs);
void fs_tk_count_done_before(struct fs *fs);

/* tk_replies.c: the replies to requests that must not run twice, kept
 * in the region until sent, and given again for a resent request
 * (docs/keeper.md "Requests done once").  fs_tkr_record: before a reply
 * is written (passthrough.c), its slot (or -1) to fs_tkr_sent once the
 * kernel has it; fs_tkr_answer: true when req was answered
 * so (libfuse must not see it); fs_tkr_pending: such replies may still
 * be asked for.  fs_tkr_intent: the operation this thread runs (once
 * only) is about to change what it names, its checks passed: kept until
 * its reply is written (fs_tkr_intent_end, passthrough.c); fs_tkr_look:
 * each request read, before libfuse sees it; fs_tkr_redo: the request
 * this thread runs was resent and the daemon before had begun it, so
 * the checks that failed (ENOENT, EEXIST...) mean it was done: answer as
 * done (true once; it says so in the log). */
#define FS_TKR_SIZE (64u * 256u)
#define FS_TKI_SIZE (64u * 8u)
void fs_tkr_attach(struct fs *fs);
void fs_tkr_detach(struct fs *fs);
int fs_tkr_record(struct fs *fs, const struct iovec *iov, int count);
void fs_tkr_sent(struct fs *fs, int slot, const struct iovec *iov);
void fs_tkr_serving(struct fs *fs);  /* the window starts */
bool fs_tkr_pending(struct fs *fs);
bool fs_tkr_answer(struct fs *fs, int fd, const void *req, size_t n);
void fs_tkr_intent(struct fs *fs, uint64_t nodeid, const char *name);
void fs_tkr_intent_end(struct fs *fs);
void fs_tkr_look(struct fs *fs, const void *req, size_t n);
bool fs_tkr_redo(struct fs *fs, const char *what, const char *name);
void fs_tkr_changed(struct fs *fs); /* FMFS_TK_FAULT=OP:changed */

/* mount.c: the uploaders and the prober, once mounted: 0 or -errno */
int fs_start_workers(struct fs *fs, char *msg, size_t ml);

/* passthrough.c: h takes over backing id (a dead daemon's, which the
 * kernel still uses for in); fs->lock held. */
void fs_pt_restore(struct fs *fs, struct fs_inode *in, struct fs_handle *h,
		   int id, uint64_t size);
/* tk_replay.c: the attributes of an inode restored from the journal,
 * asked for at its first use (lookup, getattr, setattr, an entry change
 * in it); a no-op once known.  No lock held. */
void fs_restored_attr(struct fs *fs, struct fs_inode *in);
/* fs.c: a handle of in for a dead daemon's open */
int fs_handle_reopen(struct fs *fs, struct fs_inode *in, int flags,
		     int pt_id, struct fs_handle **hp);

/* inode.c */
/* A 64-bit hash of an ETag, never 0 (FNV-1a). */
static inline uint64_t fs_etag_hash(const char *etag)
{
	uint64_t h = util_fnv1a64(UTIL_FNV64_BASIS, etag, strlen(etag));

	return h ? h : 1;
}
int fs_inodes_init(struct fs *fs);
void fs_inodes_free(struct fs *fs);
struct fs_inode *fs_inode_get(struct fs *fs, fuse_ino_t ino);  /* no ref */
/* An inode of a dead daemon's (tk_replay.c): node id ino, nlookup refs. */
struct fs_inode *fs_inode_restore(struct fs *fs, struct fs_inode *dir,
				  fuse_ino_t ino, const char *name,
				  bool is_dir, uint32_t ftype, bool unlinked,
				  uint64_t nlookup);
/* Finds or creates the inode for entry e in dir; takes one lookup
 * reference.  Called with fs->lock held. */
struct fs_inode *fs_inode_ref(struct fs *fs, struct fs_inode *dir,
			      const struct ns_entry *e);
/* fs_inode_ref with the attributes the cache index keeps for e's object
 * (its version's), when e has none; takes fs->lock itself. */
struct fs_inode *fs_inode_lookup(struct fs *fs, struct fs_inode *dir,
				 const struct ns_entry *e);
void fs_inode_forget(struct fs *fs, struct fs_inode *in, uint64_t n);
/* A file shown with a listing's values (has_attr false) takes the
 * attributes stored with its object once the cache index has them for
 * its version (a HEAD behind the listing, ns_heads_want); takes
 * fs->lock itself. */
void fs_inode_attr_known(struct fs *fs, struct fs_inode *in);
/* How long the kernel may keep in's attributes: a file whose stored
 * attributes are not known yet only briefly (FS_PROVISIONAL_S), so that
 * they show soon after the HEAD behind the listing lands.  Lock held. */
double fs_attr_ttl(const struct fs *fs, const struct fs_inode *in);
/* d_ino of dir/name in a plain readdir reply: its inode's number if the
 * kernel knows one, else a stable number that is not an inode's.  Never
 * 0: glibc's readdir skips an entry whose d_ino is 0.  Lock held. */
uint64_t fs_dirent_ino(struct fs *fs, const struct fs_inode *dir,
		       const char *name);
/* Frees in (and then its parents) if nothing holds it any more: no
 * kernel reference, no child, no hard link.  Lock held. */
void fs_inode_maybe_free(struct fs *fs, struct fs_inode *in);
/* The inode of key (file "a/b" or directory "a/b/"), if the kernel
 * knows it.  Lock held. */
struct fs_inode *fs_inode_by_key(struct fs *fs, const char *key);
/* After a rename: moves in under dir as name; descendants' keys follow.
 * An inode that was there (replaced) is unhashed.  Lock held. */
int fs_inode_move(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		  const char *name);
/* Takes in out of the name hash (unlinked, removed).  Lock held. */
void fs_inode_unhash(struct fs *fs, struct fs_inode *in);
/* fs.c: the operations of every mount (lookup, readdir, open, read) */
void fs_read_ops(struct fuse_lowlevel_ops *ops);
void fs_fill_attr(const struct fs *fs, const struct fs_inode *in,
		  struct stat *st);
void fs_refresh_from_w(struct fs *fs, struct fs_inode *in);
/* A dirty file's attributes a (cache_w_stat) onto in; takes fs->lock. */
void fs_take_wattr(struct fs *fs, struct fs_inode *in,
		   const struct cache_wattr *a);
void fs_reply_entry(fuse_req_t req, struct fs *fs, struct fs_inode *in);
int fs_load_meta(struct fs *fs, struct fs_inode *in);
/* HEADs a file once refresh_s has passed (the store down: keeps it). */
int fs_revalidate(struct fs *fs, struct fs_inode *in);
/* A directory's stored attributes, from its marker, when this cache does
 * not know them (one HEAD, kept in the index). */
void fs_dir_learn(struct fs *fs, struct fs_inode *in);
/* -EIO (logged) if the bucket's version etag of key is one whose newer
 * version the write-back lost (cache_w_lost_version); else 0. */
int fs_lost_check(struct fs *fs, const char *key, const char *etag);

/* write.c: the operations that change things */
/* Open of a dirty file, or for writing (h->w set): 0; 1 if the clean
 * read path applies; -errno. */
int fs_open_w(struct fs *fs, struct fs_inode *in, int flags,
	      struct fs_handle *h);
void fs_write_ops(struct fuse_lowlevel_ops *ops);
/* names.c */
void fs_op_readlink(fuse_req_t req, fuse_ino_t ino);
/* fs.c: LOOKUP's answer (also a redone mkdir's: tk_replies.c) */
void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_on_done(void *arg, const char *key, const char *etag, uint64_t size,
		bool deleted);
void fs_handle_put(struct fs_handle *h);

/* write.c, for names.c: the entry of a new dirty name under dir (a
 * reference the caller replies with), and the attributes of one made by
 * req's caller now */
struct fs_inode *fs_new_entry(struct fs *fs, struct fs_inode *dir,
			      const char *name, const struct cache_wattr *a);
void fs_ctx_attr(fuse_req_t req, enum cache_wkind kind, mode_t mode,
		 struct cache_wattr *a);
/* names.c: mkdir, mknod, symlink, unlink, rmdir, rename */
void fs_names_ops(struct fuse_lowlevel_ops *ops);

/* write.c, for link.c and names.c */
int fs_child_key(struct fs *fs, const struct fs_inode *dir,
		 const char *name, bool is_dir, char *key, size_t len,
		 const char *what);
struct fs_inode *fs_dir_of(struct fs *fs, fuse_ino_t ino, int *err);
void fs_dir_touch(struct fs *fs, struct fs_inode *dir);
int fs_materialize(struct fs *fs, struct fs_inode *in, bool truncate,
		   struct cache_wfile **out);

/* attr.c: setattr and the xattr operations */
/* getxattr and listxattr; with writable setattr, setxattr, removexattr. */
void fs_attr_ops(struct fuse_lowlevel_ops *ops, bool writable);
/* Stored attributes a, with the defaults for what a lacks (from the
 * cache index, a HEAD), into an inode (lock held). */
void fs_attr_apply(const struct fs *fs, struct fs_inode *in,
		   const struct cache_attr *a);
/* A clean file's attributes: from its metadata, else the defaults; and
 * its version (etag, may be NULL) as of the same moment. */
void fs_attr_of(struct fs *fs, struct fs_inode *in, struct cache_wattr *a,
		char etag[80]);
/* Rewrites a clean object's metadata (attributes per mask; ctime now). */
int fs_copy_meta(struct fs *fs, struct fs_inode *in,
		 const struct cache_wattr *a, unsigned mask,
		 const char *xname, const char *xval, size_t xlen,
		 int xflags);
/* The set-id bits a write or a chown by someone without CAP_FSETID
 * drops, as a local disk does: set-user-ID always, set-group-ID when
 * group execution is on (otherwise it marks mandatory locking). */
static inline uint32_t fs_suid_bits(uint32_t mode)
{
	return (mode & S_ISUID) |
	       ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) ?
		S_ISGID : 0);
}

/* link.c: hard links within one mount (docs/posix.md "Hard links").
 * Each extra name is a key of its own in the bucket holding a copy of
 * the file, brought up to date after each change of the file (close,
 * fsync, setattr, xattrs); in this mount every name is the one inode. */
void fs_link_op(struct fuse_lowlevel_ops *ops);
/* The file dir/name is an extra name of (lock held), or NULL. */
struct fs_inode *fs_link_inode(struct fs *fs, const struct fs_inode *dir,
			       const char *name);
/* The same, taking the lock: whether dir/name is such a name. */
bool fs_link_named(struct fs *fs, const struct fs_inode *dir,
		   const char *name);
/* Brings every extra name of in up to date with the file as committed
 * (dirty: copies of its dirty file, committed with durable; clean: a
 * server-side copy).  0 at once for a file with no links. */
int fs_link_sync(struct fs *fs, struct fs_inode *in, bool durable);
/* Before unlink of file dir/name (key): if that name is one of a file
 * with hard links, removes it (the others stay), touches the file's
 * ctime and returns 0 or -errno; 1 if it is not such a name (the usual
 * path then). */
int fs_link_unlink(struct fs *fs, struct fs_inode *dir, const char *name,
		   const char *key, const struct ns_entry *e);
/* Whether any file of the mount has links (op_rename then holds
 * link_lock: fs_link_lock/fs_link_unlock). */
bool fs_links_any(struct fs *fs);
void fs_link_lock(struct fs *fs);
void fs_link_unlock(struct fs *fs);
/* Before rename of file sdir/name over ddir/newname (exists: there is a
 * file there), link_lock held.  *same: both are names of one file
 * (rename does nothing).  A destination that is the first name of a file
 * with links: another of its names takes its place first (*promoted:
 * that file, for fs_link_rename_post).  Returns 0 or -errno. */
int fs_link_rename_pre(struct fs *fs, struct fs_inode *sdir,
		       const char *name, struct fs_inode *ddir,
		       const char *newname, bool exists, bool *same,
		       struct fs_inode **promoted);
/* After the keys moved (lock held): the extra name sdir/name is
 * ddir/newname now; a file whose extra name ddir/newname was replaced
 * loses it, and is returned (for fs_link_rename_post) or NULL. */
struct fs_inode *fs_link_renamed(struct fs *fs, struct fs_inode *sdir,
				 const char *name, struct fs_inode *ddir,
				 const char *newname);
/* After the rename (rc its result), link_lock held: a promoted file gets
 * its name back if the rename failed; the ctime of the files that lost a
 * name moves. */
void fs_link_rename_post(struct fs *fs, struct fs_inode *promoted,
			 struct fs_inode *taken, struct fs_inode *ddir,
			 const char *newname, int rc);
/* Frees every link (unmount). */
void fs_links_free(struct fs *fs);
/* A link read back from the takeover journal (the new daemon, before it
 * serves): dir/name is one more name of in. */
int fs_link_restore(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		    const char *name);
/* Each link's (in, dir, name), for the journal's compaction (lock
 * held). */
void fs_links_each(struct fs *fs, void (*fn)(void *arg,
		   const struct fs_inode *in, const struct fs_inode *dir,
		   const char *name), void *arg);

/* prober.c */
/* Past cfg.inode_max inodes: asks the kernel to drop names nothing of
 * ours needs (FUSE notify_inval_entry), whose FORGETs free the inodes.
 * Returns how many were asked.  No lock held. */
size_t fs_inodes_trim(struct fs *fs);
/* The thread that trims inodes, and asks a store found unreachable
 * (ns_store_probe) until it answers. */
int fs_probe_start(struct fs *fs);
void fs_probe_stop(struct fs *fs);

/* uring.c: FUSE over io_uring (docs/fuse-uring.md) */
struct fs_uring;
struct fs_uring_stats {
	unsigned queues, rings, depth; /* queues: one a CPU; rings in all */
	uint64_t requests, replies;   /* that came and went by the ring */
	bool failed;
	char why[160];
};
/* After the INIT reply that took the ring: registers the queues, each
 * entry with a payload of payload_len bytes. */
void fs_uring_start(struct fs *fs, size_t payload_len);
/* Before the session is destroyed. */
void fs_uring_stop(struct fs *fs);
/* A reply (the iovecs libfuse gave writev): true, with *sent, if it
 * answered a request that came by the ring. */
bool fs_uring_reply(struct fs *fs, const struct iovec *iov, int count,
		    ssize_t *sent);
void fs_uring_get_stats(struct fs *fs, struct fs_uring_stats *st);

/* passthrough.c */
/* Our /dev/fuse I/O, which negotiates passthrough (after mounting). */
int fs_pt_install(struct fs *fs);
/* A backing id for fd (> 0), or -errno: passthrough is off from then. */
int fs_pt_open(struct fs *fs, int fd);
void fs_pt_close(struct fs *fs, int id);
/* The next OPEN/CREATE reply this thread sends goes through backing id
 * (0: none). */
void fs_pt_mark_reply(int id);
/* Whether handle h (with h->w, a dirty file) opens inode in through a
 * backing file; fs->lock held, before in->nopen counts h.  A first one
 * needs h->w; once the inode has one, every handle joins it (h->w
 * becomes in->x->pt_w, held).  Returns the id to mark the reply with, 0
 * for the usual path, -EAGAIN while a writer turns the inode's clean
 * backing into its dirty file (drop the lock, try again), -EBUSY when h
 * cannot join the inode's backing (fail the open). */
int fs_pt_choose(struct fs *fs, struct fs_inode *in, struct fs_handle *h);
/* Would h (a clean read of size bytes) pass through if its blocks were
 * all verified and pinned?  Read-only mounts, and read-write ones in
 * modes sw and lu (docs/semantics.md).  No lock needed. */
bool fs_pt_clean_wanted(struct fs *fs, struct fs_handle *h, int flags);
/* A handle h without a dirty file (h->cf), fs->lock held: h joins the
 * inode's backing file (clean, or on a read-write mount a dirty one),
 * or, if pinned (h->cf wholly verified and pinned) and no handle is
 * open the usual way, makes h->cf that backing file and *kept says the
 * inode now owns h->cf and its pins (h->cf becomes NULL).  Returns the
 * backing id or 0 (the usual path). */
int fs_pt_choose_clean(struct fs *fs, struct fs_inode *in,
		       struct fs_handle *h, bool pinned, bool *kept);
/* fs_pt_choose (h->w set) or fs_pt_choose_clean, taking fs->lock, then
 * counts h in in->nopen (h->in = in); waits out a writer making the
 * clean backing its dirty file.  Returns the backing id, 0, or a
 * negative errno: h could not open, in does not count it. */
int fs_pt_choose_open(struct fs *fs, struct fs_inode *in,
		      struct fs_handle *h, bool pinned, bool *kept);
/* After fs_pt_choose, fs->lock dropped: registers a writer through a
 * backing file with the write-back, lets go of a reader's hold if it
 * takes the usual path. */
void fs_pt_opened(struct fs_handle *h);

/* ctl.c */
int fs_ctl_start(struct fs *fs, char *msg, size_t msg_len);
void fs_ctl_stop(struct fs *fs);

#endif /* FMFS_FS_INT_H */
