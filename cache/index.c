/* SPDX-License-Identifier: MIT */
/*
 * index.c - the cache's persistent index: DIR/index.sqlite in WAL mode,
 * loaded into memory when the cache opens and written back by a flusher
 * thread, about once a second and at close, one transaction each time.
 * Hot paths never see SQL: they mark an object dirty (a list under a
 * leaf lock) and the flusher copies the changed state out under the
 * locks, then writes it with no lock held.
 *
 * Schema (docs/cache-format.md has the full description):
 *
 *   meta(name, value)        format, store_id, block_bytes, chunk_blocks
 *   objects(id, key, etag, size, atime_ns, cached_bytes)
 *   blocks(id, chunk, present, crc)   one row per 1024 blocks of an object
 *   attrs(key, etag, has, mode, uid, gid, mtime_ns, ctime_ns, atime_ns,
 *         rdev)              the attributes stored with an object, once
 *                            learned (cache_attr_*)
 *   listings(dir, fetched_ms, used_ms, entries, bytes), listing_data(id,
 *         data)              directory listings the fs packed (listing.c)
 *
 * Why chunks of 1024 blocks rather than a row per block or one BLOB per
 * object: a row per block makes the index a million rows per TiB cached
 * and a flush of a sequential read thousands of row writes; one BLOB per
 * object rewrites the CRCs of a whole 1 TiB object (4 MiB) every second
 * while it streams in.  A chunk row is at most 4 KiB of CRCs plus a
 * 128-byte presence bitmap, so a flush writes only what changed, in
 * pieces SQLite stores in a page or two, and loading stays one scan.
 *
 * A damaged index (not a database, corrupt pages, an older format, not
 * ours) is moved aside as index.sqlite.bad-TIME and the cache starts
 * empty: it is only a cache, and the files it listed are removed as
 * orphans.  A cache dir of another store or block size, or of a newer
 * format, is refused with a message instead: that is a user's mistake
 * and the data may still be wanted.
 *
 * Attributes are not loaded at open: a bucket has far more keys than the
 * cache holds objects, so they are looked up one key at a time (the
 * primary key's B-tree, a few microseconds) when the fs meets a name.
 * Changes wait in a small table in memory (seen by lookups at once) and
 * go to the index in the flusher's transaction.  A damaged index moved
 * aside takes them along: the fs then shows its conservative defaults
 * until it learns them again.
 *
 * Crash safety needs no ordering between index and data: a block the
 * index lists is checked against its CRC32C before it is first served
 * (ensure.c), and a block written but not yet listed is fetched again.
 */
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

/* An attribute change not yet in the index. */
struct attr_pend {
	struct attr_pend *next;
	uint64_t seq;               /* a flush removes it only if unchanged */
	bool del;                   /* forget the row */
	struct cache_attr a;
	char key[];
};

#define ATTR_BUCKETS 4096u

struct cache_index {
	sqlite3 *db;
	char path[PATH_MAX];
	sqlite3_stmt *upsert_obj, *del_obj, *del_blocks;
	sqlite3_stmt *put_chunk, *del_chunk, *set_atime;
	sqlite3_stmt *get_attr, *put_attr, *del_attr;
	pthread_mutex_t alock;      /* protects apend, napend, aseq and the
	                             * get_attr statement (a leaf) */
	struct attr_pend *apend[ATTR_BUCKETS];
	size_t napend;
	uint64_t aseq;
	pthread_mutex_t flush_lock; /* one flush at a time */
	pthread_mutex_t lock;       /* protects stop; cond wakes the flusher */
	pthread_cond_t cond;
	bool stop, started;
	pthread_t thread;
	bool failing;               /* the last write failed (flush_lock) */
	_Atomic uint64_t flushes;   /* flushes ended without an error */
};

/* The BLOBs (up to megabytes) in a table of their own, keyed by the
 * listings row's rowid: a stale mark or a touch rewrites a small row,
 * never the BLOB (an UPDATE rewrites the whole record). */
#define LISTINGS_SQL                                                     \
	"CREATE TABLE IF NOT EXISTS listings(dir TEXT NOT NULL UNIQUE,"  \
	" fetched_ms INTEGER NOT NULL, used_ms INTEGER NOT NULL,"         \
	" entries INTEGER NOT NULL, bytes INTEGER NOT NULL);"            \
	"CREATE INDEX IF NOT EXISTS listings_used ON listings(used_ms);"  \
	"CREATE TABLE IF NOT EXISTS listing_data(id INTEGER PRIMARY KEY," \
	" data BLOB NOT NULL);"

static const char *const schema_sql =
	"CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
	" WITHOUT ROWID;"
	"CREATE TABLE objects(id INTEGER PRIMARY KEY, key TEXT NOT NULL,"
	" etag TEXT NOT NULL, size INTEGER NOT NULL,"
	" atime_ns INTEGER NOT NULL, cached_bytes INTEGER NOT NULL);"
	"CREATE TABLE blocks(id INTEGER NOT NULL, chunk INTEGER NOT NULL,"
	" present BLOB NOT NULL, crc BLOB NOT NULL, PRIMARY KEY(id, chunk))"
	" WITHOUT ROWID;"
	"CREATE TABLE attrs(key TEXT PRIMARY KEY, etag TEXT NOT NULL,"
	" has INTEGER NOT NULL, mode INTEGER NOT NULL, uid INTEGER NOT NULL,"
	" gid INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
	" ctime_ns INTEGER NOT NULL DEFAULT 0, atime_ns INTEGER NOT NULL"
	" DEFAULT 0, rdev INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
	LISTINGS_SQL;

/* Format 1 to 2: the attrs table (nothing else changed). */
static const char *const upgrade1_sql =
	"BEGIN;"
	"CREATE TABLE IF NOT EXISTS attrs(key TEXT PRIMARY KEY,"
	" etag TEXT NOT NULL, has INTEGER NOT NULL, mode INTEGER NOT NULL,"
	" uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
	" mtime_ns INTEGER NOT NULL) WITHOUT ROWID;"
	"UPDATE meta SET value='2' WHERE name='format';"
	"COMMIT;";

/* Format 2 to 3: ctime, atime and rdev in attrs. */
static const char *const upgrade2_sql =
	"BEGIN;"
	"ALTER TABLE attrs ADD COLUMN ctime_ns INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE attrs ADD COLUMN atime_ns INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE attrs ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0;"
	"UPDATE meta SET value='3' WHERE name='format';"
	"COMMIT;";

