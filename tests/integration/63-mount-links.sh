#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Hard links (fs/link.c, docs/posix.md "Hard links"): within a mount the
# names of a file are one inode (st_ino, st_nlink, a write or chmod
# through one seen through every other), and in the bucket each name is
# an object holding a copy that follows every committed change (checked
# with the aws CLI: bytes and mode metadata).  unlink of the first name
# keeps the others; rename between two names of one file does nothing;
# rename of another name moves its key; rename over a linked name leaves
# the file its other names.  A file linked while clean (put by aws) gets
# a server-side copy.  An fsync through one name is durable for all:
# after kill -9 and a remount every name holds the fsynced bytes (and is
# a file of its own, nlink 1).  link of a directory is EPERM, onto an
# existing name EEXIST.
. "$TOP/tests/lib/common.sh"

mount_setup links
no_keeper # it kills the daemon: what a mount without a keeper does
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 0)
flush() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}
keys() {
	awsx s3api list-objects-v2 --bucket "$B" --query 'Contents[].Key' \
		--output text | tr '\t' '\n' | grep -v '^None$' | sort || true
}
has_key() {
	keys | grep -qxF -- "$1"
}
obj() { # KEY: the object's bytes on stdout
	awsx s3 cp --quiet "s3://$B/$1" - || fail "aws cannot read $1"
}
obj_mode() { # KEY: x-amz-meta-mode in octal
	awsx s3api head-object --bucket "$B" --key "$1" \
		--query Metadata.mode --output text |
		python3 -c 'import sys; print(oct(int(sys.stdin.read()))[-4:])'
}
sino() { # PATH: "inode nlink"
	stat -c '%i %h' "$1" || fail "stat $1"
}

echo "aws-put" >clean
awsx s3 cp --quiet clean "s3://$B/e" || fail "aws put"
mnt
cd "$MNT"

note "ln of a new file: one inode, two names, writes through either"
printf 'one\n' >a
ln a b || fail "ln a b"
[ "$(sino a)" = "$(sino b)" ] || fail "a and b: $(sino a) vs $(sino b)"
[ "$(stat -c %h a)" = 2 ] || fail "nlink of a is $(stat -c %h a), not 2"
printf 'two\n' >>b
[ "$(cat a)" = "$(printf 'one\ntwo')" ] || fail "a does not show b's append"
mkdir sub
c0=$(stat -c %Z a)
sleep 1.1
ln b sub/c || fail "ln into another directory"
[ "$(stat -c %h a)" = 3 ] || fail "nlink is $(stat -c %h a), not 3"
[ "$(stat -c %Z a)" -gt "$c0" ] || fail "link did not move the ctime"
chmod 600 sub/c
[ "$(stat -c %a a)" = 600 ] || fail "chmod through sub/c not seen on a"
flush
for k in a b sub/c; do
	[ "$(obj $k)" = "$(printf 'one\ntwo')" ] || fail "bucket: $k holds '$(obj $k)'"
	[ "$(obj_mode $k)" = 0600 ] || fail "bucket: $k has mode $(obj_mode $k)"
done

note "unlink of the first name: the others stay, with the bytes"
rm a
[ -e a ] && fail "a still there"
[ "$(stat -c %h b)" = 2 ] || fail "nlink after unlink is $(stat -c %h b)"
[ "$(cat sub/c)" = "$(printf 'one\ntwo')" ] || fail "sub/c lost its bytes"
printf 'three\n' >>sub/c
[ "$(tail -1 b)" = three ] || fail "b does not follow sub/c after the unlink"
flush
has_key a && fail "bucket: a not deleted"
[ "$(obj b)" = "$(obj sub/c)" ] || fail "bucket: b and sub/c differ"
[ "$(obj b | tail -1)" = three ] || fail "bucket: b lacks the append"

note "rename between two names of one file does nothing"
mv -T b sub/c 2>/dev/null || python3 -c "import os; os.rename('b', 'sub/c')"
[ -e b ] && [ -e sub/c ] || fail "rename of a name onto its own link removed one"
[ "$(stat -c %h b)" = 2 ] || fail "nlink after rename onto a link is $(stat -c %h b)"

