/* SPDX-License-Identifier: MIT */
/*
 * load.c - finding, reading, verifying and restoring checkpoints.
 *
 * A reader is one complete checkpoint: its manifest (checked whole) and
 * its shards, read from the local directory or, when the step is not
 * complete there (a lost disk, a new node), from the remote store with
 * parallel ranged GETs.  Every tensor read is checked against its CRC32C
 * before it is handed over; each shard's header is checked once.
 * ckpt_load goes down the list of complete checkpoints, newest first,
 * and skips one that fails verification (saying so) instead of handing
 * the caller corrupt state.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

/* ---- opening ---- */

static void shard_where(const struct ckpt_reader *r, uint32_t rank,
			char *buf, size_t len)
{
	char name[64];

	ckpt_shard_name(rank, name, sizeof(name));
	for (uint32_t i = 0; r->node_ok && i < r->m.nshards; i++)
		if (r->m.shards[i].rank == rank && r->node_ok[i]) {
			ckpt_node_path(r->c, r->step, name, buf, len);
			return;
		}
	if (r->remote)
		snprintf(buf, len, "%s%s", r->prefix, name);
	else
		snprintf(buf, len, "%s/%s", r->base, name);
}

static int missing_shard(const struct ckpt_reader *r, uint32_t rank,
			 char *msg, size_t msg_len)
{
	char where[PATH_MAX + 128];

	shard_where(r, rank, where, sizeof(where));
	util_msg(msg, msg_len, "step %llu: shard %u of %u is missing (%s%s%s);"
		 " the checkpoint cannot be loaded: load another step (fmckpt "
		 "list)%s", (unsigned long long)r->step, rank,
		 r->m.world_size, r->remote ? r->c->remote : "",
		 r->remote ? "/" : "", where, r->remote || !r->c->st ? "" :
		 " or restore this one from the remote store");
	return -ENOENT;
}

static int wrong_size(const struct ckpt_reader *r, uint32_t rank,
		      uint64_t have, uint64_t want, char *msg, size_t msg_len)
{
	char where[PATH_MAX + 128];

	shard_where(r, rank, where, sizeof(where));
	util_msg(msg, msg_len, "step %llu: shard %s is %llu bytes but the "
		 "manifest says %llu (truncated or replaced: the checkpoint "
		 "is damaged)", (unsigned long long)r->step, where,
		 (unsigned long long)have, (unsigned long long)want);
	return -EBADMSG;
}

static int check_shards_local(struct ckpt_reader *r, char *msg,
			      size_t msg_len)
{
	for (uint32_t i = 0; i < r->m.nshards; i++) {
		char path[PATH_MAX + 128];
		struct stat sb;

		shard_where(r, r->m.shards[i].rank, path, sizeof(path));
		if (stat(path, &sb))
			return missing_shard(r, r->m.shards[i].rank, msg,
					     msg_len);
		if ((uint64_t)sb.st_size != r->m.shards[i].file_bytes)
			return wrong_size(r, r->m.shards[i].rank,
					  (uint64_t)sb.st_size,
					  r->m.shards[i].file_bytes, msg,
					  msg_len);
	}
	return 0;
}

static int check_shards_remote(struct ckpt_reader *r, char *msg,
			       size_t msg_len)
{
	struct obj_list_page pg;
	struct obj_error err;
	uint64_t *sizes;
	bool *seen;
	char *token = NULL;
	obj_status os;
	int rc = 0;

	sizes = calloc(r->m.world_size, sizeof(*sizes));
	seen = calloc(r->m.world_size, sizeof(*seen));
	if (!sizes || !seen) {
		free(sizes);
		free(seen);
		return -ENOMEM;
	}
	do {
		os = obj_list(r->c->st, r->prefix, NULL, token, 1000, &pg,
			      &err);
		free(token);
		token = NULL;
		if (os != OBJ_OK) {
			rc = ckpt_obj_fail(&err, os, r->prefix, msg, msg_len);
			break;
		}
		for (size_t i = 0; i < pg.nentries; i++) {
			const char *name = strrchr(pg.entries[i].key, '/');
			unsigned rank;
			char tail[8];

			if (name && sscanf(name, "/shard-%u.%3s", &rank,
					   tail) == 2 && !strcmp(tail, "bin") &&
			    rank < r->m.world_size) {
				seen[rank] = true;
				sizes[rank] = pg.entries[i].size_bytes;
			}
		}
		if (pg.next_token)
			token = strdup(pg.next_token);
		obj_list_page_release(&pg);
	} while (token);
	for (uint32_t i = 0; !rc && i < r->m.nshards; i++) {
		const struct ckpt_mf_shard *s = &r->m.shards[i];

		if (!seen[s->rank])
			rc = missing_shard(r, s->rank, msg, msg_len);
		else if (sizes[s->rank] != s->file_bytes)
			rc = wrong_size(r, s->rank, sizes[s->rank],
					s->file_bytes, msg, msg_len);
	}
	free(sizes);
	free(seen);
	return rc;
}

