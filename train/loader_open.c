/* SPDX-License-Identifier: MIT */
/*
 * loader_open.c - the data loader opened and closed: its configuration
 * and environment overrides checked, the shard list made from files and
 * directories, the plan (spans of every shard, this rank's share), a
 * resume position checked against it, the buffers, the shards verified,
 * the reader thread started; and all of it stopped and freed.
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

/* ---- open and close ---- */

void train_loader_config_init(struct train_loader_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->shuffle = true;
	cfg->rank = -1;
	cfg->world_size = -1;
	cfg->span_bytes = DEFAULT_SPAN_BYTES;
	cfg->buffers = 2;
	cfg->prefetch_shards = 1;
}

/* An integer from the environment, or def when unset or not a number. */
static long env_int(const char *name, long def)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtol(v, &end, 10);
	return errno || *end ? def : x;
}

static int add_path(struct train_loader *l, size_t *cap, const char *path,
		    char *msg, size_t msg_len)
{
	if (l->nshards == TRAIN_SHARDS_MAX) {
		util_msg(msg, msg_len, "%s: more than %u shards", path,
			 TRAIN_SHARDS_MAX);
		return -EINVAL;
	}
	if (l->nshards == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		struct shard *ns = realloc(l->shards, nc * sizeof(*ns));

		if (!ns)
			goto oom;
		l->shards = ns;
		*cap = nc;
	}
	memset(&l->shards[l->nshards], 0, sizeof(l->shards[0]));
	if (!(l->shards[l->nshards].path = strdup(path)))
		goto oom;
	l->nshards++;
	return 0;
oom:
	util_msg(msg, msg_len, "%s: out of memory", path);
	return -ENOMEM;
}

static int bin_filter(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return d->d_name[0] != '.' && n > 4 &&
	       !strcmp(d->d_name + n - 4, ".bin");
}

/* Name order in bytes (alphasort would follow the locale). */
static int name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int add_dir(struct train_loader *l, size_t *cap, const char *dir,
		   char *msg, size_t msg_len)
{
	struct dirent **list;
	size_t before = l->nshards;
	int n, rc = 0;

	n = scandir(dir, &list, bin_filter, name_cmp);
	if (n < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", dir, strerror(e));
		return -e;
	}
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];
		struct stat st;

		if (!rc && (size_t)snprintf(path, sizeof(path), "%s/%s", dir,
					    list[i]->d_name) >= sizeof(path)) {
			util_msg(msg, msg_len, "%s/%s: path too long", dir,
				 list[i]->d_name);
			rc = -ENAMETOOLONG;
		}
		if (!rc && !stat(path, &st) && S_ISREG(st.st_mode))
			rc = add_path(l, cap, path, msg, msg_len);
		free(list[i]);
	}
	free(list);
	if (!rc && l->nshards == before) {
		util_msg(msg, msg_len, "%s: no shard (*.bin) in this "
			 "directory", dir);
		rc = -ENOENT;
	}
	return rc;
}

static int check_config(const struct train_loader_config *c, int rank,
			int world, char *msg, size_t msg_len)
{
	if (!c->batch || !c->seq_len || c->seq_len > TRAIN_SEQ_LEN_MAX ||
	    (uint64_t)c->batch * (c->seq_len + 1) > TRAIN_BATCH_TOKENS_MAX) {
		util_msg(msg, msg_len, "loader: batch %u x sequence length %u"
			 " is not allowed (T 1..%u, B x (T+1) at most %u)",
			 c->batch, c->seq_len, TRAIN_SEQ_LEN_MAX,
			 TRAIN_BATCH_TOKENS_MAX);
		return -EINVAL;
	}
	if (!c->vocab_size || c->vocab_size > INT32_MAX) {
		util_msg(msg, msg_len, "loader: the model's vocabulary size "
			 "must be 1..%d (given %u)", INT32_MAX, c->vocab_size);
		return -EINVAL;
	}
	if (world < 1 || world > TRAIN_WORLD_MAX || rank < 0 ||
	    rank >= world) {
		util_msg(msg, msg_len, "loader: rank %d of world size %d is "
			 "not allowed (check RANK and WORLD_SIZE)", rank,
			 world);
		return -EINVAL;
	}
	if (c->buffers == 1 || c->buffers > TRAIN_BUFFERS_MAX ||
	    (c->span_bytes &&
	     (c->span_bytes < SPAN_BYTES_MIN ||
	      c->span_bytes > TRAIN_SPAN_BYTES_MAX))) {
		util_msg(msg, msg_len, "loader: %u buffers of %llu bytes is "
			 "not allowed (2..%u buffers, spans of %llu bytes to "
			 "%llu)", c->buffers,
			 (unsigned long long)c->span_bytes,
			 TRAIN_BUFFERS_MAX, SPAN_BYTES_MIN,
			 (unsigned long long)TRAIN_SPAN_BYTES_MAX);
		return -EINVAL;
	}
	return 0;
}

