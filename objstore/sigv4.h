/* SPDX-License-Identifier: MIT */
/*
 * sigv4.h - AWS Signature Version 4 for S3 requests (module-internal).
 *
 * The caller builds the request exactly as it will be sent (path and query
 * already percent-encoded, every header that must be signed, the payload
 * hash) and sigv4_sign() returns the Authorization header value.  No
 * buffer is allocated (libcrypto's own digest/HMAC contexts aside): the
 * canonical request is streamed into SHA-256, so its size is bounded only
 * by the caller's buffer when it asks for a copy.
 *
 * Rules implemented (S3 flavour): the canonical URI is the path verbatim
 * ("/" if empty; no dot-segment normalisation, no double encoding); query
 * parameters are re-normalised (each name and value is percent-decoded and
 * re-encoded with sigv4_uri_encode rules, so "%7e" signs as "~" and a raw
 * "/" as "%2F"), then sorted by name, then value, on the encoded bytes; a
 * parameter without '=' signs as "name="; header names are lower-cased,
 * values trimmed with inner runs of blanks collapsed to one space,
 * duplicates joined with ',' in the order given, and sorted by name.
 *
 * All functions are thread-safe and return 0 or a negative errno.
 */
#ifndef FMFS_OBJSTORE_SIGV4_H
#define FMFS_OBJSTORE_SIGV4_H

#include <stddef.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIGV4_MAX_HEADERS	64	/* headers per request */
#define SIGV4_MAX_QUERY_PARAMS	64	/* query parameters per request */
#define SIGV4_MAX_SCOPE_LEN	64	/* region, service */
#define SIGV4_MAX_KEY_LEN	128	/* access key id, secret key */
#define SIGV4_AUTH_MAX		4096	/* a comfortable Authorization buffer */
#define SIGV4_CREQ_MAX		16384	/* a comfortable canonical-request buffer */
#define SIGV4_STS_MAX		512	/* always enough for the string to sign */

struct sigv4_header {
	const char *name;
	const char *value;
};

struct sigv4_creds {
	const char *access_key;
	const char *secret_key;
	const char *session_token;	/* NULL or "" when not used */
};

struct sigv4_request {
	const char *method;	/* "GET" */
	/* Canonical URI, already URI-encoded as sent: "/bucket/a%20b/c". */
	const char *path;
	/* Query as sent, encoded, without '?'; NULL or "" for none. */
	const char *query;
	/*
	 * Headers that will be sent and must be signed.  Must include host and
	 * x-amz-date (equal to amz_date); x-amz-security-token (equal to the
	 * token) when creds carry a session token; x-amz-content-sha256, when
	 * present, must equal payload_hash.
	 */
	const struct sigv4_header *headers;
	size_t nheaders;
	/* Lowercase hex SHA-256 of the body, or "UNSIGNED-PAYLOAD". */
	const char *payload_hash;
};

/*
 * Signs req.  amz_date is "YYYYMMDDTHHMMSSZ".  Writes the full Authorization
 * header value ("AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/
 * aws4_request, SignedHeaders=host;x-amz-date, Signature=<hex>") into out.
 * If creq / sts are non-NULL, also writes the canonical request and the
 * string to sign there (for tests and --verbose).  Every output is
 * NUL-terminated, and set to "" on failure.
 *
 * Returns 0; -EINVAL for a bad or inconsistent request (see above; also
 * more than SIGV4_MAX_HEADERS headers or SIGV4_MAX_QUERY_PARAMS parameters,
 * CR/LF in a header value, a malformed %-escape); -ENAMETOOLONG if a buffer
 * is too small; -ENOMEM if libcrypto fails.
 */
int sigv4_sign(const struct sigv4_request *req, const char *region,
	       const char *service, const char *amz_date,
	       const struct sigv4_creds *creds, char *out, size_t out_len,
	       char *creq, size_t creq_len, char *sts, size_t sts_len);

/*
 * Percent-encodes in_len bytes of in per AWS rules: A-Z a-z 0-9 - _ . ~ are
 * kept, '/' is kept iff keep_slash, every other byte becomes %XX (uppercase
 * hex).  Returns the length written (excluding the NUL), -ENAMETOOLONG if
 * out_len is too small (out is then ""), -EINVAL on NULL pointers.
 */
int sigv4_uri_encode(const char *in, size_t in_len, int keep_slash, char *out,
		     size_t out_len);

/* Lowercase hex SHA-256 of len bytes at data into out[65] ("" on failure). */
void sigv4_sha256_hex(const void *data, size_t len, char out[65]);

/* Formats t (UTC) as "YYYYMMDDTHHMMSSZ" into out[17] ("" if unrepresentable). */
void sigv4_amz_date(time_t t, char out[17]);

#ifdef __cplusplus
}
#endif

#endif /* FMFS_OBJSTORE_SIGV4_H */
