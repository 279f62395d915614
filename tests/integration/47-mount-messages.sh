#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What fmfs says when a person gets something wrong:
# each case feeds the input and checks the exit status and that stderr
# names the problem.  Numeric options out of range, with trailing text,
# a sign or past 64 bits; a cache size past what the cache disk can ever
# hold; -o options libfuse does not take; a failed mount removing only
# what it made; a dead mountpoint (daemon killed), fmfs's and another
# filesystem's; the control verbs run by a user who does not own the
# mount; prefetch of a path that does not exist; evict of a dirty file;
# a --credentials file that cannot be read, and one that is read;
# a cache dir inside the mountpoint, the file:// store's directory or
# holding someone else's files, refused with nothing written or changed;
# a read-only file:// store (refused unless --mode ro, which reads it)
# and a missing one (mkdir -p, not aws s3 mb).
. "$TOP/tests/lib/common.sh"

mount_setup msg
no_keeper # it kills the daemon: what a mount without a keeper does
PUB=
cleanup() {
	if [ -n "$PUB" ]; then
		unmount_quietly "$PUB/mnt"
		rm -rf "$PUB"
	fi
	unmount_quietly "$MNT"
	umount "$TEST_DIR/rostore" 2>/dev/null || true
	cleanup_common
}
trap cleanup EXIT

URL=s3://$B
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

note "--credentials FILE: a file that cannot be read is named; a good one is read, relative too"
mount_fails 2 "^fmfs mount: --credentials '$TEST_DIR/nosuch': No such file or directory: give the AWS shared credentials file" \
	--credentials "$TEST_DIR/nosuch"
