#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Names and xattrs as on a local disk (docs/semantics.md, "Names" and
# "Extended attributes"): statfs says NAME_MAX 255; a 255-byte file,
# directory and symlink are created, listed, read back, renamed and
# removed, and the aws CLI sees the long key; a 256-byte name is
# ENAMETOOLONG; a key of exactly 1024 bytes is uploaded, one of 1025 (a
# file or a directory marker) is ENAMETOOLONG with a log line and nothing
# written; a directory rename that would push a key past 1024 bytes moves
# nothing.  xattrs in user. and in another namespace round trip (binary,
# empty and space-edged values too, base64 in the bucket), are
# object metadata for aws, survive a remount, keep mtime; XATTR_CREATE and
# XATTR_REPLACE; security. and trusted. are not stored.
. "$TOP/tests/lib/common.sh"

mount_setup names
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 0)
n255() { # CHAR: a 255-byte name
	head -c 255 /dev/zero | tr '\0' "$1"
}
# errno_of PYTHON-STATEMENT: the errno name it fails with, or "ok".
errno_of() {
	python3 -c "
import errno, os, sys
try:
    $1
    print('ok')
except OSError as e:
    print(errno.errorcode[e.errno])
"
}
keys() { # all keys in the bucket, one a line
	awsx s3api list-objects-v2 --bucket "$B" --query 'Contents[].Key' \
		--output text | tr '\t' '\n' | grep -v '^None$' || true
}

A=$(n255 a); Bn=$(n255 b); C=$(n255 c); D=$(n255 d); L=$(n255 l)

note "NAME_MAX: 255-byte file, directory and symlink"
mnt
[ "$(stat -f -c %l "$MNT")" = 255 ] ||
	fail "statfs namelen $(stat -f -c %l "$MNT"), not 255"
echo hello >"$MNT/$A" || fail "cannot create a 255-byte name"
mkdir "$MNT/$D" || fail "cannot mkdir a 255-byte name"
echo inner >"$MNT/$D/$A" || fail "cannot create under a 255-byte dir"
ln -s "$A" "$MNT/$L" || fail "cannot symlink a 255-byte name"
[ "$(cat "$MNT/$L")" = hello ] || fail "255-byte symlink reads wrong"
[ "$(readlink "$MNT/$L")" = "$A" ] || fail "255-byte symlink target"
ls "$MNT" | grep -qx "$A" || fail "255-byte file not listed"
ls "$MNT" | grep -qx "$D" || fail "255-byte dir not listed"
mv "$MNT/$A" "$MNT/$Bn" || fail "cannot rename a 255-byte name"
[ "$(cat "$MNT/$Bn")" = hello ] || fail "renamed 255-byte file reads wrong"
[ ! -e "$MNT/$A" ] || fail "old 255-byte name still there"
for op in "open('$MNT/${A}x', 'w')" "os.mkdir('$MNT/${A}x')" \
	"os.symlink('t', '$MNT/${A}x')" "os.stat('$MNT/${A}x')" \
	"os.rename('$MNT/$Bn', '$MNT/${Bn}x')" "os.unlink('$MNT/${A}x')" \
	"os.chmod('$MNT/${A}x', 0o600)"; do
	r=$(errno_of "$op")
	[ "$r" = ENAMETOOLONG ] || fail "$op: $r, not ENAMETOOLONG"
done
[ "$(cat "$MNT/$Bn")" = hello ] || fail "a refused rename changed the file"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
keys >"$TEST_DIR/keys"
grep -qx "$Bn" "$TEST_DIR/keys" || fail "aws does not see the 255-byte key"
grep -qx "$D/$A" "$TEST_DIR/keys" || fail "aws does not see $D/<255>"
grep -qx "$L" "$TEST_DIR/keys" || fail "aws does not see the symlink"
awsx s3 cp "s3://$B/$Bn" "$TEST_DIR/got" >/dev/null || fail "aws get"
[ "$(cat "$TEST_DIR/got")" = hello ] || fail "aws reads other bytes"
grep -q "${A}x" "$TEST_DIR/keys" && fail "a refused name reached the bucket"

