/* SPDX-License-Identifier: MIT */
/*
 * format.c - the bytes on disk: the manifest (and the per-rank "shard
 * done" marker, which has the manifest's layout with one shard), the
 * 4096-byte shard header, dtypes, and CRC32C with its combine operation.
 * Every layout here is the table in docs/checkpoint-format.md; all
 * integers are little-endian.
 *
 * Decoding trusts nothing: sizes are checked before any table is read,
 * the header checksum before the version (so a flipped bit reads as
 * corruption, not as a new version), the version before the rest (so a
 * newer format is refused by name), the whole-file checksum before the
 * tables, and then every count, name, shape and offset.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

static const char mf_magic[8] = { 'F', 'M', 'C', 'K', 'P', 'T', 'M', 'F' };
static const char mf_end[8] = { 'F', 'M', 'C', 'K', 'P', 'T', 'E', 'N' };
static const char sh_magic[8] = { 'F', 'M', 'C', 'K', 'P', 'T', 'S', 'H' };

static const struct {
	const char *name;
	size_t size;
} dtypes[CKPT_DTYPE_COUNT] = {
	[CKPT_BYTES] = { "bytes", 1 },
	[CKPT_F32] = { "f32", 4 },
	[CKPT_F16] = { "f16", 2 },
	[CKPT_BF16] = { "bf16", 2 },
	[CKPT_F64] = { "f64", 8 },
	[CKPT_F8_E4M3] = { "f8e4m3", 1 },
	[CKPT_F8_E5M2] = { "f8e5m2", 1 },
	[CKPT_I8] = { "i8", 1 },
	[CKPT_U8] = { "u8", 1 },
	[CKPT_I16] = { "i16", 2 },
	[CKPT_U16] = { "u16", 2 },
	[CKPT_I32] = { "i32", 4 },
	[CKPT_U32] = { "u32", 4 },
	[CKPT_I64] = { "i64", 8 },
	[CKPT_U64] = { "u64", 8 },
	[CKPT_BOOL] = { "bool", 1 },
};

const char *ckpt_dtype_name(enum ckpt_dtype dt)
{
	return (unsigned)dt < CKPT_DTYPE_COUNT ? dtypes[dt].name : "?";
}

size_t ckpt_dtype_size(enum ckpt_dtype dt)
{
	return (unsigned)dt < CKPT_DTYPE_COUNT ? dtypes[dt].size : 0;
}

int ckpt_dtype_parse(const char *name, enum ckpt_dtype *out)
{
	for (unsigned i = 0; i < CKPT_DTYPE_COUNT; i++) {
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum ckpt_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* ---- little-endian fields ---- */

/* ---- tensors ---- */

