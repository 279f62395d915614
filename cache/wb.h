/* SPDX-License-Identifier: MIT */
/*
 * wb.h - write-back, the half of the cache module that holds files
 * written through the mount until they are in the bucket (wb.c: the
 * table and the dirty files; wb_names.c: tombstones, unlink, rename,
 * listing; wb_db.c: the persistent queue in SQLite; wb_meta.c: block
 * checksums and each file's .meta; wb_replay.c: the replay at open;
 * wb_upload.c: the uploader threads, flush and statistics).  It is part of the cache
 * module (it charges the same cap, and a clean file moves into the read
 * cache), with a header of its own because its contract (references,
 * writers, the upload protocol) is a different thing to learn from the
 * read side's in cache.h.
 *
 * Who owns what.  A struct cache_wfile lives while it is in the table (a
 * dirty file of a key) or while anyone holds a reference; the table's
 * membership is not a reference.  After each call:
 *
 *   call                          caller holds afterwards
 *   ----------------------------  ---------------------------------------
 *   cache_w_create(.., &w) == 0   one reference to w (cache_w_put it)
 *   cache_w_get(.., &w) == 0      one reference
 *   cache_w_hold(.., &w) == 0     one reference and one writer
 *                                 (cache_w_writer(w, false), then put)
 *   cache_w_ref(w)                one more reference (must hold one)
 *   cache_w_put(w)                one fewer; the last one, once w left
 *                                 the table, frees w (NULL is a no-op)
 *   cache_w_writer(w, true/false) a writer more/less (must hold a
 *                                 reference; never more "false" than
 *                                 "true": asserted)
 *   cache_w_external(w, true/..)  the same for a writer behind our back
 *                                 (the kernel, through passthrough)
 *   cache_w_unlink/rename         nothing changes for holders: w leaves
 *                                 the table (or moves to another key),
 *                                 handles keep reading it
 *   cache_w_key_begin(key)        a promise to call cache_w_key_end(key)
 *   cache_w_unlink/tombstone with
 *     held = true                 a promise to call cache_w_release(key)
 *
 * A failed call (a negative errno) leaves the caller holding nothing.
 */
#ifndef FMFS_CACHE_WB_H
#define FMFS_CACHE_WB_H

#include "cache.h"

/*
 * A file created or opened for writing becomes a dirty file: a whole
 * local copy in DIR/dirty/ID, its bytes charged to the cache cap (never
 * evicted), a row in the write-back store DIR/writeback.sqlite (SQLite,
 * WAL).  cache_w_commit (close, fsync) queues it: after the async delay
 * an uploader thread PUTs it (multipart when large); on success the file
 * moves into the read cache as the object's new version and the row goes.
 * Deleted and renamed-away keys become tombstones, DELETEd in the
 * background.  After a crash, cache_open replays the rows: every file
 * that had been committed is uploaded; one never committed (the writer
 * never closed it) is moved to DIR/lost+found/ and logged.
 *
 * Threads: all functions are thread-safe.  A struct cache_wfile is
 * reference counted (cache_w_get/_create give one, cache_w_put drops it);
 * it stays usable after unlink (its bytes stay readable through the
 * handle) and after it was uploaded and left the table.
 */
/* What a dirty file is.  The special files (FIFO, socket, devices) are
 * zero-length objects whose type and rdev live in their metadata. */
enum cache_wkind {
	CACHE_WK_FILE = 0, CACHE_WK_DIR = 1, CACHE_WK_SYMLINK = 2,
	CACHE_WK_FIFO = 3, CACHE_WK_SOCK = 4, CACHE_WK_CHR = 5,
	CACHE_WK_BLK = 6,
};
#define CACHE_WK_LAST CACHE_WK_BLK

/* The S_IFMT bits of kind, and the kind of a mode's type bits (a type
 * fmfs does not know: -1). */
uint32_t cache_wkind_type(enum cache_wkind kind);
int cache_wkind_of(uint32_t mode);

struct cache_wattr {
	enum cache_wkind kind;
	uint32_t mode;          /* permission bits only (07777) */
	uint32_t uid, gid;
	int64_t mtime_ns;       /* CLOCK_REALTIME */
	int64_t ctime_ns;       /* the last change of data or attributes */
	int64_t atime_ns;       /* as set by utimensat (not by reads) */
	uint32_t rdev;          /* character and block devices */
	uint64_t size;
};

/* The attributes as object metadata, the names s3fs uses: "mode" (with
 * the file type bits), "uid", "gid", "mtime", "ctime", "atime"
 * (seconds.nanoseconds), and "rdev" for devices.  Fills kv (pointing
 * into vals); returns how many (at most CACHE_WATTR_META). */
#define CACHE_WATTR_META 7
size_t cache_wattr_meta(const struct cache_wattr *a,
			struct obj_kv kv[CACHE_WATTR_META],
			char vals[CACHE_WATTR_META][32]);
/* Whether an object metadata name is one of those (not a user xattr). */
bool cache_wattr_meta_name(const char *name);

