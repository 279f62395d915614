/* SPDX-License-Identifier: MIT */
/*
 * rendezvous.c - train_rendezvous (gpu.h): rank 0 of a data-parallel job
 * hands a small blob (the NCCL id, a run id) to every other rank, before
 * the ranks have any other way to talk.  Plain C and POSIX: no CUDA.
 *
 * Both ways end in the same state: every rank holds rank 0's blob and
 * knows that this call's blob came from this job's rank 0, and rank 0
 * knows that every rank has it (it returns 0 only then).  Each call of
 * rank 0 draws a fresh random nonce, which the others echo back, so what
 * an earlier job left behind is never taken for this one's.
 *
 * file:PATH, for ranks that share a file system:
 *   rank 0   writes a "publish" record (job, nonce, blob) to PATH.tmp-*
 *            and renames it to PATH, then waits for an "ack" record with
 *            its nonce in PATH.rankR from every rank R > 0, then renames
 *            a "done" record into PATH and removes the acks.
 *   rank R   polls PATH; takes a publish record of its job whose nonce it
 *            has not acknowledged yet (a newer one replaces an older: a
 *            leftover of a crashed job is followed by the live one),
 *            writes its ack the same way, and returns when PATH holds
 *            the done record of the nonce it acknowledged.
 *   A done record stays in PATH afterwards; it is of no use to a later
 *   job (a rank takes a done record only after acknowledging its
 *   publish record), and that job's rank 0 replaces it.
 *
 * tcp:HOST:PORT, for ranks that can reach rank 0:
 *   rank 0   listens on PORT (every local address: HOST is how the others
 *            reach it) and serves one connection at a time: a "hello"
 *            (rank, job) in, a "reply" (nonce, blob) or a "refuse"
 *            (why) out, then the rank's "ack" in.  A connection of
 *            another job, or a rank that came twice, is refused and
 *            rank 0 goes on waiting.
 *   rank R   connects, retrying until the deadline (rank 0 may start
 *            later), says hello, takes the reply and acknowledges it.
 *            A refusal ends its wait at once: it names the difference.
 *
 * Records, little-endian, a 40-byte header then the job string and the
 * payload:
 *   offset size  field
 *        0    8  magic "FMRDV001"
 *        8    4  kind: 1 publish, 2 done, 3 ack, 4 hello, 5 reply,
 *                6 refuse
 *       12    4  world size       16  4  sender's rank
 *       20    4  job bytes J      24  8  rank 0's nonce (hello: 0)
 *       32    4  payload bytes N (publish, reply: the blob; refuse: why)
 *       36    4  blob bytes the sender works with (they must agree)
 *       40    J  job             40+J  N  payload
 *
 * Limits: the job string RDV_JOB_MAX bytes, the blob RDV_BLOB_MAX, the
 * world RDV_WORLD_MAX ranks; every wait ends at the caller's deadline,
 * and a connection that stalls is dropped after RDV_CONN_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data_int.h"
#include "gpu.h"

#define RDV_MAGIC "FMRDV001"
#define RDV_HDR_BYTES 40
#define RDV_JOB_MAX 1024
#define RDV_BLOB_MAX 4096
#define RDV_WORLD_MAX 65536u
#define RDV_REC_MAX (RDV_HDR_BYTES + RDV_JOB_MAX + RDV_BLOB_MAX)
#define RDV_HOST_MAX 255
#define RDV_CONN_MS 10000       /* one connection, start to end */
#define RDV_POLL_MIN_MS 2       /* file polls and connect retries back off */
#define RDV_POLL_MAX_MS 100     /* from this ... */
#define RDV_RETRY_MAX_MS 1000   /* ... to these */
#define RDV_LIST_RANKS 8        /* missing ranks named in a message */

enum rdv_kind {
	RDV_PUBLISH = 1, RDV_DONE, RDV_ACK, RDV_HELLO, RDV_REPLY, RDV_REFUSE,
};

struct rdv_rec {
	uint32_t kind, world, rank, blob_len;
	uint64_t nonce;
	const char *job;                /* not NUL-terminated */
	size_t job_len;
	const unsigned char *payload;
	size_t payload_len;
};

