/* SPDX-License-Identifier: MIT */
/*
 * drain.c - what happens to a step after its bytes are staged: the upload
 * threads send its shard to the remote store as a parallel multipart
 * upload (part i+1 is chunk i, read from the local shard file once it is
 * written there, else straight from the staging chunk), and the committer
 * thread finishes each step in order:
 *
 *   locally (rank 0)  wait for every rank's marker in .tmp-step-N/, merge
 *                     them into the manifest, write it (fsync), rename
 *                     .tmp-step-N to step-N, fsync the directory, apply
 *                     retention.  Other ranks only leave their marker.
 *   remotely          complete the upload, store this rank's marker; rank
 *                     0 then waits for every rank's marker object, merges
 *                     them and stores the manifest last, then applies
 *                     retention.
 *
 * Rank 0 ignores a marker whose run id is not its own (left by an earlier
 * job) and gives up after barrier_timeout_ms, naming the ranks missing.
 * A step that fails is never committed; its leftovers are removed by
 * retention once a newer step commits.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

static void key_of(uint64_t step, const char *name, char *buf, size_t len)
{
	char sn[64];

	ckpt_step_name(step, sn, sizeof(sn));
	snprintf(buf, len, "%s/%s", sn, name);
}

static void shard_key(const struct ckpt *c, uint64_t step, char *buf,
		      size_t len)
{
	char name[64];

	ckpt_shard_name(c->rank, name, sizeof(name));
	key_of(step, name, buf, len);
}

/* ---- uploads ---- */

/* Before the first part: refuse to overwrite a committed step, and open
 * the multipart upload. */
