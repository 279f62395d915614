#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The write-back under faults, through a real mount, each result read back
# with the aws CLI from the gateway itself:
#   - the fault proxy resets connections of part uploads (after the part
#     reached the gateway, and before its body did): the parts are
#     retried, the object lands byte-exact, and no multipart upload is
#     left open;
#   - kill -9 of the daemon while a multipart upload is in flight (the
#     proxy holds each part back): nothing half-written appears in the
#     bucket, and the remount on the same cache uploads the file again,
#     byte-exact;
#   - the cache disk itself fills up (a 40 MiB tmpfs as the cache dir,
#     the cap well above it): the writer gets ENOSPC, the log says so,
#     and the files closed before are not lost.
. "$TOP/tests/lib/common.sh"

mount_setup wf
no_keeper # it kills the daemon: what a mount without a keeper does
SMALL=$TEST_DIR/small
mkdir -p "$MNT" "$SMALL" data got
trap 'unmount_quietly "$MNT"; umount "$SMALL" 2>/dev/null || true; cleanup_common' EXIT
start_proxy

mnt_via() { # ENDPOINT CACHE_DIR OPTION...
	local ep=$1 c=$2
	shift 2
	$FMFS mount "s3://$B" "$MNT" --endpoint "$ep" --cache-dir "$c" "$@" ||
		fail "mount failed (see $c/fmfs.log)"
}
obj() { # KEY OUT
	awsx s3 cp --quiet "s3://$B/$1" "$2" || fail "aws cannot read $1"
}
absent() { # KEY
	! awsx s3api head-object --bucket "$B" --key "$1" >/dev/null 2>&1 ||
		fail "$1 is in the bucket already: nothing tested"
}
open_uploads() {
	awsx s3api list-multipart-uploads --bucket "$B" \
		--query 'length(Uploads || `[]`)'
}

note "resets in the middle of part uploads: retried, byte-exact, none left open"
mnt_via "$PROXY_URL" "$CACHE" --part-size 5M --async-delay 0
# reset: part 2 reaches the gateway, its answer is cut (RST) twice;
# refuse: part 4's connection is reset before its body goes through.
proxy_rules "action=reset,method=PUT,path=partNumber=2,count=2" \
	"action=refuse,method=PUT,path=partNumber=4,count=1"
random_file data/mp 23
cp data/mp "$MNT/mp"
$FMFS flush "$MNT" --wait --timeout 120 ||
	fail "flush --wait failed after resets (see $CACHE/fmfs.log)"
n=$(proxy_stat 'faults.get("reset",0) + faults.get("refuse",0)')
[ "$n" = 3 ] || fail "the proxy cut $n part uploads, not 3"
obj mp got/mp && same_file data/mp got/mp
[ "$(open_uploads)" = 0 ] || fail "multipart uploads left open after the resets"
proxy_rules
$FMFS umount "$MNT" || fail "umount failed"

note "kill -9 while a multipart upload is in flight: the remount uploads it"
proxy_rules "action=delay,method=PUT,path=partNumber,ms=4000,count=1000"
mnt_via "$PROXY_URL" "$CACHE" --part-size 5M --async-delay 0
random_file data/k 23
cp data/k "$MNT/k"
for _ in $(seq 100); do
	[ "$(proxy_stat 'faults.get("delay",0)')" -ge 1 ] && break
	sleep 0.1
done
[ "$(proxy_stat 'faults.get("delay",0)')" -ge 1 ] ||
	fail "no part upload reached the proxy"
[ "$(stat_of uploads_inflight)" -ge 1 ] || fail "no upload in flight at the kill"
kill -9 "$(pgrep -f "fmfs mount s3://$B " | head -1)"
$FMFS umount "$MNT" >/dev/null 2>&1 || true
proxy_rules
absent k
mnt_via "$RGW_ENDPOINT" "$CACHE" --async-delay 0
$FMFS flush "$MNT" --wait --timeout 120 ||
	fail "the replayed upload did not drain (see $CACHE/fmfs.log)"
obj k got/k && same_file data/k got/k
note "multipart uploads the killed daemon left open: $(open_uploads)"
$FMFS umount "$MNT" || fail "umount failed"

note "the cache disk fills up: ENOSPC to the writer, nothing closed is lost"
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=40m fmfs-test "$SMALL"; then
	note "cannot mount a tmpfs here (not root?): not checked"
else
	# The store is there but nothing is uploaded yet: all of it is dirty.
	# the cap as large as the disk (a larger one is refused): the disk
	# fills while the cap still has room
	mnt_via "$RGW_ENDPOINT" "$SMALL/c" --cache-size 40M --async-delay 3600
	random_file data/keep 12
	cp data/keep "$MNT/keep" || fail "a 12 MiB file did not fit a 40 MiB disk"
	random_file data/big 48
	dd if=data/big of="$MNT/big" bs=1M status=none 2>err &&
		fail "48 MiB fitted on a 40 MiB cache disk"
	grep -q "No space left" err || fail "the writer did not get ENOSPC: $(cat err)"
	same_file data/keep "$MNT/keep"
	rm -f "$MNT/big" || fail "cannot remove the file that did not fit"
	random_file data/after 4
	cp data/after "$MNT/after" || fail "a write after freeing space failed"
	absent keep
	$FMFS flush "$MNT" --wait --timeout 120 ||
		fail "flush --wait failed (see $SMALL/c/fmfs.log)"
	obj keep got/keep && same_file data/keep got/keep
	obj after got/after && same_file data/after got/after
	! awsx s3api head-object --bucket "$B" --key big >/dev/null 2>&1 ||
		fail "big, removed before its upload, reached the bucket"
	$FMFS umount "$MNT" || fail "umount failed"
	umount "$SMALL" || fail "cannot unmount the tmpfs"
fi
echo "write faults ok"
