/* SPDX-License-Identifier: MIT */
/*
 * s3_engine.c - the network engine of the S3 backend.  One thread drives a
 * libcurl multi handle: callers from any thread hand it a request and
 * sleep; the engine signs each attempt (fresh x-amz-date), runs up to
 * max_parallel transfers at once over reused connections, classifies each
 * outcome, and either answers the caller or schedules a retry with
 * exponential backoff and full jitter.  Retried: 5xx, SlowDown,
 * RequestTimeout, connection resets, timeouts and bodies shorter than
 * promised.  Never retried: authentication and other 4xx.  A request is
 * not retried once retry_max attempts were made or retry_total_ms has
 * passed since its first attempt, so the time any call can take is bounded
 * by retry_total_ms plus one idle timeout.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "s3_int.h"

struct s3_engine {
	struct s3_store *s3;
	CURLM *multi;
	pthread_t thread;
	pthread_mutex_t lock;     /* protects incoming, stopping, req->done */
	struct s3_req *incoming;  /* handed over by callers */
	bool stopping;
	/* engine thread only: */
	struct s3_req *waiting;   /* ready or backing off, not yet in multi */
	unsigned active;
	uint64_t rng;
};

int s3_buf_append(struct s3_buf *b, const void *p, size_t n)
{
	if (b->len + n > b->max)
		return -EFBIG;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *d;

		while (cap < b->len + n + 1)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

void s3_buf_free(struct s3_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void s3_req_release(struct s3_req *r)
{
	free(r->path);
	free(r->query);
	for (unsigned i = 0; i < r->nextra; i++)
		free(r->extra_headers[i]);
	for (size_t i = 0; i < r->nmeta; i++) {
		free(r->meta[i].name);
		free(r->meta[i].value);
	}
	free(r->meta);
	s3_buf_free(&r->errbody);
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->hdr_list);
	r->easy = r->hdr_list = NULL;
}

/* ---- per-transfer callbacks ---- */

static bool is_2xx(const struct s3_req *r)
{
	return r->http_status >= 200 && r->http_status < 300;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
	struct s3_req *r = arg;
	size_t n = sz * nm;

	if (!is_2xx(r)) {
		/* Keep the start of an error body; drop the rest. */
		size_t room = S3_ERRBODY_MAX_BYTES - r->errbody.len;

		r->errbody.max = S3_ERRBODY_MAX_BYTES;
		s3_buf_append(&r->errbody, p, n < room ? n : room);
		return n;
	}
	if (r->dn_xml) {
		if (s3_buf_append(r->dn_xml, p, n))
			return CURL_WRITEFUNC_ERROR;
	} else if (r->dn_buf) {
		if (r->got + n > r->dn_cap)
			return CURL_WRITEFUNC_ERROR; /* server sent too much */
		memcpy((char *)r->dn_buf + r->got, p, n);
	} else if (r->dn_fd >= 0) {
		size_t done = 0;

		while (done < n) {
			ssize_t w = pwrite(r->dn_fd, p + done, n - done,
					   r->dn_off + (off_t)(r->got + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				snprintf(r->fault_msg, sizeof(r->fault_msg),
					 "writing the target file: %s",
					 w < 0 ? strerror(errno) : "short");
				return CURL_WRITEFUNC_ERROR;
			}
			done += (size_t)w;
		}
	}
	r->got += n;
	return n;
}

static size_t on_upload(char *p, size_t sz, size_t nm, void *arg)
{
	struct s3_req *r = arg;
	size_t n = sz * nm;
	uint64_t left = r->up_len - r->sent;

	if (n > left)
		n = (size_t)left;
	if (!n)
		return 0;
	if (r->up_buf) {
		memcpy(p, (const char *)r->up_buf + r->sent, n);
	} else {
		ssize_t got = pread(r->up_fd, p, n,
				    r->up_off + (off_t)r->sent);
		if (got < 0 && errno == EINTR)
			got = 0;
		if (got <= 0) {
			snprintf(r->fault_msg, sizeof(r->fault_msg),
				 "reading the source file: %s",
				 got < 0 ? strerror(errno) : "file shrank");
			return CURL_READFUNC_ABORT;
		}
		n = (size_t)got;
	}
	r->sent += n;
	return n;
}

/* libcurl's verbose output (-v -v), as libcurl would print it ("* " for
 * its notes, "> " sent headers, "< " received ones; no bodies), each
 * line passed through s3_redact() first. */
static int on_debug(CURL *c, curl_infotype type, char *data, size_t n,
		    void *arg)
{
	static const char *const mark[] = {
		[CURLINFO_TEXT] = "* ", [CURLINFO_HEADER_IN] = "< ",
		[CURLINFO_HEADER_OUT] = "> ",
	};
	struct s3_req *r = arg;
	char small[4096], *buf = small, *line, *end;
	size_t size = 2 * n + 64; /* a redaction grows a value at most 2x */

	(void)c;
	if (type != CURLINFO_TEXT && type != CURLINFO_HEADER_IN &&
	    type != CURLINFO_HEADER_OUT)
		return 0;
	if (size > sizeof(small) && !(buf = malloc(size)))
		return 0; /* verbose output only: drop it */
	if (size <= sizeof(small))
		size = sizeof(small);
	s3_redact(&r->s3->creds, data, n, buf, size);
	for (line = buf; *line; line = end) {
		end = strchr(line, '\n');
		end = end ? end + 1 : line + strlen(line);
		if (end - line == 2 && line[0] == '\r')
			continue; /* the blank line that ends the headers */
		fprintf(stderr, "%s%.*s%s", mark[type], (int)(end - line), line,
			end[-1] == '\n' ? "" : "\n");
	}
	if (buf != small)
		free(buf);
	return 0;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct s3_req *r = arg;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->up_len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->sent = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

static void copy_trimmed(char *dst, size_t dl, const char *v, size_t vl)
{
	while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' ||
		      v[vl - 1] == ' '))
		vl--;
	while (vl && *v == ' ')
		v++, vl--;
	if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"')
		v++, vl -= 2;
	if (vl >= dl)
		vl = dl - 1;
	memcpy(dst, v, vl);
	dst[vl] = '\0';
}

static void add_meta(struct s3_req *r, const char *name, size_t nl,
		     const char *v, size_t vl)
{
	struct obj_kv *m;
	char val[2048];

	if (r->nmeta >= 64)
		return;
	m = realloc(r->meta, (r->nmeta + 1) * sizeof(*m));
	if (!m)
		return;
	r->meta = m;
	copy_trimmed(val, sizeof(val), v, vl);
	m[r->nmeta].name = strndup(name, nl);
	m[r->nmeta].value = strdup(val);
	if (!m[r->nmeta].name || !m[r->nmeta].value) {
		free(m[r->nmeta].name);
		free(m[r->nmeta].value);
		return;
	}
	for (char *c = m[r->nmeta].name; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c += 'a' - 'A';
	r->nmeta++;
}

static void reset_results(struct s3_req *r)
{
	for (size_t i = 0; i < r->nmeta; i++) {
		free(r->meta[i].name);
		free(r->meta[i].value);
	}
	r->nmeta = 0;
	r->etag[0] = r->content_type[0] = r->last_modified[0] = '\0';
	r->have_content_length = false;
	r->content_length = 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct s3_req *r = arg;
	size_t n = sz * nm;
	const char *colon = memchr(p, ':', n);
	size_t nl;
	const char *v;

	if (n >= 5 && !memcmp(p, "HTTP/", 5)) {
		/* A new response (after 100 Continue or a retry): the body
		 * callback needs its status to know where bytes go. */
		const char *sp = memchr(p, ' ', n);

		reset_results(r);
		r->http_status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return n;
	}
	if (!colon)
		return n;
	nl = (size_t)(colon - p);
	v = colon + 1;
#define IS(h) (nl == sizeof(h) - 1 && !strncasecmp(p, h, nl))
	if (IS("etag"))
		copy_trimmed(r->etag, sizeof(r->etag), v, n - nl - 1);
	else if (IS("content-type"))
		copy_trimmed(r->content_type, sizeof(r->content_type), v,
			     n - nl - 1);
	else if (IS("last-modified"))
		copy_trimmed(r->last_modified, sizeof(r->last_modified), v,
			     n - nl - 1);
	else if (IS("content-length")) {
		r->content_length = strtoull(v, NULL, 10);
		r->have_content_length = true;
	} else if (nl > 11 && !strncasecmp(p, "x-amz-meta-", 11))
		add_meta(r, p + 11, nl - 11, v, n - nl - 1);
#undef IS
	return n;
}

/* ---- starting an attempt ---- */

static int attempt_start(struct s3_engine *e, struct s3_req *r)
{
	struct s3_store *s3 = e->s3;
	const struct obj_config *cfg = &s3->st->cfg;
	char url[4096];
	CURL *c = r->easy;

	if (!c) {
		c = r->easy = curl_easy_init();
		if (!c)
			return -ENOMEM;
	} else {
		curl_easy_reset(c);
	}
	curl_slist_free_all(r->hdr_list);
	r->hdr_list = NULL;
	if (s3_sign(s3, r, &r->hdr_list, url, sizeof(url)))
		return -EINVAL;
	r->http_status = 0;
	r->got = r->sent = 0;
	r->fault = 0;
	r->fault_msg[0] = '\0';
	r->errbody.len = 0;
	reset_results(r);
	r->attempts++;

	curl_easy_setopt(c, CURLOPT_URL, url);
	/* Keys may hold "." and ".." segments: send them as they are. */
	curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->hdr_list);
	curl_easy_setopt(c, CURLOPT_PRIVATE, r);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)cfg->connect_timeout_ms);
	/* Idle timeout: fail when under 1 byte/s for this long. */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
			 (long)((cfg->idle_timeout_ms + 999) / 1000));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
	if (s3->ca_bundle)
		curl_easy_setopt(c, CURLOPT_CAINFO, s3->ca_bundle);
	if (s3->verbose > 1) {
		/* Never CURLOPT_VERBOSE alone: libcurl would print the
		 * Authorization header and the session token. */
		curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_debug);
		curl_easy_setopt(c, CURLOPT_DEBUGDATA, r);
		curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
	}
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (r->has_body) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
		curl_easy_setopt(c, CURLOPT_READDATA, r);
		curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(c, CURLOPT_SEEKDATA, r);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)r->up_len);
		curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
	} else if (strcmp(r->method, "GET")) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
	}
	if (s3->verbose) {
		char shown[sizeof(url) + 64];

		s3_redact(&s3->creds, url, strlen(url), shown, sizeof(shown));
		fprintf(stderr, "fmfs: %s %s (attempt %u)\n", r->method,
			shown, r->attempts);
	}
	atomic_fetch_add(&s3->st->n_requests, 1);
	if (r->attempts > 1)
		atomic_fetch_add(&s3->st->n_retries, 1);
	if (curl_multi_add_handle(e->multi, c) != CURLM_OK)
		return -EIO;
	e->active++;
	return 0;
}

