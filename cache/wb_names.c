/* SPDX-License-Identifier: MIT */
/*
 * wb_names.c - the write-back's names: tombstones (keys to DELETE),
 * unlink, rename and the listing of dirty files and tombstones under a
 * prefix, which the namespace (ns/) lays over the bucket's listings.
 * Lock order as in wb.c.
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
	h = cache_wb_hash(key);
	t->next = wb->tombs[h];
	wb->tombs[h] = t;
	wb->ntombs++;
	cache_wb_db_tomb(wb, key, true);
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
	for (struct cache_wb_tomb **pp = &wb->tombs[cache_wb_hash(key)]; *pp;
	     pp = &(*pp)->next)
		if (!strcmp((*pp)->key, key)) {
			struct cache_wb_tomb *t = *pp;

			if (t->running)
				return; /* the DELETE is out: let it land */
			*pp = t->next;
			wb->ntombs--;
			cache_wb_db_tomb(wb, key, false); /* key may be t->key */
			free(t);
			return;
		}
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
		cache_wb_lost_version_forget(wb, key);
	pthread_mutex_unlock(&wb->lock);
	if (free_me) {
		cache_wb_uncharge(c, free_me->charged);
		cache_wb_wfile_free(free_me);
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
		cache_wb_wfile_free(free_me);
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
	cache_wb_insert(wb, w);
	if (wb->nlostv)
		cache_wb_lost_version_forget(wb, to);
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
		rc = cache_wb_db_sync(wb);
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
		cache_wb_wfile_free(free_me);
	}
	return rc;
}

int cache_w_tombstone(struct cache *c, const char *key, bool held)
{
	struct cache_wb *wb = c->wb;

	pthread_mutex_lock(&wb->lock);
	cache_wb_tomb_put(wb, key, held);
	if (wb->nlostv)
		cache_wb_lost_version_forget(wb, key);
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
