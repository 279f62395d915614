/* SPDX-License-Identifier: MIT */
/*
 * gpu_kernels.cu - the layers of the GPU path (gpu_int.h): our kernels
 * for everything but the matrix products, which go to cuBLAS.  gpu.cu
 * strings them into a forward and a backward pass as model.c does with
 * layers.c; tests/unit/test_train_gpu.cu checks each one against its CPU
 * twin.
 *
 * Conventions.  Elementwise kernels use grid-stride loops of 256-thread
 * blocks.  A row reduction (layernorm, softmax) is one warp per row, with
 * the warp's partial sums combined by a fixed butterfly of shuffles; a
 * long row (the vocabulary) is one block per row with a fixed tree in
 * shared memory.  Sums over rows (parameter gradients) are column sums in
 * two kernels: partials over GK_ROW_CHUNK rows, each thread one column
 * walking its rows in order, then one thread per column adding the
 * partials in order.  Nothing uses atomics, so every result is the same
 * from one run to the next.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_int.h"

#define THREADS 256
#define WARP 32
#define LN_EPS 1e-5f
#define GELU_S 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_A 0.044715f
#define GRID_MAX 65535u

static char blas_error[256];

const char *gk_take_error(void)
{
	static char taken[256];

	if (!blas_error[0])
		return NULL;
	memcpy(taken, blas_error, sizeof(taken));
	blas_error[0] = '\0';
	return taken;
}

static void blas_check(cublasStatus_t st, const char *what)
{
	if (st == CUBLAS_STATUS_SUCCESS || blas_error[0])
		return;
	snprintf(blas_error, sizeof(blas_error), "%s: %s (cuBLAS status %d)",
		 what, cublasGetStatusString(st), (int)st);
}

/* Blocks for a grid-stride loop over n elements. */
static unsigned grid_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;

	return b > GRID_MAX ? GRID_MAX : (b ? (unsigned)b : 1u);
}

#define FOR_EACH(i, n)                                                    \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;    \
	     i < (n); i += (size_t)gridDim.x * blockDim.x)

