/* SPDX-License-Identifier: MIT */
/*
 * test_ckpt.c - cmocka tests of libfmckpt against a local directory and
 * a file:// store (no server needed): round trips of many tensors of odd
 * sizes and every dtype through small staging (so commits wait for
 * chunks), corruption of shards and manifests (bit flips, truncation,
 * an unknown version, a missing shard), each detected and reported;
 * retention; several ranks in one process; a rank that never comes;
 * crashes at each named point of a commit (a forked child killed there
 * by ckpt_crash_hook); bad input; resident memory across 100 saves;
 * steps set aside (incomplete ones saved again, newer ones on resume);
 * background failures that keep their reason; and a seeded fuzz of
 * random damage to each file of a committed step (test_fuzz_damage).
 *
 * Everything runs in a private temporary directory removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "ckpt_env.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_int.h"


/* ---- data: tensors whose bytes are a function of (step, rank, i) ---- */

struct tset {
	unsigned n;
	char (*names)[64];
	enum ckpt_dtype *dt;
	unsigned *ndim;
	int64_t (*shape)[CKPT_NDIM_MAX];
	uint64_t *size;
	unsigned char **data;
};

static void fill(uint64_t step, unsigned rank, unsigned i, unsigned char *p,
		 uint64_t len)
{
	uint64_t x = step * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 40) ^
		     ((uint64_t)i << 20) ^ 0x2545F4914F6CDD1Dull;

	for (uint64_t k = 0; k < len; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[k] = (unsigned char)x;
	}
}

/* n tensors of odd sizes around avg bytes, every dtype in turn, some
 * empty, some multi-dimensional. */
static void tset_init(struct tset *t, unsigned n, uint64_t avg)
{
	t->n = n;
	t->names = calloc(n, sizeof(*t->names));
	t->dt = calloc(n, sizeof(*t->dt));
	t->ndim = calloc(n, sizeof(*t->ndim));
	t->shape = calloc(n, sizeof(*t->shape));
	t->size = calloc(n, sizeof(*t->size));
	t->data = calloc(n, sizeof(*t->data));
	assert_non_null(t->data);
	for (unsigned i = 0; i < n; i++) {
		enum ckpt_dtype dt = (enum ckpt_dtype)(i % CKPT_DTYPE_COUNT);
		size_t es = ckpt_dtype_size(dt);
		uint64_t elems = (avg / es) + (i * 7919u) % 1013u;

		if (i % 17 == 5)
			elems = 0;                 /* empty tensor */
		if (i % 29 == 3)
			elems = 1;
		t->dt[i] = dt;
		if (dt != CKPT_BYTES && i % 4 == 1 && elems >= 6) {
			t->ndim[i] = 3;
			t->shape[i][0] = 2;
			t->shape[i][1] = 3;
			t->shape[i][2] = (int64_t)(elems / 6);
			elems = (elems / 6) * 6;
		} else if (i % 9 == 8 && dt != CKPT_BYTES) {
			t->ndim[i] = 0;           /* a scalar */
			elems = 1;
		} else {
			t->ndim[i] = 1;
			t->shape[i][0] = (int64_t)elems;
		}
		t->size[i] = elems * es;
		snprintf(t->names[i], sizeof(t->names[i]), "model.layers.%u.%s",
			 i, ckpt_dtype_name(dt));
		t->data[i] = malloc(t->size[i] + 1);
		assert_non_null(t->data[i]);
	}
}

static void tset_fill(struct tset *t, uint64_t step, unsigned rank)
{
	for (unsigned i = 0; i < t->n; i++)
		fill(step, rank, i, t->data[i], t->size[i]);
}

static void tset_free(struct tset *t)
{
	for (unsigned i = 0; i < t->n; i++)
		free(t->data[i]);
	free(t->names);
	free(t->dt);
	free(t->ndim);
	free(t->shape);
	free(t->size);
	free(t->data);
}

/* ---- environment (env_setup, env_teardown: ckpt_env.h) ---- */

static struct ckpt_config cfg_of(struct env *e, bool dir, bool remote)
{
	struct ckpt_config cfg;

	ckpt_config_init(&cfg);
	cfg.dir = dir ? e->dir : NULL;
	cfg.remote = remote ? e->url : NULL;
	cfg.rank = 0;
	cfg.world_size = 1;
	cfg.staging_bytes = 16 * MIB;
	cfg.barrier_timeout_ms = 20000;
	return cfg;
}

static struct ckpt *open_cfg(struct env *e, const struct ckpt_config *cfg)
{
	struct ckpt *c = NULL;

	assert_ok(ckpt_open(cfg, &c, e->msg, sizeof(e->msg)), e->msg);
	return c;
}

static void save(struct env *e, struct ckpt *c, struct tset *t,
		 uint64_t step, unsigned rank)
{
	tset_fill(t, step, rank);
	assert_ok(ckpt_begin(c, step, e->msg, sizeof(e->msg)), e->msg);
	for (unsigned i = 0; i < t->n; i++)
		assert_ok(ckpt_add(c, t->names[i], t->dt[i], t->ndim[i],
				   t->shape[i], t->data[i], t->size[i], 0,
				   e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_commit(c, e->msg, sizeof(e->msg)), e->msg);
	/* The caller may change its tensors once commit returned. */
	for (unsigned i = 0; i < t->n; i++)
		memset(t->data[i], 0xee, t->size[i]);
}

static void wait_ok(struct env *e, struct ckpt *c, uint64_t step,
		    enum ckpt_level lvl)
{
	assert_ok(ckpt_wait(c, step, lvl, 30000, e->msg, sizeof(e->msg)),
		  e->msg);
}

/* Loads into fresh buffers and compares with (step, rank). */
static int load_check(struct env *e, struct ckpt *c, struct tset *t,
		      uint64_t want_step, unsigned rank, uint64_t *got)
{
	struct ckpt_buf *b = calloc(t->n, sizeof(*b));
	unsigned char *ref;
	uint64_t loaded = 0;
	int rc;

	assert_non_null(b);
	for (unsigned i = 0; i < t->n; i++) {
		b[i].name = t->names[i];
		b[i].size_bytes = t->size[i];
		b[i].data = malloc(t->size[i] + 1);
		assert_non_null(b[i].data);
	}
	rc = ckpt_load(c, want_step, b, t->n, &loaded, e->msg, sizeof(e->msg));
	for (unsigned i = 0; !rc && i < t->n; i++) {
		ref = malloc(t->size[i] + 1);
		fill(loaded, rank, i, ref, t->size[i]);
		if (memcmp(ref, b[i].data, t->size[i]))
			fail_msg("tensor %s of step %llu differs", t->names[i],
				 (unsigned long long)loaded);
		free(ref);
	}
	for (unsigned i = 0; i < t->n; i++)
		free(b[i].data);
	free(b);
	if (got)
		*got = loaded;
	return rc;
}

static void step_path(struct env *e, uint64_t step, const char *name,
		      char *buf, size_t len)
{
	snprintf(buf, len, "%s/step-%010llu/%s", e->dir,
		 (unsigned long long)step, name);
}

static off_t file_size(const char *path)
{
	struct stat sb;

	assert_int_equal(stat(path, &sb), 0);
	return sb.st_size;
}

static bool exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

/* ---- tests ---- */

static void test_crc_combine(void **state)
{
	unsigned char buf[5000];

	(void)state;
	fill(1, 2, 3, buf, sizeof(buf));
	assert_int_equal(util_crc32c(0, "123456789", 9), 0xE3069283);
	for (size_t cut = 0; cut <= sizeof(buf); cut += 331) {
		uint32_t a = util_crc32c(0, buf, cut);
		uint32_t b = util_crc32c(0, buf + cut, sizeof(buf) - cut);

		assert_int_equal(util_crc32c_combine(a, b, sizeof(buf) - cut),
				 util_crc32c(0, buf, sizeof(buf)));
	}
}

static void test_roundtrip(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	struct ckpt_reader *r;
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;
	uint64_t got;

	/* 150 tensors of ~6 KiB, plus staging of 4 chunks of 64 KiB: the
	 * step (~1 MiB) streams through staging several times over. */
	tset_init(&t, 150, 6 * KIB);
	cfg.chunk_bytes = 64 * KIB;
	cfg.staging_bytes = 256 * KIB;
	c = open_cfg(e, &cfg);
	for (uint64_t s = 10; s <= 30; s += 10) {
		save(e, c, &t, s, 0);
		wait_ok(e, c, s, CKPT_LOCAL);
	}
	ckpt_get_stats(c, &st);
	assert_true(st.staging_waits > 0);
	assert_true(st.staging_peak_bytes <= 256 * KIB);
	assert_int_equal(st.last_local_step, 30);
	assert_int_equal(st.commits, 3);
	assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, 0, &got), e->msg);
	assert_int_equal(got, 30);
	assert_ok(load_check(e, c, &t, 20, 0, &got), e->msg);
	assert_int_equal(got, 20);
	/* The reader tells names, dtypes and shapes as they were given. */
	assert_ok(ckpt_reader_open(c, 10, &r, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_reader_count(r), t.n);
	for (unsigned i = 0; i < t.n; i++) {
		const struct ckpt_tensor_info *ti =
			ckpt_reader_find(r, 0, t.names[i]);

		assert_non_null(ti);
		assert_int_equal(ti->dtype, t.dt[i]);
		assert_int_equal(ti->ndim, t.ndim[i]);
		assert_int_equal(ti->size_bytes, t.size[i]);
		for (unsigned d = 0; d < t.ndim[i]; d++)
			assert_int_equal(ti->shape[d], t.shape[i][d]);
	}
	assert_ok(ckpt_reader_verify(r, e->msg, sizeof(e->msg)), e->msg);
	ckpt_reader_close(r);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	tset_free(&t);
}

