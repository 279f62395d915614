/* SPDX-License-Identifier: MIT */
/*
 * test_reshard.c - cmocka tests of checkpoints loaded into another world
 * size (ckpt_add_slice, CKPT_ADD_REPLICATED, ckpt_reader_read_region):
 * global tensors saved as row, column and middle-dimension slices by 4,
 * 2 and 8 ranks (one process, a handle per rank) and loaded bit-exact by
 * 2, 4 and 3 ranks split another way, through a directory and through a
 * file:// store; replicated tensors read from one copy; and each bad
 * input or damage refused naming the tensor, rank or region: slices
 * outside their tensor, ranks that disagree, copies that differ, a
 * region no slice covers, a rank's own tensor asked of another world
 * size, a damaged slice, a damaged slice record in the manifest.  Also
 * that a checkpoint without slices keeps manifest version 1.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "ckpt_env.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_int.h"

/* The global tensors: how each is saved (split along save_dim, or
 * replicated when save_dim is -1) and loaded (split along load_dim). */
struct gdef {
	const char *name;
	enum ckpt_dtype dt;
	unsigned ndim;
	int64_t shape[3];
	int save_dim, load_dim;
};

static const struct gdef defs[] = {
	{ "w", CKPT_F32, 2, { 37, 11 }, 0, 1 },
	{ "e", CKPT_BF16, 2, { 6, 50 }, 1, 0 },
	{ "k", CKPT_I64, 3, { 4, 6, 5 }, 1, 2 },
	{ "b", CKPT_U8, 1, { 13 }, -1, -1 },
};

/* The byte k of element j (row-major global index) of tensor id. */
static unsigned char val(unsigned id, uint64_t j, unsigned k)
{
	uint64_t x = (j + 1) * 0x9E3779B97F4A7C15ull ^
		     (id + 1) * 0xBF58476D1CE4E5B9ull;

	x ^= x >> 29;
	return (unsigned char)(x >> (8 * k));
}

/* The box (off, shape) of tensor id, row-major, into out. */
static void gen_box(unsigned id, const struct gdef *g, const int64_t *off,
		    const int64_t *shape, unsigned char *out)
{
	size_t es = ckpt_dtype_size(g->dt), at = 0;
	int64_t n = 1;

	for (unsigned d = 0; d < g->ndim; d++)
		n *= shape[d];
	for (int64_t i = 0; i < n; i++) {
		int64_t rem = i;
		uint64_t gi = 0;
		int64_t idx[3];

		for (int d = (int)g->ndim - 1; d >= 0; d--) {
			idx[d] = rem % shape[d];
			rem /= shape[d];
		}
		for (unsigned d = 0; d < g->ndim; d++)
			gi = gi * (uint64_t)g->shape[d] +
			     (uint64_t)(off[d] + idx[d]);
		for (size_t k = 0; k < es; k++)
			out[at++] = val(id, gi, (unsigned)k);
	}
}

/* Part i of n of tensor g split along dim: offset and shape. */
static void part(const struct gdef *g, int dim, unsigned i, unsigned n,
		 int64_t *off, int64_t *shape)
{
	for (unsigned d = 0; d < g->ndim; d++) {
		off[d] = 0;
		shape[d] = g->shape[d];
	}
	if (dim < 0)
		return;
	off[dim] = g->shape[dim] * i / n;
	shape[dim] = g->shape[dim] * (i + 1) / n - off[dim];
}

static uint64_t box_bytes(const struct gdef *g, const int64_t *shape)
{
	uint64_t n = ckpt_dtype_size(g->dt);

	for (unsigned d = 0; d < g->ndim; d++)
		n *= (uint64_t)shape[d];
	return n;
}

static struct ckpt_config cfg_of(struct env *e, bool dir, int rank,
				 int world)
{
	struct ckpt_config cfg;

	ckpt_config_init(&cfg);
	cfg.dir = dir ? e->dir : NULL;
	cfg.remote = dir ? NULL : e->url;
	cfg.rank = rank;
	cfg.world_size = world;
	cfg.run_id = "reshard";
	cfg.staging_bytes = 8 * MIB;
	cfg.chunk_bytes = dir ? 64 * KIB : 5 * MIB;
	cfg.barrier_timeout_ms = 20000;
	return cfg;
}