static int read_manifest(struct ckpt_reader *r, char *msg, size_t msg_len)
{
	char path[PATH_MAX + 128];
	unsigned char *buf;
	size_t len;
	int rc;

	if (r->remote) {
		snprintf(path, sizeof(path), "%s" CKPT_MANIFEST_NAME, r->prefix);
		rc = ckpt_remote_read_whole(r->c->st, path, CKPT_MF_MAX_BYTES,
					    &buf, &len, msg, msg_len);
		if (rc == -ENOENT && r->c->cfg.commit_on_nodes) {
			/* committed on the nodes, not yet in the store */
			snprintf(path, sizeof(path),
				 "%s" CKPT_NODES_MANIFEST_NAME, r->prefix);
			rc = ckpt_remote_read_whole(r->c->st, path,
						    CKPT_MF_MAX_BYTES, &buf,
						    &len, msg, msg_len);
			r->on_nodes = !rc;
		}
		snprintf(path, sizeof(path), "%s/%s%s", r->c->remote, r->prefix,
			 r->on_nodes ? CKPT_NODES_MANIFEST_NAME :
			 CKPT_MANIFEST_NAME);
	} else {
		snprintf(path, sizeof(path), "%s/" CKPT_MANIFEST_NAME, r->base);
		rc = ckpt_read_whole(path, CKPT_MF_MAX_BYTES, &buf, &len, msg,
				     msg_len);
	}
	if (rc)
		return rc;
	rc = ckpt_mf_decode(buf, len, path, &r->m, msg, msg_len);
	free(buf);
	if (rc)
		return rc;
	if (r->m.kind != CKPT_MF_KIND_MANIFEST || r->m.step != r->step ||
	    r->m.nshards != r->m.world_size) {
		util_msg(msg, msg_len, "%s: not the manifest of step %llu with "
			 "all its shards (it says step %llu, %u of %u shards)",
			 path, (unsigned long long)r->step,
			 (unsigned long long)r->m.step, r->m.nshards,
			 r->m.world_size);
		return -EBADMSG;
	}
	return 0;
}

static bool complete_locally(struct ckpt *c, uint64_t step)
{
	char name[64], path[PATH_MAX + 64];
	struct stat sb;

	if (!c->dir)
		return false;
	ckpt_step_name(step, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s/" CKPT_MANIFEST_NAME, c->dir,
		 name);
	return !stat(path, &sb);
}

/* With commit_on_nodes, a step whose manifest.nodes is in the store
 * counts as complete before its manifest is there (nodes_only). */
static void count_nodes(const struct ckpt *c, struct ckpt_found *v, size_t n)
{
	for (size_t i = 0; c->cfg.commit_on_nodes && i < n; i++)
		if (!v[i].complete && v[i].on_nodes)
			v[i].complete = v[i].nodes_only = true;
}

static uint64_t newest_complete(const struct ckpt_found *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].complete)
			return v[i].step;
	return CKPT_STEP_NONE;
}

/* The newest complete step in dir and remote. */
static int find_latest(struct ckpt *c, enum ckpt_source from,
		       uint64_t *step, char *msg, size_t msg_len)
{
	struct ckpt_found *v;
	uint64_t best = CKPT_STEP_NONE, s;
	size_t n;
	int rc;

	/* A node's own directory has shards, never a manifest. */
	if (c->dir && from != CKPT_FROM_REMOTE && !c->cfg.node_local) {
		rc = ckpt_local_scan(c->dir, &v, &n, msg, msg_len);
		if (rc)
			return rc;
		best = newest_complete(v, n);
		free(v);
	}
	if (c->st && from != CKPT_FROM_LOCAL) {
		rc = ckpt_remote_scan(c->st, &v, &n, msg, msg_len);
		if (rc)
			return rc;
		count_nodes(c, v, n);
		s = newest_complete(v, n);
		free(v);
		if (s != CKPT_STEP_NONE && (best == CKPT_STEP_NONE || s > best))
			best = s;
	}
	if (best == CKPT_STEP_NONE) {
		util_msg(msg, msg_len, "no complete checkpoint in %s%s%s",
			 c->dir ? c->dir : "", c->dir && c->remote ? " or " :
			 "", c->remote ? c->remote : "");
		return -ENOENT;
	}
	*step = best;
	return 0;
}