/* One call's state. */
struct rdv {
	const char *where;
	bool tcp;
	char path[PATH_MAX];            /* file: */
	char host[RDV_HOST_MAX + 1];    /* tcp: */
	char port[8];
	const char *job;
	size_t job_len;
	unsigned rank, world;
	unsigned char *blob;
	size_t len;
	unsigned timeout_ms;
	uint64_t deadline_ms;
	uint64_t nonce;
	char seen[512];                 /* the last thing refused, for the
	                                 * timeout message */
	char *msg;
	size_t msg_len;
};

static unsigned left_ms(uint64_t deadline)
{
	uint64_t now = util_now_ms();

	return now >= deadline ? 0 : (unsigned)(deadline - now);
}

/* poll(2)'s timeout: an int. */
static int poll_ms(uint64_t deadline)
{
	unsigned left = left_ms(deadline);

	return left > INT_MAX ? INT_MAX : (int)left;
}

/* Sleeps ms, never past the deadline. */
static void nap(const struct rdv *d, unsigned ms)
{
	unsigned left = left_ms(d->deadline_ms);
	struct timespec ts;

	if (ms > left)
		ms = left;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	nanosleep(&ts, NULL);   /* EINTR: the caller looks at the clock */
}

static unsigned backoff(unsigned ms, unsigned max)
{
	return ms * 2 > max ? max : ms * 2;
}

/* Not for secrecy: a nonce that no earlier call drew. */
static uint64_t fresh_nonce(void)
{
	uint64_t n = 0;
	struct timespec ts;

	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != sizeof(n)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		n = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		n ^= (uint64_t)getpid() << 40;
		n ^= util_now_ms() * 0x9E3779B97F4A7C15ull;
	}
	return n ? n : 1;   /* 0 means "none" in a hello */
}

/* ---- records ---- */

static size_t rec_encode(const struct rdv *d, enum rdv_kind kind,
			 const void *payload, size_t payload_len,
			 unsigned char *b)
{
	memcpy(b, RDV_MAGIC, 8);
	util_put32le(b + 8, kind);
	util_put32le(b + 12, d->world);
	util_put32le(b + 16, d->rank);
	util_put32le(b + 20, (uint32_t)d->job_len);
	util_put64le(b + 24, kind == RDV_HELLO ? 0 : d->nonce);
	util_put32le(b + 32, (uint32_t)payload_len);
	util_put32le(b + 36, (uint32_t)d->len);
	memcpy(b + RDV_HDR_BYTES, d->job, d->job_len);
	if (payload_len)
		memcpy(b + RDV_HDR_BYTES + d->job_len, payload, payload_len);
	return RDV_HDR_BYTES + d->job_len + payload_len;
}

/* The header's fields; -EBADMSG for what is not a record of ours.
 * *total gets the record's whole length. */
static int rec_head(const unsigned char *b, struct rdv_rec *r, size_t *total)
{
	if (memcmp(b, RDV_MAGIC, 8))
		return -EBADMSG;
	r->kind = util_get32le(b + 8);
	r->world = util_get32le(b + 12);
	r->rank = util_get32le(b + 16);
	r->job_len = util_get32le(b + 20);
	r->nonce = util_get64le(b + 24);
	r->payload_len = util_get32le(b + 32);
	r->blob_len = util_get32le(b + 36);
	if (r->kind < RDV_PUBLISH || r->kind > RDV_REFUSE ||
	    r->job_len > RDV_JOB_MAX || r->payload_len > RDV_BLOB_MAX ||
	    r->blob_len > RDV_BLOB_MAX)
		return -EBADMSG;
	*total = RDV_HDR_BYTES + r->job_len + r->payload_len;
	return 0;
}

static int rec_decode(const unsigned char *b, size_t len, struct rdv_rec *r)
{
	size_t total;

	if (len < RDV_HDR_BYTES || rec_head(b, r, &total) || total != len)
		return -EBADMSG;
	r->job = (const char *)b + RDV_HDR_BYTES;
	r->payload = b + RDV_HDR_BYTES + r->job_len;
	return 0;
}

/* NULL when r is of this job (job string, world and blob size); else
 * what differs, in d->seen. */
