/* SPDX-License-Identifier: MIT */
/*
 * tcp.c - the cache group's TCP transport: a server that answers other
 * members' GETs from this member's cache (through the caller's serve
 * function), and a client that asks them, with every wait bounded.
 *
 * Sockets are non-blocking; each transfer is poll + recv/send against a
 * deadline, so no peer can hold a thread longer than timeout_ms per
 * request.  The server runs one thread per connection (at most
 * max_conns) and one accepting; stopping shuts every socket down, which
 * wakes each thread's poll, and waits for them all.  The client keeps a
 * few authenticated connections per member and a down-until time with
 * exponential back-off for members that failed (peer.h).
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
#include "util/util.h"

#define DOWN_FIRST_MS 5000u
#define DOWN_MAX_MS 60000u
#define SERVER_IDLE_MS 120000u

/* ---- bounded transfers ---- */

static int wait_fd(int fd, short ev, uint64_t deadline_ms)
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
			rc = wait_fd(fd, POLLOUT, deadline_ms);
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
static int send_frame_q(int fd, enum peer_type t, const void *body,
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

static int send_frame(int fd, enum peer_type t, const void *body,
		      size_t len, const void *tail, size_t tail_len,
		      uint64_t deadline_ms)
{
	return send_frame_q(fd, t, body, len, tail, tail_len, deadline_ms, 0);
}

/* Reads one frame of type want into buf (cap bytes); *len its body. */
static int recv_frame(int fd, enum peer_type want, unsigned char *buf,
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

static void nonblock(int fd)
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
static int handshake(int fd, enum peer_role role, const char *self_id,
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
	rc = send_frame(fd, PEER_HELLO, buf, (size_t)n, NULL, 0, deadline_ms);
	if (!rc)
		rc = recv_frame(fd, PEER_HELLO, buf, sizeof(buf), &len,
				deadline_ms);
	if (!rc)
		rc = peer_hello_decode(buf, len, other);
	if (!rc && !memcmp(other->nonce, own.nonce, PEER_NONCE_BYTES))
		rc = -EACCES;
	if (!rc && role == PEER_ROLE_CLIENT) {
		rc = peer_auth_mac(secret, secret_len, role, &own, other, mac);
		if (!rc)
			rc = send_frame(fd, PEER_AUTH, mac, sizeof(mac), NULL,
					0, deadline_ms);
	}
	if (!rc) {
		rc = recv_frame(fd, PEER_AUTH, buf, sizeof(buf), &len,
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
			rc = send_frame(fd, PEER_AUTH, mac, sizeof(mac), NULL,
					0, deadline_ms);
	}
	return rc;
}

/* ---- the server ---- */

struct peer_server {
	struct peer_server_config cfg;
	char *self_id;
	int lfd;
	unsigned port;
	pthread_t acceptor;
	pthread_mutex_t lock;     /* protects conns, nconns, stopping */
	pthread_cond_t gone;
	struct srv_conn *conns;
	unsigned nconns;
	bool stopping;
	atomic_uint_fast64_t n_conns, n_auth_fail, n_requests, n_bytes,
		n_errors, n_working;
};

struct srv_conn {
	struct peer_server *s;
	struct srv_conn *next;
	int fd;
};

/* A client's RMA_OFFER: our address when we have an endpoint of its
 * provider (the connection then answers DATA_RMA), an empty one if
 * not. */
static int answer_offer(struct peer_server *s, int fd,
			const unsigned char *body, uint32_t len, bool *rma)
{
	struct peer_rma_offer in, out = { 0 };
	unsigned char buf[PEER_PROV_MAX + PEER_FABRIC_ADDR_MAX + 8];
	struct peer_fabric *f = s->cfg.fabric;
	int n;

	if (peer_rma_offer_decode(body, len, &in))
		return -EPROTO;
	*rma = false;
	if (f) {
		const unsigned char *a;
		size_t al = peer_fabric_addr(f, &a);

		snprintf(out.prov, sizeof(out.prov), "%s",
			 peer_fabric_provider(f));
		if (!strcmp(in.prov, out.prov) && al <= PEER_FABRIC_ADDR_MAX) {
			memcpy(out.addr, a, al);
			out.addr_len = (uint16_t)al;
			*rma = true;
		}
	}
	n = peer_rma_offer_encode(&out, buf, sizeof(buf));
	if (n < 0)
		return n;
	return send_frame(fd, PEER_RMA_OFFER, buf, (size_t)n, NULL, 0,
			  util_now_ms() + s->cfg.timeout_ms);
}

/* The run in buf, one-sided: registered, its address and key sent, and
 * held until the reader's RELEASE (or the timeout, or the connection's
 * end), driving the provider's progress meanwhile.  1: not registered
 * (answer inline).  *park: the answer ended without RELEASE, so the
 * provider may still be sending from buf (peer_fabric_park). */
static int serve_rma(struct peer_server *s, int fd, const struct peer_get *g,
		     const uint32_t *crcs, uint32_t nb, unsigned char *buf,
		     bool *park)
{
	unsigned char head[PEER_BLOCKS_MAX * 4 + 64], rel[8];
	unsigned char hdr[PEER_HDR_BYTES];
	uint64_t deadline = util_now_ms() + s->cfg.timeout_ms, raddr, key;
	struct peer_fabric_exposed *x;
	enum peer_type t;
	uint32_t len;
	int n, rc;

	*park = false;
	if (peer_fabric_expose(s->cfg.fabric, buf, g->len, &raddr, &key, &x))
		return 1;
	n = peer_data_rma_encode(g->req_id, 0, s->cfg.block_bytes, crcs, nb,
				 g->len, raddr, key, head, sizeof(head));
	rc = n < 0 ? n : send_frame(fd, PEER_DATA_RMA, head, (size_t)n,
				     NULL, 0, deadline);
	for (unsigned spin = 0; !rc; spin++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		peer_fabric_progress(s->cfg.fabric);
		if (poll(&p, 1, 0) > 0)
			break;
		if (util_now_ms() >= deadline)
			rc = -ETIMEDOUT;
		else if (spin > 64)
			usleep(20);
	}
	if (!rc)
		rc = util_sock_io(fd, hdr, sizeof(hdr), false, deadline);
	if (!rc)
		rc = peer_hdr_decode(hdr, &t, &len);
	if (!rc && (t != PEER_RELEASE || len != sizeof(rel)))
		rc = -EPROTO;
	if (!rc)
		rc = util_sock_io(fd, rel, sizeof(rel), false, deadline);
	if (!rc && util_get64le(rel) != g->req_id)
		rc = -EPROTO;
	peer_fabric_unexpose(x);
	*park = rc != 0;
	return rc;
}

/* A GET being served on a thread of its own while the connection's
 * thread says WORKING (serve_watched). */
struct watched {
	const struct peer_server_config *cfg;
	const struct peer_get *g;
	unsigned char *buf;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int st;
};

static void *watched_main(void *arg)
{
	struct watched *w = arg;
	int st = w->cfg->serve(w->cfg->arg, w->g, w->buf);

	pthread_mutex_lock(&w->lock);
	w->st = st;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* Serves g into buf, sending WORKING every every_ms until the answer is
 * ready, so that the reader can tell a slow owner from a silent one.  A
 * WORKING that cannot be sent stops the next ones (the DATA will fail
 * the same way); the serve itself always runs to its end, since it
 * writes into buf. */
static int serve_watched(struct peer_server *s, int fd,
			 const struct peer_get *g, unsigned char *buf,
			 unsigned every_ms)
{
	struct watched w = { .cfg = &s->cfg, .g = g, .buf = buf };
	unsigned char body[PEER_WORKING_BYTES];
	bool can_send = true;
	pthread_t t;

	pthread_mutex_init(&w.lock, NULL);
	util_cond_init(&w.cond);
	if (pthread_create(&t, NULL, watched_main, &w)) {
		w.st = s->cfg.serve(s->cfg.arg, g, buf);
		goto out;
	}
	util_put64le(body, g->req_id);
	pthread_mutex_lock(&w.lock);
	while (!w.done) {
		struct timespec ts = util_deadline(every_ms);

		if (pthread_cond_timedwait(&w.cond, &w.lock, &ts) !=
		    ETIMEDOUT || w.done || !can_send)
			continue;
		pthread_mutex_unlock(&w.lock);
		if (send_frame(fd, PEER_WORKING, body, sizeof(body), NULL, 0,
			       util_now_ms() + s->cfg.timeout_ms))
			can_send = false;
		else
			atomic_fetch_add(&s->n_working, 1);
		pthread_mutex_lock(&w.lock);
	}
	pthread_mutex_unlock(&w.lock);
	pthread_join(t, NULL);
out:
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return w.st;
}

/* A client's PROGRESS: the interval it asks for, clamped, and answered
 * with the one this connection keeps. */
static int answer_progress(struct peer_server *s, int fd,
			   const unsigned char *body, uint32_t len,
			   unsigned *every_ms)
{
	unsigned char out[PEER_PROGRESS_BYTES];
	uint32_t ms;

	if (len != PEER_PROGRESS_BYTES)
		return -EPROTO;
	ms = util_get32le(body);
	if (ms < PEER_PROGRESS_MIN_MS)
		ms = PEER_PROGRESS_MIN_MS;
	if (ms > 60000)
		ms = 60000;
	*every_ms = ms;
	util_put32le(out, ms);
	return send_frame(fd, PEER_PROGRESS, out, sizeof(out), NULL, 0,
			  util_now_ms() + s->cfg.timeout_ms);
}

static void serve_conn(struct peer_server *s, int fd)
{
	const struct peer_server_config *cfg = &s->cfg;
	uint32_t bb = cfg->block_bytes;
	uint32_t crcs[PEER_RUN_MAX_BYTES / 4096 + 1];
	unsigned char *buf = NULL, head[sizeof(crcs) + 64];
	unsigned char body[PEER_KEY_MAX + PEER_ETAG_MAX + 64];
	struct peer_hello other;
	unsigned every_ms = 0;      /* WORKING interval; 0: not asked */
	bool rma = false;
	int rc;

	rc = handshake(fd, PEER_ROLE_SERVER, s->self_id, cfg->secret,
		       cfg->secret_len, &other, util_now_ms() + cfg->timeout_ms);
	if (!rc && cfg->admit && !cfg->admit(cfg->arg, other.id))
		rc = -EACCES;
	if (rc) {
		if (rc == -EACCES)
			atomic_fetch_add(&s->n_auth_fail, 1);
		return;
	}
	for (;;) {
		struct peer_get g;
		uint32_t len, nb = 0;
		int st, n;

		unsigned char hdr[PEER_HDR_BYTES];
		enum peer_type t;

		/* Idle until the next request (or stop's shutdown), then
		 * it within the timeout.  An idle connection gives its
		 * buffer back after a second and is closed after
		 * SERVER_IDLE_MS (the client opens another). */
		if (wait_fd(fd, POLLIN, util_now_ms() + 1000) == -ETIMEDOUT) {
			free(buf);
			buf = NULL;
			if (wait_fd(fd, POLLIN, util_now_ms() +
				    SERVER_IDLE_MS))
				break;
		}
		if (util_sock_io(fd, hdr, sizeof(hdr), false,
				 util_now_ms() + cfg->timeout_ms) ||
		    peer_hdr_decode(hdr, &t, &len) ||
		    (t != PEER_GET && t != PEER_RMA_OFFER &&
		     t != PEER_PROGRESS) ||
		    len > sizeof(body) ||
		    util_sock_io(fd, body, len, false,
				 util_now_ms() + cfg->timeout_ms))
			break;
		if (t == PEER_RMA_OFFER) {
			if (answer_offer(s, fd, body, len, &rma))
				break;
			continue;
		}
		if (t == PEER_PROGRESS) {
			if (answer_progress(s, fd, body, len, &every_ms))
				break;
			continue;
		}
		if (peer_get_decode(body, len, &g)) {
			atomic_fetch_add(&s->n_errors, 1);
			break;
		}
		atomic_fetch_add(&s->n_requests, 1);
		if (!buf && !(buf = malloc(PEER_RUN_MAX_BYTES)))
			st = -ENOMEM;
		else if (every_ms)
			st = serve_watched(s, fd, &g, buf, every_ms);
		else
			st = cfg->serve(cfg->arg, &g, buf);
		/* Busy: this member is asking another for those blocks
		 * (the reader goes to the bucket, no one is down). */
		if (st && st != -ENOENT && st != -EBUSY) {
			atomic_fetch_add(&s->n_errors, 1);
			st = -EIO;
		}
		if (!st) {
			nb = (g.len + bb - 1) / bb;
			for (uint32_t b = 0; b < nb; b++)
				crcs[b] = util_crc32c(0, buf + (size_t)b * bb,
					b + 1 < nb ? bb : g.len - b * bb);
		}
		n = peer_data_head_encode(g.req_id, st, bb, crcs, nb, head,
					  sizeof(head));
		if (n < 0)
			break;
		rc = 1;
		if (rma && !st) {
			bool park;

			rc = serve_rma(s, fd, &g, crcs, nb, buf, &park);
			if (park) {
				peer_fabric_park(cfg->fabric, buf);
				buf = NULL;
			}
		}
		/* The bytes go out as fast as the reader takes them: only
		 * a reader silent for the timeout is given up on. */
		if (rc == 1)
			rc = send_frame_q(fd, PEER_DATA, head, (size_t)n, buf,
					  st ? 0 : g.len,
					  util_now_ms() + cfg->timeout_ms,
					  cfg->timeout_ms);
		if (rc)
			break;
		if (!st)
			atomic_fetch_add(&s->n_bytes, g.len);
	}
	free(buf);
}

static void *conn_main(void *arg)
{
	struct srv_conn *c = arg, **pp;
	struct peer_server *s = c->s;

	serve_conn(s, c->fd);
	pthread_mutex_lock(&s->lock);
	for (pp = &s->conns; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	s->nconns--;
	close(c->fd);
	pthread_cond_broadcast(&s->gone);
	pthread_mutex_unlock(&s->lock);
	free(c);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct peer_server *s = arg;

	for (;;) {
		struct srv_conn *c;
		pthread_t t;
		pthread_attr_t at;
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (wait_fd(s->lfd, POLLIN, 0))
					break;
				pthread_mutex_lock(&s->lock);
				if (s->stopping) {
					pthread_mutex_unlock(&s->lock);
					break;
				}
				pthread_mutex_unlock(&s->lock);
				continue;
			}
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOMEM || errno == ENOBUFS) {
				usleep(100000);
				continue;
			}
			break;   /* EINVAL after shutdown: stopping */
		}
		nonblock(fd);
		pthread_mutex_lock(&s->lock);
		if (s->stopping || s->nconns >= s->cfg.max_conns ||
		    !(c = calloc(1, sizeof(*c)))) {
			pthread_mutex_unlock(&s->lock);
			close(fd);
			continue;
		}
		c->s = s;
		c->fd = fd;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, conn_main, c)) {
			pthread_mutex_unlock(&s->lock);
			pthread_attr_destroy(&at);
			close(fd);
			free(c);
			continue;
		}
		pthread_attr_destroy(&at);
		c->next = s->conns;
		s->conns = c;
		s->nconns++;
		atomic_fetch_add(&s->n_conns, 1);
		pthread_mutex_unlock(&s->lock);
	}
	return NULL;
}

