/* SPDX-License-Identifier: MIT */
/*
 * fmckpt_store.c - `fmckpt list / show / verify / restore / prune`: the
 * family of verbs that read a checkpoint store, one cmd_<verb>() each,
 * sharing the helpers that open the store (local directory, remote copy
 * or both: --target, --dir, --remote) and pick a step ("latest" or a
 * number) and a copy (--from).  Also the helpers fmckpt.h declares for
 * the other verbs: opening the store, reporting a failure with its exit
 * code, sizes for people and strings for JSON.
 *
 * Everything here reads through libfmckpt (ckpt/ckpt.h) with read_only
 * set; prune removes what ckpt_prune decides.  A step's copies, local and
 * remote, are read and verified each on its own.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmckpt.h"

/* ---- helpers (some for the other verbs: fmckpt.h) ---- */

static int parse_step(const char *v, uint64_t *out)
{
	if (!strcmp(v, "latest")) {
		*out = CKPT_STEP_LATEST;
		return 0;
	}
	if (tools_parse_u64(v, 0, UINT64_MAX - 1, out)) {
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

int fmckpt_fail(const char *verb, int rc, const char *msg)
{
	fprintf(stderr, PROG " %s: %s\n", verb, msg && *msg ? msg :
		strerror(-rc));
	return exit_code(rc);
}

void fmckpt_human(uint64_t b, char *buf, size_t len)
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

void fmckpt_json_str(FILE *f, const char *s)
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

static enum ckpt_source source(const struct fmckpt_opts *o)
{
	if (!o->from)
		return CKPT_FROM_ANY;
	return !strcmp(o->from, "local") ? CKPT_FROM_LOCAL : CKPT_FROM_REMOTE;
}

int fmckpt_open_store(const char *verb, const struct fmckpt_opts *o,
		      bool read_only, struct ckpt **c)
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
		return fmckpt_fail(verb, rc, msg);
	return EXIT_OK;
}

/* For show and restore, given nargs arguments (else "fmckpt VERB: GIVE"):
 * the store and a reader of the checkpoint argv[0] names ("latest" or a
 * step), from the copy --from picks.  Returns an exit code, having said
 * why on stderr; on EXIT_OK the caller closes both. */
static int open_step(const char *verb, const struct fmckpt_opts *o,
		     int argc, char **argv, int nargs, const char *give,
		     struct ckpt **c, struct ckpt_reader **r)
{
	char msg[1024];
	uint64_t step;
	int rc;

	if (argc != nargs) {
		fprintf(stderr, PROG " %s: %s\n", verb, give);
		return EXIT_USAGE;
	}
	if (parse_step(argv[0], &step))
		return EXIT_USAGE;
	if ((rc = fmckpt_open_store(verb, o, true, c)))
		return rc;
	rc = ckpt_reader_open_from(*c, step, source(o), r, msg, sizeof(msg));
	if (rc) {
		ckpt_close(*c, NULL, 0);
		return fmckpt_fail(verb, rc, msg);
	}
	return EXIT_OK;
}

/* ---- list ---- */

static const char *where_of(const struct ckpt_step_info *s)
{
	return s->local && s->remote ? "local,remote" :
	       s->local ? "local" : "remote";
}

/* Steps moved out of the way into DIR/aside/ (docs/checkpoint-format.md,
 * "Set aside"): not checkpoints, but not to be forgotten either. */
static size_t aside_count(const struct fmckpt_opts *o)
{
	char path[4096];
	struct dirent *de;
	size_t n = 0;
	DIR *d;

	if (!o->dir)
		return 0;
	snprintf(path, sizeof(path), "%s/aside", o->dir);
	if (!(d = opendir(path)))
		return 0;
	while ((de = readdir(d)))
		n += !strncmp(de->d_name, "step-", 5);
	closedir(d);
	return n;
}

int cmd_list(const struct fmckpt_opts *o, int argc, char **argv)
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
	if ((rc = fmckpt_open_store("list", o, true, &c)))
		return rc;
	rc = ckpt_list(c, &v, &n, &inc, msg, sizeof(msg));
	if (rc) {
		ckpt_close(c, NULL, 0);
		return fmckpt_fail("list", rc, msg);
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
				fmckpt_json_str(stdout, v[i].why);
			else
				printf("null");
			printf("}");
		}
		printf("%s], \"incomplete\": %zu, \"aside\": %zu}\n",
		       n ? "\n" : "", inc, aside_count(o));
	} else {
		if (n)
			printf("%12s  %-12s %5s %8s %10s  %s\n", "STEP", "WHERE",
			       "RANKS", "TENSORS", "SIZE", "CREATED (UTC)");
		for (size_t i = 0; i < n; i++) {
			if (v[i].error) {
				/* why names the file: the manifest or a
				 * shard */
				printf("%12" PRIu64 "  %-12s cannot be read: "
				       "%s\n", v[i].step, where_of(&v[i]),
				       v[i].why);
				continue;
			}
			fmckpt_human(v[i].bytes, sz, sizeof(sz));
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
		if ((n = aside_count(o)))
			printf("(%zu step(s) moved aside in %s/aside, kept: "
			       "not listed or loaded; see fmckpt(1))\n", n,
			       o->dir);
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
	fmckpt_human(total, sz, sizeof(sz));
	time_str(ckpt_reader_created_s(r), when, sizeof(when));
	printf("step %" PRIu64 " at %s\ncreated %s UTC, %u rank(s), %zu "
	       "tensor(s), %s of tensor data, format version %d\n",
	       ckpt_reader_step(r), ckpt_reader_where(r), when,
	       ckpt_reader_world_size(r), ckpt_reader_count(r), sz,
	       ckpt_reader_version(r));
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

		char place[300] = "", go[128], gs[128];

		ckpt_shape_format(t->ndim, t->shape, sh, sizeof(sh));
		snprintf(fmt, sizeof(fmt), "%s", t->name);
		if (t->flags & CKPT_TENSOR_SLICE) {
			ckpt_shape_format(t->ndim, t->global_offset, go,
					  sizeof(go));
			ckpt_shape_format(t->ndim, t->global_shape, gs,
					  sizeof(gs));
			snprintf(place, sizeof(place), "  slice at %s of %s",
				 go, gs);
		} else if (t->flags & CKPT_TENSOR_REPLICATED) {
			snprintf(place, sizeof(place), "  replicated");
		}
		printf("%4u  %-40s %-7s %-20s %12" PRIu64 " %12" PRIu64
		       "  %08x%s\n", t->rank, fmt, ckpt_dtype_name(t->dtype),
		       sh, t->size_bytes, t->offset, t->crc32c, place);
	}
}

