/* SPDX-License-Identifier: MIT */
/*
 * layers.c - the layers of the GPT-2 CPU reference, in fp32: encoder,
 * layernorm, matmul, causal self-attention, GELU, residual, softmax and
 * cross-entropy.  model.c strings them together into a forward and a
 * backward pass; the later CUDA path tests its kernels against them.
 *
 * Each layer is a _forward/_backward pair written for reading: shapes in
 * the comments, one output row per loop iteration.  Threads come from
 * OpenMP, splitting loops over rows whose results are independent, so a
 * result never depends on how many threads ran (see train_int.h).  A sum
 * over rows (bias and layernorm gradients, the embedding scatter) is split
 * over columns instead: each column is still summed by one thread, rows in
 * ascending order.
 *
 * Matmuls.  OpenBLAS's own threads split a product differently for each
 * thread count, and its kernels then round some elements differently
 * (seen with 0.3.21 on Zen: a few percent of the elements differ in the
 * last bits between 1 and 2 threads).  So OpenBLAS is kept to one thread
 * and the output is cut into fixed tiles of at most GEMM_TILE x GEMM_TILE,
 * each one single-threaded sgemm over the whole inner dimension, the tiles
 * spread over OpenMP threads: every element then depends only on the
 * shapes, never on the thread count.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include <cblas.h>

#include "train_int.h"

#define LN_EPS 1e-5f
#define COL_CHUNK 64     /* columns per thread in column-split sums */
#define GEMM_TILE 256    /* rows and columns of an output tile */

/* OpenBLAS runs single-threaded inside our tiles; someone may have set
 * it otherwise since the last call (it is a process-wide setting). */
static void blas_one_thread(void)
{
	if (openblas_get_num_threads() != 1)
		openblas_set_num_threads(1);
}

/* out (M,N) = op(A) (M,K) . op(B) (K,N) + beta * out, row-major, where
 * op(A) is A^T when ta (A is then (K,M)), and likewise for B: tile by
 * tile, as described at the top. */
static void gemm_tiled(bool ta, bool tb, size_t M, size_t N, size_t K,
		       const float *A, size_t lda, const float *B, size_t ldb,
		       float beta, float *out, size_t ldo)
{
	size_t mt = (M + GEMM_TILE - 1) / GEMM_TILE;
	size_t nt = (N + GEMM_TILE - 1) / GEMM_TILE;

	blas_one_thread();
#pragma omp parallel for schedule(static) if (mt * nt > 1)
	for (size_t i = 0; i < mt * nt; i++) {
		size_t r0 = i / nt * GEMM_TILE, c0 = i % nt * GEMM_TILE;
		size_t rows = M - r0 < GEMM_TILE ? M - r0 : GEMM_TILE;
		size_t cols = N - c0 < GEMM_TILE ? N - c0 : GEMM_TILE;
		/* rows r0.. of op(A), columns c0.. of op(B) */
		const float *a = ta ? A + r0 : A + r0 * lda;
		const float *b = tb ? B + c0 * ldb : B + c0;

		cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
			    tb ? CblasTrans : CblasNoTrans, (int)rows,
			    (int)cols, (int)K, 1.0f, a, (int)lda, b, (int)ldb,
			    beta, out + r0 * ldo + c0, (int)ldo);
	}
}

/* ---- encoder: token + position embedding ---- */

/* out (B,T,C) = wte (V,C)[inp (B,T)] + wpe (maxT,C)[t] */
void train_encoder_forward(float *out, const int32_t *inp, const float *wte,
			   const float *wpe, size_t B, size_t T, size_t C)
{
#pragma omp parallel for schedule(static) if (B * T * C >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < B * T; n++) {
		const float *tok = wte + (size_t)inp[n] * C;
		const float *pos = wpe + (n % T) * C;
		float *o = out + n * C;

		for (size_t c = 0; c < C; c++)
			o[c] = tok[c] + pos[c];
	}
}

/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t].  Several positions may
 * hold the same token, so rows of dwte collide: split over columns. */
