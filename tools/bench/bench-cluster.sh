#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-cluster.sh - the cache group (docs/cluster-cache.md) on
# a simulated cluster: N fmfs mounts, each in its own network namespace
# (tests/lib/netns.sh: a bridge, veth pairs, tc tbf rate limits), and
# the Ceph RADOS gateway of tests/lib/rgw.sh listening on the bridge.
# The network, not the two CPUs, is meant to be the limit: the gateway's
# egress is BENCH_GW_RATE in total (400mbit), each member's link
# BENCH_LINK_RATE in each direction (800mbit).  Every member reads the
# whole dataset at once (BENCH_PAR readers a member, each file once with
# dd bs=1M, every member starting at another file; the CRC (cksum) of
# what dd read checked against the upload's; page cache dropped before
# each run).
#
# Datasets (random bytes, uploaded once with the aws CLI):
#   small   16 objects of 16 MiB          large   2 objects of 128 MiB
# Variants:
#   base    each shape; N in BENCH_MEMBERS (1 4 8 16), without a group
#           (N independent mounts: the bucket serves the dataset N times)
#           and with one (--peers: about once)
#   slow    the gateway at BENCH_SLOW_RATE (100mbit), large shape; with
#           a group at each N, without one only up to
#           BENCH_SLOW_NOGROUP_MAX members (4: the bucket then serves it
#           N times at 12 MB/s, which only confirms the arithmetic)
#   churn   BENCH_CHURN_MEMBERS (16) members of a group, small shape
#           (BENCH_CHURN_SHAPE): once member 1 has fetched
#           BENCH_CHURN_AT (0.3) of the dataset, two members' daemons get
#           kill -9; BENCH_CHURN_GAP_S (2) s later the --peers file is
#           rewritten (the two dead out unless BENCH_CHURN_DROP_DEAD=0,
#           two new members in; every member re-reads it about once a
#           second), the new members mount and, once every member counts
#           the new list, read the whole dataset too
# Each (gateway rate, shape) first gets a single member's cold read
# (N=1, no group): the baseline of "all-members time / single time".
#
# Per run (a row of the table, and one JSON line in BENCH_OUT):
#   wall_s    from the start of the reads until the last member (killed
#             ones aside) finished; x1 = wall_s / the single member's
#   gw_x      bytes the gateway served for GETs during the run (RGW's
#             own rgw.get_b, through its admin socket) / the dataset
#   err       failed reads (killed members' own reads aside), timeouts
#             (BENCH_READ_TIMEOUT), cksum mismatches
#   out_max   the busiest member's peer_bytes_out / the members' mean
#   fallb     peer_fallbacks summed over the members
#   down      E/S/U: members shown down in some member's `fmfs status`
#             at the end (E), seen down at any time during the run
#             (status polled every BENCH_POLL_S s) (S), and of those, the
#             ones neither killed nor new members refusing connections
#             before they listened (U); the JSON has every observer pair
#   cpu       how busy both cores were during the reads
# Keys of `fmfs status --json` that contain "guard" (peer_guard_bytes
# since commit 134a7d9: bytes the loop guard sent to the bucket) are
# summed over the members, shown and written to the JSON when they exist.
# The JSON lines carry every member's figures; with BENCH_ROUNDS > 1 the
# table shows medians.
#
# A benchmark, not a test: exit 1 only when something fails (setup, a
# mount, a read of a member not killed, a wrong byte); the table comes
# first.  Needs root, /dev/fuse, ceph, radosgw, aws, ip, tc, nsenter.
# Nothing is left behind: mounts, namespaces, links, qdiscs, the gateway
# and the work directory go at exit, Ctrl-C included (a kill -9 of this
# script leaves them: `bash tests/lib/netns.sh teardown`).  One run at a
# time per NETNS_BRIDGE: a second one stops at once, touching nothing.
#
#   tools/bench/bench-cluster.sh
# Environment (defaults in brackets):
#   FMFS                  the binary [tools/fmfs]
#   BENCH_MEMBERS         [1 4 8 16]       BENCH_SHAPES [small large]
#   BENCH_MODES           [nogroup group]  BENCH_VARIANTS [base slow churn]
#   BENCH_ROUNDS          [1]
#   BENCH_GW_RATE         [400mbit]        BENCH_LINK_RATE [800mbit]
#   BENCH_SLOW_RATE       [100mbit]        BENCH_SLOW_NOGROUP_MAX [4]
#   BENCH_CHURN_MEMBERS   [16]  BENCH_CHURN_SHAPE [small]
#   BENCH_CHURN_AT [0.3]  BENCH_CHURN_GAP_S [2]  BENCH_CHURN_DROP_DEAD [1]
#   BENCH_PAR             readers per member [4]
#   BENCH_ORDER           rotate (member i starts at file i*F/N) or same
#                         (all in one order) [rotate]
#   BENCH_VERIFY          1: dd | cksum each file, 0: dd to /dev/null [1]
#   BENCH_CACHE_SIZE      each member's --cache-size [512M]
#   BENCH_MOUNT_OPTS      extra `fmfs mount` options, every member []
#   BENCH_GROUP_OPTS      extra options of group members [] (e.g.
#                         --peer-transport tcp, --peer-timeout 2000)
#   BENCH_READ_TIMEOUT    seconds one file's read may take [600]
#   BENCH_POLL_S          status poll period, group runs [2]
#   BENCH_OUT             results, one JSON line a run, appended
#                         [/tmp/bench-cluster.jsonl]
#   BENCH_LOGS            where a run with bad reads leaves its files
#                         (each member's fmfs.log, reads, statuses)
#                         [BENCH_OUT without .jsonl, then -logs]
#   BENCH_TMPDIR          [/tmp]   BENCH_KEEP=1 keeps the work directory
#   BENCH_PAGE_REPORTING  keep: leave free page reporting on (vm.sh)
#   NETNS_PREFIX, NETNS_BRIDGE, NETNS_NET  names (tests/lib/netns.sh)
#
# Time on the 2-core test machine with the defaults (2026-11-28): 12 min
# with commit 156bc73 (681 s of runs), 16 min with a build whose slow
# variant timed out and fell back to the bucket (941 s); half of it is
# the runs without a group, whose bucket reads grow with N (16 members:
# 90 s).  BENCH_MODES=group, or BENCH_MEMBERS="1 4 16", for less.  With
# 16 members of a group both cores are 85-95 % busy: those times say
# what this machine's CPUs allow, not what the network would.
set -euo pipefail

