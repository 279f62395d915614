/* SPDX-License-Identifier: MIT */
/*
 * ensure.c - making a range of a cache file present: the first serving
 * of a block after open checks it against its CRC32C (verification
 * buffers, one per reader at a time), missing runs are handed to the
 * fetch workers (fetch.c) or the cache group, and the reader waits,
 * pinning what it is about to read.  A hit takes the file's mutex, finds
 * its blocks present and verified in bitmaps, and preads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

/* ---- verification buffers ---- */

static void *vbuf_get(struct cache *c)
{
	void *buf = NULL;

	pthread_mutex_lock(&c->vlock);
	while (!c->nvfree && c->nvalloc >= c->nvmax)
		pthread_cond_wait(&c->vcond, &c->vlock);
	if (c->nvfree) {
		buf = c->vbufs[--c->nvfree];
		pthread_mutex_unlock(&c->vlock);
		return buf;
	}
	c->nvalloc++;
	pthread_mutex_unlock(&c->vlock);
	buf = malloc(c->cfg.block_bytes);
	if (!buf) {
		pthread_mutex_lock(&c->vlock);
		c->nvalloc--;
		pthread_cond_signal(&c->vcond);
		pthread_mutex_unlock(&c->vlock);
	}
	return buf;
}

static void vbuf_put(struct cache *c, void *buf)
{
	pthread_mutex_lock(&c->vlock);
	c->vbufs[c->nvfree++] = buf;
	pthread_cond_signal(&c->vcond);
	pthread_mutex_unlock(&c->vlock);
}

/* ---- ensure: verify, fetch, wait ---- */

/*
 * Checks a block the index says is present against its CRC32C, the first
 * time it is served after open.  Called and returns with f->lock held;
 * drops it meanwhile (the block is busy, so no one else touches it).
 * Returns 0, or -ENOMEM if the check could not run at all.
 */
static int verify_block_locked(struct cache_file *f, uint32_t b)
{
	struct cache *c = f->c;
	uint32_t len = cache_block_len(f, b), crc = 0;
	void *buf;
	int rc;

	bit_set(f->busy, b);
	pthread_mutex_unlock(&f->lock);
	buf = vbuf_get(c);
	rc = buf ? cache_uring_pread(c->uring, f->fd, buf, len,
				     (uint64_t)b * c->cfg.block_bytes) :
		   -ENOMEM;
	if (!rc)
		crc = util_crc32c(0, buf, len);
	if (buf)
		vbuf_put(c, buf);
	pthread_mutex_lock(&f->lock);
	bit_clear(f->busy, b);
	pthread_cond_broadcast(&f->cond);
	if (rc == -ENOMEM)
		return rc;
	if (!rc && crc == f->crc[b]) {
		bit_set_atomic(f->verified, b);
		return 0;
	}
	/* Never served: forget it, and the fetch path gets it again. */
	bit_clear_atomic(f->present, b);
	bit_set(f->dirty_chunks, b / CACHE_CHUNK_BLOCKS);
	f->cached_bytes -= len;
	atomic_fetch_add(&c->crc_failures, 1);
	atomic_fetch_sub(&c->blocks_present, 1);
	if (rc)
		cache_log("block %u of %s could not be read back from the "
			  "cache disk (%s); fetching it again", b, f->key,
			  strerror(-rc));
	else
		cache_log("block %u of %s failed its CRC32C check (index "
			  "%08x, disk %08x); fetching it again", b, f->key,
			  f->crc[b], crc);
	pthread_mutex_unlock(&f->lock);
	cache_mark_dirty(f);
	cache_unreserve(c, len);
	pthread_mutex_lock(&f->lock);
	return 0;
}

struct ensure_scan {
	uint32_t runs[CACHE_ENSURE_RUNS_MAX][2];
	unsigned nruns;
	int64_t verify;     /* a present block to check first, or -1 */
	bool waiting;       /* some block is busy */
	int err;            /* a needed block cannot come */
	unsigned ready;     /* blocks present and verified */
};

/* Gives back runs[from..] of a scan that will not be issued (f->lock). */
static void release_runs_locked(struct cache_file *f, struct ensure_scan *s,
				unsigned from)
{
	for (unsigned i = from; i < s->nruns; i++)
		for (uint32_t b = s->runs[i][0]; b < s->runs[i][1]; b++)
			bit_clear(f->busy, b);
	if (from < s->nruns)
		pthread_cond_broadcast(&f->cond);
	s->nruns = from;
}

/* Sorts [b0, b1) into ready, busy, to verify and to fetch; marks the runs
 * to fetch busy (f->lock). */