static const char *rec_foreign(struct rdv *d, const struct rdv_rec *r,
			       const char *what)
{
	if (r->job_len == d->job_len && !memcmp(r->job, d->job, d->job_len) &&
	    r->world == d->world && r->blob_len == d->len)
		return NULL;
	snprintf(d->seen, sizeof(d->seen), "%.200s has job '%.*s' (%u ranks, "
		 "a %u-byte blob) where job '%.100s' (%u ranks, %zu bytes) was "
		 "expected", what, (int)(r->job_len > 100 ? 100 : r->job_len),
		 r->job, r->world, r->blob_len, d->job, d->world, d->len);
	return d->seen;
}

/* "ranks 2, 5, 7" (then "and N more") of those not marked in got. */
static void list_missing(const unsigned char *got, unsigned world,
			 char *buf, size_t len)
{
	unsigned n = 0, listed = 0;
	size_t at;

	for (unsigned r = 1; r < world; r++)
		n += !got[r];
	at = (size_t)snprintf(buf, len, "rank%s", n > 1 ? "s" : "");
	for (unsigned r = 1; r < world && at < len; r++) {
		if (got[r])
			continue;
		if (listed == RDV_LIST_RANKS) {
			snprintf(buf + at, len - at, " and %u more", n - listed);
			return;
		}
		at += (size_t)snprintf(buf + at, len - at, "%s %u",
				       listed ? "," : "", r);
		listed++;
	}
}

/* ---- file: ---- */

/* Writes a record under a temporary name and renames it to path, so a
 * reader sees the old record or the new one, never a part. */
static int file_put(struct rdv *d, const char *path, const unsigned char *b,
		    size_t len)
{
	char tmp[PATH_MAX + 64];
	ssize_t w;
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp-%u-%ld", path, d->rank,
		 (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		util_msg(d->msg, d->msg_len, "rendezvous %s: cannot create "
			 "%s: %s (the directory must exist and be writable "
			 "by every rank)", d->where, tmp, strerror(-rc));
		return rc;
	}
	w = write(fd, b, len);
	if (w != (ssize_t)len)
		rc = w < 0 ? -errno : -EIO;
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc) {
		util_msg(d->msg, d->msg_len, "rendezvous %s: cannot write "
			 "%s: %s", d->where, path, strerror(-rc));
		unlink(tmp);
	}
	return rc;
}

/* Reads a whole record file into b (RDV_REC_MAX): its length, or
 * -ENOENT, -EBADMSG for one too long to be ours, or -errno. */
static ssize_t file_get(const char *path, unsigned char *b)
{
	ssize_t got;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	got = util_read_all(fd, b, RDV_REC_MAX + 1);
	close(fd);
	return got > RDV_REC_MAX ? -EBADMSG : got;
}

static void ack_path(const struct rdv *d, unsigned rank, char *buf,
		     size_t len)
{
	snprintf(buf, len, "%s.rank%u", d->path, rank);
}

static int file_serve(struct rdv *d, unsigned char *b)
{
	unsigned char *got = calloc(d->world, 1);
	unsigned pending = d->world - 1, wait = RDV_POLL_MIN_MS;
	char path[PATH_MAX + 32], missing[160];
	int rc;

	if (!got)
		return -ENOMEM;
	rc = file_put(d, d->path, b, rec_encode(d, RDV_PUBLISH, d->blob,
						 d->len, b));
	while (!rc && pending) {
		unsigned before = pending;

		for (unsigned r = 1; r < d->world; r++) {
			struct rdv_rec a;
			ssize_t n;

			if (got[r])
				continue;
			ack_path(d, r, path, sizeof(path));
			n = file_get(path, b);
			if (n < 0 || rec_decode(b, (size_t)n, &a) ||
			    a.kind != RDV_ACK || a.rank != r ||
			    rec_foreign(d, &a, path))
				continue;
			if (a.nonce != d->nonce) {
				snprintf(d->seen, sizeof(d->seen), "%.300s answers "
					 "another publication (an earlier "
					 "job's)", path);
				continue;
			}
			got[r] = 1;
			pending--;
		}
		if (!pending)
			break;
		if (!left_ms(d->deadline_ms)) {
			list_missing(got, d->world, missing, sizeof(missing));
			util_msg(d->msg, d->msg_len, "rendezvous %s: %s (%u "
				 "of %u) did not answer within %u ms: are "
				 "they running, with the same rendezvous and "
				 "job '%s'?%s%s", d->where, missing, pending,
				 d->world - 1, d->timeout_ms, d->job,
				 d->seen[0] ? " " : "", d->seen);
			rc = -ETIMEDOUT;
			break;
		}
		wait = pending < before ? RDV_POLL_MIN_MS :
		       backoff(wait, RDV_POLL_MAX_MS);
		nap(d, wait);
	}
	if (!rc)
		rc = file_put(d, d->path, b, rec_encode(d, RDV_DONE, NULL, 0,
							 b));
	for (unsigned r = 1; r < d->world; r++) {
		if (!got[r])
			continue;
		ack_path(d, r, path, sizeof(path));
		unlink(path);
	}
	free(got);
	return rc;
}

