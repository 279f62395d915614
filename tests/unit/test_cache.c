/* SPDX-License-Identifier: MIT */
/*
 * test_cache.c - cmocka tests of the cache module against the file://
 * object store (and, for an unreachable store, an s3:// store pointed at
 * a socket that never answers), so no server is needed.
 *
 * The file:// backend does not count requests in obj_get_stats, but it
 * counts bytes_in exactly, so "no GET" is checked as "no byte came from
 * the store" and "no duplicate GET" as "each byte came once".  Object
 * contents are a function of (seed, offset), so any read can be checked
 * byte for byte.  Crashes are simulated by forking a child that uses the
 * cache and leaves with _exit() (or SIGKILL) without cache_close.
 *
 * Everything runs in a private temporary directory removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "cache/cache.h"
#include "cache/cache_int.h"
#include "cache/wb.h"

#define B64K (64 * KIB)

struct env {
	char store_dir[PATH_MAX];
	char cache_dir[PATH_MAX];
	char url[PATH_MAX + 16];
	struct obj_store *st;
	struct cache *c;
	struct cache_config cfg;
};

/* ---- data ---- */

static unsigned char pattern_byte(uint32_t seed, uint64_t i)
{
	uint32_t v = (uint32_t)(i >> 2) * 2654435761u ^ seed * 0x9E3779B9u;

	v ^= v >> 15;
	v *= 0x2c1b3c6du;
	v ^= v >> 12;
	v ^= (uint32_t)(i >> 34);
	return (unsigned char)(v >> ((i & 3) * 8));
}

static void pattern_fill(uint32_t seed, uint64_t off, void *buf, size_t len)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, off + i);
}

static void check_bytes(uint32_t seed, uint64_t off, const void *buf,
			size_t len)
{
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, off + i))
			fail_msg("byte %llu: got %02x, want %02x",
				 (unsigned long long)(off + i), p[i],
				 pattern_byte(seed, off + i));
}

/* ---- environment ---- */

static int env_setup(void **state)
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
	cache_config_init(&e->cfg);
	e->cfg.dir = e->cache_dir;
	e->cfg.store_id = e->url;
	e->cfg.size_bytes = 64 * MIB;
	e->cfg.block_bytes = B64K;
	e->cfg.fetch_timeout_ms = 5000;
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	cache_close(e->c);
	if (e->st)
		obj_close(e->st);
	rm_rf(e->store_dir);
	rm_rf(e->cache_dir);
	free(e);
	return 0;
}

static void env_open(struct env *e)
{
	char msg[512];
	int rc = cache_open(&e->cfg, e->st, &e->c, msg, sizeof(msg));

	if (rc)
		fail_msg("cache_open: %d %s", rc, msg);
}

static void env_close(struct env *e)
{
	cache_close(e->c);
	e->c = NULL;
}

static uint64_t bytes_in(struct env *e)
{
	struct obj_stats s;

	obj_get_stats(e->st, &s);
	return s.bytes_in;
}

static struct cache_stats stats(struct env *e)
{
	struct cache_stats s;

	cache_get_stats(e->c, &s);
	return s;
}

struct obj {
	char key[64];
	uint64_t size;
	uint32_t seed;
	char etag[80];
};

static void put_obj(struct env *e, struct obj *o, const char *key,
		    uint64_t size, uint32_t seed)
{
	struct obj_error err;
	void *buf = malloc(size ? size : 1);

	assert_non_null(buf);
	snprintf(o->key, sizeof(o->key), "%s", key);
	o->size = size;
	o->seed = seed;
	pattern_fill(seed, 0, buf, size);
	if (obj_put(e->st, key, buf, size, NULL, 0, o->etag, &err) != OBJ_OK)
		fail_msg("obj_put %s: %s", key, err.message);
	free(buf);
}

/* Reads [off, off+len) of o through a fresh handle and checks it. */
static void read_check(struct env *e, const struct obj *o, uint64_t off,
		       size_t len)
{
	struct cache_file *f;
	size_t want = off >= o->size ? 0 :
		      (len < o->size - off ? len : (size_t)(o->size - off));
	char *buf = malloc(len + 1);
	ssize_t n;

	assert_non_null(buf);
	assert_int_equal(cache_file_open(e->c, o->key, o->size, o->etag, &f),
			 0);
	n = cache_file_read(f, buf, len, off);
	cache_file_close(f);
	if (n != (ssize_t)want)
		fail_msg("read %s [%llu, +%zu): %zd, want %zu", o->key,
			 (unsigned long long)off, len, n, want);
	check_bytes(o->seed, off, buf, want);
	free(buf);
}

static void read_all(struct env *e, const struct obj *o)
{
	read_check(e, o, 0, (size_t)o->size + 1);
}

static int64_t ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 +
	       (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void wait_idle(struct env *e)
{
	for (int i = 0; i < 2000 && stats(e).inflight_bytes; i++)
		usleep(1000);
	assert_int_equal(stats(e).inflight_bytes, 0);
}

/* The only cache file under DIR/objects (fails if not exactly one). */
static void the_cache_file(struct env *e, char *out, size_t len)
{
	unsigned n = 0;

	for (unsigned x = 0; x < 256; x++) {
		char sub[PATH_MAX];
		struct dirent *de;
		DIR *d;

		snprintf(sub, sizeof(sub), "%.3900s/objects/%02x",
			 e->cache_dir, x);
		d = opendir(sub);
		if (!d)
			continue;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.') {
				snprintf(out, len, "%s/%s", sub, de->d_name);
				n++;
			}
		closedir(d);
	}
	assert_int_equal(n, 1);
}

static unsigned count_cache_files(struct env *e)
{
	unsigned n = 0;

	for (unsigned x = 0; x < 256; x++) {
		char sub[PATH_MAX + 32];
		struct dirent *de;
		DIR *d;

		snprintf(sub, sizeof(sub), "%s/objects/%02x", e->cache_dir, x);
		d = opendir(sub);
		if (!d)
			continue;
		while ((de = readdir(d)))
			n += de->d_name[0] != '.';
		closedir(d);
	}
	return n;
}

/* ---- CRC32C ---- */

