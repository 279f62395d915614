/* SPDX-License-Identifier: MIT */
/*
 * gpu_attn.cu - fused causal self-attention (gpu_int.h, "fused
 * attention"): the forward and backward passes of softmax(q k^T / sqrt(hs))
 * v over the causal half, in tiles of 64 positions kept in shared memory,
 * without ever writing the (T,T) scores or weights to device memory.
 *
 * The method is the one of the flash-attention papers (Dao et al., 2022
 * and 2023), written from their description:
 *   - Forward.  One block per (64 queries, head, sequence), four warps of
 *     16 queries each.  The block walks the key tiles up to its diagonal;
 *     each warp multiplies its queries by the tile's keys on the tensor
 *     cores (bf16 in, fp32 out), and keeps for each of its rows the
 *     running maximum m and denominator l of an online softmax: when a
 *     tile raises the maximum, what was summed so far is scaled by
 *     2^(m_old - m_new).  The row's output is its sum of p v divided by l
 *     at the end; log2 of the softmax's denominator (m + log2 l, scores
 *     taken in base 2) is kept per row for the backward pass.
 *   - Backward.  D = rowsum(dO * O) per row first (one warp per row).
 *     Then two kernels, so that no sum depends on scheduling (no atomics,
 *     as everywhere in gpu_kernels.cu): one block per key tile computes
 *     dK and dV, walking the query tiles from the diagonal on; one block
 *     per query tile computes dQ, walking the key tiles up to the
 *     diagonal.  Both rebuild the weights P = 2^(S log2e/sqrt(hs) - lse)
 *     from q, k and the kept lse, and dS = P (dP - D) / sqrt(hs) with
 *     dP = dO v^T; dV = P^T dO, dK = dS^T Q, dQ = dS K.  The dQ kernel
 *     recomputes S and dP that the dK/dV kernel also computed: the price
 *     of a fixed order of summation.
 * Precision is that of the unfused path: products of bf16 with fp32
 * accumulation, the softmax in fp32, weights and their gradient rounded
 * to bf16 before they multiply v, dO, q or k.  The kernels read q, k, v
 * straight out of the (N,3C) qkv rows and write the (N,C) output and the
 * (N,3C) gradient in place, so the split and merge kernels of the unfused
 * path are gone too.  Only head size 64 (GPT-2's) is built;
 * gk_flash_supported says when these kernels apply.
 */
#include <math.h>
#include <mma.h>

#include "gpu_int.h"

using namespace nvcuda;

#define HS 64                 /* head size */
#define TILE 64               /* positions per tile (queries or keys) */
#define WARPS 4               /* 16 rows of a tile each */
#define NTHREADS (WARPS * 32)
#define LDB 72                /* bf16 row stride in shared memory */
#define LDF 68                /* fp32 row stride in shared memory */
#define LOG2E 1.4426950408889634f

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>
	frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>
	frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>
	frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

#define TILE_B (TILE * LDB)   /* bf16 elements of a tile */
#define TILE_F (TILE * LDF)   /* floats of a tile */

bool gk_flash_supported(int C, int NH)
{
	return NH > 0 && C % NH == 0 && C / NH == HS && C % 8 == 0;
}

/* tile (TILE rows of HS bf16, rows LDB apart) = rows r0.. of src, whose
 * rows are `stride` elements apart; rows at or past T are zero. */
__device__ static void load_tile(bf16 *tile, const bf16 *src, size_t stride,
				 int r0, int T)
{
	for (int i = threadIdx.x; i < TILE * (HS / 8); i += NTHREADS) {
		int r = i / (HS / 8), c = i % (HS / 8) * 8;
		uint4 v = make_uint4(0, 0, 0, 0);

		if (r0 + r < T)
			v = *(const uint4 *)(src + (size_t)(r0 + r) * stride +
					     c);
		*(uint4 *)(tile + r * LDB + c) = v;
	}
}

/* out (16 x TILE fp32, rows LDF apart) = a (16 x HS, rows LDB apart) times
 * b^T, b being TILE rows of HS (rows LDB apart): a warp's rows of one
 * tile's scores. */
__device__ static void rows_times_tile_t(float *out, const bf16 *a,
					 const bf16 *b)
{
	for (int n = 0; n < TILE / 16; n++) {
		frag_acc acc;

		wmma::fill_fragment(acc, 0.0f);
		for (int k = 0; k < HS / 16; k++) {
			frag_a fa;
			frag_b_col fb;

			wmma::load_matrix_sync(fa, a + k * 16, LDB);
			wmma::load_matrix_sync(fb, b + n * 16 * LDB + k * 16,
					       LDB);
			wmma::mma_sync(acc, fa, fb, acc);
		}
		wmma::store_matrix_sync(out + n * 16, acc, LDF,
					wmma::mem_row_major);
	}
}

