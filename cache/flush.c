/* SPDX-License-Identifier: MIT */
/*
 * flush.c - the cache index written back: the list of objects changed
 * since the last flush, a flush that copies their state out under the
 * locks and writes it with none held (one transaction with the pending
 * attributes, attr.c), and the flusher thread that runs one about once a
 * second.  The design is at the top of index.c.
 */
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index_int.h"

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
	uint32_t nb = cache_chunk_nblocks(f, k);

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
		util_put32le(sc->crc + 4 * i, p ? f->crc[b] : 0);
	}
}

/* Copies f's dirty state (f->lock held); NULL if none or no memory. */
static struct snap_obj *snap_obj(struct cache_file *f, bool *nomem)
{
	uint32_t nch = cache_nchunks(f), nd = 0;
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
			size += (cache_chunk_nblocks(f, k) + 7) / 8 +
				4 * (size_t)cache_chunk_nblocks(f, k);
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
			       bitmap_words(cache_nchunks(f)) * 8);
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

int cache_index_step(sqlite3_stmt *st)
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
	rc = cache_index_step(x->upsert_obj);
	for (unsigned i = 0; rc == SQLITE_OK && i < so->nchunks; i++) {
		const struct snap_chunk *sc = &so->chunks[i];

		if (sc->empty) {
			sqlite3_bind_int64(x->del_chunk, 1, (int64_t)so->id);
			sqlite3_bind_int64(x->del_chunk, 2, sc->chunk);
			rc = cache_index_step(x->del_chunk);
			continue;
		}
		sqlite3_bind_int64(x->put_chunk, 1, (int64_t)so->id);
		sqlite3_bind_int64(x->put_chunk, 2, sc->chunk);
		sqlite3_bind_blob(x->put_chunk, 3, sc->present,
				  (int)((sc->nb + 7) / 8), SQLITE_STATIC);
		sqlite3_bind_blob(x->put_chunk, 4, sc->crc, (int)(4 * sc->nb),
				  SQLITE_STATIC);
		rc = cache_index_step(x->put_chunk);
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
		rc = cache_index_step(x->del_blocks);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int64(x->del_obj, 1, (int64_t)s->dead[i]);
			rc = cache_index_step(x->del_obj);
		}
	}
	for (const struct snap_obj *so = s->objs; rc == SQLITE_OK && so;
	     so = so->next)
		rc = write_obj(x, so);
	for (size_t i = 0; rc == SQLITE_OK && i < s->natimes; i++) {
		sqlite3_bind_int64(x->set_atime, 1, s->atimes[i].atime_ns);
		sqlite3_bind_int64(x->set_atime, 2, (int64_t)s->atimes[i].id);
		rc = cache_index_step(x->set_atime);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < as->n; i++)
		rc = cache_attr_write(x, as->v[i]);
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
		rc = cache_attr_snap_take(x, &as);
	else
		as.v = NULL, as.n = 0;
	if (!rc)
		rc = cache_names_snap_take(c, &ns);
	if (!rc && (s.objs || s.ndead || s.natimes || as.n || ns ||
		    cache_names_over(c)))
		rc = snap_write(c, x, &s, &as, ns);
	cache_attr_snap_done(x, &as, rc == 0);
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
