/* SPDX-License-Identifier: MIT */
/*
 * proto.c - the cache group's wire format (docs/cluster-cache.md,
 * "Protocol"): frame headers, the HELLO/AUTH exchange and the GET and
 * DATA bodies, as byte-exact encoders and decoders that trust nothing
 * they are given.  The transports (TCP, then libfabric RMA) send and
 * receive these bytes; nothing here touches a socket.
 *
 * AUTH: each side proves it holds the group's shared secret with an
 * HMAC-SHA256 over a fixed label, its role (client or server), both
 * sides' fresh nonces and both ids, its own first; the client first.  A
 * recorded AUTH is useless on another connection (the other side's
 * nonce differs); one reflected back, or relayed from a member acting
 * as a server to another's server, fails (the role and the order of the
 * nonces and ids differ).  The bytes that follow are not encrypted:
 * the peer port belongs on the cluster network.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

#include "peer/peer.h"
#include "util/util.h"

static const unsigned char magic[4] = { 'F', 'M', 'P', 'C' };

void peer_hdr_encode(unsigned char hdr[PEER_HDR_BYTES], enum peer_type t,
		     uint32_t body_len)
{
	memcpy(hdr, magic, 4);
	hdr[4] = (unsigned char)t;
	hdr[5] = hdr[6] = hdr[7] = 0;
	util_put32le(hdr + 8, body_len);
	util_put32le(hdr + 12, util_crc32c(0, hdr, 12));
}

int peer_hdr_decode(const unsigned char hdr[PEER_HDR_BYTES],
		    enum peer_type *t, uint32_t *body_len)
{
	if (memcmp(hdr, magic, 4) || hdr[5] || hdr[6] || hdr[7] ||
	    util_get32le(hdr + 12) != util_crc32c(0, hdr, 12))
		return -EPROTO;
	if (hdr[4] < PEER_HELLO || hdr[4] > PEER_WORKING)
		return -EPROTO;
	*t = (enum peer_type)hdr[4];
	*body_len = util_get32le(hdr + 8);
	return *body_len > PEER_BODY_MAX ? -EMSGSIZE : 0;
}

/* ---- a cursor over a body ---- */

struct cur {
	unsigned char *w;          /* encoding (else NULL) */
	const unsigned char *r;    /* decoding */
	size_t len, pos;
	bool bad;
};

static void *room(struct cur *c, size_t n)
{
	void *p;

	if (c->bad || n > c->len - c->pos) {
		c->bad = true;
		return NULL;
	}
	p = (c->w ? c->w : (unsigned char *)(uintptr_t)c->r) + c->pos;
	c->pos += n;
	return p;
}

static void put32(struct cur *c, uint32_t v)
{
	unsigned char *p = room(c, 4);

	if (p)
		util_put32le(p, v);
}

static void put64(struct cur *c, uint64_t v)
{
	unsigned char *p = room(c, 8);

	if (p)
		util_put64le(p, v);
}

static void put_bytes(struct cur *c, const void *b, size_t n)
{
	unsigned char *p = room(c, n);

	if (p && n)
		memcpy(p, b, n);
}

static void put_str(struct cur *c, const char *s)
{
	size_t n = strlen(s);
	unsigned char *p = room(c, 2);

	if (p) {
		p[0] = (unsigned char)n;
		p[1] = (unsigned char)(n >> 8);
	}
	put_bytes(c, s, n);
}

static uint32_t get32(struct cur *c)
{
	const unsigned char *p = room(c, 4);

	return p ? util_get32le(p) : 0;
}

static uint64_t get64(struct cur *c)
{
	const unsigned char *p = room(c, 8);

	return p ? util_get64le(p) : 0;
}

/* A u16-counted string of at most max bytes, no NUL inside. */
static void get_str(struct cur *c, char *out, size_t max)
{
	const unsigned char *p = room(c, 2), *s;
	size_t n;

	out[0] = '\0';
	if (!p)
		return;
	n = (size_t)p[0] | (size_t)p[1] << 8;
	if (n > max) {
		c->bad = true;
		return;
	}
	s = room(c, n);
	if (!s)
		return;
	if (memchr(s, '\0', n)) {
		c->bad = true;
		return;
	}
	memcpy(out, s, n);
	out[n] = '\0';
}

static int enc_end(const struct cur *c)
{
	return c->bad ? -ENOSPC : (int)c->pos;
}

/* Decoders: the whole body and nothing more. */
static int dec_end(const struct cur *c)
{
	return c->bad || c->pos != c->len ? -EPROTO : 0;
}

/* ---- HELLO and AUTH ---- */

int peer_hello_encode(const struct peer_hello *h, unsigned char *buf,
		      size_t cap)
{
	struct cur c = { .w = buf, .len = cap };

	if (strlen(h->id) > PEER_ID_MAX)
		return -EINVAL;
	put32(&c, h->version);
	put_str(&c, h->id);
	put_bytes(&c, h->nonce, PEER_NONCE_BYTES);
	return enc_end(&c);
}

int peer_hello_decode(const unsigned char *body, size_t len,
		      struct peer_hello *h)
{
	struct cur c = { .r = body, .len = len };
	const unsigned char *n;