/* Format 3 to 4: the listings table. */
static const char *const upgrade3_sql =
	"BEGIN;"
	LISTINGS_SQL
	"UPDATE meta SET value='4' WHERE name='format';"
	"COMMIT;";

/* ---- errors: damaged (-EBADMSG, start over) or fatal (message) ---- */

struct open_err {
	char *msg;
	size_t ml;
	char why[256];              /* for -EBADMSG: what is wrong */
};

static int db_fail(struct cache_index *x, int src, const char *what,
		   struct open_err *e)
{
	int prim = src & 0xff;

	if (prim == SQLITE_CORRUPT || prim == SQLITE_NOTADB ||
	    prim == SQLITE_FORMAT) {
		snprintf(e->why, sizeof(e->why), "%s: %s", what,
			 x->db ? sqlite3_errmsg(x->db) : sqlite3_errstr(src));
		return -EBADMSG;
	}
	/* A table or column gone (dropped by hand, or a partial copy): the
	 * index is only a cache, so it starts over, as for other damage. */
	if (prim == SQLITE_ERROR && x->db &&
	    (strstr(sqlite3_errmsg(x->db), "no such table") ||
	     strstr(sqlite3_errmsg(x->db), "no such column"))) {
		snprintf(e->why, sizeof(e->why), "%s: %s: a part of its "
			 "schema is missing", what, sqlite3_errmsg(x->db));
		return -EBADMSG;
	}
	snprintf(e->msg, e->ml, "cache index %s: %s: %s", x->path, what,
		 x->db ? sqlite3_errmsg(x->db) : sqlite3_errstr(src));
	return -EIO;
}

static int damaged(struct open_err *e, const char *why)
{
	snprintf(e->why, sizeof(e->why), "%s", why);
	return -EBADMSG;
}

/* Runs a statement whose first column of the first row is wanted as
 * text (NULL sql result: empty). */
static int query_text(struct cache_index *x, const char *sql,
		      const char *arg, char *out, size_t len)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(x->db, sql, -1, &st, NULL);

	out[0] = '\0';
	if (rc != SQLITE_OK)
		return rc;
	if (arg)
		sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(st, 0);

		snprintf(out, len, "%s", t ? (const char *)t : "");
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_NOTFOUND;
	}
	sqlite3_finalize(st);
	return rc;
}

/* ---- identity ---- */

static int create_schema(struct cache *c, struct cache_index *x,
			 struct open_err *e)
{
	char *sql;
	int rc;

	sql = sqlite3_mprintf("BEGIN;%s INSERT INTO meta VALUES"
			      "('format','%d'),('store_id',%Q),"
			      "('block_bytes','%u'),('chunk_blocks','%u');"
			      "COMMIT;", schema_sql, CACHE_FORMAT_VERSION,
			      c->cfg.store_id, c->cfg.block_bytes,
			      CACHE_CHUNK_BLOCKS);
	if (!sql) {
		snprintf(e->msg, e->ml, "cache index: out of memory");
		return -ENOMEM;
	}
	rc = sqlite3_exec(x->db, sql, NULL, NULL, NULL);
	sqlite3_free(sql);
	if (rc != SQLITE_OK) {
		sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
		return db_fail(x, rc, "creating the tables", e);
	}
	return 0;
}

static int check_identity(struct cache *c, struct cache_index *x,
			  struct open_err *e)
{
	const char *dir = c->cfg.dir;
	char v[1100], *end;
	unsigned long long bb;
	long fmt;
	int rc;

	rc = query_text(x, "SELECT value FROM meta WHERE name=?", "format",
			v, sizeof(v));
	if (rc == SQLITE_NOTFOUND || (rc == SQLITE_ERROR &&
				      strstr(sqlite3_errmsg(x->db), "no such")))
		return damaged(e, "not an fmfs cache index");
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "reading the format", e);
	fmt = strtol(v, NULL, 10);
	if (fmt > CACHE_FORMAT_VERSION) {
		snprintf(e->msg, e->ml, "cache dir %s was written by a newer "
			 "fmfs (index format %ld; this one reads %d); use that "
			 "fmfs or another --cache-dir", dir, fmt,
			 CACHE_FORMAT_VERSION);
		return -EPROTO;
	}
	if (fmt == 1) {
		rc = sqlite3_exec(x->db, upgrade1_sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
			return db_fail(x, rc, "upgrading from format 1", e);
		}
		fmt = 2;
	}
	if (fmt == 2) {
		rc = sqlite3_exec(x->db, upgrade2_sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
			return db_fail(x, rc, "upgrading from format 2", e);
		}
		fmt = 3;
	}
	if (fmt == 3) {
		rc = sqlite3_exec(x->db, upgrade3_sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
			return db_fail(x, rc, "upgrading from format 3", e);
		}
		cache_log("index %s upgraded from format %s to %d (object "
			  "attributes, listings)", x->path, v,
			  CACHE_FORMAT_VERSION);
		fmt = CACHE_FORMAT_VERSION;
	}
	if (fmt < CACHE_FORMAT_VERSION)
		return damaged(e, "an older index format");
	rc = query_text(x, "SELECT value FROM meta WHERE name=?", "store_id",
			v, sizeof(v));
	if (rc != SQLITE_OK)
		return rc == SQLITE_NOTFOUND ? damaged(e, "no store_id") :
		       db_fail(x, rc, "reading the store id", e);
	if (strcmp(v, c->cfg.store_id)) {
		for (const char *p = v; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
				return damaged(e, "the store id is garbled");
		if (!strstr(v, "://"))
			return damaged(e, "the store id is garbled");
		snprintf(e->msg, e->ml, "cache dir %s belongs to %s (as its "
			 "index %s says); use another --cache-dir (this mount "
			 "is %s), or, if that is not a store you use, move "
			 "it aside (mv %s %s.bad) and mount again: the read "
			 "cache starts over, files not yet uploaded are kept",
			 dir, v, x->path, c->cfg.store_id, x->path, x->path);
		return -EEXIST;
	}
	rc = query_text(x, "SELECT value FROM meta WHERE name=?",
			"block_bytes", v, sizeof(v));
	if (rc != SQLITE_OK)
		return rc == SQLITE_NOTFOUND ? damaged(e, "no block size") :
		       db_fail(x, rc, "reading the block size", e);
	/* Block sizes fmfs writes are multiples of 4 KiB up to 64 MiB
	 * (config_apply in open.c); anything else is a damaged value, not a
	 * cache dir of another configuration. */
	bb = strtoull(v, &end, 10);
	if (end == v || *end || bb == 0 || bb % 4096 || bb > (64u << 20))
		return damaged(e, "the block size is garbled");
	if (bb != c->cfg.block_bytes) {
		snprintf(e->msg, e->ml, "cache dir %s uses %s-byte blocks, "
			 "not %u; use the same block size or another "
			 "--cache-dir", dir, v, c->cfg.block_bytes);
		return -EINVAL;
	}
	rc = query_text(x, "SELECT value FROM meta WHERE name=?",
			"chunk_blocks", v, sizeof(v));
	if (rc != SQLITE_OK || strtoul(v, NULL, 10) != CACHE_CHUNK_BLOCKS)
		return damaged(e, "unexpected chunk size");
	return 0;
}

