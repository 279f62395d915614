/* SPDX-License-Identifier: MIT */
/*
 * fmckpt.h - shared by fmckpt's files (tools/fmckpt*.c): the options as
 * parsed, the subcommands the table in fmckpt.c dispatches to, and the
 * helpers more than one of them uses.
 *
 * fmckpt_store.c: list, show, verify, restore, prune, the verbs that read
 * a checkpoint store (and the helpers below).  fmckpt_status.c: status
 * (what a running writer reports) and interval (Young's and Daly's
 * checkpoint interval).  fmckpt_bench.c: bench (times a save).  Each
 * cmd_<verb>() gets the options fmckpt.c parsed and the arguments after
 * them, and returns an exit code of tools.h.
 */
#ifndef FMFS_TOOLS_FMCKPT_H
#define FMFS_TOOLS_FMCKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "tools.h"

#define PROG "fmckpt"
#define FMCKPT_BENCH_TENSORS_MAX 4096   /* bench --tensors */

/* The options, one set for every verb (each uses the ones it needs). */
struct fmckpt_opts {
	const char *dir;             /* --target DIR, --dir */
	const char *remote;          /* --target URL, --remote */
	struct obj_config obj;
	bool json;
	bool keep_set;
	unsigned keep;               /* prune --keep */
	double cost_s, mtbf_h, restart_s, step_s;   /* interval */
	uint64_t size, staging;      /* bench */
	unsigned rounds, tensors, parallel;
	bool keep_data;
	const char *from;            /* "local", "remote"; NULL: either */
};

int cmd_list(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_show(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_verify(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_restore(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_prune(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_status(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_interval(const struct fmckpt_opts *o, int argc, char **argv);
int cmd_bench(const struct fmckpt_opts *o, int argc, char **argv);

/* ---- helpers (fmckpt_store.c) ---- */

/* Opens the store the options name, to read it unless !read_only; with
 * neither --target nor --dir/--remote says where to give it.  Returns an
 * exit code, having said why on stderr. */
int fmckpt_open_store(const char *verb, const struct fmckpt_opts *o,
		      bool read_only, struct ckpt **c);
/* "fmckpt VERB: MSG" (or rc's strerror) on stderr; the exit code for the
 * negative errno rc. */
int fmckpt_fail(const char *verb, int rc, const char *msg);
/* b bytes as "512 B", "1.5 MiB". */
void fmckpt_human(uint64_t b, char *buf, size_t len);
/* s as a JSON string, quoted and escaped. */
void fmckpt_json_str(FILE *f, const char *s);

#endif /* FMFS_TOOLS_FMCKPT_H */
