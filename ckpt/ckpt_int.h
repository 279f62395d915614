/* SPDX-License-Identifier: MIT */
/*
 * ckpt_int.h - what the files of ckpt/ share and nothing outside sees:
 * the handle, the staging chunks, the steps in flight and their queues,
 * the on-disk formats (format.c), the store layout (store.c) and the
 * threads (writer.c, drain.c).
 *
 * Locking: one mutex per handle (struct ckpt.lock) protects the free
 * chunk list, the three queues, every struct ckpt_step field marked
 * "lock" and the stats.  Fields marked "writer" belong to the writer
 * thread alone; the io_uring ring too.  Long work (I/O, network, CRC)
 * runs with the lock released.
 */
#ifndef FMFS_CKPT_INT_H
#define FMFS_CKPT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "config.h"
#include "ckpt.h"
#include "util/util.h"

#define CKPT_ALIGN 64                 /* tensor data alignment in a shard */
#define CKPT_SHARD_HEADER_BYTES 4096
#define CKPT_SHARD_VERSION 1          /* shard files: unchanged since 1 */
#define CKPT_MF_HEADER_BYTES 64
#define CKPT_MF_SHARD_BYTES 64
#define CKPT_MF_TENSOR_BYTES 104       /* format version 1 */
#define CKPT_MF_TENSOR_BYTES_V2 240    /* version 2: flags, global shape,
                                        * offsets */
#define CKPT_MF_TRAILER_BYTES 16
#define CKPT_MF_MAX_BYTES (512u << 20) /* refuse larger manifests */
#define CKPT_MF_KIND_MANIFEST 1
#define CKPT_MF_KIND_RANK 2            /* a "shard done" marker */
#define CKPT_DONE_KEEP 32              /* finished steps ckpt_wait knows */
#define CKPT_IO_PIECE (8u << 20)       /* read/verify/copy unit */

#define CKPT_MANIFEST_NAME "manifest"
#define CKPT_NODES_MANIFEST_NAME "manifest.nodes" /* commit_on_nodes */
#define CKPT_STEP_PREFIX "step-"
#define CKPT_TMP_PREFIX ".tmp-step-"
#define CKPT_STATE_DIR ".fmckpt"
#define CKPT_ASIDE_DIR "aside"      /* steps moved out of the way */

/* ---- format.c ---- */

struct ckpt_mf_shard {
	uint32_t rank;
	uint32_t ntensors;
	uint64_t file_bytes;
	uint64_t data_bytes;
	uint32_t crc32c;         /* of the whole shard file */
	uint32_t first;          /* index of its first tensor record */
	char run_id[CKPT_RUN_ID_MAX + 1];
};

struct ckpt_manifest {
	uint32_t version;        /* as decoded (encoding picks its own) */
	uint32_t kind;           /* CKPT_MF_KIND_* */
	uint64_t step;
	uint32_t world_size;
	int64_t created_ns;
	struct ckpt_mf_shard *shards;    /* sorted by rank */
	uint32_t nshards;
	struct ckpt_tensor_info *tensors; /* grouped by shard, by offset */
	uint32_t ntensors;
};

/* Encodes m (a manifest or a rank marker) into *out (malloc'd). */
int ckpt_mf_encode(const struct ckpt_manifest *m, unsigned char **out,
		   size_t *out_len);
/* Decodes and checks everything: magic, version, checksums, sizes,
 * counts, names, shapes, offsets.  what names the file in messages. */
int ckpt_mf_decode(const void *buf, size_t len, const char *what,
		   struct ckpt_manifest *m, char *msg, size_t msg_len);
void ckpt_mf_release(struct ckpt_manifest *m);
/* Merges the rank markers of one step (any order) into a manifest;
 * checks step, world size and that every rank is there once. */
int ckpt_mf_merge(const struct ckpt_manifest *ranks, uint32_t n,
		  struct ckpt_manifest *out, char *msg, size_t msg_len);

struct ckpt_shard_header {
	uint64_t step;
	uint32_t rank;
	uint32_t world_size;
	uint32_t ntensors;
	uint64_t file_bytes;
	char run_id[CKPT_RUN_ID_MAX + 1];
};
void ckpt_shard_header_encode(const struct ckpt_shard_header *h,
			      unsigned char *buf /* 4096 bytes */);
int ckpt_shard_header_decode(const unsigned char *buf, size_t len,
			     const char *what, struct ckpt_shard_header *h,
			     char *msg, size_t msg_len);
