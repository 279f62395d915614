#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Prometheus metrics (docs/metrics.md): `fmfs mount --metrics`,
# `fmfs metrics MOUNTPOINT` and `fmtrain train --metrics`, read by a real
# Prometheus server (Debian's package, started here on loopback) that
# scrapes the mount and a trainer every second; the test asks
# Prometheus' HTTP API for counters that must have grown by what the
# test did (bytes read, uploads, trainer steps).  The text passes
# promtool's lint; bad --metrics values and a port in use fail with a
# message, mounting nothing.  Two trainers of one machine given the same
# --metrics serve on PORT and PORT + LOCAL_RANK.
. "$TOP/tests/lib/common.sh"

mount_setup metrics
PROM_PID=
TRAIN_PID=
trap '[ -z "$TRAIN_PID" ] || kill -9 "$TRAIN_PID" 2>/dev/null
      [ -z "$PROM_PID" ] || kill "$PROM_PID" 2>/dev/null
      unmount_quietly "$MNT"; cleanup_common' EXIT
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
	echo "SKIP: no prometheus/promtool (apt-get install prometheus)"
	exit 77
fi
FMTRAIN=$(dirname "${FMFS_REAL:-$FMFS}")/fmtrain
[ -x "$FMTRAIN" ] || FMTRAIN=$TOP/tools/fmtrain

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
MPORT=$(free_port)
TPORT=$(free_port)
PPORT=$(free_port)
scrape() { # PORT: the endpoint's text
	curl -fsS "http://127.0.0.1:$1/metrics"
}
# value NAME{LABELS} from text on stdin (0 if absent)
value() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }'
}
# prom_query EXPR: the first value of an instant query (empty if none)
prom_query() {
	curl -fsS "http://127.0.0.1:$PPORT/api/v1/query" \
		--data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")'
}
# prom_wait EXPR MIN: until EXPR >= MIN in Prometheus (20 s at most)
prom_wait() {
	local v
	for _ in $(seq 80); do
		v=$(prom_query "$1" 2>/dev/null || true)
		if [ -n "$v" ] && python3 -c "import sys; sys.exit(0 if float('$v') >= float('$2') else 1)"; then
			echo "$v"
			return 0
		fi
		sleep 0.25
	done
	fail "Prometheus never saw $1 >= $2 (last: '${v:-none}')"
}

note "bad --metrics values: exit 2, naming the option"
expect_exit 2 "--metrics" $FMFS mount "s3://$B" "$MNT" --metrics nonsense
expect_exit 2 "--metrics" $FMFS mount "s3://$B" "$MNT" --metrics 127.0.0.1:99999
python3 -c 'import socket,time,sys
s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(1); time.sleep(30)' "$MPORT" &
HOLD=$!
# listening before the mount tries (python starts slowly under load)
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$MPORT") 2>/dev/null && break
	sleep 0.1
done
rc=0
try_mnt --metrics "127.0.0.1:$MPORT" 2>err || rc=$?
kill "$HOLD" 2>/dev/null || true
wait "$HOLD" 2>/dev/null || true
[ "$rc" != 0 ] || fail "mounted with its metrics port in use"
grep -q "in use\|another process has that port" err ||
	fail "a port in use is not said: $(cat err)"
grep -q " $MNT " /proc/mounts && fail "mounted despite the port in use"
expect_exit 2 "--metrics 'nonsense'" "$FMTRAIN" train --data x --metrics nonsense

note "the mount's endpoint and fmfs metrics: promtool-clean, counting"
mkdir -p data
head -c 3000000 /dev/urandom >data/a
awsx s3 cp --quiet data/a "s3://$B/a" || fail "aws put"
# --no-passthrough: the re-reads below must reach the daemon to be
# counted (a clean file wholly cached is otherwise read by the kernel
# from its cache file, docs/semantics.md, which no counter sees).
try_mnt --metrics "127.0.0.1:$MPORT" --async-delay 0 --no-passthrough ||
	fail "mount --metrics"
