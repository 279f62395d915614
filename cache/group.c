/* SPDX-License-Identifier: MIT */
/*
 * group.c - the cache as a member of a cache group (issue 21,
 * docs/cluster-cache.md): asking a run's owner before the bucket, and
 * serving this member's runs to the others.
 *
 * Both sides go through the cache's own paths, so what holds for a
 * fetch from the bucket holds for one from a peer: the bytes land in the
 * cache file with a CRC32C per block, busy bits make concurrent readers
 * of a run wait for one request, and the reservation under the cap is
 * the same.  The owner serves through cache_file_read, so its own
 * missing blocks are fetched once (coalesced with its readers) and then
 * kept.  A file being served to peers fetches from the bucket only: two
 * members that briefly disagree on the list must not ask each other in
 * a circle.
 *
 * What a peer says is never trusted beyond the bytes: the request names
 * the object's key, ETag and size, the answer's blocks are checked
 * against the CRCs sent with them (peer_client_get), and any failure
 * sends the reader to the bucket.
 */
#include <errno.h>
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

int cache_group_fetch(struct cache *c, struct cache_file *f, uint64_t off,
		      uint64_t len, char *buf)
{
	const struct peer_group *g = atomic_load(&c->group);
	struct peer_get rq;
	unsigned owner;
	char msg[512];
	int rc;

	if (!g || atomic_load(&f->peer_serving) || !len ||
	    len > PEER_RUN_MAX_BYTES || strlen(f->key) > PEER_KEY_MAX ||
	    strlen(f->etag) > PEER_ETAG_MAX)
		return -ENOENT;
	owner = peer_owner(g, f->key, f->etag, off / PEER_RUN_MAX_BYTES);
	if ((int)owner == g->self)
		return -ENOENT;
	memset(&rq, 0, sizeof(rq));
	strcpy(rq.key, f->key);
	strcpy(rq.etag, f->etag);
	rq.size_bytes = f->size_bytes;
	rq.off = off;
	rq.len = (uint32_t)len;
	rc = peer_client_get(c->peers, g->m[owner].id, &rq, buf, msg,
			     sizeof(msg));
	if (!rc) {
		atomic_fetch_add(&c->peer_hits, 1);
		atomic_fetch_add(&c->peer_bytes_in, len);
		return 0;
	}
	atomic_fetch_add(&c->peer_fallbacks, 1);
	/* A member down is said once, when it went down. */
	if (rc != -EHOSTDOWN && rc != -ENOENT)
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
	atomic_fetch_add(&f->peer_serving, 1);
	n = cache_file_read(f, buf, g->len, g->off);
	atomic_fetch_sub(&f->peer_serving, 1);
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
