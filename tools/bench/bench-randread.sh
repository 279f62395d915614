#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-randread.sh - warm random reads against the local disk (goal:
# >= 0.8 x on the default mount; docs/performance.md "Passthrough reads
# on read-write mounts, FUSE over io_uring"), same run, rounds interleaved:
# fio, 8 KiB random reads, 4 jobs (job N reads shard N, 64 MiB each),
# psync, buffered, page cache dropped first, as bench-mount.sh's randread,
# on
#   local    the same shards in a directory of the same disk
#   default  fmfs's default mount (mode sw, read-write) on a warm cache
#   ro       --mode ro on the same cache
#   nopt     the default mount with --no-passthrough (every read through
#            the daemon)
# The shards are in a file:// bucket: once the cache is warm no read
# reaches the store, so a gateway would change nothing measured here
# (bench-mount.sh has the cold figures).  IOPS, and the ratio to the
# local disk within each round; medians over rounds.  Needs root (mounts,
# drop_caches) and fio.  A benchmark, not a test.
#
#   tools/bench/bench-randread.sh
#
# Environment: BENCH_ROUNDS=3, BENCH_FMFS=PATH (default tools/fmfs),
# BENCH_TMPDIR=DIR (/tmp), BENCH_FIO_RUNTIME=10.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FMFS=${BENCH_FMFS:-$ROOT/tools/fmfs}
ROUNDS=${BENCH_ROUNDS:-3}
RUNTIME=${BENCH_FIO_RUNTIME:-10}
die() { echo "bench-randread.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (mounts, drop_caches)"
command -v fio >/dev/null || die "fio missing (apt-get install fio)"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"

W=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/bench-randread.XXXXXX")
MNT=$W/mnt
cleanup() {
	"$FMFS" umount "$MNT" >/dev/null 2>&1 || true
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/bucket/shards" "$W/local" "$MNT" "$W/cache"
for i in 0 1 2 3; do
	head -c 64M /dev/urandom >"$W/bucket/shards/s$i"
	cp "$W/bucket/shards/s$i" "$W/local/s$i"
done

mnt() { # OPTION...
	"$FMFS" mount "file://$W/bucket" "$MNT" --cache-dir "$W/cache" \
		--cache-size 2G "$@" || die "mount failed (see $W/cache/fmfs.log)"
}
umnt() { "$FMFS" umount "$MNT" || die "umount failed"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
rr() { # DIR: IOPS
	fio --name=rr --rw=randread --bs=8k --ioengine=psync --numjobs=4 \
		--size=64M --runtime="$RUNTIME" --time_based --group_reporting \
		--output-format=json --filename_format="$1/s\$jobnum" |
		python3 -c 'import json,sys
print(json.load(sys.stdin)["jobs"][0]["read"]["iops"])'
}

mnt
cat "$MNT"/shards/* >/dev/null   # the cache is warm from here on
umnt

res=$W/results
: >"$res"
for r in $(seq 1 "$ROUNDS"); do
	drop
	echo "$r local $(rr "$W/local")" | tee -a "$res"
	for sys in default ro nopt; do
		case $sys in
		default) mnt ;;
		ro) mnt --mode ro ;;
		nopt) mnt --no-passthrough ;;
		esac
		drop
		echo "$r $sys $(rr "$MNT/shards")" | tee -a "$res"
		umnt
	done
done
python3 - "$res" <<'EOF'
import statistics as st, sys
by = {}
for l in open(sys.argv[1]):
    r, name, iops = l.split()
    by.setdefault(r, {})[name] = float(iops)
print("\n| | IOPS (median) | / local disk (median of per-round ratios) |")
print("|---|---|---|")
for name in ("local", "default", "ro", "nopt"):
    print("| %s | %.0f | %.3f |" % (name, st.median(v[name] for v in by.values()),
          st.median(v[name] / v["local"] for v in by.values())))
EOF
