/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - what a mount measures, in Prometheus' text format
 * (metrics/metrics.h): FUSE requests by operation (a count, the errors
 * and a latency histogram, taken by wrapping every operation of the
 * session: each one answers before it returns, so the wrapper's clock
 * covers the whole request), bytes read, the cache, the store's
 * requests, the write-back, the namespace.  Served by `fmfs metrics
 * MOUNTPOINT` through the control socket and by `--metrics ADDR:PORT`.
 * docs/metrics.md lists every metric.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "fs_int.h"

static const char *const op_names[FSOP_N] = {
	[FSOP_lookup] = "lookup", [FSOP_forget] = "forget",
	[FSOP_forget_multi] = "batch_forget", [FSOP_getattr] = "getattr",
	[FSOP_setattr] = "setattr", [FSOP_readlink] = "readlink",
	[FSOP_mknod] = "mknod", [FSOP_mkdir] = "mkdir",
	[FSOP_unlink] = "unlink", [FSOP_rmdir] = "rmdir",
	[FSOP_symlink] = "symlink", [FSOP_rename] = "rename",
	[FSOP_link] = "link", [FSOP_open] = "open", [FSOP_read] = "read",
	[FSOP_flush] = "flush", [FSOP_release] = "release",
	[FSOP_fsync] = "fsync", [FSOP_opendir] = "opendir",
	[FSOP_readdir] = "readdir", [FSOP_releasedir] = "releasedir",
	[FSOP_statfs] = "statfs", [FSOP_setxattr] = "setxattr",
	[FSOP_getxattr] = "getxattr", [FSOP_listxattr] = "listxattr",
	[FSOP_removexattr] = "removexattr", [FSOP_create] = "create",
	[FSOP_write_buf] = "write", [FSOP_readdirplus] = "readdirplus",
};

/* ---- timing every operation ---- */

static struct fuse_lowlevel_ops real; /* one session per process */
static __thread int cur_op = -1;      /* the operation this thread runs */

#define WRAP(name, params, ...)                                          \
	static void w_##name params                                     \
	{                                                               \
		struct fs *fs = fuse_req_userdata(req);                 \
		uint64_t t0 = util_now_ns();                            \
		int prev = cur_op;                                      \
		cur_op = FSOP_##name;                                   \
		real.name(__VA_ARGS__);                                 \
		cur_op = prev;                                          \
		util_hist_add(&fs->op_hist[FSOP_##name],                \
			      util_now_ns() - t0);                      \
	}

typedef struct fuse_file_info ffi;
WRAP(lookup, (fuse_req_t req, fuse_ino_t p, const char *n), req, p, n)
WRAP(forget, (fuse_req_t req, fuse_ino_t i, uint64_t n), req, i, n)
WRAP(forget_multi, (fuse_req_t req, size_t n, struct fuse_forget_data *f),
     req, n, f)
WRAP(getattr, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(setattr, (fuse_req_t req, fuse_ino_t i, struct stat *a, int s, ffi *fi),
     req, i, a, s, fi)
WRAP(readlink, (fuse_req_t req, fuse_ino_t i), req, i)
WRAP(mknod, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
	     dev_t d), req, p, n, m, d)
WRAP(mkdir, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m),
     req, p, n, m)
WRAP(unlink, (fuse_req_t req, fuse_ino_t p, const char *n), req, p, n)
WRAP(rmdir, (fuse_req_t req, fuse_ino_t p, const char *n), req, p, n)
WRAP(symlink, (fuse_req_t req, const char *l, fuse_ino_t p, const char *n),
     req, l, p, n)
WRAP(rename, (fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np,
	      const char *nn, unsigned f), req, p, n, np, nn, f)
WRAP(link, (fuse_req_t req, fuse_ino_t i, fuse_ino_t np, const char *nn),
     req, i, np, nn)
