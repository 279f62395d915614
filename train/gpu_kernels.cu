/* SPDX-License-Identifier: MIT */
/*
 * gpu_kernels.cu - the layers of the GPU path (gpu_int.h) but attention
 * (gpu_attn.cu): our kernels for everything but the matrix products,
 * which go to cuBLAS (and cuBLASLt where the bias rides in the GEMM's
 * epilogue).  gpu.cu strings them into a forward and a backward pass as
 * model.c does with layers.c; tests/unit/test_train_gpu.cu checks each
 * one against its CPU twin.
 *
 * Conventions.  Elementwise kernels use grid-stride loops of 256-thread
 * blocks.  A row reduction (layernorm) is one warp per row, with
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

#include <cublasLt.h>

#include "gpu_int.h"

#define LN_EPS 1e-5f
#define GELU_S 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_A 0.044715f

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

void gk_blas_check(cublasStatus_t st, const char *what)
{
	if (st == CUBLAS_STATUS_SUCCESS || blas_error[0])
		return;
	snprintf(blas_error, sizeof(blas_error), "%s: %s (cuBLAS status %d)",
		 what, cublasGetStatusString(st), (int)st);
}

/* The sum (or max) of v over a block of GK_THREADS threads, returned to all
 * of them.  sh is GK_THREADS / GK_WARP floats of shared memory; the call begins
 * and ends with a barrier, so sh can be used for the next call. */
__device__ static float block_reduce(float v, float *sh, bool is_max)
{
	int lane = threadIdx.x % GK_WARP, wid = threadIdx.x / GK_WARP;
	float r;

	__syncthreads();
	v = is_max ? gk_warp_max(v) : gk_warp_sum(v);
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	r = sh[0];
	for (int i = 1; i < GK_THREADS / GK_WARP; i++)
		r = is_max ? fmaxf(r, sh[i]) : r + sh[i];
	__syncthreads();
	return r;
}

/* ---- conversions ---- */

__global__ static void f32_to_bf16_k(bf16 *out, const float *in, size_t n)
{
	GK_FOR_EACH(i, n)
		out[i] = __float2bfloat16(in[i]);
}

__global__ static void bf16_to_f32_k(float *out, const bf16 *in, size_t n)
{
	GK_FOR_EACH(i, n)
		out[i] = __bfloat162float(in[i]);
}

void gk_f32_to_bf16(bf16 *out, const float *in, size_t n, cudaStream_t s)
{
	f32_to_bf16_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(out, in, n);
}

void gk_bf16_to_f32(float *out, const bf16 *in, size_t n, cudaStream_t s)
{
	bf16_to_f32_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(out, in, n);
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
	GK_FOR_EACH(i, total) {
		size_t n = i / C;
		int c = (int)(i % C), t = (int)(n % T);

		out[i] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
	}
}

void gk_encoder_forward(float *out, const int32_t *inp, const float *wte,
			const float *wpe, int B, int T, int C, cudaStream_t s)
{
	size_t total = (size_t)B * T * C;

	encoder_forward_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(out, inp,
		wte, wpe, T, C, total);
}

