/* SPDX-License-Identifier: MIT */
/*
 * fmfs_group.c - a mount's membership of a cache group (--peers,
 * --peer-listen, --peer-secret-file, --peer-timeout, --peer-transport;
 * docs/cluster-cache.md):
 * reading and checking the list and the secret, starting the peer client
 * and server next to the cache, and re-reading a list given as a file
 * when it changes (checked every second), so that a list written from a
 * Kubernetes headless service's names reaches every member without a
 * remount.  A list that fails to parse, or no longer names this member,
 * is logged and the one before kept.
 *
 * Lists replaced by a re-read stay allocated until the group is freed:
 * a fetch under way may still hold the one it loaded (cache.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "fmfs.h"
#include "util/util.h"

struct list_node {
	struct peer_group g;
	struct list_node *next;
};

struct fmfs_group {
	char *peers, *listen;
	unsigned char secret[PEER_SECRET_MAX + 1];
	size_t secret_len;
	struct list_node *lists;   /* newest first; lists->g is in use */
	struct peer_client *pc;
	struct peer_server *srv;
	struct peer_fabric *fabric;  /* the RDMA data plane, or NULL */
	struct cache *c;
	/* The re-reader (a list given as a file). */
	bool is_file;
	struct timespec mtime;
	off_t size;
	pthread_t reader;
	bool reader_on;
	pthread_mutex_t lock;      /* protects stopping */
	pthread_cond_t cond;
	bool stopping;
};

/* A list from text or a file: a path that exists is the file. */
static int list_read(struct fmfs_group *gr, struct peer_group *g,
		     struct stat *sb, char *msg, size_t ml)
{
	int rc;

	if (stat(gr->peers, sb)) {
		gr->is_file = false;
		rc = peer_group_parse(gr->peers, gr->listen, g, msg, ml);
	} else {
		gr->is_file = true;
		rc = peer_group_load(gr->peers, gr->listen, g, msg, ml);
	}
	if (rc)
		return rc;
	if (g->self < 0) {
		util_msg(msg, ml, "--peer-listen %s is not one of the members "
			 "in --peers (list this mount's own address there, "
			 "spelled the same)", gr->listen);
		peer_group_release(g);
		return -EINVAL;
	}
	return 0;
}

static int secret_read(struct fmfs_group *gr, const char *path, char *msg,
		       size_t ml)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;

		util_msg(msg, ml, "--peer-secret-file %s: %s", path,
			 strerror(e));
		return -e;
	}
	n = util_read_all(fd, gr->secret, sizeof(gr->secret));
	close(fd);
	if (n < 0) {
		util_msg(msg, ml, "--peer-secret-file %s: %s", path,
			 strerror((int)-n));
		return (int)n;
	}
	while (n > 0 && (gr->secret[n - 1] == '\n' ||
			 gr->secret[n - 1] == '\r'))
		n--;
	if (n < PEER_SECRET_MIN || n > PEER_SECRET_MAX) {
		util_msg(msg, ml, "--peer-secret-file %s: the secret must be "
			 "%d to %d bytes (e.g. head -c 32 /dev/urandom | "
			 "base64 > FILE)", path, PEER_SECRET_MIN,
			 PEER_SECRET_MAX);
		return -EINVAL;
	}
	gr->secret_len = (size_t)n;
	return 0;
}

void fmfs_group_free(struct fmfs_group *gr)
{
	if (!gr)
		return;
	fmfs_group_stop_serving(gr);
	peer_client_free(gr->pc);
	peer_fabric_close(gr->fabric);
	while (gr->lists) {
		struct list_node *n = gr->lists->next;

		peer_group_release(&gr->lists->g);
		free(gr->lists);
		gr->lists = n;
	}
	memset(gr->secret, 0, sizeof(gr->secret));
	pthread_cond_destroy(&gr->cond);
	pthread_mutex_destroy(&gr->lock);
	free(gr->peers);
	free(gr->listen);
	free(gr);
}

/* The data plane --peer-transport names: "tcp" none; "auto" (or NULL)
 * libfabric's verbs provider where this build has libfabric and the
 * listen address is on an RDMA device, else none; anything else a
 * libfabric provider that must open on the listen address's host. */
static int fabric_open(const char *transport, const char *listen,
		       struct peer_fabric **f, char *msg, size_t ml)
{
	char host[PEER_ID_MAX + 1], port[8], m[512];
	bool fixed = transport && strcmp(transport, "auto");
	int rc;

	*f = NULL;
	if (transport && !strcmp(transport, "tcp"))
		return 0;
	if (!fixed && !peer_fabric_built())
		return 0;
	if (peer_split_id(listen, host, sizeof(host), port)) {
		util_msg(msg, ml, "--peer-listen %s: not HOST:PORT", listen);
		return -EINVAL;
	}
	rc = peer_fabric_open(host, fixed ? transport : "verbs;ofi_rxm", f,
			      m, sizeof(m));
	if (rc && fixed) {
		util_msg(msg, ml, "--peer-transport %s: %s (use auto or tcp)",
			 transport, m);
		return -EINVAL;
	}
	return 0;
}

