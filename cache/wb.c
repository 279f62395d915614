/* SPDX-License-Identifier: MIT */
/*
 * wb.c - write-back: the table of dirty files, the cap's charges and the
 * dirty files themselves (the API and its contract are in wb.h).  The
 * other parts: tombstones, unlink, rename and listing in wb_names.c, the
 * SQLite mirror and cache_wb_save (a commit's .meta and row, the one way
 * a commit is made durable) in wb_db.c, replay at open in wb_replay.c,
 * block checksums and DIR/dirty/ID.meta in wb_meta.c, the uploader
 * threads that drain the queue in wb_upload.c.
 *
 * State: a table of dirty files by key and a set of tombstones (keys to
 * DELETE), in memory under wb->lock, mirrored in DIR/writeback.sqlite:
 *
 *   files(id, key, kind, mode, uid, gid, mtime_ns, size, in_bucket,
 *         base_etag, queued, meta)      one row per dirty file
 *   deletes(key)                        one row per tombstone
 *
 * The bytes live in DIR/dirty/ID, written with pwrite by the FUSE
 * threads.  A row is written when a file is created (queued 0), when it
 * is committed (close/fsync: queued 1, size and attributes), renamed or
 * removed; the bytes of a committed file are in the kernel's page cache
 * (a daemon crash keeps them) or, after fsync, on disk.
 *
 * Generations: gen counts changes; queued_gen is the generation the last
 * commit queued; an upload reads the file as it stands (generation g) and
 * on success sets uploaded_gen = g.  The file is clean when uploaded_gen
 * == gen and no writer has it open: it then leaves the table, its row is
 * deleted and its bytes move into the read cache (cache_adopt) as the
 * new version.  A file changed during its upload has gen > g: it stays
 * and is uploaded again after the next commit.
 *
 * Lock order: wb->lock, then c->lock (charging the cap), then f->lock.
 * No I/O to the store happens under wb->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wb_int.h"

/* Logs and remembers the latest error (wb->lock held). */
void cache_wb_log_err(struct cache_wb *wb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(wb->last_error, sizeof(wb->last_error), fmt, ap);
	va_end(ap);
	cache_log("%s", wb->last_error);
}

/* ---- the table ---- */

struct cache_wfile *cache_wb_find(struct cache_wb *wb, const char *key)
{
	util_debug_assert_locked(&wb->lock);
	for (struct cache_wfile *w = wb->tab[cache_wb_hash(key)]; w; w = w->hnext)
		if (!strcmp(w->key, key))
			return w;
	return NULL;
}

void cache_wb_insert(struct cache_wb *wb, struct cache_wfile *w)
{
	uint32_t h = cache_wb_hash(w->key);

	w->hnext = wb->tab[h];
	wb->tab[h] = w;
	w->in_table = true;
	wb->nfiles++;
}

void cache_wb_take_out(struct cache_wb *wb, struct cache_wfile *w)
{
	util_debug_assert_locked(&wb->lock);
	for (struct cache_wfile **pp = &wb->tab[cache_wb_hash(w->key)]; *pp;
	     pp = &(*pp)->hnext)
		if (*pp == w) {
			*pp = w->hnext;
			w->hnext = NULL;
			w->in_table = false;
			wb->nfiles--;
			return;
		}
}

struct cache_wb_tomb *cache_wb_tomb_find(struct cache_wb *wb, const char *key)
{
	util_debug_assert_locked(&wb->lock);
	for (struct cache_wb_tomb *t = wb->tombs[cache_wb_hash(key)]; t; t = t->next)
		if (!strcmp(t->key, key))
			return t;
	return NULL;
}

void cache_wb_wfile_free(struct cache_wfile *w)
{
	if (w->fd >= 0)
		close(w->fd);
	obj_kv_free(w->meta, w->nmeta);
	free(w->sums);
	free(w->stale);
	free(w->key);
	free(w);
}

void cache_wb_dirty_path(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "dirty/%016" PRIx64, id);
}

