/* SPDX-License-Identifier: MIT */
/*
 * posix_mpu.c - multipart uploads of the file:// backend: each upload a
 * directory under .fmfs/uploads/ID/, flock()ed by its owner while it
 * lives, its parts files there; complete concatenates them into a
 * temporary file and renames it into place with the metadata.
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
void px_upload_release(struct posix_store *p, const char *upload_id)
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
 * upload open (see px_own()), and remembers it. */
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
		rc = px_own(p->rootfd, dir, u->dirfd);
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
		px_upload_remove(p, upload_id);
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

obj_status px_mpu_create(struct obj_store *st, const char *key,
				const struct obj_kv *meta, size_t nmeta,
				char *upload_id, struct obj_error *err)
{
	struct posix_store *p = px_of(st);
	char path[160];
	int fd, rc;

	if (!px_key_ok(key, err))
		return OBJ_ERR_INVALID;
	px_sweep_if_due(p);
	rc = upload_dir_create(p, upload_id);
	if (rc == -EMFILE) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "creating the upload: "
			    "%u multipart uploads are open on this store "
			    "already; complete or abort some first",
			    UPLOADS_OPEN_MAX);
		return OBJ_ERR_INVALID;
	}
	if (rc)
		return px_fail(err, -rc, key, "creating the upload");
	/* The key and metadata live on a "meta" file in the upload dir. */
	snprintf(path, sizeof(path), RESERVED "/uploads/%s/meta", upload_id);
	fd = openat(p->rootfd, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
	} else {
		rc = px_set_meta(fd, meta, nmeta);
		if (!rc && pwrite(fd, key, strlen(key), 0) !=
			   (ssize_t)strlen(key))
			rc = -EIO;
		close(fd);
	}
	if (rc) {
		px_upload_remove(p, upload_id);
		px_upload_release(p, upload_id);
		return px_fail(err, -rc, key, "creating the upload");
	}
	return OBJ_OK;
}

obj_status px_mpu_part(struct obj_store *st, const char *key,
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
	out = openat(px_of(st)->rootfd, path, O_WRONLY | O_CREAT | O_TRUNC |
		     O_CLOEXEC, 0600);
	if (out < 0)
		return px_fail(err, errno, key, "no such upload");
	rc = px_copy_in(out, 0, buf, fd, fd_off, len, &side, &short_src);
	if (!rc && fstat(out, &sb)) {
		rc = -errno;
		side = COPY_WRITE;
	}
	close(out);
	if (rc)
		return px_copy_fail(err, rc, key, side, short_src,
				 "writing a part");
	px_etag_of(&sb, etag_out);
	atomic_fetch_add(&st->n_bytes_out, len);
	return OBJ_OK;
}

void px_upload_remove(struct posix_store *p, const char *upload_id)
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

obj_status px_mpu_complete(struct obj_store *st, const char *key,
				  const char *upload_id,
				  const struct obj_part *parts, size_t n,
				  char *etag_out, struct obj_error *err)
{
	struct posix_store *p = px_of(st);
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
	out = px_tmp_open(p, tmp);
	if (out < 0) {
		close(mfd);
		return px_fail(err, -out, key, "creating a temporary file");
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
		rc = px_copy_in(out, at, NULL, in, 0, (uint64_t)sb.st_size,
			     &side, &short_src);
		at += sb.st_size;
		close(in);
	}
	if (rc && side == COPY_WRITE) {
		/* The parts are fine; the store's disk is not. */
		close(mfd);
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return px_fail(err, -rc, key, "writing the object");
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
			mode = px_mode_from_value(val);
		}
	}
	close(mfd);
	if (!rc && fchmod(out, mode)) {
		rc = -errno;
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		return px_fail(err, -rc, key, "setting the object's mode");
	}
	if (rc) {
		close(out);
		unlinkat(p->rootfd, tmp, 0);
		obj_err_set(err, OBJ_ERR_INVALID, key, "a part is missing "
			    "or unreadable: %s", strerror(-rc));
		snprintf(err->code, sizeof(err->code), "InvalidPart");
		return OBJ_ERR_INVALID;
	}
	rc = px_tmp_commit(p, out, tmp, key);
	if (rc)
		return px_fail(err, -rc, key, "committing");
	px_upload_remove(p, upload_id);
	px_upload_release(p, upload_id);
	if (etag_out && !fstatat(p->rootfd, key, &sb, 0))
		px_etag_of(&sb, etag_out);
	return OBJ_OK;
}

obj_status px_mpu_abort(struct obj_store *st, const char *key,
			       const char *upload_id, struct obj_error *err)
{
	if (!upload_id_ok(upload_id)) {
		obj_err_set(err, OBJ_ERR_NOT_FOUND, key, "no such upload");
		return OBJ_ERR_NOT_FOUND;
	}
	px_upload_remove(px_of(st), upload_id);
	px_upload_release(px_of(st), upload_id);
	return OBJ_OK;
}
