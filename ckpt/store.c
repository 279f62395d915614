/* SPDX-License-Identifier: MIT */
/*
 * store.c - where checkpoints live and how they are found and removed.
 *
 * A directory holds step-NNNNNNNNNN/ (complete: renamed into place once
 * its manifest was written and fsynced), .tmp-step-NNNNNNNNNN/ (being
 * written, or left by a crash) and .fmckpt/ (status files).  A store
 * holds keys step-NNNNNNNNNN/shard-RRRRR.bin, .../rank-RRRRR.done and
 * .../manifest; the manifest is written last, so a step is complete
 * exactly when its manifest key exists.  Removing goes the other way:
 * the manifest first, so a half-removed step is merely incomplete.
 *
 * Also here: the small file helpers (atomic write with fsync, whole-file
 * read, rm -rf), the obj_status to errno mapping, and ranged reads of
 * objects into memory in parallel parts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

void ckpt_step_name(uint64_t step, char *buf, size_t len)
{
	snprintf(buf, len, CKPT_STEP_PREFIX "%010" PRIu64, step);
}

void ckpt_shard_name(uint32_t rank, char *buf, size_t len)
{
	snprintf(buf, len, "shard-%05u.bin", rank);
}

void ckpt_marker_name(uint32_t rank, char *buf, size_t len)
{
	snprintf(buf, len, "rank-%05u.done", rank);
}

int ckpt_parse_step(const char *name, const char *prefix, uint64_t *step)
{
	size_t pl = strlen(prefix);
	uint64_t v = 0;
	const char *p;

	if (strncmp(name, prefix, pl) || !name[pl])
		return -1;
	for (p = name + pl; *p; p++) {
		if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p - (name + pl) > 20 || v == CKPT_STEP_LATEST)
		return -1;
	*step = v;
	return 0;
}

/* ---- files ---- */

int ckpt_write_atomic(const char *dir, const char *name, const void *buf,
		      size_t len, char *msg, size_t msg_len)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot create %s: %s", tmp,
			 strerror(-rc));
		return rc;
	}
	rc = util_write_all(fd, buf, len);
	if (!rc && fsync(fd))
		rc = -errno;
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (!rc)
		rc = util_fsync_at(AT_FDCWD, dir);
	if (rc) {
		unlink(tmp);
		util_msg(msg, msg_len, "cannot write %s: %s", path,
			 strerror(-rc));
	}
	return rc;
}

int ckpt_read_whole(const char *path, size_t max_bytes, unsigned char **out,
		    size_t *len, char *msg, size_t msg_len)
{
	unsigned char *buf;
	struct stat sb;
	ssize_t n;
	int fd, rc = 0;

	*out = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot open %s: %s", path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) ||
	    (uint64_t)sb.st_size > max_bytes) {
		util_msg(msg, msg_len, "%s: not a regular file of at most %zu "
			 "bytes", path, max_bytes);
		close(fd);
		return -EBADMSG;
	}
	buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = util_pread_all(fd, buf, (size_t)sb.st_size, 0);
	if (n < 0)
		rc = (int)n;
	else if (n < sb.st_size)
		rc = -EIO;
	close(fd);
	if (rc) {
		free(buf);
		util_msg(msg, msg_len, "cannot read %s: %s", path,
			 strerror(-rc));
		return rc;
	}
	*out = buf;
	*len = (size_t)n;
	return 0;
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) && errno != ENOENT ? -1 : 0;
	return unlink(path) && errno != ENOENT ? -1 : 0;
}

int ckpt_rm_rf(const char *path)
{
	if (nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
		return -errno;
	return 0;
}

int ckpt_mkdir_p(const char *path, char *msg, size_t msg_len)
{
	char buf[PATH_MAX];
	struct stat sb;

	if (strlen(path) >= sizeof(buf)) {
		util_msg(msg, msg_len, "path too long: %.60s...", path);
		return -ENAMETOOLONG;
	}
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; ; p++) {
		bool end = !*p;

		if (*p != '/' && !end)
			continue;
		*p = '\0';
		if (!mkdir(buf, 0755)) {
			/* Created now: its name must survive a power cut,
			 * or a step called durable vanishes with it. */
			int rc = util_sync_parent(buf);

			if (rc) {
				util_msg(msg, msg_len, "cannot sync the "
					 "directory holding %s: %s", buf,
					 strerror(-rc));
				return rc;
			}
		} else if (errno != EEXIST) {
			int e = errno;

			util_msg(msg, msg_len, "cannot create directory %s: %s",
				 buf, strerror(e));
			return -e;
		}
		if (end)
			break;
		*p = '/';
	}
	if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) {
		util_msg(msg, msg_len, "%s exists and is not a directory "
			 "(give a directory for the checkpoints)", path);
		return -ENOTDIR;
	}
	return 0;
}

