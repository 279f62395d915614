#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The file:// store on its own (no gateway needed): (a) crash debris: an
# `fmfs obj put` killed with -9 in the middle of a large upload leaves
# its temporary file and upload directory under .fmfs/; the next open of
# the store removes them, while another upload, live but stopped
# (SIGSTOP) at the same moment, is not disturbed and completes; (b)
# objects keep the mode of the file: a file created 0600 through a mount
# is 0600 in the store, 0644 stays 0644; (c) a change made beside the
# mount that keeps the size and the mtime (rsync -t, touch -r) is read;
# (d) the store's own .fmfs cannot be made through a mount (EPERM);
# (e) a store directory removed and made again under a live mount;
# (f) a directory made through a mount stays when its last file goes;
# (g) past --memory-inodes the kernel drops names, the oldest first, and
# an open file keeps its inode.
. "$TOP/tests/lib/common.sh"

cd "$TEST_DIR"
S=$TEST_DIR/store
mkdir -p "$S"
MIB=$((1024 * 1024))
PIDS=()
# fd 7: a file held open on the mount (the --memory-inodes step); closed
# first, or a failure there would leave the mount busy
trap 'exec 7<&- 2>/dev/null || true
      for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
      unmount_quietly "$TEST_DIR/mnt"; cleanup_common' EXIT

# debris: the entries under .fmfs/tmp and .fmfs/uploads, one a line.
debris() {
	[ -d "$S/.fmfs" ] || return 0
	(cd "$S/.fmfs" && find tmp uploads -mindepth 1 -maxdepth 1 | sort)
}
debris_bytes() {
	du -sb "$S/.fmfs" | cut -f1
}

# start_caught SRC KEY PHASE: starts `fmfs obj put SRC file://$S/KEY` and
# stops it (SIGSTOP) once it is in PHASE: "parts" (its upload directory
# holds a part) or "tmp" (completing: its temporary file passed 1 MiB);
# its entries are named by its pid (docs/objstore.md).  Sets CAUGHT to
# its pid; returns 1 if it finished first.
start_caught() {
	local src=$1 key=$2 phase=$3 pid pat st
	"$FMFS" obj put --part-size 8M --parallel 2 "$src" "file://$S/$key" &
	pid=$!
	PIDS+=("$pid")
	# ("l." since entries are locked; an older fmfs named them without)
	case $phase in
	parts) pat="uploads/l.$(printf %x "$pid").*/00001 uploads/$(printf %x "$pid").*/00001" ;;
	tmp) pat="tmp/l.$pid.* tmp/$pid.*" ;;
	esac
	pat=$(for p in $pat; do printf '%s ' "$S/.fmfs/$p"; done)
	while kill -0 "$pid" 2>/dev/null; do
		# shellcheck disable=SC2086
		if [ -n "$(find $pat -size +1M 2>/dev/null)" ]; then
			kill -STOP "$pid" 2>/dev/null
			break
		fi
		sleep 0.01
	done
	# SIGSTOP takes effect asynchronously; a zombie takes signals too.
	for _ in $(seq 500); do
		st=$(ps -o stat= -p "$pid" 2>/dev/null) || st=gone
		case $st in
		T*) CAUGHT=$pid; return 0 ;;
		Z*|gone) wait "$pid" 2>/dev/null || true; return 1 ;;
		esac
		sleep 0.01
	done
	fail "fmfs obj put (pid $pid) neither stopped nor ended: $st"
}

note "kill -9 in the middle of an upload, beside a live one"
random_file big1.bin 96
random_file big2.bin 96
caught=
for try in 1 2 3; do
	if start_caught big1.bin live.bin parts; then
		caught=1
		break
	fi
	note "try $try: the upload ended before it was caught; again"
done
[ -n "$caught" ] || fail "could not stop an upload in its parts phase"
LIVE=$CAUGHT
live_debris=$(debris)
[ -n "$live_debris" ] || fail "the live upload has no upload directory"
caught=
for try in 1 2 3; do
	if start_caught big2.bin dead.bin tmp; then
		caught=1
		break
	fi
	note "try $try: the upload ended before it was caught; again"
