/* SPDX-License-Identifier: MIT */
/*
 * objbench.c - throughput benchmark of the objstore client.
 *
 * Moves whole objects between an S3-compatible server and this machine
 * through the public objstore API, the way fmfs does, and prints one JSON
 * line with the figures.  tools/bench/bench-objstore.sh runs it against a
 * private Ceph RADOS Gateway, interleaved with curl and the aws CLI doing
 * the same transfers, and compares.
 *
 *   objbench get URL KEY... [--parallel N] [--sink null|memfd|buf]
 *       N threads (default: one per key) each take the next key and read
 *       the whole object: obj_get_fd(..., UINT64_MAX, ...) into /dev/null
 *       (null, the default: what curl -o /dev/null does) or into a memfd
 *       (memfd: the bytes land in fresh memory), or obj_head + one obj_get
 *       into a malloc'd buffer of the object's size (buf: a single request,
 *       no split).  --length BYTES reads only [0, BYTES) of each object
 *       (a diagnostic: obj_get_fd then skips its HEAD when BYTES is at
 *       most the part size, and buf skips objbench's own HEAD).
 *   objbench put URL FILE... [--key-prefix P] [--parallel N]
 *       N threads (default: one per file) each take the next file and
 *       upload it with obj_put_fd to key P + basename(FILE) (a parallel
 *       multipart upload above the multipart threshold).
 *
 * URL is s3://BUCKET[/PREFIX] (or file:///DIR).  Options that go straight
 * into struct obj_config: --endpoint URL, --part-size BYTES,
 * --threshold BYTES, --max-parallel N, -v (log each request).  Sizes take
 * a K, M or G suffix (powers of 1024).  Credentials and region come from
 * the environment as for fmfs.
 *
 * All threads share ONE struct obj_store, hence one network engine, as in
 * fmfs.  The clock (CLOCK_MONOTONIC) runs from just before the first
 * thread starts to the end of the last transfer; opening the store and
 * process start-up are outside it.  Output, one line on stdout:
 *
 *   {"op":"get","objects":8,"bytes":536870912,"seconds":0.61,
 *    "mib_per_s":839.2,"threads":8,"requests":72,"retries":0,...}
 *
 * Exit status: 0 when every transfer succeeded, 1 when one failed (the
 * error, from obj_error_format, on stderr), 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "objstore/objstore.h"
#include "util/util.h"

enum sink { SINK_NULL, SINK_MEMFD, SINK_BUF };

struct bench {
	struct obj_store *st;
	bool put;
	enum sink sink;
	uint64_t length;         /* get: bytes from the start; UINT64_MAX all */
	const char *key_prefix;
	char **items;            /* keys (get) or file names (put) */
	size_t nitems;
	atomic_size_t next;      /* next item to take */
	atomic_uint_fast64_t bytes;
	atomic_bool failed;
	pthread_mutex_t err_lock;
	char err_line[1400];     /* first failure, formatted */
};

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: objbench get URL KEY... [--parallel N] "
		"[--sink null|memfd|buf] [--length BYTES]\n"
		"       objbench put URL FILE... [--key-prefix P] "
		"[--parallel N]\n"
		"options: --endpoint URL --part-size BYTES --threshold BYTES\n"
		"         --max-parallel N -v (sizes take K, M, G)\n");
	exit(2);
}

/* Parses "8M", "5242880", "1G"; exits on anything else. */
static uint64_t parse_size(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		goto bad;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	if (*end)
		goto bad;
	return v;
bad:
	fprintf(stderr, "objbench: %s: bad size '%s'\n", opt, s);
	exit(2);
}

static void fail(struct bench *b, const char *what, const struct obj_error *e)
{
	char line[1200];

	obj_error_format(e, line, sizeof(line));
	pthread_mutex_lock(&b->err_lock);
	if (!b->err_line[0])
		snprintf(b->err_line, sizeof(b->err_line), "%s: %s", what,
			 line);
	pthread_mutex_unlock(&b->err_lock);
	atomic_store(&b->failed, true);
}

