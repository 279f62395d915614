/* SPDX-License-Identifier: MIT */
/*
 * reshard.c - tensors as wholes across shards: the slices of a global
 * tensor (ckpt_add_slice) and replicated tensors (CKPT_ADD_REPLICATED),
 * read back into any world size and any other split
 * (ckpt_reader_read_region), and the checks that the records of one name
 * agree, at the commit (ckpt_mf_check_global, rank 0's merge) and again
 * at every read, since a manifest may come from anywhere.
 *
 * A region is assembled from the records that intersect it.  Each is
 * read whole and checked against its CRC32C (the manifest has no finer
 * checksum) before any of its bytes is copied, so nothing unchecked
 * reaches the caller's buffer.  Records of one name are disjoint or the
 * same region (copies: one is read, this rank's when it has one); the
 * region is covered when the volumes of its intersections with them add
 * up to its own.  docs/checkpoint-format.md "Slices and resharding".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

static bool same_region(const struct ckpt_tensor_info *a,
			const struct ckpt_tensor_info *b)
{
	return a->ndim == b->ndim &&
	       !memcmp(a->shape, b->shape, sizeof(a->shape)) &&
	       !memcmp(a->global_offset, b->global_offset,
		       sizeof(a->global_offset));
}

int ckpt_global_agree(const struct ckpt_tensor_info *a,
		      const struct ckpt_tensor_info *b, char *msg,
		      size_t msg_len)
{
	char x[256], y[256];

	if (a->flags != b->flags) {
		util_msg(msg, msg_len, "tensor '%s' is %s on rank %u but %s on "
			 "rank %u: save it the same way on every rank",
			 a->name, a->flags & CKPT_TENSOR_SLICE ? "a slice" :
			 a->flags ? "replicated" : "the rank's own", a->rank,
			 b->flags & CKPT_TENSOR_SLICE ? "a slice" :
			 b->flags ? "replicated" : "the rank's own", b->rank);
		return -EBADMSG;
	}
	if (!a->flags)
		return 0; /* each rank's own: nothing in common */
	if (a->dtype != b->dtype) {
		util_msg(msg, msg_len, "tensor '%s' is %s on rank %u but %s on "
			 "rank %u", a->name, ckpt_dtype_name(a->dtype),
			 a->rank, ckpt_dtype_name(b->dtype), b->rank);
		return -EBADMSG;
	}
	if (a->flags & CKPT_TENSOR_SLICE ?
	    a->ndim != b->ndim || memcmp(a->global_shape, b->global_shape,
					 sizeof(a->global_shape)) :
	    !same_region(a, b)) {
		const int64_t *sa = a->flags & CKPT_TENSOR_SLICE ?
				    a->global_shape : a->shape;
		const int64_t *sb = b->flags & CKPT_TENSOR_SLICE ?
				    b->global_shape : b->shape;

		ckpt_shape_format(a->ndim, sa, x, sizeof(x));
		ckpt_shape_format(b->ndim, sb, y, sizeof(y));
		util_msg(msg, msg_len, "tensor '%s' is %s on rank %u but %s on "
			 "rank %u: its ranks must agree on the whole shape",
			 a->name, x, a->rank, y, b->rank);
		return -EBADMSG;
	}
	if (same_region(a, b) && a->crc32c != b->crc32c) {
		util_msg(msg, msg_len, "tensor '%s': the copies of rank %u and "
			 "rank %u differ (CRC32C %08x, %08x) though they are "
			 "the same %s", a->name, a->rank, b->rank, a->crc32c,
			 b->crc32c, a->flags & CKPT_TENSOR_SLICE ?
			 "region" : "replicated tensor");
		return -EBADMSG;
	}
	return 0;
}

/* Records ordered by name, then offsets, then rank: copies of a region
 * next to each other. */
