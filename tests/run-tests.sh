#!/bin/bash
# SPDX-License-Identifier: MIT
#
# run-tests.sh - the test runner behind `make check` and `make check-quick`.
#
#   tests/run-tests.sh UNIT_PROGRAM...
#
# Runs each cmocka unit program and (unless FMFS_SKIP_INTEGRATION=1) every
# tests/integration/NN-*.sh against one private Ceph RADOS gateway
# (tests/lib/rgw.sh), FMFS_JOBS at a time (default 4), longest first,
# each in its own directory, with a time limit, stopping every gateway at
# the end whatever happened.  A test exits 0 (pass), 77 (skipped, with a
# reason) or anything else (fail).  docs/testing.md ("Tiers, times and
# budgets") is the table this reads: each test's tier, its typical time
# (the order of the run) and its budget; a test that ends over its
# budget prints a WARNING line.  Headers a test may carry:
#   # time-limit: S     its own time limit (default FMFS_TEST_TIMEOUT_S, 600)
#   # gateway: own      a private gateway of its own (it stops, restarts or
#                       counts the bytes of the gateway, which would disturb
#                       or be disturbed by the tests running beside it)
#   # exclusive: WHY    runs alone, after the others (it changes something
#                       every test shares, e.g. the fuse module's parameters)
# A test's output is printed whole when it ends, with its wall time; at the
# end come the ten slowest.  FMFS_REQUIRE_INTEGRATION=1 (set by .ci/run)
# turns skips into failures, so CI cannot pass without the gateway.
# FMFS_TESTS=GLOB selects integration tests; FMFS_TIER=quick runs only the
# quick tier (unit tests and the integration tests the table marks quick).
# FMFS_URING=on|off sets the fuse module's enable_uring for the run (as
# root, where the kernel has FUSE over io_uring; put back at the end), so
# that every mount takes its requests by io_uring or by /dev/fuse
# (docs/fuse-uring.md); unset leaves it as it is.  With on, mounts have
# no keeper unless a test asks for one (tests/lib/fmfs-no-keeper): a kept
# mount takes its requests from /dev/fuse (docs/keeper.md "The ring"), so
# the off run is the one whose mounts are kept, as `fmfs mount`'s are.
# The last line is the summary: "N passed, N failed, N skipped".

set -u
# wait -n -p (below) came with bash 5.1 (Debian 12 has 5.2).
if [ "${BASH_VERSINFO[0]}" -lt 5 ] ||
	{ [ "${BASH_VERSINFO[0]}" = 5 ] && [ "${BASH_VERSINFO[1]}" -lt 1 ]; }; then
	echo "run-tests.sh needs bash 5.1 or later (this is $BASH_VERSION)" >&2
	exit 2
fi
TOP=$(cd "$(dirname "$0")/.." && pwd)
export TOP
export FMFS=$TOP/tools/fmfs
TEST_TIMEOUT_S=${FMFS_TEST_TIMEOUT_S:-600}
JOBS=${FMFS_JOBS:-4}
TIER=${FMFS_TIER:-full}
case $JOBS in ''|*[!0-9]*|0) echo "FMFS_JOBS=$JOBS: give a number >= 1" >&2; exit 2 ;; esac
case $TIER in quick|full) ;; *) echo "FMFS_TIER=$TIER: give quick or full" >&2; exit 2 ;; esac
pass=0 failn=0 skip=0
failed_names=()
times_list=()        # "SECONDS NAME" of every job that ran
T_RUN0=$EPOCHREALTIME

SAN=0
grep -q '^SANITIZERS = 1' "$TOP/config.mak" 2>/dev/null && SAN=1

