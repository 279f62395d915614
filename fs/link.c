/* SPDX-License-Identifier: MIT */
/*
 * link.c - hard links within one mount.
 *
 * An object store has no inodes: a file with several names is one object
 * per name, each a copy.  In the mount they are one inode.  Its first name
 * is the inode's key (in->key): reads, writes and attribute changes go
 * there as for any file.  Every other name is a struct fs_link whose key
 * is brought up to date each time a change of the file is committed
 * (close, fsync, setattr, xattrs: fs_link_sync), with that commit's
 * durability: a dirty file is copied into the other name's dirty file, a
 * clean one is copied server-side.  So after a crash or in the bucket,
 * each name holds the file as of its last commit.
 *
 * unlink of another name deletes its key; unlink of the first name makes
 * another name the first (the file's dirty copy, or a server-side copy,
 * moves onto its key: ns_rename_file, then fs_inode_move).  Both move the
 * file's ctime, as a change of its link count does.  An inode with links
 * is not freed when the kernel forgets it, so every name keeps finding
 * the one inode (fs_inode_ref asks fs_link_inode first).
 *
 * The links live in this mount's memory, and in the takeover journal
 * (fs_tk_link) so that a new daemon after a crash has them
 * (docs/keeper.md): after a remount the names are independent files with
 * one link each (docs/posix.md, "Hard links").
 * Locking: fs->lock protects the table, and each inode's links and
 * nlinks (in its fs_inode_x).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_int.h"

bool fs_links_any(struct fs *fs)
{
	return atomic_load(&fs->links_total) != 0;
}

void fs_link_lock(struct fs *fs)
{
	pthread_mutex_lock(&fs->link_lock);
}

void fs_link_unlock(struct fs *fs)
{
	pthread_mutex_unlock(&fs->link_lock);
}

/* ---- the table (fs->lock held) ---- */

static size_t link_hash(const struct fs_inode *dir, const char *name)
{
	return (size_t)(util_fnv1a64(UTIL_FNV64_BASIS ^ dir->ino, name,
				     strlen(name)) % FS_LINK_BUCKETS);
}

static struct fs_link *link_find(struct fs *fs, const struct fs_inode *dir,
				 const char *name)
{
	struct fs_link *l;

	if (!fs->links)
		return NULL;
	for (l = fs->links[link_hash(dir, name)]; l; l = l->next_hash)
		if (l->dir == dir && !strcmp(l->name, name))
			return l;
	return NULL;
}

struct fs_inode *fs_link_inode(struct fs *fs, const struct fs_inode *dir,
			       const char *name)
{
	struct fs_link *l = link_find(fs, dir, name);

	return l ? l->in : NULL;
}

bool fs_link_named(struct fs *fs, const struct fs_inode *dir,
		   const char *name)
{
	bool named;

	pthread_mutex_lock(&fs->lock);
	named = link_find(fs, dir, name) != NULL;
	pthread_mutex_unlock(&fs->lock);
	return named;
}

static void link_hash_in(struct fs *fs, struct fs_link *l)
{
	size_t b = link_hash(l->dir, l->name);

	l->next_hash = fs->links[b];
	fs->links[b] = l;
}

static void link_hash_out(struct fs *fs, struct fs_link *l)
{
	for (struct fs_link **pp = &fs->links[link_hash(l->dir, l->name)];
	     *pp; pp = &(*pp)->next_hash)
		if (*pp == l) {
			*pp = l->next_hash;
			return;
		}
}

/* Adds dir/name as a name of in; journaled for a takeover unless it is
 * read back from the journal (restored). */
static int link_add(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		    const char *name, bool restored)
{
	struct fs_inode_x *x;
	struct fs_link *l;

	if ((!fs->links &&
	     !(fs->links = calloc(FS_LINK_BUCKETS, sizeof(*fs->links)))) ||
	    !(x = fs_inode_x(in)))
		return -ENOMEM;
	l = calloc(1, sizeof(*l));
	if (!l || !(l->name = strdup(name))) {
		free(l);
		return -ENOMEM;
	}
	l->in = in;
	l->dir = dir;
	dir->children++;
	link_hash_in(fs, l);
	l->next_in = x->links;
	x->links = l;
	x->nlinks++;
	atomic_fetch_add(&fs->links_total, 1);
	if (!restored)
		fs_tk_link(fs, in, dir, name, false, NULL, NULL);
	return 0;
}