struct cache_wb_config {
	unsigned async_delay_ms;  /* upload this long after close/fsync */
	unsigned uploaders;       /* files uploaded at once; 0: 4 */
	bool push;                /* false (mode lu): never upload/delete */
	bool check_conflicts;     /* mode iw: HEAD first, log a conflict */
	/* Called from an uploader thread (no cache lock held) when key
	 * became clean (uploaded; etag and size of the new version) or,
	 * with deleted, when its tombstone was DELETEd. */
	void (*on_done)(void *arg, const char *key, const char *etag,
			uint64_t size, bool deleted);
	void *arg;
};
/* Starts the uploaders (after cache_open; fs calls it once mounted). */
int cache_wb_start(struct cache *c, const struct cache_wb_config *cfg);
/* Stops them (an upload under way finishes); on_done is not called once
 * this returns.  What is queued stays queued for the next start. */
void cache_wb_stop(struct cache *c);

struct cache_wfile;

/* New dirty file for key.  With src (an open cache entry of the object)
 * its first `a->size` bytes are copied from it, fetching what is not
 * cached; otherwise it is empty (or sparse at a->size).  in_bucket: the
 * key exists in the bucket (a later unlink or rename must delete it
 * there); base_etag: that version (or NULL).  -EEXIST if key is dirty
 * already (use cache_w_get), -ENOSPC if the cap is full of dirty data. */
int cache_w_create(struct cache *c, const char *key,
		   const struct cache_wattr *a, bool in_bucket,
		   const char *base_etag, struct cache_file *src,
		   struct cache_wfile **out);
/* As cache_w_create, but the dirty file is src's own file, wholly cached
 * (cache_file_surrender with expect_refs): no copy, and every open
 * descriptor of src - a FUSE passthrough backing - reads what is written
 * to the dirty file from now on.  a->size must be src's size (change it
 * after with cache_w_truncate or cache_w_fill).  -EBUSY if src cannot be given up now,
 * -EEXIST if key is dirty already; nothing changes then. */
int cache_w_adopt(struct cache *c, const char *key,
		  const struct cache_wattr *a, bool in_bucket,
		  const char *base_etag, struct cache_file *src,
		  unsigned expect_refs, struct cache_wfile **out);
/* Sets w's bytes to src's first size bytes (NULL: size zero bytes). */
int cache_w_fill(struct cache_wfile *w, struct cache_file *src,
		 uint64_t size);
/* The dirty file of key, with a reference; -ENOENT if key is not dirty. */
int cache_w_get(struct cache *c, const char *key, struct cache_wfile **out);
void cache_w_put(struct cache_wfile *w);
void cache_w_ref(struct cache_wfile *w); /* one more, for a holder of one */
/* Writers: while one is registered the file is not considered clean. */
void cache_w_writer(struct cache_wfile *w, bool add);
/* cache_w_get and cache_w_writer(add) in one step, for a caller about to
 * change the file: a file got with cache_w_get may be uploaded and leave
 * the table before a later cache_w_writer, and a change made to it then
 * would be lost.  Undo with cache_w_writer(w, false), then cache_w_put. */
int cache_w_hold(struct cache *c, const char *key, struct cache_wfile **out);
int cache_w_fd(struct cache_wfile *w);
/* A number that changes with every change of w (bytes, attributes,
 * xattrs, name; a writer behind our back included) and differs between
 * dirty files: an equal one means nothing changed. */
uint64_t cache_w_version(struct cache_wfile *w);
/* Before a file replayed from before the mount is first read or written
 * through a handle: reads it and checks it against the checksums of its
 * last commit (once per mount).  -EIO if it does not match (it is then
 * never uploaded: flush reports it), or did not at open. */
int cache_w_check(struct cache_wfile *w);
/* Registers (add) or drops a writer that changes the file through its
 * descriptor behind our back (the kernel, with FUSE passthrough): while
 * one is registered, cache_w_stat takes the size from the file and
 * cache_w_commit counts the file changed, charging the cap for its
 * growth after the fact (it may then stand over the cap until uploads
 * drain). */
void cache_w_external(struct cache_wfile *w, bool add);
/* Bytes the cap has left for dirty data (clean blocks can be evicted);
 * *cap (if given) the cap. */
uint64_t cache_w_room(struct cache *c, uint64_t *cap);
void cache_w_stat(struct cache_wfile *w, struct cache_wattr *a);
/* Writes, charging growth to the cap (-ENOSPC when full of dirty data). */
/* The same with the bytes from a caller's source (a pipe, for a spliced
 * FUSE write): fn writes at most len bytes at off into fd and returns how
 * many, or a negative errno; it is called again for the rest, and once
 * more after an -ENOSPC has made room, so it must resume where it left
 * off. */
typedef ssize_t cache_w_write_fn(void *arg, int fd, uint64_t off,
				 size_t len);
ssize_t cache_w_write_with(struct cache_wfile *w, uint64_t off, size_t len,
			   cache_w_write_fn *fn, void *arg);