/* dwpe[t, c] += sum over b, in order. */
__global__ static void encoder_dwpe_k(float *dwpe, const float *dout, int B,
				      int T, int C)
{
	GK_FOR_EACH(i, (size_t)T * C) {
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
	__shared__ float part[DWTE_WARPS][GK_WARP];
	int i = blockIdx.x, w = threadIdx.x / GK_WARP;
	int lane = threadIdx.x % GK_WARP;
	int c = blockIdx.y * GK_WARP + lane;
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
	dim3 grid((unsigned)ntok, (unsigned)((C + GK_WARP - 1) / GK_WARP));

	encoder_dwpe_k<<<gk_grid_for((size_t)T * C), GK_THREADS, 0, s>>>(dwpe,
		dout, B, T, C);
	if (ntok > 0)
		encoder_dwte_k<<<grid, DWTE_WARPS * GK_WARP, 0, s>>>(dwte, dout,
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
	int row = blockIdx.x * (blockDim.x / GK_WARP) + threadIdx.x / GK_WARP;
	int lane = threadIdx.x % GK_WARP;
	const float *x;
	float m = 0.0f, v = 0.0f, r;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	for (int c = lane; c < C; c += GK_WARP)
		m += x[c];
	m = gk_warp_sum(m) / (float)C;
	for (int c = lane; c < C; c += GK_WARP)
		v += (x[c] - m) * (x[c] - m);
	v = gk_warp_sum(v) / (float)C;
	r = 1.0f / sqrtf(v + LN_EPS);
	for (int c = lane; c < C; c += GK_WARP)
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
	int rows = GK_THREADS / GK_WARP;

	layernorm_forward_k<<<(N + rows - 1) / rows, GK_THREADS, 0, s>>>(
		out, mean, rstd, inp, weight, bias, N, C);
}

/* dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w;
 * one warp per row. */
__global__ static void layernorm_dinp_k(float *dinp, const float *dout,
					const float *inp, const float *w,
					const float *mean, const float *rstd,
					int N, int C)
{
	int row = blockIdx.x * (blockDim.x / GK_WARP) + threadIdx.x / GK_WARP;
	int lane = threadIdx.x % GK_WARP;
	const float *x, *d;
	float m, r, g_mean = 0.0f, gx_mean = 0.0f;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	d = dout + (size_t)row * C;
	m = mean[row];
	r = rstd[row];
	for (int c = lane; c < C; c += GK_WARP) {
		float g = d[c] * w[c];

		g_mean += g;
		gx_mean += g * (x[c] - m) * r;
	}
	g_mean = gk_warp_sum(g_mean) / (float)C;
	gx_mean = gk_warp_sum(gx_mean) / (float)C;
	for (int c = lane; c < C; c += GK_WARP) {
		float xhat = (x[c] - m) * r, g = d[c] * w[c];

		dinp[(size_t)row * C + c] += r * (g - g_mean - xhat * gx_mean);
	}
}

/* Block (x, chunk): columns x*GK_THREADS.. of rows chunk*GK_ROW_CHUNK..;
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
	int rows = GK_THREADS / GK_WARP, nk = nchunks_of(N);
	dim3 grid((unsigned)((C + GK_THREADS - 1) / GK_THREADS), (unsigned)nk);

	layernorm_dinp_k<<<(N + rows - 1) / rows, GK_THREADS, 0, s>>>(
		dinp, dout, inp, weight, mean, rstd, N, C);
	layernorm_partials_k<<<grid, GK_THREADS, 0, s>>>(work, dout, inp, mean,
						      rstd, N, C);
	colsum_reduce_k<<<(2 * C + GK_THREADS - 1) / GK_THREADS, GK_THREADS, 0,
			  s>>>(
		dweight, dbias, C, work, nk, 2 * C);
}

/* ---- matmul ---- */

/* cuBLASLt, for the bias epilogues (docs/gpu.md "Bias in the GEMM"): one
 * handle and one work space per process, made on first use on the
 * device current then; a call on another device, or a product the
 * library has no kernel for (its heuristic finds none), takes the path of
 * cuBLAS plus our kernels instead, and counts in gk_lt_fallbacks. */
#define LT_WS (32u << 20)

static struct {
	cublasLtHandle_t h;
	void *ws;
	int device;
	bool off;                    /* gk_bias_epilogues(false) */
	unsigned long fallbacks;
} lt = { NULL, NULL, -1, false, 0 };

void gk_bias_epilogues(bool on)
{
	lt.off = !on;
}

unsigned long gk_lt_fallbacks(void)
{
	return lt.fallbacks;
}

static bool lt_ready(void)
{
	int dev = -1;

	if (lt.off || cudaGetDevice(&dev) != cudaSuccess)
		return false;
	if (lt.h)
		return lt.device == dev;
	if (cublasLtCreate(&lt.h) != CUBLAS_STATUS_SUCCESS) {
		lt.h = NULL;
		return false;
	}
	if (cudaMalloc(&lt.ws, LT_WS) != cudaSuccess) {
		cudaGetLastError();   /* not sticky: clear it */
		cublasLtDestroy(lt.h);
		lt.h = NULL;
		return false;
	}
	lt.device = dev;
	return true;
}

/* D (m,n, column-major, ldd apart, type dt) = op(A) op(B) + beta D, A and
 * B bf16, with the epilogue epi and its vector vec (bias in, or bias
 * gradient out; type vt).  0, or -1 when cuBLASLt cannot (nothing was
 * queued; the caller does it another way). */
static int lt_matmul(cublasLtEpilogue_t epi, cublasOperation_t ta,
		     cublasOperation_t tb, int m, int n, int k, const bf16 *A,
		     int lda, const bf16 *B, int ldb, void *D,
		     cudaDataType dt, int ldd, float beta, const void *vec,
		     cudaDataType vt, cudaStream_t s)
{
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	size_t ws = LT_WS;
	int32_t vtype = (int32_t)vt;
	const float one = 1.0f;
	int found = 0, rc = -1;

	if (!lt_ready() || (uintptr_t)vec % 16)
		goto out;
	if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
					   sizeof(ta)) ||
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
					   sizeof(tb)) ||
	    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE,
					   &epi, sizeof(epi)) ||
	    cublasLtMatmulDescSetAttribute(op,
					   CUBLASLT_MATMUL_DESC_BIAS_POINTER,
					   &vec, sizeof(vec)) ||
	    cublasLtMatmulDescSetAttribute(op,
					   CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
					   &vtype, sizeof(vtype)))
		goto out;
	if (cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF,
				       ta == CUBLAS_OP_N ? m : k,
				       ta == CUBLAS_OP_N ? k : m, lda) ||
	    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF,
				       tb == CUBLAS_OP_N ? k : n,
				       tb == CUBLAS_OP_N ? n : k, ldb) ||
	    cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd))
		goto out;
	if (cublasLtMatmulPreferenceCreate(&pref) ||
	    cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
		    sizeof(ws)))
		goto out;
	if (cublasLtMatmulAlgoGetHeuristic(lt.h, op, la, lb, ld, ld, pref, 1,
					   &res, &found) ||
	    found < 1)
		goto out;
	if (cublasLtMatmul(lt.h, op, &one, A, la, B, lb, &beta, D, ld, D, ld,
			   &res.algo, lt.ws, LT_WS, s))
		goto out;
	rc = 0;
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (ld)
		cublasLtMatrixLayoutDestroy(ld);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	if (op)
		cublasLtMatmulDescDestroy(op);
	if (rc && !lt.off)
		lt.fallbacks++;
	return rc;
}

