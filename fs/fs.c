/* SPDX-License-Identifier: MIT */
/*
 * fs.c - the FUSE low-level operations of fmfs and the mount loop.
 *
 * Read side, here: lookup, getattr, readdir/readdirplus, open, read,
 * release, statfs, getxattr/listxattr.  Names and attributes come from
 * the cached listings of inode.c; bytes come from the cache (cache/),
 * which fetches what is missing.  A read is answered from the cache
 * file's descriptor (FUSE_BUF_IS_FD), so a hit costs a block-presence
 * check and the kernel's copy; keep_cache is set while an object's ETag
 * is unchanged, so a re-read is served by the page cache without
 * reaching us.  Write side (create, write, setattr, unlink, rename,
 * mkdir, symlink, xattrs, fsync) is in write.c, names.c and attr.c over
 * the cache's write-back (cache/wb.h); on a `--mode ro` mount it answers
 * EROFS.
 * Hard links (link, and what unlink and rename do to a linked name) are
 * in link.c.  FUSE passthrough, where the kernel offers it, is in
 * passthrough.c.
 *
 * Each reply is exactly one fuse_reply_* per request.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs_int.h"

static double ttl(const struct fs *fs)
{
	return (double)fs->cfg.refresh_s;
}

double fs_attr_ttl(const struct fs *fs, const struct fs_inode *in)
{
	/* only while a HEAD behind the listing may still come */
	if (!in->is_dir && !in->has_attr && fs->cfg.meta_heads &&
	    fs->cfg.mode != FS_MODE_LU && fs->cfg.refresh_s > FS_PROVISIONAL_S &&
	    ns_store_up(fs->ns))
		return FS_PROVISIONAL_S;
	return ttl(fs);
}

/* Called with fs->lock held (attributes). */
void fs_fill_attr(const struct fs *fs, const struct fs_inode *in,
		  struct stat *st)
{
	bool ro = fs->cfg.mode == FS_MODE_RO;

	memset(st, 0, sizeof(*st));
	st->st_ino = in->ino;
	/* Not known yet (no HEAD, nothing in the index): the defaults,
	 * --uid/--gid/--file-mode/--dir-mode, conservative unless set. */
	st->st_uid = (uid_t)fs->cfg.uid;
	st->st_gid = (gid_t)fs->cfg.gid;
	st->st_blksize = 1 << 20;
	if (in->is_dir) {
		st->st_mode = S_IFDIR | (mode_t)fs->cfg.dir_mode;
		st->st_nlink = 2;
		st->st_mtim = st->st_ctim = st->st_atim =
			(struct timespec){ fs->mount_time_s, 0 };
	} else {
		st->st_mode = fs_ftype(in) == S_IFLNK ? S_IFLNK | 0777 :
			      (in->ftype_c ? fs_ftype(in) : S_IFREG) |
			      (mode_t)fs->cfg.file_mode;
		st->st_nlink = 1 + fs_xr(in)->nlinks; /* hard links: link.c */
		st->st_size = (off_t)in->size_bytes;
		st->st_blocks = (blkcnt_t)((in->size_bytes + 511) / 512);
		st->st_mtim.tv_sec = in->mtime_s;
		st->st_ctim.tv_sec = in->mtime_s;
		st->st_atim.tv_sec = in->mtime_s;
	}
	if (in->has_attr) {
		st->st_mode = (st->st_mode & S_IFMT) | (in->mode & 07777);
		st->st_uid = in->uid;
		st->st_gid = in->gid;
		st->st_mtim.tv_sec = in->mtime_ns / 1000000000;
		st->st_mtim.tv_nsec = in->mtime_ns % 1000000000;
		st->st_ctim = st->st_atim = st->st_mtim;
		if (in->ctime_ns) {
			st->st_ctim.tv_sec = in->ctime_ns / 1000000000;
			st->st_ctim.tv_nsec = in->ctime_ns % 1000000000;
		}
		if (in->atime_ns) {
			st->st_atim.tv_sec = in->atime_ns / 1000000000;
			st->st_atim.tv_nsec = in->atime_ns % 1000000000;
		}
		if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
			st->st_rdev = fs_xr(in)->rdev;
	}
	if (ro && !S_ISLNK(st->st_mode))
		st->st_mode &= ~(mode_t)0222;
	if (in->unlinked) /* removed or replaced, still open */
		st->st_nlink = 0;
}

