#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Permissions, tried as another local user (nobody) would on a root mount
# (which adds allow_other): files created 0600, chowned to another user,
# and a 0700 directory through the mount keep their mode, uid and gid
# after `fmfs umount` and a remount (with --refresh 1 too) from the first
# attempt, with no HEAD (they are kept in the cache index); objects put by
# another client without metadata show the documented default (0600, the
# mounting user) and those with x-amz-meta-mode/uid/gid show theirs; a
# cache dir that existed with 0755/0644 files is tightened to 0700/0600;
# --no-allow-other shuts other users out; the default-attribute options;
# a directory's mode, owner and mtime, stored with its marker (and on the
# file:// store's directory), shown by a mount on a new cache dir.
. "$TOP/tests/lib/common.sh"

mount_setup perm
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a mount other users reach)"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
# TEST_DIR sits under the runner's 0700 directory, where nobody cannot
# even reach a mountpoint: this one is reachable, so a refusal below can
# only come from the mount.
PUB=$(mktemp -d /tmp/fmfs-perm.XXXXXX)
chmod 755 "$PUB"
MNT=$PUB/mnt
mkdir "$MNT" data
trap 'unmount_quietly "$MNT"; rm -rf "$PUB"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 0)
as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}
# denied PATH: nobody's first attempt to read PATH fails with EACCES.
denied() {
	if as_nobody cat "$1" >/dev/null 2>"$TEST_DIR/err"; then
		fail "nobody could read $1 ($(stat -c '%a %u:%g' "$1"))"
	fi
	grep -q "Permission denied" "$TEST_DIR/err" ||
		fail "reading $1 as nobody: not EACCES: $(cat "$TEST_DIR/err")"
}
allowed() {
	as_nobody cat "$1" >/dev/null || fail "nobody cannot read $1"
}
attrs() { # PATH: "MODE UID GID"
	stat -c '%a %u %g' "$1"
}
perms_of() { # PATH: octal mode of a cache file
	stat -c '%a' "$1"
}

note "files 0600, chowned and a 0700 directory, through a root mount"
mnt
grep " $MNT " /proc/mounts | grep -q allow_other ||
	fail "a root mount lacks allow_other by default"
echo public >"$MNT/public"
chmod 644 "$MNT/public"
(umask 077 && echo secret >"$MNT/secret")
echo alice >"$MNT/alice"
# owner and group apart: a mix-up of the two shows
chown 1234:5678 "$MNT/alice"
chmod 600 "$MNT/alice"
mkdir -m 700 "$MNT/adir"
echo inner >"$MNT/adir/inner"
chmod 644 "$MNT/adir/inner"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
# the clean object's attributes change by a server-side copy
echo later >"$MNT/later"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
chmod 600 "$MNT/later"
echo moved >"$MNT/moved0"
chmod 600 "$MNT/moved0"
ln -s public "$MNT/lnk"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
mv "$MNT/moved0" "$MNT/moved" # a server-side copy keeps the metadata
allowed "$MNT/public"
denied "$MNT/secret"
denied "$MNT/alice"
denied "$MNT/adir/inner"
denied "$MNT/later"
$FMFS umount "$MNT" || fail "umount failed"

note "objects put by another client, with and without metadata"
echo foreign >data/foreign
awsx s3 cp --quiet data/foreign "s3://$B/foreign" || fail "aws put"
awsx s3api put-object --bucket "$B" --key fsecret --body data/foreign \
	--metadata mode=$((0100600)),uid=0,gid=0 >/dev/null || fail "aws put"
awsx s3api put-object --bucket "$B" --key fopen --body data/foreign \
	--metadata mode=$((0100644)),uid=0,gid=0 >/dev/null || fail "aws put"

