/* SPDX-License-Identifier: MIT */
/*
 * list.c - the steps a checkpoint directory and its remote store hold:
 * ckpt_list (each complete step, where it is, what its manifest says),
 * ckpt_prune (the newest N kept) and ckpt_set_aside (a step moved out of
 * the way, local and remote).  Reading a step is load.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

/* ---- list and prune ---- */

static void step_info(struct ckpt *c, struct ckpt_step_info *si)
{
	struct ckpt_reader *r;

	si->error = ckpt_reader_open_from(c, si->step, si->local ?
					  CKPT_FROM_LOCAL : CKPT_FROM_REMOTE,
					  &r, si->why, sizeof(si->why));
	if (si->error && !si->why[0])
		util_msg(si->why, sizeof(si->why), "step %llu: %s",
			 (unsigned long long)si->step, strerror(-si->error));
	if (si->error)
		return;
	si->world_size = r->m.world_size;
	si->ntensors = r->m.ntensors;
	si->created_s = ckpt_reader_created_s(r);
	for (uint32_t i = 0; i < r->m.nshards; i++)
		si->bytes += r->m.shards[i].file_bytes;
	ckpt_reader_close(r);
}

static struct ckpt_step_info *info_for(struct ckpt_step_info *v, size_t *n,
				       uint64_t step)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i].step == step)
			return &v[i];
	memset(&v[*n], 0, sizeof(v[*n]));
	v[*n].step = step;
	return &v[(*n)++];
}

static int cmp_info(const void *a, const void *b)
{
	const struct ckpt_step_info *x = a, *y = b;

	return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

int ckpt_list(struct ckpt *c, struct ckpt_step_info **out, size_t *n,
	      size_t *incomplete, char *msg, size_t msg_len)
{
	struct ckpt_found *lv = NULL, *rv = NULL;
	size_t ln = 0, rn = 0, k = 0, inc = 0;
	struct ckpt_step_info *v;
	int rc = 0;

	*out = NULL;
	*n = 0;
	util_msg(msg, msg_len, "%s", "");
	rc = ckpt_scan_both(c, &lv, &ln, &rv, &rn, msg, msg_len);
	if (rc)
		return rc;
	v = calloc(ln + rn + 1, sizeof(*v));
	if (!v) {
		free(lv);
		free(rv);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ln; i++) {
		if (lv[i].complete)
			info_for(v, &k, lv[i].step)->local = true;
		else
			inc++;
	}
	for (size_t i = 0; i < rn; i++) {
		if (rv[i].nodes_only)
			info_for(v, &k, rv[i].step)->nodes = true;
		else if (rv[i].complete)
			info_for(v, &k, rv[i].step)->remote = true;
		else
			inc++;
	}
	free(lv);
	free(rv);
	for (size_t i = 0; i < k; i++)
		step_info(c, &v[i]);
	if (k)
		qsort(v, k, sizeof(*v), cmp_info);
	*out = v;
	*n = k;
	if (incomplete)
		*incomplete = inc;
	return 0;
}

int ckpt_prune(struct ckpt *c, unsigned keep, size_t *removed, char *msg,
	       size_t msg_len)
{
	size_t a = 0, b = 0;
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (c->dir && c->cfg.node_local)
		rc = ckpt_retain_node(c, keep, keep == 0, &a, msg, msg_len);
	else if (c->dir)
		rc = ckpt_retain_local(c->dir, keep, false, keep == 0, &a, msg,
				       msg_len);
	if (!rc && c->st)
		rc = ckpt_retain_remote(c->st, keep, false, keep == 0, &b, msg,
					msg_len);
	if (removed)
		*removed = a + b;
	return rc;
}

/* ---- setting newer steps aside ---- */

/* Appends "what" to the list of what was moved, for the message. */
static void moved_add(char *buf, size_t len, const char *what)
{
	size_t at = strlen(buf);

	if (at + 1 < len)
		snprintf(buf + at, len - at, "%s%s", at ? ", " : "", what);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int aside_local(struct ckpt *c, uint64_t step, const char *reason,
		       size_t *moved, char *list, size_t list_len, char *msg,
		       size_t msg_len)
{
	struct dirent *de;
	uint64_t *v = NULL, n;
	size_t nv = 0, cap = 0;
	DIR *d = opendir(c->dir);
	int rc = 0;

	if (!d) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot read directory %s: %s", c->dir,
			 strerror(-rc));
		return rc;
	}
	while ((de = readdir(d))) {
		if (ckpt_parse_step(de->d_name, CKPT_STEP_PREFIX, &n) ||
		    n <= step)
			continue;
		if (nv == cap) {
			size_t nc = cap ? cap * 2 : 16;
			uint64_t *nvv = realloc(v, nc * sizeof(*v));

			if (!nvv) {
				rc = -ENOMEM;
				break;
			}
			v = nvv;
			cap = nc;
		}
		v[nv++] = n;
	}
	closedir(d);
	if (nv)
		qsort(v, nv, sizeof(*v), cmp_u64);
	for (size_t i = 0; !rc && i < nv; i++) {
		char out[PATH_MAX + 300];

		rc = ckpt_local_aside(c->dir, v[i], reason, out, sizeof(out),
				      msg, msg_len);
		if (!rc) {
			(*moved)++;
			moved_add(list, list_len, strrchr(out, '/') + 1);
		}
	}
	free(v);
	return rc;
}

