/* SPDX-License-Identifier: MIT */
/*
 * posix.c - the file:// backend: a local directory acting as a bucket.
 * Key "a/b/c" is the file DIR/a/b/c; user metadata lives in the file's
 * extended attributes (user.fmfs.meta.NAME), set on the temporary file
 * before it is renamed into place, so a PUT is atomic with its metadata.
 * The ETag is derived from size and modification time (not an MD5), which
 * is enough to notice a change.  Multipart parts are files under
 * DIR/.fmfs/uploads/ID/; complete concatenates them and renames.
 * What a directory cannot hold: a key that is also a prefix of another
 * ("a" and "a/b"), keys with empty path segments, "." or "..", and keys
 * under the reserved DIR/.fmfs/ - those get OBJ_ERR_INVALID.
 *
 * Crash debris: a process killed during a PUT leaves its temporary file
 * under .fmfs/tmp, one killed during a multipart upload its directory
 * under .fmfs/uploads.  Each is flock()ed by its owner from the moment
 * it exists until it is renamed or removed, so a lock that can be taken
 * proves the owner gone; the store sweeps such debris at open and at an
 * upload at most once a minute (sweep()).  Two processes may share a
 * store (a mount and `fmfs obj cp`): the lock, not a pid or an age, is
 * what tells a live upload from a dead one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "objstore_int.h"

#define META_XATTR "user.fmfs.meta."
#define CTYPE_XATTR "user.fmfs.content-type"
#define RESERVED ".fmfs"

/* Debris of this fmfs, locked while in use, is named "l.<...>"; names
 * without it come from fmfs versions that did not lock, and are only
 * taken for debris once nothing in them changed for this long. */
#define LOCKED_PREFIX "l."
#define LEGACY_DEBRIS_AGE_S 3600
#define SWEEP_INTERVAL_MS 60000 /* sweeps at uploads, at most this often */
#define UPLOADS_OPEN_MAX 4096    /* multipart uploads open per handle */

/* A multipart upload this handle started: the locked directory. */
struct px_upload {
	char id[OBJ_UPLOAD_ID_MAX];
	int dirfd;                   /* holds the flock */
	struct px_upload *next;
};

#define PX_OLD_ROOTS 16

struct posix_store {
	char *root;
	_Atomic int rootfd;          /* reopened by px_revalidate */
	int old_roots[PX_OLD_ROOTS]; /* fds of a removed root (lock), closed
	                              * at px_close: a request may use one */
	unsigned nold;
	pthread_mutex_t lock;        /* protects uploads, nuploads */
	struct px_upload *uploads;
	unsigned nuploads;
	atomic_uint_fast64_t last_sweep_ms;
	atomic_bool sweeping;
	bool read_only;              /* obj_config.read_only */
};

static void sweep_if_due(struct posix_store *p);
static bool px_revalidate(struct obj_store *st);
static void upload_remove(struct posix_store *p, const char *upload_id);

static struct posix_store *P(struct obj_store *st)
{
	return st->priv;
}

static obj_status errno_status(int e)
{
	switch (e) {
	case ENOENT:
		return OBJ_ERR_NOT_FOUND;
	case EACCES:
	case EPERM:
		return OBJ_ERR_DENIED;
	case ENOMEM:
		return OBJ_ERR_NOMEM;
	case EINVAL:
	case ENAMETOOLONG:
	case EISDIR:
	case ENOTDIR:
		return OBJ_ERR_INVALID;
	default:
		return OBJ_ERR_IO;
	}
}

static obj_status fail(struct obj_error *err, int e, const char *key,
		       const char *what)
{
	obj_status st = errno_status(e);

	obj_err_set(err, st, key, "%s: %s", what, strerror(e));
	if (st == OBJ_ERR_NOT_FOUND)
		snprintf(err->code, sizeof(err->code), "NoSuchKey");
	return st;
}

/* Keys must map to a plain relative path. */
static bool key_ok(const char *key, struct obj_error *err)
{
	const char *s = key;

	if (!*key || !strncmp(key, RESERVED "/", sizeof(RESERVED)) ||
	    !strcmp(key, RESERVED))
		goto bad;
	while (*s) {
		size_t n = strcspn(s, "/");

		if (n == 0 || (n == 1 && s[0] == '.') ||
		    (n == 2 && s[0] == '.' && s[1] == '.') || n > NAME_MAX)
			goto bad;
		s += n;
		if (*s == '/' && !*++s)
			goto bad; /* trailing slash: a "directory" key */
	}
	return true;
bad:
	obj_err_set(err, OBJ_ERR_INVALID, key, "key cannot be stored in a "
		    "file:// store (empty, '.', '..' or over-long segment, "
		    "trailing '/', or under the reserved " RESERVED "/)");
	return false;
}

/* The store's own directory, or under it. */
static bool px_reserved(const char *key)
{
	size_t n = sizeof(RESERVED) - 1;

	return !strncmp(key, RESERVED, n) && (!key[n] || key[n] == '/');
}

/* "a/b/": a directory marker, stored as the directory itself (an empty
 * directory lists as its marker key). */
static bool is_marker(const char *key)
{
	size_t n = strlen(key);

	return n > 1 && key[n - 1] == '/';
}

static bool marker_ok(const char *key, struct obj_error *err)
{
	char buf[PATH_MAX];
	size_t n = strlen(key);

	if (n >= sizeof(buf))
		return key_ok(key, err);
	memcpy(buf, key, n - 1);
	buf[n - 1] = '\0';
	if (!key_ok(buf, err)) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "directory key cannot "
			    "be stored in a file:// store");
		return false;
	}
	return true;
}

/* SIZE-MTIME-CTIME-INODE: the ctime and the inode number catch what
 * keeps the size and the mtime (rsync -t, tar, touch -r): the ctime
 * cannot be set back, and a file replaced by a rename is a new inode. */
