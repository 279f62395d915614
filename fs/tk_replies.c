/* SPDX-License-Identifier: MIT */
/*
 * tk_replies.c - answers that a dead daemon had made and not sent
 * (docs/keeper.md "Requests done once").
 *
 * A request the kernel resends after a takeover (FUSE_NOTIFY_RESEND) is
 * one the dead daemon had read and not answered.  For most requests that
 * is as good as new: a read, a lookup, a getattr, a write at an offset
 * give the same answer again.  A rename, unlink, rmdir, mkdir, mknod,
 * symlink, link, create, setxattr or removexattr that the dead daemon had
 * carried out would, carried out again, fail (ENOENT, EEXIST) or do
 * something else.  So the reply to each of those is copied into the
 * takeover region just before it is sent: slots in a ring after the
 * journal's two halves, each a reply of at most TKR_BYTES with the
 * request's unique id (without the resend bit), published last, and
 * emptied again once the reply is written: what a dead daemon leaves in
 * the slots is what it had not sent.  A new daemon takes those (and
 * clears the slots for its own); a resent request whose id is among
 * them is answered with that reply, unchanged but for the resend bit of
 * its id, and libfuse never sees it.  Resent requests come first after
 * the takeover; the slots are looked at until all are given or
 * TKR_WINDOW_MS after the new daemon serves (fs_tkr_serving).
 *
 * A kill between the store's change and the copy of its reply is met by
 * an intent: just before such an operation changes anything (its checks
 * passed), the handler keeps a hash of the operation, the node id it
 * names and the name (fs_tkr_intent), in a second ring after the
 * replies, emptied when the reply is written.  A resent request that
 * matches an intent the dead daemon left is run again with
 * fs_tkr_redo() true: where its checks now fail as they would had it
 * been done (the name gone for an unlink, rmdir or rename, there for a
 * mkdir, mknod, symlink, link or exclusive create, the attribute there
 * or gone), the handler answers as done instead.  Requests read by
 * splice are read plainly while the slots are looked at, so that their
 * header can be seen.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs_int.h"

#define TKR_SLOTS 64
#define TKR_BYTES 240
#define TKR_WINDOW_MS 10000
#define TKR_RESEND (1ull << 63)   /* FUSE_UNIQUE_RESEND */
#define TKI_SLOTS (FS_TKI_SIZE / 8)

struct tkr_slot {
	_Atomic uint64_t unique;  /* 0: empty; written last */
	uint32_t len, pad;
	unsigned char b[TKR_BYTES];
};

struct tkr_old {
	uint64_t unique;
	uint32_t len;
	unsigned char b[TKR_BYTES];
};

struct fs_tkr {
	struct tkr_slot *slots;   /* in the region: this daemon's */
	_Atomic unsigned next;
	struct tkr_old *old;      /* the dead daemon's, found at attach */
	unsigned nold;
	_Atomic unsigned left;    /* of those, not yet given */
	uint64_t until_ms;
	pthread_mutex_t lock;     /* old, old_int */
	int fault_op;             /* FMFS_TK_FAULT, or -1 */
	bool fault_unkept;        /* ...=OP:unkept: before the copy */
	bool fault_changed;       /* ...=OP:changed: at fs_tkr_changed */
	_Atomic uint64_t *intents; /* in the region, or NULL (an older one) */
	_Atomic unsigned inext;
	uint64_t *old_int;        /* the dead daemon's intents */
	unsigned nold_int;
	_Atomic unsigned int_left;
};

static __thread int tki_slot = -1; /* this thread's intent */
static __thread bool tki_redo;     /* its request: a dead daemon's intent */

_Static_assert(sizeof(struct tkr_slot) * TKR_SLOTS == FS_TKR_SIZE,
	       "the region's room for replies");

/* FMFS_TK_FAULT=OP (docs/testing.md, 72-mount-keeper): the first
 * daemon of a kept mount kills itself with SIGKILL once it has kept its
 * first reply to OP and before it sends it: the crash this file is for,
 * made on purpose.  OP:unkept: once it has carried OP out, before its
 * reply is kept (the intent's case); OP:changed: as soon as the store
 * has changed, before the daemon's memory follows (fs_tkr_changed). */
