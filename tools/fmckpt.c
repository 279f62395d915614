/* SPDX-License-Identifier: MIT */
/*
 * fmckpt.c - the fmckpt command: looks at, checks, restores and prunes
 * the checkpoints libfmckpt writes, shows what a running writer is doing,
 * suggests a checkpoint interval, and benchmarks a save.  This file holds
 * main(), the usage text, the options (one set that every verb shares,
 * parsed here before the verb runs) and the table of subcommands, each a
 * cmd_<verb>() (fmckpt.h): list, show, verify, restore, prune
 * (fmckpt_store.c), status, interval (fmckpt_status.c), bench
 * (fmckpt_bench.c).  Exit codes as in tools.h (and docs/fmckpt.1).
 *
 * Where the checkpoints are is given with --target (a directory, an
 * s3://BUCKET/PREFIX or a file:///DIR URL), twice for a directory and its
 * remote copy, or with --dir and --remote.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fmckpt.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: fmckpt <command> [options] [args]\n"
"\n"
"  list                       complete checkpoints, newest first\n"
"  show STEP|latest           a checkpoint's tensors: rank, name, dtype,\n"
"                             shape, size, CRC32C\n"
"  verify [STEP|latest]       read every shard whole and check every\n"
"                             checksum (each copy: local and remote)\n"
"  restore STEP|latest DIR    copy a checkpoint, verified, into DIR\n"
"  prune --keep N             keep the newest N, remove the rest and\n"
"                             incomplete leftovers\n"
"  status                     what a running writer has staged, is\n"
"                             writing and is draining\n"
"  interval --cost SECONDS --mtbf HOURS [--restart SECONDS]\n"
"           [--step-time SECONDS]\n"
"                             checkpoint interval: Young, Daly, time lost\n"
"  bench --size SIZE --target DIR|URL [--target URL] [--rounds N]\n"
"        [--tensors N] [--staging SIZE] [--parallel N] [--keep-data]\n"
"                             time a save; JSON on stdout\n"
"\n"
"Where the checkpoints are:\n"
"  -t, --target DIR|URL  a directory, s3://BUCKET[/PREFIX] or file:///DIR;\n"
"                        twice for a directory and its remote copy\n"
"  --dir DIR, --remote URL     the same, each named\n"
"  --from local|remote   read only one copy (show, verify, restore)\n"
"Object store: --endpoint URL, --region R, --profile P, --path-style\n"
"(defaults as for the aws CLI: AWS_ENDPOINT_URL, AWS_REGION, ...).\n"
"  --json                JSON output (list, show, verify, status, interval)\n"
"\n"
"Exit status: 0 ok, 1 failed (corrupt data, I/O), 2 usage, 3 credentials\n"
"or denied, 4 no such checkpoint/bucket/directory, 5 store unreachable.\n"
"See fmckpt(1) and docs/checkpoint-format.md.\n");
}

static int parse_double(const char *opt, const char *v, double *out)
{
	if (tools_parse_double(v, out) || *out < 0) {
		fprintf(stderr, PROG ": %s '%s' is not a non-negative number\n",
			opt, v);
		return -1;
	}
	return 0;
}

static int parse_uint(const char *opt, const char *v, unsigned max,
		      unsigned *out)
{
	uint64_t n;

	if (tools_parse_u64(v, 0, max, &n)) {
		fprintf(stderr, PROG ": %s '%s' is not a number from 0 to %u\n",
			opt, v, max);
		return -1;
	}
	*out = (unsigned)n;
	return 0;
}

static int bad_count(const char *opt, const char *v)
{
	return tools_bad_opt(PROG, opt, v, "a number of at least 1");
}

static int add_target(struct fmckpt_opts *o, const char *t)
{
	if (!strncmp(t, "s3://", 5) || !strncmp(t, "file://", 7)) {
		if (o->remote) {
			fprintf(stderr, PROG ": two remote targets ('%s', "
				"'%s'): give one\n", o->remote, t);
			return -1;
		}
		o->remote = t;
	} else if (strstr(t, "://")) {
		return tools_bad_opt(PROG, "target", t, "a directory, "
				     "s3://BUCKET[/PREFIX] or file:///DIR");
	} else {
		if (o->dir) {
			fprintf(stderr, PROG ": two directories ('%s', '%s'): "
				"give one\n", o->dir, t);
			return -1;
		}
		o->dir = t;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct fmckpt_opts *o)
{
	enum { OPT_DIR = 256, OPT_REMOTE, OPT_JSON, OPT_KEEP, OPT_COST,
	       OPT_MTBF, OPT_RESTART, OPT_STEPT, OPT_SIZE, OPT_STAGING,
	       OPT_ROUNDS, OPT_TENSORS, OPT_KEEPDATA, OPT_FROM, OPT_PARALLEL };
	static const struct option lo[] = {
		{ "target", required_argument, 0, 't' },
		{ "dir", required_argument, 0, OPT_DIR },
		{ "remote", required_argument, 0, OPT_REMOTE },
		TOOLS_OBJ_OPTIONS,
		{ "json", no_argument, 0, OPT_JSON },
		{ "keep", required_argument, 0, OPT_KEEP },
		{ "cost", required_argument, 0, OPT_COST },
		{ "mtbf", required_argument, 0, OPT_MTBF },
		{ "restart", required_argument, 0, OPT_RESTART },
		{ "step-time", required_argument, 0, OPT_STEPT },
		{ "size", required_argument, 0, OPT_SIZE },
		{ "staging", required_argument, 0, OPT_STAGING },
		{ "rounds", required_argument, 0, OPT_ROUNDS },
		{ "tensors", required_argument, 0, OPT_TENSORS },
		{ "keep-data", no_argument, 0, OPT_KEEPDATA },
		{ "from", required_argument, 0, OPT_FROM },
		{ "parallel", required_argument, 0, OPT_PARALLEL },
		{ "help", no_argument, 0, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	obj_config_init(&o->obj);
	o->cost_s = o->mtbf_h = -1;
	o->rounds = 3;
	o->tensors = 16;
	optind = 1;
	while ((ch = tools_getopt(argc, argv, "t:h", lo, &o->obj)) != -1) {
		switch (ch) {
		case 't':
			if (add_target(o, optarg))
				return -1;
			break;
		case OPT_DIR: o->dir = optarg; break;
		case OPT_REMOTE:
			if (strncmp(optarg, "s3://", 5) &&
			    strncmp(optarg, "file://", 7))
				return tools_bad_opt(PROG, "--remote", optarg,
					"s3://BUCKET[/PREFIX] or file:///DIR");
			o->remote = optarg;
			break;
		case OPT_JSON: o->json = true; break;
		case OPT_KEEP:
			if (parse_uint("--keep", optarg, 1000000, &o->keep))
				return -1;
			o->keep_set = true;
			break;
		case OPT_COST:
			if (parse_double("--cost", optarg, &o->cost_s))
				return -1;
			break;
		case OPT_MTBF:
			if (parse_double("--mtbf", optarg, &o->mtbf_h))
				return -1;
			break;
		case OPT_RESTART:
			if (parse_double("--restart", optarg, &o->restart_s))
				return -1;
			break;
		case OPT_STEPT:
			if (parse_double("--step-time", optarg, &o->step_s))
				return -1;
			break;
		case OPT_SIZE:
		case OPT_STAGING:
			if (tools_parse_size(optarg, ch == OPT_SIZE ? &o->size :
				       &o->staging)) {
				return tools_bad_opt(PROG, ch == OPT_SIZE ?
					"--size" : "--staging", optarg,
					"a size like 1G, 512M or 4096");
			}
			break;
		case OPT_ROUNDS:
			if (parse_uint("--rounds (1-100)", optarg, 100,
				       &o->rounds) || !o->rounds)
				return bad_count("--rounds", optarg);
			break;
		case OPT_TENSORS:
			if (parse_uint("--tensors", optarg,
				       FMCKPT_BENCH_TENSORS_MAX, &o->tensors) ||
			    !o->tensors)
				return bad_count("--tensors", optarg);
			break;
		case OPT_KEEPDATA: o->keep_data = true; break;
		case OPT_PARALLEL:
			if (parse_uint("--parallel (1-64)", optarg, 64,
				       &o->parallel) || !o->parallel)
				return bad_count("--parallel", optarg);
			break;
		case OPT_FROM:
			if (strcmp(optarg, "local") && strcmp(optarg, "remote"))
				return tools_bad_opt(PROG, "--from", optarg,
						     "local or remote");
			o->from = optarg;
			break;
		case 'h': usage(stdout); exit(EXIT_OK);
		default: return -1;
		}
	}
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(const struct fmckpt_opts *o, int argc, char **argv);
} cmds[] = {
	{ "list", cmd_list }, { "show", cmd_show },
	{ "verify", cmd_verify }, { "restore", cmd_restore },
	{ "prune", cmd_prune }, { "status", cmd_status },
	{ "interval", cmd_interval }, { "bench", cmd_bench },
};

int main(int argc, char **argv)
{
	struct fmckpt_opts o = { 0 };
	char version[64];
	int rc;

	snprintf(version, sizeof(version), "fmckpt %s (checkpoint format %d)",
		 FMFS_VERSION, CKPT_FORMAT_VERSION);
	if ((rc = tools_builtin_verb(argc, argv, usage, version)) >= 0)
		return rc;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[1], cmds[i].name))
			continue;
		if (parse_opts(argc - 1, argv + 1, &o))
			return EXIT_USAGE;
		return cmds[i].fn(&o, argc - 1 - optind, argv + 1 + optind);
	}
	return tools_unknown_verb(PROG, argv[1], usage);
}