PROG=bench-cluster.sh
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FMFS=${FMFS:-$ROOT/tools/fmfs}
MEMBERS=${BENCH_MEMBERS:-1 4 8 16}
SHAPES=${BENCH_SHAPES:-small large}
MODES=${BENCH_MODES:-nogroup group}
VARIANTS=${BENCH_VARIANTS:-base slow churn}
ROUNDS=${BENCH_ROUNDS:-1}
GW_RATE=${BENCH_GW_RATE:-400mbit}
LINK_RATE=${BENCH_LINK_RATE:-800mbit}
SLOW_RATE=${BENCH_SLOW_RATE:-100mbit}
SLOW_NOGROUP_MAX=${BENCH_SLOW_NOGROUP_MAX:-4}
CHURN_MEMBERS=${BENCH_CHURN_MEMBERS:-16}
CHURN_SHAPE=${BENCH_CHURN_SHAPE:-small}
CHURN_AT=${BENCH_CHURN_AT:-0.3}
CHURN_GAP_S=${BENCH_CHURN_GAP_S:-2}
CHURN_DROP_DEAD=${BENCH_CHURN_DROP_DEAD:-1}
PAR=${BENCH_PAR:-4}
ORDER=${BENCH_ORDER:-rotate}
VERIFY=${BENCH_VERIFY:-1}
CACHE_SIZE=${BENCH_CACHE_SIZE:-512M}
MOUNT_OPTS=${BENCH_MOUNT_OPTS:-}
GROUP_OPTS=${BENCH_GROUP_OPTS:-}
READ_TIMEOUT=${BENCH_READ_TIMEOUT:-600}
POLL_S=${BENCH_POLL_S:-2}
OUT=${BENCH_OUT:-/tmp/bench-cluster.jsonl}
LOGS=${BENCH_LOGS:-${OUT%.jsonl}-logs}
PEER_PORT=7000
export LC_ALL=C

msg() { echo "$PROG: $*" >&2; }
die() { msg "$*"; exit 1; }
usage_err() { msg "$*"; exit 2; }

[ $# -eq 0 ] || usage_err "no arguments; settings come from the environment (see the header)"
for v in ROUNDS PAR READ_TIMEOUT CHURN_MEMBERS SLOW_NOGROUP_MAX CHURN_GAP_S POLL_S; do
	case ${!v} in '' | *[!0-9]* | 0) usage_err "BENCH_$v must be a positive integer" ;; esac
done
for n in $MEMBERS; do
	case $n in '' | *[!0-9]* | 0) usage_err "BENCH_MEMBERS: '$n' is not a positive integer" ;; esac
	[ "$n" -le 150 ] || usage_err "BENCH_MEMBERS: at most 150"
done
for s in $SHAPES $CHURN_SHAPE; do
	case $s in small | large) ;; *) usage_err "unknown shape '$s' (small, large)" ;; esac
done
for m in $MODES; do
	case $m in group | nogroup) ;; *) usage_err "unknown mode '$m' (group, nogroup)" ;; esac
done
for v in $VARIANTS; do
	case $v in base | slow | churn) ;; *) usage_err "unknown variant '$v' (base, slow, churn)" ;; esac
done
case $ORDER in rotate | same) ;; *) usage_err "BENCH_ORDER: rotate or same" ;; esac
case $VERIFY in 0 | 1) ;; *) usage_err "BENCH_VERIFY: 0 or 1" ;; esac
case $CHURN_DROP_DEAD in 0 | 1) ;; *) usage_err "BENCH_CHURN_DROP_DEAD: 0 or 1" ;; esac
[ "$CHURN_MEMBERS" -ge 4 ] || usage_err "BENCH_CHURN_MEMBERS: at least 4"

[ "$(id -u)" = 0 ] || die "needs root (namespaces, mounts, drop_caches)"
[ -x "$FMFS" ] || die "$FMFS missing: run make first, or set FMFS"
[ -e /dev/fuse ] || die "no /dev/fuse"
for c in aws ceph radosgw ip tc nsenter fusermount3 cksum curl; do
	command -v "$c" >/dev/null || die "$c missing"
done
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
# Another run's network (the same NETNS_BRIDGE) is left alone: only what
# this run made is torn down at exit.
! ip link show "${NETNS_BRIDGE:-fmbr0}" >/dev/null 2>&1 ||
	die "bridge ${NETNS_BRIDGE:-fmbr0} exists: another run is going on (or" \
		"left it: bash tests/lib/netns.sh teardown); or set NETNS_PREFIX," \
		"NETNS_BRIDGE and NETNS_NET to other names"

