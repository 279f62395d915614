/* SPDX-License-Identifier: MIT */
/*
 * inode.c - the inode table and the directory listings of the fs module.
 *
 * A directory is a key prefix ending in '/'; its listing is one
 * ListObjectsV2 with delimiter '/', all pages, kept for refresh_s seconds
 * and answering lookups (positive and negative) and readdir without more
 * requests, so `ls -l` of a prefix costs its LIST pages and no HEAD per
 * entry.  Names that cannot be path components (empty, ".", "..", with
 * a NUL, longer than NAME_MAX) are skipped and counted; a name that is both an object and a
 * prefix shows as the directory (as Mountpoint does).  Directory marker
 * objects ("dir/") make the directory exist and are not shown; so do
 * those of other tools, "dir_$folder$" (Hadoop) and a zero-byte "dir"
 * whose x-amz-meta-mode says S_IFDIR (older s3fs), which a listing can
 * only tell by a HEAD (type_of_empty).  A name missing from a listing
 * older than the negative bound is asked of the store (probe_name).
 *
 * Inodes are created on lookup/readdirplus and live while the kernel
 * holds a reference (nlookup) or a child does.  Locking: fs->lock protects
 * the tables, attributes and the listing cache.  Listings are cached by
 * directory key, not on inodes, so they outlive the kernel forgetting a
 * directory and can be served stale while the store is unreachable.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_int.h"

static size_t hash_ino(const struct fs *fs, fuse_ino_t ino)
{
	return (size_t)(ino * 0x9E3779B97F4A7C15ull) & (fs->nbuckets - 1);
}

static size_t hash_name(const struct fs *fs, fuse_ino_t parent,
			const char *name)
{
	uint64_t h = 1469598103934665603ull ^ parent;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 1099511628211ull;
	return (size_t)h & (fs->nbuckets - 1);
}

/* An inode's key and name in one allocation ("key\0name\0": a malloc
 * less per inode, some 30 bytes of memory): in->key is the block and
 * in->name points into it.  The key is prefix + rest; NULL when out of
 * memory. */
static char *names_block(const char *prefix, const char *rest,
			 const char *name, char **name_out)
{
	size_t pl = strlen(prefix), rl = strlen(rest), nl = strlen(name);
	char *b = malloc(pl + rl + nl + 2);

	if (!b)
		return NULL;
	memcpy(b, prefix, pl);
	memcpy(b + pl, rest, rl);
	b[pl + rl] = '\0';
	memcpy(b + pl + rl + 1, name, nl + 1);
	*name_out = b + pl + rl + 1;
	return b;
}

int fs_inodes_init(struct fs *fs)
{
	struct fs_inode *root;

	fs->nbuckets = 1 << 16;
	fs->by_ino = calloc(fs->nbuckets, sizeof(*fs->by_ino));
	fs->by_name = calloc(fs->nbuckets, sizeof(*fs->by_name));
	root = calloc(1, sizeof(*root));
	if (!fs->by_ino || !fs->by_name || !root)
		goto nomem;
	root->ino = FUSE_ROOT_ID;
	root->key = names_block("", "", "", &root->name);
	if (!root->key)
		goto nomem;
	root->is_dir = true;
	root->nlookup = 1; /* the kernel's implicit reference */
	fs->dirs = calloc(fs->nbuckets, sizeof(*fs->dirs));
	if (!fs->dirs)
		goto nomem;
	fs->root = root;
	fs->next_ino = FUSE_ROOT_ID + 1;
	fs->by_ino[hash_ino(fs, root->ino)] = root;
	fs->ninodes = 1;
	return 0;
nomem:
	if (root)
		free(root->key);
	free(root);
	free(fs->by_ino);
	free(fs->by_name);
	free(fs->dirs);
	return -ENOMEM;
}

void fs_listing_put(struct fs_listing *l)
{
	unsigned was;

	if (!l)
		return;
	was = atomic_fetch_sub(&l->refs, 1);
	util_assert(was > 0);
	if (was != 1)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i].name);
	free(l->e);
	free(l);
}

static void inode_free(struct fs_inode *in)
{
	cache_w_put(in->w_dead);
	obj_kv_free(in->meta, in->nmeta);
	free(in->key); /* the name with it */
	free(in);
}

void fs_inodes_free(struct fs *fs)
{
	fs_links_free(fs);
	for (size_t b = 0; b < fs->nbuckets; b++) {
		struct fs_inode *in = fs->by_ino[b];

		while (in) {
			struct fs_inode *next = in->next_ino;

			inode_free(in);
			in = next;
		}
		for (struct fs_dircache *d = fs->dirs[b], *n; d; d = n) {
			n = d->next;
			fs_listing_put(d->l);
			free(d->key);
			free(d);
		}
	}
	free(fs->by_ino);
	free(fs->by_name);
	free(fs->dirs);
}

struct fs_inode *fs_inode_get(struct fs *fs, fuse_ino_t ino)
{
	struct fs_inode *in;

	pthread_mutex_lock(&fs->lock);
	for (in = fs->by_ino[hash_ino(fs, ino)]; in; in = in->next_ino)
		if (in->ino == ino)
			break;
	pthread_mutex_unlock(&fs->lock);
	return in;
}

static void unlink_chain(struct fs_inode **head, struct fs_inode *in,
			 bool by_name)
{
	for (struct fs_inode **pp = head; *pp;
	     pp = by_name ? &(*pp)->next_name : &(*pp)->next_ino) {
		if (*pp == in) {
			*pp = by_name ? in->next_name : in->next_ino;
			return;
		}
	}
}

