#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-train.sh - the training benchmark: on one private Ceph
# RADOS Gateway, in one run, the same tiny fmtrain model (the defaults: 2
# layers, 2 heads, 64 channels, T 64, B 4; BENCH_TRAIN_OPTS adds to them)
# trained for BENCH_STEPS steps on the same token shards read from
#
#   local   the shards in a local directory, page cache dropped first
#   cold    an fmfs mount of the bucket holding the same shards, on an
#           empty cache directory, page cache dropped
#   warm    the same mount after `fmfs umount` and a mount on the same
#           cache directory (every shard cached by the cold run), page
#           cache dropped
#   ckpt    warm again, with a checkpoint every BENCH_CKPT_EVERY steps to
#           a directory on the mount (written back to the bucket)
#
# and reports fmtrain's own summary: mean tokens/s, the share of step
# time spent waiting for data (all steps, and after step 1, which waits
# for the first shard however fast the source), and for ckpt the share
# spent blocked in checkpoints. Goals: warm tokens/s >= 0.98 x local; data wait
# <= 1% of step time. Round by round, each case once, ratios taken within
# a round, medians over rounds. A benchmark, not a test: it fails only
# when something does not work. The gateway, the fmfs mounts, clean-up
# and the summary's common part are in lib.sh, which it sources (lib.sh
# sources vm.sh), shared with the other bench-*.sh.
#
# The data: BENCH_DATA_MIB (64) MiB of text made from the repository's
# docs repeated, tokenized once (byte tokenizer, 2 bytes a token, shards
# of BENCH_SHARD_TOKENS tokens) into TMP/local and uploaded with the aws
# CLI to the bucket's shards/.
#
#   tools/bench/bench-train.sh            (or: make bench)
#
# Environment:
#   BENCH_ROUNDS=5            rounds
#   BENCH_STEPS=1000          steps a run (on a 2-core machine the
#                             compute swings +-10% from run to run,
#                             against a 2% goal: 300 steps x 3 rounds gave
#                             warm/local per round 0.88-1.15)
#   BENCH_CKPT_EVERY=50       checkpoint interval of the ckpt case
#   BENCH_DATA_MIB=64         text size
#   BENCH_SHARD_TOKENS=4M     tokens a shard
#   BENCH_TRAIN_OPTS="..."    extra fmtrain train options (model size...)
#   BENCH_JSON=PATH           also write every figure as JSON
#   BENCH_TMPDIR=DIR          where the temporary directory goes (/tmp)
#
# Cost: ~2 x BENCH_DATA_MIB of disk for the shards and the cache, ~1.5 GiB
# of RAM in the gateway; about 7 minutes with the defaults on a 2-core
# machine. Needs root (drop_caches, FUSE). Everything goes away at the
# end, on failure and on Ctrl-C.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error or a sanitizer build.

set -euo pipefail

PROG=bench-train.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# FMFS: lib.sh's default, tools/fmfs. No FUSE peers here (no
# bench_systems).
FMTRAIN=$ROOT/tools/fmtrain
ROUNDS=${BENCH_ROUNDS:-5}
STEPS=${BENCH_STEPS:-1000}
CKPT_EVERY=${BENCH_CKPT_EVERY:-50}
DATA_MIB=${BENCH_DATA_MIB:-64}
SHARD_TOKENS=${BENCH_SHARD_TOKENS:-4M}
TRAIN_OPTS=${BENCH_TRAIN_OPTS:-}

bench_args "$@"
bench_positive STEPS CKPT_EVERY DATA_MIB
bench_need fusermount3
for p in "$FMFS" "$FMTRAIN"; do
	[ -x "$p" ] || die "$p missing: run ./configure && make"
	if sanitized "$p"; then
		msg "$p is a sanitizer build; its figures would say nothing." \
			"Build without sanitizers (./configure && make clean && make)."
		exit 2
	fi
done
if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
	die "needs root and /dev/fuse"
fi

bench_init train

