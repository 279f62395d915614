/* SPDX-License-Identifier: MIT */
/*
 * gpu_attn.cu - fused causal self-attention (gpu_int.h, "fused
 * attention"): the forward and backward passes of softmax(q k^T / sqrt(hs))
 * v over the causal half, in tiles of 64 positions, without ever
 * writing the (T,T) scores or weights to device memory: tiles of q, k, v
 * and dO in shared memory, scores, weights and sums in registers.
 *
 * The method is the one of the flash-attention papers (Dao et al., 2022
 * and 2023), written from their description:
 *   - Forward.  One block per (64 queries, head, sequence), four warps of
 *     16 queries each.  The block walks the key tiles up to its diagonal;
 *     each warp multiplies its queries by the tile's keys on the tensor
 *     cores (bf16 in, fp32 out; see "tensor cores" below), and keeps for
 *     each of its rows the
 *     running maximum m and denominator l of an online softmax: when a
 *     tile raises the maximum, what was summed so far is scaled by
 *     2^(m_old - m_new).  The row's output is its sum of p v divided by l
 *     at the end; log2 of the softmax's denominator (m + log2 l, scores
 *     taken in base 2) is kept per row for the backward pass.
 *   - Backward.  D = rowsum(dO * O) per row first (one warp per row).
 *     Then two kernels, so that no sum depends on scheduling (no atomics,
 *     as everywhere on the GPU path): one block per key tile computes
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

#include "gpu_int.h"

#define HS 64                 /* head size */
#define TILE 64               /* positions per tile (queries or keys) */
#define WARPS 4               /* 16 rows of a tile each */
#define NTHREADS (WARPS * 32)
#define LDB 72                /* bf16 row stride in shared memory */
#define LOG2E 1.4426950408889634f

#define TILE_B (TILE * LDB)   /* bf16 elements of a tile */

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

/* ---- tensor cores: mma.sync, fragments kept in registers ----
 *
 * The kernels use the tensor-core instruction mma.sync.m16n8k16 (bf16
 * in, fp32 accumulate), whose register layout
 * the PTX ISA states ("Matrix Fragments for mma.m16n8k16"): with
 * g = lane / 4 and t = lane % 4, a lane holds
 *   A (16x16): {A[g][2t..2t+1]}, {A[g+8][2t..]}, {A[g][2t+8..]},
 *              {A[g+8][2t+8..]}, two bf16 in each 32-bit register;
 *   B (16x8):  {B[2t..2t+1][g]}, {B[2t+8..2t+9][g]};
 *   C (16x8):  C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1] (fp32).
 * So a row's scores stay in the registers of the 4 lanes of its quad (the
 * softmax's row sums are two shuffles), and the accumulators of two
 * neighbouring 8-column tiles are, rounded to bf16, the A fragment of the
 * next product: P and dS never leave the registers.  B operands come from
 * shared memory, stored so that B(k, n) is M[n][k] with k contiguous
 * (K, V, Q, dO as they are, or transposed by load_tile_t when the
 * product runs over positions).  A first version through WMMA, whose
 * fragment layout is opaque, had to keep scores and sums in shared memory
 * and ran 1.17x slower over a whole GPT-2 step (docs/gpu.md). */

__device__ static inline void mma16816(float c[4], const uint32_t a[4],
				       uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		       "r"(b1));
}

__device__ static inline uint32_t ld32(const bf16 *p)
{
	return *(const uint32_t *)p;
}

__device__ static inline uint32_t pack2(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);

	return *(uint32_t *)&v;
}

__device__ static inline float round_bf16(float x)
{
	return __bfloat162float(__float2bfloat16(x));
}

/* A fragments of 16 rows (rows LDB apart from m) over HS columns: one per
 * 16 columns. */
__device__ static void frags_a(uint32_t a[HS / 16][4], const bf16 *m, int g,
			       int t)
{
	for (int k = 0; k < HS / 16; k++) {
		a[k][0] = ld32(m + g * LDB + k * 16 + 2 * t);
		a[k][1] = ld32(m + (g + 8) * LDB + k * 16 + 2 * t);
		a[k][2] = ld32(m + g * LDB + k * 16 + 2 * t + 8);
		a[k][3] = ld32(m + (g + 8) * LDB + k * 16 + 2 * t + 8);
	}
}

/* c[n] (16 x 8 each, n < 8: 64 columns) = a (16 x 64, as 4 fragments)
 * times B, B(k, n) = m[n][k]: rows of m LDB apart. */
