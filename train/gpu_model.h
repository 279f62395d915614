/* SPDX-License-Identifier: MIT */
/*
 * gpu_model.h - the state of the CUDA back end, shared by gpu.cu (the
 * passes, AdamW, data parallel, the state's copies) and gpu_init.cu
 * (probe, memory, init and free): the model's buffers and the helpers
 * that name a CUDA, cuBLAS or NCCL failure.  CUDA C++ only; the design
 * is at the top of gpu.cu.
 */
#ifndef FMFS_TRAIN_GPU_MODEL_H
#define FMFS_TRAIN_GPU_MODEL_H

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

/* gpu.cu: a failure, named, in msg; -ENOMEM or -EIO. */
int gpu_cuda_fail(cudaError_t e, const char *what, char *msg, size_t len);
/* After queueing work: a launch or cuBLAS failure, named. */
int gpu_check_queued(const char *what, char *msg, size_t len);
int gpu_sync_stream(struct train_gpu *g, const char *what, char *msg,
		    size_t len);
/* Makes the model's device the calling thread's (each entry point). */
int gpu_use_device(const struct train_gpu *g, char *msg, size_t len);
#if HAVE_NCCL
int gpu_nccl_fail(ncclResult_t r, const char *what, char *msg, size_t len);
#endif

#endif /* FMFS_TRAIN_GPU_MODEL_H */