__device__ static float warp_sum(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ static float warp_max(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* The sum (or max) of v over a block of THREADS threads, returned to all
 * of them.  sh is THREADS / WARP floats of shared memory; the call begins
 * and ends with a barrier, so sh can be used for the next call. */
__device__ static float block_reduce(float v, float *sh, bool is_max)
{
	int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
	float r;

	__syncthreads();
	v = is_max ? warp_max(v) : warp_sum(v);
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	r = sh[0];
	for (int i = 1; i < THREADS / WARP; i++)
		r = is_max ? fmaxf(r, sh[i]) : r + sh[i];
	__syncthreads();
	return r;
}

/* ---- conversions ---- */

__global__ static void f32_to_bf16_k(bf16 *out, const float *in, size_t n)
{
	FOR_EACH(i, n)
		out[i] = __float2bfloat16(in[i]);
}

__global__ static void bf16_to_f32_k(float *out, const bf16 *in, size_t n)
{
	FOR_EACH(i, n)
		out[i] = __bfloat162float(in[i]);
}

void gk_f32_to_bf16(bf16 *out, const float *in, size_t n, cudaStream_t s)
{
	f32_to_bf16_k<<<grid_for(n), THREADS, 0, s>>>(out, in, n);
}

void gk_bf16_to_f32(float *out, const bf16 *in, size_t n, cudaStream_t s)
{
	bf16_to_f32_k<<<grid_for(n), THREADS, 0, s>>>(out, in, n);
}

/* ---- column sums: partials of GK_ROW_CHUNK rows, then in order ---- */

/* dst_a[j] (j < split) or dst_b[j - split] += sum over chunks of
 * work[chunk * cols + j]. */
__global__ static void colsum_reduce_k(float *dst_a, float *dst_b, int split,
				       const float *work, int nchunks,
				       int cols)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0.0f;

	if (j >= cols)
		return;
	for (int k = 0; k < nchunks; k++)
		s += work[(size_t)k * cols + j];
	if (j < split)
		dst_a[j] += s;
	else
		dst_b[j - split] += s;
}

static int nchunks_of(int N)
{
	return (N + GK_ROW_CHUNK - 1) / GK_ROW_CHUNK;
}

/* ---- encoder ---- */

__global__ static void encoder_forward_k(float *out, const int32_t *inp,
					 const float *wte, const float *wpe,
					 int T, int C, size_t total)
{
	FOR_EACH(i, total) {
		size_t n = i / C;
		int c = (int)(i % C), t = (int)(n % T);

		out[i] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
	}
}

void gk_encoder_forward(float *out, const int32_t *inp, const float *wte,
			const float *wpe, int B, int T, int C, cudaStream_t s)
{
	size_t total = (size_t)B * T * C;

	encoder_forward_k<<<grid_for(total), THREADS, 0, s>>>(out, inp, wte,
							      wpe, T, C, total);
}

/* dwpe[t, c] += sum over b, in order. */
__global__ static void encoder_dwpe_k(float *dwpe, const float *dout, int B,
				      int T, int C)
{
	FOR_EACH(i, (size_t)T * C) {
		float s = 0.0f;

		for (int b = 0; b < B; b++)
			s += dout[(size_t)b * T * C + i];
		dwpe[i] += s;
	}
}

/* Block (i, y): token tok[i], columns y*32 .. y*32+31.  A token's
 * positions can be thousands (a space in byte-level text, "the" in a
 * large batch), so the block's 8 warps share them: warp w sums positions
 * w, w+8, w+16, ... of the group, lane l column y*32+l, and the 8
 * partial sums are added in warp order.  The order is fixed by the
 * positions alone, so the result repeats bit for bit. */
#define DWTE_WARPS 8
__global__ static void encoder_dwte_k(float *dwte, const float *dout,
				      const int32_t *tok, const int32_t *start,
				      const int32_t *pos, int C)
{
	__shared__ float part[DWTE_WARPS][WARP];
	int i = blockIdx.x, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
	int c = blockIdx.y * WARP + lane;
	float s = 0.0f;

	if (c < C)
		for (int k = start[i] + w; k < start[i + 1]; k += DWTE_WARPS)
			s += dout[(size_t)pos[k] * C + c];
	part[w][lane] = s;
	__syncthreads();
	if (w == 0 && c < C) {
		for (int v = 1; v < DWTE_WARPS; v++)
			s += part[v][lane];
		dwte[(size_t)tok[i] * C + c] += s;
	}
}

void gk_encoder_backward(float *dwte, float *dwpe, const float *dout,
			 const int32_t *tok, const int32_t *start,
			 const int32_t *pos, int ntok, int B, int T, int C,
			 cudaStream_t s)
{
	dim3 grid((unsigned)ntok, (unsigned)((C + WARP - 1) / WARP));

	encoder_dwpe_k<<<grid_for((size_t)T * C), THREADS, 0, s>>>(dwpe, dout,
								    B, T, C);
	if (ntok > 0)
		encoder_dwte_k<<<grid, DWTE_WARPS * WARP, 0, s>>>(dwte, dout,
								  tok, start,
								  pos, C);
}

int gk_token_groups(const int32_t *inp, int N, int32_t *tok, int32_t *start,
		    int32_t *pos, int32_t *count, int V)
{
	int ntok = 0, off = 0;

	for (int n = 0; n < N; n++)
		count[inp[n]]++;
	for (int v = 0; v < V; v++) {
		if (!count[v])
			continue;
		tok[ntok] = v;
		start[ntok] = off;
		off += count[v];
		count[v] = start[ntok];     /* now the group's fill cursor */
		ntok++;
	}
	start[ntok] = off;
	for (int n = 0; n < N; n++)
		pos[count[inp[n]]++] = n;
	for (int i = 0; i < ntok; i++)
		count[tok[i]] = 0;
	return ntok;
}

/* ---- layernorm ---- */

/* One warp per row. */
__global__ static void layernorm_forward_k(bf16 *out, float *mean,
					   float *rstd, const float *inp,
					   const float *w, const float *b,
					   int N, int C)
{
	int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	const float *x;
	float m = 0.0f, v = 0.0f, r;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	for (int c = lane; c < C; c += WARP)
		m += x[c];
	m = warp_sum(m) / (float)C;
	for (int c = lane; c < C; c += WARP)
		v += (x[c] - m) * (x[c] - m);
	v = warp_sum(v) / (float)C;
	r = 1.0f / sqrtf(v + LN_EPS);
	for (int c = lane; c < C; c += WARP)
		out[(size_t)row * C + c] =
			__float2bfloat16((x[c] - m) * r * w[c] + b[c]);
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

void gk_layernorm_forward(bf16 *out, float *mean, float *rstd,
			  const float *inp, const float *weight,
			  const float *bias, int N, int C, cudaStream_t s)
{
	int rows = THREADS / WARP;

	layernorm_forward_k<<<(N + rows - 1) / rows, THREADS, 0, s>>>(
		out, mean, rstd, inp, weight, bias, N, C);
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w;
 * one warp per row. */
__global__ static void layernorm_dinp_k(float *dinp, const float *dout,
					const float *inp, const float *w,
					const float *mean, const float *rstd,
					int N, int C)
{
	int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
	int lane = threadIdx.x % WARP;
	const float *x, *d;
	float m, r, g_mean = 0.0f, gx_mean = 0.0f;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	d = dout + (size_t)row * C;
	m = mean[row];
	r = rstd[row];
	for (int c = lane; c < C; c += WARP) {
		float g = d[c] * w[c];

		g_mean += g;
		gx_mean += g * (x[c] - m) * r;
	}
	g_mean = warp_sum(g_mean) / (float)C;
	gx_mean = warp_sum(gx_mean) / (float)C;
	for (int c = lane; c < C; c += WARP) {
		float xhat = (x[c] - m) * r, g = d[c] * w[c];

		dinp[(size_t)row * C + c] += r * (g - g_mean - xhat * gx_mean);
	}
}

/* Block (x, chunk): columns x*THREADS.. of rows chunk*GK_ROW_CHUNK..;
 * work row `chunk` is [dweight partials (C) | dbias partials (C)]. */
__global__ static void layernorm_partials_k(float *work, const float *dout,
					    const float *inp,
					    const float *mean,
					    const float *rstd, int N, int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
	int r0 = k * GK_ROW_CHUNK;
	int r1 = r0 + GK_ROW_CHUNK < N ? r0 + GK_ROW_CHUNK : N;
	float sw = 0.0f, sb = 0.0f;

	if (c >= C)
		return;
	for (int n = r0; n < r1; n++) {
		float d = dout[(size_t)n * C + c];
		float xhat = (inp[(size_t)n * C + c] - mean[n]) * rstd[n];

		sw += d * xhat;
		sb += d;
	}
	work[(size_t)k * 2 * C + c] = sw;
	work[(size_t)k * 2 * C + C + c] = sb;
}

void gk_layernorm_backward(float *dinp, float *dweight, float *dbias,
			   const float *dout, const float *inp,
			   const float *weight, const float *mean,
			   const float *rstd, int N, int C, float *work,
			   cudaStream_t s)
{
	int rows = THREADS / WARP, nk = nchunks_of(N);
	dim3 grid((unsigned)((C + THREADS - 1) / THREADS), (unsigned)nk);

	layernorm_dinp_k<<<(N + rows - 1) / rows, THREADS, 0, s>>>(
		dinp, dout, inp, weight, mean, rstd, N, C);
	layernorm_partials_k<<<grid, THREADS, 0, s>>>(work, dout, inp, mean,
						      rstd, N, C);
	colsum_reduce_k<<<(2 * C + THREADS - 1) / THREADS, THREADS, 0, s>>>(
		dweight, dbias, C, work, nk, 2 * C);
}

/* ---- matmul ---- */

__global__ static void add_bias_k(bf16 *out, const float *bias, int OC,
				  size_t total)
{
	FOR_EACH(i, total)
		out[i] = __float2bfloat16(__bfloat162float(out[i]) +
					  bias[i % OC]);
}

/* Row-major (N,OC) = (N,C) . (OC,C)^T is, in cuBLAS's column-major
 * terms, out^T (OC,N) = W (C,OC)^T . inp^T (C,N). */
void gk_matmul_forward_ld(cublasHandle_t h, bf16 *out, const bf16 *inp,
			  const bf16 *weight, int N, int C, int OC, int ld,
			  cudaStream_t s)
{
	const float one = 1.0f, zero = 0.0f;

	blas_check(cublasSetStream(h, s), "cublasSetStream");
	blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one,
				weight, CUDA_R_16BF, C, inp, CUDA_R_16BF, C,
				&zero, out, CUDA_R_16BF, ld,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx (matmul forward)");
}

void gk_matmul_forward(cublasHandle_t h, bf16 *out, const bf16 *inp,
		       const bf16 *weight, const float *bias, int N, int C,
		       int OC, cudaStream_t s)
{
	size_t total = (size_t)N * OC;

	gk_matmul_forward_ld(h, out, inp, weight, N, C, OC, OC, s);
	if (bias)
		add_bias_k<<<grid_for(total), THREADS, 0, s>>>(out, bias, OC,
							       total);
}

/* Block (x, chunk): columns x*THREADS.. of dout, rows of the chunk. */
__global__ static void bias_partials_k(float *work, const bf16 *dout, int N,
				       int OC)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
	int r0 = k * GK_ROW_CHUNK;
	int r1 = r0 + GK_ROW_CHUNK < N ? r0 + GK_ROW_CHUNK : N;
	float s = 0.0f;

	if (j >= OC)
		return;
	for (int n = r0; n < r1; n++)
		s += __bfloat162float(dout[(size_t)n * OC + j]);
	work[(size_t)k * OC + j] = s;
}

/* Column-major, as above:
 *   dinp^T (C,N)  = W (C,OC) . dout^T (OC,N)
 *   dW^T (C,OC)  += inp^T (C,N) . (dout^T (OC,N))^T */
void gk_matmul_backward_ld(cublasHandle_t h, float *dinp, float *dweight,
			   const bf16 *dout, const bf16 *inp,
			   const bf16 *weight, int N, int C, int OC, int ld,
			   cudaStream_t s)
{
	const float one = 1.0f, zero = 0.0f;

	blas_check(cublasSetStream(h, s), "cublasSetStream");
	blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one,
				weight, CUDA_R_16BF, C, dout, CUDA_R_16BF, ld,
				&zero, dinp, CUDA_R_32F, C,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx (matmul backward, dinp)");
	blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one,
				inp, CUDA_R_16BF, C, dout, CUDA_R_16BF, ld,
				&one, dweight, CUDA_R_32F, C,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx (matmul backward, dweight)");
}

void gk_matmul_backward(cublasHandle_t h, float *dinp, float *dweight,
			float *dbias, const bf16 *dout, const bf16 *inp,
			const bf16 *weight, int N, int C, int OC, float *work,
			cudaStream_t s)
{
	gk_matmul_backward_ld(h, dinp, dweight, dout, inp, weight, N, C, OC,
			      OC, s);
	if (dbias) {
		int nk = nchunks_of(N);
		dim3 grid((unsigned)((OC + THREADS - 1) / THREADS),
			  (unsigned)nk);

		bias_partials_k<<<grid, THREADS, 0, s>>>(work, dout, N, OC);
		colsum_reduce_k<<<(OC + THREADS - 1) / THREADS, THREADS, 0,
				  s>>>(dbias, dbias, OC, work, nk, OC);
	}
}

/* ---- attention ---- */

/* i over (B,NH,T,hs); src is the q element of that place in (B,T,3C). */
__device__ static size_t qkv_src(size_t i, int T, int C, int NH, int hs)
{
	size_t d = i % hs, t = i / hs % T, h = i / ((size_t)hs * T) % NH;
	size_t b = i / ((size_t)hs * T * NH);

	return (b * T + t) * 3 * (size_t)C + h * hs + d;
}

/* y (B,T,C) place of i over (B,NH,T,hs). */
__device__ static size_t heads_dst(size_t i, int T, int C, int NH, int hs)
{
	size_t d = i % hs, t = i / hs % T, h = i / ((size_t)hs * T) % NH;
	size_t b = i / ((size_t)hs * T * NH);

	return (b * T + t) * (size_t)C + h * hs + d;
}

__global__ static void split_qkv_k(bf16 *q, bf16 *k, bf16 *v,
				   const bf16 *qkv, int T, int C, int NH,
				   size_t total)
{
	int hs = C / NH;

	FOR_EACH(i, total) {
		size_t src = qkv_src(i, T, C, NH, hs);

		q[i] = qkv[src];
		k[i] = qkv[src + C];
		v[i] = qkv[src + 2 * C];
	}
}

__global__ static void merge_qkv_k(bf16 *dqkv, const bf16 *dq,
				   const bf16 *dk, const bf16 *dv, int T,
				   int C, int NH, size_t total)
{
	int hs = C / NH;

	FOR_EACH(i, total) {
		size_t dst = qkv_src(i, T, C, NH, hs);

		dqkv[dst] = dq[i];
		dqkv[dst + C] = dk[i];
		dqkv[dst + 2 * C] = dv[i];
	}
}

__global__ static void merge_heads_k(bf16 *out, const bf16 *y, int T, int C,
				     int NH, size_t total)
{
	int hs = C / NH;

	FOR_EACH(i, total)
		out[heads_dst(i, T, C, NH, hs)] = y[i];
}

__global__ static void split_heads_k(bf16 *dy, const float *dout, int T,
				     int C, int NH, size_t total)
{
	int hs = C / NH;

	FOR_EACH(i, total)
		dy[i] = __float2bfloat16(dout[heads_dst(i, T, C, NH, hs)]);
}

/* One warp per row r of (B,NH,T,T), position t = r % T: att = softmax of
 * scores * scale over t2 <= t, 0 beyond. */
__global__ static void attn_softmax_k(bf16 *att, const float *scores,
				      float scale, int T, size_t rows)
{
	size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) +
		   threadIdx.x / WARP;
	int lane = threadIdx.x % WARP, t;
	const float *x;
	float maxv = -INFINITY, sum = 0.0f, inv;

	if (r >= rows)
		return;
	t = (int)(r % T);
	x = scores + r * T;
	for (int t2 = lane; t2 <= t; t2 += WARP)
		maxv = fmaxf(maxv, x[t2] * scale);
	maxv = warp_max(maxv);
	for (int t2 = lane; t2 <= t; t2 += WARP)
		sum += expf(x[t2] * scale - maxv);
	inv = 1.0f / warp_sum(sum);
	for (int t2 = lane; t2 < T; t2 += WARP)
		att[r * T + t2] = __float2bfloat16(
			t2 <= t ? expf(x[t2] * scale - maxv) * inv : 0.0f);
}

/* One warp per row: dscores = att * (datt - sum(att * datt)) * scale
 * over t2 <= t, 0 beyond; datt arrives in `scores`. */
__global__ static void attn_softmax_backward_k(bf16 *dscores,
					       const float *datt,
					       const bf16 *att, float scale,
					       int T, size_t rows)
{
	size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) +
		   threadIdx.x / WARP;
	int lane = threadIdx.x % WARP, t;
	float s = 0.0f;

	if (r >= rows)
		return;
	t = (int)(r % T);
	for (int t2 = lane; t2 <= t; t2 += WARP)
		s += __bfloat162float(att[r * T + t2]) * datt[r * T + t2];
	s = warp_sum(s);
	for (int t2 = lane; t2 < T; t2 += WARP) {
		float a = __bfloat162float(att[r * T + t2]);

		dscores[r * T + t2] = __float2bfloat16(
			t2 <= t ? a * (datt[r * T + t2] - s) * scale : 0.0f);
	}
}

