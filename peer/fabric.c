/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the cache group's RDMA data plane, through libfabric
 * (docs/cluster-cache.md, "Transport interface and RDMA").
 *
 * The control stays on the TCP connection (HELLO, AUTH, GET); only the
 * bytes of a DATA move one-sided: the owner registers the run it filled
 * for remote read and sends its address and key, the reader pulls it
 * with fi_read into a registered buffer of its own, checks the CRCs and
 * sends RELEASE, and the owner closes the registration.  One FI_EP_RDM
 * endpoint per mount serves both sides.
 *
 * Progress: the providers used here (tcp;ofi_rxm on this machine,
 * verbs;ofi_rxm on an RDMA network) progress data manually, so every
 * thread that waits for a transfer, the reader for its completion and
 * the owner for RELEASE, drives the completion queue itself
 * (peer_fabric_progress).  Completions are dispatched to the operation
 * they name; a reader that gives up on a read leaves its buffer with
 * the operation, and whoever later reads its completion frees both (the
 * provider may still write into it until then: the caller's buffer is
 * never the target).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "peer/peer.h"
#include "util/util.h"

#if HAVE_LIBFABRIC
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <openssl/rand.h>

#define FAB_VERSION FI_VERSION(1, 17)
#define AV_CACHE 64

struct fab_op {
	struct fi_context ctx;     /* first: FI_CONTEXT mode */
	atomic_int state;          /* 0 posted, 1 done, -errno failed */
	bool abandoned;            /* under cq_lock */
	struct fid_mr *mr;
	void *buf;
	size_t cap;
	struct fab_op *next;       /* the free or abandoned list */
	struct fab_op **prev;      /* on the abandoned list: its link */
};

/* A buffer an owner exposed whose reader never said RELEASE: the
 * provider may still send from it (closing the registration does not
 * stop a reply tcp;ofi_rxm has queued), so it is freed only after the
 * endpoint is closed. */
struct fab_parked {
	struct fab_parked *next;
	void *buf;
};

struct av_entry {
	unsigned char addr[PEER_FABRIC_ADDR_MAX];
	size_t len;
	fi_addr_t fa;
};

struct peer_fabric {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	char prov[64];
	unsigned char addr[PEER_FABRIC_ADDR_MAX];
	size_t addr_len;
	pthread_mutex_t cq_lock;   /* fi_cq_read, abandoned, nabandoned */
	pthread_mutex_t lock;      /* av cache, free ops, parked */
	struct av_entry avs[AV_CACHE];
	unsigned navs, av_next;
	struct fab_op *free_ops;
	unsigned nfree;
	struct fab_op *abandoned;  /* reads given up, not completed yet */
	unsigned nabandoned;
	struct fab_parked *parked;
	unsigned nparked;
	atomic_uint_fast64_t reads, bytes;
};

/* Reads given up on and buffers parked, at most: past either, reads
 * fail at once (the member is called down, the reader uses the bucket)
 * and owners answer inline, so a peer that never finishes cannot make
 * this mount hold more than (8 + 8) x 8 MiB. */
#define ABANDONED_MAX 8
#define PARKED_MAX 8

struct peer_fabric_exposed {
	struct fid_mr *mr;
};

bool peer_fabric_built(void)
{
	return true;
}

static void fab_msg(char *msg, size_t len, const char *what, int rc)
{
	util_msg(msg, len, "libfabric: %s: %s", what, fi_strerror(-rc));
}