/* ---- loading ---- */

static uint64_t le32_get(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void le32_put(unsigned char *p, uint32_t v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = v >> 24;
}

static uint32_t chunk_nblocks(const struct cache_file *f, uint32_t k)
{
	uint32_t first = k * CACHE_CHUNK_BLOCKS;
	uint32_t n = f->nblocks - first;

	return n < CACHE_CHUNK_BLOCKS ? n : CACHE_CHUNK_BLOCKS;
}

static uint32_t nchunks_of(const struct cache_file *f)
{
	return (f->nblocks + CACHE_CHUNK_BLOCKS - 1) / CACHE_CHUNK_BLOCKS;
}

struct loaded {
	struct cache_file **v;      /* sorted by id */
	size_t n, cap;
	unsigned bad;               /* rows we could not use */
};

static int id_find_cmp(const void *key, const void *elem)
{
	uint64_t id = *(const uint64_t *)key;
	const struct cache_file *f = *(struct cache_file *const *)elem;

	return (id > f->id) - (id < f->id);
}

static int load_objects(struct cache *c, struct cache_index *x,
			struct loaded *l, struct open_err *e)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(x->db, "SELECT id, key, etag, size, atime_ns"
				" FROM objects ORDER BY id", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "reading objects", e);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);
		const char *key = (const char *)sqlite3_column_text(st, 1);
		const char *etag = (const char *)sqlite3_column_text(st, 2);
		int64_t size = sqlite3_column_int64(st, 3);
		struct cache_file *f = NULL;

		if (id > 0 && key && *key && etag && size >= 0 &&
		    strlen(etag) < CACHE_ETAG_MAX && strlen(key) <= OBJ_KEY_MAX)
			f = cache_file_alloc(c, key, etag, (uint64_t)size,
					     (uint64_t)id);
		if (!f) {
			l->bad++; /* or out of memory: fetched again anyway */
			if (id > 0)
				cache_index_forget(c, (uint64_t)id);
			continue;
		}
		if (l->n == l->cap) {
			size_t cap = l->cap * 2 + 64;
			struct cache_file **v = realloc(l->v, cap * sizeof(*v));

			if (!v) {
				cache_file_free(f);
				sqlite3_finalize(st);
				snprintf(e->msg, e->ml, "cache index: out of "
					 "memory loading %s", x->path);
				return -ENOMEM;
			}
			l->v = v;
			l->cap = cap;
		}
		f->saved_atime_ns = sqlite3_column_int64(st, 4);
		atomic_store(&f->atime_ns, f->saved_atime_ns);
		l->v[l->n++] = f;
		if ((uint64_t)id >= c->next_id)
			c->next_id = (uint64_t)id + 1;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return db_fail(x, rc, "reading objects", e);
	return 0;
}

/* Applies one blocks row to f; false if the row does not fit it. */
static bool load_chunk(struct cache_file *f, uint32_t k,
		       const unsigned char *pres, int plen,
		       const unsigned char *crc, int clen)
{
	uint32_t nb;

	if (k >= nchunks_of(f))
		return false;
	nb = chunk_nblocks(f, k);
	if (!pres || !crc || plen != (int)((nb + 7) / 8) ||
	    clen != (int)(4 * nb)) {
		bit_set(f->dirty_chunks, k); /* rewrite it (as empty) */
		return false;
	}
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t b = k * CACHE_CHUNK_BLOCKS + i;

		if (!((pres[i / 8] >> (i % 8)) & 1))
			continue;
		bit_set(f->present, b);
		f->crc[b] = (uint32_t)le32_get(crc + 4 * i);
	}
	return true;
}

static int load_blocks(struct cache_index *x, struct loaded *l,
		       struct open_err *e)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(x->db, "SELECT id, chunk, present, crc FROM"
				" blocks ORDER BY id, chunk", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "reading blocks", e);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t id = (uint64_t)sqlite3_column_int64(st, 0);
		int64_t k = sqlite3_column_int64(st, 1);
		struct cache_file **fp;

		fp = l->n ? bsearch(&id, l->v, l->n, sizeof(*l->v),
				    id_find_cmp) : NULL;
		if (!fp || k < 0 || k > UINT32_MAX ||
		    !load_chunk(*fp, (uint32_t)k,
				sqlite3_column_blob(st, 2),
				sqlite3_column_bytes(st, 2),
				sqlite3_column_blob(st, 3),
				sqlite3_column_bytes(st, 3)))
			l->bad++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return db_fail(x, rc, "reading blocks", e);
	return 0;
}

/* Puts the loaded objects with cached blocks into the table, newest id
 * first so that of two rows of one key the newer wins; the rest are
 * forgotten (their files are removed as orphans). */
static void load_finish(struct cache *c, struct loaded *l)
{
	for (size_t i = l->n; i-- > 0;) {
		struct cache_file *f = l->v[i];
		uint64_t nb = 0;

		for (uint32_t b = 0; b < f->nblocks; b++)
			if (bit_test(f->present, b)) {
				f->cached_bytes += cache_block_len(f, b);
				nb++;
			}
		if (!nb || cache_table_find(c, f->key) ||
		    cache_table_insert(c, f)) {
			cache_index_forget(c, f->id);
			cache_file_free(f);
			continue;
		}
		c->used_bytes += f->cached_bytes;
		atomic_fetch_add(&c->blocks_present, nb);
		for (uint32_t k = 0; k < nchunks_of(f); k++)
			if (bit_test(f->dirty_chunks, k)) {
				cache_mark_dirty(f);
				break;
			}
	}
	l->n = 0;
}

