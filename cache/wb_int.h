/* SPDX-License-Identifier: MIT */
/*
 * wb_int.h - what the files of the write-back share: wb.c (the table,
 * the cap, dirty files), wb_names.c (tombstones, unlink, rename,
 * listing), wb_db.c (the SQLite mirror), wb_replay.c (replay at open),
 * wb_meta.c (block checksums and DIR/dirty/ID.meta) and wb_upload.c
 * (the uploader threads, flush and statistics).  Inside the cache module only.
 * The design and lock order are described at the top of wb.c.
 */
#ifndef FMFS_CACHE_WB_INT_H
#define FMFS_CACHE_WB_INT_H

#include <sqlite3.h>
#include <string.h>

#include "cache_int.h"

#define CACHE_WB_HASH 4096u             /* buckets; chains grow past that */
#define CACHE_WB_BACKOFF_MAX_MS 30000
#define CACHE_WB_DELETE_BATCH 1000
/* user_version 2 of writeback.sqlite: every committed row has its
 * DIR/dirty/ID.meta (a committed row without one is damage, not an
 * older fmfs). */
#define CACHE_WB_DB_VERSION 2

struct cache_wfile {
	struct cache *c;
	struct cache_wfile *hnext;
	uint64_t id;
	int fd;
	/* Protected by wb->lock. */
	char *key;
	struct cache_wattr a;
	uint64_t charged;         /* bytes charged to the cap */
	uint64_t gen, queued_gen, uploaded_gen;
	bool committed;           /* a row with queued 1 exists */
	bool meta_durable;        /* its .meta and name in dirty/ are synced
	                           * as they stand (cache_wb_meta_write) */
	bool uploading, deleted, in_table, in_bucket;
	char base_etag[CACHE_ETAG_MAX];
	struct obj_kv *meta;
	size_t nmeta;
	unsigned refs, writers;
	unsigned external;        /* writers outside cache_w_write_with */
	uint64_t ext_size;        /* the file at the last look for their */
	int64_t ext_mtime_ns;     /* changes (cache_wb_sync_external) */
	uint64_t ext_gen0;        /* gen when the first of them came */
	int64_t not_before_ms;
	uint64_t queued_ms;       /* monotonic: when the oldest change not
	                           * yet uploaded was queued (0: none) */
	int64_t failed_ms;        /* latest failed upload */
	unsigned attempts;
	char last_err[512];
	/* Block checksums (wb_meta.c), protected by wb->lock: sums[i] is
	 * the CRC32C of block i as of the last commit (seq), whose
	 * DIR/dirty/ID.meta holds them; stale[i] says block i changed
	 * since.  sums_gen: the generation they describe (0: none valid,
	 * the file is uploaded as it stands, unchecked). */
	uint32_t *sums;
	uint8_t *stale;
	uint64_t nsums, sums_cap;
	uint64_t sums_gen;
	uint64_t seq;             /* its last commit's number (wb->seq_top) */
	bool sums_ok;             /* the last commit's sums are complete */
	bool changing;            /* changed since the last commit (kept in
	                           * the row: a crash then uploads the file
	                           * as it stands, unchecked) */
	bool row_uploaded;        /* replay: its row says this version was
	                           * uploaded (try_clean was cut short) */
	bool other_boot;          /* replay: its row was saved before the
	                           * system last booted (or says nothing) */
	bool ext_seen;            /* a writer behind our back since the last
	                           * commit: every block is stale */
	bool checked;             /* read and found equal to its sums since
	                           * the mount (or written by it) */
	char damaged[600];        /* why it cannot be uploaded; "" if fine */
};

/* A key to DELETE.  While a dirty file has the same key (the name was
 * made again, or a file renamed onto it) the tombstone is shadowed: it
 * stays, in memory and in the deletes table, but is not run, listed or
 * counted; the dirty file's upload overwrites the object and drops it.
 * A crash before that upload thus still deletes the old object when the
 * new file does not survive (docs/cache-format.md, "Replay"). */
struct cache_wb_tomb {
	struct cache_wb_tomb *next;
	unsigned held;
	bool running;
	int64_t not_before_ms;
	int64_t failed_ms;
	char key[];
};

