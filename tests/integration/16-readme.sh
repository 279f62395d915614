#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Every command the README shows, run as a new user runs it, so that the
# README and the command line cannot drift apart.  Each line of its code
# blocks (indented four spaces; a line ending in \ joined to the next) is
# run with its exit status checked, or is listed in SKIP or NOT_COMMANDS
# below with the reason; a line neither list knows is run, so a new
# block is either right or fails here.  The lines of a block run in one
# shell (the demo's `export` and `$!` carry over), from a directory that
# looks like the built tree's top (tools/ and docs/ linked), with fmfs,
# fmckpt and fmtrain on PATH as after make install.
#
# What changes on the way, for every line alike: the README's bucket
# (s3://bucket) is this test's on the gateway, which holds a few shards
# under datasets/shards/; /mnt/data and /tmp/demo are directories of
# TEST_DIR; /etc/fmfs/credentials is a file with the gateway's keys (a
# line naming credentials runs without keys in the environment, so the
# file is what is read); 200G is 1G (a test machine's disk may be
# smaller); a mount without a cache dir gets one in TEST_DIR, not under
# /var/cache/fmfs; `mount -t fmfs` runs what mount(8) runs, mount.fmfs
# (tools/fmfs by that name), so nothing is installed, and an /etc/fstab
# line runs the same way with its options, each then unmounted by the
# test.  Then: the demo's crash came mid-run and the resume found its
# checkpoint, the bucket has what the README says it puts there, nothing
# is left mounted.  Also every subcommand of fmfs, fmfs obj, fmckpt,
# fmtrain and fmfs-csi, each taken from its tool's own table, answers
# --help with its usage on stdout and exit 0.
. "$TOP/tests/lib/common.sh"

mount_setup readme
TREE=$TEST_DIR/tree
cleanup() {
	unmount_quietly "$MNT"
	[ -d "$TEST_DIR/demo/mnt" ] && unmount_quietly "$TEST_DIR/demo/mnt"
	cleanup_common
}
trap cleanup EXIT

# the binary itself (FMFS may be tests/lib/fmfs-no-keeper)
FMFS_ABS=$(readlink -f "$(command -v "${FMFS_REAL:-$FMFS}")")
mkdir -p "$TREE" "$TEST_DIR/bin"
ln -s "$TOP/tools" "$TREE/tools"
ln -s "$TOP/docs" "$TREE/docs"
ln -s "$FMFS_ABS" "$TEST_DIR/bin/mount.fmfs"
export PATH=$TOP/tools:$PATH
head -c 300000 /dev/urandom >"$TREE/model.bin"
for i in 0 1 2; do
	head -c 200000 /dev/urandom >"$TEST_DIR/shard_$i.bin"
	awsx s3 cp --quiet "$TEST_DIR/shard_$i.bin" \
		"s3://$B/datasets/shards/shard_00000$i.bin" || fail "aws put"
done
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$TEST_DIR/credentials"
chmod 600 "$TEST_DIR/credentials"

note "the README's code blocks, as scripts of checked commands"
TREE=$TREE B=$B python3 - "$TOP/README.md" "$TEST_DIR/plan" <<'PYEOF' ||
import os, re, shlex, sys

# A line not run, and why.
SKIP = {
    "tools/quickstart.sh":
        "15-quickstart runs it, as root and as nobody, and checks what "
        "it leaves behind",
    "./configure && make && make check":
        "the whole test suite, which runs this test",
}
# A block whose first line starts so is not commands.
NOT_COMMANDS = {
    "configure, Makefile": "the layout: folders and what they hold",
}

readme, out = sys.argv[1], sys.argv[2]
T, B, TREE = os.environ["TEST_DIR"], os.environ["B"], os.environ["TREE"]
MNT, CACHE = T + "/mnt", T + "/cache"

blocks, cur, prev_blank, fence = [], None, True, False
for ln in open(readme).read().split("\n"):
    if ln.startswith("```"):
        fence = not fence
        continue
    if not fence and ln.startswith("    ") and (cur is not None or prev_blank):
        if cur is None:
            cur = []
            blocks.append(cur)
        cur.append(ln[4:])
    elif ln.strip() == "" and cur is not None:
        cur.append("")
    else:
        cur = None
    prev_blank = ln.strip() == ""
