/* SPDX-License-Identifier: MIT */
/*
 * fmfs_mount.c - `fmfs mount`: one subcommand, cmd_mount().
 *
 * mount checks everything it can before going to the background (URL,
 * options, credentials and bucket with one request, mountpoint, cache
 * directory), then forks a daemon that opens the store and the cache and
 * runs fs_run; the parent waits on a pipe and exits 0 only once the mount
 * is live, or non-zero with the daemon's message.  The daemon listens on
 * a control socket, whose path it publishes in an xattr on the mount's
 * root; umount, flush, status, prefetch and evict (fmfs_ctl.c) find it
 * there.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/fs.h"
#include "metrics/metrics.h"
#include "fmfs.h"

#define MOUNT_WAIT_S 60

struct mount_opts {
	struct obj_config obj;
	const char *url, *mountpoint, *cache_dir, *fuse_opts;
	const char *metrics_addr; /* --metrics */
	const char *peers, *peer_listen, *peer_secret_file; /* the group */
	unsigned peer_timeout_ms;
	const char *peer_transport;  /* auto, tcp or a libfabric provider */
	bool peer_keep_local;
	/* The group's files as absolute paths: the daemon runs in /. */
	char peers_real[PATH_MAX], secret_real[PATH_MAX];
	const char *cache_size_arg;   /* as given, for messages */
	uint64_t cache_size;
	int mode;
	unsigned refresh_s, negative_refresh_s, threads, fetch_timeout_s;
	unsigned async_delay_s, upload_parallel;
	bool foreground, debug, no_passthrough, no_uring;
	int file_mode, dir_mode;    /* -1: fs's defaults (attr_opt) */
	int64_t uid, gid;
	bool no_allow_other;
	uint64_t mem_entries, mem_inodes, namespace_bytes; /* 0: defaults */
	bool disconnected;          /* the store did not answer (precheck) */
	char mnt_real[PATH_MAX], cache_real[PATH_MAX], ctl_path[256];
	char cache_def[PATH_MAX];   /* the default cache dir, when chosen */
	/* What this mount made, for a failed one to remove (undo_cache_dir):
	 * the topmost directory it created on the way to cache_dir, or the
	 * cache dir's contents when it was there but empty. */
	char cache_made[PATH_MAX];
	bool cache_was_empty;
};

static void mount_usage(FILE *f)
{
	fprintf(f,
"usage: fmfs mount URL MOUNTPOINT [options]\n"
"  URL: s3://BUCKET[/PREFIX] or file:///DIR\n"
"  --cache-dir DIR       cache directory (default: one per URL under\n"
"                        /var/cache/fmfs as root, else ~/.cache/fmfs)\n"
"  --cache-size SIZE     cap on cached bytes, K/M/G/T, at least 16M and at\n"
"                        most the cache disk's size (default: half of\n"
"                        the free space of the cache directory's disk)\n"
"  --endpoint URL --region R --profile P --path-style  (as fmfs obj)\n"
"  --credentials FILE    the AWS shared credentials file to take the keys\n"
"                        from (AWS_SHARED_CREDENTIALS_FILE; --profile\n"
"                        picks its section)\n"
"  --mode MODE           sw (default: this cache is the only writer), iw\n"
"                        (independent writers: revalidate, last close\n"
"                        wins), lu (local updates, never uploaded), ro\n"
"  --async-delay SECONDS upload a file this long after close, 0-86400\n"
"                        (default 1)\n"
"  --part-size SIZE      multipart part size (default 8M)\n"
"  --upload-parallel N   requests in flight to the store, 1-64 (default 16)\n"
"  --refresh SECONDS     revalidate listings and attributes, 0-86400\n"
"                        (default 30; 0: at every lookup)\n"
"  --negative-refresh SECONDS\n"
"                        a name missing from a listing this old is asked\n"
"                        of the store (one LIST), 0-86400 (default 1;\n"
"                        at most --refresh)\n"
"  --timeout SECONDS     an uncached read fails with EIO after, 1-86400\n"
"                        (default 30)\n"
"  --threads N           FUSE worker threads, 1-64 (default 8)\n"
"  --memory-entries N    directory entries kept in memory, 1000-100000000\n"
"                        (default 65536; the cache index keeps the rest)\n"
"  --memory-inodes N     inodes before the kernel is asked to drop unused\n"
"                        names, 1000-100000000 (default 65536)\n"
"  --namespace-size SIZE listings kept in the cache index, K/M/G (default\n"
"                        1G; the least recently used go past it)\n"
"  --metrics ADDR:PORT   serve Prometheus metrics at http://ADDR:PORT/metrics\n"
"                        (127.0.0.1:9100, :9100 for every address)\n"
"  --peers FILE|LIST     the cache group: the members' HOST:PORT (this one\n"
"                        too), in a file or comma-separated\n"
"                        (docs/cluster-cache.md)\n"
"  --peer-listen ADDR:PORT  where this member serves the others (as it\n"
"                        appears in --peers)\n"
"  --peer-secret-file FILE  the group's shared secret (16-4096 bytes)\n"
"  --peer-timeout MS     how long a peer may stay silent before the bucket\n"
"                        is asked instead (an owner still fetching says\n"
"                        so and is waited for, up to --timeout minus this),\n"
"                        100-60000, at most half of --timeout (default\n"
"                        5000)\n"
"  --peer-transport T    how runs move between members: auto (RDMA through\n"
"                        libfabric's verbs provider where the listen\n"
"                        address has it, else TCP), tcp, or a libfabric\n"
"                        provider such as 'verbs;ofi_rxm' or 'tcp;ofi_rxm'\n"
"                        (required then)\n"
"  --peer-keep-local     keep the runs peers sent after the file's last\n"
"                        close (default: dropped then; their owner keeps\n"
"                        the group's copy)\n"
"  --no-passthrough      send writes through the daemon even where the\n"
"                        kernel could write files open for writing\n"
"                        straight into the cache (FUSE passthrough)\n"
"  --no-uring            take requests from /dev/fuse even where the kernel\n"
"                        offers FUSE over io_uring (docs/fuse-uring.md)\n"
"  --file-mode MODE --dir-mode MODE --uid UID --gid GID\n"
"                        what objects whose mode/uid/gid are not known\n"
"                        show (default 0600, 0755, the mounting user)\n"
"  --no-allow-other      as root: do not let other users in (root mounts\n"
"                        add allow_other by default)\n"
"  --foreground          stay attached (logs on stderr)\n"
"  -o OPTS               extra FUSE mount options\n"
"  --debug               FUSE debug output (implies --foreground)\n"
"\n"
"  fmfs umount MOUNTPOINT [--timeout SECONDS]  (uploads first)\n"
"  fmfs flush MOUNTPOINT [PATH] [--wait] [--timeout SECONDS]\n"
"  fmfs status MOUNTPOINT [--json]\n"
"  fmfs prefetch MOUNTPOINT (PATH... | --list FILE) [--wait]\n"
"  fmfs evict MOUNTPOINT (PATH... | --list FILE)\n");
}