/* ---- object-store errors ---- */

int ckpt_obj_errno(obj_status st)
{
	switch (st) {
	case OBJ_OK:
		return 0;
	case OBJ_ERR_INVALID:
		return -EINVAL;
	case OBJ_ERR_CREDENTIALS:
	case OBJ_ERR_AUTH:
	case OBJ_ERR_DENIED:
		return -EACCES;
	case OBJ_ERR_NO_BUCKET:
	case OBJ_ERR_NOT_FOUND:
		return -ENOENT;
	case OBJ_ERR_CONNECT:
		return -ECONNREFUSED;
	case OBJ_ERR_TIMEOUT:
		return -ETIMEDOUT;
	case OBJ_ERR_NOMEM:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

int ckpt_obj_fail(const struct obj_error *err, obj_status st,
		  const char *what, char *msg, size_t msg_len)
{
	char line[1024];

	obj_error_format(err, line, sizeof(line));
	if (err->key[0])   /* the line names the key already */
		util_msg(msg, msg_len, "%s", line);
	else
		util_msg(msg, msg_len, "%s: %s", what, line);
	return ckpt_obj_errno(st);
}

/* ---- scanning ---- */

static int cmp_found(const void *a, const void *b)
{
	const struct ckpt_found *x = a, *y = b;

	if (x->step != y->step)
		return x->step < y->step ? 1 : -1;
	return (int)y->complete - (int)x->complete;
}

struct found_list {
	struct ckpt_found *v;
	size_t n, cap;
};

static int found_add(struct found_list *l, uint64_t step, bool complete,
		     bool on_nodes)
{
	for (size_t i = 0; i < l->n; i++) {
		if (l->v[i].step == step && l->v[i].complete == complete) {
			l->v[i].on_nodes |= on_nodes;
			return 0;
		}
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct ckpt_found *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
	l->v[l->n].step = step;
	l->v[l->n].on_nodes = on_nodes;
	l->v[l->n++].complete = complete;
	return 0;
}

int ckpt_local_scan(const char *dir, struct ckpt_found **out, size_t *n,
		    char *msg, size_t msg_len)
{
	struct found_list l = { 0 };
	struct dirent *de;
	DIR *d;
	int rc = 0;

	*out = NULL;
	*n = 0;
	d = opendir(dir);
	if (!d) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot read directory %s: %s%s", dir,
			 strerror(-rc), rc == -ENOENT ? " (wrong path?)" : "");
		return rc;
	}
	while (!rc && (de = readdir(d))) {
		char path[PATH_MAX];
		struct stat sb;
		uint64_t step;

		if (!ckpt_parse_step(de->d_name, CKPT_TMP_PREFIX, &step)) {
			rc = found_add(&l, step, false, false);
		} else if (!ckpt_parse_step(de->d_name, CKPT_STEP_PREFIX,
					    &step)) {
			snprintf(path, sizeof(path), "%s/%s/" CKPT_MANIFEST_NAME,
				 dir, de->d_name);
			rc = found_add(&l, step, !stat(path, &sb) &&
				       S_ISREG(sb.st_mode), false);
		}
	}
	closedir(d);
	if (rc) {
		free(l.v);
		util_msg(msg, msg_len, "out of memory listing %s", dir);
		return rc;
	}
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_found);
	*out = l.v;
	*n = l.n;
	return 0;
}

