/* SPDX-License-Identifier: MIT */
/*
 * test_ns.c - the namespace module (ns/) without a mount: which keys
 * make which names, listings kept in memory and in the index, lookups
 * with the write-back over the listing, negative lookups, the store
 * unreachable, renames by server-side copy, and the metadata encoding.
 *
 * The store is a file:// directory; the calls ns/ makes to it are
 * wrapped (-Wl,--wrap) so that a test can count them, make them fail as
 * a server or a network would (g_fault), and add to a listing the keys
 * a directory cannot hold but a bucket can (g_extra: a "dir/" marker, a
 * name over NAME_MAX).
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "cache/wb.h"
#include "ns/ns.h"
#include "ns/ns_int.h"
#include "objstore/objstore.h"
#include "helpers.h"

/* ---- the wrapped store ---- */

static obj_status g_fault;       /* OBJ_OK: pass through */
static unsigned g_lists, g_heads, g_copies, g_checks;
static struct { const char *key; uint64_t size; bool prefix; } g_extra[4];

obj_status __real_obj_list(struct obj_store *st, const char *prefix,
			   const char *delimiter, const char *token,
			   unsigned max_keys, struct obj_list_page *page,
			   struct obj_error *err);
obj_status __real_obj_head(struct obj_store *st, const char *key,
			   struct obj_meta *out, struct obj_error *err);
obj_status __real_obj_copy(struct obj_store *st, const char *src_key,
			   const char *dst_key, const struct obj_kv *meta,
			   size_t nmeta, char *etag_out, struct obj_error *err);
obj_status __real_obj_copy_typed(struct obj_store *st, const char *src_key,
				 const char *dst_key, const struct obj_kv *meta,
				 size_t nmeta, const char *content_type,
				 char *etag_out, struct obj_error *err);
obj_status __wrap_obj_copy_typed(struct obj_store *st, const char *src_key,
				 const char *dst_key, const struct obj_kv *meta,
				 size_t nmeta, const char *content_type,
				 char *etag_out, struct obj_error *err);
obj_status __real_obj_check_bucket(struct obj_store *st,
				   struct obj_error *err);
obj_status __wrap_obj_list(struct obj_store *st, const char *prefix,
			   const char *delimiter, const char *token,
			   unsigned max_keys, struct obj_list_page *page,
			   struct obj_error *err);
obj_status __wrap_obj_head(struct obj_store *st, const char *key,
			   struct obj_meta *out, struct obj_error *err);
obj_status __wrap_obj_copy(struct obj_store *st, const char *src_key,
			   const char *dst_key, const struct obj_kv *meta,
			   size_t nmeta, char *etag_out, struct obj_error *err);
obj_status __wrap_obj_check_bucket(struct obj_store *st,
				   struct obj_error *err);

static obj_status fault(struct obj_error *err)
{
	memset(err, 0, sizeof(*err));
	err->status = g_fault;
	snprintf(err->message, sizeof(err->message), "injected by test_ns");
	return g_fault;
}

obj_status __wrap_obj_list(struct obj_store *st, const char *prefix,
			   const char *delimiter, const char *token,
			   unsigned max_keys, struct obj_list_page *page,
			   struct obj_error *err)
{
	obj_status s;

	g_lists++;
	if (g_fault != OBJ_OK)
		return fault(err);
	s = __real_obj_list(st, prefix, delimiter, token, max_keys, page, err);
	for (size_t i = 0; s == OBJ_OK && i < ARRAY_SIZE(g_extra); i++) {
		const char *k = g_extra[i].key;

		if (!k || strncmp(k, prefix, strlen(prefix)))
			continue;
		if (g_extra[i].prefix) {
			page->prefixes = realloc(page->prefixes,
						 (page->nprefixes + 1) *
						 sizeof(char *));
			page->prefixes[page->nprefixes++] = strdup(k);
		} else {
			page->entries = realloc(page->entries,
						(page->nentries + 1) *
						sizeof(*page->entries));
			memset(&page->entries[page->nentries], 0,
			       sizeof(*page->entries));
			page->entries[page->nentries].key = strdup(k);
			page->entries[page->nentries].size_bytes =
				g_extra[i].size;
			snprintf(page->entries[page->nentries].etag, 80, "x");
			page->nentries++;
		}
	}
	return s;
}

obj_status __wrap_obj_head(struct obj_store *st, const char *key,
			   struct obj_meta *out, struct obj_error *err)
{
	g_heads++;
	if (g_fault != OBJ_OK)
		return fault(err);
	return __real_obj_head(st, key, out, err);
}

obj_status __wrap_obj_copy(struct obj_store *st, const char *src_key,
			   const char *dst_key, const struct obj_kv *meta,
			   size_t nmeta, char *etag_out, struct obj_error *err)
{
	g_copies++;
	if (g_fault != OBJ_OK)
		return fault(err);
	return __real_obj_copy(st, src_key, dst_key, meta, nmeta, etag_out,
			       err);
}

