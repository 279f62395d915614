/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c - the checkpoint handle: open and close, staging memory, the
 * save sequence (begin, add, commit), waiting for durability, stats and
 * the status file `fmckpt status` reads.
 *
 * Staging is one region of staging_bytes cut into chunks of chunk_bytes,
 * allocated at the first ckpt_begin (pinned when CUDA is there) and
 * prefaulted, so a commit copies into memory that is already mapped.  A
 * commit lays the shard out (4096-byte header, then each tensor at a
 * 64-byte boundary), then streams it through chunks: fill one, hand it to
 * the writer thread (writer.c), take the next; when none is free it waits
 * for the writer to give one back.  Chunk i of a shard is bytes
 * [i*chunk_bytes, (i+1)*chunk_bytes) of the file and part i+1 of its
 * multipart upload (drain.c), so nothing is copied twice.
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

/* ---- small helpers ---- */

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void (*ckpt_crash_hook)(const char *point, uint64_t step);

void ckpt_step_fail(struct ckpt *c, struct ckpt_step *s, int rc,
		    unsigned levels, const char *fmt, ...)
{
	char why[512];
	bool fresh = false;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if ((levels & CKPT_LOCAL) && !s->local_rc) {
		s->local_rc = rc;
		memcpy(s->local_err, why, sizeof(why));
		fresh = true;
	}
	if ((levels & CKPT_REMOTE) && !s->remote_rc) {
		s->remote_rc = rc;
		memcpy(s->remote_err, why, sizeof(why));
		fresh = true;
	}
	/* Only the cause: what follows from it (the chunks of a shard that
	 * could not be created, the marker not written) would replace the
	 * reason with a consequence, or with nothing. */
	if (fresh)
		snprintf(c->stats.last_error, sizeof(c->stats.last_error),
			 "%s", why);
}

void ckpt_chunk_release(struct ckpt *c, struct ckpt_chunk *ch)
{
	ch->step = NULL;
	ch->next = c->free_chunks;
	c->free_chunks = ch;
	c->nfree++;
	c->stats.staging_used_bytes -= c->cfg.chunk_bytes;
	pthread_cond_signal(&c->chunk_cond);
}

void ckpt_tmp_path(const struct ckpt *c, uint64_t step, const char *name,
		   char *buf, size_t len)
{
	snprintf(buf, len, "%s/" CKPT_TMP_PREFIX "%010" PRIu64 "%s%s", c->dir,
		 step, name ? "/" : "", name ? name : "");
}