int ckpt_remote_scan(struct obj_store *st, struct ckpt_found **out,
		     size_t *n, char *msg, size_t msg_len)
{
	struct found_list l = { 0 };
	struct obj_list_page pg;
	struct obj_error err;
	char *token = NULL;
	obj_status os;
	int rc = 0;

	*out = NULL;
	*n = 0;
	do {
		os = obj_list(st, CKPT_STEP_PREFIX, NULL, token, 1000, &pg,
			      &err);
		free(token);
		token = NULL;
		if (os != OBJ_OK) {
			free(l.v);
			return ckpt_obj_fail(&err, os, "listing checkpoints",
					     msg, msg_len);
		}
		for (size_t i = 0; i < pg.nentries && !rc; i++) {
			char name[64], *slash;
			uint64_t step;

			snprintf(name, sizeof(name), "%s", pg.entries[i].key);
			slash = strchr(name, '/');
			if (!slash)
				continue;
			*slash = '\0';
			if (ckpt_parse_step(name, CKPT_STEP_PREFIX, &step))
				continue;
			rc = found_add(&l, step, !strcmp(slash + 1,
							 CKPT_MANIFEST_NAME),
				       !strcmp(slash + 1,
					       CKPT_NODES_MANIFEST_NAME));
		}
		if (pg.next_token && !(token = strdup(pg.next_token)))
			rc = -ENOMEM;
		obj_list_page_release(&pg);
	} while (token && !rc);
	free(token);
	if (rc) {
		free(l.v);
		return rc;
	}
	/* A step with a manifest is complete whatever else is there. */
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), cmp_found);
	{
		size_t k = 0;

		for (size_t i = 0; i < l.n; i++) {
			if (!k || l.v[i].step != l.v[k - 1].step)
				l.v[k++] = l.v[i];
			else
				l.v[k - 1].on_nodes |= l.v[i].on_nodes;
		}
		l.n = k;
	}
	*out = l.v;
	*n = l.n;
	return 0;
}

/* ---- removal and retention ---- */

