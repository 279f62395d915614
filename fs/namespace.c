/* SPDX-License-Identifier: MIT */
/*
 * namespace.c - the fs's listings kept in the cache index, so that a
 * remount serves lookups, readdir and opens of everything it has seen
 * before it asks the store, and a mount with the store down serves them
 * at all (docs/semantics.md "The store unreachable").
 *
 * A listing fetched from the store is packed (no lock held) and, if it
 * is settled (no change of ours crossed its LIST), handed to
 * cache_listing_put with the wall-clock time of its fetch, under the
 * lock that orders it with the stale marks of our changes; the flusher
 * writes it off the hot path.  A
 * directory whose listing is not in memory (never seen by this mount, or
 * dropped past the memory bound) is unpacked from the index: fresh if
 * its fetch is less than --refresh ago, as if it had been fetched by
 * this mount, else stale (LISTed again when the store answers, served
 * as it is when it does not).  A change of ours marks it stale in the
 * index too (fs_dir_invalidate).
 *
 * The packed form (version 1, little-endian), the data of one row of the
 * listings table (docs/cache-format.md has the table):
 *
 *   offset  size  field
 *   0       4     magic "FMLS"
 *   4       4     version (1)
 *   8       4     n, the number of entries
 *   12      ...   n entries, sorted by name (strcmp), each:
 *                   2  name length L (1..255)
 *                   L  name (no '/', no NUL)
 *                   1  flags: 1 directory, 2 untyped (zero bytes, type
 *                      not learned)
 *                   1  markers (FS_MARK_*)
 *                   4  ftype (S_IFMT bits of a non-regular file, or 0)
 *                   8  size in bytes
 *                   8  mtime, seconds since the epoch (signed)
 *                   1  ETag length E (< 80)
 *                   E  ETag
 *   end-4   4     CRC32C of everything before it
 *
 * Anything that does not parse (a wrong CRC, a length past the end,
 * names out of order) is not served: the directory is LISTed again, and
 * the log says so once.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_int.h"

#define NS_MAGIC "FMLS"
#define NS_VERSION 1
#define NS_HEAD 12
#define NS_FIXED 25 /* an entry without its name and ETag */

static int64_t wall_ms(void)
{
	return util_wall_ns() / 1000000;
}

void *fs_ns_pack(const struct fs_listing *l, size_t *len_out)
{
	size_t len = NS_HEAD + 4, at = NS_HEAD;
	unsigned char *b;

	for (size_t i = 0; i < l->n; i++)
		len += NS_FIXED + strlen(l->e[i].name) +
		       strnlen(l->e[i].etag, sizeof(l->e[i].etag) - 1);
	b = malloc(len);
	if (!b)
		return NULL; /* only costs a LIST after a remount */
	memcpy(b, NS_MAGIC, 4);
	util_put32le(b + 4, NS_VERSION);
	util_put32le(b + 8, (uint32_t)l->n);
	for (size_t i = 0; i < l->n; i++) {
		const struct fs_entry *e = &l->e[i];
		size_t nl = strlen(e->name);
		size_t el = strnlen(e->etag, sizeof(e->etag) - 1);

		b[at] = (unsigned char)nl;
		b[at + 1] = (unsigned char)(nl >> 8);
		memcpy(b + at + 2, e->name, nl);
		at += 2 + nl;
		b[at] = (unsigned char)((e->is_dir ? 1 : 0) |
					(e->untyped ? 2 : 0));
		b[at + 1] = (unsigned char)e->markers;
		util_put32le(b + at + 2, e->ftype);
		util_put64le(b + at + 6, e->size_bytes);
		util_put64le(b + at + 14, (uint64_t)e->mtime_s);
		b[at + 22] = (unsigned char)el;
		memcpy(b + at + 23, e->etag, el);
		at += 23 + el;
	}
	util_put32le(b + at, util_crc32c(0, b, at));
	*len_out = len;
	return b;
}

