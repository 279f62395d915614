/* SPDX-License-Identifier: MIT */
/*
 * prober.c - the fs's one background thread: once a second it trims the
 * inodes past the bound (fs_inodes_trim, the oldest first), gives the
 * heap's free pages back once inode frees stop, and while the store is
 * unreachable it asks it every NS_OFFLINE_MS whether it answers again
 * (ns_store_probe, one small request), so that the mount reconnects
 * without waiting for a request of the kernel's, and `fmfs status` says
 * when it has.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

static void *prober(void *arg)
{
	struct fs *fs = arg;
	uint64_t next = 0, freed_seen = 0, freed_at_trim = 0;
	size_t trimmed = 0;

	pthread_mutex_lock(&fs->probe_lock);
	while (!fs->probe_stop) {
		/* Trimming: again soon, while a `find` makes inodes faster
		 * than a round a second would drop them. */
		struct timespec t = util_deadline(trimmed ? 100 : 1000);
		struct cache_stats cs;

		pthread_cond_timedwait(&fs->probe_cond, &fs->probe_lock, &t);
		if (fs->probe_stop)
			break;
		pthread_mutex_unlock(&fs->probe_lock);
		trimmed = fs_inodes_trim(fs);
		pthread_mutex_lock(&fs->lock);
		uint64_t freed = fs->inodes_freed;
		pthread_mutex_unlock(&fs->lock);
		if (freed != freed_seen) {
			freed_seen = freed; /* still freeing: a round more */
		} else if (freed != freed_at_trim && !trimmed) {
			/* A walk's inodes (the kernel's FORGETs, ours or
			 * its own) and listings are freed and nothing more
			 * goes: give the free pages back, which the fs keeps
			 * glibc from doing by itself (serve's mallopt).
			 * About 20 MB after `find` over 200,000 objects
			 * (docs/performance.md "Memory per inode"). */
			freed_at_trim = freed;
			malloc_trim(0);
		}
		pthread_mutex_lock(&fs->probe_lock);
		if (fs->probe_stop)
			break;
		cache_get_stats(fs->cfg.cache, &cs);
		if ((ns_connected(fs->ns) && cs.connected) ||
		    util_now_ms() < next)
			continue;
		pthread_mutex_unlock(&fs->probe_lock);
		if (ns_store_probe(fs->ns))
			cache_store_answered(fs->cfg.cache);
		next = util_now_ms() + NS_OFFLINE_MS;
		pthread_mutex_lock(&fs->probe_lock);
	}
	pthread_mutex_unlock(&fs->probe_lock);
	return NULL;
}

int fs_probe_start(struct fs *fs)
{
	int rc;

	pthread_mutex_init(&fs->probe_lock, NULL);
	util_cond_init(&fs->probe_cond);
	rc = pthread_create(&fs->probe_thread, NULL, prober, fs);
	fs->probe_started = rc == 0;
	return -rc;
}

void fs_probe_stop(struct fs *fs)
{
	if (!fs->probe_started)
		return;
	pthread_mutex_lock(&fs->probe_lock);
	fs->probe_stop = true;
	pthread_cond_signal(&fs->probe_cond);
	pthread_mutex_unlock(&fs->probe_lock);
	pthread_join(fs->probe_thread, NULL);
	pthread_mutex_destroy(&fs->probe_lock);
	pthread_cond_destroy(&fs->probe_cond);
	fs->probe_started = false;
}

/* ---- the bound on inodes ---- */

struct trim_name {
	fuse_ino_t parent;
	char *name;
};

/* Whether the kernel may be asked to let go of in: a name it looked up
 * that nothing of ours needs (no open handle, no hard link, no child
 * inode: the leaves go first, their directories at a later round). */
static bool trimmable(const struct fs *fs, const struct fs_inode *in)
{
	return in != fs->root && in->nlookup && !in->nopen && !in->children &&
	       !fs_xr(in)->links && !in->unlinked && in->parent;
}

/* The k-th smallest (0-based) of the n values a (reordered): Hoare's
 * selection, n > k. */
static uint64_t kth_smallest(uint64_t *a, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint64_t p = a[lo + (hi - lo) / 2], t;
		size_t i = lo, j = hi;

		while (i <= j) {
			while (a[i] < p)
				i++;
			while (a[j] > p)
				j--;
			if (i <= j) {
				t = a[i], a[i] = a[j], a[j] = t;
				i++;
				if (j-- == 0)
					break;
			}
		}
		if (k <= j && j != (size_t)-1)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			break;
	}
	return a[k];
}

/* The node id at or below which the want oldest trimmable inodes lie
 * (node ids grow with each new inode): the names dropped are the
 * walk's oldest, so what stays was made last, on the heap's latest
 * pages, and the pages of the dropped ones come free whole for
 * malloc_trim (docs/performance.md "Memory per inode").  UINT64_MAX:
 * any (fewer trimmable than want, or no memory to choose).  Lock
 * held. */
static uint64_t oldest_bound(struct fs *fs, size_t want)
{
	uint64_t *ids = malloc(fs->ninodes * sizeof(*ids)), t = UINT64_MAX;
	size_t m = 0;

	for (size_t b = 0; ids && b < fs->nbuckets; b++)
		for (struct fs_inode *in = fs->by_ino[b];
		     in && m < fs->ninodes; in = in->next_ino)
			if (trimmable(fs, in))
				ids[m++] = in->ino;
	if (ids && m > want)
		t = kth_smallest(ids, m, want - 1);
	free(ids);
	return t;
}

size_t fs_inodes_trim(struct fs *fs)
{
	size_t cap = fs->cfg.inode_max, want, n = 0;
	struct trim_name *v;
	uint64_t bound;

	pthread_mutex_lock(&fs->lock);
	if (fs->ninodes <= cap) {
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	/* Down to 90% of the bound, at most FS_TRIM_MAX a round, the
	 * oldest first. */
	want = fs->ninodes - cap / 10 * 9;
	if (want > FS_TRIM_MAX)
		want = FS_TRIM_MAX;
	bound = oldest_bound(fs, want);
	v = malloc(want * sizeof(*v));
	for (size_t i = 0; v && n < want && i < fs->nbuckets; i++) {
		size_t b = (fs->trim_cursor + i) & (fs->nbuckets - 1);

		for (struct fs_inode *in = fs->by_ino[b]; in && n < want;
		     in = in->next_ino) {
			if (!trimmable(fs, in) || in->ino > bound)
				continue;
			v[n].name = strdup(fs_iname(in));
			if (!v[n].name)
				break;
			v[n++].parent = in->parent->ino;
		}
		if (n == want)
			fs->trim_cursor = b + 1;
	}
	pthread_mutex_unlock(&fs->lock);
	/* No lock held: the kernel answers with FORGETs, which our workers
	 * take fs->lock for.  A parent gone meanwhile only gets -ENOENT. */
	for (size_t i = 0; i < n; i++) {
		if (!fuse_session_exited(fs->se))
			fuse_lowlevel_notify_inval_entry(fs->se, v[i].parent,
							 v[i].name,
							 strlen(v[i].name));
		free(v[i].name);
	}
	free(v);
	atomic_fetch_add(&fs->trimmed, n);
	return n;
}