/* ---- classifying an outcome ---- */

static bool retryable(const struct s3_req *r, const struct s3_xml_error *x)
{
	switch (r->fault) {
	case 0:
		break;
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
	if (r->http_status >= 500)
		return true;
	if (r->http_status == 429 || !strcmp(x->code, "SlowDown") ||
	    !strcmp(x->code, "RequestTimeout"))
		return true;
	/* A 2xx whose body came up short: the connection broke. */
	return is_2xx(r) && r->expect_len && r->got < r->expect_len;
}

static obj_status classify_http(long status, const char *code)
{
	if (!strcmp(code, "NoSuchBucket"))
		return OBJ_ERR_NO_BUCKET;
	if (!strcmp(code, "NoSuchKey") || !strcmp(code, "NoSuchUpload"))
		return OBJ_ERR_NOT_FOUND;
	if (!strcmp(code, "SignatureDoesNotMatch") ||
	    !strcmp(code, "InvalidAccessKeyId") ||
	    !strcmp(code, "InvalidToken") || !strcmp(code, "ExpiredToken") ||
	    !strcmp(code, "RequestTimeTooSkewed"))
		return OBJ_ERR_AUTH;
	switch (status) {
	case 401:
		return OBJ_ERR_AUTH;
	case 403:
		return OBJ_ERR_DENIED;
	case 404:
		return OBJ_ERR_NOT_FOUND;
	case 412:
		return OBJ_ERR_PRECONDITION;
	case 416:
		return OBJ_ERR_RANGE;
	default:
		return status >= 500 || status == 429 ? OBJ_ERR_SERVER :
		       OBJ_ERR_OTHER;
	}
}

static obj_status classify_fault(int cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
		return OBJ_ERR_CONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return OBJ_ERR_TIMEOUT;
	case CURLE_WRITE_ERROR:
	case CURLE_READ_ERROR:
	case CURLE_ABORTED_BY_CALLBACK:
		return OBJ_ERR_IO;
	case CURLE_OUT_OF_MEMORY:
		return OBJ_ERR_NOMEM;
	default:
		return OBJ_ERR_PROTOCOL;
	}
}

