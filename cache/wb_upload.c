/* SPDX-License-Identifier: MIT */
/*
 * wb_upload.c - the write-back's uploader threads: they PUT queued dirty
 * files (multipart when large) and DELETE tombstones in batches, retry
 * with backoff, move a file that became clean into the read cache, and
 * answer flush and statistics.  See wb.c for the state they work on.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wb_int.h"

/* ---- uploads ---- */

static int64_t backoff_ms(unsigned attempts)
{
	int64_t ms = 500ll << (attempts < 6 ? attempts : 6);

	return ms < CACHE_WB_BACKOFF_MAX_MS ? ms : CACHE_WB_BACKOFF_MAX_MS;
}

static void busy_add(struct cache_wb *wb, char *key)
{
	if (wb->nbusy == wb->busy_cap) {
		size_t n = wb->busy_cap ? wb->busy_cap * 2 : 16;
		char **b = realloc(wb->busy_keys, n * sizeof(*b));

		if (!b)
			return; /* tombstones of key may run early: rare */
		wb->busy_keys = b;
		wb->busy_cap = n;
	}
	wb->busy_keys[wb->nbusy++] = key;
}

static void busy_del(struct cache_wb *wb, const char *key)
{
	for (size_t i = 0; i < wb->nbusy; i++)
		if (wb->busy_keys[i] == key) {
			wb->busy_keys[i] = wb->busy_keys[--wb->nbusy];
			return;
		}
}

static bool busy(struct cache_wb *wb, const char *key)
{
	for (size_t i = 0; i < wb->nbusy; i++)
		if (!strcmp(wb->busy_keys[i], key))
			return true;
	return false;
}

/* An upload of key is out, or its DELETE is, or a caller's own request
 * (cache_w_key_begin). */
bool cache_wb_key_busy(struct cache_wb *wb, const char *key)
{
	struct cache_wb_tomb *t =
		wb->ntombs ? cache_wb_tomb_find(wb, key) : NULL;

	util_debug_assert_locked(&wb->lock);
	return busy(wb, key) || (t && t->running);
}

void cache_w_key_begin(struct cache *c, const char *key)
{
	struct cache_wb *wb = c->wb;
	char *mine = strdup(key);

	pthread_mutex_lock(&wb->lock);
	while (cache_wb_key_busy(wb, key))
		pthread_cond_wait(&wb->cond, &wb->lock);
	/* A pending DELETE of key stays until the caller's request has
	 * landed (cache_w_key_end): a crash in between must not bring back
	 * what was deleted. */
	if (mine)
		busy_add(wb, mine);
	pthread_mutex_unlock(&wb->lock);
}

void cache_w_key_end(struct cache *c, const char *key, bool done)
{
	struct cache_wb *wb = c->wb;

	pthread_mutex_lock(&wb->lock);
	for (size_t i = 0; i < wb->nbusy; i++)
		if (!strcmp(wb->busy_keys[i], key)) {
			char *mine = wb->busy_keys[i];

			busy_del(wb, mine);
			free(mine);
			break;
		}
	if (done) /* overwritten: no DELETE of it is due any more */
		cache_wb_tomb_drop(wb, key);
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	if (done)
		cache_wb_forget(c, key);
}

/* Uploaded as it stands and no writer left: only the move to the read
 * cache is missing. */
static bool cleanable(const struct cache_wfile *w)
{
	return w->uploaded_gen && w->uploaded_gen == w->gen && !w->writers &&
	       w->in_table;
}

/* The next file to upload (or to clean): queued, due, not uploading. */
static struct cache_wfile *next_upload(struct cache_wb *wb, int64_t now,
				       int64_t *wake)
{
	struct cache_wfile *best = NULL;

	for (size_t h = 0; h < CACHE_WB_HASH; h++)
		for (struct cache_wfile *w = wb->tab[h]; w; w = w->hnext) {
			if (w->uploading || w->damaged[0] ||
			    (w->queued_gen <= w->uploaded_gen &&
			     !cleanable(w)))
				continue;
			/* One request per key at a time, in order: an older
			 * version's PUT or a DELETE of the name still out
			 * must land before this one starts. */
			if (cache_wb_key_busy(wb, w->key))
				continue;
			if (w->not_before_ms > now) {
				if (w->not_before_ms < *wake)
					*wake = w->not_before_ms;
				continue;
			}
			if (!best || w->not_before_ms < best->not_before_ms)
				best = w;
		}
	return best;
}

