/* SPDX-License-Identifier: MIT */
/*
 * heads.c - HEADs behind a listing (docs/semantics.md "Objects other
 * tools wrote").  A listing carries no metadata, so an object whose
 * attributes this cache dir does not know for its version (ETag) is
 * shown with the listing's values at first; a LIST queues one HEAD for
 * each such object, and cfg.head_threads threads make them in parallel,
 * in the background, keeping each answer in the cache index as any
 * HEAD's (cache_attr_set).  The next lookup or getattr takes them from
 * there, so a file shows its stored times, mode and owner seconds after
 * a listing, at one HEAD per object version per cache dir.
 *
 * Bounded: at most NS_HEADS_QUEUED keys wait (the rest are queued again
 * by a later listing); a key waiting or in flight is not queued twice;
 * nothing is asked while the store is unreachable.
 *
 * Behind, really: no HEAD starts while a LIST is being fetched or within
 * NS_HEADS_YIELD_MS of one (a walk such as find lists directory after
 * directory, and its LISTs would share the store, and on a small machine
 * the cores, with the HEADs), and a queued key wakes a worker only when
 * one is idle (a wake-up per listed entry cost more than the HEADs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_int.h"

#define NS_HEADS_BUCKETS 4096
#define NS_HEADS_YIELD_MS 10

struct ns_head_job {
	struct ns_head_job *next;   /* the queue, oldest first */
	struct ns_head_job *hnext;  /* by hash of the key */
	char etag[80];
	char key[];
};

struct ns_heads {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ns_head_job *first, *last;
	struct ns_head_job *tab[NS_HEADS_BUCKETS]; /* waiting and in flight */
	size_t queued, inflight;
	unsigned idle;             /* workers waiting for a job */
	bool stop;
	unsigned nthreads;
	pthread_t th[];
};

static size_t bucket(const char *key)
{
	return (size_t)util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key)) &
	       (NS_HEADS_BUCKETS - 1);
}

/* Whether the index knows key's attributes for version etag. */
static bool known(struct ns *ns, const char *key, const char *etag)
{
	struct cache_attr a;

	return !cache_attr_get(ns->cfg.cache, key, &a) &&
	       !strcmp(a.etag, etag);
}

/* Whether a listing is being fetched, or was a moment ago (a walk such
 * as find lists one directory after another). */
static bool listing_now(struct ns *ns)
{
	return atomic_load(&ns->lists_busy) ||
	       util_now_ms() - atomic_load(&ns->list_end_ms) <
	       NS_HEADS_YIELD_MS;
}

static void unhash(struct ns_heads *h, struct ns_head_job *j)
{
	for (struct ns_head_job **pp = &h->tab[bucket(j->key)]; *pp;
	     pp = &(*pp)->hnext)
		if (*pp == j) {
			*pp = j->hnext;
			return;
		}
}

static void one(struct ns *ns, struct ns_head_job *j)
{
	struct cache_attr a;
	struct obj_meta m;
	struct obj_error err;
	obj_status st;

	if (!ns_store_up(ns) || known(ns, j->key, j->etag))
		return;
	atomic_fetch_add(&ns->heads, 1);
	atomic_fetch_add(&ns->heads_behind, 1);
	st = obj_head(ns->cfg.st, j->key, &m, &err);
	if (st == OBJ_ERR_NOT_FOUND)
		return; /* gone since the LIST */
	if (st == OBJ_ERR_DENIED || st == OBJ_ERR_OTHER) {
		/* refused for this object (a 403 on HEAD): the listing's
		 * values stand for this version, remembered as a HEAD
		 * that found none, not asked at every lookup */
		memset(&a, 0, sizeof(a));
		snprintf(a.etag, sizeof(a.etag), "%s", j->etag);
		cache_attr_set(ns->cfg.cache, j->key, &a);
		return;
	}
	if (st != OBJ_OK) {
		ns_obj_errno(ns, st, &err);
		return;
	}
	ns_store_answered(ns);
	ns_meta_attr(&m, &a);
	obj_meta_release(&m);
	/* For the version the HEAD saw (a newer one than the LIST's, if it
	 * changed meanwhile: a listing with that ETag finds it). */
	cache_attr_set(ns->cfg.cache, j->key, &a);
}

static void *worker(void *arg)
{
	struct ns *ns = arg;
	struct ns_heads *h = ns->hq;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		struct ns_head_job *j;

		while (!h->stop && !h->first) {
			h->idle++;
			pthread_cond_wait(&h->cond, &h->lock);
			h->idle--;
		}
		/* A listing someone waits for goes first: no HEAD starts
		 * while one is fetched (a short wait, re-checked) */
		while (!h->stop && listing_now(ns)) {
			struct timespec t = util_deadline(NS_HEADS_YIELD_MS);

			pthread_cond_timedwait(&h->cond, &h->lock, &t);
		}
		if (h->stop)
			break;
		if (!h->first)
			continue;
		j = h->first;
		h->first = j->next;
		if (!h->first)
			h->last = NULL;
		h->queued--;
		h->inflight++;
		pthread_mutex_unlock(&h->lock);
		one(ns, j);
		pthread_mutex_lock(&h->lock);
		h->inflight--;
		unhash(h, j);
		free(j);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

int ns_heads_start(struct ns *ns)
{
	unsigned n = ns->cfg.head_threads;
	struct ns_heads *h;

	if (!n || ns->cfg.local_only)
		return 0;
	h = calloc(1, sizeof(*h) + n * sizeof(pthread_t));
	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	util_cond_init(&h->cond);
	ns->hq = h;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&h->th[i], NULL, worker, ns))
			break;
		h->nthreads++;
	}
	return 0;
}

void ns_heads_stop(struct ns *ns)
{
	struct ns_heads *h = ns->hq;

	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	for (unsigned i = 0; i < h->nthreads; i++)
		pthread_join(h->th[i], NULL);
	for (struct ns_head_job *j = h->first, *n; j; j = n) {
		n = j->next;
		free(j);
	}
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
	ns->hq = NULL;
}

void ns_heads_want(struct ns *ns, const char *key, const char *etag)
{
	struct ns_heads *h = ns->hq;
	struct ns_head_job *j;
	size_t b;

	/* the caller has just asked the index; the worker asks again
	 * before its HEAD (another may have answered meanwhile) */
	if (!h || !h->nthreads || !*etag)
		return;
	b = bucket(key);
	pthread_mutex_lock(&h->lock);
	for (j = h->tab[b]; j; j = j->hnext)
		if (!strcmp(j->key, key))
			break;
	if (j || h->queued >= NS_HEADS_QUEUED || h->stop) {
		pthread_mutex_unlock(&h->lock);
		return;
	}
	j = malloc(sizeof(*j) + strlen(key) + 1);
	if (!j) {
		pthread_mutex_unlock(&h->lock);
		return;
	}
	strcpy(j->key, key);
	snprintf(j->etag, sizeof(j->etag), "%s", etag);
	j->next = NULL;
	j->hnext = h->tab[b];
	h->tab[b] = j;
	if (h->last)
		h->last->next = j;
	else
		h->first = j;
	h->last = j;
	h->queued++;
	if (h->idle) /* the others take it when they are done */
		pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

size_t ns_heads_waiting(struct ns *ns)
{
	struct ns_heads *h = ns->hq;
	size_t n = 0;

	if (!h)
		return 0;
	pthread_mutex_lock(&h->lock);
	n = h->queued + h->inflight;
	pthread_mutex_unlock(&h->lock);
	return n;
}
