#!/bin/bash
# SPDX-License-Identifier: MIT
#
# libfmckpt for a job on several nodes (ckpt_config.node_local): four
# ranks, separate processes, as two nodes of two ranks, each node with
# its own directory (its "NVMe"), the gateway's bucket as where they
# meet.  Each rank's shard lands in its node's directory and in the
# bucket, rank 0 commits the manifest in the bucket only, retention
# keeps one step per node; the aws CLI sees every shard and marker.  A
# restore takes each shard from the node's directory when it is there
# and verifies (no byte from the bucket), from the bucket when the
# node's copy is missing or damaged (counted, and named in the log), and
# a rank killed mid-save leaves the step uncommitted, the previous one
# loadable.  With commit_on_nodes a step committed on the nodes (every
# shard on its node, manifest.nodes in the bucket) loads before the
# bucket has it, and one that lost a node's copy before its drain falls
# back to the previous step.  A restore also reads through an fmfs
# mount of the bucket (a file:// store on the mount), which is how the
# members of a cache group read it once per cluster.  Every load is checked byte for byte by tests/ckpt-writer.
. "$TOP/tests/lib/common.sh"

W=$TOP/tests/ckpt-writer
CK=$TOP/tools/fmckpt
B=$(new_bucket nodes)
cd "$TEST_DIR"
unset RANK WORLD_SIZE FMCKPT_RUN_ID FMCKPT_CRASH_AT FMCKPT_CRASH_STEP
MIB=$((1024 * 1024))
SIZE=$((4 * MIB))
URL=s3://$B/job

node_of() { [ "$1" -lt 2 ] && echo nodeA || echo nodeB; }

# ranks CMD...: runs CMD for ranks 0-3 at once, each with its node's
# directory; fails if one fails.  Output in out.R, errors in err.R.
ranks() {
	local pids=() r
	for r in 0 1 2 3; do
		RANK=$r WORLD_SIZE=4 "$@" --dir "$(node_of $r)" --remote "$URL" \
			--node-local --size $SIZE >"out.$r" 2>"err.$r" &
		pids+=($!)
	done
	for r in 0 1 2 3; do
		wait "${pids[$r]}" || fail "rank $r: $* failed: $(cat "err.$r")"
	done
}

note "four ranks on two nodes save two steps; the bucket is where they meet"
ranks $W save --count 2 --wait remote --keep-local 1 --barrier-timeout 60000
for r in 0 1 2 3; do
	grep -qx "durable 2" "out.$r" || fail "rank $r: $(cat "out.$r" "err.$r")"
done
awsx s3api list-objects-v2 --bucket "$B" --prefix job/ \
	--query 'Contents[].Key' --output text | tr '\t' '\n' | sort >keys.txt
for s in 1 2; do
	for k in manifest shard-00000.bin shard-00001.bin shard-00002.bin \
		shard-00003.bin rank-00003.done; do
		grep -qx "job/step-000000000$s/$k" keys.txt ||
			fail "aws does not see job/step-000000000$s/$k: $(cat keys.txt)"
	done
done
# Each node holds its own ranks' shards of the newest step, no manifest.
for f in nodeA/step-0000000002/shard-00000.bin nodeA/step-0000000002/shard-00001.bin \
	nodeB/step-0000000002/shard-00002.bin nodeB/step-0000000002/shard-00003.bin; do
	[ -s "$f" ] || fail "$f missing: $(find node? | sort)"
done
[ ! -e nodeA/step-0000000002/shard-00002.bin ] || fail "node A holds rank 2's shard"
[ ! -e nodeA/step-0000000002/manifest ] || fail "a manifest in a node's directory"
[ ! -e nodeA/step-0000000001 ] && [ ! -e nodeB/step-0000000001 ] ||
	fail "retention (--keep-local 1) left step 1 on a node: $(find node? | sort)"
same_file nodeB/step-0000000002/shard-00003.bin \
	<(awsx s3 cp --quiet "$URL/step-0000000002/shard-00003.bin" -)
$CK list -t "$URL" >list.txt
grep -q "^ *2 " list.txt || fail "fmckpt list: $(cat list.txt)"

