/* SPDX-License-Identifier: MIT */
/*
 * tcp_int.h - what peer/tcp_server.c and peer/tcp_client.c share
 * (peer/tcp.c): bounded waits and transfers, frames, the handshake.
 * Not part of peer.h: nothing outside peer/ includes it.
 */
#ifndef FMFS_PEER_TCP_INT_H
#define FMFS_PEER_TCP_INT_H

#include <stdint.h>

#include "peer/peer.h"

/* Waits for ev on fd until deadline_ms (util_now_ms; 0: no deadline):
 * 0 (ready, or an error the next call tells), -ETIMEDOUT, -errno. */
int peer_tcp_wait_fd(int fd, short ev, uint64_t deadline_ms);
/* A frame: header, body and an optional tail (the bytes of a DATA),
 * sent by deadline_ms; with quiet_ms, only a reader that takes no
 * bytes for quiet_ms makes it fail, however long it takes. */
int peer_tcp_send_frame_q(int fd, enum peer_type t, const void *body,
			  size_t len, const void *tail, size_t tail_len,
			  uint64_t deadline_ms, unsigned quiet_ms);
int peer_tcp_send_frame(int fd, enum peer_type t, const void *body,
			size_t len, const void *tail, size_t tail_len,
			uint64_t deadline_ms);
/* Reads one frame of type want into buf (cap bytes); *len its body.
 * A BYE instead is -ECONNRESET, another type or a body over cap
 * -EPROTO. */
int peer_tcp_recv_frame(int fd, enum peer_type want, unsigned char *buf,
			size_t cap, uint32_t *len, uint64_t deadline_ms);
/* O_NONBLOCK and TCP_NODELAY. */
void peer_tcp_nonblock(int fd);
/* HELLO both ways, then AUTH (the client's first, checked by the server
 * before it sends its own); *other receives the other side's HELLO. */
int peer_tcp_handshake(int fd, enum peer_role role, const char *self_id,
		       const unsigned char *secret, size_t secret_len,
		       struct peer_hello *other, uint64_t deadline_ms);

#endif
