/* SPDX-License-Identifier: MIT */
/*
 * lookup.c - one name, and one directory, as the mount shows them: the
 * write-back's dirty files and tombstones over the listing (ns_find,
 * ns_dir_view), and names the listing does not have asked of the store
 * once the listing is older than the negative bound (probe_name).
 *
 * The listing, the dirty table and the tombstones are three reads, not
 * one: an upload or a DELETE that lands between them could make a name
 * seem missing or still there.  Each such change bumps the directory's
 * generation first (ns_dir_invalidate), so a look whose listing is older
 * than the directory's generation is taken again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_int.h"

static void count_files(void *arg, const char *key,
			const struct cache_wattr *a)
{
	(void)key;
	*(size_t *)arg += a != NULL;
}

/* ---- names the listing does not have ---- */

static uint64_t key_hash(const char *key)
{
	return util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key));
}

/* Whether name (key h), missing from listing l, is to be asked of the
 * store: l and the last answer for that name are older than the
 * negative bound.  With --refresh 0 the listing was just fetched. */
static bool neg_ask(struct ns *ns, const struct ns_listing *l, uint64_t h)
{
	uint64_t now = util_now_ms(), seen = 0;
	uint64_t bound = (uint64_t)ns->cfg.negative_refresh_s * 1000;

	if (!ns->cfg.refresh_s || !l->fetched_ms ||
	    now - l->fetched_ms <= bound || !ns_store_up(ns))
		return false;
	pthread_mutex_lock(&ns->lock);
	if (ns->neg[h % NS_NEG_SLOTS].h == h)
		seen = ns->neg[h % NS_NEG_SLOTS].ms;
	pthread_mutex_unlock(&ns->lock);
	return !seen || now - seen > bound;
}

static void neg_note(struct ns *ns, uint64_t h)
{
	pthread_mutex_lock(&ns->lock);
	ns->neg[h % NS_NEG_SLOTS].h = h;
	ns->neg[h % NS_NEG_SLOTS].ms = util_now_ms();
	pthread_mutex_unlock(&ns->lock);
}

/* One name asked of the store: key is "a/name" (kl: its length).  A LIST
 * with prefix "a/name" and delimiter '/' finds, in one request, the
 * object "a/name", the directory "a/name/" (with a marker or only keys
 * below it) and "a/name_$folder$"; a HEAD finds only the first.  Keys
 * that share the prefix ("name.bak", "name2/") come too: if they fill
 * the page before "a/name_$folder$", which sorts last of the three, the
 * answer is -EAGAIN (undecided).  0 with out filled, or -ENOENT. */
static int probe_name(struct ns *ns, const char *key, size_t kl,
		      struct ns_entry *out)
{
	char folder[OBJ_KEY_MAX + 16];
	struct ns_entry f = { .name = NULL };
	struct obj_list_page pg;
	struct obj_error err;
	const char *last = "";
	bool file = false, dir = false, decided;
	unsigned markers = 0, budget = 1;
	obj_status st;

	snprintf(folder, sizeof(folder), "%s%s", key, NS_FOLDER_SUFFIX);
	atomic_fetch_add(&ns->list_pages, 1);
	st = obj_list(ns->cfg.st, key, "/", NULL, 1000, &pg, &err);
	if (st != OBJ_OK) {
		ns_obj_errno(ns, st, &err);
		return -ENOENT; /* the listing's answer stands */
	}
	for (size_t i = 0; i < pg.nentries; i++) {
		const struct obj_entry *oe = &pg.entries[i];

		if (!oe->key[kl]) {
			file = true;
			f.size_bytes = oe->size_bytes;
			f.mtime_s = oe->mtime_s;
			memcpy(f.etag, oe->etag, sizeof(f.etag));
		} else if (!strcmp(oe->key, folder)) {
			dir = true;
			markers |= NS_MARK_FOLDER;
		}
		if (strcmp(oe->key, last) > 0)
			last = oe->key;
	}
	for (size_t i = 0; i < pg.nprefixes; i++) {
		if (!strcmp(pg.prefixes[i] + kl, "/")) {
			dir = true;
			markers |= NS_MARK_PREFIX;
		}
		if (strcmp(pg.prefixes[i], last) > 0)
			last = pg.prefixes[i];
	}
	decided = !pg.next_token || strcmp(last, folder) >= 0;
	obj_list_page_release(&pg);
	if (!decided)
		return -EAGAIN;
	if (file && !f.size_bytes)
		ns_type_of_empty(ns, key, &f, &budget);
	if (f.is_dir) {
		dir = true;
		markers |= f.markers;
	}
	if (!dir && !file)
		return -ENOENT;
	*out = dir ? (struct ns_entry){ .is_dir = true, .markers = markers } :
	       f;
	return 0;
}