int ckpt_reader_open_from(struct ckpt *c, uint64_t step,
			  enum ckpt_source from, struct ckpt_reader **out,
			  char *msg, size_t msg_len)
{
	struct ckpt_reader *r;
	char name[64];
	int rc;

	*out = NULL;
	util_msg(msg, msg_len, "%s", "");
	if ((from == CKPT_FROM_LOCAL && !c->dir) ||
	    (from == CKPT_FROM_REMOTE && !c->st)) {
		util_msg(msg, msg_len, "no %s store configured",
			 from == CKPT_FROM_LOCAL ? "local" : "remote");
		return -EINVAL;
	}
	if (step == CKPT_STEP_LATEST &&
	    (rc = find_latest(c, from, &step, msg, msg_len)))
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->c = c;
	r->step = step;
	ckpt_step_name(step, name, sizeof(name));
	if (from == CKPT_FROM_REMOTE ||
	    (from == CKPT_FROM_ANY && !complete_locally(c, step) && c->st)) {
		r->remote = true;
		snprintf(r->prefix, sizeof(r->prefix), "%s/", name);
		snprintf(r->where, sizeof(r->where), "%s/%s", c->remote, name);
	} else {
		snprintf(r->base, sizeof(r->base), "%s/%s", c->dir, name);
		snprintf(r->where, sizeof(r->where), "%s", r->base);
	}
	rc = read_manifest(r, msg, msg_len);
	if (rc == -ENOENT)
		util_msg(msg, msg_len, "step %llu is not a complete checkpoint "
			 "in %s (no %s%s" CKPT_MANIFEST_NAME "; fmckpt list "
			 "shows the steps there)", (unsigned long long)step,
			 r->remote ? c->remote : c->dir,
			 r->remote ? r->where : r->base, "/");
	/* A step committed on the nodes has its shards there; the store's
	 * may be coming still: a read finds out (and fails over to an
	 * older step when one is missing everywhere). */
	if (!rc && !r->on_nodes)
		rc = r->remote ? check_shards_remote(r, msg, msg_len) :
		     check_shards_local(r, msg, msg_len);
	if (!rc) {
		r->fds = malloc(r->m.nshards * sizeof(*r->fds));
		r->hdr_ok = calloc(r->m.nshards, sizeof(*r->hdr_ok));
		if (!r->fds || !r->hdr_ok)
			rc = -ENOMEM;
		for (uint32_t i = 0; r->fds && i < r->m.nshards; i++)
			r->fds[i] = -1;
	}
	if (!rc)
		rc = ckpt_node_reader_init(r);
	if (rc) {
		ckpt_reader_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

int ckpt_reader_open(struct ckpt *c, uint64_t step, struct ckpt_reader **out,
		     char *msg, size_t msg_len)
{
	return ckpt_reader_open_from(c, step, CKPT_FROM_ANY, out, msg,
				     msg_len);
}

void ckpt_reader_close(struct ckpt_reader *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; r->fds && i < r->m.nshards; i++)
		if (r->fds[i] >= 0)
			close(r->fds[i]);
	free(r->fds);
	free(r->hdr_ok);
	free(r->by_name);
	ckpt_node_reader_free(r);
	ckpt_mf_release(&r->m);
	free(r);
}

uint64_t ckpt_reader_step(const struct ckpt_reader *r)
{
	return r->step;
}

uint32_t ckpt_reader_world_size(const struct ckpt_reader *r)
{
	return r->m.world_size;
}

uint32_t ckpt_reader_version(const struct ckpt_reader *r)
{
	return r->m.version;
}

bool ckpt_reader_is_remote(const struct ckpt_reader *r)
{
	return r->remote;
}

const char *ckpt_reader_where(const struct ckpt_reader *r)
{
	return r->where;
}

int64_t ckpt_reader_created_s(const struct ckpt_reader *r)
{
	return r->m.created_ns / 1000000000ll;
}

size_t ckpt_reader_count(const struct ckpt_reader *r)
{
	return r->m.ntensors;
}

const struct ckpt_tensor_info *ckpt_reader_tensor(const struct ckpt_reader *r,
						  size_t i)
{
	return i < r->m.ntensors ? &r->m.tensors[i] : NULL;
}

const struct ckpt_tensor_info *ckpt_reader_find(const struct ckpt_reader *r,
						uint32_t rank,
						const char *name)
{
	for (uint32_t i = 0; i < r->m.nshards; i++) {
		const struct ckpt_mf_shard *s = &r->m.shards[i];

		if (s->rank != rank)
			continue;
		for (uint32_t k = 0; k < s->ntensors; k++)
			if (!strcmp(r->m.tensors[s->first + k].name, name))
				return &r->m.tensors[s->first + k];
	}
	return NULL;
}

int ckpt_reader_shard(const struct ckpt_reader *r, uint32_t rank,
		      uint64_t *size_bytes, uint32_t *crc32c)
{
	for (uint32_t i = 0; i < r->m.nshards; i++) {
		if (r->m.shards[i].rank == rank) {
			*size_bytes = r->m.shards[i].file_bytes;
			*crc32c = r->m.shards[i].crc32c;
			return 0;
		}
	}
	return -ENOENT;
}

/* ---- reading ---- */

static int shard_index(const struct ckpt_reader *r, uint32_t rank)
{
	for (uint32_t i = 0; i < r->m.nshards; i++)
		if (r->m.shards[i].rank == rank)
			return (int)i;
	return -1;
}

/* Reads [off, off+len) of shard i into buf. */
static int read_range(struct ckpt_reader *r, uint32_t i, uint64_t off,
		      void *buf, uint64_t len, char *msg, size_t msg_len)
{
	char where[PATH_MAX + 128];
	bool node = ckpt_node_serves(r, i);
	ssize_t n;
	int rc;

	shard_where(r, r->m.shards[i].rank, where, sizeof(where));
	if (r->remote && !node) {
		rc = ckpt_remote_read(r->c->st, where, off, buf, len,
				      r->c->cfg.upload_parallel ?
				      r->c->cfg.upload_parallel : 8, msg,
				      msg_len);
		if (!rc)
			ckpt_node_count(r, i, false, len);
		return rc;
	}
	if (r->fds[i] < 0) {
		r->fds[i] = open(where, O_RDONLY | O_CLOEXEC);
		if (r->fds[i] < 0) {
			if (errno == ENOENT)
				return missing_shard(r, r->m.shards[i].rank,
						     msg, msg_len);
			util_msg(msg, msg_len, "cannot open %s: %s", where,
				 strerror(errno));
			return -errno;
		}
	}
	n = util_pread_all(r->fds[i], buf, (size_t)len, off);
	if (n < 0 || (uint64_t)n < len) {
		util_msg(msg, msg_len, "reading %s failed: %s", where,
			 n < 0 ? strerror((int)-n) : "shorter than the "
			 "manifest says (truncated)");
		if (node) { /* this node's copy: the store's instead */
			ckpt_node_bad(r, i, msg);
			return read_range(r, i, off, buf, len, msg, msg_len);
		}
		return n < 0 ? (int)n : -EBADMSG;
	}
	ckpt_node_count(r, i, node, len);
	return 0;
}

static int check_header(struct ckpt_reader *r, uint32_t i, char *msg,
			size_t msg_len)
{
	unsigned char buf[CKPT_SHARD_HEADER_BYTES];
	const struct ckpt_mf_shard *s = &r->m.shards[i];
	char where[PATH_MAX + 128];
	struct ckpt_shard_header h;
	int rc;

	if (r->hdr_ok[i])
		return 0;
	rc = read_range(r, i, 0, buf, sizeof(buf), msg, msg_len);
	if (rc)
		return rc;
	shard_where(r, s->rank, where, sizeof(where));
	rc = ckpt_shard_header_decode(buf, sizeof(buf), where, &h, msg,
				      msg_len);
	if (!rc && (h.step != r->step || h.rank != s->rank ||
		    h.world_size != r->m.world_size ||
		    h.ntensors != s->ntensors ||
		    h.file_bytes != s->file_bytes)) {
		util_msg(msg, msg_len, "%s: its header (step %llu, rank %u of "
			 "%u) does not match the manifest: a shard of another "
			 "checkpoint", where, (unsigned long long)h.step,
			 h.rank, h.world_size);
		rc = -EBADMSG;
	}
	if (rc && ckpt_node_serves(r, i)) {
		ckpt_node_bad(r, i, msg);
		return check_header(r, i, msg, msg_len);
	}
	if (rc)
		return rc;
	r->hdr_ok[i] = true;
	return 0;
}

int ckpt_reader_read(struct ckpt_reader *r, const struct ckpt_tensor_info *t,
		     void *buf, uint64_t buf_bytes, char *msg, size_t msg_len)
{
	char sh[256], where[PATH_MAX + 128];
	int i = shard_index(r, t->rank), rc;
	uint32_t crc;

	util_msg(msg, msg_len, "%s", "");
	if (i < 0)
		return -ENOENT;
	if (buf_bytes != t->size_bytes) {
		ckpt_shape_format(t->ndim, t->shape, sh, sizeof(sh));
		util_msg(msg, msg_len, "wrong buffer size for tensor '%s' "
			 "(rank %u, step %llu): it is %s %s, %llu bytes; the "
			 "buffer is %llu bytes", t->name, t->rank,
			 (unsigned long long)r->step, ckpt_dtype_name(t->dtype),
			 sh, (unsigned long long)t->size_bytes,
			 (unsigned long long)buf_bytes);
		return -EINVAL;
	}
	rc = check_header(r, (uint32_t)i, msg, msg_len);
	if (!rc)
		rc = read_range(r, (uint32_t)i, t->offset, buf, t->size_bytes,
				msg, msg_len);
	if (rc)
		return rc;
	crc = util_crc32c(0, buf, (size_t)t->size_bytes);
	if (crc != t->crc32c) {
		bool node = ckpt_node_serves(r, (uint32_t)i);

		shard_where(r, t->rank, where, sizeof(where));
		util_msg(msg, msg_len, "tensor '%s' (rank %u) of step %llu: "
			 "checksum mismatch (stored %08x, read %08x): %s is "
			 "corrupt; load an older step or restore this one from "
			 "the remote store", t->name, t->rank,
			 (unsigned long long)r->step, t->crc32c, crc, where);
		if (node) { /* this node's copy: the store's instead */
			ckpt_node_bad(r, (uint32_t)i, msg);
			return ckpt_reader_read(r, t, buf, buf_bytes, msg,
						msg_len);
		}
		return -EBADMSG;
	}
	return 0;
}

/* Tensor CRCs over one piece of a shard; t..t+n sorted by offset. */
static void crc_tensors(const struct ckpt_tensor_info *t, uint32_t n,
			uint32_t *crcs, uint64_t off, const unsigned char *p,
			uint64_t len)
{
	for (uint32_t k = 0; k < n; k++) {
		uint64_t a = t[k].offset, b = t[k].offset + t[k].size_bytes;

		if (b <= off || a >= off + len)
			continue;
		if (a < off)
			a = off;
		if (b > off + len)
			b = off + len;
		crcs[k] = util_crc32c(crcs[k], p + (a - off), (size_t)(b - a));
	}
}

static int verify_shard(struct ckpt_reader *r, uint32_t i, unsigned char *buf,
			size_t buf_len, char *msg, size_t msg_len)
{
	const struct ckpt_mf_shard *s = &r->m.shards[i];
	const struct ckpt_tensor_info *t = &r->m.tensors[s->first];
	char where[PATH_MAX + 128];
	uint32_t crc = 0, *crcs;
	int rc;

	rc = check_header(r, i, msg, msg_len);
	if (rc)
		return rc;
	crcs = calloc(s->ntensors ? s->ntensors : 1, sizeof(*crcs));
	if (!crcs)
		return -ENOMEM;
	for (uint64_t off = 0; off < s->file_bytes; ) {
		uint64_t n = s->file_bytes - off < buf_len ?
			     s->file_bytes - off : buf_len;

		rc = read_range(r, i, off, buf, n, msg, msg_len);
		if (rc)
			break;
		crc = util_crc32c(crc, buf, (size_t)n);
		crc_tensors(t, s->ntensors, crcs, off, buf, n);
		off += n;
	}
	shard_where(r, s->rank, where, sizeof(where));
	for (uint32_t k = 0; !rc && k < s->ntensors; k++) {
		if (crcs[k] != t[k].crc32c) {
			util_msg(msg, msg_len, "tensor '%s' (rank %u) of step "
				 "%llu: checksum mismatch in %s: the shard is "
				 "corrupt", t[k].name, s->rank,
				 (unsigned long long)r->step, where);
			rc = -EBADMSG;
		}
	}
	if (!rc && crc != s->crc32c) {
		util_msg(msg, msg_len, "%s: file checksum mismatch (stored "
			 "%08x, read %08x): the shard is corrupt", where,
			 s->crc32c, crc);
		rc = -EBADMSG;
	}
	free(crcs);
	return rc;
}

int ckpt_reader_verify(struct ckpt_reader *r, char *msg, size_t msg_len)
{
	size_t buf_len = r->remote ? 64u << 20 : CKPT_IO_PIECE;
	unsigned char *buf = malloc(buf_len);
	int rc = 0;

	util_msg(msg, msg_len, "%s", "");
	if (!buf)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->m.nshards && !rc; i++) {
		rc = verify_shard(r, i, buf, buf_len, msg, msg_len);
		if (rc == -EBADMSG && ckpt_node_serves(r, i)) {
			/* this node's copy: the store's is checked instead */
			ckpt_node_bad(r, i, msg);
			rc = verify_shard(r, i, buf, buf_len, msg, msg_len);
		}
	}
	free(buf);
	return rc;
}

