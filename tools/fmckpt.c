/* SPDX-License-Identifier: MIT */
/*
 * fmckpt.c - the fmckpt command: looks at, checks, restores and prunes
 * the checkpoints libfmckpt writes, shows what a running writer is doing,
 * suggests a checkpoint interval, and benchmarks a save.  One cmd_<verb>()
 * per subcommand; exit codes as in tools.h (and docs/fmckpt.1).
 *
 * Where the checkpoints are is given with --target (a directory, an
 * s3://BUCKET/PREFIX or a file:///DIR URL), twice for a directory and its
 * remote copy, or with --dir and --remote.
 */
#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "ckpt/ckpt.h"
#include "tools.h"

#define PROG "fmckpt"
#define BENCH_TENSORS_MAX 4096

struct opts {
	const char *dir;
	const char *remote;
	struct obj_config obj;
	bool json;
	bool keep_set;
	unsigned keep;
	double cost_s, mtbf_h, restart_s, step_s;
	uint64_t size, staging;
	unsigned rounds, tensors, parallel;
	bool keep_data;
	const char *from;
};

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
	char *end;

	errno = 0;
	*out = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(*out) || *out < 0) {
		fprintf(stderr, PROG ": %s '%s' is not a non-negative number\n",
			opt, v);
		return -1;
	}
	return 0;
}

static int parse_uint(const char *opt, const char *v, unsigned max,
		      unsigned *out)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || end == v || *end || n > max || *v == '-') {
		fprintf(stderr, PROG ": %s '%s' is not a number from 0 to %u\n",
			opt, v, max);
		return -1;
	}
	*out = (unsigned)n;
	return 0;
}

static int bad_count(const char *opt, const char *v)
{
	fprintf(stderr, PROG ": %s '%s': give a number of at least 1\n", opt,
		v);
	return -1;
}

static int parse_step(const char *v, uint64_t *out)
{
	char *end;

	if (!strcmp(v, "latest")) {
		*out = CKPT_STEP_LATEST;
		return 0;
	}
	errno = 0;
	*out = strtoull(v, &end, 10);
	if (errno || end == v || *end || *v == '-' || *out == UINT64_MAX) {
		fprintf(stderr, PROG ": step '%s' is not a step number (or "
			"'latest')\n", v);
		return -1;
	}
	return 0;
}

static int exit_code(int rc)
{
	switch (-rc) {
	case 0:
		return EXIT_OK;
	case EINVAL:
		return EXIT_USAGE;
	case EACCES:
	case EPERM:
		return EXIT_AUTH;
	case ENOENT:
	case ENOTDIR:
		return EXIT_NOT_FOUND;
	case ECONNREFUSED:
	case ETIMEDOUT:
	case EHOSTUNREACH:
		return EXIT_UNREACHABLE;
	default:
		return EXIT_FAIL;
	}
}

static int fail(const char *verb, int rc, const char *msg)
{
	fprintf(stderr, PROG " %s: %s\n", verb, msg && *msg ? msg :
		strerror(-rc));
	return exit_code(rc);
}

