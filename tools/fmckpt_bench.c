/* SPDX-License-Identifier: MIT */
/*
 * fmckpt_bench.c - `fmckpt bench`: one subcommand, cmd_bench(), which
 * times a save through libfmckpt and prints the figures as JSON.
 *
 * --size bytes in --tensors tensors are saved --rounds times (after one
 * save and memcpy not counted, to warm up) into an empty target (it
 * refuses one that holds checkpoints, and removes what it wrote unless
 * --keep-data); each round times the blocking part (begin, adds, commit)
 * and the time until the step is durable in the directory and in the
 * remote copy, next to a plain memcpy of the same bytes in the same
 * round.  It prints each round's figures and their medians, and the
 * median of the rounds' blocking / memcpy ratios.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fmckpt.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct bench {
	unsigned char **src;
	uint64_t *len;
	unsigned n;
	double *memcpy_s, *commit_s, *local_s, *remote_s, *ratio;
};

static int bench_alloc(struct bench *b, const struct fmckpt_opts *o)
{
	uint64_t per = o->size / o->tensors;

	b->n = o->tensors;
	b->src = calloc(b->n, sizeof(*b->src));
	b->len = calloc(b->n, sizeof(*b->len));
	b->memcpy_s = calloc(o->rounds, sizeof(double));
	b->commit_s = calloc(o->rounds, sizeof(double));
	b->local_s = calloc(o->rounds, sizeof(double));
	b->remote_s = calloc(o->rounds, sizeof(double));
	b->ratio = calloc(o->rounds, sizeof(double));
	if (!b->src || !b->len || !b->memcpy_s || !b->commit_s ||
	    !b->local_s || !b->remote_s || !b->ratio)
		return -1;
	for (unsigned i = 0; i < b->n; i++) {
		b->len[i] = i + 1 < b->n ? per : o->size - per * (b->n - 1);
		b->src[i] = malloc(b->len[i] ? b->len[i] : 1);
		if (!b->src[i])
			return -1;
		/* Not zeros: a page of zeros could be shared, or compress. */
		for (uint64_t k = 0; k < b->len[i]; k += 8) {
			uint64_t x = (k + i) * 0x9E3779B97F4A7C15ull;

			memcpy(b->src[i] + k, &x, b->len[i] - k < 8 ?
			       b->len[i] - k : 8);
		}
	}
	return 0;
}

static void bench_free(struct bench *b)
{
	for (unsigned i = 0; b->src && i < b->n; i++)
		free(b->src[i]);
	free(b->src);
	free(b->len);
	free(b->memcpy_s);
	free(b->commit_s);
	free(b->local_s);
	free(b->remote_s);
	free(b->ratio);
}

/* Memory for the memcpy to copy into, mapped as staging is. */
static unsigned char *bench_dst(const struct fmckpt_opts *o)
{
	return util_map_huge(o->size ? o->size : 1, true);
}

/* One memcpy of the same bytes; seconds. */
static double bench_memcpy(struct bench *b, unsigned char *dst)
{
	double t0 = util_now_ns() / 1e9;
	uint64_t at = 0;

	for (unsigned i = 0; i < b->n; i++) {
		memcpy(dst + at, b->src[i], b->len[i]);
		at += b->len[i];
	}
	return util_now_ns() / 1e9 - t0;
}

static int bench_save(struct ckpt *c, struct bench *b, uint64_t step,
		      double *commit, double *local, double *remote,
		      bool has_dir, bool has_remote, char *msg, size_t len)
{
	double t0;
	int rc;

	rc = ckpt_begin(c, step, msg, len);
	t0 = util_now_ns() / 1e9;
	for (unsigned i = 0; i < b->n && !rc; i++) {
		char name[32];
		int64_t shape[1] = { (int64_t)b->len[i] };

		snprintf(name, sizeof(name), "tensor%04u", i);
		rc = ckpt_add(c, name, CKPT_BYTES, 1, shape, b->src[i],
			      b->len[i], 0, msg, len);
	}
	if (!rc)
		rc = ckpt_commit(c, msg, len);
	*commit = util_now_ns() / 1e9 - t0;
	if (!rc && has_dir) {
		rc = ckpt_wait(c, step, CKPT_LOCAL, 0, msg, len);
		*local = util_now_ns() / 1e9 - t0;
	}
	if (!rc && has_remote) {
		rc = ckpt_wait(c, step, CKPT_REMOTE, 0, msg, len);
		*remote = util_now_ns() / 1e9 - t0;
	}
	return rc;
}

static void json_opt(const char *key, double v, bool have)
{
	if (have)
		printf(", \"%s\": %.6f", key, v);
	else
		printf(", \"%s\": null", key);
}

