/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_train.c - `fmtrain train`: one subcommand, cmd_train(): its
 * options, what no single option can check (the model's shape, options
 * that need --ckpt), the world of ranks from RANK, WORLD_SIZE and
 * LOCAL_RANK and where they meet, then the run (fmtrain_run(),
 * fmtrain_run.c) with the options as parsed (struct fmtrain_opts,
 * fmtrain.h).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmtrain.h"
#include "metrics/metrics.h"

/* The defaults: a model that trains in seconds on a 2-core CPU. */
#define DEF_LAYERS 2
#define DEF_HEADS 2
#define DEF_CHANNELS 64
#define DEF_SEQ_LEN 64
#define DEF_BATCH 4
#define DEF_STEPS 100
#define DEF_LR 1e-3f
#define DEF_SEED 1337
#define PAD_FROM 4096u     /* vocabularies above are padded by default */

static int parse_u64(const char *opt, const char *v, uint64_t min,
		     uint64_t max, uint64_t *out)
{
	char want[96];

	if (tools_parse_u64(v, min, max, out)) {
		snprintf(want, sizeof(want), "a whole number from %" PRIu64
			 " to %" PRIu64, min, max);
		return tools_bad_opt(PROG, opt, v, want);
	}
	return 0;
}

static int parse_uns(const char *opt, const char *v, unsigned min,
		     unsigned max, unsigned *out)
{
	uint64_t x;

	if (parse_u64(opt, v, min, max, &x))
		return -1;
	*out = (unsigned)x;
	return 0;
}

static int parse_pos_double(const char *opt, const char *v, double *out)
{
	if (tools_parse_double(v, out) || *out <= 0)
		return tools_bad_opt(PROG, opt, v, "a number above 0");
	return 0;
}

/* RANK, WORLD_SIZE and LOCAL_RANK, as torchrun sets them.  Several
 * ranks need a back end that runs as several processes (--device cuda):
 * the CPU one has no gradient all-reduce. */
static int parse_world(struct fmtrain_opts *o)
{
	const char *w = getenv("WORLD_SIZE"), *r = getenv("RANK");
	const char *l = getenv("LOCAL_RANK");
	uint64_t n = 1, rank = 0, local;

	if (w && *w && parse_u64("WORLD_SIZE", w, 1, TRAIN_WORLD_MAX, &n))
		return -1;
	if (n > 1 && !o->backend->ranks) {
		fprintf(stderr, PROG ": WORLD_SIZE=%s: --device %s runs as one "
			"process; several ranks (one process per GPU) need "
			"--device cuda.  Unset WORLD_SIZE or set it to 1\n", w,
			o->backend->name);
		return -1;
	}
	if (r && *r && parse_u64("RANK", r, 0, TRAIN_WORLD_MAX - 1, &rank))
		return -1;
	if (n > 1 && (!r || !*r)) {
		fprintf(stderr, PROG ": WORLD_SIZE=%s but no RANK: set RANK to "
			"this process's rank, 0 to %" PRIu64 " (torchrun sets "
			"both)\n", w, n - 1);
		return -1;
	}
	if (rank >= n) {
		fprintf(stderr, PROG ": RANK=%s with a world of %" PRIu64
			" process(es): give 0 <= RANK < WORLD_SIZE, or unset "
			"RANK for one process\n", r, n);
		return -1;
	}
	local = rank;   /* one machine, unless told otherwise */
	if (l && *l && parse_u64("LOCAL_RANK", l, 0, TRAIN_WORLD_MAX - 1,
				 &local))
		return -1;
	o->world.rank = (unsigned)rank;
	o->world.world_size = (unsigned)n;
	o->world.local_rank = (unsigned)local;
	return 0;
}

/* Several ranks meet at --rendezvous, else at rank 0's MASTER_ADDR and
 * MASTER_PORT.  torchrun's own store listens on MASTER_PORT when it
 * sets TORCHELASTIC_USE_AGENT_STORE=True, so then the port above it. */