done
[ -n "$caught" ] || fail "could not stop an upload while it completes"
kill -9 "$CAUGHT"
wait "$CAUGHT" 2>/dev/null || true
dead_debris=$(comm -13 <(echo "$live_debris") <(debris))
echo "$dead_debris" | grep -q '^tmp/' || fail "no temporary file left by the killed upload: $(debris)"
echo "$dead_debris" | grep -q '^uploads/' || fail "no upload directory left by the killed upload: $(debris)"
note "the killed upload left $(echo "$dead_debris" | wc -l) entries, $(($(debris_bytes) / MIB)) MiB under .fmfs (with the live one's)"

# The next upload (an open of the store) sweeps.
echo small >small.txt
$FMFS obj put small.txt "file://$S/next.txt" || fail "the next upload failed"
[ "$(debris)" = "$live_debris" ] ||
	fail "after the next upload: expected only the live upload's debris ($live_debris), found: $(debris)"
kill -CONT "$LIVE"
wait "$LIVE" || fail "the live upload failed after the sweep"
same_file big1.bin "$S/live.bin"
[ ! -e "$S/dead.bin" ] || fail "the killed upload's object exists"
[ -z "$(debris)" ] || fail "debris left after every upload ended: $(debris)"

note "an older fmfs's debris (not locked) goes only when an hour old"
mkdir -p "$S/.fmfs/uploads/3039.0.5f5e1000" "$S/.fmfs/uploads/3039.1.5f5e1000"
head -c 1000 /dev/zero >"$S/.fmfs/uploads/3039.0.5f5e1000/00001"
head -c 1000 /dev/zero >"$S/.fmfs/uploads/3039.1.5f5e1000/00001"
head -c 1000 /dev/zero >"$S/.fmfs/tmp/12345.0"
head -c 1000 /dev/zero >"$S/.fmfs/tmp/12345.1"
touch -d '2 hours ago' "$S/.fmfs/uploads/3039.0.5f5e1000/00001" \
	"$S/.fmfs/uploads/3039.0.5f5e1000" "$S/.fmfs/tmp/12345.0"
$FMFS obj ls "file://$S/" >/dev/null || fail "ls of the store"
[ "$(debris | tr '\n' ' ')" = "tmp/12345.1 uploads/3039.1.5f5e1000 " ] ||
	fail "old debris: expected only the fresh entries left, found: $(debris)"
rm -rf "$S/.fmfs/uploads/3039.1.5f5e1000" "$S/.fmfs/tmp/12345.1"

note "objects keep the file's mode (through a mount)"
if [ ! -e /dev/fuse ]; then
	note "skipped: no /dev/fuse"
	exit 0
fi
MNT=$TEST_DIR/mnt
mkdir -p "$MNT" "$S/m"
$FMFS mount "file://$S/m" "$MNT" --cache-dir "$TEST_DIR/cache" ||
	fail "mount of file://$S/m failed (see $TEST_DIR/cache/fmfs.log)"
(umask 077 && echo private >"$MNT/private.txt")
(umask 022 && echo public >"$MNT/public.txt")
echo chmodded >"$MNT/later.txt"
chmod 0640 "$MNT/later.txt"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait"
$FMFS umount "$MNT" || fail "umount"
for f in private.txt:600 public.txt:644 later.txt:640; do
	got=$(stat -c %a "$S/m/${f%%:*}")
	[ "$got" = "${f#*:}" ] || fail "${f%%:*} is $got in the store, expected ${f#*:}"
done
note "0600, 0644 and 0640 files are 0600, 0644 and 0640 in the store"

note "a change that keeps the size and the mtime (rsync -t, an edit then touch -r) is seen"
mkdir -p "$S/e"
printf aaaa >"$S/e/f"
touch -r "$S/e/f" "$TEST_DIR/ref"
$FMFS mount "file://$S/e" "$MNT" --cache-dir "$TEST_DIR/cache-e" --refresh 1 ||
	fail "mount of file://$S/e failed"
