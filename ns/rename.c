/* SPDX-License-Identifier: MIT */
/*
 * rename.c - changes of names that are requests to the store: a clean
 * object renamed is a server-side copy and a tombstone for the old key
 * (the write-back deletes it), a dirty one is renamed in the write-back;
 * a directory is every key under its prefix moved so, all or nothing
 * past the key-length check, with the markers of other tools
 * (docs/semantics.md "Rename").  rmdir's markers get tombstones.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_int.h"

/* A dirty file seen as never uploaded (pending) may have been uploaded
 * and left the table since: pinned, it cannot; gone, it is in the bucket
 * now.  Returns whether the bucket may have key. */
bool ns_pin_pending(struct ns *ns, const char *key, bool pending,
			struct cache_wfile **pin)
{
	*pin = NULL;
	return !pending || cache_w_hold(ns->cfg.cache, key, pin);
}

void ns_unpin(struct cache_wfile *pin)
{
	if (pin) {
		cache_w_writer(pin, false);
		cache_w_put(pin);
	}
}

/* The objects of other tools that make directory key ("a/dir/") one
 * (NS_MARK_*) go with it, in the background as the marker does. */
void ns_remove_markers(struct ns *ns, const char *key, unsigned markers)
{
	char k[OBJ_KEY_MAX + 16];
	size_t kl = strlen(key) - 1;

	if (markers & NS_MARK_PLAIN) {
		snprintf(k, sizeof(k), "%.*s", (int)kl, key);
		cache_w_tombstone(ns->cfg.cache, k, false);
	}
	if (markers & NS_MARK_FOLDER) {
		snprintf(k, sizeof(k), "%.*s%s", (int)kl, key,
			 NS_FOLDER_SUFFIX);
		cache_w_tombstone(ns->cfg.cache, k, false);
	}
}

int ns_copy_to(struct ns *ns, const char *from, const char *to)
{
	struct obj_error err;
	struct cache_attr ca;
	char etag[80];
	obj_status st;

	/* The copy replaces whatever was dirty under the new name; an
	 * upload or a DELETE of it still out must not land after it. */
	cache_w_key_begin(ns->cfg.cache, to);
	st = obj_copy(ns->cfg.st, from, to, NULL, 0, etag, &err);
	cache_w_key_end(ns->cfg.cache, to, st == OBJ_OK);
	if (st != OBJ_OK)
		return ns_obj_errno(ns, st, &err);
	/* The copy keeps the metadata: the attributes known for from are
	 * to's, if they were for the version copied (same ETag) or a
	 * directory's marker. */
	if (!cache_attr_get(ns->cfg.cache, from, &ca) &&
	    (!strcmp(ca.etag, etag) || from[strlen(from) - 1] == '/')) {
		snprintf(ca.etag, sizeof(ca.etag), "%s", etag);
		cache_attr_set(ns->cfg.cache, to, &ca);
	} else {
		cache_attr_set(ns->cfg.cache, to, NULL);
	}
	cache_evict_key(ns->cfg.cache, to);
	return 0;
}

/* A copy shows the time of the copy as its Last-Modified: an object that
 * stores no mtime of its own (another tool's, docs/semantics.md "Objects
 * other tools wrote") would change its mtime by a rename.  So such a
 * file's copy is given its metadata with "mtime" (its Last-Modified)
 * added, and its Content-Type: one HEAD more, for files only, and only
 * when the index does not say the object stores an mtime.  Metadata
 * this cannot carry whole (a name S3 would refuse, more entries than a
 * request signs, an "mtime" that does not parse) gets a plain copy.
 * 1: done that way; 0: a plain copy is right; or -errno. */
