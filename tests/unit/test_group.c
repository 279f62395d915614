/* SPDX-License-Identifier: MIT */
/*
 * test_group.c - cmocka tests of the cache as a member of a cache group
 * (cache/group.c, docs/cluster-cache.md): real caches over one file://
 * store, each with its peer server and client on loopback, in one
 * process.
 *
 *   - Two members that agree: a read on one gets the other's units from
 *     it (the placement's bytes exactly), the store serves the object
 *     once, the guard sends nothing to the store.
 *   - The loop guard is per request: while a member serves a peer one
 *     unit of an object, its own reads of the object's other units
 *     still go to their owners.
 *   - No cycles: two members whose lists disagree so that each thinks
 *     the other owns a unit, both reading it at once, with owners that
 *     say WORKING and a longest wait of 30 s: both finish at once (a
 *     request that would wait for a member's fetch answers "busy"), the
 *     bytes exact; what a member fetched for the other though a third
 *     owns it is counted as the guard's.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "helpers.h"
#include "cache/cache.h"
#include "peer/peer.h"
#include "objstore/objstore.h"
#include "util/util.h"

static const unsigned char g_secret[] = "the group's secret, 32 bytes!!!";

struct member {
	char id[64];
	char dir[PATH_MAX];
	struct cache *c;
	struct peer_server *srv;
	struct peer_client *pc;
	struct peer_group g;
};

static struct obj_store *g_st;
static char g_url[PATH_MAX + 16];

static unsigned char byte_of(const char *key, uint64_t i)
{
	return (unsigned char)(key[4] * 31 + i * 7 + (i >> 13));
}

static void put(const char *key, uint64_t size, char etag[80])
{
	unsigned char *b = malloc(size);
	struct obj_error err;

	assert_non_null(b);
	for (uint64_t i = 0; i < size; i++)
		b[i] = byte_of(key, i);
	if (obj_put(g_st, key, b, size, NULL, 0, etag, &err) != OBJ_OK)
		fail_msg("obj_put %s: %s", key, err.message);
	free(b);
}

static uint64_t store_bytes(void)
{
	struct obj_stats s;

	obj_get_stats(g_st, &s);
	return s.bytes_in;
}

/* Starts member m's cache and server (its id: the port it got). */
static void member_start(struct member *m, const char *name)
{
	struct cache_config cfg;
	struct peer_server_config sc = {
		.listen = "127.0.0.1:0", .secret = g_secret,
		.secret_len = sizeof(g_secret) - 1, .timeout_ms = 1000,
		.serve = cache_peer_serve,
	};
	char msg[512];

	snprintf(m->dir, sizeof(m->dir), "%s/%s", g_tmp, name);
	cache_config_init(&cfg);
	cfg.dir = m->dir;
	cfg.store_id = g_url;
	cfg.size_bytes = 256 * MIB;
	cfg.block_bytes = 64 * KIB;
	cfg.fetch_timeout_ms = 60000;
	assert_ok(cache_open(&cfg, g_st, &m->c, msg, sizeof(msg)), msg);
	sc.arg = m->c;
	assert_ok(peer_server_start(&sc, &m->srv, msg, sizeof(msg)), msg);
	snprintf(m->id, sizeof(m->id), "127.0.0.1:%u",
		 peer_server_port(m->srv));
	peer_server_stop(m->srv);
	sc.listen = m->id;
	sc.self_id = m->id;
	assert_ok(peer_server_start(&sc, &m->srv, msg, sizeof(msg)), msg);
}

/* Gives m the list (its client: WORKING asked for, a silence of 1 s,
 * 30 s in all). */
static void member_join(struct member *m, const char *list)
{
	struct peer_client_config cc = {
		.self_id = m->id, .secret = g_secret,
		.secret_len = sizeof(g_secret) - 1, .timeout_ms = 1000,
		.total_ms = 30000,
	};
	char msg[512];

	assert_ok(peer_group_parse(list, m->id, &m->g, msg, sizeof(msg)), msg);
	assert_true(m->g.self >= 0);
	assert_int_equal(peer_client_new(&cc, &m->pc), 0);
	cache_set_group(m->c, &m->g, m->pc);
}

static void member_stop(struct member *m)
{
	peer_server_stop(m->srv);
	cache_close(m->c);
	peer_client_free(m->pc);
	peer_group_release(&m->g);
	rm_rf(m->dir);
}

