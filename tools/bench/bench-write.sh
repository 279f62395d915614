#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench-write.sh - the write benchmark: on one private Ceph
# RADOS Gateway, in one run, a 1 GiB file in the page cache written with
# `dd bs=1M` (no fsync) and closed, onto
#
#   local disk  a directory next to the cache dirs: how long dd takes to
#               return, right before fmfs pass 1 and again right after it
#               (the mean of the two is the reference for close), and
#               with conv=fsync (for reference only: on the disk, not in
#               RAM)
#   fmfs        a fresh mount with default options (--async-delay 1),
#               twice a round:
#               pass 1: how long dd takes to return (close), then when
#                 the object is complete in the bucket (polled with HEAD
#                 every 0.1 s until its size is the file's), from the
#                 start of the write; then how long `fmfs umount` takes
#               pass 2: close again, then `fmfs flush MNT --wait` at once
#                 (uploads without waiting for --async-delay; returns when
#                 the object is in the bucket): its time, and the time
#                 from the start of the write until it returns
#   s3fs, rclone  the same dd: close, and when the object is complete in
#               the bucket (only if installed; mounted as bench-ckpt.sh
#               does: s3fs parallel_count=8 multipart_size=32, rclone
#               --vfs-cache-mode full, whose write-back waits 5 s)
#   aws s3 cp   the same file uploaded by the aws CLI (10 requests in
#               flight, 8 MiB parts): the gateway's parallel PUT rate
#
# Goals: close returns within 1.2 x the local disk (fmfs pass 1
# dd time / local reference dd time); draining reaches >= 0.8 x the
# parallel PUT rate of the gateway: aws s3 cp time / fmfs drain time,
# where the drain is from close returning to the object complete in the
# bucket (pass 1: in-the-bucket time - close time; it includes the 1 s
# --async-delay).
# Also printed: the same from the start of the write (aws time / fmfs
# in-the-bucket time), with flush --wait (aws time / flush time, pass 2),
# and close and in-the-bucket ratios for s3fs and rclone.
# Round by round, each method once (aws, local, fmfs 1 and 2, peers: the
# local reference next to fmfs pass 1, so both dd runs get the same free
# memory), ratios taken within a round, medians over rounds. A
# benchmark, not a test: it fails only when something does not work.
# The gateway, mounts, polling, clean-up and the summary's common part
# are in lib.sh, which it sources (lib.sh sources vm.sh), shared with
# the other bench-*.sh.
#
#   tools/bench/bench-write.sh            (or: make bench)
#
# Environment:
#   BENCH_ROUNDS=3        rounds
#   BENCH_SIZE=1G         file size
#   BENCH_SYSTEMS="s3fs rclone"   other mounts to compare (skipped if
#                         missing: apt-get install -y s3fs rclone)
#   BENCH_JSON=PATH       also write every figure as JSON
#   BENCH_TMPDIR=DIR      where the temporary directory goes (/tmp); the
#                         local-disk reference and every cache dir are in it
#   BENCH_FMFS=PATH       the fmfs to run (default tools/fmfs; a sanitizer
#                         build is refused with exit 2)
#   BENCH_FMFS_OPTS="..." extra options for `fmfs mount`
#   BENCH_PAGE_REPORTING=keep   leave a VM's free page reporting on (by
#                         default it is off for the run: tools/bench/vm.sh)
#   BENCH_MEMLOG=PATH     memory state before each step (lib.sh)
#
# The gateway keeps objects in RAM (memstore, 14 GiB cap here) and frees
# deleted ones only at garbage collection, so every method's object is
# deleted and `radosgw-admin gc process --include-all` run before the
# next. Cost: 1 GiB of data plus one 1 GiB copy at a time on the disk
# under BENCH_TMPDIR, ~1.5 GiB of RAM in the gateway; ~3-5 minutes with
# 3 rounds on a 2-core machine. Everything goes away at the end, on
# failure and on Ctrl-C. Mounting needs root and /dev/fuse.
#
# Exit status: 0 when the benchmark ran (goals met or not), 1 when the
# set-up or a measurement failed, 2 on a usage error or a sanitizer build.

set -euo pipefail

PROG=bench-write.sh
COPY="dd"                     # copy_onto: dd bs=1M
# Deleted objects stay in the memstore until gc; 10 GiB ran out in round
# 3 of a 1 GiB run (a multipart POST timed out).
export RGW_MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-15032385536}
# shellcheck source=tools/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FMFS=${BENCH_FMFS:-$ROOT/tools/fmfs}
FMFS_OPTS=${BENCH_FMFS_OPTS:-}

