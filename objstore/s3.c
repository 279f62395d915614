/* SPDX-License-Identifier: MIT */
/*
 * s3.c - the S3 backend: turns each objstore operation into one signed
 * HTTP request (path-style or virtual-hosted, Signature V4 from sigv4.c)
 * and runs it on the engine (s3_engine.c), which retries.  Bodies we send
 * from files or large buffers go as UNSIGNED-PAYLOAD so that a 64 MiB
 * part is not hashed twice; small XML bodies are hashed and carry
 * Content-MD5 where S3 demands it.
 */
#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "s3_int.h"
#include "sigv4.h"

#define EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static struct s3_store *S3(struct obj_store *st)
{
	return st->priv;
}

/* ---- building and signing requests ---- */

static int req_init(struct s3_req *r, struct s3_store *s3, const char *method,
		    const char *key, const char *query)
{
	char enc[3 * OBJ_KEY_MAX + 1];
	size_t bl = s3->path_style ? strlen(s3->bucket) + 1 : 0;
	int n;

	memset(r, 0, sizeof(*r));
	r->s3 = s3;
	r->method = method;
	r->key = key;
	r->up_fd = r->dn_fd = -1;
	n = sigv4_uri_encode(key, strlen(key), 1, enc, sizeof(enc));
	if (n < 0)
		return -ENAMETOOLONG;
	r->path = malloc(bl + (size_t)n + 2);
	if (!r->path)
		return -ENOMEM;
	if (s3->path_style)
		sprintf(r->path, "/%s/%s", s3->bucket, enc);
	else
		sprintf(r->path, "/%s", enc);
	if (query && !(r->query = strdup(query)))
		return -ENOMEM;
	return 0;
}

static int req_header(struct s3_req *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int req_header(struct s3_req *r, const char *fmt, ...)
{
	va_list ap;
	char *h;
	int n;

	if (r->nextra >= sizeof(r->extra_headers) / sizeof(r->extra_headers[0]))
		return -E2BIG;
	va_start(ap, fmt);
	n = vasprintf(&h, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	r->extra_headers[r->nextra++] = h;
	return 0;
}

static int req_meta(struct s3_req *r, const struct obj_kv *meta, size_t n,
		    struct obj_error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (!obj_meta_name_valid(meta[i].name) ||
		    strpbrk(meta[i].value, "\r\n")) {
			obj_err_set(err, OBJ_ERR_INVALID, r->key,
				    "metadata '%s' is not a valid name "
				    "[a-z0-9-_] or its value has a newline",
				    meta[i].name);
			return -EINVAL;
		}
		if (req_header(r, "x-amz-meta-%s: %s", meta[i].name,
			       meta[i].value))
			return -ENOMEM;
	}
	return 0;
}

int s3_sign(struct s3_store *s3, struct s3_req *r, void **hdr_list,
	    char *url, size_t url_len)
{
	struct sigv4_header hdrs[32];
	char names[32][64];
	const char *payload;
	char date[17], auth[SIGV4_AUTH_MAX], sha[65];
	struct sigv4_creds cr = {
		s3->creds.access_key, s3->creds.secret_key,
		s3->creds.session_token[0] ? s3->creds.session_token : NULL,
	};
	struct curl_slist *l = NULL;
	size_t nh = 0;
	char line[SIGV4_AUTH_MAX + 32];
	int n;

	if (!r->has_body)
		payload = EMPTY_SHA256;
	else if (r->up_buf && r->up_len <= 64 * 1024) {
		sigv4_sha256_hex(r->up_buf, (size_t)r->up_len, sha);
		payload = sha;
	} else {
		payload = "UNSIGNED-PAYLOAD";
	}
	sigv4_amz_date(time(NULL), date);
	hdrs[nh++] = (struct sigv4_header){ "host", s3->host_hdr };
	hdrs[nh++] = (struct sigv4_header){ "x-amz-content-sha256", payload };
	hdrs[nh++] = (struct sigv4_header){ "x-amz-date", date };
	if (cr.session_token)
		hdrs[nh++] = (struct sigv4_header){ "x-amz-security-token",
						    cr.session_token };
	for (unsigned i = 0; i < r->nextra && nh < 32; i++) {
		const char *h = r->extra_headers[i], *c = strchr(h, ':');
		size_t k = c ? (size_t)(c - h) : sizeof(names[0]);

		if (k >= sizeof(names[0]))
			return -EINVAL;
		memcpy(names[nh], h, k);
		names[nh][k] = '\0';
		hdrs[nh].name = names[nh];
		hdrs[nh].value = c + 1 + (c[1] == ' ');
		nh++;
	}
	if (sigv4_sign(&(struct sigv4_request){ r->method, r->path, r->query,
						hdrs, nh, payload },
		       s3->region, "s3", date, &cr, auth, sizeof(auth),
		       NULL, 0, NULL, 0))
		return -EINVAL;
	n = snprintf(url, url_len, "%s%s%s%s", s3->base_url, r->path,
		     r->query ? "?" : "", r->query ? r->query : "");
	if (n < 0 || (size_t)n >= url_len)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < nh; i++) {
		snprintf(line, sizeof(line), "%s: %s", hdrs[i].name,
			 hdrs[i].value);
		l = curl_slist_append(l, line);
	}
	snprintf(line, sizeof(line), "Authorization: %s", auth);
	l = curl_slist_append(l, line);
	/* No 100-continue round trip; no default content type from curl. */
	l = curl_slist_append(l, "Expect:");
	if (r->has_body)
		l = curl_slist_append(l, "Content-Type:");
	if (!l)
		return -ENOMEM;
	*hdr_list = l;
	return 0;
}

