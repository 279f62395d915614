#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-namespace.sh - the namespace benchmark: what a cold
# and a warm mount cost to walk a bucket of many small objects, in time,
# LIST requests and daemon memory, round by round:
#
#   find       `find MNT -type f | wc -l` of the whole bucket
#   ls -l      `ls -l` of one prefix of WIDE objects
#   stat       `find MNT -type f -exec stat` of every object (RSS after)
#
# with the daemon's RSS at the mount, after find and after stat, and the
# RSS the walk added per inode the daemon then held (inodes, the listings
# it keeps, the takeover journal: what the walk costs, not the binary),
#
# each on a fresh mount with an empty cache dir (cold), then again after
# `fmfs umount` and a mount of the same cache dir (warm: the listings
# come from the cache index; the goal is no LIST and at least 5x faster
# than cold), against `aws s3 ls --recursive` of the same bucket.  Two
# stores, each in its own part:
#
#   gateway    a private Ceph RADOS Gateway on loopback, OBJECTS objects
#              in PREFIXES prefixes plus WIDE in one (uploaded with
#              `aws s3 sync`, not timed; RGW's memstore and this 2-core
#              machine make a million uploads take hours)
#   file       a file:// store (a local directory) of BIG_OBJECTS in
#              BIG_PREFIXES prefixes plus WIDE: the million-object scale,
#              with no aws figure (BENCH_BIG_OBJECTS=0 skips it)
#
#   tools/bench/bench-namespace.sh
#
# Environment:
#   BENCH_ROUNDS=3              rounds
#   BENCH_OBJECTS=20000         gateway: objects in the prefixes
#   BENCH_PREFIXES=20           gateway: prefixes
#   BENCH_BIG_OBJECTS=1000000   file://: objects (0: skip that part)
#   BENCH_BIG_PREFIXES=1000     file://: prefixes
#   BENCH_WIDE=10000            objects of the one wide prefix (both)
#   BENCH_FMFS_OPTS="..."       extra `fmfs mount` options (for example
#                               "--meta-heads 0": no HEADs behind listings)
#   BENCH_JSON=PATH             also write every figure as JSON
#   BENCH_TMPDIR=DIR            where the temporary directory goes (/tmp)
#
# Cost: with the defaults, ~3 minutes to upload the gateway's bucket,
# ~2 minutes to write the file:// tree (4 GiB of disk: a block per
# object), then ~2-4 minutes a round.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-namespace.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SIZE=
OBJECTS=${BENCH_OBJECTS:-20000}
PREFIXES=${BENCH_PREFIXES:-20}
BIG_OBJECTS=${BENCH_BIG_OBJECTS:-1000000}
BIG_PREFIXES=${BENCH_BIG_PREFIXES:-1000}
WIDE=${BENCH_WIDE:-10000}
bench_positive OBJECTS PREFIXES BIG_PREFIXES WIDE
bench_args "$@"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"

bench_init namespace no-vm
bench_gateway

# tree DIR N P: N objects in P prefixes (pNNNN/oNNNNNNN) and WIDE in
# wide/, 16 bytes each.
tree() {
	python3 - "$1" "$2" "$3" "$WIDE" <<'EOF'
import os, sys
top, n, p, wide = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for d in range(p):
    os.makedirs("%s/p%04d" % (top, d))
for i in range(n):
    with open("%s/p%04d/o%07d" % (top, i % p, i), "w") as f:
        f.write("object %8d\n" % i)
os.makedirs(top + "/wide")
for i in range(wide):
    with open("%s/wide/w%07d" % (top, i), "w") as f:
        f.write("wide   %8d\n" % i)
EOF
}

msg "building the gateway's bucket ($OBJECTS + $WIDE objects; aws s3 sync, not timed)"
tree "$TMP/local" "$OBJECTS" "$PREFIXES" || die "cannot write the tree"
awsx s3 sync --only-show-errors "$TMP/local" "s3://$BUCKET/" ||
	die "aws s3 sync of the tree failed"
rm -rf "$TMP/local"
if [ "$BIG_OBJECTS" -gt 0 ]; then
	msg "writing the file:// store ($BIG_OBJECTS + $WIDE objects, not timed)"
	tree "$TMP/store" "$BIG_OBJECTS" "$BIG_PREFIXES" ||
		die "cannot write the file:// store"
fi

timed() { # CMD...: seconds CMD takes (its stdout discarded)
	local t0 t1
	t0=$(now)
	"$@" >/dev/null || return 1
	t1=$(now)
	elapsed "$t0" "$t1"
}

rec() { # METHOD KEY CMD...
	local v m=$1 k=$2
	shift 2
	v=$(timed "$@") || die "failed: $*"
	record "$m" "$k" "$v"
}

count_files() { find "$1" -type f | wc -l >"$TMP/count"; }
stat_all() { find "$1" -type f -exec stat -c %s {} + | wc -l; }

rss_kb() { # MNT: the daemon's resident memory
	local pid
	# the daemon's own pid: under a keeper (the default) two processes
	# have the command line, and the first is the keeper
	pid=$("$FMFS" status "$1" --json | python3 -c \
		'import json, sys; print(json.load(sys.stdin)["daemon_pid"])') ||
		return 1
	awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"
}

status_of() { # MNT FIELD
	"$FMFS" status "$1" --json | python3 -c \
		"import json,sys; print(json.load(sys.stdin)['$2'])"
}

