/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c - the save sequence of a checkpoint handle: begin, add, commit.
 * Opening and closing the handle and its staging memory are in open.c;
 * waiting for durability, stats and the status file in wait.c.
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

/* ---- saving ---- */

struct ckpt_step *ckpt_find_step(struct ckpt *c, uint64_t step)
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
bool ckpt_committed_locally(struct ckpt *c, uint64_t step)
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

	if (!ckpt_committed_locally(c, step))
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
	} else if ((old = ckpt_find_step(c, step)) && !drop_failed(c, old)) {
		util_msg(msg, msg_len, "step %llu was already saved through "
			 "this handle", (unsigned long long)step);
		rc = -EEXIST;
	}
	if (!rc && !c->staging)
		rc = ckpt_staging_alloc(c, msg, msg_len);
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
		rc = ckpt_staging_alloc(c, msg, msg_len);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void ckpt_abort(struct ckpt *c)
{
	pthread_mutex_lock(&c->lock);
	ckpt_step_free(c->building);
	c->building = NULL;
	pthread_mutex_unlock(&c->lock);
}

static uint32_t name_hash(const char *name)
{
	return (uint32_t)util_fnv1a64(UTIL_FNV64_BASIS, name, strlen(name));
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

/* ckpt_add and ckpt_add_slice: gshape and goff NULL for a whole
 * tensor. */
static int add_tensor(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		      unsigned ndim, const int64_t *shape,
		      const int64_t *gshape, const int64_t *goff,
		      const void *data, uint64_t size_bytes, unsigned flags,
		      char *msg, size_t msg_len)
{
	struct ckpt_step *s = c->building;
	int64_t gs[CKPT_NDIM_MAX] = { 0 }, go[CKPT_NDIM_MAX] = { 0 };
	uint32_t tflags = gshape ? CKPT_TENSOR_SLICE :
			  flags & CKPT_ADD_REPLICATED ?
			  CKPT_TENSOR_REPLICATED : 0;
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
	if (flags & ~(CKPT_ADD_DEVICE | CKPT_ADD_REPLICATED) ||
	    (gshape && (flags & CKPT_ADD_REPLICATED))) {
		util_msg(msg, msg_len, "tensor '%s': unknown flags %#x%s", name,
			 flags, gshape ? " (a slice saved by several ranks "
			 "needs no CKPT_ADD_REPLICATED: the same region is "
			 "loaded once)" : "");
		return -EINVAL;
	}
	if (gshape) {
		if (!goff || !ndim) {
			util_msg(msg, msg_len, "tensor '%s': a slice needs its "
				 "global shape and offsets, at least one "
				 "dimension", name);
			return -EINVAL;
		}
		memcpy(gs, gshape, ndim * sizeof(*gs));
		memcpy(go, goff, ndim * sizeof(*go));
		rc = ckpt_slice_check(name, tflags, ndim, shape, gs, go, msg,
				      msg_len);
		if (rc)
			return rc;
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
	t->tflags = tflags;
	memcpy(t->gshape, gs, sizeof(gs));
	memcpy(t->goff, go, sizeof(go));
	name_insert(s, s->nt);
	s->nt++;
	return 0;
}

int ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
	     unsigned ndim, const int64_t *shape, const void *data,
	     uint64_t size_bytes, unsigned flags, char *msg, size_t msg_len)
{
	return add_tensor(c, name, dtype, ndim, shape, NULL, NULL, data,
			  size_bytes, flags, msg, msg_len);
}

int ckpt_add_slice(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		   unsigned ndim, const int64_t *shape,
		   const int64_t *global_shape, const int64_t *offset,
		   const void *data, uint64_t size_bytes, unsigned flags,
		   char *msg, size_t msg_len)
{
	if (!global_shape || !offset) {
		util_msg(msg, msg_len, "tensor '%s': a slice needs its global "
			 "shape and offsets", name ? name : "");
		return -EINVAL;
	}
	return add_tensor(c, name, dtype, ndim, shape, global_shape, offset,
			  data, size_bytes, flags, msg, msg_len);
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
		ti->flags = t->tflags;
		memcpy(ti->global_shape, t->gshape, sizeof(ti->global_shape));
		memcpy(ti->global_offset, t->goff, sizeof(ti->global_offset));
		sh.data_bytes += t->size;
	}
	free(s->marker);
	s->marker = NULL;
	rc = ckpt_mf_encode(&m, &s->marker, &s->marker_len);
	free(m.tensors);
	return rc;
}