__device__ static void mma_rows(float c[8][4], const uint32_t a[4][4],
				const bf16 *m, int g, int t)
{
	for (int n = 0; n < 8; n++) {
		c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
		for (int k = 0; k < 4; k++)
			mma16816(c[n], a[k],
				 ld32(m + (n * 8 + g) * LDB + k * 16 + 2 * t),
				 ld32(m + (n * 8 + g) * LDB + k * 16 + 2 * t +
				      8));
	}
}

/* acc[n] += p (16 x 64 as the accumulators p[8][4], rounded to bf16)
 * times B, B(k, n) = m[n][k]. */
__device__ static void mma_acc(float acc[8][4], const float p[8][4],
			       const bf16 *m, int g, int t)
{
	for (int k = 0; k < 4; k++) {
		uint32_t a[4] = { pack2(p[2 * k][0], p[2 * k][1]),
				  pack2(p[2 * k][2], p[2 * k][3]),
				  pack2(p[2 * k + 1][0], p[2 * k + 1][1]),
				  pack2(p[2 * k + 1][2], p[2 * k + 1][3]) };

		for (int n = 0; n < 8; n++)
			mma16816(acc[n], a,
				 ld32(m + (n * 8 + g) * LDB + k * 16 + 2 * t),
				 ld32(m + (n * 8 + g) * LDB + k * 16 + 2 * t +
				      8));
	}
}

/* tile[c][r] = src row r0 + r, column c (a tile transposed: TILE
 * positions by HS columns in, HS rows of TILE positions out); rows at or
 * past T are zero.  A warp takes one block of 8 columns of 32 row pairs,
 * so that its 32-bit stores fall in 32 different banks. */
__device__ static void load_tile_t(bf16 *tile, const bf16 *src,
				   size_t stride, int r0, int T)
{
	for (int i = threadIdx.x; i < (TILE / 2) * (HS / 8); i += NTHREADS) {
		int rp = i % (TILE / 2), c = i / (TILE / 2) * 8, r = 2 * rp;
		uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
		const bf16 *e0 = (const bf16 *)&v0, *e1 = (const bf16 *)&v1;

		if (r0 + r < T)
			v0 = *(const uint4 *)(src + (size_t)(r0 + r) * stride +
					      c);
		if (r0 + r + 1 < T)
			v1 = *(const uint4 *)(src + (size_t)(r0 + r + 1) *
							    stride + c);
		for (int j = 0; j < 8; j++) {
			__nv_bfloat162 w;

			w.x = e0[j];
			w.y = e1[j];
			*(__nv_bfloat162 *)(tile + (c + j) * LDB + r) = w;
		}
	}
}

/* Writes a warp's 16 x HS accumulators, scaled per row (s0 for rows
 * g, s1 for g+8), as bf16 to rows row0 + g and row0 + g + 8 of dst (rows
 * stride apart; rows at or past T skipped). */
__device__ static void store_acc(bf16 *dst, size_t stride, int row0, int T,
				 const float acc[8][4], float s0, float s1,
				 int g, int t)
{
	for (int n = 0; n < 8; n++) {
		int c = n * 8 + 2 * t;

		if (row0 + g < T)
			*(uint32_t *)(dst + (size_t)(row0 + g) * stride + c) =
				pack2(acc[n][0] * s0, acc[n][1] * s0);
		if (row0 + g + 8 < T)
			*(uint32_t *)(dst + (size_t)(row0 + g + 8) * stride +
				      c) = pack2(acc[n][2] * s1,
						 acc[n][3] * s1);
	}
}

