/* SPDX-License-Identifier: MIT */
/*
 * write.c - the FUSE operations that change bytes: create, write, flush
 * and fsync (mounted with a mode other than ro); those that change names
 * (mkdir, mknod, symlink, unlink, rmdir, rename) and readlink are in
 * names.c, setattr and the xattrs in attr.c.
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
struct fs_inode *fs_new_entry(struct fs *fs, struct fs_inode *dir,
			      const char *name, const struct cache_wattr *a)
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

void fs_ctx_attr(fuse_req_t req, enum cache_wkind kind, mode_t mode,
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
	fs_ctx_attr(req, CACHE_WK_FILE, mode, &a);
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
	in = fs_new_entry(fs, dir, name, &a);
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
	fs_names_ops(ops);
	fs_link_op(ops);
}
