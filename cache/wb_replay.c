/* SPDX-License-Identifier: MIT */
/*
 * wb_replay.c - the write-back at open: every dirty file's row and its
 * DIR/dirty/ID.meta read back, each file put back in the table (to be
 * uploaded, checked against its sums first, or held as damaged), sent to
 * lost+found, or reported lost (docs/semantics.md "After a crash").
 * Only at open: nothing else runs yet, wb->lock is taken for the
 * helpers that assert it.
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
void cache_wb_lost_version_forget(struct cache_wb *wb, const char *key)
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
		cache_wb_wfile_free(w);
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

/* One dirty file being replayed: its row (r, NULL if none) and what its
 * DIR/dirty/ID.meta says (s, have_s: it parsed), the bytes (fd), and
 * which of the two is the later commit (from_s).  replay_one frees what
 * is left of r and s, and closes fd, at the end. */
struct replay {
	struct cache_wb *wb;
	uint64_t id;
	struct cache_wfile *r, *s;
	bool queued, had_row, have_s, from_s;
	int src, fd;                /* src: cache_wb_meta_read's result */
	const char *key;
	char path[64], why[600];
};

/* Uploaded as it stands; the stop came while it moved into the read
 * cache (try_clean): the bucket has it, so nothing was lost, and what is
 * left of it here just goes. */
static void replay_uploaded(struct replay *p)
{
	struct cache_wb *wb = p->wb;

	if (p->fd >= 0)
		unlinkat(wb->c->dirfd, p->path, 0);
	cache_wb_meta_remove(wb, p->id);
	cache_wb_db_del(wb, p->id);
	cache_log("write-back: %s had been uploaded when fmfs stopped (it "
		  "was moving into the read cache): nothing to do", p->key);
}

/* A .meta with no row, older than a commit writeback.sqlite holds: the
 * database keeps a prefix of its commits (the WAL is replayed in order,
 * up to its first torn frame), so the row was there and was removed on
 * purpose (an unlink, or the move of an uploaded file into the read
 * cache) and only the removal of the files did not reach the disk
 * before the stop.  Re-queueing it would bring back what was removed
 * (68-mount-powerloss, seed 106696482 trial 16: w/a deleted, an fsync
 * of another file, a power cut, the old w/a uploaded again).  Only with
 * its bytes there: a .meta alone, its row removed, is how a lost file
 * stays reported at every mount (replay_gone). */
static void replay_removed(struct replay *p)
{
	struct cache_wb *wb = p->wb;

	if (p->fd >= 0)
		unlinkat(wb->c->dirfd, p->path, 0);
	cache_wb_meta_remove(wb, p->id);
	cache_log("write-back: %s (%s/dirty/%016" PRIx64 ") was removed "
		  "before fmfs stopped (writeback.sqlite holds later "
		  "commits and no row for it): its files go, not uploaded",
		  p->key, wb->c->cfg.dir, p->id);
}

/* Never committed (no .meta, a row that says "never closed"). */
static bool replay_insert(struct cache_wb *wb, struct cache_wfile *w,
			  uint64_t *charge);

/* w back as its dirty file stands (size bytes): with nothing to check
 * against, the next commit sums it all; charged to the cap. */
static void replay_size(struct cache_wb *wb, struct cache_wfile *w,
			off_t size)
{
	if (!w->sums_gen) {
		w->a.size = (uint64_t)size;
		w->checked = true;
		w->ext_seen = true;
		cache_wb_sums_resize(w, w->a.size);
	}
	w->charged = (uint64_t)size;
	if (w->seq > wb->seq_top)
		wb->seq_top = w->seq;
}

/* Never committed, at a takeover (cache_config.takeover): its writer
 * is still open in the kernel and comes back to it (docs/keeper.md).
 * Back in the table as it stands, not committed, not queued. */
