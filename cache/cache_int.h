/* SPDX-License-Identifier: MIT */
/*
 * cache_int.h - what the files of the cache module share and nobody else
 * sees: struct cache and struct cache_file, and the functions that cache.c
 * (the table, files, warming), open.c (open/close), ensure.c
 * (ensure/read), evict.c (space and eviction), index.c, attr.c and
 * flush.c (the SQLite index, object attributes, the flusher; their own
 * index_int.h), fetch.c (fetch workers and readahead), uring.c (the
 * io_uring engine) and the write-back (wb*.c, with their own wb_int.h)
 * offer one another.
 *
 * Locks, outermost first; no thread takes an outer lock while it holds an
 * inner one:
 *
 *   c->lock        the object table, every f->refs / f->fd / f->detached,
 *                  c->used_bytes (reservations included), eviction
 *   f->lock        one object's block state: the bitmaps, crc[],
 *                  cached_bytes, fail_seq; f->cond goes with it
 *   c->dirty_lock  the flusher's dirty list and the ids to delete (a leaf)
 *   c->fq_lock     the fetch queues (a leaf)
 *
 * A hit takes no lock at all (cache_ensure_blocks' fast path): it pins
 * its blocks with an atomic increment of pins[], then loads the present
 * and verified bits.  Those bits change only under f->lock, with atomic
 * read-modify-writes; an evictor clears them and then re-reads pins[],
 * putting them back if a reader got in (both sides sequentially
 * consistent, so one of the two always sees the other).  pins[], tick[]
 * and pos_block are only ever accessed atomically.  Counters are atomics.
 */
#ifndef FMFS_CACHE_INT_H
#define FMFS_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "cache.h"
#include "wb.h"
#include "util/util.h"

/* 2: the attrs table; 3: more attributes; 4: the listings table
 * (older formats are upgraded in place). */
#define CACHE_FORMAT_VERSION 4
/* Attribute changes waiting for the flusher; one more makes the caller
 * flush them itself first (none is ever dropped: an old row of the key
 * would come back). */
#define CACHE_ATTR_PENDING_MAX 65536u
/* Blocks per row of the blocks table (see index.c for why). */
#define CACHE_CHUNK_BLOCKS 1024u
/* One ranged GET fetches at most this much. */
#define CACHE_RUN_MAX_BYTES (8ull << 20)
/* Buffers for verifying blocks read back from the cache disk. */
#define CACHE_VERIFY_BUFS 4
/* Queued background warm requests (cache_warm with wait false). */
#define CACHE_WARM_QUEUE_MAX 16384
/* Runs one pass of cache_file_ensure issues before it waits. */
#define CACHE_ENSURE_RUNS_MAX 16
#define CACHE_ETAG_MAX 80
#define CACHE_FLUSH_INTERVAL_MS 1000
/* Every this many flushes the flusher also saves changed access times. */
#define CACHE_ATIME_FLUSH_EVERY 10

