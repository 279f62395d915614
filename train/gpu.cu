/* SPDX-License-Identifier: MIT */
/*
 * gpu.cu - the CUDA back end of gpu.h: the GPT-2 model of model.c on one
 * GPU, its buffers, the forward and backward passes over the layers of
 * gpu_kernels.cu and gpu_attn.cu, AdamW, and data parallel over ranks
 * with NCCL.
 *
 * Memory.  One cudaMalloc holds everything, carved in a fixed order
 * (sizing and carving are the same code, as in model.c): the four fp32
 * kinds of state (params, grads, m, v) in model.c's layout, the bf16 copy
 * of the parameters, the activations the backward pass reads (all
 * layers), one layer's activation gradients, the attention work space and
 * the reduction partials.  A few pinned host buffers carry the tokens
 * and the embedding gradient's token groups.
 *
 * The backward pass keeps the residual stream's gradient (fp32) in one
 * buffer, dres, from the head down to the embeddings: each layernorm's
 * backward adds its input gradient into it, and each branch reads a bf16
 * copy of it (the residual add passes the gradient to both sides).
 *
 * Synchronisation.  Work goes on the model's stream; the functions that
 * return a value to the host (the loss, the gradient norm) wait for it,
 * and train_gpu_update waits for the update to finish, so that the state
 * may be read (a checkpoint's device-to-host copy) when it returns.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "config.h"
#include "gpu.h"
#include "gpu_int.h"
extern "C" {
#include "train_int.h"
}

#if HAVE_NCCL
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == TRAIN_NCCL_ID_BYTES,
	      "TRAIN_NCCL_ID_BYTES is not sizeof(ncclUniqueId)");
#endif


#define ALIGN 256   /* bytes: every carved array starts on this */

/* Activations the backward pass reads; per-layer ones are (L, ...). */
struct acts {
	float *encoded;              /* (N,C) */
	bf16 *ln1;                   /* (L,N,C) */
	float *ln1_mean, *ln1_rstd;  /* (L,N) */
	bf16 *qkv;                   /* (L,N,3C) */
	bf16 *atty;                  /* (L,N,C) */
	bf16 *att;                   /* (L,B,NH,T,T), unfused attention */
	float *att_lse;              /* (L,B,NH,T), fused attention */
	float *residual2;            /* (L,N,C) */
	bf16 *ln2;                   /* (L,N,C) */
	float *ln2_mean, *ln2_rstd;  /* (L,N) */
	bf16 *fch, *fch_gelu;        /* (L,N,4C) */
	float *residual3;            /* (L,N,C) */
	bf16 *lnf;                   /* (N,C) */
	float *lnf_mean, *lnf_rstd;  /* (N) */
	bf16 *logits;                /* (N,Vp), rows Vs apart; the backward turns
	                              * them into their gradient */
	float *losses, *lse;         /* (N) */
	bf16 *branch;                /* (N,C) a projection before its
	                              * residual add; not kept */
};

/* Gradients of one layer's activations, reused layer after layer. */
struct grads {
	float *dres;                 /* (N,C) the residual stream */
	bf16 *dbranch;               /* (N,C) its bf16 copy */
	float *dfch_gelu;            /* (N,4C) */
	bf16 *dfch;                  /* (N,4C) */
	float *dln;                  /* (N,C) into a layernorm or attention */
	bf16 *dqkv;                  /* (N,3C) */
};

struct train_gpu {
	struct train_config cfg;
	int L, NH, C, V, Vp, B, T, N;
	int Vs;                      /* row stride of the logits: Vp up to
	                              * a multiple of 64 (gk_matmul_forward_ld) */
	size_t num_params;
	size_t count[P_COUNT], offset[P_COUNT];
	unsigned rank, world;
	int device;
	char name[256];
	cudaStream_t stream;
	cublasHandle_t blas;
#if HAVE_NCCL
	ncclComm_t comm;
#endif
	void *mem;                   /* the one allocation */
	uint64_t bytes;
	float *state[TRAIN_KIND_COUNT];
	bf16 *params_bf;             /* bf16 copy of state[TRAIN_PARAMS] */
	struct acts a;
	struct grads g;
	struct gk_attn_work aw;
	bool flash;                  /* fused attention (gpu_attn.cu) */
	bool bias_epilogue;          /* bias in the GEMMs' epilogues */
	float *delta;                /* (B,NH,T) its backward's work */
	float *work;                 /* gk_partials(N, 4C) */
	double *norm_work;           /* GK_NORM_BLOCKS */
	double *norm;                /* 1 */
	float *loss_dev;             /* 1 */
	uint32_t *agree;             /* TRAIN_GPU_AGREE_MAX */
	int32_t *d_inputs, *d_targets, *d_tok, *d_start, *d_pos;
	int32_t *h_inputs, *h_targets, *h_tok, *h_start, *h_pos;  /* pinned */
	int32_t *h_count;            /* V, zero between uses */
	bool backward_ready;
	float loss;
	uint64_t step;
};

/* g->flash from the shape and FMTRAIN_ATTENTION (docs/gpu.md "Fused
 * attention"): fused where gk_flash_supported, unless the variable says
 * unfused; fused where it cannot run is refused.  And FMTRAIN_BIAS: the
 * bias in the GEMMs' epilogues (the default) or in our kernels. */
