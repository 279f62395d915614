/* SPDX-License-Identifier: MIT */
/*
 * ns.h - the namespace of a mount: what names the bucket holds under the
 * mount's prefix and what each one is, as the store, the cache index and
 * the write-back see them together; and the changes of names that are
 * requests to the store (rename by server-side copy, directory markers,
 * metadata rewrites).  Below fs/, beside the read side of cache/
 * (docs/layout.md "ns/").
 *
 * Keys are relative to the mount's prefix: a file "a/b", a directory
 * "a/b/", the root "".  A directory is a key prefix; its listing is one
 * ListObjectsV2 with delimiter '/', all pages, kept for refresh_s
 * seconds, and answers lookups (positive and negative) and readdir
 * without more requests.  Names that cannot be path components (empty,
 * ".", "..", with a NUL, longer than NAME_MAX) are skipped and counted;
 * a name that is both an object and a prefix shows as the directory.
 * Directory marker objects ("dir/") make the directory exist and are not
 * shown; so do those of other tools, "dir_$folder$" (Hadoop) and a
 * zero-byte "dir" whose x-amz-meta-mode says S_IFDIR (older s3fs), which
 * a listing can only tell by a HEAD (docs/semantics.md "Directories made
 * by other tools").  A name missing from a listing older than the
 * negative bound is asked of the store.  Listings are kept in memory
 * (an LRU under a bound) and packed in the cache index (ns/index.c), so
 * that a remount, or a mount with the store down, serves them.
 *
 * Nothing here knows FUSE or inodes: fs/ keeps the kernel's view (inode
 * numbers, lookup counts, open handles) and asks ns/ for names.
 *
 * Threads: every function may be called from any thread.  The listing
 * cache, the directory generations and the negative slots are under the
 * namespace's own lock, taken inside none of the caller's locks' order
 * requirements (ns/ never calls back into fs/); listings are immutable
 * once built and shared by reference.  Errors are negative errnos.
 */
#ifndef FMFS_NS_H
#define FMFS_NS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/wb.h"
#include "objstore/objstore.h"

#define NS_LISTING_MAX_ENTRIES 4000000 /* per directory; memory bound */
#define NS_FOLDER_SUFFIX "_$folder$"    /* Hadoop S3A/s3n: "a/dir_$folder$" */
#define NS_OFFLINE_MS 5000              /* metadata stays stale this long
                                         * after a transport failure */
#define NS_XATTR_MAX 2048               /* an xattr value's bytes */

/* What makes a directory entry of the store's one (ns_entry.markers):
 * rmdir and rename remove each, and a directory is gone once each has a
 * tombstone (their DELETEs end in any order). */
#define NS_MARK_PLAIN  1u  /* "dir", its x-amz-meta-mode says S_IFDIR */
#define NS_MARK_FOLDER 2u  /* "dir_$folder$" */
#define NS_MARK_PREFIX 4u  /* keys under "dir/" (or the marker itself) */

/* One name in a directory, as the last listing saw it. */
struct ns_entry {
	char *name;
	bool is_dir;
	uint32_t ftype;         /* not a directory: its S_IFMT bits, as far
	                         * as known (0: a regular file) */
	bool pending;           /* a dirty file or directory, not the bucket's */
	bool untyped;           /* zero bytes, type not learned yet (a HEAD
	                         * may say directory) */
	bool no_meta;           /* the listing says the object keeps no
	                         * metadata (obj_entry.no_meta): its values
	                         * are final, no HEAD is asked */
	unsigned markers;       /* NS_MARK_*: the objects that make a
	                         * directory (from a listing) */
	uint64_t size_bytes;
	int64_t mtime_s;
	char etag[80];
	/* Attributes, when known: a dirty file's, or those stored with the
	 * object (from the cache index); never in a listing fetched from
	 * the store. */
	bool has_attr;
	uint32_t mode, uid, gid; /* mode: permission bits */
	int64_t mtime_ns;
	int64_t ctime_ns, atime_ns; /* 0: as mtime_ns */
	uint32_t rdev;
};

/* A directory's listing: immutable once built, shared by reference so a
 * refresh can replace it while readdir still walks the old one. */
struct ns_listing {
	atomic_uint refs;
	uint64_t fetched_ms;    /* util_now_ms of its LIST; 0: stale */
	uint64_t gen;           /* the directory's generation before the LIST */
	size_t n;
	/* While it is built (ns_add_entry, ns_dedup): n whole entries.  A
	 * listing handed out of this module is sealed: its entries packed
	 * (e NULL), read with ns_listing_at and ns_listing_find; a kept
	 * listing costs about 60 bytes an entry and its name instead of
	 * 200 (docs/performance.md "Memory per inode"). */
	struct ns_entry *e;
	struct ns_pent *p;      /* sealed: n entries, sorted by name */
	char *names;            /* sealed: their names, each ending in NUL */
	struct ns_pattr *attrs; /* sealed: the attributes of those that have
	                         * them (a dirty name's) */
};

