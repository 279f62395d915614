/* SPDX-License-Identifier: MIT */
/*
 * tk_replay.c - a new daemon reads the takeover journal back
 * (docs/keeper.md): each inode the kernel knows, with its parent, name
 * and type, made again with its lookup count pinned (the kernel's is not
 * known; such inodes live until unmount); each hard link given back to
 * its file; each open handle of the dead daemon kept as (old fh ->
 * inode, flags, backing id) for takeover.c to reopen.  A journal that
 * does not hold together refuses the takeover.  A restored inode's
 * attributes are asked for at its first use (fs_restored_attr).
 */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_int.h"

struct rino {
	uint64_t ino, parent;
	uint32_t is_dir, ftype;
	bool unlinked, dropped, has_times;
	int64_t mtime_ns, ctime_ns; /* a directory's, when has_times */
	char *name;
	struct fs_inode *made;
	struct rino *next;
};

#define RB 65536u

struct rlink {                  /* a hard link's name, read back */
	uint64_t ino, dir;
	char *name;
	struct rlink *next;
};

#define LB 4096u

static struct rlink **lslot(struct rlink **lt, uint64_t dir,
			    const char *name)
{
	struct rlink **pp = &lt[util_fnv1a64(UTIL_FNV64_BASIS ^ dir, name,
					     strlen(name)) % LB];

	while (*pp && ((*pp)->dir != dir || strcmp((*pp)->name, name)))
		pp = &(*pp)->next;
	return pp;
}

/* A LINK or LINKGONE record into lt: one entry per (dir, name), so that
 * a record written twice (a compaction just before it) counts once. */
static int rlink_apply(struct rlink **lt, const struct tk_rec *r)
{
	const char *name = (const char *)(r + 1);
	struct rlink **pp = lslot(lt, r->b, name), *l = *pp;

	if (r->type == TK_LINKGONE) {
		if (l) {
			*pp = l->next;
			free(l->name);
			free(l);
		}
		return 0;
	}
	if (!l) {
		l = calloc(1, sizeof(*l));
		if (!l || !(l->name = strdup(name))) {
			free(l);
			return -ENOMEM;
		}
		l->dir = r->b;
		*pp = l;
	}
	l->ino = r->a;
	return 0;
}

/* The links of lt, given to their restored inodes while rc is 0; every
 * entry freed.  Returns rc, or why the links could not be restored. */
static int rlinks_restore(struct fs *fs, struct rlink **lt, int rc,
			  char *why, size_t wl)
{
	for (size_t b = 0; b < LB; b++)
		while (lt[b]) {
			struct rlink *l = lt[b];
			struct fs_inode *in = fs_inode_get(fs, l->ino);
			struct fs_inode *dir = l->dir == FUSE_ROOT_ID ?
				fs->root : fs_inode_get(fs, l->dir);

			lt[b] = l->next;
			if (!rc && (!in || !dir || in->is_dir ||
				    !dir->is_dir)) {
				snprintf(why, wl, "the hard link '%s' of node "
					 "id %llu does not match the journal's "
					 "inodes", l->name,
					 (unsigned long long)l->ino);
				rc = -EIO;
			} else if (!rc && in->parent == dir &&
				   !strcmp(fs_iname(in), l->name)) {
				/* its first name now: a kill fell between the
				 * move (link_promote) and the link's end */
			} else if (!rc &&
				   (rc = fs_link_restore(fs, in, dir,
							 l->name))) {
				snprintf(why, wl, "out of memory restoring "
					 "hard links");
			}
			free(l->name);
			free(l);
		}
	return rc;
}

static struct rino *rfind(struct rino **tab, uint64_t ino)
{
	struct rino *r = tab[(ino * 0x9E3779B97F4A7C15ull) >> 48];

	while (r && r->ino != ino)
		r = r->next;
	return r;
}

