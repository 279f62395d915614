/* SPDX-License-Identifier: MIT */
/*
 * cmd_mount.c - `fmfs mount / umount / status / prefetch / evict`.
 *
 * mount checks everything it can before going to the background (URL,
 * options, credentials and bucket with one request, mountpoint, cache
 * directory), then forks a daemon that opens the store and the cache and
 * runs fs_run; the parent waits on a pipe and exits 0 only once the mount
 * is live, or non-zero with the daemon's message.  The other verbs find
 * the daemon's control socket through an xattr on the mount's root.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs.h"
#include "tools.h"

#define MOUNT_WAIT_S 60

struct mount_opts {
	struct obj_config obj;
	const char *url, *mountpoint, *cache_dir, *fuse_opts;
	uint64_t cache_size;
	int mode;
	unsigned refresh_s, threads, fetch_timeout_s;
	unsigned async_delay_s, upload_parallel;
	bool foreground, debug, no_passthrough;
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
"  --foreground          stay attached (logs on stderr)\n"
"  -o OPTS               extra FUSE mount options\n"
"  --debug               FUSE debug output (implies --foreground)\n"
"\n"
"  fmfs umount MOUNTPOINT [--timeout SECONDS]  (uploads first)\n"
"  fmfs flush MOUNTPOINT [PATH] [--wait] [--timeout SECONDS]\n"
"  fmfs status MOUNTPOINT [--json]\n"
"  fmfs prefetch MOUNTPOINT (PATH... | --list FILE) [--wait]\n"
"  fmfs evict MOUNTPOINT PATH...\n");
}

static uint64_t fnv64(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static int parse_mount_opts(int argc, char **argv, struct mount_opts *o)
{
	enum { OPT_CACHE_DIR = 256, OPT_CACHE_SIZE, OPT_ENDPOINT, OPT_REGION,
	       OPT_PROFILE, OPT_PATH_STYLE, OPT_MODE, OPT_REFRESH, OPT_FG,
	       OPT_TIMEOUT, OPT_THREADS, OPT_DEBUG, OPT_DELAY, OPT_PART,
	       OPT_UPAR, OPT_NO_PT };
	static const struct option lo[] = {
		{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
		{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
		{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
		{ "region", required_argument, NULL, OPT_REGION },
		{ "profile", required_argument, NULL, OPT_PROFILE },
		{ "path-style", no_argument, NULL, OPT_PATH_STYLE },
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	unsigned long n;
	char *end;
	int c;

	obj_config_init(&o->obj);
	o->refresh_s = 30;
	o->fetch_timeout_s = 30;
	o->mode = FS_MODE_SW;
	o->async_delay_s = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:fh", lo, NULL)) != -1) {
		switch (c) {
		case OPT_CACHE_DIR: o->cache_dir = optarg; break;
		case OPT_CACHE_SIZE:
			if (tools_parse_size(optarg, &o->cache_size) ||
			    o->cache_size < (16u << 20)) {
				fprintf(stderr, "fmfs mount: --cache-size '%s':"
					" give a size of at least 16M (K/M/G/T "
					"suffixes)\n", optarg);
				return -1;
			}
			break;
		case OPT_ENDPOINT: o->obj.endpoint = optarg; break;
		case OPT_REGION: o->obj.region = optarg; break;
		case OPT_PROFILE: o->obj.profile = optarg; break;
		case OPT_PATH_STYLE: o->obj.path_style = 1; break;
		case OPT_MODE:
			o->mode = fs_mode_parse(optarg);
			if (o->mode < 0) {
				fprintf(stderr, "fmfs mount: --mode '%s': give "
					"ro, sw, iw or lu\n", optarg);
				return -1;
			}
			break;
		case OPT_PART: {
			uint64_t v;

			if (tools_parse_size(optarg, &v) || v < (5u << 20) ||
			    v > (5ull << 30)) {
				fprintf(stderr, "fmfs mount: --part-size '%s': "
					"give a size from 5M to 5G (S3's "
					"limits)\n", optarg);
				return -1;
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

/* Is path the root of a mount (per /proc/self/mountinfo)? */
static bool is_mounted(const char *real)
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
	if (is_mounted(o->mnt_real)) {
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

static int cmd_mount(int argc, char **argv)
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

/* ---- talking to a running mount ---- */

static int ctl_path_of(const char *verb, const char *mnt, char *path,
		       size_t len, char *real)
{
	ssize_t n;

	if (!realpath(mnt, real)) {
		int e = errno;

		real[0] = '\0';
		if (!(e == ENOTCONN && !strcmp(verb, "umount")))
			fprintf(stderr, "fmfs %s: %s: %s%s\n", verb, mnt,
				strerror(e), e == ENOTCONN ? " (the fmfs daemon "
				"is gone; run fmfs umount)" : "");
		errno = e;
		return e == ENOTCONN ? EXIT_FAIL : EXIT_USAGE;
	}
	n = getxattr(real, FS_CTL_XATTR, path, len - 1);
	if (n <= 0) {
		int e = n < 0 ? errno : ENODATA;

		if (!(e == ENOTCONN && !strcmp(verb, "umount")))
			fprintf(stderr, "fmfs %s: %s is not an fmfs mount%s\n",
				verb, real, e == ENOTCONN ? " any more (the "
				"daemon is gone; run fmfs umount)" : "");
		errno = e;
		return EXIT_USAGE;
	}
	path[n] = '\0';
	return EXIT_OK;
}

/* Sends one request line; copies the answer to out (or into buf). */
static int ctl_request(const char *sock, const char *req, FILE *out,
		       char *buf, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char tmp[4096];
	size_t at = 0;
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	if (write(fd, req, strlen(req)) < 0 || write(fd, "\n", 1) < 0) {
		close(fd);
		return -EIO;
	}
	while ((n = read(fd, tmp, sizeof(tmp))) > 0) {
		if (out)
			fwrite(tmp, 1, (size_t)n, out);
		for (ssize_t i = 0; buf && i < n && at + 1 < len; i++)
			buf[at++] = tmp[i];
	}
	if (buf && len)
		buf[at] = '\0';
	close(fd);
	return 0;
}

static int cmd_status(int argc, char **argv)
{
	char sock[256], real[PATH_MAX];
	bool json = false;
	const char *mnt = NULL;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!mnt && argv[i][0] != '-')
			mnt = argv[i];
		else {
			fprintf(stderr, "usage: fmfs status MOUNTPOINT "
				"[--json]\n");
			return EXIT_USAGE;
		}
	}
	if (!mnt) {
		fprintf(stderr, "usage: fmfs status MOUNTPOINT [--json]\n");
		return EXIT_USAGE;
	}
	if ((rc = ctl_path_of("status", mnt, sock, sizeof(sock), real)))
		return rc;
	if (ctl_request(sock, json ? "status-json" : "status", stdout, NULL,
			0)) {
		fprintf(stderr, "fmfs status: the daemon of %s does not answer"
			" on %s\n", real, sock);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

struct warm_client {
	const char *sock, *verb;
	char **paths;
	size_t n, next;
	bool wait;
	pthread_mutex_t lock;
	unsigned long long files, bytes, errors;
};

static void *warm_client_main(void *arg)
{
	struct warm_client *w = arg;
	char req[PATH_MAX + 32], ans[1024];

	for (;;) {
		unsigned long long f = 0, b = 0;
		size_t i;

		pthread_mutex_lock(&w->lock);
		i = w->next++;
		pthread_mutex_unlock(&w->lock);
		if (i >= w->n)
			return NULL;
		snprintf(req, sizeof(req), "%s%s %s", w->verb,
			 w->wait ? "-wait" : "", w->paths[i]);
		if (!strcmp(w->verb, "evict"))
			snprintf(req, sizeof(req), "evict %s", w->paths[i]);
		if (ctl_request(w->sock, req, NULL, ans, sizeof(ans)))
			snprintf(ans, sizeof(ans), "error daemon not "
				 "answering\n");
		pthread_mutex_lock(&w->lock);
		if (!strncmp(ans, "ok", 2)) {
			sscanf(ans, "ok %llu files %llu bytes", &f, &b);
			w->files += f;
			w->bytes += b;
		} else {
			w->errors++;
			fprintf(stderr, "fmfs %s: %s: %s", w->verb,
				w->paths[i], ans[0] ? ans : "no answer\n");
		}
		pthread_mutex_unlock(&w->lock);
	}
}

/* Appends a copy of p to w->paths; -ENOMEM on failure. */
static int paths_add(struct warm_client *w, size_t *cap, const char *p)
{
	if (w->n == *cap) {
		size_t nc = *cap ? 2 * *cap : 64;
		char **np = realloc(w->paths, nc * sizeof(*np));

		if (!np)
			return -ENOMEM;
		w->paths = np;
		*cap = nc;
	}
	if (!(w->paths[w->n] = strdup(p)))
		return -ENOMEM;
	w->n++;
	return 0;
}

/* Turns a path given by the user into one relative to the mount root. */
static char *mount_relative(const char *mnt_real, const char *p)
{
	char real[PATH_MAX];
	size_t ml = strlen(mnt_real);

	if (!realpath(p, real))
		return NULL;
	if (strncmp(real, mnt_real, ml) || (real[ml] && real[ml] != '/'))
		return NULL;
	return strdup(real[ml] ? real + ml + 1 : "");
}

static int cmd_warm(const char *verb, int argc, char **argv)
{
	struct warm_client w = { .verb = verb };
	char sock[256], real[PATH_MAX], line[PATH_MAX];
	const char *mnt = NULL, *list = NULL;
	size_t cap = 0;
	pthread_t t[8];
	size_t nt;
	int rc = EXIT_OK;

	pthread_mutex_init(&w.lock, NULL);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--wait")) {
			w.wait = true;
		} else if (!strcmp(a, "--list") && i + 1 < argc) {
			list = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "fmfs %s: unknown option %s\n", verb, a);
			rc = EXIT_USAGE;
			goto out_free_paths;
		} else if (!mnt) {
			mnt = a;
		} else {
			if (paths_add(&w, &cap, a)) {
				rc = EXIT_FAIL;
				goto out_free_paths;
			}
		}
	}
	if (!mnt || (!w.n && !list)) {
		fprintf(stderr, "usage: fmfs %s MOUNTPOINT (PATH... | --list "
			"FILE)%s\n", verb, strcmp(verb, "evict") ? " [--wait]" :
			"");
		rc = EXIT_USAGE;
		goto out_free_paths;
	}
	if ((rc = ctl_path_of(verb, mnt, sock, sizeof(sock), real)))
		goto out_free_paths;
	w.sock = sock;
	if (list) {
		FILE *f = strcmp(list, "-") ? fopen(list, "r") : stdin;

		if (!f) {
			fprintf(stderr, "fmfs %s: --list %s: %s\n", verb, list,
				strerror(errno));
			rc = EXIT_USAGE;
			goto out_free_paths;
		}
		while (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			if (!*line)
				continue;
			if (paths_add(&w, &cap, line)) {
				rc = EXIT_FAIL;
				break;
			}
		}
		if (f != stdin)
			fclose(f);
		if (rc)
			goto out_free_paths;
	}
	/* Paths may be absolute, or relative to the current directory. */
	for (size_t i = 0; i < w.n && rc == EXIT_OK; i++) {
		char *rel = mount_relative(real, w.paths[i]);

		if (!rel) {
			fprintf(stderr, "fmfs %s: %s: not a path inside %s\n",
				verb, w.paths[i], real);
			rc = EXIT_USAGE;
			break;
		}
		free(w.paths[i]);
		w.paths[i] = rel;
	}
	if (rc)
		goto out_free_paths;
	nt = w.n < 8 ? w.n : 8;
	for (size_t i = 0; i < nt; i++)
		pthread_create(&t[i], NULL, warm_client_main, &w);
	for (size_t i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	if (w.wait || !strcmp(verb, "evict"))
		printf("%s: %llu files, %llu bytes, %llu errors\n", verb,
		       w.files, w.bytes, w.errors);
	rc = w.errors ? EXIT_FAIL : EXIT_OK;
out_free_paths:
	for (size_t i = 0; i < w.n; i++)
		free(w.paths[i]);
	free(w.paths);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

/* Asks the daemon to upload what is dirty under path and, with wait,
 * to answer once it is in the bucket.  Prints what failed. */
static int flush_request(const char *verb, const char *sock, const char *rel,
			 bool wait, unsigned timeout_s)
{
	char req[PATH_MAX + 64], ans[65536];
	int rc;

	snprintf(req, sizeof(req), "%s %u %s", !strcmp(verb, "umount") ?
		 "drain" : wait ? "flush-wait" : "flush", timeout_s, rel);
	rc = ctl_request(sock, req, NULL, ans, sizeof(ans));
	if (rc) {
		fprintf(stderr, "fmfs %s: cannot reach the daemon: %s\n", verb,
			strerror(-rc));
		return EXIT_FAIL;
	}
	if (!strncmp(ans, "ok", 2))
		return EXIT_OK;
	fprintf(stderr, "fmfs %s: %s", verb, !strncmp(ans, "error ", 6) ?
		ans + 6 : ans);
	return EXIT_FAIL;
}

/* A path inside the mount, relative to its root ("" for the root). */
static int rel_path(const char *verb, const char *real, const char *path,
		    char *out, size_t len)
{
	char p[PATH_MAX];
	size_t rl = strlen(real);

	if (!realpath(path, p)) {
		fprintf(stderr, "fmfs %s: %s: %s\n", verb, path,
			strerror(errno));
		return EXIT_USAGE;
	}
	if (strncmp(p, real, rl) || (p[rl] && p[rl] != '/')) {
		fprintf(stderr, "fmfs %s: %s is not inside %s\n", verb, path,
			real);
		return EXIT_USAGE;
	}
	snprintf(out, len, "%s", p[rl] ? p + rl + 1 : "");
	return EXIT_OK;
}

static int parse_timeout(const char *verb, const char *v, unsigned *out)
{
	char *end;
	unsigned long n = strtoul(v, &end, 10);

	if (*end || end == v || n > 86400) {
		fprintf(stderr, "fmfs %s: --timeout '%s' is not a number of "
			"seconds\n", verb, v);
		return EXIT_USAGE;
	}
	*out = (unsigned)n;
	return EXIT_OK;
}

static int cmd_flush(int argc, char **argv)
{
	char sock[256], real[PATH_MAX], rel[PATH_MAX];
	const char *mnt = NULL, *path = NULL;
	unsigned timeout_s = 3600;
	bool wait = false;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--wait")) {
			wait = true;
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (parse_timeout("flush", argv[++i], &timeout_s))
				return EXIT_USAGE;
		} else if (argv[i][0] != '-' && !mnt) {
			mnt = argv[i];
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			mnt = NULL;
			break;
		}
	}
	if (!mnt) {
		fprintf(stderr, "usage: fmfs flush MOUNTPOINT [PATH] [--wait] "
			"[--timeout SECONDS]\n");
		return EXIT_USAGE;
	}
	rc = ctl_path_of("flush", mnt, sock, sizeof(sock), real);
	if (!rc)
		rc = rel_path("flush", real, path ? path : real, rel,
			      sizeof(rel));
	if (!rc)
		rc = flush_request("flush", sock, rel, wait, timeout_s);
	return rc;
}

