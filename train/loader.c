/* SPDX-License-Identifier: MIT */
/*
 * loader.c - the training data loader: shards in, batches of B x (T+1)
 * tokens out, with the reading done ahead on a background thread.
 *
 * The stream.  A shard of n tokens holds nseq = (n - 1) / T sequences
 * (none when n <= T): sequence q is tokens [q*T, q*T + T], so sequence q
 * and q+1 share one token and every token but the first is a target
 * exactly once.  A shard whose tokens fit in span_bytes is one span, read
 * whole; a larger one is cut into spans of spq sequences (the last span
 * fewer) and read a span at a time.  Each epoch e lists the shards in a
 * shuffled order, each shard's spans in a shuffled order, each span's
 * sequences in a shuffled order: that is the epoch's sequence order,
 * shared by every rank, and rank r takes the sequences whose index g in
 * it has g mod W == r.  Epochs follow one another without a seam (a batch
 * may end in the next epoch).  Spans of one shard are consecutive, so a
 * shard is opened once per epoch; a span with no sequence for this rank
 * is not read.
 *
 * The generator.  SplitMix64 (Steele, Lea and Flood, 2014): the state
 * advances by 0x9E3779B97F4A7C15 and each output is the state through
 * mix64, a 64-bit finalizer.  Every shuffle has its own generator whose
 * start state is derived from the seed, so any order can be computed on
 * its own, on any rank, without replaying the ones before it:
 *   shard order of epoch e:         train_derive(seed, e, ~0, ~0)
 *   span order of shard s, epoch e: train_derive(seed, e, s, ~0)
 *   sequence order of span j of s:  train_derive(seed, e, s, j)
 * with train_derive(a, b, c, d) = train_mix64(train_mix64(train_mix64(train_mix64(a) + b) + c) + d) and
 * s, j file order indices.  A shuffle is Fisher-Yates from the identity,
 * i from n-1 down to 1 swapping i with an unbiased draw in [0, i]
 * (Lemire's multiply-and-reject).  That is what makes a position a few
 * integers (struct train_pos) and a resume bit-exact.
 *
 * Threads.  The reader thread walks the same stream from the start
 * position, reads each span it needs into the next free buffer of a ring
 * of `buffers` (allocated at open, never grown), checks it and marks it
 * ready; the caller's thread (train_loader_next) copies its rows out and
 * frees a buffer as soon as it has taken its last sequence from it.  The
 * ring's state and the stop flag are under lock; a buffer's contents
 * belong to the reader while free and to the caller while ready.
 *
 * Checks before a token is handed out.  Headers at open; when a shard is
 * opened by the reader, its header again (the file must not have changed);
 * a whole shard's payload CRC32C each time it is read; a split shard's
 * payload CRC32C by one streaming pass the first time it is opened
 * (unless verify_at_open did it); every token of every span against the
 * shard's and the model's vocabulary.  The first error stops the reader,
 * and train_loader_next returns it from then on.
 *
 * Prefetch.  When the reader opens a shard it hints the next
 * prefetch_shards of the epoch's order: through the caller's prefetch_fn
 * if set, else by the built-in hint: if the file is on an fmfs mount (the
 * root of its file system carries the xattr user.fmfs.control, see
 * fs/fs.h), a "prefetch PATH" request on that control socket, which warms
 * the whole object in the fmfs cache with parallel ranged GETs and
 * answers at once; otherwise posix_fadvise(WILLNEED) on the whole file,
 * which starts the kernel's readahead.  Either is a hint: a failure is
 * counted nowhere and changes nothing.  On top of it, the reader thread
 * is itself always one buffer ahead of the consumer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "loader_int.h"

/* ---- the generator (SplitMix64) ---- */

uint64_t train_mix64(uint64_t z)
{
	return util_mix64(z);
}

static uint64_t rng_next(uint64_t *s)
{
	return train_mix64(*s += 0x9E3779B97F4A7C15ull);
}