scrape "$MPORT" >m0 || fail "no /metrics on 127.0.0.1:$MPORT"
promtool check metrics <m0 || fail "promtool finds fault with the mount's metrics"
$FMFS metrics "$MNT" >m0b || fail "fmfs metrics failed"
grep -q '^fmfs_build_info{' m0b || fail "fmfs metrics lacks build info"
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/other" | grep -q 404 ||
	fail "a path other than /metrics is not a 404"
same_file data/a "$MNT/a"
scrape "$MPORT" >m1
r0=$(value 'fmfs_read_bytes_total{source="cache"}' <m0)
r1=$(value 'fmfs_read_bytes_total{source="cache"}' <m1)
[ $((r1 - r0)) -ge 3000000 ] || fail "read bytes grew by $((r1 - r0)), not 3000000"
g1=$(value 'fmfs_store_requests_total{method="GET",status="2xx"}' <m1)
[ "$g1" -ge 1 ] || fail "no GET counted"
c1=$(value 'fmfs_fuse_requests_total{op="read"}' <m1)
[ "$c1" -ge 3 ] || fail "FUSE reads counted: $c1"
grep -q '^fmfs_fuse_request_duration_seconds_bucket{op="read",le="+Inf"} ' m1 ||
	fail "no read latency histogram"
grep -q '^fmfs_store_first_byte_seconds_count{method="GET"} ' m1 ||
	fail "no time-to-first-byte histogram"
head -c 200000 /dev/urandom >data/w
cp data/w "$MNT/w"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush"
scrape "$MPORT" >m2
[ "$(value fmfs_writeback_uploads_total <m2)" -ge 1 ] || fail "no upload counted"
[ "$(value 'fmfs_store_requests_total{method="PUT",status="2xx"}' <m2)" -ge 1 ] ||
	fail "no PUT counted"
[ "$(value fmfs_connected <m2)" = 1 ] || fail "not connected"
cat "$MNT/nosuch" 2>/dev/null && fail "nosuch exists"
scrape "$MPORT" >m3
[ "$(value 'fmfs_fuse_errors_total{op="lookup"}' <m3)" = 0 ] ||
	fail "a missing name counted as a lookup error"