int peer_fabric_open(const char *host, const char *prov,
		     struct peer_fabric **out, char *msg, size_t msg_len)
{
	struct fi_info *hints, *info = NULL;
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT,
				  .size = 1024 };
	struct fi_av_attr ava = { .type = FI_AV_MAP };
	struct peer_fabric *f;
	size_t alen;
	int rc;

	hints = fi_allocinfo();
	if (!hints)
		return -ENOMEM;
	hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->mode = FI_CONTEXT;
	if (prov && *prov) {
		hints->fabric_attr->prov_name = strdup(prov);
		if (!hints->fabric_attr->prov_name) {
			fi_freeinfo(hints);
			return -ENOMEM;
		}
	}
	rc = fi_getinfo(FAB_VERSION, host, NULL, FI_SOURCE, hints, &info);
	fi_freeinfo(hints);
	if (rc || !info) {
		util_msg(msg, msg_len, "libfabric: no provider %s%soffers "
			 "RDMA reads on %s (%s)", prov && *prov ? prov : "",
			 prov && *prov ? " " : "", host,
			 rc ? fi_strerror(-rc) : "none found");
		return -ENODEV;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		fi_freeinfo(info);
		return -ENOMEM;
	}
	f->info = info;
	pthread_mutex_init(&f->cq_lock, NULL);
	pthread_mutex_init(&f->lock, NULL);
	snprintf(f->prov, sizeof(f->prov), "%s", info->fabric_attr->prov_name);
	rc = fi_fabric(info->fabric_attr, &f->fabric, NULL);
	if (rc) {
		fab_msg(msg, msg_len, "fi_fabric", rc);
		goto fail;
	}
	rc = fi_domain(f->fabric, info, &f->domain, NULL);
	if (rc) {
		fab_msg(msg, msg_len, "fi_domain", rc);
		goto fail;
	}
	rc = fi_cq_open(f->domain, &cqa, &f->cq, NULL);
	if (!rc)
		rc = fi_av_open(f->domain, &ava, &f->av, NULL);
	if (!rc)
		rc = fi_endpoint(f->domain, info, &f->ep, NULL);
	if (!rc)
		rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_ep_bind(f->ep, &f->av->fid, 0);
	if (!rc)
		rc = fi_enable(f->ep);
	if (rc) {
		fab_msg(msg, msg_len, "opening the endpoint", rc);
		goto fail;
	}
	alen = sizeof(f->addr);
	rc = fi_getname(&f->ep->fid, f->addr, &alen);
	if (rc) {
		fab_msg(msg, msg_len, "fi_getname", rc);
		goto fail;
	}
	f->addr_len = alen;
	*out = f;
	return 0;
fail:
	peer_fabric_close(f);
	return rc < 0 ? rc : -EIO;
}

static void op_free(struct fab_op *op)
{
	if (op->mr)
		fi_close(&op->mr->fid);
	free(op->buf);
	free(op);
}

/* A key for a registration: random where the provider takes ours (a
 * collision fails the registration, and the answer goes inline). */
static uint64_t new_key(void)
{
	uint64_t k = 0;

	if (RAND_bytes((unsigned char *)&k, sizeof(k)) != 1)
		k = util_now_ms() * 0x9e3779b97f4a7c15ull;
	return k;
}

void peer_fabric_close(struct peer_fabric *f)
{
	struct fab_op *op;
	struct fab_parked *pk;

	if (!f)
		return;
	/* The endpoint first: after it no transfer touches any buffer,
	 * so reads given up on and parked buffers can go. */
	if (f->ep)
		fi_close(&f->ep->fid);
	while ((op = f->abandoned)) {
		f->abandoned = op->next;
		op_free(op);
	}
	while ((pk = f->parked)) {
		f->parked = pk->next;
		free(pk->buf);
		free(pk);
	}
	while ((op = f->free_ops)) {
		f->free_ops = op->next;
		op_free(op);
	}
	if (f->av)
		fi_close(&f->av->fid);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
	pthread_mutex_destroy(&f->cq_lock);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

const char *peer_fabric_provider(const struct peer_fabric *f)
{
	return f->prov;
}

size_t peer_fabric_addr(const struct peer_fabric *f, const unsigned char **a)
{
	*a = f->addr;
	return f->addr_len;
}

/* A read given up on has completed (cq_lock held): nothing writes into
 * its buffer any more. */
static void abandoned_done(struct peer_fabric *f, struct fab_op *op)
{
	*op->prev = op->next;
	if (op->next)
		op->next->prev = op->prev;
	f->nabandoned--;
	op_free(op);
}

/* Reads what the completion queue holds and marks each operation named
 * done or failed; an abandoned one is freed here. */
void peer_fabric_progress(struct peer_fabric *f)
{
	struct fi_cq_entry e[8];
	struct fi_cq_err_entry err;
	ssize_t n;

	pthread_mutex_lock(&f->cq_lock);
	for (;;) {
		n = fi_cq_read(f->cq, e, 8);
		if (n == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			if (fi_cq_readerr(f->cq, &err, 0) == 1 &&
			    err.op_context) {
				struct fab_op *op = err.op_context;

				if (op->abandoned)
					abandoned_done(f, op);
				else
					atomic_store(&op->state,
						     err.err ? -err.err : -EIO);
			}
			continue;
		}
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			struct fab_op *op = e[i].op_context;

			if (!op)
				continue;
			if (op->abandoned)
				abandoned_done(f, op);
			else
				atomic_store(&op->state, 1);
		}
	}
	pthread_mutex_unlock(&f->cq_lock);
}

