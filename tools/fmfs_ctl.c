/* SPDX-License-Identifier: MIT */
/*
 * fmfs_ctl.c - `fmfs umount / flush / status / prefetch / evict`: the
 * family of verbs that talk to a running mount's daemon (and restart,
 * which has its keeper replace it: docs/keeper.md), sharing the
 * helpers that find its control socket and send it requests; one
 * cmd_<verb>() each.
 *
 * The daemon `fmfs mount` started (fmfs_mount.c) publishes its socket's
 * path in an xattr on the mount's root (FS_CTL_XATTR); each verb reads it
 * and sends request lines there (fs/ctl.c answers them): flush and
 * umount have the daemon upload what is dirty (umount then unmounts and
 * waits for the daemon to exit), status prints what it answers, prefetch
 * and evict send their paths from several threads at once.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fmfs.h"

int fmfs_unmount(const char *real, bool lazy)
{
	pid_t pid;
	int status;

	if (!umount2(real, lazy ? MNT_DETACH : 0) || errno == EINVAL)
		return 0; /* EINVAL: not mounted (any more) */
	/* Not root: fusermount3 does it for the user. */
	pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", real,
		       (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		return -1;
	return 0;
}

/* This user may not reach mnt, or its control socket (under a 0700
 * directory of the user who mounted it, fmfs_mount.c): says so, whose
 * mount it is and what to do, instead of "does not answer".  Returns
 * EXIT_AUTH. */
static int ctl_denied(const char *verb, const char *mnt, const char *sock)
{
	struct fmfs_mount_info mi = { .owner_uid = -1 };
	char abs[PATH_MAX], who[128];

	if (!fmfs_abs_path(mnt, abs, sizeof(abs)))
		fmfs_mount_find(abs, &mi);
	fmfs_owner_str(mi.owner_uid, who, sizeof(who));
	fprintf(stderr, "fmfs %s: permission denied on %s%s: %s is the fmfs "
		"mount of %s; run fmfs %s as %s\n", verb,
		sock ? "the control socket " : "", sock ? sock : mnt, mnt, who,
		verb, mi.owner_uid == 0 ? "root" : "that user or as root");
	errno = EACCES;
	return EXIT_AUTH;
}

/* The daemon behind sock did not take a connection (err, a negative
 * errno): says why.  Returns an exit code. */
static int ctl_unreachable(const char *verb, const char *real,
			   const char *sock, int err)
{
	if (err == -EACCES || err == -EPERM)
		return ctl_denied(verb, real, sock);
	if (err == -ECONNRESET) {
		fprintf(stderr, "fmfs %s: the daemon of %s went away before it "
			"answered (it exited or was killed); files not yet "
			"uploaded stay in its cache dir and are uploaded when "
			"it is mounted again (fmfs umount %s, then fmfs mount)\n",
			verb, real, real);
		return EXIT_FAIL;
	}
	fprintf(stderr, "fmfs %s: the daemon of %s does not answer on %s: "
		"%s%s\n", verb, real, sock, strerror(-err),
		err == -ECONNREFUSED || err == -ENOENT ? " (it has exited? "
		"fmfs umount clears its mount)" : "");
	return EXIT_FAIL;
}

