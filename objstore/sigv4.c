/* SPDX-License-Identifier: MIT */
/*
 * sigv4.c - AWS Signature Version 4 signer for S3 requests, on OpenSSL 3
 * libcrypto (EVP digests and the one-shot HMAC(), no deprecated API).
 *
 * sigv4_sign() validates the request, sorts headers and query parameters
 * by index (nothing is copied), streams the canonical request through
 * SHA-256 (optionally copying it to the caller's buffer), builds the string
 * to sign on the stack, derives the signing key and writes the
 * Authorization header value.  Only libcrypto allocates (its digest and
 * HMAC contexts); our buffers are fixed-size or caller-provided with length
 * checks.  See sigv4.h for the canonicalisation rules.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L	/* gmtime_r */
#endif

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "sigv4.h"
#include "util/util.h"

#define SIGV4_ALGO		"AWS4-HMAC-SHA256"
#define SIGV4_TERMINATOR	"aws4_request"
#define SIGV4_SHA256_LEN	32
#define SIGV4_STAGE_LEN		256

static const char sigv4_hex_upper[] = "0123456789ABCDEF";
static const char sigv4_hex_lower[] = "0123456789abcdef";

/* ---- character classes ---- */

static bool sigv4_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
	       c == '~';
}

static unsigned char sigv4_lower(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* RFC 9110 tchar: what a header field name may be made of. */
static bool sigv4_tchar(unsigned char c)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9'))
		return true;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool sigv4_blank(unsigned char c)
{
	return c == ' ' || c == '\t';
}

static void sigv4_hex(const unsigned char *p, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = sigv4_hex_lower[p[i] >> 4];
		out[2 * i + 1] = sigv4_hex_lower[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* ---- output sink: optional SHA-256 plus optional bounded string ---- */

struct sigv4_sink {
	EVP_MD_CTX *md;		/* NULL: nothing hashed */
	char *buf;		/* NULL: nothing copied */
	size_t cap, len;	/* len < cap whenever buf is set */
	unsigned char stage[SIGV4_STAGE_LEN];	/* batches digest updates */
	size_t nstage;
	int err;
};

static void sigv4_sink_buf(struct sigv4_sink *s, char *buf, size_t cap)
{
	s->buf = buf;
	s->cap = cap;
	s->len = 0;
	if (!buf)
		return;
	if (!cap)
		s->err = -ENAMETOOLONG;
	else
		buf[0] = '\0';
}

static void sigv4_flush(struct sigv4_sink *s)
{
	if (!s->err && s->md && s->nstage &&
	    EVP_DigestUpdate(s->md, s->stage, s->nstage) != 1)
		s->err = -ENOMEM;
	s->nstage = 0;
}

static void sigv4_put(struct sigv4_sink *s, const void *p, size_t n)
{
	const unsigned char *c = p;

	if (s->err || !n)
		return;
	if (s->buf) {
		if (n >= s->cap - s->len) {
			s->err = -ENAMETOOLONG;
			return;
		}
		memcpy(s->buf + s->len, p, n);
		s->len += n;
		s->buf[s->len] = '\0';
	}
	while (s->md && n && !s->err) {
		size_t k = SIGV4_STAGE_LEN - s->nstage;

		if (k > n)
			k = n;
		memcpy(s->stage + s->nstage, c, k);
		s->nstage += k;
		c += k;
		n -= k;
		if (s->nstage == SIGV4_STAGE_LEN)
			sigv4_flush(s);
	}
}

static void sigv4_puts(struct sigv4_sink *s, const char *str)
{
	sigv4_put(s, str, strlen(str));
}

static void sigv4_putc(struct sigv4_sink *s, char c)
{
	sigv4_put(s, &c, 1);
}

/* ---- headers ---- */

/* Compares two header names as lower-cased bytes. */
static int sigv4_name_cmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned char x = sigv4_lower((unsigned char)*a);
		unsigned char y = sigv4_lower((unsigned char)*b);

		if (x != y || !x)
			return (int)x - (int)y;
	}
}

/* Stable insertion sort of header indexes by lower-cased name. */
static void sigv4_sort_headers(const struct sigv4_header *h, size_t n,
			       uint8_t *idx)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		for (j = i; j > 0; j--) {
			if (sigv4_name_cmp(h[idx[j - 1]].name, h[i].name) <= 0)
				break;
			idx[j] = idx[j - 1];
		}
		idx[j] = (uint8_t)i;
	}
}