note "the store's key limit: 1024 bytes taken, 1025 refused, nothing written"
P="$MNT/$A/$Bn/$C" # key "A/B/C/": 768 bytes
mkdir -p "$P" || fail "mkdir -p of three 255-byte levels"
E=$(head -c 250 /dev/zero | tr '\0' e) # "A/B/C/E/": 1019 bytes
mkdir "$P/$E" || fail "mkdir of a 1019-byte directory key"
echo edge >"$P/$E/12345" || fail "a 1024-byte key was refused"
r=$(errno_of "open('$P/$E/123456', 'w')")
[ "$r" = ENAMETOOLONG ] || fail "a 1025-byte key: $r, not ENAMETOOLONG"
r=$(errno_of "os.mkdir('$P/$E/12345')")
[ "$r" = EEXIST ] || fail "mkdir over the file: $r"
r=$(errno_of "os.mkdir('$P/$E/abcde')") # marker "…/abcde/": 1025 bytes
[ "$r" = ENAMETOOLONG ] || fail "a 1025-byte marker: $r, not ENAMETOOLONG"
r=$(errno_of "os.rename('$P/$E/12345', '$P/$E/123456')")
[ "$r" = ENAMETOOLONG ] || fail "rename to a 1025-byte key: $r"
grep -q "refused (ENAMETOOLONG)" "$CACHE/fmfs.log" ||
	fail "no log line for the refused key"
# a directory rename that would push the 1024-byte key past the limit
mkdir "$MNT/$A/$Bn/x" || fail "mkdir x"
r=$(errno_of "os.rename('$P', '$MNT/$A/$Bn/x/$C')")
[ "$r" = ENAMETOOLONG ] || fail "dir rename past the limit: $r"
[ "$(cat "$P/$E/12345")" = edge ] || fail "a refused dir rename moved a key"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
keys >"$TEST_DIR/keys"
grep -qx "$A/$Bn/$C/$E/12345" "$TEST_DIR/keys" ||
	fail "aws does not see the 1024-byte key"
awk 'length($0) > 1024' "$TEST_DIR/keys" | grep -q . &&
	fail "a key over 1024 bytes in the bucket"
grep -q "/x/$C" "$TEST_DIR/keys" && fail "a refused dir rename wrote keys"
ls "$CACHE/dirty" | grep -v '\.meta$' | grep -q . &&
	fail "a dirty file is left after the flush (a refused name?)"

note "xattrs: user. and others stored as metadata, kernel namespaces not"
echo x >"$MNT/xf"
echo y >"$MNT/yf"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
# the stored mtime (a clean object's metadata is rewritten by a copy)
mtime_of() {
	awsx s3api head-object --bucket "$B" --key "$1" --query Metadata.mtime
}
m0=$(mtime_of xf)
python3 - "$MNT/xf" "$MNT/yf" <<'EOF' || fail "xattr round trip"
import errno, os, sys
f, g = sys.argv[1], sys.argv[2]
BIN = {"user.bin": bytes(range(256)), "user.nul": b"a\0b", "user.utf8":
       "gr\u00fc\u00df".encode(), "user.spaced": b" x ", "user.empty": b"",
       "user.prefixed": b"fmfs-b64:AAAA"}
def err(fn, *a):
    try:
        fn(*a)
    except OSError as e:
        return errno.errorcode[e.errno]
    return "ok"
for p in (f, g):  # f clean in the bucket, g dirty (written again)
    if p == g:
        open(g, "a").write("more")
    os.setxattr(p, "user.plain", b"v1")
    os.setxattr(p, "user.Mixed.Case", b"v2")
    os.setxattr(p, "user.mode", b"not the mode")
    os.setxattr(p, "com.apple.FinderInfo", b"v3")
    os.setxattr(p, "ceph.dir.layout", b"v4")
    for k, v in BIN.items():
        os.setxattr(p, k, v)
        assert os.getxattr(p, k) == v, (k, os.getxattr(p, k))
    assert os.getxattr(p, "user.plain") == b"v1"
    assert os.getxattr(p, "user.Mixed.Case") == b"v2"
    assert os.getxattr(p, "user.mode") == b"not the mode"
    assert os.getxattr(p, "com.apple.FinderInfo") == b"v3"
    names = set(os.listxattr(p))
    want = {"user.plain", "user.Mixed.Case", "user.mode",
            "com.apple.FinderInfo", "ceph.dir.layout"} | set(BIN)
    assert names == want, names
    assert err(os.setxattr, p, "user.plain", b"x", os.XATTR_CREATE) == "EEXIST"
    assert err(os.setxattr, p, "user.none", b"x", os.XATTR_REPLACE) == "ENODATA"
    os.setxattr(p, "user.plain", b"v1b", os.XATTR_REPLACE)
    os.setxattr(p, "user.gone", b"g", os.XATTR_CREATE)
    os.removexattr(p, "user.gone")
    os.removexattr(p, "ceph.dir.layout")
    assert err(os.removexattr, p, "user.gone") == "ENODATA"
    assert err(os.getxattr, p, "user.gone") == "ENODATA"
    for ns in ("security.test", "trusted.test"):
        e = err(os.setxattr, p, ns, b"x")
        assert e in ("EOPNOTSUPP", "ENOTSUP"), (ns, e)
        assert err(os.getxattr, p, ns) == "ENODATA"
    assert err(os.getxattr, p, "security.capability") == "ENODATA"
    assert (os.stat(p).st_mode & 0o7777) != 0  # the real mode is intact