/* ---- small helpers ---- */

static int64_t parse_http_date(const char *s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (!*s || !strptime(s, "%a, %d %b %Y %H:%M:%S", &tm))
		return 0;
	return (int64_t)timegm(&tm);
}

static void take_meta(struct s3_req *r, struct obj_meta *m)
{
	m->user = r->meta;
	m->nuser = r->nmeta;
	r->meta = NULL;
	r->nmeta = 0;
}

static obj_status run(struct s3_store *s3, struct s3_req *r,
		      struct obj_error *err)
{
	return s3_engine_run(s3->eng, r, err);
}

#define SETUP(r, s3, method, key, query, err)                           \
	do {                                                            \
		if (req_init((r), (s3), (method), (key), (query))) {    \
			s3_req_release(r);                              \
			obj_err_set((err), OBJ_ERR_INVALID, (key),      \
				    "key too long or out of memory");   \
			return OBJ_ERR_INVALID;                         \
		}                                                       \
	} while (0)

static obj_status done(struct s3_req *r, obj_status rc)
{
	s3_req_release(r);
	return rc;
}

/* ---- operations ---- */

static obj_status s3_get(struct obj_store *st, const char *key, uint64_t off,
			 uint64_t len, void *buf, int fd, off_t fd_off,
			 uint64_t *got, struct obj_error *err);

static obj_status s3_head(struct obj_store *st, const char *key,
			  struct obj_meta *out, struct obj_error *err)
{
	struct s3_req r;
	obj_status rc;

	SETUP(&r, S3(st), "HEAD", key, NULL, err);
	rc = run(S3(st), &r, err);
	if (rc == OBJ_ERR_NOT_FOUND &&
	    (!err->code[0] || !strcmp(err->code, "NotFound"))) {
		/* A HEAD reply has no body to name the code. */
		snprintf(err->code, sizeof(err->code), "NoSuchKey");
		snprintf(err->message, sizeof(err->message),
			 "no such key in this bucket");
	}
	if ((rc == OBJ_ERR_DENIED || rc == OBJ_ERR_OTHER) && !r.xerr.code[0]) {
		/* A HEAD reply has no body to say why; a 1-byte GET does. */
		char byte;
		uint64_t got;
		struct obj_error e2 = {0};

		s3_req_release(&r);
		if (s3_get(st, key, 0, 1, &byte, -1, 0, &got, &e2) != OBJ_OK &&
		    e2.code[0]) {
			e2.attempts += err->attempts;
			*err = e2;
			return e2.status;
		}
		return rc;
	}
	if (rc == OBJ_OK) {
		out->size_bytes = r.content_length;
		out->mtime_s = parse_http_date(r.last_modified);
		snprintf(out->etag, sizeof(out->etag), "%s", r.etag);
		snprintf(out->content_type, sizeof(out->content_type), "%s",
			 r.content_type);
		take_meta(&r, out);
	}
	return done(&r, rc);
}