static int cmd_umount(int argc, char **argv)
{
	char sock[256], real[PATH_MAX];
	unsigned timeout_s = 600;
	const char *mnt = NULL;
	bool undrained = false;
	struct stat st;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (parse_timeout("umount", argv[++i], &timeout_s))
				return EXIT_USAGE;
		} else if (!mnt && argv[i][0] != '-') {
			mnt = argv[i];
		} else {
			mnt = NULL;
			break;
		}
	}
	if (!mnt) {
		fprintf(stderr, "usage: fmfs umount MOUNTPOINT [--timeout "
			"SECONDS]\n");
		return EXIT_USAGE;
	}
	rc = ctl_path_of("umount", mnt, sock, sizeof(sock), real);
	if (rc && errno == ENOTCONN) {
		/* The daemon died (kill -9): realpath fails on the dead
		 * mount, but it must still be unmounted. */
		if (mnt[0] == '/')
			snprintf(real, sizeof(real), "%s", mnt);
		else if (getcwd(real, sizeof(real)))
			snprintf(real + strlen(real), sizeof(real) - strlen(real),
				 "/%s", mnt);
	}
	if (rc && !is_mounted(real))
		return rc;
	/* Drain first: what cannot be uploaded is reported, and kept. */
	if (!rc && flush_request("umount", sock, "", true, timeout_s)) {
		fprintf(stderr, "fmfs umount: the files above are not in the "
			"bucket yet; they stay in the cache dir and are "
			"uploaded when it is mounted again\n");
		undrained = true;
	}
	if (umount2(real, 0) && errno != EINVAL) {
		/* Not root: fusermount3 does it for the user. */
		pid_t pid = fork();
		int status;

		if (pid == 0) {
			execlp("fusermount3", "fusermount3", "-u", real,
			       (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &status, 0) < 0 ||
		    !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "fmfs umount: could not unmount %s "
				"(busy? close the files open there)\n", real);
			return EXIT_FAIL;
		}
	}
	/* Wait for the daemon to finish: it removes its socket last. */
	for (int i = 0; !rc && stat(sock, &st) == 0; i++) {
		if (i == 600) {
			fprintf(stderr, "fmfs umount: %s is unmounted but its "
				"daemon has not exited after 60 s\n", real);
			return EXIT_FAIL;
		}
		usleep(100 * 1000);
	}
	return undrained ? EXIT_FAIL : EXIT_OK;
}

int cmd_fs(const char *verb, int argc, char **argv)
{
	if (!strcmp(verb, "mount"))
		return cmd_mount(argc, argv);
	if (!strcmp(verb, "umount") || !strcmp(verb, "unmount"))
		return cmd_umount(argc, argv);
	if (!strcmp(verb, "status"))
		return cmd_status(argc, argv);
	if (!strcmp(verb, "flush"))
		return cmd_flush(argc, argv);
	if (!strcmp(verb, "prefetch") || !strcmp(verb, "evict"))
		return cmd_warm(verb, argc, argv);
	return -1;
}