/* Reads every header and lays out the spans; sizes the buffers. */
static int plan(struct train_loader *l, char *msg, size_t msg_len)
{
	uint64_t T = l->cfg.seq_len, span = l->cfg.span_bytes, h = 0, need = 0;

	for (size_t i = 0; i < l->nshards; i++) {
		struct shard *sh = &l->shards[i];
		const struct train_shard_info *in = &sh->info;
		uint64_t read_tokens;
		int rc;

		rc = train_shard_info(sh->path, &sh->info, msg, msg_len);
		if (rc)
			return rc;
		if (in->vocab_size > l->cfg.vocab_size) {
			util_msg(msg, msg_len, "%s: tokenized with a "
				 "vocabulary of %u tokens; the model's "
				 "vocabulary size is %u", sh->path,
				 in->vocab_size, l->cfg.vocab_size);
			return -ERANGE;
		}
		sh->nseq = in->ntokens > T ? (in->ntokens - 1) / T : 0;
		sh->whole = in->ntokens * in->dtype <= span;
		if (!sh->nseq) {
			sh->spq = sh->nspans = sh->last_nseq = 0;
			read_tokens = 0;
		} else if (sh->whole) {
			sh->spq = sh->last_nseq = sh->nseq;
			sh->nspans = 1;
			read_tokens = in->ntokens;
		} else {
			uint64_t fit = span / in->dtype;

			sh->spq = fit > T + 1 ? (fit - 1) / T : 1;
			if (sh->spq > sh->nseq)
				sh->spq = sh->nseq;
			sh->nspans = (sh->nseq + sh->spq - 1) / sh->spq;
			sh->last_nseq = sh->nseq - (sh->nspans - 1) * sh->spq;
			read_tokens = sh->spq * T + 1;
		}
		if (sh->nspans > UINT32_MAX || sh->spq > UINT32_MAX) {
			util_msg(msg, msg_len, "%s: too many sequences for "
				 "one span; use a larger span size", sh->path);
			return -EINVAL;
		}
		if (read_tokens * in->dtype > need)
			need = read_tokens * in->dtype;
		if (sh->nspans > l->max_spans)
			l->max_spans = sh->nspans;
		if (sh->spq > l->max_spq)
			l->max_spq = sh->spq;
		l->ntokens += in->ntokens;
		l->sequences += sh->nseq;
		l->tail_tokens += sh->nseq ? in->ntokens - 1 - sh->nseq * T
					   : in->ntokens;
		h = train_mix64(h ^ in->ntokens) + (uint64_t)in->dtype +
		    (sh->whole ? 1 : 2) * sh->spq;
	}
	l->data_id = train_mix64(train_mix64(h ^ l->nshards) + T) + l->cfg.shuffle;
	if (l->sequences < l->world) {
		util_msg(msg, msg_len, "loader: the shards hold %llu "
			 "sequences of %llu tokens, fewer than the %u ranks "
			 "(%llu tokens in %zu shards)",
			 (unsigned long long)l->sequences,
			 (unsigned long long)(T + 1), l->world,
			 (unsigned long long)l->ntokens, l->nshards);
		return -EINVAL;
	}
	/* A span may start anywhere in a page: one page of slack each
	 * side for page-aligned reads. */
	l->buf_bytes = (size_t)((need + 3 * IO_ALIGN - 1) & ~(IO_ALIGN - 1));
	return 0;
}

static int check_resume(struct train_loader *l, const struct train_pos *p,
			char *msg, size_t msg_len)
{
	const char *what = NULL;

	if (p->version != TRAIN_POS_VERSION)
		what = "a position of another version";
	else if (p->rank != l->rank || p->world_size != l->world)
		what = "another rank or world size";
	else if (p->seq_len != l->cfg.seq_len)
		what = "another sequence length";
	else if (p->seed != l->cfg.seed)
		what = "another seed";
	else if (p->data_id != l->data_id)
		what = "other shards (token counts), span size or shuffle "
		       "setting";
	else if (p->rng_state != train_derive(p->seed, p->epoch, NONE, NONE))
		what = "a generator state that does not match its seed and "
		       "epoch (a damaged position)";
	if (what) {
		util_msg(msg, msg_len, "loader: cannot resume: the position "
			 "(rank %u of %u, T %u, seed %llu, epoch %llu) was "
			 "saved with %s", p->rank, p->world_size, p->seq_len,
			 (unsigned long long)p->seed,
			 (unsigned long long)p->epoch, what);
		return -EINVAL;
	}
	l->start.epoch = p->epoch;
	l->start.shard_k = p->shard;
	l->start.span_k = p->span;
	l->start.seq = p->seq;
	l->batches = p->batches;
	return 0;
}

