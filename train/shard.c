/* SPDX-License-Identifier: MIT */
/*
 * shard.c - token shards: our format (FMTOKENS) written and read, llm.c's
 * .bin (version 1, uint16 tokens) read, and the checks both go through:
 * magic, header checksum, version, exact file size, payload checksum and
 * every token below the vocabulary.  The layouts are in
 * docs/token-shard-format.md; this file is their only reader and writer.
 * The loader (loader.c) reads headers here and runs the whole-shard check
 * on its own buffers.  Checksums are CRC32C (util_crc32c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"

#define CHECK_BUF_BYTES (1u << 20)
#define WRITE_BUF_BYTES (1u << 20)

/* Header fields (docs/token-shard-format.md). */
#define H_MAGIC 0
#define H_VERSION 8
#define H_HDR_BYTES 12
#define H_DTYPE 16
#define H_VOCAB 20
#define H_NTOKENS 24
#define H_PAYLOAD_CRC 32
#define H_FLAGS 36
#define H_CRC (TRAIN_SHARD_HEADER_BYTES - 4)

/* ---- tokens ---- */

int train_tokens_scan(const unsigned char *p, uint64_t n,
		      enum train_dtype dt, uint32_t limit,
		      uint64_t *bad_index, uint32_t *bad_token)
{
	uint32_t max = 0;

	/* A branch-free maximum first (the common case: all good), then
	 * the slow search only when something is out of range. */
	if (dt == TRAIN_U16) {
		for (uint64_t i = 0; i < n; i++) {
			uint32_t t = (uint32_t)p[2 * i] |
				     (uint32_t)p[2 * i + 1] << 8;

			max = t > max ? t : max;
		}
	} else {
		for (uint64_t i = 0; i < n; i++) {
			uint32_t t = util_get32le(p + 4 * i);

			max = t > max ? t : max;
		}
	}
	if (n == 0 || max < limit)
		return 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t t = dt == TRAIN_U16 ? (uint32_t)p[2 * i] |
					       (uint32_t)p[2 * i + 1] << 8
					     : util_get32le(p + 4 * i);

		if (t >= limit) {
			*bad_index = i;
			*bad_token = t;
			break;
		}
	}
	return -ERANGE;
}

void train_tokens_decode(const unsigned char *p, uint64_t n,
			 enum train_dtype dt, int32_t *out)
{
	if (dt == TRAIN_U16)
		for (uint64_t i = 0; i < n; i++)
			out[i] = (int32_t)((uint32_t)p[2 * i] |
					   (uint32_t)p[2 * i + 1] << 8);
	else
		for (uint64_t i = 0; i < n; i++)
			out[i] = (int32_t)util_get32le(p + 4 * i);
}

uint32_t train_token_limit(const struct train_shard_info *info,
			   uint32_t model_vocab)
{
	uint32_t limit = model_vocab ? model_vocab : UINT32_MAX;

	if (info->vocab_size && info->vocab_size < limit)
		limit = info->vocab_size;
	/* Tokens reach the trainer as int32. */
	return limit > INT32_MAX ? INT32_MAX : limit;
}

int train_range_error(const char *path, const struct train_shard_info *info,
		      uint32_t model_vocab, uint64_t idx, uint32_t token,
		      char *msg, size_t msg_len)
{
	if (info->vocab_size && token >= info->vocab_size) {
		util_msg(msg, msg_len, "%s: token %u at index %llu is not "
			 "below the shard's own vocabulary size %u: the "
			 "shard is corrupt", path, token,
			 (unsigned long long)idx, info->vocab_size);
		return -EBADMSG;
	}
	if (model_vocab && token >= model_vocab) {
		util_msg(msg, msg_len, "%s: token %u at index %llu is not "
			 "below the model's vocabulary size %u (data "
			 "tokenized for another model?)", path, token,
			 (unsigned long long)idx, model_vocab);
		return -ERANGE;
	}
	util_msg(msg, msg_len, "%s: token %u at index %llu does not fit "
		 "in a 31-bit token id", path, token,
		 (unsigned long long)idx);
	return -ERANGE;
}

/* ---- headers ---- */

static int parse_llmc(const unsigned char *hdr, size_t have,
		      uint64_t file_bytes, const char *path,
		      struct train_shard_info *out, char *msg, size_t msg_len)
{
	uint32_t version, count;
	uint64_t want;

