#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Retries recover from what a real network and a busy server do, and giving
# up is bounded and clearly reported.  The fault proxy (tests/faultproxy.py)
# sits between fmfs and the gateway and answers 503 SlowDown or 500, resets
# connections mid-body, truncates bodies, delays and throttles; every
# result is checked byte-exact with the aws CLI talking straight to the
# gateway.  Authentication errors must not be retried.
. "$TOP/tests/lib/common.sh"

B=$(new_bucket faults)
cd "$TEST_DIR"
random_file obj.bin 20
random_file big.bin 24
awsx s3 cp --quiet obj.bin "s3://$B/obj.bin"
start_proxy
F() { $FMFS obj --endpoint "$PROXY_URL" -v "$@"; }

# forwarded_since N: requests the proxy forwarded to the gateway since
# the stats said N.
fwd() { proxy_stat forwarded; }

note "503 SlowDown twice on GET: retried, byte-exact"
proxy_rules "action=503,method=GET,count=2"
F get "s3://$B/obj.bin" got1 2>log1 || { cat log1; fail "GET did not recover from 503"; }
same_file obj.bin got1
[ "$(proxy_stat 'faults.get("503",0)')" = 2 ] || fail "proxy did not inject two 503s"
grep -q "retry GET.*SlowDown" log1 || { cat log1; fail "no SlowDown retry logged"; }

note "500 InternalError twice on PUT: retried, the object lands intact"
proxy_rules "action=500,method=PUT,count=2"
F put obj.bin "s3://$B/put500.bin" 2>log2 || { cat log2; fail "PUT did not recover from 500"; }
awsx s3 cp --quiet "s3://$B/put500.bin" got2
same_file obj.bin got2

note "connection reset mid-body on GET, three times: retried, byte-exact"
proxy_rules "action=reset,method=GET,count=3"
F get --part-size 5M "s3://$B/obj.bin" got3 2>log3 || { cat log3; fail "GET did not recover from resets"; }
same_file obj.bin got3
[ "$(proxy_stat 'faults.get("reset",0)')" = 3 ] || fail "proxy did not inject three resets"

note "truncated body (clean close short of Content-Length): retried, byte-exact"
proxy_rules "action=truncate,method=GET,count=2,bytes=100000"
F get "s3://$B/obj.bin" got4 2>log4 || { cat log4; fail "GET did not recover from truncation"; }
same_file obj.bin got4
F get "s3://$B/obj.bin" - 2>log4b >got4b || fail "streamed GET failed"
same_file obj.bin got4b

note "reset during multipart part uploads: parts retried, object intact"
proxy_rules "action=reset,method=PUT,path=partNumber=2,count=2" "action=503,method=PUT,path=partNumber=3,count=1"
F put big.bin "s3://$B/mpu.bin" 2>log5 || { cat log5; fail "multipart upload did not recover"; }
awsx s3 cp --quiet "s3://$B/mpu.bin" got5
same_file big.bin got5
[ "$(awsx s3api list-multipart-uploads --bucket "$B" --query 'length(Uploads || `[]`)')" = 0 ] ||
	fail "multipart uploads left open"

note "a slow, delayed server is not an error"
proxy_rules "action=delay,method=GET,ms=700,count=2" "action=slow,method=GET,bps=4000000,count=2"
F get "s3://$B/obj.bin" got6 2>log6 || { cat log6; fail "GET failed on a slow server"; }
same_file obj.bin got6

note "persistent 503: gives up within --retry-time, exit 1, says SlowDown and how many attempts"
proxy_rules "action=503"
t0=$(date +%s%N)
expect_exit 1 "(SlowDown|ServiceUnavailable).*after [0-9]+ attempts" $FMFS obj --endpoint "$PROXY_URL" \
	--retries 4 --retry-time 5 get "s3://$B/obj.bin" got7
ms=$((($(date +%s%N) - t0) / 1000000))
note "gave up after $ms ms"
[ $ms -lt 8000 ] || fail "giving up took $ms ms"
[ -e got7 ] && fail "a failed GET left a file"

note "a failed multipart upload is aborted, nothing half-written"
proxy_rules "action=500,method=PUT,path=partNumber"
expect_exit 1 "InternalError" $FMFS obj --endpoint "$PROXY_URL" --retries 2 \
	put big.bin "s3://$B/never.bin"
proxy_rules
if awsx s3api head-object --bucket "$B" --key never.bin >/dev/null 2>&1; then
	fail "a failed upload left an object"
fi
[ "$(awsx s3api list-multipart-uploads --bucket "$B" --query 'length(Uploads || `[]`)')" = 0 ] ||
	fail "the failed multipart upload was not aborted"

note "a server that stops answering mid-request: bounded by --timeout, exit 5"
proxy_rules "action=drop,method=GET"
t0=$(date +%s%N)
expect_exit 5 "Timeout|timed out" $FMFS obj --endpoint "$PROXY_URL" --timeout 1 \
	--retries 2 --retry-time 2 get "s3://$B/obj.bin" got8
ms=$((($(date +%s%N) - t0) / 1000000))
note "gave up after $ms ms"
[ $ms -lt 8000 ] || fail "dropped requests took $ms ms"

note "authentication errors are never retried"
proxy_rules
before=$(fwd)
expect_exit 3 "SignatureDoesNotMatch" env AWS_SECRET_ACCESS_KEY=wrong \
	$FMFS obj --endpoint "$PROXY_URL" ls "s3://$B/"
after=$(fwd)
[ $((after - before)) = 1 ] || fail "a 403 was sent $((after - before)) times"
# A download starts with HEAD, whose 403 has no body; the reason must
# still be named (fmfs asks again with a 1-byte GET).
expect_exit 3 "SignatureDoesNotMatch" env AWS_SECRET_ACCESS_KEY=wrong \
	$FMFS obj --endpoint "$PROXY_URL" get "s3://$B/obj.bin" got9
echo "all fault scenarios ok"
