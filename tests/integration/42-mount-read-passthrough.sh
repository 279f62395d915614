#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Reads through FUSE passthrough on a read-only mount (fs/passthrough.c,
# docs/semantics.md): a file wholly in the cache is opened through its
# cache file, every block checked against its CRC32C at open and pinned
# until the last close; the kernel then reads the cache file itself.
# Checked, byte-exact against the objects the aws CLI wrote: a warm
# remount passes through and sends no GET; a second open of the same file
# joins the first; a corrupted cache block is caught at open and
# refetched; a file not wholly cached, or larger than a quarter of the
# cache, takes the usual path, on a read-write mount in mode iw too
# (61-mount-rw-read-pt covers modes sw and lu with writers); and a
# passthrough file cannot be evicted while open.  Where the kernel has no
# passthrough (or we are not root) the same reads are checked on the
# usual path and the passthrough counts are not.
. "$TOP/tests/lib/common.sh"

mount_setup rpt
mkdir -p data
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--cache-size 64M)
read_all() { # checks every file of data/ through the mount
	local f
	for f in data/*; do
		cmp "$f" "$MNT/$f" || fail "$f read wrong through the mount"
	done
}

random_file data/a 5
random_file data/b 3
head -c 1000 /dev/urandom >data/small
random_file data/big 20   # over a quarter of the 64 MiB cache
awsx s3 cp --quiet --recursive data "s3://$B/data/"

note "cold read-only mount: nothing wholly cached at open, the usual path"
mnt --mode ro
read_all
expect_pt=false
if [ "$(id -u)" = 0 ] && [ "$(stat_of passthrough)" = True ]; then
	expect_pt=true
fi
[ "$(stat_of passthrough_opens)" = 0 ] ||
	fail "a file not yet cached was opened through passthrough"
$FMFS umount "$MNT" || fail "umount failed"

note "warm read-only remount: whole files pass through, no GET"
mnt --mode ro
read_all
if $expect_pt; then
	n=$(stat_of passthrough_opens)
	[ "$n" = 3 ] || fail "$n passthrough opens, not 3 (a, b, small; big is too large)"
else
	note "no passthrough here (Linux $(uname -r), uid $(id -u)): not counted"
fi
[ "$(stat_of store_get_requests)" = 0 ] || fail "the warm remount sent GETs"
[ "$(stat_of crc_failures)" = 0 ] || fail "CRC32C failures on a clean cache"

note "a second open joins the first; an open file is not evicted"
python3 - "$MNT/data/a" data/a <<'EOF' || fail "two opens of one file read wrong"
import sys
with open(sys.argv[1], "rb") as one, open(sys.argv[2], "rb") as ref:
    want = ref.read()
    with open(sys.argv[1], "rb") as two:
        assert two.read() == want, "second open"
    one.seek(4096)
    assert one.read() == want[4096:], "first open"
EOF
exec 7<"$MNT/data/b"
$FMFS evict "$MNT" "$MNT/data/b" >evict.out 2>&1 || true
cmp data/b /dev/fd/7 || fail "an open passthrough file changed under an evict"
exec 7<&-
$FMFS umount "$MNT" || fail "umount failed"

note "a corrupted cache block is caught at open and refetched"
victim=$(ls -S "$CACHE"/objects/*/* | sed -n 2p)  # a or b, not big
python3 - "$victim" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(70000); b = f.read(1); f.seek(70000); f.write(bytes([b[0] ^ 0xff]))
EOF
mnt --mode ro
read_all
[ "$(stat_of crc_failures)" -ge 1 ] || fail "the corrupted block was not detected"
[ "$(stat_of store_get_requests)" -ge 1 ] || fail "the corrupted block was not refetched"
$FMFS umount "$MNT" || fail "umount failed"

note "a read-write mount (sw) passes through too, mode iw does not"
mnt
read_all
if $expect_pt; then
	n=$(stat_of passthrough_opens)
	[ "$n" = 3 ] || fail "$n passthrough opens on a sw mount, not 3"
fi
$FMFS umount "$MNT" || fail "umount failed"
mnt --mode iw
read_all
[ "$(stat_of passthrough_opens)" = 0 ] ||
	fail "a clean file passed through on a mode iw mount"
$FMFS umount "$MNT" || fail "umount failed"
echo "read passthrough ok (expected: $expect_pt)"