void train_encoder_backward(float *dwte, float *dwpe, const float *dout,
			    const int32_t *inp, size_t B, size_t T, size_t C)
{
	size_t nchunks = (C + COL_CHUNK - 1) / COL_CHUNK;

#pragma omp parallel for schedule(static) if (B * T * C >= TRAIN_PAR_MIN)
	for (size_t k = 0; k < nchunks; k++) {
		size_t c0 = k * COL_CHUNK;
		size_t c1 = c0 + COL_CHUNK < C ? c0 + COL_CHUNK : C;

		for (size_t n = 0; n < B * T; n++) {
			const float *d = dout + n * C;
			float *dtok = dwte + (size_t)inp[n] * C;
			float *dpos = dwpe + (n % T) * C;

			for (size_t c = c0; c < c1; c++) {
				dtok[c] += d[c];
				dpos[c] += d[c];
			}
		}
	}
}

/* ---- layernorm ---- */

/* out (N,C) = (inp - mean) * rstd * weight (C) + bias (C), row by row;
 * mean (N), rstd (N) = 1 / sqrt(variance + eps), variance biased (/C). */
void train_layernorm_forward(float *out, float *mean, float *rstd,
			     const float *inp, const float *weight,
			     const float *bias, size_t N, size_t C)
{
#pragma omp parallel for schedule(static) if (N * C >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++) {
		const float *x = inp + n * C;
		float *o = out + n * C;
		float m = 0.0f, v = 0.0f, s;

		for (size_t c = 0; c < C; c++)
			m += x[c];
		m /= (float)C;
		for (size_t c = 0; c < C; c++)
			v += (x[c] - m) * (x[c] - m);
		v /= (float)C;
		s = 1.0f / sqrtf(v + LN_EPS);
		for (size_t c = 0; c < C; c++)
			o[c] = (x[c] - m) * s * weight[c] + bias[c];
		mean[n] = m;
		rstd[n] = s;
	}
}

/* With xhat = (x - mean) * rstd and g = dout * weight, per row:
 *   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dweight += sum over rows of dout * xhat;  dbias += sum of dout. */
void train_layernorm_backward(float *dinp, float *dweight, float *dbias,
			      const float *dout, const float *inp,
			      const float *weight, const float *mean,
			      const float *rstd, size_t N, size_t C)
{
	size_t nchunks = (C + COL_CHUNK - 1) / COL_CHUNK;

	/* dinp: rows are independent. */
#pragma omp parallel for schedule(static) if (N * C >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++) {
		const float *x = inp + n * C, *d = dout + n * C;
		float *dx = dinp + n * C;
		float m = mean[n], s = rstd[n];
		float g_mean = 0.0f, gx_mean = 0.0f;

		for (size_t c = 0; c < C; c++) {
			float g = d[c] * weight[c];

			g_mean += g;
			gx_mean += g * (x[c] - m) * s;
		}
		g_mean /= (float)C;
		gx_mean /= (float)C;
		for (size_t c = 0; c < C; c++) {
			float xhat = (x[c] - m) * s;
			float g = d[c] * weight[c];

			dx[c] += s * (g - g_mean - xhat * gx_mean);
		}
	}

	/* dweight, dbias (C): sums over rows, split over columns. */
#pragma omp parallel for schedule(static) if (N * C >= TRAIN_PAR_MIN)
	for (size_t k = 0; k < nchunks; k++) {
		size_t c0 = k * COL_CHUNK;
		size_t c1 = c0 + COL_CHUNK < C ? c0 + COL_CHUNK : C;

		for (size_t n = 0; n < N; n++) {
			const float *x = inp + n * C, *d = dout + n * C;

			for (size_t c = c0; c < c1; c++) {
				float xhat = (x[c] - mean[n]) * rstd[n];

				dweight[c] += d[c] * xhat;
				dbias[c] += d[c];
			}
		}
	}
}

/* ---- matmul (a linear layer) ---- */

/* out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC) */
void train_matmul_forward(float *out, const float *inp, const float *weight,
			  const float *bias, size_t N, size_t C, size_t OC)
{
	gemm_tiled(false, true, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
	if (!bias)
		return;
#pragma omp parallel for schedule(static) if (N * OC >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++) {
		float *o = out + n * OC;

		for (size_t j = 0; j < OC; j++)
			o[j] += bias[j];
	}
}

/* dinp (N,C)     += dout (N,OC) . weight (OC,C)
 * dweight (OC,C) += dout^T (OC,N) . inp (N,C)
 * dbias (OC)     += sum over rows of dout */
