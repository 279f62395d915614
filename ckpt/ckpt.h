/* SPDX-License-Identifier: MIT */
/*
 * ckpt.h - libfmckpt: the asynchronous checkpoint writer and reader.
 *
 * A training job hands its tensors to a struct ckpt and stops only for as
 * long as it takes to copy them into staging memory (ckpt_commit).  Behind
 * it, a writer thread checksums the bytes and writes this rank's shard
 * file (io_uring; pwrite where io_uring is unavailable), fsyncs it and
 * leaves a "shard done" marker; rank 0 then writes the manifest and
 * commits the checkpoint atomically (a temporary directory renamed into
 * place).  When a remote store is configured (s3://BUCKET/PREFIX or
 * file:///DIR), the same bytes are drained to it as a parallel multipart
 * upload while the local file is still being written, shards first and the
 * manifest last, so a reader never sees half a checkpoint anywhere.
 * Retention keeps the newest N checkpoints locally and remotely.  The
 * formats: docs/checkpoint-format.md.
 *
 * Where checkpoints go.  At least one of:
 *   dir     a local directory (or an fmfs mount, whose write-back drains
 *           it to a bucket); created if missing.  With several ranks it
 *           must be one directory that every rank sees (one node, or a
 *           shared file system): rank 0 waits there for the others.
 *   remote  an object store URL.  Without dir, shards are uploaded
 *           straight from staging memory and the store is also where the
 *           ranks meet.
 *   node_local  dir is this node's own disk, seen by no other node (one
 *           NVMe per node of a multi-node job): each rank commits its
 *           own shard there (CKPT_LOCAL: durable on its node), the
 *           remote store is where the ranks meet, and rank 0 commits
 *           the manifest there once every shard is durable there.  A
 *           load takes each shard from the node's directory when it is
 *           there and verifies, else from the store
 *           (docs/checkpoint-format.md, "Node-local directories").
 *
 * Ranks.  Each rank (process) opens its own struct ckpt with its rank and
 * the world size (from the config, else the RANK and WORLD_SIZE
 * environment variables, else 0 and 1), saves the same steps in the same
 * order, and writes only its own shard.  Rank 0 writes the manifest once
 * every shard is durable, or fails the step after barrier_timeout_ms.
 *
 * Threads.  A struct ckpt is used by one thread at a time for saving
 * (begin/add/commit form one sequence); ckpt_wait, ckpt_get_stats and
 * the read functions may be called from any thread.  Inside, one writer
 * thread, upload_parallel upload threads (when remote is set) and one
 * committer thread run until ckpt_close.  A struct ckpt_reader is not
 * shared between threads.
 *
 * Memory.  Staging memory is staging_bytes, allocated at the first
 * ckpt_begin and reused for every step: it never grows.  When a step does
 * not fit in what is free, ckpt_commit waits for the writer to free
 * chunks (counted in ckpt_stats.staging_waits) instead of allocating.
 *
 * Errors.  Functions return 0 or a negative errno, and write a line a
 * person can act on into msg (msg_len bytes, may be NULL/0): what failed,
 * the path, key, tensor or step involved, and what to do.  Common codes:
 * -EINVAL a bad argument or buffer size, -ENOENT no such checkpoint, shard
 * or tensor, -EEXIST a step or name used twice, -EBADMSG corrupt data
 * (checksum or structure), -EPROTONOSUPPORT a format version this library
 * does not read, -ETIMEDOUT a rank that never came, -EACCES refused
 * credentials, -ECONNREFUSED/-EHOSTUNREACH an unreachable store, -EIO
 * anything else.
 */
#ifndef FMFS_CKPT_H
#define FMFS_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objstore/objstore.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_FORMAT_VERSION 2        /* the newest manifest version this
                                      * library writes and reads (it reads
                                      * 1 too; docs/checkpoint-format.md
                                      * "Versions") */
#define CKPT_NAME_MAX 255            /* bytes in a tensor name */
#define CKPT_NDIM_MAX 8
#define CKPT_TENSORS_MAX (1u << 20)  /* tensors per rank and step */
#define CKPT_WORLD_MAX 65536
#define CKPT_RUN_ID_MAX 31
#define CKPT_STEP_LATEST UINT64_MAX  /* "the newest complete checkpoint" */
#define CKPT_STEP_NONE UINT64_MAX    /* in stats: no step yet */

