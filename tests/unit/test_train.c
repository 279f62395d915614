/* SPDX-License-Identifier: MIT */
/*
 * test_train.c - cmocka tests of the trainer's CPU reference (train/):
 * every parameter tensor's gradient against central finite differences on
 * a tiny model; the loss falling on a learnable sequence under AdamW;
 * bit-identical runs from one seed, whatever the thread count, and after
 * the state is copied into another model (what a resume does); rejected
 * configurations, tokens and call orders; the tensor list; and a few
 * layers against their definitions (matmul, layernorm, GELU, softmax, the
 * causal mask, the initialisation).
 *
 * Fast on purpose (tiny models): a few seconds on 2 cores, also under
 * ASan + UBSan.  TEST_TRAIN_VERBOSE=1 prints the gradient check of every
 * tensor; TEST_TRAIN_FILTER=GLOB runs only the tests it matches.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "helpers.h"
#include "train/model.h"
#include "train/train_int.h"

/* L=2, NH=2, C=8, T=4, V=16 padded to 20, B=2. */
static void tiny_config(struct train_config *cfg)
{
	train_config_init(cfg);
	cfg->layers = 2;
	cfg->heads = 2;
	cfg->channels = 8;
	cfg->max_seq_len = 8;
	cfg->vocab_size = 16;
	cfg->padded_vocab_size = 20;
	cfg->batch = 2;
	cfg->seq_len = 4;
	cfg->seed = 42;
}

static void random_tokens(struct train_rng *r, int32_t *tok, size_t n,
			  unsigned V)
{
	for (size_t i = 0; i < n; i++)
		tok[i] = (int32_t)(train_rng_next(r) % V);
}

static struct train_model *new_model(const struct train_config *cfg)
{
	struct train_model *m = NULL;
	char msg[256] = "";

	assert_ok(train_model_init(cfg, &m, msg, sizeof(msg)), msg);
	assert_non_null(m);
	return m;
}

/* ---- (1) gradients against finite differences ---- */

/* Loss of the current parameters, summed in double from the
 * probabilities (the float mean would throw away digits). */
static double loss_of(struct train_model *m, const int32_t *in,
		      const int32_t *tgt)
{
	const struct train_config *cfg = train_model_config(m);
	size_t N = (size_t)cfg->batch * cfg->seq_len;
	size_t Vp = cfg->padded_vocab_size;
	const float *probs;
	double sum = 0.0;
	char msg[256] = "";

	assert_ok(train_forward(m, in, tgt, NULL, msg, sizeof(msg)), msg);
	probs = train_model_probs(m);
	for (size_t n = 0; n < N; n++)
		sum -= log((double)probs[n * Vp + (size_t)tgt[n]]);
	return sum / (double)N;
}

/* Parameters far from the initial ones, so every path carries a real
 * gradient: weights ~ 0.3, layernorm weights around 1, biases not 0, and
 * the padded rows of wte too (their gradient must still come out 0). */
static void scramble_params(struct train_model *m, uint64_t seed)
{
	struct train_tensor t[TRAIN_PARAM_TENSORS];
	struct train_rng r;

	train_rng_seed(&r, seed);
	train_model_tensors(m, t, TRAIN_PARAM_TENSORS);
	for (unsigned i = 0; i < TRAIN_PARAM_TENSORS; i++) {
		bool ln_w = strstr(t[i].name, "ln") && strstr(t[i].name, "_w");

		for (size_t k = 0; k < t[i].count; k++)
			t[i].data[k] = (ln_w ? 1.0f : 0.0f) +
				       0.3f * train_rng_normal(&r);
	}
}

/* Checks GRAD_SAMPLES entries of each parameter tensor (all of the small
 * ones): the central difference (L(p+h) - L(p-h)) / 2h against the
 * backward pass.  In fp32 the difference carries rounding noise of about
 * 1e-7 / h in the loss and a truncation error of order h^2, so each entry
 * may differ by ATOL + RTOL * |analytic|; over a tensor, the sampled
 * errors together must also be small against the gradient's size.
 * Returns how many tensors failed (0 passes); prints the worst of each. */
