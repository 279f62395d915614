/* SPDX-License-Identifier: MIT */
/*
 * model.c - the GPT-2 model of the CPU reference: sizes and checks of a
 * configuration, the buffers (parameters, gradients, AdamW moments,
 * activations), initialisation from a seed, the forward and backward
 * passes over the layers of layers.c, the loss, and the AdamW update.
 *
 * Memory.  Each kind of state (parameters, gradients, m, v) is one buffer
 * of num_params floats holding the 16 tensors back to back, per-layer
 * tensors stacked layer first (llm.c's layout), so a checkpoint can take a
 * kind whole or tensor by tensor.  The forward pass keeps every activation
 * the backward pass reads, for all layers; the backward pass needs the
 * gradients of the activations of one layer at a time, so those buffers
 * are one layer deep and reused, layer after layer.
 *
 * Determinism.  The few sums over many values outside the layers (the
 * mean loss, the gradient norm) run in double, in a fixed order or over a
 * fixed number of chunks added in order, whatever the thread count.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "train_int.h"

#define NORM_CHUNKS 64      /* fixed split of the gradient norm sum */

#define TENSOR_NAMES(kind) {                                              \
	kind "wte", kind "wpe", kind "ln1_w", kind "ln1_b", kind "qkv_w",  \
	kind "qkv_b", kind "attn_proj_w", kind "attn_proj_b", kind "ln2_w", \
	kind "ln2_b", kind "fc_w", kind "fc_b", kind "fc_proj_w",          \
	kind "fc_proj_b", kind "lnf_w", kind "lnf_b" }
static const char *const tensor_names[TRAIN_KIND_COUNT][P_COUNT] = {
	TENSOR_NAMES("param."), TENSOR_NAMES("grad."),
	TENSOR_NAMES("adam_m."), TENSOR_NAMES("adam_v."),
};

/* How each parameter tensor starts, and whether weight decay applies. */
enum init { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_NORMAL_PROJ,
	    INIT_NORMAL_POS };
static const struct {
	enum init init;
	bool decay;
} param_kind[P_COUNT] = {
	[P_WTE] = { INIT_NORMAL, true },
	[P_WPE] = { INIT_NORMAL_POS, true },
	[P_LN1_W] = { INIT_ONE, false },
	[P_LN1_B] = { INIT_ZERO, false },
	[P_QKV_W] = { INIT_NORMAL, true },
	[P_QKV_B] = { INIT_ZERO, false },
	[P_ATTN_PROJ_W] = { INIT_NORMAL_PROJ, true },
	[P_ATTN_PROJ_B] = { INIT_ZERO, false },
	[P_LN2_W] = { INIT_ONE, false },
	[P_LN2_B] = { INIT_ZERO, false },
	[P_FC_W] = { INIT_NORMAL, true },
	[P_FC_B] = { INIT_ZERO, false },
	[P_FC_PROJ_W] = { INIT_NORMAL_PROJ, true },
	[P_FC_PROJ_B] = { INIT_ZERO, false },
	[P_LNF_W] = { INIT_ONE, false },
	[P_LNF_B] = { INIT_ZERO, false },
};

/* Activations the backward pass reads; per-layer ones are (L, ...). */
struct acts {
	float *encoded;              /* (B,T,C) */
	float *ln1;                  /* (L,B,T,C) */
	float *ln1_mean, *ln1_rstd;  /* (L,B,T) */
	float *qkv;                  /* (L,B,T,3C) */
	float *atty;                 /* (L,B,T,C) attention output */
	float *att;                  /* (L,B,NH,T,T) attention weights */
	float *attproj;              /* (L,B,T,C) */
	float *residual2;            /* (L,B,T,C) */
	float *ln2;                  /* (L,B,T,C) */
	float *ln2_mean, *ln2_rstd;  /* (L,B,T) */
	float *fch;                  /* (L,B,T,4C) */
	float *fch_gelu;             /* (L,B,T,4C) */
	float *fcproj;               /* (L,B,T,C) */
	float *residual3;            /* (L,B,T,C) the block's output */
	float *lnf;                  /* (B,T,C) */
	float *lnf_mean, *lnf_rstd;  /* (B,T) */
	float *logits;               /* (B,T,Vp) */
	float *probs;                /* (B,T,Vp) */
	float *losses;               /* (B,T) */
};

/* Gradients of activations: the head's, and one layer's (reused). */
struct grad_acts {
	float *dlogits;              /* (B,T,Vp) */
	float *dlnf;                 /* (B,T,C) */
	float *dres;                 /* (B,T,C) the residual stream */
	float *dres2;                /* (B,T,C) */
	float *dfcproj;              /* (B,T,C) */
	float *dfch_gelu;            /* (B,T,4C) */
	float *dfch;                 /* (B,T,4C) */
	float *dln2;                 /* (B,T,C) */
	float *dattproj;             /* (B,T,C) */
	float *datty;                /* (B,T,C) */
	float *dqkv;                 /* (B,T,3C) */
	float *dln1;                 /* (B,T,C) */
	float *att_scratch;          /* (B,NH,T) */
};

