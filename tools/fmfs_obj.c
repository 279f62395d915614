/* SPDX-License-Identifier: MIT */
/*
 * fmfs_obj.c - `fmfs obj`: one subcommand, cmd_obj(), the object-store
 * client by hand, for debugging and for users, with verbs of its own (ls,
 * stat, get, put, rm, cp, check).  Each verb opens one store for the
 * bucket (s3://) or directory (file://) its URL names, runs the operation
 * and maps failures to the exit codes in tools.h.
 *
 * For file:// URLs the store root is the longest existing directory at the
 * start of the path and the rest is the key: file:///srv/data/a/b.bin with
 * /srv/data an existing directory (and /srv/data/a not) is key "a/b.bin".
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fmfs.h"

#define META_MAX 32

struct obj_opts {
	struct obj_config cfg;
	bool recursive;
	bool long_fmt;
	struct obj_kv meta[META_MAX];
	size_t nmeta;
};

static void obj_usage(FILE *f)
{
	fprintf(f,
"usage: fmfs obj <verb> [options] ARGS\n"
"\n"
"  ls URL [-r] [-l]           list keys under URL (one level unless -r)\n"
"  stat URL                   size, ETag, modification time, metadata\n"
"  get URL [FILE|-]           download (ranged GETs in parallel)\n"
"  put FILE|- URL [-m K=V]... upload (multipart in parallel when large)\n"
"  rm URL... [-r]             delete keys (-r: everything under a prefix)\n"
"  mkdir URL                  a directory: the empty marker object URL/\n"
"  cp SRC_URL DST_URL         server-side copy within one store\n"
"  check URL                  check the bucket and credentials\n"
"\n"
"URL is s3://BUCKET[/KEY] or file:///DIR[/KEY].\n"
"Options:\n"
"  --endpoint URL        S3 endpoint (default AWS_ENDPOINT_URL, profile, AWS)\n"
"  --region R            (default AWS_REGION, AWS_DEFAULT_REGION, profile)\n"
"  --profile P           credentials profile (default AWS_PROFILE, default)\n"
"  --path-style / --virtual-hosted   addressing (default: path-style for\n"
"                        a custom endpoint)\n"
"  --parallel N          requests in flight (default 16)\n"
"  --part-size SIZE      multipart and ranged-GET part size (default 8M)\n"
"  --timeout SECONDS     fail a request idle this long (default 30)\n"
"  --connect-timeout SECONDS   (default 5)\n"
"  --retries N           attempts per request in all (default 5)\n"
"  --retry-time SECONDS  stop retrying after this long (default 60)\n"
"  -m, --meta NAME=VALUE user metadata for put/cp (repeatable)\n"
"  -v, --verbose         log requests (twice: HTTP detail)\n"
"Exit status: 0 ok, 1 failed, 2 usage, 3 credentials/denied,\n"
"4 no such bucket or key, 5 endpoint unreachable or timed out.\n");
}

/* A whole number from min to max, or -1 with the range on stderr. */
static int parse_count(const char *opt, const char *v, unsigned min,
		       unsigned max, unsigned *out)
{
	char want[64];
	uint64_t n;

	if (!tools_parse_u64(v, min, max, &n)) {
		*out = (unsigned)n;
		return 0;
	}
	snprintf(want, sizeof(want), "a whole number from %u to %u", min, max);
	return tools_bad_opt("fmfs obj", opt, v, want);
}

/* Seconds (fractions allowed), more than 0 and at most a day. */
static int parse_ms(const char *opt, const char *v, unsigned *out)
{
	double s;

	/* !(a && b), not (!a || !b) alone: NaN fails every comparison. */
	if (tools_parse_double(v, &s) || !(s > 0 && s <= 86400))
		return tools_bad_opt("fmfs obj", opt, v, "a number of seconds "
				     "above 0, at most 86400");
	*out = (unsigned)(s * 1000);
	return 0;
}

