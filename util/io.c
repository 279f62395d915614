/* SPDX-License-Identifier: MIT */
/*
 * io.c - reads and writes of a whole buffer, which retry EINTR and
 * continue short transfers, and mkdir -p.  The cache, the checkpoint
 * writer, the trainer's shards and the object store's file:// backend
 * all need exactly these loops; a short read at end of file is the
 * caller's to judge (a truncated file means different things to each).
 * Also the mapping of large reused buffers in huge pages (staging, fetch
 * buffers).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* pread/pwrite take off_t; past this a transfer is split. */
#define IO_CHUNK_MAX ((size_t)1 << 30)

/* The one loop behind the four below: off < 0 means read/write at the
 * file position.  Returns the bytes moved (fewer than len only when a
 * read reached end of file, or a write moved nothing) or -errno. */
static ssize_t transfer(int fd, bool write_, void *buf, size_t len,
			int64_t off)
{
	size_t done = 0;

	while (done < len) {
		size_t n = len - done > IO_CHUNK_MAX ? IO_CHUNK_MAX : len - done;
		char *p = (char *)buf + done;
		ssize_t r;

		if (write_)
			r = off < 0 ? write(fd, p, n) :
				      pwrite(fd, p, n, (off_t)off + (off_t)done);
		else
			r = off < 0 ? read(fd, p, n) :
				      pread(fd, p, n, (off_t)off + (off_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

ssize_t util_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	return transfer(fd, false, buf, len, (int64_t)off);
}

ssize_t util_read_all(int fd, void *buf, size_t len)
{
	return transfer(fd, false, buf, len, -1);
}

/* A write that moved less than asked without an error: -EIO. */
static int written(ssize_t r, size_t len)
{
	return r < 0 ? (int)r : (size_t)r < len ? -EIO : 0;
}

int util_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	return written(transfer(fd, true, (void *)buf, len, (int64_t)off),
		       len);
}

int util_write_all(int fd, const void *buf, size_t len)
{
	return written(transfer(fd, true, (void *)buf, len, -1), len);
}

int util_sync_parent(char *path)
{
	char *slash = strrchr(path, '/');
	int fd, rc = 0;

	if (slash == path)
		fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	else if (slash) {
		*slash = '\0';
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		*slash = '/';
	} else {
		fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0 || (fsync(fd) && errno != EINVAL))
		rc = -errno; /* EINVAL: a file system that cannot sync one */
	if (fd >= 0)
		close(fd);
	return rc;
}

int util_fsync_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) && errno != EINVAL)
		rc = -errno;
	close(fd);
	return rc;
}

int util_mkdir_p_made(const char *path, mode_t mode, char *made,
		      size_t made_len)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	struct stat sb;

	if (made && made_len)
		made[0] = '\0';
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; ; p++) {
		char c = *p;

		if (c != '/' && c)
			continue;
		*p = '\0';
		if (!mkdir(buf, mode)) {
			int rc = util_sync_parent(buf);

			if (rc)
				return rc;
			if (made && made_len && !made[0])
				snprintf(made, made_len, "%s", buf);
		} else if (errno != EEXIST) {
			return -errno;
		}
		*p = c;
		if (!c)
			break;
	}
	if (stat(path, &sb))
		return -errno;
	return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

int util_path_resolve(const char *path, char *out, size_t out_len)
{
	char buf[PATH_MAX], real[PATH_MAX], rest[PATH_MAX] = "";
	size_t n;

	if (!*path)
		return -ENOENT;
	if (path[0] == '/') {
		n = (size_t)snprintf(buf, sizeof(buf), "%s", path);
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		n = (size_t)snprintf(buf, sizeof(buf), "%s/%s", cwd, path);
	}
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	/* Cut components off the end until what is left exists. */
	while (!realpath(buf, real)) {
		char *slash;

		if (errno != ENOENT)
			return -errno;
		slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			return -ENOENT; /* "/" always exists */
		if (strlen(slash) + strlen(rest) >= sizeof(rest))
			return -ENAMETOOLONG;
		memmove(rest + strlen(slash), rest, strlen(rest) + 1);
		memcpy(rest, slash, strlen(slash));
		*slash = '\0';
	}
	/* Put the rest back, one component at a time. */
	n = strlen(real);
	char *save = NULL;

	for (char *c = strtok_r(rest, "/", &save); c;
	     c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			char *slash = strrchr(real, '/');

			if (slash && slash != real)
				*slash = '\0';
			else
				strcpy(real, "/");
			n = strlen(real);
			continue;
		}
		if (n + 1 + strlen(c) >= sizeof(real))
			return -ENAMETOOLONG;
		n += (size_t)sprintf(real + n, "%s%s",
				     n > 1 || real[0] != '/' ? "/" : "", c);
	}
	if (strlen(real) >= out_len)
		return -ENAMETOOLONG;
	memcpy(out, real, strlen(real) + 1);
	return 0;
}

bool util_path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/')
		return true;
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

int util_mkdir_p(const char *path, mode_t mode)
{
	return util_mkdir_p_made(path, mode, NULL, 0);
}

void *util_map_huge(size_t len, bool prefault)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	madvise(p, len, MADV_HUGEPAGE);   /* a hint: fine if refused */
	if (!prefault)
		return p;
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return p;
	if (errno != EINVAL) {   /* EINVAL: a kernel before 5.14 */
		int e = errno;

		munmap(p, len);
		errno = e;
		return NULL;
	}
#endif
	/* Touch one byte a page: a write fault allocates it (or its huge
	 * page).  Running out of memory here is SIGBUS/OOM as for any
	 * first write; MADV_POPULATE_WRITE reports ENOMEM instead. */
	for (size_t at = 0; at < len; at += (size_t)page)
		p[at] = 0;
	return p;
}

/* poll(2)'s timeout until deadline (ms, util_now_ms clock). */
static int poll_ms_until(uint64_t deadline)
{
	uint64_t now = util_now_ms();

	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

int util_sock_io_quiet(int fd, void *buf, size_t len, bool out,
			 unsigned quiet_ms, uint64_t cap)
{
	unsigned char *p = buf;

	while (len) {
		struct pollfd pf = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		uint64_t until;
		ssize_t n;
		int pr;

		n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		/* Nothing more to move now: the silence starts here. */
		until = quiet_ms ? util_now_ms() + quiet_ms : cap;
		if (until > cap)
			until = cap;
		pr = poll(&pf, 1, poll_ms_until(until));
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr == 0)
			return until >= cap ? -ETIME : -ETIMEDOUT;
	}
	return 0;
}

int util_sock_io(int fd, void *buf, size_t len, bool out,
		 uint64_t deadline)
{
	int rc = util_sock_io_quiet(fd, buf, len, out, 0, deadline);

	return rc == -ETIME ? -ETIMEDOUT : rc;
}
