# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# netns.sh - a simulated cluster on one machine (docs in
# ../shared/docs/TESTBED.md, "A simulated cluster on one machine"):
# network namespaces ("nodes") on a bridge, each with a veth pair and an
# address, rate-limited with tc tbf so that the network, and not the
# CPUs, is what a cluster benchmark or test runs into.  Sourced (by
# tools/bench/bench-cluster.sh, and by tests that need nodes); needs
# root, ip (iproute2), tc and nsenter.
#
# Layout (NET is NETNS_NET, default 10.241.0):
#   - bridge NETNS_BRIDGE (default fmbr0), MAC NETNS_BRIDGE_MAC (fixed:
#     a bridge otherwise takes its lowest port's MAC, which changes as
#     nodes come and go, and mounts time out on stale ARP entries),
#     address NET.1/24 in this (the root) namespace: the gateway's side.
#     Its root qdisc is a tbf: all the bridge's traffic that leaves this
#     namespace toward the nodes, i.e. the gateway's total egress.
#   - node I (1..200): namespace NETNS_PREFIXI (default fmns1, fmns2...,
#     file /run/netns/fmnsI), address NET.(10+I)/24 on its "eth0",
#     loopback up; the other end, NETNS_PREFIXIh (fmns1h...), on the
#     bridge.  A tbf on each end: the node's download (the bridge end's
#     egress) and its upload (eth0's egress), NETNS_LINK_RATE each.
#   Traffic between nodes crosses two node links (the sender's upload,
#   the receiver's download); traffic from the gateway crosses the
#   gateway's tbf and the receiver's download.
#
# Settings (environment, read when a function runs):
#   NETNS_PREFIX      namespace/veth name prefix (fmns); netns.sh owns
#                     every namespace named PREFIX<digits> and every
#                     link named PREFIX<digits>h: teardown removes them
#   NETNS_BRIDGE      bridge name (fmbr0)
#   NETNS_BRIDGE_MAC  bridge MAC (02:fe:6d:62:72:30)
#   NETNS_NET         first three octets of the /24 (10.241.0)
#   NETNS_GW_RATE     the gateway's egress rate, tc units (400mbit)
#   NETNS_LINK_RATE   each node's rate, each direction (800mbit)
#
# Functions:
#   netns_setup K         the bridge (with the gateway's tbf) and nodes
#                         1..K; fails (1) if the bridge already exists
#                         (another run, or leftovers: netns_teardown, or
#                         `bash tests/lib/netns.sh teardown`)
#   netns_add I           one more node I (the bridge must exist)
#   netns_del I           remove node I (kills what still runs in it)
#   netns_name I          prints node I's namespace name (fmnsI)
#   netns_ip I            prints node I's address (NET.(10+I))
#   netns_gw_ip           prints the gateway's address on the bridge (NET.1)
#   netns_exec I CMD...   run CMD in node I's network namespace, through
#                         nsenter --net (NOT `ip netns exec`: that one
#                         also makes a private mount namespace, and a
#                         FUSE mount made inside it is seen by no one
#                         else); the mount namespace stays the caller's
#   netns_pids I          prints the pids of the processes in node I
#   netns_gw_rate RATE    change the gateway's egress rate now (a running
#                         transfer slows or speeds up at once)
#   netns_link_rate I RATE  change node I's rate, both directions
#   netns_rgw_listen RGW_DIR  make the gateway of tests/lib/rgw.sh (started
#                         in RGW_DIR) also listen on the bridge: adds
#                         endpoint=NET.1:PORT (its loopback port) to the
#                         beast frontend in RGW_DIR/ceph.conf, restarts
#                         the gateway (rgw.sh restart-gw), waits until a
#                         node reaches it; sets and prints
#                         NETNS_RGW_ENDPOINT (http://NET.1:PORT).  After
#                         netns_setup (the address must exist to bind it)
#   netns_rate_bits RATE  prints RATE (tc units: 400mbit, 1gbit, 50mbps,
#                         ...) in bits per second
#   netns_teardown        remove every namespace, veth, qdisc and the
#                         bridge of this NETNS_PREFIX/NETNS_BRIDGE,
#                         whether netns_setup finished or not; processes
#                         still in the namespaces get SIGTERM, then
#                         SIGKILL after 3 s (unmount FUSE mounts served
#                         from a namespace before: a killed daemon leaves
#                         its mount dead).  Idempotent; returns non-zero
#                         only if something is left.  Call it from the
#                         caller's EXIT trap:
#                             trap 'netns_teardown' EXIT
#
# Run as a program: `bash tests/lib/netns.sh teardown` (leftovers of a
# killed run, with the same NETNS_* settings), `bash tests/lib/netns.sh
# check` (two nodes, the rates measured with python sockets, torn down).
#
# Functions return non-zero with a message on stderr ("netns.sh: ...");
# they do not exit, and work under set -e and without it.

