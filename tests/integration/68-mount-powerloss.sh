#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Power cuts, simulated the way SQLite tests them: tests/crashfs (a FUSE
# file system that drops or tears every write not made durable by fsync
# at a chosen operation) under fmfs's cache dir and under a libfmckpt
# checkpoint directory, hundreds of crash points, each followed by a
# remount and the contract of docs/semantics.md (tests/lib/powerloss.py
# says what each kind of trial checks; docs/testing.md what crashfs
# models and what it does not):
#   ckpt    a step called durable (or a newer one) loads byte-exact, and
#           every step listed complete loads byte-exact
#   write   fmfs write-back over a file:// store and over the gateway
#           (checked with the aws CLI): nothing in the store the workload
#           never wrote, fsync-acknowledged files kept (or flush --wait
#           exits 1 naming them, their bytes still in the cache dir),
#           reads through the remount correct or EIO
#   read    the read cache: after the crash every file reads byte-exact
# FMFS_POWERLOSS_TRIALS=N sets the number of trials (default 400, 100 in
# a --enable-sanitizers build), split 40% ckpt, 40% write (file://), 12%
# read, 8% write (gateway); FMFS_POWERLOSS_SEED=S replays a run (the
# seed is printed; each failing trial prints its own replay line).
# A remount after a power cut runs in another boot (FMFS_BOOT_ID), as
# after a real one: a file open for writing at the cut is then held,
# not uploaded as it stands.
# time-limit below: 400 trials take 350-420 s beside three other tests;
# once, with 49, 57 and 46 beside it, the write families took 560-580 s
# and the run ran past 600 s without a failure.
# time-limit: 900
. "$TOP/tests/lib/common.sh"

mount_setup powerloss
[ -x "$TOP/tests/crashfs" ] || fail "tests/crashfs is not built (make)"
command -v fusermount3 >/dev/null || { echo "SKIP: no fusermount3"; exit 77; }

n=400
grep -q '^SANITIZERS = 1' "$TOP/config.mak" 2>/dev/null && n=100
n=${FMFS_POWERLOSS_TRIALS:-$n}
seed=${FMFS_POWERLOSS_SEED:-$((RANDOM * 32768 + RANDOM))}
ck=$((n * 4 / 10))
wr=$((n * 4 / 10))
rd=$((n * 12 / 100))
s3=$((n - ck - wr - rd))
for v in ck wr rd s3; do [ "${!v}" -ge 1 ] || eval "$v=1"; done
note "seed $seed: $ck ckpt, $wr write (file://), $rd read, $s3 write (gateway) trials"

cleanup() {
	# Mounts a failed trial may have left, innermost first.
	grep -o " $TEST_DIR/[^ ]*" /proc/self/mounts | sort -r |
		while read -r m; do
			fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done
	cleanup_common
}
trap cleanup EXIT

PL="python3 $TOP/tests/lib/powerloss.py run"
rc=0
t0=$(date +%s)
# The families are independent (each its own directory, crashfs mounts
# and store): they run at once, the write trials on file:// (the longest)
# in two parts of the same draws; each is printed whole at its end.
kinds=(ckpt.out write.0.out write.1.out read.out write-s3.out)
$PL --seed $seed --kind ckpt --trials "$ck" --dir "$TEST_DIR/ckpt" \
	>"$TEST_DIR/pl.ckpt.out" 2>&1 &
for i in 0 1; do
	$PL --seed $((seed + 1)) --kind write --trials "$wr" --part "$i/2" \
		--dir "$TEST_DIR/write.$i" >"$TEST_DIR/pl.write.$i.out" 2>&1 &
done
$PL --seed $((seed + 2)) --kind read --trials "$rd" --dir "$TEST_DIR/read" \
	>"$TEST_DIR/pl.read.out" 2>&1 &
$PL --seed $((seed + 3)) --kind write --trials "$s3" --store s3 --bucket "$B" \
	--dir "$TEST_DIR/write-s3" >"$TEST_DIR/pl.write-s3.out" 2>&1 &
wait_parts "${kinds[@]/#/$TEST_DIR/pl.}" || rc=1
note "$n trials in $(($(date +%s) - t0)) s"
[ $rc = 0 ] || fail "power-loss trials failed (seed $seed; see above)"
echo "power-loss trials ok"
