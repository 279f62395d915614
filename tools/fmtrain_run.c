/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_run.c - the training run of `fmtrain train`: model, loader and
 * checkpoint store set up from the options, the step loop with its
 * checkpoint hook, and the figures it prints.
 *
 * A step: the loader's next batch (the time it waited for the reader
 * thread is the step's data wait), zero_grad + forward + backward +
 * AdamW update, and when a checkpoint is due, a save through libfmckpt:
 * the parameters, moments, run record and loader position are copied into
 * staging memory and training goes on while they are written and drained
 * (ckpt_begin, the adds and ckpt_commit: the copy, any wait for an
 * older checkpoint still in flight and the library's bookkeeping, are
 * the step's checkpoint blocking).  Step N is the N-th update; a
 * checkpoint of step N holds the state after it and a resume from it
 * goes on with step N + 1.
 *
 * When a checkpoint is due: every --ckpt-every steps, when --ckpt-secs
 * have passed since the last one, at the Young interval for
 * --ckpt-mtbf (sqrt(2 x cost x MTBF), the cost being the mean blocking
 * time measured so far, turned into steps by the mean step time without
 * checkpoints; the first checkpoint comes after the first step, to
 * measure it), whichever comes first; and always after the last step,
 * or the step during which SIGINT or SIGTERM came.  The run then waits
 * for that last checkpoint to be durable and says so.
 *
 * The model is the back end's (--device: fmtrain_cpu.c, fmtrain_cuda.c).
 * With several ranks (one process per GPU) the set-up first joins the
 * job: rank 0 makes the back end's id (NCCL's) and a run id for
 * libfmckpt, and train_rendezvous hands both to every rank.  Each rank
 * then trains on its own share of the data and opens its own struct
 * ckpt on the shared store; rank 0 alone prints the step lines, writes
 * the CSV and saves the model (replicated: the gradients are averaged
 * inside the step).  Ranks must save the same steps and stop after the
 * same step, but a signal reaches them at different moments and the
 * time-based intervals read each one's clock: so after each step they
 * agree (the back end's agree(), a max over ranks) on "save now" and
 * "stop now".
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fmtrain.h"

#define CHUNK_BYTES (8ull << 20)   /* libfmckpt's default, stated */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* What rank 0 hands the other ranks: the back end's id (NCCL's) and a
 * run id for libfmckpt, fresh for each launch, so that rank 0 never takes
 * a shard marker an earlier launch left for the same step
 * (docs/checkpoint-format.md, "Several ranks"). */
#define JOIN_RUN_ID TRAIN_NCCL_ID_BYTES
#define JOIN_BYTES (TRAIN_NCCL_ID_BYTES + CKPT_RUN_ID_MAX + 1)

struct run {
	const struct fmtrain_opts *o;
	const struct fmtrain_backend *be;
	const struct fmtrain_world *w;
	bool lead;                     /* rank 0: prints, saves the model */
	struct train_config cfg;       /* as the model uses it */
	struct fmtrain_model model;
	struct train_loader *l;
	struct ckpt *c;
	FILE *csv;
	char run_id[CKPT_RUN_ID_MAX + 1];   /* ranks: rank 0's */
	uint64_t first_step;           /* the model's step at the start */
	/* this process's steps, together */
	uint64_t steps;
	double step_ms, wait_ms, block_ms;
	/* checkpoints */
	uint64_t ckpts;
	bool saved;
	uint64_t last_saved;
	double last_save_ms;           /* when (now_ms), or the start */
	uint64_t since_save;           /* steps */
	uint64_t young_steps;          /* --ckpt-mtbf: the interval */
	uint64_t failed_seen;          /* ckpt_stats.steps_failed told */
	struct fmtrain_metrics *met;   /* --metrics, or NULL */
};

static const char *ckpt_target(const struct fmtrain_opts *o)
{
	return o->ckpt_dir ? o->ckpt_dir : o->ckpt_remote;
}

/* ---- set up ---- */

/* The back end can run here: --device cuda in a build without CUDA or
 * on a machine without a GPU stops before anything else is done. */
static int probe(struct run *r)
{
	char name[256] = "", msg[1024] = "";
	int rc;

	if (!r->be->probe)
		return EXIT_OK;
	rc = r->be->probe(name, sizeof(name), msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --device %s: %s\n", r->be->name,
			msg[0] ? msg : strerror(-rc));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* The rendezvous' job string: --job, and a fingerprint of what every
 * rank must have alike (shape, hyperparameters, seed, steps, world,
 * device, checkpoint store), so that ranks started with different
 * options stop at the rendezvous, saying so, instead of training
 * apart.  The --data paths are left out: each machine may mount the
 * data in its own place. */
static void job_string(const struct run *r, char *buf, size_t len)
{
	const struct fmtrain_opts *o = r->o;
	const struct train_config *c = &o->model;
	const uint32_t u[] = {
		c->layers, c->heads, c->channels, c->seq_len, c->vocab_size,
		c->batch, r->w->world_size, o->resume,
	};
	uint64_t h = UTIL_FNV64_BASIS;

	h = util_fnv1a64(h, u, sizeof(u));
	h = util_fnv1a64(h, &c->learning_rate, sizeof(c->learning_rate));
	h = util_fnv1a64(h, &c->seed, sizeof(c->seed));
	h = util_fnv1a64(h, &o->steps, sizeof(o->steps));
	h = util_fnv1a64(h, r->be->name, strlen(r->be->name) + 1);
	if (o->ckpt_dir)
		h = util_fnv1a64(h, o->ckpt_dir, strlen(o->ckpt_dir) + 1);
	if (o->ckpt_remote)
		h = util_fnv1a64(h, o->ckpt_remote, strlen(o->ckpt_remote) + 1);
	snprintf(buf, len, "fmtrain/%s/%016" PRIx64, o->job ? o->job : "", h);
}

static void fresh_run_id(char *buf, size_t len)
{
	uint64_t x;

	if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != sizeof(x))
		x = (uint64_t)(util_now_ns() / 1e6) * 0x9E3779B97F4A7C15ull ^
		    (uint64_t)getpid();
	snprintf(buf, len, "%016" PRIx64, x);
}

/* Several ranks: rank 0's id to everyone (blob: JOIN_BYTES). */
static int join(struct run *r, unsigned char *blob)
{
	const struct fmtrain_opts *o = r->o;
	char job[FMTRAIN_JOB_MAX + 64], msg[1024] = "";
	double t0 = util_now_ns() / 1e6;
	int rc;

	memset(blob, 0, JOIN_BYTES);
	if (r->w->world_size == 1)
		return EXIT_OK;
	if (r->lead) {
		rc = r->be->dist_id(blob, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, PROG ": --device %s with WORLD_SIZE "
				"%u: %s\n", r->be->name, r->w->world_size,
				msg[0] ? msg : strerror(-rc));
			return EXIT_FAIL;
		}
		fresh_run_id((char *)blob + JOIN_RUN_ID, CKPT_RUN_ID_MAX + 1);
	}
	job_string(r, job, sizeof(job));
	rc = train_rendezvous(o->rendezvous, job, r->w->rank,
			      r->w->world_size, blob, JOIN_BYTES,
			      o->rendezvous_timeout_s * 1000u, msg,
			      sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": rank %u of %u: %s\n", r->w->rank,
			r->w->world_size, msg[0] ? msg : strerror(-rc));
		if (rc == -EPROTO)
			fprintf(stderr, PROG ": start every rank with the same "
				"options (and --job, if one is given)\n");
		return rc == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	blob[JOIN_BYTES - 1] = '\0';
	snprintf(r->run_id, sizeof(r->run_id), "%s",
		 (const char *)blob + JOIN_RUN_ID);
	if (r->lead)
		fprintf(stderr, PROG ": rendezvous %s: %u ranks joined in "
			"%.0f ms\n", o->rendezvous, r->w->world_size,
			(util_now_ns() / 1e6) - t0);
	return EXIT_OK;
}