static int pick_rendezvous(struct fmtrain_opts *o)
{
	static char buf[320];
	const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
	const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
	char msg[1024] = "";
	uint64_t p;

	if (o->rendezvous) {
		/* a world of one: the where is parsed, nothing else done */
		if (train_rendezvous(o->rendezvous, "", 0, 1, NULL, 0, 0, msg,
				     sizeof(msg))) {
			fprintf(stderr, PROG ": --%s\n", msg);
			return -1;
		}
		return 0;
	}
	if (o->world.world_size == 1)
		return 0;
	if (!addr || !*addr || !port || !*port) {
		fprintf(stderr, PROG ": WORLD_SIZE=%u: the ranks meet at rank "
			"0: set MASTER_ADDR and MASTER_PORT (rank 0's address "
			"and a free port; torchrun sets them), or give "
			"--rendezvous tcp:HOST:PORT or file:PATH (a file every "
			"rank sees)\n", o->world.world_size);
		return -1;
	}
	if (parse_u64("MASTER_PORT", port, 1, 65535, &p))
		return -1;
	if (agent && !strcmp(agent, "True")) {
		if (p == 65535) {
			fprintf(stderr, PROG ": MASTER_PORT=65535 is torchrun's "
				"own; give --rendezvous tcp:HOST:PORT\n");
			return -1;
		}
		p++;
	}
	if (strlen(addr) > 255) {
		fprintf(stderr, PROG ": MASTER_ADDR is longer than 255 bytes\n");
		return -1;
	}
	snprintf(buf, sizeof(buf), strchr(addr, ':') ? "tcp:[%s]:%" PRIu64 :
		 "tcp:%s:%" PRIu64, addr, p);
	o->rendezvous = buf;
	return 0;
}

static int add_ckpt(struct fmtrain_opts *o, const char *t)
{
	if (!strncmp(t, "s3://", 5) || !strncmp(t, "file://", 7)) {
		if (o->ckpt_remote) {
			fprintf(stderr, PROG ": two remote --ckpt targets "
				"('%s', '%s'): give one\n", o->ckpt_remote, t);
			return -1;
		}
		o->ckpt_remote = t;
	} else if (strstr(t, "://") || !*t) {
		return tools_bad_opt(PROG, "--ckpt", t, "a directory, "
				     "s3://BUCKET/PREFIX or file:///DIR");
	} else {
		if (o->ckpt_dir) {
			fprintf(stderr, PROG ": two --ckpt directories ('%s', "
				"'%s'): give one\n", o->ckpt_dir, t);
			return -1;
		}
		o->ckpt_dir = t;
	}
	return 0;
}

enum {
	OPT_DATA = 256, OPT_LAYERS, OPT_HEADS, OPT_CHANNELS, OPT_SEQ,
	OPT_BATCH, OPT_VOCAB, OPT_PADDED, OPT_STEPS, OPT_LR, OPT_SEED,
	OPT_THREADS,
	OPT_CKPT, OPT_EVERY, OPT_SECS, OPT_MTBF, OPT_KEEP, OPT_STAGING,
	OPT_RESUME, OPT_CSV, OPT_METRICS, OPT_DEVICE, OPT_RDV, OPT_RDV_TIMEOUT, OPT_JOB,
};

static int parse_job(const char *v)
{
	size_t n = strlen(v);

	if (!n || n > FMTRAIN_JOB_MAX ||
	    strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "0123456789._:-") != n)
		return tools_bad_opt(PROG, "--job", v, "1 to 200 letters, "
				     "digits and '.', '_', ':', '-'");
	return 0;
}

