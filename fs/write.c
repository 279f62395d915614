/* SPDX-License-Identifier: MIT */
/*
 * write.c - the FUSE operations that change bytes or names: create,
 * write, flush, fsync, setattr, mkdir, unlink, rmdir, rename, symlink,
 * readlink, setxattr and removexattr (mounted with a mode other than ro).
 *
 * Bytes go to the write-back's dirty files (cache/wb.c): a file opened
 * for writing is copied whole into one (fetched first if need be), then
 * every read and write of it uses that copy until it is uploaded.  close
 * and fsync commit it to the upload queue.  Names: a dirty file is
 * renamed or removed locally (what never reached the bucket never does);
 * a clean object is renamed by a server-side copy and a deletion of the
 * old key (tombstone, in the background); directories by doing that for
 * every key below.  Semantics and their limits: docs/semantics.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs_int.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

void fs_handle_put(struct fs_handle *h)
{
	struct fs *fs = h->fs;
	unsigned held = 0;
	char *key = NULL;
	struct cache_wfile *pt_w = NULL;
	struct cache_file *pt_cf = NULL;
	uint64_t pt_cf_size = 0;
	bool pt_w_pin = false;
	int pt_id = 0;

	if (atomic_fetch_sub(&h->refs, 1) != 1)
		return;
	if (h->in) {
		pthread_mutex_lock(&fs->lock);
		struct fs_inode_x *x = h->in->x; /* made at open */

		util_assert(x);
		if (h->pt && --x->pt_open == 0) {
			pt_id = x->pt_id;
			pt_w = x->pt_w;
			pt_w_pin = x->pt_w_pin;
			pt_cf = x->pt_cf;
			pt_cf_size = x->pt_cf_size;
			x->pt_id = 0;
			x->pt_w = NULL;
			x->pt_w_pin = false;
			x->pt_cf = NULL;
		}
		if (--h->in->nopen == 0 && x->held_deletes) {
			held = x->held_deletes;
			x->held_deletes = 0;
			key = strdup(h->in->key);
		}
		pthread_mutex_unlock(&fs->lock);
	}
	fs_pt_close(fs, pt_id);
	if (pt_w && pt_w_pin)
		cache_w_writer(pt_w, false);
	if (pt_w)
		cache_w_put(pt_w);
	if (pt_cf) {
		cache_file_unpin(pt_cf, 0, pt_cf_size);
		cache_file_close(pt_cf);
	}
	for (unsigned i = 0; key && i < held; i++)
		cache_w_release(fs->cfg.cache, key); /* the delete may go */
	free(key);
	if (h->pt && h->writer) /* an open never released (interrupted) */
		cache_w_external(h->w, false);
	if (h->writer || h->pin)
		cache_w_writer(h->w, false);
	cache_file_close(h->cf);
	cache_w_put(h->w);
	for (size_t i = 0; i < h->nretired; i++)
		cache_w_put(h->retired[i]);
	free(h->retired);
	pthread_mutex_destroy(&h->lock);
	atomic_fetch_sub(&fs->open_files, 1);
	free(h);
}

/* ---- dirty copies ---- */

/* The inode's clean passthrough backing pf (of pf_size bytes; held)
 * becomes its dirty file *out, with a's attributes and cf's bytes (the
 * version now, NULL: none): readers open through it read every change
 * from now on.  The inode holds the dirty file as a writer until its
 * last such handle closes (those handles hold nothing themselves). */
static int adopt(struct fs *fs, struct fs_inode *in,
		 const struct cache_wattr *a, const char *etag,
		 struct cache_file *pf, uint64_t pf_size, struct cache_file *cf,
		 struct cache_wfile **out)
{
	struct cache *c = fs->cfg.cache;
	struct cache_wattr pa = *a;
	struct cache_wfile *w = NULL;
	bool swapped = false;
	int rc;