/* Uniform in [0, n), n > 0, without modulo bias (Lemire 2019). */
static uint64_t rng_below(uint64_t *s, uint64_t n)
{
	unsigned __int128 m = (unsigned __int128)rng_next(s) * n;
	uint64_t lo = (uint64_t)m;

	if (lo < n) {
		uint64_t t = -n % n;

		while (lo < t) {
			m = (unsigned __int128)rng_next(s) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

uint64_t train_derive(uint64_t seed, uint64_t epoch, uint64_t shard,
		       uint64_t span)
{
	return train_mix64(train_mix64(train_mix64(train_mix64(seed) + epoch) + shard) + span);
}

/* p = a permutation of 0..n-1: the identity, shuffled when shuffle. */
static void permute(uint32_t *p, uint64_t n, bool shuffle, uint64_t state)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint32_t)i;
	if (!shuffle)
		return;
	for (uint64_t i = n - 1; n > 1 && i > 0; i--) {
		uint64_t j = rng_below(&state, i + 1);
		uint32_t t = p[i];

		p[i] = p[j];
		p[j] = t;
	}
}

/* ---- orders and cursors ---- */

int train_order_init(struct order *o, size_t nshards, uint64_t max_spans)
{
	o->epoch = NONE;
	o->span_of = NONE;
	o->shard = malloc(nshards * sizeof(*o->shard));
	o->base = malloc((nshards + 1) * sizeof(*o->base));
	o->span = malloc((max_spans ? max_spans : 1) * sizeof(*o->span));
	return o->shard && o->base && o->span ? 0 : -ENOMEM;
}

void train_order_free(struct order *o)
{
	free(o->shard);
	free(o->base);
	free(o->span);
}

static void order_epoch(const struct train_loader *l, struct order *o,
			uint64_t epoch)
{
	if (o->epoch == epoch)
		return;
	o->rng_state = train_derive(l->cfg.seed, epoch, NONE, NONE);
	permute(o->shard, l->nshards, l->cfg.shuffle, o->rng_state);
	o->base[0] = 0;
	for (size_t k = 0; k < l->nshards; k++)
		o->base[k + 1] = o->base[k] + l->shards[o->shard[k]].nseq;
	o->epoch = epoch;
	o->span_of = NONE;
}

static void order_spans(const struct train_loader *l, struct order *o,
			uint64_t shard_k)
{
	const struct shard *sh = &l->shards[o->shard[shard_k]];

	if (o->span_of == shard_k)
		return;
	permute(o->span, sh->nspans, l->cfg.shuffle,
		train_derive(l->cfg.seed, o->epoch, o->shard[shard_k], NONE));
	o->last_at = 0;
	for (uint64_t i = 0; i < sh->nspans; i++)
		if (o->span[i] == sh->nspans - 1)
			o->last_at = i;
	o->span_of = shard_k;
}

/* Moves c forward until it names a place that exists. */
void train_normalise(const struct train_loader *l, struct order *o,
		      struct cursor *c)
{
	for (;;) {
		const struct shard *sh;

		order_epoch(l, o, c->epoch);
		if (c->shard_k >= l->nshards) {
			c->epoch++;
			c->shard_k = c->span_k = c->seq = 0;
			continue;
		}
		sh = &l->shards[o->shard[c->shard_k]];
		if (c->span_k >= sh->nspans) {
			c->shard_k++;
			c->span_k = c->seq = 0;
			continue;
		}
		order_spans(l, o, c->shard_k);
		if (c->seq >= (o->span[c->span_k] == sh->nspans - 1
			       ? sh->last_nseq : sh->spq)) {
			c->span_k++;
			c->seq = 0;
			continue;
		}
		return;
	}
}

/* The span at normalised cursor c. */
static void span_at(const struct train_loader *l, struct order *o,
		    const struct cursor *c, struct span *sp)
{
	const struct shard *sh;
	uint64_t before;

	order_epoch(l, o, c->epoch);
	order_spans(l, o, c->shard_k);
	sh = &l->shards[o->shard[c->shard_k]];
	sp->epoch = c->epoch;
	sp->shard_k = c->shard_k;
	sp->span_k = c->span_k;
	sp->shard = o->shard[c->shard_k];
	sp->span = o->span[c->span_k];
	sp->nseq = sp->span == sh->nspans - 1 ? sh->last_nseq : sh->spq;
	before = c->span_k * sh->spq;
	if (o->last_at < c->span_k)
		before -= sh->spq - sh->last_nseq;
	sp->g0 = o->base[c->shard_k] + before;
	sp->first = c->seq;
}

/* The first order index >= from in sp that belongs to this rank. */
static uint64_t first_owned(const struct train_loader *l,
			    const struct span *sp, uint64_t from)
{
	uint64_t w = l->world, at = (sp->g0 + from) % w;

	return from + (l->rank + w - at) % w;
}

/* ---- the built-in prefetch hint ---- */

static void ms_timeout(int fd, int opt, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000,
			      .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/* Sends "prefetch REL" to an fmfs control socket; 0 if it said ok. */
static int fmfs_prefetch(const char *sock, const char *rel)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char req[PATH_MAX + 16], ans[256];
	ssize_t n;
	size_t len;
	int fd, rc = -EIO;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	len = (size_t)snprintf(req, sizeof(req), "prefetch %s\n", rel);
	if (len >= sizeof(req))
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ms_timeout(fd, SO_RCVTIMEO, FMFS_CTL_TIMEOUT_MS);
	ms_timeout(fd, SO_SNDTIMEO, FMFS_CTL_TIMEOUT_MS);
	if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    write(fd, req, len) == (ssize_t)len) {
		n = read(fd, ans, sizeof(ans) - 1);
		if (n >= 2 && !strncmp(ans, "ok", 2))
			rc = 0;
	}
	close(fd);
	return rc;
}

