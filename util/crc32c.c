/* SPDX-License-Identifier: MIT */
/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum the cache keeps for every block (and checks before a block is
 * first served), the checkpoint format for every tensor and shard file,
 * and the token-shard format for every shard.  On x86-64 with SSE4.2 the
 * crc32 instruction does eight bytes at a time, in three streams for
 * long buffers; elsewhere a slicing-by-8 table does.  The choice is made
 * once, at the first call.  util_crc32c_combine joins the CRCs of two
 * adjacent pieces without reading them again (zlib's method).
 */
#include <pthread.h>
#include <string.h>

#include <stdatomic.h>

#include "util.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint32_t crc = i;

		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ CRC32C_POLY : crc >> 1;
		crc_table[0][i] = crc;
	}
	for (unsigned i = 0; i < 256; i++)
		for (unsigned t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
					  crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t util_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	pthread_once(&crc_table_once, crc_table_init);
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint32_t lo, hi;

		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		/* The tables assume little-endian words, as on x86 and arm64. */
		lo ^= crc;
		crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		      crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__)
/*
 * Three streams.  One crc32 instruction takes 3 cycles and the next
 * depends on it, so one stream does 8 bytes per 3 cycles; three
 * independent streams over three adjacent stripes of STRIPE bytes keep
 * the unit busy.  The register update is linear: after data A||B from
 * register r, it is shift(f(r, A)) ^ f(0, B), where shift is the effect
 * of STRIPE zero bytes.  shift_table holds that map byte lane by byte
 * lane, built from the images of the 32 unit vectors.
 */
#define STRIPE 4096u

static uint32_t shift_table[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

/* The raw register after `zeros` zero bytes, by the bitwise definition. */
static uint32_t zeros_slow(uint32_t r, size_t zeros)
{
	for (size_t i = 0; i < zeros * 8; i++)
		r = r & 1 ? (r >> 1) ^ CRC32C_POLY : r >> 1;
	return r;
}

static void shift_init(void)
{
	uint32_t unit[32];

	for (unsigned k = 0; k < 32; k++)
		unit[k] = zeros_slow(1u << k, STRIPE);
	for (unsigned lane = 0; lane < 4; lane++)
		for (unsigned b = 0; b < 256; b++) {
			uint32_t v = 0;

			for (unsigned k = 0; k < 8; k++)
				if (b & (1u << k))
					v ^= unit[lane * 8 + k];
			shift_table[lane][b] = v;
		}
}

static uint32_t shift_stripe(uint32_t r)
{
	return shift_table[0][r & 0xff] ^ shift_table[1][(r >> 8) & 0xff] ^
	       shift_table[2][(r >> 16) & 0xff] ^ shift_table[3][r >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc32, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t crc = ~crc32 & 0xffffffffu;

	while (len && ((uintptr_t)p & 7)) {
		crc = __builtin_ia32_crc32qi((uint32_t)crc, *p++);
		len--;
	}
	if (len >= 3 * STRIPE)
		pthread_once(&shift_once, shift_init);
	while (len >= 3 * STRIPE) {
		uint64_t c1 = 0, c2 = 0;

		for (size_t i = 0; i < STRIPE; i += 8) {
			uint64_t v0, v1, v2;

			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + STRIPE + i, 8);
			memcpy(&v2, p + 2 * STRIPE + i, 8);
			crc = __builtin_ia32_crc32di(crc, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		crc = shift_stripe(shift_stripe((uint32_t)crc) ^ (uint32_t)c1) ^
		      (uint32_t)c2;
		p += 3 * STRIPE;
		len -= 3 * STRIPE;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		crc = __builtin_ia32_crc32di(crc, v);
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = __builtin_ia32_crc32qi((uint32_t)crc, *p++);
	return ~(uint32_t)crc;
}

bool util_crc32c_hw_available(void)
{
	static _Atomic int hw = -1;
	int v = atomic_load_explicit(&hw, memory_order_relaxed);

	if (v < 0) {
		v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		atomic_store_explicit(&hw, v, memory_order_relaxed);
	}
	return v;
}

uint32_t util_crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (util_crc32c_hw_available())
		return crc32c_hw(crc, buf, len);
	return util_crc32c_sw(crc, buf, len);
}
#else
bool util_crc32c_hw_available(void)
{
	return false;
}

uint32_t util_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return util_crc32c_sw(crc, buf, len);
}
#endif

/* ---- combining: CRC(A||B) from CRC(A), CRC(B) and len(B) ---- */

/* a * b modulo the CRC polynomial, bit-reflected (zlib's multmodp). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
	}
	return p;
}

/* x^(2^k) modulo the polynomial, k = 0..31; built once. */
static uint32_t x2n_table[32];
static pthread_once_t x2n_once = PTHREAD_ONCE_INIT;

static void x2n_init(void)
{
	uint32_t p = 1u << 30; /* x^1 */

	x2n_table[0] = p;
	for (int n = 1; n < 32; n++)
		x2n_table[n] = p = multmodp(p, p);
}

/* x^(n * 2^k) modulo the polynomial. */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
	uint32_t p = 1u << 31; /* x^0 */

	while (n) {
		if (n & 1)
			p = multmodp(x2n_table[k & 31], p);
		n >>= 1;
		k++;
	}
	return p;
}

uint32_t util_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	pthread_once(&x2n_once, x2n_init);
	return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}