enum ckpt_dtype {
	CKPT_BYTES = 0,  /* raw bytes: shape is the byte count */
	CKPT_F32, CKPT_F16, CKPT_BF16, CKPT_F64,
	CKPT_F8_E4M3, CKPT_F8_E5M2,
	CKPT_I8, CKPT_U8, CKPT_I16, CKPT_U16, CKPT_I32, CKPT_U32,
	CKPT_I64, CKPT_U64, CKPT_BOOL,
	CKPT_DTYPE_COUNT
};
/* "f32", "bf16", ... ; "?" for a value out of range. */
const char *ckpt_dtype_name(enum ckpt_dtype dt);
/* Bytes per element; 0 for a value out of range. */
size_t ckpt_dtype_size(enum ckpt_dtype dt);
/* The inverse of ckpt_dtype_name; -EINVAL for an unknown name. */
int ckpt_dtype_parse(const char *name, enum ckpt_dtype *out);
/* A shape as text, "[3, 5]"; writes at most len bytes. */
void ckpt_shape_format(unsigned ndim, const int64_t *shape, char *buf,
		       size_t len);

struct ckpt_config {
	const char *dir;        /* local directory; NULL: none */
	const char *remote;     /* s3://BUCKET[/PREFIX] or file:///DIR; NULL */
	struct obj_config obj;  /* endpoint, region, parallelism...; its url
	                         * is ignored (remote is used) */
	int rank;               /* -1: $RANK, else 0 */
	int world_size;         /* -1: $WORLD_SIZE, else 1 */
	const char *run_id;     /* NULL: $FMCKPT_RUN_ID, else ""; rank 0
	                         * ignores shard markers of another run */
	uint64_t staging_bytes;       /* 0: 256 MiB */
	uint64_t chunk_bytes;         /* unit of staging, writes and parts;
	                               * 0: 8 MiB; 5 MiB at least with remote */
	unsigned keep_local;          /* newest N kept in dir; 0: all */
	unsigned keep_remote;         /* newest N kept in remote; 0: all */
	unsigned io_depth;            /* writes in flight; 0: 8 */
	unsigned upload_parallel;     /* parts uploaded at once; 0: 16 */
	unsigned barrier_timeout_ms;  /* rank 0 waits this long for the
	                               * others' shards; 0: 600000 */
	unsigned max_pending_steps;   /* committed steps not yet finished
	                               * before ckpt_begin waits; 0: 4 */
	bool node_local;              /* dir is this node's own (above);
	                               * needs dir and remote */
	bool commit_on_nodes;         /* node_local: rank 0 also commits
	                               * each step once every shard is
	                               * durable on its node, before the
	                               * store has them all (CKPT_NODES); a
	                               * load then takes such a step too */
	bool read_only;               /* list/load/verify only: no staging,
	                               * no threads, nothing created; a dir
	                               * that does not exist is then taken
	                               * as empty when remote is set */
};
/* Every field to its default: no dir, no remote, rank/world from env. */
void ckpt_config_init(struct ckpt_config *cfg);

struct ckpt;

/* Opens a checkpoint store.  cfg and its strings are copied.  Contacts
 * no server (the first upload or listing does).  Rank 0 removes leftover
 * temporary directories of steps older than the newest complete one. */
int ckpt_open(const struct ckpt_config *cfg, struct ckpt **out, char *msg,
	      size_t msg_len);
/* Waits until every committed step has finished (committed or failed,
 * locally and remotely), stops the threads and frees everything.
 * Returns 0, or the error of the last step that failed and that no
 * ckpt_wait reported.  NULL is a no-op. */
int ckpt_close(struct ckpt *c, char *msg, size_t msg_len);

/* ---- saving ---- */

/* Allocates the staging memory now (pinned when CUDA is there, else
 * mapped and populated), so that the first ckpt_begin does not: pinning
 * gigabytes takes about a second, which a training loop should pay
 * before its first step rather than inside its first checkpoint.
 * Optional; ckpt_begin allocates it when not done.  0, or -ENOMEM with a
 * message; -EROFS on a read-only handle. */
