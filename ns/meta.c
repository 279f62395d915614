/* SPDX-License-Identifier: MIT */
/*
 * meta.c - the attributes and extended attributes of an object as its S3
 * user metadata.  Attributes: fmfs keeps mode, uid, gid, mtime, ctime,
 * atime and rdev under those names (cache_wattr_meta writes them,
 * ns_meta_attr reads them).  Extended attributes: how an extended attribute's name is kept as S3 user
 * metadata (x-amz-meta-NAME), and back.
 *
 * S3 metadata names are case-insensitive (servers lower-case them) and
 * HTTP tokens; the store takes [a-z0-9_-], up to 128 bytes
 * (obj_meta_name_valid), and Ceph RGW turns '_' into '-' (it reads
 * them as CGI variables).  xattr names are any bytes but NUL.  So:
 *
 *   user.X, X of [a-z0-9-] only, not a name fmfs keeps attributes
 *   under (ns_xattr_reserved) and not starting with "fmfs-x-":
 *       meta X                        (as fmfs always stored user.X)
 *   any other name N (other namespaces, capitals, dots, '_', bytes):
 *       meta "fmfs-x-" + N with [a-z0-9] kept and every other byte
 *       written "-hh" (two lower-case hex digits): "user.Foo.bar" is
 *       fmfs-x-user-2e-46oo-2ebar, "com.apple.x" fmfs-x-com-2eapple-2ex
 *
 * Both directions are one-to-one, so no xattr can land on mode, uid,
 * gid, mtime, ctime, atime or rdev.  The namespaces the kernel gives a
 * meaning (security., system., trusted.) are not stored (ns_xattr_meta
 * says -ENOTSUP): fmfs keeps no capabilities, ACLs or SELinux labels.
 *
 * Values: S3 metadata values are HTTP header text, which servers trim
 * of surrounding spaces.  A value of printable ASCII, not beginning or
 * ending with a space and not beginning with "fmfs-b64:", is stored as
 * it is (as fmfs always stored them); any other (binary, NUL bytes,
 * UTF-8, empty) as "fmfs-b64:" + its base64.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include <stdlib.h>
#include <sys/stat.h>

#include "ns_int.h"

#define XATTR_META_PREFIX "fmfs-x-"
#define XATTR_META_MAX 128 /* obj_meta_name_valid */
#define XATTR_B64 "fmfs-b64:"

bool ns_xattr_reserved(const char *meta)
{
	return cache_wattr_meta_name(meta);
}

bool ns_xattr_kernel_ns(const char *name)
{
	return !strncmp(name, "security.", 9) ||
	       !strncmp(name, "system.", 7) || !strncmp(name, "trusted.", 8);
}

