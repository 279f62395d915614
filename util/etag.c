/* SPDX-License-Identifier: MIT */
/*
 * etag.c - an object's version (ETag) in 24 bytes instead of its text
 * (util.h, struct util_etag): what a name's inode holds for every name
 * the kernel knows, so its size counts (docs/performance.md, "Namespace:
 * warm remounts, a million objects").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int hexv(char c)
{
	return c >= '0' && c <= '9' ? c - '0' :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* s in S3's form (32 lower-case hex digits, "-N" with N 1-65535 written
 * without leading zeros): its bytes and N, so that the text comes back
 * the same; false for any other text. */
static bool md5_form(const char *s, uint8_t md5[16], uint16_t *parts)
{
	unsigned long n = 0;
	size_t i;

	for (i = 0; i < 32; i += 2) {
		int hi = hexv(s[i]), lo = hi < 0 ? -1 : hexv(s[i + 1]);

		if (lo < 0)
			return false;
		md5[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	*parts = 0;
	if (!s[32])
		return true;
	if (s[32] != '-' || s[33] < '1' || s[33] > '9')
		return false;
	for (i = 33; s[i] >= '0' && s[i] <= '9' && i < 39; i++)
		n = n * 10 + (unsigned long)(s[i] - '0');
	if (s[i] || n > 65535)
		return false;
	*parts = (uint16_t)n;
	return true;
}

void util_etag_free(struct util_etag *t)
{
	if (t->kind == UTIL_ETAG_TEXT)
		free(t->u.text);
	t->kind = UTIL_ETAG_NONE;
}

void util_etag_set(struct util_etag *t, const char *s)
{
	struct util_etag n = { .kind = UTIL_ETAG_NONE };

	if (!*s) {
		/* none */
	} else if (md5_form(s, n.u.md5, &n.parts)) {
		n.kind = UTIL_ETAG_MD5;
	} else if ((n.u.text = strdup(s))) {
		n.kind = UTIL_ETAG_TEXT;
	} /* else none: out of memory, shown as a changed version */
	util_etag_free(t);
	*t = n;
}

void util_etag_text(const struct util_etag *t, char out[80])
{
	static const char hex[] = "0123456789abcdef";

	out[0] = '\0';
	if (t->kind == UTIL_ETAG_TEXT) {
		snprintf(out, 80, "%s", t->u.text);
	} else if (t->kind == UTIL_ETAG_MD5) {
		for (int i = 0; i < 16; i++) {
			out[2 * i] = hex[t->u.md5[i] >> 4];
			out[2 * i + 1] = hex[t->u.md5[i] & 15];
		}
		out[32] = '\0';
		if (t->parts)
			snprintf(out + 32, 80 - 32, "-%u", (unsigned)t->parts);
	}
}

bool util_etag_is(const struct util_etag *t, const char *s)
{
	uint8_t md5[16];
	uint16_t parts;

	switch (t->kind) {
	case UTIL_ETAG_MD5:
		return md5_form(s, md5, &parts) && parts == t->parts &&
		       !memcmp(md5, t->u.md5, 16);
	case UTIL_ETAG_TEXT:
		return !strcmp(s, t->u.text);
	default:
		return !*s;
	}
}