static void test_crc32c_vectors(void **state)
{
	unsigned char buf[4096 + 16];

	(void)state;
	assert_int_equal(util_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(util_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(util_crc32c(0, "", 0), 0);
	/* RFC 3720 B.4 */
	memset(buf, 0, 32);
	assert_int_equal(util_crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, 32);
	assert_int_equal(util_crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(util_crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	assert_int_equal(util_crc32c(0, buf, 32), 0x113FDB5Cu);
	/* Hardware and table agree at every alignment and length, and
	 * the CRC chains. */
	pattern_fill(7, 0, buf, sizeof(buf));
	for (size_t a = 0; a < 8; a++)
		for (size_t n = 0; n + a <= 300; n += 7)
			assert_int_equal(util_crc32c(0, buf + a, n),
					 util_crc32c_sw(0, buf + a, n));
	assert_int_equal(util_crc32c(0, buf + 3, 4099),
			 util_crc32c_sw(0, buf + 3, 4099));
	assert_int_equal(util_crc32c(util_crc32c(0, buf, 1000), buf + 1000,
				      3000), util_crc32c(0, buf, 4000));
}

/* Long buffers take three interleaved streams: each length around the
 * stripe multiples, at odd alignments, against the table and chained. */
static void test_crc32c_long(void **state)
{
	size_t max = 4 * 3 * 4096 + 64;
	unsigned char *buf = malloc(max + 8);
	const size_t lens[] = { 12287, 12288, 12289, 12295, 24575, 24576,
				24583, 36864 + 100, 4 * 3 * 4096, max };
	uint32_t before;

	(void)state;
	assert_non_null(buf);
	pattern_fill(11, 0, buf, max + 8);
	for (size_t a = 0; a < 8; a += 3)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
			assert_int_equal(util_crc32c(0, buf + a, lens[i]),
					 util_crc32c_sw(0, buf + a, lens[i]));
	assert_int_equal(util_crc32c(util_crc32c(0, buf, 13000),
				      buf + 13000, max - 13000),
			 util_crc32c_sw(0, buf, max));
	assert_int_equal(util_crc32c(0x12345678u, buf + 1, 30000),
			 util_crc32c_sw(0x12345678u, buf + 1, 30000));
	/* One bit flipped in the middle stripe changes the result. */
	before = util_crc32c(0, buf, 12288);
	buf[4096 + 77] ^= 0x10;
	assert_int_not_equal(util_crc32c(0, buf, 12288), before);
	assert_int_equal(util_crc32c(0, buf, 12288),
			 util_crc32c_sw(0, buf, 12288));
	free(buf);
}

/* ---- reads ---- */

static void test_read_sizes(void **state)
{
	struct env *e = *state;
	const uint64_t B = B64K;
	const uint64_t sizes[] = { 0, 1, B - 1, B, B + 1, 5 * B + B / 2 };
	struct obj o[6];
	uint64_t total = 0, in0;
	unsigned rnd = 12345;

	env_open(e);
	if (!cache_uring_active(e->c->uring))
		fprintf(stderr, "note: io_uring is not available here\n");
	for (int i = 0; i < 6; i++) {
		char key[32];

		snprintf(key, sizeof(key), "sz/%llu",
			 (unsigned long long)sizes[i]);
		put_obj(e, &o[i], key, sizes[i], 100 + i);
		total += sizes[i];
	}
	in0 = bytes_in(e);
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 6; i++) {
			uint64_t s = o[i].size;
			const uint64_t offs[][2] = {
				{ 0, s }, { 1, 1 }, { B - 1, 2 },
				{ B - 3, B + 7 }, { s ? s - 1 : 0, 10 },
				{ s, 5 }, { s / 2, 3 * B }, { 7, 100000 },
				{ 3 * B - 1, 1 }, { 0, 1 },
			};

			for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]);
			     k++)
				read_check(e, &o[i], offs[k][0],
					   (size_t)offs[k][1]);
			for (int k = 0; k < 20 && s; k++) {
				uint64_t off, len;

				rnd = rnd * 1103515245 + 12345;
				off = rnd % (s + 3);
				rnd = rnd * 1103515245 + 12345;
				len = 1 + rnd % (2 * B + 5);
				read_check(e, &o[i], off, (size_t)len);
			}
		}
		/* Each byte came from the store exactly once. */
		assert_int_equal(bytes_in(e) - in0, total);
	}
	assert_true(stats(e).hits > 0);
	assert_int_equal(stats(e).misses, 1 + 1 + 1 + 2 + 6);
	assert_int_equal(stats(e).crc_failures, 0);
}

static void test_reopen_no_requests(void **state)
{
	struct env *e = *state;
	struct obj o[3];
	uint64_t in0;

	put_obj(e, &o[0], "re/a", 3 * B64K + 333, 1);
	put_obj(e, &o[1], "re/b", 1, 2);
	put_obj(e, &o[2], "re/c/d", 10 * B64K, 3);
	env_open(e);
	for (int i = 0; i < 3; i++)
		read_all(e, &o[i]);
	env_close(e);
	env_open(e);
	assert_int_equal(stats(e).objects, 3);
	assert_int_equal(stats(e).used_bytes, 3 * B64K + 333 + 1 + 10 * B64K);
	in0 = bytes_in(e);
	for (int i = 0; i < 3; i++) {
		read_all(e, &o[i]);
		read_check(e, &o[i], 5, 70000);
	}
	assert_int_equal(bytes_in(e), in0);
	assert_int_equal(stats(e).misses, 0);
	assert_int_equal(stats(e).crc_failures, 0);
	assert_true(stats(e).hits >= 4 + 1 + 10);
}

/* ---- crashes ---- */

/* In a child: opens the cache, reads every object, then sleeps sleep_ms
 * and leaves without cache_close.  Exit 0 if every byte was right. */
static void child_read_and_die(struct env *e, struct obj *o, int n,
			       unsigned sleep_ms)
{
	struct cache *c;
	char msg[256], *buf;

	if (cache_open(&e->cfg, e->st, &c, msg, sizeof(msg)))
		_exit(10);
	for (int i = 0; i < n; i++) {
		struct cache_file *f;

		buf = malloc(o[i].size + 1);
		if (!buf || cache_file_open(c, o[i].key, o[i].size, o[i].etag,
					    &f))
			_exit(11);
		if (cache_file_read(f, buf, o[i].size, 0) != (ssize_t)o[i].size)
			_exit(12);
		for (uint64_t k = 0; k < o[i].size; k++)
			if ((unsigned char)buf[k] != pattern_byte(o[i].seed, k))
				_exit(13);
		cache_file_close(f);
		free(buf);
	}
	usleep(sleep_ms * 1000);
	_exit(0);
}

static void crash_test(struct env *e, unsigned sleep_ms, bool must_be_cached)
{
	struct obj o[4];
	uint64_t total = 0, in0;
	int status;
	pid_t pid;

	put_obj(e, &o[0], "k9/a", 7 * B64K + 5, 11);
	put_obj(e, &o[1], "k9/b", B64K, 12);
	put_obj(e, &o[2], "k9/c", 20 * B64K - 1, 13);
	put_obj(e, &o[3], "k9/d", 100, 14);
	for (int i = 0; i < 4; i++)
		total += o[i].size;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_read_and_die(e, o, 4, sleep_ms);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	env_open(e);
	in0 = bytes_in(e);
	for (int i = 0; i < 4; i++)
		read_all(e, &o[i]);
	if (must_be_cached)
		assert_int_equal(bytes_in(e) - in0, 0);
	else
		assert_true(bytes_in(e) - in0 <= total);
	assert_int_equal(stats(e).crc_failures, 0);
	/* And once more after a clean close. */
	env_close(e);
	env_open(e);
	in0 = bytes_in(e);
	for (int i = 0; i < 4; i++)
		read_all(e, &o[i]);
	assert_int_equal(bytes_in(e) - in0, 0);
}

static void test_crash_after_flush(void **state)
{
	crash_test(*state, 1600, true);
}

static void test_crash_before_flush(void **state)
{
	crash_test(*state, 0, false);
}

/* SIGKILL while fetching, evicting and flushing: whatever the index
 * and the files say afterwards, what is served is right. */
static void test_crash_sigkill(void **state)
{
	struct env *e = *state;
	struct obj o[12];
	int status;
	pid_t pid;

	e->cfg.block_bytes = 4 * KIB;
	e->cfg.size_bytes = 1 * MIB;
	for (int i = 0; i < 12; i++) {
		char key[32];

		snprintf(key, sizeof(key), "kill/%d", i);
		put_obj(e, &o[i], key, 97 * KIB + (uint64_t)i * 1000, 40 + i);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct cache *c;
		char msg[256];

		if (cache_open(&e->cfg, e->st, &c, msg, sizeof(msg)))
			_exit(10);
		for (;;)
			for (int i = 0; i < 12; i++) {
				struct cache_file *f;
				char buf[4096];

				if (cache_file_open(c, o[i].key, o[i].size,
						    o[i].etag, &f))
					_exit(11);
				for (uint64_t off = 0; off < o[i].size;
				     off += sizeof(buf))
					if (cache_file_read(f, buf, sizeof(buf),
							    off) < 0)
						_exit(12);
				cache_file_close(f);
				if (i % 3 == 0)
					cache_evict_key(c, o[(i + 5) % 12].key);
			}
	}
	usleep(1300 * 1000);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	env_open(e);
	for (int i = 0; i < 12; i++) {
		read_all(e, &o[i]);
		read_check(e, &o[i], 4095, 4098);
	}
	assert_true(stats(e).used_bytes <= e->cfg.size_bytes);
}

static void test_crc_corruption(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 300];
	struct obj o;
	uint64_t in0;

	put_obj(e, &o, "crc/x", 4 * B64K + 100, 77);
	env_open(e);
	read_all(e, &o);
	env_close(e);
	the_cache_file(e, path, sizeof(path));
	flip_bit(path, 2 * B64K + 100, 5);
	env_open(e);
	in0 = bytes_in(e);
	read_all(e, &o);
	read_all(e, &o);
	assert_int_equal(stats(e).crc_failures, 1);
	assert_int_equal(stats(e).misses, 1);
	assert_int_equal(bytes_in(e) - in0, B64K); /* exactly one block */
	/* The refetched block is recorded and verified next time. */
	env_close(e);
	env_open(e);
	in0 = bytes_in(e);
	read_all(e, &o);
	assert_int_equal(bytes_in(e), in0);
	assert_int_equal(stats(e).crc_failures, 0);
}

