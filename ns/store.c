/* SPDX-License-Identifier: MIT */
/*
 * store.c - the namespace's state and its requests to the object store:
 * whether the store answers (a transport failure makes metadata stale
 * for NS_OFFLINE_MS, served from what the cache knows, docs/semantics.md
 * "The store unreachable"), the errno of a failure, names and keys the
 * store takes, and the few requests fs/ makes for a file's metadata
 * (HEAD, a symlink's target, a metadata rewrite, a walk of a prefix).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_int.h"

int ns_open(const struct ns_config *cfg, struct ns **out)
{
	struct ns *ns = calloc(1, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	ns->cfg = *cfg;
	if (ns->cfg.negative_refresh_s > ns->cfg.refresh_s)
		ns->cfg.negative_refresh_s = ns->cfg.refresh_s;
	ns->dirs = calloc(NS_DIR_BUCKETS, sizeof(*ns->dirs));
	if (!ns->dirs) {
		free(ns);
		return -ENOMEM;
	}
	pthread_mutex_init(&ns->lock, NULL);
	atomic_store(&ns->connected, !cfg->disconnected);
	if (cfg->disconnected) /* asked again in a moment (ns_store_probe) */
		atomic_store(&ns->offline_until_ms,
			     util_now_ms() + NS_OFFLINE_MS);
	if (ns_heads_start(ns)) {
		ns_close(ns);
		return -ENOMEM;
	}
	*out = ns;
	return 0;
}

void ns_close(struct ns *ns)
{
	if (!ns)
		return;
	ns_heads_stop(ns);
	for (size_t b = 0; b < NS_DIR_BUCKETS; b++) {
		struct ns_dircache *d = ns->dirs[b], *next;

		for (; d; d = next) {
			next = d->next;
			ns_listing_put(d->l);
			free(d->key);
			free(d);
		}
	}
	free(ns->dirs);
	pthread_mutex_destroy(&ns->lock);
	free(ns);
}

void ns_get_stats(struct ns *ns, struct ns_stats *st)
{
	st->listings = atomic_load(&ns->listings);
	st->list_pages = atomic_load(&ns->list_pages);
	st->heads = atomic_load(&ns->heads);
	st->index_loads = atomic_load(&ns->index_loads);
	st->skipped_names = atomic_load(&ns->skipped_names);
	st->heads_behind = atomic_load(&ns->heads_behind);
	st->heads_waiting = ns_heads_waiting(ns);
	st->connected = atomic_load(&ns->connected);
	pthread_mutex_lock(&ns->lock);
	st->dirs = ns->ndirs;
	st->dir_entries = ns->dir_entries;
	pthread_mutex_unlock(&ns->lock);
}

/* ---- names ---- */

int ns_name_check(const char *name)
{
	return strnlen(name, NAME_MAX + 1) > NAME_MAX ? -ENAMETOOLONG : 0;
}

int ns_key_check(struct ns *ns, const char *key, const char *what)
{
	size_t room = obj_key_room(ns->cfg.st), kl = strlen(key);

	if (obj_key_reserved(ns->cfg.st, key)) {
		fprintf(stderr, "fmfs: %s of '%.64s' refused (EPERM): the store "
			"keeps that name for itself\n", what, key);
		return -EPERM;
	}
	if (kl <= room)
		return 0;
	fprintf(stderr, "fmfs: %s of '%.64s...' refused (ENAMETOOLONG): its "
		"key would be %zu bytes, the store takes at most %zu under "
		"this mount's prefix\n", what, key, kl, room);
	return -ENAMETOOLONG;
}


/* ---- the store's reachability ---- */

bool ns_store_up(struct ns *ns)
{
	return util_now_ms() >= atomic_load(&ns->offline_until_ms);
}

bool ns_connected(struct ns *ns)
{
	return atomic_load(&ns->connected);
}

