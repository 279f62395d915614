/* SPDX-License-Identifier: MIT */
/*
 * writer.c - the writer thread: takes filled staging chunks in the order
 * commit produced them, checksums them, writes them into this rank's
 * shard file in the step's temporary directory, and when the last one is
 * on disk fsyncs the file and leaves the "shard done" marker for rank 0
 * (the committer, drain.c, does the rest).  When a remote store is set,
 * each chunk written becomes an upload job; without a local directory
 * the chunk itself is the job's source and stays held until uploaded.
 *
 * While a commit is copying, the writer waits (unless the copy did not
 * fit in the free chunks and staging runs low, ckpt_writer_wanted):
 * the caller is blocked for exactly that copy, and checksumming and
 * page-cache copies on the other cores would slow it down.
 *
 * Writes go through one io_uring owned by this thread, up to io_depth in
 * flight; short writes are continued.  If the ring cannot be set up (an
 * old kernel, a seccomp filter) or FMCKPT_URING=0, plain pwrite is used;
 * ckpt_stats.uring says which.
 *
 * Checksums: one CRC32C pass per chunk, split at tensor boundaries; each
 * piece's CRC is folded into its tensor's CRC and into the file's CRC
 * with util_crc32c_combine, so the bytes are read once.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

struct ckpt_io {
	bool uring;
	struct io_uring ring;
	unsigned depth;
	unsigned inflight;     /* writer */
};

int ckpt_io_init(struct ckpt *c, unsigned depth)
{
	struct ckpt_io *io = calloc(1, sizeof(*io));
	const char *env = getenv("FMCKPT_URING");

	if (!io)
		return -ENOMEM;
	io->depth = depth;
	c->io = io;
	if (!c->dir || (env && !strcmp(env, "0")))
		return 0;
	if (io_uring_queue_init(depth, &io->ring, 0) == 0)
		io->uring = true;
	return 0;
}

void ckpt_io_free(struct ckpt_io *io)
{
	if (!io)
		return;
	if (io->uring)
		io_uring_queue_exit(&io->ring);
	free(io);
}

bool ckpt_io_uring(const struct ckpt_io *io)
{
	return io && io->uring;
}