uint32_t cache_wkind_type(enum cache_wkind kind)
{
	static const uint32_t t[] = { S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO,
				      S_IFSOCK, S_IFCHR, S_IFBLK };

	return (unsigned)kind <= CACHE_WK_LAST ? t[kind] : S_IFREG;
}

int cache_wkind_of(uint32_t mode)
{
	for (int k = 0; k <= CACHE_WK_LAST; k++)
		if ((mode & S_IFMT) == cache_wkind_type((enum cache_wkind)k))
			return k;
	return -1;
}

bool cache_wattr_meta_name(const char *name)
{
	static const char *const names[] = { "mode", "uid", "gid", "mtime",
					     "ctime", "atime", "rdev" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(name, names[i]))
			return true;
	return false;
}

size_t cache_wattr_meta(const struct cache_wattr *a,
			struct obj_kv kv[CACHE_WATTR_META],
			char vals[CACHE_WATTR_META][32])
{
	size_t n = 0;

	snprintf(vals[n], 32, "%u", (a->mode & 07777) |
		 cache_wkind_type(a->kind));
	kv[n] = (struct obj_kv){ "mode", vals[n] }, n++;
	snprintf(vals[n], 32, "%u", a->uid);
	kv[n] = (struct obj_kv){ "uid", vals[n] }, n++;
	snprintf(vals[n], 32, "%u", a->gid);
	kv[n] = (struct obj_kv){ "gid", vals[n] }, n++;
	util_time_format(a->mtime_ns, vals[n], 32);
	kv[n] = (struct obj_kv){ "mtime", vals[n] }, n++;
	if (a->ctime_ns) {
		util_time_format(a->ctime_ns, vals[n], 32);
		kv[n] = (struct obj_kv){ "ctime", vals[n] }, n++;
	}
	if (a->atime_ns) {
		util_time_format(a->atime_ns, vals[n], 32);
		kv[n] = (struct obj_kv){ "atime", vals[n] }, n++;
	}
	if (a->kind == CACHE_WK_CHR || a->kind == CACHE_WK_BLK) {
		snprintf(vals[n], 32, "%u", a->rdev);
		kv[n] = (struct obj_kv){ "rdev", vals[n] }, n++;
	}
	return n;
}

/* The object metadata of w: attributes, then user xattrs. */
static size_t user_meta(const struct cache_wfile *w, struct obj_kv *kv,
			char vals[CACHE_WATTR_META][32], size_t *nattr)
{
	size_t n = cache_wattr_meta(&w->a, kv, vals);

	*nattr = n;
	for (size_t i = 0; i < w->nmeta; i++)
		kv[n++] = w->meta[i];
	return n;
}

/* iw: the bucket's version changed since we based our copy on it. */
static void check_conflict(struct cache_wb *wb, const char *key,
			   const char *base, bool was_in_bucket)
{
	struct obj_meta m;
	struct obj_error err;
	obj_status st = obj_head(wb->c->st, key, &m, &err);
	bool changed = st == OBJ_OK ? strcmp(m.etag, base) != 0 :
		       st == OBJ_ERR_NOT_FOUND && was_in_bucket;

	if (st == OBJ_OK)
		obj_meta_release(&m);
	if (!changed)
		return;
	pthread_mutex_lock(&wb->lock);
	wb->conflicts++;
	cache_wb_log_err(wb, "conflict on %s: the bucket's copy changed since "
		   "this cache read it; the local version is uploaded over "
		   "it (mode iw: last close wins)", key);
	pthread_mutex_unlock(&wb->lock);
}

/* After an upload of generation g under key: when nothing changed and no
 * writer has it open, the file leaves the table and its bytes become the
 * read cache's copy of the new version.  The fs hears of the new version
 * (on_done) before the file leaves, so that no open in between sees
 * neither.  Called and returns with wb->lock held. */
