/* SPDX-License-Identifier: MIT */
/*
 * objstore.c - the front of the objstore module: opens a store for a URL,
 * picks the backend (s3.c or posix.c), applies the key prefix, turns
 * errors into lines a person can act on, and builds the parallel
 * operations (ranged GET into a file, multipart PUT from a file) out of
 * the backends' single requests.  Parallelism here is a few threads that
 * each issue one request at a time; for s3:// those requests share the one
 * libcurl multi engine, so connections are reused and bounded there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore_int.h"

static const char *const status_names[] = {
	[OBJ_OK] = "ok",
	[OBJ_ERR_INVALID] = "invalid",
	[OBJ_ERR_CREDENTIALS] = "credentials",
	[OBJ_ERR_AUTH] = "auth",
	[OBJ_ERR_DENIED] = "denied",
	[OBJ_ERR_NO_BUCKET] = "no-bucket",
	[OBJ_ERR_NOT_FOUND] = "not-found",
	[OBJ_ERR_PRECONDITION] = "precondition",
	[OBJ_ERR_RANGE] = "range",
	[OBJ_ERR_CONNECT] = "connect",
	[OBJ_ERR_TIMEOUT] = "timeout",
	[OBJ_ERR_SERVER] = "server",
	[OBJ_ERR_PROTOCOL] = "protocol",
	[OBJ_ERR_IO] = "io",
	[OBJ_ERR_NOMEM] = "nomem",
	[OBJ_ERR_OTHER] = "other",
};

const char *obj_status_name(obj_status st)
{
	if ((unsigned)st < sizeof(status_names) / sizeof(status_names[0]) &&
	    status_names[st])
		return status_names[st];
	return "unknown";
}

/* What a person can do about each kind of failure. */
static const char *status_hint(const struct obj_error *e)
{
	if (!strcmp(e->code, "SignatureDoesNotMatch"))
		return "the secret key does not match the access key: check "
		       "AWS_SECRET_ACCESS_KEY or aws_secret_access_key in the "
		       "credentials file for this profile";
	if (!strcmp(e->code, "InvalidAccessKeyId"))
		return "the server does not know this access key: check "
		       "AWS_ACCESS_KEY_ID or aws_access_key_id for this profile";
	if (e->local) {
		/* A directory: the message names it and what failed. */
		if (!strcmp(e->code, "StoreNotWritable"))
			return "give this user write access to it, or mount "
			       "it with --mode ro to only read it";
		if (e->status == OBJ_ERR_DENIED)
			return "check the permissions of the store directory "
			       "and the files in it";
		return NULL;
	}
	if (!strcmp(e->code, "RequestTimeTooSkewed"))
		return "the local clock is off: sync it (e.g. with NTP)";
	switch (e->status) {
	case OBJ_ERR_CREDENTIALS:
		return "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
		       "AWS_PROFILE with ~/.aws/credentials";
	case OBJ_ERR_NO_BUCKET:
		return "check the bucket name, or create it "
		       "(aws s3 mb s3://BUCKET)";
	case OBJ_ERR_CONNECT:
		return "check --endpoint / AWS_ENDPOINT_URL and that the "
		       "server is running";
	case OBJ_ERR_TIMEOUT:
		return "the server did not answer in time; check the "
		       "endpoint and the network";
	case OBJ_ERR_DENIED:
		return "the credentials lack permission for this bucket or key";
	default:
		return NULL;
	}
}

void obj_error_format(const struct obj_error *e, char *buf, size_t len)
{
	const char *hint = status_hint(e);
	int n = 0;

	if (!len)
		return;
	buf[0] = '\0';
	if (e->key[0])
		n = snprintf(buf, len, "%s: ", e->key);
	if (n >= 0 && (size_t)n < len && e->http_status)
		n += snprintf(buf + n, len - n, "HTTP %d ", e->http_status);
	if (n >= 0 && (size_t)n < len && e->code[0])
		n += snprintf(buf + n, len - n, "%s: ", e->code);
	if (n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - n, "%s",
			      e->message[0] ? e->message :
			      obj_status_name(e->status));
	if (n >= 0 && (size_t)n < len && e->attempts > 1)
		n += snprintf(buf + n, len - n, " (after %u attempts)",
			      e->attempts);
	if (n >= 0 && (size_t)n < len && hint)
		snprintf(buf + n, len - n, " -- %s", hint);
}