if fence:
    sys.exit("README: a ``` block is not closed")


def commands(block):
    cmd = ""
    for ln in block:
        if cmd:
            ln = ln.strip()
        if ln.endswith("\\"):
            cmd += ln[:-1].rstrip() + " "
            continue
        cmd += ln
        if cmd.strip():
            yield cmd.strip()
        cmd = ""


def fstab(cmd):
    f = cmd.split()
    return (len(f) == 6 and f[2] in ("fmfs", "fuse.fmfs") and
            f[4].isdigit() and f[5].isdigit())


def substitute(cmd):
    helper = False
    if fstab(cmd):
        f = cmd.split()
        cmd = "mount -t fmfs %s %s -o %s" % (f[0], f[1], f[3])
    if cmd.startswith("mount -t fmfs "):
        cmd = T + "/bin/mount.fmfs " + cmd[len("mount -t fmfs "):]
        helper = True
    cmd = cmd.replace("s3://bucket", "s3://" + B)
    cmd = cmd.replace("/mnt/data", MNT).replace("/tmp/demo", T + "/demo")
    cmd = cmd.replace("/etc/fmfs/credentials", T + "/credentials")
    cmd = re.sub(r"([ =])200G\b", r"\g<1>1G", cmd)
    if cmd.startswith("fmfs mount ") and "--cache-dir" not in cmd:
        cmd += " --cache-dir " + CACHE
    if helper and "cache_dir=" not in cmd:
        if re.search(r" -o \S+", cmd):
            cmd = re.sub(r"( -o \S+)", r"\1,cache_dir=" + CACHE, cmd)
        else:
            cmd += " -o cache_dir=" + CACHE
    if "credentials" in cmd:
        cmd = ("env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "
               "-u AWS_SESSION_TOKEN " + cmd)
    return cmd, helper


plan = open(out, "w")
for i, b in enumerate(blocks):
    first = next((l for l in b if l.strip()), "")
    why = next((w for k, w in NOT_COMMANDS.items() if first.startswith(k)),
               None)
    if why:
        plan.write("notcmd\t%d\t%s\t%s\n" % (i, first, why))
        continue
    s = open("%s/block%d.sh" % (T, i), "w")
    s.write("cd %s || exit 1\n" % shlex.quote(TREE))
    for c in commands(b):
        if c.startswith("#"):
            continue
        if c in SKIP:
            plan.write("skip\t%d\t%s\t%s\n" % (i, c, SKIP[c]))
            continue
        plan.write("run\t%d\t%s\t\n" % (i, c))
        run, helper = substitute(c)
        q = shlex.quote(c)
        s.write("echo + %s\n%s\n" % (q, run))
        s.write('rc=$?; [ "$rc" = 0 ] || { echo "README command exited '
                '$rc: "%s >&2; exit 1; }\n' % q)
        if helper:  # mount(8) would have mounted it: check, unmount
            s.write("mountpoint -q %s || { echo 'not mounted by: '%s >&2; "
                    "exit 1; }\n" % (MNT, q))
            s.write("fmfs umount %s || exit 1\n" % MNT)
    s.close()
PYEOF
	fail "could not read the README's code blocks"

while IFS=$'\t' read -r kind _ cmd why; do
	case $kind in
	skip) note "skipped: $cmd ($why)" ;;
	notcmd) note "not commands: the block '$cmd...' ($why)" ;;
	esac
done <"$TEST_DIR/plan"
for s in $(ls "$TEST_DIR"/block*.sh | sort -V); do
	n=$(basename "$s" .sh)
	grep -q '^echo + ' "$s" || continue
	note "$n: $(grep -c '^echo + ' "$s") commands"
	rc=0
	timeout 300 bash "$s" >"$TEST_DIR/$n.out" 2>&1 || rc=$?
	if [ "$rc" != 0 ]; then
		tail -20 "$TEST_DIR/$n.out" >&2
		fail "$n of the README failed (exit $rc; the command is named above)"
	fi