static void human(uint64_t b, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	unsigned u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u)
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	else
		snprintf(buf, len, "%llu B", (unsigned long long)b);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void time_str(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---- options ---- */

static int add_target(struct opts *o, const char *t)
{
	if (!strncmp(t, "s3://", 5) || !strncmp(t, "file://", 7)) {
		if (o->remote) {
			fprintf(stderr, PROG ": two remote targets ('%s', "
				"'%s'): give one\n", o->remote, t);
			return -1;
		}
		o->remote = t;
	} else if (strstr(t, "://")) {
		fprintf(stderr, PROG ": target '%s': give a directory, "
			"s3://BUCKET[/PREFIX] or file:///DIR\n", t);
		return -1;
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

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { OPT_DIR = 256, OPT_REMOTE, OPT_ENDPOINT, OPT_REGION,
	       OPT_PROFILE, OPT_PATH, OPT_JSON, OPT_KEEP, OPT_COST, OPT_MTBF,
	       OPT_RESTART, OPT_STEPT, OPT_SIZE, OPT_STAGING, OPT_ROUNDS,
	       OPT_TENSORS, OPT_KEEPDATA, OPT_FROM, OPT_PARALLEL };
	static const struct option lo[] = {
		{ "target", required_argument, 0, 't' },
		{ "dir", required_argument, 0, OPT_DIR },
		{ "remote", required_argument, 0, OPT_REMOTE },
		{ "endpoint", required_argument, 0, OPT_ENDPOINT },
		{ "region", required_argument, 0, OPT_REGION },
		{ "profile", required_argument, 0, OPT_PROFILE },
		{ "path-style", no_argument, 0, OPT_PATH },
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
	while ((ch = getopt_long(argc, argv, "t:h", lo, NULL)) != -1) {
		switch (ch) {
		case 't':
			if (add_target(o, optarg))
				return -1;
			break;
		case OPT_DIR: o->dir = optarg; break;
		case OPT_REMOTE:
			if (strncmp(optarg, "s3://", 5) &&
			    strncmp(optarg, "file://", 7)) {
				fprintf(stderr, PROG ": --remote '%s': give "
					"s3://BUCKET[/PREFIX] or file:///DIR\n",
					optarg);
				return -1;
			}
			o->remote = optarg;
			break;
		case OPT_ENDPOINT: o->obj.endpoint = optarg; break;
		case OPT_REGION: o->obj.region = optarg; break;
		case OPT_PROFILE: o->obj.profile = optarg; break;
		case OPT_PATH: o->obj.path_style = 1; break;
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
				fprintf(stderr, PROG ": %s '%s': give a size "
					"like 1G, 512M or 4096\n", ch == OPT_SIZE ?
					"--size" : "--staging", optarg);
				return -1;
			}
			break;
		case OPT_ROUNDS:
			if (parse_uint("--rounds (1-100)", optarg, 100,
				       &o->rounds) || !o->rounds)
				return bad_count("--rounds", optarg);
			break;
		case OPT_TENSORS:
			if (parse_uint("--tensors", optarg, BENCH_TENSORS_MAX,
				       &o->tensors) || !o->tensors)
				return bad_count("--tensors", optarg);
			break;
		case OPT_KEEPDATA: o->keep_data = true; break;
		case OPT_PARALLEL:
			if (parse_uint("--parallel (1-64)", optarg, 64,
				       &o->parallel) || !o->parallel)
				return bad_count("--parallel", optarg);
			break;
		case OPT_FROM:
			if (strcmp(optarg, "local") && strcmp(optarg, "remote")) {
				fprintf(stderr, PROG ": --from '%s': give local "
					"or remote\n", optarg);
				return -1;
			}
			o->from = optarg;
			break;
		case 'h': usage(stdout); exit(EXIT_OK);
		default: return -1;
		}
	}
	return 0;
}

static enum ckpt_source source(const struct opts *o)
{
	if (!o->from)
		return CKPT_FROM_ANY;
	return !strcmp(o->from, "local") ? CKPT_FROM_LOCAL : CKPT_FROM_REMOTE;
}

static int open_store(const char *verb, const struct opts *o, bool read_only,
		      struct ckpt **c)
{
	struct ckpt_config cfg;
	char msg[1024];
	int rc;

	if (!o->dir && !o->remote) {
		fprintf(stderr, PROG " %s: where are the checkpoints? give "
			"--target DIR|URL (a directory, s3://BUCKET/PREFIX or "
			"file:///DIR)\n", verb);
		return EXIT_USAGE;
	}
	ckpt_config_init(&cfg);
	cfg.dir = o->dir;
	cfg.remote = o->remote;
	cfg.obj = o->obj;
	cfg.read_only = read_only;
	cfg.rank = 0;
	cfg.world_size = 1;
	rc = ckpt_open(&cfg, c, msg, sizeof(msg));
	if (rc)
		return fail(verb, rc, msg);
	return EXIT_OK;
}

/* ---- list ---- */

static const char *where_of(const struct ckpt_step_info *s)
{
	return s->local && s->remote ? "local,remote" :
	       s->local ? "local" : "remote";
}

static int cmd_list(struct opts *o, int argc, char **argv)
{
	struct ckpt_step_info *v;
	struct ckpt *c;
	char msg[1024], sz[32], when[32];
	size_t n, inc;
	int rc;

	if (argc) {
		fprintf(stderr, PROG " list: takes no arguments\n");
		return EXIT_USAGE;
	}
	if ((rc = open_store("list", o, true, &c)))
		return rc;
	rc = ckpt_list(c, &v, &n, &inc, msg, sizeof(msg));
	if (rc) {
		ckpt_close(c, NULL, 0);
		return fail("list", rc, msg);
	}
	if (o->json) {
		printf("{\"checkpoints\": [");
		for (size_t i = 0; i < n; i++) {
			printf("%s\n  {\"step\": %" PRIu64 ", \"local\": %s, "
			       "\"remote\": %s, \"ranks\": %u, \"tensors\": %u, "
			       "\"bytes\": %" PRIu64 ", \"created_unix_s\": %lld, "
			       "\"error\": ", i ? "," : "", v[i].step,
			       v[i].local ? "true" : "false",
			       v[i].remote ? "true" : "false", v[i].world_size,
			       v[i].ntensors, v[i].bytes,
			       (long long)v[i].created_s);
			if (v[i].error)
				json_str(stdout, strerror(-v[i].error));
			else
				printf("null");
			printf("}");
		}
		printf("%s], \"incomplete\": %zu}\n", n ? "\n" : "", inc);
	} else {
		if (n)
			printf("%12s  %-12s %5s %8s %10s  %s\n", "STEP", "WHERE",
			       "RANKS", "TENSORS", "SIZE", "CREATED (UTC)");
		for (size_t i = 0; i < n; i++) {
			if (v[i].error) {
				printf("%12" PRIu64 "  %-12s manifest unreadable: "
				       "%s (fmckpt verify %" PRIu64 ")\n",
				       v[i].step, where_of(&v[i]),
				       strerror(-v[i].error), v[i].step);
				continue;
			}
			human(v[i].bytes, sz, sizeof(sz));
			time_str(v[i].created_s, when, sizeof(when));
			printf("%12" PRIu64 "  %-12s %5u %8u %10s  %s\n",
			       v[i].step, where_of(&v[i]), v[i].world_size,
			       v[i].ntensors, sz, when);
		}
		if (!n)
			printf("no complete checkpoint\n");
		if (inc)
			printf("(%zu incomplete: being written, failed or "
			       "interrupted; fmckpt prune removes old ones)\n",
			       inc);
	}
	free(v);
	ckpt_close(c, NULL, 0);
	return EXIT_OK;
}

/* ---- show ---- */

static void show_text(struct ckpt_reader *r)
{
	uint64_t total = 0;
	char sz[32], when[32], sh[128];

	for (size_t i = 0; i < ckpt_reader_count(r); i++)
		total += ckpt_reader_tensor(r, i)->size_bytes;
	human(total, sz, sizeof(sz));
	time_str(ckpt_reader_created_s(r), when, sizeof(when));
	printf("step %" PRIu64 " at %s\ncreated %s UTC, %u rank(s), %zu "
	       "tensor(s), %s of tensor data, format version %d\n",
	       ckpt_reader_step(r), ckpt_reader_where(r), when,
	       ckpt_reader_world_size(r), ckpt_reader_count(r), sz,
	       CKPT_FORMAT_VERSION);
	for (uint32_t k = 0; k < ckpt_reader_world_size(r); k++) {
		uint64_t b;
		uint32_t crc;

		if (!ckpt_reader_shard(r, k, &b, &crc))
			printf("shard %u: %" PRIu64 " bytes, crc32c %08x\n", k,
			       b, crc);
	}
	printf("%4s  %-40s %-7s %-20s %12s %12s  %s\n", "RANK", "NAME",
	       "DTYPE", "SHAPE", "BYTES", "OFFSET", "CRC32C");
	for (size_t i = 0; i < ckpt_reader_count(r); i++) {
		const struct ckpt_tensor_info *t = ckpt_reader_tensor(r, i);
		char fmt[256];

		ckpt_shape_format(t->ndim, t->shape, sh, sizeof(sh));
		snprintf(fmt, sizeof(fmt), "%s", t->name);
		printf("%4u  %-40s %-7s %-20s %12" PRIu64 " %12" PRIu64
		       "  %08x\n", t->rank, fmt, ckpt_dtype_name(t->dtype), sh,
		       t->size_bytes, t->offset, t->crc32c);
	}
}

static void show_json(struct ckpt_reader *r)
{
	printf("{\"step\": %" PRIu64 ", \"where\": ", ckpt_reader_step(r));
	json_str(stdout, ckpt_reader_where(r));
	printf(", \"remote\": %s, \"format_version\": %d, \"ranks\": %u, "
	       "\"created_unix_s\": %lld, \"shards\": [",
	       ckpt_reader_is_remote(r) ? "true" : "false",
	       CKPT_FORMAT_VERSION, ckpt_reader_world_size(r),
	       (long long)ckpt_reader_created_s(r));
	for (uint32_t k = 0; k < ckpt_reader_world_size(r); k++) {
		uint64_t b = 0;
		uint32_t crc = 0;

		ckpt_reader_shard(r, k, &b, &crc);
		printf("%s{\"rank\": %u, \"bytes\": %" PRIu64 ", \"crc32c\": "
		       "\"%08x\"}", k ? ", " : "", k, b, crc);
	}
	printf("], \"tensors\": [");
	for (size_t i = 0; i < ckpt_reader_count(r); i++) {
		const struct ckpt_tensor_info *t = ckpt_reader_tensor(r, i);

		printf("%s\n  {\"rank\": %u, \"name\": ", i ? "," : "",
		       t->rank);
		json_str(stdout, t->name);
		printf(", \"dtype\": \"%s\", \"shape\": [",
		       ckpt_dtype_name(t->dtype));
		for (unsigned d = 0; d < t->ndim; d++)
			printf("%s%lld", d ? ", " : "",
			       (long long)t->shape[d]);
		printf("], \"bytes\": %" PRIu64 ", \"offset\": %" PRIu64
		       ", \"crc32c\": \"%08x\"}", t->size_bytes, t->offset,
		       t->crc32c);
	}
	printf("\n]}\n");
}

static int cmd_show(struct opts *o, int argc, char **argv)
{
	struct ckpt_reader *r;
	struct ckpt *c;
	char msg[1024];
	uint64_t step;
	int rc;

	if (argc != 1) {
		fprintf(stderr, PROG " show: give one STEP (or 'latest'); "
			"fmckpt list shows the steps\n");
		return EXIT_USAGE;
	}
	if (parse_step(argv[0], &step))
		return EXIT_USAGE;
	if ((rc = open_store("show", o, true, &c)))
		return rc;
	rc = ckpt_reader_open_from(c, step, source(o), &r, msg, sizeof(msg));
	if (rc) {
		ckpt_close(c, NULL, 0);
		return fail("show", rc, msg);
	}
	if (o->json)
		show_json(r);
	else
		show_text(r);
	ckpt_reader_close(r);
	ckpt_close(c, NULL, 0);
	return EXIT_OK;
}

/* ---- verify ---- */

static int verify_one(struct ckpt *c, uint64_t step, enum ckpt_source from,
		      bool json, bool *first)
{
	struct ckpt_reader *r = NULL;
	char msg[1024], sz[32];
	uint64_t total = 0;
	int rc;

	rc = ckpt_reader_open_from(c, step, from, &r, msg, sizeof(msg));
	if (!rc) {
		for (uint32_t k = 0; k < ckpt_reader_world_size(r); k++) {
			uint64_t b = 0;
			uint32_t crc;

			ckpt_reader_shard(r, k, &b, &crc);
			total += b;
		}
		rc = ckpt_reader_verify(r, msg, sizeof(msg));
	}
	human(total, sz, sizeof(sz));
	if (json) {
		printf("%s\n  {\"step\": %" PRIu64 ", \"copy\": \"%s\", "
		       "\"ok\": %s, \"bytes\": %" PRIu64 ", \"error\": ",
		       *first ? "" : ",", step, from == CKPT_FROM_LOCAL ?
		       "local" : "remote", rc ? "false" : "true", total);
		if (rc)
			json_str(stdout, msg);
		else
			printf("null");
		printf("}");
	} else if (!rc) {
		printf("step %" PRIu64 " (%s): ok: %u shard(s), %zu tensor(s), "
		       "%s read, every checksum matches\n", step,
		       ckpt_reader_where(r), ckpt_reader_world_size(r),
		       ckpt_reader_count(r), sz);
	} else {
		fprintf(stderr, PROG " verify: step %" PRIu64 " (%s copy): %s\n",
			step, from == CKPT_FROM_LOCAL ? "local" : "remote",
			msg);
	}
	*first = false;
	ckpt_reader_close(r);
	return rc;
}

static int cmd_verify(struct opts *o, int argc, char **argv)
{
	struct ckpt_step_info *v;
	struct ckpt *c;
	uint64_t step = CKPT_STEP_LATEST;
	bool first = true, found = false;
	char msg[1024];
	size_t n;
	int rc, worst = 0;

	if (argc > 1 || (argc == 1 && parse_step(argv[0], &step))) {
		if (argc > 1)
			fprintf(stderr, PROG " verify: give at most one STEP\n");
		return EXIT_USAGE;
	}
	if ((rc = open_store("verify", o, true, &c)))
		return rc;
	rc = ckpt_list(c, &v, &n, NULL, msg, sizeof(msg));
	if (rc) {
		ckpt_close(c, NULL, 0);
		return fail("verify", rc, msg);
	}
	if (o->json)
		printf("{\"verified\": [");
	for (size_t i = 0; i < n; i++) {
		if (step == CKPT_STEP_LATEST ? i > 0 : v[i].step != step)
			continue;
		found = true;
		if (v[i].local && source(o) != CKPT_FROM_REMOTE &&
		    (rc = verify_one(c, v[i].step, CKPT_FROM_LOCAL, o->json,
				     &first)) && !worst)
			worst = rc;
		if (v[i].remote && source(o) != CKPT_FROM_LOCAL &&
		    (rc = verify_one(c, v[i].step, CKPT_FROM_REMOTE, o->json,
				     &first)) && !worst)
			worst = rc;
	}
	if (o->json)
		printf("%s]}\n", first ? "" : "\n");
	free(v);
	ckpt_close(c, NULL, 0);
	if (!found) {
		if (step == CKPT_STEP_LATEST)
			fprintf(stderr, PROG " verify: no complete checkpoint "
				"in %s%s%s\n", o->dir ? o->dir : "",
				o->dir && o->remote ? " or " : "",
				o->remote ? o->remote : "");
		else
			fprintf(stderr, PROG " verify: step %" PRIu64 " is not "
				"a complete checkpoint (fmckpt list shows the "
				"steps)\n", step);
		return EXIT_NOT_FOUND;
	}
	return exit_code(worst);
}

/* ---- restore ---- */

static int cmd_restore(struct opts *o, int argc, char **argv)
{
	struct ckpt_reader *r;
	struct ckpt *c;
	char msg[1024];
	uint64_t step;
	int rc;

	if (argc != 2) {
		fprintf(stderr, PROG " restore: give STEP (or 'latest') and "
			"the directory to restore into\n");
		return EXIT_USAGE;
	}
	if (parse_step(argv[0], &step))
		return EXIT_USAGE;
	if ((rc = open_store("restore", o, true, &c)))
		return rc;
	rc = ckpt_reader_open_from(c, step, source(o), &r, msg, sizeof(msg));
	if (!rc) {
		step = ckpt_reader_step(r);
		rc = ckpt_reader_restore(r, argv[1], msg, sizeof(msg));
		if (!rc)
			printf("restored step %" PRIu64 " from %s into "
			       "%s/step-%010" PRIu64 " (verified)\n", step,
			       ckpt_reader_where(r), argv[1], step);
		ckpt_reader_close(r);
	}
	ckpt_close(c, NULL, 0);
	return rc ? fail("restore", rc, msg) : EXIT_OK;
}

/* ---- prune ---- */

static int cmd_prune(struct opts *o, int argc, char **argv)
{
	struct ckpt *c;
	char msg[1024];
	size_t removed = 0;
	int rc;

	(void)argv;
	if (argc || !o->keep_set) {
		fprintf(stderr, PROG " prune: give --keep N (the newest N "
			"complete checkpoints stay)\n");
		return EXIT_USAGE;
	}
	if (!o->keep) {
		fprintf(stderr, PROG " prune: --keep 0 would remove every "
			"checkpoint; give 1 or more\n");
		return EXIT_USAGE;
	}
	if ((rc = open_store("prune", o, true, &c)))
		return rc;
	rc = ckpt_prune(c, o->keep, &removed, msg, sizeof(msg));
	ckpt_close(c, NULL, 0);
	if (rc)
		return fail("prune", rc, msg);
	printf("removed %zu checkpoint(s) and leftover(s); the newest %u "
	       "complete stay\n", removed, o->keep);
	return EXIT_OK;
}

/* ---- status ---- */

struct wstatus {
	char key[40][32];
	char val[40][512];
	unsigned n;
	char steps[64][160];
	unsigned nsteps;
};

static const char *ws_get(const struct wstatus *w, const char *key)
{
	for (unsigned i = 0; i < w->n; i++)
		if (!strcmp(w->key[i], key))
			return w->val[i];
	return NULL;
}

static uint64_t ws_num(const struct wstatus *w, const char *key)
{
	const char *v = ws_get(w, key);

	return v ? strtoull(v, NULL, 10) : 0;
}

static int ws_read(const char *path, struct wstatus *w)
{
	FILE *f = fopen(path, "r");
	char line[700];

	memset(w, 0, sizeof(*w));
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' '), *nl = strchr(line, '\n');

		if (nl)
			*nl = '\0';
		if (!sp)
			continue;
		*sp = '\0';
		if (!strcmp(line, "step")) {
			if (w->nsteps < 64)
				snprintf(w->steps[w->nsteps++],
					 sizeof(w->steps[0]), "%s", sp + 1);
		} else if (w->n < 40) {
			snprintf(w->key[w->n], sizeof(w->key[0]), "%.31s",
				 line);
			snprintf(w->val[w->n++], sizeof(w->val[0]), "%s",
				 sp + 1);
		}
	}
	fclose(f);
	return 0;
}