static int init_model(struct run *r, const unsigned char *blob)
{
	char msg[1024] = "";
	int rc;

	r->model.be = r->be;
	rc = r->be->init(&r->model, &r->cfg, r->w, blob, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": %s\n", msg[0] ? msg : strerror(-rc));
		return rc == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	r->cfg = r->model.cfg;
	return EXIT_OK;
}

static int open_csv(struct run *r, bool append)
{
	const char *path = r->o->csv;
	struct stat st;

	if (!path || !r->lead)
		return EXIT_OK;
	append = append && !stat(path, &st) && st.st_size > 0;
	r->csv = fopen(path, append ? "a" : "w");
	if (!r->csv) {
		fprintf(stderr, PROG ": --csv %s: %s\n", path, strerror(errno));
		return EXIT_FAIL;
	}
	if (!append)
		fprintf(r->csv, "step,loss,tok_per_s,data_wait_ms,"
			"ckpt_block_ms,step_ms\n");
	return EXIT_OK;
}

static int open_store(struct run *r)
{
	const struct fmtrain_opts *o = r->o;
	uint64_t model = 3 * (uint64_t)r->be->num_params(&r->model) *
			 sizeof(float);
	uint64_t state = (r->lead ? model : 0) + (1u << 20);
	struct ckpt_config cc;
	char msg[1024];
	int rc;

	ckpt_config_init(&cc);
	cc.dir = o->ckpt_dir;
	cc.remote = o->ckpt_remote;
	cc.obj = o->obj;
	cc.rank = (int)r->w->rank;
	cc.world_size = (int)r->w->world_size;
	/* $FMCKPT_RUN_ID when set (libfmckpt reads it), else rank 0's */
	if (r->run_id[0] && !getenv("FMCKPT_RUN_ID"))
		cc.run_id = r->run_id;
	cc.keep_local = cc.keep_remote = o->keep;
	cc.chunk_bytes = CHUNK_BYTES;
	/* Room for two checkpoints: a save does not wait for the previous
	 * one's writer to free staging unless the store is slower than
	 * one checkpoint interval. */
	cc.staging_bytes = o->staging_bytes ? o->staging_bytes :
		2 * ((state + CHUNK_BYTES - 1) / CHUNK_BYTES) * CHUNK_BYTES;
	rc = ckpt_open(&cc, &r->c, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --ckpt %s: %s\n", ckpt_target(o),
			msg[0] ? msg : strerror(-rc));
		return rc == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	/* Staging now, not in the first checkpoint's blocking time:
	 * pinning the 2.8 GiB of GPT-2 124M's took about 1.2 s on an H200
	 * (docs/gpu.md). */
	rc = ckpt_prepare(r->c, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --ckpt %s: %s (lower --ckpt-staging)\n",
			ckpt_target(o), msg[0] ? msg : strerror(-rc));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* Without --resume a store that holds checkpoints is another run's:
 * refuse to mix the two. */
static int check_empty(struct run *r)
{
	struct ckpt_step_info *v;
	char msg[1024];
	size_t n;
	int rc;

	rc = ckpt_list(r->c, &v, &n, NULL, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --ckpt %s: cannot list checkpoints: "
			"%s\n", ckpt_target(r->o), msg[0] ? msg :
			strerror(-rc));
		return EXIT_FAIL;
	}
	if (n) {
		fprintf(stderr, PROG ": --ckpt %s holds checkpoints already "
			"(newest: step %" PRIu64 "): give --resume to continue "
			"that run, or another --ckpt to start a new one\n",
			ckpt_target(r->o), v[0].step);
		rc = EXIT_USAGE;
	}
	free(v);
	return rc;
}