int fs_link_restore(struct fs *fs, struct fs_inode *in, struct fs_inode *dir,
		    const char *name)
{
	int rc;

	pthread_mutex_lock(&fs->lock);
	rc = link_add(fs, in, dir, name, true);
	pthread_mutex_unlock(&fs->lock);
	return rc;
}

void fs_links_each(struct fs *fs, void (*fn)(void *arg,
		   const struct fs_inode *in, const struct fs_inode *dir,
		   const char *name), void *arg)
{
	if (!fs->links)
		return;
	for (size_t b = 0; b < FS_LINK_BUCKETS; b++)
		for (struct fs_link *l = fs->links[b]; l; l = l->next_hash)
			fn(arg, l->in, l->dir, l->name);
}

/* Drops l.  Its directory may go with it, and so may the inode: callers
 * hold a reference to the inode (nlookup) while they still use it. */
static void link_drop(struct fs *fs, struct fs_link *l)
{
	struct fs_inode *in = l->in, *dir = l->dir;
	struct fs_inode_x *x = in->x; /* made by link_add */

	fs_tk_link(fs, in, dir, l->name, true, NULL, NULL);
	link_hash_out(fs, l);
	for (struct fs_link **pp = &x->links; *pp; pp = &(*pp)->next_in)
		if (*pp == l) {
			*pp = l->next_in;
			break;
		}
	util_assert(x->nlinks > 0 && dir->children > 0);
	x->nlinks--;
	dir->children--;
	atomic_fetch_sub(&fs->links_total, 1);
	free(l->name);
	free(l);
	fs_inode_maybe_free(fs, dir);
	fs_inode_maybe_free(fs, in);
}

void fs_links_free(struct fs *fs)
{
	if (!fs->links)
		return;
	for (size_t b = 0; b < FS_LINK_BUCKETS; b++)
		for (struct fs_link *l = fs->links[b], *n; l; l = n) {
			n = l->next_hash;
			free(l->name);
			free(l);
		}
	free(fs->links);
	fs->links = NULL;
}

/* The key of l (lock held). */
static int link_key(const struct fs_link *l, char *key, size_t len)
{
	return (size_t)snprintf(key, len, "%s%s", l->dir->key, l->name) >=
	       len ? -ENAMETOOLONG : 0;
}

/* The file with links that dir/name (key) is a name of, or NULL (lock
 * held). */
static struct fs_inode *link_owner(struct fs *fs, struct fs_inode *dir,
				   const char *name, const char *key)
{
	struct fs_link *l = link_find(fs, dir, name);
	struct fs_inode *in;

	if (l)
		return l->in;
	in = fs_inode_by_key(fs, key);
	return in && !in->is_dir && fs_xr(in)->links ? in : NULL;
}

/* ---- copies ---- */

/* cache_w_write_with's source: the bytes of another dirty file, at the
 * same offsets. */
static ssize_t copy_fn(void *arg, int fd, uint64_t off, size_t len)
{
	int src = *(const int *)arg;
	loff_t so = (loff_t)off, dof = (loff_t)off;
	char buf[65536];
	ssize_t n;

	n = copy_file_range(src, &so, fd, &dof, len, 0);
	if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
		      errno == EOPNOTSUPP)) {
		n = pread(src, buf, len < sizeof(buf) ? len : sizeof(buf),
			  (off_t)off);
		if (n > 0)
			n = pwrite(fd, buf, (size_t)n, (off_t)off);
	}
	if (n < 0)
		return -errno;
	return n ? n : -EIO; /* shorter than it said: try again later */
}