static void try_clean(struct cache_wb *wb, struct cache_wfile *w,
		      const char *key, const char *etag, uint64_t g,
		      uint32_t *crcs)
{
	struct cache *c = wb->c;
	uint64_t size = w->a.size, charged;
	char path[64];
	bool adopted;

#define CLEAN_NOW (w->in_table && !w->deleted && w->gen == g && \
		   !w->writers && !strcmp(w->key, key))
	if (!CLEAN_NOW)
		return;
	w->uploading = true; /* no second uploader on it meanwhile */
	pthread_mutex_unlock(&wb->lock);
	if (!crcs && w->a.kind == CACHE_WK_FILE)
		crcs = cache_wb_file_crcs(c, w->fd, size);
	if (wb->cfg.on_done)
		wb->cfg.on_done(wb->cfg.arg, key, etag, size, false);
	pthread_mutex_lock(&wb->lock);
	w->uploading = false;
	if (!CLEAN_NOW) {
		free(crcs);
		return;
	}
#undef CLEAN_NOW
	cache_wb_dirty_path(w->id, path, sizeof(path));
	charged = w->charged;
	/* A deletion of this key dropped since the last synced commit
	 * must stay dropped before the bucket's copy is the only one: a
	 * replay would DELETE the new object (68-mount-powerloss).  Then
	 * the row says "uploaded" before anything moves: a stop from here
	 * on leaves a row whose file may be gone, and the replay must not
	 * call that file lost (docs/cache-format.md, "Replay").  Nothing
	 * can fail after the mark.  Either failing (a full disk): kept as
	 * it is, uploaded again later or by the next mount. */
	if ((wb->tomb_unsynced && cache_wb_db_sync(wb)) ||
	    cache_wb_db_mark_uploaded(wb, w->id, etag)) {
		w->not_before_ms = (int64_t)util_now_ms() + 1000;
		free(crcs);
		return;
	}
	adopted = crcs && size &&
		  !cache_adopt(c, key, etag, size, path, crcs, charged);
	cache_wb_take_out(wb, w);
	cache_wb_meta_remove(wb, w->id); /* before the row: see above */
	cache_wb_db_del(wb, w->id);
	w->charged = 0;
	pthread_mutex_unlock(&wb->lock);
	if (!adopted) { /* the bucket has it: the local copy just goes */
		unlinkat(c->dirfd, path, 0);
		cache_wb_uncharge(c, charged);
	}
	/* Gone for good: a power cut must not bring it back to be
	 * uploaded again over what the bucket gets next. */
	fsync(wb->dirty_fd);
	free(crcs);
	pthread_mutex_lock(&wb->lock);
}

static bool shrunk(int fd, uint64_t size)
{
	struct stat sb;

	return !fstat(fd, &sb) && (uint64_t)sb.st_size < size;
}

/* Uploads w; called and returns with wb->lock held (dropped meanwhile). */
/* Before a replayed file goes up, its bytes against its last commit's
 * sums (wb->lock not held; taken and dropped).  false: it is damaged,
 * and the upload is off (counted as a failure, w no longer uploading);
 * *crcs gets the file's block sums either way (or NULL). */
static bool upload_check(struct cache_wb *wb, struct cache_wfile *w,
			 const char *key, uint64_t g, uint64_t size,
			 uint32_t **crcs)
{
	bool ok = true;

	*crcs = cache_wb_file_crcs(wb->c, w->fd, size);
	pthread_mutex_lock(&wb->lock);
	/* Only a file nobody changed meanwhile: a write on its way has
	 * marked its blocks, and one done has moved gen. */
	if (w->gen == g && cache_wb_sums_fresh(w) && !*crcs)
		cache_wb_damaged(wb, w, "cannot be read back whole (%" PRIu64
				 " bytes expected)", size);
	else if (*crcs && w->gen == g && cache_wb_sums_fresh(w) &&
		 cache_wb_sums_match(wb, w, *crcs, size))
		w->checked = true;
	if (w->damaged[0]) {
		w->uploading = false;
		wb->inflight--;
		busy_del(wb, key);
		wb->failures++;
		w->failed_ms = (int64_t)util_now_ms();
		pthread_cond_broadcast(&wb->cond);
		ok = false;
	}
	pthread_mutex_unlock(&wb->lock);
	return ok;
}

