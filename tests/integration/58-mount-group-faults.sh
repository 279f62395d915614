#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The cache group against a member that answers wrongly
# (docs/cluster-cache.md "Failure rules"): tests/peer-fault knows the
# group's secret and passes the handshake, then answers every GET with
# bytes that do not match their CRC32C table (corrupt), with nothing
# (stall), with a block less than asked (short), or with a frame that
# is not one (garbage).  For each, a mount reads a file whose last run
# that member owns (placement computed here):
#   - the bytes are exact (the bad answer is detected, never served);
#   - the read finishes within a few --peer-timeouts;
#   - the runs came from the bucket instead, once (the gateway's count);
#   - status shows the member down, with why.
set -euo pipefail
# gateway: own   (it counts the gateway's bytes (get_b); tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup groupfaults
command -v ceph >/dev/null || { echo "SKIP: no ceph CLI for the gateway's counters"; exit 77; }
[ -x "$TOP/tests/peer-fault" ] || fail "tests/peer-fault is not built (make)"
. "$TOP/tests/lib/group.sh"

PA=$(free_port); PB=$(free_port); PX=$(free_port)
IDS=("127.0.0.1:$PA" "127.0.0.1:$PB" "127.0.0.1:$PX")
printf '%s\n' "${IDS[@]}" >peers
head -c 32 /dev/urandom | base64 >secret
mkdir -p a b data
FPID=""
trap 'for m in a b; do unmount_quietly "$TEST_DIR/$m"; done;
      [ -z "$FPID" ] || kill "$FPID" 2>/dev/null; cleanup_common' EXIT

gmount() { # DIR PORT CACHE
	$FMFS mount "s3://$B" "$1" --cache-dir "$3" --peers peers \
		--peer-listen "127.0.0.1:$2" --peer-secret-file secret \
		--peer-timeout 1000 || fail "mount of $1 failed"
}
gmount b "$PB" cb

for mode in corrupt stall short garbage; do
	note "a member whose answers are $mode"
	"$TOP/tests/peer-fault" --listen "127.0.0.1:$PX" --secret-file secret \
		--mode "$mode" >fault.out 2>fault.log &
	FPID=$!
	for i in $(seq 50); do grep -q ready fault.out && break; sleep 0.1; done
	grep -q ready fault.out || fail "peer-fault did not start: $(cat fault.log)"
	gmount a "$PA" "ca-$mode"
	upload_big_at "data/$mode" "data/$mode" 32 2 "${IDS[@]}"
	sleep 1
	g0=$(get_b)
	t0=$(date +%s%N)
	timeout 60 cmp "data/$mode" "a/data/$mode" || fail "$mode: a's read failed or differs"
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	MNT=$TEST_DIR/a
	# One look at the members right after the read: the member is down
	# for 5 s from its first bad answer, which may have come early in
	# the read (its units are spread over the file), and each status
	# call takes a while on a loaded machine.
	peers_now=$(stat_of peers)
	g1=$(get_b)
	note "$mode: read 32 MiB in $ms ms; bucket $((g1 - g0)) bytes; fallbacks $(stat_of peer_fallbacks); $(echo "$peers_now" | tr ';' '\n' | grep ":$PX")"
	grep -q "GET data/$mode" fault.log || fail "$mode: a never asked the faulty member"
	[ "$(stat_of peer_fallbacks)" -gt 0 ] || fail "$mode: a did not fall back to the bucket"
	echo "$peers_now" | grep -q "127.0.0.1:$PX down" || fail "$mode: a's status does not show the member down: $peers_now"
	about $((g1 - g0)) $((32 * 1024 * 1024)) ||
		fail "$mode: the bucket served $((g1 - g0)) bytes for a 32 MiB file"
	[ "$ms" -lt 20000 ] || fail "$mode: the read took $ms ms with a $mode member (timeout 1000 ms)"
	case $mode in
	corrupt) want="Bad message" ;;
	stall) want="silent for" ;;
	*) want="Protocol error" ;;
	esac
	echo "$peers_now" | tr ';' '\n' | grep ":$PX" | grep -q "$want" ||
		fail "$mode: the member's state does not say '$want': $peers_now"
	grep -q "does not match its CRC32C\|peer 127.0.0.1:$PX" "ca-$mode/fmfs.log" ||
		[ "$mode" != corrupt ] || fail "corrupt: the log does not name the bad block"
	$FMFS umount a || fail "umount a"
	kill "$FPID"; wait "$FPID" 2>/dev/null || true; FPID=""
done

$FMFS umount b || fail "umount b"
echo "cache group against faulty members ok"