void fs_ns_keep(struct fs *fs, const char *dir_key,
		const struct fs_listing *l, const void *packed, size_t len)
{
	uint64_t age = util_now_ms() - l->fetched_ms;

	if (!l->fetched_ms || !packed || !fs->cfg.cache)
		return; /* unsettled: not worth keeping */
	cache_listing_put(fs->cfg.cache, dir_key, packed, len, (uint32_t)l->n,
			  wall_ms() - (int64_t)age);
}

static void ns_bad(const char *dir_key, const char *why)
{
	static atomic_int logged;

	if (!atomic_exchange(&logged, 1))
		fprintf(stderr, "fmfs: the listing of '%s' kept in the cache "
			"index is damaged (%s); listing it again (further "
			"damaged listings are not logged)\n", dir_key, why);
}

/* Unpacks b (len bytes) into l; 0, or -EBADMSG with *why set. */
static int ns_parse(const unsigned char *b, size_t len,
		    struct fs_listing *l, const char **why)
{
	size_t at = NS_HEAD, n;

	if (len < NS_HEAD + 4 || memcmp(b, NS_MAGIC, 4)) {
		*why = "not a listing";
		return -EBADMSG;
	}
	if (util_get32le(b + len - 4) != util_crc32c(0, b, len - 4)) {
		*why = "wrong checksum";
		return -EBADMSG;
	}
	if (util_get32le(b + 4) != NS_VERSION) {
		*why = "unknown version";
		return -EBADMSG;
	}
	n = util_get32le(b + 8);
	len -= 4;
	if (n > FS_LISTING_MAX_ENTRIES || n > len / NS_FIXED) {
		*why = "too many entries";
		return -EBADMSG;
	}
	l->e = calloc(n ? n : 1, sizeof(*l->e));
	if (!l->e)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct fs_entry *e = &l->e[i];
		size_t nl, el;

		if (at + 2 > len || (nl = b[at] | (size_t)b[at + 1] << 8) == 0 ||
		    nl > 255 || at + 2 + nl + 23 > len) {
			*why = "an entry runs past the end";
			return -EBADMSG;
		}
		e->name = strndup((const char *)b + at + 2, nl);
		if (!e->name)
			return -ENOMEM;
		l->n = i + 1; /* freed with l from here on */
		if (strlen(e->name) != nl || strchr(e->name, '/') ||
		    (i && strcmp(l->e[i - 1].name, e->name) >= 0)) {
			*why = "a bad name or names out of order";
			return -EBADMSG;
		}
		at += 2 + nl;
		e->is_dir = b[at] & 1;
		e->untyped = (b[at] & 2) != 0;
		e->markers = b[at + 1];
		e->ftype = util_get32le(b + at + 2);
		e->size_bytes = util_get64le(b + at + 6);
		e->mtime_s = (int64_t)util_get64le(b + at + 14);
		el = b[at + 22];
		if (el >= sizeof(e->etag) || at + 23 + el > len) {
			*why = "an entry runs past the end";
			return -EBADMSG;
		}
		memcpy(e->etag, b + at + 23, el);
		e->etag[el] = '\0';
		at += 23 + el;
	}
	if (at != len) {
		*why = "bytes after the last entry";
		return -EBADMSG;
	}
	return 0;
}

struct fs_listing *fs_ns_load(struct fs *fs, const char *dir_key)
{
	struct fs_listing *l;
	const char *why = NULL;
	void *data;
	size_t len;
	uint32_t entries;
	int64_t fetched, age;
	uint64_t now = util_now_ms();
	int rc;