int ckpt_prepare(struct ckpt *c, char *msg, size_t msg_len);

/* Starts a checkpoint for step.  Waits while max_pending_steps steps are
 * still being written or drained.  -EEXIST if step is already committed
 * in dir (its manifest reads and checks, its shards are there with their
 * sizes), -EBUSY if a step is begun and not committed.  A step-N in dir
 * that is not committed so (no manifest, a damaged one, a shard missing
 * or short) does not stop the save: the commit moves it to
 * dir/aside/step-N.incomplete.T first (ckpt_stats.steps_set_aside). */
int ckpt_begin(struct ckpt *c, uint64_t step, char *msg, size_t msg_len);

#define CKPT_ADD_DEVICE 1u      /* data is CUDA device memory */
#define CKPT_ADD_REPLICATED 2u  /* the same bytes on every rank that adds
                                 * it (a bias, a step counter): a load
                                 * into another world size reads one copy
                                 * (ckpt_reader_read_region) */

/* Adds a tensor to the step begun.  data is borrowed until ckpt_commit
 * returns (the caller must not change it before); name is copied.
 * size_bytes must be the product of shape times the dtype's size (for
 * CKPT_BYTES: shape[0]).  Names are unique per rank and step. */
int ckpt_add(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
	     unsigned ndim, const int64_t *shape, const void *data,
	     uint64_t size_bytes, unsigned flags, char *msg, size_t msg_len);
/* Copies every tensor added into staging memory and returns: the only
 * time the caller waits.  Writing, checksumming, committing and draining
 * go on behind it; ckpt_wait tells when they are done.  On an error the
 * step is dropped and nothing of it is committed. */
int ckpt_commit(struct ckpt *c, char *msg, size_t msg_len);
/* Adds this rank's slice of a global tensor (FSDP-style sharding):
 * shape is the slice's, global_shape the whole tensor's (the same on
 * every rank that saves a slice of it), offset where the slice starts
 * in it, per dimension; offset + shape <= global_shape.  The manifest
 * records both (format version 2), so the tensor loads into any world
 * size and any other split: ckpt_reader_read_region assembles a region
 * from whichever slices cover it.  Slices of one name are disjoint or
 * the same region (a copy, loaded once).  ndim >= 1.  Otherwise as
 * ckpt_add (flags: CKPT_ADD_DEVICE). */
int ckpt_add_slice(struct ckpt *c, const char *name, enum ckpt_dtype dtype,
		   unsigned ndim, const int64_t *shape,
		   const int64_t *global_shape, const int64_t *offset,
		   const void *data, uint64_t size_bytes, unsigned flags,
		   char *msg, size_t msg_len);
/* Drops the step begun (after an add failed, say). */
void ckpt_abort(struct ckpt *c);

enum ckpt_level {
	CKPT_LOCAL = 1,    /* committed in dir: fsynced, renamed */
	CKPT_REMOTE = 2,   /* committed in remote: the manifest is stored */
	CKPT_DURABLE = 3,  /* the strongest configured (remote if any) */
	CKPT_NODES = 4,    /* commit_on_nodes: every rank's shard durable on
	                    * its node's disk and rank 0's manifest.nodes
	                    * stored; lost with any node that dies before
	                    * its shard reaches the store
	                    * (docs/checkpoint-format.md) */
};
/* Waits until step is committed at level by rank 0 (on other ranks: this
 * rank's shard is durable and rank 0's manifest is seen).  timeout_ms 0
 * waits without limit.  -ETIMEDOUT when it ran out; the step's own error
 * when it failed. */
int ckpt_wait(struct ckpt *c, uint64_t step, enum ckpt_level level,
	      unsigned timeout_ms, char *msg, size_t msg_len);