static void fail_errno(struct bench *b, const char *what, const char *name)
{
	char line[1200];

	snprintf(line, sizeof(line), "%s %s: %s", what, name,
		 strerror(errno));
	pthread_mutex_lock(&b->err_lock);
	if (!b->err_line[0])
		snprintf(b->err_line, sizeof(b->err_line), "%s", line);
	pthread_mutex_unlock(&b->err_lock);
	atomic_store(&b->failed, true);
}

static void get_one(struct bench *b, const char *key, int null_fd)
{
	struct obj_error e;
	uint64_t got = 0;
	obj_status rc;

	if (b->sink == SINK_BUF) {
		uint64_t size = b->length;
		size_t n = 0;
		void *buf;

		if (size == UINT64_MAX) {
			struct obj_meta m;

			rc = obj_head(b->st, key, &m, &e);
			if (rc != OBJ_OK) {
				fail(b, "HEAD", &e);
				return;
			}
			size = m.size_bytes;
			obj_meta_release(&m);
		}
		buf = malloc(size ? (size_t)size : 1);
		if (!buf) {
			fail_errno(b, "malloc for", key);
			return;
		}
		rc = obj_get(b->st, key, 0, (size_t)size, buf, &n, &e);
		free(buf);
		got = n;
	} else if (b->sink == SINK_MEMFD) {
		int fd = memfd_create("objbench", 0);

		if (fd < 0) {
			fail_errno(b, "memfd_create for", key);
			return;
		}
		rc = obj_get_fd(b->st, key, 0, b->length, fd, 0, &got, &e);
		close(fd);
	} else {
		rc = obj_get_fd(b->st, key, 0, b->length, null_fd, 0, &got,
				&e);
	}
	if (rc != OBJ_OK) {
		fail(b, "GET", &e);
		return;
	}
	atomic_fetch_add(&b->bytes, got);
}

static void put_one(struct bench *b, const char *path)
{
	const char *base = strrchr(path, '/');
	char key[OBJ_KEY_MAX + 1];
	struct obj_error e;
	struct stat sb;
	obj_status rc;
	int fd;

	base = base ? base + 1 : path;
	if ((size_t)snprintf(key, sizeof(key), "%s%s", b->key_prefix, base) >=
	    sizeof(key)) {
		errno = ENAMETOOLONG;
		fail_errno(b, "key for", path);
		return;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		fail_errno(b, "open", path);
		if (fd >= 0)
			close(fd);
		return;
	}
	rc = obj_put_fd(b->st, key, fd, (uint64_t)sb.st_size, NULL, 0, NULL,
			&e);
	close(fd);
	if (rc != OBJ_OK) {
		fail(b, "PUT", &e);
		return;
	}
	atomic_fetch_add(&b->bytes, (uint64_t)sb.st_size);
}

