/* SPDX-License-Identifier: MIT */
/*
 * fmfs.c - the fmfs command: dispatches to a cmd_<verb>() per subcommand:
 * `fmfs obj ...` (cmd_obj.c: the object-store client by hand) and mount,
 * umount, status, prefetch, evict (cmd_mount.c).
 */
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
