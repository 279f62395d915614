/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the front of the cache module: the in-memory object table,
 * cache_file handles, warming, and statistics.  Making ranges present
 * (cache_file_ensure: verify what the index says is there, fetch what is
 * missing, wait) and reads are in ensure.c; opening and closing a cache
 * directory in open.c.
 *
 * The index (index.c) is loaded into the table at open and written back
 * by a flusher thread; the fetch workers (fetch.c) fill blocks; the
 * io_uring engine (uring.c) writes and reads the cache files.  A hit
 * takes one object's mutex, finds its blocks present and verified in
 * bitmaps, and preads: no SQL, no allocation, no global lock.
 *
 * Space accounting and eviction under the cap live in evict.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

#define TABLE_MIN 1024

/* ---- small helpers ---- */

uint32_t cache_tick(const struct cache *c, int64_t now_ns)
{
	return (uint32_t)((now_ns - c->t0_ns) / 1000000);
}

uint64_t cache_run_len(const struct cache_file *f, uint32_t b0, uint32_t b1)
{
	uint64_t bb = f->c->cfg.block_bytes;
	uint64_t end = (uint64_t)b1 * bb;

	if (end > f->size_bytes)
		end = f->size_bytes;
	return end - (uint64_t)b0 * bb;
}

uint32_t cache_block_len(const struct cache_file *f, uint32_t b)
{
	return (uint32_t)cache_run_len(f, b, b + 1);
}

void cache_file_path(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "objects/%02x/%016llx", (unsigned)(id & 0xff),
		 (unsigned long long)id);
}

/* ---- the object table: chained hash on the key ---- */

static uint64_t key_hash(const char *key)
{
	return util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key));
}

static int table_grow(struct cache *c)
{
	size_t n = c->table_size ? c->table_size * 2 : TABLE_MIN;
	struct cache_file **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < c->table_size; i++) {
		struct cache_file *f = c->table[i], *next;

		for (; f; f = next) {
			size_t j = key_hash(f->key) & (n - 1);

			next = f->hnext;
			f->hnext = t[j];
			t[j] = f;
		}
	}
	free(c->table);
	c->table = t;
	c->table_size = n;
	return 0;
}

int cache_table_insert(struct cache *c, struct cache_file *f)
{
	size_t i;

	if (c->nobjects + 1 > c->table_size && table_grow(c) &&
	    !c->table_size)
		return -ENOMEM; /* a full table still works, only slower */
	i = key_hash(f->key) & (c->table_size - 1);
	f->hnext = c->table[i];
	c->table[i] = f;
	c->nobjects++;
	return 0;
}

struct cache_file *cache_table_find(struct cache *c, const char *key)
{
	struct cache_file *f;

	if (!c->table_size)
		return NULL;
	f = c->table[key_hash(key) & (c->table_size - 1)];
	while (f && strcmp(f->key, key))
		f = f->hnext;
	return f;
}

static void table_remove(struct cache *c, struct cache_file *f)
{
	struct cache_file **pp = &c->table[key_hash(f->key) &
					   (c->table_size - 1)];

	while (*pp && *pp != f)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = f->hnext;
		c->nobjects--;
	}
	f->hnext = NULL;
}

/* ---- objects ---- */

struct cache_file *cache_file_alloc(struct cache *c, const char *key,
				    const char *etag, uint64_t size_bytes,
				    uint64_t id)
{
	uint64_t bb = c->cfg.block_bytes;
	uint64_t nb = (size_bytes + bb - 1) / bb;
	uint64_t nchunks = (nb + CACHE_CHUNK_BLOCKS - 1) / CACHE_CHUNK_BLOCKS;
	size_t words = bitmap_words(nb), cwords = bitmap_words(nchunks);
	struct cache_file *f;
	char *mem;

	if (nb > UINT32_MAX)
		return NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->key = strdup(key);
	mem = calloc(1, 8 * (3 * words + cwords) + 10 * (size_t)nb + 8);
	if (!f->key || !mem) {
		free(f->key);
		free(mem);
		free(f);
		return NULL;
	}
	f->present = (uint64_t *)mem;
	f->verified = f->present + words;
	f->busy = f->verified + words;
	f->dirty_chunks = f->busy + words;
	f->crc = (uint32_t *)(f->dirty_chunks + cwords);
	f->tick = f->crc + nb;
	f->pins = (uint16_t *)(f->tick + nb);
	f->c = c;
	snprintf(f->etag, sizeof(f->etag), "%s", etag);
	f->size_bytes = size_bytes;
	f->id = id;
	f->nblocks = (uint32_t)nb;
	f->fd = -1;
	f->dfd = -1;
	pthread_mutex_init(&f->lock, NULL);
	util_cond_init(&f->cond);
	return f;
}

