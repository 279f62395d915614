#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A deleted or renamed-away name never comes back after a crash
# (docs/cache-format.md, "Replay"): with --async-delay 0, final.tmp is
# written and closed (its upload starts at once), renamed to final or
# removed, then created again with O_TRUNC and written without a close;
# the daemon is killed (kill -9) half a second later.  After a remount and
# `fmfs flush --wait` neither the mount nor the store (read without fmfs:
# the file:// store's directory, the aws CLI for the gateway) may show
# final.tmp with its first bytes: the new final.tmp was never closed, so
# it is gone (moved to lost+found/) or holds its new bytes, and final
# holds the first bytes after a rename.
. "$TOP/tests/lib/common.sh"

mount_setup crashnames
no_keeper # it kills the daemon: what a mount without a keeper does
FS=$TEST_DIR/store
mkdir -p "$FS"
trap 'pkill -9 -f "crashnames-writer $TEST_DIR" || true; unmount_quietly "$MNT"; cleanup_common' EXIT

# writer MNT HOW: the sequence above; waits, the new file open, until
# killed.
writer() {
	python3 - "$1" "$2" crashnames-writer "$TEST_DIR" <<'EOF' &
import os, sys, time
mnt, how = sys.argv[1], sys.argv[2]
tmp, fin = os.path.join(mnt, "final.tmp"), os.path.join(mnt, "final")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"first " * 2000)
os.close(fd)
if how == "rename":
    os.rename(tmp, fin)
else:
    os.unlink(tmp)
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"second " * 1000)
open(sys.argv[4] + "/written", "w").close()
time.sleep(3600)
EOF
	wpid=$!
}

# trial URL READ HOW: one crash; READ KEY prints the store's object KEY
# (nothing if there is none).
trial() {
	local url=$1 read=$2 how=$3 pid got
	rm -rf "$CACHE" "$TEST_DIR/written"
	$FMFS mount "$url" "$MNT" --cache-dir "$CACHE" --async-delay 0 ||
		fail "mount failed"
	writer "$MNT" "$how"
	for _ in $(seq 100); do [ -e "$TEST_DIR/written" ] && break; sleep 0.05; done
	[ -e "$TEST_DIR/written" ] || fail "the writer did not get through ($how)"
	sleep 0.5
	pid=$(pgrep -f "fmfs mount $url $MNT" | head -1)
	[ -n "$pid" ] || fail "no daemon"
	kill -9 "$pid"
	kill -9 "$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
	$FMFS umount "$MNT" >/dev/null 2>&1 || true
	$FMFS mount "$url" "$MNT" --cache-dir "$CACHE" ||
		fail "remount after the crash failed"
	$FMFS flush --wait "$MNT" >"$TEST_DIR/flush.out" 2>&1 ||
		fail "flush --wait after the crash ($how): $(cat "$TEST_DIR/flush.out")"
	if [ -e "$MNT/final.tmp" ] && grep -q first "$MNT/final.tmp"; then
		fail "$how: final.tmp is back in the mount with its first bytes"
	fi
	got=$($read final.tmp | head -c 5)
	[ "$got" != first ] ||
		fail "$how: final.tmp is back in the store with its first bytes"
	if [ "$how" = rename ]; then
		cmp -s <(printf 'first %.0s' $(seq 2000)) "$MNT/final" ||
			fail "rename: final does not hold the first bytes"
		got=$($read final | head -c 5)
		[ "$got" = first ] || fail "rename: final is not in the store"
	fi
	$FMFS umount "$MNT" || fail "umount failed"
}

file_read() { [ -f "$FS/$1" ] && cat "$FS/$1"; true; }
s3_read() { awsx s3 cp --quiet "s3://$B/$1" - 2>/dev/null; true; }
n=${FMFS_CRASHNAMES_TRIALS:-6}
for how in rename unlink; do
	note "file://: $n crashes after $how and create again"
	for i in $(seq "$n"); do
		rm -rf "${FS:?}"/* "$FS"/.fmfs
		trial "file://$FS" file_read "$how"
	done
done
for how in rename unlink; do
	note "gateway: a crash after $how and create again"
	for i in 1; do
		awsx s3 rm --quiet --recursive "s3://$B/"
		trial "s3://$B" s3_read "$how"
	done
done
echo "crash names ok"