/* A failed upload of key: counted, logged, retried after a back-off
 * (wb->lock held). */
static void upload_failed(struct cache_wb *wb, struct cache_wfile *w,
			  const char *key, const struct obj_error *err)
{
	char line[512];

	obj_error_format(err, line, sizeof(line));
	w->attempts++;
	w->failed_ms = (int64_t)util_now_ms();
	w->not_before_ms = w->failed_ms + backoff_ms(w->attempts);
	snprintf(w->last_err, sizeof(w->last_err), "%s", line);
	wb->failures++;
	cache_wb_log_err(wb, "upload of %s failed (attempt %u, retried in "
			 "%lld ms): %s", key, w->attempts,
			 (long long)backoff_ms(w->attempts), line);
}

/* key's generation g is in the bucket as version etag (bytes: what went
 * up, 0 when nothing did): w clean if nothing changed since (wb->lock
 * held; takes crcs). */
static void upload_done(struct cache_wb *wb, struct cache_wfile *w,
			const char *key, const char *etag, uint64_t g,
			uint64_t bytes, bool skip_put, uint32_t *crcs)
{
	w->attempts = 0;
	w->last_err[0] = '\0';
	w->uploaded_gen = g;
	if (g >= w->queued_gen)
		w->queued_ms = 0;
	snprintf(w->base_etag, sizeof(w->base_etag), "%s", etag);
	if (!skip_put) {
		wb->uploaded_files++;
		wb->uploaded_bytes += bytes;
	}
	if (strcmp(w->key, key))
		cache_wb_tomb_put(wb, key, false); /* renamed while it went up */
	else if (w->in_table && !w->deleted && wb->ntombs)
		/* The old object is overwritten: a DELETE of the name that
		 * w shadowed is not due any more (cache_wb_tomb_shadowed). */
		cache_wb_tomb_drop(wb, key);
	try_clean(wb, w, key, etag, g, crcs); /* takes crcs */
}

static void upload_one(struct cache_wb *wb, struct cache_wfile *w)
{
	struct obj_kv kv[CACHE_WATTR_META + 64];
	char vals[CACHE_WATTR_META][32], etag[80] = "";
	char base[CACHE_ETAG_MAX];
	struct obj_error err;
	obj_status st;
	uint64_t g, size;
	char *key = strdup(w->key);
	size_t nkv, nattr;
	bool was_in_bucket = w->in_bucket, meta_ok = w->nmeta <= 64;
	struct obj_kv *mcopy = NULL;
	enum cache_wkind kind = w->a.kind;
	bool skip_put, check;
	uint32_t *crcs = NULL;

	if (!key)
		return; /* with the lock held, as always */
	cache_wb_sync_external(w, false); /* the kernel may be writing it */
	g = w->gen;
	size = w->a.size;
	skip_put = cleanable(w);
	/* A file replayed from the cache disk goes up only if it is what
	 * its last commit's sums say (they then serve the read cache). */
	check = !skip_put && kind == CACHE_WK_FILE && w->sums_gen == g &&
		!w->external && !w->checked;
	w->uploading = true;
	w->in_bucket = true; /* from now on a rename must delete it */
	w->refs++;
	wb->inflight++;
	busy_add(wb, key);
	memcpy(base, w->base_etag, sizeof(base));
	nkv = user_meta(w, kv, vals, &nattr);
	if (!meta_ok)
		nkv = nattr;
	/* The values of w->meta may change while we upload: copy. */
	mcopy = calloc(nkv, sizeof(*mcopy));
	for (size_t i = 0; mcopy && i < nkv; i++) {
		mcopy[i].name = strdup(kv[i].name);
		mcopy[i].value = strdup(kv[i].value);
	}
	pthread_mutex_unlock(&wb->lock);

	if (check && size && !upload_check(wb, w, key, g, size, &crcs)) {
		obj_kv_free(mcopy, nkv);
		free(crcs);
		cache_w_put(w);
		free(key);
		pthread_mutex_lock(&wb->lock);
		return;
	}
	if (skip_put)
		st = OBJ_OK, snprintf(etag, sizeof(etag), "%s", base);
	else if (wb->cfg.check_conflicts && base[0])
		check_conflict(wb, key, base, was_in_bucket);
	if (skip_put)
		;
	else if (!mcopy)
		st = OBJ_ERR_NOMEM, err.status = OBJ_ERR_NOMEM,
		snprintf(err.message, sizeof(err.message), "out of memory");
	else if (kind == CACHE_WK_DIR)
		st = obj_put(wb->c->st, key, "", 0, mcopy, nkv, etag, &err);
	else
		st = obj_put_fd(wb->c->st, key, w->fd, size, mcopy, nkv, etag,
				&err);
	obj_kv_free(mcopy, nkv);

	pthread_mutex_lock(&wb->lock);
	w->uploading = false;
	wb->inflight--;
	busy_del(wb, key);
	if (st != OBJ_OK && (w->gen != g || shrunk(w->fd, size))) {
		/* Changed under the upload (a truncate makes the source
		 * short, and may not have said so yet): not a failure; the
		 * new version goes up after its commit. */
		w->not_before_ms = (int64_t)util_now_ms() + wb->cfg.async_delay_ms;
		pthread_cond_broadcast(&wb->cond);
		pthread_mutex_unlock(&wb->lock);
		cache_w_put(w);
		free(key);
		free(crcs);
		pthread_mutex_lock(&wb->lock);
		return;
	}
	if (st != OBJ_OK) {
		upload_failed(wb, w, key, &err);
		free(crcs);
	} else {
		upload_done(wb, w, key, etag, g, skip_put ? 0 : size, skip_put,
			    crcs); /* takes crcs */
	}
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	cache_w_put(w);
	free(key);
	pthread_mutex_lock(&wb->lock); /* the caller's loop holds it */
}