static int fault_op(const struct fs *fs, bool *unkept, bool *changed)
{
	static const struct { const char *name; int op; } ops[] = {
		{ "mknod", FSOP_mknod }, { "mkdir", FSOP_mkdir },
		{ "unlink", FSOP_unlink }, { "rmdir", FSOP_rmdir },
		{ "symlink", FSOP_symlink }, { "rename", FSOP_rename },
		{ "link", FSOP_link }, { "setxattr", FSOP_setxattr },
		{ "removexattr", FSOP_removexattr }, { "create", FSOP_create },
	};
	const char *e = getenv("FMFS_TK_FAULT");
	size_t n;

	if (!e || fs->cfg.tk_fuse_fd > 0)
		return -1;
	n = strcspn(e, ":");
	*unkept = !strcmp(e + n, ":unkept");
	*changed = !strcmp(e + n, ":changed");
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strlen(ops[i].name) == n && !strncmp(e, ops[i].name, n) &&
		    (!e[n] || *unkept || *changed))
			return ops[i].op;
	fprintf(stderr, "fmfs: FMFS_TK_FAULT=%s: not an operation whose "
		"reply is kept; ignored\n", e);
	return -1;
}

void fs_tkr_attach(struct fs *fs)
{
	size_t off = fs_tk_replies_off();
	struct fs_tkr *r;
	struct stat st;
	void *p;

	size_t len = FS_TKR_SIZE + FS_TKI_SIZE;

	if (!fs->tk || fstat(fs->cfg.tk_fd, &st) ||
	    (size_t)st.st_size < off + FS_TKR_SIZE)
		return; /* a region made by an older binary: no slots */
	if ((size_t)st.st_size < off + len)
		len = FS_TKR_SIZE; /* nor intents */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fs->cfg.tk_fd, (off_t)off);
	r = calloc(1, sizeof(*r));
	if (p == MAP_FAILED || !r) {
		if (p != MAP_FAILED)
			munmap(p, len);
		free(r);
		return;
	}
	r->slots = p;
	if (len > FS_TKR_SIZE)
		r->intents = (_Atomic uint64_t *)((char *)p + FS_TKR_SIZE);
	r->fault_op = fault_op(fs, &r->fault_unkept, &r->fault_changed);
	pthread_mutex_init(&r->lock, NULL);
	if (fs->cfg.tk_fuse_fd > 0) {
		r->old = calloc(TKR_SLOTS, sizeof(*r->old));
		for (unsigned i = 0; r->old && i < TKR_SLOTS; i++) {
			struct tkr_slot *s = &r->slots[i];
			uint64_t u = atomic_load(&s->unique);

			if (!u || s->len < 16 || s->len > TKR_BYTES)
				continue;
			r->old[r->nold].unique = u;
			r->old[r->nold].len = s->len;
			memcpy(r->old[r->nold].b, s->b, s->len);
			r->nold++;
		}
		atomic_store(&r->left, r->nold);
		if (r->intents)
			r->old_int = calloc(TKI_SLOTS, sizeof(*r->old_int));
		for (unsigned i = 0; r->old_int && i < TKI_SLOTS; i++) {
			uint64_t k = atomic_load(&r->intents[i]);

			if (k)
				r->old_int[r->nold_int++] = k;
		}
		atomic_store(&r->int_left, r->nold_int);
		r->until_ms = UINT64_MAX; /* fs_tkr_serving */
	}
	for (unsigned i = 0; i < TKR_SLOTS; i++)
		atomic_store(&r->slots[i].unique, 0);
	for (unsigned i = 0; r->intents && i < TKI_SLOTS; i++)
		atomic_store(&r->intents[i], 0);
	fs->tkr = r;
}

void fs_tkr_detach(struct fs *fs)
{
	struct fs_tkr *r = fs->tkr;

	if (!r)
		return;
	munmap(r->slots, FS_TKR_SIZE + (r->intents ? FS_TKI_SIZE : 0));
	pthread_mutex_destroy(&r->lock);
	free(r->old);
	free(r->old_int);
	free(r);
	fs->tkr = NULL;
}

/* The operations whose second run would not answer as the first. */
static bool once_only(int op)
{
	switch (op) {
	case FSOP_mknod: case FSOP_mkdir: case FSOP_unlink: case FSOP_rmdir:
	case FSOP_symlink: case FSOP_rename: case FSOP_link:
	case FSOP_setxattr: case FSOP_removexattr: case FSOP_create:
		return true;
	default:
		return false;
	}
}

void fs_tkr_serving(struct fs *fs)
{
	if (fs->tkr)
		fs->tkr->until_ms = util_now_ms() + TKR_WINDOW_MS;
}

