#!/bin/bash
# SPDX-License-Identifier: MIT
#
# fmfs-csi (docs/csi.md) driven the way a kubelet drives a CSI node
# plugin: stage, publish twice, publish read-only to a second target,
# write through one target, unpublish, unstage, each call repeated; the
# daemon killed with -9 between publish and the next call (the next one
# mounts again on the same cache dir and nothing queued is lost); the
# drain refused with the store down; bad requests (missing fields, not
# JSON, unknown bucket, bad secret, a target that is another mount, a
# volume staged elsewhere) with their gRPC codes; the secret never in a
# command line, the daemon's environment or a log; the daemon outside
# the caller's session.  Then the FlexVolume calls (init, mount,
# unmount).  Checked with the aws CLI.
# gateway: own   (it stops the gateway; tests/run-tests.sh)
. "$TOP/tests/lib/common.sh"

mount_setup csi
CSI=$TOP/tools/fmfs-csi
export FMFS_CSI_RUNDIR=$TEST_DIR/run FMFS_CSI_CACHE_DIR=$TEST_DIR/caches
export FMFS_CSI_NO_SYSTEMD=1 FMFS_CSI_UNSTAGE_TIMEOUT=20
export FMFS
S=$TEST_DIR/stage
T1=$TEST_DIR/pod1/vol
T2=$TEST_DIR/pod2/vol
cleanup_csi() {
	for m in "$T1" "$T2" "$TEST_DIR/other" "$TEST_DIR/flex"; do
		umount -l "$m" 2>/dev/null || true
	done
	$FMFS umount "$S" >/dev/null 2>&1 || umount -l "$S" 2>/dev/null || true
	"$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || true
}
trap 'cleanup_csi; cleanup_common' EXIT
SECRET=$AWS_SECRET_ACCESS_KEY

# req KIND [KEY=JSON...]: a request; stage/publish carry what a kubelet
# sends.  Values are JSON.
req() {
	python3 - "$@" <<'EOF'
import json, os, sys
kind, kv = sys.argv[1], sys.argv[2:]
e = os.environ
cap = {"mount": {"mount_flags": []},
       "access_mode": {"mode": "MULTI_NODE_MULTI_WRITER"}}
r = {"volume_id": "vol-" + e["B"]}
if kind == "stage":
    r.update(staging_target_path=e["S"], volume_capability=cap,
             volume_context={"url": "s3://%s/data" % e["B"],
                             "endpoint": e["RGW_ENDPOINT"],
                             "path_style": "true", "cache_size": "1G",
                             "async_delay": "3600"},
             secrets={"access_key_id": e["AWS_ACCESS_KEY_ID"],
                      "secret_access_key": e["AWS_SECRET_ACCESS_KEY"]})
elif kind == "publish":
    r.update(staging_target_path=e["S"], target_path=e["T1"],
             volume_capability=cap)
elif kind == "unpublish":
    r.update(target_path=e["T1"])
elif kind == "unstage":
    r.update(staging_target_path=e["S"])
for a in kv:
    k, v = a.split("=", 1)
    v = json.loads(v)
    if "." in k:
        o, k2 = k.split(".", 1)
        if v is None:
            r[o].pop(k2, None)
        else:
            r[o][k2] = v
    elif v is None:
        r.pop(k, None)
    else:
        r[k] = v
print(json.dumps(r))
EOF
}
export B S T1 T2
# csi VERB KIND [KEY=JSON...]: runs fmfs-csi VERB with the request, as
# the kubelet's node plugin would (no AWS keys in its environment);
# RC, OUT (the JSON reply) and ERR.
csi() {
	local verb=$1
	shift
	RC=0
	req "$@" | env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
		"$CSI" "$verb" >out.json 2>err.txt || RC=$?
	OUT=$(cat out.json)
	ERR=$(cat err.txt)
}
ok() { # VERB KIND [KEY=JSON...]
	csi "$@"
	[ "$RC" = 0 ] && [ "$OUT" = "{}" ] ||
		fail "$1: exit $RC, reply $OUT, stderr $ERR"
}
code() { # CODE VERB KIND [KEY=JSON...]
	local want=$1
	shift
	csi "$@"
	[ "$RC" = "$want" ] || fail "$1 $2 ${*:3}: exit $RC, expected $want: $OUT"
	python3 -c 'import json,sys; e=json.load(open("out.json"))["error"]; sys.exit(0 if e["code"]==int(sys.argv[1]) and e["message"] else 1)' "$want" ||
		fail "$1: the error reply is not {error: {code, name, message}}: $OUT"
}
mounts_of() { awk -v p="$1" '$5 == p' /proc/self/mountinfo | wc -l; }
# The daemon, not its keeper (docs/keeper.md): fmfs status knows which.
daemon_pid() { "$FMFS" status "$S" --json | python3 -c \
	"import json,sys; print(json.load(sys.stdin)['daemon_pid'])"; }

