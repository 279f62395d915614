/* SPDX-License-Identifier: MIT */
/*
 * objstore_int.h - what the objstore module shares between its files and
 * keeps from the rest of fmfs: the backend table, the store struct, URL and
 * credentials parsing.  Unit tests include it; other modules must not.
 */
#ifndef FMFS_OBJSTORE_INT_H
#define FMFS_OBJSTORE_INT_H

#include <stdatomic.h>
#include "objstore.h"
#include "util/util.h"

/* ---- URLs (url.c) ---- */

enum obj_scheme { OBJ_SCHEME_S3 = 1, OBJ_SCHEME_FILE };

struct obj_url {
	enum obj_scheme scheme;
	char *bucket;   /* s3: bucket name */
	char *key;      /* s3: the part after the bucket, may be "" */
	char *path;     /* file: absolute directory */
};
/* Parses s3://BUCKET[/KEY] or file:///ABS/DIR.  On error fills msg. */
int obj_url_parse(const char *url, struct obj_url *out, char *msg,
		  size_t msg_len);
void obj_url_release(struct obj_url *u);
/* True if name can be a bucket name: 3-63 chars of [a-z0-9.-_], starting
 * and ending alphanumeric (a little looser than AWS: some S3-compatible
 * stores allow '_'). */
bool obj_bucket_name_valid(const char *name);

struct obj_endpoint {
	bool https;
	char host[256];     /* host name or address, no brackets */
	unsigned port;      /* 0: the scheme's default */
};
/* Parses http(s)://HOST[:PORT][/] (no path). */
int obj_endpoint_parse(const char *url, struct obj_endpoint *out, char *msg,
		       size_t msg_len);

/* Sets e->message (printf-style) and status; keeps other fields. */
void obj_err_set(struct obj_error *e, obj_status st, const char *key,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- credentials and profile settings (creds.c) ---- */

struct obj_creds {
	char access_key[128];
	char secret_key[128];
	char session_token[2048];
	char source[256];   /* where they came from, for messages */
};
struct obj_profile {
	char region[64];
	char endpoint_url[256];
	int path_style;     /* -1 unset */
};
/* Loads credentials the AWS way: environment, then the profile in the
 * shared credentials file, then the config file.  Also reads region,
 * endpoint_url and s3 addressing_style from the config file. */
obj_status obj_creds_load(const char *profile, struct obj_creds *c,
			  struct obj_profile *p, struct obj_error *err);
/* One INI lookup: [section] key from a file (aws style, '#'/';' comments,
 * nested "s3 =" blocks flattened as "s3.key").  Returns 1 found, 0 not
 * found, -errno when the file cannot be read.  For tests too. */
int obj_ini_get(const char *file, const char *section, const char *key,
		char *out, size_t out_len);

/* ---- backends ---- */

struct obj_backend {
	const char *name;
	obj_status (*open)(struct obj_store *st, const struct obj_url *u,
			   const struct obj_config *cfg, struct obj_error *err);
	void (*close)(struct obj_store *st);
	obj_status (*check_bucket)(struct obj_store *st, struct obj_error *err);
	/* A key the store keeps for itself (NULL: none). */
	bool (*reserved)(const char *key);
	/* Called before each request and after a failed one (NULL: nothing
	 * to do); true: the bucket itself is gone. */
	bool (*revalidate)(struct obj_store *st);
	obj_status (*head)(struct obj_store *st, const char *key,
			   struct obj_meta *out, struct obj_error *err);
	/* Exactly one of buf / fd is used. */
	obj_status (*get)(struct obj_store *st, const char *key, uint64_t off,
			  uint64_t len, void *buf, int fd, off_t fd_off,
			  uint64_t *got, struct obj_error *err);
	obj_status (*put)(struct obj_store *st, const char *key,
			  const void *buf, int fd, uint64_t len,
			  const struct obj_kv *meta, size_t nmeta,
			  char *etag_out, struct obj_error *err);
	obj_status (*mpu_create)(struct obj_store *st, const char *key,
				 const struct obj_kv *meta, size_t nmeta,
				 char *upload_id, struct obj_error *err);
	obj_status (*mpu_part)(struct obj_store *st, const char *key,
			       const char *upload_id, unsigned number,
			       const void *buf, int fd, off_t fd_off,
			       size_t len, char *etag_out,
			       struct obj_error *err);
	obj_status (*mpu_complete)(struct obj_store *st, const char *key,
				   const char *upload_id,
				   const struct obj_part *parts, size_t n,
				   char *etag_out, struct obj_error *err);
	obj_status (*mpu_abort)(struct obj_store *st, const char *key,
				const char *upload_id, struct obj_error *err);
	obj_status (*list)(struct obj_store *st, const char *prefix,
			   const char *delimiter, const char *token,
			   unsigned max_keys, struct obj_list_page *page,
			   struct obj_error *err);
	obj_status (*del)(struct obj_store *st, const char *key,
			  struct obj_error *err);
	/* keys are full keys (prefix applied); at most 1000. */
	obj_status (*del_many)(struct obj_store *st, const char *const *keys,
			       size_t n, size_t *failed,
			       struct obj_error *err);
	/* content_type: the copy's, with meta (NULL: the store's
	 * default) */
	obj_status (*copy)(struct obj_store *st, const char *src,
			   const char *dst, const struct obj_kv *meta,
			   size_t nmeta, const char *content_type,
			   char *etag_out, struct obj_error *err);
	bool split_ranges;  /* obj_get_fd splits large ranges into parallel parts */
};

extern const struct obj_backend obj_s3_backend;
extern const struct obj_backend obj_posix_backend;

struct obj_store {
	const struct obj_backend *be;
	struct obj_config cfg;    /* defaults applied; strings not kept */
	char *prefix;             /* "" or "PREFIX/"; prepended to keys */
	char desc[512];
	void *priv;               /* the backend's own state */
	atomic_uint_fast64_t n_requests, n_retries, n_errors, n_gets;
	atomic_uint_fast64_t n_bytes_in, n_bytes_out;
	atomic_uint_fast64_t n_err_by[OBJ_ERR_OTHER + 1];
	atomic_uint_fast64_t n_by[OBJ_METHODS][OBJ_CLASSES];
	struct util_hist lat[OBJ_METHODS], ttfb[OBJ_METHODS];
};
/* Counts one finished HTTP attempt (s3_engine.c). */
void obj_note_attempt(struct obj_store *st, const char *method,
		      long http_status, bool transport_fault,
		      uint64_t total_us, uint64_t first_byte_us);

/* Full key = prefix + key; NULL (and err set) if too long. */
char *obj_full_key(struct obj_store *st, const char *key,
		   struct obj_error *err);


#endif /* FMFS_OBJSTORE_INT_H */
