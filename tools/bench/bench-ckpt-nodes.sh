#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-ckpt-nodes.sh - checkpoints of a job on several nodes
# (ckpt_config.node_local, docs/checkpoint-format.md "Node-local
# directories"): RANKS ranks, separate processes, each with its own
# "node" directory on this machine's disk, the private gateway's bucket
# where they meet; SIZE bytes a rank (tests/ckpt-writer: 13 tensors).
# In one run, round by round, each next to what it is measured against:
#
#   blocking       how long each rank's commit blocks (ckpt_stats'
#                  commit_last_ns), against a memcpy of the same bytes
#                  (`fmckpt bench`'s, in the same round)
#   node-durable   from the commit until each rank's shard is durable on
#                  its node, all ranks at once, against RANKS `dd
#                  conv=fsync` of the same bytes to the same disk at once
#   in the bucket  from the commit until the step is committed in the
#                  bucket (rank 0's manifest), against RANKS `fmfs obj
#                  put` of the same bytes at once
#   restore        every rank's ckpt_load at once, each shard from its
#                  node's directory, against the same with the nodes'
#                  copies removed (from the bucket)
#
# Times are the slowest rank's (a job waits for its slowest), medians
# over rounds; ratios within a round.  A benchmark, not a test: it fails
# only when something does not work.
#
#   tools/bench/bench-ckpt-nodes.sh
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_SIZE=256M       bytes a rank
#   BENCH_RANKS=2         ranks (processes, one "node" each)
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#
# Cost: RANKS x SIZE x 3 on the disk, RANKS x SIZE x 2 in the gateway's
# memory; about a minute with the defaults on a 2-core machine.
#
# Exit status: 0 when the benchmark ran, 1 when the set-up or a
# measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-ckpt-nodes.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SIZE=${BENCH_SIZE:-256M}
RANKS=${BENCH_RANKS:-2}
bench_positive RANKS
bench_args "$@"
W=$ROOT/tests/ckpt-writer
FMCKPT=$ROOT/tools/fmckpt
FMFS=$ROOT/tools/fmfs
for p in "$W" "$FMCKPT" "$FMFS"; do
	[ -x "$p" ] || die "$p missing: run ./configure && make"
done
bench_init ckpt-nodes no-vm
bench_gateway
bench_data

# ranks WHAT ARGS...: ckpt-writer WHAT for every rank at once, each with
# its node's directory; the outputs in $TMP/log/WHAT.R, errors in
# $TMP/log/err.WHAT.R.
ranks() {
	local what=$1 pids=() r
	shift
	for ((r = 0; r < RANKS; r++)); do
		RANK=$r WORLD_SIZE=$RANKS AWS_ENDPOINT_URL=$RGW_ENDPOINT \
			"$W" "$what" --dir "$TMP/node$r" --remote "s3://$BUCKET/job" \
			--node-local --size "$BYTES" --times "$@" \
			>"$TMP/log/$what.$r" 2>"$TMP/log/err.$what.$r" &
		pids+=($!)
	done
	for ((r = 0; r < RANKS; r++)); do
		wait "${pids[$r]}" ||
			die "rank $r: ckpt-writer $what failed: $(cat "$TMP/log/err.$what.$r")"
	done
}

