# SPDX-License-Identifier: MIT
#
# common.sh - sourced by every integration test (tests/integration/NN-*.sh).
# The runner (tests/run-tests.sh) exports FMFS (the binary), TEST_DIR (this
# test's own empty directory), TOP (the source tree) and the gateway's
# variables from tests/lib/rgw.sh (RGW_ENDPOINT, AWS_* keys).  Helpers here
# create a fresh bucket per test, check results with the aws CLI (an
# independent client), and run the fault proxy.

set -eu

: "${FMFS:?run through tests/run-tests.sh}" "${TEST_DIR:?}" "${TOP:?}"
export AWS_ENDPOINT_URL=$RGW_ENDPOINT
PROXY_PID=

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# note TEXT: a line of the test's log, with the seconds since the test
# began, so a slow part of a test shows in the log.
note() {
	printf '  - [%3d s] %s\n' "$SECONDS" "$*"
}

# aws CLI against the test gateway.  Quiet; errors still reach stderr.
awsx() {
	aws --endpoint-url "$RGW_ENDPOINT" "$@"
}

# new_bucket NAME: a fresh, empty bucket for this test; prints the name.
new_bucket() {
	local b="$1-$$"
	awsx s3 mb "s3://$b" >/dev/null || fail "cannot create bucket $b"
	echo "$b"
}

# expect_exit CODE PATTERN CMD...: run CMD, require exit status CODE and
# PATTERN (grep -E) in its stderr.
expect_exit() {
	local want=$1 pat=$2 rc=0
	shift 2
	"$@" >"$TEST_DIR/out" 2>"$TEST_DIR/err" || rc=$?
	if [ "$rc" != "$want" ]; then
		cat "$TEST_DIR/err" >&2
		fail "'$*' exited $rc, expected $want"
	fi
	if [ -n "$pat" ] && ! grep -Eq -- "$pat" "$TEST_DIR/err"; then
		cat "$TEST_DIR/err" >&2
		fail "'$*': stderr lacks /$pat/"
	fi
}

# mount_setup NAME: the start of every test that mounts: skips (77)
# without /dev/fuse, makes TEST_DIR the working directory, and sets B (a
# fresh bucket NAME-PID), MNT (TEST_DIR/mnt, created) and CACHE
# (TEST_DIR/cache, left for fmfs to create).
mount_setup() {
	[ -e /dev/fuse ] || { echo "SKIP: no /dev/fuse"; exit 77; }
	B=$(new_bucket "$1")
	cd "$TEST_DIR"
	MNT=$TEST_DIR/mnt
	CACHE=$TEST_DIR/cache
	mkdir -p "$MNT"
}

# mnt [OPTION...]: mounts bucket B on MNT with cache dir CACHE, the
# test's own defaults MNT_OPTS (an array, empty unless the test sets it)
# before OPTION...; fails the test if fmfs mount fails or MNT is then not
# a mount point.  try_mnt: the same mount, its status returned instead,
# for a test that expects a mount to fail or says why one failed itself.
MNT_OPTS=()
# no_keeper: from here on this test's `$FMFS mount` runs without a keeper
# (tests/lib/fmfs-no-keeper): for a test of what a kill -9 of the daemon
# does to a mount that has none.
no_keeper() {
	export FMFS_REAL=${FMFS_REAL:-$FMFS}
	FMFS=$TOP/tests/lib/fmfs-no-keeper
}
try_mnt() {
	$FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" "${MNT_OPTS[@]}" "$@"
}
mnt() {
	try_mnt "$@" || fail "mount failed (see $CACHE/fmfs.log)"
	mountpoint -q "$MNT" || fail "mount returned 0 but $MNT is not mounted"
}

# same_file A B: byte-exact comparison.
same_file() {
	cmp -s "$1" "$2" || fail "$1 and $2 differ"
}

# sanitizer_preload LIB: what a program not built with the sanitizers
# (python3) needs in its environment to load LIB when LIB is of a
# sanitizer build (./configure --enable-sanitizers): ASan's runtime
# first (LD_PRELOAD), and no leak report of the interpreter's own.
# Prints VAR=VALUE words for env; nothing for a plain build.
sanitizer_preload() {
	ldd "$1" 2>/dev/null | grep -q 'libasan\.so' || return 0
	echo "LD_PRELOAD=$(gcc -print-file-name=libasan.so)" \
		"ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
}

