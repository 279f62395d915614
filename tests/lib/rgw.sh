#!/bin/bash
# SPDX-License-Identifier: MIT
#
# rgw.sh - start and stop a private, throw-away Ceph RADOS Gateway (RGW)
# for the integration tests: one monitor, one memstore OSD (data in RAM)
# and one radosgw, all on 127.0.0.1 on free ports, with every file
# (config, data, logs, pid files, admin sockets) inside the directory the
# caller names. Nothing under /etc/ceph or /var/lib/ceph is read or
# written and systemd is not used, so two clusters can run side by side.
# Authentication inside the cluster is off (auth = none); S3 requests are
# still checked against the test user's keys (Signature V4).
#
#   rgw.sh start DIR       fresh cluster + gateway in DIR (empty or absent);
#                          writes DIR/env, prints the endpoint
#   rgw.sh stop DIR        stop everything started for DIR (idempotent)
#   rgw.sh stop-gw DIR     stop only the radosgw
#   rgw.sh start-gw DIR    start the radosgw again, on the same port
#   rgw.sh restart-gw DIR  stop-gw, then start-gw
#
# DIR/env exports RGW_ENDPOINT, RGW_PORT, RGW_DIR, RGW_BUCKET (created,
# empty), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION,
# AWS_REGION and CEPH_CONF (for radosgw-admin in a test).
#
# No ceph-mgr is started: RGW only needs the monitor to create its pools
# and the OSD to store them; health would say "no active mgr", which
# nothing here asks about. Never run `ceph pg ...` or other mgr commands
# against this cluster: they wait for a mgr that never comes.
#
# Timing on the 2-core Debian 12 test machine (Ceph 16.2.15), measured
# with tests/lib/rgw-selftest.sh and loops of start/stop: `start` takes
# 2.1-2.5 s (monitor listening 0.3 s; osd new, mkfs and CRUSH 0.5 s; OSD
# up 0.2 s; gateway answering 0.8 s; user and bucket 0.3 s); three
# starts in parallel 2.7-7 s each; `stop` 0.7-1 s; `restart-gw` 0.65 s.
# Most of that speed is `paxos propose interval` (below): with the
# default 1 s the gateway alone took ~9 s to come up. `start` gives up
# after RGW_START_TIMEOUT_S (default 120) seconds, each command after at
# most 30 s, each wait after at most 60 s.
#
# Exit status: 0 on success, 1 on failure (with the failed step and the
# tail of its log on stderr), 2 on a usage error.

set -eu

PROG=rgw.sh

# Fixed test credentials: anything that reads DIR/env gets them; nothing
# here is secret. The access key is 20 characters, the secret 40, the
# shapes AWS uses.
RGW_USER=fmfs-test
ACCESS_KEY=FMFSTESTACCESSKEY00A
SECRET_KEY=fmfsTestSecretKey0000000000000000000000X
BUCKET=fmfs-test
REGION=us-east-1
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
GW_NAME=client.rgw.fmfs             # the radosgw's Ceph entity name

START_TIMEOUT_S=${RGW_START_TIMEOUT_S:-120}
STOP_GRACE_S=10                     # SIGTERM, then SIGKILL after this
CMD_TIMEOUT_S=30                    # any single ceph/radosgw-admin command
PORT_TRIES=3                        # fresh ports to try if a bind fails
# Lowest and highest port to pick from: below the kernel's ephemeral
# range (32768-60999 here), so no outgoing connection holds them, and
# away from Ceph's own 6800-7300 range the OSD binds in.
PORT_LO=20000
PORT_HI=32000

# Ceph's Python tools and the daemons find the config through -c, which
# every command below passes; CEPH_CONF covers anything that does not.
# CEPH_ARGS from the caller's environment could name another cluster.
unset CEPH_ARGS

usage() {
	cat >&2 <<EOF
usage: $PROG start DIR | stop DIR | stop-gw DIR | start-gw DIR | restart-gw DIR
EOF
	exit 2
}

msg() { echo "$PROG: $*" >&2; }

