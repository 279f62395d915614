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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fmfs.h"

#define MOUNT_WAIT_S 60

struct mount_opts {
	struct obj_config obj;
	const char *url, *mountpoint, *cache_dir, *fuse_opts;
	uint64_t cache_size;
	int mode;
	unsigned refresh_s, threads, fetch_timeout_s;
	unsigned async_delay_s, upload_parallel;
	bool foreground, debug, no_passthrough;
	int file_mode, dir_mode;    /* -1: fs's defaults (attr_opt) */
	int64_t uid, gid;
	bool no_allow_other;
	char mnt_real[PATH_MAX], cache_real[PATH_MAX], ctl_path[256];
	char cache_def[PATH_MAX];   /* the default cache dir, when chosen */
};

static void mount_usage(FILE *f)
{
	fprintf(f,
"usage: fmfs mount URL MOUNTPOINT [options]\n"
"  URL: s3://BUCKET[/PREFIX] or file:///DIR\n"
"  --cache-dir DIR       cache directory (default: one per URL under\n"
"                        /var/cache/fmfs as root, else ~/.cache/fmfs)\n"
"  --cache-size SIZE     cap on cached bytes, K/M/G/T (default: half of\n"
"                        the free space of the cache directory's disk)\n"
"  --endpoint URL --region R --profile P --path-style  (as fmfs obj)\n"
"  --mode MODE           sw (default: this cache is the only writer), iw\n"
"                        (independent writers: revalidate, last close\n"
"                        wins), lu (local updates, never uploaded), ro\n"
"  --async-delay SECONDS upload a file this long after close (default 1)\n"
"  --part-size SIZE      multipart part size (default 8M)\n"
"  --upload-parallel N   requests in flight to the store (default 16)\n"
"  --refresh SECONDS     revalidate listings and attributes (default 30)\n"
"  --timeout SECONDS     an uncached read fails with EIO after (default 30)\n"
"  --threads N           FUSE worker threads (default 8)\n"
"  --no-passthrough      send writes through the daemon even where the\n"
"                        kernel could write files open for writing\n"
"                        straight into the cache (FUSE passthrough)\n"
"  --file-mode MODE --dir-mode MODE --uid UID --gid GID\n"
"                        what objects whose mode/uid/gid are not known\n"
"                        show (default 0600, 0755, the mounting user)\n"
"  --no-allow-other      as root: do not let other users in (root mounts\n"
"                        add allow_other by default)\n"
"  --foreground          stay attached (logs on stderr)\n"
"  -o OPTS               extra FUSE mount options\n"
"  --debug               FUSE debug output (implies --foreground)\n"
"\n"
"  fmfs umount MOUNTPOINT [--timeout SECONDS]  (uploads first)\n"
"  fmfs flush MOUNTPOINT [PATH] [--wait] [--timeout SECONDS]\n"
"  fmfs status MOUNTPOINT [--json]\n"
"  fmfs prefetch MOUNTPOINT (PATH... | --list FILE) [--wait]\n"
"  fmfs evict MOUNTPOINT (PATH... | --list FILE)\n");
}

static uint64_t fnv64(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* --file-mode, --dir-mode (octal, at most 0777), --uid, --gid. */
static int attr_opt(const char *opt, const char *v, struct mount_opts *o)
{
	bool is_mode = !strcmp(opt, "--file-mode") ||
		       !strcmp(opt, "--dir-mode");
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, is_mode ? 8 : 10);
	if (!*v || *end || errno || *v == '-' ||
	    n > (is_mode ? 0777ul : 0xfffffffeul))
		return tools_bad_opt("fmfs mount", opt, v, is_mode ?
				     "an octal mode from 0 to 0777" :
				     "a number from 0 to 4294967294");
	if (!strcmp(opt, "--file-mode"))
		o->file_mode = (int)n;
	else if (is_mode)
		o->dir_mode = (int)n;
	else if (!strcmp(opt, "--uid"))
		o->uid = (int64_t)n;
	else
		o->gid = (int64_t)n;
	return 0;
}

