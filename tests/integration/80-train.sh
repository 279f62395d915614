#!/bin/bash
# SPDX-License-Identifier: MIT
#
# fmtrain end to end against the gateway through a real fmfs mount: text
# (the repository's own docs, so nothing is downloaded) tokenized into
# the mount, the shards seen in the bucket by the aws CLI after `fmfs
# flush --wait`; a tiny model trained on the CPU reading the shards
# through the mount, (a) 40 steps straight with checkpoints every 10 to a
# directory on the mount, (b) the same run checkpointing to s3:// directly,
# killed with kill -9 after step 25 and resumed: every loss line after the
# checkpoint it resumed from must equal (a)'s bit for bit (printed with
# %.9g, at another thread count); SIGTERM stopping a run with a final
# checkpoint, and --ckpt-mtbf's Young interval; (c) the loss falls; (d)
# bad input: a corrupt and a short shard, a --vocab too small for the
# data, a corrupted checkpoint shard and manifest on --resume, bad
# options; (e) a resume past a step without a manifest and --resume=20
# before a corrupt newer step save those steps anew, the old ones moved
# to DIR/aside/; (f) a checkpoint that fails in the background is told
# with its reason and not counted as saved.
. "$TOP/tests/lib/common.sh"

mount_setup train
FT=$TOP/tools/fmtrain
mkdir -p "$MNT" local
unset RANK WORLD_SIZE FMCKPT_RUN_ID OMP_NUM_THREADS

trap 'unmount_quietly "$MNT"; cleanup_common' EXIT
$FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" --async-delay 1 \
	--refresh 1 || fail "mount failed (see $CACHE/fmfs.log)"

# losses FILE [AFTER]: "N LOSS" of each step line with N > AFTER.
losses() {
	awk -v s="${2:-0}" '$1 == "step" && $3 == "loss" && $2 > s { print $2, $4 }' "$1"
}
# field FILE KEY: the value after KEY on the summary line.
field() {
	awk -v k="$2" '$1 == "summary" { for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$1"
}

