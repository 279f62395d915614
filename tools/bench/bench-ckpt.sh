#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-ckpt.sh - the checkpoint benchmark of issue 5: on one private Ceph
# RADOS Gateway, in one run, a 1 GiB checkpoint saved with libfmckpt
# (`fmckpt bench`: 16 tensors, to a local directory and drained to the
# bucket) against
#
#   memcpy     the same bytes copied in memory (the floor for blocking)
#   aws s3 cp  the same number of bytes uploaded by the aws CLI from a
#              file in the page cache (the gateway's parallel PUT rate)
#   s3fs, rclone  how long a plain `cp` of a 1 GiB file onto their mount
#              blocks, and when the object is then complete in the bucket
#              (only if they are installed; set up as bench-mount.sh does)
#
# Goals (issue 5): commit blocking <= 1.2 x memcpy; remote durability at
# >= 0.8 x the gateway's parallel PUT rate (aws s3 cp) in the same run.
# Round by round, each method once, ratios taken within a round, medians
# over rounds. A benchmark, not a test: it fails only when something does
# not work.
#
#   tools/bench/bench-ckpt.sh             (or: make bench)
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_SIZE=1G         checkpoint size
#   BENCH_SYSTEMS="s3fs rclone"   mounts to compare (skipped if missing)
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#   BENCH_FMCKPT=PATH     the fmckpt to run (default tools/fmckpt; a
#                         sanitizer build is replaced by an optimized copy)
#
# The gateway keeps objects in RAM (memstore, 4 GiB cap) and frees
# deleted ones only at garbage collection, so every method's objects are
# deleted and `radosgw-admin gc process --include-all` run before the
# next. Cost: ~3 GiB of RAM for the data and staging, ~1.5 GiB in the
# gateway, 2 GiB on the local disk; ~2-4 minutes with 3 rounds on the
# 2-core test machine. Everything goes away at the end, on failure and
# on Ctrl-C. Mounting s3fs/rclone needs root and /dev/fuse.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error.

set -euo pipefail
export LC_ALL=C

PROG=bench-ckpt.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RGW_SH=$ROOT/tests/lib/rgw.sh
FMCKPT=${BENCH_FMCKPT:-$ROOT/tools/fmckpt}
ROUNDS=${BENCH_ROUNDS:-3}
SIZE=${BENCH_SIZE:-1G}
SYSTEMS=${BENCH_SYSTEMS-s3fs rclone}
MOUNT_TIMEOUT=30

msg() { echo "$PROG: $*" >&2; }
die() { msg "$*"; exit 1; }

[ $# -eq 0 ] || { echo "usage: [BENCH_ROUNDS=N] [BENCH_SIZE=1G] $PROG" >&2; exit 2; }
case $ROUNDS in
'' | *[!0-9]* | 0) msg "BENCH_ROUNDS must be a positive integer"; exit 2 ;;
esac
for tool in aws python3 radosgw radosgw-admin ceph-mon ceph-osd; do
	command -v "$tool" >/dev/null || die "needs $tool on PATH"
done
[ -x "$FMCKPT" ] || die "$FMCKPT missing: run ./configure && make"

TMP=
CLEANED=0
MOUNTS=()
DAEMONS=()
cleanup() {
	local rc=$? m p
	[ "$CLEANED" = 1 ] && return
	CLEANED=1
	trap '' INT TERM
	for m in "${MOUNTS[@]}"; do
		fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	for p in "${DAEMONS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ -d "$TMP/rgw" ] &&
		   ! "$RGW_SH" stop "$TMP/rgw" >/dev/null 2>&1; then
			msg "could not stop the gateway in $TMP/rgw"
		fi
		if grep -qF " $TMP/" /proc/self/mounts; then
			msg "something is still mounted under $TMP; leaving it"
		else
			rm -rf "$TMP"
		fi
	fi
	exit $rc
}
trap cleanup EXIT
trap 'msg interrupted; exit 130' INT
trap 'msg terminated; exit 143' TERM

TMP=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/fmfs-bench-ckpt.XXXXXX")
mkdir -p "$TMP/log" "$TMP/mnt" "$TMP/cache"
RESULTS=$TMP/results.tsv      # ROUND METHOD KEY VALUE
: >"$RESULTS"

# A sanitizer build spends CPU per byte that a release build does not;
# measure an optimized copy of the same sources instead.
if [ -z "${BENCH_FMCKPT:-}" ] &&
   grep -qa -e __asan_init -e __ubsan_handle "$FMCKPT"; then
	msg "tools/fmckpt is a sanitizer build; building an optimized copy"
	vars=$(make -s -C "$ROOT" -pnq config.mak 2>/dev/null)
	srcs="$(sed -n 's/^CKPT_SRCS = //p' <<<"$vars") $(sed -n 's/^OBJSTORE_SRCS = //p' <<<"$vars")"
	[ -n "${srcs// /}" ] || die "could not read the sources from the Makefile"
	# shellcheck disable=SC2046,SC2086 # lists of words
	(cd "$ROOT" && ${CC:-cc} -std=gnu11 -O2 -g -pthread -D_GNU_SOURCE \
		-I. -Iobjstore $(pkg-config --cflags libcurl 2>/dev/null) \
		-o "$TMP/fmckpt" tools/fmckpt.c $srcs cache/crc32c.c \
		-luring -lcurl -lcrypto -lexpat -lm) ||
		die "could not build an optimized fmckpt"
	FMCKPT=$TMP/fmckpt