/* A copy with replaced metadata and type (a rename that keeps mtime,
 * ns/rename.c) counts as a copy too. */
obj_status __wrap_obj_copy_typed(struct obj_store *st, const char *src_key,
				 const char *dst_key, const struct obj_kv *meta,
				 size_t nmeta, const char *content_type,
				 char *etag_out, struct obj_error *err)
{
	g_copies++;
	if (g_fault != OBJ_OK)
		return fault(err);
	return __real_obj_copy_typed(st, src_key, dst_key, meta, nmeta,
				     content_type, etag_out, err);
}

obj_status __wrap_obj_check_bucket(struct obj_store *st,
				   struct obj_error *err)
{
	g_checks++;
	if (g_fault != OBJ_OK)
		return fault(err);
	return __real_obj_check_bucket(st, err);
}

/* ---- environment: a store, a cache over it, a namespace ---- */

struct env {
	char store_dir[PATH_MAX], cache_dir[PATH_MAX], url[PATH_MAX + 8];
	struct obj_store *st;
	struct cache *c;
	struct ns *ns;
	struct ns_config nc;
};

static void ns_up(struct env *e)
{
	assert_int_equal(ns_open(&e->nc, &e->ns), 0);
}

static void cache_up(struct env *e)
{
	struct cache_config cc;
	char msg[512];

	cache_config_init(&cc);
	cc.dir = e->cache_dir;
	cc.store_id = e->url;
	cc.size_bytes = 64 * MIB;
	if (cache_open(&cc, e->st, &e->c, msg, sizeof(msg)))
		fail_msg("cache_open: %s", msg);
	e->nc.cache = e->c;
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	struct obj_config oc;
	struct obj_error err;

	assert_non_null(e);
	g_seq++;
	snprintf(e->store_dir, sizeof(e->store_dir), "%s/s%03u", g_tmp, g_seq);
	snprintf(e->cache_dir, sizeof(e->cache_dir), "%s/c%03u", g_tmp, g_seq);
	assert_int_equal(mkdir(e->store_dir, 0755), 0);
	snprintf(e->url, sizeof(e->url), "file://%s", e->store_dir);
	obj_config_init(&oc);
	oc.url = e->url;
	assert_int_equal(obj_open(&oc, &e->st, &err), OBJ_OK);
	cache_up(e);
	e->nc.st = e->st;
	e->nc.refresh_s = 60;
	e->nc.negative_refresh_s = 60;
	e->nc.listing_mem_entries = 65536;
	e->nc.file_mode = 0600;
	e->nc.dir_mode = 0755;
	e->nc.uid = 1000;
	e->nc.gid = 1000;
	e->nc.dir_mtime_s = 1700000000;
	ns_up(e);
	g_fault = OBJ_OK;
	g_lists = g_heads = g_copies = g_checks = 0;
	memset(g_extra, 0, sizeof(g_extra));
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	ns_close(e->ns);
	cache_close(e->c);
	obj_close(e->st);
	rm_rf(e->store_dir);
	rm_rf(e->cache_dir);
	free(e);
	g_fault = OBJ_OK;
	return 0;
}

static void put(struct env *e, const char *key, const char *data,
		const struct obj_kv *meta, size_t nmeta)
{
	struct obj_error err;
	char etag[80];

	assert_int_equal(obj_put(e->st, key, data, strlen(data), meta, nmeta,
				 etag, &err), OBJ_OK);
}

static const struct ns_entry *find(const struct ns_listing *l,
				   const char *name)
{
	/* a few at once may be in use (find(a)->x == find(b)->x) */
	static struct ns_entry found[8];
	static unsigned next;
	struct ns_entry *x = &found[next++ % 8];

	if (!ns_listing_find(l, name, x))
		fail_msg("'%s' is not in the listing", name);
	return x;
}

/* ---- listings ---- */

/* Each kind of key makes the name it should: an object a file, keys
 * below a name a directory, the markers of fmfs ("d/"), Hadoop
 * ("e_$folder$") and older s3fs (a zero-byte "f" of mode S_IFDIR)
 * directories; a zero-byte object without metadata stays a file, and a
 * name a local disk could not hold is skipped and counted. */