note "tokenize the repository's docs into the mount; the shards reach the bucket"
cat "$TOP"/docs/*.md "$TOP"/docs/*.1 >text.txt
$FT tokenize --shard-tokens 16K "$MNT/shards" text.txt >tok.out ||
	fail "tokenize into the mount"
$FT tokenize --shard-tokens 16K local/shards text.txt >/dev/null ||
	fail "tokenize locally"
nshards=$(ls local/shards | wc -l)
[ "$nshards" -ge 3 ] || fail "only $nshards shard(s): $(cat tok.out)"
grep -q "in $nshards shard(s)" tok.out || fail "tokenize said: $(cat tok.out)"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait"
awsx s3 ls "s3://$B/shards/" >ls.txt
[ "$(grep -c ' shard_0000[0-9][0-9].bin$' ls.txt)" = "$nshards" ] ||
	fail "aws s3 ls does not show $nshards shards: $(cat ls.txt)"
! grep -q tmp ls.txt || fail "temporary files in the bucket: $(cat ls.txt)"
awsx s3 cp --quiet "s3://$B/shards/shard_000001.bin" got.bin
same_file got.bin local/shards/shard_000001.bin
note "$nshards shards of 16384 tokens in s3://$B/shards/"

OPTS=(--data "$MNT/shards" --steps 40 --ckpt-every 10 --seed 7)

note "(a) 40 steps straight, checkpoints every 10 to a directory on the mount"
$FT train "${OPTS[@]}" --threads 1 --ckpt "$MNT/ckpt-a" --csv a.csv \
	>a.out 2>a.err || fail "run (a): $(cat a.err)"
[ "$(losses a.out | wc -l)" = 40 ] || fail "run (a) printed $(losses a.out | wc -l) steps"
[ "$(wc -l <a.csv)" = 41 ] || fail "a.csv has $(wc -l <a.csv) lines"
head -1 a.csv | grep -q '^step,loss,tok_per_s,data_wait_ms,ckpt_block_ms' ||
	fail "csv header: $(head -1 a.csv)"
[ "$(field a.out checkpoints)" = 4 ] || fail "not 4 checkpoints: $(grep summary a.out)"
grep -q "^checkpoint step 40 durable" a.out || fail "no durability line: $(tail -2 a.out)"
note "$(grep summary a.out)"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait"
awsx s3 ls --recursive "s3://$B/ckpt-a/" >ck.txt
[ "$(grep -c '/manifest$' ck.txt)" = 4 ] || fail "bucket has not 4 manifests: $(cat ck.txt)"

note "(b) the same run to s3:// directly, kill -9 after step 25, --resume to 40"
rm -f fifo b1.out
mkfifo fifo
$FT train "${OPTS[@]}" --threads 1 --ckpt "s3://$B/ckpt-b" >fifo 2>b1.err &
pid=$!
rc=0
# The shell reports the kill on its stderr; keep that quiet.
{
	exec 3<fifo
	while read -r line <&3; do
		echo "$line" >>b1.out
		case $line in "step 25 "*) kill -9 $pid ;; esac
	done
	exec 3<&-
	wait $pid
} 2>/dev/null || rc=$?
[ $rc = 137 ] || fail "run (b) was not killed (exit $rc): $(cat b1.err)"
last=$(losses b1.out | tail -1 | cut -d' ' -f1)
[ "$last" -ge 25 ] && [ "$last" -lt 30 ] || fail "killed after step $last"
[ "$(losses b1.out)" = "$(losses a.out | head -"$last")" ] ||
	fail "run (b) before the kill differs from (a)"
$FT train "${OPTS[@]}" --threads 2 --ckpt "s3://$B/ckpt-b" --resume \
	>b2.out 2>b2.err || fail "resume: $(cat b2.err)"
from=$(sed -n 's/.*resumed from checkpoint step \([0-9]*\) .*/\1/p' b2.err)
[ "$from" = 20 ] || [ "$from" = 10 ] || fail "resumed from '$from': $(cat b2.err)"
[ "$(losses b2.out | head -1 | cut -d' ' -f1)" = $((from + 1)) ] ||
	fail "the resumed run did not start at step $((from + 1))"
[ "$(losses b2.out | wc -l)" = $((40 - from)) ] || fail "resume ran $(losses b2.out | wc -l) steps"
if [ "$(losses b2.out)" != "$(losses a.out "$from")" ]; then
	diff <(losses a.out "$from") <(losses b2.out) | head >&2
	fail "after the resume from step $from the losses differ from the straight run"
fi
grep -q "^checkpoint step 40 durable: manifest stored in s3://$B/ckpt-b" b2.out ||
	fail "no durability line: $(tail -2 b2.out)"
awsx s3 ls --recursive "s3://$B/ckpt-b/" >ckb.txt
grep -q 'step-0000000040/manifest$' ckb.txt || fail "step 40 not in the bucket: $(cat ckb.txt)"
note "killed after step $last, resumed from step $from: steps $((from + 1))-40 bit-identical"
note "$(grep summary b2.out)"

note "--resume with no checkpoint starts at step 0, saying so"
$FT train "${OPTS[@]}" --steps 3 --ckpt fresh --resume >c.out 2>c.err ||
	fail "fresh --resume: $(cat c.err)"
grep -q "no checkpoint in fresh; starting from step 0" c.err || fail "no note: $(cat c.err)"
[ "$(losses c.out)" = "$(losses a.out | head -3)" ] || fail "fresh run differs from (a)"

note "SIGTERM: the run stops after the step with a checkpoint, exit 143"
$FT train "${OPTS[@]}" --steps 1000 --ckpt-every 1000 --ckpt term >t.out 2>t.err &
pid=$!
for _ in $(seq 600); do
	grep -q '^step 5 ' t.out 2>/dev/null && break
	sleep 0.05
