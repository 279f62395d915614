#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-group.sh - the cache group (docs/cluster-cache.md) against
# separate caches, same run, same gateway (tests/lib/rgw.sh's Ceph RGW
# on loopback).  A
# dataset of 8 x 64 MiB random shards is read (8 dd at once, bs=1M, page
# cache dropped before each read) by:
#   - one mount without a group, cold: the bucket's rate;
#   - three mounts A, B, C of one group (peer ports on loopback), one
#     after the other, each cold: A gets its runs from their owners (who
#     fetch them from the bucket), B and C from the group's caches;
#   - A again (warm: its own cache file; the mounts run with
#     --peer-keep-local so that A keeps what its peers sent).
# For each: MiB/s.  The bytes the gateway served for the group's three
# reads are counted by the gateway itself (RGW's get_b counter through
# its admin socket), as a multiple of the dataset (separate caches:
# 3.0).  Shards are compared byte for byte on C.  Medians over rounds.
# A benchmark, not a test: exit 1 only when something fails.
#
#   tools/bench/bench-group.sh          BENCH_ROUNDS=3, BENCH_TMPDIR=/tmp,
#                                       BENCH_PEER_TRANSPORT=auto (or tcp,
#                                       'tcp;ofi_rxm', 'verbs;ofi_rxm')
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FMFS=$ROOT/tools/fmfs
ROUNDS=${BENCH_ROUNDS:-3}
TRANSPORT=${BENCH_PEER_TRANSPORT:-auto}
die() { echo "bench-group.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (mounts, drop_caches)"
[ -x "$FMFS" ] || die "$FMFS missing: run make first"
for c in aws ceph python3; do
	command -v $c >/dev/null || die "$c missing (tests/lib/rgw.sh needs it)"
done

W=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/bench-group.XXXXXX")
cleanup() {
	for m in solo a b c; do
		"$FMFS" umount "$W/$m" >/dev/null 2>&1 ||
			fusermount3 -u "$W/$m" >/dev/null 2>&1 || true
	done
	bash "$ROOT/tests/lib/rgw.sh" stop "$W/gw" >/dev/null 2>&1 || true
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/data" "$W/solo" "$W/a" "$W/b" "$W/c"

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
head -c 32 /dev/urandom | base64 >"$W/secret"

get_b() {
	ceph --admin-daemon "$RGW_DIR/run/client.rgw.fmfs.asok" perf dump |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["rgw"]["get_b"])'
}
port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
read_all() { # DIR: prints MiB/s of reading the 8 shards at once
	local t0 t1 i p pids=() bad=
	sync
	echo 3 >/proc/sys/vm/drop_caches
	t0=$EPOCHREALTIME
	for i in 1 2 3 4 5 6 7 8; do
		dd if="$1/shards/shard$i" of=/dev/null bs=1M 2>/dev/null &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || bad=1
	done
	t1=$EPOCHREALTIME
	[ -z "$bad" ] || die "a dd in $1 failed"
	python3 -c "print('%.1f' % (512 / ($t1 - $t0)))"
}

RES=$W/results
: >"$RES"
for ROUND in $(seq 1 "$ROUNDS"); do
	rm -rf "$W"/c-*
	"$FMFS" mount "s3://$RGW_BUCKET" "$W/solo" --cache-dir "$W/c-solo" \
		--endpoint "$RGW_ENDPOINT" >/dev/null || die "mount failed"
	solo=$(read_all "$W/solo")
	"$FMFS" umount "$W/solo" >/dev/null || die "umount failed"
	PA=$(port); PB=$(port); PC=$(port)
	peers=127.0.0.1:$PA,127.0.0.1:$PB,127.0.0.1:$PC
	for m in a:$PA b:$PB c:$PC; do
		"$FMFS" mount "s3://$RGW_BUCKET" "$W/${m%%:*}" \
			--cache-dir "$W/c-${m%%:*}" --endpoint "$RGW_ENDPOINT" \
			--peers "$peers" --peer-listen "127.0.0.1:${m#*:}" \
			--peer-secret-file "$W/secret" \
			--peer-transport "$TRANSPORT" --peer-keep-local \
			>/dev/null ||
			die "group mount ${m%%:*} failed"
	done
	g0=$(get_b)
	ra=$(read_all "$W/a")
	rb=$(read_all "$W/b")
	rc=$(read_all "$W/c")
	g1=$(get_b)
	warm=$(read_all "$W/a")
	for i in 1 2 3 4 5 6 7 8; do
		cmp -s "$W/data/shard$i" "$W/c/shards/shard$i" ||
			die "shard$i read on c differs from the upload"
	done
	for m in a b c; do
		"$FMFS" umount "$W/$m" >/dev/null || die "umount $m failed"
	done
	ratio=$(python3 -c "print('%.3f' % (($g1 - $g0) / (512 * 2**20)))")
	echo "$ROUND $solo $ra $rb $rc $warm $ratio" | tee -a "$RES"
done

python3 - "$RES" "$TRANSPORT" <<'EOF'
import statistics, sys
rows = [[float(x) for x in l.split()[1:]] for l in open(sys.argv[1])]
med = [statistics.median(c) for c in zip(*rows)]
solo, a, b, c, warm, ratio = med
print()
print("medians over %d rounds (MiB/s), peer transport %s:" % (len(rows), sys.argv[2]))
print("  one mount, no group, cold:            %7.1f" % solo)
print("  group: A cold (runs from owners):     %7.1f  (%.2f x no group)" % (a, a / solo))
print("  group: B cold (from the group):       %7.1f  (%.2f x no group)" % (b, b / solo))
print("  group: C cold (from the group):       %7.1f  (%.2f x no group)" % (c, c / solo))
print("  A warm (its own cache):               %7.1f  (B is %.2f x warm)" % (warm, b / warm))
print("  bucket bytes for A+B+C / dataset:     %7.3f  (separate caches: 3.0; goal 1.0)" % ratio)
EOF
