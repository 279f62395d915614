#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A kept mount (`fmfs mount`'s default) outlives its daemon
# (docs/keeper.md).  kill -9 of the
# daemon while a read waits on the gateway (held back by the fault
# proxy): a new daemon takes the mount over, the kernel sends the read
# again, and the reader gets every byte right without an error; a
# directory open across the crash lists, a shell whose working directory
# is in the mount carries on, new files reach the bucket (checked with
# aws), and `fmfs status` tells the pids and the takeover.  A file open
# for writing (through passthrough where the kernel has it) is written
# on across a second kill and reaches the bucket whole.  A damaged
# journal: the mount ends as it would without a keeper, the log says
# why, and what was closed before reaches the bucket after a remount.
# Where the kernel offers FUSE over io_uring, a kept mount takes its
# requests from /dev/fuse and says why; --no-keeper takes the ring.
# `fmfs restart` has the keeper run the binary again, which takes the
# mount over with a reader and a writer open; without a keeper it says
# so.  --foreground has no keeper; --keeper with it, or with --no-keeper,
# is refused.  Hard links made before a kill keep their inode, link
# count and names after it; a directory its owner and the times its
# entries moved, and so does the root.  An operation the daemon died in,
# its reply kept (FMFS_TK_FAULT=OP) or not yet (OP:unkept, its intent),
# is answered once, not done twice.  The keeper killed: the daemon
# serves on, status and log say so, restart is refused, and the
# daemon's own kill then ends the mount (ENOTCONN).  SIGTERM unmounts cleanly.
. "$TOP/tests/lib/common.sh"

mount_setup keeper
# The default mount, also in the run on FUSE over io_uring
# (tests/run-tests.sh), which otherwise mounts with --no-keeper.
FMFS=${FMFS_REAL:-$FMFS}
# stat_opt KEY: a status field that may be absent (then empty).
stat_opt() {
	$FMFS status "$MNT" --json | python3 -c \
		"import json,sys; print(json.load(sys.stdin).get('$1', ''))"
}
mkdir -p data
random_file data/big 24
random_file data/small 1
awsx s3 cp --quiet --recursive data "s3://$B/data/"
start_proxy
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT
MNT_OPTS=(--endpoint "$PROXY_URL")

expect_exit 2 "cannot go with --foreground" try_mnt --keeper --foreground
expect_exit 2 "^fmfs mount: --keeper and --no-keeper: give one of them" \
	try_mnt --keeper --no-keeper
mountpoint -q "$MNT" && fail "a refused mount mounted"
mnt
[ "$(stat_of transport)" = dev-fuse ] ||
	fail "a kept mount on $(stat_of transport)"
dpid=$(stat_of daemon_pid)
kpid=$(stat_of keeper_pid)
[ "$dpid" != "$kpid" ] && [ "$kpid" -gt 0 ] ||
	fail "status: daemon $dpid, keeper $kpid"
[ "$(stat_of takeovers)" = 0 ] || fail "takeovers before any"
kill -0 "$kpid" || fail "no keeper process $kpid"
note "daemon $dpid, keeper $kpid"

note "kill -9 of the daemon while a read waits on the gateway"
# Every GET now takes 3 s: the reader reads 1 MiB, says so and reads
# on, so reads wait in the daemon when it dies a second later.
cat >reader.py <<'EOF'
import hashlib, os, sys, time
f = open(sys.argv[1] + "/data/big", "rb")
d = os.open(sys.argv[1] + "/data", os.O_RDONLY)
a = f.read(1 << 20)
open("ready", "w").close()
b = f.read()
names = sorted(os.listdir(d))
print(hashlib.sha256(a + b).hexdigest(), len(a) + len(b), " ".join(names))
EOF
proxy_rules "delay,method=GET,ms=3000"
python3 reader.py "$MNT" >reader.out 2>reader.err &
rpid=$!
(cd "$MNT/data" && while [ ! -e "$TEST_DIR/go2" ]; do sleep 0.05; done &&
	ls >"$TEST_DIR/cwd.out" 2>&1 && cat small >"$TEST_DIR/cwd.small") &
