/* SPDX-License-Identifier: MIT */
/*
 * fmfs_mount.c - `fmfs mount`: one subcommand, cmd_mount().
 *
 * mount checks everything it can before going to the background (URL,
 * options, credentials and bucket with one request, mountpoint, cache
 * directory), then forks a daemon that opens the store and the cache and
 * runs fs_run; the parent waits on a pipe and exits 0 only once the mount
 * is live, or non-zero with the daemon's message.  The daemon listens on
 * a control socket, whose path it publishes in an xattr on the mount's
 * root; umount, flush, status, prefetch and evict (fmfs_ctl.c) find it
 * there.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/fs.h"
#include "metrics/metrics.h"
#include "fmfs.h"

#define MOUNT_WAIT_S 60


/* mountinfo writes space, tab, newline and backslash as \\ooo. */
static void unescape_octal(char *s)
{
	char *q = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*q++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*q++ = *s;
		}
	}
	*q = '\0';
}

bool fmfs_mount_find(const char *real, struct fmfs_mount_info *mi)
{
	char line[4096], mp[PATH_MAX];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	bool found = false;

	if (!f)
		return false;
	/* Every line: a later one may be mounted over an earlier one. */
	while (fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - "), *uid;
		char type[64];

		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		unescape_octal(mp);
		if (strcmp(mp, real))
			continue;
		found = true;
		mi->fstype[0] = '\0';
		mi->owner_uid = -1;
		if (!dash || sscanf(dash + 3, "%63s", type) != 1)
			continue;
		snprintf(mi->fstype, sizeof(mi->fstype), "%s", type);
		uid = strstr(dash, "user_id=");
		if (uid)
			mi->owner_uid = strtoll(uid + 8, NULL, 10);
	}
	fclose(f);
	return found;
}

bool fmfs_is_mounted(const char *real)
{
	struct fmfs_mount_info mi;

	return fmfs_mount_find(real, &mi);
}

void fmfs_owner_str(long long uid, char *buf, size_t len)
{
	struct passwd *pw = uid >= 0 ? getpwuid((uid_t)uid) : NULL;

	if (pw)
		snprintf(buf, len, "%s (uid %lld)", pw->pw_name, uid);
	else if (uid >= 0)
		snprintf(buf, len, "uid %lld", uid);
	else
		snprintf(buf, len, "another user");
}

int fmfs_abs_path(const char *p, char *out, size_t len)
{
	char dir[PATH_MAX], parent[PATH_MAX];
	const char *base;
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	if (n >= sizeof(dir))
		return -1;
	memcpy(dir, p, n);
	dir[n] = '\0';
	base = strrchr(dir, '/');
	if (!base) {
		base = dir;
		snprintf(parent, sizeof(parent), ".");
	} else {
		*(char *)base++ = '\0';
		snprintf(parent, sizeof(parent), "%s", dir[0] ? dir : "/");
	}
	if (!realpath(parent, out))
		return -1;
	n = strlen(out);
	if (snprintf(out + n, len - n, "%s%s", n > 1 ? "/" : "", base) >=
	    (int)(len - n))
		return -1;
	return 0;
}

/* The mountpoint is a FUSE mount whose daemon is gone (stat: ENOTCONN).
 * An fmfs one is unmounted here, lazily, so that mounting again after a
 * crash is one command (a restart loop need not know); its dirty files
 * stay in its cache directory, uploaded when that is mounted again, as
 * after `fmfs umount`.  Another filesystem's is left to its owner. */
static int clear_dead_mount(const struct mount_opts *o)
{
	struct fmfs_mount_info mi;
	char abs[PATH_MAX];

	if (fmfs_abs_path(o->mountpoint, abs, sizeof(abs)) ||
	    !fmfs_mount_find(abs, &mi)) {
		fprintf(stderr, "fmfs mount: mountpoint %s: %s: it, or a "
			"directory above it, is a FUSE mount whose daemon is "
			"gone; unmount that first (fusermount3 -u DIR, or "
			"umount -l DIR as root)\n", o->mountpoint,
			strerror(ENOTCONN));
		return EXIT_USAGE;
	}
	if (strcmp(mi.fstype, "fuse.fmfs")) {
		fprintf(stderr, "fmfs mount: mountpoint %s is a dead %s mount "
			"(its daemon is gone: %s); unmount it first: "
			"fusermount3 -u %s\n", abs, mi.fstype[0] ? mi.fstype :
			"FUSE", strerror(ENOTCONN), abs);
		return EXIT_USAGE;
	}
	if (fmfs_unmount(abs, true)) {
		char who[128];

		fmfs_owner_str(mi.owner_uid, who, sizeof(who));
		fprintf(stderr, "fmfs mount: mountpoint %s is a dead fmfs "
			"mount of %s (its daemon is gone) and could not be "
			"unmounted; run fmfs umount %s or fusermount3 -u %s "
			"as %s\n", abs, who, abs, abs, mi.owner_uid == 0 ?
			"root" : "that user or as root");
		return EXIT_USAGE;
	}
	fprintf(stderr, "fmfs mount: %s was a dead fmfs mount (its daemon "
		"had exited); unmounted it\n", abs);
	return EXIT_OK;
}