static struct cache_stats stats_of(const struct member *m)
{
	struct cache_stats s;

	cache_get_stats(m->c, &s);
	return s;
}

/* Reads [off, off + len) of key through m's cache and checks it. */
static void read_check(struct member *m, const char *key, uint64_t size,
		       const char *etag, uint64_t off, uint64_t len)
{
	struct cache_file *f;
	unsigned char *b = malloc(len);
	ssize_t n;

	assert_non_null(b);
	assert_int_equal(cache_file_open(m->c, key, size, etag, &f), 0);
	n = cache_file_read(f, b, len, off);
	cache_file_close(f);
	assert_int_equal(n, (ssize_t)len);
	for (uint64_t i = 0; i < len; i++)
		if (b[i] != byte_of(key, off + i))
			fail_msg("%s byte %llu differs", key,
				 (unsigned long long)(off + i));
	free(b);
}

/* The bytes of (key, size) that member `who` of g owns. */
static uint64_t owned(const struct peer_group *g, unsigned who,
		      const char *key, const char *etag, uint64_t size)
{
	uint64_t off = 0, n = 0;

	while (off < size) {
		uint64_t end = 0;

		if (peer_place(g, key, etag, size, off, &end) == who)
			n += end - off;
		off = end;
	}
	return n;
}

static void test_agreeing_members(void **state)
{
	struct member a = { 0 }, b = { 0 };
	char list[160], etag[80];
	uint64_t size = 24 * MIB, s0, from_b;
	struct cache_stats sa, sb;

	(void)state;
	put("set/agree", size, etag);
	member_start(&a, "a");
	member_start(&b, "b");
	snprintf(list, sizeof(list), "%s,%s", a.id, b.id);
	member_join(&a, list);
	member_join(&b, list);
	from_b = owned(&a.g, 1, "set/agree", etag, size);
	assert_true(from_b > 0 && from_b < size);
	s0 = store_bytes();
	read_check(&a, "set/agree", size, etag, 0, size);
	sa = stats_of(&a);
	sb = stats_of(&b);
	assert_int_equal(sa.peer_bytes_in, from_b);
	assert_int_equal(sb.peer_bytes_out, from_b);
	assert_int_equal(store_bytes() - s0, size);
	assert_int_equal(sa.peer_fallbacks, 0);
	assert_int_equal(sa.peer_guard_bytes + sb.peer_guard_bytes, 0);
	/* b reads it now: all of a's units from a (kept there), b's own
	 * from its cache; the store is not asked again. */
	read_check(&b, "set/agree", size, etag, 0, size);
	assert_int_equal(store_bytes() - s0, size);
	member_stop(&a);
	member_stop(&b);
}

struct reader {
	struct member *m;
	const char *key, *etag;
	uint64_t size, off, len;
	pthread_barrier_t *go;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	pthread_barrier_wait(r->go);
	read_check(r->m, r->key, r->size, r->etag, r->off, r->len);
	return NULL;
}

/* Both read at once: returns the milliseconds until both finished. */
static uint64_t read_both(struct reader *ra, struct reader *rb)
{
	pthread_barrier_t go;
	pthread_t ta, tb;
	uint64_t t0;

	pthread_barrier_init(&go, NULL, 3);
	ra->go = rb->go = &go;
	assert_int_equal(pthread_create(&ta, NULL, reader_main, ra), 0);
	assert_int_equal(pthread_create(&tb, NULL, reader_main, rb), 0);
	t0 = util_now_ms();
	pthread_barrier_wait(&go);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	pthread_barrier_destroy(&go);
	return util_now_ms() - t0;
}

/* a and b agree on [a, b]; objects of 8 MiB (1 MiB units).  While b
 * serves a's requests for b's units of an object, b's own read of the
 * object's units that a owns goes to a: nothing from the store twice. */
