#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-inode-mem.sh - what one inode the kernel holds and one listing
# entry cost the daemon in heap bytes (docs/performance.md, "Memory per
# inode"), on a file:// store and on the private gateway, round by round:
#
#   on a fresh mount with an empty cache dir, `ls` of DIRS directories of
#   FILES objects each (READDIRPLUS: an inode for every entry, and every
#   listing kept in memory), then `echo 2 > /proc/sys/vm/drop_caches` (the
#   kernel forgets the inodes, the listings stay).  The heap in use
#   (mallinfo2().uordblks over all arenas: `fmfs status`'s
#   heap_in_use_bytes, or read with gdb from a daemon older than that
#   field) before, after the
#   ls and after the drop gives:
#
#     per inode          (after ls - after drop) / inodes forgotten
#     per listing entry  (after drop - before) / entries listed
#
#   with malloc's chunk overhead and rounding included, as RSS pays them,
#   each heap read once the HEADs behind the listings are done.  The keys
#   are short ("dNN/NNN"); a longer key costs its length more.
#
#   tools/bench/bench-inode-mem.sh
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_DIRS=20         directories
#   BENCH_FILES=1000      objects in each
#   BENCH_GATEWAY=1       also on the gateway (0: file:// only)
#   BENCH_FMFS=PATH       the fmfs binary (tools/fmfs)
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp)
#
# Needs root (drop_caches), and gdb only for an fmfs whose status lacks
# heap_in_use_bytes (BENCH_FMFS of an older tree).  On some kernels gdb
# attaching to the daemon kills it ("Couldn't write extended state
# status"): the status field does not attach.
# Cost: a minute or two; the gateway's upload of DIRS*FILES objects is
# not timed.
#
# Exit status: 0 when the benchmark ran, 1 when the set-up or a
# measurement failed, 2 on a usage error.

set -euo pipefail

PROG=bench-inode-mem.sh
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SIZE=
DIRS=${BENCH_DIRS:-20}
FILES=${BENCH_FILES:-1000}
GATEWAY=${BENCH_GATEWAY:-1}
FMFS=${BENCH_FMFS:-$ROOT/tools/fmfs}
bench_positive DIRS FILES
bench_args "$@"
[ "$(id -u)" = 0 ] || die "needs root (drop_caches)"
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"
bench_init inode-mem no-vm

field() { # FIELD: its value in `fmfs status`
	"$FMFS" status "$TMP/mnt" | awk -v f="$1:" '$1 == f {print $2}'
}

heap() { # PID: bytes of heap in use
	local h
	h=$(field heap_in_use_bytes)
	if [ -z "$h" ]; then # an older fmfs: ask malloc through gdb
		command -v gdb >/dev/null ||
			die "$FMFS has no heap_in_use_bytes in its status, and gdb is missing to read it"
		h=$(gdb -p "$1" -batch \
			-ex 'p (unsigned long)mallinfo2().uordblks' \
			2>/dev/null | awk '/^\$/{print $3}')
	fi
	echo "$h"
}

settle() { # until no HEAD behind a listing waits (at most a minute)
	local i
	for i in $(seq 600); do
		[ "$(field heads_waiting)" != 0 ] || break
		sleep 0.1
	done
	sleep 2 # the cache index's flusher writes once a second
}

measure() { # STORE MOUNT-OPTS...: one round, one line in RESULTS
	local store=$1 pid h0 h1 h2 i1 i2 d
	shift
	rm -rf "$TMP/cache" && mkdir -p "$TMP/cache"
	"$FMFS" mount "$store" "$TMP/mnt" --cache-dir "$TMP/cache" "$@" \
		>/dev/null || die "mount of $store failed"
	pid=$(field daemon_pid)
	ls "$TMP/mnt" >/dev/null
	sleep 1
	h0=$(heap "$pid")
	for d in $(seq 1 "$DIRS"); do
		ls "$TMP/mnt/d$d" >/dev/null
	done
	settle
	h1=$(heap "$pid")
	i1=$(field inodes)
	echo 2 >/proc/sys/vm/drop_caches
	sleep 1
	settle
	h2=$(heap "$pid")
	i2=$(field inodes)
	"$FMFS" umount "$TMP/mnt" || die "umount failed"
	if [ -z "$h0" ] || [ -z "$h1" ] || [ -z "$h2" ] || [ "$i1" -le "$i2" ]; then
		die "no figures (the daemon's heap could not be read)"
	fi
	record "$STORE_NAME" inode $(((h1 - h2) / (i1 - i2)))
	record "$STORE_NAME" entry $(((h2 - h0) / (DIRS * FILES)))
}

msg "writing the file:// tree ($DIRS x $FILES objects, 1 byte each)"
for d in $(seq 1 "$DIRS"); do
	mkdir -p "$TMP/store/d$d"
	(cd "$TMP/store/d$d" && seq 1 "$FILES" | while read -r f; do
		printf x >"$f"; done)
done
if [ "$GATEWAY" = 1 ]; then
	bench_gateway
	msg "uploading the same tree to the gateway (not timed)"
	awsx s3 sync --quiet "$TMP/store" "s3://$BUCKET/" ||
		die "upload failed"
fi
for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	STORE_NAME="file" measure "file://$TMP/store"
	if [ "$GATEWAY" = 1 ]; then
		STORE_NAME="gateway" measure "s3://$BUCKET" \
			--endpoint "$RGW_ENDPOINT" --path-style
	fi
done

echo
echo "memory per inode and per listing entry: heap bytes, medians of $ROUNDS round(s), $DIRS x $FILES objects"
for s in file gateway; do
	grep -q "^[0-9]* $s " "$RESULTS" || continue
	printf '%-8s  per inode %s B  per listing entry %s B\n' "$s" \
		"$(awk -v s=$s '$2 == s && $3 == "inode" {print $4}' "$RESULTS" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')" \
		"$(awk -v s=$s '$2 == s && $3 == "entry" {print $4}' "$RESULTS" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
done
