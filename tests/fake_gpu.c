/* SPDX-License-Identifier: MIT */
/*
 * fake_gpu.c - train/gpu.h answered without a GPU, for tests: linked into
 * tests/fmtrain-fakegpu in place of the CUDA back end (or gpu_none.c), so
 * that fmtrain's --device cuda paths with several ranks (rendezvous,
 * per-rank checkpoints, resume and broadcast, agreeing on saving and
 * stopping) run on any machine.
 *
 * The model is the CPU reference (train/model.h).  The "NCCL" is a star
 * of TCP connections on 127.0.0.1: train_gpu_nccl_id has rank 0 listen
 * on a free port and puts the port in the id; train_gpu_init connects
 * the others to it.  A sum over ranks is gathered by rank 0 in rank
 * order and sent back, so every rank gets the same bits and a run is
 * reproducible, as the real back end's is.  Tensors are host memory;
 * the program is linked with --wrap=ckpt_add, and the wrapper below drops
 * CKPT_ADD_DEVICE (libfmckpt without a GPU refuses it).
 *
 * Not for production: blocking sockets, no timeouts (a test's timeout
 * ends a hang), one machine.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "train/gpu.h"

#define FAKE_MAGIC 0x46414b45u   /* "FAKE" */

struct train_gpu {
	struct train_model *m;
	unsigned rank, world;
	int *fds;        /* rank 0: fds[r] leads to rank r; others: fds[0] */
	float *buf;      /* num_params floats: what rank 0 receives */
	char name[64];
};

static int g_listen = -1;   /* rank 0's, from nccl_id to init */

static int fail(char *msg, size_t msg_len, int rc, const char *what)
{
	if (msg && msg_len)
		snprintf(msg, msg_len, "fake GPU: %s: %s", what,
			 strerror(rc < 0 ? -rc : rc));
	return rc < 0 ? rc : -rc;
}

static int io(int fd, void *p, size_t n, int out)
{
	unsigned char *b = p;

	while (n) {
		ssize_t k = out ? send(fd, b, n, MSG_NOSIGNAL) :
				  recv(fd, b, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -ECONNRESET;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* x[0 .. n-1] summed over the ranks (op 0) or their max (op 1, as
 * uint32), the same bits on every rank. */
static int reduce(struct train_gpu *g, void *x, size_t n, int op)
{
	size_t bytes = n * 4;
	int rc = 0;

	if (g->world == 1)
		return 0;
	if (g->rank) {
		rc = io(g->fds[0], x, bytes, 1);
		return rc ? rc : io(g->fds[0], x, bytes, 0);
	}
	for (unsigned r = 1; r < g->world && !rc; r++) {
		rc = io(g->fds[r], g->buf, bytes, 0);
		for (size_t i = 0; i < n && !rc; i++) {
			if (op == 0) {
				((float *)x)[i] += g->buf[i];
			} else {
				uint32_t v;

				memcpy(&v, &g->buf[i], 4);
				if (v > ((uint32_t *)x)[i])
					((uint32_t *)x)[i] = v;
			}
		}
	}
	for (unsigned r = 1; r < g->world && !rc; r++)
		rc = io(g->fds[r], x, bytes, 1);
	return rc;
}

static int bcast(struct train_gpu *g, void *x, size_t bytes)
{
	int rc = 0;

	if (g->world == 1)
		return 0;
	if (g->rank)
		return io(g->fds[0], x, bytes, 0);
	for (unsigned r = 1; r < g->world && !rc; r++)
		rc = io(g->fds[r], x, bytes, 1);
	return rc;
}

int train_gpu_probe(char *name, size_t name_len, char *msg, size_t msg_len)
{
	if (name && name_len)
		snprintf(name, name_len, "fake GPU (the CPU model)");
	return 0;
}

int train_gpu_nccl_id(unsigned char id[TRAIN_NCCL_ID_BYTES], char *msg,
		      size_t msg_len)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);
	uint32_t v[2];

	g_listen = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g_listen < 0 || bind(g_listen, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(g_listen, 64) ||
	    getsockname(g_listen, (struct sockaddr *)&a, &sl))
		return fail(msg, msg_len, -errno, "listen");
	memset(id, 0, TRAIN_NCCL_ID_BYTES);
	v[0] = FAKE_MAGIC;
	v[1] = ntohs(a.sin_port);
	memcpy(id, v, sizeof(v));
	return 0;
}

static int connect_star(struct train_gpu *g, const unsigned char *id,
			char *msg, size_t msg_len)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint32_t v[2], r;
	int fd;

	memcpy(v, id, sizeof(v));
	if (v[0] != FAKE_MAGIC)
		return fail(msg, msg_len, -EINVAL, "not a fake id");
	if (g->rank == 0) {
		for (unsigned i = 1; i < g->world; i++) {
			fd = accept(g_listen, NULL, NULL);
			if (fd < 0 || io(fd, &r, 4, 0) || !r ||
			    r >= g->world || g->fds[r] >= 0)
				return fail(msg, msg_len, -EPROTO, "accept");
			g->fds[r] = fd;
		}
		close(g_listen);
		g_listen = -1;
		return 0;
	}
	a.sin_port = htons((uint16_t)v[1]);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return fail(msg, msg_len, -errno, "connect to rank 0");
	g->fds[0] = fd;
	r = g->rank;
	return io(fd, &r, 4, 1);
}

