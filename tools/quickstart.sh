#!/bin/bash
# SPDX-License-Identifier: MIT
#
# quickstart.sh - the README's one command.  Builds fmfs (installing the
# Debian build packages first when run as root and they are missing), then
# runs what fmfs does today on the zero-setup default, a file:// store in
# a temporary directory: upload a 40 MiB file (parallel multipart), list,
# stat, download it back (parallel ranged reads), compare; then mount the
# store, read the file through the cache, write a file through the mount
# and flush it to the store; tokenize a text into the mount, train a tiny
# model on the CPU reading it through the mount with checkpoints on the
# mount, kill -9 it, resume it (bit-exact), list the checkpoints, flush,
# show `fmfs status`, unmount.
# With an S3 URL as argument it runs the same job against that bucket
# (credentials and endpoint from the usual AWS_* variables / profile):
#
#   tools/quickstart.sh                  # file:// store, nothing to set up
#   tools/quickstart.sh s3://BUCKET/fmfs-quickstart
set -euo pipefail
cd "$(dirname "$0")/.."

need="gcc make pkg-config fuse3 libfuse3-dev liburing-dev libcurl4-openssl-dev libssl-dev libcmocka-dev libexpat1-dev libsqlite3-dev libopenblas-dev libmicrohttpd-dev"
if [ ! -x tools/fmfs ] || [ ! -x tools/fmtrain ]; then
	missing=""
	for p in $need; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "ok installed" || missing="$missing $p"; done
	if [ -n "$missing" ]; then
		if [ "$(id -u)" = 0 ]; then
			echo "== installing:$missing"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq $missing >/dev/null
		else
			echo "quickstart: missing Debian packages:$missing"
			echo "  run: sudo apt-get install$missing"
			exit 1
		fi
	fi
	echo "== building"
	./configure >/dev/null && make -s -j2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fmfs-quickstart.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ $# -ge 1 ]; then
	store=${1%/}
else
	mkdir "$work/bucket"
	store="file://$work/bucket"
fi
F=tools/fmfs
set -x
head -c $((40 << 20)) /dev/urandom >"$work/data.bin"
$F obj put "$work/data.bin" "$store/quickstart/data.bin" -m origin=quickstart
$F obj ls -r -l "$store/quickstart/"
$F obj stat "$store/quickstart/data.bin"
$F obj get "$store/quickstart/data.bin" "$work/back.bin"
cmp "$work/data.bin" "$work/back.bin"
{ set +x; } 2>/dev/null
if [ -r /dev/fuse ] && [ -w /dev/fuse ] &&
	{ [ "$(id -u)" = 0 ] || command -v fusermount3 >/dev/null; }; then
	# Mount the store, read through the cache, look at the status.
	mkdir "$work/mnt"
	trap 'tools/fmfs umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
	set -x
	$F mount "$store" "$work/mnt" --cache-dir "$work/cache" --cache-size 1G
	ls -l "$work/mnt/quickstart/"
	cmp "$work/data.bin" "$work/mnt/quickstart/data.bin"
	cat "$work/mnt/quickstart/data.bin" >/dev/null  # a hit this time
	# Write through the mount; flush --wait returns once it is stored.
	cp "$work/data.bin" "$work/mnt/quickstart/copy.bin"
	$F flush "$work/mnt" --wait
	$F obj stat "$store/quickstart/copy.bin"
	# Train through the mount: data and checkpoints live there.
	cat docs/*.md >"$work/corpus.txt"
	tools/fmtrain tokenize --shard-tokens 16K "$work/mnt/quickstart/shards" "$work/corpus.txt"
	{ set +x; } 2>/dev/null
	T="tools/fmtrain train --data $work/mnt/quickstart/shards --steps 60 --ckpt $work/mnt/quickstart/ckpt --ckpt-every 20"
	echo "+ $T >$work/run1.out &   # then kill -9 after step 30"
	$T >"$work/run1.out" 2>&1 &
	pid=$!
	for _ in $(seq 600); do
		grep -q '^step 30 ' "$work/run1.out" && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	kill -9 $pid 2>/dev/null || true
	wait $pid 2>/dev/null || true
	tail -3 "$work/run1.out"
	echo "+ $T --resume"
	$T --resume | tail -8
	set -x
	tools/fmckpt list -t "$work/mnt/quickstart/ckpt"
	$F flush "$work/mnt" --wait
	$F status "$work/mnt"
	$F umount "$work/mnt"
	{ set +x; } 2>/dev/null
	mounted="; mounted, read byte-exact through the cache, wrote and flushed a copy, trained, crashed and resumed with checkpoints on the mount"
else
	if [ ! -e /dev/fuse ]; then
		why="there is no /dev/fuse (modprobe fuse; in a container, pass --device /dev/fuse)"
	elif [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ]; then
		why="/dev/fuse ($(stat -c %A /dev/fuse) $(stat -c %U /dev/fuse)) is not usable by $(id -un 2>/dev/null || id -u): run as root, or give the user access to /dev/fuse"
	else
		why="not root and no fusermount3 (apt-get install fuse3)"
	fi
	mounted="; mount skipped: $why"
fi
$F obj rm -r "$store/quickstart/"
echo "quickstart: ok (40 MiB up and back byte-exact through $store$mounted)"