static obj_status s3_get(struct obj_store *st, const char *key, uint64_t off,
			 uint64_t len, void *buf, int fd, off_t fd_off,
			 uint64_t *got, struct obj_error *err)
{
	struct s3_req r;
	obj_status rc;

	*got = 0;
	if (len == 0) {
		struct obj_meta m;

		rc = s3_head(st, key, &m, err);
		if (rc == OBJ_OK)
			obj_meta_release(&m);
		return rc;
	}
	SETUP(&r, S3(st), "GET", key, NULL, err);
	req_header(&r, "range: bytes=%llu-%llu", (unsigned long long)off,
		   (unsigned long long)(off + len - 1));
	r.dn_buf = buf;
	r.dn_cap = buf ? (size_t)len : 0;
	r.dn_fd = fd;
	r.dn_off = fd_off;
	rc = run(S3(st), &r, err);
	if (rc == OBJ_ERR_RANGE) {
		/* Reading at or past the end: zero bytes, as read(2) does. */
		memset(err, 0, sizeof(*err));
		rc = OBJ_OK;
	}
	*got = r.got;
	return done(&r, rc);
}

static obj_status s3_put(struct obj_store *st, const char *key,
			 const void *buf, int fd, uint64_t len,
			 const struct obj_kv *meta, size_t nmeta,
			 char *etag_out, struct obj_error *err)
{
	struct s3_req r;
	obj_status rc;

	SETUP(&r, S3(st), "PUT", key, NULL, err);
	if (req_meta(&r, meta, nmeta, err))
		return done(&r, OBJ_ERR_INVALID);
	r.has_body = true;
	r.up_buf = buf;
	r.up_fd = fd;
	r.up_len = len;
	rc = run(S3(st), &r, err);
	if (rc == OBJ_OK && etag_out)
		snprintf(etag_out, 80, "%s", r.etag);
	return done(&r, rc);
}

/* The ETag element of an XML reply, quotes removed, into out[80]. */
static void xml_etag(const struct s3_buf *xml, char *out)
{
	char etag[80] = "";
	size_t l;

	s3_xml_find(xml->data, xml->len, "ETag", etag, sizeof(etag));
	l = strlen(etag);
	if (l >= 2 && etag[0] == '"' && etag[l - 1] == '"') {
		etag[l - 1] = '\0';
		memmove(etag, etag + 1, l - 1);
	}
	snprintf(out, 80, "%s", etag);
}

/* Runs r with its 2xx XML reply in *xml (bounded). */
static obj_status run_xml(struct s3_store *s3, struct s3_req *r,
			  struct s3_buf *xml, struct obj_error *err)
{
	xml->max = S3_XML_MAX_BYTES;
	r->dn_xml = xml;
	return run(s3, r, err);
}

static obj_status s3_mpu_create(struct obj_store *st, const char *key,
				const struct obj_kv *meta, size_t nmeta,
				char *upload_id, struct obj_error *err)
{
	struct s3_buf xml = {0};
	struct s3_req r;
	obj_status rc;

	SETUP(&r, S3(st), "POST", key, "uploads", err);
	if (req_meta(&r, meta, nmeta, err))
		return done(&r, OBJ_ERR_INVALID);
	rc = run_xml(S3(st), &r, &xml, err);
	if (rc == OBJ_OK && s3_xml_find(xml.data, xml.len, "UploadId",
					upload_id, OBJ_UPLOAD_ID_MAX) != 1) {
		obj_err_set(err, OBJ_ERR_PROTOCOL, key,
			    "CreateMultipartUpload reply has no UploadId");
		rc = OBJ_ERR_PROTOCOL;
	}
	s3_buf_free(&xml);
	return done(&r, rc);
}

static char *upload_query(const char *upload_id, unsigned number)
{
	char enc[3 * OBJ_UPLOAD_ID_MAX + 1], *q;
	int n = sigv4_uri_encode(upload_id, strlen(upload_id), 0, enc,
				 sizeof(enc));

	if (n < 0)
		return NULL;
	if (number)
		n = asprintf(&q, "partNumber=%u&uploadId=%s", number, enc);
	else
		n = asprintf(&q, "uploadId=%s", enc);
	return n < 0 ? NULL : q;
}