# set_paths DIR: make DIR absolute and name everything inside it.
set_paths() {
	case $1 in
	/*) D=$1 ;;
	*) D=$PWD/$1 ;;
	esac
	D=${D%/}
	# Ceph's config parser splits on whitespace and treats ; and # as
	# comments, so keep the path plain rather than quote it.
	case $D in
	*[!A-Za-z0-9/._+-]*)
		msg "DIR '$D' may hold only letters, digits and / . _ + -"
		exit 2 ;;
	esac
	CONF=$D/ceph.conf
	STATE=$D/state
	RUN=$D/run
	LOG=$D/log
	GW_LOG=$LOG/$GW_NAME.log
	export CEPH_CONF=$CONF
}

now() { echo "${EPOCHREALTIME/[.,]/}"; }            # microseconds
since() { echo $(( ($(now) - $1) / 1000 )); }      # milliseconds

# alive PID: true while PID runs. A zombie (dead child not yet reaped)
# counts as gone.
alive() {
	local st
	[ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[ "$st" != Z ]
}

# ours PID: true when PID is alive and was started with our config, so a
# stale pid file whose number the kernel has reused elsewhere is ignored.
ours() {
	alive "$1" || return 1
	tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qxF -- "$CONF"
}

# pick_port [EXCEPT]: print a port on 127.0.0.1 that nothing listens on
# now (found by binding it), chosen at random so that two clusters
# started at once are unlikely to pick the same one. The caller still
# checks that its daemon got the port and tries another if not.
pick_port() {
	local py=python3
	[ -x /usr/bin/python3 ] && py=/usr/bin/python3  # skip pyenv's shim
	"$py" - "$PORT_LO" "$PORT_HI" "${1:-0}" <<'EOF'
import random, socket, sys
lo, hi, skip = (int(a) for a in sys.argv[1:4])
for _ in range(500):
    port = random.randint(lo, hi)
    if port == skip:
        continue
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    sys.exit(0)
sys.exit("no free port found")
EOF
}

# write_conf: (re)write DIR/ceph.conf from FSID, MON_PORT and RGW_PORT.
# Option by option: see the Ceph 16 configuration reference.
write_conf() {
	cat >"$CONF.tmp" <<EOF
# Written by tests/lib/rgw.sh for a throw-away test cluster.
[global]
fsid = $FSID
mon host = v1:127.0.0.1:$MON_PORT
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
ms bind msgr2 = false
# A port already taken should fail fast, so we can pick another.
ms bind retry count = 1
ms bind retry delay = 1

auth cluster required = none
auth service required = none
auth client required = none
keyring = $D/keyring

run dir = $RUN
crash dir = $D/crash
log file = $LOG/\$name.log
log to syslog = false
err to syslog = false
log to stderr = false
mon cluster log file = $LOG/cluster.log
mon cluster log to syslog = false
debug ms = 0/0
debug monc = 0/0
debug auth = 0/0

# One OSD: every pool keeps one copy, and CRUSH picks among OSDs, not
# hosts.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# The test disk may be fuller than the 5 % the monitor insists on.
mon data avail warn = 2
mon data avail crit = 1

# Data in RAM; memstore takes only what is stored, the size is a cap
# (RGW_MEMSTORE_BYTES; the benchmarks raise it: deleted objects are only
# freed by garbage collection, and a full OSD stalls every write).
osd objectstore = memstore
memstore device bytes = ${RGW_MEMSTORE_BYTES:-4294967296}
# RGW names a head object "<bucket marker>_<key>": at 460 (the old value
# here) keys over ~420 bytes failed with UnknownError, where S3 takes
# 1024; 2048 (Ceph's default; memstore has no limit of its own) lets
# the gateway take what S3 takes (tests/integration/43-mount-names.sh).
osd max object name len = 2048
osd max object namespace len = 64

[mon]
# The monitor batches map changes for 1 s by default; RGW's start makes
# a dozen of them (pools, applications, PGs), each waited for.
paxos propose interval = 0.05
mon data = $D/mon.\$id
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
debug mon = 0/5
debug paxos = 0/0

[osd]
osd data = $D/osd.\$id
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
osd journal = $D/osd.\$id/journal
# We put the OSD in the CRUSH map ourselves; it need not set its place
# or its device class at start. The device class command, sent early in
# the start, is the one that hit the zero-fsid race (see fsid_race).
osd crush update on start = false
osd class update on start = false
# Exit at once on SIGTERM (the default in Ceph 16; a slow shutdown would
# have memstore write everything it holds to DIR/osd.0).
osd fast shutdown = true
# A few threads are plenty for one client on loopback; fewer start
# faster on two cores.
osd op num shards = 2
osd op num threads per shard = 2
# No scrubbing in a test's lifetime.
osd scrub min interval = 31536000
osd scrub max interval = 31536000
osd deep scrub interval = 31536000
debug osd = 0/5

[$GW_NAME]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw data = $D/rgw
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
rgw thread pool size = 64
rgw enable usage log = false
rgw enable ops log = false
# Give the space of deleted objects back within a minute, not hours:
# memstore keeps it in RAM until then.
rgw gc obj min wait = 60
rgw gc processor period = 60
# One line per request at level 1; FMFS_RGW_DEBUG=20 for everything.
debug rgw = ${FMFS_RGW_DEBUG:-0}/5
EOF
	mv "$CONF.tmp" "$CONF"
}

# spawn NAME CMD...: start a daemon in the foreground (-f) in the
# background of this shell and record its pid in RUN/NAME.pid (the
# daemons' own `pid file` option names the same path, so it holds that
# pid whoever writes it). Its stdin/stdout/stderr
# are detached from ours so that `$(rgw.sh start DIR)` returns. It stays
# in the caller's process group: killing that group (Ctrl-C, a test
# harness's timeout) takes the daemons with it.
spawn() {
	local name=$1
	shift
	SPAWN_ZERO_FSID=$(zero_fsid_count)
	"$@" </dev/null >>"$LOG/$name.out" 2>&1 &
	echo $! >"$RUN/$name.pid"
	SPAWNED_PID=$!
}

# ceph_cmd ARGS...: the ceph CLI against this cluster, with a time limit,
# tried again if it hit the zero-fsid race (see fsid_race).
ceph_cmd() {
	retry_fsid ceph -c "$CONF" --connect-timeout 20 "$@"
}

# cmd_limit: seconds one command may take: CMD_TIMEOUT_S, or what is
# left before the start deadline if that is less (at least 1).
cmd_limit() {
	local left
	if [ -z "${DEADLINE:-}" ]; then
		echo "$CMD_TIMEOUT_S"
		return
	fi
	left=$(( (DEADLINE - $(now)) / 1000000 ))
	[ "$left" -ge 1 ] || left=1
	[ "$left" -le "$CMD_TIMEOUT_S" ] || left=$CMD_TIMEOUT_S
	echo "$left"
}

# zero_fsid_count: how many commands the monitor has refused so far
# because they came with an all-zero fsid (see fsid_race).
zero_fsid_count() {
	local n
	n=$(grep -c 'handle_command on fsid 00000000-0000-0000-0000-000000000000' \
		"$LOG/mon.a.log" 2>/dev/null) || true
	echo "${n:-0}"
}

# retry_fsid CMD...: run CMD with a time limit; up to five times more if
# it failed and the monitor refused a command with a zero fsid meanwhile
# (the CLI then says "wrong fsid" or "EPERM: problem getting command
# descriptions"), waiting a little longer each time (three tries in all
# once ran out under CI's load). Keeps CMD's stdout and stderr apart.
retry_fsid() {
	local try before limit out=$LOG/retry.$$.out err=$LOG/retry.$$.err
	for try in 1 2 3 4 5 6; do
		before=$(zero_fsid_count)
		limit=$(cmd_limit)
		if timeout "$limit" "$@" >"$out" 2>"$err"; then
			cat "$out"
			cat "$err" >&2
			rm -f "$out" "$err"
			return 0
		fi
		cat "$out"
		cat "$err" >&2
		[ "$(zero_fsid_count)" -gt "$before" ] ||
			grep -q 'wrong fsid' "$err" || break
		echo "$PROG: zero-fsid race; trying again: $*" >&2
		sleep "$((try * 3 / 10)).$((try * 3 % 10))" # 0.3 s, 0.6 s, ...
	done
	rm -f "$out" "$err"
	return 1
}

# logged LOGNAME CMD...: run CMD, appending its output to LOG/LOGNAME.
logged() {
	local out=$LOG/$1
	shift
	echo "+ $*" >>"$out"
	"$@" >>"$out" 2>&1
}

# wait_for TIMEOUT_S PID CMD...: run CMD every 0.25 s until it succeeds.
# Fails as soon as PID (if given) is gone, or after TIMEOUT_S seconds, or
# when the start deadline passes; WAIT_WHY then says which.
wait_for() {
	local limit=$(( $1 * 1000000 )) pid=$2 t0
	shift 2
	t0=$(now)
	WAIT_WHY=
	while :; do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		if [ -n "$pid" ] && ! alive "$pid"; then
			WAIT_WHY="process $pid exited"
			return 1
		fi
		if [ $(( $(now) - t0 )) -ge "$limit" ]; then
			WAIT_WHY="timed out after $(( limit / 1000000 )) s"
			return 1
		fi
		if [ -n "${DEADLINE:-}" ] && [ "$(now)" -ge "$DEADLINE" ]; then
			WAIT_WHY="start took over $START_TIMEOUT_S s"
			return 1
		fi
		sleep 0.25
	done
}

# listening PID PORT: PID listens on 127.0.0.1:PORT.
listening() {
	alive "$1" && ss -Htlnp "sport = :$2" 2>/dev/null | grep -q "pid=$1,"
}

osd_up() {
	ceph_cmd osd stat 2>/dev/null | grep -Eq '(^| )1 up'
}

# gw_answers: the gateway answers HTTP (anonymous ListBuckets -> 200).
gw_answers() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
		"http://127.0.0.1:$RGW_PORT/") || return 1
	[ "$code" != 000 ]
}

# bind_failed LOG...: a daemon's log says it could not bind its port.
bind_failed() {
	cat "$@" 2>/dev/null |
		grep -Eqi 'unable to bind|failed to bind|address already in use'
}

# ---------------------------------------------------------------------
# stop

# stop_pids GRACE_S NAME...: stop the daemons named (e.g. mon.a) by their
# pid files: SIGTERM, wait up to GRACE_S, SIGKILL, wait. Returns non-zero
# only if one survives.
stop_pids() {
	local grace=$1 name pid pids= left t0
	shift
	for name in "$@"; do
		pid=$(cat "$RUN/$name.pid" 2>/dev/null) || continue
		if ours "$pid"; then
			kill -TERM "$pid" 2>/dev/null || true
			pids="$pids $pid"
		fi
		rm -f "$RUN/$name.pid"
	done
	[ -n "$pids" ] || return 0
	t0=$(now)
	while :; do
		left=
		for pid in $pids; do
			alive "$pid" && left="$left $pid"
		done
		[ -n "$left" ] || return 0
		[ $(( $(now) - t0 )) -lt $(( grace * 1000000 )) ] || break
		sleep 0.1
	done
	msg "still running after ${grace} s, killing:$left"
	kill -KILL $left 2>/dev/null || true
	wait_gone 5 $left
}

# wait_gone TIMEOUT_S PID...: wait for the PIDs to be gone.
wait_gone() {
	local limit=$(( $1 * 10 )) i=0 pid left
	shift
	while [ "$i" -lt "$limit" ]; do
		left=
		for pid in "$@"; do
			alive "$pid" && left="$left $pid"
		done
		[ -n "$left" ] || return 0
		sleep 0.1
		i=$((i + 1))
	done
	msg "processes did not exit:$left"
	return 1
}

# sweep: SIGKILL whatever still runs with our config on its command line
# (a radosgw-admin or ceph command cut off by a failure, a daemon whose
# pid file was lost).
sweep() {
	local p pid left=
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[ "$pid" != $$ ] || continue
		if ours "$pid"; then
			kill -KILL "$pid" 2>/dev/null || true
			left="$left $pid"
		fi
	done
	[ -z "$left" ] || wait_gone 5 $left
}

stop_gw() {
	stop_pids "$STOP_GRACE_S" "$GW_NAME"
}

# stop_all: one after the other, each while what it talks to still
# runs: the gateway (it talks to the OSD while it shuts down), the OSD
# (it tells the monitor it is going down, and waits 5 s for an answer
# that never comes if the monitor goes at the same time), the monitor.
stop_all() {
	local rc=0
	stop_pids "$STOP_GRACE_S" "$GW_NAME" || rc=1
	stop_pids "$STOP_GRACE_S" osd.0 || rc=1
	stop_pids "$STOP_GRACE_S" mon.a || rc=1
	sweep || rc=1
	return $rc
}

cmd_stop() {
	[ -d "$D" ] || return 0
	[ -d "$RUN" ] || return 0
	stop_all
}

cmd_stop_gw() {
	[ -d "$RUN" ] || return 0
	stop_gw
}

# ---------------------------------------------------------------------
# start

# show_log FILE [OFFSET]: the end of FILE (from byte OFFSET on) on
# stderr. A daemon's log ends with a dump of its recent events and log
# levels when it crashes, so show the lines that look like errors if
# there are any.
show_log() {
	local err
	[ -s "$1" ] || return 0
	err=$(tail -c +"$(( ${2:-0} + 1 ))" "$1" |
		grep -E ' -1 |[Ee]rror|ERROR|[Ff]ail|FAIL|[Uu]nable|denied|[Aa]bort' |
		grep -v '^ *[0-9-]*/ *[0-9-]* ' | tail -n 15) || true
	if [ -n "$err" ]; then
		echo "---- error lines in $1 ----" >&2
		echo "$err" >&2
	else
		echo "---- last lines of $1 ----" >&2
		tail -c +"$(( ${2:-0} + 1 ))" "$1" | tail -n 20 >&2
	fi
}