/* The user metadata of w becomes kv[0..n). */
static int copy_xattrs(struct cache_wfile *w, const struct obj_kv *kv,
		       size_t n)
{
	struct obj_kv *old = NULL;
	size_t no = 0;
	int rc = cache_w_xattrs(w, &old, &no);

	for (size_t i = 0; !rc && i < no; i++) {
		bool keep = false;

		for (size_t j = 0; j < n && !keep; j++)
			keep = !strcmp(old[i].name, kv[j].name);
		if (!keep)
			rc = cache_w_xattr_remove(w, old[i].name);
	}
	for (size_t i = 0; !rc && i < n; i++)
		rc = cache_w_xattr_set(w, kv[i].name, kv[i].value,
				       strlen(kv[i].value), 0);
	obj_kv_free(old, no);
	return rc;
}

/* key's dirty file becomes a copy of src: bytes, attributes, xattrs;
 * committed with durable.  An existing one is rewritten in place (as an
 * open for writing would): never a moment without the name. */
static int clone_w(struct fs *fs, struct cache_wfile *src, const char *key,
		   bool durable)
{
	struct cache *c = fs->cfg.cache;
	struct cache_wfile *w = NULL;
	struct cache_wattr a, z;
	struct obj_kv *kv = NULL;
	size_t n = 0;
	int rc, sfd = cache_w_fd(src);
	ssize_t wn;

	cache_w_stat(src, &a);
	rc = cache_w_xattrs(src, &kv, &n);
	if (rc)
		return rc;
	z = a;
	z.size = 0;
	for (int tries = 0; tries < 3; tries++) {
		/* in the bucket perhaps: an earlier copy may have gone up */
		rc = cache_w_create(c, key, &z, true, NULL, NULL, &w);
		if (!rc) {
			cache_w_writer(w, true);
			break;
		}
		if (rc != -EEXIST)
			break;
		rc = cache_w_hold(c, key, &w);
		if (!rc) {
			rc = cache_w_truncate(w, 0);
			break;
		}
		w = NULL; /* uploaded meanwhile: create it again */
	}
	if (!rc && a.size) {
		wn = cache_w_write_with(w, 0, a.size, copy_fn, &sfd);
		rc = wn < 0 ? (int)wn : 0;
	}
	if (!rc)
		rc = copy_xattrs(w, kv, n);
	if (!rc) {
		cache_w_setattr(w, &a, CACHE_WA_MODE | CACHE_WA_UID |
			       CACHE_WA_GID | CACHE_WA_MTIME | CACHE_WA_ATIME |
			       CACHE_WA_CTIME);
		rc = cache_w_commit(w, durable);
	}
	if (w) {
		cache_w_writer(w, false);
		cache_w_put(w);
	}
	obj_kv_free(kv, n);
	return rc;
}

/* Marks the listing of key's directory old. */
static void invalidate_parent(struct fs *fs, const char *key)
{
	char d[OBJ_KEY_MAX + 2];
	size_t n;

	snprintf(d, sizeof(d), "%s", key);
	n = strlen(d);
	while (n && d[n - 1] != '/')
		d[--n] = '\0';
	ns_dir_invalidate(fs->ns, d, false);
}