int peer_server_start(const struct peer_server_config *cfg,
		      struct peer_server **out, char *msg, size_t msg_len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	struct peer_server *s;
	char host[PEER_ID_MAX + 1], port[8];
	int rc, one = 1;

	util_msg(msg, msg_len, "%s", "");
	if (peer_split_id(cfg->listen, host, sizeof(host), port)) {
		util_msg(msg, msg_len, "--peer-listen '%s' is not addr:port",
			 cfg->listen);
		return -EINVAL;
	}
	if (cfg->secret_len < PEER_SECRET_MIN ||
	    cfg->secret_len > PEER_SECRET_MAX || !cfg->serve) {
		util_msg(msg, msg_len, "the peer secret must be %d to %d "
			 "bytes", PEER_SECRET_MIN, PEER_SECRET_MAX);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	if (!s->cfg.block_bytes)
		s->cfg.block_bytes = 1u << 20;
	if (s->cfg.block_bytes < 4096 || s->cfg.block_bytes > PEER_RUN_MAX_BYTES)
		s->cfg.block_bytes = 1u << 20;
	if (!s->cfg.timeout_ms)
		s->cfg.timeout_ms = 2000;
	if (!s->cfg.max_conns)
		s->cfg.max_conns = 256;
	s->self_id = strdup(cfg->self_id ? cfg->self_id : cfg->listen);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->gone, NULL);
	s->lfd = -1;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc || !ai || !s->self_id) {
		util_msg(msg, msg_len, "--peer-listen %s: %s", cfg->listen,
			 rc ? gai_strerror(rc) : "no address");
		rc = -EINVAL;
		goto out_free;
	}
	s->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 ||
	    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(s->lfd, ai->ai_addr, ai->ai_addrlen) ||
	    listen(s->lfd, 64) ||
	    getsockname(s->lfd, (struct sockaddr *)&sa, &sl)) {
		rc = -errno;
		util_msg(msg, msg_len, "--peer-listen %s: %s (another "
			 "process on that port, or not an address of this "
			 "host?)", cfg->listen, strerror(errno));
		goto out_free;
	}
	fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK);
	s->port = ntohs(sa.ss_family == AF_INET6 ?
			((struct sockaddr_in6 *)&sa)->sin6_port :
			((struct sockaddr_in *)&sa)->sin_port);
	freeaddrinfo(ai);
	ai = NULL;
	if (pthread_create(&s->acceptor, NULL, accept_main, s)) {
		rc = -EAGAIN;
		goto out_free;
	}
	*out = s;
	return 0;
