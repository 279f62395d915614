#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The read path, mounted for real against the gateway: byte-exact reads of
# objects written by the aws CLI (small to larger than the cache), names
# that need care, `ls -l` matching `aws s3 ls`, xattrs from user metadata,
# a warm remount that makes no GET, eviction under a tiny cache with
# concurrent readers, a corrupted cache block detected and refetched, an
# object changed behind our back seen after the refresh interval,
# prefetch/evict/status, and bad options.
. "$TOP/tests/lib/common.sh"

mount_setup mnt
mkdir -p data

trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

note "objects written by the aws CLI"
for s in 0 1 4095 1048575 1048576 1048577 5000000; do
	head -c $s /dev/urandom >data/f$s
done
random_file data/big 40
awsx s3 cp --quiet --recursive data "s3://$B/data/"
mkdir -p names
names=("sp ace/a b.txt" "plus+sign" "per%cent" "uni/ü€日本.txt"
       "deep/a/b/c/d/e/f/g/h.txt" "k" "k/child")
for n in "${names[@]}"; do
	printf '%s' "$n" >names/tmp
	awsx s3api put-object --bucket "$B" --key "names/$n" --body names/tmp \
		--metadata "origin=aws" >/dev/null
done
awsx s3api put-object --bucket "$B" --key "marker/" >/dev/null
awsx s3api put-object --bucket "$B" --key "marker/inside" --body names/tmp >/dev/null

