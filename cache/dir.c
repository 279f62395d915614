/* SPDX-License-Identifier: MIT */
/*
 * dir.c - which names a cache dir holds.  A mount given a directory of
 * someone else's files would mix its own with them, tighten their modes
 * (open.c, dir_tighten) and, when the directory is the file:// store's,
 * show its index and log as objects: cache_dir_foreign() lets the mount
 * refuse such a directory before it writes anything there.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache.h"

/* What a cache dir holds at its top: the names cache.c, index.c, wb*.c
 * and the mount (tools/fmfs_mount.c: lock, fmfs.log) create, and the
 * journals SQLite makes beside a database. */
static bool ours(const char *n)
{
	static const char *const fixed[] = {
		"objects", "dirty", "lost+found", "index.lock", "lock",
		"fmfs.log",
	};
	static const char *const dbs[] = { "index.sqlite", "writeback.sqlite" };

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (!strcmp(n, fixed[i]))
			return true;
	/* index.sqlite and writeback.sqlite, their -wal, -shm and -journal,
	 * and a damaged one moved aside: by index.c (index.sqlite.bad-TIME),
	 * or by hand under any name the person chose, as the messages ask
	 * (writeback.sqlite.bad) */
	for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++)
		if (!strncmp(n, dbs[i], strlen(dbs[i])))
			return true;
	return false;
}

int cache_dir_foreign(const char *dir, char *other, size_t other_len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (!rc && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!ours(e->d_name)) {
			snprintf(other, other_len, "%s", e->d_name);
			rc = 1;
		}
	}
	closedir(d);
	return rc;
}