/* The listing's entry for name, or when it has none and is older than
 * the negative bound, the store's (key: "a/name/", kl its length;
 * *gen: the listing's generation).  0 with out filled, -ENOENT, or
 * another -errno. */
static int look_up(struct ns *ns, const char *dir_key, const char *name,
		   char *key, size_t kl, struct ns_entry *out, uint64_t *gen)
{
	uint64_t h;
	int err = 0;

	/* --refresh 0: every lookup asks the store, for that one name (a
	 * whole listing per lookup made `ls -l` of n names cost n LISTs of
	 * n keys).  Undecided, or the store gone meanwhile: as below. */
	if (!ns->cfg.refresh_s && ns_store_up(ns)) {
		*gen = ns_dir_gen(ns, dir_key);
		key[kl - 1] = '\0';
		err = probe_name(ns, key, kl - 1, out);
		key[kl - 1] = '/';
		if (err != -EAGAIN && ns_store_up(ns))
			return err;
	}
	for (int tries = 0;; tries++) {
		struct ns_listing *l = ns_dir_listing(ns, dir_key, &err);
		bool e, ask;

		if (!l)
			return err;
		*gen = l->gen;
		e = ns_listing_find(l, name, out);
		if (e)
			out->name = NULL;
		key[kl - 1] = '\0';
		h = key_hash(key);
		ask = !e && tries == 0 && neg_ask(ns, l, h);
		ns_listing_put(l);
		if (e && out->untyped) { /* past the listing's HEADs */
			unsigned budget = 1;

			ns_type_of_empty(ns, key, out, &budget);
			if (out->is_dir)
				ns_dir_mark_stale(ns, dir_key);
		}
		err = ask ? probe_name(ns, key, kl - 1, out) : -ENOENT;
		key[kl - 1] = '/';
		if (e)
			return 0;
		if (err != -EAGAIN)
			break;
		ns_dir_mark_stale(ns, dir_key); /* undecided: LIST it all */
	}
	if (err == -ENOENT)
		neg_note(ns, h);
	else if (!err) /* readdir shows it too */
		ns_dir_mark_stale(ns, dir_key);
	return err;
}

/* Whether each object that makes directory key ("a/dir/", kl its
 * length) one has a tombstone. */
static bool dir_tombstoned(struct cache *c, char *key, size_t kl,
			   unsigned markers)
{
	char k[OBJ_KEY_MAX + 16];
	bool gone = markers != 0;

	if (markers & NS_MARK_PREFIX)
		gone = cache_w_tombstoned(c, key);
	if (gone && (markers & NS_MARK_PLAIN)) {
		snprintf(k, sizeof(k), "%.*s", (int)kl - 1, key);
		gone = cache_w_tombstoned(c, k);
	}
	if (gone && (markers & NS_MARK_FOLDER)) {
		snprintf(k, sizeof(k), "%.*s%s", (int)kl - 1, key,
			 NS_FOLDER_SUFFIX);
		gone = cache_w_tombstoned(c, k);
	}
	return gone;
}

/* One look at name in dir: the dirty table, else the listing with the
 * tombstones over it.  *gen: the generation of the listing used, or
 * UINT64_MAX when the dirty table answered. */