out_free:
	if (ai)
		freeaddrinfo(ai);
	if (s->lfd >= 0)
		close(s->lfd);
	pthread_cond_destroy(&s->gone);
	pthread_mutex_destroy(&s->lock);
	free(s->self_id);
	free(s);
	return rc;
}

unsigned peer_server_port(const struct peer_server *s)
{
	return s->port;
}

void peer_server_get_stats(struct peer_server *s,
			   struct peer_server_stats *out)
{
	out->conns = atomic_load(&s->n_conns);
	out->auth_failures = atomic_load(&s->n_auth_fail);
	out->requests = atomic_load(&s->n_requests);
	out->bytes_served = atomic_load(&s->n_bytes);
	out->errors = atomic_load(&s->n_errors);
	out->working = atomic_load(&s->n_working);
}

void peer_server_stop(struct peer_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	shutdown(s->lfd, SHUT_RDWR);
	for (struct srv_conn *c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->acceptor, NULL);
	pthread_mutex_lock(&s->lock);
	while (s->nconns)
		pthread_cond_wait(&s->gone, &s->lock);
	pthread_mutex_unlock(&s->lock);
	close(s->lfd);
	pthread_cond_destroy(&s->gone);
	pthread_mutex_destroy(&s->lock);
	free(s->self_id);
	free(s);
}