# shellcheck source=../../tests/lib/netns.sh
. "$ROOT/tests/lib/netns.sh"
# shellcheck source=vm.sh
. "$ROOT/tools/bench/vm.sh"
export NETNS_LINK_RATE=$LINK_RATE NETNS_GW_RATE=$GW_RATE

now() { echo "$EPOCHREALTIME"; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

W=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/bench-cluster.XXXXXX")
BENCH_ID=$(date -u +%Y%m%dT%H%M%SZ)-$$
NETNS_UP=0

cleanup() {
	local rc=$? m p
	set +e
	trap - EXIT INT TERM HUP
	for p in $(jobs -p); do
		kill "$p" 2>/dev/null
	done
	for m in "$W"/m/*; do
		[ -d "$m" ] || continue
		if grep -qF " $m " /proc/mounts; then
			timeout 30 "$FMFS" umount "$m" >/dev/null 2>&1 ||
				fusermount3 -uz "$m" >/dev/null 2>&1
		fi
	done
	[ "$NETNS_UP" = 0 ] || netns_teardown || rc=1
	bash "$ROOT/tests/lib/rgw.sh" stop "$W/gw" >/dev/null 2>&1
	vm_memory_restore
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		msg "work directory kept: $W"
	else
		rm -rf "$W"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------------
# The dataset, the gateway, the network

shape_files() { case $1 in small) echo 16 ;; large) echo 2 ;; esac; }
shape_mib() { case $1 in small) echo 16 ;; large) echo 128 ;; esac; }

get_b() {
	ceph --admin-daemon "$W/gw/run/client.rgw.fmfs.asok" perf dump |
		"$PY" -c 'import json,sys; print(json.load(sys.stdin)["rgw"]["get_b"])'
}

# Which node count is needed: the largest N, and the churn's plus two.
maxn=1
if [[ " $VARIANTS " = *" base "* ]] || [[ " $VARIANTS " = *" slow "* ]]; then
	for n in $MEMBERS; do [ "$n" -le "$maxn" ] || maxn=$n; done
fi
if [[ " $VARIANTS " = *" churn "* ]]; then
	[ $((CHURN_MEMBERS + 2)) -le "$maxn" ] || maxn=$((CHURN_MEMBERS + 2))
fi
[ "$maxn" -le 190 ] || usage_err "too many members ($maxn)"

vm_memory_hold

echo "== gateway (tests/lib/rgw.sh), $maxn nodes on a bridge, the datasets"
# Room for the datasets and what garbage collection has not freed yet.
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-4294967296}
bash "$ROOT/tests/lib/rgw.sh" start "$W/gw" >/dev/null ||
	die "the gateway did not start (logs in $W/gw/log; BENCH_KEEP=1 keeps them)"
# shellcheck disable=SC1091 # written by rgw.sh
. "$W/gw/env"
export AWS_ENDPOINT_URL=$RGW_ENDPOINT
NETNS_UP=1
netns_setup "$maxn" || die "the network could not be set up"
EP=$(netns_rgw_listen "$W/gw") || die "the gateway does not listen on the bridge"

mkdir -p "$W/data" "$W/m" "$W/c" "$W/runs"
: >"$W/sums"
for shape in small large; do
	nf=$(shape_files "$shape")
	mib=$(shape_mib "$shape")
	mkdir -p "$W/data/$shape"
	for i in $(seq 1 "$nf"); do
		head -c "${mib}M" /dev/urandom >"$W/data/$shape/f$i"
		echo "$shape/f$i $(cksum <"$W/data/$shape/f$i")" >>"$W/sums"
	done
	aws s3 cp --recursive --quiet "$W/data/$shape" "s3://$RGW_BUCKET/$shape/" ||
		die "uploading the $shape dataset failed"
	rm -rf "${W:?}/data/$shape"
done
head -c 32 /dev/urandom | base64 >"$W/secret"
echo "   gateway $EP, rates: gateway $GW_RATE, each member $LINK_RATE each way"

# ---------------------------------------------------------------------
# Members

mnt_of() { echo "$W/m/$1"; }
member_id() { echo "$(netns_ip "$1"):$PEER_PORT"; }

# mount_member I MODE: mount node I's member (in its namespace) on a
# fresh cache directory.  Prints why on failure.
mount_member() {
	local i=$1 mode=$2 mnt args=()
	mnt=$(mnt_of "$i")
	mkdir -p "$mnt"
	if grep -qF " $mnt " /proc/mounts; then
		echo "$mnt is still mounted from the run before" >"$RUN/mount.$i.out"
		return 1
	fi
	rm -rf "${W:?}/c/$i"
	args=(mount "s3://$RGW_BUCKET" "$mnt" --cache-dir "$W/c/$i"
		--cache-size "$CACHE_SIZE" --endpoint "$EP")
	if [ "$mode" = group ]; then
		args+=(--peers "$RUN/peers" --peer-listen "$(member_id "$i")"
			--peer-secret-file "$W/secret")
		# shellcheck disable=SC2206 # options, split on purpose
		args+=($GROUP_OPTS)
	fi
	# shellcheck disable=SC2206
	args+=($MOUNT_OPTS)
	netns_exec "$i" "$FMFS" "${args[@]}" >"$RUN/mount.$i.out" 2>&1
}

# mount_members MODE I...: all at once; dies naming the failed ones.
mount_members() {
	local mode=$1 i pids=() bad=
	shift
	for i in "$@"; do
		mount_member "$i" "$mode" &
		pids+=($!)
	done
	for i in "$@"; do
		wait "${pids[0]}" || bad="$bad $i"
		pids=("${pids[@]:1}")
	done
	[ -z "$bad" ] || {
		for i in $bad; do tail -n 5 "$RUN/mount.$i.out" >&2; done
		die "mount of member(s)$bad failed ($MODE_DESC)"
	}
}

umount_members() { # I...: in parallel; a dead mount is detached
	local i mnt
	for i in "$@"; do
		mnt=$(mnt_of "$i")
		grep -qF " $mnt " /proc/mounts || continue
		( timeout 60 "$FMFS" umount "$mnt" >/dev/null 2>&1 ||
			{ msg "umount of member $i failed; detaching it"
			  fusermount3 -uz "$mnt" 2>/dev/null; } ) &
	done
	wait
}

status_key() { # JSON KEY: a number or a string value of `fmfs status --json`
	sed -nE "s/.*\"$2\": (\"([^\"]*)\"|([0-9]+)).*/\\2\\3/p" <<<"$1"
}

# statuses DIR I...: `fmfs status --json` of each member, all at once,
# into DIR/status.I (DIR/status.I.err); at most 10 s.  Under load one
# answer can take seconds, so asking them in turn would add up.
statuses() {
	local d=$1 i pids=()
	shift
	for i in "$@"; do
		timeout 10 "$FMFS" status "$(mnt_of "$i")" --json \
			>"$d/status.$i" 2>"$d/status.$i.err" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || true
	done
}

# wait_members N I...: until each member counts N (15 s at most);
# returns 1 naming those that do not, with what their status said.
wait_members() {
	local n=$1 i got left=() next=() t0 why=
	shift
	left=("$@")
	t0=$SECONDS
	mkdir -p "$RUN/wait"
	while :; do
		statuses "$RUN/wait" "${left[@]}"
		next=()
		why=
		for i in "${left[@]}"; do
			got=$(status_key "$(cat "$RUN/wait/status.$i")" group_members)
			if [ "$got" != "$n" ]; then
				next+=("$i")
				why="$why $i: ${got:-$(head -c 200 "$RUN/wait/status.$i.err" | tr '\n' ' ')};"
			fi
		done
		left=("${next[@]}")
		[ ${#left[@]} -gt 0 ] || return 0
		[ $((SECONDS - t0)) -lt 15 ] || break
		sleep 0.2
	done
	msg "members not counting $n after 15 s:$why"
	return 1
}

write_peers() { # I...: the --peers file, replaced at once
	local i
	for i in "$@"; do member_id "$i"; done >"$RUN/peers.tmp"
	mv "$RUN/peers.tmp" "$RUN/peers"
}

# The reads of one file: a line "KEY STATUS T0 T1 [WHY]" on stdout.
cat >"$W/read1.sh" <<'EOF'
mnt=$1 key=$2 tmo=$3 verify=$4 sums=$5
errf=$mnt.err.$$
t0=$EPOCHREALTIME
if [ "$verify" = 1 ]; then
	# Not `cksum FILE`: coreutils 9.1's cksum takes a read error for the
	# end of the file and exits 0.  dd says EIO and exits 1.
	set -o pipefail
	got=$(timeout -k 5 "$tmo" dd 2>"$errf" if="$mnt/$key" \
		bs=1M status=none | cksum) && rc=0 || rc=$?
else
	timeout -k 5 "$tmo" dd 2>"$errf" if="$mnt/$key" \
		of=/dev/null bs=1M status=none && rc=0 || rc=$?
fi
t1=$EPOCHREALTIME
why=$(head -c 200 "$errf" 2>/dev/null | tr '\n' ' ')
rm -f "$errf"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	st=timeout
elif [ "$rc" != 0 ]; then
	st=error
elif [ "$verify" = 1 ] && [ "$(grep -F "$key " "$sums" | cut -d' ' -f2-)" != "$got" ]; then
	st=corrupt
	why="cksum $got (crc bytes), size now $(stat -c %s "$mnt/$key" 2>&1)"
else
	st=ok
fi
echo "$key $st $t0 $t1 $why"
EOF

# member_read I NFILES: node I's member reads the dataset (PAR at once,
# starting at file I*F/N unless ORDER=same); RUN/reads.I gets a line per
# file, RUN/done.I "T0 T1" at the end.
member_read() {
	local i=$1 slot=$2 nf k off t0
	nf=$(shape_files "$SHAPE")
	off=0
	[ "$ORDER" = same ] || off=$((slot * nf / N))
	t0=$(now)
	for k in $(seq 0 $((nf - 1))); do
		echo "$SHAPE/f$(((k + off) % nf + 1))"
	done | xargs -P "$PAR" -I{} bash "$W/read1.sh" "$(mnt_of "$i")" {} \
		"$READ_TIMEOUT" "$VERIFY" "$W/sums" >>"$RUN/reads.$i" || true
	echo "$t0 $(now)" >"$RUN/done.$i"
}

# poll_down: while RUN/stop is absent, every POLL_S s, each live member's
# status; a line "T OBSERVER PEERS" in RUN/down.log when it shows one
# down.
poll_down() {
	local i p t
	mkdir -p "$RUN/poll"
	while [ ! -e "$RUN/stop" ]; do
		# shellcheck disable=SC2046 # a list of numbers
		statuses "$RUN/poll" $(cat "$RUN/live")
		t=$(fsub "$(now)" "$T0")
		for i in $(cat "$RUN/live"); do
			p=$(status_key "$(cat "$RUN/poll/status.$i" 2>/dev/null)" peers)
			case $p in *" down "*) echo "$t $i $p" >>"$RUN/down.log" ;; esac
		done
		sleep "$POLL_S"
	done
}

cpu_ticks() { awk '/^cpu / { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat; }

# ---------------------------------------------------------------------
# One run

declare -A SINGLE   # "rate shape round" -> the single member's wall_s
FAILED=             # what failed, for the exit status

# run_one VARIANT SHAPE MODE N RATE ROUND
run_one() {
	local variant=$1 mode=$3 rate=$5 round=$6 i members=() victims=() new=()
	local g0 g1 cpu0 cpu1 t_kill="" t_join="" t_list="" t_mounted="" p pids=() key mnt
	SHAPE=$2
	N=$4
	MODE_DESC="$variant $SHAPE $mode N=$N round $round"
	RUN=$W/runs/$variant-$SHAPE-$mode-$N-$round
	mkdir -p "$RUN"
	: >"$RUN/down.log"
	mapfile -t members < <(seq 1 "$N")
	netns_gw_rate "$rate" || die "cannot set the gateway's rate to $rate"
	[ "$mode" = nogroup ] || write_peers "${members[@]}"
	local tm0
	tm0=$(now)
	mount_members "$mode" "${members[@]}"
	local mount_s
	mount_s=$(fsub "$(now)" "$tm0")
	if [ "$mode" = group ]; then
		wait_members "$N" "${members[@]}" || die "a member does not see the group ($MODE_DESC)"
	fi
	echo "${members[*]}" >"$RUN/live"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	g0=$(get_b)
	cpu0=$(cpu_ticks)
	T0=$(now)
	[ "$mode" = nogroup ] || { poll_down & pids+=($!); }
	local slot=0
	for i in "${members[@]}"; do
		member_read "$i" "$slot" &
		pids+=($!)
		slot=$((slot + 1))
	done
	if [ "$variant" = churn ]; then
		local want s got
		victims=($((N / 4 + 1)) $((3 * N / 4 + 1)))
		new=($((N + 1)) $((N + 2)))
		want=$(awk -v f="$CHURN_AT" -v n="$(shape_files "$SHAPE")" \
			-v m="$(shape_mib "$SHAPE")" 'BEGIN { printf "%.0f", f * n * m * 1048576 }')
		while :; do
			s=$(timeout 10 "$FMFS" status "$(mnt_of 1)" --json 2>/dev/null) || s=
			got=$(status_key "$s" bytes_fetched)
			[ -z "$got" ] || [ "$got" -lt "$want" ] || break
			[ ! -e "$RUN/done.1" ] || { msg "churn: member 1 finished before the kill"; break; }
			sleep 0.2
		done
		# The victims out of the poll, then kill -9 their daemons.
		local live=()
		for i in "${members[@]}"; do
			[[ " ${victims[*]} " = *" $i "* ]] || live+=("$i")
		done
		echo "${live[*]}" >"$RUN/live"
		t_kill=$(fsub "$(now)" "$T0")
		for i in "${victims[@]}"; do
			p=$(netns_pids "$i" | tr '\n' ' ')
			[ -n "${p// /}" ] || msg "churn: no daemon in node $i"
			# shellcheck disable=SC2086
			kill -9 $p 2>/dev/null || true
		done
		echo "   churn: kill -9 of members ${victims[*]} at ${t_kill} s" \
			"(member 1 had fetched ${got:-?} bytes)"
		sleep "$CHURN_GAP_S"
		if [ "$CHURN_DROP_DEAD" = 1 ]; then
			write_peers "${live[@]}" "${new[@]}"
		else
			write_peers "${members[@]}" "${new[@]}"
		fi
		t_list=$(fsub "$(now)" "$T0")
		mount_members group "${new[@]}"
		t_mounted=$(fsub "$(now)" "$T0")
		live+=("${new[@]}")
		wait_members "$(wc -l <"$RUN/peers")" "${live[@]}" ||
			msg "churn: not every member counts the new list (see above)"
		echo "${live[*]}" >"$RUN/live"
		t_join=$(fsub "$(now)" "$T0")
		echo "   churn: list rewritten at $t_list s, members ${new[*]} mounted at" \
			"$t_mounted s, counted by all at $t_join s; they start reading"
		for i in "${new[@]}"; do
			member_read "$i" "$slot" &
			pids+=($!)
			slot=$((slot + 1))
		done
	fi
	# Wait for the readers (the poller is the first pid in a group run).
	local readers=("${pids[@]}")
	[ "$mode" = nogroup ] || readers=("${pids[@]:1}")
	for p in "${readers[@]}"; do
		wait "$p" || true
	done
	cpu1=$(cpu_ticks)
	g1=$(get_b)
	touch "$RUN/stop"
	[ "$mode" = nogroup ] || wait "${pids[0]}" || true
	# shellcheck disable=SC2046
	statuses "$RUN" $(cat "$RUN/live")
	for i in $(cat "$RUN/live"); do
		if [ -s "$RUN/status.$i" ]; then
			mv "$RUN/status.$i" "$RUN/status.$i.json"
		else
			msg "no status from member $i ($MODE_DESC): $(head -c 200 "$RUN/status.$i.err")"
		fi
	done
	umount_members "${members[@]}" "${new[@]}"
	for i in "${members[@]}" "${new[@]}"; do
		cp "$W/c/$i/fmfs.log" "$RUN/fmfs.$i.log" 2>/dev/null || true
	done
	for i in "${victims[@]}"; do
		mnt=$(mnt_of "$i")
		! grep -qF " $mnt " /proc/mounts || fusermount3 -uz "$mnt" 2>/dev/null || true
	done
	key="$rate $SHAPE $round"
	local gopts=
	[ "$mode" = nogroup ] || gopts=$GROUP_OPTS
	cat >"$RUN/meta" <<EOF
{"bench": "cluster", "bench_id": "$BENCH_ID", "time": "$(date -u +%FT%TZ)",
 "variant": "$variant", "shape": "$SHAPE", "mode": "$mode", "members": $N,
 "round": $round, "gw_rate": "$rate", "link_rate": "$LINK_RATE",
 "files": $(shape_files "$SHAPE"), "file_mib": $(shape_mib "$SHAPE"),
 "readers_per_member": $PAR, "order": "$ORDER", "verify": $VERIFY,
 "cache_size": "$CACHE_SIZE", "mount_opts": "$MOUNT_OPTS",
 "group_opts": "$gopts",
 "fmfs": "$FMFS", "fmfs_mtime": "$(date -u -r "$FMFS" +%FT%TZ)",
 "t0": $T0, "mount_s": $mount_s, "gw_bytes": $((g1 - g0)),
 "cpu0": "$cpu0", "cpu1": "$cpu1",
 "members_list": [$(echo "${members[*]}" | tr ' ' ',')],
 "victims": [$(echo "${victims[*]}" | tr ' ' ',')],
 "new": [$(echo "${new[*]}" | tr ' ' ',')],
 "kill_at_s": ${t_kill:-null}, "list_at_s": ${t_list:-null},
 "mounted_at_s": ${t_mounted:-null}, "join_at_s": ${t_join:-null},
 "churn_drop_dead": $CHURN_DROP_DEAD,
 "single_s": ${SINGLE[$key]:-null}}
EOF
	local line
	line=$("$PY" - "$RUN" "$OUT" 2>"$RUN/result" <<'EOF'
import glob, json, os, re, statistics, sys
run, out = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(run, "meta")))
t0 = m.pop("t0")
victims, new = set(m["victims"]), m["new"]
members = m["members_list"] + new
ds = m["files"] * m["file_mib"] << 20
m["dataset_bytes"] = ds
per, errs, kerrs, whys = {}, {"error": 0, "timeout": 0, "corrupt": 0}, 0, []
net = os.environ.get("NETNS_NET", "10.241.0")
def ip_of(i):
    return "%s.%d" % (net, 10 + i)
for i in members:
    reads = []
    try:
        reads = [l.rstrip("\n").split(" ", 4) for l in open(os.path.join(run, "reads.%d" % i))]
    except OSError:
        pass
    done = None
    try:
        a, b = open(os.path.join(run, "done.%d" % i)).read().split()
        done = (float(a), float(b))
    except (OSError, ValueError):
        pass
    bad = [r for r in reads if r[1] != "ok"]
    if i in victims:
        kerrs += len(bad)
    else:
        for r in bad:
            errs[r[1]] = errs.get(r[1], 0) + 1
            if len(whys) < 5:
                whys.append("member %d %s: %s %s" % (i, r[0], r[1], r[4] if len(r) > 4 else ""))
        if len(reads) < m["files"]:
            errs["error"] += m["files"] - len(reads)
            whys.append("member %d: %d of %d reads recorded" % (i, len(reads), m["files"]))
    st = {}
    try:
        st = json.load(open(os.path.join(run, "status.%d.json" % i)))
    except (OSError, ValueError):
        pass
    per[i] = {"start": round(done[0] - t0, 3) if done else None,
              "end": round(done[1] - t0, 3) if done else None,
              "read_s": round(done[1] - done[0], 3) if done else None,
              "killed": i in victims, "joined": i in new,
              "reads_bad": len(bad)}
    for k in ("peer_bytes_out", "peer_bytes_in", "peer_fallbacks", "peer_hits",
              "peer_served", "peer_refused", "peer_dropped", "group_members",
              "bytes_fetched", "fetch_errors", "crc_failures", "store_errors",
              "store_retries", "cache_used_bytes", "peers"):
        if k in st:
            per[i][k] = st[k]
    for k, v in st.items():
        if "guard" in k:
            per[i][k] = v
alive = [i for i in members if i not in victims]
ends = [per[i]["end"] for i in alive if per[i]["end"] is not None]
m["wall_s"] = round(max(ends), 3) if ends else None
rs = [per[i]["read_s"] for i in alive if per[i]["read_s"] is not None]
m["member_read_s"] = {"min": min(rs), "median": round(statistics.median(rs), 3),
                      "max": max(rs)} if rs else None
if new:
    nr = [per[i]["read_s"] for i in new if per[i]["read_s"] is not None]
    m["new_member_read_s"] = nr
if m["single_s"] is None and m["members"] == 1 and m["mode"] == "nogroup":
    m["single_s"] = m["wall_s"]
if m["single_s"] and m["wall_s"]:
    m["x_single"] = round(m["wall_s"] / m["single_s"], 3)
else:
    m["x_single"] = None
m["gw_x"] = round(m["gw_bytes"] / ds, 3)
m["read_errors"] = errs["error"]
m["read_timeouts"] = errs["timeout"]
m["read_corrupt"] = errs["corrupt"]
m["killed_member_read_errors"] = kerrs
m["error_examples"] = whys
c0 = [int(x) for x in m.pop("cpu0").split()]
c1 = [int(x) for x in m.pop("cpu1").split()]
m["cpu_busy"] = round((c1[0] - c0[0]) / max(1, c1[1] - c0[1]), 3)
withst = [i for i in alive if "peer_bytes_out" in per[i]]
if m["mode"] == "group" and withst:
    outs = [per[i]["peer_bytes_out"] for i in withst]
    mean = sum(outs) / len(outs)
    m["peer_bytes_out_max_over_mean"] = round(max(outs) / mean, 3) if mean else None
    m["peer_bytes_out_total"] = sum(outs)
    m["peer_bytes_in_total"] = sum(per[i].get("peer_bytes_in", 0) for i in withst)
    m["peer_fallbacks_total"] = sum(per[i].get("peer_fallbacks", 0) for i in withst)
    m["peer_hits_total"] = sum(per[i].get("peer_hits", 0) for i in withst)
    m["peer_refused_total"] = sum(per[i].get("peer_refused", 0) for i in withst)
    m["group_members_end"] = sorted({per[i].get("group_members") for i in withst})
    guard = {}
    for i in withst:
        for k, v in per[i].items():
            if "guard" in k and isinstance(v, int):
                guard[k] = guard.get(k, 0) + v
    if guard:
        m["guard"] = guard
    down_end = []
    for i in withst:
        for part in per[i].get("peers", "").split("; "):
            if " down " in part:
                down_end.append("%d: %s" % (i, part))
    m["down_end"] = down_end
    seen = {}
    try:
        for l in open(os.path.join(run, "down.log")):
            t, obs, peers = l.rstrip("\n").split(" ", 2)
            for part in peers.split("; "):
                if " down " in part:
                    pid = part.split(" ")[0]
                    why = part[part.find("(") + 1:-1] if "(" in part else ""
                    rem = re.search(r" down (\d+)s", part)
                    # The failure was at most this late (back-offs are
                    # 5 s or longer).
                    failed_by = float(t) + (int(rem.group(1)) if rem else 5) - 5
                    k = "%s->%s" % (obs, pid)
                    if k not in seen:
                        seen[k] = {"first_s": float(t), "failed_by_s": failed_by, "why": why}
    except OSError:
        pass
    m["down_seen"] = seen
    # Expected: the killed members, and new members before they listened.
    vid = {"%s:" % ip_of(i) for i in victims}
    nid = {"%s:" % ip_of(i) for i in new}
    unexp = {}
    for k, v in seen.items():
        peer = k.split("->")[1]
        if any(peer.startswith(x) for x in vid):
            continue
        if any(peer.startswith(x) for x in nid) and m["mounted_at_s"] is not None \
                and v["failed_by_s"] <= m["mounted_at_s"] + 1.5:
            continue
        unexp[k] = v
    m["down_seen_unexpected"] = unexp
else:
    m["peer_fallbacks_total"] = sum(per[i].get("peer_fallbacks", 0) for i in withst)
for k in ("fetch_errors", "store_errors", "crc_failures"):
    m[k + "_total"] = sum(per[i].get(k, 0) for i in alive)
m["per_member"] = {str(k): v for k, v in per.items()}
with open(out, "a") as f:
    f.write(json.dumps(m, sort_keys=True) + "\n")
def g(v, fmt):
    return "-" if v is None else fmt % v
ids = {}
def idx(s):
    mo = re.match(r"10\.\d+\.\d+\.(\d+):", s)
    return str(int(mo.group(1)) - 10) if mo else s
downs = ""
if m["mode"] == "group":
    de = {idx(d.split(": ", 1)[1].split(" ")[0]) for d in m["down_end"]}
    ds_ = {idx(k.split("->")[1]) for k in m["down_seen"]}
    du = {idx(k.split("->")[1]) for k in m["down_seen_unexpected"]}
    downs = "%d/%d/%d" % (len(de), len(ds_), len(du))
print("%-6s %-6s %-8s %3d %-8s %8s %6s %6s %5s %7s %6s %-7s %5s" % (
    m["variant"], m["shape"], m["mode"], m["members"], m["gw_rate"],
    g(m["wall_s"], "%.1f"), g(m["x_single"], "%.2f"), g(m["gw_x"], "%.3f"),
    m["read_errors"] + m["read_timeouts"] + m["read_corrupt"],
    g(m.get("peer_bytes_out_max_over_mean"), "%.2f"),
    m["peer_fallbacks_total"] if m["mode"] == "group" else "-",
    downs or "-", "%.0f%%" % (100 * m["cpu_busy"])))
for w in whys:
    print("        " + w)
if m.get("guard"):
    print("        guard: " + json.dumps(m["guard"]))
if m["mode"] == "group" and m["down_seen"]:
    def who(k):
        obs, peer = k.split("->")
        return "%s->%s" % (obs, idx(peer))
    def show(title, d):
        if not d:
            return
        items = sorted(d.items(), key=lambda kv: kv[1]["first_s"])
        print("        %s: " % title + ", ".join(
            "%s %.0fs (%s)" % (who(k), v["first_s"], v["why"]) for k, v in items[:8])
            + (" ... (%d pairs)" % len(items) if len(items) > 8 else ""))
    if new:
        show("seen down (killed, or new before listening)",
             {k: v for k, v in m["down_seen"].items() if k not in m["down_seen_unexpected"]})
    show("seen down, unexpected" if new else "seen down", m["down_seen_unexpected"])
if new:
    print("        churn: killed %s at %.1fs; list rewritten %.1fs; new %s mounted %.1fs, "
          "counted by all %.1fs, read in %s s" % (
        sorted(victims), m["kill_at_s"], m["list_at_s"], new, m["mounted_at_s"],
        m["join_at_s"], ", ".join(g(x, "%.1f") for x in m.get("new_member_read_s", []))))
bad = m["read_errors"] + m["read_timeouts"] + m["read_corrupt"]
sys.stderr.write("RESULT wall=%s bad=%d\n" % (m["wall_s"], bad))
EOF
	) || die "summarizing $MODE_DESC failed: $(cat "$RUN/result")"
	echo "$line"
	local wall bad
	wall=$(sed -n 's/^RESULT wall=\([^ ]*\) .*/\1/p' "$RUN/result")
	bad=$(sed -n 's/^RESULT .* bad=\([0-9]*\)/\1/p' "$RUN/result")
	if [ "$bad" != 0 ]; then
		FAILED="$FAILED; $MODE_DESC: $bad bad reads"
		mkdir -p "$LOGS/$BENCH_ID"
		cp -r "$RUN" "$LOGS/$BENCH_ID/" &&
			msg "logs of $MODE_DESC (fmfs.log of each member, reads, statuses):" \
				"$LOGS/$BENCH_ID/${RUN##*/}"
	fi
	if [ "$mode" = nogroup ] && [ "$N" = 1 ] && [ "$wall" != None ]; then
		SINGLE[$key]=$wall
	fi
}

# baseline VARIANT RATE SHAPE ROUND: the single member's read, once per
# rate, shape and round.
baseline() {
	[ -n "${SINGLE["$2 $3 $4"]:-}" ] || run_one "$1" "$3" nogroup 1 "$2" "$4"
}

echo
printf '%-6s %-6s %-8s %3s %-8s %8s %6s %6s %5s %7s %6s %-7s %5s\n' \
	variant shape mode N gw wall_s x1 gw_x err out_max fallb down cpu
T_BENCH=$SECONDS
: >>"$OUT" || die "cannot write $OUT"
for round in $(seq 1 "$ROUNDS"); do
	for variant in $VARIANTS; do
		case $variant in
		base)
			for shape in $SHAPES; do
				baseline base "$GW_RATE" "$shape" "$round"
				for n in $MEMBERS; do
					[ "$n" -gt 1 ] || continue
					for mode in $MODES; do
						run_one base "$shape" "$mode" "$n" "$GW_RATE" "$round"
					done
				done
			done ;;
		slow)
			baseline slow "$SLOW_RATE" large "$round"
			for n in $MEMBERS; do
				[ "$n" -gt 1 ] || continue
				for mode in $MODES; do
					[ "$mode" = group ] || [ "$n" -le "$SLOW_NOGROUP_MAX" ] || continue
					run_one slow large "$mode" "$n" "$SLOW_RATE" "$round"
				done
			done ;;
		churn)
			baseline base "$GW_RATE" "$CHURN_SHAPE" "$round"
			run_one churn "$CHURN_SHAPE" group "$CHURN_MEMBERS" "$GW_RATE" "$round"
			;;
		esac
	done