fi

msg "starting the gateway"
"$RGW_SH" start "$TMP/rgw" >/dev/null 2>"$TMP/log/rgw.err" || {
	cat "$TMP/log/rgw.err" >&2
	die "could not start the gateway"
}
# shellcheck disable=SC1091
source "$TMP/rgw/env"
BUCKET=$RGW_BUCKET
export AWS_CONFIG_FILE=$TMP/aws-config
export AWS_SHARED_CREDENTIALS_FILE=$TMP/aws-credentials
unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_ENDPOINT_URL
cat >"$AWS_CONFIG_FILE" <<EOF
[default]
region = $AWS_REGION
s3 =
    max_concurrent_requests = 10
    multipart_threshold = 8MB
    multipart_chunksize = 8MB
    addressing_style = path
EOF
: >"$AWS_SHARED_CREDENTIALS_FILE"
awsx() { aws --endpoint-url "$RGW_ENDPOINT" "$@"; }

# Deleted objects stay in the gateway's RAM until garbage collection.
reclaim() { # PREFIX
	awsx s3 rm --quiet --recursive "s3://$BUCKET/$1" >/dev/null 2>&1 || true
	timeout 120 radosgw-admin -c "$CEPH_CONF" gc process --include-all \
		>/dev/null 2>&1 || msg "radosgw-admin gc process failed"
}

BYTES=$(numfmt --from=iec "${SIZE%B}" 2>/dev/null) ||
	die "BENCH_SIZE '$SIZE' is not a size (1G, 512M, ...)"
head -c "$BYTES" /dev/urandom >"$TMP/data.bin"

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
record() { echo "$ROUND $1 $2 $3" >>"$RESULTS"; }

# Seconds until KEY is in the bucket with BYTES bytes (polled), from T0.
durable_at() { # KEY T0
	local i sz
	for ((i = 0; i < 6000; i++)); do
		sz=$(awsx s3api head-object --bucket "$BUCKET" --key "$1" \
			--query ContentLength --output text 2>/dev/null) || sz=
		if [ "$sz" = "$BYTES" ]; then
			elapsed "$2" "$(now)"
			return 0
		fi
		sleep 0.1
	done
	return 1
}

wait_mounted() { # MNT PID
	local i
	for ((i = 0; i < MOUNT_TIMEOUT * 10; i++)); do
		mountpoint -q "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$TMP/s3fs.passwd"
chmod 600 "$TMP/s3fs.passwd"
cat >"$TMP/rclone.conf" <<EOF
[bench]
type = s3
provider = Ceph
endpoint = $RGW_ENDPOINT
force_path_style = true
access_key_id = $AWS_ACCESS_KEY_ID
secret_access_key = $AWS_SECRET_ACCESS_KEY
region = $AWS_REGION
EOF
chmod 600 "$TMP/rclone.conf"

mount_sys() { # SYS MNT CACHE
	case $1 in
	s3fs)
		s3fs "$BUCKET" "$2" -f -o url="$RGW_ENDPOINT" \
			-o use_path_request_style -o passwd_file="$TMP/s3fs.passwd" \
			-o use_cache="$3" -o parallel_count=8 -o multipart_size=32 \
			>>"$TMP/log/s3fs.log" 2>&1 & ;;
	rclone)
		env -u AWS_CA_BUNDLE rclone --config "$TMP/rclone.conf" mount \
			"bench:$BUCKET" "$2" --vfs-cache-mode full --cache-dir "$3" \
			>>"$TMP/log/rclone.log" 2>&1 & ;;
	esac
	DAEMONS+=($!)
	MOUNTS+=("$2")
	wait_mounted "$2" "$!"
}

unmount_sys() { # MNT
	fusermount3 -u "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
	for p in "${DAEMONS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	DAEMONS=()
	MOUNTS=()
}