static int aside_remote(struct ckpt *c, uint64_t step, const char *reason,
			size_t *moved, char *list, size_t list_len, char *msg,
			size_t msg_len)
{
	struct ckpt_found *v;
	size_t n;
	int rc;

	rc = ckpt_remote_scan(c->st, &v, &n, msg, msg_len);
	if (rc)
		return rc;
	/* Complete ones only: what a crashed attempt left of a newer step
	 * (shards, markers, no manifest) is overwritten by the next save
	 * of it, like a .tmp-step-N in a directory. */
	for (size_t k = n; !rc && k-- > 0; ) {   /* oldest first */
		size_t i = k;
		char out[300];

		if (!v[i].complete || v[i].step <= step)
			continue;
		rc = ckpt_remote_aside(c->st, v[i].step, reason, out,
				       sizeof(out), msg, msg_len);
		if (!rc) {
			(*moved)++;
			moved_add(list, list_len, out);
		}
	}
	free(v);
	return rc;
}

int ckpt_set_aside(struct ckpt *c, uint64_t step, size_t *moved, char *msg,
		   size_t msg_len)
{
	char reason[64], local[1024] = "", remote[1024] = "";
	size_t a = 0, b = 0;
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (moved)
		*moved = 0;
	if (c->cfg.read_only) {
		util_msg(msg, msg_len, "the store was opened read-only");
		return -EINVAL;
	}
	snprintf(reason, sizeof(reason), "newer-than-%llu",
		 (unsigned long long)step);
	if (c->dir)
		rc = aside_local(c, step, reason, &a, local, sizeof(local), msg,
				 msg_len);
	if (!rc && c->st)
		rc = aside_remote(c, step, reason, &b, remote, sizeof(remote),
				  msg, msg_len);
	if (moved)
		*moved = a + b;
	if (rc)
		return rc;
	pthread_mutex_lock(&c->lock);
	c->steps_scanned = false;   /* begin looks at dir again */
	pthread_mutex_unlock(&c->lock);
	if (a && b)
		util_msg(msg, msg_len, "%s/" CKPT_ASIDE_DIR "/: %s; %s/: %s",
			 c->dir, local, c->remote, remote);
	else if (a)
		util_msg(msg, msg_len, "%s/" CKPT_ASIDE_DIR "/: %s", c->dir,
			 local);
	else if (b)
		util_msg(msg, msg_len, "%s/: %s", c->remote, remote);
	return 0;
}