struct ckpt_stats {
	uint64_t staging_bytes;       /* configured */
	uint64_t staging_used_bytes;  /* in chunks now held */
	uint64_t staging_peak_bytes;
	uint64_t chunk_bytes;
	uint64_t commits;
	uint64_t commit_last_ns;      /* time the last commit blocked */
	uint64_t commit_total_ns;
	uint64_t staging_waits;       /* commits that waited for staging */
	uint64_t staging_wait_ns;
	uint64_t pending_waits;       /* begins that waited for old steps */
	uint64_t bytes_written;       /* to local shard files */
	uint64_t bytes_uploaded;      /* parts and objects stored remotely */
	uint64_t steps_failed;        /* at any level */
	/* Steps that finished well at each level: committed in dir
	 * (fsynced, renamed) and in remote (the manifest stored) by rank 0;
	 * on other ranks, this rank's shard and marker durable there.
	 * commits counts what was handed over, these what was kept. */
	uint64_t local_steps;
	uint64_t remote_steps;
	/* step-N directories that were in the way of a commit, not being
	 * complete checkpoints, moved to dir/aside/ (never removed) */
	uint64_t steps_set_aside;
	uint64_t last_local_step;     /* CKPT_STEP_NONE until one */
	uint64_t last_remote_step;
	unsigned steps_in_flight;
	/* commit to durable in dir, and to stored in remote, summed over
	 * the steps that got there */
	uint64_t local_total_ns, remote_total_ns;
	/* Loads (node_local): the shard bytes read from this node's
	 * directory and from the store, and node copies found damaged or
	 * short (then read from the store) */
	uint64_t load_node_bytes, load_remote_bytes, load_node_damaged;
	bool uring;                   /* local writes go through io_uring */
	char last_error[512];
};
void ckpt_get_stats(struct ckpt *c, struct ckpt_stats *out);

/* ---- listing, pruning, loading ---- */

struct ckpt_step_info {
	uint64_t step;
	bool local;              /* complete in dir */
	bool remote;             /* complete in remote */
	bool nodes;              /* committed on the nodes only (not yet
	                          * remote; listed with commit_on_nodes) */
	uint32_t world_size;
	uint32_t ntensors;
	uint64_t bytes;          /* shard files together */
	int64_t created_s;
	int error;               /* 0, or why it cannot be opened: a
	                          * manifest or shard damaged (-EBADMSG), a
	                          * shard missing (-ENOENT), a newer format
	                          * (-EPROTONOSUPPORT), ... */
	char why[512];           /* "" or the message of error: the file
	                          * (manifest or shard) and what is wrong */
};
/* Complete checkpoints, newest first (*out: free() it).  Incomplete ones
 * (no manifest) are not listed; *incomplete (may be NULL) counts them.
 * Each is opened as ckpt_reader_open does (manifest checked, shards
 * present with their sizes); one that fails has error and why set. */
int ckpt_list(struct ckpt *c, struct ckpt_step_info **out, size_t *n,
	      size_t *incomplete, char *msg, size_t msg_len);

/* Keeps the newest keep complete checkpoints in dir and in remote and
 * removes the rest, and every incomplete one older than the newest
 * complete; *removed (may be NULL) counts what went.  keep 0 removes
 * every complete checkpoint. */
int ckpt_prune(struct ckpt *c, unsigned keep, size_t *removed, char *msg,
	       size_t msg_len);

/* Moves every step newer than step out of the way, never removing it,
 * so that a job resumed from step saves its own later steps instead of
 * finding the abandoned ones (corrupt or not) in their place: in dir
 * each step-N/ (complete or not) is renamed to
 * dir/aside/step-N.newer-than-STEP.T; in remote each complete step is
 * copied to aside/step-N.newer-than-STEP.T/ and then removed
 * (docs/checkpoint-format.md, "Set aside", says how to take one back).
 * *moved (may be NULL) counts the steps moved; on success msg says
 * which, and where, or is "" when none was newer.  Rank 0, before its
 * first ckpt_begin, with no step in flight.  -EINVAL on a read-only
 * handle. */
int ckpt_set_aside(struct ckpt *c, uint64_t step, size_t *moved, char *msg,
		   size_t msg_len);

