/* SPDX-License-Identifier: MIT */
/*
 * tokenize.c - the byte-level tokenizer: a byte of text is the token of
 * the same value (0..255), and TRAIN_BYTE_EOT (256) stands between two
 * documents; the vocabulary is 257.  Nothing is learned and nothing is
 * lost: any bytes (NUL, invalid UTF-8) round-trip.  train_tokenize_files
 * turns files into shards of our format (shard.c) with a fixed buffer, so
 * a corpus of any size tokenizes in constant memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_int.h"

#define READ_BYTES (1u << 20)
#define DEFAULT_SHARD_TOKENS 100000000ull

size_t train_tokenize_bytes(const void *text, size_t len, uint32_t *out)
{
	const unsigned char *p = text;

	for (size_t i = 0; i < len; i++)
		out[i] = p[i];
	return len;
}

int train_detokenize_bytes(const uint32_t *tokens, size_t n, void *out,
			   size_t *out_len, size_t *consumed)
{
	unsigned char *p = out;
	size_t i;

	for (i = 0; i < n; i++) {
		if (tokens[i] == TRAIN_BYTE_EOT) {
			*out_len = i;
			*consumed = i + 1;
			return 0;
		}
		if (tokens[i] > TRAIN_BYTE_EOT) {
			*out_len = i;
			*consumed = i;
			return -EINVAL;
		}
		p[i] = (unsigned char)tokens[i];
	}
	*out_len = n;
	*consumed = n;
	return 0;
}

/* Output side of train_tokenize_files: the shard being written, rolled
 * over every shard_tokens tokens. */
struct tok_out {
	const char *dir, *prefix;
	uint64_t shard_tokens;
	struct train_shard_writer *w;   /* NULL between shards */
	size_t shards;                  /* closed so far */
};

static int out_put(struct tok_out *o, const uint32_t *t, size_t n,
		   char *msg, size_t msg_len)
{
	while (n) {
		uint64_t room;
		size_t k;
		int rc;

		if (!o->w) {
			char path[PATH_MAX];

			if ((size_t)snprintf(path, sizeof(path),
					     "%s/%s_%06zu.bin", o->dir,
					     o->prefix, o->shards) >=
			    sizeof(path)) {
				util_msg(msg, msg_len, "%s: path too long",
					 o->dir);
				return -ENAMETOOLONG;
			}
			rc = train_shard_writer_open(path, TRAIN_U16,
						     TRAIN_BYTE_VOCAB, &o->w,
						     msg, msg_len);
			if (rc)
				return rc;
		}
		room = o->shard_tokens - train_shard_writer_count(o->w);
		k = n < room ? n : (size_t)room;
		rc = train_shard_writer_append(o->w, t, k, msg, msg_len);
		if (rc)
			return rc;
		t += k;
		n -= k;
		if (train_shard_writer_count(o->w) == o->shard_tokens) {
			rc = train_shard_writer_close(o->w, msg, msg_len);
			o->w = NULL;
			if (rc)
				return rc;
			o->shards++;
		}
	}
	return 0;
}

/* One document: its bytes, preceded by an EOT unless it is the first. */
static int tokenize_file(struct tok_out *o, const char *path, bool first,
			 unsigned char *buf, uint32_t *tok, char *msg,
			 size_t msg_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0) {
		int e = errno;

		util_msg(msg, msg_len, "%s: %s", path, strerror(e));
		return -e;
	}
	if (!first) {
		uint32_t eot = TRAIN_BYTE_EOT;

		rc = out_put(o, &eot, 1, msg, msg_len);
	}
	while (!rc) {
		ssize_t n = util_read_all(fd, buf, READ_BYTES);

		if (n < 0) {
			util_msg(msg, msg_len, "%s: read: %s", path,
				 strerror((int)-n));
			rc = -EIO;
			break;
		}
		if (n == 0)
			break;
		train_tokenize_bytes(buf, (size_t)n, tok);
		rc = out_put(o, tok, (size_t)n, msg, msg_len);
	}
	close(fd);
	return rc;
}

int train_tokenize_files(const char *const *inputs, size_t ninputs,
			 const char *out_dir, const char *prefix,
			 uint64_t shard_tokens, size_t *nshards, char *msg,
			 size_t msg_len)
{
	struct tok_out o = {
		.dir = out_dir, .prefix = prefix,
		.shard_tokens = shard_tokens ? shard_tokens
					     : DEFAULT_SHARD_TOKENS,
	};
	unsigned char *buf;
	uint32_t *tok;
	int rc = 0;

	if (!out_dir || !prefix || (ninputs && !inputs) ||
	    strchr(prefix, '/')) {
		util_msg(msg, msg_len, "tokenize: an output directory and a "
			 "prefix without '/' are needed");
		return -EINVAL;
	}
	buf = malloc(READ_BYTES);
	tok = malloc(READ_BYTES * sizeof(*tok));
	if (!buf || !tok) {
		free(buf);
		free(tok);
		util_msg(msg, msg_len, "tokenize: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < ninputs && !rc; i++)
		rc = tokenize_file(&o, inputs[i], i == 0, buf, tok, msg,
				   msg_len);
	if (!rc && o.w) {
		rc = train_shard_writer_close(o.w, msg, msg_len);
		o.w = NULL;
		if (!rc)
			o.shards++;
	}
	train_shard_writer_abort(o.w);
	free(buf);
	free(tok);
	if (nshards)
		*nshards = o.shards;
	return rc;
}