static void sigv4_put_lower(struct sigv4_sink *s, const char *name)
{
	char tmp[64];
	size_t n = 0;

	for (; *name; name++) {
		tmp[n++] = (char)sigv4_lower((unsigned char)*name);
		if (n == sizeof(tmp)) {
			sigv4_put(s, tmp, n);
			n = 0;
		}
	}
	sigv4_put(s, tmp, n);
}

/* Writes v trimmed, with each inner run of blanks as one space. */
static void sigv4_put_trimmed(struct sigv4_sink *s, const char *v)
{
	const char *end = v + strlen(v);

	while (v < end && sigv4_blank((unsigned char)*v))
		v++;
	while (end > v && sigv4_blank((unsigned char)end[-1]))
		end--;
	while (v < end) {
		const char *q = v;

		while (q < end && !sigv4_blank((unsigned char)*q))
			q++;
		sigv4_put(s, v, (size_t)(q - v));
		if (q == end)
			break;
		sigv4_putc(s, ' ');
		while (sigv4_blank((unsigned char)*q))
			q++;
		v = q;
	}
}

static bool sigv4_same_name(const struct sigv4_header *h, const uint8_t *idx,
			    size_t i, size_t j)
{
	return sigv4_name_cmp(h[idx[i]].name, h[idx[j]].name) == 0;
}

/* "name:v1,v2\n" per distinct name, in sorted order. */
static void sigv4_put_headers(struct sigv4_sink *s,
			      const struct sigv4_header *h,
			      const uint8_t *idx, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (i == 0 || !sigv4_same_name(h, idx, i - 1, i)) {
			sigv4_put_lower(s, h[idx[i]].name);
			sigv4_putc(s, ':');
		} else {
			sigv4_putc(s, ',');
		}
		sigv4_put_trimmed(s, h[idx[i]].value);
		if (i + 1 == n || !sigv4_same_name(h, idx, i, i + 1))
			sigv4_putc(s, '\n');
	}
}

/* "host;x-amz-date": the distinct sorted names. */
static void sigv4_put_signed(struct sigv4_sink *s,
			     const struct sigv4_header *h,
			     const uint8_t *idx, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (i > 0 && sigv4_same_name(h, idx, i - 1, i))
			continue;
		if (i > 0)
			sigv4_putc(s, ';');
		sigv4_put_lower(s, h[idx[i]].name);
	}
}

/* ---- query ---- */

struct sigv4_qparam {
	const char *name, *val;
	size_t nlen, vlen;
};

/*
 * Cursor over the canonical bytes of one validated query component: each
 * byte (or %XX escape) is decoded, then re-encoded per AWS rules.
 */
struct sigv4_qcur {
	const char *p, *end;
	char pend[3];
	int npend, ipend;
};

static void sigv4_qcur_init(struct sigv4_qcur *c, const char *p, size_t n)
{
	c->p = p;
	c->end = p + n;
	c->npend = 0;
	c->ipend = 0;
}

/* Next canonical byte, or -1 at the end. */
static int sigv4_qcur_next(struct sigv4_qcur *c)
{
	unsigned char b;

	if (c->ipend < c->npend)
		return (unsigned char)c->pend[c->ipend++];
	if (c->p == c->end)
		return -1;
	b = (unsigned char)*c->p++;
	if (b == '%') {
		b = (unsigned char)(util_hexval((unsigned char)c->p[0]) << 4 |
				    util_hexval((unsigned char)c->p[1]));
		c->p += 2;
	}
	if (sigv4_unreserved(b))
		return b;
	c->pend[1] = sigv4_hex_upper[b >> 4];
	c->pend[2] = sigv4_hex_upper[b & 15];
	c->npend = 3;
	c->ipend = 1;
	return '%';
}

static int sigv4_qpart_cmp(const char *a, size_t alen, const char *b,
			   size_t blen)
{
	struct sigv4_qcur x, y;
	int p, q;

	sigv4_qcur_init(&x, a, alen);
	sigv4_qcur_init(&y, b, blen);
	do {
		p = sigv4_qcur_next(&x);
		q = sigv4_qcur_next(&y);
	} while (p == q && p >= 0);
	return p - q;
}

static int sigv4_qparam_cmp(const struct sigv4_qparam *a,
			    const struct sigv4_qparam *b)
{
	int r = sigv4_qpart_cmp(a->name, a->nlen, b->name, b->nlen);

	return r ? r : sigv4_qpart_cmp(a->val, a->vlen, b->val, b->vlen);
}