#define GRAD_SAMPLES 24
#define GRAD_H 1e-2
#define GRAD_ATOL 2e-4
#define GRAD_RTOL 1e-2
#define GRAD_NORM_RTOL 2e-3

static int gradient_check(struct train_model *m, const int32_t *in,
			  const int32_t *tgt, bool verbose)
{
	struct train_tensor p[TRAIN_PARAM_TENSORS], g[TRAIN_PARAM_TENSORS];
	struct train_tensor all[TRAIN_TENSORS];
	struct train_rng r;
	char msg[256] = "";
	int failed = 0;

	train_model_tensors(m, all, TRAIN_TENSORS);
	memcpy(p, all, sizeof(p));
	memcpy(g, all + TRAIN_PARAM_TENSORS, sizeof(g));
	train_zero_grad(m);
	assert_ok(train_forward(m, in, tgt, NULL, msg, sizeof(msg)), msg);
	assert_ok(train_backward(m, msg, sizeof(msg)), msg);

	train_rng_seed(&r, 7);
	for (unsigned i = 0; i < TRAIN_PARAM_TENSORS; i++) {
		size_t n = p[i].count < GRAD_SAMPLES ? p[i].count
						     : GRAD_SAMPLES;
		double worst = 0.0, err2 = 0.0, an2 = 0.0, worst_an = 0,
		       worst_fd = 0;
		size_t worst_k = 0;
		int bad = 0;

		for (size_t s = 0; s < n; s++) {
			size_t k = p[i].count <= GRAD_SAMPLES
					   ? s
					   : train_rng_next(&r) % p[i].count;
			float orig = p[i].data[k];
			double an = g[i].data[k], lp, lm, fd, err;

			p[i].data[k] = (float)(orig + GRAD_H);
			lp = loss_of(m, in, tgt);
			p[i].data[k] = (float)(orig - GRAD_H);
			lm = loss_of(m, in, tgt);
			p[i].data[k] = orig;
			/* the step actually taken in float */
			fd = (lp - lm) / ((double)(float)(orig + GRAD_H) -
					  (double)(float)(orig - GRAD_H));
			err = fabs(fd - an);
			err2 += err * err;
			an2 += an * an;
			if (err > GRAD_ATOL + GRAD_RTOL * fabs(an))
				bad++;
			if (err > worst) {
				worst = err;
				worst_k = k;
				worst_an = an;
				worst_fd = fd;
			}
		}
		if (sqrt(err2) > GRAD_ATOL + GRAD_NORM_RTOL * sqrt(an2))
			bad++;
		if (bad || verbose)
			print_message("%-22s %s: worst [%zu] analytic %+.6e "
				      "numeric %+.6e; error norm %.2e of "
				      "%.2e\n", p[i].name, bad ? "BAD" : "ok",
				      worst_k, worst_an, worst_fd, sqrt(err2),
				      sqrt(an2));
		failed += bad != 0;
	}
	return failed;
}

static void test_gradient_check(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	struct train_rng r;
	int32_t in[8], tgt[8];

	(void)state;
	tiny_config(&cfg);
	m = new_model(&cfg);
	scramble_params(m, 99);
	train_rng_seed(&r, 5);
	random_tokens(&r, in, 8, cfg.vocab_size);
	random_tokens(&r, tgt, 8, cfg.vocab_size);
	assert_int_equal(gradient_check(m, in, tgt,
					getenv("TEST_TRAIN_VERBOSE") != NULL),
			 0);
	/* the padded rows of wte (16..19) get no gradient at all */
	{
		size_t n;
		const float *g = train_model_buffer(m, TRAIN_GRADS, &n);

		for (size_t k = 16 * 8; k < 20 * 8; k++)
			assert_true(g[k] == 0.0f);
	}
	train_model_free(m);
}