/* out (B*NH batches) = op(A) . op(B), column-major, as the comments at
 * the call sites derive. */
static void batched(cublasHandle_t h, cublasOperation_t ta,
		    cublasOperation_t tb, int m, int n, int k, const void *A,
		    int lda, long long sa, const void *B, int ldb,
		    long long sb, void *C, cudaDataType ct, int ldc,
		    long long sc, int count, const char *what)
{
	const float one = 1.0f, zero = 0.0f;

	blas_check(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A,
					      CUDA_R_16BF, lda, sa, B,
					      CUDA_R_16BF, ldb, sb, &zero, C,
					      ct, ldc, sc, count,
					      CUBLAS_COMPUTE_32F,
					      CUBLAS_GEMM_DEFAULT),
		   what);
}

/* Per head (b,h), with q, k, v, y (T,hs) row-major, i.e. (hs,T)
 * column-major, and the (T,T) row-major scores S[t][t2] = q[t] . k[t2],
 * i.e. (T,T) column-major S^T:
 *   S^T = k^T^T . q^T  -> gemm(T, N) with m = n = T, k = hs
 *   y^T = v^T . att^T  -> gemm(N, N) with m = hs, n = k = T */
void gk_attention_forward(cublasHandle_t h, bf16 *out, bf16 *att,
			  const bf16 *qkv, int B, int T, int C, int NH,
			  const struct gk_attn_work *w, cudaStream_t s)
{
	int hs = C / NH, count = B * NH, rows_per = THREADS / WARP;
	size_t total = (size_t)B * T * C, rows = (size_t)B * NH * T;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	blas_check(cublasSetStream(h, s), "cublasSetStream");
	split_qkv_k<<<grid_for(total), THREADS, 0, s>>>(w->q, w->k, w->v, qkv,
							T, C, NH, total);
	batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, w->k, hs, th, w->q, hs,
		th, w->scores, CUDA_R_32F, T, tt, count,
		"cublasGemmStridedBatchedEx (attention scores)");
	attn_softmax_k<<<(unsigned)((rows + rows_per - 1) / rows_per), THREADS,
			 0, s>>>(att, w->scores, scale, T, rows);
	batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, w->v, hs, th, att, T,
		tt, w->y, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention values)");
	merge_heads_k<<<grid_for(total), THREADS, 0, s>>>(out, w->y, T, C, NH,
							  total);
}

