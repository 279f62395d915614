/* SPDX-License-Identifier: MIT */
/*
 * test_data.c - cmocka tests of the data side of fmtrain (train/data.h):
 * token shards round-trip in both dtypes, llm.c shards read, the byte
 * tokenizer round-trips any bytes and writes shards with EOT between
 * documents; corrupt shards (a flipped payload bit, a truncated file, a
 * bad magic, an unknown version, a token not below a vocabulary) are each
 * refused with a message naming the file and the fault.  The loader:
 * every token of an epoch exactly once (a histogram over token positions:
 * each test token is its own global position), ranks disjoint and
 * together the whole epoch, a resume from a saved position giving the
 * same batches bit for bit, seeds changing the order, and memory fixed at
 * open however much is read.
 *
 * Everything runs in a private temporary directory removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "util/util.h"
#include "train/data.h"

struct env {
	char dir[PATH_MAX];
	char msg[1024];
};

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	if ((size_t)snprintf(e->dir, sizeof(e->dir), "%s/t%u", g_tmp,
			     g_seq++) >= sizeof(e->dir) || mkdir(e->dir, 0755))
		return -1;
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	rm_rf(e->dir);
	free(e);
	return 0;
}

static const char *path_in(struct env *e, const char *name)
{
	static char buf[4][PATH_MAX];
	static unsigned n;
	char *p = buf[n++ % 4];

	if ((size_t)snprintf(p, PATH_MAX, "%s/%s", e->dir, name) >= PATH_MAX)
		fail_msg("path too long");
	return p;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* An llm.c shard, from its description: 256 int32 (magic, version,
 * count, zeros), then the tokens as uint16, little-endian. */
static void write_llmc(const char *path, uint32_t magic, uint32_t version,
		       const uint32_t *tok, uint32_t n)
{
	unsigned char hdr[1024] = { 0 };
	unsigned char *body = malloc(2 * (size_t)n + 1);
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	util_put32le(hdr, magic);
	util_put32le(hdr + 4, version);
	util_put32le(hdr + 8, n);
	for (uint32_t i = 0; i < n; i++) {
		body[2 * i] = (unsigned char)tok[i];
		body[2 * i + 1] = (unsigned char)(tok[i] >> 8);
	}
	assert_int_equal(fwrite(hdr, 1, sizeof(hdr), f), sizeof(hdr));
	assert_int_equal(fwrite(body, 1, 2 * (size_t)n, f), 2 * (size_t)n);
	fclose(f);
	free(body);
}

/* A shard of tokens base, base+1, ..., base+n-1 (each its own id). */
static void write_ids(struct env *e, const char *path, enum train_dtype dt,
		      uint32_t vocab, uint32_t base, uint32_t n)
{
	uint32_t *t = malloc((n ? n : 1) * sizeof(*t));

	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
	assert_ok(train_shard_write(path, dt, vocab, t, n, e->msg,
				    sizeof(e->msg)), e->msg);
	free(t);
}

/* Rewrites header fields of our shard and its header CRC. */
static void patch_header(const char *path, off_t off, uint32_t v)
{
	unsigned char hdr[TRAIN_SHARD_HEADER_BYTES];
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	util_put32le(hdr + off, v);
	util_put32le(hdr + sizeof(hdr) - 4,
		     util_crc32c(0, hdr, sizeof(hdr) - 4));
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
}

/* ---- shards ---- */