static void show_json(struct ckpt_reader *r)
{
	printf("{\"step\": %" PRIu64 ", \"where\": ", ckpt_reader_step(r));
	fmckpt_json_str(stdout, ckpt_reader_where(r));
	printf(", \"remote\": %s, \"format_version\": %d, \"ranks\": %u, "
	       "\"created_unix_s\": %lld, \"shards\": [",
	       ckpt_reader_is_remote(r) ? "true" : "false",
	       ckpt_reader_version(r), ckpt_reader_world_size(r),
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
		fmckpt_json_str(stdout, t->name);
		printf(", \"dtype\": \"%s\", \"shape\": [",
		       ckpt_dtype_name(t->dtype));
		for (unsigned d = 0; d < t->ndim; d++)
			printf("%s%lld", d ? ", " : "",
			       (long long)t->shape[d]);
		printf("], \"bytes\": %" PRIu64 ", \"offset\": %" PRIu64
		       ", \"crc32c\": \"%08x\"", t->size_bytes, t->offset,
		       t->crc32c);
		if (t->flags & CKPT_TENSOR_SLICE) {
			printf(", \"global_shape\": [");
			for (unsigned d = 0; d < t->ndim; d++)
				printf("%s%lld", d ? ", " : "",
				       (long long)t->global_shape[d]);
			printf("], \"global_offset\": [");
			for (unsigned d = 0; d < t->ndim; d++)
				printf("%s%lld", d ? ", " : "",
				       (long long)t->global_offset[d]);
			printf("]");
		}
		if (t->flags & CKPT_TENSOR_REPLICATED)
			printf(", \"replicated\": true");
		printf("}");
	}
	printf("\n]}\n");
}

int cmd_show(const struct fmckpt_opts *o, int argc, char **argv)
{
	struct ckpt_reader *r;
	struct ckpt *c;
	int rc;

	rc = open_step("show", o, argc, argv, 1, "give one STEP (or "
		       "'latest'); fmckpt list shows the steps", &c, &r);
	if (rc)
		return rc;
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
	/* A shard missing from a checkpoint that list calls complete is
	 * damage, as a corrupt one is (exit 1), not "no such checkpoint". */
	if (rc == -ENOENT)
		rc = -EBADMSG;
	fmckpt_human(total, sz, sizeof(sz));
	if (json) {
		printf("%s\n  {\"step\": %" PRIu64 ", \"copy\": \"%s\", "
		       "\"ok\": %s, \"bytes\": %" PRIu64 ", \"error\": ",
		       *first ? "" : ",", step, from == CKPT_FROM_LOCAL ?
		       "local" : "remote", rc ? "false" : "true", total);
		if (rc)
			fmckpt_json_str(stdout, msg);
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

int cmd_verify(const struct fmckpt_opts *o, int argc, char **argv)
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
	if ((rc = fmckpt_open_store("verify", o, true, &c)))
		return rc;
	rc = ckpt_list(c, &v, &n, NULL, msg, sizeof(msg));
	if (rc) {
		ckpt_close(c, NULL, 0);
		return fmckpt_fail("verify", rc, msg);
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

int cmd_restore(const struct fmckpt_opts *o, int argc, char **argv)
{
	struct ckpt_reader *r;
	struct ckpt *c;
	char msg[1024];
	uint64_t step;
	int rc;

	rc = open_step("restore", o, argc, argv, 2, "give STEP (or 'latest') "
		       "and the directory to restore into", &c, &r);
	if (rc)
		return rc;
	step = ckpt_reader_step(r);
	rc = ckpt_reader_restore(r, argv[1], msg, sizeof(msg));
	if (!rc)
		printf("restored step %" PRIu64 " from %s into %s/step-%010"
		       PRIu64 " (verified)\n", step, ckpt_reader_where(r),
		       argv[1], step);
	ckpt_reader_close(r);
	ckpt_close(c, NULL, 0);
	return rc ? fmckpt_fail("restore", rc, msg) : EXIT_OK;
}

/* ---- prune ---- */

int cmd_prune(const struct fmckpt_opts *o, int argc, char **argv)
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
	if ((rc = fmckpt_open_store("prune", o, true, &c)))
		return rc;
	rc = ckpt_prune(c, o->keep, &removed, msg, sizeof(msg));
	ckpt_close(c, NULL, 0);
	if (rc)
		return fmckpt_fail("prune", rc, msg);
	printf("removed %zu checkpoint(s) and leftover(s); the newest %u "
	       "complete stay\n", removed, o->keep);
	return EXIT_OK;
}