note "node-get-capabilities, node-get-info, probe"
"$CSI" node-get-capabilities </dev/null | grep -q '"STAGE_UNSTAGE_VOLUME"' ||
	fail "no STAGE_UNSTAGE_VOLUME capability"
"$CSI" node-get-info </dev/null | grep -q '"node_id"' || fail "no node_id"
"$CSI" probe </dev/null | grep -q '"ready": true' || fail "probe not ready"

note "bad requests: their gRPC codes"
echo 'not json' | "$CSI" node-stage >out.json 2>/dev/null && fail "not JSON accepted"
[ "$(python3 -c 'import json; print(json.load(open("out.json"))["error"]["code"])')" = 3 ] ||
	fail "not JSON: $(cat out.json)"
code 3 node-stage stage volume_id=null
code 3 node-stage stage staging_target_path=null
code 3 node-stage stage volume_capability=null
code 3 node-stage stage volume_context.url=null
code 3 node-stage stage 'volume_capability={"block": {}}'
code 3 node-stage stage secrets.secret_access_key=null
code 3 node-stage stage volume_context.foreground='"true"'
code 3 node-stage stage volume_context.credentials='"/root/.aws/credentials"'
code 5 node-stage stage "volume_context.url=\"s3://nosuch-$B\""
echo "$ERR" | grep -q NoSuchBucket || fail "missing bucket not named: $ERR"
code 16 node-stage stage 'secrets.secret_access_key="wrong-secret"'
[ "$(mounts_of "$S")" = 0 ] || fail "a failed stage left a mount"
code 9 node-publish publish
code 3 node-publish publish target_path=null

note "stage (twice), publish (twice), publish read-only to a second target"
ok node-stage stage
ok node-stage stage
[ "$(mounts_of "$S")" = 1 ] || fail "stage twice: $(mounts_of "$S") mounts"
awk -v p="$S" '$5 == p' /proc/self/mountinfo | grep -q " fuse.fmfs fmfs:s3://$B/data " ||
	fail "the staging path is not the bucket's mount"
code 6 node-stage stage "staging_target_path=\"$TEST_DIR/elsewhere\""
ok node-publish publish
ok node-publish publish
[ "$(mounts_of "$T1")" = 1 ] || fail "publish twice: $(mounts_of "$T1") mounts"
ok node-publish publish "target_path=\"$T2\"" readonly=true
code 6 node-publish publish "target_path=\"$T2\""
awk -v p="$T2" '$5 == p {print $6}' /proc/self/mountinfo | grep -q '^ro' ||
	fail "$T2 is not read-only"
mkdir -p "$TEST_DIR/other"
mount -t tmpfs tmpfs "$TEST_DIR/other"
code 6 node-publish publish "target_path=\"$TEST_DIR/other\""
umount "$TEST_DIR/other"

note "write through one target; the read-only one sees it and refuses writes"
mkdir -p data got
head -c 1500000 /dev/urandom >data/f1
cp data/f1 "$T1/f1" || fail "write through $T1"
same_file data/f1 "$T2/f1"
(echo x >"$T2/nope") 2>/dev/null && fail "wrote through the read-only target"

note "no secret in a command line, the daemon's environment, a log"
pid=$(daemon_pid)
[ -n "$pid" ] || fail "no daemon"
for p in /proc/[0-9]*; do
	if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$SECRET"; then
		fail "the secret is in the command line of $(tr '\0' ' ' <"$p/cmdline")"
	fi
done
tr '\0' '\n' <"/proc/$pid/environ" | grep -qF "$SECRET" &&
	fail "the secret is in the daemon's environment"
tr '\0' '\n' <"/proc/$pid/environ" | grep -q '^AWS_SHARED_CREDENTIALS_FILE=' ||
	fail "the daemon got no credentials file by path"