[ "$(cat "$MNT/f")" = aaaa ] || fail "first read"
printf bbbb >"$S/e/.f.tmp"
touch -r "$TEST_DIR/ref" "$S/e/.f.tmp"
mv "$S/e/.f.tmp" "$S/e/f" # as rsync -t does
sleep 2
[ "$(cat "$MNT/f")" = bbbb ] || fail "a file replaced with the same size and mtime reads $(cat "$MNT/f")"
printf cccc | dd of="$S/e/f" conv=notrunc status=none
touch -r "$TEST_DIR/ref" "$S/e/f"
sleep 2
[ "$(cat "$MNT/f")" = cccc ] || fail "a file edited in place, its mtime put back, reads $(cat "$MNT/f")"
$FMFS umount "$MNT" || fail "umount"

note "a file:// listing says which objects keep no metadata: no HEAD for them, one for those that do"
mkdir -p "$S/h"
printf plain >"$S/h/plain"
printf stored >"$S/h/stored"
: >"$S/h/empty"
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.fmfs.meta.mtime", b"1000000000")' \
	"$S/h/stored" || fail "setxattr on the store's file"
$FMFS mount "file://$S/h" "$MNT" --cache-dir "$TEST_DIR/cache-h" ||
	fail "mount of file://$S/h failed"
ls -l "$MNT" >/dev/null || fail "ls -l"
for _ in $(seq 100); do
	[ "$($FMFS status "$MNT" | awk '$1 == "heads_waiting:" {print $2}')" = 0 ] && break
	sleep 0.1
done
behind=$($FMFS status "$MNT" | awk '$1 == "head_requests_behind_listings:" {print $2}')
[ "$behind" = 1 ] || fail "HEADs behind the listing: $behind, expected 1 (stored only)"
heads=$($FMFS status "$MNT" | awk '$1 == "head_requests:" {print $2}')
sleep 1.2 # the provisional attributes' kernel timeout
[ "$(stat -c %Y "$MNT/stored")" = 1000000000 ] ||
	fail "the stored mtime is not shown: $(stat -c %Y "$MNT/stored")"
[ "$(stat -c %Y "$MNT/plain")" = "$(stat -c %Y "$S/h/plain")" ] ||
	fail "plain's mtime $(stat -c %Y "$MNT/plain") is not the store's"
[ -f "$MNT/empty" ] || fail "a zero-byte object without metadata is not a file"
[ "$($FMFS status "$MNT" | awk '$1 == "head_requests:" {print $2}')" = "$heads" ] ||
	fail "stat asked more HEADs"
$FMFS umount "$MNT" || fail "umount"

note "the store's own .fmfs/ cannot be made through the mount (EPERM), and nothing is left queued"
$FMFS mount "file://$S/e" "$MNT" --cache-dir "$TEST_DIR/cache-e" || fail "mount of file://$S/e failed"
mkdir "$MNT/.fmfs" 2>"$TEST_DIR/err" && fail "mkdir .fmfs through the mount succeeded"
grep -q "Operation not permitted" "$TEST_DIR/err" || fail "mkdir .fmfs: $(cat "$TEST_DIR/err")"
(echo x >"$MNT/.fmfs") 2>/dev/null && fail "creating .fmfs through the mount succeeded"
(echo x >"$MNT/.fmfs/x") 2>/dev/null && fail "creating .fmfs/x through the mount succeeded"
echo y >"$MNT/.fmfsx" || fail ".fmfsx is an ordinary name"
mv "$MNT/.fmfsx" "$MNT/.fmfs" 2>/dev/null && fail "a rename onto .fmfs succeeded"
$FMFS flush --wait "$MNT" || fail "flush --wait after the refused names"
[ "$(cat "$S/e/.fmfsx")" = y ] || fail ".fmfsx is not in the store"
$FMFS umount "$MNT" || fail "umount"

note "the store directory removed beside a live mount: flush names why; made again, uploads resume"
mkdir -p "$S/r"
$FMFS mount "file://$S/r" "$MNT" --cache-dir "$TEST_DIR/cache-r" --async-delay 0 ||
	fail "mount of file://$S/r failed"
echo a >"$MNT/a"
$FMFS flush --wait "$MNT" || fail "first flush"
rm -rf "$S/r"
echo b >"$MNT/b"
expect_exit 1 "b: .*the store directory was removed \(make it again with mkdir -p\)" \
	$FMFS flush --wait "$MNT"