cpid=$!
for _ in $(seq 200); do [ -e ready ] && break; sleep 0.1; done
[ -e ready ] || fail "the reader did not start: $(cat reader.err)"
sleep 1
kill -9 "$dpid"
touch go2
wait "$rpid" || fail "the reader failed across the takeover: $(cat reader.err)"
wait "$cpid" || fail "a shell in the mount failed across the takeover: $(cat cwd.out)"
proxy_rules
want=$(sha256sum <data/big | cut -d' ' -f1)
read -r got len names <reader.out
[ "$got" = "$want" ] || fail "the reader got other bytes ($len, $got)"
[ "$names" = "big small" ] || fail "the directory open across it listed '$names'"
[ "$(cat cwd.out | tr '\n' ' ')" = "big small " ] ||
	fail "ls in a working directory in the mount: $(cat cwd.out)"
cmp -s cwd.small data/small || fail "a file read from a working directory in the mount differs"
grep -q "takeover: serving again" "$CACHE/fmfs.log" ||
	fail "the log does not tell of the takeover: $(tail -5 "$CACHE/fmfs.log")"

note "status after it: a new daemon, the same keeper, the cause"
[ "$(stat_of takeovers)" = 1 ] || fail "takeovers: $(stat_of takeovers)"
[ "$(stat_of keeper_pid)" = "$kpid" ] || fail "the keeper changed"
dpid2=$(stat_of daemon_pid)
[ "$dpid2" != "$dpid" ] && kill -0 "$dpid2" || fail "daemon pid $dpid2"
stat_of last_takeover_cause | grep -q SIGKILL || fail "cause: $(stat_of last_takeover_cause)"
$FMFS metrics "$MNT" >metrics.txt || fail "fmfs metrics failed"
grep -q '^fmfs_takeovers_total 1$' metrics.txt &&
	grep -q "^fmfs_keeper_pid $kpid\$" metrics.txt &&
	grep -q '^fmfs_last_takeover_info{cause="killed by SIGKILL' metrics.txt &&
	grep -q '^fmfs_last_takeover_duration_seconds ' metrics.txt ||
	fail "the metrics do not tell of the takeover: $(grep -i 'takeover\|_pid' metrics.txt)"
resent=$(stat_of last_takeover_resent)
[ "$resent" -ge 1 ] || fail "no request was sent again: none was in flight?"
note "took $(stat_of last_takeover_ms) ms; the kernel sent $resent requests again"

