#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A randomized operation sequence through a write-back mount, in the
# spirit of fsx: tests/fsx.py runs thousands of steps (writes at random
# and block-boundary offsets, sparse holes, appends, truncates, reads
# through two descriptors, close/reopen, fsync, rename, rename over,
# unlink of open files, listings) on a few files in $MNT/fsx, checking
# every read against a model in memory.  Then `fmfs flush --wait` must
# put exactly the model's final files under fsx/ in the bucket (checked
# with the aws CLI: size and sha256 of every object, nothing extra), and a
# remount on the same cache and a cold mount with an empty cache must
# both read them back byte-exact.
#
# The seed is printed; FSX_SEED=N replays a run, FSX_STEPS=N changes its
# length (default 1000).
#
# Two runs: first with --async-delay 0, where files are uploaded (and
# leave the dirty table) between nearly every pair of operations, so
# uploads race reopens, truncates, renames and unlinks; then with
# --async-delay 5, where most files stay dirty and flush --wait forces
# the uploads; that one is also read back after a remount and cold.
. "$TOP/tests/lib/common.sh"

mount_setup fsx
SEED=${FSX_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
STEPS=${FSX_STEPS:-1000}
MANIFEST=$TEST_DIR/fsx.json

trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

mnt_on_cache() { # CACHE_DIR extra options...
	local c=$1
	shift
	$FMFS mount "s3://$B" "$MNT" --cache-dir "$c" "$@" ||
		fail "mount failed (see $c/fmfs.log)"
	mountpoint -q "$MNT" || fail "mount returned 0 but $MNT is not mounted"
}
umnt() {
	$FMFS umount "$MNT" >umount.out 2>&1 || {
		cat umount.out >&2
		fail "umount failed (seed $SEED)"
	}
	mountpoint -q "$MNT" && fail "still mounted after umount"
	return 0
}

run_fsx() { # DIR MANIFEST DELAY: fsx in $MNT/DIR, then the bucket check
	local d=$1 m=$2 delay=$3
	note "fsx --async-delay $delay: seed $SEED, $STEPS steps" \
		"(replay with FSX_SEED=$SEED)"
	mkdir "$MNT/$d" || fail "mkdir in the mount failed"
	if ! python3 "$TOP/tests/fsx.py" "$MNT/$d" --seed "$SEED" \
		--steps "$STEPS" --manifest "$m" >fsx.out 2>&1; then
		cat fsx.out >&2
		fail "fsx found a difference through the mount" \
			"(--async-delay $delay, seed $SEED)"
	fi
	note "$(tail -1 fsx.out | cut -c1-200)"
	note "flush --wait, then the bucket holds exactly the model's files"
	$FMFS flush "$MNT" --wait >flush.out 2>&1 || {
		cat flush.out >&2
		fail "fmfs flush --wait exited non-zero (seed $SEED)"
	}
	# $d/ itself may exist as a directory marker object (the mkdir)
	python3 "$TOP/tests/lib/bucketcheck.py" "$m" --bucket "$B" \
		--prefix "$d/" --allow-extra "$d/" ||
		fail "bucket differs from fsx's final files after flush" \
			"--wait (--async-delay $delay, seed $SEED)"
}

mnt_on_cache "$CACHE" --mode sw --async-delay 0
run_fsx fsx0 "$TEST_DIR/fsx0.json" 0
umnt
mnt_on_cache "$CACHE" --mode sw --async-delay 5
run_fsx fsx "$MANIFEST" 5

note "remount on the same cache: the files read back through the mount"
umnt
mnt_on_cache "$CACHE" --mode sw --async-delay 5
python3 "$TOP/tests/fsx.py" --verify-manifest "$MANIFEST" "$MNT/fsx" ||
	fail "files differ after a remount on the same cache (seed $SEED)"
umnt

note "cold mount on an empty cache: the files come from the bucket"
mnt_on_cache "$TEST_DIR/cache-cold" --mode ro
python3 "$TOP/tests/fsx.py" --verify-manifest "$MANIFEST" "$MNT/fsx" ||
	fail "files differ on a cold mount (seed $SEED)"
umnt
python3 "$TOP/tests/lib/bucketcheck.py" "$MANIFEST" --bucket "$B" \
	--prefix fsx/ --allow-extra fsx/ >/dev/null ||
	fail "bucket changed after the remounts (seed $SEED)"
echo "fsx through the mount ok (seed $SEED)"
