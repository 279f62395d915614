/* SPDX-License-Identifier: MIT */
/*
 * util.c - clocks, condition variables timed on the monotonic clock,
 * message formatting and the assertion handler that util.h declares.
 * Every module used to carry its own copy of these; now they live here
 * once (docs/layout.md, "util/").
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

void util_assert_fail(const char *cond, const char *file, int line,
		      const char *func)
{
	fprintf(stderr, "fmfs: assertion failed: %s (%s:%d, %s); this is a "
		"bug, please report it with this line\n", cond, file, line,
		func);
	fflush(stderr);
	abort();
}

uint64_t util_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const double util_hist_bounds[UTIL_HIST_BUCKETS] = {
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10
};

void util_hist_add(struct util_hist *h, uint64_t ns)
{
	/* the bounds in ns, so that no double is touched here */
	static const uint64_t b[UTIL_HIST_BUCKETS] = {
		100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
		25000000, 50000000, 100000000, 250000000, 500000000,
		1000000000, 2500000000, 5000000000, 10000000000
	};
	unsigned i = 0;

	while (i < UTIL_HIST_BUCKETS && ns > b[i])
		i++;
	__atomic_fetch_add(&h->n[i], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
}

void util_hist_read(const struct util_hist *h, struct util_hist *out)
{
	for (unsigned i = 0; i <= UTIL_HIST_BUCKETS; i++)
		out->n[i] = __atomic_load_n(&h->n[i], __ATOMIC_RELAXED);
	out->sum_ns = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
}

uint64_t util_hist_count(const struct util_hist *h)
{
	uint64_t n = 0;

	for (unsigned i = 0; i <= UTIL_HIST_BUCKETS; i++)
		n += __atomic_load_n(&h->n[i], __ATOMIC_RELAXED);
	return n;
}

uint64_t util_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int64_t util_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void util_time_format(int64_t ns, char *buf, size_t len)
{
	/* before 1970: "-S.F" is -(S + F), as util_time_parse reads it */
	uint64_t a = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;

	snprintf(buf, len, "%s%llu.%09llu", ns < 0 ? "-" : "",
		 (unsigned long long)(a / 1000000000),
		 (unsigned long long)(a % 1000000000));
}

int util_time_parse(const char *s, int64_t *ns)
{
	char *end;
	long long sec;
	int64_t frac = 0;
	int digits = 0;

	errno = 0;
	sec = strtoll(s, &end, 10);
	if (end == s || errno || sec > INT64_MAX / 1000000000 - 1 ||
	    sec < INT64_MIN / 1000000000 + 1)
		return -EINVAL;
	if (*end == '.') {
		for (end++; *end >= '0' && *end <= '9'; end++, digits++)
			if (digits < 9)
				frac = frac * 10 + (*end - '0');
		for (int d = digits; d < 9; d++)
			frac *= 10;
	}
	if (*end)
		return -EINVAL;
	while (*s == ' ' || *s == '\t')
		s++;
	*ns = (int64_t)sec * 1000000000 + (*s == '-' ? -frac : frac);
	return 0;
}

struct timespec util_deadline(unsigned ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

bool util_deadline_passed(const struct timespec *d)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > d->tv_sec ||
	       (now.tv_sec == d->tv_sec && now.tv_nsec >= d->tv_nsec);
}

void util_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &a);
	pthread_condattr_destroy(&a);
}

void util_msg(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!msg || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
}
