/* SPDX-License-Identifier: MIT */
/*
 * uring.c - FUSE over io_uring (protocol 7.42, Linux >= 6.14 with
 * CONFIG_FUSE_IO_URING and the fuse module's enable_uring set): the
 * kernel hands requests to buffers the daemon registered through
 * io_uring commands on /dev/fuse instead of through read(), and takes
 * the replies the same way.  docs/fuse-uring.md has the protocol.
 *
 * libfuse 3.14 knows nothing of it.  It fits below libfuse through the
 * custom I/O of passthrough.c, as passthrough does:
 *   - the INIT request offers FUSE_OVER_IO_URING and the INIT reply
 *     takes it (pt_read, pt_writev); once that reply is written,
 *     fs_uring_start registers one queue per possible CPU, each with
 *     UR_DEPTH entries (a 288-byte header and a payload of max_write);
 *   - each queue has UR_THREADS_PER_Q rings of its own (threads * CPUs
 *     is about --threads), each ring UR_DEPTH entries and a thread that
 *     waits for its completions.  A completion is a request in the
 *     entry's buffers: the thread puts header and fixed argument back in
 *     front of the payload (the payload has room before it, so a write's
 *     data is not copied) and calls fuse_session_process_buf itself, as
 *     a /dev/fuse worker would.  A handler that blocks on the store holds
 *     one ring of its queue; the others go on;
 *   - every reply reaches pt_writev, which asks fs_uring_reply: a reply
 *     to a request that came by the ring is copied into its entry and
 *     committed with COMMIT_AND_FETCH (which also re-arms the entry);
 *     any other goes to /dev/fuse.
 * /dev/fuse stays in use for INIT, interrupts, forgets and notifications,
 * and for everything until every queue has an entry registered.  Replies
 * are not spliced while the ring is on (op_init drops SPLICE_WRITE):
 * a spliced reply would go to /dev/fuse.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs_int.h"

#define UR_CMD_REGISTER 1u
#define UR_CMD_COMMIT_AND_FETCH 2u
#define UR_DEPTH 2u               /* entries a ring */
#define UR_ROOM 4096u             /* before a payload: header, op_in */
#define UR_IN_HEADER 40u          /* struct fuse_in_header */
#define UR_OUT_HEADER 16u         /* struct fuse_out_header */
#define UR_OP_IN_MAX 128u

/* include/uapi/linux/fuse.h, 7.42 */
struct ur_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};

struct ur_req_header {
	char in_out[128];             /* fuse_in_header / fuse_out_header */
	char op_in[UR_OP_IN_MAX];     /* the opcode's fixed argument */
	struct ur_ent_in_out ent;
};

struct ur_cmd_req {               /* in the SQE's 80-byte command area */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

struct ur_queue;

struct ur_ent {
	struct ur_queue *q;
	struct ur_req_header *hdr;    /* page-aligned: the kernel pins it */
	char *room;                   /* UR_ROOM bytes, then the payload */
	char *payload;
	struct iovec iov[2];
	uint64_t unique;              /* of the request it holds, 0: none */
	struct ur_ent *tnext;         /* in the table */
};

/* One io_uring with its entries and its thread; a CPU's queue (qid) has
 * several. */
struct ur_queue {
	struct fs_uring *u;
	unsigned qid, index;
	struct io_uring ring;
	bool ring_ok;
	pthread_mutex_t lock;         /* the submission queue */
	pthread_t tid;
	bool started;
	int evfd;                     /* wakes the thread to stop */
	struct ur_ent ent[UR_DEPTH];
};

struct fs_uring {
	struct fs *fs;
	int fd;                       /* the session's /dev/fuse */
	unsigned ncpu, per_q, nq;     /* nq = ncpu * per_q rings */
	size_t payload_len;
	struct ur_queue *q;
	/* requests from the ring not yet answered, by unique */
	pthread_mutex_t tlock;
	struct ur_ent **table;
	unsigned tsize;
	atomic_uint_fast64_t requests, replies;
	atomic_bool failed;           /* a ring stopped on an error */
	char why[160];
};

static void *ur_alloc(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, (len + 4095) / 4096 * 4096))
		return NULL;
	memset(p, 0, len);
	return p;
}

/* Prepares a command for e on its queue; q->lock held.  false when the
 * submission queue is full (it cannot be: one SQE per entry). */
