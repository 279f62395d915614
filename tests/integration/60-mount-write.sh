#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The write path, mounted for real against the gateway, each result read
# back with the aws CLI: create/write/append/overwrite/truncate, write a
# temporary file then rename it (uploaded once, under the final name),
# mkdir/rmdir, a directory rename with hundreds of files, unlink of an open
# file, symlink, chmod and xattrs in object metadata, relatime on reads,
# a file over the multipart threshold by several parts, concurrent
# writers, kill -9 of the
# daemon with committed files then a remount that uploads them, the
# gateway stopped during writes then restarted, a cache full of dirty data
# (ENOSPC, nothing lost), umount draining, and bad options.
# gateway: own   (it stops the gateway; tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup wr
no_keeper # it kills the daemon: what a mount without a keeper does
mkdir -p data got

gw_back() { "$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || true; }
trap 'gw_back; unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 2 --refresh 1)
flushw() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}
obj() { # KEY OUT: the object's bytes, by the aws CLI
	awsx s3 cp --quiet "s3://$B/$1" "$2" || fail "aws cannot read $1"
}
meta() { # KEY NAME: one user-metadata value
	awsx s3api head-object --bucket "$B" --key "$1" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['Metadata'].get('$2',''))"
}
absent() { # KEY
	! awsx s3api head-object --bucket "$B" --key "$1" >/dev/null 2>&1 ||
		fail "$1 should not be in the bucket"
}

mnt --part-size 5M
note "create, write, append, overwrite, truncate"
random_file data/a 3
cp data/a "$MNT/a"
printf 'hello' >"$MNT/b" && printf ' world' >>"$MNT/b"
printf 'hello world' >data/b
cp data/a data/c && printf 'XYZ' | dd of=data/c bs=1 seek=1000 conv=notrunc status=none
cp data/a "$MNT/c" && printf 'XYZ' | dd of="$MNT/c" bs=1 seek=1000 conv=notrunc status=none
cp data/a data/t && truncate -s 1000000 data/t
cp data/a "$MNT/t" && truncate -s 1000000 "$MNT/t"
truncate -s 5000 "$MNT/sparse" && truncate -s 5000 data/sparse
for f in a b c t sparse; do same_file data/$f "$MNT/$f"; done
flushw
for f in a b c t sparse; do obj $f got/$f; same_file data/$f got/$f; done
[ "$(stat_of dirty_files)" = 0 ] || fail "files still dirty after flush --wait"

note "write a temporary file then rename it: one upload, final name only"
up0=$(stat_of uploaded_files)
random_file data/ckpt 2
cp data/ckpt "$MNT/ckpt.tmp" && mv "$MNT/ckpt.tmp" "$MNT/ckpt.pt"
flushw
obj ckpt.pt got/ckpt.pt && same_file data/ckpt got/ckpt.pt
absent ckpt.tmp
[ "$(($(stat_of uploaded_files) - up0))" = 1 ] || fail "temp+rename uploaded more than once"

note "a file larger than the multipart threshold by several parts"
random_file data/big 37
cp data/big "$MNT/big"
flushw
obj big got/big && same_file data/big got/big
etag=$(awsx s3api head-object --bucket "$B" --key big | python3 -c "import json,sys; print(json.load(sys.stdin)['ETag'])")
case $etag in *-*) ;; *) fail "big was not a multipart upload (ETag $etag)" ;; esac

note "mkdir, rmdir, a directory rename with 300 files"
mkdir "$MNT/empty" "$MNT/tree"
for i in $(seq 1 300); do echo "file $i" >"$MNT/tree/f$i"; done
flushw
n=$(awsx s3 ls --recursive "s3://$B/tree/" | grep -c ' tree/f' || true)
[ "$n" = 300 ] || fail "tree has $n objects, not 300"
awsx s3api head-object --bucket "$B" --key empty/ >/dev/null || fail "no marker for empty/"
rmdir "$MNT/empty"
mv "$MNT/tree" "$MNT/moved"
[ "$(ls "$MNT/moved" | wc -l)" = 300 ] || fail "moved/ does not show 300 files"
[ ! -e "$MNT/tree" ] || fail "tree/ still visible after the rename"
[ "$(cat "$MNT/moved/f17")" = "file 17" ] || fail "moved/f17 wrong"
flushw
n=$(awsx s3 ls --recursive "s3://$B/moved/" | grep -c ' moved/f' || true)
[ "$n" = 300 ] || fail "moved/ has $n objects in the bucket, not 300"
[ -z "$(awsx s3 ls --recursive "s3://$B/tree/")" ] || fail "tree/ objects left in the bucket"
absent empty/
rmdir "$MNT/moved" 2>/dev/null && fail "rmdir of a non-empty directory succeeded"

note "unlink: an open file stays readable until closed"
exec 7<"$MNT/a"
rm "$MNT/a"
[ ! -e "$MNT/a" ] || fail "a still visible after rm"
cmp <(cat <&7) data/a || fail "open unlinked file not readable"
exec 7<&-
flushw
absent a

note "symlink, chmod, utimes and xattrs live in object metadata"
ln -s b "$MNT/link"
[ "$(readlink "$MNT/link")" = b ] || fail "readlink wrong"
[ "$(cat "$MNT/link")" = "hello world" ] || fail "reading through the symlink failed"
chmod 600 "$MNT/b"
touch -d '2020-01-02 03:04:05 UTC' "$MNT/b"
python3 -c "import os; os.setxattr('$MNT/b', 'user.color', b'blue')"
flushw
[ "$(meta link mode)" = "$((0120777))" ] || fail "symlink mode not in metadata ($(meta link mode))"
obj link got/link && [ "$(cat got/link)" = b ] || fail "symlink target not the object's body"
[ "$(meta b mode)" = "$((0100600))" ] || fail "chmod not in metadata ($(meta b mode))"
case $(meta b mtime) in 1577934245*) ;; *) fail "mtime not in metadata ($(meta b mtime))" ;; esac
[ "$(meta b color)" = blue ] || fail "xattr not in metadata"
[ "$(stat -c %a "$MNT/b")" = 600 ] || fail "mode through the mount wrong"
# user.mode is an xattr like any other (stored under another metadata
# name, docs/semantics.md): it never changes the mode.
python3 -c "import os; os.setxattr('$MNT/b', 'user.mode', b'1')" ||
	fail "setting the xattr user.mode failed"
