/* SPDX-License-Identifier: MIT */
/*
 * fetch.c - filling missing blocks from the object store, and readahead.
 *
 * A reader that finds blocks missing (ensure.c) marks each run of them
 * busy, reserves room for it under the cap, and queues it here; a run is
 * at most run_max_bytes (8 MiB by default), so a long range becomes
 * several ranged GETs that the workers fetch in parallel.  Each of the
 * fetch_parallel workers owns one buffer of run_max_bytes, so the bytes
 * being fetched never exceed inflight_max_bytes: the workers are the
 * buffer pool.  A worker GETs the run into its buffer, computes each
 * block's CRC32C, writes the bytes to the cache file through the io_uring
 * engine, marks the blocks present and verified, and wakes the readers
 * waiting on the object's condition variable.  Blocks stay busy from the
 * moment a run is queued until it lands or fails, so a second reader of
 * the same block waits for the same GET instead of sending its own.
 *
 * A failed GET wakes the waiters with the error (they return -EIO), is
 * counted in fetch_errors, and marks the store disconnected unless the
 * store answered about this key (not found, range, precondition); the
 * next success marks it connected again.  Only those two transitions are
 * logged, so a dead store does not flood the log.
 *
 * Readers' own fetches (demand) go before readahead.  Readahead is
 * admitted only while the bytes queued and in flight stay under
 * inflight_max_bytes, and only if room can be found without waiting;
 * otherwise it is skipped and tried again at the reader's next read.
 *
 * In a cache group, a run may come from its owner instead of the bucket
 * (group.c), and runs fetched for another member's request (no_group)
 * have a queue and as many workers of their own: they go to the bucket
 * only, and never wait behind this member's readers, whose workers may
 * all be waiting on owners (docs/cluster-cache.md, "No cycles").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_int.h"

/* Most blocks in one run: 8 MiB of 4 KiB blocks. */
#define RUN_BLOCKS_MAX (CACHE_RUN_MAX_BYTES / 4096)

/*
 * The end of a run, good (rc 0, crcs of each block) or not: clears the
 * busy bits, settles the counters, the reservation and the in-flight
 * bytes, then wakes the waiters and drops the job's reference on f in one
 * step under c->lock, so that a woken reader finds everything settled
 * (f cannot be freed while c->lock is held).
 */
static void run_done(struct cache_file *f, uint32_t b0, uint32_t b1, int rc,
		     const uint32_t *crcs, bool from_peer)
{
	struct cache *c = f->c;
	uint64_t len = cache_run_len(f, b0, b1);
	uint32_t tick = cache_tick(c, util_wall_ns());
	bool whole = false;

	pthread_mutex_lock(&f->lock);
	/* Blocks a peer sent are remembered, to drop at the last close
	 * (unless --peer-keep-local); the bucket's replace them. */
	if (!rc && from_peer && !f->c->cfg.peer_keep_local && !f->from_peer)
		f->from_peer = calloc((f->nblocks + 63) / 64, sizeof(uint64_t));
	for (uint32_t b = b0; b < b1; b++) {
		bit_clear(f->busy, b);
		if (rc)
			continue;
		if (f->from_peer) {
			if (from_peer)
				bit_set(f->from_peer, b);
			else
				bit_clear(f->from_peer, b);
		}
		f->crc[b] = crcs[b - b0];
		__atomic_store_n(&f->tick[b], tick, __ATOMIC_RELAXED);
		bit_set_atomic(f->verified, b);
		bit_set_atomic(f->present, b);
		bit_set(f->dirty_chunks, b / CACHE_CHUNK_BLOCKS);
	}
	if (!rc) {
		f->cached_bytes += len;
		whole = f->cached_bytes >= f->size_bytes;
	} else {
		/* Waiters give up rather than ask again (at close too). */
		f->fail_seq++;
		f->fail_err = rc == -ECANCELED ? -EIO : rc;
	}
	pthread_mutex_unlock(&f->lock);
	/* The job's reference keeps f->fd open.  See open_fd_locked. */
	if (whole)
		posix_fadvise(f->fd, 0, 0, POSIX_FADV_NORMAL);
	if (!rc) {
		cache_mark_dirty(f);
		atomic_fetch_add(&c->misses, b1 - b0);
		atomic_fetch_add(&c->blocks_present, b1 - b0);
		atomic_fetch_add(&c->bytes_fetched, len);
	}
	atomic_fetch_sub(&c->inflight_bytes, len);
	pthread_mutex_lock(&c->lock);
	if (rc) {
		c->used_bytes -= len; /* the reservation */
		pthread_cond_broadcast(&c->room_cond);
	}
	pthread_cond_broadcast(&f->cond);
	cache_file_put_locked(f);
	pthread_mutex_unlock(&c->lock);
}

