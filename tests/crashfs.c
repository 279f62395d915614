/* SPDX-License-Identifier: MIT */
/*
 * crashfs.c - a FUSE passthrough file system that simulates a power cut,
 * for the power-loss tests (tests/lib/powerloss.py,
 * tests/integration/68-mount-powerloss.sh).  The model is SQLite's
 * src/test6.c: what was not made durable by fsync is dropped, or torn,
 * at the crash.  Being a file system, it sees every write path of the
 * program above it: write/pwrite, io_uring, mmap, O_DIRECT, SQLite.
 *
 *   crashfs [--crash-at N] [--mode drop|tear|keep]
 *           [--meta ordered|dirsync]
 *           [--freeze block|eio] [--seed S] [--log] STATE MOUNTPOINT
 *
 * STATE/root is the live tree served at MOUNTPOINT (created if missing;
 * whatever it holds at mount is taken as durable).  STATE/attic keeps a
 * hard link to every file and every removed directory, so that an inode
 * the live tree no longer names can still come back after the crash.
 *
 * Durability, per inode: a file's content is durable as of its last
 * fsync or fdatasync.  Before the first change to a 4 KiB page after
 * that, the page's old bytes are saved (an undo log); the size at the
 * last sync is kept too.  Names (create, mkdir, unlink, rmdir, rename,
 * symlink, link) follow --meta: "ordered" (a journaling file system
 * with ordered metadata: every name change is durable at once, in
 * order) or "dirsync" (strict POSIX: a directory's entries are durable
 * as of its last fsync; a new file or directory exists after the crash
 * only if the directory holding it was fsynced since).  Attributes
 * (mode, owner, times, xattrs) are not modelled: the post-crash tree
 * has each file's current mode and nothing else.
 *
 * The crash: every operation that changes something (write, truncate,
 * fallocate, each name change, chmod/chown/utimens, xattrs, fsync,
 * fsyncdir; O_TRUNC opens) is numbered from 1.  Operation --crash-at N
 * and every later one is not performed: with --freeze block (default)
 * it waits, as a dead disk would, until the caller is killed (FUSE
 * interrupt), SIGUSR2 arrives, the mount goes away or 120 s pass, then
 * fails with EIO; with --freeze eio it fails at once, which tests how
 * the program above handles a failed fsync.  Once frozen, reads wait
 * or fail too.  SIGUSR1 freezes at once (a crash "now").  The freeze
 * writes STATE/frozen: "op N WHAT PATH".
 *
 * At unmount crashfs writes STATE/out: the tree a power cut at the
 * freeze (or at the unmount, if nothing froze) leaves.  --mode drop:
 * every file has its durable content; --mode tear: each page changed
 * since the last sync has, at random (seeded), its old or its new bytes,
 * and the size is the durable or the current one; with --meta dirsync
 * each directory has, at random, its durable or its current entries;
 * --mode keep: everything written is kept, as the page cache keeps it
 * when only the processes above die (a kill -9, not a power cut).
 * STATE/ops gets "ops N" (how many operations were numbered) and
 * "frozen N" (0 if none).  --log writes STATE/oplog, one line per
 * numbered operation.
 *
 * Limits: unsynced bytes are held in memory, at most 1 GiB (then
 * ENOSPC); hard links come back as separate copies; FUSE locks are the
 * kernel's (local); sync(2) and syncfs(2) do nothing here (FUSE passes
 * neither on), so only fsync, fdatasync and fsync of a directory count.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* renameat2, fallocate, O_DIRECT */
#endif
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>  /* fuse_session_exited */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define CF_PAGE 4096u
#define CF_HASH 4096u
#define CF_UNDO_MAX_BYTES (1ull << 30)
#define CF_FREEZE_MAX_MS 120000
#define CF_DEPTH_MAX 64

/* One file's undo log: saved[i] says page i changed since the last sync;
 * old[i] is its bytes then (NULL: it lay past the durable end, zeros). */
struct cf_inode {
	ino_t ino;
	uint64_t dsize;          /* size at the last sync */
	size_t cap;              /* entries of saved[] and old[] */
	uint8_t *saved;
	unsigned char **old;
	struct cf_inode *next;   /* hash chain */
};

struct cf_ent {
	char *name;
	ino_t ino;
	mode_t mode;
	char *target;            /* symlinks */
};

struct cf_list {
	struct cf_ent *e;
	size_t n, cap;
};

/* A directory's entries now (cur) and as of its last fsync (dur). */
struct cf_dir {
	ino_t ino;
	struct cf_list cur, dur;
	struct cf_dir *next;
};

struct cf_open {
	int fd;
	ino_t ino;
	char path[256];          /* as opened, for the log */
};