static void test_guard_per_request(void **state)
{
	struct member a = { 0 }, b = { 0 };
	char list[160], etag[80];
	uint64_t size = 8 * MIB, s0;
	struct reader ra, rb;

	(void)state;
	put("set/both", size, etag);
	member_start(&a, "a");
	member_start(&b, "b");
	snprintf(list, sizeof(list), "%s,%s", a.id, b.id);
	member_join(&a, list);
	member_join(&b, list);
	s0 = store_bytes();
	ra = (struct reader){ &a, "set/both", etag, size, 0, size, NULL };
	rb = (struct reader){ &b, "set/both", etag, size, 0, size, NULL };
	read_both(&ra, &rb);
	/* Each unit from the store once (by its owner), whoever asked
	 * first; the guard per file sent b's readers to the store here. */
	assert_int_equal(store_bytes() - s0, size);
	assert_int_equal(stats_of(&a).peer_guard_bytes, 0);
	assert_int_equal(stats_of(&b).peer_guard_bytes, 0);
	assert_int_equal(stats_of(&a).peer_fallbacks +
			 stats_of(&b).peer_fallbacks, 0);
	member_stop(&a);
	member_stop(&b);
}

/* Objects of two 1 MiB units whose second unit a's list gives to b and
 * b's list gives to a: b's list of three has room for one unit of the
 * two per member, so where b's list gives the first unit to b, the
 * second goes to the next heaviest (about 1 object in 18).  Their keys
 * and ETags into keys[] and etags[], max of them. */
static unsigned crossed(const struct member *a, const struct member *b,
			char keys[][64], char etags[][80], unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < 2000 && n < max; i++) {
		snprintf(keys[n], 64, "set/cross-%u", i);
		put(keys[n], 2 * MIB, etags[n]);
		if (peer_owner(&a->g, keys[n], etags[n], 2 * MIB, MIB) == 1 &&
		    peer_owner(&b->g, keys[n], etags[n], 2 * MIB, MIB) == 0)
			n++;
	}
	return n;
}

static void test_no_cycle(void **state)
{
	struct member a = { 0 }, b = { 0 };
	char la[160], lb[200], keys[5][64], etags[5][80];
	struct cache_stats sa, sb;
	uint64_t ms;
	unsigned n;

	(void)state;
	member_start(&a, "a");
	member_start(&b, "b");
	/* b also lists a third member that a does not know (and that is
	 * never asked here): the two lists place units differently. */
	snprintf(la, sizeof(la), "%s,%s", a.id, b.id);
	snprintf(lb, sizeof(lb), "%s,%s,127.0.0.1:9", a.id, b.id);
	member_join(&a, la);
	member_join(&b, lb);
	n = crossed(&a, &b, keys, etags, 5);
	assert_int_equal(n, 5);
	for (unsigned i = 0; i < n; i++) {
		struct reader ra = { &a, keys[i], etags[i], 2 * MIB, MIB, MIB,
				     NULL };
		struct reader rb = { &b, keys[i], etags[i], 2 * MIB, MIB, MIB,
				     NULL };

		ms = read_both(&ra, &rb);
		/* Each may wait for the other's fetch through WORKING
		 * frames, for 30 s; "busy" ends it at once. */
		if (ms > 5000)
			fail_msg("%s: the crossed reads took %llu ms", keys[i],
				 (unsigned long long)ms);
	}
	sa = stats_of(&a);
	sb = stats_of(&b);
	print_message("%u crossed units: busy answers %llu, guard bytes "
		      "%llu\n", n,
		      (unsigned long long)(sa.peer_busy + sb.peer_busy),
		      (unsigned long long)(sa.peer_guard_bytes +
					   sb.peer_guard_bytes));
	assert_int_equal(sa.peer_timeouts + sb.peer_timeouts, 0);
	/* Whichever came first, a member that served the other fetched a
	 * unit its own list gives to the other (the guard's), or answered
	 * busy: every crossed unit shows in one or the other. */
	assert_true(sa.peer_busy + sb.peer_busy +
		    (sa.peer_guard_bytes + sb.peer_guard_bytes) / MIB >= n);
	member_stop(&a);
	member_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agreeing_members),
		cmocka_unit_test(test_guard_per_request),
		cmocka_unit_test(test_no_cycle),
	};
	struct obj_config oc;
	struct obj_error err;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	if (tmp_dir_create("fmfs-test-group"))
		return 1;
	snprintf(g_url, sizeof(g_url), "file://%s/store", g_tmp);
	mkdir(g_url + 7, 0755);
	obj_config_init(&oc);
	oc.url = g_url;
	if (obj_open(&oc, &g_st, &err) != OBJ_OK) {
		fprintf(stderr, "obj_open %s: %s\n", g_url, err.message);
		tmp_dir_remove();
		return 1;
	}
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	obj_close(g_st);
	return tmp_dir_remove_then(rc);
}