/* A dirty file's attributes replace what the inode had (fs->lock not
 * held); the inode keeps them once the file is uploaded. */
void fs_refresh_from_w(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	struct cache_wfile *w = NULL;
	struct cache_wattr a;
	bool gone;

	pthread_mutex_lock(&fs->lock);
	if (in->unlinked && fs_xr(in)->w_dead) /* still open: its own */
		cache_w_stat(in->x->w_dead, &a), w = in->x->w_dead;
	gone = in->unlinked;
	/* a copy: a rename may replace in->key once the lock is dropped */
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	if (!w && (gone || cache_w_get(fs->cfg.cache, key, &w)))
		return;
	if (w != fs_xr(in)->w_dead) {
		cache_w_stat(w, &a);
		cache_w_put(w);
	}
	fs_take_wattr(fs, in, &a);
}

void fs_take_wattr(struct fs *fs, struct fs_inode *in,
		   const struct cache_wattr *wa)
{
	const struct cache_wattr a = *wa;

	pthread_mutex_lock(&fs->lock);
	in->has_attr = true;
	in->mode = a.mode;
	in->uid = a.uid;
	in->gid = a.gid;
	in->mtime_ns = a.mtime_ns;
	in->ctime_ns = a.ctime_ns;
	in->atime_ns = a.atime_ns;
	fs_set_rdev(in, a.rdev);
	if (!in->is_dir && !in->ftype_c && a.kind != CACHE_WK_FILE)
		fs_set_ftype(in, cache_wkind_type(a.kind));
	if (!in->is_dir) {
		in->size_bytes = a.size;
		in->mtime_s = a.mtime_ns / 1000000000;
	}
	fs_attr_confirmed(in);
	pthread_mutex_unlock(&fs->lock);
}

void fs_reply_entry(fuse_req_t req, struct fs *fs, struct fs_inode *in)
{
	struct fuse_entry_param ep;

	fs_refresh_from_w(fs, in);
	fs_inode_attr_known(fs, in);
	memset(&ep, 0, sizeof(ep));
	ep.ino = in->ino;
	ep.generation = 1;
	pthread_mutex_lock(&fs->lock);
	fs_fill_attr(fs, in, &ep.attr);
	ep.attr_timeout = fs_attr_ttl(fs, in);
	pthread_mutex_unlock(&fs->lock);
	ep.entry_timeout = ttl(fs);
	fuse_reply_entry(req, &ep);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = userdata;

	/* 1 MiB writes, reads of FS_MAX_READ: libfuse derives max_pages
	 * from max_write, and max_read must match the mount option. */
	conn->max_write = 1 << 20;
	conn->max_read = FS_MAX_READ;
	conn->max_readahead = 4 << 20; /* the bdi gets min(this, ours) */
	if (conn->capable & FUSE_CAP_SPLICE_READ)
		conn->want |= FUSE_CAP_SPLICE_READ;
	/* Read replies from a cache file go to /dev/fuse by splice: the
	 * page-cache pages ride a pipe and the kernel copies them once into
	 * the reader's pages.  Without it libfuse preads every reply into a
	 * fresh buffer and writes that: one more copy and page faults.
	 * FS_MAX_READ keeps a reply within a pipe of pipe-max-size. */
	if ((conn->capable & FUSE_CAP_SPLICE_WRITE) &&
	    !atomic_load(&fs->ur_offered))   /* uring.c: no splice */
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	/* The kernel's INIT arrived: the mount is live.  Tell the parent
	 * waiting in `fmfs mount`. */
	if (fs->cfg.ready_fd >= 0) {
		if (write(fs->cfg.ready_fd, "ok\n", 3) != 3)
			fprintf(stderr, "fmfs: could not report readiness\n");
		close(fs->cfg.ready_fd);
		fs->cfg.ready_fd = -1;
	}
}

/* Whether a lookup should HEAD a file whose attributes are unknown.  A
 * listing shows such files with the defaults and never HEADs them (`ls -l`
 * of 100k objects would be 100k HEADs); the defaults let root and the
 * default owner in, and shut others out.  So only a lookup by another
 * user, who would be refused what the object's own mode may allow, pays
 * one HEAD per name; its answer is kept in the cache index. */