static struct {
	pthread_mutex_t lock;     /* protects everything below but frozen */
	const char *state;
	int rootfd, atticfd, statefd;
	uint64_t crash_at, ops, frozen_op;
	volatile sig_atomic_t frozen, release;
	bool tear, keep, dirsync, freeze_eio, log;
	uint64_t seed, rng;
	uint64_t undo_bytes;
	struct cf_inode *inodes[CF_HASH];
	struct cf_dir *dirs[CF_HASH];
	FILE *oplog;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ---- small helpers ---- */

static const char *rel(const char *path)
{
	return path[1] ? path + 1 : ".";
}

/* The parent of path and the last name; buf holds the parent. */
static const char *split(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');
	size_t n = (size_t)(slash - path);

	if (n == 0) {
		snprintf(buf, len, "/");
	} else {
		if (n >= len)
			n = len - 1;
		memcpy(buf, path, n);
		buf[n] = '\0';
	}
	return slash + 1;
}

static uint64_t rnd(void)
{
	uint64_t x = g.rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	g.rng = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "crashfs: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* ---- inodes and their undo logs (g.lock held) ---- */

static struct cf_inode *inode_get(ino_t ino, uint64_t dsize, bool create)
{
	struct cf_inode **pp = &g.inodes[ino % CF_HASH], *in;

	for (in = *pp; in; in = in->next)
		if (in->ino == ino)
			return in;
	if (!create)
		return NULL;
	in = calloc(1, sizeof(*in));
	if (!in)
		die("out of memory");
	in->ino = ino;
	in->dsize = dsize;
	in->next = *pp;
	*pp = in;
	return in;
}

static void undo_clear(struct cf_inode *in)
{
	for (size_t i = 0; i < in->cap; i++) {
		if (in->old[i])
			g.undo_bytes -= CF_PAGE;
		free(in->old[i]);
	}
	free(in->saved);
	free(in->old);
	in->saved = NULL;
	in->old = NULL;
	in->cap = 0;
}

/* Saves the durable bytes of pages [first, last] of fd before they
 * change, once per page between syncs. */
static int undo_save(struct cf_inode *in, int fd, uint64_t first,
		     uint64_t last)
{
	if (last >= in->cap) {
		size_t cap = in->cap ? in->cap : 16;
		uint8_t *s;
		unsigned char **o;

		while (cap <= last)
			cap *= 2;
		s = realloc(in->saved, cap);
		o = realloc(in->old, cap * sizeof(*o));
		if (s)
			in->saved = s;
		if (o)
			in->old = o;
		if (!s || !o)
			return -ENOMEM;
		memset(s + in->cap, 0, cap - in->cap);
		memset(o + in->cap, 0, (cap - in->cap) * sizeof(*o));
		in->cap = cap;
	}
	for (uint64_t p = first; p <= last; p++) {
		unsigned char *b;
		ssize_t n;

		if (in->saved[p])
			continue;
		if (p * CF_PAGE >= in->dsize) {
			in->saved[p] = 1; /* past the durable end: zeros */
			continue;
		}
		if (g.undo_bytes + CF_PAGE > CF_UNDO_MAX_BYTES)
			return -ENOSPC;
		b = calloc(1, CF_PAGE);
		if (!b)
			return -ENOMEM;
		n = pread(fd, b, CF_PAGE, (off_t)(p * CF_PAGE));
		if (n < 0) {
			free(b);
			return -errno;
		}
		in->old[p] = b;
		in->saved[p] = 1;
		g.undo_bytes += CF_PAGE;
	}
	return 0;
}

/* Before bytes [off, off + len) of fd change. */
static int undo_range(int fd, uint64_t off, uint64_t len)
{
	struct stat st;

	if (!len)
		return 0;
	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return 0;
	return undo_save(inode_get(st.st_ino, 0, true), fd, off / CF_PAGE,
			 (off + len - 1) / CF_PAGE);
}

/* Before fd is cut or extended to size. */
static int undo_truncate(int fd, uint64_t size)
{
	struct stat st;

	if (fstat(fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode) || size >= (uint64_t)st.st_size)
		return 0;
	return undo_save(inode_get(st.st_ino, 0, true), fd, size / CF_PAGE,
			 ((uint64_t)st.st_size - 1) / CF_PAGE);
}

static void attic_link(const char *relpath, ino_t ino)
{
	char name[64];

	snprintf(name, sizeof(name), "f-%ju", (uintmax_t)ino);
	if (linkat(g.rootfd, relpath, g.atticfd, name, 0) && errno != EEXIST)
		fprintf(stderr, "crashfs: cannot link %s into the attic: %s\n",
			relpath, strerror(errno));
}

/* ---- directory listings (g.lock held) ---- */

static struct cf_dir *dir_get(ino_t ino, bool create)
{
	struct cf_dir **pp = &g.dirs[ino % CF_HASH], *d;

	for (d = *pp; d; d = d->next)
		if (d->ino == ino)
			return d;
	if (!create)
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		die("out of memory");
	d->ino = ino;
	d->next = *pp;
	*pp = d;
	return d;
}

static void list_del(struct cf_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->e[i].name, name)) {
			free(l->e[i].name);
			free(l->e[i].target);
			l->e[i] = l->e[--l->n];
			return;
		}
}

