/* SPDX-License-Identifier: MIT */
/*
 * index.c - the namespace's listings kept in the cache index, so that a
 * remount serves lookups, readdir and opens of everything it has seen
 * before it asks the store, and a mount with the store down serves them
 * at all (docs/semantics.md "The store unreachable").
 *
 * A listing fetched from the store is packed (no lock held) and, if it
 * is settled (no change of ours crossed its LIST), handed to
 * cache_listing_put with the wall-clock time of its fetch, under the
 * lock that orders it with the stale marks of our changes; the flusher
 * writes it off the hot path.  A
 * directory whose listing is not in memory (never seen by this mount, or
 * dropped past the memory bound) is unpacked from the index: fresh if
 * its fetch is less than --refresh ago, as if it had been fetched by
 * this mount, else stale (LISTed again when the store answers, served
 * as it is when it does not).  A change of ours marks it stale in the
 * index too (ns_dir_invalidate).
 *
 * The packed form (version 1, little-endian), the data of one row of the
 * listings table (docs/cache-format.md has the table):
 *
 *   offset  size  field
 *   0       4     magic "FMLS"
 *   4       4     version (1)
 *   8       4     n, the number of entries
 *   12      ...   n entries, sorted by name (strcmp), each:
 *                   2  name length L (1..255)
 *                   L  name (no '/', no NUL)
 *                   1  flags: 1 directory, 2 untyped (zero bytes, type
 *                      not learned), 4 no metadata (the store's listing
 *                      said the object keeps none: no HEAD needed)
 *                   1  markers (NS_MARK_*)
 *                   4  ftype (S_IFMT bits of a non-regular file, or 0)
 *                   8  size in bytes
 *                   8  mtime, seconds since the epoch (signed)
 *                   1  ETag length E (< 80)
 *                   E  ETag
 *   end-4   4     CRC32C of everything before it
 *
 * Anything that does not parse (a wrong CRC, a length past the end,
 * names out of order) is not served: the directory is LISTed again, and
 * the log says so once.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_int.h"

#define NS_MAGIC "FMLS"
#define NS_VERSION 1
#define NS_HEAD 12
#define NS_FIXED 25 /* an entry without its name and ETag */

static int64_t wall_ms(void)
{
	return util_wall_ns() / 1000000;
}

void *ns_pack(const struct ns_listing *l, size_t *len_out)
{
	size_t len = NS_HEAD + 4, at = NS_HEAD;
	struct ns_entry le, *e = &le;
	unsigned char *b;

	for (size_t i = 0; i < l->n; i++) {
		ns_listing_at(l, i, e);
		len += NS_FIXED + strlen(e->name) +
		       strnlen(e->etag, sizeof(e->etag) - 1);
	}
	b = malloc(len);
	if (!b)
		return NULL; /* only costs a LIST after a remount */
	memcpy(b, NS_MAGIC, 4);
	util_put32le(b + 4, NS_VERSION);
	util_put32le(b + 8, (uint32_t)l->n);
	for (size_t i = 0; i < l->n; i++) {
		size_t nl;

		ns_listing_at(l, i, e);
		nl = strlen(e->name);
		size_t el = strnlen(e->etag, sizeof(e->etag) - 1);

		b[at] = (unsigned char)nl;
		b[at + 1] = (unsigned char)(nl >> 8);
		memcpy(b + at + 2, e->name, nl);
		at += 2 + nl;
		b[at] = (unsigned char)((e->is_dir ? 1 : 0) |
					(e->untyped ? 2 : 0) |
					(e->no_meta ? 4 : 0));
		b[at + 1] = (unsigned char)e->markers;
		util_put32le(b + at + 2, e->ftype);
		util_put64le(b + at + 6, e->size_bytes);
		util_put64le(b + at + 14, (uint64_t)e->mtime_s);
		b[at + 22] = (unsigned char)el;
		memcpy(b + at + 23, e->etag, el);
		at += 23 + el;
	}
	util_put32le(b + at, util_crc32c(0, b, at));
	*len_out = len;
	return b;
}

void ns_keep(struct ns *ns, const char *dir_key,
		const struct ns_listing *l, const void *packed, size_t len)
{
	uint64_t age = util_now_ms() - l->fetched_ms;

	if (!l->fetched_ms || !packed || !ns->cfg.cache)
		return; /* unsettled: not worth keeping */
	cache_listing_put(ns->cfg.cache, dir_key, packed, len, (uint32_t)l->n,
			  wall_ms() - (int64_t)age);
}