static bool plain_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int ns_xattr_meta(const char *name, char *meta, size_t len)
{
	bool user = !strncmp(name, "user.", 5), plain;
	const char *x = user ? name + 5 : name;
	size_t n = 0;

	if (ns_xattr_kernel_ns(name))
		return -ENOTSUP;
	if (!*name || !strcmp(name, "user."))
		return -EINVAL;
	plain = user && !ns_xattr_reserved(x) &&
		strncmp(x, XATTR_META_PREFIX, strlen(XATTR_META_PREFIX));
	for (const char *p = x; plain && *p; p++)
		plain = plain_char(*p) || *p == '-';
	if (plain) {
		if (strlen(x) > XATTR_META_MAX || strlen(x) >= len)
			return -ERANGE;
		strcpy(meta, x);
		return 0;
	}
	n = (size_t)snprintf(meta, len, "%s", XATTR_META_PREFIX);
	for (const char *p = name; *p; p++) {
		if (n + 4 > len || n + 3 > XATTR_META_MAX)
			return -ERANGE;
		if (plain_char(*p))
			meta[n++] = *p;
		else
			n += (size_t)snprintf(meta + n, len - n, "-%02x",
					      (unsigned char)*p);
	}
	if (n > XATTR_META_MAX)
		return -ERANGE;
	meta[n] = '\0';
	return 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool ns_xattr_name(const char *meta, char *name, size_t len)
{
	const char *p = meta + strlen(XATTR_META_PREFIX);
	size_t n = 0;

	if (strncmp(meta, XATTR_META_PREFIX, strlen(XATTR_META_PREFIX)))
		goto plain;
	for (; *p && n + 1 < len; p++) {
		int hi, lo;

		if (*p != '-') {
			if (!plain_char(*p))
				goto plain;
			name[n++] = *p;
			continue;
		}
		hi = hexval(p[1]);
		lo = hi < 0 ? -1 : hexval(p[2]);
		if (lo < 0 || (hi == 0 && lo == 0))
			goto plain;
		name[n++] = (char)(hi << 4 | lo);
		p += 2;
	}
	if (*p || !n)
		goto plain;
	name[n] = '\0';
	/* What this file made, and only that: else an older user.fmfs-x-... */
	{
		char back[XATTR_META_MAX + 1];

		if (ns_xattr_meta(name, back, sizeof(back)) == 0 &&
		    !strcmp(back, meta))
			return true;
	}
plain:
	if (ns_xattr_reserved(meta) || strlen(meta) + 6 > len)
		return false;
	snprintf(name, len, "user.%s", meta);
	return true;
}

static bool plain_value(const char *v, size_t n)
{
	if (!n || v[0] == ' ' || v[n - 1] == ' ')
		return false; /* an empty header is not sent (curl) */
	if (n >= strlen(XATTR_B64) && !memcmp(v, XATTR_B64, strlen(XATTR_B64)))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
			return false;
	return true;
}

ssize_t ns_xattr_value_encode(const char *v, size_t n, char *out,
			      size_t len)
{
	size_t pl = strlen(XATTR_B64);

	if (plain_value(v, n)) {
		if (n >= len)
			return -E2BIG;
		memcpy(out, v, n);
		out[n] = '\0';
		return (ssize_t)n;
	}
	if (n > INT32_MAX / 2 || pl + 4 * ((n + 2) / 3) >= len)
		return -E2BIG;
	memcpy(out, XATTR_B64, pl);
	return (ssize_t)pl + EVP_EncodeBlock((unsigned char *)out + pl,
					     (const unsigned char *)v, (int)n);
}

ssize_t ns_xattr_value_decode(const char *s, char *out, size_t len)
{
	size_t pl = strlen(XATTR_B64), sl = strlen(s), bl = sl - pl;
	int n;

	if (sl < pl || memcmp(s, XATTR_B64, pl) || bl % 4 ||
	    3 * (bl / 4) > len)
		goto raw;
	for (size_t i = pl; i < sl; i++) /* EVP_DecodeBlock skips blanks */
		if (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' ||
		    s[i] == '\n')
			goto raw;
	n = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s + pl,
			    (int)bl);
	if (n < 0)
		goto raw;
	/* it counts the padding's zero bytes too */
	if (bl && s[sl - 1] == '=')
		n -= 1 + (s[sl - 2] == '=');
	return n;
raw:
	if (sl > len)
		return -ERANGE;
	memcpy(out, s, sl);
	return (ssize_t)sl;
}


void ns_meta_attr(const struct obj_kv *m, size_t n, const char *etag,
		  struct cache_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->etag, sizeof(a->etag), "%s", etag ? etag : "");
	for (size_t i = 0; i < n; i++) {
		const char *v = m[i].value;
		char *end;

		if (!strcmp(m[i].name, "mode")) {
			a->mode = (uint32_t)strtoul(v, &end, 10);
			if (*v && !*end)
				a->has |= CACHE_ATTR_MODE;
		} else if (!strcmp(m[i].name, "uid")) {
			a->uid = (uint32_t)strtoul(v, &end, 10);
			if (*v && !*end)
				a->has |= CACHE_ATTR_UID;
		} else if (!strcmp(m[i].name, "gid")) {
			a->gid = (uint32_t)strtoul(v, &end, 10);
			if (*v && !*end)
				a->has |= CACHE_ATTR_GID;
		} else if (!strcmp(m[i].name, "mtime")) {
			if (!util_time_parse(v, &a->mtime_ns))
				a->has |= CACHE_ATTR_MTIME;
		} else if (!strcmp(m[i].name, "ctime")) {
			if (!util_time_parse(v, &a->ctime_ns))
				a->has |= CACHE_ATTR_CTIME;
		} else if (!strcmp(m[i].name, "atime")) {
			if (!util_time_parse(v, &a->atime_ns))
				a->has |= CACHE_ATTR_ATIME;
		} else if (!strcmp(m[i].name, "rdev")) {
			a->rdev = (uint32_t)strtoul(v, &end, 10);
			if (*v && !*end)
				a->has |= CACHE_ATTR_RDEV;
		}
	}
}