/* Every rank of a world of w saves step: its slice of each tensor in
 * defs, "b" replicated, its own "rng" (differs by rank) and, rank 0
 * only, "step". */
static void save_world(struct env *e, bool dir, unsigned w, uint64_t step)
{
	struct ckpt **c = calloc(w, sizeof(*c));
	unsigned char *bufs[ARRAY_SIZE(defs)][8];
	uint32_t rng[8][4];
	uint64_t stepv = step * 1000 + 7;
	int64_t one = 1, four = 4;

	assert_true(w <= 8);
	for (unsigned r = 0; r < w; r++) {
		struct ckpt_config cfg = cfg_of(e, dir, (int)r, (int)w);

		assert_ok(ckpt_open(&cfg, &c[r], e->msg, sizeof(e->msg)),
			  e->msg);
		assert_ok(ckpt_begin(c[r], step, e->msg, sizeof(e->msg)),
			  e->msg);
		for (size_t t = 0; t < ARRAY_SIZE(defs); t++) {
			const struct gdef *g = &defs[t];
			int64_t off[3], sh[3];
			uint64_t n;

			part(g, g->save_dim, r, w, off, sh);
			n = box_bytes(g, sh);
			bufs[t][r] = malloc(n ? n : 1);
			gen_box((unsigned)t, g, off, sh, bufs[t][r]);
			if (g->save_dim < 0)
				assert_ok(ckpt_add(c[r], g->name, g->dt,
						   g->ndim, sh, bufs[t][r], n,
						   CKPT_ADD_REPLICATED, e->msg,
						   sizeof(e->msg)), e->msg);
			else
				assert_ok(ckpt_add_slice(c[r], g->name, g->dt,
							 g->ndim, sh, g->shape,
							 off, bufs[t][r], n, 0,
							 e->msg,
							 sizeof(e->msg)),
					  e->msg);
		}
		for (unsigned k = 0; k < 4; k++)
			rng[r][k] = r * 100 + k;
		assert_ok(ckpt_add(c[r], "rng", CKPT_U32, 1, &four, rng[r],
				   16, 0, e->msg, sizeof(e->msg)), e->msg);
		if (r == 0)
			assert_ok(ckpt_add(c[r], "step", CKPT_U64, 1, &one,
					   &stepv, 8, 0, e->msg,
					   sizeof(e->msg)), e->msg);
		assert_ok(ckpt_commit(c[r], e->msg, sizeof(e->msg)), e->msg);
	}
	assert_ok(ckpt_wait(c[0], step, CKPT_DURABLE, 30000, e->msg,
			    sizeof(e->msg)), e->msg);
	for (unsigned r = 0; r < w; r++) {
		assert_ok(ckpt_close(c[r], e->msg, sizeof(e->msg)), e->msg);
		for (size_t t = 0; t < ARRAY_SIZE(defs); t++)
			free(bufs[t][r]);
	}
	free(c);
}

static struct ckpt *open_reader(struct env *e, bool dir, unsigned rank,
				unsigned world)
{
	struct ckpt_config cfg = cfg_of(e, dir, (int)rank, (int)world);
	struct ckpt *c;

	cfg.read_only = true;
	assert_ok(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), e->msg);
	return c;
}

/* Every rank of a world of w2 loads its part of each tensor (split the
 * load way), and rank 0 the whole of each; all compared byte for byte
 * with what was saved by a world of w. */
