/* SPDX-License-Identifier: MIT */
/*
 * util.c - helpers shared by the front ends (fmfs, fmckpt): sizes on the
 * command line and exit codes for objstore statuses (tools.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "tools.h"

int tools_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	double mul = 1;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0 || !isfinite(v))
		return -1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end == 'i' && mul > 1)
		end++;
	if ((*end == 'B' || *end == 'b') && end[1] == '\0')
		end++;
	if (*end || v * mul > 1.8e19)
		return -1;
	*out = (uint64_t)(v * mul);
	return 0;
}

int tools_exit_code(obj_status st)
{
	switch (st) {
	case OBJ_OK:
		return EXIT_OK;
	case OBJ_ERR_INVALID:
		return EXIT_USAGE;
	case OBJ_ERR_CREDENTIALS:
	case OBJ_ERR_AUTH:
	case OBJ_ERR_DENIED:
		return EXIT_AUTH;
	case OBJ_ERR_NO_BUCKET:
	case OBJ_ERR_NOT_FOUND:
		return EXIT_NOT_FOUND;
	case OBJ_ERR_CONNECT:
	case OBJ_ERR_TIMEOUT:
		return EXIT_UNREACHABLE;
	default:
		return EXIT_FAIL;
	}
}
