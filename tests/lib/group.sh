# SPDX-License-Identifier: MIT
#
# Helpers of the cache-group tests (56, 57): sourced after common.sh and
# mount_setup, with B, RGW_DIR and TOP set.

# The bytes the gateway has served from GETs (RGW's own counter, through
# its admin socket): the group's bucket reads, not fmfs's word for them.
get_b() {
	ceph --admin-daemon "$RGW_DIR/run/client.rgw.fmfs.asok" perf dump |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["rgw"]["get_b"])'
}

# about GOT WANT: whether the gateway's count GOT is WANT bytes.  RGW's
# get_b counts a byte less for some ranged GETs, and a read makes about
# one GET per MiB at most (readahead windows start at 1 MiB), so GOT may
# be short by one byte per MiB of WANT (and 64 more); never over.
about() {
	[ "$1" -le "$2" ] && [ "$1" -ge $(($2 - $2 / 1048576 - 64)) ]
}

# wait_members N MNT...: wait (at most 15 s) until each mount's status
# counts N members: every member reads its --peers file about once a
# second, so this is how long a change of the list takes to be seen.
wait_members() {
	local n=$1 m i got
	shift
	for m in "$@"; do
		for i in $(seq 150); do
			got=$("$FMFS" status "$m" --json | python3 -c \
				"import json,sys; print(json.load(sys.stdin)['group_members'])")
			[ "$got" = "$n" ] && break
			sleep 0.1
		done
		[ "$got" = "$n" ] || fail "$m counts $got members after 15 s, not $n"
	done
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# owned_bytes INDEX KEYS ID...: the bytes of the objects KEYS (comma
# separated) that member INDEX of the list ID... owns (placement.py).
owned_bytes() {
	B=$B python3 "$TOP/tests/lib/placement.py" "$@"
}

# check_served KEYS ID... -- MNT...: each member that owns runs of KEYS
# has served some to the others (each owned run is read by them all).
check_served() {
	local keys=$1 ids=() i=0 m
	shift
	while [ "$1" != -- ]; do ids+=("$1"); shift; done
	shift
	for m in "$@"; do
		local owned
		owned=$(owned_bytes "$i" "$keys" "${ids[@]}")
		MNT=$m
		if [ "$owned" -gt 0 ]; then
			[ "$(stat_of peer_served)" -gt 0 ] ||
				fail "$m owns $owned bytes but served nothing"
		fi
		i=$((i + 1))
	done
}

# upload_big_at LOCAL KEY MIB OWNER ID...: uploads a random object of MIB
# MiB (its local copy at LOCAL) to KEY whose last MiB (the last unit)
# member OWNER of ID... owns, trying new bytes (a new ETag) until it
# does: a test that kills OWNER after the reader's first 16 MiB then
# knows the reader still has to ask it (readahead reaches 64 MiB ahead
# at most).
upload_big_at() {
	local local=$1 key=$2 mib=$3 owner=$4 try
	shift 4
	for try in $(seq 30); do
		random_file "$local" "$mib"
		awsx s3 cp --quiet "$local" "s3://$B/$key"
		[ "$(B=$B python3 "$TOP/tests/lib/placement.py" run "$key" \
			$(((mib - 1) * 1048576)) "$@")" = "$owner" ] && return 0
	done
	fail "no ETag in 30 tries put the last run of $key at member $owner"
}