int ckpt_local_remove(const char *dir, uint64_t step, bool complete)
{
	char name[64], path[PATH_MAX], mf[PATH_MAX + 16];

	if (complete) {
		ckpt_step_name(step, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		/* The manifest first: from then on the step is incomplete. */
		snprintf(mf, sizeof(mf), "%s/" CKPT_MANIFEST_NAME, path);
		if (unlink(mf) && errno != ENOENT)
			return -errno;
		util_fsync_at(AT_FDCWD, path);
	} else {
		struct stat sb;

		snprintf(path, sizeof(path), "%s/" CKPT_TMP_PREFIX "%010"
			 PRIu64, dir, step);
		ckpt_rm_rf(path);
		/* A step-N left half removed, never a complete one. */
		ckpt_step_name(step, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		snprintf(mf, sizeof(mf), "%s/" CKPT_MANIFEST_NAME, path);
		if (!stat(mf, &sb))
			return 0;
	}
	return ckpt_rm_rf(path);
}

int ckpt_remote_remove(struct obj_store *st, uint64_t step, char *msg,
		       size_t msg_len)
{
	struct obj_list_page pg;
	struct obj_error err;
	char prefix[64], key[96];
	obj_status os;

	ckpt_step_name(step, prefix, sizeof(prefix));
	snprintf(key, sizeof(key), "%s/" CKPT_MANIFEST_NAME, prefix);
	os = obj_delete(st, key, &err);
	/* and the commit on the nodes (commit_on_nodes), before the rest */
	snprintf(key, sizeof(key), "%s/" CKPT_NODES_MANIFEST_NAME, prefix);
	if (os == OBJ_OK)
		os = obj_delete(st, key, &err);
	if (os == OBJ_ERR_NOT_FOUND)
		os = OBJ_OK;
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, "removing an old checkpoint",
				     msg, msg_len);
	strcat(prefix, "/");
	/* Deleting changes the listing: always ask for the first page. */
	for (int round = 0; round < 1000; round++) {
		size_t failed = 0;

		os = obj_list(st, prefix, NULL, NULL, 1000, &pg, &err);
		if (os != OBJ_OK)
			return ckpt_obj_fail(&err, os, "listing an old "
					     "checkpoint", msg, msg_len);
		if (!pg.nentries) {
			obj_list_page_release(&pg);
			return 0;
		}
		{
			const char **keys = malloc(pg.nentries * sizeof(*keys));

			if (!keys) {
				obj_list_page_release(&pg);
				return -ENOMEM;
			}
			for (size_t i = 0; i < pg.nentries; i++)
				keys[i] = pg.entries[i].key;
			os = obj_delete_many(st, keys, pg.nentries, &failed,
					     &err);
			free(keys);
		}
		obj_list_page_release(&pg);
		if (os != OBJ_OK)
			return ckpt_obj_fail(&err, os, "removing an old "
					     "checkpoint", msg, msg_len);
	}
	return 0;
}

/* ---- setting aside ----
 *
 * A step directory that is in the way (not committed, or newer than the
 * step a job resumed from) is never removed: it is renamed into
 * dir/aside/ (docs/checkpoint-format.md, "Set aside"), where retention
 * and listing do not look, and a person decides. */

/* The first free name "aside/step-N.REASON.T[.K]" under base (dir or
 * key prefix), tested with taken(). */
static int aside_name(uint64_t step, const char *reason,
		      bool (*taken)(void *arg, const char *name), void *arg,
		      char *out, size_t len)
{
	char sn[64];
	long long now = (long long)time(NULL);

	ckpt_step_name(step, sn, sizeof(sn));
	for (unsigned k = 0; k < 1000; k++) {
		if (k)
			snprintf(out, len, CKPT_ASIDE_DIR "/%s.%s.%lld.%u", sn,
				 reason, now, k);
		else
			snprintf(out, len, CKPT_ASIDE_DIR "/%s.%s.%lld", sn,
				 reason, now);
		if (!taken(arg, out))
			return 0;
	}
	return -EEXIST;
}

static bool local_taken(void *arg, const char *name)
{
	char path[PATH_MAX + 128];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", (const char *)arg, name);
	return !lstat(path, &sb) || errno != ENOENT;
}

int ckpt_local_aside(const char *dir, uint64_t step, const char *reason,
		     char *out, size_t out_len, char *msg, size_t msg_len)
{
	char sn[64], src[PATH_MAX], name[256], dst[PATH_MAX + 256];
	int rc;

	ckpt_step_name(step, sn, sizeof(sn));
	snprintf(src, sizeof(src), "%s/%s", dir, sn);
	snprintf(dst, sizeof(dst), "%s/" CKPT_ASIDE_DIR, dir);
	if (mkdir(dst, 0755) && errno != EEXIST) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot create %s to move %s aside: %s",
			 dst, src, strerror(-rc));
		return rc;
	}
	rc = aside_name(step, reason, local_taken, (void *)dir, name,
			sizeof(name));
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	if (!rc && rename(src, dst))
		rc = -errno;
	if (rc) {
		util_msg(msg, msg_len, "cannot move %s aside to %s: %s", src,
			 dst, strerror(-rc));
		return rc;
	}
	snprintf(dst, sizeof(dst), "%s/" CKPT_ASIDE_DIR, dir);
	util_fsync_at(AT_FDCWD, dst);
	util_fsync_at(AT_FDCWD, dir);
	snprintf(out, out_len, "%s/%s", dir, name);
	return 0;
}

static bool remote_taken(void *arg, const char *name)
{
	struct obj_list_page pg;
	struct obj_error err;
	char prefix[300];
	bool taken;

	snprintf(prefix, sizeof(prefix), "%s/", name);
	if (obj_list(arg, prefix, NULL, NULL, 1, &pg, &err) != OBJ_OK)
		return true;   /* unknown: try the next name */
	taken = pg.nentries > 0;
	obj_list_page_release(&pg);
	return taken;
}

