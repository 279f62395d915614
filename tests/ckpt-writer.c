/* SPDX-License-Identifier: MIT */
/*
 * ckpt-writer.c - a stand-in for a training job, for the checkpoint
 * integration tests (tests/integration/70-ckpt.sh): it saves steps of
 * tensors whose every byte is a function of (seed, step, rank, tensor),
 * so any load can be checked byte for byte, and says on stdout what is
 * durable as soon as libfmckpt says so.  The crash tests kill it with
 * SIGKILL at random moments and then run `ckpt-writer check`.
 *
 *   ckpt-writer save  [--dir D] [--remote URL] [--first N] [--count K]
 *                     [--tensors T] [--size BYTES] [--wait none|local|
 *                     remote] [--keep-local N] [--keep-remote N]
 *                     [--staging BYTES] [--barrier-timeout MS] [--rss]
 *                     [--node-local [--commit-on-nodes]] [--times]
 *       prints "committed STEP", then (with --wait; "nodes" for
 *       CKPT_NODES with --commit-on-nodes) "durable STEP", and
 *       with --rss "rss STEP KB" (VmRSS from /proc/self/status)
 *   ckpt-writer check [--dir D] [--remote URL] [--step N]
 *                     [--tensors T] [--size BYTES]
 *       loads the newest complete checkpoint (or step N) for this RANK,
 *       checks every byte, prints "loaded STEP" (and with --node-local,
 *       where the directory is this node's own, "served node BYTES
 *       remote BYTES damaged N": ckpt_stats' load_ counters); exit 4 if
 *       there is none, 1 if anything is wrong
 *   --times (both): save prints "times STEP commit_s C local_s L
 *       remote_s R" (ckpt_stats: how long the commit blocked, and from
 *       the commit until the step was durable on the disk and in the
 *       store), check "load_s S" (the ckpt_load call), for
 *       tools/bench/bench-ckpt-nodes.sh
 *
 * RANK and WORLD_SIZE come from the environment, as in a real job.
 * FMCKPT_CRASH_AT=POINT (and FMCKPT_CRASH_STEP=N, else any step) makes
 * the writer kill itself with SIGKILL at that named point of a commit:
 * it installs the library's test hook (ckpt_crash_hook, ckpt_int.h);
 * the library itself reads neither variable.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_int.h"   /* ckpt_crash_hook */

struct opts {
	const char *dir, *remote;
	uint64_t first, count, step;
	unsigned tensors;
	uint64_t size;
	const char *wait;
	unsigned keep_local, keep_remote;
	uint64_t staging;
	unsigned barrier_ms;
	bool rss;
	bool node_local, commit_on_nodes;
	bool times;
	uint32_t seed;
};

static const enum ckpt_dtype kinds[] = {
	CKPT_F32, CKPT_BF16, CKPT_U8, CKPT_F64, CKPT_I32, CKPT_F16,
	CKPT_I64, CKPT_BYTES, CKPT_BOOL, CKPT_I16,
};

/* Tensor i of a step: odd element counts, sizes summing to ~size. */
static void tensor_shape(const struct opts *o, unsigned i,
			 enum ckpt_dtype *dt, int64_t shape[2],
			 unsigned *ndim, uint64_t *bytes)
{
	uint64_t per = o->size / o->tensors, n;
	size_t es;

	*dt = kinds[i % (sizeof(kinds) / sizeof(kinds[0]))];
	es = ckpt_dtype_size(*dt);
	n = per / es + (i * 37) % 101;  /* odd sizes */
	if (*dt == CKPT_BYTES || i % 3) {
		*ndim = 1;
		shape[0] = (int64_t)n;
	} else {
		*ndim = 2;
		shape[0] = 3;
		shape[1] = (int64_t)(n / 3);
		n = (n / 3) * 3;
	}
	*bytes = n * es;
}

static void fill(uint64_t step, unsigned rank, unsigned i, unsigned char *p,
		 uint64_t len)
{
	uint64_t x = step * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 40) ^
		     ((uint64_t)i << 20) ^ 0x5bd1e995ull;

	for (uint64_t k = 0; k < len; k += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + k, &x, len - k < 8 ? len - k : 8);
	}
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static const char *g_crash_at;
static uint64_t g_crash_step = CKPT_STEP_LATEST;

static void crash_hook(const char *point, uint64_t step)
{
	if (!strcmp(point, g_crash_at) &&
	    (g_crash_step == CKPT_STEP_LATEST || g_crash_step == step))
		raise(SIGKILL);
}

