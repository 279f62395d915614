/* SPDX-License-Identifier: MIT */
/*
 * listing.c - directory listings kept in the cache index for the
 * namespace (ns/), so that a remount knows the namespace before it asks the store, and a
 * mount with the store down serves every directory it has seen
 * (docs/semantics.md "The store unreachable").
 *
 * The cache does not read a listing: it is bytes the namespace packed
 * (ns/index.c), with the wall-clock time it was fetched, its number of
 * entries and the time it was last used.  They live in one table of the
 * index (docs/cache-format.md, "listings"):
 *
 *   listings(dir, fetched_ms, used_ms, entries, bytes)
 *   listing_data(id, data)    id: the listings row's rowid
 *
 * Nothing here is on a hot path's critical section: a put copies the
 * bytes into a small table in memory (seen by a get at once) and the
 * flusher writes them in its transaction, with the attributes and the
 * blocks (flush.c).  The table is bounded (cfg.listing_max_bytes): past
 * the bound, each flush deletes the listings used longest ago.  A
 * listing evicted, or never written, only costs a LIST.
 *
 * Marking stale (fetched_ms 0, the data kept) is what the fs does when
 * it changes a directory: the listing is LISTed again when the store
 * answers, and still served, with the fs's own changes over it, when it
 * does not.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"

#define NAMES_BUCKETS 1024u
/* Bytes of pending listings past which a put flushes first. */
#define NAMES_PENDING_MAX_BYTES (64u << 20)
/* Evict down to this share of the bound (percent). */
#define NAMES_LOW_PCT 90

/* A change of one listing not yet in the index. */
struct names_pend {
	struct names_pend *next;
	uint64_t seq;
	void *data;                 /* a new listing (NULL: none) */
	size_t len;
	uint32_t entries;
	int64_t fetched_ms;         /* of data; 0: stale */
	bool stale;                 /* no data: mark the row stale */
	int64_t used_ms;            /* 0: leave the row's */
	char dir[];
};

/* A directory tree marked stale, not yet in the index. */
struct names_prefix {
	struct names_prefix *next;
	uint64_t seq;
	char dir[];
};

struct cache_names {
	pthread_mutex_t lock;       /* everything below (a leaf) */
	struct names_pend *pend[NAMES_BUCKETS];
	size_t npend, pend_bytes;
	struct names_prefix *prefixes;
	uint64_t seq;
	sqlite3 *db;                /* the index's; NULL while closed */
	sqlite3_stmt *get, *ins, *upd, *put_data, *size_of, *mark, *touch,
		     *mark_range, *mark_all, *oldest, *del, *del_data;
	uint64_t dirs, entries, bytes; /* in the table */
};

static size_t names_hash(const char *dir)
{
	return (size_t)(util_fnv1a64(UTIL_FNV64_BASIS, dir, strlen(dir)) %
			NAMES_BUCKETS);
}

static struct names_pend **pend_find(struct cache_names *n, const char *dir)
{
	struct names_pend **pp = &n->pend[names_hash(dir)];

	while (*pp && strcmp((*pp)->dir, dir))
		pp = &(*pp)->next;
	return pp;
}

static void pend_free(struct names_pend *p)
{
	if (p) {
		free(p->data);
		free(p);
	}
}

int cache_names_init(struct cache *c)
{
	struct cache_names *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->lock, NULL);
	c->names = n;
	return 0;
}

void cache_names_free(struct cache *c)
{
	struct cache_names *n = c->names;

	if (!n)
		return;
	cache_names_db_close(c);
	for (size_t b = 0; b < NAMES_BUCKETS; b++)
		for (struct names_pend *p = n->pend[b], *q; p; p = q) {
			q = p->next;
			pend_free(p);
		}
	for (struct names_prefix *p = n->prefixes, *q; p; p = q) {
		q = p->next;
		free(p);
	}
	pthread_mutex_destroy(&n->lock);
	free(n);
	c->names = NULL;
}