/* A whole number of unit from min to max for option name, or -1 with
 * the range on stderr (no sign, no trailing text, no overflow). */
static int mount_uint_opt(const char *name, const char *arg, unsigned min,
			  unsigned max, const char *unit, unsigned *out)
{
	char want[96];
	uint64_t v;

	if (!tools_parse_u64(arg, min, max, &v)) {
		*out = (unsigned)v;
		return 0;
	}
	snprintf(want, sizeof(want), "a whole number of %s from %u to %u",
		 unit, min, max);
	return tools_bad_opt("fmfs mount", name, arg, want);
}

/* --cache-size: at least 16M; whether the cache's disk can hold it is
 * checked once the cache directory is known (prepare_cache_dir). */
static int mount_cache_size_opt(const char *arg, uint64_t *out)
{
	int rc = tools_parse_size(arg, out);

	if (rc == -ERANGE) {
		fprintf(stderr, "fmfs mount: --cache-size '%s' is too large: "
			"it does not fit in 64 bits (16E bytes); give at most "
			"the size of the cache directory's disk\n", arg);
		return -1;
	}
	if (rc || *out < (16u << 20))
		return tools_bad_opt("fmfs mount", "--cache-size", arg,
				     "a size of at least 16M, like 64G "
				     "(K/M/G/T suffixes)");
	return 0;
}

/* --file-mode, --dir-mode (octal, at most 0777), --uid, --gid. */
static int attr_opt(const char *opt, const char *v, struct mount_opts *o)
{
	bool is_mode = !strcmp(opt, "--file-mode") ||
		       !strcmp(opt, "--dir-mode");
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, is_mode ? 8 : 10);
	if (!*v || *end || errno || *v == '-' ||
	    n > (is_mode ? 0777ul : 0xfffffffeul))
		return tools_bad_opt("fmfs mount", opt, v, is_mode ?
				     "an octal mode from 0 to 0777" :
				     "a number from 0 to 4294967294");
	if (!strcmp(opt, "--file-mode"))
		o->file_mode = (int)n;
	else if (is_mode)
		o->dir_mode = (int)n;
	else if (!strcmp(opt, "--uid"))
		o->uid = (int64_t)n;
	else
		o->gid = (int64_t)n;
	return 0;
}

/* fmfs mount's long options (also the -o spellings of mount.fmfs,
 * fmfs_helper.c). */
enum { OPT_CACHE_DIR = 256, OPT_CACHE_SIZE, OPT_MODE, OPT_REFRESH,
       OPT_FG, OPT_TIMEOUT, OPT_THREADS, OPT_DEBUG, OPT_DELAY, OPT_PART,
       OPT_UPAR, OPT_NO_PT, OPT_NO_URING, OPT_FMODE, OPT_DMODE, OPT_UID, OPT_GID,
       OPT_NO_AO, OPT_NEG, OPT_MEM, OPT_NS, OPT_INO, OPT_METRICS,
       OPT_PEERS, OPT_PEER_LISTEN, OPT_PEER_SECRET, OPT_PEER_TIMEOUT,
       OPT_PEER_TRANSPORT, OPT_PEER_KEEP_LOCAL, OPT_CREDENTIALS };