static int train_opt(struct fmtrain_opts *o, int ch, const char *v)
{
	struct train_config *m = &o->model;
	double d;
	uint64_t x;

	switch (ch) {
	case OPT_DATA:
		if (o->ndata == FMTRAIN_DATA_MAX) {
			fprintf(stderr, PROG ": more than %d --data paths: give "
				"directories of shards\n", FMTRAIN_DATA_MAX);
			return -1;
		}
		o->data[o->ndata++] = v;
		return 0;
	case OPT_LAYERS:
		return parse_uns("--layers", v, 1, TRAIN_LAYERS_MAX, &m->layers);
	case OPT_HEADS:
		return parse_uns("--heads", v, 1, TRAIN_CHANNELS_MAX, &m->heads);
	case OPT_CHANNELS:
		return parse_uns("--channels", v, 1, TRAIN_CHANNELS_MAX,
				 &m->channels);
	case OPT_SEQ:
		return parse_uns("--seq-len", v, 1, TRAIN_SEQ_LEN_MAX,
				 &m->seq_len);
	case OPT_BATCH:
		return parse_uns("--batch", v, 1, TRAIN_POSITIONS_MAX, &m->batch);
	case OPT_VOCAB:
		return parse_uns("--vocab", v, 1, TRAIN_VOCAB_MAX,
				 &m->vocab_size);
	case OPT_PADDED:
		return parse_uns("--padded-vocab", v, 1, TRAIN_VOCAB_MAX,
				 &m->padded_vocab_size);
	case OPT_STEPS:
		return parse_u64("--steps", v, 0, UINT64_MAX - 1, &o->steps);
	case OPT_LR:
		if (parse_pos_double("--lr", v, &d))
			return -1;
		if (d > 10)
			return tools_bad_opt(PROG, "--lr", v, "a learning rate "
					     "above 0 and at most 10");
		m->learning_rate = (float)d;
		return 0;
	case OPT_SEED:
		return parse_u64("--seed", v, 0, UINT64_MAX, &m->seed);
	case OPT_THREADS:
		return parse_uns("--threads", v, 1, 4096, &o->threads);
	case OPT_CKPT:
		return add_ckpt(o, v);
	case OPT_EVERY:
		return parse_u64("--ckpt-every", v, 1, UINT64_MAX - 1,
				 &o->ckpt_every);
	case OPT_SECS:
		return parse_pos_double("--ckpt-secs", v, &o->ckpt_secs);
	case OPT_MTBF:
		return parse_pos_double("--ckpt-mtbf", v, &o->ckpt_mtbf_h);
	case OPT_KEEP:
		return parse_uns("--keep", v, 1, 1000000, &o->keep);
	case OPT_STAGING:
		if (tools_parse_size(v, &o->staging_bytes) || !o->staging_bytes)
			return tools_bad_opt(PROG, "--ckpt-staging", v,
					     "a size like 64M or 1G");
		return 0;
	case OPT_RESUME:
		o->resume = true;
		o->resume_step = CKPT_STEP_LATEST;
		if (v && parse_u64("--resume", v, 0, UINT64_MAX - 1, &x))
			return -1;
		if (v)
			o->resume_step = x;
		return 0;
	case OPT_DEVICE:
		if (!strcmp(v, "cpu"))
			o->backend = &fmtrain_cpu_backend;
		else if (!strcmp(v, "cuda"))
			o->backend = &fmtrain_cuda_backend;
		else
			return tools_bad_opt(PROG, "--device", v,
					     "cpu or cuda");
		return 0;
	case OPT_RDV: o->rendezvous = v; return 0;
	case OPT_RDV_TIMEOUT:
		return parse_uns("--rendezvous-timeout", v, 1, 86400,
				 &o->rendezvous_timeout_s);
	case OPT_JOB:
		o->job = v;
		return parse_job(v);
	case OPT_CSV: o->csv = v; return 0;
	case OPT_METRICS: {
		char why[300];

		if (metrics_addr_check(v, why, sizeof(why)))
			return tools_bad_opt(PROG, "--metrics", v,
					     "ADDRESS:PORT, like 127.0.0.1:9200 "
					     "or :9200");
		o->metrics = v;
		return 0;
	}
	default:
		return -1;
	}
}

/* What no single option can check. */
static int train_check(struct fmtrain_opts *o)
{
	const struct train_config *m = &o->model;
	bool ckpt = o->ckpt_dir || o->ckpt_remote;

	if (!o->ndata) {
		fprintf(stderr, PROG " train: give --data PATH (a shard or a "
			"directory of shards; make them with `fmtrain "
			"tokenize`)\n");
		return -1;
	}
	if (m->padded_vocab_size < m->vocab_size) {
		fprintf(stderr, PROG ": --padded-vocab %u is below --vocab %u: "
			"give at least the vocabulary (rows past it are "
			"padding)\n", m->padded_vocab_size, m->vocab_size);
		return -1;
	}
	if (m->channels % m->heads) {
		fprintf(stderr, PROG ": --heads %u does not divide --channels "
			"%u: each head gets channels / heads of them; give "
			"e.g. --heads %u\n", m->heads, m->channels,
			m->channels % 2 ? 1 : 2);
		return -1;
	}
	if (!ckpt && (o->resume || o->ckpt_every || o->ckpt_secs > 0 ||
		      o->ckpt_mtbf_h > 0 || o->keep || o->staging_bytes)) {
		fprintf(stderr, PROG ": %s needs --ckpt DIR|URL (where the "
			"checkpoints are)\n", o->resume ? "--resume" :
			"a checkpoint option");
		return -1;
	}
	if (parse_world(o))
		return -1;
	return pick_rendezvous(o);
}