/* The bytes [off, off + len) are about to change (len 0: somewhere): their
 * sums go stale, and a committed file is marked changing in its row, so
 * that a crash from now on uploads it as it stands rather than taking
 * it for damage (wb->lock held). */
static int changed(struct cache_wb *wb, struct cache_wfile *w, uint64_t off,
		   uint64_t len)
{
	int rc = cache_wb_sums_mark(w, off, len);

	if (rc || w->changing || !w->committed || !w->in_table)
		return rc;
	w->changing = true;
	return cache_wb_db_put(wb, w, true);
}

/* ---- charging the cap ---- */

static int charge(struct cache *c, uint64_t need)
{
	int rc = 0;

	if (!need)
		return 0;
	pthread_mutex_lock(&c->lock);
	if (c->used_bytes + need > c->high_bytes)
		cache_evict_locked(c, c->used_bytes + need - c->low_bytes);
	if (c->used_bytes + need > c->cfg.size_bytes) {
		rc = -ENOSPC;
	} else {
		c->used_bytes += need;
		atomic_fetch_add(&c->dirty_bytes, need);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc)
		cache_log_ratelimited("cache full of data not yet uploaded "
				      "(%llu dirty bytes, cap %llu): writes "
				      "fail with ENOSPC until uploads drain "
				      "or --cache-size grows",
				      (unsigned long long)atomic_load(
					      &c->dirty_bytes),
				      (unsigned long long)c->cfg.size_bytes);
	return rc;
}

/* Charges bytes already on the cache disk: they cannot be refused, so
 * over the cap they are counted and said, and eviction of clean blocks
 * makes what room it can. */
static void charge_anyway(struct cache *c, uint64_t need)
{
	bool over;

	if (!need)
		return;
	pthread_mutex_lock(&c->lock);
	if (c->used_bytes + need > c->high_bytes)
		cache_evict_locked(c, c->used_bytes + need - c->low_bytes);
	c->used_bytes += need;
	atomic_fetch_add(&c->dirty_bytes, need);
	over = c->used_bytes > c->cfg.size_bytes;
	pthread_mutex_unlock(&c->lock);
	if (over)
		cache_log_ratelimited("files open for writing through FUSE "
				      "passthrough took the cache over its cap "
				      "(%llu dirty bytes, cap %llu); it comes "
				      "back under as uploads drain",
				      (unsigned long long)atomic_load(
					      &c->dirty_bytes),
				      (unsigned long long)c->cfg.size_bytes);
}

void cache_wb_uncharge(struct cache *c, uint64_t n)
{
	if (!n)
		return;
	pthread_mutex_lock(&c->lock);
	util_assert(c->used_bytes >= n);
	c->used_bytes -= n;
	atomic_fetch_sub(&c->dirty_bytes, n);
	pthread_cond_broadcast(&c->room_cond);
	pthread_mutex_unlock(&c->lock);
}

/* ---- close ---- */

void cache_wb_close(struct cache *c)
{
	struct cache_wb *wb = c->wb;

	if (!wb)
		return;
	cache_wb_stop(c);
	for (size_t h = 0; h < CACHE_WB_HASH; h++) {
		for (struct cache_wfile *w = wb->tab[h], *n; w; w = n) {
			n = w->hnext;
			if (w->refs)
				cache_log("dirty file %s still open at close",
					  w->key);
			cache_wb_wfile_free(w);
		}
		for (struct cache_wb_tomb *t = wb->tombs[h], *n; t; t = n) {
			n = t->next;
			free(t);
		}
	}
	sqlite3_finalize(wb->upsert);
	sqlite3_finalize(wb->del);
	sqlite3_finalize(wb->mark);
	sqlite3_finalize(wb->tomb_add);
	sqlite3_finalize(wb->tomb_del);
	if (wb->db)
		sqlite3_close_v2(wb->db);
	if (wb->dirty_fd > 0)
		close(wb->dirty_fd);
	for (size_t i = 0; i < wb->nlost; i++)
		free(wb->lost[i]);
	free(wb->lost);
	for (size_t i = 0; i < wb->nlostv; i++)
		free(wb->lostv[i].key), free(wb->lostv[i].etag);
	free(wb->lostv);
	free(wb->lost_row);
	free(wb->busy_keys);
	pthread_mutex_destroy(&wb->lock);
	pthread_cond_destroy(&wb->cond);
	free(wb);
	c->wb = NULL;
}