static int file_join(struct rdv *d, unsigned char *b)
{
	unsigned char *copy = d->len ? malloc(d->len) : NULL;
	unsigned char *ack = malloc(RDV_REC_MAX);
	char path[PATH_MAX + 32];
	unsigned wait = RDV_POLL_MIN_MS;
	bool acked = false, any = false;
	uint64_t acked_nonce = 0;
	int rc = 0;

	if ((d->len && !copy) || !ack) {
		rc = -ENOMEM;
		goto out_free;
	}
	ack_path(d, d->rank, path, sizeof(path));
	for (;;) {
		struct rdv_rec p;
		ssize_t n = file_get(d->path, b);

		if (n >= 0 && !rec_decode(b, (size_t)n, &p)) {
			any = true;
			if (rec_foreign(d, &p, d->path)) {
				/* an earlier job's: wait for ours */
			} else if (p.kind == RDV_PUBLISH && p.rank == 0 &&
				   p.payload_len == d->len &&
				   (!acked || p.nonce != acked_nonce)) {
				if (d->len)
					memcpy(copy, p.payload, d->len);
				d->nonce = p.nonce;
				rc = file_put(d, path, ack, rec_encode(d,
					      RDV_ACK, NULL, 0, ack));
				if (rc)
					goto out_free;
				acked = true;
				acked_nonce = p.nonce;
				wait = RDV_POLL_MIN_MS;
				continue;
			} else if (p.kind == RDV_DONE && acked &&
				   p.nonce == acked_nonce) {
				if (d->len)
					memcpy(d->blob, copy, d->len);
				break;
			}
		}
		if (!left_ms(d->deadline_ms)) {
			if (acked)
				util_msg(d->msg, d->msg_len, "rendezvous %s: "
					 "rank %u answered rank 0, but rank 0 "
					 "did not hear from every rank within "
					 "%u ms (another rank missing?)",
					 d->where, d->rank, d->timeout_ms);
			else
				util_msg(d->msg, d->msg_len, "rendezvous %s: "
					 "no word from rank 0 of job '%s' "
					 "within %u ms (%s): is rank 0 "
					 "running, and do all ranks see the "
					 "same file?", d->where, d->job,
					 d->timeout_ms, d->seen[0] ? d->seen :
					 any ? "a record that is not ours" :
					 "no such file yet");
			rc = -ETIMEDOUT;
			break;
		}
		wait = backoff(wait, RDV_POLL_MAX_MS);
		nap(d, wait);
	}
out_free:
	free(ack);
	free(copy);
	return rc;
}

/* ---- tcp: ---- */

/* Reads one record into b (RDV_REC_MAX) and decodes it. */
static int sock_get(int fd, unsigned char *b, struct rdv_rec *r,
		    uint64_t deadline)
{
	size_t total;
	int rc;

	rc = util_sock_io(fd, b, RDV_HDR_BYTES, false, deadline);
	if (rc)
		return rc;
	if (rec_head(b, r, &total))
		return -EBADMSG;
	rc = util_sock_io(fd, b + RDV_HDR_BYTES, total - RDV_HDR_BYTES, false,
		     deadline);
	return rc ? rc : rec_decode(b, total, r);
}

static uint64_t conn_deadline(const struct rdv *d)
{
	uint64_t t = util_now_ms() + RDV_CONN_MS;

	return t < d->deadline_ms ? t : d->deadline_ms;
}

/* Listens on every local address at the port (IPv6 with IPv4 mapped,
 * else IPv4): the fd, or -errno. */
