/* SPDX-License-Identifier: MIT */
/*
 * util.h - the few helpers every module needs: CRC32C, monotonic clocks,
 * message formatting, whole-buffer reads and writes that retry EINTR,
 * mkdir -p, hex digits, little-endian fields, object versions (ETags)
 * kept in binary, and the two kinds of assertion.  util/ sits below every other module (docs/layout.md says
 * why it exists although the target layout names no such folder) and
 * depends on nothing but libc and pthreads.
 *
 * Every function is thread-safe and keeps no state between calls except
 * CRC32C's tables, built once behind pthread_once.  Functions that can
 * fail return 0 (or a count) and a negative errno.
 */
#ifndef FMFS_UTIL_H
#define FMFS_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- assertions (util.c) ----
 *
 * util_assert(COND) stays on in every build, as redis's serverAssert
 * does: for cheap checks of invariants whose failure means a bug in fmfs
 * (a reference count going below zero, a lock not held).  A failure
 * prints the condition, file, line and function to stderr and aborts, so
 * the bug leaves a core and not a corrupt cache.  util_debug_assert(COND)
 * is the same in builds configured with --enable-debug (FMFS_DEBUG=1)
 * and compiles to nothing (COND is not evaluated) otherwise: for costly
 * checks, such as walking a list.  Never assert on I/O results, network
 * answers or user input: those get an error and a message. */
void util_assert_fail(const char *cond, const char *file, int line,
		      const char *func) __attribute__((noreturn, cold));