/* One layer's slice of the stacked parameter tensors (or gradients). */
struct layer_params {
	float *ln1_w, *ln1_b;            /* (C) */
	float *qkv_w, *qkv_b;            /* (3C,C), (3C) */
	float *attn_proj_w, *attn_proj_b; /* (C,C), (C) */
	float *ln2_w, *ln2_b;            /* (C) */
	float *fc_w, *fc_b;              /* (4C,C), (4C) */
	float *fc_proj_w, *fc_proj_b;    /* (C,4C), (C) */
};

struct train_model {
	struct train_config cfg;
	size_t L, NH, C, maxT, V, Vp, B, T, N;    /* N = B*T */
	size_t count[P_COUNT];                   /* floats per tensor */
	size_t offset[P_COUNT];                  /* in each kind's buffer */
	unsigned ndim[P_COUNT];
	int64_t shape[P_COUNT][TRAIN_NDIM_MAX];
	size_t num_params;
	float *state[TRAIN_KIND_COUNT];          /* params, grads, m, v */
	float *acts_mem, *grad_acts_mem;
	struct acts a;
	struct grad_acts g;
	int32_t *inputs, *targets;               /* (B,T) copies */
	bool backward_ready;    /* the last forward had targets and worked */
	float loss;
	uint64_t step;
	uint64_t bytes;
};

