/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - device memory for libfmckpt, compiled in only when configure
 * found CUDA (HAVE_CUDA in config.h).  Staging memory is then pinned
 * (cudaHostAlloc), so device-to-host copies run at full speed and
 * asynchronously: ckpt_commit issues cudaMemcpyAsync on one stream per
 * handle for each piece of a device tensor, and synchronises the stream
 * before a chunk that received device bytes goes to the writer, and
 * before commit returns (so the caller may then change the tensor).
 * Without CUDA, or with no GPU at run time, every function here says so
 * and staging is plain memory; ckpt_add refuses CKPT_ADD_DEVICE.
 *
 * Ran on an H200 (2026-11-27): 1.43 GiB of GPT-2 124M state copied in
 * 29 ms a checkpoint (docs/gpu.md).
 */
#include <errno.h>
#include <stdlib.h>

#include "ckpt_int.h"

#if HAVE_CUDA
#include <cuda_runtime.h>

struct ckpt_cuda {
	cudaStream_t stream;
};

int ckpt_cuda_init(struct ckpt *c, char *msg, size_t msg_len)
{
	struct ckpt_cuda *g;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return -ENOTSUP;      /* no GPU: host memory only */
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) !=
	    cudaSuccess) {
		util_msg(msg, msg_len, "cannot create a CUDA stream: %s",
			 cudaGetErrorString(cudaGetLastError()));
		free(g);
		return -EIO;
	}
	c->cuda = g;
	return 0;
}

void ckpt_cuda_free(struct ckpt *c)
{
	struct ckpt_cuda *g = c->cuda;

	if (!g)
		return;
	cudaStreamDestroy(g->stream);
	free(g);
	c->cuda = NULL;
}

void *ckpt_cuda_host_alloc(struct ckpt *c, size_t len)
{
	void *p = NULL;

	if (!c->cuda)
		return NULL;
	if (cudaHostAlloc(&p, len, cudaHostAllocPortable) != cudaSuccess)
		return NULL;  /* fall back to plain memory */
	return p;
}

void ckpt_cuda_host_free(struct ckpt *c, void *p)
{
	(void)c;
	cudaFreeHost(p);
}

int ckpt_cuda_copy_async(struct ckpt *c, void *dst, const void *src,
			 size_t len, char *msg, size_t msg_len)
{
	struct ckpt_cuda *g = c->cuda;
	cudaError_t e;

	e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, g->stream);
	if (e != cudaSuccess) {
		util_msg(msg, msg_len, "cudaMemcpyAsync of %zu bytes failed: "
			 "%s (is the pointer device memory?)", len,
			 cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}

int ckpt_cuda_sync(struct ckpt *c, char *msg, size_t msg_len)
{
	struct ckpt_cuda *g = c->cuda;
	cudaError_t e;

	if (!g)
		return 0;
	e = cudaStreamSynchronize(g->stream);
	if (e != cudaSuccess) {
		util_msg(msg, msg_len, "device-to-host copy failed: %s",
			 cudaGetErrorString(e));
		return -EIO;
	}
	return 0;
}

#else /* !HAVE_CUDA */

int ckpt_cuda_init(struct ckpt *c, char *msg, size_t msg_len)
{
	(void)c;
	(void)msg;
	(void)msg_len;
	return -ENOTSUP;
}

void ckpt_cuda_free(struct ckpt *c)
{
	(void)c;
}

void *ckpt_cuda_host_alloc(struct ckpt *c, size_t len)
{
	(void)c;
	(void)len;
	return NULL;
}

void ckpt_cuda_host_free(struct ckpt *c, void *p)
{
	(void)c;
	(void)p;
}

int ckpt_cuda_copy_async(struct ckpt *c, void *dst, const void *src,
			 size_t len, char *msg, size_t msg_len)
{
	(void)c;
	(void)dst;
	(void)src;
	(void)len;
	util_msg(msg, msg_len, "built without CUDA");
	return -ENOTSUP;
}

int ckpt_cuda_sync(struct ckpt *c, char *msg, size_t msg_len)
{
	(void)c;
	(void)msg;
	(void)msg_len;
	return 0;
}

#endif /* HAVE_CUDA */