static void sigv4_sort_query(struct sigv4_qparam *qp, int n)
{
	int i, j;

	for (i = 1; i < n; i++) {
		struct sigv4_qparam x = qp[i];

		for (j = i; j > 0 && sigv4_qparam_cmp(&qp[j - 1], &x) > 0; j--)
			qp[j] = qp[j - 1];
		qp[j] = x;
	}
}

/* A component as sent: printable ASCII, no '#', well-formed %XX. */
static bool sigv4_qpart_ok(const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c <= 0x20 || c >= 0x7f || c == '#')
			return false;
		if (c != '%')
			continue;
		if (n - i < 3 || util_hexval((unsigned char)p[i + 1]) < 0 ||
		    util_hexval((unsigned char)p[i + 2]) < 0)
			return false;
		i += 2;
	}
	return true;
}

/* Splits q on '&' (empty pieces skipped); returns the count or -EINVAL. */
static int sigv4_parse_query(const char *q, struct sigv4_qparam *qp)
{
	int n = 0;

	while (q && *q) {
		const char *amp = strchr(q, '&');
		const char *end = amp ? amp : q + strlen(q);
		const char *eq = memchr(q, '=', (size_t)(end - q));

		if (end > q) {
			if (n == SIGV4_MAX_QUERY_PARAMS || eq == q)
				return -EINVAL;
			qp[n].name = q;
			qp[n].nlen = (size_t)((eq ? eq : end) - q);
			qp[n].val = eq ? eq + 1 : end;
			qp[n].vlen = (size_t)(end - qp[n].val);
			if (!sigv4_qpart_ok(qp[n].name, qp[n].nlen) ||
			    !sigv4_qpart_ok(qp[n].val, qp[n].vlen))
				return -EINVAL;
			n++;
		}
		q = amp ? amp + 1 : end;
	}
	return n;
}

static void sigv4_put_qpart(struct sigv4_sink *s, const char *p, size_t n)
{
	struct sigv4_qcur c;
	char tmp[64];
	size_t k = 0;
	int ch;

	sigv4_qcur_init(&c, p, n);
	while ((ch = sigv4_qcur_next(&c)) >= 0) {
		tmp[k++] = (char)ch;
		if (k == sizeof(tmp)) {
			sigv4_put(s, tmp, k);
			k = 0;
		}
	}
	sigv4_put(s, tmp, k);
}

static void sigv4_put_query(struct sigv4_sink *s,
			    const struct sigv4_qparam *qp, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (i > 0)
			sigv4_putc(s, '&');
		sigv4_put_qpart(s, qp[i].name, qp[i].nlen);
		sigv4_putc(s, '=');
		sigv4_put_qpart(s, qp[i].val, qp[i].vlen);
	}
}

/* ---- validation ---- */

/* Non-empty, at most max bytes of printable ASCII, none from forbid. */
static bool sigv4_token_ok(const char *s, size_t max, const char *forbid)
{
	size_t n;

	if (!s || !*s)
		return false;
	for (n = 0; s[n]; n++) {
		unsigned char c = (unsigned char)s[n];

		if (n == max || c <= 0x20 || c >= 0x7f || strchr(forbid, c))
			return false;
	}
	return true;
}

static bool sigv4_date_ok(const char *d)
{
	static const char pat[] = "ddddddddTddddddZ";
	size_t i;

	for (i = 0; i < sizeof(pat) - 1; i++) {
		unsigned char c = (unsigned char)d[i];

		if (pat[i] == 'd' ? !(c >= '0' && c <= '9') : c != pat[i])
			return false;
	}
	return d[i] == '\0';
}

/*
 * 64 lowercase hex digits, or an upper-case literal naming a payload mode
 * ("UNSIGNED-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", ...).
 */
static bool sigv4_payload_ok(const char *h)
{
	bool hex = true, word = true;
	size_t n;

	for (n = 0; h[n]; n++) {
		unsigned char c = (unsigned char)h[n];
		bool digit = c >= '0' && c <= '9';

		hex = hex && (digit || (c >= 'a' && c <= 'f'));
		word = word && (digit || (c >= 'A' && c <= 'Z') || c == '-');
	}
	if (hex && n == 64)
		return true;
	return word && n <= 64 && strstr(h, "PAYLOAD") != NULL;
}

/* Encoded path as sent: printable ASCII, no '?' or '#', good %XX. */
static bool sigv4_path_ok(const char *p)
{
	return !strchr(p, '?') && sigv4_qpart_ok(p, strlen(p));
}