# random_file PATH SIZE_MIB
random_file() {
	head -c "$(($2 * 1024 * 1024))" /dev/urandom >"$1"
}

# elapsed_ms CMD...: runs CMD (status ignored), prints milliseconds taken.
elapsed_ms() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 || true
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

# start_proxy [RULE...]: fault proxy in front of the gateway; sets
# PROXY_URL.  Stopped by the trap below.
start_proxy() {
	local args=() r
	for r in "$@"; do args+=(--rule "$r"); done
	rm -f "$TEST_DIR/proxy.port"
	python3 "$TOP/tests/faultproxy.py" --upstream "${RGW_ENDPOINT#http://}" \
		--port-file "$TEST_DIR/proxy.port" --max-seconds 600 \
		"${args[@]}" >"$TEST_DIR/proxy.out" 2>"$TEST_DIR/proxy.log" &
	PROXY_PID=$!
	for _ in $(seq 100); do
		[ -s "$TEST_DIR/proxy.port" ] && break
		sleep 0.1
	done
	[ -s "$TEST_DIR/proxy.port" ] || fail "fault proxy did not start"
	PROXY_URL=http://127.0.0.1:$(cat "$TEST_DIR/proxy.port")
}

# proxy_rules [RULE...]: replace the proxy's rules (none: clear).
proxy_rules() {
	local q="" r
	if [ $# = 0 ]; then
		curl -sf "$PROXY_URL/__fault__/clear" >/dev/null
		return
	fi
	for r in "$@"; do q="$q&rule=$(printf %s "$r" | sed 's/&/%26/g')"; done
	curl -sf "$PROXY_URL/__fault__/set?${q#&}" >/dev/null ||
		fail "proxy rejected rules: $*"
}

# proxy_stat EXPR: a number from /__fault__/stats, e.g. 'faults_total'.
proxy_stat() {
	curl -sf "$PROXY_URL/__fault__/stats" |
		python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, d))" "$1"
}

# stat_of NAME: one field of `fmfs status "$MNT" --json`.
stat_of() {
	$FMFS status "$MNT" --json | python3 -c \
		"import json,sys; print(json.load(sys.stdin)['$1'])"
}

# wait_index_flush [MOUNTPOINT]: wait (at most 30 s) until what changed
# in the cache index before the call is on disk: its flush count (fmfs
# status index_flushes) has gone up by two, so one whole flush began
# after the call.  Instead of sleeping for the flusher's period.
wait_index_flush() {
	local m=${1:-$MNT} n0 n
	n0=$($FMFS status "$m" --json | python3 -c \
		"import json,sys; print(json.load(sys.stdin)['index_flushes'])") ||
		fail "no index_flushes in fmfs status $m"
	for _ in $(seq 300); do
		n=$($FMFS status "$m" --json | python3 -c \
			"import json,sys; print(json.load(sys.stdin)['index_flushes'])")
		[ "$n" -ge $((n0 + 2)) ] && return 0
		sleep 0.1
	done
	fail "the cache index of $m was not flushed in 30 s (index_flushes $n0 -> $n)"
}

# drop_page_cache FILE...: the kernel forgets the cached pages of these
# files only (posix_fadvise DONTNEED), so the next read reaches the
# daemon.  Never /proc/sys/vm/drop_caches: that also drops the dentries
# and inodes of every mount, so a test running beside this one would see
# its files' inode numbers change (docs/posix.md, st_ino).
drop_page_cache() {
	python3 - "$@" <<'PYEOF' || fail "could not drop the page cache of $*"
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PYEOF
}

# wait_parts OUT...: for parts of a test run at once in the background,
# each writing to its OUT file: waits for as many background jobs as
# OUTs (so start no other, e.g. start_proxy, before), then prints each
# OUT under its name.  1 if any part failed.
wait_parts() {
	local o rc=0
	for o in "$@"; do wait -n || rc=1; done
	for o in "$@"; do
		echo "  -- $(basename "$o" .out)"
		cat "$o"
	done
	return $rc
}

# unmount_quietly MNT: for traps; never fails (set -e would end the trap).
unmount_quietly() {
	"$FMFS" umount "$1" 2>/dev/null || fusermount3 -u "$1" 2>/dev/null ||
		true
}

cleanup_common() {
	if [ -n "$PROXY_PID" ]; then
		kill "$PROXY_PID" 2>/dev/null || true
		wait "$PROXY_PID" 2>/dev/null || true
	fi
}
trap cleanup_common EXIT
