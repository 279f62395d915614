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
 * upload at most once a minute (px_sweep()).  Two processes may share a
 * store (a mount and `fmfs obj cp`): the lock, not a pid or an age, is
 * what tells a live upload from a dead one.
 *
 * Files: this one (objects, the backend table), posix_list.c (listing),
 * posix_mpu.c (multipart uploads), posix_sweep.c (crash debris); they
 * share posix_int.h.
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

#include "posix_int.h"


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

obj_status px_fail(struct obj_error *err, int e, const char *key,
		       const char *what)
{
	obj_status st = errno_status(e);

	obj_err_set(err, st, key, "%s: %s", what, strerror(e));
	if (st == OBJ_ERR_NOT_FOUND)
		snprintf(err->code, sizeof(err->code), "NoSuchKey");
	return st;
}

/* Keys must map to a plain relative path. */
bool px_key_ok(const char *key, struct obj_error *err)
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
		return px_key_ok(key, err);
	memcpy(buf, key, n - 1);
	buf[n - 1] = '\0';
	if (!px_key_ok(buf, err)) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "directory key cannot "
			    "be stored in a file:// store");
		return false;
	}
	return true;
}

/* A 128-bit hash of SIZE, MTIME_NS, CTIME_NS and INODE, written as 32 hex
 * digits: the ctime and the inode number catch what keeps the size and
 * the mtime (rsync -t, tar, touch -r): the ctime cannot be set back, and
 * a file replaced by a rename is a new inode.  In S3's form so that the
 * mount keeps it in 16 bytes, not as text (docs/objstore.md). */
void px_etag_of(const struct stat *sb, char *out)
{
	uint64_t v[4] = {
		(uint64_t)sb->st_size,
		(uint64_t)sb->st_mtim.tv_sec * 1000000000ull +
			(uint64_t)sb->st_mtim.tv_nsec,
		(uint64_t)sb->st_ctim.tv_sec * 1000000000ull +
			(uint64_t)sb->st_ctim.tv_nsec,
		(uint64_t)sb->st_ino,
	};
	uint64_t a = 0x243f6a8885a308d3ull, b = 0x13198a2e03707344ull;

	for (int i = 0; i < 4; i++) {
		a = util_mix64(a ^ v[i]);
		b = util_mix64(b + v[3 - i] * 0x9e3779b97f4a7c15ull);
	}
	snprintf(out, 80, "%016llx%016llx", (unsigned long long)a,
		 (unsigned long long)util_mix64(a ^ b));
}

/* Creates the parent directories of relative path rel under rootfd. */
int px_mkparents(int rootfd, const char *rel)
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

/* Whether directory rel under rootfd holds its marker (MARKER_XATTR). */
static bool marked(int rootfd, const char *rel)
{
	int fd = openat(rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
			O_NOFOLLOW);
	bool m;

	if (fd < 0)
		return false;
	m = fgetxattr(fd, MARKER_XATTR, NULL, 0) >= 0;
	close(fd);
	return m;
}

/* Removes now-empty parent directories of key, up to the root, but not
 * one whose marker was put (it is an object of its own). */
static void rmparents(int rootfd, const char *key)
{
	char buf[PATH_MAX];
	char *s;

	if (strlen(key) >= sizeof(buf))
		return;
	strcpy(buf, key);
	while ((s = strrchr(buf, '/'))) {
		*s = '\0';
		if (marked(rootfd, buf) || unlinkat(rootfd, buf, AT_REMOVEDIR))
			return;
	}
}

int px_set_meta(int fd, const struct obj_kv *meta, size_t n)
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
		return errno == ENOTSUP ? OBJ_OK : px_fail(err, errno, key,
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
mode_t px_mode_from_value(const char *v)
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
			return px_mode_from_value(meta[i].value);
	return 0600;
}

/* Opens a new temporary file under .fmfs/tmp; its name goes in tmp.  It
 * is private (0600) until the caller gives it the object's mode. */
/* Takes the owner's lock on fd, just created as name: 0 when this
 * process holds it and name is still fd's file; -EAGAIN when a sweep got
 * there first (it removes the name; take another).  Where the file
 * system has no flock, 0 without a lock: the sweep cannot lock either,
 * so it removes nothing there. */
