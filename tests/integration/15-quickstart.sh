#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The README's quick start, run the way a new user runs it: one command,
# tools/quickstart.sh, on the zero-setup default (a file:// store in a
# temporary directory).  It must exit 0, say "quickstart: ok", and leave
# nothing behind in TMPDIR (no store, cache, mount point or training
# output), and no mount.  As root it mounts, writes, trains, crashes and
# resumes; as an unprivileged user on a machine whose /dev/fuse only root
# may open it must still exit 0, naming why the mount part was skipped.
. "$TOP/tests/lib/common.sh"

cd "$TEST_DIR"
mkdir -p tmp
NOB=$(mktemp -d /tmp/fmfs-qs-nobody.XXXXXX) # reachable by nobody
chmod 1777 "$NOB"
trap 'rm -rf "$NOB"; cleanup_common' EXIT

mounts_before=$(grep -c fmfs-quickstart /proc/mounts || true)
note "as root: mount, read, write, train, crash, resume"
rc=0
TMPDIR=$TEST_DIR/tmp bash "$TOP/tools/quickstart.sh" >qs.out 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -20 qs.out >&2; fail "quickstart exited $rc"; }
grep -q "^quickstart: ok .*; mounted, read byte-exact" qs.out ||
	fail "quickstart did not say ok with the mount part: $(tail -3 qs.out)"
grep -q "^fmtrain: resumed from checkpoint step" qs.out ||
	fail "quickstart did not resume training: $(tail -3 qs.out)"
[ -z "$(ls -A tmp)" ] || fail "quickstart left in TMPDIR: $(ls -A tmp)"
[ "$(grep -c fmfs-quickstart /proc/mounts || true)" = "$mounts_before" ] ||
	fail "quickstart left a mount behind"

note "as an unprivileged user (nobody)"
if ! setpriv --reuid=65534 --regid=65534 --clear-groups \
	test -x "$TOP/tools/fmfs" 2>/dev/null; then
	note "skipped: nobody cannot run $TOP/tools/fmfs here"
else
	rc=0
	setpriv --reuid=65534 --regid=65534 --clear-groups env \
		HOME="$NOB" TMPDIR="$NOB" \
		bash "$TOP/tools/quickstart.sh" >qsn.out 2>&1 || rc=$?
	[ "$rc" = 0 ] || { tail -20 qsn.out >&2; fail "quickstart as nobody exited $rc"; }
	if [ -r /dev/fuse ] && setpriv --reuid=65534 --regid=65534 \
		--clear-groups test -w /dev/fuse; then
		grep -q "^quickstart: ok" qsn.out || fail "no ok as nobody"
	else
		grep -q "^quickstart: ok .*mount skipped: /dev/fuse .* is not usable by" qsn.out ||
			fail "quickstart as nobody did not say why it skipped the mount: $(tail -2 qsn.out)"
	fi
	[ -z "$(ls -A "$NOB")" ] || fail "quickstart as nobody left: $(ls -A "$NOB")"
fi
echo "quick start ok"