static void replay_still_open(struct replay *p, uint64_t *charge)
{
	struct cache_wb *wb = p->wb;
	struct cache_wfile *w = p->r;
	struct stat sb;

	p->r = NULL;
	w->fd = p->fd;
	p->fd = -1;
	w->committed = false;
	w->changing = true; /* as it stands, unchecked */
	if (fstat(w->fd, &sb))
		sb.st_size = 0;
	replay_size(wb, w, sb.st_size);
	if (replay_insert(wb, w, charge))
		cache_log("write-back: %s was open for writing when its daemon "
			  "was replaced: kept as it is for its writer", w->key);
}

static void replay_uncommitted(struct replay *p, uint64_t *charge)
{
	struct cache_wb *wb = p->wb;
	struct cache *c = wb->c;
	char to[1300];
	struct stat sb;

	if (p->fd >= 0 && !p->r && p->src == -ENOENT && !fstat(p->fd, &sb) &&
	    !sb.st_size) {
		unlinkat(c->dirfd, p->path, 0); /* made just before a crash */
	} else if (p->fd >= 0 && p->r && c->cfg.takeover) {
		replay_still_open(p, charge);
		return;
	} else if (p->fd >= 0 && p->r) {
		lost_found(wb, p->id, p->key);
	} else if (p->fd >= 0 && p->src == -ENOENT) {
		/* Neither row nor .meta: closed or not, nobody knows, nor
		 * its name (both lost, or a power cut before the row was
		 * written).  It stays and is named. */
		lost_add(wb, "%s/%s: a dirty file not yet uploaded whose name "
			 "is unknown (no row in writeback.sqlite and no "
			 ".meta); it is not uploaded: copy its bytes out, "
			 "then remove it", c->cfg.dir, p->path);
		return;
	} else if (p->fd >= 0) {
		/* No row and a damaged .meta: committed or not, nobody
		 * knows, nor its name.  Both stay where they are, and every
		 * mount says so, until someone acts. */
		lost_add(wb, "%s/%s: a dirty file not yet uploaded whose name "
			 "is unknown (no row in writeback.sqlite, and %s); it "
			 "is not uploaded: copy its bytes out, then remove it "
			 "and its .meta", c->cfg.dir, p->path, p->why);
		return;
	}
	if (p->src == -EBADMSG && p->fd < 0 && !p->r) {
		/* A .meta is written only by a commit: a file was
		 * acknowledged here, and its bytes, its row and its name are
		 * gone.  The .meta stays, so that every mount (the mount's
		 * own check opens the cache first) says so until someone
		 * removes it (46-mount-damage, seed 1338817807 f195). */
		lost_add(wb, "%s/%s: a dirty file not yet uploaded is gone, "
			 "with its row in writeback.sqlite, and its .meta is "
			 "damaged (%s): what was written to it through the "
			 "mount was lost before it was uploaded, under a name "
			 "nobody knows (remove %s/%s%s to stop this message)",
			 c->cfg.dir, p->path, p->why, c->cfg.dir, p->path,
			 CACHE_WB_META_SUFFIX);
		return;
	}
	if (p->src == -EBADMSG)
		move_aside(wb, p->id, p->key, CACHE_WB_META_SUFFIX, to,
			   sizeof(to));
	if (p->r)
		cache_wb_db_del(wb, p->id);
}

/* Committed, and its bytes are gone (errno: why the open failed). */
static void replay_gone(struct replay *p, int err)
{
	struct cache_wb *wb = p->wb;
	struct cache *c = wb->c;

	lost_version(wb, p->key, p->from_s ? p->s->base_etag :
		     p->r->base_etag);
	/* The .meta stays, and while it is damaged so does the row: every
	 * mount says so until the .meta is removed. */
	if (p->src == -ENOENT)
		/* Its row is all that is left: kept (every mount says so)
		 * until a flush --wait or umount has named it
		 * (cache_w_flush), not dropped here: the mount's own check
		 * opens the cache before the daemon does (46-mount-damage,
		 * seed 977836433 f145). */
		lost_add_row(wb, p->r && !p->have_s ? p->id : 0,
			     "%s: its dirty file %s/%s is gone (%s): what was "
			     "written to it through the mount was lost before "
			     "it was uploaded", p->key, c->cfg.dir, p->path,
			     strerror(err));
	else
		lost_add(wb, "%s: its dirty file %s/%s is gone (%s): what was "
			 "written to it through the mount was lost before it "
			 "was uploaded (remove %s/%s%s to stop this message)",
			 p->key, c->cfg.dir, p->path, strerror(err),
			 c->cfg.dir, p->path, CACHE_WB_META_SUFFIX);
	if (p->r && p->have_s)
		cache_wb_db_del(wb, p->id);
}

