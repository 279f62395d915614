/* SPDX-License-Identifier: MIT */
/*
 * index.c - the cache's persistent index: DIR/index.sqlite in WAL mode,
 * opened, checked and loaded here; object attributes in attr.c; the
 * dirty list, flushes and the flusher thread in flush.c.  The index is
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

#include "index_int.h"

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

/* The upgrades, upgrade_sql[n] from format n to n + 1, each one
 * transaction. */
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

static const char *const upgrade_sql[CACHE_FORMAT_VERSION] = {
	[1] = upgrade1_sql, [2] = upgrade2_sql, [3] = upgrade3_sql,
};

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
	for (long from = fmt; fmt >= 1 && fmt < CACHE_FORMAT_VERSION; fmt++) {
		char what[64];

		rc = sqlite3_exec(x->db, upgrade_sql[fmt], NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
			snprintf(what, sizeof(what), "upgrading from format %ld",
				 fmt);
			return db_fail(x, rc, what, e);
		}
		if (fmt + 1 == CACHE_FORMAT_VERSION)
			cache_log("index %s upgraded from format %ld to %d "
				  "(object attributes, listings)", x->path,
				  from, CACHE_FORMAT_VERSION);
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

	if (k >= cache_nchunks(f))
		return false;
	nb = cache_chunk_nblocks(f, k);
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
		f->crc[b] = (uint32_t)util_get32le(crc + 4 * i);
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
		for (uint32_t k = 0; k < cache_nchunks(f); k++)
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
	/* A page cache of 512 KiB, not SQLite's 2 MiB: the pages it held
	 * after a walk wrote its listings were 3.5 MB of a warm mount's
	 * 45 MB, and walks and reads of small files took as long with it
	 * (docs/performance.md "Memory per inode held after a walk"); the
	 * system's page cache holds the file behind it. */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(x->db, "PRAGMA cache_size=-512", NULL, NULL,
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

void cache_attr_pend_free_all(struct cache_index *x)
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
	cache_attr_pend_free_all(x);
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