mount_fails 2 "^fmfs mount: --credentials '$TEST_DIR': Is a directory" --credentials "$TEST_DIR"
mount_fails 2 "^fmfs mount: --credentials '/dev/null': not a regular file" --credentials /dev/null
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$TEST_DIR/creds"
chmod 600 "$TEST_DIR/creds"
# No keys in the environment: only the file can have given them.  A
# relative name, since the daemon runs in /.
(cd "$TEST_DIR" && env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
	-u AWS_SESSION_TOKEN -u AWS_PROFILE HOME="$TEST_DIR/nohome" \
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE" --credentials creds) ||
	fail "mount with --credentials failed (see $CACHE/fmfs.log)"
echo credentials >"$MNT/by-creds" || fail "write through the --credentials mount"
$FMFS flush "$MNT" --wait || fail "flush through the --credentials mount"
$FMFS umount "$MNT"
[ "$(awsx s3 cp "s3://$B/by-creds" -)" = credentials ] ||
	fail "the --credentials mount did not upload by-creds"
awsx s3 rm --quiet "s3://$B/by-creds"
rm -rf "$CACHE"

note "a failed mount removes only what it made"
expect_exit 4 "NoSuchBucket|no such bucket" \
	$FMFS mount "s3://nosuch-$B" "$MNT" --cache-dir "$TEST_DIR/made/deep/cache"
[ ! -e "$TEST_DIR/made" ] || fail "a failed mount left $(find "$TEST_DIR/made")"
mkdir -p "$TEST_DIR/empty"
expect_exit 2 "bogusopt" $FMFS mount "$URL" "$MNT" --cache-dir "$TEST_DIR/empty" -o bogusopt
expect_exit 4 "" $FMFS mount "s3://nosuch-$B" "$MNT" --cache-dir "$TEST_DIR/empty"
[ -d "$TEST_DIR/empty" ] || fail "a failed mount removed a cache dir it did not create"
[ -z "$(ls -A "$TEST_DIR/empty")" ] || fail "a failed mount left $(ls -A "$TEST_DIR/empty") in an empty cache dir"
rmdir "$TEST_DIR/empty"

note "a cache dir that would mix with other files, or be read through the mount itself"
# Someone's files: refused before anything is written, modes kept.
mkdir -p "$TEST_DIR/full/sub"
echo keep >"$TEST_DIR/full/mine"
chmod 755 "$TEST_DIR/full/mine" "$TEST_DIR/full/sub" "$TEST_DIR/full"
for url in "$URL" "s3://nosuch-$B"; do
	expect_exit 2 "cache directory $TEST_DIR/full holds files fmfs did not make \('(mine|sub)'\).*give an empty directory, or the cache dir of an earlier mount" \
		$FMFS mount "$url" "$MNT" --cache-dir "$TEST_DIR/full"
done
[ "$(cat "$TEST_DIR/full/mine")" = keep ] || fail "a refused mount touched a file it did not make"
[ "$(stat -c %a "$TEST_DIR/full" "$TEST_DIR/full/mine" "$TEST_DIR/full/sub" | tr '\n' ' ')" = "755 755 755 " ] ||
	fail "a refused mount changed modes: $(stat -c '%a %n' "$TEST_DIR/full" "$TEST_DIR/full/mine" "$TEST_DIR/full/sub")"
[ "$(ls -A "$TEST_DIR/full" | tr '\n' ' ')" = "mine sub " ] ||
	fail "a refused mount wrote into the directory: $(ls -A "$TEST_DIR/full")"
mountpoint -q "$MNT" && fail "mounted on a cache dir of someone else's files"
# Inside the mountpoint: refused at once (it used to hang at the first
# create, the daemon opening its cache through its own mount).
for c in "$MNT/cache" "$MNT" "$MNT/../$(basename "$MNT")/a/b"; do
	expect_exit 2 "cache directory .* is inside the mountpoint $MNT: .*choose a --cache-dir outside it" \
		timeout 30 $FMFS mount "$URL" "$MNT" --cache-dir "$c"
	mountpoint -q "$MNT" && fail "mounted with the cache dir $c inside the mountpoint"
	[ -z "$(ls -A "$MNT")" ] || fail "the refused mount made $(ls -A "$MNT") in the mountpoint"
done
# The file:// store's directory, inside it, or around it.
mkdir -p "$TEST_DIR/fstore/b" "$TEST_DIR/fcache"
for c in "$TEST_DIR/fstore/b" "$TEST_DIR/fstore/b/cache" "$TEST_DIR/fstore"; do
	expect_exit 2 "cache directory $c and the store's directory $TEST_DIR/fstore/b are (the same|one inside the other): .*choose a --cache-dir outside the store" \
		$FMFS mount "file://$TEST_DIR/fstore/b" "$MNT" --cache-dir "$c"
	[ -z "$(ls -A "$TEST_DIR/fstore/b")" ] || fail "the refused mount wrote $(ls -A "$TEST_DIR/fstore/b") into the store"
done
# An empty directory someone made, and the same dir once it holds a cache.
mkdir -m 755 "$TEST_DIR/fcache/c"
for i in 1 2; do
	$FMFS mount "file://$TEST_DIR/fstore/b" "$MNT" --cache-dir "$TEST_DIR/fcache/c" ||
		fail "mount $i on an empty, then a cache dir refused"
	echo "$i" >"$MNT/f"
	$FMFS umount "$MNT" || fail "umount $i"
done
[ "$(cat "$TEST_DIR/fstore/b/f")" = 2 ] || fail "the file:// store holds $(cat "$TEST_DIR/fstore/b/f")"

note "a read-only file:// store: refused for writing, with the way out; --mode ro reads it"
mkdir -p "$TEST_DIR/rostore"
echo ro-data >"$TEST_DIR/rostore/r"
mount --bind "$TEST_DIR/rostore" "$TEST_DIR/rostore" &&
	mount -o remount,bind,ro "$TEST_DIR/rostore" || fail "cannot make a read-only bind mount"
expect_exit 3 "$TEST_DIR/rostore: StoreNotWritable: store directory is not writable -- give this user write access to it, or mount it with --mode ro to only read it" \
	$FMFS mount "file://$TEST_DIR/rostore" "$MNT" --cache-dir "$TEST_DIR/rocache"
$FMFS mount "file://$TEST_DIR/rostore" "$MNT" --cache-dir "$TEST_DIR/rocache" --mode ro ||
	fail "--mode ro cannot mount a read-only file:// store"
[ "$(cat "$MNT/r")" = ro-data ] || fail "--mode ro of a read-only store does not read"
$FMFS umount "$MNT"
umount "$TEST_DIR/rostore"
[ ! -e "$TEST_DIR/rostore/.fmfs" ] || fail "--mode ro made .fmfs in the store"
expect_exit 4 "store directory: No such file or directory \(create it with mkdir -p\)\$" \
	$FMFS mount "file://$TEST_DIR/nostore" "$MNT" --cache-dir "$TEST_DIR/rocache"

note "a dead fmfs mountpoint (daemon killed) is cleared by the next mount"
echo hello | awsx s3 cp - "s3://$B/hello" >/dev/null
mnt
kill_daemon
expect_exit 0 "$MNT was a dead fmfs mount .*unmounted it" \
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE"
mountpoint -q "$MNT" || fail "not mounted after clearing the dead mount"
[ "$(cat "$MNT/hello")" = hello ] || fail "the new mount does not read"
[ "$(grep -c " $MNT " /proc/self/mountinfo)" = 1 ] || fail "mounts stacked on $MNT"
# Mounting again at once after kill -9: for a moment the dead mount
# answers ECONNABORTED, not ENOTCONN; that is a dead mount too.
for i in $(seq 10); do
	pid=$(pgrep -f "fmfs mount $URL $MNT" | head -1)
	kill -9 "$pid"
	$FMFS mount "$URL" "$MNT" --cache-dir "$CACHE" 2>"$TEST_DIR/again.err" ||
		fail "mount $i at once after kill -9: $(cat "$TEST_DIR/again.err")"
	[ "$(cat "$MNT/hello")" = hello ] || fail "mount $i at once after kill -9 does not read"
done
[ "$(grep -c " $MNT " /proc/self/mountinfo)" = 1 ] || fail "mounts stacked on $MNT"

note "kill -9 leaves no stale control socket: fmfs umount and the next mount remove it"
RUNDIR=/run/fmfs
[ "$(id -u)" = 0 ] || RUNDIR=${XDG_RUNTIME_DIR:-/tmp}
mkdir -p "$TEST_DIR/m2"
for how in umount mount; do
	$FMFS mount "$URL" "$TEST_DIR/m2" --cache-dir "$TEST_DIR/c2" || fail "mount m2"
	# the mount names its socket (other tests' mounts come and go)
	sock=$(python3 -c 'import os, sys; print(os.path.basename(os.getxattr(sys.argv[1], "user.fmfs.control").decode()))' "$TEST_DIR/m2")
	[ -S "$RUNDIR/$sock" ] || fail "no control socket $sock in $RUNDIR"
	kill -9 "$(pgrep -f "fmfs mount $URL $TEST_DIR/m2" | head -1)"
	sleep 0.3
	if [ $how = umount ]; then
		$FMFS umount "$TEST_DIR/m2" || fail "umount of the dead m2"
	else
		fusermount3 -u "$TEST_DIR/m2" || fail "fusermount3 -u of the dead m2"
		# (another test's mount may sweep it first: fine too)
		mkdir -p "$TEST_DIR/m3"
		$FMFS mount "$URL" "$TEST_DIR/m3" --cache-dir "$TEST_DIR/c3" || fail "mount m3"
		$FMFS umount "$TEST_DIR/m3"
	fi
	[ ! -e "$RUNDIR/$sock" ] || fail "$RUNDIR/$sock of a killed daemon is still there after $how"
done

note "flush --wait whose daemon dies under it says so"
start_proxy "action=delay,method=PUT,ms=60000"
$FMFS umount "$MNT" || fail "umount"
AWS_ENDPOINT_URL=$PROXY_URL mnt --async-delay 3600
echo pending >"$MNT/pending"
$FMFS flush "$MNT" --wait >"$TEST_DIR/fw.out" 2>"$TEST_DIR/fw.err" &
FW=$!
sleep 1
kill -9 "$(pgrep -f "fmfs mount $URL $MNT" | head -1)"
rc=0
wait $FW || rc=$?
[ $rc = 1 ] || fail "flush --wait exited $rc when its daemon died: $(cat "$TEST_DIR/fw.err")"
grep -q "fmfs flush: the daemon of $MNT went away before it answered (it exited or was killed); files not yet uploaded stay in its cache dir" "$TEST_DIR/fw.err" ||
	fail "flush --wait said: '$(cat "$TEST_DIR/fw.err")'"
proxy_rules
mnt
$FMFS flush "$MNT" --wait || fail "the pending file did not upload after a remount"
[ "$(awsx s3 cp "s3://$B/pending" -)" = pending ] || fail "the pending file is not in the bucket"
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

note "evict counts the bytes it dropped; an error on the root names the mount"
$FMFS evict "$MNT" "$MNT" >/dev/null || fail "evict of the root failed"
cat "$MNT/hello" >/dev/null
expect_exit 0 "" $FMFS evict "$MNT" "$MNT/hello" "$MNT/dirty"
grep -q "^evict: 2 files, 6 bytes dropped from the cache, 0 errors$" "$TEST_DIR/out" ||
	fail "evict of a cached and an uncached file said: $(cat "$TEST_DIR/out")"
exec 7<"$MNT/hello"
expect_exit 1 "^fmfs evict: $MNT: 1 of [0-9]+ files failed, first: hello: Device or resource busy" \
	$FMFS evict "$MNT" "$MNT"
exec 7<&-

note "the cache dir removed under a live mount: objects/ is made again; the whole dir: EIO, not ENOENT"
$FMFS umount "$MNT"
echo other | awsx s3 cp - "s3://$B/other" >/dev/null
mkdir -p "$TEST_DIR/rmc"
$FMFS mount "$URL" "$MNT" --cache-dir "$TEST_DIR/rmc/c" || fail "mount on rmc"
rm -rf "$TEST_DIR/rmc/c/objects"
[ "$(cat "$MNT/hello")" = hello ] || fail "a read after objects/ was removed"
rm -rf "$TEST_DIR/rmc/c"
cat "$MNT/other" 2>"$TEST_DIR/err" >/dev/null && fail "a read with the cache dir gone succeeded"
grep -q "Input/output error" "$TEST_DIR/err" || fail "a read with the cache dir gone: $(cat "$TEST_DIR/err")"
(echo x >"$MNT/newfile") 2>"$TEST_DIR/err" && fail "a create with the cache dir gone succeeded"
grep -q "Input/output error" "$TEST_DIR/err" || fail "a create with the cache dir gone: $(cat "$TEST_DIR/err")"
$FMFS umount "$MNT" || fail "umount with the cache dir gone"
mnt --async-delay 3600

note "usage mistakes name the argument"
expect_exit 2 "^fmfs mount: unknown option '--bogus' \(fmfs mount --help lists what it takes\)" \
	$FMFS mount --bogus "$URL" "$MNT"
expect_exit 2 "^fmfs mount: option needs a value: '--cache-dir'" $FMFS mount "$URL" "$MNT" --cache-dir
expect_exit 2 "^fmfs mount: unexpected argument .*'extra'" $FMFS mount "$URL" "$MNT" extra
expect_exit 2 "^fmfs flush: unexpected argument 'b'" $FMFS flush "$MNT" a b
expect_exit 2 "^fmfs umount: unknown option .*'--bogus'" $FMFS umount "$MNT" --bogus
mountpoint -q "$MNT" || fail "a refused umount unmounted"
for v in status flush umount metrics prefetch evict; do
	expect_exit 0 "" $FMFS $v --help
	grep -q "^usage: fmfs $v MOUNTPOINT" "$TEST_DIR/out" || fail "fmfs $v --help: $(cat "$TEST_DIR/out")"
done
$FMFS umount "$MNT"

note "control verbs by a user who does not own the mount"
if ! command -v setpriv >/dev/null || [ "$(id -u)" != 0 ]; then
	note "skipped: needs root and setpriv"
	exit 0
fi
# A directory and a copy of fmfs that nobody can reach (TEST_DIR is 0700).
PUB=$(mktemp -d "${TMPDIR:-/tmp}/fmfs-msg.XXXXXX")
chmod 755 "$PUB"
cp "${FMFS_REAL:-$FMFS}" "$PUB/fmfs" # the binary, not the test wrapper
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