static bool lookup_wants_head(struct fs *fs, fuse_req_t req,
			      struct fs_inode *in)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	bool known;

	if (ctx->uid == 0 || ctx->uid == (uid_t)fs->cfg.uid)
		return false;
	pthread_mutex_lock(&fs->lock);
	known = in->has_attr || in->unlinked;
	pthread_mutex_unlock(&fs->lock);
	return !known;
}

void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = FS(req);
	struct fs_inode *dir = fs_inode_get(fs, parent), *in;
	struct ns_entry e;
	int err;

	atomic_fetch_add(&fs->lookups, 1);
	if (!dir || !dir->is_dir) {
		fs_reply_err(req, dir ? ENOTDIR : ENOENT);
		return;
	}
	err = ns_find(fs->ns, dir->key, name, &e);
	if (err == -ENOENT) {
		/* Negative entry: the kernel remembers it for the negative
		 * bound (at most refresh_s), then asks us again. */
		struct fuse_entry_param ep;

		memset(&ep, 0, sizeof(ep));
		ep.entry_timeout = (double)fs->cfg.negative_refresh_s;
		fuse_reply_entry(req, &ep);
		return;
	}
	if (err) {
		if (err != -ENAMETOOLONG) /* the caller's name, not a fault */
			fprintf(stderr, "fmfs: lookup of '%s' in '%s' "
				"failed: %s\n", name, dir->key,
				strerror(-err));
		fs_reply_err(req, -err);
		return;
	}
	e.name = (char *)name;
	in = fs_inode_lookup(fs, dir, &e);
	if (!in) {
		fs_reply_err(req, ENOMEM);
		return;
	}
	if (fs_xr(in)->restored) /* a takeover's: asked where they are known */
		fs_restored_attr(fs, in);
	if (!in->is_dir && !e.has_attr && lookup_wants_head(fs, req, in))
		fs_load_meta(fs, in); /* failed: the defaults stay */
	else if (in->is_dir && !e.has_attr && !in->has_attr)
		fs_dir_learn(fs, in);
	fs_reply_entry(req, fs, in);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);

	if (in)
		fs_inode_forget(fs, in, n);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *f)
{
	struct fs *fs = FS(req);

	for (size_t i = 0; i < count; i++) {
		struct fs_inode *in = fs_inode_get(fs, f[i].ino);

		if (in)
			fs_inode_forget(fs, in, f[i].nlookup);
	}
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct stat st;
	double t;

	(void)fi;
	if (!in) {
		fs_reply_err(req, ENOENT);
		return;
	}
	if (fs_xr(in)->restored) /* a takeover's: its attributes are not known */
		fs_restored_attr(fs, in);
	fs_refresh_from_w(fs, in);
	fs_inode_attr_known(fs, in);
	pthread_mutex_lock(&fs->lock);
	fs_fill_attr(fs, in, &st);
	t = fs_attr_ttl(fs, in);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_attr(req, &st, t);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct fs_inode_x *x;
	struct ns_listing *l;
	int err = 0;

	if (!in || !in->is_dir) {
		fs_reply_err(req, in ? ENOTDIR : ENOENT);
		return;
	}
	/* The listing at opendir time: offsets stay stable while read. */
	l = ns_dir_view(fs->ns, in->key, &err);
	if (!l) {
		fs_reply_err(req, -err);
		return;
	}
	fi->fh = fs_tk_fh(fs, l);
	fs_tk_handle_open(fs, fi->fh, in->ino, 0, FS_TK_DIR, 0);
	fi->cache_readdir = 1;
	/* The kernel keeps its copy of the entries while the listing is
	 * the one it cached (its own changes it accounts for itself); a
	 * listing fetched since may hold other clients' names. */
	pthread_mutex_lock(&fs->lock);
	x = fs_inode_x(in); /* out of memory: the kernel reads it again */
	fi->keep_cache = x && l->fetched_ms &&
			 l->fetched_ms == x->rd_fetched_ms;
	if (x)
		x->rd_fetched_ms = l->fetched_ms;
	pthread_mutex_unlock(&fs->lock);
	if (fuse_reply_open(req, fi) == -ENOENT) {
		fs_tk_handle_close(fs, fi->fh);
		ns_listing_put(l); /* interrupted */
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi, bool plus)
{
	struct fs *fs = FS(req);
	int err = 0;
	struct ns_listing *l = fs_tk_handle(fs, fi->fh, true, &err);
	struct fs_inode *dir = fs_inode_get(fs, ino);
	char *buf = malloc(size), *p = buf;
	size_t left = size;

	if (!buf || !dir || !l) {
		free(buf);
		fs_reply_err(req, !l ? err : buf ? ENOENT : ENOMEM);
		return;
	}
	/* Offsets: 1 ".", 2 "..", then 3 + i for entry i. */
	for (off_t i = off; (size_t)i < l->n + 2; i++) {
		struct ns_entry le, *e = NULL;
		const char *name = i == 0 ? "." : "..";
		struct fuse_entry_param ep;
		size_t n;

		if (i >= 2) {
			e = &le;
			ns_listing_at(l, (size_t)i - 2, e);
			name = e->name;
		}
		memset(&ep, 0, sizeof(ep));
		if (!e) {
			ep.attr.st_mode = S_IFDIR;
			ep.attr.st_ino = i == 0 ? ino : FUSE_ROOT_ID;
		}
		if (plus && e) {
			struct fs_inode *in;

			in = fs_inode_lookup(fs, dir, e);
			pthread_mutex_lock(&fs->lock);
			if (in && (fs_xr(in)->pt_open || fs_xr(in)->restored ||
				   (in->is_dir && !in->has_attr))) {
				/* The kernel writes it: the listing's size is
				 * older than its own; or a directory whose
				 * attributes are not known yet (fs_dir_learn
				 * asks at its lookup), or a takeover's inode
				 * (fs_restored_attr).  An entry without a node
				 * id leaves its attributes alone (st_ino 0
				 * would hide the name). */
				ep.attr.st_ino = in->ino;
				ep.attr.st_mode = in->is_dir ? S_IFDIR : S_IFREG;
			} else if (in) {
				ep.ino = in->ino;
				ep.generation = 1;
				fs_fill_attr(fs, in, &ep.attr);
				ep.attr_timeout = fs_attr_ttl(fs, in);
				ep.entry_timeout = ttl(fs);
			}
			pthread_mutex_unlock(&fs->lock);
			if (!in)
				break;
			n = fuse_add_direntry_plus(req, p, left, name, &ep,
						   i + 1);
			if (!ep.ino || n > left)   /* no reference sent */
				fs_inode_forget(fs, in, 1);
			if (n > left)
				break;
		} else if (plus) {
			n = fuse_add_direntry_plus(req, p, left, name, &ep,
						   i + 1);
			if (n > left)
				break;
		} else {
			if (e) {
				ep.attr.st_mode = e->is_dir ? S_IFDIR :
						  e->ftype ? e->ftype : S_IFREG;
				/* Not 0: glibc's readdir skips such an
				 * entry (every name after the first
				 * READDIRPLUS reply was lost). */
				pthread_mutex_lock(&fs->lock);
				ep.attr.st_ino = fs_dirent_ino(fs, dir, name);
				pthread_mutex_unlock(&fs->lock);
			}
			n = fuse_add_direntry(req, p, left, name, &ep.attr,
					      i + 1);
			if (n > left)
				break;
		}
		p += n;
		left -= n;
	}
	fuse_reply_buf(req, buf, size - left);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	int err = 0;
	struct ns_listing *l = fs_tk_handle(fs, fi->fh, false, &err);

	(void)ino;
	fs_tk_handle_close(fs, fi->fh);
	if (l)
		ns_listing_put(l);
	fs_reply_err(req, 0);
}

/* Confirms a file's version with a HEAD once refresh_s has passed since
 * the store last told us about it.  Keeps the old attributes when the
 * store is unreachable (cached data stays readable). */
int fs_revalidate(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	struct cache_attr a;
	struct obj_meta m;
	uint64_t age;
	int rc;

	pthread_mutex_lock(&fs->lock);
	age = fs_attr_age_ms(in);
	pthread_mutex_unlock(&fs->lock);
	if (age < (uint64_t)fs->cfg.refresh_s * 1000 ||
	    !ns_store_up(fs->ns))
		return 0;
	rc = ns_head(fs->ns, in->key, &m);
	if (rc == -ENOENT)
		return -ENOENT;
	if (rc)
		return 0; /* a transport failure marked the store offline */
	ns_meta_attr(&m, &a);
	pthread_mutex_lock(&fs->lock);
	/* the same version: a later atime of ours (touch_atime) stands */
	if (in->has_attr && util_etag_is(&in->etag, m.etag) &&
	    in->atime_ns > ((a.has & CACHE_ATTR_ATIME) ? a.atime_ns : 0)) {
		a.atime_ns = in->atime_ns;
		a.has |= CACHE_ATTR_ATIME;
	}
	in->size_bytes = m.size_bytes;
	in->mtime_s = m.mtime_s;
	util_etag_set(&in->etag, m.etag);
	fs_attr_confirmed(in);
	fs_attr_apply(fs, in, &a);
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	cache_attr_set(fs->cfg.cache, key, &a);
	obj_meta_release(&m);
	return 0;
}

/* relatime, at open for reading (reads themselves may never reach us:
 * passthrough, the page cache): atime moves to now when it is not
 * after mtime or ctime, or is a day old.  Kept on the inode and, for a
 * clean file, in the cache index (not a metadata rewrite per read): it
 * reaches the bucket with the file's next change or upload. */
static void touch_atime(struct fs *fs, struct fs_inode *in, bool dirty)
{
	int64_t now = util_wall_ns(), at, ct;
	char key[OBJ_KEY_MAX + 2], etag[80];
	struct cache_attr a;
	bool moved = false;

	pthread_mutex_lock(&fs->lock);
	if (in->has_attr) {
		at = in->atime_ns ? in->atime_ns : in->mtime_ns;
		ct = in->ctime_ns ? in->ctime_ns : in->mtime_ns;
		moved = at <= in->mtime_ns || at <= ct ||
			now - at >= 86400 * (int64_t)1000000000;
		if (moved)
			in->atime_ns = now;
	}
	snprintf(key, sizeof(key), "%s", in->key);
	util_etag_text(&in->etag, etag);
	pthread_mutex_unlock(&fs->lock);
	if (moved && !dirty && !cache_attr_get(fs->cfg.cache, key, &a) &&
	    !strcmp(a.etag, etag)) {
		a.atime_ns = now;
		a.has |= CACHE_ATTR_ATIME;
		cache_attr_set(fs->cfg.cache, key, &a);
	}
}

/* fs_pt_choose or fs_pt_choose_clean for h, which in->nopen then counts
 * (h->in set); waits out a writer making the clean backing its dirty
 * file.  A negative errno: h could not open (not counted). */
int fs_pt_choose_open(struct fs *fs, struct fs_inode *in,
		      struct fs_handle *h, bool pinned, bool *kept)
{
	int pt;

	*kept = false;
	for (unsigned tries = 0;; tries++) {
		pthread_mutex_lock(&fs->lock);
		if (!fs_inode_x(in)) {
			pt = -ENOMEM;
			break;
		}
		pt = h->w ? fs_pt_choose(fs, in, h) :
		     fs_pt_choose_clean(fs, in, h, pinned, kept);
		if (pt != -EAGAIN || tries >= 5000)
			break;
		pthread_mutex_unlock(&fs->lock);
		usleep(1000);
	}
	if (pt >= 0) {
		h->in = in;
		in->nopen++;
	}
	pthread_mutex_unlock(&fs->lock);
	if (pt == -EAGAIN)
		pt = -EBUSY;
	if (pt < 0 && pt != -ENOMEM)
		fprintf(stderr, "fmfs: an open of inode %llu was refused "
			"(%s): its passthrough backing file is changing hands\n",
			(unsigned long long)in->ino, strerror(-pt));
	return pt;
}

/* A new handle of in opened with flags: the write-back's copy (*clean
 * false) or the cache file of the version the store has now (*clean
 * true, *size its size).  -errno when it cannot be opened. */
static int handle_new(struct fs *fs, struct fs_inode *in, int flags,
		      struct fs_handle **hp, bool *clean, uint64_t *size,
		      bool *keep_cache)
{
	struct fs_handle *h = calloc(1, sizeof(*h));
	char etag[80];
	int rc;

	pthread_mutex_lock(&fs->lock);
	if (!h || !fs_inode_x(in)) { /* an open file's state: in->x */
		pthread_mutex_unlock(&fs->lock);
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_init(&h->lock, NULL);
	atomic_store(&h->refs, 1);
	h->fs = fs;
	atomic_store(&h->wgen, atomic_load(&in->wgen)); /* before the look */
	/* A dirty file, or opening for writing: the write-back's copy. */
	rc = fs_open_w(fs, in, flags, h);
	*clean = rc > 0;
	*keep_cache = false;
	if (rc <= 0)
		goto out;
	rc = fs_revalidate(fs, in);
	if (rc)
		goto out;
	pthread_mutex_lock(&fs->lock);
	*size = in->size_bytes;
	util_etag_text(&in->etag, etag);
	/* The kernel may keep its pages while the version is unchanged. */
	*keep_cache = in->x->open_etag &&
		      in->x->open_etag == fs_etag_hash(etag);
	in->x->open_etag = fs_etag_hash(etag);
	pthread_mutex_unlock(&fs->lock);
	rc = fs_lost_check(fs, in->key, etag);
	if (!rc)
		rc = cache_file_open(fs->cfg.cache, in->key, *size, etag,
				     &h->cf);
	if (!rc)
		h->size_bytes = *size;
out:
	if (rc < 0) {
		pthread_mutex_destroy(&h->lock);
		free(h);
		return rc;
	}
	*hp = h;
	return 0;
}

int fs_handle_reopen(struct fs *fs, struct fs_inode *in, int flags,
		     int pt_id, struct fs_handle **hp)
{
	uint64_t size = 0;
	bool clean, keep;
	int rc = handle_new(fs, in, flags & ~(O_TRUNC | O_CREAT | O_EXCL), hp,
			    &clean, &size, &keep);
	struct fs_handle *h;

	if (rc)
		return rc;
	h = *hp;
	/* Through the dead daemon's backing file, which the kernel still
	 * uses: a clean one pinned whole as at open, then the inode's. */
	if (pt_id > 0 && clean)
		rc = cache_file_ensure_pinned(h->cf, 0, size);
	if (rc) {
		atomic_fetch_add(&fs->open_files, 1); /* fs_handle_put's */
		fs_handle_put(h);
		return rc;
	}
	pthread_mutex_lock(&fs->lock);
	if (pt_id > 0)
		fs_pt_restore(fs, in, h, pt_id, size);
	h->in = in;
	in->nopen++;
	pthread_mutex_unlock(&fs->lock);
	atomic_fetch_add(&fs->open_files, 1);
	fs_pt_opened(h);
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct fs_inode *in = fs_inode_get(fs, ino);
	struct fs_handle *h;
	uint64_t size = 0;
	bool pinned = false, kept = false, clean, keep;
	int rc, pt;

	if (!in || in->is_dir) {
		fs_reply_err(req, in ? EISDIR : ENOENT);
		return;
	}
	rc = handle_new(fs, in, fi->flags, &h, &clean, &size, &keep);
	if (rc) {
		fs_reply_err(req, -rc);
		return;
	}
	fi->keep_cache = keep;
	/* Read-only mounts: a file wholly cached is read by the kernel from
	 * its cache file, every block checked now and pinned until the last
	 * close. */
	/* On a read-write mount a writer may later make the clean backing
	 * its dirty file, which needs its name (cache_w_adopt): kept from
	 * before the check, which may take a while. */
	if (clean && fs_pt_clean_wanted(fs, h, fi->flags)) {
		if (fs->cfg.mode != FS_MODE_RO)
			cache_file_keep_name(h->cf);
		pinned = !cache_file_ensure_pinned(h->cf, 0, size);
	}
	if (fs->cfg.mode != FS_MODE_RO && (fi->flags & O_ACCMODE) != O_WRONLY)
		touch_atime(fs, in, h->w != NULL);
	pt = fs_pt_choose_open(fs, in, h, pinned, &kept);
	if (pinned && !kept)
		cache_file_unpin(h->cf, 0, size);
	atomic_fetch_add(&fs->open_files, 1);
	if (pt < 0) {
		fs_handle_put(h);
		fs_reply_err(req, -pt);
		return;
	}
	fs_pt_opened(h);
	fi->fh = fs_tk_fh(fs, h);
	fs_tk_handle_open(fs, fi->fh, in->ino, fi->flags, FS_TK_FILE, pt);
	atomic_fetch_add(&fs->opens, 1);
	fs_pt_mark_reply(pt);
	if (fuse_reply_open(req, fi) == -ENOENT) {
		fs_tk_handle_close(fs, fi->fh);
		fs_handle_put(h); /* interrupted: no release will come */
	}
	fs_pt_mark_reply(0);
}

/* The dirty file a read through h is served from, or NULL for the clean
 * copy h->cf; borrowed until the handle goes.  A reader opened on one
 * version follows the file when another descriptor makes a new dirty
 * copy of it (after the one it had was uploaded and left): reads see the
 * latest write, as on a local file system.  The copy it leaves is kept
 * (h->retired) rather than dropped, so a read still using it on another
 * thread needs no reference: the usual read takes no lock. */
static struct cache_wfile *fs_handle_w(struct fs *fs, struct fs_handle *h)
{
	struct cache_wfile *nw = NULL, **r;
	struct fs_inode *in = h->in;
	char key[OBJ_KEY_MAX + 2];
	uint64_t g;
	bool dead;

	if (!in || h->writer ||
	    atomic_load(&in->wgen) == atomic_load(&h->wgen))
		return __atomic_load_n(&h->w, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&h->lock);
	g = atomic_load(&in->wgen);
	if (g != atomic_load(&h->wgen)) {
		pthread_mutex_lock(&fs->lock);
		dead = in->unlinked; /* then its own last copy, if any */
		if (dead && (nw = fs_xr(in)->w_dead))
			cache_w_ref(nw);
		snprintf(key, sizeof(key), "%s", in->key);
		pthread_mutex_unlock(&fs->lock);
		if (!nw && !dead)
			cache_w_get(fs->cfg.cache, key, &nw);
		r = nw && nw != h->w && h->w ?
		    realloc(h->retired, (h->nretired + 1) * sizeof(*r)) : NULL;
		if (r) {
			h->retired = r;
			r[h->nretired++] = h->w;
		}
		if (nw && nw != h->w && (r || !h->w)) {
			__atomic_store_n(&h->w, nw, __ATOMIC_RELEASE);
			nw = NULL;
		}
		atomic_store(&h->wgen, g);
	}
	pthread_mutex_unlock(&h->lock);
	cache_w_put(nw); /* not taken: the same, or no room to keep the old */
	return __atomic_load_n(&h->w, __ATOMIC_ACQUIRE);
}

/* Answers a read of a dirty file; the bytes it sent. */
static size_t read_w(fuse_req_t req, struct cache_wfile *w, size_t size,
		     off_t off)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct cache_wattr a;

	cache_w_stat(w, &a);
	if ((uint64_t)off >= a.size) {
		fuse_reply_buf(req, NULL, 0);
		return 0;
	}
	if (size > a.size - (uint64_t)off)
		size = (size_t)(a.size - (uint64_t)off);
	bv.buf[0].size = size;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = cache_w_fd(w);
	bv.buf[0].pos = off;
	return fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE) ? 0 : size;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	int rc = 0;
	struct fs_handle *h = fs_tk_handle(fs, fi->fh, true, &rc);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct cache_wfile *w;

	(void)ino;
	if (!h) {
		fs_reply_err(req, rc);
		return;
	}
	atomic_fetch_add(&fs->reads, 1);
	w = fs_handle_w(fs, h);
	if (w) {
		atomic_fetch_add(&fs->read_bytes, read_w(req, w, size, off));
		return;
	}
	if ((uint64_t)off >= h->size_bytes) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > h->size_bytes - (uint64_t)off)
		size = (size_t)(h->size_bytes - (uint64_t)off);
	atomic_fetch_add(&h->refs, 1);
	pthread_mutex_lock(&h->lock);
	cache_reader_note(h->cf, &h->rd, (uint64_t)off, size);
	pthread_mutex_unlock(&h->lock);
	/* Pinned: eviction must not punch a hole under the reply. */
	rc = cache_file_ensure_pinned(h->cf, (uint64_t)off, size);
	if (rc) {
		fs_reply_err(req, -rc);
		fs_handle_put(h);
		return;
	}
	bv.buf[0].size = size;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = cache_file_fd(h->cf);
	bv.buf[0].pos = off;
	if (!fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE))
		atomic_fetch_add(&fs->read_bytes, size);
	cache_file_unpin(h->cf, (uint64_t)off, size);
	fs_handle_put(h);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	int rc = 0;
	struct fs_handle *h = fs_tk_handle(FS(req), fi->fh, false, &rc);

	(void)ino;
	if (!h) { /* a dead daemon's, never used since */
		fs_tk_handle_close(FS(req), fi->fh);
		fs_reply_err(req, 0);
		return;
	}
	if (h->writer) {
		if (h->pt)   /* the kernel's writes are over: a last look */
			cache_w_external(h->w, false);
		rc = cache_w_commit(h->w, false);
		if (!rc && h->in) /* hard links: failure logged */
			fs_link_sync(h->fs, h->in, false);
		cache_w_writer(h->w, false);
		h->writer = false;
	}
	fs_handle_put(h);
	/* journaled last: a crash before resends the RELEASE to a new
	 * daemon, which then still has the handle to commit */
	fs_tk_handle_close(FS(req), fi->fh);
	fs_reply_err(req, -rc);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = FS(req);
	struct cache_stats cs;
	struct statvfs sv;

	(void)ino;
	cache_get_stats(fs->cfg.cache, &cs);
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_blocks = cs.cap_bytes / 4096;
	sv.f_bfree = sv.f_bavail = cs.cap_bytes > cs.used_bytes ?
				   (cs.cap_bytes - cs.used_bytes) / 4096 : 0;
	sv.f_files = 1u << 30;
	sv.f_ffree = sv.f_favail = 1u << 30;
	sv.f_namemax = NAME_MAX; /* as a local disk: docs/semantics.md */
	fuse_reply_statfs(req, &sv);
}