void obj_err_set(struct obj_error *e, obj_status st, const char *key,
		 const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return;
	e->status = st;
	if (key)
		snprintf(e->key, sizeof(e->key), "%s", key);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

void obj_config_init(struct obj_config *c)
{
	memset(c, 0, sizeof(*c));
	c->path_style = -1;
	c->max_parallel = 16;
	c->connect_timeout_ms = 5000;
	c->idle_timeout_ms = 30000;
	c->retry_max = 5;
	c->retry_total_ms = 60000;
	c->retry_base_ms = 100;
	c->part_size_bytes = 8u << 20;
	c->multipart_threshold_bytes = 16u << 20;
}

static void config_defaults(struct obj_config *c)
{
	struct obj_config d;

	obj_config_init(&d);
#define DEF(f) do { if (!c->f) c->f = d.f; } while (0)
	DEF(max_parallel);
	DEF(connect_timeout_ms);
	DEF(idle_timeout_ms);
	DEF(retry_max);
	DEF(retry_total_ms);
	DEF(retry_base_ms);
	DEF(part_size_bytes);
	DEF(multipart_threshold_bytes);
#undef DEF
	if (c->part_size_bytes < (5u << 20))
		c->part_size_bytes = 5u << 20; /* S3's minimum part */
	if (c->max_parallel > 256)
		c->max_parallel = 256;
}

obj_status obj_open(const struct obj_config *cfg, struct obj_store **out,
		    struct obj_error *err)
{
	struct obj_error local;
	struct obj_url u;
	struct obj_store *st;
	char msg[256];
	obj_status rc;

	if (!err)
		err = &local;
	memset(err, 0, sizeof(*err));
	*out = NULL;
	if (!cfg->url) {
		obj_err_set(err, OBJ_ERR_INVALID, NULL, "no URL given");
		return OBJ_ERR_INVALID;
	}
	if (obj_url_parse(cfg->url, &u, msg, sizeof(msg))) {
		obj_err_set(err, OBJ_ERR_INVALID, NULL, "%s", msg);
		return OBJ_ERR_INVALID;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		obj_url_release(&u);
		obj_err_set(err, OBJ_ERR_NOMEM, NULL, "out of memory");
		return OBJ_ERR_NOMEM;
	}
	st->cfg = *cfg;
	config_defaults(&st->cfg);
	st->cfg.url = st->cfg.endpoint = st->cfg.region = st->cfg.profile = NULL;
	st->be = u.scheme == OBJ_SCHEME_S3 ? &obj_s3_backend : &obj_posix_backend;
	rc = st->be->open(st, &u, cfg, err);
	obj_url_release(&u);
	if (rc != OBJ_OK && st->be == &obj_posix_backend)
		err->local = true;
	if (rc != OBJ_OK) {
		free(st->prefix);
		free(st);
		return rc;
	}
	*out = st;
	return OBJ_OK;
}

void obj_close(struct obj_store *st)
{
	if (!st)
		return;
	st->be->close(st);
	free(st->prefix);
	free(st);
}

const char *obj_describe(const struct obj_store *st)
{
	return st->desc;
}

size_t obj_key_room(const struct obj_store *st)
{
	size_t pl = strlen(st->prefix);

	return pl < OBJ_KEY_MAX ? OBJ_KEY_MAX - pl : 0;
}

char *obj_full_key(struct obj_store *st, const char *key,
		   struct obj_error *err)
{
	size_t pl = strlen(st->prefix), kl = strlen(key);
	char *full;

	if (pl + kl > OBJ_KEY_MAX) {
		obj_err_set(err, OBJ_ERR_INVALID, key,
			    "key longer than %d bytes", OBJ_KEY_MAX);
		return NULL;
	}
	full = malloc(pl + kl + 1);
	if (!full) {
		obj_err_set(err, OBJ_ERR_NOMEM, key, "out of memory");
		return NULL;
	}
	memcpy(full, st->prefix, pl);
	memcpy(full + pl, key, kl + 1);
	return full;
}

bool obj_meta_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 128)
		return false;
	for (; *name; name++)
		if (!((*name >= 'a' && *name <= 'z') ||
		      (*name >= '0' && *name <= '9') ||
		      *name == '-' || *name == '_'))
			return false;
	return true;
}

void obj_kv_free(struct obj_kv *kv, size_t n)
{
	if (!kv)
		return;
	for (size_t i = 0; i < n; i++) {
		free(kv[i].name);
		free(kv[i].value);
	}
	free(kv);
}

