/* SPDX-License-Identifier: MIT */
/*
 * s3_xml.c - reading S3's XML replies with expat: ListObjectsV2 pages,
 * <Error> documents, single values (UploadId, ETag) and DeleteObjects
 * results.  Replies are untrusted: any document type declaration is
 * refused (no entities, no billion laughs), element text is bounded, the
 * nesting depth is bounded, and counts are bounded by the caller's
 * max-keys through S3_XML_MAX_BYTES.  With encoding-type=url the server
 * percent-encodes keys; we decode them only if the reply says so.
 */
#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "s3_int.h"

#define XML_DEPTH_MAX 16
#define XML_TEXT_MAX (4 * OBJ_KEY_MAX)

struct xml_ctx {
	XML_Parser p;
	char path[XML_DEPTH_MAX][32]; /* element names from the root */
	int depth;
	char text[XML_TEXT_MAX + 1];
	size_t tlen;
	bool overflow;
	bool failed;
	char msg[128];
	/* consumer */
	void (*on_end)(struct xml_ctx *x, const char *name, const char *text);
	void *arg;
};

static void xml_fail(struct xml_ctx *x, const char *msg)
{
	if (!x->failed)
		snprintf(x->msg, sizeof(x->msg), "%s", msg);
	x->failed = true;
	XML_StopParser(x->p, XML_FALSE);
}

static void XMLCALL on_start(void *arg, const XML_Char *name,
			     const XML_Char **attrs)
{
	struct xml_ctx *x = arg;

	(void)attrs;
	if (x->depth >= XML_DEPTH_MAX) {
		xml_fail(x, "XML nested too deep");
		return;
	}
	snprintf(x->path[x->depth++], sizeof(x->path[0]), "%s", name);
	x->tlen = 0;
	x->overflow = false;
}

static void XMLCALL on_end(void *arg, const XML_Char *name)
{
	struct xml_ctx *x = arg;

	x->text[x->tlen] = '\0';
	if (x->overflow)
		xml_fail(x, "XML element text too long");
	else if (x->on_end)
		x->on_end(x, name, x->text);
	if (x->depth > 0)
		x->depth--;
	x->tlen = 0;
}

static void XMLCALL on_text(void *arg, const XML_Char *s, int len)
{
	struct xml_ctx *x = arg;

	if (x->tlen + (size_t)len > XML_TEXT_MAX) {
		x->overflow = true;
		return;
	}
	memcpy(x->text + x->tlen, s, (size_t)len);
	x->tlen += (size_t)len;
}

static void XMLCALL on_doctype(void *arg, const XML_Char *name,
			       const XML_Char *sysid, const XML_Char *pubid,
			       int has_internal)
{
	(void)name; (void)sysid; (void)pubid; (void)has_internal;
	xml_fail(arg, "XML with a document type declaration refused");
}

/* Parses xml[0..len); returns 0, or -1 with x->msg set. */
static int xml_run(struct xml_ctx *x, const char *xml, size_t len)
{
	int ok;

	if (!xml || !len) {
		snprintf(x->msg, sizeof(x->msg), "empty XML reply");
		return -1;
	}
	x->p = XML_ParserCreate("UTF-8");
	if (!x->p) {
		snprintf(x->msg, sizeof(x->msg), "out of memory");
		return -1;
	}
	XML_SetUserData(x->p, x);
	XML_SetElementHandler(x->p, on_start, on_end);
	XML_SetCharacterDataHandler(x->p, on_text);
	XML_SetStartDoctypeDeclHandler(x->p, on_doctype);
	ok = XML_Parse(x->p, xml, (int)len, XML_TRUE) == XML_STATUS_OK;
	if (!ok && !x->failed)
		snprintf(x->msg, sizeof(x->msg), "XML error at line %lu: %s",
			 (unsigned long)XML_GetCurrentLineNumber(x->p),
			 XML_ErrorString(XML_GetErrorCode(x->p)));
	XML_ParserFree(x->p);
	return ok && !x->failed ? 0 : -1;
}

/* Is the element being closed at path root/.../name (depth given)? */
static bool at(const struct xml_ctx *x, int depth, const char *parent)
{
	return x->depth == depth &&
	       (!parent || !strcmp(x->path[depth - 2], parent));
}

/* ---- <Error> ---- */

