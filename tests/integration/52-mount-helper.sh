#!/bin/bash
# SPDX-License-Identifier: MIT
#
# mount.fmfs, the helper mount(8) runs (docs/mount-helper.md), through
# mount(8) itself: `mount -t fmfs` with -o spellings of fmfs mount's
# options, an fstab-style line (mount -T FILE), mount.fuse3's form (type
# fuse, "PROGRAM#SOURCE"), `ro`, kernel options reaching the kernel,
# mount(8)'s and systemd's own options accepted, credentials from a file
# named by credentials= (no key in the environment or on the line), and
# failures with fmfs's exit codes and messages: a missing bucket, an
# unknown option, contradicting options.  Results checked with the aws
# CLI.  /sbin/mount.fmfs is made a link to the binary under test for the
# test's length (skipped if a mount.fmfs is installed already).
. "$TOP/tests/lib/common.sh"

mount_setup helper
HELPER=/sbin/mount.fmfs
MADE=
trap 'unmount_quietly "$MNT"; [ -z "$MADE" ] || rm -f "$HELPER"; cleanup_common' EXIT
if [ -e "$HELPER" ] || [ -L "$HELPER" ]; then
	echo "SKIP: $HELPER exists already (an installed fmfs): not replaced"
	exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: mount -t needs root"; exit 77; }
# the binary itself (FMFS may be tests/lib/fmfs-no-keeper)
FMFS_ABS=$(readlink -f "$(command -v "${FMFS_REAL:-$FMFS}")")
ln -s "$FMFS_ABS" "$HELPER"
MADE=1

mkdir -p data got
head -c 3000000 /dev/urandom >data/a
awsx s3 cp --quiet data/a "s3://$B/pfx/a" || fail "aws put"
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >creds
chmod 600 creds
O="endpoint=$RGW_ENDPOINT,path_style,cache_dir=$CACHE,credentials=$TEST_DIR/creds"
# mount(8) as a user would run it: no keys in the environment.
mnt8() {
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
		mount "$@"
}
mountinfo() {
	awk -v m="$MNT" '$5 == m' /proc/self/mountinfo
}

note "mount -t fmfs with -o options; the kernel gets nosuid,nodev"
mnt8 -t fmfs "s3://$B/pfx" "$MNT" -o "$O,cache_size=64M,refresh=1,_netdev,nofail,x-systemd.automount,x-systemd.requires=network-online.target,comment=dataset,nosuid,nodev,noatime" ||
	fail "mount -t fmfs failed"
mountinfo | grep -q " fuse.fmfs " || fail "not an fmfs mount: $(mountinfo)"
mountinfo | grep -q "nosuid,nodev,noatime" ||
	fail "nosuid,nodev,noatime did not reach the kernel: $(mountinfo)"
same_file data/a "$MNT/a"
[ "$(stat_of cache_cap_bytes)" = 67108864 ] ||
	fail "cache_size=64M was not passed: $($FMFS status "$MNT" | grep -i cap)"
head -c 100000 /dev/urandom >data/w
cp data/w "$MNT/w" || fail "write through the helper's mount"
$FMFS umount "$MNT" || fail "umount"
awsx s3 cp --quiet "s3://$B/pfx/w" got/w || fail "aws get w"
same_file data/w got/w

note "an fstab-style line (mount -T FILE MOUNTPOINT), with ro"
printf 's3://%s/pfx %s fmfs %s,ro,_netdev,nofail,noauto,user_xattr_no 0 0\n' \
	"$B" "$MNT" "$O" >fstab.bad
rc=0
mnt8 -T "$TEST_DIR/fstab.bad" "$MNT" 2>err || rc=$?
[ "$rc" = 2 ] || fail "an unknown option: mount exited $rc, expected 2"
grep -q "mount.fmfs: option 'user_xattr_no': no such option" err ||
	fail "the unknown option is not named: $(cat err)"
mountinfo | grep -q . && fail "mounted despite an unknown option"
sed 's/,user_xattr_no//' fstab.bad >fstab
mnt8 -T "$TEST_DIR/fstab" "$MNT" || fail "mount from the fstab line failed"
[ "$($FMFS status "$MNT" | sed -n 's/^mode: //p')" = ro ] ||
	fail "ro did not make a mode ro mount"
same_file data/w "$MNT/w"
if (echo x >"$MNT/new") 2>/dev/null; then
	fail "a write succeeded on an ro mount"
fi
$FMFS umount "$MNT" || fail "umount"

note "mount.fuse3's form: type fuse, PROGRAM#SOURCE"
printf '%s#s3://%s/pfx %s fuse %s,noauto 0 0\n' "$FMFS_ABS" "$B" "$MNT" "$O" >fstab.fuse
mnt8 -T "$TEST_DIR/fstab.fuse" "$MNT" || fail "mount through mount.fuse3 failed"
mountinfo | grep -q " fuse.fmfs " || fail "not an fmfs mount: $(mountinfo)"
same_file data/a "$MNT/a"
$FMFS umount "$MNT" || fail "umount"

note "failures: fmfs's exit codes and messages"
rc=0
mnt8 -t fmfs "s3://nosuch-$B" "$MNT" -o "$O" 2>err || rc=$?
want=0
$FMFS mount "s3://nosuch-$B" "$MNT" --endpoint "$RGW_ENDPOINT" --path-style \
	--cache-dir "$CACHE" 2>/dev/null || want=$?
[ "$want" != 0 ] && [ "$rc" = "$want" ] ||
	fail "missing bucket: mount exited $rc, fmfs mount $want"
grep -q "NoSuchBucket" err || fail "the missing bucket is not named: $(cat err)"
rc=0
mnt8 -t fmfs "s3://$B" "$MNT" -o "$O,ro,mode=sw" 2>err || rc=$?
[ "$rc" = 2 ] && grep -q "'ro' and 'mode=sw' contradict" err ||
	fail "ro,mode=sw: exit $rc: $(cat err)"
rc=0
mnt8 -t fmfs "s3://$B" "$MNT" -o "$O,cache_size" 2>err || rc=$?
[ "$rc" = 2 ] && grep -q "'cache_size': needs a value" err ||
	fail "cache_size without a value: exit $rc: $(cat err)"
rc=0
mnt8 -t fmfs "s3://$B" "$MNT" -o "$O,foreground" 2>err || rc=$?
[ "$rc" = 2 ] && grep -q "not for a mount helper" err ||
	fail "foreground: exit $rc: $(cat err)"
mnt8 -t fmfs -f -v "s3://$B" "$MNT" -o "$O" 2>err || fail "mount -f failed"
mountinfo | grep -q . && fail "mount -f (fake) mounted"
rc=0
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$TEST_DIR" \
	mount -t fmfs "s3://$B" "$MNT" -o "endpoint=$RGW_ENDPOINT,path_style,cache_dir=$CACHE,credentials=$TEST_DIR/nosuch" 2>err || rc=$?
[ "$rc" != 0 ] || fail "a missing credentials file mounted"
grep -q "nosuch\|credentials" err || fail "credentials problem not named: $(cat err)"
echo "mount helper ok"