	/* References: the inode's, ours, and cf's when it is the same
	 * version.  A reader joining holds one for a moment (fs_pt_opened
	 * drops it): wait that out, up to a second. */
	pa.size = pf_size;
	for (unsigned tries = 0;; tries++) {
		rc = cache_w_adopt(c, in->key, &pa, true, etag, pf,
				   2 + (cf == pf), &w);
		if (rc != -EBUSY || tries >= 100)
			break;
		usleep(10000);
	}
	if (rc) {
		if (rc == -EBUSY)
			fprintf(stderr, "fmfs: a write to '%s' was refused "
				"(EBUSY): its cache file, read through FUSE "
				"passthrough, is in use elsewhere\n", in->key);
		return rc;
	}
	atomic_fetch_add(&fs->pt_adopts, 1);
	/* Its bytes: cut to nothing, or the version now if the bucket's
	 * changed under the readers (they then read it too). */
	if (!a->size || cf != pf)
		rc = cache_w_fill(w, cf, a->size);
	pthread_mutex_lock(&fs->lock);
	if (in->x->pt_cf == pf) { /* (else its last handle closed meanwhile) */
		cache_w_ref(w);
		cache_w_writer(w, true);
		in->x->pt_cf = NULL;
		in->x->pt_w = w;
		in->x->pt_w_pin = true;
		swapped = true;
	}
	pthread_mutex_unlock(&fs->lock);
	if (swapped) {
		cache_file_unpin(pf, 0, pf_size);
		cache_file_close(pf); /* the inode's */
	}
	if (rc) {
		cache_w_put(w);
		return rc;
	}
	*out = w;
	return 0;
}

/* A dirty copy of the clean object in: its bytes (fetched if needed), or
 * none when truncate is set.  Returned held (a writer registered, see
 * cache_w_hold): the caller undoes it once its change is committed.
 * When the inode's clean file is open through FUSE passthrough, that
 * file becomes the dirty file (adopt). */
int fs_materialize(struct fs *fs, struct fs_inode *in, bool truncate,
		   struct cache_wfile **out)
{
	struct cache *c = fs->cfg.cache;
	struct cache_file *cf = NULL, *pf;
	struct fs_inode_x *x;
	struct cache_wattr a;
	uint64_t pf_size = 0;
	char etag[80];
	int rc;

	rc = fs_revalidate(fs, in);
	if (rc)
		return rc;
	/* The copy goes up with these attributes: the object's, not the
	 * defaults, where a HEAD can tell (else the defaults, no more). */
	pthread_mutex_lock(&fs->lock);
	rc = in->has_attr;
	pthread_mutex_unlock(&fs->lock);
	if (!rc)
		fs_load_meta(fs, in);
	fs_attr_of(fs, in, &a, etag);
	if (truncate) /* O_TRUNC or truncate(2): a change of the data */
		a.size = 0, a.mtime_ns = a.ctime_ns = util_wall_ns();
	else if ((rc = fs_lost_check(fs, in->key, etag)))
		return rc; /* not built on the older bytes either */
	pthread_mutex_lock(&fs->lock);
	if (!(x = fs_inode_x(in))) {
		pthread_mutex_unlock(&fs->lock);
		return -ENOMEM;
	}
	while (x->pt_adopting) { /* another writer's: then take its file */
		pthread_mutex_unlock(&fs->lock);
		usleep(1000);
		pthread_mutex_lock(&fs->lock);
	}
	pf = x->pt_cf;
	if (pf) {
		cache_file_ref(pf);
		pf_size = x->pt_cf_size;
		x->pt_adopting = true;
	} else {
		pf = NULL;
		x->w_making++;
	}
	pthread_mutex_unlock(&fs->lock);
	if (a.size) {
		rc = cache_file_open(c, in->key, a.size, etag, &cf);
		if (rc)
			goto out;
	}
	if (pf)
		rc = adopt(fs, in, &a, etag, pf, pf_size, cf, out);
	else
		rc = cache_w_create(c, in->key, &a, true, etag, cf, out);
	if (!rc) { /* not queued yet: it cannot turn clean meanwhile */
		cache_w_writer(*out, true);
		atomic_fetch_add(&in->wgen, 1); /* readers: a new copy */
	}
	else if (rc == -EEXIST) /* another opener was first */
		rc = cache_w_hold(c, in->key, out);
out:
	cache_file_close(cf);
	pthread_mutex_lock(&fs->lock);
	if (pf)
		x->pt_adopting = false;
	else
		x->w_making--;
	pthread_mutex_unlock(&fs->lock);
	cache_file_close(pf);
	return rc;
}