struct ns_config {
	struct obj_store *st;       /* borrowed */
	struct cache *cache;        /* borrowed (listings, attributes,
	                             * the write-back) */
	unsigned refresh_s;         /* listings are fresh this long */
	unsigned negative_refresh_s; /* a name missing from a listing this
	                             * old is asked of the store */
	uint64_t listing_mem_entries; /* entries of listings kept in memory */
	bool local_only;            /* mode lu: nothing is ever copied in
	                             * the bucket (a rename of a clean
	                             * object is -EXDEV) */
	bool disconnected;          /* start as if the store did not answer */
	/* What an object shows for what it does not store (ns_attr_resolve) */
	uint32_t file_mode, dir_mode, uid, gid;
	int64_t dir_mtime_s;        /* directories' mtime: the mount's time */
	/* HEADs in parallel behind listings, for the stored attributes of
	 * objects the cache does not know (heads.c); 0: none */
	unsigned head_threads;
};

struct ns_stats {
	uint64_t listings, list_pages, heads, index_loads, skipped_names;
	uint64_t heads_behind;      /* of heads: made behind listings */
	size_t heads_waiting;       /* behind listings, waiting or out */
	size_t dirs, dir_entries;   /* listings in memory, their entries */
	bool connected;
};

struct ns;

int ns_open(const struct ns_config *cfg, struct ns **out);
void ns_close(struct ns *ns);
void ns_get_stats(struct ns *ns, struct ns_stats *st);
/* HEADs behind listings waiting or out (heads.c). */
size_t ns_heads_waiting(struct ns *ns);
/* Queues a HEAD of key, in the background, for the attributes stored
 * with it (for a caller that found the index without them for version
 * etag), unless one is waiting already; the HEAD is skipped if the index
 * knows them by then (heads.c; nothing if cfg.head_threads is 0). */
void ns_heads_want(struct ns *ns, const char *key, const char *etag);

/* ---- the store's reachability (store.c) ---- */

/* False while the store is considered unreachable. */
bool ns_store_up(struct ns *ns);
/* Whether the store answered the last request (false from a transport
 * failure until the next answer). */
bool ns_connected(struct ns *ns);
/* errno for an objstore failure, logged once per kind; a transport
 * failure marks the store unreachable for NS_OFFLINE_MS. */
int ns_obj_errno(struct ns *ns, obj_status st, const struct obj_error *e);
/* The store answered a request: connected (logged when it was not). */
void ns_store_answered(struct ns *ns);
/* While the store is unreachable: asks it (a bucket check).  true when
 * it answered. */
bool ns_store_probe(struct ns *ns);

/* ---- requests for the fs (store.c) ---- */

/* HEAD of key (one counted in the stats): 0 with *m filled
 * (obj_meta_release), -ENOENT when the store has no such key, else the
 * failure through ns_obj_errno. */
int ns_head(struct ns *ns, const char *key, struct obj_meta *m);
/* The first len bytes of key's object (a symlink's target): 0, *got. */
int ns_read_small(struct ns *ns, const char *key, char *buf, size_t len,
		  size_t *got);
/* Replaces key's user metadata with kv (a server-side copy onto
 * itself), its Content-Type content_type ("": the store's default);
 * etag gets the new version's. */
int ns_set_meta(struct ns *ns, const char *key, const struct obj_kv *kv,
		size_t n, const char *content_type, char etag[80]);
/* Every object under prefix (no delimiter), all pages, to fn; msg gets
 * the store's message on failure. */
typedef void (*ns_walk_fn)(void *arg, const struct obj_entry *e);
int ns_walk(struct ns *ns, const char *prefix, ns_walk_fn fn, void *arg,
	    char *msg, size_t msg_len);

/* ---- names (store.c) ---- */

/* Names as on a local disk: 0 if name is at most NAME_MAX (255) bytes,
 * else -ENAMETOOLONG.  Longer names in the bucket are not shown. */
int ns_name_check(const char *name);
/* 0 if the key ("a/b" or "a/b/") fits the store's key limit; else logs
 * that path was refused (what: "create", "rename") and returns
 * -ENAMETOOLONG, before anything is written; a key the store keeps for
 * itself (obj_key_reserved) is refused with -EPERM. */
int ns_key_check(struct ns *ns, const char *key, const char *what);

/* ---- listings (listing.c) ---- */

/* The directory's listing, fetched if missing or older than refresh_s
 * (served stale while the store is unreachable).  A new reference
 * (ns_listing_put), or NULL with *err set. */
struct ns_listing *ns_dir_listing(struct ns *ns, const char *dir_key,
				  int *err);
void ns_listing_put(struct ns_listing *l);
/* Entry i of a sealed listing into *out; out->name points into l (valid
 * while the caller holds its reference). */
void ns_listing_at(const struct ns_listing *l, size_t i,
		   struct ns_entry *out);
/* The name of entry i of a sealed listing. */
const char *ns_listing_name(const struct ns_listing *l, size_t i);
/* The entry of that name of a sealed listing into *out (as
 * ns_listing_at); false when the listing has none. */