/* ---- (2) the loss falls on a learnable sequence ---- */

/* Every row follows one fixed cycle through the vocabulary (a random
 * permutation), from its own starting point: the next token is a
 * function of the current one. */
static void cycle_batch(const int32_t *next, unsigned V, size_t B, size_t T,
			struct train_rng *r, int32_t *in, int32_t *tgt)
{
	for (size_t b = 0; b < B; b++) {
		int32_t tok = (int32_t)(train_rng_next(r) % V);

		for (size_t t = 0; t < T; t++) {
			in[b * T + t] = tok;
			tok = next[tok];
			tgt[b * T + t] = tok;
		}
	}
}

static void test_loss_falls(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	struct train_rng r;
	int32_t next[32], in[4 * 16], tgt[4 * 16], perm[32];
	float first = 0, loss = 0;
	char msg[256] = "";

	(void)state;
	train_config_init(&cfg);
	cfg.layers = 2;
	cfg.heads = 2;
	cfg.channels = 32;
	cfg.max_seq_len = 16;
	cfg.vocab_size = 32;
	cfg.padded_vocab_size = 32;
	cfg.batch = 4;
	cfg.seq_len = 16;
	cfg.learning_rate = 1e-2f;
	cfg.weight_decay = 0.0f;
	m = new_model(&cfg);

	train_rng_seed(&r, 3);
	for (unsigned i = 0; i < 32; i++)
		perm[i] = (int32_t)i;
	for (unsigned i = 31; i > 0; i--) {   /* Fisher-Yates */
		unsigned j = (unsigned)(train_rng_next(&r) % (i + 1));
		int32_t x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
	}
	for (unsigned i = 0; i < 32; i++)
		next[perm[i]] = perm[(i + 1) % 32];

	for (int step = 0; step < 40; step++) {
		cycle_batch(next, 32, 4, 16, &r, in, tgt);
		assert_ok(train_step(m, in, tgt, &loss, msg, sizeof(msg)), msg);
		if (step == 0)
			first = loss;
	}
	print_message("loss %.4f -> %.4f over 40 steps (ln V = %.4f)\n",
		      (double)first, (double)loss, log(32.0));
	/* it starts near ln V, the loss of a uniform guess */
	assert_true(fabs(first - log(32.0)) < 0.2);
	assert_true(loss < 0.25 * log(32.0));
	assert_int_equal(train_model_step(m), 40);
	train_model_free(m);
}

/* ---- (3) determinism ---- */

static void det_config(struct train_config *cfg)
{
	/* big enough that the matmuls are cut into several tiles (256 x 256)
	 * and the layers into several rows per thread: B*T = 320 positions,
	 * a vocabulary of 300 padded to 320 */
	train_config_init(cfg);
	cfg->layers = 2;
	cfg->heads = 4;
	cfg->channels = 64;
	cfg->max_seq_len = 80;
	cfg->vocab_size = 300;
	cfg->padded_vocab_size = 320;
	cfg->batch = 4;
	cfg->seq_len = 80;
	cfg->learning_rate = 1e-3f;
	cfg->seed = 2024;
}

static void set_threads(int n)
{
#ifdef _OPENMP
	omp_set_num_threads(n);
#endif
	openblas_set_num_threads(n);
}

/* Runs steps training steps on batches from data seed 11, from step
 * "from" of that sequence, writing the losses. */
static void run_steps(struct train_model *m, int from, int steps,
		      float *losses)
{
	const struct train_config *cfg = train_model_config(m);
	size_t N = (size_t)cfg->batch * cfg->seq_len;
	int32_t *in = malloc(N * sizeof(*in)), *tgt = malloc(N * sizeof(*tgt));
	struct train_rng r;
	char msg[256] = "";

	assert_non_null(in);
	assert_non_null(tgt);
	train_rng_seed(&r, 11);
	for (int s = 0; s < from + steps; s++) {
		random_tokens(&r, in, N, cfg->vocab_size);
		random_tokens(&r, tgt, N, cfg->vocab_size);
		if (s < from)
			continue;
		assert_ok(train_step(m, in, tgt, &losses[s - from], msg,
				     sizeof(msg)), msg);
	}
	free(in);
	free(tgt);
}

