#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Reads through FUSE passthrough on a read-write mount (fs/passthrough.c,
# docs/semantics.md "Reads through FUSE passthrough"): a clean file wholly
# in the cache is read by the kernel from its cache file, and when a
# writer arrives while such readers are open, that same file becomes the
# dirty file (no copy), so the readers see every write as on a local disk.
# Each case is checked byte for byte, while the files are open and in the
# bucket afterwards (aws CLI):
#   a  reader first, then a writer (pwrite inside and past the end)
#   b  writer first, then a reader; after the upload a new open passes
#      through the new clean version
#   c  an mmap reader, with a writer using write(2) and its own shared map
#   d  truncate(2) by path and an O_TRUNC open under an open reader
#   e  a reader open across a rename over its name: it keeps the old file
#   f  kill -9 with an adopted file open for writing: the remount keeps
#      the object as it was in the bucket, no CRC failure
# Where the kernel has no passthrough (or we are not root) the same byte
# checks run on the usual path and the counts are not checked.
. "$TOP/tests/lib/common.sh"

mount_setup rwpt
no_keeper # it kills the daemon: what a mount without a keeper does
mkdir -p data got
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--cache-size 256M --async-delay 1)
flushw() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}
in_bucket() { # KEY WANT: the object is byte for byte the file WANT
	awsx s3 cp --quiet "s3://$B/$1" got/obj || fail "aws cannot read $1"
	cmp got/obj "$2" || fail "$1 in the bucket differs from $2"
}

for f in a b c d e e2 f; do random_file data/$f 3; done
awsx s3 cp --quiet --recursive data "s3://$B/data/"

