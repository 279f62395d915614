/* SPDX-License-Identifier: MIT */
/*
 * fmtrain.h - shared by fmtrain's files (tools/fmtrain*.c): the
 * subcommands and the usage text, the options of `fmtrain train` as
 * parsed, the run loop, the back ends and the checkpoint state.
 *
 * fmtrain.c: main(), the usage text, the table of subcommands.
 * fmtrain_tokenize.c: tokenize.  fmtrain_train.c: train's options and
 * their checks; the parts of train: fmtrain_run.c (the run loop),
 * fmtrain_ckpt.c (what a checkpoint holds, --resume), fmtrain_cpu.c and
 * fmtrain_cuda.c (the back ends).
 *
 * Where the run loop lives.  It stays in tools/, not in train/: it is
 * glue between three modules (train's model and loader, libfmckpt, and
 * the output a person or a script reads), and most of it is policy a
 * front end owns: when to checkpoint, what to print, which options must
 * match on a resume, exit codes.  train/ keeps the mechanisms (model,
 * loader, their state for a checkpoint).
 *
 * Back ends.  The model runs on the CPU (train/model.h) or on a GPU
 * (train/gpu.h), behind a small table of functions, struct
 * fmtrain_backend (fmtrain_cpu.c, fmtrain_cuda.c), so the run loop and
 * the checkpoint code are written once.  Only a back end with `ranks`
 * runs as several processes (RANK, WORLD_SIZE, LOCAL_RANK): one per
 * GPU, data parallel, rank 0 the one that prints, writes the CSV and
 * saves the (replicated) model.
 */
#ifndef FMFS_TOOLS_FMTRAIN_H
#define FMFS_TOOLS_FMTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "train/data.h"
#include "train/gpu.h"
#include "train/model.h"
#include "tools.h"

#define PROG "fmtrain"
#define FMTRAIN_DATA_MAX 1024   /* --data paths */

#define FMTRAIN_JOB_MAX 200            /* --job */
#define FMTRAIN_RDV_TIMEOUT_S 600      /* --rendezvous-timeout */

/* Exit codes (docs/fmtrain.1), those of tools.h: EXIT_OK; EXIT_FAIL for
 * data, checkpoint, I/O or store failures, and for a --device that this
 * build or machine cannot run (no CUDA, no GPU) or a rendezvous that
 * failed; EXIT_USAGE for bad options, WORLD_SIZE > 1 with a back end
 * of one process, or options that do not match the checkpoint resumed;
 * and 128 + N when signal N stopped the run (after a final checkpoint). */

/* Where this process stands in the job: RANK, WORLD_SIZE, LOCAL_RANK. */
struct fmtrain_world {
	unsigned rank;
	unsigned world_size;
	unsigned local_rank;         /* picks the GPU */
};

struct fmtrain_backend;

struct fmtrain_opts {
	struct train_config model;   /* shape and AdamW; learning_rate */
	const char *data[FMTRAIN_DATA_MAX];
	size_t ndata;
	uint64_t steps;              /* train until the model's step is this */
	unsigned threads;            /* 0: OpenMP's default */
	/* where it runs */
	const struct fmtrain_backend *backend;   /* --device */
	struct fmtrain_world world;
	const char *rendezvous;      /* file:PATH or tcp:HOST:PORT; set
	                              * when world_size > 1 */
	const char *job;             /* --job; NULL: none */
	unsigned rendezvous_timeout_s;
	/* checkpoints */
	const char *ckpt_dir;        /* NULL: none */
	const char *ckpt_remote;     /* s3://, file://; NULL: none */
	struct obj_config obj;
	uint64_t ckpt_every;         /* steps; 0: off */
	double ckpt_secs;            /* 0: off */
	double ckpt_mtbf_h;          /* 0: off */
	unsigned keep;               /* 0: all */
	uint64_t staging_bytes;      /* 0: room for two checkpoints */
	bool resume;
	uint64_t resume_step;        /* CKPT_STEP_LATEST: the newest */
	const char *csv;
	const char *metrics;         /* --metrics ADDR:PORT; NULL: none */
};

/* ---- --metrics (fmtrain_metrics.c) ---- */

struct fmtrain_metrics;
struct ckpt;
/* Serves /metrics on addr, its port moved up by local_rank (the ranks
 * of one machine on consecutive ports); NULL with msg set if it
 * cannot. */
struct fmtrain_metrics *fmtrain_metrics_start(const char *addr,
					      unsigned rank,
					      unsigned local_rank,
					      const char *device, char *msg,
					      size_t ml);
void fmtrain_metrics_ckpt(struct fmtrain_metrics *m, struct ckpt *c);
/* One step done (m NULL: nothing); tokens of all ranks. */
void fmtrain_metrics_step(struct fmtrain_metrics *m, uint64_t step,
			  double step_ms, double wait_ms, double block_ms,
			  uint64_t tokens);
void fmtrain_metrics_stop(struct fmtrain_metrics *m);

/* ---- the subcommands (fmtrain_tokenize.c, fmtrain_train.c) ---- */

/* argv[0] is the verb; each returns an exit code. */
int cmd_tokenize(int argc, char **argv);
int cmd_train(int argc, char **argv);
/* The usage text (fmtrain.c), which --help prints, and -h after either
 * verb. */
void fmtrain_usage(FILE *f);

/* The training run: returns an exit code, having said why on stderr. */
int fmtrain_run(const struct fmtrain_opts *o);

/* ---- back ends (fmtrain_cpu.c, fmtrain_cuda.c) ---- */

/* A model on some back end. */
struct fmtrain_model {
	const struct fmtrain_backend *be;
	struct train_config cfg;     /* as the model uses it (padded vocab) */
	void *priv;                  /* the back end's model */
	float *host;                 /* a back end's host copy for a restore */
};