static void assert_same_state(struct train_model *a, struct train_model *b)
{
	for (unsigned k = 0; k < TRAIN_KIND_COUNT; k++) {
		size_t na, nb;
		float *pa = train_model_buffer(a, (enum train_kind)k, &na);
		float *pb = train_model_buffer(b, (enum train_kind)k, &nb);

		assert_int_equal(na, nb);
		assert_memory_equal(pa, pb, na * sizeof(float));
	}
	assert_int_equal(train_model_step(a), train_model_step(b));
}

#define DET_STEPS 4

static void test_determinism(void **state)
{
	struct train_config cfg;
	struct train_model *a, *b, *c;
	float la[DET_STEPS], lb[DET_STEPS], lc[1];

	(void)state;
	det_config(&cfg);
	a = new_model(&cfg);
	b = new_model(&cfg);
	assert_same_state(a, b);

	set_threads(2);
	run_steps(a, 0, DET_STEPS, la);
	set_threads(1);
	run_steps(b, 0, DET_STEPS, lb);
	set_threads(2);
	for (int i = 0; i < DET_STEPS; i++)
		print_message("step %d loss %.9g / %.9g\n", i, (double)la[i],
			      (double)lb[i]);
	assert_memory_equal(la, lb, sizeof(la));
	assert_same_state(a, b);

	/* another seed is another model */
	cfg.seed++;
	c = new_model(&cfg);
	run_steps(c, 0, 1, lc);
	assert_memory_not_equal(la, lc, sizeof(lc));

	train_model_free(a);
	train_model_free(b);
	train_model_free(c);
}

/* What a resume does: a fresh model (of another seed even) given the
 * parameters, moments and step saved after DET_STEPS steps goes on
 * exactly as an uninterrupted run of twice as many. */
static void test_resume_from_state(void **state)
{
	struct train_config cfg;
	struct train_model *full, *a, *b;
	struct train_tensor ta[TRAIN_TENSORS], tb[TRAIN_TENSORS];
	float lfull[2 * DET_STEPS], la[DET_STEPS], lb[DET_STEPS];

	(void)state;
	det_config(&cfg);
	full = new_model(&cfg);
	run_steps(full, 0, 2 * DET_STEPS, lfull);

	a = new_model(&cfg);
	run_steps(a, 0, DET_STEPS, la);
	assert_memory_equal(la, lfull, sizeof(la));
	cfg.seed = 777;
	b = new_model(&cfg);
	assert_int_equal(train_model_tensors(a, ta, TRAIN_TENSORS),
			 TRAIN_TENSORS);
	assert_int_equal(train_model_tensors(b, tb, TRAIN_TENSORS),
			 TRAIN_TENSORS);
	for (unsigned i = 0; i < TRAIN_TENSORS; i++) {
		assert_string_equal(ta[i].name, tb[i].name);
		assert_int_equal(ta[i].count, tb[i].count);
		/* what a checkpoint holds: all but the gradients */
		if (ta[i].kind != TRAIN_GRADS)
			memcpy(tb[i].data, ta[i].data,
			       ta[i].count * sizeof(float));
	}
	train_model_set_step(b, train_model_step(a));
	train_model_free(a);

	run_steps(b, DET_STEPS, DET_STEPS, lb);
	assert_memory_equal(lfull + DET_STEPS, lb, sizeof(lb));
	assert_same_state(full, b);
	train_model_free(full);
	train_model_free(b);
}

/* ---- (4) bad configurations, tokens and call orders ---- */