# The table of docs/testing.md: NAME TIER TYPICAL BUDGET TYPICAL_SAN
# BUDGET_SAN, one line each.
BUDGETS=$(awk -F'|' '/^## Tiers, times and budgets/ {t = 1; next}
	t && /^## / {exit}
	t && NF >= 8 {
		for (i = 2; i <= 7; i++) { gsub(/[` ]/, "", $i) }
		if ($4 ~ /^[0-9]+$/) print $2, $3, $4, $5, $6, $7
	}' "$TOP/docs/testing.md")
row_of() { awk -v n="$1" '$1 == n' <<<"$BUDGETS"; }
typical_of() { # NAME: seconds, for the order of the run (unknown: 120)
	local r; r=$(row_of "$1")
	[ -n "$r" ] || { echo 120; return; }
	set -- $r
	[ $SAN = 1 ] && echo "$5" || echo "$3"
}
budget_of() { # NAME: seconds, or nothing
	local r; r=$(row_of "$1")
	[ -n "$r" ] || return 0
	set -- $r
	[ $SAN = 1 ] && echo "$6" || echo "$4"
}
tier_of() { local r; r=$(row_of "$1"); set -- $r; echo "${2:-full}"; }

result() { # NAME RC
	case $2 in
	0) pass=$((pass + 1)); echo "PASS: $1" ;;
	77) skip=$((skip + 1)); echo "SKIP: $1" ;;
	*) failn=$((failn + 1)); failed_names+=("$1"); echo "FAIL: $1 (exit $2)" ;;
	esac
}

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
		if [ "$FMFS_URING" = on ]; then
			export FMFS_REAL=$FMFS
			export FMFS=$TOP/tests/lib/fmfs-no-keeper
			echo "== mounts without a keeper unless a test asks" \
				"for one (tests/lib/fmfs-no-keeper)"
		fi
	else
		echo "== FUSE over io_uring: FMFS_URING=$FMFS_URING ignored: no" \
			"writable $URING_PARAM (kernel $(uname -r), uid $(id -u))"
	fi ;;
*) echo "FMFS_URING=$FMFS_URING: give on or off" >&2; exit 2 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/fmfs-tests.XXXXXX")
rgw_dir=$work/rgw
declare -A JOB_NAME=() JOB_T0=()
cleanup() {
	local p d
	for p in "${!JOB_NAME[@]}"; do
		kill -TERM "$(cat "$work/${JOB_NAME[$p]}.tpid" 2>/dev/null)" \
			"$p" 2>/dev/null
	done
	for p in "${!JOB_NAME[@]}"; do wait "$p" 2>/dev/null; done
	for d in "$work"/*.rgw "$rgw_dir"; do
		[ -d "$d" ] && "$TOP/tests/lib/rgw.sh" stop "$d" >/dev/null 2>&1
	done
	if [ -n "$uring_old" ]; then echo "$uring_old" >"$URING_PARAM"; fi
	if [ -z "${FMFS_KEEP_TEST_DIR:-}" ]; then
		rm -rf "$work"
	else
		echo "test directories kept in $work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_job NAME KIND PATH: the body of one job, in a subshell of its own
# (start_job), its output in $work/NAME.log.  KIND: unit, or integration.
# On an interrupt, cleanup() sends TERM to the job and to its timeout,
# which passes it on; a test still finishes the command it is in (bash
# runs a trap only then).
run_job() {
	local name=$1 kind=$2 path=$3 lim rc gw=
	if [ "$kind" = unit ]; then
		"$TOP/$path"
		return
	fi
	export TEST_DIR=$work/$name
	mkdir -p "$TEST_DIR"
	# A test may ask for longer: a "# time-limit: S" line.
	lim=$(sed -n 's/^# time-limit: \([0-9]*\)$/\1/p' "$path")
	lim=${lim:-$TEST_TIMEOUT_S}
	if grep -Eq '^# gateway: own( |$)' "$path"; then
		gw=$work/$name.rgw
		if ! "$TOP/tests/lib/rgw.sh" start "$gw" >/dev/null; then
			echo "could not start the test's own gateway (see above)"
			return 1
		fi
		# shellcheck disable=SC1091
		. "$gw/env"
	fi
	# timeout makes a process group of its own: cleanup() signals it by
	# the pid kept here, and timeout passes the signal on to the test.
	timeout -k 10 "$lim" bash "$path" &
	echo $! >"$work/$name.tpid"
	wait $!
	rc=$?
	[ $rc = 124 ] && echo "   timed out after ${lim}s"
	[ -n "$gw" ] && "$TOP/tests/lib/rgw.sh" stop "$gw" >/dev/null 2>&1
	return $rc
}

start_job() { # NAME KIND PATH
	local p
	( trap - EXIT INT TERM; run_job "$@" ) >"$work/$1.log" 2>&1 </dev/null &
	p=$!
	JOB_NAME[$p]=$1
	JOB_T0[$p]=$EPOCHREALTIME
}

# reap: wait for one job to end and report it.
reap() {
	local p rc name secs budget
	wait -n -p p "${!JOB_NAME[@]}"
	rc=$?
	name=${JOB_NAME[$p]}
	secs=$(awk -v a="${JOB_T0[$p]}" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", b - a}')
	unset "JOB_NAME[$p]" "JOB_T0[$p]"
	echo "== $name"
	cat "$work/$name.log"
	if [ "$rc" = 77 ] && [ -n "${FMFS_REQUIRE_INTEGRATION:-}" ] &&
		[[ $name != test_* ]]; then
		rc=1
	fi
	echo "   ($secs s)"
	times_list+=("$secs $name")
	budget=$(budget_of "$name")
	if [ -z "$budget" ]; then
		echo "WARNING: $name has no row in docs/testing.md (Tiers, times and budgets)"
	elif [ "$secs" -gt "$budget" ]; then
		echo "WARNING: $name took $secs s, over its budget of $budget s (docs/testing.md)"
	fi
	result "$name" $rc
}

# The jobs: "TYPICAL NAME KIND PATH", longest first.
jobs_list=()
exclusive=()
for prog in "$@"; do
	n=$(basename "$prog")
	jobs_list+=("$(typical_of "$n") $n unit $prog")
done

missing=""
for tool in radosgw ceph-mon ceph-osd aws python3 curl; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done

integ=()
for t in "$TOP"/tests/integration/[0-9]*.sh; do
	name=$(basename "$t" .sh)
	case $name in ${FMFS_TESTS:-*}) ;; *) continue ;; esac
	[ "$TIER" = quick ] && [ "$(tier_of "$name")" != quick ] && continue
	integ+=("$t")
done

if [ -n "${FMFS_SKIP_INTEGRATION:-}" ]; then
	echo "== integration tests skipped (FMFS_SKIP_INTEGRATION set)"
	integ=()
elif [ -n "$missing" ]; then
	echo "== integration tests need:$missing"
	echo "   (apt-get install radosgw ceph-mon ceph-osd ceph-common curl python3;"
	echo "    the aws CLI: apt-get install awscli; or run .ci/run)"
	for t in "${integ[@]}"; do
		if [ -n "${FMFS_REQUIRE_INTEGRATION:-}" ]; then
			result "$(basename "$t" .sh)" 1
		else
			result "$(basename "$t" .sh)" 77
		fi
	done
	integ=()
elif [ ${#integ[@]} -gt 0 ]; then
	echo "== starting a private Ceph RADOS gateway"
	if ! "$TOP/tests/lib/rgw.sh" start "$rgw_dir"; then
		echo "could not start the gateway (see above)"
		result "gateway start" 1
		integ=()
	else
		# shellcheck disable=SC1091
		. "$rgw_dir/env"
	fi
fi
for t in "${integ[@]}"; do
	name=$(basename "$t" .sh)
	if grep -q '^# exclusive: ' "$t"; then
		exclusive+=("$name $t")
	else
		jobs_list+=("$(typical_of "$name") $name integration $t")
	fi
done

echo "== ${#jobs_list[@]} jobs, $JOBS at a time, then ${#exclusive[@]} alone" \
	"(tier $TIER$([ $SAN = 1 ] && echo ', sanitizer build'))"
while read -r _ name kind path; do
	[ -n "$name" ] || continue
	while [ ${#JOB_NAME[@]} -ge "$JOBS" ]; do reap; done
	start_job "$name" "$kind" "$path"
done < <(printf '%s\n' "${jobs_list[@]}" | sort -k1,1nr -k2,2)
while [ ${#JOB_NAME[@]} -gt 0 ]; do reap; done
for e in "${exclusive[@]}"; do
	start_job "${e%% *}" integration "${e#* }"
	reap
done

echo
echo "== the ten slowest (wall s):"
printf '%s\n' "${times_list[@]}" | sort -k1,1nr | head -10 |
	awk '{printf "   %5d  %s\n", $1, $2}'
awk -v a="$T_RUN0" -v b="$EPOCHREALTIME" \
	'BEGIN {printf "== whole run: %.0f s\n", b - a}'
[ $failn -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $failn failed, $skip skipped"
[ $failn -eq 0 ]
