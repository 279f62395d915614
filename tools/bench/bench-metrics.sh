#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-metrics.sh - what the metrics cost (docs/metrics.md): the read
# path's cold and warm reads of 8 x 64 MiB objects, 8 readers at once, on
# one gateway in one run, by three daemons in turn each round:
#   base  BENCH_BASE_FMFS, an fmfs built without metrics (optional: the
#         cost of the counting itself, which is always on)
#   off   tools/fmfs without --metrics
#   on    tools/fmfs --metrics 127.0.0.1:PORT, scraped every second (as a
#         Prometheus with a 1 s interval would) during the reads
# Cold: a fresh cache dir, bytes from the gateway. Warm: the same mount,
# page cache dropped, bytes from the cache dir. Medians of BENCH_ROUNDS
# (5) rounds; prints on/off and base/off ratios (goal: within 2%).
#
#   tools/bench/bench-metrics.sh
#   BENCH_BASE_FMFS=/tmp/fmfs-before-metrics/fmfs tools/bench/bench-metrics.sh
PROG=bench-metrics
# shellcheck source=tools/bench/lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${BENCH_ROUNDS:-5}
SIZE=
SYSTEMS=
bench_args "$@"
[ -w /proc/sys/vm/drop_caches ] || die "needs root (drops the page cache)"
BASE=${BENCH_BASE_FMFS:-}
[ -z "$BASE" ] || [ -x "$BASE" ] || die "BENCH_BASE_FMFS=$BASE is not a program"
bench_init metrics
bench_gateway
N=8
OBJ_MIB=64
msg "uploading $N x $OBJ_MIB MiB"
head -c $((OBJ_MIB << 20)) /dev/urandom >"$TMP/obj.bin"
for i in $(seq $N); do
	awsx s3 cp --quiet "$TMP/obj.bin" "s3://$BUCKET/m/f$i" ||
		die "upload failed"
done
rm -f "$TMP/obj.bin"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

read_all() { # MNT: seconds to read every object, N readers
	local t0 t1
	t0=$(now)
	for i in $(seq $N); do cat "$1/m/f$i" >/dev/null & done
	wait
	t1=$(now)
	elapsed "$t0" "$t1"
}

one() { # VARIANT BINARY [OPTS...]
	local v=$1 bin=$2 scraper=
	shift 2
	rm -rf "$TMP/cache"
	FMFS=$bin FMFS_OPTS="--path-style $*" mount_fmfs "$TMP/mnt" "$TMP/cache" ||
		die "$v: $WHY"
	if [ "$v" = on ]; then
		( while :; do curl -s "http://127.0.0.1:$PORT/metrics" >/dev/null; sleep 1; done ) &
		scraper=$!
	fi
	drop_caches
	record "$v" cold_s "$(read_all "$TMP/mnt")"
	drop_caches
	record "$v" warm_s "$(read_all "$TMP/mnt")"
	[ -z "$scraper" ] || { kill "$scraper"; wait "$scraper" 2>/dev/null; }
	if [ "$v" = on ]; then
		curl -s "http://127.0.0.1:$PORT/metrics" >"$TMP/log/last-scrape.txt"
	fi
	FMFS=$bin umount_fmfs "$TMP/mnt" || die "$v: $WHY"
}

for ROUND in $(seq "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	# a different order each round, so that no variant is always first
	case $((ROUND % 3)) in
	0) order="off on base" ;;
	1) order="on base off" ;;
	*) order="base off on" ;;
	esac
	for v in $order; do
		case $v in
		base) [ -n "$BASE" ] && one base "$BASE" ;;
		off) one off "$ROOT/tools/fmfs" ;;
		on) one on "$ROOT/tools/fmfs" --metrics "127.0.0.1:$PORT" ;;
		esac
	done
done

summarize "$RESULTS" $((N * OBJ_MIB << 20)) "$TMP/results.json" <<'EOF'
def per_round(v, what):
    return rows.get((v, what), {})

def paired(v, what):
    # per-round ratios against "off" of the same round
    a, b = per_round(v, what), per_round("off", what)
    r = [a[k] / b[k] for k in a if k in b and b[k] > 0]
    return statistics.median(r) if r else None

for what in ("cold_s", "warm_s"):
    for v in ("off", "on", "base"):
        r = per_round(v, what)
        if r:
            print("  %s %-4s by round: %s" % (what, v, " ".join(
                "%.3f" % r[k] for k in sorted(r))))
    off = med("off", what)
    print("%s, median of %d rounds: off %.3f s (%.0f MB/s)" %
          (what, len(per_round("off", what)), off, nbytes / off / 1e6))
    for v in ("on", "base"):
        if per_round(v, what):
            m = med(v, what)
            print("  %-4s %.3f s (%.0f MB/s); time %s/off: median %.3f, "
                  "paired by round %.3f" % (v, m, nbytes / m / 1e6, v,
                                             m / off, paired(v, what)))
EOF
echo "$PROG: rounds in $RESULTS (kept until exit)" >&2