void ns_wattr_attr(const struct cache_wattr *w, const char *etag,
		   struct cache_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->etag, sizeof(a->etag), "%s", etag ? etag : "");
	a->has = CACHE_ATTR_MODE | CACHE_ATTR_UID | CACHE_ATTR_GID |
		 CACHE_ATTR_MTIME | CACHE_ATTR_RDEV;
	a->mode = (w->mode & 07777) | cache_wkind_type(w->kind);
	a->uid = w->uid;
	a->gid = w->gid;
	a->mtime_ns = w->mtime_ns;
	a->ctime_ns = w->ctime_ns;
	a->atime_ns = w->atime_ns;
	a->has |= (w->ctime_ns ? CACHE_ATTR_CTIME : 0) |
		  (w->atime_ns ? CACHE_ATTR_ATIME : 0);
	a->rdev = w->rdev;
}

/* What the object stores is shown as it is; the defaults (the mount's
 * configuration) stand in only for what it does not store. */
void ns_attr_resolve(const struct ns *ns, bool is_dir, int64_t mtime_s,
		     const struct cache_attr *a, struct ns_entry *e)
{
	e->has_attr = true;
	e->mode = (a->has & CACHE_ATTR_MODE) ? a->mode & 07777 :
		  (uint32_t)(is_dir ? ns->cfg.dir_mode : ns->cfg.file_mode);
	e->uid = (a->has & CACHE_ATTR_UID) ? a->uid : (uint32_t)ns->cfg.uid;
	e->gid = (a->has & CACHE_ATTR_GID) ? a->gid : (uint32_t)ns->cfg.gid;
	e->mtime_ns = (a->has & CACHE_ATTR_MTIME) ? a->mtime_ns :
		      (is_dir ? (int64_t)ns->cfg.dir_mtime_s : mtime_s) *
		      1000000000;
	e->ctime_ns = (a->has & CACHE_ATTR_CTIME) ? a->ctime_ns : 0;
	e->atime_ns = (a->has & CACHE_ATTR_ATIME) ? a->atime_ns : 0;
	e->rdev = (a->has & CACHE_ATTR_RDEV) ? a->rdev : 0;
	if (!is_dir && (a->has & CACHE_ATTR_MODE) && !S_ISREG(a->mode) &&
	    !S_ISDIR(a->mode) && cache_wkind_of(a->mode) > 0)
		e->ftype = a->mode & S_IFMT;
}

void ns_entry_from_w(struct ns_entry *e, const struct cache_wattr *a)
{
	e->is_dir = a->kind == CACHE_WK_DIR;
	e->ftype = e->is_dir || a->kind == CACHE_WK_FILE ? 0 :
		   cache_wkind_type(a->kind);
	e->pending = true;
	e->size_bytes = e->is_dir ? 0 : a->size;
	e->mtime_s = a->mtime_ns / 1000000000;
	e->has_attr = true;
	e->mode = a->mode & 07777;
	e->uid = a->uid;
	e->gid = a->gid;
	e->mtime_ns = a->mtime_ns;
	e->ctime_ns = a->ctime_ns;
	e->atime_ns = a->atime_ns;
	e->rdev = a->rdev;
}