/* ---- dirty files ---- */

/* Copies src's bytes piece by piece, each fetched if needed and pinned
 * while copied (eviction must not punch a hole under the copy). */
static int copy_from(int dst, struct cache_file *src, uint64_t len)
{
	uint64_t piece = src->c->cfg.size_bytes / 8;

	piece -= piece % src->c->cfg.block_bytes;
	if (piece < src->c->cfg.block_bytes)
		piece = src->c->cfg.block_bytes;
	for (uint64_t off = 0; off < len; off += piece) {
		uint64_t n = len - off < piece ? len - off : piece;
		loff_t in = (loff_t)off, out = (loff_t)off;
		int rc = cache_file_ensure_pinned(src, off, n);

		if (rc)
			return rc;
		while (!rc && (uint64_t)in < off + n) {
			ssize_t k = copy_file_range(cache_file_fd(src), &in,
						    dst, &out,
						    (size_t)(off + n -
							     (uint64_t)in), 0);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				rc = k < 0 ? -errno : -EIO;
		}
		cache_file_unpin(src, off, n);
		if (rc)
			return rc;
	}
	return 0;
}

/* A dirty file's struct, not in the table, with no file yet (fd -1). */
static struct cache_wfile *wfile_new(struct cache *c, const char *key,
				     const struct cache_wattr *a,
				     bool in_bucket, const char *base_etag)
{
	struct cache_wfile *w;

	if (!key || !*key || strlen(key) > OBJ_KEY_MAX)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w || !(w->key = strdup(key))) {
		free(w);
		return NULL;
	}
	w->fd = -1;
	w->c = c;
	w->a = *a;
	w->in_bucket = in_bucket;
	snprintf(w->base_etag, sizeof(w->base_etag), "%s",
		 base_etag ? base_etag : "");
	w->refs = 1;
	w->gen = 1;
	return w;
}

/* Adds w, whose file and row are ready, to the table (wb->lock). */
static int publish(struct cache_wb *wb, struct cache_wfile *w)
{
	int rc;

	cache_wb_insert(wb, w);
	/* The upload will overwrite the old object; until then the
	 * bucket has it, so an unlink or rename must delete it.  A pending
	 * DELETE of the name stays, shadowed by w, until w's upload lands
	 * (cache_wb_tomb_shadowed): a crash before then must not bring
	 * the old object back. */
	if (wb->ntombs && cache_wb_tomb_find(wb, w->key))
		w->in_bucket = true;
	if (wb->nlostv)
		cache_wb_lost_version_forget(wb, w->key);
	rc = cache_wb_db_put(wb, w, false);
	if (rc)
		cache_wb_take_out(wb, w);
	return rc;
}