netns__prefix() { echo "${NETNS_PREFIX:-fmns}"; }
netns__bridge() { echo "${NETNS_BRIDGE:-fmbr0}"; }
netns__net() { echo "${NETNS_NET:-10.241.0}"; }
netns__msg() { echo "netns.sh: $*" >&2; }

netns_name() { echo "$(netns__prefix)$1"; }
netns_ip() { echo "$(netns__net).$((10 + $1))"; }
netns_gw_ip() { echo "$(netns__net).1"; }

netns_exec() {
	local i=$1
	shift
	nsenter --net="/run/netns/$(netns_name "$i")" "$@"
}

netns_pids() {
	ip netns pids "$(netns_name "$1")" 2>/dev/null
}

netns_rate_bits() {
	local r=${1,,} n u
	n=${r%%[a-z]*}
	u=${r#"$n"}
	case $n in
	'' | *[!0-9.]*) netns__msg "bad rate '$1'"; return 1 ;;
	esac
	case $u in
	bit | '') u=1 ;;
	kbit) u=1000 ;;
	mbit) u=1000000 ;;
	gbit) u=1000000000 ;;
	bps) u=8 ;;
	kbps) u=8000 ;;
	mbps) u=8000000 ;;
	gbps) u=8000000000 ;;
	*) netns__msg "bad rate unit in '$1' (bit kbit mbit gbit bps kbps mbps gbps)"
	   return 1 ;;
	esac
	awk -v n="$n" -v u="$u" 'BEGIN { printf "%.0f\n", n * u }'
}

# netns__tbf DEV RATE [NSNAME]: DEV's root qdisc becomes a tbf of RATE.
# The bucket holds 5 ms at RATE, at least 128 KiB: veth and the bridge
# hand tbf GSO packets of up to 64 KiB, which a smaller bucket would
# have to split; 50 ms of queue, then drops (as a switch port would).
netns__tbf() {
	local dev=$1 rate=$2 ns=${3:-} bits burst
	bits=$(netns_rate_bits "$rate") || return 1
	[ "$bits" -gt 0 ] || { netns__msg "rate '$rate' is zero"; return 1; }
	burst=$((bits / 8 / 200))
	[ "$burst" -ge 131072 ] || burst=131072
	if [ -n "$ns" ]; then
		nsenter --net="/run/netns/$ns" tc qdisc replace dev "$dev" root \
			tbf rate "$bits"bit burst "$burst" latency 50ms
	else
		tc qdisc replace dev "$dev" root tbf rate "$bits"bit \
			burst "$burst" latency 50ms
	fi || { netns__msg "tc tbf on $dev${ns:+ in $ns} failed"; return 1; }
}

netns_setup() {
	local k=$1 br i
	br=$(netns__bridge)
	case $k in '' | *[!0-9]*) netns__msg "netns_setup K: bad K '$k'"; return 2 ;; esac
	if ip link show "$br" >/dev/null 2>&1; then
		netns__msg "bridge $br exists already (another run, or leftovers:" \
			"bash tests/lib/netns.sh teardown)"
		return 1
	fi
	ip link add "$br" type bridge forward_delay 0 stp_state 0 ||
		{ netns__msg "cannot create bridge $br"; return 1; }
	ip link set "$br" address "${NETNS_BRIDGE_MAC:-02:fe:6d:62:72:30}" &&
	ip addr add "$(netns_gw_ip)/24" dev "$br" &&
	ip link set "$br" up &&
	netns__tbf "$br" "${NETNS_GW_RATE:-400mbit}" ||
		{ netns__msg "cannot set up bridge $br"; return 1; }
	for i in $(seq 1 "$k"); do
		netns_add "$i" || return 1
	done
}

