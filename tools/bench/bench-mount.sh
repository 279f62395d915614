#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-mount.sh - the read-path benchmark: on one private Ceph
# RADOS Gateway, the same data and the same run, fmfs against s3fs, rclone
# and the local disk. Measured for each system, interleaved round by round:
#
#   cold     8 x 64 MiB shards read at once (8 dd, bs=1M) from a fresh
#            mount with an empty cache directory, page cache dropped
#   warm     the same after an unmount and a mount on the same cache
#            directory (so the cache must persist), page cache dropped
#            (cold and warm also give the CPU seconds per GiB, user +
#            system, of the processes whose command line names the mount
#            point: the mount's daemon)
#   re-read  the same again at once, page cache kept
#   randread fio, 8 KiB random reads, 4 jobs (job N reads shard N, 64 MiB
#            each), psync, buffered, 15 s, on the shards once they are in
#            the system's cache, page cache dropped first: IOPS
#   ls       `ls -l` of a prefix of 10,000 objects on a fresh mount with
#            an empty cache (listing not cached), against `aws s3 ls`
#   small    1000 files of 4 KiB read by 8 cat processes (125 each) on a
#            fresh mount, page cache dropped; fmfs first runs
#            `fmfs prefetch MNT MNT/small --wait` (timed on its own),
#            the others have no prefetch and read cold
#
# and two references: 8 curl GETs of presigned URLs at once, run just
# before each system's cold read (the most the gateway gives a client
# here), and the local disk (the same files in a local directory, page
# cache dropped), read just before each system's warm read. Ratios are
# taken within each round against the reference read next to them, then
# the median over rounds is quoted; the machine's disk swings ~3x between
# runs, so figures from different runs do not compare.
#
# Goals: fmfs warm >= 0.9 x local disk; fmfs cold >= 0.9 x curl
# and >= 2 x s3fs; fmfs `ls -l` of 10k objects <= 2 x `aws s3 ls`.
# This is a benchmark, not a test: it prints figures and whether each goal
# is met, and fails (exit 1) only when something does not work - a mount,
# a read, a wrong byte count, a listing that is not 10,000 entries. A
# system that is not there (fmfs before `fmfs mount` exists, s3fs or
# rclone not installed) gets a row that says so and the rest still runs.
#
#   tools/bench/bench-mount.sh
#
# Environment:
#   BENCH_ROUNDS=3            rounds; each runs every system once
#   BENCH_SYSTEMS="fmfs s3fs rclone"   the mounted systems to run
#   BENCH_JSON=PATH           also write all results as JSON
#   BENCH_PNG=PATH            also draw them as a PNG (python3 with
#                             matplotlib; Debian: python3-matplotlib)
#   BENCH_FIO_RUNTIME=15      seconds of each fio run
#   BENCH_TMPDIR=DIR          where the temporary directory goes (/tmp)
#   BENCH_FMFS=PATH           the fmfs to run (default tools/fmfs)
#   BENCH_FMFS_OPTS="..."     extra options for `fmfs mount`
#   BENCH_S3FS_OPTS="..."     s3fs options on top of url, path style,
#                             passwd_file and use_cache (default below)
#   BENCH_RCLONE_OPTS="..."   rclone mount options on top of
#                             --vfs-cache-mode full --cache-dir (none)
#   BENCH_OP_TIMEOUT=300      seconds any one timed batch may take
#
# The peers (Debian 12: s3fs 1.90, rclone 1.60), as run here:
#   s3fs BUCKET MNT -f -o url=ENDPOINT -o use_path_request_style
#        -o passwd_file=F -o use_cache=DIR
#        -o kernel_cache -o parallel_count=8 -o multipart_size=32
#     kernel_cache keeps the page cache across opens, as fmfs does (else
#     a re-read goes to s3fs every time); parallel_count and
#     multipart_size raise its ranged-GET parallelism from 5 x 10 MB.
#   rclone --config F mount bench:BUCKET MNT --vfs-cache-mode full
#        --cache-dir DIR             (AWS_CA_BUNDLE unset: with it set,
#     rclone 1.60 refuses to start; remote: type s3, provider Ceph,
#     endpoint, force_path_style true)
#   Both run in the foreground as children of this script instead of
#   daemonizing (-f; no --daemon), so that it holds their pids and waits
#   for them to exit after `fusermount3 -u`: rclone keeps writing its
#   cache for ~1 s after the unmount returns, and a cache directory must
#   not be reused or deleted under it.
#   fmfs: tools/fmfs mount s3://BUCKET MNT --cache-dir DIR --endpoint URL
#     (daemonizes, returns once the mount is live); tools/fmfs umount MNT.
#
# Data, uploaded once before any mount (rclone caches a directory's
# listing for 5 minutes and would not see objects added after it
# mounted): 8 x 64 MiB random shards under shards/ (aws s3 cp), 10,000
# 1-byte objects under ls10k/ and 1000 x 4 KiB under small/ (one curl
# process, --parallel with --aws-sigv4: ~10 s for the 10k; aws s3 cp
# --recursive took 37 s, 8 parallel `fmfs obj put` ~60 s).
#
# Cost: ~0.6 GiB of local files plus one system's cache (<= 0.55 GiB) at
# a time, ~1.5 GB of RAM in the gateway; with 3 rounds and all four
# systems about 6.5 minutes on a 2-core machine (fio alone is 3 min of
# it). Needs root (drop_caches, FUSE). In a VM with free page reporting
# it turns reporting off for the run (tools/bench/vm.sh; put back at
# exit; BENCH_PAGE_REPORTING=keep to leave it on).
# Everything - mounts, daemons, gateway, files - goes away at the end, on
# failure and on Ctrl-C.
#
# It sources lib.sh (which sources vm.sh), shared with the other
# bench-*.sh: the gateway and its configs, presigned URLs and the curl
# batch, the mounts of fmfs and the peers, steady memory in a VM and the
# clean-up are there; the measurements and the summary are here, and
# plot-mount.py draws the PNG.
#
# Exit status: 0 when the benchmark ran (goals met or not, fmfs there or
# not), 1 when the set-up or a measurement failed, 2 on a usage error.