/* ---- the client ---- */

/* An authenticated connection, and the member's fabric address as its
 * RMA_OFFER said on it (falen 0: answers come inline). */
struct cli_conn {
	int fd;
	bool progress;             /* the member sends WORKING on it */
	uint16_t falen;
	unsigned char faddr[PEER_FABRIC_ADDR_MAX];
};

struct cli_member {
	struct cli_member *next;
	char id[PEER_ID_MAX + 1];
	struct cli_conn idle[PEER_CONNS_PER_MEMBER]; /* unused now */
	unsigned nidle;
	bool no_offer;                     /* closed on our RMA_OFFER: a
					    * build without it */
	bool no_progress;                  /* closed on our PROGRESS */
	uint64_t down_until_ms;
	unsigned down_ms;                  /* the next back-off */
	int last_err;                      /* of the last failure, -errno */
	unsigned silent_ms;                /* with -ETIMEDOUT: how long */
};

struct peer_client {
	struct peer_client_config cfg;
	char *self_id;
	pthread_mutex_t lock;              /* protects members */
	struct cli_member *members;
	atomic_uint_fast64_t next_req, n_requests, n_bytes, n_errors, n_down,
		n_rma, n_silent, n_working, n_busy;
};

int peer_client_new(const struct peer_client_config *cfg,
		    struct peer_client **out)
{
	struct peer_client *pc;

