/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the front of the cache module: opening a cache directory,
 * the in-memory object table, cache_file handles, making ranges present
 * (cache_file_ensure: verify what the index says is there, fetch what is
 * missing, wait), reads, warming, and statistics.
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
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 0x100000001b3ull;
	return h;
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

/* ---- open and close ---- */

void cache_config_init(struct cache_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size_bytes = 1ull << 30;
	cfg->block_bytes = 1u << 20;
	cfg->high_pct = 95;
	cfg->low_pct = 85;
	cfg->readahead_first_bytes = 1u << 20;
	cfg->readahead_max_bytes = 64u << 20;
	cfg->inflight_max_bytes = 256u << 20;
	cfg->fetch_parallel = 16;
	cfg->fetch_timeout_ms = 30000;
	cfg->listing_max_bytes = 1ull << 30;
}

static uint64_t round_blocks(uint64_t n, uint64_t bb)
{
	return n < bb ? bb : n / bb * bb;
}

static int config_apply(struct cache *c, const struct cache_config *in,
			char *msg, size_t ml)
{
	struct cache_config d, *k = &c->cfg;
	uint64_t bb;

	cache_config_init(&d);
	*k = *in;
#define DEF(x) do { if (!k->x) k->x = d.x; } while (0)
	DEF(block_bytes);
	DEF(high_pct);
	DEF(low_pct);
	DEF(readahead_first_bytes);
	DEF(readahead_max_bytes);
	DEF(inflight_max_bytes);
	DEF(fetch_parallel);
	DEF(fetch_timeout_ms);
	DEF(listing_max_bytes);
#undef DEF
	bb = k->block_bytes;
	if (!in->dir || !*in->dir || !in->store_id || !*in->store_id) {
		snprintf(msg, ml, "cache: no directory or store id given");
		return -EINVAL;
	}
	if (bb % 4096 || bb > (64u << 20)) {
		snprintf(msg, ml, "cache block size %llu is not a multiple of "
			 "4 KiB up to 64 MiB", (unsigned long long)bb);
		return -EINVAL;
	}
	if (k->size_bytes < 4 * bb) {
		snprintf(msg, ml, "cache size %llu is below 4 blocks of %llu "
			 "bytes", (unsigned long long)k->size_bytes,
			 (unsigned long long)bb);
		return -EINVAL;
	}
	if (k->low_pct >= k->high_pct || k->high_pct > 100) {
		snprintf(msg, ml, "cache eviction marks %u%%/%u%% are not "
			 "low < high <= 100", k->low_pct, k->high_pct);
		return -EINVAL;
	}
	if (k->fetch_parallel > 256)
		k->fetch_parallel = 256;
	if (k->inflight_max_bytes < bb)
		k->inflight_max_bytes = bb;
	if (k->readahead_max_bytes < k->readahead_first_bytes)
		k->readahead_max_bytes = k->readahead_first_bytes;
	c->high_bytes = k->size_bytes / 100 * k->high_pct;
	c->low_bytes = k->size_bytes / 100 * k->low_pct;
	c->run_max_bytes = CACHE_RUN_MAX_BYTES;
	if (c->run_max_bytes > k->inflight_max_bytes)
		c->run_max_bytes = k->inflight_max_bytes;
	if (c->run_max_bytes > k->size_bytes / 4)
		c->run_max_bytes = k->size_bytes / 4;
	c->run_max_bytes = round_blocks(c->run_max_bytes, bb);
	c->piece_bytes = round_blocks(k->size_bytes / 4 < (64ull << 20) ?
				      k->size_bytes / 4 : 64ull << 20, bb);
	c->nvmax = (unsigned)((16u << 20) / bb);
	if (c->nvmax < 1)
		c->nvmax = 1;
	if (c->nvmax > CACHE_VERIFY_BUFS)
		c->nvmax = CACHE_VERIFY_BUFS;
	k->dir = strdup(in->dir);
	k->store_id = strdup(in->store_id);
	if (!k->dir || !k->store_id) {
		snprintf(msg, ml, "cache: out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* chmod of every plain file in dir (relative to c->dirfd) to 0600 and
 * every directory to 0700; "." for the cache dir itself. */
static void tighten_in(struct cache *c, const char *dir)
{
	struct dirent *de;
	DIR *d;
	int fd = openat(c->dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return; /* not there: nothing to tighten */
	}
	while ((de = readdir(d))) {
		unsigned char t = de->d_type;
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (t == DT_UNKNOWN) {
			if (fstatat(dirfd(d), de->d_name, &sb,
				    AT_SYMLINK_NOFOLLOW))
				continue;
			t = S_ISDIR(sb.st_mode) ? DT_DIR :
			    S_ISREG(sb.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		if ((t == DT_DIR || t == DT_REG) &&
		    fchmodat(dirfd(d), de->d_name, t == DT_DIR ? 0700 : 0600,
			     0) && errno != ENOENT)
			cache_log("cannot chmod %s/%s/%s: %s", c->cfg.dir, dir,
				  de->d_name, strerror(errno));
	}
	closedir(d);
}

/* Nothing in the cache dir is for other users: the object bytes, the
 * keys in the indexes, the log.  Files are created 0600 and directories
 * 0700, and what fmfs made is tightened on every open (someone, or an
 * older fmfs, may have opened it up): the dir itself only if fmfs made
 * it (cache_config.dir_made, kept in the index: a directory the user
 * gave keeps its mode, and the 0600/0700 inside keep the data private),
 * its files (index.sqlite*, writeback.sqlite*,
 * the lock files, fmfs.log, ...) and directories, and the files in dirty/
 * and lost+found/.  objects/XX/ are chmodded by dir_prepare; the cache
 * files in them, created 0600, are not visited (millions of them; the
 * 0700 directories above shut them off anyway).  Called again after the
 * write-back opened (SQLite creates a missing database 0644 less the
 * umask).  Nothing else is touched: dir_prepare refuses a dir holding
 * anything a cache dir does not (cache_dir_foreign). */
static void dir_tighten(struct cache *c)
{
	tighten_in(c, ".");
	tighten_in(c, "dirty");
	tighten_in(c, "lost+found");
}

/* Creates DIR and DIR/objects/00..ff and takes DIR/index.lock. */
static int dir_prepare(struct cache *c, char *msg, size_t ml)
{
	const char *dir = c->cfg.dir;
	bool made = false;
	char sub[32], other[256];
	int rc;

	rc = cache_dir_foreign(dir, other, sizeof(other));
	if (rc == 1) {
		snprintf(msg, ml, "cache dir %s holds files fmfs did not make "
			 "('%s'); give an empty directory, or the cache dir of "
			 "an earlier mount, as --cache-dir", dir, other);
		return -EEXIST;
	}
	{
		char top[PATH_MAX];

		rc = util_mkdir_p_made(dir, 0700, top, sizeof(top));
		c->dir_made = !rc && top[0];
	}
	if (!rc) {
		c->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = c->dirfd < 0 ? -errno : 0;
	}
	if (rc) {
		snprintf(msg, ml, "cannot create cache dir %s: %s", dir,
			 strerror(-rc));
		return rc;
	}
	for (int i = -1; i < 256 && !rc; i++) {
		if (i < 0)
			snprintf(sub, sizeof(sub), "objects");
		else
			snprintf(sub, sizeof(sub), "objects/%02x", i);
		if (!mkdirat(c->dirfd, sub, 0700)) {
			made = true;
			continue;
		}
		if (errno != EEXIST)
			rc = -errno;
		else if (i >= 0 && fchmodat(c->dirfd, sub, 0700, 0))
			rc = -errno; /* objects/ itself: dir_tighten */
	}
	if (!rc && faccessat(c->dirfd, "objects", W_OK | X_OK, 0))
		rc = -errno;
	/* New names survive a power cut only once their parents are
	 * synced (a dirty file in a lost dir is lost with it). */
	if (!rc && made && (rc = util_fsync_at(c->dirfd, "objects")) == 0)
		rc = util_fsync_at(c->dirfd, ".");
	if (rc) {
		snprintf(msg, ml, "cache dir %s is not writable: %s; use "
			 "another --cache-dir", dir, strerror(-rc));
		return rc;
	}
	dir_tighten(c);
	/* Not DIR/lock: the mount command holds that one itself. */
	c->lockfd = openat(c->dirfd, "index.lock",
			   O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lockfd < 0 || flock(c->lockfd, LOCK_EX | LOCK_NB)) {
		rc = -errno;
		snprintf(msg, ml, "cache dir %s is in use by another fmfs "
			 "process (%s/index.lock: %s); use another "
			 "--cache-dir", dir, dir, strerror(-rc));
		return rc;
	}
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static bool parse_id(const char *name, uint64_t *id)
{
	char *end;

	if (strlen(name) != 16 || strspn(name, "0123456789abcdef") != 16)
		return false;
	*id = strtoull(name, &end, 16);
	return !*end;
}

/* Removes cache files the index does not know: left by a crash between
 * creating a file and the flush that would have recorded it, or by a
 * replaced index.  Runs before anything else uses the directory. */
static void clean_orphans(struct cache *c)
{
	uint64_t *ids = malloc((c->nobjects + 1) * sizeof(*ids));
	size_t n = 0, removed = 0;

	if (!ids)
		return;
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext)
			ids[n++] = f->id;
	qsort(ids, n, sizeof(*ids), id_cmp);
	for (unsigned x = 0; x < 256; x++) {
		char sub[32];
		struct dirent *de;
		DIR *d;
		int fd;

		snprintf(sub, sizeof(sub), "objects/%02x", x);
		fd = openat(c->dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || !(d = fdopendir(fd))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		while ((de = readdir(d))) {
			uint64_t id;

			if (!strcmp(de->d_name, ".") ||
			    !strcmp(de->d_name, ".."))
				continue;
			if (parse_id(de->d_name, &id) && (id & 0xff) == x &&
			    bsearch(&id, ids, n, sizeof(*ids), id_cmp))
				continue;
			if (!unlinkat(dirfd(d), de->d_name, 0))
				removed++;
		}
		closedir(d);
	}
	free(ids);
	if (removed)
		cache_log("removed %zu cache files of %s that the index does "
			  "not list (left by a crash)", removed, c->cfg.dir);
}

static void cache_free(struct cache *c)
{
	for (size_t i = 0; i < c->table_size; i++) {
		struct cache_file *f = c->table[i], *next;

		for (; f; f = next) {
			next = f->hnext;
			if (f->fd >= 0)
				close(f->fd);
			if (f->dfd >= 0)
				close(f->dfd);
			cache_file_free(f);
		}
	}
	free(c->table);
	free(c->dead_ids);
	for (unsigned i = 0; i < c->nvfree; i++)
		free(c->vbufs[i]);
	if (c->lockfd >= 0)
		close(c->lockfd);
	if (c->dirfd >= 0)
		close(c->dirfd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->room_cond);
	pthread_mutex_destroy(&c->dirty_lock);
	pthread_mutex_destroy(&c->fq_lock);
	pthread_cond_destroy(&c->fq_cond);
	pthread_cond_destroy(&c->srv_cond);
	pthread_mutex_destroy(&c->vlock);
	pthread_cond_destroy(&c->vcond);
	pthread_mutex_destroy(&c->wlock);
	pthread_cond_destroy(&c->wcond);
	free((char *)c->cfg.dir);
	free((char *)c->cfg.store_id);
	free(c);
}

static struct cache *cache_alloc(void)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->dirfd = c->lockfd = -1;
	c->next_id = 1;
	c->t0_ns = util_wall_ns();
	pthread_mutex_init(&c->lock, NULL);
	util_cond_init(&c->room_cond);
	pthread_mutex_init(&c->dirty_lock, NULL);
	pthread_mutex_init(&c->fq_lock, NULL);
	util_cond_init(&c->fq_cond);
	util_cond_init(&c->srv_cond);
	pthread_mutex_init(&c->vlock, NULL);
	pthread_cond_init(&c->vcond, NULL);
	pthread_mutex_init(&c->wlock, NULL);
	pthread_cond_init(&c->wcond, NULL);
	atomic_store(&c->connected, true);
	return c;
}

static void warm_stop(struct cache *c)
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

int cache_open(const struct cache_config *cfg, struct obj_store *st,
	       struct cache **out, char *msg, size_t msg_len)
{
	struct cache *c = cache_alloc();
	int rc;

	*out = NULL;
	if (msg_len)
		msg[0] = '\0';
	if (!c) {
		snprintf(msg, msg_len, "cache: out of memory");
		return -ENOMEM;
	}
	c->st = st;
	rc = config_apply(c, cfg, msg, msg_len);
	if (!rc)
		rc = dir_prepare(c, msg, msg_len);
	if (rc)
		goto out_free;
	rc = cache_uring_init(&c->uring);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start the I/O engine");
		goto out_free;
	}
	rc = cache_index_open(c, msg, msg_len);
	if (rc)
		goto out_free_uring;
	if (cache_index_dir_made(c, cfg->dir_made || c->dir_made) &&
	    fchmod(c->dirfd, 0700))
		cache_log("cannot chmod %s to 0700: %s", c->cfg.dir,
			  strerror(errno));
	clean_orphans(c);
	rc = cache_wb_open(c, msg, msg_len);
	if (rc)
		goto out_close_wb;
	tighten_in(c, "."); /* a new writeback.sqlite */
	pthread_mutex_lock(&c->lock);
	if (c->used_bytes > c->high_bytes) /* the cap went down */
		cache_evict_locked(c, c->used_bytes - c->low_bytes);
	pthread_mutex_unlock(&c->lock);
	rc = cache_fetch_start(c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start fetch threads");
		goto out_close_wb;
	}
	rc = -pthread_create(&c->warm_thread, NULL, warm_thread, c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start a thread");
		goto out_stop_fetch;
	}
	c->warm_started = true;
	rc = cache_index_start(c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start the index "
			 "flusher");
		goto out_stop_warm;
	}
	*out = c;
	return 0;
out_stop_warm:
	warm_stop(c);
out_stop_fetch:
	cache_fetch_stop(c);
out_close_wb:
	cache_wb_close(c);
	cache_index_close(c);
out_free_uring:
	cache_uring_free(c->uring);
out_free:
	cache_free(c);
	return rc;
}

void cache_close(struct cache *c)
{
	size_t open = 0;

	if (!c)
		return;
	cache_wb_close(c);
	warm_stop(c);
	cache_fetch_stop(c);
	cache_index_stop(c);
	cache_index_flush(c, true);
	cache_index_close(c);
	cache_uring_free(c->uring);
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext)
			open += f->refs > 0;
	if (open)
		cache_log("%zu files still open at close", open);
	cache_free(c);
}
