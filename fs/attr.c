/* SPDX-License-Identifier: MIT */
/*
 * attr.c - a file's attributes and extended attributes through FUSE:
 * setattr (chmod, chown, utimens, truncate), getxattr, listxattr,
 * setxattr and removexattr.  A dirty file keeps them in the write-back;
 * a clean object's are its S3 metadata (ns/meta.c has the encoding),
 * read by a HEAD and kept for refresh_s, changed by a server-side copy
 * onto itself (fs_copy_meta).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs_int.h"

/* User metadata of a file, fetched by HEAD and kept for refresh_s. */
int fs_load_meta(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	struct fs_inode_x *x;
	struct cache_attr a;
	struct obj_meta m;
	int rc;

	pthread_mutex_lock(&fs->lock);
	x = in->x;
	if (x && x->meta_ms && util_now_ms() - x->meta_ms <
	    (uint64_t)fs->cfg.refresh_s * 1000) {
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	pthread_mutex_unlock(&fs->lock);
	rc = ns_head(fs->ns, in->key, &m);
	if (rc)
		return rc;
	ns_meta_attr(&m, &a);
	pthread_mutex_lock(&fs->lock);
	if (!(x = fs_inode_x(in))) {
		pthread_mutex_unlock(&fs->lock);
		obj_meta_release(&m);
		return -ENOMEM;
	}
	obj_kv_free(x->meta, x->nmeta);
	free(x->ctype);
	fs_attr_apply(fs, in, &a);
	x->meta = m.user;
	x->nmeta = m.nuser;
	/* out of memory: the store's default type at the next rewrite */
	x->ctype = m.content_type[0] ? strdup(m.content_type) : NULL;
	x->meta_ms = util_now_ms();
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	cache_attr_set(fs->cfg.cache, key, &a);
	m.user = NULL;
	m.nuser = 0;
	obj_meta_release(&m);
	return 0;
}

/* Replies with value (or its size when size is 0). */
static void reply_xattr(fuse_req_t req, const char *val, size_t len,
			size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fs_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

/* A copy of a file's user metadata: the dirty file's, or the object's
 * (HEAD, kept for refresh_s). */
static int meta_of(struct fs *fs, struct fs_inode *in, struct obj_kv **out,
		   size_t *n)
{
	const struct fs_inode_x *x;
	struct cache_wfile *w;
	struct obj_kv *m;
	int rc;

	*out = NULL;
	*n = 0;
	if (!cache_w_get(fs->cfg.cache, in->key, &w)) {
		rc = cache_w_xattrs(w, out, n);
		cache_w_put(w);
		return rc;
	}
	if (in->is_dir)
		return 0;
	rc = fs_load_meta(fs, in);
	if (rc)
		return rc;
	pthread_mutex_lock(&fs->lock);
	x = fs_xr(in); /* made by fs_load_meta */
	m = calloc(x->nmeta + 1, sizeof(*m));
	for (size_t i = 0; m && i < x->nmeta; i++) {
		m[i].name = strdup(x->meta[i].name);
		m[i].value = strdup(x->meta[i].value);
		*n = i + 1;
		if (!m[i].name || !m[i].value)
			rc = -ENOMEM;
	}
	pthread_mutex_unlock(&fs->lock);
	if (!m || rc) {
		obj_kv_free(m, *n);
		*n = 0;
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct obj_kv *m;
	char meta[256];
	size_t n;
	int rc;

	atomic_fetch_add(&fs->getxattrs, 1);
	if (!in) {
		fs_reply_err(req, ENOENT);
		return;
	}
	if (ino == FUSE_ROOT_ID && !strcmp(name, FS_CTL_XATTR)) {
		reply_xattr(req, fs->cfg.ctl_path, strlen(fs->cfg.ctl_path),
			    size);
		return;
	}
	if (ns_xattr_meta(name, meta, sizeof(meta))) {
		fs_reply_err(req, ENODATA); /* security.capability too */
		return;
	}
	rc = meta_of(fs, in, &m, &n);
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	rc = ENODATA;
	for (size_t i = 0; i < n && rc; i++)
		if (!strcmp(m[i].name, meta) ||
		    (!strncmp(name, "user.", 5) && !strcmp(m[i].name, name + 5) &&
		     !ns_xattr_reserved(name + 5))) { /* another tool's name */
			char v[8192]; /* S3 allows 2 KiB of metadata */
			ssize_t vl = ns_xattr_value_decode(m[i].value, v,
							   sizeof(v));

			rc = vl < 0 ? (int)-vl : 0;
			if (!rc)
				reply_xattr(req, v, (size_t)vl, size);
		}
	if (rc)
		fs_reply_err(req, rc);
	obj_kv_free(m, n);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct obj_kv *m;
	char list[8192];
	size_t len = 0, n;
	int rc;

	if (!in) {
		fs_reply_err(req, ENOENT);
		return;
	}
	rc = meta_of(fs, in, &m, &n);
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char x[256];
		size_t k;

		if (!ns_xattr_name(m[i].name, x, sizeof(x)))
			continue;
		k = strlen(x) + 1;
		if (len + k > sizeof(list))
			break;
		memcpy(list + len, x, k);
		len += k;
	}
	obj_kv_free(m, n);
	reply_xattr(req, list, len, size);
}

void fs_attr_apply(const struct fs *fs, struct fs_inode *in,
		   const struct cache_attr *a)
{
	struct ns_entry e;

	memset(&e, 0, sizeof(e));
	ns_attr_resolve(fs->ns, in->is_dir, in->mtime_s, a, &e);
	in->has_attr = true;
	in->mode = e.mode;
	in->uid = e.uid;
	in->gid = e.gid;
	in->mtime_ns = e.mtime_ns;
	in->ctime_ns = e.ctime_ns;
	in->atime_ns = e.atime_ns;
	fs_set_rdev(in, e.rdev);
	if (!in->ftype_c)
		fs_set_ftype(in, e.ftype);
}

/* A clean file's attributes: from its metadata, else the defaults; and
 * its version (etag, may be NULL) as of the same moment. */
void fs_attr_of(struct fs *fs, struct fs_inode *in, struct cache_wattr *a,
		    char etag[80])
{
	memset(a, 0, sizeof(*a));
	a->kind = CACHE_WK_FILE;
	pthread_mutex_lock(&fs->lock);
	a->mode = in->has_attr ? in->mode : (uint32_t)fs->cfg.file_mode;
	a->uid = in->has_attr ? in->uid : (uint32_t)fs->cfg.uid;
	a->gid = in->has_attr ? in->gid : (uint32_t)fs->cfg.gid;
	a->mtime_ns = in->has_attr ? in->mtime_ns :
		      in->mtime_s * 1000000000;
	if (in->has_attr) {
		a->ctime_ns = in->ctime_ns;
		a->atime_ns = in->atime_ns;
		a->rdev = fs_xr(in)->rdev;
	}
	if (in->ftype_c && cache_wkind_of(fs_ftype(in)) > 0)
		a->kind = (enum cache_wkind)cache_wkind_of(fs_ftype(in));
	a->size = in->size_bytes;
	if (etag)
		util_etag_text(&in->etag, etag);
	pthread_mutex_unlock(&fs->lock);
}

/* Rewrites a clean object's metadata in place (server-side copy onto
 * itself): attributes per mask, and the xattr xname set to xval (or
 * removed when xval is NULL). */
int fs_copy_meta(struct fs *fs, struct fs_inode *in,
		 const struct cache_wattr *a, unsigned mask,
		 const char *xname, const char *xval, size_t xlen,
		 int xflags)
{
	struct obj_kv kv[64 + CACHE_WATTR_META + 1];
	char vals[CACHE_WATTR_META][32], etag[80], xv[NS_XATTR_MAX + 1];
	char kbuf[OBJ_KEY_MAX + 2], ctype[128];
	const struct fs_inode_x *x;
	struct cache_attr ca;
	struct cache_wattr na;
	size_t n = 0;
	bool found = false;
	int rc;

	pthread_mutex_lock(&fs->lock);
	if (in->x)
		in->x->meta_ms = 0; /* read it fresh */
	pthread_mutex_unlock(&fs->lock);
	rc = fs_load_meta(fs, in);
	if (rc)
		return rc;
	fs_attr_of(fs, in, &na, NULL);
	if (mask & CACHE_WA_MODE)
		na.mode = a->mode & 07777;
	if (mask & CACHE_WA_UID)
		na.uid = a->uid;
	if (mask & CACHE_WA_GID)
		na.gid = a->gid;
	if (mask & CACHE_WA_MTIME)
		na.mtime_ns = a->mtime_ns;
	if (mask & CACHE_WA_ATIME)
		na.atime_ns = a->atime_ns;
	na.ctime_ns = util_wall_ns(); /* any change of metadata */
	n = cache_wattr_meta(&na, kv, vals);
	if (xname) {
		memcpy(xv, xval ? xval : "", xval ? xlen : 0);
		xv[xval ? xlen : 0] = '\0';
	}
	pthread_mutex_lock(&fs->lock);
	x = fs_xr(in); /* made by fs_load_meta */
	for (size_t i = 0; i < x->nmeta && n < 64; i++) {
		if (ns_xattr_reserved(x->meta[i].name))
			continue;
		if (xname && !strcmp(x->meta[i].name, xname)) {
			found = true;
			if (!xval)
				continue;
			kv[n++] = (struct obj_kv){ x->meta[i].name, xv };
			continue;
		}
		kv[n++] = x->meta[i];
	}
	if (xname && xval && !found)
		kv[n++] = (struct obj_kv){ (char *)xname, xv };
	/* Copies: x->meta may be replaced once the lock is dropped. */
	snprintf(ctype, sizeof(ctype), "%s", x->ctype ? x->ctype : "");
	for (size_t i = 0; i < n; i++) {
		kv[i].name = strdup(kv[i].name);
		kv[i].value = strdup(kv[i].value);
	}
	pthread_mutex_unlock(&fs->lock);
	rc = 0;
	if (xname && found && xval && (xflags & XATTR_CREATE))
		rc = -EEXIST;
	else if (xname && !found && (!xval || (xflags & XATTR_REPLACE)))
		rc = -ENODATA;
	for (size_t i = 0; i < n; i++)
		if (!kv[i].name || !kv[i].value)
			rc = -ENOMEM;
	if (!rc) {
		rc = ns_set_meta(fs->ns, in->key, kv, n, ctype, etag);
	}
	for (size_t i = 0; i < n; i++) {
		free(kv[i].name);
		free(kv[i].value);
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&fs->lock);
	in->has_attr = true;
	in->mode = na.mode;
	in->uid = na.uid;
	in->gid = na.gid;
	in->mtime_ns = na.mtime_ns;
	in->ctime_ns = na.ctime_ns;
	in->atime_ns = na.atime_ns;
	fs_set_rdev(in, na.rdev);
	if (in->x)
		in->x->meta_ms = 0; /* the xattrs changed: HEAD again */
	in->attr_ds = 0;
	snprintf(kbuf, sizeof(kbuf), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	ns_wattr_attr(&na, etag, &ca);
	cache_attr_set(fs->cfg.cache, kbuf, &ca);
	return 0;
}

/* The attributes a setattr sets, in *a; returns their CACHE_WA_ mask. */
static unsigned setattr_mask(struct fs *fs, struct fs_inode *in,
			     const struct stat *attr, int to_set,
			     struct cache_wattr *a)
{
	unsigned mask = 0;

	memset(a, 0, sizeof(*a));
	if (to_set & FUSE_SET_ATTR_MODE)
		mask |= CACHE_WA_MODE, a->mode = attr->st_mode;
	if (to_set & FUSE_SET_ATTR_UID)
		mask |= CACHE_WA_UID, a->uid = attr->st_uid;
	if (to_set & FUSE_SET_ATTR_GID)
		mask |= CACHE_WA_GID, a->gid = attr->st_gid;
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		mask |= CACHE_WA_MTIME, a->mtime_ns = util_wall_ns();
	else if (to_set & FUSE_SET_ATTR_MTIME)
		mask |= CACHE_WA_MTIME,
		a->mtime_ns = (int64_t)attr->st_mtim.tv_sec * 1000000000 +
			     attr->st_mtim.tv_nsec;
	if ((to_set & (FUSE_SET_ATTR_KILL_SUID | FUSE_SET_ATTR_KILL_SGID)) &&
	    !(mask & CACHE_WA_MODE) && !in->is_dir) {
		/* chown or truncate, the kernel leaving set-id bits to us
		 * (FUSE_HANDLE_KILLPRIV_V2) */
		pthread_mutex_lock(&fs->lock);
		if (in->has_attr && fs_suid_bits(in->mode))
			mask |= CACHE_WA_MODE,
			a->mode = in->mode & ~fs_suid_bits(in->mode);
		pthread_mutex_unlock(&fs->lock);
	}
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		mask |= CACHE_WA_ATIME, a->atime_ns = util_wall_ns();
	else if (to_set & FUSE_SET_ATTR_ATIME)
		mask |= CACHE_WA_ATIME,
		a->atime_ns = (int64_t)attr->st_atim.tv_sec * 1000000000 +
			     attr->st_atim.tv_nsec;
	return mask;
}

/* chmod, chown or utimens of a clean directory: kept in the cache index
 * at once and stored with the directory, whose marker goes up again
 * (made if the directory was a prefix only). */
static int setattr_clean_dir(struct fs *fs, struct fs_inode *in,
			     const struct cache_wattr *a, unsigned mask)
{
	struct cache_wattr da = { .kind = CACHE_WK_DIR };
	struct cache_wfile *own;
	struct cache_attr ca;
	char kbuf[OBJ_KEY_MAX + 2];
	int rc = 0;

	pthread_mutex_lock(&fs->lock);
	if (!in->has_attr)
		in->has_attr = true,
		in->mode = (uint32_t)fs->cfg.dir_mode,
		in->uid = (uint32_t)fs->cfg.uid,
		in->gid = (uint32_t)fs->cfg.gid,
		in->mtime_ns = (int64_t)fs->mount_time_s * 1000000000;
	if (mask & CACHE_WA_MODE)
		in->mode = a->mode & 07777;
	if (mask & CACHE_WA_UID)
		in->uid = a->uid;
	if (mask & CACHE_WA_GID)
		in->gid = a->gid;
	if (mask & CACHE_WA_MTIME)
		in->mtime_ns = a->mtime_ns;
	if (mask & CACHE_WA_ATIME)
		in->atime_ns = a->atime_ns;
	in->ctime_ns = util_wall_ns();
	da.ctime_ns = in->ctime_ns;
	da.atime_ns = in->atime_ns;
	da.mode = in->mode;
	da.uid = in->uid;
	da.gid = in->gid;
	da.mtime_ns = in->mtime_ns;
	snprintf(kbuf, sizeof(kbuf), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	/* Kept in the cache index at once, and stored with the
	 * directory: its marker goes up again with them (made if the
	 * directory was a prefix only), so that a mount on another
	 * cache dir shows them too (fs_dir_learn). */
	ns_wattr_attr(&da, "", &ca);
	cache_attr_set(fs->cfg.cache, kbuf, &ca);
	if (*kbuf && fs->cfg.mode != FS_MODE_RO &&
	    !cache_w_create(fs->cfg.cache, kbuf, &da, true, NULL,
			    NULL, &own)) {
		rc = cache_w_commit(own, false);
		cache_w_put(own);
	}
	return rc;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	int rc = 0;
	struct fs_handle *h = fi ? fs_tk_handle(fs, fi->fh, true, &rc) : NULL;
	struct cache_wfile *w = h ? h->w : NULL, *own = NULL;
	struct cache_wattr a;
	unsigned mask = 0;
	struct stat st;

	if (!in || (fi && !h)) {
		fs_reply_err(req, in ? rc : ENOENT);
		return;
	}
	if (fs_xr(in)->restored) /* a takeover's: what it stores comes first */
		fs_restored_attr(fs, in);
	if (!w && !cache_w_hold(fs->cfg.cache, in->key, &own))
		w = own;
	mask = setattr_mask(fs, in, attr, to_set, &a);
	if ((to_set & FUSE_SET_ATTR_SIZE) && in->is_dir)
		rc = -EISDIR;
	if ((to_set & FUSE_SET_ATTR_SIZE) && !rc) {
		uint64_t cap;

		/* A file bigger than the cache cannot be held (or uploaded
		 * from it): the largest file size here. */
		cache_w_room(fs->cfg.cache, &cap);
		if ((uint64_t)attr->st_size > cap)
			rc = -EFBIG;
	}
	if (!rc && !in->is_dir && !w &&
	    ((to_set & FUSE_SET_ATTR_SIZE) ||
	     (mask && fs->cfg.mode == FS_MODE_LU))) {
		/* lu never touches the bucket: attributes need a copy. */
		rc = fs_materialize(fs, in, (to_set & FUSE_SET_ATTR_SIZE) &&
				 attr->st_size == 0, &own);
		w = own;
	}
	if (!rc && (to_set & FUSE_SET_ATTR_SIZE))
		rc = cache_w_truncate(w, (uint64_t)attr->st_size);
	if (!rc && mask && w)
		cache_w_setattr(w, &a, mask);
	else if (!rc && mask && !in->is_dir)
		rc = fs_copy_meta(fs, in, &a, mask, NULL, NULL, 0, 0);
	else if (!rc && mask) /* a clean directory: its marker again */
		rc = setattr_clean_dir(fs, in, &a, mask);
	/* Not through an open writer: nothing else will commit it. */
	if (!rc && w && !(h && h->writer))
		rc = cache_w_commit(w, false);
	/* the other names follow (through an open writer: at its close,
	 * whose bytes they would otherwise get before they are committed) */
	if (!rc && !in->is_dir && !(h && h->writer))
		fs_link_sync(fs, in, false);
	if (own)
		cache_w_writer(own, false);
	cache_w_put(own);
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	fs_refresh_from_w(fs, in);
	pthread_mutex_lock(&fs->lock);
	if (in->is_dir)
		fs_tk_dir_times(fs, in);
	fs_fill_attr(fs, in, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_attr(req, &st, fs->cfg.refresh_s);
}

/* The metadata name of xattr name (ns/meta.c), checked for storing. */
static int xattr_check(const char *name, size_t len, char *meta,
		       size_t meta_len)
{
	int rc = ns_xattr_meta(name, meta, meta_len);

	if (rc)
		return rc;
	if (len > NS_XATTR_MAX)
		return -E2BIG;
	return 0;
}

/* Sets (value) or removes (value NULL) an xattr and replies.  Only
 * ctime may move: mtime is written back as it was (copy_meta mask 0). */
static void change_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct cache_wfile *w = NULL;
	char meta[256], enc[NS_XATTR_MAX + 1];
	int rc = in ? xattr_check(name, size, meta, sizeof(meta)) : -ENOENT;
	ssize_t el;

	if (!rc && value) { /* S3 metadata is header text (ns/meta.c) */
		el = ns_xattr_value_encode(value, size, enc, sizeof(enc));
		rc = el < 0 ? (int)el : 0;
		value = enc;
		size = (size_t)el;
	}
	if (!rc && in->is_dir)
		rc = -ENOTSUP;
	if (!rc && cache_w_hold(fs->cfg.cache, in->key, &w) &&
	    fs->cfg.mode == FS_MODE_LU)
		rc = fs_materialize(fs, in, false, &w);
	if (!rc)
		fs_tkr_intent(fs, ino, name);
	if (!rc && w) {
		rc = value ? cache_w_xattr_set(w, meta, value, size, flags) :
			     cache_w_xattr_remove(w, meta);
		if (!rc)
			rc = cache_w_commit(w, false);
	} else if (!rc) {
		rc = fs_copy_meta(fs, in, NULL, 0, meta, value, size, flags);
	}
	/* there (XATTR_CREATE) or gone: the daemon before did it */
	if (rc == (value ? -EEXIST : -ENODATA) &&
	    fs_tkr_redo(fs, value ? "setxattr" : "removexattr", name))
		rc = 0;
	if (w)
		cache_w_writer(w, false);
	cache_w_put(w);
	if (!rc)
		fs_link_sync(fs, in, false); /* the other names follow */
	fs_reply_err(req, -rc);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	if (!value)
		value = "";
	change_xattr(req, ino, name, value, size, flags);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	change_xattr(req, ino, name, NULL, 0, 0);
}

void fs_attr_ops(struct fuse_lowlevel_ops *ops, bool writable)
{
	ops->getxattr = op_getxattr;
	ops->listxattr = op_listxattr;
	if (!writable)
		return;
	ops->setattr = op_setattr;
	ops->setxattr = op_setxattr;
	ops->removexattr = op_removexattr;
}