	if (cfg->secret_len < PEER_SECRET_MIN ||
	    cfg->secret_len > PEER_SECRET_MAX || !cfg->self_id)
		return -EINVAL;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->cfg = *cfg;
	if (!pc->cfg.timeout_ms)
		pc->cfg.timeout_ms = 2000;
	if (!pc->cfg.total_ms)
		pc->cfg.total_ms = 4 * pc->cfg.timeout_ms;
	if (pc->cfg.total_ms < pc->cfg.timeout_ms)
		pc->cfg.total_ms = pc->cfg.timeout_ms;
	pc->self_id = strdup(cfg->self_id);
	if (!pc->self_id) {
		free(pc);
		return -ENOMEM;
	}
	pthread_mutex_init(&pc->lock, NULL);
	atomic_store(&pc->next_req, 1);
	*out = pc;
	return 0;
}

void peer_client_free(struct peer_client *pc)
{
	struct cli_member *m, *n;

	if (!pc)
		return;
	for (m = pc->members; m; m = n) {
		n = m->next;
		while (m->nidle)
			close(m->idle[--m->nidle].fd);
		free(m);
	}
	pthread_mutex_destroy(&pc->lock);
	free(pc->self_id);
	free(pc);
}

const char *peer_client_transport(const struct peer_client *pc)
{
	return pc->cfg.fabric ? peer_fabric_provider(pc->cfg.fabric) : "tcp";
}

void peer_client_get_stats(struct peer_client *pc,
			   struct peer_client_stats *out)
{
	out->requests = atomic_load(&pc->n_requests);
	out->bytes_received = atomic_load(&pc->n_bytes);
	out->errors = atomic_load(&pc->n_errors);
	out->skipped_down = atomic_load(&pc->n_down);
	out->rma_reads = atomic_load(&pc->n_rma);
	out->silent = atomic_load(&pc->n_silent);
	out->working = atomic_load(&pc->n_working);
	out->busy = atomic_load(&pc->n_busy);
	out->members_down = 0;
	pthread_mutex_lock(&pc->lock);
	for (struct cli_member *m = pc->members; m; m = m->next)
		out->members_down += m->down_until_ms > util_now_ms();
	pthread_mutex_unlock(&pc->lock);
}

/* The member's entry (pc->lock held), made on first use. */
static struct cli_member *member_of(struct peer_client *pc, const char *id)
{
	struct cli_member *m;

	for (m = pc->members; m; m = m->next)
		if (!strcmp(m->id, id))
			return m;
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	snprintf(m->id, sizeof(m->id), "%s", id);
	m->next = pc->members;
	pc->members = m;
	return m;
}

/* RMA_OFFER on a new connection: the member's fabric address for this
 * connection's DATA_RMA answers, if it is one of our provider and of
 * our address's length (fi_av_insert reads that many bytes); else none,
 * and the connection carries DATA inline. */
static int offer_rma(struct peer_client *pc, struct cli_conn *cn,
		     uint64_t deadline)
{
	struct peer_rma_offer o = { 0 };
	unsigned char buf[PEER_PROV_MAX + PEER_FABRIC_ADDR_MAX + 8];
	const char *prov = peer_fabric_provider(pc->cfg.fabric);
	const unsigned char *own;
	size_t own_len = peer_fabric_addr(pc->cfg.fabric, &own);
	uint32_t len;
	int n, rc;

	snprintf(o.prov, sizeof(o.prov), "%s", prov);
	n = peer_rma_offer_encode(&o, buf, sizeof(buf));
	if (n < 0)
		return n;
	rc = send_frame(cn->fd, PEER_RMA_OFFER, buf, (size_t)n, NULL, 0,
			deadline);
	if (!rc)
		rc = recv_frame(cn->fd, PEER_RMA_OFFER, buf, sizeof(buf), &len,
				deadline);
	if (!rc)
		rc = peer_rma_offer_decode(buf, len, &o);
	if (rc)
		return rc;
	if (!strcmp(o.prov, prov) && o.addr_len == own_len) {
		cn->falen = o.addr_len;
		memcpy(cn->faddr, o.addr, o.addr_len);
	}
	return 0;
}

/* PROGRESS on a new connection: WORKING frames asked for at a quarter
 * of the timeout, so that three can be lost before the reader gives
 * up. */
static int ask_progress(struct peer_client *pc, struct cli_conn *cn,
			uint64_t deadline)
{
	unsigned char b[PEER_PROGRESS_BYTES];
	unsigned every = pc->cfg.timeout_ms / 4;
	uint32_t len;
	int rc;

	util_put32le(b, every < PEER_PROGRESS_MIN_MS ? PEER_PROGRESS_MIN_MS :
		     every);
	rc = send_frame(cn->fd, PEER_PROGRESS, b, sizeof(b), NULL, 0,
			deadline);
	if (!rc)
		rc = recv_frame(cn->fd, PEER_PROGRESS, b, sizeof(b), &len,
				deadline);
	if (!rc && len != PEER_PROGRESS_BYTES)
		rc = -EPROTO;
	/* An interval over the timeout would read as silence. */
	if (!rc && util_get32le(b) >= pc->cfg.timeout_ms)
		rc = -EPROTO;
	cn->progress = !rc;
	return rc;
}

enum dial_step { STEP_CONNECT, STEP_PROGRESS, STEP_OFFER };

static int dial_once(struct peer_client *pc, const char *id, bool progress,
		     bool offer, uint64_t deadline, struct cli_conn *cn,
		     char *msg, size_t msg_len, enum dial_step *step);

