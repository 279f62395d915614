#!/bin/bash
# SPDX-License-Identifier: MIT
#
# rgw-selftest.sh - check tests/lib/rgw.sh end to end: start a private
# gateway in a temporary directory, put and get a 5 MiB object with the
# aws CLI, see a wrong secret refused, take the gateway away and bring it
# back, stop everything and check that no process of that cluster is
# left. Prints PASS or FAIL; exits 0, 1, or 77 (skipped) when the aws CLI
# or Ceph's daemons are missing. On failure the directory with all the
# logs is kept and named.

set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
RGW=$HERE/rgw.sh

for tool in aws radosgw ceph-mon ceph-osd curl python3; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "SKIP: $tool not found"
		exit 77
	fi
done

TMP=$(mktemp -d /tmp/fmfs-rgw-selftest.XXXXXX)
D=$TMP/gw                               # the cluster's directory
W=$TMP/work                             # our own files
mkdir "$W"
PIDS=

# Always stop the cluster; keep the logs if something failed.
finish() {
	local rc=$?
	trap - EXIT
	"$RGW" stop "$D" >/dev/null 2>&1 || true
	if [ "$rc" = 0 ]; then
		rm -rf "$TMP"
		echo PASS
	else
		echo "FAIL (logs kept in $D/log)"
	fi
	exit "$rc"
}
trap finish EXIT
trap 'exit 1' INT TERM HUP

fail() {
	echo "rgw-selftest: $*" >&2
	exit 1
}

now_ms() { echo $(( ${EPOCHREALTIME/[.,]/} / 1000 )); }

s3() {
	aws --endpoint-url "$RGW_ENDPOINT" "$@"
}

# answers: the gateway answers HTTP at all.
answers() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
		"$RGW_ENDPOINT/") || true
	[ -n "$code" ] && [ "$code" != 000 ]
}

# our_procs: processes that run with this cluster's config.
our_procs() {
	pgrep -a -f -- "$D/ceph.conf" || true
}

t0=$(now_ms)
ep=$("$RGW" start "$D") || fail "rgw.sh start failed"
echo "start: $(( $(now_ms) - t0 )) ms, endpoint $ep"

[ -r "$D/env" ] || fail "no $D/env"
. "$D/env"
[ "$ep" = "$RGW_ENDPOINT" ] || fail "start printed $ep, env says $RGW_ENDPOINT"
for v in RGW_ENDPOINT RGW_BUCKET AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY \
	AWS_DEFAULT_REGION AWS_REGION; do
	[ -n "$(printenv "$v")" ] || fail "$v not exported by $D/env"
done
PIDS=$(cat "$D"/run/*.pid)

# A second start in the same (now busy) directory must refuse.
if "$RGW" start "$D" >/dev/null 2>&1; then
	fail "start on a non-empty DIR succeeded"
fi

# The bucket is there and empty.
listing=$(s3 s3api list-objects-v2 --bucket "$RGW_BUCKET" \
	--query 'length(Contents || `[]`)' --output text) || fail "cannot list $RGW_BUCKET"
[ "$listing" = 0 ] || fail "bucket $RGW_BUCKET not empty: $listing keys"

head -c $((5 << 20)) /dev/urandom >"$W/in"
s3 s3 cp --only-show-errors "$W/in" "s3://$RGW_BUCKET/selftest/obj" || fail "put failed"
s3 s3 cp --only-show-errors "s3://$RGW_BUCKET/selftest/obj" "$W/out" || fail "get failed"
cmp "$W/in" "$W/out" || fail "object read back differs"
echo "put/get 5 MiB: ok"

# A wrong secret must be refused by the gateway (403). (Not `aws s3 ls`:
# the CLI crashes with a TypeError on RGW's SignatureDoesNotMatch, whose
# Message is empty.)
if out=$(AWS_SECRET_ACCESS_KEY=wrongSecretKey000000000000000000000000000 \
	aws --endpoint-url "$RGW_ENDPOINT" s3 cp \
	"s3://$RGW_BUCKET/selftest/obj" "$W/bad" 2>&1); then
	fail "a wrong secret was accepted"
fi
case $out in
*403*|*Forbidden*|*SignatureDoesNotMatch*) ;;
*) fail "wrong secret: unexpected error: $out" ;;
esac
[ ! -s "$W/bad" ] || fail "a wrong secret got data"
echo "wrong secret refused: ok"

# The gateway goes away and comes back on the same port.
"$RGW" stop-gw "$D" || fail "stop-gw failed"
if answers; then
	fail "gateway still answers after stop-gw"
fi
"$RGW" start-gw "$D" >/dev/null || fail "start-gw failed"
answers || fail "gateway does not answer after start-gw"
t0=$(now_ms)
"$RGW" restart-gw "$D" >/dev/null || fail "restart-gw failed"
echo "restart-gw: $(( $(now_ms) - t0 )) ms"
rm -f "$W/out"
s3 s3 cp --only-show-errors "s3://$RGW_BUCKET/selftest/obj" "$W/out" ||
	fail "get after restart-gw failed"
cmp "$W/in" "$W/out" || fail "object differs after restart-gw"
echo "restart-gw: ok"
PIDS="$PIDS $(cat "$D"/run/*.pid)"

t0=$(now_ms)
"$RGW" stop "$D" || fail "stop failed"
echo "stop: $(( $(now_ms) - t0 )) ms"
"$RGW" stop "$D" || fail "a second stop failed"
left=$(our_procs)
[ -z "$left" ] || fail "processes left after stop: $left"
for pid in $PIDS; do
	# A zombie waiting for its parent to reap it is gone already.
	if [ -r "/proc/$pid/stat" ] &&
	   [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
		fail "pid $pid still runs after stop: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
	fi
done
if answers; then
	fail "gateway still answers after stop"
fi
echo "stop: ok"