static const struct option mount_lo[] = {
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
	TOOLS_OBJ_OPTIONS,
	{ "credentials", required_argument, NULL, OPT_CREDENTIALS },
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "refresh", required_argument, NULL, OPT_REFRESH },
	{ "negative-refresh", required_argument, NULL, OPT_NEG },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "foreground", no_argument, NULL, OPT_FG },
	{ "debug", no_argument, NULL, OPT_DEBUG },
	{ "async-delay", required_argument, NULL, OPT_DELAY },
	{ "part-size", required_argument, NULL, OPT_PART },
	{ "upload-parallel", required_argument, NULL, OPT_UPAR },
	{ "no-passthrough", no_argument, NULL, OPT_NO_PT },
	{ "no-uring", no_argument, NULL, OPT_NO_URING },
	{ "file-mode", required_argument, NULL, OPT_FMODE },
	{ "dir-mode", required_argument, NULL, OPT_DMODE },
	{ "uid", required_argument, NULL, OPT_UID },
	{ "gid", required_argument, NULL, OPT_GID },
	{ "no-allow-other", no_argument, NULL, OPT_NO_AO },
	{ "memory-entries", required_argument, NULL, OPT_MEM },
	{ "namespace-size", required_argument, NULL, OPT_NS },
	{ "memory-inodes", required_argument, NULL, OPT_INO },
	{ "metrics", required_argument, NULL, OPT_METRICS },
	{ "peers", required_argument, NULL, OPT_PEERS },
	{ "peer-listen", required_argument, NULL, OPT_PEER_LISTEN },
	{ "peer-secret-file", required_argument, NULL, OPT_PEER_SECRET },
	{ "peer-timeout", required_argument, NULL, OPT_PEER_TIMEOUT },
	{ "peer-transport", required_argument, NULL, OPT_PEER_TRANSPORT },
	{ "peer-keep-local", no_argument, NULL, OPT_PEER_KEEP_LOCAL },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

const struct option *fmfs_mount_options(void)
{
	return mount_lo;
}

/* The options, one family at a time: each mount_*_opt() takes option c
 * with its argument, and returns 0 when done, -1 after a message on
 * stderr, or 1 when c is not of its family. */

/* Where bytes are kept: the cache directory, its size, the namespace on
 * disk and the listings and inodes in memory. */
static int mount_cache_opt(int c, const char *arg, struct mount_opts *o)
{
	switch (c) {
	case OPT_CACHE_DIR: o->cache_dir = arg; return 0;
	case OPT_CACHE_SIZE:
		if (mount_cache_size_opt(arg, &o->cache_size))
			return -1;
		o->cache_size_arg = arg;
		return 0;
	case OPT_MEM:
		if (tools_parse_u64(arg, 1000, 100000000, &o->mem_entries))
			return tools_bad_opt("fmfs mount", "--memory-entries",
					     arg, "a whole number of entries "
					     "from 1000 to 100000000");
		return 0;
	case OPT_INO:
		if (tools_parse_u64(arg, 1000, 100000000, &o->mem_inodes))
			return tools_bad_opt("fmfs mount", "--memory-inodes",
					     arg, "a whole number of inodes "
					     "from 1000 to 100000000");
		return 0;
	case OPT_NS:
		if (tools_parse_size(arg, &o->namespace_bytes) ||
		    o->namespace_bytes < (64u << 10) ||
		    o->namespace_bytes > (1ull << 40))
			return tools_bad_opt("fmfs mount", "--namespace-size",
					     arg, "a size from 64K to 1T");
		return 0;
	default:
		return 1;
	}
}

/* --credentials FILE: the AWS shared credentials file, read as
 * AWS_SHARED_CREDENTIALS_FILE is (mount.fmfs's credentials=FILE is this
 * option).  Checked here, so that a mistake gets a message naming the
 * file rather than "no credentials found", and made absolute: the daemon
 * runs in /.  Keys in the environment still come first, as for every AWS
 * tool: said once, since the file would then go unread. */
static int mount_credentials_opt(const char *arg)
{
	char real[PATH_MAX];
	struct stat st;
	int fd = -1, e = 0;

	if (!realpath(arg, real))
		e = errno;
	else if ((fd = open(real, O_RDONLY | O_CLOEXEC)) < 0)
		e = errno;
	else if (fstat(fd, &st))
		e = errno;
	else if (!S_ISREG(st.st_mode))
		e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
	if (fd >= 0)
		close(fd);
	if (e) {
		fprintf(stderr, "fmfs mount: --credentials '%s': %s: give the "
			"AWS shared credentials file to take the keys from, "
			"readable by this user (an INI file: [default], "
			"aws_access_key_id = ..., aws_secret_access_key = "
			"...)\n", arg, e == EINVAL ? "not a regular file" :
			strerror(e));
		return -1;
	}
	if (setenv("AWS_SHARED_CREDENTIALS_FILE", real, 1)) {
		perror("fmfs mount: setenv");
		return -1;
	}
	if (getenv("AWS_ACCESS_KEY_ID") && *getenv("AWS_ACCESS_KEY_ID") &&
	    getenv("AWS_SECRET_ACCESS_KEY") &&
	    *getenv("AWS_SECRET_ACCESS_KEY"))
		fprintf(stderr, "fmfs mount: note: AWS_ACCESS_KEY_ID and "
			"AWS_SECRET_ACCESS_KEY are set, and keys in the "
			"environment come before --credentials %s: unset them "
			"to use the file\n", real);
	return 0;
}

/* How the mount talks to the store: the mode, credentials, uploads, how
 * long listings are trusted and reads wait. */
