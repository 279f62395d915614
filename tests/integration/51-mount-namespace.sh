#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The namespace survives remounts (docs/semantics.md "When the store is
# unreachable"): a warm remount serves `ls -l` and reads without a
# LIST; a remount with the gateway stopped serves every cached byte and
# lists every known directory, fails only uncached bytes (EIO), queues
# writes and reconnects on its own; an object changed meanwhile is never
# served from its old blocks; an empty cache with the store down fails
# clearly; kill -9 while listings are written leaves an index that
# serves nothing wrong; and a bounded index evicts old listings, which
# are LISTed again.
# gateway: own   (it stops the gateway; tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup ns
no_keeper # it kills the daemon: what a mount without a keeper does
gw_back() { "$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || true; }
trap 'gw_back; unmount_quietly "$MNT"; cleanup_common' EXIT

mkdir -p data/sub
random_file data/a 6
random_file data/b 6
random_file data/sub/c 6
random_file data/uncached 2
awsx s3 cp --quiet --recursive data "s3://$B/data/"

listing() { (cd "$1" && find . -printf '%y %s %p\n' | sort); }
wait_connected() {
	for _ in $(seq 60); do
		[ "$(stat_of connected)" = True ] && return 0
		sleep 0.5
	done
	fail "status still says disconnected after 30 s"
}

note "first mount: list and read"
try_mnt --refresh 300 || fail "mount failed"
listing "$MNT/data" >seen
for f in a b sub/c; do cmp "data/$f" "$MNT/data/$f" || fail "$f read wrong"; done
wait_index_flush # the flusher writes the listings
[ "$(stat_of namespace_dirs)" -ge 3 ] ||
	fail "index keeps $(stat_of namespace_dirs) listings, expected >= 3"
$FMFS umount "$MNT"

note "warm remount, gateway up: no LIST within --refresh"
try_mnt --refresh 300 || fail "remount failed"
listing "$MNT/data" >again
diff seen again || fail "warm remount lists differently"
ls -l "$MNT/data" "$MNT/data/sub" >/dev/null
for f in a b sub/c; do cmp "data/$f" "$MNT/data/$f" || fail "$f read wrong"; done
[ "$(stat_of listings)" = 0 ] || fail "warm remount made $(stat_of listings) LISTs"
[ "$(stat_of listings_loaded)" -ge 3 ] || fail "listings not loaded from the index"
$FMFS umount "$MNT"

note "remount with the gateway stopped: disconnected"
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null || fail "cannot stop the gateway"
try_mnt --refresh 1 --timeout 3 2>err || { cat err; fail "mount with the store down failed"; }
grep -q "disconnected" err || fail "mount did not say it is disconnected: $(cat err)"
[ "$(stat_of connected)" = False ] || fail "status does not say connected: false"
sleep 1.5 # past --refresh: everything is stale and asked of the store
listing "$MNT/data" >down
diff seen down || fail "disconnected mount lists differently"
ls -l "$MNT/data/sub" >/dev/null || fail "ls -l of a known directory failed"
for f in a b sub/c; do cmp "data/$f" "$MNT/data/$f" || fail "$f not served from the cache"; done
t0=$(date +%s%N)
if timeout 60 cat "$MNT/data/uncached" >/dev/null 2>err; then
	fail "an uncached file was read with the store down"
fi
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q "Input/output error" err || fail "expected EIO, got: $(cat err)"
[ $ms -lt 15000 ] || fail "uncached read took $ms ms (--timeout 3)"
note "uncached read failed with EIO after $ms ms"
echo queued >"$MNT/data/new" || fail "write while disconnected failed"

note "gateway back; an object changed meanwhile"
random_file a2 3
gw_back
awsx s3 cp --quiet a2 "s3://$B/data/a"
wait_connected
sleep 2 # past --refresh
cmp a2 "$MNT/data/a" || fail "old blocks served for a changed object"
$FMFS flush "$MNT" --wait --timeout 60 || fail "queued write not uploaded"
awsx s3 cp --quiet "s3://$B/data/new" got
[ "$(cat got)" = queued ] || fail "the write queued while disconnected was lost"
$FMFS umount "$MNT"

note "empty cache dir, gateway stopped: a clear error"
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null || fail "cannot stop the gateway"
expect_exit 5 "connect" \
	$FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/empty"
mountpoint -q "$MNT" && fail "mounted with an empty cache and no store"
gw_back

note "kill -9 while listings are written, then remount"
mkdir -p many
for d in $(seq 40); do
	mkdir -p "many/d$d"
	for f in $(seq 5); do echo "$d.$f" >"many/d$d/f$f"; done
done
awsx s3 cp --quiet --recursive many "s3://$B/many/"
try_mnt --refresh 300 || fail "mount failed"
ls -lR "$MNT/many" >/dev/null
wait_index_flush # written: the crash must not make them be served as fresh
(for _ in 1 2 3; do ls -lR "$MNT/many"; done >/dev/null 2>&1 &)
sleep 0.3
pkill -9 -f "fmfs mount s3://$B " || fail "no daemon to kill"
sleep 0.5
fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
# Changed behind the crashed mount's back: listings kept before a crash
# are stale, so the change shows at once despite --refresh 300.
echo changed-after-crash >x
awsx s3 cp --quiet x "s3://$B/many/d1/f1"
try_mnt --refresh 300 || fail "remount after kill -9 failed"
[ "$(cat "$MNT/many/d1/f1")" = changed-after-crash ] ||
	fail "a listing from before the crash was served as fresh"
listing "$MNT/many" >crash
(cd many && find . -printf '%y %p\n' | sort) >want
awk '{print $1, $3}' crash | sort | diff want - || fail "listing after kill -9 differs"
$FMFS umount "$MNT"

note "damaged listings in the index are LISTed again, not served"
python3 - "$CACHE/index.sqlite" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
n = 0
for (i, data) in db.execute("SELECT l.rowid, d.data FROM listings l"
                            " JOIN listing_data d ON d.id=l.rowid").fetchall():
    b = bytearray(data)
    b[len(b) // 2] ^= 0x55
    db.execute("UPDATE listing_data SET data=? WHERE id=?", (bytes(b), i))
    db.execute("UPDATE listings SET fetched_ms=? WHERE rowid=?",
               (int(time.time() * 1000), i))
    n += 1
db.commit()
print("damaged", n, "listings")
PY
try_mnt --refresh 300 || fail "mount on a damaged index failed"
listing "$MNT/many" >damaged
diff crash damaged || fail "damaged listings changed what is shown"
[ "$(stat_of listings)" -gt 0 ] || fail "damaged listings were served"
grep -q "is damaged" "$CACHE/fmfs.log" || fail "the log does not name the damage"
$FMFS umount "$MNT"

note "a bounded index: old listings evicted and LISTed again"
try_mnt --refresh 300 --namespace-size 128K || fail "mount failed"
big=$(printf 'n%.0s' $(seq 200))
mkdir -p "$MNT/wide"
for d in $(seq 30); do
	mkdir "$MNT/wide/w$d"
	for f in $(seq 40); do : >"$MNT/wide/w$d/$big$f"; done
done
$FMFS flush "$MNT" --wait --timeout 300 || fail "upload of the wide tree failed"
$FMFS umount "$MNT"
try_mnt --refresh 300 --namespace-size 128K || fail "mount failed"
for d in $(seq 30); do ls "$MNT/wide/w$d" | wc -l; done | sort -u >counts
[ "$(cat counts)" = 40 ] || fail "wide listings wrong: $(cat counts)"
wait_index_flush
kept=$(stat_of namespace_dirs)
[ "$kept" -lt 30 ] || fail "the index kept $kept listings under a 128K bound"
$FMFS umount "$MNT"
try_mnt --refresh 300 --namespace-size 128K || fail "mount failed"
for d in $(seq 30); do ls "$MNT/wide/w$d" | wc -l; done | sort -u >counts
[ "$(cat counts)" = 40 ] || fail "listings after eviction wrong: $(cat counts)"
[ "$(stat_of listings)" -gt 0 ] || fail "evicted listings were not LISTed again"
note "index kept $kept of 32 listings; $(stat_of listings) LISTs after remount"
$FMFS umount "$MNT"
echo "namespace ok"