static int ctl_path_of(const char *verb, const char *mnt, char *path,
		       size_t len, char *real)
{
	ssize_t n;

	if (!realpath(mnt, real)) {
		int e = fmfs_dead_errno(errno);

		real[0] = '\0';
		if (e == EACCES || e == EPERM)
			return ctl_denied(verb, mnt, NULL);
		if (!(e == ENOTCONN && !strcmp(verb, "umount")))
			fprintf(stderr, "fmfs %s: %s: %s%s\n", verb, mnt,
				strerror(e), e == ENOTCONN ? " (the fmfs daemon "
				"is gone; run fmfs umount)" : "");
		errno = e;
		return e == ENOTCONN ? EXIT_FAIL : EXIT_USAGE;
	}
	n = getxattr(real, FS_CTL_XATTR, path, len - 1);
	if (n <= 0) {
		int e = n < 0 ? fmfs_dead_errno(errno) : ENODATA;

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

/* Whether nobody listens on the socket at path (ECONNREFUSED). */
static bool sock_dead(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* Non-blocking: a live daemon that is stopped, its backlog full,
	 * answers EAGAIN, and counts as alive. */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);
	bool dead;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	dead = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	       errno == ECONNREFUSED;
	close(fd);
	return dead;
}

const char *fmfs_rundir(void)
{
	const char *d = getuid() == 0 ? "/run/fmfs" : getenv("XDG_RUNTIME_DIR");

	return d && !util_mkdir_p(d, 0700) ? d : "/tmp";
}

void fmfs_ctl_sweep(const char *rundir)
{
	enum { MAX = 256 };
	char (*path)[300] = malloc(MAX * sizeof(*path));
	ino_t *ino = malloc(MAX * sizeof(*ino));
	size_t n = 0;
	struct dirent *de;
	struct stat st;
	DIR *d = path && ino ? opendir(rundir) : NULL;

	if (!d) {
		free(path);
		free(ino);
		return;
	}
	while ((de = readdir(d)) && n < MAX) {
		size_t l = strlen(de->d_name);

		if (strncmp(de->d_name, "fmfs-", 5) || l < 10 ||
		    strcmp(de->d_name + l - 5, ".sock"))
			continue;
		snprintf(path[n], sizeof(path[n]), "%s/%s", rundir,
			 de->d_name);
		if (!lstat(path[n], &st) && S_ISSOCK(st.st_mode) &&
		    st.st_uid == getuid() && sock_dead(path[n]))
			ino[n++] = st.st_ino;
	}
	closedir(d);
	/* A daemon between its bind and its listen refuses too, for a
	 * moment: only what still refuses a while later is dead. */
	if (n)
		usleep(200 * 1000);
	for (size_t i = 0; i < n; i++) /* the same file, still refusing */
		if (!lstat(path[i], &st) && st.st_ino == ino[i] &&
		    sock_dead(path[i]))
			unlink(path[i]);
	free(path);
	free(ino);
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
	n = n < 0 ? -errno : 0;
	close(fd);
	/* An answer cut off (reset) or never given (closed at once): the
	 * daemon died while it worked on the request. */
	if (!n && buf && len && !at)
		n = -ECONNRESET;
	return (int)n;
}

/* -h or --help anywhere: the verb's usage on stdout. */
static bool help_asked(int argc, char **argv, const char *usage)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return true;
		}
	return false;
}

#define STATUS_USAGE "usage: fmfs status MOUNTPOINT [--json]\n"
#define METRICS_USAGE "usage: fmfs metrics MOUNTPOINT\n"
#define FLUSH_USAGE "usage: fmfs flush MOUNTPOINT [PATH] [--wait] " \
		    "[--timeout SECONDS]\n"
#define UMOUNT_USAGE "usage: fmfs umount MOUNTPOINT [--timeout SECONDS]\n"
#define RESTART_USAGE "usage: fmfs restart MOUNTPOINT [--timeout SECONDS]\n"

/* An argument a control verb does not take, named. */
static void bad_arg(const char *verb, const char *arg)
{
	tools_arg_error(verb, arg[0] == '-' && arg[1] ? "unknown option (or "
			"one without its value)" : "unexpected argument", arg);
}

int cmd_status(int argc, char **argv)
{
	char sock[256], real[PATH_MAX];
	bool json = false;
	const char *mnt = NULL;
	int rc;

	if (help_asked(argc, argv, STATUS_USAGE))
		return EXIT_OK;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!mnt && argv[i][0] != '-')
			mnt = argv[i];
		else {
			bad_arg("status", argv[i]);
			fputs(STATUS_USAGE, stderr);
			return EXIT_USAGE;
		}
	}
	if (!mnt) {
		fputs(STATUS_USAGE, stderr);
		return EXIT_USAGE;
	}
	if ((rc = ctl_path_of("status", mnt, sock, sizeof(sock), real)))
		return rc;
	rc = ctl_request(sock, json ? "status-json" : "status", stdout, NULL,
			 0);
	return rc ? ctl_unreachable("status", real, sock, rc) : EXIT_OK;
}