int peer_fabric_expose(struct peer_fabric *f, void *buf, size_t len,
		       uint64_t *raddr, uint64_t *key,
		       struct peer_fabric_exposed **out)
{
	struct peer_fabric_exposed *x;
	int mode = f->info->domain_attr->mr_mode;
	unsigned parked;
	int rc;

	pthread_mutex_lock(&f->lock);
	parked = f->nparked;
	pthread_mutex_unlock(&f->lock);
	if (parked >= PARKED_MAX)
		return -ENOBUFS;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	rc = fi_mr_reg(f->domain, buf, len, FI_REMOTE_READ, 0, new_key(), 0,
		       &x->mr, NULL);
	if (rc) {
		free(x);
		return rc < 0 ? rc : -EIO;
	}
	*key = fi_mr_key(x->mr);
	*raddr = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
	*out = x;
	return 0;
}

void peer_fabric_unexpose(struct peer_fabric_exposed *x)
{
	if (!x)
		return;
	fi_close(&x->mr->fid);
	free(x);
}

void peer_fabric_park(struct peer_fabric *f, void *buf)
{
	struct fab_parked *pk = malloc(sizeof(*pk));

	if (!pk) {
		/* Better a leak than a provider sending freed memory. */
		return;
	}
	pk->buf = buf;
	pthread_mutex_lock(&f->lock);
	pk->next = f->parked;
	f->parked = pk;
	f->nparked++;
	pthread_mutex_unlock(&f->lock);
}

/* The address's handle in the AV, inserted on first use (f->lock). */
static int resolve(struct peer_fabric *f, const unsigned char *addr,
		   size_t len, fi_addr_t *fa)
{
	struct av_entry *e;
	int rc = 0;

	/* fi_av_insert reads as many bytes as the provider's format has:
	 * only an address as long as ours is one. */
	if (len != f->addr_len)
		return -EPROTO;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->navs; i++)
		if (f->avs[i].len == len && !memcmp(f->avs[i].addr, addr, len)) {
			*fa = f->avs[i].fa;
			goto out;
		}
	/* A full cache reuses its oldest slot; the AV keeps the old
	 * address (a member that restarted), which costs a few bytes. */
	if (fi_av_insert(f->av, addr, 1, fa, 0, NULL) != 1) {
		rc = -EPROTO;
		goto out;
	}
	e = f->navs < AV_CACHE ? &f->avs[f->navs++] :
	    &f->avs[f->av_next++ % AV_CACHE];
	memcpy(e->addr, addr, len);
	e->len = len;
	e->fa = *fa;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static struct fab_op *op_get(struct peer_fabric *f, size_t len)
{
	struct fab_op *op;

	pthread_mutex_lock(&f->lock);
	op = f->free_ops;
	if (op) {
		f->free_ops = op->next;
		f->nfree--;
	}
	pthread_mutex_unlock(&f->lock);
	if (op && op->cap >= len)
		return op;
	if (op)
		op_free(op);
	op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->cap = PEER_RUN_MAX_BYTES;
	if (posix_memalign(&op->buf, 4096, op->cap) ||
	    fi_mr_reg(f->domain, op->buf, op->cap, FI_READ, 0, new_key(), 0,
		      &op->mr, NULL)) {
		op_free(op);
		return NULL;
	}
	return op;
}

static void op_put(struct peer_fabric *f, struct fab_op *op)
{
	pthread_mutex_lock(&f->lock);
	if (f->nfree < 8) {
		op->next = f->free_ops;
		f->free_ops = op;
		f->nfree++;
		op = NULL;
	}
	pthread_mutex_unlock(&f->lock);
	if (op)
		op_free(op);
}