/* Fills err from the finished request r; returns its status. */
static obj_status outcome(struct s3_req *r, const struct s3_xml_error *x,
			  struct obj_error *err)
{
	memset(err, 0, sizeof(*err));
	err->http_status = (int)r->http_status;
	err->attempts = r->attempts;
	err->retryable = retryable(r, x);
	snprintf(err->key, sizeof(err->key), "%s", r->key ? r->key : "");
	if (r->fault) {
		err->status = classify_fault(r->fault);
		if (r->fault_msg[0])
			snprintf(err->message, sizeof(err->message), "%s %.200s",
				 r->method, r->fault_msg);
		else
			snprintf(err->message, sizeof(err->message), "%s: %s",
				 r->method, curl_easy_strerror(r->fault));
		return err->status;
	}
	if (is_2xx(r)) {
		if (r->expect_len && r->got < r->expect_len) {
			snprintf(err->message, sizeof(err->message),
				 "%s: body truncated at %llu of %llu bytes",
				 r->method, (unsigned long long)r->got,
				 (unsigned long long)r->expect_len);
			return err->status = OBJ_ERR_PROTOCOL;
		}
		return OBJ_OK;
	}
	snprintf(err->code, sizeof(err->code), "%s", x->code);
	/* The server's words reach the terminal: keep secrets out. */
	s3_redact(&r->s3->creds, x->message[0] ? x->message :
		  "request failed", strlen(x->message[0] ? x->message :
		  "request failed"), err->message, sizeof(err->message));
	if (!x->code[0]) {
		/* No body (HEAD): name the status the way S3 would. */
		const char *c = r->http_status == 404 ? "NotFound" :
				r->http_status == 403 ? "Forbidden" :
				r->http_status == 500 ? "InternalError" :
				r->http_status == 503 ? "ServiceUnavailable" :
				r->http_status == 400 ? "BadRequest" : "";
		snprintf(err->code, sizeof(err->code), "%s", c);
	}
	err->status = classify_http(r->http_status, x->code);
	return err->status;
}