void obj_meta_release(struct obj_meta *m)
{
	obj_kv_free(m->user, m->nuser);
	m->user = NULL;
	m->nuser = 0;
}

void obj_list_page_release(struct obj_list_page *p)
{
	for (size_t i = 0; i < p->nentries; i++)
		free(p->entries[i].key);
	for (size_t i = 0; i < p->nprefixes; i++)
		free(p->prefixes[i]);
	free(p->entries);
	free(p->prefixes);
	free(p->next_token);
	memset(p, 0, sizeof(*p));
}

void obj_get_stats(struct obj_store *st, struct obj_stats *o)
{
	o->requests = atomic_load(&st->n_requests);
	o->get_requests = atomic_load(&st->n_gets);
	o->retries = atomic_load(&st->n_retries);
	o->errors = atomic_load(&st->n_errors);
	o->bytes_in = atomic_load(&st->n_bytes_in);
	o->bytes_out = atomic_load(&st->n_bytes_out);
	for (int i = 0; i <= OBJ_ERR_OTHER; i++)
		o->errors_by_status[i] = atomic_load(&st->n_err_by[i]);
}

/* Every entry point: reset err, build the full key, count failures. */
#define WITH_KEY(st, key, err, full)                                    \
	struct obj_error local_err_;                                    \
	char *full;                                                     \
	obj_status rc;                                                  \
	if (!(err))                                                     \
		(err) = &local_err_;                                    \
	memset((err), 0, sizeof(*(err)));                               \
	full = obj_full_key((st), (key), (err));                        \
	if (!full)                                                      \
		return (err)->status;                                   \
	if ((st)->be->revalidate)                                       \
		(st)->be->revalidate(st)

const char *obj_method_name(int m)
{
	static const char *const n[OBJ_METHODS] = {
		"GET", "HEAD", "PUT", "POST", "DELETE", "other"
	};

	return (unsigned)m < OBJ_METHODS ? n[m] : "other";
}

const char *obj_class_name(int c)
{
	static const char *const n[OBJ_CLASSES] = {
		"2xx", "3xx", "4xx", "5xx", "error"
	};

	return (unsigned)c < OBJ_CLASSES ? n[c] : "error";
}

void obj_note_attempt(struct obj_store *st, const char *method,
		      long http_status, bool transport_fault,
		      uint64_t total_us, uint64_t first_byte_us)
{
	int m = OBJ_M_OTHER, c;

	for (int i = 0; i < OBJ_M_OTHER; i++)
		if (!strcmp(method, obj_method_name(i)))
			m = i;
	if (transport_fault || http_status < 200 || http_status > 599)
		c = OBJ_C_ERROR;
	else
		c = (int)(http_status / 100) - 2;
	atomic_fetch_add(&st->n_by[m][c], 1);
	util_hist_add(&st->lat[m], total_us * 1000);
	if (c != OBJ_C_ERROR)
		util_hist_add(&st->ttfb[m], first_byte_us * 1000);
}

uint64_t obj_requests_by(struct obj_store *st, int method, int cls)
{
	if ((unsigned)method >= OBJ_METHODS || (unsigned)cls >= OBJ_CLASSES)
		return 0;
	return atomic_load(&st->n_by[method][cls]);
}

const struct util_hist *obj_request_hist(struct obj_store *st, int method,
					 bool first_byte)
{
	if ((unsigned)method >= OBJ_METHODS)
		method = OBJ_M_OTHER;
	return first_byte ? &st->ttfb[method] : &st->lat[method];
}

static obj_status finish(struct obj_store *st, obj_status rc,
			 struct obj_error *err, char *full)
{
	/* The S3 engine counts each HTTP attempt; other backends count
	 * one request per operation here. */
	if (st->be != &obj_s3_backend)
		atomic_fetch_add(&st->n_requests, 1);
	free(full);
	if (rc != OBJ_OK) {
		if (st->be->revalidate && st->be->revalidate(st) &&
		    rc != OBJ_ERR_NO_BUCKET) {
			/* Whatever failed, this is why (a file:// store's
			 * directory removed beside the mount). */
			rc = OBJ_ERR_NO_BUCKET;
			err->http_status = 0;
			err->retryable = true;
			snprintf(err->code, sizeof(err->code), "NoSuchBucket");
			snprintf(err->message, sizeof(err->message),
				 "the store directory was removed (make it "
				 "again with mkdir -p)");
		}
		err->status = rc;
		err->local = st->be == &obj_posix_backend;
		atomic_fetch_add(&st->n_errors, 1);
		if ((unsigned)rc <= OBJ_ERR_OTHER)
			atomic_fetch_add(&st->n_err_by[rc], 1);
	}
	return rc;
}

