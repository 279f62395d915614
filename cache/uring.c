/* SPDX-License-Identifier: MIT */
/*
 * uring.c - the cache's I/O engine for cache-file writes (fetched blocks
 * landing on the cache disk) and verification reads (blocks read back to
 * check their CRC32C).  One io_uring shared by every fetch worker, and
 * one completion thread that reaps it: a caller fills an SQE under the
 * submission lock, submits, and sleeps on a semaphore in its own stack
 * frame until the completion thread posts the result.  A counting
 * semaphore holds the requests in flight to the ring's size, so the
 * completion queue (twice the submission queue) cannot overflow.
 *
 * Short transfers are continued by the caller; -EINTR and -EAGAIN are
 * retried.  If io_uring cannot be set up (an old kernel, a seccomp
 * filter) or FMFS_CACHE_URING=0, the engine uses plain pwrite/pread; the
 * choice is made once, when the cache opens, and logged.
 *
 * Reads that serve hits do not come here: a hit is one pread (or a
 * splice by the FUSE layer) either way, and the ring would only add a
 * thread hand-off.
 */
#include <errno.h>
#include <liburing.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_int.h"

#define URING_ENTRIES 64
/* One SQE moves at most this much; longer requests are continued. */
#define URING_IO_MAX (1u << 30)

struct cache_uring {
	bool active;
	struct io_uring ring;
	pthread_mutex_t sq_lock;    /* protects the submission queue */
	sem_t slots;                /* free places in the ring */
	pthread_t reaper;
};

struct uring_req {
	sem_t done;
	/* Written by the reaper, read by the waiter after done.  Atomic
	 * because the slot on the waiter's stack is reused by its next
	 * request, and that order goes through the kernel, out of sight of
	 * race detectors. */
	atomic_int res;
};

static void *uring_reaper(void *arg)
{
	struct cache_uring *u = arg;

	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0, nslots = 0;
		bool stop = false;
		int rc;

		rc = io_uring_wait_cqe(&u->ring, &cqe);
		if (rc == -EINTR || rc == -EAGAIN)
			continue;
		if (rc < 0) {
			cache_log("io_uring wait failed: %s; I/O stops",
				  strerror(-rc));
			return NULL;
		}
		io_uring_for_each_cqe(&u->ring, head, cqe) {
			struct uring_req *req = io_uring_cqe_get_data(cqe);

			n++;
			if (!req) {
				stop = true;
				continue;
			}
			atomic_store_explicit(&req->res, cqe->res,
					      memory_order_relaxed);
			nslots++;
			/* req lives in the waiter's stack: not touched after. */
			sem_post(&req->done);
		}
		io_uring_cq_advance(&u->ring, n);
		while (nslots--)
			sem_post(&u->slots);
		if (stop)
			return NULL;
	}
}

int cache_uring_init(struct cache_uring **out)
{
	struct cache_uring *u = calloc(1, sizeof(*u));
	const char *env = getenv("FMFS_CACHE_URING");
	int rc;

	*out = NULL;
	if (!u)
		return -ENOMEM;
	if (env && !strcmp(env, "0")) {
		cache_log("FMFS_CACHE_URING=0: cache-file I/O uses "
			  "pwrite/pread");
		*out = u;
		return 0;
	}
	rc = io_uring_queue_init(URING_ENTRIES, &u->ring, 0);
	if (rc < 0) {
		cache_log("io_uring unavailable (%s); cache-file I/O uses "
			  "pwrite/pread", strerror(-rc));
		*out = u;
		return 0;
	}
	pthread_mutex_init(&u->sq_lock, NULL);
	sem_init(&u->slots, 0, URING_ENTRIES);
	rc = pthread_create(&u->reaper, NULL, uring_reaper, u);
	if (rc) {
		cache_log("cannot start the io_uring thread (%s); cache-file "
			  "I/O uses pwrite/pread", strerror(rc));
		sem_destroy(&u->slots);
		pthread_mutex_destroy(&u->sq_lock);
		io_uring_queue_exit(&u->ring);
		*out = u;
		return 0;
	}
	u->active = true; /* the normal case: nothing to log */
	*out = u;
	return 0;
}

void cache_uring_free(struct cache_uring *u)
{
	struct io_uring_sqe *sqe;

	if (!u)
		return;
	if (u->active) {
		/* A NOP without a request tells the reaper to stop; every
		 * caller has returned by now, so nothing else is queued. */
		pthread_mutex_lock(&u->sq_lock);
		sqe = io_uring_get_sqe(&u->ring);
		if (sqe) {
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data(sqe, NULL);
			io_uring_submit(&u->ring);
		}
		pthread_mutex_unlock(&u->sq_lock);
		if (sqe)
			pthread_join(u->reaper, NULL);
		else
			pthread_cancel(u->reaper); /* cannot happen: ring idle */
		io_uring_queue_exit(&u->ring);
		sem_destroy(&u->slots);
		pthread_mutex_destroy(&u->sq_lock);
	}
	free(u);
}

bool cache_uring_active(const struct cache_uring *u)
{
	return u->active;
}

/* One request through the ring: the result of one read or write. */
static int uring_one(struct cache_uring *u, bool write, int fd, void *buf,
		     size_t len, uint64_t off)
{
	struct io_uring_sqe *sqe;
	struct uring_req req;
	int rc;

	sem_init(&req.done, 0, 0);
	while (sem_wait(&u->slots) && errno == EINTR)
		;
	pthread_mutex_lock(&u->sq_lock);
	sqe = io_uring_get_sqe(&u->ring);
	if (!sqe) {
		/* The slots bound the ring, so only a bug gets here. */
		pthread_mutex_unlock(&u->sq_lock);
		sem_post(&u->slots);
		sem_destroy(&req.done);
		return -EBUSY;
	}
	if (write)
		io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
	else
		io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
	io_uring_sqe_set_data(sqe, &req);
	rc = io_uring_submit(&u->ring);
	pthread_mutex_unlock(&u->sq_lock);
	if (rc < 0) {
		sem_post(&u->slots);
		sem_destroy(&req.done);
		return rc;
	}
	while (sem_wait(&req.done) && errno == EINTR)
		;
	sem_destroy(&req.done);
	return atomic_load_explicit(&req.res, memory_order_relaxed);
}

static ssize_t plain_one(bool write, int fd, void *buf, size_t len,
			 uint64_t off)
{
	ssize_t n = write ? pwrite(fd, buf, len, (off_t)off) :
			    pread(fd, buf, len, (off_t)off);

	return n < 0 ? -errno : n;
}

static int uring_rw(struct cache_uring *u, bool write, int fd, void *buf,
		    size_t len, uint64_t off)
{
	char *p = buf;
	unsigned again = 0;

	while (len) {
		size_t n = len < URING_IO_MAX ? len : URING_IO_MAX;
		ssize_t res = u->active ? uring_one(u, write, fd, p, n, off) :
					  plain_one(write, fd, p, n, off);

		if (res == -EINTR || res == -EAGAIN) {
			if (++again > 1000)
				return (int)res;
			continue;
		}
		if (res < 0)
			return (int)res;
		if (res == 0)
			return -EIO; /* end of file, or a device that stalls */
		p += res;
		off += (uint64_t)res;
		len -= (size_t)res;
	}
	return 0;
}

int cache_uring_pwrite(struct cache_uring *u, int fd, const void *buf,
		       size_t len, uint64_t off)
{
	return uring_rw(u, true, fd, (void *)buf, len, off);
}

int cache_uring_pread(struct cache_uring *u, int fd, void *buf, size_t len,
		      uint64_t off)
{
	return uring_rw(u, false, fd, buf, len, off);
}