/* Checks a slice's place (CKPT_TENSOR_SLICE: ndim >= 1, offsets and
 * global shape not negative, the slice inside the whole) or that a
 * tensor that is no slice has none; -EINVAL naming the tensor. */
int ckpt_slice_check(const char *name, uint32_t tflags, unsigned ndim,
		     const int64_t *shape, const int64_t *gshape,
		     const int64_t *goff, char *msg, size_t msg_len);
/* Whether two records of one name are parts or copies of the same
 * tensor (dtype, slice or not, global shape); -EBADMSG naming both
 * ranks otherwise (reshard.c). */
int ckpt_global_agree(const struct ckpt_tensor_info *a,
		      const struct ckpt_tensor_info *b, char *msg,
		      size_t msg_len);
/* That the records of each name in m agree (ckpt_global_agree), for
 * rank 0's merge: a mixed save fails at its commit, not at a load. */
int ckpt_mf_check_global(const struct ckpt_manifest *m, char *msg,
			 size_t msg_len);
/* Checks a tensor's name, dtype, shape and size; -EINVAL with a
 * message naming the tensor otherwise. */
int ckpt_tensor_check(const char *name, enum ckpt_dtype dtype,
		      unsigned ndim, const int64_t *shape,
		      uint64_t size_bytes, char *msg, size_t msg_len);

/* ---- store.c: layout, files, listing, retention ---- */

void ckpt_step_name(uint64_t step, char *buf, size_t len); /* step-NNN */
void ckpt_shard_name(uint32_t rank, char *buf, size_t len);
void ckpt_marker_name(uint32_t rank, char *buf, size_t len);
/* Parses "step-<digits>" after prefix; -1 if name is not one. */
int ckpt_parse_step(const char *name, const char *prefix, uint64_t *step);

/* Writes buf to dir/name through dir/name.tmp: write, fsync, rename,
 * fsync dir. */
int ckpt_write_atomic(const char *dir, const char *name, const void *buf,
		      size_t len, char *msg, size_t msg_len);
int ckpt_read_whole(const char *path, size_t max_bytes, unsigned char **out,
		    size_t *len, char *msg, size_t msg_len);
int ckpt_rm_rf(const char *path);
int ckpt_mkdir_p(const char *path, char *msg, size_t msg_len);

/* obj_status to a negative errno; and the message for a failed call. */
int ckpt_obj_errno(obj_status st);
int ckpt_obj_fail(const struct obj_error *err, obj_status st,
		  const char *what, char *msg, size_t msg_len);

struct ckpt_found {
	uint64_t step;
	bool complete;
	bool on_nodes;           /* a store's step-N/manifest.nodes is there
	                          * (commit_on_nodes); complete is the
	                          * manifest's alone */
	bool nodes_only;         /* load.c: counted complete for its
	                          * manifest.nodes alone */
};
/* Steps in dir (complete step-N with a manifest; incomplete: .tmp-step-N
 * and step-N without one), sorted newest first. */
int ckpt_local_scan(const char *dir, struct ckpt_found **out, size_t *n,
		    char *msg, size_t msg_len);
/* The same for a store (keys step-N/...). */
int ckpt_remote_scan(struct obj_store *st, struct ckpt_found **out,
		     size_t *n, char *msg, size_t msg_len);
int ckpt_local_remove(const char *dir, uint64_t step, bool complete);
int ckpt_remote_remove(struct obj_store *st, uint64_t step, char *msg,
		       size_t msg_len);
/* Moves step-N out of the way, never removing it: in dir, renames
 * dir/step-N to dir/aside/step-N.REASON.UNIX_S (".K" added when that is
 * taken); in a store, copies its keys under aside/step-N.REASON.UNIX_S/
 * (the manifest last), then removes step-N/ (the manifest first).  out
 * gets the new path or prefix. */
int ckpt_local_aside(const char *dir, uint64_t step, const char *reason,
		     char *out, size_t out_len, char *msg, size_t msg_len);
int ckpt_remote_aside(struct obj_store *st, uint64_t step, const char *reason,
		      char *out, size_t out_len, char *msg, size_t msg_len);
/* Retention in one place: keep the newest keep complete steps (0: all if
 * keep_all, else none), remove incomplete ones older than the newest
 * complete (all if remove_all_incomplete). */
int ckpt_retain_local(const char *dir, unsigned keep, bool keep_all,
		      bool remove_all_incomplete, size_t *removed, char *msg,
		      size_t msg_len);
int ckpt_retain_remote(struct obj_store *st, unsigned keep, bool keep_all,
		       bool remove_all_incomplete, size_t *removed,
		       char *msg, size_t msg_len);