static int data_error(int rc, const char *msg, const struct run *r,
		      const struct train_pos *resumed)
{
	fprintf(stderr, PROG ": data: %s\n", msg[0] ? msg : strerror(-rc));
	if (rc == -ERANGE)
		fprintf(stderr, PROG ": give --vocab at least the "
			"vocabulary the data was tokenized with (%u for "
			"`fmtrain tokenize`; this run has --vocab %u)\n",
			TRAIN_BYTE_VOCAB, r->cfg.vocab_size);
	if (rc == -EINVAL && resumed) {
		fprintf(stderr, PROG ": resume with the --data, --seq-len "
			"and --seed of the run that saved the checkpoint\n");
		return EXIT_USAGE;
	}
	return EXIT_FAIL;
}

static int open_loader(struct run *r, const struct train_pos *resume)
{
	struct train_loader_config lc;
	char msg[1024] = "";
	int rc;

	train_loader_config_init(&lc);
	lc.batch = r->cfg.batch;
	lc.seq_len = r->cfg.seq_len;
	lc.vocab_size = r->cfg.vocab_size;
	lc.seed = r->cfg.seed;
	lc.rank = (int)r->w->rank;
	lc.world_size = (int)r->w->world_size;
	lc.resume = resume;
	rc = train_loader_open(&lc, r->o->data, r->o->ndata, &r->l, msg,
			       sizeof(msg));
	return rc ? data_error(rc, msg, r, resume) : EXIT_OK;
}