void cache_file_free(struct cache_file *f)
{
	if (!f)
		return;
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f->present); /* the one allocation behind every array */
	free(f->from_peer);
	free(f->asking);
	free(f->key);
	free(f);
}

/* Forgets an object no one has open: file, row and memory (c->lock). */
void cache_drop_object_locked(struct cache *c, struct cache_file *f)
{
	char path[64];
	uint64_t nb = bitmap_popcount(f->present, f->nblocks);

	table_remove(c, f);
	cache_index_detach(f);
	cache_index_forget(c, f->id);
	cache_file_path(f->id, path, sizeof(path));
	if (unlinkat(c->dirfd, path, 0) && errno != ENOENT)
		cache_log_ratelimited("cannot remove %s: %s", path,
				      strerror(errno));
	c->used_bytes -= f->cached_bytes;
	atomic_fetch_sub(&c->blocks_present, nb);
	cache_file_free(f);
	pthread_cond_broadcast(&c->room_cond);
}

/* A newer version of the key arrived: the old one leaves the table now
 * and is freed when its last handle closes (c->lock). */
static void replace_locked(struct cache *c, struct cache_file *old)
{
	char path[64];

	if (!old->refs) {
		cache_drop_object_locked(c, old);
		return;
	}
	atomic_store(&old->stale, true);
	table_remove(c, old);
	cache_index_detach(old);
	cache_index_forget(c, old->id);
	if (old->keep_name)
		return; /* unlinked at the last close (or surrendered) */
	cache_file_path(old->id, path, sizeof(path));
	unlinkat(c->dirfd, path, 0); /* its open fd keeps working */
}

/* The object's cache file vanished: none of its blocks are there. */
static void drop_blocks_locked(struct cache *c, struct cache_file *f)
{
	uint64_t nb;

	pthread_mutex_lock(&f->lock);
	nb = bitmap_popcount(f->present, f->nblocks);
	memset(f->present, 0, bitmap_words(f->nblocks) * 8);
	memset(f->verified, 0, bitmap_words(f->nblocks) * 8);
	memset(f->dirty_chunks, 0xff, bitmap_words((f->nblocks +
		CACHE_CHUNK_BLOCKS - 1) / CACHE_CHUNK_BLOCKS) * 8);
	c->used_bytes -= f->cached_bytes;
	f->cached_bytes = 0;
	f->row_dirty = true;
	pthread_mutex_unlock(&f->lock);
	atomic_fetch_sub(&c->blocks_present, nb);
	cache_mark_dirty(f);
}

int cache_dir_errno(struct cache *c, int rc)
{
	static atomic_bool said;
	struct stat sb;
	bool no = false;

	if (rc != -ENOENT || fstat(c->dirfd, &sb) || sb.st_nlink)
		return rc;
	if (atomic_compare_exchange_strong(&said, &no, true))
		cache_log("the cache dir %s was removed while mounted: what "
			  "needs it fails with EIO (files not yet uploaded "
			  "went with it); unmount and mount again",
			  c->cfg.dir);
	return -EIO;
}