int cache_w_create(struct cache *c, const char *key,
		   const struct cache_wattr *a, bool in_bucket,
		   const char *base_etag, struct cache_file *src,
		   struct cache_wfile **out)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w;
	char path[64];
	int rc;

	*out = NULL;
	w = wfile_new(c, key, a, in_bucket, base_etag);
	if (!w)
		return key && *key && strlen(key) <= OBJ_KEY_MAX ? -ENOMEM :
		       -EINVAL;
	pthread_mutex_lock(&wb->lock);
	if (cache_wb_find(wb, key)) {
		pthread_mutex_unlock(&wb->lock);
		w->fd = -1;
		cache_wb_wfile_free(w);
		return -EEXIST;
	}
	w->id = wb->next_id++;
	pthread_mutex_unlock(&wb->lock);

	cache_wb_dirty_path(w->id, path, sizeof(path));
	w->fd = openat(c->dirfd, path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		       0600);
	if (w->fd < 0) {
		int e = errno;

		rc = cache_dir_errno(c, -e);
		cache_log_ratelimited("cannot create %s/%s: %s", c->cfg.dir,
				      path, strerror(e));
		cache_wb_wfile_free(w);
		return rc;
	}
	rc = charge(c, a->size);
	if (!rc)
		rc = cache_wb_sums_resize(w, a->size);
	if (!rc) {
		w->charged = a->size;
		if (w->nsums)
			memset(w->stale, 1, w->nsums);
		if (src)
			rc = copy_from(w->fd, src, a->size);
		else if (a->size && ftruncate(w->fd, (off_t)a->size))
			rc = -errno;
	}
	pthread_mutex_lock(&wb->lock);
	if (!rc && cache_wb_find(wb, key))
		rc = -EEXIST; /* lost a race with another opener */
	if (!rc)
		rc = publish(wb, w);
	pthread_mutex_unlock(&wb->lock);
	if (rc) {
		unlinkat(c->dirfd, path, 0);
		cache_wb_uncharge(c, w->charged);
		cache_wb_wfile_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int cache_w_adopt(struct cache *c, const char *key,
		  const struct cache_wattr *a, bool in_bucket,
		  const char *base_etag, struct cache_file *src,
		  unsigned expect_refs, struct cache_wfile **out)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w;
	uint64_t bytes = 0;
	char path[64];
	int rc;

	*out = NULL;
	if (a->size != cache_file_size(src))
		return -EINVAL;
	/* Before the synced row: a caller retries while it cannot be. */
	if (!cache_file_can_surrender(src, expect_refs))
		return -EBUSY;
	w = wfile_new(c, key, a, in_bucket, base_etag);
	if (!w)
		return -ENOMEM;
	pthread_mutex_lock(&wb->lock);
	if (cache_wb_find(wb, key)) {
		rc = -EEXIST;
		goto out_unlock;
	}
	w->id = wb->next_id++;
	cache_wb_dirty_path(w->id, path, sizeof(path));
	rc = cache_wb_sums_resize(w, a->size);
	if (rc)
		goto out_unlock;
	if (w->nsums)
		memset(w->stale, 1, w->nsums);
	/* The row first, synced: a power cut after the rename below must
	 * find a row that names dirty/ID (unclosed: it goes to lost+found,
	 * as any file open for writing does), never a nameless file. */
	rc = cache_wb_db_put(wb, w, false);
	if (!rc)
		rc = cache_wb_db_sync(wb);
	if (!rc)
		rc = cache_file_surrender(src, expect_refs, path, &bytes);
	if (rc) {
		cache_wb_db_del(wb, w->id);
		goto out_unlock;
	}
	w->charged = bytes;
	w->fd = openat(c->dirfd, path, O_RDWR | O_CLOEXEC);
	if (w->fd < 0 || fsync(wb->dirty_fd)) {
		rc = -errno;
		cache_log_ratelimited("cannot open %s/%s: %s", c->cfg.dir, path,
				      strerror(-rc));
		/* The file stays, renamed, with an uncommitted row: the
		 * next mount moves it to lost+found.  Its bytes stay
		 * charged until then. */
		goto out_unlock;
	}
	rc = publish(wb, w);
out_unlock:
	pthread_mutex_unlock(&wb->lock);
	if (rc) {
		cache_wb_wfile_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int cache_w_fill(struct cache_wfile *w, struct cache_file *src,
		 uint64_t size)
{
	int rc = cache_w_truncate(w, 0);

	if (!rc)
		rc = cache_w_truncate(w, size);
	if (!rc && src && size)
		rc = copy_from(w->fd, src, size);
	pthread_mutex_lock(&w->c->wb->lock);
	if (w->nsums)
		memset(w->stale, 1, w->nsums);
	w->gen++;
	pthread_mutex_unlock(&w->c->wb->lock);
	return rc;
}

int cache_w_get(struct cache *c, const char *key, struct cache_wfile **out)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w;

	pthread_mutex_lock(&wb->lock);
	w = cache_wb_find(wb, key);
	if (w)
		w->refs++;
	pthread_mutex_unlock(&wb->lock);
	*out = w;
	return w ? 0 : -ENOENT;
}

int cache_w_hold(struct cache *c, const char *key, struct cache_wfile **out)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w;

	pthread_mutex_lock(&wb->lock);
	w = cache_wb_find(wb, key);
	if (w)
		w->refs++, w->writers++;
	pthread_mutex_unlock(&wb->lock);
	*out = w;
	return w ? 0 : -ENOENT;
}

