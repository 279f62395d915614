/* SPDX-License-Identifier: MIT */
/*
 * peer_frames.h - the cache group's frames on a plain blocking socket,
 * for the test programs that play a member by hand: tests/peer-fault.c
 * (a member that answers wrongly, for 58-mount-group-faults.sh) and the
 * fake members of tests/unit/test_peer.c.  A whole read or write, one
 * frame (header, then body) sent or received, and the CRC32C table of a
 * DATA body's blocks.  The bodies are encoded and decoded by peer/'s own
 * functions (peer/peer.h, docs/cluster-cache.md "Protocol (TCP)"); this
 * only moves them.
 *
 * Everything here is static inline: a program that uses part of it
 * compiles without warnings.  It needs util/ (util_crc32c) linked, as
 * peer/ does.
 */
#ifndef FMFS_TESTS_LIB_PEER_FRAMES_H
#define FMFS_TESTS_LIB_PEER_FRAMES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "peer/peer.h"
#include "util/util.h"

/* Reads exactly n bytes into buf: 0, or -1 on an error or end of file. */
static inline int fr_read_n(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Writes all n bytes of buf: 0, or -1 on an error. */
static inline int fr_write_n(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Sends one frame of type t whose body is b (n bytes): 0, or -1. */
static inline int fr_send(int fd, enum peer_type t, const void *b, size_t n)
{
	unsigned char h[PEER_HDR_BYTES];

	peer_hdr_encode(h, t, (uint32_t)n);
	return fr_write_n(fd, h, sizeof(h)) || (n && fr_write_n(fd, b, n)) ?
	       -1 : 0;
}

/* Receives the next frame: its type in *t and its body into b (cap
 * bytes).  The body's length, or -1 on an error, end of file, a header
 * peer_hdr_decode refuses or a body longer than cap. */
static inline long fr_recv(int fd, enum peer_type *t, unsigned char *b,
			   size_t cap)
{
	unsigned char h[PEER_HDR_BYTES];
	uint32_t n;

	if (fr_read_n(fd, h, sizeof(h)) || peer_hdr_decode(h, t, &n) ||
	    n > cap || fr_read_n(fd, b, n))
		return -1;
	return n;
}

/* The CRC32C of each block_bytes block of bytes (len bytes; the last
 * block may be shorter) into crcs, as a DATA body's table has them.
 * Returns the number of blocks. */
static inline uint32_t fr_block_crcs(const unsigned char *bytes, uint32_t len,
				     uint32_t block_bytes, uint32_t *crcs)
{
	uint32_t nb = (len + block_bytes - 1) / block_bytes;

	for (uint32_t b = 0; b < nb; b++)
		crcs[b] = util_crc32c(0, bytes + (size_t)b * block_bytes,
				      b + 1 < nb ? block_bytes :
				      len - b * block_bytes);
	return nb;
}

#endif /* FMFS_TESTS_LIB_PEER_FRAMES_H */
