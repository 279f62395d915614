/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - fmtrain's CUDA back end: the model of model.h on one GPU, in
 * bf16 with fp32 master weights, and data parallel over several GPUs
 * (one process each) with NCCL.  Built when configure finds CUDA
 * (gpu.cu, gpu_kernels.cu, gpu_attn.cu); otherwise gpu_none.c provides
 * the same functions, and they fail with -ENOTSUP and a message saying
 * how to get a CUDA build.
 *
 * The network, its initialisation (from cfg.seed, bit for bit the CPU
 * reference's: the parameters are drawn on the host and uploaded) and
 * AdamW are model.h's.  What differs:
 *   - Precision.  Parameters, gradients and AdamW moments are fp32 on
 *     the GPU; after each update the kernel that updates them also writes
 *     a bf16 copy of the parameters, which the matmuls read.  Activations
 *     are bf16 except the residual stream, layernorm statistics, the
 *     attention scores before the softmax and the losses (fp32).  Matrix
 *     products go to cuBLAS with bf16 inputs and fp32 accumulation (the
 *     bias added in the GEMM's epilogue); attention is fused
 *     (gpu_attn.cu) where the head size is 64; every other layer is a
 *     kernel of gpu_kernels.cu.  Results follow
 *     the CPU reference to bf16 precision (tests/unit/test_train_gpu
 *     checks every kernel against layers.c, and a whole step against
 *     model.c).
 *   - Reproducibility.  No kernel uses atomics or depends on scheduling:
 *     sums over rows go through fixed partial sums added in order, the
 *     embedding gradient sums each token's positions in order.  With the
 *     same configuration, seed, inputs, GPU model, CUDA and NCCL versions
 *     and world size, a run gives the same bits every time, so a resumed
 *     run continues exactly (cuBLAS guarantees this for the same
 *     architecture and SM count).
 *   - Checkpoints hold the same tensors, names and shapes as the CPU
 *     model's (fp32 params, adam_m, adam_v), so one back end can resume
 *     from the other's checkpoint (not bit-exact across back ends).
 *
 * Data parallel.  world_size processes, one GPU each (local_rank picks
 * the device), each takes its own B sequences per step (data.h gives
 * ranks disjoint data).  After the backward pass the gradients are
 * averaged over ranks with one NCCL all-reduce (fp32 sum, then scaled by
 * 1/world_size inside the update), so every rank makes the same update
 * and the replicas stay identical; the step's loss is the mean over
 * ranks.  NCCL needs one opaque id made by rank 0 (train_gpu_nccl_id)
 * and handed to the others before train_gpu_init: train_rendezvous does
 * that through a shared file or a TCP address.
 *
 * Threads.  A struct train_gpu is used by one thread at a time, not
 * always the same one: each function makes the model's GPU the calling
 * thread's current device (cudaSetDevice) and leaves it so.  They
 * queue work on the model's CUDA stream and return when the
 * results they hand back are ready; train_gpu_tensors' device pointers
 * may be read (cudaMemcpy) between calls.
 *
 * Errors: 0 or a negative errno, with a line a person can act on in msg
 * (msg may be NULL): -ENOTSUP not built with CUDA (or NCCL for world_size
 * > 1), -ENODEV no usable GPU, -EINVAL a bad configuration, token or
 * call order, -ENOMEM not enough GPU memory (the message says how much
 * was needed), -ERANGE gradients that are not finite, -EIO a CUDA, cuBLAS
 * or NCCL failure (named in the message; the model should then be freed).
 */
#ifndef FMFS_TRAIN_GPU_H
#define FMFS_TRAIN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_NCCL_ID_BYTES 128   /* sizeof(ncclUniqueId) */

/* 0 when this build has CUDA and a GPU is usable now; then name (may be
 * NULL) gets the first device's name.  Otherwise -ENOTSUP or -ENODEV and
 * why in msg.  Cheap enough for a test to call before deciding to skip. */
int train_gpu_probe(char *name, size_t name_len, char *msg, size_t msg_len);

/* Rank 0's part of the NCCL set-up: a fresh id for the job.  -ENOTSUP
 * without NCCL. */
int train_gpu_nccl_id(unsigned char id[TRAIN_NCCL_ID_BYTES], char *msg,
		      size_t msg_len);

/* Where this process stands in a data-parallel job.  world_size 1 needs
 * no id and no NCCL. */
struct train_gpu_dist {
	unsigned rank;              /* 0 .. world_size-1 */
	unsigned world_size;        /* >= 1 */
	int device;                 /* CUDA device: -1 for local_rank modulo
	                             * the devices present */
	unsigned local_rank;        /* rank within this machine */
	unsigned char nccl_id[TRAIN_NCCL_ID_BYTES];   /* world_size > 1 */
};

struct train_gpu;

/* Picks the device, allocates everything on it (parameters, gradients,
 * moments, the bf16 copy, activations, work space), initialises the
 * parameters from cfg->seed as model.h does, and with world_size > 1
 * joins the NCCL communicator (every rank must call this; it returns
 * when all have).  dist NULL: one process.  cfg is copied. */
int train_gpu_init(const struct train_config *cfg,
		   const struct train_gpu_dist *dist, struct train_gpu **out,
		   char *msg, size_t msg_len);
/* Frees device memory, handles and the communicator.  NULL: no-op. */
void train_gpu_free(struct train_gpu *g);

/* The configuration in use (padded_vocab_size filled in), the device's
 * name, and the bytes of GPU memory the model holds. */
const struct train_config *train_gpu_config(const struct train_gpu *g);
const char *train_gpu_device_name(const struct train_gpu *g);
uint64_t train_gpu_bytes(const struct train_gpu *g);
size_t train_gpu_num_params(const struct train_gpu *g);

/* ---- one step: as train_forward ... train_step in model.h ---- */

/* inputs and targets are host arrays of B*T tokens (copied; targets may
 * be NULL).  *loss gets this rank's mean loss (NAN without targets). */
int train_gpu_forward(struct train_gpu *g, const int32_t *inputs,
		      const int32_t *targets, float *loss, char *msg,
		      size_t msg_len);
void train_gpu_zero_grad(struct train_gpu *g);
/* Adds this rank's gradient of the last forward's mean loss; no
 * communication. */
int train_gpu_backward(struct train_gpu *g, char *msg, size_t msg_len);
/* Averages the gradients over the ranks (NCCL all-reduce; nothing with
 * one rank), then one AdamW update; *grad_norm gets the norm of the
 * averaged gradient before clipping. */
int train_gpu_update(struct train_gpu *g, float *grad_norm, char *msg,
		     size_t msg_len);
/* zero_grad, forward, backward, update.  *loss: the mean over ranks. */
int train_gpu_step(struct train_gpu *g, const int32_t *inputs,
		   const int32_t *targets, float *loss, char *msg,
		   size_t msg_len);
int train_gpu_set_learning_rate(struct train_gpu *g, float lr);

uint64_t train_gpu_step_count(const struct train_gpu *g);
/* Which kernels the model runs, for logs and benchmarks (docs/gpu.md):
 * "attention fused|unfused, bias epilogue|kernels, N
 * fallback(s)" (products cuBLASLt could not do, so far, process-wide).
 * Written into buf (len bytes); returns buf. */
const char *train_gpu_kernels(const struct train_gpu *g, char *buf,
			      size_t len);
void train_gpu_set_step(struct train_gpu *g, uint64_t step);

#define TRAIN_GPU_AGREE_MAX 16

/* Makes each of values[0 .. n-1] (n <= TRAIN_GPU_AGREE_MAX) its largest
 * value over the ranks: one small NCCL all-reduce (max) on the model's
 * stream; nothing with one rank.  Every rank must call it at the same
 * point.  For decisions that come from a clock or a signal, which each
 * rank would otherwise take on its own: fmtrain calls it once a step to
 * agree on "save a checkpoint after this step" and "stop after this
 * step", since every rank must save the same steps. */
int train_gpu_all_max(struct train_gpu *g, uint32_t *values, unsigned n,
		      char *msg, size_t msg_len);

/* ---- state ---- */

/* As train_model_tensors, but data points to GPU memory (fp32).  A
 * checkpoint adds them with CKPT_ADD_DEVICE.  Borrowed until
 * train_gpu_free. */
size_t train_gpu_tensors(struct train_gpu *g, struct train_tensor *out,
			 size_t max);

/* Copies a whole kind (train_model_buffer's layout, num_params floats)
 * between the GPU and host memory.  After an upload of TRAIN_PARAMS the
 * bf16 copy is refreshed.  Returns when the copy is done. */
int train_gpu_download(struct train_gpu *g, enum train_kind kind,
		       float *host, char *msg, size_t msg_len);
int train_gpu_upload(struct train_gpu *g, enum train_kind kind,
		     const float *host, char *msg, size_t msg_len);

/* Makes every rank's parameters and moments rank 0's (NCCL broadcast),
 * and refreshes the bf16 copy: after rank 0 alone restored a checkpoint.
 * The step count is not sent: every rank sets it (train_gpu_set_step),
 * or their AdamW bias corrections differ.  Nothing with one rank.
 *
 * Every rank must make the same collective calls (broadcast, update,
 * step) in the same order: a rank that stops early (an error, a bad
 * token) leaves the others waiting inside NCCL.  fmtrain checks its
 * input before the step and exits on any error, which ends the job. */
int train_gpu_broadcast(struct train_gpu *g, char *msg, size_t msg_len);

/* The logits of the last forward pass, (B,T,Vp), converted to fp32 into
 * host memory: for tests.  Only until train_gpu_backward, which turns
 * them into their gradient in place. */
int train_gpu_logits(struct train_gpu *g, float *host, char *msg,
		     size_t msg_len);

/* ---- rendezvous (rendezvous.c; no CUDA needed) ---- */

/* Hands rank 0's blob (len bytes, len <= 4096) to every rank of a job.
 * where is "file:PATH" (a file on storage all ranks see: rank 0 writes
 * it whole under a temporary name and renames it into place; the others
 * wait for it, and answer in PATH.rankR the same way) or "tcp:HOST:PORT"
 * (rank 0 listens on PORT and answers world_size - 1 connections; the
 * others connect to HOST, retrying until the deadline).  Rank 0 passes
 * the blob in; the others get it in blob.  Rank 0 returns once every
 * rank has it.  Waits at most timeout_ms: -ETIMEDOUT naming what was
 * awaited.  A leftover file from an earlier job is told apart by job (a
 * string every rank of one job gives alike, e.g. a run id, stored with
 * the blob) and by a nonce rank 0 draws on each call; a rank of another
 * job that reaches rank 0's port is refused (-EPROTO there).  -EINVAL
 * for a where it cannot parse.  rendezvous.c has the protocol. */
int train_rendezvous(const char *where, const char *job, unsigned rank,
		     unsigned world_size, void *blob, size_t len,
		     unsigned timeout_ms, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif /* FMFS_TRAIN_GPU_H */