void cache_w_ref(struct cache_wfile *w)
{
	struct cache_wb *wb = w->c->wb;

	pthread_mutex_lock(&wb->lock);
	w->refs++;
	pthread_mutex_unlock(&wb->lock);
}

void cache_w_put(struct cache_wfile *w)
{
	struct cache_wb *wb;
	bool last;

	if (!w)
		return;
	wb = w->c->wb;
	pthread_mutex_lock(&wb->lock);
	util_assert(w->refs > 0);
	last = --w->refs == 0 && !w->in_table;
	pthread_mutex_unlock(&wb->lock);
	if (!last)
		return;
	cache_wb_uncharge(w->c, w->charged); /* deleted: its bytes are gone now */
	cache_wb_wfile_free(w);
}

void cache_w_writer(struct cache_wfile *w, bool add)
{
	struct cache_wb *wb = w->c->wb;

	pthread_mutex_lock(&wb->lock);
	util_assert(add || w->writers > 0);
	if (add)
		w->writers++;
	else if (--w->writers == 0)
		pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
}

int cache_w_fd(struct cache_wfile *w)
{
	return w->fd;
}

uint64_t cache_w_version(struct cache_wfile *w)
{
	struct cache_wb *wb = w->c->wb;
	uint64_t v;

	pthread_mutex_lock(&wb->lock);
	cache_wb_sync_external(w, true);
	v = (w->id << 32) ^ w->gen;
	pthread_mutex_unlock(&wb->lock);
	return v;
}

int cache_w_check(struct cache_wfile *w)
{
	struct cache_wb *wb = w->c->wb;
	uint32_t *crcs;
	uint64_t g, size;
	int rc;

	pthread_mutex_lock(&wb->lock);
	if (w->checked || w->sums_gen != w->gen) {
		rc = w->damaged[0] ? -EIO : 0;
		pthread_mutex_unlock(&wb->lock);
		return rc;
	}
	g = w->gen;
	size = w->a.size;
	pthread_mutex_unlock(&wb->lock);
	crcs = size ? cache_wb_file_crcs(w->c, w->fd, size) : NULL;
	pthread_mutex_lock(&wb->lock);
	if (!w->checked && w->gen == g && w->sums_gen == g &&
	    cache_wb_sums_fresh(w) && (!size || crcs) &&
	    cache_wb_sums_match(wb, w, crcs, size))
		w->checked = true;
	rc = w->damaged[0] ? -EIO : 0;
	pthread_mutex_unlock(&wb->lock);
	free(crcs);
	return rc;
}

/* The kernel's writes within this long of a look may share its mtime
 * where timestamps are coarse (a jiffy; multigrain ones, Linux >= 6.13,
 * differ): a file written this recently counts as changed. */
#define EXT_FRESH_NS 50000000

/* A writer outside cache_w_write_with (FUSE passthrough: the kernel
 * writes the file) may have changed it: the size from the file, growth
 * charged.  look: also decide whether it changed since the last look
 * (size or mtime moved, or written just now) and if so make it a new
 * version to upload, with the file's mtime (wb->lock held). */
