/* SPDX-License-Identifier: MIT */
/*
 * wb.c - write-back: dirty files, tombstones and the persistent upload
 * queue (the API and its contract are in wb.h; the uploader threads
 * that drain the queue are in wb_upload.c).
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

static uint32_t wb_hash(const char *key)
{
	uint32_t h = 2166136261u;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 16777619u;
	return h % CACHE_WB_HASH;
}

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
	for (struct cache_wfile *w = wb->tab[wb_hash(key)]; w; w = w->hnext)
		if (!strcmp(w->key, key))
			return w;
	return NULL;
}

static void insert(struct cache_wb *wb, struct cache_wfile *w)
{
	uint32_t h = wb_hash(w->key);

	w->hnext = wb->tab[h];
	wb->tab[h] = w;
	w->in_table = true;
	wb->nfiles++;
}

void cache_wb_take_out(struct cache_wb *wb, struct cache_wfile *w)
{
	util_debug_assert_locked(&wb->lock);
	for (struct cache_wfile **pp = &wb->tab[wb_hash(w->key)]; *pp;
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
	for (struct cache_wb_tomb *t = wb->tombs[wb_hash(key)]; t; t = t->next)
		if (!strcmp(t->key, key))
			return t;
	return NULL;
}

static void wfile_free(struct cache_wfile *w)
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

/* ---- the SQLite mirror ---- */

static int db_step(struct cache_wb *wb, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc == SQLITE_DONE)
		return 0;
	cache_wb_log_err(wb, "write-back store: %s failed: %s", what,
		   sqlite3_errmsg(wb->db));
	return -EIO;
}

/* Writes w's row (wb->lock held). */
int cache_wb_db_put(struct cache_wb *wb, const struct cache_wfile *w,
		  bool queued)
{
	sqlite3_stmt *s = wb->upsert;
	size_t ml = 0;
	char *mb = cache_wb_pack(w, &ml);
	int rc;

	util_debug_assert_locked(&wb->lock);
	if (!mb)
		return -ENOMEM;
	sqlite3_bind_int64(s, 1, (sqlite3_int64)w->id);
	sqlite3_bind_text(s, 2, w->key, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, (int)w->a.kind);
	sqlite3_bind_int64(s, 4, w->a.mode);
	sqlite3_bind_int64(s, 5, w->a.uid);
	sqlite3_bind_int64(s, 6, w->a.gid);
	sqlite3_bind_int64(s, 7, w->a.mtime_ns);
	sqlite3_bind_int64(s, 8, (sqlite3_int64)w->a.size);
	sqlite3_bind_int(s, 9, w->in_bucket);
	sqlite3_bind_text(s, 10, w->base_etag, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 11, queued);
	sqlite3_bind_blob(s, 12, mb, (int)ml, SQLITE_STATIC);
	sqlite3_bind_int64(s, 13, (sqlite3_int64)w->seq);
	sqlite3_bind_int(s, 14, w->changing);
	/* A damaged file's row names no boot: held at every mount until
	 * it is written again or removed. */
	sqlite3_bind_text(s, 15, w->damaged[0] ? "" : wb->boot, -1,
			  SQLITE_STATIC);
	rc = db_step(wb, s, "saving a dirty file");
	free(mb);
	return rc;
}

int cache_wb_db_mark_uploaded(struct cache_wb *wb, uint64_t id,
			      const char *etag)
{
	util_debug_assert_locked(&wb->lock);
	sqlite3_bind_text(wb->mark, 1, etag && *etag ? etag : "-", -1,
			  SQLITE_STATIC);
	sqlite3_bind_int64(wb->mark, 2, (sqlite3_int64)id);
	return db_step(wb, wb->mark, "marking a file uploaded");
}

int cache_wb_db_del(struct cache_wb *wb, uint64_t id)
{
	util_debug_assert_locked(&wb->lock);
	sqlite3_bind_int64(wb->del, 1, (sqlite3_int64)id);
	return db_step(wb, wb->del, "removing a dirty file");
}

static int db_tomb(struct cache_wb *wb, const char *key, bool add)
{
	sqlite3_stmt *s = add ? wb->tomb_add : wb->tomb_del;

	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	if (!add)
		wb->tomb_unsynced = true;
	return db_step(wb, s, add ? "saving a deletion" :
		       "removing a deletion");
}

/* A synced commit: for fsync (power-loss safe); -EIO when the WAL could
 * not be written back, so that fsync does not say durable. */
static int db_sync(struct cache_wb *wb)
{
	if (sqlite3_exec(wb->db, "PRAGMA wal_checkpoint(PASSIVE)", NULL,
			 NULL, NULL) == SQLITE_OK) {
		wb->tomb_unsynced = false;
		return 0;
	}
	cache_wb_log_err(wb, "write-back store: a synced commit failed: %s",
			 sqlite3_errmsg(wb->db));
	return -EIO;
}

static const char WB_SCHEMA[] =
	"CREATE TABLE IF NOT EXISTS files(id INTEGER PRIMARY KEY, "
	"key TEXT NOT NULL, kind INTEGER, mode INTEGER, uid INTEGER, "
	"gid INTEGER, mtime_ns INTEGER, size INTEGER, in_bucket INTEGER, "
	"base_etag TEXT, queued INTEGER, meta BLOB, seq INTEGER DEFAULT 0, "
	"changing INTEGER DEFAULT 0, boot TEXT, uploaded TEXT DEFAULT '');"
	"CREATE TABLE IF NOT EXISTS deletes(key TEXT PRIMARY KEY);";