static bool pid_alive(uint64_t pid)
{
	return pid && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static void status_text(const struct wstatus *w)
{
	uint64_t pid = ws_num(w, "pid");
	long long age = (long long)time(NULL) -
			(long long)ws_num(w, "updated_unix_s");
	char a[32], b[32], p[32];
	const char *v;

	human(ws_num(w, "staging_used_bytes"), a, sizeof(a));
	human(ws_num(w, "staging_bytes"), b, sizeof(b));
	human(ws_num(w, "staging_peak_bytes"), p, sizeof(p));
	printf("rank %s of %s: pid %llu (%s), updated %lld s ago\n",
	       ws_get(w, "rank"), ws_get(w, "world_size"),
	       (unsigned long long)pid, pid_alive(pid) ? "running" :
	       "not running", age);
	printf("  staged: %s of %s staging memory in use (peak %s); "
	       "%llu commit(s), %llu waited for staging, local writes via "
	       "%s\n", a, b, p, (unsigned long long)ws_num(w, "commits"),
	       (unsigned long long)ws_num(w, "staging_waits"),
	       ws_num(w, "uring") ? "io_uring" : "pwrite");
	a[0] = b[0] = '-';
	a[1] = b[1] = '\0';
	if ((v = ws_get(w, "last_local_step")))
		snprintf(a, sizeof(a), "%s", v);
	if ((v = ws_get(w, "last_remote_step")))
		snprintf(b, sizeof(b), "%s", v);
	printf("  last committed step: local %s, remote %s\n", a, b);
	for (unsigned i = 0; i < w->nsteps; i++) {
		unsigned long long step, size, wr, up;
		char state[32];

		if (sscanf(w->steps[i], "%llu %31s %llu %llu %llu", &step, state,
			   &size, &wr, &up) != 5)
			continue;
		human(size, a, sizeof(a));
		human(wr, b, sizeof(b));
		human(up, p, sizeof(p));
		printf("  step %llu: %s (%s; %s written, %s uploaded)\n", step,
		       state, a, b, p);
	}
	if (!w->nsteps)
		printf("  nothing being written or drained\n");
	if ((v = ws_get(w, "last_error")))
		printf("  last error: %s\n", v);
}

static void status_json(const struct wstatus *w, bool first)
{
	uint64_t pid = ws_num(w, "pid");

	printf("%s\n  {", first ? "" : ",");
	for (unsigned i = 0; i < w->n; i++) {
		const char *val = w->val[i];
		char *end;

		printf("%s\"%s\": ", i ? ", " : "", w->key[i]);
		strtoull(val, &end, 10);
		if (*val && !*end && *val != '-')
			printf("%s", val);
		else
			json_str(stdout, val);
	}
	printf(", \"running\": %s, \"steps\": [", pid_alive(pid) ? "true" :
	       "false");
	for (unsigned i = 0; i < w->nsteps; i++) {
		unsigned long long step, size, wr, up;
		char state[32];

		if (sscanf(w->steps[i], "%llu %31s %llu %llu %llu", &step, state,
			   &size, &wr, &up) != 5)
			continue;
		printf("%s{\"step\": %llu, \"state\": \"%s\", \"bytes\": %llu, "
		       "\"written\": %llu, \"uploaded\": %llu}", i ? ", " : "",
		       step, state, size, wr, up);
	}
	printf("]}");
}

static int cmd_status(struct opts *o, int argc, char **argv)
{
	char sdir[PATH_MAX], path[PATH_MAX + 300];
	struct wstatus *w = malloc(sizeof(*w));
	struct dirent *de;
	unsigned found = 0;
	DIR *d;

	(void)argv;
	if (!w)
		return EXIT_FAIL;
	if (argc) {
		fprintf(stderr, PROG " status: takes no arguments\n");
		free(w);
		return EXIT_USAGE;
	}
	if (!o->dir && !o->remote) {
		free(w);
		return open_store("status", o, true, NULL);
	}
	ckpt_status_dir(o->dir, o->dir ? NULL : o->remote, sdir, sizeof(sdir));
	d = opendir(sdir);
	if (o->json) {
		printf("{\"status_dir\": ");
		json_str(stdout, sdir);
		printf(", \"writers\": [");
	}
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "status-rank-", 12) ||
		    strchr(de->d_name, '.'))
			continue;
		snprintf(path, sizeof(path), "%s/%s", sdir, de->d_name);
		if (ws_read(path, w))
			continue;
		if (o->json)
			status_json(w, !found);
		else
			status_text(w);
		found++;
	}
	if (d)
		closedir(d);
	if (o->json)
		printf("%s]}\n", found ? "\n" : "");
	else if (!found)
		printf("no writer has reported for %s (status files are kept in "
		       "%s)\n", o->dir ? o->dir : o->remote, sdir);
	free(w);
	return EXIT_OK;
}

