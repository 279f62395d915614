/* SPDX-License-Identifier: MIT */
/*
 * fmckpt_status.c - `fmckpt status` and `fmckpt interval`, one
 * cmd_<verb>() each: the verbs that need no checkpoint read.
 *
 * status reads the status files each rank of a running writer keeps
 * (ckpt_status_dir: status-rank-N, lines "KEY VALUE" and "step ...")
 * and says what it has staged, is writing and is draining.  interval
 * works out a checkpoint interval from a checkpoint's cost and the mean
 * time between failures: Young's, Daly's, and the time each loses.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmckpt.h"

/* ---- status ---- */

struct wstatus {
	char key[40][32];
	char val[40][512];
	unsigned n;
	char steps[64][160];
	unsigned nsteps;
};

static const char *ws_get(const struct wstatus *w, const char *key)
{
	for (unsigned i = 0; i < w->n; i++)
		if (!strcmp(w->key[i], key))
			return w->val[i];
	return NULL;
}

static uint64_t ws_num(const struct wstatus *w, const char *key)
{
	const char *v = ws_get(w, key);

	return v ? strtoull(v, NULL, 10) : 0;
}

static int ws_read(const char *path, struct wstatus *w)
{
	FILE *f = fopen(path, "r");
	char line[700];

	memset(w, 0, sizeof(*w));
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' '), *nl = strchr(line, '\n');

		if (nl)
			*nl = '\0';
		if (!sp)
			continue;
		*sp = '\0';
		if (!strcmp(line, "step")) {
			if (w->nsteps < 64)
				snprintf(w->steps[w->nsteps++],
					 sizeof(w->steps[0]), "%s", sp + 1);
		} else if (w->n < 40) {
			snprintf(w->key[w->n], sizeof(w->key[0]), "%.31s",
				 line);
			snprintf(w->val[w->n++], sizeof(w->val[0]), "%s",
				 sp + 1);
		}
	}
	fclose(f);
	return 0;
}

/* Step line i: "STEP STATE BYTES WRITTEN UPLOADED"; false if malformed. */
struct ws_step {
	unsigned long long step, size, written, uploaded;
	char state[32];
};

static bool ws_step(const struct wstatus *w, unsigned i, struct ws_step *s)
{
	return sscanf(w->steps[i], "%llu %31s %llu %llu %llu", &s->step,
		      s->state, &s->size, &s->written, &s->uploaded) == 5;
}

static bool pid_alive(uint64_t pid)
{
	return pid && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static void status_text(const struct wstatus *w)
{
	uint64_t pid = ws_num(w, "pid");
	long long age = (long long)time(NULL) -
			(long long)ws_num(w, "updated_unix_s");
	char a[32], b[32], p[32];
	const char *v;

	fmckpt_human(ws_num(w, "staging_used_bytes"), a, sizeof(a));
	fmckpt_human(ws_num(w, "staging_bytes"), b, sizeof(b));
	fmckpt_human(ws_num(w, "staging_peak_bytes"), p, sizeof(p));
	printf("rank %s of %s: pid %llu (%s), updated %lld s ago\n",
	       ws_get(w, "rank"), ws_get(w, "world_size"),
	       (unsigned long long)pid, pid_alive(pid) ? "running" :
	       "not running", age);
	printf("  staged: %s of %s staging memory in use (peak %s); "
	       "%llu commit(s), %llu waited for staging, local writes via "
	       "%s\n", a, b, p, (unsigned long long)ws_num(w, "commits"),
	       (unsigned long long)ws_num(w, "staging_waits"),
	       ws_num(w, "uring") ? "io_uring" : "pwrite");
	a[0] = b[0] = '-';
	a[1] = b[1] = '\0';
	if ((v = ws_get(w, "last_local_step")))
		snprintf(a, sizeof(a), "%s", v);
	if ((v = ws_get(w, "last_remote_step")))
		snprintf(b, sizeof(b), "%s", v);
	printf("  last committed step: local %s, remote %s\n", a, b);
	for (unsigned i = 0; i < w->nsteps; i++) {
		struct ws_step s;

		if (!ws_step(w, i, &s))
			continue;
		fmckpt_human(s.size, a, sizeof(a));
		fmckpt_human(s.written, b, sizeof(b));
		fmckpt_human(s.uploaded, p, sizeof(p));
		printf("  step %llu: %s (%s; %s written, %s uploaded)\n",
		       s.step, s.state, a, b, p);
	}
	if (!w->nsteps)
		printf("  nothing being written or drained\n");
	if ((v = ws_get(w, "last_error")))
		printf("  last error: %s\n", v);
}

static void status_json(const struct wstatus *w, bool first)
{
	uint64_t pid = ws_num(w, "pid");

	printf("%s\n  {", first ? "" : ",");
	for (unsigned i = 0; i < w->n; i++) {
		const char *val = w->val[i];
		char *end;

		printf("%s\"%s\": ", i ? ", " : "", w->key[i]);
		strtoull(val, &end, 10);
		if (*val && !*end && *val != '-')
			printf("%s", val);
		else
			fmckpt_json_str(stdout, val);
	}
	printf(", \"running\": %s, \"steps\": [", pid_alive(pid) ? "true" :
	       "false");
	for (unsigned i = 0; i < w->nsteps; i++) {
		struct ws_step s;

		if (!ws_step(w, i, &s))
			continue;
		printf("%s{\"step\": %llu, \"state\": \"%s\", \"bytes\": %llu, "
		       "\"written\": %llu, \"uploaded\": %llu}", i ? ", " : "",
		       s.step, s.state, s.size, s.written, s.uploaded);
	}
	printf("]}");
}

int cmd_status(const struct fmckpt_opts *o, int argc, char **argv)
{
	char sdir[PATH_MAX], path[PATH_MAX + 300];
	struct wstatus *w = malloc(sizeof(*w));
	struct dirent *de;
	unsigned found = 0;
	DIR *d;

	(void)argv;
	if (!w)
		return EXIT_FAIL;
	if (argc) {
		fprintf(stderr, PROG " status: takes no arguments\n");
		free(w);
		return EXIT_USAGE;
	}
	if (!o->dir && !o->remote) {
		free(w);
		return fmckpt_open_store("status", o, true, NULL);
	}
	ckpt_status_dir(o->dir, o->dir ? NULL : o->remote, sdir, sizeof(sdir));
	d = opendir(sdir);
	if (o->json) {
		printf("{\"status_dir\": ");
		fmckpt_json_str(stdout, sdir);
		printf(", \"writers\": [");
	}
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "status-rank-", 12) ||
		    strchr(de->d_name, '.'))
			continue;
		snprintf(path, sizeof(path), "%s/%s", sdir, de->d_name);
		if (ws_read(path, w))
			continue;
		if (o->json)
			status_json(w, !found);
		else
			status_text(w);
		found++;
	}
	if (d)
		closedir(d);
	if (o->json)
		printf("%s]}\n", found ? "\n" : "");
	else if (!found)
		printf("no writer has reported for %s (status files are kept in "
		       "%s)\n", o->dir ? o->dir : o->remote, sdir);
	free(w);
	return EXIT_OK;
}

