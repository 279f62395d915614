/* SPDX-License-Identifier: MIT */
/*
 * data.h - the data side of fmtrain: token shards, a byte-level tokenizer
 * and a loader tuned to reading through an fmfs mount.
 *
 * Token shards.  A shard is a file of tokens: ours (magic FMTOKENS, a
 * 4096-byte header with dtype, count, vocabulary size and two CRC32Cs,
 * then the tokens, little-endian; written by train_shard_write and the
 * tokenizer) or llm.c's .bin (a 256 x int32 header, magic 20240520,
 * version 1, uint16 tokens), read only.  The byte layouts and the version
 * rule: docs/token-shard-format.md.
 *
 * Tokenizer.  Byte-level: each byte of text is a token 0..255, and token
 * 256 (TRAIN_BYTE_EOT) stands between documents; vocabulary 257.
 *
 * Loader.  Reads a list of shards (files or directories of *.bin) and
 * hands out batches of B rows of T+1 tokens (inputs are a row's first T,
 * targets its last T).  A background thread reads whole shards, or spans
 * of span_bytes of a larger one, with large page-aligned preads into a
 * fixed set of buffers allocated at open and reused (double-buffering:
 * memory is buffers x span size, whatever the data's size); the training
 * thread copies its rows out of them and waits only when the reader is
 * behind (counted as data wait).  Each epoch the shard order, the span
 * order within each shard and the sequence order within each span are
 * shuffled with a seeded generator; rank r of W takes the sequences whose
 * index in that shared order is r modulo W, so ranks see disjoint data and
 * every sequence of an epoch goes to exactly one rank.  Where a sequence
 * starts and what happens to the tokens that do not fill one: see
 * train_loader_info and docs/token-shard-format.md ("Loader").
 *
 * Errors.  Functions return 0 or a negative errno, and write a line a
 * person can act on into msg (msg_len bytes; msg may be NULL): the file,
 * what is wrong with it and, where there is one, what to do.  Codes:
 * -EINVAL a bad argument, -ENOENT no such file or no shard in a directory,
 * -EBADMSG a shard that is corrupt (bad magic, checksum, size, a token
 * not below the shard's own vocabulary), -EPROTONOSUPPORT a format
 * version this code does not read, -ERANGE a token not below the model's
 * vocabulary (or a writer given a token its dtype or vocabulary cannot
 * hold), -EIO a read or write that failed, -ENOMEM.
 */
#ifndef FMFS_TRAIN_DATA_H
#define FMFS_TRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- token shards (shard.c) ---- */

#define TRAIN_SHARD_VERSION 1          /* the one version we write and read */
#define TRAIN_SHARD_HEADER_BYTES 4096
#define TRAIN_SHARD_MAGIC "FMTOKENS"   /* 8 bytes, no NUL */
#define TRAIN_LLMC_MAGIC 20240520      /* llm.c header[0] */
#define TRAIN_LLMC_VERSION 1           /* llm.c header[1]: uint16 tokens */
#define TRAIN_LLMC_HEADER_BYTES 1024   /* 256 x int32 */

/* A token's size in a shard; the value is its size in bytes. */
enum train_dtype { TRAIN_U16 = 2, TRAIN_U32 = 4 };

enum train_shard_kind {
	TRAIN_SHARD_FMFS = 1,   /* ours: FMTOKENS */
	TRAIN_SHARD_LLMC = 2,   /* llm.c .bin, version 1 */
};

/* What a shard's header says, checked against the file's size. */
struct train_shard_info {
	enum train_shard_kind kind;
	uint32_t version;
	enum train_dtype dtype;
	uint32_t vocab_size;     /* tokens are below it; 0: not recorded
	                          * (llm.c) */
	uint64_t ntokens;
	uint64_t data_offset;    /* byte offset of the first token */
	uint64_t file_bytes;
	bool has_crc;            /* ours: payload_crc is meaningful */
	uint32_t payload_crc;    /* CRC32C of the token bytes */
};

/* Reads a shard's header, checks its magic, header checksum and version
 * (in that order) and that the file is exactly as long as the header
 * says.  Reads no token. */
int train_shard_info(const char *path, struct train_shard_info *out,
		     char *msg, size_t msg_len);

/* train_shard_info, then reads every token (1 MiB at a time): the payload
 * CRC32C must match, and every token must be below the shard's vocabulary
 * and below model_vocab (0: no model limit).  out may be NULL. */
int train_shard_verify(const char *path, uint32_t model_vocab,
		       struct train_shard_info *out, char *msg,
		       size_t msg_len);

/* train_shard_verify, and the tokens into *tokens (malloc'd, ntokens of
 * them; free() it).  For tools and tests: it holds the shard whole. */
int train_shard_read(const char *path, uint32_t model_vocab,
		     uint32_t **tokens, uint64_t *ntokens,
		     struct train_shard_info *info, char *msg, size_t msg_len);