static int remote_start(struct ckpt *c, struct ckpt_step *s, char *why,
			size_t why_len)
{
	struct obj_error err;
	struct obj_meta m;
	char key[128];
	obj_status os;

	key_of(s->step, CKPT_MANIFEST_NAME, key, sizeof(key));
	os = obj_head(c->st, key, &m, &err);
	if (os == OBJ_OK) {
		obj_meta_release(&m);
		util_msg(why, why_len, "step %llu is already committed in %s "
			 "(save another step, or remove it first)",
			 (unsigned long long)s->step, c->remote);
		return -EEXIST;
	}
	if (os != OBJ_ERR_NOT_FOUND)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	if (s->nchunks == 1)
		return 0;
	shard_key(c, s->step, key, sizeof(key));
	os = obj_mpu_create(c->st, key, NULL, 0, s->upload_id, &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	return 0;
}

static int upload_part(struct ckpt *c, struct ckpt_step *s,
		       const struct ckpt_job *j, uint64_t *len_out, char *why,
		       size_t why_len)
{
	uint64_t off = (uint64_t)j->index * c->cfg.chunk_bytes;
	uint64_t len = s->file_bytes - off < c->cfg.chunk_bytes ?
		       s->file_bytes - off : c->cfg.chunk_bytes;
	struct obj_part *p = &s->parts[j->index];
	struct obj_error err;
	char key[128];
	obj_status os;

	shard_key(c, s->step, key, sizeof(key));
	*len_out = len;
	if (s->nchunks == 1 && j->chunk)
		os = obj_put(c->st, key, j->chunk->buf, (size_t)len, NULL, 0,
			     NULL, &err);
	else if (s->nchunks == 1)
		os = obj_put_fd(c->st, key, s->fd, len, NULL, 0, NULL, &err);
	else if (j->chunk)
		os = obj_mpu_part(c->st, key, s->upload_id, j->index + 1,
				  j->chunk->buf, (size_t)len, p->etag, &err);
	else
		os = obj_mpu_part_fd(c->st, key, s->upload_id, j->index + 1,
				     s->fd, (off_t)off, (size_t)len, p->etag,
				     &err);
	p->number = j->index + 1;
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	return 0;
}

static struct ckpt_job *upload_next(struct ckpt *c)
{
	struct ckpt_job *j;

	while (!c->uq_head && !c->stopping)
		pthread_cond_wait(&c->upload_cond, &c->lock);
	j = c->uq_head;
	if (j) {
		c->uq_head = j->next;
		if (!c->uq_head)
			c->uq_tail = NULL;
	}
	return j;
}

void *ckpt_upload_main(void *arg)
{
	struct ckpt *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct ckpt_job *j = upload_next(c);
		struct ckpt_step *s;
		char why[512] = "";
		uint64_t len = 0;
		bool skip;
		int rc = 0;

		if (!j)
			break;
		s = j->step;
		while (s->remote_state == REMOTE_STARTING)
			pthread_cond_wait(&c->upload_cond, &c->lock);
		if (s->remote_state == REMOTE_IDLE && !s->remote_rc) {
			s->remote_state = REMOTE_STARTING;
			pthread_mutex_unlock(&c->lock);
			rc = remote_start(c, s, why, sizeof(why));
			pthread_mutex_lock(&c->lock);
			s->remote_state = rc ? REMOTE_FAILED : REMOTE_STARTED;
			if (rc)
				ckpt_step_fail(c, s, rc, CKPT_REMOTE, "step %llu:"
					       " %s", (unsigned long long)s->step,
					       why);
			pthread_cond_broadcast(&c->upload_cond);
		}
		skip = s->remote_rc != 0;
		pthread_mutex_unlock(&c->lock);
		if (!skip)
			rc = upload_part(c, s, j, &len, why, sizeof(why));
		pthread_mutex_lock(&c->lock);
		if (rc) {
			ckpt_step_fail(c, s, rc, CKPT_REMOTE, "step %llu: "
				       "uploading the shard failed: %s",
				       (unsigned long long)s->step, why);
		} else if (!skip) {
			s->bytes_uploaded += len;
			c->stats.bytes_uploaded += len;
		}
		if (j->chunk)
			ckpt_chunk_release(c, j->chunk);
		j->chunk = NULL;
		if (--s->remote_pending == 0) {
			s->remote_ready = true;
			pthread_cond_broadcast(&c->commit_cond);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- the barrier: every rank's marker ---- */

struct barrier {
	struct ckpt_manifest *m;  /* world entries; kind 0 while missing */
	uint32_t have;
	char refused[512];        /* why the last marker not taken was not */
};

static void barrier_release(struct barrier *b, uint32_t world)
{
	for (uint32_t i = 0; b->m && i < world; i++)
		ckpt_mf_release(&b->m[i]);
	free(b->m);
	b->m = NULL;
}

/* Takes a marker's bytes for rank r if they belong to this run and step. */
static void barrier_offer(struct ckpt *c, struct barrier *b, uint64_t step,
			  uint32_t r, const void *buf, size_t len,
			  const char *what)
{
	struct ckpt_manifest m;

	if (b->m[r].kind)
		return;
	/* Not taken, but remembered: a marker of a newer format version or
	 * of another run is why the barrier times out, and says so then.
	 * Meanwhile wait for a good one (it may be replaced). */
	if (ckpt_mf_decode(buf, len, what, &m, b->refused,
			   sizeof(b->refused)))
		return;
	if (m.kind != CKPT_MF_KIND_RANK || m.nshards != 1 ||
	    m.step != step || m.world_size != c->world ||
	    m.shards[0].rank != r) {
		util_msg(b->refused, sizeof(b->refused), "%s is not rank %u's "
			 "marker of step %llu with %u ranks", what, r,
			 (unsigned long long)step, c->world);
		ckpt_mf_release(&m);
		return;
	}
	if (strncmp(m.shards[0].run_id, c->run_id, CKPT_RUN_ID_MAX)) {
		util_msg(b->refused, sizeof(b->refused), "%s is of run id "
			 "'%.*s', this job's is '%s'", what, CKPT_RUN_ID_MAX,
			 m.shards[0].run_id, c->run_id);
		ckpt_mf_release(&m);
		return;
	}
	b->m[r] = m;
	b->have++;
}

static void barrier_poll_local(struct ckpt *c, struct barrier *b,
			       struct ckpt_step *s)
{
	char name[64], path[PATH_MAX + 64];

	for (uint32_t r = 0; r < c->world; r++) {
		unsigned char *buf;
		size_t len;

		if (b->m[r].kind)
			continue;
		ckpt_marker_name(r, name, sizeof(name));
		ckpt_tmp_path(c, s->step, name, path, sizeof(path));
		if (ckpt_read_whole(path, CKPT_MF_MAX_BYTES, &buf, &len, NULL,
				    0))
			continue;
		barrier_offer(c, b, s->step, r, buf, len, path);
		free(buf);
	}
}

static int barrier_poll_remote(struct ckpt *c, struct barrier *b,
			       struct ckpt_step *s, const char *kind,
			       char *why, size_t why_len)
{
	struct obj_list_page pg;
	struct obj_error err;
	char prefix[96], sn[64], *token = NULL;
	obj_status os;

	ckpt_step_name(s->step, sn, sizeof(sn));
	snprintf(prefix, sizeof(prefix), "%s/rank-", sn);
	/* Every page: a listing returns at most 1000 keys, and a world of
	 * more ranks than that has more markers. */
	do {
		os = obj_list(c->st, prefix, NULL, token, 1000, &pg, &err);
		free(token);
		token = NULL;
		if (os != OBJ_OK)
			return ckpt_obj_fail(&err, os, prefix, why, why_len);
		for (size_t i = 0; i < pg.nentries; i++) {
			const char *name = strrchr(pg.entries[i].key, '/');
			unsigned r;
			unsigned char *buf;
			size_t len;
			int at = 0;

			/* /rank-R.KIND exactly: "done", or "node" */
			if (!name || sscanf(name, "/rank-%u%n", &r, &at) != 1 ||
			    name[at] != '.' || strcmp(name + at + 1, kind) ||
			    r >= c->world || b->m[r].kind)
				continue;
			if (ckpt_remote_read_whole(c->st, pg.entries[i].key,
						   CKPT_MF_MAX_BYTES, &buf,
						   &len, NULL, 0))
				continue;
			barrier_offer(c, b, s->step, r, buf, len,
				      pg.entries[i].key);
			free(buf);
		}
		if (pg.next_token && !(token = strdup(pg.next_token))) {
			obj_list_page_release(&pg);
			util_msg(why, why_len, "out of memory listing %s",
				 prefix);
			return -ENOMEM;
		}
		obj_list_page_release(&pg);
	} while (token);
	return 0;
}

static void missing_ranks(const struct ckpt *c, const struct barrier *b,
			  char *buf, size_t len)
{
	size_t at = 0;
	unsigned shown = 0;

	buf[0] = '\0';
	for (uint32_t r = 0; r < c->world && at < len; r++) {
		if (b->m[r].kind)
			continue;
		if (shown++ == 8) {
			snprintf(buf + at, len - at, ", ...");
			break;
		}
		at += (size_t)snprintf(buf + at, len - at, "%s%u",
				       at ? ", " : "", r);
	}
}

/* Waits for every rank's marker (locally, or remotely those named
 * rank-R.KIND: "done", or "node" for commit_on_nodes), then merges
 * them. */
static int barrier_wait(struct ckpt *c, struct ckpt_step *s, bool remote,
			const char *kind, struct ckpt_manifest *out,
			char *why, size_t why_len)
{
	struct barrier b = { 0 };
	uint64_t t0 = util_now_ns();
	uint64_t limit = (uint64_t)c->cfg.barrier_timeout_ms * 1000000ull;
	unsigned sleep_ms = 2;
	int rc = 0;

	b.m = calloc(c->world, sizeof(*b.m));
	if (!b.m)
		return -ENOMEM;
	for (;;) {
		if (remote)
			rc = barrier_poll_remote(c, &b, s, kind, why,
						 why_len);
		else
			barrier_poll_local(c, &b, s);
		if (rc || b.have == c->world)
			break;
		if (util_now_ns() - t0 >= limit) {
			char miss[128], where[PATH_MAX];

			missing_ranks(c, &b, miss, sizeof(miss));
			if (remote)
				snprintf(where, sizeof(where), "%s", c->remote);
			else
				ckpt_tmp_path(c, s->step, NULL, where,
					      sizeof(where));
			if (b.refused[0])
				util_msg(why, why_len, "rank 0 waited %.1f s for "
					 "the shards of rank(s) %s in %s and "
					 "refused what it found: %s",
					 c->cfg.barrier_timeout_ms / 1000.0,
					 miss, where, b.refused);
			else
				util_msg(why, why_len, "rank 0 waited %.1f s for "
					 "the shards of rank(s) %s (no "
					 "rank-NNNNN.%s from them in %s); are "
					 "all %u ranks running, saving this step "
					 "to the same place with the same run "
					 "id?", c->cfg.barrier_timeout_ms /
					 1000.0, miss, kind, where, c->world);
			rc = -ETIMEDOUT;
			break;
		}
		usleep(sleep_ms * 1000);
		if (sleep_ms < (remote ? 500u : 100u))
			sleep_ms *= 2;
	}
	if (!rc)
		rc = ckpt_mf_merge(b.m, c->world, out, why, why_len);
	barrier_release(&b, c->world);
	return rc;
}

/* ---- the committer ---- */

/* Retention after a commit fails nothing (the step is committed), but
 * is not silent either: old checkpoints that stay fill the disk or the
 * bucket, so the reason goes where ckpt_get_stats and `fmckpt status`
 * show it. */
static void retention_report(struct ckpt *c, int rc, const char *where,
			     const char *why)
{
	if (!rc)
		return;
	pthread_mutex_lock(&c->lock);
	snprintf(c->stats.last_error, sizeof(c->stats.last_error),
		 "retention in %s failed, older checkpoints stay: %s", where,
		 why[0] ? why : strerror(-rc));
	pthread_mutex_unlock(&c->lock);
}

/* Every shard the manifest names is there with its size. */
static int check_local_shards(struct ckpt *c, const struct ckpt_manifest *m,
			      char *why, size_t why_len)
{
	char name[64], path[PATH_MAX + 64];
	struct stat sb;

	for (uint32_t i = 0; i < m->nshards; i++) {
		ckpt_shard_name(m->shards[i].rank, name, sizeof(name));
		ckpt_tmp_path(c, m->step, name, path, sizeof(path));
		if (stat(path, &sb) ||
		    (uint64_t)sb.st_size != m->shards[i].file_bytes) {
			util_msg(why, why_len, "%s is missing or not the size "
				 "its marker says (%llu bytes)", path,
				 (unsigned long long)m->shards[i].file_bytes);
			return -EBADMSG;
		}
	}
	return 0;
}

/* A step-N already in dir that is not a complete checkpoint (no
 * manifest, a damaged one, a shard missing or cut short: left by a
 * retention cut short, a crash of another tool, a person) would make
 * the rename fail with ENOTEMPTY, and a job that resumed from an older
 * step could never save this one.  It is moved aside, not removed: it
 * may be all that is left of something. */
static int clear_the_way(struct ckpt *c, struct ckpt_step *s,
			 const char *dst, char *why, size_t why_len)
{
	char aside[PATH_MAX + 300];
	struct ckpt_reader *r;
	struct stat sb;
	int rc;

	if (lstat(dst, &sb))
		return 0;
	if (!ckpt_reader_open_from(c, s->step, CKPT_FROM_LOCAL, &r, NULL,
				   0)) {
		ckpt_reader_close(r);
		util_msg(why, why_len, "%s is a complete checkpoint already "
			 "(saved by another job into the same directory?): "
			 "this step is not committed again", dst);
		return -EEXIST;
	}
	rc = ckpt_local_aside(c->dir, s->step, "incomplete", aside,
			      sizeof(aside), why, why_len);
	if (rc)
		return rc;
	pthread_mutex_lock(&c->lock);
	c->stats.steps_set_aside++;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int local_commit(struct ckpt *c, struct ckpt_step *s, char *why,
			size_t why_len)
{
	char tmp[PATH_MAX], dst[PATH_MAX], name[64];
	struct ckpt_manifest m;
	unsigned char *buf = NULL;
	size_t len;
	int rc;

	rc = barrier_wait(c, s, false, "done", &m, why, why_len);
	if (rc)
		return rc;
	rc = check_local_shards(c, &m, why, why_len);
	if (!rc && (rc = ckpt_mf_encode(&m, &buf, &len)))
		util_msg(why, why_len, "cannot encode the manifest: %s",
			 strerror(-rc));
	ckpt_mf_release(&m);
	ckpt_tmp_path(c, s->step, NULL, tmp, sizeof(tmp));
	if (!rc)
		rc = ckpt_write_atomic(tmp, CKPT_MANIFEST_NAME, buf, len, why,
				       why_len);
	free(buf);
	if (rc)
		return rc;
	ckpt_crash_point("manifest-written", s->step);
	ckpt_step_name(s->step, name, sizeof(name));
	snprintf(dst, sizeof(dst), "%s/%s", c->dir, name);
	rc = clear_the_way(c, s, dst, why, why_len);
	if (rc)
		return rc;
	if (rename(tmp, dst)) {
		rc = -errno;
		util_msg(why, why_len, "cannot rename %s to %s: %s%s", tmp, dst,
			 strerror(-rc), rc == -EEXIST || rc == -ENOTEMPTY ?
			 " (something else made it meanwhile)" : "");
		return rc;
	}
	ckpt_crash_point("renamed", s->step);
	rc = util_fsync_at(AT_FDCWD, c->dir);
	if (rc) {
		util_msg(why, why_len, "fsync of %s failed: %s", c->dir,
			 strerror(-rc));
		return rc;
	}
	/* Retention: what is left is tidied; its failure fails nothing. */
	why[0] = '\0';
	rc = ckpt_retain_local(c->dir, c->cfg.keep_local, !c->cfg.keep_local,
			       false, NULL, why, why_len);
	retention_report(c, rc, c->dir, why);
	why[0] = '\0';
	return 0;
}

static int remote_finish_shard(struct ckpt *c, struct ckpt_step *s,
			       char *why, size_t why_len)
{
	struct obj_error err;
	char key[128], name[64];
	obj_status os = OBJ_OK;

	shard_key(c, s->step, key, sizeof(key));
	if (s->nchunks > 1)
		os = obj_mpu_complete(c->st, key, s->upload_id, s->parts,
				      s->nchunks, NULL, &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	ckpt_crash_point("remote-shard", s->step);
	if (!s->marker) {
		util_msg(why, why_len, "no marker to store");
		return -EIO;
	}
	ckpt_marker_name(c->rank, name, sizeof(name));
	key_of(s->step, name, key, sizeof(key));
	os = obj_put(c->st, key, s->marker, s->marker_len, NULL, 0, NULL,
		     &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	ckpt_crash_point("remote-marker", s->step);
	return 0;
}

/* Rank 0: every rank's rank-R.KIND marker in the store, merged and
 * stored as step-N/NAME (the manifest, or manifest.nodes). */
static int merge_put(struct ckpt *c, struct ckpt_step *s, const char *kind,
		     const char *name, char *why, size_t why_len)
{
	struct ckpt_manifest m;
	struct obj_error err;
	unsigned char *buf;
	char key[128];
	obj_status os;
	size_t len;
	int rc;

	rc = barrier_wait(c, s, true, kind, &m, why, why_len);
	if (rc)
		return rc;
	rc = ckpt_mf_encode(&m, &buf, &len);
	ckpt_mf_release(&m);
	if (rc)
		return rc;
	key_of(s->step, name, key, sizeof(key));
	os = obj_put(c->st, key, buf, len, NULL, 0, NULL, &err);
	free(buf);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	return 0;
}

static int remote_commit(struct ckpt *c, struct ckpt_step *s, char *why,
			 size_t why_len)
{
	int rc;

	rc = remote_finish_shard(c, s, why, why_len);
	if (rc || c->rank != 0)
		return rc;
	rc = merge_put(c, s, "done", CKPT_MANIFEST_NAME, why, why_len);
	if (rc)
		return rc;
	ckpt_crash_point("remote-manifest", s->step);
	why[0] = '\0';
	rc = ckpt_retain_remote(c->st, c->cfg.keep_remote, !c->cfg.keep_remote,
				false, NULL, why, why_len);
	retention_report(c, rc, c->remote, why);
	why[0] = '\0';
	return 0;
}

/* Records an error of the commit itself.  Only a new one: a step that
 * failed before keeps its first message, in the stats too.  Every new
 * error counts, said or not (out of memory in the barrier or the merge
 * says nothing): one dropped here would read as committed.  c->lock
 * held. */
static void commit_fail(struct ckpt *c, struct ckpt_step *s, int rc,
			unsigned level, const char *why)
{
	ckpt_step_fail(c, s, rc, level, "step %llu: %s",
		       (unsigned long long)s->step,
		       why[0] ? why : strerror(-rc));
}

/* commit_on_nodes, after this rank's node commit: its marker stored as
 * step-N/rank-R.node; rank 0 then waits for every rank's and stores
 * their merge as step-N/manifest.nodes. */
static int nodes_commit(struct ckpt *c, struct ckpt_step *s, char *why,
			size_t why_len)
{
	struct obj_error err;
	char key[128], name[64];
	obj_status os;
	int rc;

	ckpt_marker_name(c->rank, name, sizeof(name));
	strcpy(name + strlen(name) - 4, "node"); /* rank-R.done -> .node */
	key_of(s->step, name, key, sizeof(key));
	os = obj_put(c->st, key, s->marker, s->marker_len, NULL, 0, NULL,
		     &err);
	if (os != OBJ_OK)
		return ckpt_obj_fail(&err, os, key, why, why_len);
	if (c->rank != 0)
		return 0;
	rc = merge_put(c, s, "node", CKPT_NODES_MANIFEST_NAME, why, why_len);
	if (rc)
		return rc;
	ckpt_crash_point("nodes-manifest", s->step);
	return 0;
}

static void handle_local(struct ckpt *c, struct ckpt_step *s)
{
	char why[768] = "", nwhy[768] = "";
	int rc, commit_rc = 0, nodes_rc = 0;

	pthread_mutex_lock(&c->lock);
	rc = s->local_rc;
	pthread_mutex_unlock(&c->lock);
	if (!rc && c->cfg.node_local) {
		/* every rank, on its own node's disk: no barrier */
		rc = commit_rc = ckpt_node_commit(c, s, why, sizeof(why));
		if (!rc) {
			why[0] = '\0';
			retention_report(c, ckpt_retain_node(c,
				c->cfg.keep_local, false, NULL, why,
				sizeof(why)),
				c->dir, why);
			why[0] = '\0';
		}
		if (!rc && c->cfg.commit_on_nodes)
			nodes_rc = nodes_commit(c, s, nwhy, sizeof(nwhy));
	} else if (!rc && c->rank == 0) {
		rc = commit_rc = local_commit(c, s, why, sizeof(why));
	}
	pthread_mutex_lock(&c->lock);
	if (commit_rc)
		commit_fail(c, s, commit_rc, CKPT_LOCAL, why);
	if (nodes_rc) {
		/* the local level stands: this rank's shard is on its node */
		s->nodes_rc = nodes_rc;
		snprintf(s->nodes_err, sizeof(s->nodes_err), "step %llu: "
			 "commit on the nodes: %s", (unsigned long long)s->step,
			 nwhy[0] ? nwhy : strerror(-nodes_rc));
		snprintf(c->stats.last_error, sizeof(c->stats.last_error),
			 "%s", s->nodes_err);
	}
	if (!s->local_rc) {
		c->stats.local_steps++;
		c->stats.last_local_step = s->step;
		s->t_local_ns = util_now_ns();
		c->stats.local_total_ns += s->t_local_ns - s->t_commit_ns;
	}
	s->local_handled = true;
	pthread_mutex_unlock(&c->lock);
}

static void handle_remote(struct ckpt *c, struct ckpt_step *s)
{
	char why[768] = "";
	int rc, commit_rc = 0;

	pthread_mutex_lock(&c->lock);
	rc = s->remote_rc;
	pthread_mutex_unlock(&c->lock);
	if (!rc)
		rc = commit_rc = remote_commit(c, s, why, sizeof(why));
	if (rc && s->upload_id[0]) {
		struct obj_error err;
		char key[128];

		/* Leave no parts behind; the bucket keeps no half shard. */
		shard_key(c, s->step, key, sizeof(key));
		obj_mpu_abort(c->st, key, s->upload_id, &err);
	}
	pthread_mutex_lock(&c->lock);
	if (commit_rc)
		commit_fail(c, s, commit_rc, CKPT_REMOTE, why);
	if (!s->remote_rc) {
		c->stats.remote_steps++;
		c->stats.last_remote_step = s->step;
		s->t_remote_ns = util_now_ns();
		c->stats.remote_total_ns += s->t_remote_ns - s->t_commit_ns;
	}
	s->remote_handled = true;
	pthread_mutex_unlock(&c->lock);
}

/* Moves a finished step to the done list; frees what it no longer needs.
 * c->lock held. */
static void retire(struct ckpt *c, struct ckpt_step *s)
{
	struct ckpt_step **pp, *old;
	unsigned n = 0;

	for (pp = &c->steps; *pp != s; pp = &(*pp)->next)
		;
	*pp = s->next;
	ckpt_step_release(s);
	if (s->local_rc || s->remote_rc)
		c->stats.steps_failed++;
	s->next = c->done;
	c->done = s;
	c->in_flight--;
	for (pp = &c->done; *pp; pp = &(*pp)->next) {
		if (++n > CKPT_DONE_KEEP) {
			old = *pp;
			*pp = NULL;
			while (old) {
				struct ckpt_step *next = old->next;

				free(old);
				old = next;
			}
			break;
		}
	}
}

static bool finished(const struct ckpt *c, const struct ckpt_step *s)
{
	return (!c->dir || s->local_handled) && (!c->st || s->remote_handled);
}

/* The next event; c->lock held.  Both commits use the marker the writer
 * encodes once every byte is summed.  Steps commit in order at each
 * level: a step's remote commit waits for every older step's, even when
 * its upload finished first (a small step behind a large one), because
 * retention after a commit removes the incomplete steps older than it
 * (the shards and markers another rank already stored for a step still
 * in flight here) and ckpt_wait and last_remote_step promise order.
 * Local events come in order anyway: one writer writes the steps in
 * turn. */
static struct ckpt_step *next_event(struct ckpt *c, bool *remote)
{
	bool local_next = c->dir != NULL, remote_next = c->st != NULL;

	for (struct ckpt_step *s = c->steps; s; s = s->next) {
		bool ready = s->committed && s->marker_ready;

		if (local_next && !s->local_handled) {
			if (ready && s->local_ready) {
				*remote = false;
				return s;
			}
			local_next = false;  /* the oldest goes first */
		}
		if (remote_next && !s->remote_handled) {
			/* commit_on_nodes: a step is committed on the nodes
			 * before in the store, never after */
			if (ready && s->remote_ready &&
			    (!c->cfg.commit_on_nodes || s->local_handled)) {
				*remote = true;
				return s;
			}
			remote_next = false;
		}
		if (!local_next && !remote_next)
			break;
	}
	return NULL;
}

void *ckpt_committer_main(void *arg)
{
	struct ckpt *c = arg;

	for (;;) {
		struct ckpt_step *s;
		bool remote = false;

		pthread_mutex_lock(&c->lock);
		while (!(s = next_event(c, &remote))) {
			struct timespec ts;

			if (c->stopping && !c->steps) {
				pthread_mutex_unlock(&c->lock);
				return NULL;
			}
			/* Refresh the status file once a second while busy,
			 * and after each commit (ckpt_commit asks). */
			ts = util_deadline(1000);
			if ((pthread_cond_timedwait(&c->commit_cond, &c->lock,
						    &ts) == ETIMEDOUT &&
			     c->steps) || c->status_due) {
				c->status_due = false;
				pthread_mutex_unlock(&c->lock);
				ckpt_status_write(c);
				pthread_mutex_lock(&c->lock);
			}
		}
		pthread_mutex_unlock(&c->lock);
		if (remote)
			handle_remote(c, s);
		else
			handle_local(c, s);
		pthread_mutex_lock(&c->lock);
		if (finished(c, s))
			retire(c, s);
		pthread_cond_broadcast(&c->step_cond);
		pthread_mutex_unlock(&c->lock);
		ckpt_status_write(c);
	}
}