/* Finds the fmfs mount real (a resolved path) is on, once per directory:
 * the topmost ancestor on the same device is the file system's root, and
 * an fmfs root names its control socket in an xattr.  Returns the path
 * relative to the mount root, or NULL when it is not on fmfs. */
static const char *fmfs_relative(struct train_loader *l, const char *real)
{
	char dir[PATH_MAX], top[PATH_MAX];
	const char *slash = strrchr(real, '/');
	struct stat st, pst;
	size_t rl;
	ssize_t n;

	if (!slash || slash == real)
		return NULL;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - real), real);
	if (strcmp(dir, l->hint_dir)) {
		snprintf(l->hint_dir, sizeof(l->hint_dir), "%s", dir);
		l->hint_root[0] = '\0';
		if (stat(dir, &st))
			return NULL;
		snprintf(top, sizeof(top), "%s", dir);
		for (;;) {
			char *s = strrchr(top, '/');
			char parent[PATH_MAX];

			if (!s || s == top)
				snprintf(parent, sizeof(parent), "/");
			else
				snprintf(parent, sizeof(parent), "%.*s",
					 (int)(s - top), top);
			if (!strcmp(parent, top) || stat(parent, &pst) ||
			    pst.st_dev != st.st_dev)
				break;
			snprintf(top, sizeof(top), "%s", parent);
		}
		n = getxattr(top, FMFS_CTL_XATTR, l->hint_sock,
			     sizeof(l->hint_sock) - 1);
		if (n <= 0)
			return NULL;
		l->hint_sock[n] = '\0';
		snprintf(l->hint_root, sizeof(l->hint_root), "%s", top);
	}
	if (!l->hint_root[0])
		return NULL;
	rl = strlen(l->hint_root);
	if (!strcmp(l->hint_root, "/"))
		return real + 1;
	if (strncmp(real, l->hint_root, rl) || real[rl] != '/')
		return NULL;
	return real + rl + 1;
}

static void hint(struct train_loader *l, const char *path)
{
	char real[PATH_MAX];
	const char *rel;
	int fd;

	atomic_fetch_add_explicit(&l->st_hints, 1, memory_order_relaxed);
	if (l->cfg.prefetch_fn) {
		l->cfg.prefetch_fn(l->cfg.prefetch_arg, path);
		return;
	}
	if (realpath(path, real) && (rel = fmfs_relative(l, real)) &&
	    !strchr(rel, '\n') && !fmfs_prefetch(l->hint_sock, rel)) {
		atomic_fetch_add_explicit(&l->st_hints_fmfs, 1,
					  memory_order_relaxed);
		return;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
		close(fd);
	}
}

/* ---- the reader thread ---- */

void train_add_stat(_Atomic uint64_t *s, uint64_t v)
{
	atomic_fetch_add_explicit(s, v, memory_order_relaxed);
}

/* Opens shard sh for the reader and checks it is what open saw. */
static int reader_open(struct train_loader *l, const struct shard *sh,
		       int *fdp, char *msg, size_t msg_len)
{
	struct train_shard_info now;
	int fd, rc;

	fd = open(sh->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", sh->path, strerror(e));
		return -e;
	}
	rc = train_shard_info_fd(fd, sh->path, &now, msg, msg_len);
	if (!rc && (now.kind != sh->info.kind ||
		    now.ntokens != sh->info.ntokens ||
		    now.dtype != sh->info.dtype ||
		    now.payload_crc != sh->info.payload_crc ||
		    now.vocab_size != sh->info.vocab_size)) {
		util_msg(msg, msg_len, "%s: the shard changed since the "
			 "loader opened it; reopen the loader", sh->path);
		rc = -EBADMSG;
	}
	if (rc) {
		close(fd);
		return rc;
	}
	train_add_stat(&l->st_opened, 1);
	*fdp = fd;
	return 0;
}