static void finish_transfer(struct s3_engine *e, CURL *c, CURLcode cc)
{
	const struct obj_config *cfg = &e->s3->st->cfg;
	struct s3_xml_error x = {{0}, {0}};
	struct s3_req *r = NULL;
	uint64_t now = util_now_ms();

	curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&r);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
	curl_multi_remove_handle(e->multi, c);
	e->active--;
	if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && !r->fault_msg[0] &&
				!is_2xx(r)))
		r->fault = cc;
	if (!r->fault && !is_2xx(r) && r->errbody.len)
		s3_xml_parse_error(r->errbody.data, r->errbody.len, &x);
	if (!r->fault && is_2xx(r) && r->dn_xml && r->dn_xml->len &&
	    s3_xml_parse_error(r->dn_xml->data, r->dn_xml->len, &x) == 1) {
		/* 200 with an <Error> body (Complete/Copy): treat as 500-ish */
		r->http_status = !strcmp(x.code, "InternalError") ||
				 !strcmp(x.code, "SlowDown") ? 503 : 400;
	}
	atomic_fetch_add(&e->s3->st->n_bytes_in, r->got);
	atomic_fetch_add(&e->s3->st->n_bytes_out, r->sent);
	{
		curl_off_t total = 0, first = 0;

		curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &total);
		curl_easy_getinfo(c, CURLINFO_STARTTRANSFER_TIME_T, &first);
		obj_note_attempt(e->s3->st, r->method, r->http_status,
				 r->fault != 0, (uint64_t)total,
				 (uint64_t)first);
	}
	if (retryable(r, &x) && r->attempts < cfg->retry_max) {
		/* Full jitter: sleep uniform in [0, base * 2^(attempt-1)]. */
		uint64_t cap = (uint64_t)cfg->retry_base_ms << (r->attempts - 1);
		uint64_t delay;

		if (cap > 20000)
			cap = 20000;
		e->rng = e->rng * 6364136223846793005ULL + 1442695040888963407ULL;
		delay = (e->rng >> 33) % (cap + 1);
		if (now + delay - r->first_ms < cfg->retry_total_ms) {
			if (e->s3->verbose)
				fprintf(stderr, "fmfs: retry %s %s in %llu ms "
					"(HTTP %ld, curl %d, %s)\n", r->method,
					r->key, (unsigned long long)delay,
					r->http_status, r->fault,
					x.code[0] ? x.code : "-");
			r->due_ms = now + delay;
			r->next = e->waiting;
			e->waiting = r;
			return;
		}
	}
	/* Done: keep the parsed error for the caller and wake it. */
	r->xerr = x;
	s3_buf_free(&r->errbody);
	pthread_mutex_lock(&e->lock);
	r->done = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&e->lock);
}

