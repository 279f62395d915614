/* SPDX-License-Identifier: MIT */
/*
 * fmfs_cachedir.c - the checks of a mount's cache directory before it is
 * used, and the clean-up after a mount that failed: what
 * tools/fmfs_mount.c (prepare_cache_dir) calls.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "util/util.h"
#include "fmfs.h"

bool fmfs_dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool empty = true;

	if (!d)
		return false;
	while (empty && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

static int remove_one(const char *path, const struct stat *sb, int type,
		      struct FTW *ftw)
{
	(void)sb;
	if (ftw->level == 0)
		return 0; /* the top: the caller decides */
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0; /* keep going: remove what can be */
}

/* After a failed mount: removes what the mount (prepare_cache_dir in
 * fmfs_mount.c) and the cache made (the index, the lock, the log) in a
 * cache dir this mount created or found empty, and the directories it
 * created above it.  Never touches a cache dir that held anything
 * before. */
void fmfs_cache_undo(const char *cache_dir, const char *made,
		     bool was_empty)
{
	char dir[PATH_MAX];
	size_t top = strlen(made);

	if (!cache_dir || (!top && !was_empty))
		return;
	/* Depth first, not across symlinks or into other filesystems. */
	nftw(cache_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (!top)
		return;
	snprintf(dir, sizeof(dir), "%s", cache_dir);
	while (strlen(dir) >= top) {
		char *slash;

		if (rmdir(dir))
			break;
		slash = strrchr(dir, '/');
		if (!slash)
			break;
		while (slash > dir && slash[-1] == '/')
			slash--;
		*slash = '\0';
	}
}

/* Refuses a cache dir the mount cannot use safely, before anything is
 * written there: inside the mountpoint (the daemon would open its own
 * cache through its own mount and hang), the file:// store's directory
 * or inside or around it (its files would show as objects), or one
 * holding files fmfs did not make (their modes would be changed and its
 * own mixed in). */
int fmfs_cache_place_check(const char *cache_dir, const char *mnt_real,
			   const char *url)
{
	char cache[PATH_MAX], store[PATH_MAX], other[256];
	int rc = util_path_resolve(cache_dir, cache, sizeof(cache));

	if (rc) {
		fprintf(stderr, "fmfs mount: cache directory %s is not usable:"
			" %s (choose another with --cache-dir)\n", cache_dir,
			strerror(-rc));
		return EXIT_USAGE;
	}
	if (util_path_under(cache, mnt_real)) {
		fprintf(stderr, "fmfs mount: cache directory %s is inside the "
			"mountpoint %s: the mount would read its own cache "
			"through itself; choose a --cache-dir outside it\n",
			cache_dir, mnt_real);
		return EXIT_USAGE;
	}
	if (!strncmp(url, "file://", 7) &&
	    !util_path_resolve(url + 7, store, sizeof(store)) &&
	    (util_path_under(cache, store) || util_path_under(store, cache))) {
		fprintf(stderr, "fmfs mount: cache directory %s and the store's"
			" directory %s are %s: the cache's files would show as "
			"objects; choose a --cache-dir outside the store\n",
			cache_dir, store, strcmp(cache, store) ?
			"one inside the other" : "the same");
		return EXIT_USAGE;
	}
	rc = cache_dir_foreign(cache, other, sizeof(other));
	if (rc) {
		if (rc == 1)
			fprintf(stderr, "fmfs mount: cache directory %s holds "
				"files fmfs did not make ('%s'), whose modes it "
				"would change; give an empty directory, or the "
				"cache dir of an earlier mount, as --cache-dir\n",
				cache_dir, other);
		else
			fprintf(stderr, "fmfs mount: cache directory %s cannot "
				"be read: %s (choose another with --cache-dir)\n",
				cache_dir, strerror(-rc));
		return EXIT_USAGE;
	}
	return EXIT_OK;
}