note "rename of a second name moves its key"
mv sub/c d
[ "$(sino b)" = "$(sino d)" ] || fail "b and d are not one inode"
flush
has_key sub/c && fail "bucket: sub/c still there after the rename"
[ "$(obj d)" = "$(obj b)" ] || fail "bucket: d differs from b"

note "fsync through one name is durable for every name (kill -9, still open)"
# The writer keeps d open after its fsync: no close commits anything
# more before the daemon dies.
python3 - "$TEST_DIR/synced" <<'EOF' &
import os, sys, time
fd = os.open("d", os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"fsynced\n")
os.fsync(fd)
open(sys.argv[1], "w").close()
time.sleep(60)
EOF
writer=$!
for _ in $(seq 100); do [ -e "$TEST_DIR/synced" ] && break; sleep 0.1; done
[ -e "$TEST_DIR/synced" ] || fail "write + fsync through d did not finish"
[ "$(cat b)" = fsynced ] || fail "b does not show the write through d"
cd "$TEST_DIR"
pid=$(pgrep -f "fmfs mount s3://$B $MNT" | head -1)
[ -n "$pid" ] || fail "no daemon process found"
kill -9 "$pid"
kill "$writer" 2>/dev/null || true
wait "$writer" 2>/dev/null || true
sleep 0.5
$FMFS umount "$MNT" 2>/dev/null || fusermount3 -u "$MNT" 2>/dev/null || true
mnt
cd "$MNT"
for n in b d; do
	[ "$(cat $n)" = fsynced ] || fail "after kill -9: $n holds '$(cat $n)'"
	[ "$(stat -c %h $n)" = 1 ] || fail "after a remount $n has nlink $(stat -c %h $n)"
done
flush
[ "$(obj b)" = fsynced ] && [ "$(obj d)" = fsynced ] ||
	fail "bucket after the crash: b '$(obj b)', d '$(obj d)'"

note "a clean object: a server-side copy, then writes follow"
ln e f || fail "ln of a clean file"
[ "$(stat -c %h e)" = 2 ] || fail "nlink of e is $(stat -c %h e)"
has_key f || fail "bucket: no copy f after ln of a clean file"
[ "$(obj f)" = aws-put ] || fail "bucket: f holds '$(obj f)'"
echo more >>f
flush
[ "$(obj e)" = "$(printf 'aws-put\nmore')" ] || fail "bucket: e holds '$(obj e)'"
[ "$(obj f)" = "$(obj e)" ] || fail "bucket: f differs from e"

note "rename over a linked name: the file keeps its other name"
echo x >x
mv x e
[ "$(cat e)" = x ] || fail "e is not x's file"
[ "$(stat -c %h f)" = 1 ] || fail "nlink of f is $(stat -c %h f), not 1"
[ "$(cat f)" = "$(printf 'aws-put\nmore')" ] || fail "f lost its bytes"
flush
[ "$(obj e)" = x ] || fail "bucket: e holds '$(obj e)'"
[ "$(obj f)" = "$(printf 'aws-put\nmore')" ] || fail "bucket: f holds '$(obj f)'"

note "special files, directories, existing names"
mkfifo p
ln p q || fail "ln of a FIFO"
[ "$(stat -c '%F %h' q)" = "fifo 2" ] || fail "q: $(stat -c '%F %h' q)"
python3 -c "import os; os.link('sub', 'sub2')" 2>err &&
	fail "link of a directory succeeded"
grep -q "Operation not permitted" err || fail "link of a directory: $(cat err)"
python3 -c "import os; os.link('b', 'd')" 2>err && fail "link onto d succeeded"
grep -q "File exists" err || fail "link onto an existing name: $(cat err)"
flush
has_key q || fail "bucket: no object q"
cd "$TEST_DIR"
$FMFS umount "$MNT" || fail "umount"
echo "hard links ok"