int px_own(int rootfd, const char *name, int fd)
{
	struct stat a, b;

	if (flock(fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EAGAIN : 0;
	if (fstat(fd, &a) || fstatat(rootfd, name, &b, AT_SYMLINK_NOFOLLOW) ||
	    a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return -EAGAIN;
	return 0;
}

/* Opens a new temporary file under .fmfs/tmp, locked (see px_own()); its
 * name goes in tmp.  It is private (0600) until the caller gives it the
 * object's mode.  The lock goes with the descriptor: keep it open until
 * the file is renamed or removed (tmp_commit). */
int px_tmp_open(struct posix_store *p, char tmp[64])
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
		rc = px_own(p->rootfd, tmp, fd);
		if (!rc)
			return fd;
		close(fd);
	}
	return rc;
}

/* fsync, then rename tmp over key (creating parents), then close: the
 * lock is held until the name is gone. */
int px_tmp_commit(struct posix_store *p, int fd, const char *tmp,
		      const char *key)
{
	int rc = 0;

	if (fsync(fd))
		rc = -errno;
	if (!rc)
		rc = px_mkparents(p->rootfd, key);
	if (!rc && renameat(p->rootfd, tmp, p->rootfd, key))
		rc = -errno;
	if (rc)
		unlinkat(p->rootfd, tmp, 0);
	close(fd); /* fsynced: nothing a close could still report */
	return rc;
}

/* Copies len bytes from (buf | in_fd at in_off) into out_fd at out_off.
 * On an error *side says whether reading in_fd or writing out_fd failed;
 * in_fd ending before len bytes is -EIO with *side COPY_READ (and *short_src
 * set), so callers can tell a short source from a failing disk. */
int px_copy_in(int out_fd, off_t out_off, const void *buf, int in_fd,
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
obj_status px_copy_fail(struct obj_error *err, int rc, const char *key,
			    enum copy_side side, bool short_src,
			    const char *writing)
{
	if (side == COPY_READ && short_src) {
		obj_err_set(err, OBJ_ERR_IO, key, "reading the source: it is "
			    "shorter than the length given");
		return OBJ_ERR_IO;
	}
	return px_fail(err, -rc, key, side == COPY_READ ? "reading the source" :
		    writing);
}

static obj_status px_put(struct obj_store *st, const char *key,
			 const void *buf, int fd, uint64_t len,
			 const struct obj_kv *meta, size_t nmeta,
			 char *etag_out, struct obj_error *err)
{
	struct posix_store *p = px_of(st);
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
		rc = px_mkparents(p->rootfd, key);
		if (rc)
			return px_fail(err, -rc, key, "creating the directory");
		/* The marker's metadata (a mount's directory: its mode,
		 * owner, times) lives on the directory itself, and so does
		 * the mark that it was put (rmparents). */
		{
			char dir[PATH_MAX];
			int dfd;

			snprintf(dir, sizeof(dir), "%.*s", (int)strlen(key) - 1,
				 key);
			dfd = openat(p->rootfd, dir, O_RDONLY | O_DIRECTORY |
				     O_CLOEXEC);
			if (dfd < 0)
				return px_fail(err, errno, key, "opening the "
					    "directory");
			/* a file system without user xattrs: as before */
			(void)fsetxattr(dfd, MARKER_XATTR, "1", 1, 0);
			rc = nmeta ? clear_meta(dfd) : 0;
			if (!rc && nmeta)
				rc = px_set_meta(dfd, meta, nmeta);
			if (!rc && nmeta && fchmod(dfd, dir_mode(meta, nmeta)))
				rc = -errno;
			close(dfd);
			if (rc)
				return px_fail(err, -rc, key, rc == -EINVAL ?
					    "metadata name" : "setting the "
					    "directory's metadata");
		}
		if (etag_out)
			snprintf(etag_out, 80, "dir");
		return OBJ_OK;
	}
	if (!px_key_ok(key, err))
		return OBJ_ERR_INVALID;
	px_sweep_if_due(p);
	out = px_tmp_open(p, tmp);
	if (out < 0)
		return px_fail(err, -out, key, "creating a temporary file");
	rc = px_copy_in(out, 0, buf, fd, 0, len, &side, &short_src);
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return px_copy_fail(err, rc, key, side, short_src, "writing");
	}
	rc = px_set_meta(out, meta, nmeta);
	if (!rc && fchmod(out, object_mode(meta, nmeta))) {
		rc = -errno;
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return px_fail(err, -rc, key, "setting the object's mode");
	}
	if (!rc && etag_out && fstat(out, &sb))
		rc = -errno;
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return px_fail(err, -rc, key, rc == -EINVAL ? "metadata name" :
			    "writing");
	}
	rc = px_tmp_commit(p, out, tmp, key);
	if (rc)
		return px_fail(err, -rc, key, rc == -ENOTDIR || rc == -EISDIR ?
			    "key conflicts with an existing key or prefix" :
			    "committing");
	if (etag_out) {
		if (fstatat(p->rootfd, key, &sb, 0))
			return px_fail(err, errno, key, "stat");
		px_etag_of(&sb, etag_out);
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
		if (fstatat(px_of(st)->rootfd, key, &sb, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISDIR(sb.st_mode))
			return px_fail(err, ENOENT, key, "no such directory");
		memset(out, 0, sizeof(*out));
		out->mtime_s = sb.st_mtim.tv_sec;
		snprintf(out->etag, sizeof(out->etag), "dir");
		fd = openat(px_of(st)->rootfd, key, O_RDONLY | O_DIRECTORY |
			    O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return px_fail(err, errno, key, "opening the directory");
		rc = read_meta(fd, out, err, key);
		close(fd);
		return rc;
	}
	if (!px_key_ok(key, err))
		return OBJ_ERR_INVALID;
	fd = openat(px_of(st)->rootfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return px_fail(err, errno == ELOOP || errno == ENOTDIR ? ENOENT :
			    errno, key, "open");
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return px_fail(err, ENOENT, key, "not an object");
	}
	out->size_bytes = (uint64_t)sb.st_size;
	out->mtime_s = sb.st_mtim.tv_sec;
	px_etag_of(&sb, out->etag);
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
	if (!px_key_ok(key, err))
		return OBJ_ERR_INVALID;
	in = openat(px_of(st)->rootfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return px_fail(err, errno == ELOOP || errno == ENOTDIR ? ENOENT :
			    errno, key, "open");
	if (fstat(in, &sb) || !S_ISREG(sb.st_mode)) {
		close(in);
		return px_fail(err, ENOENT, key, "not an object");
	}
	if (off >= (uint64_t)sb.st_size)
		len = 0;
	else if (len > (uint64_t)sb.st_size - off)
		len = (uint64_t)sb.st_size - off;
	if (buf) {
		ssize_t r = util_pread_all(in, buf, (size_t)len, off);

		rc = r < 0 ? (int)r : (uint64_t)r < len ? -EIO : 0;
	} else {
		rc = px_copy_in(fd, fd_off, NULL, in, (off_t)off, len, &side,
			     &short_src);
	}
	close(in);
	if (rc)
		return px_fail(err, -rc, key, side == COPY_WRITE ?
			    "writing to the destination file" : "reading");
	*got = len;
	atomic_fetch_add(&st->n_bytes_in, len);
	return OBJ_OK;
}

static obj_status px_del(struct obj_store *st, const char *key,
			 struct obj_error *err)
{
	if (is_marker(key)) {
		if (!marker_ok(key, err))
			return OBJ_ERR_INVALID;
		/* Only an empty directory goes, as on S3 the prefix stays
		 * while keys are under it; it stays without its marker. */
		if (!unlinkat(px_of(st)->rootfd, key, AT_REMOVEDIR)) {
			char dir[PATH_MAX];

			/* its parents: from "a/b", not "a/b/" */
			snprintf(dir, sizeof(dir), "%.*s", (int)strlen(key) - 1,
				 key);
			rmparents(px_of(st)->rootfd, dir);
		} else {
			int fd = openat(px_of(st)->rootfd, key, O_RDONLY |
					O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

			if (fd >= 0) {
				(void)fremovexattr(fd, MARKER_XATTR);
				close(fd);
			}
		}
		return OBJ_OK;
	}
	if (!px_key_ok(key, err))
		return OBJ_ERR_INVALID;
	if (unlinkat(px_of(st)->rootfd, key, 0)) {
		if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR)
			return OBJ_OK; /* no such object (maybe a prefix) */
		return px_fail(err, errno, key, "delete");
	}
	rmparents(px_of(st)->rootfd, key);
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
			  size_t nmeta, const char *content_type,
			  char *etag_out, struct obj_error *err)
{
	(void)content_type; /* a file:// store keeps none */
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
	in = openat(px_of(st)->rootfd, src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		obj_meta_release(&m);
		return px_fail(err, errno, src, "open");
	}
	rc = px_put(st, dst, NULL, in, m.size_bytes, meta ? meta : m.user,
		    meta ? nmeta : m.nuser, etag_out, err);
	close(in);
	obj_meta_release(&m);
	return rc;
}

static obj_status px_check_bucket(struct obj_store *st, struct obj_error *err)
{
	struct stat sb;

	px_revalidate(st);
	if (fstat(px_of(st)->rootfd, &sb) || !S_ISDIR(sb.st_mode))
		return px_fail(err, errno ? errno : ENOTDIR, px_of(st)->root,
			    "store directory");
	if (!sb.st_nlink) {
		obj_err_set(err, OBJ_ERR_NO_BUCKET, px_of(st)->root, "store "
			    "directory was removed (make it again with mkdir "
			    "-p)");
		snprintf(err->code, sizeof(err->code), "NoSuchBucket");
		return OBJ_ERR_NO_BUCKET;
	}
	if (!px_of(st)->read_only &&
	    faccessat(px_of(st)->rootfd, ".", W_OK, AT_EACCESS)) {
		obj_err_set(err, OBJ_ERR_DENIED, px_of(st)->root,
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
		px_sweep(p);
	}
	st->priv = p;
	snprintf(st->desc, sizeof(st->desc), "file://%s", p->root);
	return OBJ_OK;
}

static void px_close(struct obj_store *st)
{
	struct posix_store *p = px_of(st);

	/* Uploads never completed or aborted: nobody else can finish them
	 * (their ids live in this handle only). */
	while (p->uploads) {
		char id[OBJ_UPLOAD_ID_MAX];

		snprintf(id, sizeof(id), "%s", p->uploads->id);
		px_upload_remove(p, id);
		px_upload_release(p, id);
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
bool px_revalidate(struct obj_store *st)
{
	struct posix_store *p = px_of(st);
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