	if (have < TRAIN_LLMC_HEADER_BYTES) {
		util_msg(msg, msg_len, "%s: truncated llm.c shard: %llu "
			 "bytes, shorter than its %u-byte header", path,
			 (unsigned long long)file_bytes,
			 TRAIN_LLMC_HEADER_BYTES);
		return -EBADMSG;
	}
	version = util_get32le(hdr + 4);
	if (version != TRAIN_LLMC_VERSION) {
		util_msg(msg, msg_len, "%s: llm.c shard version %u; fmtrain "
			 "reads llm.c version %u (uint16 tokens) only", path,
			 version, TRAIN_LLMC_VERSION);
		return -EPROTONOSUPPORT;
	}
	count = util_get32le(hdr + 8);
	want = TRAIN_LLMC_HEADER_BYTES + 2ull * count;
	if (file_bytes != want) {
		util_msg(msg, msg_len, "%s: %s llm.c shard: %llu bytes, the "
			 "header says %u + %u tokens x 2 bytes = %llu", path,
			 file_bytes < want ? "truncated" : "oversized",
			 (unsigned long long)file_bytes,
			 TRAIN_LLMC_HEADER_BYTES, count,
			 (unsigned long long)want);
		return -EBADMSG;
	}
	memset(out, 0, sizeof(*out));
	out->kind = TRAIN_SHARD_LLMC;
	out->version = version;
	out->dtype = TRAIN_U16;
	out->ntokens = count;
	out->data_offset = TRAIN_LLMC_HEADER_BYTES;
	out->file_bytes = file_bytes;
	return 0;
}

int train_shard_parse(const unsigned char *hdr, size_t have,
		      uint64_t file_bytes, const char *path,
		      struct train_shard_info *out, char *msg, size_t msg_len)
{
	uint32_t stored, crc, version, hdr_bytes, dt, vocab;
	uint64_t n, want;

	if (have >= 4 && util_get32le(hdr) == TRAIN_LLMC_MAGIC)
		return parse_llmc(hdr, have, file_bytes, path, out, msg,
				  msg_len);
	if (have < 8 || memcmp(hdr + H_MAGIC, TRAIN_SHARD_MAGIC, 8)) {
		util_msg(msg, msg_len, "%s: not a token shard (%s; expected "
			 "magic %s or llm.c's %u)", path,
			 have < 8 ? "shorter than a magic number"
				   : "bad magic", TRAIN_SHARD_MAGIC,
			 TRAIN_LLMC_MAGIC);
		return -EBADMSG;
	}
	if (have < TRAIN_SHARD_HEADER_BYTES) {
		util_msg(msg, msg_len, "%s: truncated: %llu bytes, shorter "
			 "than the %u-byte shard header", path,
			 (unsigned long long)file_bytes,
			 TRAIN_SHARD_HEADER_BYTES);
		return -EBADMSG;
	}
	stored = util_get32le(hdr + H_CRC);
	crc = util_crc32c(0, hdr, H_CRC);
	if (stored != crc) {
		util_msg(msg, msg_len, "%s: header checksum mismatch (stored "
			 "0x%08x, computed 0x%08x): the header is corrupt",
			 path, stored, crc);
		return -EBADMSG;
	}
	version = util_get32le(hdr + H_VERSION);
	if (version != TRAIN_SHARD_VERSION) {
		util_msg(msg, msg_len, "%s: token-shard format version %u; "
			 "this fmtrain reads version %u only (written by a "
			 "newer fmtrain: upgrade to read it)", path, version,
			 TRAIN_SHARD_VERSION);
		return -EPROTONOSUPPORT;
	}
	hdr_bytes = util_get32le(hdr + H_HDR_BYTES);
	dt = util_get32le(hdr + H_DTYPE);
	vocab = util_get32le(hdr + H_VOCAB);
	n = util_get64le(hdr + H_NTOKENS);
	if (hdr_bytes != TRAIN_SHARD_HEADER_BYTES ||
	    (dt != TRAIN_U16 && dt != TRAIN_U32) || vocab == 0 ||
	    (dt == TRAIN_U16 && vocab > 65536) ||
	    util_get32le(hdr + H_FLAGS) != 0 || n > (UINT64_MAX >> 3)) {
		util_msg(msg, msg_len, "%s: impossible header (header size "
			 "%u, token size %u, vocabulary %u, %llu tokens): "
			 "the shard is corrupt", path, hdr_bytes, dt, vocab,
			 (unsigned long long)n);
		return -EBADMSG;
	}
	want = TRAIN_SHARD_HEADER_BYTES + n * dt;
	if (file_bytes != want) {
		util_msg(msg, msg_len, "%s: %s: %llu bytes, the header says "
			 "%u + %llu tokens x %u bytes = %llu", path,
			 file_bytes < want ? "truncated" : "trailing bytes",
			 (unsigned long long)file_bytes,
			 TRAIN_SHARD_HEADER_BYTES, (unsigned long long)n, dt,
			 (unsigned long long)want);
		return -EBADMSG;
	}
	memset(out, 0, sizeof(*out));
	out->kind = TRAIN_SHARD_FMFS;
	out->version = version;
	out->dtype = (enum train_dtype)dt;
	out->vocab_size = vocab;
	out->ntokens = n;
	out->data_offset = TRAIN_SHARD_HEADER_BYTES;
	out->file_bytes = file_bytes;
	out->has_crc = true;
	out->payload_crc = util_get32le(hdr + H_PAYLOAD_CRC);
	return 0;
}