done
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc = 143 ] || fail "SIGTERM: exit $rc: $(cat t.err)"
grep -q "stopped by signal 15 (Terminated) after step [0-9]*, checkpoint saved" t.err ||
	fail "SIGTERM: $(cat t.err)"
last=$(losses t.out | tail -1 | cut -d' ' -f1)
[ "$last" -lt 38 ] || fail "SIGTERM came too late (step $last)"
grep -q "^checkpoint step $last durable" t.out || fail "SIGTERM: $(tail -2 t.out)"
$FT train "${OPTS[@]}" --steps $((last + 2)) --ckpt term --resume >t2.out 2>t2.err ||
	fail "resume after SIGTERM: $(cat t2.err)"
[ "$(losses t2.out)" = "$(losses a.out "$last" | head -2)" ] ||
	fail "resume after SIGTERM differs from (a)"

note "--ckpt-mtbf: Young's interval from the measured blocking"
$FT train "${OPTS[@]}" --steps 30 --ckpt-mtbf 0.0002 --ckpt young >y.out 2>y.err ||
	fail "--ckpt-mtbf: $(cat y.err)"
grep -q "checkpoint interval (Young): sqrt(2 x .* ms x 0.0002 h) = .* step(s)" y.err ||
	fail "no Young interval: $(cat y.err)"
[ "$(losses y.out)" = "$(losses a.out | head -30)" ] || fail "--ckpt-mtbf changed the losses"
[ "$(field y.out checkpoints)" -ge 2 ] || fail "one checkpoint only: $(grep summary y.out)"
note "$(grep 'interval (Young)' y.err | tail -1)"

note "(c) the loss falls"
first=$(losses a.out | head -1 | cut -d' ' -f2)
final=$(losses a.out | tail -1 | cut -d' ' -f2)
python3 -c "import sys; sys.exit(0 if $final < $first - 0.5 else 1)" ||
	fail "loss went from $first to $final"
note "loss $first at step 1, $final at step 40"

note "(d) bad input: clear messages, exit 1 (data, checkpoint) or 2 (usage)"
mkdir -p bad
cp local/shards/shard_000001.bin bad/corrupt.bin
printf '\xff' | dd of=bad/corrupt.bin bs=1 seek=20000 conv=notrunc status=none
expect_exit 1 "bad/corrupt.bin: payload checksum mismatch" $FT train --data bad/corrupt.bin --steps 2
head -c 20000 local/shards/shard_000001.bin >bad/short.bin
expect_exit 1 "bad/short.bin: truncated" $FT train --data bad/short.bin --steps 2
expect_exit 1 "nothere" $FT train --data bad/nothere --steps 2
expect_exit 1 "vocabulary of 257 .* is 100" $FT train --data "$MNT/shards" --vocab 100 --steps 2
grep -q "give --vocab at least" err || fail "no hint for --vocab: $(cat err)"
cp -r "$MNT/ckpt-a" ck-shard
f=ck-shard/step-0000000040/shard-00000.bin
printf '\x55' | dd of=$f bs=1 seek=$(($(stat -c %s $f) / 2)) conv=notrunc status=none
expect_exit 1 "step 40 in .* is corrupt: .*checksum mismatch" \
	$FT train "${OPTS[@]}" --ckpt ck-shard --resume
grep -q "not starting over" err || fail "no 'not starting over': $(cat err)"
[ -z "$(losses out)" ] || fail "trained from a corrupt checkpoint"
cp -r "$MNT/ckpt-a" ck-man
printf '\x55' | dd of=ck-man/step-0000000040/manifest bs=1 seek=100 conv=notrunc status=none
expect_exit 1 "step 40 in ck-man is corrupt: ck-man/step-0000000040/manifest: " \
	$FT train "${OPTS[@]}" --ckpt ck-man --resume