struct ckpt_tensor_info {
	char name[CKPT_NAME_MAX + 1];
	enum ckpt_dtype dtype;
	unsigned ndim;
	int64_t shape[CKPT_NDIM_MAX];
	uint64_t size_bytes;
	uint32_t rank;           /* the shard it is in */
	uint32_t crc32c;
	uint64_t offset;         /* in the shard file */
	uint32_t flags;          /* CKPT_TENSOR_SLICE, CKPT_TENSOR_REPLICATED;
	                          * 0: this rank's own tensor */
	/* a slice's place: the whole tensor's shape, and where the slice
	 * starts in it (zero unless CKPT_TENSOR_SLICE) */
	int64_t global_shape[CKPT_NDIM_MAX];
	int64_t global_offset[CKPT_NDIM_MAX];
};
#define CKPT_TENSOR_SLICE 1u       /* ckpt_add_slice */
#define CKPT_TENSOR_REPLICATED 2u  /* CKPT_ADD_REPLICATED */

struct ckpt_reader;

enum ckpt_source {
	CKPT_FROM_ANY = 0,     /* dir if the step is complete there, else
	                        * remote */
	CKPT_FROM_LOCAL,
	CKPT_FROM_REMOTE,
};

/* Opens a complete checkpoint for reading: step, or CKPT_STEP_LATEST for
 * the newest.  Reads the manifest from dir if the step is complete there,
 * else from remote; checks its structure and checksum and that every
 * shard is present with its size.  No tensor data is read yet.  The
 * reader borrows c: close it before c. */
int ckpt_reader_open(struct ckpt *c, uint64_t step, struct ckpt_reader **out,
		     char *msg, size_t msg_len);
/* The same from one place only. */
int ckpt_reader_open_from(struct ckpt *c, uint64_t step,
			  enum ckpt_source from, struct ckpt_reader **out,
			  char *msg, size_t msg_len);
void ckpt_reader_close(struct ckpt_reader *r);
uint64_t ckpt_reader_step(const struct ckpt_reader *r);
uint32_t ckpt_reader_world_size(const struct ckpt_reader *r);
/* The manifest's format version (1 or 2). */
uint32_t ckpt_reader_version(const struct ckpt_reader *r);
bool ckpt_reader_is_remote(const struct ckpt_reader *r);
/* Where it is read from: a directory path or a URL. */
const char *ckpt_reader_where(const struct ckpt_reader *r);
int64_t ckpt_reader_created_s(const struct ckpt_reader *r);
size_t ckpt_reader_count(const struct ckpt_reader *r);
/* Tensor i (0 <= i < count), borrowed until ckpt_reader_close. */
const struct ckpt_tensor_info *ckpt_reader_tensor(const struct ckpt_reader *r,
						  size_t i);
/* The tensor of that rank and name, or NULL. */
const struct ckpt_tensor_info *ckpt_reader_find(const struct ckpt_reader *r,
						uint32_t rank,
						const char *name);
/* Shard rank's file size and CRC32C as the manifest records them. */
int ckpt_reader_shard(const struct ckpt_reader *r, uint32_t rank,
		      uint64_t *size_bytes, uint32_t *crc32c);
/* Reads tensor t into buf (buf_bytes must equal its size) and checks its
 * CRC32C: -EBADMSG if it differs. */
int ckpt_reader_read(struct ckpt_reader *r, const struct ckpt_tensor_info *t,
		     void *buf, uint64_t buf_bytes, char *msg, size_t msg_len);
/* A tensor as a whole, across every shard that holds a part or a copy
 * of it: its dtype, its global shape (a slice's global_shape; else the
 * tensor's own), how many records (ranks) hold it and their flags.
 * -ENOENT when no shard has the name; -EBADMSG when its records do not
 * agree (dtype, global shape, or one a slice and another not). */
struct ckpt_global_info {
	enum ckpt_dtype dtype;
	unsigned ndim;
	int64_t shape[CKPT_NDIM_MAX];
	uint64_t size_bytes;         /* of the whole tensor */
	uint32_t copies;             /* records of the name */
	uint32_t flags;              /* CKPT_TENSOR_SLICE or _REPLICATED */
};
int ckpt_reader_global(const struct ckpt_reader *r, const char *name,
		       struct ckpt_global_info *out, char *msg,
		       size_t msg_len);
