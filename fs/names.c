/* SPDX-License-Identifier: MIT */
/*
 * names.c - the FUSE operations that change names: mkdir, mknod,
 * symlink (and readlink), unlink, rmdir and rename (mounted with a mode
 * other than ro).  A dirty file is renamed or removed locally (what never
 * reached the bucket never does); a clean object is renamed by a
 * server-side copy and a deletion of the old key (tombstone, in the
 * background); directories by doing that for every key below.  A request
 * a dead daemon had carried out before its reply was kept is answered as
 * done (fs_tkr_redo, docs/keeper.md).  Semantics and their limits:
 * docs/semantics.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_int.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* mkdir, symlink and mknod: a new directory marker, link object or
 * special file under parent, created as a dirty file holding data (the
 * link's target; nothing for the others) and committed at once, then
 * replied as a new entry. */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		      enum cache_wkind kind, mode_t mode, const char *data,
		      uint32_t rdev)
{
	struct fs *fs = FS(req);
	char key[OBJ_KEY_MAX + 2];
	struct cache_wfile *w;
	struct cache_wattr a;
	struct fs_inode *dir, *in;
	struct ns_entry e;
	size_t len = data ? strlen(data) : 0;
	int err, rc;

	dir = fs_dir_of(fs, parent, &err);
	if (!dir) {
		fs_reply_err(req, err);
		return;
	}
	rc = fs_child_key(fs, dir, name, kind == CACHE_WK_DIR, key,
		       sizeof(key), kind == CACHE_WK_DIR ? "mkdir" : "create");
	if (!rc) {
		rc = ns_find(fs->ns, dir->key, name, &e);
		rc = rc == 0 ? -EEXIST : rc == -ENOENT ? 0 : rc;
	}
	if (rc == -EEXIST && e.is_dir == (kind == CACHE_WK_DIR) &&
	    fs_tkr_redo(fs, kind == CACHE_WK_DIR ? "mkdir" :
			kind == CACHE_WK_SYMLINK ? "symlink" : "mknod", name)) {
		/* made by the daemon before, which may have died before
		 * moving the directory's times */
		fs_dir_touch(fs, dir);
		fs_op_lookup(req, parent, name);
		return;
	}
	if (!rc)
		fs_tkr_intent(fs, parent, name);
	fs_ctx_attr(req, kind, mode, &a);
	a.rdev = rdev;
	if (!rc)
		rc = cache_w_create(fs->cfg.cache, key, &a, false, NULL, NULL,
				    &w);
	if (!rc) {
		ssize_t n = len ? cache_w_pwrite(w, data, len, 0) : 0;

		/* commit: the marker or link goes up */
		rc = n < 0 ? (int)n : cache_w_commit(w, false);
		cache_w_put(w);
	}
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	a.size = len;
	fs_dir_touch(fs, dir);
	in = fs_new_entry(fs, dir, name, &a);
	if (in)
		fs_reply_entry(req, fs, in);
	else
		fs_reply_err(req, ENOMEM);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	make_node(req, parent, name, CACHE_WK_DIR, mode, NULL, 0);
}

/* Every type mknod(2) makes: a regular file (empty), FIFOs, sockets and
 * devices (zero-length objects, their type and rdev in the metadata).
 * Opening them is the kernel's business (pipes, sockets; devices not at
 * all: the mount is nodev). */
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	int kind = (mode & S_IFMT) ? cache_wkind_of(mode) : CACHE_WK_FILE;

	if (kind < 0 || kind == CACHE_WK_DIR || kind == CACHE_WK_SYMLINK) {
		fs_reply_err(req, EINVAL);
		return;
	}
	make_node(req, parent, name, (enum cache_wkind)kind, mode, NULL,
		  (uint32_t)rdev);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	make_node(req, parent, name, CACHE_WK_SYMLINK, 0777, link, 0);
}

void fs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct cache_wfile *w;
	char buf[4097];
	size_t got = 0;
	int rc = 0;

	if (!in || fs_ftype(in) != S_IFLNK) {
		fs_reply_err(req, in ? EINVAL : ENOENT);
		return;
	}
	if (!cache_w_get(fs->cfg.cache, in->key, &w)) {
		ssize_t n = pread(cache_w_fd(w), buf, sizeof(buf) - 1, 0);

		rc = n < 0 ? -errno : 0;
		got = n < 0 ? 0 : (size_t)n;
		cache_w_put(w);
	} else {
		rc = ns_read_small(fs->ns, in->key, buf, sizeof(buf) - 1,
				   &got);
	}
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	buf[got] = '\0';
	fuse_reply_readlink(req, buf);
}

/* An open inode about to leave the namespace keeps its dirty file for
 * its attributes (fs->lock held). */