void train_matmul_backward(float *dinp, float *dweight, float *dbias,
			   const float *dout, const float *inp,
			   const float *weight, size_t N, size_t C,
			   size_t OC)
{
	size_t nchunks = (OC + COL_CHUNK - 1) / COL_CHUNK;

	gemm_tiled(false, false, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
	gemm_tiled(true, false, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
	if (!dbias)
		return;
#pragma omp parallel for schedule(static) if (N * OC >= TRAIN_PAR_MIN)
	for (size_t k = 0; k < nchunks; k++) {
		size_t j0 = k * COL_CHUNK;
		size_t j1 = j0 + COL_CHUNK < OC ? j0 + COL_CHUNK : OC;

		for (size_t n = 0; n < N; n++) {
			const float *d = dout + n * OC;

			for (size_t j = j0; j < j1; j++)
				dbias[j] += d[j];
		}
	}
}

/* ---- causal multi-head self-attention ---- */

/* For each (b, t, head h), with hs = C/NH and q, k, v the head's slices
 * of qkv (B,T,3C) = [q | k | v]:
 *   att[b,h,t,t2] = softmax over t2 <= t of q[b,t] . k[b,t2] / sqrt(hs)
 *   out[b,t,h*hs..] = sum over t2 <= t of att[b,h,t,t2] * v[b,t2]
 * att (B,NH,T,T) is 0 for t2 > t. */
void train_attention_forward(float *out, float *att, const float *qkv,
			     size_t B, size_t T, size_t C, size_t NH)
{
	size_t hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);

#pragma omp parallel for schedule(static) if (B * T * T * C >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < B * T * NH; i++) {
		size_t b = i / (T * NH), t = i / NH % T, h = i % NH;
		const float *bq = qkv + b * T * 3 * C + h * hs; /* q of t = 0 */
		const float *q = bq + t * 3 * C;
		float *row = att + ((b * NH + h) * T + t) * T;
		float *o = out + (b * T + t) * C + h * hs;
		float maxv = -INFINITY, sum = 0.0f, inv;

		/* scores, then a softmax that subtracts the row maximum */
		for (size_t t2 = 0; t2 <= t; t2++) {
			const float *k = bq + t2 * 3 * C + C;
			float dot = 0.0f;

			for (size_t j = 0; j < hs; j++)
				dot += q[j] * k[j];
			row[t2] = dot * scale;
			if (row[t2] > maxv)
				maxv = row[t2];
		}
		for (size_t t2 = 0; t2 <= t; t2++) {
			row[t2] = expf(row[t2] - maxv);
			sum += row[t2];
		}
		inv = 1.0f / sum;
		for (size_t t2 = 0; t2 < T; t2++)
			row[t2] = t2 <= t ? row[t2] * inv : 0.0f;

		/* the weighted sum of values */
		for (size_t j = 0; j < hs; j++)
			o[j] = 0.0f;
		for (size_t t2 = 0; t2 <= t; t2++) {
			const float *v = bq + t2 * 3 * C + 2 * C;

			for (size_t j = 0; j < hs; j++)
				o[j] += row[t2] * v[j];
		}
	}
}

/* Per (b, h), walking t upwards (dk and dv of a position t2 collect from
 * every t >= t2, so t stays in one thread, in order):
 *   datt[t2]  = dout[b,t] . v[t2]                dv[t2] += att * dout[b,t]
 *   dpre[t2]  = att[t2] * (datt[t2] - sum over t3 of att[t3] * datt[t3])
 *   dq[t]    += dpre[t2] / sqrt(hs) * k[t2]
 *   dk[t2]   += dpre[t2] / sqrt(hs) * q[t]
 * dqkv (B,T,3C); scratch holds datt, T floats per (b, h). */
void train_attention_backward(float *dqkv, float *scratch,
			      const float *dout, const float *qkv,
			      const float *att, size_t B, size_t T, size_t C,
			      size_t NH)
{
	size_t hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);