static void test_listing_kinds(void **state)
{
	struct env *e = *state;
	struct obj_kv dirmode = { "mode", "16877" }; /* 040755 */
	char longname[300];
	struct ns_listing *l;
	struct ns_stats s;
	int err;

	put(e, "a", "abc", NULL, 0);
	put(e, "b/c", "x", NULL, 0);
	put(e, "e_$folder$", "", NULL, 0);
	put(e, "f", "", &dirmode, 1);
	put(e, "g", "", NULL, 0);
	memset(longname, 'n', 280);
	longname[280] = '\0';
	g_extra[0].key = "d/";
	g_extra[0].prefix = true;
	g_extra[1].key = longname;
	g_extra[1].size = 5;

	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_int_equal(err, 0);
	assert_int_equal(l->n, 6);
	assert_false(find(l, "a")->is_dir);
	assert_int_equal(find(l, "a")->size_bytes, 3);
	assert_true(find(l, "b")->is_dir);
	assert_int_equal(find(l, "b")->markers, NS_MARK_PREFIX);
	assert_true(find(l, "d")->is_dir);
	assert_true(find(l, "e")->is_dir);
	assert_int_equal(find(l, "e")->markers, NS_MARK_FOLDER);
	assert_true(find(l, "f")->is_dir);
	assert_int_equal(find(l, "f")->markers, NS_MARK_PLAIN);
	assert_false(find(l, "g")->is_dir);
	assert_false(find(l, "g")->untyped);
	/* g keeps no metadata, and a file:// listing says so: its type is
	 * known without a HEAD; f keeps a mode */
	assert_true(find(l, "g")->no_meta);
	assert_false(find(l, "f")->no_meta);
	for (size_t i = 1; i < l->n; i++) /* sorted, one entry a name */
		assert_true(strcmp(ns_listing_name(l, i - 1),
				   ns_listing_name(l, i)) < 0);
	ns_listing_put(l);
	ns_get_stats(e->ns, &s);
	assert_int_equal(s.skipped_names, 1);
	assert_int_equal(s.listings, 1);
	assert_int_equal(g_heads, 1); /* f's mode; g: no_meta, no HEAD */

	/* Fresh: from memory, no request. */
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	ns_listing_put(l);
	assert_int_equal(g_lists, 1);
	/* A change of ours makes it stale: LISTed again; the zero-byte
	 * objects' types come from the index now, not from more HEADs. */
	ns_dir_invalidate(e->ns, "", false);
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_true(find(l, "f")->is_dir);
	ns_listing_put(l);
	assert_int_equal(g_lists, 2);
	assert_int_equal(g_heads, 1);
}

/* A name that is both an object and a prefix shows as the directory;
 * ns_resolve walks a path through listings. */
static void test_listing_object_and_prefix(void **state)
{
	struct env *e = *state;
	struct ns_entry x;
	struct ns_listing *l;
	char key[256];
	int err;

	put(e, "p/q/r", "123456", NULL, 0);
	g_extra[0].key = "p";
	g_extra[0].size = 4;
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_int_equal(l->n, 1);
	assert_true(find(l, "p")->is_dir);
	ns_listing_put(l);
	assert_int_equal(ns_resolve(e->ns, "p/q/r", &x, key, sizeof(key)), 0);
	assert_false(x.is_dir);
	assert_int_equal(x.size_bytes, 6);
	assert_string_equal(key, "p/q/r");
	assert_int_equal(ns_resolve(e->ns, "p/q", &x, key, sizeof(key)), 0);
	assert_true(x.is_dir);
	assert_string_equal(key, "p/q/");
	assert_int_equal(ns_resolve(e->ns, "p/zz", &x, key, sizeof(key)),
			 -ENOENT);
	assert_int_equal(ns_resolve(e->ns, "p/q/r/s", &x, key, sizeof(key)),
			 -ENOTDIR);
}

/* The packed form round-trips; a damaged one is refused; a new
 * namespace over the same cache serves a listing from the index without
 * a LIST. */
static void test_listing_index(void **state)
{
	struct env *e = *state;
	struct ns_listing *l, *m;
	const char *why = NULL;
	unsigned char *b;
	size_t len;
	struct ns_stats s;
	int err;

	put(e, "x1", "1", NULL, 0);
	put(e, "x2", "22", NULL, 0);
	put(e, "y/z", "3", NULL, 0);
	put(e, "x3", "333", &(struct obj_kv){ "mode", "33188" }, 1);
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_true(find(l, "x1")->no_meta);
	assert_false(find(l, "x3")->no_meta);
	b = ns_pack(l, &len);
	assert_non_null(b);
	m = calloc(1, sizeof(*m));
	atomic_store(&m->refs, 1);
	assert_int_equal(ns_parse(b, len, m, &why), 0);
	assert_int_equal(m->n, l->n);
	for (size_t i = 0; i < l->n; i++) {
		struct ns_entry x, y;

		ns_listing_at(m, i, &x);
		ns_listing_at(l, i, &y);
		assert_string_equal(x.name, y.name);
		assert_int_equal(x.is_dir, y.is_dir);
		assert_int_equal(x.size_bytes, y.size_bytes);
		assert_int_equal(x.mtime_s, y.mtime_s);
		assert_string_equal(x.etag, y.etag);
		assert_int_equal(x.no_meta, y.no_meta);
		assert_int_equal(x.markers, y.markers);
		assert_int_equal(x.untyped, y.untyped);
	}
	ns_listing_put(m);
	b[len / 2] ^= 1;
	m = calloc(1, sizeof(*m));
	atomic_store(&m->refs, 1);
	assert_int_equal(ns_parse(b, len, m, &why), -EBADMSG);
	assert_string_equal(why, "wrong checksum");
	ns_listing_put(m);
	free(b);
	ns_listing_put(l);

	/* A remount: the index has it (written by the cache's flusher at
	 * close at the latest). */
	ns_close(e->ns);
	cache_close(e->c);
	cache_up(e);
	ns_up(e);
	g_lists = 0;
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_int_equal(l->n, 4);
	assert_int_equal(find(l, "x2")->size_bytes, 2);
	assert_true(find(l, "x2")->no_meta);
	assert_false(find(l, "x3")->no_meta);
	ns_listing_put(l);
	assert_int_equal(g_lists, 0);
	ns_get_stats(e->ns, &s);
	assert_int_equal(s.index_loads, 1);
}