/* Reads span sp of shard sh (open as fd) into slot s and checks it. */
static int fill(struct train_loader *l, struct shard *sh, int fd,
		struct slot *s, char *msg, size_t msg_len)
{
	const struct train_shard_info *in = &sh->info;
	uint64_t dsz = in->dtype, t0, tn, start, a0, a1, done = 0;
	uint64_t bad_i = 0, bytes = 0, reads = 0;
	uint32_t bad_t = 0;
	int rc;

	if (sh->whole) {
		t0 = 0;
		tn = in->ntokens;
	} else {
		t0 = s->sp.span * sh->spq * l->cfg.seq_len;
		tn = s->sp.nseq * l->cfg.seq_len + 1;
	}
	if (!sh->whole && in->has_crc && !sh->verified) {
		/* A split shard's CRC covers every span: stream it once
		 * now, before any of its tokens is handed out. */
		rc = train_shard_check_fd(fd, sh->path, in,
					  l->cfg.vocab_size, s->buf,
					  l->buf_bytes, &l->stop, &bytes,
					  &reads, msg, msg_len);
		train_add_stat(&l->st_bytes, bytes);
		train_add_stat(&l->st_reads, reads);
		if (rc)
			return rc;
		train_add_stat(&l->st_verified, 1);
		sh->verified = true;
	}
	start = in->data_offset + t0 * dsz;
	a0 = start & ~(IO_ALIGN - 1);
	a1 = (start + tn * dsz + IO_ALIGN - 1) & ~(IO_ALIGN - 1);
	if (a1 > in->file_bytes)
		a1 = in->file_bytes;
	if (a1 - a0 > l->buf_bytes) { /* open sized the buffers for this */
		util_msg(msg, msg_len, "%s: internal error: span of %llu "
			 "bytes in %zu-byte buffers", sh->path,
			 (unsigned long long)(a1 - a0), l->buf_bytes);
		return -EIO;
	}
	while (a0 + done < a1) {
		uint64_t want = a1 - a0 - done;
		ssize_t n;

		if (want > TRAIN_READ_CHUNK_BYTES)
			want = TRAIN_READ_CHUNK_BYTES;
		if (atomic_load(&l->stop))
			return -ECANCELED;
		n = pread(fd, s->buf + done, want, (off_t)(a0 + done));
		if (n < 0 && errno == EINTR)
			continue;
		train_add_stat(&l->st_reads, 1);
		if (n < 0) {
			int e = errno;

			util_msg(msg, msg_len, "%s: read error at offset "
				 "%llu: %s", sh->path,
				 (unsigned long long)(a0 + done), strerror(e));
			return -EIO;
		}
		if (n == 0) {
			util_msg(msg, msg_len, "%s: truncated: the file ends "
				 "at %llu bytes, the header says %llu",
				 sh->path, (unsigned long long)(a0 + done),
				 (unsigned long long)in->file_bytes);
			return -EBADMSG;
		}
		train_add_stat(&l->st_bytes, (uint64_t)n);
		done += (uint64_t)n;
	}
	s->tok_off = (size_t)(start - a0);
	if (sh->whole && in->has_crc) {
		uint32_t crc = util_crc32c(0, s->buf + s->tok_off, tn * dsz);

		if (crc != in->payload_crc) {
			util_msg(msg, msg_len, "%s: payload checksum mismatch "
				 "(header says 0x%08x, the tokens give "
				 "0x%08x): the shard is corrupt", sh->path,
				 in->payload_crc, crc);
			return -EBADMSG;
		}
		train_add_stat(&l->st_verified, 1);
	}
	if (train_tokens_scan(s->buf + s->tok_off, tn, in->dtype,
			      train_token_limit(in, l->cfg.vocab_size),
			      &bad_i, &bad_t))
		return train_range_error(sh->path, in, l->cfg.vocab_size,
					 t0 + bad_i, bad_t, msg, msg_len);
	train_add_stat(&l->st_spans, 1);
	return 0;
}

