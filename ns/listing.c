/* SPDX-License-Identifier: MIT */
/*
 * listing.c - directory listings: one ListObjectsV2 with delimiter '/',
 * all pages, made into sorted entries (ns.h says which keys make which
 * names), kept in memory in an LRU under the configured bound and in the
 * cache index (index.c), fresh for refresh_s and served stale while the
 * store is unreachable.
 *
 * Locking: ns->lock protects the listing cache.  Listings are cached by
 * directory key, not on the kernel's inodes, so they outlive the kernel
 * forgetting a directory.  A change of ours (ns_dir_invalidate) bumps the
 * directory's generation; a LIST that was out across one is not kept as
 * fresh.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ns_int.h"

void ns_listing_put(struct ns_listing *l)
{
	unsigned was;

	if (!l)
		return;
	was = atomic_fetch_sub(&l->refs, 1);
	util_assert(was > 0);
	if (was != 1)
		return;
	if (l->e)
		for (size_t i = 0; i < l->n; i++)
			free(l->e[i].name);
	if (l->p)
		for (size_t i = 0; i < l->n; i++)
			util_etag_free(&l->p[i].etag);
	free(l->e);
	free(l->p);
	free(l->names);
	free(l->attrs);
	free(l);
}

int ns_listing_seal(struct ns_listing *l)
{
	size_t nb = 0, na = 0, at = 0, ai = 0;
	struct ns_pent *p;
	struct ns_pattr *a = NULL;
	char *names;

	if (!l->e)
		return 0; /* sealed, or empty */
	for (size_t i = 0; i < l->n; i++) {
		nb += strlen(l->e[i].name) + 1;
		na += l->e[i].has_attr;
	}
	if (nb > UINT32_MAX)
		return -ENOMEM; /* NS_LISTING_MAX_ENTRIES keeps it under */
	p = calloc(l->n ? l->n : 1, sizeof(*p));
	names = malloc(nb ? nb : 1);
	if (na)
		a = malloc(na * sizeof(*a));
	if (!p || !names || (na && !a)) {
		free(p);
		free(names);
		free(a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < l->n; i++) {
		const struct ns_entry *e = &l->e[i];
		struct ns_pent *q = &p[i];
		size_t len = strlen(e->name) + 1;

		memcpy(names + at, e->name, len);
		q->name = (uint32_t)at;
		at += len;
		q->size_bytes = e->size_bytes;
		q->mtime_s = e->mtime_s;
		util_etag_set(&q->etag, e->etag);
		q->flags = (uint8_t)((e->is_dir ? NS_PF_DIR : 0) |
				     (e->pending ? NS_PF_PENDING : 0) |
				     (e->untyped ? NS_PF_UNTYPED : 0) |
				     (e->no_meta ? NS_PF_NO_META : 0));
		q->markers = (uint8_t)e->markers;
		q->ftype = (uint8_t)((e->ftype & S_IFMT) >> 12);
		q->attr = UINT32_MAX;
		if (e->has_attr) {
			a[ai] = (struct ns_pattr){
				.mode = e->mode, .uid = e->uid, .gid = e->gid,
				.rdev = e->rdev, .mtime_ns = e->mtime_ns,
				.ctime_ns = e->ctime_ns, .atime_ns = e->atime_ns,
			};
			q->attr = (uint32_t)ai++;
		}
		free(e->name);
	}
	free(l->e);
	l->e = NULL;
	l->p = p;
	l->names = names;
	l->attrs = a;
	return 0;
}

const char *ns_listing_name(const struct ns_listing *l, size_t i)
{
	return l->names + l->p[i].name;
}

void ns_listing_at(const struct ns_listing *l, size_t i,
		   struct ns_entry *out)
{
	const struct ns_pent *q = &l->p[i];

	memset(out, 0, sizeof(*out));
	out->name = l->names + q->name;
	out->is_dir = q->flags & NS_PF_DIR;
	out->pending = (q->flags & NS_PF_PENDING) != 0;
	out->untyped = (q->flags & NS_PF_UNTYPED) != 0;
	out->no_meta = (q->flags & NS_PF_NO_META) != 0;
	out->markers = q->markers;
	out->ftype = (uint32_t)q->ftype << 12;
	out->size_bytes = q->size_bytes;
	out->mtime_s = q->mtime_s;
	util_etag_text(&q->etag, out->etag);
	if (q->attr != UINT32_MAX) {
		const struct ns_pattr *a = &l->attrs[q->attr];

		out->has_attr = true;
		out->mode = a->mode;
		out->uid = a->uid;
		out->gid = a->gid;
		out->rdev = a->rdev;
		out->mtime_ns = a->mtime_ns;
		out->ctime_ns = a->ctime_ns;
		out->atime_ns = a->atime_ns;
	}
}

