#!/bin/bash
# SPDX-License-Identifier: MIT
#
# No credential material in any output: every tool (fmfs obj at each
# verbosity, fmfs mount's log and its --debug output, fmckpt, fmtrain)
# runs with a recognisable secret key and session token, given in the
# environment and in a credentials file, against the gateway and against
# an unreachable endpoint (error paths).  Every stdout, stderr and log is
# then searched for the secret, the token and any Signature / signature
# query value.  The -v -v runs must show the redacted Authorization
# header, so the search cannot pass because nothing was logged.
. "$TOP/tests/lib/common.sh"

B=$(new_bucket secrets)
cd "$TEST_DIR"
FT=$TOP/tools/fmtrain
CK=$TOP/tools/fmckpt
unset RANK WORLD_SIZE FMCKPT_RUN_ID OMP_NUM_THREADS AWS_PROFILE
OUT=$TEST_DIR/outputs
mkdir -p "$OUT" home
export HOME=$TEST_DIR/home # no ~/.aws of the machine's user

REAL_SECRET=$AWS_SECRET_ACCESS_KEY
KEY_ID=$AWS_ACCESS_KEY_ID
# Recognisable: none of these strings is anything fmfs would print itself.
TOKEN=FMFSsessionTOKEN/never+print+me//IQoJb3JpZ2luX2VjEDoaCXVzLWVhc3QtMSJHMEUCIQ
WRONG_SECRET=FMFSwrongSECRET0never0print0me000000000
unset AWS_SESSION_TOKEN

# run NAME CMD...: CMD's stdout and stderr into OUT/NAME.{out,err};
# its exit status is kept in OUT/NAME.rc and not judged here.
run() {
	local name=$1 rc=0
	shift
	"$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null || rc=$?
	echo "$rc" >"$OUT/$name.rc"
}

# The object tool at every verbosity, successes and failures.
obj_all() { # TAG
	local v tag=$1 vs
	for v in 0 1 2; do
		vs=()
		[ "$v" -ge 1 ] && vs+=(-v)
		[ "$v" -ge 2 ] && vs+=(-v)
		run "$tag-put-v$v" "$FMFS" obj "${vs[@]}" put small.bin "s3://$B/$tag/small.bin"
		run "$tag-putbig-v$v" "$FMFS" obj "${vs[@]}" put big.bin "s3://$B/$tag/big.bin"
		run "$tag-get-v$v" "$FMFS" obj "${vs[@]}" get "s3://$B/$tag/small.bin" "$OUT/got.bin"
		run "$tag-stat-v$v" "$FMFS" obj "${vs[@]}" stat "s3://$B/$tag/small.bin"
		run "$tag-ls-v$v" "$FMFS" obj "${vs[@]}" ls -r "s3://$B/"
		run "$tag-missing-v$v" "$FMFS" obj "${vs[@]}" get "s3://$B/$tag/missing" "$OUT/x"
		run "$tag-cp-v$v" "$FMFS" obj "${vs[@]}" cp "s3://$B/$tag/small.bin" "s3://$B/$tag/copy"
		run "$tag-rm-v$v" "$FMFS" obj "${vs[@]}" rm "s3://$B/$tag/copy"
		run "$tag-down-v$v" "$FMFS" obj "${vs[@]}" --retries 2 --endpoint http://127.0.0.1:9 \
			stat "s3://$B/$tag/small.bin"
	done
}

ckpt_train_all() { # TAG
	local tag=$1
	run "$tag-train" "$FT" train --data shards --steps 2 --ckpt-every 1 \
		--threads 1 --ckpt "s3://$B/$tag/ck"
	run "$tag-ckpt-list" "$CK" list -t "s3://$B/$tag/ck"
	run "$tag-ckpt-verify" "$CK" verify -t "s3://$B/$tag/ck"
	run "$tag-ckpt-bench" "$CK" bench --size 1M --target "s3://$B/$tag/bench"
	run "$tag-ckpt-down" "$CK" list -t "s3://$B/$tag/ck" --endpoint http://127.0.0.1:9
}

