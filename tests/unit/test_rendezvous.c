/* SPDX-License-Identifier: MIT */
/*
 * test_rendezvous.c - cmocka tests of train_rendezvous (train/gpu.h), the
 * hand-over of rank 0's blob (the NCCL id) to the other ranks of a job.
 * Ranks are processes made with fork(): rank 0 is the test itself, the
 * others children that exit 0 when they got rank 0's blob bit for bit.
 *
 * Both ways (file:PATH, tcp:127.0.0.1:PORT) with 1, 2 and 4 ranks, rank 0
 * first or last; a file left by an earlier job is ignored (another job's
 * is waited past, one of the same job string is replaced by the live
 * one); a rank 0 that never comes and ranks that never come end in
 * -ETIMEDOUT at the deadline with a message naming what was awaited; a
 * rank of another job is refused over tcp at once; bad where strings,
 * ranks, job strings and a blob over 4096 bytes are -EINVAL.
 *
 * Files live in a private temporary directory removed at the end; ports
 * are ones the kernel just said were free.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "train/gpu.h"

#define BLOB_BYTES 160          /* what fmtrain hands: NCCL id + run id */
#define OK_MS 20000             /* a rendezvous that must succeed */
#define SHORT_MS 300            /* one that must time out */
#define WORLD_MAX 8

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 7 + seed * 13 + 1);
}

/* A where for a fresh file in the test directory. */
static void file_where(char *buf, size_t len)
{
	snprintf(buf, len, "file:%s/rdv%u", g_tmp, g_seq++);
}

/* A where for a port nobody listens on now. */
static void tcp_where(char *buf, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	close(fd);
	snprintf(buf, len, "tcp:127.0.0.1:%u", ntohs(a.sin_port));
}

/* A child as rank `rank`: exits 0 if it gets a blob filled with seed,
 * 2 if the call fails (saying why on stderr unless quiet), 3 if the blob
 * differs. */
static pid_t spawn_rank(const char *where, const char *job, unsigned rank,
			unsigned world, unsigned seed, unsigned timeout_ms,
			bool quiet)
{
	pid_t pid = fork();
	unsigned char got[BLOB_BYTES], want[BLOB_BYTES];
	char msg[1024];
	int rc;

	assert_true(pid >= 0);
	if (pid)
		return pid;
	memset(got, 0, sizeof(got));
	fill(want, sizeof(want), seed);
	rc = train_rendezvous(where, job, rank, world, got, sizeof(got),
			      timeout_ms, msg, sizeof(msg));
	if (rc) {
		if (!quiet)
			fprintf(stderr, "rank %u: %d: %s\n", rank, rc, msg);
		_exit(2);
	}
	_exit(memcmp(got, want, sizeof(got)) ? 3 : 0);
}