/* ---- versions ---- */

static void test_version_change(void **state)
{
	struct env *e = *state;
	struct cache_file *h1, *h2;
	struct obj v1, v2;
	char buf[100];

	put_obj(e, &v1, "ver/k", 3 * B64K, 1);
	env_open(e);
	assert_int_equal(cache_file_open(e->c, v1.key, v1.size, v1.etag, &h1),
			 0);
	assert_int_equal(cache_file_read(h1, buf, 100, 10), 100);
	check_bytes(1, 10, buf, 100);
	usleep(2000); /* a new mtime, hence a new file:// ETag */
	put_obj(e, &v2, "ver/k", 5 * B64K + 9, 2);
	assert_string_not_equal(v1.etag, v2.etag);
	assert_int_equal(cache_file_open(e->c, v2.key, v2.size, v2.etag, &h2),
			 0);
	assert_int_equal(cache_file_read(h2, buf, 100, 10), 100);
	check_bytes(2, 10, buf, 100);
	read_all(e, &v2);
	/* The old handle keeps what it had, and cannot fetch more: the
	 * store has other bytes now. */
	assert_int_equal(cache_file_read(h1, buf, 100, 20), 100);
	check_bytes(1, 20, buf, 100);
	assert_int_equal(cache_file_read(h1, buf, 100, 2 * B64K), -ESTALE);
	cache_file_close(h1);
	cache_file_close(h2);
	assert_int_equal(stats(e).objects, 1);
	assert_int_equal(stats(e).used_bytes, v2.size);
	assert_int_equal(count_cache_files(e), 1);
	env_close(e);
	env_open(e);
	read_all(e, &v2);
	assert_int_equal(stats(e).misses, 0);
}

/* ---- eviction ---- */

struct sampler {
	struct env *e;
	atomic_bool stop;
	uint64_t max_used;
	pthread_t th;
};

static void *sampler_run(void *arg)
{
	struct sampler *s = arg;

	while (!atomic_load(&s->stop)) {
		uint64_t u = stats(s->e).used_bytes;

		if (u > s->max_used)
			s->max_used = u;
		usleep(200);
	}
	return NULL;
}

static void test_eviction_lru(void **state)
{
	struct env *e = *state;
	struct obj o[10];
	struct sampler s = { .e = e };
	uint64_t in0;

	e->cfg.size_bytes = 4 * MIB;
	e->cfg.block_bytes = 1 * MIB;
	for (int i = 0; i < 10; i++) {
		char key[32];

		snprintf(key, sizeof(key), "lru/%d", i);
		put_obj(e, &o[i], key, MIB, 200 + i);
	}
	env_open(e);
	pthread_create(&s.th, NULL, sampler_run, &s);
	for (int i = 0; i < 3; i++)
		read_all(e, &o[i]);
	assert_int_equal(stats(e).used_bytes, 3 * MIB);
	in0 = bytes_in(e);
	read_all(e, &o[0]);                     /* 0 is now the newest */
	assert_int_equal(bytes_in(e), in0);
	read_all(e, &o[3]);                     /* evicts 1, the oldest */
	assert_true(stats(e).used_bytes <= 4 * MIB);
	assert_int_equal(cache_cached_bytes(e->c, o[0].key), MIB);
	assert_int_equal(cache_cached_bytes(e->c, o[1].key), 0);
	assert_int_equal(cache_cached_bytes(e->c, o[2].key), MIB);
	assert_int_equal(cache_cached_bytes(e->c, o[3].key), MIB);
	for (int i = 4; i < 10; i++) {
		read_all(e, &o[i]);
		assert_true(stats(e).used_bytes <= 4 * MIB);
	}
	for (int i = 7; i < 10; i++)
		assert_int_equal(cache_cached_bytes(e->c, o[i].key), MIB);
	assert_int_equal(cache_cached_bytes(e->c, o[1].key), 0);
	assert_true(stats(e).evictions >= 7);
	in0 = bytes_in(e);
	read_all(e, &o[1]);                     /* evicted: fetched again */
	assert_int_equal(bytes_in(e) - in0, MIB);
	atomic_store(&s.stop, true);
	pthread_join(s.th, NULL);
	assert_true(s.max_used <= 4 * MIB);
}

static void test_eviction_big_object(void **state)
{
	struct env *e = *state;
	struct sampler s = { .e = e };
	struct cache_reader r = { 0 };
	struct cache_file *f;
	struct obj o;
	const size_t chunk = 256 * KIB;
	char *buf = malloc(chunk);

	assert_non_null(buf);
	e->cfg.size_bytes = 4 * MIB;
	e->cfg.block_bytes = 1 * MIB;
	put_obj(e, &o, "big", 10 * MIB + 12345, 5);
	env_open(e);
	pthread_create(&s.th, NULL, sampler_run, &s);
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &f), 0);
	for (uint64_t off = 0; off < o.size; off += chunk) {
		size_t want = o.size - off < chunk ? o.size - off : chunk;

		cache_reader_note(f, &r, off, chunk);
		assert_int_equal(cache_file_read(f, buf, chunk, off), want);
		check_bytes(5, off, buf, want);
		assert_true(stats(e).used_bytes <= 4 * MIB);
	}
	assert_true(r.window_bytes > 0);
	cache_file_close(f);
	wait_idle(e);
	atomic_store(&s.stop, true);
	pthread_join(s.th, NULL);
	assert_true(s.max_used <= 4 * MIB);
	assert_true(stats(e).evictions >= 6);
	free(buf);
}

struct stress_arg {
	struct env *e;
	struct obj *o;
	int t;
	int failed;
	unsigned reads;
};

/* Random reads under constant eviction of open files' blocks; odd
 * threads serve from the descriptor the way the FUSE layer does. */
static void *stress_run(void *arg)
{
	struct stress_arg *a = arg;
	struct cache_file *f[3];
	unsigned r = 777 + (unsigned)a->t;
	char *buf = malloc(80 * KIB);
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 3; i++)
		if (cache_file_open(a->e->c, a->o[i].key, a->o[i].size,
				    a->o[i].etag, &f[i]))
			a->failed = 1;
	while (!a->failed && buf && ms_since(&t0) < 1200) {
		struct obj *o;
		uint64_t off;
		size_t len;
		int i;

		r = r * 1103515245 + 12345;
		i = (int)(r >> 8) % 3;
		o = &a->o[i];
		r = r * 1103515245 + 12345;
		off = (r >> 4) % o->size;
		r = r * 1103515245 + 12345;
		len = 1 + (r >> 4) % (80 * KIB);
		if (len > o->size - off)
			len = (size_t)(o->size - off);
		if (a->t % 2) {
			if (cache_file_ensure_pinned(f[i], off, len) ||
			    pread(cache_file_fd(f[i]), buf, len, (off_t)off) !=
			    (ssize_t)len)
				a->failed = 2;
			cache_file_unpin(f[i], off, len);
		} else if (cache_file_read(f[i], buf, len, off) !=
			   (ssize_t)len) {
			a->failed = 3;
		}
		for (size_t k = 0; !a->failed && k < len; k++)
			if ((unsigned char)buf[k] !=
			    pattern_byte(o->seed, off + k))
				a->failed = 4;
		a->reads++;
	}
	for (int i = 0; i < 3; i++)
		cache_file_close(f[i]);
	free(buf);
	return NULL;
}