/* Parses options; leaves positional args in argv[optind..]. */
static int parse_opts(int argc, char **argv, struct obj_opts *o)
{
	enum { OPT_VHOST = 256, OPT_PARALLEL, OPT_PART, OPT_TIMEOUT,
	       OPT_CTIMEOUT, OPT_RETRIES, OPT_RTIME };
	static const struct option lo[] = {
		TOOLS_OBJ_OPTIONS,
		{ "virtual-hosted", no_argument, 0, OPT_VHOST },
		{ "parallel", required_argument, 0, OPT_PARALLEL },
		{ "part-size", required_argument, 0, OPT_PART },
		{ "timeout", required_argument, 0, OPT_TIMEOUT },
		{ "connect-timeout", required_argument, 0, OPT_CTIMEOUT },
		{ "retries", required_argument, 0, OPT_RETRIES },
		{ "retry-time", required_argument, 0, OPT_RTIME },
		{ "meta", required_argument, 0, 'm' },
		{ "recursive", no_argument, 0, 'r' },
		{ "long", no_argument, 0, 'l' },
		{ "verbose", no_argument, 0, 'v' },
		{ "help", no_argument, 0, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t sz;
	char *eq;
	int c;

	obj_config_init(&o->cfg);
	optind = 1;
	while ((c = tools_getopt(argc, argv, "m:rlvh", lo, &o->cfg)) != -1) {
		switch (c) {
		case OPT_VHOST: o->cfg.path_style = 0; break;
		case OPT_PARALLEL:
			if (parse_count("--parallel", optarg, 1, 256,
					&o->cfg.max_parallel))
				return -1;
			break;
		case OPT_PART:
			if (tools_parse_size(optarg, &sz) || sz < (5u << 20) ||
			    sz > (5ull << 30))
				return tools_bad_opt("fmfs obj", "--part-size",
						     optarg, "5M to 5G");
			o->cfg.part_size_bytes = (size_t)sz;
			o->cfg.multipart_threshold_bytes = (size_t)sz;
			break;
		case OPT_TIMEOUT:
			if (parse_ms("--timeout", optarg,
				     &o->cfg.idle_timeout_ms))
				return -1;
			break;
		case OPT_CTIMEOUT:
			if (parse_ms("--connect-timeout", optarg,
				     &o->cfg.connect_timeout_ms))
				return -1;
			break;
		case OPT_RETRIES:
			if (parse_count("--retries", optarg, 1, 100,
					&o->cfg.retry_max))
				return -1;
			break;
		case OPT_RTIME:
			if (parse_ms("--retry-time", optarg,
				     &o->cfg.retry_total_ms))
				return -1;
			break;
		case 'm':
			eq = strchr(optarg, '=');
			if (!eq || eq == optarg || o->nmeta == META_MAX) {
				fprintf(stderr, "fmfs obj: --meta '%s': give "
					"NAME=VALUE (at most %d)\n", optarg,
					META_MAX);
				return -1;
			}
			*eq = '\0';
			o->meta[o->nmeta].name = optarg;
			o->meta[o->nmeta++].value = eq + 1;
			break;
		case 'r': o->recursive = true; break;
		case 'l': o->long_fmt = true; break;
		case 'v': o->cfg.verbose++; break;
		case 'h': obj_usage(stdout); exit(EXIT_OK);
		default: return -1;
		}
	}
	return 0;
}

static int report(const char *verb, const struct obj_error *err)
{
	char line[2048];

	obj_error_format(err, line, sizeof(line));
	fprintf(stderr, "fmfs obj %s: %s\n", verb, line);
	return tools_exit_code(err->status);
}

/* The store root for a file:// path: the nearest directory at or above
 * the longest existing directory prefix that holds the .fmfs/ marker a
 * store gets when first opened; failing that, that longest prefix.  "/"
 * itself is only a root when asked for exactly. */
static int file_root(const char *path, char *root, size_t len)
{
	char marker[PATH_MAX + 8];
	struct stat sb;
	char *cut;

	snprintf(root, len, "%s", path);
	for (size_t n = strlen(root); n > 1 && root[n - 1] == '/'; n--)
		root[n - 1] = '\0';
	while (stat(root, &sb) || !S_ISDIR(sb.st_mode)) {
		cut = strrchr(root, '/');
		if (!cut || cut == root)
			return strcmp(path, "/") ? -1 : 0;
		*cut = '\0';
	}
	for (char *r = strdup(root); r; ) {
		snprintf(marker, sizeof(marker), "%s/.fmfs", r);
		if (!stat(marker, &sb) && S_ISDIR(sb.st_mode)) {
			snprintf(root, len, "%s", r);
			free(r);
			break;
		}
		cut = strrchr(r, '/');
		if (!cut || cut == r) {
			free(r);
			break;
		}
		*cut = '\0';
	}
	return 0;
}

/* Splits URL into a store URL and a key; opens the store. */
static int open_url(const char *verb, const char *url, struct obj_opts *o,
		    struct obj_store **st, char **key)
{
	struct obj_error err;
	char *store_url;
	obj_status rc;

	*st = NULL;
	*key = NULL;
	if (!strncmp(url, "s3://", 5)) {
		const char *slash = strchr(url + 5, '/');

		store_url = slash ? strndup(url, (size_t)(slash - url)) :
				    strdup(url);
		*key = strdup(slash ? slash + 1 : "");
	} else if (!strncmp(url, "file:///", 8)) {
		char root[PATH_MAX];

		if (file_root(url + 7, root, sizeof(root))) {
			fprintf(stderr, "fmfs obj %s: %s: no such directory "
				"(create the store directory first)\n", verb,
				url);
			return EXIT_NOT_FOUND;
		}
		*key = strdup(url + 7 + strlen(root) +
			      (url[7 + strlen(root)] == '/'));
		if (asprintf(&store_url, "file://%s", root) < 0)
			store_url = NULL;
	} else {
		store_url = strdup(url);
		*key = strdup("");
	}
	if (!store_url || !*key) {
		free(store_url);
		fprintf(stderr, "fmfs obj %s: out of memory\n", verb);
		return EXIT_FAIL;
	}
	o->cfg.url = store_url;
	rc = obj_open(&o->cfg, st, &err);
	free(store_url);
	o->cfg.url = NULL;
	if (rc != OBJ_OK) {
		free(*key);
		*key = NULL;
		return report(verb, &err);
	}
	return EXIT_OK;
}

static void print_time(int64_t t)
{
	struct tm tm;
	time_t tt = (time_t)t;
	char buf[32];

	gmtime_r(&tt, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
	fputs(buf, stdout);
}

static int do_ls(struct obj_store *st, const char *key, struct obj_opts *o)
{
	struct obj_list_page pg;
	struct obj_error err;
	char *token = NULL;
	obj_status rc;

	do {
		rc = obj_list(st, key, o->recursive ? NULL : "/", token, 1000,
			      &pg, &err);
		free(token);
		token = NULL;
		if (rc != OBJ_OK)
			return report("ls", &err);
		for (size_t i = 0; i < pg.nprefixes; i++)
			printf(o->long_fmt ? "%29s %s\n" : "%s%s\n",
			       o->long_fmt ? "PRE" : "", pg.prefixes[i]);
		for (size_t i = 0; i < pg.nentries; i++) {
			if (o->long_fmt) {
				print_time(pg.entries[i].mtime_s);
				printf(" %9llu %s\n", (unsigned long long)
				       pg.entries[i].size_bytes,
				       pg.entries[i].key);
			} else {
				printf("%s\n", pg.entries[i].key);
			}
		}
		if (pg.next_token)
			token = strdup(pg.next_token);
		obj_list_page_release(&pg);
	} while (token);
	return EXIT_OK;
}

static int do_stat(struct obj_store *st, const char *key)
{
	struct obj_meta m;
	struct obj_error err;

	if (obj_head(st, key, &m, &err) != OBJ_OK)
		return report("stat", &err);
	printf("key: %s\nsize: %llu\netag: %s\nmtime: ", key,
	       (unsigned long long)m.size_bytes, m.etag);
	print_time(m.mtime_s);
	printf(" UTC\n");
	if (m.content_type[0])
		printf("content-type: %s\n", m.content_type);
	for (size_t i = 0; i < m.nuser; i++)
		printf("meta: %s=%s\n", m.user[i].name, m.user[i].value);
	obj_meta_release(&m);
	return EXIT_OK;
}

static int do_get(struct obj_store *st, const char *key, const char *dest)
{
	struct obj_error err;
	struct obj_meta m;
	char tmp[PATH_MAX];
	int fd;

	if (!strcmp(dest, "-")) {
		/* stdout may be a pipe: fetch in parts, in order. */
		static char buf[8 << 20];
		uint64_t off = 0;
		size_t got;

		if (obj_head(st, key, &m, &err) != OBJ_OK)
			return report("get", &err);
		obj_meta_release(&m);
		while (off < m.size_bytes) {
			if (obj_get(st, key, off, sizeof(buf), buf, &got,
				    &err) != OBJ_OK)
				return report("get", &err);
			if (!got || fwrite(buf, 1, got, stdout) != got) {
				fprintf(stderr, "fmfs obj get: writing "
					"stdout failed\n");
				return EXIT_FAIL;
			}
			off += got;
		}
		return fflush(stdout) ? EXIT_FAIL : EXIT_OK;
	}
	/* Into a temporary file renamed into place: no half files. */
	snprintf(tmp, sizeof(tmp), "%s.fmfs-part.%d", dest, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "fmfs obj get: cannot create %s: %s\n", tmp,
			strerror(errno));
		return EXIT_FAIL;
	}
	if (obj_get_fd(st, key, 0, UINT64_MAX, fd, 0, NULL, &err) != OBJ_OK) {
		close(fd);
		unlink(tmp);
		return report("get", &err);
	}
	if (close(fd) || rename(tmp, dest)) {
		fprintf(stderr, "fmfs obj get: cannot write %s: %s\n", dest,
			strerror(errno));
		unlink(tmp);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int do_put(struct obj_store *st, const char *src, const char *key,
		  struct obj_opts *o)
{
	struct obj_error err;
	char etag[80] = "";
	struct stat sb;
	int fd;

	if (!*key || key[strlen(key) - 1] == '/') {
		/* "put f s3://b/dir/" puts under the file's base name. */
		fprintf(stderr, "fmfs obj put: the URL must name the key, "
			"not a bucket or prefix\n");
		return EXIT_USAGE;
	}
	if (!strcmp(src, "-")) {
		/* stdin: spool to an unlinked temporary file first. */
		char buf[1 << 16];
		ssize_t n;

		fd = open(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
			  O_TMPFILE | O_RDWR, 0600);
		if (fd < 0) {
			fprintf(stderr, "fmfs obj put: no temporary file: "
				"%s\n", strerror(errno));
			return EXIT_FAIL;
		}
		while ((n = read(0, buf, sizeof(buf))) > 0)
			if (write(fd, buf, (size_t)n) != n) {
				fprintf(stderr, "fmfs obj put: spooling "
					"stdin: %s\n", strerror(errno));
				close(fd);
				return EXIT_FAIL;
			}
	} else {
		fd = open(src, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "fmfs obj put: cannot open %s: %s\n",
				src, strerror(errno));
			return EXIT_FAIL;
		}
	}
	if (fstat(fd, &sb)) {
		close(fd);
		return EXIT_FAIL;
	}
	if (obj_put_fd(st, key, fd, (uint64_t)sb.st_size, o->meta, o->nmeta,
		       etag, &err) != OBJ_OK) {
		close(fd);
		return report("put", &err);
	}
	close(fd);
	if (o->cfg.verbose)
		fprintf(stderr, "fmfs obj put: %s etag %s\n", key, etag);
	return EXIT_OK;
}

/* The marker object "KEY/" that fmfs makes for a directory (empty, with
 * the -m metadata given), so that an empty prefix shows as a directory. */
static int do_mkdir(struct obj_store *st, const char *key,
		    struct obj_opts *o)
{
	struct obj_error err;
	char etag[80] = "", *dir;
	size_t n = strlen(key);
	obj_status rc;

	if (!n) {
		fprintf(stderr, "fmfs obj mkdir: the URL must name a "
			"directory under the bucket (s3://BUCKET/DIR)\n");
		return EXIT_USAGE;
	}
	dir = malloc(n + 2);
	if (!dir)
		return EXIT_FAIL;
	memcpy(dir, key, n + 1);
	if (dir[n - 1] != '/')
		memcpy(dir + n, "/", 2);
	rc = obj_put(st, dir, "", 0, o->meta, o->nmeta, etag, &err);
	free(dir);
	return rc == OBJ_OK ? EXIT_OK : report("mkdir", &err);
}

static int do_rm_prefix(struct obj_store *st, const char *prefix)
{
	struct obj_list_page pg;
	struct obj_error err;
	char *token = NULL;
	size_t failed;
	obj_status rc;

	do {
		const char **keys;

		rc = obj_list(st, prefix, NULL, token, 1000, &pg, &err);
		free(token);
		token = NULL;
		if (rc != OBJ_OK)
			return report("rm", &err);
		keys = calloc(pg.nentries + 1, sizeof(*keys));
		for (size_t i = 0; keys && i < pg.nentries; i++)
			keys[i] = pg.entries[i].key;
		rc = keys ? obj_delete_many(st, keys, pg.nentries, &failed,
					    &err) : OBJ_ERR_NOMEM;
		free(keys);
		if (pg.next_token)
			token = strdup(pg.next_token);
		obj_list_page_release(&pg);
		if (rc != OBJ_OK) {
			free(token);
			return report("rm", &err);
		}
	} while (token);
	return EXIT_OK;
}

static int do_cp(struct obj_store *st, const char *src, const char *dst_url,
		 struct obj_opts *o)
{
	struct obj_error err;
	struct obj_store *st2;
	char *dkey;
	int rc = open_url("cp", dst_url, o, &st2, &dkey);

	if (rc)
		return rc;
	if (strcmp(obj_describe(st), obj_describe(st2))) {
		fprintf(stderr, "fmfs obj cp: source and destination must be "
			"in the same store (server-side copy)\n");
		rc = EXIT_USAGE;
	} else if (obj_copy(st, src, dkey, o->nmeta ? o->meta : NULL,
			    o->nmeta, NULL, &err) != OBJ_OK) {
		rc = report("cp", &err);
	}
	free(dkey);
	obj_close(st2);
	return rc;
}

int cmd_obj(int argc, char **argv)
{
	struct obj_opts o;
	struct obj_store *st;
	struct obj_error err;
	const char *verb;
	char **args;
	char *key;
	int nargs, rc;

	memset(&o, 0, sizeof(o));
	if (argc < 2) {
		obj_usage(stderr);
		return EXIT_USAGE;
	}
	/* Options may come before or after the verb (getopt permutes). */
	if (parse_opts(argc, argv, &o)) {
		fprintf(stderr, "(run 'fmfs obj --help')\n");
		return EXIT_USAGE;
	}
	if (optind >= argc) {
		obj_usage(stderr);
		return EXIT_USAGE;
	}
	verb = argv[optind];
	args = argv + optind + 1;
	nargs = argc - optind - 1;
#define NEED(lo, hi, what)                                                   \
	do {                                                                 \
		if (nargs < (lo) || nargs > (hi)) {                          \
			fprintf(stderr, "usage: fmfs obj %s %s\n", verb, what); \
			return EXIT_USAGE;                                   \
		}                                                            \
	} while (0)
	if (!strcmp(verb, "ls")) NEED(1, 1, "URL [-r] [-l]");
	else if (!strcmp(verb, "stat")) NEED(1, 1, "URL");
	else if (!strcmp(verb, "get")) NEED(1, 2, "URL [FILE|-]");
	else if (!strcmp(verb, "put")) NEED(2, 2, "FILE|- URL");
	else if (!strcmp(verb, "rm")) NEED(1, 100000, "URL... [-r]");
	else if (!strcmp(verb, "cp")) NEED(2, 2, "SRC_URL DST_URL");
	else if (!strcmp(verb, "check")) NEED(1, 1, "URL");
	else if (!strcmp(verb, "mkdir")) NEED(1, 1, "URL");
	else {
		fprintf(stderr, "fmfs obj: unknown verb '%s'\n", verb);
		obj_usage(stderr);
		return EXIT_USAGE;
	}
	rc = open_url(verb, args[!strcmp(verb, "put")], &o, &st, &key);
	if (rc)
		return rc;
	if (!strcmp(verb, "ls")) {
		rc = do_ls(st, key, &o);
	} else if (!strcmp(verb, "stat")) {
		rc = do_stat(st, key);
	} else if (!strcmp(verb, "get")) {
		const char *base = strrchr(key, '/');

		rc = do_get(st, key, nargs == 2 ? args[1] :
			    base ? base + 1 : key);
	} else if (!strcmp(verb, "put")) {
		rc = do_put(st, args[0], key, &o);
	} else if (!strcmp(verb, "rm") && o.recursive) {
		rc = do_rm_prefix(st, key);
	} else if (!strcmp(verb, "rm")) {
		/* All URLs must be in the same store as the first. */
		for (int i = 0; i < nargs && rc == EXIT_OK; i++) {
			struct obj_store *s2 = st;
			char *k2 = key;

			if (i && (rc = open_url("rm", args[i], &o, &s2, &k2)))
				break;
			if (obj_delete(s2, k2, &err) != OBJ_OK)
				rc = report("rm", &err);
			if (i) {
				free(k2);
				obj_close(s2);
			}
		}
	} else if (!strcmp(verb, "cp")) {
		rc = do_cp(st, key, args[1], &o);
	} else if (!strcmp(verb, "mkdir")) {
		rc = do_mkdir(st, key, &o);
	} else {
		rc = obj_check_bucket(st, &err) == OBJ_OK ? EXIT_OK :
		     report("check", &err);
		if (rc == EXIT_OK)
			printf("ok: %s\n", obj_describe(st));
	}
	free(key);
	obj_close(st);
	return rc;
}