/* pread until len bytes or the end of the file; returns bytes or -errno. */
int train_shard_info_fd(int fd, const char *path,
			struct train_shard_info *out, char *msg,
			size_t msg_len)
{
	unsigned char hdr[TRAIN_SHARD_HEADER_BYTES];
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st)) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		util_msg(msg, msg_len, "%s: not a regular file", path);
		return -EINVAL;
	}
	n = util_pread_all(fd, hdr, sizeof(hdr), 0);
	if (n < 0) {
		util_msg(msg, msg_len, "%s: reading the header: %s", path,
			 strerror((int)-n));
		return -EIO;
	}
	return train_shard_parse(hdr, (size_t)n, (uint64_t)st.st_size, path,
				 out, msg, msg_len);
}

int train_shard_info(const char *path, struct train_shard_info *out,
		     char *msg, size_t msg_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc;

	if (fd < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", path, strerror(e));
		return -e;
	}
	rc = train_shard_info_fd(fd, path, out, msg, msg_len);
	close(fd);
	return rc;
}

/* ---- whole-shard check ---- */

int train_shard_check_fd(int fd, const char *path,
			 const struct train_shard_info *info,
			 uint32_t model_vocab, unsigned char *buf,
			 size_t buf_bytes, const atomic_bool *cancel,
			 uint64_t *bytes_read, uint64_t *reads, char *msg,
			 size_t msg_len)
{
	uint64_t total = info->ntokens * info->dtype, done = 0;
	uint32_t limit = train_token_limit(info, model_vocab), crc = 0;
	size_t step = buf_bytes - buf_bytes % info->dtype;

	if (step > TRAIN_READ_CHUNK_BYTES)
		step = TRAIN_READ_CHUNK_BYTES;
	while (done < total) {
		size_t len = total - done < step ? (size_t)(total - done)
						 : step;
		ssize_t n;
		uint64_t bad_i = 0;
		uint32_t bad_t = 0;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		n = util_pread_all(fd, buf, len, info->data_offset + done);
		if (reads)
			(*reads)++;
		if (n < 0) {
			util_msg(msg, msg_len, "%s: read error at offset %llu:"
				 " %s", path, (unsigned long long)(
				 info->data_offset + done), strerror((int)-n));
			return -EIO;
		}
		if (bytes_read)
			*bytes_read += (uint64_t)n;
		if ((size_t)n < len) {
			util_msg(msg, msg_len, "%s: truncated: the file ended "
				 "at %llu bytes, the header says %llu", path,
				 (unsigned long long)(info->data_offset +
						       done + (uint64_t)n),
				 (unsigned long long)info->file_bytes);
			return -EBADMSG;
		}
		if (info->has_crc)
			crc = util_crc32c(crc, buf, len);
		if (train_tokens_scan(buf, len / info->dtype, info->dtype,
				      limit, &bad_i, &bad_t))
			return train_range_error(path, info, model_vocab,
						 done / info->dtype + bad_i,
						 bad_t, msg, msg_len);
		done += len;
	}
	if (info->has_crc && crc != info->payload_crc) {
		util_msg(msg, msg_len, "%s: payload checksum mismatch (header "
			 "says 0x%08x, the tokens give 0x%08x): the shard is "
			 "corrupt", path, info->payload_crc, crc);
		return -EBADMSG;
	}
	return 0;
}