# Runs when `start` exits: on failure, say which step failed, show the
# end of its logs and stop what was started.
start_exit() {
	local rc=$? f
	[ "$START_OK" = 1 ] && return 0
	[ "$rc" != 0 ] || rc=1
	msg "start failed at step: $STEP${FAIL_WHY:+ ($FAIL_WHY)}"
	for f in $STEP_LOGS; do
		show_log "$f"
	done
	echo "---- (all logs in $LOG) ----" >&2
	stop_all >/dev/null 2>&1 || true
	exit "$rc"
}

# step NAME LOG...: what start is doing now, for the failure message.
step() {
	STEP=$1
	shift
	STEP_LOGS="$*"
	FAIL_WHY=
	[ -z "${T_STEP:-}" ] || echo "$(since "$T_STEP") ms" >>"$LOG/start.log"
	T_STEP=$(now)
	printf '%s: ' "$STEP" >>"$LOG/start.log"
}

fail() {
	FAIL_WHY=$*
	exit 1
}

# start_mon: monmap, mkfs and the monitor on a fresh port; tries another
# port if the one picked was taken in the meantime.
start_mon() {
	local try
	for try in $(seq "$PORT_TRIES"); do
		step "pick monitor port" "$LOG/start.log"
		MON_PORT=$(pick_port) || fail "no free port"
		write_conf
		step "monmaptool (port $MON_PORT)" "$LOG/cmd.log"
		logged cmd.log timeout "$(cmd_limit)" monmaptool --create \
			--clobber --fsid "$FSID" \
			--addv a "[v1:127.0.0.1:$MON_PORT]" "$D/monmap" ||
			fail "monmaptool failed"
		step "ceph-mon --mkfs" "$LOG/cmd.log" "$LOG/mon.a.log"
		rm -rf "$D/mon.a"
		logged cmd.log timeout "$(cmd_limit)" ceph-mon -c "$CONF" \
			--mkfs -i a --monmap "$D/monmap" ||
			fail "ceph-mon --mkfs failed"
		step "ceph-mon (port $MON_PORT)" "$LOG/mon.a.out" "$LOG/mon.a.log"
		spawn mon.a ceph-mon -f -c "$CONF" -i a
		if wait_for 30 "$SPAWNED_PID" listening "$SPAWNED_PID" "$MON_PORT"
		then
			return 0
		fi
		if alive "$SPAWNED_PID" ||
		   ! bind_failed "$LOG/mon.a.out" "$LOG/mon.a.log"; then
			fail "$WAIT_WHY"
		fi
		msg "port $MON_PORT was taken; trying another"
		stop_pids 5 mon.a || true
	done
	fail "no port after $PORT_TRIES tries"
}