static void banner(const struct run *r)
{
	const struct fmtrain_opts *o = r->o;
	const struct train_config *c = &r->cfg;
	struct train_loader_info li;
	uint64_t per_step = (uint64_t)c->batch * r->w->world_size;
	char where[320], pad[48] = "";
	int threads = 1;

#ifdef _OPENMP
	threads = omp_get_max_threads();
#endif
	if (r->be->ranks)
		snprintf(where, sizeof(where), "on %s, %u rank(s)",
			 r->be->device(&r->model), r->w->world_size);
	else
		snprintf(where, sizeof(where), "%d thread(s)", threads);
	train_loader_info(r->l, &li);
	if (c->padded_vocab_size > c->vocab_size)
		snprintf(pad, sizeof(pad), " (padded to %u)",
			 c->padded_vocab_size);
	fprintf(stderr, PROG ": model: %u layers, %u heads, %u channels, "
		"vocab %u%s, T %u, B %u: %zu parameters, %.1f MiB; lr %g, "
		"seed %" PRIu64 ", %s\n", c->layers, c->heads, c->channels,
		c->vocab_size, pad, c->seq_len, c->batch,
		r->be->num_params(&r->model),
		(double)r->be->bytes(&r->model) / (1 << 20),
		(double)c->learning_rate, c->seed, where);
	fprintf(stderr, PROG ": data: %zu shard(s), %" PRIu64 " tokens, %"
		PRIu64 " sequences an epoch (%" PRIu64 " steps)\n", li.shards,
		li.tokens, li.sequences, li.sequences / per_step);
	if (!r->c)
		return;
	fprintf(stderr, PROG ": checkpoints: %s%s%s", o->ckpt_dir ?
		o->ckpt_dir : "", o->ckpt_dir && o->ckpt_remote ? " and " : "",
		o->ckpt_remote ? o->ckpt_remote : "");
	if (o->ckpt_every)
		fprintf(stderr, ", every %" PRIu64 " steps", o->ckpt_every);
	if (o->ckpt_secs > 0)
		fprintf(stderr, ", every %g s", o->ckpt_secs);
	if (o->ckpt_mtbf_h > 0)
		fprintf(stderr, ", Young interval for an MTBF of %g h",
			o->ckpt_mtbf_h);
	fprintf(stderr, ", after the last step");
	if (o->keep)
		fprintf(stderr, "; the newest %u kept", o->keep);
	fprintf(stderr, "\n");
}

/* ---- checkpoints ---- */

static bool save_due(const struct run *r, uint64_t step, double now,
		     bool stopping)
{
	const struct fmtrain_opts *o = r->o;

	if (step == o->steps || stopping)
		return true;
	if (o->ckpt_every && step % o->ckpt_every == 0)
		return true;
	if (o->ckpt_secs > 0 && now - r->last_save_ms >= o->ckpt_secs * 1e3)
		return true;
	if (o->ckpt_mtbf_h > 0 && (!r->ckpts || r->since_save >= r->young_steps))
		return true;
	return false;
}

/* Young's interval from what checkpoints and steps cost so far. */
static void young_update(struct run *r)
{
	double cost_s = r->block_ms / (double)r->ckpts / 1e3;
	double mtbf_s = r->o->ckpt_mtbf_h * 3600.0;
	double step_s = (r->step_ms - r->block_ms) / (double)r->steps / 1e3;
	double t_s = sqrt(2.0 * cost_s * mtbf_s);
	uint64_t n = step_s > 0 ? (uint64_t)ceil(t_s / step_s) : 1;

	if (n < 1)
		n = 1;
	if (!r->young_steps || n * 5 < r->young_steps * 4 ||
	    n * 4 > r->young_steps * 5)
		fprintf(stderr, PROG ": checkpoint interval (Young): sqrt(2 x "
			"%.3f ms x %g h) = %.3f s = %" PRIu64 " step(s) of "
			"%.3f ms\n", cost_s * 1e3, r->o->ckpt_mtbf_h, t_s, n,
			step_s * 1e3);
	r->young_steps = n;
}