static void loaded_free(struct loaded *l)
{
	for (size_t i = 0; i < l->n; i++)
		cache_file_free(l->v[i]);
	free(l->v);
}

/* ---- open ---- */

static int prepare_statements(struct cache_index *x, struct open_err *e)
{
	static const struct {
		size_t off;
		const char *sql;
	} stmts[] = {
		{ offsetof(struct cache_index, upsert_obj),
		  "INSERT INTO objects(id, key, etag, size, atime_ns,"
		  " cached_bytes) VALUES(?,?,?,?,?,?) ON CONFLICT(id) DO"
		  " UPDATE SET atime_ns=excluded.atime_ns,"
		  " cached_bytes=excluded.cached_bytes" },
		{ offsetof(struct cache_index, del_obj),
		  "DELETE FROM objects WHERE id=?" },
		{ offsetof(struct cache_index, del_blocks),
		  "DELETE FROM blocks WHERE id=?" },
		{ offsetof(struct cache_index, put_chunk),
		  "INSERT OR REPLACE INTO blocks(id, chunk, present, crc)"
		  " VALUES(?,?,?,?)" },
		{ offsetof(struct cache_index, del_chunk),
		  "DELETE FROM blocks WHERE id=? AND chunk=?" },
		{ offsetof(struct cache_index, set_atime),
		  "UPDATE objects SET atime_ns=? WHERE id=?" },
		{ offsetof(struct cache_index, get_attr),
		  "SELECT etag, has, mode, uid, gid, mtime_ns, ctime_ns,"
		  " atime_ns, rdev FROM attrs WHERE key=?" },
		{ offsetof(struct cache_index, put_attr),
		  "INSERT OR REPLACE INTO attrs(key, etag, has, mode, uid,"
		  " gid, mtime_ns, ctime_ns, atime_ns, rdev)"
		  " VALUES(?,?,?,?,?,?,?,?,?,?)" },
		{ offsetof(struct cache_index, del_attr),
		  "DELETE FROM attrs WHERE key=?" },
	};

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		sqlite3_stmt **sp = (sqlite3_stmt **)((char *)x +
						      stmts[i].off);
		int rc = sqlite3_prepare_v3(x->db, stmts[i].sql, -1,
					    SQLITE_PREPARE_PERSISTENT, sp,
					    NULL);

		if (rc != SQLITE_OK)
			return db_fail(x, rc, "preparing statements", e);
	}
	return 0;
}

static void db_close(struct cache *c, struct cache_index *x)
{
	cache_names_db_close(c);
	sqlite3_finalize(x->upsert_obj);
	sqlite3_finalize(x->del_obj);
	sqlite3_finalize(x->del_blocks);
	sqlite3_finalize(x->put_chunk);
	sqlite3_finalize(x->del_chunk);
	sqlite3_finalize(x->set_atime);
	sqlite3_finalize(x->get_attr);
	sqlite3_finalize(x->put_attr);
	sqlite3_finalize(x->del_attr);
	x->upsert_obj = x->del_obj = x->del_blocks = NULL;
	x->put_chunk = x->del_chunk = x->set_atime = NULL;
	x->get_attr = x->put_attr = x->del_attr = NULL;
	if (x->db)
		sqlite3_close_v2(x->db);
	x->db = NULL;
}

static int db_open(struct cache *c, struct cache_index *x,
		   struct open_err *e)
{
	char v[64];
	int rc;

	rc = sqlite3_open_v2(x->path, &x->db, SQLITE_OPEN_READWRITE |
			     SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "opening", e);
	sqlite3_busy_timeout(x->db, 5000);
	rc = query_text(x, "PRAGMA journal_mode=WAL", NULL, v, sizeof(v));
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "switching to WAL", e);
	if (strcmp(v, "wal")) {
		snprintf(e->msg, e->ml, "cache index %s: cannot use WAL mode "
			 "(got %s); is the cache dir on a network file "
			 "system?", x->path, v);
		return -EIO;
	}
	/* Commits reach the WAL without fsync: a process crash loses
	 * nothing, a power cut at most the last commits (see above). */
	rc = sqlite3_exec(x->db, "PRAGMA synchronous=NORMAL", NULL, NULL,
			  NULL);
	if (rc == SQLITE_OK)
		rc = query_text(x, "PRAGMA quick_check", NULL, v, sizeof(v));
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "checking", e);
	if (strcmp(v, "ok"))
		return damaged(e, "it fails SQLite's quick_check");
	rc = query_text(x, "SELECT count(*) FROM sqlite_master", NULL, v,
			sizeof(v));
	if (rc != SQLITE_OK)
		return db_fail(x, rc, "reading the schema", e);
	if (!strcmp(v, "0"))
		return create_schema(c, x, e);
	return 0;
}

/* One attempt: open, check, load.  -EBADMSG: damaged (e->why). */
static int index_try(struct cache *c, struct cache_index *x,
		     struct open_err *e)
{
	struct loaded l = { 0 };
	int rc;

	rc = db_open(c, x, e);
	if (!rc)
		rc = check_identity(c, x, e);
	if (!rc)
		rc = prepare_statements(x, e);
	if (!rc && (rc = cache_names_db_open(c, x->db)) != SQLITE_OK)
		rc = db_fail(x, rc, "reading the listings", e);
	if (!rc)
		rc = load_objects(c, x, &l, e);
	if (!rc)
		rc = load_blocks(x, &l, e);
	if (rc) {
		loaded_free(&l);
		db_close(c, x);
		return rc;
	}
	if (l.bad)
		cache_log("index %s: ignored %u rows that do not fit; those "
			  "blocks will be fetched again", x->path, l.bad);
	load_finish(c, &l);
	loaded_free(&l);
	/* Rows of objects that are gone (a crash between the two deletes
	 * cannot leave any, but an older bug might have). */
	sqlite3_exec(x->db, "DELETE FROM blocks WHERE id NOT IN"
		     " (SELECT id FROM objects)", NULL, NULL, NULL);
	return 0;
}

