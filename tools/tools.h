/* SPDX-License-Identifier: MIT */
/*
 * tools.h - what the three front ends (fmfs, fmckpt, fmtrain) share, in
 * tools/tools.c: the exit codes scripts may rely on, what main() does
 * around its table of subcommands, and parsers for numbers, sizes and
 * option values on the command line.
 *
 * Each front end has one shape: tools/TOOL.c holds main(), the usage text
 * and the table of subcommands; tools/TOOL_VERB.c one subcommand, or one
 * family of them that share their helpers, each a cmd_VERB();
 * tools/TOOL_PART.c a part of one large command (fmtrain train's run loop,
 * checkpoint record and back ends); tools/TOOL.h (fmfs.h, fmckpt.h,
 * fmtrain.h) what one tool's files share.
 */
#ifndef FMFS_TOOLS_H
#define FMFS_TOOLS_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "objstore/objstore.h"
#include "util/util.h"

/* Exit codes (documented in docs/fmfs.1, docs/fmckpt.1, docs/fmtrain.1). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,        /* the operation failed (I/O, server, other) */
	EXIT_USAGE = 2,       /* bad command line, URL or option */
	EXIT_AUTH = 3,        /* missing or rejected credentials, denied */
	EXIT_NOT_FOUND = 4,   /* no such bucket or key */
	EXIT_UNREACHABLE = 5, /* endpoint refused, unreachable or timed out */
};

/* ---- main() ---- */

/* A subcommand of a table: fn gets argv[0] the verb, returns an exit
 * code. */
struct tools_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
};

/* main() of fmfs and fmtrain: tools_builtin_verb(), then the cmds[i]
 * argv[1] names, else tools_unknown_verb().  Returns the exit code.
 * (fmckpt parses its options between finding the verb and running it:
 * its main() calls the two below itself.) */
int tools_main(int argc, char **argv, const char *prog, const char *version,
	       void (*usage)(FILE *f), const struct tools_cmd *cmds,
	       size_t ncmds);
/* The verbs every front end answers alike, before its own table: none
 * (usage on stderr, EXIT_USAGE), -h, --help or help (usage on stdout,
 * EXIT_OK), --version or version (the line version on stdout, EXIT_OK).
 * Returns that exit code, or -1 when argv[1] is another verb. */
int tools_builtin_verb(int argc, char **argv, void (*usage)(FILE *f),
		       const char *version);
/* A verb not in the table: "PROG: unknown command 'VERB'" and the usage
 * on stderr.  Returns EXIT_USAGE. */
int tools_unknown_verb(const char *prog, const char *verb,
		       void (*usage)(FILE *f));

/* ---- the command line ---- */

/* "64M", "1.5G", "4096" -> bytes (K/M/G/T are powers of 1024; an i
 * and a B may follow).  Returns 0, -ERANGE for a size past 2^64 - 1
 * bytes, or -EINVAL for anything else (a sign, spaces, other letters). */
int tools_parse_size(const char *s, uint64_t *out);
/* A whole number from min to max (decimal, no sign).  Returns 0, or -1
 * (nothing printed: the caller says what it wanted). */
int tools_parse_u64(const char *s, uint64_t min, uint64_t max,
		    uint64_t *out);
/* A finite number, as strtod reads it (the whole string).  Returns 0, or
 * -1 (nothing printed). */
int tools_parse_double(const char *s, double *out);
/* "PROG: OPT 'VALUE': give WANT" on stderr.  Returns -1. */
int tools_bad_opt(const char *prog, const char *opt, const char *v,
		  const char *want);
/* The object-store options every front end takes (--endpoint, --region,
 * --profile, --path-style): TOOLS_OBJ_OPTIONS in a getopt_long table,
 * read with tools_getopt(). */
enum {
	TOOLS_OPT_ENDPOINT = 0x1000, TOOLS_OPT_REGION, TOOLS_OPT_PROFILE,
	TOOLS_OPT_PATH_STYLE,
};
#define TOOLS_OBJ_OPTIONS                                                   \
	{ "endpoint", required_argument, NULL, TOOLS_OPT_ENDPOINT },        \
	{ "region", required_argument, NULL, TOOLS_OPT_REGION },            \
	{ "profile", required_argument, NULL, TOOLS_OPT_PROFILE },          \
	{ "path-style", no_argument, NULL, TOOLS_OPT_PATH_STYLE }
/* "PROG VERB: WHAT 'ARG' (PROG VERB --help lists what it takes)" on
 * stderr; verb: the verb's argv[0] (PROG alone when it is the program). */
void tools_arg_error(const char *verb, const char *what, const char *arg);
/* getopt_long(), but what the options of TOOLS_OBJ_OPTIONS say it sets
 * in cfg itself: returns the next other option, or -1 at the end.  An
 * unknown option or one without its value is named on stderr (with
 * tools_arg_error) and returns '?'. */
int tools_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, struct obj_config *cfg);
/* Exit code for an objstore status. */
int tools_exit_code(obj_status st);

#endif /* FMFS_TOOLS_H */