done
netns_gw_rate "$GW_RATE" || true
echo
echo "runs took $((SECONDS - T_BENCH)) s; results appended to $OUT (bench_id $BENCH_ID)"

if [ "$ROUNDS" -gt 1 ]; then
	"$PY" - "$OUT" "$BENCH_ID" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if sys.argv[2] in l]
rows = [r for r in rows if r.get("bench_id") == sys.argv[2]]
groups = {}
for r in rows:
    groups.setdefault((r["variant"], r["shape"], r["mode"], r["members"], r["gw_rate"]), []).append(r)
def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else None
def g(v, fmt):
    return "-" if v is None else fmt % v
print()
print("medians over rounds:")
print("%-6s %-6s %-8s %3s %-8s %8s %6s %6s %5s %7s %6s" % (
    "variant", "shape", "mode", "N", "gw", "wall_s", "x1", "gw_x", "err", "out_max", "fallb"))
for k, rs in groups.items():
    print("%-6s %-6s %-8s %3d %-8s %8s %6s %6s %5d %7s %6s" % (
        k + (g(med(rs, "wall_s"), "%.1f"), g(med(rs, "x_single"), "%.2f"),
             g(med(rs, "gw_x"), "%.3f"),
             sum(r["read_errors"] + r["read_timeouts"] + r["read_corrupt"] for r in rs),
             g(med(rs, "peer_bytes_out_max_over_mean"), "%.2f"),
             g(med(rs, "peer_fallbacks_total"), "%d") if k[2] == "group" else "-")))
EOF
fi
cat <<EOF

wall_s: start of the reads until the last member finished; x1: wall_s / one
member's cold read at the same gateway rate; gw_x: bytes the gateway served /
the dataset; err: failed, timed out or wrong reads (killed members aside);
out_max: busiest member's peer_bytes_out / the mean; fallb: peer_fallbacks
summed; down: members shown down at the end / seen down during the run /
seen down although neither killed nor new (member numbers, any observer).
EOF
[ -z "$FAILED" ] || die "failures:${FAILED#;}"