ssize_t cache_w_pwrite(struct cache_wfile *w, const void *buf, size_t len,
		       uint64_t off);
int cache_w_truncate(struct cache_wfile *w, uint64_t size);
#define CACHE_WA_MODE  1u
#define CACHE_WA_UID   2u
#define CACHE_WA_GID   4u
#define CACHE_WA_MTIME 8u
#define CACHE_WA_ATIME 16u
#define CACHE_WA_CTIME 32u /* a copy's (a hard link's): as given */
/* Sets what mask names; ctime becomes now (any change of attributes),
 * or a->ctime_ns with CACHE_WA_CTIME. */
void cache_w_setattr(struct cache_wfile *w, const struct cache_wattr *a,
		     unsigned mask);
/* User metadata (names without "user."), uploaded as x-amz-meta-NAME. */
int cache_w_xattr_set(struct cache_wfile *w, const char *name,
		      const char *value, size_t len, int flags);
int cache_w_xattr_remove(struct cache_wfile *w, const char *name);
/* Copies the metadata out (free with obj_kv_free). */
int cache_w_xattrs(struct cache_wfile *w, struct obj_kv **out, size_t *n);
/* Queues the file for upload (close: the row is committed, safe from a
 * daemon crash; durable: fdatasync and a synced commit, safe from power
 * loss).  No-op if nothing changed since the last commit. */
int cache_w_commit(struct cache_wfile *w, bool durable);
/* Namespace.  unlink: drops key's dirty file (open handles keep it) and,
 * if the key may be in the bucket (in_bucket, or uploaded before), adds a
 * tombstone; held: the tombstone waits for cache_w_release(key).  rename:
 * a dirty file from -> to (replacing to's dirty file; to_in_bucket: the
 * bucket has an object `to`); -ENOENT if from is not dirty.  tombstone:
 * deletes a clean object's key in the background.  A name made again
 * (cache_w_create, a rename onto it) keeps its pending DELETE until the
 * new file's upload lands, so a crash before that never brings the old
 * object back; cache_w_tombstoned and cache_w_list do not show such a
 * shadowed DELETE. */
int cache_w_unlink(struct cache *c, const char *key, bool in_bucket,
		   bool held);
int cache_w_rename(struct cache *c, const char *from, const char *to,
		   bool from_in_bucket, bool to_in_bucket);
int cache_w_tombstone(struct cache *c, const char *key, bool held);
/* The caller is about to write key in the bucket itself (a server-side
 * copy).  cache_w_key_begin waits until no upload or DELETE of key is
 * out, and keeps new ones from starting until cache_w_key_end, so none
 * lands after the caller's request.  done: that request succeeded, so a
 * pending DELETE of key and key's dirty file (if any) are dropped;
 * otherwise both stay and run as before. */
void cache_w_key_begin(struct cache *c, const char *key);
void cache_w_key_end(struct cache *c, const char *key, bool done);
void cache_w_release(struct cache *c, const char *key);
bool cache_w_tombstoned(struct cache *c, const char *key);
/* Whether the replay found key's committed version, made over the
 * bucket's version etag, lost before its upload (its dirty file gone):
 * that older version is then not to be served in silence. */
bool cache_w_lost_version(struct cache *c, const char *key,
			  const char *etag);
/* Calls fn for every dirty file and tombstone whose key starts with
 * prefix (a tombstone has a NULL attr), under the write-back lock: fn must
 * not call cache_w_*.  Returns how many. */
size_t cache_w_list(struct cache *c, const char *prefix,
		    void (*fn)(void *arg, const char *key,
			       const struct cache_wattr *a),
		    void *arg);
/* Uploads what is queued under prefix ("" for all) now, ignoring the
 * delay.  wait: returns 0 once it is in the bucket, or -EIO after every
 * remaining file failed at least once since the call (report lists them,
 * one "key: error" per line), or -ETIMEDOUT after timeout_ms. */
int cache_w_flush(struct cache *c, const char *prefix, bool wait,
		  unsigned timeout_ms, char *report, size_t report_len);

struct cache_wb_stats {
	uint64_t dirty_bytes, dirty_files;
	uint64_t queued;          /* files waiting for upload + tombstones */
	uint64_t uploads_inflight;
	uint64_t upload_failures; /* failed attempts (retried) */
	uint64_t uploaded_files, uploaded_bytes, deleted_keys;
	uint64_t conflicts;       /* iw: bucket changed under a dirty file */
	uint64_t lost_found;      /* uncommitted files moved aside at open */
	uint64_t damaged_files;   /* not matching their checksums: held */
	uint64_t lost_files;      /* committed, bytes gone at open */
	uint64_t rebuilt;         /* re-queued from dirty/ID.meta at open */
	uint64_t oldest_queued_ms; /* age of the oldest change queued and not
	                            * uploaded yet (0: none) */
	char last_error[256];
};
void cache_wb_get_stats(struct cache *c, struct cache_wb_stats *out);

#endif /* FMFS_CACHE_WB_H */
