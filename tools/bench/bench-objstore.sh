#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-objstore.sh - the objstore throughput benchmark: in one
# run against a private Ceph RADOS Gateway, 8 parallel 64 MiB GETs through
# objstore (tools/bench/objbench) against the same GETs with curl, and 4
# parallel 64 MiB multipart PUTs through objstore against the aws CLI.
# The goal is objstore at least as fast as each (ratio >= 1.0). This is a
# benchmark, not a test: it prints figures and whether the goal is met,
# and fails only when something does not work. The gateway, the aws
# CLI's config, presigned URLs, the curl batch and clean-up are in
# lib.sh, which it sources (lib.sh sources vm.sh, whose memory hold
# this benchmark does not use), shared with the other bench-*.sh.
#
#   tools/bench/bench-objstore.sh          (or: make bench)
#
# Environment:
#   BENCH_ROUNDS=5        rounds; each runs all four methods once
#   BENCH_JSON=PATH       also write the results (every round) as JSON
#   BENCH_DROP_CACHES=1   drop the page cache before each PUT batch
#                         instead of reading the source files into it
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#   BENCH_OBJBENCH=PATH   the objbench to run, as it is (default: the
#                         tree's tools/bench/objbench, built if missing;
#                         if that is a sanitizer build, an optimized copy
#                         of the same sources is built in the temp dir)
#
# What is measured. Every figure is the wall-clock time of a whole batch,
# taken in this script around the commands (EPOCHREALTIME), so process
# start-up counts for every method alike; objbench's own figure (clock
# around the transfers only) is kept in the JSON as
# objstore_inner_seconds and shown as "without process start".
#   get-objstore  objbench get of the 8 objects, one thread each, one
#                 shared obj_store; obj_get_fd of the whole object to
#                 /dev/null (HEAD, then 8 MiB ranged GETs in parallel)
#   get-curl      8 curl processes at once, each GETting one object to
#                 /dev/null through a presigned URL made before the clock
#   put-objstore  objbench put of 4 files to new keys, one thread each:
#                 obj_put_fd (multipart, 8 MiB parts, parallel)
#   put-aws       4 `aws s3 cp FILE s3://...` processes at once, with the
#                 CLI's defaults written out in a private config file
#                 (multipart above 8 MiB, 8 MiB chunks, 10 requests each)
# The order of objstore and its rival alternates from round to round.
# Page cache: the 4 source files are read once (cat > /dev/null) before
# each PUT batch so both sides read them from memory and the figures are
# about the clients, not this machine's disk, whose rate swings 3x
# between runs; BENCH_DROP_CACHES=1 drops the cache instead (both sides
# then read from disk). The gateway's data is in RAM (memstore) either way.
#
# Cost: ~0.8 GiB on the local disk at most (8 x 64 MiB source files and
# the gateway's small files), ~1.5-3 GB of RAM in the gateway; with the
# default 5 rounds 45-80 s on a 2-core machine (the more others load it,
# the longer; BENCH_ROUNDS=20 took 3 min there). All of it, gateway
# included, goes away at the end, on failure and on Ctrl-C.
#
# Exit status: 0 when the benchmark ran (goal met or not), 1 when a
# transfer or the set-up failed, 2 on a usage error.

set -euo pipefail

PROG=bench-objstore.sh
# The gateway's default memstore cap, 4 GiB (lib.sh's 10 GiB is for the
# others' 1 GiB objects): garbage collection runs every round here.
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-4294967296}
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OBJBENCH=$HERE/objbench
ROUNDS=${BENCH_ROUNDS:-5}
SIZE=                 # no BENCH_SIZE here
USAGE="[BENCH_ROUNDS=N] [BENCH_JSON=PATH]"
NGET=8            # objects read in parallel
NPUT=4            # files written in parallel
SIZE_MIB=64       # size of each object

bench_args "$@"
bench_need curl
if [ "${BENCH_DROP_CACHES:-0}" = 1 ] && ! [ -w /proc/sys/vm/drop_caches ]; then
	die "BENCH_DROP_CACHES=1 needs root (/proc/sys/vm/drop_caches)"
fi

if [ -n "${BENCH_OBJBENCH:-}" ]; then
	OBJBENCH=$BENCH_OBJBENCH
	[ -x "$OBJBENCH" ] || die "BENCH_OBJBENCH=$OBJBENCH is not executable"
elif ! [ -x "$OBJBENCH" ]; then
	msg "building tools/bench/objbench"
	make -s -C "$ROOT" tools/bench/objbench >&2 ||
		die "make failed; run ./configure && make in $ROOT"
fi

# ---------------------------------------------------------------------
# Temporary directory (lib.sh cleans up after it and the gateway). No
# memory hold in a VM: this benchmark never did one.

bench_init objstore no-vm
DATA=$TMP/data
mkdir -p "$DATA"

