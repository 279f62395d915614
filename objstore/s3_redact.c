/* SPDX-License-Identifier: MIT */
/*
 * s3_redact.c - keeps credential material out of everything the S3
 * backend prints.  `fmfs obj -v -v` shows libcurl's HTTP detail through
 * our own CURLOPT_DEBUGFUNCTION (s3_engine.c), and every line of it, our
 * own request lines and the server's error messages pass through
 * s3_redact() first.  What goes (docs/objstore.md, "Verbose output"):
 *
 *   Authorization: AWS4-HMAC-SHA256 Credential=AKID/20250101/us-east-1/s3/
 *       aws4_request, SignedHeaders=..., Signature=<redacted>
 *   Authorization of any other scheme: the whole value
 *   x-amz-security-token: <redacted>           (header, any case)
 *   X-Amz-Signature= X-Amz-Credential= X-Amz-Security-Token=  (query
 *       parameters of presigned URLs): their values
 *   any "Signature=" value; the secret key and the session token
 *       themselves wherever they appear (8 characters or more)
 *
 * The access key id and the credential scope stay in the Authorization
 * line: they are not secret (AWS prints them in its own errors) and they
 * are what a person needs to see to debug a wrong key or region.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "s3_int.h"

#define REDACTED "<redacted>"
#define LITERAL_MIN 8 /* shorter secrets would hide ordinary text */

/* Where a value that follows "name=" or "name:" ends. */
static size_t value_len(const char *s, size_t n, bool header)
{
	size_t i = 0;

	while (i < n && s[i] != '\r' && s[i] != '\n' &&
	       (header || (s[i] != '&' && s[i] != ',' && s[i] != ' ' &&
			   s[i] != '"' && s[i] != '\'' && s[i] != '<')))
		i++;
	return i;
}

struct out {
	char *buf;
	size_t size, len; /* len excludes the NUL; stops at size - 1 */
};

static void put(struct out *o, const char *s, size_t n)
{
	size_t room = o->size - 1 - o->len;

	if (n > room)
		n = room;
	memcpy(o->buf + o->len, s, n);
	o->len += n;
}

/* Names whose value is replaced, and whether the value runs to the end
 * of the line (a header) or to the next separator (a query parameter or
 * an Authorization field). */
static const struct {
	const char *name;
	bool header;
} names[] = {
	{ "x-amz-security-token:", true },
	{ "x-amz-security-token=", false },
	{ "x-amz-credential=", false },
	{ "signature=", false }, /* X-Amz-Signature= too */
};

/* At a line start: an Authorization header without any Signature= field
 * (another scheme) loses its whole value. */
static size_t other_auth(const char *s, size_t n)
{
	static const char h[] = "authorization:";
	size_t hl = sizeof(h) - 1, vl;

	if (n < hl || strncasecmp(s, h, hl))
		return 0;
	vl = value_len(s + hl, n - hl, true);
	for (size_t i = hl; i + 10 <= hl + vl; i++)
		if (!strncasecmp(s + i, "signature=", 10))
			return 0;
	return hl;
}

size_t s3_redact(const struct obj_creds *cr, const char *in, size_t n,
		 char *buf, size_t size)
{
	const char *lit[2] = { cr ? cr->secret_key : "",
			       cr ? cr->session_token : "" };
	size_t litn[2] = { strlen(lit[0]), strlen(lit[1]) };
	struct out o = { buf, size, 0 };
	size_t i = 0;
	bool line_start = true;

	util_assert(size > 0);
	while (i < n) {
		size_t k, skip = 0;

		if (line_start && (k = other_auth(in + i, n - i))) {
			put(&o, in + i, k);
			put(&o, " " REDACTED, sizeof(REDACTED));
			i += k + value_len(in + i + k, n - i - k, true);
			line_start = false;
			continue;
		}
		for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
			size_t nl = strlen(names[j].name);

			if (n - i >= nl && !strncasecmp(in + i, names[j].name,
							nl)) {
				size_t v = value_len(in + i + nl, n - i - nl,
						     names[j].header);

				put(&o, in + i, nl);
				if (names[j].header)
					put(&o, " ", 1);
				put(&o, REDACTED, sizeof(REDACTED) - 1);
				skip = nl + v;
				break;
			}
		}
		for (int j = 0; !skip && j < 2; j++) {
			if (litn[j] >= LITERAL_MIN && n - i >= litn[j] &&
			    !memcmp(in + i, lit[j], litn[j])) {
				put(&o, REDACTED, sizeof(REDACTED) - 1);
				skip = litn[j];
			}
		}
		if (skip) {
			i += skip;
			line_start = false;
			continue;
		}
		line_start = in[i] == '\n';
		put(&o, in + i, 1);
		i++;
	}
	o.buf[o.len] = '\0';
	return o.len;
}