float train_rng_normal(struct train_rng *r)
{
	double u1 = train_rng_unit(r), u2 = train_rng_unit(r);

	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void train_config_init(struct train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->layers = 12;
	cfg->heads = 12;
	cfg->channels = 768;
	cfg->max_seq_len = 1024;
	cfg->vocab_size = 50257;
	cfg->padded_vocab_size = 50304;
	cfg->batch = 4;
	cfg->seq_len = 64;
	cfg->learning_rate = 3e-4f;
	cfg->beta1 = 0.9f;
	cfg->beta2 = 0.95f;
	cfg->eps = 1e-8f;
	cfg->weight_decay = 0.1f;
	cfg->grad_clip = 1.0f;
	cfg->seed = 1337;
}

/* ---- sizes ---- */

/* Carves consecutive arrays out of one allocation.  With base NULL it
 * only counts, so the same code sizes the buffer and then lays it out;
 * counts are checked for overflow (a configuration too large for 64
 * bits sets ovf). */
struct cursor {
	float *base;
	uint64_t used;      /* floats */
	bool ovf;
};

static uint64_t mul(struct cursor *c, uint64_t a, uint64_t b)
{
	uint64_t r;

	if (__builtin_mul_overflow(a, b, &r)) {
		c->ovf = true;
		return 0;
	}
	return r;
}

static float *carve(struct cursor *c, uint64_t n)
{
	uint64_t at = c->used;

	if (__builtin_add_overflow(c->used, n, &c->used))
		c->ovf = true;
	return c->base && !c->ovf ? c->base + at : NULL;
}

/* The dimensions, from a checked configuration. */
struct dims {
	uint64_t L, NH, C, maxT, V, Vp, B, T, N;
};

static void dims_of(const struct train_config *cfg, struct dims *d)
{
	d->L = cfg->layers;
	d->NH = cfg->heads;
	d->C = cfg->channels;
	d->maxT = cfg->max_seq_len;
	d->V = cfg->vocab_size;
	d->Vp = cfg->padded_vocab_size ? cfg->padded_vocab_size
				       : cfg->vocab_size;
	d->B = cfg->batch;
	d->T = cfg->seq_len;
	d->N = d->B * d->T;
}

/* Shapes of the parameter tensors; returns the floats of all of them. */
static uint64_t param_shapes(const struct dims *d, unsigned ndim[P_COUNT],
			     int64_t shape[P_COUNT][TRAIN_NDIM_MAX],
			     uint64_t count[P_COUNT])
{
	const uint64_t L = d->L, C = d->C;
	const struct {
		unsigned n;
		uint64_t s[TRAIN_NDIM_MAX];
	} sh[P_COUNT] = {
		[P_WTE] = { 2, { d->Vp, C } },
		[P_WPE] = { 2, { d->maxT, C } },
		[P_LN1_W] = { 2, { L, C } },
		[P_LN1_B] = { 2, { L, C } },
		[P_QKV_W] = { 3, { L, 3 * C, C } },
		[P_QKV_B] = { 2, { L, 3 * C } },
		[P_ATTN_PROJ_W] = { 3, { L, C, C } },
		[P_ATTN_PROJ_B] = { 2, { L, C } },
		[P_LN2_W] = { 2, { L, C } },
		[P_LN2_B] = { 2, { L, C } },
		[P_FC_W] = { 3, { L, 4 * C, C } },
		[P_FC_B] = { 2, { L, 4 * C } },
		[P_FC_PROJ_W] = { 3, { L, C, 4 * C } },
		[P_FC_PROJ_B] = { 2, { L, C } },
		[P_LNF_W] = { 1, { C } },
		[P_LNF_B] = { 1, { C } },
	};
	uint64_t total = 0;

	/* Within the limits of train_config_check no product overflows:
	 * the largest is L * 4C * C < 2^46. */
	for (unsigned i = 0; i < P_COUNT; i++) {
		ndim[i] = sh[i].n;
		count[i] = 1;
		for (unsigned k = 0; k < sh[i].n; k++) {
			shape[i][k] = (int64_t)sh[i].s[k];
			count[i] *= sh[i].s[k];
		}
		for (unsigned k = sh[i].n; k < TRAIN_NDIM_MAX; k++)
			shape[i][k] = 0;
		total += count[i];
	}
	return total;
}

static void acts_layout(const struct dims *d, struct cursor *c,
			struct acts *a)
{
	uint64_t NC = mul(c, d->N, d->C);
	uint64_t LNC = mul(c, d->L, NC), LN = mul(c, d->L, d->N);
	uint64_t att = mul(c, mul(c, d->L, d->B), mul(c, d->NH,
						    mul(c, d->T, d->T)));
	uint64_t NVp = mul(c, d->N, d->Vp);

	a->encoded = carve(c, NC);
	a->ln1 = carve(c, LNC);
	a->ln1_mean = carve(c, LN);
	a->ln1_rstd = carve(c, LN);
	a->qkv = carve(c, mul(c, 3, LNC));
	a->atty = carve(c, LNC);
	a->att = carve(c, att);
	a->attproj = carve(c, LNC);
	a->residual2 = carve(c, LNC);
	a->ln2 = carve(c, LNC);
	a->ln2_mean = carve(c, LN);
	a->ln2_rstd = carve(c, LN);
	a->fch = carve(c, mul(c, 4, LNC));
	a->fch_gelu = carve(c, mul(c, 4, LNC));
	a->fcproj = carve(c, LNC);
	a->residual3 = carve(c, LNC);
	a->lnf = carve(c, NC);
	a->lnf_mean = carve(c, d->N);
	a->lnf_rstd = carve(c, d->N);
	a->logits = carve(c, NVp);
	a->probs = carve(c, NVp);
	a->losses = carve(c, d->N);
}

static void grad_acts_layout(const struct dims *d, struct cursor *c,
			     struct grad_acts *g)
{
	uint64_t NC = mul(c, d->N, d->C);

	g->dlogits = carve(c, mul(c, d->N, d->Vp));
	g->dlnf = carve(c, NC);
	g->dres = carve(c, NC);
	g->dres2 = carve(c, NC);
	g->dfcproj = carve(c, NC);
	g->dfch_gelu = carve(c, mul(c, 4, NC));
	g->dfch = carve(c, mul(c, 4, NC));
	g->dln2 = carve(c, NC);
	g->dattproj = carve(c, NC);
	g->datty = carve(c, NC);
	g->dqkv = carve(c, mul(c, 3, NC));
	g->dln1 = carve(c, NC);
	g->att_scratch = carve(c, mul(c, mul(c, d->B, d->NH), d->T));
}

static bool in_range(unsigned v, unsigned lo, unsigned hi)
{
	return v >= lo && v <= hi;
}

int train_config_check(const struct train_config *cfg, uint64_t *bytes,
		       char *msg, size_t msg_len)
{
	struct dims d;
	struct cursor acts = { 0 }, grads = { 0 };
	struct acts a;
	struct grad_acts g;
	unsigned ndim[P_COUNT];
	int64_t shape[P_COUNT][TRAIN_NDIM_MAX];
	uint64_t count[P_COUNT], params, total;
	unsigned vp;

	if (!cfg) {
		util_msg(msg, msg_len, "no configuration given");
		return -EINVAL;
	}
	vp = cfg->padded_vocab_size ? cfg->padded_vocab_size : cfg->vocab_size;
#define BAD(...)                                                          \
	do {                                                              \
		util_msg(msg, msg_len, __VA_ARGS__);                          \
		return -EINVAL;                                           \
	} while (0)
	if (!in_range(cfg->layers, 1, TRAIN_LAYERS_MAX))
		BAD("layers %u: give 1 to %u", cfg->layers, TRAIN_LAYERS_MAX);
	if (!in_range(cfg->channels, 1, TRAIN_CHANNELS_MAX))
		BAD("channels %u: give 1 to %u", cfg->channels,
		    TRAIN_CHANNELS_MAX);
	if (!in_range(cfg->heads, 1, cfg->channels) ||
	    cfg->channels % cfg->heads)
		BAD("heads %u does not divide channels %u: each head gets "
		    "channels / heads of them", cfg->heads, cfg->channels);
	if (!in_range(cfg->max_seq_len, 1, TRAIN_SEQ_MAX))
		BAD("max_seq_len %u: give 1 to %u", cfg->max_seq_len,
		    TRAIN_SEQ_MAX);
	if (!in_range(cfg->seq_len, 1, cfg->max_seq_len))
		BAD("seq_len %u: give 1 to max_seq_len (%u)", cfg->seq_len,
		    cfg->max_seq_len);
	if (!in_range(cfg->vocab_size, 1, TRAIN_VOCAB_MAX))
		BAD("vocab_size %u: give 1 to %u", cfg->vocab_size,
		    TRAIN_VOCAB_MAX);
	if (!in_range(vp, cfg->vocab_size, TRAIN_VOCAB_MAX))
		BAD("padded_vocab_size %u: give 0 (no padding) or vocab_size "
		    "(%u) to %u", cfg->padded_vocab_size, cfg->vocab_size,
		    TRAIN_VOCAB_MAX);
	if (cfg->batch < 1 ||
	    (uint64_t)cfg->batch * cfg->seq_len > TRAIN_POSITIONS_MAX)
		BAD("batch %u: give 1 or more, with batch * seq_len at most %u",
		    cfg->batch, TRAIN_POSITIONS_MAX);
	/* "!(x >= 0)" is also true for NaN. */
	if (!(cfg->learning_rate >= 0) || !isfinite(cfg->learning_rate))
		BAD("learning_rate %g: give a finite value >= 0",
		    (double)cfg->learning_rate);
	if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) ||
	    !(cfg->beta2 >= 0 && cfg->beta2 < 1))
		BAD("betas %g, %g: each must be in [0, 1)", (double)cfg->beta1,
		    (double)cfg->beta2);
	if (!(cfg->eps > 0) || !isfinite(cfg->eps))
		BAD("eps %g: give a finite value > 0", (double)cfg->eps);
	if (!(cfg->weight_decay >= 0) || !isfinite(cfg->weight_decay))
		BAD("weight_decay %g: give a finite value >= 0",
		    (double)cfg->weight_decay);
	if (!(cfg->grad_clip >= 0) || !isfinite(cfg->grad_clip))
		BAD("grad_clip %g: give a finite value >= 0 (0: no clipping)",
		    (double)cfg->grad_clip);

	dims_of(cfg, &d);
	params = param_shapes(&d, ndim, shape, count);
	acts_layout(&d, &acts, &a);
	grad_acts_layout(&d, &grads, &g);
	total = params * TRAIN_KIND_COUNT;   /* < 2^49 */
	if (acts.ovf || grads.ovf ||
	    __builtin_add_overflow(total, acts.used, &total) ||
	    __builtin_add_overflow(total, grads.used, &total) ||
	    total > SIZE_MAX / sizeof(float) / 2)
		BAD("this configuration needs more memory than can be "
		    "addressed (the attention weights alone are layers * batch "
		    "* heads * seq_len^2 floats)");