int ckpt_remote_aside(struct obj_store *st, uint64_t step, const char *reason,
		      char *out, size_t out_len, char *msg, size_t msg_len)
{
	struct obj_list_page pg;
	struct obj_error err;
	char prefix[64], name[256], dst[600], *token = NULL;
	char **keys = NULL;
	size_t n = 0, cap = 0, mf = SIZE_MAX;
	obj_status os = OBJ_OK;
	int rc = 0;

	ckpt_step_name(step, prefix, sizeof(prefix));
	strcat(prefix, "/");
	rc = aside_name(step, reason, remote_taken, st, name, sizeof(name));
	if (rc) {
		util_msg(msg, msg_len, "no free name to move %s aside", prefix);
		return rc;
	}
	do {
		os = obj_list(st, prefix, NULL, token, 1000, &pg, &err);
		free(token);
		token = NULL;
		if (os != OBJ_OK)
			break;
		for (size_t i = 0; i < pg.nentries && !rc; i++) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 16;
				char **v = realloc(keys, nc * sizeof(*v));

				if (!v) {
					rc = -ENOMEM;
					break;
				}
				keys = v;
				cap = nc;
			}
			if (!(keys[n] = strdup(pg.entries[i].key)))
				rc = -ENOMEM;
			else
				n++;
		}
		if (!rc && pg.next_token && !(token = strdup(pg.next_token)))
			rc = -ENOMEM;
		obj_list_page_release(&pg);
	} while (token && !rc);
	free(token);
	if (os != OBJ_OK)
		rc = ckpt_obj_fail(&err, os, prefix, msg, msg_len);
	/* Copy every key, the manifest last (so the copy is complete only
	 * once all of it is there), then remove the step, manifest first. */
	for (size_t i = 0; i < n; i++) {
		const char *tail = keys[i] + strlen(prefix);

		if (!strcmp(tail, CKPT_MANIFEST_NAME))
			mf = i;
	}
	for (size_t k = 0; !rc && k <= n; k++) {
		size_t i = k < n ? k : mf;

		if ((k < n && i == mf) || i == SIZE_MAX)
			continue;
		snprintf(dst, sizeof(dst), "%s/%s", name,
			 keys[i] + strlen(prefix));
		os = obj_copy(st, keys[i], dst, NULL, 0, NULL, &err);
		if (os != OBJ_OK) {
			rc = ckpt_obj_fail(&err, os, keys[i], msg, msg_len);
			util_msg(msg + strlen(msg), msg_len > strlen(msg) ?
				 msg_len - strlen(msg) : 0, " (copying it to "
				 "%s; %s stays where it is)", dst, prefix);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	if (!rc)
		rc = ckpt_remote_remove(st, step, msg, msg_len);
	if (!rc)
		snprintf(out, out_len, "%s", name);
	return rc;
}

/* Which scanned steps retention removes: complete ones past the newest
 * keep, incomplete ones older than the newest complete (or all). */
static bool retain_drop(const struct ckpt_found *v, size_t i,
			unsigned *kept, unsigned keep, bool keep_all,
			uint64_t newest, bool have_newest, bool all_incomplete)
{
	if (v[i].complete) {
		if (keep_all || *kept < keep) {
			(*kept)++;
			return false;
		}
		return true;
	}
	return all_incomplete || (have_newest && v[i].step < newest);
}

/* The newest complete step of a scan (sorted newest first), if any. */
static bool newest_complete(const struct ckpt_found *v, size_t n,
			    uint64_t *step)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].complete) {
			*step = v[i].step;
			return true;
		}
	return false;
}

/* Retention in a directory (dir) or a bucket (st): exactly one is set. */
static int retain(const char *dir, struct obj_store *st, unsigned keep,
		  bool keep_all, bool remove_all_incomplete, size_t *removed,
		  char *msg, size_t msg_len)
{
	struct ckpt_found *v;
	uint64_t newest = 0;
	bool have = false;
	unsigned kept = 0;
	size_t n, gone = 0;
	int rc, first = 0;

	rc = dir ? ckpt_local_scan(dir, &v, &n, msg, msg_len) :
		   ckpt_remote_scan(st, &v, &n, msg, msg_len);
	if (rc)
		return rc;
	have = newest_complete(v, n, &newest);
	for (size_t i = 0; i < n; i++) {
		if (!retain_drop(v, i, &kept, keep, keep_all, newest, have,
				 remove_all_incomplete))
			continue;
		if (!dir) {
			rc = ckpt_remote_remove(st, v[i].step,
						first ? NULL : msg,
						first ? 0 : msg_len);
		} else {
			rc = ckpt_local_remove(dir, v[i].step, v[i].complete);
			if (rc && !first)
				util_msg(msg, msg_len, "cannot remove step "
					 "%llu in %s: %s",
					 (unsigned long long)v[i].step, dir,
					 strerror(-rc));
		}
		if (rc && !first)
			first = rc;
		gone += !rc;
	}
	if (dir && (!keep_all || remove_all_incomplete))
		util_fsync_at(AT_FDCWD, dir);
	free(v);
	if (removed)
		*removed = gone;
	return first;
}