static void error_end(struct xml_ctx *x, const char *name, const char *text)
{
	struct s3_xml_error *e = x->arg;

	if (x->depth == 1 && strcmp(name, "Error"))
		return;
	if (strcmp(x->path[0], "Error"))
		return;
	if (at(x, 2, "Error") && !strcmp(name, "Code"))
		snprintf(e->code, sizeof(e->code), "%s", text);
	else if (at(x, 2, "Error") && !strcmp(name, "Message"))
		snprintf(e->message, sizeof(e->message), "%s", text);
}

int s3_xml_parse_error(const char *xml, size_t len, struct s3_xml_error *out)
{
	struct xml_ctx *x = calloc(1, sizeof(*x));
	int r;

	memset(out, 0, sizeof(*out));
	if (!x)
		return 0;
	x->on_end = error_end;
	x->arg = out;
	r = xml_run(x, xml, len) == 0 && !strcmp(x->path[0], "Error");
	free(x);
	return r;
}

/* ---- a single value ---- */

struct find_arg {
	const char *name;
	char *out;
	size_t out_len;
	int found;
};

static void find_end(struct xml_ctx *x, const char *name, const char *text)
{
	struct find_arg *f = x->arg;

	if (!f->found && !strcmp(name, f->name)) {
		if (strlen(text) >= f->out_len) {
			xml_fail(x, "value too long");
			return;
		}
		strcpy(f->out, text);
		f->found = 1;
	}
}

int s3_xml_find(const char *xml, size_t len, const char *name, char *out,
		size_t out_len)
{
	struct xml_ctx *x = calloc(1, sizeof(*x));
	struct find_arg f = { name, out, out_len, 0 };
	int r;

	if (!x)
		return -1;
	x->on_end = find_end;
	x->arg = &f;
	r = xml_run(x, xml, len) ? -1 : f.found;
	free(x);
	return r;
}

/* ---- ListObjectsV2 ---- */

struct list_arg {
	struct obj_list_page *page;
	size_t strip;            /* bytes of store prefix to remove */
	bool url_encoded;
	size_t cap_entries, cap_prefixes;
	struct obj_entry cur;
	char *cur_key_raw;
	bool truncated;
};