/* Opens f's cache file for its first handle (c->lock). */
static int open_fd_locked(struct cache *c, struct cache_file *f)
{
	char path[64];
	struct stat sb;
	int fd, rc;

	cache_file_path(f->id, path, sizeof(path));
	fd = openat(c->dirfd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(c->dirfd, path, O_RDWR | O_CREAT | O_CLOEXEC,
			    0600);
		if (fd < 0 && errno == ENOENT) {
			/* objects/ or its subdirectory removed by hand:
			 * made again (the cache dir itself: EIO below) */
			char sub[64];

			mkdirat(c->dirfd, "objects", 0700);
			snprintf(sub, sizeof(sub), "%.10s", path);
			mkdirat(c->dirfd, sub, 0700);
			fd = openat(c->dirfd, path, O_RDWR | O_CREAT |
				    O_CLOEXEC, 0600);
		}
		if (fd >= 0 && f->cached_bytes) {
			/* Removed after the index was last written
			 * (evicted just before a crash), or by hand. */
			cache_log("cache file %s/%s of %s is missing; its "
				  "blocks will be fetched again", c->cfg.dir,
				  path, f->key);
			drop_blocks_locked(c, f);
		}
	}
	if (fd < 0) {
		rc = cache_dir_errno(c, -errno);
		goto out_log;
	}
	/* Sparse at full size, so a splice of the last block works; a file
	 * cut short loses blocks, which then fail their CRC check. */
	if (fstat(fd, &sb) || ((uint64_t)sb.st_size != f->size_bytes &&
			       ftruncate(fd, (off_t)f->size_bytes))) {
		rc = -errno;
		goto out_close_fd;
	}
	f->fd = fd;
	/* While blocks are missing, no readahead: the kernel would read
	 * ahead into the holes, zeroing pages (2% of the daemon's CPU on a
	 * cold read) that the fetch's direct write then throws away.  Reads
	 * are of present blocks only and come whole from FUSE (up to 1 MiB).
	 * run_done turns readahead back on when the last block lands. */
	if (f->cached_bytes < f->size_bytes)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	/* Fetched bytes go to disk by DMA from the fetch buffer: a
	 * buffered write was over half of the daemon's CPU on a cold read.
	 * Not every filesystem has O_DIRECT (tmpfs): then buffered. */
	f->dfd = openat(c->dirfd, path, O_WRONLY | O_DIRECT | O_CLOEXEC);
	return 0;
out_close_fd:
	close(fd);
out_log:
	cache_log_ratelimited("cannot open cache file %s/%s of %s: %s",
			      c->cfg.dir, path, f->key, strerror(-rc));
	return rc;
}

static int create_locked(struct cache *c, const char *key,
			 uint64_t size_bytes, const char *etag,
			 struct cache_file **out)
{
	struct cache_file *f;

	f = cache_file_alloc(c, key, etag, size_bytes, c->next_id);
	if (!f)
		return -ENOMEM;
	c->next_id++;
	if (cache_table_insert(c, f)) {
		cache_file_free(f);
		return -ENOMEM;
	}
	f->row_dirty = true;
	f->saved_atime_ns = -1;
	cache_mark_dirty(f);
	*out = f;
	return 0;
}

int cache_file_open(struct cache *c, const char *key, uint64_t size_bytes,
		    const char *etag, struct cache_file **out)
{
	return cache_file_open_version(c, key, size_bytes, etag, true, out);
}