	h->version = get32(&c);
	get_str(&c, h->id, PEER_ID_MAX);
	n = room(&c, PEER_NONCE_BYTES);
	if (n)
		memcpy(h->nonce, n, PEER_NONCE_BYTES);
	if (dec_end(&c))
		return -EPROTO;
	return h->version == PEER_VERSION ? 0 : -EPROTONOSUPPORT;
}

int peer_auth_mac(const unsigned char *secret, size_t secret_len,
		  enum peer_role role, const struct peer_hello *own,
		  const struct peer_hello *other,
		  unsigned char mac[PEER_MAC_BYTES])
{
	static const char label[] = "fmfs-peer-v1";
	unsigned char msg[sizeof(label) + 1 + 2 * PEER_NONCE_BYTES +
			  2 * (2 + PEER_ID_MAX)];
	unsigned char r = (unsigned char)role;
	struct cur c = { .w = msg, .len = sizeof(msg) };
	unsigned int mac_len = 0;

	if (secret_len < PEER_SECRET_MIN || secret_len > PEER_SECRET_MAX ||
	    strlen(own->id) > PEER_ID_MAX || strlen(other->id) > PEER_ID_MAX)
		return -EINVAL;
	if (role != PEER_ROLE_CLIENT && role != PEER_ROLE_SERVER)
		return -EINVAL;
	put_bytes(&c, label, sizeof(label) - 1);
	put_bytes(&c, &r, 1);
	put_bytes(&c, own->nonce, PEER_NONCE_BYTES);
	put_bytes(&c, other->nonce, PEER_NONCE_BYTES);
	put_str(&c, own->id);
	put_str(&c, other->id);
	util_assert(!c.bad);
	if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, c.pos, mac,
		  &mac_len) || mac_len != PEER_MAC_BYTES)
		return -EIO;
	return 0;
}

int peer_auth_check(const unsigned char *secret, size_t secret_len,
		    enum peer_role role, const struct peer_hello *sender,
		    const struct peer_hello *receiver,
		    const unsigned char mac[PEER_MAC_BYTES])
{
	unsigned char want[PEER_MAC_BYTES];
	int rc = peer_auth_mac(secret, secret_len, role, sender, receiver,
			       want);

	if (rc)
		return rc;
	return CRYPTO_memcmp(want, mac, PEER_MAC_BYTES) ? -EACCES : 0;
}

/* ---- GET ---- */

int peer_get_encode(const struct peer_get *g, unsigned char *buf,
		    size_t cap)
{
	struct cur c = { .w = buf, .len = cap };

	if (strlen(g->key) > PEER_KEY_MAX || strlen(g->etag) > PEER_ETAG_MAX)
		return -EINVAL;
	put64(&c, g->req_id);
	put64(&c, g->size_bytes);
	put64(&c, g->off);
	put32(&c, g->len);
	put_str(&c, g->key);
	put_str(&c, g->etag);
	return enc_end(&c);
}

int peer_get_decode(const unsigned char *body, size_t len,
		    struct peer_get *g)
{
	struct cur c = { .r = body, .len = len };

	g->req_id = get64(&c);
	g->size_bytes = get64(&c);
	g->off = get64(&c);
	g->len = get32(&c);
	get_str(&c, g->key, PEER_KEY_MAX);
	get_str(&c, g->etag, PEER_ETAG_MAX);
	if (dec_end(&c) || !g->key[0])
		return -EPROTO;
	if (!g->len || g->len > PEER_RUN_MAX_BYTES ||
	    g->off > g->size_bytes || g->len > g->size_bytes - g->off)
		return -EPROTO;
	return 0;
}

/* ---- DATA ---- */

size_t peer_data_head_bytes(uint32_t nblocks)
{
	return PEER_DATA_FIXED_BYTES + (size_t)nblocks * 4;
}

int peer_data_head_encode(uint64_t req_id, int32_t status,
			  uint32_t block_bytes, const uint32_t *crcs,
			  uint32_t nblocks, unsigned char *buf, size_t cap)
{
	struct cur c = { .w = buf, .len = cap };

	if (!block_bytes ||
	    (uint64_t)nblocks * block_bytes > PEER_RUN_MAX_BYTES + (uint64_t)block_bytes)
		return -EINVAL;
	put64(&c, req_id);
	put32(&c, (uint32_t)status);
	put32(&c, block_bytes);
	put32(&c, nblocks);
	for (uint32_t i = 0; i < nblocks; i++)
		put32(&c, crcs[i]);
	return enc_end(&c);
}

int peer_data_fixed_decode(const unsigned char *fixed, size_t body_len,
			   struct peer_data *d)
{
	struct cur c = { .r = fixed, .len = PEER_DATA_FIXED_BYTES };
	uint64_t span;
	size_t head;

