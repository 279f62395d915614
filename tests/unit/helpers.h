/* SPDX-License-Identifier: MIT */
/*
 * helpers.h - what the cmocka unit tests (tests/unit/test_*.c) share, so
 * that each does not carry its own copy: size units, assertions on
 * messages and return codes, the private temporary directory each
 * program works in (made in main, removed at the end), rm -rf, a bit
 * flipped in a file, and the resident size.
 *
 * Include it after <cmocka.h>, which needs <stdarg.h>, <stddef.h>,
 * <stdint.h> and <setjmp.h> before it.  Everything here is a macro or
 * static: a program that uses only part of it compiles without warnings.
 */
#ifndef FMFS_TESTS_UNIT_HELPERS_H
#define FMFS_TESTS_UNIT_HELPERS_H

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define KIB 1024ull
#define MIB (1024ull * 1024)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define assert_contains(hay, needle)                                      \
	do {                                                              \
		const char *h_ = (hay), *n_ = (needle);                   \
		if (!h_ || !strstr(h_, n_))                               \
			fail_msg("\"%s\" does not contain \"%s\"",        \
				 h_ ? h_ : "(null)", n_);                 \
	} while (0)

#define assert_not_contains(hay, needle)                                  \
	do {                                                              \
		const char *h_ = (hay), *n_ = (needle);                   \
		if (h_ && strstr(h_, n_))                                 \
			fail_msg("\"%s\" contains \"%s\"", h_, n_);       \
	} while (0)

/* rc is 0 or a negative errno; msg is what the call said. */
#define assert_ok(rc, msg)                                                \
	do {                                                              \
		int rc_ = (rc);                                           \
		if (rc_)                                                  \
			fail_msg("%s: %d (%s): %s", #rc, rc_,              \
				 strerror(-rc_), (msg));                   \
	} while (0)

/* ---- the private temporary directory ----
 *
 * g_tmp leaves 256 bytes of PATH_MAX (the widest margin any test had)
 * for the names the tests build under it in PATH_MAX-sized buffers.
 * g_seq numbers a program's fresh subdirectories.  Not every program
 * has a directory, hence unused. */
static char g_tmp[PATH_MAX - 256] __attribute__((unused));
static unsigned g_seq __attribute__((unused));

static inline int rm_rf_one(const char *path, const struct stat *sb,
			    int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	/* Go on past what cannot be removed: clean up as much as we can. */
	remove(path);
	return 0;
}

/* rm -rf path, links not followed. */
static inline void rm_rf(const char *path)
{
	nftw(path, rm_rf_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes g_tmp a new directory $TMPDIR/NAME.XXXXXX (in /tmp when TMPDIR
 * is unset or empty): 0, or -1 once perror has said why.  main calls it
 * before the tests and tmp_dir_remove after them. */
static inline int tmp_dir_create(const char *name)
{
	const char *base = getenv("TMPDIR");

	snprintf(g_tmp, sizeof(g_tmp), "%s/%s.XXXXXX",
		 base && *base ? base : "/tmp", name);
	if (!mkdtemp(g_tmp)) {
		perror("mkdtemp");
		return -1;
	}
	return 0;
}

static inline void tmp_dir_remove(void)
{
	rm_rf(g_tmp);
}

static inline int tmp_dir_remove_then(int rc)
{
	tmp_dir_remove();
	return rc;
}

/* The whole of most mains: runs the cmocka group `tests` (an array, as
 * cmocka_run_group_tests wants it) in a new g_tmp made by
 * tmp_dir_create(name), then removes it.  1 if it cannot be made, else
 * what cmocka_run_group_tests returns: the number of tests that failed. */
#define run_tests_in_tmp_dir(name, tests)                                 \
	(tmp_dir_create(name) ? 1 :                                       \
	 tmp_dir_remove_then(cmocka_run_group_tests(tests, NULL, NULL)))

/* ---- files and the process ---- */

/* Flips bit `bit` of the byte at off in path, as a disk error would. */
static inline void flip_bit(const char *path, off_t off, unsigned bit)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= (unsigned char)(1u << bit);
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* VmRSS of this process in KiB (what /proc calls kB), or -1. */
static inline long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

#endif /* FMFS_TESTS_UNIT_HELPERS_H */