EOF
[ "$(mtime_of xf)" = "$m0" ] || fail "setxattr changed the mtime"
$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
for k in xf yf; do
	awsx s3api head-object --bucket "$B" --key "$k" --query Metadata \
		>"$TEST_DIR/meta.$k" || fail "head $k"
	for m in '"plain": "v1b"' '"fmfs-x-user-2e-4dixed-2e-43ase": "v2"' \
		'"fmfs-x-user-2emode": "not the mode"' \
		'"fmfs-x-com-2eapple-2e-46inder-49nfo": "v3"'; do
		grep -qF "$m" "$TEST_DIR/meta.$k" ||
			fail "$k: aws lacks $m: $(cat "$TEST_DIR/meta.$k")"
	done
	# values that are not header text are stored in base64
	for m in '"bin": "fmfs-b64:AAECAwQFBgcICQoLDA0ODxAREhMU' \
		'"nul": "fmfs-b64:YQBi"' '"spaced": "fmfs-b64:IHgg"' \
		'"empty": "fmfs-b64:"' '"prefixed": "fmfs-b64:Zm1mcy1iNjQ6QUFBQQ=="'; do
		grep -qF "$m" "$TEST_DIR/meta.$k" ||
			fail "$k: aws lacks $m: $(cat "$TEST_DIR/meta.$k")"
	done
	grep -q layout "$TEST_DIR/meta.$k" && fail "$k: a removed xattr stayed"
	grep -qE '"mode": "[0-9]+"' "$TEST_DIR/meta.$k" ||
		fail "$k: user.mode clobbered the mode"
done
# another tool's metadata shows as user.NAME
echo z | awsx s3 cp - "s3://$B/other" --metadata 'colour=blue' >/dev/null

note "xattrs survive a remount"
$FMFS umount "$MNT" || fail "umount failed"
mnt
python3 - "$MNT" <<'EOF' || fail "xattrs after a remount"
import os, sys
m = sys.argv[1]
BIN = {"user.bin": bytes(range(256)), "user.nul": b"a\0b", "user.utf8":
       "gr\u00fc\u00df".encode(), "user.spaced": b" x ", "user.empty": b"",
       "user.prefixed": b"fmfs-b64:AAAA"}
for k in ("xf", "yf"):
    p = os.path.join(m, k)
    for x, v in BIN.items():
        assert os.getxattr(p, x) == v, (k, x, os.getxattr(p, x))
    assert os.getxattr(p, "user.plain") == b"v1b"
    assert os.getxattr(p, "user.Mixed.Case") == b"v2"
    assert os.getxattr(p, "com.apple.FinderInfo") == b"v3"
    assert set(os.listxattr(p)) == {"user.plain", "user.Mixed.Case",
                                    "user.mode", "com.apple.FinderInfo"} | set(BIN)
o = os.path.join(m, "other")
assert os.listxattr(o) == ["user.colour"], os.listxattr(o)
assert os.getxattr(o, "user.colour") == b"blue"
EOF
[ "$(mtime_of xf)" = "$m0" ] || fail "mtime moved after remount"
ls "$MNT/$D" | grep -qx "$A" || fail "255-byte names lost at remount"
rm -r "$MNT/$D" "$MNT/$Bn" "$MNT/$L" || fail "cannot remove 255-byte names"
$FMFS umount "$MNT" || fail "umount failed"
keys | grep -qx "$D/.*\|$Bn\|$L" && fail "removed 255-byte keys remain"
exit 0