/* ckpt_prepare: staging before the first save, once; refused on a
 * read-only handle; too much staging is -ENOMEM saying what to lower. */
static void test_prepare(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;
	uint64_t got;

	tset_init(&t, 20, 6 * KIB);
	cfg.chunk_bytes = 64 * KIB;
	cfg.staging_bytes = 256 * KIB;
	c = open_cfg(e, &cfg);
	assert_ok(ckpt_prepare(c, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_prepare(c, e->msg, sizeof(e->msg)), e->msg);
	save(e, c, &t, 5, 0);
	wait_ok(e, c, 5, CKPT_LOCAL);
	ckpt_get_stats(c, &st);
	assert_true(st.staging_peak_bytes <= 256 * KIB);
	assert_ok(load_check(e, c, &t, 5, 0, &got), e->msg);
	assert_int_equal(got, 5);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);

	cfg.read_only = true;
	c = open_cfg(e, &cfg);
	assert_int_equal(ckpt_prepare(c, e->msg, sizeof(e->msg)), -EROFS);
	assert_contains(e->msg, "read-only");
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);

	cfg.read_only = false;
	cfg.staging_bytes = 1ull << 50;
	c = open_cfg(e, &cfg);
	assert_int_equal(ckpt_prepare(c, e->msg, sizeof(e->msg)), -ENOMEM);
	assert_contains(e->msg, "lower staging_bytes");
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	tset_free(&t);
}

static void test_remote_roundtrip(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, true);
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;
	char path[PATH_MAX + 64];
	uint64_t got;

	/* Bigger than one 5 MiB part, so the upload is multipart. */
	tset_init(&t, 40, 300 * KIB);
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	save(e, c, &t, 2, 0);
	wait_ok(e, c, 2, CKPT_DURABLE);
	wait_ok(e, c, 1, CKPT_REMOTE);
	ckpt_get_stats(c, &st);
	assert_int_equal(st.last_remote_step, 2);
	assert_true(st.bytes_uploaded > 2 * 8 * MIB);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	snprintf(path, sizeof(path), "%s/step-0000000002/manifest", e->store);
	assert_true(exists(path));
	snprintf(path, sizeof(path), "%s/step-0000000002/shard-00000.bin",
		 e->store);
	assert_true(file_size(path) > 8 * (off_t)MIB);

	/* The local copy is gone: load from the store. */
	rm_rf(e->dir);
	c = open_cfg(e, &cfg);
	assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, 0, &got), e->msg);
	assert_int_equal(got, 2);
	ckpt_close(c, NULL, 0);

	/* A store alone: shards go up straight from staging memory. */
	cfg = cfg_of(e, false, true);
	c = open_cfg(e, &cfg);
	save(e, c, &t, 3, 0);
	wait_ok(e, c, 3, CKPT_REMOTE);
	assert_int_equal(ckpt_wait(c, 3, CKPT_LOCAL, 1000, e->msg,
				   sizeof(e->msg)), -EINVAL);
	assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, 0, &got), e->msg);
	assert_int_equal(got, 3);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	tset_free(&t);
}

/* Two good steps; the caller breaks step 2 and checks what it sees. */
static struct ckpt *two_steps(struct env *e, struct tset *t)
{
	struct ckpt_config cfg = cfg_of(e, true, false);
	struct ckpt *c;

	tset_init(t, 12, 2 * KIB);
	c = open_cfg(e, &cfg);
	save(e, c, t, 1, 0);
	save(e, c, t, 2, 0);
	wait_ok(e, c, 2, CKPT_LOCAL);
	return c;
}

static void expect_bad_step2(struct env *e, struct ckpt *c, struct tset *t,
			     int want, const char *why)
{
	struct ckpt_reader *r;
	uint64_t got = 0;
	int rc;

	rc = ckpt_reader_open(c, 2, &r, e->msg, sizeof(e->msg));
	if (!rc) {
		rc = ckpt_reader_verify(r, e->msg, sizeof(e->msg));
		ckpt_reader_close(r);
	}
	assert_int_equal(rc, want);
	assert_contains(e->msg, why);
	/* Asked for step 2 exactly: an error, never bad data. */
	assert_int_equal(load_check(e, c, t, 2, 0, NULL), want);
	/* The newest: step 2 is skipped, said so, and step 1 loads. */
	assert_ok(load_check(e, c, t, CKPT_STEP_LATEST, 0, &got), e->msg);
	assert_int_equal(got, 1);
	assert_contains(e->msg, "skipped step 2");
}

/* ckpt_list says what is wrong with step 2, naming the file that is:
 * a shard is not "an unreadable manifest". */