static int copy_with_mtime(struct ns *ns, const char *from, const char *to)
{
	struct cache_attr ca;
	struct obj_meta m;
	struct obj_error err;
	struct obj_kv *kv;
	char t[32], etag[80];
	obj_status st;
	bool ok;

	if (from[strlen(from) - 1] == '/' ||
	    (!cache_attr_get(ns->cfg.cache, from, &ca) &&
	     (ca.has & CACHE_ATTR_MTIME)))
		return 0;
	atomic_fetch_add(&ns->heads, 1);
	st = obj_head(ns->cfg.st, from, &m, &err);
	if (st != OBJ_OK)
		return ns_obj_errno(ns, st, &err);
	ns_meta_attr(&m, &ca);
	ok = !(ca.has & (CACHE_ATTR_MTIME | CACHE_ATTR_ISDIR)) &&
	     m.nuser < NS_COPY_META_MAX;
	for (size_t i = 0; ok && i < m.nuser; i++)
		ok = obj_meta_name_valid(m.user[i].name) &&
		     strcmp(m.user[i].name, "mtime");
	if (!ok || !(kv = calloc(m.nuser + 1, sizeof(*kv)))) {
		obj_meta_release(&m);
		return 0;
	}
	for (size_t i = 0; i < m.nuser; i++)
		kv[i] = m.user[i];
	snprintf(t, sizeof(t), "%lld", (long long)m.mtime_s);
	kv[m.nuser] = (struct obj_kv){ "mtime", t };
	cache_w_key_begin(ns->cfg.cache, to);
	st = obj_copy_typed(ns->cfg.st, from, to, kv, m.nuser + 1,
			    m.content_type, etag, &err);
	cache_w_key_end(ns->cfg.cache, to, st == OBJ_OK);
	free(kv);
	if (st != OBJ_OK) {
		obj_meta_release(&m);
		return ns_obj_errno(ns, st, &err);
	}
	ca.has |= CACHE_ATTR_MTIME;
	ca.mtime_ns = (int64_t)m.mtime_s * 1000000000;
	snprintf(ca.etag, sizeof(ca.etag), "%s", etag);
	cache_attr_set(ns->cfg.cache, to, &ca);
	cache_evict_key(ns->cfg.cache, to);
	obj_meta_release(&m);
	return 1;
}

/* A clean object from -> to: server-side copy, then the old key goes. */
static int copy_object(struct ns *ns, const char *from, const char *to)
{
	int rc;

	if (ns->cfg.local_only)
		return -EXDEV; /* never in the bucket: mv copies instead */
	rc = copy_with_mtime(ns, from, to);
	if (!rc)
		rc = ns_copy_to(ns, from, to);
	else if (rc > 0)
		rc = 0;
	return rc ? rc : cache_w_tombstone(ns->cfg.cache, from, false);
}

int ns_rename_file(struct ns *ns, const char *from, const char *to,
		       const struct ns_entry *se, const struct ns_entry *de)
{
	struct cache_wfile *pf, *pt = NULL;
	bool from_in = ns_pin_pending(ns, from, se->pending, &pf);
	bool to_in = de && ns_pin_pending(ns, to, de->pending, &pt);
	int rc = cache_w_rename(ns->cfg.cache, from, to, from_in, to_in);

	ns_unpin(pf);
	ns_unpin(pt);
	if (rc != -ENOENT) {
		if (!rc)
			cache_evict_key(ns->cfg.cache, to);
		return rc;
	}
	return copy_object(ns, from, to);
}

struct keys {
	char **k;
	size_t n, cap;
	int err;
};

static void keys_add(struct keys *ks, const char *key)
{
	char **k;

	if (ks->err)
		return;
	if (ks->n == ks->cap) {
		size_t nc = ks->cap ? ks->cap * 2 : 64;

		k = realloc(ks->k, nc * sizeof(*k));
		if (!k) {
			ks->err = -ENOMEM;
			return;
		}
		ks->k = k;
		ks->cap = nc;
	}
	if (!(ks->k[ks->n] = strdup(key)))
		ks->err = -ENOMEM;
	else
		ks->n++;
}

static void keys_free(struct keys *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		free(ks->k[i]);
	free(ks->k);
}

static void bucket_key(void *arg, const struct obj_entry *e)
{
	keys_add(arg, e->key);
}

static void dirty_key(void *arg, const char *key, const struct cache_wattr *a)
{
	if (a)
		keys_add(arg, key);
}