/* ---- restore ---- */

static int copy_shard(struct ckpt_reader *r, uint32_t i, const char *dst,
		      char *msg, size_t msg_len)
{
	const struct ckpt_mf_shard *s = &r->m.shards[i];
	char src[PATH_MAX + 128];
	unsigned char *buf = NULL;
	int fd, rc = 0;

	shard_where(r, s->rank, src, sizeof(src));
	fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot create %s: %s", dst,
			 strerror(-rc));
		return rc;
	}
	if (r->remote) {
		struct obj_error err;
		obj_status os = obj_get_fd(r->c->st, src, 0, s->file_bytes, fd,
					   0, NULL, &err);

		if (os != OBJ_OK)
			rc = ckpt_obj_fail(&err, os, src, msg, msg_len);
	} else if (!(buf = malloc(CKPT_IO_PIECE))) {
		rc = -ENOMEM;
	} else {
		for (uint64_t off = 0; !rc && off < s->file_bytes; ) {
			uint64_t n = s->file_bytes - off < CKPT_IO_PIECE ?
				     s->file_bytes - off : CKPT_IO_PIECE;

			rc = read_range(r, i, off, buf, n, msg, msg_len);
			if (!rc && pwrite(fd, buf, (size_t)n, (off_t)off) !=
			    (ssize_t)n) {
				rc = errno ? -errno : -EIO;
				util_msg(msg, msg_len, "writing %s failed: %s",
					 dst, strerror(-rc));
			}
			off += n;
		}
	}
	free(buf);
	if (!rc && fsync(fd)) {
		rc = -errno;
		util_msg(msg, msg_len, "fsync of %s failed: %s", dst,
			 strerror(-rc));
	}
	close(fd);
	return rc;
}