static obj_status s3_mpu_part(struct obj_store *st, const char *key,
			      const char *upload_id, unsigned number,
			      const void *buf, int fd, off_t fd_off,
			      size_t len, char *etag_out,
			      struct obj_error *err)
{
	char *q = upload_query(upload_id, number);
	struct s3_req r;
	obj_status rc;

	if (!q) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "upload id too long");
		return OBJ_ERR_INVALID;
	}
	SETUP(&r, S3(st), "PUT", key, q, err);
	free(q);
	r.has_body = true;
	r.up_buf = buf;
	r.up_fd = fd;
	r.up_off = fd_off;
	r.up_len = len;
	rc = run(S3(st), &r, err);
	if (rc == OBJ_OK) {
		if (!r.etag[0]) {
			obj_err_set(err, OBJ_ERR_PROTOCOL, key,
				    "UploadPart %u reply has no ETag", number);
			rc = OBJ_ERR_PROTOCOL;
		} else {
			snprintf(etag_out, 80, "%s", r.etag);
		}
	}
	return done(&r, rc);
}

static obj_status s3_mpu_complete(struct obj_store *st, const char *key,
				  const char *upload_id,
				  const struct obj_part *parts, size_t n,
				  char *etag_out, struct obj_error *err)
{
	struct s3_buf body = { .max = 200u * OBJ_PARTS_MAX + 256 };
	struct s3_buf xml = {0};
	char *q = upload_query(upload_id, 0), line[200];
	struct s3_req r;
	obj_status rc;

	if (!q) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "upload id too long");
		return OBJ_ERR_INVALID;
	}
	SETUP(&r, S3(st), "POST", key, q, err);
	free(q);
	s3_buf_append(&body, "<CompleteMultipartUpload>", 25);
	for (size_t i = 0; i < n; i++) {
		int l = snprintf(line, sizeof(line), "<Part><PartNumber>%u"
				 "</PartNumber><ETag>\"%s\"</ETag></Part>",
				 parts[i].number, parts[i].etag);
		if (s3_buf_append(&body, line, (size_t)l)) {
			s3_buf_free(&body);
			obj_err_set(err, OBJ_ERR_NOMEM, key, "out of memory");
			return done(&r, OBJ_ERR_NOMEM);
		}
	}
	s3_buf_append(&body, "</CompleteMultipartUpload>", 26);
	r.has_body = true;
	r.up_buf = body.data;
	r.up_len = body.len;
	rc = run_xml(S3(st), &r, &xml, err);
	if (rc == OBJ_OK && etag_out) {
		xml_etag(&xml, etag_out);
	}
	s3_buf_free(&xml);
	s3_buf_free(&body);
	return done(&r, rc);
}

static obj_status s3_mpu_abort(struct obj_store *st, const char *key,
			       const char *upload_id, struct obj_error *err)
{
	char *q = upload_query(upload_id, 0);
	struct s3_req r;
	obj_status rc;

	if (!q) {
		obj_err_set(err, OBJ_ERR_INVALID, key, "upload id too long");
		return OBJ_ERR_INVALID;
	}
	SETUP(&r, S3(st), "DELETE", key, q, err);
	free(q);
	rc = run(S3(st), &r, err);
	return done(&r, rc);
}

static int query_add(char *q, size_t ql, const char *name, const char *val)
{
	char enc[3 * OBJ_KEY_MAX + 1];
	size_t at = strlen(q);
	int n = sigv4_uri_encode(val, strlen(val), 0, enc, sizeof(enc));

	if (n < 0)
		return -ENAMETOOLONG;
	n = snprintf(q + at, ql - at, "%s%s=%s", at ? "&" : "", name, enc);
	return n < 0 || (size_t)n >= ql - at ? -ENAMETOOLONG : 0;
}

static obj_status s3_list(struct obj_store *st, const char *prefix,
			  const char *delimiter, const char *token,
			  unsigned max_keys, struct obj_list_page *page,
			  struct obj_error *err)
{
	struct s3_store *s3 = S3(st);
	char q[8192] = "list-type=2&encoding-type=url", num[16], msg[200];
	struct s3_buf xml = {0};
	struct s3_req r;
	obj_status rc;