# Functions are called through traps and "avail_$s"-style names, and
# "A && record || fail" is meant: record cannot fail.
# shellcheck disable=SC2317,SC2015

set -euo pipefail

PROG=bench-mount.sh
# The gateway's default memstore cap, 4 GiB: the data here is 0.6 GiB
# and nothing is deleted (lib.sh's 10 GiB is for the others' 1 GiB
# objects).
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-4294967296}
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SYSTEMS=${BENCH_SYSTEMS:-fmfs s3fs rclone}
SIZE=                # no BENCH_SIZE here
USAGE="[BENCH_ROUNDS=N] [BENCH_JSON=PATH] [BENCH_PNG=PATH]"
NEED_HINT="Debian: apt-get install -y fio fuse3 curl"
FIO_RUNTIME=${BENCH_FIO_RUNTIME:-15}
OP_TIMEOUT=${BENCH_OP_TIMEOUT:-300}
FMFS=${BENCH_FMFS:-$ROOT/tools/fmfs}
FMFS_OPTS=${BENCH_FMFS_OPTS:-}
S3FS_OPTS=${BENCH_S3FS_OPTS--o kernel_cache -o parallel_count=8 -o multipart_size=32}
RCLONE_OPTS=${BENCH_RCLONE_OPTS:-}

NSHARD=8             # shards read at once
SHARD_MIB=64
NLIST=10000          # objects under ls10k/
NSMALL=1000          # objects under small/
SMALL_BYTES=4096
SMALL_PAR=8          # cat processes over small/
FIO_JOBS=4

bench_positive FIO_RUNTIME OP_TIMEOUT
for s in $SYSTEMS; do
	case $s in
	fmfs | s3fs | rclone) ;;
	*) msg "BENCH_SYSTEMS: unknown system '$s' (fmfs s3fs rclone)"; exit 2 ;;
	esac
done
bench_args "$@"
[ "$(id -u)" = 0 ] || die "needs root (drop_caches, FUSE mounts)"
[ -w /proc/sys/vm/drop_caches ] || die "cannot write /proc/sys/vm/drop_caches"
bench_need curl fio dd timeout mountpoint fusermount3
curl --help all 2>/dev/null | grep -q -- --aws-sigv4 ||
	die "curl has no --aws-sigv4 (needs curl >= 7.75)"

# ---------------------------------------------------------------------
# Temporary directory (lib.sh cleans up after it on exit: mounts,
# daemons, gateway, files) and steady memory in a VM (vm.sh).

bench_init mount
DATA=$TMP/data          # the local copy, laid out as the bucket is
LOG=$TMP/log
mkdir -p "$DATA/shards" "$DATA/ls10k" "$DATA/small"
# RESULTS: ROUND SYSTEM MEASURE VALUE [PAIR]
FAILS=$TMP/failures.tsv      # ROUND SYSTEM MEASURE REASON
UNAVAIL=$TMP/unavailable.tsv # SYSTEM REASON
INFO=$TMP/info.tsv           # KEY VALUE (notes for the report)
: >"$FAILS"; : >"$UNAVAIL"; : >"$INFO"
ROUND=0

# ---------------------------------------------------------------------
# Gateway and data.

T_START=$EPOCHREALTIME
bench_gateway

msg "writing the data: $NSHARD x $SHARD_MIB MiB, $NLIST x 1 B," \
	"$NSMALL x $SMALL_BYTES B"
for i in $(seq 1 "$NSHARD"); do
	head -c "${SHARD_MIB}M" /dev/urandom >"$DATA/shards/shard$i"
done
python3 - "$DATA" "$NLIST" "$NSMALL" "$SMALL_BYTES" <<'EOF'
import os, sys
data, nlist, nsmall, size = sys.argv[1], *map(int, sys.argv[2:5])
for i in range(nlist):
    with open("%s/ls10k/f%05d" % (data, i), "wb") as f:
        f.write(b"x")
