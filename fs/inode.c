/* SPDX-License-Identifier: MIT */
/*
 * inode.c - the inode table of the fs module: the kernel's view of the
 * namespace (ns/ns.h), inode numbers and lookup counts.
 *
 * Inodes are created on lookup/readdirplus and live while the kernel
 * holds a reference (nlookup), a child or a hard link does.  Each has
 * its key ("a/b", "a/b/") and name in one allocation; a rename moves the
 * inode and rekeys every inode below it.  Locking: fs->lock protects
 * the tables and the attributes.
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
	uint64_t h = util_fnv1a64(UTIL_FNV64_BASIS ^ parent, name,
				  strlen(name));

	return (size_t)h & (fs->nbuckets - 1);
}

/* An inode's key and name in one allocation: in->key is the block and
 * the name is at in->name_off in it (fs_iname).  A file's name is the
 * end of its key ("a/b/c", name at 4), so it is not stored twice; a
 * directory's key ends in '/', and its name follows the key
 * ("a/b/\0b\0").  The key is prefix + rest; NULL when out of memory. */
/* One per name the kernel holds, its key and name in the same chunk
 * (kbuf): 152 bytes and a short key fit glibc's 176-byte chunk
 * (docs/performance.md "Memory per inode"). */
_Static_assert(sizeof(struct fs_inode) <= 152, "struct fs_inode grew past "
	       "152 bytes, the next malloc size class");

/* The bytes names_fill writes. */
static size_t names_len(const char *prefix, const char *rest,
			const char *name)
{
	size_t rl = strlen(rest), nl = strlen(name);
	bool tail = rl >= nl && !strcmp(rest + rl - nl, name);

	return strlen(prefix) + rl + 1 + (tail ? 0 : nl + 1);
}

/* Writes the block into b (names_len bytes); returns b. */
static char *names_fill(char *b, const char *prefix, const char *rest,
			const char *name, uint16_t *name_off)
{
	size_t pl = strlen(prefix), rl = strlen(rest), nl = strlen(name);
	size_t kl = pl + rl;
	bool tail = rl >= nl && !strcmp(rest + rl - nl, name);

	memcpy(b, prefix, pl);
	memcpy(b + pl, rest, rl + 1);
	if (tail) {
		*name_off = (uint16_t)(kl - nl); /* keys < 64 KiB */
	} else {
		memcpy(b + kl + 1, name, nl + 1);
		*name_off = (uint16_t)(kl + 1);
	}
	return b;
}

static char *names_block(const char *prefix, const char *rest,
			 const char *name, uint16_t *name_off)
{
	char *b = malloc(names_len(prefix, rest, name));

	return b ? names_fill(b, prefix, rest, name, name_off) : NULL;
}

/* A new inode with its key and name in the same allocation (kbuf). */
static struct fs_inode *inode_alloc(const char *prefix, const char *rest,
				    const char *name)
{
	size_t kl = names_len(prefix, rest, name);
	struct fs_inode *in = calloc(1, sizeof(*in) + kl);

	if (in)
		in->key = names_fill(in->kbuf, prefix, rest, name,
				     &in->name_off);
	return in;
}

/* Frees in's key unless it is the one made with the inode. */
static void key_free(struct fs_inode *in, char *key)
{
	if (key != in->kbuf)
		free(key);
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
	root->key = names_block("", "", "", &root->name_off);
	if (!root->key)
		goto nomem;
	root->is_dir = true;
	root->nlookup = 1; /* the kernel's implicit reference */
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
	return -ENOMEM;
}

const struct fs_inode_x fs_inode_x_none;

struct fs_inode_x *fs_inode_x(struct fs_inode *in)
{
	if (!in->x)
		in->x = calloc(1, sizeof(*in->x));
	return in->x;
}

static void inode_free(struct fs_inode *in)
{
	util_etag_free(&in->etag);
	if (in->x) {
		cache_w_put(in->x->w_dead);
		obj_kv_free(in->x->meta, in->x->nmeta);
		free(in->x->ctype);
		free(in->x);
	}
	key_free(in, in->key); /* the name with it */
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
	}
	free(fs->by_ino);
	free(fs->by_name);
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

struct fs_inode *fs_inode_restore(struct fs *fs, struct fs_inode *dir,
				  fuse_ino_t ino, const char *name,
				  bool is_dir, uint32_t ftype, bool unlinked,
				  uint64_t nlookup)
{
	struct fs_inode *in;
	char rest[NAME_MAX + 2];
	size_t hb = hash_name(fs, dir->ino, name);

	if ((size_t)snprintf(rest, sizeof(rest), "%s%s", name,
			     is_dir ? "/" : "") >= sizeof(rest))
		return NULL;
	in = inode_alloc(dir->key, rest, name);
	if (!in)
		return NULL;
	in->ino = ino;
	in->parent = dir;
	in->is_dir = is_dir;
	fs_set_ftype(in, ftype);
	in->nlookup = nlookup;
	in->unlinked = unlinked;
	if (!fs_set_restored(in, true, false)) {
		free(in);
		return NULL;
	}
	dir->children++;
	in->next_ino = fs->by_ino[hash_ino(fs, ino)];
	fs->by_ino[hash_ino(fs, ino)] = in;
	if (!unlinked) {
		in->next_name = fs->by_name[hb];
		fs->by_name[hb] = in;
	}
	fs->ninodes++;
	return in;
}