#undef BAD
	if (bytes)
		*bytes = total * sizeof(float) + 2 * sizeof(int32_t) * d.N +
			 sizeof(struct train_model);
	return 0;
}

/* ---- init and free ---- */

/* Fills params (num_params floats, the layout of param_shapes) with
 * the initial values for seed; L layers, V tokens of C channels. */
static void init_values(float *params, const uint64_t count[P_COUNT],
			uint64_t seed, size_t L, size_t V, size_t C)
{
	float *t = params;

	for (unsigned i = 0; i < P_COUNT; t += count[i], i++) {
		size_t n = count[i];
		struct train_rng rng;
		float std = 0.02f;

		train_rng_seed(&rng, seed + (uint64_t)(i + 1) *
					    0x9E3779B97F4A7C15ull);
		switch (param_kind[i].init) {
		case INIT_ZERO:
			memset(t, 0, n * sizeof(float));
			break;
		case INIT_ONE:
			for (size_t k = 0; k < n; k++)
				t[k] = 1.0f;
			break;
		case INIT_NORMAL_PROJ:
			std = 0.02f / sqrtf(2.0f * (float)L);
			goto normal;
		case INIT_NORMAL_POS:
			std = 0.01f;
			goto normal;
		case INIT_NORMAL:
		normal:
			/* wte's padded rows stay 0: only V * C values */
			if (i == P_WTE) {
				memset(t, 0, n * sizeof(float));
				n = V * C;
			}
			for (size_t k = 0; k < n; k++)
				t[k] = std * train_rng_normal(&rng);
			break;
		}
	}
}

size_t train_param_layout(const struct train_config *cfg,
			  enum train_kind kind, float *base,
			  struct train_tensor *out, size_t *offsets)
{
	struct dims d;
	unsigned ndim[P_COUNT];
	int64_t shape[P_COUNT][TRAIN_NDIM_MAX];
	uint64_t count[P_COUNT], total, off = 0;

	if ((unsigned)kind >= TRAIN_KIND_COUNT ||
	    train_config_check(cfg, NULL, NULL, 0))
		return 0;
	dims_of(cfg, &d);
	total = param_shapes(&d, ndim, shape, count);
	for (unsigned i = 0; i < P_COUNT; off += count[i], i++) {
		if (offsets)
			offsets[i] = off;
		if (!out)
			continue;
		out[i].name = tensor_names[kind][i];
		out[i].kind = kind;
		out[i].data = base ? base + off : NULL;
		out[i].count = count[i];
		out[i].ndim = ndim[i];
		memcpy(out[i].shape, shape[i], sizeof(out[i].shape));
	}
	return total;
}