for i in range(nsmall):
    with open("%s/small/f%04d" % (data, i), "wb") as f:
        f.write(os.urandom(size))
EOF
(cd "$DATA/small" && ls) >"$TMP/small.list"

# Many small objects: one curl, 16 PUTs in flight, signed by curl itself.
put_many() { # DIR PREFIX
	local f
	for f in "$DATA/$1"/*; do
		printf 'upload-file = "%s"\nurl = "%s/%s/%s/%s"\noutput = "/dev/null"\n' \
			"$f" "$RGW_ENDPOINT" "$BUCKET" "$2" "${f##*/}"
	done >"$TMP/put-$1.curl"
	curl -sSf --no-progress-meter --parallel --parallel-max 16 \
		--aws-sigv4 "aws:amz:$AWS_REGION:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
		-K "$TMP/put-$1.curl" 2>"$LOG/put-$1.err"
}

msg "uploading: shards with aws s3 cp, small objects with curl --parallel"
t0=$EPOCHREALTIME
awsx s3 cp --recursive --only-show-errors "$DATA/shards" \
	"s3://$BUCKET/shards/" || die "aws s3 cp of the shards failed"
t1=$EPOCHREALTIME
put_many ls10k ls10k || { head "$LOG/put-ls10k.err" >&2; die "upload of ls10k/ failed"; }
t2=$EPOCHREALTIME
put_many small small || { head "$LOG/put-small.err" >&2; die "upload of small/ failed"; }
t3=$EPOCHREALTIME
echo "upload_seconds shards $(elapsed "$t0" "$t1") ls10k $(elapsed "$t1" "$t2") small $(elapsed "$t2" "$t3")" >>"$INFO"
n=$(awsx s3 ls "s3://$BUCKET/small/" | wc -l)
[ "$n" = "$NSMALL" ] || die "small/ holds $n objects after the upload, not $NSMALL"

# Presigned URLs for the curl reference (TMP/url1..8), made before any
# clock runs.
keys=()
for i in $(seq 1 "$NSHARD"); do
	keys+=("shards/shard$i")
done
presign "${keys[@]}"

# ---------------------------------------------------------------------
# The systems. Each has avail_X (prints why not and fails when it cannot
# run; lib.sh's avail_peer for s3fs and rclone) and cmd_X (the command
# line, for the report); mount_one SYS MNT CACHE returns once the mount
# is live and unmount_one SYS MNT once the daemon is gone (lib.sh's
# mount_fmfs and mount_sys, and their unmounts); prefetch_X DIR where it
# has a prefetch. Adding a system is adding these and its name to
# BENCH_SYSTEMS's list above.

# fmfs
avail_fmfs() {
	[ -x "$FMFS" ] || { echo "not built ($FMFS missing; run make)"; return 1; }
	"$FMFS" mount --help >/dev/null 2>&1 ||
		{ echo "mount not available yet"; return 1; }
}
cmd_fmfs() {
	echo "fmfs mount s3://$BUCKET MNT --cache-dir DIR --endpoint $RGW_ENDPOINT${FMFS_OPTS:+ $FMFS_OPTS};" \
		"warm read after fmfs umount + mount on the same cache dir;" \
		"prefetch: fmfs prefetch MNT MNT/small --wait"
}
# fmfs daemonizes: its daemon is found by name before `fmfs umount` and
# waited for after it; if the umount fails, fusermount3 unmounts.
unmount_fmfs() { # MNT
	local pids
	pids=$(pids_naming "$1")
	if ! umount_fmfs "$1" 60; then
		msg "$WHY; unmounting with fusermount3"
		fuse_unmount "$1" || return 1
	fi
	# shellcheck disable=SC2086 # one pid a word
	[ -z "$pids" ] || reap "$EXIT_TIMEOUT" $pids
}
prefetch_fmfs() { # MNT DIR (DIR relative to the mount's root)
	timeout "$OP_TIMEOUT" "$FMFS" prefetch "$1" "$1/$2" --wait \
		>>"$LOG/fmfs.log" 2>&1 && return 0
	WHY="fmfs prefetch failed: $(tail -n 2 "$LOG/fmfs.log" | tr '\n' ' ')"
	return 1
}

# s3fs
cmd_s3fs() {
	echo "s3fs $BUCKET MNT -f -o url=$RGW_ENDPOINT -o use_path_request_style" \
		"-o passwd_file=F -o use_cache=DIR $S3FS_OPTS" \
		"($(s3fs --version 2>/dev/null | head -n 1 | sed 's/.*File System //; s/ (.*//'))"
}

# rclone
cmd_rclone() {
	echo "rclone --config F mount bench:$BUCKET MNT --vfs-cache-mode full" \
		"--cache-dir DIR${RCLONE_OPTS:+ $RCLONE_OPTS} (AWS_CA_BUNDLE unset;" \
		"remote: type s3, provider Ceph, force_path_style;" \
		"$(rclone version 2>/dev/null | head -n 1))"
}