static void ensure_scan_locked(struct cache_file *f, uint32_t b0,
			       uint32_t b1, unsigned seq0,
			       struct ensure_scan *s)
{
	uint32_t run_blocks = (uint32_t)(f->c->run_max_bytes /
					 f->c->cfg.block_bytes);

	s->nruns = 0;
	s->verify = -1;
	s->waiting = false;
	s->err = 0;
	s->ready = 0;
	for (uint32_t b = b0; b < b1; b++) {
		uint32_t e, cut;

		if (bit_test(f->present, b) && bit_test(f->verified, b)) {
			s->ready++;
			continue;
		}
		if (bit_test(f->busy, b)) {
			/* A peer's request never waits for a member: two
			 * members that disagree on the list would wait for
			 * each other (docs/cluster-cache.md, "No cycles"). */
			if (f->asking && bit_test(f->asking, b) &&
			    cache_serving_peer()) {
				s->err = -EBUSY;
				release_runs_locked(f, s, 0);
				return;
			}
			s->waiting = true;
			continue;
		}
		if (bit_test(f->present, b)) {
			if (s->verify < 0)
				s->verify = b;
			continue;
		}
		if (atomic_load(&f->stale))
			s->err = -ESTALE;
		else if (f->fail_seq != seq0)
			s->err = f->fail_err ? f->fail_err : -EIO;
		if (s->err) {
			release_runs_locked(f, s, 0);
			return;
		}
		if (s->nruns == CACHE_ENSURE_RUNS_MAX) {
			s->waiting = true; /* issued on the next pass */
			continue;
		}
		cut = cache_group_cut(f, b);
		for (e = b + 1; e < b1 && e - b < run_blocks && e < cut &&
		     !bit_test(f->present, e) && !bit_test(f->busy, e); e++)
			;
		for (uint32_t i = b; i < e; i++)
			bit_set(f->busy, i);
		s->runs[s->nruns][0] = b;
		s->runs[s->nruns++][1] = e;
		b = e - 1;
	}
}

/* Reserves room for the runs and queues them (no lock held). */
static int issue_runs(struct cache_file *f, struct ensure_scan *s,
		      const struct timespec *deadline)
{
	for (unsigned i = 0; i < s->nruns; i++) {
		uint32_t b0 = s->runs[i][0], b1 = s->runs[i][1];
		int rc = cache_reserve(f->c, f, cache_run_len(f, b0, b1),
				       deadline);

		if (rc) {
			pthread_mutex_lock(&f->lock);
			release_runs_locked(f, s, i);
			pthread_mutex_unlock(&f->lock);
			return rc;
		}
		cache_fetch_submit(f, b0, b1, false);
	}
	return 0;
}

/* Pins [b0, b1) and notes the use; needs no lock. */
static void pin_blocks(struct cache_file *f, uint32_t b0, uint32_t b1,
		       uint32_t tick)
{
	for (uint32_t b = b0; b < b1; b++) {
		if (__atomic_fetch_add(&f->pins[b], 1, __ATOMIC_SEQ_CST) ==
		    UINT16_MAX) {
			cache_log("block %u of %s pinned 65536 times", b,
				  f->key);
			abort(); /* a bug: pins leak */
		}
		__atomic_store_n(&f->tick[b], tick, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&f->pos_block, b0, __ATOMIC_RELAXED);
}

void cache_unpin_blocks(struct cache_file *f, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++) {
		uint32_t was = __atomic_fetch_sub(&f->pins[b], 1,
						  __ATOMIC_SEQ_CST);

		util_assert(was > 0); /* an unpin without its pin */
	}
}

/* The fast path of a hit: every block present and verified, seen
 * without the lock after pinning. */
static bool all_ready(const struct cache_file *f, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++)
		if (!bit_test_atomic(f->present, b) ||
		    !bit_test_atomic(f->verified, b))
			return false;
	return true;
}

