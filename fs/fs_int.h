/* SPDX-License-Identifier: MIT */
/*
 * fs_int.h - shared by the files of the fs module: the inode table and
 * cached directory listings (inode.c), the FUSE operations (fs.c) and the
 * control socket (ctl.c).
 */
#ifndef FMFS_FS_INT_H
#define FMFS_FS_INT_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "fs.h"

#define FS_LISTING_MAX_ENTRIES 4000000 /* per directory; memory bound */
#define FS_DIRCACHE_MAX 16384          /* directories whose listing we keep */
#define FS_OFFLINE_MS 5000             /* metadata stays stale this long */

/* One name in a directory, as the last listing saw it. */
struct fs_entry {
	char *name;
	bool is_dir;
	uint64_t size_bytes;
	int64_t mtime_s;
	char etag[80];
};

/* A directory's listing: immutable once built, shared by reference so a
 * refresh can replace it while readdir still walks the old one. */
struct fs_listing {
	atomic_uint refs;
	uint64_t fetched_ms;
	size_t n;
	struct fs_entry *e;     /* sorted by name (strcmp) */
};

struct fs_inode {
	fuse_ino_t ino;
	struct fs_inode *parent;   /* holds a reference while we exist */
	char *name;                /* "" for the root */
	char *key;                 /* file: "a/b"; dir: "a/b/"; root: "" */
	bool is_dir;
	/* attributes; protected by fs->lock */
	uint64_t size_bytes;
	int64_t mtime_s;
	char etag[80];
	uint64_t attr_ms;          /* when last confirmed with the store */
	char open_etag[80];        /* version at the last open (keep_cache) */
	uint64_t nlookup;          /* kernel references; protected by lock */
	unsigned children;         /* inodes naming us as parent */
	/* user metadata (xattrs), fetched by HEAD, protected by fs->lock */
	struct obj_kv *meta;
	size_t nmeta;
	uint64_t meta_ms;
	struct fs_inode *next_ino, *next_name; /* hash chains */
};

/* A cached listing, by directory key: independent of inode lifetimes, so
 * a listing survives the kernel forgetting a directory (drop_caches) and
 * can still be served stale when the store is unreachable. */
struct fs_dircache {
	char *key;
	struct fs_listing *l;
	struct fs_dircache *next;
};

struct fs {
	struct fs_config cfg;
	struct fuse_session *se;
	pthread_mutex_t lock;      /* inode tables and attributes */
	struct fs_inode **by_ino, **by_name;
	size_t nbuckets, ninodes;
	fuse_ino_t next_ino;
	struct fs_inode *root;
	struct fs_dircache **dirs; /* hash by key; protected by lock */
	size_t ndirs;
	/* counters for `fmfs status` */
	atomic_uint_fast64_t lookups, listings, list_pages, opens, reads;
	atomic_uint_fast64_t skipped_names, open_files;
	/* After a transport failure, metadata is served from what we have
	 * (no retries per lookup) until this time. */
	atomic_uint_fast64_t offline_until_ms;
	/* control socket */
	int ctl_fd;
	pthread_t ctl_thread;
	atomic_bool stopping;
	uint64_t started_ms;
	time_t mount_time_s;       /* directories' mtime */
};

uint64_t fs_now_ms(void);

/* inode.c */
int fs_inodes_init(struct fs *fs);
void fs_inodes_free(struct fs *fs);
struct fs_inode *fs_inode_get(struct fs *fs, fuse_ino_t ino);  /* no ref */
/* Finds or creates the inode for entry e in dir; takes one lookup
 * reference.  Called with fs->lock held. */
struct fs_inode *fs_inode_ref(struct fs *fs, struct fs_inode *dir,
			      const struct fs_entry *e);
void fs_inode_forget(struct fs *fs, struct fs_inode *in, uint64_t n);
/* The directory's listing, fetched if missing or older than refresh_s.
 * Returns a reference (fs_listing_put) or NULL with *err set (-errno). */
struct fs_listing *fs_dir_listing(struct fs *fs, const char *dir_key,
				  int *err);
void fs_listing_put(struct fs_listing *l);
const struct fs_entry *fs_listing_find(const struct fs_listing *l,
				       const char *name);
/* Resolves a path relative to the mount root ("a/b"); *is_dir and the
 * entry's attributes filled in.  Returns 0 or -errno. */
int fs_resolve(struct fs *fs, const char *path, struct fs_entry *out,
	       char *key, size_t key_len);
/* False while the store is considered unreachable. */
bool fs_store_up(struct fs *fs);
/* errno for an objstore failure, logged once per kind; a transport
 * failure marks the store unreachable for FS_OFFLINE_MS. */
int fs_obj_errno(struct fs *fs, obj_status st, const struct obj_error *e);

/* ctl.c */
int fs_ctl_start(struct fs *fs, char *msg, size_t msg_len);
void fs_ctl_stop(struct fs *fs);

#endif /* FMFS_FS_INT_H */
