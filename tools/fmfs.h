/* SPDX-License-Identifier: MIT */
/*
 * fmfs.h - shared by fmfs's files (tools/fmfs*.c): the subcommands the
 * table in fmfs.c dispatches to, and what mount and the control verbs
 * both use.
 *
 * fmfs_mount.c: mount (checks, then a daemon that serves the mount and
 * its control socket).  fmfs_ctl.c: umount, flush, status, prefetch,
 * evict, the verbs that find a running mount's control socket through an
 * xattr on its root and talk to the daemon there.  fmfs_obj.c: obj, the
 * object-store client by hand.  Each cmd_<verb>() gets argv[0] the verb
 * and returns an exit code of tools.h.
 */
#ifndef FMFS_TOOLS_FMFS_H
#define FMFS_TOOLS_FMFS_H

#include <stdbool.h>

#include "tools.h"

int cmd_mount(int argc, char **argv);     /* fmfs_mount.c */
int cmd_umount(int argc, char **argv);    /* fmfs_ctl.c */
int cmd_flush(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_prefetch(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_obj(int argc, char **argv);       /* fmfs_obj.c */

/* Is real (a path realpath made) the root of a mount, per
 * /proc/self/mountinfo?  mount refuses a busy mountpoint; umount still
 * unmounts one whose daemon is gone. */
bool fmfs_is_mounted(const char *real);

#endif /* FMFS_TOOLS_FMFS_H */