/* ---- interval ---- */

/* Daly's expected fraction of wall time lost with compute interval tau,
 * checkpoint cost delta, restart R and exponential failures of mean M:
 * T_wall / T_solve = M e^(R/M) (e^((tau+delta)/M) - 1) / tau. */
static double time_lost(double tau, double delta, double r, double m)
{
	return 1.0 - tau / (m * exp(r / m) * expm1((tau + delta) / m));
}

int cmd_interval(const struct fmckpt_opts *o, int argc, char **argv)
{
	double delta = o->cost_s, m = o->mtbf_h * 3600.0, young, daly, x;

	(void)argv;
	if (argc || o->cost_s <= 0 || o->mtbf_h <= 0) {
		fprintf(stderr, PROG " interval: give --cost SECONDS (time one "
			"checkpoint costs, > 0) and --mtbf HOURS (mean time "
			"between failures, > 0)\n");
		return EXIT_USAGE;
	}
	young = sqrt(2.0 * delta * m);
	x = delta / (2.0 * m);
	if (delta < 2.0 * m)
		daly = young * (1.0 + sqrt(x) / 3.0 + x / 9.0) - delta;
	else
		daly = m;
	if (o->json) {
		printf("{\"cost_s\": %g, \"mtbf_s\": %g, \"restart_s\": %g, "
		       "\"young_interval_s\": %.3f, \"daly_interval_s\": %.3f, "
		       "\"young_time_lost\": %.6f, \"daly_time_lost\": %.6f",
		       delta, m, o->restart_s, young, daly,
		       time_lost(young, delta, o->restart_s, m),
		       time_lost(daly, delta, o->restart_s, m));
		if (o->step_s > 0)
			printf(", \"young_steps\": %.0f, \"daly_steps\": %.0f",
			       ceil(young / o->step_s), ceil(daly / o->step_s));
		printf("}\n");
		return EXIT_OK;
	}
	printf("checkpoint cost %g s, MTBF %g h (%g s), restart %g s\n",
	       delta, o->mtbf_h, m, o->restart_s);
	printf("Young:  t = sqrt(2 * delta * M)        = %10.1f s (%.1f min), "
	       "time lost %.2f %%\n", young, young / 60,
	       100 * time_lost(young, delta, o->restart_s, m));
	printf("Daly:   t = sqrt(2dM)(1 + sqrt(d/2M)/3 + d/18M) - d = %.1f s "
	       "(%.1f min), time lost %.2f %%\n", daly, daly / 60,
	       100 * time_lost(daly, delta, o->restart_s, m));
	if (delta >= 2.0 * m)
		printf("note: the cost is at least twice the MTBF; Daly's "
		       "rule falls back to t = M\n");
	if (o->step_s > 0)
		printf("at %g s per step: every %.0f steps (Young), %.0f steps "
		       "(Daly)\n", o->step_s, ceil(young / o->step_s),
		       ceil(daly / o->step_s));
	printf("time lost: expected fraction of wall time spent writing "
	       "checkpoints, redoing lost work and restarting (Daly 2006, "
	       "exponential failures)\n");
	return EXIT_OK;
}