static int attention_choice(struct train_gpu *g, char *msg, size_t len)
{
	const char *e = getenv("FMTRAIN_ATTENTION");
	bool can = gk_flash_supported(g->C, g->NH);

	const char *bias = getenv("FMTRAIN_BIAS");

	if (bias && *bias && strcmp(bias, "epilogue") &&
	    strcmp(bias, "kernels")) {
		util_msg(msg, len, "FMTRAIN_BIAS=%s: use epilogue or kernels",
			 bias);
		return -EINVAL;
	}
	g->bias_epilogue = !bias || !*bias || strcmp(bias, "kernels");
	gk_bias_epilogues(g->bias_epilogue);
	if (!e || !*e || !strcmp(e, "auto")) {
		g->flash = can;
		return 0;
	}
	if (!strcmp(e, "unfused")) {
		g->flash = false;
		return 0;
	}
	if (strcmp(e, "fused")) {
		util_msg(msg, len, "FMTRAIN_ATTENTION=%s: use "
			 "auto, fused or unfused", e);
		return -EINVAL;
	}
	if (!can) {
		util_msg(msg, len, "FMTRAIN_ATTENTION=%s: the fused "
			 "attention needs a head size of 64 (channels %d / "
			 "heads %d is %d); unset it to use the unfused one",
			 e, g->C, g->NH, g->NH ? g->C / g->NH : 0);
		return -EINVAL;
	}
	g->flash = true;
	return 0;
}

static int cuda_fail(cudaError_t e, const char *what, char *msg, size_t len)
{
	util_msg(msg, len, "%s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* After queueing work: a launch or cuBLAS failure, named. */
static int check_queued(const char *what, char *msg, size_t len)
{
	cudaError_t e = cudaGetLastError();
	const char *blas = gk_take_error();

	if (e != cudaSuccess)
		return cuda_fail(e, what, msg, len);
	if (blas) {
		util_msg(msg, len, "%s: %s", what, blas);
		return -EIO;
	}
	return 0;
}

static int sync_stream(struct train_gpu *g, const char *what, char *msg,
		       size_t len)
{
	cudaError_t e = cudaStreamSynchronize(g->stream);

	if (e != cudaSuccess)
		return cuda_fail(e, what, msg, len);
	return check_queued(what, msg, len);
}

/* CUDA's current device belongs to the calling thread, and a struct
 * train_gpu may pass from thread to thread (one at a time): each entry
 * point makes the model's device current before it touches its stream or
 * cuBLAS handle (a kernel launched into another device's stream fails). */
static int use_device(const struct train_gpu *g, char *msg, size_t len)
{
	cudaError_t e = cudaSetDevice(g->device);

	if (e != cudaSuccess)
		return cuda_fail(e, "cudaSetDevice", msg, len);
	return 0;
}

#if HAVE_NCCL
static int nccl_fail(ncclResult_t r, const char *what, char *msg,
		     size_t len)
{
	util_msg(msg, len, "%s: %s (NCCL %d)", what, ncclGetErrorString(r),
		 (int)r);
	return -EIO;
}
#endif

/* ---- probe, NCCL id ---- */

/* Why cudaGetDeviceCount found nothing, in words: with no NVIDIA driver
 * at all CUDA says "driver version is insufficient", which misleads. */
static void no_gpu(cudaError_t e, char *msg, size_t msg_len)
{
	const char *why = "no CUDA device found";

	if (e == cudaErrorInsufficientDriver)
		why = "no NVIDIA driver is loaded, or it is older than this "
		      "CUDA runtime";
	else if (e == cudaErrorNoDevice)
		why = "the driver sees no GPU";
	else if (e != cudaSuccess)
		why = cudaGetErrorString(e);
	util_msg(msg, msg_len, "no usable GPU: %s (check nvidia-smi; "
		 "CUDA_VISIBLE_DEVICES if set)", why);
}

int train_gpu_probe(char *name, size_t name_len, char *msg, size_t msg_len)
{
	cudaDeviceProp p;
	cudaError_t e;
	int n = 0;

	if (name && name_len)
		name[0] = '\0';
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		no_gpu(e, msg, msg_len);
		return -ENODEV;
	}
	e = cudaGetDeviceProperties(&p, 0);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaGetDeviceProperties", msg, msg_len) ==
		       -ENOMEM ? -ENOMEM : -ENODEV;
	if (p.major < 8) {
		util_msg(msg, msg_len, "GPU %s has compute capability %d.%d; the "
			 "bf16 kernels need 8.0 (Ampere) or newer", p.name,
			 p.major, p.minor);
		return -ENODEV;
	}
	if (name && name_len)
		snprintf(name, name_len, "%s", p.name);
	return 0;
}

int train_gpu_nccl_id(unsigned char id[TRAIN_NCCL_ID_BYTES], char *msg,
		      size_t msg_len)
{
#if HAVE_NCCL
	ncclUniqueId u;
	ncclResult_t r = ncclGetUniqueId(&u);

	if (r != ncclSuccess)
		return nccl_fail(r, "ncclGetUniqueId", msg, msg_len);
	memcpy(id, &u, TRAIN_NCCL_ID_BYTES);
	return 0;
#else
	util_msg(msg, msg_len, "fmtrain was built without NCCL, so it runs on one "
		 "GPU only: install NCCL (libnccl-dev, or the one of the CUDA "
		 "toolkit), then ./configure and make again");
	return -ENOTSUP;
#endif
}

/* ---- memory ---- */

/* Carves arrays out of the one allocation; with base NULL it only
 * counts, so that the same code sizes and lays out. */
struct cursor {
	char *base;
	size_t used;
};

static void *carve(struct cursor *c, size_t bytes)
{
	size_t at = (c->used + ALIGN - 1) / ALIGN * ALIGN;

	c->used = at + bytes;
	return c->base ? c->base + at : NULL;
}

#define CARVE(c, ptr, n) ((ptr) = (std::remove_reference_t<decltype(ptr)>) \
				carve((c), \
				(size_t)(n) * sizeof(*(ptr))))

