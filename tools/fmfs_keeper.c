/* SPDX-License-Identifier: MIT */
/*
 * fmfs_keeper.c - the keeper of a mount made with --keeper
 * (docs/keeper.md): a small process between `fmfs mount` and the daemon
 * that serves the mount.  It forks the daemon, takes a copy of the
 * mount's /dev/fuse descriptor from it (SCM_RIGHTS), and waits.  While a
 * process holds that descriptor the kernel keeps the mount connected, so
 * when the daemon dies (kill -9, the OOM killer, a crash) the programs
 * using the mount wait instead of getting ENOTCONN, and the keeper forks
 * a new daemon that takes the descriptor over (fs/takeover.c).  A daemon
 * that exits (an unmount, a failure) ends the keeper with its status.
 * Where a takeover cannot be trusted the keeper lets the descriptor go,
 * and the mount ends as it would without a keeper.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fmfs.h"
#include "fs/fs.h"
#include "tools.h"

/* Why the daemon pid ended, for the log and `fmfs status`. */
static void cause_of(int st, char *out, size_t n)
{
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		snprintf(out, n, "killed by SIGKILL (kill -9 or the OOM "
			 "killer)");
	else if (WIFSIGNALED(st))
		snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(out, n, "exited with status %d", WEXITSTATUS(st));
}

/* The keeper is the last process the OOM killer should pick: it is
 * small, and the mount ends with it.  Only root may lower the score;
 * elsewhere this does nothing. */
static void oom_protect(void)
{
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (write(fd, "-1000", 5) < 0) {
		/* not root: the default score */
	}
	close(fd);
}

#define TK_ENV "FMFS_TAKEOVER"

/* In the keeper's child for `fmfs restart`: the mount's command line
 * run again by exe (a new binary after an upgrade), told by TK_ENV of
 * the takeover region, /dev/fuse and the paths `fmfs mount` resolved
 * and sizes `fmfs mount` worked out (the mountpoint cannot be looked at
 * now: nothing serves it).  Returns
 * only when exe cannot be run: the caller serves with this binary. */
static void run_again(struct mount_opts *o, int fuse_fd, const char *exe)
{
	char env[3 * PATH_MAX + 64];
	char **args = calloc((size_t)o->argc + 2, sizeof(*args));

	if (!exe[0] || !args || fuse_fd < 0)
		goto fail;
	snprintf(env, sizeof(env), "%d\n%d\n%llu\n%s\n%s\n%s", o->tk_fd,
		 fuse_fd, (unsigned long long)o->cache_size, o->mnt_real,
		 o->cache_real, o->ctl_path);
	if (setenv(TK_ENV, env, 1) || fcntl(fuse_fd, F_SETFD, 0) ||
	    fcntl(o->tk_fd, F_SETFD, 0))
		goto fail;
	args[0] = (char *)exe;
	for (int i = 0; i < o->argc; i++)
		args[i + 1] = o->argv[i];
	if (o->cwd[0] && chdir(o->cwd)) {
		/* relative paths in the options would not resolve */
	}
	execv(exe, args);
fail:
	fprintf(stderr, "fmfs: keeper: cannot run %s again (%s): the new "
		"daemon is this binary\n", exe[0] ? exe : "the binary",
		strerror(errno));
	unsetenv(TK_ENV);
	free(args);
	if (chdir("/")) {
		/* as the daemon: relative paths only would suffer */
	}
}

int fmfs_keeper_daemon(int argc, char **argv,
		       int (*serve)(struct mount_opts *, int, char *, size_t))
{
	const char *env = getenv(TK_ENV);
	struct mount_opts o;
	char msg[1024], *s, *save = NULL, *f[6];
	int rc, i = 0;

	if (!env)
		return -1;
	s = strdup(env);
	unsetenv(TK_ENV);
	for (char *t = s ? strtok_r(s, "\n", &save) : NULL; t && i < 6;
	     t = strtok_r(NULL, "\n", &save))
		f[i++] = t;
	memset(&o, 0, sizeof(o));
	if (i != 6 || fmfs_parse_mount_opts(argc, argv, &o)) {
		fprintf(stderr, "fmfs: a daemon run again by its keeper could "
			"not read what it was given (" TK_ENV ")\n");
		free(s);
		return EXIT_TAKEOVER_REFUSED;
	}
	o.tk_fd = atoi(f[0]);
	o.tk_fuse_fd = atoi(f[1]);
	o.cache_size = strtoull(f[2], NULL, 10);
	snprintf(o.mnt_real, sizeof(o.mnt_real), "%s", f[3]);
	snprintf(o.cache_real, sizeof(o.cache_real), "%s", f[4]);
	snprintf(o.ctl_path, sizeof(o.ctl_path), "%s", f[5]);
	free(s);
	if (chdir("/")) {
		/* as the daemon: relative paths only would suffer */
	}
	rc = serve(&o, -1, msg, sizeof(msg));
	if (rc && rc != EXIT_TAKEOVER_REFUSED && rc != FS_TK_EXIT_RESTART)
		fprintf(stderr, "fmfs: %s\n", msg);
	return rc;
}

