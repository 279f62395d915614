/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - the control socket of a mount: a Unix stream socket (path in
 * fs_config.ctl_path, published as the root's FS_CTL_XATTR) answering
 * `fmfs status`, `fmfs flush`, `fmfs prefetch`, `fmfs evict` and the
 * drain before `fmfs umount`, with the protocol in fs.h.  One request per connection; each connection is served by a
 * detached thread, at most CTL_CONN_MAX at once.  Prefetch warms files
 * with CTL_WARM_THREADS workers, so thousands of small files go in
 * parallel, bounded by the cache's own in-flight limits.
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs_int.h"

#define CTL_CONN_MAX 8
#define CTL_WARM_THREADS 16
#define CTL_LINE_MAX 4200

static atomic_int ctl_conns;

struct warm_job {
	struct fs *fs;
	bool evict;
	pthread_mutex_t lock;        /* protects the fields below */
	char **keys;
	uint64_t *sizes;
	char (*etags)[80];
	size_t n, next;
	uint64_t files, bytes, errors;
	char first_error[256];
};

static void job_add(struct warm_job *j, const char *key, uint64_t size,
		    const char *etag, size_t *cap)
{
	if (j->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		char **k = realloc(j->keys, nc * sizeof(*k));
		uint64_t *s = k ? realloc(j->sizes, nc * sizeof(*s)) : NULL;
		char (*e)[80] = s ? realloc(j->etags, nc * sizeof(*e)) : NULL;

		if (k)
			j->keys = k;
		if (s)
			j->sizes = s;
		if (!e) {
			j->errors++;
			return;
		}
		j->etags = e;
		*cap = nc;
	}
	j->keys[j->n] = strdup(key);
	if (!j->keys[j->n]) {
		j->errors++;
		return;
	}
	j->sizes[j->n] = size;
	snprintf(j->etags[j->n], 80, "%s", etag);
	j->n++;
}

struct collect {
	struct warm_job *j;
	size_t cap;
};

static void collect_fn(void *arg, const struct obj_entry *e)
{
	struct collect *c = arg;
	size_t kl = strlen(e->key);

	if (kl && e->key[kl - 1] == '/')
		return; /* directory marker */
	job_add(c->j, e->key, e->size_bytes, e->etag, &c->cap);
}

/* Lists every object under prefix (no delimiter) into the job. */
static int job_collect(struct warm_job *j, const char *prefix)
{
	struct collect c = { .j = j };

	return ns_walk(j->fs->ns, prefix, collect_fn, &c, j->first_error,
		       sizeof(j->first_error));
}

static void *job_worker(void *arg)
{
	struct warm_job *j = arg;

	for (;;) {
		size_t i;
		int rc;

		pthread_mutex_lock(&j->lock);
		i = j->next++;
		pthread_mutex_unlock(&j->lock);
		if (i >= j->n)
			return NULL;
		/* evict counts the bytes it drops, not the files' sizes */
		uint64_t had = j->evict ?
			       cache_cached_bytes(j->fs->cfg.cache, j->keys[i]) :
			       j->sizes[i];

		rc = j->evict ? cache_evict_key(j->fs->cfg.cache, j->keys[i]) :
		     cache_warm(j->fs->cfg.cache, j->keys[i], j->sizes[i],
				j->etags[i], true);
		pthread_mutex_lock(&j->lock);
		if (rc) {
			j->errors++;
			if (!j->first_error[0])
				snprintf(j->first_error, sizeof(j->first_error),
					 "%s: %s", j->keys[i], strerror(-rc));
		} else {
			j->files++;
			j->bytes += had;
		}
		pthread_mutex_unlock(&j->lock);
	}
}

static void job_run(struct warm_job *j)
{
	pthread_t t[CTL_WARM_THREADS];
	size_t n = j->n < CTL_WARM_THREADS ? j->n : CTL_WARM_THREADS, started;

	for (started = 0; started < n; started++)
		if (pthread_create(&t[started], NULL, job_worker, j))
			break;
	if (!started)
		job_worker(j);
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
}

static void job_free(struct warm_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		free(j->keys[i]);
	free(j->keys);
	free(j->sizes);
	free(j->etags);
	pthread_mutex_destroy(&j->lock);
}

/* Is the file at path (relative to the root: its key) dirty? */
static bool fs_is_dirty(struct fs *fs, const char *path)
{
	struct cache_wfile *w;

	if (cache_w_get(fs->cfg.cache, path, &w))
		return false;
	cache_w_put(w);
	return true;
}

/* prefetch / evict of a path relative to the mount root. */
static void do_warm(struct fs *fs, FILE *out, const char *path, bool evict,
		    bool wait)
{
	struct warm_job j;
	struct ns_entry e;
	char key[OBJ_KEY_MAX + 2];
	int rc;

	memset(&j, 0, sizeof(j));
	j.fs = fs;
	j.evict = evict;
	pthread_mutex_init(&j.lock, NULL);
	while (*path == '/')
		path++;
	if (evict && *path && fs_is_dirty(fs, path)) {
		/* Not in the bucket yet (or changed since): its only copy. */
		fprintf(out, "error it is dirty (not uploaded yet), and dirty "
			"files are never evicted; fmfs flush uploads it, then "
			"it can be\n");
		job_free(&j);
		return;
	}
	rc = ns_resolve(fs->ns, path, &e, key, sizeof(key));
	if (rc) {
		fprintf(out, "error %s: %s\n", *path ? path : "/",
			strerror(-rc));
		job_free(&j);
		return;
	}
	if (e.is_dir) {
		rc = job_collect(&j, key);
	} else {
		size_t cap = 0;

		job_add(&j, key, e.size_bytes, e.etag, &cap);
	}
	if (rc) {
		fprintf(out, "error listing %s: %s\n", *path ? path : "/",
			j.first_error[0] ? j.first_error : strerror(-rc));
		job_free(&j);
		return;
	}
	if (!wait && !evict) {
		/* Start in the background: answer at once.  Files are small
		 * jobs; the cache bounds the bytes in flight. */
		for (size_t i = 0; i < j.n; i++) {
			cache_warm(fs->cfg.cache, j.keys[i], j.sizes[i],
				   j.etags[i], false);
			atomic_fetch_add(&fs->prefetch_bytes, j.sizes[i]);
		}
		fprintf(out, "ok %zu files queued\n", j.n);
		job_free(&j);
		return;
	}
	job_run(&j);
	if (!evict)
		atomic_fetch_add(&fs->prefetch_bytes, j.bytes);
	if (j.errors)
		fprintf(out, "error %llu of %zu files failed, first: %s\n",
			(unsigned long long)j.errors, j.n, j.first_error);
	else
		fprintf(out, "ok %llu files %llu bytes 0 errors\n",
			(unsigned long long)j.files,
			(unsigned long long)j.bytes);
	job_free(&j);
}

/* "T PATH": uploads what is dirty under PATH now; with wait, answers
 * once it is in the bucket, or says what failed. */
static void do_flush(struct fs *fs, FILE *out, const char *arg, bool wait)
{
	char prefix[OBJ_KEY_MAX + 2], *report, *end;
	unsigned long t = strtoul(arg, &end, 10);
	struct cache_wfile *w;
	struct ns_entry e;
	int rc;

	if (end == arg || *end != ' ') {
		fprintf(out, "error bad flush request\n");
		return;
	}
	arg = end + 1;
	while (*arg == '/')
		arg++;
	snprintf(prefix, sizeof(prefix), "%s", arg);
	if (*arg && cache_w_get(fs->cfg.cache, arg, &w) == 0)
		cache_w_put(w); /* a dirty file */
	else if (*arg && (ns_resolve(fs->ns, arg, &e, prefix, sizeof(prefix)) ||
			  e.is_dir))
		snprintf(prefix, sizeof(prefix), "%s/", arg);
	else
		snprintf(prefix, sizeof(prefix), "%s", arg);
	report = malloc(60000);
	if (!report) {
		fprintf(out, "error out of memory\n");
		return;
	}
	rc = cache_w_flush(fs->cfg.cache, prefix, wait, (unsigned)t * 1000,
			   report, 60000);
	if (!rc) {
		fprintf(out, "ok\n");
	} else {
		size_t n = 0;

		for (const char *p = report; *p; p++)
			n += *p == '\n';
		fprintf(out, "error %zu not uploaded%s:\n%s", n,
			rc == -ETIMEDOUT ? " (timed out)" : "", report);
	}
	free(report);
}

/* One "name: value" line, or one JSON member. */
static void kv(FILE *out, bool json, bool *first, const char *name,
	       const char *val, bool quote)
{
	if (json)
		fprintf(out, "%s\"%s\": %s%s%s", *first ? "{" : ", ", name,
			quote ? "\"" : "", val, quote ? "\"" : "");
	else
		fprintf(out, "%s: %s\n", name, val);
	*first = false;
}

static void kv_u64(FILE *out, bool json, bool *first, const char *name,
		   uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	kv(out, json, first, name, buf, false);
}

/* The read cache and the cache group. */
static void status_cache(struct fs *fs, FILE *out, bool json, bool *first,
			 const struct cache_stats *c)
{
	kv_u64(out, json, first, "cache_cap_bytes", c->cap_bytes);
	kv_u64(out, json, first, "cache_used_bytes", c->used_bytes);
	kv_u64(out, json, first, "cache_objects", c->objects);
	kv_u64(out, json, first, "cache_blocks", c->blocks);
	kv_u64(out, json, first, "hits", c->hits);
	kv_u64(out, json, first, "misses", c->misses);
	kv_u64(out, json, first, "bytes_fetched", c->bytes_fetched);
	kv_u64(out, json, first, "readahead_inflight_bytes", c->inflight_bytes);
	kv_u64(out, json, first, "evictions", c->evictions);
	kv_u64(out, json, first, "crc_failures", c->crc_failures);
	kv_u64(out, json, first, "fetch_errors", c->fetch_errors);
	{
		char peers[2048];
		unsigned n = cache_group_describe(fs->cfg.cache, peers,
						  sizeof(peers));

		kv_u64(out, json, first, "group_members", n);
		kv(out, json, first, "peers", peers, true);
		kv(out, json, first, "peer_transport",
		   cache_group_transport(fs->cfg.cache), true);
	}
	kv_u64(out, json, first, "peer_rma_reads", c->peer_rma_reads);
	kv_u64(out, json, first, "peer_hits", c->peer_hits);
	kv_u64(out, json, first, "peer_bytes_in", c->peer_bytes_in);
	kv_u64(out, json, first, "peer_fallbacks", c->peer_fallbacks);
	kv_u64(out, json, first, "peer_served", c->peer_served);
	kv_u64(out, json, first, "peer_bytes_out", c->peer_bytes_out);
	kv_u64(out, json, first, "peer_refused", c->peer_refused);
	kv_u64(out, json, first, "peer_dropped", c->peer_dropped);
	kv_u64(out, json, first, "peer_guard_bytes", c->peer_guard_bytes);
	kv_u64(out, json, first, "peer_busy", c->peer_busy);
	kv_u64(out, json, first, "peer_timeouts", c->peer_timeouts);
	kv_u64(out, json, first, "peer_skipped_down", c->peer_skipped_down);
	kv_u64(out, json, first, "peer_members_down", c->peer_members_down);
}

/* The FUSE side: open files, passthrough, the transport. */
static void status_fuse(struct fs *fs, FILE *out, bool json, bool *first,
			const struct ns_stats *ns)
{
	kv_u64(out, json, first, "open_files", atomic_load(&fs->open_files));
	kv(out, json, first, "passthrough_offered",
	   atomic_load(&fs->pt_offered) ? "true" : "false", false);
	kv(out, json, first, "passthrough",
	   atomic_load(&fs->pt_on) ? "true" : "false", false);
	kv_u64(out, json, first, "passthrough_opens",
	       atomic_load(&fs->pt_opens));
	kv_u64(out, json, first, "passthrough_adopts",
	       atomic_load(&fs->pt_adopts));
	{
		struct fs_uring_stats us;
		const char *t = "dev-fuse";

		fs_uring_get_stats(fs, &us);
		if (atomic_load(&fs->ur_on) && !us.failed)
			t = "io_uring";
		kv(out, json, first, "transport", t, true);
		kv(out, json, first, "uring_offered",
		   atomic_load(&fs->ur_offered) || atomic_load(&fs->ur_kept) ?
		   "true" : "false", false);
		kv_u64(out, json, first, "uring_queues", us.queues);
		kv_u64(out, json, first, "uring_rings", us.rings);
		kv_u64(out, json, first, "uring_requests", us.requests);
		if (atomic_load(&fs->ur_kept))
			kv(out, json, first, "uring_not_used", "the kernel "
			   "offers it, but a kept mount takes its requests "
			   "from /dev/fuse (--no-keeper for the ring)", true);
		if (us.failed || fs->ur_why[0])
			kv(out, json, first, "uring_error",
			   us.failed ? us.why : fs->ur_why, true);
	}
	kv(out, json, first, "killpriv_v2",
	   atomic_load(&fs->pt_killpriv2) ? "true" : "false", false);
	kv_u64(out, json, first, "getxattr_requests",
	       atomic_load(&fs->getxattrs));
	kv_u64(out, json, first, "head_requests", ns->heads);
	kv_u64(out, json, first, "head_requests_behind_listings",
	       ns->heads_behind);
	kv_u64(out, json, first, "heads_waiting", ns->heads_waiting);
}

/* The write-back. */
static void status_wb(struct fs *fs, FILE *out, bool json, bool *first)
{
	struct cache_wb_stats w;

	cache_wb_get_stats(fs->cfg.cache, &w);
	kv_u64(out, json, first, "dirty_bytes", w.dirty_bytes);
	kv_u64(out, json, first, "dirty_files", w.dirty_files);
	kv_u64(out, json, first, "upload_queue", w.queued);
	kv_u64(out, json, first, "uploads_inflight", w.uploads_inflight);
	kv_u64(out, json, first, "upload_failures", w.upload_failures);
	kv_u64(out, json, first, "uploaded_files", w.uploaded_files);
	kv_u64(out, json, first, "uploaded_bytes", w.uploaded_bytes);
	kv_u64(out, json, first, "deleted_keys", w.deleted_keys);
	kv_u64(out, json, first, "conflicts", w.conflicts);
	kv_u64(out, json, first, "lost_found", w.lost_found);
	kv_u64(out, json, first, "damaged_files", w.damaged_files);
	kv_u64(out, json, first, "lost_files", w.lost_files);
	if (json || w.last_error[0]) {
		char esc[600];
		size_t at = 0;

		for (const char *p = w.last_error; *p && at + 3 < sizeof(esc);
		     p++) {
			if (*p == '"' || *p == '\\')
				esc[at++] = '\\';
			esc[at++] = (*p < 0x20) ? ' ' : *p;
		}
		esc[at] = '\0';
		kv(out, json, first, "last_upload_error", esc, true);
	}
}

/* Names: lookups, listings in memory and in the index, inodes. */
static void status_names(struct fs *fs, FILE *out, bool json, bool *first,
			 const struct ns_stats *ns)
{
	kv_u64(out, json, first, "lookups", atomic_load(&fs->lookups));
	kv_u64(out, json, first, "listings", ns->listings);
	{
		uint64_t dirs, entries, mem;

		cache_listing_stats(fs->cfg.cache, &dirs, &entries);
		kv_u64(out, json, first, "namespace_dirs", dirs);
		kv_u64(out, json, first, "namespace_entries", entries);
		kv_u64(out, json, first, "index_bytes",
		       cache_index_bytes(fs->cfg.cache));
		kv_u64(out, json, first, "index_flushes",
		       cache_index_flushes(fs->cfg.cache));
		kv_u64(out, json, first, "listings_loaded", ns->index_loads);
		pthread_mutex_lock(&fs->lock);
		mem = fs->ninodes;
		pthread_mutex_unlock(&fs->lock);
		kv_u64(out, json, first, "memory_dirs", ns->dirs);
		kv_u64(out, json, first, "memory_entries", ns->dir_entries);
		kv_u64(out, json, first, "inodes", mem);
		kv_u64(out, json, first, "inodes_trimmed",
		       atomic_load(&fs->trimmed));
	}
	{
		/* malloc's own count, all arenas: what the daemon's
		 * structures take (in use) and what it keeps free;
		 * docs/performance.md "Memory per inode". */
		struct mallinfo2 mi = mallinfo2();

		kv_u64(out, json, first, "heap_in_use_bytes", mi.uordblks);
		kv_u64(out, json, first, "heap_free_bytes", mi.fordblks);
	}
	kv_u64(out, json, first, "skipped_names", ns->skipped_names);
}

/* The object store's requests and errors. */
static void status_store(struct fs *fs, FILE *out, bool json, bool *first)
{
	struct obj_stats o;

	obj_get_stats(fs->cfg.st, &o);
	kv_u64(out, json, first, "store_requests", o.requests);
	kv_u64(out, json, first, "store_get_requests", o.get_requests);
	kv_u64(out, json, first, "store_retries", o.retries);
	kv_u64(out, json, first, "store_errors", o.errors);
	for (int i = 1; i <= OBJ_ERR_OTHER; i++) {
		char name[64];

		snprintf(name, sizeof(name), "store_errors_%s",
			 obj_status_name((obj_status)i));
		for (char *p = name; *p; p++)
			if (*p == '-')
				*p = '_';
		/* Text shows the kinds that happened; JSON has them all. */
		if (json || o.errors_by_status[i])
			kv_u64(out, json, first, name, o.errors_by_status[i]);
	}
}

/* `fmfs restart`: this daemon stops and exits without unmounting; its
 * keeper starts the mount's binary again to take over (docs/keeper.md).
 * SIGTERM ends the FUSE loop as it does for a signal from outside. */
static void do_restart(struct fs *fs, FILE *out)
{
	if (!fs->tk) {
		fprintf(out, "error the mount has no keeper: only a mount made "
			"with --keeper can be restarted (docs/keeper.md)\n");
		return;
	}
	if (fs_tk_keeper_lost(fs)) {
		fprintf(out, "error the mount's keeper is gone: it cannot be "
			"restarted (remount it to have a keeper again)\n");
		return;
	}
	if (fs_tk_ring_was_used(fs)) {
		fprintf(out, "error the mount takes its requests by FUSE over "
			"io_uring, which a new daemon cannot take over; mount "
			"it with --no-uring (docs/keeper.md)\n");
		return;
	}
	atomic_store(&fs->tk_restart, true);
	fprintf(out, "ok\n");
	fflush(out);
	fprintf(stderr, "fmfs: restart asked: stopping this daemon (pid %d) "
		"for a new one; the mount stays\n", (int)getpid());
	kill(getpid(), SIGTERM);
}

/* The daemon, its keeper and the takeovers (docs/keeper.md). */
static void status_keeper(struct fs *fs, FILE *out, bool json, bool *first)
{
	struct fs_tk_info k;
	char when[64] = "";

	fs_tk_status(fs, &k);
	kv_u64(out, json, first, "daemon_pid", (uint64_t)k.daemon_pid);
	kv_u64(out, json, first, "keeper_pid", (uint64_t)k.keeper_pid);
	if (k.keeper_lost) {
		char l[160];

		snprintf(l, sizeof(l), "the keeper (pid %d) is gone: a crash "
			 "of this daemon ends the mount; remount to have one "
			 "again", k.keeper_lost);
		kv(out, json, first, "keeper_lost", l, true);
	}
	kv_u64(out, json, first, "takeovers", k.takeovers);
	if (k.last_ms > 0) {
		time_t t = (time_t)(k.last_ms / 1000);
		struct tm tm;

		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		kv(out, json, first, "last_takeover", when, true);
		kv(out, json, first, "last_takeover_cause", k.cause, true);
		if (k.last_took_ms >= 0)
			kv_u64(out, json, first, "last_takeover_ms",
			       (uint64_t)k.last_took_ms);
		kv_u64(out, json, first, "last_takeover_resent", k.resent);
		kv_u64(out, json, first, "last_takeover_replies_kept",
		       k.given);
		kv_u64(out, json, first, "last_takeover_found_done",
		       k.done_before);
	}
	if (k.refused[0])
		kv(out, json, first, "takeover_refused", k.refused, true);
}

static void do_status(struct fs *fs, FILE *out, bool json)
{
	struct cache_stats c;
	struct ns_stats ns;
	bool first = true;

	cache_get_stats(fs->cfg.cache, &c);
	ns_get_stats(fs->ns, &ns);
	kv(out, json, &first, "mountpoint", fs->cfg.mountpoint, true);
	kv(out, json, &first, "store", fs->cfg.store_url, true);
	kv(out, json, &first, "mode", fs_mode_name(fs->cfg.mode), true);
	kv(out, json, &first, "connected",
	   c.connected && ns.connected ? "true" : "false",
	   false);
	kv_u64(out, json, &first, "uptime_s",
	       (util_now_ms() - fs->started_ms) / 1000);
	status_keeper(fs, out, json, &first);
	status_cache(fs, out, json, &first, &c);
	status_fuse(fs, out, json, &first, &ns);
	status_wb(fs, out, json, &first);
	status_names(fs, out, json, &first, &ns);
	status_store(fs, out, json, &first);
	if (json)
		fputs("}\n", out);
}

struct conn {
	struct fs *fs;
	int fd;
};

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	char line[CTL_LINE_MAX];
	FILE *f = fdopen(c->fd, "r+");

	if (!f) {
		close(c->fd);
		goto out;
	}
	if (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = '\0';
		fseek(f, 0, SEEK_CUR); /* switch the stream to writing */
		if (!strcmp(line, "status"))
			do_status(c->fs, f, false);
		else if (!strcmp(line, "status-json"))
			do_status(c->fs, f, true);
		else if (!strcmp(line, "metrics"))
			fs_metrics_write(c->fs, f);
		else if (!strncmp(line, "prefetch-wait ", 14))
			do_warm(c->fs, f, line + 14, false, true);
		else if (!strncmp(line, "prefetch ", 9))
			do_warm(c->fs, f, line + 9, false, false);
		else if (!strncmp(line, "drain ", 6) &&
			 (c->fs->cfg.mode == FS_MODE_LU ||
			  c->fs->cfg.mode == FS_MODE_RO))
			fprintf(f, "ok\n"); /* nothing is ever uploaded */
		else if (!strncmp(line, "drain ", 6))
			do_flush(c->fs, f, line + 6, true);
		else if (!strncmp(line, "flush-wait ", 11))
			do_flush(c->fs, f, line + 11, true);
		else if (!strncmp(line, "flush ", 6))
			do_flush(c->fs, f, line + 6, false);
		else if (!strncmp(line, "evict ", 6))
			do_warm(c->fs, f, line + 6, true, true);
		else if (!strcmp(line, "restart"))
			do_restart(c->fs, f);
		else
			fprintf(f, "error unknown request\n");
	}
	fclose(f);
out:
	atomic_fetch_sub(&ctl_conns, 1);
	free(c);
	return NULL;
}