static void bench_report(const struct fmckpt_opts *o, struct bench *b,
			 const struct ckpt_stats *st)
{
	double gib = (double)o->size / (1024.0 * 1024 * 1024);
	double mc, cm, q, lo = 0, re = 0;

	printf("{\"size_bytes\": %" PRIu64 ", \"tensors\": %u, \"rounds\": %u, "
	       "\"dir\": ", o->size, b->n, o->rounds);
	fmckpt_json_str(stdout, o->dir);
	printf(", \"remote\": ");
	if (o->remote)
		fmckpt_json_str(stdout, o->remote);
	else
		printf("null");
	printf(", \"runs\": [");
	for (unsigned r = 0; r < o->rounds; r++) {
		double x = b->memcpy_s[r] > 0 ? b->commit_s[r] /
			   b->memcpy_s[r] : 0;

		b->ratio[r] = x;
		printf("%s{\"memcpy_s\": %.6f, \"commit_blocking_s\": %.6f, "
		       "\"blocking_over_memcpy\": %.3f", r ? ", " : "",
		       b->memcpy_s[r], b->commit_s[r], x);
		json_opt("local_durable_s", b->local_s[r], o->dir);
		json_opt("remote_durable_s", b->remote_s[r], o->remote);
		printf("}");
	}
	/* The ratio's median is taken over the rounds' own ratios: each
	 * round's memcpy runs next to its save, and this machine's memory
	 * speed drifts between rounds more than the two differ. */
	mc = median(b->memcpy_s, o->rounds);
	cm = median(b->commit_s, o->rounds);
	q = median(b->ratio, o->rounds);
	if (o->dir)
		lo = median(b->local_s, o->rounds);
	if (o->remote)
		re = median(b->remote_s, o->rounds);
	printf("], \"memcpy_s\": %.6f, \"commit_blocking_s\": %.6f, "
	       "\"blocking_over_memcpy\": %.3f", mc, cm, q);
	json_opt("local_durable_s", lo, o->dir);
	json_opt("remote_durable_s", re, o->remote);
	printf(", \"memcpy_gib_s\": %.3f", mc > 0 ? gib / mc : 0);
	json_opt("local_gib_s", lo > 0 ? gib / lo : 0, o->dir);
	json_opt("remote_gib_s", re > 0 ? gib / re : 0, o->remote);
	printf(", \"staging_bytes\": %" PRIu64 ", \"staging_waits\": %" PRIu64
	       ", \"uring\": %s, \"medians_over_rounds\": true}\n",
	       st->staging_bytes, st->staging_waits,
	       st->uring ? "true" : "false");
}

static int bench_check_empty(struct ckpt *c, char *msg, size_t len)
{
	struct ckpt_step_info *v;
	size_t n, inc;
	int rc = ckpt_list(c, &v, &n, &inc, msg, len);

	if (rc)
		return rc;
	free(v);
	if (n || inc) {
		snprintf(msg, len, "the target holds checkpoints already; give "
			 "bench an empty directory or prefix (it writes and "
			 "then removes its own)");
		return -EINVAL;
	}
	return 0;
}

int cmd_bench(const struct fmckpt_opts *o, int argc, char **argv)
{
	struct ckpt_config cfg;
	struct ckpt_stats st;
	struct bench b = { 0 };
	unsigned char *dst = NULL;
	struct ckpt *c = NULL;
	char msg[1024] = "";
	bool ours = false;   /* the target was empty: what is there is ours */
	int rc;

	(void)argv;
	if (argc || !o->size || (!o->dir && !o->remote)) {
		fprintf(stderr, PROG " bench: give --size SIZE and --target "
			"DIR|URL\n");
		return EXIT_USAGE;
	}
	if (o->size < o->tensors) {
		fprintf(stderr, PROG " bench: --size must be at least "
			"--tensors bytes\n");
		return EXIT_USAGE;
	}
	if (bench_alloc(&b, o) || !(dst = bench_dst(o))) {
		bench_free(&b);
		fprintf(stderr, PROG " bench: cannot allocate 2 x %" PRIu64
			" bytes\n", o->size);
		return EXIT_FAIL;
	}
	ckpt_config_init(&cfg);
	cfg.dir = o->dir;
	cfg.remote = o->remote;
	cfg.obj = o->obj;
	cfg.rank = 0;
	cfg.world_size = 1;
	cfg.upload_parallel = o->parallel;
	/* Room for the whole step, as a job sized for its state would. */
	cfg.staging_bytes = o->staging ? o->staging : o->size +
			    (uint64_t)b.n * 64 + (16u << 20);
	rc = ckpt_open(&cfg, &c, msg, sizeof(msg));
	if (!rc)
		rc = bench_check_empty(c, msg, sizeof(msg));
	ours = !rc;
	/* Round 0 warms up, not counted: the memcpy's destination and
	 * staging each get one pass before the clock runs, as in a job's
	 * steady state.  Then each round times a memcpy, a save and a
	 * memcpy, and the faster memcpy is the round's floor: in a virtual
	 * machine a copy into one 1 GiB buffer right after work on others
	 * can cost several times a copy into the buffer used last (here a
	 * memcpy after a memcpy took 0.06-0.13 s, after a save 0.3-0.9 s),
	 * so the floor is the copy with the memory as warm as it gets, and
	 * the save is measured as a job meets it, after other work. */
	for (unsigned r = 0; !rc && r <= o->rounds; r++) {
		double m, m2, cm = 0, lo = 0, re = 0;

		m = bench_memcpy(&b, dst);
		rc = bench_save(c, &b, r + 1, &cm, &lo, &re, o->dir,
				o->remote, msg, sizeof(msg));
		m2 = bench_memcpy(&b, dst);
		if (m2 < m)
			m = m2;
		if (r) {
			b.memcpy_s[r - 1] = m;
			b.commit_s[r - 1] = cm;
			b.local_s[r - 1] = lo;
			b.remote_s[r - 1] = re;
		}
	}
	if (!rc) {
		ckpt_get_stats(c, &st);
		bench_report(o, &b, &st);
	}
	/* Remove everything only from a target seen empty: when the check
	 * itself failed (a listing the store refused or timed out on), the
	 * target may hold a job's checkpoints. */
	if (ours && !o->keep_data)
		ckpt_prune(c, 0, NULL, NULL, 0);
	ckpt_close(c, NULL, 0);
	munmap(dst, o->size ? o->size : 1);
	bench_free(&b);
	return rc ? fmckpt_fail("bench", rc, msg) : EXIT_OK;
}

