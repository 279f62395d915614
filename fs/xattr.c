/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - how an extended attribute's name is kept as S3 user
 * metadata (x-amz-meta-NAME), and back.
 *
 * S3 metadata names are case-insensitive (servers lower-case them) and
 * HTTP tokens; the store takes [a-z0-9_-], up to 128 bytes
 * (obj_meta_name_valid), and Ceph RGW turns '_' into '-' (it reads
 * them as CGI variables).  xattr names are any bytes but NUL.  So:
 *
 *   user.X, X of [a-z0-9-] only, not a name fmfs keeps attributes
 *   under (fs_xattr_reserved) and not starting with "fmfs-x-":
 *       meta X                        (as fmfs always stored user.X)
 *   any other name N (other namespaces, capitals, dots, '_', bytes):
 *       meta "fmfs-x-" + N with [a-z0-9] kept and every other byte
 *       written "-hh" (two lower-case hex digits): "user.Foo.bar" is
 *       fmfs-x-user-2e-46oo-2ebar, "com.apple.x" fmfs-x-com-2eapple-2ex
 *
 * Both directions are one-to-one, so no xattr can land on mode, uid,
 * gid, mtime, ctime, atime or rdev.  The namespaces the kernel gives a
 * meaning (security., system., trusted.) are not stored (fs_xattr_meta
 * says -ENOTSUP): fmfs keeps no capabilities, ACLs or SELinux labels.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs_int.h"

#define XATTR_META_PREFIX "fmfs-x-"
#define XATTR_META_MAX 128 /* obj_meta_name_valid */

bool fs_xattr_reserved(const char *meta)
{
	return cache_wattr_meta_name(meta);
}

bool fs_xattr_kernel_ns(const char *name)
{
	return !strncmp(name, "security.", 9) ||
	       !strncmp(name, "system.", 7) || !strncmp(name, "trusted.", 8);
}

static bool plain_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int fs_xattr_meta(const char *name, char *meta, size_t len)
{
	bool user = !strncmp(name, "user.", 5), plain;
	const char *x = user ? name + 5 : name;
	size_t n = 0;

	if (fs_xattr_kernel_ns(name))
		return -ENOTSUP;
	if (!*name || !strcmp(name, "user."))
		return -EINVAL;
	plain = user && !fs_xattr_reserved(x) &&
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

bool fs_xattr_name(const char *meta, char *name, size_t len)
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

		if (fs_xattr_meta(name, back, sizeof(back)) == 0 &&
		    !strcmp(back, meta))
			return true;
	}
plain:
	if (fs_xattr_reserved(meta) || strlen(meta) + 6 > len)
		return false;
	snprintf(name, len, "user.%s", meta);
	return true;
}
