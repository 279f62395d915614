/* SPDX-License-Identifier: MIT */
/*
 * evict.c - space under the cache's size cap: reservations for fetches
 * and LRU eviction.
 *
 * c->used_bytes counts present blocks (block_bytes each, the last block
 * of an object its real size) plus the blocks reserved for fetches under
 * way, so the cap holds even while fetches land: a fetch reserves its
 * bytes before it is queued, a failed one gives them back, a landed one
 * turns them into cached bytes.  A reservation that would take used
 * above high_pct of the cap evicts until it would be below low_pct:
 * first whole objects that no one has open, least recently opened or
 * read first (the file is unlinked, the index row forgotten); then, if
 * that is not enough (an object bigger than the cache, everything open),
 * blocks of open objects that no reader has pinned, by punching holes:
 * those behind the object's latest read first, then least recently used.
 * If even that finds no room, the reader waits (until fetch_timeout_ms)
 * and then gets -ENOSPC; readahead never waits.
 *
 * Objects are sorted by access time when eviction runs rather than kept
 * in an LRU list, so that a hit only stores a timestamp.  Eviction runs
 * once per (high_pct - low_pct) of the cap fetched.  Everything here runs
 * under c->lock; a block of an open object is taken under f->lock too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"

#define ROOM_POLL_MS 20

struct lru_cand {
	int64_t atime_ns;
	struct cache_file *f;
};

static int lru_cmp(const void *a, const void *b)
{
	const struct lru_cand *x = a, *y = b;

	return (x->atime_ns > y->atime_ns) - (x->atime_ns < y->atime_ns);
}

/* Objects with refs == 0 (open == false) or > 0, oldest first.  Returns
 * the count; *out is malloc'd (NULL and 0 when out of memory). */
static size_t lru_list(struct cache *c, bool open, struct lru_cand **out)
{
	struct lru_cand *v = malloc((c->nobjects + 1) * sizeof(*v));
	size_t n = 0;

	*out = v;
	if (!v)
		return 0;
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext) {
			/* cached_bytes of an open object may change
			 * under f->lock only: not a filter for those. */
			if ((f->refs > 0) != open ||
			    (!open && !f->cached_bytes))
				continue;
			v[n].atime_ns = atomic_load_explicit(&f->atime_ns,
						memory_order_relaxed);
			v[n++].f = f;
		}
	qsort(v, n, sizeof(*v), lru_cmp);
	return n;
}

static uint64_t evict_objects_locked(struct cache *c, uint64_t need)
{
	struct lru_cand *v;
	size_t n = lru_list(c, false, &v);
	uint64_t freed = 0;

	for (size_t i = 0; i < n && freed < need; i++) {
		freed += v[i].f->cached_bytes;
		atomic_fetch_add(&c->evictions,
				 bitmap_popcount(v[i].f->present,
					      v[i].f->nblocks));
		cache_drop_object_locked(c, v[i].f);
	}
	free(v);
	return freed;
}

struct block_cand {
	uint32_t ahead;     /* at or after the latest read: evicted last */
	uint32_t tick;
	uint32_t b;
};

static int block_cmp(const void *a, const void *b)
{
	const struct block_cand *x = a, *y = b;

	if (x->ahead != y->ahead)
		return x->ahead < y->ahead ? -1 : 1;
	if (x->tick != y->tick)
		return x->tick < y->tick ? -1 : 1;
	return (x->b > y->b) - (x->b < y->b);
}

static void punch_block(struct cache_file *f, uint32_t b)
{
	uint64_t bb = f->c->cfg.block_bytes;

	if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)((uint64_t)b * bb), (off_t)cache_block_len(f, b)))
		cache_log_ratelimited("cannot punch a hole in the cache file "
				      "of %s (%s): evicted blocks of open "
				      "files keep their disk space until "
				      "closed", f->key, strerror(errno));
}

static bool pinned(struct cache_file *f, uint32_t b)
{
	return __atomic_load_n(&f->pins[b], __ATOMIC_SEQ_CST) != 0;
}

/* Takes block b away unless a reader pins it meanwhile (see
 * cache_int.h for why clearing first and then checking is enough). */
static bool evict_block(struct cache_file *f, uint32_t b)
{
	bool was_verified = bit_test(f->verified, b);

	if (pinned(f, b))
		return false;
	bit_clear_atomic(f->present, b);
	bit_clear_atomic(f->verified, b);
	if (pinned(f, b)) {
		if (was_verified)
			bit_set_atomic(f->verified, b);
		bit_set_atomic(f->present, b);
		return false;
	}
	punch_block(f, b);
	bit_set(f->dirty_chunks, b / CACHE_CHUNK_BLOCKS);
	return true;
}

/* Evicts unpinned, idle blocks of one open object (c->lock, f->lock):
 * those behind the latest read first, then the least recently used. */
