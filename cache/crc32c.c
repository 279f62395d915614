/* SPDX-License-Identifier: MIT */
/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum the cache keeps for every block and checks before a block is
 * first served.  On x86-64 with SSE4.2 the crc32 instruction does eight
 * bytes at a time; elsewhere a slicing-by-8 table does.  The choice is
 * made once, at the first call.  cache_crc32c(0, "123456789", 9) is
 * 0xE3069283, and cache_crc32c(cache_crc32c(0, a), b) is the CRC of a
 * followed by b.
 */
#include <pthread.h>
#include <string.h>

#include "cache_int.h"

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

uint32_t cache_crc32c_sw(uint32_t crc, const void *buf, size_t len)
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
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc32, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t crc = ~crc32 & 0xffffffffu;

	while (len && ((uintptr_t)p & 7)) {
		crc = __builtin_ia32_crc32qi((uint32_t)crc, *p++);
		len--;
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

bool cache_crc32c_hw_available(void)
{
	static _Atomic int hw = -1;
	int v = atomic_load_explicit(&hw, memory_order_relaxed);

	if (v < 0) {
		v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		atomic_store_explicit(&hw, v, memory_order_relaxed);
	}
	return v;
}

uint32_t cache_crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (cache_crc32c_hw_available())
		return crc32c_hw(crc, buf, len);
	return cache_crc32c_sw(crc, buf, len);
}
#else
bool cache_crc32c_hw_available(void)
{
	return false;
}

uint32_t cache_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return cache_crc32c_sw(crc, buf, len);
}
#endif