static void roundtrip(struct env *e, enum train_dtype dt, uint32_t vocab,
		      uint64_t n)
{
	const char *p = path_in(e, dt == TRAIN_U16 ? "u16.bin" : "u32.bin");
	uint32_t *t = malloc(n * sizeof(*t)), *back = NULL;
	struct train_shard_info info;
	uint64_t s = 42, got = 0;
	struct stat st;

	for (uint64_t i = 0; i < n; i++)
		t[i] = (uint32_t)(rnd(&s) % vocab);
	t[0] = vocab - 1;    /* the largest token there is */
	t[n - 1] = 0;
	assert_ok(train_shard_write(p, dt, vocab, t, n, e->msg,
				    sizeof(e->msg)), e->msg);
	assert_ok(stat(p, &st), "stat");
	assert_int_equal(st.st_size, TRAIN_SHARD_HEADER_BYTES + n * dt);
	assert_ok(train_shard_info(p, &info, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(info.kind, TRAIN_SHARD_FMFS);
	assert_int_equal(info.version, TRAIN_SHARD_VERSION);
	assert_int_equal(info.dtype, dt);
	assert_int_equal(info.vocab_size, vocab);
	assert_int_equal(info.ntokens, n);
	assert_true(info.has_crc);
	assert_ok(train_shard_verify(p, vocab, NULL, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_ok(train_shard_read(p, 0, &back, &got, NULL, e->msg,
				   sizeof(e->msg)), e->msg);
	assert_int_equal(got, n);
	assert_memory_equal(back, t, n * sizeof(*t));
	free(back);
	free(t);
}

static void test_shard_roundtrip(void **state)
{
	struct env *e = *state;

	/* Over the writer's 1 MiB buffer, so it flushes mid-shard. */
	roundtrip(e, TRAIN_U16, 65536, 700001);
	roundtrip(e, TRAIN_U32, 100000000, 300007);
	roundtrip(e, TRAIN_U16, 257, 1);
}

static void test_shard_writer_refuses(void **state)
{
	struct env *e = *state;
	uint32_t t[3] = { 1, 2, 300 };
	const char *p = path_in(e, "bad.bin");
	struct stat st;
	DIR *d;
	struct dirent *de;

	assert_int_equal(train_shard_write(p, TRAIN_U16, 257, t, 3, e->msg,
					   sizeof(e->msg)), -ERANGE);
	assert_contains(e->msg, "token 300");
	assert_contains(e->msg, "257");
	assert_int_equal(stat(p, &st), -1);   /* nothing at path */
	d = opendir(e->dir);                  /* and no temporary left */
	while ((de = readdir(d)))
		assert_true(de->d_name[0] == '.');
	closedir(d);
	assert_int_equal(train_shard_write(p, TRAIN_U16, 70000, t, 3, e->msg,
					   sizeof(e->msg)), -EINVAL);
	assert_int_equal(train_shard_write(p, 3, 100, t, 3, e->msg,
					   sizeof(e->msg)), -EINVAL);
}

static void test_llmc_read(void **state)
{
	struct env *e = *state;
	const char *p = path_in(e, "llmc.bin");
	uint32_t t[1000], *back = NULL;
	struct train_shard_info info;
	uint64_t got = 0;

	for (unsigned i = 0; i < 1000; i++)
		t[i] = (i * 7919u) % 50257;
	write_llmc(p, 20240520, 1, t, 1000);
	assert_ok(train_shard_info(p, &info, e->msg, sizeof(e->msg)), e->msg);
	assert_int_equal(info.kind, TRAIN_SHARD_LLMC);
	assert_int_equal(info.dtype, TRAIN_U16);
	assert_int_equal(info.ntokens, 1000);
	assert_int_equal(info.data_offset, 1024);
	assert_int_equal(info.vocab_size, 0);
	assert_false(info.has_crc);
	assert_ok(train_shard_read(p, 50257, &back, &got, NULL, e->msg,
				   sizeof(e->msg)), e->msg);
	assert_int_equal(got, 1000);
	assert_memory_equal(back, t, sizeof(t));
	free(back);

	/* Another llm.c version, a short llm.c file. */
	write_llmc(p, 20240520, 2, t, 1000);
	assert_int_equal(train_shard_info(p, &info, e->msg, sizeof(e->msg)),
			 -EPROTONOSUPPORT);
	assert_contains(e->msg, "llm.c shard version 2");
	assert_contains(e->msg, p);
	write_llmc(p, 20240520, 1, t, 1000);
	assert_ok(truncate(p, 1024 + 1999), "truncate");
	assert_int_equal(train_shard_info(p, &info, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, "truncated");
	assert_contains(e->msg, p);
}

/* ---- tokenizer ---- */

static void test_tokenizer_roundtrip(void **state)
{
	/* UTF-8 of several widths, a NUL, bytes that are no UTF-8 at all. */
	static const char text[] = "na\xc3\xafve caf\xc3\xa9 \xe2\x9c\x93 "
				   "\xf0\x9f\x98\x80 \x00\xff\xfe\x80 end";
	size_t len = sizeof(text) - 1, out_len = 0, used = 0;
	uint32_t tok[sizeof(text)];
	unsigned char back[sizeof(text)];
	uint32_t bad[3] = { 65, TRAIN_BYTE_VOCAB, 66 };

	assert_int_equal(train_tokenize_bytes(text, len, tok), len);
	for (size_t i = 0; i < len; i++) {
		assert_true(tok[i] < 256);
		assert_int_equal(tok[i], (unsigned char)text[i]);
	}
	assert_ok(train_detokenize_bytes(tok, len, back, &out_len, &used),
		  "detokenize");
	assert_int_equal(out_len, len);
	assert_int_equal(used, len);
	assert_memory_equal(back, text, len);
	assert_int_equal(train_detokenize_bytes(bad, 3, back, &out_len,
						&used), -EINVAL);
	assert_int_equal(used, 1);
}

static void test_tokenize_files(void **state)
{
	struct env *e = *state;
	static const char *docs[3] = { "first doc \xc3\xa9\xff",
				       "", "third \x00 doc" };
	static const size_t lens[3] = { 13, 0, 11 };
	const char *in[3];
	uint32_t all[64];
	size_t nall = 0, nshards = 0, at = 0;

	for (int i = 0; i < 3; i++) {
		char name[16];
		FILE *f;

		snprintf(name, sizeof(name), "doc%d.txt", i);
		in[i] = strdup(path_in(e, name));
		f = fopen(in[i], "wb");
		assert_int_equal(fwrite(docs[i], 1, lens[i], f), lens[i]);
		fclose(f);
	}
	assert_ok(mkdir(path_in(e, "out"), 0755), "mkdir");
	/* 13 + 1 + 0 + 1 + 11 = 26 tokens in shards of 8: 4 shards. */
	assert_ok(train_tokenize_files(in, 3, path_in(e, "out"), "tok", 8,
				       &nshards, e->msg, sizeof(e->msg)),
		  e->msg);
	assert_int_equal(nshards, 4);
	for (size_t s = 0; s < nshards; s++) {
		char name[64];
		struct train_shard_info info;
		uint32_t *t;
		uint64_t n;

		snprintf(name, sizeof(name), "out/tok_%06zu.bin", s);
		assert_ok(train_shard_read(path_in(e, name), 0, &t, &n, &info,
					   e->msg, sizeof(e->msg)), e->msg);
		assert_int_equal(info.vocab_size, TRAIN_BYTE_VOCAB);
		assert_int_equal(info.dtype, TRAIN_U16);
		assert_int_equal(n, s < 3 ? 8 : 2);
		memcpy(all + nall, t, n * sizeof(*t));
		nall += n;
		free(t);
	}
	assert_int_equal(nall, 26);
	assert_int_equal(all[13], TRAIN_BYTE_EOT);
	assert_int_equal(all[14], TRAIN_BYTE_EOT);
	for (int d = 0; d < 3; d++) {
		unsigned char buf[64];
		size_t out_len = 0, used = 0;

		assert_ok(train_detokenize_bytes(all + at, nall - at, buf,
						 &out_len, &used), "detok");
		assert_int_equal(out_len, lens[d]);
		assert_memory_equal(buf, docs[d], lens[d]);
		at += used;
	}
	assert_int_equal(at, nall);
	for (int i = 0; i < 3; i++)
		free((void *)in[i]);
}

/* ---- corrupt shards ---- */

static struct train_loader_config cfg_for(unsigned B, unsigned T,
					  uint32_t vocab)
{
	struct train_loader_config c;

	train_loader_config_init(&c);
	c.batch = B;
	c.seq_len = T;
	c.vocab_size = vocab;
	c.rank = 0;
	c.world_size = 1;
	c.seed = 1234;
	return c;
}

/* Opens a loader on one path; returns its error (0: opened, closed). */
static int open_one(struct env *e, const struct train_loader_config *c,
		    const char *p, struct train_loader **out)
{
	struct train_loader *l = NULL;
	int rc = train_loader_open(c, &p, 1, &l, e->msg, sizeof(e->msg));

	if (out)
		*out = l;
	else
		train_loader_close(l);
	return rc;
}

static void test_corrupt_payload(void **state)
{
	struct env *e = *state;
	const char *p = path_in(e, "a.bin");
	struct train_loader_config c = cfg_for(2, 16, 65536);
	struct train_loader *l;
	struct train_batch b;

	write_ids(e, p, TRAIN_U16, 65536, 0, 5000);
	flip_bit(p, TRAIN_SHARD_HEADER_BYTES + 2 * 4321, 3);
	assert_int_equal(train_shard_verify(p, 0, NULL, e->msg,
					    sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "payload checksum mismatch");
	/* The headers are fine: open works, the first batch does not. */
	assert_ok(open_one(e, &c, p, &l), e->msg);
	assert_int_equal(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "payload checksum mismatch");
	/* and so does every later call */
	e->msg[0] = '\0';
	assert_int_equal(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, "payload checksum mismatch");
	train_loader_close(l);
	/* A split shard (spans of 4 KiB) is checked whole before use. */
	c.span_bytes = 4096;
	assert_ok(open_one(e, &c, p, &l), e->msg);
	assert_int_equal(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			 -EBADMSG);
	assert_contains(e->msg, "payload checksum mismatch");
	train_loader_close(l);
	/* verify_at_open: open itself refuses it. */
	c.verify_at_open = true;
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, p);
}

static void test_corrupt_truncated(void **state)
{
	struct env *e = *state;
	const char *p = path_in(e, "t.bin");
	struct train_loader_config c = cfg_for(2, 16, 65536);

	write_ids(e, p, TRAIN_U16, 65536, 0, 5000);
	assert_ok(truncate(p, TRAIN_SHARD_HEADER_BYTES + 2 * 5000 - 1), "tr");
	assert_int_equal(train_shard_verify(p, 0, NULL, e->msg,
					    sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "truncated");
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "truncated");
	/* Shorter than the header, and empty. */
	assert_ok(truncate(p, 100), "tr");
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, "truncated");
	assert_ok(truncate(p, 0), "tr");
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, "not a token shard");
}

static void test_corrupt_magic_version(void **state)
{
	struct env *e = *state;
	const char *p = path_in(e, "m.bin");
	struct train_loader_config c = cfg_for(2, 16, 65536);

	write_ids(e, p, TRAIN_U16, 65536, 0, 5000);
	flip_bit(p, 2, 0);
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "not a token shard");

	write_ids(e, p, TRAIN_U16, 65536, 0, 5000);
	patch_header(p, 8, 2);
	assert_int_equal(open_one(e, &c, p, NULL), -EPROTONOSUPPORT);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "format version 2");
	assert_contains(e->msg, "reads version 1 only");

	/* A flipped bit in the version field is corruption, not a new
	 * version: the header checksum comes first. */
	write_ids(e, p, TRAIN_U16, 65536, 0, 5000);
	flip_bit(p, 9, 1);
	assert_int_equal(open_one(e, &c, p, NULL), -EBADMSG);
	assert_contains(e->msg, "header checksum mismatch");
}

static void test_token_vocab(void **state)
{
	struct env *e = *state;
	const char *p = path_in(e, "v.bin"), *q = path_in(e, "llmc.bin");
	struct train_loader_config c = cfg_for(2, 16, 500);
	struct train_loader *l;
	struct train_batch b;
	uint32_t t[2000];

	/* A shard tokenized for a larger vocabulary: refused at open. */
	write_ids(e, p, TRAIN_U16, 1000, 0, 1000);
	assert_int_equal(open_one(e, &c, p, NULL), -ERANGE);
	assert_contains(e->msg, p);
	assert_contains(e->msg, "vocabulary of 1000");
	assert_contains(e->msg, "vocabulary size is 500");

	/* llm.c records no vocabulary: the token itself is caught. */
	for (unsigned i = 0; i < 2000; i++)
		t[i] = i % 400;
	t[1234] = 600;
	write_llmc(q, 20240520, 1, t, 2000);
	assert_ok(open_one(e, &c, q, &l), e->msg);
	assert_int_equal(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			 -ERANGE);
	assert_contains(e->msg, q);
	assert_contains(e->msg, "token 600 at index 1234");
	assert_contains(e->msg, "model's vocabulary size 500");
	train_loader_close(l);
	assert_int_equal(train_shard_verify(q, 500, NULL, e->msg,
					    sizeof(e->msg)), -ERANGE);
	assert_contains(e->msg, "token 600");

	/* A token not below the shard's own vocabulary: corruption (the
	 * header rewritten with its checksum to make it so). */
	write_ids(e, p, TRAIN_U16, 1000, 0, 1000);
	patch_header(p, 20, 800);
	assert_int_equal(train_shard_verify(p, 0, NULL, e->msg,
					    sizeof(e->msg)), -EBADMSG);
	assert_contains(e->msg, "token 800 at index 800");
	assert_contains(e->msg, "shard's own vocabulary size 800");
}

/* ---- the loader ---- */

/* The test data: shards whose tokens are their global position. */
struct dataset {
	unsigned n;
	const char *paths[8];
	uint32_t base[8], ntok[8];
	uint32_t total;
};

static void make_dataset(struct env *e, struct dataset *d)
{
	/* Sizes: several sequences with tails, exactly T+1, T (no
	 * sequence at all), one large shard split into spans, an llm.c
	 * shard and a uint32 one. T is 8 in the tests below. */
	static const uint32_t sizes[] = { 1003, 9, 8, 4099, 777, 1, 2500 };
	uint32_t at = 0;

	memset(d, 0, sizeof(*d));
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[32];

		snprintf(name, sizeof(name), "s%u.bin", i);
		d->paths[i] = strdup(path_in(e, name));
		d->base[i] = at;
		d->ntok[i] = sizes[i];
		if (i == 4) {
			uint32_t *t = malloc(sizes[i] * sizeof(*t));

			for (uint32_t k = 0; k < sizes[i]; k++)
				t[k] = at + k;
			write_llmc(d->paths[i], 20240520, 1, t, sizes[i]);
			free(t);
		} else {
			write_ids(e, d->paths[i],
				  i == 6 ? TRAIN_U32 : TRAIN_U16, 65536, at,
				  sizes[i]);
		}
		at += sizes[i];
		d->n++;
	}
	d->total = at;
}