static int wait_rank(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A whole job: ranks 1..world-1 as children, rank 0 here (after
 * rank0_delay_ms, so that the others wait for it). */
static void run_job(const char *where, const char *job, unsigned world,
		    unsigned seed, unsigned rank0_delay_ms)
{
	unsigned char blob[BLOB_BYTES], orig[BLOB_BYTES];
	pid_t pid[WORLD_MAX];
	char msg[1024] = "";
	int rc;

	assert_true(world <= WORLD_MAX);
	for (unsigned r = 1; r < world; r++)
		pid[r] = spawn_rank(where, job, r, world, seed, OK_MS, false);
	sleep_ms(rank0_delay_ms);
	fill(blob, sizeof(blob), seed);
	memcpy(orig, blob, sizeof(blob));
	rc = train_rendezvous(where, job, 0, world, blob, sizeof(blob), OK_MS,
			      msg, sizeof(msg));
	if (rc)
		fail_msg("rank 0 of %u at %s: %d: %s", world, where, rc, msg);
	assert_memory_equal(blob, orig, sizeof(blob));   /* rank 0's stays */
	for (unsigned r = 1; r < world; r++)
		assert_int_equal(wait_rank(pid[r]), 0);
}

/* ---- both ways, 1, 2 and 4 ranks ---- */

static void test_file_worlds(void **state)
{
	char where[PATH_MAX];

	for (unsigned w = 1; w <= 4; w *= 2) {
		file_where(where, sizeof(where));
		run_job(where, "job-a", w, w, 0);
		file_where(where, sizeof(where));
		run_job(where, "job-a", w, w + 10, 150);
	}
}

static void test_tcp_worlds(void **state)
{
	char where[64];

	for (unsigned w = 1; w <= 4; w *= 2) {
		tcp_where(where, sizeof(where));
		run_job(where, "job-a", w, w, 0);
		tcp_where(where, sizeof(where));
		run_job(where, "job-a", w, w + 10, 150);
	}
}

/* Rank 0 first: the others find the blob waiting. */
static void test_rank0_first(void **state)
{
	unsigned char blob[BLOB_BYTES];
	char where[PATH_MAX], msg[1024] = "";
	pid_t pid;
	int rc;

	for (int tcp = 0; tcp < 2; tcp++) {
		if (tcp)
			tcp_where(where, sizeof(where));
		else
			file_where(where, sizeof(where));
		pid = fork();
		assert_true(pid >= 0);
		if (!pid) {
			fill(blob, sizeof(blob), 77);
			_exit(train_rendezvous(where, "j", 0, 2, blob,
					       sizeof(blob), OK_MS, NULL, 0) ?
			      2 : 0);
		}
		sleep_ms(150);
		memset(blob, 0, sizeof(blob));
		rc = train_rendezvous(where, "j", 1, 2, blob, sizeof(blob),
				      OK_MS, msg, sizeof(msg));
		if (rc)
			fail_msg("rank 1 at %s: %d: %s", where, rc, msg);
		assert_int_equal(wait_rank(pid), 0);
		{
			unsigned char want[BLOB_BYTES];

			fill(want, sizeof(want), 77);
			assert_memory_equal(blob, want, sizeof(blob));
		}
	}
}

static void test_tcp_localhost_name(void **state)
{
	char where[64], port[16];

	tcp_where(where, sizeof(where));
	snprintf(port, sizeof(port), "%s", strrchr(where, ':') + 1);
	snprintf(where, sizeof(where), "tcp:localhost:%s", port);
	run_job(where, "job-l", 2, 5, 50);
}

/* ---- leftovers of earlier jobs ---- */

/* A rank 0 alone, whose partner never comes: leaves its publish record
 * in the file. */
static void leave_stale(const char *where, const char *job, unsigned seed)
{
	unsigned char blob[BLOB_BYTES];
	char msg[1024] = "";
	int rc;

	fill(blob, sizeof(blob), seed);
	rc = train_rendezvous(where, job, 0, 2, blob, sizeof(blob), 100, msg,
			      sizeof(msg));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_contains(msg, "rank 1 (1 of 1) did not answer within 100 ms");
}

static void test_file_stale_other_job(void **state)
{
	unsigned char blob[BLOB_BYTES];
	char where[PATH_MAX], msg[1024] = "";
	double t0;
	int rc;

	file_where(where, sizeof(where));
	leave_stale(where, "old-job", 1);
	/* this job's rank 1 does not take the old job's blob ... */
	memset(blob, 0, sizeof(blob));
	t0 = now_ms();
	rc = train_rendezvous(where, "new-job", 1, 2, blob, sizeof(blob),
			      SHORT_MS, msg, sizeof(msg));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(now_ms() - t0 >= SHORT_MS - 5);
	assert_contains(msg, "no word from rank 0 of job 'new-job' within "
			"300 ms");
	assert_contains(msg, "has job 'old-job' (2 ranks, a 160-byte blob)");
	for (size_t i = 0; i < sizeof(blob); i++)
		assert_int_equal(blob[i], 0);
	/* ... and this job goes through past it, either order */
	run_job(where, "new-job", 2, 2, 100);
	leave_stale(where, "old-job", 1);
	run_job(where, "new-job", 4, 3, 0);
}

/* A crashed job with the same job string left its publish record: a
 * rank that took it moves on to the live rank 0's. */
static void test_file_stale_same_job(void **state)
{
	char where[PATH_MAX];

	file_where(where, sizeof(where));
	leave_stale(where, "same", 1);
	run_job(where, "same", 2, 9, 300);    /* rank 1 sees seed 1 first */
	/* the done record left at the end is no use to the next job */
	run_job(where, "same", 4, 10, 300);
}

static void test_tcp_other_job_refused(void **state)
{
	unsigned char blob[BLOB_BYTES];
	char where[64], msg[1024] = "";
	pid_t pid;
	int rc;

	tcp_where(where, sizeof(where));
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {   /* rank 0 of job a: times out, having refused b */
		char m[1024] = "";

		fill(blob, sizeof(blob), 1);
		rc = train_rendezvous(where, "a", 0, 2, blob, sizeof(blob),
				      1500, m, sizeof(m));
		_exit(rc == -ETIMEDOUT && strstr(m, "refused a connection") ?
		      0 : 2);
	}
	sleep_ms(100);
	rc = train_rendezvous(where, "b", 1, 2, blob, sizeof(blob), OK_MS, msg,
			      sizeof(msg));
	assert_int_equal(rc, -EPROTO);
	assert_contains(msg, "rank 0 refused rank 1: rank 1's hello has job "
			"'b' (2 ranks, a 160-byte blob) where job 'a'");
	assert_int_equal(wait_rank(pid), 0);
}

/* ---- nobody comes ---- */

static void test_rank0_never_comes(void **state)
{
	unsigned char blob[BLOB_BYTES];
	char where[PATH_MAX], msg[1024];
	double t0, ms;

	for (int tcp = 0; tcp < 2; tcp++) {
		if (tcp)
			tcp_where(where, sizeof(where));
		else
			file_where(where, sizeof(where));
		msg[0] = '\0';
		t0 = now_ms();
		assert_int_equal(train_rendezvous(where, "j", 3, 4, blob,
						  sizeof(blob), SHORT_MS, msg,
						  sizeof(msg)), -ETIMEDOUT);
		ms = now_ms() - t0;
		assert_true(ms >= SHORT_MS - 5 && ms < SHORT_MS + 1500);
		assert_contains(msg, where);
		assert_contains(msg, tcp ? "no answer from rank 0 within 300 "
				"ms (connecting to 127.0.0.1 port" :
				"no word from rank 0 of job 'j' within 300 ms "
				"(no such file yet)");
	}
}

static void test_others_never_come(void **state)
{
	unsigned char blob[BLOB_BYTES];
	char where[PATH_MAX], msg[1024];
	pid_t pid;

	for (int tcp = 0; tcp < 2; tcp++) {
		if (tcp)
			tcp_where(where, sizeof(where));
		else
			file_where(where, sizeof(where));
		/* rank 2 of 4 comes, 1 and 3 do not */
		pid = spawn_rank(where, "j", 2, 4, 4, 3 * SHORT_MS, true);
		fill(blob, sizeof(blob), 4);
		msg[0] = '\0';
		assert_int_equal(train_rendezvous(where, "j", 0, 4, blob,
						  sizeof(blob), SHORT_MS, msg,
						  sizeof(msg)), -ETIMEDOUT);
		assert_contains(msg, tcp ? "ranks 1, 3 (2 of 3) did not "
				"connect" : "ranks 1, 3 (2 of 3) did not "
				"answer within 300 ms");
		if (tcp) {
			/* rank 2 was served; it returned 0 already */
			assert_int_equal(wait_rank(pid), 0);
		} else {
			/* rank 2 answered but never saw "done" */
			assert_int_equal(wait_rank(pid), 2);
		}
	}
}

/* ---- bad arguments ---- */

static void test_bad_where(void **state)
{
	static const char *const bad[] = {
		"", "bogus", "file:", "tcp:", "tcp:host", "tcp:host:",
		"tcp:host:0", "tcp:host:65536", "tcp:host:12x", "tcp::80",
		"tcp:::1:80", "tcp:[::1]80", "tcp:[::1", "udp:h:1",
		"tcp:host:-1", "FILE:/x",
	};
	static const char *const good[] = {
		"file:/x", "file:rel/path", "tcp:h:1", "tcp:[::1]:65535",
		"tcp:10.0.0.1:29500",
	};
	unsigned char blob[16] = { 0 };
	char msg[1024];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg[0] = '\0';
		for (unsigned rank = 0; rank < 2; rank++) {
			if (train_rendezvous(bad[i], "j", rank, 2, blob,
					     sizeof(blob), 100, msg,
					     sizeof(msg)) != -EINVAL)
				fail_msg("'%s' was taken", bad[i]);
			assert_contains(msg, "give file:PATH (a file every "
					"rank sees) or tcp:HOST:PORT");
		}
	}
	assert_int_equal(train_rendezvous(NULL, "j", 0, 1, blob, sizeof(blob),
					  100, msg, sizeof(msg)), -EINVAL);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		msg[0] = '\0';
		if (train_rendezvous(good[i], "j", 0, 1, blob, sizeof(blob),
				     100, msg, sizeof(msg)))
			fail_msg("'%s' refused: %s", good[i], msg);
	}
}