/* A sealed listing gives back every field it was built with: ETags in
 * S3's form (kept in binary), with "-N", and any other text; a dirty
 * entry's attributes; types, markers and flags.  Lookups by name find
 * each entry and nothing between them. */
static void test_listing_seal(void **state)
{
	static const char *etags[] = {
		"0123456789abcdef0123456789abcdef",
		"0123456789abcdef0123456789abcdef-17",
		"0123456789ABCDEF0123456789ABCDEF", /* not S3's: text */
		"12-34-56", "", "dir",
	};
	struct ns_listing *l = calloc(1, sizeof(*l));
	struct ns_entry x;
	size_t cap = 0;

	(void)state;
	assert_non_null(l);
	atomic_store(&l->refs, 1);
	for (int i = 0; i < 60; i++) {
		struct obj_entry oe = { .size_bytes = (uint64_t)i << 33,
					.mtime_s = 1000000000 + i,
					.no_meta = i % 5 == 0 };
		char name[32];

		snprintf(oe.etag, sizeof(oe.etag), "%s", etags[i % 6]);
		snprintf(name, sizeof(name), "n%03d", 59 - i); /* unsorted */
		assert_int_equal(ns_add_entry(l, &cap, name, i % 7 == 0, &oe),
				 0);
		struct ns_entry *e = &l->e[l->n - 1];

		e->markers = (unsigned)i % 8;
		e->untyped = i % 3 == 0;
		e->pending = i % 4 == 0;
		e->ftype = i % 7 ? (i % 2 ? S_IFLNK : S_IFIFO) : 0;
		if (i % 4 == 0) {
			e->has_attr = true;
			e->mode = 0600 + (unsigned)i;
			e->uid = 1000 + (unsigned)i;
			e->gid = 2000 + (unsigned)i;
			e->rdev = 77 + (unsigned)i;
			e->mtime_ns = 1000000000123LL * i;
			e->ctime_ns = 2000000000456LL * i;
			e->atime_ns = 3000000000789LL * i;
		}
	}
	ns_dedup(l);
	assert_int_equal(ns_listing_seal(l), 0);
	assert_null(l->e);
	assert_int_equal(l->n, 60);
	for (int i = 0; i < 60; i++) {
		char name[32];

		snprintf(name, sizeof(name), "n%03d", 59 - i);
		assert_true(ns_listing_find(l, name, &x));
		assert_string_equal(x.name, name);
		assert_int_equal(x.size_bytes, (uint64_t)i << 33);
		assert_int_equal(x.mtime_s, 1000000000 + i);
		assert_string_equal(x.etag, etags[i % 6]);
		assert_int_equal(x.no_meta, i % 5 == 0);
		assert_int_equal(x.is_dir, i % 7 == 0);
		assert_int_equal(x.markers, (unsigned)i % 8);
		assert_int_equal(x.untyped, i % 3 == 0);
		assert_int_equal(x.pending, i % 4 == 0);
		assert_int_equal(x.ftype, i % 7 ? (i % 2 ? S_IFLNK : S_IFIFO)
					       : 0);
		assert_int_equal(x.has_attr, i % 4 == 0);
		if (i % 4 == 0) {
			assert_int_equal(x.mode, 0600 + (unsigned)i);
			assert_int_equal(x.uid, 1000 + (unsigned)i);
			assert_int_equal(x.gid, 2000 + (unsigned)i);
			assert_int_equal(x.rdev, 77 + (unsigned)i);
			assert_int_equal(x.mtime_ns, 1000000000123LL * i);
			assert_int_equal(x.ctime_ns, 2000000000456LL * i);
			assert_int_equal(x.atime_ns, 3000000000789LL * i);
		} else {
			assert_int_equal(x.mode, 0);
			assert_int_equal(x.mtime_ns, 0);
		}
	}
	for (size_t i = 1; i < l->n; i++)
		assert_true(strcmp(ns_listing_name(l, i - 1),
				   ns_listing_name(l, i)) < 0);
	assert_false(ns_listing_find(l, "n0305", &x));
	assert_false(ns_listing_find(l, "a", &x));
	assert_false(ns_listing_find(l, "z", &x));
	assert_int_equal(ns_listing_seal(l), 0); /* sealed: nothing to do */
	ns_listing_put(l);
}

/* Memory holds at most listing_mem_entries entries (but for the listing
 * just used); what falls out comes back from the index. */