static void etag_of(const struct stat *sb, char *out)
{
	snprintf(out, 80, "%llx-%llx-%llx-%llx",
		 (unsigned long long)sb->st_size,
		 (unsigned long long)sb->st_mtim.tv_sec * 1000000000ull +
		 (unsigned long long)sb->st_mtim.tv_nsec,
		 (unsigned long long)sb->st_ctim.tv_sec * 1000000000ull +
		 (unsigned long long)sb->st_ctim.tv_nsec,
		 (unsigned long long)sb->st_ino);
}

/* Creates the parent directories of relative path rel under rootfd. */
static int mkparents(int rootfd, const char *rel)
{
	char buf[PATH_MAX];
	char *s;

	if (strlen(rel) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, rel);
	for (s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdirat(rootfd, buf, 0755) && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

/* Removes now-empty parent directories of key, up to the root. */
static void rmparents(int rootfd, const char *key)
{
	char buf[PATH_MAX];
	char *s;

	if (strlen(key) >= sizeof(buf))
		return;
	strcpy(buf, key);
	while ((s = strrchr(buf, '/'))) {
		*s = '\0';
		if (unlinkat(rootfd, buf, AT_REMOVEDIR))
			return;
	}
}

static int set_meta(int fd, const struct obj_kv *meta, size_t n)
{
	char name[160];

	for (size_t i = 0; i < n; i++) {
		if (!obj_meta_name_valid(meta[i].name))
			return -EINVAL;
		snprintf(name, sizeof(name), META_XATTR "%s", meta[i].name);
		if (fsetxattr(fd, name, meta[i].value, strlen(meta[i].value),
			      0))
			return -errno;
	}
	return 0;
}

/* Removes the metadata xattrs of fd (a directory's marker written again
 * replaces all of it, as a PUT does). */
static int clear_meta(int fd)
{
	char names[8192];
	ssize_t len = flistxattr(fd, names, sizeof(names));

	if (len < 0)
		return errno == ENOTSUP ? 0 : -errno;
	for (char *n = names; n < names + len; n += strlen(n) + 1)
		if (!strncmp(n, META_XATTR, sizeof(META_XATTR) - 1) &&
		    fremovexattr(fd, n) && errno != ENODATA)
			return -errno;
	return 0;
}

static obj_status read_meta(int fd, struct obj_meta *m, struct obj_error *err,
			    const char *key)
{
	char names[8192], val[4096];
	ssize_t len = flistxattr(fd, names, sizeof(names));

	if (len < 0)
		return errno == ENOTSUP ? OBJ_OK : fail(err, errno, key,
							"listxattr");
	for (char *n = names; n < names + len; n += strlen(n) + 1) {
		struct obj_kv *kv;
		ssize_t vl;

		if (!strcmp(n, CTYPE_XATTR)) {
			vl = fgetxattr(fd, n, m->content_type,
				       sizeof(m->content_type) - 1);
			m->content_type[vl > 0 ? vl : 0] = '\0';
			continue;
		}
		if (strncmp(n, META_XATTR, sizeof(META_XATTR) - 1))
			continue;
		vl = fgetxattr(fd, n, val, sizeof(val) - 1);
		if (vl < 0)
			continue;
		val[vl] = '\0';
		kv = realloc(m->user, (m->nuser + 1) * sizeof(*kv));
		if (!kv)
			return OBJ_ERR_NOMEM;
		m->user = kv;
		kv[m->nuser].name = strdup(n + sizeof(META_XATTR) - 1);
		kv[m->nuser].value = strdup(val);
		m->nuser++;
	}
	return OBJ_OK;
}

/* The permission bits of an object on disk, from the "mode" metadata a
 * mount stores with each file (st_mode in decimal, type bits included:
 * cache_wattr_meta): read and write for the store's own user always, so
 * the store can read what it wrote; execute for it and read and execute
 * for group and other as the file had them; never write for group or
 * other (objects change only by a rename of ours, so their write bit
 * would only let others change the bucket behind fmfs's back), nor
 * setuid, setgid or sticky.  No mode, one that does not parse, or one
 * of a symlink or directory: 0600, private to the store's user. */
static mode_t mode_from_value(const char *v)
{
	unsigned long m;
	char *end;

	if (!v || *v < '0' || *v > '9')
		return 0600;
	errno = 0;
	m = strtoul(v, &end, 10);
	if (errno || *end || m > 0177777 ||
	    ((m & S_IFMT) && (m & S_IFMT) != S_IFREG))
		return 0600;
	return 0600 | ((mode_t)m & 0155);
}

/* A directory's: as its "mode" metadata says, with read, write and
 * search for the store's own user always and never write for group or
 * other; no mode (or another type's): 0755, as a prefix's. */
static mode_t dir_mode(const struct obj_kv *meta, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned long m;
		char *end;

		if (strcmp(meta[i].name, "mode") || *meta[i].value < '0' ||
		    *meta[i].value > '9')
			continue;
		errno = 0;
		m = strtoul(meta[i].value, &end, 10);
		if (errno || *end || m > 0177777 ||
		    ((m & S_IFMT) && (m & S_IFMT) != S_IFDIR))
			break;
		return 0700 | ((mode_t)m & 0055);
	}
	return 0755;
}

static mode_t object_mode(const struct obj_kv *meta, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(meta[i].name, "mode"))
			return mode_from_value(meta[i].value);
	return 0600;
}

/* Opens a new temporary file under .fmfs/tmp; its name goes in tmp.  It
 * is private (0600) until the caller gives it the object's mode. */
/* Takes the owner's lock on fd, just created as name: 0 when this
 * process holds it and name is still fd's file; -EAGAIN when a sweep got
 * there first (it removes the name; take another).  Where the file
 * system has no flock, 0 without a lock: the sweep cannot lock either,
 * so it removes nothing there. */