int train_params_init(const struct train_config *cfg, float *params)
{
	struct dims d;
	unsigned ndim[P_COUNT];
	int64_t shape[P_COUNT][TRAIN_NDIM_MAX];
	uint64_t count[P_COUNT];

	if (train_config_check(cfg, NULL, NULL, 0))
		return -EINVAL;
	dims_of(cfg, &d);
	param_shapes(&d, ndim, shape, count);
	init_values(params, count, cfg->seed, d.L, d.V, d.C);
	return 0;
}

bool train_param_decays(unsigned index)
{
	return index < P_COUNT && param_kind[index].decay;
}

int train_model_init(const struct train_config *cfg,
		     struct train_model **out, char *msg, size_t msg_len)
{
	struct train_model *m;
	struct dims d;
	struct cursor c;
	uint64_t bytes, count[P_COUNT];
	size_t off = 0;
	int rc;

	*out = NULL;
	rc = train_config_check(cfg, &bytes, msg, msg_len);
	if (rc)
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		goto out_nomem;
	m->cfg = *cfg;
	m->bytes = bytes;
	dims_of(cfg, &d);
	m->cfg.padded_vocab_size = (unsigned)d.Vp;
	m->L = d.L; m->NH = d.NH; m->C = d.C; m->maxT = d.maxT;
	m->V = d.V; m->Vp = d.Vp; m->B = d.B; m->T = d.T; m->N = d.N;

	m->num_params = param_shapes(&d, m->ndim, m->shape, count);
	for (unsigned i = 0; i < P_COUNT; i++) {
		m->count[i] = count[i];
		m->offset[i] = off;
		off += count[i];
	}
	for (unsigned k = 0; k < TRAIN_KIND_COUNT; k++) {
		m->state[k] = calloc(m->num_params, sizeof(float));
		if (!m->state[k])
			goto out_free;
	}

	c = (struct cursor){ 0 };
	acts_layout(&d, &c, &m->a);
	m->acts_mem = calloc(c.used, sizeof(float));
	if (!m->acts_mem)
		goto out_free;
	c = (struct cursor){ .base = m->acts_mem };
	acts_layout(&d, &c, &m->a);

	c = (struct cursor){ 0 };
	grad_acts_layout(&d, &c, &m->g);
	m->grad_acts_mem = calloc(c.used, sizeof(float));
	if (!m->grad_acts_mem)
		goto out_free;
	c = (struct cursor){ .base = m->grad_acts_mem };
	grad_acts_layout(&d, &c, &m->g);

	m->inputs = calloc(m->N, sizeof(int32_t));
	m->targets = calloc(m->N, sizeof(int32_t));
	if (!m->inputs || !m->targets)
		goto out_free;

	init_values(m->state[TRAIN_PARAMS], count, m->cfg.seed, m->L, m->V, m->C);
	m->loss = NAN;
	*out = m;
	return 0;

out_free:
	train_model_free(m);
out_nomem:
	util_msg(msg, msg_len, "cannot allocate %llu bytes for the model; a "
		 "smaller batch, seq_len or model needs less",
		 (unsigned long long)bytes);
	return -ENOMEM;
}

void train_model_free(struct train_model *m)
{
	if (!m)
		return;
	for (unsigned k = 0; k < TRAIN_KIND_COUNT; k++)
		free(m->state[k]);
	free(m->acts_mem);
	free(m->grad_acts_mem);
	free(m->inputs);
	free(m->targets);
	free(m);
}

const struct train_config *train_model_config(const struct train_model *m)
{
	return &m->cfg;
}

size_t train_model_num_params(const struct train_model *m)
{
	return m->num_params;
}

uint64_t train_model_bytes(const struct train_model *m)
{
	return m->bytes;
}

/* Layer l's slices of the stacked tensors in buffer base (a kind). */
static void layer_params(const struct train_model *m, float *base, size_t l,
			 struct layer_params *p)
{
#define SLICE(i) (base + m->offset[i] + l * (m->count[i] / m->L))
	p->ln1_w = SLICE(P_LN1_W);
	p->ln1_b = SLICE(P_LN1_B);
	p->qkv_w = SLICE(P_QKV_W);
	p->qkv_b = SLICE(P_QKV_B);
	p->attn_proj_w = SLICE(P_ATTN_PROJ_W);
	p->attn_proj_b = SLICE(P_ATTN_PROJ_B);
	p->ln2_w = SLICE(P_LN2_W);
	p->ln2_b = SLICE(P_LN2_B);
	p->fc_w = SLICE(P_FC_W);
	p->fc_b = SLICE(P_FC_B);
	p->fc_proj_w = SLICE(P_FC_PROJ_W);
	p->fc_proj_b = SLICE(P_FC_PROJ_B);
#undef SLICE
}

/* ---- forward ---- */

