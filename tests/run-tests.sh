#!/bin/bash
# SPDX-License-Identifier: MIT
#
# run-tests.sh - the test runner behind `make check`.
#
#   tests/run-tests.sh UNIT_PROGRAM...
#
# Runs each cmocka unit program, then (unless FMFS_SKIP_INTEGRATION=1) starts
# one private Ceph RADOS gateway (tests/lib/rgw.sh) and runs every
# tests/integration/NN-*.sh against it, each in its own directory, with a
# time limit, stopping the gateway at the end whatever happened.  A test
# exits 0 (pass), 77 (skipped, with a reason) or anything else (fail).
# FMFS_REQUIRE_INTEGRATION=1 (set by .ci/run) turns skips into failures, so
# CI cannot pass without the gateway.  FMFS_TESTS=PATTERN selects tests.
# FMFS_URING=on|off sets the fuse module's enable_uring for the run (as
# root, where the kernel has FUSE over io_uring; put back at the end), so
# that every mount takes its requests by io_uring or by /dev/fuse
# (docs/fuse-uring.md); unset leaves it as it is.
# The last line is the summary: "N passed, N failed, N skipped".

set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
export TOP
export FMFS=$TOP/tools/fmfs
TEST_TIMEOUT_S=${FMFS_TEST_TIMEOUT_S:-600}
pass=0 failn=0 skip=0
failed_names=()

result() { # NAME RC
	case $2 in
	0) pass=$((pass + 1)); echo "PASS: $1" ;;
	77) skip=$((skip + 1)); echo "SKIP: $1" ;;
	*) failn=$((failn + 1)); failed_names+=("$1"); echo "FAIL: $1 (exit $2)" ;;
	esac
}

for prog in "$@"; do
	echo "== unit: $prog"
	"$TOP/$prog"
	result "$prog" $?
done

URING_PARAM=/sys/module/fuse/parameters/enable_uring
uring_old=
case ${FMFS_URING:-} in
'') ;;
on|off)
	if [ -w "$URING_PARAM" ]; then
		uring_old=$(cat "$URING_PARAM")
		[ "$FMFS_URING" = on ] && echo Y >"$URING_PARAM" ||
			echo N >"$URING_PARAM"
		echo "== FUSE over io_uring: $FMFS_URING (enable_uring was $uring_old)"
	else
		echo "== FUSE over io_uring: FMFS_URING=$FMFS_URING ignored: no" \
			"writable $URING_PARAM (kernel $(uname -r), uid $(id -u))"
	fi ;;
*) echo "FMFS_URING=$FMFS_URING: give on or off" >&2; exit 2 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/fmfs-tests.XXXXXX")
rgw_dir=$work/rgw
cleanup() {
	"$TOP/tests/lib/rgw.sh" stop "$rgw_dir" >/dev/null 2>&1
	if [ -n "$uring_old" ]; then echo "$uring_old" >"$URING_PARAM"; fi
	if [ -z "${FMFS_KEEP_TEST_DIR:-}" ]; then
		rm -rf "$work"
	else
		echo "test directories kept in $work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

missing=""
for tool in radosgw ceph-mon ceph-osd aws python3 curl; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done

if [ -n "${FMFS_SKIP_INTEGRATION:-}" ]; then
	echo "== integration tests skipped (FMFS_SKIP_INTEGRATION set)"
elif [ -n "$missing" ]; then
	echo "== integration tests need:$missing"
	echo "   (apt-get install radosgw ceph-mon ceph-osd ceph-common curl python3;"
	echo "    the aws CLI: apt-get install awscli; or run .ci/run)"
	for t in "$TOP"/tests/integration/[0-9]*.sh; do
		if [ -n "${FMFS_REQUIRE_INTEGRATION:-}" ]; then
			result "$(basename "$t")" 1
		else
			result "$(basename "$t")" 77
		fi
	done
else
	echo "== starting a private Ceph RADOS gateway"
	if ! "$TOP/tests/lib/rgw.sh" start "$rgw_dir"; then
		echo "could not start the gateway (see above)"
		result "gateway start" 1
	else
		# shellcheck disable=SC1091
		. "$rgw_dir/env"
		for t in "$TOP"/tests/integration/[0-9]*.sh; do
			name=$(basename "$t" .sh)
			case $name in ${FMFS_TESTS:-*}) ;; *) continue ;; esac
			export TEST_DIR=$work/$name
			mkdir -p "$TEST_DIR"
			echo "== integration: $name"
			t0=$(date +%s)
			# A test may ask for longer: a "# time-limit: S" line.
			lim=$(sed -n 's/^# time-limit: \([0-9]*\)$/\1/p' "$t")
			lim=${lim:-$TEST_TIMEOUT_S}
			timeout -k 10 "$lim" bash "$t"
			rc=$?
			[ $rc = 124 ] && echo "   timed out after ${lim}s"
			if [ $rc = 77 ] && [ -n "${FMFS_REQUIRE_INTEGRATION:-}" ]; then
				rc=1
			fi
			echo "   ($(($(date +%s) - t0)) s)"
			result "$name" $rc
		done
	fi
fi

echo
[ $failn -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $failn failed, $skip skipped"
[ $failn -eq 0 ]
