/* SPDX-License-Identifier: MIT */
/*
 * member.c - the cache group's member list and placement.
 *
 * The list comes from the --peers option or a file (re-read while
 * mounted), "host:port" entries, no consensus service.  Every member
 * computes the owner of a byte of an object version from the same list
 * (docs/cluster-cache.md, "Placement"): rendezvous (highest random
 * weight) hashing of (key, etag, unit) with bounded loads.  The object
 * is cut into units (1 MiB, larger for large objects, so that a window
 * of 64 units spans at least 1/64 of it), the units into windows of 64;
 * each unit goes to its heaviest member that still has room, at most
 * ceil(1.25 x the window's units / N) units of the window.  So no member
 * owns over 1.25 x its share of a window (plus one unit), and a member
 * that joins or leaves moves about its own share and a little more (the
 * units that found room elsewhere).  Adjacent units with one owner make
 * one run.  Members that briefly disagree on the list cost extra bucket
 * GETs, never wrong bytes (the owner a reader picks fetches what it
 * lacks).
 *
 * The hashes: 64-bit FNV-1a over the bytes, finished with splitmix64's
 * mixer, which spreads FNV's weak low bits over the whole word.  Not
 * cryptographic: placement needs balance, not secrecy (a member that
 * lies about its bytes is caught by the CRCs and the version checks, not
 * by placement).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer/peer.h"
#include "util/util.h"

/* One splitmix64 step: the golden-ratio increment, then the mixer. */
static uint64_t mix64(uint64_t x)
{
	return util_mix64(x + 0x9e3779b97f4a7c15ULL);
}

static uint64_t id_hash(const char *id)
{
	return mix64(util_fnv1a64(UTIL_FNV64_BASIS, id, strlen(id)));
}

uint64_t peer_unit_bytes(uint64_t size)
{
	uint64_t u = PEER_PLACE_UNIT_MIN;

	while (size / PEER_PLACE_WINDOW > u && u < PEER_PLACE_UNIT_MAX)
		u *= 2;
	return u;
}

/* Unit u's weight at member m: the hash of (key, etag) h, mixed with
 * the unit's index, then with the member's id hash. */
static uint64_t weight(const struct peer_group *g, unsigned m, uint64_t h,
		       uint64_t u)
{
	return mix64(g->m[m].id_hash ^ mix64(h ^ mix64(u)));
}

/* The owner of unit u, given the loads of the units before it in its
 * window: the heaviest member with room (fewer than cap units of the
 * window), ties to the lower index. */
static unsigned pick(const struct peer_group *g, uint64_t h, uint64_t u,
		     const uint32_t *load, uint32_t cap)
{
	uint64_t best_w = 0;
	unsigned best = UINT32_MAX;

	for (unsigned i = 0; i < g->n; i++) {
		uint64_t w;

		if (load[i] >= cap)
			continue;
		w = weight(g, i, h, u);
		if (best == UINT32_MAX || w > best_w) {
			best_w = w;
			best = i;
		}
	}
	util_assert(best != UINT32_MAX); /* cap * n covers the window */
	return best;
}

unsigned peer_place(const struct peer_group *g, const char *key,
		    const char *etag, uint64_t size, uint64_t off,
		    uint64_t *end)
{
	/* The terminating NULs keep ("ab", "c") apart from ("a", "bc"). */
	uint64_t h = util_fnv1a64(UTIL_FNV64_BASIS, key, strlen(key) + 1);
	uint64_t ub = peer_unit_bytes(size);
	uint64_t units = size ? (size + ub - 1) / ub : 1;
	uint64_t u = off / ub, w0, w1;
	uint32_t small[256], *load = small, cap;
	unsigned owner = 0;

	util_assert(g->n > 0);
	h = util_fnv1a64(h, etag, strlen(etag) + 1);
	if (u >= units)
		u = units - 1;
	w0 = u / PEER_PLACE_WINDOW * PEER_PLACE_WINDOW;
	w1 = w0 + PEER_PLACE_WINDOW < units ? w0 + PEER_PLACE_WINDOW : units;
	/* Bounded loads: at most ceil(1.25 x the fair share) of the
	 * window's units per member. */
	cap = (uint32_t)((5 * (w1 - w0) + 4 * (uint64_t)g->n - 1) /
			 (4 * (uint64_t)g->n));
	if (g->n > 256 && !(load = calloc(g->n, sizeof(*load)))) {
		/* Every member computes the same: no shortcut that could
		 * answer otherwise.  Without memory, no owner. */
		if (end)
			*end = off + 1;
		return UINT32_MAX;
	}
	if (load == small)
		memset(small, 0, sizeof(small));
	for (uint64_t v = w0; v < w1; v++) {
		unsigned o = pick(g, h, v, load, cap);

		load[o]++;
		if (v == u)
			owner = o;
		else if (v > u && o != owner)
			break;
		if (end)
			*end = (v + 1) * ub < size ? (v + 1) * ub : size;
		if (v >= u && !end)
			break;
	}
	if (load != small)
		free(load);
	return owner;
}