static void *worker(void *arg)
{
	struct bench *b = arg;
	int null_fd = -1;

	if (!b->put && b->sink == SINK_NULL) {
		null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (null_fd < 0) {
			fail_errno(b, "open", "/dev/null");
			return NULL;
		}
	}
	while (!atomic_load(&b->failed)) {
		size_t i = atomic_fetch_add(&b->next, 1);

		if (i >= b->nitems)
			break;
		if (b->put)
			put_one(b, b->items[i]);
		else
			get_one(b, b->items[i], null_fd);
	}
	if (null_fd >= 0)
		close(null_fd);
	return NULL;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* The options after OP URL into b, cfg and *parallel; the rest are the
 * items (keys, or files to put).  Exits through usage() on a bad one. */
static void parse_args(int argc, char **argv, struct bench *b,
		       struct obj_config *cfg, unsigned *parallel)
{
	for (int i = 3; i < argc; i++) {
		const char *a = argv[i];

#define ARG() (i + 1 < argc ? argv[++i] : (usage(), ""))
		if (!strcmp(a, "--parallel"))
			*parallel = (unsigned)parse_size(a, ARG());
		else if (!strcmp(a, "--endpoint"))
			cfg->endpoint = ARG();
		else if (!strcmp(a, "--part-size"))
			cfg->part_size_bytes = (size_t)parse_size(a, ARG());
		else if (!strcmp(a, "--threshold"))
			cfg->multipart_threshold_bytes =
				(size_t)parse_size(a, ARG());
		else if (!strcmp(a, "--max-parallel"))
			cfg->max_parallel = (unsigned)parse_size(a, ARG());
		else if (!strcmp(a, "--length") && !b->put)
			b->length = parse_size(a, ARG());
		else if (!strcmp(a, "--key-prefix") && b->put)
			b->key_prefix = ARG();
		else if (!strcmp(a, "--sink") && !b->put) {
			const char *s = ARG();

			if (!strcmp(s, "null"))
				b->sink = SINK_NULL;
			else if (!strcmp(s, "memfd"))
				b->sink = SINK_MEMFD;
			else if (!strcmp(s, "buf"))
				b->sink = SINK_BUF;
			else
				usage();
		} else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
			cfg->verbose++;
		else if (a[0] == '-' && a[1] == '-')
			usage();
		else
			b->items[b->nitems++] = argv[i];
#undef ARG
	}
}

int main(int argc, char **argv)
{
	static const char *const sink_names[] = { "null", "memfd", "buf" };
	struct bench b = { .key_prefix = "", .sink = SINK_NULL,
			   .length = UINT64_MAX };
	struct obj_config cfg;
	struct obj_stats stats;
	struct obj_error e;
	unsigned parallel = 0;
	pthread_t *thr;
	size_t started = 0;
	double t0, secs;
	uint64_t bytes;
	char line[1200];

	if (argc < 3)
		usage();
	if (!strcmp(argv[1], "put"))
		b.put = true;
	else if (strcmp(argv[1], "get"))
		usage();
	obj_config_init(&cfg);
	cfg.url = argv[2];
	b.items = calloc((size_t)argc, sizeof(*b.items));
	if (!b.items)
		return 1;
	parse_args(argc, argv, &b, &cfg, &parallel);
	if (!b.nitems)
		usage();
	if (!parallel || parallel > b.nitems)
		parallel = (unsigned)b.nitems;

	if (obj_open(&cfg, &b.st, &e) != OBJ_OK) {
		obj_error_format(&e, line, sizeof(line));
		fprintf(stderr, "objbench: %s\n", line);
		free(b.items);
		return 1;
	}
	pthread_mutex_init(&b.err_lock, NULL);
	thr = calloc(parallel, sizeof(*thr));
	if (!thr) {
		fprintf(stderr, "objbench: out of memory\n");
		obj_close(b.st);
		free(b.items);
		return 1;
	}
	t0 = util_now_ns() / 1e9;
	for (unsigned t = 0; t < parallel; t++) {
		if (pthread_create(&thr[t], NULL, worker, &b))
			break;
		started++;
	}
	if (!started)
		worker(&b); /* no thread could start: do it all here */
	for (size_t t = 0; t < started; t++)
		pthread_join(thr[t], NULL);
	secs = util_now_ns() / 1e9 - t0;
	free(thr);
	obj_get_stats(b.st, &stats);
	obj_close(b.st);
	pthread_mutex_destroy(&b.err_lock);

	if (atomic_load(&b.failed)) {
		fprintf(stderr, "objbench: %s\n", b.err_line);
		free(b.items);
		return 1;
	}
	bytes = atomic_load(&b.bytes);
	printf("{\"op\":\"%s\",\"objects\":%zu,\"bytes\":%" PRIu64
	       ",\"seconds\":%.6f,\"mib_per_s\":%.1f,\"threads\":%u",
	       b.put ? "put" : "get", b.nitems, bytes, secs,
	       secs > 0 ? (double)bytes / 1048576.0 / secs : 0.0, parallel);
	if (!b.put)
		printf(",\"sink\":\"%s\"", sink_names[b.sink]);
	printf(",\"part_size\":%zu,\"max_parallel\":%u,\"requests\":%" PRIu64
	       ",\"retries\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"url\":",
	       cfg.part_size_bytes, cfg.max_parallel, stats.requests,
	       stats.retries, stats.errors);
	json_str(cfg.url);
	printf("}\n");
	free(b.items);
	return 0;
}