note "a cache dir whose files are 0755/0644"
chmod 755 "$CACHE" "$CACHE/objects" "$CACHE/dirty" "$CACHE/objects/00"
[ -d "$CACHE/lost+found" ] && chmod 755 "$CACHE/lost+found"
for f in "$CACHE"/index.sqlite* "$CACHE"/writeback.sqlite* "$CACHE"/*lock \
	"$CACHE/fmfs.log"; do
	[ -e "$f" ] && chmod 644 "$f"
done

note "after a remount with --refresh 1: refused from the first attempt"
mnt --refresh 1
denied "$MNT/secret"
denied "$MNT/alice"
denied "$MNT/adir/inner"
denied "$MNT/later"
denied "$MNT/moved"
allowed "$MNT/public"
[ "$(stat_of head_requests)" = 0 ] || fail "attributes needed a HEAD ($(stat_of head_requests))"
[ "$(attrs "$MNT/secret")" = "600 0 0" ] || fail "secret shows $(attrs "$MNT/secret")"
[ "$(attrs "$MNT/alice")" = "600 1234 5678" ] || fail "alice shows $(attrs "$MNT/alice")"
[ "$(attrs "$MNT/adir")" = "700 0 0" ] || fail "adir shows $(attrs "$MNT/adir")"
[ "$(attrs "$MNT/later")" = "600 0 0" ] || fail "later shows $(attrs "$MNT/later")"
[ "$(attrs "$MNT/public")" = "644 0 0" ] || fail "public shows $(attrs "$MNT/public")"
[ "$(attrs "$MNT/moved")" = "600 0 0" ] || fail "moved shows $(attrs "$MNT/moved")"
[ -L "$MNT/lnk" ] || fail "the symlink is not one after a remount"
[ "$(stat_of head_requests)" = 0 ] || fail "stat needed a HEAD ($(stat_of head_requests))"
sleep 2 # past --refresh: the kernel asks again
denied "$MNT/secret"
denied "$MNT/alice"
[ "$(attrs "$MNT/secret")" = "600 0 0" ] || fail "secret shows $(attrs "$MNT/secret") later"

note "after a remount, a listing first (readdirplus) shows the same"
$FMFS umount "$MNT" || fail "umount failed"
mnt --refresh 1
as_nobody ls -l "$MNT" >ls.out || fail "nobody cannot list the mount"
grep -q -- '-rw------- 1 root root .* secret$' ls.out || fail "ls -l: $(grep secret ls.out)"
grep -q -- '-rw------- 1 1234 5678 .* alice$' ls.out || fail "ls -l: $(grep alice ls.out)"
grep -q -- '^drwx------ .* adir$' ls.out || fail "ls -l: $(grep adir ls.out)"
denied "$MNT/secret"
denied "$MNT/alice"
# the objects put by the aws CLI are HEADed behind the listing (for their
# stored times), never for a decision on permissions
fg=$(($(stat_of head_requests) - $(stat_of head_requests_behind_listings)))
[ "$fg" = 0 ] || fail "the listing needed a HEAD ($fg)"

note "foreign objects: the default, or their own metadata"
[ "$(attrs "$MNT/foreign")" = "600 0 0" ] || fail "foreign shows $(attrs "$MNT/foreign"), not the default"
denied "$MNT/foreign"
denied "$MNT/fsecret"
sleep 2 # the listing's defaults last --refresh (docs/semantics.md)
allowed "$MNT/fopen" # looked up by another user: HEADed, its own 0644
[ "$(attrs "$MNT/fopen")" = "644 0 0" ] || fail "fopen shows $(attrs "$MNT/fopen")"
[ "$(attrs "$MNT/fsecret")" = "600 0 0" ] || fail "fsecret shows $(attrs "$MNT/fsecret")"

note "the cache dir and its files are 0700/0600"
[ "$(perms_of "$CACHE")" = 700 ] || fail "cache dir is $(perms_of "$CACHE")"
for d in objects objects/00 dirty; do
	[ "$(perms_of "$CACHE/$d")" = 700 ] || fail "$d is $(perms_of "$CACHE/$d")"
done
for f in "$CACHE"/index.sqlite* "$CACHE"/writeback.sqlite* "$CACHE"/*lock \
	"$CACHE/fmfs.log" "$CACHE"/objects/*/*; do
	[ -e "$f" ] || continue
	[ "$(perms_of "$f")" = 600 ] || fail "$f is $(perms_of "$f")"