/* Per head, column-major as above, dS the gradient of the scores:
 *   datt^T = v^T^T . dy^T      (T,N): m = n = T, k = hs
 *   dv^T   = dy^T . att        (N,T): m = hs, n = k = T
 *   dq^T   = k^T . dS^T        (N,N): m = hs, n = k = T
 *   dk^T   = q^T . dS          (N,T): m = hs, n = k = T */
void gk_attention_backward(cublasHandle_t h, bf16 *dqkv, const float *dout,
			   const bf16 *qkv, const bf16 *att, int B, int T,
			   int C, int NH, const struct gk_attn_work *w,
			   cudaStream_t s)
{
	int hs = C / NH, count = B * NH, rows_per = THREADS / WARP;
	size_t total = (size_t)B * T * C, rows = (size_t)B * NH * T;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	blas_check(cublasSetStream(h, s), "cublasSetStream");
	split_qkv_k<<<grid_for(total), THREADS, 0, s>>>(w->q, w->k, w->v, qkv,
							T, C, NH, total);
	split_heads_k<<<grid_for(total), THREADS, 0, s>>>(w->dy, dout, T, C,
							  NH, total);
	batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, w->v, hs, th, w->dy, hs,
		th, w->scores, CUDA_R_32F, T, tt, count,
		"cublasGemmStridedBatchedEx (attention, datt)");
	batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, w->dy, hs, th, att, T,
		tt, w->dv, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dv)");
	attn_softmax_backward_k<<<(unsigned)((rows + rows_per - 1) / rows_per),
				  THREADS, 0, s>>>(w->dscores, w->scores, att,
						   scale, T, rows);
	batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, w->k, hs, th,
		w->dscores, T, tt, w->dq, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dq)");
	batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, w->q, hs, th,
		w->dscores, T, tt, w->dk, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dk)");
	merge_qkv_k<<<grid_for(total), THREADS, 0, s>>>(dqkv, w->dq, w->dk,
							w->dv, T, C, NH,
							total);
}