static void keep_dead(struct fs *fs, struct fs_inode *in, const char *key)
{
	if (in && !in->is_dir && in->nopen && !in->x->w_dead)
		cache_w_get(fs->cfg.cache, key, &in->x->w_dead);
}

/* Removes name (a file: dir_entry false) and replies. */
static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name,
			bool dir_entry)
{
	struct fs *fs = FS(req);
	struct cache *c = fs->cfg.cache;
	char key[OBJ_KEY_MAX + 2];
	struct fs_inode *dir, *in;
	struct ns_entry e;
	struct cache_wfile *pin = NULL;
	bool held = false, in_bucket;
	int err, rc;

	dir = fs_dir_of(fs, parent, &err);
	if (!dir) {
		fs_reply_err(req, err);
		return;
	}
	rc = ns_find(fs->ns, dir->key, name, &e);
	if (!rc && e.is_dir != dir_entry)
		rc = dir_entry ? -ENOTDIR : -EISDIR;
	if (!rc)
		rc = fs_child_key(fs, dir, name, dir_entry, key, sizeof(key),
			       "remove");
	if (!rc && dir_entry) {
		struct ns_listing *l = ns_dir_view(fs->ns, key, &rc);

		if (l && l->n)
			rc = -ENOTEMPTY;
		ns_listing_put(l);
	}
	if (rc == -ENOENT &&
	    fs_tkr_redo(fs, dir_entry ? "rmdir" : "unlink", name)) {
		/* The daemon before removed it, perhaps without its inode
		 * (restored under the name): out of the namespace here too */
		if (!fs_child_key(fs, dir, name, dir_entry, key, sizeof(key),
				  "remove")) {
			pthread_mutex_lock(&fs->lock);
			in = fs_inode_by_key(fs, key);
			if (in)
				fs_inode_unhash(fs, in);
			pthread_mutex_unlock(&fs->lock);
			ns_dir_invalidate(fs->ns, dir_entry ? key : dir->key,
					  dir_entry);
		}
		fs_dir_touch(fs, dir);
		fs_reply_err(req, 0);
		return;
	}
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	fs_tkr_intent(fs, parent, name);
	/* A name of a file with hard links: the other names stay. */
	if (!dir_entry && (rc = fs_link_unlink(fs, dir, name, key, &e)) <= 0) {
		if (!rc)
			fs_dir_touch(fs, dir);
		fs_reply_err(req, -rc);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_by_key(fs, key);
	keep_dead(fs, in, key);
	if (in && !dir_entry && in->nopen && !e.pending) {
		/* Open readers keep reading: the delete waits for them. */
		held = true;
		in->x->held_deletes++; /* open: it has one */
	}
	if (in)
		fs_inode_unhash(fs, in);
	pthread_mutex_unlock(&fs->lock);
	/* A directory's marker may exist even if the listing does not say;
	 * deleting a missing key is harmless. */
	in_bucket = dir_entry || ns_pin_pending(fs->ns, key, e.pending, &pin);
	cache_w_unlink(c, key, in_bucket, held);
	ns_unpin(pin);
	if (dir_entry)
		ns_remove_markers(fs->ns, key, e.markers);
	if (dir_entry)
		ns_dir_invalidate(fs->ns, key, true);
	else
		cache_evict_key(c, key);
	fs_dir_touch(fs, dir);
	fs_reply_err(req, 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, true);
}

/* After a rename: the listings it changed are stale and the directories'
 * times move; from and to, a directory's keys (NULL: a file's). */
static void rename_settle(struct fs *fs, struct fs_inode *sdir,
			  struct fs_inode *ddir, const char *from,
			  const char *to)
{
	ns_dir_invalidate(fs->ns, sdir->key, false);
	ns_dir_invalidate(fs->ns, ddir->key, false);
	fs_dir_touch(fs, sdir);
	if (ddir != sdir)
		fs_dir_touch(fs, ddir);
	if (from) {
		ns_dir_invalidate(fs->ns, from, true);
		ns_dir_invalidate(fs->ns, to, true);
	}
}

/* A rename the daemon before carried out (tk_replies.c), de the entry
 * now at ddir/newname: what it may not have done in memory, the inode
 * restored under the old name moved to the new one. */
static int rename_redone(struct fs *fs, struct fs_inode *sdir,
			 const char *name, struct fs_inode *ddir,
			 const char *newname, const struct ns_entry *de)
{
	char from[OBJ_KEY_MAX + 2], to[OBJ_KEY_MAX + 2];
	struct fs_inode *in;

	if (!fs_child_key(fs, sdir, name, de->is_dir, from, sizeof(from),
			  "rename") &&
	    !fs_child_key(fs, ddir, newname, de->is_dir, to, sizeof(to),
			  "rename")) {
		pthread_mutex_lock(&fs->lock);
		in = fs_inode_by_key(fs, from);
		if (in)
			(void)fs_inode_move(fs, in, ddir, newname);
		pthread_mutex_unlock(&fs->lock);
		rename_settle(fs, sdir, ddir, de->is_dir ? from : NULL, to);
	} else {
		rename_settle(fs, sdir, ddir, NULL, NULL);
	}
	return 0;
}

/* rename(2) of sdir/name to ddir/newname; 0 or -errno. */
static int do_rename(struct fs *fs, struct fs_inode *sdir, const char *name,
		     struct fs_inode *ddir, const char *newname,
		     unsigned int flags)
{
	char from[OBJ_KEY_MAX + 2], to[OBJ_KEY_MAX + 2];
	struct fs_inode *in, *promoted = NULL, *taken = NULL;
	struct ns_entry se, de;
	bool exists = false, same = false;
	int rc;

	rc = ns_find(fs->ns, sdir->key, name, &se);
	if (rc == -ENOENT && !ns_find(fs->ns, ddir->key, newname, &de) &&
	    fs_tkr_redo(fs, "rename", name)) /* the daemon before moved it */
		return rename_redone(fs, sdir, name, ddir, newname, &de);
	if (!rc) {
		rc = ns_find(fs->ns, ddir->key, newname, &de);
		exists = rc == 0;
		rc = rc == -ENOENT ? 0 : rc;
	}
	if (!rc && exists && (flags & RENAME_NOREPLACE))
		rc = -EEXIST;
	if (!rc && exists && de.is_dir != se.is_dir)
		rc = de.is_dir ? -EISDIR : -ENOTDIR;
	if (!rc)
		rc = fs_child_key(fs, sdir, name, se.is_dir, from, sizeof(from),
				  "rename");
	if (!rc)
		rc = fs_child_key(fs, ddir, newname, se.is_dir, to, sizeof(to),
				  "rename");
	if (!rc && se.is_dir && !strncmp(to, from, strlen(from)))
		rc = -EINVAL; /* into itself */
	if (!rc && exists && de.is_dir) {
		struct ns_listing *l = ns_dir_view(fs->ns, to, &rc);

		if (l && l->n)
			rc = -ENOTEMPTY;
		ns_listing_put(l);
	}
	if (!rc)
		fs_tkr_intent(fs, sdir->ino, name);
	if (!rc && !se.is_dir)
		rc = fs_link_rename_pre(fs, sdir, name, ddir, newname, exists,
					&same, &promoted);
	if (rc || same) /* same: two names of one file, nothing happens */
		return rc;
	if (exists && !de.is_dir) {
		pthread_mutex_lock(&fs->lock);
		keep_dead(fs, fs_inode_by_key(fs, to), to);
		pthread_mutex_unlock(&fs->lock);
	}
	if (strcmp(from, to))
		rc = se.is_dir ? ns_rename_dir(fs->ns, from, to, se.markers) :
		     ns_rename_file(fs->ns, from, to, &se, exists ? &de : NULL);
	if (rc) {
		fs_link_rename_post(fs, promoted, NULL, ddir, newname, rc);
		return rc;
	}
	fs_tkr_changed(fs);
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_by_key(fs, from);
	if (in)
		rc = fs_inode_move(fs, in, ddir, newname);
	else if ((in = fs_inode_by_key(fs, to)))
		fs_inode_unhash(fs, in); /* replaced */
	if (!se.is_dir && !rc)
		taken = fs_link_renamed(fs, sdir, name, ddir, newname);
	pthread_mutex_unlock(&fs->lock);
	fs_link_rename_post(fs, promoted, taken, ddir, newname, 0);
	rename_settle(fs, sdir, ddir, se.is_dir ? from : NULL, to);
	return rc;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct fs *fs = FS(req);
	struct fs_inode *sdir, *ddir;
	bool links;
	int err, rc;

	sdir = fs_dir_of(fs, parent, &err);
	ddir = sdir ? fs_dir_of(fs, newparent, &err) : NULL;
	if (!ddir) {
		fs_reply_err(req, err);
		return;
	}
	if (flags & RENAME_EXCHANGE) {
		fs_reply_err(req, EINVAL);
		return;
	}
	/* With hard links in the mount, names and keys may not move while
	 * a copy is made under them (fs/link.c). */
	links = fs_links_any(fs);
	if (links)
		fs_link_lock(fs);
	rc = do_rename(fs, sdir, name, ddir, newname, flags);
	if (links)
		fs_link_unlock(fs);
	fs_reply_err(req, -rc);
}

void fs_names_ops(struct fuse_lowlevel_ops *ops)
{
	ops->mkdir = op_mkdir;
	ops->mknod = op_mknod;
	ops->symlink = op_symlink;
	ops->unlink = op_unlink;
	ops->rmdir = op_rmdir;
	ops->rename = op_rename;
}