int ckpt_reader_restore(struct ckpt_reader *r, const char *dir, char *msg,
			size_t msg_len)
{
	char tmp[PATH_MAX], dst[PATH_MAX], name[64], path[PATH_MAX + 64];
	struct ckpt_config cfg;
	struct ckpt *copy = NULL;
	struct ckpt_reader *check = NULL;
	unsigned char *mf = NULL;
	struct stat sb;
	size_t mf_len;
	int rc;

	util_msg(msg, msg_len, "%s", "");
	rc = ckpt_mkdir_p(dir, msg, msg_len);
	if (rc)
		return rc;
	ckpt_step_name(r->step, name, sizeof(name));
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/" CKPT_TMP_PREFIX "%010" PRIu64, dir,
		 r->step);
	if (!stat(dst, &sb)) {
		util_msg(msg, msg_len, "%s exists already (restore into another "
			 "directory, or remove it first)", dst);
		return -EEXIST;
	}
	ckpt_rm_rf(tmp);
	if (mkdir(tmp, 0755)) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot create %s: %s", tmp,
			 strerror(-rc));
		return rc;
	}
	for (uint32_t i = 0; !rc && i < r->m.nshards; i++) {
		ckpt_shard_name(r->m.shards[i].rank, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", tmp, name);
		rc = copy_shard(r, i, path, msg, msg_len);
	}
	if (!rc)
		rc = ckpt_mf_encode(&r->m, &mf, &mf_len);
	if (!rc)
		rc = ckpt_write_atomic(tmp, CKPT_MANIFEST_NAME, mf, mf_len, msg,
				       msg_len);
	free(mf);
	if (!rc && rename(tmp, dst)) {
		rc = -errno;
		util_msg(msg, msg_len, "cannot rename %s to %s: %s", tmp, dst,
			 strerror(-rc));
	}
	if (rc) {
		ckpt_rm_rf(tmp);
		return rc;
	}
	util_fsync_at(AT_FDCWD, dir);
	/* Check what landed, through the same reader a load would use. */
	ckpt_config_init(&cfg);
	cfg.dir = dir;
	cfg.read_only = true;
	cfg.rank = 0;
	cfg.world_size = 1;
	rc = ckpt_open(&cfg, &copy, msg, msg_len);
	if (!rc)
		rc = ckpt_reader_open_from(copy, r->step, CKPT_FROM_LOCAL,
					   &check, msg, msg_len);
	if (!rc)
		rc = ckpt_reader_verify(check, msg, msg_len);
	ckpt_reader_close(check);
	ckpt_close(copy, NULL, 0);
	if (rc)
		ckpt_local_remove(dir, r->step, true);
	return rc;
}