/* ---- GELU ---- */

__global__ static void gelu_forward_k(bf16 *out, const bf16 *inp, size_t n)
{
	FOR_EACH(i, n) {
		float x = __bfloat162float(inp[i]);
		float u = GELU_S * (x + GELU_A * x * x * x);

		out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(u)));
	}
}

__global__ static void gelu_backward_k(bf16 *dinp, const bf16 *inp,
				       const float *dout, size_t n)
{
	FOR_EACH(i, n) {
		float x = __bfloat162float(inp[i]);
		float th = tanhf(GELU_S * (x + GELU_A * x * x * x));
		float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
		float grad = 0.5f * (1.0f + th) +
			     0.5f * x * (1.0f - th * th) * du;

		dinp[i] = __float2bfloat16(grad * dout[i]);
	}
}

void gk_gelu_forward(bf16 *out, const bf16 *inp, size_t n, cudaStream_t s)
{
	gelu_forward_k<<<grid_for(n), THREADS, 0, s>>>(out, inp, n);
}

void gk_gelu_backward(bf16 *dinp, const bf16 *inp, const float *dout,
		      size_t n, cudaStream_t s)
{
	gelu_backward_k<<<grid_for(n), THREADS, 0, s>>>(dinp, inp, dout, n);
}

/* ---- residual ---- */

