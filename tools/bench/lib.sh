# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# lib.sh - what bench-ckpt.sh and bench-write.sh share; sourced, not run.
#
# The caller sets PROG (its name, for messages) and ROOT (the source
# tree) before sourcing it, and may set COPY (how a file is written onto
# a mount: cp, the default, or dd for `dd bs=1M`). From the environment:
# ROUNDS (BENCH_ROUNDS, 3), SIZE (BENCH_SIZE, 1G), SYSTEMS (BENCH_SYSTEMS,
# the FUSE peers to compare: "s3fs rclone"), BENCH_MEMLOG (a file: the
# memory, dirty-page limits and daemons' RSS before each timed step, and
# each figure, for finding out why a step was slow). Then:
#
#   bench_args "$@"      checks the command line (none), ROUNDS and SIZE
#                        (exit 2), sets BYTES, checks the tools every
#                        benchmark needs (exit 1)
#   bench_init NAME      traps (cleanup on exit, Ctrl-C, TERM), a fresh
#                        temporary directory TMP (BENCH_TMPDIR, else /tmp)
#                        with log/, mnt/, cache/ and RESULTS (results.tsv:
#                        ROUND METHOD KEY VALUE, one figure a line), and
#                        steady memory in a VM (vm.sh: free page
#                        reporting off until exit)
#   bench_gateway        a private gateway (tests/lib/rgw.sh) in TMP/rgw:
#                        RGW_ENDPOINT, BUCKET, CEPH_CONF, credentials; an
#                        aws CLI config of its own (10 requests in flight,
#                        8 MiB parts, path style); s3fs and rclone configs
#   bench_data           TMP/data.bin: BYTES random bytes
#   bench_systems        RUN_SYSTEMS: those of SYSTEMS that can run here
#   awsx ARGS...         aws against the gateway
#   reclaim PREFIX       delete PREFIX's objects and run the gateway's GC
#   now / elapsed T0 T1 / record METHOD KEY VALUE   (ROUND is the caller's)
#   durable_at KEY T0    seconds from T0 until KEY holds BYTES bytes
#   copy_onto SRC DST    write SRC to DST as COPY says
#   measure_aws          aws s3 cp of data.bin (page cache warmed): records
#                        aws put_s; reclaims
#   measure_peer SYS KEY one pass of a peer: mount on a fresh cache dir,
#                        copy data.bin (synced, page cache warmed first)
#                        onto it, record SYS cp_blocking_s and durable_s,
#                        unmount, reclaim KEY
#   summarize ARGS... <<'EOF'   python3: the shared part below (rows, med,
#                        ratio, rate, show_goals, write_json; argv RESULTS
#                        BYTES JSON_PATH ...), then the caller's code
#
# The caller may define cleanup_hook (run first at cleanup, e.g. to
# unmount what the lib does not know about). On exit everything started
# here goes: mounts in MOUNTS, daemons in DAEMONS, the gateway, any
# process still naming TMP, then TMP itself.

RGW_SH=$ROOT/tests/lib/rgw.sh
# shellcheck source=tools/bench/vm.sh
source "$ROOT/tools/bench/vm.sh"
# 10 GiB of memstore: several 1 GiB objects can wait for the gateway's
# garbage collection at once without the OSD filling up (then every
# write stalls and the figures mean nothing).
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-10737418240}
MOUNT_TIMEOUT=30
COPY=${COPY:-cp}
ROUNDS=${BENCH_ROUNDS:-3}
SIZE=${BENCH_SIZE:-1G}
SYSTEMS=${BENCH_SYSTEMS-s3fs rclone}

msg() { echo "$PROG: $*" >&2; }
die() { msg "$*"; exit 1; }

bench_need() { # TOOL...
	local tool
	for tool in "$@"; do
		command -v "$tool" >/dev/null || die "needs $tool on PATH"
	done
}

TMP=
CLEANED=0
MOUNTS=()
DAEMONS=()