/* How far the replayed file w (of size bytes on the disk) can be
 * trusted: checked against its sums before it is read or uploaded, held
 * as damaged, or uploaded as it stands (it was being changed). */
static void replay_verdict(struct replay *p, struct cache_wfile *w,
			   off_t size)
{
	struct cache_wb *wb = p->wb;

	if ((w->changing || (p->from_s && !w->sums_ok)) &&
	    (p->r ? p->r->other_boot : !p->had_row || w->other_boot)) {
		/* Being changed at the stop, and the system has booted since
		 * (or nobody knows): a power cut may have torn what the page
		 * cache had not written, and nothing can tell. */
		cache_wb_damaged(wb, w, "was open for writing when fmfs "
				 "stopped, and the system has restarted "
				 "since: a power cut may have left it torn");
	} else if (w->changing || (p->from_s && !w->sums_ok) ||
		   (!p->have_s && wb->db_version < CACHE_WB_DB_VERSION)) {
		/* Being changed at the stop, or left by an older fmfs: as it
		 * stands (docs/semantics.md), unchecked. */
		w->changing = true;
	} else if (!p->from_s && !w->a.size && !size) {
		/* Empty, as its row says: nothing to check (a directory
		 * marker, a file created empty).  A torn .meta is rewritten. */
		w->sums_ok = true;
		if (!p->have_s)
			cache_wb_meta_write(wb, w, false);
	} else if (!p->from_s) {
		if (p->have_s)
			cache_wb_damaged(wb, w, "has checksums in %016" PRIx64
					 ".meta older than its last close",
					 p->id);
		else
			cache_wb_damaged(wb, w, "has no usable checksums (%s)",
					 p->why);
	} else if ((uint64_t)size != w->a.size) {
		cache_wb_damaged(wb, w, "is %lld bytes where its last close "
				 "left %" PRIu64, (long long)size, w->a.size);
	} else {
		w->sums_gen = 1; /* checked before it is read or uploaded */
	}
}

/* Puts w in the table; of two dirty files for one key (a rename over a
 * dirty file, or a removal after an upload, that the stop left half
 * done) the later commit wins.  false: w lost to one there (freed). */
static bool replay_insert(struct cache_wb *wb, struct cache_wfile *w,
			  uint64_t *charge)
{
	for (struct cache_wfile *o = wb->tab[cache_wb_hash(w->key)]; o;
	     o = o->hnext) {
		if (strcmp(o->key, w->key))
			continue;
		if (o->seq > w->seq) {
			superseded(wb, w, o);
			cache_wb_wfile_free(w);
			return false;
		}
		cache_wb_take_out(wb, o);
		*charge -= o->charged;
		superseded(wb, o, w);
		cache_wb_wfile_free(o);
		break;
	}
	*charge += w->charged;
	cache_wb_insert(wb, w);
	return true;
}

/* Committed, and its bytes are there: back in the table, from the later
 * of its row and its .meta. */