static void test_listing_memory_bound(void **state)
{
	struct env *e = *state;
	struct ns_stats s;
	char key[64];
	int err;

	ns_close(e->ns);
	e->nc.listing_mem_entries = 5;
	ns_up(e);
	for (int d = 0; d < 4; d++)
		for (int f = 0; f < 3; f++) {
			snprintf(key, sizeof(key), "d%d/f%d", d, f);
			put(e, key, "x", NULL, 0);
		}
	for (int d = 0; d < 4; d++) {
		struct ns_listing *l;

		snprintf(key, sizeof(key), "d%d/", d);
		l = ns_dir_listing(e->ns, key, &err);
		assert_non_null(l);
		assert_int_equal(l->n, 3);
		ns_listing_put(l);
		ns_get_stats(e->ns, &s);
		assert_true(s.dir_entries <= 5 || s.dirs == 1);
	}
	ns_get_stats(e->ns, &s);
	assert_int_equal(s.dirs, 1);
	assert_int_equal(s.dir_entries, 3);
}

/* ---- the store unreachable ---- */

static void test_store_down(void **state)
{
	struct env *e = *state;
	struct ns_listing *l;
	struct ns_entry x;
	struct obj_meta m;
	int err;

	put(e, "k", "v", NULL, 0);
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	ns_listing_put(l);
	assert_true(ns_store_up(e->ns));

	/* Refused: an answer, the store stays up. */
	g_fault = OBJ_ERR_DENIED;
	assert_int_equal(ns_head(e->ns, "k", &m), -EACCES);
	assert_true(ns_store_up(e->ns));
	assert_true(ns_connected(e->ns));

	/* A transport failure: stale listings are served, unknown
	 * directories fail, nothing is retried per lookup. */
	g_fault = OBJ_ERR_CONNECT;
	ns_dir_invalidate(e->ns, "", false);
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	assert_int_equal(err, 0);
	assert_true(ns_listing_find(l, "k", &(struct ns_entry){ 0 }));
	ns_listing_put(l);
	assert_false(ns_store_up(e->ns));
	assert_false(ns_connected(e->ns));
	g_lists = 0;
	assert_int_equal(ns_find(e->ns, "", "k", &x), 0);
	assert_false(x.is_dir);
	assert_int_equal(ns_find(e->ns, "", "nope", &x), -ENOENT);
	assert_int_equal(g_lists, 0);
	assert_null(ns_dir_listing(e->ns, "other/", &err));
	assert_int_equal(err, -EIO);
	assert_false(ns_store_probe(e->ns));

	/* It answers again: connected at the first answer. */
	g_fault = OBJ_OK;
	assert_true(ns_store_probe(e->ns));
	assert_true(ns_connected(e->ns));
	assert_true(ns_store_up(e->ns));
	assert_int_equal(g_checks, 2);
}

/* ---- lookups ---- */

/* A name missing from a listing older than the negative bound is asked
 * of the store with one LIST of that name; the answer "missing" is kept
 * for the bound. */
static void test_negative_lookup(void **state)
{
	struct env *e = *state;
	struct ns_entry x;
	struct ns_listing *l;
	int err;

	ns_close(e->ns);
	e->nc.negative_refresh_s = 1;
	ns_up(e);
	put(e, "old", "1", NULL, 0);
	l = ns_dir_listing(e->ns, "", &err);
	assert_non_null(l);
	ns_listing_put(l);
	put(e, "new", "22", NULL, 0);
	/* Younger than the bound: the listing's answer stands. */
	assert_int_equal(ns_find(e->ns, "", "new", &x), -ENOENT);
	usleep(1100 * 1000);
	g_lists = 0;
	assert_int_equal(ns_find(e->ns, "", "new", &x), 0);
	assert_int_equal(x.size_bytes, 2);
	assert_int_equal(g_lists, 1);
	/* Found so: the directory is LISTed again at its next look, for
	 * readdir to show it too. */
	assert_int_equal(ns_find(e->ns, "", "old", &x), 0);
	assert_int_equal(g_lists, 2);
	usleep(1100 * 1000);
	assert_int_equal(ns_find(e->ns, "", "gone", &x), -ENOENT);
	assert_int_equal(g_lists, 3);
	assert_int_equal(ns_find(e->ns, "", "gone", &x), -ENOENT);
	assert_int_equal(g_lists, 3); /* remembered for the bound */
	assert_int_equal(ns_name_check("ok"), 0);
	{
		char big[300];

		memset(big, 'b', 299);
		big[299] = '\0';
		assert_int_equal(ns_find(e->ns, "", big, &x), -ENAMETOOLONG);
	}
}

/* --refresh 0: every lookup asks the store for that one name (a LIST of
 * the name, one page), whatever the size of its directory; each kind of
 * directory is found so, and a name changed or removed behind our back
 * is seen at the next lookup. */