bool obj_key_reserved(const struct obj_store *st, const char *key)
{
	return st->be->reserved && st->be->reserved(key);
}

obj_status obj_check_bucket(struct obj_store *st, struct obj_error *err)
{
	struct obj_error local;
	obj_status rc;

	if (!err)
		err = &local;
	memset(err, 0, sizeof(*err));
	rc = st->be->check_bucket(st, err);
	return finish(st, rc, err, NULL);
}

obj_status obj_head(struct obj_store *st, const char *key,
		    struct obj_meta *out, struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	memset(out, 0, sizeof(*out));
	rc = st->be->head(st, full, out, err);
	return finish(st, rc, err, full);
}

obj_status obj_get(struct obj_store *st, const char *key, uint64_t off,
		   size_t len, void *buf, size_t *got_bytes,
		   struct obj_error *err)
{
	uint64_t got = 0;

	WITH_KEY(st, key, err, full);
	atomic_fetch_add(&st->n_gets, 1);
	rc = st->be->get(st, full, off, len, buf, -1, 0, &got, err);
	if (got_bytes)
		*got_bytes = (size_t)got;
	return finish(st, rc, err, full);
}

obj_status obj_put(struct obj_store *st, const char *key, const void *buf,
		   size_t len, const struct obj_kv *meta, size_t nmeta,
		   char *etag_out, struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	rc = st->be->put(st, full, buf, -1, len, meta, nmeta, etag_out, err);
	return finish(st, rc, err, full);
}

obj_status obj_mpu_create(struct obj_store *st, const char *key,
			  const struct obj_kv *meta, size_t nmeta,
			  char upload_id[OBJ_UPLOAD_ID_MAX],
			  struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	rc = st->be->mpu_create(st, full, meta, nmeta, upload_id, err);
	return finish(st, rc, err, full);
}

static bool part_number_ok(unsigned number, const char *key,
			   struct obj_error *err)
{
	if (number >= 1 && number <= OBJ_PARTS_MAX)
		return true;
	obj_err_set(err, OBJ_ERR_INVALID, key, "part number %u outside 1..%d",
		    number, OBJ_PARTS_MAX);
	return false;
}

obj_status obj_mpu_part_fd(struct obj_store *st, const char *key,
			   const char *upload_id, unsigned number, int fd,
			   off_t fd_off, size_t len, char etag_out[80],
			   struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	if (!part_number_ok(number, key, err))
		return finish(st, OBJ_ERR_INVALID, err, full);
	rc = st->be->mpu_part(st, full, upload_id, number, NULL, fd, fd_off,
			      len, etag_out, err);
	return finish(st, rc, err, full);
}

obj_status obj_mpu_part(struct obj_store *st, const char *key,
			const char *upload_id, unsigned number,
			const void *buf, size_t len, char etag_out[80],
			struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	if (!part_number_ok(number, key, err))
		return finish(st, OBJ_ERR_INVALID, err, full);
	rc = st->be->mpu_part(st, full, upload_id, number, buf, -1, 0, len,
			      etag_out, err);
	return finish(st, rc, err, full);
}

obj_status obj_mpu_complete(struct obj_store *st, const char *key,
			    const char *upload_id, const struct obj_part *parts,
			    size_t nparts, char *etag_out,
			    struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	rc = st->be->mpu_complete(st, full, upload_id, parts, nparts,
				  etag_out, err);
	return finish(st, rc, err, full);
}

obj_status obj_mpu_abort(struct obj_store *st, const char *key,
			 const char *upload_id, struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	rc = st->be->mpu_abort(st, full, upload_id, err);
	return finish(st, rc, err, full);
}

obj_status obj_list(struct obj_store *st, const char *prefix,
		    const char *delimiter, const char *token,
		    unsigned max_keys, struct obj_list_page *page,
		    struct obj_error *err)
{
	memset(page, 0, sizeof(*page));
	WITH_KEY(st, prefix ? prefix : "", err, full);
	rc = st->be->list(st, full, delimiter, token, max_keys, page, err);
	if (rc != OBJ_OK)
		obj_list_page_release(page);
	return finish(st, rc, err, full);
}