static void free_dataset(struct dataset *d)
{
	for (unsigned i = 0; i < d->n; i++)
		free((void *)d->paths[i]);
}

/* Takes nrows rows from l into rows (nrows x (T+1)); the rest of the
 * last batch is dropped. */
static void take_rows(struct env *e, struct train_loader *l, uint64_t nrows,
		      int32_t *rows)
{
	uint64_t got = 0;

	while (got < nrows) {
		struct train_batch b;
		unsigned T;

		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
		T = b.seq_len;
		for (unsigned r = 0; r < b.batch && got < nrows; r++, got++) {
			const int32_t *row = b.tokens + (size_t)r * (T + 1);

			memcpy(rows + got * (T + 1), row,
			       (T + 1) * sizeof(*row));
			/* inputs and targets are the row shifted by one */
			assert_memory_equal(b.inputs + (size_t)r * T, row,
					    T * sizeof(*row));
			assert_memory_equal(b.targets + (size_t)r * T, row + 1,
					    T * sizeof(*row));
		}
	}
}

/* hist_in[p] / hist_tgt[p]: how often position p was an input / target */
static void count_rows(const int32_t *rows, uint64_t nrows, unsigned T,
		       unsigned *hist_in, unsigned *hist_tgt, uint32_t total)
{
	for (uint64_t r = 0; r < nrows; r++) {
		const int32_t *row = rows + r * (T + 1);

		for (unsigned j = 0; j < T; j++) {
			assert_true((uint32_t)row[j] < total);
			/* a row is a contiguous run of one shard */
			assert_int_equal(row[j + 1], row[j] + 1);
			hist_in[row[j]]++;
			hist_tgt[row[j + 1]]++;
		}
	}
}