/* ---- interval ---- */

/* Daly's expected fraction of wall time lost with compute interval tau,
 * checkpoint cost delta, restart R and exponential failures of mean M:
 * T_wall / T_solve = M e^(R/M) (e^((tau+delta)/M) - 1) / tau. */
static double time_lost(double tau, double delta, double r, double m)
{
	return 1.0 - tau / (m * exp(r / m) * expm1((tau + delta) / m));
}

static int cmd_interval(struct opts *o, int argc, char **argv)
{
	double delta = o->cost_s, m = o->mtbf_h * 3600.0, young, daly, x;

	(void)argv;
	if (argc || o->cost_s <= 0 || o->mtbf_h <= 0) {
		fprintf(stderr, PROG " interval: give --cost SECONDS (time one "
			"checkpoint costs, > 0) and --mtbf HOURS (mean time "
			"between failures, > 0)\n");
		return EXIT_USAGE;
	}
	young = sqrt(2.0 * delta * m);
	x = delta / (2.0 * m);
	if (delta < 2.0 * m)
		daly = young * (1.0 + sqrt(x) / 3.0 + x / 9.0) - delta;
	else
		daly = m;
	if (o->json) {
		printf("{\"cost_s\": %g, \"mtbf_s\": %g, \"restart_s\": %g, "
		       "\"young_interval_s\": %.3f, \"daly_interval_s\": %.3f, "
		       "\"young_time_lost\": %.6f, \"daly_time_lost\": %.6f",
		       delta, m, o->restart_s, young, daly,
		       time_lost(young, delta, o->restart_s, m),
		       time_lost(daly, delta, o->restart_s, m));
		if (o->step_s > 0)
			printf(", \"young_steps\": %.0f, \"daly_steps\": %.0f",
			       ceil(young / o->step_s), ceil(daly / o->step_s));
		printf("}\n");
		return EXIT_OK;
	}
	printf("checkpoint cost %g s, MTBF %g h (%g s), restart %g s\n",
	       delta, o->mtbf_h, m, o->restart_s);
	printf("Young:  t = sqrt(2 * delta * M)        = %10.1f s (%.1f min), "
	       "time lost %.2f %%\n", young, young / 60,
	       100 * time_lost(young, delta, o->restart_s, m));
	printf("Daly:   t = sqrt(2dM)(1 + sqrt(d/2M)/3 + d/18M) - d = %.1f s "
	       "(%.1f min), time lost %.2f %%\n", daly, daly / 60,
	       100 * time_lost(daly, delta, o->restart_s, m));
	if (delta >= 2.0 * m)
		printf("note: the cost is at least twice the MTBF; Daly's "
		       "rule falls back to t = M\n");
	if (o->step_s > 0)
		printf("at %g s per step: every %.0f steps (Young), %.0f steps "
		       "(Daly)\n", o->step_s, ceil(young / o->step_s),
		       ceil(daly / o->step_s));
	printf("time lost: expected fraction of wall time spent writing "
	       "checkpoints, redoing lost work and restarting (Daly 2006, "
	       "exponential failures)\n");
	return EXIT_OK;
}

