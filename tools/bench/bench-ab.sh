#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-ab.sh - two builds of fmfs, A and B, on one private Ceph RADOS
# Gateway in one run, interleaved round by round (A then B, B then A the
# next round), for a change that must not change speed (a refactoring):
#
#   cold     8 x 64 MiB objects read at once (8 dd, bs=1M) from a fresh
#            mount with an empty cache dir, page cache dropped
#   warm     the same after `fmfs umount` and a mount of the same cache
#            dir, page cache dropped
#   ls       `ls -l` of a prefix of FILES objects on a fresh mount with
#            an empty cache dir
#   stat     os.stat of each of those FILES names on a fresh mount with
#            an empty cache dir (one listing, then lookups)
#   write    a SIZE file from the page cache written with `dd bs=1M`
#            onto a fresh mount and closed (the time dd takes), then
#            `fmfs flush MNT --wait` (from the start of dd until it
#            returns: the object is in the bucket)
#
# Medians over ROUNDS, and B/A for each (below 1: B is faster).
#
# Usage: [BENCH_ROUNDS=N] [BENCH_SIZE=1G] [BENCH_FILES=10000]
#        tools/bench/bench-ab.sh FMFS_A FMFS_B
# (FMFS_A and FMFS_B are fmfs binaries, e.g. tools/fmfs of a worktree of
# the commit before, and tools/fmfs.)  Needs root (drop_caches), the aws
# CLI and Ceph's radosgw (tests/lib/rgw.sh).  Exit 0 with the table,
# 1 when a step failed, 2 on a usage error.
set -euo pipefail

PROG=bench-ab
COPY=dd
# shellcheck source=tools/bench/lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${BENCH_ROUNDS:-5}
FILES=${BENCH_FILES:-10000}
SYSTEMS=
USAGE="[BENCH_ROUNDS=N] [BENCH_SIZE=1G] [BENCH_FILES=N] $0 FMFS_A FMFS_B"

[ $# -eq 2 ] || { echo "usage: $USAGE" >&2; exit 2; }
for b in "$1" "$2"; do
	[ -x "$b" ] || { echo "$PROG: $b is not an fmfs binary (give two," \
		"e.g. the commit before's tools/fmfs and this one's)" >&2; exit 2; }
done
BIN_A=$(realpath "$1")
BIN_B=$(realpath "$2")
bench_positive ROUNDS FILES
bench_args
bench_need aws python3 dd
[ "$(id -u)" = 0 ] || die "needs root (drop_caches)"

bench_init ab
bench_gateway
bench_data

msg "uploading 8 x 64 MiB and $FILES small objects (not timed)"
mkdir -p "$TMP/up/big" "$TMP/up/small"
for i in 1 2 3 4 5 6 7 8; do
	head -c $((64 << 20)) /dev/urandom >"$TMP/up/big/s$i"
done
python3 - "$TMP/up/small" "$FILES" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(b"x" * (i % 512))
EOF
awsx s3 cp --quiet --recursive "$TMP/up/big" "s3://$BUCKET/big/"
awsx s3 cp --quiet --recursive "$TMP/up/small" "s3://$BUCKET/small/"
rm -rf "$TMP/up"

MNT=$TMP/mnt
fresh_cache() { rm -rf "$TMP/cache/c"; mkdir -p "$TMP/cache/c"; }

read_all() { # MNT: the 8 objects at once
	local pids=() i
	for i in 1 2 3 4 5 6 7 8; do
		dd if="$1/big/s$i" of=/dev/null bs=1M status=none & pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i"; done
}

one() { # NAME BINARY
	local name=$1 t0 t1
	FMFS=$2

	fresh_cache
	mount_fmfs "$MNT" "$TMP/cache/c" || die "$WHY"
	drop_caches
	t0=$(now); read_all "$MNT"; t1=$(now)
	record "$name" cold "$(elapsed "$t0" "$t1")"
	umount_fmfs "$MNT" || die "$WHY"
	mount_fmfs "$MNT" "$TMP/cache/c" || die "$WHY"
	drop_caches
	t0=$(now); read_all "$MNT"; t1=$(now)
	record "$name" warm "$(elapsed "$t0" "$t1")"
	umount_fmfs "$MNT" || die "$WHY"

	fresh_cache
	mount_fmfs "$MNT" "$TMP/cache/c" || die "$WHY"
	t0=$(now); ls -l "$MNT/small" >/dev/null; t1=$(now)
	record "$name" ls "$(elapsed "$t0" "$t1")"
	umount_fmfs "$MNT" || die "$WHY"

	fresh_cache
	mount_fmfs "$MNT" "$TMP/cache/c" || die "$WHY"
	t0=$(now)
	python3 -c 'import os, sys
d = sys.argv[1]
for i in range(int(sys.argv[2])):
    os.stat(os.path.join(d, "f%05d" % i))' "$MNT/small" "$FILES"
	t1=$(now)
	record "$name" stat "$(elapsed "$t0" "$t1")"
	umount_fmfs "$MNT" || die "$WHY"

	fresh_cache
	mount_fmfs "$MNT" "$TMP/cache/c" || die "$WHY"
	source_ready
	t0=$(now)
	dd if="$TMP/data.bin" of="$MNT/w-$name-$ROUND" bs=1M status=none
	t1=$(now)
	record "$name" write_close "$(elapsed "$t0" "$t1")"
	"$FMFS" flush "$MNT" --wait >>"$TMP/log/fmfs.log" 2>&1 ||
		die "fmfs flush --wait failed: $(fmfs_log)"
	t1=$(now)
	record "$name" write_durable "$(elapsed "$t0" "$t1")"
	umount_fmfs "$MNT" || die "$WHY"
	# The gateway's memstore keeps deleted bytes until its garbage
	# collection: without it five rounds of 1 GiB writes fill it and
	# uploads time out.
	reclaim "w-$name-$ROUND"
}

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	if [ $((ROUND % 2)) = 1 ]; then
		one A "$BIN_A"; one B "$BIN_B"
	else
		one B "$BIN_B"; one A "$BIN_A"
	fi
done

python3 - "$RESULTS" "$BIN_A" "$BIN_B" "$ROUNDS" "$FILES" "$BYTES" <<'EOF'
import statistics, sys
res, a, b, rounds, files, size = sys.argv[1:]
v = {}
for line in open(res):
    _, name, key, val = line.split()[:4]
    v.setdefault((name, key), []).append(float(val))
print("A/B benchmark: A = %s, B = %s; %s rounds, medians (s)" % (a, b, rounds))
print("%-14s %10s %10s %8s   %s" % ("step", "A", "B", "B/A", "runs: A | B"))
for key, what in (("cold", "8 x 64 MiB cold"), ("warm", "8 x 64 MiB warm"),
                  ("ls", "ls -l of %s" % files), ("stat", "stat of %s" % files),
                  ("write_close", "dd %d MiB close" % (int(size) >> 20)),
                  ("write_durable", "... in the bucket")):
    ma = statistics.median(v[("A", key)])
    mb = statistics.median(v[("B", key)])
    print("%-14s %10.3f %10.3f %8.3f   %s | %s   (%s)" % (key, ma, mb,
          mb / ma, " ".join("%.2f" % x for x in v[("A", key)]),
          " ".join("%.2f" % x for x in v[("B", key)]), what))
EOF