void ckpt_status_dir(const char *dir, const char *remote, char *out,
		     size_t len)
{
	const char *run = getenv("XDG_RUNTIME_DIR");
	char safe[200];
	size_t i;

	if (dir) {
		snprintf(out, len, "%s/" CKPT_STATE_DIR, dir);
		return;
	}
	for (i = 0; remote && remote[i] && i + 1 < sizeof(safe); i++) {
		char ch = remote[i];

		safe[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ?
			  ch : '_';
	}
	safe[i] = '\0';
	snprintf(out, len, "%s/fmckpt-%u/%s", run && *run ? run : "/tmp",
		 (unsigned)getuid(), safe);
}

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
	if (c->rank == 0 && c->dir)
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

static void step_free(struct ckpt_step *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nt; i++)
		free(s->t[i].name);
	free(s->t);
	free(s->hash);
	free(s->jobs);
	free(s->parts);
	free(s->marker);
	if (s->fd >= 0)
		close(s->fd);
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
	step_free(c->building);
	for (s = c->done; s; s = next) {
		next = s->next;
		step_free(s);
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
	step_free(c->building);
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

static int staging_alloc(struct ckpt *c, char *msg, size_t msg_len)
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

/* ---- saving ---- */

static struct ckpt_step *find_step(struct ckpt *c, uint64_t step)
{
	for (struct ckpt_step *s = c->steps; s; s = s->next)
		if (s->step == step)
			return s;
	for (struct ckpt_step *s = c->done; s; s = s->next)
		if (s->step == step)
			return s;
	return NULL;
}

/* The newest step-N in dir, or 0 (one readdir, at the first begin). */
static uint64_t newest_step_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t newest = 0, step;

	if (!d)
		return UINT64_MAX; /* unknown: every begin looks */
	while ((de = readdir(d)))
		if (!ckpt_parse_step(de->d_name, CKPT_STEP_PREFIX, &step) &&
		    step > newest)
			newest = step;
	closedir(d);
	return newest;
}

/* A stat of step's manifest: on an fmfs mount that is a FUSE lookup or
 * two in the caller's blocking time, so steps above every step known to
 * be there (the usual case: each save a newer step) skip it. */
static bool committed_locally(struct ckpt *c, uint64_t step)
{
	char name[64], path[PATH_MAX];
	struct stat sb;

	if (!c->steps_scanned) {
		c->step_ceiling = newest_step_dir(c->dir);
		c->steps_scanned = true;
	}
	if (c->step_ceiling != UINT64_MAX && step > c->step_ceiling) {
		c->step_ceiling = step;
		return false;
	}

	ckpt_step_name(step, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s/" CKPT_MANIFEST_NAME, c->dir,
		 name);
	return !stat(path, &sb);
}

/* Committed, not merely there: a step-N whose manifest is damaged or
 * whose shards are missing or cut short is not a checkpoint, and a save
 * of step N moves it aside (drain.c) instead of being refused.  The
 * manifest is read only when the stat found one: a rare case. */
static bool complete_locally(struct ckpt *c, uint64_t step)
{
	struct ckpt_reader *r;

	if (!committed_locally(c, step))
		return false;
	if (ckpt_reader_open_from(c, step, CKPT_FROM_LOCAL, &r, NULL, 0))
		return false;
	ckpt_reader_close(r);
	return true;
}

/* A step that failed may be tried again: forget the failed attempt.
 * c->lock held; false if old is in flight or succeeded. */
static bool drop_failed(struct ckpt *c, struct ckpt_step *old)
{
	struct ckpt_step **pp;

	for (pp = &c->done; *pp && *pp != old; pp = &(*pp)->next)
		;
	if (!*pp || (!old->local_rc && !old->remote_rc))
		return false;
	*pp = old->next;
	free(old);
	return true;
}

int ckpt_begin(struct ckpt *c, uint64_t step, char *msg, size_t msg_len)
{
	struct ckpt_step *s, *old;
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (c->cfg.read_only) {
		util_msg(msg, msg_len, "the store was opened read-only");
		return -EINVAL;
	}
	if (step == CKPT_STEP_LATEST) {
		util_msg(msg, msg_len, "step %llu is reserved",
			 (unsigned long long)step);
		return -EINVAL;
	}
	if (c->dir && complete_locally(c, step)) {
		util_msg(msg, msg_len, "step %llu is already committed in %s "
			 "(save another step, or remove it first)",
			 (unsigned long long)step, c->dir);
		return -EEXIST;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->step = step;
	s->fd = -1;
	pthread_mutex_lock(&c->lock);
	if (c->building) {
		util_msg(msg, msg_len, "step %llu is begun and not committed "
			 "(commit or abort it first)",
			 (unsigned long long)c->building->step);
		rc = -EBUSY;
	} else if ((old = find_step(c, step)) && !drop_failed(c, old)) {
		util_msg(msg, msg_len, "step %llu was already saved through "
			 "this handle", (unsigned long long)step);
		rc = -EEXIST;
	}
	if (!rc && !c->staging)
		rc = staging_alloc(c, msg, msg_len);
	if (!rc && c->in_flight >= c->cfg.max_pending_steps) {
		c->stats.pending_waits++;
		while (c->in_flight >= c->cfg.max_pending_steps)
			pthread_cond_wait(&c->step_cond, &c->lock);
	}
	if (!rc)
		c->building = s;
	pthread_mutex_unlock(&c->lock);
	if (rc)
		free(s);
	return rc;
}

int ckpt_prepare(struct ckpt *c, char *msg, size_t msg_len)
{
	int rc = 0;

	if (c->cfg.read_only) {
		util_msg(msg, msg_len, "the handle is read-only");
		return -EROFS;
	}
	pthread_mutex_lock(&c->lock);
	if (!c->staging)
		rc = staging_alloc(c, msg, msg_len);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void ckpt_abort(struct ckpt *c)
{
	pthread_mutex_lock(&c->lock);
	step_free(c->building);
	c->building = NULL;
	pthread_mutex_unlock(&c->lock);
}

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;  /* FNV-1a */

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h;
}

/* Names of a step in an open-addressing table of tensor index + 1, kept
 * at most half full, so a step of many tensors is not quadratic. */
static bool name_taken(const struct ckpt_step *s, const char *name)
{
	size_t mask = s->hash_cap - 1;

	if (!s->hash_cap)
		return false;
	for (size_t i = name_hash(name) & mask; s->hash[i];
	     i = (i + 1) & mask)
		if (!strcmp(s->t[s->hash[i] - 1].name, name))
			return true;
	return false;
}

static void name_insert(struct ckpt_step *s, size_t index)
{
	size_t mask = s->hash_cap - 1, i;

	for (i = name_hash(s->t[index].name) & mask; s->hash[i];
	     i = (i + 1) & mask)
		;
	s->hash[i] = (uint32_t)index + 1;
}

static int name_grow(struct ckpt_step *s)
{
	size_t cap = s->hash_cap ? s->hash_cap * 2 : 128;
	uint32_t *h;

	if ((s->nt + 1) * 2 <= s->hash_cap)
		return 0;
	h = calloc(cap, sizeof(*h));
	if (!h)
		return -ENOMEM;
	free(s->hash);
	s->hash = h;
	s->hash_cap = cap;
	for (size_t i = 0; i < s->nt; i++)
		name_insert(s, i);
	return 0;
}

int ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
	     unsigned ndim, const int64_t *shape, const void *data,
	     uint64_t size_bytes, unsigned flags, char *msg, size_t msg_len)
{
	struct ckpt_step *s = c->building;
	struct ckpt_tensor *t;
	int rc;

	util_msg(msg, msg_len, "%s", "");
	if (!s) {
		util_msg(msg, msg_len, "no step begun (call ckpt_begin first)");
		return -EINVAL;
	}
	rc = ckpt_tensor_check(name, dtype, ndim, shape, size_bytes, msg,
			       msg_len);
	if (rc)
		return rc;
	if (!data && size_bytes) {
		util_msg(msg, msg_len, "tensor '%s': no data", name);
		return -EINVAL;
	}
	if (flags & ~CKPT_ADD_DEVICE) {
		util_msg(msg, msg_len, "tensor '%s': unknown flags %#x", name,
			 flags);
		return -EINVAL;
	}
	if ((flags & CKPT_ADD_DEVICE) && !c->cuda) {
		util_msg(msg, msg_len, "tensor '%s' is in device memory, but "
			 "%s", name, HAVE_CUDA ? "no GPU is usable" :
			 "fmckpt was built without CUDA (./configure "
			 "--with-cuda)");
		return -ENOTSUP;
	}
	if (s->nt >= CKPT_TENSORS_MAX) {
		util_msg(msg, msg_len, "more than %u tensors in one step",
			 CKPT_TENSORS_MAX);
		return -E2BIG;
	}
	if (name_taken(s, name)) {
		util_msg(msg, msg_len, "tensor '%s' was already added to step "
			 "%llu", name, (unsigned long long)s->step);
		return -EEXIST;
	}
	if (name_grow(s))
		return -ENOMEM;
	if (s->nt == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct ckpt_tensor *nt = realloc(s->t, cap * sizeof(*nt));

		if (!nt)
			return -ENOMEM;
		s->t = nt;
		s->cap = cap;
	}
	t = &s->t[s->nt];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	if (!t->name)
		return -ENOMEM;
	t->dtype = dtype;
	t->ndim = ndim;
	for (unsigned i = 0; i < ndim; i++)
		t->shape[i] = shape[i];
	t->size = size_bytes;
	t->src = data;
	t->flags = flags;
	name_insert(s, s->nt);
	s->nt++;
	return 0;
}

/* The stream of one shard through staging chunks. */
struct stream {
	struct ckpt *c;
	struct ckpt_step *s;
	struct ckpt_chunk *ch;
	uint64_t pos;
	unsigned index;
	bool device;          /* async device copies into ch not yet synced */
	bool waited;
	uint64_t wait_ns;
	int rc;               /* the first copy error */
	char why[256];        /* its cause (the caller's msg may be NULL) */
};

/* The first copy error fails the step at once, before the chunk it hit
 * (or any later one) reaches the writer: the writer checks the step's
 * error before it leaves the marker that lets rank 0 commit, and it must
 * not find it clear while staging holds garbage.  c->lock held. */
static void stream_fail(struct stream *w, int rc)
{
	if (w->rc)
		return;
	w->rc = rc;
	ckpt_step_fail(w->c, w->s, rc, CKPT_LOCAL | CKPT_REMOTE,
		       "step %llu: copying into staging failed: %s",
		       (unsigned long long)w->s->step,
		       w->why[0] ? w->why : strerror(-rc));
}

static void stream_flush(struct stream *w)
{
	struct ckpt *c = w->c;
	struct ckpt_chunk *ch = w->ch;
	int rc = 0;

	if (w->device) {
		rc = ckpt_cuda_sync(c, w->rc ? NULL : w->why,
				    w->rc ? 0 : sizeof(w->why));
		w->device = false;
	}
	ch->next = NULL;
	pthread_mutex_lock(&c->lock);
	if (rc)
		stream_fail(w, rc);
	if (c->wq_tail)
		c->wq_tail->next = ch;
	else
		c->wq_head = ch;
	c->wq_tail = ch;
	/* While the commit copies, the writer sleeps unless staging runs
	 * low (ckpt_writer_main); waking it for every chunk cost the
	 * caller a futex call and the writer a wake-up to go back to sleep.
	 * The commit's end wakes it for the whole queue. */
	if (ckpt_writer_wanted(c))
		pthread_cond_signal(&c->writer_cond);
	pthread_mutex_unlock(&c->lock);
	w->ch = NULL;
}

static void stream_next(struct stream *w)
{
	struct ckpt *c = w->c;
	struct ckpt_chunk *ch;

	pthread_mutex_lock(&c->lock);
	if (!c->free_chunks) {
		uint64_t t0 = util_now_ns();

		if (!w->waited)
			c->stats.staging_waits++;
		w->waited = true;
		while (!c->free_chunks)
			pthread_cond_wait(&c->chunk_cond, &c->lock);
		w->wait_ns += util_now_ns() - t0;
	}
	ch = c->free_chunks;
	c->free_chunks = ch->next;
	c->nfree--;
	if (ckpt_writer_wanted(c))
		pthread_cond_signal(&c->writer_cond);
	c->stats.staging_used_bytes += c->cfg.chunk_bytes;
	if (c->stats.staging_used_bytes > c->stats.staging_peak_bytes)
		c->stats.staging_peak_bytes = c->stats.staging_used_bytes;
	pthread_mutex_unlock(&c->lock);
	ch->step = w->s;
	ch->off = w->pos;
	ch->len = 0;
	ch->done = 0;
	ch->index = w->index++;
	ch->next = NULL;
	w->ch = ch;
}

/* Copies len bytes from src (NULL: zeros) into the stream. */
static void stream_put(struct stream *w, const void *src, uint64_t len,
		       bool device)
{
	const unsigned char *p = src;
	uint64_t chunk = w->c->cfg.chunk_bytes;

	while (len) {
		size_t n;

		if (!w->ch)
			stream_next(w);
		n = chunk - w->ch->len < len ? (size_t)(chunk - w->ch->len) :
		    (size_t)len;
		if (!p) {
			memset(w->ch->buf + w->ch->len, 0, n);
		} else if (device && !w->rc) {
			int rc = ckpt_cuda_copy_async(w->c, w->ch->buf +
						      w->ch->len, p, n, w->why,
						      sizeof(w->why));

			w->device = true;
			if (rc) {
				pthread_mutex_lock(&w->c->lock);
				stream_fail(w, rc);
				pthread_mutex_unlock(&w->c->lock);
			}
		} else if (!w->rc) {
			memcpy(w->ch->buf + w->ch->len, p, n);
		}
		if (p)
			p += n;
		w->ch->len += (uint32_t)n;
		w->pos += n;
		len -= n;
		if (w->ch->len == chunk)
			stream_flush(w);
	}
}

static int layout(struct ckpt *c, struct ckpt_step *s, char *msg,
		  size_t msg_len)
{
	uint64_t off = CKPT_SHARD_HEADER_BYTES, chunk = c->cfg.chunk_bytes;

	for (size_t i = 0; i < s->nt; i++) {
		off = (off + CKPT_ALIGN - 1) & ~(uint64_t)(CKPT_ALIGN - 1);
		s->t[i].off = off;
		if (s->t[i].size > UINT64_MAX / 2 - off) {
			util_msg(msg, msg_len, "step %llu is too large",
				 (unsigned long long)s->step);
			return -EFBIG;
		}
		off += s->t[i].size;
	}
	s->file_bytes = off;
	s->nchunks = (unsigned)((off + chunk - 1) / chunk);
	if (c->st && s->nchunks > OBJ_PARTS_MAX) {
		util_msg(msg, msg_len, "this rank's shard is %llu bytes: more "
			 "than %d parts of %llu bytes; raise chunk_bytes",
			 (unsigned long long)off, OBJ_PARTS_MAX,
			 (unsigned long long)chunk);
		return -EFBIG;
	}
	if (c->st) {
		s->jobs = calloc(s->nchunks, sizeof(*s->jobs));
		s->parts = calloc(s->nchunks, sizeof(*s->parts));
		if (!s->jobs || !s->parts)
			return -ENOMEM;
		for (unsigned i = 0; i < s->nchunks; i++) {
			s->jobs[i].step = s;
			s->jobs[i].index = i;
		}
	}
	return 0;
}

static void stream_tensors(struct stream *w)
{
	struct ckpt_step *s = w->s;
	unsigned char hdr[CKPT_SHARD_HEADER_BYTES];
	struct ckpt_shard_header h = {
		.step = s->step, .rank = w->c->rank,
		.world_size = w->c->world, .ntensors = (uint32_t)s->nt,
		.file_bytes = s->file_bytes,
	};

	memcpy(h.run_id, w->c->run_id, sizeof(h.run_id));
	ckpt_shard_header_encode(&h, hdr);
	stream_put(w, hdr, sizeof(hdr), false);
	for (size_t i = 0; i < s->nt; i++) {
		const struct ckpt_tensor *t = &s->t[i];

		stream_put(w, NULL, t->off - w->pos, false);
		stream_put(w, t->src, t->size, t->flags & CKPT_ADD_DEVICE);
	}
	if (w->ch)
		stream_flush(w);
}

int ckpt_commit(struct ckpt *c, char *msg, size_t msg_len)
{
	struct ckpt_step *s = c->building, **pp;
	struct stream w = { .c = c };
	uint64_t t0 = util_now_ns(), dt;
	int rc;

	util_msg(msg, msg_len, "%s", "");
	if (!s) {
		util_msg(msg, msg_len, "no step begun (call ckpt_begin first)");
		return -EINVAL;
	}
	rc = layout(c, s, msg, msg_len);
	if (rc) {
		ckpt_abort(c);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	c->building = NULL;
	s->local_pending = c->dir ? s->nchunks : 0;
	s->remote_pending = c->st ? s->nchunks : 0;
	for (pp = &c->steps; *pp; pp = &(*pp)->next)
		;
	*pp = s;
	c->in_flight++;
	c->copying = true;
	/* A copy that fits in the free chunks never waits for the writer,
	 * so the writer waits for it: waking it at the low water made the
	 * last eighth of a 1 GiB copy share 2 cores with the writer's CRC
	 * and page-cache copies (commit 1.10 x memcpy instead of ~1.0). */
	c->copy_fits = s->nchunks <= c->nfree;
	pthread_mutex_unlock(&c->lock);
	w.s = s;
	stream_tensors(&w);
	dt = util_now_ns() - t0;
	pthread_mutex_lock(&c->lock);
	c->copying = false;
	pthread_cond_signal(&c->writer_cond);
	if (w.rc)   /* the step failed when the copy did (stream_fail) */
		util_msg(msg, msg_len, "step %llu: copying into staging "
			 "failed: %s", (unsigned long long)s->step,
			 w.why[0] ? w.why : strerror(-w.rc));
	s->committed = true;
	s->t_commit_ns = util_now_ns();
	for (size_t i = 0; i < s->nt; i++)
		s->t[i].src = NULL;   /* no longer borrowed */
	c->stats.commits++;
	c->stats.commit_last_ns = dt;
	c->stats.commit_total_ns += dt;
	c->stats.staging_wait_ns += w.wait_ns;
	/* The status file is the committer's to rewrite: on an fmfs mount
	 * each rewrite is several FUSE round trips (and an upload), which
	 * the caller must not wait for. */
	c->status_due = true;
	pthread_cond_broadcast(&c->commit_cond);
	pthread_mutex_unlock(&c->lock);
	return w.rc;
}

int ckpt_marker_encode(struct ckpt *c, struct ckpt_step *s)
{
	struct ckpt_mf_shard sh = {
		.rank = c->rank, .ntensors = (uint32_t)s->nt,
		.file_bytes = s->file_bytes, .crc32c = s->file_crc,
	};
	struct ckpt_manifest m = {
		.kind = CKPT_MF_KIND_RANK, .step = s->step,
		.world_size = c->world, .created_ns = realtime_ns(),
		.shards = &sh, .nshards = 1, .ntensors = (uint32_t)s->nt,
	};
	int rc;

	memcpy(sh.run_id, c->run_id, sizeof(sh.run_id));
	m.tensors = calloc(s->nt ? s->nt : 1, sizeof(*m.tensors));
	if (!m.tensors)
		return -ENOMEM;
	for (size_t i = 0; i < s->nt; i++) {
		struct ckpt_tensor_info *ti = &m.tensors[i];
		const struct ckpt_tensor *t = &s->t[i];

		snprintf(ti->name, sizeof(ti->name), "%s", t->name);
		ti->dtype = t->dtype;
		ti->ndim = t->ndim;
		memcpy(ti->shape, t->shape, sizeof(ti->shape));
		ti->size_bytes = t->size;
		ti->rank = c->rank;
		ti->crc32c = t->crc;
		ti->offset = t->off;
		sh.data_bytes += t->size;
	}
	free(s->marker);
	s->marker = NULL;
	rc = ckpt_mf_encode(&m, &s->marker, &s->marker_len);
	free(m.tensors);
	return rc;
}

/* ---- waiting ---- */

static bool level_done(const struct ckpt_step *s, bool local, bool remote)
{
	return (!local || s->local_handled) && (!remote || s->remote_handled);
}

/* Other ranks: poll until rank 0's manifest is there. */
static int wait_manifest(struct ckpt *c, uint64_t step, bool remote,
			 uint64_t deadline, char *msg, size_t msg_len)
{
	char name[64], key[96];
	unsigned sleep_ms = 5;

	ckpt_step_name(step, name, sizeof(name));
	snprintf(key, sizeof(key), "%s/" CKPT_MANIFEST_NAME, name);
	for (;;) {
		if (!remote && committed_locally(c, step))
			return 0;
		if (remote) {
			struct obj_error err;
			struct obj_meta m;
			obj_status os = obj_head(c->st, key, &m, &err);

			if (os == OBJ_OK) {
				obj_meta_release(&m);
				return 0;
			}
			if (os != OBJ_ERR_NOT_FOUND)
				return ckpt_obj_fail(&err, os, key, msg,
						     msg_len);
		}
		if (deadline && util_now_ns() >= deadline) {
			util_msg(msg, msg_len, "step %llu: this rank's shard is "
				 "durable but rank 0 has not committed the "
				 "checkpoint %s yet", (unsigned long long)step,
				 remote ? "remotely" : "locally");
			return -ETIMEDOUT;
		}
		usleep(sleep_ms * 1000);
		if (sleep_ms < 200)
			sleep_ms *= 2;
	}
}

static int timed_wait(pthread_cond_t *cv, pthread_mutex_t *m,
		      uint64_t deadline)
{
	struct timespec ts;

	if (!deadline)
		return pthread_cond_wait(cv, m);
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	return pthread_cond_timedwait(cv, m, &ts);
}

int ckpt_wait(struct ckpt *c, uint64_t step, enum ckpt_level level,
	      unsigned timeout_ms, char *msg, size_t msg_len)
{
	uint64_t deadline = timeout_ms ? util_now_ns() +
			    timeout_ms * 1000000ull : 0;
	bool local = false, remote = false;
	struct ckpt_step *s;
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (level == CKPT_DURABLE)
		level = c->st ? CKPT_REMOTE : CKPT_LOCAL;
	local = level == CKPT_LOCAL;
	remote = level == CKPT_REMOTE;
	if ((local && !c->dir) || (remote && !c->st) || (!local && !remote)) {
		util_msg(msg, msg_len, "no %s store configured to wait for",
			 local ? "local" : "remote");
		return -EINVAL;
	}
	pthread_mutex_lock(&c->lock);
	s = find_step(c, step);
	while (s && !level_done(s, local, remote) && !rc) {
		if (timed_wait(&c->step_cond, &c->lock, deadline) == ETIMEDOUT)
			rc = -ETIMEDOUT;
		s = find_step(c, step);
	}
	if (!s) {
		pthread_mutex_unlock(&c->lock);
		if (local && committed_locally(c, step))
			return 0;
		util_msg(msg, msg_len, "step %llu was not saved through this "
			 "handle", (unsigned long long)step);
		return -ENOENT;
	}
	if (rc) {
		util_msg(msg, msg_len, "step %llu is not yet committed %s after "
			 "%u ms", (unsigned long long)step,
			 local ? "locally" : "remotely", timeout_ms);
	} else if (local ? s->local_rc : s->remote_rc) {
		rc = local ? s->local_rc : s->remote_rc;
		util_msg(msg, msg_len, "%s", local ? s->local_err :
			 s->remote_err);
		s->reported = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (!rc && c->rank != 0)
		rc = wait_manifest(c, step, remote, deadline ? deadline :
				   util_now_ns() + 2000000ull *
				   c->cfg.barrier_timeout_ms, msg, msg_len);
	return rc;
}

void ckpt_get_stats(struct ckpt *c, struct ckpt_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	out->steps_in_flight = c->in_flight;
	pthread_mutex_unlock(&c->lock);
}

/* ---- status file ---- */

static const char *step_state(const struct ckpt *c, const struct ckpt_step *s)
{
	if (!s->committed)
		return "staging";
	if (c->dir && !s->local_handled)
		return s->local_ready ? "committing" : "writing";
	if (c->st && !s->remote_handled)
		return "draining";
	return s->local_rc || s->remote_rc ? "failed" : "done";
}

/* One "key value" per line; `fmckpt status` parses it.  Values are the
 * rest of the line (newlines in error messages become spaces). */
void ckpt_status_write(struct ckpt *c)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 80], err[512];
	struct ckpt_stats st;
	FILE *f;

	if (!c->status_dir[0])
		return;
	pthread_mutex_lock(&c->status_lock);
	snprintf(path, sizeof(path), "%s/status-rank-%05u", c->status_dir,
		 c->rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f && !ckpt_mkdir_p(c->status_dir, NULL, 0))
		f = fopen(tmp, "w");
	if (!f) {
		pthread_mutex_unlock(&c->status_lock);
		return;
	}
	pthread_mutex_lock(&c->lock);
	st = c->stats;
	fprintf(f, "pid %d\nrank %u\nworld_size %u\nupdated_unix_s %lld\n"
		"dir %s\nremote %s\nstaging_bytes %llu\n"
		"staging_used_bytes %llu\nstaging_peak_bytes %llu\n"
		"chunk_bytes %llu\ncommits %llu\ncommit_last_ns %llu\n"
		"staging_waits %llu\npending_waits %llu\n"
		"bytes_written %llu\nbytes_uploaded %llu\nsteps_failed %llu\n"
		"uring %d\n", (int)getpid(), c->rank, c->world,
		(long long)time(NULL), c->dir ? c->dir : "-",
		c->remote ? c->remote : "-",
		(unsigned long long)st.staging_bytes,
		(unsigned long long)st.staging_used_bytes,
		(unsigned long long)st.staging_peak_bytes,
		(unsigned long long)st.chunk_bytes,
		(unsigned long long)st.commits,
		(unsigned long long)st.commit_last_ns,
		(unsigned long long)st.staging_waits,
		(unsigned long long)st.pending_waits,
		(unsigned long long)st.bytes_written,
		(unsigned long long)st.bytes_uploaded,
		(unsigned long long)st.steps_failed, st.uring);
	if (st.last_local_step != CKPT_STEP_NONE)
		fprintf(f, "last_local_step %llu\n",
			(unsigned long long)st.last_local_step);
	if (st.last_remote_step != CKPT_STEP_NONE)
		fprintf(f, "last_remote_step %llu\n",
			(unsigned long long)st.last_remote_step);
	for (struct ckpt_step *s = c->steps; s; s = s->next)
		fprintf(f, "step %llu %s %llu %llu %llu\n",
			(unsigned long long)s->step, step_state(c, s),
			(unsigned long long)s->file_bytes,
			(unsigned long long)s->bytes_written,
			(unsigned long long)s->bytes_uploaded);
	snprintf(err, sizeof(err), "%s", st.last_error);
	pthread_mutex_unlock(&c->lock);
	for (char *p = err; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (err[0])
		fprintf(f, "last_error %s\n", err);
	if (fclose(f) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
	pthread_mutex_unlock(&c->status_lock);
}