static bool ur_prep(struct ur_ent *e, unsigned cmd)
{
	struct ur_queue *q = e->q;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	struct ur_cmd_req *r;

	if (!sqe)
		return false;
	memset(sqe, 0, 2 * sizeof(*sqe));    /* SQE128 */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->flags = IOSQE_FIXED_FILE;
	sqe->fd = 0;
	sqe->cmd_op = cmd;
	io_uring_sqe_set_data(sqe, e);
	if (cmd == UR_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
	r = (struct ur_cmd_req *)sqe->cmd;
	r->qid = (uint16_t)q->qid;
	r->commit_id = cmd == UR_CMD_REGISTER ? 0 : e->unique;
	return true;
}

static int ur_submit(struct ur_ent *e, unsigned cmd)
{
	struct ur_queue *q = e->q;
	int rc;

	pthread_mutex_lock(&q->lock);
	rc = ur_prep(e, cmd) ? io_uring_submit(&q->ring) : -EBUSY;
	pthread_mutex_unlock(&q->lock);
	return rc < 0 ? rc : 0;
}

static void ur_fail(struct fs_uring *u, unsigned qid, const char *what,
		    int err)
{
	if (atomic_exchange(&u->failed, true))
		return;
	snprintf(u->why, sizeof(u->why), "queue %u: %s: %s", qid, what,
		 strerror(err));
	fprintf(stderr, "fmfs: FUSE over io_uring: %s; requests go through "
		"/dev/fuse\n", u->why);
}

/* ---- the table of requests in flight ---- */

static void table_put(struct fs_uring *u, struct ur_ent *e)
{
	unsigned i = (unsigned)(e->unique % u->tsize);

	pthread_mutex_lock(&u->tlock);
	e->tnext = u->table[i];
	u->table[i] = e;
	pthread_mutex_unlock(&u->tlock);
}

static struct ur_ent *table_take(struct fs_uring *u, uint64_t unique)
{
	unsigned i = (unsigned)(unique % u->tsize);
	struct ur_ent **pp, *e = NULL;

	pthread_mutex_lock(&u->tlock);
	for (pp = &u->table[i]; *pp; pp = &(*pp)->tnext) {
		if ((*pp)->unique == unique) {
			e = *pp;
			*pp = e->tnext;
			e->tnext = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&u->tlock);
	return e;
}

/* ---- requests: queue threads and workers ---- */

/* The request in e's buffers, put back together as /dev/fuse delivers
 * one (header, the fixed argument, the payload) in front of the payload:
 * *req and *len.  false if malformed. */
static bool ur_assemble(struct fs_uring *u, struct ur_ent *e, char **req,
			size_t *len)
{
	uint32_t l, psz = e->hdr->ent.payload_sz;
	size_t op;
	char *p;

	memcpy(&l, e->hdr->in_out, sizeof(l));
	if (l < UR_IN_HEADER || psz > u->payload_len ||
	    l - UR_IN_HEADER < psz)
		return false;
	op = l - UR_IN_HEADER - psz;
	if (op > UR_OP_IN_MAX)
		return false;
	p = e->payload - op - UR_IN_HEADER;
	memcpy(p, e->hdr->in_out, UR_IN_HEADER);
	memcpy(p + UR_IN_HEADER, e->hdr->op_in, op);
	memcpy(&e->unique, p + 8, sizeof(e->unique));
	*req = p;
	*len = l;
	return true;
}

/* A request arrived in e: libfuse's handlers take it on this thread. */
static void ur_request(struct fs_uring *u, struct ur_ent *e)
{
	struct fuse_buf b = { 0 };
	char *req;
	size_t len;

	if (!ur_assemble(u, e, &req, &len)) {
		/* Answer it with EIO so that the entry comes back. */
		struct ur_req_header *h = e->hdr;
		int32_t err = -EIO;
		uint32_t olen = UR_OUT_HEADER;

		memcpy(&e->unique, h->in_out + 8, sizeof(e->unique));
		memset(h->in_out, 0, UR_OUT_HEADER);
		memcpy(h->in_out, &olen, sizeof(olen));
		memcpy(h->in_out + 4, &err, sizeof(err));
		memcpy(h->in_out + 8, &e->unique, sizeof(e->unique));
		h->ent.payload_sz = 0;
		ur_submit(e, UR_CMD_COMMIT_AND_FETCH);
		return;
	}
	atomic_fetch_add(&u->requests, 1);
	table_put(u, e);
	b.mem = req;
	b.size = len;
	fuse_session_process_buf(u->fs->se, &b);
}

static void *ur_thread(void *arg)
{
	struct ur_queue *q = arg;
	struct fs_uring *u = q->u;

	for (;;) {
		struct io_uring_cqe *cqe;
		struct ur_ent *e;
		int rc = io_uring_wait_cqe(&q->ring, &cqe), res;

		if (rc == -EINTR)
			continue;
		if (rc < 0) {
			ur_fail(u, q->qid, "waiting for a completion", -rc);
			return NULL;
		}
		e = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&q->ring, cqe);
		if (!e)                   /* the eventfd: stop */
			return NULL;
		if (!res) {
			ur_request(u, e);
		} else if (res == -EAGAIN || res == -EINTR) {
			ur_submit(e, e->unique ? UR_CMD_COMMIT_AND_FETCH :
				  UR_CMD_REGISTER);
		} else {
			/* ENOTCONN: unmounted.  Anything else: the kernel
			 * refused the entry, and the ring is not used. */
			if (res != -ENOTCONN)
				ur_fail(u, q->qid, "the kernel refused an entry",
					-res);
			return NULL;
		}
	}
}

/* ---- replies ---- */

bool fs_uring_reply(struct fs *fs, const struct iovec *iov, int count,
		    ssize_t *sent)
{
	struct fs_uring *u = fs->ur;
	struct ur_ent *e;
	uint64_t unique;
	size_t total = 0, n = 0;
	char *p;

	if (!u || count < 1 || iov[0].iov_len < UR_OUT_HEADER)
		return false;
	memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
	if (!unique || !(e = table_take(u, unique)))
		return false;
	for (int i = 0; i < count; i++)
		total += iov[i].iov_len;
	memcpy(e->hdr->in_out, iov[0].iov_base, UR_OUT_HEADER);
	p = e->payload;
	if (total - UR_OUT_HEADER > u->payload_len) {
		/* cannot be: the payload holds max_write and max_read */
		int32_t err = -EIO;

		memcpy(e->hdr->in_out + 4, &err, sizeof(err));
	} else {
		for (int i = 0; i < count; i++) {
			const char *b = iov[i].iov_base;
			size_t l = iov[i].iov_len;

			if (i == 0) {
				b += UR_OUT_HEADER;
				l -= UR_OUT_HEADER;
			}
			memcpy(p + n, b, l);
			n += l;
		}
	}
	e->hdr->ent.payload_sz = (uint32_t)n;
	atomic_fetch_add(&u->replies, 1);
	if (ur_submit(e, UR_CMD_COMMIT_AND_FETCH))
		ur_fail(u, e->q->qid, "committing a reply", EIO);
	*sent = (ssize_t)total;
	return true;
}

/* ---- start and stop ---- */

static int ur_queue_init(struct fs_uring *u, struct ur_queue *q)
{
	struct io_uring_params p = { 0 };
	int fds[1] = { u->fd }, rc;

	q->evfd = eventfd(0, EFD_CLOEXEC);
	if (q->evfd < 0)
		return -errno;
	p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
	p.cq_entries = 2 * (UR_DEPTH + 1);
	rc = io_uring_queue_init_params(UR_DEPTH + 1, &q->ring, &p);
	if (rc < 0)
		return rc;
	q->ring_ok = true;
	rc = io_uring_register_files(&q->ring, fds, 1);
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < UR_DEPTH; i++) {
		struct ur_ent *e = &q->ent[i];

		e->q = q;
		e->hdr = ur_alloc(sizeof(*e->hdr));
		e->room = ur_alloc(UR_ROOM + u->payload_len);
		if (!e->hdr || !e->room)
			return -ENOMEM;
		e->payload = e->room + UR_ROOM;
		e->iov[0].iov_base = e->hdr;
		e->iov[0].iov_len = sizeof(*e->hdr);
		e->iov[1].iov_base = e->payload;
		e->iov[1].iov_len = u->payload_len;
	}
	return 0;
}