/* `fmfs metrics MOUNTPOINT`: what --metrics serves, on stdout. */
int cmd_metrics(int argc, char **argv)
{
	char sock[256], real[PATH_MAX];
	int rc;

	if (help_asked(argc, argv, METRICS_USAGE))
		return EXIT_OK;
	if (argc != 2 || argv[1][0] == '-') {
		if (argc > 1)
			bad_arg("metrics", argv[argc > 2 && argv[1][0] != '-' ?
					   2 : 1]);
		fputs(METRICS_USAGE, stderr);
		return EXIT_USAGE;
	}
	if ((rc = ctl_path_of("metrics", argv[1], sock, sizeof(sock), real)))
		return rc;
	rc = ctl_request(sock, "metrics", stdout, NULL, 0);
	return rc ? ctl_unreachable("metrics", real, sock, rc) : EXIT_OK;
}

struct warm_client {
	const char *sock, *verb;
	const char *mnt;     /* the mount's real path, for messages */
	char **paths;        /* relative to the mount's root ("": itself) */
	size_t n, next;
	bool wait;
	pthread_mutex_t lock;
	unsigned long long files, bytes, errors;
	int conn_err;        /* the first connect error: all stop */
};

static void *warm_client_main(void *arg)
{
	struct warm_client *w = arg;
	char req[PATH_MAX + 32], ans[1024];

	for (;;) {
		unsigned long long f = 0, b = 0;
		size_t i;
		int rc;

		pthread_mutex_lock(&w->lock);
		i = w->next++;
		pthread_mutex_unlock(&w->lock);
		if (i >= w->n)
			return NULL;
		snprintf(req, sizeof(req), "%s%s %s", w->verb,
			 w->wait ? "-wait" : "", w->paths[i]);
		if (!strcmp(w->verb, "evict"))
			snprintf(req, sizeof(req), "evict %s", w->paths[i]);
		rc = ctl_request(w->sock, req, NULL, ans, sizeof(ans));
		pthread_mutex_lock(&w->lock);
		if (rc) {
			/* The same for every path: said once, by warm(). */
			if (!w->conn_err)
				w->conn_err = rc;
			w->next = w->n;
		} else if (!strncmp(ans, "ok", 2)) {
			sscanf(ans, "ok %llu files %llu bytes", &f, &b);
			w->files += f;
			w->bytes += b;
		} else {
			w->errors++;
			fprintf(stderr, "fmfs %s: %s%s%s: %s", w->verb, w->mnt,
				w->paths[i][0] ? "/" : "", w->paths[i],
				!strncmp(ans, "error ", 6) ?
				ans + 6 : ans[0] ? ans : "no answer\n");
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

/* Turns a path given by the user into one relative to the mount root;
 * NULL with errno set when it does not exist (ENOENT ...), is outside
 * the mount (EXDEV) or memory ran out. */
static char *mount_relative(const char *mnt_real, const char *p)
{
	char real[PATH_MAX];
	size_t ml = strlen(mnt_real);

	if (!realpath(p, real))
		return NULL;
	if (strncmp(real, mnt_real, ml) || (real[ml] && real[ml] != '/')) {
		errno = EXDEV;
		return NULL;
	}
	return strdup(real[ml] ? real + ml + 1 : "");
}

/* prefetch and evict: the paths, from the command line or a --list
 * file, go to the daemon from up to 8 threads. */
static int warm(const char *verb, int argc, char **argv)
{
	struct warm_client w = { .verb = verb };
	char sock[256], real[PATH_MAX], line[PATH_MAX];
	const char *mnt = NULL, *list = NULL;
	size_t cap = 0;
	pthread_t t[8];
	size_t nt;
	int rc = EXIT_OK;

	if (help_asked(argc, argv, strcmp(verb, "evict") ?
		       "usage: fmfs prefetch MOUNTPOINT (PATH... | --list FILE) "
		       "[--wait]\n" : "usage: fmfs evict MOUNTPOINT (PATH... | "
		       "--list FILE)\n"))
		return EXIT_OK;
	pthread_mutex_init(&w.lock, NULL);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--wait")) {
			w.wait = true;
		} else if (!strcmp(a, "--list") && i + 1 < argc) {
			list = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			bad_arg(verb, a);
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
	w.mnt = real;
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

		if (!rel && errno == EXDEV) {
			fprintf(stderr, "fmfs %s: %s: not a path inside %s\n",
				verb, w.paths[i], real);
			rc = EXIT_USAGE;
			break;
		}
		if (!rel) {
			fprintf(stderr, "fmfs %s: %s%s: %s\n", verb,
				w.paths[i], errno == ENOENT ? " does not "
				"exist" : "", strerror(errno));
			rc = errno == ENOMEM ? EXIT_FAIL : EXIT_USAGE;
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
	if (w.conn_err) {
		rc = ctl_unreachable(verb, real, sock, w.conn_err);
		goto out_free_paths;
	}
	if (!strcmp(verb, "evict"))
		printf("evict: %llu files, %llu bytes dropped from the cache, "
		       "%llu errors\n", w.files, w.bytes, w.errors);
	else if (w.wait)
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

int cmd_prefetch(int argc, char **argv)
{
	return warm("prefetch", argc, argv);
}

int cmd_evict(int argc, char **argv)
{
	return warm("evict", argc, argv);
}

/* Asks the daemon to upload what is dirty under path and, with wait,
 * to answer once it is in the bucket.  Prints what failed. */
static int flush_request(const char *verb, const char *real,
			 const char *sock, const char *rel, bool wait,
			 unsigned timeout_s)
{
	char req[PATH_MAX + 64], ans[65536];
	int rc;

	snprintf(req, sizeof(req), "%s %u %s", !strcmp(verb, "umount") ?
		 "drain" : wait ? "flush-wait" : "flush", timeout_s, rel);
	rc = ctl_request(sock, req, NULL, ans, sizeof(ans));
	if (rc)
		return ctl_unreachable(verb, real, sock, rc);
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

	if (*v < '0' || *v > '9' || *end || n > 86400) {
		fprintf(stderr, "fmfs %s: --timeout '%s': give a whole number "
			"of seconds from 0 to 86400\n", verb, v);
		return EXIT_USAGE;
	}
	*out = (unsigned)n;
	return EXIT_OK;
}

int cmd_flush(int argc, char **argv)
{
	char sock[256], real[PATH_MAX], rel[PATH_MAX];
	const char *mnt = NULL, *path = NULL;
	unsigned timeout_s = 3600;
	bool wait = false;
	int rc;

	if (help_asked(argc, argv, FLUSH_USAGE))
		return EXIT_OK;
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
			bad_arg("flush", argv[i]);
			mnt = NULL;
			break;
		}
	}
	if (!mnt) {
		fputs(FLUSH_USAGE, stderr);
		return EXIT_USAGE;
	}
	rc = ctl_path_of("flush", mnt, sock, sizeof(sock), real);
	if (!rc)
		rc = rel_path("flush", real, path ? path : real, rel,
			      sizeof(rel));
	if (!rc)
		rc = flush_request("flush", real, sock, rel, wait, timeout_s);
	return rc;
}

int cmd_umount(int argc, char **argv)
{
	char sock[256], real[PATH_MAX];
	unsigned timeout_s = 600;
	const char *mnt = NULL;
	bool undrained = false;
	struct stat st;
	int rc;

	if (help_asked(argc, argv, UMOUNT_USAGE))
		return EXIT_OK;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (parse_timeout("umount", argv[++i], &timeout_s))
				return EXIT_USAGE;
		} else if (!mnt && argv[i][0] != '-') {
			mnt = argv[i];
		} else {
			bad_arg("umount", argv[i]);
			mnt = NULL;
			break;
		}
	}
	if (!mnt) {
		fputs(UMOUNT_USAGE, stderr);
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
	if (rc && !fmfs_is_mounted(real))
		return rc;
	/* Drain first: what cannot be uploaded is reported, and kept. */
	if (!rc && (rc = flush_request("umount", real, sock, "", true,
				       timeout_s))) {
		if (rc == EXIT_AUTH)
			return rc; /* not this user's mount: said why */
		fprintf(stderr, "fmfs umount: the files above are not in the "
			"bucket yet; they stay in the cache dir, and those "
			"that failed to upload are tried again when it is "
			"mounted again (damaged ones wait for you, as said "
			"above)\n");
		undrained = true;
		rc = EXIT_OK;
	}
	if (fmfs_unmount(real, false)) {
		fprintf(stderr, "fmfs umount: could not unmount %s "
			"(busy? close the files open there)\n", real);
		return EXIT_FAIL;
	}
	if (rc) /* a dead daemon's: its socket stays behind */
		fmfs_ctl_sweep(fmfs_rundir());
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

/* A number in the daemon's status-json answer: -1 if not there. */
static long long status_num(const char *json, const char *name)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", name);
	p = strstr(json, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* `fmfs restart MOUNTPOINT`: the daemon stops without unmounting, its
 * keeper runs the binary again (a new one after an upgrade), and that
 * takes the mount over (docs/keeper.md).  Waits until it serves. */
int cmd_restart(int argc, char **argv)
{
	char sock[256], real[PATH_MAX], ans[8192];
	const char *mnt = NULL;
	unsigned timeout_s = 60;
	long long pid, n, took;
	int rc;

	if (help_asked(argc, argv, RESTART_USAGE))
		return EXIT_OK;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (parse_timeout("restart", argv[++i], &timeout_s))
				return EXIT_USAGE;
		} else if (argv[i][0] != '-' && !mnt) {
			mnt = argv[i];
		} else {
			bad_arg("restart", argv[i]);
			fputs(RESTART_USAGE, stderr);
			return EXIT_USAGE;
		}
	}
	if (!mnt) {
		fputs(RESTART_USAGE, stderr);
		return EXIT_USAGE;
	}
	if ((rc = ctl_path_of("restart", mnt, sock, sizeof(sock), real)))
		return rc;
	rc = ctl_request(sock, "status-json", NULL, ans, sizeof(ans));
	if (rc)
		return ctl_unreachable("restart", real, sock, rc);
	pid = status_num(ans, "daemon_pid");
	n = status_num(ans, "takeovers");
	rc = ctl_request(sock, "restart", NULL, ans, sizeof(ans));
	if (rc)
		return ctl_unreachable("restart", real, sock, rc);
	if (strncmp(ans, "ok", 2)) {
		fprintf(stderr, "fmfs restart: %s: %s", real,
			strncmp(ans, "error ", 6) ? ans : ans + 6);
		return EXIT_FAIL;
	}
	for (unsigned ms = 0; ms < timeout_s * 1000; ms += 50) {
		usleep(50000);
		if (ctl_request(sock, "status-json", NULL, ans, sizeof(ans)) ||
		    status_num(ans, "daemon_pid") == pid ||
		    status_num(ans, "takeovers") <= n ||
		    status_num(ans, "last_takeover_ms") < 0)
			continue; /* not yet, or not serving yet */
		took = status_num(ans, "last_takeover_ms");
		printf("fmfs restart: %s: daemon %lld replaced by %lld, "
		       "serving again after %lld ms\n", real, pid,
		       status_num(ans, "daemon_pid"), took);
		return EXIT_OK;
	}
	fprintf(stderr, "fmfs restart: %s: no new daemon serves the mount "
		"after %u s; see fmfs.log in its cache directory\n", real,
		timeout_s);
	return EXIT_FAIL;
}
