#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A bucket written by other tools (docs/semantics.md "Directories made
# by other tools"): directories made by a zero-byte "dir/" object, by a
# zero-byte "dir" whose x-amz-meta-mode says S_IFDIR (older s3fs) and by
# "dir_$folder$" (Hadoop S3A/s3n) show as directories (not as files, and
# "dir_$folder$" not as a name of its own), can be listed, filled and
# removed, and rmdir removes the object that made each one (checked with
# the aws CLI); a rename keeps an empty one a directory.  An object
# another client puts after a listing was cached is found by stat within
# --negative-refresh (default 1 s), and at once with --refresh 0
# (changes and removals too; that each lookup is one small LIST is
# tests/unit/test_ns.c's); a bad --negative-refresh is refused.
. "$TOP/tests/lib/common.sh"

mount_setup foreign
trap 'unmount_quietly "$MNT"; cleanup_common' EXIT

MNT_OPTS=(--async-delay 0)
put() { # KEY [aws s3api put-object options...]: a zero-byte object
	local k=$1
	shift
	awsx s3api put-object --bucket "$B" --key "$k" "$@" >/dev/null ||
		fail "aws put of $k"
}
type_of() { # PATH: "directory", "regular empty file", ...
	stat -c %F "$1" 2>/dev/null || echo missing
}
keys() { # the bucket's keys, one a line, sorted
	awsx s3api list-objects-v2 --bucket "$B" --query 'Contents[].Key' \
		--output text | tr '\t' '\n' | grep -v '^None$' | sort || true
}
has_key() {
	keys | grep -qxF -- "$1"
}
flush() {
	$FMFS flush "$MNT" --wait --timeout 60 || fail "flush --wait failed"
}
# found_within SECONDS PATH: stat finds PATH within SECONDS; prints ms.
found_within() {
	local t0=$(date +%s%N) ms
	while :; do
		ms=$((($(date +%s%N) - t0) / 1000000))
		stat "$2" >/dev/null 2>&1 && { echo "$ms"; return 0; }
		[ "$ms" -gt $(($1 * 1000)) ] && return 1
		sleep 0.05
	done
}

me=$(id -u)
my=$(id -g)
note "objects of other tools' conventions"
put slash/
put plain --metadata "mode=$((040750)),uid=$me,gid=$my"
put 'hadoop_$folder$'
put 'deep/hd_$folder$'
put 'both_$folder$'
put both/
put emptyfile
put modefile --metadata "mode=$((0100644)),uid=$me,gid=$my"
echo data >"$TEST_DIR/data"
awsx s3 cp --quiet "$TEST_DIR/data" "s3://$B/full" || fail "aws put"

mnt
for d in slash plain hadoop deep/hd both; do
	[ "$(type_of "$MNT/$d")" = directory ] ||
		fail "$d shows as $(type_of "$MNT/$d")"
done
for f in emptyfile modefile; do
	[ "$(type_of "$MNT/$f")" = "regular empty file" ] ||
		fail "$f shows as $(type_of "$MNT/$f")"
done
[ "$(stat -c '%a %u' "$MNT/plain")" = "750 $me" ] ||
	fail "plain shows $(stat -c '%a %u' "$MNT/plain"), not its stored 750 $me"
ls -a "$MNT" >"$TEST_DIR/ls" || fail "ls of the root"
want=$(printf '%s\n' . .. both deep emptyfile full hadoop modefile plain slash)
[ "$(sort "$TEST_DIR/ls")" = "$(echo "$want" | sort)" ] ||
	fail "the root lists $(tr '\n' ' ' <"$TEST_DIR/ls")"
ls -l "$MNT" | grep -q '^d.* plain$' || fail "ls -l: plain is not a directory"
ls -l "$MNT" | grep -q '^d.* hadoop$' || fail "ls -l: hadoop is not a directory"
[ -z "$(ls -A "$MNT/plain")" ] || fail "plain is not empty: $(ls -A "$MNT/plain")"
[ -z "$(ls -A "$MNT/deep/hd")" ] || fail "deep/hd is not empty"

note "filled and emptied"
for d in slash plain hadoop deep/hd; do
	echo "in $d" >"$MNT/$d/x" || fail "cannot create $d/x"
done
flush
for d in slash plain hadoop deep/hd; do
	has_key "$d/x" || fail "$d/x is not in the bucket: $(keys | tr '\n' ' ')"
	[ "$(cat "$MNT/$d/x")" = "in $d" ] || fail "$d/x reads back wrong"
	rm "$MNT/$d/x" || fail "rm $d/x"
done
flush
for d in slash plain hadoop deep/hd; do
	[ "$(type_of "$MNT/$d")" = directory ] ||
		fail "$d is $(type_of "$MNT/$d") once emptied (its marker keeps it)"
done

note "rmdir removes the object that made the directory"
for d in slash plain hadoop deep/hd both; do
	rmdir "$MNT/$d" || fail "rmdir $d"
	[ "$(type_of "$MNT/$d")" = missing ] || fail "$d still there after rmdir"
