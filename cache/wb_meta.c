/* SPDX-License-Identifier: MIT */
/*
 * wb_meta.c - what makes a dirty file check itself: the CRC32C of each
 * of its blocks as of its last commit (close, fsync), and the file
 * DIR/dirty/ID.meta that keeps them on the cache disk with the file's
 * key, size, attributes, metadata and commit count (seq).
 *
 * The sums are kept up to date lazily: a write marks its blocks stale
 * (cache_wb_sums_mark), and a commit reads the stale blocks back from
 * the page cache and sums them before it queues the file
 * (cache_wb_sums_update); a writer behind our back (the kernel, through
 * FUSE passthrough) makes every block stale.  An upload sums the file
 * again as it reads it and refuses to send one that differs
 * (cache_wb_sums_match), and so does the first open of a file replayed
 * from before the mount.
 *
 * DIR/dirty/ID.meta is the second copy of the queue: writeback.sqlite
 * lost or rolled back, the replay (wb_replay.c) re-queues each committed file
 * from it.  Its layout (little-endian) is in docs/cache-format.md:
 *
 *   "FMFSWBM1"  u64 id  u64 seq  u64 size  u32 kind  u32 mode  u32 uid
 *   u32 gid  i64 mtime_ns  u32 flags  u32 block_bytes  u32 key_len
 *   u32 etag_len  u32 meta_len  u64 nblocks
 *   key  etag  meta  nblocks x u32 sum  u32 crc32c(everything before)
 *
 * flags: 1 the key is in the bucket, 2 the sums are complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wb_int.h"

#define META_MAGIC "FMFSWBM1"
#define META_HEAD (8 + 8 * 3 + 4 * 4 + 8 + 4 * 5 + 8)
#define META_IN_BUCKET 1u
#define META_COMPLETE 2u

static uint64_t nblocks(const struct cache *c, uint64_t size)
{
	return (size + c->cfg.block_bytes - 1) / c->cfg.block_bytes;
}

/* ---- the sums in memory ---- */