mkdir "$S/r"
echo c >"$MNT/c"
$FMFS flush --wait "$MNT" || fail "flush after the store directory was made again"
[ "$(cat "$S/r/b")$(cat "$S/r/c")" = bc ] || fail "b and c are not in the store made again"
$FMFS umount "$MNT" || fail "umount"

note "a directory made through the mount stays when its last file goes (its marker is its own), and then rmdir takes it"
mkdir -p "$S/m"
$FMFS mount "file://$S/m" "$MNT" --cache-dir "$TEST_DIR/cache-m" --async-delay 0 ||
	fail "mount of file://$S/m failed"
mkdir "$MNT/d" "$MNT/d/e" && echo a >"$MNT/d/e/a" && echo b >"$MNT/d/b" || fail "mkdir and files"
$FMFS flush --wait "$MNT" || fail "flush of d/"
rm "$MNT/d/e/a" "$MNT/d/b" || fail "rm of the files"
$FMFS flush --wait "$MNT" || fail "flush of the removals"
[ -d "$S/m/d/e" ] || fail "d/e/ went from the store with its last file"
$FMFS umount "$MNT" || fail "umount"
$FMFS mount "file://$S/m" "$MNT" --cache-dir "$TEST_DIR/cache-m" --async-delay 0 ||
	fail "remount of file://$S/m failed"
[ "$(ls "$MNT/d")" = e ] || fail "d/ after a remount: '$(ls "$MNT/d")', not e"
rmdir "$MNT/d/e" "$MNT/d" || fail "rmdir of the emptied directories"
$FMFS flush --wait "$MNT" || fail "flush of the rmdirs"
[ -e "$S/m/d" ] && fail "d/ is still in the store after rmdir"
$FMFS umount "$MNT" || fail "umount"

note "--memory-inodes: past the bound the kernel is asked to drop names, the oldest first, down to 90%; an open file's inode stays"
B=$S/bound
mkdir -p "$B/a" "$B/b"
for i in $(seq -w 1 700); do : >"$B/a/f$i"; : >"$B/b/f$i"; done
echo kept >"$B/a/open"
$FMFS mount "file://$B" "$MNT" --cache-dir "$TEST_DIR/cache-bound" --memory-inodes 1000 ||
	fail "mount of file://$B with --memory-inodes 1000 failed"
exec 7<"$MNT/a/open"
ino_open=$(stat -c %i "$MNT/a/open")
stat -c '%n %i' "$MNT"/a/f* >"$TEST_DIR/ino-a" # the oldest names
stat -c '%n %i' "$MNT"/b/f* >"$TEST_DIR/ino-b" # the latest
field() { $FMFS status "$MNT" | awk -v f="$1:" '$1 == f {print $2}'; }
for _ in $(seq 100); do
	[ "$(field inodes)" -le 1000 ] && break
	sleep 0.1
done
inodes=$(field inodes)
[ "$inodes" -le 1000 ] || fail "the daemon holds $inodes inodes, over --memory-inodes 1000"
[ "$(field inodes_trimmed)" -ge 400 ] || fail "inodes_trimmed is $(field inodes_trimmed), not at least 400 (1,403 names looked up, bound 1000)"
# a name dropped is looked up again (a new node id); one kept is not
stat -c '%n %i' "$MNT"/a/f* | diff -q - "$TEST_DIR/ino-a" >/dev/null &&
	fail "a/'s names, the oldest, kept their node ids: nothing dropped the oldest first"
tail -300 "$TEST_DIR/ino-b" >"$TEST_DIR/ino-b-last"
stat -c '%n %i' $(awk '{print $1}' "$TEST_DIR/ino-b-last") | diff - "$TEST_DIR/ino-b-last" ||
	fail "the 300 names looked up last lost their node ids: the trim did not take the oldest first"
[ "$(stat -c %i "$MNT/a/open")" = "$ino_open" ] || fail "the open file's inode was dropped"
[ "$(cat <&7)" = kept ] || fail "the open file reads wrong after the trim"
exec 7<&-
[ "$(find "$MNT" -type f | wc -l)" = 1401 ] || fail "find after the trim does not see the 1,401 files"
$FMFS umount "$MNT" || fail "umount"
