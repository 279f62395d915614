/* SPDX-License-Identifier: MIT */
/*
 * takeover.c - what a new daemon needs to serve a mount whose daemon died
 * (docs/keeper.md): the takeover region, its journal of the kernel's node
 * ids, hard links and open handles, the INIT that the kernel sent, and
 * the hand-over of /dev/fuse to the keeper.  The layout is in tk_int.h;
 * a new daemon reads the journal back in tk_replay.c.
 *
 * The region is a memfd that the keeper (tools/fmfs_keeper.c) creates and
 * every daemon of the mount inherits, mapped shared: what a daemon wrote
 * to it is there after a kill -9.  It holds a head (the INIT request, the
 * counters `fmfs status` shows, why a takeover would not be trusted) and
 * two halves, each a log of records.  A record is written before the
 * reply that tells the kernel of it (a new node id, an open handle) and
 * only then made part of the log by moving `state` (half and end, one
 * 64-bit store): a record cut short by a crash is not in the log, and
 * the kernel cannot know of what it describes.  A log past half its room
 * is compacted: the live inodes, links and handles written to the other
 * half, then `state` flipped to it.
 *
 * The new daemon replays the log into its inode table before it serves
 * (tk_replay.c); each open handle of the dead daemon is reopened here:
 * a file's before anything is served (reopen_eager), a directory's at
 * its first use (fs_tk_handle).  Handles get a
 * tag in their low 4 bits (fs->tk_tag, one per daemon of the mount): an
 * fh whose tag is not ours is a dead daemon's.  What cannot be trusted
 * ends the new daemon with FS_TK_EXIT_REFUSED, and the keeper gives the
 * mount up as it would be without one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tk_int.h"

/* Takeover times are shown as dates: the wall clock, in ms. */
static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t rec_size(size_t namelen)
{
	return (sizeof(struct tk_rec) + namelen + 1 + 7) & ~(size_t)7;
}

int fs_tk_region_create(void)
{
	int fd = memfd_create("fmfs-takeover", 0);
	struct tk_head *h;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, TK_HEAD + 2 * (off_t)TK_HALF + FS_TKR_SIZE +
		      FS_TKI_SIZE)) {
		int e = errno;

		close(fd);
		return -e;
	}
	h = mmap(NULL, TK_HEAD, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		int e = errno;

		close(fd);
		return -e;
	}
	memcpy(h->magic, TK_MAGIC, sizeof(h->magic));
	atomic_store(&h->keeper_pid, (int32_t)getpid());
	munmap(h, TK_HEAD);
	return fd;
}

static struct tk_head *head_map(int fd)
{
	struct tk_head *h = mmap(NULL, TK_HEAD, PROT_READ | PROT_WRITE,
				 MAP_SHARED, fd, 0);

	if (h == MAP_FAILED)
		return NULL;
	if (memcmp(h->magic, TK_MAGIC, sizeof(h->magic))) {
		munmap(h, TK_HEAD);
		return NULL;
	}
	return h;
}

int fs_tk_region_begin(int fd, const char *cause, char *why, size_t wl)
{
	struct tk_head *h = head_map(fd);
	int rc = 0;

	if (!h) {
		snprintf(why, wl, "the takeover region is unreadable");
		return -EINVAL;
	}
	atomic_store(&h->last_ms, wall_ms());
	atomic_store(&h->last_took_ms, -1);
	atomic_store(&h->resent, 0);
	atomic_store(&h->given, 0);
	atomic_store(&h->done_before, 0);
	snprintf(h->cause, sizeof(h->cause), "%s", cause);
	h->refused[0] = '\0';
	if (atomic_load(&h->flags) & TK_F_RING) {
		snprintf(why, wl, "the mount used FUSE over io_uring, whose "
			 "requests in flight cannot be sent again");
		rc = -EOPNOTSUPP;
	} else if (atomic_load(&h->flags) & TK_F_FULL) {
		snprintf(why, wl, "the journal of node ids ran out of room");
		rc = -ENOSPC;
	} else if (!h->init_len) {
		snprintf(why, wl, "the daemon had not been through INIT");
		rc = -EINVAL;
	} else if (h->init_len < 48 || h->init[44] < 40 ||
		   h->init[40] != 7) {
		/* fuse_init_in: major at 40, minor at 44 (one byte will do:
		 * minor < 256).  FUSE_NOTIFY_RESEND is protocol 7.40. */
		snprintf(why, wl, "the kernel lacks FUSE_NOTIFY_RESEND "
			 "(protocol 7.40, Linux 6.9)");
		rc = -EOPNOTSUPP;
	}
	if (!rc)
		atomic_fetch_add(&h->takeovers, 1);
	else
		snprintf(h->refused, sizeof(h->refused), "%s", why);
	munmap(h, TK_HEAD);
	return rc;
}

