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

#include <limits.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

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


/* A mode as other tools store it: s3fs and fmfs in decimal ("33188"),
 * rclone in octal ("100644", "0100644").  Decimal modes are at most
 * 65535, five digits: a leading 0 or six digits or more is octal.  Five
 * or fewer are decimal when that has a file type (s3fs always stores
 * one; "41471", its symlink), else octal when that reads ("40755", a
 * directory; "644").  So rclone's five-digit octal modes that also read
 * as a decimal type ("41777", "10644") are taken as s3fs's: the rarer
 * reading loses. */
static bool parse_mode(const char *v, uint32_t *out)
{
	static const uint32_t types[] = { 0, S_IFREG, S_IFDIR, S_IFLNK,
					  S_IFIFO, S_IFCHR, S_IFBLK,
					  S_IFSOCK };
#define NTYPES (sizeof(types) / sizeof(types[0]))
	size_t len = strspn(v, "0123456789");
	bool octal_ok = strspn(v, "01234567") == len;
	unsigned long d, o;

	if (!len || v[len] || len > 7)
		return false;
	d = strtoul(v, NULL, 10);
	o = octal_ok ? strtoul(v, NULL, 8) : ULONG_MAX;
	if (v[0] == '0' || len >= 6)
		d = ULONG_MAX; /* octal by its form */
	for (size_t i = 1; d <= 0177777 && i < NTYPES; i++) /* typed */
		if ((d & S_IFMT) == types[i]) {
			*out = (uint32_t)d;
			return true;
		}
	for (size_t i = 0; o <= 0177777 && i < NTYPES; i++)
		if ((o & S_IFMT) == types[i]) {
			*out = (uint32_t)o;
			return true;
		}
	if (d <= 07777) { /* decimal, no type: permission bits only */
		*out = (uint32_t)d;
		return true;
	}
	return false;
#undef NTYPES
}

/* RFC 3339 ("2023-05-11T17:54:11.523399602+01:00", rclone's metadata
 * form): 0 with *ns set, or -EINVAL. */
static int parse_rfc3339(const char *v, int64_t *ns)
{
	struct tm tm;
	const char *p;
	int64_t frac = 0, off = 0;
	int digits = 0;
	time_t t;

	memset(&tm, 0, sizeof(tm));
	p = strptime(v, "%Y-%m-%d", &tm);
	if (!p || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p = strptime(p + 1, "%H:%M:%S", &tm);
	if (!p)
		return -EINVAL;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++, digits++)
			if (digits < 9)
				frac = frac * 10 + (*p - '0');
	for (int d = digits; d < 9; d++)
		frac *= 10;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '2' &&
		   p[2] >= '0' && p[2] <= '9' && p[3] == ':' &&
		   p[4] >= '0' && p[4] <= '5' && p[5] >= '0' && p[5] <= '9' &&
		   (p[1] - '0') * 10 + (p[2] - '0') < 24) {
		off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 +
		      ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
		if (*p == '-')
			off = -off;
		p += 6;
	} else {
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	errno = 0;
	t = timegm(&tm);
	if ((t == (time_t)-1 && errno) || (int64_t)t - off >
	    INT64_MAX / 1000000000 - 1 || (int64_t)t - off <
	    INT64_MIN / 1000000000 + 1)
		return -EINVAL; /* past what nanoseconds hold: 1677-2262 */
	*ns = ((int64_t)t - off) * 1000000000 + frac;
	return 0;
}

static int parse_time(const char *v, int64_t *ns)
{
	return util_time_parse(v, ns) && parse_rfc3339(v, ns) ? -EINVAL : 0;
}

static bool parse_u32(const char *v, uint32_t *out)
{
	char *end;
	unsigned long x;

	if (*v < '0' || *v > '9')
		return false;
	errno = 0;
	x = strtoul(v, &end, 10);
	if (*end || errno || x > UINT32_MAX)
		return false;
	*out = (uint32_t)x;
	return true;
}

/* One attribute, by the name the metadata gives it; what a already has
 * stands (fmfs's own names are read before s3cmd's). */
static void take(struct cache_attr *a, const char *name, const char *v)
{
	if (!strcmp(name, "mode") && !(a->has & CACHE_ATTR_MODE)) {
		if (parse_mode(v, &a->mode))
			a->has |= CACHE_ATTR_MODE;
	} else if (!strcmp(name, "uid") && !(a->has & CACHE_ATTR_UID)) {
		if (parse_u32(v, &a->uid))
			a->has |= CACHE_ATTR_UID;
	} else if (!strcmp(name, "gid") && !(a->has & CACHE_ATTR_GID)) {
		if (parse_u32(v, &a->gid))
			a->has |= CACHE_ATTR_GID;
	} else if (!strcmp(name, "mtime") && !(a->has & CACHE_ATTR_MTIME)) {
		if (!parse_time(v, &a->mtime_ns))
			a->has |= CACHE_ATTR_MTIME;
	} else if (!strcmp(name, "ctime") && !(a->has & CACHE_ATTR_CTIME)) {
		if (!parse_time(v, &a->ctime_ns))
			a->has |= CACHE_ATTR_CTIME;
	} else if (!strcmp(name, "atime") && !(a->has & CACHE_ATTR_ATIME)) {
		if (!parse_time(v, &a->atime_ns))
			a->has |= CACHE_ATTR_ATIME;
	} else if (!strcmp(name, "rdev") && !(a->has & CACHE_ATTR_RDEV)) {
		if (parse_u32(v, &a->rdev))
			a->has |= CACHE_ATTR_RDEV;
	}
}

/* s3cmd's "s3cmd-attrs": "atime:1700000000/ctime:.../gid:0/gname:root/
 * md5:.../mode:33188/mtime:.../uid:0/uname:root". */
static void take_s3cmd(struct cache_attr *a, const char *v)
{
	char buf[1024], *save = NULL;

	if (strlen(v) >= sizeof(buf))
		return;
	strcpy(buf, v);
	for (char *f = strtok_r(buf, "/", &save); f;
	     f = strtok_r(NULL, "/", &save)) {
		char *c = strchr(f, ':');

		if (!c)
			continue;
		*c = '\0';
		if (strcmp(f, "rdev")) /* its rdev is not ours */
			take(a, f, c + 1);
	}
}

/* A Content-Type that older tools give a directory's object. */
static bool dir_content_type(const char *ct)
{
	static const char *const types[] = { "application/x-directory",
					     "httpd/unix-directory" };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t n = strlen(types[i]);

		if (!strncasecmp(ct, types[i], n) &&
		    (!ct[n] || ct[n] == ';' || ct[n] == ' '))
			return true;
	}
	return false;
}

void ns_meta_attr(const struct obj_meta *m, struct cache_attr *a)
{
	const char *s3cmd = NULL;

	memset(a, 0, sizeof(*a));
	snprintf(a->etag, sizeof(a->etag), "%s", m->etag);
	for (size_t i = 0; i < m->nuser; i++) {
		if (!strcmp(m->user[i].name, "s3cmd-attrs"))
			s3cmd = m->user[i].value;
		else
			take(a, m->user[i].name, m->user[i].value);
	}
	if (s3cmd)
		take_s3cmd(a, s3cmd);
	if (dir_content_type(m->content_type))
		a->has |= CACHE_ATTR_ISDIR;
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