static int parse_mount_opts(int argc, char **argv, struct mount_opts *o)
{
	enum { OPT_CACHE_DIR = 256, OPT_CACHE_SIZE, OPT_MODE, OPT_REFRESH,
	       OPT_FG, OPT_TIMEOUT, OPT_THREADS, OPT_DEBUG, OPT_DELAY, OPT_PART,
	       OPT_UPAR, OPT_NO_PT, OPT_FMODE, OPT_DMODE, OPT_UID, OPT_GID,
	       OPT_NO_AO };
	static const struct option lo[] = {
		{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
		{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
		TOOLS_OBJ_OPTIONS,
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "refresh", required_argument, NULL, OPT_REFRESH },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "foreground", no_argument, NULL, OPT_FG },
		{ "debug", no_argument, NULL, OPT_DEBUG },
		{ "async-delay", required_argument, NULL, OPT_DELAY },
		{ "part-size", required_argument, NULL, OPT_PART },
		{ "upload-parallel", required_argument, NULL, OPT_UPAR },
		{ "no-passthrough", no_argument, NULL, OPT_NO_PT },
		{ "file-mode", required_argument, NULL, OPT_FMODE },
		{ "dir-mode", required_argument, NULL, OPT_DMODE },
		{ "uid", required_argument, NULL, OPT_UID },
		{ "gid", required_argument, NULL, OPT_GID },
		{ "no-allow-other", no_argument, NULL, OPT_NO_AO },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	unsigned long n;
	char *end;
	int c;

	obj_config_init(&o->obj);
	o->file_mode = o->dir_mode = -1;
	o->uid = o->gid = -1;
	o->refresh_s = 30;
	o->fetch_timeout_s = 30;
	o->mode = FS_MODE_SW;
	o->async_delay_s = 1;
	optind = 1;
	while ((c = tools_getopt(argc, argv, "o:fh", lo, &o->obj)) != -1) {
		switch (c) {
		case OPT_CACHE_DIR: o->cache_dir = optarg; break;
		case OPT_CACHE_SIZE:
			if (tools_parse_size(optarg, &o->cache_size) ||
			    o->cache_size < (16u << 20)) {
				return tools_bad_opt("fmfs mount",
					"--cache-size", optarg, "a size of at "
					"least 16M (K/M/G/T suffixes)");
			}
			break;
		case OPT_MODE:
			o->mode = fs_mode_parse(optarg);
			if (o->mode < 0)
				return tools_bad_opt("fmfs mount", "--mode",
					optarg, "ro, sw, iw or lu");
			break;
		case OPT_PART: {
			uint64_t v;

			if (tools_parse_size(optarg, &v) || v < (5u << 20) ||
			    v > (5ull << 30)) {
				return tools_bad_opt("fmfs mount",
					"--part-size", optarg, "a size from 5M "
					"to 5G (S3's limits)");
			}
			o->obj.part_size_bytes = (size_t)v;
			o->obj.multipart_threshold_bytes = (size_t)v * 2;
			break;
		}
		case OPT_REFRESH:
		case OPT_TIMEOUT:
		case OPT_THREADS:
		case OPT_DELAY:
		case OPT_UPAR:
			n = strtoul(optarg, &end, 10);
			if (*end || end == optarg || n > 86400 ||
			    (c != OPT_REFRESH && c != OPT_DELAY && n == 0) ||
			    ((c == OPT_THREADS || c == OPT_UPAR) && n > 64)) {
				fprintf(stderr, "fmfs mount: --%s '%s' is not "
					"a valid number\n", c == OPT_REFRESH ?
					"refresh" : c == OPT_TIMEOUT ?
					"timeout" : c == OPT_DELAY ?
					"async-delay" : c == OPT_UPAR ?
					"upload-parallel" : "threads", optarg);
				return -1;
			}
			if (c == OPT_DELAY)
				o->async_delay_s = (unsigned)n;
			else if (c == OPT_UPAR)
				o->obj.max_parallel = (unsigned)n;
			else if (c == OPT_REFRESH)
				o->refresh_s = (unsigned)n;
			else if (c == OPT_TIMEOUT)
				o->fetch_timeout_s = (unsigned)n;
			else
				o->threads = (unsigned)n;
			break;
		case 'f':
		case OPT_FG: o->foreground = true; break;
		case OPT_DEBUG: o->debug = o->foreground = true; break;
		case OPT_NO_PT: o->no_passthrough = true; break;
		case OPT_FMODE:
		case OPT_DMODE:
		case OPT_UID:
		case OPT_GID:
			if (attr_opt(c == OPT_FMODE ? "--file-mode" :
				     c == OPT_DMODE ? "--dir-mode" :
				     c == OPT_UID ? "--uid" : "--gid", optarg, o))
				return -1;
			break;
		case OPT_NO_AO: o->no_allow_other = true; break;
		case 'o': o->fuse_opts = optarg; break;
		case 'h': mount_usage(stdout); exit(EXIT_OK);
		default: return -1;
		}
	}
	if (argc - optind != 2) {
		mount_usage(stderr);
		return -1;
	}
	o->url = argv[optind];
	o->mountpoint = argv[optind + 1];
	return 0;
}

bool fmfs_is_mounted(const char *real)
{
	char line[4096], mp[PATH_MAX];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 &&
		    !strcmp(mp, real))
			found = true;
	fclose(f);
	return found;
}