static void test_refresh_zero(void **state)
{
	struct env *e = *state;
	struct obj_kv dirmode = { "mode", "16877" };
	struct ns_entry x;
	char key[64];

	ns_close(e->ns);
	e->nc.refresh_s = 0;
	e->nc.negative_refresh_s = 0;
	ns_up(e);
	for (int i = 0; i < 1500; i++) { /* two pages of LIST */
		snprintf(key, sizeof(key), "many/f%d", i);
		put(e, key, "", NULL, 0);
	}
	put(e, "r0fold_$folder$", "", NULL, 0);
	put(e, "r0pre/x", "x", NULL, 0);
	put(e, "r0s3fs", "", &dirmode, 1);
	g_extra[0].key = "r0dir/";
	g_extra[0].prefix = true;
	g_lists = 0;
	for (int i = 10; i < 20; i++) {
		snprintf(key, sizeof(key), "f%d", i);
		assert_int_equal(ns_find(e->ns, "many/", key, &x), 0);
		assert_false(x.is_dir);
	}
	assert_int_equal(g_lists, 10); /* one small LIST a lookup */
	assert_int_equal(ns_find(e->ns, "many/", "nope", &x), -ENOENT);
	assert_int_equal(g_lists, 11);
	assert_int_equal(ns_find(e->ns, "", "r0dir", &x), 0);
	assert_true(x.is_dir);
	assert_int_equal(ns_find(e->ns, "", "r0fold", &x), 0);
	assert_true(x.is_dir);
	assert_int_equal(x.markers, NS_MARK_FOLDER);
	assert_int_equal(ns_find(e->ns, "", "r0pre", &x), 0);
	assert_true(x.is_dir);
	assert_int_equal(ns_find(e->ns, "", "r0s3fs", &x), 0);
	assert_true(x.is_dir);
	assert_int_equal(x.markers, NS_MARK_PLAIN);

	/* Changed, then removed, behind our back. */
	put(e, "many/f10", "longer", NULL, 0);
	assert_int_equal(ns_find(e->ns, "many/", "f10", &x), 0);
	assert_int_equal(x.size_bytes, 6);
	assert_int_equal(unlink(strcat(strcpy(key, e->store_dir), "/many/f10")),
			 0);
	assert_int_equal(ns_find(e->ns, "many/", "f10", &x), -ENOENT);
}

/* Dirty files and tombstones over the listing: a dirty file is found
 * before the bucket is asked, its directory exists through it alone, a
 * tombstoned object is gone from lookups and from the view. */
static void test_find_with_writeback(void **state)
{
	struct env *e = *state;
	struct cache_wattr a = { .kind = CACHE_WK_FILE, .mode = 0644,
				 .uid = 7, .gid = 8, .mtime_ns = 5000000000 };
	struct cache_wfile *w;
	struct ns_listing *v;
	struct ns_entry x;
	int err;

	put(e, "keep", "k", NULL, 0);
	put(e, "drop", "d", NULL, 0);
	assert_int_equal(cache_w_create(e->c, "new/file", &a, false, NULL,
					NULL, &w), 0);
	cache_w_put(w);
	assert_int_equal(cache_w_tombstone(e->c, "drop", false), 0);

	assert_int_equal(ns_find(e->ns, "", "new", &x), 0);
	assert_true(x.is_dir);
	assert_true(x.pending);
	assert_int_equal(ns_find(e->ns, "new/", "file", &x), 0);
	assert_false(x.is_dir);
	assert_true(x.has_attr);
	assert_int_equal(x.mode, 0644);
	assert_int_equal(x.uid, 7);
	assert_int_equal(x.mtime_s, 5);
	assert_int_equal(ns_find(e->ns, "", "drop", &x), -ENOENT);
	assert_int_equal(ns_find(e->ns, "", "keep", &x), 0);

	v = ns_dir_view(e->ns, "", &err);
	assert_non_null(v);
	assert_int_equal(v->n, 2);
	assert_string_equal(ns_listing_name(v, 0), "keep");
	ns_listing_at(v, 1, &x);
	assert_string_equal(x.name, "new");
	assert_true(x.is_dir);
	assert_true(x.pending);
	ns_listing_put(v);
}

/* ---- renames ---- */

static void test_rename_dir(void **state)
{
	struct env *e = *state;
	struct obj_meta m;
	char to[OBJ_KEY_MAX + 2];
	size_t room = obj_key_room(e->st);

	put(e, "s/1", "one", NULL, 0);
	put(e, "s/sub/2", "two", NULL, 0);

	/* All or nothing: one key too long for the store moves nothing. */
	memset(to, 't', room - 4);
	snprintf(to + room - 4, sizeof(to) - (room - 4), "/");
	assert_int_equal(ns_rename_dir(e->ns, "s/", to, NS_MARK_PREFIX),
			 -ENAMETOOLONG);
	assert_int_equal(g_copies, 0);
	assert_false(cache_w_tombstoned(e->c, "s/1"));

	assert_int_equal(ns_rename_dir(e->ns, "s/", "t/", NS_MARK_PREFIX), 0);
	assert_int_equal(g_copies, 2);
	assert_int_equal(ns_head(e->ns, "t/1", &m), 0);
	assert_int_equal(m.size_bytes, 3);
	obj_meta_release(&m);
	assert_int_equal(ns_head(e->ns, "t/sub/2", &m), 0);
	obj_meta_release(&m);
	assert_true(cache_w_tombstoned(e->c, "s/1"));
	assert_true(cache_w_tombstoned(e->c, "s/sub/2"));

	/* A copy that fails leaves the source alone. */
	put(e, "u", "x", NULL, 0);
	g_fault = OBJ_ERR_SERVER;
	assert_int_equal(ns_rename_file(e->ns, "u", "w",
					&(struct ns_entry){ .name = NULL },
					NULL), -EIO);
	g_fault = OBJ_OK;
	assert_false(cache_w_tombstoned(e->c, "u"));
}