static int cmp_rec(const struct ckpt_tensor_info *a,
		   const struct ckpt_tensor_info *b)
{
	int c = strcmp(a->name, b->name);

	if (c)
		return c;
	for (unsigned d = 0; d < CKPT_NDIM_MAX; d++)
		if (a->global_offset[d] != b->global_offset[d])
			return a->global_offset[d] < b->global_offset[d] ?
			       -1 : 1;
	return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int cmp_idx(const void *x, const void *y, void *base)
{
	const struct ckpt_tensor_info *t = base;

	return cmp_rec(&t[*(const uint32_t *)x], &t[*(const uint32_t *)y]);
}

/* t[0..n) sorted by cmp_rec, as indices (malloc'd; NULL: no memory). */
static uint32_t *sorted_index(const struct ckpt_tensor_info *t, uint32_t n)
{
	uint32_t *ix = malloc((n ? n : 1) * sizeof(*ix));

	if (!ix)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		ix[i] = i;
	qsort_r(ix, n, sizeof(*ix), cmp_idx, (void *)t);
	return ix;
}

int ckpt_mf_check_global(const struct ckpt_manifest *m, char *msg,
			 size_t msg_len)
{
	uint32_t *ix = sorted_index(m->tensors, m->ntensors);
	int rc = 0;

	if (!ix)
		return -ENOMEM;
	for (uint32_t i = 1; i < m->ntensors && !rc; i++) {
		const struct ckpt_tensor_info *a = &m->tensors[ix[i - 1]];
		const struct ckpt_tensor_info *b = &m->tensors[ix[i]];

		if (!strcmp(a->name, b->name))
			rc = ckpt_global_agree(a, b, msg, msg_len);
	}
	free(ix);
	return rc;
}

/* The records named name: [*first, *first + *n) of r->by_name. */
static int records_of(struct ckpt_reader *r, const char *name,
		      uint32_t *first, uint32_t *n)
{
	uint32_t lo = 0, hi;

	if (!r->by_name && !(r->by_name = sorted_index(r->m.tensors,
						       r->m.ntensors)))
		return -ENOMEM;
	hi = r->m.ntensors;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (strcmp(r->m.tensors[r->by_name[mid]].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*first = lo;
	for (hi = lo; hi < r->m.ntensors &&
	     !strcmp(r->m.tensors[r->by_name[hi]].name, name); hi++)
		;
	*n = hi - lo;
	return 0;
}

static uint64_t volume(unsigned ndim, const int64_t *shape)
{
	uint64_t v = 1;

	for (unsigned d = 0; d < ndim; d++)
		v *= (uint64_t)shape[d];
	return v;
}

static int global_of(struct ckpt_reader *r, const char *name,
		     struct ckpt_global_info *out, uint32_t *first,
		     uint32_t *n, char *msg, size_t msg_len)
{
	const struct ckpt_tensor_info *t0;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = records_of(r, name, first, n);
	if (rc)
		return rc;
	if (!*n) {
		util_msg(msg, msg_len, "tensor '%s' is not in step %llu at %s "
			 "(in no rank's shard)", name,
			 (unsigned long long)r->step, r->where);
		return -ENOENT;
	}
	t0 = &r->m.tensors[r->by_name[*first]];
	for (uint32_t k = 1; k < *n; k++) {
		rc = ckpt_global_agree(t0,
				       &r->m.tensors[r->by_name[*first + k]],
				       msg, msg_len);
		if (rc)
			return rc;
	}
	out->dtype = t0->dtype;
	out->ndim = t0->ndim;
	memcpy(out->shape, t0->flags & CKPT_TENSOR_SLICE ? t0->global_shape :
	       t0->shape, sizeof(out->shape));
	out->size_bytes = volume(out->ndim, out->shape) *
			  ckpt_dtype_size(out->dtype);
	out->copies = *n;
	out->flags = t0->flags;
	return 0;
}

int ckpt_reader_global(const struct ckpt_reader *r, const char *name,
		       struct ckpt_global_info *out, char *msg,
		       size_t msg_len)
{
	uint32_t first, n;

	/* The name index is built on first use: a cache, not a change. */
	return global_of((struct ckpt_reader *)r, name, out, &first, &n, msg,
			 msg_len);
}

/* The intersection of box a (offset ao, shape as) with box b, as offset
 * and shape; false when empty. */
static bool intersect(unsigned ndim, const int64_t *ao, const int64_t *as,
		      const int64_t *bo, const int64_t *bs, int64_t *io,
		      int64_t *is)
{
	for (unsigned d = 0; d < ndim; d++) {
		int64_t lo = ao[d] > bo[d] ? ao[d] : bo[d];
		int64_t hi = ao[d] + as[d] < bo[d] + bs[d] ? ao[d] + as[d] :
			     bo[d] + bs[d];

		if (hi <= lo)
			return false;
		io[d] = lo;
		is[d] = hi - lo;
	}
	return true;
}

/* Copies box (offset bo, shape bs, in global coordinates) from src (the
 * box so, ss, row-major) to dst (the box dof, ds), es bytes an element. */
static void copy_box(unsigned ndim, size_t es, const int64_t *bo,
		     const int64_t *bs, const unsigned char *src,
		     const int64_t *so, const int64_t *ss, unsigned char *dst,
		     const int64_t *dof, const int64_t *ds)
{
	int64_t idx[CKPT_NDIM_MAX] = { 0 };
	size_t run = es * (size_t)bs[ndim - 1];

	if (volume(ndim, bs) == 0)
		return;
	for (;;) {
		size_t s_off = 0, d_off = 0;

		for (unsigned d = 0; d < ndim; d++) {
			s_off = s_off * (size_t)ss[d] +
				(size_t)(bo[d] + idx[d] - so[d]);
			d_off = d_off * (size_t)ds[d] +
				(size_t)(bo[d] + idx[d] - dof[d]);
		}
		memcpy(dst + d_off * es, src + s_off * es, run);
		/* the next row: an odometer over all but the last dimension */
		unsigned d = ndim - 1;

		while (d > 0) {
			d--;
			if (++idx[d] < bs[d])
				break;
			idx[d] = 0;
			if (d == 0)
				return;
		}
		if (ndim == 1)
			return;
	}
}

/* Region (o, s) of the tensor, every record of which is in
 * by_name[first, first + n), into buf. */
static int read_slices(struct ckpt_reader *r, const char *name,
		       const struct ckpt_global_info *g,
		       uint32_t first, uint32_t n, const int64_t *o,
		       const int64_t *s, unsigned char *buf, char *msg,
		       size_t msg_len)
{
	size_t es = ckpt_dtype_size(g->dtype);
	uint64_t want = volume(g->ndim, s), got = 0, tmp_len = 0;
	const struct ckpt_tensor_info **use;
	unsigned char *tmp = NULL;
	uint32_t nu = 0;
	int rc = 0;
	char a[256], b[256];

	use = calloc(n ? n : 1, sizeof(*use));
	if (!use)
		return -ENOMEM;
	/* The records that meet the region, one of each set of copies
	 * (this rank's when it has one), pairwise disjoint. */
	for (uint32_t k = 0; k < n && !rc; k++) {
		const struct ckpt_tensor_info *t =
			&r->m.tensors[r->by_name[first + k]];
		int64_t io[CKPT_NDIM_MAX], is[CKPT_NDIM_MAX];
		uint32_t j;

		if (!intersect(g->ndim, t->global_offset, t->shape, o, s, io,
			       is))
			continue;
		for (j = 0; j < nu; j++) {
			if (same_region(use[j], t)) {
				if (t->rank == r->c->rank)
					use[j] = t;
				break;
			}
			if (intersect(g->ndim, use[j]->global_offset,
				      use[j]->shape, t->global_offset,
				      t->shape, io, is)) {
				ckpt_shape_format(g->ndim, use[j]->global_offset,
						  a, sizeof(a));
				ckpt_shape_format(g->ndim, t->global_offset, b,
						  sizeof(b));
				util_msg(msg, msg_len, "tensor '%s' of step "
					 "%llu: the slices of rank %u (at %s) "
					 "and rank %u (at %s) overlap without "
					 "being the same region (a damaged or "
					 "mixed checkpoint)", t->name,
					 (unsigned long long)r->step,
					 use[j]->rank, a, t->rank, b);
				rc = -EBADMSG;
				break;
			}
		}
		if (!rc && j == nu)
			use[nu++] = t;
	}
	for (uint32_t j = 0; j < nu && !rc; j++) {
		int64_t io[CKPT_NDIM_MAX], is[CKPT_NDIM_MAX];

		intersect(g->ndim, use[j]->global_offset, use[j]->shape, o, s,
			  io, is);
		got += volume(g->ndim, is);
	}
	if (!rc && got != want) {
		ckpt_shape_format(g->ndim, s, a, sizeof(a));
		ckpt_shape_format(g->ndim, o, b, sizeof(b));
		util_msg(msg, msg_len, "tensor '%s' of step %llu: %llu of the "
			 "%llu elements of the region %s at %s are in no "
			 "rank's slice (%u slices saved): a rank's shard of "
			 "that step is missing from the manifest or the slices "
			 "never covered it", name, (unsigned long long)r->step,
			 (unsigned long long)(want - got),
			 (unsigned long long)want, a, b, n);
		rc = -ENOENT;
	}
	for (uint32_t j = 0; j < nu && !rc; j++) {
		const struct ckpt_tensor_info *t = use[j];
		int64_t io[CKPT_NDIM_MAX], is[CKPT_NDIM_MAX];

		intersect(g->ndim, t->global_offset, t->shape, o, s, io, is);
		if (nu == 1 &&
		    !memcmp(t->global_offset, o, g->ndim * sizeof(*o)) &&
		    !memcmp(t->shape, s, g->ndim * sizeof(*s))) {
			/* the region is this record: straight into buf */
			rc = ckpt_reader_read(r, t, buf, t->size_bytes, msg,
					      msg_len);
			break;
		}
		if (t->size_bytes > tmp_len) {
			unsigned char *nt = realloc(tmp, t->size_bytes);

			if (!nt) {
				util_msg(msg, msg_len, "tensor '%s': no memory "
					 "for its slice of %llu bytes", t->name,
					 (unsigned long long)t->size_bytes);
				rc = -ENOMEM;
				break;
			}
			tmp = nt;
			tmp_len = t->size_bytes;
		}
		rc = ckpt_reader_read(r, t, tmp, t->size_bytes, msg, msg_len);
		if (!rc)
			copy_box(g->ndim, es, io, is, tmp, t->global_offset,
				 t->shape, buf, o, s);
	}
	free(tmp);
	free(use);
	return rc;
}

int ckpt_reader_read_region(struct ckpt_reader *r, const char *name,
			    const int64_t *offset, const int64_t *shape,
			    void *buf, uint64_t buf_bytes, char *msg,
			    size_t msg_len)
{
	int64_t zero[CKPT_NDIM_MAX] = { 0 }, o[CKPT_NDIM_MAX],
		s[CKPT_NDIM_MAX];
	const struct ckpt_tensor_info *t = NULL;
	struct ckpt_global_info g;
	uint32_t first, n;
	char a[256], b[256], w[256];
	int rc;

	util_msg(msg, msg_len, "%s", "");
	if (!name) {
		util_msg(msg, msg_len, "no tensor name");
		return -EINVAL;
	}
	rc = global_of(r, name, &g, &first, &n, msg, msg_len);
	if (rc)
		return rc;
	/* the caller's arrays have the tensor's ndim values, no more */
	memset(o, 0, sizeof(o));
	memcpy(s, g.shape, sizeof(s));
	if (offset && shape)
		for (unsigned d = 0; d < g.ndim; d++) {
			o[d] = offset[d];
			s[d] = shape[d];
		}
	if (!offset != !shape) {
		util_msg(msg, msg_len, "tensor '%s': a region needs both its "
			 "offset and its shape", name);
		return -EINVAL;
	}
	for (unsigned d = 0; d < g.ndim; d++) {
		if (o[d] < 0 || s[d] < 0 || o[d] > g.shape[d] ||
		    s[d] > g.shape[d] - o[d]) {
			ckpt_shape_format(g.ndim, s, a, sizeof(a));
			ckpt_shape_format(g.ndim, o, b, sizeof(b));
			ckpt_shape_format(g.ndim, g.shape, w, sizeof(w));
			util_msg(msg, msg_len, "tensor '%s': the region %s at "
				 "%s does not lie inside its shape %s "
				 "(dimension %u)", name, a, b, w, d);
			return -EINVAL;
		}
	}
	if (volume(g.ndim, s) * ckpt_dtype_size(g.dtype) != buf_bytes) {
		ckpt_shape_format(g.ndim, s, a, sizeof(a));
		util_msg(msg, msg_len, "wrong buffer size for tensor '%s' of "
			 "step %llu: the region %s of %s is %llu bytes; the "
			 "buffer is %llu bytes", name,
			 (unsigned long long)r->step, a,
			 ckpt_dtype_name(g.dtype),
			 (unsigned long long)(volume(g.ndim, s) *
					      ckpt_dtype_size(g.dtype)),
			 (unsigned long long)buf_bytes);
		return -EINVAL;
	}
	if (g.flags & CKPT_TENSOR_SLICE)
		return read_slices(r, name, &g, first, n, o, s, buf, msg,
				   msg_len);
	/* A whole tensor: one copy, this rank's when it has one. */
	for (uint32_t k = 0; k < n; k++) {
		const struct ckpt_tensor_info *x =
			&r->m.tensors[r->by_name[first + k]];

		if (!t || x->rank == r->c->rank)
			t = x;
	}
	if (n > 1 && !g.flags && r->m.world_size == r->c->world &&
	    t->rank != r->c->rank) {
		util_msg(msg, msg_len, "tensor '%s' of step %llu was saved by "
			 "%u ranks, each its own, but not by rank %u", name,
			 (unsigned long long)r->step, n, r->c->rank);
		return -ENOENT;
	}
	if (n > 1 && !g.flags && r->m.world_size != r->c->world) {
		util_msg(msg, msg_len, "tensor '%s' of step %llu was saved by "
			 "%u ranks, each its own (no global offsets, not "
			 "replicated), and this job has %u ranks against the "
			 "checkpoint's %u: it cannot be resharded; load it with "
			 "%u ranks, or save it with ckpt_add_slice (or "
			 "CKPT_ADD_REPLICATED when every rank has the same "
			 "bytes)", name, (unsigned long long)r->step, n,
			 r->c->world, r->m.world_size, r->m.world_size);
		return -EINVAL;
	}
	if (volume(g.ndim, s) == volume(g.ndim, g.shape))
		return ckpt_reader_read(r, t, buf, buf_bytes, msg, msg_len);
	{
		unsigned char *tmp = malloc(t->size_bytes ? t->size_bytes : 1);

		if (!tmp)
			return -ENOMEM;
		rc = ckpt_reader_read(r, t, tmp, t->size_bytes, msg, msg_len);
		if (!rc && g.ndim)
			copy_box(g.ndim, ckpt_dtype_size(g.dtype), o, s, tmp,
				 zero, g.shape, buf, o, s);
		free(tmp);
	}
	return rc;
}