static void layout(struct train_gpu *g, struct cursor *c)
{
	const size_t L = g->L, C = g->C, N = g->N, NC = N * C;
	const size_t att = (size_t)g->B * g->NH * g->T * g->T;
	const size_t bnt = (size_t)g->B * g->NH * g->T;
	struct acts *a = &g->a;
	struct grads *d = &g->g;
	struct gk_attn_work *w = &g->aw;

	for (int k = 0; k < TRAIN_KIND_COUNT; k++)
		CARVE(c, g->state[k], g->num_params);
	CARVE(c, g->params_bf, g->num_params);

	CARVE(c, a->encoded, NC);
	CARVE(c, a->ln1, L * NC);
	CARVE(c, a->ln1_mean, L * N);
	CARVE(c, a->ln1_rstd, L * N);
	CARVE(c, a->qkv, L * 3 * NC);
	CARVE(c, a->atty, L * NC);
	if (g->flash)
		CARVE(c, a->att_lse, L * bnt);
	else
		CARVE(c, a->att, L * att);
	CARVE(c, a->residual2, L * NC);
	CARVE(c, a->ln2, L * NC);
	CARVE(c, a->ln2_mean, L * N);
	CARVE(c, a->ln2_rstd, L * N);
	CARVE(c, a->fch, L * 4 * NC);
	CARVE(c, a->fch_gelu, L * 4 * NC);
	CARVE(c, a->residual3, L * NC);
	CARVE(c, a->lnf, NC);
	CARVE(c, a->lnf_mean, N);
	CARVE(c, a->lnf_rstd, N);
	CARVE(c, a->logits, N * (size_t)g->Vs);
	CARVE(c, a->losses, N);
	CARVE(c, a->lse, N);
	CARVE(c, a->branch, NC);

	CARVE(c, d->dres, NC);
	CARVE(c, d->dbranch, NC);
	CARVE(c, d->dfch_gelu, 4 * NC);
	CARVE(c, d->dfch, 4 * NC);
	CARVE(c, d->dln, NC);
	CARVE(c, d->dqkv, 3 * NC);

	CARVE(c, w->dy, NC);
	if (g->flash) {
		CARVE(c, g->delta, bnt);
	} else {
		CARVE(c, w->q, NC);
		CARVE(c, w->k, NC);
		CARVE(c, w->v, NC);
		CARVE(c, w->y, NC);
		CARVE(c, w->dq, NC);
		CARVE(c, w->dk, NC);
		CARVE(c, w->dv, NC);
		CARVE(c, w->scores, att);
		CARVE(c, w->dscores, att);
	}

	CARVE(c, g->work, gk_partials(N, 4 * C));
	CARVE(c, g->norm_work, GK_NORM_BLOCKS);
	CARVE(c, g->norm, 1);
	CARVE(c, g->loss_dev, 1);
	CARVE(c, g->agree, TRAIN_GPU_AGREE_MAX);
	CARVE(c, g->d_inputs, N);
	CARVE(c, g->d_targets, N);
	CARVE(c, g->d_tok, N);
	CARVE(c, g->d_start, N + 1);
	CARVE(c, g->d_pos, N);
}

/* The host side: pinned token buffers (5N + 1 ints) and the counts. */
static int host_buffers(struct train_gpu *g, char *msg, size_t msg_len)
{
	size_t N = g->N;
	int32_t *p;
	cudaError_t e = cudaMallocHost((void **)&p, (5 * N + 1) *
					sizeof(int32_t));

	if (e != cudaSuccess)
		return cuda_fail(e, "cudaMallocHost (token buffers)", msg,
				 msg_len);
	g->h_inputs = p;
	g->h_targets = p + N;
	g->h_tok = p + 2 * N;
	g->h_pos = p + 3 * N;
	g->h_start = p + 4 * N;
	g->h_count = (int32_t *)calloc((size_t)g->V, sizeof(int32_t));
	if (!g->h_count) {
		util_msg(msg, msg_len, "cannot allocate %d counters", g->V);
		return -ENOMEM;
	}
	return 0;
}

/* ---- init and free ---- */

static int pick_device(const struct train_gpu_dist *dist, int *device,
		       char *msg, size_t msg_len)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		no_gpu(e, msg, msg_len);
		return -ENODEV;
	}
	*device = dist && dist->device >= 0 ? dist->device
		  : (int)((dist ? dist->local_rank : 0) % (unsigned)n);
	if (*device >= n) {
		util_msg(msg, msg_len, "GPU %d asked for, but this machine has %d "
			 "(0 .. %d)", *device, n, n - 1);
		return -EINVAL;
	}
	return 0;
}

static int join(struct train_gpu *g, const struct train_gpu_dist *dist,
		char *msg, size_t msg_len)
{
	if (g->world == 1)
		return 0;
#if HAVE_NCCL
	ncclUniqueId id;
	ncclResult_t r;

	memcpy(&id, dist->nccl_id, sizeof(id));
	r = ncclCommInitRank(&g->comm, (int)g->world, id, (int)g->rank);
	if (r != ncclSuccess) {
		g->comm = NULL;
		return nccl_fail(r, "ncclCommInitRank", msg, msg_len);
	}
	return 0;
#else
	return train_gpu_nccl_id(NULL, msg, msg_len);
#endif
}

static int init_params(struct train_gpu *g, char *msg, size_t msg_len)
{
	size_t bytes = g->num_params * sizeof(float);
	float *host = (float *)malloc(bytes);
	cudaError_t e;
	int rc;

	if (!host) {
		util_msg(msg, msg_len, "cannot allocate %zu bytes of host memory "
			 "for the initial parameters", bytes);
		return -ENOMEM;
	}
	train_params_init(&g->cfg, host);
	/* On the model's stream: it is non-blocking, so a plain cudaMemcpy
	 * (the legacy stream) would be ordered neither after the memset of
	 * the whole allocation nor before the bf16 conversion, and from
	 * pageable memory it may return before its DMA has landed. */
	e = cudaMemcpyAsync(g->state[TRAIN_PARAMS], host, bytes,
			    cudaMemcpyHostToDevice, g->stream);
	if (e != cudaSuccess) {
		free(host);
		return cuda_fail(e, "cudaMemcpy (initial parameters)", msg,
				 msg_len);
	}
	gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS], g->num_params,
		       g->stream);
	rc = sync_stream(g, "bf16 copy of the parameters", msg, msg_len);
	free(host);
	return rc;
}

