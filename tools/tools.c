/* SPDX-License-Identifier: MIT */
/*
 * tools.c - what the three front ends (fmfs, fmckpt, fmtrain) share
 * (tools.h): what main() does around its table of subcommands (help,
 * version, an unknown verb), parsers for sizes and numbers, getopt_long
 * with the object-store options every tool takes, the message for a bad
 * option value, and exit codes for objstore statuses.  What one tool
 * alone uses is in its own files.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

int tools_builtin_verb(int argc, char **argv, void (*usage)(FILE *f),
		       const char *version)
{
	const char *verb = argc < 2 ? NULL : argv[1];

	if (!verb) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help") ||
	    !strcmp(verb, "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(verb, "--version") || !strcmp(verb, "version")) {
		printf("%s\n", version);
		return EXIT_OK;
	}
	return -1;
}

int tools_unknown_verb(const char *prog, const char *verb,
		       void (*usage)(FILE *f))
{
	fprintf(stderr, "%s: unknown command '%s'\n", prog, verb);
	usage(stderr);
	return EXIT_USAGE;
}

int tools_main(int argc, char **argv, const char *prog, const char *version,
	       void (*usage)(FILE *f), const struct tools_cmd *cmds,
	       size_t ncmds)
{
	int rc = tools_builtin_verb(argc, argv, usage, version);

	if (rc >= 0)
		return rc;
	for (size_t i = 0; i < ncmds; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	return tools_unknown_verb(prog, argv[1], usage);
}

int tools_parse_size(const char *s, uint64_t *out)
{
	uint64_t whole = 0, frac = 0, den = 1, mul = 1;
	unsigned __int128 v;
	bool overflow = false;
	const char *p = s;

	/* Integers, not strtod: a double has 53 bits, so a size near 2^64
	 * was rounded before any check could see it had overflowed. */
	if (!p || *p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++)
		overflow |= __builtin_mul_overflow(whole, 10, &whole) ||
			    __builtin_add_overflow(whole,
						   (uint64_t)(*p - '0'), &whole);
	if (*p == '.') {
		if (p[1] < '0' || p[1] > '9')
			return -EINVAL;
		for (p++; *p >= '0' && *p <= '9'; p++)
			if (den < 1000000000000000000ull) { /* 18 digits */
				frac = frac * 10 + (uint64_t)(*p - '0');
				den *= 10;
			}
	}
	switch (*p) {
	case 'k': case 'K': mul = 1ull << 10; p++; break;
	case 'm': case 'M': mul = 1ull << 20; p++; break;
	case 'g': case 'G': mul = 1ull << 30; p++; break;
	case 't': case 'T': mul = 1ull << 40; p++; break;
	default: break;
	}
	if (*p == 'i' && mul > 1)
		p++;
	if ((*p == 'B' || *p == 'b') && p[1] == '\0')
		p++;
	if (*p)
		return -EINVAL;
	v = (unsigned __int128)whole * mul +
	    (unsigned __int128)frac * mul / den;
	if (overflow || v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

int tools_parse_u64(const char *s, uint64_t min, uint64_t max,
		    uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9') /* strtoull takes spaces and a sign */
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int tools_parse_double(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

int tools_bad_opt(const char *prog, const char *opt, const char *v,
		  const char *want)
{
	fprintf(stderr, "%s: %s '%s': give %s\n", prog, opt, v, want);
	return -1;
}

void tools_arg_error(const char *verb, const char *what, const char *arg)
{
	const char *prog = program_invocation_short_name;
	const char *base = strrchr(verb, '/') ? strrchr(verb, '/') + 1 : verb;
	size_t pl = strlen(prog);
	char name[128];

	if (!strcmp(base, prog) || (!strncmp(base, prog, pl) &&
				    base[pl] == ' '))
		snprintf(name, sizeof(name), "%s", base); /* named already */
	else
		snprintf(name, sizeof(name), "%s %s", prog, base);
	fprintf(stderr, "%s: %s '%s' (%s --help lists what it takes)\n",
		name, what, arg, name);
}

int tools_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, struct obj_config *cfg)
{
	char opts[64];

	/* Our own messages, naming the command (getopt's name argv[0],
	 * which is the verb alone). */
	snprintf(opts, sizeof(opts), ":%s", shortopts);
	opterr = 0;
	for (;;) {
		int ch = getopt_long(argc, argv, opts, longopts, NULL);
		char shortopt[3] = { '-', (char)optopt, '\0' };
		/* the word at fault: a long option as written, else -X */
		const char *bad = optind > 0 && optind <= argc &&
				  !strncmp(argv[optind - 1], "--", 2) ?
				  argv[optind - 1] : optopt && optopt < 256 ?
				  shortopt : argv[optind - 1];

		switch (ch) {
		case ':':
			tools_arg_error(argv[0], "option needs a value:", bad);
			return '?';
		case '?':
			tools_arg_error(argv[0], "unknown option", bad);
			return '?';
		case TOOLS_OPT_ENDPOINT: cfg->endpoint = optarg; break;
		case TOOLS_OPT_REGION: cfg->region = optarg; break;
		case TOOLS_OPT_PROFILE: cfg->profile = optarg; break;
		case TOOLS_OPT_PATH_STYLE: cfg->path_style = 1; break;
		default: return ch;
		}
	}
}

int tools_exit_code(obj_status st)
{
	switch (st) {
	case OBJ_OK:
		return EXIT_OK;
	case OBJ_ERR_INVALID:
		return EXIT_USAGE;
	case OBJ_ERR_CREDENTIALS:
	case OBJ_ERR_AUTH:
	case OBJ_ERR_DENIED:
		return EXIT_AUTH;
	case OBJ_ERR_NO_BUCKET:
	case OBJ_ERR_NOT_FOUND:
		return EXIT_NOT_FOUND;
	case OBJ_ERR_CONNECT:
	case OBJ_ERR_TIMEOUT:
		return EXIT_UNREACHABLE;
	default:
		return EXIT_FAIL;
	}
}