bench_args "$@"
bench_need fusermount3
[ -x "$FMFS" ] || die "$FMFS missing: run ./configure && make"
if sanitized "$FMFS"; then
	msg "$FMFS is a sanitizer build: it spends CPU per byte that a release" \
		"build does not, so its figures would say nothing. Build without" \
		"sanitizers (./configure && make clean && make) and run again."
	exit 2
fi
if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then
	die "needs root and /dev/fuse"
fi

bench_init write

unmount_fmfs() { # METHOD MNT: records METHOD umount_s
	local t0
	t0=$(now)
	umount_fmfs "$2" || die "$WHY"
	record "$1" umount_s "$(elapsed "$t0" "$(now)")"
}

# The local-disk reference: dd into TMP/local, no fsync and with fsync;
# "again": the no-fsync dd once more (blocking2_s), after fmfs pass 1.
measure_local() {
	local conv key t0 convs="none fsync"
	[ "${1:-}" = again ] && convs=again
	mkdir -p "$TMP/local"
	for conv in $convs; do
		source_ready
		t0=$(now)
		if [ "$conv" = fsync ]; then
			key=fsync_s
			dd if="$TMP/data.bin" of="$TMP/local/x" bs=1M conv=fsync status=none
		else
			key=blocking_s
			[ "$conv" = again ] && key=blocking2_s
			dd if="$TMP/data.bin" of="$TMP/local/x" bs=1M status=none
		fi || die "dd to the local disk failed"
		record local "$key" "$(elapsed "$t0" "$(now)")"
		rm -f "$TMP/local/x"
	done
	sync
}

# One fmfs pass on a fresh mount and cache dir. poll: method fmfs,
# cp_blocking_s and durable_s (HEAD polled), umount_s. flush: method
# fmfs_flush, cp_blocking_s, flush_s (flush --wait run at once after
# close), durable_s (start of the write to flush returning), umount_s.
measure_fmfs() { # poll|flush
	local m=$TMP/mnt/fmfs c=$TMP/cache/fmfs meth=fmfs
	local t0 t1 t2 d sz key
	[ "$1" = flush ] && meth=fmfs_flush
	# A key of its own: a HEAD must never see an earlier pass's object
	# (a delete that did not take made one round's drain 0.14 s).
	key=$meth-$ROUND.bin
	rm -rf "$c"
	mkdir -p "$m" "$c"
	mount_fmfs "$m" "$c" || die "$WHY"
	source_ready
	t0=$(now)
	dd if="$TMP/data.bin" of="$m/$key" bs=1M status=none ||
		die "fmfs: dd onto the mount failed: $(fmfs_log)"
	t1=$(now)
	record $meth cp_blocking_s "$(elapsed "$t0" "$t1")"
	if [ "$1" = poll ]; then
		d=$(durable_at "$key" "$t0") ||
			die "fmfs: object not complete in the bucket after 10 min"
		record $meth durable_s "$d"
	else
		timeout 600 "$FMFS" flush "$m" --wait >>"$TMP/log/fmfs.log" 2>&1 ||
			die "fmfs flush --wait failed: $(fmfs_log)"
		t2=$(now)
		record $meth flush_s "$(elapsed "$t1" "$t2")"
		record $meth durable_s "$(elapsed "$t0" "$t2")"
		sz=$(head_size "$key") || sz=
		[ "$sz" = "$BYTES" ] ||
			die "fmfs flush --wait returned, but the object is '$sz' bytes, not $BYTES"
	fi
	unmount_fmfs $meth "$m"
	rm -rf "$c"
	reclaim "$key"
}

bench_gateway
bench_data
bench_systems

for ROUND in $(seq 1 "$ROUNDS"); do
	msg "round $ROUND of $ROUNDS"
	# The local reference runs right before fmfs pass 1, so that both
	# dd runs see the same gateway memory (its memstore grows with every
	# upload, and the kernel's dirty-page limits shrink with it: run
	# after aws s3 cp, fmfs alone got the throttling); source_ready
	# gives each the same free memory.
	# It runs again right after (once pass 1 is in the bucket and
	# unmounted): the reference is the mean of the two, which takes out
	# the drift of the machine's state across the pass.
	measure_aws
	measure_local
	measure_fmfs poll
	measure_local again
	measure_fmfs flush
	measure_peers
done

summarize "$RESULTS" "$BYTES" "${BENCH_JSON:-}" "${RUN_SYSTEMS[*]:-}" <<'EOF'
systems = sys.argv[4].split()

# The local reference: the mean of the dd before and after fmfs pass 1.
b1, b2 = rows.get(("local", "blocking_s"), {}), rows.get(("local", "blocking2_s"), {})
if b1:
    rows[("local", "ref_s")] = {r: (b1[r] + b2[r]) / 2 if r in b2 else b1[r] for r in b1}

