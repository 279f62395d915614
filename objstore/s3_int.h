/* SPDX-License-Identifier: MIT */
/*
 * s3_int.h - shared by the files of the S3 backend: s3.c (operations,
 * signing), s3_engine.c (the libcurl multi engine: one thread, retries,
 * timeouts) and s3_xml.c (expat parsing of S3's XML replies).
 */
#ifndef FMFS_S3_INT_H
#define FMFS_S3_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "objstore_int.h"

/* A growable byte buffer with a hard cap (curl's dynbuf idea). */
struct s3_buf {
	char *data;
	size_t len, cap, max;
};
int s3_buf_append(struct s3_buf *b, const void *p, size_t n);
void s3_buf_free(struct s3_buf *b);

#define S3_XML_MAX_BYTES (16u << 20) /* largest XML reply we accept */
#define S3_ERRBODY_MAX_BYTES (64u << 10)

struct s3_engine;
struct s3_store;

/* Code and message of an S3 <Error> reply. */
struct s3_xml_error {
	char code[64];
	char message[256];
};

/* One HTTP request, retried by the engine until it succeeds or gives up. */
struct s3_req {
	/* set by the caller */
	struct s3_store *s3;
	const char *method;
	const char *key;         /* full key, for messages; may be "" */
	char *path;              /* encoded path, "/bucket/key" or "/key" */
	char *query;             /* encoded query or NULL */
	char *extra_headers[24]; /* "name: value" lines, signed too */
	unsigned nextra;
	/* body to send: buf or fd (pread from fd_off), len bytes */
	const void *up_buf;
	int up_fd;
	off_t up_off;
	uint64_t up_len;
	bool has_body;
	/* where a 2xx body goes: buffer (cap bytes), fd at dn_off, or xml */
	void *dn_buf;
	size_t dn_cap;
	int dn_fd;
	off_t dn_off;
	struct s3_buf *dn_xml;
	uint64_t expect_len;     /* >0: a 2xx body shorter than this is a fault */

	/* results */
	long http_status;
	uint64_t got;            /* 2xx body bytes stored */
	char etag[80];
	char content_type[128];
	char last_modified[64];
	uint64_t content_length;
	bool have_content_length;
	struct obj_kv *meta;
	size_t nmeta;
	struct s3_buf errbody;      /* start of a non-2xx body */
	struct s3_xml_error xerr;   /* parsed from it, if any */

	/* engine-private */
	void *easy;              /* CURL * */
	void *hdr_list;          /* struct curl_slist * */
	uint64_t sent;           /* upload bytes sent this attempt */
	unsigned attempts;
	uint64_t first_ms, due_ms;
	int fault;               /* last CURLcode, 0 if none */
	char fault_msg[256];
	bool done;
	struct s3_req *next;     /* engine queues */
	pthread_cond_t cond;     /* waits on the engine's lock */
};

struct s3_store {
	struct obj_store *st;
	struct s3_engine *eng;
	char *bucket;
	char base_url[512];      /* scheme://host[:port] */
	char host_hdr[320];      /* Host header value as sent */
	int path_style;          /* 1 path, 0 virtual, -1 undecided */
	bool https;
	char region[64];
	struct obj_creds creds;
	const char *ca_bundle;   /* from AWS_CA_BUNDLE, borrowed from env */
	unsigned verbose;
};

/* Engine: one thread, one libcurl multi handle. */
int s3_engine_start(struct s3_store *s3, struct s3_engine **out);
void s3_engine_stop(struct s3_engine *e);
/* Runs r to completion (retries included) and fills in the results.
 * Returns the final classification; err receives the details. */
obj_status s3_engine_run(struct s3_engine *e, struct s3_req *r,
			 struct obj_error *err);
void s3_req_release(struct s3_req *r);

/* s3.c: builds the signed header list for one attempt. */
int s3_sign(struct s3_store *s3, struct s3_req *r, void **hdr_list,
	    char *url, size_t url_len);

/* s3_redact.c: copies in[0..n) into buf (at most size - 1 bytes, then a
 * NUL) with credential material replaced by "<redacted>": Signature=,
 * X-Amz-Credential= and X-Amz-Security-Token= values, the
 * x-amz-security-token header, an Authorization header of another scheme
 * whole, and the secret key and session token of cr (may be NULL)
 * wherever they appear.  Returns the bytes written. */
size_t s3_redact(const struct obj_creds *cr, const char *in, size_t n,
		 char *buf, size_t size);

/* s3_xml.c */
/* 1 if the body is an <Error> document (parsed into out), else 0. */
int s3_xml_parse_error(const char *xml, size_t len, struct s3_xml_error *out);
int s3_xml_parse_list(const char *xml, size_t len, size_t strip,
		      struct obj_list_page *page, char *msg, size_t ml);
/* Finds the text of the first element named `name` (any depth).  Returns
 * 1 found, 0 not, -1 for XML that does not parse. */
int s3_xml_find(const char *xml, size_t len, const char *name, char *out,
		size_t out_len);
/* Counts <Deleted> and <Error> children of a DeleteResult. */
int s3_xml_parse_delete(const char *xml, size_t len, size_t *deleted,
			size_t *errors, struct s3_xml_error *first);

#endif /* FMFS_S3_INT_H */