int fs_open_w(struct fs *fs, struct fs_inode *in, int flags,
	      struct fs_handle *h)
{
	bool wr = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
	struct cache_wfile *w;
	int rc;

	if (wr && fs->cfg.mode == FS_MODE_RO)
		return -EROFS;
	if (!wr && atomic_load(&fs->pt_on)) {
		/* Held: through a backing file it must stay the inode's
		 * dirty file while open (fs_pt_choose). */
		if (cache_w_hold(fs->cfg.cache, in->key, &h->w))
			return 1;
		if ((rc = cache_w_check(h->w))) {
			cache_w_writer(h->w, false);
			cache_w_put(h->w);
			h->w = NULL;
			return rc;
		}
		h->pin = true;
		return 0;
	}
	if (!wr) {
		if (cache_w_get(fs->cfg.cache, in->key, &h->w))
			return 1;
		if ((rc = cache_w_check(h->w))) {
			cache_w_put(h->w);
			h->w = NULL;
		}
		return rc;
	}
	if (!cache_w_hold(fs->cfg.cache, in->key, &w)) {
		/* O_TRUNC drops what a damaged file held */
		rc = flags & O_TRUNC ? cache_w_truncate(w, 0) :
		     cache_w_check(w);
		if (rc) {
			cache_w_writer(w, false);
			cache_w_put(w);
			return rc;
		}
	} else {
		rc = fs_materialize(fs, in, flags & O_TRUNC, &w);
		if (rc)
			return rc;
	}
	h->w = w;
	h->writer = true; /* registered by cache_w_hold or materialize */
	if (flags & O_TRUNC) /* its times moved: shown at once */
		fs_refresh_from_w(fs, in);
	return 0;
}

/* ---- helpers for names ---- */

/* The key of name in dir.  A name over NAME_MAX fails as on a local
 * disk; a key over the store's limit (S3: 1024 bytes with the mount's
 * prefix) fails too, logged, before anything is made: what cannot be
 * uploaded is never created. */
int fs_child_key(struct fs *fs, const struct fs_inode *dir,
		 const char *name, bool is_dir, char *key, size_t len,
		 const char *what)
{
	if (ns_name_check(name))
		return -ENAMETOOLONG;
	if ((size_t)snprintf(key, len, "%s%s%s", dir->key, name,
			     is_dir ? "/" : "") >= len) {
		snprintf(key, len, "%s%s", dir->key, name); /* for the log */
		ns_key_check(fs->ns, key, what);
		return -ENAMETOOLONG;
	}
	return ns_key_check(fs->ns, key, what);
}

struct fs_inode *fs_dir_of(struct fs *fs, fuse_ino_t ino, int *err)
{
	struct fs_inode *dir = fs_inode_get(fs, ino);

	*err = !dir ? ENOENT : !dir->is_dir ? ENOTDIR : 0;
	/* A takeover's directory learns its attributes (a HEAD) before the
	 * entry changes, not between the change and the reply: a kill
	 * there would have the change done twice (docs/keeper.md). */
	if (!*err && fs_xr(dir)->restored)
		fs_restored_attr(fs, dir);
	return *err ? NULL : dir;
}

/* An entry of dir was made, removed or renamed: its mtime and ctime
 * move, as on a local disk.  Kept in the inode while the kernel knows
 * the directory (a directory object's own times are not rewritten for
 * every entry: docs/posix.md). */