static void fail_start(struct s3_engine *e, struct s3_req *r, int rc)
{
	r->fault = rc == -ENOMEM ? CURLE_OUT_OF_MEMORY : CURLE_FAILED_INIT;
	snprintf(r->fault_msg, sizeof(r->fault_msg),
		 "could not start the request (%s)", strerror(-rc));
	pthread_mutex_lock(&e->lock);
	r->done = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Starts waiting requests that are due, up to max_parallel.  Returns the
 * ms until the next one is due (or 1000). */
static long start_due(struct s3_engine *e)
{
	uint64_t now = util_now_ms(), next = now + 1000;
	struct s3_req **pp = &e->waiting;
	unsigned maxp = e->s3->st->cfg.max_parallel;

	/* New requests are appended, retries pushed in front. */
	while (*pp) {
		struct s3_req *r = *pp;

		if (r->due_ms <= now && e->active < maxp) {
			int rc;

			*pp = r->next;
			rc = attempt_start(e, r);
			if (rc)
				fail_start(e, r, rc);
			continue;
		}
		if (r->due_ms > now && r->due_ms < next)
			next = r->due_ms;
		if (r->due_ms <= now)
			next = now + 5; /* waiting for a free slot */
		pp = &r->next;
	}
	return (long)(next - now);
}

static void *engine_main(void *arg)
{
	struct s3_engine *e = arg;

	for (;;) {
		struct s3_req *in, *tail;
		CURLMsg *m;
		int running, left;
		long wait_ms;

		pthread_mutex_lock(&e->lock);
		in = e->incoming;
		e->incoming = NULL;
		if (e->stopping && !in && !e->active && !e->waiting) {
			pthread_mutex_unlock(&e->lock);
			break;
		}
		pthread_mutex_unlock(&e->lock);
		/* Append new requests (FIFO order kept by reversing). */
		for (tail = NULL; in; ) {
			struct s3_req *n = in->next;

			in->next = tail;
			tail = in;
			in = n;
		}
		while (tail) {
			struct s3_req *n = tail->next;
			struct s3_req **pp = &e->waiting;

			while (*pp)
				pp = &(*pp)->next;
			tail->next = NULL;
			*pp = tail;
			tail = n;
		}
		wait_ms = start_due(e);
		curl_multi_perform(e->multi, &running);
		while ((m = curl_multi_info_read(e->multi, &left)))
			if (m->msg == CURLMSG_DONE)
				finish_transfer(e, m->easy_handle,
						m->data.result);
		if (wait_ms > 1000)
			wait_ms = 1000;
		curl_multi_poll(e->multi, NULL, 0, (int)wait_ms, NULL);
	}
	return NULL;
}

int s3_engine_start(struct s3_store *s3, struct s3_engine **out)
{
	struct s3_engine *e = calloc(1, sizeof(*e));
	unsigned maxp = s3->st->cfg.max_parallel;

	if (!e)
		return -ENOMEM;
	e->s3 = s3;
	e->rng = (uint64_t)util_now_ms() ^ ((uint64_t)getpid() << 32);
	e->multi = curl_multi_init();
	if (!e->multi) {
		free(e);
		return -ENOMEM;
	}
	curl_multi_setopt(e->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)maxp);
	curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, (long)maxp);
	pthread_mutex_init(&e->lock, NULL);
	if (pthread_create(&e->thread, NULL, engine_main, e)) {
		curl_multi_cleanup(e->multi);
		pthread_mutex_destroy(&e->lock);
		free(e);
		return -EAGAIN;
	}
	*out = e;
	return 0;
}

void s3_engine_stop(struct s3_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_mutex_unlock(&e->lock);
	curl_multi_wakeup(e->multi);
	pthread_join(e->thread, NULL);
	curl_multi_cleanup(e->multi);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

obj_status s3_engine_run(struct s3_engine *e, struct s3_req *r,
			 struct obj_error *err)
{
	obj_status st;

	r->attempts = 0;
	r->done = false;
	r->first_ms = r->due_ms = util_now_ms();
	pthread_cond_init(&r->cond, NULL);
	pthread_mutex_lock(&e->lock);
	r->next = e->incoming;
	e->incoming = r;
	pthread_mutex_unlock(&e->lock);
	curl_multi_wakeup(e->multi);
	pthread_mutex_lock(&e->lock);
	while (!r->done)
		pthread_cond_wait(&r->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
	pthread_cond_destroy(&r->cond);
	st = outcome(r, &r->xerr, err);
	if (st != OBJ_OK && e->s3->verbose) {
		char line[1024];

		obj_error_format(err, line, sizeof(line));
		fprintf(stderr, "fmfs: %s\n", line);
	}
	return st;
}
