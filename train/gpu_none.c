/* SPDX-License-Identifier: MIT */
/*
 * gpu_none.c - gpu.h in a build without CUDA (configure did not find it,
 * or --without-cuda): every entry point says so and fails with -ENOTSUP,
 * so fmtrain and the tests need no #if of their own.  The rendezvous
 * (rendezvous.c) needs no CUDA and is built either way.
 */
#include <errno.h>
#include <stdio.h>

#include "gpu.h"

#define NO_CUDA "fmtrain was built without CUDA: install the CUDA toolkit " \
	"(nvcc, cuBLAS; NCCL for several GPUs) under /usr/local/cuda, then " \
	"run ./configure and make again"

static int no_cuda(char *msg, size_t msg_len)
{
	if (msg && msg_len)
		snprintf(msg, msg_len, "%s", NO_CUDA);
	return -ENOTSUP;
}

int train_gpu_probe(char *name, size_t name_len, char *msg, size_t msg_len)
{
	if (name && name_len)
		name[0] = '\0';
	return no_cuda(msg, msg_len);
}

int train_gpu_nccl_id(unsigned char id[TRAIN_NCCL_ID_BYTES], char *msg,
		      size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_init(const struct train_config *cfg,
		   const struct train_gpu_dist *dist, struct train_gpu **out,
		   char *msg, size_t msg_len)
{
	*out = NULL;
	return no_cuda(msg, msg_len);
}

/* No struct train_gpu can exist in this build: the rest are never
 * reached with a model, and are here so that callers link. */
void train_gpu_free(struct train_gpu *g) {}
const struct train_config *train_gpu_config(const struct train_gpu *g)
{
	return NULL;
}
const char *train_gpu_device_name(const struct train_gpu *g) { return ""; }
uint64_t train_gpu_bytes(const struct train_gpu *g) { return 0; }
size_t train_gpu_num_params(const struct train_gpu *g) { return 0; }

int train_gpu_forward(struct train_gpu *g, const int32_t *inputs,
		      const int32_t *targets, float *loss, char *msg,
		      size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

void train_gpu_zero_grad(struct train_gpu *g) {}

int train_gpu_backward(struct train_gpu *g, char *msg, size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_update(struct train_gpu *g, float *grad_norm, char *msg,
		     size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_step(struct train_gpu *g, const int32_t *inputs,
		   const int32_t *targets, float *loss, char *msg,
		   size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_set_learning_rate(struct train_gpu *g, float lr)
{
	return -ENOTSUP;
}

uint64_t train_gpu_step_count(const struct train_gpu *g) { return 0; }
const char *train_gpu_kernels(const struct train_gpu *g, char *buf,
			      size_t len)
{
	if (len)
		snprintf(buf, len, "none (no CUDA in this build)");
	return buf;
}
void train_gpu_set_step(struct train_gpu *g, uint64_t step) {}

int train_gpu_all_max(struct train_gpu *g, uint32_t *values, unsigned n,
		      char *msg, size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

size_t train_gpu_tensors(struct train_gpu *g, struct train_tensor *out,
			 size_t max)
{
	return 0;
}

int train_gpu_download(struct train_gpu *g, enum train_kind kind,
		       float *host, char *msg, size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_upload(struct train_gpu *g, enum train_kind kind,
		     const float *host, char *msg, size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_broadcast(struct train_gpu *g, char *msg, size_t msg_len)
{
	return no_cuda(msg, msg_len);
}

int train_gpu_logits(struct train_gpu *g, float *host, char *msg,
		     size_t msg_len)
{
	return no_cuda(msg, msg_len);
}
