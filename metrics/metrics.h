/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - Prometheus metrics: the text exposition format (version
 * 0.0.4) written to a FILE, and a /metrics HTTP endpoint served by
 * libmicrohttpd (never a parser of ours).  What is measured stays with
 * each module (fs/, ckpt/, tools/fmtrain); this module only writes it
 * out and serves it.  Names follow Prometheus' rules: base units
 * (_seconds, _bytes), _total on counters, few label values
 * (docs/metrics.md lists every metric).
 */
#ifndef FMFS_METRICS_H
#define FMFS_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "util/util.h"

/* "# HELP name help" and "# TYPE name type" (counter, gauge,
 * histogram): once per metric, before its samples. */
void metrics_family(FILE *out, const char *name, const char *type,
		    const char *help);
/* One sample: name{labels} value; labels is "" or like `op="read"`. */
void metrics_u64(FILE *out, const char *name, const char *labels,
		 uint64_t v);
void metrics_f64(FILE *out, const char *name, const char *labels,
		 double v);
/* A histogram of util_hist (seconds): name_bucket{labels,le="..."},
 * name_sum, name_count. */
void metrics_hist(FILE *out, const char *name, const char *labels,
		  const struct util_hist *h);
/* family + one sample, for the many metrics that have no labels. */
void metrics_counter(FILE *out, const char *name, const char *help,
		     uint64_t v);
void metrics_gauge(FILE *out, const char *name, const char *help,
		   double v);
/* A counter of seconds or another non-integer quantity. */
void metrics_counter_f64(FILE *out, const char *name, const char *help,
			 double v);

/* Writes every metric of the process hosting it to out. */
typedef void (*metrics_render_fn)(FILE *out, void *arg);

/* Serves GET /metrics on addr ("HOST:PORT", "[V6]:PORT" or ":PORT" for
 * every address; PORT 0 picks a free one) from a thread of its own,
 * calling render for each scrape.  NULL with msg set when addr is not
 * valid or cannot be bound (in use, not ours). */
struct metrics_http;
struct metrics_http *metrics_http_start(const char *addr,
					metrics_render_fn render, void *arg,
					char *msg, size_t ml);
/* The port it listens on (for ":0"). */
unsigned metrics_http_port(const struct metrics_http *m);
void metrics_http_stop(struct metrics_http *m);

/* Checks addr's form without binding: 0, or -1 with msg set. */
int metrics_addr_check(const char *addr, char *msg, size_t ml);

#endif /* FMFS_METRICS_H */