static bool sigv4_method_ok(const char *m)
{
	size_t n;

	for (n = 0; m[n]; n++)
		if (n == 16 || m[n] < 'A' || m[n] > 'Z')
			return false;
	return n > 0;
}

static int sigv4_check_args(const struct sigv4_request *req,
			    const char *region, const char *service,
			    const char *amz_date,
			    const struct sigv4_creds *creds)
{
	if (!req || !creds || !amz_date || !req->method ||
	    !req->payload_hash || !creds->secret_key)
		return -EINVAL;
	if (!sigv4_method_ok(req->method) ||
	    (req->path && !sigv4_path_ok(req->path)) ||
	    !sigv4_payload_ok(req->payload_hash) || !sigv4_date_ok(amz_date))
		return -EINVAL;
	if (!sigv4_token_ok(region, SIGV4_MAX_SCOPE_LEN, "/,;=") ||
	    !sigv4_token_ok(service, SIGV4_MAX_SCOPE_LEN, "/,;=") ||
	    !sigv4_token_ok(creds->access_key, SIGV4_MAX_KEY_LEN, "/,;="))
		return -EINVAL;
	if (!*creds->secret_key ||
	    strlen(creds->secret_key) > SIGV4_MAX_KEY_LEN)
		return -EINVAL;
	return 0;
}

/* True if v, blanks trimmed, is exactly want. */
static bool sigv4_value_is(const char *v, const char *want)
{
	size_t n = strlen(want);

	while (sigv4_blank((unsigned char)*v))
		v++;
	if (strncmp(v, want, n) != 0)
		return false;
	for (v += n; *v; v++)
		if (!sigv4_blank((unsigned char)*v))
			return false;
	return true;
}

static bool sigv4_header_ok(const struct sigv4_header *h)
{
	const char *p;

	if (!h->name || !h->value || !*h->name)
		return false;
	for (p = h->name; *p; p++)
		if (!sigv4_tchar((unsigned char)*p))
			return false;
	for (p = h->value; *p; p++)	/* no CR/LF or other controls */
		if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
			return false;
	return true;
}

enum {
	SIGV4_SEEN_HOST = 1,
	SIGV4_SEEN_DATE = 2,
	SIGV4_SEEN_TOKEN = 4,
};

/* Checks one header; returns SIGV4_SEEN_* bits or -EINVAL. */
static int sigv4_check_header(const struct sigv4_header *h,
			      const char *amz_date, const char *payload_hash,
			      const char *token)
{
	if (!sigv4_header_ok(h))
		return -EINVAL;
	if (!sigv4_name_cmp(h->name, "host"))
		return sigv4_value_is(h->value, "") ? -EINVAL : SIGV4_SEEN_HOST;
	if (!sigv4_name_cmp(h->name, "x-amz-date"))
		return sigv4_value_is(h->value, amz_date) ? SIGV4_SEEN_DATE :
							    -EINVAL;
	if (!sigv4_name_cmp(h->name, "x-amz-content-sha256"))
		return sigv4_value_is(h->value, payload_hash) ? 0 : -EINVAL;
	if (!sigv4_name_cmp(h->name, "x-amz-security-token"))
		return !token || sigv4_value_is(h->value, token) ?
		       SIGV4_SEEN_TOKEN : -EINVAL;
	return 0;
}

static int sigv4_check_headers(const struct sigv4_request *req,
			       const char *amz_date, const char *token)
{
	int seen = 0, want = SIGV4_SEEN_HOST | SIGV4_SEEN_DATE;
	size_t i;

	if (req->nheaders > SIGV4_MAX_HEADERS || !req->headers)
		return -EINVAL;
	for (i = 0; i < req->nheaders; i++) {
		int r = sigv4_check_header(&req->headers[i], amz_date,
					   req->payload_hash, token);

		if (r < 0)
			return r;
		seen |= r;
	}
	if (token)
		want |= SIGV4_SEEN_TOKEN;
	return (seen & want) == want ? 0 : -EINVAL;
}

/* ---- the four steps ---- */

struct sigv4_sorted {
	const struct sigv4_request *req;
	uint8_t idx[SIGV4_MAX_HEADERS];
	struct sigv4_qparam qp[SIGV4_MAX_QUERY_PARAMS];
	int nq;
};