/* A name a local disk could hold: skipped in listings otherwise (a name
 * over NAME_MAX could be listed but not looked up). */
bool ns_name_ok(const char *n)
{
	return *n && strcmp(n, ".") && strcmp(n, "..") && !ns_name_check(n);
}

static int cmp_entry(const void *a, const void *b)
{
	const struct ns_entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	/* Same name: the directory first, so dedup keeps it; of two
	 * directories (a dirty marker and one implied by a dirty file below
	 * it) the one with attributes. */
	if (c)
		return c;
	if (x->is_dir != y->is_dir)
		return (int)y->is_dir - (int)x->is_dir;
	return (int)y->has_attr - (int)x->has_attr;
}

int ns_add_entry(struct ns_listing *l, size_t *cap, const char *name,
		     bool is_dir, const struct obj_entry *oe)
{
	struct ns_entry *e;

	if (l->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;

		if (nc > NS_LISTING_MAX_ENTRIES)
			return -E2BIG;
		e = realloc(l->e, nc * sizeof(*e));
		if (!e)
			return -ENOMEM;
		l->e = e;
		*cap = nc;
	}
	e = &l->e[l->n];
	memset(e, 0, sizeof(*e));
	e->name = strdup(name);
	if (!e->name)
		return -ENOMEM;
	e->is_dir = is_dir;
	if (oe) {
		e->size_bytes = oe->size_bytes;
		e->mtime_s = oe->mtime_s;
		memcpy(e->etag, oe->etag, sizeof(e->etag));
		e->no_meta = oe->no_meta;
	}
	l->n++;
	return 0;
}

/* Sorts l and keeps one entry per name (the directory if both); a
 * directory made by several objects keeps the markers of each, for
 * rmdir to remove them all. */
void ns_dedup(struct ns_listing *l)
{
	size_t w = 0;

	if (l->n) /* l->e may be NULL, and qsort's is declared nonnull */
		qsort(l->e, l->n, sizeof(*l->e), cmp_entry);
	for (size_t r = 0; r < l->n; r++) {
		if (w && !strcmp(l->e[w - 1].name, l->e[r].name)) {
			if (l->e[w - 1].is_dir && l->e[r].is_dir)
				l->e[w - 1].markers |= l->e[r].markers;
			free(l->e[r].name);
			continue;
		}
		l->e[w++] = l->e[r];
	}
	l->n = w;
}

/* The type of a zero-byte object key (e: its entry, from a listing):
 * older s3fs writes a directory "a/dir" as such an object with
 * x-amz-meta-mode S_IFDIR.  A listing carries no metadata, so the
 * answer of one HEAD is kept in the cache index for that version (its
 * ETag), as any HEAD's attributes are, and later listings and mounts of
 * the cache dir ask nothing.  *budget: the HEADs the caller may still
 * make; past it, or with the store down, e stays an untyped file. */
void ns_type_of_empty(struct ns *ns, const char *key,
			  struct ns_entry *e, unsigned *budget)
{
	struct cache_attr a;
	struct obj_meta m;
	struct obj_error err;
	obj_status st;

	if (e->no_meta) { /* no mode, no Content-Type: a file */
		e->untyped = false;
		return;
	}
	if (cache_attr_get(ns->cfg.cache, key, &a) ||
	    strcmp(a.etag, e->etag)) {
		if (!*budget || !ns_store_up(ns)) {
			e->untyped = true;
			return;
		}
		(*budget)--;
		atomic_fetch_add(&ns->heads, 1);
		st = obj_head(ns->cfg.st, key, &m, &err);
		if (st == OBJ_ERR_NOT_FOUND)
			return; /* gone since the LIST: a file, as listed */
		if (st != OBJ_OK) {
			ns_obj_errno(ns, st, &err);
			*budget = 0;
			e->untyped = true;
			return;
		}
		ns_meta_attr(&m, &a);
		obj_meta_release(&m);
		cache_attr_set(ns->cfg.cache, key, &a);
	}
	e->untyped = false;
	if (((a.has & CACHE_ATTR_MODE) && S_ISDIR(a.mode)) ||
	    (a.has & CACHE_ATTR_ISDIR)) {
		e->is_dir = true;
		e->markers |= NS_MARK_PLAIN;
		e->size_bytes = 0;
	}
}

