#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What fmfs says when a person gets something wrong (issue 16, item 7):
# each case feeds the input and checks the exit status and that stderr
# names the problem.  Numeric options out of range, with trailing text,
# a sign or past 64 bits; a cache size past what the cache disk can ever
# hold; -o options libfuse does not take; a failed mount removing only
# what it made; a dead mountpoint (daemon killed), fmfs's and another
# filesystem's; the control verbs run by a user who does not own the
# mount; prefetch of a path that does not exist; evict of a dirty file.
. "$TOP/tests/lib/common.sh"

mount_setup msg
PUB=
cleanup() {
	if [ -n "$PUB" ]; then
		unmount_quietly "$PUB/mnt"
		rm -rf "$PUB"
	fi
	unmount_quietly "$MNT"
	cleanup_common
}
trap cleanup EXIT

URL=s3://$B
mnt() { # extra options...
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE" "$@" ||
		fail "mount failed (see $CACHE/fmfs.log)"
	mountpoint -q "$MNT" || fail "mount returned 0 but $MNT is not mounted"
}
# mount_fails CODE PATTERN OPTIONS...: a mount that must fail, leave
# nothing mounted and no cache directory behind.
mount_fails() {
	local code=$1 pat=$2
	shift 2
	expect_exit "$code" "$pat" $FMFS mount "$URL" "$MNT" --cache-dir "$CACHE" "$@"
	mountpoint -q "$MNT" && fail "mounted although '$*' was refused"
	[ ! -e "$CACHE" ] || fail "'$*' left the cache dir $CACHE behind"
}
# kill_daemon: kill -9 of the daemon of $MNT; the mount stays, dead.
kill_daemon() {
	local pid
	pid=$(pgrep -f "fmfs mount $URL $MNT" | head -1)
	[ -n "$pid" ] || fail "no daemon process found"
	kill -9 "$pid"
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	stat "$MNT" >/dev/null 2>"$TEST_DIR/stat.err" &&
		fail "$MNT still answers after kill -9 of its daemon"
	grep -q 'not connected' "$TEST_DIR/stat.err" ||
		fail "stat of the dead mount: $(cat "$TEST_DIR/stat.err")"
}

note "numeric options name their range"
for t in 0 65 8x -1 " 8" 99999999999999999999999; do
	mount_fails 2 "--threads '$t': give a whole number of threads from 1 to 64" --threads "$t"
done
mount_fails 2 "--refresh '-1': .*from 0 to 86400" --refresh -1
mount_fails 2 "--timeout '0': .*from 1 to 86400" --timeout 0
mount_fails 2 "--async-delay '1.5': .*from 0 to 86400" --async-delay 1.5
mount_fails 2 "--upload-parallel '18446744073709551617': .*from 1 to 64" \
	--upload-parallel 18446744073709551617
mount_fails 2 "--part-size '99999999999999999999M': .*5M to 5G" --part-size 99999999999999999999M
expect_exit 2 "--timeout '-5': give a whole number of seconds from 0 to 86400" \
	$FMFS umount "$MNT" --timeout -5

note "--cache-size: overflow, too large for the disk, too small, garbage"
mount_fails 2 "--cache-size '18446744073709551616' is too large: it does not fit in 64 bits" \
	--cache-size 18446744073709551616
mount_fails 2 "--cache-size '16E': give a size of at least 16M" --cache-size 16E
mount_fails 2 "--cache-size '18446744073709551615' is more than the disk of .* can ever hold" \
	--cache-size 18446744073709551615
mount_fails 2 "--cache-size '99999T' is more than the disk of .* can ever hold \([0-9]+ MiB in all\)" \
	--cache-size 99999T
mount_fails 2 "--cache-size '16777215': give a size of at least 16M" --cache-size 16777215
mount_fails 2 "--cache-size '-5M': give a size of at least 16M" --cache-size -5M
mount_fails 2 "--cache-size '1.5X': give a size" --cache-size 1.5X
mnt --cache-size 1.5G
[ "$(stat_of cache_cap_bytes)" = 1610612736 ] || fail "--cache-size 1.5G is $(stat_of cache_cap_bytes) bytes"
$FMFS umount "$MNT"
rm -rf "$CACHE"

note "-o: the bad option and libfuse's reason on stderr, before the daemon starts"
mount_fails 2 "-o bogusopt: libfuse does not take it: unknown option.*bogusopt" -o bogusopt
mount_fails 2 "-o ro,max_read=abc: libfuse does not take it: invalid parameter.*max_read=abc" \
	-o ro,max_read=abc

note "a failed mount removes only what it made"
expect_exit 4 "NoSuchBucket|no such bucket" \
	$FMFS mount "s3://nosuch-$B" "$MNT" --cache-dir "$TEST_DIR/made/deep/cache"