static int check_mountpoint(struct mount_opts *o)
{
	struct stat st;

	if (stat(o->mountpoint, &st)) {
		fprintf(stderr, "fmfs mount: mountpoint %s: %s (create it with "
			"mkdir -p)\n", o->mountpoint, strerror(errno));
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

/* Default cache dir, size and control socket; creates the cache dir. */
static int prepare_cache_dir(struct mount_opts *o)
{
	char *def = o->cache_def, name[96];
	const size_t deflen = sizeof(o->cache_def);
	const char *home = getenv("HOME"), *xdg = getenv("XDG_CACHE_HOME");
	const char *rundir;
	struct statvfs sv;
	int rc;

	if (!o->cache_dir) {
		size_t j = 0;

		for (const char *s = o->url; *s && j < 60; s++)
			name[j++] = (char)((*s >= 'a' && *s <= 'z') ||
					   (*s >= '0' && *s <= '9') ||
					   *s == '-' ? *s : '_');
		snprintf(name + j, sizeof(name) - j, "-%08llx",
			 (unsigned long long)(fnv64(o->url) & 0xffffffff));
		if (getuid() == 0)
			snprintf(def, deflen, "/var/cache/fmfs/%s", name);
		else if (xdg && *xdg)
			snprintf(def, deflen, "%s/fmfs/%s", xdg, name);
		else
			snprintf(def, deflen, "%s/.cache/fmfs/%s",
				 home ? home : "/tmp", name);
		o->cache_dir = def;
	}
	rc = util_mkdir_p(o->cache_dir, 0700);
	if (rc || !realpath(o->cache_dir, o->cache_real) ||
	    access(o->cache_real, W_OK | X_OK)) {
		fprintf(stderr, "fmfs mount: cache directory %s is not usable:"
			" %s (choose another with --cache-dir)\n", o->cache_dir,
			strerror(rc ? -rc : errno));
		return EXIT_USAGE;
	}
	if (!o->cache_size) {
		if (statvfs(o->cache_real, &sv)) {
			fprintf(stderr, "fmfs mount: statvfs %s: %s\n",
				o->cache_real, strerror(errno));
			return EXIT_FAIL;
		}
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
	rundir = getuid() == 0 ? "/run/fmfs" : getenv("XDG_RUNTIME_DIR");
	if (!rundir || util_mkdir_p(rundir, 0700))
		rundir = "/tmp";
	snprintf(o->ctl_path, sizeof(o->ctl_path), "%s/fmfs-%016llx.sock",
		 rundir, (unsigned long long)fnv64(o->mnt_real));
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
	cc.size_bytes = o->cache_size;
	cc.fetch_timeout_ms = o->fetch_timeout_s * 1000;
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
		.async_delay_ms = o->async_delay_s * 1000,
		.threads = o->threads, .fuse_opts = o->fuse_opts,
		.ctl_path = o->ctl_path, .ready_fd = ready_fd,
		.debug = o->debug, .passthrough = !o->no_passthrough,
		.file_mode = o->file_mode, .dir_mode = o->dir_mode,
		.uid = o->uid, .gid = o->gid,
		.no_allow_other = o->no_allow_other,
	};
	struct obj_store *st;
	struct cache *c;
	int rc = open_all(o, &st, &c, msg, ml);

	if (rc)
		return rc;
	fc.st = st;
	fc.cache = c;
	rc = fs_run(&fc, msg, ml) ? EXIT_FAIL : EXIT_OK;
	cache_close(c);
	obj_close(st);
	return rc;
}

/* Checks credentials, bucket and cache before going to the background. */
static int precheck(struct mount_opts *o)
{
	struct obj_store *st;
	struct obj_error err;
	struct cache *c;
	char msg[1024];
	int rc;

	o->obj.url = o->url;
	if (obj_open(&o->obj, &st, &err) != OBJ_OK)
		return report_obj(o->url, &err);
	if (obj_check_bucket(st, &err) != OBJ_OK) {
		obj_close(st);
		return report_obj(o->url, &err);
	}
	obj_close(st);
	rc = open_all(o, &st, &c, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "fmfs mount: %s\n", msg);
		return rc;
	}
	cache_close(c);
	obj_close(st);
	return EXIT_OK;
}

int cmd_mount(int argc, char **argv)
{
	struct mount_opts o;
	char msg[1024], log[PATH_MAX + 16], line[1100];
	int pfd[2], lockfd, rc, status;
	ssize_t n;
	pid_t pid;

	memset(&o, 0, sizeof(o));
	if (parse_mount_opts(argc, argv, &o))
		return EXIT_USAGE;
	if ((rc = check_mountpoint(&o)) || (rc = prepare_cache_dir(&o)))
		return rc;
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
		return rc;
	if (o.foreground) {
		rc = serve(&o, -1, msg, sizeof(msg));
		if (rc)
			fprintf(stderr, "fmfs mount: %s\n", msg);
		close(lockfd);
		unlink(o.ctl_path); /* last: umount waits for it */
		return rc;
	}
	if (pipe2(pfd, O_CLOEXEC)) {
		perror("fmfs mount: pipe");
		return EXIT_FAIL;
	}
	pid = fork();
	if (pid < 0) {
		perror("fmfs mount: fork");
		return EXIT_FAIL;
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
	if (n > 6 && !strncmp(line, "error ", 6)) {
		fprintf(stderr, "fmfs mount: %s", line + 6);
	} else {
		fprintf(stderr, "fmfs mount: the daemon exited before the "
			"mount was live; see %s/fmfs.log\n", o.cache_real);
	}
	waitpid(pid, &status, 0);
	return EXIT_FAIL;
}
