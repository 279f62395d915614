/* SPDX-License-Identifier: MIT */
/*
 * objstore.h - the one interface fmfs uses to talk to object storage.
 *
 * A store is opened from a URL: s3://BUCKET[/PREFIX] (an S3-compatible
 * server, Signature V4, libcurl multi underneath) or file:///DIR (a local
 * directory acting as a bucket; the zero-setup default).  Keys given to the
 * operations are relative to PREFIX; keys returned by listings have PREFIX
 * stripped.
 *
 * Errors: every operation returns an obj_status (OBJ_OK == 0) and, when
 * given a non-NULL struct obj_error, fills it with what a person needs to
 * act: the HTTP status, the S3 error code and message, the key, and whether
 * another try may help.  libcurl codes never leave this module.
 *
 * Threads: a struct obj_store is safe to use from many threads at once.
 * For s3:// all callers share one network engine (one thread driving a
 * libcurl multi handle), so concurrency is bounded by
 * obj_config.max_parallel and connections are reused.
 */
#ifndef FMFS_OBJSTORE_H
#define FMFS_OBJSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum obj_status {
	OBJ_OK = 0,
	OBJ_ERR_INVALID,      /* bad argument, URL or option */
	OBJ_ERR_CREDENTIALS,  /* no credentials, or a credentials file unusable */
	OBJ_ERR_AUTH,         /* server refused the signature or the key id */
	OBJ_ERR_DENIED,       /* authenticated but not allowed (AccessDenied) */
	OBJ_ERR_NO_BUCKET,    /* NoSuchBucket */
	OBJ_ERR_NOT_FOUND,    /* NoSuchKey, 404, or NoSuchUpload */
	OBJ_ERR_PRECONDITION, /* 412 */
	OBJ_ERR_RANGE,        /* 416: range beyond the end of the object */
	OBJ_ERR_CONNECT,      /* could not connect (refused, DNS, TLS) */
	OBJ_ERR_TIMEOUT,      /* no answer within the configured time */
	OBJ_ERR_SERVER,       /* 5xx / SlowDown that outlasted the retries */
	OBJ_ERR_PROTOCOL,     /* reply we could not parse, truncated body */
	OBJ_ERR_IO,           /* local file I/O (file:// or a target fd) */
	OBJ_ERR_NOMEM,
	OBJ_ERR_OTHER,        /* any other 4xx; see http_status and code */
} obj_status;

#define OBJ_KEY_MAX 1024 /* S3's own limit on key length, in bytes */

struct obj_error {
	obj_status status;
	int http_status;      /* 0 when no HTTP reply was received */
	bool retryable;       /* true if trying again later may succeed */
	unsigned attempts;    /* requests sent, retries included */
	bool local;           /* from a file:// store: no server, no
	                       * credentials (the hints say so) */
	char code[64];        /* S3 error code, e.g. "NoSuchKey" */
	char message[256];    /* S3 message or local explanation */
	char key[OBJ_KEY_MAX + 1];
};

/* Short stable name of a status ("not-found", "auth", ...). */
const char *obj_status_name(obj_status st);
/* One line a person can act on: "GET key: 403 SignatureDoesNotMatch: ...
 * (check AWS_SECRET_ACCESS_KEY ...)".  Writes at most len bytes. */
void obj_error_format(const struct obj_error *err, char *buf, size_t len);

struct obj_config {
	const char *url;        /* s3://BUCKET[/PREFIX] or file:///DIR */
	const char *endpoint;   /* http(s)://HOST[:PORT]; NULL: AWS_ENDPOINT_URL,
	                         * the profile's endpoint_url, then AWS */
	const char *region;     /* NULL: AWS_REGION, AWS_DEFAULT_REGION,
	                         * the profile, then us-east-1 */
	const char *profile;    /* NULL: AWS_PROFILE, then "default" */
	int path_style;         /* 1 path-style, 0 virtual-hosted, -1 auto
	                         * (path-style for a custom endpoint) */
	unsigned max_parallel;          /* requests in flight; 0: 16 */
	unsigned connect_timeout_ms;    /* 0: 5000 */
	unsigned idle_timeout_ms;       /* no byte for this long fails; 0: 30000 */
	unsigned retry_max;             /* attempts in all; 0: 5 */
	unsigned retry_total_ms;        /* give up after; 0: 60000 */
	unsigned retry_base_ms;         /* first backoff; 0: 100 */
	size_t part_size_bytes;         /* multipart part size; 0: 8 MiB */
	size_t multipart_threshold_bytes; /* 0: 16 MiB */
	unsigned verbose;               /* 1: log each request to stderr */
	bool read_only;                 /* the caller never writes: a file://
	                                 * store needs no write access (its
	                                 * .fmfs/ is not made, obj_check_bucket
	                                 * does not ask for it) */
};