/* Up to CACHE_WB_DELETE_BATCH due tombstones, marked running (wb->lock
 * held). */
static size_t next_deletes(struct cache_wb *wb, int64_t now, int64_t *wake,
			   struct cache_wb_tomb **out)
{
	size_t n = 0;

	for (size_t h = 0; h < CACHE_WB_HASH && n < CACHE_WB_DELETE_BATCH; h++)
		for (struct cache_wb_tomb *t = wb->tombs[h];
		     t && n < CACHE_WB_DELETE_BATCH; t = t->next) {
			if (t->running || t->held || busy(wb, t->key) ||
			    cache_wb_tomb_shadowed(wb, t))
				continue;
			if (t->not_before_ms > now) {
				if (t->not_before_ms < *wake)
					*wake = t->not_before_ms;
				continue;
			}
			t->running = true;
			out[n++] = t;
		}
	return n;
}

static void delete_batch(struct cache_wb *wb, struct cache_wb_tomb **ts,
			 size_t n)
{
	const char **keys = calloc(n, sizeof(*keys));
	struct obj_error err;
	obj_status st = OBJ_ERR_NOMEM;
	size_t failed = n;

	pthread_mutex_unlock(&wb->lock);
	if (keys) {
		for (size_t i = 0; i < n; i++)
			keys[i] = ts[i]->key;
		st = obj_delete_many(wb->c->st, keys, n, &failed, &err);
	}
	pthread_mutex_lock(&wb->lock);
	if (st != OBJ_OK)
		for (size_t i = 0; i < n; i++)
			ts[i]->running = false;
	if (st != OBJ_OK) {
		char line[512] = "out of memory";

		if (keys)
			obj_error_format(&err, line, sizeof(line));
		wb->failures++;
		cache_wb_log_err(wb, "deleting %zu keys in the bucket failed: %s",
			   n, line);
		for (size_t i = 0; i < n; i++) {
			ts[i]->failed_ms = (int64_t)util_now_ms();
			ts[i]->not_before_ms = ts[i]->failed_ms + 2000;
		}
		free(keys);
		return;
	}
	wb->deleted_keys += n;
	/* The fs hears of each delete (and forgets its listing) while the
	 * tombstone still hides the name: a listing fetched before the
	 * DELETE must not show it in between.  Running tombstones stay put
	 * meanwhile (cache_wb_tomb_drop leaves them). */
	for (size_t i = 0; wb->cfg.on_done && i < n; i++) {
		pthread_mutex_unlock(&wb->lock);
		wb->cfg.on_done(wb->cfg.arg, ts[i]->key, NULL, 0, true);
		pthread_mutex_lock(&wb->lock);
	}
	for (size_t i = 0; i < n; i++) {
		ts[i]->running = false;
		if (!ts[i]->held)
			cache_wb_tomb_drop(wb, ts[i]->key);
	}
	pthread_cond_broadcast(&wb->cond);
	free(keys);
}