__global__ static void add_k(float *dst, const float *src, int n)
{
	GK_FOR_EACH(i, (size_t)n)
		dst[i] += src[i];
}

__global__ static void add_bias_k(bf16 *out, const float *bias, int OC,
				  size_t total)
{
	GK_FOR_EACH(i, total)
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

	gk_blas_check(cublasSetStream(h, s), "cublasSetStream");
	gk_blas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one,
				weight, CUDA_R_16BF, C, inp, CUDA_R_16BF, C,
				&zero, out, CUDA_R_16BF, ld,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx (matmul forward)");
}

void gk_matmul_forward(cublasHandle_t h, bf16 *out, const bf16 *inp,
		       const bf16 *weight, const float *bias,
		       const bf16 *bias_bf, int N, int C, int OC,
		       cudaStream_t s)
{
	size_t total = (size_t)N * OC;

	/* the bias added by the GEMM's epilogue (bf16, as the output) */
	if (bias_bf &&
	    !lt_matmul(CUBLASLT_EPILOGUE_BIAS, CUBLAS_OP_T, CUBLAS_OP_N, OC, N,
		       C, weight, C, inp, C, out, CUDA_R_16BF, OC, 0.0f,
		       bias_bf, CUDA_R_16BF, s))
		return;
	gk_matmul_forward_ld(h, out, inp, weight, N, C, OC, OC, s);
	if (bias)
		add_bias_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(out, bias,
			OC, total);
}

/* Block (x, chunk): columns x*GK_THREADS.. of dout, rows of the chunk. */
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

	gk_blas_check(cublasSetStream(h, s), "cublasSetStream");
	gk_blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one,
				weight, CUDA_R_16BF, C, dout, CUDA_R_16BF, ld,
				&zero, dinp, CUDA_R_32F, C,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx (matmul backward, dinp)");
	gk_blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one,
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
	/* dbias += the column sums of dout that the dweight GEMM's epilogue
	 * leaves in work (it writes them; we add) */
	if (dbias) {
		const float one = 1.0f, zero = 0.0f;

		gk_blas_check(cublasSetStream(h, s), "cublasSetStream");
		gk_blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N,
					   OC,
					&one, weight, CUDA_R_16BF, C, dout,
					CUDA_R_16BF, OC, &zero, dinp,
					CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
					CUBLAS_GEMM_DEFAULT),
			   "cublasGemmEx (matmul backward, dinp)");
		if (!lt_matmul(CUBLASLT_EPILOGUE_BGRADB, CUBLAS_OP_N,
			       CUBLAS_OP_T, C, OC, N, inp, C, dout, OC,
			       dweight, CUDA_R_32F, C, 1.0f, work,
			       CUDA_R_32F, s)) {
			add_k<<<gk_grid_for(OC), GK_THREADS, 0, s>>>(dbias,
				work, OC);
			return;
		}
		gk_blas_check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC,
					   N,
					&one, inp, CUDA_R_16BF, C, dout,
					CUDA_R_16BF, OC, &one, dweight,
					CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
					CUBLAS_GEMM_DEFAULT),
			   "cublasGemmEx (matmul backward, dweight)");
	} else {
		gk_matmul_backward_ld(h, dinp, dweight, dout, inp, weight, N,
				      C, OC, OC, s);
	}
	if (dbias) {
		int nk = nchunks_of(N);
		dim3 grid((unsigned)((OC + GK_THREADS - 1) / GK_THREADS),
			  (unsigned)nk);

		bias_partials_k<<<grid, GK_THREADS, 0, s>>>(work, dout, N, OC);
		colsum_reduce_k<<<(OC + GK_THREADS - 1) / GK_THREADS,
				  GK_THREADS, 0,
				  s>>>(dbias, dbias, OC, work, nk, OC);
	}
}