[ -z "$(losses out)" ] || fail "trained from a corrupt manifest"
# A shard cut short or missing is named, not taken for the manifest.
cp -r "$MNT/ckpt-a" ck-short
truncate -s -64 ck-short/step-0000000040/shard-00000.bin
expect_exit 1 "step 40 in ck-short is corrupt: .*ck-short/step-0000000040/shard-00000.bin is [0-9]* bytes but the manifest says" \
	$FT train "${OPTS[@]}" --ckpt ck-short --resume
rm ck-short/step-0000000040/shard-00000.bin
expect_exit 1 "step 40 in ck-short cannot be opened: .*shard 0 of 1 is missing \\(ck-short/step-0000000040/shard-00000.bin\\)" \
	$FT train "${OPTS[@]}" --ckpt ck-short --resume
! grep -q "unreadable manifest" err || fail "a shard blamed on the manifest: $(cat err)"
$FT train "${OPTS[@]}" --steps 32 --ckpt ck-man --resume=30 >d.out 2>d.err ||
	fail "--resume=30 past a corrupt newest: $(cat d.err)"
[ "$(losses d.out)" = "$(losses a.out 30 | head -2)" ] || fail "--resume=30 differs from (a)"

note "(e) resuming past a step with no manifest, and --resume=20 before a corrupt newer step"
cp -r "$MNT/ckpt-a" ck-inc
rm ck-inc/step-0000000040/manifest
$FT train "${OPTS[@]}" --ckpt ck-inc --resume >e.out 2>e.err ||
	fail "resume past a step without a manifest: $(cat e.err)"
grep -q "resumed from checkpoint step 30" e.err || fail "did not resume from 30: $(cat e.err)"
grep -q "^checkpoint step 40 durable" e.out || fail "step 40 not saved again: $(cat e.err)"
[ "$(losses e.out)" = "$(losses a.out 30)" ] || fail "the resume from 30 differs from (a)"
ls -d ck-inc/aside/step-0000000040.* >/dev/null 2>&1 ||
	fail "the old step 40 was not moved aside: $(ls -R ck-inc)"
$TOP/tools/fmckpt verify 40 -t ck-inc >/dev/null || fail "the new step 40 does not verify"
# step 40's manifest corrupt; --resume=20 moves 30 and 40 aside and
# saves its own 30 and 40.
cp -r "$MNT/ckpt-a" ck-old
printf '\x55' | dd of=ck-old/step-0000000040/manifest bs=1 seek=100 conv=notrunc status=none
$FT train "${OPTS[@]}" --ckpt ck-old --resume=20 >f.out 2>f.err ||
	fail "--resume=20 before a corrupt step 40: $(cat f.err)"
grep -q "moved 2 newer step(s) aside to ck-old/aside/" f.err ||
	fail "no note of the steps moved aside: $(cat f.err)"
[ "$(losses f.out)" = "$(losses a.out 20)" ] || fail "--resume=20 differs from (a)"
for s in 30 40; do
	ls -d ck-old/aside/step-00000000$s.newer-than-20.* >/dev/null 2>&1 ||
		fail "step $s not in ck-old/aside: $(ls ck-old ck-old/aside)"
done
$TOP/tools/fmckpt verify 40 -t ck-old >/dev/null || fail "step 40 was not saved anew"
$FT train "${OPTS[@]}" --steps 42 --ckpt ck-old --resume >/dev/null 2>f2.err ||
	fail "--resume after --resume=20: $(cat f2.err)"

note "(f) a checkpoint that fails in the background: its reason, and the summary counts what was saved"
mkdir ck-fail
touch ck-fail/.tmp-step-0000000030   # a file where step 30's directory goes
$FT train "${OPTS[@]}" --ckpt ck-fail >g.out 2>g.err || fail "run (f): $(cat g.err)"
grep -q "warning: 1 checkpoint(s) failed in the background: step 30: .*ck-fail/.tmp-step-0000000030.*: Not a directory" g.err ||
	fail "no reason for the failed step: $(cat g.err)"
