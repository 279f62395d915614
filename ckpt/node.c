/* SPDX-License-Identifier: MIT */
/*
 * node.c - the node-local tier (ckpt_config.node_local): the directory
 * is this node's own disk, which no other node sees, so no rank waits
 * there for another.  Each rank commits its own shard in it by itself:
 * from .tmp-step-N/ into step-N/ (shard, then marker, each a rename,
 * then both directories fsynced), and keeps its newest keep_local steps
 * there.  The ranks meet in the remote store, where rank 0 commits the
 * manifest (drain.c, as without node_local).  A load reads the manifest
 * from the store and each shard from this node's step-N/ when it is
 * there with its size, checking it as any shard (load.c).
 * docs/checkpoint-format.md, "Node-local directories".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

void ckpt_node_path(const struct ckpt *c, uint64_t step, const char *name,
		    char *buf, size_t len)
{
	char sn[64];

	ckpt_step_name(step, sn, sizeof(sn));
	snprintf(buf, len, "%s/%s%s%s", c->dir, sn, name ? "/" : "",
		 name ? name : "");
}

int ckpt_node_commit(struct ckpt *c, struct ckpt_step *s, char *why,
		     size_t why_len)
{
	char dst[PATH_MAX], tmp[PATH_MAX], from[PATH_MAX + 192],
	     to[PATH_MAX + 192], names[2][64];
	int rc;

	ckpt_node_path(c, s->step, NULL, dst, sizeof(dst));
	ckpt_tmp_path(c, s->step, NULL, tmp, sizeof(tmp));
	if (mkdir(dst, 0755) && errno != EEXIST) {
		rc = -errno;
		util_msg(why, why_len, "cannot make %s: %s", dst,
			 strerror(-rc));
		return rc;
	}
	/* The shard before its marker: a marker there says its shard is. */
	ckpt_shard_name(c->rank, names[0], sizeof(names[0]));
	ckpt_marker_name(c->rank, names[1], sizeof(names[1]));
	for (int k = 0; k < 2; k++) {
		snprintf(from, sizeof(from), "%s/%s", tmp, names[k]);
		snprintf(to, sizeof(to), "%s/%s", dst, names[k]);
		if (rename(from, to)) {
			rc = -errno;
			util_msg(why, why_len, "cannot rename %s to %s: %s",
				 from, to, strerror(-rc));
			return rc;
		}
	}
	if ((rc = util_fsync_at(AT_FDCWD, dst)) ||
	    (rc = util_fsync_at(AT_FDCWD, c->dir))) {
		util_msg(why, why_len, "fsync of %s failed: %s", dst,
			 strerror(-rc));
		return rc;
	}
	ckpt_crash_point("node-committed", s->step);
	rmdir(tmp); /* the other ranks of this node may still be in it */
	return 0;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Removes this rank's shard and marker from dir/sub, and sub when it is
 * then empty (another rank's files keep it). */
static int drop_own(const struct ckpt *c, const char *sub)
{
	char p[PATH_MAX + 80], name[64];
	int rc = 0;

	ckpt_marker_name(c->rank, name, sizeof(name));
	snprintf(p, sizeof(p), "%s/%s/%s", c->dir, sub, name);
	if (unlink(p) && errno != ENOENT)
		rc = -errno;
	ckpt_shard_name(c->rank, name, sizeof(name));
	snprintf(p, sizeof(p), "%s/%s/%s", c->dir, sub, name);
	if (unlink(p) && errno != ENOENT)
		rc = -errno;
	snprintf(p, sizeof(p), "%s/%s", c->dir, sub);
	rmdir(p);
	return rc;
}

int ckpt_retain_node(struct ckpt *c, unsigned keep, bool remove_all,
		     size_t *removed, char *msg, size_t msg_len)
{
	char name[64], p[PATH_MAX + 80];
	uint64_t *steps = NULL, *tmps = NULL, st;
	size_t n = 0, nt = 0, cap = 0, tcap = 0;
	struct dirent *de;
	struct stat sb;
	DIR *d;
	int rc = 0;

	if (removed)
		*removed = 0;
	d = opendir(c->dir);
	if (!d) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot read %s: %s", c->dir,
			 strerror(-rc));
		return rc;
	}
	ckpt_shard_name(c->rank, name, sizeof(name));
	while ((de = readdir(d))) {
		bool tmp = !ckpt_parse_step(de->d_name, CKPT_TMP_PREFIX, &st);

		if (!tmp && ckpt_parse_step(de->d_name, CKPT_STEP_PREFIX, &st))
			continue;
		snprintf(p, sizeof(p), "%s/%s/%s", c->dir, de->d_name, name);
		if (lstat(p, &sb))
			continue; /* none of this rank's there */
		if (tmp ? nt == tcap : n == cap) {
			size_t nc = (tmp ? tcap : cap) * 2 + 16;
			uint64_t *v = realloc(tmp ? tmps : steps,
					      nc * sizeof(*v));

			if (!v) {
				rc = -ENOMEM;
				break;
			}
			if (tmp) {
				tmps = v;
				tcap = nc;
			} else {
				steps = v;
				cap = nc;
			}
		}
		if (tmp)
			tmps[nt++] = st;
		else
			steps[n++] = st;
	}
	closedir(d);
	if (!rc) {
		qsort(steps, n, sizeof(*steps), cmp_desc);
		for (size_t i = keep || remove_all ? keep : n; i < n; i++) {
			ckpt_step_name(steps[i], name, sizeof(name));
			if (!(rc = drop_own(c, name)) && removed)
				(*removed)++;
		}
		/* A leftover of a step older than the newest kept: a save
		 * that failed or was cut short. */
		for (size_t i = 0; i < nt; i++) {
			if (!remove_all && (!n || tmps[i] >= steps[0]))
				continue;
			snprintf(name, sizeof(name), CKPT_TMP_PREFIX "%010llu",
				 (unsigned long long)tmps[i]);
			drop_own(c, name);
		}
		if (rc)
			util_msg(msg, msg_len, "retention in %s: %s", c->dir,
				 strerror(-rc));
	}
	free(steps);
	free(tmps);
	return rc;
}