/* Waits for, verifies or fetches what is missing in [b0, b1), pinned. */
static int ensure_slow(struct cache_file *f, uint32_t b0, uint32_t b1,
		       bool *timed_out)
{
	struct cache *c = f->c;
	struct timespec deadline = util_deadline(c->cfg.fetch_timeout_ms);
	struct ensure_scan s;
	bool first = true;
	unsigned seq0;
	int rc = 0;

	pthread_mutex_lock(&f->lock);
	seq0 = f->fail_seq;
	for (;;) {
		ensure_scan_locked(f, b0, b1, seq0, &s);
		if (first) {
			atomic_fetch_add_explicit(&c->hits, s.ready,
						  memory_order_relaxed);
			first = false;
		}
		if (s.err) {
			rc = s.err;
			break;
		}
		if (s.nruns) {
			pthread_mutex_unlock(&f->lock);
			rc = issue_runs(f, &s, &deadline);
			pthread_mutex_lock(&f->lock);
			if (rc)
				break;
			continue;
		}
		if (s.verify >= 0) {
			rc = verify_block_locked(f, (uint32_t)s.verify);
			if (rc)
				break;
			if (bit_test(f->verified, (uint32_t)s.verify))
				atomic_fetch_add_explicit(&c->hits, 1,
						memory_order_relaxed);
			continue;
		}
		if (!s.waiting)
			break;
		if (*timed_out) {
			rc = -EIO;
			break;
		}
		if (pthread_cond_timedwait(&f->cond, &f->lock, &deadline) ==
		    ETIMEDOUT)
			*timed_out = true; /* one more look, then give up */
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

int cache_ensure_blocks(struct cache_file *f, uint32_t b0, uint32_t b1)
{
	struct cache *c = f->c;
	int64_t now = util_wall_ns();
	bool timed_out = false;
	int rc;

	if (b0 >= b1)
		return 0;
	atomic_store_explicit(&f->atime_ns, now, memory_order_relaxed);
	pin_blocks(f, b0, b1, cache_tick(c, now));
	if (all_ready(f, b0, b1)) {
		atomic_fetch_add_explicit(&c->hits, b1 - b0,
					  memory_order_relaxed);
		return 0;
	}
	rc = ensure_slow(f, b0, b1, &timed_out);
	if (!rc)
		return 0;
	cache_unpin_blocks(f, b0, b1);
	if (rc == -EIO && timed_out) {
		atomic_fetch_add(&c->fetch_errors, 1);
		atomic_store(&c->connected, false);
		cache_log_ratelimited("%s: the store did not answer within "
				      "%u ms", f->key, c->cfg.fetch_timeout_ms);
	}
	return rc;
}

/* Blocks covering [off, off+len) clipped to the object; b0 == b1 if none. */
static void range_blocks(const struct cache_file *f, uint64_t off,
			 uint64_t len, uint32_t *b0, uint32_t *b1)
{
	uint64_t bb = f->c->cfg.block_bytes, end;

	*b0 = *b1 = 0;
	if (off >= f->size_bytes || !len)
		return;
	end = len > f->size_bytes - off ? f->size_bytes : off + len;
	*b0 = (uint32_t)(off / bb);
	*b1 = (uint32_t)((end + bb - 1) / bb);
}

int cache_file_ensure_pinned(struct cache_file *f, uint64_t off,
			     uint64_t len)
{
	uint32_t b0, b1;

	range_blocks(f, off, len, &b0, &b1);
	return cache_ensure_blocks(f, b0, b1);
}

void cache_file_unpin(struct cache_file *f, uint64_t off, uint64_t len)
{
	uint32_t b0, b1;

	range_blocks(f, off, len, &b0, &b1);
	cache_unpin_blocks(f, b0, b1);
}

/* The end of the step of a long range that starts at off. */
static uint64_t piece_end(const struct cache_file *f, uint64_t off,
			  uint64_t end)
{
	uint64_t bb = f->c->cfg.block_bytes;
	uint64_t pe = off / bb * bb + f->c->piece_bytes;

	return pe < end ? pe : end;
}

int cache_file_ensure(struct cache_file *f, uint64_t off, uint64_t len)
{
	uint64_t end;
	int rc;

	if (off >= f->size_bytes || !len)
		return 0;
	end = len > f->size_bytes - off ? f->size_bytes : off + len;
	while (off < end) {
		uint64_t pe = piece_end(f, off, end);

		rc = cache_file_ensure_pinned(f, off, pe - off);
		if (rc)
			return rc;
		cache_file_unpin(f, off, pe - off);
		off = pe;
	}
	return 0;
}

ssize_t cache_file_read(struct cache_file *f, void *buf, size_t len,
			uint64_t off)
{
	uint64_t end, at = off;
	ssize_t n;
	int rc;

	if (off >= f->size_bytes || !len)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	end = len > f->size_bytes - off ? f->size_bytes : off + len;
	while (at < end) {
		uint64_t pe = piece_end(f, at, end);

		rc = cache_file_ensure_pinned(f, at, pe - at);
		if (rc)
			return rc;
		n = util_pread_all(f->fd, (char *)buf + (at - off),
				   (size_t)(pe - at), at);
		rc = n < 0 ? (int)n : n < (ssize_t)(pe - at) ? -EIO : 0;
		cache_file_unpin(f, at, pe - at);
		if (rc)
			return rc;
		at = pe;
	}
	return (ssize_t)(end - off);
}
