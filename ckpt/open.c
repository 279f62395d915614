/* SPDX-License-Identifier: MIT */
/*
 * open.c - a checkpoint handle opened and closed: the configuration and
 * its environment overrides, the local directory and the remote store
 * checked, the staging memory, the writer, uploader and committer
 * threads started; and all of it stopped and freed at close.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

#define MIB (1024ull * 1024)

/* ---- configuration ---- */

void ckpt_config_init(struct ckpt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	obj_config_init(&cfg->obj);
	cfg->rank = -1;
	cfg->world_size = -1;
}

static int env_int(const char *name, int dflt, int *out, char *msg,
		   size_t msg_len)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (!v || !*v) {
		*out = dflt;
		return 0;
	}
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || n < 0 || n > CKPT_WORLD_MAX) {
		util_msg(msg, msg_len, "%s='%s' is not a number from 0 to %d",
			 name, v, CKPT_WORLD_MAX);
		return -EINVAL;
	}
	*out = (int)n;
	return 0;
}

static int config_apply(struct ckpt *c, const struct ckpt_config *in,
			char *msg, size_t msg_len)
{
	struct ckpt_config *cfg = &c->cfg;
	const char *rid = in->run_id ? in->run_id : getenv("FMCKPT_RUN_ID");
	int rank = in->rank, world = in->world_size, rc;

	*cfg = *in;
	if (rank < 0 && (rc = env_int("RANK", 0, &rank, msg, msg_len)))
		return rc;
	if (world < 0 && (rc = env_int("WORLD_SIZE", 1, &world, msg,
				       msg_len)))
		return rc;
	if (world < 1 || world > CKPT_WORLD_MAX || rank >= world) {
		util_msg(msg, msg_len, "rank %d with world size %d: give 0 <= "
			 "RANK < WORLD_SIZE <= %d", rank, world,
			 CKPT_WORLD_MAX);
		return -EINVAL;
	}
	c->rank = (uint32_t)rank;
	c->world = (uint32_t)world;
	if (rid && strlen(rid) > CKPT_RUN_ID_MAX) {
		util_msg(msg, msg_len, "run id '%s' is longer than %d bytes",
			 rid, CKPT_RUN_ID_MAX);
		return -EINVAL;
	}
	snprintf(c->run_id, sizeof(c->run_id), "%s", rid ? rid : "");
	if (!cfg->chunk_bytes)
		cfg->chunk_bytes = 8 * MIB;
	if (in->remote && cfg->chunk_bytes < 5 * MIB)
		cfg->chunk_bytes = 5 * MIB; /* S3's smallest part */
	if (cfg->chunk_bytes > 1024 * MIB) {
		util_msg(msg, msg_len, "chunk size %llu is over 1 GiB",
			 (unsigned long long)cfg->chunk_bytes);
		return -EINVAL;
	}
	cfg->chunk_bytes = (cfg->chunk_bytes + 4095) & ~4095ull;
	if (!cfg->staging_bytes)
		cfg->staging_bytes = 256 * MIB;
	if (cfg->staging_bytes < cfg->chunk_bytes)
		cfg->staging_bytes = cfg->chunk_bytes;
	cfg->staging_bytes -= cfg->staging_bytes % cfg->chunk_bytes;
	if (!cfg->io_depth)
		cfg->io_depth = 8;
	if (cfg->io_depth > 64)
		cfg->io_depth = 64;
	if (!cfg->upload_parallel)
		cfg->upload_parallel = 16;
	if (cfg->upload_parallel > 64)
		cfg->upload_parallel = 64;
	if (!cfg->barrier_timeout_ms)
		cfg->barrier_timeout_ms = 600000;
	if (!cfg->max_pending_steps)
		cfg->max_pending_steps = 4;
	cfg->dir = NULL;
	cfg->remote = NULL;
	cfg->run_id = NULL;
	return 0;
}

static int open_dir(struct ckpt *c, const char *dir, char *msg,
		    size_t msg_len)
{
	struct stat sb;
	size_t n = strlen(dir);

	if (!n || n > PATH_MAX - 128) {
		util_msg(msg, msg_len, "checkpoint directory '%s': give a path "
			 "of 1 to %d bytes", dir, PATH_MAX - 128);
		return -EINVAL;
	}
	c->dir = strdup(dir);
	if (!c->dir)
		return -ENOMEM;
	while (n > 1 && c->dir[n - 1] == '/')
		c->dir[--n] = '\0';
	if (!c->cfg.read_only)
		return ckpt_mkdir_p(c->dir, msg, msg_len);
	if (stat(c->dir, &sb)) {
		int e = errno;

		if (e == ENOENT && c->cfg_remote) {
			/* A new node, a lost disk: read from the store. */
			free(c->dir);
			c->dir = NULL;
			return 0;
		}
		util_msg(msg, msg_len, "%s: %s (wrong path? give the directory "
			 "the checkpoints were saved in)", c->dir, strerror(e));
		return -e;
	}
	if (!S_ISDIR(sb.st_mode)) {
		util_msg(msg, msg_len, "%s is not a directory (give the "
			 "directory the checkpoints were saved in)", c->dir);
		return -ENOTDIR;
	}
	return 0;
}

