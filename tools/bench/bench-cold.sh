#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-cold.sh - cold reads through one fmfs binary against another
# (docs/performance.md "Cold reads"), same run, same gateway, rounds
# interleaved: 8 x 64 MiB shards read at once (8 dd, bs=1M) from a fresh
# mount on an empty cache directory, page cache dropped, as
# bench-mount.sh's cold read.  For
# each read: MiB/s, and the daemon's CPU seconds per GiB (utime + stime
# of the processes whose command line names the mount point, from
# /proc/PID/stat) and their minor page faults per GiB.  Shard 3 is
# compared byte for byte with the upload.
# The gateway is tests/lib/rgw.sh's (Ceph RGW on loopback).  Ratios
# NEW / OLD are taken within each round; medians over rounds.  A
# benchmark, not a test: exit 1 only when something fails.
#
#   tools/bench/bench-cold.sh OLD_FMFS [NEW_FMFS]   (NEW: tools/fmfs)
#
# e.g. build the commit before a change in a worktree and pass its
# tools/fmfs as OLD.  Environment: BENCH_ROUNDS=4, BENCH_TMPDIR=DIR
# (/tmp), BENCH_FMFS_OPTS="..." (extra `fmfs mount` options, both).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${BENCH_ROUNDS:-4}
die() { echo "bench-cold.sh: $*" >&2; exit 1; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: bench-cold.sh OLD_FMFS [NEW_FMFS]" >&2
	exit 2
fi
OLD_BIN=$(realpath "$1")
NEW_BIN=$(realpath "${2:-$ROOT/tools/fmfs}")
[ "$(id -u)" = 0 ] || die "needs root (mounts, drop_caches)"
for b in "$OLD_BIN" "$NEW_BIN"; do
	[ -x "$b" ] || die "$b is not an executable"
done
command -v aws >/dev/null || die "aws CLI missing (tests/lib/rgw.sh needs it too)"

W=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/bench-cold.XXXXXX")
MNT=$W/mnt
cleanup() {
	"$NEW_BIN" umount "$MNT" >/dev/null 2>&1 ||
		fusermount3 -u "$MNT" >/dev/null 2>&1 || true
	bash "$ROOT/tests/lib/rgw.sh" stop "$W/gw" >/dev/null 2>&1 || true
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/data" "$MNT"

echo "== gateway and data: 8 x 64 MiB random shards"
bash "$ROOT/tests/lib/rgw.sh" start "$W/gw" >/dev/null ||
	die "the gateway did not start (see $W/gw)"
# shellcheck disable=SC1091 # written by rgw.sh
. "$W/gw/env"
export AWS_ENDPOINT_URL=$RGW_ENDPOINT
for i in 1 2 3 4 5 6 7 8; do
	head -c 64M /dev/urandom >"$W/data/shard$i"
done
aws s3 cp --recursive --quiet "$W/data" "s3://$RGW_BUCKET/shards/" ||
	die "uploading the shards failed"

cpu_ticks() { # prints "TICKS MINFLT" of the mount's processes
	local p t=0 f=0 s
	for p in $(pgrep -f -- "$MNT"); do
		s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
		t=$(( t + $(awk '{ print $12 + $13 }' <<<"$s") ))
		f=$(( f + $(awk '{ print $8 }' <<<"$s") ))
	done
	echo "$t $f"
}

RES=$W/results
: >"$RES"
one() { # NAME BIN
	local c0 c1 f0 f1 t0 t1 i p bad= pids=()
	rm -rf "$W/cache"
	mkdir -p "$W/cache"
	# shellcheck disable=SC2086 # options are words
	"$2" mount "s3://$RGW_BUCKET" "$MNT" --cache-dir "$W/cache" \
		--endpoint "$RGW_ENDPOINT" ${BENCH_FMFS_OPTS:-} >/dev/null ||
		die "$1: fmfs mount failed"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	read -r c0 f0 < <(cpu_ticks) || die "$1: no daemon CPU figures"
	t0=$EPOCHREALTIME
	for i in 1 2 3 4 5 6 7 8; do
		dd if="$MNT/shards/shard$i" of=/dev/null bs=1M 2>/dev/null &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || bad=1
	done
	t1=$EPOCHREALTIME
	read -r c1 f1 < <(cpu_ticks) || die "$1: no daemon CPU figures"
	[ -z "$bad" ] || die "$1: a dd failed"
	cmp -s "$MNT/shards/shard3" "$W/data/shard3" ||
		die "$1: shard3 read through the mount differs from the upload"
	"$2" umount "$MNT" >/dev/null || die "$1: fmfs umount failed"
	awk -v n="$1" -v r="$ROUND" -v a="$t0" -v b="$t1" -v c0="$c0" \
		-v c1="$c1" -v hz="$(getconf CLK_TCK)" -v f="$((f1 - f0))" 'BEGIN {
		printf "%s %s %.1f %.3f %d\n", r, n, 512 / (b - a),
			(c1 - c0) / hz / 0.5, f * 2 }' | tee -a "$RES"
}

echo "== rounds: round system MiB/s daemon-CPU-s-per-GiB minor-faults-per-GiB"
for ROUND in $(seq 1 "$ROUNDS"); do
	# Alternate which binary goes first.
	if [ $((ROUND % 2)) = 1 ]; then
		one old "$OLD_BIN"; one new "$NEW_BIN"
	else
		one new "$NEW_BIN"; one old "$OLD_BIN"
	fi
done

python3 - "$RES" "$OLD_BIN" "$NEW_BIN" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, n, mib, cpu, flt in rows:
    by.setdefault(int(r), {})[n] = (float(mib), float(cpu), int(flt))
rate = [v["new"][0] / v["old"][0] for v in by.values()]
cpu = [v["new"][1] / v["old"][1] for v in by.values() if v["old"][1] > 0]
med = statistics.median
print()
print("old %s\nnew %s" % (sys.argv[2], sys.argv[3]))
for n in ("old", "new"):
    print("  %s: cold %.1f MiB/s, daemon %.3f CPU s/GiB, %d minor faults"
          "/GiB (medians)" % (
        n, med([v[n][0] for v in by.values()]),
        med([v[n][1] for v in by.values()]),
        med([v[n][2] for v in by.values()])))
print("new / old within each round, median: rate %.2f, daemon CPU per "
      "GiB %.2f" % (med(rate), med(cpu) if cpu else float("nan")))
EOF
