/* SPDX-License-Identifier: MIT */
/*
 * gpubench.c - compute throughput of fmtrain's CUDA back end (gpu.h):
 * training steps of a GPT-2-shaped model on random tokens, no loader and
 * no checkpoints, so that what fmtrain --device cuda reaches with real
 * data and checkpoints can be read against the model's own speed.
 *
 *   gpubench [--layers L] [--heads NH] [--channels C] [--seq-len T]
 *            [--batch B] [--vocab V] [--steps N] [--warmup W]
 *            [--peak-tflops F] [--data SHARD] [--cpu]
 *
 * Defaults: GPT-2 124M (12 layers, 12 heads, 768 channels, V 50257
 * padded to 50304), T 1024, B 8, 20 timed steps after 3 warm-up steps.
 * --cpu runs the CPU reference (model.h) instead, for a ratio.
 * --data takes the batch from a shard (fmtrain tokenize) instead of
 * random tokens: the embedding's backward pass depends on how often
 * tokens repeat (a space is every sixth byte of text), the rest not.
 *
 * Model FLOPs utilisation: the FLOPs a step needs by the usual count
 * (6 per parameter per token for the forward and backward matmuls, plus
 * 12 * L * T * C per token for attention's two batched products, without
 * the causal saving), divided by step time and by the GPU's peak dense
 * bf16 rate: --peak-tflops, else 989 for an H100 SXM or H200 and 756 for
 * an H100 PCIe (by device name), else MFU is not printed.
 *
 * Output: one JSON line on stdout.  Exit 0; 77 when there is no GPU (or
 * no CUDA in this build); 1 on a failure; 2 on a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/data.h"
#include "train/gpu.h"
#include "train/model.h"
#include "util/util.h"

static double peak_for(const char *name)
{
	if (strstr(name, "H200") || (strstr(name, "H100") &&
				     (strstr(name, "SXM") ||
				      strstr(name, "HBM3"))))
		return 989.0;
	if (strstr(name, "H100"))
		return 756.0;
	return 0.0;
}

static int usage(void)
{
	fprintf(stderr, "usage: gpubench [--layers L] [--heads NH] "
		"[--channels C] [--seq-len T] [--batch B] [--vocab V] "
		"[--steps N] [--warmup W] [--peak-tflops F] [--data SHARD] "
		"[--cpu]\n");
	return 2;
}

/* The command line into cfg and the run's settings; -1 on a bad one. */
static int parse_args(int argc, char **argv, struct train_config *cfg,
		      unsigned *steps, unsigned *warmup, double *peak,
		      int *cpu, const char **data)
{
	static const struct option opts[] = {
		{ "layers", 1, NULL, 'l' }, { "heads", 1, NULL, 'h' },
		{ "channels", 1, NULL, 'c' }, { "seq-len", 1, NULL, 't' },
		{ "batch", 1, NULL, 'b' }, { "vocab", 1, NULL, 'v' },
		{ "steps", 1, NULL, 's' }, { "warmup", 1, NULL, 'w' },
		{ "peak-tflops", 1, NULL, 'p' }, { "cpu", 0, NULL, 'C' },
		{ "data", 1, NULL, 'd' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		unsigned long v = optarg ? strtoul(optarg, NULL, 10) : 0;

		switch (ch) {
		case 'l': cfg->layers = (unsigned)v; break;
		case 'h': cfg->heads = (unsigned)v; break;
		case 'c': cfg->channels = (unsigned)v; break;
		case 't': cfg->seq_len = (unsigned)v;
			  if (cfg->max_seq_len < v)
				  cfg->max_seq_len = (unsigned)v;
			  break;
		case 'b': cfg->batch = (unsigned)v; break;
		case 'v': cfg->vocab_size = (unsigned)v;
			  cfg->padded_vocab_size = (unsigned)((v + 127) / 128 *
							     128);
			  break;
		case 's': *steps = (unsigned)v; break;
		case 'w': *warmup = (unsigned)v; break;
		case 'p': *peak = strtod(optarg, NULL); break;
		case 'C': *cpu = 1; break;
		case 'd': *data = optarg; break;
		default: return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct train_config cfg;
	struct train_gpu *g = NULL;
	struct train_model *m = NULL;
	unsigned steps = 20, warmup = 3;
	double peak = 0.0, t0 = 0.0, secs, flops, tok_s;
	char name[256] = "cpu", msg[512];
	const char *data = NULL;
	int32_t *inp, *tgt;
	size_t N, np;
	float loss = NAN;
	int rc, cpu = 0;

	train_config_init(&cfg);
	cfg.seq_len = 1024;
	cfg.batch = 8;
	if (parse_args(argc, argv, &cfg, &steps, &warmup, &peak, &cpu,
		       &data))
		return usage();
	if (optind != argc || !steps)
		return usage();
	if (train_config_check(&cfg, NULL, msg, sizeof(msg))) {
		fprintf(stderr, "gpubench: %s\n", msg);
		return 2;
	}
	if (cpu) {
		rc = train_model_init(&cfg, &m, msg, sizeof(msg));
	} else {
		rc = train_gpu_probe(name, sizeof(name), msg, sizeof(msg));
		if (rc == -ENOTSUP || rc == -ENODEV) {
			printf("SKIP: %s\n", msg);
			return 77;
		}
		if (!rc)
			rc = train_gpu_init(&cfg, NULL, &g, msg, sizeof(msg));
	}
	if (rc) {
		fprintf(stderr, "gpubench: %s\n", msg);
		return 1;
	}
	if (!peak && !cpu)
		peak = peak_for(name);

	N = (size_t)cfg.batch * cfg.seq_len;
	inp = malloc(N * sizeof(*inp));
	tgt = malloc(N * sizeof(*tgt));
	if (!inp || !tgt)
		return 1;
	srand(1);
	for (size_t i = 0; i < N; i++) {
		inp[i] = rand() % (int)cfg.vocab_size;
		tgt[i] = rand() % (int)cfg.vocab_size;
	}
	if (data) {
		uint32_t *tok;
		uint64_t n;

		if (train_shard_read(data, cfg.vocab_size, &tok, &n, NULL, msg,
				     sizeof(msg))) {
			fprintf(stderr, "gpubench: --data %s: %s\n", data, msg);
			return 1;
		}
		if (n < N + 1) {
			fprintf(stderr, "gpubench: --data %s: %llu tokens, a "
				"batch needs %zu\n", data,
				(unsigned long long)n, N + 1);
			return 1;
		}
		for (size_t i = 0; i < N; i++) {
			inp[i] = (int32_t)tok[i];
			tgt[i] = (int32_t)tok[i + 1];
		}
		free(tok);
	}
	for (unsigned s = 0; s < warmup + steps; s++) {
		if (s == warmup)
			t0 = util_now_ns() / 1e9;
		rc = cpu ? train_step(m, inp, tgt, &loss, msg, sizeof(msg))
			 : train_gpu_step(g, inp, tgt, &loss, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "gpubench: step %u: %s\n", s, msg);
			return 1;
		}
	}
	secs = util_now_ns() / 1e9 - t0;
	np = cpu ? train_model_num_params(m) : train_gpu_num_params(g);
	flops = (6.0 * (double)np + 12.0 * cfg.layers * cfg.seq_len *
		 cfg.channels) * (double)N * steps;
	tok_s = (double)N * steps / secs;
	printf("{\"device\":\"%s\",\"params\":%zu,\"layers\":%u,"
	       "\"channels\":%u,\"heads\":%u,\"seq_len\":%u,\"batch\":%u,"
	       "\"steps\":%u,\"ms_per_step\":%.2f,\"tokens_per_s\":%.0f,"
	       "\"tflops\":%.1f", name, np, cfg.layers, cfg.channels,
	       cfg.heads, cfg.seq_len, cfg.batch, steps, secs * 1e3 / steps,
	       tok_s, flops / secs / 1e12);
	if (peak > 0)
		printf(",\"peak_tflops\":%.0f,\"mfu\":%.3f", peak,
		       flops / secs / 1e12 / peak);
	printf(",\"loss\":%.4f", loss);
	if (g) {
		char k[128];

		printf(",\"kernels\":\"%s\"",
		       train_gpu_kernels(g, k, sizeof(k)));
	}
	printf("}\n");
	train_gpu_free(g);
	train_model_free(m);
	free(inp);
	free(tgt);
	return 0;
}