static int64_t parse_iso8601(const char *s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (!strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
		return 0;
	return (int64_t)timegm(&tm);
}

/* Decodes %XX (and '+' as space, as S3's url encoding does) in place. */
static void url_decode(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (*s == '%' && util_hexval(s[1]) >= 0 && util_hexval(s[2]) >= 0) {
			*o++ = (char)(util_hexval(s[1]) * 16 + util_hexval(s[2]));
			s += 2;
		} else if (*s == '+') {
			*o++ = ' ';
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Turns a raw key into what the caller sees, in place: decoded (when
 * the reply said EncodingType url, which may come after the keys), store
 * prefix removed.  -1 if the key is not under the prefix. */
static int visible_key(char *k, bool url_encoded, size_t strip)
{
	if (url_encoded)
		url_decode(k);
	if (strlen(k) < strip)
		return -1;
	memmove(k, k + strip, strlen(k + strip) + 1);
	return 0;
}

static bool grow(void **arr, size_t *cap, size_t n, size_t sz)
{
	void *a;

	if (n < *cap)
		return true;
	*cap = *cap ? *cap * 2 : 64;
	a = realloc(*arr, *cap * sz);
	if (!a)
		return false;
	*arr = a;
	return true;
}

static void list_end(struct xml_ctx *x, const char *name, const char *text)
{
	struct list_arg *l = x->arg;
	struct obj_list_page *pg = l->page;

	if (strcmp(x->path[0], "ListBucketResult")) {
		xml_fail(x, "not a ListBucketResult");
		return;
	}
	if (at(x, 2, NULL)) {
		if (!strcmp(name, "EncodingType"))
			l->url_encoded = !strcmp(text, "url");
		else if (!strcmp(name, "IsTruncated"))
			l->truncated = !strcmp(text, "true");
		else if (!strcmp(name, "NextContinuationToken")) {
			free(pg->next_token);
			if (!(pg->next_token = strdup(text)))
				xml_fail(x, "out of memory");
		}
		else if (!strcmp(name, "Contents")) {
			if (!l->cur_key_raw) {
				xml_fail(x, "<Contents> without <Key>");
				return;
			}
			if (!grow((void **)&pg->entries, &l->cap_entries,
				  pg->nentries, sizeof(*pg->entries))) {
				xml_fail(x, "out of memory");
				return;
			}
			l->cur.key = l->cur_key_raw; /* decoded after parsing */
			l->cur_key_raw = NULL;
			pg->entries[pg->nentries++] = l->cur;
			memset(&l->cur, 0, sizeof(l->cur));
		}
		return;
	}
	if (at(x, 3, "Contents")) {
		if (!strcmp(name, "Key")) {
			free(l->cur_key_raw);
			if (!(l->cur_key_raw = strdup(text)))
				xml_fail(x, "out of memory");
		} else if (!strcmp(name, "Size")) {
			char *end;

			errno = 0;
			l->cur.size_bytes = strtoull(text, &end, 10);
			if (end == text || *end || errno || text[0] == '-' ||
			    text[0] == '+' || text[0] == ' ')
				xml_fail(x, "<Size> is not a number");
		} else if (!strcmp(name, "LastModified")) {
			l->cur.mtime_s = parse_iso8601(text);
		} else if (!strcmp(name, "ETag")) {
			const char *t = text;
			size_t n = strlen(t);

			if (n >= 2 && t[0] == '"' && t[n - 1] == '"')
				t++, n -= 2;
			if (n >= sizeof(l->cur.etag))
				n = sizeof(l->cur.etag) - 1;
			memcpy(l->cur.etag, t, n);
			l->cur.etag[n] = '\0';
		}
		return;
	}
	if (at(x, 3, "CommonPrefixes") && !strcmp(name, "Prefix")) {
		char *k;

		if (!grow((void **)&pg->prefixes, &l->cap_prefixes,
			  pg->nprefixes, sizeof(*pg->prefixes))) {
			xml_fail(x, "out of memory");
			return;
		}
		if (!(k = strdup(text)))
			xml_fail(x, "out of memory");
		else
			pg->prefixes[pg->nprefixes++] = k;
	}
}

int s3_xml_parse_list(const char *xml, size_t len, size_t strip,
		      struct obj_list_page *page, char *msg, size_t ml)
{
	struct xml_ctx *x = calloc(1, sizeof(*x));
	struct list_arg l = { .page = page, .strip = strip };
	int r;

	if (!x) {
		snprintf(msg, ml, "out of memory");
		return -ENOMEM;
	}
	x->on_end = list_end;
	x->arg = &l;
	r = xml_run(x, xml, len);
	free(l.cur_key_raw);
	free(l.cur.key);
	if (r == 0 && l.truncated && !page->next_token) {
		snprintf(x->msg, sizeof(x->msg), "IsTruncated without "
			 "NextContinuationToken");
		r = -1;
	}
	for (size_t i = 0; r == 0 && i < page->nentries; i++)
		if (visible_key(page->entries[i].key, l.url_encoded, strip)) {
			snprintf(x->msg, sizeof(x->msg), "key outside the "
				 "requested prefix");
			r = -1;
		}
	for (size_t i = 0; r == 0 && i < page->nprefixes; i++)
		if (visible_key(page->prefixes[i], l.url_encoded, strip)) {
			snprintf(x->msg, sizeof(x->msg), "prefix outside the "
				 "requested prefix");
			r = -1;
		}
	if (r == 0 && !l.truncated && page->next_token) {
		free(page->next_token);
		page->next_token = NULL;
	}
	if (r)
		snprintf(msg, ml, "%s", x->msg);
	free(x);
	return r ? -EPROTO : 0;
}

/* ---- DeleteResult ---- */

struct del_arg {
	size_t deleted, errors;
	struct s3_xml_error *first;
};

static void del_end(struct xml_ctx *x, const char *name, const char *text)
{
	struct del_arg *d = x->arg;

	if (at(x, 2, "DeleteResult")) {
		if (!strcmp(name, "Deleted"))
			d->deleted++;
		else if (!strcmp(name, "Error"))
			d->errors++;
	} else if (at(x, 3, "Error") && d->errors == 0) {
		if (!strcmp(name, "Code"))
			snprintf(d->first->code, sizeof(d->first->code),
				 "%s", text);
		else if (!strcmp(name, "Message"))
			snprintf(d->first->message,
				 sizeof(d->first->message), "%s", text);
	}
}

int s3_xml_parse_delete(const char *xml, size_t len, size_t *deleted,
			size_t *errors, struct s3_xml_error *first)
{
	struct xml_ctx *x = calloc(1, sizeof(*x));
	struct del_arg d = { 0, 0, first };
	int r;

	if (!x)
		return -ENOMEM;
	x->on_end = del_end;
	x->arg = &d;
	r = xml_run(x, xml, len);
	if (r == 0 && strcmp(x->path[0], "DeleteResult"))
		r = -1;
	free(x);
	*deleted = d.deleted;
	*errors = d.errors;
	return r ? -EPROTO : 0;
}