/* Streaming writer of our format.  Tokens go to PATH.tmp-PID through a
 * fixed 1 MiB buffer; close writes the header, fsyncs and renames the
 * file to path, so path is never seen half written.  vocab_size: every
 * token must be below it (and below 65536 for TRAIN_U16, so at most
 * 65536).  A writer is used by one thread. */
struct train_shard_writer;
int train_shard_writer_open(const char *path, enum train_dtype dtype,
			    uint32_t vocab_size,
			    struct train_shard_writer **out, char *msg,
			    size_t msg_len);
/* Appends n tokens (copied).  -ERANGE names the first token that is not
 * below the vocabulary; the writer then refuses everything but abort. */
int train_shard_writer_append(struct train_shard_writer *w,
			      const uint32_t *tokens, size_t n, char *msg,
			      size_t msg_len);
/* Tokens appended so far. */
uint64_t train_shard_writer_count(const struct train_shard_writer *w);
/* Finishes the shard (header, fsync, rename into place) and frees w;
 * on an error nothing is left at path and w is freed all the same. */
int train_shard_writer_close(struct train_shard_writer *w, char *msg,
			     size_t msg_len);
/* Drops the temporary file and frees w.  NULL is a no-op. */
void train_shard_writer_abort(struct train_shard_writer *w);

/* open + append + close. */
int train_shard_write(const char *path, enum train_dtype dtype,
		      uint32_t vocab_size, const uint32_t *tokens,
		      uint64_t ntokens, char *msg, size_t msg_len);

/* ---- byte-level tokenizer (tokenize.c) ---- */

#define TRAIN_BYTE_EOT 256     /* end of text: stands between documents */
#define TRAIN_BYTE_VOCAB 257

/* Each byte of text as a token 0..255 into out (room for len tokens).
 * Returns len.  Any bytes, NUL and invalid UTF-8 included. */
size_t train_tokenize_bytes(const void *text, size_t len, uint32_t *out);

/* The inverse, one document at a time: writes the bytes of tokens up to
 * the first TRAIN_BYTE_EOT or the end into out (room for n bytes), their
 * number into *out_len, and into *consumed the tokens used, the EOT
 * included (so tokens + *consumed is where the next document starts).
 * -EINVAL for a token above TRAIN_BYTE_EOT (*consumed is its index). */
int train_detokenize_bytes(const uint32_t *tokens, size_t n, void *out,
			   size_t *out_len, size_t *consumed);

/* Tokenizes files, each one document, into shards of our format:
 * OUT_DIR/PREFIX_000000.bin, _000001.bin, ..., each shard_tokens tokens
 * (the last fewer), dtype TRAIN_U16, vocabulary TRAIN_BYTE_VOCAB, with an
 * EOT token between two documents (none before the first or after the
 * last; an EOT may open a shard).  Reads 1 MiB at a time: memory does
 * not depend on the input size.  *nshards (may be NULL) gets the number
 * of shards written.  shard_tokens 0: 100,000,000. */
int train_tokenize_files(const char *const *inputs, size_t ninputs,
			 const char *out_dir, const char *prefix,
			 uint64_t shard_tokens, size_t *nshards, char *msg,
			 size_t msg_len);

/* ---- loader (loader.c) ---- */

#define TRAIN_SHARDS_MAX (1u << 20)
#define TRAIN_SEQ_LEN_MAX (1u << 20)
#define TRAIN_BATCH_TOKENS_MAX (1u << 28)   /* B x (T+1) */
#define TRAIN_BUFFERS_MAX 8
#define TRAIN_SPAN_BYTES_MAX (4ull << 30)
#define TRAIN_WORLD_MAX 65536
#define TRAIN_POS_VERSION 1

/* Where a rank's stream stands: the exact place of its next batch.  A
 * plain struct (fixed-size fields, no pointers, 80 bytes): save its bytes
 * with a checkpoint (e.g. as a CKPT_BYTES tensor per rank) and pass it
 * back as train_loader_config.resume to get the same batches, bit for
 * bit, as the run that saved it.  Host byte order. */
struct train_pos {
	uint32_t version;      /* TRAIN_POS_VERSION */
	uint32_t rank;
	uint32_t world_size;
	uint32_t seq_len;      /* T */
	uint64_t seed;
	uint64_t data_id;      /* fingerprint of the shards' token counts and
	                        * dtypes, T, the span layout and shuffle */
	uint64_t epoch;
	uint64_t shard;        /* index in the epoch's shard order */
	uint64_t span;         /* index in that shard's span order */
	uint64_t seq;          /* index in that span's sequence order: the
	                        * next one this rank takes from */
	uint64_t rng_state;    /* state of the generator that shuffled this
	                        * epoch's shard order (a check) */
	uint64_t batches;      /* batches this rank was given before */
};

/* Hint that path will be read soon.  Called on the loader's reader
 * thread; must not block for long; its result is ignored. */
typedef void train_prefetch_fn(void *arg, const char *path);