static uint64_t evict_blocks_of(struct cache_file *f, uint64_t need)
{
	struct block_cand *v = malloc((f->nblocks + 1) * sizeof(*v));
	uint32_t pos = __atomic_load_n(&f->pos_block, __ATOMIC_RELAXED);
	uint64_t freed = 0, nevicted = 0;
	size_t n = 0;

	if (!v)
		return 0;
	for (uint32_t b = 0; b < f->nblocks; b++) {
		if (!bit_test(f->present, b) || bit_test(f->busy, b) ||
		    pinned(f, b))
			continue;
		v[n].ahead = b >= pos;
		v[n].tick = __atomic_load_n(&f->tick[b], __ATOMIC_RELAXED);
		v[n++].b = b;
	}
	qsort(v, n, sizeof(*v), block_cmp);
	for (size_t i = 0; i < n && freed < need; i++) {
		if (!evict_block(f, v[i].b))
			continue;
		freed += cache_block_len(f, v[i].b);
		nevicted++;
	}
	free(v);
	f->cached_bytes -= freed;
	if (nevicted) {
		atomic_fetch_add(&f->c->evictions, nevicted);
		atomic_fetch_sub(&f->c->blocks_present, nevicted);
		cache_mark_dirty(f);
	}
	return freed;
}

void cache_drop_peer_blocks_locked(struct cache *c, struct cache_file *f)
{
	uint64_t freed = 0, n = 0;

	/* f->from_peer exists only without peer_keep_local (run_done). */
	pthread_mutex_lock(&f->lock);
	for (uint32_t b = 0; b < f->nblocks; b++) {
		if (!bit_test(f->from_peer, b) || !bit_test(f->present, b) ||
		    bit_test(f->busy, b) || !evict_block(f, b))
			continue;
		freed += cache_block_len(f, b);
		n++;
	}
	free(f->from_peer);
	f->from_peer = NULL;
	f->cached_bytes -= freed;
	if (n) {
		atomic_fetch_add(&c->peer_dropped, n);
		atomic_fetch_sub(&c->blocks_present, n);
		cache_mark_dirty(f);
	}
	pthread_mutex_unlock(&f->lock);
	if (freed) {
		c->used_bytes -= freed;
		pthread_cond_broadcast(&c->room_cond);
	}
}

static uint64_t evict_open_locked(struct cache *c, uint64_t need)
{
	struct lru_cand *v;
	size_t n = lru_list(c, true, &v);
	uint64_t freed = 0;

	for (size_t i = 0; i < n && freed < need; i++) {
		struct cache_file *f = v[i].f;
		uint64_t got;

		pthread_mutex_lock(&f->lock);
		got = evict_blocks_of(f, need - freed);
		pthread_mutex_unlock(&f->lock);
		c->used_bytes -= got;
		freed += got;
	}
	free(v);
	return freed;
}

uint64_t cache_evict_locked(struct cache *c, uint64_t need)
{
	uint64_t freed = evict_objects_locked(c, need);

	if (freed < need)
		freed += evict_open_locked(c, need - freed);
	return freed;
}

int cache_reserve(struct cache *c, struct cache_file *f, uint64_t bytes,
		  const struct timespec *deadline)
{
	uint64_t cap = c->cfg.size_bytes;
	int rc = -ENOSPC;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		uint64_t want = c->used_bytes + bytes;
		struct timespec poll;

		if (want > c->high_bytes)
			cache_evict_locked(c, want > c->low_bytes ?
					   want - c->low_bytes : 0);
		if (c->used_bytes + bytes <= cap) {
			c->used_bytes += bytes;
			f->refs++;
			rc = 0;
			break;
		}
		if (!deadline || util_deadline_passed(deadline))
			break;
		/* Pins are dropped without c->lock: poll as well. */
		poll = util_deadline(ROOM_POLL_MS);
		if (poll.tv_sec > deadline->tv_sec ||
		    (poll.tv_sec == deadline->tv_sec &&
		     poll.tv_nsec > deadline->tv_nsec))
			poll = *deadline;
		pthread_cond_timedwait(&c->room_cond, &c->lock, &poll);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc && deadline)
		cache_log_ratelimited("no room for %llu more bytes of %s in "
				      "the %llu-byte cache: everything cached "
				      "is in use", (unsigned long long)bytes,
				      f->key, (unsigned long long)cap);
	return rc;
}

void cache_unreserve(struct cache *c, uint64_t bytes)
{
	pthread_mutex_lock(&c->lock);
	c->used_bytes -= bytes;
	pthread_cond_broadcast(&c->room_cond);
	pthread_mutex_unlock(&c->lock);
}

uint64_t cache_evict_harder(struct cache *c, uint64_t bytes)
{
	uint64_t freed;

	pthread_mutex_lock(&c->lock);
	freed = cache_evict_locked(c, (c->used_bytes > c->low_bytes ?
					c->used_bytes - c->low_bytes : 0) +
				   bytes);
	pthread_mutex_unlock(&c->lock);
	return freed;
}