/* The table's totals, from the table (at open, after a failed flush). */
static int recount(struct cache_names *n, sqlite3 *db)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, "SELECT count(*), total(entries),"
				    " total(bytes) FROM listings", -1, &st,
				    NULL);

	if (rc != SQLITE_OK)
		return rc;
	if (sqlite3_step(st) == SQLITE_ROW) {
		n->dirs = (uint64_t)sqlite3_column_int64(st, 0);
		n->entries = (uint64_t)sqlite3_column_double(st, 1);
		n->bytes = (uint64_t)sqlite3_column_double(st, 2);
	}
	return sqlite3_finalize(st);
}

int cache_names_db_open(struct cache *c, struct sqlite3 *db)
{
	static const struct {
		size_t off;
		const char *sql;
	} stmts[] = {
		{ offsetof(struct cache_names, get),
		  "SELECT l.fetched_ms, l.entries, d.data FROM listings l"
		  " JOIN listing_data d ON d.id=l.rowid WHERE l.dir=?" },
		{ offsetof(struct cache_names, ins),
		  "INSERT INTO listings(dir, fetched_ms, used_ms, entries,"
		  " bytes) VALUES(?,?,?,?,?)" },
		{ offsetof(struct cache_names, upd),
		  "UPDATE listings SET fetched_ms=?, used_ms=?, entries=?,"
		  " bytes=? WHERE rowid=?" },
		{ offsetof(struct cache_names, put_data),
		  "INSERT OR REPLACE INTO listing_data(id, data) VALUES(?,?)" },
		{ offsetof(struct cache_names, size_of),
		  "SELECT rowid, entries, bytes FROM listings WHERE dir=?" },
		{ offsetof(struct cache_names, mark),
		  "UPDATE listings SET fetched_ms=0 WHERE dir=?" },
		{ offsetof(struct cache_names, touch),
		  "UPDATE listings SET used_ms=? WHERE dir=?" },
		{ offsetof(struct cache_names, mark_range),
		  "UPDATE listings SET fetched_ms=0 WHERE dir>=? AND dir<?" },
		{ offsetof(struct cache_names, mark_all),
		  "UPDATE listings SET fetched_ms=0" },
		{ offsetof(struct cache_names, oldest),
		  "SELECT dir FROM listings ORDER BY used_ms LIMIT 256" },
		{ offsetof(struct cache_names, del),
		  "DELETE FROM listings WHERE rowid=?" },
		{ offsetof(struct cache_names, del_data),
		  "DELETE FROM listing_data WHERE id=?" },
	};
	struct cache_names *n = c->names;
	int rc;

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		sqlite3_stmt **sp = (sqlite3_stmt **)((char *)n +
						      stmts[i].off);

		rc = sqlite3_prepare_v3(db, stmts[i].sql, -1,
					SQLITE_PREPARE_PERSISTENT, sp, NULL);
		if (rc != SQLITE_OK)
			goto fail;
	}
	rc = recount(n, db);
	if (rc != SQLITE_OK)
		goto fail;
	/* After a crash the last second's stale marks may be lost: a
	 * listing that an upload or a delete of ours made old would look
	 * fresh.  So each is stale then (LISTed once the store answers). */
	rc = sqlite3_exec(db, "UPDATE listings SET fetched_ms=0 WHERE NOT"
			  " EXISTS (SELECT 1 FROM meta WHERE"
			  " name='listings_clean' AND value='1');"
			  "INSERT OR REPLACE INTO meta VALUES"
			  "('listings_clean','0');"
			  "DELETE FROM listing_data WHERE id NOT IN"
			  " (SELECT rowid FROM listings)", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	pthread_mutex_lock(&n->lock);
	n->db = db;
	pthread_mutex_unlock(&n->lock);
	return SQLITE_OK;
fail:
	cache_names_db_close(c);
	return rc;
}

void cache_names_clean(struct cache *c)
{
	struct cache_names *n = c->names;

	pthread_mutex_lock(&n->lock);
	if (n->db && !n->npend && !n->prefixes)
		sqlite3_exec(n->db, "INSERT OR REPLACE INTO meta VALUES"
			     "('listings_clean','1')", NULL, NULL, NULL);
	pthread_mutex_unlock(&n->lock);
}