int train_gpu_init(const struct train_config *cfg,
		   const struct train_gpu_dist *dist, struct train_gpu **out,
		   char *msg, size_t msg_len)
{
	struct train_gpu *g;
	struct cursor c = { NULL, 0 };
	cudaDeviceProp p;
	cudaError_t e;
	size_t free_b = 0, total_b = 0;
	int rc, device;

	*out = NULL;
	rc = train_config_check(cfg, NULL, msg, msg_len);
	if (rc)
		return rc;
	if (dist && (dist->world_size < 1 || dist->rank >= dist->world_size)) {
		util_msg(msg, msg_len, "rank %u of world size %u: the rank must be "
			 "0 .. world size - 1", dist->rank, dist->world_size);
		return -EINVAL;
	}
	/* the column sums launch one block row per GK_ROW_CHUNK positions,
	 * and gridDim.y stops at 65535 */
	if ((uint64_t)cfg->batch * cfg->seq_len > INT32_MAX / 4 ||
	    (uint64_t)cfg->batch * cfg->seq_len > 65535ull * GK_ROW_CHUNK) {
		util_msg(msg, msg_len, "batch * seq_len %llu is too large for the "
			 "GPU path (at most %llu)",
			 (unsigned long long)cfg->batch * cfg->seq_len,
			 65535ull * GK_ROW_CHUNK);
		return -EINVAL;
	}
	rc = pick_device(dist, &device, msg, msg_len);
	if (rc)
		return rc;
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&p, device);
	if (e != cudaSuccess)
		return cuda_fail(e, "selecting the GPU", msg, msg_len);
	if (p.major < 8) {
		util_msg(msg, msg_len, "GPU %d (%s) has compute capability %d.%d; "
			 "the bf16 kernels need 8.0 or newer", device, p.name,
			 p.major, p.minor);
		return -ENODEV;
	}

	g = (struct train_gpu *)calloc(1, sizeof(*g));
	if (!g) {
		util_msg(msg, msg_len, "out of host memory");
		return -ENOMEM;
	}
	g->cfg = *cfg;
	if (!g->cfg.padded_vocab_size)
		g->cfg.padded_vocab_size = cfg->vocab_size;
	g->L = (int)cfg->layers;
	g->NH = (int)cfg->heads;
	g->C = (int)cfg->channels;
	g->V = (int)cfg->vocab_size;
	g->Vp = (int)g->cfg.padded_vocab_size;
	g->Vs = (g->Vp + 63) / 64 * 64;
	g->B = (int)cfg->batch;
	g->T = (int)cfg->seq_len;
	g->N = g->B * g->T;
	rc = attention_choice(g, msg, msg_len);
	if (rc) {
		free(g);
		return rc;
	}
	g->rank = dist ? dist->rank : 0;
	g->world = dist ? dist->world_size : 1;
	g->device = device;
	snprintf(g->name, sizeof(g->name), "%s", p.name);
	g->num_params = train_param_layout(&g->cfg, TRAIN_PARAMS, NULL, NULL,
					   g->offset);
	for (int i = 0; i < P_COUNT; i++)
		g->count[i] = (i + 1 < P_COUNT ? g->offset[i + 1]
					       : g->num_params) - g->offset[i];
	g->loss = NAN;

	layout(g, &c);
	g->bytes = c.used;
	e = cudaMalloc(&g->mem, c.used);
	if (e != cudaSuccess) {
		cudaGetLastError();   /* not sticky: clear it */
		cudaMemGetInfo(&free_b, &total_b);
		util_msg(msg, msg_len, "this model needs %.2f GiB of GPU memory; "
			 "GPU %d (%s) has %.2f GiB free: a smaller batch, seq_len "
			 "or model needs less", c.used / 1073741824.0, device,
			 p.name, free_b / 1073741824.0);
		train_gpu_free(g);
		return -ENOMEM;
	}
	c = (struct cursor){ (char *)g->mem, 0 };
	layout(g, &c);

	e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		rc = cuda_fail(e, "cudaStreamCreate", msg, msg_len);
		goto out_free;
	}
	if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
		g->blas = NULL;
		util_msg(msg, msg_len, "cublasCreate failed: is the GPU out of "
			 "memory or the driver older than this CUDA?");
		rc = -EIO;
		goto out_free;
	}
	e = cudaMemsetAsync(g->mem, 0, g->bytes, g->stream);
	if (e != cudaSuccess) {
		rc = cuda_fail(e, "cudaMemset", msg, msg_len);
		goto out_free;
	}
	rc = host_buffers(g, msg, msg_len);
	if (!rc)
		rc = init_params(g, msg, msg_len);
	if (!rc)
		rc = join(g, dist, msg, msg_len);
	if (rc)
		goto out_free;
	*out = g;
	return 0;

out_free:
	train_gpu_free(g);
	return rc;
}

void train_gpu_free(struct train_gpu *g)
{
	if (!g)
		return;
	cudaSetDevice(g->device);
	if (g->stream)
		cudaStreamSynchronize(g->stream);
#if HAVE_NCCL
	if (g->comm)
		ncclCommDestroy(g->comm);
#endif
	if (g->blas)
		cublasDestroy(g->blas);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	cudaFree(g->mem);
	if (g->h_inputs)
		cudaFreeHost(g->h_inputs);
	free(g->h_count);
	free(g);
}