# slowest FILE-GLOB FIELD: the largest value after FIELD in the files.
slowest() {
	# shellcheck disable=SC2086 # the glob is the point
	awk -v f="$2" '{ for (i = 1; i < NF; i++) if ($i == f && $(i + 1) > m) m = $(i + 1) }
		END { printf "%.6f", m }' $1
}

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	rm -rf "$TMP"/node* "$TMP/fmckpt"
	# memcpy of the same bytes, as fmckpt bench times it
	"$FMCKPT" bench --size "$BYTES" --target "$TMP/fmckpt" --rounds 1 \
		>"$TMP/log/fmckpt.json" 2>"$TMP/log/fmckpt.err" ||
		die "fmckpt bench failed: $(cat "$TMP/log/fmckpt.err")"
	record memcpy s "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["memcpy_s"])' "$TMP/log/fmckpt.json")"
	rm -rf "$TMP/fmckpt"

	sync
	ranks save --first "$ROUND" --count 1 --wait remote --keep-local 1
	record fmckpt commit_s "$(slowest "$TMP/log/save.[0-9]*" commit_s)"
	record fmckpt node_s "$(slowest "$TMP/log/save.[0-9]*" local_s)"
	record fmckpt bucket_s "$(slowest "$TMP/log/save.[0-9]*" remote_s)"

	# dd of the same bytes to the same disk, fsynced, all ranks at once
	sync
	t0=$(now)
	pids=()
	for ((r = 0; r < RANKS; r++)); do
		dd if="$TMP/data.bin" of="$TMP/dd.$r" bs=8M conv=fsync \
			status=none & pids+=($!)
	done
	wait "${pids[@]}"
	record dd s "$(elapsed "$t0" "$(now)")"
	rm -f "$TMP"/dd.*

	# fmfs obj put of the same bytes, all ranks at once
	t0=$(now)
	pids=()
	for ((r = 0; r < RANKS; r++)); do
		"$FMFS" obj put "$TMP/data.bin" "s3://$BUCKET/put/$r" \
			--endpoint "$RGW_ENDPOINT" >/dev/null 2>"$TMP/log/put.$r" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || die "fmfs obj put failed: $(cat "$TMP"/log/put.*)"
	done
	record put s "$(elapsed "$t0" "$(now)")"
	reclaim put/

	# restore: from the nodes' copies, then with them removed
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	ranks check --step "$ROUND"
	grep -q " remote 0 damaged 0" "$TMP/log/check.0" ||
		die "the node restore read the bucket: $(cat "$TMP/log/check.0")"
	record restore node_s "$(slowest "$TMP/log/check.[0-9]*" load_s)"
	rm -rf "$TMP"/node*/step-*
	ranks check --step "$ROUND"
	grep -q "^served node 0 " "$TMP/log/check.0" ||
		die "the bucket restore read a node: $(cat "$TMP/log/check.0")"
	record restore bucket_s "$(slowest "$TMP/log/check.[0-9]*" load_s)"
	reclaim job/
done

summarize "$RESULTS" "$BYTES" "${BENCH_JSON:-}" "$RANKS" <<'EOF'
ranks = int(sys.argv[4])
print()
print("checkpoints across nodes: %d rank(s) x %.0f MiB, node_local, %d "
      "round(s), private RGW on loopback; the slowest rank, medians over "
      "rounds" % (ranks, mib, nrounds))
print()
def line(what, meth, key, n=1):
    v = med(meth, key)
    print("  %-44s %8.3f s  (%6.0f MiB/s)" % (what, v, rate(v) * n))
line("memcpy of a rank's bytes", "memcpy", "s")
line("commit blocks (a rank)", "fmckpt", "commit_s")
line("durable on every node (all ranks)", "fmckpt", "node_s", ranks)
line("dd conv=fsync, all ranks at once", "dd", "s", ranks)
line("committed in the bucket (all ranks)", "fmckpt", "bucket_s", ranks)
line("fmfs obj put, all ranks at once", "put", "s", ranks)
line("restore from the nodes (all ranks)", "restore", "node_s", ranks)
line("restore from the bucket (all ranks)", "restore", "bucket_s", ranks)
print()
r = {"blocking_over_memcpy": ratio(("fmckpt", "commit_s"), ("memcpy", "s")),
     "node_durable_over_dd": ratio(("fmckpt", "node_s"), ("dd", "s")),
     "bucket_over_put": ratio(("fmckpt", "bucket_s"), ("put", "s")),
     "restore_node_over_bucket": ratio(("restore", "node_s"),
                                       ("restore", "bucket_s"))}
for k, v in r.items():
    print("  %-28s %6.2f x" % (k, v))
print("(time over time: below 1 is faster)")
write_json("checkpoint-nodes", r, {})
EOF