[ ! -e "$TEST_DIR/made" ] || fail "a failed mount left $(find "$TEST_DIR/made")"
mkdir -p "$TEST_DIR/empty"
expect_exit 2 "bogusopt" $FMFS mount "$URL" "$MNT" --cache-dir "$TEST_DIR/empty" -o bogusopt
expect_exit 4 "" $FMFS mount "s3://nosuch-$B" "$MNT" --cache-dir "$TEST_DIR/empty"
[ -d "$TEST_DIR/empty" ] || fail "a failed mount removed a cache dir it did not create"
[ -z "$(ls -A "$TEST_DIR/empty")" ] || fail "a failed mount left $(ls -A "$TEST_DIR/empty") in an empty cache dir"
mkdir -p "$TEST_DIR/full"
echo keep >"$TEST_DIR/full/mine"
expect_exit 4 "" $FMFS mount "s3://nosuch-$B" "$MNT" --cache-dir "$TEST_DIR/full"
[ "$(cat "$TEST_DIR/full/mine")" = keep ] || fail "a failed mount touched a file it did not make"
rmdir "$TEST_DIR/empty"

note "a dead fmfs mountpoint (daemon killed) is cleared by the next mount"
echo hello | awsx s3 cp - "s3://$B/hello" >/dev/null
mnt
kill_daemon
expect_exit 0 "$MNT was a dead fmfs mount .*unmounted it" \
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE"
mountpoint -q "$MNT" || fail "not mounted after clearing the dead mount"
[ "$(cat "$MNT/hello")" = hello ] || fail "the new mount does not read"
[ "$(grep -c " $MNT " /proc/self/mountinfo)" = 1 ] || fail "mounts stacked on $MNT"
note "a dead mount of another FUSE filesystem is refused, with what to run"
$FMFS umount "$MNT"
mnt -o subtype=notfmfs
kill_daemon
expect_exit 2 "mountpoint $MNT is a dead fuse.notfmfs mount .*not connected.*fusermount3 -u $MNT" \
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE"
expect_exit 2 "$MNT/sub: .*not connected: it, or a directory above it, is a FUSE mount whose daemon is gone" \
	$FMFS mount "$URL" "$MNT/sub" --cache-dir "$CACHE"
$FMFS umount "$MNT" 2>/dev/null || fail "fmfs umount did not clear the dead mount"
mountpoint -q "$MNT" && fail "still mounted after fmfs umount of a dead mount"
expect_exit 2 "mountpoint $MNT/nodir: No such file or directory \(create it with mkdir -p\)" \
	$FMFS mount "$URL" "$MNT/nodir" --cache-dir "$CACHE"

note "prefetch of a path that does not exist"
mnt --async-delay 3600
expect_exit 2 "$MNT/missing does not exist" $FMFS prefetch "$MNT" "$MNT/missing"
expect_exit 2 "/etc: not a path inside $MNT" $FMFS prefetch "$MNT" /etc
expect_exit 2 "$MNT/missing does not exist" $FMFS evict "$MNT" "$MNT/missing"

note "evict of a dirty file: says it is dirty, and that flush uploads it"
echo local >"$MNT/dirty"
expect_exit 1 "dirty: it is dirty \(not uploaded yet\), and dirty files are never evicted; fmfs flush uploads it" \
	$FMFS evict "$MNT" "$MNT/dirty"
[ "$(cat "$MNT/dirty")" = local ] || fail "the dirty file changed"
$FMFS flush "$MNT" --wait || fail "flush --wait failed"
$FMFS evict "$MNT" "$MNT/dirty" >/dev/null || fail "evict after flush failed"
$FMFS umount "$MNT"

note "control verbs by a user who does not own the mount"
if ! command -v setpriv >/dev/null || [ "$(id -u)" != 0 ]; then
	note "skipped: needs root and setpriv"
	exit 0
fi
# A directory and a copy of fmfs that nobody can reach (TEST_DIR is 0700).
PUB=$(mktemp -d "${TMPDIR:-/tmp}/fmfs-msg.XXXXXX")
chmod 755 "$PUB"
cp "$FMFS" "$PUB/fmfs"
mkdir "$PUB/mnt"
$FMFS mount "$URL" "$PUB/mnt" --cache-dir "$CACHE" || fail "mount on $PUB/mnt failed"
cd "$PUB"
nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups "$PUB/fmfs" "$@"
}
for v in status flush umount "prefetch mnt/hello" "evict mnt/hello"; do
	set -- $v
	verb=$1
	shift
	expect_exit 3 "fmfs $verb: permission denied on the control socket .*: $PUB/mnt is the fmfs mount of root \(uid 0\); run fmfs $verb as root" \
		nobody "$verb" mnt "$@"
done
mountpoint -q "$PUB/mnt" || fail "a denied umount unmounted"
note "a dead mount this user may not unmount"
pid=$(pgrep -f "fmfs mount $URL $PUB/mnt" | head -1)
[ -n "$pid" ] || fail "no daemon process found"
kill -9 "$pid"
sleep 0.5
expect_exit 2 "mountpoint $PUB/mnt is a dead fmfs mount of root \(uid 0\) .*could not be unmounted; run fmfs umount $PUB/mnt or fusermount3 -u $PUB/mnt as root" \
	nobody mount "$URL" mnt --cache-dir "$PUB/cache"
[ ! -e "$PUB/cache" ] || fail "the refused mount made a cache dir"
cd "$TEST_DIR"
