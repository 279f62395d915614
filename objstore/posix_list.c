/* SPDX-License-Identifier: MIT */
/*
 * posix_list.c - ListObjectsV2 of the file:// backend: the directory
 * tree under the prefix walked (the reserved .fmfs/ left out), the keys
 * sorted, grouped by the delimiter into common prefixes, and cut into
 * pages with a continuation token.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "posix_int.h"

/* ---- listing: walk, sort, group by delimiter, page ---- */

struct walk {
	char **keys;
	size_t n, cap;
	const char *prefix;
	int err;
};

static void walk_add(struct walk *w, const char *key)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		char **k = realloc(w->keys, cap * sizeof(*k));

		if (!k) {
			w->err = -ENOMEM;
			return;
		}
		w->keys = k;
		w->cap = cap;
	}
	if (!(w->keys[w->n++] = strdup(key)))
		w->err = -ENOMEM;
}

static void walk_dir(int rootfd, const char *rel, struct walk *w)
{
	/* Not dup(rootfd): a dup shares the read position of the root. */
	int dfd = openat(rootfd, rel[0] ? rel : ".", O_RDONLY | O_DIRECTORY |
			 O_CLOEXEC);
	size_t pl = strlen(w->prefix), seen = 0;
	struct dirent *de;
	DIR *d;

	if (dfd < 0 || !(d = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((de = readdir(d)) && !w->err) {
		char path[PATH_MAX];
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		seen++;
		if (!rel[0] && !strcmp(de->d_name, RESERVED))
			continue;
		if (snprintf(path, sizeof(path), "%s%s%s", rel,
			     rel[0] ? "/" : "", de->d_name) >= (int)sizeof(path))
			continue;
		if (fstatat(rootfd, path, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISDIR(sb.st_mode)) {
			size_t l = strlen(path);

			/* Descend only where keys may match the prefix. */
			if (strncmp(path, w->prefix, l < pl ? l : pl))
				continue;
			walk_dir(rootfd, path, w);
		} else if (S_ISREG(sb.st_mode) &&
			   !strncmp(path, w->prefix, pl)) {
			walk_add(w, path);
		}
	}
	closedir(d);
	if (!seen && rel[0] && !w->err) { /* an empty directory: its marker */
		char mk[PATH_MAX];

		if ((size_t)snprintf(mk, sizeof(mk), "%s/", rel) < sizeof(mk) &&
		    !strncmp(mk, w->prefix, pl))
			walk_add(w, mk);
	}
}

/* The directory part of a listing prefix must stay inside the store and
 * out of .fmfs/: no empty, "." or ".." segments, not absolute. */
static bool dir_prefix_ok(const char *dir)
{
	const char *s = dir;

	if (!*dir)
		return true;
	if (!strcmp(dir, RESERVED) || !strncmp(dir, RESERVED "/",
					       sizeof(RESERVED)))
		return false;
	while (*s) {
		size_t n = strcspn(s, "/");

		if (n == 0 || (n == 1 && s[0] == '.') ||
		    (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += n;
		if (*s == '/')
			s++;
	}
	return true;
}

/* Whether the object at key (relative to the store's root) keeps no
 * metadata (no META_XATTR or CTYPE_XATTR attribute): then its listing entry
 * says so, and a mount asks no HEAD of it (docs/semantics.md "Objects
 * other tools wrote").  One listxattr; false when unsure. */
static bool keeps_no_meta(const struct posix_store *p, const char *key)
{
	char path[PATH_MAX], names[4096];
	ssize_t len;

	if (p->root[0] != '/' ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", p->root, key) >=
	    sizeof(path))
		return false;
	len = llistxattr(path, names, sizeof(names));
	if (len < 0)
		return errno == ENOTSUP; /* no xattrs: no metadata either */
	for (char *n = names; n < names + len; n += strlen(n) + 1)
		if (!strncmp(n, META_XATTR, sizeof(META_XATTR) - 1) ||
		    !strcmp(n, CTYPE_XATTR))
			return false;
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sets the page's token to the last thing handed out; after a common
 * prefix, "\xff" sorts it past every key under that prefix (UTF-8 never
 * contains the byte 0xff). */
static int set_token(struct obj_list_page *pg, const char *last,
		     bool was_prefix)
{
	size_t ll = strlen(last);

	pg->next_token = malloc(ll + 2);
	if (!pg->next_token)
		return -ENOMEM;
	memcpy(pg->next_token, last, ll + 1);
	if (was_prefix) {
		pg->next_token[ll] = '\xff';
		pg->next_token[ll + 1] = '\0';
	}
	return 0;
}

obj_status px_list(struct obj_store *st, const char *prefix,
			  const char *delimiter, const char *token,
			  unsigned max_keys, struct obj_list_page *pg,
			  struct obj_error *err)
{
	struct walk w = { .prefix = prefix };
	size_t strip = strlen(st->prefix), pl = strlen(prefix), count = 0;
	size_t dl = delimiter ? strlen(delimiter) : 0;
	char start_dir[PATH_MAX], *slash, *cp = NULL;
	const char *last = "";
	bool last_was_prefix = false;
	obj_status rc = OBJ_OK;
	int e = 0;

	if (!max_keys || max_keys > 1000)
		max_keys = 1000;
	/* Start the walk at the deepest directory the prefix names. */
	snprintf(start_dir, sizeof(start_dir), "%s", prefix);
	slash = strrchr(start_dir, '/');
	if (slash)
		*slash = '\0';
	else
		start_dir[0] = '\0';
	if (!dir_prefix_ok(start_dir))
		return OBJ_OK; /* no key can live there: an empty page */
	walk_dir(px_of(st)->rootfd, start_dir, &w);
	if (w.n)
		qsort(w.keys, w.n, sizeof(*w.keys), cmp_str);
	pg->entries = calloc(max_keys, sizeof(*pg->entries));
	pg->prefixes = calloc(max_keys, sizeof(*pg->prefixes));
	if (w.err || !pg->entries || !pg->prefixes) {
		e = w.err ? -w.err : ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < w.n && !e; i++) {
		const char *k = w.keys[i], *d;
		struct obj_entry *ent;
		struct stat sb;

		if (token && strcmp(k, token) <= 0)
			continue;
		d = dl ? strstr(k + pl, delimiter) : NULL;
		if (d) {
			size_t cl = (size_t)(d - k) + dl;

			if (cp && strlen(cp) == cl && !strncmp(cp, k, cl))
				continue; /* same common prefix */
			if (count == max_keys) {
				e = -set_token(pg, last, last_was_prefix);
				break;
			}
			free(cp);
			cp = strndup(k, cl);
			if (!cp || !(pg->prefixes[pg->nprefixes] =
				     strdup(cp + strip))) {
				e = ENOMEM;
				break;
			}
			pg->nprefixes++;
			count++;
			last = cp;
			last_was_prefix = true;
			continue;
		}
		if (count == max_keys) {
			e = -set_token(pg, last, last_was_prefix);
			break;
		}
		if (fstatat(px_of(st)->rootfd, k, &sb, AT_SYMLINK_NOFOLLOW))
			continue; /* deleted since the walk */
		ent = &pg->entries[pg->nentries];
		if (!(ent->key = strdup(k + strip))) {
			e = ENOMEM;
			break;
		}
		ent->size_bytes = (uint64_t)sb.st_size;
		ent->mtime_s = sb.st_mtim.tv_sec;
		px_etag_of(&sb, ent->etag);
		ent->no_meta = keeps_no_meta(px_of(st), k);
		pg->nentries++;
		count++;
		last = k;
		last_was_prefix = false;
	}
out:
	if (e)
		rc = px_fail(err, e, prefix, "listing");
	free(cp);
	for (size_t i = 0; i < w.n; i++)
		free(w.keys[i]);
	free(w.keys);
	return rc;
}