/* Mode lu never writes to the bucket: a clean object cannot move. */
static void test_rename_local_only(void **state)
{
	struct env *e = *state;

	ns_close(e->ns);
	e->nc.local_only = true;
	ns_up(e);
	put(e, "u", "x", NULL, 0);
	assert_int_equal(ns_rename_file(e->ns, "u", "w",
					&(struct ns_entry){ .name = NULL },
					NULL), -EXDEV);
	assert_int_equal(g_copies, 0);
}

/* ---- metadata ---- */

static void test_meta_attr(void **state)
{
	struct env *e = *state;
	struct obj_kv kv[] = {
		{ "mode", "33188" }, { "uid", "12" }, { "gid", "x" },
		{ "mtime", "1000000000" }, { "atime", "1000000001.5" },
		{ "other", "1" },
	};
	struct obj_meta m = { .etag = "etag1", .user = kv,
			      .nuser = ARRAY_SIZE(kv) };
	struct cache_attr a;
	struct ns_entry x;

	ns_meta_attr(&m, &a);
	assert_string_equal(a.etag, "etag1");
	assert_true(a.has & CACHE_ATTR_MODE);
	assert_int_equal(a.mode, 0100644);
	assert_true(a.has & CACHE_ATTR_UID);
	assert_false(a.has & CACHE_ATTR_GID); /* not a number: not taken */
	assert_true(a.has & CACHE_ATTR_MTIME);
	assert_int_equal(a.mtime_ns, 1000000000ll * 1000000000);
	assert_true(a.has & CACHE_ATTR_ATIME);
	assert_int_equal(a.atime_ns, 1000000001500000000ll);
	assert_false(a.has & CACHE_ATTR_CTIME);

	/* What is stored shows; the defaults only for the rest. */
	memset(&x, 0, sizeof(x));
	ns_attr_resolve(e->ns, false, 42, &a, &x);
	assert_int_equal(x.mode, 0644);
	assert_int_equal(x.uid, 12);
	assert_int_equal(x.gid, 1000);
	assert_int_equal(x.mtime_ns, 1000000000ll * 1000000000);
	memset(&a, 0, sizeof(a));
	memset(&x, 0, sizeof(x));
	ns_attr_resolve(e->ns, false, 42, &a, &x);
	assert_int_equal(x.mode, 0600);
	assert_int_equal(x.mtime_ns, 42ll * 1000000000);
	ns_attr_resolve(e->ns, true, 42, &a, &x);
	assert_int_equal(x.mode, 0755);
	assert_int_equal(x.mtime_ns, 1700000000ll * 1000000000);
}

/* Other tools' forms: rclone's octal modes and RFC 3339 times, s3cmd's
 * s3cmd-attrs (read after the plain names), a directory's Content-Type;
 * values that are none of these are not taken. */