/* ---- bench ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct bench {
	unsigned char **src;
	uint64_t *len;
	unsigned n;
	double *memcpy_s, *commit_s, *local_s, *remote_s;
};

static int bench_alloc(struct bench *b, const struct opts *o)
{
	uint64_t per = o->size / o->tensors;

	b->n = o->tensors;
	b->src = calloc(b->n, sizeof(*b->src));
	b->len = calloc(b->n, sizeof(*b->len));
	b->memcpy_s = calloc(o->rounds, sizeof(double));
	b->commit_s = calloc(o->rounds, sizeof(double));
	b->local_s = calloc(o->rounds, sizeof(double));
	b->remote_s = calloc(o->rounds, sizeof(double));
	if (!b->src || !b->len || !b->memcpy_s || !b->commit_s ||
	    !b->local_s || !b->remote_s)
		return -1;
	for (unsigned i = 0; i < b->n; i++) {
		b->len[i] = i + 1 < b->n ? per : o->size - per * (b->n - 1);
		b->src[i] = malloc(b->len[i] ? b->len[i] : 1);
		if (!b->src[i])
			return -1;
		/* Not zeros: a page of zeros could be shared, or compress. */
		for (uint64_t k = 0; k < b->len[i]; k += 8) {
			uint64_t x = (k + i) * 0x9E3779B97F4A7C15ull;

			memcpy(b->src[i] + k, &x, b->len[i] - k < 8 ?
			       b->len[i] - k : 8);
		}
	}
	return 0;
}