void cache_names_db_close(struct cache *c)
{
	struct cache_names *n = c->names;
	sqlite3_stmt **all[] = { &n->get, &n->ins, &n->upd, &n->put_data,
				 &n->size_of, &n->mark, &n->touch,
				 &n->mark_range, &n->mark_all, &n->oldest,
				 &n->del, &n->del_data };

	pthread_mutex_lock(&n->lock);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		sqlite3_finalize(*all[i]);
		*all[i] = NULL;
	}
	n->db = NULL;
	n->dirs = n->entries = n->bytes = 0;
	pthread_mutex_unlock(&n->lock);
}

/* Whether a tree marked stale and still pending covers dir. */
static bool prefix_stale(const struct cache_names *n, const char *dir)
{
	for (const struct names_prefix *p = n->prefixes; p; p = p->next)
		if (!strncmp(dir, p->dir, strlen(p->dir)))
			return true;
	return false;
}

/* The pending change of dir, made if missing (lock held); NULL: out of
 * memory. */
static struct names_pend *pend_get(struct cache_names *n, const char *dir)
{
	struct names_pend **pp = pend_find(n, dir), *p = *pp;
	size_t dl = strlen(dir);

	if (!p) {
		p = calloc(1, sizeof(*p) + dl + 1);
		if (!p)
			return NULL;
		memcpy(p->dir, dir, dl + 1);
		*pp = p;
		n->npend++;
	}
	p->seq = ++n->seq;
	return p;
}

int cache_listing_get(struct cache *c, const char *dir, void **data,
		      size_t *len, uint32_t *entries, int64_t *fetched_ms)
{
	struct cache_names *n = c->names;
	struct names_pend *p;
	int rc = -ENOENT;

	*data = NULL;
	if (!n)
		return -ENOENT;
	pthread_mutex_lock(&n->lock);
	p = *pend_find(n, dir);
	if (p && p->data) {
		*data = malloc(p->len ? p->len : 1);
		if (*data) {
			memcpy(*data, p->data, p->len);
			*len = p->len;
			*entries = p->entries;
			*fetched_ms = p->fetched_ms;
			rc = 0;
		} else {
			rc = -ENOMEM;
		}
	} else if (n->db) {
		sqlite3_stmt *st = n->get;
		int s;

		sqlite3_bind_text(st, 1, dir, -1, SQLITE_STATIC);
		s = sqlite3_step(st);
		if (s == SQLITE_ROW) {
			const void *b = sqlite3_column_blob(st, 2);
			size_t bl = (size_t)sqlite3_column_bytes(st, 2);

			*data = malloc(bl ? bl : 1);
			if (*data) {
				if (bl)
					memcpy(*data, b, bl);
				*len = bl;
				*entries = (uint32_t)sqlite3_column_int64(st, 1);
				*fetched_ms = sqlite3_column_int64(st, 0);
				if ((p && p->stale) || prefix_stale(n, dir))
					*fetched_ms = 0;
				rc = 0;
			} else {
				rc = -ENOMEM;
			}
		} else if (s != SQLITE_DONE) {
			cache_log_ratelimited("cannot read a listing from the "
					      "index: %s", sqlite3_errmsg(n->db));
			rc = -EIO;
		}
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		/* Used: the LRU order of the bound. */
		if (!rc && (p = pend_get(n, dir)))
			p->used_ms = util_wall_ns() / 1000000;
	}
	pthread_mutex_unlock(&n->lock);
	return rc;
}

void cache_listing_put(struct cache *c, const char *dir, const void *data,
		       size_t len, uint32_t entries, int64_t fetched_ms)
{
	struct cache_names *n = c->names;
	struct names_pend *p;
	void *copy = malloc(len ? len : 1);
	bool full;

	if (!n || !copy) {
		free(copy);
		return; /* only costs a LIST after a remount */
	}
	if (len)
		memcpy(copy, data, len);
	pthread_mutex_lock(&n->lock);
	/* Rare (a burst of huge listings within a second, or an index that
	 * cannot be written): not kept, which only costs a LIST after a
	 * remount (an older row of dir stays: fresh, it was right then);
	 * the caller may hold its own locks, so no flush here. */
	full = n->pend_bytes + len > NAMES_PENDING_MAX_BYTES;
	p = full ? NULL : pend_get(n, dir);
	if (p) {
		n->pend_bytes -= p->data ? p->len : 0;
		free(p->data);
		p->data = copy;
		p->len = len;
		p->entries = entries;
		p->fetched_ms = fetched_ms;
		p->stale = false;
		p->used_ms = util_wall_ns() / 1000000;
		n->pend_bytes += len;
		copy = NULL;
	}
	pthread_mutex_unlock(&n->lock);
	free(copy);
}