[ "$(stat -c %a "$MNT/b")" = 600 ] || fail "the xattr user.mode changed the mode"
[ "$(python3 -c "import os; print(os.getxattr('$MNT/b', 'user.mode').decode())")" = 1 ] ||
	fail "user.mode does not read back"

note "relatime: a read moves an old atime once, kept across a remount"
echo at >"$MNT/at"
flushw
touch -a -d '2020-01-02 03:04:05 UTC' "$MNT/at"  # uploaded with its ctime
flushw
[ "$(stat -c %X "$MNT/at")" = 1577934245 ] || fail "touch -a: atime $(stat -c %X "$MNT/at")"
t0=$(date +%s)
cat "$MNT/at" >/dev/null
a1=$(stat -c %X "$MNT/at")
[ "$a1" -ge "$t0" ] || fail "a read left the atime at $a1 (before $t0)"
sleep 1.1
cat "$MNT/at" >/dev/null
[ "$(stat -c %X "$MNT/at")" = "$a1" ] || fail "relatime: a second read moved the atime"
case $(meta at atime) in 1577934245*) ;; *) fail "a read rewrote the object's atime ($(meta at atime))" ;; esac
$FMFS umount "$MNT" || fail "umount failed"
mnt --part-size 5M
[ "$(stat -c %X "$MNT/at")" = "$a1" ] || fail "the atime after a remount: $(stat -c %X "$MNT/at"), not $a1"
sleep 1.2  # past --refresh: the open HEADs the object, same version
cat "$MNT/at" >/dev/null
[ "$(stat -c %X "$MNT/at")" = "$a1" ] || fail "the atime after a revalidation: $(stat -c %X "$MNT/at"), not $a1"

note "concurrent writers to different files"
for i in 1 2 3 4; do random_file data/w$i 4; done
for i in 1 2 3 4; do cp data/w$i "$MNT/w$i" & done
wait
flushw
for i in 1 2 3 4; do obj w$i got/w$i; same_file data/w$i got/w$i; done

note "kill -9 with committed files: the remount uploads them"
$FMFS umount "$MNT" || fail "umount failed"
mnt --async-delay 3600
random_file data/k1 6
cp data/k1 "$MNT/k1" && echo small >"$MNT/k2"
pid=$(pgrep -f "fmfs mount s3://$B " | head -1)
kill -9 "$pid"
$FMFS umount "$MNT" >/dev/null 2>&1 || true
absent k1
mnt
$FMFS flush "$MNT" --wait --timeout 60 || fail "replayed queue did not drain"
obj k1 got/k1 && same_file data/k1 got/k1
obj k2 got/k2 && [ "$(cat got/k2)" = small ] || fail "k2 lost"

note "the gateway stopped during writes, then restarted"
ls "$MNT" >/dev/null # the directory's listing is known (kept stale)
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null || fail "cannot stop the gateway"
random_file data/off 2
cp data/off "$MNT/off" || fail "a write failed while the store was down"
same_file data/off "$MNT/off"
$FMFS flush "$MNT" --wait --timeout 30 2>err && fail "flush --wait succeeded with the store down"
grep -q "off" err || fail "flush did not say which file failed: $(cat err)"
gw_back
flushw
obj off got/off && same_file data/off got/off

note "umount drains first"
echo last >"$MNT/last"
$FMFS umount "$MNT" || fail "umount failed"
obj last got/last && [ "$(cat got/last)" = last ] || fail "umount did not upload 'last'"

note "a cache full of dirty data: ENOSPC, nothing lost, drains later"
mnt --cache-size 16M
ls "$MNT" >/dev/null
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null || fail "cannot stop the gateway"
random_file data/fill 24
dd if=data/fill of="$MNT/fill" bs=1M status=none 2>err && fail "writing 24 MiB into a 16 MiB cache succeeded"
grep -q "No space left" err || fail "not ENOSPC: $(cat err)"
random_file data/fits 4
rm -f "$MNT/fill"
cp data/fits "$MNT/fits" || fail "a write that fits failed"
gw_back
flushw
obj fits got/fits && same_file data/fits got/fits
$FMFS umount "$MNT" || fail "umount failed"

note "bad options"
expect_exit 2 "--upload-parallel '0'" $FMFS mount "s3://$B" "$MNT" --upload-parallel 0
expect_exit 2 "usage: fmfs flush" $FMFS flush
expect_exit 2 "not an fmfs mount" $FMFS flush "$TEST_DIR"
expect_exit 2 "--timeout 'x'" $FMFS flush "$MNT" --timeout x
expect_exit 2 "--timeout 'x'" $FMFS umount "$MNT" --timeout x
echo "write path ok"