static void test_eviction_stress(void **state)
{
	struct env *e = *state;
	struct sampler s = { .e = e };
	struct stress_arg args[4];
	struct obj o[3];
	pthread_t th[4];

	e->cfg.size_bytes = 16 * B64K;
	e->cfg.fetch_parallel = 4;
	put_obj(e, &o[0], "st/a", MIB + 3, 500);
	put_obj(e, &o[1], "st/b", MIB, 501);
	put_obj(e, &o[2], "st/c", 2 * MIB - 5, 502);
	env_open(e);
	pthread_create(&s.th, NULL, sampler_run, &s);
	for (int t = 0; t < 4; t++) {
		args[t] = (struct stress_arg){ .e = e, .o = o, .t = t };
		pthread_create(&th[t], NULL, stress_run, &args[t]);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		if (args[t].failed)
			fail_msg("thread %d failed (%d) after %u reads", t,
				 args[t].failed, args[t].reads);
		assert_true(args[t].reads > 20);
	}
	atomic_store(&s.stop, true);
	pthread_join(s.th, NULL);
	assert_true(s.max_used <= e->cfg.size_bytes);
	assert_true(stats(e).evictions > 50);
	assert_int_equal(stats(e).crc_failures, 0);
}

static void test_evict_key(void **state)
{
	struct env *e = *state;
	struct cache_file *f;
	struct obj o;
	uint64_t in0;

	put_obj(e, &o, "ev/k", 3 * B64K + 1, 9);
	env_open(e);
	read_all(e, &o);
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &f), 0);
	assert_int_equal(cache_evict_key(e->c, o.key), -EBUSY);
	cache_file_close(f);
	assert_int_equal(cache_evict_key(e->c, o.key), 0);
	assert_int_equal(cache_cached_bytes(e->c, o.key), 0);
	assert_int_equal(stats(e).used_bytes, 0);
	assert_int_equal(stats(e).objects, 0);
	assert_int_equal(cache_evict_key(e->c, "ev/never-cached"), 0);
	in0 = bytes_in(e);
	read_all(e, &o);
	assert_int_equal(bytes_in(e) - in0, o.size);
}

static void test_warm(void **state)
{
	struct env *e = *state;
	struct obj a, b;
	uint64_t in0;

	put_obj(e, &a, "warm/a", 16 * B64K + 3, 21);
	put_obj(e, &b, "warm/b", 9 * B64K, 22);
	env_open(e);
	assert_int_equal(cache_warm(e->c, a.key, a.size, a.etag, true), 0);
	assert_int_equal(cache_cached_bytes(e->c, a.key), a.size);
	in0 = bytes_in(e);
	read_all(e, &a);
	assert_int_equal(bytes_in(e), in0);
	assert_int_equal(cache_warm(e->c, b.key, b.size, b.etag, false), 0);
	for (int i = 0; i < 3000 && cache_cached_bytes(e->c, b.key) < b.size;
	     i++)
		usleep(1000);
	assert_int_equal(cache_cached_bytes(e->c, b.key), b.size);
	assert_int_equal(cache_warm(e->c, "warm/huge", 1ull << 40, "x", true),
			 -EFBIG);
	assert_int_equal(cache_warm(e->c, "warm/huge", 1ull << 40, "x", false),
			 -EFBIG);
}

/* ---- concurrency ---- */

struct reader_arg {
	struct env *e;
	struct obj *shared;
	int nshared;
	struct obj *own;
	int t;
	int failed;
};

static void *reader_run(void *arg)
{
	struct reader_arg *a = arg;
	const size_t chunk = 48 * KIB;
	char *buf = malloc(chunk);

	for (int s = -1; s < a->nshared && buf; s++) {
		struct obj *o = s < 0 ? a->own : &a->shared[s];
		uint64_t nchunks = (o->size + chunk - 1) / chunk;
		struct cache_file *f;

		if (cache_file_open(a->e->c, o->key, o->size, o->etag, &f)) {
			a->failed = 1;
			break;
		}
		for (uint64_t k = 0; k < nchunks; k++) {
			/* Each thread walks the chunks in its own order:
			 * rotated, and backwards for odd threads. */
			uint64_t j = (k + (uint64_t)a->t * 3) % nchunks;

			if (a->t % 2)
				j = nchunks - 1 - j;
			uint64_t off = j * chunk;
			size_t want = o->size - off < chunk ?
				      (size_t)(o->size - off) : chunk;

			if (cache_file_read(f, buf, chunk, off) !=
			    (ssize_t)want) {
				a->failed = 2;
				break;
			}
			for (size_t i = 0; i < want; i++)
				if ((unsigned char)buf[i] !=
				    pattern_byte(o->seed, off + i)) {
					a->failed = 3;
					break;
				}
		}
		cache_file_close(f);
	}
	free(buf);
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	struct env *e = *state;
	struct obj shared[2], own[8];
	struct reader_arg args[8];
	pthread_t th[8];
	uint64_t total = 0, in0;

	e->cfg.fetch_parallel = 4;
	put_obj(e, &shared[0], "cc/shared0", MIB + 777, 300);
	put_obj(e, &shared[1], "cc/shared1", 3 * MIB, 301);
	total = shared[0].size + shared[1].size;
	for (int t = 0; t < 8; t++) {
		char key[32];

		snprintf(key, sizeof(key), "cc/own%d", t);
		put_obj(e, &own[t], key, 256 * KIB + (uint64_t)t * 1000,
			310 + t);
		total += own[t].size;
	}
	env_open(e);
	in0 = bytes_in(e);
	for (int t = 0; t < 8; t++) {
		args[t] = (struct reader_arg){ .e = e, .shared = shared,
					       .nshared = 2, .own = &own[t],
					       .t = t };
		pthread_create(&th[t], NULL, reader_run, &args[t]);
	}
	for (int t = 0; t < 8; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(args[t].failed, 0);
	}
	/* Every byte fetched once: no block was fetched twice. */
	assert_int_equal(bytes_in(e) - in0, total);
	assert_int_equal(stats(e).bytes_fetched, total);
}

/* ---- readahead ---- */

static void test_readahead_sequential(void **state)
{
	struct env *e = *state;
	struct cache_reader r = { 0 };
	struct cache_file *f;
	struct obj o;
	char buf[B64K];
	const uint64_t want_win[] = { 0, 128 * KIB, 256 * KIB, 512 * KIB,
				      512 * KIB, 512 * KIB };

	e->cfg.readahead_first_bytes = 128 * KIB;
	e->cfg.readahead_max_bytes = 512 * KIB;
	put_obj(e, &o, "ra/seq", 4 * MIB, 50);
	env_open(e);
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &f), 0);
	for (int k = 0; k < 24; k++) {
		uint64_t off = (uint64_t)k * B64K, hits0;

		cache_reader_note(f, &r, off, B64K);
		if (k < 6)
			assert_int_equal(r.window_bytes, want_win[k]);
		hits0 = stats(e).hits;
		assert_int_equal(cache_file_read(f, buf, B64K, off), B64K);
		check_bytes(50, off, buf, B64K);
		/* From the third read on, readahead had fetched it. */
		assert_int_equal(stats(e).hits - hits0, k >= 2 ? 1 : 0);
		wait_idle(e);
		if (k >= 1)
			assert_true(r.ahead_off >= off + B64K + r.window_bytes);
	}
	assert_int_equal(r.window_bytes, 512 * KIB);
	cache_file_close(f);
}

static void test_readahead_random(void **state)
{
	struct env *e = *state;
	struct cache_reader r = { 0 };
	struct cache_file *f;
	struct obj o;
	char buf[1000];
	bool touched[64] = { false };
	uint64_t nblocks = 0;

	put_obj(e, &o, "ra/rnd", 4 * MIB, 51);
	env_open(e);
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &f), 0);
	for (int k = 0; k < 40; k++) {
		uint64_t off = ((uint64_t)k * 37 % 64) * B64K + 5 +
			       (uint64_t)k;

		assert_true(off != r.next_off);
		cache_reader_note(f, &r, off, sizeof(buf));
		assert_int_equal(r.window_bytes, 0);
		assert_int_equal(cache_file_read(f, buf, sizeof(buf), off),
				 sizeof(buf));
		check_bytes(51, off, buf, sizeof(buf));
		touched[off / B64K] = true;
	}
	wait_idle(e);
	for (int i = 0; i < 64; i++)
		nblocks += touched[i];
	/* Nothing but the blocks read was fetched. */
	assert_int_equal(stats(e).bytes_fetched, nblocks * B64K);
	cache_file_close(f);
}

