/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the persistent NVMe cache of fmfs: object bytes in fixed-size
 * blocks, one sparse cache file per object on the cache disk, an index in
 * SQLite (WAL) that survives unmount and kill -9, a CRC32C per block
 * checked before a block is first served, LRU eviction under a size cap,
 * and fetching of missing blocks from the object store (coalesced ranged
 * GETs, several in parallel, bytes landing in the cache file through an
 * io_uring engine) with a per-reader readahead window under one global
 * bound on bytes in flight.
 *
 * Objects are identified by key and version (ETag + size): opening a key
 * whose version differs from the cached one drops the old blocks.
 *
 * Threads: every function is safe to call from any thread.  A struct
 * cache_file is reference counted: each cache_file_open is matched by one
 * cache_file_close; the cache never evicts blocks of an open file that a
 * reader is waiting on, nor unlinks an open file's cache file.
 *
 * Errors: 0 or a negative errno.  -EIO means the object store failed or
 * did not answer within fetch_timeout_ms; the cause is logged and counted
 * in the stats.  Cached blocks are served even when the store is down.
 * -ENOSPC: no room under the cap (everything cached is in use) or on the
 * cache disk.  -ESTALE: the handle's version was replaced by a newer one
 * (cache_file_open with another etag/size) and the range is not cached.
 * The on-disk format and the crash-safety argument: docs/cache-format.md.
 */
#ifndef FMFS_CACHE_H
#define FMFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "objstore/objstore.h"
#include "peer/peer.h"

struct cache_config {
	const char *dir;              /* cache directory; created if missing */
	bool dir_made;                /* the caller made dir just now: fmfs
	                               * keeps its mode 0700 from then on
	                               * (a dir it did not make: never) */
	const char *store_id;         /* the store URL; a cache dir serves one */
	uint64_t size_bytes;          /* cap on cached bytes: clean blocks never
	                               * exceed it; dirty data may, see wb.h */
	uint32_t block_bytes;         /* 0: 1 MiB; fixed for a cache dir */
	unsigned high_pct, low_pct;   /* evict above high until low; 0: 95/85 */
	uint64_t readahead_first_bytes; /* first window; 0: 1 MiB */
	uint64_t readahead_max_bytes;   /* per-reader window cap; 0: 64 MiB */
	uint64_t inflight_max_bytes;    /* all fetches together; 0: 256 MiB */
	unsigned fetch_parallel;        /* ranged GETs at once; 0: 16 */
	unsigned fetch_timeout_ms;      /* a waiting reader gives up; 0: 30000 */
	uint64_t listing_max_bytes;     /* listings kept in the index (below);
	                                 * 0: 1 GiB */
	bool peer_keep_local;           /* in a cache group: keep the blocks
	                                 * a peer sent after the file's last
	                                 * close (else they are dropped then:
	                                 * the owner keeps the group's copy) */
	bool takeover;                  /* opened by a daemon taking a mount
	                                 * over (docs/keeper.md): a dirty file
	                                 * never committed is one still open
	                                 * for writing, kept as it is for its
	                                 * writer, not put in lost+found */
};
void cache_config_init(struct cache_config *cfg);

struct cache;

/* Opens or creates the cache in cfg->dir for store st (borrowed: must
 * outlive the cache).  Fails with a message (msg) if the directory is not
 * usable, belongs to another store, has another block size, or the index
 * is corrupt beyond repair (then the message says which file to remove). */
int cache_open(const struct cache_config *cfg, struct obj_store *st,
	       struct cache **out, char *msg, size_t msg_len);
/* Waits for fetches in flight, writes the index, frees everything. */
void cache_close(struct cache *c);

struct cache_file;

/* Opens the cache entry of key at version (size_bytes, etag), creating it
 * if needed.  Never contacts the store. */
int cache_file_open(struct cache *c, const char *key, uint64_t size_bytes,
		    const char *etag, struct cache_file **out);
void cache_file_close(struct cache_file *f);

/* Makes [off, off+len) present and verified (clipped to the object size),
 * fetching what is missing, and waits for it. */
int cache_file_ensure(struct cache_file *f, uint64_t off, uint64_t len);
/* The cache file's descriptor, valid while f is open: after
 * cache_file_ensure, [off, off+len) may be read from it directly (for
 * fuse_reply_data with FUSE_BUF_IS_FD). */
int cache_file_fd(struct cache_file *f);
/* The size of the version f caches. */
uint64_t cache_file_size(const struct cache_file *f);
/* One more reference to f, for a holder of one: matched by one more
 * cache_file_close. */
void cache_file_ref(struct cache_file *f);
/* Should a newer version replace f while it is open, its file keeps its
 * name until the last close, so that cache_file_surrender can still
 * move it (a FUSE passthrough backing on a read-write mount). */
void cache_file_keep_name(struct cache_file *f);
/* f's file, wholly cached, becomes another file of the cache directory:
 * renamed to `to` (a path under it), out of the read cache for good, its
 * bytes counted as dirty from now on (*bytes: how many).  The open
 * descriptors of the file keep working and see whatever is written to it
 * next.  -EBUSY when more than expect_refs references hold f (someone
 * could still read or fetch into it) or it is not wholly cached; nothing
 * changes then.  The caller holds one of the references and closes it as
 * usual. */
