/* SPDX-License-Identifier: MIT */
/*
 * tcp_client.c - the cache group's TCP client: asks members for runs,
 * keeping a few authenticated connections per member, waiting for an
 * answer as long as the member is not silent (WORKING frames) and at
 * most total_ms, and marking members that are unreachable, silent or
 * speak wrongly down, with exponential back-off and the reason
 * (peer.h, docs/cluster-cache.md "Failure rules").
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


#define DOWN_FIRST_MS 5000u
#define DOWN_MAX_MS 60000u

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
	rc = peer_tcp_send_frame(cn->fd, PEER_RMA_OFFER, buf, (size_t)n, NULL, 0,
			deadline);
	if (!rc)
		rc = peer_tcp_recv_frame(cn->fd, PEER_RMA_OFFER, buf, sizeof(buf), &len,
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
	rc = peer_tcp_send_frame(cn->fd, PEER_PROGRESS, b, sizeof(b), NULL, 0,
			deadline);
	if (!rc)
		rc = peer_tcp_recv_frame(cn->fd, PEER_PROGRESS, b, sizeof(b), &len,
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
	peer_tcp_nonblock(fd);
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen) ? -errno : 0;
	freeaddrinfo(ai);
	if (rc == -EINPROGRESS) {
		rc = peer_tcp_wait_fd(fd, POLLOUT, deadline);
		if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
			rc = -errno;
		else if (!rc && err)
			rc = -err;
	}
	if (!rc)
		rc = peer_tcp_handshake(fd, PEER_ROLE_CLIENT, pc->self_id,
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
		rc = peer_tcp_send_frame(fd, PEER_RELEASE, rel, sizeof(rel), NULL, 0,
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
	rc = peer_tcp_send_frame(fd, PEER_GET, body, (size_t)n, NULL, 0,
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