/* Exactly one epoch: in shard i of n tokens with nseq = (n-1)/T
 * sequences, positions [0, nseq*T) are inputs once, [1, nseq*T]
 * targets once, nothing else anything. */
static void check_epoch(const struct dataset *d, unsigned T,
			const unsigned *hist_in, const unsigned *hist_tgt)
{
	for (unsigned i = 0; i < d->n; i++) {
		uint32_t n = d->ntok[i], nseq = n > T ? (n - 1) / T : 0;

		for (uint32_t k = 0; k < n; k++) {
			uint32_t p = d->base[i] + k;
			unsigned in = k < nseq * T, tg = k >= 1 &&
							k <= nseq * T;

			if (hist_in[p] != in || hist_tgt[p] != tg)
				fail_msg("shard %u position %u: input %u times "
					 "(want %u), target %u times (want %u)",
					 i, k, hist_in[p], in, hist_tgt[p], tg);
		}
	}
}

static uint64_t epoch_sequences(const struct dataset *d, unsigned T)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < d->n; i++)
		s += d->ntok[i] > T ? (d->ntok[i] - 1) / T : 0;
	return s;
}

static void test_loader_epoch_once(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(3, 8, 65536);
	struct train_loader_info info;
	struct train_loader *l;
	struct dataset d;
	unsigned *hin, *htg;
	int32_t *rows;
	uint64_t n;

	make_dataset(e, &d);
	c.span_bytes = 4096;    /* shard 3 (8 KiB of tokens) is split */
	assert_ok(train_loader_open(&c, d.paths, d.n, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	train_loader_info(l, &info);
	n = info.rank_sequences;
	assert_int_equal(info.sequences, epoch_sequences(&d, 8));
	assert_int_equal(n, info.sequences);
	assert_int_equal(info.tokens, d.total);
	assert_int_equal(info.shards, d.n);
	/* every token is in a row (as input, target or both) but these */
	assert_int_equal(info.tail_tokens,
			 d.total - info.sequences * 8 - (d.n - 2));
	rows = malloc(2 * n * 9 * sizeof(*rows));
	hin = calloc(d.total, sizeof(*hin));
	htg = calloc(d.total, sizeof(*htg));
	/* Two epochs in a row, each exactly once (the second starts in
	 * the middle of a batch: n is not a multiple of 3). */
	take_rows(e, l, 2 * n, rows);
	count_rows(rows, n, 8, hin, htg, d.total);
	check_epoch(&d, 8, hin, htg);
	memset(hin, 0, d.total * sizeof(*hin));
	memset(htg, 0, d.total * sizeof(*htg));
	count_rows(rows + n * 9, n, 8, hin, htg, d.total);
	check_epoch(&d, 8, hin, htg);
	/* and shuffled differently */
	assert_true(memcmp(rows, rows + n * 9, n * 9 * sizeof(*rows)));
	train_loader_close(l);
	free(rows);
	free(hin);
	free(htg);
	free_dataset(&d);
}

static void test_loader_ranks(void **state)
{
	struct env *e = *state;
	struct dataset d;

	make_dataset(e, &d);
	for (unsigned w = 2; w <= 3; w++) {
		unsigned *hin = calloc(d.total, sizeof(*hin));
		unsigned *htg = calloc(d.total, sizeof(*htg));
		uint64_t sum = 0;

		for (unsigned r = 0; r < w; r++) {
			struct train_loader_config c = cfg_for(4, 8, 65536);
			struct train_loader_info info;
			struct train_loader *l;
			unsigned *mine = calloc(d.total, sizeof(*mine));
			unsigned *mtg = calloc(d.total, sizeof(*mtg));
			int32_t *rows;

			c.rank = (int)r;
			c.world_size = (int)w;
			c.span_bytes = 4096;
			assert_ok(train_loader_open(&c, d.paths, d.n, &l,
						    e->msg, sizeof(e->msg)),
				  e->msg);
			train_loader_info(l, &info);
			rows = malloc(info.rank_sequences * 9 * sizeof(*rows));
			take_rows(e, l, info.rank_sequences, rows);
			count_rows(rows, info.rank_sequences, 8, mine, mtg,
				   d.total);
			for (uint32_t p = 0; p < d.total; p++) {
				/* disjoint: no input position twice */
				assert_true(mine[p] <= 1);
				assert_true(!(mine[p] && hin[p]));
				hin[p] += mine[p];
				htg[p] += mtg[p];
			}
			sum += info.rank_sequences;
			free(rows);
			free(mine);
			free(mtg);
			train_loader_close(l);
		}
		assert_int_equal(sum, epoch_sequences(&d, 8));
		check_epoch(&d, 8, hin, htg);   /* the union: the epoch */
		free(hin);
		free(htg);
	}
	free_dataset(&d);
}

/* Runs nb batches of l, appending their tokens to out. */
static void run_batches(struct env *e, struct train_loader *l, unsigned nb,
			int32_t *out, uint64_t *index, uint64_t *epoch)
{
	for (unsigned i = 0; i < nb; i++) {
		struct train_batch b;
		size_t n;

		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
		n = (size_t)b.batch * (b.seq_len + 1);
		memcpy(out + i * n, b.tokens, n * sizeof(*out));
		index[i] = b.index;
		epoch[i] = b.epoch;
	}
}

static void test_loader_resume(void **state)
{
	struct env *e = *state;
	static const unsigned skips[] = { 0, 1, 7, 13, 40, 97 };
	const unsigned B = 5, NB = 30, per = 5 * 9;
	struct dataset d;

	make_dataset(e, &d);
	for (unsigned w = 1; w <= 2; w++)
	for (unsigned si = 0; si < sizeof(skips) / sizeof(skips[0]); si++) {
		struct train_loader_config c = cfg_for(B, 8, 65536);
		struct train_loader *a, *b;
		struct train_pos pos, saved;
		int32_t *x = malloc(NB * per * sizeof(*x));
		int32_t *y = malloc(NB * per * sizeof(*y));
		uint64_t xi[NB], yi[NB], xe[NB], ye[NB], dummy[128];
		int32_t *skip = malloc(128 * per * sizeof(*skip));

		c.rank = (int)w - 1;
		c.world_size = (int)w;
		c.span_bytes = 4096;
		c.seed = 77;
		assert_ok(train_loader_open(&c, d.paths, d.n, &a, e->msg,
					    sizeof(e->msg)), e->msg);
		run_batches(e, a, skips[si], skip, dummy, dummy);
		train_loader_position(a, &pos);
		assert_int_equal(pos.batches, skips[si]);
		/* the position is plain bytes: save, forget, restore */
		memcpy(&saved, &pos, sizeof(pos));
		memset(&pos, 0xA5, sizeof(pos));
		run_batches(e, a, NB, x, xi, xe);
		train_loader_close(a);

		c.resume = &saved;
		assert_ok(train_loader_open(&c, d.paths, d.n, &b, e->msg,
					    sizeof(e->msg)), e->msg);
		run_batches(e, b, NB, y, yi, ye);
		train_loader_close(b);
		if (memcmp(x, y, NB * per * sizeof(*x)))
			fail_msg("world %u: resumed after %u batches, the "
				 "batches differ", w, skips[si]);
		assert_memory_equal(xi, yi, sizeof(xi));
		assert_memory_equal(xe, ye, sizeof(xe));
		assert_int_equal(yi[0], skips[si]);
		free(x);
		free(y);
		free(skip);
	}
	/* The 97 skipped and 30 more cross into epoch 2 and beyond:
	 * checked above (400-odd sequences an epoch, 5 per batch). */
	{
		struct train_loader_config c = cfg_for(B, 8, 65536);
		struct train_loader *a;
		struct train_pos pos;

		c.span_bytes = 4096;
		c.seed = 77;
		assert_ok(train_loader_open(&c, d.paths, d.n, &a, e->msg,
					    sizeof(e->msg)), e->msg);
		train_loader_position(a, &pos);
		train_loader_close(a);
		c.seed = 78;
		c.resume = &pos;
		assert_int_equal(train_loader_open(&c, d.paths, d.n, &a,
						   e->msg, sizeof(e->msg)),
				 -EINVAL);
		assert_contains(e->msg, "another seed");
		c.seed = 77;
		c.seq_len = 7;
		assert_int_equal(train_loader_open(&c, d.paths, d.n, &a,
						   e->msg, sizeof(e->msg)),
				 -EINVAL);
		assert_contains(e->msg, "sequence length");
		c.seq_len = 8;
		c.world_size = 2;
		assert_int_equal(train_loader_open(&c, d.paths, d.n, &a,
						   e->msg, sizeof(e->msg)),
				 -EINVAL);
		assert_contains(e->msg, "world size");
		c.world_size = 1;
		c.span_bytes = 8192;
		assert_int_equal(train_loader_open(&c, d.paths, d.n, &a,
						   e->msg, sizeof(e->msg)),
				 -EINVAL);
		assert_contains(e->msg, "span size");
	}
	free_dataset(&d);
}

static void first_rows(struct env *e, struct dataset *d,
		       struct train_loader_config *c, int32_t *rows,
		       uint64_t n)
{
	struct train_loader *l;

	assert_ok(train_loader_open(c, d->paths, d->n, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	take_rows(e, l, n, rows);
	train_loader_close(l);
}

static void test_loader_seeds(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(4, 8, 65536);
	struct dataset d;
	uint64_t n;
	int32_t *a, *b;

	make_dataset(e, &d);
	n = epoch_sequences(&d, 8);
	a = malloc(n * 9 * sizeof(*a));
	b = malloc(n * 9 * sizeof(*b));
	c.seed = 1;
	first_rows(e, &d, &c, a, n);
	first_rows(e, &d, &c, b, n);
	assert_memory_equal(a, b, n * 9 * sizeof(*a));  /* same seed */
	c.seed = 2;
	first_rows(e, &d, &c, b, n);
	assert_true(memcmp(a, b, n * 9 * sizeof(*a)));  /* another one */
	/* Each level is shuffled.  Sequences: shard 0's rows (125, one
	 * span) do not come in file order.  Spans: shard 3 is split into
	 * 3 spans of 255 sequences at most; over 20 seeds, its first row
	 * in the epoch is not always from the same span. */
	{
		uint64_t last = 0, ascending = 1, seen = 0;
		unsigned spans_seen = 0;

		for (uint64_t r = 0, k = 0; r < n; r++) {
			uint32_t t = (uint32_t)a[r * 9];

			if (t >= d.base[0] + d.ntok[0])
				continue;
			if (k++ && t < last)
				ascending = 0;
			last = t;
		}
		assert_false(ascending);
		c.span_bytes = 4096;
		for (uint64_t seed = 0; seed < 20; seed++) {
			c.seed = seed;
			first_rows(e, &d, &c, b, n);
			for (uint64_t r = 0; r < n; r++) {
				uint32_t t = (uint32_t)b[r * 9];

				if (t >= d.base[3] &&
				    t < d.base[3] + d.ntok[3]) {
					spans_seen |= 1u << ((t - d.base[3]) /
							     8 / 255);
					break;
				}
			}
			seen++;
		}
		assert_int_equal(seen, 20);
		assert_true(spans_seen != 1 && spans_seen != 2 &&
			    spans_seen != 4);
		c.span_bytes = 0;
	}
	/* shuffle off: file order, sequence after sequence */
	c.shuffle = false;
	first_rows(e, &d, &c, b, n);
	for (uint64_t r = 0; r < 10; r++)
		assert_int_equal(b[r * 9], (int32_t)(r * 8));
	free(a);
	free(b);
	free_dataset(&d);
}

static void test_loader_memory_bounded(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(7, 8, 65536);
	struct train_loader_stats st0, st;
	struct train_loader_info info;
	struct train_loader *l;
	struct train_batch b;
	const int32_t *tok = NULL;
	struct dataset d;
	double waits = 0;

	make_dataset(e, &d);
	c.span_bytes = 4096;
	c.buffers = 3;
	assert_ok(train_loader_open(&c, d.paths, d.n, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	train_loader_info(l, &info);
	train_loader_get_stats(l, &st0);
	assert_int_equal(st0.buffers, 3);
	assert_int_equal(st0.buffer_allocs, 3);
	/* the largest read: a 4 KiB span, with a page of slack each side */
	assert_true(st0.buffer_bytes >= 4096 && st0.buffer_bytes <= 12288);
	for (unsigned i = 0; i < 6 * info.rank_sequences / 7; i++) {
		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
		if (!tok)
			tok = b.tokens;
		assert_ptr_equal(b.tokens, tok);  /* the same arrays */
		assert_true(b.wait_ms >= 0);
		waits += b.wait_ms;
	}
	train_loader_get_stats(l, &st);
	assert_int_equal(st.buffer_allocs, 3);
	assert_int_equal(st.buffer_bytes, st0.buffer_bytes);
	assert_true(st.epoch >= 5);
	/* far more read than held: the buffers were reused */
	assert_true(st.bytes_read > 2 * 3 * st.buffer_bytes);
	assert_true(st.spans_read > 5 * (d.n - 2));
	assert_int_equal(st.batches, 6 * info.rank_sequences / 7);
	/* the split shard's checksum pass ran once, not per epoch */
	assert_true(st.shards_verified >= 1);
	assert_true(st.data_wait_ms >= waits - 1e-6 &&
		    st.data_wait_ms <= waits + 1e-6);
	train_loader_close(l);
	free_dataset(&d);
}

/* 8 MiB of tokens read six times over through 2 x 1 MiB buffers: the
 * resident size after the first epoch does not grow with what is read. */
static void test_loader_rss_stable(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(16, 1024, 1u << 24);
	struct train_loader_info info;
	struct train_loader_stats st;
	struct train_loader *l;
	struct train_batch b;
	const char *paths[4];
	uint64_t per_epoch;
	long rss0, rss1;

	for (unsigned i = 0; i < 4; i++) {
		char name[16];

		snprintf(name, sizeof(name), "big%u.bin", i);
		paths[i] = strdup(path_in(e, name));
		write_ids(e, paths[i], TRAIN_U32, 1u << 24, i << 20, 1u << 20);
	}
	c.span_bytes = 1u << 20;
	assert_ok(train_loader_open(&c, paths, 4, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	train_loader_info(l, &info);
	per_epoch = info.rank_sequences / 16 + 1;
	for (uint64_t i = 0; i < per_epoch; i++)
		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
	rss0 = rss_kib();
	for (uint64_t i = 0; i < 5 * per_epoch; i++)
		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
	rss1 = rss_kib();
	train_loader_get_stats(l, &st);
	assert_int_equal(st.buffer_allocs, 2);
	assert_true(st.bytes_read > 5 * (16ull << 20));
	if (rss0 > 0 && rss1 - rss0 > 4096)
		fail_msg("resident size grew from %ld KiB to %ld KiB reading "
			 "%llu MiB", rss0, rss1,
			 (unsigned long long)(st.bytes_read >> 20));
	train_loader_close(l);
	for (unsigned i = 0; i < 4; i++)
		free((void *)paths[i]);
}

struct hints {
	unsigned n;
	char last[PATH_MAX];
};

static void count_hint(void *arg, const char *path)
{
	struct hints *h = arg;

	h->n++;
	snprintf(h->last, sizeof(h->last), "%s", path);
}

static void test_loader_prefetch(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(4, 8, 65536);
	struct train_loader_stats st;
	struct train_loader *l;
	struct train_batch b;
	struct hints h = { 0 };
	struct dataset d;
	const char *dir;

	make_dataset(e, &d);
	c.prefetch_fn = count_hint;
	c.prefetch_arg = &h;
	c.prefetch_shards = 2;
	assert_ok(train_loader_open(&c, d.paths, d.n, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	for (unsigned i = 0; i < 200; i++)
		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
	train_loader_get_stats(l, &st);
	train_loader_close(l);
	/* the reader may have hinted more after the snapshot */
	assert_true(st.hints > 0);
	assert_true(st.hints <= h.n);
	assert_int_equal(st.hints_fmfs, 0);
	assert_contains(h.last, e->dir);

	/* The built-in hint on a plain directory: posix_fadvise, and the
	 * data the same.  A directory as the shard list. */
	train_loader_config_init(&c);
	c = cfg_for(4, 8, 65536);
	dir = e->dir;
	assert_ok(train_loader_open(&c, &dir, 1, &l, e->msg,
				    sizeof(e->msg)), e->msg);
	for (unsigned i = 0; i < 200; i++)
		assert_ok(train_loader_next(l, &b, e->msg, sizeof(e->msg)),
			  e->msg);
	train_loader_get_stats(l, &st);
	assert_true(st.hints > 0);
	assert_int_equal(st.hints_fmfs, 0);
	train_loader_close(l);
	free_dataset(&d);
}

static void test_loader_dir_and_config(void **state)
{
	struct env *e = *state;
	struct train_loader_config c = cfg_for(2, 8, 65536);
	struct train_loader_info info;
	struct train_loader *l;
	char dir[PATH_MAX], empty[PATH_MAX];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s", path_in(e, "data"));
	snprintf(empty, sizeof(empty), "%s", path_in(e, "empty"));

	assert_ok(mkdir(dir, 0755), "mkdir");
	assert_ok(mkdir(empty, 0755), "mkdir");
	write_ids(e, path_in(e, "data/b.bin"), TRAIN_U16, 65536, 0, 100);
	write_ids(e, path_in(e, "data/a.bin"), TRAIN_U16, 65536, 0, 100);
	write_ids(e, path_in(e, "data/.hidden.bin"), TRAIN_U16, 65536, 0, 10);
	f = fopen(path_in(e, "data/README"), "w");
	fputs("not a shard\n", f);
	fclose(f);
	assert_ok(open_one(e, &c, dir, &l), e->msg);
	train_loader_info(l, &info);
	assert_int_equal(info.shards, 2);
	assert_int_equal(info.sequences, 2 * 12);
	train_loader_close(l);
	assert_int_equal(open_one(e, &c, empty, NULL), -ENOENT);
	assert_contains(e->msg, "no shard");
	assert_int_equal(open_one(e, &c, path_in(e, "nope"), NULL), -ENOENT);
	assert_contains(e->msg, "nope");

	/* Bad configurations. */
	c = cfg_for(0, 8, 65536);
	assert_int_equal(open_one(e, &c, dir, NULL), -EINVAL);
	c = cfg_for(2, 8, 0);
	assert_int_equal(open_one(e, &c, dir, NULL), -EINVAL);
	assert_contains(e->msg, "vocabulary");
	c = cfg_for(2, 8, 65536);
	c.rank = 2;
	c.world_size = 2;
	assert_int_equal(open_one(e, &c, dir, NULL), -EINVAL);
	c = cfg_for(2, 8, 65536);
	c.buffers = 1;
	assert_int_equal(open_one(e, &c, dir, NULL), -EINVAL);
	/* fewer sequences (24) than ranks */
	c = cfg_for(2, 8, 65536);
	c.rank = 0;
	c.world_size = 25;
	assert_int_equal(open_one(e, &c, dir, NULL), -EINVAL);
	assert_contains(e->msg, "fewer than the 25 ranks");
	/* rank and world from the environment */
	c = cfg_for(2, 8, 65536);
	c.rank = c.world_size = -1;
	setenv("RANK", "1", 1);
	setenv("WORLD_SIZE", "3", 1);
	assert_ok(open_one(e, &c, dir, &l), e->msg);
	train_loader_info(l, &info);
	assert_int_equal(info.rank, 1);
	assert_int_equal(info.world_size, 3);
	assert_int_equal(info.rank_sequences, 8);
	train_loader_close(l);
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
		T(test_shard_roundtrip),
		T(test_shard_writer_refuses),
		T(test_llmc_read),
		T(test_tokenizer_roundtrip),
		T(test_tokenize_files),
		T(test_corrupt_payload),
		T(test_corrupt_truncated),
		T(test_corrupt_magic_version),
		T(test_token_vocab),
		T(test_loader_epoch_once),
		T(test_loader_ranks),
		T(test_loader_resume),
		T(test_loader_seeds),
		T(test_loader_memory_bounded),
		T(test_loader_rss_stable),
		T(test_loader_prefetch),
		T(test_loader_dir_and_config),
#undef T
	};

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	return run_tests_in_tmp_dir("fmfs-test-data", tests);
}