int ns_obj_errno(struct ns *ns, obj_status st, const struct obj_error *e)
{
	static atomic_int logged[OBJ_ERR_OTHER + 1];
	char line[1024];

	if (st == OBJ_OK)
		return 0; /* e is not filled in then: nothing to log */
	if (st == OBJ_ERR_CONNECT || st == OBJ_ERR_TIMEOUT ||
	    st == OBJ_ERR_SERVER) {
		atomic_store(&ns->offline_until_ms, util_now_ms() + NS_OFFLINE_MS);
		if (atomic_exchange(&ns->connected, false))
			fprintf(stderr, "fmfs: the store does not answer: "
				"disconnected; serving what the cache knows, "
				"writes are queued, reconnecting on its own\n");
	}
	if ((unsigned)st <= OBJ_ERR_OTHER &&
	    atomic_exchange(&logged[st], 1) == 0) {
		obj_error_format(e, line, sizeof(line));
		fprintf(stderr, "fmfs: %s\n", line);
	}
	switch (st) {
	case OBJ_OK:
		return 0;
	case OBJ_ERR_NOT_FOUND:
	case OBJ_ERR_NO_BUCKET:
		return -ENOENT;
	case OBJ_ERR_AUTH:
	case OBJ_ERR_DENIED:
	case OBJ_ERR_CREDENTIALS:
		return -EACCES;
	case OBJ_ERR_NOMEM:
		return -ENOMEM;
	case OBJ_ERR_INVALID:
		return -EINVAL;
	default:
		return -EIO;
	}
}

void ns_store_answered(struct ns *ns)
{
	if (!atomic_load_explicit(&ns->connected, memory_order_relaxed) &&
	    !atomic_exchange(&ns->connected, true)) {
		atomic_store(&ns->offline_until_ms, 0);
		fprintf(stderr, "fmfs: the store answers again: connected\n");
	}
}

bool ns_store_probe(struct ns *ns)
{
	struct obj_error err;

	if (obj_check_bucket(ns->cfg.st, &err) == OBJ_OK) {
		ns_store_answered(ns);
		return true;
	}
	if (err.status == OBJ_ERR_CONNECT || err.status == OBJ_ERR_TIMEOUT ||
	    err.status == OBJ_ERR_SERVER)
		ns_obj_errno(ns, err.status, &err);
	return false;
}

/* ---- requests for the fs ---- */

int ns_head(struct ns *ns, const char *key, struct obj_meta *m)
{
	struct obj_error err;
	obj_status st;

	atomic_fetch_add(&ns->heads, 1);
	st = obj_head(ns->cfg.st, key, m, &err);
	if (st == OBJ_ERR_NOT_FOUND)
		return -ENOENT;
	return ns_obj_errno(ns, st, &err);
}

int ns_read_small(struct ns *ns, const char *key, char *buf, size_t len,
		  size_t *got)
{
	struct obj_error err;
	obj_status st = obj_get(ns->cfg.st, key, 0, len, buf, got, &err);

	return ns_obj_errno(ns, st, &err);
}

int ns_set_meta(struct ns *ns, const char *key, const struct obj_kv *kv,
		size_t n, const char *content_type, char etag[80])
{
	struct obj_error err;
	obj_status st = obj_copy_typed(ns->cfg.st, key, key, kv, n,
				       content_type, etag, &err);

	return ns_obj_errno(ns, st, &err);
}

int ns_walk(struct ns *ns, const char *prefix, ns_walk_fn fn, void *arg,
	    char *msg, size_t msg_len)
{
	char *token = NULL;
	int rc = 0;

	do {
		struct obj_list_page pg;
		struct obj_error err;
		obj_status st = obj_list(ns->cfg.st, prefix, NULL, token,
					 1000, &pg, &err);

		free(token);
		token = NULL;
		if (st != OBJ_OK) {
			if (msg)
				obj_error_format(&err, msg, msg_len);
			return ns_obj_errno(ns, st, &err);
		}
		for (size_t i = 0; i < pg.nentries; i++)
			fn(arg, &pg.entries[i]);
		if (pg.next_token && !(token = strdup(pg.next_token)))
			rc = -ENOMEM;
		obj_list_page_release(&pg);
	} while (!rc && token);
	free(token);
	return rc;
}