static int check_tokens(const struct train_config *cfg, const int32_t *tok,
			const char *what, char *msg, size_t msg_len)
{
	const size_t N = (size_t)cfg->batch * cfg->seq_len, T = cfg->seq_len;

	for (size_t n = 0; n < N; n++) {
		if (tok[n] < 0 || (unsigned)tok[n] >= cfg->vocab_size) {
			util_msg(msg, msg_len, "%s token %ld at [b=%zu, t=%zu] is "
				 "not in the vocabulary 0..%u", what,
				 (long)tok[n], n / T, n % T, cfg->vocab_size - 1);
			return -EINVAL;
		}
	}
	return 0;
}

int train_check_batch(const struct train_config *cfg, const int32_t *inputs,
		      const int32_t *targets, char *msg, size_t msg_len)
{
	int rc;

	if (!inputs) {
		util_msg(msg, msg_len, "no input tokens given");
		return -EINVAL;
	}
	rc = check_tokens(cfg, inputs, "input", msg, msg_len);
	if (!rc && targets)
		rc = check_tokens(cfg, targets, "target", msg, msg_len);
	return rc;
}

int train_forward(struct train_model *m, const int32_t *inputs,
		  const int32_t *targets, float *loss, char *msg,
		  size_t msg_len)
{
	const size_t L = m->L, NH = m->NH, C = m->C, B = m->B, T = m->T;
	const size_t N = m->N, V = m->V, Vp = m->Vp;
	float *params = m->state[TRAIN_PARAMS];
	struct acts *a = &m->a;
	int rc;

	m->backward_ready = false;
	m->loss = NAN;
	if (loss)
		*loss = NAN;
	rc = train_check_batch(&m->cfg, inputs, targets, msg, msg_len);
	if (rc)
		return rc;
	memcpy(m->inputs, inputs, N * sizeof(*inputs));
	if (targets)
		memcpy(m->targets, targets, N * sizeof(*targets));

	train_encoder_forward(a->encoded, m->inputs, params + m->offset[P_WTE],
			      params + m->offset[P_WPE], B, T, C);
	for (size_t l = 0; l < L; l++) {
		struct layer_params p;
		/* this layer's activations: (B,T,x) slices of (L,B,T,x) */
		const float *residual = l ? a->residual3 + (l - 1) * N * C
					  : a->encoded;
		float *ln1 = a->ln1 + l * N * C;
		float *ln1_mean = a->ln1_mean + l * N;
		float *ln1_rstd = a->ln1_rstd + l * N;
		float *qkv = a->qkv + l * N * 3 * C;
		float *atty = a->atty + l * N * C;
		float *att = a->att + l * B * NH * T * T;
		float *attproj = a->attproj + l * N * C;
		float *residual2 = a->residual2 + l * N * C;
		float *ln2 = a->ln2 + l * N * C;
		float *ln2_mean = a->ln2_mean + l * N;
		float *ln2_rstd = a->ln2_rstd + l * N;
		float *fch = a->fch + l * N * 4 * C;
		float *fch_gelu = a->fch_gelu + l * N * 4 * C;
		float *fcproj = a->fcproj + l * N * C;
		float *residual3 = a->residual3 + l * N * C;

		layer_params(m, params, l, &p);
		/* x + attention(layernorm(x)) */
		train_layernorm_forward(ln1, ln1_mean, ln1_rstd, residual,
					p.ln1_w, p.ln1_b, N, C);
		train_matmul_forward(qkv, ln1, p.qkv_w, p.qkv_b, N, C, 3 * C);
		train_attention_forward(atty, att, qkv, B, T, C, NH);
		train_matmul_forward(attproj, atty, p.attn_proj_w,
				     p.attn_proj_b, N, C, C);
		train_residual_forward(residual2, residual, attproj, N * C);
		/* x + mlp(layernorm(x)) */
		train_layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2,
					p.ln2_w, p.ln2_b, N, C);
		train_matmul_forward(fch, ln2, p.fc_w, p.fc_b, N, C, 4 * C);
		train_gelu_forward(fch_gelu, fch, N * 4 * C);
		train_matmul_forward(fcproj, fch_gelu, p.fc_proj_w,
				     p.fc_proj_b, N, 4 * C, C);
		train_residual_forward(residual3, residual2, fcproj, N * C);
	}
	/* final layernorm, tied head, softmax */
	train_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd,
				a->residual3 + (L - 1) * N * C,
				params + m->offset[P_LNF_W],
				params + m->offset[P_LNF_B], N, C);
	train_matmul_forward(a->logits, a->lnf, params + m->offset[P_WTE],
			     NULL, N, C, Vp);
	train_softmax_forward(a->probs, a->logits, N, V, Vp);

	if (targets) {
		double sum = 0.0;

		train_crossentropy_forward(a->losses, a->probs, m->targets, N,
					   Vp);
		for (size_t n = 0; n < N; n++)
			sum += a->losses[n];
		m->loss = (float)(sum / (double)N);
		m->backward_ready = true;
	}
	if (loss)
		*loss = m->loss;
	return 0;
}

const float *train_model_logits(const struct train_model *m)
{
	return m->a.logits;
}

const float *train_model_probs(const struct train_model *m)
{
	return m->a.probs;
}

/* ---- backward ---- */

void train_zero_grad(struct train_model *m)
{
	memset(m->state[TRAIN_GRADS], 0, m->num_params * sizeof(float));
}