! grep -q ': $' g.err || fail "a message ends in an empty reason: $(cat g.err)"
[ "$(field g.out checkpoints)" = 3 ] || fail "summary does not count 3 saved: $(grep summary g.out)"
[ "$(field g.out ckpt-failed)" = 1 ] || fail "summary does not count 1 failed: $(grep summary g.out)"
grep -q "checkpoints: 3 saved (committed in ck-fail), 1 failed, of 4 begun" g.err ||
	fail "breakdown: $(cat g.err)"

expect_exit 2 "was saved with --layers 2; this run has 3" \
	$FT train "${OPTS[@]}" --layers 3 --ckpt "$MNT/ckpt-a" --resume
expect_exit 2 "holds checkpoints already" $FT train "${OPTS[@]}" --ckpt "$MNT/ckpt-a"
note "vocabulary padding: a large one to a multiple of 128, a small one not"
$FT train --data "$MNT/shards" --vocab 5000 --steps 2 --ckpt pv --ckpt-every 1 \
	>pv.out 2>pv.err || fail "--vocab 5000: $(cat pv.err)"
grep -q "vocab 5000 (padded to 5120)," pv.err || fail "no padding: $(head -1 pv.err)"
grep -q "vocab 257, " a.err || fail "the byte vocabulary was padded: $(head -1 a.err)"
expect_exit 2 "was saved with --padded-vocab 5120; this run has 5000" \
	$FT train --data "$MNT/shards" --vocab 5000 --padded-vocab 5000 \
	--steps 3 --ckpt pv --resume
$FT train --data "$MNT/shards" --vocab 5000 --padded-vocab 5120 --steps 3 \
	--ckpt pv --resume >pv3.out 2>pv3.err || fail "resume: $(cat pv3.err)"
grep -q "^step 3 " pv3.out || fail "resume with --padded-vocab 5120: $(cat pv3.out)"
expect_exit 2 "--padded-vocab 4999 is below --vocab 5000" \
	$FT train --data "$MNT/shards" --vocab 5000 --padded-vocab 4999
expect_exit 2 "heads 3 does not divide --channels 64" $FT train --data "$MNT/shards" --heads 3
expect_exit 2 "--batch '0'" $FT train --data "$MNT/shards" --batch 0
expect_exit 2 "--lr 'x'" $FT train --data "$MNT/shards" --lr x
expect_exit 2 "fmtrain train: unknown option '--bogus'" $FT train --data "$MNT/shards" --bogus
expect_exit 2 "give --data" $FT train --steps 3
expect_exit 2 "--resume needs --ckpt" $FT train --data "$MNT/shards" --resume
expect_exit 2 "WORLD_SIZE=2" env WORLD_SIZE=2 $FT train --data "$MNT/shards"
expect_exit 2 "unknown command" $FT frobnicate
expect_exit 2 "OUT_DIR and at least one FILE" $FT tokenize out
note "the per-step CSV drawn as a PNG (tools/fmtrain-plot.py)"
PY=/usr/bin/python3
if $PY -c 'import matplotlib' 2>/dev/null; then
	$PY "$TOP/tools/fmtrain-plot.py" a.csv a.png ||
		fail "fmtrain-plot.py a.csv failed"
	[ "$(head -c 8 a.png | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] ||
		fail "fmtrain-plot.py wrote no PNG"
	expect_plot_error() { # TEXT FILE
		local rc=0
		$PY "$TOP/tools/fmtrain-plot.py" "$2" x.png >plot.err 2>&1 || rc=$?
		[ $rc = 1 ] && grep -q -- "$1" plot.err ||
			fail "fmtrain-plot.py $2: exit $rc, wanted 1 and '$1': $(cat plot.err)"
	}
	echo "not,a,csv" >bad.csv
	expect_plot_error "not an fmtrain --csv file" bad.csv
	head -1 a.csv >empty.csv
	expect_plot_error "no steps" empty.csv
else
	note "SKIP the plot: no python3-matplotlib"
fi
echo "fmtrain ok"