static void *uploader(void *arg)
{
	struct cache_wb *wb = arg;
	struct cache_wb_tomb **batch = calloc(CACHE_WB_DELETE_BATCH, sizeof(*batch));

	pthread_mutex_lock(&wb->lock);
	while (!wb->stop) {
		int64_t now = (int64_t)util_now_ms(), wake = now + 1000;
		struct cache_wfile *w = next_upload(wb, now, &wake);
		size_t n;

		if (w) {
			upload_one(wb, w); /* unlocks and relocks */
			continue;
		}
		n = batch ? next_deletes(wb, now, &wake, batch) : 0;
		if (n) {
			delete_batch(wb, batch, n);
			continue;
		}
		{
			struct timespec ts = util_deadline(
				(unsigned)(wake > now ? wake - now : 1));

			pthread_cond_timedwait(&wb->cond, &wb->lock, &ts);
		}
	}
	pthread_mutex_unlock(&wb->lock);
	free(batch);
	return NULL;
}

int cache_wb_start(struct cache *c, const struct cache_wb_config *cfg)
{
	struct cache_wb *wb = c->wb;
	unsigned n = cfg->uploaders ? cfg->uploaders : 4;

	wb->cfg = *cfg;
	if (!cfg->push)
		return 0;
	wb->threads = calloc(n, sizeof(*wb->threads));
	if (!wb->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		int rc = pthread_create(&wb->threads[i], NULL, uploader, wb);

		if (rc)
			return -rc;
		wb->nthreads++;
	}
	return 0;
}

void cache_wb_stop(struct cache *c)
{
	struct cache_wb *wb = c->wb;

	if (!wb)
		return;
	pthread_mutex_lock(&wb->lock);
	wb->stop = true;
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	for (unsigned i = 0; i < wb->nthreads; i++)
		pthread_join(wb->threads[i], NULL);
	free(wb->threads);
	wb->threads = NULL;
	wb->nthreads = 0;
	wb->cfg.on_done = NULL;
	wb->stop = false;
}

/* Pending work under prefix; failed: how much of it failed since t0. */
static size_t pending(struct cache_wb *wb, const char *prefix, int64_t t0,
		      size_t *failed, char *report, size_t rl)
{
	size_t pl = strlen(prefix), n = 0, o = 0;

	*failed = 0;
	if (rl)
		report[0] = '\0';
	for (size_t h = 0; h < CACHE_WB_HASH; h++) {
		for (struct cache_wfile *w = wb->tab[h]; w; w = w->hnext) {
			if (strncmp(w->key, prefix, pl) ||
			    (w->queued_gen <= w->uploaded_gen &&
			     !w->uploading && !w->damaged[0]))
				continue;
			n++;
			if (w->damaged[0] || (w->failed_ms >= t0 &&
					      !w->uploading)) {
				(*failed)++;
				if (o < rl)
					o += (size_t)snprintf(report + o,
						rl - o, "%s: %s\n", w->key,
						w->damaged[0] ? w->damaged :
						w->last_err);
			}
		}
		for (struct cache_wb_tomb *t = wb->tombs[h]; t; t = t->next) {
			if (strncmp(t->key, prefix, pl) || t->held ||
			    cache_wb_tomb_shadowed(wb, t))
				continue;
			n++;
			if (t->failed_ms >= t0 && !t->running) {
				(*failed)++;
				if (o < rl)
					o += (size_t)snprintf(report + o,
						rl - o, "%s: delete failed\n",
						t->key);
			}
		}
	}
	/* What the replay found gone, for the whole mount: reported, never
	 * waited for. */
	for (size_t i = 0; i < wb->nlost; i++) {
		if (strncmp(wb->lost[i], prefix, pl))
			continue;
		n++;
		(*failed)++;
		if (o < rl)
			o += (size_t)snprintf(report + o, rl - o, "%s\n",
					      wb->lost[i]);
	}
	return n;
}

