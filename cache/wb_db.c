/* SPDX-License-Identifier: MIT */
/*
 * wb_db.c - the write-back's SQLite mirror, DIR/writeback.sqlite: one
 * row per dirty file, one per tombstone (the schema is at the top of
 * wb.c), and cache_wb_save, the one call that makes a commit durable
 * (its .meta, then its row).  Every function here is called with
 * wb->lock held, but db_open at open.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wb_int.h"

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

/* Writes w's row, its metadata packed in mb (wb->lock held). */
static int db_put_packed(struct cache_wb *wb, const struct cache_wfile *w,
			 bool queued, const char *mb, size_t ml)
{
	sqlite3_stmt *s = wb->upsert;

	util_debug_assert_locked(&wb->lock);
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
	return db_step(wb, s, "saving a dirty file");
}

int cache_wb_db_put(struct cache_wb *wb, const struct cache_wfile *w,
		    bool queued)
{
	size_t ml = 0;
	char *mb = cache_wb_pack(w, &ml);
	int rc;

	if (!mb)
		return -ENOMEM;
	rc = db_put_packed(wb, w, queued, mb, ml);
	free(mb);
	return rc;
}

int cache_wb_save(struct cache_wb *wb, struct cache_wfile *w, bool durable)
{
	size_t ml = 0;
	char *mb = cache_wb_pack(w, &ml);
	int rc;

	if (!mb)
		return -ENOMEM;
	rc = cache_wb_meta_write_packed(wb, w, durable, mb, ml);
	if (!rc)
		rc = db_put_packed(wb, w, true, mb, ml);
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

int cache_wb_db_tomb(struct cache_wb *wb, const char *key, bool add)
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
int cache_wb_db_sync(struct cache_wb *wb)
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

int cache_wb_db_open(struct cache_wb *wb, char *msg, size_t ml)
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