/* ---- node.c: the node-local tier (ckpt_config.node_local) ---- */

struct ckpt_step;

/* DIR/step-N[/name]. */
void ckpt_node_path(const struct ckpt *c, uint64_t step, const char *name,
		    char *buf, size_t len);
/* This rank's shard and marker moved from .tmp-step-N/ into step-N/,
 * both directories fsynced: the step is durable on this node. */
int ckpt_node_commit(struct ckpt *c, struct ckpt_step *s, char *why,
		     size_t why_len);
/* Keeps this rank's newest keep steps in dir (0: all, or none with
 * remove_all), removing its files from older ones (and a directory once
 * empty), and its leftovers in .tmp-step-N/ older than the newest (all
 * with remove_all). */
int ckpt_retain_node(struct ckpt *c, unsigned keep, bool remove_all,
		     size_t *removed, char *msg, size_t msg_len);

/* Reads a whole object of at most max_bytes. */
int ckpt_remote_read_whole(struct obj_store *st, const char *key,
			   size_t max_bytes, unsigned char **out, size_t *len,
			   char *msg, size_t msg_len);
/* Ranged read of [off, off+len) into buf, in parallel parts. */
int ckpt_remote_read(struct obj_store *st, const char *key, uint64_t off,
		     void *buf, uint64_t len, unsigned parallel, char *msg,
		     size_t msg_len);

/* ---- the handle ---- */

struct ckpt_step;

struct ckpt_chunk {
	unsigned char *buf;
	struct ckpt_chunk *next;      /* free list or writer queue (lock) */
	struct ckpt_step *step;
	uint64_t off;                 /* where it goes in the shard file */
	uint32_t len;
	uint32_t done;                /* bytes written so far (writer) */
	unsigned index;               /* chunk number = part number - 1 */
};

struct ckpt_tensor {
	char *name;
	enum ckpt_dtype dtype;
	unsigned ndim;
	int64_t shape[CKPT_NDIM_MAX];
	uint64_t size;
	uint64_t off;                 /* in the shard file */
	uint32_t crc;                 /* writer */
	const void *src;              /* borrowed until commit returns */
	unsigned flags;               /* CKPT_ADD_* */
	uint32_t tflags;              /* CKPT_TENSOR_*: recorded */
	int64_t gshape[CKPT_NDIM_MAX];  /* a slice's global shape ... */
	int64_t goff[CKPT_NDIM_MAX];    /* ... and offsets in it */
};

/* One part of the upload of a shard: chunk index, and where its bytes
 * are (the chunk while it is held, else the local shard file). */
struct ckpt_job {
	struct ckpt_step *step;
	struct ckpt_chunk *chunk;     /* NULL: read from step->fd */
	struct ckpt_job *next;        /* upload queue (lock) */
	unsigned index;
};

enum ckpt_remote_state {
	REMOTE_IDLE = 0, REMOTE_STARTING, REMOTE_STARTED, REMOTE_FAILED
};

struct ckpt_step {
	uint64_t step;
	struct ckpt_step *next;       /* c->steps or c->done (lock) */

	/* built by begin/add, read-only after commit */
	struct ckpt_tensor *t;
	size_t nt, cap;
	uint32_t *hash;               /* names: tensor index + 1, 0 empty */
	size_t hash_cap;
	uint64_t file_bytes;
	unsigned nchunks;
	struct ckpt_job *jobs;        /* nchunks, when remote */
	struct obj_part *parts;       /* nchunks, when remote */

	/* writer */
	size_t crc_t;                 /* first tensor not fully summed */
	uint32_t file_crc;
	bool opened;
	int fd;                       /* shard file; -1 (closed at retire) */
	unsigned char *marker;        /* encoded rank marker; immutable once
	                               * marker_ready */
	size_t marker_len;

	/* lock */
	bool committed;               /* commit finished copying */
	unsigned local_pending;       /* chunks not yet written */
	unsigned remote_pending;      /* parts not yet uploaded */
	enum ckpt_remote_state remote_state;
	char upload_id[OBJ_UPLOAD_ID_MAX];
	bool marker_ready;            /* marker encoded (or failed to be) */
	bool local_ready, remote_ready;      /* events for the committer */
	bool local_handled, remote_handled;  /* done, well or not */
	int local_rc, remote_rc;
	bool reported;                /* an error returned by ckpt_wait */
	char local_err[512], remote_err[512];
	int nodes_rc;                 /* commit_on_nodes: that commit's
	                               * error, set with local_handled */
	char nodes_err[512];
	uint64_t bytes_written, bytes_uploaded;
	uint64_t t_commit_ns, t_local_ns, t_remote_ns;
};