int fs_tkr_record(struct fs *fs, const struct iovec *iov, int count)
{
	struct fs_tkr *r = fs->tkr;
	struct tkr_slot *s;
	size_t len = 0;
	uint64_t unique;
	unsigned i;

	if (!r || !once_only(fs_metrics_cur_op()) || count < 1 ||
	    iov[0].iov_len < 16)
		return -1;
	for (int k = 0; k < count; k++)
		len += iov[k].iov_len;
	if (len > TKR_BYTES)
		return -1;
	memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
	unique &= ~TKR_RESEND; /* a resent request's, found by its first id */
	if (!unique)
		return -1;
	if (r->fault_unkept && r->fault_op == fs_metrics_cur_op())
		raise(SIGKILL); /* done, its reply not kept: the intent's */
	i = atomic_fetch_add(&r->next, 1) % TKR_SLOTS;
	s = &r->slots[i];
	atomic_store(&s->unique, 0);
	len = 0;
	for (int k = 0; k < count; k++) {
		memcpy(s->b + len, iov[k].iov_base, iov[k].iov_len);
		len += iov[k].iov_len;
	}
	s->len = (uint32_t)len;
	atomic_store_explicit(&s->unique, unique, memory_order_release);
	if (r->fault_op == fs_metrics_cur_op())
		raise(SIGKILL);
	return (int)i;
}

void fs_tkr_sent(struct fs *fs, int slot, const struct iovec *iov)
{
	uint64_t unique;

	if (slot < 0 || !fs->tkr)
		return;
	memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
	unique &= ~TKR_RESEND;
	/* still ours (not taken by a 64th reply since) */
	atomic_compare_exchange_strong(&fs->tkr->slots[slot].unique, &unique,
				       0);
}

bool fs_tkr_pending(struct fs *fs)
{
	struct fs_tkr *r = fs->tkr;

	if (!r || (!atomic_load(&r->left) && !atomic_load(&r->int_left)))
		return false;
	if (util_now_ms() > r->until_ms) {
		atomic_store(&r->left, 0);
		atomic_store(&r->int_left, 0);
		return false;
	}
	return true;
}

bool fs_tkr_answer(struct fs *fs, int fd, const void *req, size_t n)
{
	struct fs_tkr *r = fs->tkr;
	unsigned char out[TKR_BYTES];
	uint64_t unique;
	uint32_t len = 0;

	if (n < 16 || !fs_tkr_pending(fs))
		return false;
	memcpy(&unique, (const char *)req + 8, sizeof(unique));
	if (!(unique & TKR_RESEND))
		return false;
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nold; i++) {
		if (r->old[i].unique != (unique & ~TKR_RESEND))
			continue;
		len = r->old[i].len;
		memcpy(out, r->old[i].b, len);
		r->old[i].unique = 0;
		atomic_fetch_sub(&r->left, 1);
		break;
	}
	pthread_mutex_unlock(&r->lock);
	if (!len)
		return false;
	memcpy(out + 8, &unique, sizeof(unique)); /* as the kernel sent it */
	if (fs->tk)
		fs_tk_count_resent(fs, req);
	if (write(fd, out, len) != (ssize_t)len) {
		/* The request is gone (ENOENT) or was ended: nobody waits
		 * for it, and it must not be carried out again. */
		fprintf(stderr, "fmfs: takeover: the reply the daemon before "
			"had made to request %llu was refused (%s); the "
			"request is dropped\n",
			(unsigned long long)(unique & ~TKR_RESEND),
			strerror(errno));
		return true;
	}
	if (fs->tk)
		fs_tk_count_given(fs);
	fprintf(stderr, "fmfs: takeover: request %llu, sent again, answered "
		"as the daemon before had done it (not done twice)\n",
		(unsigned long long)(unique & ~TKR_RESEND));
	return true;
}

/* ---- intents: the operations begun and perhaps not answered ---- */

/* FNV-1a of the operation, the node id it names and the name. */
static uint64_t intent_key(int op, uint64_t nodeid, const char *name,
			   size_t len)
{
	uint64_t h = 14695981039346656037ull;
	unsigned char head[12];

	memcpy(head, &op, 4);
	memcpy(head + 4, &nodeid, 8);
	for (size_t i = 0; i < sizeof(head); i++)
		h = (h ^ head[i]) * 1099511628211ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
	return h | 1; /* 0: an empty slot */
}

void fs_tkr_intent(struct fs *fs, uint64_t nodeid, const char *name)
{
	struct fs_tkr *r = fs->tkr;
	int op = fs_metrics_cur_op();
	uint64_t k;

	fs_tkr_intent_end(fs);
	if (!r || !r->intents || !once_only(op))
		return;
	k = intent_key(op, nodeid, name, strlen(name));
	for (unsigned t = 0; t < TKI_SLOTS; t++) {
		unsigned i = atomic_fetch_add(&r->inext, 1) % TKI_SLOTS;
		uint64_t z = 0;

		if (atomic_compare_exchange_strong(&r->intents[i], &z, k)) {
			tki_slot = (int)i;
			return;
		}
	}
	/* 64 operations changing the namespace at once: this one goes
	 * without (a kill in its window has it carried out twice) */
}