/* acc[n] (16 x HS as 4 fragments) += a (16 x TILE bf16, rows LDB apart)
 * times b (TILE x HS bf16, rows LDB apart). */
__device__ static void rows_times_tile(frag_acc acc[HS / 16], const bf16 *a,
				       const bf16 *b)
{
	for (int k = 0; k < TILE / 16; k++) {
		frag_a fa;

		wmma::load_matrix_sync(fa, a + k * 16, LDB);
		for (int n = 0; n < HS / 16; n++) {
			frag_b_row fb;

			wmma::load_matrix_sync(fb, b + k * 16 * LDB + n * 16,
					       LDB);
			wmma::mma_sync(acc[n], fa, fb, acc[n]);
		}
	}
}

/* Writes a warp's 16 x HS fragments to dst rows (stride elements apart,
 * rows at or past T skipped) as bf16, through stage (16 x LDF floats). */
__device__ static void store_rows(bf16 *dst, size_t stride, int row0, int T,
				  frag_acc acc[HS / 16], float *stage)
{
	int lane = threadIdx.x % 32;

	for (int n = 0; n < HS / 16; n++)
		wmma::store_matrix_sync(stage + n * 16, acc[n], LDF,
					wmma::mem_row_major);
	__syncwarp();
	for (int i = lane; i < 16 * HS; i += 32) {
		int r = i / HS, c = i % HS;

		if (row0 + r < T)
			dst[(size_t)(row0 + r) * stride + c] =
				__float2bfloat16(stage[r * LDF + c]);
	}
	__syncwarp();
}

/* A lane's share of a warp's 16 rows: row lane / 2, columns 2j + lane % 2
 * (j < TILE / 2), so that the two lanes of a row and the rows of a warp
 * fall in different banks. */
#define LANE_ROW(lane) ((lane) / 2)
#define LANE_COL(lane, j) (2 * (j) + (lane) % 2)

/* ---- forward ---- */

#define FWD_SMEM ((4 * TILE_B) * sizeof(bf16) + 2 * TILE_F * sizeof(float))

__global__ static void __launch_bounds__(NTHREADS)
flash_forward_k(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH,
		float sl2)
{
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *sQ = (bf16 *)smem, *sK = sQ + TILE_B, *sV = sK + TILE_B;
	bf16 *sP = sV + TILE_B;
	float *sS = (float *)(sP + TILE_B), *sO = sS + TILE_F;
	int qb = gridDim.x - 1 - blockIdx.x;   /* the longest first */
	int h = blockIdx.y, b = blockIdx.z, q0 = qb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int r = warp * 16 + LANE_ROW(lane), tq = q0 + r;
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	float m = -INFINITY, l = 0.0f;

	load_tile(sQ, base, stride, q0, T);
	for (int i = threadIdx.x; i < TILE_F; i += NTHREADS)
		sO[i] = 0.0f;
	for (int kb = 0; kb <= qb; kb++) {
		int k0 = kb * TILE;
		float mx = -INFINITY, mnew, alpha, sum = 0.0f;

		__syncthreads();
		load_tile(sK, base + C, stride, k0, T);
		load_tile(sV, base + 2 * C, stride, k0, T);
		__syncthreads();
		rows_times_tile_t(sS + warp * 16 * LDF, sQ + warp * 16 * LDB,
				  sK);
		__syncwarp();
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j);

			if (k0 + c <= tq)
				mx = fmaxf(mx, sS[r * LDF + c] * sl2);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mnew = fmaxf(m, mx);   /* finite: key k0 <= tq */
		alpha = exp2f(m - mnew);
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j);
			bf16 p = __float2bfloat16(
				k0 + c <= tq ? exp2f(sS[r * LDF + c] * sl2 -
						     mnew)
					     : 0.0f);

			sP[r * LDB + c] = p;
			sum += __bfloat162float(p);
			sO[r * LDF + c] *= alpha;
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * alpha + sum;
		m = mnew;
		__syncwarp();
		{
			frag_acc acc[HS / 16];

			for (int n = 0; n < HS / 16; n++)
				wmma::load_matrix_sync(acc[n],
						       sO + warp * 16 * LDF +
							       n * 16,
						       LDF,
						       wmma::mem_row_major);
			rows_times_tile(acc, sP + warp * 16 * LDB, sV);
			for (int n = 0; n < HS / 16; n++)
				wmma::store_matrix_sync(sO + warp * 16 * LDF +
								n * 16,
							acc[n], LDF,
							wmma::mem_row_major);
		}
		__syncwarp();
	}
	if (tq >= T)
		return;
	for (int j = 0; j < TILE / 2; j++) {
		int c = LANE_COL(lane, j);

		out[((size_t)b * T + tq) * C + (size_t)h * HS + c] =
			__float2bfloat16(sO[r * LDF + c] / l);
	}
	if (lane % 2 == 0)
		lse[((size_t)b * NH + h) * T + tq] = m + log2f(l);
}