# Pids of processes whose argv holds STRING (a daemon that outlived its
# unmount: fmfs daemonizes, so it is not our child). Never this shell.
pids_naming() { # STRING
	local f p
	# shellcheck disable=SC2013 # file names, one a line, no spaces
	for f in $(grep -alsF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
		p=${f#/proc/}
		p=${p%/cmdline}
		if [ "$p" = $$ ] || [ "$p" = "$BASHPID" ]; then
			continue
		fi
		grep -aqsF -- "$1" "/proc/$p/cmdline" 2>/dev/null && echo "$p"
	done
	return 0
}

cleanup() {
	local rc=$? m p i pids
	[ "$CLEANED" = 1 ] && return
	CLEANED=1
	trap '' INT TERM
	if declare -F cleanup_hook >/dev/null; then
		cleanup_hook || true
	fi
	vm_memory_restore
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
		pids=$(pids_naming "$TMP/")
		if [ -n "$pids" ]; then
			# shellcheck disable=SC2086 # one pid a word
			kill -TERM $pids 2>/dev/null || true
			for ((i = 0; i < 50; i++)); do
				# shellcheck disable=SC2086
				kill -0 $pids 2>/dev/null || break
				sleep 0.1
			done
			# shellcheck disable=SC2086
			kill -KILL $pids 2>/dev/null || true
		fi
		if grep -qF " $TMP/" /proc/self/mounts; then
			msg "something is still mounted under $TMP; leaving it"
		else
			rm -rf "$TMP"
		fi
	fi
	exit "$rc"
}

bench_init() { # NAME
	trap cleanup EXIT
	trap 'msg interrupted; exit 130' INT
	trap 'msg terminated; exit 143' TERM
	TMP=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/fmfs-bench-$1.XXXXXX")
	mkdir -p "$TMP/log" "$TMP/mnt" "$TMP/cache"
	RESULTS=$TMP/results.tsv      # ROUND METHOD KEY VALUE
	: >"$RESULTS"
	vm_memory_hold
}

bench_args() { # "$@" of the script
	if [ $# -ne 0 ]; then
		echo "usage: [BENCH_ROUNDS=N] [BENCH_SIZE=1G] $PROG" >&2
		exit 2
	fi
	case $ROUNDS in
	'' | *[!0-9]* | 0) msg "BENCH_ROUNDS must be a positive integer"; exit 2 ;;
	esac
	BYTES=$(numfmt --from=iec "${SIZE%B}" 2>/dev/null) || BYTES=0
	if [ "$BYTES" -le 0 ]; then
		msg "BENCH_SIZE '$SIZE' is not a size (1G, 512M, ...)"
		exit 2
	fi
	bench_need aws python3 radosgw radosgw-admin ceph-mon ceph-osd
}

awsx() { aws --endpoint-url "$RGW_ENDPOINT" "$@"; }

bench_gateway() {
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

	# durable_at polls with HEAD every 0.1 s: with curl (a few ms of CPU
	# each) where it can sign, else with the aws CLI (~0.3 s of CPU each,
	# taken from the upload it waits for on a 2-core machine).
	if curl --help all 2>/dev/null | grep -q -- --aws-sigv4; then
		HEAD_WITH=curl
	else
		HEAD_WITH=aws
	fi
}

# Deleted objects stay in the gateway's RAM until garbage collection.
reclaim() { # PREFIX
	awsx s3 rm --quiet --recursive "s3://$BUCKET/$1" >/dev/null 2>&1 || true
	# Parts of multipart uploads never completed (a peer's, or one that
	# timed out) hold memory too.
	awsx s3api list-multipart-uploads --bucket "$BUCKET" \
		--query 'Uploads[].[Key,UploadId]' --output text 2>/dev/null |
		while read -r k id; do
			[ -n "$id" ] && [ "$k" != None ] || continue
			awsx s3api abort-multipart-upload --bucket "$BUCKET" \
				--key "$k" --upload-id "$id" >/dev/null 2>&1 || true
		done
	timeout 120 radosgw-admin -c "$CEPH_CONF" gc process --include-all \
		>/dev/null 2>&1 || msg "radosgw-admin gc process failed"
}

bench_data() {
	head -c "$BYTES" /dev/urandom >"$TMP/data.bin"
}

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
# shellcheck disable=SC2153 # ROUND: the caller's loop variable
record() {
	echo "$ROUND $1 $2 $3" >>"$RESULTS"
	[ -z "${BENCH_MEMLOG:-}" ] || echo "-> $1 $2 $3" >>"$BENCH_MEMLOG"
}

# The size of KEY in the bucket, or nothing when it is not there.
head_size() { # KEY
	if [ "$HEAD_WITH" = curl ]; then
		curl -sSf -I --max-time 10 --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
			--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
			-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
			"$RGW_ENDPOINT/$BUCKET/$1" 2>/dev/null |
			tr -d '\r' | awk 'tolower($1) == "content-length:" { print $2 }'
	else
		awsx s3api head-object --bucket "$BUCKET" --key "$1" \
			--query ContentLength --output text 2>/dev/null
	fi
}

# Seconds until KEY is in the bucket with BYTES bytes (polled), from T0.
durable_at() { # KEY T0
	local i sz
	for ((i = 0; i < 6000; i++)); do
		sz=$(head_size "$1") || sz=
		if [ "$sz" = "$BYTES" ]; then
			elapsed "$2" "$(now)"
			return 0
		fi
		sleep 0.1
	done
	return 1
}

copy_onto() { # SRC DST
	case $COPY in
	dd) dd if="$1" of="$2" bs=1M status=none ;;
	*) cp "$1" "$2" ;;
	esac
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

# s3fs and rclone run in the foreground as our children, so that their
# pids are ours to wait for after the unmount (rclone writes its cache
# for a while after `fusermount3 -u` returns).
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
	local p
	fusermount3 -u "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
	for p in "${DAEMONS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	DAEMONS=()
	MOUNTS=()
}

