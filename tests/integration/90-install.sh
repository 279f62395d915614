#!/bin/bash
# SPDX-License-Identifier: MIT
#
# libfmckpt as a user gets it: `make install` into a fresh prefix (and
# with DESTDIR), then a small C program written here is built against the
# installed library with `pkg-config --cflags --libs fmckpt`, once linked
# to the shared library and once to the static one.  It saves a
# checkpoint of two tensors to a directory and to a bucket of the test
# gateway, waits until it is durable, and loads it back from the bucket
# alone (the directory removed); the bytes must be the ones saved, and the
# aws CLI must see the manifest in the bucket.  Also: the installed
# programs and man pages are where `make install` says, and the shared
# library exports only the ckpt_ functions of ckpt.h.
. "$TOP/tests/lib/common.sh"

command -v pkg-config >/dev/null || fail "pkg-config is missing (apt-get install pkg-config)"
command -v cc >/dev/null || fail "no C compiler (apt-get install gcc)"

inst=$TEST_DIR/prefix
make -s -C "$TOP" install prefix="$inst" >"$TEST_DIR/install.log" 2>&1 ||
	{ cat "$TEST_DIR/install.log" >&2; fail "make install prefix=$inst failed"; }
for f in bin/fmfs bin/fmckpt bin/fmtrain share/man/man1/fmfs.1 \
	share/man/man1/fmckpt.1 share/man/man1/fmtrain.1 \
	share/man/man1/fmfs-csi.1 lib/libfmckpt.a \
	lib/libfmckpt.so lib/libfmckpt.so.0 include/fmfs/ckpt.h \
	include/fmfs/objstore/objstore.h lib/pkgconfig/fmckpt.pc \
	sbin/mount.fmfs bin/fmfs-csi; do
	[ -e "$inst/$f" ] || fail "make install did not install $f"
done
[ "$(readlink "$inst/sbin/mount.fmfs")" = "$inst/bin/fmfs" ] ||
	fail "mount.fmfs does not point at $inst/bin/fmfs"
note "make install prefix=...: programs, mount.fmfs, man pages, libfmckpt.a/.so, headers, fmckpt.pc"
# The Python package, finding the library it was installed with.
pyd=$(ls -d "$inst"/lib/python3*/dist-packages 2>/dev/null | head -1)
[ -e "$pyd/fmckpt/__init__.py" ] || fail "make install did not install the Python package fmckpt under $inst/lib/python3*/dist-packages"
# shellcheck disable=SC2046 # words VAR=VALUE, or none
got=$(cd / && env -u FMCKPT_LIB $(sanitizer_preload "$inst/lib/libfmckpt.so.0") \
	PYTHONPATH="$pyd" /usr/bin/python3 -c \
	'import fmckpt; print(fmckpt.library_path())') ||
	fail "import fmckpt from $pyd failed"
[ "$got" = "$(readlink -f "$inst/lib/libfmckpt.so.0")" ] ||
	fail "installed fmckpt loads $got, not $inst/lib/libfmckpt.so.0"
note "the Python package fmckpt: installed, and loads the installed library"

# DESTDIR stages the same tree under another root, for packagers.
make -s -C "$TOP" install prefix=/usr DESTDIR="$TEST_DIR/stage" \
	>"$TEST_DIR/install2.log" 2>&1 || fail "make install DESTDIR=... failed"
[ -e "$TEST_DIR/stage/usr/lib/libfmckpt.so.0" ] &&
	[ -e "$TEST_DIR/stage/usr/include/fmfs/ckpt.h" ] ||
	fail "make install DESTDIR=$TEST_DIR/stage prefix=/usr missed files"
[ "$(readlink "$TEST_DIR/stage/sbin/mount.fmfs")" = /usr/bin/fmfs ] ||
	fail "make install prefix=/usr: no /sbin/mount.fmfs -> /usr/bin/fmfs under DESTDIR (mount(8) looks in /sbin)"
grep -q '^prefix=/usr$' "$TEST_DIR/stage/usr/lib/pkgconfig/fmckpt.pc" ||
	fail "fmckpt.pc under DESTDIR does not name prefix /usr"
note "make install DESTDIR=... prefix=/usr stages under DESTDIR"

# Only ckpt_ symbols leave the shared library.
others=$(nm -D --defined-only "$inst/lib/libfmckpt.so" |
	awk '$2 ~ /^[TDBR]$/ && $3 !~ /^ckpt_/ {print $3}')
[ -z "$others" ] || fail "libfmckpt.so exports more than ckpt_*: $others"

# A sanitizer build's library needs its runtime in the program too.
san=
grep -q '^SANITIZERS = 1' "$TOP/config.mak" && san="-fsanitize=address,undefined"

export PKG_CONFIG_PATH=$inst/lib/pkgconfig
pkg-config --exists fmckpt || fail "pkg-config does not find fmckpt in $PKG_CONFIG_PATH"

bucket=$(new_bucket install)
cat >"$TEST_DIR/roundtrip.c" <<'EOF'
/* A user's program: save two tensors, wait until durable, load them back
 * from the bucket alone. */
#include <ckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4096

static int die(const char *what, int rc, const char *msg)
{
	fprintf(stderr, "%s: %d: %s\n", what, rc, msg);
	return 1;
}

