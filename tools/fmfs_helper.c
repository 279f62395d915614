/* SPDX-License-Identifier: MIT */
/*
 * fmfs_helper.c - mount.fmfs: what mount(8) runs for `mount -t fmfs` and
 * for /etc/fstab lines of type fmfs, and the same for mount.fuse3's form
 * (type fuse.fmfs: mount.fuse3 runs `fmfs SOURCE DIR -o OPTIONS`).
 *
 * mount(8) calls  mount.fmfs SOURCE DIR [-sfnv] [-N NS] [-o OPTIONS]
 * [-t TYPE].  Each option of OPTIONS becomes an argument of fmfs mount:
 * any of its long options, with `_` or `-` (cache_size=200G,
 * path_style); `ro` means --mode ro; the kernel's and FUSE's own options
 * (nosuid, nodev, noatime, allow_other, ...) go to -o; what only mount(8)
 * and systemd read (_netdev, nofail, noauto, x-systemd.*, comment=,
 * user, defaults, ...) is accepted and left to them.  `credentials=FILE`
 * (fmfs mount --credentials, which checks the file) names the AWS shared
 * credentials file, so that no key needs to be on the line.  Anything
 * else is refused (exit 2) unless -s.  Then fmfs
 * mount runs in this process: it returns once the mount is live, with
 * its own exit codes (docs/mount-helper.md).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmfs.h"

#define HELPER_ARGS_MAX 96

/* Read by mount(8), systemd or the helper's caller, never by fmfs. */
static bool userspace_opt(const char *name, const char *val)
{
	static const char *const plain[] = {
		"defaults", "auto", "noauto", "user", "nouser", "users",
		"owner", "group", "_netdev", "nofail", "rw", "nousers",
		"noowner", "nogroup", "nofail", "bg", "fg", NULL
	};

	if (!strncmp(name, "x-", 2) || !strcmp(name, "comment"))
		return true;
	for (size_t i = 0; plain[i]; i++)
		if (!strcmp(name, plain[i]) && !val)
			return true;
	return false;
}

/* Passed to the kernel through libfuse (fmfs mount -o). */
static bool kernel_opt(const char *name, const char *val)
{
	static const char *const plain[] = {
		"nosuid", "suid", "nodev", "dev", "noexec", "exec", "sync",
		"async", "dirsync", "noatime", "atime", "relatime",
		"norelatime", "strictatime", "nostrictatime", "nodiratime",
		"diratime", "lazytime", "nolazytime", "allow_other",
		"allow_root", "default_permissions", "auto_unmount", NULL
	};
	static const char *const valued[] = {
		"fsname", "subtype", "max_read", NULL
	};

	for (size_t i = 0; plain[i]; i++)
		if (!strcmp(name, plain[i]) && !val)
			return true;
	for (size_t i = 0; valued[i]; i++)
		if (!strcmp(name, valued[i]) && val)
			return true;
	return false;
}

struct helper {
	char *args[HELPER_ARGS_MAX];
	int n;
	char *owned[HELPER_ARGS_MAX]; /* what we malloc'd, freed at the end */
	int nowned;
	char fuse[1024];    /* -o for the kernel */
	const char *mode;   /* mode= given */
	bool ro, sloppy, verbose;
};

static int add(struct helper *h, char *a)
{
	if (!a || h->n >= HELPER_ARGS_MAX - 1) {
		fprintf(stderr, "mount.fmfs: too many options\n");
		return -1;
	}
	h->args[h->n++] = a;
	return 0;
}

static int bad(const char *opt, const char *why)
{
	fprintf(stderr, "mount.fmfs: option '%s': %s\n", opt, why);
	return -1;
}

/* One option of -o: name or name=value. */
static int one_opt(struct helper *h, char *opt)
{
	char *eq = strchr(opt, '='), name[64], *arg;
	const char *val = eq ? eq + 1 : NULL;
	const struct option *lo = fmfs_mount_options();
	size_t nl = eq ? (size_t)(eq - opt) : strlen(opt);

	if (!nl)
		return 0;
	if (nl >= sizeof(name))
		return bad(opt, "no such option");
	memcpy(name, opt, nl);
	name[nl] = '\0';
	if (userspace_opt(name, val))
		return 0;
	if (!strcmp(name, "ro") && !val) {
		h->ro = true;
		return 0;
	}
	if (kernel_opt(name, val)) {
		size_t l = strlen(h->fuse);

		if (l + strlen(opt) + 2 > sizeof(h->fuse))
			return bad(opt, "too many kernel options");
		snprintf(h->fuse + l, sizeof(h->fuse) - l, "%s%s", l ? "," : "",
			 opt);
		return 0;
	}
	for (char *p = name; *p; p++)
		if (*p == '_')
			*p = '-';
	for (; lo->name; lo++) {
		if (strcmp(lo->name, name))
			continue;
		if (!strcmp(name, "help") || !strcmp(name, "foreground") ||
		    !strcmp(name, "debug"))
			return bad(opt, "not for a mount helper (mount(8) "
				   "waits for it to return): run fmfs mount "
				   "--foreground in a service instead");
		if (lo->has_arg == required_argument && (!val || !*val))
			return bad(opt, "needs a value: name=value");
		if (lo->has_arg == no_argument && val)
			return bad(opt, "takes no value");
		if (!strcmp(name, "mode"))
			h->mode = val;
		arg = malloc(strlen(name) + (val ? strlen(val) : 0) + 4);
		if (!arg || h->nowned >= HELPER_ARGS_MAX) {
			free(arg);
			return bad(opt, "out of memory");
		}
		h->owned[h->nowned++] = arg;
		sprintf(arg, "--%s%s%s", name, val ? "=" : "", val ? val : "");
		return add(h, arg);
	}
	if (h->sloppy) {
		if (h->verbose)
			fprintf(stderr, "mount.fmfs: ignoring '%s' (-s)\n", opt);
		return 0;
	}
	return bad(opt, "no such option: fmfs mount's long options are "
		   "accepted with _ or - (cache_size=200G, path_style), "
		   "and so are mount's generic ones; see "
		   "docs/mount-helper.md (or -s to ignore unknown ones)");
}