bench_systems() {
	local s
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
}

# Before each timed copy: earlier methods' dirty pages on the disk, clean
# caches dropped (as root) so that every writer finds the same free memory
# (the first writer after a method that freed nothing had to reclaim a
# GiB of page cache first: 3 s against 0.4 s for the same dd), and the
# source file in the page cache again.
source_ready() {
	sync
	if [ -w /proc/sys/vm/drop_caches ]; then
		echo 3 >/proc/sys/vm/drop_caches
	fi
	cat "$TMP/data.bin" >/dev/null
	if [ -n "${BENCH_MEMLOG:-}" ]; then
		{
			echo "== ${FUNCNAME[1]} ${ROUND:-} $(date +%T)"
			grep -E '^(MemFree|MemAvailable|Cached|Dirty|Writeback|AnonPages):' /proc/meminfo | tr -s ' ' | tr '\n' ' '
			grep -E '^nr_dirty_(background_)?threshold' /proc/vmstat | tr '\n' ' '
			echo
			ps -o rss=,comm= -C radosgw,ceph-osd,fmfs,s3fs,rclone | tr '\n' ' '
			echo
		} >>"$BENCH_MEMLOG"
	fi
}

measure_aws() {
	local t0
	source_ready
	t0=$(now)
	awsx s3 cp --only-show-errors "$TMP/data.bin" "s3://$BUCKET/aws/data.bin" ||
		die "aws s3 cp failed"
	record aws put_s "$(elapsed "$t0" "$(now)")"
	reclaim aws/
}

measure_peer() { # SYS KEY
	local s=$1 key=$2 m=$TMP/mnt/$1 c=$TMP/cache/$1 t0 d
	rm -rf "$c"
	mkdir -p "$m" "$c"
	if ! mount_sys "$s" "$m" "$c"; then
		msg "$s did not mount; skipped (log in $TMP/log)"
		unmount_sys "$m"
		return 0
	fi
	source_ready
	t0=$(now)
	if copy_onto "$TMP/data.bin" "$m/$key"; then
		record "$s" cp_blocking_s "$(elapsed "$t0" "$(now)")"
		if d=$(durable_at "$key" "$t0"); then
			record "$s" durable_s "$d"
		else
			msg "$s: object not complete in the bucket after 10 min"
		fi
	else
		msg "$s: $COPY onto the mount failed"
	fi
	unmount_sys "$m"
	rm -rf "$c"
	reclaim "$key"
}

