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
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
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

int fmfs_keeper_run(struct mount_opts *o, int ready_fd,
		    int (*serve)(struct mount_opts *, int, char *, size_t))
{
	char msg[1024], cause[128], why[256];
	int fuse_fd = -1, st, rc;
	unsigned gen;

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
			rc = serve(o, gen ? -1 : ready_fd, msg, sizeof(msg));
			if (rc && rc != EXIT_TAKEOVER_REFUSED) {
				char line[1100];
				int n = snprintf(line, sizeof(line),
						 "error %s\n", msg);

				fprintf(stderr, "fmfs: %s\n", msg);
				if (!gen && write(ready_fd, line, (size_t)n) < 0) {
					/* the parent is gone */
				}
			}
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
		if (WIFEXITED(st) && WEXITSTATUS(st) != EXIT_TAKEOVER_REFUSED)
			break; /* unmounted, or failed: the daemon said why */
		cause_of(st, cause, sizeof(cause));
		if (WIFEXITED(st)) {
			fs_tk_region_refused(o->tk_fd, why, sizeof(why));
		} else if (fuse_fd < 0) {
			snprintf(why, sizeof(why), "it died before the mount "
				 "was made");
		} else if (!fs_tk_region_begin(o->tk_fd, cause, why,
					       sizeof(why))) {
			fprintf(stderr, "fmfs: keeper: the daemon (pid %d) was "
				"%s; starting a new one to take the mount over "
				"(takeover %u)\n", (int)pid, cause, gen + 1);
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