/* ---- GELU ---- */

__global__ static void gelu_forward_k(bf16 *out, const bf16 *inp, size_t n)
{
	GK_FOR_EACH(i, n) {
		float x = __bfloat162float(inp[i]);
		float u = GELU_S * (x + GELU_A * x * x * x);

		out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(u)));
	}
}

__global__ static void gelu_backward_k(bf16 *dinp, const bf16 *inp,
				       const float *dout, size_t n)
{
	GK_FOR_EACH(i, n) {
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
	gelu_forward_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(out, inp, n);
}

void gk_gelu_backward(bf16 *dinp, const bf16 *inp, const float *dout,
		      size_t n, cudaStream_t s)
{
	gelu_backward_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(dinp, inp, dout,
		n);
}

/* ---- residual ---- */

__global__ static void residual_forward_k(float *out, const float *a,
					  const bf16 *b, size_t n)
{
	GK_FOR_EACH(i, n)
		out[i] = a[i] + __bfloat162float(b[i]);
}

void gk_residual_forward(float *out, const float *a, const bf16 *b,
			 size_t n, cudaStream_t s)
{
	residual_forward_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(out, a, b, n);
}

/* ---- softmax + cross-entropy ---- */

/* One block per row. */
__global__ static void crossentropy_forward_k(float *losses, float *lse,
					      const bf16 *logits,
					      const int32_t *targets, int V,
					      int Vp)
{
	__shared__ float sh[GK_THREADS / GK_WARP];
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
	crossentropy_forward_k<<<N, GK_THREADS, 0, s>>>(losses, lse, logits,
						     targets, V, Vp);
}

void gk_crossentropy_backward(bf16 *dlogits, const bf16 *logits,
			      const float *lse, const int32_t *targets,
			      float dloss, int N, int V, int Vp,
			      cudaStream_t s)
{
	crossentropy_backward_k<<<N, GK_THREADS, 0, s>>>(dlogits, logits, lse,
						      targets, dloss, V, Vp);
}

/* ---- sums ---- */

/* The sum of in[lo..hi) into *out, in double: each thread strides over
 * the range in order, then a fixed tree over the threads. */
__device__ static double block_sum_range(const float *in, size_t lo,
					 size_t hi, bool squares)
{
	__shared__ double sh[GK_THREADS];
	double s = 0.0;

	for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		double x = in[i];

		s += squares ? x * x : x;
	}
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int o = GK_THREADS / 2; o > 0; o >>= 1) {
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
	sum_k<<<1, GK_THREADS, 0, s>>>(out, in, (size_t)n);
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
	sumsq_partials_k<<<GK_NORM_BLOCKS, GK_THREADS, 0, s>>>(work, g, n);
	sumsq_final_k<<<1, 1, 0, s>>>(out, work);
}

/* ---- AdamW ---- */

__global__ static void adamw_k(float *p, bf16 *pb, const float *g, float *m,
			       float *v, size_t n, float lr, float b1,
			       float b2, float b1c, float b2c, float eps,
			       float decay, float gscale)
{
	GK_FOR_EACH(i, n) {
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
	adamw_k<<<gk_grid_for(n), GK_THREADS, 0, s>>>(p, pb, g, m, v, n, lr, b1,
		b2, b1c, b2c, eps, decay, gscale);
}