/* What the run and the checkpoint code need of a back end.  Functions
 * return 0 or a negative errno with a line in msg (as model.h, gpu.h). */
struct fmtrain_backend {
	const char *name;            /* as --device names it */
	bool device_memory;          /* tensors() are device memory: added
	                              * to checkpoints with CKPT_ADD_DEVICE */
	bool ranks;                  /* runs as several processes */
	/* 0 if it can run here (name, may be NULL, gets the device);
	 * else -ENOTSUP or -ENODEV.  NULL: always can. */
	int (*probe)(char *name, size_t name_len, char *msg, size_t msg_len);
	/* Rank 0's id for the job, handed to the others by the rendezvous
	 * and to init (ranks only). */
	int (*dist_id)(unsigned char id[TRAIN_NCCL_ID_BYTES], char *msg,
		       size_t msg_len);
	/* Allocates and initialises the model from cfg->seed: sets m->priv
	 * and m->cfg.  id: dist_id's, for a world of several. */
	int (*init)(struct fmtrain_model *m, const struct train_config *cfg,
		    const struct fmtrain_world *w, const unsigned char *id,
		    char *msg, size_t msg_len);
	void (*free)(struct fmtrain_model *m);
	const char *(*device)(const struct fmtrain_model *m);
	size_t (*num_params)(const struct fmtrain_model *m);
	uint64_t (*bytes)(const struct fmtrain_model *m);
	/* zero_grad, forward, backward, (all-reduce,) update; *loss: the
	 * mean over ranks */
	int (*step)(struct fmtrain_model *m, const int32_t *inputs,
		    const int32_t *targets, float *loss, char *msg,
		    size_t msg_len);
	/* As train_model_tensors; data in device memory if device_memory. */
	size_t (*tensors)(struct fmtrain_model *m, struct train_tensor *out,
			  size_t max);
	/* A restore, on the rank that reads the checkpoint: host memory
	 * for a whole kind (train_model_buffer's layout; NULL: no memory),
	 * then load() puts what was read there into the model. */
	float *(*restore_buffer)(struct fmtrain_model *m, enum train_kind kind);
	int (*restore_load)(struct fmtrain_model *m, enum train_kind kind,
			    char *msg, size_t msg_len);
	/* Every rank, after a restore: the step and learning rate saved,
	 * and every rank made rank 0's replica. */
	int (*restored)(struct fmtrain_model *m, uint64_t step, float lr,
			char *msg, size_t msg_len);
	/* Each of v[0 .. n-1] its largest over the ranks (ranks only). */
	int (*agree)(struct fmtrain_model *m, uint32_t *v, unsigned n,
		     char *msg, size_t msg_len);
};

extern const struct fmtrain_backend fmtrain_cpu_backend;
extern const struct fmtrain_backend fmtrain_cuda_backend;

/* ---- checkpoint state (fmtrain_ckpt.c) ---- */

#define FMTRAIN_RUN_NAME "fmtrain.run"
#define FMTRAIN_POS_NAME "loader.pos"
#define FMTRAIN_RUN_BYTES 128
#define FMTRAIN_RUN_VERSION 1

/* What a checkpoint holds besides the tensors: the run record
 * (docs/training.md has its byte layout). */
struct fmtrain_run_rec {
	uint32_t version;
	struct train_config cfg;     /* learning_rate: the one in use */
	uint32_t world_size;
	uint64_t data_seed;
	uint64_t step;
};

/* What one rank saves: the model's tensors t[0 .. n-1] (gradients are
 * left out; n 0 on ranks other than 0, the model being replicated), with
 * flags for ckpt_add (CKPT_ADD_DEVICE for device memory), this rank's
 * loader position and the run record of cfg. */
struct fmtrain_save {
	const struct train_config *cfg;   /* as the model uses it */
	const struct train_tensor *t;
	size_t n;
	unsigned flags;
	const struct train_pos *pos;
	uint64_t data_seed;
};

/* Saves the state after `step` updates.  Returns 0 or a negative errno
 * with msg; *block_ns gets the time training was held (begin, adds,
 * commit). */
int fmtrain_ckpt_save(struct ckpt *c, const struct fmtrain_save *s,
		      uint64_t step, uint64_t *block_ns, char *msg,
		      size_t msg_len);

/* What --resume found. */
struct fmtrain_resume {
	bool found;                  /* false: no checkpoint, start fresh */
	uint64_t step;
	const char *target;          /* the --ckpt given, for commands */
	unsigned rank;               /* whose shard: this process's */
	char where[1024];            /* where it is read from */
	struct fmtrain_run_rec rec;
	struct train_pos pos;
	struct ckpt_reader *reader;  /* open until fmtrain_resume_finish */
	size_t incomplete;
};

/* Finds the checkpoint to resume (o->resume_step or the newest complete
 * one), reads this rank's run record and loader position and checks them
 * against the options (the world size included).  Returns an exit code;
 * r->found false with EXIT_OK when there is none. */
int fmtrain_resume_open(struct ckpt *c, const struct fmtrain_opts *o,
			struct fmtrain_resume *r);
/* Rank 0 (read_tensors): reads the parameters and moments into the model
 * through its back end.  Every rank: closes the reader, sets the step
 * and learning rate, and makes the ranks alike (a collective: every rank
 * calls it).  Returns an exit code. */
int fmtrain_resume_finish(struct fmtrain_resume *r, struct fmtrain_model *m,
			  bool read_tensors);
/* Closes the reader if still open. */
void fmtrain_resume_release(struct fmtrain_resume *r);

#endif /* FMFS_TOOLS_FMTRAIN_H */
