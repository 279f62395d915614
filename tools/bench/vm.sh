# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# vm.sh - steady memory for benchmarks inside a virtual machine; sourced
# by lib.sh (and so by every bench-*.sh), not run. It sources nothing.
#
# A guest with free page reporting (virtio-balloon; the page_reporting
# module) hands the pages it frees back to its host, and the host
# discards them. The next first touch of such a page is a fault in the
# host: in one VM measured ~3.3 s per GiB, against ~0.3 s to write a GiB
# into the page cache. A benchmark drops the page cache before each timed
# step, so whether a 1 GiB dd lands on pages the host still backs or on
# reported ones is chance: the same dd took 0.33 s or 2-3.2 s, all of it
# system time in the copy into fresh page-cache folios
# (copy_folio_from_iter_atomic), and either the local disk or fmfs got the
# slow one. That is the host's cost, not the file system's.
#
#   vm_memory_hold      if page reporting is on and we may change it:
#                       turn it off (page_reporting_order above the
#                       largest order), then touch BENCH_TOUCH bytes of
#                       anonymous memory once (default: what is available
#                       less 3 GiB, at most 16 GiB) so the pages the
#                       benchmark will use are backed again; prints what
#                       it did. BENCH_PAGE_REPORTING=keep leaves it alone.
#   vm_memory_restore   puts page_reporting_order back (run at exit)
#
# The caller defines msg.

VM_PR_ORDER=/sys/module/page_reporting/parameters/page_reporting_order
VM_PR_SAVED=

vm_memory_hold() {
	local avail touch t0
	[ "${BENCH_PAGE_REPORTING:-}" = keep ] && return 0
	[ -w "$VM_PR_ORDER" ] || return 0
	VM_PR_SAVED=$(cat "$VM_PR_ORDER") || return 0
	# Orders go up to 10 on x86-64: no free block is ever that large.
	echo 11 >"$VM_PR_ORDER" 2>/dev/null || {
		VM_PR_SAVED=
		return 0
	}
	avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	avail=$((avail * 1024))
	touch=${BENCH_TOUCH:-$((avail - (3 << 30)))}
	[ "$touch" -gt $((16 << 30)) ] && touch=$((16 << 30))
	[ "$touch" -gt 0 ] || touch=0
	t0=$EPOCHREALTIME
	python3 - "$touch" <<'EOF' || msg "could not touch $touch bytes"
import mmap, sys
n = int(sys.argv[1]) // 4096 * 4096
if n:
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m[::4096] = b"\1" * (n // 4096)
    m.close()
EOF
	msg "free page reporting off for the run (page_reporting_order" \
		"$VM_PR_SAVED -> 11, put back at exit); $((touch >> 20)) MiB" \
		"touched in $(awk -v a="$t0" -v b="$EPOCHREALTIME" \
		'BEGIN { printf "%.1f", b - a }') s"
}

vm_memory_restore() {
	[ -n "$VM_PR_SAVED" ] || return 0
	echo "$VM_PR_SAVED" >"$VM_PR_ORDER" 2>/dev/null ||
		msg "could not put $VM_PR_ORDER back to $VM_PR_SAVED"
	VM_PR_SAVED=
}