const struct train_config *train_gpu_config(const struct train_gpu *g)
{
	return &g->cfg;
}

const char *train_gpu_device_name(const struct train_gpu *g)
{
	return g->name;
}

uint64_t train_gpu_bytes(const struct train_gpu *g)
{
	return g->bytes;
}

size_t train_gpu_num_params(const struct train_gpu *g)
{
	return g->num_params;
}

/* ---- forward ---- */

/* Parameter tensor i of buffer base (fp32 or its bf16 copy), layer l. */
#define PT(base, i, l) ((base) + g->offset[i] + \
			(size_t)(l) * (g->count[i] / (size_t)g->L))

int train_gpu_forward(struct train_gpu *g, const int32_t *inputs,
		      const int32_t *targets, float *loss, char *msg,
		      size_t msg_len)
{
	const int L = g->L, NH = g->NH, C = g->C, B = g->B, T = g->T;
	const int N = g->N, V = g->V, Vp = g->Vp;
	const size_t NC = (size_t)N * C, att = (size_t)B * NH * T * T;
	const size_t bnt = (size_t)B * NH * T;
	const float *P = g->state[TRAIN_PARAMS];
	const bf16 *PB = g->params_bf;
	struct acts *a = &g->a;
	cudaStream_t s = g->stream;
	float sum = NAN;
	int rc;

	g->backward_ready = false;
	g->loss = NAN;
	if (loss)
		*loss = NAN;
	rc = train_check_batch(&g->cfg, inputs, targets, msg, msg_len);
	if (!rc)
		rc = use_device(g, msg, msg_len);
	if (rc)
		return rc;
	memcpy(g->h_inputs, inputs, N * sizeof(int32_t));
	cudaMemcpyAsync(g->d_inputs, g->h_inputs, N * sizeof(int32_t),
			cudaMemcpyHostToDevice, s);
	if (targets) {
		memcpy(g->h_targets, targets, N * sizeof(int32_t));
		cudaMemcpyAsync(g->d_targets, g->h_targets,
				N * sizeof(int32_t), cudaMemcpyHostToDevice, s);
	}

	gk_encoder_forward(a->encoded, g->d_inputs, P + g->offset[P_WTE],
			   P + g->offset[P_WPE], B, T, C, s);
	for (int l = 0; l < L; l++) {
		const float *residual = l ? a->residual3 + (l - 1) * NC
					  : a->encoded;
		bf16 *ln1 = a->ln1 + l * NC, *qkv = a->qkv + l * 3 * NC;
		bf16 *atty = a->atty + l * NC, *attw =
			g->flash ? NULL : a->att + l * att;
		bf16 *ln2 = a->ln2 + l * NC, *fch = a->fch + l * 4 * NC;
		bf16 *fch_gelu = a->fch_gelu + l * 4 * NC;
		float *residual2 = a->residual2 + l * NC;
		float *residual3 = a->residual3 + l * NC;

		/* x + attention(layernorm(x)) */
		gk_layernorm_forward(ln1, a->ln1_mean + (size_t)l * N,
				     a->ln1_rstd + (size_t)l * N, residual,
				     PT(P, P_LN1_W, l), PT(P, P_LN1_B, l), N,
				     C, s);
		gk_matmul_forward(g->blas, qkv, ln1, PT(PB, P_QKV_W, l),
				  PT(P, P_QKV_B, l),
				  PT(PB, P_QKV_B, l), N, C, 3 * C, s);
		if (g->flash)
			gk_flash_forward(atty, a->att_lse + l * bnt, qkv, B, T,
					 C, NH, s);
		else
			gk_attention_forward(g->blas, atty, attw, qkv, B, T,
					     C, NH, &g->aw, s);
		gk_matmul_forward(g->blas, a->branch, atty,
				  PT(PB, P_ATTN_PROJ_W, l),
				  PT(P, P_ATTN_PROJ_B, l),
				  PT(PB, P_ATTN_PROJ_B, l), N, C, C, s);
		gk_residual_forward(residual2, residual, a->branch, NC, s);
		/* x + mlp(layernorm(x)) */
		gk_layernorm_forward(ln2, a->ln2_mean + (size_t)l * N,
				     a->ln2_rstd + (size_t)l * N, residual2,
				     PT(P, P_LN2_W, l), PT(P, P_LN2_B, l), N,
				     C, s);
		gk_matmul_forward(g->blas, fch, ln2, PT(PB, P_FC_W, l),
				  PT(P, P_FC_B, l),
				  PT(PB, P_FC_B, l), N, C, 4 * C, s);
		gk_gelu_forward(fch_gelu, fch, 4 * NC, s);
		gk_matmul_forward(g->blas, a->branch, fch_gelu,
				  PT(PB, P_FC_PROJ_W, l),
				  PT(P, P_FC_PROJ_B, l),
				  PT(PB, P_FC_PROJ_B, l), N, 4 * C, C, s);
		gk_residual_forward(residual3, residual2, a->branch, NC, s);
	}
	/* final layernorm, tied head, and the loss */
	gk_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd,
			     a->residual3 + (L - 1) * NC, P + g->offset[P_LNF_W],
			     P + g->offset[P_LNF_B], N, C, s);
	gk_matmul_forward_ld(g->blas, a->logits, a->lnf,
			     PB + g->offset[P_WTE], N, C, Vp, g->Vs, s);
	if (targets) {
		gk_crossentropy_forward(a->losses, a->lse, a->logits,
					g->d_targets, N, V, g->Vs, s);
		gk_sum(g->loss_dev, a->losses, N, s);
		cudaMemcpyAsync(&sum, g->loss_dev, sizeof(sum),
				cudaMemcpyDeviceToHost, s);
	}
	rc = sync_stream(g, "forward pass", msg, msg_len);
	if (rc)
		return rc;
	if (targets) {
		g->loss = (float)((double)sum / N);
		g->backward_ready = true;
	}
	if (loss)
		*loss = g->loss;
	return 0;
}

