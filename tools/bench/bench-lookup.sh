#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-lookup.sh - the metadata benchmark: what the
# negative-lookup rule (--negative-refresh) and --refresh 0 cost, on one
# private Ceph RADOS Gateway, in one run, round by round:
#
#   ls -l      `ls -l` of a directory of 10,000 objects on a fresh mount
#              (empty cache dir: one listing, no HEADs) and again on the
#              same mount, against `aws s3 ls` of the same prefix (goal:
#              fmfs cold within 2 x aws), and s3fs/rclone cold if installed
#   missing    os.stat of 10,000 names that do not exist, in a directory
#              whose listing is 2 s old (older than --negative-refresh's
#              default 1 s), against the local disk
#   import     `python3 -c 'import benchpkg'` of a package of 300 modules
#              (each with its __pycache__ .pyc, unchecked-hash so that no
#              source is recompiled; PYTHONDONTWRITEBYTECODE) installed on
#              the mount: on a fresh mount (cold) and again (warm), against
#              the local disk
#
# each on three fmfs mounts: the default options, `--negative-refresh
# 30` (the old rule: a name missing from a listing younger
# than --refresh, 30 s, is missing without asking the store) and
# `--refresh 0` (every lookup revalidated). Medians over rounds; the
# store is set up once, with the aws CLI (not timed).
#
#   tools/bench/bench-lookup.sh
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_FILES=10000     objects in the listed directory
#   BENCH_MISSING=10000   missing names stat'ed
#   BENCH_MODULES=300     modules in the package
#   BENCH_SYSTEMS="s3fs rclone"   mounts to compare for ls -l
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#
# Cost: ~3-5 minutes a round on a 2-core machine (most of it the 10,000
# missing names under --refresh 0), a few MB of disk.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-lookup.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SIZE=
FILES=${BENCH_FILES:-10000}
MISSING=${BENCH_MISSING:-10000}
MODULES=${BENCH_MODULES:-300}
bench_positive FILES MISSING MODULES
bench_args "$@"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"

bench_init lookup
bench_gateway
bench_systems

# The tree, once: TMP/local/many (FILES small files), TMP/local/pkg
# (benchpkg: MODULES modules, each compiled), TMP/local/miss (one file).
msg "building the tree and uploading it (aws s3 sync, not timed)"
python3 - "$TMP/local" "$FILES" "$MODULES" <<'EOF'
import os, sys
top, nfiles, nmod = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(top + "/many"); os.makedirs(top + "/pkg/benchpkg")
os.makedirs(top + "/miss")
for i in range(nfiles):
    with open("%s/many/f%05d" % (top, i), "w") as f:
        f.write("file %d\n" % i)
open(top + "/miss/present", "w").write("x\n")
p = top + "/pkg/benchpkg"
with open(p + "/__init__.py", "w") as f:
    for i in range(nmod):
        f.write("from . import m%03d\n" % i)
for i in range(nmod):
    with open("%s/m%03d.py" % (p, i), "w") as f:
        f.write("import os, re\nVALUE = %d\n\ndef f(x):\n    return x + VALUE\n" % i)
EOF
python3 -m compileall -q --invalidation-mode unchecked-hash "$TMP/local/pkg" ||
	die "compileall failed"
awsx s3 sync --only-show-errors "$TMP/local" "s3://$BUCKET/" ||
	die "aws s3 sync of the tree failed"

# Seconds one command takes (stdout discarded).
timed() { # CMD...
	local t0 t1
	t0=$(now)
	"$@" >/dev/null || return 1
	t1=$(now)
	elapsed "$t0" "$t1"
}

# record METHOD KEY, the seconds CMD takes
rec() { # METHOD KEY CMD...
	local v m=$1 k=$2
	shift 2
	v=$(timed "$@") || die "failed: $*"
	record "$m" "$k" "$v"
}

rec_missing() { # METHOD DIR
	local v
	v=$(missing_names "$2") || die "stat of missing names in $2 failed"
	record "$1" missing_s "$v"
}

missing_names() { # DIR: stat MISSING names not in DIR, its listing 2 s old
	python3 - "$1" "$MISSING" <<'EOF'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.listdir(d)
time.sleep(2)
t = time.monotonic()
for i in range(n):
    try:
        os.stat(os.path.join(d, "missing-%d" % i))
    except FileNotFoundError:
        pass
print("%.6f" % (time.monotonic() - t))
EOF
}