int train_backward(struct train_model *m, char *msg, size_t msg_len)
{
	const size_t L = m->L, NH = m->NH, C = m->C, B = m->B, T = m->T;
	const size_t N = m->N, V = m->V, Vp = m->Vp;
	float *params = m->state[TRAIN_PARAMS], *grads = m->state[TRAIN_GRADS];
	struct acts *a = &m->a;
	struct grad_acts *g = &m->g;

	if (!m->backward_ready) {
		util_msg(msg, msg_len, "train_backward needs a successful "
			 "train_forward with targets first");
		return -EINVAL;
	}

	/* the head: softmax + cross-entropy, the tied matmul, layernorm;
	 * d(mean loss)/d(each position's loss) is 1/N */
	memset(g->dlogits, 0, N * Vp * sizeof(float));
	memset(g->dlnf, 0, N * C * sizeof(float));
	memset(g->dres, 0, N * C * sizeof(float));
	train_crossentropy_softmax_backward(g->dlogits, a->probs, m->targets,
					    1.0f / (float)N, N, V, Vp);
	train_matmul_backward(g->dlnf, grads + m->offset[P_WTE], NULL,
			      g->dlogits, a->lnf, params + m->offset[P_WTE],
			      N, C, Vp);
	train_layernorm_backward(g->dres, grads + m->offset[P_LNF_W],
				 grads + m->offset[P_LNF_B], g->dlnf,
				 a->residual3 + (L - 1) * N * C,
				 params + m->offset[P_LNF_W], a->lnf_mean,
				 a->lnf_rstd, N, C);

	/* the blocks, last to first; g->dres holds d(block output) on the
	 * way in and d(block input) on the way out */
	for (size_t l = L; l-- > 0;) {
		struct layer_params p, dp;
		const float *residual = l ? a->residual3 + (l - 1) * N * C
					  : a->encoded;
		const float *ln1 = a->ln1 + l * N * C;
		const float *ln1_mean = a->ln1_mean + l * N;
		const float *ln1_rstd = a->ln1_rstd + l * N;
		const float *qkv = a->qkv + l * N * 3 * C;
		const float *atty = a->atty + l * N * C;
		const float *att = a->att + l * B * NH * T * T;
		const float *residual2 = a->residual2 + l * N * C;
		const float *ln2 = a->ln2 + l * N * C;
		const float *ln2_mean = a->ln2_mean + l * N;
		const float *ln2_rstd = a->ln2_rstd + l * N;
		const float *fch = a->fch + l * N * 4 * C;
		const float *fch_gelu = a->fch_gelu + l * N * 4 * C;

		layer_params(m, params, l, &p);
		layer_params(m, grads, l, &dp);
		memset(g->dres2, 0, N * C * sizeof(float));
		memset(g->dfcproj, 0, N * C * sizeof(float));
		memset(g->dfch_gelu, 0, N * 4 * C * sizeof(float));
		memset(g->dfch, 0, N * 4 * C * sizeof(float));
		memset(g->dln2, 0, N * C * sizeof(float));
		memset(g->dattproj, 0, N * C * sizeof(float));
		memset(g->datty, 0, N * C * sizeof(float));
		memset(g->dqkv, 0, N * 3 * C * sizeof(float));
		memset(g->dln1, 0, N * C * sizeof(float));

		/* residual3 = residual2 + mlp(layernorm2(residual2)) */
		train_residual_backward(g->dres2, g->dfcproj, g->dres, N * C);
		train_matmul_backward(g->dfch_gelu, dp.fc_proj_w, dp.fc_proj_b,
				      g->dfcproj, fch_gelu, p.fc_proj_w, N,
				      4 * C, C);
		train_gelu_backward(g->dfch, fch, g->dfch_gelu, N * 4 * C);
		train_matmul_backward(g->dln2, dp.fc_w, dp.fc_b, g->dfch, ln2,
				      p.fc_w, N, C, 4 * C);
		train_layernorm_backward(g->dres2, dp.ln2_w, dp.ln2_b, g->dln2,
					 residual2, p.ln2_w, ln2_mean,
					 ln2_rstd, N, C);

		/* residual2 = residual + attention(layernorm1(residual)) */
		memset(g->dres, 0, N * C * sizeof(float));
		train_residual_backward(g->dres, g->dattproj, g->dres2, N * C);
		train_matmul_backward(g->datty, dp.attn_proj_w, dp.attn_proj_b,
				      g->dattproj, atty, p.attn_proj_w, N, C,
				      C);
		train_attention_backward(g->dqkv, g->att_scratch, g->datty,
					 qkv, att, B, T, C, NH);
		train_matmul_backward(g->dln1, dp.qkv_w, dp.qkv_b, g->dqkv, ln1,
				      p.qkv_w, N, C, 3 * C);
		train_layernorm_backward(g->dres, dp.ln1_w, dp.ln1_b, g->dln1,
					 residual, p.ln1_w, ln1_mean, ln1_rstd,
					 N, C);
	}

	/* the embeddings */
	train_encoder_backward(grads + m->offset[P_WTE],
			       grads + m->offset[P_WPE], g->dres, m->inputs, B,
			       T, C);
	return 0;
}