	memset(page, 0, sizeof(*page));
	snprintf(num, sizeof(num), "%u", max_keys ? max_keys : 1000);
	if ((*prefix && query_add(q, sizeof(q), "prefix", prefix)) ||
	    (delimiter && query_add(q, sizeof(q), "delimiter", delimiter)) ||
	    (token && query_add(q, sizeof(q), "continuation-token", token)) ||
	    query_add(q, sizeof(q), "max-keys", num)) {
		obj_err_set(err, OBJ_ERR_INVALID, prefix,
			    "listing arguments too long");
		return OBJ_ERR_INVALID;
	}
	SETUP(&r, s3, "GET", "", q, err);
	r.key = prefix;
	rc = run_xml(s3, &r, &xml, err);
	if (rc == OBJ_OK && s3_xml_parse_list(xml.data, xml.len,
					      strlen(st->prefix), page, msg,
					      sizeof(msg))) {
		obj_err_set(err, OBJ_ERR_PROTOCOL, prefix,
			    "bad ListObjectsV2 reply: %s", msg);
		rc = OBJ_ERR_PROTOCOL;
	}
	s3_buf_free(&xml);
	return done(&r, rc);
}

static obj_status s3_check_bucket(struct obj_store *st, struct obj_error *err)
{
	struct obj_list_page page;
	obj_status rc;

	rc = s3_list(st, st->prefix, NULL, NULL, 1, &page, err);
	if (rc == OBJ_OK)
		obj_list_page_release(&page);
	else if (rc == OBJ_ERR_NOT_FOUND && !err->code[0])
		rc = err->status = OBJ_ERR_NO_BUCKET;
	if (rc != OBJ_OK && !err->key[0])
		snprintf(err->key, sizeof(err->key), "s3://%s",
			 S3(st)->bucket);
	if (rc == OBJ_ERR_NO_BUCKET)
		snprintf(err->key, sizeof(err->key), "s3://%s",
			 S3(st)->bucket);
	return rc;
}

static obj_status s3_del(struct obj_store *st, const char *key,
			 struct obj_error *err)
{
	struct s3_req r;
	obj_status rc;

	SETUP(&r, S3(st), "DELETE", key, NULL, err);
	rc = run(S3(st), &r, err);
	if (rc == OBJ_ERR_NOT_FOUND && strcmp(err->code, "NoSuchBucket")) {
		memset(err, 0, sizeof(*err));
		rc = OBJ_OK;
	}
	return done(&r, rc);
}

static int xml_escape_append(struct s3_buf *b, const char *s)
{
	for (; *s; s++) {
		const char *rep = NULL;
		char tmp[8];

		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&apos;"; break;
		default:
			if ((unsigned char)*s < 0x20) {
				snprintf(tmp, sizeof(tmp), "&#%d;", *s);
				rep = tmp;
			}
		}
		if (rep ? s3_buf_append(b, rep, strlen(rep)) :
			  s3_buf_append(b, s, 1))
			return -ENOMEM;
	}
	return 0;
}

static void md5_base64(const void *p, size_t n, char out[32])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int ml = 0;

	EVP_Digest(p, n, md, &ml, EVP_md5(), NULL);
	EVP_EncodeBlock((unsigned char *)out, md, (int)ml);
}