WRAP(open, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(read, (fuse_req_t req, fuse_ino_t i, size_t s, off_t o, ffi *fi),
     req, i, s, o, fi)
WRAP(flush, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(release, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(fsync, (fuse_req_t req, fuse_ino_t i, int d, ffi *fi), req, i, d, fi)
WRAP(opendir, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(readdir, (fuse_req_t req, fuse_ino_t i, size_t s, off_t o, ffi *fi),
     req, i, s, o, fi)
WRAP(releasedir, (fuse_req_t req, fuse_ino_t i, ffi *fi), req, i, fi)
WRAP(statfs, (fuse_req_t req, fuse_ino_t i), req, i)
WRAP(setxattr, (fuse_req_t req, fuse_ino_t i, const char *n, const char *v,
		size_t s, int f), req, i, n, v, s, f)
WRAP(getxattr, (fuse_req_t req, fuse_ino_t i, const char *n, size_t s),
     req, i, n, s)
WRAP(listxattr, (fuse_req_t req, fuse_ino_t i, size_t s), req, i, s)
WRAP(removexattr, (fuse_req_t req, fuse_ino_t i, const char *n), req, i, n)
WRAP(create, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
	      ffi *fi), req, p, n, m, fi)
WRAP(write_buf, (fuse_req_t req, fuse_ino_t i, struct fuse_bufvec *b,
		 off_t o, ffi *fi), req, i, b, o, fi)
WRAP(readdirplus, (fuse_req_t req, fuse_ino_t i, size_t s, off_t o,
		   ffi *fi), req, i, s, o, fi)

void fs_metrics_wrap(struct fuse_lowlevel_ops *ops)
{
	real = *ops;
#define SET(name) if (real.name) ops->name = w_##name
	SET(lookup); SET(forget); SET(forget_multi); SET(getattr);
	SET(setattr); SET(readlink); SET(mknod); SET(mkdir); SET(unlink);
	SET(rmdir); SET(symlink); SET(rename); SET(link); SET(open);
	SET(read); SET(flush); SET(release); SET(fsync); SET(opendir);
	SET(readdir); SET(releasedir); SET(statfs); SET(setxattr);
	SET(getxattr); SET(listxattr); SET(removexattr); SET(create);
	SET(write_buf); SET(readdirplus);
#undef SET
}

int fs_metrics_cur_op(void)
{
	return cur_op;
}

int fs_reply_err(fuse_req_t req, int err)
{
	/* A missing name or attribute is an answer, not a failure. */
	if (err && cur_op >= 0 &&
	    !(err == ENOENT && cur_op == FSOP_lookup) &&
	    !(err == ENODATA && cur_op == FSOP_getxattr)) {
		struct fs *fs = fuse_req_userdata(req);

		atomic_fetch_add(&fs->op_errs[cur_op], 1);
	}
	return fuse_reply_err(req, err);
}

/* ---- the text ---- */

static void fuse_part(struct fs *fs, FILE *out)
{
	char l[64];

	metrics_family(out, "fmfs_fuse_requests_total", "counter",
		       "FUSE requests answered, by operation");
	for (int i = 0; i < FSOP_N; i++) {
		snprintf(l, sizeof(l), "op=\"%s\"", op_names[i]);
		metrics_u64(out, "fmfs_fuse_requests_total", l,
			    util_hist_count(&fs->op_hist[i]));
	}
	metrics_family(out, "fmfs_fuse_errors_total", "counter",
		       "FUSE requests answered with an error, by operation "
		       "(not counted: ENOENT of lookup, ENODATA of getxattr)");
	for (int i = 0; i < FSOP_N; i++) {
		snprintf(l, sizeof(l), "op=\"%s\"", op_names[i]);
		metrics_u64(out, "fmfs_fuse_errors_total", l,
			    atomic_load(&fs->op_errs[i]));
	}
	metrics_family(out, "fmfs_fuse_request_duration_seconds",
		       "histogram", "Time from a FUSE request's arrival "
		       "in the daemon to its answer, by operation (those "
		       "that have run)");
	for (int i = 0; i < FSOP_N; i++) {
		if (!util_hist_count(&fs->op_hist[i]))
			continue;
		snprintf(l, sizeof(l), "op=\"%s\"", op_names[i]);
		metrics_hist(out, "fmfs_fuse_request_duration_seconds", l,
			     &fs->op_hist[i]);
	}
}

/* One histogram by method: GET always, the others once they ran. */
static void store_hist(FILE *out, struct obj_store *st, const char *name,
		       const char *help, bool first_byte)
{
	char l[64];

	metrics_family(out, name, "histogram", help);
	for (int m = 0; m < OBJ_METHODS; m++) {
		const struct util_hist *h = obj_request_hist(st, m, first_byte);

		if (!util_hist_count(h) && m != OBJ_M_GET)
			continue;
		snprintf(l, sizeof(l), "method=\"%s\"", obj_method_name(m));
		metrics_hist(out, name, l, h);
	}
}

static void store_part(struct fs *fs, FILE *out)
{
	struct obj_store *st = fs->cfg.st;
	struct obj_stats o;
	char l[64];

	obj_get_stats(st, &o);
	metrics_family(out, "fmfs_store_requests_total", "counter",
		       "HTTP attempts to the object store, by method and "
		       "status class (error: no HTTP answer)");
	for (int m = 0; m < OBJ_METHODS; m++)
		for (int c = 0; c < OBJ_CLASSES; c++) {
			uint64_t n = obj_requests_by(st, m, c);

			if (!n && c != OBJ_C_2XX)
				continue;
			snprintf(l, sizeof(l), "method=\"%s\",status=\"%s\"",
				 obj_method_name(m), obj_class_name(c));
			metrics_u64(out, "fmfs_store_requests_total", l, n);
		}
	metrics_counter(out, "fmfs_store_operations_total",
			"Object-store requests of any backend (for S3, every "
			"HTTP attempt)", o.requests);
	metrics_counter(out, "fmfs_store_retries_total",
			"Object-store requests sent again after a failure",
			o.retries);
	metrics_family(out, "fmfs_store_errors_total", "counter",
		       "Object-store operations that failed for good, by "
		       "kind");
	for (int i = 1; i <= OBJ_ERR_OTHER; i++) {
		snprintf(l, sizeof(l), "kind=\"%s\"",
			 obj_status_name((obj_status)i));
		metrics_u64(out, "fmfs_store_errors_total", l,
			    o.errors_by_status[i]);
	}
	metrics_counter(out, "fmfs_store_received_bytes_total",
			"Bytes received from the object store", o.bytes_in);
	metrics_counter(out, "fmfs_store_sent_bytes_total",
			"Bytes sent to the object store", o.bytes_out);
	store_hist(out, st, "fmfs_store_request_duration_seconds", "Time of "
		   "an HTTP attempt to the object store, from start to the "
		   "last byte, by method", false);
	store_hist(out, st, "fmfs_store_first_byte_seconds", "Time from the "
		   "start of an HTTP attempt to the first byte of its answer, "
		   "by method", true);
}

/* The cache group's counters. */
static void peer_part(const struct cache_stats *c, FILE *out)
{
	metrics_counter(out, "fmfs_peer_hits_total", "Runs the cache group's "
			"owner served us", c->peer_hits);
	metrics_counter(out, "fmfs_peer_fallbacks_total", "Runs asked of a "
			"peer that came from the bucket instead",
			c->peer_fallbacks);
	metrics_counter(out, "fmfs_peer_served_total", "Runs served to other "
			"members", c->peer_served);
	metrics_counter(out, "fmfs_peer_served_bytes_total", "Bytes served "
			"to other members", c->peer_bytes_out);
	metrics_counter(out, "fmfs_peer_refused_total", "Peer requests for "
			"a version this member does not hold", c->peer_refused);
	metrics_counter(out, "fmfs_peer_dropped_blocks_total", "Blocks peers "
			"sent, dropped at the file's last close (no "
			"--peer-keep-local)", c->peer_dropped);
	metrics_counter(out, "fmfs_peer_guard_bytes_total", "Bytes fetched "
			"from the bucket for a peer's request although "
			"another member owns them (the loop guard)",
			c->peer_guard_bytes);
	metrics_counter(out, "fmfs_peer_busy_total", "Runs an owner "
			"answered busy (it was asking a member for them)",
			c->peer_busy);
	metrics_counter(out, "fmfs_peer_timeouts_total", "Requests given "
			"up after a member stayed silent for --peer-timeout",
			c->peer_timeouts);
	metrics_counter(out, "fmfs_peer_skipped_down_total", "Runs read "
			"from the bucket without asking their owner, which "
			"was down", c->peer_skipped_down);
	metrics_gauge(out, "fmfs_peer_members_down", "Members of the cache "
		      "group marked down now", (double)c->peer_members_down);
	metrics_counter(out, "fmfs_peer_rma_reads_total", "Runs pulled from "
			"owners one-sided (RDMA READ through libfabric)",
			c->peer_rma_reads);
}

/* The write-back's. */
static void wb_part(struct fs *fs, FILE *out)
{
	struct cache_wb_stats w;

	cache_wb_get_stats(fs->cfg.cache, &w);
	metrics_gauge(out, "fmfs_writeback_dirty_bytes", "Bytes of files "
		      "written through the mount and not yet uploaded",
		      (double)w.dirty_bytes);
	metrics_gauge(out, "fmfs_writeback_dirty_files", "Dirty files",
		      (double)w.dirty_files);
	metrics_gauge(out, "fmfs_writeback_queue_length", "Files and "
		      "deletions waiting for upload", (double)w.queued);
	metrics_gauge(out, "fmfs_writeback_oldest_dirty_age_seconds",
		      "Age of the oldest change queued (close, fsync) and "
		      "not yet uploaded; 0 when none",
		      (double)w.oldest_queued_ms / 1000);
	metrics_gauge(out, "fmfs_writeback_uploads_inflight", "Uploads "
		      "under way", (double)w.uploads_inflight);
	metrics_counter(out, "fmfs_writeback_uploads_total", "Files "
			"uploaded", w.uploaded_files);
	metrics_counter(out, "fmfs_writeback_uploaded_bytes_total", "Bytes "
			"of files uploaded", w.uploaded_bytes);
	metrics_counter(out, "fmfs_writeback_upload_failures_total",
			"Failed upload attempts (each is retried)",
			w.upload_failures);
	metrics_counter(out, "fmfs_writeback_deletes_total", "Keys deleted",
			w.deleted_keys);
	metrics_gauge(out, "fmfs_writeback_damaged_files", "Dirty files "
		      "held: they no longer match their checksums",
		      (double)w.damaged_files);
	metrics_gauge(out, "fmfs_writeback_lost_files", "Files whose bytes "
		      "were gone from the cache disk at mount",
		      (double)w.lost_files);
}

/* The daemon, its keeper and the takeovers (docs/keeper.md). */
static void keeper_part(struct fs *fs, FILE *out)
{
	struct fs_tk_info k;
	char l[200], *c;

	fs_tk_status(fs, &k);
	metrics_gauge(out, "fmfs_daemon_pid", "The pid of the daemon serving "
		      "the mount", k.daemon_pid);
	metrics_gauge(out, "fmfs_keeper_pid", "The pid of the mount's keeper "
		      "(--keeper), 0 without one", k.keeper_pid);
	metrics_counter(out, "fmfs_takeovers_total", "Daemons of this mount "
			"replaced by its keeper (a crash, fmfs restart)",
			k.takeovers);
	if (k.last_ms <= 0)
		return;
	metrics_gauge(out, "fmfs_last_takeover_timestamp_seconds", "When the "
		      "last takeover began (Unix time)",
		      (double)k.last_ms / 1000);
	if (k.last_took_ms >= 0)
		metrics_gauge(out, "fmfs_last_takeover_duration_seconds",
			      "From the daemon's end to the new one serving",
			      (double)k.last_took_ms / 1000);
	for (c = k.cause; *c; c++) /* a label value: no quote, backslash */
		if (*c == '"' || *c == '\\' || *c == '\n')
			*c = '_';
	metrics_family(out, "fmfs_last_takeover_info", "gauge",
		       "1, labelled with why the last takeover happened");
	snprintf(l, sizeof(l), "cause=\"%s\"", k.cause);
	metrics_u64(out, "fmfs_last_takeover_info", l, 1);
}

void fs_metrics_write(struct fs *fs, FILE *out)
{
	struct cache_stats c;
	uint64_t dirs, entries, inodes;
	char l[160];

	cache_get_stats(fs->cfg.cache, &c);
	metrics_family(out, "fmfs_build_info", "gauge",
		       "1, labelled with the version and the mount's mode");
	snprintf(l, sizeof(l), "version=\"%s\",mode=\"%s\"", FMFS_VERSION,
		 fs_mode_name(fs->cfg.mode));
	metrics_u64(out, "fmfs_build_info", l, 1);
	metrics_gauge(out, "fmfs_connected", "1 while the object store "
		      "answers, 0 while the mount serves disconnected",
		      c.connected && ns_connected(fs->ns));
	metrics_gauge(out, "fmfs_uptime_seconds", "Seconds since the mount "
		      "started", (double)(util_now_ms() - fs->started_ms) /
		      1000);
	keeper_part(fs, out);
	fuse_part(fs, out);
	metrics_family(out, "fmfs_read_bytes_total", "counter",
		       "Bytes read, by source: cache (answered to FUSE "
		       "reads from the cache files; passthrough reads never "
		       "reach the daemon) and store (fetched into the cache)");
	metrics_u64(out, "fmfs_read_bytes_total", "source=\"cache\"",
		    atomic_load(&fs->read_bytes));
	metrics_u64(out, "fmfs_read_bytes_total", "source=\"store\"",
		    c.bytes_fetched - c.peer_bytes_in);
	metrics_u64(out, "fmfs_read_bytes_total", "source=\"peer\"",
		    c.peer_bytes_in);
	metrics_counter(out, "fmfs_cache_hits_total", "Blocks served from "
			"the cache without a fetch", c.hits);
	metrics_counter(out, "fmfs_cache_misses_total", "Blocks fetched from "
			"the store", c.misses);
	metrics_gauge(out, "fmfs_cache_used_bytes", "Bytes the cache holds "
		      "(clean and dirty)", (double)c.used_bytes);
	metrics_gauge(out, "fmfs_cache_capacity_bytes", "The cache's cap "
		      "(--cache-size)", (double)c.cap_bytes);
	metrics_gauge(out, "fmfs_cache_objects", "Object versions with "
		      "blocks in the cache", (double)c.objects);
	metrics_counter(out, "fmfs_cache_evictions_total", "Blocks evicted "
			"to stay under the cap", c.evictions);
	metrics_counter(out, "fmfs_cache_checksum_failures_total", "Blocks "
			"that failed their CRC32C (fetched again, never "
			"served)", c.crc_failures);
	metrics_counter(out, "fmfs_cache_fetch_errors_total", "Fetches of "
			"blocks that failed", c.fetch_errors);
	peer_part(&c, out);
	metrics_counter(out, "fmfs_readahead_bytes_total", "Bytes fetched "
			"ahead of readers: readahead windows and fmfs "
			"prefetch", c.ahead_bytes);
	metrics_gauge(out, "fmfs_fetch_inflight_bytes", "Bytes of fetches "
		      "under way", (double)c.inflight_bytes);
	metrics_counter(out, "fmfs_prefetch_bytes_total", "Bytes of files "
			"warmed by fmfs prefetch (cached already or fetched)",
			atomic_load(&fs->prefetch_bytes));
	store_part(fs, out);
	wb_part(fs, out);
	cache_listing_stats(fs->cfg.cache, &dirs, &entries);
	metrics_gauge(out, "fmfs_namespace_entries", "Directory entries "
		      "kept in the cache index", (double)entries);
	metrics_gauge(out, "fmfs_index_bytes", "Size of the cache index on "
		      "disk", (double)cache_index_bytes(fs->cfg.cache));
	pthread_mutex_lock(&fs->lock);
	inodes = fs->ninodes;
	pthread_mutex_unlock(&fs->lock);
	metrics_gauge(out, "fmfs_inodes", "Inodes the kernel holds",
		      (double)inodes);
	metrics_gauge(out, "fmfs_open_files", "Files open through the mount",
		      (double)atomic_load(&fs->open_files));
}

void fs_metrics_render(FILE *out, void *fs)
{
	fs_metrics_write(fs, out);
}