# One mount, cold or warm: ls -l of wide/, find, then stat of all.
walk() { # METHOD MNT WANT
	record "$1" rss_base_kb "$(rss_kb "$2")"
	rec "$1" ls_s ls -l "$2/wide"
	rec "$1" find_s count_files "$2"
	[ "$(cat "$TMP/count")" = "$3" ] ||
		die "find saw $(cat "$TMP/count") objects, expected $3"
	sleep 2 # the prober trims once a second
	record "$1" rss_find_kb "$(rss_kb "$2")"
	record "$1" inodes_find "$(status_of "$2" inodes)"
	rec "$1" stat_s stat_all "$2"
	sleep 2
	record "$1" rss_stat_kb "$(rss_kb "$2")"
	record "$1" lists "$(status_of "$2" listings)"
	record "$1" inodes "$(status_of "$2" inodes)"
}

# A part: URL, objects to expect, what to call it.
part() { # NAME URL WANT
	local m=$TMP/mnt c=$TMP/cache-$1-$ROUND
	rm -rf "$c"
	# shellcheck disable=SC2086
	"$FMFS" mount "$2" "$m" --cache-dir "$c" --endpoint "$RGW_ENDPOINT" \
		--refresh 3600 ${BENCH_FMFS_OPTS:-} >>"$TMP/log/fmfs.log" 2>&1 ||
		die "fmfs mount of $2 failed: $(fmfs_log)"
	walk "$1_cold" "$m" "$3"
	umount_fmfs "$m" || die "$WHY"
	"$FMFS" mount "$2" "$m" --cache-dir "$c" --endpoint "$RGW_ENDPOINT" \
		--refresh 3600 ${BENCH_FMFS_OPTS:-} >>"$TMP/log/fmfs.log" 2>&1 ||
		die "fmfs remount of $2 failed: $(fmfs_log)"
	walk "$1_warm" "$m" "$3"
	record "$1" index_bytes "$(status_of "$m" index_bytes)"
	umount_fmfs "$m" || die "$WHY"
	rm -rf "$c"
}

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	rec aws ls_recursive_s awsx s3 ls --recursive "s3://$BUCKET/"
	part gw "s3://$BUCKET" $((OBJECTS + WIDE))
	[ "$BIG_OBJECTS" -gt 0 ] &&
		part file "file://$TMP/store" $((BIG_OBJECTS + WIDE))
done

summarize "$RESULTS" 0 "${BENCH_JSON:-}" "$OBJECTS" "$PREFIXES" \
	"$BIG_OBJECTS" "$BIG_PREFIXES" "$WIDE" <<'EOF'
objs, prefs, big, bigp, wide = sys.argv[4:9]

def s(v):
    return "%9.3f s" % v if v is not None else "        - "

def n(v, unit=""):
    return "%9.0f%s" % (v, unit) if v is not None else "        - "

print()
print("namespace benchmark: %d round(s), medians over rounds"
      % nrounds)
print("gateway: %s objects in %s prefixes + %s in wide/ (private RGW on "
      "loopback); aws s3 ls --recursive %s" %
      (objs, prefs, wide, s(med("aws", "ls_recursive_s")).strip()))
if int(big):
    print("file://: %s objects in %s prefixes + %s in wide/ (a local "
          "directory)" % (big, bigp, wide))
print()
print("%-12s %10s %10s %10s %10s %10s %7s %8s" % ("", "ls -l wide",
      "find", "stat all", "RSS find", "RSS stat", "LISTs", "inodes"))
for part in ("gw", "file"):
    for kind in ("cold", "warm"):
        m = "%s_%s" % (part, kind)
        if med(m, "find_s") is None:
            continue
        print("%-12s %10s %10s %10s %8s MB %7s MB %7s %8s" % (
            m, s(med(m, "ls_s")), s(med(m, "find_s")), s(med(m, "stat_s")),
            n((med(m, "rss_find_kb") or 0) / 1024), 
            n((med(m, "rss_stat_kb") or 0) / 1024),
            n(med(m, "lists")), n(med(m, "inodes"))))
    for kind in ("cold", "warm"):
        m = "%s_%s" % (part, kind)
        b, f, i = (med(m, "rss_base_kb"), med(m, "rss_find_kb"),
                   med(m, "inodes_find"))
        if b is not None and f is not None and i:
            # what the walk added to the daemon's RSS (inodes, listings
            # kept, the takeover journal), per inode it then held
            print("  %s: RSS after find %.0f B per inode held (%s "
                  "inodes; %.1f MB over the %.1f MB at mount)" %
                  (m, (f - b) * 1024 / i, n(i), (f - b) / 1024, b / 1024))
    c, w = med(part + "_cold", "find_s"), med(part + "_warm", "find_s")
    if c and w:
        print("  %s: warm find %.1fx faster than cold; index %.1f MB" %
              (part, c / w, (med(part, "index_bytes") or 0) / 1e6))
print()
goals = {}
for part in ("gw", "file"):
    c, w = med(part + "_cold", "find_s"), med(part + "_warm", "find_s")
    if c and w:
        goals["%s warm find >= 5x faster than cold" % part] = (c / w, c / w >= 5)
        lw = med(part + "_warm", "lists")
        goals["%s warm remount: no LIST" % part] = (lw, lw == 0)
a, gw = med("aws", "ls_recursive_s"), med("gw_cold", "find_s")
if a and gw:
    goals["gw cold find / aws s3 ls --recursive (<= 2)"] = (gw / a, gw / a <= 2)
r = med("file_cold", "rss_stat_kb")
if r and int(big) >= 1000000:
    goals["daemon RSS after find + stat of 1M, MB (< 100)"] = (r / 1024, r / 1024 < 100)
show_goals(goals, 52)
write_json("namespace", {}, goals)
EOF
