/* SPDX-License-Identifier: MIT */
/*
 * ckpt_env.h - what the libfmckpt unit tests (test_ckpt.c,
 * test_reshard.c) share: each test's fresh directory and file:// store
 * under g_tmp (helpers.h), made by env_setup and removed by
 * env_teardown, and a buffer for the library's messages.  Include it
 * after helpers.h.
 */
#ifndef FMFS_TESTS_UNIT_CKPT_ENV_H
#define FMFS_TESTS_UNIT_CKPT_ENV_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

struct env {
	char dir[PATH_MAX];       /* not made: the library makes it */
	char store[PATH_MAX];
	char url[PATH_MAX + 16];  /* file://STORE */
	char msg[2048];
};

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	g_seq++;
	snprintf(e->dir, sizeof(e->dir), "%s/d%03u", g_tmp, g_seq);
	snprintf(e->store, sizeof(e->store), "%s/s%03u", g_tmp, g_seq);
	assert_int_equal(mkdir(e->store, 0755), 0);
	snprintf(e->url, sizeof(e->url), "file://%s", e->store);
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	rm_rf(e->dir);
	rm_rf(e->store);
	free(e);
	return 0;
}

#endif /* FMFS_TESTS_UNIT_CKPT_ENV_H */
