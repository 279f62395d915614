#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Files other tools wrote (docs/semantics.md "Objects other tools
# wrote"): objects put by the aws CLI with the metadata names of s3fs
# (mtime, atime, ctime in seconds), rclone (an octal mode, RFC 3339
# times), s3cmd (s3cmd-attrs) and none show their stored times, mode and
# owner in every view (ls -l's READDIRPLUS, stat's lookup and getattr)
# once the HEADs behind the listing have landed, after a remount with no
# HEAD, and from a new cache dir.  chmod, chown and setxattr move ctime
# only; an append moves mtime and ctime; a rename keeps mtime and atime
# (one without any stored mtime too, checked in the bucket, its other
# metadata and Content-Type kept, through a chmod too); touch -d
# sets them.  A zero-byte object with Content-Type
# application/x-directory is a directory: it lists, takes a file, a chmod
# makes its marker dir/, rmdir removes both.  --meta-heads 0 makes no
# HEAD behind a listing; bad values are refused.
. "$TOP/tests/lib/common.sh"

mount_setup fattrs
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 0)
put() { # KEY [aws s3api put-object options...]
	local k=$1
	shift
	awsx s3api put-object --bucket "$B" --key "$k" "$@" >/dev/null ||
		fail "aws put of $k"
}
# times PATH: "MODE UID GID ATIME MTIME" as stat shows them
times() {
	stat -c '%a %u %g %X %Y' "$1"
}
ctime() {
	stat -c %Z "$1"
}
# heads_done: the HEADs behind listings have landed (at most 20 s), and
# the kernel's provisional attributes (1 s) have expired.
heads_done() {
	for _ in $(seq 200); do
		[ "$(stat_of heads_waiting)" = 0 ] && { sleep 1.2; return 0; }
		sleep 0.1
	done
	fail "HEADs behind the listing still waiting after 20 s"
}
last_modified() { # KEY: the object's Last-Modified, seconds
	date -d "$(awsx s3api head-object --bucket "$B" --key "$1" \
		--query LastModified --output text)" +%s
}
meta_of() { # KEY NAME: the object's x-amz-meta-NAME
	awsx s3api head-object --bucket "$B" --key "$1" \
		--query "Metadata.\"$2\"" --output text
}
flush() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}

note "objects with s3fs's, rclone's, s3cmd's and no metadata"
echo data >body
put s3fs --body body --metadata atime=1000000000,ctime=1000000000,mtime=1000000000
put rclone --body body --metadata "mode=100640,uid=1234,gid=5678,mtime=2023-05-11T17:54:11.5+01:00,atime=2001-09-09T01:46:40Z"
put s3cmd --body body --metadata "s3cmd-attrs=atime:1000000100/ctime:1000000100/gid:7/gname:g/md5:x/mode:33261/mtime:1000000200/uid:5/uname:u"
put plain --body body
put plain2 --body body
put typed --body body --content-type image/png --metadata "owner-note=kept"
put olddir --content-type application/x-directory
lm_plain=$(last_modified plain)
lm_plain2=$(last_modified plain2)
lm_typed=$(last_modified typed)
want_s3fs="600 $(id -u) $(id -g) 1000000000 1000000000"
want_rclone="640 1234 5678 1000000000 1683824051"
want_s3cmd="755 5 7 1000000100 1000000200"
want_plain="600 $(id -u) $(id -g) $lm_plain $lm_plain"

mnt
ls -l "$MNT" >/dev/null
heads_done
check_all() { # WHEN: every view shows the stored attributes
	local f want
	for f in s3fs rclone s3cmd plain; do
		want=want_$f
		[ "$(times "$MNT/$f")" = "${!want}" ] ||
			fail "$1: $f shows '$(times "$MNT/$f")', want '${!want}'"
	done
	# READDIRPLUS: what ls -l shows is what stat shows
	ls -ln --time-style=+%s "$MNT" >ls.out
	for f in s3fs rclone s3cmd plain; do
		want=want_$f
		set -- ${!want}
		grep -Eq " $2 +$3 +5 +$5 $f\$" ls.out ||
			fail "ls -l: $(grep " $f\$" ls.out), want uid $2 gid $3 mtime $5"
	done
}
check_all "after the listing"
[ "$(stat -c %F "$MNT/olddir")" = directory ] ||
	fail "olddir (application/x-directory) is a $(stat -c %F "$MNT/olddir")"
[ "$(stat_of head_requests_behind_listings)" -ge 4 ] ||
	fail "$(stat_of head_requests_behind_listings) HEADs behind the listing, want 4 or more"

note "remount: the same, with no HEAD"
$FMFS umount "$MNT" || fail "umount failed"
mnt
ls -l "$MNT" >/dev/null
check_all "after a remount"
[ "$(stat_of head_requests)" = 0 ] ||
	fail "a remount made $(stat_of head_requests) HEADs"

note "chmod, chown, setxattr move ctime only; append moves mtime"
t0=$(date +%s)
sleep 1
chmod 644 "$MNT/s3fs"
chmod 600 "$MNT/typed" # its Content-Type kept (checked after the rename)
chown 42 "$MNT/rclone"
/usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.k", b"v")' \
	"$MNT/s3cmd" || fail "setxattr failed"