static int sums_reserve(struct cache_wfile *w, uint64_t n)
{
	uint64_t cap = w->sums_cap;
	uint32_t *s;
	uint8_t *st;

	if (n <= cap)
		return 0;
	while (cap < n)
		cap = cap ? cap * 2 : 16;
	s = realloc(w->sums, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	w->sums = s;
	st = realloc(w->stale, cap);
	if (!st)
		return -ENOMEM;
	w->stale = st;
	w->sums_cap = cap;
	return 0;
}

/* Blocks [from, n) exist from now on, all stale. */
static int sums_extend(struct cache_wfile *w, uint64_t n)
{
	int rc;

	if (n <= w->nsums)
		return 0;
	rc = sums_reserve(w, n);
	if (rc)
		return rc;
	if (w->nsums) /* the old last block grows to a whole one */
		w->stale[w->nsums - 1] = 1;
	memset(w->sums + w->nsums, 0, (n - w->nsums) * sizeof(*w->sums));
	memset(w->stale + w->nsums, 1, n - w->nsums);
	w->nsums = n;
	return 0;
}

int cache_wb_sums_mark(struct cache_wfile *w, uint64_t off, uint64_t len)
{
	uint64_t bb = w->c->cfg.block_bytes;
	int rc;

	if (!len)
		return 0;
	rc = sums_extend(w, nblocks(w->c, off + len));
	if (rc)
		return rc;
	for (uint64_t b = off / bb; b <= (off + len - 1) / bb; b++)
		w->stale[b] = 1;
	return 0;
}

int cache_wb_sums_resize(struct cache_wfile *w, uint64_t size)
{
	uint64_t n = nblocks(w->c, size);
	int rc;

	if (n < w->nsums)
		w->nsums = n;
	rc = sums_extend(w, n);
	if (!rc && n) /* the last block changed length */
		w->stale[n - 1] = 1;
	return rc;
}

uint32_t *cache_wb_file_crcs(struct cache *c, int fd, uint64_t size)
{
	uint64_t bb = c->cfg.block_bytes, nb = nblocks(c, size);
	uint32_t *crcs = nb ? calloc(nb, sizeof(*crcs)) : NULL;
	char *buf = crcs ? malloc(bb) : NULL;
	int rc = buf ? 0 : -ENOMEM;

	for (uint64_t b = 0; !rc && b < nb; b++) {
		uint64_t len = b + 1 < nb ? bb : size - b * bb;

		ssize_t k = util_pread_all(fd, buf, len, (off_t)(b * bb));

		if (k < 0 || (uint64_t)k != len)
			rc = k < 0 ? (int)k : -EIO;
		else
			crcs[b] = util_crc32c(0, buf, len);
	}
	free(buf);
	if (rc) {
		free(crcs);
		return NULL;
	}
	return crcs;
}

bool cache_wb_sums_fresh(const struct cache_wfile *w)
{
	if (w->external || w->ext_seen) /* the kernel wrote behind us */
		return false;
	for (uint64_t b = 0; b < w->nsums; b++)
		if (w->stale[b])
			return false;
	return true;
}

bool cache_wb_sums_update(struct cache_wb *wb, struct cache_wfile *w)
{
	uint64_t bb = wb->c->cfg.block_bytes;
	char *buf = malloc(bb);
	bool ok = false;

	pthread_mutex_lock(&wb->lock);
	/* A few rounds: writes landing meanwhile make their blocks stale
	 * again, and a file written all the time is uploaded unchecked. */
	for (int round = 0; buf && round < 3 && !ok; round++) {
		uint64_t n, size = w->a.size, g = w->gen;
		uint8_t *todo;
		uint32_t *got;
		bool io_ok = true;

		cache_wb_sync_external(w, false);
		size = w->a.size;
		if (cache_wb_sums_resize(w, size))
			break;
		if (w->nsums && (w->external || w->ext_seen))
			memset(w->stale, 1, w->nsums);
		n = w->nsums;
		todo = malloc(n ? n : 1);
		got = malloc((n ? n : 1) * sizeof(*got));
		if (!todo || !got) {
			free(todo);
			free(got);
			break;
		}
		if (n) { /* stale is NULL while the file is empty */
			memcpy(todo, w->stale, n);
			memset(w->stale, 0, n);
		}
		w->ext_seen = w->external > 0;
		pthread_mutex_unlock(&wb->lock);
		for (uint64_t b = 0; b < n && io_ok; b++) {
			uint64_t len = b + 1 < n ? bb : size - b * bb;
			ssize_t k;

			if (!todo[b])
				continue;
			k = util_pread_all(w->fd, buf, len, (off_t)(b * bb));
			/* short: being cut meanwhile; try again */
			if (k < 0 || (uint64_t)k != len)
				io_ok = false;
			else
				got[b] = util_crc32c(0, buf, (size_t)k);
		}
		pthread_mutex_lock(&wb->lock);
		for (uint64_t b = 0; b < n && b < w->nsums; b++)
			if (todo[b]) {
				if (!io_ok)
					w->stale[b] = 1;
				else if (!w->stale[b])
					w->sums[b] = got[b];
			}
		free(todo);
		free(got);
		if (!io_ok)
			break;
		ok = w->gen == g && cache_wb_sums_fresh(w);
	}
	pthread_mutex_unlock(&wb->lock);
	free(buf);
	return ok;
}

void cache_wb_damaged(struct cache_wb *wb, struct cache_wfile *w,
		      const char *fmt, ...)
{
	char why[240];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(w->damaged, sizeof(w->damaged), "dirty file %.200s/dirty/"
		 "%016" PRIx64 " %.200s: not uploaded; its bytes stay there "
		 "(write the file again through the mount, or remove it)",
		 wb->c->cfg.dir, w->id, why);
	cache_wb_log_err(wb, "%s: %s", w->key, w->damaged);
}

bool cache_wb_sums_match(struct cache_wb *wb, struct cache_wfile *w,
			 const uint32_t *crcs, uint64_t size)
{
	uint64_t n = nblocks(wb->c, size);

	util_debug_assert_locked(&wb->lock);
	if (n != w->nsums) {
		cache_wb_damaged(wb, w, "is %" PRIu64 " bytes, not what its "
				 "checksums in %016" PRIx64 ".meta cover",
				 size, w->id);
		return false;
	}
	for (uint64_t b = 0; b < n; b++)
		if (!crcs || crcs[b] != w->sums[b]) {
			cache_wb_damaged(wb, w, "does not match its checksums "
					 "in %016" PRIx64 ".meta (block %"
					 PRIu64 " of %" PRIu64 ", %" PRIu64
					 " bytes each)", w->id, b, n,
					 (uint64_t)wb->c->cfg.block_bytes);
			return false;
		}
	return true;
}

/* ---- DIR/dirty/ID.meta ---- */

char *cache_wb_meta_pack(const struct obj_kv *m, size_t n, size_t *len)
{
	size_t total = 0, o = 0;
	char *b;

	for (size_t i = 0; i < n; i++)
		total += strlen(m[i].name) + strlen(m[i].value) + 2;
	b = malloc(total + 1);
	if (!b)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t a = strlen(m[i].name) + 1, v = strlen(m[i].value) + 1;

		memcpy(b + o, m[i].name, a);
		memcpy(b + o + a, m[i].value, v);
		o += a + v;
	}
	*len = o;
	return b;
}