__global__ static void residual_forward_k(float *out, const float *a,
					  const bf16 *b, size_t n)
{
	FOR_EACH(i, n)
		out[i] = a[i] + __bfloat162float(b[i]);
}

void gk_residual_forward(float *out, const float *a, const bf16 *b,
			 size_t n, cudaStream_t s)
{
	residual_forward_k<<<grid_for(n), THREADS, 0, s>>>(out, a, b, n);
}

/* ---- softmax + cross-entropy ---- */

/* One block per row. */
__global__ static void crossentropy_forward_k(float *losses, float *lse,
					      const bf16 *logits,
					      const int32_t *targets, int V,
					      int Vp)
{
	__shared__ float sh[THREADS / WARP];
	const bf16 *x = logits + (size_t)blockIdx.x * Vp;
	float maxv = -INFINITY, sum = 0.0f, l;

	for (int v = threadIdx.x; v < V; v += blockDim.x)
		maxv = fmaxf(maxv, __bfloat162float(x[v]));
	maxv = block_reduce(maxv, sh, true);
	for (int v = threadIdx.x; v < V; v += blockDim.x)
		sum += expf(__bfloat162float(x[v]) - maxv);
	sum = block_reduce(sum, sh, false);
	l = maxv + logf(sum);
	if (threadIdx.x == 0) {
		lse[blockIdx.x] = l;
		losses[blockIdx.x] =
			l - __bfloat162float(x[targets[blockIdx.x]]);
	}
}