echo more >>"$MNT/plain"
want_s3fs="644 $(id -u) $(id -g) 1000000000 1000000000"
want_rclone="640 42 5678 1000000000 1683824051"
for f in s3fs rclone s3cmd; do
	want=want_$f
	[ "$(times "$MNT/$f")" = "${!want}" ] ||
		fail "after the change: $f shows '$(times "$MNT/$f")', want '${!want}'"
	[ "$(ctime "$MNT/$f")" -ge "$t0" ] || fail "$f: ctime $(ctime "$MNT/$f") did not move"
done
set -- $(times "$MNT/plain")
[ "$5" -ge "$t0" ] || fail "an append left plain's mtime at $5 (t0 $t0, now $(date +%s.%N), $(stat -c '%x %y %z' "$MNT/plain"))"
[ "$(ctime "$MNT/plain")" -ge "$t0" ] || fail "an append left plain's ctime"

note "a rename keeps mtime and atime; touch -d sets them"
mv "$MNT/s3fs" "$MNT/s3fs.moved"
[ "$(times "$MNT/s3fs.moved")" = "$want_s3fs" ] ||
	fail "s3fs.moved shows '$(times "$MNT/s3fs.moved")', want '$want_s3fs'"
mv "$MNT/plain2" "$MNT/plain2.moved"
set -- $(times "$MNT/plain2.moved")
[ "$4 $5" = "$lm_plain2 $lm_plain2" ] ||
	fail "plain2.moved (no stored mtime) shows atime $4 mtime $5, want $lm_plain2"
mv "$MNT/typed" "$MNT/typed.moved"
touch -d @1234567890 "$MNT/rclone"
set -- $(times "$MNT/rclone")
[ "$4 $5" = "1234567890 1234567890" ] || fail "touch -d: atime $4 mtime $5"
flush
m=$(meta_of plain2.moved mtime)
[ "${m%%.*}" = "$lm_plain2" ] ||
	fail "plain2.moved's stored mtime is $m, want $lm_plain2"
m=$(meta_of s3fs.moved mtime)
[ "${m%%.*}" = 1000000000 ] || fail "s3fs.moved's stored mtime is $m"
# the metadata rewrite of the chmod, then the copy that adds mtime, keep
# the rest: metadata and Content-Type
m=$(meta_of typed.moved mtime)
[ "${m%%.*}" = "$lm_typed" ] || fail "typed.moved's stored mtime is $m, want $lm_typed"
[ "$(meta_of typed.moved owner-note)" = kept ] ||
	fail "typed.moved lost its metadata: $(meta_of typed.moved owner-note)"
ct=$(awsx s3api head-object --bucket "$B" --key typed.moved \
	--query ContentType --output text)
[ "$ct" = image/png ] || fail "typed.moved's Content-Type is $ct"

note "an application/x-directory object is a directory"
echo x >"$MNT/olddir/x" || fail "cannot make olddir/x"
[ "$(ls "$MNT/olddir")" = x ] || fail "olddir lists '$(ls "$MNT/olddir")'"
chmod 700 "$MNT/olddir"
[ "$(stat -c %a "$MNT/olddir")" = 700 ] || fail "olddir: mode $(stat -c %a "$MNT/olddir")"
flush
[ "$(meta_of olddir/ mode)" = $((040700)) ] ||
	fail "the marker olddir/ stores mode $(meta_of olddir/ mode)"
rm "$MNT/olddir/x"
rmdir "$MNT/olddir" || fail "rmdir olddir failed"
flush
for k in olddir olddir/ olddir/x; do
	awsx s3api head-object --bucket "$B" --key "$k" >/dev/null 2>&1 &&
		fail "$k is still in the bucket after rmdir"
done
snap() {
	for f in s3fs.moved rclone s3cmd plain plain2.moved; do
		echo "$f $(times "$MNT/$f")"
	done
}
snap >before

note "a remount, and a new cache dir: the same attributes"
$FMFS umount "$MNT" || fail "umount failed"
mnt
snap >after
diff before after || fail "the attributes changed across a remount"
$FMFS umount "$MNT" || fail "umount failed"
rm -rf "$CACHE"
mnt
ls -l "$MNT" >/dev/null
heads_done
snap >fresh
# uid/gid from the bucket: a chown is stored, so the new cache shows it
diff before fresh || fail "a new cache dir shows other attributes"
$FMFS umount "$MNT" || fail "umount failed"

note "--meta-heads 0: no HEAD behind a listing"
rm -rf "$CACHE"
mnt --meta-heads 0
ls -l "$MNT" >/dev/null
sleep 1.5
[ "$(stat_of head_requests_behind_listings)" = 0 ] ||
	fail "--meta-heads 0 made $(stat_of head_requests_behind_listings) HEADs"
$FMFS umount "$MNT" || fail "umount failed"
for bad in 65 x -1; do
	expect_exit 2 "--meta-heads.*$bad" try_mnt --meta-heads "$bad"
done
echo "ok"