static int own(int rootfd, const char *name, int fd)
{
	struct stat a, b;

	if (flock(fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EAGAIN : 0;
	if (fstat(fd, &a) || fstatat(rootfd, name, &b, AT_SYMLINK_NOFOLLOW) ||
	    a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return -EAGAIN;
	return 0;
}

/* Opens a new temporary file under .fmfs/tmp, locked (see own()); its
 * name goes in tmp.  It is private (0600) until the caller gives it the
 * object's mode.  The lock goes with the descriptor: keep it open until
 * the file is renamed or removed (tmp_commit). */
static int tmp_open(struct posix_store *p, char tmp[64])
{
	static atomic_uint seq;
	int fd, rc = -EEXIST;

	for (int tries = 0; tries < 16 && (rc == -EEXIST || rc == -EAGAIN);
	     tries++) {
		snprintf(tmp, 64, RESERVED "/tmp/" LOCKED_PREFIX "%d.%u",
			 (int)getpid(), atomic_fetch_add(&seq, 1));
		fd = openat(p->rootfd, tmp, O_WRONLY | O_CREAT | O_EXCL |
			    O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = -errno; /* EEXIST: a dead process of our pid */
			continue;
		}
		rc = own(p->rootfd, tmp, fd);
		if (!rc)
			return fd;
		close(fd);
	}
	return rc;
}

/* fsync, then rename tmp over key (creating parents), then close: the
 * lock is held until the name is gone. */
static int tmp_commit(struct posix_store *p, int fd, const char *tmp,
		      const char *key)
{
	int rc = 0;

	if (fsync(fd))
		rc = -errno;
	if (!rc)
		rc = mkparents(p->rootfd, key);
	if (!rc && renameat(p->rootfd, tmp, p->rootfd, key))
		rc = -errno;
	if (rc)
		unlinkat(p->rootfd, tmp, 0);
	close(fd); /* fsynced: nothing a close could still report */
	return rc;
}

/* Which side of copy_in failed: the caller names the two ends. */
enum copy_side { COPY_READ = 1, COPY_WRITE };

/* Copies len bytes from (buf | in_fd at in_off) into out_fd at out_off.
 * On an error *side says whether reading in_fd or writing out_fd failed;
 * in_fd ending before len bytes is -EIO with *side COPY_READ (and *short_src
 * set), so callers can tell a short source from a failing disk. */
static int copy_in(int out_fd, off_t out_off, const void *buf, int in_fd,
		   off_t in_off, uint64_t len, enum copy_side *side,
		   bool *short_src)
{
	char tmp[1 << 16];

	*side = 0;
	*short_src = false;
	while (len) {
		size_t n = len < sizeof(tmp) ? (size_t)len : sizeof(tmp);
		const char *src = buf;
		ssize_t r, w;

		if (!buf) {
			r = pread(in_fd, tmp, n, in_off);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				*side = COPY_READ;
				*short_src = r == 0;
				return r < 0 ? -errno : -EIO;
			}
			n = (size_t)r;
			src = tmp;
		}
		w = pwrite(out_fd, src, n, out_off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			*side = COPY_WRITE;
			return w < 0 ? -errno : -EIO;
		}
		/* A short write: the unwritten rest of tmp is read again. */
		len -= (uint64_t)w;
		out_off += w;
		in_off += w;
		if (buf)
			buf = (const char *)buf + w;
	}
	return 0;
}

/* The message for a failed copy from a caller's fd (or buffer) into a
 * file of the store. */
static obj_status copy_fail(struct obj_error *err, int rc, const char *key,
			    enum copy_side side, bool short_src,
			    const char *writing)
{
	if (side == COPY_READ && short_src) {
		obj_err_set(err, OBJ_ERR_IO, key, "reading the source: it is "
			    "shorter than the length given");
		return OBJ_ERR_IO;
	}
	return fail(err, -rc, key, side == COPY_READ ? "reading the source" :
		    writing);
}

static obj_status px_put(struct obj_store *st, const char *key,
			 const void *buf, int fd, uint64_t len,
			 const struct obj_kv *meta, size_t nmeta,
			 char *etag_out, struct obj_error *err)
{
	struct posix_store *p = P(st);
	enum copy_side side;
	bool short_src;
	char tmp[64];
	struct stat sb;
	int out, rc;

	if (is_marker(key)) {
		if (!marker_ok(key, err))
			return OBJ_ERR_INVALID;
		if (len) {
			obj_err_set(err, OBJ_ERR_INVALID, key, "a key ending "
				    "in '/' cannot be stored with content in a "
				    "file:// store (only as an empty "
				    "directory marker)");
			return OBJ_ERR_INVALID;
		}
		rc = mkparents(p->rootfd, key);
		if (rc)
			return fail(err, -rc, key, "creating the directory");
		/* The marker's metadata (a mount's directory: its mode,
		 * owner, times) lives on the directory itself. */
		if (nmeta) {
			char dir[PATH_MAX];
			int dfd;

			snprintf(dir, sizeof(dir), "%.*s", (int)strlen(key) - 1,
				 key);
			dfd = openat(p->rootfd, dir, O_RDONLY | O_DIRECTORY |
				     O_CLOEXEC);
			if (dfd < 0)
				return fail(err, errno, key, "opening the "
					    "directory");
			rc = clear_meta(dfd);
			if (!rc)
				rc = set_meta(dfd, meta, nmeta);
			if (!rc && fchmod(dfd, dir_mode(meta, nmeta)))
				rc = -errno;
			close(dfd);
			if (rc)
				return fail(err, -rc, key, rc == -EINVAL ?
					    "metadata name" : "setting the "
					    "directory's metadata");
		}
		if (etag_out)
			snprintf(etag_out, 80, "dir");
		return OBJ_OK;
	}
	if (!key_ok(key, err))
		return OBJ_ERR_INVALID;
	sweep_if_due(p);
	out = tmp_open(p, tmp);
	if (out < 0)
		return fail(err, -out, key, "creating a temporary file");
	rc = copy_in(out, 0, buf, fd, 0, len, &side, &short_src);
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return copy_fail(err, rc, key, side, short_src, "writing");
	}
	rc = set_meta(out, meta, nmeta);
	if (!rc && fchmod(out, object_mode(meta, nmeta))) {
		rc = -errno;
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return fail(err, -rc, key, "setting the object's mode");
	}
	if (!rc && etag_out && fstat(out, &sb))
		rc = -errno;
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return fail(err, -rc, key, rc == -EINVAL ? "metadata name" :
			    "writing");
	}
	rc = tmp_commit(p, out, tmp, key);
	if (rc)
		return fail(err, -rc, key, rc == -ENOTDIR || rc == -EISDIR ?
			    "key conflicts with an existing key or prefix" :
			    "committing");
	if (etag_out) {
		if (fstatat(p->rootfd, key, &sb, 0))
			return fail(err, errno, key, "stat");
		etag_of(&sb, etag_out);
	}
	return OBJ_OK;
}