done
$FMFS umount "$MNT" || fail "umount failed"

note "--no-allow-other: other users cannot use the mount at all"
mnt --no-allow-other
grep " $MNT " /proc/mounts | grep -q allow_other &&
	fail "--no-allow-other mount has allow_other"
as_nobody stat "$MNT/public" >/dev/null 2>&1 &&
	fail "nobody could stat a --no-allow-other mount"
cat "$MNT/public" >/dev/null || fail "root cannot read its own mount"
$FMFS umount "$MNT" || fail "umount failed"

note "--file-mode, --dir-mode, --uid, --gid for what has no metadata"
awsx s3 cp --quiet data/foreign "s3://$B/sub/f2" || fail "aws put"
mnt --file-mode 0644 --dir-mode 0750 --uid 4321 --gid 4322
[ "$(attrs "$MNT/foreign")" = "644 4321 4322" ] || fail "foreign shows $(attrs "$MNT/foreign")"
[ "$(attrs "$MNT/sub")" = "750 4321 4322" ] || fail "sub shows $(attrs "$MNT/sub")"
[ "$(attrs "$MNT/secret")" = "600 0 0" ] || fail "secret shows $(attrs "$MNT/secret") with --file-mode"
$FMFS umount "$MNT" || fail "umount failed"
expect_exit 2 "--file-mode '0999'" $FMFS mount "s3://$B" "$MNT" --file-mode 0999
expect_exit 2 "--uid 'x'" $FMFS mount "s3://$B" "$MNT" --uid x
note "a directory's mode, owner and times are stored with it: a mount on a new cache dir shows them (gateway and file://)"
FS=$TEST_DIR/fstore
mkdir -p "$FS"
for url in "s3://$B" "file://$FS"; do
	rm -rf "$TEST_DIR/dc1" "$TEST_DIR/dc2"
	$FMFS mount "$url" "$MNT" --cache-dir "$TEST_DIR/dc1" --async-delay 0 ||
		fail "mount $url"
	mkdir -m 700 "$MNT/closed"
	echo inner >"$MNT/closed/inner"
	chmod 644 "$MNT/closed/inner"
	mkdir "$MNT/owned"
	$FMFS flush "$MNT" --wait || fail "flush --wait ($url)"
	# changed once clean: the marker goes up again with them
	chown 1234:5678 "$MNT/owned"
	chmod 750 "$MNT/owned"
	touch -d @1700000000 "$MNT/owned"
	$FMFS flush "$MNT" --wait || fail "flush --wait ($url)"
	$FMFS umount "$MNT" || fail "umount ($url)"
	$FMFS mount "$url" "$MNT" --cache-dir "$TEST_DIR/dc2" || fail "mount $url on a new cache dir"
	[ "$(attrs "$MNT/closed")" = "700 0 0" ] ||
		fail "$url: a 0700 directory shows $(attrs "$MNT/closed") on a new cache dir"
	[ "$(stat -c '%a %u %g %Y' "$MNT/owned")" = "750 1234 5678 1700000000" ] ||
		fail "$url: a chowned, chmodded, touched directory shows $(stat -c '%a %u %g %Y' "$MNT/owned") on a new cache dir"
	if as_nobody ls "$MNT/closed" >/dev/null 2>&1; then
		fail "$url: nobody can list a 0700 directory on a new cache dir"
	fi
	denied "$MNT/closed/inner"
	$FMFS umount "$MNT" || fail "umount ($url)"
done
[ "$(stat -c %a "$FS/closed")" = 700 ] ||
	fail "the file:// store keeps a 0700 directory as $(stat -c %a "$FS/closed")"
[ "$(stat -c %a "$FS/owned")" = 750 ] ||
	fail "the file:// store keeps a 0750 directory as $(stat -c %a "$FS/owned")"

echo "permissions ok"