#define cache_log(fmt, ...) \
	fprintf(stderr, "fmfs: cache: " fmt "\n", ##__VA_ARGS__)

/* Logs at most once a second from one call site. */
/* -EIO (said once in the log) for -ENOENT when the cache dir itself was
 * removed while mounted; rc otherwise. */
int cache_dir_errno(struct cache *c, int rc);
#define cache_log_ratelimited(fmt, ...)                                  \
	do {                                                             \
		static _Atomic int64_t last_;                            \
		int64_t now_ = (int64_t)util_now_ms();                   \
		int64_t prev_ = atomic_load(&last_);                     \
		if (now_ - prev_ >= 1000 &&                              \
		    atomic_compare_exchange_strong(&last_, &prev_, now_)) \
			cache_log(fmt, ##__VA_ARGS__);                   \
	} while (0)

static inline bool bit_test(const uint64_t *map, uint32_t i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

static inline void bit_set(uint64_t *map, uint32_t i)
{
	map[i / 64] |= 1ull << (i % 64);
}

static inline void bit_clear(uint64_t *map, uint32_t i)
{
	map[i / 64] &= ~(1ull << (i % 64));
}

/* For bits read without the lock; writers hold f->lock. */
static inline bool bit_test_atomic(const uint64_t *map, uint32_t i)
{
	return (__atomic_load_n(&map[i / 64], __ATOMIC_SEQ_CST) >> (i % 64)) &
	       1;
}

static inline void bit_set_atomic(uint64_t *map, uint32_t i)
{
	__atomic_fetch_or(&map[i / 64], 1ull << (i % 64), __ATOMIC_SEQ_CST);
}

static inline void bit_clear_atomic(uint64_t *map, uint32_t i)
{
	__atomic_fetch_and(&map[i / 64], ~(1ull << (i % 64)),
			   __ATOMIC_SEQ_CST);
}

static inline size_t bitmap_words(uint64_t nbits)
{
	return (size_t)((nbits + 63) / 64);
}

static inline uint64_t bitmap_popcount(const uint64_t *map, uint32_t nbits)
{
	uint64_t n = 0;

	for (size_t i = 0; i < bitmap_words(nbits); i++)
		n += (uint64_t)__builtin_popcountll(map[i]);
	return n;
}

/*
 * One object at one version (key, etag, size), cached in the sparse file
 * objects/XX/ID.  A struct cache_file handed out by cache_file_open is
 * this struct; every handle and every fetch job holds a reference.
 */
struct cache_file {
	struct cache *c;
	/* Immutable while the struct lives. */
	char *key;
	char etag[CACHE_ETAG_MAX];
	uint64_t size_bytes;
	uint64_t id;                /* names the cache file and index row */
	uint32_t nblocks;

	/* Protected by c->lock. */
	struct cache_file *hnext;   /* hash chain */
	unsigned refs;              /* handles + fetch jobs */
	int fd;                     /* open while refs > 0, else -1 */
	int dfd;                    /* O_DIRECT twin of fd for fetched runs
	                             * (no page-cache copy), or -1 */
	bool detached;              /* out of the table: a newer version
	                             * replaced it; freed at refs 0.  Also
	                             * read under c->dirty_lock. */

	_Atomic bool stale;         /* a newer version replaced it: what is
	                             * not cached cannot be fetched any more */
	bool keep_name;             /* stale, its file keeps its name until
	                             * the last close (cache_file_keep_name);
	                             * c->lock */
	bool surrendered;           /* its file became a dirty file
	                             * (cache_file_surrender); c->lock */
	_Atomic int64_t atime_ns;   /* last open/read, CLOCK_REALTIME */
	int64_t saved_atime_ns;     /* as last written (flusher, c->lock) */
	_Atomic bool gone;          /* the bucket's last answer for it was
	                             * 404: a peer asking is told "not that
	                             * version", not an error */

	/* Protected by lock (present and verified: see the top). */
	pthread_mutex_t lock;
	pthread_cond_t cond;        /* blocks landed, fetch failed, verified */
	uint64_t *present;          /* bytes are in the cache file */
	uint64_t *verified;         /* CRC checked (or fetched) this session */
	uint64_t *busy;             /* a fetch or verification is under way */
	uint64_t *dirty_chunks;     /* chunks the index has not seen yet */
	uint32_t *crc;              /* CRC32C of each present block */
	uint32_t *tick;             /* cache_tick() at the block's last use */
	uint16_t *pins;             /* readers using the block right now */
	uint32_t pos_block;         /* where the latest read started */
	uint64_t cached_bytes;      /* bytes of present blocks */
	uint64_t *asking;           /* blocks a fetch is asking a member for
	                             * (NULL until the first such fetch) */
	uint64_t *from_peer;        /* blocks a peer sent (NULL: none), to
	                             * drop at the last close unless
	                             * peer_keep_local (evict.c) */
	bool row_dirty;             /* the objects row needs writing */
	unsigned fail_seq;          /* bumped when a fetch fails */
	int fail_err;               /* -errno of the latest failure */

	/* Protected by c->dirty_lock. */
	struct cache_file *dnext, *dprev;
	bool on_dirty;
};

struct cache_job {
	struct cache_job *next;
	struct cache_file *f;       /* holds a reference */
	uint32_t b0, b1;            /* blocks [b0, b1) */
	bool prefetch;
	bool no_group;              /* for a peer's request: the bucket only
	                             * (group.c, the loop guard) */
};

struct cache_warm_req {
	struct cache_warm_req *next;
	uint64_t size_bytes;
	char etag[CACHE_ETAG_MAX];
	char key[];
};

struct cache_uring;
struct cache_wb;

struct cache {
	bool dir_made;              /* dir_prepare made the cache dir */
	struct cache_config cfg;    /* defaults applied; strings are ours */
	struct obj_store *st;
	int dirfd;                  /* cfg.dir */
	int lockfd;                 /* flock on DIR/index.lock */
	uint64_t run_max_bytes;     /* one GET, a multiple of block_bytes */
	uint64_t piece_bytes;       /* one ensure step of a long range */
	uint64_t high_bytes, low_bytes;
	int64_t t0_ns;              /* CLOCK_REALTIME at open, for ticks */

	/* Protected by lock. */
	pthread_mutex_t lock;
	pthread_cond_t room_cond;   /* used_bytes went down */
	struct cache_file **table;
	size_t table_size;          /* a power of two */
	size_t nobjects;
	uint64_t used_bytes;        /* present blocks + reserved for fetches */
	uint64_t next_id;

	/* Protected by dirty_lock. */
	pthread_mutex_t dirty_lock;
	struct cache_file *dirty_head;
	uint64_t *dead_ids;         /* rows to delete at the next flush */
	size_t ndead, dead_cap;
	bool flush_all;             /* the last flush failed: rewrite all */

	/* The index (index.c, attr.c, flush.c) and the listings kept in it
	 * (listing.c). */
	struct cache_index *idx;
	struct cache_names *names;

	/* Fetching (fetch.c). */
	pthread_mutex_t fq_lock;
	pthread_cond_t fq_cond;
	struct cache_job *demand_head, *demand_tail;
	struct cache_job *pre_head, *pre_tail;
	/* Runs for peers' requests (no_group), on workers of their own:
	 * a member whose workers all wait on owners still serves. */
	pthread_cond_t srv_cond;
	struct cache_job *srv_head, *srv_tail;
	pthread_t *workers;         /* nworkers for readers, then as many
	                             * for peers' requests */
	unsigned nworkers;
	unsigned nthreads;          /* workers started, of both kinds */
	bool fq_stop;

	/* Verification buffers (ensure.c). */
	pthread_mutex_t vlock;
	pthread_cond_t vcond;
	void *vbufs[CACHE_VERIFY_BUFS];
	unsigned nvfree;            /* vbufs[0 .. nvfree) are free */
	unsigned nvalloc, nvmax;    /* allocated so far, at most */

	/* Background warming (cache.c). */
	pthread_mutex_t wlock;
	pthread_cond_t wcond;
	struct cache_warm_req *warm_head, *warm_tail;
	size_t nwarm;
	bool warm_stop, warm_started;
	pthread_t warm_thread;

	struct cache_uring *uring;

	/* Write-back (wb.c); dirty bytes are part of used_bytes. */
	struct cache_wb *wb;
	atomic_uint_fast64_t dirty_bytes;

	/* Statistics. */
	atomic_uint_fast64_t hits, misses, bytes_fetched, inflight_bytes;
	atomic_uint_fast64_t ahead_bytes; /* fetches started ahead of readers */
	atomic_uint_fast64_t evictions, crc_failures, fetch_errors;
	atomic_uint_fast64_t blocks_present;
	atomic_bool connected;

	/* The cache group (group.c).  group may be replaced at any time
	 * (a re-read list): readers load it once per use; the old list
	 * stays valid (its owner frees it after the cache is closed or the
	 * group cleared).  peers is set with the first group. */
	const struct peer_group *_Atomic group;
	struct peer_client *peers;
	atomic_uint_fast64_t peer_hits, peer_bytes_in, peer_fallbacks;
	atomic_uint_fast64_t peer_served, peer_bytes_out, peer_refused,
		peer_dropped, peer_guard_bytes, peer_busy;
};

/* cache_file_open, or -ESTALE without replacing it when another version
 * of key is cached and replace is false (a peer's request). */
int cache_file_open_version(struct cache *c, const char *key,
			    uint64_t size_bytes, const char *etag,
			    bool replace, struct cache_file **out);

/* group.c: asks the owner of f's run at off for len bytes into buf when
 * a group is set and another member owns it.  0: buf holds them; else
 * the caller goes to the bucket. */
int cache_group_fetch(struct cache *c, struct cache_file *f, uint64_t off,
		      uint64_t len, char *buf);
/* Whether this thread is serving a peer's request (cache_peer_serve):
 * what it fetches comes from the bucket (the loop guard), and it does
 * not wait for blocks that a fetch is asking a member for (-EBUSY). */
bool cache_serving_peer(void);
/* A fetch from the bucket of f's [off, off + len) for a peer's request
 * (the guard): counts the bytes when another member owns them. */
void cache_group_guarded(struct cache *c, const struct cache_file *f,
			 uint64_t off, uint64_t len);
/* The block at which runs from block b must stop because a group is
 * set: the end of the range of units that block b's owner holds in a
 * row (peer_place, the same on every member), or UINT32_MAX without a
 * group.  f->key and f->etag do not change while f is open. */
static inline uint32_t cache_group_cut(const struct cache_file *f,
				       uint32_t b)
{
	const struct peer_group *g =
		atomic_load_explicit(&f->c->group, memory_order_relaxed);
	uint64_t bb = f->c->cfg.block_bytes, end = 0;

	if (!g)
		return UINT32_MAX;
	peer_place(g, f->key, f->etag, f->size_bytes, (uint64_t)b * bb, &end);
	return (uint32_t)((end + bb - 1) / bb);
}

/* ---- cache.c ---- */
/* Milliseconds since the cache opened, for block ticks (now_ns from
 * util_wall_ns). */
uint32_t cache_tick(const struct cache *c, int64_t now_ns);
uint32_t cache_block_len(const struct cache_file *f, uint32_t b);
uint64_t cache_run_len(const struct cache_file *f, uint32_t b0, uint32_t b1);
void cache_file_path(uint64_t id, char *buf, size_t len);
/* Allocates f with its block arrays; the caller fills the rest. */
struct cache_file *cache_file_alloc(struct cache *c, const char *key,
				    const char *etag, uint64_t size_bytes,
				    uint64_t id);
void cache_file_free(struct cache_file *f);
/* Adds f to the table (c->lock held or single-threaded). */
int cache_table_insert(struct cache *c, struct cache_file *f);
struct cache_file *cache_table_find(struct cache *c, const char *key);
/* Forgets an object no one has open: file, row and memory (c->lock). */
void cache_drop_object_locked(struct cache *c, struct cache_file *f);
/* Drops one reference (cache_file_close); _locked with c->lock held. */
void cache_file_put(struct cache_file *f);
void cache_file_put_locked(struct cache_file *f);
/* ensure.c: ensures blocks [b0, b1) of f and leaves them pinned on
 * success. */
int cache_ensure_blocks(struct cache_file *f, uint32_t b0, uint32_t b1);
void cache_unpin_blocks(struct cache_file *f, uint32_t b0, uint32_t b1);

/* Moves a clean dirty file (path, relative to the cache dir) into the
 * table as key's version (etag, size) with every block present and
 * verified (crcs), replacing any older version; its `charged` dirty bytes
 * become cached bytes.  On failure the file is left where it was. */
int cache_adopt(struct cache *c, const char *key, const char *etag,
		uint64_t size, const char *path, const uint32_t *crcs,
		uint64_t charged);

/* ---- the write-back ---- */
/* Opens DIR/writeback.sqlite and replays its rows (cache_open;
 * wb_replay.c). */
int cache_wb_open(struct cache *c, char *msg, size_t msg_len);
/* Stops the uploaders (an upload under way finishes) and frees. */
void cache_wb_close(struct cache *c);

/* ---- evict.c ---- */
/* Evicts at least need bytes if it can (c->lock); returns the bytes freed. */
uint64_t cache_evict_locked(struct cache *c, uint64_t need);
/* Reserves bytes of the cap for a fetch into f, evicting as needed, and
 * takes a reference on f for the fetch job.  Waits for room until
 * deadline if it is not NULL, else fails at once: -ENOSPC. */
int cache_reserve(struct cache *c, struct cache_file *f, uint64_t bytes,
		  const struct timespec *deadline);
void cache_unreserve(struct cache *c, uint64_t bytes);
/* After ENOSPC from the cache disk: evicts unopened objects freeing at
 * least bytes beyond the low mark.  Returns the bytes freed. */
uint64_t cache_evict_harder(struct cache *c, uint64_t bytes);

/* ---- index.c ---- */
/* Opens (or creates, or moves aside and recreates) DIR/index.sqlite,
 * checks the cache's identity and loads every object into the table. */
int cache_index_open(struct cache *c, char *msg, size_t msg_len);
/* Whether the index says fmfs made the cache dir; made: say so now. */
bool cache_index_dir_made(struct cache *c, bool made);
int cache_index_start(struct cache *c);   /* the flusher thread */
void cache_index_stop(struct cache *c);
/* Writes what changed in one transaction; all_atimes also saves every
 * changed access time.  Tests may call it directly. */
int cache_index_flush(struct cache *c, bool all_atimes);
void cache_index_close(struct cache *c);
/* Puts f on the dirty list (any lock but dirty_lock may be held). */
void cache_mark_dirty(struct cache_file *f);
/* Queues deletion of an object's rows. */
void cache_index_forget(struct cache *c, uint64_t id);
/* Takes f off the dirty list and marks it detached (c->lock held). */
void cache_index_detach(struct cache_file *f);

/* ---- listing.c: the fs's listings in the index ---- */
struct sqlite3;
struct cache_names_snap;
int cache_names_init(struct cache *c);
void cache_names_free(struct cache *c);
/* Prepares the statements on the index's connection (an SQLite result
 * code); db_close undoes it. */
int cache_names_db_open(struct cache *c, struct sqlite3 *db);
void cache_names_db_close(struct cache *c);
/* The last close of f (c->lock, f's fd still open, f->from_peer set):
 * the blocks peers sent it are evicted (evict.c). */
void cache_drop_peer_blocks_locked(struct cache *c, struct cache_file *f);

/* At close, after the last flush: every stale mark is in the index (a
 * crash before this makes every listing stale at the next open). */
void cache_names_clean(struct cache *c);
/* A copy of the pending changes for a flush (*out NULL: none). */
int cache_names_snap_take(struct cache *c, struct cache_names_snap **out);
/* Whether the table is past its bound (a flush with nothing else to
 * write still evicts). */
bool cache_names_over(struct cache *c);
/* Writes s (may be NULL) in the flush's transaction and evicts past the
 * bound; an SQLite result code. */
int cache_names_write(struct cache *c, struct cache_names_snap *s);
/* After the commit (written) or its failure: frees s, and what it wrote
 * stops being pending unless changed since. */
void cache_names_snap_done(struct cache *c, struct cache_names_snap *s,
			   bool written);

/* ---- fetch.c ---- */
int cache_fetch_start(struct cache *c);
/* Lets running GETs finish, cancels queued jobs, joins the workers. */
void cache_fetch_stop(struct cache *c);
/* Queues a fetch of [b0, b1), already marked busy and reserved with a
 * reference on f; the bytes are counted in flight here. */
void cache_fetch_submit(struct cache_file *f, uint32_t b0, uint32_t b1,
			bool prefetch);
/* Background fetch of what is missing in [off, end); returns the offset
 * up to which everything is present or under way. */
uint64_t cache_prefetch_range(struct cache_file *f, uint64_t off,
			      uint64_t end);

/* ---- uring.c ---- */
/* Starts the engine: io_uring, or plain pwrite/pread if io_uring cannot
 * be set up or FMFS_CACHE_URING=0.  Logs the choice. */
int cache_uring_init(struct cache_uring **out);
void cache_uring_free(struct cache_uring *u);
bool cache_uring_active(const struct cache_uring *u);
/* Writes / reads all of [off, off+len), blocking the caller; short
 * transfers are continued; a read past the end of file is -EIO. */
int cache_uring_pwrite(struct cache_uring *u, int fd, const void *buf,
		       size_t len, uint64_t off);
int cache_uring_pread(struct cache_uring *u, int fd, void *buf, size_t len,
		      uint64_t off);

/* cache.c: the thread that warms what cache_warm queues (open.c starts
 * and stops it). */
int cache_warm_start(struct cache *c);
void cache_warm_stop(struct cache *c);

#endif /* FMFS_CACHE_INT_H */