static struct fs_inode *materialize(struct fs *fs, struct rino **tab,
				    struct rino *r, unsigned depth)
{
	struct fs_inode *parent;
	struct rino *p;

	if (r->made || r->dropped || depth > PATH_MAX / 2)
		return r->made;
	if (r->parent == FUSE_ROOT_ID) {
		parent = fs->root;
	} else {
		p = rfind(tab, r->parent);
		parent = p ? materialize(fs, tab, p, depth + 1) : NULL;
	}
	if (!parent)
		return NULL;
	r->made = fs_inode_restore(fs, parent, r->ino, r->name, r->is_dir,
				   r->ftype, r->unlinked, TK_PINNED);
	if (r->made && r->has_times && r->is_dir) {
		fs_set_restored(r->made, true, true); /* it has an x */
		r->made->mtime_ns = r->mtime_ns;
		r->made->ctime_ns = r->ctime_ns;
	}
	return r->made;
}

static int old_add(struct tk_old **list, const struct tk_rec *r)
{
	struct tk_old *o = calloc(1, sizeof(*o));

	if (!o)
		return -ENOMEM;
	o->fh = r->a;
	o->ino = r->b;
	o->flags = r->c;
	o->kind = r->d;
	o->next = *list;
	*list = o;
	return 0;
}

/* Reads the log into tab and the handle lists; -errno, why set. */
static int read_log(struct fs_tk *t, struct rino **tab, struct rlink **lt,
		    uint64_t *max_ino, char *why, size_t wl)
{
	uint64_t st = atomic_load(&t->head->state);
	uint64_t end = st & ~(1ull << 63), off = 0;
	const char *base = tk_half_base(t, st);

	while (off + sizeof(struct tk_rec) <= end) {
		const struct tk_rec *r = (const struct tk_rec *)(base + off);
		struct rino *x;

		if (r->len < sizeof(*r) || r->len % 8 || off + r->len > end) {
			snprintf(why, wl, "the journal is damaged at %llu",
				 (unsigned long long)off);
			return -EIO;
		}
		off += r->len;
		switch (r->type) {
		case TK_INODE:
			x = rfind(tab, r->a);
			if (!x) {
				x = calloc(1, sizeof(*x));
				if (!x)
					return -ENOMEM;
				x->ino = r->a;
				x->next = tab[(r->a * 0x9E3779B97F4A7C15ull) >>
					      48];
				tab[(r->a * 0x9E3779B97F4A7C15ull) >> 48] = x;
			}
			/* fall through */
		case TK_MOVE:
			x = rfind(tab, r->a);
			if (!x)
				break;
			free(x->name);
			x->name = strdup((const char *)(r + 1));
			if (!x->name)
				return -ENOMEM;
			x->parent = r->b;
			if (r->type == TK_INODE) {
				x->is_dir = r->c;
				x->ftype = r->d;
				x->dropped = x->unlinked = false;
				x->has_times = false;
			} else {
				x->unlinked = false;
			}
			if (r->a > *max_ino)
				*max_ino = r->a;
			break;
		case TK_UNLINKED:
		case TK_DROP:
			x = rfind(tab, r->a);
			if (x && r->type == TK_UNLINKED)
				x->unlinked = true;
			else if (x)
				x->dropped = true;
			break;
		case TK_OPEN:
			if (old_add(&t->old, r) || old_add(&t->live, r))
				return -ENOMEM;
			break;
		case TK_CLOSE:
			tk_old_remove(&t->old, r->a);
			tk_old_remove(&t->live, r->a);
			break;
		case TK_DIRTIME:
			if (r->a == FUSE_ROOT_ID) { /* never in tab */
				t->root_times = true;
				t->root_mtime_ns = (int64_t)r->b;
				t->root_ctime_ns = (int64_t)((uint64_t)r->d <<
							     32 | r->c);
				break;
			}
			x = rfind(tab, r->a);
			if (x) {
				x->has_times = true;
				x->mtime_ns = (int64_t)r->b;
				x->ctime_ns = (int64_t)((uint64_t)r->d << 32 |
							r->c);
			}
			break;
		case TK_LINK:
		case TK_LINKGONE:
			if (rlink_apply(lt, r))
				return -ENOMEM;
			break;
		default:
			snprintf(why, wl, "the journal holds a record of an "
				 "unknown type %u", r->type);
			return -EIO;
		}
	}
	return 0;
}