static void ns_bad(const char *dir_key, const char *why)
{
	static atomic_int logged;

	if (!atomic_exchange(&logged, 1))
		fprintf(stderr, "fmfs: the listing of '%s' kept in the cache "
			"index is damaged (%s); listing it again (further "
			"damaged listings are not logged)\n", dir_key, why);
}

/* Unpacks b (len bytes) into l; 0, or -EBADMSG with *why set. */
int ns_parse(const unsigned char *b, size_t len,
		    struct ns_listing *l, const char **why)
{
	size_t at = NS_HEAD, n;

	if (len < NS_HEAD + 4 || memcmp(b, NS_MAGIC, 4)) {
		*why = "not a listing";
		return -EBADMSG;
	}
	if (util_get32le(b + len - 4) != util_crc32c(0, b, len - 4)) {
		*why = "wrong checksum";
		return -EBADMSG;
	}
	if (util_get32le(b + 4) != NS_VERSION) {
		*why = "unknown version";
		return -EBADMSG;
	}
	n = util_get32le(b + 8);
	len -= 4;
	if (n > NS_LISTING_MAX_ENTRIES || n > len / NS_FIXED) {
		*why = "too many entries";
		return -EBADMSG;
	}
	l->e = calloc(n ? n : 1, sizeof(*l->e));
	if (!l->e)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct ns_entry *e = &l->e[i];
		size_t nl, el;

		if (at + 2 > len || (nl = b[at] | (size_t)b[at + 1] << 8) == 0 ||
		    nl > 255 || at + 2 + nl + 23 > len) {
			*why = "an entry runs past the end";
			return -EBADMSG;
		}
		e->name = strndup((const char *)b + at + 2, nl);
		if (!e->name)
			return -ENOMEM;
		l->n = i + 1; /* freed with l from here on */
		if (strlen(e->name) != nl || strchr(e->name, '/') ||
		    (i && strcmp(l->e[i - 1].name, e->name) >= 0)) {
			*why = "a bad name or names out of order";
			return -EBADMSG;
		}
		at += 2 + nl;
		e->is_dir = b[at] & 1;
		e->untyped = (b[at] & 2) != 0;
		e->no_meta = (b[at] & 4) != 0;
		e->markers = b[at + 1];
		e->ftype = util_get32le(b + at + 2);
		e->size_bytes = util_get64le(b + at + 6);
		e->mtime_s = (int64_t)util_get64le(b + at + 14);
		el = b[at + 22];
		if (el >= sizeof(e->etag) || at + 23 + el > len) {
			*why = "an entry runs past the end";
			return -EBADMSG;
		}
		memcpy(e->etag, b + at + 23, el);
		e->etag[el] = '\0';
		at += 23 + el;
	}
	if (at != len) {
		*why = "bytes after the last entry";
		return -EBADMSG;
	}
	return ns_listing_seal(l);
}

struct ns_listing *ns_load(struct ns *ns, const char *dir_key)
{
	struct ns_listing *l;
	const char *why = NULL;
	void *data;
	size_t len;
	uint32_t entries;
	int64_t fetched, age;
	uint64_t now = util_now_ms();
	int rc;

	if (!ns->cfg.cache ||
	    cache_listing_get(ns->cfg.cache, dir_key, &data, &len, &entries,
			      &fetched))
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		free(data);
		return NULL;
	}
	atomic_store(&l->refs, 1);
	rc = ns_parse(data, len, l, &why);
	free(data);
	if (rc) {
		if (why) {
			ns_bad(dir_key, why);
			cache_listing_stale(ns->cfg.cache, dir_key, false);
		}
		ns_listing_put(l);
		return NULL;
	}
	/* As if this mount had fetched it then: fresh for what is left of
	 * --refresh.  A time in the future (the clock went back) or before
	 * this machine's monotonic clock began: stale. */
	age = wall_ms() - fetched;
	if (fetched > 0 && age >= 0 && (uint64_t)age < now)
		l->fetched_ms = now - (uint64_t)age;
	atomic_fetch_add(&ns->index_loads, 1);
	return l;
}

/* ---- the store's reachability ---- */