/* user_version 2: every committed row has its DIR/dirty/ID.meta (a
 * committed row without one is damage, not an older fmfs). */
#define WB_DB_VERSION 2

/* Columns added since version 0 (ignored when already there). */
static void db_upgrade(struct cache_wb *wb)
{
	sqlite3_stmt *s;

	sqlite3_exec(wb->db, "ALTER TABLE files ADD COLUMN seq INTEGER "
		     "DEFAULT 0", NULL, NULL, NULL);
	sqlite3_exec(wb->db, "ALTER TABLE files ADD COLUMN changing INTEGER "
		     "DEFAULT 0", NULL, NULL, NULL);
	sqlite3_exec(wb->db, "ALTER TABLE files ADD COLUMN boot TEXT", NULL,
		     NULL, NULL);
	sqlite3_exec(wb->db, "ALTER TABLE files ADD COLUMN uploaded TEXT "
		     "DEFAULT ''", NULL, NULL, NULL);
	wb->db_version = 0;
	if (sqlite3_prepare_v2(wb->db, "PRAGMA user_version", -1, &s,
			       NULL) == SQLITE_OK) {
		if (sqlite3_step(s) == SQLITE_ROW)
			wb->db_version = sqlite3_column_int(s, 0);
		sqlite3_finalize(s);
	}
}

/* PRAGMA quick_check: a page damaged on the disk would otherwise be
 * read as rows that are not there (the queue is small: cheap). */
static int db_quick_check(struct cache_wb *wb, char *why, size_t wl)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(wb->db, "PRAGMA quick_check", -1, &s,
				    NULL);

	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(s, 0);

		rc = t && !strcmp(t, "ok") ? SQLITE_OK : SQLITE_CORRUPT;
		if (rc) {
			snprintf(why, wl, "damaged: PRAGMA quick_check says "
				 "%.160s", t ? t : "?");
			for (char *p = why; *p; p++)
				if (*p == '\n')
					*p = ' ';
		}
	}
	sqlite3_finalize(s);
	return rc;
}