static void sigv4_put_creq(struct sigv4_sink *s, const struct sigv4_sorted *o)
{
	const struct sigv4_request *req = o->req;

	sigv4_puts(s, req->method);
	sigv4_putc(s, '\n');
	sigv4_puts(s, req->path && *req->path ? req->path : "/");
	sigv4_putc(s, '\n');
	sigv4_put_query(s, o->qp, o->nq);
	sigv4_putc(s, '\n');
	sigv4_put_headers(s, req->headers, o->idx, req->nheaders);
	sigv4_putc(s, '\n');
	sigv4_put_signed(s, req->headers, o->idx, req->nheaders);
	sigv4_putc(s, '\n');
	sigv4_puts(s, req->payload_hash);
}

/* Hashes the canonical request into hash_hex, copying it to creq if set. */
static int sigv4_canonical(const struct sigv4_sorted *o, char *creq,
			   size_t creq_len, char hash_hex[65])
{
	struct sigv4_sink s = { 0 };
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	s.md = EVP_MD_CTX_new();
	if (!s.md)
		return -ENOMEM;
	if (EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) != 1)
		s.err = -ENOMEM;
	sigv4_sink_buf(&s, creq, creq_len);
	sigv4_put_creq(&s, o);
	sigv4_flush(&s);
	if (!s.err && (EVP_DigestFinal_ex(s.md, md, &mdlen) != 1 ||
		       mdlen != SIGV4_SHA256_LEN))
		s.err = -ENOMEM;
	EVP_MD_CTX_free(s.md);
	if (!s.err)
		sigv4_hex(md, mdlen, hash_hex);
	return s.err;
}

/* "20150830/us-east-1/service/aws4_request" */
static void sigv4_put_scope(struct sigv4_sink *s, const char *amz_date,
			    const char *region, const char *service)
{
	sigv4_put(s, amz_date, 8);
	sigv4_putc(s, '/');
	sigv4_puts(s, region);
	sigv4_putc(s, '/');
	sigv4_puts(s, service);
	sigv4_puts(s, "/" SIGV4_TERMINATOR);
}

static int sigv4_build_sts(char *dst, size_t cap, const char *amz_date,
			   const char *region, const char *service,
			   const char *creq_hash)
{
	struct sigv4_sink s = { 0 };

	sigv4_sink_buf(&s, dst, cap);
	sigv4_puts(&s, SIGV4_ALGO "\n");
	sigv4_puts(&s, amz_date);
	sigv4_putc(&s, '\n');
	sigv4_put_scope(&s, amz_date, region, service);
	sigv4_putc(&s, '\n');
	sigv4_puts(&s, creq_hash);
	return s.err;
}

static int sigv4_hmac(const void *key, size_t klen, const void *msg,
		      size_t mlen, unsigned char out[SIGV4_SHA256_LEN])
{
	unsigned int n = 0;

	if (!HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &n) ||
	    n != SIGV4_SHA256_LEN)
		return -ENOMEM;
	return 0;
}

/* Derives the signing key and signs sts; sig_hex gets 64 hex digits. */
static int sigv4_signature(const char *secret, const char *amz_date,
			   const char *region, const char *service,
			   const char *sts, char sig_hex[65])
{
	unsigned char kbuf[4 + SIGV4_MAX_KEY_LEN];
	unsigned char a[SIGV4_SHA256_LEN], b[SIGV4_SHA256_LEN];
	size_t slen = strlen(secret);
	int err;

	memcpy(kbuf, "AWS4", 4);
	memcpy(kbuf + 4, secret, slen);
	err = sigv4_hmac(kbuf, 4 + slen, amz_date, 8, a);
	if (!err)
		err = sigv4_hmac(a, sizeof(a), region, strlen(region), b);
	if (!err)
		err = sigv4_hmac(b, sizeof(b), service, strlen(service), a);
	if (!err)
		err = sigv4_hmac(a, sizeof(a), SIGV4_TERMINATOR,
				 sizeof(SIGV4_TERMINATOR) - 1, b);
	if (!err)
		err = sigv4_hmac(b, sizeof(b), sts, strlen(sts), a);
	if (!err)
		sigv4_hex(a, sizeof(a), sig_hex);
	OPENSSL_cleanse(kbuf, sizeof(kbuf));
	OPENSSL_cleanse(a, sizeof(a));
	OPENSSL_cleanse(b, sizeof(b));
	return err;
}

