#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Random damage to the cache dir, hundreds of times (tests/cachedamage.py
# has the details).  Each trial starts from a cache dir a real mount left
# behind: files uploaded and read back (blocks in objects/, listed in the
# index) and files closed but still pending upload (--async-delay 3600),
# the daemon stopped by kill -9 or by `fmfs umount` while the store refused
# writes.  It damages one file of the dir, sometimes two or three, chosen
# among all the files there (whatever they are): truncated, bits flipped,
# a range zeroed, or removed.  Then it mounts again and checks the
# contract of docs/semantics.md: reads give the right bytes or EIO, never
# wrong ones; `fmfs flush --wait` either puts exactly the acknowledged
# bytes of every pending file in the store or names each file it did not
# upload, whose bytes then stay in dirty/ or lost+found/; the store never
# holds bytes the workload did not write and close; a refused mount names
# the damaged file and deletes nothing.
#
# Most trials use a file:// store (fast: a generation is copied for
# several trials); some use the gateway, checked with the aws CLI.
#
#   FMFS_DAMAGE_TRIALS=N     file:// trials (default 300; 75 under ASan)
#   FMFS_DAMAGE_S3_TRIALS=N  trials against the gateway (default 8; 4 under ASan)
#   FMFS_DAMAGE_SEED=N       the seed (default: random, printed)
#   FMFS_DAMAGE_ONLY=ID      replay one trial (f12: file://, s3: gateway)
# gateway: own   (it stops the gateway between trials; tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup damage
SEED=${FMFS_DAMAGE_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
if grep -q '^SANITIZERS = 1' "$TOP/config.mak" 2>/dev/null; then
	ntf=${FMFS_DAMAGE_TRIALS:-75} nts=${FMFS_DAMAGE_S3_TRIALS:-4}
else
	ntf=${FMFS_DAMAGE_TRIALS:-300} nts=${FMFS_DAMAGE_S3_TRIALS:-8}
fi
ONLY=${FMFS_DAMAGE_ONLY:-}
case $ONLY in
f[0-9]*) nts=0 ;;
s[0-9]*) ntf=0 ;;
'') ;;
*) fail "FMFS_DAMAGE_ONLY=$ONLY: expected f<N> or s<N>" ;;
esac

gw_back() { "$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || true; }
unstick() { # a store left immutable by a trial that was interrupted
	for s in "$TEST_DIR"/file*/store; do
		[ -d "$s" ] && chattr -R -i "$s" 2>/dev/null
	done
	return 0
}
trap 'for m in "$TEST_DIR"/file*/mnt; do unmount_quietly "$m"; done
	unmount_quietly "$TEST_DIR/s3/mnt";
	unstick; gw_back; cleanup_common' EXIT

note "seed $SEED: $ntf trials on file://, $nts on the gateway" \
	"(replay one with FMFS_DAMAGE_SEED=$SEED FMFS_DAMAGE_ONLY=ID)"
# The file:// trials run in FMFS_DAMAGE_PARTS parts (default 2; whole
# generations to each, each part its own work dir) beside the gateway's:
# each driver is printed whole at its end.
PARTS=${FMFS_DAMAGE_PARTS:-2}
[ -n "$ONLY" ] && PARTS=1
rc=0
drivers=()
if [ "$ntf" -gt 0 ]; then
	for i in $(seq 0 $((PARTS - 1))); do
		python3 "$TOP/tests/cachedamage.py" --fmfs "$FMFS" --seed "$SEED" \
			--work "$TEST_DIR/file$i" --store file --trials "$ntf" \
			--part "$i/$PARTS" ${ONLY:+--only "$ONLY"} \
			>"$TEST_DIR/file$i.out" 2>&1 &
		drivers+=("$TEST_DIR/file$i.out")
	done
fi
if [ "$nts" -gt 0 ]; then
	python3 "$TOP/tests/cachedamage.py" --fmfs "$FMFS" --seed "$SEED" \
		--work "$TEST_DIR/s3" --store s3 --bucket "$B" \
		--rgw-dir "$RGW_DIR" --trials "$nts" ${ONLY:+--only "$ONLY"} \
		>"$TEST_DIR/s3.out" 2>&1 &
	drivers+=("$TEST_DIR/s3.out")
fi
wait_parts "${drivers[@]}" || rc=1
[ $rc = 0 ] || fail "damage to the cache dir broke the contract (seed $SEED;" \
	"the lines above name each trial)"
echo "cache dir damage ok (seed $SEED)"
