#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-uring.sh - FUSE over io_uring against /dev/fuse
# (docs/fuse-uring.md), same run, same warm cache, rounds interleaved:
# the transport alone.  The data is in a file:// bucket (no gateway:
# nothing here reaches the store once the cache is warm), and every
# mount is the default mode with
# --no-passthrough, so that every read is a request to the daemon:
#
#   randread  fio, 8 KiB random reads, 4 jobs (job N reads shard N, 64 MiB
#             each), O_DIRECT (so the page cache does not answer), 10 s:
#             IOPS
#   stat      os.stat of 10,000 files by name on a fresh mount (each a
#             LOOKUP; the listing is in the cache index): seconds
#   seqread   8 x 64 MiB read at once (8 dd, bs=1M, iflag=direct): MiB/s
#
# and the daemon's CPU seconds per GiB read (utime + stime from
# /proc/PID/stat) for the two reads.  The transport is chosen with the
# fuse module's enable_uring (set, then put back) and checked with
# `fmfs status` (transport io_uring or dev-fuse).  Needs root, fio,
# python3, and a kernel with FUSE over io_uring (enable_uring exists).
# Ratios ring / /dev/fuse are taken within each round; medians over
# rounds.  A benchmark, not a test: exit 1 only when something fails.
#
#   tools/bench/bench-uring.sh
#
# Environment: BENCH_ROUNDS=5, BENCH_FMFS=PATH (default tools/fmfs),
# BENCH_TMPDIR=DIR (/tmp), BENCH_FIO_RUNTIME=10.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FMFS=${BENCH_FMFS:-$ROOT/tools/fmfs}
ROUNDS=${BENCH_ROUNDS:-5}
RUNTIME=${BENCH_FIO_RUNTIME:-10}
P=/sys/module/fuse/parameters/enable_uring
die() { echo "bench-uring.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (mounts, enable_uring, drop_caches)"
[ -e "$P" ] || die "this kernel ($(uname -r)) has no FUSE over io_uring"
command -v fio >/dev/null || die "fio missing (apt-get install fio)"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"

W=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/bench-uring.XXXXXX")
OLD=$(cat "$P")
MNT=$W/mnt
cleanup() {
	"$FMFS" umount "$MNT" >/dev/null 2>&1 || true
	echo "$OLD" >"$P"
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/bucket/shards" "$W/bucket/many" "$MNT" "$W/cache"

echo "== data: 8 x 64 MiB shards, 10,000 files of 1 byte (file:// bucket)"
for i in 0 1 2 3 4 5 6 7; do
	head -c 64M /dev/urandom >"$W/bucket/shards/s$i"
done
python3 - "$W/bucket/many" <<'EOF'
import os, sys
for i in range(10000):
    with open(os.path.join(sys.argv[1], "f%05d" % i), "wb") as f:
        f.write(b"x")
EOF

mnt() { # URING(Y|N)
	echo "$1" >"$P"
	"$FMFS" mount "file://$W/bucket" "$MNT" --cache-dir "$W/cache" \
		--cache-size 2G --no-passthrough ||
		die "mount failed (see $W/cache/fmfs.log)"
	local want=dev-fuse t
	[ "$1" = Y ] && want=io_uring
	t=$("$FMFS" status "$MNT" --json | python3 -c \
		'import json,sys; print(json.load(sys.stdin)["transport"])')
	[ "$t" = "$want" ] || die "transport $t, not $want"
}
umnt() { "$FMFS" umount "$MNT" || die "umount failed"; }
cpu_s() { # PID: utime + stime in seconds
	awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}
daemon() { pgrep -f "fmfs mount file://$W/bucket $MNT" | head -1; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

echo "== warming the cache (every shard read once, the listing of many/)"
mnt N
cat "$MNT"/shards/* >/dev/null
ls "$MNT/many" >/dev/null
umnt

res=$W/results
: >"$res"
for r in $(seq 1 "$ROUNDS"); do
	for u in Y N; do
		name=$([ $u = Y ] && echo ring || echo dev)
		# stat: a fresh mount, names known (no readdir)
		drop
		mnt $u
		s=$(python3 - "$MNT/many" <<'EOF'
import os, sys, time
d = sys.argv[1]
t0 = time.monotonic()
for i in range(10000):
    os.stat(os.path.join(d, "f%05d" % i))
print("%.4f" % (time.monotonic() - t0))
EOF
)
		# randread
		pid=$(daemon); c0=$(cpu_s "$pid")
		fio --name=rr --rw=randread --bs=8k --direct=1 \
			--ioengine=psync --numjobs=4 --size=64M --runtime="$RUNTIME" \
			--time_based --group_reporting --output-format=json \
			--filename_format="$MNT/shards/s\$jobnum" >"$W/fio.json" ||
			die "fio failed"
		c1=$(cpu_s "$pid")
		read -r iops rbytes < <(python3 -c '
import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(j["iops"], j["io_bytes"])' "$W/fio.json")
		rr_cpu=$(python3 -c "print(($c1-$c0)/($rbytes/2**30))")
		# seqread
		c0=$(cpu_s "$pid")
		t0=$(date +%s.%N)
		for i in 0 1 2 3 4 5 6 7; do
			dd if="$MNT/shards/s$i" of=/dev/null bs=1M iflag=direct \
				status=none &
		done
		wait
		t1=$(date +%s.%N)
		c1=$(cpu_s "$pid")
		seq=$(python3 -c "print(512/($t1-$t0))")
		seq_cpu=$(python3 -c "print(($c1-$c0)/0.5)")
		umnt
		echo "$r $name $iops $s $seq $rr_cpu $seq_cpu" | tee -a "$res"
	done
done

python3 - "$res" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, name, iops, s, seq, rrc, sqc in rows:
    by.setdefault(r, {})[name] = tuple(map(float, (iops, s, seq, rrc, sqc)))
cols = ["randread IOPS", "stat 10k s", "seqread MiB/s",
        "CPU s/GiB randread", "CPU s/GiB seqread"]
print("\n| | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for name in ("ring", "dev"):
    med = [st.median(v[name][k] for v in by.values()) for k in range(5)]
    print("| %s (median of %d) | " % (name, len(by)) +
          " | ".join("%.4g" % m for m in med) + " |")
rat = [st.median(v["ring"][k] / v["dev"][k] for v in by.values())
       for k in range(5)]
print("| ring / dev (median of per-round ratios) | " +
      " | ".join("%.3f" % m for m in rat) + " |")
EOF
