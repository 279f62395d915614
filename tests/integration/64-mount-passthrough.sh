#!/bin/bash
# SPDX-License-Identifier: MIT
#
# FUSE passthrough of files open for writing (fs/passthrough.c): where the
# kernel has it (Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH) and we are
# root, writes to a dirty file go from the kernel into the cache file
# without passing through the daemon.  The daemon must still see every
# change: sizes while the file is open (stat, ls -l, a second reader),
# mmap writes, an explicit mtime after the data (cp -p), overwrite after
# upload, and the bucket must end up with exactly the bytes (aws CLI).
# --no-passthrough turns it off.  Also: FUSE_HANDLE_KILLPRIV_V2 is
# negotiated (no GETXATTR of security.capability per write, counted over
# 2000 writes), and `-o suid` leaves it out.  On a kernel without it the same checks
# run on the usual path and the passthrough-only ones are reported as not
# applicable.
. "$TOP/tests/lib/common.sh"

mount_setup pt
no_keeper # it kills the daemon: what a mount without a keeper does
mkdir -p data got
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 1)
flushw() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}
obj() { # KEY OUT
	awsx s3 cp --quiet "s3://$B/$1" "$2" || fail "aws cannot read $1"
}
meta() { # KEY NAME
	awsx s3api head-object --bucket "$B" --key "$1" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['Metadata'].get('$2',''))"
}

# Should writes pass through?  As root, when the kernel offered it in
# its INIT (Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH); the daemon reports
# the offer.  Linux >= 6.9 that did not offer it is said, not failed: its
# configuration may leave passthrough out.
kv=$(uname -r)
major=${kv%%.*}; rest=${kv#*.}; minor=${rest%%[!0-9]*}
new_kernel=false
if [ "$major" -gt 6 ] || { [ "$major" = 6 ] && [ "$minor" -ge 9 ]; }; then
	new_kernel=true
fi

mnt
note "a file written while open: sizes seen by stat, ls -l and a reader"
random_file data/big 24
python3 - "$MNT/big" data/big <<'EOF' || fail "sizes while writing were wrong"
import os, sys
path, src = sys.argv[1], open(sys.argv[2], "rb").read()
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
step = 3 << 20
for off in range(0, len(src), step):
    it = os.scandir(os.path.dirname(path))  # the listing, before...
    os.pwrite(fd, src[off:off + step], off)
    end = min(off + step, len(src))
    list(it)                                 # ...READDIRPLUS after
    os.listdir(os.path.dirname(path))
    st = os.stat(path).st_size
    assert st == end, "stat %d, written %d" % (st, end)
    ls = [e for e in os.scandir(os.path.dirname(path)) if e.name == "big"]
    assert ls and ls[0].stat().st_size == end, "listing size wrong"
    with open(path, "rb") as r:   # a second descriptor, read-only
        r.seek(off)
        assert r.read(end - off) == src[off:end], "reader saw other bytes"
os.close(fd)
EOF
same_file data/big "$MNT/big"
expect_pt=false
if [ "$(id -u)" = 0 ] && [ "$(stat_of passthrough_offered)" = True ]; then
	expect_pt=true
elif $new_kernel; then
	note "Linux $kv did not offer passthrough (CONFIG_FUSE_PASSTHROUGH?)"
fi
if $expect_pt; then
	[ "$(stat_of passthrough)" = True ] ||
		fail "passthrough is off on Linux $kv as root (see $CACHE/fmfs.log)"
	n=$(stat_of passthrough_opens)
	[ "$n" -ge 2 ] || fail "passthrough_opens is $n after a writer and readers"
else
	note "Linux $kv (or not root): passthrough not expected, not checked"
fi
flushw
obj big got/big && same_file data/big got/big

note "mmap writes and cp -p's mtime reach the bucket"
random_file data/m 2
cp data/m "$MNT/m"
python3 - "$MNT/m" data/m <<'EOF' || fail "mmap write failed"
import mmap, os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDWR)
    mm = mmap.mmap(fd, 0)
    mm[4096:4100] = b"MMAP"
    mm.flush()
    mm.close()
    os.close(fd)
