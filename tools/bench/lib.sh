# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# lib.sh - what the gateway benchmarks (bench-ckpt.sh, bench-mount.sh,
# bench-objstore.sh, bench-train.sh, bench-write.sh) share; sourced, not
# run. It sources vm.sh (steady memory in a VM) and runs
# tests/lib/rgw.sh (the private gateway).
#
# The caller sets PROG (its name, for messages) and may set, before
# sourcing, COPY (how a file is written onto a mount: cp, the default,
# or dd for `dd bs=1M`) and RGW_MEMSTORE_BYTES (the gateway's memstore
# cap; 10 GiB unless set). Sourcing sets HERE (tools/bench) and ROOT
# (the source tree), exports LC_ALL=C, and takes from the environment
# ROUNDS (BENCH_ROUNDS, 3), SIZE (BENCH_SIZE, 1G), SYSTEMS (BENCH_SYSTEMS,
# the FUSE peers to compare: "s3fs rclone"), BENCH_MEMLOG (a file: the
# memory, dirty-page limits and daemons' RSS before each timed step, and
# each figure, for finding out why a step was slow). After sourcing, the
# caller may change ROUNDS's default (ROUNDS=${BENCH_ROUNDS:-5}), set
# SIZE= (no BENCH_SIZE: no size check, no BYTES), USAGE (the usage
# line's variables), NEED_HINT (how to install a missing tool), FMFS (the
# fmfs binary, tools/fmfs unless set), FMFS_OPTS (extra `fmfs mount`
# options), S3FS_OPTS and RCLONE_OPTS (the peers' tuning; defaults
# below). Then:
#
#   msg TEXT / die TEXT  a message on stderr, PROG first; die exits 1
#   bench_need TOOL...   exit 1 unless each TOOL is on PATH
#   bench_positive VAR...  exit 2 unless each VAR is a positive integer
#                        (the message names BENCH_VAR)
#   bench_args "$@"      checks the command line (none), ROUNDS and SIZE
#                        (exit 2), sets BYTES, checks the tools every
#                        benchmark needs (exit 1)
#   sanitized FILE       whether FILE is a sanitizer build
#   build_optimized NAME TARGET   TMP/NAME: the Makefile's TARGET built
#                        in a copy of the tree configured without
#                        sanitizers (-O2), for timing a sanitizer build's
#                        program
#   bench_init NAME [no-vm]  traps (cleanup on exit, Ctrl-C, TERM), a
#                        fresh temporary directory TMP (BENCH_TMPDIR,
#                        else /tmp) with log/, mnt/, cache/ and RESULTS
#                        (results.tsv, empty), and, unless no-vm, steady
#                        memory in a VM (vm.sh: free page reporting off
#                        until exit)
#   bench_gateway        a private gateway (tests/lib/rgw.sh) in TMP/rgw:
#                        RGW_ENDPOINT, BUCKET, CEPH_CONF, credentials; an
#                        aws CLI config of its own (10 requests in flight,
#                        8 MiB parts, path style); s3fs and rclone configs
#   bench_data           TMP/data.bin: BYTES random bytes
#   bench_systems        RUN_SYSTEMS: those of SYSTEMS that can run here
#                        (the caller's avail_SYS, else avail_peer SYS,
#                        prints why not); SKIPPED: "SYS<TAB>WHY" of the rest
#   awsx ARGS...         aws against the gateway
#   presign KEY...       TMP/url1..N: presigned GET URLs of the KEYs
#   curl_batch N [OPT...]  GET TMP/url1..N at once, one curl each, to
#                        /dev/null: SECS (the batch) and GOT (bytes)
#   collect_garbage      run the gateway's garbage collection (not timed)
#   reclaim PREFIX       delete PREFIX's objects, abort unfinished
#                        multipart uploads, collect_garbage
#   now / elapsed T0 T1 / record METHOD KEY VALUE [MORE...]
#                        a line "ROUND METHOD KEY VALUE [MORE...]" in
#                        RESULTS (ROUND is the caller's)
#   drop_caches / source_ready   sync and drop the page cache; the
#                        latter (before a timed copy) drops it only where
#                        it may, then reads data.bin back into it
#   head_size KEY / durable_at KEY T0   KEY's size in the bucket; seconds
#                        from T0 until KEY holds BYTES bytes
#   copy_onto SRC DST    write SRC to DST as COPY says
#   is_mounted MNT / fuse_unmount MNT / wait_mounted MNT [PID]
#   reap SECS PID...     give PIDs SECS seconds to exit, then TERM, KILL
#   pids_naming STRING   pids of the processes whose argv holds STRING
#   mount_sys SYS MNT CACHE / unmount_sys MNT   a peer (s3fs, rclone)
#                        run in the foreground as our child (DAEMONS)
#   mount_fmfs MNT CACHE / umount_fmfs MNT [SECS]   fmfs (FMFS_MNT)
#   fmfs_log             the last lines of the fmfs logs, for a message
#   measure_aws          aws s3 cp of data.bin (page cache warmed): records
#                        aws put_s; reclaims
#   measure_peer SYS KEY one pass of a peer: mount on a fresh cache dir,
#                        copy data.bin (synced, page cache warmed first)
#                        onto it, record SYS cp_blocking_s and durable_s,
#                        unmount, reclaim KEY
#   measure_peers        measure_peer for each of RUN_SYSTEMS, on the key
#                        SYS-ROUND.bin
#   summarize ARGS... <<'EOF'   python3: the shared part below (rows, med,
#                        ratio, rate, show_goals, write_json; argv RESULTS
#                        BYTES JSON_PATH ...), then the caller's code
#
# Functions that can fail without ending the run (wait_mounted,
# fuse_unmount, mount_sys, unmount_sys, mount_fmfs, umount_fmfs,
# curl_batch) return 1 with the reason in WHY; the caller decides
# (`mount_fmfs M C || die "$WHY"`).
#
# The caller may define cleanup_hook (run at cleanup, after fmfs is
# unmounted). On exit everything started here goes: the fmfs mount, the
# caller's hook, whatever is still mounted under TMP, our own background
# jobs (the peers' daemons, a batch cut short), the gateway, any process
# still naming TMP, then TMP itself.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export LC_ALL=C
RGW_SH=$ROOT/tests/lib/rgw.sh
# shellcheck source=tools/bench/vm.sh
source "$HERE/vm.sh"
# 10 GiB of memstore: several 1 GiB objects can wait for the gateway's
# garbage collection at once without the OSD filling up (then every
# write stalls and the figures mean nothing).
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-10737418240}
MOUNT_TIMEOUT=30     # seconds for a mount to go live
EXIT_TIMEOUT=30      # seconds for a daemon to exit after its unmount
COPY=${COPY:-cp}
# shellcheck disable=SC2034 # read through ${!v} in bench_positive
ROUNDS=${BENCH_ROUNDS:-3}
SIZE=${BENCH_SIZE:-1G}
SYSTEMS=${BENCH_SYSTEMS-s3fs rclone}
USAGE="[BENCH_ROUNDS=N] [BENCH_SIZE=1G]"
NEED_HINT=
FMFS=$ROOT/tools/fmfs
FMFS_OPTS=
S3FS_OPTS="-o parallel_count=8 -o multipart_size=32"
RCLONE_OPTS=
WHY=