static void bench_free(struct bench *b)
{
	for (unsigned i = 0; b->src && i < b->n; i++)
		free(b->src[i]);
	free(b->src);
	free(b->len);
	free(b->memcpy_s);
	free(b->commit_s);
	free(b->local_s);
	free(b->remote_s);
}

/* memcpy of the same bytes into memory mapped the way staging is
 * (prefaulted, huge pages where the kernel gives them), after one pass
 * not counted. */
static int bench_memcpy(struct bench *b, const struct opts *o)
{
	size_t len = o->size ? o->size : 1;
	unsigned char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
				  -1, 0);

	if (dst == MAP_FAILED)
		return -1;
	madvise(dst, len, MADV_HUGEPAGE);
	for (unsigned r = 0; r <= o->rounds; r++) {
		double t0 = util_now_ns() / 1e9;
		uint64_t at = 0;

		for (unsigned i = 0; i < b->n; i++) {
			memcpy(dst + at, b->src[i], b->len[i]);
			at += b->len[i];
		}
		if (r)
			b->memcpy_s[r - 1] = util_now_ns() / 1e9 - t0;
	}
	munmap(dst, len);
	return 0;
}

static int bench_save(struct ckpt *c, struct bench *b, uint64_t step,
		      double *commit, double *local, double *remote,
		      bool has_dir, bool has_remote, char *msg, size_t len)
{
	double t0;
	int rc;

	rc = ckpt_begin(c, step, msg, len);
	t0 = util_now_ns() / 1e9;
	for (unsigned i = 0; i < b->n && !rc; i++) {
		char name[32];
		int64_t shape[1] = { (int64_t)b->len[i] };

		snprintf(name, sizeof(name), "tensor%04u", i);
		rc = ckpt_add(c, name, CKPT_BYTES, 1, shape, b->src[i],
			      b->len[i], 0, msg, len);
	}
	if (!rc)
		rc = ckpt_commit(c, msg, len);
	*commit = util_now_ns() / 1e9 - t0;
	if (!rc && has_dir) {
		rc = ckpt_wait(c, step, CKPT_LOCAL, 0, msg, len);
		*local = util_now_ns() / 1e9 - t0;
	}
	if (!rc && has_remote) {
		rc = ckpt_wait(c, step, CKPT_REMOTE, 0, msg, len);
		*remote = util_now_ns() / 1e9 - t0;
	}
	return rc;
}