# A sanitizer build (./configure with sanitizers on) is not what fmfs
# ships and spends extra CPU per byte, which on a 2-core machine the
# gateway needs too; measure an optimized copy of the same sources
# instead, built here, outside the tree.
OBJBENCH_NOTE="$OBJBENCH"
if [ -z "${BENCH_OBJBENCH:-}" ] && sanitized "$OBJBENCH"; then
	msg "tools/bench/objbench is a sanitizer build; building an" \
		"optimized copy of the same sources for the benchmark"
	build_optimized objbench tools/bench/objbench
	OBJBENCH=$TMP/objbench
	OBJBENCH_NOTE="optimized copy (-O2, no sanitizers) of the tree's sources"
fi

T_START=$EPOCHREALTIME
# The gateway and the aws CLI's defaults written out (lib.sh), so that a
# ~/.aws/config on the machine cannot change what we compare against.
bench_gateway
URL=s3://$BUCKET/bench

msg "writing $NGET random files of $SIZE_MIB MiB"
for i in $(seq 1 "$NGET"); do
	head -c "${SIZE_MIB}M" /dev/urandom >"$DATA/f$i"
done
msg "uploading them with the aws CLI"
awsx s3 cp --recursive --only-show-errors "$DATA" "s3://$BUCKET/bench/src/" ||
	die "aws s3 cp of the source objects failed"

GET_KEYS=()
for i in $(seq 1 "$NGET"); do
	GET_KEYS+=("src/f$i")
done
presign "${GET_KEYS[@]/#/bench/}"
PUT_FILES=()
for i in $(seq 1 "$NPUT"); do
	PUT_FILES+=("$DATA/f$i")
done
GET_BYTES=$(( NGET * SIZE_MIB * 1048576 ))
PUT_BYTES=$(( NPUT * SIZE_MIB * 1048576 ))

# ---------------------------------------------------------------------
# The four methods. Each appends "ROUND METHOD BYTES SECONDS INNER" to
# results.tsv (INNER: objbench's own seconds, else -).

ROUND=0

inner_secs() { python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])'; }

# objbench OP (get or put) of ARG... (keys or files) in the bucket's
# bench/: records METHOD with BYTES (checked against objbench's own
# count), the batch's seconds and objbench's.
objbench_batch() { # OP METHOD BYTES ARG...
	local op=$1 meth=$2 bytes=$3 t0 t1 out
	shift 3
	t0=$EPOCHREALTIME
	out=$("$OBJBENCH" "$op" "$URL" "$@" --endpoint "$RGW_ENDPOINT") ||
		die "objbench $op failed"
	t1=$EPOCHREALTIME
	echo "$out" >>"$TMP/log/objbench.jsonl"
	case $out in
	*"\"bytes\":$bytes,"*) ;;
	*) die "objbench $op moved the wrong number of bytes: $out" ;;
	esac
	record "$meth" "$bytes" "$(elapsed "$t0" "$t1")" \
		"$(echo "$out" | inner_secs)"
}

get_objstore() {
	objbench_batch get get-objstore "$GET_BYTES" "${GET_KEYS[@]}"
}

get_curl() {
	curl_batch "$NGET" || die "$WHY"
	[ "$GOT" = "$GET_BYTES" ] ||
		die "curl read $GOT bytes, expected $GET_BYTES"
	record get-curl "$GET_BYTES" "$SECS" -
}

prepare_put() {
	if [ "${BENCH_DROP_CACHES:-0}" = 1 ]; then
		drop_caches
	else
		cat "${PUT_FILES[@]}" >/dev/null
	fi
}

put_objstore() {
	prepare_put
	objbench_batch put put-objstore "$PUT_BYTES" "${PUT_FILES[@]}" \
		--key-prefix put-objstore/
}

put_aws() {
	local t0 t1 f pids=() i
	prepare_put
	t0=$EPOCHREALTIME
	for f in "${PUT_FILES[@]}"; do
		awsx s3 cp --only-show-errors "$f" \
			"s3://$BUCKET/bench/put-aws/${f##*/}" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || die "aws s3 cp of ${PUT_FILES[$i]} failed"
	done
	t1=$EPOCHREALTIME
	record put-aws "$PUT_BYTES" "$(elapsed "$t0" "$t1")" -
}

# Space of overwritten objects goes back to the gateway's RAM only after
# its garbage collection: collect_garbage (lib.sh) runs between rounds
# (not timed) so that many rounds do not fill the 4 GiB memstore.

# ---------------------------------------------------------------------

T_BENCH=$EPOCHREALTIME
for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	if [ $(( ROUND % 2 )) = 1 ]; then
		get_objstore; get_curl; put_objstore; put_aws
	else
		get_curl; get_objstore; put_aws; put_objstore
	fi
	collect_garbage
done
T_END_ROUNDS=$EPOCHREALTIME

# What objstore wrote must read back the same (one object, whole).
awsx s3 presign --expires-in 600 "s3://$BUCKET/bench/put-objstore/f1" \
	>"$TMP/url-check" || die "aws s3 presign failed"
curl -sSf "$(cat "$TMP/url-check")" | cmp -s - "$DATA/f1" ||
	die "put-objstore/f1 does not read back as $DATA/f1"

# The aws CLI's fixed cost, for reading the PUT figures: 4 processes at
# once that each make one small request.
t0=$EPOCHREALTIME
for i in $(seq 1 "$NPUT"); do
	awsx s3 ls "s3://$BUCKET/bench/no-such-prefix/" >/dev/null &