int cache_file_open_version(struct cache *c, const char *key,
			    uint64_t size_bytes, const char *etag,
			    bool replace, struct cache_file **out)
{
	uint64_t bb = c->cfg.block_bytes;
	struct cache_file *f;
	bool created = false;
	int rc;

	*out = NULL;
	if (!key || !*key || strlen(key) > OBJ_KEY_MAX || !etag ||
	    strlen(etag) >= CACHE_ETAG_MAX)
		return -EINVAL;
	if ((size_bytes + bb - 1) / bb > UINT32_MAX)
		return -EFBIG;
	pthread_mutex_lock(&c->lock);
	f = cache_table_find(c, key);
	if (f && (f->size_bytes != size_bytes || strcmp(f->etag, etag))) {
		if (!replace) {
			rc = -ESTALE;
			goto out_unlock;
		}
		replace_locked(c, f);
		f = NULL;
	}
	if (!f) {
		rc = create_locked(c, key, size_bytes, etag, &f);
		if (rc)
			goto out_unlock;
		created = true;
	}
	if (!f->refs) {
		rc = open_fd_locked(c, f);
		if (rc) {
			if (created)
				cache_drop_object_locked(c, f);
			goto out_unlock;
		}
	}
	f->refs++;
	atomic_store_explicit(&f->atime_ns, util_wall_ns(),
			      memory_order_relaxed);
	*out = f;
	rc = 0;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void cache_file_put_locked(struct cache_file *f)
{
	struct cache *c = f->c;

	if (!f->refs)
		cache_log("cache_file_close of %s without an open handle",
			  f->key);
	util_assert(f->refs > 0); /* a bug in the caller */
	if (--f->refs)
		return;
	if (f->from_peer && !f->detached)
		cache_drop_peer_blocks_locked(c, f);
	close(f->fd);
	f->fd = -1;
	if (f->dfd >= 0)
		close(f->dfd);
	f->dfd = -1;
	if (f->detached && atomic_load(&f->stale)) {
		/* Replaced by a newer version; out of the table already. */
		if (f->keep_name && !f->surrendered) {
			char path[64];

			cache_file_path(f->id, path, sizeof(path));
			unlinkat(c->dirfd, path, 0);
		}
		c->used_bytes -= f->cached_bytes;
		atomic_fetch_sub(&c->blocks_present,
				 bitmap_popcount(f->present, f->nblocks));
		cache_file_free(f);
		pthread_cond_broadcast(&c->room_cond);
	} else if (!f->cached_bytes) {
		cache_drop_object_locked(c, f); /* nothing cached: not worth a row */
	}
}

void cache_file_put(struct cache_file *f)
{
	struct cache *c = f->c;

	pthread_mutex_lock(&c->lock);
	cache_file_put_locked(f);
	pthread_mutex_unlock(&c->lock);
}

void cache_file_close(struct cache_file *f)
{
	if (f)
		cache_file_put(f);
}

bool cache_file_complete(struct cache_file *f)
{
	bool all;

	pthread_mutex_lock(&f->lock);
	all = f->cached_bytes >= f->size_bytes;
	pthread_mutex_unlock(&f->lock);
	return all;
}

int cache_file_fd(struct cache_file *f)
{
	return f->fd;
}

uint64_t cache_file_size(const struct cache_file *f)
{
	return f->size_bytes;
}

void cache_file_ref(struct cache_file *f)
{
	pthread_mutex_lock(&f->c->lock);
	util_assert(f->refs > 0);
	f->refs++;
	pthread_mutex_unlock(&f->c->lock);
}

void cache_file_keep_name(struct cache_file *f)
{
	pthread_mutex_lock(&f->c->lock);
	f->keep_name = true;
	pthread_mutex_unlock(&f->c->lock);
}

/* Could f be surrendered now (c->lock)?  Not with more references
 * than expected, not twice, not unless wholly cached, and not once a
 * newer version took its name away. */
static bool surrender_ok_locked(struct cache_file *f, unsigned expect_refs)
{
	return f->refs <= expect_refs && f->fd >= 0 && !f->surrendered &&
	       cache_file_complete(f) &&
	       (!atomic_load(&f->stale) || f->keep_name);
}

bool cache_file_can_surrender(struct cache_file *f, unsigned expect_refs)
{
	bool ok;

	pthread_mutex_lock(&f->c->lock);
	ok = surrender_ok_locked(f, expect_refs);
	pthread_mutex_unlock(&f->c->lock);
	return ok;
}

int cache_file_surrender(struct cache_file *f, unsigned expect_refs,
			 const char *to, uint64_t *bytes)
{
	struct cache *c = f->c;
	char path[64];
	uint64_t nb, had;
	int rc = 0;

	*bytes = 0;
	pthread_mutex_lock(&c->lock);
	if (!surrender_ok_locked(f, expect_refs)) {
		rc = -EBUSY;
		goto out;
	}
	cache_file_path(f->id, path, sizeof(path));
	if (renameat(c->dirfd, path, c->dirfd, to)) {
		rc = -errno;
		cache_log_ratelimited("cannot move %s/%s to %s: %s",
				      c->cfg.dir, path, to, strerror(-rc));
		goto out;
	}
	if (!f->detached) {
		atomic_store(&f->stale, true);
		table_remove(c, f);
		cache_index_detach(f);
		cache_index_forget(c, f->id);
	}
	f->surrendered = true;
	/* Its blocks are no longer the read cache's: nothing may evict,
	 * fetch into or check them again, and the close frees nothing. */
	pthread_mutex_lock(&f->lock);
	nb = bitmap_popcount(f->present, f->nblocks);
	memset(f->present, 0, bitmap_words(f->nblocks) * 8);
	memset(f->verified, 0, bitmap_words(f->nblocks) * 8);
	had = f->cached_bytes;
	f->cached_bytes = 0;
	pthread_mutex_unlock(&f->lock);
	atomic_fetch_sub(&c->blocks_present, nb);
	c->used_bytes = c->used_bytes - had + f->size_bytes;
	atomic_fetch_add(&c->dirty_bytes, f->size_bytes);
	*bytes = f->size_bytes;
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int cache_adopt(struct cache *c, const char *key, const char *etag,
		uint64_t size, const char *path, const uint32_t *crcs,
		uint64_t charged)
{
	uint32_t tick = cache_tick(c, util_wall_ns());
	struct cache_file *f, *old;
	char to[64];
	int rc;

	if (strlen(etag) >= CACHE_ETAG_MAX || !*key)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	old = cache_table_find(c, key);
	if (old)
		replace_locked(c, old);
	rc = create_locked(c, key, size, etag, &f);
	if (rc)
		goto out;
	cache_file_path(f->id, to, sizeof(to));
	if (renameat(c->dirfd, path, c->dirfd, to)) {
		rc = -errno;
		cache_drop_object_locked(c, f);
		goto out;
	}
	pthread_mutex_lock(&f->lock);
	for (uint32_t b = 0; b < f->nblocks; b++) {
		f->crc[b] = crcs[b];
		f->tick[b] = tick;
		bit_set(f->present, b);
		bit_set(f->verified, b);
		bit_set(f->dirty_chunks, b / CACHE_CHUNK_BLOCKS);
	}
	f->cached_bytes = size;
	f->row_dirty = true;
	pthread_mutex_unlock(&f->lock);
	c->used_bytes = c->used_bytes - charged + size;
	atomic_fetch_sub(&c->dirty_bytes, charged);
	atomic_fetch_add(&c->blocks_present, f->nblocks);
	cache_mark_dirty(f);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- warming and dropping keys ---- */

static int warm_one(struct cache *c, const char *key, uint64_t size_bytes,
		    const char *etag)
{
	struct cache_file *f;
	int rc;

	if (size_bytes > c->low_bytes)
		return -EFBIG; /* would only evict itself on the way */
	rc = cache_file_open(c, key, size_bytes, etag, &f);
	if (rc)
		return rc;
	rc = cache_file_ensure(f, 0, size_bytes);
	cache_file_close(f);
	return rc;
}

static void *warm_thread(void *arg)
{
	struct cache *c = arg;

	pthread_mutex_lock(&c->wlock);
	for (;;) {
		struct cache_warm_req *r;
		int rc;

		while (!c->warm_stop && !c->warm_head)
			pthread_cond_wait(&c->wcond, &c->wlock);
		if (c->warm_stop)
			break;
		r = c->warm_head;
		c->warm_head = r->next;
		if (!c->warm_head)
			c->warm_tail = NULL;
		c->nwarm--;
		pthread_mutex_unlock(&c->wlock);
		rc = warm_one(c, r->key, r->size_bytes, r->etag);
		if (rc && rc != -EFBIG)
			cache_log_ratelimited("prefetch of %s failed: %s",
					      r->key, strerror(-rc));
		free(r);
		pthread_mutex_lock(&c->wlock);
	}
	pthread_mutex_unlock(&c->wlock);
	return NULL;
}

int cache_warm_start(struct cache *c)
{
	int rc = -pthread_create(&c->warm_thread, NULL, warm_thread, c);

	c->warm_started = !rc;
	return rc;
}

void cache_warm_stop(struct cache *c)
{
	struct cache_warm_req *r, *next;

	pthread_mutex_lock(&c->wlock);
	c->warm_stop = true;
	pthread_cond_broadcast(&c->wcond);
	pthread_mutex_unlock(&c->wlock);
	if (c->warm_started)
		pthread_join(c->warm_thread, NULL);
	c->warm_started = false;
	for (r = c->warm_head; r; r = next) {
		next = r->next;
		free(r);
	}
	c->warm_head = c->warm_tail = NULL;
	c->nwarm = 0;
}

int cache_warm(struct cache *c, const char *key, uint64_t size_bytes,
	       const char *etag, bool wait)
{
	struct cache_warm_req *r;
	size_t kl;

	if (wait)
		return warm_one(c, key, size_bytes, etag);
	if (size_bytes > c->low_bytes)
		return -EFBIG;
	if (!key || !etag || strlen(etag) >= CACHE_ETAG_MAX ||
	    (kl = strlen(key)) > OBJ_KEY_MAX)
		return -EINVAL;
	r = malloc(sizeof(*r) + kl + 1);
	if (!r)
		return -ENOMEM;
	r->next = NULL;
	r->size_bytes = size_bytes;
	snprintf(r->etag, sizeof(r->etag), "%s", etag);
	memcpy(r->key, key, kl + 1);
	pthread_mutex_lock(&c->wlock);
	if (c->warm_stop || c->nwarm >= CACHE_WARM_QUEUE_MAX) {
		pthread_mutex_unlock(&c->wlock);
		free(r);
		cache_log_ratelimited("prefetch queue full (%d files); %s "
				      "not queued", CACHE_WARM_QUEUE_MAX, key);
		return -EAGAIN;
	}
	if (c->warm_tail)
		c->warm_tail->next = r;
	else
		c->warm_head = r;
	c->warm_tail = r;
	c->nwarm++;
	pthread_cond_signal(&c->wcond);
	pthread_mutex_unlock(&c->wlock);
	return 0;
}

int cache_evict_key(struct cache *c, const char *key)
{
	struct cache_file *f;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	f = cache_table_find(c, key);
	if (f && f->refs) {
		rc = -EBUSY;
	} else if (f) {
		atomic_fetch_add(&c->evictions,
				 bitmap_popcount(f->present, f->nblocks));
		cache_drop_object_locked(c, f);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

uint64_t cache_cached_bytes(struct cache *c, const char *key)
{
	struct cache_file *f;
	uint64_t n = 0;

	pthread_mutex_lock(&c->lock);
	f = cache_table_find(c, key);
	if (f) {
		pthread_mutex_lock(&f->lock);
		n = f->cached_bytes;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	out->cap_bytes = c->cfg.size_bytes;
	out->used_bytes = c->used_bytes;
	out->objects = c->nobjects;
	pthread_mutex_unlock(&c->lock);
	out->blocks = atomic_load(&c->blocks_present);
	out->hits = atomic_load(&c->hits);
	out->misses = atomic_load(&c->misses);
	out->bytes_fetched = atomic_load(&c->bytes_fetched);
	out->ahead_bytes = atomic_load(&c->ahead_bytes);
	out->inflight_bytes = atomic_load(&c->inflight_bytes);
	out->evictions = atomic_load(&c->evictions);
	out->crc_failures = atomic_load(&c->crc_failures);
	out->fetch_errors = atomic_load(&c->fetch_errors);
	out->connected = atomic_load(&c->connected);
	out->peer_hits = atomic_load(&c->peer_hits);
	out->peer_bytes_in = atomic_load(&c->peer_bytes_in);
	out->peer_fallbacks = atomic_load(&c->peer_fallbacks);
	out->peer_served = atomic_load(&c->peer_served);
	out->peer_bytes_out = atomic_load(&c->peer_bytes_out);
	out->peer_refused = atomic_load(&c->peer_refused);
	out->peer_dropped = atomic_load(&c->peer_dropped);
	out->peer_guard_bytes = atomic_load(&c->peer_guard_bytes);
	out->peer_busy = atomic_load(&c->peer_busy);
	out->peer_rma_reads = 0;
	out->peer_timeouts = out->peer_skipped_down = 0;
	out->peer_members_down = 0;
	if (c->peers) {
		struct peer_client_stats ps;

		peer_client_get_stats(c->peers, &ps);
		out->peer_rma_reads = ps.rma_reads;
		out->peer_timeouts = ps.silent;
		out->peer_skipped_down = ps.skipped_down;
		out->peer_members_down = ps.members_down;
	}
}