struct cache_wb {
	struct cache *c;
	struct cache_wb_config cfg;
	sqlite3 *db;
	sqlite3_stmt *upsert, *del, *tomb_add, *tomb_del, *mark;
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* work queued, an upload ended */
	struct cache_wfile *tab[CACHE_WB_HASH];
	struct cache_wb_tomb *tombs[CACHE_WB_HASH];
	uint64_t nfiles, ntombs;
	uint64_t next_id;
	char boot[40];             /* this boot's id (rows say which boot
				    * saved them; FMFS_BOOT_ID overrides) */
	/* A deletion's row was removed since the last synced commit: a
	 * power cut could bring it back and DELETE what an upload of the
	 * same key has put since (cache_wb_db_sync before that upload's
	 * local copy goes). */
	bool tomb_unsynced;
	uint64_t seq_top;          /* commits: the last seq given (global, so
				    * two files' seqs order their commits) */
	/* At replay: the newest commit (seq) a row of writeback.sqlite
	 * holds.  SQLite keeps a prefix of the commits, so a .meta with
	 * no row and an older seq was removed (wb_replay.c). */
	uint64_t replay_rows_seq;
	char **busy_keys;          /* keys being uploaded (tombstones wait) */
	size_t nbusy, busy_cap;
	pthread_t *threads;
	unsigned nthreads;
	bool stop;
	/* statistics */
	uint64_t inflight, failures, uploaded_files, uploaded_bytes;
	uint64_t deleted_keys, conflicts, lost_found;
	uint64_t rebuilt;          /* rows re-made from dirty/ID.meta at open */
	struct cache_wb_lostver {  /* keys whose newer version was lost over */
		char *key;         /* the bucket's version etag (reads of */
		char *etag;        /* that one: EIO, cache_w_lost_version) */
	} *lostv;
	size_t nlostv;             /* set at open; dropped per key by a write,
	                           * remove or rename onto it (wb->lock) */
	char **lost;               /* "what: why" of committed files whose */
	size_t nlost;              /* bytes were gone at open (flush says so) */
	uint64_t *lost_row;        /* per lost line: the id of the row kept
	                            * until a flush --wait names it, or 0 */
	int dirty_fd;              /* DIR/dirty, for fsync of renames */
	int db_version;            /* PRAGMA user_version at open */
	char last_error[256];
};

/* wb.c (the table, the cap, dirty files), shared with the other wb_
 * files; wb->lock held unless said otherwise. */