__global__ static void crossentropy_backward_k(bf16 *dlogits,
					       const bf16 *logits,
					       const float *lse,
					       const int32_t *targets,
					       float dloss, int V, int Vp)
{
	size_t row = blockIdx.x;
	float l = lse[row];
	int target = targets[row];

	for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
		float d = 0.0f;

		if (v < V) {
			float p = expf(__bfloat162float(logits[row * Vp + v]) -
				       l);

			d = (p - (v == target ? 1.0f : 0.0f)) * dloss;
		}
		dlogits[row * Vp + v] = __float2bfloat16(d);
	}
}

void gk_crossentropy_forward(float *losses, float *lse, const bf16 *logits,
			     const int32_t *targets, int N, int V, int Vp,
			     cudaStream_t s)
{
	crossentropy_forward_k<<<N, THREADS, 0, s>>>(losses, lse, logits,
						     targets, V, Vp);
}

void gk_crossentropy_backward(bf16 *dlogits, const bf16 *logits,
			      const float *lse, const int32_t *targets,
			      float dloss, int N, int V, int Vp,
			      cudaStream_t s)
{
	crossentropy_backward_k<<<N, THREADS, 0, s>>>(dlogits, logits, lse,
						      targets, dloss, V, Vp);
}

/* ---- sums ---- */