static int save(struct run *r, uint64_t step, double *block_ms)
{
	struct train_tensor t[TRAIN_TENSORS];
	struct train_pos pos;
	struct fmtrain_save sv = {
		.cfg = &r->cfg, .t = t, .pos = &pos, .data_seed = r->cfg.seed,
		.flags = r->be->device_memory ? CKPT_ADD_DEVICE : 0,
	};
	uint64_t ns = 0;
	char msg[1024] = "";
	int rc;

	train_loader_position(r->l, &pos);
	if (r->lead) {   /* the model is replicated: rank 0 saves it */
		sv.n = r->be->tensors(&r->model, t, TRAIN_TENSORS);
		if (sv.n > TRAIN_TENSORS)
			sv.n = TRAIN_TENSORS;
	}
	rc = fmtrain_ckpt_save(r->c, &sv, step, &ns, msg, sizeof(msg));
	*block_ms = (double)ns / 1e6;
	if (rc == -EEXIST) {
		/* resumed from an older step than the newest (--resume=N) */
		fprintf(stderr, PROG ": step %" PRIu64 ": not saved: %s\n",
			step, msg);
		return EXIT_OK;
	}
	if (rc) {
		fprintf(stderr, PROG ": checkpoint of step %" PRIu64 " to %s "
			"failed: %s\n", step, ckpt_target(r->o), msg[0] ? msg :
			strerror(-rc));
		return EXIT_FAIL;
	}
	r->ckpts++;
	r->saved = true;
	r->last_saved = step;
	r->since_save = 0;
	return EXIT_OK;
}

/* A save fails behind the training thread's back (a write, an upload):
 * say so when it is seen; the final wait fails the run if the last one
 * is lost. */
static void check_failed(struct run *r)
{
	struct ckpt_stats st;

	ckpt_get_stats(r->c, &st);
	if (st.steps_failed > r->failed_seen) {
		fprintf(stderr, PROG ": warning: %" PRIu64 " checkpoint(s) "
			"failed in the background: %s\n",
			st.steps_failed - r->failed_seen, st.last_error);
		r->failed_seen = st.steps_failed;
	}
}

static int wait_durable(struct run *r)
{
	const struct fmtrain_opts *o = r->o;
	double t0 = util_now_ns() / 1e6;
	char msg[1024] = "";
	int rc;

	rc = ckpt_wait(r->c, r->last_saved, CKPT_DURABLE, 0, msg, sizeof(msg));
	/* With a directory and a store, the local commit too: then every
	 * step saved has finished at every level (each level commits in
	 * order), and the counts and warnings that follow are final. */
	if (!rc && o->ckpt_dir && o->ckpt_remote)
		rc = ckpt_wait(r->c, r->last_saved, CKPT_LOCAL, 0, msg,
			       sizeof(msg));
	if (!rc && !r->lead)
		return EXIT_OK;
	if (rc) {
		fprintf(stderr, PROG ": checkpoint of step %" PRIu64 " did not "
			"become durable in %s: %s\n", r->last_saved,
			o->ckpt_remote ? o->ckpt_remote : o->ckpt_dir,
			msg[0] ? msg : strerror(-rc));
		return EXIT_FAIL;
	}
	printf("checkpoint step %" PRIu64 " durable: %s %s (waited %.3f ms "
	       "after the last step)\n", r->last_saved, o->ckpt_remote ?
	       "manifest stored in" : "committed and fsynced in",
	       o->ckpt_remote ? o->ckpt_remote : o->ckpt_dir,
	       (util_now_ns() / 1e6) - t0);
	return EXIT_OK;
}

/* ---- the loop ---- */

/* The step's line and CSV row (rank 0); tokens/s counts every rank's. */
static void report(struct run *r, uint64_t step, float loss, double wait,
		   double block, double ms)
{
	double tokens = (double)r->cfg.batch * r->cfg.seq_len *
			r->w->world_size;
	double tps = ms > 0 ? tokens * 1e3 / ms : 0;

	if (!r->lead)
		return;

	printf("step %" PRIu64 " loss %.9g tok/s %.0f data-wait-ms %.3f "
	       "ckpt-block-ms %.3f\n", step, (double)loss, tps, wait, block);
	if (r->csv) {
		fprintf(r->csv, "%" PRIu64 ",%.9g,%.1f,%.3f,%.3f,%.3f\n", step,
			(double)loss, tps, wait, block, ms);
		fflush(r->csv);
	}
}