static int find_once(struct ns *ns, const char *dir_key, const char *name,
		     char *key, size_t kl, struct ns_entry *out, uint64_t *gen)
{
	struct cache *c = ns->cfg.cache;
	const struct ns_entry *e;
	struct cache_wfile *w;
	struct cache_wattr a;
	size_t n = 0;
	int err;

	memset(out, 0, sizeof(*out));
	*gen = UINT64_MAX;
	key[kl - 1] = '\0';
	if (!cache_w_get(c, key, &w) || (key[kl - 1] = '/',
					 !cache_w_get(c, key, &w))) {
		cache_w_stat(w, &a);
		cache_w_put(w);
		ns_entry_from_w(out, &a);
		return 0;
	}
	err = look_up(ns, dir_key, name, key, kl, out, gen);
	if (err && err != -ENOENT)
		return err;
	e = err ? NULL : out;
	if (e && !out->is_dir) {
		key[kl - 1] = '\0';
		if (cache_w_tombstoned(c, key))
			e = NULL;
		key[kl - 1] = '/';
	} else if (e && dir_tombstoned(c, key, kl, out->markers)) {
		cache_w_list(c, key, count_files, &n);
		if (!n)
			e = NULL; /* removed or renamed away */
	}
	if (e)
		return 0;
	/* A directory that only dirty files make exist. */
	n = 0;
	cache_w_list(c, key, count_files, &n);
	if (!n)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->is_dir = true;
	out->pending = true;
	return 0;
}

/* The listing, the dirty table and the tombstones are three reads, not
 * one: an upload or a DELETE that lands between them (its file leaves
 * the table, its tombstone goes) could make a name seem missing or still
 * there.  Each such change bumps the directory's generation first
 * (ns_dir_invalidate from on_done), so a look whose listing is older
 * than the directory's generation is taken again. */
int ns_find(struct ns *ns, const char *dir_key, const char *name,
	    struct ns_entry *out)
{
	char key[OBJ_KEY_MAX + 2];
	uint64_t gen;
	size_t kl;
	int rc;

	if (ns_name_check(name)) {
		memset(out, 0, sizeof(*out));
		return -ENAMETOOLONG;
	}
	if ((size_t)snprintf(key, sizeof(key), "%s%s/", dir_key, name) >=
	    sizeof(key)) {
		memset(out, 0, sizeof(*out));
		return -ENAMETOOLONG;
	}
	kl = strlen(key);
	for (int tries = 0;; tries++) {
		rc = find_once(ns, dir_key, name, key, kl, out, &gen);
		if (gen == UINT64_MAX || gen == ns_dir_gen(ns, dir_key) ||
		    tries == NS_LIST_TRIES - 1)
			return rc;
	}
}

struct view {
	size_t pl;
	struct ns_listing *add;   /* dirty entries */
	size_t cap;
	struct ns_entry *hide;    /* deletions: name + is_dir */
	size_t nhide, hcap;
	int err;
};

static void view_fn(void *arg, const char *key, const struct cache_wattr *a)
{
	struct view *v = arg;
	const char *rest = key + v->pl;
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	char name[1025];

	if (!n || n >= sizeof(name) || v->err)
		return;
	memcpy(name, rest, n);
	name[n] = '\0';
	if (!ns_name_ok(name))
		return;
	if (!a) {
		struct ns_entry *h;

		if (slash && slash[1])
			return; /* deeper: not this directory's business */
		if (v->nhide == v->hcap) {
			size_t nc = v->hcap ? v->hcap * 2 : 16;

			h = realloc(v->hide, nc * sizeof(*h));
			if (!h) {
				v->err = -ENOMEM;
				return;
			}
			v->hide = h;
			v->hcap = nc;
		}
		h = &v->hide[v->nhide];
		memset(h, 0, sizeof(*h));
		h->name = strdup(name);
		h->is_dir = slash != NULL;
		if (!h->name)
			v->err = -ENOMEM;
		else
			v->nhide++;
		return;
	}
	if (slash) {
		v->err = ns_add_entry(v->add, &v->cap, name, true, NULL);
		if (v->err)
			return;
		v->add->e[v->add->n - 1].pending = true;
		if (!slash[1]) /* the directory's own dirty marker */
			ns_entry_from_w(&v->add->e[v->add->n - 1], a);
		return;
	}
	v->err = ns_add_entry(v->add, &v->cap, name, false, NULL);
	if (!v->err)
		ns_entry_from_w(&v->add->e[v->add->n - 1], a);
}

