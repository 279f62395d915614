#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Bad input gets a clear message and a non-zero exit code that scripts can
# rely on (2 usage, 3 credentials, 4 not found, 5 unreachable), within a
# bounded time: malformed URLs, unknown schemes, invalid options, missing
# or wrong credentials, an unreadable credentials file, a nonexistent
# bucket or key, an endpoint that refuses connections and one that
# accepts them but never answers.
. "$TOP/tests/lib/common.sh"

B=$(new_bucket errs)
cd "$TEST_DIR"
echo data >f

note "malformed URLs and unknown schemes (exit 2)"
expect_exit 2 "unknown scheme 'http'" $FMFS obj ls http://example.com/x
expect_exit 2 "is not a URL" $FMFS obj ls just-a-name
expect_exit 2 "not a valid bucket name" $FMFS obj ls s3://Bad_Bucket
expect_exit 2 "no bucket name" $FMFS obj ls s3://
expect_exit 2 "absolute path" $FMFS obj ls file://relative/dir

note "invalid options (exit 2)"
expect_exit 2 "--parallel" $FMFS obj ls --parallel 0 "s3://$B"
expect_exit 2 "--part-size" $FMFS obj put --part-size 1k f "s3://$B/f"
expect_exit 2 "--timeout" $FMFS obj ls --timeout -3 "s3://$B"
expect_exit 2 "must start with http" $FMFS obj ls --endpoint ftp://x "s3://$B"
expect_exit 2 "unknown verb" $FMFS obj frobnicate "s3://$B"
expect_exit 2 "usage: fmfs obj put" $FMFS obj put f
expect_exit 2 "unknown command" $FMFS nonsense

note "missing credentials (exit 3)"
expect_exit 3 "no credentials found" env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
	HOME="$TEST_DIR/nohome" $FMFS obj ls "s3://$B"
expect_exit 3 "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not" \
	env -u AWS_ACCESS_KEY_ID $FMFS obj ls "s3://$B"

note "wrong secret: SignatureDoesNotMatch names the key to check (exit 3, no retry)"
expect_exit 3 "SignatureDoesNotMatch.*AWS_SECRET_ACCESS_KEY" \
	env AWS_SECRET_ACCESS_KEY=wrong-secret $FMFS obj ls "s3://$B"
grep -q "after" err && fail "an authentication error was retried: $(cat err)"
expect_exit 3 "InvalidAccessKeyId.*AWS_ACCESS_KEY_ID" \
	env AWS_ACCESS_KEY_ID=NOSUCHKEY $FMFS obj put f "s3://$B/f"

note "credentials from a profile file; an unreadable credentials file (exit 3)"
mkdir -p home/.aws
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >home/.aws/credentials
printf '[profile bad]\naws_access_key_id = %s\naws_secret_access_key = nope\n' \
	"$AWS_ACCESS_KEY_ID" >home/.aws/config
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$TEST_DIR/home" \
	$FMFS obj put f "s3://$B/from-profile" || fail "profile credentials not used"
awsx s3api head-object --bucket "$B" --key from-profile >/dev/null || fail "profile put missing"
expect_exit 3 "SignatureDoesNotMatch" env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
	HOME="$TEST_DIR/home" AWS_PROFILE=bad $FMFS obj ls "s3://$B"
mkdir unreadable-creds
expect_exit 3 "cannot read .*unreadable-creds" env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY \
	AWS_SHARED_CREDENTIALS_FILE="$TEST_DIR/unreadable-creds" $FMFS obj ls "s3://$B"

note "nonexistent bucket and key (exit 4)"
expect_exit 4 "NoSuchBucket.*aws s3 mb" $FMFS obj ls "s3://no-such-bucket-$$"
expect_exit 4 "NoSuchBucket" $FMFS obj check "s3://no-such-bucket-$$"
expect_exit 4 "NoSuchKey" $FMFS obj get "s3://$B/missing" got.bin
[ -e got.bin ] && fail "a failed get left a file behind"
expect_exit 4 "NoSuchKey" $FMFS obj stat "s3://$B/missing"
expect_exit 4 "no such directory" $FMFS obj ls file:///nonexistent-$$/x

note "endpoint refusing connections: bounded, exit 5"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ms=$(elapsed_ms true)
t0=$(date +%s%N)
expect_exit 5 "Couldn't connect.*check --endpoint" \
	$FMFS obj ls --endpoint "http://127.0.0.1:$port" --retry-time 3 "s3://$B"
ms=$((($(date +%s%N) - t0) / 1000000))
note "gave up after $ms ms"
[ $ms -lt 10000 ] || fail "refused endpoint took $ms ms"

note "endpoint that accepts but never answers: bounded by --timeout and --retry-time, exit 5"
python3 - "$TEST_DIR/silent.port" <<'EOF' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
conns = []
end = time.time() + 120
while time.time() < end:
    s.settimeout(1)
    try:
        c, _ = s.accept(); conns.append(c)   # read nothing, answer nothing
    except socket.timeout:
        pass
EOF
silent=$!
for _ in $(seq 50); do [ -s silent.port ] && break; sleep 0.1; done
t0=$(date +%s%N)
expect_exit 5 "Timeout|timed out" $FMFS obj ls --endpoint "http://127.0.0.1:$(cat silent.port)" \
	--timeout 2 --retries 3 --retry-time 3 "s3://$B"
ms=$((($(date +%s%N) - t0) / 1000000))
kill $silent 2>/dev/null || true
note "gave up after $ms ms"
[ $ms -lt 12000 ] || fail "silent endpoint took $ms ms"
echo "all error paths ok"
