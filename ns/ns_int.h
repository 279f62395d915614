/* SPDX-License-Identifier: MIT */
/*
 * ns_int.h - shared by the files of the ns module: the namespace's state
 * (struct ns) and the helpers its listings (listing.c), lookups
 * (lookup.c), index form (index.c) and store requests (store.c) share.
 */
#ifndef FMFS_NS_INT_H
#define FMFS_NS_INT_H

#include <pthread.h>
#include <string.h>

#include "ns.h"
#include "util/util.h"

#define NS_DIRCACHE_MAX 16384 /* directories whose listing we keep in
                               * memory (the index keeps more) */
#define NS_DIR_BUCKETS (1u << 16)
/* HEADs of zero-byte objects of unknown type per LIST of a directory
 * (older s3fs writes directories as such objects); the rest wait for a
 * later LIST or a lookup of their name. */
#define NS_PROBE_MAX 64
/* Names a lookup found missing in the store, remembered for the
 * negative bound so that a lookup and the create after it cost one
 * LIST (a lost slot only costs another). */
#define NS_NEG_SLOTS 4096
#define NS_DIR_GENS 256
#define NS_LIST_TRIES 8   /* LISTs of a directory changing meanwhile */
/* HEADs behind listings waiting at most (heads.c) */
#define NS_HEADS_QUEUED 65536
/* User metadata entries a copy with replaced metadata carries (a signed
 * request holds 32 headers, a few of them the request's own) */
#define NS_COPY_META_MAX 24

/* A cached listing, by directory key: independent of the kernel's
 * inodes, so a listing survives the kernel forgetting a directory
 * (drop_caches) and can still be served stale when the store is
 * unreachable. */
struct ns_dircache {
	char *key;
	struct ns_listing *l;
	struct ns_dircache *next;
	struct ns_dircache *lru_prev, *lru_next; /* most recently used first */
};

struct ns {
	struct ns_config cfg;
	pthread_mutex_t lock;       /* the listing cache, neg */
	struct ns_dircache **dirs;  /* NS_DIR_BUCKETS, by hash of the key */
	size_t ndirs;
	struct ns_dircache *dir_lru, *dir_lru_tail;
	size_t dir_entries;         /* in the listings of dirs: at most
	                             * cfg.listing_mem_entries but for one */
	/* Changes to the bucket under a directory, for a LIST that was out
	 * meanwhile (ns_dir_listing): dir_gen for renames of whole trees,
	 * dir_gens[hash of the directory key] for one directory.  Bumped
	 * by ns_dir_invalidate. */
	atomic_uint_fast64_t dir_gen;
	atomic_uint_fast64_t dir_gens[NS_DIR_GENS];
	/* Bumped by each ns_dir_mark_stale (no generation bump there): a
	 * listing read from the index across one is not kept as fresh. */
	atomic_uint_fast64_t stale_marks;
	/* Names found missing by a LIST of that name (ns_find), by hash of
	 * the key; protected by lock. */
	struct { uint64_t h, ms; } neg[NS_NEG_SLOTS];
	/* After a transport failure, metadata is served from what we have
	 * (no retries per lookup) until this time. */
	atomic_uint_fast64_t offline_until_ms;
	/* The store answered the last request (false from a transport
	 * failure until the next answer). */
	atomic_bool connected;
	/* counters (ns_get_stats) */
	atomic_uint_fast64_t listings, list_pages, heads, index_loads;
	atomic_uint_fast64_t skipped_names;
	atomic_uint_fast64_t heads_behind; /* of heads: behind listings */
	atomic_uint lists_busy;  /* LISTs of fetch_listing in flight, and */
	atomic_uint_fast64_t list_end_ms; /* when the last one ended: the
	                          * HEADs behind listings yield to them */
	struct ns_heads *hq;        /* heads.c; NULL: none made */
};

/* listing.c */
static inline size_t ns_hash_key(const char *key)
{
	return (size_t)util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key)) &
	       (NS_DIR_BUCKETS - 1);
}
/* A name a local disk could hold: skipped in listings otherwise. */
bool ns_name_ok(const char *n);
/* Appends an entry (oe: a listed object's size, time and ETag). */
int ns_add_entry(struct ns_listing *l, size_t *cap, const char *name,
		 bool is_dir, const struct obj_entry *oe);
/* Sorts l and keeps one entry per name (the directory if both). */
void ns_dedup(struct ns_listing *l);
/* A sealed listing's entry: ns_entry's fields, packed (56 bytes). */
struct ns_pent {
	uint32_t name;          /* offset into the listing's names */
	uint32_t attr;          /* index into its attrs; UINT32_MAX: none */
	uint64_t size_bytes;
	int64_t mtime_s;
	struct util_etag etag;  /* binary in S3's form, else text */
	uint8_t flags;          /* NS_PF_* */
	uint8_t markers;        /* NS_MARK_* */
	uint8_t ftype;          /* S_IFMT bits >> 12 */
};
#define NS_PF_DIR     1u
#define NS_PF_PENDING 2u
#define NS_PF_UNTYPED 4u
#define NS_PF_NO_META 8u
/* The attributes ns_entry has when has_attr. */
struct ns_pattr {
	uint32_t mode, uid, gid, rdev;
	int64_t mtime_ns, ctime_ns, atime_ns;
};
/* Packs l's built entries (ns_dedup first): 0, or -ENOMEM with l as it
 * was. */
int ns_listing_seal(struct ns_listing *l);
/* The type of a zero-byte object key (e: its entry); *budget: HEADs the
 * caller may still make. */
void ns_type_of_empty(struct ns *ns, const char *key, struct ns_entry *e,
		      unsigned *budget);
/* The generation of dir_key's listing (see struct ns). */
uint64_t ns_dir_gen(struct ns *ns, const char *dir_key);
/* The cached listing of dir_key is older than the bucket: the next look
 * fetches it again (no generation bump: nothing of ours moved). */
void ns_dir_mark_stale(struct ns *ns, const char *dir_key);

/* heads.c: HEADs behind listings (cfg.head_threads of them at once) */
int ns_heads_start(struct ns *ns);
void ns_heads_stop(struct ns *ns);

/* index.c: listings kept in the cache index */
/* l packed for the index (malloc'd; NULL: out of memory).  No lock. */
void *ns_pack(const struct ns_listing *l, size_t *len);
/* Hands l, packed, to the index if it is settled (fetched_ms set); lock
 * held, so that a change of ours marks it stale after, not before. */
void ns_keep(struct ns *ns, const char *dir_key,
	     const struct ns_listing *l, const void *packed, size_t len);
/* dir_key's listing as the index keeps it (a new listing, fetched_ms as
 * this process's clock would have it, 0 when stale), or NULL. */
struct ns_listing *ns_load(struct ns *ns, const char *dir_key);
/* Unpacks b (len bytes) into l; 0, or -EBADMSG with *why set. */
int ns_parse(const unsigned char *b, size_t len, struct ns_listing *l,
	     const char **why);

#endif /* FMFS_NS_INT_H */