# The drain: from close returning to the object complete in the bucket.
for meth in ["fmfs"] + systems:
    b, d = rows.get((meth, "cp_blocking_s"), {}), rows.get((meth, "durable_s"), {})
    dr = {r: d[r] - b[r] for r in d if r in b}
    if dr:
        rows[(meth, "drain_s")] = dr

def line(label, meth, key, mibs=True):
    per = rows.get((meth, key))
    if not per:
        print("  %-44s        -" % label)
        return
    v = med(meth, key)
    print("  %-44s %8.3f  %8s   [%s]" % (label, v, "%.0f" % rate(v) if mibs else "",
          " ".join("%.3f" % per[r] for r in sorted(per))))

print()
print("write benchmark: %.2f GiB from the page cache, dd bs=1M, "
      "%d round(s), private RGW on loopback, medians over rounds" % (gib, nrounds))
print()
print("  %-44s %8s  %8s   %s" % ("", "s", "MiB/s", "[per round, s]"))
line("local disk: dd returns (no fsync)", "local", "blocking_s")
line("local disk: the same after fmfs pass 1", "local", "blocking2_s")
line("local disk: reference (mean of the two)", "local", "ref_s")
line("local disk: dd conv=fsync returns", "local", "fsync_s")
line("aws s3 cp (parallel multipart PUT)", "aws", "put_s")
line("fmfs: dd returns (close)", "fmfs", "cp_blocking_s")
line("fmfs: in the bucket, from the start", "fmfs", "durable_s")
line("fmfs: drain, close to in the bucket", "fmfs", "drain_s")
line("fmfs: umount after that", "fmfs", "umount_s", False)
line("fmfs pass 2: dd returns (close)", "fmfs_flush", "cp_blocking_s")
line("fmfs pass 2: flush --wait right after close", "fmfs_flush", "flush_s")
line("fmfs pass 2: flush returns, from the start", "fmfs_flush", "durable_s")
for s in systems:
    if not rows.get((s, "cp_blocking_s")):
        print("  %-44s no figures (see the messages above)" % (s + ":"))
        continue
    line("%s: dd returns (close)" % s, s, "cp_blocking_s")
    line("%s: in the bucket, from the start" % s, s, "durable_s")
print()

r_block = ratio(("fmfs", "cp_blocking_s"), ("local", "ref_s"))
r_drain = ratio(("aws", "put_s"), ("fmfs", "drain_s"))
r_start = ratio(("aws", "put_s"), ("fmfs", "durable_s"))
r_flush = ratio(("aws", "put_s"), ("fmfs_flush", "flush_s"))
r_flush_start = ratio(("aws", "put_s"), ("fmfs_flush", "durable_s"))
r_block2 = ratio(("fmfs_flush", "cp_blocking_s"), ("local", "ref_s"))
goals = {
    "close returns <= 1.2 x local disk": (r_block, r_block is not None and r_block <= 1.2),
    "drain rate >= 0.8 x aws s3 cp rate": (r_drain, r_drain is not None and r_drain >= 0.8),
}
show_goals(goals, 40)
print("(ratios within each round, median over rounds. close: fmfs dd time /")
print(" local reference dd time. drain: aws s3 cp time / (fmfs in the")
print(" bucket - fmfs dd time), i.e. from close returning; it includes")
print(" --async-delay 1)")
print()
def fmt(v):
    return "%.2f" % v if v is not None else "-"
print("  fmfs rate / aws rate from the start of the write:     %s" % fmt(r_start))
print("  fmfs rate / aws rate, flush --wait after close:        %s" % fmt(r_flush))
print("  fmfs rate / aws rate, flush --wait, from the start:    %s" % fmt(r_flush_start))
print("  fmfs pass 2 close / local disk:                        %s" % fmt(r_block2))
peer = {}
for s in systems:
    pb = ratio((s, "cp_blocking_s"), ("local", "ref_s"))
    pd = ratio(("aws", "put_s"), (s, "durable_s"))
    peer[s] = {"close_over_local": pb, "rate_from_start_over_aws": pd}
    print("  %-6s close / local disk: %s; rate from the start / aws rate: %s" %
          (s, fmt(pb), fmt(pd)))
write_json("write", {"close_over_local": r_block,
                     "drain_rate_over_aws": r_drain,
                     "rate_from_start_over_aws": r_start,
                     "flush_rate_over_aws": r_flush,
                     "flush_rate_from_start_over_aws": r_flush_start,
                     "pass2_close_over_local": r_block2,
                     "peers": peer}, goals)
EOF
