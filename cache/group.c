/* SPDX-License-Identifier: MIT */
/*
 * group.c - the cache as a member of a cache group
 * (docs/cluster-cache.md): asking a run's owner before the bucket, and
 * serving this member's runs to the others.
 *
 * Both sides go through the cache's own paths, so what holds for a
 * fetch from the bucket holds for one from a peer: the bytes land in the
 * cache file with a CRC32C per block, busy bits make concurrent readers
 * of a run wait for one request, and the reservation under the cap is
 * the same.  The owner serves through cache_file_read, so its own
 * missing blocks are fetched once (coalesced with its readers) and then
 * kept.
 *
 * The loop guard is per request: the runs a peer's request makes this
 * member fetch come from the bucket (the thread's serving_peer flag,
 * copied into each run's job), while this member's own readers still
 * ask owners for every other run of the same file.  And a peer's
 * request never waits for blocks this member is itself asking a member
 * for: it answers -EBUSY and the asker reads the bucket.  So no request
 * waits, directly or through another, for itself: see
 * docs/cluster-cache.md, "No cycles".  Bytes the guard sends to the
 * bucket for runs another member owns are counted (peer_guard_bytes).
 *
 * What a peer says is never trusted beyond the bytes: the request names
 * the object's key, ETag and size, the answer's blocks are checked
 * against the CRCs sent with them (peer_client_get), and any failure
 * sends the reader to the bucket.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache_int.h"

void cache_set_group(struct cache *c, const struct peer_group *g,
		     struct peer_client *pc)
{
	if (pc)
		c->peers = pc;
	atomic_store(&c->group, g && c->peers && g->self >= 0 && g->n > 1 ?
		     g : NULL);
	if (!g)
		c->peers = NULL;
}

/* Set while this thread serves a peer's request (cache_peer_serve). */
static _Thread_local bool serving_peer;

bool cache_serving_peer(void)
{
	return serving_peer;
}

/* Marks (or clears) f's blocks of [off, off + len) as asked of a member:
 * a peer's request that needs one of them answers -EBUSY rather than
 * wait (ensure.c, ensure_scan_locked). */
static bool mark_asking(struct cache_file *f, uint64_t off, uint64_t len,
			bool on)
{
	uint64_t bb = f->c->cfg.block_bytes;
	uint32_t b0 = (uint32_t)(off / bb), b1 = (uint32_t)((off + len +
							      bb - 1) / bb);

	pthread_mutex_lock(&f->lock);
	if (!f->asking && on)
		f->asking = calloc((f->nblocks + 63) / 64, sizeof(uint64_t));
	if (f->asking)
		for (uint32_t b = b0; b < b1 && b < f->nblocks; b++) {
			if (on)
				bit_set(f->asking, b);
			else
				bit_clear(f->asking, b);
		}
	pthread_mutex_unlock(&f->lock);
	return f->asking != NULL;
}

/* The member that owns f's [off, off + len), or -1 if no single one
 * does (a run cut by another list than this one). */
static int owner_of(const struct peer_group *g, const struct cache_file *f,
		    uint64_t off, uint64_t len)
{
	uint64_t end = 0;
	unsigned o = peer_place(g, f->key, f->etag, f->size_bytes, off, &end);

	return o >= g->n || off + len > end ? -1 : (int)o;
}

void cache_group_guarded(struct cache *c, const struct cache_file *f,
			 uint64_t off, uint64_t len)
{
	const struct peer_group *g = atomic_load(&c->group);

	if (g && owner_of(g, f, off, len) != g->self)
		atomic_fetch_add(&c->peer_guard_bytes, len);
}

int cache_group_fetch(struct cache *c, struct cache_file *f, uint64_t off,
		      uint64_t len, char *buf)
{
	const struct peer_group *g = atomic_load(&c->group);
	struct peer_get rq;
	char msg[512];
	int owner, rc;

	if (!g || !len || len > PEER_RUN_MAX_BYTES ||
	    strlen(f->key) > PEER_KEY_MAX || strlen(f->etag) > PEER_ETAG_MAX)
		return -ENOENT;
	owner = owner_of(g, f, off, len);
	if (owner == g->self)
		return -ENOENT;
	if (owner < 0) {
		/* Counted as the guard's: bytes another member may own. */
		atomic_fetch_add(&c->peer_guard_bytes, len);
		return -ENOENT;
	}
	memset(&rq, 0, sizeof(rq));
	strcpy(rq.key, f->key);
	strcpy(rq.etag, f->etag);
	rq.size_bytes = f->size_bytes;
	rq.off = off;
	rq.len = (uint32_t)len;
	if (!mark_asking(f, off, len, true))
		return -ENOMEM;
	rc = peer_client_get(c->peers, g->m[owner].id, &rq, buf, msg,
			     sizeof(msg));
	mark_asking(f, off, len, false);
	if (!rc) {
		atomic_fetch_add(&c->peer_hits, 1);
		atomic_fetch_add(&c->peer_bytes_in, len);
		return 0;
	}
	atomic_fetch_add(&c->peer_fallbacks, 1);
	if (rc == -EBUSY)
		atomic_fetch_add(&c->peer_busy, 1);
	/* A member down is said once, when it went down (peer_client_get
	 * logs it with the reason). */
	if (rc != -EHOSTDOWN && rc != -ENOENT && rc != -EBUSY)
		cache_log_ratelimited("%s; reading %s from the bucket", msg,
				      f->key);
	return rc;
}

int cache_peer_serve(void *arg, const struct peer_get *g,
		     unsigned char *buf)
{
	struct cache *c = arg;
	struct cache_file *f;
	ssize_t n;
	int rc;

	/* Another version cached here: say so, never replace it for a
	 * peer (the requester may be the one behind). */
	rc = cache_file_open_version(c, g->key, g->size_bytes, g->etag, false,
				     &f);
	if (rc == -ESTALE)
		atomic_fetch_add(&c->peer_refused, 1);
	if (rc)
		return rc == -ESTALE || rc == -EINVAL || rc == -EFBIG ?
		       -ENOENT : rc;
	/* The loop guard: what this request fetches comes from the bucket
	 * (fetch.c reads the flag when it queues the runs). */
	serving_peer = true;
	n = cache_file_read(f, buf, g->len, g->off);
	serving_peer = false;
	/* The object deleted from the bucket: "not that version", so the
	 * asker goes to the bucket without calling this member down. */
	if (n == -ESTALE || (n == -EIO && atomic_load(&f->gone)))
		n = -ENOENT;
	cache_file_close(f);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n != g->len)
		return -EIO;
	atomic_fetch_add(&c->peer_served, 1);
	atomic_fetch_add(&c->peer_bytes_out, g->len);
	return 0;
}

unsigned cache_group_describe(struct cache *c, char *buf, size_t len)
{
	const struct peer_group *g = atomic_load(&c->group);

	if (len)
		buf[0] = '\0';
	if (!g)
		return 0;
	peer_client_describe(c->peers, g, buf, len);
	return g->n;
}

const char *cache_group_transport(struct cache *c)
{
	return atomic_load(&c->group) && c->peers ?
	       peer_client_transport(c->peers) : "";
}