void gk_flash_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T,
		      int C, int NH, cudaStream_t s)
{
	dim3 grid((T + TILE - 1) / TILE, NH, B);
	float sl2 = LOG2E / sqrtf((float)HS);

	cudaFuncSetAttribute(flash_forward_k,
			     cudaFuncAttributeMaxDynamicSharedMemorySize,
			     (int)FWD_SMEM);
	flash_forward_k<<<grid, NTHREADS, FWD_SMEM, s>>>(out, lse, qkv, T, C,
							 NH, sl2);
}

/* ---- backward ---- */

/* One warp per (position, head): dob = dout in bf16, and delta = sum
 * over the head's HS of dob * out. */
__global__ static void flash_delta_k(float *delta, bf16 *dob,
				     const float *dout, const bf16 *out, int T,
				     int C, int NH, size_t rows)
{
	size_t w = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	float s = 0.0f;

	if (w >= rows)
		return;
	{
		size_t n = w / NH;   /* position b*T + t */
		int h = (int)(w % NH);
		size_t at = n * C + (size_t)h * HS;

		for (int d = lane; d < HS; d += 32) {
			bf16 g = __float2bfloat16(dout[at + d]);

			/* the rounded dO, as dP = dO v^T sees it */
			s += __bfloat162float(g) * __bfloat162float(out[at + d]);
			dob[at + d] = g;
		}
		for (int o = 16; o; o /= 2)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (!lane) {
			size_t b = n / T, t = n % T;

			delta[(b * NH + h) * T + t] = s;
		}
	}
}

#define DKV_SMEM (6 * TILE_B * sizeof(bf16) + TILE_F * sizeof(float) + \
		  2 * TILE * sizeof(float))

/* One block per (key tile, head, sequence): dK and dV of the tile's
 * keys, warp w owning keys 16w..16w+15 of the tile.  Rows of S^T here
 * are keys and columns queries. */
__global__ static void __launch_bounds__(NTHREADS)
flash_dkv_k(bf16 *dqkv, const bf16 *qkv, const bf16 *dob, const float *lse,
	    const float *delta, int T, int C, int NH, float sl2, float scale)
{
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *sK = (bf16 *)smem, *sV = sK + TILE_B, *sQ = sV + TILE_B;
	bf16 *sdO = sQ + TILE_B, *sP = sdO + TILE_B, *sdS = sP + TILE_B;
	float *sS = (float *)(sdS + TILE_B), *sL = sS + TILE_F;
	float *sD = sL + TILE;
	int nq = (T + TILE - 1) / TILE, kb = blockIdx.x;   /* kb 0 longest */
	int h = blockIdx.y, b = blockIdx.z, k0 = kb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int r = warp * 16 + LANE_ROW(lane), key = k0 + r;
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	const bf16 *obase = dob + (size_t)b * T * C + (size_t)h * HS;
	const float *lrow = lse + ((size_t)b * NH + h) * T;
	const float *drow = delta + ((size_t)b * NH + h) * T;
	float *stage = sS + warp * 16 * LDF;
	frag_acc dk[HS / 16], dv[HS / 16];
	float p[TILE / 2];

	for (int n = 0; n < HS / 16; n++) {
		wmma::fill_fragment(dk[n], 0.0f);
		wmma::fill_fragment(dv[n], 0.0f);
	}
	load_tile(sK, base + C, stride, k0, T);
	load_tile(sV, base + 2 * C, stride, k0, T);
	for (int qb = kb; qb < nq; qb++) {
		int q0 = qb * TILE;

		__syncthreads();
		load_tile(sQ, base, stride, q0, T);
		load_tile(sdO, obase, C, q0, T);
		for (int i = threadIdx.x; i < TILE; i += NTHREADS) {
			sL[i] = q0 + i < T ? lrow[q0 + i] : 0.0f;
			sD[i] = q0 + i < T ? drow[q0 + i] : 0.0f;
		}
		__syncthreads();
		/* S^T = K Q^T, then P^T */
		rows_times_tile_t(stage, sK + warp * 16 * LDB, sQ);
		__syncwarp();
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j), tq = q0 + c;

			p[j] = key <= tq && tq < T
				       ? exp2f(sS[r * LDF + c] * sl2 - sL[c])
				       : 0.0f;
			sP[r * LDB + c] = __float2bfloat16(p[j]);
		}
		__syncwarp();
		/* dP^T = V dO^T, then dS^T */
		rows_times_tile_t(stage, sV + warp * 16 * LDB, sdO);
		__syncwarp();
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j);

			sdS[r * LDB + c] = __float2bfloat16(
				p[j] * (sS[r * LDF + c] - sD[c]) * scale);
		}
		__syncwarp();
		rows_times_tile(dv, sP + warp * 16 * LDB, sdO);
		rows_times_tile(dk, sdS + warp * 16 * LDB, sQ);
	}
	__syncwarp();
	{
		bf16 *dst = dqkv + (size_t)b * T * stride + (size_t)h * HS;

		store_rows(dst + C, stride, k0 + warp * 16, T, dk, stage);
		store_rows(dst + 2 * C, stride, k0 + warp * 16, T, dv, stage);
	}
}