void cache_listing_stale(struct cache *c, const char *dir, bool tree)
{
	struct cache_names *n = c->names;
	struct names_pend *p;

	if (!n)
		return;
	pthread_mutex_lock(&n->lock);
	if (!tree) {
		p = pend_get(n, dir);
		if (p && p->data)
			p->fetched_ms = 0;
		else if (p)
			p->stale = true;
		if (!p)
			cache_log_ratelimited("out of memory: the listing of "
					      "%s may be served as fresh after"
					      " a remount", dir);
	} else {
		size_t dl = strlen(dir);
		struct names_prefix *q = malloc(sizeof(*q) + dl + 1);

		if (q) {
			memcpy(q->dir, dir, dl + 1);
			q->seq = ++n->seq;
			q->next = n->prefixes;
			n->prefixes = q;
		} else {
			cache_log_ratelimited("out of memory: listings under "
					      "%s may be served as fresh after"
					      " a remount", dir);
		}
		for (size_t b = 0; b < NAMES_BUCKETS; b++)
			for (p = n->pend[b]; p; p = p->next)
				if (p->data && !strncmp(p->dir, dir, dl))
					p->fetched_ms = 0;
	}
	pthread_mutex_unlock(&n->lock);
}

void cache_listing_stats(struct cache *c, uint64_t *dirs, uint64_t *entries)
{
	struct cache_names *n = c->names;

	*dirs = *entries = 0;
	if (!n)
		return;
	pthread_mutex_lock(&n->lock);
	*dirs = n->dirs;
	*entries = n->entries;
	pthread_mutex_unlock(&n->lock);
}

/* ---- flushing (flush.c's transaction) ---- */

struct cache_names_snap {
	struct names_pend **v;
	size_t n;
	struct names_prefix *prefixes;
};

