/* SPDX-License-Identifier: MIT */
/*
 * url.c - parsing of store URLs (s3://BUCKET[/KEY], file:///DIR) and of
 * endpoint URLs (http(s)://HOST[:PORT]).  Every rejection says what was
 * wrong, since these strings come straight from the command line.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore_int.h"

bool obj_bucket_name_valid(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = b[i];

		if (!(islower((unsigned char)c) || isdigit((unsigned char)c) ||
		      c == '-' || c == '.' || c == '_'))
			return false;
	}
	return isalnum((unsigned char)b[0]) && isalnum((unsigned char)b[n - 1]);
}

void obj_url_release(struct obj_url *u)
{
	free(u->bucket);
	free(u->key);
	free(u->path);
	memset(u, 0, sizeof(*u));
}

int obj_url_parse(const char *url, struct obj_url *u, char *msg, size_t ml)
{
	const char *p, *slash;

	memset(u, 0, sizeof(*u));
	if (!url || !*url) {
		snprintf(msg, ml, "empty URL: expected s3://BUCKET[/PREFIX] "
			 "or file:///DIR");
		return -EINVAL;
	}
	if (!strncmp(url, "s3://", 5)) {
		p = url + 5;
		slash = strchr(p, '/');
		u->scheme = OBJ_SCHEME_S3;
		u->bucket = slash ? strndup(p, (size_t)(slash - p)) : strdup(p);
		u->key = strdup(slash ? slash + 1 : "");
		if (!u->bucket || !u->key)
			goto nomem;
		if (!*u->bucket) {
			snprintf(msg, ml, "'%s': no bucket name after s3://",
				 url);
			goto bad;
		}
		if (!obj_bucket_name_valid(u->bucket)) {
			snprintf(msg, ml, "'%s': '%s' is not a valid bucket "
				 "name (3-63 characters: a-z 0-9 . - _)",
				 url, u->bucket);
			goto bad;
		}
		if (strlen(u->key) > OBJ_KEY_MAX) {
			snprintf(msg, ml, "'%.64s...': key longer than %d "
				 "bytes", url, OBJ_KEY_MAX);
			goto bad;
		}
		return 0;
	}
	if (!strncmp(url, "file://", 7)) {
		p = url + 7;
		u->scheme = OBJ_SCHEME_FILE;
		if (*p != '/') {
			snprintf(msg, ml, "'%s': a file URL needs an absolute "
				 "path (file:///DIR, three slashes)", url);
			goto bad;
		}
		u->path = strdup(p);
		if (!u->path)
			goto nomem;
		/* Drop trailing slashes but keep "/". */
		for (size_t n = strlen(u->path); n > 1 &&
		     u->path[n - 1] == '/'; n--)
			u->path[n - 1] = '\0';
		return 0;
	}
	p = strstr(url, "://");
	if (p)
		snprintf(msg, ml, "'%s': unknown scheme '%.*s' (use s3:// or "
			 "file://)", url, (int)(p - url), url);
	else
		snprintf(msg, ml, "'%s' is not a URL: expected "
			 "s3://BUCKET[/PREFIX] or file:///DIR", url);
	obj_url_release(u);
	return -EINVAL;
nomem:
	snprintf(msg, ml, "out of memory");
	obj_url_release(u);
	return -ENOMEM;
bad:
	obj_url_release(u);
	return -EINVAL;
}

int obj_endpoint_parse(const char *url, struct obj_endpoint *e, char *msg,
		       size_t ml)
{
	const char *p, *host, *end;
	size_t hl;

	memset(e, 0, sizeof(*e));
	if (!strncmp(url, "http://", 7)) {
		p = url + 7;
	} else if (!strncmp(url, "https://", 8)) {
		p = url + 8;
		e->https = true;
	} else {
		snprintf(msg, ml, "endpoint '%s' must start with http:// or "
			 "https://", url);
		return -EINVAL;
	}
	if (*p == '[') { /* [IPv6]:port */
		host = p + 1;
		end = strchr(host, ']');
		if (!end) {
			snprintf(msg, ml, "endpoint '%s': unclosed '['", url);
			return -EINVAL;
		}
		hl = (size_t)(end - host);
		p = end + 1;
	} else {
		host = p;
		hl = strcspn(p, ":/");
		p += hl;
	}
	if (hl == 0 || hl >= sizeof(e->host)) {
		snprintf(msg, ml, "endpoint '%s': no host name", url);
		return -EINVAL;
	}
	memcpy(e->host, host, hl);
	e->host[hl] = '\0';
	if (*p == ':') {
		char *q;
		unsigned long port = strtoul(p + 1, &q, 10);

		if (q == p + 1 || port == 0 || port > 65535) {
			snprintf(msg, ml, "endpoint '%s': bad port", url);
			return -EINVAL;
		}
		e->port = (unsigned)port;
		p = q;
	}
	if (*p && strcmp(p, "/")) {
		snprintf(msg, ml, "endpoint '%s': a path after the host is not "
			 "supported (give http(s)://HOST[:PORT])", url);
		return -EINVAL;
	}
	return 0;
}