static void load_world(struct env *e, bool dir, unsigned w, unsigned w2,
		       uint64_t step)
{
	for (unsigned r = 0; r < w2; r++) {
		struct ckpt *c = open_reader(e, dir, r, w2);
		struct ckpt_buf b[ARRAY_SIZE(defs) * 2 + 1];
		unsigned char *want[ARRAY_SIZE(defs) * 2];
		int64_t off[ARRAY_SIZE(defs)][3], sh[ARRAY_SIZE(defs)][3];
		size_t nb = 0;
		uint64_t stepv = 0, loaded = 0;
		int64_t zero[3] = { 0 };

		memset(b, 0, sizeof(b));
		for (size_t t = 0; t < ARRAY_SIZE(defs); t++) {
			const struct gdef *g = &defs[t];
			uint64_t n;

			part(g, g->load_dim, r, w2, off[t], sh[t]);
			n = box_bytes(g, sh[t]);
			want[nb] = malloc(n ? n : 1);
			gen_box((unsigned)t, g, off[t], sh[t], want[nb]);
			b[nb].name = g->name;
			b[nb].data = calloc(1, n ? n : 1);
			b[nb].size_bytes = n;
			b[nb].ndim = g->ndim;
			b[nb].offset = off[t];
			b[nb].shape = sh[t];
			nb++;
			if (r == 0) {
				/* and the whole: without a region, or in the
				 * world size that saved it (where no region
				 * means the rank's own slice) as a region */
				n = box_bytes(g, g->shape);
				want[nb] = malloc(n);
				gen_box((unsigned)t, g, zero, g->shape,
					want[nb]);
				b[nb].name = g->name;
				b[nb].data = calloc(1, n);
				b[nb].size_bytes = n;
				if (w2 == w) {
					b[nb].ndim = g->ndim;
					b[nb].offset = zero;
					b[nb].shape = g->shape;
				}
				nb++;
			}
		}
		b[nb].name = "step";
		b[nb].data = &stepv;
		b[nb].size_bytes = 8;
		assert_ok(ckpt_load(c, step, b, nb + 1, &loaded, e->msg,
				    sizeof(e->msg)), e->msg);
		assert_int_equal(loaded, step);
		assert_int_equal(stepv, step * 1000 + 7);
		for (size_t i = 0; i < nb; i++) {
			if (memcmp(b[i].data, want[i], b[i].size_bytes))
				fail_msg("%u -> %u ranks: rank %u's '%s' (%s) "
					 "differs", w, w2, r, b[i].name,
					 b[i].ndim ? "its part" : "whole");
			free(b[i].data);
			free(want[i]);
		}
		/* In the world size that saved it, no region is the rank's
		 * own slice, as saved. */
		if (w2 == w) {
			const struct gdef *g = &defs[0];
			int64_t so[3], ss[3];
			unsigned char *got, *exp;
			struct ckpt_buf ob = { .name = g->name };

			part(g, g->save_dim, r, w, so, ss);
			ob.size_bytes = box_bytes(g, ss);
			got = ob.data = malloc(ob.size_bytes);
			exp = malloc(ob.size_bytes);
			gen_box(0, g, so, ss, exp);
			assert_ok(ckpt_load(c, step, &ob, 1, NULL, e->msg,
					    sizeof(e->msg)), e->msg);
			assert_memory_equal(got, exp, ob.size_bytes);
			free(got);
			free(exp);
		}
		/* A rank's own tensor: into its own world size only. */
		{
			uint32_t rng[4];
			struct ckpt_buf rb = { .name = "rng", .data = rng,
					       .size_bytes = 16 };
			int rc = ckpt_load(c, step, &rb, 1, NULL, e->msg,
					   sizeof(e->msg));

			if (w2 == w) {
				assert_ok(rc, e->msg);
				assert_int_equal(rng[3], r * 100 + 3);
			} else {
				assert_int_equal(rc, -EINVAL);
				assert_contains(e->msg, "'rng'");
				assert_contains(e->msg, "cannot be resharded");
			}
		}
		ckpt_close(c, NULL, 0);
	}
}

static void test_reshard_4_to_2(void **state)
{
	struct env *e = *state;

	save_world(e, true, 4, 10);
	load_world(e, true, 4, 2, 10);
	load_world(e, true, 4, 4, 10);
}

static void test_reshard_2_to_4(void **state)
{
	struct env *e = *state;

	save_world(e, true, 2, 20);
	load_world(e, true, 2, 4, 20);
}

static void test_reshard_8_to_3(void **state)
{
	struct env *e = *state;

	save_world(e, true, 8, 30);
	load_world(e, true, 8, 3, 30);
	load_world(e, true, 8, 1, 30);
}

static void test_reshard_remote(void **state)
{
	struct env *e = *state;

	save_world(e, false, 4, 40);
	load_world(e, false, 4, 3, 40);
}