/* The inode table and the open handles of the daemon before: 0, or
 * -errno with why set (the takeover is then refused). */
int fs_tk_replay(struct fs *fs, char *why, size_t wl)
{
	struct fs_tk *t = fs->tk;
	struct rino **tab = calloc(RB, sizeof(*tab));
	struct rlink **lt = calloc(LB, sizeof(*lt));
	uint64_t max_ino = 0;
	unsigned used = 0;
	int rc;

	if (!tab || !lt) {
		free(tab);
		free(lt);
		return -ENOMEM;
	}
	snprintf(why, wl, "out of memory reading the journal");
	rc = read_log(t, tab, lt, &max_ino, why, wl);
	for (size_t b = 0; !rc && b < RB; b++)
		for (struct rino *r = tab[b]; r; r = r->next)
			if (!r->dropped && !materialize(fs, tab, r, 0)) {
				snprintf(why, wl, "node id %llu has no parent "
					 "in the journal, or no memory",
					 (unsigned long long)r->ino);
				rc = -EIO;
				break;
			}
	for (size_t b = 0; b < RB; b++)
		while (tab[b]) {
			struct rino *r = tab[b];

			tab[b] = r->next;
			free(r->name);
			free(r);
		}
	free(tab);
	rc = rlinks_restore(fs, lt, rc, why, wl);
	free(lt);
	if (!rc && t->root_times) { /* the root has no marker: as fs_dir_touch */
		struct fs_inode *root = fs->root;

		if (!root->has_attr) {
			root->has_attr = true;
			root->mode = (uint32_t)fs->cfg.dir_mode;
			root->uid = (uint32_t)fs->cfg.uid;
			root->gid = (uint32_t)fs->cfg.gid;
		}
		root->mtime_ns = t->root_mtime_ns;
		root->ctime_ns = t->root_ctime_ns;
	}
	if (rc)
		return rc;
	if (atomic_load(&t->head->next_ino) > max_ino)
		max_ino = atomic_load(&t->head->next_ino);
	fs->next_ino = max_ino + 1;
	for (struct tk_old *o = t->old; o; o = o->next) {
		if (!fs_inode_get(fs, o->ino)) {
			snprintf(why, wl, "an open handle's node id %llu is "
				 "not in the journal",
				 (unsigned long long)o->ino);
			return -EIO;
		}
		used |= 1u << (o->fh & 15);
	}
	/* Our handles' tag: one no live handle of a dead daemon has. */
	for (unsigned i = 0; i < 16; i++) {
		unsigned tag = (atomic_load(&t->head->takeovers) + i) & 15;

		if (!(used & (1u << tag))) {
			fs->tk_tag = tag;
			return 0;
		}
	}
	snprintf(why, wl, "handles of 16 daemons are still open: no tag is "
		 "left for a new one's");
	return -EOVERFLOW;
}

/* --- a restored inode's attributes, at its first use --- */

/* A restored file's attributes as a lookup of its name finds them (the
 * write-back's dirty files, the cache index): where the store cannot
 * be asked.  The index keeps attributes by key and ETag, which cannot
 * tell apart two empty objects that were at one key in turn, so the
 * store comes first. */