static void store_failed(struct cache *c, const struct cache_file *f,
			 const struct obj_error *err)
{
	char line[512];
	bool answered = err->status == OBJ_ERR_NOT_FOUND ||
			err->status == OBJ_ERR_RANGE ||
			err->status == OBJ_ERR_PRECONDITION;

	atomic_fetch_add(&c->fetch_errors, 1);
	obj_error_format(err, line, sizeof(line));
	if (!answered && atomic_exchange(&c->connected, false))
		cache_log("store unreachable (GET %s: %s); serving cached "
			  "blocks only", f->key, line);
	else
		cache_log_ratelimited("GET %s failed: %s", f->key, line);
}

static void store_ok(struct cache *c)
{
	cache_store_answered(c);
}

void cache_store_answered(struct cache *c)
{
	if (!atomic_load_explicit(&c->connected, memory_order_relaxed) &&
	    !atomic_exchange(&c->connected, true))
		cache_log("store reachable again");
}

#define DIO_ALIGN 4096

/* Writes the run: its 4 KiB-aligned head with O_DIRECT (the buffer and
 * the offset, a block boundary, are aligned), an unaligned tail (the
 * object's last bytes) buffered.  Falls back to buffered writes if the
 * filesystem refuses O_DIRECT. */
static int write_once(struct cache *c, struct cache_file *f,
		      const char *buf, uint64_t len, uint64_t off)
{
	uint64_t head = f->dfd >= 0 && off % DIO_ALIGN == 0 &&
			(uintptr_t)buf % DIO_ALIGN == 0 ?
			len / DIO_ALIGN * DIO_ALIGN : 0;
	int rc = 0;

	if (head) {
		rc = cache_uring_pwrite(c->uring, f->dfd, buf, (size_t)head,
					off);
		if (rc == -EINVAL)
			head = 0; /* no O_DIRECT after all: all buffered */
		else if (rc)
			return rc;
	}
	if (len > head)
		rc = cache_uring_pwrite(c->uring, f->fd, buf + head,
					(size_t)(len - head), off + head);
	return rc;
}

/* Writes a fetched run to the cache file; on a full disk, evicts and
 * tries once more. */
static int write_run(struct cache *c, struct cache_file *f, const void *buf,
		     uint64_t len, uint64_t off)
{
	int rc = write_once(c, f, buf, len, off);

	if (rc == -ENOSPC) {
		cache_log_ratelimited("cache disk of %s is full; evicting "
				      "and trying again", c->cfg.dir);
		cache_evict_harder(c, len);
		rc = write_once(c, f, buf, len, off);
	}
	if (rc)
		cache_log_ratelimited("cannot write the cache file of %s: %s",
				      f->key, strerror(-rc));
	return rc;
}

static int fetch_run(struct cache *c, struct cache_job *j, char *buf,
		     uint32_t *crcs, bool *from_peer)
{
	struct cache_file *f = j->f;
	uint64_t bb = c->cfg.block_bytes, off = (uint64_t)j->b0 * bb;
	uint64_t len = cache_run_len(f, j->b0, j->b1);
	struct obj_error err;
	size_t got = 0;
	obj_status st;

	*from_peer = false;
	if (j->no_group) {
		cache_group_guarded(c, f, off, len);
	} else if (!cache_group_fetch(c, f, off, len, buf)) {
		got = (size_t)len;
		*from_peer = true;
		goto have;
	}
	st = obj_get(c->st, f->key, off, (size_t)len, buf, &got, &err);
	atomic_store(&f->gone, st == OBJ_ERR_NOT_FOUND);
	if (st != OBJ_OK) {
		store_failed(c, f, &err);
		return -EIO;
	}
	store_ok(c);
have:
	if (got != len) {
		atomic_fetch_add(&c->fetch_errors, 1);
		cache_log_ratelimited("%s changed in the store: %llu bytes at "
				      "%llu came back as %zu; reopen it",
				      f->key, (unsigned long long)len,
				      (unsigned long long)off, got);
		return -EIO;
	}
	for (uint32_t b = j->b0; b < j->b1; b++) {
		uint64_t bo = (uint64_t)(b - j->b0) * bb;

		crcs[b - j->b0] = util_crc32c(0, buf + bo,
					       cache_block_len(f, b));
	}
	return write_run(c, f, buf, len, off);
}

static struct cache_job *pop(struct cache_job **head,
			     struct cache_job **tail)
{
	struct cache_job *j = *head;

	if (j) {
		*head = j->next;
		if (!*head)
			*tail = NULL;
	}
	return j;
}

/* The next job for a reader's worker (demand, then readahead) or for a
 * peer's (fq_lock). */