done
flush
for k in slash/ plain 'hadoop_$folder$' 'deep/hd_$folder$' both/ \
	'both_$folder$'; do
	has_key "$k" && fail "$k is still in the bucket after rmdir"
done
[ "$(type_of "$MNT/modefile")" = "regular empty file" ] || fail "modefile went"

note "a rename keeps an empty one a directory"
put plain2 --metadata "mode=$((040755))"
put 'hadoop2_$folder$'
sleep 1.2 # past the negative bound: the new names are asked for
mv "$MNT/plain2" "$MNT/plain3" || fail "mv plain2"
mv "$MNT/hadoop2" "$MNT/hadoop3" || fail "mv hadoop2"
flush
for d in plain3 hadoop3; do
	[ "$(type_of "$MNT/$d")" = directory ] || fail "$d is $(type_of "$MNT/$d")"
	has_key "$d/" || fail "no marker $d/ after the rename"
done
for k in plain2 'hadoop2_$folder$'; do
	has_key "$k" && fail "$k is still in the bucket after the rename"
done
heads=$(stat_of head_requests)
$FMFS umount "$MNT" || fail "umount failed"

note "after a remount the types need no HEAD (kept in the cache index)"
put plain4 --metadata "mode=$((040755))"
mnt
[ "$(type_of "$MNT/plain4")" = directory ] || fail "plain4 is $(type_of "$MNT/plain4")"
ls -l "$MNT" >/dev/null
[ "$(stat_of head_requests)" = 1 ] ||
	fail "a remount made $(stat_of head_requests) HEADs, want 1 (plain4); before: $heads"

note "a name put by another client after the listing: found within the bound"
ls "$MNT" >/dev/null
[ "$(type_of "$MNT/late")" = missing ] || fail "late exists already"
awsx s3 cp --quiet "$TEST_DIR/data" "s3://$B/late" || fail "aws put"
awsx s3 cp --quiet "$TEST_DIR/data" "s3://$B/latedir/f" || fail "aws put"
put 'latefolder_$folder$'
ms=$(found_within 3 "$MNT/late") || fail "late not found within 3 s (bound 1 s)"
note "late found after $ms ms"
[ "$(type_of "$MNT/latedir")" = directory ] || fail "latedir is $(type_of "$MNT/latedir")"
[ "$(type_of "$MNT/latefolder")" = directory ] || fail "latefolder is $(type_of "$MNT/latefolder")"
[ "$(cat "$MNT/late")" = data ] || fail "late reads wrong"
ls "$MNT" | grep -qx late || fail "the listing lacks late after stat found it"
$FMFS umount "$MNT" || fail "umount failed"

note "--negative-refresh 30: not found before the listing expires"
mnt --negative-refresh 30
ls "$MNT" >/dev/null
[ "$(type_of "$MNT/later")" = missing ] || fail "later exists already"
awsx s3 cp --quiet "$TEST_DIR/data" "s3://$B/later" || fail "aws put"
sleep 1.5
[ "$(type_of "$MNT/later")" = missing ] || fail "later found within --negative-refresh 30"
$FMFS umount "$MNT" || fail "umount failed"

note "--refresh 0: found at once"
mnt --refresh 0
ls "$MNT" >/dev/null
[ "$(type_of "$MNT/now")" = missing ] || fail "now exists already"
awsx s3 cp --quiet "$TEST_DIR/data" "s3://$B/now" || fail "aws put"
[ "$(type_of "$MNT/now")" = "regular file" ] || fail "now not found at once with --refresh 0"
# Changed and removed behind our back: seen at the next stat.
printf 'longer than before\n' >"$TEST_DIR/data2"
awsx s3 cp --quiet "$TEST_DIR/data2" "s3://$B/now" || fail "aws put"
[ "$(stat -c %s "$MNT/now")" = "$(stat -c %s "$TEST_DIR/data2")" ] ||
	fail "now's new size not seen at once with --refresh 0"
[ "$(cat "$MNT/now")" = "longer than before" ] || fail "now's new bytes not read"
awsx s3 rm --quiet "s3://$B/now" || fail "aws rm"
[ "$(type_of "$MNT/now")" = missing ] || fail "now still there after aws rm"
# That each such lookup is one small LIST of the name, whatever the size
# of its directory, and finds every kind of directory, is checked without
# a mount (tests/unit/test_ns.c, test_refresh_zero).
$FMFS umount "$MNT" || fail "umount failed"

note "a bad --negative-refresh is refused"
for v in 1.5 -1 86401 x; do
	expect_exit 2 "--negative-refresh '$v': give a whole number of seconds from 0 to 86400" \
		$FMFS mount "s3://$B" "$MNT" --cache-dir "$CACHE" --negative-refresh "$v"
done
mountpoint -q "$MNT" && fail "mounted with a bad --negative-refresh"
echo "ok"