int cache_file_surrender(struct cache_file *f, unsigned expect_refs,
			 const char *to, uint64_t *bytes);
/* Whether cache_file_surrender would take f now (a cheap look first). */
bool cache_file_can_surrender(struct cache_file *f, unsigned expect_refs);
/* True when every block of f is in the cache (verified or not yet). */
bool cache_file_complete(struct cache_file *f);
/* cache_file_ensure, and the blocks of [off, off+len) stay pinned (never
 * evicted) until the matching cache_file_unpin with the same range: for
 * serving a read from cache_file_fd when the cache is under pressure.
 * cache_file_ensure alone only makes eviction of the range unlikely (the
 * blocks just used go last).  The range should be at most a quarter of
 * the cache. */
int cache_file_ensure_pinned(struct cache_file *f, uint64_t off,
			     uint64_t len);
void cache_file_unpin(struct cache_file *f, uint64_t off, uint64_t len);
/* cache_file_ensure then pread into buf; returns bytes read or -errno. */
ssize_t cache_file_read(struct cache_file *f, void *buf, size_t len,
			uint64_t off);

/* Per-open-handle sequential detection and readahead.  Call
 * cache_reader_note before serving each read of the handle: a sequential
 * reader gets a window that starts at readahead_first_bytes and doubles
 * up to readahead_max_bytes, fetched ahead in the background; a random
 * reader gets none.  Not thread-safe per reader (one per handle, FUSE
 * serialises nothing: the caller locks if reads on one handle race). */
struct cache_reader {
	uint64_t next_off;      /* where a sequential reader reads next */
	uint64_t window_bytes;  /* current window, 0 until sequential */
	uint64_t ahead_off;     /* readahead issued up to here */
	unsigned seq_hits;
};
void cache_reader_note(struct cache_file *f, struct cache_reader *r,
		       uint64_t off, size_t len);

/* Background fetch of [off, off+len) within the in-flight bound. */
void cache_file_prefetch(struct cache_file *f, uint64_t off, uint64_t len);

/* Fetches a whole object (for `fmfs prefetch`); waits if wait is true,
 * else queues it (-EAGAIN if 16384 are queued already).  -EFBIG for an
 * object larger than low_pct of the cache. */
int cache_warm(struct cache *c, const char *key, uint64_t size_bytes,
	       const char *etag, bool wait);
/* Drops a key's cached blocks (not while open: -EBUSY; 0 if none). */
int cache_evict_key(struct cache *c, const char *key);
/* Bytes of key's present blocks now (0 if not cached): what an evict
 * would drop. */
uint64_t cache_cached_bytes(struct cache *c, const char *key);

/* The attributes stored with an object (its x-amz-meta-mode, -uid, -gid
 * and -mtime), remembered in the index once learned (from a HEAD, or
 * because this cache wrote them) so that a remount shows them before it
 * asks the store.  One per key: a file's with the version (etag) they
 * were learned for, a directory's ("a/b/") with an empty etag.  What to
 * show for an object whose attributes are unknown is the fs's business
 * (docs/semantics.md, "Attributes"). */
#define CACHE_ATTR_MODE  1u
#define CACHE_ATTR_UID   2u
#define CACHE_ATTR_GID   4u
#define CACHE_ATTR_MTIME 8u
#define CACHE_ATTR_CTIME 16u
#define CACHE_ATTR_ATIME 32u
#define CACHE_ATTR_RDEV  64u
#define CACHE_ATTR_ISDIR 128u /* no mode, but a directory's Content-Type */
#define CACHE_ATTR_ALL   255u
struct cache_attr {
	char etag[80];
	unsigned has;           /* CACHE_ATTR_*: those stored with the object */
	uint32_t mode;          /* as stored: type and permission bits */
	uint32_t uid, gid;
	int64_t mtime_ns;
	int64_t ctime_ns, atime_ns;
	uint32_t rdev;
};
/* key's attributes: 0 with *out filled, or -ENOENT.  Never contacts the
 * store; costs one lookup in the index (a few microseconds). */
int cache_attr_get(struct cache *c, const char *key, struct cache_attr *out);
/* Remembers a as key's attributes, or forgets key's (a NULL).  Seen by
 * cache_attr_get at once; in the index after the next flush (about a
 * second, and at close). */
void cache_attr_set(struct cache *c, const char *key,
		    const struct cache_attr *a);

/* Directory listings, as the fs packs them (bytes the cache does not
 * read), kept in the index so that a remount knows the namespace before
 * it asks the store (docs/cache-format.md "listings").  dir is the
 * directory's key ("" or "a/b/"); fetched_ms when the store gave it
 * (CLOCK_REALTIME, ms; 0: stale, LIST it again before trusting it).
 * Bounded by listing_max_bytes: the listings used longest ago go. */
/* dir's listing (*data malloc'd, the caller frees it): 0, -ENOENT, or
 * -ENOMEM / -EIO.  Never contacts the store. */