static obj_status px_head(struct obj_store *st, const char *key,
			  struct obj_meta *out, struct obj_error *err)
{
	struct stat sb;
	obj_status rc;
	int fd;

	if (is_marker(key)) {
		if (!marker_ok(key, err))
			return OBJ_ERR_INVALID;
		if (fstatat(P(st)->rootfd, key, &sb, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISDIR(sb.st_mode))
			return fail(err, ENOENT, key, "no such directory");
		memset(out, 0, sizeof(*out));
		out->mtime_s = sb.st_mtim.tv_sec;
		snprintf(out->etag, sizeof(out->etag), "dir");
		fd = openat(P(st)->rootfd, key, O_RDONLY | O_DIRECTORY |
			    O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return fail(err, errno, key, "opening the directory");
		rc = read_meta(fd, out, err, key);
		close(fd);
		return rc;
	}
	if (!key_ok(key, err))
		return OBJ_ERR_INVALID;
	fd = openat(P(st)->rootfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return fail(err, errno == ELOOP || errno == ENOTDIR ? ENOENT :
			    errno, key, "open");
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return fail(err, ENOENT, key, "not an object");
	}
	out->size_bytes = (uint64_t)sb.st_size;
	out->mtime_s = sb.st_mtim.tv_sec;
	etag_of(&sb, out->etag);
	rc = read_meta(fd, out, err, key);
	close(fd);
	return rc;
}

static obj_status px_get(struct obj_store *st, const char *key, uint64_t off,
			 uint64_t len, void *buf, int fd, off_t fd_off,
			 uint64_t *got, struct obj_error *err)
{
	enum copy_side side = COPY_READ;
	bool short_src;
	struct stat sb;
	int in, rc = 0;

	*got = 0;
	if (!key_ok(key, err))
		return OBJ_ERR_INVALID;
	in = openat(P(st)->rootfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return fail(err, errno == ELOOP || errno == ENOTDIR ? ENOENT :
			    errno, key, "open");
	if (fstat(in, &sb) || !S_ISREG(sb.st_mode)) {
		close(in);
		return fail(err, ENOENT, key, "not an object");
	}
	if (off >= (uint64_t)sb.st_size)
		len = 0;
	else if (len > (uint64_t)sb.st_size - off)
		len = (uint64_t)sb.st_size - off;
	if (buf) {
		ssize_t r = util_pread_all(in, buf, (size_t)len, off);

		rc = r < 0 ? (int)r : (uint64_t)r < len ? -EIO : 0;
	} else {
		rc = copy_in(fd, fd_off, NULL, in, (off_t)off, len, &side,
			     &short_src);
	}
	close(in);
	if (rc)
		return fail(err, -rc, key, side == COPY_WRITE ?
			    "writing to the destination file" : "reading");
	*got = len;
	atomic_fetch_add(&st->n_bytes_in, len);
	return OBJ_OK;
}

/* ---- multipart: parts are files under .fmfs/uploads/ID/ ---- */

/* "l." (locked, this fmfs) or not, then hex and dots. */
static bool upload_id_ok(const char *id)
{
	size_t n;

	if (!strncmp(id, LOCKED_PREFIX, sizeof(LOCKED_PREFIX) - 1))
		id += sizeof(LOCKED_PREFIX) - 1;
	n = strspn(id, "0123456789abcdef.");
	return n && !id[n] && n < 64 && id[0] != '.';
}

/* Forgets the upload of this handle and lets go of its lock; after
 * upload_remove, or at close. */
static void upload_release(struct posix_store *p, const char *upload_id)
{
	struct px_upload **pp, *u = NULL;

	pthread_mutex_lock(&p->lock);
	for (pp = &p->uploads; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->id, upload_id)) {
			u = *pp;
			*pp = u->next;
			p->nuploads--;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	if (u) {
		close(u->dirfd);
		free(u);
	}
}

/* Makes .fmfs/uploads/ID, locked for as long as this handle has the
 * upload open (see own()), and remembers it. */
static int upload_dir_create(struct posix_store *p, char *upload_id)
{
	static atomic_uint seq;
	struct px_upload *u;
	char dir[128];
	int rc = -EEXIST;

	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	for (int tries = 0; tries < 16 && (rc == -EEXIST || rc == -EAGAIN);
	     tries++) {
		snprintf(upload_id, OBJ_UPLOAD_ID_MAX, LOCKED_PREFIX "%x.%x.%lx",
			 (unsigned)getpid(), atomic_fetch_add(&seq, 1),
			 (unsigned long)time(NULL));
		snprintf(dir, sizeof(dir), RESERVED "/uploads/%s", upload_id);
		if (mkdirat(p->rootfd, dir, 0700)) {
			rc = -errno;
			continue;
		}
		u->dirfd = openat(p->rootfd, dir, O_RDONLY | O_DIRECTORY |
				  O_CLOEXEC);
		if (u->dirfd < 0) {
			rc = errno == ENOENT ? -EAGAIN : -errno;
			continue;
		}
		rc = own(p->rootfd, dir, u->dirfd);
		if (rc)
			close(u->dirfd);
	}
	if (rc) {
		free(u);
		return rc;
	}
	snprintf(u->id, sizeof(u->id), "%s", upload_id);
	pthread_mutex_lock(&p->lock);
	if (p->nuploads >= UPLOADS_OPEN_MAX) {
		pthread_mutex_unlock(&p->lock);
		upload_remove(p, upload_id);
		close(u->dirfd);
		free(u);
		return -EMFILE;
	}
	u->next = p->uploads;
	p->uploads = u;
	p->nuploads++;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static obj_status px_mpu_create(struct obj_store *st, const char *key,
				const struct obj_kv *meta, size_t nmeta,
				char *upload_id, struct obj_error *err)
{
	struct posix_store *p = P(st);
	char path[160];
	int fd, rc;

	if (!key_ok(key, err))
		return OBJ_ERR_INVALID;
	sweep_if_due(p);
	rc = upload_dir_create(p, upload_id);
	if (rc == -EMFILE) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "creating the upload: "
			    "%u multipart uploads are open on this store "
			    "already; complete or abort some first",
			    UPLOADS_OPEN_MAX);
		return OBJ_ERR_INVALID;
	}
	if (rc)
		return fail(err, -rc, key, "creating the upload");
	/* The key and metadata live on a "meta" file in the upload dir. */
	snprintf(path, sizeof(path), RESERVED "/uploads/%s/meta", upload_id);
	fd = openat(p->rootfd, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
	} else {
		rc = set_meta(fd, meta, nmeta);
		if (!rc && pwrite(fd, key, strlen(key), 0) !=
			   (ssize_t)strlen(key))
			rc = -EIO;
		close(fd);
	}
	if (rc) {
		upload_remove(p, upload_id);
		upload_release(p, upload_id);
		return fail(err, -rc, key, "creating the upload");
	}
	return OBJ_OK;
}

static obj_status px_mpu_part(struct obj_store *st, const char *key,
			      const char *upload_id, unsigned number,
			      const void *buf, int fd, off_t fd_off,
			      size_t len, char *etag_out,
			      struct obj_error *err)
{
	enum copy_side side;
	bool short_src;
	char path[160];
	struct stat sb;
	int out, rc;

	if (!upload_id_ok(upload_id)) {
		obj_err_set(err, OBJ_ERR_NOT_FOUND, key, "no such upload");
		snprintf(err->code, sizeof(err->code), "NoSuchUpload");
		return OBJ_ERR_NOT_FOUND;
	}
	snprintf(path, sizeof(path), RESERVED "/uploads/%s/%05u", upload_id,
		 number);
	out = openat(P(st)->rootfd, path, O_WRONLY | O_CREAT | O_TRUNC |
		     O_CLOEXEC, 0600);
	if (out < 0)
		return fail(err, errno, key, "no such upload");
	rc = copy_in(out, 0, buf, fd, fd_off, len, &side, &short_src);
	if (!rc && fstat(out, &sb)) {
		rc = -errno;
		side = COPY_WRITE;
	}
	close(out);
	if (rc)
		return copy_fail(err, rc, key, side, short_src,
				 "writing a part");
	etag_of(&sb, etag_out);
	atomic_fetch_add(&st->n_bytes_out, len);
	return OBJ_OK;
}

static void upload_remove(struct posix_store *p, const char *upload_id)
{
	char dir[128];
	int dfd;
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), RESERVED "/uploads/%s", upload_id);
	dfd = openat(p->rootfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dfd, de->d_name, 0);
	closedir(d);
	unlinkat(p->rootfd, dir, AT_REMOVEDIR);
}