static inline uint32_t cache_wb_hash(const char *key)
{
	return (uint32_t)(util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key)) %
			  CACHE_WB_HASH);
}
void cache_wb_log_err(struct cache_wb *wb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
struct cache_wfile *cache_wb_find(struct cache_wb *wb, const char *key);
/* Puts w in the table (w->key set, not there yet). */
void cache_wb_insert(struct cache_wb *wb, struct cache_wfile *w);
void cache_wb_take_out(struct cache_wb *wb, struct cache_wfile *w);
/* Frees a wfile that no one refers to (not in the table). */
void cache_wb_wfile_free(struct cache_wfile *w);
struct cache_wb_tomb *cache_wb_tomb_find(struct cache_wb *wb,
					 const char *key);
void cache_wb_dirty_path(uint64_t id, char *buf, size_t len);
/* Gives n dirty bytes back to the cap (c->lock; not wb->lock). */
void cache_wb_uncharge(struct cache *c, uint64_t n);

/* wb_names.c: tombstones. */
void cache_wb_tomb_put(struct cache_wb *wb, const char *key, bool held);
void cache_wb_tomb_drop(struct cache_wb *wb, const char *key);
bool cache_wb_tomb_shadowed(struct cache_wb *wb,
			    const struct cache_wb_tomb *t);

/* wb_replay.c */
/* Forgets that key's newer version was lost (it was written again or
 * removed). */
void cache_wb_lost_version_forget(struct cache_wb *wb, const char *key);

/* wb_db.c: the SQLite mirror; wb->lock held. */
/* Opens (creates, upgrades) DIR/writeback.sqlite; at open, no lock. */
int cache_wb_db_open(struct cache_wb *wb, char *msg, size_t ml);
/* A commit made durable, the one way: w's .meta (its sums), then its
 * row with queued 1.  A crash in between leaves a .meta newer than the
 * row, which the replay prefers; durable: the .meta synced. */
int cache_wb_save(struct cache_wb *wb, struct cache_wfile *w, bool durable);
/* w's row as it stands (queued: committed). */
int cache_wb_db_put(struct cache_wb *wb, const struct cache_wfile *w,
		    bool queued);
/* Marks row id "uploaded as it stands" (etag: the bucket's version):
 * written before the file moves into the read cache, so that a stop in
 * the middle of that is not taken for a lost file. */
int cache_wb_db_mark_uploaded(struct cache_wb *wb, uint64_t id,
			      const char *etag);
/* A synced commit of the queue: 0 or -EIO (fsync then says so). */
int cache_wb_db_sync(struct cache_wb *wb);
int cache_wb_db_del(struct cache_wb *wb, uint64_t id);
/* A tombstone's row added or removed. */
int cache_wb_db_tomb(struct cache_wb *wb, const char *key, bool add);
/* A file the kernel writes behind our back (cache_w_external): its size
 * from the file; look: also count it changed if it was (wb->lock). */
void cache_wb_sync_external(struct cache_wfile *w, bool look);

/* wb_meta.c: block checksums and DIR/dirty/ID.meta, shared with wb.c
 * and wb_upload.c (wb->lock held unless said otherwise). */
#define CACHE_WB_META_SUFFIX ".meta"
/* Blocks [off, off + len) changed (and the file is at least that long). */
int cache_wb_sums_mark(struct cache_wfile *w, uint64_t off, uint64_t len);
/* The file was cut or grown to size. */
int cache_wb_sums_resize(struct cache_wfile *w, uint64_t size);
/* Brings the sums up to date with the file for a commit: reads the stale
 * blocks back (wb->lock NOT held; it is taken and dropped inside).
 * Returns true when every block's sum is valid for w->gen then. */
bool cache_wb_sums_update(struct cache_wb *wb, struct cache_wfile *w);
/* No block changed since the sums were taken, and none is being
 * changed (a write marks its blocks before it starts): the file's bytes
 * are those the sums describe. */
bool cache_wb_sums_fresh(const struct cache_wfile *w);
/* Writes DIR/dirty/ID.meta (atomically: a temporary file renamed over
 * it; durable: synced, and the rename too). */
int cache_wb_meta_write(struct cache_wb *wb, struct cache_wfile *w,
			bool durable);
/* The same with w's metadata already packed (cache_wb_pack). */
int cache_wb_meta_write_packed(struct cache_wb *wb, struct cache_wfile *w,
			       bool durable, const char *mb, size_t ml);
/* Reads and checks DIR/dirty/ID.meta into w (key, attributes, metadata,
 * sums, seq); 0, -ENOENT, or -EBADMSG with why in msg. */
int cache_wb_meta_read(struct cache_wb *wb, uint64_t id,
		       struct cache_wfile *w, char *msg, size_t ml);
void cache_wb_meta_remove(struct cache_wb *wb, uint64_t id);
/* The CRC32C of each block of fd's first size bytes (NULL on failure or
 * for size 0); no lock needed. */
uint32_t *cache_wb_file_crcs(struct cache *c, int fd, uint64_t size);
/* Compares crcs (of the file at w->sums_gen) with w's sums; on a
 * mismatch marks w damaged, logs it and returns false (wb->lock held). */
bool cache_wb_sums_match(struct cache_wb *wb, struct cache_wfile *w,
			 const uint32_t *crcs, uint64_t size);
/* Marks w damaged with a reason (logged once). */
void cache_wb_damaged(struct cache_wb *wb, struct cache_wfile *w,
		      const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* meta blobs as in the row (NUL-separated name, value pairs). */
char *cache_wb_meta_pack(const struct obj_kv *m, size_t n, size_t *len);
/* w's metadata and the attributes kept with it (ctime, atime, rdev), for
 * a row or a .meta; cache_wb_unpack reads them back into w (meta, a). */
char *cache_wb_pack(const struct cache_wfile *w, size_t *len);
int cache_wb_unpack(struct cache_wfile *w, const char *b, size_t len);
int cache_wb_meta_unpack(const char *b, size_t len, struct obj_kv **out,
			 size_t *n);

/* wb_upload.c, shared with wb.c. */
/* An upload or a DELETE of key is out (wb->lock). */
bool cache_wb_key_busy(struct cache_wb *wb, const char *key);
/* key became clean or was deleted: tell the file system (no lock). */
void cache_wb_forget(struct cache *c, const char *key);

#endif /* FMFS_CACHE_WB_INT_H */