__device__ static inline float quad_max(float x)
{
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
	return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ static inline float quad_sum(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__global__ static void __launch_bounds__(NTHREADS)
flash_forward_k(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH,
	      float sl2)
{
	__shared__ __align__(16) bf16 sK[TILE_B], sVt[TILE_B];
	int qb = gridDim.x - 1 - blockIdx.x;   /* the longest first */
	int h = blockIdx.y, b = blockIdx.z, q0 = qb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int g = lane / 4, t = lane % 4;
	int tq[2] = { q0 + warp * 16 + g, q0 + warp * 16 + g + 8 };
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	uint32_t qa[4][4];
	float o[8][4], s[8][4], m[2] = { -INFINITY, -INFINITY };
	float l[2] = { 0.0f, 0.0f };

	load_tile(sK, base, stride, q0, T);   /* q, for its fragments */
	__syncthreads();
	frags_a(qa, sK + warp * 16 * LDB, g, t);
	for (int n = 0; n < 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	for (int kb = 0; kb <= qb; kb++) {
		int k0 = kb * TILE;
		float mx[2] = { -INFINITY, -INFINITY }, sum[2] = { 0, 0 };
		float alpha[2];

		__syncthreads();
		load_tile(sK, base + C, stride, k0, T);
		load_tile_t(sVt, base + 2 * C, stride, k0, T);
		__syncthreads();
		mma_rows(s, qa, sK, g, t);
		for (int n = 0; n < 8; n++)
			for (int i = 0; i < 4; i++) {
				int key = k0 + n * 8 + 2 * t + (i & 1);
				float v = key <= tq[i / 2] ? s[n][i] * sl2
							   : -INFINITY;

				s[n][i] = v;
				mx[i / 2] = fmaxf(mx[i / 2], v);
			}
		for (int r = 0; r < 2; r++) {
			float mn = fmaxf(m[r], quad_max(mx[r]));

			alpha[r] = exp2f(m[r] - mn);   /* mn finite: key k0 */
			m[r] = mn;
		}
		for (int n = 0; n < 8; n++)
			for (int i = 0; i < 4; i++) {
				float p = round_bf16(exp2f(s[n][i] -
							   m[i / 2]));

				s[n][i] = p;
				sum[i / 2] += p;
				o[n][i] *= alpha[i / 2];
			}
		for (int r = 0; r < 2; r++)
			l[r] = l[r] * alpha[r] + quad_sum(sum[r]);
		mma_acc(o, s, sVt, g, t);
	}
	store_acc(out + (size_t)b * T * C + (size_t)h * HS, C,
		  q0 + warp * 16, T, o, 1.0f / l[0], 1.0f / l[1], g, t);
	for (int r = 0; r < 2; r++)
		if (t == 0 && tq[r] < T)
			lse[((size_t)b * NH + h) * T + tq[r]] =
				m[r] + log2f(l[r]);
}

/* dK and dV of a key tile (warp w: keys 16w..16w+15), walking the query
 * tiles from the diagonal on.  Rows of the accumulators are keys. */
__global__ static void __launch_bounds__(NTHREADS)
flash_dkv_k(bf16 *dqkv, const bf16 *qkv, const bf16 *dob, const float *lse,
	  const float *delta, int T, int C, int NH, float sl2, float scale)
{
	__shared__ __align__(16) bf16 sQ[TILE_B], sQt[TILE_B], sdO[TILE_B];
	__shared__ __align__(16) bf16 sdOt[TILE_B];
	__shared__ float sL[TILE], sD[TILE];
	int nq = (T + TILE - 1) / TILE, kb = blockIdx.x;   /* kb 0 longest */
	int h = blockIdx.y, b = blockIdx.z, k0 = kb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int g = lane / 4, t = lane % 4;
	int key[2] = { k0 + warp * 16 + g, k0 + warp * 16 + g + 8 };
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	const bf16 *obase = dob + (size_t)b * T * C + (size_t)h * HS;
	const float *lrow = lse + ((size_t)b * NH + h) * T;
	const float *drow = delta + ((size_t)b * NH + h) * T;
	uint32_t ka[4][4], va[4][4];
	float dk[8][4], dv[8][4], s[8][4], dp[8][4];

	load_tile(sQt, base + C, stride, k0, T);     /* k, then v, for */
	load_tile(sdOt, base + 2 * C, stride, k0, T);  /* their fragments */
	__syncthreads();
	frags_a(ka, sQt + warp * 16 * LDB, g, t);
	frags_a(va, sdOt + warp * 16 * LDB, g, t);
	for (int n = 0; n < 8; n++)
		for (int i = 0; i < 4; i++)
			dk[n][i] = dv[n][i] = 0.0f;
	for (int qb = kb; qb < nq; qb++) {
		int q0 = qb * TILE;

		__syncthreads();
		load_tile(sQ, base, stride, q0, T);
		load_tile_t(sQt, base, stride, q0, T);
		load_tile(sdO, obase, C, q0, T);
		load_tile_t(sdOt, obase, C, q0, T);
		for (int i = threadIdx.x; i < TILE; i += NTHREADS) {
			sL[i] = q0 + i < T ? lrow[q0 + i] : 0.0f;
			sD[i] = q0 + i < T ? drow[q0 + i] : 0.0f;
		}
		__syncthreads();
		mma_rows(s, ka, sQ, g, t);     /* S^T = K Q^T */
		mma_rows(dp, va, sdO, g, t);   /* dP^T = V dO^T */
		for (int n = 0; n < 8; n++)
			for (int i = 0; i < 4; i++) {
				int c = n * 8 + 2 * t + (i & 1), tq = q0 + c;
				float p = key[i / 2] <= tq && tq < T
						  ? exp2f(s[n][i] * sl2 - sL[c])
						  : 0.0f;

				dp[n][i] = p * (dp[n][i] - sD[c]) * scale;
				s[n][i] = p;
			}
		mma_acc(dv, s, sdOt, g, t);    /* dV += P^T dO */
		mma_acc(dk, dp, sQt, g, t);    /* dK += dS^T Q */
	}
	{
		bf16 *dst = dqkv + (size_t)b * T * stride + (size_t)h * HS;

		store_acc(dst + C, stride, k0 + warp * 16, T, dk, 1.0f, 1.0f,
			  g, t);
		store_acc(dst + 2 * C, stride, k0 + warp * 16, T, dv, 1.0f,
			  1.0f, g, t);
	}
}

/* dQ of a query tile (warp w: queries 16w..16w+15), walking the key
 * tiles up to the diagonal. */
__global__ static void __launch_bounds__(NTHREADS)
flash_dq_k(bf16 *dqkv, const bf16 *qkv, const bf16 *dob, const float *lse,
	 const float *delta, int T, int C, int NH, float sl2, float scale)
{
	__shared__ __align__(16) bf16 sK[TILE_B], sKt[TILE_B], sV[TILE_B];
	int qb = gridDim.x - 1 - blockIdx.x;   /* the longest first */
	int h = blockIdx.y, b = blockIdx.z, q0 = qb * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int g = lane / 4, t = lane % 4;
	int tq[2] = { q0 + warp * 16 + g, q0 + warp * 16 + g + 8 };
	size_t stride = 3 * (size_t)C;
	const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
	const bf16 *obase = dob + (size_t)b * T * C + (size_t)h * HS;
	size_t at = ((size_t)b * NH + h) * T;
	float myl[2], myd[2];
	uint32_t qa[4][4], oa[4][4];
	float dq[8][4], s[8][4], dp[8][4];

	for (int r = 0; r < 2; r++) {
		myl[r] = tq[r] < T ? lse[at + tq[r]] : 0.0f;
		myd[r] = tq[r] < T ? delta[at + tq[r]] : 0.0f;
	}
	load_tile(sK, base, stride, q0, T);   /* q and dO, for their */
	load_tile(sV, obase, C, q0, T);       /* fragments */
	__syncthreads();
	frags_a(qa, sK + warp * 16 * LDB, g, t);
	frags_a(oa, sV + warp * 16 * LDB, g, t);
	for (int n = 0; n < 8; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
	for (int kb = 0; kb <= qb; kb++) {
		int k0 = kb * TILE;

		__syncthreads();
		load_tile(sK, base + C, stride, k0, T);
		load_tile_t(sKt, base + C, stride, k0, T);
		load_tile(sV, base + 2 * C, stride, k0, T);
		__syncthreads();
		mma_rows(s, qa, sK, g, t);     /* S = Q K^T */
		mma_rows(dp, oa, sV, g, t);    /* dP = dO V^T */
		for (int n = 0; n < 8; n++)
			for (int i = 0; i < 4; i++) {
				int key = k0 + n * 8 + 2 * t + (i & 1);
				int r = i / 2;
				float p = key <= tq[r] && tq[r] < T
						  ? exp2f(s[n][i] * sl2 -
							  myl[r])
						  : 0.0f;

				s[n][i] = p * (dp[n][i] - myd[r]) * scale;
			}
		mma_acc(dq, s, sKt, g, t);     /* dQ += dS K */
	}
	store_acc(dqkv + (size_t)b * T * stride + (size_t)h * HS, stride,
		  q0 + warp * 16, T, dq, 1.0f, 1.0f, g, t);
}

void gk_flash_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T,
		      int C, int NH, cudaStream_t s)
{
	dim3 grid((T + TILE - 1) / TILE, NH, B);
	float sl2 = LOG2E / sqrtf((float)HS);

	flash_forward_k<<<grid, NTHREADS, 0, s>>>(out, lse, qkv, T, C, NH,
						  sl2);
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
			s += __bfloat162float(g) *
			     __bfloat162float(out[at + d]);
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
	flash_dkv_k<<<grid, NTHREADS, 0, s>>>(dqkv, qkv, dob, lse, delta, T,
					      C, NH, sl2, scale);
	flash_dq_k<<<grid, NTHREADS, 0, s>>>(dqkv, qkv, dob, lse, delta, T, C,
					     NH, sl2, scale);
}

/* ---- the unfused path (gk_attention_*): cuBLAS and the (T,T) matrices
 * ----
 * For head sizes the fused kernels do not build, and for a ratio
 * (FMTRAIN_ATTENTION=unfused). */

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

	GK_FOR_EACH(i, total) {
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

	GK_FOR_EACH(i, total) {
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

	GK_FOR_EACH(i, total)
		out[heads_dst(i, T, C, NH, hs)] = y[i];
}

__global__ static void split_heads_k(bf16 *dy, const float *dout, int T,
				     int C, int NH, size_t total)
{
	int hs = C / NH;

	GK_FOR_EACH(i, total)
		dy[i] = __float2bfloat16(dout[heads_dst(i, T, C, NH, hs)]);
}

/* One warp per row r of (B,NH,T,T), position t = r % T: att = softmax of
 * scores * scale over t2 <= t, 0 beyond. */
__global__ static void attn_softmax_k(bf16 *att, const float *scores,
				      float scale, int T, size_t rows)
{
	size_t r = (size_t)blockIdx.x * (blockDim.x / GK_WARP) +
		   threadIdx.x / GK_WARP;
	int lane = threadIdx.x % GK_WARP, t;
	const float *x;
	float maxv = -INFINITY, sum = 0.0f, inv;

	if (r >= rows)
		return;
	t = (int)(r % T);
	x = scores + r * T;
	for (int t2 = lane; t2 <= t; t2 += GK_WARP)
		maxv = fmaxf(maxv, x[t2] * scale);
	maxv = gk_warp_max(maxv);
	for (int t2 = lane; t2 <= t; t2 += GK_WARP)
		sum += expf(x[t2] * scale - maxv);
	inv = 1.0f / gk_warp_sum(sum);
	for (int t2 = lane; t2 < T; t2 += GK_WARP)
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
	size_t r = (size_t)blockIdx.x * (blockDim.x / GK_WARP) +
		   threadIdx.x / GK_WARP;
	int lane = threadIdx.x % GK_WARP, t;
	float s = 0.0f;

	if (r >= rows)
		return;
	t = (int)(r % T);
	for (int t2 = lane; t2 <= t; t2 += GK_WARP)
		s += __bfloat162float(att[r * T + t2]) * datt[r * T + t2];
	s = gk_warp_sum(s);
	for (int t2 = lane; t2 < T; t2 += GK_WARP) {
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

	gk_blas_check(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, A,
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
	int hs = C / NH, count = B * NH, rows_per = GK_THREADS / GK_WARP;
	size_t total = (size_t)B * T * C, rows = (size_t)B * NH * T;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	gk_blas_check(cublasSetStream(h, s), "cublasSetStream");
	split_qkv_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(w->q, w->k, w->v,
		qkv, T, C, NH, total);
	batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, w->k, hs, th, w->q, hs,
		th, w->scores, CUDA_R_32F, T, tt, count,
		"cublasGemmStridedBatchedEx (attention scores)");
	attn_softmax_k<<<(unsigned)((rows + rows_per - 1) / rows_per),
			 GK_THREADS,
			 0, s>>>(att, w->scores, scale, T, rows);
	batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, w->v, hs, th, att, T,
		tt, w->y, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention values)");
	merge_heads_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(out, w->y, T, C,
		NH, total);
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
	int hs = C / NH, count = B * NH, rows_per = GK_THREADS / GK_WARP;
	size_t total = (size_t)B * T * C, rows = (size_t)B * NH * T;
	long long th = (long long)T * hs, tt = (long long)T * T;
	float scale = 1.0f / sqrtf((float)hs);

	gk_blas_check(cublasSetStream(h, s), "cublasSetStream");
	split_qkv_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(w->q, w->k, w->v,
		qkv, T, C, NH, total);
	split_heads_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(w->dy, dout, T,
		C, NH, total);
	batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, w->v, hs, th, w->dy, hs,
		th, w->scores, CUDA_R_32F, T, tt, count,
		"cublasGemmStridedBatchedEx (attention, datt)");
	batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, w->dy, hs, th, att, T,
		tt, w->dv, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dv)");
	attn_softmax_backward_k<<<(unsigned)((rows + rows_per - 1) / rows_per),
				  GK_THREADS, 0, s>>>(w->dscores, w->scores,
						      att, scale, T, rows);
	batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, w->k, hs, th,
		w->dscores, T, tt, w->dq, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dq)");
	batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, w->q, hs, th,
		w->dscores, T, tt, w->dk, CUDA_R_16BF, hs, th, count,
		"cublasGemmStridedBatchedEx (attention, dk)");
	merge_qkv_k<<<gk_grid_for(total), GK_THREADS, 0, s>>>(dqkv, w->dq,
		w->dk, w->dv, T, C, NH, total);
}