/* ---- reading: the node's copies ---- */

int ckpt_node_reader_init(struct ckpt_reader *r)
{
	struct ckpt *c = r->c;
	char path[PATH_MAX + 80], name[64];
	struct stat sb;

	r->served = calloc(r->m.nshards ? r->m.nshards : 1, 1);
	if (!r->served)
		return -ENOMEM;
	if (!c->cfg.node_local || !c->dir || !r->remote)
		return 0;
	r->node_ok = calloc(r->m.nshards ? r->m.nshards : 1,
			    sizeof(*r->node_ok));
	r->node_why = calloc(r->m.nshards ? r->m.nshards : 1,
			     sizeof(*r->node_why));
	if (!r->node_ok || !r->node_why)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->m.nshards; i++) {
		ckpt_shard_name(r->m.shards[i].rank, name, sizeof(name));
		ckpt_node_path(c, r->step, name, path, sizeof(path));
		if (!stat(path, &sb) && S_ISREG(sb.st_mode) &&
		    (uint64_t)sb.st_size == r->m.shards[i].file_bytes)
			r->node_ok[i] = true;
	}
	return 0;
}

void ckpt_node_reader_free(struct ckpt_reader *r)
{
	for (uint32_t i = 0; r->node_why && i < r->m.nshards; i++)
		free(r->node_why[i]);
	free(r->node_why);
	free(r->node_ok);
	free(r->served);
	free(r->sources);
}

void ckpt_node_bad(struct ckpt_reader *r, uint32_t i, const char *why)
{
	r->node_ok[i] = false;
	r->hdr_ok[i] = false;
	if (r->fds[i] >= 0) {
		close(r->fds[i]);
		r->fds[i] = -1;
	}
	free(r->node_why[i]);
	r->node_why[i] = strdup(why);
	r->served[i] = 'd';
	pthread_mutex_lock(&r->c->lock);
	r->c->stats.load_node_damaged++;
	pthread_mutex_unlock(&r->c->lock);
}

void ckpt_node_count(struct ckpt_reader *r, uint32_t i, bool node,
		     uint64_t len)
{
	if (r->served[i] != 'd')
		r->served[i] = node ? 'n' : r->remote ? 'r' : 'l';
	if (!node && !r->remote)
		return; /* a directory's own read: nothing counted, no lock */
	pthread_mutex_lock(&r->c->lock);
	if (node)
		r->c->stats.load_node_bytes += len;
	else if (r->remote)
		r->c->stats.load_remote_bytes += len;
	pthread_mutex_unlock(&r->c->lock);
}

/* The ranks of the shards served as kind, "0, 3", into out. */
static void ranks_of(const struct ckpt_reader *r, char kind, char *out,
		     size_t len)
{
	size_t at = 0;

	out[0] = '\0';
	for (uint32_t i = 0; i < r->m.nshards && at < len; i++)
		if (r->served[i] == kind)
			at += (size_t)snprintf(out + at, len - at, "%s%u",
					       at ? ", " : "",
					       r->m.shards[i].rank);
}

const char *ckpt_reader_sources(struct ckpt_reader *r)
{
	size_t len = 256 + (size_t)r->m.nshards * 16, at = 0;
	char *list = malloc(len), dir[PATH_MAX];
	static const struct {
		char kind;
		const char *what;
	} kinds[] = {
		{ 'n', "from this node's directory" },
		{ 'l', "from the directory" },
		{ 'r', "from the store" },
		{ 'd', "from the store, this node's copy failing" },
	};

	free(r->sources);
	r->sources = NULL;
	if (!list || !(r->sources = malloc(len * 5 + PATH_MAX * 2))) {
		free(list);
		return "";
	}
	r->sources[0] = '\0';
	ckpt_node_path(r->c, r->step, NULL, dir, sizeof(dir));
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		ranks_of(r, kinds[k].kind, list, len);
		if (!list[0] || at >= len * 5 + PATH_MAX * 2)
			continue;
		at += (size_t)snprintf(r->sources + at, len * 5 + PATH_MAX * 2 -
				       at, "%sshards %s %s (%s)",
				       at ? "; " : "", list, kinds[k].what,
				       kinds[k].kind == 'n' ? dir :
				       kinds[k].kind == 'l' ? r->base :
				       r->c->remote);
	}
	for (uint32_t i = 0; r->node_why && i < r->m.nshards; i++)
		if (r->node_why[i] && at < len * 5 + PATH_MAX * 2)
			at += (size_t)snprintf(r->sources + at,
					       len * 5 + PATH_MAX * 2 - at,
					       "; shard %u here: %s",
					       r->m.shards[i].rank,
					       r->node_why[i]);
	free(list);
	return r->sources;
}
