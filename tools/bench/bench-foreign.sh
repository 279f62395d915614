#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-foreign.sh - what the attributes of objects other tools wrote
# cost (docs/semantics.md "Objects other tools wrote"), on one private
# Ceph RADOS Gateway, in one run, round by round.  FILES small objects
# are put once with s3fs's metadata (mode, uid, gid, mtime 1000000000)
# by `aws s3 sync` (not timed); then, each on a fresh mount with an
# empty cache dir:
#
#   ls -l      `ls -l` of the directory, against `aws s3 ls` of the same
#              prefix (goal: within 2 x aws), and the time until every
#              HEAD behind that listing has landed (heads_s, from the
#              start of ls -l) and the objects whose stored mtime then
#              shows (of FILES)
#   stat       os.stat of every object by name (a lookup each, no
#              listing first but the one the first lookup makes)
#
# with the default --meta-heads (8) and with --meta-heads 0 (the rule
# before: the listing's values until a HEAD made for another reason; the
# goal is stat within 2 x of it).  Medians over rounds.
#
#   tools/bench/bench-foreign.sh
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_FILES=10000     objects in the listed directory
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#
# Cost: about a minute a round on a 2-core machine, a few MB of disk.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-foreign.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SIZE=
FILES=${BENCH_FILES:-10000}
bench_positive FILES
bench_args "$@"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"

bench_init foreign
bench_gateway

msg "making $FILES objects with s3fs's metadata (aws s3 sync, not timed)"
mkdir -p "$TMP/local/many"
for i in $(seq -w 1 "$FILES"); do echo "file $i"; done |
	split -l 1 -a 6 - "$TMP/local/many/f"
awsx s3 sync --only-show-errors \
	--metadata mode=33188,uid=0,gid=0,mtime=1000000000 \
	"$TMP/local" "s3://$BUCKET/" || die "aws s3 sync failed"

timed() { # CMD...: seconds CMD takes (stdout discarded)
	local t0 t1
	t0=$(now)
	"$@" >/dev/null || return 1
	t1=$(now)
	elapsed "$t0" "$t1"
}

status_of() { # MNT FIELD
	"$FMFS" status "$1" --json | python3 -c \
		"import json,sys; print(json.load(sys.stdin)['$2'])"
}

stat_all() { # DIR: os.stat of each object by name
	python3 - "$1" "$TMP/local/many" <<'EOF'
import os, sys
d, names = sys.argv[1], sorted(os.listdir(sys.argv[2]))
for n in names:
    os.stat(os.path.join(d, n))
EOF
}

stored_shown() { # DIR: objects whose mtime shows the stored 1000000000
	python3 - "$1" <<'EOF'
import os, sys
d = sys.argv[1]
print(sum(1 for n in os.listdir(d)
          if int(os.stat(os.path.join(d, n)).st_mtime) == 1000000000))
EOF
}

measure() { # METHOD OPTS...
	local meth=$1 m=$TMP/mnt c t0 v
	shift
	FMFS_OPTS="$*"
	c=$TMP/cache-$meth-ls-$ROUND
	mount_fmfs "$m" "$c" || die "$WHY"
	t0=$(now)
	v=$(timed ls -l "$m/many") || die "ls -l failed"
	record "$meth" ls_cold_s "$v"
	while [ "$(status_of "$m" heads_waiting)" != 0 ]; do sleep 0.05; done
	record "$meth" heads_s "$(elapsed "$t0" "$(now)")"
	sleep 1.1 # the kernel's provisional attributes expire
	record "$meth" stored_shown "$(stored_shown "$m/many")"
	umount_fmfs "$m" || die "$WHY"
	rm -rf "$c"
	c=$TMP/cache-$meth-stat-$ROUND
	mount_fmfs "$m" "$c" || die "$WHY"
	v=$(timed stat_all "$m/many") || die "stat failed"
	record "$meth" stat_cold_s "$v"
	umount_fmfs "$m" || die "$WHY"
	rm -rf "$c"
	FMFS_OPTS=
}

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	v=$(timed awsx s3 ls "s3://$BUCKET/many/") || die "aws s3 ls failed"
	record aws ls_s "$v"
	measure fmfs
	measure fmfs_heads0 --meta-heads 0
done

summarize "$RESULTS" 0 "${BENCH_JSON:-}" "$FILES" <<'EOF'
nfiles = sys.argv[4]

def s(v):
    return "%8.3f s" % v if v is not None else "       -  "

print()
print("objects other tools wrote: %d round(s), private RGW on loopback, "
      "medians over rounds" % nrounds)
print()
print("%s objects with s3fs's metadata; aws s3 ls of the prefix %s" %
      (nfiles, s(med("aws", "ls_s")).strip()))
print()
print("%-22s %10s %10s %10s %12s" % ("", "ls -l cold", "HEADs done",
      "stat cold", "stored shown"))
for m, label in (("fmfs", "fmfs (--meta-heads 8)"),
                 ("fmfs_heads0", "fmfs --meta-heads 0")):
    print("%-22s %10s %10s %10s %12s" % (
        label, s(med(m, "ls_cold_s")), s(med(m, "heads_s")),
        s(med(m, "stat_cold_s")), "%d" % (med(m, "stored_shown") or 0)))
print()
a, l = med("aws", "ls_s"), med("fmfs", "ls_cold_s")
if a and l:
    print("ls -l cold / aws s3 ls: %.2f (goal <= 2)" % (l / a))
x, y = med("fmfs", "stat_cold_s"), med("fmfs_heads0", "stat_cold_s")
if x and y:
    print("stat cold / with --meta-heads 0: %.2f (goal <= 2)" % (x / y))
EOF
