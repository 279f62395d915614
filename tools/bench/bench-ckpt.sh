#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-ckpt.sh - the checkpoint benchmark: on one private Ceph
# RADOS Gateway, in one run, a 1 GiB checkpoint saved with libfmckpt
# (`fmckpt bench`: 16 tensors, to a local directory and drained to the
# bucket) against
#
#   memcpy     the same bytes copied in memory (the floor for blocking)
#   aws s3 cp  the same number of bytes uploaded by the aws CLI from a
#              file in the page cache (the gateway's parallel PUT rate)
#   s3fs, rclone  how long a plain `cp` of a 1 GiB file onto their mount
#              blocks, and when the object is then complete in the bucket
#              (only if they are installed; set up as bench-mount.sh does)
#
# Goals: commit blocking <= 1.2 x memcpy (tighter: <= 1.05 x, see
# docs/performance.md "Commit blocking and huge pages"); remote
# durability at >= 0.8 x the gateway's parallel PUT rate (aws s3 cp) in
# the same run.  Each fmckpt process saves and copies once to warm
# up, then times a memcpy and a save next to each other (fmckpt_bench.c
# says why in that order); its ratio is the round's.
# Round by round, each method once, ratios taken within a round, medians
# over rounds. A benchmark, not a test: it fails only when something does
# not work. "In the bucket": a HEAD every 0.1 s until the object's size is
# the file's. The gateway, mounts, polling, clean-up and the summary's
# common part are in lib.sh, which it sources (lib.sh sources vm.sh),
# shared with the other bench-*.sh.
#
#   tools/bench/bench-ckpt.sh             (or: make bench)
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_SIZE=1G         checkpoint size
#   BENCH_SYSTEMS="s3fs rclone"   mounts to compare (skipped if missing)
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#   BENCH_FMCKPT=PATH     the fmckpt to run (default tools/fmckpt; a
#                         sanitizer build is replaced by an optimized copy)
#
# The gateway keeps objects in RAM (memstore, 10 GiB cap) and frees
# deleted ones only at garbage collection, so every method's objects are
# deleted and `radosgw-admin gc process --include-all` run before the
# next. Cost: ~3 GiB of RAM for the data and staging, ~1.5 GiB in the
# gateway, 2 GiB on the local disk; ~2-4 minutes with 3 rounds on a
# 2-core machine. Everything goes away at the end, on failure and on
# Ctrl-C. Mounting s3fs/rclone needs root and /dev/fuse.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-ckpt.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FMCKPT=${BENCH_FMCKPT:-$ROOT/tools/fmckpt}

bench_args "$@"
[ -x "$FMCKPT" ] || die "$FMCKPT missing: run ./configure && make"

bench_init ckpt

# A sanitizer build spends CPU per byte that a release build does not;
# measure an optimized copy of the same sources instead.
if [ -z "${BENCH_FMCKPT:-}" ] && sanitized "$FMCKPT"; then
	msg "tools/fmckpt is a sanitizer build; building an optimized copy"
	build_optimized fmckpt tools/fmckpt
	FMCKPT=$TMP/fmckpt
fi

bench_gateway
bench_data
bench_systems

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	# libfmckpt: a directory drained to the bucket.
	rm -rf "$TMP/ckpt"
	source_ready   # the same free memory as the methods after it
	"$FMCKPT" bench --size "$BYTES" --target "$TMP/ckpt" \
		--target "s3://$BUCKET/fmckpt" --endpoint "$RGW_ENDPOINT" --rounds 1 \
		>"$TMP/fmckpt.$ROUND.json" 2>"$TMP/log/fmckpt.err" ||
		die "fmckpt bench failed: $(cat "$TMP/log/fmckpt.err")"
	python3 - "$TMP/fmckpt.$ROUND.json" <<'EOF' >>"$RESULTS.tmp"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("memcpy_s", "commit_blocking_s", "local_durable_s", "remote_durable_s"):
    print("fmckpt", k, d[k])
EOF
	sed "s/^/$ROUND /" "$RESULTS.tmp" >>"$RESULTS"
	rm -f "$RESULTS.tmp"
	reclaim fmckpt/
	sync

	# aws s3 cp of the same bytes, from the page cache.
	measure_aws

	measure_peers
done

summarize "$RESULTS" "$BYTES" "${BENCH_JSON:-}" "${RUN_SYSTEMS[*]:-}" <<'EOF'
systems = sys.argv[4].split()

print()
print("checkpoint benchmark: %.2f GiB, 16 tensors, %d round(s), "
      "private RGW on loopback, medians over rounds" % (gib, nrounds))
print()
m, cb = med("fmckpt", "memcpy_s"), med("fmckpt", "commit_blocking_s")
lo, re = med("fmckpt", "local_durable_s"), med("fmckpt", "remote_durable_s")
aw = med("aws", "put_s")
print("  memcpy of the same bytes        %8.3f s  (%6.0f MiB/s)" % (m, rate(m)))
print("  fmckpt commit blocks            %8.3f s  (%6.0f MiB/s)" % (cb, rate(cb)))
print("  fmckpt durable on local disk    %8.3f s  (%6.0f MiB/s, from commit)" % (lo, rate(lo)))
print("  fmckpt durable in the bucket    %8.3f s  (%6.0f MiB/s, from commit)" % (re, rate(re)))
print("  aws s3 cp (parallel multipart)  %8.3f s  (%6.0f MiB/s)" % (aw, rate(aw)))
for s in systems:
    b, d = med(s, "cp_blocking_s"), med(s, "durable_s")
    if b is None:
        print("  %-6s cp: no figures (see the messages above)" % s)
        continue
    print("  cp onto %-6s blocks          %8.3f s; in the bucket after %s" %
          (s, b, "%.3f s" % d if d is not None else "-"))
print()
r_block = ratio(("fmckpt", "commit_blocking_s"), ("fmckpt", "memcpy_s"))
r_remote = ratio(("aws", "put_s"), ("fmckpt", "remote_durable_s"))
goals = {
    "commit blocking <= 1.2 x memcpy": (r_block, r_block is not None and r_block <= 1.2),
    "commit blocking <= 1.05 x memcpy (tighter)": (r_block, r_block is not None and r_block <= 1.05),
    "remote durability rate >= 0.8 x aws s3 cp rate": (r_remote, r_remote is not None and r_remote >= 0.8),
}
show_goals(goals)
print("(ratios within each round, median over rounds; remote: aws time / fmckpt time)")
write_json("checkpoint", {"blocking_over_memcpy": r_block,
                          "remote_rate_over_aws": r_remote}, goals)
EOF
