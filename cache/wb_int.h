/* SPDX-License-Identifier: MIT */
/*
 * wb_int.h - what the two halves of the write-back share: wb.c (dirty
 * files, tombstones, the SQLite mirror, replay) and wb_upload.c (the
 * uploader threads, flush and statistics).  Inside the cache module only.
 * The design and lock order are described at the top of wb.c.
 */
#ifndef FMFS_CACHE_WB_INT_H
#define FMFS_CACHE_WB_INT_H

#include <sqlite3.h>

#include "cache_int.h"

#define CACHE_WB_HASH 4096u             /* buckets; chains grow past that */
#define CACHE_WB_BACKOFF_MAX_MS 30000
#define CACHE_WB_DELETE_BATCH 1000

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
	int64_t failed_ms;        /* latest failed upload */
	unsigned attempts;
	char last_err[512];
};

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
	sqlite3_stmt *upsert, *del, *tomb_add, *tomb_del;
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* work queued, an upload ended */
	struct cache_wfile *tab[CACHE_WB_HASH];
	struct cache_wb_tomb *tombs[CACHE_WB_HASH];
	uint64_t nfiles, ntombs;
	uint64_t next_id;
	char **busy_keys;          /* keys being uploaded (tombstones wait) */
	size_t nbusy, busy_cap;
	pthread_t *threads;
	unsigned nthreads;
	bool stop;
	/* statistics */
	uint64_t inflight, failures, uploaded_files, uploaded_bytes;
	uint64_t deleted_keys, conflicts, lost_found;
	char last_error[256];
};

/* wb.c, shared with wb_upload.c; wb->lock held unless said otherwise. */
void cache_wb_log_err(struct cache_wb *wb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
struct cache_wfile *cache_wb_find(struct cache_wb *wb, const char *key);
void cache_wb_take_out(struct cache_wb *wb, struct cache_wfile *w);
void cache_wb_tomb_put(struct cache_wb *wb, const char *key, bool held);
void cache_wb_tomb_drop(struct cache_wb *wb, const char *key);
struct cache_wb_tomb *cache_wb_tomb_find(struct cache_wb *wb,
					 const char *key);
void cache_wb_dirty_path(uint64_t id, char *buf, size_t len);
/* Gives n dirty bytes back to the cap (c->lock; not wb->lock). */
void cache_wb_uncharge(struct cache *c, uint64_t n);
int cache_wb_db_put(struct cache_wb *wb, const struct cache_wfile *w,
		    bool queued);
int cache_wb_db_del(struct cache_wb *wb, uint64_t id);
/* A file the kernel writes behind our back (cache_w_external): its size
 * from the file; look: also count it changed if it was (wb->lock). */
void cache_wb_sync_external(struct cache_wfile *w, bool look);

/* wb_upload.c, shared with wb.c. */
/* An upload or a DELETE of key is out (wb->lock). */
bool cache_wb_key_busy(struct cache_wb *wb, const char *key);
/* key became clean or was deleted: tell the file system (no lock). */
void cache_wb_forget(struct cache *c, const char *key);

#endif /* FMFS_CACHE_WB_INT_H */