/* Renames the damaged index (and its WAL) out of the way. */
static int move_aside(struct cache_index *x, const struct open_err *e)
{
	char to[PATH_MAX + 64], from[PATH_MAX + 8];
	long now = (long)time(NULL);

	snprintf(to, sizeof(to), "%s.bad-%ld", x->path, now);
	if (rename(x->path, to) && errno != ENOENT) {
		snprintf(e->msg, e->ml, "cache index %s is unusable (%s) and "
			 "cannot be moved aside (%s); remove %s to start over",
			 x->path, e->why, strerror(errno), x->path);
		return -EIO;
	}
	snprintf(from, sizeof(from), "%s-wal", x->path);
	snprintf(to, sizeof(to), "%s.bad-%ld-wal", x->path, now);
	rename(from, to);
	snprintf(from, sizeof(from), "%s-shm", x->path);
	unlink(from);
	cache_log("index %s is unusable (%s); moved it to %s.bad-%ld and "
		  "starting with an empty cache", x->path, e->why, x->path,
		  now);
	return 0;
}

bool cache_index_dir_made(struct cache *c, bool made)
{
	struct cache_index *x = c->idx;
	char v[8];

	if (!x || !x->db)
		return false;
	pthread_mutex_lock(&x->lock);
	if (made)
		sqlite3_exec(x->db, "INSERT OR REPLACE INTO meta VALUES"
			     "('dir_made','1')", NULL, NULL, NULL);
	made = query_text(x, "SELECT value FROM meta WHERE name=?",
			  "dir_made", v, sizeof(v)) == SQLITE_OK &&
	       !strcmp(v, "1");
	pthread_mutex_unlock(&x->lock);
	return made;
}

int cache_index_open(struct cache *c, char *msg, size_t ml)
{
	struct cache_index *x = calloc(1, sizeof(*x));
	struct open_err e = { .msg = msg, .ml = ml };
	int rc;

	if (!x) {
		snprintf(msg, ml, "cache index: out of memory");
		return -ENOMEM;
	}
	snprintf(x->path, sizeof(x->path), "%s/index.sqlite", c->cfg.dir);
	pthread_mutex_init(&x->flush_lock, NULL);
	pthread_mutex_init(&x->lock, NULL);
	pthread_mutex_init(&x->alock, NULL);
	util_cond_init(&x->cond);
	c->idx = x;
	rc = cache_names_init(c);
	if (!rc)
		rc = index_try(c, x, &e);
	else
		snprintf(msg, ml, "cache index: out of memory");
	if (rc == -EBADMSG) {
		c->next_id = 1;
		c->ndead = 0;
		rc = move_aside(x, &e);
		if (!rc)
			rc = index_try(c, x, &e);
		if (rc == -EBADMSG) {
			snprintf(msg, ml, "cache index %s is unusable (%s); "
				 "remove it to start over", x->path, e.why);
			rc = -EIO;
		}
	}
	if (rc) {
		pthread_mutex_destroy(&x->flush_lock);
		pthread_mutex_destroy(&x->lock);
		pthread_mutex_destroy(&x->alock);
		pthread_cond_destroy(&x->cond);
		free(x);
		c->idx = NULL;
		cache_names_free(c);
	}
	return rc;
}

static void attr_pend_free_all(struct cache_index *x)
{
	for (size_t b = 0; b < ATTR_BUCKETS; b++)
		for (struct attr_pend *p = x->apend[b], *n; p; p = n) {
			n = p->next;
			free(p);
		}
	memset(x->apend, 0, sizeof(x->apend));
	x->napend = 0;
}

void cache_index_close(struct cache *c)
{
	struct cache_index *x = c->idx;

	if (!x)
		return;
	if (x->db && !x->failing)
		cache_names_clean(c);
	db_close(c, x);
	cache_names_free(c);
	attr_pend_free_all(x);
	pthread_mutex_destroy(&x->flush_lock);
	pthread_mutex_destroy(&x->lock);
	pthread_mutex_destroy(&x->alock);
	pthread_cond_destroy(&x->cond);
	free(x);
	c->idx = NULL;
}

uint64_t cache_index_bytes(struct cache *c)
{
	const char *sfx[] = { "", "-wal" };
	uint64_t n = 0;

	for (size_t i = 0; c->idx && i < 2; i++) {
		char p[PATH_MAX + 8];
		struct stat st;

		snprintf(p, sizeof(p), "%s%s", c->idx->path, sfx[i]);
		if (!stat(p, &st))
			n += (uint64_t)st.st_size;
	}
	return n;
}

/* ---- object attributes ---- */

static size_t attr_hash(const char *key)
{
	return (size_t)(util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key)) %
			ATTR_BUCKETS);
}

/* x->alock held. */
static struct attr_pend **attr_pend_find(struct cache_index *x,
					 const char *key)
{
	struct attr_pend **pp = &x->apend[attr_hash(key)];

	while (*pp && strcmp((*pp)->key, key))
		pp = &(*pp)->next;
	return pp;
}

static int attr_db_get(struct cache_index *x, const char *key,
		       struct cache_attr *out);

static bool attr_same(const struct cache_attr *a, const struct cache_attr *b)
{
	return !strcmp(a->etag, b->etag) && a->has == b->has &&
	       a->mode == b->mode && a->uid == b->uid && a->gid == b->gid &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
	       a->atime_ns == b->atime_ns && a->rdev == b->rdev;
}

int cache_attr_get(struct cache *c, const char *key, struct cache_attr *out)
{
	struct cache_index *x = c->idx;
	struct attr_pend *p;
	int rc = -ENOENT;

	memset(out, 0, sizeof(*out));
	if (!x)
		return -ENOENT;
	pthread_mutex_lock(&x->alock);
	p = *attr_pend_find(x, key);
	if (p) {
		if (!p->del) {
			*out = p->a;
			rc = 0;
		}
		pthread_mutex_unlock(&x->alock);
		return rc;
	}
	rc = attr_db_get(x, key, out);
	pthread_mutex_unlock(&x->alock);
	return rc;
}

/* key's row in the index (x->alock held): 0 or -ENOENT. */
static int attr_db_get(struct cache_index *x, const char *key,
		       struct cache_attr *out)
{
	sqlite3_stmt *st = x->get_attr;
	int rc = -ENOENT;

	if (st && sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) ==
	    SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		const char *etag = (const char *)sqlite3_column_text(st, 0);
		int64_t has = sqlite3_column_int64(st, 1);

		/* A row that does not fit is no row: the defaults. */
		if (etag && strlen(etag) < sizeof(out->etag) && has >= 0 &&
		    has <= CACHE_ATTR_ALL) {
			snprintf(out->etag, sizeof(out->etag), "%s", etag);
			out->has = (unsigned)has;
			out->mode = (uint32_t)sqlite3_column_int64(st, 2);
			out->uid = (uint32_t)sqlite3_column_int64(st, 3);
			out->gid = (uint32_t)sqlite3_column_int64(st, 4);
			out->mtime_ns = sqlite3_column_int64(st, 5);
			out->ctime_ns = sqlite3_column_int64(st, 6);
			out->atime_ns = sqlite3_column_int64(st, 7);
			out->rdev = (uint32_t)sqlite3_column_int64(st, 8);
			rc = 0;
		}
	}
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
	return rc;
}