/* Manifest version: 1 without slices, 2 with; the version-2 fields. */
static void test_versions(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct ckpt_config cfg = cfg_of(e, true, 0, 1);
	struct ckpt_reader *r;
	struct ckpt_global_info gi;
	unsigned char *buf;
	size_t len;
	struct ckpt *c;
	int64_t four = 4;
	uint32_t x[4] = { 1, 2, 3, 4 };

	assert_ok(ckpt_open(&cfg, &c, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_begin(c, 1, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_add(c, "x", CKPT_U32, 1, &four, x, 16, 0, e->msg,
			   sizeof(e->msg)), e->msg);
	assert_ok(ckpt_commit(c, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_wait(c, 1, CKPT_LOCAL, 0, e->msg, sizeof(e->msg)),
		  e->msg);
	ckpt_close(c, NULL, 0);
	snprintf(path, sizeof(path), "%s/step-0000000001/manifest", e->dir);
	assert_ok(ckpt_read_whole(path, 1 << 20, &buf, &len, e->msg,
				  sizeof(e->msg)), e->msg);
	assert_int_equal(util_get32le(buf + 8), 1);
	free(buf);

	save_world(e, true, 2, 2);
	snprintf(path, sizeof(path), "%s/step-0000000002/manifest", e->dir);
	assert_ok(ckpt_read_whole(path, 1 << 20, &buf, &len, e->msg,
				  sizeof(e->msg)), e->msg);
	assert_int_equal(util_get32le(buf + 8), 2);
	c = open_reader(e, true, 0, 1);
	assert_ok(ckpt_reader_open(c, 2, &r, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_reader_global(r, "k", &gi, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(gi.ndim, 3);
	assert_int_equal(gi.shape[1], 6);
	assert_int_equal(gi.copies, 2);
	assert_int_equal(gi.flags, CKPT_TENSOR_SLICE);
	assert_int_equal(gi.size_bytes, 4 * 6 * 5 * 8);
	assert_ok(ckpt_reader_global(r, "b", &gi, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(gi.flags, CKPT_TENSOR_REPLICATED);
	assert_int_equal(ckpt_reader_global(r, "nope", &gi, e->msg,
					    sizeof(e->msg)), -ENOENT);
	assert_contains(e->msg, "'nope' is not in step 2");
	assert_ok(ckpt_reader_verify(r, e->msg, sizeof(e->msg)), e->msg);
	ckpt_reader_close(r);

	/* A slice record moved outside its tensor, checksums redone: the
	 * manifest is refused as corrupt, not read. */
	{
		size_t rec = CKPT_MF_HEADER_BYTES + 2 * CKPT_MF_SHARD_BYTES;
		int fd;

		/* the first record with the slice flag */
		while (!(util_get32le(buf + rec + 104) & CKPT_TENSOR_SLICE))
			rec += CKPT_MF_TENSOR_BYTES_V2;
		util_put64le(buf + rec + 176, 1000);
		util_put32le(buf + len - 16, util_crc32c(0, buf, len - 16));
		fd = open(path, O_WRONLY | O_TRUNC);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
		close(fd);
	}
	free(buf);
	assert_int_equal(ckpt_reader_open(c, 2, &r, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, "does not lie inside the global shape");
	assert_contains(e->msg, "corrupt manifest");
	ckpt_close(c, NULL, 0);
}

/* Adds one slice of "w" ([20, 4] u8) and commits. */
static void add_w(struct ckpt *c, struct env *e, uint64_t step,
		  const int64_t *gshape, const int64_t *off,
		  const int64_t *sh, unsigned char fillv)
{
	unsigned char data[80];

	memset(data, fillv, sizeof(data));
	assert_ok(ckpt_begin(c, step, e->msg, sizeof(e->msg)), e->msg);
	assert_ok(ckpt_add_slice(c, "w", CKPT_U8, 2, sh, gshape, off, data,
				 (uint64_t)(sh[0] * sh[1]), 0, e->msg,
				 sizeof(e->msg)), e->msg);
	assert_ok(ckpt_commit(c, e->msg, sizeof(e->msg)), e->msg);
}

static void test_bad_inputs(void **state)
{
	struct env *e = *state;
	struct ckpt_config cfg = cfg_of(e, true, 0, 2);
	int64_t g[2] = { 20, 4 }, g2[2] = { 20, 5 }, o[2] = { 0, 0 },
		o2[2] = { 10, 0 }, s[2] = { 10, 4 }, s2[2] = { 11, 4 };
	unsigned char data[80] = { 0 }, out[80];
	struct ckpt *c0, *c1;
	struct ckpt_buf b = { .name = "w", .data = out, .size_bytes = 80 };

	assert_ok(ckpt_open(&cfg, &c0, e->msg, sizeof(e->msg)), e->msg);
	cfg.rank = 1;
	assert_ok(ckpt_open(&cfg, &c1, e->msg, sizeof(e->msg)), e->msg);
	/* Refused at the add: outside the tensor, no dimension, replicated
	 * slices, no offsets. */
	assert_ok(ckpt_begin(c0, 1, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_add_slice(c0, "w", CKPT_U8, 2, s2, g, o2, data,
					44, 0, e->msg, sizeof(e->msg)),
			 -EINVAL);
	assert_contains(e->msg, "'w': the slice [11, 4] at offset [10, 0] "
			"does not lie inside the global shape [20, 4]");
	assert_int_equal(ckpt_add_slice(c0, "w", CKPT_U8, 0, s, g, o, data, 1,
					0, e->msg, sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "at least one dimension");
	assert_int_equal(ckpt_add_slice(c0, "w", CKPT_U8, 2, s, g, o, data,
					40, CKPT_ADD_REPLICATED, e->msg,
					sizeof(e->msg)), -EINVAL);
	assert_int_equal(ckpt_add_slice(c0, "w", CKPT_U8, 2, s, NULL, o, data,
					40, 0, e->msg, sizeof(e->msg)),
			 -EINVAL);
	assert_contains(e->msg, "global shape and offsets");
	ckpt_abort(c0);

	/* Ranks that disagree on the whole shape: the commit fails. */
	add_w(c0, e, 1, g, o, s, 1);
	add_w(c1, e, 1, g2, o2, s, 2);
	assert_int_equal(ckpt_wait(c0, 1, CKPT_LOCAL, 0, e->msg,
				   sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "tensor 'w' is [20, 4] on rank 0 but [20, 5] "
			"on rank 1");

	/* Copies of one region that differ: the commit fails. */
	add_w(c0, e, 2, g, o, s, 1);
	add_w(c1, e, 2, g, o, s, 2);
	assert_int_equal(ckpt_wait(c0, 2, CKPT_LOCAL, 0, e->msg,
				   sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "copies of rank 0 and rank 1 differ");

	/* Rank 1 saves rows 0-9 again, the same bytes: a copy (committed),
	 * and rows 10-19 are in no slice. */
	add_w(c0, e, 3, g, o, s, 7);
	add_w(c1, e, 3, g, o, s, 7);
	assert_ok(ckpt_wait(c0, 3, CKPT_LOCAL, 0, e->msg, sizeof(e->msg)),
		  e->msg);
	/* Slices that overlap without being the same region. */
	add_w(c0, e, 4, g, o, s2, 8);
	add_w(c1, e, 4, g, o2, s, 8);
	assert_ok(ckpt_wait(c0, 4, CKPT_LOCAL, 0, e->msg, sizeof(e->msg)),
		  e->msg);
	ckpt_close(c0, NULL, 0);
	ckpt_close(c1, NULL, 0);

	c0 = open_reader(e, true, 0, 3);
	assert_int_equal(ckpt_load(c0, 3, &b, 1, NULL, e->msg,
				   sizeof(e->msg)), -ENOENT);
	assert_contains(e->msg, "tensor 'w' of step 3: 40 of the 80 elements "
			"of the region [20, 4] at [0, 0] are in no rank's "
			"slice");
	{
		int64_t ro[2] = { 2, 1 }, rs[2] = { 5, 3 };
		struct ckpt_buf rb = { .name = "w", .data = out,
				       .size_bytes = 15, .ndim = 2,
				       .offset = ro, .shape = rs };

		/* a region inside the copies loads */
		memset(out, 0, sizeof(out));
		assert_ok(ckpt_load(c0, 3, &rb, 1, NULL, e->msg,
				    sizeof(e->msg)), e->msg);
		for (unsigned i = 0; i < 15; i++)
			assert_int_equal(out[i], 7);
		rb.size_bytes = 16;
		assert_int_equal(ckpt_load(c0, 3, &rb, 1, NULL, e->msg,
					   sizeof(e->msg)), -EINVAL);
		assert_contains(e->msg, "wrong buffer size for tensor 'w'");
		rb.size_bytes = 15;
		rs[0] = 19;
		assert_int_equal(ckpt_load(c0, 3, &rb, 1, NULL, e->msg,
					   sizeof(e->msg)), -EINVAL);
		assert_contains(e->msg, "the region [19, 3] at [2, 1] does "
				"not lie inside its shape [20, 4]");
		rs[0] = 5;
		rb.ndim = 1;
		assert_int_equal(ckpt_load(c0, 3, &rb, 1, NULL, e->msg,
					   sizeof(e->msg)), -EINVAL);
		assert_contains(e->msg, "has 1 dimensions");
	}
	assert_int_equal(ckpt_load(c0, 4, &b, 1, NULL, e->msg,
				   sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "overlap without being the same region");
	ckpt_close(c0, NULL, 0);
}

/* A damaged slice: a region that needs it is refused naming it and its
 * rank; a region of the other slices still loads. */
static void test_damaged_slice(void **state)
{
	struct env *e = *state;
	char path[PATH_MAX + 64];
	struct ckpt_reader *r;
	const struct ckpt_tensor_info *t;
	struct ckpt *c;
	const struct gdef *g = &defs[0];
	int64_t off[2], sh[2];
	unsigned char *out, *want;

	save_world(e, true, 4, 5);
	c = open_reader(e, true, 0, 2);
	assert_ok(ckpt_reader_open(c, 5, &r, e->msg, sizeof(e->msg)), e->msg);
	t = ckpt_reader_find(r, 1, "w");
	assert_non_null(t);
	snprintf(path, sizeof(path), "%s/step-0000000005/shard-00001.bin",
		 e->dir);
	flip_bit(path, (off_t)t->offset + 3, 2);
	/* rows 0-8 are rank 0's slice, rows 9-17 rank 1's */
	part(g, 0, 0, 4, off, sh);
	out = malloc(box_bytes(g, sh));
	want = malloc(box_bytes(g, sh));
	gen_box(0, g, off, sh, want);
	assert_ok(ckpt_reader_read_region(r, "w", off, sh, out,
					  box_bytes(g, sh), e->msg,
					  sizeof(e->msg)), e->msg);
	assert_memory_equal(out, want, box_bytes(g, sh));
	sh[0] += 1; /* one row of rank 1's */
	assert_int_equal(ckpt_reader_read_region(r, "w", off, sh, out,
						 box_bytes(g, sh), e->msg,
						 sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "tensor 'w' (rank 1) of step 5: checksum "
			"mismatch");
	free(out);
	free(want);
	ckpt_reader_close(r);
	ckpt_close(c, NULL, 0);
}

/* ckpt_open_opts (for bindings): what it refuses, naming it; and a
 * wait at CKPT_NODES on a handle without commit_on_nodes. */
static void test_open_opts(void **state)
{
	struct env *e = *state;
	char opts[PATH_MAX + 64];
	struct ckpt *c;

	assert_int_equal(ckpt_open_opts("colour=red", &c, e->msg,
					sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "unknown option 'colour' (known: dir,");
	assert_null(c);
	assert_int_equal(ckpt_open_opts("dir", &c, e->msg, sizeof(e->msg)),
			 -EINVAL);
	assert_contains(e->msg, "option 'dir' has no '='");
	assert_int_equal(ckpt_open_opts("rank=x", &c, e->msg,
					sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "option rank: 'x' is not a whole number");
	assert_int_equal(ckpt_open_opts("read_only=yes", &c, e->msg,
					sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "option read_only: 'yes' is not 0 or 1");
	assert_int_equal(ckpt_open_opts("keep_local=-1", &c, e->msg,
					sizeof(e->msg)), -EINVAL);
	snprintf(opts, sizeof(opts), "dir=%s\nkeep_local=2\nrank=0\n"
		 "world_size=1", e->dir);
	assert_ok(ckpt_open_opts(opts, &c, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(ckpt_wait(c, 1, CKPT_NODES, 10, e->msg,
				   sizeof(e->msg)), -EINVAL);
	assert_contains(e->msg, "CKPT_NODES needs commit_on_nodes");
	ckpt_close(c, NULL, 0);
	assert_int_equal(ckpt_struct_size("ckpt_stats"),
			 sizeof(struct ckpt_stats));
	assert_int_equal(ckpt_struct_size("nope"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
		T(test_reshard_4_to_2),
		T(test_reshard_2_to_4),
		T(test_reshard_8_to_3),
		T(test_reshard_remote),
		T(test_versions),
		T(test_bad_inputs),
		T(test_damaged_slice),
		T(test_open_opts),
#undef T
	};

	return run_tests_in_tmp_dir("test_reshard", tests);
}
