/* SPDX-License-Identifier: MIT */
/*
 * wait.c - waiting for a step to reach a level (copied, durable on the
 * local disk, in the remote store), the statistics, and the status file
 * that `fmckpt status` reads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

/* ---- waiting ---- */

static bool level_done(const struct ckpt_step *s, bool local, bool remote)
{
	return (!local || s->local_handled) && (!remote || s->remote_handled);
}

/* Other ranks: poll until rank 0's manifest is there. */
static int wait_manifest(struct ckpt *c, uint64_t step, bool remote,
			 const char *mf, uint64_t deadline, char *msg,
			 size_t msg_len)
{
	char name[64], key[96];
	unsigned sleep_ms = 5;

	ckpt_step_name(step, name, sizeof(name));
	snprintf(key, sizeof(key), "%s/%s", name, mf);
	for (;;) {
		if (!remote && ckpt_committed_locally(c, step))
			return 0;
		if (remote) {
			struct obj_error err;
			struct obj_meta m;
			obj_status os = obj_head(c->st, key, &m, &err);

			if (os == OBJ_OK) {
				obj_meta_release(&m);
				return 0;
			}
			if (os != OBJ_ERR_NOT_FOUND)
				return ckpt_obj_fail(&err, os, key, msg,
						     msg_len);
		}
		if (deadline && util_now_ns() >= deadline) {
			util_msg(msg, msg_len, "step %llu: this rank's shard is "
				 "durable but rank 0 has not committed the "
				 "checkpoint %s yet (no %s)",
				 (unsigned long long)step, remote ?
				 "remotely" : "locally", key);
			return -ETIMEDOUT;
		}
		usleep(sleep_ms * 1000);
		if (sleep_ms < 200)
			sleep_ms *= 2;
	}
}

static int timed_wait(pthread_cond_t *cv, pthread_mutex_t *m,
		      uint64_t deadline)
{
	struct timespec ts;

	if (!deadline)
		return pthread_cond_wait(cv, m);
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	return pthread_cond_timedwait(cv, m, &ts);
}

int ckpt_wait(struct ckpt *c, uint64_t step, enum ckpt_level level,
	      unsigned timeout_ms, char *msg, size_t msg_len)
{
	uint64_t deadline = timeout_ms ? util_now_ns() +
			    timeout_ms * 1000000ull : 0;
	bool local = false, remote = false, nodes = level == CKPT_NODES;
	struct ckpt_step *s;
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (nodes && !c->cfg.commit_on_nodes) {
		util_msg(msg, msg_len, "CKPT_NODES needs commit_on_nodes (and "
			 "node_local) set when the store is opened");
		return -EINVAL;
	}
	if (level == CKPT_DURABLE)
		level = c->st ? CKPT_REMOTE : CKPT_LOCAL;
	/* the commit on the nodes is made with the local level's */
	local = level == CKPT_LOCAL || nodes;
	remote = level == CKPT_REMOTE;
	if ((local && !c->dir) || (remote && !c->st) || (!local && !remote)) {
		util_msg(msg, msg_len, "no %s store configured to wait for",
			 local ? "local" : "remote");
		return -EINVAL;
	}
	pthread_mutex_lock(&c->lock);
	s = ckpt_find_step(c, step);
	while (s && !level_done(s, local, remote) && !rc) {
		if (timed_wait(&c->step_cond, &c->lock, deadline) == ETIMEDOUT)
			rc = -ETIMEDOUT;
		s = ckpt_find_step(c, step);
	}
	if (!s) {
		pthread_mutex_unlock(&c->lock);
		if (local && ckpt_committed_locally(c, step))
			return 0;
		util_msg(msg, msg_len, "step %llu was not saved through this "
			 "handle", (unsigned long long)step);
		return -ENOENT;
	}
	if (rc) {
		util_msg(msg, msg_len, "step %llu is not yet committed %s after "
			 "%u ms", (unsigned long long)step,
			 local ? "locally" : "remotely", timeout_ms);
	} else if (local ? s->local_rc : s->remote_rc) {
		rc = local ? s->local_rc : s->remote_rc;
		util_msg(msg, msg_len, "%s", local ? s->local_err :
			 s->remote_err);
		s->reported = true;
	} else if (nodes && s->nodes_rc) {
		rc = s->nodes_rc;
		util_msg(msg, msg_len, "%s", s->nodes_err);
	}
	pthread_mutex_unlock(&c->lock);
	if (!deadline)
		deadline = util_now_ns() + 2000000ull *
			   c->cfg.barrier_timeout_ms;
	/* On a node's own directory no manifest is made: its shard there
	 * is the whole of the local level. */
	if (!rc && c->rank != 0 && nodes)
		rc = wait_manifest(c, step, true, CKPT_NODES_MANIFEST_NAME,
				   deadline, msg, msg_len);
	else if (!rc && c->rank != 0 && !(local && c->cfg.node_local))
		rc = wait_manifest(c, step, remote, CKPT_MANIFEST_NAME,
				   deadline, msg, msg_len);
	return rc;
}

