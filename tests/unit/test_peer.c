/* SPDX-License-Identifier: MIT */
/*
 * test_peer.c - cmocka tests of peer/ (peer/peer.h): the cache group's
 * member list, rendezvous placement and wire format.
 *
 * Placement: the same list gives the same owners whatever its order;
 * 3 members each own about a third of 30,000 runs; removing one moves
 * only its runs, adding a fourth moves about a quarter, and only to the
 * new member.  Lists: separators and comments, IPv6, this member found;
 * bad entries, duplicates, an empty list and a file that is not text
 * refused with a message naming the entry.  Wire: each frame and body
 * round-trips; a header with a flipped bit, a wrong magic or type, and
 * an oversized body are refused; a truncated or over-long body of every
 * kind is -EPROTO; a GET past the object's end or over a run is refused;
 * a DATA block whose bytes do not match its CRC is -EBADMSG naming the
 * block; AUTH passes for the right secret and fails for another secret,
 * another connection's nonce, a reflected MAC and swapped ids.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "peer/peer.h"
#include "tests/unit/helpers.h"
#include "util/util.h"

static const char *ids3 = "10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000";

static void parse_ok(const char *text, const char *self, struct peer_group *g)
{
	char msg[512];

	assert_ok(peer_group_parse(text, self, g, msg, sizeof(msg)), msg);
}

static void test_owner_independent_of_order(void **state)
{
	struct peer_group a, b;

	(void)state;
	parse_ok(ids3, NULL, &a);
	parse_ok("10.0.0.3:7000 10.0.0.1:7000\n10.0.0.2:7000", NULL, &b);
	for (uint64_t u = 0; u < 2000; u++) {
		unsigned oa = peer_owner(&a, "data/shard-0001", "\"e1\"", u);
		unsigned ob = peer_owner(&b, "data/shard-0001", "\"e1\"", u);

		assert_string_equal(a.m[oa].id, b.m[ob].id);
	}
	peer_group_release(&a);
	peer_group_release(&b);
}

/* Owners of runs 0..n of 300 objects' version "v" in g: their ids (in
 * g, valid while it is). */
static const char **owners(const struct peer_group *g, unsigned n)
{
	const char **o = calloc(n, sizeof(*o));
	char key[64];

	assert_non_null(o);
	for (unsigned i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "set/obj-%u", i / 100);
		o[i] = g->m[peer_owner(g, key, "v", i % 100)].id;
	}
	return o;
}

static void test_balance_and_movement(void **state)
{
	const unsigned n = 30000;
	struct peer_group g3, g2, g4;
	const char **o3, **o2, **o4;
	unsigned count[3] = { 0 }, moved_rm = 0, moved_add = 0;

	(void)state;
	parse_ok(ids3, NULL, &g3);
	parse_ok("10.0.0.1:7000,10.0.0.3:7000", NULL, &g2);
	parse_ok("10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000,10.0.0.4:7000",
		 NULL, &g4);
	o3 = owners(&g3, n);
	o2 = owners(&g2, n);
	o4 = owners(&g4, n);
	for (unsigned i = 0; i < n; i++) {
		for (unsigned m = 0; m < 3; m++)
			count[m] += !strcmp(o3[i], g3.m[m].id);
		if (strcmp(o3[i], o2[i])) {
			/* Only runs of the member removed move. */
			assert_string_equal(o3[i], "10.0.0.2:7000");
			moved_rm++;
		} else {
			assert_string_not_equal(o3[i], "10.0.0.2:7000");
		}
		if (strcmp(o3[i], o4[i])) {
			/* Runs move only to the member added. */
			assert_string_equal(o4[i], "10.0.0.4:7000");
			moved_add++;
		}
	}
	for (unsigned m = 0; m < 3; m++) {
		/* A third each, within 5% of n/3 (the spread is ~0.9%). */
		assert_true(count[m] > n / 3 - n / 60);
		assert_true(count[m] < n / 3 + n / 60);
	}
	assert_int_equal(moved_rm, count[1]);
	/* About a quarter of the runs go to the fourth member. */
	assert_true(moved_add > n / 4 - n / 40);
	assert_true(moved_add < n / 4 + n / 40);
	free((void *)o3);
	free((void *)o2);
	free((void *)o4);
	peer_group_release(&g3);
	peer_group_release(&g2);
	peer_group_release(&g4);
}

