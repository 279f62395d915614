/* SPDX-License-Identifier: MIT */
/*
 * posix_int.h - shared by the files of the file:// backend: posix.c
 * (objects, the backend table), posix_list.c (listing), posix_mpu.c
 * (multipart uploads) and posix_sweep.c (crash debris).  The design is at the top of
 * posix.c.
 */
#ifndef FMFS_OBJSTORE_POSIX_INT_H
#define FMFS_OBJSTORE_POSIX_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "objstore_int.h"

#define META_XATTR "user.fmfs.meta."
#define CTYPE_XATTR "user.fmfs.content-type"
/* On a directory: its marker ("a/b/") was put, so it stays when the last
 * key under it goes, as the marker object does on S3. */
#define MARKER_XATTR "user.fmfs.marker"
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

static inline struct posix_store *px_of(struct obj_store *st)
{
	return st->priv;
}

/* posix.c */
obj_status px_fail(struct obj_error *err, int e, const char *key,
		   const char *what);
bool px_key_ok(const char *key, struct obj_error *err);
int px_own(int rootfd, const char *name, int fd);
int px_mkparents(int rootfd, const char *rel);
void px_etag_of(const struct stat *sb, char *out);
int px_set_meta(int fd, const struct obj_kv *meta, size_t n);
/* Which side of px_copy_in failed: the caller names the two ends. */
enum copy_side { COPY_READ = 1, COPY_WRITE };
/* Copies len bytes from (buf | in_fd at in_off) into out_fd at out_off.
 * On an error *side says whether reading in_fd or writing out_fd failed;
 * in_fd ending before len bytes is -EIO with *side COPY_READ (and
 * *short_src set), so callers can tell a short source from a failing
 * disk. */
int px_copy_in(int out_fd, off_t out_off, const void *buf, int in_fd,
	       off_t in_off, uint64_t len, enum copy_side *side,
	       bool *short_src);
/* The message for a failed copy from a caller's fd (or buffer) into a
 * file of the store. */
obj_status px_copy_fail(struct obj_error *err, int rc, const char *key,
			enum copy_side side, bool short_src,
			const char *writing);
bool px_revalidate(struct obj_store *st);
/* The mode of an object's file for its x-amz-meta-mode value (the rules
 * are at the function, posix.c). */
mode_t px_mode_from_value(const char *v);
/* A new temporary file under .fmfs/tmp, locked (px_own), its name in
 * tmp; px_tmp_commit syncs it, renames it over key and closes it. */
int px_tmp_open(struct posix_store *p, char tmp[64]);
int px_tmp_commit(struct posix_store *p, int fd, const char *tmp,
		  const char *key);

/* posix_mpu.c: multipart uploads, parts under .fmfs/uploads/ID/ */
obj_status px_mpu_create(struct obj_store *st, const char *key,
			 const struct obj_kv *meta, size_t nmeta,
			 char *upload_id, struct obj_error *err);
obj_status px_mpu_part(struct obj_store *st, const char *key,
		       const char *upload_id, unsigned number,
		       const void *buf, int fd, off_t fd_off, size_t len,
		       char *etag_out, struct obj_error *err);
obj_status px_mpu_complete(struct obj_store *st, const char *key,
			   const char *upload_id,
			   const struct obj_part *parts, size_t n,
			   char *etag_out, struct obj_error *err);
obj_status px_mpu_abort(struct obj_store *st, const char *key,
			const char *upload_id, struct obj_error *err);
/* Removes an upload's directory and parts; px_upload_release then
 * forgets it (unlocks it and drops it from the handle's list). */
void px_upload_remove(struct posix_store *p, const char *upload_id);
void px_upload_release(struct posix_store *p, const char *upload_id);

/* posix_list.c */
obj_status px_list(struct obj_store *st, const char *prefix,
		   const char *delimiter, const char *token,
		   unsigned max_keys, struct obj_list_page *pg,
		   struct obj_error *err);

/* posix_sweep.c: crash debris under .fmfs/tmp and .fmfs/uploads */
void px_sweep(struct posix_store *p);
void px_sweep_if_due(struct posix_store *p);

#endif /* FMFS_OBJSTORE_POSIX_INT_H */