int cache_wb_meta_unpack(const char *b, size_t len, struct obj_kv **out,
			 size_t *n)
{
	size_t cnt = 0, o = 0;
	struct obj_kv *m;

	if (len && b[len - 1] != '\0')
		return -EBADMSG;
	for (size_t i = 0; i < len; i++)
		cnt += b[i] == '\0';
	if (cnt % 2)
		return -EBADMSG;
	cnt /= 2;
	m = calloc(cnt + 1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < cnt; i++) {
		m[i].name = strdup(b + o);
		o += strlen(b + o) + 1;
		m[i].value = strdup(b + o);
		o += strlen(b + o) + 1;
		if (!m[i].name || !m[i].value) {
			obj_kv_free(m, i + 1);
			return -ENOMEM;
		}
	}
	*out = m;
	*n = cnt;
	return 0;
}

/* The attributes that neither a row's columns nor the .meta's fields
 * hold ride in the packed metadata, under names no object metadata can
 * have (':' is not a token character). */
static const char *const extra_names[] = { ":ctime", ":atime", ":rdev" };

char *cache_wb_pack(const struct cache_wfile *w, size_t *len)
{
	struct obj_kv *kv = malloc((w->nmeta + 3) * sizeof(*kv));
	char vals[3][32];
	char *b;

	if (!kv)
		return NULL;
	if (w->nmeta)
		memcpy(kv, w->meta, w->nmeta * sizeof(*kv));
	util_time_format(w->a.ctime_ns, vals[0], sizeof(vals[0]));
	util_time_format(w->a.atime_ns, vals[1], sizeof(vals[1]));
	snprintf(vals[2], sizeof(vals[2]), "%u", w->a.rdev);
	for (size_t i = 0; i < 3; i++)
		kv[w->nmeta + i] = (struct obj_kv){ (char *)extra_names[i],
						    vals[i] };
	b = cache_wb_meta_pack(kv, w->nmeta + 3, len);
	free(kv);
	return b;
}

int cache_wb_unpack(struct cache_wfile *w, const char *b, size_t len)
{
	size_t j = 0;
	int rc = cache_wb_meta_unpack(b, len, &w->meta, &w->nmeta);

	if (rc)
		return rc;
	for (size_t i = 0; i < w->nmeta; i++) {
		struct obj_kv *kv = &w->meta[i];
		int64_t t;
		bool extra = kv->name[0] == ':';

		if (!strcmp(kv->name, extra_names[0]) &&
		    !util_time_parse(kv->value, &t))
			w->a.ctime_ns = t;
		else if (!strcmp(kv->name, extra_names[1]) &&
			 !util_time_parse(kv->value, &t))
			w->a.atime_ns = t;
		else if (!strcmp(kv->name, extra_names[2]))
			w->a.rdev = (uint32_t)strtoul(kv->value, NULL, 10);
		if (extra) {
			free(kv->name);
			free(kv->value);
		} else {
			w->meta[j++] = *kv;
		}
	}
	w->nmeta = j;
	return 0;
}

