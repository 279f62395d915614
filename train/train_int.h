/* SPDX-License-Identifier: MIT */
/*
 * train_int.h - what the files of the training engine share, inside the
 * train module only: the seeded generator that initialises parameters,
 * and the layers of the CPU reference (layers.c), each a _forward and
 * _backward pair on plain float arrays.
 *
 * The layers know nothing of struct train_model: they take pointers and
 * sizes, so a later CUDA kernel can be run on the same inputs and
 * compared with them.  Conventions for all of them:
 *   - Shapes are row-major, written (B, T, C) in the comments; N is B*T,
 *     the number of token positions.
 *   - _backward functions ADD into every gradient they write (dinp,
 *     dweight, dbias, ...), as the chain rule sums over uses; the caller
 *     zeroes them first.  A NULL dbias means "no bias".
 *   - Each output element is computed by one thread in a fixed order, so
 *     results do not depend on the number of threads: loops are split
 *     over independent rows (or, for a sum over rows, over columns), never
 *     with an OpenMP reduction.  The matmuls go to OpenBLAS sgemm in fixed
 *     tiles, one thread each (layers.c says why); they set OpenBLAS to one
 *     thread for the whole process.
 */
#ifndef FMFS_TRAIN_INT_H
#define FMFS_TRAIN_INT_H

#include <assert.h>     /* static_assert, in C and C++ */
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "util/util.h"

/* The parameter tensors, in the order of every kind's buffer (model.h's
 * tensor list), for the back ends that index them (model.c, gpu.cu). */
enum {
	P_WTE, P_WPE, P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_ATTN_PROJ_W,
	P_ATTN_PROJ_B, P_LN2_W, P_LN2_B, P_FC_W, P_FC_B, P_FC_PROJ_W,
	P_FC_PROJ_B, P_LNF_W, P_LNF_B, P_COUNT
};
static_assert(P_COUNT == TRAIN_PARAM_TENSORS, "tensor table out of step");

/* Loops with less work than this (in elements or multiply-adds) run on
 * the calling thread alone: starting and joining a team would cost more
 * (the result is the same either way). */
#define TRAIN_PAR_MIN 16384

/* ---- the generator: splitmix64, and Box-Muller for normals ----
 *
 * splitmix64 (Steele, Lea, Flood 2014): the state advances by the odd
 * constant 0x9E3779B97F4A7C15 and the output is that state through a
 * 64-bit finaliser.  Small, fast, every seed is a good seed, and its
 * sequence is the same on every machine.  A normal deviate takes two
 * outputs u1, u2, each turned into a double in (0, 1] from its top 53
 * bits, and is sqrt(-2 ln u1) * cos(2 pi u2), computed in double and
 * rounded to float (the sine half is not used, so a tensor's values
 * depend only on its own stream and position). */
struct train_rng {
	uint64_t state;
};

static inline void train_rng_seed(struct train_rng *r, uint64_t seed)
{
	r->state = seed;
}

static inline uint64_t train_rng_next(struct train_rng *r)
{
	uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so its logarithm is finite. */
static inline double train_rng_unit(struct train_rng *r)
{
	return (double)((train_rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Normal with mean 0 and standard deviation 1 (model.c). */
float train_rng_normal(struct train_rng *r);

/* ---- layers (layers.c) ---- */

/* out (B,T,C) = wte[inp[b,t]] + wpe[t].  inp (B,T) holds valid tokens. */
void train_encoder_forward(float *out, const int32_t *inp, const float *wte,
			   const float *wpe, size_t B, size_t T, size_t C);
void train_encoder_backward(float *dwte, float *dwpe, const float *dout,
			    const int32_t *inp, size_t B, size_t T, size_t C);

/* out (N,C) = (inp - mean) * rstd * weight + bias, per row, eps 1e-5;
 * mean and rstd (N) are kept for the backward pass. */
void train_layernorm_forward(float *out, float *mean, float *rstd,
			     const float *inp, const float *weight,
			     const float *bias, size_t N, size_t C);
void train_layernorm_backward(float *dinp, float *dweight, float *dbias,
			      const float *dout, const float *inp,
			      const float *weight, const float *mean,
			      const float *rstd, size_t N, size_t C);

/* out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be NULL.
 * The weight is stored as PyTorch's nn.Linear stores it. */
void train_matmul_forward(float *out, const float *inp, const float *weight,
			  const float *bias, size_t N, size_t C, size_t OC);
void train_matmul_backward(float *dinp, float *dweight, float *dbias,
			   const float *dout, const float *inp,
			   const float *weight, size_t N, size_t C,
			   size_t OC);

/* Causal multi-head self-attention.  qkv (B,T,3C) holds q, k, v side by
 * side, each C wide and cut into NH heads of C/NH channels.  att
 * (B,NH,T,T) gets the softmax of q.k/sqrt(C/NH) over positions t2 <= t
 * (0 above the diagonal); out (B,T,C) the att-weighted sum of v. */
void train_attention_forward(float *out, float *att, const float *qkv,
			     size_t B, size_t T, size_t C, size_t NH);
/* scratch: B*NH*T floats of work space, contents unused and left
 * undefined. */
void train_attention_backward(float *dqkv, float *scratch,
			      const float *dout, const float *qkv,
			      const float *att, size_t B, size_t T, size_t C,
			      size_t NH);

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * elementwise over n values. */
void train_gelu_forward(float *out, const float *inp, size_t n);
void train_gelu_backward(float *dinp, const float *inp, const float *dout,
			 size_t n);

/* out = a + b elementwise: the residual stream. */
void train_residual_forward(float *out, const float *a, const float *b,
			    size_t n);
void train_residual_backward(float *da, float *db, const float *dout,
			     size_t n);

/* probs (N,Vp) = softmax of logits (N,Vp) over the first V columns; the
 * padded columns V..Vp-1 get probability 0. */
void train_softmax_forward(float *probs, const float *logits, size_t N,
			   size_t V, size_t Vp);
/* losses (N) = -ln probs[n, targets[n]]. */
void train_crossentropy_forward(float *losses, const float *probs,
				const int32_t *targets, size_t N, size_t Vp);
/* Softmax and cross-entropy together: dlogits (N,Vp) += (probs - 1[v ==
 * target]) * dloss for v < V, where dloss is d(mean loss)/d(loss of one
 * position), 1/N for the mean.  The padded columns get nothing. */
void train_crossentropy_softmax_backward(float *dlogits, const float *probs,
					 const int32_t *targets, float dloss,
					 size_t N, size_t V, size_t Vp);

#endif /* FMFS_TRAIN_INT_H */