static void test_meta_attr_foreign(void **state)
{
	struct obj_kv rc[] = {
		{ "mode", "100640" }, { "uid", "1000" },
		{ "mtime", "2023-05-11T17:54:11.523399602+01:00" },
		{ "atime", "2001-09-09T01:46:40Z" }, { "btime", "x" },
	};
	struct obj_kv s3cmd[] = {
		{ "s3cmd-attrs", "atime:1000000000/ctime:1000000001/gid:7/"
				 "gname:g/md5:00/mode:33261/mtime:1000000002/"
				 "uid:5/uname:u" },
		{ "uid", "6" },
	};
	struct obj_kv bad[] = {
		{ "mode", "99999" }, { "mtime", "2023-13-45T99:00:00Z" },
		{ "uid", "-1" }, { "gid", "4294967296" }, { "ctime", "" },
	};
	struct obj_kv dirs[] = { { "mode", "40755" } };
	struct obj_kv more[] = {
		{ "mode", "41471" },                   /* s3fs's symlink */
		{ "mtime", "1969-12-31T23:59:59Z" },   /* -1, not an error */
		{ "atime", "0001-01-01T00:00:00Z" },   /* past nanoseconds */
		{ "ctime", "2020-01-01T00:00:00+24:00" },
	};
	struct obj_kv perm[] = { { "mode", "644" } };
	struct obj_meta m = { .etag = "e", .user = rc,
			      .nuser = ARRAY_SIZE(rc) };
	struct cache_attr a;

	(void)state;
	ns_meta_attr(&m, &a);
	assert_int_equal(a.mode, 0100640);
	assert_int_equal(a.uid, 1000);
	/* 16:54:11 UTC */
	assert_true(a.mtime_ns == 1683824051523399602ll);
	assert_true(a.atime_ns == 1000000000ll * 1000000000);
	assert_int_equal(a.has, CACHE_ATTR_MODE | CACHE_ATTR_UID |
			 CACHE_ATTR_MTIME | CACHE_ATTR_ATIME);

	m.user = s3cmd, m.nuser = ARRAY_SIZE(s3cmd);
	ns_meta_attr(&m, &a);
	assert_int_equal(a.mode, 0100755);
	assert_int_equal(a.uid, 6); /* the plain name first */
	assert_int_equal(a.gid, 7);
	assert_true(a.mtime_ns == 1000000002ll * 1000000000);
	assert_true(a.ctime_ns == 1000000001ll * 1000000000);
	assert_false(a.has & CACHE_ATTR_ISDIR);

	m.user = bad, m.nuser = ARRAY_SIZE(bad);
	ns_meta_attr(&m, &a);
	assert_int_equal(a.has, 0);

	m.user = dirs, m.nuser = ARRAY_SIZE(dirs);
	ns_meta_attr(&m, &a);
	assert_int_equal(a.mode, 040755); /* octal: no type in decimal */
	m.user = more, m.nuser = ARRAY_SIZE(more);
	ns_meta_attr(&m, &a);
	assert_int_equal(a.mode, 0120777);
	assert_int_equal(a.has, CACHE_ATTR_MODE | CACHE_ATTR_MTIME);
	assert_true(a.mtime_ns == -1000000000ll);
	m.user = perm, m.nuser = 1;
	ns_meta_attr(&m, &a);
	assert_int_equal(a.mode, 0644);
	m.nuser = 0;
	snprintf(m.content_type, sizeof(m.content_type),
		 "application/x-directory; charset=UTF-8");
	ns_meta_attr(&m, &a);
	assert_int_equal(a.has, CACHE_ATTR_ISDIR);
	snprintf(m.content_type, sizeof(m.content_type),
		 "application/x-directoryish");
	ns_meta_attr(&m, &a);
	assert_int_equal(a.has, 0);
}

static void test_xattr_names(void **state)
{
	char meta[256], name[256], enc[4096], dec[2048];
	const char bin[] = { 'a', 0, (char)0xff, ' ' };
	ssize_t n;

	(void)state;
	assert_int_equal(ns_xattr_meta("user.plain-1", meta, sizeof(meta)), 0);
	assert_string_equal(meta, "plain-1");
	assert_int_equal(ns_xattr_meta("user.Foo.bar", meta, sizeof(meta)), 0);
	assert_string_equal(meta, "fmfs-x-user-2e-46oo-2ebar");
	assert_true(ns_xattr_name(meta, name, sizeof(name)));
	assert_string_equal(name, "user.Foo.bar");
	/* Never onto an attribute's name. */
	assert_int_equal(ns_xattr_meta("user.mode", meta, sizeof(meta)), 0);
	assert_string_not_equal(meta, "mode");
	assert_true(ns_xattr_reserved("mode"));
	assert_false(ns_xattr_name("mode", name, sizeof(name)));
	assert_int_equal(ns_xattr_meta("security.selinux", meta,
				       sizeof(meta)), -ENOTSUP);
	assert_int_equal(ns_xattr_meta("user.", meta, sizeof(meta)), -EINVAL);

	n = ns_xattr_value_encode("plain text", 10, enc, sizeof(enc));
	assert_int_equal(n, 10);
	assert_string_equal(enc, "plain text");
	n = ns_xattr_value_encode(bin, sizeof(bin), enc, sizeof(enc));
	assert_true(n > 0);
	assert_true(!strncmp(enc, "fmfs-b64:", 9));
	n = ns_xattr_value_decode(enc, dec, sizeof(dec));
	assert_int_equal(n, sizeof(bin));
	assert_memory_equal(dec, bin, sizeof(bin));
	assert_int_equal(ns_xattr_value_decode(enc, dec, 2), -ERANGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_listing_kinds, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_listing_object_and_prefix,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_listing_index, setup,
						teardown),
		cmocka_unit_test(test_listing_seal),
		cmocka_unit_test_setup_teardown(test_listing_memory_bound,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_down, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_negative_lookup, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_refresh_zero, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_find_with_writeback,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_rename_dir, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rename_local_only, setup,
						teardown),
		cmocka_unit_test(test_meta_attr_foreign),
		cmocka_unit_test_setup_teardown(test_meta_attr, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_xattr_names, setup,
						teardown),
	};

	return run_tests_in_tmp_dir("fmfs-test-ns", tests);
}