static void replay_committed(struct replay *p, uint64_t *charge)
{
	struct cache_wb *wb = p->wb;
	struct cache_wfile *w;
	struct stat sb;

	if (p->from_s) {
		p->s->changing = p->r && p->r->changing &&
				 p->r->seq == p->s->seq;
		w = p->s, p->s = NULL;
	} else {
		w = p->r, p->r = NULL;
	}
	w->fd = p->fd;
	p->fd = -1;
	w->gen = w->queued_gen = 1;
	w->queued_ms = util_now_ms(); /* or earlier: not known */
	w->committed = true;
	if (fstat(w->fd, &sb))
		sb.st_size = 0;
	replay_verdict(p, w, sb.st_size);
	replay_size(wb, w, sb.st_size);
	if (!replay_insert(wb, w, charge))
		return;
	if (p->from_s && (!p->had_row || !p->queued)) {
		wb->rebuilt++;
		cache_log("write-back: %s re-queued from %s/dirty/%016" PRIx64
			  ".meta (writeback.sqlite had %s)", w->key,
			  wb->c->cfg.dir, p->id, p->had_row ?
			  "an older row" : "no row for it");
	}
	if (p->from_s)
		cache_wb_db_put(wb, w, true);
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
	struct replay p = { .wb = wb, .id = id, .r = r, .queued = queued,
			    .had_row = r != NULL, .fd = -1 };
	bool committed;
	int open_err;

	p.s = calloc(1, sizeof(*p.s));
	if (!p.s) {
		if (r)
			cache_wb_wfile_free(r);
		return;
	}
	p.s->c = wb->c;
	p.s->fd = -1;
	p.src = cache_wb_meta_read(wb, id, p.s, p.why, sizeof(p.why));
	p.have_s = p.src == 0;
	if (p.have_s && p.s->seq > wb->seq_top) /* a .meta kept or not */
		wb->seq_top = p.s->seq;
	p.from_s = p.have_s && (!r || p.s->seq >= r->seq);
	p.key = p.from_s ? p.s->key : r ? r->key : "?";
	cache_wb_dirty_path(id, p.path, sizeof(p.path));
	p.fd = openat(wb->c->dirfd, p.path, O_RDWR | O_CLOEXEC);
	open_err = p.fd < 0 ? errno : 0;
	/* A .meta is written only by a commit: one that is damaged, under
	 * a row that says "never closed" (a row rolled back by damage to
	 * the WAL), is a committed file held as damaged, not lost+found
	 * (46-mount-damage, seed 1074074272 f214). */
	committed = (r && queued) || p.have_s || (r && p.src == -EBADMSG);
	if (r && r->row_uploaded && (!p.have_s || p.s->seq <= r->seq))
		replay_uploaded(&p);
	else if (!r && p.have_s && p.fd >= 0 &&
		 p.s->seq < wb->replay_rows_seq)
		replay_removed(&p);
	else if (!committed)
		replay_uncommitted(&p, charge);
	else if (p.fd < 0)
		replay_gone(&p, open_err);
	else
		replay_committed(&p, charge);
	if (p.fd >= 0)
		close(p.fd);
	if (p.s)
		cache_wb_wfile_free(p.s);
	if (p.r)
		cache_wb_wfile_free(p.r);
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

	rc = sqlite3_prepare_v2(wb->db, "SELECT max(seq) FROM files", -1, &s,
				NULL);
	if (rc != SQLITE_OK)
		return -EIO;
	if (sqlite3_step(s) == SQLITE_ROW)
		wb->replay_rows_seq = (uint64_t)sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	/* New commits number on from every row's (the rows of lost files
	 * stay without being replayed), so that the rule above holds for
	 * the next replay too */
	if (wb->replay_rows_seq > wb->seq_top)
		wb->seq_top = wb->replay_rows_seq;
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
					cache_wb_wfile_free(r);
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
		h = cache_wb_hash(key);
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
	rc = cache_wb_db_open(wb, msg, ml);
	if (!rc && (rc = load_rows(wb)))
		snprintf(msg, ml, "write-back store %s/writeback.sqlite "
			 "cannot be read: %s", c->cfg.dir,
			 sqlite3_errmsg(wb->db));
	if (!rc && wb->db_version < CACHE_WB_DB_VERSION &&
	    sqlite3_exec(wb->db, "PRAGMA user_version=2", NULL, NULL,
			 NULL) == SQLITE_OK)
		wb->db_version = CACHE_WB_DB_VERSION;
	return rc;
}