/* Adds the object key (name in its directory) to l: "x_$folder$" as
 * directory x, a zero-byte object as what its mode says. */
static int add_object(struct ns *ns, struct ns_listing *l, size_t *cap,
		      const char *name, const struct obj_entry *oe,
		      unsigned *budget)
{
	size_t nl = strlen(name), sl = strlen(NS_FOLDER_SUFFIX);
	char base[1025];
	int rc;

	if (nl > sl && nl - sl < sizeof(base) &&
	    !strcmp(name + nl - sl, NS_FOLDER_SUFFIX)) {
		memcpy(base, name, nl - sl);
		base[nl - sl] = '\0';
		if (ns_name_ok(base)) {
			rc = ns_add_entry(l, cap, base, true, NULL);
			if (!rc)
				l->e[l->n - 1].markers = NS_MARK_FOLDER;
			return rc;
		}
	}
	rc = ns_add_entry(l, cap, name, false, oe);
	if (!rc && oe->size_bytes == 0)
		ns_type_of_empty(ns, oe->key, &l->e[l->n - 1], budget);
	return rc;
}

/* Lists dir->key fully into a new listing. */
static int fetch_listing(struct ns *ns, const char *dir_key,
			 struct ns_listing **out)
{
	struct ns_listing *l = calloc(1, sizeof(*l));
	size_t plen = strlen(dir_key), cap = 0;
	unsigned budget = NS_PROBE_MAX;
	char *token = NULL;
	int rc = 0;

	if (!l)
		return -ENOMEM;
	atomic_store(&l->refs, 1);
	atomic_fetch_add(&ns->listings, 1);
	do {
		struct obj_list_page pg;
		struct obj_error err;
		obj_status st;

		atomic_fetch_add(&ns->lists_busy, 1);
		st = obj_list(ns->cfg.st, dir_key, "/", token, 1000, &pg,
			      &err);
		atomic_store(&ns->list_end_ms, util_now_ms());
		atomic_fetch_sub(&ns->lists_busy, 1);
		free(token);
		token = NULL;
		atomic_fetch_add(&ns->list_pages, 1);
		if (st != OBJ_OK) {
			rc = ns_obj_errno(ns, st, &err);
			break;
		}
		for (size_t i = 0; !rc && i < pg.nentries; i++) {
			const char *n = pg.entries[i].key + plen;

			if (!*n)
				continue; /* the directory's own marker */
			if (!ns_name_ok(n)) {
				atomic_fetch_add(&ns->skipped_names, 1);
				continue;
			}
			rc = add_object(ns, l, &cap, n, &pg.entries[i],
					&budget);
		}
		for (size_t i = 0; !rc && i < pg.nprefixes; i++) {
			char *n = pg.prefixes[i] + plen;
			size_t nl = strlen(n);

			if (nl)
				n[nl - 1] = '\0'; /* drop the '/' */
			if (!ns_name_ok(n)) {
				atomic_fetch_add(&ns->skipped_names, 1);
				continue;
			}
			rc = ns_add_entry(l, &cap, n, true, NULL);
			if (!rc)
				l->e[l->n - 1].markers = NS_MARK_PREFIX;
		}
		if (!rc && pg.next_token && !(token = strdup(pg.next_token)))
			rc = -ENOMEM;
		obj_list_page_release(&pg);
	} while (!rc && token);
	free(token);
	if (rc) {
		ns_listing_put(l);
		return rc;
	}
	ns_dedup(l);
	if ((rc = ns_listing_seal(l))) {
		ns_listing_put(l);
		return rc;
	}
	l->fetched_ms = util_now_ms();
	ns_store_answered(ns);
	*out = l;
	return 0;
}

static bool fresh(const struct ns *ns, uint64_t ms)
{
	return ms && util_now_ms() - ms < (uint64_t)ns->cfg.refresh_s * 1000;
}

static void lru_unlink(struct ns *ns, struct ns_dircache *d)
{
	if (d->lru_prev)
		d->lru_prev->lru_next = d->lru_next;
	else
		ns->dir_lru = d->lru_next;
	if (d->lru_next)
		d->lru_next->lru_prev = d->lru_prev;
	else
		ns->dir_lru_tail = d->lru_prev;
	d->lru_prev = d->lru_next = NULL;
}