static void *ctl_main(void *arg)
{
	struct fs *fs = arg;

	while (!atomic_load(&fs->stopping)) {
		int fd = accept4(fs->ctl_fd, NULL, NULL, SOCK_CLOEXEC);
		struct conn *c;
		pthread_attr_t at;
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break; /* closed by fs_ctl_stop */
		}
		c = malloc(sizeof(*c));
		if (!c || atomic_fetch_add(&ctl_conns, 1) >= CTL_CONN_MAX) {
			if (c)
				atomic_fetch_sub(&ctl_conns, 1);
			free(c);
			if (write(fd, "error busy\n", 11) < 0) {
				/* nothing to do */
			}
			close(fd);
			continue;
		}
		c->fs = fs;
		c->fd = fd;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, conn_main, c)) {
			atomic_fetch_sub(&ctl_conns, 1);
			close(fd);
			free(c);
		}
		pthread_attr_destroy(&at);
	}
	return NULL;
}

int fs_ctl_start(struct fs *fs, char *msg, size_t ml)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = fs->cfg.ctl_path;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(msg, ml, "control socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	unlink(path); /* a stale socket of a dead daemon */
	fs->ctl_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fs->ctl_fd < 0 ||
	    bind(fs->ctl_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fs->ctl_fd, 16)) {
		int e = errno;

		snprintf(msg, ml, "control socket %s: %s", path, strerror(e));
		if (fs->ctl_fd >= 0)
			close(fs->ctl_fd);
		fs->ctl_fd = -1;
		return -e;
	}
	if (pthread_create(&fs->ctl_thread, NULL, ctl_main, fs)) {
		close(fs->ctl_fd);
		fs->ctl_fd = -1;
		unlink(path);
		snprintf(msg, ml, "cannot start the control thread");
		return -EAGAIN;
	}
	return 0;
}

void fs_ctl_stop(struct fs *fs)
{
	if (fs->ctl_fd < 0)
		return;
	atomic_store(&fs->stopping, true);
	shutdown(fs->ctl_fd, SHUT_RDWR);
	close(fs->ctl_fd);
	pthread_join(fs->ctl_thread, NULL);
	/* The socket file stays until the process has closed the cache:
	 * `fmfs umount` waits for it to go (tools/fmfs_ctl.c). */
	fs->ctl_fd = -1;
	/* Detached connection threads finish on their own; wait briefly. */
	for (int i = 0; i < 100 && atomic_load(&ctl_conns) > 0; i++)
		usleep(50 * 1000);
}