/* A new connection to id in *cn.  A member that closes it on our
 * PROGRESS or RMA_OFFER (a build from before the frame) is dialled again
 * without it, and never asked again. */
static int dial(struct peer_client *pc, const char *id, uint64_t deadline,
		struct cli_conn *cn, char *msg, size_t msg_len)
{
	struct cli_member *m;
	int rc = -EIO;

	for (int attempt = 0; attempt < 3; attempt++) {
		enum dial_step step = STEP_CONNECT;
		bool offer, progress;

		pthread_mutex_lock(&pc->lock);
		m = member_of(pc, id);
		offer = pc->cfg.fabric && m && !m->no_offer;
		progress = m && !m->no_progress;
		pthread_mutex_unlock(&pc->lock);
		rc = dial_once(pc, id, progress, offer, deadline, cn, msg,
			       msg_len, &step);
		if ((rc != -ECONNRESET && rc != -EPIPE) ||
		    step == STEP_CONNECT || !m)
			break;
		pthread_mutex_lock(&pc->lock);
		if (step == STEP_PROGRESS)
			m->no_progress = true;
		else
			m->no_offer = true;
		pthread_mutex_unlock(&pc->lock);
	}
	return rc;
}

static int dial_once(struct peer_client *pc, const char *id, bool progress,
		     bool offer, uint64_t deadline, struct cli_conn *cn,
		     char *msg, size_t msg_len, enum dial_step *step)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	struct peer_hello other = { 0 };
	char host[PEER_ID_MAX + 1], port[8];
	int fd, rc, err = 0;
	socklen_t el = sizeof(err);

	*step = STEP_CONNECT;
	if (peer_split_id(id, host, sizeof(host), port)) {
		util_msg(msg, msg_len, "peer %s: not host:port", id);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc || !ai) {
		util_msg(msg, msg_len, "peer %s: %s", id,
			 rc ? gai_strerror(rc) : "no address");
		return -EHOSTUNREACH;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		freeaddrinfo(ai);
		return rc;
	}
	nonblock(fd);
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen) ? -errno : 0;
	freeaddrinfo(ai);
	if (rc == -EINPROGRESS) {
		rc = wait_fd(fd, POLLOUT, deadline);
		if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
			rc = -errno;
		else if (!rc && err)
			rc = -err;
	}
	if (!rc)
		rc = handshake(fd, PEER_ROLE_CLIENT, pc->self_id,
			       pc->cfg.secret, pc->cfg.secret_len, &other,
			       deadline);
	if (!rc && strcmp(other.id, id)) {
		/* Not the member meant: a stale list, or an impostor. */
		util_msg(msg, msg_len, "peer %s answered as '%s', not as "
			 "the member listed", id, other.id);
		close(fd);
		return -EPROTO;
	}
	cn->fd = fd;
	cn->falen = 0;
	cn->progress = false;
	if (!rc && progress) {
		*step = STEP_PROGRESS;
		rc = ask_progress(pc, cn, deadline);
	}
	if (!rc && offer) {
		*step = STEP_OFFER;
		rc = offer_rma(pc, cn, deadline);
	}
	if (rc) {
		util_msg(msg, msg_len, "peer %s: %s", id,
			 rc == -EACCES ? "authentication failed (is the "
			 "group's secret the same on both?)" :
			 rc == -EPROTO ? "bad handshake" :
			 rc == -ETIMEDOUT ? "no answer to connect or "
			 "handshake within --peer-timeout" : strerror(-rc));
		close(fd);
		cn->fd = -1;
		return rc;
	}
	return 0;
}

/* A DATA_RMA answer of len bytes: its head and CRC table, the bytes
 * pulled from the member's buffer, checked, then RELEASE. */
static int exchange_rma(struct peer_client *pc, const struct cli_conn *cn,
			const struct peer_get *g, uint32_t len,
			unsigned char *buf, uint64_t deadline, uint32_t *bad)
{
	unsigned char body[PEER_BLOCKS_MAX * 4 + 64], rel[8];
	struct peer_data_rma d;
	int fd = cn->fd, rc;

	if (len > sizeof(body))
		return -EPROTO;
	rc = util_sock_io(fd, body, len, false, deadline);
	if (!rc)
		rc = peer_data_rma_decode(body, len, &d);
	if (!rc && (d.d.req_id != g->req_id || d.d.status ||
		    d.d.nbytes != g->len))
		rc = -EPROTO;
	if (rc)
		return rc;
	/* DATA_RMA on a connection that was offered nothing. */
	if (!cn->falen || !pc->cfg.fabric)
		return -EPROTO;
	rc = peer_fabric_read(pc->cfg.fabric, cn->faddr, cn->falen, d.raddr,
			      d.key, buf, d.d.nbytes, deadline);
	if (!rc) {
		d.d.bytes = buf;
		rc = peer_data_check(&d.d, bad);
	}
	if (!rc) {
		util_put64le(rel, g->req_id);
		rc = send_frame(fd, PEER_RELEASE, rel, sizeof(rel), NULL, 0,
				deadline);
	}
	if (!rc)
		atomic_fetch_add(&pc->n_rma, 1);
	return rc;
}