netns_add() {
	local i=$1 ns h br
	ns=$(netns_name "$i")
	h=${ns}h
	br=$(netns__bridge)
	case $i in '' | *[!0-9]*) netns__msg "netns_add I: bad I '$i'"; return 2 ;; esac
	[ "$i" -ge 1 ] && [ "$i" -le 200 ] ||
		{ netns__msg "node $i: nodes are 1..200"; return 2; }
	[ ${#h} -le 15 ] || { netns__msg "link name $h too long (NETNS_PREFIX)"; return 2; }
	ip netns add "$ns" || { netns__msg "ip netns add $ns failed"; return 1; }
	ip link add "$h" type veth peer name eth0 netns "$ns" &&
	ip link set "$h" master "$br" &&
	ip link set "$h" up &&
	netns_exec "$i" ip link set lo up &&
	netns_exec "$i" ip addr add "$(netns_ip "$i")/24" dev eth0 &&
	netns_exec "$i" ip link set eth0 up &&
	netns__tbf "$h" "${NETNS_LINK_RATE:-800mbit}" &&
	netns__tbf eth0 "${NETNS_LINK_RATE:-800mbit}" "$ns" ||
		{ netns__msg "cannot set up node $i ($ns)"; return 1; }
	# No IPv6 chatter (router solicitations, DAD) on the test links.
	netns_exec "$i" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
		>/dev/null 2>&1 || true
}

netns_gw_rate() {
	netns__tbf "$(netns__bridge)" "$1"
}

netns_link_rate() {
	local ns
	ns=$(netns_name "$1")
	netns__tbf "${ns}h" "$2" && netns__tbf eth0 "$2" "$ns"
}

netns__kill_in() { # NSNAME...: TERM, 3 s, KILL what runs in them
	local ns pids="" i p
	for ns in "$@"; do
		pids="$pids $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
	done
	[ -n "${pids// /}" ] || return 0
	# shellcheck disable=SC2086 # a list of pids
	kill -TERM $pids 2>/dev/null || true
	for i in $(seq 30); do
		local left=
		for p in $pids; do
			[ -e "/proc/$p" ] && left="$left $p"
		done
		[ -n "$left" ] || return 0
		sleep 0.1
	done
	netns__msg "killing what still runs in the namespaces:$left"
	# shellcheck disable=SC2086
	kill -KILL $left 2>/dev/null || true
	sleep 0.2
}

netns_del() {
	local ns
	ns=$(netns_name "$1")
	netns__kill_in "$ns"
	ip link del "${ns}h" >/dev/null 2>&1 || true
	ip netns del "$ns" >/dev/null 2>&1 || true
	! ip netns list | grep -qE "^$ns( |\$)"
}

netns_teardown() {
	local p br nss links ns l rc=0
	p=$(netns__prefix)
	br=$(netns__bridge)
	nss=$(ip netns list 2>/dev/null | awk '{ print $1 }' |
		grep -E "^${p}[0-9]+\$" || true)
	links=$(ip -o link show 2>/dev/null |
		sed -nE "s/^[0-9]+: (${p}[0-9]+h)(@[^:]*)?:.*/\\1/p" || true)
	# shellcheck disable=SC2086 # lists of names
	[ -z "$nss" ] || netns__kill_in $nss
	for l in $links; do
		ip link del "$l" >/dev/null 2>&1 || true
	done
	for ns in $nss; do
		ip netns del "$ns" >/dev/null 2>&1 || true
	done
	if ip link show "$br" >/dev/null 2>&1; then
		tc qdisc del dev "$br" root >/dev/null 2>&1 || true
		ip link del "$br" >/dev/null 2>&1 || true
	fi
	# Check.
	if ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qE "^${p}[0-9]+\$"; then
		netns__msg "namespaces left: $(ip netns list | grep -E "^${p}[0-9]+" | tr '\n' ' ')"
		rc=1
	fi
	if ip -o link show 2>/dev/null | grep -qE "^[0-9]+: (${p}[0-9]+h|$br)[@:]"; then
		netns__msg "links left: $(ip -o link show | grep -oE "^[0-9]+: (${p}[0-9]+h|$br)" | tr '\n' ' ')"
		rc=1
	fi
	return $rc
}

netns_rgw_listen() {
	local dir=$1 conf port gw i code
	conf=$dir/ceph.conf
	[ -r "$dir/state" ] || { netns__msg "$dir holds no gateway (no state file)"; return 1; }
	port=$(sed -n 's/^RGW_PORT=//p' "$dir/state")
	gw=$(netns_gw_ip)
	[ -n "$port" ] || { netns__msg "no RGW_PORT in $dir/state"; return 1; }
	if ! grep -q "endpoint=$gw:$port" "$conf"; then
		sed -i "s|^rgw frontends = beast endpoint=127.0.0.1:$port |&endpoint=$gw:$port |" "$conf"
		grep -q "endpoint=$gw:$port" "$conf" ||
			{ netns__msg "could not add $gw:$port to the frontends in $conf"; return 1; }
	fi
	bash "$(dirname "${BASH_SOURCE[0]}")/rgw.sh" restart-gw "$dir" >/dev/null ||
		{ netns__msg "the gateway did not restart on $gw:$port"; return 1; }
	# Reached from a node (node 1 if there is one), else from here.
	for i in $(seq 100); do
		if [ -e "/run/netns/$(netns_name 1)" ]; then
			code=$(netns_exec 1 curl -s -o /dev/null -w '%{http_code}' \
				--max-time 2 "http://$gw:$port/") || code=000
		else
			code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
				"http://$gw:$port/") || code=000
		fi
		[ "$code" = 000 ] || break
		sleep 0.2
	done
	[ "$code" != 000 ] || { netns__msg "the gateway does not answer at $gw:$port"; return 1; }
	NETNS_RGW_ENDPOINT=http://$gw:$port
	echo "$NETNS_RGW_ENDPOINT"
}