note "warm the cache: a mount reads every file, a remount finds them clean"
mnt
for f in data/*; do cmp "$f" "$MNT/$f" || fail "$f read wrong (cold)"; done
$FMFS umount "$MNT" || fail "umount failed"
mnt
expect_pt=false
if [ "$(id -u)" = 0 ] && [ "$(stat_of passthrough)" = True ]; then
	expect_pt=true
fi
cmp data/a "$MNT/data/a" || fail "data/a read wrong (warm)"
if $expect_pt; then
	[ "$(stat_of passthrough_opens)" = 1 ] ||
		fail "a clean, wholly cached file did not pass through"
else
	note "no passthrough here (Linux $(uname -r), uid $(id -u)): not counted"
fi

# The cases, in one process: descriptors must stay open across steps.
python3 - "$MNT" data "$FMFS" "$expect_pt" <<'EOF' || fail "a case failed (above)"
import json, mmap, os, subprocess, sys
mnt, ref, fmfs, expect_pt = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "true"

def st(key):
    out = subprocess.run([fmfs, "status", mnt, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)[key]

def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)

def model(name):
    with open(os.path.join(ref, name), "rb") as f:
        return bytearray(f.read())

def whole(fd):
    out, off = bytearray(), 0
    while True:
        b = os.pread(fd, 1 << 20, off)
        if not b:
            return bytes(out)
        out += b
        off += len(b)

def save(name, want):
    with open(os.path.join("got", name + ".want"), "wb") as f:
        f.write(want)

p = lambda n: os.path.join(mnt, "data", n)

# a: reader first, then a writer
want = model("a")
r = os.open(p("a"), os.O_RDONLY)
pt0 = st("passthrough_opens")
check(whole(r) == want, "a: the reader before any write")
w = os.open(p("a"), os.O_RDWR)
check(whole(r) == want, "a: the reader after the writer opened")
for off, n in ((0, 100), (1 << 20, 5000), (len(want) + 4096, 3000)):
    data = os.urandom(n)
    check(os.pwrite(w, data, off) == n, "a: short pwrite")
    if off > len(want):
        want += bytes(off - len(want))
    want[off:off + n] = data
    if off + n > len(want):
        want[len(want):] = data[len(want) - off:]
    check(whole(r) == bytes(want), "a: the reader after a write at %d" % off)
if expect_pt:
    check(st("passthrough_adopts") == 1, "a: the clean backing was not adopted")
    check(st("passthrough_opens") >= pt0 + 1, "a: the writer did not pass through")
os.close(w)
check(whole(r) == bytes(want), "a: the reader after the writer closed")
os.close(r)
with open(p("a"), "rb") as f:
    check(f.read() == bytes(want), "a: a new open")
save("a", want)

# b: writer first, then a reader
want = model("b")
w = os.open(p("b"), os.O_RDWR)
data = os.urandom(70000)
os.pwrite(w, data, 12345)
want[12345:12345 + len(data)] = data
r = os.open(p("b"), os.O_RDONLY)
check(whole(r) == bytes(want), "b: a reader opened after the write")
data = os.urandom(999)
os.pwrite(w, data, 0)
want[0:999] = data
check(whole(r) == bytes(want), "b: the reader sees a later write")
os.close(w)
os.close(r)
save("b", want)

# c: an mmap reader
want = model("c")
r = os.open(p("c"), os.O_RDONLY)
rm = mmap.mmap(r, len(want), mmap.MAP_SHARED, mmap.PROT_READ)
check(rm[:] == bytes(want), "c: the map before any write")
w = os.open(p("c"), os.O_RDWR)
data = os.urandom(4096 * 3)
os.pwrite(w, data, 8192)
want[8192:8192 + len(data)] = data
check(rm[:] == bytes(want), "c: the map after write(2)")
wm = mmap.mmap(w, len(want), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
data = os.urandom(5000)
wm[100000:105000] = data
want[100000:105000] = data
wm.flush()
check(rm[:] == bytes(want), "c: the map after the writer's map")
check(whole(r) == bytes(want), "c: read(2) after the writer's map")
wm.close()
os.close(w)
rm.close()
os.close(r)
save("c", want)

# d: truncate(2) by path, then an O_TRUNC open, under an open reader
want = model("d")
r = os.open(p("d"), os.O_RDONLY)
check(whole(r) == bytes(want), "d: the reader before")
os.truncate(p("d"), 1000)
want = want[:1000]
check(whole(r) == bytes(want), "d: the reader after truncate(2)")
with open(p("d"), "wb") as f:
    data = os.urandom(20000)
    f.write(data)
    want = bytearray(data)
    f.flush()
    check(whole(r) == bytes(want), "d: the reader after O_TRUNC and a write")
os.close(r)
save("d", want)

# e: a reader open across a rename over its name
old = bytes(model("e"))
new = bytes(model("e2"))
r = os.open(p("e"), os.O_RDONLY)
check(os.pread(r, 4096, 0) == old[:4096], "e: the reader before")
os.rename(p("e2"), p("e"))
check(whole(r) == old, "e: the reader after the rename over it")
with open(p("e"), "rb") as f:
    check(f.read() == new, "e: a new open reads the file renamed there")
with open(p("e"), "r+b") as f:
    f.write(b"x" * 10)
check(whole(r) == old, "e: the old file after a write to the new one")
os.close(r)
save("e", b"x" * 10 + new[10:])
EOF

note "the bucket has every change (aws CLI)"
flushw
for f in a b c d e; do in_bucket "data/$f" "got/$f.want"; done
[ "$(stat_of crc_failures)" = 0 ] || fail "CRC32C failures"

note "b after its upload: a new open passes through the new clean version"
$FMFS umount "$MNT" || fail "umount failed"
mnt
n0=$(stat_of passthrough_opens)
cmp got/b.want "$MNT/data/b" || fail "data/b read wrong after the remount"
if $expect_pt; then
	[ "$(stat_of passthrough_opens)" = $((n0 + 1)) ] ||
		fail "the uploaded file did not pass through when clean"
fi
[ "$(stat_of store_get_requests)" = 0 ] || fail "the remount fetched again"

note "kill -9 with an adopted file open for writing"
# One process holds a reader and a writer and writes, never closing (a
# close of any descriptor of it, a dup included, is a FLUSH: a commit).
python3 - "$MNT/data/f" ready <<'EOF' &
import os, sys, time
r = os.open(sys.argv[1], os.O_RDONLY)
w = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(w, b"unfinished", 0)
assert os.pread(r, 10, 0) == b"unfinished"
open(sys.argv[2], "w").close()
time.sleep(120)
EOF
holder=$!
for _ in $(seq 100); do [ -e ready ] && break; sleep 0.1; done
[ -e ready ] || fail "the writer did not start"
pid=$(pgrep -f "fmfs mount s3://$B $MNT" | head -1)
[ -n "$pid" ] || fail "no daemon found"
kill -9 "$pid"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
unmount_quietly "$MNT"
mnt
cmp data/f "$MNT/data/f" || fail "data/f after the crash is not the bucket's"
in_bucket data/f data/f
[ "$(stat_of crc_failures)" = 0 ] || fail "CRC32C failures after the crash"
$FMFS umount "$MNT" || fail "umount failed"
grep -q "whose name is unknown" "$CACHE/fmfs.log" &&
	fail "the replay found a dirty file with no row"
ls "$CACHE"/lost+found/*data%f >/dev/null 2>&1 ||
	fail "the unclosed file is not in lost+found"
echo "read-write passthrough ok (expected: $expect_pt)"