/* ---- an unreachable store ---- */

static void test_store_unreachable(void **state)
{
	struct env *e = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct obj_store *s3;
	struct obj_config oc;
	struct obj_error err;
	struct obj cached, missing;
	struct timespec t0;
	struct cache_file *f;
	char url[64], ep[64], buf[100];
	int lfd;
	int64_t ms;

	/* Fill the cache through file://, under the s3 store's id. */
	e->cfg.store_id = "s3://fmfs-unreachable";
	put_obj(e, &cached, "un/cached", 5 * B64K + 17, 60);
	put_obj(e, &missing, "un/missing", 2 * B64K, 61);
	env_open(e);
	read_all(e, &cached);
	env_close(e);

	/* A server that accepts connections and never answers. */
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 64), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(url, sizeof(url), "s3://fmfs-unreachable");
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", ntohs(sa.sin_port));
	setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
	obj_config_init(&oc);
	oc.url = url;
	oc.endpoint = ep;
	oc.region = "us-east-1";
	oc.connect_timeout_ms = 500;
	oc.idle_timeout_ms = 1000;
	oc.retry_max = 1;
	oc.retry_total_ms = 1000;
	assert_int_equal(obj_open(&oc, &s3, &err), OBJ_OK);

	e->cfg.fetch_timeout_ms = 300;
	{
		char msg[512];

		assert_int_equal(cache_open(&e->cfg, s3, &e->c, msg,
					    sizeof(msg)), 0);
	}
	read_all(e, &cached);
	assert_int_equal(cache_file_open(e->c, missing.key, missing.size,
					 missing.etag, &f), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(cache_file_read(f, buf, sizeof(buf), 0), -EIO);
	ms = ms_since(&t0);
	assert_true(ms >= 250 && ms < 1000);
	assert_false(stats(e).connected);
	assert_true(stats(e).fetch_errors >= 1);
	/* Cached data is served while the GET still hangs. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	read_all(e, &cached);
	read_check(e, &cached, 3, 2 * B64K);
	assert_true(ms_since(&t0) < 200);
	cache_file_close(f);
	env_close(e);       /* waits for the GET to give up */
	obj_close(s3);
	close(lfd);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void test_store_removed(void **state)
{
	struct env *e = *state;
	struct obj a, b;
	struct cache_file *f;
	struct timespec t0;
	char buf[10];

	put_obj(e, &a, "gone/a", 2 * B64K, 70);
	put_obj(e, &b, "gone/b", 2 * B64K, 71);
	env_open(e);
	read_all(e, &a);
	rm_rf(e->store_dir);
	assert_int_equal(cache_file_open(e->c, b.key, b.size, b.etag, &f), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(cache_file_read(f, buf, sizeof(buf), 0), -EIO);
	assert_true(ms_since(&t0) < 1000);
	cache_file_close(f);
	assert_true(stats(e).fetch_errors >= 1);
	read_all(e, &a);
}

/* ---- the cache directory ---- */

static void test_foreign_store_id(void **state)
{
	struct env *e = *state;
	struct cache *c2 = NULL;
	struct obj o;
	char msg[512];

	put_obj(e, &o, "id/x", 1000, 80);
	e->cfg.store_id = "file:///one";
	env_open(e);
	read_all(e, &o);
	env_close(e);
	e->cfg.store_id = "s3://other";
	assert_int_not_equal(cache_open(&e->cfg, e->st, &c2, msg,
					sizeof(msg)), 0);
	assert_null(c2);
	assert_contains(msg, "file:///one");
	assert_contains(msg, "s3://other");
	assert_contains(msg, e->cache_dir);
	e->cfg.store_id = "file:///one";    /* untouched: still usable */
	env_open(e);
	assert_int_equal(stats(e).objects, 1);
}

static void test_block_size_mismatch(void **state)
{
	struct env *e = *state;
	struct cache *c2 = NULL;
	char msg[512];

	env_open(e);
	env_close(e);
	e->cfg.block_bytes = 2 * B64K;
	assert_int_not_equal(cache_open(&e->cfg, e->st, &c2, msg,
					sizeof(msg)), 0);
	assert_contains(msg, "65536");
	assert_contains(msg, e->cache_dir);
}

static void test_corrupt_index(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64], junk[8192];
	struct obj o;
	uint64_t in0;
	bool moved = false;
	struct dirent *de;
	DIR *d;
	int fd;

	put_obj(e, &o, "bad/x", 3 * B64K, 90);
	env_open(e);
	read_all(e, &o);
	env_close(e);
	snprintf(path, sizeof(path), "%s/index.sqlite", e->cache_dir);
	memset(junk, 'x', sizeof(junk));
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
	close(fd);
	env_open(e);
	assert_int_equal(stats(e).objects, 0);
	assert_int_equal(count_cache_files(e), 0);
	d = opendir(e->cache_dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		moved |= !strncmp(de->d_name, "index.sqlite.bad-", 17);
	closedir(d);
	assert_true(moved);
	in0 = bytes_in(e);
	read_all(e, &o);
	assert_int_equal(bytes_in(e) - in0, o.size);
}

/* A table dropped from the index (by hand, a partial copy) is damage
 * like any other: the index is moved aside and the cache starts over,
 * rather than refusing to open with SQLite's "no such table". */
static void test_missing_table(void **state)
{
	static const char *const tables[] = { "blocks", "objects", "attrs",
					       "listings" };
	struct env *e = *state;
	char cmd[PATH_MAX * 3];
	struct obj o;
	uint64_t in0;
	struct dirent *de;
	DIR *d;
	int moved;

	put_obj(e, &o, "drop/x", 3 * B64K, 92);
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		env_open(e);
		read_all(e, &o);
		env_close(e);
		snprintf(cmd, sizeof(cmd), "rm -f '%s'/index.sqlite.bad-*; "
			 "sqlite3 '%s/index.sqlite' 'DROP TABLE %s'",
			 e->cache_dir, e->cache_dir, tables[i]);
		if (system(cmd) != 0)
			skip(); /* no sqlite3 program */
		env_open(e);
		moved = 0;
		d = opendir(e->cache_dir);
		assert_non_null(d);
		while ((de = readdir(d)))
			moved += !strncmp(de->d_name, "index.sqlite.bad-", 17) &&
				 !strchr(de->d_name + 17, '-');
		closedir(d);
		assert_int_equal(moved, 1);
		assert_int_equal(stats(e).objects, 0);
		in0 = bytes_in(e);
		read_all(e, &o);
		assert_int_equal(bytes_in(e) - in0, o.size);
		env_close(e);
	}
}

/* Attributes learned once are kept across a close: with their version,
 * changed at once for lookups, forgotten when asked. */
static void test_attrs_kept(void **state)
{
	struct env *e = *state;
	struct cache_attr a = { .has = CACHE_ATTR_MODE | CACHE_ATTR_UID,
				.mode = 0100600, .uid = 1234 }, g;

	snprintf(a.etag, sizeof(a.etag), "abc");
	env_open(e);
	assert_int_equal(cache_attr_get(e->c, "k/secret", &g), -ENOENT);
	cache_attr_set(e->c, "k/secret", &a);
	cache_attr_set(e->c, "k/gone", &a);
	assert_int_equal(cache_attr_get(e->c, "k/secret", &g), 0);
	assert_int_equal(g.mode, 0100600);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	cache_attr_set(e->c, "k/gone", NULL);  /* after its row was written */
	a.mode = 040700;
	a.etag[0] = '\0';
	cache_attr_set(e->c, "k/dir/", &a);
	env_close(e);
	env_open(e);
	assert_int_equal(cache_attr_get(e->c, "k/secret", &g), 0);
	assert_string_equal(g.etag, "abc");
	assert_int_equal(g.has, CACHE_ATTR_MODE | CACHE_ATTR_UID);
	assert_int_equal(g.mode, 0100600);
	assert_int_equal(g.uid, 1234);
	assert_int_equal(cache_attr_get(e->c, "k/gone", &g), -ENOENT);
	assert_int_equal(cache_attr_get(e->c, "k/dir/", &g), 0);
	assert_int_equal(g.mode, 040700);
}

static void listing_expect(struct env *e, const char *dir, const char *want,
			   int64_t want_fetched)
{
	void *data;
	size_t len;
	uint32_t n;
	int64_t fetched;

	assert_int_equal(cache_listing_get(e->c, dir, &data, &len, &n,
					   &fetched), 0);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(data, want, len);
	assert_int_equal(n, (uint32_t)len);
	assert_true(fetched == want_fetched);
	free(data);
}

/* Listings kept for the fs: seen at once, kept across a reopen, marked
 * stale one by one or by tree (not a sibling that shares the prefix
 * bytes), and bounded: past listing_max_bytes the least recently used
 * go at the next flush, the one just read stays. */
static void test_listings_kept(void **state)
{
	struct env *e = *state;
	char big[40000];
	uint64_t dirs, entries;
	void *data;
	size_t len;
	uint32_t n;
	int64_t f;

	env_open(e);
	assert_int_equal(cache_listing_get(e->c, "a/", &data, &len, &n, &f),
			 -ENOENT);
	cache_listing_put(e->c, "", "root", 4, 4, 1000);
	cache_listing_put(e->c, "a/", "aaa", 3, 3, 2000);
	cache_listing_put(e->c, "a/b/", "bb", 2, 2, 3000);
	cache_listing_put(e->c, "a/bc/", "c", 1, 1, 4000);
	listing_expect(e, "a/", "aaa", 2000);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	cache_listing_stats(e->c, &dirs, &entries);
	assert_int_equal(dirs, 4);
	assert_int_equal(entries, 10);
	cache_listing_put(e->c, "a/", "AAAA", 4, 4, 5000); /* replaced */
	env_close(e);
	env_open(e);
	listing_expect(e, "", "root", 1000);
	listing_expect(e, "a/", "AAAA", 5000);
	cache_listing_stale(e->c, "a/", false);
	listing_expect(e, "a/", "AAAA", 0);
	listing_expect(e, "a/b/", "bb", 3000);
	cache_listing_stale(e->c, "a/b/", true);
	listing_expect(e, "a/b/", "bb", 0);   /* pending */
	listing_expect(e, "a/bc/", "c", 4000); /* not under "a/b/" */
	assert_int_equal(cache_index_flush(e->c, false), 0);
	listing_expect(e, "a/b/", "bb", 0);   /* written */
	listing_expect(e, "a/bc/", "c", 4000);
	cache_listing_put(e->c, "a/b/", "new", 3, 3, 6000); /* fresh again */
	env_close(e);

	e->cfg.listing_max_bytes = 100000;
	env_open(e);
	listing_expect(e, "a/b/", "new", 6000);
	listing_expect(e, "a/bc/", "c", 4000);
	memset(big, 'x', sizeof(big));
	cache_listing_put(e->c, "big1/", big, sizeof(big), 1, 7000);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	cache_listing_put(e->c, "big2/", big, sizeof(big), 1, 7000);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	usleep(2000); /* used_ms: big1 is read after the others */
	assert_int_equal(cache_listing_get(e->c, "big1/", &data, &len, &n,
					   &f), 0);
	free(data);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	cache_listing_put(e->c, "big3/", big, sizeof(big), 1, 7000);
	assert_int_equal(cache_index_flush(e->c, false), 0);
	/* 120 KB > 100 KB: down to 90 KB, the oldest first: the small
	 * ones and big2; big1 (read last but one) and big3 stay. */
	assert_int_equal(cache_listing_get(e->c, "big2/", &data, &len, &n,
					   &f), -ENOENT);
	assert_int_equal(cache_listing_get(e->c, "a/b/", &data, &len, &n,
					   &f), -ENOENT);
	assert_int_equal(cache_listing_get(e->c, "big1/", &data, &len, &n,
					   &f), 0);
	assert_int_equal(len, sizeof(big));
	free(data);
	assert_int_equal(cache_listing_get(e->c, "big3/", &data, &len, &n,
					   &f), 0);
	free(data);
	cache_listing_stats(e->c, &dirs, &entries);
	assert_int_equal(dirs, 2);
}

/* cache_w_version (hard links copy a dirty file only when it changed):
 * the same number while nothing changes, another after each kind of
 * change and for another dirty file; CACHE_WA_CTIME sets ctime as
 * given (a copy's), without it ctime becomes now. */
static void test_w_version(void **state)
{
	struct env *e = *state;
	struct cache_wattr a = { .kind = CACHE_WK_FILE, .mode = 0644 }, g;
	struct cache_wfile *w, *w2;
	uint64_t v0, v1, v2, v3;

	env_open(e);
	assert_int_equal(cache_w_create(e->c, "k/a", &a, false, NULL, NULL,
					&w), 0);
	v0 = cache_w_version(w);
	assert_true(v0 == cache_w_version(w));
	assert_int_equal(cache_w_pwrite(w, "abc", 3, 0), 3);
	v1 = cache_w_version(w);
	assert_true(v1 != v0);
	assert_true(v1 == cache_w_version(w));
	assert_int_equal(cache_w_xattr_set(w, "x", "y", 1, 0), 0);
	v2 = cache_w_version(w);
	assert_true(v2 != v1);
	a.ctime_ns = 1234567890123456789;
	a.mtime_ns = 1000000000;
	cache_w_setattr(w, &a, CACHE_WA_MTIME | CACHE_WA_CTIME);
	v3 = cache_w_version(w);
	assert_true(v3 != v2);
	cache_w_stat(w, &g);
	assert_true(g.ctime_ns == 1234567890123456789);
	assert_true(g.mtime_ns == 1000000000);
	cache_w_setattr(w, &a, CACHE_WA_MODE);
	cache_w_stat(w, &g);
	assert_true(g.ctime_ns > 1700000000LL * 1000000000); /* now */
	assert_int_equal(cache_w_create(e->c, "k/b", &a, false, NULL, NULL,
					&w2), 0);
	assert_true(cache_w_version(w2) != cache_w_version(w));
	cache_w_put(w2);
	cache_w_put(w);
}

/* A row that outlived its file's upload (a stop while the file moved
 * into the read cache: its bytes and .meta gone) is not a lost file when
 * the row says the file was uploaded; the row just goes.  One that does
 * not say so is still reported lost. */
static void test_w_uploaded_row(void **state)
{
	static const char *const keys[] = { "up/a", "up/b" };
	struct env *e = *state;
	struct cache_wattr a = { .kind = CACHE_WK_FILE, .mode = 0644 };
	struct cache_wb_stats ws;
	struct cache_wfile *w;
	char cmd[PATH_MAX * 3];
	FILE *f;
	int n = -1;

	env_open(e);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(cache_w_create(e->c, keys[i], &a, false, NULL,
						NULL, &w), 0);
		assert_int_equal(cache_w_pwrite(w, "abc", 3, 0), 3);
		assert_int_equal(cache_w_commit(w, false), 0);
		cache_w_put(w);
	}
	env_close(e);
	snprintf(cmd, sizeof(cmd), "cd '%s' && sqlite3 writeback.sqlite "
		 "\"UPDATE files SET uploaded='etag1' WHERE key='up/a'\" && "
		 "for id in $(sqlite3 writeback.sqlite \"SELECT printf('%%016x'"
		 ", id) FROM files\"); do rm dirty/$id dirty/$id.meta; done",
		 e->cache_dir);
	if (system(cmd) != 0)
		skip(); /* no sqlite3 program */
	env_open(e);
	cache_wb_get_stats(e->c, &ws);
	assert_int_equal(ws.lost_files, 1); /* up/b, not up/a */
	assert_int_equal(ws.dirty_files, 0);
	env_close(e);
	snprintf(cmd, sizeof(cmd), "sqlite3 '%s/writeback.sqlite' \"SELECT "
		 "count(*) FROM files WHERE key='up/a'\"", e->cache_dir);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &n), 1);
	pclose(f);
	assert_int_equal(n, 0);
}