static int open_remote(struct ckpt *c, const char *url, char *msg,
		       size_t msg_len)
{
	struct obj_config oc = c->cfg.obj;
	struct obj_error err;
	obj_status os;

	c->remote = strdup(url);
	if (!c->remote)
		return -ENOMEM;
	oc.url = c->remote;
	if (oc.max_parallel < c->cfg.upload_parallel)
		oc.max_parallel = c->cfg.upload_parallel;
	os = obj_open(&oc, &c->st, &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, url, msg, msg_len);
	return 0;
}

static int start_threads(struct ckpt *c, char *msg, size_t msg_len)
{
	int rc;

	rc = ckpt_io_init(c, c->cfg.io_depth);
	if (rc) {
		util_msg(msg, msg_len, "cannot set up the writer: %s",
			 strerror(-rc));
		return rc;
	}
	c->stats.uring = ckpt_io_uring(c->io);
	c->uploaders = calloc(c->cfg.upload_parallel, sizeof(pthread_t));
	if (!c->uploaders)
		return -ENOMEM;
	if ((rc = pthread_create(&c->writer, NULL, ckpt_writer_main, c)))
		goto out_fail;
	if ((rc = pthread_create(&c->committer, NULL, ckpt_committer_main,
				 c))) {
		c->stopping = true;
		pthread_cond_broadcast(&c->writer_cond);
		pthread_join(c->writer, NULL);
		goto out_fail;
	}
	c->threads_started = true;
	for (unsigned i = 0; c->st && i < c->cfg.upload_parallel; i++) {
		if (pthread_create(&c->uploaders[i], NULL, ckpt_upload_main,
				   c))
			break;
		c->nuploaders++;
	}
	if (c->st && !c->nuploaders) {
		util_msg(msg, msg_len, "cannot start upload threads");
		return -EAGAIN;
	}
	return 0;
out_fail:
	util_msg(msg, msg_len, "cannot start threads: %s", strerror(rc));
	return -rc;
}

static void handle_free(struct ckpt *c);

int ckpt_open(const struct ckpt_config *cfg, struct ckpt **out, char *msg,
	      size_t msg_len)
{
	struct ckpt *c;
	int rc;

	*out = NULL;
	util_msg(msg, msg_len, "%s", "");
	if (!cfg->dir && !cfg->remote) {
		util_msg(msg, msg_len, "no checkpoint location: give a "
			 "directory, an s3://BUCKET/PREFIX or a file:///DIR URL");
		return -EINVAL;
	}
	if (cfg->remote && strncmp(cfg->remote, "s3://", 5) &&
	    strncmp(cfg->remote, "file://", 7)) {
		util_msg(msg, msg_len, "remote '%s': give s3://BUCKET[/PREFIX] "
			 "or file:///DIR", cfg->remote);
		return -EINVAL;
	}
	if (cfg->commit_on_nodes && !cfg->node_local) {
		util_msg(msg, msg_len, "commit_on_nodes needs node_local: a "
			 "commit on the nodes is of each node's own directory");
		return -EINVAL;
	}
	if (cfg->node_local && (!cfg->dir || !cfg->remote)) {
		util_msg(msg, msg_len, "node_local needs both a directory (this "
			 "node's own) and a remote store (where the ranks "
			 "meet): give %s", cfg->dir ? "a remote" :
			 "a directory");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->status_lock, NULL);
	util_cond_init(&c->chunk_cond);
	util_cond_init(&c->writer_cond);
	util_cond_init(&c->upload_cond);
	util_cond_init(&c->commit_cond);
	util_cond_init(&c->step_cond);
	c->stats.last_local_step = CKPT_STEP_NONE;
	c->stats.last_remote_step = CKPT_STEP_NONE;
	rc = config_apply(c, cfg, msg, msg_len);
	c->cfg_remote = cfg->remote != NULL;
	if (!rc && cfg->dir)
		rc = open_dir(c, cfg->dir, msg, msg_len);
	if (!rc && cfg->remote)
		rc = open_remote(c, cfg->remote, msg, msg_len);
	if (rc)
		goto out_free;
	c->stats.staging_bytes = c->cfg.staging_bytes;
	c->stats.chunk_bytes = c->cfg.chunk_bytes;
	ckpt_status_dir(c->dir, c->remote, c->status_dir,
			sizeof(c->status_dir));
	if (c->cfg.read_only) {
		*out = c;
		return 0;
	}
	if (c->rank == 0 && c->dir && !c->cfg.node_local)
		ckpt_retain_local(c->dir, 0, true, false, NULL, NULL, 0);
	rc = ckpt_cuda_init(c, msg, msg_len);
	if (rc && rc != -ENOTSUP)
		goto out_free;
	rc = start_threads(c, msg, msg_len);
	if (rc)
		goto out_free;
	*out = c;
	return 0;
out_free:
	handle_free(c);
	return rc;
}