# netns__check: two nodes; the rate node 1 -> node 2, and gateway -> node
# 1, measured with python sockets (one TCP stream, 4 s each).
netns__check() {
	local py=python3 rc=0
	[ -x /usr/bin/python3 ] && py=/usr/bin/python3
	trap 'netns_teardown' EXIT
	netns_setup 2 || return 1
	cat >/tmp/netns-check.$$.py <<'EOF'
import socket, sys, time
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], 5599)); s.listen(1); c, _ = s.accept(); n = 0
    t0 = time.time()
    while True:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    print("%.0f Mbit/s" % (n * 8 / (time.time() - t0) / 1e6))
else:
    c = socket.create_connection((sys.argv[2], 5599)); buf = b"\0" * (1 << 20)
    t0 = time.time()
    while time.time() - t0 < 4: c.sendall(buf)
    c.close()
EOF
	netns_exec 2 "$py" /tmp/netns-check.$$.py serve "$(netns_ip 2)" &
	sleep 0.5
	netns_exec 1 "$py" /tmp/netns-check.$$.py send "$(netns_ip 2)" || rc=1
	wait || rc=1
	echo "  (node 1 -> node 2, link rate ${NETNS_LINK_RATE:-800mbit})"
	netns_exec 1 "$py" /tmp/netns-check.$$.py serve "$(netns_ip 1)" &
	sleep 0.5
	"$py" /tmp/netns-check.$$.py send "$(netns_ip 1)" || rc=1
	wait || rc=1
	echo "  (gateway -> node 1, gateway rate ${NETNS_GW_RATE:-400mbit})"
	rm -f /tmp/netns-check.$$.py
	netns_teardown || rc=1
	trap - EXIT
	return $rc
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	case ${1:-} in
	teardown) netns_teardown ;;
	check) netns__check ;;
	*) echo "usage: bash netns.sh teardown | check (or source it)" >&2
	   exit 2 ;;
	esac
fi