static int verify_open(const char *path, uint32_t model_vocab,
		       struct train_shard_info *info, int *fdp, char *msg,
		       size_t msg_len)
{
	unsigned char *buf;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", path, strerror(e));
		return -e;
	}
	rc = train_shard_info_fd(fd, path, info, msg, msg_len);
	if (!rc && !(buf = malloc(CHECK_BUF_BYTES)))
		rc = -ENOMEM;
	if (!rc) {
		rc = train_shard_check_fd(fd, path, info, model_vocab, buf,
					  CHECK_BUF_BYTES, NULL, NULL, NULL,
					  msg, msg_len);
		free(buf);
	} else if (rc == -ENOMEM) {
		util_msg(msg, msg_len, "%s: out of memory", path);
	}
	if (rc) {
		close(fd);
		return rc;
	}
	*fdp = fd;
	return 0;
}

int train_shard_verify(const char *path, uint32_t model_vocab,
		       struct train_shard_info *out, char *msg,
		       size_t msg_len)
{
	struct train_shard_info info;
	int fd, rc;

	rc = verify_open(path, model_vocab, &info, &fd, msg, msg_len);
	if (rc)
		return rc;
	close(fd);
	if (out)
		*out = info;
	return 0;
}

int train_shard_read(const char *path, uint32_t model_vocab,
		     uint32_t **tokens, uint64_t *ntokens,
		     struct train_shard_info *info, char *msg, size_t msg_len)
{
	struct train_shard_info si;
	unsigned char *raw;
	uint32_t *t;
	uint64_t bytes;
	ssize_t n;
	int fd, rc;

	rc = verify_open(path, model_vocab, &si, &fd, msg, msg_len);
	if (rc)
		return rc;
	bytes = si.ntokens * si.dtype;
	t = malloc(si.ntokens ? si.ntokens * sizeof(*t) : 1);
	raw = malloc(bytes ? bytes : 1);
	if (!t || !raw || bytes > SIZE_MAX / 2) {
		free(t);
		free(raw);
		close(fd);
		util_msg(msg, msg_len, "%s: no memory for %llu tokens", path,
			 (unsigned long long)si.ntokens);
		return -ENOMEM;
	}
	/* Verified a moment ago; read again and check the CRC once more,
	 * as the file may have changed between the two reads. */
	n = util_pread_all(fd, raw, bytes, si.data_offset);
	close(fd);
	if (n != (ssize_t)bytes ||
	    (si.has_crc && util_crc32c(0, raw, bytes) != si.payload_crc)) {
		free(t);
		free(raw);
		util_msg(msg, msg_len, "%s: changed while being read", path);
		return -EIO;
	}
	train_tokens_decode(raw, si.ntokens, si.dtype, (int32_t *)t);
	free(raw);
	*tokens = t;
	*ntokens = si.ntokens;
	if (info)
		*info = si;
	return 0;
}

/* ---- writer ---- */

struct train_shard_writer {
	int fd;
	enum train_dtype dtype;
	uint32_t vocab;
	uint64_t n;              /* tokens appended */
	uint32_t crc;            /* of the payload written so far */
	int err;                 /* sticky: only abort is left */
	size_t used;             /* bytes in buf */
	char *path, *tmp;
	unsigned char buf[WRITE_BUF_BYTES];
};

static int writer_flush(struct train_shard_writer *w, char *msg,
			size_t msg_len)
{
	uint64_t off = TRAIN_SHARD_HEADER_BYTES + w->n * w->dtype - w->used;
	int rc;

	if (!w->used)
		return 0;
	w->crc = util_crc32c(w->crc, w->buf, w->used);
	rc = util_pwrite_all(w->fd, w->buf, w->used, off);
	w->used = 0;
	if (rc) {
		util_msg(msg, msg_len, "%s: write: %s", w->tmp,
			 strerror(-rc));
		w->err = rc;
	}
	return rc;
}

int train_shard_writer_open(const char *path, enum train_dtype dtype,
			    uint32_t vocab_size,
			    struct train_shard_writer **out, char *msg,
			    size_t msg_len)
{
	struct train_shard_writer *w;
	size_t plen;

	if (!path || !*path || (dtype != TRAIN_U16 && dtype != TRAIN_U32) ||
	    vocab_size == 0 || (dtype == TRAIN_U16 && vocab_size > 65536)) {
		util_msg(msg, msg_len, "%s: a shard needs a token size of 2 "
			 "or 4 bytes and a vocabulary of 1 to %s tokens "
			 "(given %d bytes, %u tokens)", path ? path : "(null)",
			 dtype == TRAIN_U16 ? "65536" : "2^32-1", (int)dtype,
			 vocab_size);
		return -EINVAL;
	}
	w = calloc(1, sizeof(*w));
	plen = strlen(path);
	if (!w || !(w->path = strdup(path)) ||
	    !(w->tmp = malloc(plen + 32))) {
		if (w)
			free(w->path);
		free(w);
		util_msg(msg, msg_len, "%s: out of memory", path);
		return -ENOMEM;
	}
	snprintf(w->tmp, plen + 32, "%s.tmp-%ld", path, (long)getpid());
	w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", w->tmp, strerror(e));
		free(w->tmp);
		free(w->path);
		free(w);
		return -e;
	}
	w->dtype = dtype;
	w->vocab = vocab_size;
	*out = w;
	return 0;
}

