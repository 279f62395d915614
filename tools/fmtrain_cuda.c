/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_cuda.c - `fmtrain train --device cuda`: the back end table
 * (fmtrain.h) over train/gpu.h: the model in GPU memory (bf16 matmuls
 * on fp32 master weights), data parallel over ranks, one process per
 * GPU, with NCCL.  Its tensors are device memory, which checkpoints copy
 * out with CKPT_ADD_DEVICE; a restore reads a whole kind into a host
 * buffer and uploads it, and train_gpu_broadcast then makes every rank
 * rank 0's replica.  In a build without CUDA gpu_none.c answers every
 * call with -ENOTSUP, and probe says so before anything is set up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fmtrain.h"

static struct train_gpu *gpu(const struct fmtrain_model *m)
{
	return m->priv;
}

static int cuda_init(struct fmtrain_model *m, const struct train_config *cfg,
		     const struct fmtrain_world *w, const unsigned char *id,
		     char *msg, size_t msg_len)
{
	struct train_gpu_dist d = {
		.rank = w->rank, .world_size = w->world_size,
		.device = -1,   /* local_rank modulo the GPUs present */
		.local_rank = w->local_rank,
	};
	struct train_gpu *g;
	int rc;

	if (w->world_size > 1)
		memcpy(d.nccl_id, id, TRAIN_NCCL_ID_BYTES);
	rc = train_gpu_init(cfg, &d, &g, msg, msg_len);
	if (rc)
		return rc;
	m->priv = g;
	m->cfg = *train_gpu_config(g);
	return 0;
}

static void cuda_free(struct fmtrain_model *m)
{
	train_gpu_free(gpu(m));
	m->priv = NULL;
	free(m->host);
	m->host = NULL;
}

static const char *cuda_device(const struct fmtrain_model *m)
{
	return train_gpu_device_name(gpu(m));
}

static size_t cuda_num_params(const struct fmtrain_model *m)
{
	return train_gpu_num_params(gpu(m));
}

static uint64_t cuda_bytes(const struct fmtrain_model *m)
{
	return train_gpu_bytes(gpu(m));
}

static int cuda_step(struct fmtrain_model *m, const int32_t *inputs,
		     const int32_t *targets, float *loss, char *msg,
		     size_t msg_len)
{
	return train_gpu_step(gpu(m), inputs, targets, loss, msg, msg_len);
}

static size_t cuda_tensors(struct fmtrain_model *m, struct train_tensor *out,
			   size_t max)
{
	return train_gpu_tensors(gpu(m), out, max);
}

/* One host buffer of num_params floats, reused for each kind and freed
 * once the restore is done: the parameters and moments never need to
 * be on the host all at once. */
static float *cuda_restore_buffer(struct fmtrain_model *m,
				  enum train_kind kind)
{
	size_t n = train_gpu_num_params(gpu(m));

	if (!m->host && n <= SIZE_MAX / sizeof(float))
		m->host = malloc(n * sizeof(float));
	return m->host;
}

static int cuda_restore_load(struct fmtrain_model *m, enum train_kind kind,
			     char *msg, size_t msg_len)
{
	return train_gpu_upload(gpu(m), kind, m->host, msg, msg_len);
}

static int cuda_restored(struct fmtrain_model *m, uint64_t step, float lr,
			 char *msg, size_t msg_len)
{
	int rc;

	free(m->host);
	m->host = NULL;
	train_gpu_set_step(gpu(m), step);
	rc = train_gpu_set_learning_rate(gpu(m), lr);
	if (rc) {
		if (msg && msg_len)
			snprintf(msg, msg_len, "learning rate %g refused: %s",
				 (double)lr, strerror(-rc));
		return rc;
	}
	return train_gpu_broadcast(gpu(m), msg, msg_len);
}

static int cuda_agree(struct fmtrain_model *m, uint32_t *v, unsigned n,
		      char *msg, size_t msg_len)
{
	return train_gpu_all_max(gpu(m), v, n, msg, msg_len);
}

const struct fmtrain_backend fmtrain_cuda_backend = {
	.name = "cuda",
	.device_memory = true,
	.ranks = true,
	.probe = train_gpu_probe,
	.dist_id = train_gpu_nccl_id,
	.init = cuda_init,
	.free = cuda_free,
	.device = cuda_device,
	.num_params = cuda_num_params,
	.bytes = cuda_bytes,
	.step = cuda_step,
	.tensors = cuda_tensors,
	.restore_buffer = cuda_restore_buffer,
	.restore_load = cuda_restore_load,
	.restored = cuda_restored,
	.agree = cuda_agree,
};