	if (!fs->cfg.cache ||
	    cache_listing_get(fs->cfg.cache, dir_key, &data, &len, &entries,
			      &fetched))
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		free(data);
		return NULL;
	}
	atomic_store(&l->refs, 1);
	rc = ns_parse(data, len, l, &why);
	free(data);
	if (rc) {
		if (why) {
			ns_bad(dir_key, why);
			cache_listing_stale(fs->cfg.cache, dir_key, false);
		}
		fs_listing_put(l);
		return NULL;
	}
	/* As if this mount had fetched it then: fresh for what is left of
	 * --refresh.  A time in the future (the clock went back) or before
	 * this machine's monotonic clock began: stale. */
	age = wall_ms() - fetched;
	if (fetched > 0 && age >= 0 && (uint64_t)age < now)
		l->fetched_ms = now - (uint64_t)age;
	atomic_fetch_add(&fs->ns_loads, 1);
	return l;
}

/* ---- the store's reachability ---- */

void fs_store_answered(struct fs *fs)
{
	if (!atomic_load_explicit(&fs->connected, memory_order_relaxed) &&
	    !atomic_exchange(&fs->connected, true)) {
		atomic_store(&fs->offline_until_ms, 0);
		fprintf(stderr, "fmfs: the store answers again: connected\n");
	}
}

/* Once a second: trims the inodes past the bound (fs_inodes_trim), and
 * while the store is unreachable, asks it every FS_OFFLINE_MS whether it
 * answers again (a bucket check, one small request), so that the mount
 * reconnects without waiting for a request of the kernel's, and `fmfs
 * status` says when it has. */
static void *prober(void *arg)
{
	struct fs *fs = arg;
	uint64_t next = 0;
	size_t trimmed = 0;

	pthread_mutex_lock(&fs->probe_lock);
	while (!fs->probe_stop) {
		/* Trimming: again soon, while a `find` makes inodes faster
		 * than a round a second would drop them. */
		struct timespec t = util_deadline(trimmed ? 100 : 1000);
		struct cache_stats cs;
		struct obj_error err;

		pthread_cond_timedwait(&fs->probe_cond, &fs->probe_lock, &t);
		if (fs->probe_stop)
			break;
		pthread_mutex_unlock(&fs->probe_lock);
		if (!(trimmed = fs_inodes_trim(fs)) && fs->trim_pending) {
			/* The kernel's FORGETs have freed them: give the
			 * pages back (the fs keeps glibc from doing so
			 * by itself, fs_run's mallopt). */
			fs->trim_pending = false;
			malloc_trim(0);
		}
		fs->trim_pending |= trimmed > 0;
		pthread_mutex_lock(&fs->probe_lock);
		if (fs->probe_stop)
			break;
		cache_get_stats(fs->cfg.cache, &cs);
		if ((atomic_load(&fs->connected) && cs.connected) ||
		    util_now_ms() < next)
			continue;
		pthread_mutex_unlock(&fs->probe_lock);
		if (obj_check_bucket(fs->cfg.st, &err) == OBJ_OK) {
			fs_store_answered(fs);
			cache_store_answered(fs->cfg.cache);
		} else if (err.status == OBJ_ERR_CONNECT ||
			   err.status == OBJ_ERR_TIMEOUT ||
			   err.status == OBJ_ERR_SERVER) {
			fs_obj_errno(fs, err.status, &err);
		}
		next = util_now_ms() + FS_OFFLINE_MS;
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
	       !in->links && !in->unlinked && in->parent;
}

size_t fs_inodes_trim(struct fs *fs)
{
	size_t cap = fs->cfg.inode_max, want, n = 0;
	struct trim_name *v;

	pthread_mutex_lock(&fs->lock);
	if (fs->ninodes <= cap) {
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	/* Down to 90% of the bound, at most FS_TRIM_MAX a round. */
	want = fs->ninodes - cap / 10 * 9;
	if (want > FS_TRIM_MAX)
		want = FS_TRIM_MAX;
	v = malloc(want * sizeof(*v));
	for (size_t i = 0; v && n < want && i < fs->nbuckets; i++) {
		size_t b = (fs->trim_cursor + i) & (fs->nbuckets - 1);

		for (struct fs_inode *in = fs->by_ino[b]; in && n < want;
		     in = in->next_ino) {
			if (!trimmable(fs, in))
				continue;
			v[n].name = strdup(in->name);
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