int peer_fabric_read(struct peer_fabric *f, const unsigned char *addr,
		     size_t addr_len, uint64_t raddr, uint64_t key, void *dst,
		     size_t len, uint64_t deadline_ms)
{
	struct fab_op *op;
	fi_addr_t fa;
	ssize_t prc;
	int rc;

	if (len > PEER_RUN_MAX_BYTES)
		return -EMSGSIZE;
	pthread_mutex_lock(&f->cq_lock);
	rc = f->nabandoned >= ABANDONED_MAX ? -ENOBUFS : 0;
	pthread_mutex_unlock(&f->cq_lock);
	if (rc)
		return rc;
	rc = resolve(f, addr, addr_len, &fa);
	if (rc)
		return rc;
	op = op_get(f, len);
	if (!op)
		return -ENOMEM;
	atomic_store(&op->state, 0);
	op->abandoned = false;
	for (;;) {
		prc = fi_read(f->ep, op->buf, len, fi_mr_desc(op->mr), fa,
			      raddr, key, op);
		if (prc != -FI_EAGAIN)
			break;
		peer_fabric_progress(f);
		if (util_now_ms() >= deadline_ms) {
			prc = -ETIMEDOUT;
			break;
		}
	}
	if (prc) {
		op_put(f, op);
		return prc < 0 ? (int)prc : -EIO;
	}
	for (unsigned spin = 0;; spin++) {
		peer_fabric_progress(f);
		rc = atomic_load(&op->state);
		if (rc)
			break;
		if (util_now_ms() >= deadline_ms) {
			pthread_mutex_lock(&f->cq_lock);
			rc = atomic_load(&op->state);
			if (!rc) {
				op->abandoned = true;
				op->next = f->abandoned;
				if (op->next)
					op->next->prev = &op->next;
				op->prev = &f->abandoned;
				f->abandoned = op;
				f->nabandoned++;
			}
			pthread_mutex_unlock(&f->cq_lock);
			if (!rc)
				return -ETIMEDOUT;
			break;
		}
		if (spin > 64)
			usleep(20);
	}
	if (rc == 1) {
		memcpy(dst, op->buf, len);
		atomic_fetch_add(&f->reads, 1);
		atomic_fetch_add(&f->bytes, len);
		rc = 0;
	}
	op_put(f, op);
	return rc < 0 && rc != -ETIMEDOUT ? -EIO : rc;
}

#else /* !HAVE_LIBFABRIC */

bool peer_fabric_built(void)
{
	return false;
}

int peer_fabric_open(const char *host, const char *prov,
		     struct peer_fabric **out, char *msg, size_t msg_len)
{
	(void)host;
	(void)prov;
	*out = NULL;
	util_msg(msg, msg_len, "%s", "this fmfs was built without libfabric "
		 "(apt-get install libfabric-dev, then ./configure)");
	return -ENOTSUP;
}

void peer_fabric_close(struct peer_fabric *f)
{
	(void)f;
}

const char *peer_fabric_provider(const struct peer_fabric *f)
{
	(void)f;
	return "none";
}

size_t peer_fabric_addr(const struct peer_fabric *f, const unsigned char **a)
{
	(void)f;
	*a = NULL;
	return 0;
}

void peer_fabric_progress(struct peer_fabric *f)
{
	(void)f;
}

int peer_fabric_expose(struct peer_fabric *f, void *buf, size_t len,
		       uint64_t *raddr, uint64_t *key,
		       struct peer_fabric_exposed **out)
{
	(void)f, (void)buf, (void)len, (void)raddr, (void)key, (void)out;
	return -ENOTSUP;
}

void peer_fabric_unexpose(struct peer_fabric_exposed *x)
{
	(void)x;
}

void peer_fabric_park(struct peer_fabric *f, void *buf)
{
	(void)f;
	free(buf);
}

int peer_fabric_read(struct peer_fabric *f, const unsigned char *addr,
		     size_t addr_len, uint64_t raddr, uint64_t key, void *dst,
		     size_t len, uint64_t deadline_ms)
{
	(void)f, (void)addr, (void)addr_len, (void)raddr, (void)key;
	(void)dst, (void)len, (void)deadline_ms;
	return -ENOTSUP;
}

#endif