static int tcp_listen(struct rdv *d)
{
	unsigned port = (unsigned)atoi(d->port);
	int backlog = d->world > 128 ? 128 : (int)d->world;
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
				   .sin6_addr = IN6ADDR_ANY_INIT,
				   .sin6_port = htons((uint16_t)port) };
	struct sockaddr_in a4 = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_ANY),
				  .sin_port = htons((uint16_t)port) };
	int one = 1, zero = 0, fd, rc;

	fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, (struct sockaddr *)&a6, sizeof(a6)))
			goto out_listen;
		rc = -errno;
		close(fd);
		if (rc == -EADDRINUSE)
			return rc;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a4, sizeof(a4))) {
		rc = -errno;
		close(fd);
		return rc;
	}
out_listen:
	if (listen(fd, backlog)) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* One connection to rank 0: hello in, reply or refusal out, ack in.
 * Returns the rank served, or 0 when there was none. */
static unsigned tcp_serve_one(struct rdv *d, int fd, unsigned char *b,
			      const unsigned char *got)
{
	uint64_t deadline = conn_deadline(d);
	char who[32], why[sizeof(d->seen)] = "";
	struct rdv_rec h, a;
	size_t n;

	if (sock_get(fd, b, &h, deadline) || h.kind != RDV_HELLO)
		return 0;   /* not one of ours, or gone: nothing to say */
	snprintf(who, sizeof(who), "rank %u's hello", h.rank);
	if (rec_foreign(d, &h, who))
		snprintf(why, sizeof(why), "%s", d->seen);
	else if (h.rank == 0 || h.rank >= d->world)
		snprintf(why, sizeof(why), "rank %u is not in 1..%u", h.rank,
			 d->world - 1);
	else if (got[h.rank])
		snprintf(why, sizeof(why), "rank %u came twice: two processes "
			 "with RANK=%u?", h.rank, h.rank);
	if (why[0]) {
		snprintf(d->seen, sizeof(d->seen), "(refused a connection: "
			 "%s)", why);
		n = rec_encode(d, RDV_REFUSE, why, strlen(why), b);
		util_sock_io(fd, b, n, true, deadline);
		return 0;
	}
	n = rec_encode(d, RDV_REPLY, d->blob, d->len, b);
	if (util_sock_io(fd, b, n, true, deadline) ||
	    sock_get(fd, b, &a, deadline) || a.kind != RDV_ACK ||
	    a.rank != h.rank || a.nonce != d->nonce || rec_foreign(d, &a, ""))
		return 0;
	return h.rank;
}

static int tcp_serve(struct rdv *d, unsigned char *b)
{
	unsigned char *got = calloc(d->world, 1);
	unsigned pending = d->world - 1;
	char missing[160];
	int lfd, rc = 0;

	if (!got)
		return -ENOMEM;
	for (;;) {
		lfd = tcp_listen(d);
		if (lfd != -EADDRINUSE || !left_ms(d->deadline_ms))
			break;
		nap(d, 200);   /* an earlier process may be on its way out */
	}
	if (lfd < 0) {
		rc = lfd;
		util_msg(d->msg, d->msg_len, "rendezvous %s: rank 0 cannot "
			 "listen on port %s: %s%s", d->where, d->port,
			 strerror(-rc), rc == -EADDRINUSE ? " (another "
			 "program has it: under torchrun MASTER_PORT is "
			 "torchrun's own; give another port)" : "");
		free(got);
		return rc;
	}
	while (pending) {
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		unsigned r;
		int fd, pr;

		if (!left_ms(d->deadline_ms)) {
			list_missing(got, d->world, missing, sizeof(missing));
			util_msg(d->msg, d->msg_len, "rendezvous %s: %s (%u "
				 "of %u) did not connect to port %s within "
				 "%u ms: are they running, with the same "
				 "rendezvous and job '%s'?%s%s", d->where,
				 missing, pending, d->world - 1, d->port,
				 d->timeout_ms, d->job, d->seen[0] ? " " : "",
				 d->seen);
			rc = -ETIMEDOUT;
			break;
		}
		pr = poll(&pf, 1, poll_ms(d->deadline_ms));
		if (pr < 0 && errno != EINTR) {
			rc = -errno;
			util_msg(d->msg, d->msg_len, "rendezvous %s: waiting "
				 "for connections: %s", d->where,
				 strerror(-rc));
			break;
		}
		if (pr <= 0)
			continue;   /* EINTR or the time is up: look again */
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			/* the peer gave up already, or out of descriptors
			 * for a moment: not worth a busy loop */
			nap(d, RDV_POLL_MIN_MS);
			continue;
		}
		r = tcp_serve_one(d, fd, b, got);
		close(fd);
		if (r) {
			got[r] = 1;
			pending--;
		}
	}
	close(lfd);
	free(got);
	return rc;
}