static void restored_by_name(struct fs *fs, struct fs_inode *in)
{
	char dkey[OBJ_KEY_MAX + 2], name[NAME_MAX + 1];
	struct fs_inode *dir, *found;
	struct ns_entry e;
	bool ok;

	pthread_mutex_lock(&fs->lock);
	ok = !in->unlinked && !in->has_attr;
	dir = in->parent;
	snprintf(dkey, sizeof(dkey), "%s", dir->key);
	snprintf(name, sizeof(name), "%s", fs_iname(in));
	pthread_mutex_unlock(&fs->lock);
	if (!ok || ns_find(fs->ns, dkey, name, &e) || e.is_dir)
		return;
	e.name = name;
	found = fs_inode_lookup(fs, dir, &e); /* in, if the name is still its */
	if (found)
		fs_inode_forget(fs, found, 1);
}

/* One restored inode resolved at a time: two at once (a getattr and a
 * create in the directory) could otherwise apply older attributes over
 * what the first had moved since. */
static pthread_mutex_t restore_lock = PTHREAD_MUTEX_INITIALIZER;

/* A restored file: the store's word first (what was known of it before,
 * attr_ds set by an upload that ended since, is not this inode's), by
 * its name where the store was not asked. */
static void restored_file(struct fs *fs, struct fs_inode *in)
{
	bool gone;

	pthread_mutex_lock(&fs->lock);
	in->attr_ds = 0;
	gone = in->unlinked; /* its key may be another file's now */
	pthread_mutex_unlock(&fs->lock);
	if (!gone)
		fs_revalidate(fs, in);
	pthread_mutex_lock(&fs->lock);
	fs_set_restored(in, false, false);
	pthread_mutex_unlock(&fs->lock);
	restored_by_name(fs, in);
}

/* A restored directory: the marker's metadata, else the index (which
 * keeps a directory's attributes by name: a name made, chowned and
 * removed again and again, its marker never uploaded, may still have
 * another's there); a marker waiting for its upload has the latest; the
 * times that entries made and removed moved (in memory only, and in the
 * journal) stand over both. */
static void restored_dir(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	struct cache_attr a;
	struct obj_meta m;
	int64_t mt, ct;
	bool times, gone;

	pthread_mutex_lock(&fs->lock);
	times = fs_xr(in)->tk_times;
	mt = in->mtime_ns;
	ct = in->ctime_ns;
	gone = in->unlinked; /* its key may be another directory's now */
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	if (gone) {
		/* its times only */
	} else if (ns_store_up(fs->ns) && !ns_head(fs->ns, key, &m)) {
		ns_meta_attr(&m, &a);
		obj_meta_release(&m);
		pthread_mutex_lock(&fs->lock);
		fs_attr_apply(fs, in, &a);
		pthread_mutex_unlock(&fs->lock);
		cache_attr_set(fs->cfg.cache, key, &a);
	} else if (!cache_attr_get(fs->cfg.cache, key, &a)) {
		pthread_mutex_lock(&fs->lock);
		fs_attr_apply(fs, in, &a);
		pthread_mutex_unlock(&fs->lock);
	}
	if (!gone)
		fs_refresh_from_w(fs, in);
	pthread_mutex_lock(&fs->lock);
	if (times && !in->has_attr) { /* nothing known: as fs_dir_touch */
		in->has_attr = true;
		in->mode = (uint32_t)fs->cfg.dir_mode;
		in->uid = (uint32_t)fs->cfg.uid;
		in->gid = (uint32_t)fs->cfg.gid;
	}
	if (times) {
		in->mtime_ns = mt;
		in->ctime_ns = ct;
	}
	fs_set_restored(in, false, false);
	pthread_mutex_unlock(&fs->lock);
}

void fs_restored_attr(struct fs *fs, struct fs_inode *in)
{
	bool due;

	pthread_mutex_lock(&restore_lock);
	pthread_mutex_lock(&fs->lock);
	due = fs_xr(in)->restored;
	pthread_mutex_unlock(&fs->lock);
	if (due && in->is_dir)
		restored_dir(fs, in);
	else if (due)
		restored_file(fs, in);
	pthread_mutex_unlock(&restore_lock);
}