/* ---- load ---- */

static int load_into(struct ckpt *c, struct ckpt_reader *r,
		     const struct ckpt_buf *bufs, size_t n, bool *caller_error,
		     char *msg, size_t msg_len)
{
	*caller_error = true;
	for (size_t i = 0; i < n; i++) {
		const struct ckpt_buf *b = &bufs[i];
		const struct ckpt_tensor_info *t = NULL;
		struct ckpt_global_info g;
		int rc;

		if (b->ndim) {
			/* a region of the whole tensor: its ndim must be
			 * the tensor's */
			rc = ckpt_reader_global(r, b->name, &g, msg, msg_len);
			if (!rc && (b->ndim != g.ndim || !b->offset ||
				    !b->shape)) {
				util_msg(msg, msg_len, "tensor '%s': the region "
					 "to load has %u dimensions (offset "
					 "and shape %s); the tensor has %u",
					 b->name, b->ndim, b->offset &&
					 b->shape ? "given" : "missing",
					 g.ndim);
				return -EINVAL;
			}
			if (!rc)
				rc = ckpt_reader_read_region(r, b->name,
							     b->offset, b->shape,
							     b->data,
							     b->size_bytes, msg,
							     msg_len);
		} else {
			if (r->m.world_size == c->world)
				t = ckpt_reader_find(r, c->rank, b->name);
			rc = t ? ckpt_reader_read(r, t, b->data, b->size_bytes,
						  msg, msg_len) :
				 ckpt_reader_read_region(r, b->name, NULL, NULL,
							 b->data,
							 b->size_bytes, msg,
							 msg_len);
		}
		if (rc) {
			/* the caller's mistake, or the checkpoint's: the
			 * newest one is skipped only for the latter */
			*caller_error = rc == -EINVAL || (rc == -ENOENT &&
							  !t && !b->ndim);
			return rc;
		}
	}
	*caller_error = false;
	return 0;
}