static void test_bad_args(void **state)
{
	static unsigned char blob[4097];
	char where[PATH_MAX], msg[1024], *job;

	file_where(where, sizeof(where));
	assert_int_equal(train_rendezvous(where, "j", 0, 2, blob, 4097, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_contains(msg, "a blob of 4097 bytes; at most 4096");
	assert_int_equal(train_rendezvous(where, "j", 1, 2, blob, 4097, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_int_equal(train_rendezvous(where, "j", 0, 2, NULL, 16, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_int_equal(train_rendezvous(where, "j", 2, 2, blob, 16, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_contains(msg, "rank 2 of a world of 2");
	assert_int_equal(train_rendezvous(where, "j", 0, 0, blob, 16, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_int_equal(train_rendezvous(where, "j", 0, 65537, blob, 16, 100,
					  msg, sizeof(msg)), -EINVAL);
	job = malloc(1026);
	assert_non_null(job);
	memset(job, 'x', 1025);
	job[1025] = '\0';
	assert_int_equal(train_rendezvous(where, job, 0, 2, blob, 16, 100,
					  msg, sizeof(msg)), -EINVAL);
	assert_contains(msg, "the job string is 1025 bytes");
	free(job);
	/* nothing was written for any of them */
	assert_int_equal(access(where + 5, F_OK), -1);
	/* the largest blob goes through */
	fill(blob, 4096, 3);
	assert_int_equal(train_rendezvous(where, "j", 0, 1, blob, 4096, 100,
					  msg, sizeof(msg)), 0);
}

static void test_file_no_dir(void **state)
{
	unsigned char blob[16] = { 0 };
	char where[PATH_MAX], msg[1024] = "";

	snprintf(where, sizeof(where), "file:%s/no/such/dir/rdv", g_tmp);
	assert_int_equal(train_rendezvous(where, "j", 0, 2, blob, sizeof(blob),
					  OK_MS, msg, sizeof(msg)), -ENOENT);
	assert_contains(msg, "the directory must exist");
}

/* ---- main ---- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_worlds),
		cmocka_unit_test(test_tcp_worlds),
		cmocka_unit_test(test_rank0_first),
		cmocka_unit_test(test_tcp_localhost_name),
		cmocka_unit_test(test_file_stale_other_job),
		cmocka_unit_test(test_file_stale_same_job),
		cmocka_unit_test(test_tcp_other_job_refused),
		cmocka_unit_test(test_rank0_never_comes),
		cmocka_unit_test(test_others_never_come),
		cmocka_unit_test(test_bad_where),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_file_no_dir),
	};

	return run_tests_in_tmp_dir("test_rendezvous", tests) ? 1 : 0;
}