#define util_assert(cond)                                                   \
	(__builtin_expect(!!(cond), 1) ? (void)0 :                          \
	 util_assert_fail(#cond, __FILE__, __LINE__, __func__))

#if defined(FMFS_DEBUG) && FMFS_DEBUG
#define util_debug_assert(cond) util_assert(cond)
#else
#define util_debug_assert(cond) ((void)0)
#endif

/* The precondition "lock held" of a function that says so: in debug
 * builds, that the (non-recursive) mutex is locked.  It cannot tell by
 * which thread, but a caller that forgot the lock is caught unless
 * another thread happens to hold it at that moment. */
#define util_debug_assert_locked(mutex)                                     \
	util_debug_assert(pthread_mutex_trylock(mutex) != 0)

/* ---- CRC32C (crc32c.c) ----
 *
 * CRC32C (Castagnoli), the checksum of cache blocks, checkpoint tensors
 * and token shards.  util_crc32c(0, "123456789", 9) is 0xE3069283, and
 * util_crc32c(util_crc32c(0, a), b) is the CRC of a followed by b.
 * util_crc32c_combine gives the CRC of A||B from the CRCs of A and B and
 * the length of B, so bytes checked in parallel pieces are read once. */
uint32_t util_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t util_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* For tests and benchmarks: the table version, and whether the SSE4.2
 * instruction is used by util_crc32c. */
uint32_t util_crc32c_sw(uint32_t crc, const void *buf, size_t len);
bool util_crc32c_hw_available(void);

/* ---- clocks (util.c) ---- */

/* CLOCK_MONOTONIC: for intervals and deadlines, never for timestamps. */
uint64_t util_now_ns(void);
uint64_t util_now_ms(void);
/* CLOCK_REALTIME in ns: for timestamps stored or shown. */
int64_t util_wall_ns(void);
/* A timestamp as object metadata stores it: "SECONDS.NANOSECONDS" (nine
 * digits; s3fs and rclone write and read this form).  util_time_parse
 * also takes whole seconds or fewer digits: 0, or -EINVAL. */
void util_time_format(int64_t ns, char *buf, size_t len);
int util_time_parse(const char *s, int64_t *ns);
/* The CLOCK_MONOTONIC time ms from now, for pthread_cond_timedwait on a
 * condition variable made by util_cond_init. */
struct timespec util_deadline(unsigned ms);
/* True once CLOCK_MONOTONIC has reached *d. */
bool util_deadline_passed(const struct timespec *d);
/* A condition variable whose timed waits use CLOCK_MONOTONIC. */
void util_cond_init(pthread_cond_t *cond);

/* ---- latency histograms (util.c) ----
 *
 * Counts of durations in fixed buckets (seconds, upper bounds below),
 * for the Prometheus histograms of metrics/ (FUSE requests, store
 * requests, checkpoints): lock-free, relaxed atomic adds, so that a hot
 * path pays two clock reads and three adds.  A copy (util_hist_read) is
 * consistent enough for a scrape: counts only grow. */
#define UTIL_HIST_BUCKETS 16
extern const double util_hist_bounds[UTIL_HIST_BUCKETS];
struct util_hist {
	uint64_t n[UTIL_HIST_BUCKETS + 1]; /* the last: above every bound */
	uint64_t sum_ns;
};
void util_hist_add(struct util_hist *h, uint64_t ns);
void util_hist_read(const struct util_hist *h, struct util_hist *out);
uint64_t util_hist_count(const struct util_hist *h);

/* ---- messages (util.c) ----
 *
 * Formats into msg[len] as snprintf does; msg NULL or len 0 is allowed
 * and formats nothing (callers pass their caller's optional buffer). */
void util_msg(char *msg, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- whole transfers (io.c) ----
 *
 * Each retries EINTR and continues short transfers.  The reads return
 * the bytes read, fewer than len only at end of file, or -errno.  The
 * writes return 0 or -errno (-EIO if the kernel wrote nothing without an
 * error). */
ssize_t util_pread_all(int fd, void *buf, size_t len, uint64_t off);
ssize_t util_read_all(int fd, void *buf, size_t len);
int util_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
int util_write_all(int fd, const void *buf, size_t len);
/* Moves len bytes through a non-blocking socket by deadline (ms,
 * util_now_ms): 0, -ETIMEDOUT, -ECONNRESET when the other side closed,
 * or -errno.  out: send (MSG_NOSIGNAL), else recv. */
int util_sock_io(int fd, void *buf, size_t len, bool out,
		 uint64_t deadline);
/* The same, giving up after quiet_ms without a byte moved (-ETIMEDOUT;
 * 0: no such limit) or at cap, an absolute time (-ETIME): a transfer
 * that keeps moving is not cut short by a limit meant for a silent
 * peer. */
int util_sock_io_quiet(int fd, void *buf, size_t len, bool out,
		       unsigned quiet_ms, uint64_t cap);

/* len bytes of private anonymous memory for a large buffer that is
 * reused (checkpoint staging, fetch buffers), in huge pages where the
 * kernel gives them: asked for before the pages exist, so that faults
 * allocate them (MADV_HUGEPAGE after MAP_POPULATE left 4 KiB pages for
 * khugepaged to copy into huge ones, a few MiB a second, while the
 * buffer was in use; in a virtual machine each 4 KiB fault is an exit
 * to the host).  With prefault, every page is faulted in for writing
 * now (ENOMEM now, not a SIGBUS or an OOM kill at first use); without,
 * a page (2 MiB) comes at its first touch.  The pointer, or NULL with
 * errno set (munmap it). */
void *util_map_huge(size_t len, bool prefault);

/* mkdir -p: creates path and its missing parents with mode (umask
 * applies), each new one made durable (its parent fsynced).  0, -ENOTDIR
 * when path (or a parent) exists and is not a directory, -ENAMETOOLONG
 * past PATH_MAX, or mkdir's or fsync's -errno. */
int util_mkdir_p(const char *path, mode_t mode);

/* util_mkdir_p that also names in made (when not NULL) the topmost
 * directory it created, "" when it created none. */
int util_mkdir_p_made(const char *path, mode_t mode, char *made,
		      size_t made_len);

/* The absolute path that path names, symlinks resolved, whether or not
 * its last components exist yet: realpath() of the longest part that
 * exists, then the rest ("." dropped, ".." taking one back).  0, or
 * -errno (-ENAMETOOLONG past out_len). */
int util_path_resolve(const char *path, char *out, size_t out_len);

/* Whether path is dir or below it (both absolute and resolved). */
bool util_path_under(const char *path, const char *dir);

/* fsync of the directory holding path (path is cut at its last '/' for
 * the call and restored): a new name is durable only once its parent
 * is synced.  0 or -errno. */
int util_sync_parent(char *path);

/* fsync of name (a file or a directory) under dirfd ("." for dirfd
 * itself, AT_FDCWD for a path).  0 or -errno (EINVAL, a file system
 * that cannot sync one, counts as 0). */
int util_fsync_at(int dirfd, const char *name);

/* ---- bytes ---- */

/* The value of one hex digit (either case), or -1. */
static inline int util_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Little-endian fields of the on-disk formats, whatever the host's order. */
static inline void util_put32le(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void util_put64le(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t util_get32le(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint64_t util_get64le(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ---- object versions (etag.c) ----
 * An ETag in 24 bytes: S3's form, 32 lower-case hex digits (the MD5) with
 * "-N" for a multipart upload (N 1-65535, no leading zero), in binary;
 * any other text on the heap.  util_etag_set makes t the text s ("":
 * none; out of memory: none, which no other text equals), replacing what
 * t held; util_etag_text writes it back (out[80]) exactly as given;
 * util_etag_is compares with a text; util_etag_free drops the heap
 * text.  A zeroed struct is "none".  Not thread-safe: the holder locks. */
enum { UTIL_ETAG_NONE, UTIL_ETAG_MD5, UTIL_ETAG_TEXT };
struct util_etag {
	union {
		uint8_t md5[16];
		char *text;        /* UTIL_ETAG_TEXT */
	} u;
	uint16_t parts;            /* UTIL_ETAG_MD5: N of "-N", 0 none */
	uint8_t kind;
};
void util_etag_set(struct util_etag *t, const char *s);
void util_etag_text(const struct util_etag *t, char out[80]);
bool util_etag_is(const struct util_etag *t, const char *s);
void util_etag_free(struct util_etag *t);

/* ---- splitmix64's finalizer: every bit of x moves about half of the
 * result's (Steele, Lea, Flood 2014); hashes, not security ---- */
static inline uint64_t util_mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* ---- FNV-1a, 64 bits: fingerprints and placement, not security ----
 * Start from UTIL_FNV64_BASIS; chain calls to hash several fields. */
#define UTIL_FNV64_BASIS 0xcbf29ce484222325ULL

static inline uint64_t util_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#ifdef __cplusplus
}
#endif

#endif /* FMFS_UTIL_H */