int fmfs_keeper_run(struct mount_opts *o, int ready_fd,
		    int (*serve)(struct mount_opts *, int, char *, size_t))
{
	char msg[1024], cause[128], why[256], exe[PATH_MAX];
	int fuse_fd = -1, st, rc;
	bool restart = false;
	ssize_t el;
	unsigned gen;

	/* The binary `fmfs restart` runs: this path, whatever it holds
	 * then (an upgrade replaces the file). */
	el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[el > 0 ? el : 0] = '\0';

	o->tk_fd = fs_tk_region_create();
	if (o->tk_fd < 0) {
		fprintf(stderr, "fmfs: keeper: cannot make the takeover region "
			"(%s): serving without a keeper\n", strerror(-o->tk_fd));
		o->tk_fd = -1;
		return serve(o, ready_fd, msg, sizeof(msg));
	}
	oom_protect();
	for (gen = 0;; gen++) {
		int sv[2];
		pid_t pid;

		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
			fprintf(stderr, "fmfs: keeper: socketpair: %s\n",
				strerror(errno));
			return EXIT_FAIL;
		}
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "fmfs: keeper: fork: %s\n",
				strerror(errno));
			return EXIT_FAIL;
		}
		if (pid == 0) {
			close(sv[0]);
			o->keeper_sock = sv[1];
			o->tk_fuse_fd = fuse_fd;
			if (restart)
				run_again(o, fuse_fd, exe); /* on failure: */
			rc = serve(o, gen ? -1 : ready_fd, msg, sizeof(msg));
			if (rc && rc != EXIT_TAKEOVER_REFUSED &&
			    rc != FS_TK_EXIT_RESTART) {
				char line[1100];
				int n = snprintf(line, sizeof(line),
						 "error %s\n", msg);

				fprintf(stderr, "fmfs: %s\n", msg);
				if (!gen && write(ready_fd, line, (size_t)n) < 0) {
					/* the parent is gone */
				}
			}
			fflush(stderr);
			_exit(rc);
		}
		close(sv[1]);
		if (!gen && ready_fd >= 0)
			close(ready_fd); /* `fmfs mount` sees the daemon's */
		if (fuse_fd < 0) {
			rc = fs_tk_recv_fd(sv[0]);
			if (rc >= 0)
				fuse_fd = rc;
		}
		close(sv[0]);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		restart = WIFEXITED(st) && WEXITSTATUS(st) == FS_TK_EXIT_RESTART;
		if (WIFEXITED(st) && WEXITSTATUS(st) != EXIT_TAKEOVER_REFUSED &&
		    !restart)
			break; /* unmounted, or failed: the daemon said why */
		cause_of(st, cause, sizeof(cause));
		if (restart)
			snprintf(cause, sizeof(cause), "asked by fmfs restart: %.96s",
				 exe[0] ? exe : "(the binary is not known)");
		if (WIFEXITED(st) && !restart) {
			fs_tk_region_refused(o->tk_fd, why, sizeof(why));
		} else if (fuse_fd < 0) {
			snprintf(why, sizeof(why), "it died before the mount "
				 "was made");
		} else if (!fs_tk_region_begin(o->tk_fd, cause, why,
					       sizeof(why))) {
			fprintf(stderr, "fmfs: keeper: the daemon (pid %d) %s%s; "
				"starting a new one to take the mount over "
				"(takeover %u)\n", (int)pid, restart ? "stopped, " :
				"was ", cause, gen + 1);
			unlink(o->ctl_path); /* the dead daemon's socket */
			continue;
		}
		fprintf(stderr, "fmfs: keeper: the daemon (pid %d) %s; no "
			"takeover: %s; the mount ends (\"Transport endpoint is "
			"not connected\") as it would without a keeper\n",
			(int)pid, WIFEXITED(st) ? "refused to take the mount "
			"over" : cause, why);
		if (fuse_fd >= 0)
			close(fuse_fd);
		return EXIT_FAIL;
	}
	if (fuse_fd >= 0)
		close(fuse_fd);
	return WEXITSTATUS(st);
}
