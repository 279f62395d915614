/* SPDX-License-Identifier: MIT */
/*
 * posix_sweep.c - crash debris of the file:// backend: temporary files
 * under .fmfs/tmp and upload directories under .fmfs/uploads whose owner
 * is gone (its flock can be taken), swept at open and at most once a
 * minute at uploads (the design is at the top of posix.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "posix_int.h"

/* ---- crash debris: sweeping .fmfs/tmp and .fmfs/uploads ---- */

/* The newest mtime of dfd and, for a directory, of what is in it. */
static time_t newest_mtime(int fd, const struct stat *sb)
{
	time_t t = sb->st_mtime;
	struct dirent *de;
	struct stat e;
	DIR *d;
	int dup_fd;

	if (!S_ISDIR(sb->st_mode))
		return t;
	dup_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
		if (dup_fd >= 0)
			close(dup_fd);
		return time(NULL); /* cannot tell: as if just touched */
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    !fstatat(dirfd(d), de->d_name, &e, AT_SYMLINK_NOFOLLOW) &&
		    e.st_mtime > t)
			t = e.st_mtime;
	closedir(d);
	return t;
}

/* Removes sub/name (a temporary file, or an upload directory and its
 * files) if its owner is provably gone: we can take its lock and the
 * name is still the file we locked (px_own()); names of an fmfs that did
 * not lock, only when untouched for LEGACY_DEBRIS_AGE_S as well. */
static void sweep_one(struct posix_store *p, const char *sub,
		      const char *name, bool is_dir)
{
	char path[128 + NAME_MAX];
	struct stat sb;
	int fd;

	if (snprintf(path, sizeof(path), RESERVED "/%s/%s", sub, name) >=
	    (int)sizeof(path))
		return;
	fd = openat(p->rootfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC | (is_dir ? O_DIRECTORY : 0));
	if (fd < 0)
		return;
	if (fstat(fd, &sb) || (is_dir ? !S_ISDIR(sb.st_mode) :
			       !S_ISREG(sb.st_mode)))
		goto out_close;
	if (flock(fd, LOCK_EX | LOCK_NB) || px_own(p->rootfd, path, fd))
		goto out_close; /* live, or no flock here: keep */
	if (strncmp(name, LOCKED_PREFIX, sizeof(LOCKED_PREFIX) - 1) &&
	    time(NULL) - newest_mtime(fd, &sb) < LEGACY_DEBRIS_AGE_S)
		goto out_close;
	if (is_dir)
		px_upload_remove(p, name);
	else
		unlinkat(p->rootfd, path, 0);
out_close:
	close(fd); /* the lock goes with it, after the name */
}

static void sweep_sub(struct posix_store *p, const char *sub, bool is_dir)
{
	char rel[64];
	struct dirent *de;
	DIR *d;
	int fd;

	snprintf(rel, sizeof(rel), RESERVED "/%s", sub);
	fd = openat(p->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			sweep_one(p, sub, de->d_name, is_dir);
	closedir(d);
}

/* Removes the crash debris of dead processes (file header).  Errors are
 * ignored: debris left now is swept at the next chance. */
void px_sweep(struct posix_store *p)
{
	bool no = false;

	if (!atomic_compare_exchange_strong(&p->sweeping, &no, true))
		return; /* another thread of this handle is at it */
	atomic_store(&p->last_sweep_ms, util_now_ms());
	sweep_sub(p, "tmp", false);
	sweep_sub(p, "uploads", true);
	atomic_store(&p->sweeping, false);
}

/* At an upload: a long-lived handle (a mount) also cleans after
 * processes that die beside it, at most once a SWEEP_INTERVAL_MS. */
void px_sweep_if_due(struct posix_store *p)
{
	if (util_now_ms() - atomic_load(&p->last_sweep_ms) >=
	    SWEEP_INTERVAL_MS)
		px_sweep(p);
}
