/* SPDX-License-Identifier: MIT */
/*
 * attr.c - the attributes stored with objects (mode, owner, times, rdev
 * of the version the index knows), as the cache index keeps them: looked
 * up one key at a time, changes kept in a small table in memory (seen
 * at once) until the flusher writes them (flush.c).  The design is at
 * the top of index.c.
 */
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index_int.h"

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

int cache_attr_snap_take(struct cache_index *x, struct attr_snap *as)
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
void cache_attr_snap_done(struct cache_index *x, struct attr_snap *as,
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

int cache_attr_write(struct cache_index *x, const struct attr_pend *p)
{
	if (p->del) {
		sqlite3_bind_text(x->del_attr, 1, p->key, -1, SQLITE_STATIC);
		return cache_index_step(x->del_attr);
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
	return cache_index_step(x->put_attr);
}
