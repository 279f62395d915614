/* SPDX-License-Identifier: MIT */
/*
 * gpu.cu - the CUDA back end of gpu.h: the GPT-2 model of model.c on one
 * GPU, its buffers, the forward and backward passes over the layers of
 * gpu_kernels.cu and gpu_attn.cu, AdamW, and data parallel over ranks
 * with NCCL.  Setting it up and taking it down is gpu_init.cu's; the
 * state both share is in gpu_model.h.
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
#include "gpu_model.h"

int gpu_cuda_fail(cudaError_t e, const char *what, char *msg, size_t len)
{
	util_msg(msg, len, "%s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* After queueing work: a launch or cuBLAS failure, named. */
int gpu_check_queued(const char *what, char *msg, size_t len)
{
	cudaError_t e = cudaGetLastError();
	const char *blas = gk_take_error();

	if (e != cudaSuccess)
		return gpu_cuda_fail(e, what, msg, len);
	if (blas) {
		util_msg(msg, len, "%s: %s", what, blas);
		return -EIO;
	}
	return 0;
}

int gpu_sync_stream(struct train_gpu *g, const char *what, char *msg,
		       size_t len)
{
	cudaError_t e = cudaStreamSynchronize(g->stream);

	if (e != cudaSuccess)
		return gpu_cuda_fail(e, what, msg, len);
	return gpu_check_queued(what, msg, len);
}

/* CUDA's current device belongs to the calling thread, and a struct
 * train_gpu may pass from thread to thread (one at a time): each entry
 * point makes the model's device current before it touches its stream or
 * cuBLAS handle (a kernel launched into another device's stream fails). */
int gpu_use_device(const struct train_gpu *g, char *msg, size_t len)
{
	cudaError_t e = cudaSetDevice(g->device);

	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "cudaSetDevice", msg, len);
	return 0;
}

#if HAVE_NCCL
int gpu_nccl_fail(ncclResult_t r, const char *what, char *msg,
		     size_t len)
{
	util_msg(msg, len, "%s: %s (NCCL %d)", what, ncclGetErrorString(r),
		 (int)r);
	return -EIO;
}
#endif

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
		rc = gpu_use_device(g, msg, msg_len);
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
	rc = gpu_sync_stream(g, "forward pass", msg, msg_len);
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
	int rc = gpu_use_device(g, msg, msg_len);

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
		return gpu_cuda_fail(e, "cudaMemcpy (logits)", msg, msg_len);
	}
	e = cudaStreamSynchronize(g->stream);
	if (e != cudaSuccess) {
		free(raw);
		return gpu_cuda_fail(e, "cudaMemcpy (logits)", msg, msg_len);
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
	rc = gpu_use_device(g, msg, msg_len);
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
	return gpu_check_queued("backward pass", msg, msg_len);
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
	int rc = gpu_use_device(g, msg, msg_len);

	if (rc)
		return rc;
#if HAVE_NCCL
	if (g->world > 1) {
		ncclResult_t r = ncclAllReduce(G, G, g->num_params, ncclFloat,
					       ncclSum, g->comm, s);

		if (r != ncclSuccess)
			return gpu_nccl_fail(r, "ncclAllReduce (gradients)", msg,
					 msg_len);
	}
#endif
	/* the norm of the mean gradient: that of the sum / world */
	gk_sumsq(g->norm, G, g->num_params, g->norm_work, s);
	cudaMemcpyAsync(&sumsq, g->norm, sizeof(sumsq), cudaMemcpyDeviceToHost,
			s);
	rc = gpu_sync_stream(g, "gradient norm", msg, msg_len);
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
	rc = gpu_sync_stream(g, "AdamW update", msg, msg_len);
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
		return gpu_nccl_fail(r, "ncclAllReduce (loss)", msg, msg_len);
	cudaMemcpyAsync(&v, g->loss_dev, sizeof(v), cudaMemcpyDeviceToHost,
			g->stream);
	rc = gpu_sync_stream(g, "loss across ranks", msg, msg_len);
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
	int rc = gpu_use_device(g, msg, msg_len);
	ncclResult_t r;

	if (rc)
		return rc;
	cudaMemcpyAsync(g->agree, values, n * sizeof(uint32_t),
			cudaMemcpyHostToDevice, g->stream);
	r = ncclAllReduce(g->agree, g->agree, n, ncclUint32, ncclMax, g->comm,
			  g->stream);
	if (r != ncclSuccess)
		return gpu_nccl_fail(r, "ncclAllReduce (agree)", msg, msg_len);
	cudaMemcpyAsync(values, g->agree, n * sizeof(uint32_t),
			cudaMemcpyDeviceToHost, g->stream);
	return gpu_sync_stream(g, "agreeing across ranks", msg, msg_len);
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
		rc = gpu_use_device(g, msg, msg_len);
	if (rc)
		return rc;
	e = cudaMemcpyAsync(host, g->state[kind], g->num_params * sizeof(float),
			    cudaMemcpyDeviceToHost, g->stream);
	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "cudaMemcpy (download)", msg, msg_len);
	return gpu_sync_stream(g, "download", msg, msg_len);
}

int train_gpu_upload(struct train_gpu *g, enum train_kind kind,
		     const float *host, char *msg, size_t msg_len)
{
	int rc = kind_ok(kind, msg, msg_len);
	cudaError_t e;

	if (!rc)
		rc = gpu_use_device(g, msg, msg_len);
	if (rc)
		return rc;
	e = cudaMemcpyAsync(g->state[kind], host, g->num_params * sizeof(float),
			    cudaMemcpyHostToDevice, g->stream);
	if (e != cudaSuccess)
		return gpu_cuda_fail(e, "cudaMemcpy (upload)", msg, msg_len);
	if (kind == TRAIN_PARAMS)
		gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS],
			       g->num_params, g->stream);
	return gpu_sync_stream(g, "upload", msg, msg_len);
}

int train_gpu_broadcast(struct train_gpu *g, char *msg, size_t msg_len)
{
	static const enum train_kind kinds[] = { TRAIN_PARAMS, TRAIN_ADAM_M,
						 TRAIN_ADAM_V };

	if (g->world == 1)
		return 0;
#if HAVE_NCCL
	int rc = gpu_use_device(g, msg, msg_len);

	if (rc)
		return rc;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		float *b = g->state[kinds[i]];
		ncclResult_t r = ncclBroadcast(b, b, g->num_params, ncclFloat,
					       0, g->comm, g->stream);

		if (r != ncclSuccess)
			return gpu_nccl_fail(r, "ncclBroadcast (state)", msg,
					 msg_len);
	}
	gk_f32_to_bf16(g->params_bf, g->state[TRAIN_PARAMS], g->num_params,
		       g->stream);
	return gpu_sync_stream(g, "broadcast", msg, msg_len);
#else
	(void)kinds;
	return train_gpu_nccl_id(NULL, msg, msg_len);
#endif
}