# The summary's shared half. rows[(METHOD, KEY)] = {ROUND: VALUE}; med()
# the median over rounds; ratio() the median of the per-round ratios.
BENCH_PY=$(cat <<'EOF'
import json, statistics, sys

res, nbytes, json_out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for line in open(res):
    rnd, meth, key, val = line.split()
    rows.setdefault((meth, key), {})[int(rnd)] = float(val)
nrounds = len({r for per in rows.values() for r in per})
gib = nbytes / 2**30
mib = nbytes / 2**20

def med(meth, key):
    v = rows.get((meth, key))
    return statistics.median(v.values()) if v else None

def ratio(a, b):
    ra, rb = rows.get(a, {}), rows.get(b, {})
    v = [ra[r] / rb[r] for r in ra if r in rb and rb[r] > 0]
    return statistics.median(v) if v else None

def rate(s):
    return mib / s if s else 0

def show_goals(goals, width=48):
    for name, (v, ok) in goals.items():
        print("goal %-*s %s" % (width, name + ":", "%.2f  %s" % (v, "MET" if ok else "NOT MET") if v is not None else "n/a"))

def write_json(name, ratios, goals):
    if not json_out:
        return
    doc = {"benchmark": name, "bytes": nbytes,
           "medians": {"%s.%s" % k: med(*k) for k in rows},
           "ratios": ratios,
           "goals": {k: v[1] for k, v in goals.items()},
           "runs": [{"round": r, "method": k[0], "measure": k[1], "value": v}
                    for k, per in rows.items() for r, v in per.items()]}
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=1)
EOF
)

# fmfs mounts of the gateway's bucket (bench-write.sh, bench-train.sh):
# FMFS is the binary, FMFS_OPTS extra mount options, FMFS_MNT the mount
# that is up; on failure or Ctrl-C cleanup_hook unmounts it (the lib then
# stops whatever still names TMP, the daemon included).
FMFS_MNT=
cleanup_hook() {
	[ -n "$FMFS_MNT" ] || return 0
	if grep -qF " $FMFS_MNT " /proc/self/mounts; then
		timeout 30 "$FMFS" umount "$FMFS_MNT" --timeout 10 >/dev/null 2>&1 ||
			fusermount3 -u "$FMFS_MNT" 2>/dev/null ||
			umount -l "$FMFS_MNT" 2>/dev/null || true
	fi
}

# The last lines of the fmfs commands' output and of the daemon's log.
fmfs_log() {
	tail -q -n 3 "$TMP/log/fmfs.log" "$TMP"/cache/fmfs*/fmfs.log 2>/dev/null |
		tr '\n' ' '
}

mount_fmfs() { # MNT CACHE
	# shellcheck disable=SC2086 # options are words
	timeout 60 "$FMFS" mount "s3://$BUCKET" "$1" --cache-dir "$2" \
		--endpoint "$RGW_ENDPOINT" ${FMFS_OPTS:-} >>"$TMP/log/fmfs.log" 2>&1 ||
		die "fmfs mount failed: $(fmfs_log)"
	FMFS_MNT=$1
	mountpoint -q "$1" || die "fmfs mount returned but $1 is not mounted"
}

umount_fmfs() { # MNT
	timeout 600 "$FMFS" umount "$1" >>"$TMP/log/fmfs.log" 2>&1 ||
		die "fmfs umount $1 failed: $(fmfs_log)"
	! grep -qF " $1 " /proc/self/mounts || die "$1 still mounted after fmfs umount"
	FMFS_MNT=
}

summarize() { # RESULTS BYTES JSON_PATH [ARG...], the caller's code on stdin
	python3 -c "$BENCH_PY
$(cat)" "$@"
}
