/* SPDX-License-Identifier: MIT */
/*
 * mount.c - the mount loop of the fs module: fs_run makes the fs (its
 * namespace, inode table and locks), the FUSE session with the
 * operations of the mode, the control socket and the metrics endpoint,
 * mounts, starts the uploaders and the prober, serves until unmounted
 * or signalled, and takes it all down in the reverse order.  Also the
 * check of extra -o options, libfuse's log captured for messages, and
 * the mount's readahead.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fs_int.h"

int fs_mode_parse(const char *s)
{
	static const char *const names[] = { "ro", "sw", "iw", "lu" };

	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

const char *fs_mode_name(enum fs_mode m)
{
	static const char *const names[] = { "ro", "sw", "iw", "lu" };

	return (unsigned)m < 4 ? names[m] : "?";
}

/* Raises the kernel readahead of the mount's backing device to 4 MiB
 * (a cold sequential read of a large file went from 1.2 to 1.5 GB/s on
 * the test machine).  Best effort: needs root.  The device
 * number comes from /proc/self/mountinfo: a stat() of the mountpoint
 * would be a FUSE request to ourselves before the loop runs (deadlock). */
static void raise_readahead(const char *mountpoint)
{
	char line[4096], mp[4096], path[128];
	unsigned maj, min;
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	if (!f)
		return;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%*s %*s %u:%u %*s %4095s", &maj, &min,
			       mp) == 3 && !strcmp(mp, mountpoint);
	fclose(f);
	if (!found)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 maj, min);
	f = fopen(path, "w");
	if (f) {
		fputs("4096", f);
		fclose(f);
	}
}

/* What libfuse logs while fs_fuse_capture is on: its reason for
 * refusing options or a mount, which would otherwise go only to the
 * daemon's log.  Used while one thread starts a mount (fs_run before it
 * serves, fs_check_fuse_opts before the daemon exists). */
static char fs_fuse_said[512];

static void fs_fuse_log(enum fuse_log_level level, const char *fmt,
			va_list ap)
{
	size_t at = strlen(fs_fuse_said);

	if (level > FUSE_LOG_WARNING) {
		vfprintf(stderr, fmt, ap);
		return;
	}
	if (at + 2 < sizeof(fs_fuse_said))
		vsnprintf(fs_fuse_said + at, sizeof(fs_fuse_said) - at, fmt,
			  ap);
}

static void fs_fuse_capture(bool on)
{
	if (on)
		fs_fuse_said[0] = '\0';
	fuse_set_log_func(on ? fs_fuse_log : NULL);
}

/* What libfuse said, one line, without its "fuse: " prefixes. */
static const char *fs_fuse_reason(void)
{
	char *p = fs_fuse_said, *q = fs_fuse_said;

	while (*p) {
		if (!strncmp(p, "fuse: ", 6))
			p += 6;
		while (*p && *p != '\n')
			*q++ = *p++;
		while (*p == '\n')
			p++;
		if (*p)
			*q++ = ';', *q++ = ' ';
	}
	*q = '\0';
	return fs_fuse_said[0] ? fs_fuse_said : "no reason given";
}

int fs_check_fuse_opts(const char *opts, char *msg, size_t ml)
{
	char *argv[] = { "fmfs", "-o", (char *)opts, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse_lowlevel_ops ops;
	struct fuse_session *se;

	if (!opts)
		return 0;
	memset(&ops, 0, sizeof(ops));
	fs_fuse_capture(true);
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	fs_fuse_capture(false);
	fuse_opt_free_args(&args);
	if (!se) {
		snprintf(msg, ml, "libfuse does not take it: %s",
			 fs_fuse_reason());
		return -EINVAL;
	}
	fuse_session_destroy(se); /* never mounted: nothing opened */
	return 0;
}

/* A new fs for cfg: the configuration's defaults resolved, its namespace,
 * locks and inode table (the root with the attributes an earlier mount's
 * chmod left).  NULL with msg set. */
static struct fs *fs_new(const struct fs_config *cfg, char *msg, size_t ml)
{
	struct fs *fs = calloc(1, sizeof(*fs));
	struct cache_attr a;

	if (!fs) {
		snprintf(msg, ml, "out of memory");
		return NULL;
	}
	fs->cfg = *cfg;
	if (!fs->cfg.threads)
		fs->cfg.threads = 8;
	if (fs->cfg.file_mode < 0)
		fs->cfg.file_mode = FS_FILE_MODE;
	if (fs->cfg.dir_mode < 0)
		fs->cfg.dir_mode = FS_DIR_MODE;
	if (fs->cfg.uid < 0)
		fs->cfg.uid = getuid();
	if (fs->cfg.gid < 0)
		fs->cfg.gid = getgid();
	if (fs->cfg.negative_refresh_s > fs->cfg.refresh_s)
		fs->cfg.negative_refresh_s = fs->cfg.refresh_s;
	if (!fs->cfg.listing_mem_entries)
		fs->cfg.listing_mem_entries = FS_MEM_ENTRIES;
	if (!fs->cfg.inode_max)
		fs->cfg.inode_max = FS_MEM_INODES;
	fs->started_ms = util_now_ms();
	fs->mount_time_s = time(NULL);
	fs->ctl_fd = -1;
	if (ns_open(&(struct ns_config){
		.st = cfg->st, .cache = cfg->cache,
		.refresh_s = fs->cfg.refresh_s,
		.negative_refresh_s = fs->cfg.negative_refresh_s,
		.listing_mem_entries = fs->cfg.listing_mem_entries,
		.local_only = cfg->mode == FS_MODE_LU,
		/* the prober asks again in a moment */
		.disconnected = cfg->disconnected,
		.file_mode = (uint32_t)fs->cfg.file_mode,
		.dir_mode = (uint32_t)fs->cfg.dir_mode,
		.uid = (uint32_t)fs->cfg.uid, .gid = (uint32_t)fs->cfg.gid,
		.dir_mtime_s = fs->mount_time_s,
		.head_threads = fs->cfg.meta_heads }, &fs->ns)) {
		snprintf(msg, ml, "out of memory");
		free(fs);
		return NULL;
	}
	pthread_mutex_init(&fs->lock, NULL);
	pthread_mutex_init(&fs->link_lock, NULL);
	if (fs_inodes_init(fs)) {
		snprintf(msg, ml, "out of memory");
		ns_close(fs->ns);
		pthread_mutex_destroy(&fs->lock);
		pthread_mutex_destroy(&fs->link_lock);
		free(fs);
		return NULL;
	}
	if (!cache_attr_get(cfg->cache, "", &a))
		fs_attr_apply(fs, fs->root, &a);
	return fs;
}

static void fs_free(struct fs *fs)
{
	fs_tk_detach(fs);
	fs_inodes_free(fs);
	ns_close(fs->ns);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->link_lock);
	free(fs);
}

