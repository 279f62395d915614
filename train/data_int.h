/* SPDX-License-Identifier: MIT */
/*
 * data_int.h - what shard.c, tokenize.c and loader.c share and no other
 * module sees: the token scan and decode, the message for a token out
 * of range, and the whole-shard check on a caller's buffer (the loader
 * runs it on one of its span buffers).  Little-endian fields and message
 * formatting come from util/util.h.
 */
#ifndef FMFS_TRAIN_DATA_INT_H
#define FMFS_TRAIN_DATA_INT_H

#include <stdatomic.h>

#include "data.h"
#include "util/util.h"

/* Reads at most this much per pread, so a stop request is seen soon. */
#define TRAIN_READ_CHUNK_BYTES (16u << 20)

/* 0 if each of the n tokens at p (little-endian, dt) is below limit;
 * else -ERANGE with the first one that is not and its index. */
int train_tokens_scan(const unsigned char *p, uint64_t n,
		      enum train_dtype dt, uint32_t limit,
		      uint64_t *bad_index, uint32_t *bad_token);
/* The n tokens at p as int32 (every token was scanned below 2^31). */
void train_tokens_decode(const unsigned char *p, uint64_t n,
			 enum train_dtype dt, int32_t *out);
/* The token limit for a shard: its own vocabulary and the model's. */
uint32_t train_token_limit(const struct train_shard_info *info,
			   uint32_t model_vocab);
/* The message for token (at token index idx of path) not below the
 * limit; returns -EBADMSG when it breaks the shard's own vocabulary
 * (corruption), -ERANGE when only the model's. */
int train_range_error(const char *path, const struct train_shard_info *info,
		      uint32_t model_vocab, uint64_t idx, uint32_t token,
		      char *msg, size_t msg_len);

/* Parses a header (hdr holds the first have bytes of the file, have <=
 * 4096) of a file of file_bytes bytes. */
int train_shard_parse(const unsigned char *hdr, size_t have,
		      uint64_t file_bytes, const char *path,
		      struct train_shard_info *out, char *msg,
		      size_t msg_len);
/* Reads the header of the open file fd (path for messages). */
int train_shard_info_fd(int fd, const char *path,
			struct train_shard_info *out, char *msg,
			size_t msg_len);
/* Reads the whole payload of the open shard fd through buf (buf_bytes,
 * at least 4096) and checks its CRC32C and every token's range.  cancel
 * (may be NULL) set stops it with -ECANCELED.  *bytes_read and *reads
 * (may be NULL) are increased by what it read. */
int train_shard_check_fd(int fd, const char *path,
			 const struct train_shard_info *info,
			 uint32_t model_vocab, unsigned char *buf,
			 size_t buf_bytes, const atomic_bool *cancel,
			 uint64_t *bytes_read, uint64_t *reads, char *msg,
			 size_t msg_len);

#endif /* FMFS_TRAIN_DATA_INT_H */