void cache_wb_sync_external(struct cache_wfile *w, bool look)
{
	struct timespec now;
	struct stat st;
	int64_t m, age;

	util_debug_assert_locked(&w->c->wb->lock);
	if (!w->external || fstat(w->fd, &st))
		return;
	if ((uint64_t)st.st_size > w->charged) {
		charge_anyway(w->c, (uint64_t)st.st_size - w->charged);
		w->charged = (uint64_t)st.st_size;
	}
	w->a.size = (uint64_t)st.st_size;
	if (!look)
		return;
	m = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	clock_gettime(CLOCK_REALTIME, &now);
	age = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - m;
	if ((uint64_t)st.st_size != w->ext_size || m != w->ext_mtime_ns ||
	    (age < EXT_FRESH_NS && age > -EXT_FRESH_NS)) {
		w->gen++;
		w->a.mtime_ns = m;
		if (m > w->a.ctime_ns)
			w->a.ctime_ns = m;
	}
	w->ext_size = (uint64_t)st.st_size;
	w->ext_mtime_ns = m;
}

static void set_file_mtime(struct cache_wfile *w, int64_t ns)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 },
	};

	if (futimens(w->fd, ts))
		cache_log_ratelimited("setting the mtime of a dirty file: %s",
				      strerror(errno));
}

uint64_t cache_w_room(struct cache *c, uint64_t *cap)
{
	uint64_t dirty = atomic_load(&c->dirty_bytes);

	if (cap)
		*cap = c->cfg.size_bytes;
	return dirty < c->cfg.size_bytes ? c->cfg.size_bytes - dirty : 0;
}

void cache_w_external(struct cache_wfile *w, bool add)
{
	struct cache_wb *wb = w->c->wb;
	struct stat st;

	pthread_mutex_lock(&wb->lock);
	util_assert(add || w->external > 0);
	if (add && !w->external++ && !fstat(w->fd, &st)) {
		/* From now on the file's mtime is the truth: the kernel's
		 * writes set it, and so does cache_w_setattr. */
		set_file_mtime(w, w->a.mtime_ns);
		w->ext_size = (uint64_t)st.st_size;
		w->ext_mtime_ns = w->a.mtime_ns;
		w->ext_gen0 = w->gen;
		w->ext_seen = true;
		changed(wb, w, 0, 0);
	} else if (!add) {
		cache_wb_sync_external(w, true);
		/* A store through a shared mapping to a page already dirty
		 * moves neither size nor mtime: if an upload read the file
		 * meanwhile, count it changed once more at the end. */
		if (w->external == 1 && w->gen == w->queued_gen &&
		    (w->uploading || w->uploaded_gen >= w->ext_gen0))
			w->gen++;
		w->external--;
	}
	pthread_mutex_unlock(&wb->lock);
}

void cache_w_stat(struct cache_wfile *w, struct cache_wattr *a)
{
	struct cache_wb *wb = w->c->wb;

	pthread_mutex_lock(&wb->lock);
	cache_wb_sync_external(w, false);
	*a = w->a;
	pthread_mutex_unlock(&wb->lock);
}

static void touch(struct cache_wfile *w)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	w->a.mtime_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	w->a.ctime_ns = w->a.mtime_ns;
	w->gen++;
}

/* Charges the cap for the file growing to end (wb->lock held). */
static int grow(struct cache_wfile *w, uint64_t end)
{
	int rc;

	if (end <= w->charged)
		return 0;
	rc = charge(w->c, end - w->charged);
	if (!rc)
		w->charged = end;
	return rc;
}

ssize_t cache_w_write_with(struct cache_wfile *w, uint64_t off, size_t len,
			   cache_w_write_fn *fn, void *arg)
{
	struct cache_wb *wb = w->c->wb;
	size_t done = 0;
	ssize_t n = 0;
	int rc;

	pthread_mutex_lock(&wb->lock);
	rc = grow(w, off + len);
	if (!rc)
		rc = changed(wb, w, off, len);
	pthread_mutex_unlock(&wb->lock);
	if (rc)
		return rc;
	for (int tries = 0; done < len;) {
		n = fn(arg, w->fd, off + done, len - done);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == -ENOSPC && !tries++) {
			/* The cache disk is full: make room by evicting. */
			cache_evict_harder(w->c, len - done);
			continue;
		}
		break;
	}
	if (!done) {
		if (n == -ENOSPC)
			cache_log_ratelimited("the cache disk under %s is "
					      "full: a write failed with "
					      "ENOSPC", w->c->cfg.dir);
		return n < 0 ? n : -EIO;
	}
	pthread_mutex_lock(&wb->lock);
	if (off + done > w->a.size)
		w->a.size = off + done;
	/* Again: a commit may have summed these blocks while the bytes
	 * were on their way. */
	cache_wb_sums_mark(w, off, done);
	touch(w);
	pthread_mutex_unlock(&wb->lock);
	return (ssize_t)done;
}