void fs_dir_touch(struct fs *fs, struct fs_inode *dir)
{
	int64_t now = util_wall_ns();
	char key[OBJ_KEY_MAX + 2];
	struct cache_wfile *w;

	if (fs_xr(dir)->restored) /* a takeover's: what it stores comes first */
		fs_restored_attr(fs, dir);
	pthread_mutex_lock(&fs->lock);
	if (!dir->has_attr) {
		dir->has_attr = true;
		dir->mode = (uint32_t)fs->cfg.dir_mode;
		dir->uid = (uint32_t)fs->cfg.uid;
		dir->gid = (uint32_t)fs->cfg.gid;
	}
	dir->mtime_ns = dir->ctime_ns = now;
	fs_tk_dir_times(fs, dir);
	snprintf(key, sizeof(key), "%s", dir->key);
	pthread_mutex_unlock(&fs->lock);
	/* A marker still waiting for its upload is where the directory's
	 * attributes are read from (fs_refresh_from_w): it moves too. */
	if (*key && !cache_w_hold(fs->cfg.cache, key, &w)) {
		struct cache_wattr a = { .mtime_ns = now, .ctime_ns = now };

		cache_w_setattr(w, &a, CACHE_WA_MTIME | CACHE_WA_CTIME);
		cache_w_commit(w, false);
		cache_w_writer(w, false);
		cache_w_put(w);
	}
}

/* Replies with the entry of a new dirty name under dir. */
static struct fs_inode *new_entry(struct fs *fs, struct fs_inode *dir,
				  const char *name,
				  const struct cache_wattr *a)
{
	struct ns_entry e;
	struct fs_inode *in;

	memset(&e, 0, sizeof(e));
	ns_entry_from_w(&e, a);
	e.name = (char *)name;
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_ref(fs, dir, &e);
	pthread_mutex_unlock(&fs->lock);
	return in;
}

static void ctx_attr(fuse_req_t req, enum cache_wkind kind, mode_t mode,
		     struct cache_wattr *a)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->mode = mode & 07777;
	a->uid = ctx->uid;
	a->gid = ctx->gid;
	a->mtime_ns = a->ctime_ns = util_wall_ns();
}

/* ---- operations ---- */

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct cache *c = fs->cfg.cache;
	char key[OBJ_KEY_MAX + 2];
	struct fs_inode *dir, *in;
	struct fuse_entry_param ep;
	struct cache_wfile *w = NULL;
	struct cache_wattr a;
	struct fs_handle *h;
	struct ns_entry e;
	bool created = false, redone = false, kept;
	int err, rc, pt;

	dir = fs_dir_of(fs, parent, &err);
	if (!dir) {
		fs_reply_err(req, err);
		return;
	}
	rc = fs_child_key(fs, dir, name, false, key, sizeof(key), "create");
	if (!rc)
		rc = ns_find(fs->ns, dir->key, name, &e);
	if (rc == 0 && e.is_dir)
		rc = -EISDIR;
	else if (rc == 0 && (fi->flags & O_EXCL) &&
		 !(redone = fs_tkr_redo(fs, "create", name)))
		rc = -EEXIST; /* (unless the daemon before made it) */
	else if (rc == 0 && fs_link_named(fs, dir, name))
		rc = -EEXIST; /* the kernel opens a name it knows instead */
	else if (rc == -ENOENT)
		e.pending = created = true, rc = 0; /* new: not in the bucket */
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	fs_tkr_intent(fs, parent, name);
	ctx_attr(req, CACHE_WK_FILE, mode, &a);
	rc = cache_w_create(c, key, &a, !e.pending, e.pending ? NULL : e.etag,
			    NULL, &w);
	if (!rc)
		cache_w_writer(w, true); /* new: not queued, cannot go clean */
	else if (rc == -EEXIST && !(rc = cache_w_hold(c, key, &w)))
		rc = cache_w_truncate(w, 0);
	h = rc ? NULL : calloc(1, sizeof(*h));
	if (!h) {
		if (w)
			cache_w_writer(w, false);
		cache_w_put(w);
		fs_reply_err(req, rc ? -rc : ENOMEM);
		return;
	}
	pthread_mutex_init(&h->lock, NULL);
	atomic_store(&h->refs, 1);
	h->fs = fs;
	h->w = w;
	h->writer = true;
	in = new_entry(fs, dir, name, &a);
	if (!in) {
		atomic_fetch_add(&fs->open_files, 1); /* fs_handle_put's */
		fs_handle_put(h);
		fs_reply_err(req, ENOMEM);
		return;
	}
	atomic_fetch_add(&in->wgen, 1); /* readers: a new copy */
	fs_refresh_from_w(fs, in);
	if (created || redone) /* redone: as made now, the times too */
		fs_dir_touch(fs, dir);
	memset(&ep, 0, sizeof(ep));
	pt = fs_pt_choose_open(fs, in, h, false, &kept);
	if (pt < 0) {
		atomic_fetch_add(&fs->open_files, 1);
		fs_handle_put(h);
		fs_reply_err(req, -pt);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	fs_fill_attr(fs, in, &ep.attr);
	pthread_mutex_unlock(&fs->lock);
	fs_pt_opened(h);
	ep.ino = in->ino;
	ep.generation = 1;
	ep.attr_timeout = ep.entry_timeout = fs->cfg.refresh_s;
	fi->fh = fs_tk_fh(fs, h);
	fs_tk_handle_open(fs, fi->fh, in->ino, fi->flags & ~O_TRUNC,
			  FS_TK_FILE, pt);
	fi->keep_cache = 0;
	atomic_fetch_add(&fs->opens, 1);
	atomic_fetch_add(&fs->open_files, 1);
	fs_pt_mark_reply(pt);
	if (fuse_reply_create(req, &ep, fi) == -ENOENT) {
		fs_tk_handle_close(fs, fi->fh);
		fs_handle_put(h);
	}
	fs_pt_mark_reply(0);
}