/* A dirty file removed (its row gone from writeback.sqlite, a later
 * commit there) whose files a power cut brought back is not queued
 * again: the database keeps a prefix of its commits, so a .meta with no
 * row and an older seq was removed on purpose.  A .meta newer than every
 * row (the database lost its tail) is still re-queued. */
static void test_w_removed_comes_back(void **state)
{
	static const char *const keys[] = { "rm/a", "rm/b", "rm/c" };
	struct env *e = *state;
	struct cache_wattr a = { .kind = CACHE_WK_FILE, .mode = 0644 };
	struct cache_wb_stats ws;
	struct cache_wfile *w;
	char cmd[PATH_MAX * 3];

	env_open(e);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(cache_w_create(e->c, keys[i], &a, false, NULL,
						NULL, &w), 0);
		assert_int_equal(cache_w_pwrite(w, "abc", 3, 0), 3);
		assert_int_equal(cache_w_commit(w, true), 0);
		cache_w_put(w);
		if (i == 0) { /* rm/a's files as the fsync left them */
			snprintf(cmd, sizeof(cmd), "cd '%s' && mkdir -p "
				 "../saved && cp dirty/* ../saved/",
				 e->cache_dir);
			assert_int_equal(system(cmd), 0);
		}
	}
	assert_int_equal(cache_w_unlink(e->c, "rm/a", false, false), 0);
	env_close(e);
	/* the cut: rm/a's files back; rm/c's row lost with the WAL's tail */
	snprintf(cmd, sizeof(cmd), "cd '%s' && cp ../saved/* dirty/ && "
		 "rm -r ../saved && sqlite3 writeback.sqlite \"DELETE FROM "
		 "files WHERE key='rm/c'\"", e->cache_dir);
	if (system(cmd) != 0)
		skip(); /* no sqlite3 program */
	env_open(e);
	cache_wb_get_stats(e->c, &ws);
	assert_int_equal(ws.dirty_files, 2); /* rm/b, and rm/c re-queued */
	assert_int_equal(ws.rebuilt, 1);
	assert_int_equal(cache_w_get(e->c, "rm/a", &w), -ENOENT);
	assert_int_equal(cache_w_get(e->c, "rm/c", &w), 0);
	cache_w_put(w);
	env_close(e);
}