static int mount_store_opt(int c, const char *arg, struct mount_opts *o)
{
	uint64_t v;

	switch (c) {
	case OPT_MODE:
		o->mode = fs_mode_parse(arg);
		if (o->mode < 0)
			return tools_bad_opt("fmfs mount", "--mode", arg,
					     "ro, sw, iw or lu");
		return 0;
	case OPT_PART:
		if (tools_parse_size(arg, &v) || v < (5u << 20) ||
		    v > (5ull << 30))
			return tools_bad_opt("fmfs mount", "--part-size", arg,
					     "a size from 5M to 5G (S3's "
					     "limits)");
		o->obj.part_size_bytes = (size_t)v;
		o->obj.multipart_threshold_bytes = (size_t)v * 2;
		return 0;
	case OPT_REFRESH:
		return mount_uint_opt("--refresh", arg, 0, 86400, "seconds",
				      &o->refresh_s);
	case OPT_NEG:
		return mount_uint_opt("--negative-refresh", arg, 0, 86400,
				      "seconds", &o->negative_refresh_s);
	case OPT_TIMEOUT:
		return mount_uint_opt("--timeout", arg, 1, 86400, "seconds",
				      &o->fetch_timeout_s);
	case OPT_DELAY:
		return mount_uint_opt("--async-delay", arg, 0, 86400,
				      "seconds", &o->async_delay_s);
	case OPT_UPAR:
		return mount_uint_opt("--upload-parallel", arg, 1, 64,
				      "requests", &o->obj.max_parallel);
	case OPT_CREDENTIALS:
		return mount_credentials_opt(arg);
	default:
		return 1;
	}
}

/* What the kernel and the users see: FUSE, the daemon, attributes of
 * objects without their own, metrics. */
static int mount_fuse_opt(int c, const char *arg, struct mount_opts *o)
{
	char why[300];

	switch (c) {
	case OPT_THREADS:
		return mount_uint_opt("--threads", arg, 1, 64, "threads",
				      &o->threads);
	case 'f':
	case OPT_FG: o->foreground = true; return 0;
	case OPT_DEBUG: o->debug = o->foreground = true; return 0;
	case OPT_NO_PT: o->no_passthrough = true; return 0;
	case OPT_NO_URING: o->no_uring = true; return 0;
	case OPT_NO_AO: o->no_allow_other = true; return 0;
	case 'o': o->fuse_opts = arg; return 0;
	case OPT_FMODE:
		return attr_opt("--file-mode", arg, o);
	case OPT_DMODE:
		return attr_opt("--dir-mode", arg, o);
	case OPT_UID:
		return attr_opt("--uid", arg, o);
	case OPT_GID:
		return attr_opt("--gid", arg, o);
	case OPT_METRICS:
		if (metrics_addr_check(arg, why, sizeof(why)))
			return tools_bad_opt("fmfs mount", "--metrics", arg,
					     "ADDRESS:PORT, like 127.0.0.1:9100,"
					     " [::1]:9100 or :9100");
		o->metrics_addr = arg;
		return 0;
	default:
		return 1;
	}
}

/* The cache group (docs/cluster-cache.md). */
static int mount_group_opt(int c, const char *arg, struct mount_opts *o)
{
	switch (c) {
	case OPT_PEERS: o->peers = arg; return 0;
	case OPT_PEER_LISTEN: o->peer_listen = arg; return 0;
	case OPT_PEER_SECRET: o->peer_secret_file = arg; return 0;
	case OPT_PEER_TRANSPORT: o->peer_transport = arg; return 0;
	case OPT_PEER_KEEP_LOCAL: o->peer_keep_local = true; return 0;
	case OPT_PEER_TIMEOUT:
		return mount_uint_opt("--peer-timeout", arg, 100, 60000,
				      "milliseconds", &o->peer_timeout_ms);
	default:
		return 1;
	}
}

/* The group's options once all are read: all three or none, the peer
 * timeout against --timeout (and its default), absolute paths for the
 * daemon, which runs in /.  0, or -1 after a message. */
static int mount_group_check(struct mount_opts *o)
{
	/* A peer's answer must come well before a reader gives up
	 * (--timeout), so that the bucket still has time. */
	unsigned half = o->fetch_timeout_s * 500;

	if ((o->peers || o->peer_listen || o->peer_secret_file ||
	     o->peer_timeout_ms || o->peer_transport || o->peer_keep_local) &&
	    (!o->peers || !o->peer_listen || !o->peer_secret_file)) {
		fprintf(stderr, "fmfs mount: a cache group needs --peers, "
			"--peer-listen and --peer-secret-file together (an "
			"unauthenticated peer port would serve the bucket's "
			"data to anyone who reaches it)\n");
		return -1;
	}
	if (!o->peers)
		return 0;
	if (o->peer_timeout_ms > half) {
		fprintf(stderr, "fmfs mount: --peer-timeout %u is more than "
			"half of --timeout (%u s): a reader would fail before "
			"the bucket is asked\n", o->peer_timeout_ms,
			o->fetch_timeout_s);
		return -1;
	}
	if (!o->peer_timeout_ms)
		o->peer_timeout_ms = 5000 < half * 2 / 3 ? 5000 : half * 2 / 3;
	if (realpath(o->peers, o->peers_real))
		o->peers = o->peers_real;
	if (o->peer_secret_file &&
	    realpath(o->peer_secret_file, o->secret_real))
		o->peer_secret_file = o->secret_real;
	return 0;
}