start_osd() {
	local uuid id try
	uuid=$(cat /proc/sys/kernel/random/uuid)
	step "ceph osd new" "$LOG/cmd.log" "$LOG/mon.a.log"
	id=$(ceph_cmd osd new "$uuid" 0 2>>"$LOG/cmd.log") ||
		fail "ceph osd new failed"
	[ "$id" = 0 ] || fail "ceph osd new said '$id', wanted 0"
	step "ceph-osd --mkfs" "$LOG/cmd.log" "$LOG/osd.0.log"
	logged cmd.log timeout "$(cmd_limit)" ceph-osd -c "$CONF" -i 0 \
		--mkfs --osd-uuid "$uuid" || fail "ceph-osd --mkfs failed"
	step "ceph osd crush add" "$LOG/cmd.log" "$LOG/mon.a.log"
	logged cmd.log ceph_cmd osd crush add osd.0 1.0 \
		host=localhost root=default || fail "crush add failed"
	for try in 1 2 3; do
		step "ceph-osd" "$LOG/osd.0.out" "$LOG/osd.0.log" \
			"$LOG/mon.a.log"
		spawn osd.0 ceph-osd -f -c "$CONF" -i 0
		wait_for 60 "$SPAWNED_PID" osd_up && return 0
		! alive "$SPAWNED_PID" && fsid_race osd.0 || fail "$WAIT_WHY"
	done
	fail "the OSD kept dying of 'wrong fsid'"
}