/* A wholly cached clean file becomes a dirty file in place
 * (cache_w_adopt): a descriptor open on it before reads the writes; the
 * read cache forgets it; bytes move from clean to dirty, used stays.
 * Refused (nothing changed) while more references hold it, and for a
 * file not wholly cached.  A close without a commit leaves the file to
 * lost+found at the next open, never a nameless dirty file. */
static void test_w_adopt(void **state)
{
	struct env *e = *state;
	struct cache_wattr a = { .kind = CACHE_WK_FILE, .mode = 0644 };
	struct cache_file *f, *g, *h;
	struct cache_wfile *w;
	struct cache_stats s0, s1;
	struct obj o, p;
	char buf[4096], path[PATH_MAX + 64];
	int fd;

	env_open(e);
	put_obj(e, &o, "adopt/a", 300 * KIB, 7);
	put_obj(e, &p, "adopt/b", 300 * KIB, 8);
	read_all(e, &o);
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &f), 0);
	fd = dup(cache_file_fd(f));       /* a passthrough backing's view */
	assert_true(fd >= 0);
	a.size = o.size;
	/* another reference: refused, nothing changed */
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &g), 0);
	assert_int_equal(cache_w_adopt(e->c, o.key, &a, true, o.etag, f, 1,
				       &w), -EBUSY);
	cache_file_close(g);
	/* not wholly cached: refused */
	assert_int_equal(cache_file_open(e->c, p.key, p.size, p.etag, &h), 0);
	a.size = p.size;
	assert_int_equal(cache_w_adopt(e->c, p.key, &a, true, p.etag, h, 1,
				       &w), -EBUSY);
	cache_file_close(h);
	a.size = o.size;
	s0 = stats(e);
	assert_int_equal(cache_w_adopt(e->c, o.key, &a, true, o.etag, f, 1,
				       &w), 0);
	s1 = stats(e);
	assert_true(s1.used_bytes == s0.used_bytes);
	assert_true(s1.objects == s0.objects - 1);
	assert_int_equal(cache_w_pwrite(w, "changed", 7, 1000), 7);
	assert_int_equal(pread(fd, buf, 7, 1000), 7);
	assert_memory_equal(buf, "changed", 7);
	assert_int_equal(pread(fd, buf, 100, 2000), 100);
	check_bytes(o.seed, 2000, buf, 100);
	cache_file_close(f);
	/* the read cache has it no more: a new open fetches */
	assert_int_equal(cache_file_open(e->c, o.key, o.size, o.etag, &g), 0);
	assert_false(cache_file_complete(g));
	cache_file_close(g);
	cache_w_put(w);
	env_close(e);
	close(fd);
	/* never committed: at the next open it goes to lost+found */
	env_open(e);
	snprintf(path, sizeof(path), "%s/lost+found", e->cache_dir);
	assert_true(access(path, F_OK) == 0);
	read_all(e, &o);
	env_close(e);
}

/* An index of format 1 (no attrs table) is upgraded in place: its
 * cached blocks stay. */
static void test_format1_upgrade(void **state)
{
	struct env *e = *state;
	struct cache_attr a = { .has = CACHE_ATTR_MODE, .mode = 0100600 }, g;
	char cmd[PATH_MAX * 2];
	struct obj o;
	uint64_t in0;

	put_obj(e, &o, "up/x", 3 * B64K, 91);
	env_open(e);
	read_all(e, &o);
	env_close(e);
	snprintf(cmd, sizeof(cmd), "sqlite3 '%s/index.sqlite' \"DROP TABLE "
		 "attrs; UPDATE meta SET value='1' WHERE name='format'\"",
		 e->cache_dir);
	if (system(cmd) != 0)
		skip(); /* no sqlite3 program */
	env_open(e);
	assert_int_equal(stats(e).objects, 1);
	in0 = bytes_in(e);
	read_all(e, &o);
	assert_int_equal(bytes_in(e) - in0, 0);
	cache_attr_set(e->c, "up/x", &a);
	env_close(e);
	env_open(e);
	assert_int_equal(cache_attr_get(e->c, "up/x", &g), 0);
	assert_int_equal(g.mode, 0100600);
}

/* A store id garbled on the disk (a flipped bit) is damage, not another
 * store: the index starts over instead of refusing the mount. */
static void test_garbled_store_id(void **state)
{
	struct env *e = *state;
	char cmd[PATH_MAX * 2];
	struct obj o;

	put_obj(e, &o, "gid/x", 3 * B64K, 92);
	env_open(e);
	read_all(e, &o);
	env_close(e);
	snprintf(cmd, sizeof(cmd), "sqlite3 '%s/index.sqlite' \"UPDATE meta "
		 "SET value=substr(value,1,3)||char(1)||substr(value,5) WHERE "
		 "name='store_id'\"", e->cache_dir);
	if (system(cmd) != 0)
		skip(); /* no sqlite3 program */
	env_open(e);
	assert_int_equal(stats(e).objects, 0);
	read_all(e, &o);
	assert_int_equal(stats(e).objects, 1);
}

/* So is a block size no fmfs writes (46-mount-damage seed 4200682518
 * f218: a flipped bit made it 1448576 and the mount was refused as if
 * the cache dir were another configuration's). */
static void test_garbled_block_size(void **state)
{
	struct env *e = *state;
	static const char *const bad[] = { "1448576", "1048577x", "" };
	char cmd[PATH_MAX * 2];
	struct obj o;

	put_obj(e, &o, "gbs/x", 3 * B64K, 93);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		env_open(e);
		read_all(e, &o);
		assert_int_equal(stats(e).objects, 1);
		env_close(e);
		snprintf(cmd, sizeof(cmd), "sqlite3 '%s/index.sqlite' \"UPDATE "
			 "meta SET value='%s' WHERE name='block_bytes'\"",
			 e->cache_dir, bad[i]);
		if (system(cmd) != 0)
			skip(); /* no sqlite3 program */
		env_open(e);
		assert_int_equal(stats(e).objects, 0);
		read_all(e, &o);
		env_close(e);
	}
}