static void list_add(struct cf_list *l, const char *name, ino_t ino,
		     mode_t mode, const char *target)
{
	list_del(l, name);
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 8;
		l->e = realloc(l->e, l->cap * sizeof(*l->e));
		if (!l->e)
			die("out of memory");
	}
	l->e[l->n].name = strdup(name);
	l->e[l->n].ino = ino;
	l->e[l->n].mode = mode;
	l->e[l->n].target = target ? strdup(target) : NULL;
	if (!l->e[l->n].name || (target && !l->e[l->n].target))
		die("out of memory");
	l->n++;
}

static void list_copy(struct cf_list *to, const struct cf_list *from)
{
	while (to->n)
		list_del(to, to->e[to->n - 1].name);
	for (size_t i = 0; i < from->n; i++)
		list_add(to, from->e[i].name, from->e[i].ino,
			 from->e[i].mode, from->e[i].target);
}

/* The directory holding path (its listing), and the last name. */
static struct cf_dir *parent_of(const char *path, const char **name)
{
	char buf[PATH_MAX];
	struct stat st;

	*name = split(path, buf, sizeof(buf));
	if (fstatat(g.rootfd, rel(buf), &st, AT_SYMLINK_NOFOLLOW))
		return NULL;
	return dir_get(st.st_ino, true);
}

/* A new name in the live tree: into its directory's current entries
 * (and durable ones in --meta ordered), and a new file into the attic. */
static void name_added(const char *path)
{
	char target[PATH_MAX];
	const char *name;
	struct cf_dir *d = parent_of(path, &name);
	struct stat st;
	ssize_t n;

	if (!d || fstatat(g.rootfd, rel(path), &st, AT_SYMLINK_NOFOLLOW))
		return;
	target[0] = '\0';
	if (S_ISLNK(st.st_mode) &&
	    (n = readlinkat(g.rootfd, rel(path), target,
			    sizeof(target) - 1)) >= 0)
		target[n] = '\0';
	list_add(&d->cur, name, st.st_ino, st.st_mode,
		 S_ISLNK(st.st_mode) ? target : NULL);
	if (S_ISREG(st.st_mode) && !inode_get(st.st_ino, 0, false)) {
		inode_get(st.st_ino, 0, true);
		attic_link(rel(path), st.st_ino);
	}
	if (S_ISDIR(st.st_mode))
		dir_get(st.st_ino, true);
}

static void name_removed(const char *path)
{
	const char *name;
	struct cf_dir *d = parent_of(path, &name);

	if (d)
		list_del(&d->cur, name);
}

/* Takes the live tree as it is (at mount) as durable. */
static void scan(int dfd, ino_t dino)
{
	struct cf_dir *d = dir_get(dino, true);
	DIR *dir = fdopendir(dfd);
	struct dirent *de;

	if (!dir)
		die("cannot read the backing tree: %s", strerror(errno));
	while ((de = readdir(dir))) {
		char target[PATH_MAX] = "";
		struct stat st;
		ssize_t n;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISLNK(st.st_mode) &&
		    (n = readlinkat(dfd, de->d_name, target,
				    sizeof(target) - 1)) >= 0)
			target[n] = '\0';
		list_add(&d->cur, de->d_name, st.st_ino, st.st_mode,
			 S_ISLNK(st.st_mode) ? target : NULL);
		if (S_ISREG(st.st_mode) && !inode_get(st.st_ino, 0, false)) {
			char name[64];

			inode_get(st.st_ino, (uint64_t)st.st_size, true);
			snprintf(name, sizeof(name), "f-%ju",
				 (uintmax_t)st.st_ino);
			if (linkat(dfd, de->d_name, g.atticfd, name, 0) &&
			    errno != EEXIST)
				die("cannot link into the attic: %s",
				    strerror(errno));
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dfd, de->d_name, O_RDONLY |
					 O_DIRECTORY | O_CLOEXEC);

			if (sub < 0)
				die("cannot open %s: %s", de->d_name,
				    strerror(errno));
			scan(sub, st.st_ino);
		}
	}
	list_copy(&d->dur, &d->cur);
	closedir(dir);
}

/* ---- the crash ---- */

static void freeze_locked(const char *what, const char *path)
{
	char line[PATH_MAX + 64];
	int fd;

	g.frozen = 1;
	g.frozen_op = g.ops;
	snprintf(line, sizeof(line), "op %" PRIu64 " %s %s\n", g.ops, what,
		 path ? path : "-");
	fd = openat(g.statefd, "frozen", O_WRONLY | O_CREAT | O_TRUNC |
		    O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, line, strlen(line)) < 0)
			fprintf(stderr, "crashfs: writing frozen: %s\n",
				strerror(errno));
		close(fd);
	}
}