int ckpt_scan_both(struct ckpt *c, struct ckpt_found **lv, size_t *ln,
		   struct ckpt_found **rv, size_t *rn, char *msg,
		   size_t msg_len)
{
	int rc = 0;

	*lv = *rv = NULL;
	*ln = *rn = 0;
	if (c->dir && !c->cfg.node_local)
		rc = ckpt_local_scan(c->dir, lv, ln, msg, msg_len);
	if (!rc && c->st)
		rc = ckpt_remote_scan(c->st, rv, rn, msg, msg_len);
	if (!rc)
		count_nodes(c, *rv, *rn);
	if (rc) {
		free(*lv);
		free(*rv);
		*lv = *rv = NULL;
	}
	return rc;
}

struct candidate {
	uint64_t step;
	enum ckpt_source from;
};

static int candidates(struct ckpt *c, uint64_t step, struct candidate **out,
		      size_t *n, char *msg, size_t msg_len)
{
	struct ckpt_found *lv = NULL, *rv = NULL;
	size_t ln = 0, rn = 0, k = 0, i = 0, j = 0;
	struct candidate *v;
	int rc = 0;

	if (step != CKPT_STEP_LATEST) {
		v = calloc(2, sizeof(*v));
		if (!v)
			return -ENOMEM;
		if (c->dir && complete_locally(c, step))
			v[k++] = (struct candidate){ step, CKPT_FROM_LOCAL };
		if (c->st)
			v[k++] = (struct candidate){ step, CKPT_FROM_REMOTE };
		*out = v;
		*n = k;
		return 0;
	}
	rc = ckpt_scan_both(c, &lv, &ln, &rv, &rn, msg, msg_len);
	if (rc)
		return rc;
	v = calloc(ln + rn + 1, sizeof(*v));
	if (!v) {
		free(lv);
		free(rv);
		return -ENOMEM;
	}
	/* Merge, newest first; the local copy before the remote one. */
	while (i < ln || j < rn) {
		if (i < ln && !lv[i].complete) {
			i++;
		} else if (j < rn && !rv[j].complete) {
			j++;
		} else if (j >= rn || (i < ln && lv[i].step >= rv[j].step)) {
			v[k++] = (struct candidate){ lv[i++].step,
						     CKPT_FROM_LOCAL };
		} else {
			v[k++] = (struct candidate){ rv[j++].step,
						     CKPT_FROM_REMOTE };
		}
	}
	free(lv);
	free(rv);
	*out = v;
	*n = k;
	return 0;
}