int train_gpu_logits(struct train_gpu *g, float *host, char *msg,
		     size_t msg_len)
{
	size_t n = (size_t)g->N * g->Vp;
	uint16_t *raw;
	cudaError_t e;
	int rc = use_device(g, msg, msg_len);

	if (rc)
		return rc;
	raw = (uint16_t *)malloc(n * sizeof(uint16_t));
	if (!raw) {
		util_msg(msg, msg_len, "cannot allocate %zu bytes", n * 2);
		return -ENOMEM;
	}
	/* on the model's stream: a plain cudaMemcpy would not wait for the
	 * work still queued there (the stream is non-blocking) */
	e = cudaMemcpy2DAsync(raw, g->Vp * sizeof(uint16_t), g->a.logits,
			      g->Vs * sizeof(uint16_t),
			      g->Vp * sizeof(uint16_t), g->N,
			      cudaMemcpyDeviceToHost, g->stream);
	if (e != cudaSuccess) {
		free(raw);
		return cuda_fail(e, "cudaMemcpy (logits)", msg, msg_len);
	}
	e = cudaStreamSynchronize(g->stream);
	if (e != cudaSuccess) {
		free(raw);
		return cuda_fail(e, "cudaMemcpy (logits)", msg, msg_len);
	}
	/* bf16 is the top half of an fp32 */
	for (size_t i = 0; i < n; i++) {
		uint32_t bits = (uint32_t)raw[i] << 16;

		memcpy(host + i, &bits, sizeof(bits));
	}
	free(raw);
	return 0;
}

/* ---- backward ---- */

void train_gpu_zero_grad(struct train_gpu *g)
{
	cudaSetDevice(g->device);
	cudaMemsetAsync(g->state[TRAIN_GRADS], 0,
			g->num_params * sizeof(float), g->stream);
}

int train_gpu_backward(struct train_gpu *g, char *msg, size_t msg_len)
{
	const int L = g->L, NH = g->NH, C = g->C, B = g->B, T = g->T;
	const int N = g->N, V = g->V, Vp = g->Vp;
	const size_t NC = (size_t)N * C, att = (size_t)B * NH * T * T;
	const size_t bnt = (size_t)B * NH * T;
	const float *P = g->state[TRAIN_PARAMS];
	float *G = g->state[TRAIN_GRADS];
	const bf16 *PB = g->params_bf;
	struct acts *a = &g->a;
	struct grads *d = &g->g;
	cudaStream_t s = g->stream;
	int ntok, rc;

	if (!g->backward_ready) {
		util_msg(msg, msg_len, "train_gpu_backward needs a successful "
			 "train_gpu_forward with targets first");
		return -EINVAL;
	}
	g->backward_ready = false;   /* the logits are consumed below */
	rc = use_device(g, msg, msg_len);
	if (rc)
		return rc;

	/* the head; d(mean loss)/d(each position's loss) is 1/N */
	gk_crossentropy_backward(a->logits, a->logits, a->lse, g->d_targets,
				 1.0f / (float)N, N, V, g->Vs, s);
	gk_matmul_backward_ld(g->blas, d->dln, G + g->offset[P_WTE], a->logits,
			      a->lnf, PB + g->offset[P_WTE], N, C, Vp, g->Vs,
			      s);
	cudaMemsetAsync(d->dres, 0, NC * sizeof(float), s);
	gk_layernorm_backward(d->dres, G + g->offset[P_LNF_W],
			      G + g->offset[P_LNF_B], d->dln,
			      a->residual3 + (L - 1) * NC,
			      P + g->offset[P_LNF_W], a->lnf_mean,
			      a->lnf_rstd, N, C, g->work, s);

	/* the blocks, last to first; dres holds d(block output) on the way
	 * in and d(block input) on the way out */
	for (int l = L - 1; l >= 0; l--) {
		const float *residual = l ? a->residual3 + (l - 1) * NC
					  : a->encoded;
		const bf16 *ln1 = a->ln1 + l * NC, *qkv = a->qkv + l * 3 * NC;
		const bf16 *atty = a->atty + l * NC, *attw =
			g->flash ? NULL : a->att + l * att;
		const bf16 *ln2 = a->ln2 + l * NC, *fch = a->fch + l * 4 * NC;
		const bf16 *fch_gelu = a->fch_gelu + l * 4 * NC;
		const float *residual2 = a->residual2 + l * NC;

		/* residual3 = residual2 + mlp(layernorm2(residual2)) */
		gk_f32_to_bf16(d->dbranch, d->dres, NC, s);
		gk_matmul_backward(g->blas, d->dfch_gelu,
				   PT(G, P_FC_PROJ_W, l), PT(G, P_FC_PROJ_B, l),
				   d->dbranch, fch_gelu,
				   PT(PB, P_FC_PROJ_W, l), N, 4 * C, C, g->work,
				   s);
		gk_gelu_backward(d->dfch, fch, d->dfch_gelu, 4 * NC, s);
		gk_matmul_backward(g->blas, d->dln, PT(G, P_FC_W, l),
				   PT(G, P_FC_B, l), d->dfch, ln2,
				   PT(PB, P_FC_W, l), N, C, 4 * C, g->work, s);
		gk_layernorm_backward(d->dres, PT(G, P_LN2_W, l),
				      PT(G, P_LN2_B, l), d->dln, residual2,
				      PT(P, P_LN2_W, l),
				      a->ln2_mean + (size_t)l * N,
				      a->ln2_rstd + (size_t)l * N, N, C,
				      g->work, s);

		/* residual2 = residual + attention(layernorm1(residual)) */
		gk_f32_to_bf16(d->dbranch, d->dres, NC, s);
		gk_matmul_backward(g->blas, d->dln, PT(G, P_ATTN_PROJ_W, l),
				   PT(G, P_ATTN_PROJ_B, l), d->dbranch, atty,
				   PT(PB, P_ATTN_PROJ_W, l), N, C, C, g->work,
				   s);
		if (g->flash)
			gk_flash_backward(d->dqkv, d->dln, qkv, atty,
					  a->att_lse + l * bnt, B, T, C, NH,
					  g->aw.dy, g->delta, s);
		else
			gk_attention_backward(g->blas, d->dqkv, d->dln, qkv,
					      attw, B, T, C, NH, &g->aw, s);
		gk_matmul_backward(g->blas, d->dln, PT(G, P_QKV_W, l),
				   PT(G, P_QKV_B, l), d->dqkv, ln1,
				   PT(PB, P_QKV_W, l), N, C, 3 * C, g->work, s);
		gk_layernorm_backward(d->dres, PT(G, P_LN1_W, l),
				      PT(G, P_LN1_B, l), d->dln, residual,
				      PT(P, P_LN1_W, l),
				      a->ln1_mean + (size_t)l * N,
				      a->ln1_rstd + (size_t)l * N, N, C,
				      g->work, s);
	}

	/* the embeddings: positions grouped by token on the host */
	ntok = gk_token_groups(g->h_inputs, N, g->h_tok, g->h_start, g->h_pos,
			       g->h_count, V);
	cudaMemcpyAsync(g->d_tok, g->h_tok, ntok * sizeof(int32_t),
			cudaMemcpyHostToDevice, s);
	cudaMemcpyAsync(g->d_start, g->h_start, (ntok + 1) * sizeof(int32_t),
			cudaMemcpyHostToDevice, s);
	cudaMemcpyAsync(g->d_pos, g->h_pos, N * sizeof(int32_t),
			cudaMemcpyHostToDevice, s);
	gk_encoder_backward(G + g->offset[P_WTE], G + g->offset[P_WPE], d->dres,
			    g->d_tok, g->d_start, g->d_pos, ntok, B, T, C, s);
	return check_queued("backward pass", msg, msg_len);
}