static void writer_open(struct ckpt *c, struct ckpt_step *s)
{
	char dir[PATH_MAX], name[64], path[PATH_MAX + 64];
	const char *what = "create";
	int rc = 0;

	s->opened = true;
	if (!c->dir)
		return;
	/* Each errno is taken at once, with the path it is about: the
	 * message is made from them, not from errno later. */
	ckpt_tmp_path(c, s->step, NULL, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s", dir);
	if (mkdir(dir, 0755) && errno != EEXIST)
		rc = -errno;
	/* A marker left by an earlier attempt at this step must not count. */
	if (!rc) {
		ckpt_marker_name(c->rank, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (unlink(path) && errno != ENOENT) {
			rc = -errno;
			what = "remove the old marker";
		}
	}
	if (!rc) {
		ckpt_shard_name(c->rank, name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		s->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
			     0644);
		if (s->fd < 0)
			rc = -errno;
	}
	if (rc) {
		pthread_mutex_lock(&c->lock);
		ckpt_step_fail(c, s, rc, CKPT_LOCAL | CKPT_REMOTE,
			       "step %llu: cannot %s %s: %s (is the checkpoint "
			       "directory %s there, writable, with room?)",
			       (unsigned long long)s->step, what, path,
			       strerror(-rc), c->dir);
		pthread_mutex_unlock(&c->lock);
	}
}

/* Folds the chunk's bytes into the tensors' and the file's CRC32C. */
static void writer_crc(struct ckpt_step *s, const struct ckpt_chunk *ch)
{
	uint64_t pos = ch->off, end = ch->off + ch->len;

	while (pos < end) {
		struct ckpt_tensor *t;
		uint64_t seg_end;
		uint32_t crc;
		bool in_t;

		/* Skip tensors already summed (and empty ones: CRC 0). */
		while (s->crc_t < s->nt && s->t[s->crc_t].off <= pos &&
		       s->t[s->crc_t].off + s->t[s->crc_t].size <= pos)
			s->crc_t++;
		t = s->crc_t < s->nt ? &s->t[s->crc_t] : NULL;
		in_t = t && t->off <= pos;
		if (in_t)
			seg_end = t->off + t->size;
		else
			seg_end = t ? t->off : end;
		if (seg_end > end)
			seg_end = end;
		crc = util_crc32c(0, ch->buf + (pos - ch->off),
				  (size_t)(seg_end - pos));
		s->file_crc = util_crc32c_combine(s->file_crc, crc,
						  seg_end - pos);
		if (in_t)
			t->crc = util_crc32c_combine(t->crc, crc,
						     seg_end - pos);
		pos = seg_end;
	}
}

/* Every byte is summed: the marker (this rank's index, CRCs included)
 * can be encoded, once; the local and remote commits both use it, so
 * the upload need not wait for the local disk. */
static void writer_marker(struct ckpt *c, struct ckpt_step *s)
{
	int rc = ckpt_marker_encode(c, s);

	pthread_mutex_lock(&c->lock);
	if (rc)
		ckpt_step_fail(c, s, rc, CKPT_LOCAL | CKPT_REMOTE, "step %llu:"
			       " cannot encode the marker: %s",
			       (unsigned long long)s->step, strerror(-rc));
	s->marker_ready = true;
	pthread_cond_broadcast(&c->commit_cond);
	pthread_mutex_unlock(&c->lock);
}

/* The shard is complete on disk: fsync it, then the marker. */
static void writer_finish_local(struct ckpt *c, struct ckpt_step *s)
{
	char dir[PATH_MAX], name[64], why[512] = "";
	bool failed;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	failed = s->local_rc != 0;   /* said why when it failed */
	pthread_mutex_unlock(&c->lock);
	ckpt_tmp_path(c, s->step, NULL, dir, sizeof(dir));
	if (!failed && fsync(s->fd)) {
		rc = -errno;
		ckpt_shard_name(c->rank, name, sizeof(name));
		util_msg(why, sizeof(why), "fsync of %s/%s failed: %s", dir,
			 name, strerror(-rc));
	}
	ckpt_crash_point("shard-synced", s->step);
	if (!failed && !rc) {
		ckpt_marker_name(c->rank, name, sizeof(name));
		rc = ckpt_write_atomic(dir, name, s->marker, s->marker_len,
				       why, sizeof(why));
	}
	ckpt_crash_point("marker-written", s->step);
	pthread_mutex_lock(&c->lock);
	if (rc)
		ckpt_step_fail(c, s, rc, CKPT_LOCAL | CKPT_REMOTE,
			       "step %llu: %s", (unsigned long long)s->step,
			       why[0] ? why : strerror(-rc));
	s->local_ready = true;
	pthread_cond_broadcast(&c->commit_cond);
	pthread_mutex_unlock(&c->lock);
}

/* A chunk is on disk (or failed, or there is no local directory). */
static void chunk_written(struct ckpt *c, struct ckpt_chunk *ch, int rc)
{
	struct ckpt_step *s = ch->step;
	char path[PATH_MAX + 64] = "", name[64];
	bool finish = false;

	if (rc && c->dir) {
		ckpt_shard_name(c->rank, name, sizeof(name));
		ckpt_tmp_path(c, s->step, name, path, sizeof(path));
	}
	pthread_mutex_lock(&c->lock);
	if (rc)
		ckpt_step_fail(c, s, rc, CKPT_LOCAL | CKPT_REMOTE,
			       "step %llu: writing %s failed: %s (is there "
			       "room in %s?)", (unsigned long long)s->step,
			       path, strerror(-rc), c->dir);
	else if (c->dir) {
		s->bytes_written += ch->len;
		c->stats.bytes_written += ch->len;
	}
	if (c->st) {
		struct ckpt_job *j = &s->jobs[ch->index];

		j->chunk = c->dir ? NULL : ch;
		j->next = NULL;
		if (c->uq_tail)
			c->uq_tail->next = j;
		else
			c->uq_head = j;
		c->uq_tail = j;
		pthread_cond_signal(&c->upload_cond);
	}
	if (!c->st || c->dir)
		ckpt_chunk_release(c, ch);
	if (c->dir)
		finish = --s->local_pending == 0;
	pthread_mutex_unlock(&c->lock);
	if (finish)
		writer_finish_local(c, s);
}

static void uring_submit(struct ckpt_io *io, int fd, struct ckpt_chunk *ch)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);

	/* inflight < depth, so an SQE is free; submit returns at once.  If
	 * it fails, the SQE stays queued and writer_reap() enters it. */
	io_uring_prep_write(sqe, fd, ch->buf + ch->done, ch->len - ch->done,
			    ch->off + ch->done);
	io_uring_sqe_set_data(sqe, ch);
	io_uring_submit(&io->ring);
	io->inflight++;
}