/* Fills every field with its default (url NULL). */
void obj_config_init(struct obj_config *cfg);

struct obj_store;

/* Opens a store.  Does not contact the server (see obj_check_bucket).
 * On failure *out is NULL and err says why. */
obj_status obj_open(const struct obj_config *cfg, struct obj_store **out,
		    struct obj_error *err);
/* Waits for requests in flight, then frees everything. */
void obj_close(struct obj_store *st);

/* A human-readable description, "s3://bkt/pre (http://127.0.0.1:8000, path-style)". */
const char *obj_describe(const struct obj_store *st);
/* The longest key, in bytes, a caller may pass (keys are relative to the
 * store's prefix): OBJ_KEY_MAX less the prefix.  Longer ones fail with
 * OBJ_ERR_INVALID. */
size_t obj_key_room(const struct obj_store *st);

/* Whether the store keeps key for itself and can never hold an object
 * there (file://: .fmfs and what is under it; S3: none). */
bool obj_key_reserved(const struct obj_store *st, const char *key);
/* Checks the bucket exists and the credentials are accepted (one request). */
obj_status obj_check_bucket(struct obj_store *st, struct obj_error *err);

/* User metadata (x-amz-meta-NAME: VALUE).  Names are lower-case ASCII. */
struct obj_kv {
	char *name;
	char *value;
};
/* Frees the names and values of kv[0..n) and the array itself (NULL is a
 * no-op): for arrays whose strings the holder owns. */
void obj_kv_free(struct obj_kv *kv, size_t n);

struct obj_meta {
	uint64_t size_bytes;
	int64_t mtime_s;        /* Last-Modified, seconds since the epoch */
	char etag[80];          /* as the server sent it, quotes removed */
	char content_type[128];
	struct obj_kv *user;    /* owned; free with obj_meta_release */
	size_t nuser;
};
void obj_meta_release(struct obj_meta *m);

obj_status obj_head(struct obj_store *st, const char *key,
		    struct obj_meta *out, struct obj_error *err);

/* Ranged GET of [off, off+len) into buf.  *got_bytes receives the bytes
 * stored (less than len only at the end of the object).  len 0 reads
 * nothing and is an error only when the key is missing. */
obj_status obj_get(struct obj_store *st, const char *key, uint64_t off,
		   size_t len, void *buf, size_t *got_bytes,
		   struct obj_error *err);

/* Ranged GET of [off, off+len) written with pwrite() to fd at fd_off.
 * len UINT64_MAX means to the end of the object.  Large ranges are split
 * into parts fetched in parallel.  *got_bytes may be NULL. */
obj_status obj_get_fd(struct obj_store *st, const char *key, uint64_t off,
		      uint64_t len, int fd, off_t fd_off, uint64_t *got_bytes,
		      struct obj_error *err);

/* Single PUT of a buffer.  etag_out (80 bytes) may be NULL. */
obj_status obj_put(struct obj_store *st, const char *key, const void *buf,
		   size_t len, const struct obj_kv *meta, size_t nmeta,
		   char *etag_out, struct obj_error *err);

/* PUT of len bytes read with pread() from fd at offset 0: a single PUT
 * below the multipart threshold, otherwise a parallel multipart upload
 * that is aborted if any part fails. */
obj_status obj_put_fd(struct obj_store *st, const char *key, int fd,
		      uint64_t len, const struct obj_kv *meta, size_t nmeta,
		      char *etag_out, struct obj_error *err);

/* Multipart upload, step by step (obj_put_fd uses these).  On S3 an
 * upload neither completed nor aborted stays until a lifecycle rule ends
 * it; on file:// it belongs to the handle that created it and is removed
 * at obj_close (or, after a crash, by the next open of the store). */
#define OBJ_UPLOAD_ID_MAX 256
#define OBJ_PARTS_MAX 10000
struct obj_part {
	unsigned number;        /* 1 .. OBJ_PARTS_MAX */
	char etag[80];
};
obj_status obj_mpu_create(struct obj_store *st, const char *key,
			  const struct obj_kv *meta, size_t nmeta,
			  char upload_id[OBJ_UPLOAD_ID_MAX],
			  struct obj_error *err);
/* Uploads part `number` from fd at [fd_off, fd_off+len). */
obj_status obj_mpu_part_fd(struct obj_store *st, const char *key,
			   const char *upload_id, unsigned number, int fd,
			   off_t fd_off, size_t len, char etag_out[80],
			   struct obj_error *err);
