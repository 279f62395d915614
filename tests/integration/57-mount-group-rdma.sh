#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The cache group's RDMA data plane (docs/cluster-cache.md,
# "Transport interface and RDMA"): the same one-sided code that takes
# libfabric's verbs provider on an RDMA network, run here through its
# tcp;ofi_rxm provider on loopback (this machine has no RDMA device).
#   - Three mounts with --peer-transport 'tcp;ofi_rxm' read a dataset;
#     the gateway serves it once, and the runs came one-sided (status:
#     peer_transport, peer_rma_reads), every copy byte-exact.
#   - kill -9 of an owner while others pull from it: the reader finishes
#     byte-exact from the bucket, and shows the owner down.
#   - A member leaves (unmounted, then taken out of the list file): the
#     bucket then serves each remaining member exactly the runs it owns
#     among the two (computed here by the placement rule); the runs that
#     moved are the leaver's third.
#   - A mount whose transport cannot be had exits 2 naming it; a member
#     on plain TCP still reads from the RDMA members (inline answers).
set -euo pipefail
# gateway: own   (it counts the gateway's bytes (get_b); tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup grouprdma
no_keeper # it kills the daemon: what a mount without a keeper does
command -v ceph >/dev/null || { echo "SKIP: no ceph CLI for the gateway's counters"; exit 77; }
. "$TOP/tests/lib/group.sh"
PROV='tcp;ofi_rxm'
PA=$(free_port); PB=$(free_port); PC=$(free_port); PD=$(free_port)
printf '127.0.0.1:%s\n127.0.0.1:%s\n127.0.0.1:%s\n' "$PA" "$PB" "$PC" >peers
head -c 32 /dev/urandom | base64 >secret
mkdir -p a b c d
trap 'for m in a b c d; do unmount_quietly "$TEST_DIR/$m"; done; cleanup_common' EXIT

note "a transport that cannot be had"
if $FMFS mount "s3://$B" a --cache-dir ca --peers peers --peer-listen "127.0.0.1:$PA" \
	--peer-secret-file secret --peer-transport "$PROV" 2>err; then
	$FMFS umount a
else
	grep -q "built without libfabric" err && { echo "SKIP: fmfs built without libfabric"; exit 77; }
	cat err >&2; fail "a mount with --peer-transport $PROV failed"
fi
expect_exit 2 "peer-transport no-such-provider: libfabric: no provider no-such-provider" \
	$FMFS mount "s3://$B" a --cache-dir ca --peers peers --peer-listen "127.0.0.1:$PA" \
	--peer-secret-file secret --peer-transport no-such-provider
! mountpoint -q a || fail "a bad transport left a mount"
rm -rf ca

mkdir -p data
for i in 1 2 3 4; do random_file "data/f$i" 16; done
awsx s3 cp --quiet --recursive data "s3://$B/data/"
DATA=$((4 * 16 * 1024 * 1024))

gmount() { # DIR PORT [TRANSPORT]
	$FMFS mount "s3://$B" "$1" --cache-dir "c$1" --peers peers \
		--peer-listen "127.0.0.1:$2" --peer-secret-file secret \
		--peer-timeout 1000 --refresh 1 --peer-transport "${3:-$PROV}" ||
		fail "mount of $1 failed"
}
gmount a "$PA"; gmount b "$PB"; gmount c "$PC"

note "a dataset read on all three, runs pulled one-sided"
g0=$(get_b)
for m in a b c; do
	for i in 1 2 3 4; do
		cmp "data/f$i" "$m/data/f$i" || fail "$m/data/f$i differs"
	done
done
g1=$(get_b)
ratio=$(python3 -c "print(round(($g1 - $g0) / $DATA, 3))")
note "bucket bytes served (gateway's count) / dataset: $ratio"
python3 -c "import sys; sys.exit(0 if 0.99 <= $ratio <= 1.1 else 1)" ||
	fail "the group read the bucket $ratio times the dataset"
for m in a b c; do
	MNT=$TEST_DIR/$m
	note "$m: transport $(stat_of peer_transport), rma reads $(stat_of peer_rma_reads), peer_hits $(stat_of peer_hits), served $(stat_of peer_served)"
	[ "$(stat_of peer_transport)" = "$PROV" ] || fail "$m's transport is not $PROV"
	[ "$(stat_of peer_rma_reads)" = "$(stat_of peer_hits)" ] ||
		fail "$m got runs from peers other than one-sided"
done
check_served data/f1,data/f2,data/f3,data/f4 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" -- \
	"$TEST_DIR/a" "$TEST_DIR/b" "$TEST_DIR/c"
MNT=$TEST_DIR/c
# Unless c owns every run (about 1 in 2000 port draws).
[ "$(owned_bytes 2 data/f1,data/f2,data/f3,data/f4 "127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC")" = "$DATA" ] ||
	[ "$(stat_of peer_hits)" -gt 0 ] || fail "c got nothing from its peers"