/* -o OPTIONS: split at commas outside double quotes. */
static int opts(struct helper *h, char *s)
{
	char *start = s;
	bool quoted = false;

	for (char *p = s;; p++) {
		if (*p == '"') {
			memmove(p, p + 1, strlen(p));
			p--;
			quoted = !quoted;
			continue;
		}
		if (*p && (*p != ',' || quoted))
			continue;
		bool end = !*p;

		*p = '\0';
		if (one_opt(h, start))
			return -1;
		if (end)
			return 0;
		start = p + 1;
	}
}

static void helper_usage(FILE *f)
{
	fprintf(f,
"usage: mount.fmfs s3://BUCKET[/PREFIX] DIR [-sfnv] [-o OPTIONS]\n"
"       mount -t fmfs s3://BUCKET[/PREFIX] DIR -o cache_size=200G,mode=ro\n"
"  /etc/fstab: s3://BUCKET/PREFIX /mnt/data fmfs _netdev,nofail,cache_size=200G 0 0\n"
"OPTIONS: any fmfs mount long option with _ or - (endpoint=URL,\n"
"path_style, cache_dir=DIR, ...), ro, credentials=FILE, the kernel's and\n"
"FUSE's options; mount(8)'s and systemd's own are left to them.\n"
"See docs/mount-helper.md and fmfs(1).\n");
}

static int helper_done(struct helper *h, int rc)
{
	for (int i = 0; i < h->nowned; i++)
		free(h->owned[i]);
	return rc;
}

int fmfs_mount_helper(int argc, char **argv)
{
	struct helper h = { .n = 0 };
	const char *pos[2] = { NULL, NULL };
	bool fake = false;
	int npos = 0;

	add(&h, (char *)"mount");
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			helper_usage(stdout);
			return EXIT_OK;
		}
		if (a[0] != '-' || !a[1]) {
			if (npos == 2) {
				fprintf(stderr, "mount.fmfs: unexpected "
					"argument '%s'\n", a);
				helper_usage(stderr);
				return helper_done(&h, EXIT_USAGE);
			}
			pos[npos++] = a;
			continue;
		}
		if (a[1] == 'o' || a[1] == 't' || a[1] == 'N') {
			char *v = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : NULL;

			if (!v) {
				fprintf(stderr, "mount.fmfs: %s needs a value\n",
					a);
				return helper_done(&h, EXIT_USAGE);
			}
			if (a[1] != 'o')
				continue;
			if (h.nowned >= HELPER_ARGS_MAX || !(v = strdup(v))) {
				fprintf(stderr, "mount.fmfs: out of memory\n");
				return helper_done(&h, EXIT_FAIL);
			}
			h.owned[h.nowned++] = v;
			if (opts(&h, v))
				return helper_done(&h, EXIT_USAGE);
			continue;
		}
		for (const char *f = a + 1; *f; f++) {
			switch (*f) {
			case 's': h.sloppy = true; break;
			case 'f': fake = true; break;
			case 'v': h.verbose = true; break;
			case 'n': break; /* no mtab: there is none */
			default:
				fprintf(stderr, "mount.fmfs: unknown flag -%c\n",
					*f);
				helper_usage(stderr);
				return helper_done(&h, EXIT_USAGE);
			}
		}
	}
	if (npos != 2) {
		helper_usage(stderr);
		return helper_done(&h, EXIT_USAGE);
	}
	if (h.ro) {
		if (h.mode && strcmp(h.mode, "ro")) {
			fprintf(stderr, "mount.fmfs: 'ro' and 'mode=%s' "
				"contradict each other: drop one\n", h.mode);
			return helper_done(&h, EXIT_USAGE);
		}
		if (!h.mode && add(&h, (char *)"--mode=ro"))
			return helper_done(&h, EXIT_USAGE);
	}
	if (h.fuse[0] && (add(&h, (char *)"-o") || add(&h, h.fuse)))
		return helper_done(&h, EXIT_USAGE);
	if (add(&h, (char *)pos[0]) || add(&h, (char *)pos[1]))
		return helper_done(&h, EXIT_USAGE);
	h.args[h.n] = NULL;
	if (h.verbose || fake) {
		fprintf(stderr, "mount.fmfs: fmfs");
		for (int i = 0; i < h.n; i++)
			fprintf(stderr, " %s", h.args[i]);
		fprintf(stderr, "%s\n", fake ? " (not run: -f)" : "");
	}
	if (fake)
		return helper_done(&h, EXIT_OK);
	return helper_done(&h, cmd_mount(h.n, h.args));
}