bool ns_listing_find(const struct ns_listing *l, const char *name,
		     struct ns_entry *out);
/* Forgets cached listings of dir_key (marks them stale), or with prefix
 * every listing under it too; in the index as well. */
void ns_dir_invalidate(struct ns *ns, const char *dir_key, bool prefix);
/* Resolves a path relative to the mount root ("a/b") through listings:
 * out and key ("a/b" or "a/b/") filled.  0 or -errno. */
int ns_resolve(struct ns *ns, const char *path, struct ns_entry *out,
	       char *key, size_t key_len);

/* ---- lookups with the write-back applied (lookup.c) ---- */

/* Finds name in directory dir_key, looking at dirty files and
 * deletions first, then the listing, then (past the negative bound) the
 * store.  0 (out filled, out->name NULL) or -errno. */
int ns_find(struct ns *ns, const char *dir_key, const char *name,
	    struct ns_entry *out);
/* A directory's listing with the write-back's dirty files and deletions
 * applied (a new reference), or NULL with *err set. */
struct ns_listing *ns_dir_view(struct ns *ns, const char *dir_key,
			       int *err);

/* ---- metadata: attributes and xattrs as S3 user metadata (meta.c) ---- */

/* A HEAD's answer as the cache index keeps it: the attributes its user
 * metadata stores under the names of fmfs, s3fs and rclone ("mode",
 * "uid", "gid", "mtime", "ctime", "atime", "rdev"; a mode in decimal or
 * octal, times in seconds or RFC 3339) or s3cmd ("s3cmd-attrs"), and a
 * directory's Content-Type (docs/semantics.md "Objects other tools
 * wrote"). */
void ns_meta_attr(const struct obj_meta *m, struct cache_attr *a);
/* A dirty file's attributes as uploaded, for the index. */
void ns_wattr_attr(const struct cache_wattr *w, const char *etag,
		   struct cache_attr *a);
/* Stored attributes a, with the configured defaults for what a lacks,
 * into e (has_attr set); mtime_s: the object's Last-Modified. */
void ns_attr_resolve(const struct ns *ns, bool is_dir, int64_t mtime_s,
		     const struct cache_attr *a, struct ns_entry *e);
/* An entry for a dirty file's attributes. */
void ns_entry_from_w(struct ns_entry *e, const struct cache_wattr *a);
/* The metadata names fmfs keeps attributes under (mode, uid, gid, mtime,
 * ctime, atime, rdev): never an xattr. */
bool ns_xattr_reserved(const char *meta);
/* security., system., trusted.: names the kernel gives a meaning to,
 * not stored. */
bool ns_xattr_kernel_ns(const char *name);
/* The metadata name of xattr name, in meta (len >= 129 bytes).  0,
 * -ENOTSUP for a kernel namespace, -EINVAL for "" or "user.", -ERANGE
 * when the metadata name would pass 128 bytes. */
int ns_xattr_meta(const char *name, char *meta, size_t len);
/* The xattr name of metadata name meta, in name (len >= 256 bytes);
 * false when meta is not an xattr (a reserved name). */
bool ns_xattr_name(const char *meta, char *name, size_t len);
/* An xattr value as stored in metadata: out gets a NUL-terminated
 * string; its length, or -E2BIG when it does not fit len. */
ssize_t ns_xattr_value_encode(const char *v, size_t n, char *out,
			      size_t len);
/* A stored value back: its bytes in out (len at most), their count, or
 * -ERANGE.  A value fmfs did not encode comes back as it is. */
ssize_t ns_xattr_value_decode(const char *s, char *out, size_t len);

/* ---- changes of names (rename.c) ---- */

/* A dirty file seen as never uploaded (pending) may have been uploaded
 * and left the table since: pinned (*pin, ns_unpin), it cannot; gone, it
 * is in the bucket now.  Returns whether the bucket may have key. */
bool ns_pin_pending(struct ns *ns, const char *key, bool pending,
		    struct cache_wfile **pin);
void ns_unpin(struct cache_wfile *pin);
/* The objects of other tools that make directory key ("a/dir/") one
 * (markers, NS_MARK_*) get tombstones, as its own marker does. */
void ns_remove_markers(struct ns *ns, const char *key, unsigned markers);
/* A server-side copy of the clean object from onto to (whatever was
 * dirty under to goes); the index's attributes follow. */
int ns_copy_to(struct ns *ns, const char *from, const char *to);
/* Renames the file from (entry se) to to (its entry de, or NULL): the
 * write-back's rename, or a server-side copy and a tombstone. */
int ns_rename_file(struct ns *ns, const char *from, const char *to,
		   const struct ns_entry *se, const struct ns_entry *de);
/* Every key under the prefix from ("a/dir/"), in the bucket and dirty,
 * moves under to; so do other tools' markers of it. */
int ns_rename_dir(struct ns *ns, const char *from, const char *to,
		  unsigned markers);

#endif /* FMFS_NS_H */