RUN_SYSTEMS=()
for s in $SYSTEMS; do
	if ! command -v "$s" >/dev/null; then
		msg "$s not installed: skipped (apt-get install -y $s)"
	elif [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
		msg "$s needs root and /dev/fuse: skipped"
	else
		RUN_SYSTEMS+=("$s")
	fi
done

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	# libfmckpt: a directory drained to the bucket.
	rm -rf "$TMP/ckpt"
	"$FMCKPT" bench --size "$BYTES" --target "$TMP/ckpt" \
		--target "s3://$BUCKET/fmckpt" --endpoint "$RGW_ENDPOINT" --rounds 1 \
		>"$TMP/fmckpt.$ROUND.json" 2>"$TMP/log/fmckpt.err" ||
		die "fmckpt bench failed: $(cat "$TMP/log/fmckpt.err")"
	python3 - "$TMP/fmckpt.$ROUND.json" <<'EOF' >>"$RESULTS.tmp"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("memcpy_s", "commit_blocking_s", "local_durable_s", "remote_durable_s"):
    print("fmckpt", k, d[k])
EOF
	sed "s/^/$ROUND /" "$RESULTS.tmp" >>"$RESULTS"
	rm -f "$RESULTS.tmp"
	reclaim fmckpt/
	sync

	# aws s3 cp of the same bytes, from the page cache.
	cat "$TMP/data.bin" >/dev/null
	t0=$(now)
	awsx s3 cp --only-show-errors "$TMP/data.bin" "s3://$BUCKET/aws/data.bin" ||
		die "aws s3 cp failed"
	record aws put_s "$(elapsed "$t0" "$(now)")"
	reclaim aws/

	for s in "${RUN_SYSTEMS[@]}"; do
		m=$TMP/mnt/$s
		c=$TMP/cache/$s
		rm -rf "$c"
		mkdir -p "$m" "$c"
		if ! mount_sys "$s" "$m" "$c"; then
			msg "$s did not mount; skipped (log in $TMP/log)"
			unmount_sys "$m"
			continue
		fi
		cat "$TMP/data.bin" >/dev/null
		t0=$(now)
		if cp "$TMP/data.bin" "$m/$s.bin"; then
			record "$s" cp_blocking_s "$(elapsed "$t0" "$(now)")"
			if d=$(durable_at "$s.bin" "$t0"); then
				record "$s" durable_s "$d"
			else
				msg "$s: object not complete in the bucket after 10 min"
			fi
		else
			msg "$s: cp onto the mount failed"
		fi
		unmount_sys "$m"
		rm -rf "$c"
		reclaim "$s.bin"
	done
done

python3 - "$RESULTS" "$BYTES" "${BENCH_JSON:-}" "${RUN_SYSTEMS[*]:-}" <<'EOF'
import json, statistics, sys

res, nbytes, json_out, systems = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
rows = {}
for line in open(res):
    rnd, meth, key, val = line.split()
    rows.setdefault((meth, key), {})[int(rnd)] = float(val)

def med(meth, key):
    v = rows.get((meth, key))
    return statistics.median(v.values()) if v else None

def ratio(a, b):
    ra, rb = rows.get(a, {}), rows.get(b, {})
    v = [ra[r] / rb[r] for r in ra if r in rb and rb[r] > 0]
    return statistics.median(v) if v else None

gib = nbytes / 2**30
mib = nbytes / 2**20
def rate(s):
    return mib / s if s else 0

print()
print("checkpoint benchmark (issue 5): %.2f GiB, 16 tensors, %d round(s), "
      "private RGW on loopback, medians over rounds" % (gib, len(rows.get(("fmckpt", "memcpy_s"), {}))))
print()
m, cb = med("fmckpt", "memcpy_s"), med("fmckpt", "commit_blocking_s")
lo, re = med("fmckpt", "local_durable_s"), med("fmckpt", "remote_durable_s")
aw = med("aws", "put_s")
print("  memcpy of the same bytes        %8.3f s  (%6.0f MiB/s)" % (m, rate(m)))
print("  fmckpt commit blocks            %8.3f s  (%6.0f MiB/s)" % (cb, rate(cb)))
print("  fmckpt durable on local disk    %8.3f s  (%6.0f MiB/s, from commit)" % (lo, rate(lo)))
print("  fmckpt durable in the bucket    %8.3f s  (%6.0f MiB/s, from commit)" % (re, rate(re)))
print("  aws s3 cp (parallel multipart)  %8.3f s  (%6.0f MiB/s)" % (aw, rate(aw)))
for s in systems:
    b, d = med(s, "cp_blocking_s"), med(s, "durable_s")
    if b is None:
        print("  %-6s cp: no figures (see the messages above)" % s)
        continue
    print("  cp onto %-6s blocks          %8.3f s; in the bucket after %s" %
          (s, b, "%.3f s" % d if d is not None else "-"))
print()
r_block = ratio(("fmckpt", "commit_blocking_s"), ("fmckpt", "memcpy_s"))
r_remote = ratio(("aws", "put_s"), ("fmckpt", "remote_durable_s"))
goals = {
    "commit blocking <= 1.2 x memcpy": (r_block, r_block is not None and r_block <= 1.2),
    "remote durability rate >= 0.8 x aws s3 cp rate": (r_remote, r_remote is not None and r_remote >= 0.8),
}
for name, (v, ok) in goals.items():
    print("goal %-48s %s" % (name + ":", "%.2f  %s" % (v, "MET" if ok else "NOT MET") if v is not None else "n/a"))
print("(ratios within each round, median over rounds; remote: aws time / fmckpt time)")
if json_out:
    doc = {"benchmark": "checkpoint-issue-5", "bytes": nbytes,
           "medians": {"%s.%s" % k: med(*k) for k in rows},
           "ratios": {"blocking_over_memcpy": r_block,
                      "remote_rate_over_aws": r_remote},
           "goals": {k: v[1] for k, v in goals.items()},
           "runs": [{"round": r, "method": k[0], "measure": k[1], "value": v}
                    for k, per in rows.items() for r, v in per.items()]}
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=1)
EOF
