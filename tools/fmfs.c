/* SPDX-License-Identifier: MIT */
/*
 * fmfs.c - the fmfs command: dispatches to a cmd_<verb>() per subcommand:
 * `fmfs obj ...` (cmd_obj.c: the object-store client by hand) and mount,
 * umount, status, prefetch, evict (cmd_mount.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tools.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: fmfs <command> [args]\n"
"\n"
"  fmfs mount URL MOUNTPOINT [options]        mount a bucket (fmfs mount -h)\n"
"  fmfs umount MOUNTPOINT [--timeout SECONDS]\n"
"  fmfs flush MOUNTPOINT [PATH] [--wait] [--timeout SECONDS]\n"
"  fmfs status MOUNTPOINT [--json]\n"
"  fmfs prefetch MOUNTPOINT (PATH... | --list FILE) [--wait]\n"
"  fmfs evict MOUNTPOINT PATH...\n"
"  fmfs obj ls|stat|get|put|rm|cp|check ...   object-store client\n"
"  fmfs --version\n"
"\n"
"Run 'fmfs obj --help' for the object commands.  See fmfs(1).\n");
}

int tools_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	double mul = 1;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0 || !isfinite(v))
		return -1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end == 'i' && mul > 1)
		end++;
	if ((*end == 'B' || *end == 'b') && end[1] == '\0')
		end++;
	if (*end || v * mul > 1.8e19)
		return -1;
	*out = (uint64_t)(v * mul);
	return 0;
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

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "obj"))
		return cmd_obj(argc - 1, argv + 1);
	if ((rc = cmd_fs(argv[1], argc - 1, argv + 1)) >= 0)
		return rc;
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("fmfs %s\n", FMFS_VERSION);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	fprintf(stderr, "fmfs: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
