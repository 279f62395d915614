/* SPDX-License-Identifier: MIT */
/*
 * loader_int.h - shared by the two files of the data loader: loader.c
 * (orders, the prefetch hint, the reader thread, the caller's side) and
 * loader_open.c (the configuration, the shard list, the plan, open and
 * close).  The design is at the top of loader.c.
 */
#ifndef FMFS_TRAIN_LOADER_INT_H
#define FMFS_TRAIN_LOADER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "data_int.h"

#define DEFAULT_SPAN_BYTES (256ull << 20)
#define SPAN_BYTES_MIN 4096ull
#define IO_ALIGN 4096ull
#define NONE UINT64_MAX
#define FMFS_CTL_XATTR "user.fmfs.control"   /* = FS_CTL_XATTR, fs/fs.h */
#define FMFS_CTL_TIMEOUT_MS 2000
#define ERR_MSG_MAX 512

_Static_assert(sizeof(struct train_pos) == 80, "train_pos is a saved "
	       "format: no padding, no pointers");

struct shard {
	char *path;
	struct train_shard_info info;
	uint64_t nseq;         /* sequences of T+1 tokens */
	uint64_t spq;          /* sequences per span (the last span fewer) */
	uint64_t nspans;
	uint64_t last_nseq;    /* sequences in span nspans - 1 */
	bool whole;            /* one span: the whole payload is read */
	bool verified;         /* reader thread only: payload CRC checked */
};

/* A place in the stream; normalised: each index inside its range. */
struct cursor {
	uint64_t epoch, shard_k, span_k, seq;
};

/* One span as the stream orders it. */
struct span {
	uint64_t epoch, shard_k, span_k;  /* its place in the orders */
	uint32_t shard;                   /* file index */
	uint64_t span;                    /* index within the shard */
	uint64_t g0;       /* epoch order index of its first sequence */
	uint64_t nseq;
	uint64_t first;    /* first order index (in the span) to consider */
};

/* The orders of one epoch, as far as computed: the shard order always,
 * the span order of one shard. */
struct order {
	uint64_t epoch;        /* NONE: nothing computed */
	uint64_t rng_state;    /* derive(seed, epoch, ~0, ~0) */
	uint32_t *shard;       /* nshards: file index at each place */
	uint64_t *base;        /* nshards + 1: first order index of each */
	uint64_t span_of;      /* shard_k whose spans are in span[]; NONE */
	uint32_t *span;        /* its span order */
	uint64_t last_at;      /* where its short last span is in span[] */
};

enum { SLOT_FREE = 0, SLOT_READY = 1 };

struct slot {
	int state;             /* protected by loader.lock */
	unsigned char *buf;    /* buf_bytes, IO_ALIGN-aligned */
	size_t tok_off;        /* offset of the span's first token in buf */
	struct span sp;
	int err;               /* the reader stopped here with this error */
	char msg[ERR_MSG_MAX];
};

struct train_loader {
	struct train_loader_config cfg;   /* resume is NULL */
	unsigned rank, world;
	struct shard *shards;
	size_t nshards;
	uint64_t ntokens, sequences, tail_tokens, data_id;
	uint64_t max_spans, max_spq;
	struct cursor start;              /* where the reader begins */

	size_t buf_bytes;
	struct slot *slots;
	unsigned nslots;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t ready, freed;      /* a slot became ready / free */
	uint64_t produced, consumed;      /* slots; protected by lock */
	atomic_bool stop;                 /* set under lock at close */

	/* reader thread only */
	struct order rorder;
	char hint_dir[PATH_MAX];          /* last directory looked up */
	char hint_root[PATH_MAX];         /* its fmfs mount root, or "" */
	char hint_sock[sizeof(((struct sockaddr_un *)0)->sun_path)];

	/* caller's thread only */
	struct order corder;
	struct slot *cur;                 /* the span rows come from */
	uint64_t k;                       /* next order index in it */
	uint32_t *perm;                   /* its sequence order */
	struct cursor pos;                /* of the next batch */
	uint64_t batches;
	int32_t *tokens, *inputs, *targets;
	int err;
	char errmsg[ERR_MSG_MAX];

	/* statistics: any thread */
	_Atomic uint64_t st_bytes, st_reads, st_spans, st_opened,
		st_verified, st_hints, st_hints_fmfs, st_waits, st_wait_ns,
		st_last_wait_ns, st_sequences, st_batches, st_epoch,
		st_allocs;
};

/* loader.c, for loader_open.c */
uint64_t train_mix64(uint64_t z);
/* The generator's state for (seed, epoch, shard, span). */
uint64_t train_derive(uint64_t seed, uint64_t epoch, uint64_t shard,
		      uint64_t span);
/* Moves c forward until it names a place that exists. */
void train_normalise(const struct train_loader *l, struct order *o,
		     struct cursor *c);
void train_add_stat(_Atomic uint64_t *s, uint64_t v);
int train_order_init(struct order *o, size_t nshards, uint64_t max_spans);
void train_order_free(struct order *o);
void *train_reader_main(void *arg);

#endif /* FMFS_TRAIN_LOADER_INT_H */
