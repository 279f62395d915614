/* SPDX-License-Identifier: MIT */
/*
 * open.c - opening a cache directory and closing it: the configuration's
 * defaults, the directory made or checked and tightened (0700, files
 * 0600), the lock that keeps a second process out, orphan files removed,
 * the index loaded (index.c), the write-back replayed (wb_replay.c), the
 * workers started; and all of it stopped and freed at close.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

/* ---- open and close ---- */

void cache_config_init(struct cache_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size_bytes = 1ull << 30;
	cfg->block_bytes = 1u << 20;
	cfg->high_pct = 95;
	cfg->low_pct = 85;
	cfg->readahead_first_bytes = 1u << 20;
	cfg->readahead_max_bytes = 64u << 20;
	cfg->inflight_max_bytes = 256u << 20;
	cfg->fetch_parallel = 16;
	cfg->fetch_timeout_ms = 30000;
	cfg->listing_max_bytes = 1ull << 30;
}

static uint64_t round_blocks(uint64_t n, uint64_t bb)
{
	return n < bb ? bb : n / bb * bb;
}

static int config_apply(struct cache *c, const struct cache_config *in,
			char *msg, size_t ml)
{
	struct cache_config d, *k = &c->cfg;
	uint64_t bb;

	cache_config_init(&d);
	*k = *in;
	/* ours only once copied below: a refusal before must not let
	 * cache_free free the caller's strings */
	k->dir = NULL;
	k->store_id = NULL;
#define DEF(x) do { if (!k->x) k->x = d.x; } while (0)
	DEF(block_bytes);
	DEF(high_pct);
	DEF(low_pct);
	DEF(readahead_first_bytes);
	DEF(readahead_max_bytes);
	DEF(inflight_max_bytes);
	DEF(fetch_parallel);
	DEF(fetch_timeout_ms);
	DEF(listing_max_bytes);
#undef DEF
	bb = k->block_bytes;
	if (!in->dir || !*in->dir || !in->store_id || !*in->store_id) {
		snprintf(msg, ml, "cache: no directory or store id given");
		return -EINVAL;
	}
	if (bb % 4096 || bb > (64u << 20)) {
		snprintf(msg, ml, "cache block size %llu is not a multiple of "
			 "4 KiB up to 64 MiB", (unsigned long long)bb);
		return -EINVAL;
	}
	if (k->size_bytes < 4 * bb) {
		snprintf(msg, ml, "cache size %llu is below 4 blocks of %llu "
			 "bytes", (unsigned long long)k->size_bytes,
			 (unsigned long long)bb);
		return -EINVAL;
	}
	if (k->low_pct >= k->high_pct || k->high_pct > 100) {
		snprintf(msg, ml, "cache eviction marks %u%%/%u%% are not "
			 "low < high <= 100", k->low_pct, k->high_pct);
		return -EINVAL;
	}
	if (k->fetch_parallel > 256)
		k->fetch_parallel = 256;
	if (k->inflight_max_bytes < bb)
		k->inflight_max_bytes = bb;
	if (k->readahead_max_bytes < k->readahead_first_bytes)
		k->readahead_max_bytes = k->readahead_first_bytes;
	c->high_bytes = k->size_bytes / 100 * k->high_pct;
	c->low_bytes = k->size_bytes / 100 * k->low_pct;
	c->run_max_bytes = CACHE_RUN_MAX_BYTES;
	if (c->run_max_bytes > k->inflight_max_bytes)
		c->run_max_bytes = k->inflight_max_bytes;
	if (c->run_max_bytes > k->size_bytes / 4)
		c->run_max_bytes = k->size_bytes / 4;
	c->run_max_bytes = round_blocks(c->run_max_bytes, bb);
	c->piece_bytes = round_blocks(k->size_bytes / 4 < (64ull << 20) ?
				      k->size_bytes / 4 : 64ull << 20, bb);
	c->nvmax = (unsigned)((16u << 20) / bb);
	if (c->nvmax < 1)
		c->nvmax = 1;
	if (c->nvmax > CACHE_VERIFY_BUFS)
		c->nvmax = CACHE_VERIFY_BUFS;
	k->dir = strdup(in->dir);
	k->store_id = strdup(in->store_id);
	if (!k->dir || !k->store_id) {
		snprintf(msg, ml, "cache: out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* chmod of every plain file in dir (relative to c->dirfd) to 0600 and
 * every directory to 0700; "." for the cache dir itself. */
static void tighten_in(struct cache *c, const char *dir)
{
	struct dirent *de;
	DIR *d;
	int fd = openat(c->dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return; /* not there: nothing to tighten */
	}
	while ((de = readdir(d))) {
		unsigned char t = de->d_type;
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (t == DT_UNKNOWN) {
			if (fstatat(dirfd(d), de->d_name, &sb,
				    AT_SYMLINK_NOFOLLOW))
				continue;
			t = S_ISDIR(sb.st_mode) ? DT_DIR :
			    S_ISREG(sb.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		if ((t == DT_DIR || t == DT_REG) &&
		    fchmodat(dirfd(d), de->d_name, t == DT_DIR ? 0700 : 0600,
			     0) && errno != ENOENT)
			cache_log("cannot chmod %s/%s/%s: %s", c->cfg.dir, dir,
				  de->d_name, strerror(errno));
	}
	closedir(d);
}

/* Nothing in the cache dir is for other users: the object bytes, the
 * keys in the indexes, the log.  Files are created 0600 and directories
 * 0700, and what fmfs made is tightened on every open (someone, or an
 * older fmfs, may have opened it up): the dir itself only if fmfs made
 * it (cache_config.dir_made, kept in the index: a directory the user
 * gave keeps its mode, and the 0600/0700 inside keep the data private),
 * its files (index.sqlite*, writeback.sqlite*,
 * the lock files, fmfs.log, ...) and directories, and the files in dirty/
 * and lost+found/.  objects/XX/ are chmodded by dir_prepare; the cache
 * files in them, created 0600, are not visited (millions of them; the
 * 0700 directories above shut them off anyway).  Called again after the
 * write-back opened (SQLite creates a missing database 0644 less the
 * umask).  Nothing else is touched: dir_prepare refuses a dir holding
 * anything a cache dir does not (cache_dir_foreign). */
static void dir_tighten(struct cache *c)
{
	tighten_in(c, ".");
	tighten_in(c, "dirty");
	tighten_in(c, "lost+found");
}

/* Creates DIR and DIR/objects/00..ff and takes DIR/index.lock. */
static int dir_prepare(struct cache *c, char *msg, size_t ml)
{
	const char *dir = c->cfg.dir;
	bool made = false;
	char sub[32], other[256];
	int rc;

	rc = cache_dir_foreign(dir, other, sizeof(other));
	if (rc == 1) {
		snprintf(msg, ml, "cache dir %s holds files fmfs did not make "
			 "('%s'); give an empty directory, or the cache dir of "
			 "an earlier mount, as --cache-dir", dir, other);
		return -EEXIST;
	}
	{
		char top[PATH_MAX];

		rc = util_mkdir_p_made(dir, 0700, top, sizeof(top));
		c->dir_made = !rc && top[0];
	}
	if (!rc) {
		c->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = c->dirfd < 0 ? -errno : 0;
	}
	if (rc) {
		snprintf(msg, ml, "cannot create cache dir %s: %s", dir,
			 strerror(-rc));
		return rc;
	}
	for (int i = -1; i < 256 && !rc; i++) {
		if (i < 0)
			snprintf(sub, sizeof(sub), "objects");
		else
			snprintf(sub, sizeof(sub), "objects/%02x", i);
		if (!mkdirat(c->dirfd, sub, 0700)) {
			made = true;
			continue;
		}
		if (errno != EEXIST)
			rc = -errno;
		else if (i >= 0 && fchmodat(c->dirfd, sub, 0700, 0))
			rc = -errno; /* objects/ itself: dir_tighten */
	}
	if (!rc && faccessat(c->dirfd, "objects", W_OK | X_OK, 0))
		rc = -errno;
	/* New names survive a power cut only once their parents are
	 * synced (a dirty file in a lost dir is lost with it). */
	if (!rc && made && (rc = util_fsync_at(c->dirfd, "objects")) == 0)
		rc = util_fsync_at(c->dirfd, ".");
	if (rc) {
		snprintf(msg, ml, "cache dir %s is not writable: %s; use "
			 "another --cache-dir", dir, strerror(-rc));
		return rc;
	}
	dir_tighten(c);
	/* Not DIR/lock: the mount command holds that one itself. */
	c->lockfd = openat(c->dirfd, "index.lock",
			   O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lockfd < 0 || flock(c->lockfd, LOCK_EX | LOCK_NB)) {
		rc = -errno;
		snprintf(msg, ml, "cache dir %s is in use by another fmfs "
			 "process (%s/index.lock: %s); use another "
			 "--cache-dir", dir, dir, strerror(-rc));
		return rc;
	}
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static bool parse_id(const char *name, uint64_t *id)
{
	char *end;

	if (strlen(name) != 16 || strspn(name, "0123456789abcdef") != 16)
		return false;
	*id = strtoull(name, &end, 16);
	return !*end;
}

/* Removes cache files the index does not know: left by a crash between
 * creating a file and the flush that would have recorded it, or by a
 * replaced index.  Runs before anything else uses the directory. */
static void clean_orphans(struct cache *c)
{
	uint64_t *ids = malloc((c->nobjects + 1) * sizeof(*ids));
	size_t n = 0, removed = 0;

	if (!ids)
		return;
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext)
			ids[n++] = f->id;
	qsort(ids, n, sizeof(*ids), id_cmp);
	for (unsigned x = 0; x < 256; x++) {
		char sub[32];
		struct dirent *de;
		DIR *d;
		int fd;

		snprintf(sub, sizeof(sub), "objects/%02x", x);
		fd = openat(c->dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || !(d = fdopendir(fd))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		while ((de = readdir(d))) {
			uint64_t id;

			if (!strcmp(de->d_name, ".") ||
			    !strcmp(de->d_name, ".."))
				continue;
			if (parse_id(de->d_name, &id) && (id & 0xff) == x &&
			    bsearch(&id, ids, n, sizeof(*ids), id_cmp))
				continue;
			if (!unlinkat(dirfd(d), de->d_name, 0))
				removed++;
		}
		closedir(d);
	}
	free(ids);
	if (removed)
		cache_log("removed %zu cache files of %s that the index does "
			  "not list (left by a crash)", removed, c->cfg.dir);
}

static void cache_free(struct cache *c)
{
	for (size_t i = 0; i < c->table_size; i++) {
		struct cache_file *f = c->table[i], *next;

		for (; f; f = next) {
			next = f->hnext;
			if (f->fd >= 0)
				close(f->fd);
			if (f->dfd >= 0)
				close(f->dfd);
			cache_file_free(f);
		}
	}
	free(c->table);
	free(c->dead_ids);
	for (unsigned i = 0; i < c->nvfree; i++)
		free(c->vbufs[i]);
	if (c->lockfd >= 0)
		close(c->lockfd);
	if (c->dirfd >= 0)
		close(c->dirfd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->room_cond);
	pthread_mutex_destroy(&c->dirty_lock);
	pthread_mutex_destroy(&c->fq_lock);
	pthread_cond_destroy(&c->fq_cond);
	pthread_cond_destroy(&c->srv_cond);
	pthread_mutex_destroy(&c->vlock);
	pthread_cond_destroy(&c->vcond);
	pthread_mutex_destroy(&c->wlock);
	pthread_cond_destroy(&c->wcond);
	free((char *)c->cfg.dir);
	free((char *)c->cfg.store_id);
	free(c);
}

static struct cache *cache_alloc(void)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->dirfd = c->lockfd = -1;
	c->next_id = 1;
	c->t0_ns = util_wall_ns();
	pthread_mutex_init(&c->lock, NULL);
	util_cond_init(&c->room_cond);
	pthread_mutex_init(&c->dirty_lock, NULL);
	pthread_mutex_init(&c->fq_lock, NULL);
	util_cond_init(&c->fq_cond);
	util_cond_init(&c->srv_cond);
	pthread_mutex_init(&c->vlock, NULL);
	pthread_cond_init(&c->vcond, NULL);
	pthread_mutex_init(&c->wlock, NULL);
	pthread_cond_init(&c->wcond, NULL);
	atomic_store(&c->connected, true);
	return c;
}

int cache_open(const struct cache_config *cfg, struct obj_store *st,
	       struct cache **out, char *msg, size_t msg_len)
{
	struct cache *c = cache_alloc();
	int rc;

	*out = NULL;
	if (msg_len)
		msg[0] = '\0';
	if (!c) {
		snprintf(msg, msg_len, "cache: out of memory");
		return -ENOMEM;
	}
	c->st = st;
	rc = config_apply(c, cfg, msg, msg_len);
	if (!rc)
		rc = dir_prepare(c, msg, msg_len);
	if (rc)
		goto out_free;
	rc = cache_uring_init(&c->uring);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start the I/O engine");
		goto out_free;
	}
	rc = cache_index_open(c, msg, msg_len);
	if (rc)
		goto out_free_uring;
	if (cache_index_dir_made(c, cfg->dir_made || c->dir_made) &&
	    fchmod(c->dirfd, 0700))
		cache_log("cannot chmod %s to 0700: %s", c->cfg.dir,
			  strerror(errno));
	clean_orphans(c);
	rc = cache_wb_open(c, msg, msg_len);
	if (rc)
		goto out_close_wb;
	tighten_in(c, "."); /* a new writeback.sqlite */
	pthread_mutex_lock(&c->lock);
	if (c->used_bytes > c->high_bytes) /* the cap went down */
		cache_evict_locked(c, c->used_bytes - c->low_bytes);
	pthread_mutex_unlock(&c->lock);
	rc = cache_fetch_start(c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start fetch threads");
		goto out_close_wb;
	}
	rc = cache_warm_start(c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start a thread");
		goto out_stop_fetch;
	}
	rc = cache_index_start(c);
	if (rc) {
		snprintf(msg, msg_len, "cache: cannot start the index "
			 "flusher");
		goto out_stop_warm;
	}
	*out = c;
	return 0;
out_stop_warm:
	cache_warm_stop(c);
out_stop_fetch:
	cache_fetch_stop(c);
out_close_wb:
	cache_wb_close(c);
	cache_index_close(c);
out_free_uring:
	cache_uring_free(c->uring);
out_free:
	cache_free(c);
	return rc;
}

void cache_close(struct cache *c)
{
	size_t open = 0;

	if (!c)
		return;
	cache_wb_close(c);
	cache_warm_stop(c);
	cache_fetch_stop(c);
	cache_index_stop(c);
	cache_index_flush(c, true);
	cache_index_close(c);
	cache_uring_free(c->uring);
	for (size_t i = 0; i < c->table_size; i++)
		for (struct cache_file *f = c->table[i]; f; f = f->hnext)
			open += f->refs > 0;
	if (open)
		cache_log("%zu files still open at close", open);
	cache_free(c);
}