static void meta_path(uint64_t id, const char *suffix, char *buf,
		      size_t len)
{
	snprintf(buf, len, "dirty/%016" PRIx64 CACHE_WB_META_SUFFIX "%s", id,
		 suffix);
}

int cache_wb_meta_write(struct cache_wb *wb, struct cache_wfile *w,
			bool durable)
{
	size_t ml = 0;
	char *mb = cache_wb_pack(w, &ml);
	int rc;

	if (!mb)
		return -ENOMEM;
	rc = cache_wb_meta_write_packed(wb, w, durable, mb, ml);
	free(mb);
	return rc;
}

int cache_wb_meta_write_packed(struct cache_wb *wb, struct cache_wfile *w,
			       bool durable, const char *mb, size_t ml)
{
	struct cache *c = wb->c;
	size_t kl = strlen(w->key), el = strlen(w->base_etag), len, o;
	unsigned char *b;
	char tmp[80], path[80];
	uint64_t nb = w->nsums;
	int fd, rc = 0;

	util_debug_assert_locked(&wb->lock);
	len = META_HEAD + kl + el + ml + nb * 4 + 4;
	b = malloc(len);
	if (!b)
		return -ENOMEM;
	memcpy(b, META_MAGIC, 8);
	o = 8;
	util_put64le(b + o, w->id), o += 8;
	util_put64le(b + o, w->seq), o += 8;
	util_put64le(b + o, w->a.size), o += 8;
	util_put32le(b + o, (uint32_t)w->a.kind), o += 4;
	util_put32le(b + o, w->a.mode), o += 4;
	util_put32le(b + o, w->a.uid), o += 4;
	util_put32le(b + o, w->a.gid), o += 4;
	util_put64le(b + o, (uint64_t)w->a.mtime_ns), o += 8;
	util_put32le(b + o, (w->in_bucket ? META_IN_BUCKET : 0) |
		     (w->sums_ok ? META_COMPLETE : 0)), o += 4;
	util_put32le(b + o, c->cfg.block_bytes), o += 4;
	util_put32le(b + o, (uint32_t)kl), o += 4;
	util_put32le(b + o, (uint32_t)el), o += 4;
	util_put32le(b + o, (uint32_t)ml), o += 4;
	util_put64le(b + o, nb), o += 8;
	memcpy(b + o, w->key, kl), o += kl;
	memcpy(b + o, w->base_etag, el), o += el;
	memcpy(b + o, mb, ml), o += ml;
	for (uint64_t i = 0; i < nb; i++)
		util_put32le(b + o, w->sums[i]), o += 4;
	util_put32le(b + o, util_crc32c(0, b, o)), o += 4;

	meta_path(w->id, ".tmp", tmp, sizeof(tmp));
	meta_path(w->id, "", path, sizeof(path));
	fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
		    0600);
	if (fd < 0)
		rc = -errno;
	if (!rc)
		rc = util_write_all(fd, b, o);
	if (!rc && durable && fdatasync(fd))
		rc = -errno;
	if (fd >= 0 && close(fd) && !rc)
		rc = -errno;
	if (!rc && renameat(c->dirfd, tmp, c->dirfd, path))
		rc = -errno;
	if (!rc && durable && wb->dirty_fd >= 0 && fsync(wb->dirty_fd))
		rc = -errno;
	free(b);
	w->meta_durable = !rc && durable;
	if (rc) {
		unlinkat(c->dirfd, tmp, 0);
		cache_wb_log_err(wb, "cannot write %s/%s (the checksums of %s): "
				 "%s", c->cfg.dir, path, w->key,
				 strerror(-rc));
	}
	return rc;
}

void cache_wb_meta_remove(struct cache_wb *wb, uint64_t id)
{
	char path[80];

	meta_path(id, "", path, sizeof(path));
	unlinkat(wb->c->dirfd, path, 0);
}

