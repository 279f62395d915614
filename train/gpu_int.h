/* SPDX-License-Identifier: MIT */
/*
 * gpu_int.h - what the CUDA files of the train module share (gpu.cu,
 * gpu_kernels.cu, gpu_attn.cu) and what tests/unit/test_train_gpu.cu reaches in to
 * test: the layers of the GPU path, each a host function that queues its
 * kernels (and cuBLAS calls) on a stream.  CUDA C++ only.
 *
 * They mirror layers.c (train_int.h) with these differences, all on
 * purpose:
 *   - Types.  bf16 where the value feeds a matrix product (cuBLAS takes
 *     bf16 and accumulates in fp32), fp32 for the residual stream and
 *     everything summed across positions (parameter gradients, layernorm
 *     statistics, losses).  Each prototype says which is which.
 *   - Gradients of activations are written, not added (each has one
 *     producer on the GPU path); gradients of parameters are added, as on
 *     the CPU, so that they can accumulate over micro-steps.
 *   - Every sum is done in a fixed order (no atomics), so results do not
 *     change from run to run: sums over rows go through partial sums of
 *     GK_ROW_CHUNK rows each, added in order by a second kernel.
 * Shapes are row-major; N is B*T positions.  Sizes are int: every
 * dimension fits (model.h's limits), products are computed in size_t.
 */
#ifndef FMFS_TRAIN_GPU_INT_H
#define FMFS_TRAIN_GPU_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 bf16;

#define GK_ROW_CHUNK 256      /* rows per partial sum */
#define GK_NORM_BLOCKS 256    /* partial sums of the gradient norm */

/* Floats of work space gk_colsum_* and gk_layernorm_backward need for
 * N rows and `cols` columns. */
static inline size_t gk_partials(size_t N, size_t cols)
{
	return (N + GK_ROW_CHUNK - 1) / GK_ROW_CHUNK * cols * 2;
}

/* ---- what the CUDA files share ----
 * Elementwise kernels use grid-stride loops of GK_THREADS-thread blocks;
 * row reductions use one warp per row with a fixed butterfly of shuffles
 * (gk_warp_sum, gk_warp_max), so sums come out the same every run. */
#define GK_THREADS 256
#define GK_WARP 32
#define GK_GRID_MAX 65535u

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned gk_grid_for(size_t n)
{
	size_t b = (n + GK_THREADS - 1) / GK_THREADS;

	return b > GK_GRID_MAX ? GK_GRID_MAX : (b ? (unsigned)b : 1u);
}

#define GK_FOR_EACH(i, n)                                                 \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;    \
	     i < (n); i += (size_t)gridDim.x * blockDim.x)