mount_all() { # TAG
	local tag=$1 mnt cache
	mnt=$TEST_DIR/mnt-$tag
	cache=$TEST_DIR/cache-$tag
	[ -e /dev/fuse ] || return 0
	mkdir -p "$mnt"
	run "$tag-mount" "$FMFS" mount "s3://$B/$tag/m" "$mnt" --cache-dir "$cache"
	if [ "$(cat "$OUT/$tag-mount.rc")" = 0 ]; then
		echo hello >"$mnt/hello.txt"
		cp big.bin "$mnt/big.bin"
		cat "$mnt/hello.txt" >/dev/null
		"$FMFS" flush "$mnt" --wait --timeout 60 >/dev/null 2>&1 || true
		"$FMFS" umount "$mnt" || unmount_quietly "$mnt"
	fi
	[ -f "$cache/fmfs.log" ] && cp "$cache/fmfs.log" "$OUT/$tag-mount.log"
	# The most verbose the mount gets: --debug, in the foreground.
	timeout -k 5 20 "$FMFS" mount "s3://$B/$tag/d" "$mnt" --cache-dir "$cache-d" \
		--debug >"$OUT/$tag-debug.out" 2>"$OUT/$tag-debug.err" &
	local pid=$!
	for _ in $(seq 100); do
		mountpoint -q "$mnt" && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if mountpoint -q "$mnt"; then
		echo x >"$mnt/x.txt" || true
		ls "$mnt" >/dev/null || true
		"$FMFS" flush "$mnt" --wait --timeout 30 >/dev/null 2>&1 || true
		"$FMFS" umount "$mnt" || unmount_quietly "$mnt"
	fi
	wait "$pid" || true
	[ -f "$cache-d/fmfs.log" ] && cp "$cache-d/fmfs.log" "$OUT/$tag-debug.log"
	return 0
}
trap 'for m in "$TEST_DIR"/mnt-*; do unmount_quietly "$m"; done; cleanup_common' EXIT

random_file small.bin 1
random_file big.bin 20 # multipart: create, parts, complete
printf 'the quick brown fox jumps over the lazy dog\n%.0s' $(seq 400) >text.txt
"$FT" tokenize --shard-tokens 4K shards text.txt >/dev/null || fail "tokenize"

note "secret in the environment, no token (requests succeed)"
obj_all env
ckpt_train_all env
mount_all env
[ "$(cat "$OUT/env-put-v2.rc")" = 0 ] || fail "put -v -v failed: $(cat "$OUT/env-put-v2.err")"
[ "$(cat "$OUT/env-train.rc")" = 0 ] || fail "fmtrain to s3 failed: $(cat "$OUT/env-train.err")"

note "secret and session token in the environment"
export AWS_SESSION_TOKEN=$TOKEN
obj_all envtok
ckpt_train_all envtok
mount_all envtok
unset AWS_SESSION_TOKEN

note "a wrong secret in the environment (SignatureDoesNotMatch)"
export AWS_SECRET_ACCESS_KEY=$WRONG_SECRET
obj_all wrong
ckpt_train_all wrong

note "secret and token in a credentials file"
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
cat >creds <<EOF
[default]
aws_access_key_id = $KEY_ID
aws_secret_access_key = $REAL_SECRET
aws_session_token = $TOKEN
[notoken]
aws_access_key_id = $KEY_ID
aws_secret_access_key = $REAL_SECRET
[wrong]
aws_access_key_id = $KEY_ID
aws_secret_access_key = $WRONG_SECRET
aws_session_token = $TOKEN
EOF
export AWS_SHARED_CREDENTIALS_FILE=$TEST_DIR/creds
obj_all filetok
ckpt_train_all filetok
export AWS_PROFILE=notoken
obj_all file
ckpt_train_all file
mount_all file
[ "$(cat "$OUT/file-put-v2.rc")" = 0 ] || fail "put -v -v failed: $(cat "$OUT/file-put-v2.err")"
export AWS_PROFILE=wrong
obj_all filewrong

note "search $(ls "$OUT" | wc -l) outputs and logs"
# The search itself must see what it looks for: -v -v logs the headers.
for f in env-put-v2 envtok-put-v2 filetok-ls-v2 file-putbig-v2; do
	grep -qiE '^(> )?authorization: ' "$OUT/$f.err" ||
		fail "$f: -v -v shows no Authorization header: $(head -c 600 "$OUT/$f.err")"
done
grep -qiE '^(> )?x-amz-security-token: ' "$OUT/envtok-put-v2.err" ||
	fail "-v -v with a token shows no x-amz-security-token header"
bad=0
for f in "$OUT"/*; do
	case $f in *.rc|*.bin) continue ;; esac
	for s in "$REAL_SECRET" "$WRONG_SECRET" "$TOKEN"; do
		if grep -qF -- "$s" "$f"; then
			echo "credential material in $(basename "$f"):" >&2
			grep -nF -- "$s" "$f" | head -3 | cut -c1-300 >&2
			bad=1
		fi
	done
	if grep -qiE 'signature=[0-9a-f]{8}|x-amz-signature=|x-amz-credential=|x-amz-security-token=' "$f"; then
		echo "a signature in $(basename "$f"):" >&2
		grep -niE 'signature=[0-9a-f]{8}|x-amz-signature=|x-amz-credential=|x-amz-security-token=' "$f" |
			head -3 | cut -c1-300 >&2
		bad=1
	fi
done
[ "$bad" = 0 ] || fail "credential material in the outputs above"
note "no secret, token or signature in any output"
