/* SPDX-License-Identifier: MIT */
/*
 * io.c - reads and writes of a whole buffer, which retry EINTR and
 * continue short transfers, and mkdir -p.  The cache, the checkpoint
 * writer, the trainer's shards and the object store's file:// backend
 * all need exactly these loops; a short read at end of file is the
 * caller's to judge (a truncated file means different things to each).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* pread/pwrite take off_t; past this a transfer is split. */
#define IO_CHUNK_MAX ((size_t)1 << 30)

ssize_t util_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		size_t n = len - got > IO_CHUNK_MAX ? IO_CHUNK_MAX : len - got;
		ssize_t r = pread(fd, (char *)buf + got, n, (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

ssize_t util_read_all(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		size_t n = len - got > IO_CHUNK_MAX ? IO_CHUNK_MAX : len - got;
		ssize_t r = read(fd, (char *)buf + got, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int util_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		size_t n = len - done > IO_CHUNK_MAX ? IO_CHUNK_MAX : len - done;
		ssize_t w = pwrite(fd, (const char *)buf + done, n,
				   (off_t)(off + done));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

int util_write_all(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		size_t n = len - done > IO_CHUNK_MAX ? IO_CHUNK_MAX : len - done;
		ssize_t w = write(fd, (const char *)buf + done, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

int util_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	struct stat sb;

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; ; p++) {
		char c = *p;

		if (c != '/' && c)
			continue;
		*p = '\0';
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = c;
		if (!c)
			break;
	}
	if (stat(path, &sb))
		return -errno;
	return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}