int ckpt_retain_local(const char *dir, unsigned keep, bool keep_all,
		      bool remove_all_incomplete, size_t *removed, char *msg,
		      size_t msg_len)
{
	return retain(dir, NULL, keep, keep_all, remove_all_incomplete,
		      removed, msg, msg_len);
}

int ckpt_retain_remote(struct obj_store *st, unsigned keep, bool keep_all,
		       bool remove_all_incomplete, size_t *removed,
		       char *msg, size_t msg_len)
{
	return retain(NULL, st, keep, keep_all, remove_all_incomplete,
		      removed, msg, msg_len);
}

/* ---- reading objects ---- */

int ckpt_remote_read_whole(struct obj_store *st, const char *key,
			   size_t max_bytes, unsigned char **out, size_t *len,
			   char *msg, size_t msg_len)
{
	struct obj_error err;
	struct obj_meta m;
	unsigned char *buf;
	obj_status os;
	size_t got = 0;
	int rc;

	*out = NULL;
	*len = 0;
	os = obj_head(st, key, &m, &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, msg, msg_len);
	obj_meta_release(&m);
	if (m.size_bytes > max_bytes) {
		util_msg(msg, msg_len, "%s: %llu bytes, more than the %zu a "
			 "manifest may have", key,
			 (unsigned long long)m.size_bytes, max_bytes);
		return -EBADMSG;
	}
	buf = malloc(m.size_bytes ? (size_t)m.size_bytes : 1);
	if (!buf)
		return -ENOMEM;
	rc = ckpt_remote_read(st, key, 0, buf, m.size_bytes, 4, msg, msg_len);
	if (rc) {
		free(buf);
		return rc;
	}
	got = (size_t)m.size_bytes;
	*out = buf;
	*len = got;
	return 0;
}

struct rread {
	struct obj_store *st;
	const char *key;
	uint64_t off, len;
	unsigned char *buf;
	pthread_mutex_t lock;    /* protects next, rc, err, st_rc */
	uint64_t next;
	obj_status st_rc;
	struct obj_error err;
	bool short_read;
};

static void *rread_worker(void *arg)
{
	struct rread *r = arg;

	for (;;) {
		struct obj_error e;
		uint64_t at;
		size_t want, got = 0;
		obj_status os;

		pthread_mutex_lock(&r->lock);
		at = r->next;
		if (at >= r->len || r->st_rc != OBJ_OK || r->short_read) {
			pthread_mutex_unlock(&r->lock);
			return NULL;
		}
		want = r->len - at < CKPT_IO_PIECE ? (size_t)(r->len - at) :
		       CKPT_IO_PIECE;
		r->next += want;
		pthread_mutex_unlock(&r->lock);
		os = obj_get(r->st, r->key, r->off + at, want, r->buf + at,
			     &got, &e);
		pthread_mutex_lock(&r->lock);
		if (os != OBJ_OK && r->st_rc == OBJ_OK) {
			r->st_rc = os;
			r->err = e;
		} else if (os == OBJ_OK && got != want) {
			r->short_read = true;
		}
		pthread_mutex_unlock(&r->lock);
	}
}

int ckpt_remote_read(struct obj_store *st, const char *key, uint64_t off,
		     void *buf, uint64_t len, unsigned parallel, char *msg,
		     size_t msg_len)
{
	struct rread r = { .st = st, .key = key, .off = off, .len = len,
			   .buf = buf };
	uint64_t pieces = (len + CKPT_IO_PIECE - 1) / CKPT_IO_PIECE;
	pthread_t thr[16];
	unsigned nthr = 0;

	if (!len)
		return 0;
	if (parallel > 16)
		parallel = 16;
	pthread_mutex_init(&r.lock, NULL);
	for (unsigned i = 1; i < parallel && i < pieces; i++) {
		if (pthread_create(&thr[nthr], NULL, rread_worker, &r))
			break;
		nthr++;
	}
	rread_worker(&r);
	for (unsigned i = 0; i < nthr; i++)
		pthread_join(thr[i], NULL);
	pthread_mutex_destroy(&r.lock);
	if (r.st_rc != OBJ_OK)
		return ckpt_obj_fail(&r.err, r.st_rc, key, msg, msg_len);
	if (r.short_read) {
		util_msg(msg, msg_len, "%s: shorter than the manifest says "
			 "(truncated object)", key);
		return -EBADMSG;
	}
	return 0;
}
