/* SPDX-License-Identifier: MIT */
/*
 * tcp_server.c - the cache group's TCP server: answers other members'
 * GETs from this member's cache through the caller's serve function,
 * saying WORKING while a slow one is being fetched (PROGRESS), inline or
 * through the RDMA data plane.  One thread per connection (at most
 * max_conns) and one accepting; stopping shuts every socket down, which
 * wakes each thread's poll, and waits for them all.
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


#define SERVER_IDLE_MS 120000u

/* ---- the server ---- */

struct peer_server {
	struct peer_server_config cfg;
	char *self_id;
	int lfd;
	unsigned port;
	pthread_t acceptor;
	pthread_mutex_t lock;     /* protects conns, ended, nconns, stopping */
	pthread_cond_t gone;
	struct srv_conn *conns;
	/* Connections whose thread has ended its work but not yet been
	 * joined: the acceptor joins them as it goes, peer_server_stop
	 * the rest, so that no connection thread outlives the server (its
	 * thread-local OpenSSL state, the handshake's random generator,
	 * is freed when the thread exits, not when it leaves the list). */
	struct srv_conn *ended;
	unsigned nconns;
	bool stopping;
	atomic_uint_fast64_t n_conns, n_auth_fail, n_requests, n_bytes,
		n_errors, n_working;
};

struct srv_conn {
	struct peer_server *s;
	struct srv_conn *next;
	pthread_t t;
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
	return peer_tcp_send_frame(fd, PEER_RMA_OFFER, buf, (size_t)n, NULL, 0,
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
	rc = n < 0 ? n : peer_tcp_send_frame(fd, PEER_DATA_RMA, head, (size_t)n,
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
		if (peer_tcp_send_frame(fd, PEER_WORKING, body, sizeof(body), NULL, 0,
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
	return peer_tcp_send_frame(fd, PEER_PROGRESS, out, sizeof(out), NULL, 0,
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

	rc = peer_tcp_handshake(fd, PEER_ROLE_SERVER, s->self_id, cfg->secret,
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
		if (peer_tcp_wait_fd(fd, POLLIN, util_now_ms() + 1000) == -ETIMEDOUT) {
			free(buf);
			buf = NULL;
			if (peer_tcp_wait_fd(fd, POLLIN, util_now_ms() +
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
			rc = peer_tcp_send_frame_q(fd, PEER_DATA, head, (size_t)n, buf,
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
	c->next = s->ended;
	s->ended = c;
	s->nconns--;
	close(c->fd);
	pthread_cond_broadcast(&s->gone);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Join and free the connections whose threads have ended their work.
 * Called only by the acceptor and, once it has stopped, by
 * peer_server_stop: the thread that created each one. */
static void reap_ended(struct peer_server *s)
{
	struct srv_conn *c;

	pthread_mutex_lock(&s->lock);
	c = s->ended;
	s->ended = NULL;
	pthread_mutex_unlock(&s->lock);
	while (c) {
		struct srv_conn *next = c->next;

		pthread_join(c->t, NULL);
		free(c);
		c = next;
	}
}

static void *accept_main(void *arg)
{
	struct peer_server *s = arg;

	for (;;) {
		struct srv_conn *c;
		int fd;

		reap_ended(s);
		fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (peer_tcp_wait_fd(s->lfd, POLLIN, 0))
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
		peer_tcp_nonblock(fd);
		pthread_mutex_lock(&s->lock);
		if (s->stopping || s->nconns >= s->cfg.max_conns ||
		    !(c = calloc(1, sizeof(*c)))) {
			pthread_mutex_unlock(&s->lock);
			close(fd);
			continue;
		}
		c->s = s;
		c->fd = fd;
		if (pthread_create(&c->t, NULL, conn_main, c)) {
			pthread_mutex_unlock(&s->lock);
			close(fd);
			free(c);
			continue;
		}
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
	reap_ended(s);
	close(s->lfd);
	pthread_cond_destroy(&s->gone);
	pthread_mutex_destroy(&s->lock);
	free(s->self_id);
	free(s);
}