/* The FUSE session with the mount's options and the operations of its
 * mode, each timed (metrics.c).  NULL with msg set. */
static struct fuse_session *session_new(struct fs *fs, char *msg, size_t ml)
{
	const struct fs_config *cfg = &fs->cfg;
	char fsname[512], opts[1024];
	char *argv[] = { "fmfs", "-o", opts, NULL, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse_lowlevel_ops ops;
	struct fuse_session *se;

	snprintf(fsname, sizeof(fsname), "%s", cfg->store_url);
	for (char *c = fsname; *c; c++)
		if (*c == ',')
			*c = '_';
	snprintf(opts, sizeof(opts), "fsname=fmfs:%s,subtype=fmfs,%s"
		 "max_read=%u,default_permissions%s%s%s", fsname,
		 cfg->mode == FS_MODE_RO ? "ro," : "", FS_MAX_READ,
		 getuid() == 0 && !cfg->no_allow_other && !(cfg->fuse_opts &&
		 strstr(cfg->fuse_opts, "allow_other")) ? ",allow_other" : "",
		 cfg->fuse_opts ? "," : "", cfg->fuse_opts ? cfg->fuse_opts : "");
	if (cfg->debug)
		argv[3] = "-d", args.argc = 4;
	fs_read_ops(&ops);
	fs_attr_ops(&ops, cfg->mode != FS_MODE_RO);
	if (cfg->mode != FS_MODE_RO)
		fs_write_ops(&ops);
	fs_metrics_wrap(&ops);
	fs_fuse_capture(true);
	se = fuse_session_new(&args, &ops, sizeof(ops), fs);
	fs_fuse_capture(false);
	fuse_opt_free_args(&args); /* what libfuse added to it */
	if (!se)
		snprintf(msg, ml, "libfuse does not take the options %s: %s",
			 opts, fs_fuse_reason());
	return se;
}

/* Once mounted: the uploaders (but read-only) and the prober (fs_int.h). */
int fs_start_workers(struct fs *fs, char *msg, size_t ml)
{
	const struct fs_config *cfg = &fs->cfg;
	struct cache_wb_config wc = {
		.async_delay_ms = cfg->async_delay_ms,
		.uploaders = cfg->uploaders,
		.push = cfg->mode == FS_MODE_SW || cfg->mode == FS_MODE_IW,
		.check_conflicts = cfg->mode == FS_MODE_IW,
		.on_done = fs_on_done,
		.arg = fs,
	};
	int rc;

	rc = cfg->mode == FS_MODE_RO ? 0 : cache_wb_start(cfg->cache, &wc);
	if (rc) {
		snprintf(msg, ml, "cannot start the uploaders: %s",
			 strerror(-rc));
		return rc;
	}
	rc = fs_probe_start(fs);
	if (rc)
		snprintf(msg, ml, "cannot start a thread: %s", strerror(-rc));
	return rc;
}

/* Serves until unmounted or signalled: 0, or -errno with msg set. */
static int serve(struct fs *fs, char *msg, size_t ml)
{
	struct fuse_loop_config *lc;
	int rc;

	/* libfuse sends a read reply that is not spliced (a 1 MiB reply
	 * does not fit the 1 MiB pipe it may use) through a buffer it
	 * mallocs and frees per reply.  With glibc's sliding thresholds
	 * those came from fresh mmaps or trimmed arena tops: every reply
	 * faulted its pages in, ~10% of a warm read's CPU, and warm reads
	 * ran at half speed (measured 0.5-0.7 vs 1.3-1.5 GB/s, 8 readers).
	 * Fixed thresholds keep such buffers in the arenas, reused. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 128 << 20);
	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, fs->cfg.threads);
	fuse_loop_cfg_set_idle_threads(lc, fs->cfg.threads);
	/* With a keeper, every request is read on the one /dev/fuse file
	 * it holds too: one read on a clone of it would end with
	 * ECONNABORTED when this process dies (docs/keeper.md). */
	fuse_loop_cfg_set_clone_fd(lc, fs->tk ? 0 : 1);
	rc = fuse_session_loop_mt(fs->se, lc);
	fuse_loop_cfg_destroy(lc);
	fs_uring_stop(fs);
	if (rc >= 0 && fs->cfg.ready_fd < 0)
		return 0;
	/* The loop failed, or ended before the kernel's INIT. */
	snprintf(msg, ml, "the FUSE session on %s failed (%s); see the log",
		 fs->cfg.mountpoint, rc < 0 ? strerror(-rc) :
		 "no INIT from the kernel");
	return rc < 0 ? rc : -EIO;
}

int fs_run(const struct fs_config *cfg, char *msg, size_t ml)
{
	struct fs *fs = fs_new(cfg, msg, ml);
	int rc;

	if (!fs)
		return -ENOMEM;
	rc = fs_tk_attach(fs, msg, ml);
	if (rc) {
		rc = cfg->tk_fuse_fd > 0 ? -ENOTRECOVERABLE : rc;
		goto out_free;
	}
	fs->se = session_new(fs, msg, ml);
	if (!fs->se) {
		rc = -EINVAL;
		goto out_free;
	}
	rc = fs_ctl_start(fs, msg, ml);
	if (rc)
		goto out_session;
	if (cfg->metrics_addr) {
		char why[300];

		fs->metrics = metrics_http_start(cfg->metrics_addr,
						 fs_metrics_render, fs, why,
						 sizeof(why));
		if (!fs->metrics) {
			snprintf(msg, ml, "--metrics: %s", why);
			rc = -EADDRINUSE;
			goto out_ctl;
		}
	}
	/* libfabric's PSM providers (libinfinipath, loaded with us) put in
	 * handlers of their own that exit(1) at once, and libfuse installs
	 * its handlers only over SIG_DFL: a SIGTERM then left a dead mount
	 * and no clean stop.  The defaults back first, so libfuse's stop
	 * the loop and we unmount. */
	signal(SIGHUP, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (fuse_set_signal_handlers(fs->se)) {
		snprintf(msg, ml, "cannot install signal handlers");
		rc = -EIO;
		goto out_ctl;
	}
	fs_fuse_capture(true);
	if (cfg->tk_fuse_fd > 0) { /* a takeover: the kernel's mount */
		char dev[32];

		snprintf(dev, sizeof(dev), "/dev/fd/%d", cfg->tk_fuse_fd);
		rc = fuse_session_mount(fs->se, dev);
	} else {
		rc = fuse_session_mount(fs->se, cfg->mountpoint);
	}
	fs_fuse_capture(false);
	if (!rc && cfg->keeper_sock > 0 && cfg->tk_fuse_fd <= 0 &&
	    fs_tk_send_fd(cfg->keeper_sock, fuse_session_fd(fs->se)))
		fprintf(stderr, "fmfs: cannot hand /dev/fuse to the keeper "
			"(%s): a crash of this daemon ends the mount\n",
			strerror(errno));
	if (rc) {
		snprintf(msg, ml, "cannot mount on %s: %s (is it a "
			 "directory, not already mounted, and is /dev/fuse "
			 "usable?)", cfg->mountpoint, fs_fuse_reason());
		rc = -EIO;
		goto out_signals;
	}
	raise_readahead(cfg->mountpoint);
	rc = fs_pt_install(fs);
	if (rc)
		snprintf(msg, ml, "cannot set up the FUSE channel: %s",
			 strerror(-rc));
	if (!rc)
		/* A takeover starts them once the dead daemon's handles are
		 * open again (takeover.c): an upload that finished before
		 * would move a file its writer still has into the read
		 * cache, away from the kernel's backing file. */
		rc = cfg->tk_fuse_fd > 0 ? 0 : fs_start_workers(fs, msg, ml);
	if (!rc)
		rc = serve(fs, msg, ml);
	/* No more callbacks into fs once this returns. */
	cache_wb_stop(cfg->cache);
	if (atomic_load(&fs->tk_restart) && !rc)
		rc = FS_RUN_RESTART; /* the keeper's next daemon serves it */
	else
		fuse_session_unmount(fs->se);
	/* After the unmount: a notify of its stuck behind a request that is
	 * never answered now fails instead of hanging the join. */
	fs_probe_stop(fs);
out_signals:
	fuse_remove_signal_handlers(fs->se);
out_ctl:
	metrics_http_stop(fs->metrics);
	fs_ctl_stop(fs);
out_session:
	fuse_session_destroy(fs->se);
out_free:
	fs_free(fs);
	return rc;
}