void cache_attr_set(struct cache *c, const char *key,
		    const struct cache_attr *a)
{
	struct cache_index *x = c->idx;
	size_t kl = strlen(key);
	struct attr_pend **pp, *p;
	bool full;

	if (!x)
		return;
	pthread_mutex_lock(&x->alock);
	full = x->napend >= CACHE_ATTR_PENDING_MAX;
	pthread_mutex_unlock(&x->alock);
	if (full) /* rare: more than the flusher writes in a second */
		cache_index_flush(c, false);
	pthread_mutex_lock(&x->alock);
	pp = attr_pend_find(x, key);
	p = *pp;
	if (!p) {
		struct cache_attr cur;
		int rc = attr_db_get(x, key, &cur);

		/* The index says so already (a HEAD at every open after
		 * --refresh mostly learns nothing new): no write. */
		if ((!a && rc) || (a && !rc && attr_same(a, &cur))) {
			pthread_mutex_unlock(&x->alock);
			return;
		}
		p = calloc(1, sizeof(*p) + kl + 1);
		if (!p) {
			pthread_mutex_unlock(&x->alock);
			cache_log_ratelimited("out of memory: attributes of "
					      "%s not kept", key);
			return;
		}
		memcpy(p->key, key, kl + 1);
		*pp = p;
		x->napend++;
	}
	p->seq = ++x->aseq;
	p->del = !a;
	if (a)
		p->a = *a;
	pthread_mutex_unlock(&x->alock);
}

/* The pending changes, copied for a flush. */
struct attr_snap {
	struct attr_pend **v;
	size_t n;
};

static int attr_snap_take(struct cache_index *x, struct attr_snap *as)
{
	size_t n = 0;

	as->v = NULL;
	as->n = 0;
	pthread_mutex_lock(&x->alock);
	if (x->napend)
		as->v = malloc(x->napend * sizeof(*as->v));
	for (size_t b = 0; as->v && b < ATTR_BUCKETS; b++)
		for (struct attr_pend *p = x->apend[b]; p; p = p->next) {
			size_t sz = sizeof(*p) + strlen(p->key) + 1;
			struct attr_pend *q = malloc(sz);

			if (!q)
				continue; /* stays pending for the next flush */
			memcpy(q, p, sz);
			as->v[n++] = q;
		}
	pthread_mutex_unlock(&x->alock);
	as->n = n;
	return x->napend && !as->v ? -ENOMEM : 0;
}

/* After a commit: what it wrote is in the index now, unless changed
 * since. */
static void attr_snap_done(struct cache_index *x, struct attr_snap *as,
			   bool written)
{
	pthread_mutex_lock(&x->alock);
	for (size_t i = 0; written && i < as->n; i++) {
		struct attr_pend **pp = attr_pend_find(x, as->v[i]->key), *p;

		p = *pp;
		if (p && p->seq == as->v[i]->seq) {
			*pp = p->next;
			free(p);
			x->napend--;
		}
	}
	pthread_mutex_unlock(&x->alock);
	for (size_t i = 0; i < as->n; i++)
		free(as->v[i]);
	free(as->v);
}

static int step_reset(sqlite3_stmt *st);

static int attr_write(struct cache_index *x, const struct attr_pend *p)
{
	if (p->del) {
		sqlite3_bind_text(x->del_attr, 1, p->key, -1, SQLITE_STATIC);
		return step_reset(x->del_attr);
	}
	sqlite3_bind_text(x->put_attr, 1, p->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(x->put_attr, 2, p->a.etag, -1, SQLITE_STATIC);
	sqlite3_bind_int64(x->put_attr, 3, p->a.has);
	sqlite3_bind_int64(x->put_attr, 4, p->a.mode);
	sqlite3_bind_int64(x->put_attr, 5, p->a.uid);
	sqlite3_bind_int64(x->put_attr, 6, p->a.gid);
	sqlite3_bind_int64(x->put_attr, 7, p->a.mtime_ns);
	sqlite3_bind_int64(x->put_attr, 8, p->a.ctime_ns);
	sqlite3_bind_int64(x->put_attr, 9, p->a.atime_ns);
	sqlite3_bind_int64(x->put_attr, 10, p->a.rdev);
	return step_reset(x->put_attr);
}

/* ---- the dirty list ---- */

void cache_mark_dirty(struct cache_file *f)
{
	struct cache *c = f->c;

	pthread_mutex_lock(&c->dirty_lock);
	if (!f->detached && !f->on_dirty) {
		f->dprev = NULL;
		f->dnext = c->dirty_head;
		if (c->dirty_head)
			c->dirty_head->dprev = f;
		c->dirty_head = f;
		f->on_dirty = true;
	}
	pthread_mutex_unlock(&c->dirty_lock);
}

void cache_index_detach(struct cache_file *f)
{
	struct cache *c = f->c;

	pthread_mutex_lock(&c->dirty_lock);
	if (f->on_dirty) {
		if (f->dprev)
			f->dprev->dnext = f->dnext;
		else
			c->dirty_head = f->dnext;
		if (f->dnext)
			f->dnext->dprev = f->dprev;
		f->dnext = f->dprev = NULL;
		f->on_dirty = false;
	}
	f->detached = true;
	pthread_mutex_unlock(&c->dirty_lock);
}

static bool dead_push_locked(struct cache *c, const uint64_t *ids, size_t n)
{
	if (c->ndead + n > c->dead_cap) {
		size_t cap = (c->ndead + n) * 2 + 64;
		uint64_t *v = realloc(c->dead_ids, cap * sizeof(*v));

		if (!v)
			return false;
		c->dead_ids = v;
		c->dead_cap = cap;
	}
	if (n)
		memcpy(c->dead_ids + c->ndead, ids, n * sizeof(*ids));
	c->ndead += n;
	return true;
}

void cache_index_forget(struct cache *c, uint64_t id)
{
	bool ok;

	pthread_mutex_lock(&c->dirty_lock);
	ok = dead_push_locked(c, &id, 1);
	pthread_mutex_unlock(&c->dirty_lock);
	if (!ok) /* the row stays; its missing file is noticed at open */
		cache_log_ratelimited("out of memory: index row %llu kept",
				      (unsigned long long)id);
}

/* ---- flushing: copy out under the locks, write with none held ---- */

struct snap_chunk {
	uint32_t chunk, nb;
	bool empty;
	unsigned char *present;     /* (nb + 7) / 8 bytes */
	unsigned char *crc;         /* 4 * nb bytes, little-endian */
};

struct snap_obj {
	struct snap_obj *next;
	uint64_t id, size_bytes, cached_bytes;
	int64_t atime_ns;
	char etag[CACHE_ETAG_MAX];
	char *key;
	unsigned nchunks;
	struct snap_chunk chunks[];
};

struct snap_atime {
	uint64_t id;
	int64_t atime_ns;
};

struct snap {
	struct snap_obj *objs;
	uint64_t *dead;
	size_t ndead;
	struct snap_atime *atimes;
	size_t natimes;
};

static void snap_chunk_fill(const struct cache_file *f, uint32_t k,
			    struct snap_chunk *sc, unsigned char *mem)
{
	uint32_t nb = chunk_nblocks(f, k);

	sc->chunk = k;
	sc->nb = nb;
	sc->empty = true;
	sc->present = mem;
	sc->crc = mem + (nb + 7) / 8;
	memset(sc->present, 0, (nb + 7) / 8);
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t b = k * CACHE_CHUNK_BLOCKS + i;
		bool p = bit_test(f->present, b);

		if (p) {
			sc->present[i / 8] |= (unsigned char)(1u << (i % 8));
			sc->empty = false;
		}
		le32_put(sc->crc + 4 * i, p ? f->crc[b] : 0);
	}
}