static obj_status px_mpu_complete(struct obj_store *st, const char *key,
				  const char *upload_id,
				  const struct obj_part *parts, size_t n,
				  char *etag_out, struct obj_error *err)
{
	struct posix_store *p = P(st);
	char path[160], tmp[64], names[4096], val[4096];
	mode_t mode = 0600;
	enum copy_side side = 0;
	bool short_src;
	off_t at = 0;
	int out, in, rc = 0, mfd;
	struct stat sb;
	ssize_t nl;

	if (!upload_id_ok(upload_id)) {
		obj_err_set(err, OBJ_ERR_NOT_FOUND, key, "no such upload");
		snprintf(err->code, sizeof(err->code), "NoSuchUpload");
		return OBJ_ERR_NOT_FOUND;
	}
	snprintf(path, sizeof(path), RESERVED "/uploads/%s/meta", upload_id);
	mfd = openat(p->rootfd, path, O_RDONLY | O_CLOEXEC);
	if (mfd < 0) {
		obj_err_set(err, OBJ_ERR_NOT_FOUND, key, "no such upload");
		snprintf(err->code, sizeof(err->code), "NoSuchUpload");
		return OBJ_ERR_NOT_FOUND;
	}
	out = tmp_open(p, tmp);
	if (out < 0) {
		close(mfd);
		return fail(err, -out, key, "creating a temporary file");
	}
	for (size_t i = 0; i < n && !rc; i++) {
		snprintf(path, sizeof(path), RESERVED "/uploads/%s/%05u",
			 upload_id, parts[i].number);
		in = openat(p->rootfd, path, O_RDONLY | O_CLOEXEC);
		if (in < 0 || fstat(in, &sb)) {
			if (in >= 0)
				close(in);
			rc = -ENOENT;
			break;
		}
		rc = copy_in(out, at, NULL, in, 0, (uint64_t)sb.st_size,
			     &side, &short_src);
		at += sb.st_size;
		close(in);
	}
	if (rc && side == COPY_WRITE) {
		/* The parts are fine; the store's disk is not. */
		close(mfd);
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return fail(err, -rc, key, "writing the object");
	}
	/* Carry the metadata given at create over to the object, and the
	 * mode it names to the file. */
	nl = flistxattr(mfd, names, sizeof(names));
	for (char *nm = names; !rc && nl > 0 && nm < names + nl;
	     nm += strlen(nm) + 1) {
		ssize_t vl = fgetxattr(mfd, nm, val, sizeof(val) - 1);

		if (vl >= 0 && fsetxattr(out, nm, val, (size_t)vl, 0))
			rc = -errno;
		if (vl >= 0 && !strcmp(nm, META_XATTR "mode")) {
			val[vl] = '\0';
			mode = mode_from_value(val);
		}
	}
	close(mfd);
	if (!rc && fchmod(out, mode)) {
		rc = -errno;
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return fail(err, -rc, key, "setting the object's mode");
	}
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		obj_err_set(err, OBJ_ERR_INVALID, key, "a part is missing "
			    "or unreadable: %s", strerror(-rc));
		snprintf(err->code, sizeof(err->code), "InvalidPart");
		return OBJ_ERR_INVALID;
	}
	rc = tmp_commit(p, out, tmp, key);
	if (rc)
		return fail(err, -rc, key, "committing");
	upload_remove(p, upload_id);
	upload_release(p, upload_id);
	if (etag_out && !fstatat(p->rootfd, key, &sb, 0))
		etag_of(&sb, etag_out);
	return OBJ_OK;
}

