#!/bin/bash
# SPDX-License-Identifier: MIT
#
# kill -9 of the mount daemon: the mount reports "not connected" (no
# hang), `fmfs umount` clears it, and a remount on the same cache serves
# what was cached before the crash without any GET (the index and the
# blocks survive; anything the index had not recorded is refetched, and
# never served wrong).
. "$TOP/tests/lib/common.sh"

mount_setup crash
no_keeper # it kills the daemon: what a mount without a keeper does
mkdir -p data
for i in 1 2 3 4; do random_file data/s$i 5; done
awsx s3 cp --quiet --recursive data "s3://$B/data/"
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

$FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/cache" || fail "mount failed"
for i in 1 2 3 4; do cmp data/s$i "$MNT/data/s$i" || fail "s$i wrong"; done
wait_index_flush # the index holds the blocks just read
pid=$(pgrep -f "fmfs mount s3://$B $MNT" | head -1)
[ -n "$pid" ] || fail "no daemon process found"
kill -9 "$pid"
sleep 0.5
note "killed the daemon ($pid)"
if timeout 10 ls "$MNT" >/dev/null 2>err; then
	fail "a dead mount still answered"
fi
grep -q "not connected" err || fail "expected ENOTCONN from the dead mount: $(cat err)"
$FMFS umount "$MNT" || fail "umount of a dead mount failed"
mountpoint -q "$MNT" && fail "dead mount still mounted"

note "remount on the same cache"
$FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/cache" || fail "remount failed"
for i in 1 2 3 4; do cmp data/s$i "$MNT/data/s$i" || fail "s$i wrong after the crash"; done
gets=$(stat_of store_get_requests)
note "GETs after the crash: $gets"
[ "$gets" = 0 ] || fail "data cached before kill -9 was fetched again ($gets GETs)"
$FMFS umount "$MNT"
echo "crash recovery ok"