__device__ static inline float gk_warp_sum(float v)
{
	for (int o = GK_WARP / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ static inline float gk_warp_max(float v)
{
	for (int o = GK_WARP / 2; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Keeps the first failed cuBLAS status (what: the call, named) for
 * gk_take_error. */
void gk_blas_check(cublasStatus_t st, const char *what);

/* cuBLAS calls return a status, not a sticky error as kernels do: the
 * first failure since the last gk_take_error is kept (process-wide) and
 * gk_take_error hands it back as "cublasGemmEx (scores): ..." and clears
 * it; NULL when there was none.  Kernel launch failures are CUDA's own
 * (cudaGetLastError). */
const char *gk_take_error(void);

/* ---- conversions ---- */
void gk_f32_to_bf16(bf16 *out, const float *in, size_t n, cudaStream_t s);
void gk_bf16_to_f32(float *out, const bf16 *in, size_t n, cudaStream_t s);

/* ---- encoder ----
 * out (N,C) fp32 = wte[inp[n]] + wpe[n % T]; wte, wpe fp32 (the master
 * copy: the sum is the first value of the residual stream). */
void gk_encoder_forward(float *out, const int32_t *inp, const float *wte,
			const float *wpe, int B, int T, int C, cudaStream_t s);
/* dwpe[t] += sum over b of dout[b,t]; dwte[tok] += the dout rows of the
 * positions holding tok.  Those positions come sorted by the host
 * (gk_token_groups): ntok distinct tokens tok[i], whose positions are
 * pos[start[i] .. start[i+1]-1], ascending.  All device pointers. */
void gk_encoder_backward(float *dwte, float *dwpe, const float *dout,
			 const int32_t *tok, const int32_t *start,
			 const int32_t *pos, int ntok, int B, int T, int C,
			 cudaStream_t s);
/* Host side of the above: groups the N tokens of inp (host) by value.
 * tok gets the distinct tokens (ascending), start ntok+1 offsets into
 * pos, pos the positions; count is work space of V ints, all zero on
 * entry and on return.  Returns ntok. */
int gk_token_groups(const int32_t *inp, int N, int32_t *tok, int32_t *start,
		    int32_t *pos, int32_t *count, int V);

/* ---- layernorm ----
 * out (N,C) bf16 from inp (N,C) fp32; weight, bias (C) fp32; mean, rstd
 * (N) fp32 kept for the backward pass. */
void gk_layernorm_forward(bf16 *out, float *mean, float *rstd,
			  const float *inp, const float *weight,
			  const float *bias, int N, int C, cudaStream_t s);
/* dinp (N,C) fp32 += ...; dweight, dbias (C) fp32 += ...; dout (N,C)
 * fp32.  work: gk_partials(N, C) floats. */
void gk_layernorm_backward(float *dinp, float *dweight, float *dbias,
			   const float *dout, const float *inp,
			   const float *weight, const float *mean,
			   const float *rstd, int N, int C, float *work,
			   cudaStream_t s);

/* ---- matmul (cuBLAS, cuBLASLt for the bias epilogues) ----
 * out (N,OC) bf16 = inp (N,C) bf16 . weight (OC,C)^T bf16 + bias (OC)
 * (bias may be NULL).  With bias_bf, its bf16 copy, the GEMM adds it in
 * its epilogue (cuBLASLt); else, or where cuBLASLt cannot, a kernel adds
 * the fp32 bias after the GEMM. */
void gk_matmul_forward(cublasHandle_t h, bf16 *out, const bf16 *inp,
		       const bf16 *weight, const float *bias,
		       const bf16 *bias_bf, int N, int C, int OC,
		       cudaStream_t s);
/* Whether the bias epilogues are used (default on; off:
 * FMTRAIN_BIAS=kernels), and how many products fell back to cuBLAS and
 * our kernels because cuBLASLt could not do them. */
void gk_bias_epilogues(bool on);
unsigned long gk_lt_fallbacks(void);
/* dinp (N,C) fp32 = dout (N,OC) bf16 . weight (OC,C) bf16  (written)
 * dweight (OC,C) fp32 += dout^T . inp (N,C) bf16
 * dbias (OC) fp32 += column sums of dout (may be NULL; work is then
 * gk_partials(N, OC) floats): by the dweight GEMM's epilogue (cuBLASLt
 * BGRADB) where it can, else by our column-sum kernels */
void gk_matmul_backward(cublasHandle_t h, float *dinp, float *dweight,
			float *dbias, const bf16 *dout, const bf16 *inp,
			const bf16 *weight, int N, int C, int OC, float *work,
			cudaStream_t s);
/* The same two (no bias) with rows of out and dout ld elements apart
 * (ld >= OC): the tied head, whose OC is the vocabulary (50257 for
 * GPT-2) and whose logits rows are padded to a multiple of 64, since
 * cuBLAS falls back to slow kernels for rows that are not 16-byte
 * aligned (docs/gpu.md). */
void gk_matmul_forward_ld(cublasHandle_t h, bf16 *out, const bf16 *inp,
			  const bf16 *weight, int N, int C, int OC, int ld,
			  cudaStream_t s);
void gk_matmul_backward_ld(cublasHandle_t h, float *dinp, float *dweight,
			   const bf16 *dout, const bf16 *inp,
			   const bf16 *weight, int N, int C, int OC, int ld,
			   cudaStream_t s);

/* ---- causal self-attention ---- */

/* Work space of one layer's attention, forward and backward. */
struct gk_attn_work {
	bf16 *q, *k, *v, *y;        /* (B,NH,T,hs) each */
	bf16 *dq, *dk, *dv, *dy;    /* (B,NH,T,hs) each */
	float *scores;              /* (B,NH,T,T): q.k, then d(att) */
	bf16 *dscores;              /* (B,NH,T,T) */
};
/* out (N,C) bf16 and att (B,NH,T,T) bf16 (the softmax weights, 0 above
 * the diagonal, kept for the backward pass) from qkv (N,3C) bf16. */
void gk_attention_forward(cublasHandle_t h, bf16 *out, bf16 *att,
			  const bf16 *qkv, int B, int T, int C, int NH,
			  const struct gk_attn_work *w, cudaStream_t s);
/* dqkv (N,3C) bf16 (written) from dout (N,C) fp32. */
void gk_attention_backward(cublasHandle_t h, bf16 *dqkv, const float *dout,
			   const bf16 *qkv, const bf16 *att, int B, int T,
			   int C, int NH, const struct gk_attn_work *w,
			   cudaStream_t s);

/* ---- fused causal self-attention (gpu_attn.cu) ----
 * The same two passes without the (B,NH,T,T) matrices: q, k, v are read
 * from qkv, tiles of 64 positions stay in shared memory.  Head size 64
 * only: gk_flash_supported(C, NH) says whether these apply (C / NH == 64,
 * C a multiple of 8).  gpu.cu uses them where they apply (docs/gpu.md
 * "Fused attention"). */
bool gk_flash_supported(int C, int NH);
/* out (N,C) bf16 from qkv (N,3C) bf16; lse (B,NH,T) fp32, kept for the
 * backward pass: log2 of each row's softmax denominator, scores taken as
 * q.k log2(e) / sqrt(hs). */
void gk_flash_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T,
		      int C, int NH, cudaStream_t s);
/* dqkv (N,3C) bf16 (written) from dout (N,C) fp32, the forward's qkv,
 * out and lse.  Work: dob (N,C) bf16, delta (B,NH,T) fp32. */
void gk_flash_backward(bf16 *dqkv, const float *dout, const bf16 *qkv,
		       const bf16 *out, const float *lse, int B, int T, int C,
		       int NH, bf16 *dob, float *delta, cudaStream_t s);

/* ---- GELU (tanh approximation) ----
 * out (n) bf16 from inp bf16; dinp (n) bf16 = gelu'(inp) * dout fp32. */
void gk_gelu_forward(bf16 *out, const bf16 *inp, size_t n, cudaStream_t s);
void gk_gelu_backward(bf16 *dinp, const bf16 *inp, const float *dout,
		      size_t n, cudaStream_t s);

/* ---- residual ----
 * out (n) fp32 = a fp32 + b bf16.  (Its backward is a copy: the residual
 * stream's gradient goes to both branches; gk_f32_to_bf16 makes the
 * branch's bf16 copy for cuBLAS.) */
void gk_residual_forward(float *out, const float *a, const bf16 *b,
			 size_t n, cudaStream_t s);

/* ---- softmax + cross-entropy over the first V of Vp columns ----
 * losses (N) fp32 = -ln softmax(logits)[target]; lse (N) fp32 the log of
 * the softmax's denominator (max + ln sum), for the backward pass. */
void gk_crossentropy_forward(float *losses, float *lse, const bf16 *logits,
			     const int32_t *targets, int N, int V, int Vp,
			     cudaStream_t s);
/* dlogits (N,Vp) bf16 = (softmax - onehot(target)) * dloss for v < V, 0
 * beyond; may be the logits buffer itself (in place). */
void gk_crossentropy_backward(bf16 *dlogits, const bf16 *logits,
			      const float *lse, const int32_t *targets,
			      float dloss, int N, int V, int Vp,
			      cudaStream_t s);
/* *out fp32 = sum of in[0..n-1] in double, in order of fixed blocks:
 * the mean loss (one kernel, one block). */
void gk_sum(float *out, const float *in, int n, cudaStream_t s);

/* ---- AdamW ----
 * *out (device, double) = sum of g^2 over n values: GK_NORM_BLOCKS
 * partial sums in work (doubles), added in order. */
void gk_sumsq(double *out, const float *g, size_t n, double *work,
	      cudaStream_t s);
/* As model.c's train_update on n values, with g scaled by gscale
 * (clipping times 1/world_size); writes p, m, v and the bf16 copy pb. */
void gk_adamw(float *p, bf16 *pb, const float *g, float *m, float *v,
	      size_t n, float lr, float b1, float b2, float b1c, float b2c,
	      float eps, float decay, float gscale, cudaStream_t s);

#endif /* FMFS_TRAIN_GPU_INT_H */