#define DQ_SMEM (5 * TILE_B * sizeof(bf16) + TILE_F * sizeof(float))

/* One block per (query tile, head, sequence): dQ of the tile's queries,
 * warp w owning queries 16w..16w+15. */
__global__ static void __launch_bounds__(NTHREADS)
flash_dq_k(bf16 *dqkv, const bf16 *qkv, const bf16 *dob, const float *lse,
	   const float *delta, int T, int C, int NH, float sl2, float scale)
{
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *sQ = (bf16 *)smem, *sdO = sQ + TILE_B, *sK = sdO + TILE_B;
	bf16 *sV = sK + TILE_B, *sdS = sV + TILE_B;
	float *sS = (float *)(sdS + TILE_B);
	int qb = gridDim.x - 1 - blockIdx.x;   /* the longest first */
	int h = blockIdx.y, b = blockIdx.z, q0 = qb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int r = warp * 16 + LANE_ROW(lane), tq = q0 + r;
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	const bf16 *obase = dob + (size_t)b * T * C + (size_t)h * HS;
	size_t at = ((size_t)b * NH + h) * T + tq;
	float myl = tq < T ? lse[at] : 0.0f, myd = tq < T ? delta[at] : 0.0f;
	float *stage = sS + warp * 16 * LDF;
	frag_acc dq[HS / 16];
	float p[TILE / 2];

	for (int n = 0; n < HS / 16; n++)
		wmma::fill_fragment(dq[n], 0.0f);
	load_tile(sQ, base, stride, q0, T);
	load_tile(sdO, obase, C, q0, T);
	for (int kb = 0; kb <= qb; kb++) {
		int k0 = kb * TILE;

		__syncthreads();
		load_tile(sK, base + C, stride, k0, T);
		load_tile(sV, base + 2 * C, stride, k0, T);
		__syncthreads();
		rows_times_tile_t(stage, sQ + warp * 16 * LDB, sK);
		__syncwarp();
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j);

			p[j] = k0 + c <= tq && tq < T
				       ? exp2f(sS[r * LDF + c] * sl2 - myl)
				       : 0.0f;
		}
		__syncwarp();
		rows_times_tile_t(stage, sdO + warp * 16 * LDB, sV);
		__syncwarp();
		#pragma unroll
		for (int j = 0; j < TILE / 2; j++) {
			int c = LANE_COL(lane, j);

			sdS[r * LDB + c] = __float2bfloat16(
				p[j] * (sS[r * LDF + c] - myd) * scale);
		}
		__syncwarp();
		rows_times_tile(dq, sdS + warp * 16 * LDB, sK);
	}
	__syncwarp();
	store_rows(dqkv + (size_t)b * T * stride + (size_t)h * HS, stride,
		   q0 + warp * 16, T, dq, stage);
}

void gk_flash_backward(bf16 *dqkv, const float *dout, const bf16 *qkv,
		       const bf16 *out, const float *lse, int B, int T, int C,
		       int NH, bf16 *dob, float *delta, cudaStream_t s)
{
	size_t rows = (size_t)B * T * NH;
	int per = 256 / 32;
	dim3 grid((T + TILE - 1) / TILE, NH, B);
	float scale = 1.0f / sqrtf((float)HS), sl2 = LOG2E * scale;

	flash_delta_k<<<(unsigned)((rows + per - 1) / per), 256, 0, s>>>(
		delta, dob, dout, out, T, C, NH, rows);
	cudaFuncSetAttribute(flash_dkv_k,
			     cudaFuncAttributeMaxDynamicSharedMemorySize,
			     (int)DKV_SMEM);
	flash_dkv_k<<<grid, NTHREADS, DKV_SMEM, s>>>(dqkv, qkv, dob, lse,
						     delta, T, C, NH, sl2,
						     scale);
	cudaFuncSetAttribute(flash_dq_k,
			     cudaFuncAttributeMaxDynamicSharedMemorySize,
			     (int)DQ_SMEM);
	flash_dq_k<<<grid, NTHREADS, DQ_SMEM, s>>>(dqkv, qkv, dob, lse, delta,
						   T, C, NH, sl2, scale);
}