note "writes after it reach the bucket"
echo after >"$MNT/data/new"
$FMFS flush --wait "$MNT" >/dev/null || fail "flush after the takeover failed"
[ "$(awsx s3 cp "s3://$B/data/new" -)" = after ] || fail "the new file is not in the bucket"

note "fmfs restart: the keeper runs the binary again; a reader and a writer carry on"
exec 8<"$MNT/data/big"
exec 9>"$MNT/data/restarted"
echo one >&9
$FMFS restart "$MNT" >restart.out 2>&1 || fail "fmfs restart failed: $(cat restart.out)"
grep -q "replaced by" restart.out || fail "fmfs restart said: $(cat restart.out)"
echo two >&9 || fail "a write after the restart failed"
exec 9>&-
cmp -s - data/big <&8 || fail "a file open across the restart read other bytes"
exec 8<&-
[ "$(stat_of takeovers)" = 2 ] || fail "takeovers after the restart: $(stat_of takeovers)"
stat_of last_takeover_cause | grep -q "fmfs restart" ||
	fail "cause: $(stat_of last_takeover_cause)"
$FMFS flush --wait "$MNT" >/dev/null || fail "flush after the restart failed"
[ "$(awsx s3 cp "s3://$B/data/restarted" - | tr '\n' ' ')" = "one two " ] ||
	fail "the file written across the restart is not whole in the bucket"
note "$(cat restart.out)"

note "a file open for writing at the crash is carried over: written on, closed, in the bucket"
# One descriptor, never closed nor flushed before the kill (a shell's
# `echo >&7` would flush at each line), over an object that was there:
# what the writer wrote before the kill must not be lost nor be the
# bucket's old bytes.
printf 'old old old old\n' | awsx s3 cp - "s3://$B/data/open" ||
	fail "cannot upload data/open"
cat >writer.py <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"partial\n")
open("wready", "w").close()
while not os.path.exists("wgo"):
    time.sleep(0.05)
os.write(fd, b"more\n")
os.close(fd)
EOF
python3 writer.py "$MNT/data/open" 2>writer.err &
wpid=$!
for _ in $(seq 100); do [ -e wready ] && break; sleep 0.1; done
[ -e wready ] || fail "the writer did not start: $(cat writer.err)"
kill -9 "$(stat_of daemon_pid)"
touch wgo
wait "$wpid" || fail "the writer failed across the takeover: $(cat writer.err)"
[ "$(stat_of takeovers)" = 3 ] || fail "takeovers: $(stat_of takeovers)"
grep -q "1 files open for writing or through a backing file and [0-9]* open for reading carried over" \
	"$CACHE/fmfs.log" || fail "the writer was not carried over: $(tail -3 "$CACHE/fmfs.log")"
$FMFS flush --wait "$MNT" >/dev/null || fail "flush after the second takeover failed"
[ "$(awsx s3 cp "s3://$B/data/open" - | tr '\n' ' ')" = "partial more " ] ||
	fail "the file written across the takeover is not whole in the bucket"

note "a damaged journal: no takeover, the mount ends as without a keeper, nothing lost"
echo closed >"$MNT/data/closed"
region=
for f in /proc/"$kpid"/fd/*; do
	case $(readlink "$f") in *fmfs-takeover*) region=$f ;; esac
done
[ -n "$region" ] || fail "no takeover region among the keeper's descriptors"
# The log's first record (after the 4 KiB head) zeroed: a length of 0.
dd if=/dev/zero of="$region" bs=4096 seek=1 count=1 conv=notrunc status=none
kill -9 "$(stat_of daemon_pid)"
for _ in $(seq 50); do kill -0 "$kpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$kpid" 2>/dev/null && fail "the keeper stayed with a journal it cannot trust"
if timeout 10 ls "$MNT" >/dev/null 2>err; then
	fail "the mount still answered"
fi
grep -q "not connected" err || fail "expected ENOTCONN: $(cat err)"
grep -q "no takeover: the journal is damaged" "$CACHE/fmfs.log" ||
	fail "the log does not say why: $(tail -3 "$CACHE/fmfs.log")"
$FMFS umount "$MNT" || fail "umount of the ended mount failed"
MNT_OPTS=(--no-keeper)
mnt
[ "$(stat_of keeper_pid)" = 0 ] || fail "--no-keeper: keeper_pid $(stat_of keeper_pid)"
$FMFS flush --wait "$MNT" >/dev/null || fail "flush after the remount failed"
expect_exit 1 "has no keeper" $FMFS restart "$MNT"
[ "$(awsx s3 cp "s3://$B/data/closed" -)" = closed ] ||
	fail "a file closed before the crash is not in the bucket"
$FMFS umount "$MNT"
MNT_OPTS=()
mnt
if [ "$(stat_of uring_offered)" = true ] || [ -n "$(stat_opt uring_not_used)" ]; then
	note "the kernel offers FUSE over io_uring: a kept mount does not take it, --no-keeper does"
	[ "$(stat_of transport)" = dev-fuse ] || fail "a kept mount on $(stat_of transport)"
	stat_opt uring_not_used | grep -q "a kept mount takes its requests from /dev/fuse" ||
		fail "status does not say why the ring is not used: '$(stat_opt uring_not_used)'"
	$FMFS umount "$MNT"
	mnt --no-keeper
	[ "$(stat_of transport)" = io_uring ] || fail "--no-keeper: not on the ring"
	expect_exit 1 "has no keeper" $FMFS restart "$MNT"
else
	note "the kernel offers no FUSE over io_uring here: the ring case not run"
	[ -z "$(stat_opt uring_not_used)" ] || fail "uring_not_used without the ring"
fi
$FMFS umount "$MNT"
note "--foreground: no keeper"
$FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" --foreground >fg.log 2>&1 &
fg=$!
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
mountpoint -q "$MNT" || fail "--foreground did not mount: $(cat fg.log)"
[ "$(stat_of keeper_pid)" = 0 ] || fail "--foreground: keeper_pid $(stat_of keeper_pid)"
$FMFS umount "$MNT" || fail "umount of the --foreground mount"
wait "$fg" || fail "--foreground mount exited $?: $(cat fg.log)"

note "a rename and a mkdir done when the daemon died are not done again: the kept replies answer"
for op in rename mkdir; do
	FMFS_TK_FAULT=$op $FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" ||
		fail "mount with FMFS_TK_FAULT=$op"
	echo "$op" >"$MNT/src-$op"
	case $op in
	rename) mv "$MNT/src-$op" "$MNT/dst-$op" 2>err ||
		fail "mv when the daemon died after doing it: $(cat err)" ;;
	mkdir) mkdir "$MNT/dir-$op" 2>err ||
		fail "mkdir when the daemon died after doing it: $(cat err)" ;;
	esac
	[ "$(stat_of takeovers)" = 1 ] || fail "$op: $(stat_of takeovers) takeovers, not 1"
	[ "$(stat_of last_takeover_replies_kept)" = 1 ] ||
		fail "$op: $(stat_of last_takeover_replies_kept) kept replies given, not 1"
	grep -q "answered as the daemon before had done it" "$CACHE/fmfs.log" ||
		fail "$op: the log does not say so: $(tail -3 "$CACHE/fmfs.log")"
	$FMFS flush --wait "$MNT" >/dev/null || fail "$op: flush"
	$FMFS umount "$MNT" || fail "$op: umount"
done
awsx s3 ls "s3://$B/" >ls.out
grep -q " dst-rename$" ls.out && ! grep -q " src-rename$" ls.out ||
	fail "the bucket after the rename: $(cat ls.out)"
grep -q " dir-mkdir/$" ls.out || fail "the bucket has no dir-mkdir/: $(cat ls.out)"
[ "$(awsx s3 cp "s3://$B/dst-rename" -)" = rename ] || fail "dst-rename's bytes"

note "each operation done when the daemon died before its reply was kept: its intent answers"
# FMFS_TK_FAULT=OP:unkept: the daemon dies once it has carried OP out,
# before its reply is kept; the resent request finds the intent it left
# and answers as done (docs/keeper.md "Requests done once").
pyop() { python3 -c "import os, sys; $1" "$2"; }
for op in unlink rmdir rename mkdir symlink create link setxattr removexattr; do
	FMFS_TK_FAULT=$op:unkept $FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" ||
		fail "mount with FMFS_TK_FAULT=$op:unkept"
	u=$MNT/u-$op
	case $op in
	unlink) echo gone >"$u" && rm "$u" ;;
	rmdir) mkdir "$u" && rmdir "$u" ;;
	rename) echo moved >"$u" && mv "$u" "$u.moved" ;;
	mkdir) mkdir "$u" ;;
	symlink) ln -s target-of-u "$u" ;;
	create) pyop "os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640))" "$u" ;;
	link) echo linked >"$u" && ln "$u" "$u.2" ;;
	setxattr) echo x >"$u" && pyop "os.setxattr(sys.argv[1], 'user.k', b'v1', os.XATTR_CREATE)" "$u" ;;
	removexattr) echo x >"$u" && pyop "os.setxattr(sys.argv[1], 'user.k', b'v1')" "$u" &&
		pyop "os.removexattr(sys.argv[1], 'user.k')" "$u" ;;
	esac 2>err || fail "$op when the daemon died after doing it, its reply not kept: $(cat err)"
	[ "$(stat_of takeovers)" = 1 ] || fail "$op:unkept: $(stat_of takeovers) takeovers, not 1"
	[ "$(stat_of last_takeover_found_done)" = 1 ] ||
		fail "$op:unkept: $(stat_of last_takeover_found_done) found done, not 1: $(tail -3 "$CACHE/fmfs.log")"
	grep -q "a $op of '[^']*' sent again had been carried out by the daemon before" "$CACHE/fmfs.log" ||
		fail "$op:unkept: the log does not say so: $(tail -3 "$CACHE/fmfs.log")"
	$FMFS flush --wait "$MNT" >/dev/null || fail "$op:unkept: flush"
	$FMFS umount "$MNT" || fail "$op:unkept: umount"
done
awsx s3 ls "s3://$B/" >ls.out
for k in u-rename.moved u-mkdir/ u-symlink u-create u-link u-link.2 u-setxattr u-removexattr; do
	grep -q " $k$" ls.out || fail "the bucket has no $k after its operation: $(cat ls.out)"
done
for k in u-unlink u-rmdir/ u-rename; do
	grep -q " $k$" ls.out && fail "the bucket still has $k after its operation: $(cat ls.out)"
done
[ "$(awsx s3 cp "s3://$B/u-rename.moved" -)" = moved ] || fail "u-rename.moved's bytes"
mnt
[ "$(readlink "$MNT/u-symlink")" = target-of-u ] || fail "u-symlink's target"
cmp -s "$MNT/u-link" "$MNT/u-link.2" || fail "u-link.2 is not u-link's copy"
xa=$(pyop "print(os.listxattr(sys.argv[1]), os.getxattr(sys.argv[1], 'user.k'))" "$MNT/u-setxattr" 2>&1)
[ "$xa" = "['user.k'] b'v1'" ] || fail "u-setxattr's attributes: $xa"
xa=$(pyop "print(os.listxattr(sys.argv[1]))" "$MNT/u-removexattr" 2>&1)
[ "$xa" = "[]" ] || fail "u-removexattr's attributes: $xa"
[ "$(stat -c %a "$MNT/u-create")" = 640 ] || fail "u-create's mode: $(stat -c %a "$MNT/u-create")"
$FMFS umount "$MNT" || fail "umount after the intents"

note "a rename whose daemon died between the store's change and its own memory's: the inode follows"
# FMFS_TK_FAULT=rename:changed: killed once the object is renamed, before
# the daemon moved its inode; the new daemon has that inode (from the
# journal) under the old name: the answered-as-done rename moves it.
FMFS_TK_FAULT=rename:changed $FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" ||
	fail "mount with FMFS_TK_FAULT=rename:changed"
echo changed >"$MNT/c-src" && mv "$MNT/c-src" "$MNT/c-dst" 2>err ||
	fail "mv when the daemon died between the store and its memory: $(cat err)"
[ "$(stat_of last_takeover_found_done)" = 1 ] || fail "rename:changed: not found done"
ln "$MNT/c-dst" "$MNT/c-dst.2" 2>err || fail "ln of the renamed file: $(cat err)"
[ "$(cat "$MNT/c-dst.2")" = changed ] || fail "c-dst.2: $(cat "$MNT/c-dst.2")"
echo more >>"$MNT/c-dst" || fail "append to the renamed file"
$FMFS flush --wait "$MNT" >/dev/null || fail "rename:changed: flush"
$FMFS umount "$MNT" || fail "rename:changed: umount"
[ "$(awsx s3 cp "s3://$B/c-dst" - | tr '\n' ,)" = changed,more, ] ||
	fail "c-dst in the bucket: $(awsx s3 cp "s3://$B/c-dst" - 2>&1)"
awsx s3 ls "s3://$B/" | grep -q " c-src$" && fail "c-src is still in the bucket"

note "hard links across a takeover: one inode, its link count, its names"
mnt --refresh 1
mkdir "$MNT/ln"
echo linked >"$MNT/ln/a"
ln "$MNT/ln/a" "$MNT/ln/b" && ln "$MNT/ln/a" "$MNT/ln/c" && mv "$MNT/ln/b" "$MNT/ln/b2" ||
	fail "ln or mv of a link"
echo other >"$MNT/ln/o"
ino=$(stat -c %i "$MNT/ln/a")
# a directory's owner and its times moved by entries (kept in memory)
mkdir "$MNT/own" && chown 65534:65534 "$MNT/own" && sleep 0.05 && touch "$MNT/own/e" ||
	fail "mkdir, chown or touch in own/"
dt=$(stat -c '%U %Y.%y %Z.%z' "$MNT/own") rt=$(stat -c '%y %z' "$MNT")
kill -9 "$(stat_of daemon_pid)"
[ "$(stat -c '%h %i' "$MNT/ln/b2")" = "3 $ino" ] ||
	fail "after the takeover ln/b2 shows '$(stat -c '%h %i' "$MNT/ln/b2")', not '3 $ino'"
[ "$(stat_of takeovers)" = 1 ] || fail "links: $(stat_of takeovers) takeovers, not 1"
# what the kernel holds goes stale (--refresh 1: its attributes and
# entries for 1 s), so the stats below ask the new daemon
sleep 1.5
[ "$(stat -c '%U %Y.%y %Z.%z' "$MNT/own")" = "$dt" ] ||
	fail "own/ after the takeover: '$(stat -c '%U %Y.%y %Z.%z' "$MNT/own")', not '$dt'"
[ "$(stat -c '%y %z' "$MNT")" = "$rt" ] ||
	fail "the root's times after the takeover: '$(stat -c '%y %z' "$MNT")', not '$rt'"
touch "$MNT/own/f" && [ "$(stat -c %U "$MNT/own")" = nobody ] ||
	fail "an entry made in own/ after the takeover: owner $(stat -c %U "$MNT/own")"
echo more >>"$MNT/ln/c" || fail "append to a link after the takeover"
# the first name replaced: the file keeps its two other names
mv "$MNT/ln/o" "$MNT/ln/a" || fail "mv over the first name after the takeover"
[ "$(stat -c %h "$MNT/ln/c")" = 2 ] || fail "after mv over ln/a: nlink $(stat -c %h "$MNT/ln/c")"
rm "$MNT/ln/b2" || fail "rm of a link after the takeover"
[ "$(stat -c %h "$MNT/ln/c")" = 1 ] || fail "after rm of ln/b2: nlink $(stat -c %h "$MNT/ln/c")"
$FMFS flush --wait "$MNT" >/dev/null || fail "links: flush"
[ "$(awsx s3 cp "s3://$B/ln/c" - | tr '\n' ' ')" = "linked more " ] ||
	fail "ln/c in the bucket: $(awsx s3 cp "s3://$B/ln/c" -)"
[ "$(awsx s3 cp "s3://$B/ln/a" -)" = other ] || fail "ln/a in the bucket"
awsx s3 ls "s3://$B/ln/" >ls.out
grep -q " b2$" ls.out && fail "ln/b2 is still in the bucket: $(cat ls.out)"
$FMFS umount "$MNT"

note "the keeper killed: the daemon serves on and says so; its own crash then ends the mount"
mnt
echo before >"$MNT/kk"
kill -9 "$(stat_of keeper_pid)"
for _ in $(seq 50); do [ "$(stat_of keeper_pid)" = 0 ] && break; sleep 0.1; done
[ "$(stat_of keeper_pid)" = 0 ] || fail "status after the keeper's kill: keeper_pid $(stat_of keeper_pid)"
stat_opt keeper_lost | grep -q "is gone: a crash of this daemon ends the mount" ||
	fail "status does not say the keeper is gone: '$(stat_opt keeper_lost)'"
grep -q "fmfs: the keeper (pid [0-9]*) is gone" "$CACHE/fmfs.log" ||
	fail "the log does not say the keeper is gone: $(tail -2 "$CACHE/fmfs.log")"
[ "$(cat "$MNT/kk")" = before ] || fail "the mount stopped serving when its keeper died"
expect_exit 1 "keeper is gone: it cannot be restarted" $FMFS restart "$MNT"
$FMFS flush --wait "$MNT" >/dev/null || fail "flush without a keeper"
kill -9 "$(stat_of daemon_pid)"
# a request in flight as the connection ends gets ECONNABORTED ("Software
# caused connection abort"); the ended mount then answers ENOTCONN
for _ in $(seq 50); do
	if ! timeout 5 ls "$MNT" >/dev/null 2>err &&
		! grep -q "connection abort" err; then
		break
	fi
	sleep 0.1
done
grep -q "not connected" err || fail "a daemon without its keeper killed: $(cat err)"
$FMFS umount "$MNT" || fail "umount of the ended mount"
[ "$(awsx s3 cp "s3://$B/kk" -)" = before ] || fail "kk is not in the bucket"

note "SIGTERM of a daemon unmounts cleanly (libfabric's PSM providers' handlers exit(1))"
mnt
kill -TERM "$(stat_of daemon_pid)"
for _ in $(seq 100); do mountpoint -q "$MNT" || break; sleep 0.1; done
mountpoint -q "$MNT" && fail "SIGTERM left the mount in place"
# The daemon closes its cache after the unmount: give it 10 s.
for _ in $(seq 100); do pgrep -f "fmfs mount s3://$B " >/dev/null || break; sleep 0.1; done
pgrep -f "fmfs mount s3://$B " && fail "an fmfs process is left"
echo "keeper ok"