static void expect_bad_config(const struct train_config *cfg,
			      const char *what)
{
	struct train_model *m = (struct train_model *)1;
	char msg[256] = "";
	int rc = train_model_init(cfg, &m, msg, sizeof(msg));

	if (rc != -EINVAL)
		fail_msg("%s: expected -EINVAL, got %d", what, rc);
	assert_null(m);
	if (!msg[0])
		fail_msg("%s: no message", what);
	assert_int_equal(train_config_check(cfg, NULL, NULL, 0), -EINVAL);
}

static void test_bad_config(void **state)
{
	struct train_config good, c;
	uint64_t bytes = 0;

	(void)state;
	tiny_config(&good);
	assert_int_equal(train_config_check(&good, &bytes, NULL, 0), 0);
	assert_true(bytes > 0);

#define BAD(field, value)                                                 \
	do {                                                              \
		c = good;                                                 \
		c.field = value;                                          \
		expect_bad_config(&c, #field " = " #value);               \
	} while (0)
	BAD(heads, 3);                  /* does not divide 8 channels */
	BAD(heads, 0);
	BAD(heads, 16);                 /* more heads than channels */
	BAD(layers, 0);
	BAD(channels, 0);
	BAD(vocab_size, 0);
	BAD(padded_vocab_size, 15);     /* under vocab_size */
	BAD(max_seq_len, 0);
	BAD(seq_len, 0);
	BAD(seq_len, 9);                /* over max_seq_len */
	BAD(batch, 0);
	BAD(layers, TRAIN_LAYERS_MAX + 1);
	BAD(channels, TRAIN_CHANNELS_MAX + 1);
	BAD(learning_rate, -1.0f);
	BAD(learning_rate, NAN);
	BAD(beta1, 1.0f);
	BAD(beta2, -0.1f);
	BAD(eps, 0.0f);
	BAD(weight_decay, INFINITY);
	BAD(grad_clip, -1.0f);
#undef BAD
	/* addressable memory: attention weights L*B*NH*T^2 floats */
	c = good;
	c.layers = TRAIN_LAYERS_MAX;
	c.channels = TRAIN_CHANNELS_MAX;
	c.heads = TRAIN_CHANNELS_MAX;
	c.max_seq_len = TRAIN_SEQ_MAX;
	c.seq_len = TRAIN_SEQ_MAX;
	c.batch = TRAIN_POSITIONS_MAX / TRAIN_SEQ_MAX;
	expect_bad_config(&c, "too large");
	expect_bad_config(NULL, "NULL");
}

static void test_bad_calls(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	int32_t in[8] = { 0 }, tgt[8] = { 0 };
	char msg[256] = "";
	float loss = 0;

	(void)state;
	tiny_config(&cfg);
	m = new_model(&cfg);

	/* backward before any forward, and after one without targets */
	assert_int_equal(train_backward(m, msg, sizeof(msg)), -EINVAL);
	assert_ok(train_forward(m, in, NULL, &loss, msg, sizeof(msg)), msg);
	assert_true(isnan(loss));
	assert_int_equal(train_backward(m, msg, sizeof(msg)), -EINVAL);

	/* tokens outside the vocabulary (16; the padded 16..19 too) */
	in[5] = 16;
	assert_int_equal(train_forward(m, in, tgt, &loss, msg, sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "16"));
	in[5] = -1;
	assert_int_equal(train_forward(m, in, tgt, &loss, msg, sizeof(msg)),
			 -EINVAL);
	in[5] = 0;
	tgt[7] = 19;
	assert_int_equal(train_forward(m, in, tgt, &loss, msg, sizeof(msg)),
			 -EINVAL);
	assert_int_equal(train_backward(m, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(train_step(m, in, NULL, &loss, msg, sizeof(msg)),
			 -EINVAL);
	assert_int_equal(train_forward(m, NULL, NULL, &loss, msg, sizeof(msg)),
			 -EINVAL);
	tgt[7] = 0;
	assert_ok(train_forward(m, in, tgt, &loss, msg, sizeof(msg)), msg);
	assert_ok(train_backward(m, msg, sizeof(msg)), msg);

	assert_int_equal(train_set_learning_rate(m, NAN), -EINVAL);
	assert_int_equal(train_set_learning_rate(m, -1e-3f), -EINVAL);
	assert_ok(train_set_learning_rate(m, 1e-3f), "");
	assert_true(train_model_config(m)->learning_rate == 1e-3f);

	/* a gradient that is not finite changes nothing */
	{
		size_t n;
		float *g = train_model_buffer(m, TRAIN_GRADS, &n);
		float *p = train_model_buffer(m, TRAIN_PARAMS, &n);
		float *copy = malloc(n * sizeof(float));
		float norm = 0;

		assert_non_null(copy);
		memcpy(copy, p, n * sizeof(float));
		g[n / 2] = INFINITY;
		assert_int_equal(train_update(m, &norm, msg, sizeof(msg)),
				 -ERANGE);
		assert_true(isinf(norm));
		assert_memory_equal(copy, p, n * sizeof(float));
		assert_int_equal(train_model_step(m), 0);
		free(copy);
	}
	assert_null(train_model_buffer(m, TRAIN_KIND_COUNT, NULL));
	train_model_free(m);
	train_model_free(NULL);
}

/* ---- the tensor list ---- */

static void test_tensors(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	struct train_tensor t[TRAIN_TENSORS + 1];
	size_t total = 0, n;
	uint64_t C = 8, L = 2;

	(void)state;
	tiny_config(&cfg);
	m = new_model(&cfg);
	/* 20*8 + 8*8 + 4 * 2*8 (ln) + 2*24*8 + 2*24 + 2*8*8 + 2*8 + 2*32*8
	 * + 2*32 + 2*8*32 + 2*8 + 2*8 */
	assert_int_equal(train_model_num_params(m),
			 20 * C + 8 * C + 4 * L * C + L * 3 * C * C +
				 L * 3 * C + L * C * C + L * C +
				 L * 4 * C * C + L * 4 * C + L * 4 * C * C +
				 L * C + 2 * C);
	assert_true(train_model_bytes(m) >
		    4 * train_model_num_params(m) * sizeof(float));
	assert_int_equal(train_model_tensors(m, NULL, 0), TRAIN_TENSORS);
	assert_int_equal(train_model_tensors(m, t, 3), TRAIN_TENSORS);
	assert_int_equal(train_model_tensors(m, t, TRAIN_TENSORS + 1),
			 TRAIN_TENSORS);
	for (unsigned i = 0; i < TRAIN_TENSORS; i++) {
		unsigned k = i / TRAIN_PARAM_TENSORS;
		size_t prod = 1;
		float *base = train_model_buffer(m, (enum train_kind)k, &n);

		assert_int_equal(t[i].kind, k);
		for (unsigned d = 0; d < t[i].ndim; d++)
			prod *= (size_t)t[i].shape[d];
		assert_int_equal(prod, t[i].count);
		if (i % TRAIN_PARAM_TENSORS == 0) {
			assert_ptr_equal(t[i].data, base);
			total = 0;
		} else {
			assert_ptr_equal(t[i].data,
					 t[i - 1].data + t[i - 1].count);
		}
		total += t[i].count;
		if (i % TRAIN_PARAM_TENSORS == TRAIN_PARAM_TENSORS - 1)
			assert_int_equal(total, n);
		for (unsigned j = 0; j < i; j++)
			assert_string_not_equal(t[i].name, t[j].name);
	}
	assert_string_equal(t[0].name, "param.wte");
	assert_int_equal(t[0].shape[0], 20);
	assert_string_equal(t[TRAIN_PARAM_TENSORS + 4].name, "grad.qkv_w");
	assert_int_equal(t[4].ndim, 3);
	assert_int_equal(t[4].shape[0], 2);
	assert_int_equal(t[4].shape[1], 24);
	assert_int_equal(t[4].shape[2], 8);
	assert_string_equal(t[TRAIN_TENSORS - 1].name, "adam_v.lnf_b");
	train_model_set_step(m, 123);
	assert_int_equal(train_model_step(m), 123);
	train_model_free(m);
}

/* ---- layers against their definitions ---- */

static void test_init(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	struct train_tensor t[TRAIN_PARAM_TENSORS];
	double sum = 0, sum2 = 0;
	size_t n;

	(void)state;
	train_config_init(&cfg);
	cfg.layers = 2;
	cfg.heads = 4;
	cfg.channels = 64;
	cfg.max_seq_len = 64;
	cfg.vocab_size = 1000;
	cfg.padded_vocab_size = 1024;
	cfg.batch = 1;
	cfg.seq_len = 8;
	m = new_model(&cfg);
	train_model_tensors(m, t, TRAIN_PARAM_TENSORS);

	/* wte: normal, std 0.02, over the real rows; padded rows 0 */
	n = 1000 * 64;
	for (size_t k = 0; k < n; k++) {
		sum += t[0].data[k];
		sum2 += (double)t[0].data[k] * t[0].data[k];
	}
	assert_true(fabs(sum / n) < 0.001);
	assert_true(fabs(sqrt(sum2 / n) - 0.02) < 0.001);
	for (size_t k = n; k < t[0].count; k++)
		assert_true(t[0].data[k] == 0.0f);
	/* layernorm weights 1, biases 0 */
	for (size_t k = 0; k < t[2].count; k++)
		assert_true(t[2].data[k] == 1.0f && t[3].data[k] == 0.0f);
	for (size_t k = 0; k < t[15].count; k++)
		assert_true(t[14].data[k] == 1.0f && t[15].data[k] == 0.0f);
	/* The initial loss is about that of a uniform guess.  (Not with
	 * targets equal to the inputs: through the tied head a position
	 * already favours its own token, by about 0.7 nats here.) */
	{
		int32_t in[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
		int32_t tgt[8] = { 500, 600, 700, 800, 900, 10, 20, 30 };
		float loss;
		char msg[256] = "";

		assert_ok(train_forward(m, in, tgt, &loss, msg, sizeof(msg)),
			  msg);
		assert_true(fabs(loss - log(1000.0)) < 0.1);
	}
	train_model_free(m);
}

static void test_layers(void **state)
{
	enum { N = 5, C = 7, OC = 6 };
	float inp[N * C], w[OC * C], bias[OC], out[N * OC], mean[N], rstd[N];
	float ones[C], zeros[C], ln[N * C];
	struct train_rng r;

	(void)state;
	train_rng_seed(&r, 1);
	for (int i = 0; i < N * C; i++)
		inp[i] = train_rng_normal(&r) * 2.0f + 0.5f;
	for (int i = 0; i < OC * C; i++)
		w[i] = train_rng_normal(&r);
	for (int i = 0; i < OC; i++)
		bias[i] = train_rng_normal(&r);

	/* matmul: out[n][o] = sum_c inp[n][c] w[o][c] + bias[o] */
	train_matmul_forward(out, inp, w, bias, N, C, OC);
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++) {
			double s = bias[o];

			for (int c = 0; c < C; c++)
				s += (double)inp[n * C + c] * w[o * C + c];
			assert_true(fabs(out[n * OC + o] - s) < 1e-4);
		}

	/* layernorm with weight 1, bias 0: each row mean 0, variance 1 */
	for (int c = 0; c < C; c++) {
		ones[c] = 1.0f;
		zeros[c] = 0.0f;
	}
	train_layernorm_forward(ln, mean, rstd, inp, ones, zeros, N, C);
	for (int n = 0; n < N; n++) {
		double m = 0, v = 0;

		for (int c = 0; c < C; c++)
			m += ln[n * C + c];
		for (int c = 0; c < C; c++)
			v += (ln[n * C + c] - m / C) * (ln[n * C + c] - m / C);
		assert_true(fabs(m / C) < 1e-5);
		assert_true(fabs(v / C - 1.0) < 1e-3);
	}

	/* GELU (tanh form) at a few points */
	{
		float x[4] = { -3.0f, -1.0f, 0.0f, 1.0f }, y[4];

		train_gelu_forward(y, x, 4);
		assert_true(fabsf(y[0] - -0.00363752f) < 1e-6f);
		assert_true(fabsf(y[1] - -0.15880801f) < 1e-6f);
		assert_true(y[2] == 0.0f);
		assert_true(fabsf(y[3] - 0.84119199f) < 1e-6f);
	}

	/* softmax over V of Vp columns; cross-entropy */
	{
		float logits[2 * 5] = { 1, 2, 3, 99, 99, 0, 0, 0, 99, 99 };
		float probs[2 * 5], losses[2];
		int32_t tgt[2] = { 2, 0 };

		train_softmax_forward(probs, logits, 2, 3, 5);
		assert_true(fabsf(probs[0] + probs[1] + probs[2] - 1) < 1e-6f);
		assert_true(probs[3] == 0.0f && probs[4] == 0.0f);
		assert_true(fabsf(probs[5] - 1.0f / 3) < 1e-6f);
		train_crossentropy_forward(losses, probs, tgt, 2, 5);
		assert_true(fabsf(losses[0] -
				  (float)(log(exp(1) + exp(2) + exp(3)) - 3)) <
			    1e-5f);
		assert_true(fabsf(losses[1] - (float)log(3.0)) < 1e-5f);
	}
}

/* Position t sees only positions <= t: changing the token at t leaves
 * the logits before t untouched, bit for bit, and changes those at t. */
static void test_causal(void **state)
{
	struct train_config cfg;
	struct train_model *m;
	int32_t in[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	float *before;
	const float *after;
	char msg[256] = "";
	size_t Vp = 20, T = 4;

	(void)state;
	tiny_config(&cfg);
	m = new_model(&cfg);
	scramble_params(m, 4);
	assert_ok(train_forward(m, in, NULL, NULL, msg, sizeof(msg)), msg);
	before = malloc(8 * Vp * sizeof(float));
	assert_non_null(before);
	memcpy(before, train_model_logits(m), 8 * Vp * sizeof(float));
	in[2] = 9;         /* row 0, position 2 */
	assert_ok(train_forward(m, in, NULL, NULL, msg, sizeof(msg)), msg);
	after = train_model_logits(m);
	assert_memory_equal(before, after, 2 * Vp * sizeof(float));
	assert_memory_not_equal(before + 2 * Vp, after + 2 * Vp,
				Vp * sizeof(float));
	assert_memory_not_equal(before + 3 * Vp, after + 3 * Vp,
				Vp * sizeof(float));
	/* the other row is another sequence */
	assert_memory_equal(before + T * Vp, after + T * Vp,
			    T * Vp * sizeof(float));
	/* probabilities: rows sum to 1, padded columns 0 */
	{
		const float *p = train_model_probs(m);

		for (size_t n = 0; n < 8; n++) {
			double s = 0;

			for (size_t v = 0; v < 16; v++)
				s += p[n * Vp + v];
			assert_true(fabs(s - 1) < 1e-5);
			for (size_t v = 16; v < Vp; v++)
				assert_true(p[n * Vp + v] == 0.0f);
		}
	}
	free(before);
	train_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layers),
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_causal),
		cmocka_unit_test(test_tensors),
		cmocka_unit_test(test_gradient_check),
		cmocka_unit_test(test_loss_falls),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_resume_from_state),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_bad_calls),
	};

	/* TEST_TRAIN_FILTER=test_causal runs one test (a glob) */
	if (getenv("TEST_TRAIN_FILTER"))
		cmocka_set_test_filter(getenv("TEST_TRAIN_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