/* A frozen disk: wait until the caller goes away, then EIO. */
static int frozen_wait(void)
{
	struct fuse_context *ctx = fuse_get_context();
	struct fuse_session *se = ctx && ctx->fuse ?
				  fuse_get_session(ctx->fuse) : NULL;

	if (g.freeze_eio)
		return -EIO;
	for (int ms = 0; ms < CF_FREEZE_MAX_MS; ms += 10) {
		if (g.release || fuse_interrupted() ||
		    (se && fuse_session_exited(se)))
			break;
		usleep(10000);
	}
	return -EIO;
}

/* Numbers a changing operation; 0 with g.lock held, or the error to
 * return (frozen) without it. */
static int op_begin(const char *what, const char *path)
{
	pthread_mutex_lock(&g.lock);
	if (!g.frozen) {
		g.ops++;
		if (!g.crash_at || g.ops < g.crash_at) {
			if (g.oplog)
				fprintf(g.oplog, "%" PRIu64 " %s %s\n", g.ops,
					what, path ? path : "-");
			return 0;
		}
		freeze_locked(what, path);
	}
	pthread_mutex_unlock(&g.lock);
	return frozen_wait();
}

static int op_end(int rc)
{
	pthread_mutex_unlock(&g.lock);
	return rc;
}

static int ro_begin(void)
{
	return g.frozen ? frozen_wait() : 0;
}

static void on_usr1(int sig)
{
	(void)sig;
	g.frozen = 1;
}

static void on_usr2(int sig)
{
	(void)sig;
	g.release = 1;
}

/* ---- FUSE operations: reads ---- */

static int cf_getattr(const char *path, struct stat *st,
		      struct fuse_file_info *fi)
{
	int rc = ro_begin();

	if (rc)
		return rc;
	if (fi)
		rc = fstat(((struct cf_open *)(uintptr_t)fi->fh)->fd, st);
	else
		rc = fstatat(g.rootfd, rel(path), st, AT_SYMLINK_NOFOLLOW);
	if (rc)
		return -errno;
	/* Not the attic's link (SQLite logs a warning at st_nlink > 1). */
	if (S_ISREG(st->st_mode) && st->st_nlink > 0)
		st->st_nlink--;
	return 0;
}

static int cf_access(const char *path, int mask)
{
	int rc = ro_begin();

	if (rc)
		return rc;
	return faccessat(g.rootfd, rel(path), mask, 0) ? -errno : 0;
}