obj_status obj_delete(struct obj_store *st, const char *key,
		      struct obj_error *err)
{
	WITH_KEY(st, key, err, full);
	rc = st->be->del(st, full, err);
	return finish(st, rc, err, full);
}

obj_status obj_delete_many(struct obj_store *st, const char *const *keys,
			   size_t nkeys, size_t *failed,
			   struct obj_error *err)
{
	struct obj_error local;
	obj_status first = OBJ_OK;
	size_t nfailed = 0;

	if (!err)
		err = &local;
	memset(err, 0, sizeof(*err));
	for (size_t at = 0; at < nkeys; at += 1000) {
		size_t n = nkeys - at < 1000 ? nkeys - at : 1000, nf = 0;
		const char **full = calloc(n, sizeof(*full));
		struct obj_error e = {0};
		obj_status rc = OBJ_OK;
		size_t i;

		if (!full)
			return finish(st, OBJ_ERR_NOMEM, err, NULL);
		for (i = 0; i < n; i++)
			if (!(full[i] = obj_full_key(st, keys[at + i], &e)))
				break;
		if (i == n)
			rc = st->be->del_many(st, full, n, &nf, &e);
		else
			rc = e.status, nf = n;
		for (i = 0; i < n; i++)
			free((char *)full[i]);
		free(full);
		nfailed += nf;
		if (rc != OBJ_OK && first == OBJ_OK) {
			first = rc;
			*err = e;
		}
	}
	if (failed)
		*failed = nfailed;
	return finish(st, first, err, NULL);
}

obj_status obj_copy(struct obj_store *st, const char *src_key,
		    const char *dst_key, const struct obj_kv *meta,
		    size_t nmeta, char *etag_out, struct obj_error *err)
{
	return obj_copy_typed(st, src_key, dst_key, meta, nmeta, NULL,
			      etag_out, err);
}

obj_status obj_copy_typed(struct obj_store *st, const char *src_key,
			  const char *dst_key, const struct obj_kv *meta,
			  size_t nmeta, const char *content_type,
			  char *etag_out, struct obj_error *err)
{
	char *dst;

	WITH_KEY(st, src_key, err, full);
	dst = obj_full_key(st, dst_key, err);
	if (!dst)
		return finish(st, err->status, err, full);
	rc = st->be->copy(st, full, dst, meta, nmeta, content_type,
			  etag_out, err);
	free(dst);
	return finish(st, rc, err, full);
}

/* ---- parallel transfers: a few threads, each taking the next part ---- */

struct xfer {
	struct obj_store *st;
	const char *full;       /* full key */
	const char *upload_id;  /* NULL for GET */
	int fd;
	uint64_t off, len;      /* object range (GET) or file range (PUT) */
	off_t fd_off;
	size_t part;
	size_t nparts;
	struct obj_part *parts; /* PUT: etags out */

	pthread_mutex_t lock;   /* protects next, failed, err, got */
	size_t next;
	bool failed;
	uint64_t got;
	struct obj_error err;
};

static void *xfer_worker(void *arg)
{
	struct xfer *x = arg;

	for (;;) {
		struct obj_error e = {0};
		uint64_t got = 0, poff, plen;
		obj_status rc;
		size_t i;

		pthread_mutex_lock(&x->lock);
		i = x->next++;
		if (x->failed || i >= x->nparts) {
			pthread_mutex_unlock(&x->lock);
			return NULL;
		}
		pthread_mutex_unlock(&x->lock);
		poff = (uint64_t)i * x->part;
		plen = x->len - poff < x->part ? x->len - poff : x->part;
		if (x->upload_id) {
			x->parts[i].number = (unsigned)i + 1;
			rc = x->st->be->mpu_part(x->st, x->full, x->upload_id,
						 (unsigned)i + 1, NULL, x->fd,
						 (off_t)poff, (size_t)plen,
						 x->parts[i].etag, &e);
			got = plen;
		} else {
			atomic_fetch_add(&x->st->n_gets, 1);
			rc = x->st->be->get(x->st, x->full, x->off + poff,
					    plen, NULL, x->fd,
					    x->fd_off + (off_t)poff, &got, &e);
		}
		pthread_mutex_lock(&x->lock);
		x->got += got;
		if (rc != OBJ_OK && !x->failed) {
			x->failed = true;
			x->err = e;
			x->err.status = rc;
		}
		pthread_mutex_unlock(&x->lock);
	}
}