void ckpt_get_stats(struct ckpt *c, struct ckpt_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	out->steps_in_flight = c->in_flight;
	pthread_mutex_unlock(&c->lock);
}

/* ---- status file ---- */

static const char *step_state(const struct ckpt *c, const struct ckpt_step *s)
{
	if (!s->committed)
		return "staging";
	if (c->dir && !s->local_handled)
		return s->local_ready ? "committing" : "writing";
	if (c->st && !s->remote_handled)
		return "draining";
	return s->local_rc || s->remote_rc ? "failed" : "done";
}

/* One "key value" per line; `fmckpt status` parses it.  Values are the
 * rest of the line (newlines in error messages become spaces). */
void ckpt_status_write(struct ckpt *c)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 80], err[512];
	struct ckpt_stats st;
	FILE *f;

	if (!c->status_dir[0])
		return;
	pthread_mutex_lock(&c->status_lock);
	snprintf(path, sizeof(path), "%s/status-rank-%05u", c->status_dir,
		 c->rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f && !ckpt_mkdir_p(c->status_dir, NULL, 0))
		f = fopen(tmp, "w");
	if (!f) {
		pthread_mutex_unlock(&c->status_lock);
		return;
	}
	pthread_mutex_lock(&c->lock);
	st = c->stats;
	fprintf(f, "pid %d\nrank %u\nworld_size %u\nupdated_unix_s %lld\n"
		"dir %s\nremote %s\nstaging_bytes %llu\n"
		"staging_used_bytes %llu\nstaging_peak_bytes %llu\n"
		"chunk_bytes %llu\ncommits %llu\ncommit_last_ns %llu\n"
		"staging_waits %llu\npending_waits %llu\n"
		"bytes_written %llu\nbytes_uploaded %llu\nsteps_failed %llu\n"
		"uring %d\n", (int)getpid(), c->rank, c->world,
		(long long)time(NULL), c->dir ? c->dir : "-",
		c->remote ? c->remote : "-",
		(unsigned long long)st.staging_bytes,
		(unsigned long long)st.staging_used_bytes,
		(unsigned long long)st.staging_peak_bytes,
		(unsigned long long)st.chunk_bytes,
		(unsigned long long)st.commits,
		(unsigned long long)st.commit_last_ns,
		(unsigned long long)st.staging_waits,
		(unsigned long long)st.pending_waits,
		(unsigned long long)st.bytes_written,
		(unsigned long long)st.bytes_uploaded,
		(unsigned long long)st.steps_failed, st.uring);
	if (st.last_local_step != CKPT_STEP_NONE)
		fprintf(f, "last_local_step %llu\n",
			(unsigned long long)st.last_local_step);
	if (st.last_remote_step != CKPT_STEP_NONE)
		fprintf(f, "last_remote_step %llu\n",
			(unsigned long long)st.last_remote_step);
	for (struct ckpt_step *s = c->steps; s; s = s->next)
		fprintf(f, "step %llu %s %llu %llu %llu\n",
			(unsigned long long)s->step, step_state(c, s),
			(unsigned long long)s->file_bytes,
			(unsigned long long)s->bytes_written,
			(unsigned long long)s->bytes_uploaded);
	snprintf(err, sizeof(err), "%s", st.last_error);
	pthread_mutex_unlock(&c->lock);
	for (char *p = err; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (err[0])
		fprintf(f, "last_error %s\n", err);
	if (fclose(f) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
	pthread_mutex_unlock(&c->status_lock);
}