static obj_status s3_del_many(struct obj_store *st, const char *const *keys,
			      size_t n, size_t *failed, struct obj_error *err)
{
	struct s3_buf body = { .max = 1000u * (6 * OBJ_KEY_MAX + 64) + 128 };
	struct s3_buf xml = {0};
	struct s3_xml_error first = {{0}, {0}};
	size_t deleted = 0, errors = 0;
	char md5[32];
	struct s3_req r;
	obj_status rc;

	*failed = n;
	SETUP(&r, S3(st), "POST", "", "delete", err);
	r.key = n ? keys[0] : "";
	if (s3_buf_append(&body, "<Delete><Quiet>true</Quiet>", 27))
		goto nomem;
	for (size_t i = 0; i < n; i++)
		if (s3_buf_append(&body, "<Object><Key>", 13) ||
		    xml_escape_append(&body, keys[i]) ||
		    s3_buf_append(&body, "</Key></Object>", 15))
			goto nomem;
	if (s3_buf_append(&body, "</Delete>", 9))
		goto nomem;
	md5_base64(body.data, body.len, md5);
	req_header(&r, "content-md5: %s", md5);
	r.has_body = true;
	r.up_buf = body.data;
	r.up_len = body.len;
	rc = run_xml(S3(st), &r, &xml, err);
	if (rc == OBJ_OK) {
		if (s3_xml_parse_delete(xml.data, xml.len, &deleted, &errors,
					&first) < 0) {
			obj_err_set(err, OBJ_ERR_PROTOCOL, r.key,
				    "bad DeleteObjects reply");
			rc = OBJ_ERR_PROTOCOL;
		} else {
			*failed = errors;
			if (errors) {
				rc = OBJ_ERR_OTHER;
				obj_err_set(err, rc, NULL, "%zu of %zu keys "
					    "not deleted: %s %s", errors, n,
					    first.code, first.message);
				snprintf(err->code, sizeof(err->code), "%s",
					 first.code);
			}
		}
	}
	s3_buf_free(&xml);
	s3_buf_free(&body);
	return done(&r, rc);
nomem:
	s3_buf_free(&body);
	obj_err_set(err, OBJ_ERR_NOMEM, NULL, "out of memory");
	return done(&r, OBJ_ERR_NOMEM);
}

static obj_status s3_copy(struct obj_store *st, const char *src,
			  const char *dst, const struct obj_kv *meta,
			  size_t nmeta, const char *content_type,
			  char *etag_out, struct obj_error *err)
{
	struct s3_store *s3 = S3(st);
	char enc[3 * OBJ_KEY_MAX + 1];
	struct s3_buf xml = {0};
	struct s3_req r;
	obj_status rc;

	if (sigv4_uri_encode(src, strlen(src), 1, enc, sizeof(enc)) < 0) {
		obj_err_set(err, OBJ_ERR_INVALID, src, "key too long");
		return OBJ_ERR_INVALID;
	}
	SETUP(&r, s3, "PUT", dst, NULL, err);
	req_header(&r, "x-amz-copy-source: /%s/%s", s3->bucket, enc);
	if (meta) {
		req_header(&r, "x-amz-metadata-directive: REPLACE");
		if (content_type && *content_type)
			req_header(&r, "content-type: %s", content_type);
		if (req_meta(&r, meta, nmeta, err))
			return done(&r, OBJ_ERR_INVALID);
	}
	rc = run_xml(s3, &r, &xml, err);
	if (rc == OBJ_ERR_NOT_FOUND)
		snprintf(err->key, sizeof(err->key), "%s", src);
	if (rc == OBJ_OK && etag_out) {
		xml_etag(&xml, etag_out);
	}
	s3_buf_free(&xml);
	return done(&r, rc);
}

/* ---- open / close ---- */

static obj_status endpoint_setup(struct s3_store *s3, const char *endpoint,
				 struct obj_error *err)
{
	struct obj_endpoint ep;
	char msg[256], hostport[300];
	bool custom = endpoint != NULL;

	if (!endpoint) {
		if (!strcmp(s3->region, "us-east-1"))
			snprintf(msg, sizeof(msg), "https://s3.amazonaws.com");
		else
			snprintf(msg, sizeof(msg), "https://s3.%s.amazonaws.com",
				 s3->region);
		endpoint = msg;
	}
	if (obj_endpoint_parse(endpoint, &ep, msg, sizeof(msg))) {
		obj_err_set(err, OBJ_ERR_INVALID, NULL, "%s", msg);
		return OBJ_ERR_INVALID;
	}
	s3->https = ep.https;
	if (s3->path_style < 0)
		s3->path_style = custom || strchr(s3->bucket, '.');
	if (strchr(ep.host, ':'))
		snprintf(hostport, sizeof(hostport), "[%s]", ep.host);
	else
		snprintf(hostport, sizeof(hostport), "%s", ep.host);
	if (ep.port && ep.port != (ep.https ? 443u : 80u)) {
		size_t l = strlen(hostport);

		snprintf(hostport + l, sizeof(hostport) - l, ":%u", ep.port);
	}
	if (s3->path_style)
		snprintf(s3->host_hdr, sizeof(s3->host_hdr), "%s", hostport);
	else
		snprintf(s3->host_hdr, sizeof(s3->host_hdr), "%s.%s",
			 s3->bucket, hostport);
	snprintf(s3->base_url, sizeof(s3->base_url), "%s://%s",
		 ep.https ? "https" : "http", s3->host_hdr);
	return OBJ_OK;
}