static void lru_front(struct ns *ns, struct ns_dircache *d)
{
	d->lru_prev = NULL;
	d->lru_next = ns->dir_lru;
	if (ns->dir_lru)
		ns->dir_lru->lru_prev = d;
	else
		ns->dir_lru_tail = d;
	ns->dir_lru = d;
}

/* The cached listing of key (a new reference), or NULL.  Lock held. */
static struct ns_listing *dircache_get(struct ns *ns, const char *key)
{
	for (struct ns_dircache *d = ns->dirs[ns_hash_key(key)]; d;
	     d = d->next)
		if (!strcmp(d->key, key)) {
			lru_unlink(ns, d);
			lru_front(ns, d);
			atomic_fetch_add(&d->l->refs, 1);
			return d->l;
		}
	return NULL;
}

/* Drops the listing used longest ago (past the memory bound; the index
 * keeps it, ns_load brings it back). */
static void dircache_drop_oldest(struct ns *ns)
{
	struct ns_dircache *d = ns->dir_lru_tail, **pp;

	if (!d)
		return;
	for (pp = &ns->dirs[ns_hash_key(d->key)]; *pp != d;
	     pp = &(*pp)->next)
		;
	*pp = d->next;
	lru_unlink(ns, d);
	ns->dir_entries -= d->l->n;
	ns_listing_put(d->l);
	free(d->key);
	free(d);
	ns->ndirs--;
}

/* Installs l (taking over the caller's reference) as key's listing. */
static void dircache_put(struct ns *ns, const char *key,
			 struct ns_listing *l)
{
	size_t b = ns_hash_key(key);
	struct ns_dircache *d;

	for (d = ns->dirs[b]; d; d = d->next)
		if (!strcmp(d->key, key)) {
			ns->dir_entries += l->n - d->l->n;
			ns_listing_put(d->l);
			d->l = l;
			lru_unlink(ns, d);
			lru_front(ns, d);
			break;
		}
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d || !(d->key = strdup(key))) {
			free(d);
			ns_listing_put(l);
			return;
		}
		d->l = l;
		d->next = ns->dirs[b];
		ns->dirs[b] = d;
		lru_front(ns, d);
		ns->ndirs++;
		ns->dir_entries += l->n;
	}
	/* The bound: never the listing just put (one directory larger than
	 * the bound is still served from memory while it is used). */
	while (ns->dir_lru_tail != d &&
	       (ns->ndirs > NS_DIRCACHE_MAX ||
		ns->dir_entries > ns->cfg.listing_mem_entries))
		dircache_drop_oldest(ns);
}

/* The generation of dir_key's listing: its own changes and those of a
 * tree rename (a sum: either moving changes it). */
uint64_t ns_dir_gen(struct ns *ns, const char *dir_key)
{
	return atomic_load(&ns->dir_gen) +
	       atomic_load(&ns->dir_gens[ns_hash_key(dir_key) %
					 NS_DIR_GENS]);
}

struct ns_listing *ns_dir_listing(struct ns *ns, const char *dir_key,
				  int *err)
{
	struct ns_listing *l, *nl;
	uint64_t gen, marks;
	void *packed;
	size_t plen = 0;

	*err = 0;
	/* The generation with the look: a change of ours (ns_dir_invalidate,
	 * under the lock) is before both, and marked the index too, or
	 * after both, and changes it. */
	pthread_mutex_lock(&ns->lock);
	l = dircache_get(ns, dir_key);
	gen = ns_dir_gen(ns, dir_key);
	marks = atomic_load(&ns->stale_marks);
	pthread_mutex_unlock(&ns->lock);
	if (!l && (nl = ns_load(ns, dir_key))) {
		/* Known from the index (a remount, or dropped from memory):
		 * as if LISTed then; a change of ours meanwhile makes it
		 * stale, as it would a LIST's.  Another thread may have put
		 * one meanwhile: that one stays. */
		pthread_mutex_lock(&ns->lock);
		l = dircache_get(ns, dir_key);
		if (!l) {
			nl->gen = gen;
			if (gen != ns_dir_gen(ns, dir_key) ||
			    marks != atomic_load(&ns->stale_marks))
				nl->fetched_ms = 0;
			atomic_fetch_add(&nl->refs, 1);
			dircache_put(ns, dir_key, nl);
			l = nl;
			nl = NULL;
		}
		pthread_mutex_unlock(&ns->lock);
		ns_listing_put(nl);
	}
	if (l && (fresh(ns, l->fetched_ms) || !ns_store_up(ns)))
		return l;
	/* Two threads may fetch the same directory at once; the later
	 * result replaces the earlier.  Rare, and simpler than a lock per
	 * directory key.  A change (ns_dir_invalidate) while the LIST was
	 * out may have been missed by it: then it is fetched again. */
	for (int tries = 0;; tries++) {
		gen = ns_dir_gen(ns, dir_key);
		*err = fetch_listing(ns, dir_key, &nl);
		if (*err || gen == ns_dir_gen(ns, dir_key) ||
		    tries == NS_LIST_TRIES - 1)
			break;
		ns_listing_put(nl);
	}
	if (*err == 0) {
		ns_listing_put(l);
		packed = ns_pack(nl, &plen);
		atomic_fetch_add(&nl->refs, 1);
		pthread_mutex_lock(&ns->lock);
		nl->gen = gen;
		if (gen != ns_dir_gen(ns, dir_key))
			nl->fetched_ms = 0; /* unsettled: not kept as fresh */
		/* Under the lock: a change of ours (ns_dir_invalidate) is
		 * either before (unsettled, not kept) or marks it after. */
		ns_keep(ns, dir_key, nl, packed, plen);
		dircache_put(ns, dir_key, nl);
		pthread_mutex_unlock(&ns->lock);
		free(packed);
		return nl;
	}
	if (l)
		*err = 0; /* store unreachable: the stale listing beats none */
	return l;
}