/* Moves the request's bytes into the dirty file: with the request in a
 * pipe (FUSE_CAP_SPLICE_READ) by splice, without copying them through
 * our memory.  fuse_buf_copy advances src, so a call resumes. */
static ssize_t write_bufv(void *arg, int fd, uint64_t off, size_t len)
{
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(len);

	dst.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	dst.buf[0].fd = fd;
	dst.buf[0].pos = (off_t)off;
	return fuse_buf_copy(&dst, arg, 0);
}

static void drop_suid(struct fs *fs, struct fs_inode *in,
		      struct cache_wfile *w, uint32_t kill)
{
	struct cache_wattr a = { 0 };

	pthread_mutex_lock(&fs->lock);
	a.mode = in->mode & ~kill;
	in->mode = a.mode;
	pthread_mutex_unlock(&fs->lock);
	cache_w_setattr(w, &a, CACHE_WA_MODE);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	int err = 0;
	struct fs_handle *h = fs_tk_handle(FS(req), fi->fh, true, &err);
	size_t size = fuse_buf_size(bufv);
	ssize_t n;

	(void)ino;
	if (!h) {
		fs_reply_err(req, err);
		return;
	}
	if (!h->writer) {
		fs_reply_err(req, EBADF);
		return;
	}
	n = cache_w_write_with(h->w, (uint64_t)off, size, write_bufv, bufv);
	if (n < 0) {
		fs_reply_err(req, (int)-n);
		return;
	}
	if (h->in) { /* the inode stays current without a GETATTR */
		struct fs *fs = h->fs;
		uint32_t kill = 0;

		pthread_mutex_lock(&fs->lock);
		if ((uint64_t)off + (uint64_t)n > h->in->size_bytes)
			h->in->size_bytes = (uint64_t)off + (uint64_t)n;
		if (h->in->has_attr && fuse_req_ctx(req)->uid != 0)
			kill = fs_suid_bits(h->in->mode);
		pthread_mutex_unlock(&fs->lock);
		if (kill)
			drop_suid(fs, h->in, h->w, kill);
	}
	fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi)
{
	int err = 0;
	struct fs_handle *h = fs_tk_handle(FS(req), fi->fh, true, &err);

	if (!h) {
		/* a dead daemon's file unlinked while open: nothing to do */
		struct fs_inode *in = fs_inode_get(FS(req), ino);

		fs_reply_err(req, in && in->unlinked ? 0 : err);
		return;
	}
	/* close(): queued for upload, safe from a crash of this daemon. */
	int rc = h->writer ? cache_w_commit(h->w, false) : 0;

	/* the other names (hard links) follow; a failure there is logged
	 * and tried again with the next change, the file is committed */
	if (!rc && h->writer && h->in) {
		fs_link_sync(h->fs, h->in, false);
		/* the times the kernel's writes moved, on the inode now: an
		 * upload may end before the next getattr, and its dirty
		 * file is gone then (the handle holds h->in until release,
		 * and h->w is this file's, whatever its name now) */
		struct cache_wattr a;

		cache_w_stat(h->w, &a);
		fs_take_wattr(h->fs, h->in, &a);
	}
	fs_reply_err(req, -rc);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	int err = 0;
	struct fs_handle *h = fs_tk_handle(FS(req), fi->fh, true, &err);

	(void)ino;
	(void)datasync;
	if (!h) {
		fs_reply_err(req, err);
		return;
	}
	/* fsync(): on the cache disk, safe from a power cut as well; so
	 * are the file's other names (hard links). */
	int rc = h->w ? cache_w_commit(h->w, true) : 0;

	if (!rc && h->w && h->in)
		rc = fs_link_sync(h->fs, h->in, true);
	fs_reply_err(req, -rc);
}

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
	ctx_attr(req, kind, mode, &a);
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
	in = new_entry(fs, dir, name, &a);
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