/* Drops in if nothing references it any more; walks up to parents. */
static void maybe_free(struct fs *fs, struct fs_inode *in)
{
	while (in && in != fs->root && in->nlookup == 0 && in->children == 0 &&
	       !in->links) {
		struct fs_inode *parent = in->parent;

		unlink_chain(&fs->by_ino[hash_ino(fs, in->ino)], in, false);
		unlink_chain(&fs->by_name[hash_name(fs, parent->ino, in->name)],
			     in, true);
		fs->ninodes--;
		inode_free(in);
		parent->children--;
		in = parent;
	}
}

void fs_inode_maybe_free(struct fs *fs, struct fs_inode *in)
{
	maybe_free(fs, in);
}

void fs_inode_forget(struct fs *fs, struct fs_inode *in, uint64_t n)
{
	pthread_mutex_lock(&fs->lock);
	/* The kernel forgets no more than we handed out: each reply with
	 * an entry counted one (fs_inode_get, fs_reply_entry). */
	util_assert(in->nlookup >= n);
	in->nlookup -= n;
	maybe_free(fs, in);
	pthread_mutex_unlock(&fs->lock);
}

/* A new version (another ETag) makes what was known of the old one
 * unknown, unless e knows the new one's; a dirty file's attributes are
 * always the latest; otherwise the inode's, learned since e was made,
 * win. */
static void set_attrs(struct fs_inode *in, const struct fs_entry *e)
{
	bool changed = !e->is_dir && strcmp(in->etag, e->etag);

	if (e->has_attr && (e->pending || changed || !in->has_attr)) {
		in->has_attr = true;
		in->mode = e->mode;
		in->uid = e->uid;
		in->gid = e->gid;
		in->mtime_ns = e->mtime_ns;
		in->ctime_ns = e->ctime_ns;
		in->atime_ns = e->atime_ns;
		in->rdev = e->rdev;
	} else if (changed) {
		in->has_attr = false;
	}
	if (!in->ftype) /* the kernel's type never changes */
		in->ftype = e->ftype;
	in->size_bytes = e->size_bytes;
	in->mtime_s = e->mtime_s;
	memcpy(in->etag, e->etag, sizeof(in->etag));
	in->attr_ms = util_now_ms();
}

struct fs_inode *fs_inode_ref(struct fs *fs, struct fs_inode *dir,
			      const struct fs_entry *e)
{
	size_t hb = hash_name(fs, dir->ino, e->name);
	struct fs_inode *in;

	/* Another name of a file with hard links: that file, whose
	 * attributes are its own, not those of this name's copy. */
	if (!e->is_dir && (in = fs_link_inode(fs, dir, e->name))) {
		in->nlookup++;
		return in;
	}
	for (in = fs->by_name[hb]; in; in = in->next_name)
		if (in->parent == dir && !strcmp(in->name, e->name))
			break;
	if (in && in->is_dir != e->is_dir) {
		/* A file became a directory or back: a new inode; the old
		 * one is unhashed by name and lives on until forgotten. */
		unlink_chain(&fs->by_name[hb], in, true);
		in->next_name = NULL;
		in = NULL;
	}
	if (!in) {
		char rest[NAME_MAX + 2];

		in = calloc(1, sizeof(*in));
		if (!in)
			return NULL;
		snprintf(rest, sizeof(rest), "%s%s", e->name,
			 e->is_dir ? "/" : "");
		in->key = names_block(dir->key, rest, e->name, &in->name);
		if (!in->key) {
			free(in);
			return NULL;
		}
		in->ino = fs->next_ino++;
		in->parent = dir;
		in->is_dir = e->is_dir;
		dir->children++;
		in->next_ino = fs->by_ino[hash_ino(fs, in->ino)];
		fs->by_ino[hash_ino(fs, in->ino)] = in;
		in->next_name = fs->by_name[hb];
		fs->by_name[hb] = in;
		fs->ninodes++;
	}
	if (!e->is_dir && strcmp(in->etag, e->etag))
		in->attr_ms = 0; /* changed: drop cached metadata too */
	set_attrs(in, e);
	in->nlookup++;
	return in;
}

/* A directory that the zero-byte object "a/dir" makes one (older s3fs)
 * shows that object's mode, uid and gid until this cache keeps its own
 * for "a/dir/" (key). */
static void plain_dir_attr(struct fs *fs, char *key, const struct fs_entry *e,
			   struct fs_entry *k)
{
	struct cache_attr a;

	key[strlen(key) - 1] = '\0';
	if (!cache_attr_get(fs->cfg.cache, key, &a))
		fs_attr_resolve(fs, true, e->mtime_s, &a, k);
}

uint64_t fs_dirent_ino(struct fs *fs, const struct fs_inode *dir,
		       const char *name)
{
	struct fs_inode *in;
	uint64_t h = 1469598103934665603ull ^ dir->ino;

	for (in = fs->by_name[hash_name(fs, dir->ino, name)]; in;
	     in = in->next_name)
		if (in->parent == dir && !strcmp(in->name, name))
			return in->ino;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h | (1ull << 63); /* never one of ours, never 0 */
}