int train_shard_writer_append(struct train_shard_writer *w,
			      const uint32_t *tokens, size_t n, char *msg,
			      size_t msg_len)
{
	if (w->err) {
		util_msg(msg, msg_len, "%s: the writer failed before; abort "
			 "it", w->path);
		return w->err;
	}
	for (size_t i = 0; i < n; i++) {
		if (tokens[i] >= w->vocab) {
			util_msg(msg, msg_len, "%s: token %u (at index %llu) "
				 "is not below the vocabulary size %u",
				 w->path, tokens[i],
				 (unsigned long long)w->n, w->vocab);
			w->err = -ERANGE;
			return -ERANGE;
		}
		if (w->used + w->dtype > sizeof(w->buf) &&
		    writer_flush(w, msg, msg_len))
			return w->err;
		if (w->dtype == TRAIN_U16) {
			w->buf[w->used] = (unsigned char)tokens[i];
			w->buf[w->used + 1] = (unsigned char)(tokens[i] >> 8);
		} else {
			util_put32le(w->buf + w->used, tokens[i]);
		}
		w->used += w->dtype;
		w->n++;
	}
	return 0;
}

uint64_t train_shard_writer_count(const struct train_shard_writer *w)
{
	return w->n;
}

void train_shard_writer_abort(struct train_shard_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlink(w->tmp);
	free(w->tmp);
	free(w->path);
	free(w);
}

/* fsync of the directory holding path, so the rename is durable. */
static void sync_parent(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd); /* best effort: not every file system can */
		close(fd);
	}
}

int train_shard_writer_close(struct train_shard_writer *w, char *msg,
			     size_t msg_len)
{
	unsigned char hdr[TRAIN_SHARD_HEADER_BYTES];
	int rc = w->err;

	if (rc) {
		util_msg(msg, msg_len, "%s: the writer failed before; nothing "
			 "written", w->path);
		train_shard_writer_abort(w);
		return rc;
	}
	if ((rc = writer_flush(w, msg, msg_len))) {
		train_shard_writer_abort(w);
		return rc;
	}
	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr + H_MAGIC, TRAIN_SHARD_MAGIC, 8);
	util_put32le(hdr + H_VERSION, TRAIN_SHARD_VERSION);
	util_put32le(hdr + H_HDR_BYTES, TRAIN_SHARD_HEADER_BYTES);
	util_put32le(hdr + H_DTYPE, (uint32_t)w->dtype);
	util_put32le(hdr + H_VOCAB, w->vocab);
	util_put64le(hdr + H_NTOKENS, w->n);
	util_put32le(hdr + H_PAYLOAD_CRC, w->crc);
	util_put32le(hdr + H_CRC, util_crc32c(0, hdr, H_CRC));
	rc = util_pwrite_all(w->fd, hdr, sizeof(hdr), 0);
	if (!rc && fsync(w->fd))
		rc = -errno;
	if (!rc && rename(w->tmp, w->path))
		rc = -errno;
	if (rc) {
		util_msg(msg, msg_len, "%s: %s", w->path, strerror(-rc));
		train_shard_writer_abort(w);
		return rc;
	}
	sync_parent(w->path);
	close(w->fd);
	free(w->tmp);
	free(w->path);
	free(w);
	return 0;
}

int train_shard_write(const char *path, enum train_dtype dtype,
		      uint32_t vocab_size, const uint32_t *tokens,
		      uint64_t ntokens, char *msg, size_t msg_len)
{
	struct train_shard_writer *w;
	int rc;

	rc = train_shard_writer_open(path, dtype, vocab_size, &w, msg,
				     msg_len);
	if (rc)
		return rc;
	if (ntokens > SIZE_MAX) {
		train_shard_writer_abort(w);
		return -EINVAL;
	}
	rc = train_shard_writer_append(w, tokens, (size_t)ntokens, msg,
				       msg_len);
	if (rc) {
		train_shard_writer_abort(w);
		return rc;
	}
	return train_shard_writer_close(w, msg, msg_len);
}