# One fmtrain run: records METHOD tok_s, wait_pct, step_ms, ckpt_pct.
train() { # METHOD DATA_DIR [fmtrain options...]
	local meth=$1 data=$2 out=$TMP/log/train-$1-$ROUND.out line
	shift 2
	# shellcheck disable=SC2086 # options are words
	"$FMTRAIN" train --data "$data" --steps "$STEPS" $TRAIN_OPTS "$@" \
		>"$out" 2>&1 || die "fmtrain ($meth) failed: $(tail -3 "$out")"
	line=$(grep -m1 '^summary ' "$out") ||
		die "fmtrain ($meth) printed no summary: $(tail -3 "$out")"
	read -r tok ms wait ckpt < <(awk '{
		for (i = 1; i <= NF; i++) {
			if ($i == "mean-tok/s") t = $(i + 1)
			if ($i == "mean-step-ms") s = $(i + 1)
			if ($i == "data-wait-ms") { w = $(i + 2); gsub(/[(%]/, "", w) }
			if ($i == "ckpt-block-ms") { c = $(i + 2); gsub(/[(%]/, "", c) }
		}
		print t, s, w, c }' <<<"$line")
	# The first step waits for the first shard (a cold start); the
	# steady share leaves it out: sum of later waits / their step time.
	steady=$(awk '$1 == "step" && $2 > 1 {
		for (i = 3; i <= NF; i++) {
			if ($i == "tok/s") t = $(i + 1)
			if ($i == "data-wait-ms") w += $(i + 1)
		}
		ms += 1000 * B * T / t
	} END { printf "%.4f", (ms > 0 ? 100 * w / ms : 0) }' \
		B="$BATCH" T="$SEQ" "$out")
	record "$meth" steady_wait_pct "$steady"
	record "$meth" tok_s "$tok"
	record "$meth" step_ms "$ms"
	record "$meth" wait_pct "$wait"
	record "$meth" ckpt_pct "${ckpt:-0}"
}

# B and T, for the steady-state wait (from each step's tok/s).
BATCH=$(sed -n 's/.*--batch[ =]\([0-9]*\).*/\1/p' <<<"$TRAIN_OPTS")
SEQ=$(sed -n 's/.*--seq-len[ =]\([0-9]*\).*/\1/p' <<<"$TRAIN_OPTS")
BATCH=${BATCH:-4}
SEQ=${SEQ:-64}

bench_gateway

msg "making ${DATA_MIB} MiB of text and its shards"
: >"$TMP/corpus.txt"
while [ "$(stat -c %s "$TMP/corpus.txt")" -lt $((DATA_MIB << 20)) ]; do
	cat "$ROOT"/docs/*.md "$ROOT"/README.md >>"$TMP/corpus.txt"
done
truncate -s $((DATA_MIB << 20)) "$TMP/corpus.txt"
"$FMTRAIN" tokenize --shard-tokens "$SHARD_TOKENS" "$TMP/local" \
	"$TMP/corpus.txt" >"$TMP/log/tokenize.out" 2>&1 ||
	die "fmtrain tokenize failed: $(tail -3 "$TMP/log/tokenize.out")"
rm -f "$TMP/corpus.txt"
awsx s3 cp --only-show-errors --recursive "$TMP/local" "s3://$BUCKET/shards/" ||
	die "uploading the shards failed"
NSHARDS=$(find "$TMP/local" -name '*.bin' | wc -l)

M=$TMP/mnt/fmfs
C=$TMP/cache/fmfs
mkdir -p "$M"
for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	drop_caches
	train local "$TMP/local"

	rm -rf "$C"
	mount_fmfs "$M" "$C" || die "$WHY"
	drop_caches
	train cold "$M/shards"
	umount_fmfs "$M" || die "$WHY"

	mount_fmfs "$M" "$C" || die "$WHY"
	drop_caches
	train warm "$M/shards"
	rm -rf "$M/ckpt-$ROUND"
	drop_caches
	train ckpt "$M/shards" --ckpt "$M/ckpt-$ROUND" \
		--ckpt-every "$CKPT_EVERY"
	umount_fmfs "$M" || die "$WHY"
done

summarize "$RESULTS" "$((DATA_MIB << 20))" "${BENCH_JSON:-}" \
	"$STEPS" "$NSHARDS" "$CKPT_EVERY" <<'EOF'
steps, nshards, every = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
print()
print("training benchmark: fmtrain defaults, %d steps a run, %d "
      "shards (%d MiB of text), %d round(s), private RGW on loopback, "
      "medians over rounds" % (steps, nshards, nbytes >> 20,
                               len(rows.get(("local", "tok_s"), {}))))
print()
print("  %-34s %10s %9s %12s %12s %12s" % ("", "tokens/s", "step ms",
      "data wait %", "after step 1", "ckpt block %"))
names = {"local": "local disk (page cache dropped)",
         "cold": "fmfs, cold (empty cache)",
         "warm": "fmfs, warm (remounted cache)",
         "ckpt": "fmfs, warm, ckpt every %d steps" % every}
for m in ("local", "cold", "warm", "ckpt"):
    if med(m, "tok_s") is None:
        continue
    print("  %-34s %10.0f %9.2f %12.2f %12.2f %12.2f" % (
        names[m], med(m, "tok_s"), med(m, "step_ms"), med(m, "wait_pct"),
        med(m, "steady_wait_pct"), med(m, "ckpt_pct")))
print()
r_warm = ratio(("warm", "tok_s"), ("local", "tok_s"))
r_cold = ratio(("cold", "tok_s"), ("local", "tok_s"))
w_warm = med("warm", "wait_pct")
s_warm = med("warm", "steady_wait_pct")
goals = {
    "warm tokens/s >= 0.98 x local disk": (r_warm, r_warm is not None and r_warm >= 0.98),
    "data wait <= 1% of step time (warm, all steps)": (w_warm, w_warm is not None and w_warm <= 1.0),
    "data wait <= 1% of step time (warm, after step 1)": (s_warm, s_warm is not None and s_warm <= 1.0),
}
show_goals(goals)
print("  cold / local tokens/s: %s" % ("%.2f" % r_cold if r_cold else "-"))
print("  checkpoint blocking, share of step time: %.2f%%" % (med("ckpt", "ckpt_pct") or 0))
write_json("training", {"warm_over_local": r_warm,
                        "cold_over_local": r_cold}, goals)
EOF