	d->req_id = get64(&c);
	d->status = (int32_t)get32(&c);
	d->block_bytes = get32(&c);
	d->nblocks = get32(&c);
	d->crcs = d->bytes = NULL;
	if (c.bad || d->nblocks > PEER_BLOCKS_MAX)
		return -EPROTO;
	head = peer_data_head_bytes(d->nblocks);
	if (body_len < head)
		return -EPROTO;
	d->nbytes = (uint32_t)(body_len - head);
	if (d->status > 0)
		return -EPROTO;
	if (d->status < 0)
		return d->nblocks || d->nbytes ? -EPROTO : 0;
	/* The bytes fill every block but the last, which is not empty. */
	if (!d->block_bytes || !d->nblocks || d->nbytes > PEER_RUN_MAX_BYTES)
		return -EPROTO;
	span = (uint64_t)(d->nblocks - 1) * d->block_bytes;
	if (d->nbytes <= span || d->nbytes > span + d->block_bytes)
		return -EPROTO;
	return 0;
}

int peer_data_check(const struct peer_data *d, uint32_t *bad_block)
{
	*bad_block = 0;
	for (uint32_t b = 0; b < d->nblocks; b++) {
		uint64_t off = (uint64_t)b * d->block_bytes;
		uint32_t n = b + 1 < d->nblocks ? d->block_bytes :
			     (uint32_t)(d->nbytes - off);

		if (util_crc32c(0, d->bytes + off, n) !=
		    util_get32le(d->crcs + 4 * (size_t)b)) {
			*bad_block = b;
			return -EBADMSG;
		}
	}
	return 0;
}

int peer_data_decode(const unsigned char *body, size_t len,
		     struct peer_data *d, uint32_t *bad_block)
{
	int rc;

	*bad_block = 0;
	if (len < PEER_DATA_FIXED_BYTES)
		return -EPROTO;
	rc = peer_data_fixed_decode(body, len, d);
	if (rc)
		return rc;
	d->crcs = body + PEER_DATA_FIXED_BYTES;
	d->bytes = body + peer_data_head_bytes(d->nblocks);
	return peer_data_check(d, bad_block);
}

/* ---- the RDMA data plane's frames ---- */

int peer_rma_offer_encode(const struct peer_rma_offer *o, unsigned char *buf,
			  size_t cap)
{
	struct cur c = { .w = buf, .len = cap };
	unsigned char *p;

	if (strlen(o->prov) > PEER_PROV_MAX ||
	    o->addr_len > PEER_FABRIC_ADDR_MAX)
		return -EINVAL;
	put_str(&c, o->prov);
	p = room(&c, 2);
	if (p) {
		p[0] = (unsigned char)o->addr_len;
		p[1] = (unsigned char)(o->addr_len >> 8);
	}
	put_bytes(&c, o->addr, o->addr_len);
	return enc_end(&c);
}

int peer_rma_offer_decode(const unsigned char *body, size_t len,
			  struct peer_rma_offer *o)
{
	struct cur c = { .r = body, .len = len };
	const unsigned char *p, *a;
	size_t n;

	memset(o, 0, sizeof(*o));
	get_str(&c, o->prov, PEER_PROV_MAX);
	p = room(&c, 2);
	if (!p)
		return -EPROTO;
	n = (size_t)p[0] | (size_t)p[1] << 8;
	if (n > PEER_FABRIC_ADDR_MAX)
		return -EPROTO;
	a = room(&c, n);
	if (a && n)
		memcpy(o->addr, a, n);
	o->addr_len = (uint16_t)n;
	return dec_end(&c);
}

#define RMA_TAIL_BYTES 20      /* length u32, address u64, key u64 */

int peer_data_rma_encode(uint64_t req_id, int32_t status,
			 uint32_t block_bytes, const uint32_t *crcs,
			 uint32_t nblocks, uint32_t nbytes, uint64_t raddr,
			 uint64_t key, unsigned char *buf, size_t cap)
{
	struct cur c = { .w = buf, .len = cap };
	int n = peer_data_head_encode(req_id, status, block_bytes, crcs,
				      nblocks, buf, cap);

	if (n < 0)
		return n;
	c.pos = (size_t)n;
	put32(&c, nbytes);
	put64(&c, raddr);
	put64(&c, key);
	return enc_end(&c);
}

int peer_data_rma_decode(const unsigned char *body, size_t len,
			 struct peer_data_rma *d)
{
	struct cur c = { .r = body, .len = len };
	uint32_t nblocks, nbytes;
	size_t head;
	int rc;

	if (len < PEER_DATA_FIXED_BYTES + RMA_TAIL_BYTES)
		return -EPROTO;
	nblocks = util_get32le(body + 16);
	if (nblocks > PEER_BLOCKS_MAX)
		return -EPROTO;
	head = peer_data_head_bytes(nblocks);
	if (len != head + RMA_TAIL_BYTES)
		return -EPROTO;
	nbytes = util_get32le(body + head);
	/* Every rule of an inline DATA of that many bytes. */
	rc = peer_data_fixed_decode(body, head + (size_t)nbytes, &d->d);
	if (rc)
		return rc;
	d->d.crcs = body + PEER_DATA_FIXED_BYTES;
	c.pos = head + 4;
	d->raddr = get64(&c);
	d->key = get64(&c);
	return dec_end(&c);
}