struct fs_inode *fs_inode_lookup(struct fs *fs, struct fs_inode *dir,
				 const struct fs_entry *e)
{
	struct fs_entry k = *e;
	struct fs_inode *in;
	struct cache_attr a;
	char key[OBJ_KEY_MAX + 2];
	bool ok;

	if (!e->has_attr) { /* a dirty file's are there: any other's? */
		pthread_mutex_lock(&fs->lock);
		ok = (size_t)snprintf(key, sizeof(key), "%s%s%s", dir->key,
				      e->name, e->is_dir ? "/" : "") <
		     sizeof(key);
		pthread_mutex_unlock(&fs->lock);
		/* A file's are for one version; a directory's, kept by
		 * this cache, for the name. */
		if (ok && !cache_attr_get(fs->cfg.cache, key, &a) &&
		    (e->is_dir || !strcmp(a.etag, e->etag)))
			fs_attr_resolve(fs, e->is_dir, e->mtime_s, &a, &k);
		else if (ok && (e->markers & FS_MARK_PLAIN))
			plain_dir_attr(fs, key, e, &k);
	}
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_ref(fs, dir, &k);
	pthread_mutex_unlock(&fs->lock);
	return in;
}

/* ---- listings ---- */

int fs_name_check(const char *name)
{
	return strnlen(name, NAME_MAX + 1) > NAME_MAX ? -ENAMETOOLONG : 0;
}

int fs_key_check(struct fs *fs, const char *key, const char *what)
{
	size_t room = obj_key_room(fs->cfg.st), kl = strlen(key);

	if (obj_key_reserved(fs->cfg.st, key)) {
		fprintf(stderr, "fmfs: %s of '%.64s' refused (EPERM): the store "
			"keeps that name for itself\n", what, key);
		return -EPERM;
	}
	if (kl <= room)
		return 0;
	fprintf(stderr, "fmfs: %s of '%.64s...' refused (ENAMETOOLONG): its "
		"key would be %zu bytes, the store takes at most %zu under "
		"this mount's prefix\n", what, key, kl, room);
	return -ENAMETOOLONG;
}

/* A name a local disk could hold: skipped in listings otherwise (a name
 * over NAME_MAX could be listed but not looked up). */
static bool name_ok(const char *n)
{
	return *n && strcmp(n, ".") && strcmp(n, "..") && !fs_name_check(n);
}