struct ckpt_io;  /* writer.c: io_uring or pwrite */

struct ckpt {
	char *dir;
	char *remote;
	bool cfg_remote;              /* a remote was configured */
	struct obj_store *st;
	struct ckpt_config cfg;       /* defaults applied; strings not owned */
	uint32_t rank, world;
	char run_id[CKPT_RUN_ID_MAX + 1];
	char status_dir[PATH_MAX];

	/* staging */
	unsigned char *staging;
	size_t staging_len;
	bool staging_pinned;
	struct ckpt_chunk *chunks;
	unsigned nchunks;

	pthread_mutex_t lock;
	pthread_cond_t chunk_cond;    /* a chunk was freed */
	pthread_cond_t writer_cond;   /* work for the writer */
	pthread_cond_t upload_cond;   /* work for uploaders; remote started */
	pthread_cond_t commit_cond;   /* work for the committer */
	pthread_cond_t step_cond;     /* a step moved on */

	/* lock */
	struct ckpt_chunk *free_chunks;
	unsigned nfree;
	struct ckpt_chunk *wq_head, *wq_tail;
	struct ckpt_job *uq_head, *uq_tail;
	struct ckpt_step *building;   /* begun, not committed */
	bool copying;                 /* a commit is copying into staging */
	bool copy_fits;               /* ... and staging's free chunks hold it */
	/* Above this no step can be committed in dir (its newest at the
	 * first begin, and every step begun since): begin skips the stat. */
	bool steps_scanned;
	uint64_t step_ceiling;
	bool status_due;            /* the committer rewrites the status file */
	struct ckpt_step *steps;      /* committed, in flight, oldest first */
	struct ckpt_step *done;       /* finished, newest first, at most
	                               * CKPT_DONE_KEEP */
	unsigned in_flight;
	bool stopping;
	struct ckpt_stats stats;

	struct ckpt_io *io;           /* writer */
	pthread_t writer;
	pthread_t committer;
	pthread_t *uploaders;
	unsigned nuploaders;
	bool threads_started;
	pthread_mutex_t status_lock;  /* serialises status file writes */
	void *cuda;                   /* cuda.c state; NULL without CUDA */
};

/* Crash points: the named places between two steps of a commit
 * ("shard-synced", "marker-written", "manifest-written", "renamed",
 * "node-committed", "nodes-manifest", "remote-shard", "remote-marker",
 * "remote-manifest")
 * call
 * ckpt_crash_hook when it is set.  NULL, and so nothing, in a real job:
 * no variable in its environment can kill it.  Test programs set it
 * (tests/unit/test_ckpt.c, tests/ckpt-writer.c with FMCKPT_CRASH_AT)
 * before ckpt_open, to a function that kills the process there.  Set
 * it only while no handle is open. */
extern void (*ckpt_crash_hook)(const char *point, uint64_t step);

static inline void ckpt_crash_point(const char *point, uint64_t step)
{
	if (ckpt_crash_hook)
		ckpt_crash_hook(point, step);
}

/* Fails step at levels (CKPT_LOCAL, CKPT_REMOTE or both: a local write
 * error fails the upload that reads the file too): the first error of
 * each level wins, and becomes the handle's last error; a later one of a
 * level already failed changes nothing.  The message is formatted here,
 * at the failure, from the errno the caller captured: say the cause and
 * the path.  c->lock held. */