static void ur_free(struct fs_uring *u)
{
	for (unsigned i = 0; i < u->nq; i++) {
		struct ur_queue *q = &u->q[i];

		if (q->ring_ok)
			io_uring_queue_exit(&q->ring);
		if (q->evfd >= 0)
			close(q->evfd);
		for (unsigned k = 0; k < UR_DEPTH; k++) {
			free(q->ent[k].hdr);
			free(q->ent[k].room);
		}
		pthread_mutex_destroy(&q->lock);
	}
	free(u->q);
	free(u->table);
	pthread_mutex_destroy(&u->tlock);
	free(u);
}

/* Registers the queues: after the INIT reply that took the ring went to
 * the kernel.  Failing leaves /dev/fuse in use, saying why once. */
void fs_uring_start(struct fs *fs, size_t payload_len)
{
	struct fs_uring *u = calloc(1, sizeof(*u));
	long n = sysconf(_SC_NPROCESSORS_CONF);
	unsigned threads = fs->cfg.threads ? fs->cfg.threads : 8, i, k;
	int rc = 0;

	if (!u) {
		snprintf(fs->ur_why, sizeof(fs->ur_why), "out of memory");
		return;
	}
	u->fs = fs;
	u->fd = fuse_session_fd(fs->se);
	u->ncpu = n > 0 ? (unsigned)n : 1;
	/* about --threads threads in all, at least one a CPU */
	u->per_q = threads > u->ncpu ? threads / u->ncpu : 1;
	u->nq = u->ncpu * u->per_q;
	u->payload_len = payload_len;
	u->tsize = 2 * u->nq * UR_DEPTH + 1;
	pthread_mutex_init(&u->tlock, NULL);
	u->q = calloc(u->nq, sizeof(*u->q));
	u->table = calloc(u->tsize, sizeof(*u->table));
	if (!u->q || !u->table) {
		snprintf(fs->ur_why, sizeof(fs->ur_why), "out of memory");
		free(u->q);
		u->q = NULL;
		u->nq = 0;
		ur_free(u);
		return;
	}
	for (i = 0; i < u->nq; i++) {
		u->q[i].u = u;
		u->q[i].qid = i / u->per_q;
		u->q[i].index = i;
		u->q[i].evfd = -1;
		pthread_mutex_init(&u->q[i].lock, NULL);
	}
	for (i = 0; i < u->nq && !rc; i++)
		rc = ur_queue_init(u, &u->q[i]);
	if (rc) {
		snprintf(fs->ur_why, sizeof(fs->ur_why), "setting up ring "
			 "%u: %s", i - 1, strerror(-rc));
		fprintf(stderr, "fmfs: FUSE over io_uring: %s; requests go "
			"through /dev/fuse\n", fs->ur_why);
		ur_free(u);
		return;
	}
	/* Published before the first entry is registered: a request can
	 * come, and be answered, as soon as one is. */
	fs->ur = u;
	atomic_store(&fs->ur_on, true);
	fs_tk_ring_used(fs); /* no takeover of a ring (docs/keeper.md) */
	for (i = 0; i < u->nq; i++) {
		struct ur_queue *q = &u->q[i];
		struct io_uring_sqe *sqe;

		pthread_mutex_lock(&q->lock);
		for (k = 0; k < UR_DEPTH; k++)
			ur_prep(&q->ent[k], UR_CMD_REGISTER);
		sqe = io_uring_get_sqe(&q->ring);
		if (sqe) {
			io_uring_prep_poll_add(sqe, q->evfd, POLLIN);
			io_uring_sqe_set_data(sqe, NULL);
		}
		rc = io_uring_submit(&q->ring);
		pthread_mutex_unlock(&q->lock);
		if (rc < 0) {
			ur_fail(u, q->qid, "registering the entries", -rc);
			break;
		}
		q->started = !pthread_create(&q->tid, NULL, ur_thread, q);
	}
}

void fs_uring_stop(struct fs *fs)
{
	struct fs_uring *u = fs->ur;
	uint64_t one = 1;

	if (!u)
		return;
	for (unsigned i = 0; i < u->nq; i++) {
		struct ur_queue *q = &u->q[i];

		if (!q->started)
			continue;
		if (write(q->evfd, &one, sizeof(one)) != sizeof(one))
			fprintf(stderr, "fmfs: io_uring ring %u: cannot wake "
				"it: %s\n", i, strerror(errno));
		pthread_join(q->tid, NULL);
	}
	atomic_store(&fs->ur_on, false);
	fs->ur = NULL;
	ur_free(u);
}

void fs_uring_get_stats(struct fs *fs, struct fs_uring_stats *st)
{
	struct fs_uring *u = fs->ur;

	memset(st, 0, sizeof(*st));
	if (!u)
		return;
	st->queues = u->ncpu;
	st->rings = u->nq;
	st->depth = UR_DEPTH;
	st->requests = atomic_load(&u->requests);
	st->replies = atomic_load(&u->replies);
	st->failed = atomic_load(&u->failed);
	if (st->failed)
		snprintf(st->why, sizeof(st->why), "%s", u->why);
}