static obj_status s3_open(struct obj_store *st, const struct obj_url *u,
			  const struct obj_config *cfg, struct obj_error *err)
{
	struct s3_store *s3 = calloc(1, sizeof(*s3));
	struct obj_profile prof;
	const char *endpoint, *region, *ca;
	size_t kl = strlen(u->key);
	obj_status rc;

	if (!s3) {
		obj_err_set(err, OBJ_ERR_NOMEM, NULL, "out of memory");
		return OBJ_ERR_NOMEM;
	}
	pthread_once(&curl_once, curl_init_once);
	s3->st = st;
	st->priv = s3;
	s3->verbose = cfg->verbose;
	s3->bucket = strdup(u->bucket);
	/* The URL's key part is the store prefix: "a/b" and "a/b/" both
	 * mean everything under a/b/. */
	st->prefix = malloc(kl + 2);
	if (!s3->bucket || !st->prefix) {
		rc = OBJ_ERR_NOMEM;
		obj_err_set(err, rc, NULL, "out of memory");
		goto out_free;
	}
	strcpy(st->prefix, u->key);
	if (kl && u->key[kl - 1] != '/')
		strcat(st->prefix, "/");
	rc = obj_creds_load(cfg->profile, &s3->creds, &prof, err);
	if (rc != OBJ_OK)
		goto out_free;
	region = cfg->region ? cfg->region : getenv("AWS_REGION");
	if (!region || !*region)
		region = getenv("AWS_DEFAULT_REGION");
	if (!region || !*region)
		region = prof.region[0] ? prof.region : "us-east-1";
	snprintf(s3->region, sizeof(s3->region), "%s", region);
	endpoint = cfg->endpoint ? cfg->endpoint : getenv("AWS_ENDPOINT_URL");
	if (!endpoint || !*endpoint)
		endpoint = prof.endpoint_url[0] ? prof.endpoint_url : NULL;
	s3->path_style = cfg->path_style >= 0 ? cfg->path_style :
			 prof.path_style;
	rc = endpoint_setup(s3, endpoint, err);
	if (rc != OBJ_OK)
		goto out_free;
	ca = getenv("AWS_CA_BUNDLE");
	s3->ca_bundle = ca && *ca ? ca : NULL;
	if (s3_engine_start(s3, &s3->eng)) {
		rc = OBJ_ERR_NOMEM;
		obj_err_set(err, rc, NULL, "cannot start the network engine");
		goto out_free;
	}
	snprintf(st->desc, sizeof(st->desc), "s3://%.63s/%.160s (%.200s, %s, region %.32s)",
		 s3->bucket, st->prefix, s3->base_url,
		 s3->path_style ? "path-style" : "virtual-hosted", s3->region);
	return OBJ_OK;
out_free:
	free(s3->bucket);
	free(s3);
	st->priv = NULL;
	return rc;
}

static void s3_close(struct obj_store *st)
{
	struct s3_store *s3 = S3(st);

	s3_engine_stop(s3->eng);
	free(s3->bucket);
	explicit_bzero(&s3->creds, sizeof(s3->creds));
	free(s3);
}

const struct obj_backend obj_s3_backend = {
	.name = "s3",
	.open = s3_open,
	.close = s3_close,
	.check_bucket = s3_check_bucket,
	.head = s3_head,
	.get = s3_get,
	.put = s3_put,
	.mpu_create = s3_mpu_create,
	.mpu_part = s3_mpu_part,
	.mpu_complete = s3_mpu_complete,
	.mpu_abort = s3_mpu_abort,
	.list = s3_list,
	.del = s3_del,
	.del_many = s3_del_many,
	.copy = s3_copy,
	.split_ranges = true,
};