/* Connects to rank 0 by the deadline: the fd, or -errno with why in
 * d->seen. */
static int tcp_connect(struct rdv *d, uint64_t deadline)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *p;
	int fd = -ECONNREFUSED, gai;

	gai = getaddrinfo(d->host, d->port, &hints, &ai);
	if (gai) {
		snprintf(d->seen, sizeof(d->seen), "cannot resolve '%s': %s",
			 d->host, gai_strerror(gai));
		return -EHOSTUNREACH;
	}
	for (p = ai; p; p = p->ai_next) {
		struct pollfd pf;
		socklen_t sl = sizeof(int);
		int err = 0;

		fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK |
			    SOCK_CLOEXEC, p->ai_protocol);
		if (fd < 0) {
			fd = -errno;
			continue;
		}
		if (connect(fd, p->ai_addr, p->ai_addrlen) &&
		    errno != EINPROGRESS) {
			err = errno;
		} else {
			pf = (struct pollfd){ .fd = fd, .events = POLLOUT };
			if (poll(&pf, 1, poll_ms(deadline)) <= 0)
				err = ETIMEDOUT;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err,
					    &sl))
				err = errno;
		}
		if (!err)
			break;
		close(fd);
		fd = -err;
		snprintf(d->seen, sizeof(d->seen), "connecting to %s port %s: "
			 "%s", d->host, d->port, strerror(err));
	}
	freeaddrinfo(ai);
	return fd;
}

/* One attempt: 0, 1 to try again, or a negative errno to give up. */
static int tcp_join_once(struct rdv *d, unsigned char *b)
{
	uint64_t deadline = conn_deadline(d);
	struct rdv_rec r;
	size_t n;
	int fd, rc;

	fd = tcp_connect(d, deadline);
	if (fd < 0)
		return 1;
	n = rec_encode(d, RDV_HELLO, NULL, 0, b);
	rc = util_sock_io(fd, b, n, true, deadline);
	if (!rc)
		rc = sock_get(fd, b, &r, deadline);
	if (!rc && r.kind == RDV_REFUSE) {
		util_msg(d->msg, d->msg_len, "rendezvous %s: rank 0 refused "
			 "rank %u: %.*s", d->where, d->rank,
			 (int)r.payload_len, (const char *)r.payload);
		close(fd);
		return -EPROTO;
	}
	if (!rc && (r.kind != RDV_REPLY || r.rank != 0 || !r.nonce ||
		    r.payload_len != d->len || rec_foreign(d, &r, "rank 0")))
		rc = -EBADMSG;
	if (!rc) {
		if (d->len)
			memcpy(d->blob, r.payload, d->len);
		d->nonce = r.nonce;
		n = rec_encode(d, RDV_ACK, NULL, 0, b);
		rc = util_sock_io(fd, b, n, true, deadline);
	}
	close(fd);
	if (rc && rc != -EBADMSG)
		snprintf(d->seen, sizeof(d->seen), "talking to %s port %s: %s",
			 d->host, d->port, strerror(-rc));
	else if (rc)
		snprintf(d->seen, sizeof(d->seen), "%s port %s answered with "
			 "something that is not rank 0's reply", d->host,
			 d->port);
	return rc ? 1 : 0;
}

static int tcp_join(struct rdv *d, unsigned char *b)
{
	unsigned wait = 50;
	int rc;

	for (;;) {
		rc = tcp_join_once(d, b);
		if (rc <= 0)
			return rc;
		if (!left_ms(d->deadline_ms))
			break;
		nap(d, wait);
		wait = backoff(wait, RDV_RETRY_MAX_MS);
	}
	util_msg(d->msg, d->msg_len, "rendezvous %s: no answer from rank 0 "
		 "within %u ms (%s): is rank 0 running, and is %s its "
		 "address?", d->where, d->timeout_ms, d->seen, d->host);
	return -ETIMEDOUT;
}

