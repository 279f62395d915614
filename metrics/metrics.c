/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - the Prometheus text format (metrics.h), and the /metrics
 * endpoint: our own listening socket (so that "address in use" is said
 * as such), handed to libmicrohttpd, which parses HTTP and answers from
 * a thread of its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"

void metrics_family(FILE *out, const char *name, const char *type,
		    const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_name(FILE *out, const char *name, const char *labels)
{
	if (labels && *labels)
		fprintf(out, "%s{%s} ", name, labels);
	else
		fprintf(out, "%s ", name);
}

void metrics_u64(FILE *out, const char *name, const char *labels,
		 uint64_t v)
{
	sample_name(out, name, labels);
	fprintf(out, "%llu\n", (unsigned long long)v);
}

void metrics_f64(FILE *out, const char *name, const char *labels,
		 double v)
{
	sample_name(out, name, labels);
	fprintf(out, "%.10g\n", v);
}

void metrics_hist(FILE *out, const char *name, const char *labels,
		  const struct util_hist *h)
{
	struct util_hist s;
	uint64_t cum = 0;
	const char *sep = labels && *labels ? "," : "";

	util_hist_read(h, &s);
	for (unsigned i = 0; i <= UTIL_HIST_BUCKETS; i++) {
		cum += s.n[i];
		if (i < UTIL_HIST_BUCKETS)
			fprintf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name,
				labels ? labels : "", sep, util_hist_bounds[i],
				(unsigned long long)cum);
		else
			fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name,
				labels ? labels : "", sep,
				(unsigned long long)cum);
	}
	fprintf(out, "%s_sum", name);
	if (labels && *labels)
		fprintf(out, "{%s}", labels);
	fprintf(out, " %.9f\n%s_count", (double)s.sum_ns / 1e9, name);
	if (labels && *labels)
		fprintf(out, "{%s}", labels);
	fprintf(out, " %llu\n", (unsigned long long)cum);
}

void metrics_counter(FILE *out, const char *name, const char *help,
		     uint64_t v)
{
	metrics_family(out, name, "counter", help);
	metrics_u64(out, name, "", v);
}

void metrics_counter_f64(FILE *out, const char *name, const char *help,
			 double v)
{
	metrics_family(out, name, "counter", help);
	metrics_f64(out, name, "", v);
}

void metrics_gauge(FILE *out, const char *name, const char *help,
		   double v)
{
	metrics_family(out, name, "gauge", help);
	metrics_f64(out, name, "", v);
}

/* ---- the endpoint ---- */

struct metrics_http {
	struct MHD_Daemon *d;
	metrics_render_fn render;
	void *arg;
	int fd;
	unsigned port;
};

/* addr -> host (NULL: any) and port; -1 with msg set. */
static int split_addr(const char *addr, char *host, size_t hl,
		      char *port, size_t pl, char *msg, size_t ml)
{
	const char *colon = strrchr(addr, ':'), *h = addr;
	size_t n;
	char *end;
	unsigned long p;

	if (!colon) {
		util_msg(msg, ml, "'%s' is not ADDRESS:PORT (like "
			 "127.0.0.1:9100, [::1]:9100 or :9100 for every "
			 "address)", addr);
		return -1;
	}
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || p > 65535) {
		util_msg(msg, ml, "'%s': the port must be a number from 0 to "
			 "65535", addr);
		return -1;
	}
	snprintf(port, pl, "%lu", p);
	n = (size_t)(colon - addr);
	if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
		h = addr + 1;
		n -= 2;
	}
	if (n >= hl) {
		util_msg(msg, ml, "'%s': the address is too long", addr);
		return -1;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	return 0;
}

static int resolve(const char *addr, struct addrinfo **res, char *msg,
		   size_t ml)
{
	struct addrinfo hints;
	char host[256], port[8];
	int rc;

	if (split_addr(addr, host, sizeof(host), port, sizeof(port), msg, ml))
		return -1;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (!host[0]) {
		hints.ai_family = AF_INET;
		rc = getaddrinfo("0.0.0.0", port, &hints, res);
	} else {
		rc = getaddrinfo(host, port, &hints, res);
	}
	if (rc) {
		util_msg(msg, ml, "'%s': cannot resolve '%s': %s", addr, host,
			 gai_strerror(rc));
		return -1;
	}
	return 0;
}

int metrics_addr_check(const char *addr, char *msg, size_t ml)
{
	char host[256], port[8];

	return split_addr(addr, host, sizeof(host), port, sizeof(port), msg,
			  ml);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	struct metrics_http *m = cls;
	struct MHD_Response *r;
	enum MHD_Result rc;
	unsigned status = MHD_HTTP_OK;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)state;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		static const char no[] = "only GET /metrics\n";

		r = MHD_create_response_from_buffer(sizeof(no) - 1, (void *)no,
						    MHD_RESPMEM_PERSISTENT);
		status = MHD_HTTP_METHOD_NOT_ALLOWED;
	} else if (strcmp(url, "/metrics")) {
		static const char nf[] = "not found: the metrics are at "
					 "/metrics\n";

		r = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf,
						    MHD_RESPMEM_PERSISTENT);
		status = MHD_HTTP_NOT_FOUND;
	} else {
		f = open_memstream(&buf, &len);
		if (!f)
			return MHD_NO;
		m->render(f, m->arg);
		if (fclose(f)) {
			free(buf);
			return MHD_NO;
		}
		r = MHD_create_response_from_buffer(len, buf,
						    MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(buf);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

struct metrics_http *metrics_http_start(const char *addr,
					metrics_render_fn render, void *arg,
					char *msg, size_t ml)
{
	struct metrics_http *m = calloc(1, sizeof(*m));
	struct addrinfo *ai = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;

	if (!m) {
		util_msg(msg, ml, "out of memory");
		return NULL;
	}
	m->fd = -1;
	m->render = render;
	m->arg = arg;
	if (resolve(addr, &ai, msg, ml))
		goto fail;
	m->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->fd < 0) {
		util_msg(msg, ml, "%s: socket: %s", addr, strerror(errno));
		goto fail;
	}
	setsockopt(m->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(m->fd, ai->ai_addr, ai->ai_addrlen) ||
	    listen(m->fd, 64)) {
		util_msg(msg, ml, "cannot listen on %s: %s%s", addr,
			 strerror(errno), errno == EADDRINUSE ?
			 " (another process has that port: pick another)" :
			 errno == EADDRNOTAVAIL ? " (not an address of this "
			 "machine)" : "");
		goto fail;
	}
	if (!getsockname(m->fd, (struct sockaddr *)&ss, &sl))
		m->port = ntohs(ss.ss_family == AF_INET6 ?
				((struct sockaddr_in6 *)&ss)->sin6_port :
				((struct sockaddr_in *)&ss)->sin_port);
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	freeaddrinfo(ai);
	ai = NULL;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, answer, m,
				MHD_OPTION_LISTEN_SOCKET, m->fd,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u,
				MHD_OPTION_CONNECTION_LIMIT, 64u,
				MHD_OPTION_END);
	if (!m->d) {
		util_msg(msg, ml, "cannot serve metrics on %s (libmicrohttpd "
			 "did not start)", addr);
		goto fail;
	}
	return m;
fail:
	if (ai)
		freeaddrinfo(ai);
	if (m->fd >= 0)
		close(m->fd);
	free(m);
	return NULL;
}

unsigned metrics_http_port(const struct metrics_http *m)
{
	return m->port;
}

void metrics_http_stop(struct metrics_http *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d); /* closes the listening socket too */
	free(m);
}