/* -ENAMETOOLONG (logged) if the longest key under the old prefix (of
 * length fl) would not fit the store under to. */
static int rename_dir_fits(struct ns *ns, const struct keys *bucket,
			   const struct keys *dirty, size_t fl, const char *to)
{
	const char *longest = NULL;
	size_t max = 0;
	char nk[2 * OBJ_KEY_MAX + 2];

	for (size_t i = 0; i < bucket->n + dirty->n; i++) {
		const char *k = i < bucket->n ? bucket->k[i] :
						dirty->k[i - bucket->n];

		if (strlen(k) > max)
			max = strlen(k), longest = k;
	}
	if (!longest)
		return 0;
	snprintf(nk, sizeof(nk), "%s%s", to, longest + fl);
	return ns_key_check(ns, nk, "rename");
}

/* A directory that another tool's object makes one (NS_MARK_*, not
 * under the prefix from) stays one under its new name, empty or not:
 * that object is copied to the marker "to" and goes. */
static int move_markers(struct ns *ns, const char *from, const char *to,
			unsigned markers)
{
	char k[OBJ_KEY_MAX + 16];
	int fl = (int)strlen(from) - 1;
	int rc = 0;

	if (markers & NS_MARK_PLAIN) {
		snprintf(k, sizeof(k), "%.*s", fl, from);
		rc = copy_object(ns, k, to);
	}
	if (!rc && (markers & NS_MARK_FOLDER)) {
		snprintf(k, sizeof(k), "%.*s%s", fl, from, NS_FOLDER_SUFFIX);
		rc = copy_object(ns, k, to);
	}
	return rc;
}

/* Every key under the prefix from, in the bucket (not deleted, not
 * dirty) and dirty, moves under to; so do the markers of other tools. */
int ns_rename_dir(struct ns *ns, const char *from, const char *to,
		      unsigned markers)
{
	struct cache *c = ns->cfg.cache;
	struct keys bucket = { 0 }, dirty = { 0 };
	size_t fl = strlen(from);
	char nk[OBJ_KEY_MAX + 2];
	int rc = 0;

	rc = ns_walk(ns, from, bucket_key, &bucket, NULL, 0);
	cache_w_list(c, from, dirty_key, &dirty);
	rc = rc ? rc : bucket.err ? bucket.err : dirty.err;
	if (!rc) /* all or nothing: no key moves if one would not fit */
		rc = rename_dir_fits(ns, &bucket, &dirty, fl, to);
	for (size_t i = 0; !rc && i < bucket.n; i++) {
		struct cache_wfile *w;
		const char *k = bucket.k[i];

		if (!cache_w_get(c, k, &w)) {
			cache_w_put(w); /* dirty: moved below */
			continue;
		}
		if (cache_w_tombstoned(c, k))
			continue;
		if ((size_t)snprintf(nk, sizeof(nk), "%s%s", to, k + fl) >=
		    sizeof(nk))
			rc = -ENAMETOOLONG;
		else
			rc = copy_object(ns, k, nk);
	}
	for (size_t i = 0; !rc && i < dirty.n; i++) {
		if ((size_t)snprintf(nk, sizeof(nk), "%s%s", to,
				     dirty.k[i] + fl) >= sizeof(nk))
			rc = -ENAMETOOLONG;
		else
			rc = cache_w_rename(c, dirty.k[i], nk, false, false);
		if (rc == -ENOENT) /* uploaded meanwhile: copy it */
			rc = copy_object(ns, dirty.k[i], nk);
	}
	if (!rc)
		rc = move_markers(ns, from, to, markers);
	if (!rc) { /* what the index knows of the directory goes along */
		struct cache_attr ca, cur;

		if (!cache_attr_get(c, from, &ca) && cache_attr_get(c, to, &cur))
			cache_attr_set(c, to, &ca);
	}
	if (!rc)
		rc = cache_w_tombstone(c, from, false); /* the marker */
	keys_free(&bucket);
	keys_free(&dirty);
	return rc;
}