int train_gpu_init(const struct train_config *cfg,
		   const struct train_gpu_dist *dist, struct train_gpu **out,
		   char *msg, size_t msg_len)
{
	struct train_gpu *g = calloc(1, sizeof(*g));
	int rc;

	*out = NULL;
	if (!g)
		return -ENOMEM;
	g->rank = dist ? dist->rank : 0;
	g->world = dist ? dist->world_size : 1;
	snprintf(g->name, sizeof(g->name), "fake GPU %u",
		 dist ? dist->local_rank : 0);
	rc = train_model_init(cfg, &g->m, msg, msg_len);
	if (rc) {
		free(g);
		return rc;
	}
	g->fds = malloc(g->world * sizeof(int));
	for (unsigned r = 0; g->fds && r < g->world; r++)
		g->fds[r] = -1;
	g->buf = malloc(train_model_num_params(g->m) * sizeof(float));
	if (!g->fds || !g->buf) {
		train_gpu_free(g);
		return -ENOMEM;
	}
	if (g->world > 1) {
		rc = connect_star(g, dist->nccl_id, msg, msg_len);
		if (rc) {
			train_gpu_free(g);
			return rc;
		}
	}
	*out = g;
	return 0;
}

void train_gpu_free(struct train_gpu *g)
{
	if (!g)
		return;
	for (unsigned r = 0; g->fds && r < g->world; r++)
		if (g->fds[r] >= 0)
			close(g->fds[r]);
	free(g->fds);
	free(g->buf);
	train_model_free(g->m);
	free(g);
}

const struct train_config *train_gpu_config(const struct train_gpu *g)
{
	return train_model_config(g->m);
}

const char *train_gpu_device_name(const struct train_gpu *g)
{
	return g->name;
}

uint64_t train_gpu_bytes(const struct train_gpu *g)
{
	return train_model_bytes(g->m);
}

size_t train_gpu_num_params(const struct train_gpu *g)
{
	return train_model_num_params(g->m);
}

int train_gpu_forward(struct train_gpu *g, const int32_t *inputs,
		      const int32_t *targets, float *loss, char *msg,
		      size_t msg_len)
{
	return train_forward(g->m, inputs, targets, loss, msg, msg_len);
}

void train_gpu_zero_grad(struct train_gpu *g)
{
	train_zero_grad(g->m);
}

int train_gpu_backward(struct train_gpu *g, char *msg, size_t msg_len)
{
	return train_backward(g->m, msg, msg_len);
}

int train_gpu_update(struct train_gpu *g, float *grad_norm, char *msg,
		     size_t msg_len)
{
	size_t n;
	float *grad = train_model_buffer(g->m, TRAIN_GRADS, &n);
	int rc = reduce(g, grad, n, 0);

	if (rc)
		return fail(msg, msg_len, rc, "all-reduce");
	for (size_t i = 0; g->world > 1 && i < n; i++)
		grad[i] /= (float)g->world;
	return train_update(g->m, grad_norm, msg, msg_len);
}