/* Copies f's dirty state (f->lock held); NULL if none or no memory. */
static struct snap_obj *snap_obj(struct cache_file *f, bool *nomem)
{
	uint32_t nch = nchunks_of(f), nd = 0;
	size_t kl = strlen(f->key), size;
	struct snap_obj *so;
	unsigned char *mem;

	for (uint32_t k = 0; k < nch; k++)
		nd += bit_test(f->dirty_chunks, k);
	if (!nd && !f->row_dirty)
		return NULL;
	size = sizeof(*so) + nd * sizeof(so->chunks[0]) + kl + 1;
	for (uint32_t k = 0; k < nch; k++)
		if (bit_test(f->dirty_chunks, k))
			size += (chunk_nblocks(f, k) + 7) / 8 +
				4 * (size_t)chunk_nblocks(f, k);
	so = malloc(size);
	if (!so) {
		*nomem = true;
		return NULL;
	}
	so->next = NULL;
	so->id = f->id;
	so->size_bytes = f->size_bytes;
	so->cached_bytes = f->cached_bytes;
	so->atime_ns = atomic_load(&f->atime_ns);
	memcpy(so->etag, f->etag, sizeof(so->etag));
	so->nchunks = 0;
	mem = (unsigned char *)&so->chunks[nd];
	so->key = (char *)mem;
	memcpy(so->key, f->key, kl + 1);
	mem += kl + 1;
	for (uint32_t k = 0; k < nch; k++) {
		struct snap_chunk *sc = &so->chunks[so->nchunks];

		if (!bit_test(f->dirty_chunks, k))
			continue;
		snap_chunk_fill(f, k, sc, mem);
		mem += (sc->nb + 7) / 8 + 4 * (size_t)sc->nb;
		so->nchunks++;
		bit_clear(f->dirty_chunks, k);
	}
	f->row_dirty = false;
	return so;
}

static void mark_all_dirty_locked(struct cache *c)
{
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext) {
			pthread_mutex_lock(&f->lock);
			memset(f->dirty_chunks, 0xff,
			       bitmap_words(nchunks_of(f)) * 8);
			f->row_dirty = true;
			pthread_mutex_unlock(&f->lock);
			cache_mark_dirty(f);
		}
}

/* The dirty list as an array: the list links may change once
 * dirty_lock is dropped. */
static struct cache_file **take_dirty(struct cache *c, size_t *n,
				      struct snap *s)
{
	struct cache_file **v, *f;
	size_t cnt = 0;

	pthread_mutex_lock(&c->dirty_lock);
	for (f = c->dirty_head; f; f = f->dnext)
		cnt++;
	v = malloc((cnt + 1) * sizeof(*v));
	if (v) {
		cnt = 0;
		for (f = c->dirty_head; f; f = f->dnext) {
			v[cnt++] = f;
			f->on_dirty = false;
		}
		for (size_t i = 0; i < cnt; i++)
			v[i]->dnext = v[i]->dprev = NULL;
		c->dirty_head = NULL;
		s->dead = c->dead_ids;
		s->ndead = c->ndead;
		c->dead_ids = NULL;
		c->ndead = c->dead_cap = 0;
	}
	pthread_mutex_unlock(&c->dirty_lock);
	*n = cnt;
	return v;
}

static void snap_atimes_locked(struct cache *c, struct snap *s)
{
	size_t n = 0;

	s->atimes = malloc((c->nobjects + 1) * sizeof(*s->atimes));
	if (!s->atimes)
		return;
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext) {
			int64_t a = atomic_load(&f->atime_ns);

			if (a == f->saved_atime_ns)
				continue;
			s->atimes[n].id = f->id;
			s->atimes[n++].atime_ns = a;
			f->saved_atime_ns = a;
		}
	s->natimes = n;
}

static int snap_take(struct cache *c, struct snap *s, bool all_atimes)
{
	struct cache_file **v;
	struct snap_obj **tail = &s->objs;
	bool flush_all, nomem = false;
	size_t n;

	pthread_mutex_lock(&c->lock);
	pthread_mutex_lock(&c->dirty_lock);
	flush_all = c->flush_all;
	c->flush_all = false;
	pthread_mutex_unlock(&c->dirty_lock);
	if (flush_all)
		mark_all_dirty_locked(c);
	v = take_dirty(c, &n, s);
	for (size_t i = 0; v && i < n; i++) {
		struct cache_file *f = v[i];
		struct snap_obj *so;

		pthread_mutex_lock(&f->lock);
		so = snap_obj(f, &nomem);
		pthread_mutex_unlock(&f->lock);
		if (so) {
			f->saved_atime_ns = so->atime_ns;
			*tail = so;
			tail = &so->next;
		} else if (nomem) {
			cache_mark_dirty(f); /* its bits are still set */
		}
	}
	if (all_atimes)
		snap_atimes_locked(c, s);
	pthread_mutex_unlock(&c->lock);
	free(v);
	return v && !nomem ? 0 : -ENOMEM;
}

