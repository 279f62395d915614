#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The cache group (docs/cluster-cache.md): three mounts of one
# bucket on this machine, separate cache dirs, peer ports on loopback.
#   - A dataset read fully on all three comes from the bucket about once:
#     counted at the gateway (RGW's own get_b counter, through its admin
#     socket), not by fmfs; every copy byte-exact.
#   - Status says who served whom.
#   - The list is a file: a fourth member written into it joins the
#     running three; the runs it owns (computed here, independently, by
#     the placement rule of docs/cluster-cache.md) are exactly what the
#     bucket serves when it reads the dataset.
#   - fmfs prefetch on one member: the file comes from the bucket once,
#     and the others then read it from the group.
#   - An object overwritten in the bucket is read as its new version on a
#     member whose peer holds the old one.
#   - kill -9 of a member mid-read: the reader finishes byte-exact from
#     the bucket.
#   - A member with the wrong secret gets nothing from the group (and
#     still reads correctly from the bucket).
#   - Bad group options: exit 2 and a message naming what is wrong.
# gateway: own   (it counts the gateway's bytes (get_b); tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup group
no_keeper # it kills the daemon: what a mount without a keeper does
command -v ceph >/dev/null || { echo "SKIP: no ceph CLI for the gateway's counters"; exit 77; }
. "$TOP/tests/lib/group.sh"

PA=$(free_port); PB=$(free_port); PC=$(free_port); PD=$(free_port)
PEERS=127.0.0.1:$PA,127.0.0.1:$PB,127.0.0.1:$PC
printf '# the group\n127.0.0.1:%s\n127.0.0.1:%s\n127.0.0.1:%s\n' "$PA" "$PB" "$PC" >peers
head -c 32 /dev/urandom | base64 >secret
head -c 32 /dev/urandom | base64 >wrong
mkdir -p a b c d e
trap 'for m in a b c d e; do unmount_quietly "$TEST_DIR/$m"; done; cleanup_common' EXIT

note "bad group options"
expect_exit 2 "needs --peers, --peer-listen and --peer-secret-file" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "$PEERS" --peer-listen "127.0.0.1:$PA"
expect_exit 2 "not one of the members" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "$PEERS" \
	--peer-listen 127.0.0.1:1 --peer-secret-file secret
expect_exit 2 "'127.0.0.1' is not host:port" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "127.0.0.1:$PA,127.0.0.1" \
	--peer-listen "127.0.0.1:$PA" --peer-secret-file secret
expect_exit 2 "more than half of --timeout" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "$PEERS" \
	--peer-listen "127.0.0.1:$PA" --peer-secret-file secret \
	--timeout 4 --peer-timeout 3000
printf short >short
expect_exit 2 "must be 16 to 4096 bytes" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "$PEERS" \
	--peer-listen "127.0.0.1:$PA" --peer-secret-file short
expect_exit 2 "peer-secret-file nothere" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers "$PEERS" \
	--peer-listen "127.0.0.1:$PA" --peer-secret-file nothere
! mountpoint -q a || fail "a bad group option left a mount"

mkdir -p data
for i in 1 2 3 4 5 6; do random_file "data/f$i" 16; done
awsx s3 cp --quiet --recursive data "s3://$B/data/"
DATA=$((6 * 16 * 1024 * 1024))

gmount() { # DIR PORT [SECRET]
	$FMFS mount "s3://$B" "$1" --cache-dir "c$1" --peers peers \
		--peer-listen "127.0.0.1:$2" --peer-secret-file "${3:-secret}" \
		--peer-timeout 1000 --refresh 1 || fail "mount of $1 failed"
}
gmount a "$PA"; gmount b "$PB"; gmount c "$PC"

note "a dataset read on all three"
g0=$(get_b)
for m in a b c; do
	for i in 1 2 3 4 5 6; do
		cmp "data/f$i" "$m/data/f$i" || fail "$m/data/f$i differs"
	done
done
g1=$(get_b)
ratio=$(python3 -c "print(round(($g1 - $g0) / $DATA, 3))")
note "bucket bytes served (gateway's count) / dataset: $ratio (3 separate caches: 3.0)"
python3 -c "import sys; sys.exit(0 if $ratio <= 1.1 else 1)" ||
	fail "the group read the bucket $ratio times the dataset"
python3 -c "import sys; sys.exit(0 if $ratio >= 0.99 else 1)" ||
	fail "the gateway counted less than the dataset ($ratio): the counter is wrong"
for m in a b c; do
	MNT=$TEST_DIR/$m
	note "$m: peer_hits $(stat_of peer_hits) peer_served $(stat_of peer_served) fallbacks $(stat_of peer_fallbacks)"
done
check_served data/f1,data/f2,data/f3,data/f4,data/f5,data/f6 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" -- \
	"$TEST_DIR/a" "$TEST_DIR/b" "$TEST_DIR/c"

MNT=$TEST_DIR/c
# Unless c owns every run (about 1 in 2000 port draws).
[ "$(owned_bytes 2 data/f1,data/f2,data/f3,data/f4,data/f5,data/f6 "127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC")" = "$DATA" ] ||
	[ "$(stat_of peer_hits)" -gt 0 ] || fail "c got nothing from its peers"
[ "$(stat_of peer_fallbacks)" = 0 ] || fail "c fell back to the bucket"