static int cmp_entry(const void *a, const void *b)
{
	const struct fs_entry *x = a, *y = b;
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

static int add_entry(struct fs_listing *l, size_t *cap, const char *name,
		     bool is_dir, const struct obj_entry *oe)
{
	struct fs_entry *e;

	if (l->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;

		if (nc > FS_LISTING_MAX_ENTRIES)
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
	}
	l->n++;
	return 0;
}

/* Sorts l and keeps one entry per name (the directory if both); a
 * directory made by several objects keeps the markers of each, for
 * rmdir to remove them all. */
static void dedup(struct fs_listing *l)
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
static void type_of_empty(struct fs *fs, const char *key,
			  struct fs_entry *e, unsigned *budget)
{
	struct cache_attr a;
	struct obj_meta m;
	struct obj_error err;
	obj_status st;

	if (cache_attr_get(fs->cfg.cache, key, &a) ||
	    strcmp(a.etag, e->etag)) {
		if (!*budget || !fs_store_up(fs)) {
			e->untyped = true;
			return;
		}
		(*budget)--;
		atomic_fetch_add(&fs->heads, 1);
		st = obj_head(fs->cfg.st, key, &m, &err);
		if (st == OBJ_ERR_NOT_FOUND)
			return; /* gone since the LIST: a file, as listed */
		if (st != OBJ_OK) {
			fs_obj_errno(fs, st, &err);
			*budget = 0;
			e->untyped = true;
			return;
		}
		fs_meta_attr(m.user, m.nuser, m.etag, &a);
		obj_meta_release(&m);
		cache_attr_set(fs->cfg.cache, key, &a);
	}
	e->untyped = false;
	if ((a.has & CACHE_ATTR_MODE) && S_ISDIR(a.mode)) {
		e->is_dir = true;
		e->markers |= FS_MARK_PLAIN;
		e->size_bytes = 0;
	}
}

/* Adds the object key (name in its directory) to l: "x_$folder$" as
 * directory x, a zero-byte object as what its mode says. */
static int add_object(struct fs *fs, struct fs_listing *l, size_t *cap,
		      const char *name, const struct obj_entry *oe,
		      unsigned *budget)
{
	size_t nl = strlen(name), sl = strlen(FS_FOLDER_SUFFIX);
	char base[1025];
	int rc;

	if (nl > sl && nl - sl < sizeof(base) &&
	    !strcmp(name + nl - sl, FS_FOLDER_SUFFIX)) {
		memcpy(base, name, nl - sl);
		base[nl - sl] = '\0';
		if (name_ok(base)) {
			rc = add_entry(l, cap, base, true, NULL);
			if (!rc)
				l->e[l->n - 1].markers = FS_MARK_FOLDER;
			return rc;
		}
	}
	rc = add_entry(l, cap, name, false, oe);
	if (!rc && oe->size_bytes == 0)
		type_of_empty(fs, oe->key, &l->e[l->n - 1], budget);
	return rc;
}

/* Lists dir->key fully into a new listing. */
static int fetch_listing(struct fs *fs, const char *dir_key,
			 struct fs_listing **out)
{
	struct fs_listing *l = calloc(1, sizeof(*l));
	size_t plen = strlen(dir_key), cap = 0;
	unsigned budget = FS_PROBE_MAX;
	char *token = NULL;
	int rc = 0;

	if (!l)
		return -ENOMEM;
	atomic_store(&l->refs, 1);
	atomic_fetch_add(&fs->listings, 1);
	do {
		struct obj_list_page pg;
		struct obj_error err;
		obj_status st;

		st = obj_list(fs->cfg.st, dir_key, "/", token, 1000, &pg,
			      &err);
		free(token);
		token = NULL;
		atomic_fetch_add(&fs->list_pages, 1);
		if (st != OBJ_OK) {
			rc = fs_obj_errno(fs, st, &err);
			break;
		}
		for (size_t i = 0; !rc && i < pg.nentries; i++) {
			const char *n = pg.entries[i].key + plen;

			if (!*n)
				continue; /* the directory's own marker */
			if (!name_ok(n)) {
				atomic_fetch_add(&fs->skipped_names, 1);
				continue;
			}
			rc = add_object(fs, l, &cap, n, &pg.entries[i],
					&budget);
		}
		for (size_t i = 0; !rc && i < pg.nprefixes; i++) {
			char *n = pg.prefixes[i] + plen;
			size_t nl = strlen(n);

			if (nl)
				n[nl - 1] = '\0'; /* drop the '/' */
			if (!name_ok(n)) {
				atomic_fetch_add(&fs->skipped_names, 1);
				continue;
			}
			rc = add_entry(l, &cap, n, true, NULL);
			if (!rc)
				l->e[l->n - 1].markers = FS_MARK_PREFIX;
		}
		if (!rc && pg.next_token && !(token = strdup(pg.next_token)))
			rc = -ENOMEM;
		obj_list_page_release(&pg);
	} while (!rc && token);
	free(token);
	if (rc) {
		fs_listing_put(l);
		return rc;
	}
	dedup(l);
	l->fetched_ms = util_now_ms();
	fs_store_answered(fs);
	*out = l;
	return 0;
}

static bool fresh(const struct fs *fs, uint64_t ms)
{
	return ms && util_now_ms() - ms < (uint64_t)fs->cfg.refresh_s * 1000;
}

static size_t hash_key(const struct fs *fs, const char *key)
{
	return hash_name(fs, 0, key);
}

static void lru_unlink(struct fs *fs, struct fs_dircache *d)
{
	if (d->lru_prev)
		d->lru_prev->lru_next = d->lru_next;
	else
		fs->dir_lru = d->lru_next;
	if (d->lru_next)
		d->lru_next->lru_prev = d->lru_prev;
	else
		fs->dir_lru_tail = d->lru_prev;
	d->lru_prev = d->lru_next = NULL;
}

static void lru_front(struct fs *fs, struct fs_dircache *d)
{
	d->lru_prev = NULL;
	d->lru_next = fs->dir_lru;
	if (fs->dir_lru)
		fs->dir_lru->lru_prev = d;
	else
		fs->dir_lru_tail = d;
	fs->dir_lru = d;
}

/* The cached listing of key (a new reference), or NULL.  Lock held. */
static struct fs_listing *dircache_get(struct fs *fs, const char *key)
{
	for (struct fs_dircache *d = fs->dirs[hash_key(fs, key)]; d;
	     d = d->next)
		if (!strcmp(d->key, key)) {
			lru_unlink(fs, d);
			lru_front(fs, d);
			atomic_fetch_add(&d->l->refs, 1);
			return d->l;
		}
	return NULL;
}

/* Drops the listing used longest ago (past the memory bound; the index
 * keeps it, fs_ns_load brings it back). */
static void dircache_drop_oldest(struct fs *fs)
{
	struct fs_dircache *d = fs->dir_lru_tail, **pp;

	if (!d)
		return;
	for (pp = &fs->dirs[hash_key(fs, d->key)]; *pp != d;
	     pp = &(*pp)->next)
		;
	*pp = d->next;
	lru_unlink(fs, d);
	fs->dir_entries -= d->l->n;
	fs_listing_put(d->l);
	free(d->key);
	free(d);
	fs->ndirs--;
}

/* Installs l (taking over the caller's reference) as key's listing. */
static void dircache_put(struct fs *fs, const char *key,
			 struct fs_listing *l)
{
	size_t b = hash_key(fs, key);
	struct fs_dircache *d;

	for (d = fs->dirs[b]; d; d = d->next)
		if (!strcmp(d->key, key)) {
			fs->dir_entries += l->n - d->l->n;
			fs_listing_put(d->l);
			d->l = l;
			lru_unlink(fs, d);
			lru_front(fs, d);
			break;
		}
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d || !(d->key = strdup(key))) {
			free(d);
			fs_listing_put(l);
			return;
		}
		d->l = l;
		d->next = fs->dirs[b];
		fs->dirs[b] = d;
		lru_front(fs, d);
		fs->ndirs++;
		fs->dir_entries += l->n;
	}
	/* The bound: never the listing just put (one directory larger than
	 * the bound is still served from memory while it is used). */
	while (fs->dir_lru_tail != d &&
	       (fs->ndirs > FS_DIRCACHE_MAX ||
		fs->dir_entries > fs->cfg.listing_mem_entries))
		dircache_drop_oldest(fs);
}

/* The generation of dir_key's listing: its own changes and those of a
 * tree rename (a sum: either moving changes it). */
static uint64_t dir_gen_of(struct fs *fs, const char *dir_key)
{
	return atomic_load(&fs->dir_gen) +
	       atomic_load(&fs->dir_gens[hash_key(fs, dir_key) %
					 FS_DIR_GENS]);
}