EOF
same_file data/m "$MNT/m"
cp -p data/big "$MNT/kept"
touch -d '2021-03-04 05:06:07 UTC' data/t && cp -p data/t "$MNT/t"
flushw
obj m got/m && same_file data/m got/m
case $(meta t mtime) in 1614834367*) ;; *)
	fail "cp -p's mtime not in metadata ($(meta t mtime))" ;; esac
obj kept got/kept && same_file data/big got/kept

note "overwrite after the upload, close: uploaded again"
printf 'second version' | dd of="$MNT/m" bs=1 seek=100 conv=notrunc status=none
printf 'second version' | dd of=data/m bs=1 seek=100 conv=notrunc status=none
flushw
obj m got/m2 && same_file data/m got/m2

note "kill -9 after close: the remount uploads what close acknowledged"
$FMFS umount "$MNT" || fail "umount failed"
mnt --async-delay 3600
random_file data/k 6
cp data/k "$MNT/k"
n=$(stat_of passthrough_opens)
$expect_pt && [ "$n" = 0 ] && fail "the copy did not go through passthrough"
kill -9 "$(pgrep -f "fmfs mount s3://$B " | head -1)"
$FMFS umount "$MNT" >/dev/null 2>&1 || true
! awsx s3api head-object --bucket "$B" --key k >/dev/null 2>&1 ||
	fail "k was uploaded before the kill: nothing tested"
mnt
flushw
obj k got/k && same_file data/k got/k
$FMFS umount "$MNT" || fail "umount failed"

note "--no-passthrough: the daemon sees every write"
mnt --no-passthrough
random_file data/n 4
cp data/n "$MNT/n"
[ "$(stat_of passthrough)" = False ] || fail "passthrough on with --no-passthrough"
[ "$(stat_of passthrough_opens)" = 0 ] || fail "passthrough used with --no-passthrough"
flushw
obj n got/n && same_file data/n got/n
$FMFS umount "$MNT" || fail "umount failed"

# Without FUSE_HANDLE_KILLPRIV_V2 (Linux >= 5.11) the kernel asks for
# security.capability before every write(): a GETXATTR round trip each.
# -o suid leaves the flag out (set-id bits would then matter), which
# shows the counter sees those requests.
small_writes() { # OPTIONS...: prints GETXATTR requests during 2000 writes
	local x0 x1
	mnt "$@"
	x0=$(stat_of getxattr_requests)
	dd if=/dev/zero of="$MNT/small" bs=4k count=2000 status=none ||
		fail "small writes failed"
	x1=$(stat_of getxattr_requests)
	[ "$(stat -c %s "$MNT/small")" = 8192000 ] || fail "small is not 8192000 bytes"
	echo "$(stat_of killpriv_v2) $((x1 - x0))"
	$FMFS umount "$MNT" >/dev/null || fail "umount failed"
}
if [ "$major" -gt 5 ] || { [ "$major" = 5 ] && [ "$minor" -ge 11 ]; }; then
	for opts in "" "--no-passthrough"; do
		note "2000 writes of 4 KiB ${opts:-(passthrough)}: no GETXATTR each"
		read -r kp n <<<"$(small_writes $opts)"
		[ "$kp" = True ] || fail "FUSE_HANDLE_KILLPRIV_V2 not negotiated on Linux $kv"
		[ "$n" -lt 20 ] || fail "$n GETXATTR requests for 2000 writes ($opts)"
	done
	note "-o suid: no KILLPRIV_V2, a GETXATTR per write"
	read -r kp n <<<"$(small_writes -o suid)"
	[ "$kp" = False ] || fail "FUSE_HANDLE_KILLPRIV_V2 asked for on a suid mount"
	[ "$n" -ge 2000 ] || fail "only $n GETXATTR requests for 2000 writes with -o suid"
else
	note "Linux $kv: no FUSE_HANDLE_KILLPRIV_V2, small writes not checked"
fi
echo "passthrough ok (expected: $expect_pt, Linux $kv)"