static int parse_mount_opts(int argc, char **argv, struct mount_opts *o)
{
	static int (*const family[])(int c, const char *arg,
				     struct mount_opts *o) = {
		mount_cache_opt, mount_store_opt, mount_fuse_opt,
		mount_group_opt,
	};
	int c, rc;

	obj_config_init(&o->obj);
	o->file_mode = o->dir_mode = -1;
	o->uid = o->gid = -1;
	o->refresh_s = 30;
	o->negative_refresh_s = 1;
	o->fetch_timeout_s = 30;
	o->mode = FS_MODE_SW;
	o->async_delay_s = 1;
	optind = 1;
	while ((c = tools_getopt(argc, argv, "o:fh", mount_lo, &o->obj)) != -1) {
		if (c == 'h') {
			mount_usage(stdout);
			exit(EXIT_OK);
		}
		rc = 1;
		for (size_t i = 0; rc > 0 &&
		     i < sizeof(family) / sizeof(family[0]); i++)
			rc = family[i](c, optarg, o);
		if (rc) /* -1: said why; 1: '?', said by tools_getopt */
			return -1;
	}
	if (argc - optind > 2) {
		tools_arg_error("mount", "unexpected argument (a URL and a "
				"mountpoint are all it takes)", argv[optind + 2]);
		return -1;
	}
	if (argc - optind != 2) {
		mount_usage(stderr);
		return -1;
	}
	o->url = argv[optind];
	o->mountpoint = argv[optind + 1];
	return mount_group_check(o);
}

/* mountinfo writes space, tab, newline and backslash as \\ooo. */
static void unescape_octal(char *s)
{
	char *q = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*q++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*q++ = *s;
		}
	}
	*q = '\0';
}

bool fmfs_mount_find(const char *real, struct fmfs_mount_info *mi)
{
	char line[4096], mp[PATH_MAX];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	bool found = false;

	if (!f)
		return false;
	/* Every line: a later one may be mounted over an earlier one. */
	while (fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - "), *uid;
		char type[64];

		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		unescape_octal(mp);
		if (strcmp(mp, real))
			continue;
		found = true;
		mi->fstype[0] = '\0';
		mi->owner_uid = -1;
		if (!dash || sscanf(dash + 3, "%63s", type) != 1)
			continue;
		snprintf(mi->fstype, sizeof(mi->fstype), "%s", type);
		uid = strstr(dash, "user_id=");
		if (uid)
			mi->owner_uid = strtoll(uid + 8, NULL, 10);
	}
	fclose(f);
	return found;
}

bool fmfs_is_mounted(const char *real)
{
	struct fmfs_mount_info mi;

	return fmfs_mount_find(real, &mi);
}

void fmfs_owner_str(long long uid, char *buf, size_t len)
{
	struct passwd *pw = uid >= 0 ? getpwuid((uid_t)uid) : NULL;

	if (pw)
		snprintf(buf, len, "%s (uid %lld)", pw->pw_name, uid);
	else if (uid >= 0)
		snprintf(buf, len, "uid %lld", uid);
	else
		snprintf(buf, len, "another user");
}

int fmfs_abs_path(const char *p, char *out, size_t len)
{
	char dir[PATH_MAX], parent[PATH_MAX];
	const char *base;
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	if (n >= sizeof(dir))
		return -1;
	memcpy(dir, p, n);
	dir[n] = '\0';
	base = strrchr(dir, '/');
	if (!base) {
		base = dir;
		snprintf(parent, sizeof(parent), ".");
	} else {
		*(char *)base++ = '\0';
		snprintf(parent, sizeof(parent), "%s", dir[0] ? dir : "/");
	}
	if (!realpath(parent, out))
		return -1;
	n = strlen(out);
	if (snprintf(out + n, len - n, "%s%s", n > 1 ? "/" : "", base) >=
	    (int)(len - n))
		return -1;
	return 0;
}

/* The mountpoint is a FUSE mount whose daemon is gone (stat: ENOTCONN).
 * An fmfs one is unmounted here, lazily, so that mounting again after a
 * crash is one command (a restart loop need not know); its dirty files
 * stay in its cache directory, uploaded when that is mounted again, as
 * after `fmfs umount`.  Another filesystem's is left to its owner. */
