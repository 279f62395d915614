#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The cache group on a simulated network (docs/cluster-cache.md, "No
# cycles", "Failure rules"): four members, each an fmfs mount whose
# daemon runs in a network namespace of its own (tests/lib/netns.sh),
# the gateway on the bridge with its egress rate-limited (tc tbf).
#   - Two large objects read by all four at once: the gateway (its own
#     get_b count) serves them at most 1.1 times, nobody falls back to
#     the bucket, the loop guard sends nothing there, every byte exact.
#     (Until the guard was per request, a member serving one range of a
#     file sent its own readers of that file to the bucket: 2.2x here.)
#   - The gateway slowed to 40 Mbit/s with --peer-timeout 1000: owners'
#     fetches take many timeouts, but they say WORKING, so no reader
#     gives up on a live member: no timeouts, nobody down, no fallback,
#     the bucket still about once.
#   - Two members that disagree on the list (one knows a third member
#     the other does not): what the first asks of the second that the
#     second thinks another owns comes from the bucket (the guard) and
#     is counted in peer_guard_bytes, between the bytes the lists
#     disagree on and all the bytes asked (tests/lib/placement.py).
set -euo pipefail
# gateway: own   (it makes the gateway listen on the bridge and counts its bytes)
# exclusive: network namespaces, a bridge and rate limits of fixed names
. "$TOP/tests/lib/common.sh"

mount_setup netgroup
for c in ip tc nsenter ceph; do
	command -v $c >/dev/null || { echo "SKIP: no $c"; exit 77; }
done
. "$TOP/tests/lib/group.sh"
export NETNS_PREFIX=fmtn NETNS_BRIDGE=fmtbr0 NETNS_NET=10.242.0
export NETNS_BRIDGE_MAC=02:fe:6d:74:62:30
export NETNS_GW_RATE=400mbit NETNS_LINK_RATE=800mbit
. "$TOP/tests/lib/netns.sh"

M=(1 2 3 4)
trap 'for i in "${M[@]}"; do unmount_quietly "$TEST_DIR/m$i"; done;
      netns_teardown >/dev/null 2>&1; cleanup_common' EXIT
netns_teardown >/dev/null 2>&1 || true
netns_setup 4 || { echo "SKIP: cannot make network namespaces here"; exit 77; }
netns_rgw_listen "$RGW_DIR" >/dev/null || fail "the gateway does not listen on the bridge"
EP=$NETNS_RGW_ENDPOINT
head -c 32 /dev/urandom | base64 >secret

# gmount I LIST [OPTIONS...]: member I's mount, its daemon in node I.
gmount() {
	local i=$1 list=$2
	shift 2
	mkdir -p "m$i"
	netns_exec "$i" "$FMFS" mount "s3://$B" "$TEST_DIR/m$i" --endpoint "$EP" \
		--cache-dir "$TEST_DIR/c$i-$RANDOM" --peers "$list" \
		--peer-listen "$(netns_ip "$i"):7070" --peer-secret-file secret "$@" ||
		fail "mount of member $i failed"
}
sum_stat() { # KEY MOUNT...: the sum of a status counter over mounts
	local k=$1 t=0 m
	shift
	for m in "$@"; do MNT=$m; t=$((t + $(stat_of "$k"))); done
	echo $t
}
# read_all KEY...: every mounted member reads every key at once.
read_all() {
	local pids=() i k
	for i in "${M[@]}"; do
		mountpoint -q "m$i" || continue
		( for k in "$@"; do cmp "data/$k" "m$i/data/$k" || exit 1; done ) &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || fail "a member's read failed or differs"; done
}
mounts() { for i in "${M[@]}"; do mountpoint -q "m$i" && echo "$TEST_DIR/m$i"; done; }

printf '%s:7070\n' "$(netns_ip 1)" "$(netns_ip 2)" "$(netns_ip 3)" "$(netns_ip 4)" >peers
mkdir -p data
for k in big1 big2 slow1 slow2 guard; do
	case $k in big*) mib=64 ;; *) mib=32 ;; esac
	random_file "data/$k" $mib
	awsx s3 cp --quiet "data/$k" "s3://$B/data/$k"
done
for i in "${M[@]}"; do gmount "$i" "$TEST_DIR/peers" --peer-timeout 1000; done