static void crash_hook_init(void)
{
	const char *at = getenv("FMCKPT_CRASH_AT");
	const char *step = getenv("FMCKPT_CRASH_STEP");

	if (!at || !*at)
		return;
	g_crash_at = at;
	if (step && *step)
		g_crash_step = strtoull(step, NULL, 10);
	ckpt_crash_hook = crash_hook;
}

static int open_store(const struct opts *o, bool read_only, struct ckpt **c)
{
	struct ckpt_config cfg;
	char msg[1024];
	int rc;

	ckpt_config_init(&cfg);
	cfg.dir = o->dir;
	cfg.remote = o->remote;
	cfg.read_only = read_only;
	cfg.keep_local = o->keep_local;
	cfg.keep_remote = o->keep_remote;
	cfg.staging_bytes = o->staging;
	cfg.barrier_timeout_ms = o->barrier_ms;
	cfg.node_local = o->node_local;
	cfg.commit_on_nodes = o->commit_on_nodes;
	rc = ckpt_open(&cfg, c, msg, sizeof(msg));
	if (rc)
		fprintf(stderr, "ckpt-writer: %s\n", msg);
	return rc;
}

static unsigned env_rank(void)
{
	const char *v = getenv("RANK");

	return v ? (unsigned)atoi(v) : 0;
}

static int do_save(const struct opts *o)
{
	unsigned char **bufs = calloc(o->tensors, sizeof(*bufs));
	enum ckpt_level lvl = !strcmp(o->wait, "remote") ? CKPT_REMOTE :
			      !strcmp(o->wait, "nodes") ? CKPT_NODES :
			      CKPT_LOCAL;
	bool wait = strcmp(o->wait, "none") != 0;
	struct ckpt *c;
	char msg[1024];
	int rc = 0;

	if (!bufs || open_store(o, false, &c))
		return 1;
	for (uint64_t s = o->first; s < o->first + o->count && !rc; s++) {
		rc = ckpt_begin(c, s, msg, sizeof(msg));
		for (unsigned i = 0; i < o->tensors && !rc; i++) {
			enum ckpt_dtype dt;
			int64_t shape[2];
			unsigned ndim;
			uint64_t bytes;
			char name[64];

			tensor_shape(o, i, &dt, shape, &ndim, &bytes);
			if (!bufs[i] && !(bufs[i] = malloc(bytes + 1)))
				return 1;
			fill(s, env_rank(), i, bufs[i], bytes);
			snprintf(name, sizeof(name), "layer%u.%s", i,
				 ckpt_dtype_name(dt));
			rc = ckpt_add(c, name, dt, ndim, shape, bufs[i], bytes,
				      0, msg, sizeof(msg));
		}
		if (!rc)
			rc = ckpt_commit(c, msg, sizeof(msg));
		if (rc)
			break;
		printf("committed %" PRIu64 "\n", s);
		fflush(stdout);
		if (wait) {
			rc = ckpt_wait(c, s, lvl, 0, msg, sizeof(msg));
			if (rc)
				break;
			printf("durable %" PRIu64 "\n", s);
		}
		if (o->rss)
			printf("rss %" PRIu64 " %ld\n", s, rss_kb());
		if (o->times && wait) {
			struct ckpt_stats st;

			/* the sums over one step each, when saved one by one */
			ckpt_get_stats(c, &st);
			printf("times %" PRIu64 " commit_s %.6f local_s %.6f "
			       "remote_s %.6f\n", s, st.commit_last_ns / 1e9,
			       st.local_total_ns / 1e9,
			       st.remote_total_ns / 1e9);
		}
		fflush(stdout);
	}
	if (rc)
		fprintf(stderr, "ckpt-writer: %s\n", msg);
	if (ckpt_close(c, msg, sizeof(msg)) && !rc) {
		fprintf(stderr, "ckpt-writer: close: %s\n", msg);
		rc = 1;
	}
	for (unsigned i = 0; i < o->tensors; i++)
		free(bufs[i]);
	free(bufs);
	return rc ? 1 : 0;
}