static int alloc_buffers(struct train_loader *l)
{
	size_t B = l->cfg.batch, T = l->cfg.seq_len;

	l->slots = calloc(l->nslots, sizeof(*l->slots));
	if (!l->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < l->nslots; i++)
		if (posix_memalign((void **)&l->slots[i].buf, IO_ALIGN,
				   l->buf_bytes))
			return -ENOMEM;
		else
			train_add_stat(&l->st_allocs, 1);
	l->perm = malloc((l->max_spq ? l->max_spq : 1) * sizeof(*l->perm));
	l->tokens = malloc(B * (T + 1) * sizeof(*l->tokens));
	l->inputs = malloc(B * T * sizeof(*l->inputs));
	l->targets = malloc(B * T * sizeof(*l->targets));
	if (!l->perm || !l->tokens || !l->inputs || !l->targets ||
	    train_order_init(&l->rorder, l->nshards, l->max_spans) ||
	    train_order_init(&l->corder, l->nshards, l->max_spans))
		return -ENOMEM;
	return 0;
}

/* verify_at_open: every shard read whole once, on slot 0's buffer. */
static int verify_all(struct train_loader *l, char *msg, size_t msg_len)
{
	for (size_t i = 0; i < l->nshards; i++) {
		struct shard *sh = &l->shards[i];
		uint64_t bytes = 0, reads = 0;
		int fd = open(sh->path, O_RDONLY | O_CLOEXEC), rc;

		if (fd < 0) {
			rc = -errno;
			util_msg(msg, msg_len, "%s: %s", sh->path,
				 strerror(-rc));
			return rc;
		}
		rc = train_shard_check_fd(fd, sh->path, &sh->info,
					  l->cfg.vocab_size, l->slots[0].buf,
					  l->buf_bytes, NULL, &bytes, &reads,
					  msg, msg_len);
		close(fd);
		train_add_stat(&l->st_bytes, bytes);
		train_add_stat(&l->st_reads, reads);
		if (rc)
			return rc;
		train_add_stat(&l->st_verified, 1);
		sh->verified = true;
	}
	return 0;
}

int train_loader_open(const struct train_loader_config *cfg,
		      const char *const *paths, size_t npaths,
		      struct train_loader **out, char *msg, size_t msg_len)
{
	struct train_loader *l;
	size_t cap = 0;
	int rank, world, rc;

	world = cfg->world_size >= 0 ? cfg->world_size
				     : (int)env_int("WORLD_SIZE", 1);
	rank = cfg->rank >= 0 ? cfg->rank : (int)env_int("RANK", 0);
	if ((rc = check_config(cfg, rank, world, msg, msg_len)))
		return rc;
	if (!npaths || !paths) {
		util_msg(msg, msg_len, "loader: no shard given");
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		util_msg(msg, msg_len, "loader: out of memory");
		return -ENOMEM;
	}
	l->cfg = *cfg;
	l->cfg.resume = NULL;
	if (!l->cfg.span_bytes)
		l->cfg.span_bytes = DEFAULT_SPAN_BYTES;
	l->nslots = cfg->buffers ? cfg->buffers : 2;
	l->rank = (unsigned)rank;
	l->world = (unsigned)world;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->ready, NULL);
	pthread_cond_init(&l->freed, NULL);
	for (size_t i = 0; i < npaths && !rc; i++) {
		struct stat st;

		if (stat(paths[i], &st)) {
			rc = -errno;
			util_msg(msg, msg_len, "%s: %s", paths[i],
				 strerror(-rc));
		} else if (S_ISDIR(st.st_mode)) {
			rc = add_dir(l, &cap, paths[i], msg, msg_len);
		} else {
			rc = add_path(l, &cap, paths[i], msg, msg_len);
		}
	}
	if (!rc)
		rc = plan(l, msg, msg_len);
	if (!rc && cfg->resume)
		rc = check_resume(l, cfg->resume, msg, msg_len);
	if (!rc && (rc = alloc_buffers(l)))
		util_msg(msg, msg_len, "loader: out of memory for %u buffers "
			 "of %zu bytes", l->nslots, l->buf_bytes);
	if (!rc && cfg->verify_at_open)
		rc = verify_all(l, msg, msg_len);
	if (!rc) {
		train_normalise(l, &l->corder, &l->start);
		l->pos = l->start;
		rc = -pthread_create(&l->thread, NULL, train_reader_main, l);
		if (rc)
			util_msg(msg, msg_len, "loader: cannot start the "
				 "reader thread: %s", strerror(-rc));
		l->thread_started = !rc;
	}
	if (rc) {
		train_loader_close(l);
		return rc;
	}
	*out = l;
	return 0;
}

void train_loader_close(struct train_loader *l)
{
	if (!l)
		return;
	if (l->thread_started) {
		pthread_mutex_lock(&l->lock);
		atomic_store(&l->stop, true);
		pthread_cond_broadcast(&l->freed);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
	}
	for (unsigned i = 0; l->slots && i < l->nslots; i++)
		free(l->slots[i].buf);
	free(l->slots);
	for (size_t i = 0; i < l->nshards; i++)
		free(l->shards[i].path);
	free(l->shards);
	train_order_free(&l->rorder);
	train_order_free(&l->corder);
	free(l->perm);
	free(l->tokens);
	free(l->inputs);
	free(l->targets);
	pthread_cond_destroy(&l->ready);
	pthread_cond_destroy(&l->freed);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