struct train_loader_config {
	unsigned batch;            /* B: rows per batch (required) */
	unsigned seq_len;          /* T: a row is T+1 tokens (required) */
	uint32_t vocab_size;       /* the model's: every token must be below
	                            * it (required) */
	uint64_t seed;             /* of every shuffle */
	bool shuffle;              /* false: shards, spans and sequences in
	                            * file order (evaluation) */
	int rank;                  /* -1: $RANK, else 0 */
	int world_size;            /* -1: $WORLD_SIZE, else 1 */
	uint64_t span_bytes;       /* read unit: a shard whose tokens fit
	                            * is read whole, a larger one in spans
	                            * of this size (at least one row);
	                            * 0: 256 MiB; 4096..TRAIN_SPAN_BYTES_MAX */
	unsigned buffers;          /* span buffers, 2..TRAIN_BUFFERS_MAX;
	                            * 0: 2 */
	unsigned prefetch_shards;  /* when a shard is opened, hint the next
	                            * this many of the epoch; 0: none */
	train_prefetch_fn *prefetch_fn;  /* NULL: the built-in hint (fmfs
	                                  * control socket, else
	                                  * posix_fadvise WILLNEED) */
	void *prefetch_arg;
	bool verify_at_open;       /* read every shard whole at open (CRC,
	                            * token range); else each is checked
	                            * when read, before any of its tokens is
	                            * handed out */
	const struct train_pos *resume;  /* NULL: the start of epoch 0;
	                                  * copied at open */
};
/* Defaults: shuffle on, seed 0, rank and world from the environment,
 * 256 MiB spans, 2 buffers, one shard hinted ahead; batch, seq_len and
 * vocab_size 0 (the caller must set them). */
void train_loader_config_init(struct train_loader_config *cfg);

struct train_loader;

/* Opens the shards named by paths (npaths of them; each a shard file, or
 * a directory whose regular files named *.bin, not hidden, are taken in
 * name order) in the order given, reads and checks every header (a short
 * or corrupt shard fails here, naming it), allocates the buffers and
 * starts the reader thread.  cfg and the paths are copied.  Fails with
 * -EINVAL when the data has fewer sequences than the world size. */
int train_loader_open(const struct train_loader_config *cfg,
		      const char *const *paths, size_t npaths,
		      struct train_loader **out, char *msg, size_t msg_len);
/* Stops the reader thread and frees everything.  NULL is a no-op. */
void train_loader_close(struct train_loader *l);

struct train_batch {
	unsigned batch, seq_len;   /* B, T */
	const int32_t *tokens;     /* B rows of T+1 tokens */
	const int32_t *inputs;     /* B x T: row b is tokens[b][0..T-1] */
	const int32_t *targets;    /* B x T: row b is tokens[b][1..T] */
	uint64_t epoch;            /* of the first row (a batch may run on
	                            * into the next epoch) */
	uint64_t index;            /* batches this rank had before it */
	double wait_ms;            /* what this call waited for data */
};

/* The next batch of this rank.  The arrays belong to the loader and stay
 * valid until the next call or close (the same three arrays every time).
 * The stream never ends: after the last sequence of an epoch comes the
 * first of the next, freshly shuffled.  A read or verification error is
 * returned, with the file named, by this call and every later one. */
int train_loader_next(struct train_loader *l, struct train_batch *b,
		      char *msg, size_t msg_len);

/* The position of the next batch (after the last one returned). */
void train_loader_position(const struct train_loader *l,
			   struct train_pos *out);

struct train_loader_info {
	size_t shards;             /* files opened */
	uint64_t tokens;           /* in all of them */
	uint64_t sequences;        /* per epoch, all ranks together */
	uint64_t rank_sequences;   /* per epoch, this rank */
	uint64_t tail_tokens;      /* per epoch, in no row at all (each
	                            * shard's last (ntokens - 1) mod T, and
	                            * whole shards of T tokens or fewer) */
	unsigned rank, world_size;
	unsigned buffers;
	uint64_t buffer_bytes;     /* each */
};
void train_loader_info(const struct train_loader *l,
		       struct train_loader_info *out);

struct train_loader_stats {
	uint64_t batches;
	uint64_t sequences;
	uint64_t epoch;            /* of the next batch */
	uint64_t bytes_read;       /* by the reader thread, every pread */
	uint64_t reads;            /* pread calls */
	uint64_t spans_read;
	uint64_t shards_opened;
	uint64_t shards_verified;  /* whole-shard checksum passes */
	uint64_t hints;            /* prefetch hints given */
	uint64_t hints_fmfs;       /* of those, through an fmfs mount's
	                            * control socket */
	uint64_t data_waits;       /* next() calls that waited */
	uint64_t data_wait_ns;     /* time they waited, together */
	double data_wait_ms;       /* the same in ms */
	double last_wait_ms;       /* the last next() call's wait */
	unsigned buffers;
	uint64_t buffer_bytes;     /* each */
	uint64_t buffer_allocs;    /* buffers ever allocated: == buffers */
};
/* Any thread. */
void train_loader_get_stats(struct train_loader *l,
			    struct train_loader_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* FMFS_TRAIN_DATA_H */