# fsid_race NAME: the daemon NAME (started last by spawn) died because
# the monitor refused one of its commands as "wrong fsid". Ceph 16
# clients with auth = none can send a command after authenticating but
# before the monitor map, and so the cluster's fsid, has arrived; it then
# goes out with an all-zero fsid and gets EPERM (seen in ~1 of 10 starts
# on 2 busy cores, from the OSD, the ceph CLI and radosgw-admin alike).
# Trying again works. If so, set the failed attempt's logs aside.
fsid_race() {
	local f
	[ "$(zero_fsid_count)" -gt "${SPAWN_ZERO_FSID:-0}" ] ||
		grep -qs 'wrong fsid' "$LOG/$1.out" "$LOG/$1.log" || return 1
	msg "$1 died of the zero-fsid start race; starting it again"
	for f in "$LOG/$1.out" "$LOG/$1.log"; do
		[ ! -e "$f" ] || mv "$f" "$f.failed.$(now)"
	done
}

# start_gw_on_port: start the radosgw (RGW_PORT set, conf written) and
# wait until it answers HTTP. Returns 1 with WAIT_WHY set on failure.
start_gw_on_port() {
	GW_LOG_OFF=$(stat -c %s "$GW_LOG" 2>/dev/null) || GW_LOG_OFF=0
	GW_OUT_OFF=$(stat -c %s "$LOG/$GW_NAME.out" 2>/dev/null) || GW_OUT_OFF=0
	spawn "$GW_NAME" radosgw -f -c "$CONF" -n "$GW_NAME"
	wait_for 60 "$SPAWNED_PID" gw_answers && return 0
	stop_pids 5 "$GW_NAME" || true
	return 1
}