int cmd_train(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "data", required_argument, 0, OPT_DATA },
		{ "layers", required_argument, 0, OPT_LAYERS },
		{ "heads", required_argument, 0, OPT_HEADS },
		{ "channels", required_argument, 0, OPT_CHANNELS },
		{ "seq-len", required_argument, 0, OPT_SEQ },
		{ "batch", required_argument, 0, OPT_BATCH },
		{ "vocab", required_argument, 0, OPT_VOCAB },
		{ "padded-vocab", required_argument, 0, OPT_PADDED },
		{ "steps", required_argument, 0, OPT_STEPS },
		{ "lr", required_argument, 0, OPT_LR },
		{ "seed", required_argument, 0, OPT_SEED },
		{ "threads", required_argument, 0, OPT_THREADS },
		{ "ckpt", required_argument, 0, OPT_CKPT },
		{ "ckpt-every", required_argument, 0, OPT_EVERY },
		{ "ckpt-secs", required_argument, 0, OPT_SECS },
		{ "ckpt-mtbf", required_argument, 0, OPT_MTBF },
		{ "keep", required_argument, 0, OPT_KEEP },
		{ "ckpt-staging", required_argument, 0, OPT_STAGING },
		{ "resume", optional_argument, 0, OPT_RESUME },
		{ "csv", required_argument, 0, OPT_CSV },
		{ "metrics", required_argument, 0, OPT_METRICS },
		{ "device", required_argument, 0, OPT_DEVICE },
		{ "rendezvous", required_argument, 0, OPT_RDV },
		{ "rendezvous-timeout", required_argument, 0, OPT_RDV_TIMEOUT },
		{ "job", required_argument, 0, OPT_JOB },
		TOOLS_OBJ_OPTIONS,
		{ "help", no_argument, 0, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static struct fmtrain_opts o;   /* FMTRAIN_DATA_MAX pointers */
	int ch;

	train_config_init(&o.model);
	o.model.layers = DEF_LAYERS;
	o.model.heads = DEF_HEADS;
	o.model.channels = DEF_CHANNELS;
	o.model.seq_len = DEF_SEQ_LEN;
	o.model.batch = DEF_BATCH;
	o.model.vocab_size = TRAIN_BYTE_VOCAB;
	o.model.padded_vocab_size = 0;
	o.model.learning_rate = DEF_LR;
	o.model.seed = DEF_SEED;
	o.steps = DEF_STEPS;
	o.backend = &fmtrain_cpu_backend;
	o.rendezvous_timeout_s = FMTRAIN_RDV_TIMEOUT_S;
	obj_config_init(&o.obj);
	argv[0] = (char *)PROG " train";   /* getopt's messages */
	optind = 1;
	while ((ch = tools_getopt(argc, argv, "h", lo, &o.obj)) != -1) {
		if (ch == 'h') {
			fmtrain_usage(stdout);
			return EXIT_OK;
		}
		if (ch == '?') /* named by tools_getopt */
			return EXIT_USAGE;
		if (train_opt(&o, ch, optarg))
			return EXIT_USAGE;
	}
	if (optind < argc) {
		fprintf(stderr, PROG " train: unexpected argument '%s' (%s)\n",
			argv[optind], o.resume ? "a step to resume is given "
			"as --resume=STEP" : "data is given with --data PATH");
		return EXIT_USAGE;
	}
	o.model.max_seq_len = o.model.seq_len;
	/* A large vocabulary padded to a multiple of 128 rows (GPT-2's 50257
	 * to 50304), as llm.c does: cuBLAS ran the tied head on slow fallback
	 * kernels for unaligned rows (15 ms a step at B 8 on an H200,
	 * docs/gpu.md).  A small one as it is: the byte tokenizer's 257
	 * would grow by half. */
	if (!o.model.padded_vocab_size)
		o.model.padded_vocab_size = o.model.vocab_size > PAD_FROM ?
			(o.model.vocab_size + 127) / 128 * 128 :
			o.model.vocab_size;
	if (train_check(&o))
		return EXIT_USAGE;
	return fmtrain_run(&o);
}