int train_gpu_step(struct train_gpu *g, const int32_t *inputs,
		   const int32_t *targets, float *loss, char *msg,
		   size_t msg_len)
{
	float l;
	int rc;

	train_zero_grad(g->m);
	rc = train_forward(g->m, inputs, targets, &l, msg, msg_len);
	if (!rc)
		rc = train_backward(g->m, msg, msg_len);
	if (!rc)
		rc = train_gpu_update(g, NULL, msg, msg_len);
	if (!rc && (rc = reduce(g, &l, 1, 0)))
		return fail(msg, msg_len, rc, "loss all-reduce");
	if (!rc && loss)
		*loss = l / (float)g->world;
	return rc;
}

int train_gpu_set_learning_rate(struct train_gpu *g, float lr)
{
	return train_set_learning_rate(g->m, lr);
}

const char *train_gpu_kernels(const struct train_gpu *g, char *buf,
			      size_t len)
{
	if (len)
		snprintf(buf, len, "fake (no kernels)");
	return buf;
}

uint64_t train_gpu_step_count(const struct train_gpu *g)
{
	return train_model_step(g->m);
}

void train_gpu_set_step(struct train_gpu *g, uint64_t step)
{
	train_model_set_step(g->m, step);
}

int train_gpu_all_max(struct train_gpu *g, uint32_t *values, unsigned n,
		      char *msg, size_t msg_len)
{
	int rc;

	if (n > TRAIN_GPU_AGREE_MAX)
		return fail(msg, msg_len, -EINVAL, "too many values");
	rc = reduce(g, values, n, 1);
	return rc ? fail(msg, msg_len, rc, "all-reduce (max)") : 0;
}

size_t train_gpu_tensors(struct train_gpu *g, struct train_tensor *out,
			 size_t max)
{
	return train_model_tensors(g->m, out, max);
}

int train_gpu_download(struct train_gpu *g, enum train_kind kind,
		       float *host, char *msg, size_t msg_len)
{
	size_t n;
	const float *b = train_model_buffer(g->m, kind, &n);

	if (!b)
		return fail(msg, msg_len, -EINVAL, "no such kind");
	memcpy(host, b, n * sizeof(float));
	return 0;
}

int train_gpu_upload(struct train_gpu *g, enum train_kind kind,
		     const float *host, char *msg, size_t msg_len)
{
	size_t n;
	float *b = train_model_buffer(g->m, kind, &n);

	if (!b)
		return fail(msg, msg_len, -EINVAL, "no such kind");
	memcpy(b, host, n * sizeof(float));
	return 0;
}

int train_gpu_broadcast(struct train_gpu *g, char *msg, size_t msg_len)
{
	static const enum train_kind kinds[] = {
		TRAIN_PARAMS, TRAIN_ADAM_M, TRAIN_ADAM_V
	};

	for (size_t k = 0; k < 3; k++) {
		size_t n;
		float *b = train_model_buffer(g->m, kinds[k], &n);
		int rc = bcast(g, b, n * sizeof(float));

		if (rc)
			return fail(msg, msg_len, rc, "broadcast");
	}
	return 0;
}

int train_gpu_logits(struct train_gpu *g, float *host, char *msg,
		     size_t msg_len)
{
	const struct train_config *c = train_model_config(g->m);

	memcpy(host, train_model_logits(g->m), (size_t)c->batch *
	       c->seq_len * c->padded_vocab_size * sizeof(float));
	return 0;
}

/* ---- libfmckpt without a GPU takes no device pointers ---- */

int __real_ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		    unsigned ndim, const int64_t *shape, const void *data,
		    uint64_t size_bytes, unsigned flags, char *msg,
		    size_t msg_len);
int __wrap_ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		    unsigned ndim, const int64_t *shape, const void *data,
		    uint64_t size_bytes, unsigned flags, char *msg,
		    size_t msg_len);

int __wrap_ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		    unsigned ndim, const int64_t *shape, const void *data,
		    uint64_t size_bytes, unsigned flags, char *msg,
		    size_t msg_len)
{
	return __real_ckpt_add(c, name, dtype, ndim, shape, data, size_bytes,
			       flags & ~CKPT_ADD_DEVICE, msg, msg_len);
}