static mode_t perms_at(const char *dir, const char *name)
{
	char path[PATH_MAX * 2];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(stat(path, &sb), 0);
	return sb.st_mode & 07777;
}

/* An empty directory the user made and gave as the cache dir keeps its
 * mode (fmfs never changes the mode of what it did not make); what fmfs
 * makes in it is 0700/0600. */
static void test_dir_user_mode(void **state)
{
	struct env *e = *state;
	char cmd[PATH_MAX * 2];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->cache_dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(mkdir(e->cache_dir, 0755), 0);
	assert_int_equal(chmod(e->cache_dir, 0755), 0);
	env_open(e);
	env_close(e);
	env_open(e);
	assert_int_equal(perms_at(e->cache_dir, "."), 0755);
	assert_int_equal(perms_at(e->cache_dir, "objects"), 0700);
	assert_int_equal(perms_at(e->cache_dir, "index.sqlite"), 0600);
	env_close(e);
}

/* The cache dir and what is in it are 0700/0600 after every open, even
 * when they existed with looser modes. */
static void test_dir_tightened(void **state)
{
	struct env *e = *state;
	static const char *const files[] = {
		"index.sqlite", "index.lock", "writeback.sqlite", "fmfs.log",
		"lock", "dirty/0000000000000099", "lost+found/1-x",
	};
	char path[PATH_MAX * 2];
	struct obj o;

	put_obj(e, &o, "t/x", 1000, 92);
	env_open(e);
	read_all(e, &o);
	env_close(e);
	chmod(e->cache_dir, 0755);
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", e->cache_dir,
			 i == 0 ? "objects" : i == 1 ? "dirty" : "objects/00");
		assert_int_equal(chmod(path, 0755), 0);
	}
	snprintf(path, sizeof(path), "%s/lost+found", e->cache_dir);
	mkdir(path, 0755);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/%s", e->cache_dir, files[i]);
		fd = open(path, O_WRONLY | O_CREAT, 0644);
		assert_true(fd >= 0);
		close(fd);
		assert_int_equal(chmod(path, 0644), 0);
	}
	env_open(e);
	assert_int_equal(perms_at(e->cache_dir, "."), 0700);
	assert_int_equal(perms_at(e->cache_dir, "objects"), 0700);
	assert_int_equal(perms_at(e->cache_dir, "objects/00"), 0700);
	assert_int_equal(perms_at(e->cache_dir, "dirty"), 0700);
	assert_int_equal(perms_at(e->cache_dir, "lost+found"), 0700);
	assert_int_equal(perms_at(e->cache_dir, "index.sqlite"), 0600);
	assert_int_equal(perms_at(e->cache_dir, "index.lock"), 0600);
	assert_int_equal(perms_at(e->cache_dir, "writeback.sqlite"), 0600);
	assert_int_equal(perms_at(e->cache_dir, "fmfs.log"), 0600);
	assert_int_equal(perms_at(e->cache_dir, "lock"), 0600);
	assert_int_equal(perms_at(e->cache_dir, "lost+found/1-x"), 0600);
}

static void test_dir_unusable(void **state)
{
	struct env *e = *state;
	struct cache *c2 = NULL;
	char dir[PATH_MAX + 32], msg[512];
	int fd;

	snprintf(dir, sizeof(dir), "%s/plainfile", g_tmp);
	fd = open(dir, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	strcat(dir, "/sub");
	e->cfg.dir = dir;
	assert_int_not_equal(cache_open(&e->cfg, e->st, &c2, msg,
					sizeof(msg)), 0);
	assert_contains(msg, dir);
	assert_null(c2);
}

/* cache_dir_foreign: a cache's own names pass, anything else is named;
 * cache_open refuses such a dir and changes nothing in it. */
static void test_dir_foreign(void **state)
{
	struct env *e = *state;
	static const char *const ours[] = {
		"index.sqlite", "index.sqlite-wal", "index.sqlite-shm",
		"index.sqlite.bad-1700000000", "index.sqlite.bad-1700000000-wal",
		"writeback.sqlite", "writeback.sqlite-journal",
		"writeback.sqlite.bad", "writeback.sqlite-wal.bad",
		"index.sqlite.old", "index.lock",
		"lock", "fmfs.log",
	};
	struct cache *c2 = NULL;
	char dir[PATH_MAX + 32], path[PATH_MAX * 2], other[64], msg[512];
	struct stat sb;
	int fd;

	snprintf(dir, sizeof(dir), "%s/foreign", g_tmp);
	assert_int_equal(cache_dir_foreign(dir, other, sizeof(other)), 0);
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(cache_dir_foreign(dir, other, sizeof(other)), 0);
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, ours[i]);
		fd = open(path, O_WRONLY | O_CREAT, 0600);
		assert_true(fd >= 0);
		close(fd);
	}
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir,
			 i == 0 ? "objects" : i == 1 ? "dirty" : "lost+found");
		assert_int_equal(mkdir(path, 0700), 0);
	}
	assert_int_equal(cache_dir_foreign(dir, other, sizeof(other)), 0);
	/* anything else is not ours */
	snprintf(path, sizeof(path), "%s/notes.txt", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0755);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chmod(path, 0755), 0);
	assert_int_equal(cache_dir_foreign(dir, other, sizeof(other)), 1);
	assert_string_equal(other, "notes.txt");
	e->cfg.dir = dir;
	assert_int_not_equal(cache_open(&e->cfg, e->st, &c2, msg,
					sizeof(msg)), 0);
	assert_null(c2);
	assert_contains(msg, "notes.txt");
	assert_contains(msg, "did not make");
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0755);
	assert_int_equal(stat(dir, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0755);
}

static void test_dir_in_use(void **state)
{
	struct env *e = *state;
	struct cache *c2 = NULL;
	char msg[512];

	env_open(e);
	assert_int_not_equal(cache_open(&e->cfg, e->st, &c2, msg,
					sizeof(msg)), 0);
	assert_contains(msg, "in use");
	assert_null(c2);
}

static void test_uring_fallback(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 300];
	struct obj o;
	unsigned char byte = 0;
	int fd;

	setenv("FMFS_CACHE_URING", "0", 1);
	put_obj(e, &o, "plain/x", 6 * B64K + 1, 95);
	env_open(e);
	assert_false(cache_uring_active(e->c->uring));
	read_all(e, &o);
	env_close(e);
	the_cache_file(e, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &byte, 1, 5 * B64K), 1);
	close(fd);
	env_open(e);
	read_all(e, &o);
	assert_int_equal(stats(e).crc_failures, 1);
	unsetenv("FMFS_CACHE_URING");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, env_setup, env_teardown)
		cmocka_unit_test(test_crc32c_vectors),
		cmocka_unit_test(test_crc32c_long),
		T(test_read_sizes),
		T(test_reopen_no_requests),
		T(test_crash_after_flush),
		T(test_crash_before_flush),
		T(test_crash_sigkill),
		T(test_crc_corruption),
		T(test_version_change),
		T(test_eviction_lru),
		T(test_eviction_big_object),
		T(test_eviction_stress),
		T(test_evict_key),
		T(test_warm),
		T(test_concurrent_readers),
		T(test_readahead_sequential),
		T(test_readahead_random),
		T(test_store_unreachable),
		T(test_store_removed),
		T(test_foreign_store_id),
		T(test_garbled_store_id),
		T(test_garbled_block_size),
		T(test_block_size_mismatch),
		T(test_corrupt_index),
		T(test_attrs_kept),
		T(test_listings_kept),
		T(test_w_version),
		T(test_w_adopt),
		T(test_format1_upgrade),
		T(test_dir_tightened),
		T(test_dir_foreign),
		T(test_missing_table),
		T(test_w_uploaded_row),
		T(test_w_removed_comes_back),
		T(test_dir_user_mode),
		T(test_dir_unusable),
		T(test_dir_in_use),
		T(test_uring_fallback),
#undef T
	};

	signal(SIGPIPE, SIG_IGN);
	return run_tests_in_tmp_dir("fmfs-test-cache", tests);
}