/* Several ranks: a checkpoint and a stop are taken by all or by none
 * (the largest over the ranks of each rank's signal and "due"). */
static int agree(struct run *r, int *sig, bool *due)
{
	uint32_t v[2] = { (uint32_t)*sig, *due };
	char msg[1024] = "";
	int rc;

	rc = r->be->agree(&r->model, v, 2, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": rank %u: cannot agree with the other "
			"ranks on saving and stopping: %s\n", r->w->rank,
			msg[0] ? msg : strerror(-rc));
		return EXIT_FAIL;
	}
	*sig = (int)v[0];
	*due = v[1] != 0;
	if (*sig && !stop_signal)
		stop_signal = *sig;   /* another rank's: stop as it does */
	return EXIT_OK;
}

static int train_loop(struct run *r)
{
	char msg[1024] = "";
	int rc;

	r->last_save_ms = util_now_ns() / 1e6;
	for (uint64_t step = r->first_step + 1; step <= r->o->steps; step++) {
		struct train_batch b;
		double t0 = util_now_ns() / 1e6, block = 0, ms;
		bool saved = false, due;
		float loss;
		int sig;

		rc = train_loader_next(r->l, &b, msg, sizeof(msg));
		if (rc)
			return data_error(rc, msg, r, NULL);
		rc = r->be->step(&r->model, b.inputs, b.targets, &loss, msg,
				 sizeof(msg));
		if (rc) {
			fprintf(stderr, PROG ": step %" PRIu64 ": %s%s\n", step,
				msg, rc == -ERANGE ? " (the run diverged: "
				"lower --lr)" : "");
			return EXIT_FAIL;
		}
		r->steps++;
		r->since_save++;
		/* Read once: a signal that comes later is the next step's. */
		sig = stop_signal;
		due = r->c && save_due(r, step, util_now_ns() / 1e6, sig != 0);
		if (r->w->world_size > 1 && (rc = agree(r, &sig, &due)))
			return rc;
		if (due) {
			uint64_t before = r->ckpts;

			rc = save(r, step, &block);
			if (rc)
				return rc;
			saved = r->ckpts > before;
			r->last_save_ms = util_now_ns() / 1e6;
		}
		ms = util_now_ns() / 1e6 - t0;
		r->step_ms += ms;
		r->wait_ms += b.wait_ms;
		r->block_ms += block;
		fmtrain_metrics_step(r->met, step, ms, b.wait_ms, block,
				     (uint64_t)r->cfg.batch * r->cfg.seq_len *
				     r->w->world_size);
		report(r, step, loss, b.wait_ms, block, ms);
		if (r->c) {
			check_failed(r);
			if (r->o->ckpt_mtbf_h > 0 && saved)
				young_update(r);
		}
		if (sig) {
			if (r->lead)
				fprintf(stderr, PROG ": stopped by signal %d "
					"(%s) after step %" PRIu64 "%s\n", sig,
					strsignal(sig), step, r->c ?
					", checkpoint saved" : "");
			break;
		}
	}
	return EXIT_OK;
}

/* What was durably saved, from libfmckpt's counts (not the saves
 * begun: one that failed behind the run's back is not a checkpoint):
 * committed in the directory, or stored in the bucket when that is the
 * only target; with both, what reached the bucket is said apart. */
static void ckpt_counts(const struct run *r, uint64_t *saved,
			uint64_t *drained, uint64_t *failed)
{
	struct ckpt_stats st;

	*saved = *drained = *failed = 0;
	if (!r->c)
		return;
	ckpt_get_stats(r->c, &st);
	*saved = r->o->ckpt_dir ? st.local_steps : st.remote_steps;
	*drained = st.remote_steps;
	*failed = st.steps_failed;
}

static void summary(const struct run *r)
{
	uint64_t tokens = r->steps * r->cfg.batch * r->cfg.seq_len *
			  r->w->world_size;
	double share = r->step_ms > 0 ? 100.0 / r->step_ms : 0;
	uint64_t saved, drained, failed;
	char extra[96] = "";

	ckpt_counts(r, &saved, &drained, &failed);
	if (r->o->ckpt_dir && r->o->ckpt_remote)
		snprintf(extra, sizeof(extra), " ckpt-drained %" PRIu64,
			 drained);
	printf("summary steps %" PRIu64 " (%" PRIu64 "-%" PRIu64 ") mean-tok/s "
	       "%.0f mean-step-ms %.3f data-wait-ms %.3f (%.2f%% of step time) "
	       "checkpoints %" PRIu64 "%s ckpt-failed %" PRIu64 " ckpt-block-ms "
	       "%.3f (%.2f%% of step time)\n", r->steps,
	       r->first_step + (r->steps ? 1 : 0), r->first_step + r->steps,
	       r->step_ms > 0 ? (double)tokens * 1e3 / r->step_ms : 0,
	       r->steps ? r->step_ms / (double)r->steps : 0, r->wait_ms,
	       r->wait_ms * share, saved, extra, failed, r->block_ms,
	       r->block_ms * share);
}

