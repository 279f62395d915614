/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_metrics.c - `fmtrain train --metrics ADDR:PORT`: the run's
 * step time, tokens, data wait and checkpoint blocking, and the stats of
 * the libfmckpt it hosts (commits, their blocking, drain times and
 * bytes, failures), served in Prometheus' text format from a thread of
 * metrics/ while the loop trains.  Each rank serves its own figures, on
 * PORT + LOCAL_RANK, so that the ranks of one machine given the same
 * --metrics do not collide; docs/metrics.md lists them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fmtrain.h"
#include "metrics/metrics.h"

struct fmtrain_metrics {
	struct metrics_http *http;
	struct ckpt *_Atomic c;
	unsigned rank;
	const char *device;
	atomic_uint_fast64_t steps, tokens, last_step;
	atomic_uint_fast64_t step_ns, wait_ns, block_ns;
	atomic_uint_fast64_t last_tok_s;   /* the last step's, rounded */
	struct util_hist step_h, wait_h, block_h;
};

static void ckpt_part(struct fmtrain_metrics *m, FILE *out)
{
	struct ckpt *c = atomic_load(&m->c);
	struct ckpt_stats s;

	if (!c)
		return;
	ckpt_get_stats(c, &s);
	metrics_counter(out, "fmckpt_commits_total", "Checkpoints handed to "
			"libfmckpt (the copy the training waited for)",
			s.commits);
	metrics_counter_f64(out, "fmckpt_commit_blocking_seconds_total",
			    "Time the training waited in commits, in all",
			    (double)s.commit_total_ns / 1e9);
	metrics_gauge(out, "fmckpt_commit_blocking_last_seconds", "Time the "
		      "last commit blocked", (double)s.commit_last_ns / 1e9);
	metrics_counter(out, "fmckpt_local_steps_total", "Checkpoints "
			"committed durably in the directory", s.local_steps);
	metrics_counter(out, "fmckpt_remote_steps_total", "Checkpoints "
			"stored in the bucket (manifest last)",
			s.remote_steps);
	metrics_counter_f64(out, "fmckpt_local_seconds_total", "Time from "
			    "commit to durable in the directory, summed over "
			    "checkpoints", (double)s.local_total_ns / 1e9);
	metrics_counter_f64(out, "fmckpt_drain_seconds_total", "Time from "
			    "commit to stored in the bucket, summed over "
			    "checkpoints", (double)s.remote_total_ns / 1e9);
	metrics_counter(out, "fmckpt_written_bytes_total", "Bytes written to "
			"local shard files", s.bytes_written);
	metrics_counter(out, "fmckpt_drained_bytes_total", "Bytes stored in "
			"the bucket", s.bytes_uploaded);
	metrics_counter(out, "fmckpt_failures_total", "Checkpoints that "
			"failed at some level", s.steps_failed);
	metrics_gauge(out, "fmckpt_steps_in_flight", "Checkpoints being "
		      "written or drained", s.steps_in_flight);
	metrics_gauge(out, "fmckpt_staging_used_bytes", "Staging memory "
		      "held", (double)s.staging_used_bytes);
}

static void render(FILE *out, void *arg)
{
	struct fmtrain_metrics *m = arg;
	char l[128];

	metrics_family(out, "fmtrain_build_info", "gauge", "1, labelled "
		       "with the version, the device and the rank");
	snprintf(l, sizeof(l), "version=\"%s\",device=\"%s\",rank=\"%u\"",
		 FMFS_VERSION, m->device, m->rank);
	metrics_u64(out, "fmtrain_build_info", l, 1);
	metrics_counter(out, "fmtrain_steps_total", "Optimizer steps this "
			"process ran", atomic_load(&m->steps));
	metrics_gauge(out, "fmtrain_step", "The model's step after the last "
		      "one", (double)atomic_load(&m->last_step));
	metrics_counter(out, "fmtrain_tokens_total", "Tokens trained on, "
			"all ranks", atomic_load(&m->tokens));
	metrics_gauge(out, "fmtrain_tokens_per_second", "Tokens per second "
		      "of the last step, all ranks",
		      (double)atomic_load(&m->last_tok_s));
	metrics_family(out, "fmtrain_step_duration_seconds", "histogram",
		       "Wall time of a step: data wait, forward, backward, "
		       "update, checkpoint blocking");
	metrics_hist(out, "fmtrain_step_duration_seconds", "", &m->step_h);
	metrics_family(out, "fmtrain_data_wait_seconds", "histogram",
		       "Time a step waited for its batch (the loader)");
	metrics_hist(out, "fmtrain_data_wait_seconds", "", &m->wait_h);
	metrics_family(out, "fmtrain_checkpoint_blocking_seconds",
		       "histogram", "Time a checkpointing step waited for "
		       "libfmckpt's copy");
	metrics_hist(out, "fmtrain_checkpoint_blocking_seconds", "",
		     &m->block_h);
	ckpt_part(m, out);
}

/* addr with its port moved up by local_rank (ADDR:0 stays 0, any free
 * port); -ERANGE past 65535. */
static int rank_addr(const char *addr, unsigned local_rank, char *out,
		     size_t len)
{
	const char *colon = strrchr(addr, ':');
	unsigned long port;
	char *end;

	if (!colon)
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end)
		return -EINVAL;
	if (port && port + local_rank > 65535)
		return -ERANGE;
	snprintf(out, len, "%.*s:%lu", (int)(colon - addr), addr,
		 port ? port + local_rank : 0);
	return 0;
}

struct fmtrain_metrics *fmtrain_metrics_start(const char *addr,
					      unsigned rank,
					      unsigned local_rank,
					      const char *device, char *msg,
					      size_t ml)
{
	struct fmtrain_metrics *m;
	char at[300];

	if (rank_addr(addr, local_rank, at, sizeof(at))) {
		snprintf(msg, ml, "%s: port + LOCAL_RANK (%u) is past 65535 "
			 "(or not ADDR:PORT): give a lower port", addr,
			 local_rank);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(msg, ml, "out of memory");
		return NULL;
	}
	m->rank = rank;
	m->device = device;
	m->http = metrics_http_start(at, render, m, msg, ml);
	if (!m->http) {
		free(m);
		return NULL;
	}
	return m;
}

void fmtrain_metrics_ckpt(struct fmtrain_metrics *m, struct ckpt *c)
{
	if (m)
		atomic_store(&m->c, c);
}

void fmtrain_metrics_step(struct fmtrain_metrics *m, uint64_t step,
			  double step_ms, double wait_ms, double block_ms,
			  uint64_t tokens)
{
	if (!m)
		return;
	atomic_fetch_add(&m->steps, 1);
	atomic_store(&m->last_step, step);
	atomic_fetch_add(&m->tokens, tokens);
	atomic_store(&m->last_tok_s, step_ms > 0 ?
		     (uint64_t)(tokens * 1e3 / step_ms + 0.5) : 0);
	util_hist_add(&m->step_h, (uint64_t)(step_ms * 1e6));
	util_hist_add(&m->wait_h, (uint64_t)(wait_ms * 1e6));
	if (block_ms > 0)
		util_hist_add(&m->block_h, (uint64_t)(block_ms * 1e6));
}

void fmtrain_metrics_stop(struct fmtrain_metrics *m)
{
	if (!m)
		return;
	metrics_http_stop(m->http);
	free(m);
}