/* fs_link_sync with link_lock held: the links cannot change. */
static int link_sync_locked(struct fs *fs, struct fs_inode *in, bool durable)
{
	char pkey[OBJ_KEY_MAX + 2], key[OBJ_KEY_MAX + 2];
	struct cache_wfile *w = NULL;
	uint64_t v = 0;
	int rc = 0, rc1;

	pthread_mutex_lock(&fs->lock);
	snprintf(pkey, sizeof(pkey), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	if (!fs_xr(in)->links)
		return 0;
	if (!cache_w_get(fs->cfg.cache, pkey, &w))
		v = cache_w_version(w); /* before the copy: a later change
					 * is copied again next time */
	else if (fs->cfg.mode == FS_MODE_LU)
		return -EIO; /* never: linked files stay dirty under lu */
	for (struct fs_link *l = in->x->links; l; l = l->next_in) {
		if (w && l->synced == v)
			continue; /* this version is there already */
		pthread_mutex_lock(&fs->lock);
		rc1 = link_key(l, key, sizeof(key));
		pthread_mutex_unlock(&fs->lock);
		if (!rc1)
			rc1 = w ? clone_w(fs, w, key, durable) :
				  ns_copy_to(fs->ns, pkey, key);
		if (!rc1)
			l->synced = v;
		else if (!rc)
			rc = rc1;
		if (!rc1)
			invalidate_parent(fs, key);
	}
	cache_w_put(w);
	if (rc)
		fprintf(stderr, "fmfs: the hard links of '%s' could not be "
			"updated (they follow with its next change): %s\n",
			pkey, strerror(-rc));
	return rc;
}

int fs_link_sync(struct fs *fs, struct fs_inode *in, bool durable)
{
	int rc;

	pthread_mutex_lock(&fs->lock);
	rc = fs_xr(in)->nlinks != 0;
	pthread_mutex_unlock(&fs->lock);
	if (!rc)
		return 0;
	pthread_mutex_lock(&fs->link_lock);
	rc = link_sync_locked(fs, in, durable);
	pthread_mutex_unlock(&fs->link_lock);
	return rc;
}

/* The file's ctime moves (a name came or went), then its other names
 * follow (link_lock held).  The store down: the inode's ctime moves all
 * the same, the copies follow with the next change.  Returns the copies'
 * update's result. */
static int link_touch(struct fs *fs, struct fs_inode *in)
{
	struct cache_wattr a = { 0 };
	struct cache_wfile *w;
	char key[OBJ_KEY_MAX + 2];
	int rc;

	pthread_mutex_lock(&fs->lock);
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	if (!cache_w_hold(fs->cfg.cache, key, &w)) {
		cache_w_setattr(w, &a, 0); /* ctime: now */
		rc = cache_w_commit(w, false);
		cache_w_writer(w, false);
		cache_w_put(w);
		fs_refresh_from_w(fs, in);
	} else {
		rc = fs_copy_meta(fs, in, &a, 0, NULL, NULL, 0, 0);
	}
	if (rc) {
		pthread_mutex_lock(&fs->lock);
		if (in->has_attr)
			in->ctime_ns = util_wall_ns();
		pthread_mutex_unlock(&fs->lock);
	}
	return link_sync_locked(fs, in, false);
}

/* The first name of in (its key, entry se) goes: its first link takes
 * its place, the file's bytes moving onto that key (link_lock held; the
 * caller holds a reference to in). */
static int link_promote(struct fs *fs, struct fs_inode *in, const char *key,
			const struct ns_entry *se)
{
	char to[OBJ_KEY_MAX + 2], from_dir[OBJ_KEY_MAX + 2];
	struct fs_link *l = fs_xr(in)->links;
	struct ns_entry de;
	int rc;

	pthread_mutex_lock(&fs->lock);
	rc = l ? link_key(l, to, sizeof(to)) : -ENOENT;
	snprintf(from_dir, sizeof(from_dir), "%s", in->parent->key);
	pthread_mutex_unlock(&fs->lock);
	if (rc)
		return rc;
	rc = ns_find(fs->ns, l->dir->key, l->name, &de);
	if (rc == -ENOENT)
		rc = ns_rename_file(fs->ns, key, to, se, NULL);
	else if (!rc)
		rc = ns_rename_file(fs->ns, key, to, se, &de);
	if (rc)
		return rc;
	pthread_mutex_lock(&fs->lock);
	rc = fs_inode_move(fs, in, l->dir, l->name);
	in->attr_ds = 0; /* another key now: its version from a HEAD */
	if (!rc)
		link_drop(fs, l);
	pthread_mutex_unlock(&fs->lock);
	ns_dir_invalidate(fs->ns, from_dir, false);
	invalidate_parent(fs, to);
	return rc;
}

int fs_link_unlink(struct fs *fs, struct fs_inode *dir, const char *name,
		   const char *key, const struct ns_entry *e)
{
	struct fs_inode *in;
	struct fs_link *l;
	int rc = 0;

	if (!fs_links_any(fs))
		return 1;
	pthread_mutex_lock(&fs->link_lock);
	pthread_mutex_lock(&fs->lock);
	in = link_owner(fs, dir, name, key);
	if (in)
		in->nlookup++; /* stays while we work */
	l = in ? link_find(fs, dir, name) : NULL;
	pthread_mutex_unlock(&fs->lock);
	if (!in) {
		pthread_mutex_unlock(&fs->link_lock);
		return 1;
	}
	if (l) { /* another name: its copy goes (it may be in the bucket) */
		rc = cache_w_unlink(fs->cfg.cache, key, true, false);
		pthread_mutex_lock(&fs->lock);
		if (!rc)
			link_drop(fs, l);
		pthread_mutex_unlock(&fs->lock);
		if (!rc)
			cache_evict_key(fs->cfg.cache, key);
		ns_dir_invalidate(fs->ns, dir->key, false);
	} else {
		rc = link_promote(fs, in, key, e);
	}
	if (!rc)
		link_touch(fs, in); /* the name is gone all the same */
	pthread_mutex_unlock(&fs->link_lock);
	fs_inode_forget(fs, in, 1);
	return rc;
}

int fs_link_rename_pre(struct fs *fs, struct fs_inode *sdir,
		       const char *name, struct fs_inode *ddir,
		       const char *newname, bool exists, bool *same,
		       struct fs_inode **promoted)
{
	char from[OBJ_KEY_MAX + 2], to[OBJ_KEY_MAX + 2];
	struct fs_inode *x, *y;
	struct ns_entry de;
	int rc;

	*same = false;
	*promoted = NULL;
	if (!exists)
		return 0;
	pthread_mutex_lock(&fs->lock);
	if (!fs->links) {
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	snprintf(from, sizeof(from), "%s%s", sdir->key, name);
	snprintf(to, sizeof(to), "%s%s", ddir->key, newname);
	x = link_owner(fs, sdir, name, from);
	y = link_owner(fs, ddir, newname, to);
	if (!y || x == y || link_find(fs, ddir, newname)) {
		/* two names of one file: nothing to do; another name of y:
		 * taken once the rename is done (fs_link_renamed) */
		*same = y && x == y;
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	y->nlookup++;
	pthread_mutex_unlock(&fs->lock);
	/* y's first name: another takes its place first */
	rc = ns_find(fs->ns, ddir->key, newname, &de);
	if (!rc)
		rc = link_promote(fs, y, to, &de);
	if (rc)
		fs_inode_forget(fs, y, 1);
	else
		*promoted = y;
	return rc;
}

struct fs_inode *fs_link_renamed(struct fs *fs, struct fs_inode *sdir,
				 const char *name, struct fs_inode *ddir,
				 const char *newname)
{
	struct fs_link *l = link_find(fs, sdir, name);
	struct fs_link *d = link_find(fs, ddir, newname);
	struct fs_inode *odir, *taken = NULL;
	char *nn;

	if (d && d != l) { /* replaced: its file keeps its other names */
		taken = d->in;
		taken->nlookup++;
		link_drop(fs, d);
	}
	if (!l)
		return taken;
	nn = strdup(newname);
	if (!nn) { /* the name is out of the table: a copy from now on */
		link_drop(fs, l);
		return taken;
	}
	fs_tk_link(fs, l->in, l->dir, l->name, true, ddir, nn);
	link_hash_out(fs, l);
	odir = l->dir;
	free(l->name);
	l->name = nn;
	l->dir = ddir;
	ddir->children++;
	link_hash_in(fs, l);
	odir->children--;
	fs_inode_maybe_free(fs, odir);
	return taken;
}

void fs_link_rename_post(struct fs *fs, struct fs_inode *promoted,
			 struct fs_inode *taken, struct fs_inode *ddir,
			 const char *newname, int rc)
{
	if (promoted && rc) {
		/* The rename failed after ddir/newname stopped being the
		 * first name of promoted: it comes back as another name. */
		pthread_mutex_lock(&fs->lock);
		if (link_add(fs, promoted, ddir, newname, false))
			fprintf(stderr, "fmfs: rename failed, and '%s%s' is "
				"now a copy of its file\n", ddir->key,
				newname);
		pthread_mutex_unlock(&fs->lock);
		link_sync_locked(fs, promoted, false);
	}
	if (promoted) {
		if (!rc)
			link_touch(fs, promoted);
		fs_inode_forget(fs, promoted, 1);
	}
	if (taken) {
		link_touch(fs, taken);
		fs_inode_forget(fs, taken, 1);
	}
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	struct fs *fs = FS(req);
	struct cache *c = fs->cfg.cache;
	struct fs_inode *in = fs_inode_get(fs, ino), *dir;
	struct cache_wfile *w = NULL;
	char key[OBJ_KEY_MAX + 2], pkey[OBJ_KEY_MAX + 2];
	struct fs_link *l;
	struct ns_entry e;
	bool pinned, again = false, done;
	int err, rc;

	if (!in) {
		fs_reply_err(req, ENOENT);
		return;
	}
	if (in->is_dir) {
		fs_reply_err(req, EPERM); /* as every Linux file system */
		return;
	}
	dir = fs_dir_of(fs, newparent, &err);
	if (!dir) {
		fs_reply_err(req, err);
		return;
	}
	pthread_mutex_lock(&fs->link_lock);
	rc = fs_child_key(fs, dir, newname, false, key, sizeof(key), "link");
	if (!rc) {
		rc = ns_find(fs->ns, dir->key, newname, &e);
		rc = !rc ? -EEXIST : rc == -ENOENT ? 0 : rc;
	}
	pthread_mutex_lock(&fs->lock);
	/* The name of in already, without its copy: a daemon that died
	 * between the two (its journal has the link), this link resent. */
	again = !rc && (l = link_find(fs, dir, newname)) && l->in == in;
	/* The name and its copy both there: done by a daemon that died
	 * before its reply was kept (tk_replies.c), this link resent. */
	done = rc == -EEXIST && (l = link_find(fs, dir, newname)) &&
	       l->in == in && fs_tkr_redo(fs, "link", newname);
	if (done) /* what may not have followed the copy: as again */
		rc = 0, again = true;
	if (!rc && !again && !done && link_find(fs, dir, newname))
		rc = -EEXIST;
	if (!rc && in->unlinked)
		rc = -ENOENT;
	else if (!rc && !again && fs_xr(in)->nlinks + 1 >= FS_LINK_MAX)
		rc = -EMLINK;
	snprintf(pkey, sizeof(pkey), "%s", in->key);
	pinned = !rc;
	if (pinned)
		in->nlookup++; /* stays while we work; the reply's then */
	pthread_mutex_unlock(&fs->lock);
	if (!rc && !done)
		fs_tkr_intent(fs, newparent, newname);
	/* lu never writes the bucket: a linked file is kept dirty */
	if (!rc && fs->cfg.mode == FS_MODE_LU && cache_w_hold(c, pkey, &w)) {
		rc = fs_materialize(fs, in, false, &w);
		if (!rc)
			rc = cache_w_commit(w, false);
	}
	if (w) {
		cache_w_writer(w, false);
		cache_w_put(w);
	}
	if (!rc && !again) {
		pthread_mutex_lock(&fs->lock);
		rc = link_add(fs, in, dir, newname, false);
		pthread_mutex_unlock(&fs->lock);
	}
	/* The copy under the new name is made as the first of its updates,
	 * with the ctime the link gives the file. */
	if (!rc && (rc = link_touch(fs, in))) {
		/* no copy: the name never came */
		pthread_mutex_lock(&fs->lock);
		if ((l = link_find(fs, dir, newname)) && l->in == in)
			link_drop(fs, l);
		pthread_mutex_unlock(&fs->lock);
		cache_w_unlink(c, key, true, false);
	}
	pthread_mutex_unlock(&fs->link_lock);
	if (rc) {
		if (pinned)
			fs_inode_forget(fs, in, 1);
		fs_reply_err(req, -rc);
		return;
	}
	fs_dir_touch(fs, dir);
	ns_dir_invalidate(fs->ns, dir->key, false);
	fs_reply_entry(req, fs, in);
}

void fs_link_op(struct fuse_lowlevel_ops *ops)
{
	ops->link = op_link;
}