/* Sends g on fd and reads the answer into buf: 0, -ENOENT, -EBUSY (the
 * owner is asking a member for those blocks itself), -EREMOTEIO (the
 * owner's fetch failed), -ETIMEDOUT (the member was silent for the
 * timeout), -ETIME (it kept saying WORKING past total_ms), or another
 * -errno. */
static int exchange(struct peer_client *pc, const struct cli_conn *cn,
		    const struct peer_get *g, unsigned char *buf, char *msg,
		    size_t msg_len, const char *id)
{
	int fd = cn->fd;
	unsigned char body[PEER_KEY_MAX + PEER_ETAG_MAX + 64], hdr[PEER_HDR_BYTES];
	unsigned char fixed[PEER_DATA_FIXED_BYTES], crcs[4 * PEER_BLOCKS_MAX];
	unsigned char wb[PEER_WORKING_BYTES];
	unsigned quiet = pc->cfg.timeout_ms;
	uint64_t start = util_now_ms();
	/* Without WORKING frames, silence and the whole wait are one. */
	uint64_t cap = start + (cn->progress ? pc->cfg.total_ms : quiet);
	struct peer_data d;
	enum peer_type t = PEER_DATA;
	uint32_t len, bad;
	int n, rc;

	n = peer_get_encode(g, body, sizeof(body));
	if (n < 0)
		return n;
	rc = send_frame(fd, PEER_GET, body, (size_t)n, NULL, 0,
			start + quiet);
	/* WORKING frames until the answer: each one restarts the clock of
	 * silence, none the whole wait's. */
	while (!rc) {
		rc = util_sock_io_quiet(fd, hdr, sizeof(hdr), false, quiet, cap);
		if (!rc)
			rc = peer_hdr_decode(hdr, &t, &len);
		if (rc || t != PEER_WORKING)
			break;
		if (!cn->progress || len != PEER_WORKING_BYTES) {
			rc = -EPROTO;
			break;
		}
		rc = util_sock_io_quiet(fd, wb, sizeof(wb), false, quiet, cap);
		if (!rc && util_get64le(wb) != g->req_id)
			rc = -EPROTO;
		if (!rc)
			atomic_fetch_add(&pc->n_working, 1);
	}
	/* The bytes are ready at the owner: the pull gets the timeout. */
	if (!rc && t == PEER_DATA_RMA)
		rc = exchange_rma(pc, cn, g, len, buf,
				  util_now_ms() + quiet < cap ?
				  util_now_ms() + quiet : cap, &bad);
	else if (!rc && t != PEER_DATA)
		rc = -EPROTO;
	if (rc || t == PEER_DATA_RMA)
		goto checked;
	/* The head, then the CRC table, then the bytes straight into buf:
	 * no frame-sized allocation or copy per request. */
	rc = len < PEER_DATA_FIXED_BYTES ? -EPROTO :
	     util_sock_io_quiet(fd, fixed, sizeof(fixed), false, quiet, cap);
	if (!rc)
		rc = peer_data_fixed_decode(fixed, len, &d);
	if (!rc && d.req_id != g->req_id)
		rc = -EPROTO;
	if (!rc && !d.status && d.nbytes != g->len)
		rc = -EPROTO;
	if (!rc && d.status)
		rc = d.status == -ENOENT ? -ENOENT :
		     d.status == -EBUSY ? -EBUSY : -EREMOTEIO;
	if (!rc)
		rc = util_sock_io_quiet(fd, crcs, (size_t)d.nblocks * 4, false, quiet,
			      cap);
	if (!rc)
		rc = util_sock_io_quiet(fd, buf, d.nbytes, false, quiet, cap);
	if (!rc) {
		d.crcs = crcs;
		d.bytes = buf;
		rc = peer_data_check(&d, &bad);
	}
checked:
	/* Without WORKING frames the whole wait is the silence bound. */
	if (rc == -ETIME && !cn->progress)
		rc = -ETIMEDOUT;
	if (rc == -EBADMSG) {
		util_msg(msg, msg_len, "peer %s: block %u of %s at %llu does "
			 "not match its CRC32C", id, bad, g->key,
			 (unsigned long long)g->off);
		return rc;
	}
	if (rc == -ETIMEDOUT)
		util_msg(msg, msg_len, "peer %s: silent for %u ms "
			 "(--peer-timeout)", id, quiet);
	else if (rc == -ETIME)
		util_msg(msg, msg_len, "peer %s: still fetching after %llu "
			 "ms", id, (unsigned long long)(util_now_ms() - start));
	else if (rc && rc != -ENOENT)
		util_msg(msg, msg_len, "peer %s: %s", id,
			 rc == -EREMOTEIO ? "the owner's fetch failed" :
			 rc == -EBUSY ? "busy (it is asking a member for "
			 "those blocks itself)" : strerror(-rc));
	return rc;
}

/* Whether a failure says the member is down: unreachable, silent, or
 * speaking wrongly.  An answer that says why it has no bytes (not that
 * version, busy, its own fetch failed) or a member still working at the
 * longest wait is not: the reader reads the bucket, the member stays
 * up. */
static bool down_after(int rc)
{
	return rc && rc != -ENOENT && rc != -EBUSY && rc != -EREMOTEIO &&
	       rc != -ETIME;
}