static void json_opt(const char *key, double v, bool have)
{
	if (have)
		printf(", \"%s\": %.6f", key, v);
	else
		printf(", \"%s\": null", key);
}

static void bench_report(const struct opts *o, struct bench *b,
			 const struct ckpt_stats *st)
{
	double gib = (double)o->size / (1024.0 * 1024 * 1024);
	double mc, cm, lo = 0, re = 0;

	printf("{\"size_bytes\": %" PRIu64 ", \"tensors\": %u, \"rounds\": %u, "
	       "\"dir\": ", o->size, b->n, o->rounds);
	json_str(stdout, o->dir);
	printf(", \"remote\": ");
	if (o->remote)
		json_str(stdout, o->remote);
	else
		printf("null");
	printf(", \"runs\": [");
	for (unsigned r = 0; r < o->rounds; r++) {
		printf("%s{\"memcpy_s\": %.6f, \"commit_blocking_s\": %.6f",
		       r ? ", " : "", b->memcpy_s[r], b->commit_s[r]);
		json_opt("local_durable_s", b->local_s[r], o->dir);
		json_opt("remote_durable_s", b->remote_s[r], o->remote);
		printf("}");
	}
	mc = median(b->memcpy_s, o->rounds);
	cm = median(b->commit_s, o->rounds);
	if (o->dir)
		lo = median(b->local_s, o->rounds);
	if (o->remote)
		re = median(b->remote_s, o->rounds);
	printf("], \"memcpy_s\": %.6f, \"commit_blocking_s\": %.6f, "
	       "\"blocking_over_memcpy\": %.3f", mc, cm, mc > 0 ? cm / mc : 0);
	json_opt("local_durable_s", lo, o->dir);
	json_opt("remote_durable_s", re, o->remote);
	printf(", \"memcpy_gib_s\": %.3f", mc > 0 ? gib / mc : 0);
	json_opt("local_gib_s", lo > 0 ? gib / lo : 0, o->dir);
	json_opt("remote_gib_s", re > 0 ? gib / re : 0, o->remote);
	printf(", \"staging_bytes\": %" PRIu64 ", \"staging_waits\": %" PRIu64
	       ", \"uring\": %s, \"medians_over_rounds\": true}\n",
	       st->staging_bytes, st->staging_waits,
	       st->uring ? "true" : "false");
}