struct mem_src {
	const char *buf;
	uint64_t off;
};

static ssize_t write_mem(void *arg, int fd, uint64_t off, size_t len)
{
	const struct mem_src *m = arg;
	ssize_t n;

	do
		n = pwrite(fd, m->buf + (off - m->off), len, (off_t)off);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t cache_w_pwrite(struct cache_wfile *w, const void *buf, size_t len,
		       uint64_t off)
{
	struct mem_src m = { buf, off };

	return cache_w_write_with(w, off, len, write_mem, &m);
}

int cache_w_truncate(struct cache_wfile *w, uint64_t size)
{
	struct cache_wb *wb = w->c->wb;
	uint64_t drop = 0;
	int rc;

	pthread_mutex_lock(&wb->lock);
	rc = grow(w, size);
	if (!rc)
		rc = changed(wb, w, 0, 0);
	if (!rc) /* before the bytes go: an upload reading them is stale */
		w->gen++;
	pthread_mutex_unlock(&wb->lock);
	if (rc)
		return rc;
	if (ftruncate(w->fd, (off_t)size))
		return -errno;
	pthread_mutex_lock(&wb->lock);
	w->a.size = size;
	cache_wb_sums_resize(w, size);
	if (!size && w->damaged[0]) { /* nothing left of the damage */
		w->damaged[0] = '\0';
		w->checked = true;
	}
	if (w->charged > size) {
		drop = w->charged - size;
		w->charged = size;
	}
	touch(w);
	pthread_mutex_unlock(&wb->lock);
	cache_wb_uncharge(w->c, drop);
	return 0;
}

void cache_w_setattr(struct cache_wfile *w, const struct cache_wattr *a,
		     unsigned mask)
{
	struct cache_wb *wb = w->c->wb;

	pthread_mutex_lock(&wb->lock);
	if (mask & CACHE_WA_MODE)
		w->a.mode = a->mode & 07777;
	if (mask & CACHE_WA_UID)
		w->a.uid = a->uid;
	if (mask & CACHE_WA_GID)
		w->a.gid = a->gid;
	w->gen++;
	if (mask & CACHE_WA_MTIME) {
		w->a.mtime_ns = a->mtime_ns;
		if (w->external)
			set_file_mtime(w, a->mtime_ns);
	}
	if (mask & CACHE_WA_ATIME)
		w->a.atime_ns = a->atime_ns;
	w->a.ctime_ns = mask & CACHE_WA_CTIME ? a->ctime_ns : util_wall_ns();
	pthread_mutex_unlock(&wb->lock);
}

int cache_w_xattr_set(struct cache_wfile *w, const char *name,
		      const char *value, size_t len, int flags)
{
	struct cache_wb *wb = w->c->wb;
	char *v = strndup(value, len), *n = strdup(name);
	struct obj_kv *m;
	int rc = 0;

	if (!v || !n) {
		free(v);
		free(n);
		return -ENOMEM;
	}
	pthread_mutex_lock(&wb->lock);
	for (size_t i = 0; i < w->nmeta; i++)
		if (!strcmp(w->meta[i].name, name)) {
			if (flags & 1 /* XATTR_CREATE */) {
				rc = -EEXIST;
			} else {
				free(w->meta[i].value);
				w->meta[i].value = v;
				v = NULL;
			}
			goto out;
		}
	if (flags & 2 /* XATTR_REPLACE */) {
		rc = -ENODATA;
		goto out;
	}
	m = realloc(w->meta, (w->nmeta + 1) * sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		goto out;
	}
	w->meta = m;
	m[w->nmeta].name = n;
	m[w->nmeta].value = v;
	w->nmeta++;
	n = v = NULL;
out:
	if (!rc)
		w->gen++, w->a.ctime_ns = util_wall_ns();
	pthread_mutex_unlock(&wb->lock);
	free(v);
	free(n);
	return rc;
}

int cache_w_xattr_remove(struct cache_wfile *w, const char *name)
{
	struct cache_wb *wb = w->c->wb;
	int rc = -ENODATA;

	pthread_mutex_lock(&wb->lock);
	for (size_t i = 0; i < w->nmeta; i++)
		if (!strcmp(w->meta[i].name, name)) {
			free(w->meta[i].name);
			free(w->meta[i].value);
			w->meta[i] = w->meta[--w->nmeta];
			w->gen++;
			w->a.ctime_ns = util_wall_ns();
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

int cache_w_xattrs(struct cache_wfile *w, struct obj_kv **out, size_t *n)
{
	struct cache_wb *wb = w->c->wb;
	struct obj_kv *m;
	int rc = 0;

	pthread_mutex_lock(&wb->lock);
	m = calloc(w->nmeta + 1, sizeof(*m));
	for (size_t i = 0; m && i < w->nmeta; i++) {
		m[i].name = strdup(w->meta[i].name);
		m[i].value = strdup(w->meta[i].value);
		if (!m[i].name || !m[i].value)
			rc = -ENOMEM;
	}
	*n = w->nmeta;
	pthread_mutex_unlock(&wb->lock);
	if (!m || rc) {
		obj_kv_free(m, m ? *n : 0);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

int cache_w_commit(struct cache_wfile *w, bool durable)
{
	struct cache_wb *wb = w->c->wb;
	int rc = 0;

	bool ok;

	if (durable && fdatasync(w->fd))
		return -errno;
	ok = cache_wb_sums_update(wb, w);
	pthread_mutex_lock(&wb->lock);
	cache_wb_sync_external(w, true);
	if (w->in_table && (w->gen > w->queued_gen || !w->committed)) {
		if (w->queued_gen <= w->uploaded_gen || !w->queued_ms)
			w->queued_ms = util_now_ms();
		w->queued_gen = w->gen;
		w->not_before_ms = (int64_t)util_now_ms() + wb->cfg.async_delay_ms;
		/* The sums first, then the row: a crash in between leaves
		 * a .meta newer than the row, which the replay prefers. */
		w->seq = ++wb->seq_top;
		w->sums_ok = ok && cache_wb_sums_fresh(w);
		w->sums_gen = w->sums_ok ? w->gen : 0;
		w->changing = !w->sums_ok;
		if (w->sums_ok) {
			w->checked = true;
			w->damaged[0] = '\0';
		}
		rc = cache_wb_save(wb, w, durable);
		if (!rc) {
			w->committed = true;
			pthread_cond_broadcast(&wb->cond);
		}
	} else if (w->in_table && w->committed && !w->sums_ok && ok &&
		   !w->external && cache_wb_sums_fresh(w) &&
		   w->queued_gen > w->uploaded_gen) {
		/* Committed by a close while the kernel still wrote the file
		 * (passthrough: no sums then), unchanged since: the release
		 * takes its sums, so that a replay checks it instead of
		 * uploading it unchecked (46-mount-damage, seed 457394246
		 * f13: a flipped bit served and uploaded). */
		w->seq = ++wb->seq_top;
		w->sums_ok = true;
		w->sums_gen = w->gen;
		w->changing = false;
		w->checked = true;
		rc = cache_wb_save(wb, w, durable);
	} else if (durable && w->in_table && w->committed &&
		   !w->meta_durable) {
		/* Committed by a close, unchanged since: an fsync must still
		 * make the .meta and the file's name in dirty/ durable, or
		 * a power cut can lose the file it acknowledged (68, seed
		 * 241188455 trial 6, --meta dirsync). */
		rc = cache_wb_meta_write(wb, w, true);
	}
	if (!rc && durable)
		rc = cache_wb_db_sync(wb);
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

