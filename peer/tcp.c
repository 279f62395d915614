/* SPDX-License-Identifier: MIT */
/*
 * tcp.c - what both ends of the cache group's TCP transport use: waits
 * and transfers bounded by a deadline (or by silence), frames, and the
 * HELLO/AUTH handshake.  The server is tcp_server.c, the client
 * tcp_client.c (peer.h, "the TCP transport").
 *
 * Sockets are non-blocking; each transfer is poll + recv/send against a
 * deadline, so no peer can hold a thread longer than its bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "peer/peer.h"
#include "peer/tcp_int.h"
#include "util/util.h"

/* ---- bounded transfers ---- */

int peer_tcp_wait_fd(int fd, short ev, uint64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = ev };
		uint64_t now = util_now_ms();
		int rc;

		if (deadline_ms && now >= deadline_ms)
			return -ETIMEDOUT;
		rc = poll(&p, 1, deadline_ms ? (int)(deadline_ms - now) : -1);
		if (rc > 0)
			return 0;   /* ready, or an error the call will tell */
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

/* Sends the iovecs by deadline_ms; with quiet_ms, every write that
 * moves bytes puts the deadline quiet_ms after it. */
static int send_iov(int fd, struct iovec *iov, int niov,
		    uint64_t deadline_ms, unsigned quiet_ms)
{
	while (niov) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);

		if (w < 0) {
			int rc;

			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			rc = peer_tcp_wait_fd(fd, POLLOUT, deadline_ms);
			if (rc)
				return rc;
			continue;
		}
		if (quiet_ms && w > 0)
			deadline_ms = util_now_ms() + quiet_ms;
		while (niov && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			niov--;
		}
		if (niov) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* A frame sent by deadline_ms; with quiet_ms, only a reader silent for
 * quiet_ms (taking no bytes) makes it fail, however long it takes. */
int peer_tcp_send_frame_q(int fd, enum peer_type t, const void *body,
			size_t len, const void *tail, size_t tail_len,
			uint64_t deadline_ms, unsigned quiet_ms)
{
	unsigned char hdr[PEER_HDR_BYTES];
	struct iovec iov[3] = {
		{ hdr, sizeof(hdr) },
		{ (void *)(uintptr_t)body, len },
		{ (void *)(uintptr_t)tail, tail_len },
	};

	peer_hdr_encode(hdr, t, (uint32_t)(len + tail_len));
	return send_iov(fd, iov, 3, deadline_ms, quiet_ms);
}

int peer_tcp_send_frame(int fd, enum peer_type t, const void *body,
		      size_t len, const void *tail, size_t tail_len,
		      uint64_t deadline_ms)
{
	return peer_tcp_send_frame_q(fd, t, body, len, tail, tail_len, deadline_ms, 0);
}

/* Reads one frame of type want into buf (cap bytes); *len its body. */
int peer_tcp_recv_frame(int fd, enum peer_type want, unsigned char *buf,
		      size_t cap, uint32_t *len, uint64_t deadline_ms)
{
	unsigned char hdr[PEER_HDR_BYTES];
	enum peer_type t;
	int rc = util_sock_io(fd, hdr, sizeof(hdr), false, deadline_ms);

	if (rc)
		return rc;
	rc = peer_hdr_decode(hdr, &t, len);
	if (rc)
		return rc;
	if (t != want || *len > cap)
		return t == PEER_BYE ? -ECONNRESET : -EPROTO;
	return util_sock_io(fd, buf, *len, false, deadline_ms);
}

void peer_tcp_nonblock(int fd)
{
	int one = 1;

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int peer_split_id(const char *id, char *host, size_t host_len,
		  char port[8])
{
	const char *colon = strrchr(id, ':');
	size_t hl;

	if (!colon || strlen(colon + 1) >= 8)
		return -EINVAL;
	if (id[0] == '[') {
		if (colon == id || colon[-1] != ']')
			return -EINVAL;
		hl = (size_t)(colon - id) - 2;
		id++;
	} else {
		hl = (size_t)(colon - id);
	}
	if (!hl || hl >= host_len)
		return -EINVAL;
	memcpy(host, id, hl);
	host[hl] = '\0';
	snprintf(port, 8, "%s", colon + 1);
	return 0;
}

/* HELLO both ways, then AUTH: the client's first, checked by the server
 * before it sends its own (it computes nothing with the secret for a
 * client that has not proved itself).  *other receives the other side's
 * HELLO; a HELLO carrying our own nonce is a reflection. */
int peer_tcp_handshake(int fd, enum peer_role role, const char *self_id,
		     const unsigned char *secret, size_t secret_len,
		     struct peer_hello *other, uint64_t deadline_ms)
{
	unsigned char buf[2 + PEER_ID_MAX + 64], mac[PEER_MAC_BYTES];
	struct peer_hello own = { .version = PEER_VERSION };
	enum peer_role them = role == PEER_ROLE_CLIENT ? PEER_ROLE_SERVER :
			      PEER_ROLE_CLIENT;
	uint32_t len;
	int n, rc;

	snprintf(own.id, sizeof(own.id), "%s", self_id);
	if (RAND_bytes(own.nonce, PEER_NONCE_BYTES) != 1)
		return -EIO;
	n = peer_hello_encode(&own, buf, sizeof(buf));
	if (n < 0)
		return n;
	rc = peer_tcp_send_frame(fd, PEER_HELLO, buf, (size_t)n, NULL, 0, deadline_ms);
	if (!rc)
		rc = peer_tcp_recv_frame(fd, PEER_HELLO, buf, sizeof(buf), &len,
				deadline_ms);
	if (!rc)
		rc = peer_hello_decode(buf, len, other);
	if (!rc && !memcmp(other->nonce, own.nonce, PEER_NONCE_BYTES))
		rc = -EACCES;
	if (!rc && role == PEER_ROLE_CLIENT) {
		rc = peer_auth_mac(secret, secret_len, role, &own, other, mac);
		if (!rc)
			rc = peer_tcp_send_frame(fd, PEER_AUTH, mac, sizeof(mac), NULL,
					0, deadline_ms);
	}
	if (!rc) {
		rc = peer_tcp_recv_frame(fd, PEER_AUTH, buf, sizeof(buf), &len,
				deadline_ms);
		/* A server that refuses our AUTH closes without a word. */
		if (rc == -ECONNRESET && role == PEER_ROLE_CLIENT)
			rc = -EACCES;
	}
	if (!rc && len != PEER_MAC_BYTES)
		rc = -EPROTO;
	if (!rc)
		rc = peer_auth_check(secret, secret_len, them, other, &own,
				     buf);
	if (!rc && role == PEER_ROLE_SERVER) {
		rc = peer_auth_mac(secret, secret_len, role, &own, other, mac);
		if (!rc)
			rc = peer_tcp_send_frame(fd, PEER_AUTH, mac, sizeof(mac), NULL,
					0, deadline_ms);
	}
	return rc;
}