int cache_w_flush(struct cache *c, const char *prefix, bool wait,
		  unsigned timeout_ms, char *report, size_t rl)
{
	struct cache_wb *wb = c->wb;
	size_t pl = strlen(prefix), n, failed;
	int64_t t0 = (int64_t)util_now_ms();
	struct timespec end = util_deadline(timeout_ms);
	int rc = 0;

	if (rl)
		report[0] = '\0';
	if (!wb->cfg.push) {
		snprintf(report, rl, "mode lu: local updates are never "
			 "uploaded\n");
		return -EPERM;
	}
	pthread_mutex_lock(&wb->lock);
	for (size_t h = 0; h < CACHE_WB_HASH; h++) {
		for (struct cache_wfile *w = wb->tab[h]; w; w = w->hnext) {
			if (strncmp(w->key, prefix, pl))
				continue;
			cache_wb_sync_external(w, true);
			if (w->gen > w->queued_gen) {
				/* Written but not closed yet: what is there
				 * now goes up, like sync(1), unchecked. */
				if (!w->queued_ms)
					w->queued_ms = util_now_ms();
				w->queued_gen = w->gen;
				w->changing = true;
				if (!cache_wb_db_put(wb, w, true))
					w->committed = true;
			}
			w->not_before_ms = 0;
		}
		for (struct cache_wb_tomb *t = wb->tombs[h]; t; t = t->next)
			if (!strncmp(t->key, prefix, pl))
				t->not_before_ms = 0;
	}
	pthread_cond_broadcast(&wb->cond);
	while (wait) {
		n = pending(wb, prefix, t0, &failed, report, rl);
		if (!n)
			break;
		if (failed == n) {
			rc = -EIO;
			break;
		}
		if (pthread_cond_timedwait(&wb->cond, &wb->lock, &end) ==
		    ETIMEDOUT) {
			n = pending(wb, prefix, t0, &failed, report, rl);
			rc = n ? -ETIMEDOUT : 0;
			break;
		}
	}
	/* A lost file known only by its row has been named now: the row
	 * goes (docs/cache-format.md, "Replay"). */
	for (size_t i = 0; wait && i < wb->nlost; i++) {
		if (wb->lost_row[i] && !strncmp(wb->lost[i], prefix, pl) &&
		    !cache_wb_db_del(wb, wb->lost_row[i]))
			wb->lost_row[i] = 0;
	}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

void cache_wb_get_stats(struct cache *c, struct cache_wb_stats *o)
{
	struct cache_wb *wb = c->wb;

	uint64_t oldest = 0;

	memset(o, 0, sizeof(*o));
	pthread_mutex_lock(&wb->lock);
	o->dirty_files = wb->nfiles;
	for (size_t h = 0; h < CACHE_WB_HASH && (wb->nfiles || wb->ntombs); h++) {
		for (struct cache_wfile *w = wb->tab[h]; w; w = w->hnext) {
			o->queued += w->queued_gen > w->uploaded_gen;
			if (w->queued_gen > w->uploaded_gen && w->queued_ms &&
			    (!oldest || w->queued_ms < oldest))
				oldest = w->queued_ms;
			o->damaged_files += w->damaged[0] != '\0';
		}
		for (struct cache_wb_tomb *t = wb->tombs[h]; t; t = t->next)
			o->queued += !cache_wb_tomb_shadowed(wb, t);
	}
	o->uploads_inflight = wb->inflight;
	o->upload_failures = wb->failures;
	o->uploaded_files = wb->uploaded_files;
	o->uploaded_bytes = wb->uploaded_bytes;
	o->deleted_keys = wb->deleted_keys;
	o->conflicts = wb->conflicts;
	o->lost_found = wb->lost_found;
	o->lost_files = wb->nlost;
	o->rebuilt = wb->rebuilt;
	memcpy(o->last_error, wb->last_error, sizeof(o->last_error));
	o->oldest_queued_ms = oldest ? util_now_ms() - oldest : 0;
	pthread_mutex_unlock(&wb->lock);
	o->dirty_bytes = atomic_load(&c->dirty_bytes);
}