/* ---- AdamW, across ranks ---- */

int train_gpu_update(struct train_gpu *g, float *grad_norm_out, char *msg,
		     size_t msg_len)
{
	const struct train_config *cfg = &g->cfg;
	float *G = g->state[TRAIN_GRADS];
	cudaStream_t s = g->stream;
	double sumsq = 0.0, norm;
	float scale = 1.0f, b1c, b2c;
	uint64_t t = g->step + 1;
	int rc = use_device(g, msg, msg_len);

	if (rc)
		return rc;
#if HAVE_NCCL
	if (g->world > 1) {
		ncclResult_t r = ncclAllReduce(G, G, g->num_params, ncclFloat,
					       ncclSum, g->comm, s);

		if (r != ncclSuccess)
			return nccl_fail(r, "ncclAllReduce (gradients)", msg,
					 msg_len);
	}
#endif
	/* the norm of the mean gradient: that of the sum / world */
	gk_sumsq(g->norm, G, g->num_params, g->norm_work, s);
	cudaMemcpyAsync(&sumsq, g->norm, sizeof(sumsq), cudaMemcpyDeviceToHost,
			s);
	rc = sync_stream(g, "gradient norm", msg, msg_len);
	if (rc)
		return rc;
	norm = sqrt(sumsq) / g->world;
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
	b1c = (float)(1.0 - pow(cfg->beta1, (double)t));
	b2c = (float)(1.0 - pow(cfg->beta2, (double)t));
	for (int i = 0; i < P_COUNT; i++) {
		size_t o = g->offset[i];

		gk_adamw(g->state[TRAIN_PARAMS] + o, g->params_bf + o, G + o,
			 g->state[TRAIN_ADAM_M] + o, g->state[TRAIN_ADAM_V] + o,
			 g->count[i], cfg->learning_rate, cfg->beta1,
			 cfg->beta2, b1c, b2c, cfg->eps,
			 train_param_decays((unsigned)i) ? cfg->weight_decay
							 : 0.0f,
			 scale / (float)g->world, s);
	}
	rc = sync_stream(g, "AdamW update", msg, msg_len);
	if (rc)
		return rc;
	g->step = t;
	return 0;
}

/* The mean over ranks of each rank's loss. */
static int mean_loss(struct train_gpu *g, float *loss, char *msg,
		     size_t msg_len)
{
	if (g->world == 1)
		return 0;
#if HAVE_NCCL
	float v = *loss;
	ncclResult_t r;
	int rc;

	cudaMemcpyAsync(g->loss_dev, &v, sizeof(v), cudaMemcpyHostToDevice,
			g->stream);
	r = ncclAllReduce(g->loss_dev, g->loss_dev, 1, ncclFloat, ncclSum,
			  g->comm, g->stream);
	if (r != ncclSuccess)
		return nccl_fail(r, "ncclAllReduce (loss)", msg, msg_len);
	cudaMemcpyAsync(&v, g->loss_dev, sizeof(v), cudaMemcpyDeviceToHost,
			g->stream);
	rc = sync_stream(g, "loss across ranks", msg, msg_len);
	if (!rc)
		*loss = v / (float)g->world;
	return rc;
#else
	return 0;
#endif
}