note "restore with every node's copy there: nothing from the bucket"
ranks $W check
for r in 0 1 2 3; do
	grep -qx "loaded 2" "out.$r" || fail "rank $r: $(cat "out.$r" "err.$r")"
	grep -q "^served node [1-9][0-9]* remote 0 damaged 0$" "out.$r" ||
		fail "rank $r read from the bucket: $(cat "out.$r" "err.$r")"
	grep -q "shards $r from this node's directory" "err.$r" ||
		fail "rank $r's log does not say where its shard came from: $(cat "err.$r")"
done

note "node B's copy missing: its ranks restore from the bucket"
rm -rf nodeB/step-0000000002
ranks $W check
for r in 2 3; do
	grep -qx "loaded 2" "out.$r" || fail "rank $r: $(cat "out.$r" "err.$r")"
	grep -q "^served node 0 remote [1-9][0-9]* damaged 0$" "out.$r" ||
		fail "rank $r: $(cat "out.$r" "err.$r")"
	grep -q "shards $r from the store" "err.$r" || fail "rank $r: $(cat "err.$r")"
done
grep -q "remote 0 damaged 0" out.0 || fail "rank 0: $(cat out.0)"

note "node A's copy of rank 0's shard damaged: refused, read from the bucket"
printf '\xff\xff\xff\xff' | dd of=nodeA/step-0000000002/shard-00000.bin bs=1 \
	seek=$((4096 + 1000)) conv=notrunc status=none
ranks $W check
grep -qx "loaded 2" out.0 || fail "rank 0: $(cat out.0 err.0)"
grep -q "^served node [0-9]* remote [1-9][0-9]* damaged 1$" out.0 ||
	fail "rank 0 did not count the damaged copy: $(cat out.0 err.0)"
grep -q "this node's copy failing" err.0 && grep -q "checksum mismatch" err.0 &&
	grep -q "nodeA/step-0000000002/shard-00000.bin" err.0 ||
	fail "rank 0's log does not name the damaged copy: $(cat err.0)"
grep -q "remote 0 damaged 0" out.1 || fail "rank 1: $(cat out.1 err.1)"

note "step 1, kept only in the bucket: every rank from there"
for r in 0 3; do
	RANK=$r WORLD_SIZE=4 $W check --step 1 --dir "$(node_of $r)" --remote "$URL" \
		--node-local --size $SIZE >"o1.$r" 2>"e1.$r" || fail "rank $r step 1: $(cat "e1.$r")"
	grep -qx "loaded 1" "o1.$r" && grep -q "^served node 0 remote [1-9]" "o1.$r" ||
		fail "rank $r step 1: $(cat "o1.$r")"
done

note "rank 3 killed mid-save of step 3: not committed; step 2 still loads"
pids=()
for r in 0 1 2 3; do
	crash=
	[ $r = 3 ] && crash=remote-shard
	RANK=$r WORLD_SIZE=4 FMCKPT_CRASH_AT=$crash $W save --first 3 --count 1 \
		--wait remote --dir "$(node_of $r)" --remote "$URL" --node-local \
		--size $SIZE --barrier-timeout 3000 >"s3.$r" 2>"e3.$r" &
	pids+=($!)
done
for r in 0 1 2 3; do
	rc=0
	wait "${pids[$r]}" || rc=$?
	echo $rc >"rc3.$r"
done
[ "$(cat rc3.3)" != 0 ] || fail "rank 3 was not killed"
[ "$(cat rc3.0)" != 0 ] || fail "rank 0 committed step 3 without rank 3: $(cat s3.0)"
grep -q "rank(s) 3" e3.0 || fail "rank 0 does not name the missing rank: $(cat e3.0)"
awsx s3api head-object --bucket "$B" --key job/step-0000000003/manifest \
	>/dev/null 2>&1 && fail "a manifest for step 3 in the bucket"
RANK=1 WORLD_SIZE=4 $W check --dir nodeA --remote "$URL" --node-local \
	--size $SIZE >o.1 2>e.1 || fail "load after the kill: $(cat e.1)"
grep -qx "loaded 2" o.1 || fail "the newest loadable is not step 2: $(cat o.1)"