/* Drops in if nothing references it any more; walks up to parents. */
static void maybe_free(struct fs *fs, struct fs_inode *in)
{
	while (in && in != fs->root && in->nlookup == 0 && in->children == 0 &&
	       !fs_xr(in)->links) {
		struct fs_inode *parent = in->parent;

		unlink_chain(&fs->by_ino[hash_ino(fs, in->ino)], in, false);
		unlink_chain(&fs->by_name[hash_name(fs, parent->ino,
						    fs_iname(in))],
			     in, true);
		fs->ninodes--;
		fs->inodes_freed++;
		fs_tk_inode_drop(fs, in->ino);
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
static void set_attrs(struct fs_inode *in, const struct ns_entry *e)
{
	bool changed = !e->is_dir && !util_etag_is(&in->etag, e->etag);

	if (fs_xr(in)->restored) {
		/* a takeover's: fs_restored_attr asks where they are known
		 * (an entry's may be the index's, which can be another
		 * object's) */
	} else if (e->has_attr && (e->pending || changed || !in->has_attr)) {
		in->has_attr = true;
		in->mode = e->mode;
		in->uid = e->uid;
		in->gid = e->gid;
		in->mtime_ns = e->mtime_ns;
		in->ctime_ns = e->ctime_ns;
		in->atime_ns = e->atime_ns;
		fs_set_rdev(in, e->rdev);
	} else if (changed) {
		in->has_attr = false;
	}
	if (!in->ftype_c) /* the kernel's type never changes */
		fs_set_ftype(in, e->ftype);
	in->size_bytes = e->size_bytes;
	in->mtime_s = e->mtime_s;
	util_etag_set(&in->etag, e->etag);
	fs_attr_confirmed(in);
}

struct fs_inode *fs_inode_ref(struct fs *fs, struct fs_inode *dir,
			      const struct ns_entry *e)
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
		if (in->parent == dir && !strcmp(fs_iname(in), e->name))
			break;
	if (in && in->is_dir != e->is_dir) {
		/* A file became a directory or back: a new inode; the old
		 * one is unhashed by name and lives on until forgotten. */
		unlink_chain(&fs->by_name[hb], in, true);
		in->next_name = NULL;
		fs_tk_inode_unlinked(fs, in); /* by name, for a takeover too */
		in = NULL;
	}
	if (!in) {
		char rest[NAME_MAX + 2];

		snprintf(rest, sizeof(rest), "%s%s", e->name,
			 e->is_dir ? "/" : "");
		in = inode_alloc(dir->key, rest, e->name);
		if (!in)
			return NULL;
		in->ino = fs->next_ino++;
		in->parent = dir;
		in->is_dir = e->is_dir;
		dir->children++;
		in->next_ino = fs->by_ino[hash_ino(fs, in->ino)];
		fs->by_ino[hash_ino(fs, in->ino)] = in;
		in->next_name = fs->by_name[hb];
		fs->by_name[hb] = in;
		fs->ninodes++;
		if (!in->ftype_c)
			fs_set_ftype(in, e->ftype);
		fs_tk_maybe_compact(fs);
		fs_tk_inode_new(fs, in); /* before the kernel hears of it */
	}
	if (!e->is_dir && !util_etag_is(&in->etag, e->etag))
		in->attr_ds = 0; /* changed: drop cached metadata too */
	set_attrs(in, e);
	in->nlookup++;
	return in;
}

/* A directory that the zero-byte object "a/dir" makes one (older s3fs)
 * shows that object's mode, uid and gid until this cache keeps its own
 * for "a/dir/" (key). */
static void plain_dir_attr(struct fs *fs, char *key, const struct ns_entry *e,
			   struct ns_entry *k)
{
	struct cache_attr a;

	key[strlen(key) - 1] = '\0';
	if (!cache_attr_get(fs->cfg.cache, key, &a))
		ns_attr_resolve(fs->ns, true, e->mtime_s, &a, k);
}

uint64_t fs_dirent_ino(struct fs *fs, const struct fs_inode *dir,
		       const char *name)
{
	struct fs_inode *in;

	for (in = fs->by_name[hash_name(fs, dir->ino, name)]; in;
	     in = in->next_name)
		if (in->parent == dir && !strcmp(fs_iname(in), name))
			return in->ino;
	/* never one of ours, never 0 */
	return util_fnv1a64(UTIL_FNV64_BASIS ^ dir->ino, name, strlen(name)) |
	       (1ull << 63);
}

struct fs_inode *fs_inode_lookup(struct fs *fs, struct fs_inode *dir,
				 const struct ns_entry *e)
{
	struct ns_entry k = *e;
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
		/* Nothing stored (the listing says so): its values are
		 * final, and the index has nothing to add.  Else a file's
		 * are for one version; a directory's, kept by this cache,
		 * for the name. */
		if (ok && !e->is_dir && e->no_meta) {
			memset(&a, 0, sizeof(a));
			ns_attr_resolve(fs->ns, false, e->mtime_s, &a, &k);
		} else if (ok && !cache_attr_get(fs->cfg.cache, key, &a) &&
			   (e->is_dir || !strcmp(a.etag, e->etag)))
			ns_attr_resolve(fs->ns, e->is_dir, e->mtime_s, &a, &k);
		else if (ok && (e->markers & NS_MARK_PLAIN))
			plain_dir_attr(fs, key, e, &k);
		else if (ok && !e->is_dir && !e->pending)
			/* shown with the listing's values until the HEAD
			 * behind it lands (fs_inode_attr_known) */
			ns_heads_want(fs->ns, key, e->etag);
	}
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_ref(fs, dir, &k);
	pthread_mutex_unlock(&fs->lock);
	return in;
}