static int clear_dead_mount(const struct mount_opts *o)
{
	struct fmfs_mount_info mi;
	char abs[PATH_MAX];

	if (fmfs_abs_path(o->mountpoint, abs, sizeof(abs)) ||
	    !fmfs_mount_find(abs, &mi)) {
		fprintf(stderr, "fmfs mount: mountpoint %s: %s: it, or a "
			"directory above it, is a FUSE mount whose daemon is "
			"gone; unmount that first (fusermount3 -u DIR, or "
			"umount -l DIR as root)\n", o->mountpoint,
			strerror(ENOTCONN));
		return EXIT_USAGE;
	}
	if (strcmp(mi.fstype, "fuse.fmfs")) {
		fprintf(stderr, "fmfs mount: mountpoint %s is a dead %s mount "
			"(its daemon is gone: %s); unmount it first: "
			"fusermount3 -u %s\n", abs, mi.fstype[0] ? mi.fstype :
			"FUSE", strerror(ENOTCONN), abs);
		return EXIT_USAGE;
	}
	if (fmfs_unmount(abs, true)) {
		char who[128];

		fmfs_owner_str(mi.owner_uid, who, sizeof(who));
		fprintf(stderr, "fmfs mount: mountpoint %s is a dead fmfs "
			"mount of %s (its daemon is gone) and could not be "
			"unmounted; run fmfs umount %s or fusermount3 -u %s "
			"as %s\n", abs, who, abs, abs, mi.owner_uid == 0 ?
			"root" : "that user or as root");
		return EXIT_USAGE;
	}
	fprintf(stderr, "fmfs mount: %s was a dead fmfs mount (its daemon "
		"had exited); unmounted it\n", abs);
	return EXIT_OK;
}