static int check_mountpoint(struct mount_opts *o)
{
	struct statfs sf;
	struct stat st;

	/* A dead FUSE mount answers ENOTCONN (fmfs_dead_errno), but stat
	 * may be served from attributes the kernel cached while it lived;
	 * statfs always goes to the daemon. */
	if (statfs(o->mountpoint, &sf) && fmfs_dead_errno(errno) == ENOTCONN) {
		int rc = clear_dead_mount(o);

		if (rc)
			return rc;
	}
	if (stat(o->mountpoint, &st)) {
		int e = errno;

		fprintf(stderr, "fmfs mount: mountpoint %s: %s%s\n",
			o->mountpoint, strerror(e), e == ENOENT ? " (create "
			"it with mkdir -p)" : "");
		return EXIT_USAGE;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "fmfs mount: mountpoint %s is not a "
			"directory\n", o->mountpoint);
		return EXIT_USAGE;
	}
	if (!realpath(o->mountpoint, o->mnt_real)) {
		fprintf(stderr, "fmfs mount: %s: %s\n", o->mountpoint,
			strerror(errno));
		return EXIT_USAGE;
	}
	if (fmfs_is_mounted(o->mnt_real)) {
		fprintf(stderr, "fmfs mount: %s is busy: something is already "
			"mounted there (fmfs umount %s)\n", o->mnt_real,
			o->mnt_real);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

/* After a failed mount: removes what prepare_cache_dir and the cache
 * made (fmfs_cache_undo). */
static void undo_cache_dir(const struct mount_opts *o)
{
	fmfs_cache_undo(o->cache_dir, o->cache_made, o->cache_was_empty);
}

/* Default cache dir, size and control socket; creates the cache dir. */
static int prepare_cache_dir(struct mount_opts *o)
{
	char *def = o->cache_def, name[96];
	const size_t deflen = sizeof(o->cache_def);
	const char *home = getenv("HOME"), *xdg = getenv("XDG_CACHE_HOME");
	const char *rundir;
	struct statvfs sv;
	uint64_t disk;
	int rc;

	if (!o->cache_dir) {
		size_t j = 0;

		for (const char *s = o->url; *s && j < 60; s++)
			name[j++] = (char)((*s >= 'a' && *s <= 'z') ||
					   (*s >= '0' && *s <= '9') ||
					   *s == '-' ? *s : '_');
		snprintf(name + j, sizeof(name) - j, "-%08llx",
			 (unsigned long long)(util_fnv1a64(UTIL_FNV64_BASIS, o->url,
						 strlen(o->url)) & 0xffffffff));
		if (getuid() == 0)
			snprintf(def, deflen, "/var/cache/fmfs/%s", name);
		else if (xdg && *xdg)
			snprintf(def, deflen, "%s/fmfs/%s", xdg, name);
		else
			snprintf(def, deflen, "%s/.cache/fmfs/%s",
				 home ? home : "/tmp", name);
		o->cache_dir = def;
	}
	if ((rc = fmfs_cache_place_check(o->cache_dir, o->mnt_real, o->url)))
		return rc;
	o->cache_was_empty = fmfs_dir_is_empty(o->cache_dir);
	rc = util_mkdir_p_made(o->cache_dir, 0700, o->cache_made,
			       sizeof(o->cache_made));
	if (rc || !realpath(o->cache_dir, o->cache_real) ||
	    access(o->cache_real, W_OK | X_OK)) {
		fprintf(stderr, "fmfs mount: cache directory %s is not usable:"
			" %s (choose another with --cache-dir)\n", o->cache_dir,
			strerror(rc ? -rc : errno));
		return EXIT_USAGE;
	}
	if (statvfs(o->cache_real, &sv)) {
		fprintf(stderr, "fmfs mount: statvfs %s: %s\n", o->cache_real,
			strerror(errno));
		return EXIT_FAIL;
	}
	disk = (uint64_t)sv.f_blocks * sv.f_frsize;
	if (o->cache_size > disk) {
		/* A cap the disk can never reach is a typo (99999T for
		 * 99999M), not a wish: refused.  A cap above what is free
		 * now is fine: on ENOSPC the cache evicts and retries. */
		fprintf(stderr, "fmfs mount: --cache-size '%s' is more than "
			"the disk of %s can ever hold (%llu MiB in all); give "
			"a smaller size or another --cache-dir\n",
			o->cache_size_arg, o->cache_real,
			(unsigned long long)(disk >> 20));
		return EXIT_USAGE;
	}
	if (!o->cache_size) {
		o->cache_size = (uint64_t)sv.f_bavail * sv.f_frsize / 2;
		if (o->cache_size < (64u << 20)) {
			fprintf(stderr, "fmfs mount: the disk of %s has too "
				"little free space for a cache (%llu bytes "
				"free); free some or use --cache-dir\n",
				o->cache_real, (unsigned long long)
				((uint64_t)sv.f_bavail * sv.f_frsize));
			return EXIT_FAIL;
		}
	}
	rundir = fmfs_rundir();
	fmfs_ctl_sweep(rundir);
	snprintf(o->ctl_path, sizeof(o->ctl_path), "%s/fmfs-%016llx.sock",
		 rundir, (unsigned long long)util_fnv1a64(UTIL_FNV64_BASIS,
			 o->mnt_real, strlen(o->mnt_real)));
	return EXIT_OK;
}

static int report_obj(const char *what, const struct obj_error *err)
{
	char line[2048];

	obj_error_format(err, line, sizeof(line));
	fprintf(stderr, "fmfs mount: %s: %s\n", what, line);
	return tools_exit_code(err->status);
}

/* Opens store + cache; on failure writes a message to msg. */
static int open_all(struct mount_opts *o, struct obj_store **st,
		    struct cache **c, char *msg, size_t ml)
{
	struct cache_config cc;
	struct obj_error err;
	int rc;

	o->obj.url = o->url;
	if (obj_open(&o->obj, st, &err) != OBJ_OK) {
		obj_error_format(&err, msg, ml);
		return tools_exit_code(err.status);
	}
	cache_config_init(&cc);
	cc.dir = o->cache_real;
	cc.store_id = o->url;
	cc.dir_made = o->cache_made[0] != '\0';
	cc.size_bytes = o->cache_size;
	cc.fetch_timeout_ms = o->fetch_timeout_s * 1000;
	cc.listing_max_bytes = o->namespace_bytes;
	cc.peer_keep_local = o->peer_keep_local;
	cc.takeover = o->tk_fuse_fd > 0; /* docs/keeper.md */
	rc = cache_open(&cc, *st, c, msg, ml);
	if (rc) {
		obj_close(*st);
		*st = NULL;
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int serve(struct mount_opts *o, int ready_fd, char *msg, size_t ml)
{
	struct fs_config fc = {
		.mountpoint = o->mnt_real, .store_url = o->url,
		.mode = (enum fs_mode)o->mode, .refresh_s = o->refresh_s,
		.negative_refresh_s = o->negative_refresh_s,
		.meta_heads = o->meta_heads,
		.async_delay_ms = o->async_delay_s * 1000,
		.threads = o->threads, .fuse_opts = o->fuse_opts,
		.ctl_path = o->ctl_path, .ready_fd = ready_fd,
		.debug = o->debug, .passthrough = !o->no_passthrough,
		.uring = !o->no_uring,
		.file_mode = o->file_mode, .dir_mode = o->dir_mode,
		.uid = o->uid, .gid = o->gid,
		.no_allow_other = o->no_allow_other,
		.listing_mem_entries = o->mem_entries,
		.inode_max = o->mem_inodes,
		.disconnected = o->disconnected,
		.metrics_addr = o->metrics_addr,
		.tk_fd = o->tk_fd, .keeper_sock = o->keeper_sock,
		.tk_fuse_fd = o->tk_fuse_fd,
	};
	struct obj_store *st;
	struct cache *c;
	struct fmfs_group *gr = NULL;
	int rc;

	/* Two malloc arenas, not glibc's eight per core, before any thread
	 * starts: a walk's inodes and listings are made on one thread and
	 * freed on another, and with an arena per thread the holes they
	 * leave keep pages of every arena.  After `find` over 200,000
	 * file:// objects the daemon held 44-47 MB, 36-38 MB with two;
	 * `find` and warm reads took as long (docs/performance.md "Memory
	 * per inode"). */
	mallopt(M_ARENA_MAX, 2);
	rc = open_all(o, &st, &c, msg, ml);
	if (rc)
		return rc;
	if (o->peers &&
	    fmfs_group_start(o->peers, o->peer_listen, o->peer_secret_file,
			     o->peer_timeout_ms,
			     o->fetch_timeout_s * 1000 - o->peer_timeout_ms,
			     o->peer_transport, c, &gr,
			     msg, ml)) {
		cache_close(c);
		obj_close(st);
		return EXIT_USAGE;
	}
	fc.st = st;
	fc.cache = c;
	rc = fs_run(&fc, msg, ml);
	rc = rc == -ENOTRECOVERABLE ? EXIT_TAKEOVER_REFUSED :
	     rc == FS_RUN_RESTART ? FS_TK_EXIT_RESTART :
	     rc ? EXIT_FAIL : EXIT_OK;
	/* No more peer requests into the cache; fetches under way may
	 * still use the client and the lists until the cache is closed. */
	fmfs_group_stop_serving(gr);
	cache_close(c);
	fmfs_group_free(gr);
	obj_close(st);
	return rc;
}

/* Whether the store's answer err means it could not be reached (not
 * that it refused us: credentials, bucket). */
static bool unreachable(const struct obj_error *err)
{
	return err->status == OBJ_ERR_CONNECT ||
	       err->status == OBJ_ERR_TIMEOUT ||
	       err->status == OBJ_ERR_SERVER;
}

/* Checks credentials, bucket and cache before going to the background.
 * A store that does not answer, with a cache dir that knows some of its
 * namespace: mounted disconnected (docs/semantics.md "The store
 * unreachable"). */
static int precheck(struct mount_opts *o)
{
	struct obj_store *st;
	struct obj_error err, down;
	struct cache *c;
	uint64_t dirs = 0, entries = 0;
	char msg[1024];
	int rc;

	if (o->peers && fmfs_group_check(o->peers, o->peer_listen,
					 o->peer_secret_file,
					 o->peer_transport, msg,
					 sizeof(msg))) {
		fprintf(stderr, "fmfs mount: %s\n", msg);
		return EXIT_USAGE;
	}
	o->obj.url = o->url;
	o->obj.read_only = o->mode == FS_MODE_RO;
	if (obj_open(&o->obj, &st, &err) != OBJ_OK)
		return report_obj(o->url, &err);
	if (obj_check_bucket(st, &err) != OBJ_OK) {
		obj_close(st);
		if (!unreachable(&err) || o->cache_was_empty ||
		    o->cache_made[0]) /* nothing cached: nothing to serve */
			return report_obj(o->url, &err);
		o->disconnected = true;
	}
	down = err;
	if (!o->disconnected)
		obj_close(st);
	rc = open_all(o, &st, &c, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "fmfs mount: %s\n", msg);
		return rc;
	}
	if (o->disconnected)
		cache_listing_stats(c, &dirs, &entries);
	cache_close(c);
	obj_close(st);
	if (o->disconnected && !dirs) {
		report_obj(o->url, &down);
		fprintf(stderr, "fmfs mount: the cache dir %s knows nothing of "
			"this bucket yet, so there is nothing to serve "
			"without it; mount again once the store answers\n",
			o->cache_real);
		return tools_exit_code(down.status);
	}
	if (o->disconnected) {
		obj_error_format(&down, msg, sizeof(msg));
		fprintf(stderr, "fmfs mount: warning: the store does not answer "
			"(%s); mounting disconnected from the cache in %s (%llu "
			"directories, %llu entries known): cached files are "
			"served, the rest fails with EIO, writes are queued, and "
			"the mount reconnects on its own\n", msg, o->cache_real,
			(unsigned long long)dirs, (unsigned long long)entries);
	}
	return EXIT_OK;
}

int cmd_mount(int argc, char **argv)
{
	struct mount_opts o;
	char msg[1024], log[PATH_MAX + 16], line[1100];
	int pfd[2], lockfd, rc, status;
	ssize_t n;
	pid_t pid;

	if ((rc = fmfs_keeper_daemon(argc, argv, serve)) >= 0)
		return rc; /* run again by a keeper for `fmfs restart` */
	memset(&o, 0, sizeof(o));
	if (fmfs_parse_mount_opts(argc, argv, &o))
		return EXIT_USAGE;
	if (o.keeper_given && o.no_keeper) {
		fprintf(stderr, "fmfs mount: --keeper and --no-keeper: give "
			"one of them\n");
		return EXIT_USAGE;
	}
	/* docs/keeper.md: kept unless --no-keeper; a daemon attached to
	 * the terminal has none unless asked for, and then is refused. */
	o.keeper = o.keeper_given || (!o.no_keeper && !o.foreground);
	if (o.keeper && o.foreground) {
		fprintf(stderr, "fmfs mount: --keeper runs the daemon under a "
			"keeper in the background; it cannot go with "
			"--foreground or --debug\n");
		return EXIT_USAGE;
	}
	o.argc = argc;
	o.argv = argv;
	if (!getcwd(o.cwd, sizeof(o.cwd)))
		o.cwd[0] = '\0';
	if ((rc = check_mountpoint(&o)))
		return rc;
	if (fs_check_fuse_opts(o.fuse_opts, msg, sizeof(msg))) {
		/* Here, not in the daemon: its stderr is the log. */
		fprintf(stderr, "fmfs mount: -o %s: %s\n", o.fuse_opts, msg);
		return EXIT_USAGE;
	}
	if ((rc = prepare_cache_dir(&o))) {
		undo_cache_dir(&o);
		return rc;
	}
	snprintf(log, sizeof(log), "%s/lock", o.cache_real);
	lockfd = open(log, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB)) {
		fprintf(stderr, "fmfs mount: cache directory %s is in use by "
			"another fmfs mount; give this one its own "
			"--cache-dir\n", o.cache_real);
		return EXIT_USAGE;
	}
	rc = precheck(&o);
	if (rc)
		goto out_undo;
	if (o.foreground) {
		rc = serve(&o, -1, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "fmfs mount: %s\n", msg);
			undo_cache_dir(&o); /* the mount never came up */
		}
		close(lockfd);
		unlink(o.ctl_path); /* last: umount waits for it */
		return rc;
	}
	if (pipe2(pfd, O_CLOEXEC)) {
		perror("fmfs mount: pipe");
		rc = EXIT_FAIL;
		goto out_undo;
	}
	pid = fork();
	if (pid < 0) {
		perror("fmfs mount: fork");
		close(pfd[0]);
		close(pfd[1]);
		rc = EXIT_FAIL;
		goto out_undo;
	}
	if (pid == 0) {
		int fd;

		close(pfd[0]);
		setsid();
		snprintf(log, sizeof(log), "%s/fmfs.log", o.cache_real);
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			close(fd);
		}
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		if (chdir("/")) {
			/* keep going: only relative paths would suffer */
		}
		if (o.keeper) {
			rc = fmfs_keeper_run(&o, pfd[1], serve);
			close(lockfd);
			unlink(o.ctl_path);
			_exit(rc); /* the daemons told what went wrong */
		}
		rc = serve(&o, pfd[1], msg, sizeof(msg));
		/* Cache closed: free the lock, then remove the socket, which
		 * is what `fmfs umount` waits for. */
		close(lockfd);
		unlink(o.ctl_path);
		if (rc) {
			fprintf(stderr, "fmfs: %s\n", msg);
			snprintf(line, sizeof(line), "error %s\n", msg);
			if (write(pfd[1], line, strlen(line)) < 0) {
				/* the parent is gone: nothing to tell */
			}
		}
		_exit(rc);
	}
	close(pfd[1]);
	close(lockfd); /* the daemon holds its own copy of the lock */
	n = read(pfd[0], line, sizeof(line) - 1);
	close(pfd[0]);
	line[n > 0 ? n : 0] = '\0';
	if (n >= 2 && !strncmp(line, "ok", 2))
		return EXIT_OK;
	waitpid(pid, &status, 0);
	if (n > 6 && !strncmp(line, "error ", 6)) {
		fprintf(stderr, "fmfs mount: %s", line + 6);
		undo_cache_dir(&o); /* the daemon has exited */
	} else {
		/* Kept: the log is all there is to tell what happened. */
		fprintf(stderr, "fmfs mount: the daemon exited before the "
			"mount was live; see %s/fmfs.log\n", o.cache_real);
	}
	return EXIT_FAIL;

out_undo:
	undo_cache_dir(&o); /* before the lock goes: no other mount yet */
	close(lockfd);
	return rc;
}