note "a fourth member joins through the list file"
echo "127.0.0.1:$PD" >>peers
wait_members 4 a b c
$FMFS mount "s3://$B" d --cache-dir cd --peers peers --peer-listen "127.0.0.1:$PD" \
	--peer-secret-file secret --peer-timeout 1000 --refresh 1 --peer-keep-local ||
	fail "mount of d failed"
# The bytes whose owner changed with the list (d's own units, and the
# few that found room elsewhere) come from the bucket again, once, by
# the placement rule; the others from their owners.
owned=$(B=$B python3 "$TOP/tests/lib/placement.py" moved \
	data/f1,data/f2,data/f3,data/f4,data/f5,data/f6 3 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" "127.0.0.1:$PD")
downed=$(owned_bytes 3 data/f1,data/f2,data/f3,data/f4,data/f5,data/f6 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" "127.0.0.1:$PD")
[ "$owned" -ge "$downed" ] || fail "placement.py: d's own bytes ($downed) are not among the moved ($owned)"
g0=$(get_b)
for i in 1 2 3 4 5 6; do
	cmp "data/f$i" "d/data/f$i" || fail "d/data/f$i differs"
done
g1=$(get_b)
note "$owned bytes of the dataset changed owner (d owns $downed) by the placement rule; the bucket served $((g1 - g0))"
MNT=$TEST_DIR/d
sleep 1
[ "$(stat_of cache_used_bytes)" = "$DATA" ] ||
	fail "d, with --peer-keep-local, keeps $(stat_of cache_used_bytes) bytes, not the whole $DATA"
[ "$(stat_of peer_dropped)" = 0 ] || fail "d, with --peer-keep-local, dropped blocks"
# get_b may count a byte less per ranged GET (about, tests/lib/group.sh).
about $((g1 - g0)) "$owned" ||
	fail "d's read made the bucket serve $((g1 - g0)) bytes, expected the $owned that changed owner"
check_served data/f1,data/f2,data/f3,data/f4,data/f5,data/f6 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" "127.0.0.1:$PD" -- \
	"$TEST_DIR/a"

note "fmfs prefetch on one member warms the group"
random_file data/pre 32
awsx s3 cp --quiet data/pre "s3://$B/data/pre"
sleep 1.5
g0=$(get_b)
$FMFS prefetch a a/data/pre --wait || fail "prefetch on a failed"
g1=$(get_b)
cmp data/pre b/data/pre || fail "b/data/pre differs"
cmp data/pre d/data/pre || fail "d/data/pre differs"
g2=$(get_b)
note "prefetch: the bucket served $((g1 - g0)) bytes; b and d reading it after: $((g2 - g1))"
about $((g1 - g0)) $((32 * 1024 * 1024)) ||
	fail "the prefetch read $((g1 - g0)) bytes from the bucket, expected the file once"
[ $((g2 - g1)) = 0 ] || fail "b and d read $((g2 - g1)) bytes of a prefetched file from the bucket"

note "an object overwritten in the bucket is read as its new version"
random_file data/f1 16
awsx s3 cp --quiet data/f1 "s3://$B/data/f1"
sleep 1.5
cmp data/f1 b/data/f1 || fail "b read an old version of f1 after the overwrite"
cmp data/f1 c/data/f1 || fail "c read an old version of f1 after the overwrite"

note "kill -9 of a member mid-read"
# The last run of a 128 MiB object placed at c (tests/lib/group.sh): a
# reads 16 MiB, c dies, a reads on and must still ask c.
upload_big_at data/big data/big 128 2 "127.0.0.1:$PA" "127.0.0.1:$PB" \
	"127.0.0.1:$PC" "127.0.0.1:$PD"
sleep 1.5
CPID=$(pgrep -f -- "--peer-listen 127.0.0.1:$PC" | head -1)
[ -n "$CPID" ] || fail "no daemon for c"
t0=$(date +%s)
dd if=a/data/big of=/dev/null bs=1M count=16 status=none || fail "a's first read failed"
kill -9 "$CPID"
timeout 120 cmp data/big a/data/big || fail "a's read failed or differs after c was killed"
note "a read 128 MiB in $(( $(date +%s) - t0 )) s with c killed after 16 MiB"
fusermount3 -uz c 2>/dev/null || true
MNT=$TEST_DIR/a
[ "$(stat_of peer_fallbacks)" -gt 0 ] || fail "a never fell back to the bucket although c died"
note "a's status: $(stat_of peers)"
stat_of peers | grep -q "127.0.0.1:$PC down" || fail "a's status does not show c down"
stat_of peers | grep -q "127.0.0.1:$PB up" || fail "a's status does not show b up"
[ "$(stat_of group_members)" = 4 ] || fail "a's status does not count 4 members"

note "a member with the wrong secret gets nothing from the group"
PE=$(free_port)
$FMFS mount "s3://$B" e --cache-dir ce --peers "$PEERS,127.0.0.1:$PE" \
	--peer-listen "127.0.0.1:$PE" --peer-secret-file wrong \
	--peer-timeout 1000 || fail "mount of e failed"
for i in 2 3 4; do
	cmp "data/f$i" "e/data/f$i" || fail "e/data/f$i differs"
done
MNT=$TEST_DIR/e
[ "$(stat_of peer_hits)" = 0 ] || fail "e, with the wrong secret, got runs from the group"
[ "$(stat_of peer_fallbacks)" -gt 0 ] || fail "e never asked the group"

for m in a b d e; do $FMFS umount "$TEST_DIR/$m" || fail "umount $m"; done
echo "cache group ok"
