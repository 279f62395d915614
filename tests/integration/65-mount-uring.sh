#!/bin/bash
# SPDX-License-Identifier: MIT
#
# FUSE over io_uring (fs/uring.c, docs/fuse-uring.md).  The kernel offers
# it only with the fuse module's enable_uring set; the test sets it (root)
# and puts back what it found.  With it on, a default mount takes its
# requests by the ring (`fmfs status`: transport io_uring, the requests
# counted there) and everything is checked byte for byte against the aws
# CLI: cold and warm reads, 4 readers and 4 writers at once, 1000 files
# created and listed, a rename, an unlink, a flush --wait and an unmount
# that leaves no process behind.  --no-uring and enable_uring off both
# give the /dev/fuse transport.  Where the kernel has no FUSE over
# io_uring (no enable_uring parameter) or we are not root, only that
# fallback is checked.
# exclusive: it sets the fuse module's enable_uring, which every mount reads
. "$TOP/tests/lib/common.sh"

P=/sys/module/fuse/parameters/enable_uring
OLD=
restore() {
	if [ -n "$OLD" ]; then echo "$OLD" >"$P" 2>/dev/null || true; fi
}
mount_setup uring
no_keeper # a kept mount takes its requests from /dev/fuse (docs/keeper.md "The ring")
mkdir -p data
trap 'unmount_quietly "$MNT"; restore; cleanup_common' EXIT

read_all() {
	local f
	for f in data/*; do
		cmp "$f" "$MNT/$f" || fail "$f read wrong through the mount"
	done
}
transport_is() { # WANT WHY
	local t
	t=$(stat_of transport)
	[ "$t" = "$1" ] || fail "$2: transport $t, not $1"
}

random_file data/a 9
random_file data/b 3
head -c 1000 /dev/urandom >data/small
awsx s3 cp --quiet --recursive data "s3://$B/data/"

if [ ! -e "$P" ] || [ "$(id -u)" != 0 ]; then
	note "no FUSE over io_uring here (Linux $(uname -r), uid $(id -u)): the /dev/fuse fallback only"
	mnt
	read_all
	transport_is dev-fuse "a kernel without it"
	$FMFS umount "$MNT" || fail "umount failed"
	echo "uring ok (not offered)"
	exit 0
fi
OLD=$(cat "$P")

note "enable_uring off: the kernel does not offer it, /dev/fuse"
echo N >"$P"
mnt
transport_is dev-fuse "enable_uring off"
[ "$(stat_of uring_offered)" = False ] || fail "offered with enable_uring off"
$FMFS umount "$MNT" || fail "umount failed"

echo Y >"$P"
note "on: a cold mount reads through the rings"
mnt
transport_is io_uring "enable_uring on"
rings=$(stat_of uring_rings)
[ "$rings" -ge "$(getconf _NPROCESSORS_CONF)" ] ||
	fail "$rings rings for $(getconf _NPROCESSORS_CONF) CPUs"
read_all
n1=$(stat_of uring_requests)
[ "$n1" -gt 10 ] || fail "only $n1 requests came by the ring"
note "$rings rings, $n1 requests by the ring after the cold read"

note "4 readers and 4 writers at once"
for j in 1 2 3 4; do
	random_file "w$j" 2
done
pids=()
for j in 1 2 3 4; do
	(cmp data/a "$MNT/data/a" && cmp data/b "$MNT/data/b") >"r$j.log" 2>&1 &
	pids+=($!)
	(cp "w$j" "$MNT/w$j" && cmp "w$j" "$MNT/w$j") >"c$j.log" 2>&1 &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || fail "a reader or writer failed: $(cat r*.log c*.log)"
done

note "1000 files created, listed, one renamed and one removed"
mkdir "$MNT/many" || fail "mkdir"
for i in $(seq 1000); do echo "$i" >"$MNT/many/f$i"; done ||
	fail "creating 1000 files"
[ "$(ls "$MNT/many" | wc -l)" = 1000 ] || fail "ls shows $(ls "$MNT/many" | wc -l)"
[ "$(cat "$MNT/many/f777")" = 777 ] || fail "f777 reads $(cat "$MNT/many/f777")"
mv "$MNT/many/f1" "$MNT/many/g1" || fail "rename"
rm "$MNT/many/f2" || fail "unlink"
$FMFS flush "$MNT" --wait --timeout 120 || fail "flush --wait"
for j in 1 2 3 4; do
	awsx s3 cp --quiet "s3://$B/w$j" "got$j" || fail "w$j not in the bucket"
	cmp "w$j" "got$j" || fail "w$j differs in the bucket"
done
awsx s3 cp --quiet "s3://$B/many/g1" g1 && [ "$(cat g1)" = 1 ] ||
	fail "the renamed file is not in the bucket as written"
n2=$(stat_of uring_requests)
[ "$n2" -gt $((n1 + 3000)) ] || fail "$n2 requests by the ring, from $n1"
note "$n2 requests by the ring"
pid=$(pgrep -f "fmfs mount s3://$B " | head -1)
$FMFS umount "$MNT" || fail "umount failed"
if [ -n "$pid" ]; then
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$pid" 2>/dev/null || fail "the daemon is still running after umount"
fi

note "--no-uring: /dev/fuse, the same bytes"
mnt --no-uring
transport_is dev-fuse "--no-uring"
[ "$(stat_of uring_offered)" = False ] || fail "--no-uring, yet offered"
read_all
for j in 1 2 3 4; do cmp "w$j" "$MNT/w$j" || fail "w$j after remount"; done
$FMFS umount "$MNT" || fail "umount failed"
echo "uring ok"