obj_status obj_mpu_part(struct obj_store *st, const char *key,
			const char *upload_id, unsigned number,
			const void *buf, size_t len, char etag_out[80],
			struct obj_error *err);
/* parts must be sorted by number. */
obj_status obj_mpu_complete(struct obj_store *st, const char *key,
			    const char *upload_id, const struct obj_part *parts,
			    size_t nparts, char *etag_out,
			    struct obj_error *err);
obj_status obj_mpu_abort(struct obj_store *st, const char *key,
			 const char *upload_id, struct obj_error *err);

/* One page of ListObjectsV2. */
struct obj_entry {
	char *key;              /* relative to the store's prefix */
	uint64_t size_bytes;
	int64_t mtime_s;
	char etag[80];
	bool no_meta;           /* the store knows the object keeps no user
	                         * metadata and no Content-Type, so a HEAD
	                         * would learn nothing (file:// listings say
	                         * so; S3's never do) */
};
struct obj_list_page {
	struct obj_entry *entries;
	size_t nentries;
	char **prefixes;        /* common prefixes, ending in the delimiter */
	size_t nprefixes;
	char *next_token;       /* NULL when this was the last page */
};
/* Lists keys starting with prefix (relative; "" for all).  delimiter may
 * be NULL; token is NULL for the first page, else the previous page's
 * next_token.  max_keys 0 means the server's default (1000). */
obj_status obj_list(struct obj_store *st, const char *prefix,
		    const char *delimiter, const char *token,
		    unsigned max_keys, struct obj_list_page *page,
		    struct obj_error *err);
void obj_list_page_release(struct obj_list_page *page);

/* DELETE of a missing key succeeds (as on S3). */
obj_status obj_delete(struct obj_store *st, const char *key,
		      struct obj_error *err);
/* Deletes up to 1000 keys per request, as many requests as needed.
 * Returns the first failure; *failed (may be NULL) counts keys not deleted. */
obj_status obj_delete_many(struct obj_store *st, const char *const *keys,
			   size_t nkeys, size_t *failed,
			   struct obj_error *err);

/* Metadata names allowed in x-amz-meta-*: [a-z0-9-_], 1..128 chars. */
bool obj_meta_name_valid(const char *name);

/* Server-side copy.  meta NULL keeps the source's user metadata; otherwise
 * it replaces it (nmeta may be 0 to clear it). */
obj_status obj_copy(struct obj_store *st, const char *src_key,
		    const char *dst_key, const struct obj_kv *meta,
		    size_t nmeta, char *etag_out, struct obj_error *err);
/* obj_copy, and with meta the copy's Content-Type (NULL or "": the
 * store's default; a file:// store keeps none). */
obj_status obj_copy_typed(struct obj_store *st, const char *src_key,
			  const char *dst_key, const struct obj_kv *meta,
			  size_t nmeta, const char *content_type,
			  char *etag_out, struct obj_error *err);

/* Counters since open, for `fmfs status` and benchmarks. */
struct obj_stats {
	uint64_t requests;
	uint64_t get_requests;  /* ranged GETs of object bytes */
	uint64_t retries;
	uint64_t errors;
	uint64_t bytes_in;
	uint64_t bytes_out;
	uint64_t errors_by_status[OBJ_ERR_OTHER + 1]; /* index: obj_status */
};
void obj_get_stats(struct obj_store *st, struct obj_stats *out);

/* Per HTTP attempt of the S3 engine (the file:// store counts only the
 * totals above): answers by method and status class, and histograms of
 * the whole request's time and of the time to its first byte, for the
 * metrics endpoint. */
enum { OBJ_M_GET, OBJ_M_HEAD, OBJ_M_PUT, OBJ_M_POST, OBJ_M_DELETE,
       OBJ_M_OTHER, OBJ_METHODS };
enum { OBJ_C_2XX, OBJ_C_3XX, OBJ_C_4XX, OBJ_C_5XX, OBJ_C_ERROR,
       OBJ_CLASSES };   /* OBJ_C_ERROR: no HTTP answer (refused, reset) */
const char *obj_method_name(int method);   /* "GET", ... */
const char *obj_class_name(int cls);       /* "2xx", ..., "error" */
uint64_t obj_requests_by(struct obj_store *st, int method, int cls);
struct util_hist;
const struct util_hist *obj_request_hist(struct obj_store *st, int method,
					 bool first_byte);

#ifdef __cplusplus
}
#endif
#endif /* FMFS_OBJSTORE_H */