[ "$(stat_of peer_fallbacks)" = 0 ] || fail "c fell back to the bucket"

note "without --peer-keep-local each member keeps only the runs it owns"
sleep 1
i=0
for m in a b c; do
	owned=$(owned_bytes $i data/f1,data/f2,data/f3,data/f4 \
		"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC")
	MNT=$TEST_DIR/$m
	note "$m: cache_used_bytes $(stat_of cache_used_bytes), owns $owned, dropped $(stat_of peer_dropped) blocks"
	[ "$(stat_of cache_used_bytes)" = "$owned" ] ||
		fail "$m keeps $(stat_of cache_used_bytes) bytes, not the $owned it owns"
	i=$((i + 1))
done

note "a member on plain TCP reads from the RDMA members"
printf '127.0.0.1:%s\n' "$PD" >>peers
wait_members 4 a b c
gmount d "$PD" tcp
g0=$(get_b)
for i in 1 2 3 4; do cmp "data/f$i" "d/data/f$i" || fail "d/data/f$i differs"; done
g1=$(get_b)
# What changed owner with the list (d's own units, and the few that
# found room elsewhere) comes from the bucket once.
owned=$(B=$B python3 "$TOP/tests/lib/placement.py" moved \
	data/f1,data/f2,data/f3,data/f4 3 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC" "127.0.0.1:$PD")
MNT=$TEST_DIR/d
note "d (tcp): peer_hits $(stat_of peer_hits), rma reads $(stat_of peer_rma_reads); bucket $((g1 - g0)), changed owner $owned"
[ "$(stat_of peer_transport)" = tcp ] || fail "d's transport is not tcp"
[ "$(stat_of peer_hits)" -gt 0 ] || fail "d got nothing from the RDMA members"
[ "$(stat_of peer_rma_reads)" = 0 ] || fail "d, on tcp, counted one-sided reads"
about $((g1 - g0)) "$owned" ||
	fail "d's read made the bucket serve $((g1 - g0)) bytes, expected the $owned that changed owner"
$FMFS umount d || fail "umount d"
printf '127.0.0.1:%s\n127.0.0.1:%s\n127.0.0.1:%s\n' "$PA" "$PB" "$PC" >peers
wait_members 3 a b c

note "kill -9 of an owner mid-read"
# A 128 MiB object whose last run c owns (placement computed here): a
# reads 16 MiB, c dies, a reads on; its readahead (at most 64 MiB ahead)
# cannot have asked c for the last run before the kill.
upload_big_at data/big data/big 128 2 "127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC"
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
stat_of peers | grep -q "127.0.0.1:$PC down" || fail "a's status does not show c down"

note "a member leaves: its runs move to the two that stay"
# c is dead (above).  With the list still naming it, each reader would
# fall back to the bucket for c's runs on its own: the bucket would
# serve them twice.  With c taken out, they belong to a or b, and the
# bucket serves the new files once.
printf '127.0.0.1:%s\n127.0.0.1:%s\n' "$PA" "$PB" >peers
wait_members 2 a b
for i in 5 6 7; do random_file "data/f$i" 32; done
for i in 5 6 7; do awsx s3 cp --quiet "data/f$i" "s3://$B/data/f$i"; done
sleep 1.5
three_c=$(owned_bytes 2 data/f5,data/f6,data/f7 \
	"127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PC")
MNT=$TEST_DIR/a; fa=$(stat_of peer_fallbacks)
MNT=$TEST_DIR/b; fb=$(stat_of peer_fallbacks)
g0=$(get_b)
for i in 5 6 7; do cmp "data/f$i" "b/data/f$i" || fail "b/data/f$i differs"; done
for i in 5 6 7; do cmp "data/f$i" "a/data/f$i" || fail "a/data/f$i differs"; done
g1=$(get_b)
NEW=$((3 * 32 * 1024 * 1024))
note "new files, $NEW bytes: c owned $three_c of them among three (they moved); the bucket served $((g1 - g0))"
about $((g1 - g0)) "$NEW" ||
	fail "the bucket served $((g1 - g0)) bytes for $NEW of new files after c left"
MNT=$TEST_DIR/a
[ "$(stat_of group_members)" = 2 ] || fail "a's status does not count 2 members"
[ "$(stat_of peer_fallbacks)" = "$fa" ] || fail "a fell back to the bucket after c left the list"
MNT=$TEST_DIR/b
[ "$(stat_of peer_fallbacks)" = "$fb" ] || fail "b fell back to the bucket after c left the list"

for m in a b; do $FMFS umount "$TEST_DIR/$m" || fail "umount $m"; done
echo "cache group over RDMA (tcp;ofi_rxm) ok"