void ckpt_shape_format(unsigned ndim, const int64_t *shape, char *buf,
		       size_t len)
{
	size_t at = 0;

	at += (size_t)snprintf(buf, len, "[");
	for (unsigned i = 0; i < ndim && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%lld",
				       i ? ", " : "", (long long)shape[i]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
}

int ckpt_tensor_check(const char *name, enum ckpt_dtype dtype,
		      unsigned ndim, const int64_t *shape,
		      uint64_t size_bytes, char *msg, size_t msg_len)
{
	size_t nl = name ? strlen(name) : 0;
	unsigned __int128 n = 1;
	char sh[256];

	if (!nl || nl > CKPT_NAME_MAX) {
		util_msg(msg, msg_len, "tensor name '%.40s%s' must be 1 to %d "
			 "bytes", name ? name : "", nl > 40 ? "..." : "",
			 CKPT_NAME_MAX);
		return -EINVAL;
	}
	if ((unsigned)dtype >= CKPT_DTYPE_COUNT) {
		util_msg(msg, msg_len, "tensor '%s': unknown dtype %d", name,
			 (int)dtype);
		return -EINVAL;
	}
	if (ndim > CKPT_NDIM_MAX || (ndim && !shape)) {
		util_msg(msg, msg_len, "tensor '%s': %u dimensions (at most "
			 "%d)", name, ndim, CKPT_NDIM_MAX);
		return -EINVAL;
	}
	for (unsigned i = 0; i < ndim; i++) {
		if (shape[i] < 0) {
			util_msg(msg, msg_len, "tensor '%s': dimension %u is "
				 "negative (%lld)", name, i,
				 (long long)shape[i]);
			return -EINVAL;
		}
		n *= (uint64_t)shape[i];
		if (n > UINT64_MAX)
			n = (unsigned __int128)UINT64_MAX + 1;
	}
	n *= ckpt_dtype_size(dtype);
	if (n != size_bytes) {
		ckpt_shape_format(ndim, shape, sh, sizeof(sh));
		util_msg(msg, msg_len, "tensor '%s': %s %s needs %llu bytes "
			 "but %llu were given (wrong buffer size)", name,
			 ckpt_dtype_name(dtype), sh,
			 n > UINT64_MAX ? 0ull : (unsigned long long)n,
			 (unsigned long long)size_bytes);
		return -EINVAL;
	}
	return 0;
}

int ckpt_slice_check(const char *name, uint32_t tflags, unsigned ndim,
		     const int64_t *shape, const int64_t *gshape,
		     const int64_t *goff, char *msg, size_t msg_len)
{
	char a[256], b[256], g[256];

	if (tflags & ~(CKPT_TENSOR_SLICE | CKPT_TENSOR_REPLICATED) ||
	    tflags == (CKPT_TENSOR_SLICE | CKPT_TENSOR_REPLICATED)) {
		util_msg(msg, msg_len, "tensor '%s': unknown flags %#x", name,
			 tflags);
		return -EINVAL;
	}
	if (!(tflags & CKPT_TENSOR_SLICE)) {
		for (unsigned d = 0; d < CKPT_NDIM_MAX; d++)
			if (gshape[d] || goff[d]) {
				util_msg(msg, msg_len, "tensor '%s' has a "
					 "global shape but is no slice", name);
				return -EINVAL;
			}
		return 0;
	}
	if (!ndim) {
		util_msg(msg, msg_len, "tensor '%s': a slice needs at least "
			 "one dimension", name);
		return -EINVAL;
	}
	for (unsigned d = 0; d < CKPT_NDIM_MAX; d++) {
		bool bad = d >= ndim ? gshape[d] || goff[d] :
			   gshape[d] < 0 || goff[d] < 0 ||
			   goff[d] > gshape[d] ||
			   shape[d] > gshape[d] - goff[d];

		if (bad) {
			ckpt_shape_format(ndim, shape, a, sizeof(a));
			ckpt_shape_format(ndim, goff, b, sizeof(b));
			ckpt_shape_format(ndim, gshape, g, sizeof(g));
			util_msg(msg, msg_len, "tensor '%s': the slice %s at "
				 "offset %s does not lie inside the global "
				 "shape %s (dimension %u)", name, a, b, g, d);
			return -EINVAL;
		}
	}
	return 0;
}

/* ---- shard header ---- */

void ckpt_shard_header_encode(const struct ckpt_shard_header *h,
			      unsigned char *buf)
{
	memset(buf, 0, CKPT_SHARD_HEADER_BYTES);
	memcpy(buf, sh_magic, 8);
	util_put32le(buf + 8, CKPT_SHARD_VERSION);
	util_put32le(buf + 12, CKPT_SHARD_HEADER_BYTES);
	util_put64le(buf + 16, h->step);
	util_put32le(buf + 24, h->rank);
	util_put32le(buf + 28, h->world_size);
	util_put32le(buf + 32, h->ntensors);
	util_put32le(buf + 36, CKPT_ALIGN);
	util_put64le(buf + 40, h->file_bytes);
	memcpy(buf + 48, h->run_id, strnlen(h->run_id, CKPT_RUN_ID_MAX));
	util_put32le(buf + CKPT_SHARD_HEADER_BYTES - 4,
	      util_crc32c(0, buf, CKPT_SHARD_HEADER_BYTES - 4));
}

int ckpt_shard_header_decode(const unsigned char *buf, size_t len,
			     const char *what, struct ckpt_shard_header *h,
			     char *msg, size_t msg_len)
{
	uint32_t v;

	if (len < CKPT_SHARD_HEADER_BYTES) {
		util_msg(msg, msg_len, "%s: truncated (%zu bytes, shorter than "
			 "its %d-byte header)", what, len,
			 CKPT_SHARD_HEADER_BYTES);
		return -EBADMSG;
	}
	if (memcmp(buf, sh_magic, 8)) {
		util_msg(msg, msg_len, "%s: not an fmckpt shard (bad magic)",
			 what);
		return -EBADMSG;
	}
	if (util_get32le(buf + CKPT_SHARD_HEADER_BYTES - 4) !=
	    util_crc32c(0, buf, CKPT_SHARD_HEADER_BYTES - 4)) {
		util_msg(msg, msg_len, "%s: shard header checksum mismatch: "
			 "the shard is corrupt", what);
		return -EBADMSG;
	}
	v = util_get32le(buf + 8);
	if (v != CKPT_SHARD_VERSION) {
		util_msg(msg, msg_len, "%s: shard format version %u; this "
			 "fmckpt reads version %d only (upgrade fmckpt to "
			 "read it)", what, v, CKPT_SHARD_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (util_get32le(buf + 12) != CKPT_SHARD_HEADER_BYTES ||
	    util_get32le(buf + 36) != CKPT_ALIGN) {
		util_msg(msg, msg_len, "%s: shard header has an unexpected "
			 "size or alignment", what);
		return -EBADMSG;
	}
	memset(h, 0, sizeof(*h));
	h->step = util_get64le(buf + 16);
	h->rank = util_get32le(buf + 24);
	h->world_size = util_get32le(buf + 28);
	h->ntensors = util_get32le(buf + 32);
	h->file_bytes = util_get64le(buf + 40);
	memcpy(h->run_id, buf + 48, CKPT_RUN_ID_MAX);
	return 0;
}

/* ---- manifest ---- */

/* A tensor record's size in a manifest of version v. */
static size_t mf_tensor_bytes(uint32_t v)
{
	return v >= 2 ? CKPT_MF_TENSOR_BYTES_V2 : CKPT_MF_TENSOR_BYTES;
}

static size_t mf_size(uint32_t v, uint32_t nshards, uint32_t ntensors,
		      size_t strings)
{
	return CKPT_MF_HEADER_BYTES + (size_t)nshards * CKPT_MF_SHARD_BYTES +
	       (size_t)ntensors * mf_tensor_bytes(v) + strings +
	       CKPT_MF_TRAILER_BYTES;
}

int ckpt_mf_encode(const struct ckpt_manifest *m, unsigned char **out,
		   size_t *out_len)
{
	size_t strings = 0, total, at;
	unsigned char *b, *p;
	uint32_t str_off = 0, v = 1;

	/* The lowest version that holds it: a checkpoint without slices or
	 * replicated tensors stays readable by a version 1 fmckpt. */
	for (uint32_t i = 0; i < m->ntensors; i++) {
		strings += strlen(m->tensors[i].name) + 1;
		if (m->tensors[i].flags)
			v = 2;
	}
	strings = (strings + 7) & ~(size_t)7;
	total = mf_size(v, m->nshards, m->ntensors, strings);
	if (total > CKPT_MF_MAX_BYTES)
		return -EFBIG;
	b = calloc(1, total);
	if (!b)
		return -ENOMEM;
	memcpy(b, mf_magic, 8);
	util_put32le(b + 8, v);
	util_put32le(b + 12, m->kind);
	util_put64le(b + 16, m->step);
	util_put32le(b + 24, m->world_size);
	util_put32le(b + 28, m->nshards);
	util_put32le(b + 32, m->ntensors);
	util_put32le(b + 36, (uint32_t)strings);
	util_put64le(b + 40, (uint64_t)m->created_ns);
	util_put64le(b + 48, total);
	util_put32le(b + 56, 0);
	util_put32le(b + 60, util_crc32c(0, b, 60));
	p = b + CKPT_MF_HEADER_BYTES;
	for (uint32_t i = 0; i < m->nshards; i++, p += CKPT_MF_SHARD_BYTES) {
		const struct ckpt_mf_shard *s = &m->shards[i];

		util_put32le(p, s->rank);
		util_put32le(p + 4, s->ntensors);
		util_put64le(p + 8, s->file_bytes);
		util_put64le(p + 16, s->data_bytes);
		util_put32le(p + 24, s->crc32c);
		util_put32le(p + 28, s->first);
		memcpy(p + 32, s->run_id, strnlen(s->run_id, CKPT_RUN_ID_MAX));
	}
	at = CKPT_MF_HEADER_BYTES + (size_t)m->nshards * CKPT_MF_SHARD_BYTES +
	     (size_t)m->ntensors * mf_tensor_bytes(v);
	for (uint32_t i = 0; i < m->ntensors; i++, p += mf_tensor_bytes(v)) {
		const struct ckpt_tensor_info *t = &m->tensors[i];
		size_t nl = strlen(t->name);

		util_put32le(p, t->rank);
		util_put32le(p + 4, (uint32_t)t->dtype);
		util_put32le(p + 8, t->ndim);
		util_put32le(p + 12, t->crc32c);
		util_put64le(p + 16, t->offset);
		util_put64le(p + 24, t->size_bytes);
		util_put32le(p + 32, str_off);
		util_put32le(p + 36, (uint32_t)nl);
		for (unsigned d = 0; d < t->ndim; d++)
			util_put64le(p + 40 + 8 * d, (uint64_t)t->shape[d]);
		if (v >= 2) {
			util_put32le(p + 104, t->flags);
			for (unsigned d = 0; d < CKPT_NDIM_MAX; d++) {
				util_put64le(p + 112 + 8 * d,
					     (uint64_t)t->global_shape[d]);
				util_put64le(p + 176 + 8 * d,
					     (uint64_t)t->global_offset[d]);
			}
		}
		memcpy(b + at + str_off, t->name, nl);
		str_off += (uint32_t)nl + 1;
	}
	p = b + total - CKPT_MF_TRAILER_BYTES;
	util_put32le(p, util_crc32c(0, b, total - CKPT_MF_TRAILER_BYTES));
	memcpy(p + 8, mf_end, 8);
	*out = b;
	*out_len = total;
	return 0;
}

void ckpt_mf_release(struct ckpt_manifest *m)
{
	free(m->shards);
	free(m->tensors);
	memset(m, 0, sizeof(*m));
}

static int mf_check_header(const unsigned char *b, size_t len,
			   const char *what, uint32_t *version, char *msg,
			   size_t msg_len)
{
	uint32_t v;
	uint64_t total;

	if (len < CKPT_MF_HEADER_BYTES) {
		util_msg(msg, msg_len, "%s: truncated (%zu bytes; a manifest "
			 "has at least %d)", what, len,
			 CKPT_MF_HEADER_BYTES + CKPT_MF_TRAILER_BYTES);
		return -EBADMSG;
	}
	if (memcmp(b, mf_magic, 8)) {
		util_msg(msg, msg_len, "%s: not an fmckpt manifest (bad "
			 "magic)", what);
		return -EBADMSG;
	}
	if (util_get32le(b + 60) != util_crc32c(0, b, 60)) {
		util_msg(msg, msg_len, "%s: manifest header checksum "
			 "mismatch: the manifest is corrupt", what);
		return -EBADMSG;
	}
	v = util_get32le(b + 8);
	*version = v;
	if (v < 1 || v > CKPT_FORMAT_VERSION) {
		util_msg(msg, msg_len, "%s: manifest format version %u; this "
			 "fmckpt reads versions 1 to %d only (%s)", what, v,
			 CKPT_FORMAT_VERSION, v > CKPT_FORMAT_VERSION ?
			 "written by a newer fmckpt: upgrade to read it" :
			 "not a version fmckpt ever wrote");
		return -EPROTONOSUPPORT;
	}
	total = util_get64le(b + 48);
	if (total != len) {
		util_msg(msg, msg_len, "%s: %s (%zu bytes; its header says "
			 "%llu)", what, len < total ? "truncated" :
			 "has trailing bytes", len, (unsigned long long)total);
		return -EBADMSG;
	}
	if (memcmp(b + len - 8, mf_end, 8) ||
	    util_get32le(b + len - CKPT_MF_TRAILER_BYTES) !=
	    util_crc32c(0, b, len - CKPT_MF_TRAILER_BYTES)) {
		util_msg(msg, msg_len, "%s: manifest checksum mismatch: the "
			 "manifest is corrupt", what);
		return -EBADMSG;
	}
	return 0;
}

static int mf_decode_tensor(const unsigned char *p, uint32_t v,
			    const unsigned char *strs,
			    uint32_t strings, const char *what,
			    struct ckpt_tensor_info *t, char *msg,
			    size_t msg_len)
{
	uint32_t so = util_get32le(p + 32), sl = util_get32le(p + 36);
	char why[300];
	int rc;

	memset(t, 0, sizeof(*t));
	t->rank = util_get32le(p);
	t->dtype = (enum ckpt_dtype)util_get32le(p + 4);
	t->ndim = util_get32le(p + 8);
	t->crc32c = util_get32le(p + 12);
	t->offset = util_get64le(p + 16);
	t->size_bytes = util_get64le(p + 24);
	if (!sl || sl > CKPT_NAME_MAX || so > strings || sl >= strings - so ||
	    memchr(strs + so, 0, sl)) {
		util_msg(msg, msg_len, "%s: a tensor name is out of bounds "
			 "(corrupt manifest)", what);
		return -EBADMSG;
	}
	memcpy(t->name, strs + so, sl);
	t->name[sl] = '\0';
	if (t->ndim > CKPT_NDIM_MAX) {
		util_msg(msg, msg_len, "%s: tensor '%s' has %u dimensions "
			 "(corrupt manifest)", what, t->name, t->ndim);
		return -EBADMSG;
	}
	for (unsigned d = 0; d < t->ndim; d++)
		t->shape[d] = (int64_t)util_get64le(p + 40 + 8 * d);
	if (v >= 2) {
		t->flags = util_get32le(p + 104);
		for (unsigned d = 0; d < CKPT_NDIM_MAX; d++) {
			t->global_shape[d] =
				(int64_t)util_get64le(p + 112 + 8 * d);
			t->global_offset[d] =
				(int64_t)util_get64le(p + 176 + 8 * d);
		}
	}
	rc = ckpt_tensor_check(t->name, t->dtype, t->ndim, t->shape,
			       t->size_bytes, why, sizeof(why));
	if (!rc)
		rc = ckpt_slice_check(t->name, t->flags, t->ndim, t->shape,
				      t->global_shape, t->global_offset, why,
				      sizeof(why));
	if (rc) {
		util_msg(msg, msg_len, "%s: %s (corrupt manifest)", what, why);
		return -EBADMSG;
	}
	return 0;
}

static int cmp_name_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No name twice in one shard: sorted, then neighbours compared. */
static int check_unique(const struct ckpt_tensor_info *t, uint32_t n,
			const char *what, char *msg, size_t msg_len)
{
	const char **names;
	int rc = 0;

	if (n < 2)
		return 0;
	names = malloc(n * sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		names[i] = t[i].name;
	qsort(names, n, sizeof(*names), cmp_name_ptr);
	for (uint32_t i = 1; i < n && !rc; i++) {
		if (!strcmp(names[i - 1], names[i])) {
			util_msg(msg, msg_len, "%s: tensor '%s' appears twice "
				 "in shard %u (corrupt manifest)", what,
				 names[i], t[0].rank);
			rc = -EBADMSG;
		}
	}
	free(names);
	return rc;
}

/* Shards sorted by rank, their tensors contiguous, ordered by offset,
 * inside the data part of the shard file. */
static int mf_check_tables(struct ckpt_manifest *m, const char *what,
			   char *msg, size_t msg_len)
{
	uint32_t next = 0;
	int rc;

	for (uint32_t i = 0; i < m->nshards; i++) {
		struct ckpt_mf_shard *s = &m->shards[i];
		uint64_t end = CKPT_SHARD_HEADER_BYTES, data = 0;

		if (s->rank >= m->world_size ||
		    (i && s->rank <= m->shards[i - 1].rank) ||
		    s->first != next || s->ntensors > m->ntensors - next ||
		    s->file_bytes < CKPT_SHARD_HEADER_BYTES) {
			util_msg(msg, msg_len, "%s: shard table entry %u is "
				 "inconsistent (corrupt manifest)", what, i);
			return -EBADMSG;
		}
		for (uint32_t k = 0; k < s->ntensors; k++) {
			struct ckpt_tensor_info *t = &m->tensors[next + k];

			if (t->rank != s->rank || t->offset < end ||
			    t->offset % CKPT_ALIGN ||
			    t->size_bytes > s->file_bytes ||
			    t->offset > s->file_bytes - t->size_bytes) {
				util_msg(msg, msg_len, "%s: tensor '%s' lies "
					 "outside its shard or overlaps another "
					 "(corrupt manifest)", what, t->name);
				return -EBADMSG;
			}
			end = t->offset + t->size_bytes;
			data += t->size_bytes;
		}
		rc = check_unique(m->tensors + s->first, s->ntensors, what,
				  msg, msg_len);
		if (rc)
			return rc;
		if (data != s->data_bytes) {
			util_msg(msg, msg_len, "%s: shard %u's data size does "
				 "not add up (corrupt manifest)", what,
				 s->rank);
			return -EBADMSG;
		}
		next += s->ntensors;
	}
	if (next != m->ntensors) {
		util_msg(msg, msg_len, "%s: tensors outside any shard "
			 "(corrupt manifest)", what);
		return -EBADMSG;
	}
	return 0;
}

int ckpt_mf_decode(const void *buf, size_t len, const char *what,
		   struct ckpt_manifest *m, char *msg, size_t msg_len)
{
	const unsigned char *b = buf, *p, *strs;
	uint32_t strings, v = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = mf_check_header(b, len, what, &v, msg, msg_len);
	if (rc)
		return rc;
	m->version = v;
	m->kind = util_get32le(b + 12);
	m->step = util_get64le(b + 16);
	m->world_size = util_get32le(b + 24);
	m->nshards = util_get32le(b + 28);
	m->ntensors = util_get32le(b + 32);
	strings = util_get32le(b + 36);
	m->created_ns = (int64_t)util_get64le(b + 40);
	if ((m->kind != CKPT_MF_KIND_MANIFEST && m->kind != CKPT_MF_KIND_RANK) ||
	    !m->world_size || m->world_size > CKPT_WORLD_MAX ||
	    m->nshards > m->world_size ||
	    m->ntensors > (uint64_t)CKPT_TENSORS_MAX * m->nshards ||
	    mf_size(v, m->nshards, m->ntensors, strings) != len) {
		util_msg(msg, msg_len, "%s: header counts do not match the "
			 "file size (corrupt manifest)", what);
		return -EBADMSG;
	}
	m->shards = calloc(m->nshards ? m->nshards : 1, sizeof(*m->shards));
	m->tensors = calloc(m->ntensors ? m->ntensors : 1,
			    sizeof(*m->tensors));
	if (!m->shards || !m->tensors) {
		ckpt_mf_release(m);
		util_msg(msg, msg_len, "%s: out of memory", what);
		return -ENOMEM;
	}
	p = b + CKPT_MF_HEADER_BYTES;
	for (uint32_t i = 0; i < m->nshards; i++, p += CKPT_MF_SHARD_BYTES) {
		struct ckpt_mf_shard *s = &m->shards[i];

		s->rank = util_get32le(p);
		s->ntensors = util_get32le(p + 4);
		s->file_bytes = util_get64le(p + 8);
		s->data_bytes = util_get64le(p + 16);
		s->crc32c = util_get32le(p + 24);
		s->first = util_get32le(p + 28);
		memcpy(s->run_id, p + 32, CKPT_RUN_ID_MAX);
	}
	strs = p + (size_t)m->ntensors * mf_tensor_bytes(v);
	for (uint32_t i = 0; i < m->ntensors; i++, p += mf_tensor_bytes(v)) {
		rc = mf_decode_tensor(p, v, strs, strings, what,
				      &m->tensors[i], msg, msg_len);
		if (rc)
			break;
	}
	if (!rc)
		rc = mf_check_tables(m, what, msg, msg_len);
	if (rc)
		ckpt_mf_release(m);
	return rc;
}

static int cmp_rank(const void *a, const void *b)
{
	const struct ckpt_manifest *x = a, *y = b;
	uint32_t ra = x->shards[0].rank, rb = y->shards[0].rank;

	return ra < rb ? -1 : ra > rb;
}

int ckpt_mf_merge(const struct ckpt_manifest *ranks, uint32_t n,
		  struct ckpt_manifest *out, char *msg, size_t msg_len)
{
	struct ckpt_manifest *sorted;
	uint32_t nt = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!n)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (ranks[i].kind != CKPT_MF_KIND_RANK ||
		    ranks[i].nshards != 1 || ranks[i].step != ranks[0].step ||
		    ranks[i].world_size != n) {
			util_msg(msg, msg_len, "shard marker %u does not belong "
				 "to step %llu with %u ranks", i,
				 (unsigned long long)ranks[0].step, n);
			return -EBADMSG;
		}
		nt += ranks[i].ntensors;
	}
	sorted = malloc(n * sizeof(*sorted));
	out->shards = calloc(n, sizeof(*out->shards));
	out->tensors = calloc(nt ? nt : 1, sizeof(*out->tensors));
	if (!sorted || !out->shards || !out->tensors) {
		free(sorted);
		ckpt_mf_release(out);
		return -ENOMEM;
	}
	memcpy(sorted, ranks, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_rank);
	out->kind = CKPT_MF_KIND_MANIFEST;
	out->step = ranks[0].step;
	out->world_size = n;
	out->nshards = n;
	out->ntensors = nt;
	nt = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (sorted[i].shards[0].rank != i) {
			util_msg(msg, msg_len, "shard of rank %u is missing "
				 "or doubled", i);
			free(sorted);
			ckpt_mf_release(out);
			return -EBADMSG;
		}
		if (sorted[i].created_ns > out->created_ns)
			out->created_ns = sorted[i].created_ns;
		out->shards[i] = sorted[i].shards[0];
		out->shards[i].first = nt;
		memcpy(out->tensors + nt, sorted[i].tensors,
		       sorted[i].ntensors * sizeof(*out->tensors));
		nt += sorted[i].ntensors;
	}
	free(sorted);
	rc = ckpt_mf_check_global(out, msg, msg_len);
	if (rc)
		ckpt_mf_release(out);
	return rc;
}