void fs_on_done(void *arg, const char *key, const char *etag, uint64_t size,
		bool deleted)
{
	struct fs *fs = arg;
	char dkey[OBJ_KEY_MAX + 2];
	size_t n = strlen(key);
	struct fs_inode *in;
	struct cache_wfile *w;
	struct cache_wattr wa;
	struct cache_attr ca;

	/* What went up is what the index keeps (a dirty file renamed or
	 * gone meanwhile: nothing, the key shows the defaults). */
	if (deleted) {
		cache_attr_set(fs->cfg.cache, key, NULL);
	} else if (!cache_w_get(fs->cfg.cache, key, &w)) {
		cache_w_stat(w, &wa);
		cache_w_put(w);
		ns_wattr_attr(&wa, etag, &ca);
		cache_attr_set(fs->cfg.cache, key, &ca);
	}
	/* The parent's listing no longer matches the bucket, and neither
	 * may any ancestor's: the key's first directory below each of them
	 * is a prefix there, which the key's upload can make appear and its
	 * DELETE vanish (a look at the root racing the DELETEs of a renamed
	 * tree saw "tree/" from a LIST, then no tombstone under it). */
	snprintf(dkey, sizeof(dkey), "%s", key);
	do {
		if (n && dkey[n - 1] == '/')
			dkey[--n] = '\0';
		while (n && dkey[n - 1] != '/')
			dkey[--n] = '\0';
		ns_dir_invalidate(fs->ns, dkey, false);
	} while (n);
	if (deleted)
		return;
	pthread_mutex_lock(&fs->lock);
	in = fs_inode_by_key(fs, key);
	if (in && !in->is_dir) {
		in->size_bytes = size;
		util_etag_set(&in->etag, etag);
		fs_attr_confirmed(in);
	}
	pthread_mutex_unlock(&fs->lock);
}

void fs_write_ops(struct fuse_lowlevel_ops *ops)
{
	ops->create = op_create;
	ops->write_buf = op_write_buf;
	ops->flush = op_flush;
	ops->fsync = op_fsync;
	ops->mkdir = op_mkdir;
	ops->mknod = op_mknod;
	ops->symlink = op_symlink;
	ops->unlink = op_unlink;
	ops->rmdir = op_rmdir;
	ops->rename = op_rename;
	fs_link_op(ops);
}