/* Runs the parts of x on up to max_parallel threads (the caller is one). */
static obj_status xfer_run(struct xfer *x, struct obj_error *err)
{
	size_t nthr = x->nparts < x->st->cfg.max_parallel ?
		      x->nparts : x->st->cfg.max_parallel;
	pthread_t *thr = nthr > 1 ? calloc(nthr - 1, sizeof(*thr)) : NULL;
	size_t started = 0;

	pthread_mutex_init(&x->lock, NULL);
	for (size_t i = 0; thr && i + 1 < nthr; i++) {
		if (pthread_create(&thr[i], NULL, xfer_worker, x))
			break;
		started++;
	}
	xfer_worker(x);
	for (size_t i = 0; i < started; i++)
		pthread_join(thr[i], NULL);
	free(thr);
	pthread_mutex_destroy(&x->lock);
	if (x->failed) {
		*err = x->err;
		return x->err.status;
	}
	return OBJ_OK;
}

obj_status obj_get_fd(struct obj_store *st, const char *key, uint64_t off,
		      uint64_t len, int fd, off_t fd_off, uint64_t *got_bytes,
		      struct obj_error *err)
{
	struct xfer x = {0};

	WITH_KEY(st, key, err, full);
	if (got_bytes)
		*got_bytes = 0;
	if (len == UINT64_MAX || (st->be->split_ranges &&
				  len > st->cfg.part_size_bytes)) {
		/* Learn the size first: to split, and to clip the range. */
		struct obj_meta m = {0};

		rc = st->be->head(st, full, &m, err);
		if (rc != OBJ_OK)
			return finish(st, rc, err, full);
		obj_meta_release(&m);
		if (off >= m.size_bytes) {
			/* Nothing to read: as a ranged GET past the end. */
			len = 0;
		} else if (len > m.size_bytes - off) {
			len = m.size_bytes - off;
		}
	}
	if (!st->be->split_ranges || len <= st->cfg.part_size_bytes) {
		uint64_t got = 0;

		if (len)
			atomic_fetch_add(&st->n_gets, 1);
		rc = len ? st->be->get(st, full, off, len, NULL, fd, fd_off,
				       &got, err) : OBJ_OK;
		if (got_bytes)
			*got_bytes = got;
		return finish(st, rc, err, full);
	}
	x.st = st;
	x.full = full;
	x.fd = fd;
	x.off = off;
	x.len = len;
	x.fd_off = fd_off;
	x.part = st->cfg.part_size_bytes;
	x.nparts = (size_t)((len + x.part - 1) / x.part);
	rc = xfer_run(&x, err);
	if (got_bytes)
		*got_bytes = x.got;
	return finish(st, rc, err, full);
}

obj_status obj_put_fd(struct obj_store *st, const char *key, int fd,
		      uint64_t len, const struct obj_kv *meta, size_t nmeta,
		      char *etag_out, struct obj_error *err)
{
	char upload_id[OBJ_UPLOAD_ID_MAX];
	struct xfer x = {0};
	struct obj_error e2;
	size_t part;

	WITH_KEY(st, key, err, full);
	if (len <= st->cfg.multipart_threshold_bytes) {
		rc = st->be->put(st, full, NULL, fd, len, meta, nmeta,
				 etag_out, err);
		return finish(st, rc, err, full);
	}
	part = st->cfg.part_size_bytes;
	while ((len + part - 1) / part > OBJ_PARTS_MAX)
		part *= 2;
	x.nparts = (size_t)((len + part - 1) / part);
	x.parts = calloc(x.nparts, sizeof(*x.parts));
	if (!x.parts) {
		obj_err_set(err, OBJ_ERR_NOMEM, key, "out of memory");
		return finish(st, OBJ_ERR_NOMEM, err, full);
	}
	rc = st->be->mpu_create(st, full, meta, nmeta, upload_id, err);
	if (rc != OBJ_OK)
		goto out_free_parts;
	x.st = st;
	x.full = full;
	x.upload_id = upload_id;
	x.fd = fd;
	x.len = len;
	x.part = part;
	rc = xfer_run(&x, err);
	if (rc == OBJ_OK)
		rc = st->be->mpu_complete(st, full, upload_id, x.parts,
					  x.nparts, etag_out, err);
	if (rc != OBJ_OK) {
		memset(&e2, 0, sizeof(e2));
		/* Leave no orphaned parts behind; the first error stands. */
		st->be->mpu_abort(st, full, upload_id, &e2);
	}
out_free_parts:
	free(x.parts);
	return finish(st, rc, err, full);
}