int peer_client_get(struct peer_client *pc, const char *member,
		    struct peer_get *g, void *buf, char *msg, size_t msg_len)
{
	uint64_t now = util_now_ms(), deadline = now + pc->cfg.timeout_ms;
	struct cli_member *m;
	struct cli_conn cn = { .fd = -1 };
	int rc;

	util_msg(msg, msg_len, "%s", "");
	g->req_id = atomic_fetch_add(&pc->next_req, 1);
	pthread_mutex_lock(&pc->lock);
	m = member_of(pc, member);
	if (!m) {
		pthread_mutex_unlock(&pc->lock);
		return -ENOMEM;
	}
	if (m->down_until_ms > now) {
		pthread_mutex_unlock(&pc->lock);
		atomic_fetch_add(&pc->n_down, 1);
		util_msg(msg, msg_len, "peer %s is down", member);
		return -EHOSTDOWN;
	}
	if (m->nidle)
		cn = m->idle[--m->nidle];
	pthread_mutex_unlock(&pc->lock);
	atomic_fetch_add(&pc->n_requests, 1);
	if (cn.fd >= 0) {
		/* A kept connection the member closed meanwhile (it
		 * restarted, or stopped a connection idle too long): once
		 * more on a new one before calling the member down. */
		rc = exchange(pc, &cn, g, buf, msg, msg_len, member);
		if (rc == -ECONNRESET || rc == -EPIPE) {
			close(cn.fd);
			cn.fd = -1;
		}
	}
	if (cn.fd < 0) {
		rc = dial(pc, member, deadline, &cn, msg, msg_len);
		if (!rc)
			rc = exchange(pc, &cn, g, buf, msg, msg_len, member);
	}
	pthread_mutex_lock(&pc->lock);
	if (!down_after(rc)) {
		m->down_ms = 0;
		m->down_until_ms = 0;
		/* A connection is kept only after a whole answer. */
		if (rc != -ETIME && m->nidle < PEER_CONNS_PER_MEMBER) {
			m->idle[m->nidle++] = cn;
			cn.fd = -1;
		}
	} else {
		m->down_ms = m->down_ms ? m->down_ms * 2 : DOWN_FIRST_MS;
		if (m->down_ms > DOWN_MAX_MS)
			m->down_ms = DOWN_MAX_MS;
		m->down_until_ms = util_now_ms() + m->down_ms;
		m->last_err = rc;
		m->silent_ms = pc->cfg.timeout_ms;
		/* Its other connections are as suspect as this one. */
		while (m->nidle)
			close(m->idle[--m->nidle].fd);
	}
	pthread_mutex_unlock(&pc->lock);
	if (cn.fd >= 0)
		close(cn.fd);
	if (!rc)
		atomic_fetch_add(&pc->n_bytes, g->len);
	else if (rc == -EBUSY)
		atomic_fetch_add(&pc->n_busy, 1);
	else if (rc != -ENOENT)
		atomic_fetch_add(&pc->n_errors, 1);
	if (rc == -ETIMEDOUT)
		atomic_fetch_add(&pc->n_silent, 1);
	return rc;
}

/* Why a member is down, in words: unreachable, silent or speaking
 * wrongly (docs/cluster-cache.md, "What the group shows"). */
static void down_reason(const struct cli_member *m, char *buf, size_t len)
{
	int e = -m->last_err;

	if (e == ETIMEDOUT)
		snprintf(buf, len, "silent for %u.%u s", m->silent_ms / 1000,
			 m->silent_ms % 1000 / 100);
	else if (e == ECONNREFUSED || e == EHOSTUNREACH ||
		 e == ENETUNREACH || e == ECONNRESET || e == EPIPE ||
		 e == ECONNABORTED || e == EHOSTDOWN)
		snprintf(buf, len, "unreachable: %s", strerror(e));
	else if (e == EPROTO || e == EMSGSIZE || e == EBADMSG ||
		 e == EPROTONOSUPPORT)
		snprintf(buf, len, "bad frames: %s", strerror(e));
	else if (e == EACCES)
		snprintf(buf, len, "authentication failed");
	else
		snprintf(buf, len, "%s", strerror(e));
}

void peer_client_describe(struct peer_client *pc, const struct peer_group *g,
			  char *buf, size_t len)
{
	uint64_t now = util_now_ms();
	size_t at = 0;

	if (len)
		buf[0] = '\0';
	pthread_mutex_lock(&pc->lock);
	for (unsigned i = 0; i < g->n && at < len; i++) {
		const struct cli_member *m;
		int n;

		if ((int)i == g->self)
			continue;
		for (m = pc->members; m && strcmp(m->id, g->m[i].id);
		     m = m->next)
			;
		if (m && m->down_until_ms > now) {
			char why[128];

			down_reason(m, why, sizeof(why));
			n = snprintf(buf + at, len - at, "%s%s down %llus (%s)",
				     at ? "; " : "", m->id,
				     (unsigned long long)
				     ((m->down_until_ms - now + 999) / 1000),
				     why);
		} else
			n = snprintf(buf + at, len - at, "%s%s up",
				     at ? "; " : "", g->m[i].id);
		if (n < 0)
			break;
		at += (size_t)n;
	}
	pthread_mutex_unlock(&pc->lock);
}