static int group_new(const char *peers, const char *listen,
		     const char *secret_file, struct fmfs_group **out,
		     char *msg, size_t ml)
{
	struct fmfs_group *gr = calloc(1, sizeof(*gr));
	struct stat sb;
	int rc;

	*out = NULL;
	if (!gr)
		return -ENOMEM;
	pthread_mutex_init(&gr->lock, NULL);
	pthread_cond_init(&gr->cond, NULL);
	gr->peers = strdup(peers);
	gr->listen = strdup(listen);
	gr->lists = calloc(1, sizeof(*gr->lists));
	if (!gr->peers || !gr->listen || !gr->lists) {
		fmfs_group_free(gr);
		return -ENOMEM;
	}
	rc = list_read(gr, &gr->lists->g, &sb, msg, ml);
	if (!rc)
		rc = secret_read(gr, secret_file, msg, ml);
	if (rc) {
		fmfs_group_free(gr);
		return rc;
	}
	gr->mtime = sb.st_mtim;
	gr->size = sb.st_size;
	*out = gr;
	return 0;
}

int fmfs_group_check(const char *peers, const char *listen,
		     const char *secret_file, const char *transport,
		     char *msg, size_t ml)
{
	struct fmfs_group *gr;
	int rc = group_new(peers, listen, secret_file, &gr, msg, ml);

	if (!rc)
		rc = fabric_open(transport, listen, &gr->fabric, msg, ml);
	fmfs_group_free(gr);
	return rc;
}

/* Every second: a changed file is read again; a good list replaces the
 * one in use. */
static void *reader_main(void *arg)
{
	struct fmfs_group *gr = arg;

	pthread_mutex_lock(&gr->lock);
	while (!gr->stopping) {
		struct timespec until;
		struct list_node *n;
		struct stat sb;
		char msg[512];

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&gr->cond, &gr->lock, &until);
		if (gr->stopping)
			break;
		pthread_mutex_unlock(&gr->lock);
		if (!stat(gr->peers, &sb) &&
		    (sb.st_mtim.tv_sec != gr->mtime.tv_sec ||
		     sb.st_mtim.tv_nsec != gr->mtime.tv_nsec ||
		     sb.st_size != gr->size)) {
			gr->mtime = sb.st_mtim;
			gr->size = sb.st_size;
			n = calloc(1, sizeof(*n));
			if (n && !list_read(gr, &n->g, &sb, msg, sizeof(msg))) {
				n->next = gr->lists;
				gr->lists = n;
				cache_set_group(gr->c, &n->g, NULL);
				fprintf(stderr, "fmfs: cache group: %s read "
					"again, %u members\n", gr->peers,
					n->g.n);
			} else {
				fprintf(stderr, "fmfs: cache group: %s: %s; "
					"keeping the list of %u members\n",
					gr->peers, n ? msg : "out of memory",
					gr->lists->g.n);
				free(n);
			}
		}
		pthread_mutex_lock(&gr->lock);
	}
	pthread_mutex_unlock(&gr->lock);
	return NULL;
}

int fmfs_group_start(const char *peers, const char *listen,
		     const char *secret_file, unsigned timeout_ms,
		     unsigned total_ms, const char *transport, struct cache *c,
		     struct fmfs_group **out, char *msg, size_t ml)
{
	struct peer_client_config cc;
	struct peer_server_config sc;
	struct fmfs_group *gr;
	int rc = group_new(peers, listen, secret_file, &gr, msg, ml);

	*out = NULL;
	if (rc)
		return rc;
	rc = fabric_open(transport, listen, &gr->fabric, msg, ml);
	if (rc) {
		fmfs_group_free(gr);
		return rc;
	}
	gr->c = c;
	cc = (struct peer_client_config){
		.self_id = listen, .secret = gr->secret,
		.secret_len = gr->secret_len, .timeout_ms = timeout_ms,
		.total_ms = total_ms, .fabric = gr->fabric,
	};
	sc = (struct peer_server_config){
		.listen = listen, .self_id = listen, .secret = gr->secret,
		.secret_len = gr->secret_len, .timeout_ms = timeout_ms,
		.serve = cache_peer_serve, .arg = c, .fabric = gr->fabric,
	};
	rc = peer_client_new(&cc, &gr->pc);
	if (rc) {
		util_msg(msg, ml, "cannot start the peer client: %s",
			 strerror(-rc));
		fmfs_group_free(gr);
		return rc;
	}
	rc = peer_server_start(&sc, &gr->srv, msg, ml);
	if (rc) {
		fmfs_group_free(gr);
		return rc;
	}
	cache_set_group(c, &gr->lists->g, gr->pc);
	if (gr->is_file && !pthread_create(&gr->reader, NULL, reader_main, gr))
		gr->reader_on = true;
	*out = gr;
	return 0;
}

void fmfs_group_stop_serving(struct fmfs_group *gr)
{
	if (!gr)
		return;
	if (gr->reader_on) {
		pthread_mutex_lock(&gr->lock);
		gr->stopping = true;
		pthread_cond_signal(&gr->cond);
		pthread_mutex_unlock(&gr->lock);
		pthread_join(gr->reader, NULL);
		gr->reader_on = false;
	}
	peer_server_stop(gr->srv);
	gr->srv = NULL;
}