grep -rqF "$SECRET" "$FMFS_CSI_CACHE_DIR"/*/fmfs.log out.json err.txt &&
	fail "the secret is in a log or a reply"
[ "$(stat -c %a "$FMFS_CSI_RUNDIR")" = 700 ] || fail "runtime dir not 0700"
for f in "$FMFS_CSI_RUNDIR"/*.credentials; do
	[ "$(stat -c %a "$f")" = 600 ] || fail "$f is not 0600"
done
[ "$(ps -o sid= -p "$pid" | tr -d ' ')" != "$(ps -o sid= -p $$ | tr -d ' ')" ] ||
	fail "the daemon is in the caller's session"

head -c 700000 /dev/urandom >data/f2
if [ "$("$FMFS" status "$S" --json | python3 -c \
	'import json,sys; print(json.load(sys.stdin)["transport"])')" != io_uring ]; then
	note "kill -9 of the daemon: its keeper's new one takes over; the pod's bind carries on"
	exec 7>"$T1/f2"
	head -c 300000 data/f2 >&7
	kill -9 "$pid"
	tail -c +300001 data/f2 >&7 || fail "a write through the bind after kill -9 failed"
	exec 7>&-
	same_file data/f1 "$T1/f1"
	same_file data/f2 "$T1/f2"
	[ "$(daemon_pid)" != "$pid" ] || fail "the daemon was not replaced"
	pid=$(daemon_pid)
fi
note "kill -9 of daemon and keeper, then publish again: remounted, nothing lost"
[ -e "$T1/f2" ] || cp data/f2 "$T1/f2" || fail "write f2"
kpid=$("$FMFS" status "$S" --json | python3 -c \
	'import json,sys; print(json.load(sys.stdin)["keeper_pid"])')
# The keeper first: killed second, it could fork a new daemon in between.
kill -9 "$kpid" 2>/dev/null || true
kill -9 "$pid" 2>/dev/null || true
sleep 0.5
ls "$T1" >/dev/null 2>&1 && fail "the mount still answers after kill -9"
ok node-publish publish
[ "$(mounts_of "$T1")" = 1 ] || fail "publish after the kill: $(mounts_of "$T1") mounts on $T1"
same_file data/f2 "$T1/f2"
same_file data/f1 "$T1/f1"

note "unstage refuses while published, and while the store is down"
head -c 300000 /dev/urandom >data/f3
cp data/f3 "$T1/f3" || fail "write f3" # queued: async_delay 3600
code 9 node-unstage unstage
ok node-unpublish unpublish
ok node-unpublish unpublish
ok node-unpublish unpublish "target_path=\"$T2\""
[ "$(mounts_of "$T1")$(mounts_of "$T2")" = 00 ] || fail "unpublish left mounts"
"$TOP/tests/lib/rgw.sh" stop-gw "$RGW_DIR" >/dev/null 2>&1 || fail "cannot stop the gateway"
FMFS_CSI_UNSTAGE_TIMEOUT=3 code 9 node-unstage unstage
echo "$ERR" | grep -q "stays staged" || fail "the refusal does not say why: $ERR"
[ "$(mounts_of "$S")" = 1 ] || fail "the refused unstage unmounted"
"$TOP/tests/lib/rgw.sh" start-gw "$RGW_DIR" >/dev/null 2>&1 || fail "cannot start the gateway"

note "unstage drains the write-back: the bucket has every file"
ok node-unstage unstage
ok node-unstage unstage
[ "$(mounts_of "$S")" = 0 ] || fail "unstage left the mount"
for f in f1 f2 f3; do
	awsx s3 cp --quiet "s3://$B/data/$f" "got/$f" || fail "aws cannot read $f"
	same_file "data/$f" "got/$f"
done
ls "$FMFS_CSI_RUNDIR"/*.credentials >/dev/null 2>&1 &&
	fail "unstage left the credentials file"

note "FlexVolume: init, mount, unmount"
"$CSI" init | grep -q '"status": "Success".*"attach": false' || fail "flex init"
opts=$(python3 -c '
import base64, json, os
e = os.environ
print(json.dumps({"kubernetes.io/readwrite": "ro", "url": "s3://%s/data" % e["B"],
  "endpoint": e["RGW_ENDPOINT"], "path_style": "true",
  "kubernetes.io/secret/access_key_id": base64.b64encode(e["AWS_ACCESS_KEY_ID"].encode()).decode(),
  "kubernetes.io/secret/secret_access_key": base64.b64encode(e["AWS_SECRET_ACCESS_KEY"].encode()).decode()}))')
mkdir -p "$TEST_DIR/flex"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$CSI" mount "$TEST_DIR/flex" "$opts" >flex.out ||
	fail "flex mount: $(cat flex.out)"
grep -q '"status": "Success"' flex.out || fail "flex mount: $(cat flex.out)"
same_file data/f1 "$TEST_DIR/flex/f1"
(echo x >"$TEST_DIR/flex/nope") 2>/dev/null && fail "flex ro mount took a write"
"$CSI" unmount "$TEST_DIR/flex" | grep -q '"status": "Success"' || fail "flex unmount"
[ "$(mounts_of "$TEST_DIR/flex")" = 0 ] || fail "flex unmount left the mount"
rc=0
"$CSI" mount "$TEST_DIR/flex" '{"url": "s3://'"nosuch-$B"'"}' >flex.out || rc=$?
[ "$rc" = 1 ] && grep -q '"status": "Failure"' flex.out || fail "flex bad mount: $rc $(cat flex.out)"
"$CSI" attach x | grep -q '"Not supported"' || fail "flex attach"
echo "csi ok"