static int do_check(const struct opts *o)
{
	struct ckpt_buf *b = calloc(o->tensors, sizeof(*b));
	char (*names)[64] = calloc(o->tensors, sizeof(*names));
	unsigned rank = env_rank();
	unsigned char *want = NULL;
	uint64_t loaded = 0, t0, t1;
	struct ckpt *c;
	char msg[2048];
	int rc;

	rc = b && names ? open_store(o, true, &c) : -ENOMEM;
	if (rc) {
		free(b);
		free(names);
		/* No directory yet (killed before it was made): none. */
		return rc == -ENOENT ? 4 : 1;
	}
	for (unsigned i = 0; i < o->tensors; i++) {
		enum ckpt_dtype dt;
		int64_t shape[2];
		unsigned ndim;

		tensor_shape(o, i, &dt, shape, &ndim, &b[i].size_bytes);
		snprintf(names[i], sizeof(names[i]), "layer%u.%s", i,
			 ckpt_dtype_name(dt));
		b[i].name = names[i];
		b[i].data = malloc(b[i].size_bytes + 1);
		if (!b[i].data)
			return 1;
	}
	t0 = util_now_ns();
	rc = ckpt_load(c, o->step, b, o->tensors, &loaded, msg, sizeof(msg));
	t1 = util_now_ns();
	if (rc) {
		fprintf(stderr, "ckpt-writer: %s\n", msg);
		rc = rc == -ENOENT ? 4 : 1;
		goto out;
	}
	if (msg[0])
		fprintf(stderr, "ckpt-writer: %s\n", msg);
	for (unsigned i = 0; i < o->tensors && !rc; i++) {
		free(want);
		want = malloc(b[i].size_bytes + 1);
		if (!want)
			return 1;
		fill(loaded, rank, i, want, b[i].size_bytes);
		if (memcmp(want, b[i].data, b[i].size_bytes)) {
			fprintf(stderr, "ckpt-writer: step %" PRIu64 " tensor "
				"%s: bytes differ from what was saved\n",
				loaded, b[i].name);
			rc = 1;
		}
	}
	if (!rc) {
		struct ckpt_stats st;

		ckpt_get_stats(c, &st);
		printf("loaded %" PRIu64 "\n", loaded);
		if (o->times)
			printf("load_s %.6f\n", (t1 - t0) / 1e9);
		if (o->node_local)
			printf("served node %" PRIu64 " remote %" PRIu64
			       " damaged %" PRIu64 "\n", st.load_node_bytes,
			       st.load_remote_bytes, st.load_node_damaged);
	}
out:
	free(want);
	for (unsigned i = 0; i < o->tensors; i++)
		free(b[i].data);
	free(b);
	free(names);
	ckpt_close(c, NULL, 0);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", required_argument, 0, 'd' },
		{ "remote", required_argument, 0, 'r' },
		{ "first", required_argument, 0, 'f' },
		{ "count", required_argument, 0, 'n' },
		{ "step", required_argument, 0, 's' },
		{ "tensors", required_argument, 0, 't' },
		{ "size", required_argument, 0, 'z' },
		{ "wait", required_argument, 0, 'w' },
		{ "keep-local", required_argument, 0, 'L' },
		{ "keep-remote", required_argument, 0, 'R' },
		{ "staging", required_argument, 0, 'S' },
		{ "barrier-timeout", required_argument, 0, 'b' },
		{ "rss", no_argument, 0, 'm' },
		{ "node-local", no_argument, 0, 'N' },
		{ "times", no_argument, 0, 'T' },
		{ "commit-on-nodes", no_argument, 0, 'C' },
		{ NULL, 0, NULL, 0 }
	};
	struct opts o = {
		.first = 1, .count = 1, .step = CKPT_STEP_LATEST,
		.tensors = 13, .size = 3u << 20, .wait = "local",
	};
	int ch;

	if (argc < 2) {
		fprintf(stderr, "usage: ckpt-writer save|check [options] "
			"(see tests/ckpt-writer.c)\n");
		return 2;
	}
	crash_hook_init();
	optind = 2;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'd': o.dir = optarg; break;
		case 'r': o.remote = optarg; break;
		case 'f': o.first = strtoull(optarg, NULL, 10); break;
		case 'n': o.count = strtoull(optarg, NULL, 10); break;
		case 's': o.step = strtoull(optarg, NULL, 10); break;
		case 't': o.tensors = (unsigned)atoi(optarg); break;
		case 'z': o.size = strtoull(optarg, NULL, 10); break;
		case 'w': o.wait = optarg; break;
		case 'L': o.keep_local = (unsigned)atoi(optarg); break;
		case 'R': o.keep_remote = (unsigned)atoi(optarg); break;
		case 'S': o.staging = strtoull(optarg, NULL, 10); break;
		case 'b': o.barrier_ms = (unsigned)atoi(optarg); break;
		case 'm': o.rss = true; break;
		case 'N': o.node_local = true; break;
		case 'T': o.times = true; break;
		case 'C': o.commit_on_nodes = true; break;
		default: return 2;
		}
	}
	if (!o.tensors || o.size < o.tensors * 64)
		return 2;
	if (!strcmp(argv[1], "save"))
		return do_save(&o);
	if (!strcmp(argv[1], "check"))
		return do_check(&o);
	fprintf(stderr, "ckpt-writer: unknown command '%s'\n", argv[1]);
	return 2;
}