static int db_open(struct cache_wb *wb, char *msg, size_t ml)
{
	const char *dir = wb->c->cfg.dir;
	char path[4096], why[300] = "";
	int rc;

	snprintf(path, sizeof(path), "%s/writeback.sqlite", dir);
	rc = sqlite3_open_v2(path, &wb->db, SQLITE_OPEN_READWRITE |
			     SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(wb->db, 5000);
		rc = sqlite3_exec(wb->db, "PRAGMA journal_mode=WAL;"
				  "PRAGMA synchronous=NORMAL;", NULL, NULL,
				  NULL);
	}
	if (rc == SQLITE_OK)
		rc = db_quick_check(wb, why, sizeof(why));
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(wb->db, WB_SCHEMA, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		db_upgrade(wb);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(wb->db, "INSERT OR REPLACE INTO files "
					"(id, key, kind, mode, uid, gid, "
					"mtime_ns, size, in_bucket, base_etag, "
					"queued, meta, seq, changing, boot) "
					"VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
					-1,
					&wb->upsert, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(wb->db, "DELETE FROM files WHERE "
					"id=?", -1, &wb->del, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(wb->db, "UPDATE files SET uploaded=? "
					"WHERE id=?", -1, &wb->mark, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(wb->db, "INSERT OR IGNORE INTO "
					"deletes VALUES(?)", -1,
					&wb->tomb_add, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(wb->db, "DELETE FROM deletes WHERE "
					"key=?", -1, &wb->tomb_del, NULL);
	if (rc != SQLITE_OK) {
		/* Never move this file aside: it is the list of data not
		 * yet in the bucket. */
		snprintf(msg, ml, "write-back store %s is unusable (%s); it "
			 "lists files not yet uploaded. Move it aside (mv %s "
			 "%s.bad; and its -wal file) and mount again: the "
			 "queue is rebuilt from %s/dirty/*.meta (deletions "
			 "not yet sent are lost)", path, why[0] ? why : wb->db ?
			 sqlite3_errmsg(wb->db) : "out of memory", path, path,
			 dir);
		return -EIO;
	}
	return 0;
}

/* ---- replay at open ---- */

/* Keeps "what: why" for flush and umount to report (wb->lock not needed:
 * only at open). */
static void lost_add_row(struct cache_wb *wb, uint64_t row,
			 const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void lost_add_row(struct cache_wb *wb, uint64_t row,
			 const char *fmt, ...)
{
	char line[1400], **l;
	uint64_t *rows;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cache_log("%s", line);
	l = realloc(wb->lost, (wb->nlost + 1) * sizeof(*l));
	if (!l)
		return;
	wb->lost = l;
	rows = realloc(wb->lost_row, (wb->nlost + 1) * sizeof(*rows));
	if (!rows)
		return;
	wb->lost_row = rows;
	rows[wb->nlost] = row;
	if ((l[wb->nlost] = strdup(line)))
		wb->nlost++;
}
#define lost_add(wb, ...) lost_add_row(wb, 0, __VA_ARGS__)

/* key's committed version, made from the bucket's version etag, is lost:
 * that older version must not be read as if nothing happened. */
static void lost_version(struct cache_wb *wb, const char *key,
			 const char *etag)
{
	struct cache_wb_lostver *v;

	if (!etag || !*etag)
		return; /* a new file: nothing older to serve in its place */
	v = realloc(wb->lostv, (wb->nlostv + 1) * sizeof(*v));
	if (!v)
		return;
	wb->lostv = v;
	v[wb->nlostv].key = strdup(key);
	v[wb->nlostv].etag = strdup(etag);
	if (v[wb->nlostv].key && v[wb->nlostv].etag)
		wb->nlostv++;
	else
		free(v[wb->nlostv].key), free(v[wb->nlostv].etag);
}

bool cache_w_lost_version(struct cache *c, const char *key,
			  const char *etag)
{
	struct cache_wb *wb = c->wb;
	bool r = false;

	/* At every open of a clean file: no lock while the list is empty
	 * (it only grows at open, before any thread runs). */
	if (!wb || !__atomic_load_n(&wb->nlostv, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&wb->lock);
	for (size_t i = 0; !r && i < wb->nlostv; i++)
		r = !strcmp(wb->lostv[i].key, key) &&
		    !strcmp(wb->lostv[i].etag, etag);
	pthread_mutex_unlock(&wb->lock);
	return r;
}

/* key was written again, removed or renamed over: what the bucket has
 * there is no longer the version a lost one replaced (wb->lock). */
static void lost_version_forget(struct cache_wb *wb, const char *key)
{
	util_debug_assert_locked(&wb->lock);
	for (size_t i = 0; i < wb->nlostv; i++)
		if (!strcmp(wb->lostv[i].key, key)) {
			free(wb->lostv[i].key);
			free(wb->lostv[i].etag);
			wb->lostv[i] = wb->lostv[--wb->nlostv];
			i--;
		}
}

/* Moves DIR/dirty/ID[suffix] to DIR/lost+found/ID-KEY[suffix]; the name
 * it got in to (or "" if it could not). */
static void move_aside(struct cache_wb *wb, uint64_t id, const char *key,
		       const char *suffix, char *to, size_t tl)
{
	char from[80];
	size_t i;

	if (!mkdirat(wb->c->dirfd, "lost+found", 0700))
		util_fsync_at(wb->c->dirfd, ".");
	snprintf(from, sizeof(from), "dirty/%016" PRIx64 "%s", id, suffix);
	i = (size_t)snprintf(to, tl, "lost+found/%016" PRIx64 "-", id);
	for (size_t k = 0; key[k] && i + 1 < tl - strlen(suffix); i++, k++)
		to[i] = key[k] == '/' ? '%' : key[k];
	snprintf(to + i, tl - i, "%s", suffix);
	if (renameat(wb->c->dirfd, from, wb->c->dirfd, to)) {
		to[0] = '\0';
		return;
	}
	/* The new name first: a power cut may then leave both, never
	 * neither. */
	util_fsync_at(wb->c->dirfd, "lost+found");
	util_fsync_at(wb->c->dirfd, "dirty");
}

/* A dirty file never committed (the writer had not closed it). */
static void lost_found(struct cache_wb *wb, uint64_t id, const char *key)
{
	char to[1300];

	move_aside(wb, id, key, "", to, sizeof(to));
	if (to[0]) {
		cache_log("%s had not been closed when fmfs stopped; its "
			  "bytes were not uploaded and are in %s/%s",
			  key, wb->c->cfg.dir, to);
		wb->lost_found++;
	}
}

/* The row of a dirty file, as a wfile (NULL: out of memory). */
static struct cache_wfile *row_wfile(struct cache_wb *wb, sqlite3_stmt *s,
				     uint64_t id)
{
	struct cache_wfile *w = calloc(1, sizeof(*w));
	const char *key = (const char *)sqlite3_column_text(s, 1);
	const char *etag = (const char *)sqlite3_column_text(s, 9), *boot;

	if (!w)
		return NULL;
	w->c = wb->c;
	w->fd = -1;
	w->id = id;
	w->key = strdup(key ? key : "?");
	w->a.kind = (enum cache_wkind)sqlite3_column_int(s, 2);
	w->a.mode = (uint32_t)sqlite3_column_int64(s, 3);
	w->a.uid = (uint32_t)sqlite3_column_int64(s, 4);
	w->a.gid = (uint32_t)sqlite3_column_int64(s, 5);
	w->a.mtime_ns = sqlite3_column_int64(s, 6);
	w->a.size = (uint64_t)sqlite3_column_int64(s, 7);
	w->in_bucket = sqlite3_column_int(s, 8);
	snprintf(w->base_etag, sizeof(w->base_etag), "%s", etag ? etag : "");
	if (sqlite3_column_bytes(s, 11) > 0)
		cache_wb_unpack(w, sqlite3_column_blob(s, 11),
				(size_t)sqlite3_column_bytes(s, 11));
	w->seq = (uint64_t)sqlite3_column_int64(s, 12);
	w->changing = sqlite3_column_int(s, 13);
	boot = (const char *)sqlite3_column_text(s, 14);
	w->other_boot = !boot || !wb->boot[0] || strcmp(boot, wb->boot);
	w->row_uploaded = sqlite3_column_bytes(s, 15) > 0;
	if (!w->key) {
		wfile_free(w);
		return NULL;
	}
	return w;
}

/* Removes old, a dirty file replayed for by's key but committed before
 * it (not uploaded: by is the later version). */
static void superseded(struct cache_wb *wb, struct cache_wfile *old,
		       const struct cache_wfile *by)
{
	char path[64];

	cache_log("write-back: %s: dirty/%016" PRIx64 " was committed before "
		  "dirty/%016" PRIx64 ", the file now at that name (a rename "
		  "or upload that fmfs's stop left half done); the older one "
		  "is removed", by->key, old->id, by->id);
	cache_wb_dirty_path(old->id, path, sizeof(path));
	unlinkat(wb->c->dirfd, path, 0);
	cache_wb_meta_remove(wb, old->id);
	cache_wb_db_del(wb, old->id);
}

/*
 * Replays dirty file id from its row r (NULL if it has none; queued: the
 * row says committed) and its DIR/dirty/ID.meta; takes r.  A committed
 * file goes back in the table: to be uploaded as it stands (it was being
 * changed at the stop), to be checked against its sums first, or as
 * damaged (never uploaded, reported).  One never committed goes to
 * lost+found; one whose bytes are gone is reported.
 */
static void replay_one(struct cache_wb *wb, uint64_t id,
		       struct cache_wfile *r, bool queued, uint64_t *charge)
{
	struct cache *c = wb->c;
	struct cache_wfile *s = calloc(1, sizeof(*s)), *w;
	char path[64], why[600] = "", to[1300];
	bool had_row = r != NULL, committed, have_s, from_s;
	const char *key;
	struct stat sb;
	int src, fd;

	if (!s) {
		if (r)
			wfile_free(r);
		return;
	}
	s->c = c;
	s->fd = -1;
	src = cache_wb_meta_read(wb, id, s, why, sizeof(why));
	have_s = src == 0;
	from_s = have_s && (!r || s->seq >= r->seq);
	key = from_s ? s->key : r ? r->key : "?";
	cache_wb_dirty_path(id, path, sizeof(path));
	fd = openat(c->dirfd, path, O_RDWR | O_CLOEXEC);
	if (r && r->row_uploaded && (!have_s || s->seq <= r->seq)) {
		/* Uploaded as it stands; the stop came while it moved into
		 * the read cache (try_clean): the bucket has it, so nothing
		 * was lost, and what is left of it here just goes. */
		if (fd >= 0)
			unlinkat(c->dirfd, path, 0);
		cache_wb_meta_remove(wb, id);
		cache_wb_db_del(wb, id);
		cache_log("write-back: %s had been uploaded when fmfs stopped "
			  "(it was moving into the read cache): nothing to "
			  "do", key);
		goto out;
	}
	/* A .meta is written only by a commit: one that is damaged, under
	 * a row that says "never closed" (a row rolled back by damage to
	 * the WAL), is a committed file held as damaged, not lost+found
	 * (46-mount-damage, seed 1074074272 f214). */
	committed = (r && queued) || have_s || (r && src == -EBADMSG);
	if (!committed) {
		if (fd >= 0 && !r && src == -ENOENT && !fstat(fd, &sb) &&
		    !sb.st_size) {
			unlinkat(c->dirfd, path, 0); /* made just before a crash */
		} else if (fd >= 0 && r) {
			lost_found(wb, id, key);
		} else if (fd >= 0 && src == -ENOENT) {
			/* Neither row nor .meta: closed or not, nobody knows,
			 * nor its name (both lost, or a power cut before the
			 * row was written).  It stays and is named. */
			lost_add(wb, "%s/%s: a dirty file not yet uploaded "
				 "whose name is unknown (no row in "
				 "writeback.sqlite and no .meta); it is not "
				 "uploaded: copy its bytes out, then remove it",
				 c->cfg.dir, path);
			goto out;
		} else if (fd >= 0) {
			/* No row and a damaged .meta: committed or not, nobody
			 * knows, nor its name.  Both stay where they are, and
			 * every mount says so, until someone acts. */
			lost_add(wb, "%s/%s: a dirty file not yet uploaded "
				 "whose name is unknown (no row in "
				 "writeback.sqlite, and %s); it is not "
				 "uploaded: copy its bytes out, then remove it "
				 "and its .meta", c->cfg.dir, path, why);
			goto out;
		}
		if (src == -EBADMSG && fd < 0 && !r) {
			/* A .meta is written only by a commit: a file was
			 * acknowledged here, and its bytes, its row and its
			 * name are gone.  The .meta stays, so that every mount
			 * (the mount's own check opens the cache first) says
			 * so until someone removes it (46-mount-damage, seed
			 * 1338817807 f195). */
			lost_add(wb, "%s/%s: a dirty file not yet uploaded is "
				 "gone, with its row in writeback.sqlite, and "
				 "its .meta is damaged (%s): what was written to "
				 "it through the mount was lost before it was "
				 "uploaded, under a name nobody knows (remove "
				 "%s/%s%s to stop this message)", c->cfg.dir,
				 path, why, c->cfg.dir, path,
				 CACHE_WB_META_SUFFIX);
			goto out;
		}
		if (src == -EBADMSG)
			move_aside(wb, id, key, CACHE_WB_META_SUFFIX, to,
				   sizeof(to));
		if (r)
			cache_wb_db_del(wb, id);
		goto out;
	}
	if (fd < 0) {
		lost_version(wb, key, from_s ? s->base_etag : r->base_etag);
		/* The .meta stays, and while it is damaged so does the row:
		 * every mount says so until the .meta is removed. */
		if (src == -ENOENT)
			/* Its row is all that is left: kept (every mount
			 * says so) until a flush --wait or umount has named
			 * it (cache_w_flush), not dropped here: the mount's
			 * own check opens the cache before the daemon does
			 * (46-mount-damage, seed 977836433 f145). */
			lost_add_row(wb, r && !have_s ? id : 0,
				     "%s: its dirty file %s/%s is gone (%s): "
				     "what was written to it through the "
				     "mount was lost before it was uploaded",
				     key, c->cfg.dir, path, strerror(errno));
		else
			lost_add(wb, "%s: its dirty file %s/%s is gone (%s): "
				 "what was written to it through the mount "
				 "was lost before it was uploaded (remove "
				 "%s/%s%s to stop this message)", key,
				 c->cfg.dir, path, strerror(errno), c->cfg.dir,
				 path, CACHE_WB_META_SUFFIX);
		if (r && have_s)
			cache_wb_db_del(wb, id);
		goto out;
	}
	if (from_s) {
		s->changing = r && r->changing && r->seq == s->seq;
		w = s, s = NULL;
	} else {
		w = r, r = NULL;
	}
	w->fd = fd;
	fd = -1;
	w->gen = w->queued_gen = 1;
	w->queued_ms = util_now_ms(); /* or earlier: not known */
	w->committed = true;
	if (fstat(w->fd, &sb))
		sb.st_size = 0;
	if ((w->changing || (from_s && !w->sums_ok)) &&
	    (r ? r->other_boot : !had_row || w->other_boot)) {
		/* Being changed at the stop, and the system has booted since
		 * (or nobody knows): a power cut may have torn what the page
		 * cache had not written, and nothing can tell. */
		cache_wb_damaged(wb, w, "was open for writing when fmfs "
				 "stopped, and the system has restarted "
				 "since: a power cut may have left it torn");
	} else if (w->changing || (from_s && !w->sums_ok) ||
		   (!have_s && wb->db_version < WB_DB_VERSION)) {
		/* Being changed at the stop, or left by an older fmfs: as it
		 * stands (docs/semantics.md), unchecked. */
		w->changing = true;
	} else if (!from_s && !w->a.size && !sb.st_size) {
		/* Empty, as its row says: nothing to check (a directory
		 * marker, a file created empty).  A torn .meta is rewritten. */
		w->sums_ok = true;
		if (!have_s)
			cache_wb_meta_write(wb, w, false);
	} else if (!from_s) {
		if (have_s)
			cache_wb_damaged(wb, w, "has checksums in %016" PRIx64
					 ".meta older than its last close", id);
		else
			cache_wb_damaged(wb, w, "has no usable checksums (%s)",
					 why);
	} else if ((uint64_t)sb.st_size != w->a.size) {
		cache_wb_damaged(wb, w, "is %lld bytes where its last close "
				 "left %" PRIu64, (long long)sb.st_size,
				 w->a.size);
	} else {
		w->sums_gen = 1; /* checked before it is read or uploaded */
	}
	if (!w->sums_gen) {
		/* Nothing to check against: the next commit sums it all. */
		w->a.size = (uint64_t)sb.st_size;
		w->checked = true;
		w->ext_seen = true;
		cache_wb_sums_resize(w, w->a.size);
	}
	w->charged = (uint64_t)sb.st_size;
	if (w->seq > wb->seq_top)
		wb->seq_top = w->seq;
	for (struct cache_wfile *o = wb->tab[wb_hash(w->key)]; o; o = o->hnext) {
		if (strcmp(o->key, w->key))
			continue;
		/* Two dirty files for one key: a rename over a dirty file,
		 * or a removal after an upload, that the stop left half
		 * done.  The later commit wins. */
		if (o->seq > w->seq) {
			superseded(wb, w, o);
			wfile_free(w);
			goto out;
		}
		cache_wb_take_out(wb, o);
		*charge -= o->charged;
		superseded(wb, o, w);
		wfile_free(o);
		break;
	}
	*charge += w->charged;
	insert(wb, w);
	if (from_s && (!had_row || !queued)) {
		wb->rebuilt++;
		cache_log("write-back: %s re-queued from %s/dirty/%016" PRIx64
			  ".meta (writeback.sqlite had %s)", w->key,
			  c->cfg.dir, id, had_row ? "an older row" :
			  "no row for it");
	}
	if (from_s)
		cache_wb_db_put(wb, w, true);
out:
	if (fd >= 0)
		close(fd);
	if (s)
		wfile_free(s);
	if (r)
		wfile_free(r);
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Files in dirty/ that have no row: .meta files of committed files whose
 * row is gone (writeback.sqlite lost, or its -wal), files created just
 * before a crash, debris of a .meta being written. */
static void replay_dir(struct cache_wb *wb, uint64_t *done, size_t ndone,
		       uint64_t *charge)
{
	int fd = openat(wb->c->dirfd, "dirty", O_RDONLY | O_DIRECTORY |
			O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (ndone)
		qsort(done, ndone, sizeof(*done), id_cmp);
	while ((de = readdir(d))) {
		char *end, data[64];
		uint64_t id = strtoull(de->d_name, &end, 16);

		if (de->d_name[0] == '.' || end == de->d_name)
			continue;
		if (!strcmp(end, CACHE_WB_META_SUFFIX ".tmp")) {
			unlinkat(fd, de->d_name, 0);
			continue;
		}
		if (*end && strcmp(end, CACHE_WB_META_SUFFIX))
			continue;
		snprintf(data, sizeof(data), "%016" PRIx64, id);
		/* a .meta with its data file: handled with the file */
		if (*end && !faccessat(fd, data, F_OK, 0))
			continue;
		if (ndone && bsearch(&id, done, ndone, sizeof(*done), id_cmp))
			continue;
		if (id >= wb->next_id)
			wb->next_id = id + 1;
		replay_one(wb, id, NULL, false, charge);
	}
	closedir(d);
}

static int load_rows(struct cache_wb *wb)
{
	struct cache *c = wb->c;
	sqlite3_stmt *s;
	uint64_t charge_total = 0, *done = NULL;
	size_t ndone = 0, cap = 0;
	int rc;

	rc = sqlite3_prepare_v2(wb->db, "SELECT id, key, kind, mode, uid, "
				"gid, mtime_ns, size, in_bucket, base_etag, "
				"queued, meta, seq, changing, boot, uploaded "
				"FROM files "
				"ORDER BY id", -1, &s, NULL);
	if (rc != SQLITE_OK)
		return -EIO;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		uint64_t id = (uint64_t)sqlite3_column_int64(s, 0);
		struct cache_wfile *r = row_wfile(wb, s, id);

		if (id >= wb->next_id)
			wb->next_id = id + 1;
		if (ndone == cap) {
			uint64_t *d = realloc(done, (cap ? cap * 2 : 64) *
					      sizeof(*d));

			if (!d) {
				rc = SQLITE_NOMEM;
				if (r)
					wfile_free(r);
				break;
			}
			done = d;
			cap = cap ? cap * 2 : 64;
		}
		done[ndone++] = id;
		if (r)
			replay_one(wb, id, r, sqlite3_column_int(s, 10),
				   &charge_total);
	}
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE) {
		free(done);
		return -EIO;
	}
	replay_dir(wb, done, ndone, &charge_total);
	free(done);
	rc = sqlite3_prepare_v2(wb->db, "SELECT key FROM deletes", -1, &s,
				NULL);
	if (rc != SQLITE_OK)
		return -EIO;
	while (sqlite3_step(s) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(s, 0);
		struct cache_wb_tomb *t;
		uint32_t h;

		if (!key || !(t = calloc(1, sizeof(*t) + strlen(key) + 1)))
			continue;
		strcpy(t->key, key);
		h = wb_hash(key);
		t->next = wb->tombs[h];
		wb->tombs[h] = t;
		wb->ntombs++;
	}
	sqlite3_finalize(s);
	/* Already on the disk: charged even above the cap. */
	pthread_mutex_lock(&c->lock);
	c->used_bytes += charge_total;
	atomic_fetch_add(&c->dirty_bytes, charge_total);
	pthread_mutex_unlock(&c->lock);
	if (wb->nfiles || wb->ntombs)
		cache_log("write-back: %" PRIu64 " files and %" PRIu64
			  " deletions from before are queued", wb->nfiles,
			  wb->ntombs);
	if (wb->rebuilt)
		cache_log("write-back: %" PRIu64 " files were missing from "
			  "%s/writeback.sqlite (lost or rolled back) and were "
			  "re-queued from their .meta files in dirty/; "
			  "deletions it held, if any, are not known any more",
			  wb->rebuilt, c->cfg.dir);
	return 0;
}

/* This boot's id: the kernel's random boot_id, or FMFS_BOOT_ID (tests
 * that simulate a power cut set it to stand for a reboot); "" if none. */
static void boot_id(char *out, size_t len)
{
	const char *env = getenv("FMFS_BOOT_ID");
	ssize_t n = 0;
	int fd;

	out[0] = '\0';
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return;
	}
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = util_read_all(fd, out, len - 1);
		close(fd);
	}
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

int cache_wb_open(struct cache *c, char *msg, size_t ml)
{
	struct cache_wb *wb = calloc(1, sizeof(*wb));
	int rc = 0;

	if (!wb) {
		snprintf(msg, ml, "cache: out of memory");
		return -ENOMEM;
	}
	wb->c = c;
	wb->next_id = 1;
	pthread_mutex_init(&wb->lock, NULL);
	util_cond_init(&wb->cond);
	c->wb = wb;
	if (!mkdirat(c->dirfd, "dirty", 0700))
		rc = util_fsync_at(c->dirfd, ".");
	else if (errno != EEXIST)
		rc = -errno;
	if (rc) {
		snprintf(msg, ml, "cannot create %s/dirty: %s", c->cfg.dir,
			 strerror(-rc));
		return rc;
	}
	wb->dirty_fd = openat(c->dirfd, "dirty", O_RDONLY | O_DIRECTORY |
			      O_CLOEXEC);
	boot_id(wb->boot, sizeof(wb->boot));
	rc = db_open(wb, msg, ml);
	if (!rc && (rc = load_rows(wb)))
		snprintf(msg, ml, "write-back store %s/writeback.sqlite "
			 "cannot be read: %s", c->cfg.dir,
			 sqlite3_errmsg(wb->db));
	if (!rc && wb->db_version < WB_DB_VERSION &&
	    sqlite3_exec(wb->db, "PRAGMA user_version=2", NULL, NULL,
			 NULL) == SQLITE_OK)
		wb->db_version = WB_DB_VERSION;
	return rc;
}

/* ---- tombstones ---- */

void cache_wb_tomb_put(struct cache_wb *wb, const char *key, bool held)
{
	struct cache_wb_tomb *t = cache_wb_tomb_find(wb, key);
	uint32_t h;

	util_debug_assert_locked(&wb->lock);
	if (t) {
		t->held += held;
		return;
	}
	t = calloc(1, sizeof(*t) + strlen(key) + 1);
	if (!t) {
		cache_wb_log_err(wb, "out of memory: %s will not be deleted in the "
			   "bucket", key);
		return;
	}
	strcpy(t->key, key);
	t->held = held;
	h = wb_hash(key);
	t->next = wb->tombs[h];
	wb->tombs[h] = t;
	wb->ntombs++;
	db_tomb(wb, key, true);
	pthread_cond_broadcast(&wb->cond);
}

bool cache_wb_tomb_shadowed(struct cache_wb *wb,
			    const struct cache_wb_tomb *t)
{
	return wb->nfiles && cache_wb_find(wb, t->key);
}

void cache_wb_tomb_drop(struct cache_wb *wb, const char *key)
{
	util_debug_assert_locked(&wb->lock);
	for (struct cache_wb_tomb **pp = &wb->tombs[wb_hash(key)]; *pp;
	     pp = &(*pp)->next)
		if (!strcmp((*pp)->key, key)) {
			struct cache_wb_tomb *t = *pp;

			if (t->running)
				return; /* the DELETE is out: let it land */
			*pp = t->next;
			wb->ntombs--;
			db_tomb(wb, key, false); /* key may be t->key */
			free(t);
			return;
		}
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
			wfile_free(w);
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

	insert(wb, w);
	/* The upload will overwrite the old object; until then the
	 * bucket has it, so an unlink or rename must delete it.  A pending
	 * DELETE of the name stays, shadowed by w, until w's upload lands
	 * (cache_wb_tomb_shadowed): a crash before then must not bring
	 * the old object back. */
	if (wb->ntombs && cache_wb_tomb_find(wb, w->key))
		w->in_bucket = true;
	if (wb->nlostv)
		lost_version_forget(wb, w->key);
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
		wfile_free(w);
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
		wfile_free(w);
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
		wfile_free(w);
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
		rc = db_sync(wb);
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
		wfile_free(w);
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
	wfile_free(w);
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
		rc = cache_wb_meta_write(wb, w, durable);
		if (!rc)
			rc = cache_wb_db_put(wb, w, true);
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
		rc = cache_wb_meta_write(wb, w, durable);
		if (!rc)
			rc = cache_wb_db_put(wb, w, true);
	} else if (durable && w->in_table && w->committed &&
		   !w->meta_durable) {
		/* Committed by a close, unchanged since: an fsync must still
		 * make the .meta and the file's name in dirty/ durable, or
		 * a power cut can lose the file it acknowledged (68, seed
		 * 241188455 trial 6, --meta dirsync). */
		rc = cache_wb_meta_write(wb, w, true);
	}
	if (!rc && durable)
		rc = db_sync(wb);
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

int cache_wb_db_sync(struct cache_wb *wb)
{
	util_debug_assert_locked(&wb->lock);
	return db_sync(wb);
}

/* ---- namespace ---- */

/* Drops w from the table (wb->lock held): its file goes, open handles
 * keep the descriptor.  Returns w when nothing references it any more:
 * the caller frees it once the lock is dropped. */
static struct cache_wfile *drop_locked(struct cache_wb *wb,
				       struct cache_wfile *w)
{
	char path[64];

	cache_wb_take_out(wb, w);
	w->deleted = true;
	cache_wb_db_del(wb, w->id);
	cache_wb_dirty_path(w->id, path, sizeof(path));
	unlinkat(wb->c->dirfd, path, 0);
	cache_wb_meta_remove(wb, w->id);
	pthread_cond_broadcast(&wb->cond);
	return w->refs ? NULL : w;
}

int cache_w_unlink(struct cache *c, const char *key, bool in_bucket,
		   bool held)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w, *free_me = NULL;
	int rc = -ENOENT;

	pthread_mutex_lock(&wb->lock);
	w = cache_wb_find(wb, key);
	if (w) {
		in_bucket |= w->in_bucket;
		free_me = drop_locked(wb, w);
		rc = 0;
	}
	if (in_bucket) {
		cache_wb_tomb_put(wb, key, held);
		rc = 0;
	}
	if (wb->nlostv)
		lost_version_forget(wb, key);
	pthread_mutex_unlock(&wb->lock);
	if (free_me) {
		cache_wb_uncharge(c, free_me->charged);
		wfile_free(free_me);
	}
	return rc;
}

/* Drops key's dirty file without a DELETE: the bucket has what replaces
 * it (wb->lock not held). */
void cache_wb_forget(struct cache *c, const char *key)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w, *free_me = NULL;

	pthread_mutex_lock(&wb->lock);
	w = cache_wb_find(wb, key);
	if (w)
		free_me = drop_locked(wb, w);
	pthread_mutex_unlock(&wb->lock);
	if (w) /* durably: a power cut must not bring the old bytes back */
		fsync(wb->dirty_fd);
	if (free_me) {
		cache_wb_uncharge(c, free_me->charged);
		wfile_free(free_me);
	}
}

int cache_w_rename(struct cache *c, const char *from, const char *to,
		   bool from_in_bucket, bool to_in_bucket)
{
	struct cache_wb *wb = c->wb;
	struct cache_wfile *w, *old, *free_me = NULL;
	char *nk = strdup(to);
	int rc = 0;

	if (!nk)
		return -ENOMEM;
	pthread_mutex_lock(&wb->lock);
	w = cache_wb_find(wb, from);
	if (!w) {
		rc = -ENOENT;
		goto out;
	}
	old = cache_wb_find(wb, to);
	if (old == w)
		old = NULL;
	if (old)
		to_in_bucket |= old->in_bucket;
	cache_wb_take_out(wb, w);
	if (w->in_bucket || from_in_bucket)
		cache_wb_tomb_put(wb, from, false);
	free(w->key);
	w->key = nk;
	nk = NULL;
	w->in_bucket = to_in_bucket; /* an unlink must delete that one */
	w->base_etag[0] = '\0';
	insert(wb, w);
	if (wb->nlostv)
		lost_version_forget(wb, to);
	/* A pending DELETE of to stays, shadowed by w, until w's upload
	 * lands (cache_wb_tomb_shadowed). */
	w->gen++;
	w->a.ctime_ns = util_wall_ns(); /* as a local disk does */
	if (w->committed) { /* queued: restart the delay under the name */
		if (!w->queued_ms)
			w->queued_ms = util_now_ms();
		w->queued_gen = w->gen;
		w->not_before_ms = (int64_t)util_now_ms() + wb->cfg.async_delay_ms;
	}
	if (w->committed || (old && old->committed)) {
		/* Replacing a file whose bytes may be acknowledged: w's bytes
		 * and .meta reach the disk before the old file goes, so a
		 * power cut leaves one or the other (as ext4 does for a
		 * rename over a file).  Also when w is still being written:
		 * its .meta then says so (no complete sums), and the replay
		 * holds or uploads it as it stands; without it a power cut
		 * left the old file gone and w under its old name
		 * (68-mount-powerloss, seed 134699372 trial 1). */
		bool replace = old && old->committed;

		w->seq = ++wb->seq_top;
		if (replace && w->fd >= 0 && fdatasync(w->fd))
			rc = -errno;
		if (!rc)
			rc = cache_wb_meta_write(wb, w, replace);
	}
	if (!rc)
		rc = cache_wb_db_put(wb, w, w->committed);
	/* And the row that names w to, synced: w's .meta is rewritten, not
	 * synced, at its next commit, and a power cut can leave that one
	 * empty; the row must not name w's old key then, with the old file
	 * at to gone (68-mount-powerloss, seed 134699372 trial 1). */
	if (!rc && old && old->committed)
		rc = db_sync(wb);
	/* The old file at to goes after w's .meta names to: a power cut in
	 * between leaves both, and the replay keeps the later commit. */
	if (old)
		free_me = drop_locked(wb, old);
	pthread_cond_broadcast(&wb->cond);
out:
	pthread_mutex_unlock(&wb->lock);
	free(nk);
	if (free_me) {
		cache_wb_uncharge(c, free_me->charged);
		wfile_free(free_me);
	}
	return rc;
}

int cache_w_tombstone(struct cache *c, const char *key, bool held)
{
	struct cache_wb *wb = c->wb;

	pthread_mutex_lock(&wb->lock);
	cache_wb_tomb_put(wb, key, held);
	if (wb->nlostv)
		lost_version_forget(wb, key);
	pthread_mutex_unlock(&wb->lock);
	return 0;
}

void cache_w_release(struct cache *c, const char *key)
{
	struct cache_wb *wb = c->wb;
	struct cache_wb_tomb *t;

	pthread_mutex_lock(&wb->lock);
	t = cache_wb_tomb_find(wb, key);
	if (t && t->held) {
		t->held--;
		pthread_cond_broadcast(&wb->cond);
	}
	pthread_mutex_unlock(&wb->lock);
}

bool cache_w_tombstoned(struct cache *c, const char *key)
{
	struct cache_wb *wb = c->wb;
	bool r;

	pthread_mutex_lock(&wb->lock);
	r = wb->ntombs && cache_wb_tomb_find(wb, key) &&
	    !cache_wb_find(wb, key);
	pthread_mutex_unlock(&wb->lock);
	return r;
}

size_t cache_w_list(struct cache *c, const char *prefix,
		    void (*fn)(void *arg, const char *key,
			       const struct cache_wattr *a),
		    void *arg)
{
	struct cache_wb *wb = c->wb;
	size_t pl = strlen(prefix), n = 0;

	pthread_mutex_lock(&wb->lock);
	for (size_t h = 0; (wb->nfiles || wb->ntombs) && h < CACHE_WB_HASH; h++) {
		for (struct cache_wfile *w = wb->tab[h]; w; w = w->hnext)
			if (!strncmp(w->key, prefix, pl)) {
				/* a listing's sizes reach the kernel too */
				cache_wb_sync_external(w, false);
				if (fn)
					fn(arg, w->key, &w->a);
				n++;
			}
		for (struct cache_wb_tomb *t = wb->tombs[h]; t; t = t->next)
			if (!strncmp(t->key, prefix, pl) &&
			    !cache_wb_tomb_shadowed(wb, t)) {
				if (fn)
					fn(arg, t->key, NULL);
				n++;
			}
	}
	pthread_mutex_unlock(&wb->lock);
	return n;
}