static void expect_listed_bad(struct env *e, struct ckpt *c, int want,
			      const char *file)
{
	struct ckpt_step_info *v;
	size_t n;

	assert_ok(ckpt_list(c, &v, &n, NULL, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 2);
	assert_int_equal(v[0].step, 2);
	assert_int_equal(v[0].error, want);
	assert_contains(v[0].why, file);
	assert_int_equal(v[1].error, 0);
	assert_string_equal(v[1].why, "");
	free(v);
}

static void test_corrupt_shard_data(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	step_path(e, 2, "shard-00000.bin", path, sizeof(path));
	flip_bit(path, 4096 + 100, 3);   /* inside the first tensor */
	expect_bad_step2(e, c, &t, -EBADMSG, "checksum mismatch");
	assert_contains(e->msg, "model.layers.0");
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_corrupt_shard_header(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	step_path(e, 2, "shard-00000.bin", path, sizeof(path));
	flip_bit(path, 20, 0);           /* the step number */
	expect_bad_step2(e, c, &t, -EBADMSG, "shard header checksum");
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_corrupt_shard_padding(void **state)
{
	struct env *e = *state;
	struct ckpt_reader *r;
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	const struct ckpt_tensor_info *ti = NULL;
	off_t pad = 0;

	/* Padding after a tensor belongs to no tensor: only the whole-file
	 * checksum can see a flipped bit there. */
	assert_ok(ckpt_reader_open(c, 2, &r, e->msg, sizeof(e->msg)), e->msg);
	for (size_t i = 0; i < ckpt_reader_count(r) && !pad; i++) {
		ti = ckpt_reader_tensor(r, i);
		if (ti->size_bytes % 64 && i + 1 < ckpt_reader_count(r))
			pad = (off_t)(ti->offset + ti->size_bytes);
	}
	ckpt_reader_close(r);
	assert_true(pad > 0);
	step_path(e, 2, "shard-00000.bin", path, sizeof(path));
	flip_bit(path, pad, 1);
	/* Loading is not fooled either way: every tensor is intact. */
	assert_ok(load_check(e, c, &t, 2, 0, NULL), e->msg);
	assert_ok(ckpt_reader_open(c, 2, &r, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_reader_verify(r, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, "file checksum mismatch");
	ckpt_reader_close(r);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_truncated_shard(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	step_path(e, 2, "shard-00000.bin", path, sizeof(path));
	assert_int_equal(truncate(path, file_size(path) - 1000), 0);
	expect_bad_step2(e, c, &t, -EBADMSG, "but the manifest says");
	expect_listed_bad(e, c, -EBADMSG, path);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_missing_shard(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	step_path(e, 2, "shard-00000.bin", path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	expect_bad_step2(e, c, &t, -ENOENT, "shard 0 of 1 is missing");
	expect_listed_bad(e, c, -ENOENT, path);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_corrupt_manifest(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64], copy[PATH_MAX + 80], cmd[3 * PATH_MAX];
	struct tset t;
	struct ckpt *c = two_steps(e, &t);
	off_t size, offs[8];

	step_path(e, 2, "manifest", path, sizeof(path));
	snprintf(copy, sizeof(copy), "%s.orig", path);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", path, copy);
	assert_int_equal(system(cmd), 0);
	size = file_size(path);
	/* Magic, version, counts, header CRC, a shard entry, a tensor
	 * record, a name, the trailer CRC. */
	offs[0] = 2;
	offs[1] = 9;
	offs[2] = 33;
	offs[3] = 61;
	offs[4] = 64 + 25;
	offs[5] = 64 + 64 + 17;
	offs[6] = size - 16 - 20;
	offs[7] = size - 15;
	for (int i = 0; i < 8; i++) {
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", copy, path);
		assert_int_equal(system(cmd), 0);
		flip_bit(path, offs[i], (unsigned)i % 8);
		expect_bad_step2(e, c, &t, -EBADMSG, "manifest");
		expect_listed_bad(e, c, -EBADMSG, path);
	}
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", copy, path);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(truncate(path, size - 7), 0);
	expect_bad_step2(e, c, &t, -EBADMSG, "truncated");
	assert_int_equal(truncate(path, 10), 0);
	expect_bad_step2(e, c, &t, -EBADMSG, "truncated");
	unlink(copy);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_unknown_version(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	unsigned char *buf;
	size_t len;
	struct tset t;
	struct ckpt *c = two_steps(e, &t);

	/* What a future fmckpt would write: version 3, checksums right. */
	step_path(e, 2, "manifest", path, sizeof(path));
	assert_ok(ckpt_read_whole(path, 1 << 20, &buf, &len, e->msg,
				  sizeof(e->msg)), e->msg);
	util_put32le(buf + 8, 3);
	util_put32le(buf + 60, util_crc32c(0, buf, 60));
	util_put32le(buf + len - 16, util_crc32c(0, buf, len - 16));
	{
		int fd = open(path, O_WRONLY | O_TRUNC);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
		close(fd);
	}
	free(buf);
	expect_bad_step2(e, c, &t, -EPROTONOSUPPORT, "version 3");
	assert_contains(e->msg, "skipped step 2");
	{
		struct ckpt_reader *r;

		assert_int_equal(ckpt_reader_open(c, 2, &r, e->msg,
						  sizeof(e->msg)),
				 -EPROTONOSUPPORT);
		assert_contains(e->msg, "reads versions 1 to 2");
		assert_contains(e->msg, "upgrade");
	}
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_retention(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, true);
	struct ckpt_step_info *v;
	struct tset t;
	struct ckpt *c;
	char path[PATH_MAX + 64];
	size_t n, inc;

	tset_init(&t, 5, 1 * KIB);
	cfg.keep_local = 2;
	cfg.keep_remote = 3;
	c = open_cfg(e, &cfg);
	for (uint64_t s = 1; s <= 6; s++) {
		save(e, c, &t, s, 0);
		wait_ok(e, c, s, CKPT_DURABLE);
		wait_ok(e, c, s, CKPT_LOCAL);
	}
	/* A leftover of a crashed attempt at an older step goes too. */
	snprintf(path, sizeof(path), "%s/.tmp-step-0000000003", e->dir);
	assert_int_equal(mkdir(path, 0755), 0);
	save(e, c, &t, 7, 0);
	wait_ok(e, c, 7, CKPT_DURABLE);
	wait_ok(e, c, 7, CKPT_LOCAL);
	assert_false(exists(path));
	assert_ok(ckpt_list(c, &v, &n, &inc, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 3);
	assert_int_equal(inc, 0);
	assert_int_equal(v[0].step, 7);
	assert_true(v[0].local && v[0].remote);
	assert_true(v[1].local && v[1].remote);
	assert_true(!v[2].local && v[2].remote && v[2].step == 5);
	assert_int_equal(v[0].world_size, 1);
	assert_int_equal(v[0].ntensors, 5);
	free(v);
	snprintf(path, sizeof(path), "%s/step-0000000004", e->store);
	assert_false(exists(path));
	/* prune: keep the newest one everywhere. */
	assert_ok(ckpt_prune(c, 1, &n, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 3);
	assert_ok(ckpt_list(c, &v, &n, &inc, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 1);
	assert_int_equal(v[0].step, 7);
	free(v);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_bad_inputs(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, false, false);
	int64_t shape[9] = { 4, 4, 1, 1, 1, 1, 1, 1, 1 };
	char buf[64], big[300], file[PATH_MAX + 8];
	struct ckpt_buf b = { 0 };
	struct ckpt *c;

	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "no checkpoint location");
	cfg.remote = "http://example.com/x";
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "s3://");
	/* A wrong path to read from. */
	cfg = cfg_of(e, true, false);
	cfg.read_only = true;
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -ENOENT);
	assert_contains(e->msg, "wrong path");
	snprintf(file, sizeof(file), "%s.file", e->dir);
	close(open(file, O_CREAT | O_WRONLY, 0644));
	cfg.dir = file;
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -ENOTDIR);
	cfg.read_only = false;
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -ENOTDIR);
	assert_contains(e->msg, "not a directory");
	unlink(file);
	/* Rank and world size from the environment. */
	cfg = cfg_of(e, true, false);
	cfg.rank = cfg.world_size = -1;
	setenv("RANK", "x1", 1);
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "RANK='x1'");
	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "2", 1);
	assert_int_equal(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), -EINVAL);
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");

	cfg = cfg_of(e, true, false);
	c = open_cfg(e, &cfg);
	assert_int_equal(ckpt_load(c, CKPT_STEP_LATEST, NULL, 0, NULL, e->msg,
				   sizeof(e->msg)), -ENOENT);
	assert_contains(e->msg, "no complete checkpoint");
	assert_int_equal(ckpt_add(c, "a", CKPT_F32, 1, shape, buf, 16, 0,
				  e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "ckpt_begin");
	assert_int_equal(ckpt_commit(c, e->msg, sizeof(e->msg)), -EINVAL);
	assert_ok(ckpt_begin(c, 5, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_begin(c, 6, e->msg, sizeof(e->msg)), -EBUSY);
	/* Size, shape, dtype, name, flags. */
	assert_int_equal(ckpt_add(c, "w", CKPT_F32, 2, shape, buf, 60, 0,
				  e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "wrong buffer size");
	assert_contains(e->msg, "64 bytes");
	assert_int_equal(ckpt_add(c, "w", (enum ckpt_dtype)99, 1, shape, buf,
				  4, 0, e->msg, sizeof(e->msg)), -EINVAL);
	assert_int_equal(ckpt_add(c, "w", CKPT_U8, 9, shape, buf, 16, 0,
				  e->msg, sizeof(e->msg)), -EINVAL);
	assert_int_equal(ckpt_add(c, "", CKPT_U8, 1, shape, buf, 4, 0,
				  e->msg, sizeof(e->msg)), -EINVAL);
	memset(big, 'n', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(ckpt_add(c, big, CKPT_U8, 1, shape, buf, 4, 0,
				  e->msg, sizeof(e->msg)), -EINVAL);
	/* Without CUDA (or without a GPU): refused, saying why. */
	assert_int_equal(ckpt_add(c, "d", CKPT_U8, 1, shape, buf, 4,
				  CKPT_ADD_DEVICE, e->msg, sizeof(e->msg)),
			 -ENOTSUP);
	assert_contains(e->msg, "device memory");
	assert_ok(ckpt_add(c, "w", CKPT_U8, 1, shape, buf, 4, 0, e->msg,
			   sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_add(c, "w", CKPT_U8, 1, shape, buf, 4, 0,
				  e->msg, sizeof(e->msg)), -EEXIST);
	assert_contains(e->msg, "already added");
	assert_ok(ckpt_commit(c, e->msg, sizeof(e->msg)), e->msg);
	wait_ok(e, c, 5, CKPT_LOCAL);
	assert_int_equal(ckpt_begin(c, 5, e->msg, sizeof(e->msg)), -EEXIST);
	assert_contains(e->msg, "already committed");
	assert_int_equal(ckpt_wait(c, 99, CKPT_LOCAL, 100, e->msg,
				   sizeof(e->msg)), -ENOENT);
	assert_int_equal(ckpt_wait(c, 5, CKPT_REMOTE, 100, e->msg,
				   sizeof(e->msg)), -EINVAL);
	/* Loading: wrong buffer size, a name not there, a step not there. */
	b.name = "w";
	b.data = buf;
	b.size_bytes = 5;
	assert_int_equal(ckpt_load(c, 5, &b, 1, NULL, e->msg, sizeof(e->msg)),
			 -EINVAL);
	assert_contains(e->msg, "wrong buffer size for tensor 'w'");
	assert_contains(e->msg, "4 bytes");
	assert_int_equal(ckpt_load(c, CKPT_STEP_LATEST, &b, 1, NULL, e->msg,
				   sizeof(e->msg)), -EINVAL);
	b.name = "nope";
	b.size_bytes = 4;
	assert_int_equal(ckpt_load(c, 5, &b, 1, NULL, e->msg, sizeof(e->msg)),
			 -ENOENT);
	assert_contains(e->msg, "'nope' is not in step 5");
	assert_int_equal(ckpt_load(c, 6, &b, 1, NULL, e->msg, sizeof(e->msg)),
			 -ENOENT);
	assert_contains(e->msg, "step 6 is not a complete checkpoint");
	ckpt_close(c, NULL, 0);
	/* A job of another world size. */
	cfg.world_size = 2;
	cfg.rank = 0;
	cfg.read_only = true;
	c = open_cfg(e, &cfg);
	b.name = "w";
	/* One rank saved it: it loads into any world size (test_reshard
	 * has the tensors that cannot). */
	assert_ok(ckpt_load(c, 5, &b, 1, NULL, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(ckpt_begin(c, 7, e->msg, sizeof(e->msg)), -EINVAL);
	ckpt_close(c, NULL, 0);
}

struct rank_arg {
	struct env *e;
	struct ckpt_config cfg;
	unsigned rank;
	int rc;
	char msg[1024];
};

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct ckpt *c;
	struct tset t;

	tset_init(&t, 7 + a->rank, 40 * KIB * (a->rank + 1));
	a->rc = ckpt_open(&a->cfg, &c, a->msg, sizeof(a->msg));
	for (uint64_t s = 100; !a->rc && s <= 300; s += 100) {
		tset_fill(&t, s, a->rank);
		a->rc = ckpt_begin(c, s, a->msg, sizeof(a->msg));
		for (unsigned i = 0; !a->rc && i < t.n; i++)
			a->rc = ckpt_add(c, t.names[i], t.dt[i], t.ndim[i],
					 t.shape[i], t.data[i], t.size[i], 0,
					 a->msg, sizeof(a->msg));
		if (!a->rc)
			a->rc = ckpt_commit(c, a->msg, sizeof(a->msg));
	}
	if (!a->rc)
		a->rc = ckpt_wait(c, 300, CKPT_LOCAL, 30000, a->msg,
				  sizeof(a->msg));
	if (!a->rc)
		a->rc = ckpt_wait(c, 300, CKPT_REMOTE, 30000, a->msg,
				  sizeof(a->msg));
	if (!a->rc)
		a->rc = ckpt_close(c, a->msg, sizeof(a->msg));
	tset_free(&t);
	return NULL;
}

static void test_ranks(void **state)
{
	struct env *e = *state;
	struct rank_arg a[3];
	pthread_t th[3];
	struct ckpt_reader *r;
	struct ckpt *c;

	for (unsigned k = 0; k < 3; k++) {
		a[k].e = e;
		a[k].cfg = cfg_of(e, true, true);
		a[k].cfg.rank = (int)k;
		a[k].cfg.world_size = 3;
		a[k].rank = k;
		assert_int_equal(pthread_create(&th[k], NULL, rank_main, &a[k]),
				 0);
	}
	for (unsigned k = 0; k < 3; k++) {
		pthread_join(th[k], NULL);
		assert_ok(a[k].rc, a[k].msg);
	}
	for (unsigned k = 0; k < 3; k++) {
		struct tset t;
		struct ckpt_config cfg = cfg_of(e, true, true);

		cfg.rank = (int)k;
		cfg.world_size = 3;
		cfg.read_only = true;
		c = open_cfg(e, &cfg);
		tset_init(&t, 7 + k, 40 * KIB * (k + 1));
		assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, k, NULL),
			  e->msg);
		assert_ok(load_check(e, c, &t, 200, k, NULL), e->msg);
		tset_free(&t);
		if (k == 2) {
			assert_ok(ckpt_reader_open_from(c, 300,
				  CKPT_FROM_REMOTE, &r, e->msg,
				  sizeof(e->msg)), e->msg);
			assert_int_equal(ckpt_reader_world_size(r), 3);
			assert_int_equal(ckpt_reader_count(r), 7 + 8 + 9);
			assert_non_null(ckpt_reader_find(r, 1,
							 "model.layers.7.i8"));
			assert_null(ckpt_reader_find(r, 0,
						     "model.layers.7.i8"));
			assert_ok(ckpt_reader_verify(r, e->msg,
						     sizeof(e->msg)), e->msg);
			ckpt_reader_close(r);
		}
		ckpt_close(c, NULL, 0);
	}
}

static void test_rank_missing(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	char path[PATH_MAX + 64];
	struct tset t;
	struct ckpt *c;
	int rc;

	tset_init(&t, 3, 1 * KIB);
	cfg.world_size = 2;
	cfg.barrier_timeout_ms = 300;
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	rc = ckpt_wait(c, 1, CKPT_LOCAL, 0, e->msg, sizeof(e->msg));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_contains(e->msg, "rank(s) 1");
	assert_contains(e->msg, "are all 2 ranks running");
	step_path(e, 1, "manifest", path, sizeof(path));
	assert_false(exists(path));
	/* A failed step may be tried again. */
	assert_ok(ckpt_begin(c, 1, e->msg, sizeof(e->msg)), e->msg);
	ckpt_abort(c);
	/* Reported once by ckpt_wait: close does not repeat it. */
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	/* A marker of another run does not count either. */
	cfg.run_id = "run-a";
	c = open_cfg(e, &cfg);
	save(e, c, &t, 2, 0);
	cfg.run_id = "run-b";
	cfg.rank = 1;
	{
		struct ckpt *c1 = open_cfg(e, &cfg);

		save(e, c1, &t, 2, 1);
		/* Rank 1's shard is durable; rank 0 never commits. */
		assert_int_equal(ckpt_wait(c1, 2, CKPT_LOCAL, 0, e->msg,
					   sizeof(e->msg)), -ETIMEDOUT);
		assert_contains(e->msg, "rank 0 has not committed");
		ckpt_close(c1, NULL, 0);
	}
	assert_int_equal(ckpt_wait(c, 2, CKPT_LOCAL, 0, e->msg,
				   sizeof(e->msg)), -ETIMEDOUT);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* The crash point the child of crash_at() dies at (ckpt_crash_hook). */
static const char *g_crash_point;
static uint64_t g_crash_step;

static void crash_hook(const char *point, uint64_t step)
{
	if (!strcmp(point, g_crash_point) && step == g_crash_step)
		raise(SIGKILL);
}

/* A child saves steps 1..3 with a crash hook for point at step 3 and is
 * killed there; the parent must then load want (2 or 3), whole. */
static void crash_at(struct env *e, const char *point, bool remote_only,
		     uint64_t want)
{
	struct ckpt_config cfg = cfg_of(e, !remote_only, true);
	struct tset t;
	struct ckpt *c;
	uint64_t got = 0;
	int status;
	pid_t pid;

	rm_rf(e->dir);
	rm_rf(e->store);
	mkdir(e->store, 0755);
	tset_init(&t, 9, 700 * KIB);  /* > 5 MiB: a multipart upload */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		g_crash_point = point;
		g_crash_step = 3;
		ckpt_crash_hook = crash_hook;
		c = open_cfg(e, &cfg);
		for (uint64_t s = 1; s <= 3; s++) {
			save(e, c, &t, s, 0);
			ckpt_wait(c, s, CKPT_DURABLE, 0, NULL, 0);
			if (!remote_only)
				ckpt_wait(c, s, CKPT_LOCAL, 0, NULL, 0);
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("child for %s was not killed at the point", point);
	if (remote_only)
		cfg.dir = NULL;
	else
		cfg.remote = NULL;
	cfg.read_only = true;
	c = open_cfg(e, &cfg);
	assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, 0, &got), e->msg);
	if (got != want)
		fail_msg("crash at %s: loaded step %llu, want %llu", point,
			 (unsigned long long)got, (unsigned long long)want);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

static void test_crash_points(void **state)
{
	struct env *e = *state;

	crash_at(e, "shard-synced", false, 2);
	crash_at(e, "marker-written", false, 2);
	crash_at(e, "manifest-written", false, 2);
	crash_at(e, "renamed", false, 3);
	crash_at(e, "remote-shard", true, 2);
	crash_at(e, "remote-marker", true, 2);
	crash_at(e, "remote-manifest", true, 3);
}

static void test_rss_stable(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, true);
	long rss10 = 0, rss100;
	struct tset t;
	struct ckpt *c;

	tset_init(&t, 20, 100 * KIB);  /* ~2 MiB a step */
	cfg.staging_bytes = 8 * MIB;
	cfg.keep_local = 2;
	cfg.keep_remote = 2;
	c = open_cfg(e, &cfg);
	for (uint64_t s = 1; s <= 100; s++) {
		save(e, c, &t, s, 0);
		wait_ok(e, c, s, CKPT_DURABLE);
		if (s == 10)
			rss10 = rss_kib();
	}
	rss100 = rss_kib();
	/* Staging is reused: no growth beyond allocator noise.  Under
	 * AddressSanitizer freed memory sits in its quarantine (256 MiB by
	 * default) before reuse, so RSS creeps up there whatever we do. */
	if (rss100 - rss10 > (HAVE_SANITIZERS ? 65536 : 2048))
		fail_msg("VmRSS grew from %ld kB to %ld kB over 90 saves",
			 rss10, rss100);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	tset_free(&t);
}

static void test_restore(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, false, true);
	char dst[PATH_MAX + 16];
	struct ckpt_reader *r;
	struct tset t;
	struct ckpt *c;
	uint64_t got;

	tset_init(&t, 6, 3 * KIB);
	c = open_cfg(e, &cfg);
	save(e, c, &t, 42, 0);
	wait_ok(e, c, 42, CKPT_REMOTE);
	assert_ok(ckpt_reader_open(c, 42, &r, e->msg, sizeof(e->msg)), e->msg);
	assert_true(ckpt_reader_is_remote(r));
	snprintf(dst, sizeof(dst), "%s/restored", e->dir);
	assert_ok(ckpt_reader_restore(r, dst, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_reader_restore(r, dst, e->msg, sizeof(e->msg)),
			 -EEXIST);
	ckpt_reader_close(r);
	ckpt_close(c, NULL, 0);
	cfg.dir = dst;
	cfg.remote = NULL;
	cfg.read_only = true;
	c = open_cfg(e, &cfg);
	assert_ok(load_check(e, c, &t, CKPT_STEP_LATEST, 0, &got), e->msg);
	assert_int_equal(got, 42);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* A device copy that fails during ckpt_commit (no GPU here: the CUDA
 * state is faked, so cudaMemcpyAsync, or the stub without CUDA, fails).
 * The step must fail with the copy's own message even when commit was
 * given no message buffer, and this rank must not leave the "shard done"
 * marker that would let rank 0 commit the garbage in its staging. */
static void test_device_copy_error(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	static unsigned char host[4096];
	int64_t shape[1] = { 4096 };
	long fake_cuda[16] = { 0 };   /* stands for cuda.c's state */
	char path[PATH_MAX + 64];
	struct ckpt_stats st;
	struct ckpt *c;
	int rc;

	cfg.world_size = 2;
	cfg.rank = 1;
	c = open_cfg(e, &cfg);
	if (c->cuda) {
		/* A real GPU: a failing copy cannot be faked this way. */
		ckpt_close(c, NULL, 0);
		skip();
	}
	c->cuda = fake_cuda;
	assert_ok(ckpt_begin(c, 1, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_add(c, "h", CKPT_U8, 1, shape, host, sizeof(host), 0,
			   e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_add(c, "d", CKPT_U8, 1, shape,
			   (const void *)(uintptr_t)4096, 4096,
			   CKPT_ADD_DEVICE, e->msg, sizeof(e->msg)), e->msg);
	rc = ckpt_commit(c, NULL, 0);
	assert_true(rc < 0);
	assert_int_equal(ckpt_wait(c, 1, CKPT_LOCAL, 10000, e->msg,
				   sizeof(e->msg)), rc);
	assert_contains(e->msg, "copying into staging failed");
	assert_contains(e->msg, HAVE_CUDA ? "cudaMemcpyAsync" :
			"without CUDA");
	if (strstr(e->msg, "(null)"))
		fail_msg("the cause was lost: %s", e->msg);
	snprintf(path, sizeof(path), "%s/.tmp-step-0000000001/"
		 "rank-00001.done", e->dir);
	assert_false(exists(path));
	ckpt_get_stats(c, &st);
	assert_int_equal(st.steps_failed, 1);
	c->cuda = NULL;
	ckpt_close(c, NULL, 0);
}

/* The remote commit of step 2 must wait for step 1's, however their
 * uploads finish: retention after step 2 removes what is left of older
 * incomplete steps (another rank's shard and marker of step 1, say),
 * and ckpt_wait and last_remote_step promise order.  Step 1's upload is
 * held up by a FIFO where its manifest would be: the HEAD that refuses
 * to overwrite a committed step blocks opening it until we open the
 * other end. */
static void test_remote_commits_in_order(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, false, true);
	char fifo[PATH_MAX + 64], fdpath[64];
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;
	int rfd, wfd, rc;

	snprintf(fifo, sizeof(fifo), "%s/step-0000000001", e->store);
	assert_int_equal(mkdir(fifo, 0755), 0);
	strcat(fifo, "/manifest");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	rfd = open(fifo, O_RDONLY | O_NONBLOCK);  /* not a writer */
	assert_true(rfd >= 0);
	tset_init(&t, 3, 1 * KIB);
	cfg.upload_parallel = 4;
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	save(e, c, &t, 2, 0);
	rc = ckpt_wait(c, 2, CKPT_REMOTE, 1500, e->msg, sizeof(e->msg));
	/* Let step 1 go on before judging, so no thread stays stuck. */
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", rfd);
	wfd = open(fdpath, O_WRONLY);
	assert_true(wfd >= 0);
	if (rc != -ETIMEDOUT)
		fail_msg("step 2 was committed remotely (%d: %s) while step "
			 "1's upload had not started", rc, e->msg);
	wait_ok(e, c, 1, CKPT_REMOTE);
	wait_ok(e, c, 2, CKPT_REMOTE);
	ckpt_get_stats(c, &st);
	assert_int_equal(st.last_remote_step, 2);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	close(wfd);
	close(rfd);
	tset_free(&t);
}

/* Rank 0 of 1001 ranks, the others' markers put in the store by hand:
 * the remote barrier must see every one of them, not the first page of
 * 1000 keys of a listing. */
static void test_remote_barrier_many_ranks(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, false, true);
	char path[PATH_MAX + 64];
	struct ckpt_manifest mf;
	unsigned char *buf;
	size_t len;
	struct tset t;
	struct ckpt *c;

	snprintf(path, sizeof(path), "%s/step-0000000001", e->store);
	assert_int_equal(mkdir(path, 0755), 0);
	for (uint32_t r = 1; r <= 1000; r++) {
		struct ckpt_mf_shard sh = {
			.rank = r, .file_bytes = CKPT_SHARD_HEADER_BYTES,
		};
		struct ckpt_manifest m = {
			.kind = CKPT_MF_KIND_RANK, .step = 1,
			.world_size = 1001, .shards = &sh, .nshards = 1,
		};
		int fd;

		assert_ok(ckpt_mf_encode(&m, &buf, &len), "encode");
		snprintf(path, sizeof(path), "%s/step-0000000001/"
			 "rank-%05u.done", e->store, r);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
		close(fd);
		free(buf);
	}
	tset_init(&t, 2, 1 * KIB);
	cfg.world_size = 1001;
	cfg.barrier_timeout_ms = 5000;
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	wait_ok(e, c, 1, CKPT_REMOTE);
	assert_ok(ckpt_close(c, e->msg, sizeof(e->msg)), e->msg);
	snprintf(path, sizeof(path), "%s/step-0000000001/manifest", e->store);
	assert_ok(ckpt_read_whole(path, 1 << 20, &buf, &len, e->msg,
				  sizeof(e->msg)), e->msg);
	assert_ok(ckpt_mf_decode(buf, len, path, &mf, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(mf.nshards, 1001);
	ckpt_mf_release(&mf);
	free(buf);
	tset_free(&t);
}

/* A step that fails remotely (its manifest is there already) must keep
 * the first, clear error in the stats and the status file `fmckpt
 * status` shows, not have it replaced by a bare strerror when the
 * committer later finishes the step. */
static void test_remote_error_kept(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, false, true);
	char path[PATH_MAX + 64];
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;

	snprintf(path, sizeof(path), "%s/step-0000000001", e->store);
	assert_int_equal(mkdir(path, 0755), 0);
	strcat(path, "/manifest");
	close(open(path, O_CREAT | O_WRONLY, 0644));
	tset_init(&t, 2, 1 * KIB);
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	assert_int_equal(ckpt_wait(c, 1, CKPT_REMOTE, 10000, e->msg,
				   sizeof(e->msg)), -EEXIST);
	assert_contains(e->msg, "already committed");
	ckpt_get_stats(c, &st);
	assert_int_equal(st.steps_failed, 1);
	assert_contains(st.last_error, "already committed");
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* Rank 1's marker is there but rank 0 cannot take it: written by a
 * newer fmckpt (format version 2), or by another run.  The barrier's
 * timeout must say so, not that no marker came. */
static void test_barrier_refused_marker(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	struct ckpt_mf_shard sh = {
		.rank = 1, .file_bytes = CKPT_SHARD_HEADER_BYTES,
	};
	struct ckpt_manifest m = {
		.kind = CKPT_MF_KIND_RANK, .step = 1, .world_size = 2,
		.shards = &sh, .nshards = 1,
	};
	char path[PATH_MAX + 64];
	unsigned char *buf;
	size_t len;
	struct tset t;
	struct ckpt *c;
	int fd;

	snprintf(path, sizeof(path), "%s/.tmp-step-0000000001", e->dir);
	assert_int_equal(mkdir(e->dir, 0755), 0);
	assert_int_equal(mkdir(path, 0755), 0);
	strcat(path, "/rank-00001.done");
	assert_ok(ckpt_mf_encode(&m, &buf, &len), "encode");
	util_put32le(buf + 8, 3);
	util_put32le(buf + 60, util_crc32c(0, buf, 60));
	util_put32le(buf + len - 16, util_crc32c(0, buf, len - 16));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
	tset_init(&t, 2, 1 * KIB);
	cfg.world_size = 2;
	cfg.barrier_timeout_ms = 300;
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	assert_int_equal(ckpt_wait(c, 1, CKPT_LOCAL, 0, e->msg,
				   sizeof(e->msg)), -ETIMEDOUT);
	assert_contains(e->msg, "rank(s) 1");
	assert_contains(e->msg, "rank-00001.done");
	assert_contains(e->msg, "format version 3");
	/* The same marker of another run. */
	snprintf(sh.run_id, sizeof(sh.run_id), "other-run");
	m.step = 2;
	assert_ok(ckpt_mf_encode(&m, &buf, &len), "encode");
	snprintf(path, sizeof(path), "%s/.tmp-step-0000000002", e->dir);
	assert_int_equal(mkdir(path, 0755), 0);
	strcat(path, "/rank-00001.done");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
	save(e, c, &t, 2, 0);
	assert_int_equal(ckpt_wait(c, 2, CKPT_LOCAL, 0, e->msg,
				   sizeof(e->msg)), -ETIMEDOUT);
	assert_contains(e->msg, "other-run");
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* The checkpoint storage dies under a job (here: the place of step 2's
 * temporary directory is taken by a file): every later failure must
 * say why, in ckpt_wait and in the stats' last_error, not end in an
 * empty reason ("step 2: ") or one read later that is not the cause. */
static void test_background_error_reason(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	char path[PATH_MAX + 64];
	struct ckpt_stats st;
	struct tset t;
	struct ckpt *c;
	size_t len;

	tset_init(&t, 3, 1 * KIB);
	c = open_cfg(e, &cfg);
	save(e, c, &t, 1, 0);
	wait_ok(e, c, 1, CKPT_LOCAL);
	snprintf(path, sizeof(path), "%s/.tmp-step-0000000002", e->dir);
	close(open(path, O_CREAT | O_WRONLY, 0644));
	save(e, c, &t, 2, 0);
	assert_int_equal(ckpt_wait(c, 2, CKPT_LOCAL, 10000, e->msg,
				   sizeof(e->msg)), -ENOTDIR);
	assert_contains(e->msg, "step 2: ");
	assert_contains(e->msg, ".tmp-step-0000000002");
	assert_contains(e->msg, strerror(ENOTDIR));
	ckpt_get_stats(c, &st);
	assert_int_equal(st.steps_failed, 1);
	len = strlen(st.last_error);
	assert_true(len > 2 && strcmp(st.last_error + len - 2, ": "));
	assert_contains(st.last_error, ".tmp-step-0000000002");
	assert_contains(st.last_error, strerror(ENOTDIR));
	assert_int_equal(st.local_steps, 1);
	/* The next step is fine again; the counts say what is committed. */
	save(e, c, &t, 3, 0);
	wait_ok(e, c, 3, CKPT_LOCAL);
	ckpt_get_stats(c, &st);
	assert_int_equal(st.commits, 3);
	assert_int_equal(st.local_steps, 2);
	assert_int_equal(st.remote_steps, 0);
	assert_int_equal(st.steps_failed, 1);
	unlink(path);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* The one entry of dir/aside whose name starts with prefix, or "". */
static void aside_entry(struct env *e, const char *prefix, char *out,
			size_t len)
{
	char path[PATH_MAX + 16];
	struct dirent *de;
	DIR *d;

	out[0] = '\0';
	snprintf(path, sizeof(path), "%s/aside", e->dir);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			snprintf(out, len, "%s/%s", path, de->d_name);
	closedir(d);
}

/* A step-N whose manifest is gone (a retention cut short, a person) or
 * damaged is not committed: a job that resumed from an older step can
 * save step N again.  What was there is moved aside, not removed. */
static void test_resave_incomplete(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	char path[PATH_MAX + 64], aside[PATH_MAX + 300];
	struct ckpt_step_info *v;
	struct tset t;
	struct ckpt *c = two_steps(e, &t);
	size_t n, inc;
	uint64_t got;

	save(e, c, &t, 3, 0);
	wait_ok(e, c, 3, CKPT_LOCAL);
	ckpt_close(c, NULL, 0);
	/* (Retention at open removes an incomplete step older than the
	 * newest complete one: the 3 without a manifest must be newest.) */
	step_path(e, 3, "manifest", path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	step_path(e, 2, "manifest", path, sizeof(path));
	flip_bit(path, 70, 2);
	c = open_cfg(e, &cfg);
	/* A step that is complete is still refused. */
	assert_int_equal(ckpt_begin(c, 1, e->msg, sizeof(e->msg)), -EEXIST);
	assert_contains(e->msg, "already committed");
	save(e, c, &t, 3, 0);
	assert_ok(ckpt_wait(c, 3, CKPT_LOCAL, 10000, e->msg, sizeof(e->msg)),
		  e->msg);
	save(e, c, &t, 2, 0);
	assert_ok(ckpt_wait(c, 2, CKPT_LOCAL, 10000, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_ok(load_check(e, c, &t, 2, 0, &got), e->msg);
	assert_ok(load_check(e, c, &t, 3, 0, &got), e->msg);
	/* The old ones are in dir/aside, shard and all. */
	aside_entry(e, "step-0000000003.incomplete.", aside, sizeof(aside));
	assert_true(aside[0]);
	strcat(aside, "/shard-00000.bin");
	assert_true(exists(aside));
	aside_entry(e, "step-0000000002.incomplete.", aside, sizeof(aside));
	assert_true(aside[0]);
	strcat(aside, "/manifest");
	assert_true(exists(aside));
	{
		struct ckpt_stats st;

		ckpt_get_stats(c, &st);
		assert_int_equal(st.steps_set_aside, 2);
	}
	assert_ok(ckpt_list(c, &v, &n, &inc, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 3);
	assert_int_equal(inc, 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(v[i].error, 0);
	free(v);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* A job resumed from step 2 sets steps 3 and 4 aside, in the directory
 * and in the store, and then saves its own 3. */
static void test_set_aside_newer(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, true);
	char path[PATH_MAX + 300];
	struct ckpt_step_info *v;
	struct dirent *de;
	struct tset t;
	struct ckpt *c;
	size_t n, moved;
	unsigned remote = 0;
	DIR *d;

	tset_init(&t, 4, 1 * KIB);
	c = open_cfg(e, &cfg);
	for (uint64_t s = 1; s <= 4; s++) {
		save(e, c, &t, s, 0);
		wait_ok(e, c, s, CKPT_DURABLE);
		wait_ok(e, c, s, CKPT_LOCAL);
	}
	ckpt_close(c, NULL, 0);
	c = open_cfg(e, &cfg);
	assert_ok(ckpt_set_aside(c, 2, &moved, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(moved, 4);
	assert_contains(e->msg, "/aside/: step-0000000003.newer-than-2.");
	assert_contains(e->msg, "aside/step-0000000004.newer-than-2.");
	aside_entry(e, "step-0000000004.newer-than-2.", path, 300);
	assert_true(path[0]);
	strcat(path, "/manifest");
	assert_true(exists(path));
	snprintf(path, sizeof(path), "%s/aside", e->store);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		remote += !strncmp(de->d_name, "step-", 5);
	closedir(d);
	assert_int_equal(remote, 2);
	assert_ok(ckpt_list(c, &v, &n, NULL, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(n, 2);
	assert_int_equal(v[0].step, 2);
	free(v);
	/* Nothing newer: nothing moved, nothing said. */
	assert_ok(ckpt_set_aside(c, 2, &moved, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(moved, 0);
	assert_string_equal(e->msg, "");
	save(e, c, &t, 3, 0);
	wait_ok(e, c, 3, CKPT_DURABLE);
	wait_ok(e, c, 3, CKPT_LOCAL);
	assert_ok(load_check(e, c, &t, 3, 0, NULL), e->msg);
	ckpt_close(c, NULL, 0);
	tset_free(&t);
}

/* ---- fuzz: random damage to each file of a committed checkpoint ----
 *
 * Steps 1 and 2 are saved; each trial puts step 2's files back as they
 * were written, then damages one of them (in turn: the manifest, the
 * shard, the rank marker) in one of four ways: cut to a random length,
 * 1 to 8 random bits flipped, removed, or a random range of up to 4 KiB
 * zeroed.  Then:
 *   - a load of step 2 gives exactly the bytes saved, or fails with a
 *     message that names the damaged file (the marker is not read once
 *     committed: damage to it must change nothing);
 *   - a load of the newest gives exactly step 2, or exactly step 1
 *     saying it skipped step 2 and naming the file (a step 2 without a
 *     manifest is no checkpoint and is passed over without a word);
 *   - ckpt_list lists step 1, intact, and says of a damaged step 2 what
 *     is wrong, naming the file; step 1 still loads exactly;
 *   - every 25th trial whose step 2 does not open, a new handle saves
 *     step 2 again (the damaged one is moved aside) and it loads.
 * The seed is printed; FMCKPT_FUZZ_SEED=N repeats a run exactly and
 * FMCKPT_FUZZ_TRIALS=N sets the count (default 900: 75 of each file and
 * kind of damage). */

static uint64_t fuzz_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct fuzz_file {
	const char *name;
	char path[PATH_MAX + 64];
	unsigned char *orig;
	size_t len;
};

static void fuzz_put(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Damages f (put back as written first); *how says what was done. */
static void fuzz_damage(struct fuzz_file *f, unsigned kind, uint64_t *x,
			char *how, size_t how_len)
{
	unsigned char *b = malloc(f->len);
	size_t len = f->len;

	assert_non_null(b);
	memcpy(b, f->orig, len);
	switch (kind) {
	case 0:
		len = (size_t)(fuzz_next(x) % f->len);
		snprintf(how, how_len, "cut to %zu of %zu bytes", len, f->len);
		break;
	case 1: {
		unsigned bits = 1 + (unsigned)(fuzz_next(x) % 8);

		snprintf(how, how_len, "%u bit(s) flipped", bits);
		for (unsigned i = 0; i < bits; i++) {
			uint64_t bit = fuzz_next(x) % (f->len * 8);

			b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		}
		break;
	}
	case 2:
		snprintf(how, how_len, "removed");
		break;
	default: {
		size_t off = (size_t)(fuzz_next(x) % f->len);
		size_t n = 1 + (size_t)(fuzz_next(x) % 4096);

		if (n > f->len - off)
			n = f->len - off;
		memset(b + off, 0, n);
		snprintf(how, how_len, "bytes %zu-%zu zeroed", off,
			 off + n - 1);
		break;
	}
	}
	if (kind == 2)
		assert_int_equal(unlink(f->path), 0);
	else
		fuzz_put(f->path, b, len);
	free(b);
}

static void test_fuzz_damage(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, false);
	static const char *const names[] = {
		"manifest", "shard-00000.bin", "rank-00000.done"
	};
	struct fuzz_file f[3];
	const char *env_seed = getenv("FMCKPT_FUZZ_SEED");
	const char *env_trials = getenv("FMCKPT_FUZZ_TRIALS");
	uint64_t seed, x, t0 = util_now_ns();
	unsigned trials = env_trials ? (unsigned)atoi(env_trials) : 900;
	unsigned loaded2 = 0, refused2 = 0, fell_back = 0, resaved = 0;
	struct tset t;
	struct ckpt *c = two_steps(e, &t), *ro;

	seed = env_seed ? strtoull(env_seed, NULL, 0) :
	       (util_now_ns() ^ ((uint64_t)getpid() << 32)) | 1;
	x = seed;
	print_message("fuzz: seed %llu, %u trials (FMCKPT_FUZZ_SEED=%llu "
		      "repeats this run)\n", (unsigned long long)seed, trials,
		      (unsigned long long)seed);
	ckpt_close(c, NULL, 0);
	for (unsigned i = 0; i < 3; i++) {
		f[i].name = names[i];
		step_path(e, 2, names[i], f[i].path, sizeof(f[i].path));
		assert_ok(ckpt_read_whole(f[i].path, 64 << 20, &f[i].orig,
					  &f[i].len, e->msg, sizeof(e->msg)),
			  e->msg);
		assert_true(f[i].len > 16);
	}
	cfg.read_only = true;
	ro = open_cfg(e, &cfg);
	cfg.read_only = false;
	for (unsigned trial = 0; trial < trials; trial++) {
		struct fuzz_file *d = &f[trial % 3];
		unsigned kind = (trial / 3) % 4;
		bool marker = d == &f[2];
		bool no_manifest = d == &f[0] && kind == 2;
		struct ckpt_step_info *v;
		struct ckpt_reader *r;
		char how[128], what[PATH_MAX + 256];
		uint64_t got = 0;
		size_t n;
		int rc;

		for (unsigned i = 0; i < 3; i++)
			fuzz_put(f[i].path, f[i].orig, f[i].len);
		fuzz_damage(d, kind, &x, how, sizeof(how));
		snprintf(what, sizeof(what), "trial %u (seed %llu): %s %s",
			 trial, (unsigned long long)seed, d->name, how);

		/* step 2 exactly: the bytes saved, or the file named */
		rc = load_check(e, ro, &t, 2, 0, &got);
		if (!rc) {
			assert_int_equal(got, 2);
			loaded2++;
		} else {
			if (marker)
				fail_msg("%s: step 2 not loaded: %s", what,
					 e->msg);
			if (!strstr(e->msg, d->path))
				fail_msg("%s: the message does not name %s: "
					 "%s", what, d->path, e->msg);
			refused2++;
		}
		/* the newest: step 2 exactly, or step 1 saying why not */
		rc = load_check(e, ro, &t, CKPT_STEP_LATEST, 0, &got);
		if (rc)
			fail_msg("%s: no step loaded: %s", what, e->msg);
		if (got == 1) {
			fell_back++;
			if (!no_manifest && (!strstr(e->msg, "skipped step 2") ||
					     !strstr(e->msg, d->path)))
				fail_msg("%s: step 1 loaded without naming "
					 "%s: %s", what, d->path, e->msg);
		} else if (got != 2) {
			fail_msg("%s: loaded step %llu", what,
				 (unsigned long long)got);
		}
		/* the older step: listed intact, and loads */
		assert_ok(ckpt_list(ro, &v, &n, NULL, e->msg, sizeof(e->msg)),
			  e->msg);
		if (n < 1 || v[n - 1].step != 1 || v[n - 1].error)
			fail_msg("%s: step 1 not listed intact", what);
		if (n == 2 && v[0].error && !strstr(v[0].why, d->path))
			fail_msg("%s: list does not name %s: %s", what,
				 d->path, v[0].why);
		free(v);
		assert_ok(load_check(e, ro, &t, 1, 0, &got), e->msg);
		/* a step 2 that does not open can be saved again */
		rc = ckpt_reader_open_from(ro, 2, CKPT_FROM_LOCAL, &r, NULL, 0);
		if (!rc) {
			ckpt_reader_close(r);
		} else if (trial % 25 < 3) {
			c = open_cfg(e, &cfg);
			save(e, c, &t, 2, 0);
			assert_ok(ckpt_wait(c, 2, CKPT_LOCAL, 10000, e->msg,
					    sizeof(e->msg)), e->msg);
			assert_ok(load_check(e, c, &t, 2, 0, &got), e->msg);
			ckpt_close(c, NULL, 0);
			resaved++;
		}
	}
	print_message("fuzz: %u trials in %.2f s: step 2 loaded exactly %u "
		      "times, refused naming the damaged file %u times; the "
		      "newest fell back to step 1 %u times; step 2 saved again "
		      "%u times\n", trials, (util_now_ns() - t0) / 1e9, loaded2,
		      refused2, fell_back, resaved);
	assert_int_equal(loaded2 + refused2, trials);
	for (unsigned i = 0; i < 3; i++)
		free(f[i].orig);
	ckpt_close(ro, NULL, 0);
	tset_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc_combine),
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
		T(test_roundtrip),
		T(test_prepare),
		T(test_remote_roundtrip),
		T(test_corrupt_shard_data),
		T(test_corrupt_shard_header),
		T(test_corrupt_shard_padding),
		T(test_truncated_shard),
		T(test_missing_shard),
		T(test_corrupt_manifest),
		T(test_unknown_version),
		T(test_retention),
		T(test_bad_inputs),
		T(test_ranks),
		T(test_rank_missing),
		T(test_crash_points),
		T(test_rss_stable),
		T(test_restore),
		T(test_device_copy_error),
		T(test_remote_commits_in_order),
		T(test_remote_barrier_many_ranks),
		T(test_remote_error_kept),
		T(test_barrier_refused_marker),
		T(test_background_error_reason),
		T(test_resave_incomplete),
		T(test_set_aside_newer),
		T(test_fuzz_damage),
#undef T
	};

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("FMCKPT_RUN_ID");
	return run_tests_in_tmp_dir("fmfs-test-ckpt", tests);
}