struct fs_listing *fs_dir_listing(struct fs *fs, const char *dir_key,
				  int *err)
{
	struct fs_listing *l, *nl;
	uint64_t gen, marks;
	void *packed;
	size_t plen = 0;

	*err = 0;
	/* The generation with the look: a change of ours (fs_dir_invalidate,
	 * under the lock) is before both, and marked the index too, or
	 * after both, and changes it. */
	pthread_mutex_lock(&fs->lock);
	l = dircache_get(fs, dir_key);
	gen = dir_gen_of(fs, dir_key);
	marks = atomic_load(&fs->stale_marks);
	pthread_mutex_unlock(&fs->lock);
	if (!l && (nl = fs_ns_load(fs, dir_key))) {
		/* Known from the index (a remount, or dropped from memory):
		 * as if LISTed then; a change of ours meanwhile makes it
		 * stale, as it would a LIST's.  Another thread may have put
		 * one meanwhile: that one stays. */
		pthread_mutex_lock(&fs->lock);
		l = dircache_get(fs, dir_key);
		if (!l) {
			nl->gen = gen;
			if (gen != dir_gen_of(fs, dir_key) ||
			    marks != atomic_load(&fs->stale_marks))
				nl->fetched_ms = 0;
			atomic_fetch_add(&nl->refs, 1);
			dircache_put(fs, dir_key, nl);
			l = nl;
			nl = NULL;
		}
		pthread_mutex_unlock(&fs->lock);
		fs_listing_put(nl);
	}
	if (l && (fresh(fs, l->fetched_ms) || !fs_store_up(fs)))
		return l;
	/* Two threads may fetch the same directory at once; the later
	 * result replaces the earlier.  Rare, and simpler than a lock per
	 * directory key.  A change (fs_dir_invalidate) while the LIST was
	 * out may have been missed by it: then it is fetched again. */
	for (int tries = 0;; tries++) {
		gen = dir_gen_of(fs, dir_key);
		*err = fetch_listing(fs, dir_key, &nl);
		if (*err || gen == dir_gen_of(fs, dir_key) ||
		    tries == FS_LIST_TRIES - 1)
			break;
		fs_listing_put(nl);
	}
	if (*err == 0) {
		fs_listing_put(l);
		packed = fs_ns_pack(nl, &plen);
		atomic_fetch_add(&nl->refs, 1);
		pthread_mutex_lock(&fs->lock);
		nl->gen = gen;
		if (gen != dir_gen_of(fs, dir_key))
			nl->fetched_ms = 0; /* unsettled: not kept as fresh */
		/* Under the lock: a change of ours (fs_dir_invalidate) is
		 * either before (unsettled, not kept) or marks it after. */
		fs_ns_keep(fs, dir_key, nl, packed, plen);
		dircache_put(fs, dir_key, nl);
		pthread_mutex_unlock(&fs->lock);
		free(packed);
		return nl;
	}
	if (l)
		*err = 0; /* store unreachable: the stale listing beats none */
	return l;
}