# start_gw_fresh: the gateway on a fresh port, another if that one was
# taken. A radosgw that fails to bind crashes on its way out (Ceph
# 16.2.15: SIGSEGV in rgw_user_st_syn) and leaves its watches on the
# control objects behind; the next metadata change (our user create)
# then waits for them to time out, ~30 s. That only happens when
# another program takes the port between pick_port and the bind.
start_gw_fresh() {
	local try
	for try in $(seq "$PORT_TRIES"); do
		step "pick gateway port" "$LOG/start.log"
		RGW_PORT=$(pick_port "$MON_PORT") || fail "no free port"
		write_conf
		save_state
		step "radosgw (port $RGW_PORT)" "$LOG/$GW_NAME.out" "$GW_LOG" \
			"$LOG/osd.0.log"
		if start_gw_on_port; then
			return 0
		fi
		fsid_race "$GW_NAME" && continue
		bind_failed "$LOG/$GW_NAME.out" "$GW_LOG" || fail "$WAIT_WHY"
		msg "port $RGW_PORT was taken; trying another"
		# Keep the failed attempt's log apart from the next one's.
		mv "$GW_LOG" "$GW_LOG.port$RGW_PORT" 2>/dev/null || true
		mv "$LOG/$GW_NAME.out" "$LOG/$GW_NAME.out.port$RGW_PORT" \
			2>/dev/null || true
	done
	fail "no port after $PORT_TRIES tries"
}

save_state() {
	cat >"$STATE" <<EOF
FSID=$FSID
MON_PORT=$MON_PORT
RGW_PORT=$RGW_PORT
EOF
}