static int cf_readlink(const char *path, char *buf, size_t size)
{
	int rc = ro_begin();
	ssize_t n;

	if (rc)
		return rc;
	n = readlinkat(g.rootfd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int cf_opendir(const char *path, struct fuse_file_info *fi)
{
	int rc = ro_begin(), fd;

	if (rc)
		return rc;
	fd = openat(g.rootfd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int cf_readdir(const char *path, void *buf, fuse_fill_dir_t fill,
		      off_t off, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	int rc = ro_begin(), fd;
	struct dirent *de;
	DIR *d;

	(void)path;
	(void)off;
	(void)flags;
	if (rc)
		return rc;
	fd = dup((int)fi->fh);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		struct stat st = { .st_ino = de->d_ino,
				   .st_mode = (mode_t)de->d_type << 12 };

		if (fill(buf, de->d_name, &st, 0, 0))
			break;
	}
	closedir(d);
	return 0;
}

static int cf_releasedir(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh);
	return 0;
}

static int cf_read(const char *path, char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	int rc = ro_begin();
	ssize_t n;

	(void)path;
	if (rc)
		return rc;
	n = pread(((struct cf_open *)(uintptr_t)fi->fh)->fd, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int cf_statfs(const char *path, struct statvfs *sv)
{
	(void)path;
	return fstatvfs(g.rootfd, sv) ? -errno : 0;
}

static int cf_getxattr(const char *path, const char *name, char *v,
		       size_t size)
{
	char p[PATH_MAX];
	ssize_t n;
	int rc = ro_begin();

	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/root%s", g.state, path);
	n = lgetxattr(p, name, v, size);
	return n < 0 ? -errno : (int)n;
}

static int cf_listxattr(const char *path, char *list, size_t size)
{
	char p[PATH_MAX];
	ssize_t n;
	int rc = ro_begin();

	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/root%s", g.state, path);
	n = llistxattr(p, list, size);
	return n < 0 ? -errno : (int)n;
}

/* ---- FUSE operations: changes ---- */

static int open_common(const char *path, struct fuse_file_info *fi,
		       mode_t mode, bool create)
{
	/* Readable, for the undo log; the kernel gives the offset of each
	 * write (O_APPEND) and the alignment O_DIRECT needs is not ours. */
	int flags = fi->flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_APPEND |
				  O_DIRECT | O_ACCMODE | O_SYNC | O_DSYNC);
	struct cf_open *o;
	bool existed = true;
	struct stat st;
	int fd, rc = 0;

	if (create) {
		existed = !fstatat(g.rootfd, rel(path), &st,
				   AT_SYMLINK_NOFOLLOW);
		flags |= O_CREAT | (fi->flags & O_EXCL);
	}
	if (existed && (fi->flags & O_TRUNC)) {
		fd = openat(g.rootfd, rel(path), O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			rc = undo_truncate(fd, 0);
			close(fd);
		}
		if (rc)
			return rc;
	}
	flags |= (fi->flags & O_ACCMODE) == O_RDONLY ? O_RDONLY : O_RDWR;
	fd = openat(g.rootfd, rel(path), flags | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !(o = malloc(sizeof(*o)))) {
		rc = -errno;
		close(fd);
		return rc ? rc : -ENOMEM;
	}
	o->fd = fd;
	o->ino = st.st_ino;
	snprintf(o->path, sizeof(o->path), "%s", path);
	fi->fh = (uint64_t)(uintptr_t)o;
	if (create && !existed)
		name_added(path);
	return 0;
}

static int cf_open(const char *path, struct fuse_file_info *fi)
{
	int rc;

	if (!(fi->flags & O_TRUNC)) {
		rc = ro_begin();
		if (rc)
			return rc;
		pthread_mutex_lock(&g.lock);
		return op_end(open_common(path, fi, 0, false));
	}
	rc = op_begin("open-trunc", path);
	if (rc)
		return rc;
	return op_end(open_common(path, fi, 0, false));
}

static int cf_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int rc = op_begin("create", path);

	if (rc)
		return rc;
	return op_end(open_common(path, fi, mode, true));
}

static int cf_release(const char *path, struct fuse_file_info *fi)
{
	struct cf_open *o = (struct cf_open *)(uintptr_t)fi->fh;

	(void)path;
	close(o->fd);
	free(o);
	return 0;
}

static int cf_flush(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	(void)fi;
	return 0;
}

static int cf_write(const char *path, const char *buf, size_t size,
		    off_t off, struct fuse_file_info *fi)
{
	struct cf_open *o = (struct cf_open *)(uintptr_t)fi->fh;
	int rc = op_begin("write", path ? path : o->path);
	ssize_t n;

	if (rc)
		return rc;
	rc = undo_range(o->fd, (uint64_t)off, size);
	if (rc)
		return op_end(rc);
	n = pwrite(o->fd, buf, size, off);
	return op_end(n < 0 ? -errno : (int)n);
}

static int cf_truncate(const char *path, off_t size,
		       struct fuse_file_info *fi)
{
	int rc = op_begin("truncate", path ? path : fi ?
			  ((struct cf_open *)(uintptr_t)fi->fh)->path : "-"), fd;

	if (rc)
		return rc;
	fd = fi ? ((struct cf_open *)(uintptr_t)fi->fh)->fd :
	     openat(g.rootfd, rel(path), O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return op_end(-errno);
	rc = undo_truncate(fd, (uint64_t)size);
	if (!rc && ftruncate(fd, size))
		rc = -errno;
	if (!fi)
		close(fd);
	return op_end(rc);
}

static int cf_fallocate(const char *path, int mode, off_t off, off_t len,
			struct fuse_file_info *fi)
{
	struct cf_open *o = (struct cf_open *)(uintptr_t)fi->fh;
	int rc = op_begin("fallocate", path ? path : o->path);

	if (rc)
		return rc;
	rc = undo_range(o->fd, (uint64_t)off, (uint64_t)len);
	if (!rc && fallocate(o->fd, mode, off, len))
		rc = -errno;
	return op_end(rc);
}

static int cf_fsync(const char *path, int datasync,
		    struct fuse_file_info *fi)
{
	struct cf_open *o = (struct cf_open *)(uintptr_t)fi->fh;
	int rc = op_begin(datasync ? "fdatasync" : "fsync",
			  path ? path : o->path);
	struct cf_inode *in;
	struct stat st;

	if (rc)
		return rc;
	/* The live tree is never crashed: no need to sync it for real. */
	if (fstat(o->fd, &st))
		return op_end(-errno);
	in = inode_get(st.st_ino, 0, true);
	undo_clear(in);
	in->dsize = (uint64_t)st.st_size;
	return op_end(0);
}

static int cf_fsyncdir(const char *path, int datasync,
		       struct fuse_file_info *fi)
{
	int rc = op_begin("fsyncdir", path);
	struct cf_dir *d;
	struct stat st;

	(void)datasync;
	if (rc)
		return rc;
	if (fstat((int)fi->fh, &st))
		return op_end(-errno);
	d = dir_get(st.st_ino, true);
	list_copy(&d->dur, &d->cur);
	return op_end(0);
}

static int cf_mknod(const char *path, mode_t mode, dev_t dev)
{
	int rc = op_begin("mknod", path);

	if (rc)
		return rc;
	if (mknodat(g.rootfd, rel(path), mode, dev))
		return op_end(-errno);
	name_added(path);
	return op_end(0);
}

static int cf_mkdir(const char *path, mode_t mode)
{
	int rc = op_begin("mkdir", path);

	if (rc)
		return rc;
	if (mkdirat(g.rootfd, rel(path), mode))
		return op_end(-errno);
	name_added(path);
	return op_end(0);
}

static int cf_symlink(const char *target, const char *path)
{
	int rc = op_begin("symlink", path);

	if (rc)
		return rc;
	if (symlinkat(target, g.rootfd, rel(path)))
		return op_end(-errno);
	name_added(path);
	return op_end(0);
}

static int cf_link(const char *from, const char *to)
{
	int rc = op_begin("link", to);

	if (rc)
		return rc;
	if (linkat(g.rootfd, rel(from), g.rootfd, rel(to), 0))
		return op_end(-errno);
	name_added(to);
	return op_end(0);
}

static int cf_unlink(const char *path)
{
	int rc = op_begin("unlink", path);

	if (rc)
		return rc;
	if (unlinkat(g.rootfd, rel(path), 0))
		return op_end(-errno);
	name_removed(path);
	return op_end(0);
}

/* rmdir moves the directory into the attic, so that its inode (and its
 * number) lives on while a durable listing may still name it. */
static int cf_rmdir(const char *path)
{
	int rc = op_begin("rmdir", path), fd;
	char name[64];
	struct stat st;
	struct dirent *de;
	DIR *d;

	if (rc)
		return rc;
	fd = openat(g.rootfd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !(d = fdopendir(fd))) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return op_end(rc);
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = -ENOTEMPTY;
	closedir(d);
	if (rc)
		return op_end(rc);
	snprintf(name, sizeof(name), "d-%ju", (uintmax_t)st.st_ino);
	name_removed(path);
	if (renameat(g.rootfd, rel(path), g.atticfd, name))
		return op_end(-errno);
	return op_end(0);
}

static int cf_rename(const char *from, const char *to, unsigned int flags)
{
	int rc = op_begin("rename", from);

	if (rc)
		return rc;
	if (renameat2(g.rootfd, rel(from), g.rootfd, rel(to), flags))
		return op_end(-errno);
	name_removed(to);
	name_removed(from);
	name_added(to);
	if (flags & RENAME_EXCHANGE)
		name_added(from);
	return op_end(0);
}

static int cf_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int rc = op_begin("chmod", path);

	if (rc)
		return rc;
	if (fi)
		rc = fchmod(((struct cf_open *)(uintptr_t)fi->fh)->fd, mode);
	else
		rc = fchmodat(g.rootfd, rel(path), mode, 0);
	return op_end(rc ? -errno : 0);
}

static int cf_chown(const char *path, uid_t uid, gid_t gid,
		    struct fuse_file_info *fi)
{
	int rc = op_begin("chown", path);

	if (rc)
		return rc;
	if (fi)
		rc = fchown(((struct cf_open *)(uintptr_t)fi->fh)->fd, uid,
			    gid);
	else
		rc = fchownat(g.rootfd, rel(path), uid, gid,
			      AT_SYMLINK_NOFOLLOW);
	return op_end(rc ? -errno : 0);
}

static int cf_utimens(const char *path, const struct timespec ts[2],
		      struct fuse_file_info *fi)
{
	int rc = op_begin("utimens", path);

	if (rc)
		return rc;
	if (fi)
		rc = futimens(((struct cf_open *)(uintptr_t)fi->fh)->fd, ts);
	else
		rc = utimensat(g.rootfd, rel(path), ts, AT_SYMLINK_NOFOLLOW);
	return op_end(rc ? -errno : 0);
}

static int cf_setxattr(const char *path, const char *name, const char *v,
		       size_t size, int flags)
{
	char p[PATH_MAX];
	int rc = op_begin("setxattr", path);

	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/root%s", g.state, path);
	return op_end(lsetxattr(p, name, v, size, flags) ? -errno : 0);
}

static int cf_removexattr(const char *path, const char *name)
{
	char p[PATH_MAX];
	int rc = op_begin("removexattr", path);

	if (rc)
		return rc;
	snprintf(p, sizeof(p), "%s/root%s", g.state, path);
	return op_end(lremovexattr(p, name) ? -errno : 0);
}

/* ---- the tree after the crash ---- */

/* Writes file ino as the crash leaves it to out/name (outfd). */
static void out_file(int outfd, const char *name, ino_t ino, mode_t mode)
{
	unsigned char *page = malloc(CF_PAGE), *zero = calloc(1, CF_PAGE);
	struct cf_inode *in = inode_get(ino, 0, false);
	uint64_t size, cur;
	char an[64];
	struct stat st;
	int src, dst;

	snprintf(an, sizeof(an), "f-%ju", (uintmax_t)ino);
	src = openat(g.atticfd, an, O_RDONLY | O_CLOEXEC);
	dst = openat(outfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
		     mode & 07777);
	if (!page || !zero || src < 0 || dst < 0 || fstat(src, &st))
		die("cannot write %s after the crash: %s", name,
		    strerror(errno));
	cur = (uint64_t)st.st_size;
	size = !in || g.keep ? cur : g.tear && (rnd() & 1) ? cur : in->dsize;
	for (uint64_t p = 0; p * CF_PAGE < size; p++) {
		const unsigned char *b = page;
		bool changed = in && !g.keep && p < in->cap && in->saved[p];

		if (changed && (!g.tear || (rnd() & 1))) {
			b = in->old[p] ? in->old[p] : zero;
		} else {
			ssize_t n = p * CF_PAGE < cur ?
				    pread(src, page, CF_PAGE,
					  (off_t)(p * CF_PAGE)) : 0;

			if (n < 0)
				die("reading %s: %s", an, strerror(errno));
			memset(page + n, 0, CF_PAGE - (size_t)n);
		}
		if (memcmp(b, zero, CF_PAGE) &&
		    pwrite(dst, b, CF_PAGE, (off_t)(p * CF_PAGE)) != CF_PAGE)
			die("writing %s: %s", name, strerror(errno));
	}
	if (ftruncate(dst, (off_t)size))
		die("truncating %s: %s", name, strerror(errno));
	close(src);
	close(dst);
	free(page);
	free(zero);
}

static void out_dir(int outfd, ino_t ino, ino_t *stack, int depth)
{
	struct cf_dir *d = dir_get(ino, false);
	struct cf_list *l;

	if (!d || depth >= CF_DEPTH_MAX)
		return;
	for (int i = 0; i < depth; i++)
		if (stack[i] == ino)
			return; /* a loop made of old and new listings */
	stack[depth] = ino;
	l = !g.dirsync || g.keep || (g.tear && (rnd() & 1)) ? &d->cur :
							      &d->dur;
	for (size_t i = 0; i < l->n; i++) {
		struct cf_ent *e = &l->e[i];

		if (S_ISDIR(e->mode)) {
			int sub;

			if (mkdirat(outfd, e->name, e->mode & 07777))
				die("mkdir %s: %s", e->name, strerror(errno));
			sub = openat(outfd, e->name, O_RDONLY | O_DIRECTORY |
				     O_CLOEXEC);
			if (sub < 0)
				die("open %s: %s", e->name, strerror(errno));
			out_dir(sub, e->ino, stack, depth + 1);
			close(sub);
		} else if (S_ISREG(e->mode)) {
			out_file(outfd, e->name, e->ino, e->mode);
		} else if (S_ISLNK(e->mode) && e->target) {
			if (symlinkat(e->target, outfd, e->name))
				die("symlink %s: %s", e->name,
				    strerror(errno));
		}
	}
}

static void materialise(void)
{
	ino_t stack[CF_DEPTH_MAX];
	struct stat st;
	FILE *f;
	int outfd;

	if (fstat(g.rootfd, &st))
		die("stat of the root: %s", strerror(errno));
	if (mkdirat(g.statefd, "out.tmp", 0755))
		die("cannot create %s/out.tmp: %s", g.state, strerror(errno));
	outfd = openat(g.statefd, "out.tmp", O_RDONLY | O_DIRECTORY |
		       O_CLOEXEC);
	if (outfd < 0)
		die("open out.tmp: %s", strerror(errno));
	g.rng = g.seed * 0x9E3779B97F4A7C15ull + 1;
	out_dir(outfd, st.st_ino, stack, 0);
	close(outfd);
	if (renameat(g.statefd, "out.tmp", g.statefd, "out"))
		die("rename out.tmp: %s", strerror(errno));
	f = fdopen(openat(g.statefd, "ops", O_WRONLY | O_CREAT | O_TRUNC |
			  O_CLOEXEC, 0644), "w");
	if (f) {
		fprintf(f, "ops %" PRIu64 "\nfrozen %" PRIu64 "\n", g.ops,
			g.frozen_op);
		fclose(f);
	}
}

static void *cf_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	/* Every write reaches us when it is made, in order. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	cfg->hard_remove = 1;   /* no .fuse_hidden renames */
	cfg->nullpath_ok = 1;
	cfg->use_ino = 1;
	return NULL;
}

static void cf_destroy(void *priv)
{
	(void)priv;
	pthread_mutex_lock(&g.lock);
	if (g.oplog)
		fclose(g.oplog);
	g.oplog = NULL;
	materialise();
	pthread_mutex_unlock(&g.lock);
}

static const struct fuse_operations cf_ops = {
	.init = cf_init,
	.destroy = cf_destroy,
	.getattr = cf_getattr,
	.access = cf_access,
	.readlink = cf_readlink,
	.opendir = cf_opendir,
	.readdir = cf_readdir,
	.releasedir = cf_releasedir,
	.fsyncdir = cf_fsyncdir,
	.mknod = cf_mknod,
	.mkdir = cf_mkdir,
	.symlink = cf_symlink,
	.unlink = cf_unlink,
	.rmdir = cf_rmdir,
	.rename = cf_rename,
	.link = cf_link,
	.chmod = cf_chmod,
	.chown = cf_chown,
	.truncate = cf_truncate,
	.utimens = cf_utimens,
	.open = cf_open,
	.create = cf_create,
	.read = cf_read,
	.write = cf_write,
	.statfs = cf_statfs,
	.flush = cf_flush,
	.release = cf_release,
	.fsync = cf_fsync,
	.fallocate = cf_fallocate,
	.setxattr = cf_setxattr,
	.getxattr = cf_getxattr,
	.listxattr = cf_listxattr,
	.removexattr = cf_removexattr,
};

static void usage(void)
{
	fprintf(stderr, "usage: crashfs [--crash-at N] [--mode drop|tear|keep] "
		"[--meta ordered|dirsync] [--freeze block|eio] [--seed S] "
		"[--log] STATE MOUNTPOINT\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "crash-at", required_argument, 0, 'c' },
		{ "mode", required_argument, 0, 'm' },
		{ "meta", required_argument, 0, 'M' },
		{ "freeze", required_argument, 0, 'f' },
		{ "seed", required_argument, 0, 's' },
		{ "log", no_argument, 0, 'l' },
		{ NULL, 0, NULL, 0 }
	};
	char path[PATH_MAX];
	struct sigaction sa;
	int ch, fd;

	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'c': g.crash_at = strtoull(optarg, NULL, 10); break;
		case 'm':
			if (strcmp(optarg, "drop") && strcmp(optarg, "tear") &&
			    strcmp(optarg, "keep"))
				usage();
			g.tear = !strcmp(optarg, "tear");
			g.keep = !strcmp(optarg, "keep");
			break;
		case 'M':
			if (strcmp(optarg, "ordered") &&
			    strcmp(optarg, "dirsync"))
				usage();
			g.dirsync = !strcmp(optarg, "dirsync");
			break;
		case 'f':
			if (strcmp(optarg, "block") && strcmp(optarg, "eio"))
				usage();
			g.freeze_eio = !strcmp(optarg, "eio");
			break;
		case 's': g.seed = strtoull(optarg, NULL, 10); break;
		case 'l': g.log = true; break;
		default: usage();
		}
	}
	if (argc - optind != 2)
		usage();
	g.state = argv[optind];
	g.statefd = open(g.state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g.statefd < 0)
		die("cannot open %s: %s", g.state, strerror(errno));
	mkdirat(g.statefd, "root", 0755);
	if (mkdirat(g.statefd, "attic", 0700))
		die("%s/attic: %s (give crashfs a fresh state directory)",
		    g.state, strerror(errno));
	if (!faccessat(g.statefd, "out", F_OK, 0))
		die("%s/out exists already", g.state);
	g.rootfd = openat(g.statefd, "root", O_RDONLY | O_DIRECTORY |
			  O_CLOEXEC);
	g.atticfd = openat(g.statefd, "attic", O_RDONLY | O_DIRECTORY |
			   O_CLOEXEC);
	if (g.rootfd < 0 || g.atticfd < 0)
		die("cannot open %s/root: %s", g.state, strerror(errno));
	fd = dup(g.rootfd);
	if (fd < 0)
		die("dup: %s", strerror(errno));
	{
		struct stat st;

		if (fstat(g.rootfd, &st))
			die("stat: %s", strerror(errno));
		scan(fd, st.st_ino);
	}
	if (g.log) {
		fd = openat(g.statefd, "oplog", O_WRONLY | O_CREAT | O_TRUNC |
			    O_CLOEXEC, 0644);
		g.oplog = fd >= 0 ? fdopen(fd, "w") : NULL;
		if (g.oplog)
			setvbuf(g.oplog, NULL, _IOLBF, 0);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_usr2;
	sigaction(SIGUSR2, &sa, NULL);
	snprintf(path, sizeof(path), "%s", argv[optind + 1]);
	{
		char *fargv[] = { argv[0], "-f", "-o",
				  "fsname=crashfs", path, NULL };

		return fuse_main(5, fargv, &cf_ops, NULL);
	}
}