int fs_tk_region_refused(int fd, char *why, size_t wl)
{
	struct tk_head *h = head_map(fd);

	if (!h)
		return -EINVAL;
	snprintf(why, wl, "%s", h->refused[0] ? h->refused : "unknown");
	munmap(h, TK_HEAD);
	return 0;
}

/* One byte with a descriptor beside it (SCM_RIGHTS). */
struct fd_msg {
	char c;
	struct iovec iov;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m;
};

static void fd_msg_init(struct fd_msg *x)
{
	memset(x, 0, sizeof(*x));
	x->c = 'F';
	x->iov.iov_base = &x->c;
	x->iov.iov_len = 1;
	x->m.msg_iov = &x->iov;
	x->m.msg_iovlen = 1;
	x->m.msg_control = x->u.buf;
	x->m.msg_controllen = sizeof(x->u.buf);
}

int fs_tk_send_fd(int sock, int fd)
{
	struct fd_msg x;
	struct cmsghdr *cm;

	fd_msg_init(&x);
	cm = CMSG_FIRSTHDR(&x.m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &x.m, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

int fs_tk_recv_fd(int sock)
{
	struct fd_msg x;
	struct cmsghdr *cm;
	ssize_t n;
	int fd;

	fd_msg_init(&x);
	do
		n = recvmsg(sock, &x.m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n < 0 ? -errno : -ENODATA;
	cm = CMSG_FIRSTHDR(&x.m);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/* --- the log --- */

/* Appends a record: t->lock held.  A full log is compacted first; if it
 * stays full, takeovers of this mount are off (TK_F_FULL). */
/* Writes a record at *st's end and moves *st past it, not yet part of
 * the log (t->lock held): false when the log is full. */
static bool put_locked(struct fs_tk *t, uint64_t *st, uint32_t type,
		       uint64_t a, uint64_t b, uint32_t c, uint32_t d,
		       const char *name)
{
	size_t nl = name ? strlen(name) : 0, sz = rec_size(nl);
	uint64_t end = *st & ~(1ull << 63);
	struct tk_rec *r;

	if (end + sz > TK_HALF) {
		atomic_fetch_or(&t->head->flags, TK_F_FULL);
		return false;
	}
	r = (struct tk_rec *)(tk_half_base(t, *st) + end);
	r->len = (uint32_t)sz;
	r->type = type;
	r->a = a;
	r->b = b;
	r->c = c;
	r->d = d;
	memcpy(r + 1, name ? name : "", nl + 1);
	*st += sz;
	return true;
}

static void append_locked(struct fs_tk *t, uint32_t type, uint64_t a,
			  uint64_t b, uint32_t c, uint32_t d, const char *name)
{
	uint64_t st = atomic_load(&t->head->state);

	if (put_locked(t, &st, type, a, b, c, d, name))
		atomic_store_explicit(&t->head->state, st,
				      memory_order_release);
}

static void append(struct fs *fs, uint32_t type, uint64_t a, uint64_t b,
		   uint32_t c, uint32_t d, const char *name)
{
	struct fs_tk *t = fs->tk;

	pthread_mutex_lock(&t->lock);
	append_locked(t, type, a, b, c, d, name);
	pthread_mutex_unlock(&t->lock);
}

void fs_tk_inode_new(struct fs *fs, const struct fs_inode *in)
{
	if (!fs->tk)
		return;
	atomic_store(&fs->tk->head->next_ino, fs->next_ino);
	append(fs, TK_INODE, in->ino, in->parent->ino, in->is_dir,
	       fs_ftype(in), fs_iname(in));
}

void fs_tk_inode_move(struct fs *fs, const struct fs_inode *in)
{
	if (!fs->tk)
		return;
	fs_tk_maybe_compact(fs);
	append(fs, TK_MOVE, in->ino, in->parent->ino, 0, 0, fs_iname(in));
}

void fs_tk_inode_unlinked(struct fs *fs, const struct fs_inode *in)
{
	if (!fs->tk)
		return;
	fs_tk_maybe_compact(fs);
	append(fs, TK_UNLINKED, in->ino, 0, 0, 0, NULL);
}

void fs_tk_inode_drop(struct fs *fs, fuse_ino_t ino)
{
	if (!fs->tk)
		return;
	fs_tk_maybe_compact(fs);
	append(fs, TK_DROP, ino, 0, 0, 0, NULL);
}

void fs_tk_dir_times(struct fs *fs, const struct fs_inode *in)
{
	uint64_t c = (uint64_t)in->ctime_ns;

	if (!fs->tk || !in->has_attr)
		return;
	fs_tk_maybe_compact(fs);
	append(fs, TK_DIRTIME, in->ino, (uint64_t)in->mtime_ns, (uint32_t)c,
	       (uint32_t)(c >> 32), NULL);
}

void fs_tk_link(struct fs *fs, const struct fs_inode *in,
		const struct fs_inode *dir, const char *name, bool gone,
		const struct fs_inode *ndir, const char *nname)
{
	struct fs_tk *t = fs->tk;
	uint64_t st;
	bool ok;

	if (!t)
		return;
	fs_tk_maybe_compact(fs);
	pthread_mutex_lock(&t->lock);
	/* a move is both records or neither: one store of state */
	st = atomic_load(&t->head->state);
	ok = put_locked(t, &st, gone ? TK_LINKGONE : TK_LINK, in->ino,
			dir->ino, 0, 0, name);
	if (ok && ndir)
		ok = put_locked(t, &st, TK_LINK, in->ino, ndir->ino, 0, 0,
				nname);
	if (ok)
		atomic_store_explicit(&t->head->state, st,
				      memory_order_release);
	pthread_mutex_unlock(&t->lock);
}

struct compact_links {
	char *dst;
	uint64_t end;
	bool full;
};

static void compact_link(void *arg, const struct fs_inode *in,
			 const struct fs_inode *dir, const char *name)
{
	struct compact_links *x = arg;
	size_t sz = rec_size(strlen(name));
	struct tk_rec *r = (struct tk_rec *)(x->dst + x->end);

	if (x->full || x->end + sz > TK_HALF) {
		x->full = true;
		return;
	}
	*r = (struct tk_rec){ .len = (uint32_t)sz, .type = TK_LINK,
		.a = in->ino, .b = dir->ino };
	memcpy(r + 1, name, strlen(name) + 1);
	x->end += sz;
}

/* A directory's times at dst + end (room checked): the new end. */
static uint64_t put_dirtime(char *dst, uint64_t end, const struct fs_inode *x)
{
	struct tk_rec *r = (struct tk_rec *)(dst + end);
	uint64_t c = (uint64_t)x->ctime_ns;

	*r = (struct tk_rec){ .len = (uint32_t)rec_size(0),
		.type = TK_DIRTIME, .a = x->ino, .b = (uint64_t)x->mtime_ns,
		.c = (uint32_t)c, .d = (uint32_t)(c >> 32) };
	((char *)(r + 1))[0] = '\0';
	return end + r->len;
}

/* Rewrites the log in the other half from fs's inode table, its hard
 * links and the live handles: fs->lock and t->lock held. */
static void compact_locked(struct fs *fs)
{
	struct fs_tk *t = fs->tk;
	uint64_t st = atomic_load(&t->head->state);
	uint64_t other = (st >> 63) ? 0 : 1ull << 63;

	/* Written to the other half; the flip of state is the last step,
	 * so that a crash before it leaves the old log whole. */
	char *dst = tk_half_base(t, other);
	uint64_t end = 0;

	for (size_t b = 0; b < fs->nbuckets; b++)
		for (struct fs_inode *x = fs->by_ino[b]; x; x = x->next_ino) {
			size_t sz = rec_size(strlen(fs_iname(x)));
			struct tk_rec *r = (struct tk_rec *)(dst + end);

			if (end + sz + 2 * rec_size(0) > TK_HALF)
				goto full;
			if (x == fs->root) { /* its times only */
				if (x->has_attr)
					end = put_dirtime(dst, end, x);
				continue;
			}
			*r = (struct tk_rec){ .len = (uint32_t)sz,
				.type = TK_INODE, .a = x->ino,
				.b = x->parent->ino, .c = x->is_dir,
				.d = fs_ftype(x) };
			memcpy(r + 1, fs_iname(x), strlen(fs_iname(x)) + 1);
			end += sz;
			if (x->unlinked) {
				r = (struct tk_rec *)(dst + end);
				*r = (struct tk_rec){ .len =
					(uint32_t)rec_size(0),
					.type = TK_UNLINKED, .a = x->ino };
				((char *)(r + 1))[0] = '\0';
				end += r->len;
			}
			if (x->is_dir && (x->has_attr || fs_xr(x)->tk_times))
				end = put_dirtime(dst, end, x);
		}
	{
		/* after every inode: a link's file and directory first */
		struct compact_links cl = { dst, end, false };

		fs_links_each(fs, compact_link, &cl);
		if (cl.full)
			goto full;
		end = cl.end;
	}
	for (struct tk_old *o = t->live; o; o = o->next) {
		struct tk_rec *r = (struct tk_rec *)(dst + end);

		if (end + rec_size(0) > TK_HALF)
			goto full;
		*r = (struct tk_rec){ .len = (uint32_t)rec_size(0),
			.type = TK_OPEN, .a = o->fh, .b = o->ino,
			.c = o->flags, .d = o->kind };
		((char *)(r + 1))[0] = '\0';
		end += r->len;
	}
	atomic_store_explicit(&t->head->state, other | end,
			      memory_order_release);
	/* The old half is no log any more: its pages go back (they are
	 * shared memory, counted in the RSS of the daemon and the keeper
	 * until then), and read as zeros when written again. */
	madvise(tk_half_base(t, st), TK_HALF, MADV_REMOVE);
	return;
full:
	atomic_fetch_or(&t->head->flags, TK_F_FULL);
}

/* Whether the log is due a compaction: past TK_COMPACT_MIN, and grown
 * since the last one by half what the live inodes would take now
 * (ninodes, TK_REC_TYPICAL each), or by TK_COMPACT_MIN / 4 if more, so
 * that a live set is rewritten once per half its size appended.  A walk
 * that makes and drops inodes under the bound on them (--memory-inodes)
 * appends without end, and the log's pages are its memory: it stays
 * within 1.5 times the live set, and a compaction made while a walk held
 * many more inodes than it does now is followed by another soon
 * (docs/keeper.md).  ninodes 0: the least growth (a check without
 * fs->lock, which the caller repeats under it). */
static bool compact_due(struct fs_tk *t, size_t ninodes)
{
	uint64_t end = atomic_load(&t->head->state) & ~(1ull << 63);
	uint64_t want = (uint64_t)ninodes * TK_REC_TYPICAL / 2;

	if (want < TK_COMPACT_MIN / 4)
		want = TK_COMPACT_MIN / 4;
	return end >= TK_COMPACT_MIN && end >= t->compacted + want;
}

void fs_tk_maybe_compact(struct fs *fs)
{
	struct fs_tk *t = fs->tk;

	if (!t || !compact_due(t, fs->ninodes))
		return;
	pthread_mutex_lock(&t->lock);
	if (compact_due(t, fs->ninodes)) {
		compact_locked(fs);
		t->compacted = atomic_load(&t->head->state) & ~(1ull << 63);
	}
	pthread_mutex_unlock(&t->lock);
}

/* The same from a path that does not hold fs->lock (opens, closes):
 * the inode table is read under it, and fs->lock comes first. */
static void maybe_compact_unlocked(struct fs *fs)
{
	if (!compact_due(fs->tk, 0))
		return;
	pthread_mutex_lock(&fs->lock);
	fs_tk_maybe_compact(fs);
	pthread_mutex_unlock(&fs->lock);
}

void fs_tk_handle_open(struct fs *fs, uint64_t fh, fuse_ino_t ino,
		       int flags, int kind, int pt_id)
{
	struct fs_tk *t = fs->tk;
	struct tk_old *o;

	if (!t)
		return;
	maybe_compact_unlocked(fs);
	o = calloc(1, sizeof(*o));
	pthread_mutex_lock(&t->lock);
	if (!o) {
		atomic_fetch_or(&t->head->flags, TK_F_FULL);
	} else {
		o->fh = fh;
		o->ino = ino;
		o->flags = (uint32_t)flags;
		o->kind = (uint32_t)kind | (uint32_t)(pt_id > 0 ? pt_id : 0) << 8;
		o->next = t->live;
		t->live = o;
		append_locked(t, TK_OPEN, fh, ino, (uint32_t)flags, o->kind,
			      NULL);
	}
	pthread_mutex_unlock(&t->lock);
}

void fs_tk_handle_close(struct fs *fs, uint64_t fh)
{
	struct fs_tk *t = fs->tk;

	if (!t)
		return;
	maybe_compact_unlocked(fs);
	pthread_mutex_lock(&t->lock);
	for (struct tk_old **pp = &t->live; *pp; pp = &(*pp)->next)
		if ((*pp)->fh == fh) {
			struct tk_old *o = *pp;

			*pp = o->next;
			free(o);
			break;
		}
	tk_old_remove(&t->old, fh);
	append_locked(t, TK_CLOSE, fh, 0, 0, 0, NULL);
	pthread_mutex_unlock(&t->lock);
}


/* The keeper's death: the kernel signals this daemon, its child
 * (PR_SET_PDEATHSIG), and the handler says so in the log (write(2) of a
 * line made beforehand: async-signal-safe). */
#define TK_GONE_SIG (SIGRTMIN + 5)
static atomic_int keeper_lost;
static char gone_line[200];
static size_t gone_len;

static void on_keeper_gone(int sig)
{
	ssize_t n;

	(void)sig;
	if (atomic_exchange(&keeper_lost, 1))
		return;
	n = write(2, gone_line, gone_len);
	(void)n;
}

static void watch_keeper(pid_t keeper)
{
	struct sigaction sa;

	if (keeper <= 0)
		return;
	gone_len = (size_t)snprintf(gone_line, sizeof(gone_line),
		"fmfs: the keeper (pid %d) is gone: a crash of this daemon "
		"(pid %d) now ends the mount, as without a keeper; remount "
		"to have one again\n", (int)keeper, (int)getpid());
	if (gone_len >= sizeof(gone_line))
		gone_len = sizeof(gone_line) - 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_keeper_gone;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(TK_GONE_SIG, &sa, NULL) ||
	    prctl(PR_SET_PDEATHSIG, TK_GONE_SIG))
		return;
	if (getppid() != keeper) /* it died before the line above */
		on_keeper_gone(TK_GONE_SIG);
}

bool fs_tk_keeper_lost(struct fs *fs)
{
	return fs->tk && atomic_load(&keeper_lost);
}

int fs_tk_attach(struct fs *fs, char *why, size_t wl)
{
	struct fs_tk *t;
	void *p;
	int rc = 0;

	if (fs->cfg.tk_fd <= 0)
		return 0;
	t = calloc(1, sizeof(*t));
	p = mmap(NULL, TK_HEAD + 2 * (size_t)TK_HALF, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_NORESERVE, fs->cfg.tk_fd, 0);
	if (!t || p == MAP_FAILED) {
		snprintf(why, wl, "cannot map the takeover region: %s",
			 strerror(t ? errno : ENOMEM));
		if (p != MAP_FAILED)
			munmap(p, TK_HEAD + 2 * (size_t)TK_HALF);
		free(t);
		return -ENOMEM;
	}
	t->base = p;
	t->head = p;
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&fs->tk_init_lock, NULL);
	pthread_cond_init(&fs->tk_init_cond, NULL);
	fs->tk = t;
	atomic_store(&t->head->daemon_pid, (int32_t)getpid());
	watch_keeper((pid_t)atomic_load(&t->head->keeper_pid));
	if (fs->cfg.tk_fuse_fd > 0) {
		rc = fs_tk_replay(fs, why, wl);
		fs->tk_init_due = true;
	} else {
		atomic_store(&t->head->state, 0);
	}
	if (rc)
		snprintf(t->head->refused, sizeof(t->head->refused), "%s", why);
	else
		fs_tkr_attach(fs);
	return rc;
}

void fs_tk_detach(struct fs *fs)
{
	struct fs_tk *t = fs->tk;

	if (!t)
		return;
	fs_tkr_detach(fs);
	while (t->live) {
		struct tk_old *o = t->live;

		t->live = o->next;
		free(o);
	}
	while (t->old) {
		struct tk_old *o = t->old;

		t->old = o->next;
		free(o);
	}
	munmap(t->base, TK_HEAD + 2 * (size_t)TK_HALF);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&fs->tk_init_lock);
	pthread_cond_destroy(&fs->tk_init_cond);
	free(t);
	fs->tk = NULL;
}

void tk_old_remove(struct tk_old **list, uint64_t fh)
{
	for (struct tk_old **pp = list; *pp; pp = &(*pp)->next)
		if ((*pp)->fh == fh) {
			struct tk_old *o = *pp;

			*pp = o->next;
			free(o);
			return;
		}
}

/* --- handles --- */

uint64_t fs_tk_fh(const struct fs *fs, const void *p)
{
	util_assert(((uintptr_t)p & 15) == 0);
	return (uintptr_t)p | fs->tk_tag;
}

/* A dead daemon's handle o, opened again: NULL with *err set. */
static void *reopen(struct fs *fs, struct tk_old *o, int *err)
{
	struct fs_inode *in = fs_inode_get(fs, o->ino);
	void *p = NULL;
	int rc = 0;

	if (!in) {
		*err = ESTALE;
	} else if (in->unlinked && (o->kind & 255) != FS_TK_DIR) {
		/* Not by its old name, which may be another file's now: its
		 * bytes were the dead daemon's (docs/keeper.md). */
		*err = EIO;
	} else if ((o->kind & 255) == FS_TK_DIR) {
		p = ns_dir_view(fs->ns, in->key, &rc);
		*err = -rc;
	} else {
		struct fs_handle *h = NULL;

		rc = fs_handle_reopen(fs, in, (int)o->flags, (int)(o->kind >> 8),
				      &h);
		p = h;
		*err = -rc;
	}
	if (p) {
		pthread_mutex_lock(&fs->tk->lock);
		o->now = p;
		pthread_mutex_unlock(&fs->tk->lock);
	} else if (*err == EIO && in && in->unlinked) {
		/* said once, by reopen_eager */
	} else {
		fprintf(stderr, "fmfs: takeover: cannot reopen a handle of "
			"node id %llu: %s\n", (unsigned long long)o->ino,
			strerror(*err));
	}
	return p;
}

void *fs_tk_handle(struct fs *fs, uint64_t fh, bool open_it, int *err)
{
	struct fs_tk *t = fs->tk;
	struct tk_old *o;
	void *p = NULL;

	if (!t || (fh & 15) == fs->tk_tag)
		return (void *)(uintptr_t)(fh & ~(uint64_t)15);
	pthread_mutex_lock(&t->lock);
	for (o = t->old; o && o->fh != fh; o = o->next)
		;
	p = o ? o->now : NULL;
	pthread_mutex_unlock(&t->lock);
	if (!o)
		*err = EBADF;
	if (!o || p || !open_it)
		return p; /* a read of a reopened handle: one short lock */
	pthread_mutex_lock(&fs->tk_init_lock); /* one reopen at a time */
	pthread_mutex_lock(&t->lock);
	p = o->now;
	pthread_mutex_unlock(&t->lock);
	if (!p)
		p = reopen(fs, o, err);
	pthread_mutex_unlock(&fs->tk_init_lock);
	return p;
}

/* A dead daemon's file handles, opened again before anything is
 * served.  Files open for writing: the write-back must count their
 * writer.  Files through a backing file: the kernel uses its id, and a
 * new open of the inode must get the same.  Files read the usual way:
 * the inode must count them, or a new open of it would be given a
 * backing file, which the kernel refuses (EIO) while it has the inode
 * open the usual way.  Directories wait for their first request.  A
 * writer or a backing file that cannot be opened again ends the
 * takeover (its writes would not reach the bucket); a reader that
 * cannot is tried again at its next request, which gets the error. */
static void reopen_eager(struct fs *fs)
{
	struct tk_old *o;
	unsigned n = 0, nr = 0, nu = 0;
	int err;

	for (o = fs->tk->old; o; o = o->next) {
		struct fs_inode *in = fs_inode_get(fs, o->ino);
		/* A file unlinked while open is not carried over: nothing of
		 * it goes to the bucket, and its bytes were the dead
		 * daemon's.  Its requests answer EIO, its close 0. */
		bool must = ((o->kind >> 8) ||
			     (o->flags & O_ACCMODE) != O_RDONLY) &&
			    !(in && in->unlinked);

		if ((o->kind & 255) != FS_TK_FILE)
			continue;
		if (reopen(fs, o, &err)) {
			n += must;
			nr += !must;
			continue;
		}
		nu += in && in->unlinked;
		if (!must)
			continue;
		snprintf(fs->tk->head->refused, sizeof(fs->tk->head->refused),
			 "a file open for writing or through a backing file "
			 "(node id %llu) could not be opened again: %s",
			 (unsigned long long)o->ino, strerror(err));
		fprintf(stderr, "fmfs: takeover: %s\n", fs->tk->head->refused);
		_exit(FS_TK_EXIT_REFUSED);
	}
	if (n || nr)
		fprintf(stderr, "fmfs: takeover: %u files open for writing or "
			"through a backing file and %u open for reading carried "
			"over\n", n, nr);
	if (nu)
		fprintf(stderr, "fmfs: takeover: %u files unlinked while open "
			"not carried over (their bytes were the daemon's before):"
			" their reads and writes answer EIO\n", nu);
}

/* --- INIT, again --- */

void fs_tk_init_seen(struct fs *fs, const void *buf, size_t n)
{
	struct tk_head *h = fs->tk ? fs->tk->head : NULL;

	if (!h || n > sizeof(h->init) || fs->tk_init_due)
		return;
	memcpy(h->init, buf, n);
	h->init_len = (uint32_t)n;
}

ssize_t fs_tk_init_read(struct fs *fs, void *buf, size_t len)
{
	struct tk_head *h;
	ssize_t n = -1;

	if (!fs->tk_init_due || atomic_load(&fs->tk_init_done))
		return -1; /* the fast path, for the daemon's whole life */
	h = fs->tk->head;
	pthread_mutex_lock(&fs->tk_init_lock);
	if (!fs->tk_init_unique && !atomic_load(&fs->tk_init_done) &&
	    h->init_len <= len) {
		/* The first reader gets the INIT the kernel sent the first
		 * daemon, which libfuse needs before any other request. */
		memcpy(buf, h->init, h->init_len);
		memcpy(&fs->tk_init_unique, h->init + 8, 8);
		n = h->init_len;
	} else {
		while (!atomic_load(&fs->tk_init_done))
			pthread_cond_wait(&fs->tk_init_cond,
					  &fs->tk_init_lock);
	}
	pthread_mutex_unlock(&fs->tk_init_lock);
	return n;
}

bool fs_tk_init_reply(struct fs *fs, uint64_t unique, int fd)
{
	struct tk_head *h;
	struct { uint32_t len; int32_t error; uint64_t unique; } nf = {
		16, 7 /* FUSE_NOTIFY_RESEND */, 0 };
	bool ok;

	if (!fs->tk_init_due || !unique || unique != fs->tk_init_unique)
		return false;
	h = fs->tk->head;
	reopen_eager(fs);
	/* Only now: before, an upload could end a file's write-back under
	 * a writer not yet counted again (mount.c). */
	{
		char msg[256];

		if (fs_start_workers(fs, msg, sizeof(msg))) {
			snprintf(h->refused, sizeof(h->refused), "%s", msg);
			fprintf(stderr, "fmfs: takeover: %s\n", msg);
			_exit(FS_TK_EXIT_REFUSED);
		}
	}
	/* The kernel answered that INIT long ago: the reply stays here.
	 * Then what the dead daemon had read and not answered comes
	 * again. */
	ok = write(fd, &nf, sizeof(nf)) == (ssize_t)sizeof(nf);
	atomic_store(&h->last_took_ms, wall_ms() - atomic_load(&h->last_ms));
	if (ok) {
		fprintf(stderr, "fmfs: takeover: serving again %lld ms after "
			"the daemon before was lost; the kernel resends the "
			"requests it had not answered\n",
			(long long)atomic_load(&h->last_took_ms));
	} else {
		fprintf(stderr, "fmfs: takeover: the kernel refused "
			"FUSE_NOTIFY_RESEND (%s): requests the daemon before "
			"had read stay unanswered\n", strerror(errno));
	}
	fs_tkr_serving(fs);
	pthread_mutex_lock(&fs->tk_init_lock);
	atomic_store(&fs->tk_init_done, true);
	fs->tk_init_unique = 0;
	pthread_cond_broadcast(&fs->tk_init_cond);
	pthread_mutex_unlock(&fs->tk_init_lock);
	return true;
}

void fs_tk_init_wait(struct fs *fs)
{
	if (!fs->tk_init_due || atomic_load(&fs->tk_init_done))
		return;
	pthread_mutex_lock(&fs->tk_init_lock);
	while (!atomic_load(&fs->tk_init_done))
		pthread_cond_wait(&fs->tk_init_cond, &fs->tk_init_lock);
	pthread_mutex_unlock(&fs->tk_init_lock);
}

void fs_tk_count_resent(struct fs *fs, const void *req)
{
	uint64_t unique;

	memcpy(&unique, (const char *)req + 8, sizeof(unique));
	if (fs->tk && (unique >> 63)) /* FUSE_UNIQUE_RESEND */
		atomic_fetch_add(&fs->tk->head->resent, 1);
}

void fs_tk_count_given(struct fs *fs)
{
	atomic_fetch_add(&fs->tk->head->given, 1);
}

void fs_tk_count_done_before(struct fs *fs)
{
	atomic_fetch_add(&fs->tk->head->done_before, 1);
}

size_t fs_tk_replies_off(void)
{
	return TK_HEAD + 2 * (size_t)TK_HALF;
}

void fs_tk_ring_used(struct fs *fs)
{
	if (fs->tk)
		atomic_fetch_or(&fs->tk->head->flags, TK_F_RING);
}

bool fs_tk_ring_was_used(struct fs *fs)
{
	return fs->tk && (atomic_load(&fs->tk->head->flags) & TK_F_RING);
}

void fs_tk_status(struct fs *fs, struct fs_tk_info *out)
{
	struct tk_head *h = fs->tk ? fs->tk->head : NULL;

	memset(out, 0, sizeof(*out));
	out->daemon_pid = getpid();
	if (!h)
		return;
	out->keeper_pid = atomic_load(&h->keeper_pid);
	if (atomic_load(&keeper_lost)) {
		out->keeper_lost = out->keeper_pid;
		out->keeper_pid = 0;
	}
	out->takeovers = atomic_load(&h->takeovers);
	out->last_ms = atomic_load(&h->last_ms);
	out->last_took_ms = atomic_load(&h->last_took_ms);
	out->resent = atomic_load(&h->resent);
	out->given = atomic_load(&h->given);
	out->done_before = atomic_load(&h->done_before);
	snprintf(out->cause, sizeof(out->cause), "%s", h->cause);
	snprintf(out->refused, sizeof(out->refused), "%s", h->refused);
}