static int sigv4_build_auth(char *out, size_t cap,
			    const struct sigv4_sorted *o,
			    const char *access_key, const char *amz_date,
			    const char *region, const char *service,
			    const char *sig_hex)
{
	const struct sigv4_request *req = o->req;
	struct sigv4_sink s = { 0 };

	sigv4_sink_buf(&s, out, cap);
	sigv4_puts(&s, SIGV4_ALGO " Credential=");
	sigv4_puts(&s, access_key);
	sigv4_putc(&s, '/');
	sigv4_put_scope(&s, amz_date, region, service);
	sigv4_puts(&s, ", SignedHeaders=");
	sigv4_put_signed(&s, req->headers, o->idx, req->nheaders);
	sigv4_puts(&s, ", Signature=");
	sigv4_puts(&s, sig_hex);
	return s.err;
}

static int sigv4_copy(char *dst, size_t cap, const char *src)
{
	struct sigv4_sink s = { 0 };

	sigv4_sink_buf(&s, dst, cap);
	sigv4_puts(&s, src);
	return s.err;
}

static void sigv4_clear(char *buf, size_t len)
{
	if (buf && len)
		buf[0] = '\0';
}

/* ---- public ---- */

static int sigv4_prepare(struct sigv4_sorted *o,
			 const struct sigv4_request *req, const char *region,
			 const char *service, const char *amz_date,
			 const struct sigv4_creds *creds)
{
	const char *token;
	int err;

	err = sigv4_check_args(req, region, service, amz_date, creds);
	if (err)
		return err;
	token = creds->session_token && *creds->session_token ?
		creds->session_token : NULL;
	err = sigv4_check_headers(req, amz_date, token);
	if (err)
		return err;
	o->req = req;
	o->nq = sigv4_parse_query(req->query, o->qp);
	if (o->nq < 0)
		return o->nq;
	sigv4_sort_query(o->qp, o->nq);
	sigv4_sort_headers(req->headers, req->nheaders, o->idx);
	return 0;
}

int sigv4_sign(const struct sigv4_request *req, const char *region,
	       const char *service, const char *amz_date,
	       const struct sigv4_creds *creds, char *out, size_t out_len,
	       char *creq, size_t creq_len, char *sts, size_t sts_len)
{
	struct sigv4_sorted o;
	char hash[65], sig[65], stsbuf[SIGV4_STS_MAX];
	int err;

	sigv4_clear(out, out_len);
	sigv4_clear(creq, creq_len);
	sigv4_clear(sts, sts_len);
	if (!out)
		return -EINVAL;
	err = sigv4_prepare(&o, req, region, service, amz_date, creds);
	if (!err)
		err = sigv4_canonical(&o, creq, creq_len, hash);
	if (!err)
		err = sigv4_build_sts(stsbuf, sizeof(stsbuf), amz_date, region,
				      service, hash);
	if (!err)
		err = sigv4_signature(creds->secret_key, amz_date, region,
				      service, stsbuf, sig);
	if (!err && sts)
		err = sigv4_copy(sts, sts_len, stsbuf);
	if (!err)
		err = sigv4_build_auth(out, out_len, &o, creds->access_key,
				       amz_date, region, service, sig);
	if (err) {
		sigv4_clear(out, out_len);
		sigv4_clear(creq, creq_len);
		sigv4_clear(sts, sts_len);
	}
	return err;
}

int sigv4_uri_encode(const char *in, size_t in_len, int keep_slash, char *out,
		     size_t out_len)
{
	size_t i, n = 0;

	if (!out || (!in && in_len))
		return -EINVAL;
	if (!out_len)
		return -ENAMETOOLONG;
	for (i = 0; i < in_len; i++) {
		unsigned char c = (unsigned char)in[i];
		bool keep = sigv4_unreserved(c) || (keep_slash && c == '/');

		if ((keep ? 1u : 3u) >= out_len - n || n > INT_MAX - 3) {
			out[0] = '\0';
			return -ENAMETOOLONG;
		}
		if (keep) {
			out[n++] = (char)c;
			continue;
		}
		out[n++] = '%';
		out[n++] = sigv4_hex_upper[c >> 4];
		out[n++] = sigv4_hex_upper[c & 15];
	}
	out[n] = '\0';
	return (int)n;
}

void sigv4_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!out)
		return;
	if (!data && len) {
		out[0] = '\0';
		return;
	}
	if (!data)
		data = "";
	if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 ||
	    n != SIGV4_SHA256_LEN) {
		out[0] = '\0';
		return;
	}
	sigv4_hex(md, n, out);
}

void sigv4_amz_date(time_t t, char out[17])
{
	struct tm tm;

	if (!out)
		return;
	if (!gmtime_r(&t, &tm) ||
	    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm) != 16)
		out[0] = '\0';
}