/* The next free slot, or NULL when the loader is closing. */
static struct slot *slot_wait_free(struct train_loader *l)
{
	struct slot *s;

	pthread_mutex_lock(&l->lock);
	s = &l->slots[l->produced % l->nslots];
	while (s->state != SLOT_FREE && !atomic_load(&l->stop))
		pthread_cond_wait(&l->freed, &l->lock);
	if (atomic_load(&l->stop))
		s = NULL;
	pthread_mutex_unlock(&l->lock);
	return s;
}

static void slot_publish(struct train_loader *l, struct slot *s)
{
	pthread_mutex_lock(&l->lock);
	s->state = SLOT_READY;
	l->produced++;
	pthread_cond_signal(&l->ready);
	pthread_mutex_unlock(&l->lock);
}

void *train_reader_main(void *arg)
{
	struct train_loader *l = arg;
	struct cursor c = l->start;
	uint64_t open_epoch = NONE, open_k = NONE;
	int fd = -1;

	for (;;) {
		struct slot *s;
		struct span sp;
		int rc = 0;

		train_normalise(l, &l->rorder, &c);
		span_at(l, &l->rorder, &c, &sp);
		if (first_owned(l, &sp, sp.first) >= sp.nseq) {
			c.span_k++;      /* nothing here for this rank */
			c.seq = 0;
			continue;
		}
		if (!(s = slot_wait_free(l)))
			break;
		s->sp = sp;
		s->err = 0;
		if (open_epoch != c.epoch || open_k != c.shard_k) {
			if (fd >= 0)
				close(fd);
			fd = -1;
			open_epoch = c.epoch;
			open_k = c.shard_k;
			rc = reader_open(l, &l->shards[sp.shard], &fd, s->msg,
					 sizeof(s->msg));
			for (unsigned i = 1; !rc && i <= l->cfg.prefetch_shards
			     && c.shard_k + i < l->nshards; i++)
				hint(l, l->shards[l->rorder.shard[c.shard_k +
								  i]].path);
		}
		if (!rc)
			rc = fill(l, &l->shards[sp.shard], fd, s, s->msg,
				  sizeof(s->msg));
		if (rc == -ECANCELED)
			break;
		s->err = rc;
		slot_publish(l, s);
		if (rc)
			break;
		c.span_k++;
		c.seq = 0;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* ---- the caller's side ---- */

static void slot_release(struct train_loader *l)
{
	pthread_mutex_lock(&l->lock);
	l->cur->state = SLOT_FREE;
	l->consumed++;
	pthread_cond_signal(&l->freed);
	pthread_mutex_unlock(&l->lock);
	l->cur = NULL;
}

/* Takes the next ready span; adds the time waited to *waited_ns. */
static int take_span(struct train_loader *l, uint64_t *waited_ns)
{
	struct slot *s;

	pthread_mutex_lock(&l->lock);
	s = &l->slots[l->consumed % l->nslots];
	if (s->state != SLOT_READY) {
		uint64_t t0 = util_now_ns();

		while (s->state != SLOT_READY)
			pthread_cond_wait(&l->ready, &l->lock);
		*waited_ns += util_now_ns() - t0;
	}
	pthread_mutex_unlock(&l->lock);
	if (s->err) {
		l->err = s->err;
		snprintf(l->errmsg, sizeof(l->errmsg), "%s", s->msg);
		return s->err;
	}
	l->cur = s;
	permute(l->perm, s->sp.nseq, l->cfg.shuffle,
		train_derive(l->cfg.seed, s->sp.epoch, s->sp.shard, s->sp.span));
	l->k = first_owned(l, &s->sp, s->sp.first);
	return 0;
}

int train_loader_next(struct train_loader *l, struct train_batch *b,
		      char *msg, size_t msg_len)
{
	unsigned B = l->cfg.batch, T = l->cfg.seq_len;
	uint64_t waited = 0, epoch = 0;
	int rc = 0;

	if (l->err) {
		util_msg(msg, msg_len, "%s", l->errmsg);
		return l->err;
	}
	for (unsigned row = 0; row < B; row++) {
		const struct slot *s;
		const struct shard *sh;
		uint64_t q;

		if (!l->cur && (rc = take_span(l, &waited)))
			break;
		s = l->cur;
		sh = &l->shards[s->sp.shard];
		if (row == 0)
			epoch = s->sp.epoch;
		q = l->perm[l->k];
		train_tokens_decode(s->buf + s->tok_off +
				    q * T * sh->info.dtype, (uint64_t)T + 1,
				    sh->info.dtype,
				    l->tokens + (size_t)row * (T + 1));
		l->k += l->world;
		l->pos.epoch = s->sp.epoch;
		l->pos.shard_k = s->sp.shard_k;
		if (l->k >= s->sp.nseq) {
			l->pos.span_k = s->sp.span_k + 1;
			l->pos.seq = 0;
			slot_release(l);
		} else {
			l->pos.span_k = s->sp.span_k;
			l->pos.seq = l->k;
		}
	}
	atomic_fetch_add_explicit(&l->st_wait_ns, waited,
				  memory_order_relaxed);
	atomic_store_explicit(&l->st_last_wait_ns, waited,
			      memory_order_relaxed);
	if (waited)
		train_add_stat(&l->st_waits, 1);
	if (rc) {
		/* Rows taken so far are lost with the batch: the stream
		 * cannot go on past a bad span anyway. */
		util_msg(msg, msg_len, "%s", l->errmsg);
		return rc;
	}
	train_normalise(l, &l->corder, &l->pos);
	for (unsigned row = 0; row < B; row++) {
		const int32_t *t = l->tokens + (size_t)row * (T + 1);

		memcpy(l->inputs + (size_t)row * T, t, T * sizeof(*t));
		memcpy(l->targets + (size_t)row * T, t + 1, T * sizeof(*t));
	}
	b->batch = B;
	b->seq_len = T;
	b->tokens = l->tokens;
	b->inputs = l->inputs;
	b->targets = l->targets;
	b->epoch = epoch;
	b->index = l->batches++;
	b->wait_ms = (double)waited / 1e6;
	train_add_stat(&l->st_batches, 1);
	train_add_stat(&l->st_sequences, B);
	atomic_store_explicit(&l->st_epoch, l->pos.epoch,
			      memory_order_relaxed);
	return 0;
}

void train_loader_position(const struct train_loader *l,
			   struct train_pos *out)
{
	memset(out, 0, sizeof(*out));
	out->version = TRAIN_POS_VERSION;
	out->rank = l->rank;
	out->world_size = l->world;
	out->seq_len = l->cfg.seq_len;
	out->seed = l->cfg.seed;
	out->data_id = l->data_id;
	out->epoch = l->pos.epoch;
	out->shard = l->pos.shard_k;
	out->span = l->pos.span_k;
	out->seq = l->pos.seq;
	out->rng_state = train_derive(l->cfg.seed, l->pos.epoch, NONE, NONE);
	out->batches = l->batches;
}

void train_loader_info(const struct train_loader *l,
		       struct train_loader_info *out)
{
	memset(out, 0, sizeof(*out));
	out->shards = l->nshards;
	out->tokens = l->ntokens;
	out->sequences = l->sequences;
	out->rank_sequences = (l->sequences + l->world - 1 - l->rank) /
			      l->world;
	out->tail_tokens = l->tail_tokens;
	out->rank = l->rank;
	out->world_size = l->world;
	out->buffers = l->nslots;
	out->buffer_bytes = l->buf_bytes;
}

void train_loader_get_stats(struct train_loader *l,
			    struct train_loader_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->batches = atomic_load(&l->st_batches);
	out->sequences = atomic_load(&l->st_sequences);
	out->epoch = atomic_load(&l->st_epoch);
	out->bytes_read = atomic_load(&l->st_bytes);
	out->reads = atomic_load(&l->st_reads);
	out->spans_read = atomic_load(&l->st_spans);
	out->shards_opened = atomic_load(&l->st_opened);
	out->shards_verified = atomic_load(&l->st_verified);
	out->hints = atomic_load(&l->st_hints);
	out->hints_fmfs = atomic_load(&l->st_hints_fmfs);
	out->data_waits = atomic_load(&l->st_waits);
	out->data_wait_ns = atomic_load(&l->st_wait_ns);
	out->data_wait_ms = (double)out->data_wait_ns / 1e6;
	out->last_wait_ms = (double)atomic_load(&l->st_last_wait_ns) / 1e6;
	out->buffers = l->nslots;
	out->buffer_bytes = l->buf_bytes;
	out->buffer_allocs = atomic_load(&l->st_allocs);
}