int cache_listing_get(struct cache *c, const char *dir, void **data,
		      size_t *len, uint32_t *entries, int64_t *fetched_ms);
/* Keeps a copy of data as dir's listing; in the index after the next
 * flush (about a second, and at close). */
void cache_listing_put(struct cache *c, const char *dir, const void *data,
		       size_t len, uint32_t entries, int64_t fetched_ms);
/* Marks dir's listing stale (its data stays, served while the store is
 * unreachable); tree: every listing whose key starts with dir. */
void cache_listing_stale(struct cache *c, const char *dir, bool tree);
/* Listings in the index and their entries (as last flushed). */
void cache_listing_stats(struct cache *c, uint64_t *dirs, uint64_t *entries);
/* Whether dir holds anything a cache dir does not (cache/dir.c): 0 when
 * it is missing, empty or holds only a cache's names (objects/, dirty/,
 * lost+found/, the indexes and their journals, the locks, fmfs.log); 1
 * with the first other name in other; -errno when it cannot be read. */
int cache_dir_foreign(const char *dir, char *other, size_t other_len);
/* The index's size on disk (index.sqlite and its WAL), bytes. */
uint64_t cache_index_bytes(struct cache *c);
/* Flushes of the index that ended without an error (by the flusher,
 * about every second, or by a caller): whatever was changed before a
 * flush began is on disk once the count has gone up by two. */
uint64_t cache_index_flushes(struct cache *c);

struct cache_stats {
	uint64_t cap_bytes, used_bytes;
	uint64_t objects, blocks;
	uint64_t hits, misses;          /* blocks served from cache / fetched */
	uint64_t bytes_fetched;
	uint64_t ahead_bytes;           /* of which asked for ahead of readers:
	                                 * readahead and fmfs prefetch */
	uint64_t inflight_bytes;        /* readahead and fetches under way */
	uint64_t evictions;             /* blocks evicted */
	uint64_t crc_failures;          /* blocks that failed verification */
	uint64_t fetch_errors;
	bool connected;                 /* last store request succeeded */
	/* The cache group (cache_set_group; all 0 without one). */
	uint64_t peer_hits;             /* runs a peer served us */
	uint64_t peer_bytes_in;         /* their bytes */
	uint64_t peer_fallbacks;        /* asked a peer, went to the bucket */
	uint64_t peer_served;           /* runs we served to peers */
	uint64_t peer_bytes_out;        /* their bytes */
	uint64_t peer_refused;          /* asked for a version we do not hold */
	uint64_t peer_dropped;          /* blocks peers sent, dropped at the
	                                 * last close (no --peer-keep-local) */
	uint64_t peer_rma_reads;        /* runs pulled from owners one-sided */
	uint64_t peer_guard_bytes;      /* bytes fetched from the bucket for a
	                                 * peer's request although another
	                                 * member owns them (the loop guard) */
	uint64_t peer_busy;             /* owners that said "busy": asked of a
	                                 * member for the same blocks */
	uint64_t peer_timeouts;         /* members silent past --peer-timeout */
	uint64_t peer_skipped_down;     /* runs not asked: the owner was down */
	unsigned peer_members_down;     /* members down now */
};
void cache_get_stats(struct cache *c, struct cache_stats *out);
/* The store answered another request (the fs's): connected again. */
void cache_store_answered(struct cache *c);

/* ---- the cache group (group.c, docs/cluster-cache.md) ----
 *
 * With a group set, each run_max_bytes-aligned run of an object version
 * has an owner among the members (peer_owner).  A missing run this
 * member does not own is asked of its owner first (pc), and of the
 * bucket when the owner fails or says it no longer has that version;
 * runs are cut at those boundaries so one run has one owner.  What the
 * owner sends is written into the local cache as a fetch from the bucket
 * would be (each block with its CRC32C).  g may be replaced by another
 * list at any time (the same pc); each is borrowed until the cache is
 * closed or the group cleared (NULL), since a fetch under way may still
 * read the one it loaded.  g->self must be this member: a list without
 * it, or of one member, turns the group off. */
void cache_set_group(struct cache *c, const struct peer_group *g,
		     struct peer_client *pc);
/* The serve function of this member's peer_server (arg: the cache):
 * reads [g->off, +g->len) of the version named from the cache, fetching
 * what is missing from the bucket (never from peers).  -ENOENT when the
 * cache holds another version of the key: a peer never replaces it. */
int cache_peer_serve(void *arg, const struct peer_get *g,
		     unsigned char *buf);
/* The group's members as peer_client_describe says them ("" without a
 * group), and its size. */
unsigned cache_group_describe(struct cache *c, char *buf, size_t len);
/* How runs come from peers: "tcp", a libfabric provider ("tcp;ofi_rxm",
 * "verbs;ofi_rxm"), or "" without a group. */
const char *cache_group_transport(struct cache *c);

/* Write-back (files written through the mount, their upload queue and
 * tombstones) has its own header: cache/wb.h. */

#endif /* FMFS_CACHE_H */