msg() { echo "$PROG: $*" >&2; }
die() { msg "$*"; exit 1; }

bench_need() { # TOOL...
	local tool
	for tool in "$@"; do
		command -v "$tool" >/dev/null ||
			die "needs $tool on PATH${NEED_HINT:+ ($NEED_HINT)}"
	done
}

bench_positive() { # VAR...
	local v
	for v in "$@"; do
		case ${!v} in
		'' | *[!0-9]* | 0) msg "BENCH_$v must be a positive integer"; exit 2 ;;
		esac
	done
}

bench_args() { # "$@" of the script
	if [ $# -ne 0 ]; then
		echo "usage: $USAGE $PROG" >&2
		exit 2
	fi
	bench_positive ROUNDS
	if [ -n "$SIZE" ]; then
		BYTES=$(numfmt --from=iec "${SIZE%B}" 2>/dev/null) || BYTES=0
		if [ "$BYTES" -le 0 ]; then
			msg "BENCH_SIZE '$SIZE' is not a size (1G, 512M, ...)"
			exit 2
		fi
	fi
	bench_need aws python3 radosgw radosgw-admin ceph-mon ceph-osd
}

sanitized() { # FILE
	grep -qa -e __asan_init -e __tsan_init -e __ubsan_handle "$1"
}

# A sanitizer build spends CPU per byte that a release build does not
# (and the gateway needs the same cores): the benchmarks measure a copy
# of the same sources built here, outside the tree.
build_optimized() { # NAME TARGET
	local src=$TMP/opt-src
	mkdir -p "$src"
	tar -C "$ROOT" --exclude=.git --exclude='*.o' --exclude='*.d' \
		--exclude='*.a' -cf - . | tar -C "$src" -xf - ||
		die "could not copy the tree to $src"
	(cd "$src" && ./configure >"$TMP/log/configure-opt.log" 2>&1 &&
		make -j2 "$2" >"$TMP/log/make-opt.log" 2>&1) ||
		die "could not build an optimized $1 (see $TMP/log/make-opt.log)"
	cp "$src/$2" "$TMP/$1"
}

TMP=
CLEANED=0
DAEMONS=()

# Pids of processes whose argv holds STRING: the daemons behind a mount
# point (fmfs daemonizes, so it is not our child), or anything left that
# names our temporary directory. Never this shell.
pids_naming() { # STRING
	local f p
	# shellcheck disable=SC2013 # file names, one a line, no spaces
	for f in $(grep -alsF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
		p=${f#/proc/}
		p=${p%/cmdline}
		if [ "$p" = $$ ] || [ "$p" = "$BASHPID" ]; then
			continue
		fi
		# grep itself named STRING and has exited; check again.
		grep -aqsF -- "$1" "/proc/$p/cmdline" 2>/dev/null && echo "$p"
	done
	return 0
}

# Give the processes PID... SECS seconds to exit on their own (saying so
# when they do not), then TERM them, and KILL what is left 5 s later.
reap() { # SECS PID...
	local secs=$1 p i alive
	shift
	for ((i = 0; ; i++)); do
		alive=
		for p in "$@"; do
			if kill -0 "$p" 2>/dev/null; then
				alive="$alive $p"
			fi
		done
		[ -n "$alive" ] || return 0
		[ "$i" -lt $((secs * 10)) ] || break
		sleep 0.1
	done
	[ "$secs" = 0 ] ||
		msg "pids$alive still running ${secs}s after the unmount or stop; killing them"
	# shellcheck disable=SC2086 # one pid a word
	kill -TERM $alive 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		# shellcheck disable=SC2086
		kill -0 $alive 2>/dev/null || return 0
		sleep 0.1
	done
	# shellcheck disable=SC2086
	kill -KILL $alive 2>/dev/null || true
	return 0
}

# Whether anything is mounted on MNT. Not `mountpoint -q`: a FUSE mount
# whose daemon died fails stat ("Transport endpoint is not connected")
# and looks unmounted to it, yet still needs unmounting.
is_mounted() { grep -qF " $1 " /proc/self/mounts; }

# Unmount MNT, gently first. Returns 0 once nothing is mounted there.
fuse_unmount() { # MNT
	is_mounted "$1" || return 0
	fusermount3 -u "$1" 2>/dev/null ||
		timeout 30 umount "$1" 2>/dev/null ||
		umount -l "$1" 2>/dev/null || true
	! is_mounted "$1" || { WHY="could not unmount $1"; return 1; }
}

cleanup() {
	local rc=$? m pids
	[ "$CLEANED" = 1 ] && return
	CLEANED=1
	trap '' INT TERM
	# An fmfs mount still up (a failure or Ctrl-C): unmount it gently.
	if [ -n "${FMFS_MNT:-}" ] && is_mounted "$FMFS_MNT"; then
		timeout 30 "$FMFS" umount "$FMFS_MNT" --timeout 10 >/dev/null 2>&1 ||
			true
	fi
	if declare -F cleanup_hook >/dev/null; then
		cleanup_hook || true
	fi
	vm_memory_restore
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		# Whatever else is mounted under TMP: a peer's mount, a mount
		# that went live after we gave up on it.
		while read -r m; do
			fuse_unmount "$m" || msg "could not unmount $m"
		done < <(awk -v t="$TMP/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts)
	fi
	# Our own background jobs: the peers' daemons, a batch we were
	# interrupted in.
	pids=$(jobs -pr)
	if [ -n "$pids" ]; then
		# shellcheck disable=SC2086 # one pid a word
		reap 0 $pids
		wait 2>/dev/null || true
	fi
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ -d "$TMP/rgw" ] &&
		   ! "$RGW_SH" stop "$TMP/rgw" >/dev/null 2>&1; then
			msg "could not stop the gateway in $TMP/rgw"
		fi
		# Anything else still naming our directory (an fmfs daemon that
		# outlived its unmount, a gateway daemon stop missed).
		pids=$(pids_naming "$TMP/")
		# shellcheck disable=SC2086 # one pid a word
		[ -z "$pids" ] || reap 0 $pids
		if grep -qF " $TMP/" /proc/self/mounts; then
			msg "something is still mounted under $TMP; leaving it"
		else
			rm -rf "$TMP"
		fi
	fi
	exit "$rc"
}

bench_init() { # NAME [no-vm]
	trap cleanup EXIT
	trap 'msg interrupted; exit 130' INT
	trap 'msg terminated; exit 143' TERM
	TMP=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/fmfs-bench-$1.XXXXXX")
	mkdir -p "$TMP/log" "$TMP/mnt" "$TMP/cache"
	RESULTS=$TMP/results.tsv
	: >"$RESULTS"
	[ "${2:-}" = no-vm ] || vm_memory_hold
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
	# The aws CLI's defaults written out, so that a ~/.aws on the machine
	# cannot change what we compare against; keys come from the
	# environment.
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

# Presigned GET URLs (valid a week), made in parallel before any clock
# runs: TMP/urlN for the Nth KEY (URL_KEYS: the KEYs).
URL_KEYS=()
presign() { # KEY...
	local i pids=()
	URL_KEYS=("$@")
	for i in "${!URL_KEYS[@]}"; do
		awsx s3 presign --expires-in 604800 "s3://$BUCKET/${URL_KEYS[$i]}" \
			>"$TMP/url$((i + 1))" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		if ! wait "${pids[$i]}" || [ ! -s "$TMP/url$((i + 1))" ]; then
			die "aws s3 presign failed for ${URL_KEYS[$i]}"
		fi
	done
}

# N curl GETs at once of TMP/url1..N, each to /dev/null (OPT... added to
# every curl): SECS, the wall clock of the batch (process start-up
# included); GOT, the bytes received in all.
curl_batch() { # N [OPT...]
	local n=$1 t0 t1 i b pids=() bad=
	shift
	t0=$EPOCHREALTIME
	for i in $(seq 1 "$n"); do
		curl -sSf -o /dev/null -w '%{size_download}\n' "$@" \
			"$(cat "$TMP/url$i")" >"$TMP/curl$i.out" 2>"$TMP/curl$i.err" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || bad="$bad ${URL_KEYS[$i]:-url$((i + 1))}"
	done
	t1=$EPOCHREALTIME
	if [ -n "$bad" ]; then
		WHY="curl GET failed for$bad: $(cat "$TMP"/curl*.err | head -n 1)"
		return 1
	fi
	GOT=0
	for i in $(seq 1 "$n"); do
		b=$(cat "$TMP/curl$i.out")
		GOT=$(( GOT + ${b:-0} ))
	done
	# shellcheck disable=SC2034 # the caller's
	SECS=$(elapsed "$t0" "$t1")
}

# Deleted objects stay in the gateway's RAM until garbage collection.
collect_garbage() {
	timeout 120 radosgw-admin -c "$CEPH_CONF" gc process --include-all \
		>/dev/null 2>&1 || msg "radosgw-admin gc process failed"
}

reclaim() { # PREFIX
	awsx s3 rm --quiet --recursive "s3://$BUCKET/$1" >/dev/null 2>&1 || true
	# Parts of multipart uploads never completed (a peer's, or one that
	# timed out) hold memory too.
	awsx s3api list-multipart-uploads --bucket "$BUCKET" \
		--query 'Uploads[].[Key,UploadId]' --output text 2>/dev/null |
		while read -r k id; do
			if [ -z "$id" ] || [ "$k" = None ]; then
				continue
			fi
			awsx s3api abort-multipart-upload --bucket "$BUCKET" \
				--key "$k" --upload-id "$id" >/dev/null 2>&1 || true
		done
	collect_garbage
}

bench_data() {
	head -c "$BYTES" /dev/urandom >"$TMP/data.bin"
}

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
# shellcheck disable=SC2153 # ROUND: the caller's loop variable
record() { # METHOD KEY VALUE [MORE...]
	echo "$ROUND $*" >>"$RESULTS"
	[ -z "${BENCH_MEMLOG:-}" ] || echo "-> $*" >>"$BENCH_MEMLOG"
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

wait_mounted() { # MNT [PID]: 0 once MNT is a mount point
	local i
	for ((i = 0; i < MOUNT_TIMEOUT * 10; i++)); do
		mountpoint -q "$1" && return 0
		if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
			WHY="the daemon exited before the mount went live"
			return 1
		fi
		sleep 0.1
	done
	WHY="not mounted after ${MOUNT_TIMEOUT}s"
	return 1
}

# s3fs and rclone run in the foreground as our children, so that their
# pids are ours to wait for after the unmount (rclone writes its cache
# for a while after `fusermount3 -u` returns). AWS_CA_BUNDLE unset: with
# it set, rclone 1.60 refuses to start.
mount_sys() { # SYS MNT CACHE
	case $1 in
	s3fs)
		# shellcheck disable=SC2086 # options are words
		s3fs "$BUCKET" "$2" -f -o url="$RGW_ENDPOINT" \
			-o use_path_request_style -o passwd_file="$TMP/s3fs.passwd" \
			-o use_cache="$3" $S3FS_OPTS \
			>>"$TMP/log/s3fs.log" 2>&1 & ;;
	rclone)
		# shellcheck disable=SC2086 # options are words
		env -u AWS_CA_BUNDLE rclone --config "$TMP/rclone.conf" mount \
			"bench:$BUCKET" "$2" --vfs-cache-mode full --cache-dir "$3" \
			$RCLONE_OPTS >>"$TMP/log/rclone.log" 2>&1 & ;;
	*)
		WHY="no such peer: $1"
		return 1 ;;
	esac
	DAEMONS+=($!)
	wait_mounted "$2" "$!"
}

# Unmount a peer; returns once its daemon is gone too.
unmount_sys() { # MNT
	local p
	fuse_unmount "$1" || return 1
	if [ ${#DAEMONS[@]} -gt 0 ]; then
		reap "$EXIT_TIMEOUT" "${DAEMONS[@]}"
		for p in "${DAEMONS[@]}"; do
			wait "$p" 2>/dev/null || true
		done
	fi
	DAEMONS=()
}

# Why the peer SYS cannot run here (printed, and a failure), or nothing.
avail_peer() { # SYS
	if ! command -v "$1" >/dev/null; then
		echo "not installed (apt-get install -y $1)"
		return 1
	fi
	if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
		echo "needs root and /dev/fuse"
		return 1
	fi
}

bench_systems() {
	local s why check
	RUN_SYSTEMS=()
	SKIPPED=()
	for s in $SYSTEMS; do
		check=avail_peer
		if declare -F "avail_$s" >/dev/null; then
			check=avail_$s
		fi
		if why=$("$check" "$s"); then
			RUN_SYSTEMS+=("$s")
		else
			msg "$s: $why: skipped"
			SKIPPED+=("$s"$'\t'"$why")
		fi
	done
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# Before each timed copy: earlier methods' dirty pages on the disk, clean
# caches dropped (as root) so that every writer finds the same free memory
# (the first writer after a method that freed nothing had to reclaim a
# GiB of page cache first: 3 s against 0.4 s for the same dd), and the
# source file in the page cache again.
source_ready() {
	if [ -w /proc/sys/vm/drop_caches ]; then
		drop_caches
	else
		sync
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
		unmount_sys "$m" || msg "$s: $WHY"
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
	unmount_sys "$m" || msg "$s: $WHY"
	rm -rf "$c"
	reclaim "$key"
}

measure_peers() {
	local s
	for s in "${RUN_SYSTEMS[@]}"; do
		measure_peer "$s" "$s-$ROUND.bin"
	done
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

# fmfs mounts of the gateway's bucket: FMFS is the binary, FMFS_OPTS
# extra mount options, FMFS_MNT the mount that is up; on failure or
# Ctrl-C cleanup unmounts it (and then stops whatever still names TMP,
# the daemon included).
FMFS_MNT=

# The last lines of the fmfs commands' output and of the daemon's log.
fmfs_log() {
	tail -q -n 3 "$TMP/log/fmfs.log" "$TMP"/cache/fmfs*/fmfs.log 2>/dev/null |
		tr '\n' ' '
}

# fmfs daemonizes and returns once the mount is live.
mount_fmfs() { # MNT CACHE
	# shellcheck disable=SC2086 # options are words
	timeout $(( 2 * MOUNT_TIMEOUT )) "$FMFS" mount "s3://$BUCKET" "$1" \
		--cache-dir "$2" --endpoint "$RGW_ENDPOINT" ${FMFS_OPTS:-} \
		>>"$TMP/log/fmfs.log" 2>&1 ||
		{ WHY="fmfs mount failed: $(fmfs_log)"; return 1; }
	FMFS_MNT=$1
	wait_mounted "$1"
}

# `fmfs umount` waits for what is still to upload: SECS (600) at most.
umount_fmfs() { # MNT [SECS]
	timeout "${2:-600}" "$FMFS" umount "$1" >>"$TMP/log/fmfs.log" 2>&1 ||
		{ WHY="fmfs umount $1 failed: $(fmfs_log)"; return 1; }
	! is_mounted "$1" ||
		{ WHY="$1 still mounted after fmfs umount"; return 1; }
	FMFS_MNT=
}

summarize() { # RESULTS BYTES JSON_PATH [ARG...], the caller's code on stdin
	python3 -c "$BENCH_PY
$(cat)" "$@"
}
