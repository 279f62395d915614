/* SPDX-License-Identifier: MIT */
/*
 * tools.h - shared by the fmfs front end's files: the subcommands, the
 * exit codes scripts may rely on, and option parsing helpers.
 */
#ifndef FMFS_TOOLS_H
#define FMFS_TOOLS_H

#include <stdint.h>

#include "objstore/objstore.h"
#include "util/util.h"

/* Exit codes (documented in docs/fmfs.1). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,        /* the operation failed (I/O, server, other) */
	EXIT_USAGE = 2,       /* bad command line, URL or option */
	EXIT_AUTH = 3,        /* missing or rejected credentials, denied */
	EXIT_NOT_FOUND = 4,   /* no such bucket or key */
	EXIT_UNREACHABLE = 5, /* endpoint refused, unreachable or timed out */
};

int cmd_obj(int argc, char **argv);
/* mount, umount, status, prefetch, evict; -1 for another verb. */
int cmd_fs(const char *verb, int argc, char **argv);

/* "64M", "1.5G", "4096" -> bytes (K/M/G/T are powers of 1024).
 * Returns 0, or -1 for anything else. */
int tools_parse_size(const char *s, uint64_t *out);
/* Exit code for an objstore status. */
int tools_exit_code(obj_status st);

#endif /* FMFS_TOOLS_H */