void ckpt_step_fail(struct ckpt *c, struct ckpt_step *s, int rc,
		    unsigned levels, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* Returns a chunk to the free list; c->lock held. */
void ckpt_chunk_release(struct ckpt *c, struct ckpt_chunk *ch);
void ckpt_status_write(struct ckpt *c);
/* The shard's path in the temporary directory of its step. */
void ckpt_tmp_path(const struct ckpt *c, uint64_t step, const char *name,
		   char *buf, size_t len);
/* Encodes this rank's marker (rank index) from the step's tensors. */
int ckpt_marker_encode(struct ckpt *c, struct ckpt_step *s);

/* While a commit copies, the writer keeps off the memory bus and the
 * CPU (the caller is waiting) until free chunks fall to this many. */
static inline unsigned ckpt_low_water(const struct ckpt *c)
{
	return c->nchunks / 8;
}

/* Whether the writer should start on queued chunks now (c->lock): always
 * outside a commit; during one only when the copy needs chunks that only
 * the writer can free, i.e. it did not fit in the free chunks at its
 * start and staging has fallen to the low water. */
static inline bool ckpt_writer_wanted(const struct ckpt *c)
{
	return !c->copying ||
	       (!c->copy_fits && c->nfree <= ckpt_low_water(c));
}

/* open.c: frees what a step holds but the step itself (its tensor list,
 * hash, jobs, parts, marker; closes its shard file), for a step freed
 * and for one retired to the done list (drain.c). */
void ckpt_step_release(struct ckpt_step *s);
/* ckpt.c: the step in flight or done with that number, or NULL
 * (c->lock). */
struct ckpt_step *ckpt_find_step(struct ckpt *c, uint64_t step);
/* Whether step has a manifest in the local directory (a stat; none
 * for a step past the newest one there). */
bool ckpt_committed_locally(struct ckpt *c, uint64_t step);
/* ckpt_step_release, then the step (NULL: nothing). */
void ckpt_step_free(struct ckpt_step *s);
/* open.c: the staging region, at the first ckpt_begin (pinned when
 * CUDA is there, prefaulted). */
int ckpt_staging_alloc(struct ckpt *c, char *msg, size_t msg_len);

/* load.c: a step opened for reading (list.c reads its manifest too) */
struct ckpt_reader {
	struct ckpt *c;
	bool remote;
	uint64_t step;
	char where[PATH_MAX + 128];   /* for messages: DIR/step-N or URL */
	char base[PATH_MAX];          /* local: DIR/step-N */
	char prefix[96];              /* remote: step-N/ */
	struct ckpt_manifest m;
	int *fds;                     /* per shard; -1 until opened */
	bool *hdr_ok;                 /* per shard: header checked */
	uint32_t *by_name;            /* m.tensors sorted by name (reshard.c,
	                               * built at first use) */
	bool on_nodes;                /* read from manifest.nodes: the store
	                               * may not have every shard yet */
	/* node_local, a step read from the store: per shard, whether this
	 * node's directory has it with its size (and it has not failed a
	 * check), where each read came from ('n' node, 'r' store, 'd' the
	 * store after the node's copy failed), why that copy failed; the
	 * summary of ckpt_reader_sources (node.c) */
	bool *node_ok;
	char *served;
	char **node_why;
	char *sources;
};
/* node.c: the reader's node-local copies (nothing unless node_local and
 * read from the store) */
int ckpt_node_reader_init(struct ckpt_reader *r);
void ckpt_node_reader_free(struct ckpt_reader *r);
static inline bool ckpt_node_serves(const struct ckpt_reader *r, uint32_t i)
{
	return r->node_ok && r->node_ok[i];
}
/* Shard i's node copy failed (why): read from the store from now on. */
void ckpt_node_bad(struct ckpt_reader *r, uint32_t i, const char *why);
/* len bytes of shard i read, from the node's copy or the store. */
void ckpt_node_count(struct ckpt_reader *r, uint32_t i, bool node,
		     uint64_t len);
/* The steps in the directory (if any) and in the store (if any), each
 * list newest first (ckpt_local_scan, ckpt_remote_scan); both freed on
 * failure. */
int ckpt_scan_both(struct ckpt *c, struct ckpt_found **lv, size_t *ln,
		   struct ckpt_found **rv, size_t *rn, char *msg,
		   size_t msg_len);

/* writer.c */
int ckpt_io_init(struct ckpt *c, unsigned depth);
void ckpt_io_free(struct ckpt_io *io);
bool ckpt_io_uring(const struct ckpt_io *io);
void *ckpt_writer_main(void *arg);

/* drain.c */
void *ckpt_upload_main(void *arg);
void *ckpt_committer_main(void *arg);

/* cuda.c: all of it fails with -ENOTSUP when built without CUDA. */
int ckpt_cuda_init(struct ckpt *c, char *msg, size_t msg_len);
void ckpt_cuda_free(struct ckpt *c);
/* Staging memory: pinned when CUDA and a GPU are there, else NULL. */
void *ckpt_cuda_host_alloc(struct ckpt *c, size_t len);
void ckpt_cuda_host_free(struct ckpt *c, void *p);
int ckpt_cuda_copy_async(struct ckpt *c, void *dst, const void *src,
			 size_t len, char *msg, size_t msg_len);
int ckpt_cuda_sync(struct ckpt *c, char *msg, size_t msg_len);

#endif /* FMFS_CKPT_INT_H */