void ckpt_step_release(struct ckpt_step *s)
{
	for (size_t i = 0; i < s->nt; i++)
		free(s->t[i].name);
	free(s->t);
	free(s->hash);
	free(s->jobs);
	free(s->parts);
	free(s->marker);
	s->t = NULL;
	s->hash = NULL;
	s->jobs = NULL;
	s->parts = NULL;
	s->marker = NULL;
	s->nt = 0;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

void ckpt_step_free(struct ckpt_step *s)
{
	if (!s)
		return;
	ckpt_step_release(s);
	free(s);
}

static void handle_free(struct ckpt *c)
{
	struct ckpt_step *s, *next;

	if (c->threads_started) {
		pthread_mutex_lock(&c->lock);
		c->stopping = true;
		pthread_cond_broadcast(&c->writer_cond);
		pthread_cond_broadcast(&c->upload_cond);
		pthread_cond_broadcast(&c->commit_cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->writer, NULL);
		pthread_join(c->committer, NULL);
		for (unsigned i = 0; i < c->nuploaders; i++)
			pthread_join(c->uploaders[i], NULL);
	}
	free(c->uploaders);
	ckpt_io_free(c->io);
	ckpt_step_free(c->building);
	for (s = c->done; s; s = next) {
		next = s->next;
		ckpt_step_free(s);
	}
	if (c->staging) {
		if (c->staging_pinned)
			ckpt_cuda_host_free(c, c->staging);
		else
			munmap(c->staging, c->staging_len);
	}
	ckpt_cuda_free(c);
	free(c->chunks);
	if (c->st)
		obj_close(c->st);
	free(c->dir);
	free(c->remote);
	pthread_cond_destroy(&c->chunk_cond);
	pthread_cond_destroy(&c->writer_cond);
	pthread_cond_destroy(&c->upload_cond);
	pthread_cond_destroy(&c->commit_cond);
	pthread_cond_destroy(&c->step_cond);
	pthread_mutex_destroy(&c->status_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int ckpt_close(struct ckpt *c, char *msg, size_t msg_len)
{
	struct ckpt_step *s;
	int rc = 0;

	if (!c)
		return 0;
	util_msg(msg, msg_len, "%s", "");
	pthread_mutex_lock(&c->lock);
	ckpt_step_free(c->building);
	c->building = NULL;
	while (c->threads_started && c->steps)
		pthread_cond_wait(&c->step_cond, &c->lock);
	for (s = c->done; s; s = s->next) {
		if ((s->local_rc || s->remote_rc) && !s->reported) {
			rc = s->local_rc ? s->local_rc : s->remote_rc;
			util_msg(msg, msg_len, "%s", s->local_rc ?
				 s->local_err : s->remote_err);
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (c->threads_started)
		ckpt_status_write(c);
	handle_free(c);
	return rc;
}

/* ---- staging ---- */

int ckpt_staging_alloc(struct ckpt *c, char *msg, size_t msg_len)
{
	size_t len = c->cfg.staging_bytes;
	unsigned n = (unsigned)(len / c->cfg.chunk_bytes);

	c->chunks = calloc(n, sizeof(*c->chunks));
	if (!c->chunks)
		return -ENOMEM;
	c->staging = ckpt_cuda_host_alloc(c, len);
	if (c->staging) {
		c->staging_pinned = true;
	} else {
		c->staging = util_map_huge(len, true);
		if (!c->staging) {
			int e = errno;

			free(c->chunks);
			c->chunks = NULL;
			util_msg(msg, msg_len, "cannot allocate %zu bytes of "
				 "staging memory: %s (lower staging_bytes)",
				 len, strerror(e));
			return -e;
		}
	}
	c->staging_len = len;
	c->nchunks = n;
	for (unsigned i = n; i-- > 0; ) {
		c->chunks[i].buf = c->staging + (size_t)i * c->cfg.chunk_bytes;
		c->chunks[i].next = c->free_chunks;
		c->free_chunks = &c->chunks[i];
	}
	c->nfree = n;
	return 0;
}