static void test_owner_depends_on_version_and_key(void **state)
{
	struct peer_group g;
	unsigned diff_etag = 0, diff_split = 0;

	(void)state;
	parse_ok(ids3, NULL, &g);
	for (uint64_t u = 0; u < 3000; u++) {
		diff_etag += peer_owner(&g, "k", "v1", u) !=
			     peer_owner(&g, "k", "v2", u);
		/* ("ab", "c") is not ("a", "bc"). */
		diff_split += peer_owner(&g, "ab", "c", u) !=
			      peer_owner(&g, "a", "bc", u);
	}
	/* Independent placements differ for about 2/3 of the runs. */
	assert_true(diff_etag > 1500 && diff_etag < 2500);
	assert_true(diff_split > 1500 && diff_split < 2500);
	peer_group_release(&g);
}

static void test_list_forms(void **state)
{
	struct peer_group g;

	(void)state;
	parse_ok("# the job's nodes\n  node-a.svc:7000  # first\n"
		 "node_b:7001,[fd00::2]:7002\r\n\n", "node_b:7001", &g);
	assert_int_equal(g.n, 3);
	assert_string_equal(g.m[0].id, "node-a.svc:7000");
	assert_string_equal(g.m[2].id, "[fd00::2]:7002");
	assert_int_equal(g.self, 1);
	peer_group_release(&g);
	parse_ok("127.0.0.1:1", "127.0.0.1:2", &g);
	assert_int_equal(g.self, -1);
	assert_int_equal(g.n, 1);
	assert_int_equal(peer_owner(&g, "k", "e", 7), 0);
	peer_group_release(&g);
}

static void test_list_errors(void **state)
{
	static const struct {
		const char *text, *named;
	} bad[] = {
		{ "a:1,b", "'b'" },
		{ "a:0", "'a:0'" },
		{ "a:65536", "'a:65536'" },
		{ "a:1x", "'a:1x'" },
		{ ":7000", "':7000'" },
		{ "a:", "'a:'" },
		{ "h/st:1", "'h/st:1'" },
		{ "[fd00::1:1", "'[fd00::1:1'" },
		{ "[]:1", "'[]:1'" },
		{ "a:1 b:2 a:1", "listed twice" },
		{ "", "no members" },
		{ "# only a comment\n", "no members" },
	};
	struct peer_group g;
	char msg[512];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(peer_group_parse(bad[i].text, NULL, &g, msg,
						  sizeof(msg)), -EINVAL);
		assert_contains(msg, bad[i].named);
		assert_null(g.m);
	}
}

static void test_list_file(void **state)
{
	struct peer_group g;
	char path[PATH_MAX], msg[512];
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/peers", g_tmp);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x:1\ny:2\n", 8), 8);
	close(fd);
	assert_ok(peer_group_load(path, "y:2", &g, msg, sizeof(msg)), msg);
	assert_int_equal(g.n, 2);
	assert_int_equal(g.self, 1);
	peer_group_release(&g);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "x:1\0y:2\n", 8), 8);
	close(fd);
	assert_int_equal(peer_group_load(path, NULL, &g, msg, sizeof(msg)),
			 -EINVAL);
	assert_contains(msg, "not a text file");
	snprintf(path, sizeof(path), "%s/none", g_tmp);
	assert_int_equal(peer_group_load(path, NULL, &g, msg, sizeof(msg)),
			 -ENOENT);
	assert_contains(msg, path);
}