int ckpt_load(struct ckpt *c, uint64_t step, const struct ckpt_buf *bufs,
	      size_t nbufs, uint64_t *loaded_step, char *msg, size_t msg_len)
{
	char why[768] = "", skipped[1024] = "", sources[1024] = "";
	struct candidate *v;
	size_t n;
	int rc, last = -ENOENT;

	util_msg(msg, msg_len, "%s", "");
	rc = candidates(c, step, &v, &n, msg, msg_len);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct ckpt_reader *r;
		bool caller_error = false;
		size_t at = strlen(skipped);

		rc = ckpt_reader_open_from(c, v[i].step, v[i].from, &r, why,
					   sizeof(why));
		if (!rc) {
			rc = load_into(c, r, bufs, nbufs, &caller_error, why,
				       sizeof(why));
			/* where each shard came from, for the job's log */
			if (!rc && c->cfg.node_local)
				snprintf(sources, sizeof(sources), ": %s",
					 ckpt_reader_sources(r));
			ckpt_reader_close(r);
		}
		if (!rc) {
			if (loaded_step)
				*loaded_step = v[i].step;
			if (skipped[0] || sources[0])
				util_msg(msg, msg_len, "loaded step %llu%s%s%s",
					 (unsigned long long)v[i].step,
					 sources, skipped[0] ? "; skipped " :
					 "", skipped);
			free(v);
			return 0;
		}
		if (caller_error || (rc != -EBADMSG && rc != -ENOENT &&
				     rc != -EPROTONOSUPPORT)) {
			util_msg(msg, msg_len, "%s", why);
			free(v);
			return rc;
		}
		last = rc;
		snprintf(skipped + at, sizeof(skipped) - at, "%sstep %llu "
			 "(%s): %s", at ? "; " : "",
			 (unsigned long long)v[i].step,
			 v[i].from == CKPT_FROM_LOCAL ? "local" : "remote",
			 why);
	}
	free(v);
	if (skipped[0])
		util_msg(msg, msg_len, "no loadable checkpoint: %s", skipped);
	else if (step == CKPT_STEP_LATEST)
		util_msg(msg, msg_len, "no complete checkpoint in %s%s%s",
			 c->dir ? c->dir : "", c->dir && c->remote ? " or " :
			 "", c->remote ? c->remote : "");
	else {
		char name[64];

		ckpt_step_name(step, name, sizeof(name));
		util_msg(msg, msg_len, "step %llu is not a complete checkpoint "
			 "in %s%s%s (no %s/%s/" CKPT_MANIFEST_NAME "; fmckpt "
			 "list shows the steps there)", (unsigned long long)step,
			 c->dir ? c->dir : "", c->dir && c->remote ? " or " :
			 "", c->remote ? c->remote : "", c->dir ? c->dir :
			 c->remote, name);
	}
	return last;
}