done
wait
AWS_FIXED=$(elapsed "$t0" "$EPOCHREALTIME")

# ---------------------------------------------------------------------
# Summary.

ELAPSED=$(elapsed "$T_START" "$EPOCHREALTIME")
python3 - "$RESULTS" "${BENCH_JSON:-}" "$ROUNDS" "$AWS_FIXED" "$ELAPSED" \
	"$(elapsed "$T_BENCH" "$T_END_ROUNDS")" \
	"${BENCH_DROP_CACHES:-0}" "$OBJBENCH_NOTE" <<'EOF'
import json, statistics, sys

path, json_out, rounds, aws_fixed, elapsed, rounds_s, drop, objbench = \
    sys.argv[1:9]
MIB = 1048576.0
rows = []
for line in open(path):
    rnd, method, nbytes, secs, inner = line.split()
    rows.append({"round": int(rnd), "method": method, "bytes": int(nbytes),
                 "seconds": float(secs),
                 "mib_per_s": int(nbytes) / MIB / float(secs),
                 "objstore_inner_seconds": None if inner == "-" else float(inner)})

methods = ["get-objstore", "get-curl", "put-objstore", "put-aws"]
summary = {}
for m in methods:
    r = [x["mib_per_s"] for x in rows if x["method"] == m]
    s = {"median": statistics.median(r), "min": min(r), "max": max(r),
         "rounds": len(r)}
    inner = [x["bytes"] / MIB / x["objstore_inner_seconds"] for x in rows
             if x["method"] == m and x["objstore_inner_seconds"]]
    if inner:
        s["inner_median"] = statistics.median(inner)
    summary[m] = s

def ratio(a, b):
    return summary[a]["median"] / summary[b]["median"]

goals = {"get": ratio("get-objstore", "get-curl"),
         "put": ratio("put-objstore", "put-aws")}

# The same ratio taken within each round (the two ran back to back), so a
# round in which something else loaded the machine weighs on both sides.
def paired(a, b):
    by = {}
    for x in rows:
        by.setdefault(x["round"], {})[x["method"]] = x["mib_per_s"]
    r = [v[a] / v[b] for v in by.values() if a in v and b in v]
    return {"median": statistics.median(r), "min": min(r), "max": max(r)}

pairs = {"get": paired("get-objstore", "get-curl"),
         "put": paired("put-objstore", "put-aws")}

print()
print("objstore benchmark: %s round(s), 8 x 64 MiB GET, "
      "4 x 64 MiB PUT, private RGW on loopback" % rounds)
print("MiB/s, wall clock of each batch; median over rounds [min - max];")
print("ratio = median / median; goal: ratio >= 1.0")
print()
print("%-14s %9s %21s   %s" % ("method", "median", "[min - max]", "note"))
notes = {
    "get-objstore": "objbench get, obj_get_fd -> /dev/null",
    "get-curl": "8 curl processes, presigned URLs -> /dev/null",
    "put-objstore": "objbench put, obj_put_fd (multipart)",
    "put-aws": "4 aws s3 cp processes (8 MiB parts, 10 each)",
}
for m in methods:
    s = summary[m]
    note = notes[m]
    if "inner_median" in s:
        note += "; %.0f without process start" % s["inner_median"]
    print("%-14s %9.1f   [%7.1f - %7.1f]   %s" %
          (m, s["median"], s["min"], s["max"], note))
print()
for op, rival in (("get", "curl"), ("put", "aws")):
    r = goals[op]
    p = pairs[op]
    print("%s ratio objstore/%-4s = %.2f  goal >= 1.0: %-7s  (per round: "
          "median %.2f, %.2f - %.2f)" %
          (op.upper(), rival, r, "MET" if r >= 1.0 else "NOT MET",
           p["median"], p["min"], p["max"]))
print()
print("aws CLI fixed cost: 4 parallel one-request `aws s3 ls`: %.2f s" %
      float(aws_fixed))
print("page cache before PUTs: %s" %
      ("dropped (echo 3 > drop_caches)" if drop == "1"
       else "source files read into it first (warm for both)"))
print("objbench: %s" % objbench)
print("rounds took %.0f s; whole run %.0f s (gateway start, data, check "
      "included)" % (float(rounds_s), float(elapsed)))

if json_out:
    doc = {"benchmark": "objstore", "rounds": int(rounds),
           "get_objects": 8, "put_objects": 4, "object_mib": 64,
           "page_cache": "dropped" if drop == "1" else "warm",
           "summary_mib_per_s": summary,
           "ratio": {"get_objstore_over_curl": goals["get"],
                     "put_objstore_over_aws": goals["put"]},
           "ratio_per_round": {"get_objstore_over_curl": pairs["get"],
                               "put_objstore_over_aws": pairs["put"]},
           "goal_met": {"get": goals["get"] >= 1.0,
                        "put": goals["put"] >= 1.0},
           "aws_fixed_cost_seconds": float(aws_fixed),
           "objbench": objbench,
           "seconds": float(elapsed), "runs": rows}
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("results written to %s" % json_out)
EOF