static int bench_check_empty(struct ckpt *c, char *msg, size_t len)
{
	struct ckpt_step_info *v;
	size_t n, inc;
	int rc = ckpt_list(c, &v, &n, &inc, msg, len);

	if (rc)
		return rc;
	free(v);
	if (n || inc) {
		snprintf(msg, len, "the target holds checkpoints already; give "
			 "bench an empty directory or prefix (it writes and "
			 "then removes its own)");
		return -EINVAL;
	}
	return 0;
}

static int cmd_bench(struct opts *o, int argc, char **argv)
{
	struct ckpt_config cfg;
	struct ckpt_stats st;
	struct bench b = { 0 };
	struct ckpt *c = NULL;
	char msg[1024] = "";
	bool ours = false;   /* the target was empty: what is there is ours */
	int rc;

	(void)argv;
	if (argc || !o->size || (!o->dir && !o->remote)) {
		fprintf(stderr, PROG " bench: give --size SIZE and --target "
			"DIR|URL\n");
		return EXIT_USAGE;
	}
	if (o->size < o->tensors) {
		fprintf(stderr, PROG " bench: --size must be at least "
			"--tensors bytes\n");
		return EXIT_USAGE;
	}
	if (bench_alloc(&b, o) || bench_memcpy(&b, o)) {
		bench_free(&b);
		fprintf(stderr, PROG " bench: cannot allocate 2 x %" PRIu64
			" bytes\n", o->size);
		return EXIT_FAIL;
	}
	ckpt_config_init(&cfg);
	cfg.dir = o->dir;
	cfg.remote = o->remote;
	cfg.obj = o->obj;
	cfg.rank = 0;
	cfg.world_size = 1;
	cfg.upload_parallel = o->parallel;
	/* Room for the whole step, as a job sized for its state would. */
	cfg.staging_bytes = o->staging ? o->staging : o->size +
			    (uint64_t)b.n * 64 + (16u << 20);
	rc = ckpt_open(&cfg, &c, msg, sizeof(msg));
	if (!rc)
		rc = bench_check_empty(c, msg, sizeof(msg));
	ours = !rc;
	/* Staging is mapped and prefaulted by the first ckpt_begin, which
	 * is outside the clock, as in a job's steady state. */
	for (unsigned r = 0; !rc && r < o->rounds; r++)
		rc = bench_save(c, &b, r + 1, &b.commit_s[r], &b.local_s[r],
				&b.remote_s[r], o->dir, o->remote, msg,
				sizeof(msg));
	if (!rc) {
		ckpt_get_stats(c, &st);
		bench_report(o, &b, &st);
	}
	/* Remove everything only from a target seen empty: when the check
	 * itself failed (a listing the store refused or timed out on), the
	 * target may hold a job's checkpoints. */
	if (ours && !o->keep_data)
		ckpt_prune(c, 0, NULL, NULL, 0);
	ckpt_close(c, NULL, 0);
	bench_free(&b);
	return rc ? fail("bench", rc, msg) : EXIT_OK;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(struct opts *, int, char **);
	} cmds[] = {
		{ "list", cmd_list }, { "show", cmd_show },
		{ "verify", cmd_verify }, { "restore", cmd_restore },
		{ "prune", cmd_prune }, { "status", cmd_status },
		{ "interval", cmd_interval }, { "bench", cmd_bench },
	};
	struct opts o = { 0 };
	const char *verb;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	verb = argv[1];
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help") ||
	    !strcmp(verb, "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(verb, "--version") || !strcmp(verb, "version")) {
		printf("fmckpt %s (checkpoint format %d)\n", FMFS_VERSION,
		       CKPT_FORMAT_VERSION);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(verb, cmds[i].name))
			continue;
		if (parse_opts(argc - 1, argv + 1, &o))
			return EXIT_USAGE;
		return cmds[i].fn(&o, argc - 1 - optind, argv + 1 + optind);
	}
	fprintf(stderr, PROG ": unknown command '%s'\n", verb);
	usage(stderr);
	return EXIT_USAGE;
}