/* ---- parsing, the entry point ---- */

static int bad_where(struct rdv *d, const char *why)
{
	util_msg(d->msg, d->msg_len, "rendezvous '%s': %s; give file:PATH "
		 "(a file every rank sees) or tcp:HOST:PORT (rank 0's "
		 "address and a free port)", d->where, why);
	return -EINVAL;
}

static int parse_where(struct rdv *d)
{
	const char *w = d->where, *host, *colon;
	size_t hlen;
	char *end;
	long port;

	if (!strncmp(w, "file:", 5)) {
		w += 5;
		if (!*w || strlen(w) >= sizeof(d->path) - 64)
			return bad_where(d, "the path is empty or too long");
		snprintf(d->path, sizeof(d->path), "%s", w);
		return 0;
	}
	if (strncmp(w, "tcp:", 4))
		return bad_where(d, "unknown kind");
	host = w + 4;
	if (*host == '[') {   /* [IPv6]:PORT */
		colon = strchr(host, ']');
		if (!colon || colon[1] != ':')
			return bad_where(d, "no ']:' after an IPv6 address");
		host++;
		hlen = (size_t)(colon - host);
		colon++;
	} else {
		colon = strchr(host, ':');
		if (colon && strchr(colon + 1, ':'))
			return bad_where(d, "write an IPv6 address in brackets, "
					 "tcp:[ADDR]:PORT");
		hlen = colon ? (size_t)(colon - host) : 0;
	}
	if (!colon || !hlen || hlen > RDV_HOST_MAX)
		return bad_where(d, "no HOST:PORT");
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
		return bad_where(d, "the port is not a number from 1 to 65535");
	memcpy(d->host, host, hlen);
	d->host[hlen] = '\0';
	snprintf(d->port, sizeof(d->port), "%ld", port);
	d->tcp = true;
	return 0;
}

int train_rendezvous(const char *where, const char *job, unsigned rank,
		     unsigned world_size, void *blob, size_t len,
		     unsigned timeout_ms, char *msg, size_t msg_len)
{
	struct rdv d = {
		.where = where ? where : "", .job = job ? job : "",
		.rank = rank, .world = world_size, .blob = blob, .len = len,
		.timeout_ms = timeout_ms, .msg = msg, .msg_len = msg_len,
	};
	unsigned char *b;
	int rc;

	if (msg && msg_len)
		msg[0] = '\0';
	rc = parse_where(&d);
	if (rc)
		return rc;
	d.job_len = strlen(d.job);
	if (d.job_len > RDV_JOB_MAX) {
		util_msg(msg, msg_len, "rendezvous %s: the job string is %zu "
			 "bytes, over the %d-byte limit", d.where, d.job_len,
			 RDV_JOB_MAX);
		return -EINVAL;
	}
	if (len > RDV_BLOB_MAX || (len && !blob)) {
		util_msg(msg, msg_len, "rendezvous %s: a blob of %zu bytes%s; "
			 "at most %d", d.where, len, len && !blob ?
			 " without its buffer" : "", RDV_BLOB_MAX);
		return -EINVAL;
	}
	if (!world_size || world_size > RDV_WORLD_MAX || rank >= world_size) {
		util_msg(msg, msg_len, "rendezvous %s: rank %u of a world of "
			 "%u: give 0 <= rank < world size <= %u", d.where,
			 rank, world_size, RDV_WORLD_MAX);
		return -EINVAL;
	}
	if (world_size == 1)
		return 0;   /* nobody to hand it to */
	b = malloc(RDV_REC_MAX + 1);
	if (!b)
		return -ENOMEM;
	d.deadline_ms = util_now_ms() + timeout_ms;
	if (rank == 0)
		d.nonce = fresh_nonce();
	if (d.tcp)
		rc = rank ? tcp_join(&d, b) : tcp_serve(&d, b);
	else
		rc = rank ? file_join(&d, b) : file_serve(&d, b);
	free(b);
	if (rc == -ENOMEM)
		util_msg(msg, msg_len, "rendezvous %s: out of memory", d.where);
	return rc;
}