done
ran=$(grep -c '^run' "$TEST_DIR/plan")
[ "$ran" -ge 20 ] || fail "only $ran README commands found: is the extraction broken?"

note "what the commands did"
grep -q "^+ fmfs prefetch .* --wait" "$TEST_DIR"/block*.out ||
	fail "no fmfs prefetch --wait ran"
grep -q "^prefetch: 3 files, 600000 bytes, 0 errors" "$TEST_DIR"/block*.out ||
	fail "the prefetch did not fetch the 3 shards: $(grep -h '^prefetch' "$TEST_DIR"/block*.out)"
awsx s3 ls "s3://$B/models/model.bin" >/dev/null || fail "model.bin is not in the bucket"
demo=$(grep -l "^+ fmtrain train .*--resume" "$TEST_DIR"/block*.out) ||
	fail "the demo's resume did not run"
grep -q "^step 150 " "$TEST_DIR/demo/run1.txt" || fail "the first run did not reach step 150"
if grep -q "^step 300 " "$TEST_DIR/demo/run1.txt"; then
	fail "the first run reached step 300: the crash did not come mid-run"
fi
grep -q "^fmtrain: resumed from checkpoint step [1-9]" "$demo" ||
	fail "the resumed run did not find a checkpoint: $(grep -i resum "$demo")"
grep -q "^step 300 " "$demo" || fail "the resumed run did not reach step 300"
ls "$TEST_DIR/demo/bucket/shards" | grep -q '^shard_.*\.bin$' ||
	fail "no shards in the demo's bucket"
[ -n "$(ls "$TEST_DIR/demo/bucket/ckpt")" ] || fail "no checkpoints in the demo's bucket"
if grep -q " $TEST_DIR/" /proc/self/mounts; then
	fail "left mounted: $(grep " $TEST_DIR/" /proc/self/mounts)"
fi

note "--help of every subcommand: its usage on stdout, exit 0"
verbs() { # FILE: the names of a table of subcommands
	grep -o '{ "[a-z-]*", cmd_' "$1" | sed 's/{ "\([a-z-]*\)".*/\1/'
}
help_ok() { # PATTERN CMD...: CMD --help prints PATTERN first, exits 0
	local pat=$1
	shift
	expect_exit 0 "" "$@" --help
	head -1 "$TEST_DIR/out" | grep -Eq -- "$pat" ||
		fail "'$* --help' printed: $(head -2 "$TEST_DIR/out")"
}
n=0
for v in $(verbs "$TOP/tools/fmfs.c"); do
	help_ok "^usage: fmfs " fmfs "$v"
	n=$((n + 1))
done
for v in $(fmfs obj --help | sed -n 's/^  \([a-z]*\) .*/\1/p'); do
	help_ok "^usage: fmfs obj " fmfs obj "$v"
	n=$((n + 1))
done
for v in $(verbs "$TOP/tools/fmckpt.c"); do
	help_ok "^usage: fmckpt " fmckpt "$v"
	n=$((n + 1))
done
for v in $(verbs "$TOP/tools/fmtrain.c"); do
	help_ok "^usage: fmtrain " fmtrain "$v"
	n=$((n + 1))
done
# fmfs-csi's: the words its usage lines begin with, split at |.
for v in $("$TOP/tools/fmfs-csi" --help | python3 -c '
import re, sys
for ln in sys.stdin:
    if ln.startswith("  fmfs-csi "):
        for piece in ln[len("  fmfs-csi "):].split("  ")[0].split("|"):
            w = piece.split()[0]
            if re.match("^[a-z][a-z-]*$", w):
                print(w)'); do
	help_ok "^fmfs-csi - " "$TOP/tools/fmfs-csi" "$v"
	n=$((n + 1))
done
help_ok "^usage: mount.fmfs " "$TEST_DIR/bin/mount.fmfs"
[ "$n" -ge 25 ] || fail "only $n subcommands found: are the tables still read right?"
note "$n subcommands"
echo "README commands ok ($ran run, $(grep -c '^skip' "$TEST_DIR/plan") skipped)"