int cache_names_snap_take(struct cache *c, struct cache_names_snap **out)
{
	struct cache_names *n = c->names;
	struct cache_names_snap *s;
	size_t k = 0;

	*out = NULL;
	if (!n)
		return 0;
	pthread_mutex_lock(&n->lock);
	if (!n->npend && !n->prefixes) {
		pthread_mutex_unlock(&n->lock);
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (s && n->npend && !(s->v = malloc(n->npend * sizeof(*s->v)))) {
		free(s);
		s = NULL;
	}
	if (!s) {
		pthread_mutex_unlock(&n->lock);
		return -ENOMEM;
	}
	/* Copies: the pending changes stay where a get finds them until the
	 * transaction that writes them is committed (done), so no get in
	 * between reads the row as it was before them. */
	for (size_t b = 0; b < NAMES_BUCKETS; b++)
		for (struct names_pend *p = n->pend[b]; p; p = p->next) {
			size_t sz = sizeof(*p) + strlen(p->dir) + 1;
			struct names_pend *q = malloc(sz);

			if (!q)
				continue; /* stays pending for the next flush */
			memcpy(q, p, sz);
			q->data = NULL;
			if (p->data && !(q->data = malloc(p->len ? p->len : 1))) {
				free(q);
				continue;
			}
			if (p->data && p->len)
				memcpy(q->data, p->data, p->len);
			s->v[k++] = q;
		}
	s->n = k;
	for (struct names_prefix *p = n->prefixes; p; p = p->next) {
		size_t sz = sizeof(*p) + strlen(p->dir) + 1;
		struct names_prefix *q = malloc(sz);

		if (!q)
			break; /* the rest next time (their keys stay stale) */
		memcpy(q, p, sz);
		q->next = s->prefixes;
		s->prefixes = q;
	}
	pthread_mutex_unlock(&n->lock);
	*out = s;
	return 0;
}

static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The rowid, entries and bytes of dir's row, if any (lock held). */
static void row_size(struct cache_names *n, const char *dir, int64_t *id,
		     uint64_t *entries, uint64_t *bytes, bool *found)
{
	sqlite3_stmt *st = n->size_of;

	sqlite3_bind_text(st, 1, dir, -1, SQLITE_STATIC);
	*found = sqlite3_step(st) == SQLITE_ROW;
	*id = *found ? sqlite3_column_int64(st, 0) : 0;
	*entries = *found ? (uint64_t)sqlite3_column_int64(st, 1) : 0;
	*bytes = *found ? (uint64_t)sqlite3_column_int64(st, 2) : 0;
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

static int mark_tree(struct cache_names *n, const char *dir)
{
	size_t dl = strlen(dir);
	char *hi;
	int rc;

	if (!dl)
		return step_done(n->mark_all);
	/* dir ends in '/': the keys under it are those from dir up to the
	 * same with its last byte one higher ('0'). */
	hi = strdup(dir);
	if (!hi)
		return SQLITE_NOMEM;
	hi[dl - 1]++;
	sqlite3_bind_text(n->mark_range, 1, dir, -1, SQLITE_STATIC);
	sqlite3_bind_text(n->mark_range, 2, hi, -1, SQLITE_STATIC);
	rc = step_done(n->mark_range);
	free(hi);
	return rc;
}

static int write_one(struct cache_names *n, const struct names_pend *p)
{
	uint64_t e0, b0;
	int64_t id;
	bool found;
	int rc = SQLITE_OK;

	/* The data in a table of its own: a stale mark or a touch rewrites
	 * a small row, never the BLOB. */
	if (p->data) {
		sqlite3_stmt *st = n->ins;

		row_size(n, p->dir, &id, &e0, &b0, &found);
		if (found) {
			st = n->upd;
			sqlite3_bind_int64(st, 5, id);
		} else {
			sqlite3_bind_text(st, 1, p->dir, -1, SQLITE_STATIC);
		}
		sqlite3_bind_int64(st, found ? 1 : 2, p->fetched_ms);
		sqlite3_bind_int64(st, found ? 2 : 3, p->used_ms);
		sqlite3_bind_int64(st, found ? 3 : 4, p->entries);
		sqlite3_bind_int64(st, found ? 4 : 5, (int64_t)p->len);
		rc = step_done(st);
		if (rc == SQLITE_OK && !found)
			id = sqlite3_last_insert_rowid(n->db);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int64(n->put_data, 1, id);
			sqlite3_bind_blob(n->put_data, 2, p->data, (int)p->len,
					  SQLITE_STATIC);
			rc = step_done(n->put_data);
		}
		if (rc == SQLITE_OK) {
			n->dirs += !found;
			n->entries += p->entries - e0;
			n->bytes += p->len - b0;
		}
		return rc;
	}
	if (p->stale) {
		sqlite3_bind_text(n->mark, 1, p->dir, -1, SQLITE_STATIC);
		rc = step_done(n->mark);
	}
	if (rc == SQLITE_OK && p->used_ms) {
		sqlite3_bind_int64(n->touch, 1, p->used_ms);
		sqlite3_bind_text(n->touch, 2, p->dir, -1, SQLITE_STATIC);
		rc = step_done(n->touch);
	}
	return rc;
}

/* Past the bound: the listings used longest ago go. */
static int evict(struct cache *c, struct cache_names *n)
{
	uint64_t cap = c->cfg.listing_max_bytes;
	uint64_t low = cap / 100 * NAMES_LOW_PCT;
	char **dirs = NULL;
	size_t nd = 0, cd = 0;
	int rc = SQLITE_OK;

	while (rc == SQLITE_OK && n->bytes > cap) {
		sqlite3_stmt *st = n->oldest;
		uint64_t bytes = n->bytes;

		while (bytes > low && (rc = sqlite3_step(st)) == SQLITE_ROW) {
			char *d = strdup((const char *)
					 sqlite3_column_text(st, 0));
			int64_t id;
			uint64_t e0, b0;
			bool found;

			if (nd == cd) {
				size_t nc = cd ? cd * 2 : 64;
				char **v = realloc(dirs, nc * sizeof(*v));

				if (!v) {
					free(d);
					break;
				}
				dirs = v;
				cd = nc;
			}
			if (!d)
				break;
			dirs[nd++] = d;
			row_size(n, d, &id, &e0, &b0, &found);
			bytes -= b0;
		}
		sqlite3_reset(st);
		rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
		if (!nd)
			break;
		for (size_t i = 0; i < nd; i++) {
			uint64_t e0, b0;
			int64_t id;
			bool found;

			if (rc == SQLITE_OK) {
				row_size(n, dirs[i], &id, &e0, &b0, &found);
				sqlite3_bind_int64(n->del_data, 1, id);
				rc = found ? step_done(n->del_data) : SQLITE_OK;
				sqlite3_bind_int64(n->del, 1, id);
				if (rc == SQLITE_OK && found)
					rc = step_done(n->del);
				if (rc == SQLITE_OK && found) {
					n->dirs--;
					n->entries -= e0;
					n->bytes -= b0;
				}
			}
			free(dirs[i]);
		}
		nd = 0;
	}
	free(dirs);
	return rc;
}

int cache_names_write(struct cache *c, struct cache_names_snap *s)
{
	struct cache_names *n = c->names;
	int rc = SQLITE_OK;

	if (!n)
		return SQLITE_OK;
	pthread_mutex_lock(&n->lock);
	if (!n->db || (!s && n->bytes <= c->cfg.listing_max_bytes)) {
		pthread_mutex_unlock(&n->lock);
		return SQLITE_OK;
	}
	/* Trees first: every pending change of a key is newer than them. */
	for (struct names_prefix *p = s ? s->prefixes : NULL;
	     rc == SQLITE_OK && p; p = p->next)
		rc = mark_tree(n, p->dir);
	for (size_t i = 0; s && rc == SQLITE_OK && i < s->n; i++)
		rc = write_one(n, s->v[i]);
	if (rc == SQLITE_OK && n->bytes > c->cfg.listing_max_bytes)
		rc = evict(c, n);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

void cache_names_snap_done(struct cache *c, struct cache_names_snap *s,
			   bool written)
{
	struct cache_names *n = c->names;

	if (!s) {
		if (!written && n) { /* an eviction rolled back */
			pthread_mutex_lock(&n->lock);
			if (n->db)
				recount(n, n->db);
			pthread_mutex_unlock(&n->lock);
		}
		return;
	}
	pthread_mutex_lock(&n->lock);
	for (size_t i = 0; i < s->n; i++) {
		struct names_pend **pp = pend_find(n, s->v[i]->dir), *p = *pp;

		if (written && p && p->seq == s->v[i]->seq) {
			*pp = p->next;
			n->npend--;
			n->pend_bytes -= p->data ? p->len : 0;
			pend_free(p);
		}
		pend_free(s->v[i]);
	}
	/* A rolled-back flush counted what it did not keep. */
	if (!written && n->db && recount(n, n->db) != SQLITE_OK)
		cache_log_ratelimited("cannot count the listings in the index");
	for (struct names_prefix *q = s->prefixes; written && q; q = q->next)
		for (struct names_prefix **pp = &n->prefixes; *pp;
		     pp = &(*pp)->next)
			if ((*pp)->seq == q->seq) {
				struct names_prefix *p = *pp;

				*pp = p->next;
				free(p);
				break;
			}
	pthread_mutex_unlock(&n->lock);
	for (struct names_prefix *p = s->prefixes, *q; p; p = q) {
		q = p->next;
		free(p);
	}
	free(s->v);
	free(s);
}

bool cache_names_over(struct cache *c)
{
	struct cache_names *n = c->names;
	bool over;

	if (!n)
		return false;
	pthread_mutex_lock(&n->lock);
	over = n->db && n->bytes > c->cfg.listing_max_bytes;
	pthread_mutex_unlock(&n->lock);
	return over;
}