note "commit on the nodes: step 4 loads before the bucket has it"
# Rank 3 dies once its shard is in the bucket but before its marker
# (remote-shard): every shard is on its node and rank 0 stores
# manifest.nodes, but the bucket's manifest never comes.
pids=()
for r in 0 1 2 3; do
	crash=
	[ $r = 3 ] && crash=remote-shard
	RANK=$r WORLD_SIZE=4 FMCKPT_CRASH_AT=$crash $W save --first 4 --count 1 \
		--wait nodes --commit-on-nodes --dir "$(node_of $r)" --remote "$URL" \
		--node-local --size $SIZE --barrier-timeout 3000 >"s4.$r" 2>"e4.$r" &
	pids+=($!)
done
for r in 0 1 2 3; do
	rc=0
	wait "${pids[$r]}" || rc=$?
	echo $rc >"rc4.$r"
done
for r in 0 1 2; do
	grep -qx "durable 4" "s4.$r" || fail "rank $r: step 4 not committed on the nodes: $(cat "s4.$r" "e4.$r")"
done
awsx s3api head-object --bucket "$B" --key job/step-0000000004/manifest.nodes \
	>/dev/null || fail "no manifest.nodes for step 4 in the bucket"
awsx s3api head-object --bucket "$B" --key job/step-0000000004/manifest \
	>/dev/null 2>&1 && fail "step 4 committed in the bucket without rank 3's marker"
for r in 0 3; do
	RANK=$r WORLD_SIZE=4 $W check --dir "$(node_of $r)" --remote "$URL" \
		--node-local --commit-on-nodes --size $SIZE >"o4.$r" 2>"e4c.$r" ||
		fail "rank $r: load of the step committed on the nodes: $(cat "e4c.$r")"
	grep -qx "loaded 4" "o4.$r" && grep -q "remote 0 damaged 0" "o4.$r" ||
		fail "rank $r did not load step 4 from its node: $(cat "o4.$r" "e4c.$r")"
done
# Without commit_on_nodes a load takes only what the bucket committed.
RANK=3 WORLD_SIZE=4 $W check --dir nodeB --remote "$URL" --node-local \
	--size $SIZE >o4n 2>/dev/null || fail "load without commit_on_nodes"
grep -qx "loaded 2" o4n || fail "without commit_on_nodes: $(cat o4n)"
# What it risks: node B lost, and rank 3's shard never reached the
# bucket: step 4 cannot be loaded there, and the load falls back to 2.
rm -rf nodeB/step-0000000004
awsx s3 rm --quiet "$URL/step-0000000004/shard-00003.bin"
RANK=3 WORLD_SIZE=4 $W check --dir nodeB --remote "$URL" --node-local \
	--commit-on-nodes --size $SIZE >o4l 2>e4l || fail "load after the loss: $(cat e4l)"
grep -qx "loaded 2" o4l || fail "after losing node B's copy: $(cat o4l e4l)"
grep -q "skipped step 4" e4l || fail "the log does not say step 4 was skipped: $(cat e4l)"

note "restore through an fmfs mount of the bucket, as a cache group's members read"
if [ -e /dev/fuse ]; then
	MNT=$TEST_DIR/mnt
	CACHE=$TEST_DIR/cache
	mkdir -p "$MNT"
	trap 'unmount_quietly "$MNT"; cleanup_common' EXIT
	mnt --mode ro
	RANK=2 WORLD_SIZE=4 $W check --step 2 --remote "file://$MNT/job" \
		--size $SIZE >om 2>em || fail "load through the mount: $(cat em)"
	grep -qx "loaded 2" om || fail "through the mount: $(cat om em)"
	fetched=$($FMFS status "$MNT" | awk '$1 == "bytes_fetched:" { print $2 }')
	[ "${fetched:-0}" -ge $((SIZE / 2)) ] ||
		fail "the mount fetched $fetched bytes for a $SIZE-byte shard"
	$FMFS umount "$MNT" || fail "umount"
else
	echo "  (no /dev/fuse: skipped)"
fi

note "bad input: node_local without a remote"
expect_exit 1 "node_local needs both a directory" env RANK=0 WORLD_SIZE=1 \
	$W save --dir nodeA --node-local --size $SIZE
expect_exit 1 "commit_on_nodes needs node_local" env RANK=0 WORLD_SIZE=1 \
	$W save --dir nodeA --remote "$URL" --commit-on-nodes --size $SIZE
echo "checkpoints across nodes ok"
