#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The object store goes away under a mount: cached data keeps being
# served, an uncached read fails with EIO within the --timeout bound (no
# process stuck in D state), `fmfs status` says disconnected, and service
# resumes on its own when the gateway comes back.
# gateway: own   (it stops the gateway; tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup off
mkdir -p data
random_file data/cached 6
random_file data/uncached 6
awsx s3 cp --quiet --recursive data "s3://$B/data/"

gw_back() { "$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || true; }
trap 'gw_back; unmount_quietly "$MNT"; cleanup_common' EXIT

$FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/cache" --timeout 4 --refresh 1 ||
	fail "mount failed"
cmp data/cached "$MNT/data/cached" || fail "first read wrong"
stat "$MNT/data/uncached" >/dev/null

note "gateway stopped"
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null || fail "cannot stop the gateway"
sleep 1.5 # past --refresh: lookups now go to the store and fail
t0=$(date +%s%N)
cmp data/cached "$MNT/data/cached" || fail "cached read failed while the store is down"
ms=$((($(date +%s%N) - t0) / 1000000))
note "cached read with the store down took $ms ms"
t0=$(date +%s%N)
if timeout 60 cat "$MNT/data/uncached" >/dev/null 2>err; then
	fail "an uncached read succeeded with the store down"
fi
ms=$((($(date +%s%N) - t0) / 1000000))
note "uncached read failed after $ms ms: $(head -c 200 err)"
grep -q "Input/output error" err || fail "expected EIO, got: $(cat err)"
[ $ms -lt 15000 ] || fail "uncached read took $ms ms (timeout 4 s)"
[ "$(stat_of connected)" = False ] || fail "status does not say disconnected"

note "gateway back: service resumes by itself"
gw_back
for _ in $(seq 30); do
	cmp -s data/uncached "$MNT/data/uncached" && break
	sleep 1
done
cmp data/uncached "$MNT/data/uncached" || fail "no recovery after the gateway came back"
# Metadata stays on what we have for 5 s after a failure; then it asks.
for _ in $(seq 20); do
	[ "$(stat_of connected)" = True ] && break
	ls "$MNT/data" >/dev/null
	sleep 0.5
done
[ "$(stat_of connected)" = True ] || fail "status still says disconnected"
$FMFS umount "$MNT"
echo "offline behaviour ok"