#pragma omp parallel for schedule(static) if (B * T * T * C >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < B * NH; i++) {
		size_t b = i / NH, h = i % NH;
		size_t base = b * T * 3 * C + h * hs;  /* q of t = 0 in qkv */
		float *datt = scratch + i * T;

		for (size_t t = 0; t < T; t++) {
			const float *row = att + ((b * NH + h) * T + t) * T;
			const float *d = dout + (b * T + t) * C + h * hs;
			const float *q = qkv + base + t * 3 * C;
			float *dq = dqkv + base + t * 3 * C;
			float s = 0.0f;

			/* through the weighted sum of values */
			for (size_t t2 = 0; t2 <= t; t2++) {
				size_t off = base + t2 * 3 * C + 2 * C;
				const float *v = qkv + off;
				float *dv = dqkv + off;
				float dot = 0.0f;

				for (size_t j = 0; j < hs; j++) {
					dot += d[j] * v[j];
					dv[j] += row[t2] * d[j];
				}
				datt[t2] = dot;
				s += row[t2] * dot;
			}
			/* through the softmax and the scaled scores */
			for (size_t t2 = 0; t2 <= t; t2++) {
				size_t off = base + t2 * 3 * C + C;
				const float *k = qkv + off;
				float *dk = dqkv + off;
				float dpre = row[t2] * (datt[t2] - s) * scale;

				for (size_t j = 0; j < hs; j++) {
					dq[j] += dpre * k[j];
					dk[j] += dpre * q[j];
				}
			}
		}
	}
}

/* ---- GELU, tanh approximation ---- */

#define GELU_S 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* out = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3) */
void train_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_S * (x + GELU_A * x * x * x);

		out[i] = 0.5f * x * (1.0f + tanhf(u));
	}
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
 * du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
void train_gelu_backward(float *dinp, const float *inp, const float *dout,
			 size_t n)
{
#pragma omp parallel for schedule(static) if (n >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float th = tanhf(GELU_S * (x + GELU_A * x * x * x));
		float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
		float grad = 0.5f * (1.0f + th) +
			     0.5f * x * (1.0f - th * th) * du;

		dinp[i] += grad * dout[i];
	}
}

/* ---- residual ---- */

/* out (n) = a + b */
void train_residual_forward(float *out, const float *a, const float *b,
			    size_t n)
{
#pragma omp parallel for schedule(static) if (n >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

/* da += dout; db += dout */
void train_residual_backward(float *da, float *db, const float *dout,
			     size_t n)
{
#pragma omp parallel for schedule(static) if (n >= TRAIN_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		da[i] += dout[i];
		db[i] += dout[i];
	}
}

/* ---- softmax and cross-entropy ---- */

/* probs (N,Vp) = exp(logits - max) / sum over the first V columns; the
 * padded columns are 0. */
void train_softmax_forward(float *probs, const float *logits, size_t N,
			   size_t V, size_t Vp)
{
#pragma omp parallel for schedule(static) if (N * Vp >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++) {
		const float *x = logits + n * Vp;
		float *p = probs + n * Vp;
		float maxv = -INFINITY, sum = 0.0f, inv;

		for (size_t v = 0; v < V; v++)
			if (x[v] > maxv)
				maxv = x[v];
		for (size_t v = 0; v < V; v++) {
			p[v] = expf(x[v] - maxv);
			sum += p[v];
		}
		inv = 1.0f / sum;
		for (size_t v = 0; v < V; v++)
			p[v] *= inv;
		for (size_t v = V; v < Vp; v++)
			p[v] = 0.0f;
	}
}

/* losses (N) = -ln probs (N,Vp)[targets (N)] */
void train_crossentropy_forward(float *losses, const float *probs,
				const int32_t *targets, size_t N, size_t Vp)
{
#pragma omp parallel for schedule(static) if (N >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++)
		losses[n] = -logf(probs[n * Vp + (size_t)targets[n]]);
}

/* dlogits (N,Vp) += (probs - onehot(target)) * dloss over the first V
 * columns: the gradient of -ln softmax(logits)[target]. */
void train_crossentropy_softmax_backward(float *dlogits, const float *probs,
					 const int32_t *targets, float dloss,
					 size_t N, size_t V, size_t Vp)
{
#pragma omp parallel for schedule(static) if (N * Vp >= TRAIN_PAR_MIN)
	for (size_t n = 0; n < N; n++) {
		const float *p = probs + n * Vp;
		float *d = dlogits + n * Vp;
		size_t target = (size_t)targets[n];

		for (size_t v = 0; v < V; v++) {
			float indicator = v == target ? 1.0f : 0.0f;

			d[v] += (p[v] - indicator) * dloss;
		}
	}
}