static void snap_free(struct snap *s)
{
	struct snap_obj *so, *next;

	for (so = s->objs; so; so = next) {
		next = so->next;
		free(so);
	}
	free(s->dead);
	free(s->atimes);
}

static int step_reset(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_obj(struct cache_index *x, const struct snap_obj *so)
{
	int rc;

	sqlite3_bind_int64(x->upsert_obj, 1, (int64_t)so->id);
	sqlite3_bind_text(x->upsert_obj, 2, so->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(x->upsert_obj, 3, so->etag, -1, SQLITE_STATIC);
	sqlite3_bind_int64(x->upsert_obj, 4, (int64_t)so->size_bytes);
	sqlite3_bind_int64(x->upsert_obj, 5, so->atime_ns);
	sqlite3_bind_int64(x->upsert_obj, 6, (int64_t)so->cached_bytes);
	rc = step_reset(x->upsert_obj);
	for (unsigned i = 0; rc == SQLITE_OK && i < so->nchunks; i++) {
		const struct snap_chunk *sc = &so->chunks[i];

		if (sc->empty) {
			sqlite3_bind_int64(x->del_chunk, 1, (int64_t)so->id);
			sqlite3_bind_int64(x->del_chunk, 2, sc->chunk);
			rc = step_reset(x->del_chunk);
			continue;
		}
		sqlite3_bind_int64(x->put_chunk, 1, (int64_t)so->id);
		sqlite3_bind_int64(x->put_chunk, 2, sc->chunk);
		sqlite3_bind_blob(x->put_chunk, 3, sc->present,
				  (int)((sc->nb + 7) / 8), SQLITE_STATIC);
		sqlite3_bind_blob(x->put_chunk, 4, sc->crc, (int)(4 * sc->nb),
				  SQLITE_STATIC);
		rc = step_reset(x->put_chunk);
	}
	return rc;
}

static int snap_write(struct cache *c, struct cache_index *x,
		      const struct snap *s, const struct attr_snap *as,
		      struct cache_names_snap *ns)
{
	int rc = sqlite3_exec(x->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);

	for (size_t i = 0; rc == SQLITE_OK && i < s->ndead; i++) {
		sqlite3_bind_int64(x->del_blocks, 1, (int64_t)s->dead[i]);
		rc = step_reset(x->del_blocks);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int64(x->del_obj, 1, (int64_t)s->dead[i]);
			rc = step_reset(x->del_obj);
		}
	}
	for (const struct snap_obj *so = s->objs; rc == SQLITE_OK && so;
	     so = so->next)
		rc = write_obj(x, so);
	for (size_t i = 0; rc == SQLITE_OK && i < s->natimes; i++) {
		sqlite3_bind_int64(x->set_atime, 1, s->atimes[i].atime_ns);
		sqlite3_bind_int64(x->set_atime, 2, (int64_t)s->atimes[i].id);
		rc = step_reset(x->set_atime);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < as->n; i++)
		rc = attr_write(x, as->v[i]);
	if (rc == SQLITE_OK)
		rc = cache_names_write(c, ns);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(x->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		if (!x->failing)
			cache_log("cannot write the index %s: %s; retrying "
				  "every second", x->path,
				  sqlite3_errmsg(x->db));
		x->failing = true;
		sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
		return -EIO;
	}
	if (x->failing)
		cache_log("index %s written again", x->path);
	x->failing = false;
	return 0;
}

int cache_index_flush(struct cache *c, bool all_atimes)
{
	struct cache_index *x = c->idx;
	struct snap s = { 0 };
	struct cache_names_snap *ns = NULL;
	struct attr_snap as;
	int rc;

	if (!x || !x->db)
		return 0;
	pthread_mutex_lock(&x->flush_lock);
	rc = snap_take(c, &s, all_atimes);
	if (!rc)
		rc = attr_snap_take(x, &as);
	else
		as.v = NULL, as.n = 0;
	if (!rc)
		rc = cache_names_snap_take(c, &ns);
	if (!rc && (s.objs || s.ndead || s.natimes || as.n || ns ||
		    cache_names_over(c)))
		rc = snap_write(c, x, &s, &as, ns);
	attr_snap_done(x, &as, rc == 0);
	cache_names_snap_done(c, ns, rc == 0);
	if (rc) {
		/* Everything again next time; the deletions too. */
		pthread_mutex_lock(&c->dirty_lock);
		if (s.ndead && !dead_push_locked(c, s.dead, s.ndead))
			cache_log_ratelimited("out of memory: %zu index rows "
					      "kept", s.ndead);
		c->flush_all = true;
		pthread_mutex_unlock(&c->dirty_lock);
	}
	snap_free(&s);
	if (!rc)
		atomic_fetch_add(&x->flushes, 1);
	pthread_mutex_unlock(&x->flush_lock);
	return rc;
}

uint64_t cache_index_flushes(struct cache *c)
{
	return c->idx ? atomic_load(&c->idx->flushes) : 0;
}

/* ---- the flusher thread ---- */

static void *flusher(void *arg)
{
	struct cache *c = arg;
	struct cache_index *x = c->idx;
	unsigned n = 0;

	pthread_mutex_lock(&x->lock);
	while (!x->stop) {
		struct timespec t = util_deadline(CACHE_FLUSH_INTERVAL_MS);

		while (!x->stop && pthread_cond_timedwait(&x->cond, &x->lock,
							  &t) != ETIMEDOUT)
			;
		if (x->stop)
			break;
		pthread_mutex_unlock(&x->lock);
		cache_index_flush(c, ++n % CACHE_ATIME_FLUSH_EVERY == 0);
		pthread_mutex_lock(&x->lock);
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

int cache_index_start(struct cache *c)
{
	struct cache_index *x = c->idx;
	int rc = pthread_create(&x->thread, NULL, flusher, c);

	if (rc)
		return -rc;
	x->started = true;
	return 0;
}

void cache_index_stop(struct cache *c)
{
	struct cache_index *x = c->idx;

	if (!x || !x->started)
		return;
	pthread_mutex_lock(&x->lock);
	x->stop = true;
	pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
	pthread_join(x->thread, NULL);
	x->started = false;
}