/* ---- AdamW ---- */

/* The global L2 norm of the gradients: NORM_CHUNKS fixed slices summed
 * in double, each by one thread in order, then added in order. */
static double grad_norm(const struct train_model *m)
{
	const float *g = m->state[TRAIN_GRADS];
	const size_t n = m->num_params;
	double part[NORM_CHUNKS], sum = 0.0;

#pragma omp parallel for schedule(static) if (n >= TRAIN_PAR_MIN)
	for (size_t k = 0; k < NORM_CHUNKS; k++) {
		size_t lo = n * k / NORM_CHUNKS, hi = n * (k + 1) / NORM_CHUNKS;
		double s = 0.0;

		for (size_t i = lo; i < hi; i++)
			s += (double)g[i] * g[i];
		part[k] = s;
	}
	for (size_t k = 0; k < NORM_CHUNKS; k++)
		sum += part[k];
	return sqrt(sum);
}

int train_update(struct train_model *m, float *grad_norm_out, char *msg,
		 size_t msg_len)
{
	const struct train_config *cfg = &m->cfg;
	const float lr = cfg->learning_rate, b1 = cfg->beta1, b2 = cfg->beta2;
	const float eps = cfg->eps, wd = cfg->weight_decay;
	double norm = grad_norm(m);
	float scale = 1.0f, b1c, b2c;
	uint64_t t = m->step + 1;

	if (grad_norm_out)
		*grad_norm_out = (float)norm;
	if (!isfinite(norm)) {
		util_msg(msg, msg_len, "the gradient norm at step %llu is %g: "
			 "nothing updated (a lower learning rate may help)",
			 (unsigned long long)t, norm);
		return -ERANGE;
	}
	if (cfg->grad_clip > 0 && norm > cfg->grad_clip)
		scale = (float)(cfg->grad_clip / norm);
	b1c = (float)(1.0 - pow(b1, (double)t));
	b2c = (float)(1.0 - pow(b2, (double)t));

	for (unsigned i = 0; i < P_COUNT; i++) {
		float *p = m->state[TRAIN_PARAMS] + m->offset[i];
		const float *g = m->state[TRAIN_GRADS] + m->offset[i];
		float *mm = m->state[TRAIN_ADAM_M] + m->offset[i];
		float *vv = m->state[TRAIN_ADAM_V] + m->offset[i];
		const float decay = param_kind[i].decay ? wd : 0.0f;

#pragma omp parallel for schedule(static) \
	if (m->count[i] >= TRAIN_PAR_MIN)
		for (size_t k = 0; k < m->count[i]; k++) {
			float gk = g[k] * scale;
			float mk = b1 * mm[k] + (1.0f - b1) * gk;
			float vk = b2 * vv[k] + (1.0f - b2) * gk * gk;
			float mhat = mk / b1c, vhat = vk / b2c;

			mm[k] = mk;
			vv[k] = vk;
			p[k] -= lr * (mhat / (sqrtf(vhat) + eps) +
				      decay * p[k]);
		}
	}
	m->step = t;
	return 0;
}

int train_step(struct train_model *m, const int32_t *inputs,
	       const int32_t *targets, float *loss, char *msg,
	       size_t msg_len)
{
	int rc;

	if (!targets) {
		util_msg(msg, msg_len, "a training step needs targets");
		return -EINVAL;
	}
	train_zero_grad(m);
	rc = train_forward(m, inputs, targets, loss, msg, msg_len);
	if (!rc)
		rc = train_backward(m, msg, msg_len);
	if (!rc)
		rc = train_update(m, NULL, msg, msg_len);
	return rc;
}

int train_set_learning_rate(struct train_model *m, float lr)
{
	if (!(lr >= 0) || !isfinite(lr))
		return -EINVAL;
	m->cfg.learning_rate = lr;
	return 0;
}

/* ---- state ---- */

uint64_t train_model_step(const struct train_model *m)
{
	return m->step;
}

void train_model_set_step(struct train_model *m, uint64_t step)
{
	m->step = step;
}

size_t train_model_tensors(struct train_model *m, struct train_tensor *out,
			   size_t max)
{
	size_t n = 0;

	for (unsigned k = 0; k < TRAIN_KIND_COUNT; k++) {
		for (unsigned i = 0; i < P_COUNT; i++, n++) {
			struct train_tensor *t;

			if (n >= max)
				continue;
			t = out + n;
			t->name = tensor_names[k][i];
			t->kind = (enum train_kind)k;
			t->data = m->state[k] + m->offset[i];
			t->count = m->count[i];
			t->ndim = m->ndim[i];
			memcpy(t->shape, m->shape[i], sizeof(t->shape));
		}
	}
	return n;
}

float *train_model_buffer(struct train_model *m, enum train_kind kind,
			  size_t *count)
{
	if ((unsigned)kind >= TRAIN_KIND_COUNT)
		return NULL;
	if (count)
		*count = m->num_params;
	return m->state[kind];
}