static struct cache_job *job_pop_locked(struct cache *c, bool for_peers)
{
	struct cache_job *j;

	if (for_peers)
		return pop(&c->srv_head, &c->srv_tail);
	if ((j = pop(&c->demand_head, &c->demand_tail)))
		return j;
	return pop(&c->pre_head, &c->pre_tail);
}

static void worker_loop(struct cache *c, bool for_peers)
{
	pthread_cond_t *cond = for_peers ? &c->srv_cond : &c->fq_cond;
	uint32_t crcs[RUN_BLOCKS_MAX];
	char *buf = NULL;

	for (;;) {
		struct cache_job *j = NULL;
		bool peer = false;
		int rc;

		pthread_mutex_lock(&c->fq_lock);
		while (!c->fq_stop && !(j = job_pop_locked(c, for_peers)))
			pthread_cond_wait(cond, &c->fq_lock);
		pthread_mutex_unlock(&c->fq_lock);
		if (!j)
			break;
		/* Huge pages: 8 MiB in 4 KiB pages was 2048 page faults per
		 * worker on a fresh mount, each an exit to the hypervisor in
		 * a virtual machine (half of the daemon's CPU in a cold read
		 * of 512 MiB here).  Not faulted in ahead: a worker that only
		 * ever fetches small objects touches one 2 MiB page. */
		if (!buf)
			buf = util_map_huge(c->run_max_bytes, false);
		rc = buf ? fetch_run(c, j, buf, crcs, &peer) : -ENOMEM;
		run_done(j->f, j->b0, j->b1, rc, crcs, peer);
		free(j);
	}
	if (buf)
		munmap(buf, c->run_max_bytes);
}

static void *fetch_worker(void *arg)
{
	worker_loop(arg, false);
	return NULL;
}

static void *serve_worker(void *arg)
{
	worker_loop(arg, true);
	return NULL;
}

int cache_fetch_start(struct cache *c)
{
	uint64_t by_bytes = c->cfg.inflight_max_bytes / c->run_max_bytes;
	unsigned n = c->cfg.fetch_parallel, started = 0;

	if (by_bytes < 1)
		by_bytes = 1;
	if (n > by_bytes)
		n = (unsigned)by_bytes;
	c->workers = calloc(2 * (size_t)n, sizeof(*c->workers));
	if (!c->workers)
		return -ENOMEM;
	c->nworkers = n;
	for (; started < 2 * n; started++) {
		int rc = pthread_create(&c->workers[started], NULL,
					started < n ? fetch_worker :
					serve_worker, c);

		if (rc) {
			cache_fetch_stop(c);
			return -rc;
		}
		c->nthreads = started + 1;
	}
	return 0;
}

void cache_fetch_stop(struct cache *c)
{
	struct cache_job *j;

	pthread_mutex_lock(&c->fq_lock);
	c->fq_stop = true;
	pthread_cond_broadcast(&c->fq_cond);
	pthread_cond_broadcast(&c->srv_cond);
	pthread_mutex_unlock(&c->fq_lock);
	for (unsigned i = 0; i < c->nthreads; i++)
		pthread_join(c->workers[i], NULL);
	free(c->workers);
	c->workers = NULL;
	c->nworkers = c->nthreads = 0;
	/* What was queued and not started is given back. */
	pthread_mutex_lock(&c->fq_lock);
	while ((j = job_pop_locked(c, false)) ||
	       (j = job_pop_locked(c, true))) {
		pthread_mutex_unlock(&c->fq_lock);
		run_done(j->f, j->b0, j->b1, -ECANCELED, NULL, false);
		free(j);
		pthread_mutex_lock(&c->fq_lock);
	}
	pthread_mutex_unlock(&c->fq_lock);
}

void cache_fetch_submit(struct cache_file *f, uint32_t b0, uint32_t b1,
			bool prefetch)
{
	struct cache *c = f->c;
	struct cache_job *j = malloc(sizeof(*j));

	if (!prefetch) /* readahead was admitted (counted) already */
		atomic_fetch_add(&c->inflight_bytes,
				 cache_run_len(f, b0, b1));
	else
		atomic_fetch_add(&c->ahead_bytes, cache_run_len(f, b0, b1));
	if (!j) {
		run_done(f, b0, b1, -ENOMEM, NULL, false);
		return;
	}
	j->next = NULL;
	j->f = f;
	j->b0 = b0;
	j->b1 = b1;
	j->prefetch = prefetch;
	j->no_group = cache_serving_peer();
	pthread_mutex_lock(&c->fq_lock);
	if (c->fq_stop) {
		pthread_mutex_unlock(&c->fq_lock);
		run_done(f, b0, b1, -ECANCELED, NULL, false);
		free(j);
		return;
	}
	if (j->no_group) {
		if (c->srv_tail)
			c->srv_tail->next = j;
		else
			c->srv_head = j;
		c->srv_tail = j;
		pthread_cond_signal(&c->srv_cond);
		pthread_mutex_unlock(&c->fq_lock);
		return;
	}
	if (prefetch) {
		if (c->pre_tail)
			c->pre_tail->next = j;
		else
			c->pre_head = j;
		c->pre_tail = j;
	} else {
		if (c->demand_tail)
			c->demand_tail->next = j;
		else
			c->demand_head = j;
		c->demand_tail = j;
	}
	pthread_cond_signal(&c->fq_cond);
	pthread_mutex_unlock(&c->fq_lock);
}