static void writer_take(struct ckpt *c, struct ckpt_chunk *ch)
{
	struct ckpt_step *s = ch->step;
	struct ckpt_io *io = c->io;

	if (!s->opened)
		writer_open(c, s);
	writer_crc(s, ch);
	if (ch->index + 1 == s->nchunks)
		writer_marker(c, s);
	if (!c->dir) {
		chunk_written(c, ch, 0);
	} else if (s->fd < 0) {
		chunk_written(c, ch, -EIO); /* the open failed, said why */
	} else if (io->uring) {
		uring_submit(io, s->fd, ch);
	} else {
		chunk_written(c, ch, util_pwrite_all(s->fd, ch->buf, ch->len,
						     ch->off));
	}
}

static void writer_reap(struct ckpt *c)
{
	struct ckpt_io *io = c->io;
	struct io_uring_cqe *cqe;
	struct ckpt_chunk *ch;
	int rc, res;

	/* Submit and wait, not just wait: io_uring_wait_cqe() never enters
	 * SQEs, so one that uring_submit() could not (io_uring_submit()
	 * failing -EAGAIN for want of kernel memory) would leave the writer
	 * waiting for a completion that never comes, and every commit
	 * waiting for staging after it. */
	for (;;) {
		rc = io_uring_submit_and_wait(&io->ring, 1);
		if (rc >= 0)
			rc = io_uring_peek_cqe(&io->ring, &cqe);
		if (rc != -EINTR && rc != -EAGAIN)
			break;
		if (rc == -EAGAIN)
			usleep(1000);
	}
	if (rc < 0) {
		/* Cannot happen with a valid ring; don't spin on it. */
		usleep(1000);
		return;
	}
	ch = io_uring_cqe_get_data(cqe);
	res = cqe->res;
	io_uring_cqe_seen(&io->ring, cqe);
	io->inflight--;
	if (res == -EINTR || res == -EAGAIN) {
		uring_submit(io, ch->step->fd, ch);
	} else if (res <= 0) {
		chunk_written(c, ch, res < 0 ? res : -EIO);
	} else {
		ch->done += (uint32_t)res;
		if (ch->done < ch->len)
			uring_submit(io, ch->step->fd, ch);
		else
			chunk_written(c, ch, 0);
	}
}

void *ckpt_writer_main(void *arg)
{
	struct ckpt *c = arg;
	struct ckpt_io *io = c->io;

	for (;;) {
		struct ckpt_chunk *ch = NULL;

		pthread_mutex_lock(&c->lock);
		while (!io->inflight && !c->stopping &&
		       (!c->wq_head || !ckpt_writer_wanted(c)))
			pthread_cond_wait(&c->writer_cond, &c->lock);
		if (!c->wq_head && !io->inflight) {
			pthread_mutex_unlock(&c->lock);
			return NULL;   /* stopping, nothing left */
		}
		/* Writes in flight at a commit's start are reaped, but no
		 * new one starts while the copy does not want the writer. */
		if (c->wq_head && io->inflight < io->depth &&
		    (ckpt_writer_wanted(c) || c->stopping)) {
			ch = c->wq_head;
			c->wq_head = ch->next;
			if (!c->wq_head)
				c->wq_tail = NULL;
		}
		pthread_mutex_unlock(&c->lock);
		if (ch)
			writer_take(c, ch);
		else
			writer_reap(c);
	}
}