/* Reads the region [offset, offset + shape) of the whole tensor name
 * into buf (row-major, buf_bytes its exact size), from any world size:
 * offset and shape NULL mean the whole tensor.  The bytes come from the
 * records that cover the region, each read whole and checked against
 * its CRC32C first; a replicated tensor (and a slice saved by several
 * ranks) is read from one copy only: this rank's when it has one.  A
 * tensor without global offsets that several ranks saved as their own
 * cannot be resharded: -EINVAL naming it (unless this job's world size
 * is the checkpoint's, when the rank's own is read).  -ENOENT when part
 * of the region is in no slice, naming the part. */
int ckpt_reader_read_region(struct ckpt_reader *r, const char *name,
			    const int64_t *offset, const int64_t *shape,
			    void *buf, uint64_t buf_bytes, char *msg,
			    size_t msg_len);
/* Where each shard read so far came from, for the log: "shard 0: node
 * DIR/step-N/shard-00000.bin; shard 1: remote (node copy damaged: ...)"
 * ("" before any read).  Borrowed until the next read or close. */
const char *ckpt_reader_sources(struct ckpt_reader *r);
/* Reads every shard whole and checks its file CRC32C, its header and
 * every tensor's CRC32C. */
int ckpt_reader_verify(struct ckpt_reader *r, char *msg, size_t msg_len);
/* Copies the checkpoint, verified, into dir as dir/step-N (a store that
 * ckpt_open can read).  -EEXIST if it is there already. */
int ckpt_reader_restore(struct ckpt_reader *r, const char *dir, char *msg,
			size_t msg_len);

/* What ckpt_load fills: tensors by name, whole or a region of a global
 * tensor.  Zero the struct, then set what is used. */
struct ckpt_buf {
	const char *name;
	void *data;
	uint64_t size_bytes;
	/* A region of the whole tensor (ckpt_add_slice) to load, in any
	 * world size: ndim values each; ndim 0 for none (below). */
	unsigned ndim;
	const int64_t *offset;
	const int64_t *shape;
};
/* Loads step (or CKPT_STEP_LATEST) into the caller's buffers, sizes
 * checked, checksums verified.  A buffer with a region gets that region
 * (ckpt_reader_read_region).  One without gets what this rank saved
 * under the name when the checkpoint has this job's world size and this
 * rank's shard has it; else the whole tensor: a replicated one or one
 * that one rank saved, or the slices of a global tensor assembled.  A
 * tensor that several ranks saved as their own loads only into the
 * world size that saved it.  With CKPT_STEP_LATEST a
 * checkpoint that fails verification is skipped for the next older one,
 * and msg then says which was skipped and why (the return is still 0).
 * *loaded_step (may be NULL) gets the step loaded. */
int ckpt_load(struct ckpt *c, uint64_t step, const struct ckpt_buf *bufs,
	      size_t nbufs, uint64_t *loaded_step, char *msg, size_t msg_len);

/* ---- for bindings in other languages (python/fmckpt) ---- */

/* ckpt_open with the config given as "key=value" lines instead of a
 * struct: dir, remote, rank, world_size, run_id, staging_bytes,
 * chunk_bytes, keep_local, keep_remote, io_depth, upload_parallel,
 * barrier_timeout_ms, max_pending_steps, read_only (0/1), and the
 * store's endpoint, region, profile, path_style; what is not given has
 * its default (ckpt_config_init).  -EINVAL naming an unknown key or a
 * bad value. */
int ckpt_open_opts(const char *options, struct ckpt **out, char *msg,
		   size_t msg_len);
/* sizeof a public struct by name ("ckpt_stats", "ckpt_step_info",
 * "ckpt_tensor_info", "ckpt_global_info", "ckpt_buf"), for a binding
 * to check its copy of the layout; 0 for another name. */
size_t ckpt_struct_size(const char *name);

/* Where `fmckpt status` finds what a writer is doing: the directory the
 * status files of this store live in (dir/.fmckpt, or for a remote-only
 * store one under $XDG_RUNTIME_DIR or /tmp).  Writes at most len bytes. */
void ckpt_status_dir(const char *dir, const char *remote, char *out,
		     size_t len);

#ifdef __cplusplus
}
#endif
#endif /* FMFS_CKPT_H */