/* ---- readahead ---- */

/* Counts bytes in flight if they fit under inflight_max_bytes. */
static bool inflight_admit(struct cache *c, uint64_t bytes)
{
	uint64_t cur = atomic_load(&c->inflight_bytes);

	do {
		if (cur + bytes > c->cfg.inflight_max_bytes)
			return false;
	} while (!atomic_compare_exchange_weak(&c->inflight_bytes, &cur,
					       cur + bytes));
	return true;
}

uint64_t cache_prefetch_range(struct cache_file *f, uint64_t off,
			      uint64_t end)
{
	struct cache *c = f->c;
	uint64_t bb = c->cfg.block_bytes;
	uint32_t run_blocks = (uint32_t)(c->run_max_bytes / bb), b, be;

	if (end > f->size_bytes)
		end = f->size_bytes;
	if (off >= end || atomic_load(&f->stale))
		return end;
	b = (uint32_t)(off / bb);
	be = (uint32_t)((end + bb - 1) / bb);
	pthread_mutex_lock(&f->lock);
	while (b < be) {
		uint64_t bytes;
		uint32_t e, cut;

		if (bit_test(f->present, b) || bit_test(f->busy, b)) {
			b++;
			continue;
		}
		cut = cache_group_cut(f, b);
		for (e = b + 1; e < be && e - b < run_blocks && e < cut &&
		     !bit_test(f->present, e) && !bit_test(f->busy, e); e++)
			;
		bytes = cache_run_len(f, b, e);
		if (!inflight_admit(c, bytes))
			break;
		for (uint32_t i = b; i < e; i++)
			bit_set(f->busy, i);
		pthread_mutex_unlock(&f->lock);
		if (cache_reserve(c, f, bytes, NULL)) {
			atomic_fetch_sub(&c->inflight_bytes, bytes);
			pthread_mutex_lock(&f->lock);
			for (uint32_t i = b; i < e; i++)
				bit_clear(f->busy, i);
			pthread_cond_broadcast(&f->cond);
			break;
		}
		cache_fetch_submit(f, b, e, true);
		pthread_mutex_lock(&f->lock);
		b = e;
	}
	pthread_mutex_unlock(&f->lock);
	return (uint64_t)b * bb < end ? (uint64_t)b * bb : end;
}

void cache_file_prefetch(struct cache_file *f, uint64_t off, uint64_t len)
{
	if (off < f->size_bytes && len)
		cache_prefetch_range(f, off, len > f->size_bytes - off ?
				     f->size_bytes : off + len);
}

/* The largest window: readahead_max_bytes, but never more than half the
 * cache, or readahead would evict what it fetched before it is read. */
static uint64_t window_cap(const struct cache *c)
{
	uint64_t cap = c->cfg.size_bytes / 2;

	return c->cfg.readahead_max_bytes < cap ? c->cfg.readahead_max_bytes :
						  cap;
}

void cache_reader_note(struct cache_file *f, struct cache_reader *r,
		       uint64_t off, size_t len)
{
	struct cache *c = f->c;
	uint64_t end = off + len, wmax = window_cap(c), start, ra_end;

	if (!len)
		return;
	if (off == r->next_off) {
		if (r->seq_hits < UINT32_MAX)
			r->seq_hits++;
		if (r->seq_hits == 2)
			r->window_bytes = c->cfg.readahead_first_bytes;
		else if (r->seq_hits > 2)
			r->window_bytes *= 2;
		if (r->window_bytes > wmax)
			r->window_bytes = wmax;
	} else {
		r->seq_hits = 0;
		r->window_bytes = 0;
		r->ahead_off = 0;
	}
	r->next_off = end;
	if (!r->window_bytes || end >= f->size_bytes)
		return;
	ra_end = end + r->window_bytes;
	if (ra_end > f->size_bytes)
		ra_end = f->size_bytes;
	start = r->ahead_off > end ? r->ahead_off : end;
	if (start < ra_end)
		r->ahead_off = cache_prefetch_range(f, start, ra_end);
}