import_pkg() { # DIR
	PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$1 python3 -c 'import benchpkg'
}

# One fmfs configuration: a fresh mount for each measurement, each on an
# empty cache directory.
measure_fmfs() { # METHOD OPTS...
	local meth=$1 m=$TMP/mnt c
	shift
	FMFS_OPTS="$*"
	for what in ls missing import; do
		c=$TMP/cache-$meth-$what-$ROUND
		rm -rf "$c"
		mount_fmfs "$m" "$c" || die "$WHY"
		case $what in
		ls)
			rec "$meth" ls_cold_s ls -l "$m/many"
			# --refresh 0: a warm ls -l costs what a cold one does
			[ "$meth" = fmfs_refresh0 ] ||
				rec "$meth" ls_warm_s ls -l "$m/many" ;;
		missing)
			rec_missing "$meth" "$m/miss" ;;
		import)
			rec "$meth" import_cold_s import_pkg "$m/pkg"
			rec "$meth" import_warm_s import_pkg "$m/pkg" ;;
		esac
		umount_fmfs "$m" || die "$WHY"
		rm -rf "$c"
	done
	FMFS_OPTS=
}

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	rec aws ls_s awsx s3 ls "s3://$BUCKET/many/"
	sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	rec local ls_s ls -l "$TMP/local/many"
	rec_missing local "$TMP/local/miss"
	sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	rec local import_cold_s import_pkg "$TMP/local/pkg"
	rec local import_warm_s import_pkg "$TMP/local/pkg"
	measure_fmfs fmfs
	measure_fmfs fmfs_neg30 --negative-refresh 30
	measure_fmfs fmfs_refresh0 --refresh 0
	for s in ${RUN_SYSTEMS[@]+"${RUN_SYSTEMS[@]}"}; do
		rm -rf "$TMP/cache-$s"; mkdir -p "$TMP/cache-$s"
		mount_sys "$s" "$TMP/mnt" "$TMP/cache-$s" || die "$WHY"
		rec "$s" ls_cold_s ls -l "$TMP/mnt/many"
		unmount_sys "$TMP/mnt" || die "$WHY"
	done
done

summarize "$RESULTS" 0 "${BENCH_JSON:-}" "${RUN_SYSTEMS[*]:-}" \
	"$FILES" "$MISSING" "$MODULES" <<'EOF'
systems = sys.argv[4].split()
nfiles, nmissing, nmod = sys.argv[5], sys.argv[6], sys.argv[7]

def s(v):
    return "%8.3f s" % v if v is not None else "       -  "

print()
print("metadata benchmark: %d round(s), private RGW on loopback, "
      "medians over rounds" % nrounds)
print()
print("ls -l of %s objects: aws s3 ls %s; local disk %s" %
      (nfiles, s(med("aws", "ls_s")).strip(), s(med("local", "ls_s")).strip()))
print("stat of %s missing names (listing 2 s old); import of %s modules"
      % (nmissing, nmod))
print()
print("%-22s %10s %10s %10s %12s %12s" % ("", "ls cold", "ls warm",
      "missing", "import cold", "import warm"))
for m, label in (("local", "local disk"), ("fmfs", "fmfs default"),
                 ("fmfs_neg30", "fmfs --neg-refresh 30"),
                 ("fmfs_refresh0", "fmfs --refresh 0")) + tuple(
                     (x, x) for x in systems):
    lc = med(m, "ls_cold_s") if m != "local" else med(m, "ls_s")
    print("%-22s %10s %10s %10s %12s %12s" % (label, s(lc), s(med(m, "ls_warm_s")),
          s(med(m, "missing_s")), s(med(m, "import_cold_s")),
          s(med(m, "import_warm_s"))))
print()
r_ls = ratio(("fmfs", "ls_cold_s"), ("aws", "ls_s"))
goals = {"fmfs ls -l cold <= 2 x aws s3 ls": (r_ls, r_ls is not None and r_ls <= 2)}
show_goals(goals)
ratios = {"ls_cold_over_aws": r_ls}
for m in ("fmfs", "fmfs_neg30", "fmfs_refresh0"):
    for k in ("missing_s", "import_cold_s", "import_warm_s"):
        ratios["%s_%s_over_local" % (m, k)] = ratio((m, k), ("local", k))
write_json("lookup", ratios, goals)
EOF
