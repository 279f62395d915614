/* SPDX-License-Identifier: MIT */
/*
 * gpu_init.cu - the CUDA back end set up and taken down: the GPU probed,
 * NCCL's id, the one allocation carved (the layout is at the top of
 * gpu.cu), the attention and bias choices, the parameters initialised,
 * the ranks joined; and all of it freed.
 */
#include "gpu_model.h"

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
		return gpu_cuda_fail(e, "cudaGetDeviceProperties", msg, msg_len) ==
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
		return gpu_nccl_fail(r, "ncclGetUniqueId", msg, msg_len);
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
		return gpu_cuda_fail(e, "cudaMallocHost (token buffers)", msg,
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
		return gpu_nccl_fail(r, "ncclCommInitRank", msg, msg_len);
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
		return gpu_cuda_fail(e, "cudaMemcpy (initial parameters)", msg,
				 msg_len);
	}
	gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS], g->num_params,
		       g->stream);
	rc = gpu_sync_stream(g, "bf16 copy of the parameters", msg, msg_len);
	free(host);
	return rc;
}

/* What the GPU path cannot run, refused before anything is allocated. */
static int check_shape(const struct train_config *cfg,
		       const struct train_gpu_dist *dist, char *msg,
		       size_t msg_len)
{
	int rc = train_config_check(cfg, NULL, msg, msg_len);

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
	return 0;
}

/* The model's stream and cuBLAS handle, and its memory zeroed. */
static int start_stream(struct train_gpu *g, char *msg, size_t msg_len)
{
	cudaError_t e = cudaStreamCreateWithFlags(&g->stream,
						  cudaStreamNonBlocking);

	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "cudaStreamCreate", msg, msg_len);
	if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
		g->blas = NULL;
		util_msg(msg, msg_len, "cublasCreate failed: is the GPU out of "
			 "memory or the driver older than this CUDA?");
		return -EIO;
	}
	e = cudaMemsetAsync(g->mem, 0, g->bytes, g->stream);
	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "cudaMemset", msg, msg_len);
	return 0;
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
	rc = check_shape(cfg, dist, msg, msg_len);
	if (rc)
		return rc;
	rc = pick_device(dist, &device, msg, msg_len);
	if (rc)
		return rc;
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&p, device);
	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "selecting the GPU", msg, msg_len);
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

	rc = start_stream(g, msg, msg_len);
	if (!rc)
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