note "four members read two large objects at once"
DATA=$((2 * 64 * 1024 * 1024))
g0=$(get_b)
read_all big1 big2
g1=$(get_b)
ratio=$(python3 -c "print(round(($g1 - $g0) / $DATA, 3))")
note "gateway bytes / dataset: $ratio; fallbacks $(sum_stat peer_fallbacks $(mounts)); guard bytes $(sum_stat peer_guard_bytes $(mounts))"
python3 -c "import sys; sys.exit(0 if $ratio <= 1.1 else 1)" ||
	fail "the gateway served $ratio times the dataset (goal: at most 1.1)"
[ "$(sum_stat peer_fallbacks $(mounts))" = 0 ] || fail "a member fell back to the bucket"
[ "$(sum_stat peer_guard_bytes $(mounts))" = 0 ] || fail "the guard sent bytes to the bucket although all lists agree"

note "the gateway at 40 Mbit/s, --peer-timeout 1000"
netns_gw_rate 40mbit
DATA=$((2 * 32 * 1024 * 1024))
t0=$(sum_stat peer_timeouts $(mounts)); f0=$(sum_stat peer_fallbacks $(mounts))
w0=$(date +%s)
g0=$(get_b)
read_all slow1 slow2
g1=$(get_b)
secs=$(( $(date +%s) - w0 ))
ratio=$(python3 -c "print(round(($g1 - $g0) / $DATA, 3))")
note "read in $secs s (the gateway's link alone: $((DATA * 8 / 40000000)) s); gateway bytes / dataset $ratio; timeouts $(( $(sum_stat peer_timeouts $(mounts)) - t0 )); fallbacks $(( $(sum_stat peer_fallbacks $(mounts)) - f0 ))"
[ "$secs" -gt 5 ] || fail "the read took $secs s: the gateway was not slowed, the test proves nothing"
[ "$(sum_stat peer_timeouts $(mounts))" = "$t0" ] || fail "a reader gave up on a live, slow owner"
[ "$(sum_stat peer_fallbacks $(mounts))" = "$f0" ] || fail "a reader fell back to the bucket from a live owner"
[ "$(sum_stat peer_members_down $(mounts))" = 0 ] || fail "a live member is shown down: $(stat_of peers)"
python3 -c "import sys; sys.exit(0 if $ratio <= 1.1 else 1)" ||
	fail "with a slow gateway the bucket served $ratio times the dataset"
netns_gw_rate 400mbit

note "two members that disagree on the list: the guard's bytes are counted"
for i in "${M[@]}"; do unmount_quietly "$TEST_DIR/m$i"; done
A=$(netns_ip 1):7070 Bm=$(netns_ip 2):7070 C=$(netns_ip 3):7070
# Member 1 knows 1 and 2; member 2 also knows 3 (which is not running:
# member 2 never asks it here, since only member 1 reads).
gmount 1 "$A,$Bm" --peer-timeout 1000
gmount 2 "$A,$Bm,$C" --peer-timeout 1000
g0=$(get_b)
cmp data/guard m1/data/guard || fail "member 1's read differs"
g1=$(get_b)
MNT=$TEST_DIR/m2; guard=$(stat_of peer_guard_bytes); served=$(stat_of peer_bytes_out)
MNT=$TEST_DIR/m1; fb=$(stat_of peer_fallbacks)
# Bytes member 1 asks of member 2 (its list gives them to 2), and of
# those the ones member 2's list gives to another member.
read -r asked disagree < <(B=$B python3 "$TOP/tests/lib/placement.py" \
	disagree data/guard 1 2 "$A" "$Bm" "$C")
note "member 1 asked member 2 for $served bytes ($asked by the rule, $disagree of them another member's by member 2's list); the guard sent $guard to the bucket; the gateway served $((g1 - g0))"
[ "$fb" = 0 ] || fail "member 1 fell back to the bucket from a live member"
[ "$disagree" -gt 0 ] || fail "placement.py: the two lists agree on every byte member 2 serves: the test proves nothing"
[ "$served" = "$asked" ] || fail "member 2 served $served bytes, not the $asked member 1's list gives it"
[ "$guard" -ge "$disagree" ] || fail "the guard counted $guard bytes, fewer than the $disagree member 2's list gives to another"
[ "$guard" -le "$asked" ] || fail "the guard counted $guard bytes, more than the $asked served"
about $((g1 - g0)) $((32 * 1024 * 1024)) ||
	fail "the gateway served $((g1 - g0)) bytes for one 32 MiB read"

for i in 1 2; do "$FMFS" umount "$TEST_DIR/m$i" || fail "umount m$i"; done
echo "cache group on a simulated network ok"
