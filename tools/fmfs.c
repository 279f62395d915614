/* SPDX-License-Identifier: MIT */
/*
 * fmfs.c - the fmfs command: its usage text and the table of its
 * subcommands, each a cmd_<verb>() (fmfs.h): mount (fmfs_mount.c);
 * umount, flush, status, prefetch, evict (fmfs_ctl.c: they talk to a
 * running mount's daemon); obj (fmfs_obj.c: the object-store client by
 * hand).  Exit codes as in tools.h (and docs/fmfs.1).
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "fmfs.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: fmfs <command> [args]\n"
"\n"
"  fmfs mount URL MOUNTPOINT [options]        mount a bucket (fmfs mount -h)\n"
"  fmfs umount MOUNTPOINT [--timeout SECONDS]\n"
"  fmfs flush MOUNTPOINT [PATH] [--wait] [--timeout SECONDS]\n"
"  fmfs status MOUNTPOINT [--json]\n"
"  fmfs restart MOUNTPOINT [--timeout SECONDS]  a new daemon takes a --keeper\n"
"                                             mount over (docs/keeper.md)\n"
"  fmfs metrics MOUNTPOINT                    Prometheus text (docs/metrics.md)\n"
"  fmfs prefetch MOUNTPOINT (PATH... | --list FILE) [--wait]\n"
"  fmfs evict MOUNTPOINT (PATH... | --list FILE)\n"
"  fmfs obj ls|stat|get|put|rm|mkdir|cp|check ...\n"
"                                             object-store client\n"
"  fmfs --version\n"
"\n"
"Run 'fmfs obj --help' for the object commands.  See fmfs(1).\n");
}

static const struct tools_cmd cmds[] = {
	{ "mount", cmd_mount },
	{ "umount", cmd_umount }, { "unmount", cmd_umount },
	{ "flush", cmd_flush },
	{ "status", cmd_status },
	{ "restart", cmd_restart },
	{ "metrics", cmd_metrics },
	{ "prefetch", cmd_prefetch },
	{ "evict", cmd_evict },
	{ "obj", cmd_obj },
};

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');

	base = base ? base + 1 : argv[0];
	/* mount(8)'s helper, by its name or in mount.fuse3's form (type
	 * fuse.fmfs runs "fmfs SOURCE DIR -o OPTIONS"). */
	if (!strcmp(base, "mount.fmfs") ||
	    (argc >= 3 && strstr(argv[1], "://")))
		return fmfs_mount_helper(argc, argv);
	return tools_main(argc, argv, "fmfs", "fmfs " FMFS_VERSION, usage, cmds,
			  sizeof(cmds) / sizeof(cmds[0]));
}
