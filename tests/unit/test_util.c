/* SPDX-License-Identifier: MIT */
/*
 * test_util.c - cmocka tests of util/ helpers that carry a format:
 * object versions kept in binary (util/etag.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/util.h"

/* Every form comes back as the same text; it equals itself and nothing
 * else; the heap text of other forms is freed on replace (ASan). */
static void test_etag_round_trip(void **state)
{
	static const char *const forms[] = {
		"d41d8cd98f00b204e9800998ecf8427e",       /* MD5 */
		"9b2cf535f27731c974343645a3985328-2",     /* multipart */
		"9b2cf535f27731c974343645a3985328-10000",
		"9b2cf535f27731c974343645a3985328-65535",
		"9b2cf535f27731c974343645a3985328-65536", /* past u16: text */
		"9b2cf535f27731c974343645a3985328-01",    /* leading 0: text */
		"9b2cf535f27731c974343645a3985328-",
		"9B2CF535F27731C974343645A3985328",       /* capitals: text */
		"9b2cf535f27731c974343645a398532",        /* 31 digits */
		"9b2cf535f27731c974343645a3985328x",
		"W/\"weak\"", "1700000000.123-4096",     /* file://, others */
		"",
	};
	struct util_etag t = { .kind = UTIL_ETAG_NONE };
	char out[80];

	(void)state;
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		util_etag_set(&t, forms[i]);
		util_etag_text(&t, out);
		assert_string_equal(out, forms[i]);
		assert_true(util_etag_is(&t, forms[i]));
		for (size_t j = 0; j < sizeof(forms) / sizeof(forms[0]); j++)
			if (j != i)
				assert_false(util_etag_is(&t, forms[j]));
	}
	util_etag_set(&t, "d41d8cd98f00b204e9800998ecf8427e");
	assert_int_equal(t.kind, UTIL_ETAG_MD5);
	assert_int_equal(t.parts, 0);
	util_etag_set(&t, "9b2cf535f27731c974343645a3985328-2");
	assert_int_equal(t.kind, UTIL_ETAG_MD5);
	assert_int_equal(t.parts, 2);
	util_etag_set(&t, "other");
	assert_int_equal(t.kind, UTIL_ETAG_TEXT);
	util_etag_free(&t);
	assert_int_equal(t.kind, UTIL_ETAG_NONE);
	assert_true(util_etag_is(&t, ""));
	assert_true(sizeof(t) <= 24);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_etag_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