const struct fs_entry *fs_listing_find(const struct fs_listing *l,
				       const char *name)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(l->e[mid].name, name);

		if (!c)
			return &l->e[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int fs_resolve(struct fs *fs, const char *path, struct fs_entry *out,
	       char *key, size_t key_len)
{
	struct fs_entry cur = { .name = NULL, .is_dir = true };
	size_t kl = 0;

	key[0] = '\0';
	while (*path) {
		const struct fs_entry *e;
		struct fs_listing *l;
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
		l = fs_dir_listing(fs, key, &err);
		if (!l)
			return err;
		e = fs_listing_find(l, name);
		if (!e) {
			fs_listing_put(l);
			return -ENOENT;
		}
		cur = *e;
		cur.name = NULL;
		fs_listing_put(l);
		kl += (size_t)snprintf(key + kl, key_len - kl, "%s%s", name,
				       cur.is_dir ? "/" : "");
		path += n;
	}
	*out = cur;
	return 0;
}

bool fs_store_up(struct fs *fs)
{
	return util_now_ms() >= atomic_load(&fs->offline_until_ms);
}

int fs_obj_errno(struct fs *fs, obj_status st, const struct obj_error *e)
{
	static atomic_int logged[OBJ_ERR_OTHER + 1];
	char line[1024];

	if (st == OBJ_ERR_CONNECT || st == OBJ_ERR_TIMEOUT ||
	    st == OBJ_ERR_SERVER) {
		atomic_store(&fs->offline_until_ms, util_now_ms() + FS_OFFLINE_MS);
		if (atomic_exchange(&fs->connected, false))
			fprintf(stderr, "fmfs: the store does not answer: "
				"disconnected; serving what the cache knows, "
				"writes are queued, reconnecting on its own\n");
	}
	if ((unsigned)st <= OBJ_ERR_OTHER &&
	    atomic_exchange(&logged[st], 1) == 0) {
		obj_error_format(e, line, sizeof(line));
		fprintf(stderr, "fmfs: %s\n", line);
	}
	switch (st) {
	case OBJ_OK:
		return 0;
	case OBJ_ERR_NOT_FOUND:
	case OBJ_ERR_NO_BUCKET:
		return -ENOENT;
	case OBJ_ERR_AUTH:
	case OBJ_ERR_DENIED:
	case OBJ_ERR_CREDENTIALS:
		return -EACCES;
	case OBJ_ERR_NOMEM:
		return -ENOMEM;
	case OBJ_ERR_INVALID:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* ---- changes (write.c) ---- */

struct fs_inode *fs_inode_by_key(struct fs *fs, const char *key)
{
	struct fs_inode *cur = fs->root;

	while (cur && *key) {
		size_t n = strcspn(key, "/");
		struct fs_inode *in;
		char name[1025];

		if (n >= sizeof(name))
			return NULL;
		memcpy(name, key, n);
		name[n] = '\0';
		for (in = fs->by_name[hash_name(fs, cur->ino, name)]; in;
		     in = in->next_name)
			if (in->parent == cur && !strcmp(in->name, name))
				break;
		cur = in;
		key += n;
		if (*key == '/')
			key++;
	}
	return cur;
}

void fs_inode_unhash(struct fs *fs, struct fs_inode *in)
{
	if (in == fs->root)
		return;
	unlink_chain(&fs->by_name[hash_name(fs, in->parent->ino, in->name)],
		     in, true);
	in->next_name = NULL;
	in->unlinked = true;
}

static int rekey(struct fs_inode *in, size_t ol, const char *nw)
{
	char *name, *k = names_block(nw, in->key + ol, in->name, &name);

	if (!k)
		return -ENOMEM;
	free(in->key);
	in->key = k;
	in->name = name;
	return 0;
}

int fs_inode_move(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		  const char *name)
{
	size_t hb = hash_name(fs, dir->ino, name);
	struct fs_inode *old_parent = in->parent, *o;
	char rest[NAME_MAX + 2], *nn, *nk, *ok;
	size_t okl;

	if ((size_t)snprintf(rest, sizeof(rest), "%s%s", name,
			     in->is_dir ? "/" : "") >= sizeof(rest))
		return -ENAMETOOLONG;
	nk = names_block(dir->key, rest, name, &nn);
	if (!nk)
		return -ENOMEM;
	for (o = fs->by_name[hb]; o; o = o->next_name)
		if (o->parent == dir && !strcmp(o->name, name) && o != in)
			break;
	if (o)
		fs_inode_unhash(fs, o);
	fs_inode_unhash(fs, in);
	ok = in->key; /* the old name with it: freed below */
	okl = strlen(ok);
	in->name = nn;
	in->key = nk;
	in->parent = dir;
	dir->children++;
	in->next_name = fs->by_name[hb];
	fs->by_name[hb] = in;
	in->unlinked = false; /* fs_inode_unhash above said so */
	if (in->is_dir) /* every inode below follows */
		for (size_t b = 0; b < fs->nbuckets; b++)
			for (struct fs_inode *x = fs->by_ino[b]; x;
			     x = x->next_ino)
				if (x != in && !strncmp(x->key, ok, okl))
					rekey(x, okl, nk);
	free(ok);
	old_parent->children--;
	maybe_free(fs, old_parent);
	return 0;
}

void fs_dir_invalidate(struct fs *fs, const char *dir_key, bool prefix)
{
	size_t kl = strlen(dir_key);

	/* Marked old, not dropped: while the store is unreachable a stale
	 * listing still beats none. */
	pthread_mutex_lock(&fs->lock);
	if (prefix)
		atomic_fetch_add(&fs->dir_gen, 1);
	else
		atomic_fetch_add(&fs->dir_gens[hash_key(fs, dir_key) %
					       FS_DIR_GENS], 1);
	for (size_t b = 0; b < fs->nbuckets; b++) {
		if (!prefix)
			b = hash_key(fs, dir_key);
		for (struct fs_dircache *d = fs->dirs[b]; d; d = d->next)
			if (prefix ? !strncmp(d->key, dir_key, kl) :
			    !strcmp(d->key, dir_key))
				d->l->fetched_ms = 0;
		if (!prefix)
			break;
	}
	if (fs->cfg.cache) /* and in the index, for a remount */
		cache_listing_stale(fs->cfg.cache, dir_key, prefix);
	pthread_mutex_unlock(&fs->lock);
}

static void count_files(void *arg, const char *key,
			const struct cache_wattr *a)
{
	(void)key;
	*(size_t *)arg += a != NULL;
}

void fs_entry_from_w(struct fs_entry *e, const struct cache_wattr *a)
{
	e->is_dir = a->kind == CACHE_WK_DIR;
	e->ftype = e->is_dir || a->kind == CACHE_WK_FILE ? 0 :
		   cache_wkind_type(a->kind);
	e->pending = true;
	e->size_bytes = e->is_dir ? 0 : a->size;
	e->mtime_s = a->mtime_ns / 1000000000;
	e->has_attr = true;
	e->mode = a->mode & 07777;
	e->uid = a->uid;
	e->gid = a->gid;
	e->mtime_ns = a->mtime_ns;
	e->ctime_ns = a->ctime_ns;
	e->atime_ns = a->atime_ns;
	e->rdev = a->rdev;
}

/* ---- names the listing does not have ---- */

static uint64_t key_hash(const char *key)
{
	uint64_t h = 1469598103934665603ull;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 1099511628211ull;
	return h;
}

/* Whether name (key h), missing from listing l, is to be asked of the
 * store: l and the last answer for that name are older than the
 * negative bound.  With --refresh 0 the listing was just fetched. */
static bool neg_ask(struct fs *fs, const struct fs_listing *l, uint64_t h)
{
	uint64_t now = util_now_ms(), seen = 0;
	uint64_t bound = (uint64_t)fs->cfg.negative_refresh_s * 1000;

	if (!fs->cfg.refresh_s || !l->fetched_ms ||
	    now - l->fetched_ms <= bound || !fs_store_up(fs))
		return false;
	pthread_mutex_lock(&fs->lock);
	if (fs->neg[h % FS_NEG_SLOTS].h == h)
		seen = fs->neg[h % FS_NEG_SLOTS].ms;
	pthread_mutex_unlock(&fs->lock);
	return !seen || now - seen > bound;
}

static void neg_note(struct fs *fs, uint64_t h)
{
	pthread_mutex_lock(&fs->lock);
	fs->neg[h % FS_NEG_SLOTS].h = h;
	fs->neg[h % FS_NEG_SLOTS].ms = util_now_ms();
	pthread_mutex_unlock(&fs->lock);
}

/* The cached listing of dir_key is older than the bucket: the next
 * look fetches it again (no generation bump: nothing of ours moved). */
static void dir_mark_stale(struct fs *fs, const char *dir_key)
{
	pthread_mutex_lock(&fs->lock);
	for (struct fs_dircache *d = fs->dirs[hash_key(fs, dir_key)]; d;
	     d = d->next)
		if (!strcmp(d->key, dir_key))
			d->l->fetched_ms = 0;
	if (fs->cfg.cache)
		cache_listing_stale(fs->cfg.cache, dir_key, false);
	atomic_fetch_add(&fs->stale_marks, 1);
	pthread_mutex_unlock(&fs->lock);
}

/* One name asked of the store: key is "a/name" (kl: its length).  A LIST
 * with prefix "a/name" and delimiter '/' finds, in one request, the
 * object "a/name", the directory "a/name/" (with a marker or only keys
 * below it) and "a/name_$folder$"; a HEAD finds only the first.  Keys
 * that share the prefix ("name.bak", "name2/") come too: if they fill
 * the page before "a/name_$folder$", which sorts last of the three, the
 * answer is -EAGAIN (undecided).  0 with out filled, or -ENOENT. */
static int probe_name(struct fs *fs, const char *key, size_t kl,
		      struct fs_entry *out)
{
	char folder[OBJ_KEY_MAX + 16];
	struct fs_entry f = { .name = NULL };
	struct obj_list_page pg;
	struct obj_error err;
	const char *last = "";
	bool file = false, dir = false, decided;
	unsigned markers = 0, budget = 1;
	obj_status st;

	snprintf(folder, sizeof(folder), "%s%s", key, FS_FOLDER_SUFFIX);
	atomic_fetch_add(&fs->list_pages, 1);
	st = obj_list(fs->cfg.st, key, "/", NULL, 1000, &pg, &err);
	if (st != OBJ_OK) {
		fs_obj_errno(fs, st, &err);
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
			markers |= FS_MARK_FOLDER;
		}
		if (strcmp(oe->key, last) > 0)
			last = oe->key;
	}
	for (size_t i = 0; i < pg.nprefixes; i++) {
		if (!strcmp(pg.prefixes[i] + kl, "/")) {
			dir = true;
			markers |= FS_MARK_PREFIX;
		}
		if (strcmp(pg.prefixes[i], last) > 0)
			last = pg.prefixes[i];
	}
	decided = !pg.next_token || strcmp(last, folder) >= 0;
	obj_list_page_release(&pg);
	if (!decided)
		return -EAGAIN;
	if (file && !f.size_bytes)
		type_of_empty(fs, key, &f, &budget);
	if (f.is_dir) {
		dir = true;
		markers |= f.markers;
	}
	if (!dir && !file)
		return -ENOENT;
	*out = dir ? (struct fs_entry){ .is_dir = true, .markers = markers } :
	       f;
	return 0;
}

/* The listing's entry for name, or when it has none and is older than
 * the negative bound, the store's (key: "a/name/", kl its length;
 * *gen: the listing's generation).  0 with out filled, -ENOENT, or
 * another -errno. */
static int look_up(struct fs *fs, struct fs_inode *dir, const char *name,
		   char *key, size_t kl, struct fs_entry *out, uint64_t *gen)
{
	uint64_t h;
	int err = 0;

	/* --refresh 0: every lookup asks the store, for that one name (a
	 * whole listing per lookup made `ls -l` of n names cost n LISTs of
	 * n keys).  Undecided, or the store gone meanwhile: as below. */
	if (!fs->cfg.refresh_s && fs_store_up(fs)) {
		*gen = dir_gen_of(fs, dir->key);
		key[kl - 1] = '\0';
		err = probe_name(fs, key, kl - 1, out);
		key[kl - 1] = '/';
		if (err != -EAGAIN && fs_store_up(fs))
			return err;
	}
	for (int tries = 0;; tries++) {
		struct fs_listing *l = fs_dir_listing(fs, dir->key, &err);
		const struct fs_entry *e;
		bool ask;

		if (!l)
			return err;
		*gen = l->gen;
		e = fs_listing_find(l, name);
		if (e) {
			*out = *e;
			out->name = NULL;
		}
		key[kl - 1] = '\0';
		h = key_hash(key);
		ask = !e && tries == 0 && neg_ask(fs, l, h);
		fs_listing_put(l);
		if (e && out->untyped) { /* past the listing's HEADs */
			unsigned budget = 1;

			type_of_empty(fs, key, out, &budget);
			if (out->is_dir)
				dir_mark_stale(fs, dir->key);
		}
		err = ask ? probe_name(fs, key, kl - 1, out) : -ENOENT;
		key[kl - 1] = '/';
		if (e)
			return 0;
		if (err != -EAGAIN)
			break;
		dir_mark_stale(fs, dir->key); /* undecided: LIST it all */
	}
	if (err == -ENOENT)
		neg_note(fs, h);
	else if (!err) /* readdir shows it too */
		dir_mark_stale(fs, dir->key);
	return err;
}

/* Whether each object that makes directory key ("a/dir/", kl its
 * length) one has a tombstone. */
static bool dir_tombstoned(struct cache *c, char *key, size_t kl,
			   unsigned markers)
{
	char k[OBJ_KEY_MAX + 16];
	bool gone = markers != 0;

	if (markers & FS_MARK_PREFIX)
		gone = cache_w_tombstoned(c, key);
	if (gone && (markers & FS_MARK_PLAIN)) {
		snprintf(k, sizeof(k), "%.*s", (int)kl - 1, key);
		gone = cache_w_tombstoned(c, k);
	}
	if (gone && (markers & FS_MARK_FOLDER)) {
		snprintf(k, sizeof(k), "%.*s%s", (int)kl - 1, key,
			 FS_FOLDER_SUFFIX);
		gone = cache_w_tombstoned(c, k);
	}
	return gone;
}

/* One look at name in dir: the dirty table, else the listing with the
 * tombstones over it.  *gen: the generation of the listing used, or
 * UINT64_MAX when the dirty table answered. */
static int find_once(struct fs *fs, struct fs_inode *dir, const char *name,
		     char *key, size_t kl, struct fs_entry *out, uint64_t *gen)
{
	struct cache *c = fs->cfg.cache;
	const struct fs_entry *e;
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
		fs_entry_from_w(out, &a);
		return 0;
	}
	err = look_up(fs, dir, name, key, kl, out, gen);
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
 * (fs_dir_invalidate from on_done), so a look whose listing is older
 * than the directory's generation is taken again. */
int fs_find(struct fs *fs, struct fs_inode *dir, const char *name,
	    struct fs_entry *out)
{
	char key[OBJ_KEY_MAX + 2];
	uint64_t gen;
	size_t kl;
	int rc;

	if (fs_name_check(name)) {
		memset(out, 0, sizeof(*out));
		return -ENAMETOOLONG;
	}
	if ((size_t)snprintf(key, sizeof(key), "%s%s/", dir->key, name) >=
	    sizeof(key)) {
		memset(out, 0, sizeof(*out));
		return -ENAMETOOLONG;
	}
	kl = strlen(key);
	for (int tries = 0;; tries++) {
		rc = find_once(fs, dir, name, key, kl, out, &gen);
		if (gen == UINT64_MAX || gen == dir_gen_of(fs, dir->key) ||
		    tries == FS_LIST_TRIES - 1)
			return rc;
	}
}

struct view {
	size_t pl;
	struct fs_listing *add;   /* dirty entries */
	size_t cap;
	struct fs_entry *hide;    /* deletions: name + is_dir */
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
	if (!name_ok(name))
		return;
	if (!a) {
		struct fs_entry *h;

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
		v->err = add_entry(v->add, &v->cap, name, true, NULL);
		if (v->err)
			return;
		v->add->e[v->add->n - 1].pending = true;
		if (!slash[1]) /* the directory's own dirty marker */
			fs_entry_from_w(&v->add->e[v->add->n - 1], a);
		return;
	}
	v->err = add_entry(v->add, &v->cap, name, false, NULL);
	if (!v->err)
		fs_entry_from_w(&v->add->e[v->add->n - 1], a);
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
static bool hidden(const struct view *v, const struct fs_entry *e)
{
	char folder[1025 + sizeof(FS_FOLDER_SUFFIX)];
	bool gone = e->markers != 0;

	if (!e->is_dir)
		return hide_has(v, e->name, false);
	if (e->markers & FS_MARK_PREFIX)
		gone = hide_has(v, e->name, true);
	if (gone && (e->markers & FS_MARK_PLAIN))
		gone = hide_has(v, e->name, false);
	if (gone && (e->markers & FS_MARK_FOLDER)) {
		snprintf(folder, sizeof(folder), "%s%s", e->name,
			 FS_FOLDER_SUFFIX);
		gone = hide_has(v, folder, false);
	}
	return gone;
}

static struct fs_listing *view_once(struct fs *fs, const char *dir_key,
				    int *err)
{
	struct fs_listing *l = fs_dir_listing(fs, dir_key, err), *m;
	struct view v = { .pl = strlen(dir_key) };
	size_t nadd;

	if (!l || !cache_w_list(fs->cfg.cache, dir_key, NULL, NULL))
		return l;
	m = calloc(1, sizeof(*m));
	if (!m) {
		*err = -ENOMEM;
		fs_listing_put(l);
		return NULL;
	}
	atomic_store(&m->refs, 1);
	m->fetched_ms = l->fetched_ms;
	m->gen = l->gen;
	v.add = m;
	cache_w_list(fs->cfg.cache, dir_key, view_fn, &v);
	dedup(m); /* the dirty entries, sorted */
	nadd = m->n;
	for (size_t i = 0; !v.err && i < l->n; i++) {
		const struct fs_entry *e = &l->e[i];
		struct fs_entry *p = NULL;
		size_t lo = 0, hi = nadd;

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
		v.err = add_entry(m, &v.cap, e->name, e->is_dir, NULL);
		if (!v.err) {
			char *nm = m->e[m->n - 1].name;

			m->e[m->n - 1] = *e;
			m->e[m->n - 1].name = nm;
		}
	}
	for (size_t i = 0; i < v.nhide; i++)
		free(v.hide[i].name);
	free(v.hide);
	fs_listing_put(l);
	if (v.err) {
		*err = v.err;
		fs_listing_put(m);
		return NULL;
	}
	dedup(m);
	return m;
}

/* view_once, taken again while the directory changed under it (see
 * fs_find). */
struct fs_listing *fs_dir_view(struct fs *fs, const char *dir_key, int *err)
{
	for (int tries = 0;; tries++) {
		struct fs_listing *m = view_once(fs, dir_key, err);

		if (!m || m->gen == dir_gen_of(fs, dir_key) ||
		    tries == FS_LIST_TRIES - 1)
			return m;
		fs_listing_put(m);
	}
}