/* Where the blocking went: libfmckpt's copy into staging is the floor;
 * the rest is begin and commit bookkeeping (on an fmfs mount, metadata
 * round trips: a stat of the step, the status file). */
static void ckpt_breakdown(const struct run *r)
{
	struct ckpt_stats st;

	const struct fmtrain_opts *o = r->o;
	uint64_t saved, drained, failed;
	char extra[PATH_MAX + 64] = "";

	ckpt_counts(r, &saved, &drained, &failed);
	if (o->ckpt_dir && o->ckpt_remote)
		snprintf(extra, sizeof(extra), ", %" PRIu64 " drained to %s",
			 drained, o->ckpt_remote);
	ckpt_get_stats(r->c, &st);
	fprintf(stderr, PROG ": checkpoints: %" PRIu64 " saved (%s %s)%s, %"
		PRIu64 " failed, of %" PRIu64 " begun; blocking %.3f ms in all, "
		"of which copying into staging %.3f ms (%" PRIu64 " waited for "
		"staging, %" PRIu64 " for older checkpoints); staging %.1f MiB, "
		"peak %.1f MiB\n", saved, o->ckpt_dir ? "committed in" :
		"stored in", o->ckpt_dir ? o->ckpt_dir : o->ckpt_remote, extra,
		failed, r->ckpts, r->block_ms,
		(double)st.commit_total_ns / 1e6,
		st.staging_waits, st.pending_waits,
		(double)st.staging_bytes / (1 << 20),
		(double)st.staging_peak_bytes / (1 << 20));
}

/* ---- the run ---- */

static int set_aside(struct run *r, const struct fmtrain_resume *res)
{
	char msg[2048] = "";
	size_t moved = 0;
	int rc;

	rc = ckpt_set_aside(r->c, res->step, &moved, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --resume: cannot move the checkpoints "
			"newer than step %" PRIu64 " out of the way: %s.  Move "
			"or remove them, or resume the newest\n", res->step,
			msg[0] ? msg : strerror(-rc));
		return EXIT_FAIL;
	}
	if (moved)
		fprintf(stderr, PROG ": --resume: moved %zu newer step(s) aside "
			"to %s (kept, not removed: fmtrain(1), --resume, says "
			"how to take one back)\n", moved, msg);
	return EXIT_OK;
}

static int resume_state(struct run *r, struct fmtrain_resume *res)
{
	const struct fmtrain_opts *o = r->o;
	struct fmtrain_opts eff = *o;
	int rc;

	eff.model = r->cfg;   /* the padded vocabulary as the model has it */
	rc = fmtrain_resume_open(r->c, &eff, res);
	if (rc)
		return rc;
	if (!res->found) {
		if (r->lead)
			fprintf(stderr, PROG ": --resume: no checkpoint in "
				"%s%s; starting from step 0\n",
				ckpt_target(o), res->incomplete ? " (only "
				"incomplete ones, ignored)" : "");
		return EXIT_OK;
	}
	/* Steps newer than the one resumed are the future this run
	 * replaces (a --resume=STEP past them, or incomplete ones): moved
	 * aside, never removed, so that this run saves its own and a
	 * corrupt one is not kept.  Rank 0, before the ranks meet in
	 * fmtrain_resume_finish and so before any of them saves. */
	if (r->lead && (rc = set_aside(r, res)))
		return rc;
	/* the loader reads while the tensors load */
	rc = open_loader(r, &res->pos);
	if (rc)
		return rc;
	rc = fmtrain_resume_finish(res, &r->model, r->lead);
	if (rc)
		return rc;
	r->first_step = res->step;
	if (r->lead)
		fprintf(stderr, PROG ": resumed from checkpoint step %" PRIu64
			" in %s; continuing with step %" PRIu64 "\n",
			res->step, res->where, res->step + 1);
	return EXIT_OK;
}