static int check_mountpoint(struct mount_opts *o)
{
	struct statfs sf;
	struct stat st;

	/* A dead FUSE mount answers ENOTCONN (fmfs_dead_errno), but stat
	 * may be served from attributes the kernel cached while it lived;
	 * statfs always goes to the daemon. */
	if (statfs(o->mountpoint, &sf) && fmfs_dead_errno(errno) == ENOTCONN) {
		int rc = clear_dead_mount(o);

		if (rc)
			return rc;
	}
	if (stat(o->mountpoint, &st)) {
		int e = errno;

		fprintf(stderr, "fmfs mount: mountpoint %s: %s%s\n",
			o->mountpoint, strerror(e), e == ENOENT ? " (create "
			"it with mkdir -p)" : "");
		return EXIT_USAGE;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "fmfs mount: mountpoint %s is not a "
			"directory\n", o->mountpoint);
		return EXIT_USAGE;
	}
	if (!realpath(o->mountpoint, o->mnt_real)) {
		fprintf(stderr, "fmfs mount: %s: %s\n", o->mountpoint,
			strerror(errno));
		return EXIT_USAGE;
	}
	if (fmfs_is_mounted(o->mnt_real)) {
		fprintf(stderr, "fmfs mount: %s is busy: something is already "
			"mounted there (fmfs umount %s)\n", o->mnt_real,
			o->mnt_real);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

/* After a failed mount: removes what prepare_cache_dir and the cache
 * made (fmfs_cache_undo). */
static void undo_cache_dir(const struct mount_opts *o)
{
	fmfs_cache_undo(o->cache_dir, o->cache_made, o->cache_was_empty);
}

/* Default cache dir, size and control socket; creates the cache dir. */
static int prepare_cache_dir(struct mount_opts *o)
{
	char *def = o->cache_def, name[96];
	const size_t deflen = sizeof(o->cache_def);
	const char *home = getenv("HOME"), *xdg = getenv("XDG_CACHE_HOME");
	const char *rundir;
	struct statvfs sv;
	uint64_t disk;
	int rc;

	if (!o->cache_dir) {
		size_t j = 0;

		for (const char *s = o->url; *s && j < 60; s++)
			name[j++] = (char)((*s >= 'a' && *s <= 'z') ||
					   (*s >= '0' && *s <= '9') ||
					   *s == '-' ? *s : '_');
		snprintf(name + j, sizeof(name) - j, "-%08llx",
			 (unsigned long long)(util_fnv1a64(UTIL_FNV64_BASIS, o->url,
						 strlen(o->url)) & 0xffffffff));
		if (getuid() == 0)
			snprintf(def, deflen, "/var/cache/fmfs/%s", name);
		else if (xdg && *xdg)
			snprintf(def, deflen, "%s/fmfs/%s", xdg, name);
		else
			snprintf(def, deflen, "%s/.cache/fmfs/%s",
				 home ? home : "/tmp", name);
		o->cache_dir = def;
	}
	if ((rc = fmfs_cache_place_check(o->cache_dir, o->mnt_real, o->url)))
		return rc;
	o->cache_was_empty = fmfs_dir_is_empty(o->cache_dir);
	rc = util_mkdir_p_made(o->cache_dir, 0700, o->cache_made,
			       sizeof(o->cache_made));
	if (rc || !realpath(o->cache_dir, o->cache_real) ||
	    access(o->cache_real, W_OK | X_OK)) {
		fprintf(stderr, "fmfs mount: cache directory %s is not usable:"
			" %s (choose another with --cache-dir)\n", o->cache_dir,
			strerror(rc ? -rc : errno));
		return EXIT_USAGE;
	}
	if (statvfs(o->cache_real, &sv)) {
		fprintf(stderr, "fmfs mount: statvfs %s: %s\n", o->cache_real,
			strerror(errno));
		return EXIT_FAIL;
	}
	disk = (uint64_t)sv.f_blocks * sv.f_frsize;
	if (o->cache_size > disk) {
		/* A cap the disk can never reach is a typo (99999T for
		 * 99999M), not a wish: refused.  A cap above what is free
		 * now is fine: on ENOSPC the cache evicts and retries. */
		fprintf(stderr, "fmfs mount: --cache-size '%s' is more than "
			"the disk of %s can ever hold (%llu MiB in all); give "
			"a smaller size or another --cache-dir\n",
			o->cache_size_arg, o->cache_real,
			(unsigned long long)(disk >> 20));
		return EXIT_USAGE;
	}
	if (!o->cache_size) {
		o->cache_size = (uint64_t)sv.f_bavail * sv.f_frsize / 2;
		if (o->cache_size < (64u << 20)) {
			fprintf(stderr, "fmfs mount: the disk of %s has too "
				"little free space for a cache (%llu bytes "
				"free); free some or use --cache-dir\n",
				o->cache_real, (unsigned long long)
				((uint64_t)sv.f_bavail * sv.f_frsize));
			return EXIT_FAIL;
		}
	}
	rundir = fmfs_rundir();
	fmfs_ctl_sweep(rundir);
	snprintf(o->ctl_path, sizeof(o->ctl_path), "%s/fmfs-%016llx.sock",
		 rundir, (unsigned long long)util_fnv1a64(UTIL_FNV64_BASIS,
			 o->mnt_real, strlen(o->mnt_real)));
	return EXIT_OK;
}

static int report_obj(const char *what, const struct obj_error *err)
{
	char line[2048];

	obj_error_format(err, line, sizeof(line));
	fprintf(stderr, "fmfs mount: %s: %s\n", what, line);
	return tools_exit_code(err->status);
}

/* Opens store + cache; on failure writes a message to msg. */
static int open_all(struct mount_opts *o, struct obj_store **st,
		    struct cache **c, char *msg, size_t ml)
{
	struct cache_config cc;
	struct obj_error err;
	int rc;

	o->obj.url = o->url;
	if (obj_open(&o->obj, st, &err) != OBJ_OK) {
		obj_error_format(&err, msg, ml);
		return tools_exit_code(err.status);
	}
	cache_config_init(&cc);
	cc.dir = o->cache_real;
	cc.store_id = o->url;
	cc.dir_made = o->cache_made[0] != '\0';
	cc.size_bytes = o->cache_size;
	cc.fetch_timeout_ms = o->fetch_timeout_s * 1000;
	cc.listing_max_bytes = o->namespace_bytes;
	cc.peer_keep_local = o->peer_keep_local;
	rc = cache_open(&cc, *st, c, msg, ml);
	if (rc) {
		obj_close(*st);
		*st = NULL;
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int serve(struct mount_opts *o, int ready_fd, char *msg, size_t ml)
{
	struct fs_config fc = {
		.mountpoint = o->mnt_real, .store_url = o->url,
		.mode = (enum fs_mode)o->mode, .refresh_s = o->refresh_s,
		.negative_refresh_s = o->negative_refresh_s,
		.async_delay_ms = o->async_delay_s * 1000,
		.threads = o->threads, .fuse_opts = o->fuse_opts,
		.ctl_path = o->ctl_path, .ready_fd = ready_fd,
		.debug = o->debug, .passthrough = !o->no_passthrough,
		.uring = !o->no_uring,
		.file_mode = o->file_mode, .dir_mode = o->dir_mode,
		.uid = o->uid, .gid = o->gid,
		.no_allow_other = o->no_allow_other,
		.listing_mem_entries = o->mem_entries,
		.inode_max = o->mem_inodes,
		.disconnected = o->disconnected,
		.metrics_addr = o->metrics_addr,
	};
	struct obj_store *st;
	struct cache *c;
	struct fmfs_group *gr = NULL;
	int rc = open_all(o, &st, &c, msg, ml);

	if (rc)
		return rc;
	if (o->peers &&
	    fmfs_group_start(o->peers, o->peer_listen, o->peer_secret_file,
			     o->peer_timeout_ms,
			     o->fetch_timeout_s * 1000 - o->peer_timeout_ms,
			     o->peer_transport, c, &gr,
			     msg, ml)) {
		cache_close(c);
		obj_close(st);
		return EXIT_USAGE;
	}
	fc.st = st;
	fc.cache = c;
	rc = fs_run(&fc, msg, ml) ? EXIT_FAIL : EXIT_OK;
	/* No more peer requests into the cache; fetches under way may
	 * still use the client and the lists until the cache is closed. */
	fmfs_group_stop_serving(gr);
	cache_close(c);
	fmfs_group_free(gr);
	obj_close(st);
	return rc;
}

/* Whether the store's answer err means it could not be reached (not
 * that it refused us: credentials, bucket). */
static bool unreachable(const struct obj_error *err)
{
	return err->status == OBJ_ERR_CONNECT ||
	       err->status == OBJ_ERR_TIMEOUT ||
	       err->status == OBJ_ERR_SERVER;
}

/* Checks credentials, bucket and cache before going to the background.
 * A store that does not answer, with a cache dir that knows some of its
 * namespace: mounted disconnected (docs/semantics.md "The store
 * unreachable"). */
static int precheck(struct mount_opts *o)
{
	struct obj_store *st;
	struct obj_error err, down;
	struct cache *c;
	uint64_t dirs = 0, entries = 0;
	char msg[1024];
	int rc;

	if (o->peers && fmfs_group_check(o->peers, o->peer_listen,
					 o->peer_secret_file,
					 o->peer_transport, msg,
					 sizeof(msg))) {
		fprintf(stderr, "fmfs mount: %s\n", msg);
		return EXIT_USAGE;
	}
	o->obj.url = o->url;
	o->obj.read_only = o->mode == FS_MODE_RO;
	if (obj_open(&o->obj, &st, &err) != OBJ_OK)
		return report_obj(o->url, &err);
	if (obj_check_bucket(st, &err) != OBJ_OK) {
		obj_close(st);
		if (!unreachable(&err) || o->cache_was_empty ||
		    o->cache_made[0]) /* nothing cached: nothing to serve */
			return report_obj(o->url, &err);
		o->disconnected = true;
	}
	down = err;
	if (!o->disconnected)
		obj_close(st);
	rc = open_all(o, &st, &c, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "fmfs mount: %s\n", msg);
		return rc;
	}
	if (o->disconnected)
		cache_listing_stats(c, &dirs, &entries);
	cache_close(c);
	obj_close(st);
	if (o->disconnected && !dirs) {
		report_obj(o->url, &down);
		fprintf(stderr, "fmfs mount: the cache dir %s knows nothing of "
			"this bucket yet, so there is nothing to serve "
			"without it; mount again once the store answers\n",
			o->cache_real);
		return tools_exit_code(down.status);
	}
	if (o->disconnected) {
		obj_error_format(&down, msg, sizeof(msg));
		fprintf(stderr, "fmfs mount: warning: the store does not answer "
			"(%s); mounting disconnected from the cache in %s (%llu "
			"directories, %llu entries known): cached files are "
			"served, the rest fails with EIO, writes are queued, and "
			"the mount reconnects on its own\n", msg, o->cache_real,
			(unsigned long long)dirs, (unsigned long long)entries);
	}
	return EXIT_OK;
}

int cmd_mount(int argc, char **argv)
{
	struct mount_opts o;
	char msg[1024], log[PATH_MAX + 16], line[1100];
	int pfd[2], lockfd, rc, status;
	ssize_t n;
	pid_t pid;

	memset(&o, 0, sizeof(o));
	if (parse_mount_opts(argc, argv, &o))
		return EXIT_USAGE;
	if ((rc = check_mountpoint(&o)))
		return rc;
	if (fs_check_fuse_opts(o.fuse_opts, msg, sizeof(msg))) {
		/* Here, not in the daemon: its stderr is the log. */
		fprintf(stderr, "fmfs mount: -o %s: %s\n", o.fuse_opts, msg);
		return EXIT_USAGE;
	}
	if ((rc = prepare_cache_dir(&o))) {
		undo_cache_dir(&o);
		return rc;
	}
	snprintf(log, sizeof(log), "%s/lock", o.cache_real);
	lockfd = open(log, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB)) {
		fprintf(stderr, "fmfs mount: cache directory %s is in use by "
			"another fmfs mount; give this one its own "
			"--cache-dir\n", o.cache_real);
		return EXIT_USAGE;
	}
	rc = precheck(&o);
	if (rc)
		goto out_undo;
	if (o.foreground) {
		rc = serve(&o, -1, msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, "fmfs mount: %s\n", msg);
			undo_cache_dir(&o); /* the mount never came up */
		}
		close(lockfd);
		unlink(o.ctl_path); /* last: umount waits for it */
		return rc;
	}
	if (pipe2(pfd, O_CLOEXEC)) {
		perror("fmfs mount: pipe");
		rc = EXIT_FAIL;
		goto out_undo;
	}
	pid = fork();
	if (pid < 0) {
		perror("fmfs mount: fork");
		close(pfd[0]);
		close(pfd[1]);
		rc = EXIT_FAIL;
		goto out_undo;
	}
	if (pid == 0) {
		int fd;

		close(pfd[0]);
		setsid();
		snprintf(log, sizeof(log), "%s/fmfs.log", o.cache_real);
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			close(fd);
		}
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		if (chdir("/")) {
			/* keep going: only relative paths would suffer */
		}
		rc = serve(&o, pfd[1], msg, sizeof(msg));
		/* Cache closed: free the lock, then remove the socket, which
		 * is what `fmfs umount` waits for. */
		close(lockfd);
		unlink(o.ctl_path);
		if (rc) {
			fprintf(stderr, "fmfs: %s\n", msg);
			snprintf(line, sizeof(line), "error %s\n", msg);
			if (write(pfd[1], line, strlen(line)) < 0) {
				/* the parent is gone: nothing to tell */
			}
		}
		_exit(rc);
	}
	close(pfd[1]);
	close(lockfd); /* the daemon holds its own copy of the lock */
	n = read(pfd[0], line, sizeof(line) - 1);
	close(pfd[0]);
	line[n > 0 ? n : 0] = '\0';
	if (n >= 2 && !strncmp(line, "ok", 2))
		return EXIT_OK;
	waitpid(pid, &status, 0);
	if (n > 6 && !strncmp(line, "error ", 6)) {
		fprintf(stderr, "fmfs mount: %s", line + 6);
		undo_cache_dir(&o); /* the daemon has exited */
	} else {
		/* Kept: the log is all there is to tell what happened. */
		fprintf(stderr, "fmfs mount: the daemon exited before the "
			"mount was live; see %s/fmfs.log\n", o.cache_real);
	}
	return EXIT_FAIL;

out_undo:
	undo_cache_dir(&o); /* before the lock goes: no other mount yet */
	close(lockfd);
	return rc;
}