note "a trainer reading through the mount, with --metrics"
cat "$TOP"/docs/*.md >corpus.txt
"$FMTRAIN" tokenize --shard-tokens 16K "$MNT/shards" corpus.txt >/dev/null ||
	fail "tokenize into the mount"
rc=0 # its port taken (by the mount's endpoint): exit 1, saying so
"$FMTRAIN" train --data "$MNT/shards" --steps 5 --metrics "127.0.0.1:$MPORT" \
	>/dev/null 2>err || rc=$?
[ "$rc" = 1 ] && grep -q "cannot listen on 127.0.0.1:$MPORT: Address already in use" err ||
	fail "fmtrain with its metrics port in use: exit $rc: $(cat err)"
"$FMTRAIN" train --data "$MNT/shards" --steps 100000 --ckpt "$TEST_DIR/ckpt" \
	--ckpt-every 20 --metrics "127.0.0.1:$TPORT" >train.out 2>&1 &
TRAIN_PID=$!

note "Prometheus scraping both; its API sees the counters grow"
cat >prom.yml <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fmfs
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
  - job_name: fmtrain
    static_configs:
      - targets: ['127.0.0.1:$TPORT']
EOF
promtool check config prom.yml >/dev/null || fail "promtool rejects prom.yml"
prometheus --config.file=prom.yml --storage.tsdb.path="$TEST_DIR/tsdb" \
	--web.listen-address="127.0.0.1:$PPORT" >prom.log 2>&1 &
PROM_PID=$!
for _ in $(seq 80); do
	curl -fs "http://127.0.0.1:$PPORT/-/ready" >/dev/null 2>&1 && break
	sleep 0.25
done
curl -fs "http://127.0.0.1:$PPORT/-/ready" >/dev/null ||
	{ tail -5 prom.log >&2; fail "Prometheus did not start"; }
before=$(prom_wait 'fmfs_read_bytes_total{source="cache"}' 1)
cat "$MNT/a" >/dev/null
drop_page_cache "$MNT/a"
cat "$MNT/a" >/dev/null
prom_wait 'fmfs_read_bytes_total{source="cache"}' "$((${before%.*} + 1))" >/dev/null
prom_wait 'up{job="fmfs"}' 1 >/dev/null
steps=$(prom_wait 'fmtrain_steps_total' 1)
prom_wait 'fmtrain_steps_total' "$((${steps%.*} + 1))" >/dev/null
prom_wait 'fmckpt_commits_total' 1 >/dev/null
prom_wait 'fmtrain_step_duration_seconds_count' 1 >/dev/null
scrape "$TPORT" >t1 || fail "no trainer /metrics"
promtool check metrics <t1 || fail "promtool finds fault with the trainer's metrics"

note "the Grafana dashboard: every query is valid PromQL, every metric exists"
scrape "$MPORT" >m4
python3 - "$TOP/docs/grafana/fmfs.json" "$PPORT" m4 t1 <<'EOF' || fail "the dashboard is wrong"
import json, re, sys, urllib.parse, urllib.request
d = json.load(open(sys.argv[1]))
have = set()
for f in sys.argv[3:]:
    for line in open(f):
        if not line.startswith("#"):
            have.add(re.split(r"[{ ]", line, 1)[0])
bad = 0
for p in d["panels"]:
    for t in p.get("targets", []):
        e = t["expr"]
        q = urllib.parse.urlencode({"query": e})
        r = json.load(urllib.request.urlopen(
            "http://127.0.0.1:%s/api/v1/query?%s" % (sys.argv[2], q)))
        if r.get("status") != "success":
            print("bad query in %r: %s" % (p["title"], e)); bad += 1
        for name in re.findall(r"\b(?:fmfs|fmtrain|fmckpt)_[a-z_]+", e):
            if name not in have:
                print("%r: no metric %s" % (p["title"], name)); bad += 1
sys.exit(1 if bad else 0)
EOF
kill -TERM "$TRAIN_PID"
wait "$TRAIN_PID" 2>/dev/null || true
TRAIN_PID=
kill "$PROM_PID"
wait "$PROM_PID" 2>/dev/null || true
PROM_PID=
note "fmtrain ranks of one machine: PORT + LOCAL_RANK"
# LOCAL_RANK=1 with the same --metrics as rank 0's: one port up, so the
# two ranks of a machine given one command line do not collide.
"$FMTRAIN" train --data "$MNT/shards" --steps 100000 \
	--metrics "127.0.0.1:$TPORT" >/dev/null 2>&1 &
L0_PID=$!
LOCAL_RANK=1 "$FMTRAIN" train --data "$MNT/shards" --steps 100000 \
	--metrics "127.0.0.1:$TPORT" >l1.out 2>&1 &
L1_PID=$!
ok=
for _ in $(seq 80); do
	if scrape "$TPORT" >l0.m 2>/dev/null && scrape $((TPORT + 1)) >l1.m 2>/dev/null; then
		ok=1
		break
	fi
	sleep 0.25
done
kill -TERM "$L0_PID" "$L1_PID" 2>/dev/null || true
wait "$L0_PID" "$L1_PID" 2>/dev/null || true
[ -n "$ok" ] || fail "ranks 0 and 1 not on $TPORT and $((TPORT + 1)): $(cat l1.out)"
grep -q '^fmtrain_build_info{' l1.m || fail "LOCAL_RANK 1's port serves no fmtrain metrics"
rc=0
LOCAL_RANK=2 "$FMTRAIN" train --data "$MNT/shards" --steps 1 \
	--metrics 127.0.0.1:65534 >/dev/null 2>err || rc=$?
[ "$rc" = 1 ] && grep -q "port + LOCAL_RANK (2) is past 65535" err ||
	fail "a port past 65535: exit $rc: $(cat err)"

$FMFS umount "$MNT" || fail "umount"
echo "metrics ok"