static obj_status px_mpu_abort(struct obj_store *st, const char *key,
			       const char *upload_id, struct obj_error *err)
{
	if (!upload_id_ok(upload_id)) {
		obj_err_set(err, OBJ_ERR_NOT_FOUND, key, "no such upload");
		return OBJ_ERR_NOT_FOUND;
	}
	upload_remove(P(st), upload_id);
	upload_release(P(st), upload_id);
	return OBJ_OK;
}

/* ---- listing: walk, sort, group by delimiter, page ---- */

struct walk {
	char **keys;
	size_t n, cap;
	const char *prefix;
	int err;
};

static void walk_add(struct walk *w, const char *key)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		char **k = realloc(w->keys, cap * sizeof(*k));

		if (!k) {
			w->err = -ENOMEM;
			return;
		}
		w->keys = k;
		w->cap = cap;
	}
	if (!(w->keys[w->n++] = strdup(key)))
		w->err = -ENOMEM;
}

static void walk_dir(int rootfd, const char *rel, struct walk *w)
{
	/* Not dup(rootfd): a dup shares the read position of the root. */
	int dfd = openat(rootfd, rel[0] ? rel : ".", O_RDONLY | O_DIRECTORY |
			 O_CLOEXEC);
	size_t pl = strlen(w->prefix), seen = 0;
	struct dirent *de;
	DIR *d;

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((de = readdir(d)) && !w->err) {
		char path[PATH_MAX];
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		seen++;
		if (!rel[0] && !strcmp(de->d_name, RESERVED))
			continue;
		if (snprintf(path, sizeof(path), "%s%s%s", rel,
			     rel[0] ? "/" : "", de->d_name) >= (int)sizeof(path))
			continue;
		if (fstatat(rootfd, path, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISDIR(sb.st_mode)) {
			size_t l = strlen(path);

			/* Descend only where keys may match the prefix. */
			if (strncmp(path, w->prefix, l < pl ? l : pl))
				continue;
			walk_dir(rootfd, path, w);
		} else if (S_ISREG(sb.st_mode) &&
			   !strncmp(path, w->prefix, pl)) {
			walk_add(w, path);
		}
	}
	closedir(d);
	if (!seen && rel[0] && !w->err) { /* an empty directory: its marker */
		char mk[PATH_MAX];

		if ((size_t)snprintf(mk, sizeof(mk), "%s/", rel) < sizeof(mk) &&
		    !strncmp(mk, w->prefix, pl))
			walk_add(w, mk);
	}
}

/* The directory part of a listing prefix must stay inside the store and
 * out of .fmfs/: no empty, "." or ".." segments, not absolute. */
static bool dir_prefix_ok(const char *dir)
{
	const char *s = dir;

	if (!*dir)
		return true;
	if (!strcmp(dir, RESERVED) || !strncmp(dir, RESERVED "/",
					       sizeof(RESERVED)))
		return false;
	while (*s) {
		size_t n = strcspn(s, "/");

		if (n == 0 || (n == 1 && s[0] == '.') ||
		    (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += n;
		if (*s == '/')
			s++;
	}
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sets the page's token to the last thing handed out; after a common
 * prefix, "\xff" sorts it past every key under that prefix (UTF-8 never
 * contains the byte 0xff). */
static int set_token(struct obj_list_page *pg, const char *last,
		     bool was_prefix)
{
	size_t ll = strlen(last);

	pg->next_token = malloc(ll + 2);
	if (!pg->next_token)
		return -ENOMEM;
	memcpy(pg->next_token, last, ll + 1);
	if (was_prefix) {
		pg->next_token[ll] = '\xff';
		pg->next_token[ll + 1] = '\0';
	}
	return 0;
}

static obj_status px_list(struct obj_store *st, const char *prefix,
			  const char *delimiter, const char *token,
			  unsigned max_keys, struct obj_list_page *pg,
			  struct obj_error *err)
{
	struct walk w = { .prefix = prefix };
	size_t strip = strlen(st->prefix), pl = strlen(prefix), count = 0;
	size_t dl = delimiter ? strlen(delimiter) : 0;
	char start_dir[PATH_MAX], *slash, *cp = NULL;
	const char *last = "";
	bool last_was_prefix = false;
	obj_status rc = OBJ_OK;
	int e = 0;

	if (!max_keys || max_keys > 1000)
		max_keys = 1000;
	/* Start the walk at the deepest directory the prefix names. */
	snprintf(start_dir, sizeof(start_dir), "%s", prefix);
	slash = strrchr(start_dir, '/');
	if (slash)
		*slash = '\0';
	else
		start_dir[0] = '\0';
	if (!dir_prefix_ok(start_dir))
		return OBJ_OK; /* no key can live there: an empty page */
	walk_dir(P(st)->rootfd, start_dir, &w);
	if (w.n)
		qsort(w.keys, w.n, sizeof(*w.keys), cmp_str);
	pg->entries = calloc(max_keys, sizeof(*pg->entries));
	pg->prefixes = calloc(max_keys, sizeof(*pg->prefixes));
	if (w.err || !pg->entries || !pg->prefixes) {
		e = w.err ? -w.err : ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < w.n && !e; i++) {
		const char *k = w.keys[i], *d;
		struct obj_entry *ent;
		struct stat sb;

		if (token && strcmp(k, token) <= 0)
			continue;
		d = dl ? strstr(k + pl, delimiter) : NULL;
		if (d) {
			size_t cl = (size_t)(d - k) + dl;

			if (cp && strlen(cp) == cl && !strncmp(cp, k, cl))
				continue; /* same common prefix */
			if (count == max_keys) {
				e = -set_token(pg, last, last_was_prefix);
				break;
			}
			free(cp);
			cp = strndup(k, cl);
			if (!cp || !(pg->prefixes[pg->nprefixes] =
				     strdup(cp + strip))) {
				e = ENOMEM;
				break;
			}
			pg->nprefixes++;
			count++;
			last = cp;
			last_was_prefix = true;
			continue;
		}
		if (count == max_keys) {
			e = -set_token(pg, last, last_was_prefix);
			break;
		}
		if (fstatat(P(st)->rootfd, k, &sb, AT_SYMLINK_NOFOLLOW))
			continue; /* deleted since the walk */
		ent = &pg->entries[pg->nentries];
		if (!(ent->key = strdup(k + strip))) {
			e = ENOMEM;
			break;
		}
		ent->size_bytes = (uint64_t)sb.st_size;
		ent->mtime_s = sb.st_mtim.tv_sec;
		etag_of(&sb, ent->etag);
		pg->nentries++;
		count++;
		last = k;
		last_was_prefix = false;
	}
out:
	if (e)
		rc = fail(err, e, prefix, "listing");
	free(cp);
	for (size_t i = 0; i < w.n; i++)
		free(w.keys[i]);
	free(w.keys);
	return rc;
}

static obj_status px_del(struct obj_store *st, const char *key,
			 struct obj_error *err)
{
	if (is_marker(key)) {
		if (!marker_ok(key, err))
			return OBJ_ERR_INVALID;
		/* Only an empty directory goes, as on S3 the prefix stays
		 * while keys are under it. */
		if (!unlinkat(P(st)->rootfd, key, AT_REMOVEDIR))
			rmparents(P(st)->rootfd, key);
		return OBJ_OK;
	}
	if (!key_ok(key, err))
		return OBJ_ERR_INVALID;
	if (unlinkat(P(st)->rootfd, key, 0)) {
		if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR)
			return OBJ_OK; /* no such object (maybe a prefix) */
		return fail(err, errno, key, "delete");
	}
	rmparents(P(st)->rootfd, key);
	return OBJ_OK;
}

static obj_status px_del_many(struct obj_store *st, const char *const *keys,
			      size_t n, size_t *failed,
			      struct obj_error *err)
{
	obj_status first = OBJ_OK;

	*failed = 0;
	for (size_t i = 0; i < n; i++) {
		struct obj_error e = {0};
		obj_status rc = px_del(st, keys[i], &e);

		if (rc != OBJ_OK) {
			(*failed)++;
			if (first == OBJ_OK) {
				first = rc;
				*err = e;
			}
		}
	}
	return first;
}

static obj_status px_copy(struct obj_store *st, const char *src,
			  const char *dst, const struct obj_kv *meta,
			  size_t nmeta, char *etag_out, struct obj_error *err)
{
	struct obj_meta m = {0};
	obj_status rc;
	int in;

	rc = px_head(st, src, &m, err);
	if (rc != OBJ_OK)
		return rc;
	if (is_marker(src)) {
		obj_meta_release(&m);
		return px_put(st, dst, NULL, -1, 0, NULL, 0, etag_out, err);
	}
	in = openat(P(st)->rootfd, src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		obj_meta_release(&m);
		return fail(err, errno, src, "open");
	}
	rc = px_put(st, dst, NULL, in, m.size_bytes, meta ? meta : m.user,
		    meta ? nmeta : m.nuser, etag_out, err);
	close(in);
	obj_meta_release(&m);
	return rc;
}

/* ---- crash debris: sweeping .fmfs/tmp and .fmfs/uploads ---- */

/* The newest mtime of dfd and, for a directory, of what is in it. */
static time_t newest_mtime(int fd, const struct stat *sb)
{
	time_t t = sb->st_mtime;
	struct dirent *de;
	struct stat e;
	DIR *d;
	int dup_fd;

	if (!S_ISDIR(sb->st_mode))
		return t;
	dup_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
		if (dup_fd >= 0)
			close(dup_fd);
		return time(NULL); /* cannot tell: as if just touched */
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    !fstatat(dirfd(d), de->d_name, &e, AT_SYMLINK_NOFOLLOW) &&
		    e.st_mtime > t)
			t = e.st_mtime;
	closedir(d);
	return t;
}

/* Removes sub/name (a temporary file, or an upload directory and its
 * files) if its owner is provably gone: we can take its lock and the
 * name is still the file we locked (own()); names of an fmfs that did
 * not lock, only when untouched for LEGACY_DEBRIS_AGE_S as well. */
static void sweep_one(struct posix_store *p, const char *sub,
		      const char *name, bool is_dir)
{
	char path[128 + NAME_MAX];
	struct stat sb;
	int fd;

	if (snprintf(path, sizeof(path), RESERVED "/%s/%s", sub, name) >=
	    (int)sizeof(path))
		return;
	fd = openat(p->rootfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC | (is_dir ? O_DIRECTORY : 0));
	if (fd < 0)
		return;
	if (fstat(fd, &sb) || (is_dir ? !S_ISDIR(sb.st_mode) :
			       !S_ISREG(sb.st_mode)))
		goto out_close;
	if (flock(fd, LOCK_EX | LOCK_NB) || own(p->rootfd, path, fd))
		goto out_close; /* live, or no flock here: keep */
	if (strncmp(name, LOCKED_PREFIX, sizeof(LOCKED_PREFIX) - 1) &&
	    time(NULL) - newest_mtime(fd, &sb) < LEGACY_DEBRIS_AGE_S)
		goto out_close;
	if (is_dir)
		upload_remove(p, name);
	else
		unlinkat(p->rootfd, path, 0);
out_close:
	close(fd); /* the lock goes with it, after the name */
}

static void sweep_sub(struct posix_store *p, const char *sub, bool is_dir)
{
	char rel[64];
	struct dirent *de;
	DIR *d;
	int fd;

	snprintf(rel, sizeof(rel), RESERVED "/%s", sub);
	fd = openat(p->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			sweep_one(p, sub, de->d_name, is_dir);
	closedir(d);
}

/* Removes the crash debris of dead processes (file header).  Errors are
 * ignored: debris left now is swept at the next chance. */
static void sweep(struct posix_store *p)
{
	bool no = false;

	if (!atomic_compare_exchange_strong(&p->sweeping, &no, true))
		return; /* another thread of this handle is at it */
	atomic_store(&p->last_sweep_ms, util_now_ms());
	sweep_sub(p, "tmp", false);
	sweep_sub(p, "uploads", true);
	atomic_store(&p->sweeping, false);
}

/* At an upload: a long-lived handle (a mount) also cleans after
 * processes that die beside it, at most once a SWEEP_INTERVAL_MS. */
static void sweep_if_due(struct posix_store *p)
{
	if (util_now_ms() - atomic_load(&p->last_sweep_ms) >=
	    SWEEP_INTERVAL_MS)
		sweep(p);
}

static obj_status px_check_bucket(struct obj_store *st, struct obj_error *err)
{
	struct stat sb;

	px_revalidate(st);
	if (fstat(P(st)->rootfd, &sb) || !S_ISDIR(sb.st_mode))
		return fail(err, errno ? errno : ENOTDIR, P(st)->root,
			    "store directory");
	if (!sb.st_nlink) {
		obj_err_set(err, OBJ_ERR_NO_BUCKET, P(st)->root, "store "
			    "directory was removed (make it again with mkdir "
			    "-p)");
		snprintf(err->code, sizeof(err->code), "NoSuchBucket");
		return OBJ_ERR_NO_BUCKET;
	}
	if (!P(st)->read_only &&
	    faccessat(P(st)->rootfd, ".", W_OK, AT_EACCESS)) {
		obj_err_set(err, OBJ_ERR_DENIED, P(st)->root,
			    "store directory is not writable");
		snprintf(err->code, sizeof(err->code), "StoreNotWritable");
		return OBJ_ERR_DENIED;
	}
	return OBJ_OK;
}

static obj_status px_open(struct obj_store *st, const struct obj_url *u,
			  const struct obj_config *cfg, struct obj_error *err)
{
	struct posix_store *p = calloc(1, sizeof(*p));

	if (!p || !(p->root = strdup(u->path)) ||
	    !(st->prefix = strdup(""))) {
		if (p)
			free(p->root);
		free(p);
		obj_err_set(err, OBJ_ERR_NOMEM, NULL, "out of memory");
		return OBJ_ERR_NOMEM;
	}
	p->rootfd = open(p->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->rootfd < 0) {
		int e = errno;

		obj_err_set(err, e == ENOENT ? OBJ_ERR_NO_BUCKET :
			    errno_status(e), p->root, "store directory: %s%s",
			    strerror(e), e == ENOENT ? " (create it with "
			    "mkdir -p)" : "");
		if (e == ENOENT)
			snprintf(err->code, sizeof(err->code), "NoSuchBucket");
		free(p->root);
		free(p);
		return err->status;
	}
	p->read_only = cfg->read_only;
	pthread_mutex_init(&p->lock, NULL);
	if (!p->read_only) {
		/* Internal dirs; failure here shows up at the first write. */
		mkdirat(p->rootfd, RESERVED, 0700);
		mkdirat(p->rootfd, RESERVED "/tmp", 0700);
		mkdirat(p->rootfd, RESERVED "/uploads", 0700);
		sweep(p);
	}
	st->priv = p;
	snprintf(st->desc, sizeof(st->desc), "file://%s", p->root);
	return OBJ_OK;
}

static void px_close(struct obj_store *st)
{
	struct posix_store *p = P(st);

	/* Uploads never completed or aborted: nobody else can finish them
	 * (their ids live in this handle only). */
	while (p->uploads) {
		char id[OBJ_UPLOAD_ID_MAX];

		snprintf(id, sizeof(id), "%s", p->uploads->id);
		upload_remove(p, id);
		upload_release(p, id);
	}
	pthread_mutex_destroy(&p->lock);
	close(p->rootfd);
	for (unsigned i = 0; i < p->nold; i++)
		close(p->old_roots[i]);
	free(p->root);
	free(p);
}

/* Before each request and after a failed one: a store directory removed
 * and made again beside the mount leaves rootfd on the removed one, where
 * nothing can be made again; the next request goes to the new one.
 * true: the directory is gone and not made again. */
static bool px_revalidate(struct obj_store *st)
{
	struct posix_store *p = P(st);
	struct stat sb;
	int fd;

	if (fstat(p->rootfd, &sb) || sb.st_nlink)
		return false;
	fd = open(p->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return true; /* not made again (yet) */
	pthread_mutex_lock(&p->lock);
	/* Another request may have moved already. */
	if (!fstat(p->rootfd, &sb) && !sb.st_nlink) {
		int old = atomic_exchange(&p->rootfd, fd);

		if (p->nold < PX_OLD_ROOTS)
			p->old_roots[p->nold++] = old;
		/* else left open: a request may still use it */
		if (!p->read_only) {
			mkdirat(fd, RESERVED, 0700);
			mkdirat(fd, RESERVED "/tmp", 0700);
			mkdirat(fd, RESERVED "/uploads", 0700);
		}
		fd = -1;
	}
	pthread_mutex_unlock(&p->lock);
	if (fd >= 0)
		close(fd);
	return false;
}

const struct obj_backend obj_posix_backend = {
	.name = "file",
	.open = px_open,
	.close = px_close,
	.check_bucket = px_check_bucket,
	.reserved = px_reserved,
	.revalidate = px_revalidate,
	.head = px_head,
	.get = px_get,
	.put = px_put,
	.mpu_create = px_mpu_create,
	.mpu_part = px_mpu_part,
	.mpu_complete = px_mpu_complete,
	.mpu_abort = px_mpu_abort,
	.list = px_list,
	.del = px_del,
	.del_many = px_del_many,
	.copy = px_copy,
	.split_ranges = false,
};