mnt --cache-size 64M --refresh 2 --mode ro
note "byte-exact reads, small to larger than a block"
for f in data/*; do
	cmp "$f" "$MNT/$f" || fail "$f differs through the mount"
done
note "names that need care; a key that is also a prefix shows as the directory"
for n in "${names[@]}"; do
	[ "$n" = k ] && continue
	[ "$(cat "$MNT/names/$n")" = "$n" ] || fail "content of '$n' wrong"
done
[ -d "$MNT/names/k" ] || fail "names/k should be a directory"
[ "$(cat "$MNT/names/k/child")" = "k/child" ] || fail "names/k/child wrong"
[ -d "$MNT/marker" ] && [ -f "$MNT/marker/inside" ] || fail "directory marker handling"
[ "$(ls -A "$MNT/marker")" = inside ] || fail "marker object shown as an entry"

note "ls -l matches aws s3 ls (names and sizes)"
(cd "$MNT/data" && stat -c '%n %s' *) | sort >mnt.ls
awsx s3 ls "s3://$B/data/" | awk '{print $4, $3}' | sort >aws.ls
diff aws.ls mnt.ls || fail "listing differs from aws s3 ls"
python3 -c "import os,sys; v=os.getxattr(sys.argv[1],'user.origin'); assert v==b'aws', v" \
	"$MNT/names/plus+sign" || fail "user metadata not visible as xattr"
[ -n "$(python3 -c "import os; print(os.getxattr('$MNT','user.fmfs.control').decode())")" ] ||
	fail "no control xattr on the root"
{ echo x >"$MNT/data/new"; } 2>/dev/null && fail "a write succeeded on a --mode ro mount"

note "status reports the work"
[ "$(stat_of connected)" = True ] || fail "status says disconnected"
[ "$(stat_of cache_used_bytes)" -gt 40000000 ] || fail "cache_used_bytes too small"

note "warm remount: every byte again, zero GETs"
$FMFS umount "$MNT" || fail "umount failed"
mountpoint -q "$MNT" && fail "still mounted after umount"
mnt --cache-size 64M
for f in data/*; do cmp "$f" "$MNT/$f" || fail "$f differs after remount"; done
[ "$(stat_of store_get_requests)" = 0 ] || fail "warm remount made $(stat_of store_get_requests) GETs"
[ "$(stat_of misses)" = 0 ] || fail "warm remount had misses"

note "a corrupted cache block is detected and refetched"
$FMFS umount "$MNT"
victim=$(ls -S "$CACHE"/objects/*/* | head -1)
python3 - "$victim" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 0xff]))
EOF
mnt --cache-size 64M
for f in data/*; do cmp "$f" "$MNT/$f" || fail "$f wrong after corruption"; done
[ "$(stat_of crc_failures)" -ge 1 ] || fail "corruption not detected"
[ "$(stat_of store_get_requests)" -ge 1 ] || fail "corrupt block not refetched"

note "an object changed behind our back is seen after the refresh interval"
$FMFS umount "$MNT"
mnt --cache-size 64M --refresh 2
cmp data/f4095 "$MNT/data/f4095"
head -c 7000 /dev/urandom >changed
awsx s3 cp --quiet changed "s3://$B/data/f4095"
sleep 3
cmp changed "$MNT/data/f4095" || fail "changed object still served stale after the refresh interval"
cp changed data/f4095 # the reference copy follows the bucket

note "eviction under a tiny cache with concurrent readers"
$FMFS umount "$MNT"
mkdir -p ev
for i in 1 2 3 4 5 6; do random_file ev/e$i 8; done
awsx s3 cp --quiet --recursive ev "s3://$B/ev/"
rm -rf "$CACHE"
mnt --cache-size 16M
pids=()
for i in 1 2 3 4 5 6; do
	( cmp "ev/e$i" "$MNT/ev/e$i" && cmp "ev/e$i" "$MNT/ev/e$i" ) &
	pids+=($!)
done
max=0
for _ in $(seq 20); do
	u=$(stat_of cache_used_bytes); [ "$u" -gt "$max" ] && max=$u
	sleep 0.1
done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent reader got wrong bytes"; done
[ "$max" -le $((16 << 20)) ] || fail "cache used $max bytes, over the 16 MiB cap"
[ "$(stat_of cache_used_bytes)" -le $((16 << 20)) ] || fail "cache over its cap"
[ "$(stat_of evictions)" -gt 0 ] || fail "no evictions under a tiny cache"
cmp data/big "$MNT/data/big" || fail "an object larger than the cache read wrong"

note "prefetch --wait warms a tree; evict drops it"
$FMFS umount "$MNT"
rm -rf "$CACHE"
mnt --cache-size 64M
$FMFS prefetch "$MNT" "$MNT/data" --wait >pf.out || fail "prefetch failed: $(cat pf.out)"
grep -q "files" pf.out || fail "prefetch printed no report"
g0=$(stat_of store_get_requests)
for f in data/f*; do cmp "$f" "$MNT/$f" || fail "$f wrong after prefetch"; done
[ "$(stat_of store_get_requests)" = "$g0" ] || fail "reads after prefetch still fetched"
printf '%s\n' "$MNT/names/plus+sign" "$MNT/names/uni" >list.txt
$FMFS prefetch "$MNT" --list list.txt --wait >pl.out || fail "prefetch --list failed"
grep -q "prefetch: [2-9] files" pl.out || fail "prefetch --list report: $(cat pl.out)"
expect_exit 2 "--list .*No such file" $FMFS prefetch "$MNT" --list "$TEST_DIR/no-list"
expect_exit 2 "not a path inside" $FMFS prefetch "$MNT" "$TEST_DIR/data"
expect_exit 2 "unknown option" $FMFS prefetch "$MNT" --bogus
$FMFS evict "$MNT" "$MNT/data/f5000000" >/dev/null || fail "evict failed"
drop_page_cache "$MNT/data/f5000000" # else the kernel's pages answer
cmp data/f5000000 "$MNT/data/f5000000" || fail "evicted file wrong"
[ "$(stat_of store_get_requests)" -gt "$g0" ] || fail "evicted file served without a fetch"

note "bad options, URLs and mountpoints"
$FMFS umount "$MNT"
expect_exit 2 "unknown scheme" $FMFS mount http://x "$MNT"
expect_exit 2 "cache-size" $FMFS mount "s3://$B" "$MNT" --cache-size 1k
expect_exit 2 "--part-size '1M'" $FMFS mount "s3://$B" "$MNT" --part-size 1M
expect_exit 2 "--async-delay 'x'" $FMFS mount "s3://$B" "$MNT" --async-delay x
expect_exit 2 "--mode 'xx'" $FMFS mount "s3://$B" "$MNT" --mode xx
expect_exit 2 "mountpoint .*No such file" $FMFS mount "s3://$B" "$TEST_DIR/nope"
expect_exit 4 "NoSuchBucket" $FMFS mount "s3://no-such-bucket-$$" "$MNT" --cache-dir "$TEST_DIR/c2"
expect_exit 3 "SignatureDoesNotMatch" env AWS_SECRET_ACCESS_KEY=wrong \
	$FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/c3"
mountpoint -q "$MNT" && fail "a failed mount left a mount behind"
mnt
expect_exit 2 "busy" $FMFS mount "s3://$B" "$MNT" --cache-dir "$TEST_DIR/c4"
expect_exit 2 "in use by another fmfs mount" $FMFS mount "s3://$B" "$TEST_DIR/data" --cache-dir "$CACHE"
expect_exit 2 "not an fmfs mount" $FMFS status "$TEST_DIR/data"
$FMFS umount "$MNT"
echo "read path ok"