int fs_lost_check(struct fs *fs, const char *key, const char *etag)
{
	if (!cache_w_lost_version(fs->cfg.cache, key, etag))
		return 0;
	fprintf(stderr, "fmfs: %s: EIO: a newer version written through the "
		"mount was lost before its upload (fmfs flush --wait names "
		"it); the bucket still has the older one, which is not served "
		"in its place: write the file again or remove it\n", key);
	return -EIO;
}

/* A directory whose attributes this cache does not know: its marker
 * "dir/" (fmfs uploads one with the directory's mode, owner and times)
 * is HEADed once, and what it says, or that there is none (a prefix
 * only: the defaults), is kept in the index for the name.  Without an
 * answer (offline, an error) the defaults stay, to be asked again. */
void fs_dir_learn(struct fs *fs, struct fs_inode *in)
{
	char key[OBJ_KEY_MAX + 2];
	struct cache_attr a;
	struct obj_meta m;
	bool ok;
	int rc;

	pthread_mutex_lock(&fs->lock);
	snprintf(key, sizeof(key), "%s", in->key);
	pthread_mutex_unlock(&fs->lock);
	if (!*key || !ns_store_up(fs->ns))
		return; /* the root: the mount's own */
	rc = ns_head(fs->ns, key, &m);
	if (rc == -ENOENT) {
		memset(&a, 0, sizeof(a)); /* known: nothing stored */
	} else if (!rc) {
		ns_meta_attr(&m, &a);
		obj_meta_release(&m);
	} else {
		return;
	}
	/* Only if nothing newer came meanwhile (a chmod, a rename): the
	 * index then has that, or another name. */
	pthread_mutex_lock(&fs->lock);
	ok = !in->has_attr && !strcmp(in->key, key);
	if (ok)
		fs_attr_apply(fs, in, &a);
	pthread_mutex_unlock(&fs->lock);
	if (ok)
		cache_attr_set(fs->cfg.cache, key, &a);
}

static const struct fuse_lowlevel_ops read_ops = {
	.init = op_init,
	.lookup = fs_op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.statfs = op_statfs,
	.readlink = fs_op_readlink,
};

void fs_read_ops(struct fuse_lowlevel_ops *ops)
{
	*ops = read_ops;
}
