/* SPDX-License-Identifier: MIT */
/*
 * index_int.h - shared by the files of the cache index: index.c (open,
 * identity, loading), attr.c (object attributes) and flush.c (the dirty
 * list, flushes and the flusher thread).  Inside the cache module only;
 * the design is at the top of index.c.
 */
#ifndef FMFS_CACHE_INDEX_INT_H
#define FMFS_CACHE_INDEX_INT_H

#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>

#include "cache_int.h"

/* An attribute change not yet in the index. */
struct attr_pend {
	struct attr_pend *next;
	uint64_t seq;               /* a flush removes it only if unchanged */
	bool del;                   /* forget the row */
	struct cache_attr a;
	char key[];
};

#define ATTR_BUCKETS 4096u

struct cache_index {
	sqlite3 *db;
	char path[PATH_MAX];
	sqlite3_stmt *upsert_obj, *del_obj, *del_blocks;
	sqlite3_stmt *put_chunk, *del_chunk, *set_atime;
	sqlite3_stmt *get_attr, *put_attr, *del_attr;
	pthread_mutex_t alock;      /* protects apend, napend, aseq and the
	                             * get_attr statement (a leaf) */
	struct attr_pend *apend[ATTR_BUCKETS];
	size_t napend;
	uint64_t aseq;
	pthread_mutex_t flush_lock; /* one flush at a time */
	pthread_mutex_t lock;       /* protects stop; cond wakes the flusher */
	pthread_cond_t cond;
	bool stop, started;
	pthread_t thread;
	bool failing;               /* the last write failed (flush_lock) */
	_Atomic uint64_t flushes;   /* flushes ended without an error */
};

/* attr.c: the pending attribute changes, copied for a flush (alock
 * taken inside), written in its transaction, and dropped after it
 * unless changed meanwhile. */
struct attr_snap {
	struct attr_pend **v;
	size_t n;
};
int cache_attr_snap_take(struct cache_index *x, struct attr_snap *as);
void cache_attr_snap_done(struct cache_index *x, struct attr_snap *as,
			  bool written);
int cache_attr_write(struct cache_index *x, const struct attr_pend *p);
/* Frees every pending change (close). */
void cache_attr_pend_free_all(struct cache_index *x);

/* The blocks of chunk k of f (CACHE_CHUNK_BLOCKS but the last), and
 * its number of chunks: a blocks row each. */
static inline uint32_t cache_chunk_nblocks(const struct cache_file *f,
					   uint32_t k)
{
	uint32_t first = k * CACHE_CHUNK_BLOCKS;
	uint32_t n = f->nblocks - first;

	return n < CACHE_CHUNK_BLOCKS ? n : CACHE_CHUNK_BLOCKS;
}

static inline uint32_t cache_nchunks(const struct cache_file *f)
{
	return (f->nblocks + CACHE_CHUNK_BLOCKS - 1) / CACHE_CHUNK_BLOCKS;
}

/* flush.c: steps and resets a statement: SQLITE_OK, or its error. */
int cache_index_step(sqlite3_stmt *st);

#endif /* FMFS_CACHE_INDEX_INT_H */