cmd_start() {
	local t0 code
	t0=$(now)
	DEADLINE=$(( t0 + START_TIMEOUT_S * 1000000 ))
	if [ -e "$D" ]; then
		[ -d "$D" ] || { msg "$D exists and is not a directory"; exit 1; }
		[ -z "$(ls -A "$D")" ] || { msg "$D is not empty"; exit 1; }
	fi
	mkdir -p "$D" "$RUN" "$LOG" "$D/crash" "$D/rgw" "$D/osd.0"
	: >"$D/keyring"
	START_OK=0
	STEP=prepare
	STEP_LOGS=
	FAIL_WHY=
	trap start_exit EXIT
	trap 'FAIL_WHY="interrupted"; exit 130' INT TERM HUP

	FSID=$(cat /proc/sys/kernel/random/uuid)
	RGW_PORT=0
	start_mon
	start_osd
	start_gw_fresh

	step "radosgw-admin user create" "$LOG/cmd.log" "$GW_LOG"
	logged cmd.log retry_fsid radosgw-admin -c "$CONF" \
		user create --uid="$RGW_USER" --display-name="fmfs tests" \
		--access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" ||
		fail "radosgw-admin user create failed"

	# curl 7.88 signs V4 but does not send x-amz-content-sha256, which
	# RGW needs to check the signature (403 SignatureDoesNotMatch
	# without it); give it the hash of the empty body.
	step "create bucket $BUCKET" "$LOG/cmd.log" "$GW_LOG"
	code=$(curl -s -o "$LOG/create-bucket.out" -w '%{http_code}' \
		--max-time 30 -X PUT \
		--aws-sigv4 "aws:amz:$REGION:s3" \
		--user "$ACCESS_KEY:$SECRET_KEY" \
		-H "x-amz-content-sha256: $EMPTY_SHA256" \
		"http://127.0.0.1:$RGW_PORT/$BUCKET") || code=000
	cat "$LOG/create-bucket.out" >>"$LOG/cmd.log" 2>/dev/null || true
	[ "$code" = 200 ] || fail "PUT bucket answered HTTP $code"

	step "write env" "$LOG/start.log"
	cat >"$D/env.tmp" <<EOF
# Written by tests/lib/rgw.sh start; source it.
export RGW_ENDPOINT=http://127.0.0.1:$RGW_PORT
export RGW_PORT=$RGW_PORT
export RGW_DIR=$D
export RGW_BUCKET=$BUCKET
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_DEFAULT_REGION=$REGION
export AWS_REGION=$REGION
export CEPH_CONF=$CONF
EOF
	mv "$D/env.tmp" "$D/env"
	echo "$(since "$T_STEP") ms" >>"$LOG/start.log"
	echo "total: $(since "$t0") ms" >>"$LOG/start.log"
	START_OK=1
	msg "gateway for $D up in $(( $(since "$t0") / 1000 )) s"
	echo "http://127.0.0.1:$RGW_PORT"
}

cmd_start_gw() {
	local pid name try
	[ -r "$STATE" ] || { msg "$D holds no cluster (no $STATE)"; exit 1; }
	. "$STATE"
	pid=$(cat "$RUN/$GW_NAME.pid" 2>/dev/null) || pid=
	if ours "$pid"; then
		msg "radosgw for $D already runs (pid $pid)"
		echo "http://127.0.0.1:$RGW_PORT"
		return 0
	fi
	# Without its monitor and OSD the gateway would wait in vain.
	for name in mon.a osd.0; do
		pid=$(cat "$RUN/$name.pid" 2>/dev/null) || pid=
		if ! ours "$pid"; then
			msg "$name of $D is not running; use start on a fresh DIR"
			exit 1
		fi
	done
	DEADLINE=
	for try in 1 2 3; do
		if start_gw_on_port; then
			echo "http://127.0.0.1:$RGW_PORT"
			return 0
		fi
		fsid_race "$GW_NAME" && continue
		msg "radosgw did not come back on port $RGW_PORT: $WAIT_WHY"
		show_log "$LOG/$GW_NAME.out" "$GW_OUT_OFF"
		show_log "$GW_LOG" "$GW_LOG_OFF"
		exit 1
	done
	msg "radosgw kept dying of the zero-fsid race"
	exit 1
}

# ---------------------------------------------------------------------

[ $# -eq 2 ] || usage
cmd=$1
set_paths "$2"
case $cmd in
start) cmd_start ;;
stop) cmd_stop ;;
stop-gw) cmd_stop_gw ;;
start-gw) cmd_start_gw ;;
restart-gw) cmd_stop_gw && cmd_start_gw ;;
*) usage ;;
esac