mount_one() { # SYS MNT CACHE
	if [ "$1" = fmfs ]; then
		mount_fmfs "$2" "$3"
	else
		mount_sys "$@"
	fi
}
unmount_one() { # SYS MNT
	if [ "$1" = fmfs ]; then
		unmount_fmfs "$2"
	else
		unmount_sys "$2"
	fi
}

bench_systems
for s in "${RUN_SYSTEMS[@]}"; do
	echo "cmd $s $("cmd_$s")" >>"$INFO"
done
if [ ${#SKIPPED[@]} -gt 0 ]; then
	printf '%s\n' "${SKIPPED[@]}" >"$UNAVAIL"
fi
if [ -x "$FMFS" ] && sanitized "$FMFS"; then
	msg "warning: $FMFS is a sanitizer build; its figures are not what fmfs ships"
	echo "warning fmfs is a sanitizer build (./configure --enable-sanitizers): its figures are several times slower than a release build" >>"$INFO"
fi

# ---------------------------------------------------------------------
# Measurements. Each sets RES (the figure) and returns 0, or sets WHY and
# returns 1. Clocks are EPOCHREALTIME around the whole batch, process
# start-up included. record SYS MEASURE VALUE [PAIR] is lib.sh's.

RES=
SHARDS_BYTES=$(( NSHARD * SHARD_MIB * 1048576 ))

fail() { # SYS MEASURE REASON
	printf '%s\t%s\t%s\t%s\n' "$ROUND" "$1" "$2" "$3" >>"$FAILS"
	msg "FAILED: round $ROUND $1 $2: $3"
}

# 8 dd at once over DIR/shard1..8; RES = MiB/s over the batch.
read_shards() { # DIR
	local d=$1 t0 t1 i n got=0 pids=() bad=
	t0=$EPOCHREALTIME
	for i in $(seq 1 "$NSHARD"); do
		timeout -k 5 "$OP_TIMEOUT" dd if="$d/shard$i" of=/dev/null bs=1M \
			2>"$TMP/dd$i.err" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || bad="$bad shard$((i + 1))"
	done
	t1=$EPOCHREALTIME
	if [ -n "$bad" ]; then
		WHY="dd failed on$bad: $(grep -hv -e records -e copied "$TMP"/dd*.err | head -n 1)"
		return 1
	fi
	for i in $(seq 1 "$NSHARD"); do
		n=$(sed -n 's/^\([0-9]*\) bytes.*/\1/p' "$TMP/dd$i.err")
		got=$(( got + ${n:-0} ))
	done
	[ "$got" = "$SHARDS_BYTES" ] ||
		{ WHY="read $got bytes, expected $SHARDS_BYTES"; return 1; }
	RES=$(awk -v b="$got" -v a="$t0" -v c="$t1" \
		'BEGIN { printf "%.1f", b / 1048576 / (c - a) }')
}

# CPU seconds (user + system, all threads) used so far by the processes
# whose command line names MNT: the daemon of that mount.
daemon_cpu() { # MNT
	local p t=0 hz
	hz=$(getconf CLK_TCK)
	for p in $(pids_naming "$1"); do
		# Fields 14 and 15 after the ")" that ends the command name.
		t=$(( t + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null |
			awk '{ print $12 + $13 }') ))
	done
	awk -v t="$t" -v hz="$hz" 'BEGIN { printf "%.3f", t / hz }'
}

# The daemon's CPU seconds per GiB of shards since daemon_cpu gave C0.
cpu_per_gib() { # MNT C0
	awk -v a="$2" -v b="$(daemon_cpu "$1")" -v n="$SHARDS_BYTES" \
		'BEGIN { printf "%.3f", (b - a) / (n / 1073741824) }'
}

# The reference: 8 curl GETs of presigned URLs at once; RES = MiB/s.
curl_shards() {
	curl_batch "$NSHARD" --max-time "$OP_TIMEOUT" || return 1
	[ "$GOT" = "$SHARDS_BYTES" ] ||
		{ WHY="curl read $GOT bytes, expected $SHARDS_BYTES"; return 1; }
	RES=$(awk -v b="$GOT" -v s="$SECS" \
		'BEGIN { printf "%.1f", b / 1048576 / s }')
}

# fio random 8 KiB reads, job N on DIR/shardN; RES = IOPS (all jobs).
fio_shards() { # DIR
	local d=$1 i
	{
		printf '[global]\nrw=randread\nbs=8k\nsize=%dm\ndirect=0\n' "$SHARD_MIB"
		printf 'ioengine=psync\nruntime=%d\ntime_based=1\ngroup_reporting=1\n' "$FIO_RUNTIME"
		for i in $(seq 1 "$FIO_JOBS"); do
			printf '[j%d]\nfilename=%s/shard%d\n' "$i" "$d" "$i"
		done
	} >"$TMP/rand.fio"
	timeout -k 5 $(( OP_TIMEOUT + FIO_RUNTIME )) fio --output-format=json \
		--output="$TMP/fio.json" "$TMP/rand.fio" >"$TMP/fio.err" 2>&1 ||
		{ WHY="fio failed: $(tail -n 3 "$TMP/fio.err" | tr '\n' ' ')"; return 1; }
	RES=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
if j.get("error"):
    sys.exit("fio error %d" % j["error"])
print("%.0f" % j["read"]["iops"])' "$TMP/fio.json" 2>"$TMP/fio.err") ||
		{ WHY="fio: $(cat "$TMP/fio.err")"; return 1; }
}

# `ls -l DIR`; RES = seconds. Every entry must be there.
list_dir() { # DIR
	local t0 t1 n
	t0=$EPOCHREALTIME
	timeout -k 5 "$OP_TIMEOUT" ls -l "$1" >"$TMP/ls.out" 2>"$TMP/ls.err" ||
		{ WHY="ls -l failed: $(head -n 2 "$TMP/ls.err" | tr '\n' ' ')"; return 1; }
	t1=$EPOCHREALTIME
	n=$(grep -c '^-' "$TMP/ls.out" || true)
	[ "$n" = "$NLIST" ] ||
		{ WHY="ls -l listed $n files, expected $NLIST"; return 1; }
	RES=$(elapsed "$t0" "$t1")
}

aws_list() {
	local t0 t1 n
	t0=$EPOCHREALTIME
	awsx s3 ls "s3://$BUCKET/ls10k/" >"$TMP/awsls.out" 2>"$TMP/awsls.err" ||
		{ WHY="aws s3 ls failed: $(head -n 2 "$TMP/awsls.err")"; return 1; }
	t1=$EPOCHREALTIME
	n=$(wc -l <"$TMP/awsls.out")
	[ "$n" = "$NLIST" ] ||
		{ WHY="aws s3 ls listed $n objects, expected $NLIST"; return 1; }
	RES=$(elapsed "$t0" "$t1")
}

# Read DIR/small/* (names known beforehand: no readdir) with 8 cat
# processes of 125 files each; RES = seconds.
read_small() { # DIR
	local t0 t1 n
	sed "s|^|$1/|" "$TMP/small.list" >"$TMP/small.paths"
	t0=$EPOCHREALTIME
	n=$(timeout -k 5 "$OP_TIMEOUT" xargs -d '\n' -P "$SMALL_PAR" \
		-n $(( NSMALL / SMALL_PAR )) cat <"$TMP/small.paths" 2>"$TMP/cat.err" |
		wc -c) || { WHY="cat failed: $(head -n 2 "$TMP/cat.err" | tr '\n' ' ')"; return 1; }
	t1=$EPOCHREALTIME
	[ "$n" = $(( NSMALL * SMALL_BYTES )) ] ||
		{ WHY="read $n bytes of small files, expected $(( NSMALL * SMALL_BYTES ))"; return 1; }
	RES=$(elapsed "$t0" "$t1")
}

# The bdi readahead of a mount (KiB), for the notes.
read_ahead_kb() { # MNT
	local dev
	dev=$(awk -v m="$1" '$5 == m { print $3 }' /proc/self/mountinfo | tail -n 1)
	cat "/sys/class/bdi/$dev/read_ahead_kb" 2>/dev/null || echo "?"
}

# ---------------------------------------------------------------------
# One round of one system.

bench_local() {
	local d=$DATA
	drop_caches
	read_shards "$d/shards" && record local warm "$RES" ||
		{ fail local warm "$WHY"; return 1; }
	read_shards "$d/shards" && record local reread "$RES" ||
		{ fail local reread "$WHY"; return 1; }
	drop_caches
	fio_shards "$d/shards" && record local randread "$RES" ||
		{ fail local randread "$WHY"; return 1; }
	drop_caches
	list_dir "$d/ls10k" && record local ls "$RES" ||
		{ fail local ls "$WHY"; return 1; }
	drop_caches
	read_small "$d/small" && record local small "$RES" ||
		{ fail local small "$WHY"; return 1; }
	aws_list && record aws ls "$RES" ||
		{ fail aws ls "$WHY"; return 1; }
	curl_shards && record curl cold "$RES" ||
		{ fail curl cold "$WHY"; return 1; }
	msg "round $ROUND local: done"
}

# A failed step unmounts and gives up on this system for this round.
give_up() { # SYS MEASURE MNT [MOUNTED]: MOUNTED (default SYS) owns MNT
	local f owner=${4:-$1}
	fail "$1" "$2" "$WHY"
	# The daemon's own log: what the script saw ($LOG/SYS.log), and for
	# fmfs the one it keeps in its cache directory.
	for f in "$LOG/$owner.log" "$TMP/cache/$owner/fmfs.log"; do
		[ -s "$f" ] || continue
		msg "last lines of $f:"
		tail -n 5 "$f" | sed 's/^/    /' >&2
	done
	if is_mounted "$3"; then
		unmount_one "$owner" "$3" || fuse_unmount "$3" || true
	fi
	return 1
}

bench_mounted() { # SYS
	local s=$1 m=$TMP/mnt/$1 c=$TMP/cache/$1 line c0
	mkdir -p "$m"
	rm -rf "$c"; mkdir -p "$c"

	# Cold: the gateway reference, then a fresh mount on an empty cache.
	curl_shards && record curl cold "$RES" "$s" || { fail curl cold "$WHY"; return 1; }
	mount_one "$s" "$m" "$c" || give_up "$s" mount "$m" || return 1
	[ "$ROUND" != 1 ] || echo "readahead_kb $s $(read_ahead_kb "$m")" >>"$INFO"
	drop_caches
	c0=$(daemon_cpu "$m")
	read_shards "$m/shards" && record "$s" cold "$RES" ||
		give_up "$s" cold "$m" || return 1
	record "$s" cold_cpu "$(cpu_per_gib "$m" "$c0")"
	line="cold $RES"

	# Warm: unmount, mount on the same cache dir, page cache dropped;
	# the local disk read next to it.
	unmount_one "$s" "$m" || give_up "$s" unmount "$m" || return 1
	mount_one "$s" "$m" "$c" || give_up "$s" remount "$m" || return 1
	drop_caches
	read_shards "$DATA/shards" && record local warm "$RES" "$s" ||
		give_up local warm "$m" "$s" || return 1
	drop_caches
	c0=$(daemon_cpu "$m")
	read_shards "$m/shards" && record "$s" warm "$RES" ||
		give_up "$s" warm "$m" || return 1
	record "$s" warm_cpu "$(cpu_per_gib "$m" "$c0")"
	line="$line, warm $RES"
	read_shards "$m/shards" && record "$s" reread "$RES" ||
		give_up "$s" reread "$m" || return 1
	line="$line, re-read $RES MiB/s"
	# What came through the mount must be what was uploaded.
	for i in 1 "$NSHARD"; do
		cmp -s "$m/shards/shard$i" "$DATA/shards/shard$i" || {
			WHY="shard$i read through the mount differs from the upload"
			give_up "$s" content "$m" || return 1
		}
	done
	drop_caches
	fio_shards "$m/shards" && record "$s" randread "$RES" ||
		give_up "$s" randread "$m" || return 1
	line="$line, randread $RES IOPS"
	unmount_one "$s" "$m" || give_up "$s" unmount "$m" || return 1
	rm -rf "$c"; mkdir -p "$c"

	# Listing and small files: a fresh mount on an empty cache again.
	mount_one "$s" "$m" "$c" || give_up "$s" mount "$m" || return 1
	drop_caches
	list_dir "$m/ls10k" && record "$s" ls "$RES" ||
		give_up "$s" ls "$m" || return 1
	line="$line, ls $(printf %.2f "$RES") s"
	if declare -F "prefetch_$s" >/dev/null; then
		t0=$EPOCHREALTIME
		"prefetch_$s" "$m" small || give_up "$s" prefetch "$m" || return 1
		record "$s" prefetch "$(elapsed "$t0" "$EPOCHREALTIME")"
	fi
	drop_caches
	read_small "$m/small" && record "$s" small "$RES" ||
		give_up "$s" small "$m" || return 1
	line="$line, small $(printf %.2f "$RES") s"
	if [ "$s" = fmfs ]; then
		timeout 30 "$FMFS" status "$m" --json >"$LOG/fmfs-status-r$ROUND.json" \
			2>>"$LOG/fmfs.log" || true
	fi
	unmount_one "$s" "$m" || give_up "$s" unmount "$m" || return 1
	rm -rf "$c"
	msg "round $ROUND $s: $line"
}

# ---------------------------------------------------------------------

T_BENCH=$EPOCHREALTIME
ORDER=(local "${RUN_SYSTEMS[@]}")
for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	# Rotate the order each round so that no system always goes first.
	k=$(( (ROUND - 1) % ${#ORDER[@]} ))
	for s in "${ORDER[@]:$k}" "${ORDER[@]:0:$k}"; do
		if [ "$s" = local ]; then
			bench_local || true
		else
			bench_mounted "$s" || true
		fi
	done
done
T_END_ROUNDS=$EPOCHREALTIME

# ---------------------------------------------------------------------
# Summary.

ELAPSED=$(elapsed "$T_START" "$EPOCHREALTIME")
JSON_OUT=${BENCH_JSON:-$TMP/results.json}
set +e
python3 - "$RESULTS" "$FAILS" "$UNAVAIL" "$INFO" "$JSON_OUT" "$ROUNDS" \
	"$ELAPSED" "$(elapsed "$T_BENCH" "$T_END_ROUNDS")" "$FIO_RUNTIME" \
	"${RUN_SYSTEMS[*]:-}" "$SYSTEMS" "$(df -T "$DATA" | awk 'NR == 2 { print $1 " (" $2 ")" }')" <<'EOF'
import json, statistics, sys

(res_path, fail_path, unav_path, info_path, json_out, rounds, elapsed,
 rounds_s, fio_runtime, run_systems, systems, localfs) = sys.argv[1:13]
run_systems = run_systems.split()
systems = systems.split()

rows = []
for line in open(res_path):
    rnd, sysname, meas, value, *pair = line.split()
    rows.append({"round": int(rnd), "system": sysname, "measure": meas,
                 "value": float(value), "next_to": pair[0] if pair else None})
fails = []
for line in open(fail_path):
    rnd, sysname, meas, why = line.rstrip("\n").split("\t", 3)
    fails.append({"round": int(rnd), "system": sysname, "measure": meas,
                  "reason": why})
unavailable = {}
for line in open(unav_path):
    sysname, why = line.rstrip("\n").split("\t", 1)
    unavailable[sysname] = why
info = {"cmd": {}, "readahead_kb": {}, "warning": []}
for line in open(info_path):
    key, rest = line.rstrip("\n").split(" ", 1)
    if key in ("cmd", "readahead_kb"):
        name, val = rest.split(" ", 1)
        info[key][name] = val
    elif key == "warning":
        info["warning"].append(rest)
    else:
        info[key] = rest

UNITS = {"cold": "MiB/s", "warm": "MiB/s", "reread": "MiB/s",
         "randread": "IOPS", "ls": "s", "small": "s", "prefetch": "s"}
MEASURES = ["cold", "warm", "reread", "randread", "ls", "small"]
HEAD = {"cold": "cold MiB/s", "warm": "warm MiB/s", "reread": "re-read MiB/s",
        "randread": "8k rand IOPS", "ls": "ls -l 10k s",
        "small": "1000 small s"}
ROWS = ["local", "curl", "aws"] + systems

def vals(sysname, meas, round_=None):
    return [r["value"] for r in rows if r["system"] == sysname
            and r["measure"] == meas and (round_ is None or r["round"] == round_)]

summary = {}
for s in ROWS:
    for m in list(UNITS):
        v = vals(s, m)
        if v:
            summary.setdefault(s, {})[m] = {
                "median": statistics.median(v), "min": min(v), "max": max(v),
                "n": len(v), "unit": UNITS[m]}

def med(s, m):
    return summary.get(s, {}).get(m, {}).get("median")

# Ratios within each round, against the reference read next to it.
def paired(s, m, ref_sys, ref_m, adjacent):
    out = []
    for rnd in range(1, int(rounds) + 1):
        a = vals(s, m, rnd)
        if adjacent:
            b = [r["value"] for r in rows if r["round"] == rnd and
                 r["system"] == ref_sys and r["measure"] == ref_m and
                 r["next_to"] == s]
        else:
            b = vals(ref_sys, ref_m, rnd)
        if a and b:
            out.append(a[0] / b[0])
    if not out:
        return None
    return {"median": statistics.median(out), "min": min(out),
            "max": max(out), "n": len(out)}

RATIOS = [  # name, system measure, reference, adjacent, goal, sense
    ("warm/local", "warm", "local", "warm", True, 0.9, ">="),
    ("cold/curl", "cold", "curl", "cold", True, 0.9, ">="),
    ("cold/s3fs", "cold", "s3fs", "cold", False, 2.0, ">="),
    ("ls/aws", "ls", "aws", "ls", False, 2.0, "<="),
]
ratios = {}
for s in systems:
    for name, m, rs, rm, adj, goal, sense in RATIOS:
        if s == rs:
            continue
        p = paired(s, m, rs, rm, adj)
        if p:
            p["of_medians"] = med(s, m) / med(rs, rm) if med(rs, rm) else None
            ratios.setdefault(s, {})[name] = p

def fmt(v, m):
    if v is None:
        return "-"
    if m == "randread":
        return "%.0f" % v
    if UNITS[m] == "s":
        return "%.2f" % v
    return "%.0f" % v

failed = {(f["system"], f["measure"]) for f in fails}
print()
print("mount read benchmark: %s round(s), private RGW on "
      "loopback, medians over rounds" % rounds)
print("8 x 64 MiB shards read at once; randread: fio 8 KiB psync buffered, "
      "4 jobs x 1 shard, %s s" % fio_runtime)
print()
w = 13
print("%-8s" % "system" + "".join("%*s" % (w + 1, HEAD[m]) for m in MEASURES))
for s in ROWS:
    if s in unavailable:
        print("%-8s  %s: %s" % (s, s, unavailable[s]))
        continue
    if s not in summary and not any(f["system"] == s for f in fails):
        continue
    cells = []
    for m in MEASURES:
        c = fmt(med(s, m), m)
        if (s, m) in failed or (c == "-" and any(
                f["system"] == s for f in fails)):
            c = ("FAILED" if c == "-" else c + "!")
        cells.append("%*s" % (w + 1, c))
    print("%-8s" % s + "".join(cells))
print()
print("spread over rounds [min - max]:")
for s in ROWS:
    if s not in summary:
        continue
    parts = []
    for m in MEASURES:
        x = summary[s].get(m)
        if x:
            parts.append("%s %s-%s" % (m, fmt(x["min"], m), fmt(x["max"], m)))
    print("  %-7s %s" % (s, ", ".join(parts)))
for s in systems:
    x = summary.get(s, {}).get("prefetch")
    if x:
        print("  %s prefetch of small/ (not in the small column): median "
              "%.2f s [%.2f - %.2f]" % (s, x["median"], x["min"], x["max"]))
for s in systems:
    cc, wc = vals(s, "cold_cpu"), vals(s, "warm_cpu")
    if cc or wc:
        print("  %s daemon CPU s per GiB (user + system, median): cold %s, "
              "warm %s" % (s, "%.3f" % statistics.median(cc) if cc else "-",
                           "%.3f" % statistics.median(wc) if wc else "-"))
        summary.setdefault(s, {})["daemon_cpu_s_per_gib"] = {
            "cold": statistics.median(cc) if cc else None,
            "warm": statistics.median(wc) if wc else None}
print()
print("ratios, taken within each round, median over rounds (ratio of the "
      "medians in brackets);")
print("warm/local and cold/curl against the read next to it in the same round:")
for s in systems:
    if s not in ratios:
        continue
    parts = []
    for name, *_ in RATIOS:
        p = ratios[s].get(name)
        if p:
            parts.append("%s %.2f (%.2f)" % (name, p["median"],
                                             p["of_medians"] or 0))
    print("  %-7s %s" % (s, ", ".join(parts)))
print()
goals = {}
GOAL_TEXT = {"warm/local": "fmfs warm >= 0.9 x local disk",
             "cold/curl": "fmfs cold >= 0.9 x parallel curl GETs",
             "cold/s3fs": "fmfs cold >= 2 x s3fs",
             "ls/aws": "fmfs ls -l 10k <= 2 x aws s3 ls"}
for name, m, rs, rm, adj, goal, sense in RATIOS:
    p = ratios.get("fmfs", {}).get(name)
    if "fmfs" in unavailable:
        verdict = "n/a (fmfs: %s)" % unavailable["fmfs"]
        goals[name] = None
    elif p is None:
        verdict = "n/a (no figures%s)" % (
            "" if rs in summary else "; %s not measured" % rs)
        goals[name] = None
    else:
        ok = p["median"] >= goal if sense == ">=" else p["median"] <= goal
        goals[name] = ok
        verdict = "%.2f  %s" % (p["median"], "MET" if ok else "NOT MET")
    print("goal %-45s %s" % (GOAL_TEXT[name] + ":", verdict))
print()
print("systems as run:")
for s in systems:
    if s in info["cmd"]:
        ra = info["readahead_kb"].get(s)
        print("  %-7s %s%s" % (s, info["cmd"][s],
                               "; bdi read_ahead_kb %s" % ra if ra else ""))
print("  local   %s, the same files, page cache dropped (warm) / kept "
      "(re-read)" % localfs)
print("  curl    8 curl processes at once, presigned URLs -> /dev/null, "
      "just before each system's cold read")
print("  aws     aws s3 ls s3://BUCKET/ls10k/ (process start included)")
print("  small   8 cat processes x 125 files, names known (no readdir), "
      "page cache dropped; fresh mount, empty cache")
for wmsg in info["warning"]:
    print("WARNING: " + wmsg)
if "upload_seconds" in info:
    print("upload (s): " + info["upload_seconds"])
print("rounds took %.0f s; whole run %.0f s" % (float(rounds_s), float(elapsed)))
if fails:
    print()
    for f in fails:
        print("FAILED round %d %s %s: %s" % (f["round"], f["system"],
                                             f["measure"], f["reason"]))

doc = {"benchmark": "mount-read", "rounds": int(rounds),
       "shards": 8, "shard_mib": 64, "list_objects": 10000,
       "small_files": 1000, "small_bytes": 4096,
       "fio_runtime_s": int(fio_runtime),
       "systems": systems, "ran": run_systems, "unavailable": unavailable,
       "commands": info["cmd"], "readahead_kb": info["readahead_kb"],
       "local_fs": localfs, "warnings": info["warning"],
       "summary": summary, "ratios": ratios,
       "goals": {GOAL_TEXT[k]: v for k, v in goals.items()},
       "failures": fails, "seconds": float(elapsed), "runs": rows}
with open(json_out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
sys.exit(1 if fails else 0)
EOF
rc=$?
set -e
[ -z "${BENCH_JSON:-}" ] || msg "results written to $BENCH_JSON"

if [ -n "${BENCH_PNG:-}" ]; then
	py=
	for p in python3 /usr/bin/python3; do
		if command -v "$p" >/dev/null &&
		   "$p" -c 'import matplotlib' 2>/dev/null; then
			py=$p
			break
		fi
	done
	if [ -z "$py" ]; then
		msg "no PNG: no python3 with matplotlib (apt-get install -y python3-matplotlib)"
	elif "$py" "$HERE/plot-mount.py" "$JSON_OUT" "$BENCH_PNG"; then
		msg "chart written to $BENCH_PNG"
	else
		msg "no PNG: plot-mount.py failed"
	fi
fi
exit $rc