int main(int argc, char **argv)
{
	static float w[N], back[N];
	static unsigned char blob[100], blob_back[100];
	struct ckpt_config cfg;
	struct ckpt *c;
	char msg[512] = "";
	int64_t shape[1] = { N }, bshape[1] = { sizeof(blob) };
	uint64_t step = 0;
	int rc;

	if (argc != 3)
		return 2;
	for (int i = 0; i < N; i++)
		w[i] = (float)i * 0.5f - 7.0f;
	memset(blob, 0x5a, sizeof(blob));
	ckpt_config_init(&cfg);
	cfg.dir = argv[1];
	cfg.remote = argv[2];
	cfg.chunk_bytes = 5u << 20;
	cfg.staging_bytes = 32u << 20;
	if ((rc = ckpt_open(&cfg, &c, msg, sizeof(msg))))
		return die("ckpt_open", rc, msg);
	if ((rc = ckpt_begin(c, 7, msg, sizeof(msg))) ||
	    (rc = ckpt_add(c, "w", CKPT_F32, 1, shape, w, sizeof(w), 0, msg,
			   sizeof(msg))) ||
	    (rc = ckpt_add(c, "blob", CKPT_BYTES, 1, bshape, blob,
			   sizeof(blob), 0, msg, sizeof(msg))) ||
	    (rc = ckpt_commit(c, msg, sizeof(msg))) ||
	    (rc = ckpt_wait(c, 7, CKPT_DURABLE, 120000, msg, sizeof(msg))))
		return die("save", rc, msg);
	if ((rc = ckpt_close(c, msg, sizeof(msg))))
		return die("ckpt_close", rc, msg);

	/* Read back from the bucket alone. */
	ckpt_config_init(&cfg);
	cfg.remote = argv[2];
	cfg.read_only = true;
	if ((rc = ckpt_open(&cfg, &c, msg, sizeof(msg))))
		return die("ckpt_open (remote)", rc, msg);
	struct ckpt_buf bufs[2] = {
		{ "w", back, sizeof(back) },
		{ "blob", blob_back, sizeof(blob_back) },
	};
	if ((rc = ckpt_load(c, CKPT_STEP_LATEST, bufs, 2, &step, msg,
			    sizeof(msg))))
		return die("ckpt_load", rc, msg);
	ckpt_close(c, NULL, 0);
	if (step != 7 || memcmp(w, back, sizeof(w)) ||
	    memcmp(blob, blob_back, sizeof(blob))) {
		fprintf(stderr, "loaded step %llu differs from what was saved\n",
			(unsigned long long)step);
		return 1;
	}
	printf("ok step %llu\n", (unsigned long long)step);
	return 0;
}
EOF

# Linked to the shared library.
# shellcheck disable=SC2046
cc -Wall -Werror $san -o "$TEST_DIR/rt-shared" "$TEST_DIR/roundtrip.c" \
	$(pkg-config --cflags --libs fmckpt) 2>"$TEST_DIR/cc.err" ||
	{ cat "$TEST_DIR/cc.err" >&2; fail "a program does not build with pkg-config --cflags --libs fmckpt"; }
LD_LIBRARY_PATH=$inst/lib ldd "$TEST_DIR/rt-shared" | grep -q "$inst/lib/libfmckpt.so.0" ||
	fail "rt-shared is not linked to the installed libfmckpt.so.0"
rm -rf "$TEST_DIR/ck"
LD_LIBRARY_PATH=$inst/lib "$TEST_DIR/rt-shared" "$TEST_DIR/ck" "s3://$bucket/shared" \
	>"$TEST_DIR/rt.out" 2>"$TEST_DIR/rt.err" ||
	{ cat "$TEST_DIR/rt.err" >&2; fail "the program linked to libfmckpt.so failed"; }
grep -q '^ok step 7$' "$TEST_DIR/rt.out" || fail "rt-shared: $(cat "$TEST_DIR/rt.out")"
awsx s3 ls --recursive "s3://$bucket/shared/" >"$TEST_DIR/ls.out"
grep -q 'step-0*7/manifest$' "$TEST_DIR/ls.out" ||
	fail "aws does not see the manifest of step 7 under s3://$bucket/shared/"
note "built with pkg-config, linked to libfmckpt.so: saved to a dir and the bucket, loaded back from the bucket; aws sees the manifest"

# Linked to the static library (pkg-config --static adds what it needs).
# shellcheck disable=SC2046
cc -Wall -Werror $san -o "$TEST_DIR/rt-static" "$TEST_DIR/roundtrip.c" \
	$(pkg-config --cflags fmckpt) "$inst/lib/libfmckpt.a" \
	$(pkg-config --static --libs fmckpt | sed 's/-lfmckpt//') \
	2>"$TEST_DIR/cc2.err" ||
	{ cat "$TEST_DIR/cc2.err" >&2; fail "a program does not link against libfmckpt.a with pkg-config --static"; }
if ldd "$TEST_DIR/rt-static" | grep -q libfmckpt; then
	fail "rt-static loads libfmckpt.so"
fi
"$TEST_DIR/rt-static" "$TEST_DIR/ck2" "s3://$bucket/static" \
	>"$TEST_DIR/rt2.out" 2>"$TEST_DIR/rt2.err" ||
	{ cat "$TEST_DIR/rt2.err" >&2; fail "the program linked to libfmckpt.a failed"; }
grep -q '^ok step 7$' "$TEST_DIR/rt2.out" || fail "rt-static: $(cat "$TEST_DIR/rt2.out")"
note "linked to libfmckpt.a: the same round trip"

make -s -C "$TOP" uninstall prefix="$inst" >/dev/null 2>&1 || fail "make uninstall failed"
[ ! -e "$inst/lib/libfmckpt.so.0" ] && [ ! -e "$inst/bin/fmfs" ] &&
	[ ! -L "$inst/sbin/mount.fmfs" ] &&
	[ ! -e "$inst/share/man/man1/fmfs-csi.1" ] ||
	fail "make uninstall left files in $inst"
note "make uninstall removes them again"
