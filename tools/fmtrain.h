/* SPDX-License-Identifier: MIT */
/*
 * fmtrain.h - shared by fmtrain's files (tools/fmtrain*.c): the options
 * of `fmtrain train` as parsed, the run loop, and the checkpoint state.
 *
 * Where the run loop lives.  It stays in tools/, not in train/: it is
 * glue between three modules (train's model and loader, libfmckpt, and
 * the output a person or a script reads), and most of it is policy a
 * front end owns: when to checkpoint, what to print, which options must
 * match on a resume, exit codes.  train/ keeps the mechanisms (model,
 * loader, their state for a checkpoint), which a CUDA back end will
 * share.  When a second caller needs the loop (a CUDA/NCCL run with
 * several ranks), the state save/restore in fmtrain_ckpt.c is the part to
 * move into train/ behind a train_* API.
 */
#ifndef FMFS_TOOLS_FMTRAIN_H
#define FMFS_TOOLS_FMTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "train/data.h"
#include "train/model.h"
#include "tools.h"

#define PROG "fmtrain"
#define FMTRAIN_DATA_MAX 1024   /* --data paths */

/* Exit codes (docs/fmtrain.1), those of tools.h: EXIT_OK; EXIT_FAIL for
 * data, checkpoint, I/O or store failures; EXIT_USAGE for bad options,
 * WORLD_SIZE > 1, or options that do not match the checkpoint resumed;
 * and 128 + N when signal N stopped the run (after a final checkpoint). */

struct fmtrain_opts {
	struct train_config model;   /* shape and AdamW; learning_rate */
	const char *data[FMTRAIN_DATA_MAX];
	size_t ndata;
	uint64_t steps;              /* train until the model's step is this */
	unsigned threads;            /* 0: OpenMP's default */
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
};

/* The training run: returns an exit code, having said why on stderr. */
int fmtrain_run(const struct fmtrain_opts *o);

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

/* Saves the state after `step` updates: parameters, AdamW moments, the
 * run record and the loader position.  Returns 0 or a negative errno
 * with msg; *block_ns gets the time training was held (begin, adds,
 * commit). */
int fmtrain_ckpt_save(struct ckpt *c, struct train_model *m,
		      const struct train_pos *pos, uint64_t data_seed,
		      uint64_t step, uint64_t *block_ns, char *msg,
		      size_t msg_len);

/* What --resume found. */
struct fmtrain_resume {
	bool found;                  /* false: no checkpoint, start fresh */
	uint64_t step;
	const char *target;          /* the --ckpt given, for commands */
	char where[1024];            /* where it is read from */
	struct fmtrain_run_rec rec;
	struct train_pos pos;
	struct ckpt_reader *reader;  /* open until fmtrain_resume_finish */
	size_t incomplete;
};

/* Finds the checkpoint to resume (o->resume_step or the newest complete
 * one), reads its run record and loader position and checks them
 * against the options.  Returns an exit code; r->found false with
 * FMTRAIN_OK when there is none. */
int fmtrain_resume_open(struct ckpt *c, const struct fmtrain_opts *o,
			struct fmtrain_resume *r);
/* Reads the parameters and moments into m, sets its step and learning
 * rate, and closes the reader.  Returns an exit code. */
int fmtrain_resume_finish(struct fmtrain_resume *r, struct train_model *m);
/* Closes the reader if still open. */
void fmtrain_resume_release(struct fmtrain_resume *r);

#endif /* FMFS_TOOLS_FMTRAIN_H */