void fs_inode_attr_known(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	char etag[80];
	struct ns_entry k;
	struct cache_attr a;
	int64_t mtime_s;

	pthread_mutex_lock(&fs->lock);
	if (in->has_attr || in->is_dir || fs_xr(in)->restored || in->unlinked) {
		pthread_mutex_unlock(&fs->lock);
		return;
	}
	snprintf(key, sizeof(key), "%s", in->key);
	util_etag_text(&in->etag, etag);
	mtime_s = in->mtime_s;
	pthread_mutex_unlock(&fs->lock);
	if (!*etag || cache_attr_get(fs->cfg.cache, key, &a) ||
	    strcmp(a.etag, etag))
		return;
	memset(&k, 0, sizeof(k));
	ns_attr_resolve(fs->ns, false, mtime_s, &a, &k);
	pthread_mutex_lock(&fs->lock);
	/* the kernel's type of an inode never changes: another stored
	 * type waits for the next lookup (a new inode, fs_inode_ref) */
	if (!in->has_attr && util_etag_is(&in->etag, etag) &&
	    !strcmp(in->key, key) && k.ftype == fs_ftype(in))
		fs_attr_apply(fs, in, &a);
	pthread_mutex_unlock(&fs->lock);
}

/* ---- changes (write.c, names.c) ---- */

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
			if (in->parent == cur && !strcmp(fs_iname(in), name))
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
	unlink_chain(&fs->by_name[hash_name(fs, in->parent->ino,
					    fs_iname(in))],
		     in, true);
	in->next_name = NULL;
	in->unlinked = true;
	fs_tk_inode_unlinked(fs, in);
}

static int rekey(struct fs_inode *in, size_t ol, const char *nw)
{
	uint16_t off;
	char *k = names_block(nw, in->key + ol, fs_iname(in), &off);

	if (!k)
		return -ENOMEM;
	key_free(in, in->key);
	in->key = k;
	in->name_off = off;
	return 0;
}

int fs_inode_move(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		  const char *name)
{
	size_t hb = hash_name(fs, dir->ino, name);
	struct fs_inode *old_parent = in->parent, *o;
	char rest[NAME_MAX + 2], *nk, *ok;
	uint16_t nn;
	size_t okl;

	if ((size_t)snprintf(rest, sizeof(rest), "%s%s", name,
			     in->is_dir ? "/" : "") >= sizeof(rest))
		return -ENAMETOOLONG;
	nk = names_block(dir->key, rest, name, &nn);
	if (!nk)
		return -ENOMEM;
	for (o = fs->by_name[hb]; o; o = o->next_name)
		if (o->parent == dir && !strcmp(fs_iname(o), name) && o != in)
			break;
	if (o)
		fs_inode_unhash(fs, o);
	fs_inode_unhash(fs, in);
	ok = in->key; /* the old name with it: freed below */
	okl = strlen(ok);
	in->name_off = nn;
	in->key = nk;
	in->parent = dir;
	dir->children++;
	in->next_name = fs->by_name[hb];
	fs->by_name[hb] = in;
	in->unlinked = false; /* fs_inode_unhash above said so */
	fs_tk_inode_move(fs, in);
	if (in->is_dir) /* every inode below follows */
		for (size_t b = 0; b < fs->nbuckets; b++)
			for (struct fs_inode *x = fs->by_ino[b]; x;
			     x = x->next_ino)
				if (x != in && !strncmp(x->key, ok, okl))
					rekey(x, okl, nk);
	key_free(in, ok);
	old_parent->children--;
	maybe_free(fs, old_parent);
	return 0;
}