static bool hide_has(const struct view *v, const char *name, bool is_dir)
{
	for (size_t i = 0; i < v->nhide; i++)
		if (v->hide[i].is_dir == is_dir &&
		    !strcmp(v->hide[i].name, name))
			return true;
	return false;
}

/* A file with a tombstone, or a directory each of whose objects has
 * one (dir_tombstoned). */
static bool hidden(const struct view *v, const struct ns_entry *e)
{
	char folder[1025 + sizeof(NS_FOLDER_SUFFIX)];
	bool gone = e->markers != 0;

	if (!e->is_dir)
		return hide_has(v, e->name, false);
	if (e->markers & NS_MARK_PREFIX)
		gone = hide_has(v, e->name, true);
	if (gone && (e->markers & NS_MARK_PLAIN))
		gone = hide_has(v, e->name, false);
	if (gone && (e->markers & NS_MARK_FOLDER)) {
		snprintf(folder, sizeof(folder), "%s%s", e->name,
			 NS_FOLDER_SUFFIX);
		gone = hide_has(v, folder, false);
	}
	return gone;
}

static struct ns_listing *view_once(struct ns *ns, const char *dir_key,
				    int *err)
{
	struct ns_listing *l = ns_dir_listing(ns, dir_key, err), *m;
	struct view v = { .pl = strlen(dir_key) };
	size_t nadd;

	if (!l || !cache_w_list(ns->cfg.cache, dir_key, NULL, NULL))
		return l;
	m = calloc(1, sizeof(*m));
	if (!m) {
		*err = -ENOMEM;
		ns_listing_put(l);
		return NULL;
	}
	atomic_store(&m->refs, 1);
	m->fetched_ms = l->fetched_ms;
	m->gen = l->gen;
	v.add = m;
	cache_w_list(ns->cfg.cache, dir_key, view_fn, &v);
	ns_dedup(m); /* the dirty entries, sorted */
	nadd = m->n;
	for (size_t i = 0; !v.err && i < l->n; i++) {
		struct ns_entry le, *e = &le, *p = NULL;
		size_t lo = 0, hi = nadd;

		ns_listing_at(l, i, &le);
		while (lo < hi) { /* a dirty entry of that name wins */
			size_t mid = (lo + hi) / 2;
			int c = strcmp(m->e[mid].name, e->name);

			if (!c) {
				p = &m->e[mid];
				break;
			}
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (p && p->is_dir && e->is_dir) /* rmdir removes both */
			p->markers |= e->markers;
		if (p || hidden(&v, e))
			continue;
		v.err = ns_add_entry(m, &v.cap, e->name, e->is_dir, NULL);
		if (!v.err) {
			char *nm = m->e[m->n - 1].name;

			m->e[m->n - 1] = *e;
			m->e[m->n - 1].name = nm;
		}
	}
	for (size_t i = 0; i < v.nhide; i++)
		free(v.hide[i].name);
	free(v.hide);
	ns_listing_put(l);
	if (v.err) {
		*err = v.err;
		ns_listing_put(m);
		return NULL;
	}
	ns_dedup(m);
	if ((*err = ns_listing_seal(m))) {
		ns_listing_put(m);
		return NULL;
	}
	return m;
}

/* view_once, taken again while the directory changed under it (see
 * ns_find). */
struct ns_listing *ns_dir_view(struct ns *ns, const char *dir_key, int *err)
{
	for (int tries = 0;; tries++) {
		struct ns_listing *m = view_once(ns, dir_key, err);

		if (!m || m->gen == ns_dir_gen(ns, dir_key) ||
		    tries == NS_LIST_TRIES - 1)
			return m;
		ns_listing_put(m);
	}
}
