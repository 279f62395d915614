/* SPDX-License-Identifier: MIT */
/*
 * fmfs_mount_opts.c - the command line of `fmfs mount`: its usage, each
 * family of options (cache, store, credentials, FUSE, the cache group)
 * parsed and checked into struct mount_opts (fmfs.h), before anything is
 * made.  What the options then do is fmfs_mount.c's.
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
"  --meta-heads N        HEADs in parallel behind listings, for the times,\n"
"                        mode and owner stored with objects this cache\n"
"                        does not know, 0-64 (default 8; 0: none)\n"
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
"  --no-keeper           no keeper process: by default one holds the\n"
"                        mount's /dev/fuse and starts a new daemon if this\n"
"                        one dies (kill -9, the OOM killer), and programs\n"
"                        using the mount carry on (docs/keeper.md); a kept\n"
"                        mount takes its requests from /dev/fuse, so FUSE\n"
"                        over io_uring needs --no-keeper\n"
"  --keeper              the default, for scripts that give it\n"
"  --file-mode MODE --dir-mode MODE --uid UID --gid GID\n"
"                        what objects whose mode/uid/gid are not known\n"
"                        show (default 0600, 0755, the mounting user)\n"
"  --no-allow-other      as root: do not let other users in (root mounts\n"
"                        add allow_other by default)\n"
"  --foreground          stay attached (logs on stderr; no keeper)\n"
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
       OPT_UPAR, OPT_NO_PT, OPT_NO_URING, OPT_KEEPER, OPT_NO_KEEPER, OPT_FMODE, OPT_DMODE,
       OPT_UID, OPT_GID,
       OPT_NO_AO, OPT_NEG, OPT_MEM, OPT_NS, OPT_INO, OPT_METRICS,
       OPT_PEERS, OPT_PEER_LISTEN, OPT_PEER_SECRET, OPT_PEER_TIMEOUT,
       OPT_PEER_TRANSPORT, OPT_PEER_KEEP_LOCAL, OPT_CREDENTIALS,
       OPT_META_HEADS };
static const struct option mount_lo[] = {
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
	TOOLS_OBJ_OPTIONS,
	{ "credentials", required_argument, NULL, OPT_CREDENTIALS },
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "refresh", required_argument, NULL, OPT_REFRESH },
	{ "negative-refresh", required_argument, NULL, OPT_NEG },
	{ "meta-heads", required_argument, NULL, OPT_META_HEADS },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "foreground", no_argument, NULL, OPT_FG },
	{ "debug", no_argument, NULL, OPT_DEBUG },
	{ "async-delay", required_argument, NULL, OPT_DELAY },
	{ "part-size", required_argument, NULL, OPT_PART },
	{ "upload-parallel", required_argument, NULL, OPT_UPAR },
	{ "no-passthrough", no_argument, NULL, OPT_NO_PT },
	{ "no-uring", no_argument, NULL, OPT_NO_URING },
	{ "keeper", no_argument, NULL, OPT_KEEPER },
	{ "no-keeper", no_argument, NULL, OPT_NO_KEEPER },
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
	case OPT_META_HEADS:
		return mount_uint_opt("--meta-heads", arg, 0, 64, "HEADs",
				      &o->meta_heads);
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
	case OPT_KEEPER: o->keeper_given = true; return 0;
	case OPT_NO_KEEPER: o->no_keeper = true; return 0;
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

int fmfs_parse_mount_opts(int argc, char **argv, struct mount_opts *o)
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
	o->meta_heads = 8;
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