bool ns_listing_find(const struct ns_listing *l, const char *name,
		     struct ns_entry *out)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(ns_listing_name(l, mid), name);

		if (!c) {
			ns_listing_at(l, mid, out);
			return true;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

int ns_resolve(struct ns *ns, const char *path, struct ns_entry *out,
	       char *key, size_t key_len)
{
	struct ns_entry cur = { .name = NULL, .is_dir = true };
	size_t kl = 0;

	key[0] = '\0';
	while (*path) {
		struct ns_listing *l;
		char name[1025];
		size_t n = strcspn(path, "/");
		int err = 0;

		if (n == 0) {
			path++;
			continue;
		}
		if (n >= sizeof(name) || kl + n + 2 > key_len)
			return -ENAMETOOLONG;
		if (!cur.is_dir)
			return -ENOTDIR;
		memcpy(name, path, n);
		name[n] = '\0';
		l = ns_dir_listing(ns, key, &err);
		if (!l)
			return err;
		if (!ns_listing_find(l, name, &cur)) {
			ns_listing_put(l);
			return -ENOENT;
		}
		cur.name = NULL;
		ns_listing_put(l);
		kl += (size_t)snprintf(key + kl, key_len - kl, "%s%s", name,
				       cur.is_dir ? "/" : "");
		path += n;
	}
	*out = cur;
	return 0;
}


void ns_dir_invalidate(struct ns *ns, const char *dir_key, bool prefix)
{
	size_t kl = strlen(dir_key);

	/* Marked old, not dropped: while the store is unreachable a stale
	 * listing still beats none. */
	pthread_mutex_lock(&ns->lock);
	if (prefix)
		atomic_fetch_add(&ns->dir_gen, 1);
	else
		atomic_fetch_add(&ns->dir_gens[ns_hash_key(dir_key) %
					       NS_DIR_GENS], 1);
	for (size_t b = 0; b < NS_DIR_BUCKETS; b++) {
		if (!prefix)
			b = ns_hash_key(dir_key);
		for (struct ns_dircache *d = ns->dirs[b]; d; d = d->next)
			if (prefix ? !strncmp(d->key, dir_key, kl) :
			    !strcmp(d->key, dir_key))
				d->l->fetched_ms = 0;
		if (!prefix)
			break;
	}
	if (ns->cfg.cache) /* and in the index, for a remount */
		cache_listing_stale(ns->cfg.cache, dir_key, prefix);
	pthread_mutex_unlock(&ns->lock);
}

/* The cached listing of dir_key is older than the bucket: the next
 * look fetches it again (no generation bump: nothing of ours moved). */
void ns_dir_mark_stale(struct ns *ns, const char *dir_key)
{
	pthread_mutex_lock(&ns->lock);
	for (struct ns_dircache *d = ns->dirs[ns_hash_key(dir_key)]; d;
	     d = d->next)
		if (!strcmp(d->key, dir_key))
			d->l->fetched_ms = 0;
	if (ns->cfg.cache)
		cache_listing_stale(ns->cfg.cache, dir_key, false);
	atomic_fetch_add(&ns->stale_marks, 1);
	pthread_mutex_unlock(&ns->lock);
}