static void test_header(void **state)
{
	unsigned char h[PEER_HDR_BYTES], x[PEER_HDR_BYTES];
	enum peer_type t;
	uint32_t len;

	(void)state;
	peer_hdr_encode(h, PEER_GET, 1234);
	assert_ok(peer_hdr_decode(h, &t, &len), "header");
	assert_int_equal(t, PEER_GET);
	assert_int_equal(len, 1234);
	for (unsigned bit = 0; bit < 8 * PEER_HDR_BYTES; bit++) {
		memcpy(x, h, sizeof(h));
		x[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		assert_int_equal(peer_hdr_decode(x, &t, &len), -EPROTO);
	}
	peer_hdr_encode(h, (enum peer_type)9, 0);
	assert_int_equal(peer_hdr_decode(h, &t, &len), -EPROTO);
	peer_hdr_encode(h, PEER_DATA, PEER_BODY_MAX + 1);
	assert_int_equal(peer_hdr_decode(h, &t, &len), -EMSGSIZE);
}

static void hello(struct peer_hello *h, const char *id, unsigned char seed)
{
	memset(h, 0, sizeof(*h));
	h->version = PEER_VERSION;
	snprintf(h->id, sizeof(h->id), "%s", id);
	for (unsigned i = 0; i < PEER_NONCE_BYTES; i++)
		h->nonce[i] = (unsigned char)(seed * 31 + i);
}

static void test_hello(void **state)
{
	struct peer_hello a, b;
	unsigned char buf[512];
	int n;

	(void)state;
	hello(&a, "node-a:7000", 1);
	n = peer_hello_encode(&a, buf, sizeof(buf));
	assert_true(n > 0);
	assert_ok(peer_hello_decode(buf, (size_t)n, &b), "hello");
	assert_string_equal(b.id, a.id);
	assert_memory_equal(b.nonce, a.nonce, PEER_NONCE_BYTES);
	for (int cut = 0; cut < n; cut++)
		assert_int_equal(peer_hello_decode(buf, (size_t)cut, &b),
				 -EPROTO);
	assert_int_equal(peer_hello_decode(buf, (size_t)n + 1, &b), -EPROTO);
	a.version = 2;
	n = peer_hello_encode(&a, buf, sizeof(buf));
	assert_int_equal(peer_hello_decode(buf, (size_t)n, &b),
			 -EPROTONOSUPPORT);
	assert_int_equal(peer_hello_encode(&a, buf, 10), -ENOSPC);
}

static void test_auth(void **state)
{
	const unsigned char secret[] = "a shared secret of the group";
	const unsigned char other[] = "a different secret, same length";
	struct peer_hello a, b, b2;
	unsigned char mac_a[PEER_MAC_BYTES], mac_b[PEER_MAC_BYTES];

	(void)state;
	hello(&a, "node-a:7000", 1);
	hello(&b, "node-b:7000", 2);
	hello(&b2, "node-b:7000", 3);   /* b on another connection */
	assert_ok(peer_auth_mac(secret, sizeof(secret), &a, &b, mac_a), "a");
	assert_ok(peer_auth_mac(secret, sizeof(secret), &b, &a, mac_b), "b");
	/* Each side checks the other's. */
	assert_ok(peer_auth_check(secret, sizeof(secret), &a, &b, mac_a),
		  "b checks a");
	assert_ok(peer_auth_check(secret, sizeof(secret), &b, &a, mac_b),
		  "a checks b");
	/* Another secret; a reflected MAC; a replay on another connection;
	 * the ids swapped. */
	assert_int_equal(peer_auth_check(other, sizeof(other), &a, &b, mac_a),
			 -EACCES);
	assert_int_equal(peer_auth_check(secret, sizeof(secret), &b, &a,
					 mac_a), -EACCES);
	assert_int_equal(peer_auth_check(secret, sizeof(secret), &a, &b2,
					 mac_a), -EACCES);
	snprintf(a.id, sizeof(a.id), "node-b:7000");
	snprintf(b.id, sizeof(b.id), "node-a:7000");
	assert_int_equal(peer_auth_check(secret, sizeof(secret), &a, &b,
					 mac_a), -EACCES);
	/* A secret too short to be one. */
	assert_int_equal(peer_auth_mac(secret, 8, &a, &b, mac_a), -EINVAL);
}

static void test_get(void **state)
{
	struct peer_get g = {
		.req_id = 77, .size_bytes = 20 * MIB, .off = 16 * MIB,
		.len = 4 * MIB, .key = "data/shard 1", .etag = "\"abc\"",
	}, d;
	unsigned char buf[2200];
	int n;

	(void)state;
	n = peer_get_encode(&g, buf, sizeof(buf));
	assert_true(n > 0);
	assert_ok(peer_get_decode(buf, (size_t)n, &d), "get");
	assert_int_equal(d.req_id, 77);
	assert_int_equal(d.size_bytes, 20 * MIB);
	assert_int_equal(d.off, 16 * MIB);
	assert_int_equal(d.len, 4 * MIB);
	assert_string_equal(d.key, g.key);
	assert_string_equal(d.etag, g.etag);
	for (int cut = 0; cut < n; cut++)
		assert_int_equal(peer_get_decode(buf, (size_t)cut, &d),
				 -EPROTO);
	/* Past the end; over a run; empty; no key. */
	g.len = 4 * MIB + 1;
	n = peer_get_encode(&g, buf, sizeof(buf));
	assert_int_equal(peer_get_decode(buf, (size_t)n, &d), -EPROTO);
	g.off = 0;
	g.len = PEER_RUN_MAX_BYTES + 1;
	n = peer_get_encode(&g, buf, sizeof(buf));
	assert_int_equal(peer_get_decode(buf, (size_t)n, &d), -EPROTO);
	g.len = 0;
	n = peer_get_encode(&g, buf, sizeof(buf));
	assert_int_equal(peer_get_decode(buf, (size_t)n, &d), -EPROTO);
	g.len = 1;
	g.key[0] = '\0';
	n = peer_get_encode(&g, buf, sizeof(buf));
	assert_int_equal(peer_get_decode(buf, (size_t)n, &d), -EPROTO);
	/* A key over the limit is not encoded. */
	memset(g.key, 'k', PEER_KEY_MAX + 1);
	g.key[PEER_KEY_MAX] = 'k';
	assert_int_equal(peer_get_encode(&g, buf, sizeof(buf)), -EINVAL);
}

static void test_data(void **state)
{
	const uint32_t bb = 4096, nbytes = 3 * 4096 + 100, nb = 4;
	uint32_t crcs[4], bad = 99;
	unsigned char *body = malloc(64 + 16 + nbytes);
	struct peer_data d;
	size_t head;
	int n;

	(void)state;
	assert_non_null(body);
	head = peer_data_head_bytes(nb);
	for (uint32_t i = 0; i < nbytes; i++)
		body[head + i] = (unsigned char)(i * 7 + 3);
	for (uint32_t b = 0; b < nb; b++)
		crcs[b] = util_crc32c(0, body + head + b * bb,
				      b + 1 < nb ? bb : nbytes - b * bb);
	n = peer_data_head_encode(5, 0, bb, crcs, nb, body, head);
	assert_int_equal(n, (int)head);
	assert_ok(peer_data_decode(body, head + nbytes, &d, &bad), "data");
	assert_int_equal(d.req_id, 5);
	assert_int_equal(d.nblocks, nb);
	assert_int_equal(d.nbytes, nbytes);
	assert_ptr_equal(d.bytes, body + head);
	/* A flipped byte in block 2: named. */
	body[head + 2 * bb + 17] ^= 0x40;
	assert_int_equal(peer_data_decode(body, head + nbytes, &d, &bad),
			 -EBADMSG);
	assert_int_equal(bad, 2);
	body[head + 2 * bb + 17] ^= 0x40;
	/* Bytes that do not fill the blocks the table names. */
	assert_int_equal(peer_data_decode(body, head + 3 * bb, &d, &bad),
			 -EPROTO);
	assert_int_equal(peer_data_decode(body, head + 2, &d, &bad), -EPROTO);
	for (size_t cut = 0; cut < head; cut++)
		assert_int_equal(peer_data_decode(body, cut, &d, &bad),
				 -EPROTO);
	/* An error answer: no blocks, no bytes. */
	n = peer_data_head_encode(6, -ENOENT, bb, NULL, 0, body, 64);
	assert_int_equal(n, (int)peer_data_head_bytes(0));
	assert_ok(peer_data_decode(body, (size_t)n, &d, &bad), "error");
	assert_int_equal(d.status, -ENOENT);
	assert_int_equal(peer_data_decode(body, (size_t)n + 1, &d, &bad),
			 -EPROTO);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owner_independent_of_order),
		cmocka_unit_test(test_balance_and_movement),
		cmocka_unit_test(test_owner_depends_on_version_and_key),
		cmocka_unit_test(test_list_forms),
		cmocka_unit_test(test_list_errors),
		cmocka_unit_test(test_list_file),
		cmocka_unit_test(test_header),
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_get),
		cmocka_unit_test(test_data),
	};

	return run_tests_in_tmp_dir("test_peer", tests);
}
