/* SPDX-License-Identifier: MIT */
/*
 * ffi.c - what bindings in other languages (the Python package fmckpt,
 * python/fmckpt/) need so that they copy no struct layout they cannot
 * check: a handle opened from "key=value" options instead of a struct
 * ckpt_config with its struct obj_config inside, and the size of each
 * public struct they do mirror, which they compare with their own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

enum opt_kind { O_STR, O_INT, O_U64, O_UINT, O_BOOL };

struct opt {
	const char *key;
	enum opt_kind kind;
	size_t off;      /* in struct ckpt_config */
};

#define C(f) offsetof(struct ckpt_config, f)
#define OB(f) (offsetof(struct ckpt_config, obj) + \
	       offsetof(struct obj_config, f))

static const struct opt opts[] = {
	{ "dir", O_STR, C(dir) },
	{ "remote", O_STR, C(remote) },
	{ "rank", O_INT, C(rank) },
	{ "world_size", O_INT, C(world_size) },
	{ "run_id", O_STR, C(run_id) },
	{ "staging_bytes", O_U64, C(staging_bytes) },
	{ "chunk_bytes", O_U64, C(chunk_bytes) },
	{ "keep_local", O_UINT, C(keep_local) },
	{ "keep_remote", O_UINT, C(keep_remote) },
	{ "io_depth", O_UINT, C(io_depth) },
	{ "upload_parallel", O_UINT, C(upload_parallel) },
	{ "barrier_timeout_ms", O_UINT, C(barrier_timeout_ms) },
	{ "max_pending_steps", O_UINT, C(max_pending_steps) },
	{ "read_only", O_BOOL, C(read_only) },
	{ "node_local", O_BOOL, C(node_local) },
	{ "commit_on_nodes", O_BOOL, C(commit_on_nodes) },
	{ "endpoint", O_STR, OB(endpoint) },
	{ "region", O_STR, OB(region) },
	{ "profile", O_STR, OB(profile) },
	{ "path_style", O_INT, OB(path_style) },
};

static int set_opt(struct ckpt_config *cfg, const struct opt *o, char *v,
		   char *msg, size_t msg_len)
{
	char *p = (char *)cfg + o->off, *end;
	unsigned long long u;
	long long i;

	errno = 0;
	switch (o->kind) {
	case O_STR:
		*(const char **)(void *)p = v;
		return 0;
	case O_BOOL:
		if (strcmp(v, "0") && strcmp(v, "1"))
			break;
		*(bool *)p = v[0] == '1';
		return 0;
	case O_INT:
		i = strtoll(v, &end, 10);
		if (errno || !*v || *end || i < -1 || i > CKPT_WORLD_MAX)
			break;
		*(int *)(void *)p = (int)i;
		return 0;
	case O_UINT:
	case O_U64:
		u = strtoull(v, &end, 10);
		if (errno || !*v || *end || *v == '-' ||
		    (o->kind == O_UINT && u > UINT32_MAX))
			break;
		if (o->kind == O_UINT)
			*(unsigned *)(void *)p = (unsigned)u;
		else
			*(uint64_t *)(void *)p = u;
		return 0;
	}
	util_msg(msg, msg_len, "option %s: '%s' is not %s", o->key, v,
		 o->kind == O_BOOL ? "0 or 1" : o->kind == O_INT ?
		 "a whole number from -1" : "a whole number from 0");
	return -EINVAL;
}

int ckpt_open_opts(const char *options, struct ckpt **out, char *msg,
		   size_t msg_len)
{
	struct ckpt_config cfg;
	char *copy, *line, *save = NULL;
	int rc = 0;

	*out = NULL;
	ckpt_config_init(&cfg);
	copy = strdup(options ? options : "");
	if (!copy)
		return -ENOMEM;
	for (line = strtok_r(copy, "\n", &save); line && !rc;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		size_t k;

		if (!eq) {
			util_msg(msg, msg_len, "option '%s' has no '=': give "
				 "key=value, one a line", line);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		for (k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
			if (!strcmp(opts[k].key, line))
				break;
		if (k == sizeof(opts) / sizeof(opts[0])) {
			char known[512] = "";

			for (size_t j = 0; j < sizeof(opts) / sizeof(opts[0]);
			     j++)
				snprintf(known + strlen(known),
					 sizeof(known) - strlen(known), "%s%s",
					 j ? ", " : "", opts[j].key);
			util_msg(msg, msg_len, "unknown option '%s' (known: "
				 "%s)", line, known);
			rc = -EINVAL;
			break;
		}
		rc = set_opt(&cfg, &opts[k], eq + 1, msg, msg_len);
	}
	if (!rc)
		rc = ckpt_open(&cfg, out, msg, msg_len); /* copies strings */
	free(copy);
	return rc;
}

size_t ckpt_struct_size(const char *name)
{
	static const struct {
		const char *name;
		size_t size;
	} sizes[] = {
		{ "ckpt_stats", sizeof(struct ckpt_stats) },
		{ "ckpt_step_info", sizeof(struct ckpt_step_info) },
		{ "ckpt_tensor_info", sizeof(struct ckpt_tensor_info) },
		{ "ckpt_global_info", sizeof(struct ckpt_global_info) },
		{ "ckpt_buf", sizeof(struct ckpt_buf) },
	};

	for (size_t i = 0; name && i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (!strcmp(sizes[i].name, name))
			return sizes[i].size;
	return 0;
}