int train_gpu_step(struct train_gpu *g, const int32_t *inputs,
		   const int32_t *targets, float *loss, char *msg,
		   size_t msg_len)
{
	float l = NAN;
	int rc;

	if (!targets) {
		util_msg(msg, msg_len, "a training step needs targets");
		return -EINVAL;
	}
	train_gpu_zero_grad(g);
	rc = train_gpu_forward(g, inputs, targets, &l, msg, msg_len);
	if (!rc)
		rc = train_gpu_backward(g, msg, msg_len);
	if (!rc)
		rc = train_gpu_update(g, NULL, msg, msg_len);
	if (!rc)
		rc = mean_loss(g, &l, msg, msg_len);
	if (loss)
		*loss = l;
	return rc;
}

int train_gpu_set_learning_rate(struct train_gpu *g, float lr)
{
	if (!(lr >= 0) || !isfinite(lr))
		return -EINVAL;
	g->cfg.learning_rate = lr;
	return 0;
}

const char *train_gpu_kernels(const struct train_gpu *g, char *buf,
			      size_t len)
{
	unsigned long fb = gk_lt_fallbacks();

	if (len)
		snprintf(buf, len, "attention %s, bias %s, %lu fallback(s)",
			 g->flash ? "fused" : "unfused",
			 g->bias_epilogue ? "epilogue" : "kernels", fb);
	return buf;
}

uint64_t train_gpu_step_count(const struct train_gpu *g)
{
	return g->step;
}

void train_gpu_set_step(struct train_gpu *g, uint64_t step)
{
	g->step = step;
}

int train_gpu_all_max(struct train_gpu *g, uint32_t *values, unsigned n,
		      char *msg, size_t msg_len)
{
	if (n > TRAIN_GPU_AGREE_MAX) {
		util_msg(msg, msg_len, "%u values to agree on; at most %u", n,
			 TRAIN_GPU_AGREE_MAX);
		return -EINVAL;
	}
	if (g->world == 1 || !n)
		return 0;
#if HAVE_NCCL
	int rc = use_device(g, msg, msg_len);
	ncclResult_t r;

	if (rc)
		return rc;
	cudaMemcpyAsync(g->agree, values, n * sizeof(uint32_t),
			cudaMemcpyHostToDevice, g->stream);
	r = ncclAllReduce(g->agree, g->agree, n, ncclUint32, ncclMax, g->comm,
			  g->stream);
	if (r != ncclSuccess)
		return nccl_fail(r, "ncclAllReduce (agree)", msg, msg_len);
	cudaMemcpyAsync(values, g->agree, n * sizeof(uint32_t),
			cudaMemcpyDeviceToHost, g->stream);
	return sync_stream(g, "agreeing across ranks", msg, msg_len);
#else
	return train_gpu_nccl_id(NULL, msg, msg_len);
#endif
}

/* ---- state ---- */

size_t train_gpu_tensors(struct train_gpu *g, struct train_tensor *out,
			 size_t max)
{
	size_t n = 0;

	for (int k = 0; k < TRAIN_KIND_COUNT; k++) {
		struct train_tensor t[TRAIN_PARAM_TENSORS];

		train_param_layout(&g->cfg, (enum train_kind)k, g->state[k], t,
				   NULL);
		for (int i = 0; i < TRAIN_PARAM_TENSORS; i++, n++)
			if (n < max)
				out[n] = t[i];
	}
	return n;
}

static int kind_ok(enum train_kind kind, char *msg, size_t msg_len)
{
	if ((unsigned)kind < TRAIN_KIND_COUNT)
		return 0;
	util_msg(msg, msg_len, "no such kind of state: %d", (int)kind);
	return -EINVAL;
}

int train_gpu_download(struct train_gpu *g, enum train_kind kind,
		       float *host, char *msg, size_t msg_len)
{
	int rc = kind_ok(kind, msg, msg_len);
	cudaError_t e;

	if (!rc)
		rc = use_device(g, msg, msg_len);
	if (rc)
		return rc;
	e = cudaMemcpyAsync(host, g->state[kind], g->num_params * sizeof(float),
			    cudaMemcpyDeviceToHost, g->stream);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaMemcpy (download)", msg, msg_len);
	return sync_stream(g, "download", msg, msg_len);
}

int train_gpu_upload(struct train_gpu *g, enum train_kind kind,
		     const float *host, char *msg, size_t msg_len)
{
	int rc = kind_ok(kind, msg, msg_len);
	cudaError_t e;

	if (!rc)
		rc = use_device(g, msg, msg_len);
	if (rc)
		return rc;
	e = cudaMemcpyAsync(g->state[kind], host, g->num_params * sizeof(float),
			    cudaMemcpyHostToDevice, g->stream);
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaMemcpy (upload)", msg, msg_len);
	if (kind == TRAIN_PARAMS)
		gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS],
			       g->num_params, g->stream);
	return sync_stream(g, "upload", msg, msg_len);
}

int train_gpu_broadcast(struct train_gpu *g, char *msg, size_t msg_len)
{
	static const enum train_kind kinds[] = { TRAIN_PARAMS, TRAIN_ADAM_M,
						 TRAIN_ADAM_V };

	if (g->world == 1)
		return 0;
#if HAVE_NCCL
	int rc = use_device(g, msg, msg_len);

	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		float *b = g->state[kinds[i]];
		ncclResult_t r = ncclBroadcast(b, b, g->num_params, ncclFloat,
					       0, g->comm, g->stream);

		if (r != ncclSuccess)
			return nccl_fail(r, "ncclBroadcast (state)", msg,
					 msg_len);
	}
	gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS], g->num_params,
		       g->stream);
	return sync_stream(g, "broadcast", msg, msg_len);
#else
	(void)kinds;
	return train_gpu_nccl_id(NULL, msg, msg_len);
#endif
}