void fs_tkr_intent_end(struct fs *fs)
{
	if (tki_slot >= 0 && fs->tkr && fs->tkr->intents)
		atomic_store(&fs->tkr->intents[tki_slot], 0);
	tki_slot = -1;
}

/* FUSE opcodes (the kernel's <linux/fuse.h>) of the operations kept */
enum { TKO_SYMLINK = 6, TKO_MKNOD = 8, TKO_MKDIR = 9, TKO_UNLINK = 10,
       TKO_RMDIR = 11, TKO_RENAME = 12, TKO_LINK = 13, TKO_SETXATTR = 21,
       TKO_REMOVEXATTR = 24, TKO_CREATE = 35, TKO_RENAME2 = 45 };

/* The operation and the name (in req) of a request, as fs_tkr_intent
 * was given them; false for others.  The fixed parts before the name:
 * fuse_mknod_in 16, fuse_mkdir_in 8, fuse_rename_in 8, fuse_rename2_in
 * 16, fuse_link_in 8, fuse_create_in 16; fuse_setxattr_in 8 or, with
 * FUSE_SETXATTR_EXT, 16. */
static bool request_intent(const unsigned char *req,
			   size_t n, int *op, const char **name, size_t *len)
{
	uint32_t opcode;
	size_t skip;

	memcpy(&opcode, req + 4, 4);
	switch (opcode) {
	case TKO_SYMLINK: *op = FSOP_symlink; skip = 0; break;
	case TKO_MKNOD: *op = FSOP_mknod; skip = 16; break;
	case TKO_MKDIR: *op = FSOP_mkdir; skip = 8; break;
	case TKO_UNLINK: *op = FSOP_unlink; skip = 0; break;
	case TKO_RMDIR: *op = FSOP_rmdir; skip = 0; break;
	case TKO_RENAME: *op = FSOP_rename; skip = 8; break;
	case TKO_RENAME2: *op = FSOP_rename; skip = 16; break;
	case TKO_LINK: *op = FSOP_link; skip = 8; break;
	case TKO_CREATE: *op = FSOP_create; skip = 16; break;
	case TKO_REMOVEXATTR: *op = FSOP_removexattr; skip = 0; break;
	case TKO_SETXATTR: *op = FSOP_setxattr; skip = 8; break;
	default:
		return false;
	}
	skip += 40; /* fuse_in_header */
	if (n <= skip)
		return false;
	*name = (const char *)req + skip;
	*len = strnlen(*name, n - skip);
	if (*op == FSOP_setxattr) {
		/* which of the two: the one whose name and value (its size
		 * the first field) end the request */
		uint32_t size;

		memcpy(&size, req + 40, 4);
		if (skip + *len + 1 + size != n) {
			skip += 8;
			if (n <= skip)
				return false;
			*name = (const char *)req + skip;
			*len = strnlen(*name, n - skip);
		}
	}
	return *len < n - skip;
}

void fs_tkr_look(struct fs *fs, const void *req, size_t n)
{
	struct fs_tkr *r = fs->tkr;
	const char *name;
	uint64_t unique, nodeid, k;
	size_t len;
	int op;

	tki_redo = false;
	if (!r || !req || n < 40 || !atomic_load(&r->int_left) ||
	    !fs_tkr_pending(fs))
		return;
	memcpy(&unique, (const char *)req + 8, 8);
	memcpy(&nodeid, (const char *)req + 16, 8);
	if (!(unique & TKR_RESEND) ||
	    !request_intent(req, n, &op, &name, &len))
		return;
	k = intent_key(op, nodeid, name, len);
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nold_int; i++) {
		if (r->old_int[i] != k)
			continue;
		r->old_int[i] = 0;
		atomic_fetch_sub(&r->int_left, 1);
		tki_redo = true;
		break;
	}
	pthread_mutex_unlock(&r->lock);
}

void fs_tkr_changed(struct fs *fs)
{
	struct fs_tkr *r = fs->tkr;

	if (r && r->fault_changed && r->fault_op == fs_metrics_cur_op())
		raise(SIGKILL);
}

bool fs_tkr_redo(struct fs *fs, const char *what, const char *name)
{
	if (!tki_redo)
		return false;
	tki_redo = false; /* once */
	if (fs->tk)
		fs_tk_count_done_before(fs);
	fprintf(stderr, "fmfs: takeover: a %s of '%s' sent again had been "
		"carried out by the daemon before, its reply not yet kept: "
		"answered as done (not done twice)\n", what, name);
	return true;
}