static int setup(struct run *r, struct fmtrain_resume *res)
{
	const struct fmtrain_opts *o = r->o;
	unsigned char blob[JOIN_BYTES];
	char msg[1024] = "";
	int rc;

	/* what needs no device first: a bad shape is a usage error */
	rc = train_config_check(&r->cfg, NULL, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": %s\n", msg[0] ? msg : strerror(-rc));
		return rc == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	if ((rc = probe(r)) || (rc = join(r, blob)))
		return rc;
	/* The loader as early as its position is known, so that its thread
	 * reads the first shard while the model is set up (a GPU context,
	 * NCCL, a checkpoint read) instead of at step 1: at once for a
	 * fresh run, after the checkpoint's position for a resumed one. */
	if (!o->resume && (rc = open_loader(r, NULL)))
		return rc;
	/* The model before the store: the back end picks this rank's GPU,
	 * and libfmckpt's CUDA stream and pinned staging go to the device
	 * current when the store opens. */
	if ((rc = init_model(r, blob)))
		return rc;
	if (o->ckpt_dir || o->ckpt_remote) {
		if ((rc = open_store(r)))
			return rc;
		rc = o->resume ? resume_state(r, res) : check_empty(r);
		if (rc)
			return rc;
	}
	if (o->resume && !r->l &&
	    (rc = open_loader(r, res->found ? &res->pos : NULL)))
		return rc;
	return open_csv(r, res->found);
}

int fmtrain_run(const struct fmtrain_opts *o)
{
	struct run r = {
		.o = o, .be = o->backend, .w = &o->world,
		.lead = o->world.rank == 0, .cfg = o->model,
	};
	struct fmtrain_resume res = { 0 };
	struct sigaction sa;
	int rc, rc2;

#ifdef _OPENMP
	if (o->threads)
		omp_set_num_threads((int)o->threads);
#endif
	rc = setup(&r, &res);
	if (rc)
		goto out;
	if (o->metrics) {
		char msg[400];

		r.met = fmtrain_metrics_start(o->metrics, o->world.rank,
					      o->world.local_rank, r.be->name,
					      msg, sizeof(msg));
		if (!r.met) {
			fprintf(stderr, PROG ": --metrics: %s\n", msg);
			rc = EXIT_FAIL;
			goto out;
		}
		fmtrain_metrics_ckpt(r.met, r.c);
	}
	if (r.lead)
		banner(&r);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND;   /* a second one kills at once */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (r.first_step >= o->steps && r.lead)
		fprintf(stderr, PROG ": the model is at step %" PRIu64 ", "
			"--steps is %" PRIu64 ": nothing to do\n", r.first_step,
			o->steps);
	rc = train_loop(&r);
	/* The last checkpoint first: the summary counts what was durably
	 * saved, and every failure has been told by then. */
	if (r.c && r.saved) {
		rc2 = wait_durable(&r);
		if (!rc)
			rc = rc2;
	}
	if (r.c)
		check_failed(&r);
	if (r.lead)
		summary(&r);
	if (r.c && r.ckpts && r.lead)
		ckpt_breakdown(&r);
	if (!rc && stop_signal)
		rc = 128 + stop_signal;
out:
	fmtrain_metrics_stop(r.met); /* before the store it reads closes */
	fmtrain_resume_release(&res);
	train_loader_close(r.l);
	if (r.c) {
		char msg[1024] = "";
		struct ckpt_stats st;

		/* Its error is a step that failed and no ckpt_wait reported:
		 * a warning said so already, unless it failed since (a step
		 * of a run that stopped early); only the last checkpoint
		 * failing fails the run. */
		ckpt_get_stats(r.c, &st);
		if (ckpt_close(r.c, msg, sizeof(msg)) && !rc &&
		    st.steps_failed > r.failed_seen) {
			fprintf(stderr, PROG ": checkpoints: %s\n", msg);
			rc = EXIT_FAIL;
		}
	}
	if (r.csv && fclose(r.csv) && !rc) {
		fprintf(stderr, PROG ": --csv %s: %s\n", o->csv,
			strerror(errno));
		rc = EXIT_FAIL;
	}
	if (r.model.priv)
		r.be->free(&r.model);
	return rc;
}