unsigned peer_owner(const struct peer_group *g, const char *key,
		    const char *etag, uint64_t size, uint64_t off)
{
	return peer_place(g, key, etag, size, off, NULL);
}

/* host:port, [v6]:port; host of letters, digits, '-', '.' and '_'. */
static bool entry_ok(const char *e, size_t n)
{
	const char *colon;
	size_t hl, i;
	long port = 0;

	if (n == 0 || n > PEER_ID_MAX)
		return false;
	if (e[0] == '[') {
		const char *rb = memchr(e, ']', n);

		if (!rb || rb == e + 1 || rb + 1 >= e + n || rb[1] != ':')
			return false;
		for (const char *p = e + 1; p < rb; p++)
			if (!strchr("0123456789abcdefABCDEF:.", *p))
				return false;
		colon = rb + 1;
	} else {
		colon = memrchr(e, ':', n);
		if (!colon || colon == e)
			return false;
		hl = (size_t)(colon - e);
		for (i = 0; i < hl; i++)
			if (!strchr("abcdefghijklmnopqrstuvwxyz"
				    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._",
				    e[i]))
				return false;
	}
	if (colon + 1 == e + n)
		return false;
	for (const char *p = colon + 1; p < e + n; p++) {
		if (*p < '0' || *p > '9')
			return false;
		port = port * 10 + (*p - '0');
		if (port > 65535)
			return false;
	}
	return port >= 1;
}

void peer_group_release(struct peer_group *g)
{
	free(g->m);
	g->m = NULL;
	g->n = 0;
	g->self = -1;
}

static int add_entry(struct peer_group *g, unsigned *cap, const char *e,
		     size_t n, char *msg, size_t msg_len)
{
	struct peer_member *m;

	if (!entry_ok(e, n)) {
		util_msg(msg, msg_len, "peer list: '%.*s' is not host:port "
			 "(a name or address, then a port 1-65535; IPv6 as "
			 "[addr]:port)", (int)(n > 300 ? 300 : n), e);
		return -EINVAL;
	}
	for (unsigned i = 0; i < g->n; i++)
		if (strlen(g->m[i].id) == n && !memcmp(g->m[i].id, e, n)) {
			util_msg(msg, msg_len, "peer list: '%.*s' is listed "
				 "twice", (int)n, e);
			return -EINVAL;
		}
	if (g->n == PEER_MEMBERS_MAX) {
		util_msg(msg, msg_len, "peer list: more than %d members",
			 PEER_MEMBERS_MAX);
		return -EINVAL;
	}
	if (g->n == *cap) {
		unsigned nc = *cap ? *cap * 2 : 8;

		m = realloc(g->m, nc * sizeof(*m));
		if (!m)
			return -ENOMEM;
		g->m = m;
		*cap = nc;
	}
	m = &g->m[g->n++];
	memcpy(m->id, e, n);
	m->id[n] = '\0';
	m->id_hash = id_hash(m->id);
	return 0;
}

int peer_group_parse(const char *text, const char *self_id,
		     struct peer_group *g, char *msg, size_t msg_len)
{
	const char *p = text;
	unsigned cap = 0;
	int rc;

	util_msg(msg, msg_len, "%s", "");
	g->m = NULL;
	g->n = 0;
	g->self = -1;
	while (*p) {
		size_t n;

		if (*p == '#') {
			p += strcspn(p, "\n");
			continue;
		}
		if (strchr(", \t\r\n", *p)) {
			p++;
			continue;
		}
		n = strcspn(p, ", \t\r\n#");
		rc = add_entry(g, &cap, p, n, msg, msg_len);
		if (rc) {
			peer_group_release(g);
			return rc;
		}
		p += n;
	}
	if (!g->n) {
		util_msg(msg, msg_len, "peer list: no members (give "
			 "host:port entries, this mount's own included)");
		return -EINVAL;
	}
	if (self_id)
		for (unsigned i = 0; i < g->n; i++)
			if (!strcmp(g->m[i].id, self_id))
				g->self = (int)i;
	return 0;
}

int peer_group_load(const char *path, const char *self_id,
		    struct peer_group *g, char *msg, size_t msg_len)
{
	const size_t max = 1u << 20;
	char *text = malloc(max + 1);
	ssize_t n;
	int fd, rc;

	if (!text)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		util_msg(msg, msg_len, "peer list %s: %s", path,
			 strerror(errno));
		free(text);
		return rc;
	}
	n = util_read_all(fd, text, max + 1);
	close(fd);
	if (n < 0 || (size_t)n > max) {
		util_msg(msg, msg_len, "peer list %s: %s", path,
			 n < 0 ? strerror((int)-n) : "over 1 MiB");
		free(text);
		return n < 0 ? (int)n : -EFBIG;
	}
	text[n] = '\0';
	if (memchr(text, '\0', (size_t)n)) {
		util_msg(msg, msg_len, "peer list %s: not a text file", path);
		free(text);
		return -EINVAL;
	}
	rc = peer_group_parse(text, self_id, g, msg, msg_len);
	free(text);
	return rc;
}