/* The sum of in[lo..hi) into *out, in double: each thread strides over
 * the range in order, then a fixed tree over the threads. */
__device__ static double block_sum_range(const float *in, size_t lo,
					 size_t hi, bool squares)
{
	__shared__ double sh[THREADS];
	double s = 0.0;

	for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		double x = in[i];

		s += squares ? x * x : x;
	}
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int o = THREADS / 2; o > 0; o >>= 1) {
		if ((int)threadIdx.x < o)
			sh[threadIdx.x] += sh[threadIdx.x + o];
		__syncthreads();
	}
	return sh[0];
}

__global__ static void sum_k(float *out, const float *in, size_t n)
{
	double s = block_sum_range(in, 0, n, false);

	if (threadIdx.x == 0)
		*out = (float)s;
}

void gk_sum(float *out, const float *in, int n, cudaStream_t s)
{
	sum_k<<<1, THREADS, 0, s>>>(out, in, (size_t)n);
}

__global__ static void sumsq_partials_k(double *work, const float *g,
					size_t n)
{
	size_t k = blockIdx.x;
	size_t lo = n / GK_NORM_BLOCKS * k + (k < n % GK_NORM_BLOCKS ? k :
					      n % GK_NORM_BLOCKS);
	size_t len = n / GK_NORM_BLOCKS + (k < n % GK_NORM_BLOCKS ? 1 : 0);
	double s = block_sum_range(g, lo, lo + len, true);

	if (threadIdx.x == 0)
		work[k] = s;
}

__global__ static void sumsq_final_k(double *out, const double *work)
{
	double s = 0.0;

	for (int k = 0; k < GK_NORM_BLOCKS; k++)
		s += work[k];
	*out = s;
}

void gk_sumsq(double *out, const float *g, size_t n, double *work,
	      cudaStream_t s)
{
	sumsq_partials_k<<<GK_NORM_BLOCKS, THREADS, 0, s>>>(work, g, n);
	sumsq_final_k<<<1, 1, 0, s>>>(out, work);
}

/* ---- AdamW ---- */

__global__ static void adamw_k(float *p, bf16 *pb, const float *g, float *m,
			       float *v, size_t n, float lr, float b1,
			       float b2, float b1c, float b2c, float eps,
			       float decay, float gscale)
{
	FOR_EACH(i, n) {
		float gk = g[i] * gscale;
		float mk = b1 * m[i] + (1.0f - b1) * gk;
		float vk = b2 * v[i] + (1.0f - b2) * gk * gk;
		float mhat = mk / b1c, vhat = vk / b2c;
		float pk = p[i];

		m[i] = mk;
		v[i] = vk;
		pk -= lr * (mhat / (sqrtf(vhat) + eps) + decay * pk);
		p[i] = pk;
		pb[i] = __float2bfloat16(pk);
	}
}

void gk_adamw(float *p, bf16 *pb, const float *g, float *m, float *v,
	      size_t n, float lr, float b1, float b2, float b1c, float b2c,
	      float eps, float decay, float gscale, cudaStream_t s)
{
	adamw_k<<<grid_for(n), THREADS, 0, s>>>(p, pb, g, m, v, n, lr, b1, b2,
						b1c, b2c, eps, decay, gscale);
}