/* Bounds-checked reader over the file's bytes. */
struct rd {
	const unsigned char *b;
	size_t len, o;
	bool bad;
};

static const void *take(struct rd *r, size_t n)
{
	const unsigned char *p = r->b + r->o;

	if (r->bad || n > r->len - r->o) {
		r->bad = true;
		return NULL;
	}
	r->o += n;
	return p;
}

static uint64_t take64(struct rd *r)
{
	const unsigned char *p = take(r, 8);

	return p ? util_get64le(p) : 0;
}

static uint32_t take32(struct rd *r)
{
	const unsigned char *p = take(r, 4);

	return p ? util_get32le(p) : 0;
}

int cache_wb_meta_read(struct cache_wb *wb, uint64_t id,
		       struct cache_wfile *w, char *msg, size_t ml)
{
	struct cache *c = wb->c;
	char path[80];
	unsigned char *b = NULL;
	struct rd r = { 0 };
	uint32_t flags, bb, kl, el, mlen;
	uint64_t nb;
	const char *key, *etag, *meta;
	struct stat sb;
	int fd, rc = -EBADMSG;

	meta_path(id, "", path, sizeof(path));
	fd = openat(c->dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(msg, ml, "%s: %s", path, strerror(errno));
		return rc == -ENOENT ? -ENOENT : -EBADMSG;
	}
	if (fstat(fd, &sb) || sb.st_size < META_HEAD + 4 ||
	    sb.st_size > (1ll << 30) || !(b = malloc((size_t)sb.st_size)) ||
	    util_pread_all(fd, b, (size_t)sb.st_size, 0) != sb.st_size) {
		snprintf(msg, ml, "%s is cut short or unreadable", path);
		goto out;
	}
	r.b = b;
	r.len = (size_t)sb.st_size;
	if (memcmp(b, META_MAGIC, 8) ||
	    util_crc32c(0, b, r.len - 4) != util_get32le(b + r.len - 4)) {
		snprintf(msg, ml, "%s is damaged (bad magic or checksum)",
			 path);
		goto out;
	}
	r.len -= 4;
	take(&r, 8);
	if (take64(&r) != id) {
		snprintf(msg, ml, "%s belongs to another file", path);
		goto out;
	}
	w->id = id;
	w->seq = take64(&r);
	w->a.size = take64(&r);
	w->a.kind = (enum cache_wkind)take32(&r);
	w->a.mode = take32(&r) & 07777;
	w->a.uid = take32(&r);
	w->a.gid = take32(&r);
	w->a.mtime_ns = (int64_t)take64(&r);
	flags = take32(&r);
	bb = take32(&r);
	kl = take32(&r);
	el = take32(&r);
	mlen = take32(&r);
	nb = take64(&r);
	key = take(&r, kl);
	etag = take(&r, el);
	meta = take(&r, mlen);
	if (r.bad || !kl || kl > OBJ_KEY_MAX || el >= CACHE_ETAG_MAX ||
	    memchr(key, '\0', kl) || w->a.kind > CACHE_WK_LAST ||
	    nb > (r.len - r.o) / 4 || nb != (r.len - r.o) / 4 ||
	    bb != c->cfg.block_bytes || nb != nblocks(c, w->a.size)) {
		snprintf(msg, ml, "%s is damaged (fields out of range)",
			 path);
		goto out;
	}
	rc = -ENOMEM;
	w->key = strndup(key, kl);
	if (!w->key || sums_extend(w, nb))
		goto out;
	snprintf(w->base_etag, sizeof(w->base_etag), "%.*s", (int)el, etag);
	if (mlen && cache_wb_unpack(w, meta, mlen)) {
		rc = -EBADMSG;
		snprintf(msg, ml, "%s is damaged (metadata)", path);
		goto out;
	}
	for (uint64_t i = 0; i < nb; i++)
		w->sums[i] = take32(&r);
	if (nb)
		memset(w->stale, 0, nb);
	w->in_bucket = flags & META_IN_BUCKET;
	w->sums_ok = flags & META_COMPLETE;
	rc = 0;
out:
	free(b);
	close(fd);
	return rc;
}
