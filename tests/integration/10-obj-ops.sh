#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Every objstore operation against the real gateway through `fmfs obj`,
# each result checked with the aws CLI: PUT (single and parallel
# multipart), ranged parallel GET, HEAD with user metadata, ListObjectsV2
# with delimiter and continuation tokens, server-side copy, DELETE and
# multi-object delete, and keys whose names need care.
. "$TOP/tests/lib/common.sh"

B=$(new_bucket ops)
cd "$TEST_DIR"

note "single PUT with metadata, checked with aws s3api"
random_file small.bin 1
$FMFS obj put small.bin "s3://$B/small.bin" -m color=blue -m owner=fmfs
awsx s3api head-object --bucket "$B" --key small.bin >head.json
grep -q '"color": "blue"' head.json || fail "metadata not visible to aws: $(cat head.json)"
grep -q '"ContentLength": 1048576' head.json || fail "wrong size: $(cat head.json)"
awsx s3 cp --quiet "s3://$B/small.bin" small.aws
same_file small.bin small.aws

note "multipart PUT (40 MiB, 8 MiB parts in parallel)"
random_file big.bin 40
$FMFS obj put big.bin "s3://$B/dir/big.bin" -m kind=multipart
etag=$(awsx s3api head-object --bucket "$B" --key dir/big.bin --query ETag --output text)
case $etag in *-5\"|*-5) ;; *) fail "expected a 5-part ETag, got $etag" ;; esac
awsx s3 cp --quiet "s3://$B/dir/big.bin" big.aws
same_file big.bin big.aws

note "parallel ranged GET of an object written by aws"
random_file up.bin 33
awsx s3 cp --quiet up.bin "s3://$B/from-aws/up.bin" --metadata origin=aws
$FMFS obj get "s3://$B/from-aws/up.bin" up.fmfs
same_file up.bin up.fmfs
$FMFS obj get "s3://$B/from-aws/up.bin" - >up.stdout
same_file up.bin up.stdout
$FMFS obj get --part-size 5M --parallel 3 "s3://$B/from-aws/up.bin" up.p3
same_file up.bin up.p3
$FMFS obj stat "s3://$B/from-aws/up.bin" >stat.txt
grep -q '^size: 34603008$' stat.txt || fail "stat size: $(cat stat.txt)"
grep -q '^meta: origin=aws$' stat.txt || fail "stat metadata: $(cat stat.txt)"
aws_etag=$(awsx s3api head-object --bucket "$B" --key from-aws/up.bin --query ETag --output text | tr -d '"')
grep -q "^etag: $aws_etag\$" stat.txt || fail "etag differs from aws ($aws_etag): $(cat stat.txt)"

note "empty object"
: >empty
$FMFS obj put empty "s3://$B/empty"
$FMFS obj get "s3://$B/empty" empty.back
same_file empty empty.back
[ "$(awsx s3api head-object --bucket "$B" --key empty --query ContentLength)" = 0 ] ||
	fail "empty object not empty"

note "names that need care"
names=("sp ace/a b.txt" "plus+sign" "per%cent" "uni/ü€日本.txt" "deep/a/b/c/d/e/f/g/h/i/j.txt"
       "k" "k/child" "q?x=1&y" "tilde~/star*" "dots/./x" "dots/../y" "semi;colon,comma" "hash#tag")
for n in "${names[@]}"; do
	printf '%s' "$n" >name.tmp
	$FMFS obj put name.tmp "s3://$B/names/$n" || fail "put '$n'"
done
awsx s3api list-objects-v2 --bucket "$B" --prefix names/ --query 'Contents[].Key' --output json |
	python3 -c 'import json,sys; print("\n".join(sorted(json.load(sys.stdin))))' >aws.keys
$FMFS obj ls -r "s3://$B/names/" | LC_ALL=C sort >fmfs.keys
printf 'names/%s\n' "${names[@]}" | LC_ALL=C sort >want.keys
LC_ALL=C sort aws.keys -o aws.keys
diff want.keys aws.keys >/dev/null || { diff want.keys aws.keys; fail "aws sees other keys"; }
diff want.keys fmfs.keys >/dev/null || { diff want.keys fmfs.keys; fail "fmfs lists other keys"; }
for n in "${names[@]}"; do
	awsx s3api get-object --bucket "$B" --key "names/$n" aws.obj >/dev/null ||
		fail "aws cannot get '$n'"
	[ "$(cat aws.obj)" = "$n" ] || fail "content of '$n' wrong via aws"
	$FMFS obj get "s3://$B/names/$n" fm.obj
	[ "$(cat fm.obj)" = "$n" ] || fail "content of '$n' wrong via fmfs"
done

note "listing with a delimiter: prefixes as directories, a key that is also a prefix"
$FMFS obj ls "s3://$B/names/" >level.txt
for want in "names/sp ace/" "names/k" "names/k/" "names/deep/" "names/plus+sign"; do
	grep -qxF "$want" level.txt || { cat level.txt; fail "level listing lacks '$want'"; }
done

note "continuation tokens: 1205 keys, pages of 1000"
mkdir many
for i in $(seq -w 1 1205); do echo "$i" >"many/f$i"; done
awsx s3 cp --quiet --recursive many "s3://$B/many/"
[ "$($FMFS obj ls -r "s3://$B/many/" | wc -l)" = 1205 ] || fail "listing of 1205 keys incomplete"
[ "$($FMFS obj ls -r "s3://$B/many/" | sort -u | wc -l)" = 1205 ] || fail "listing repeats keys"

note "server-side copy keeps or replaces metadata"
$FMFS obj cp "s3://$B/small.bin" "s3://$B/copy1.bin"
$FMFS obj cp "s3://$B/small.bin" "s3://$B/copy2.bin" -m color=red
awsx s3api head-object --bucket "$B" --key copy1.bin | grep -q '"color": "blue"' || fail "copy lost metadata"
awsx s3api head-object --bucket "$B" --key copy2.bin | grep -q '"color": "red"' || fail "copy did not replace metadata"
awsx s3 cp --quiet "s3://$B/copy2.bin" copy2.aws
same_file small.bin copy2.aws

note "DELETE, deleting a missing key, multi-object delete"
$FMFS obj rm "s3://$B/copy1.bin"
$FMFS obj rm "s3://$B/never-existed"
if awsx s3api head-object --bucket "$B" --key copy1.bin >/dev/null 2>&1; then
	fail "copy1.bin still there"
fi
$FMFS obj rm -r "s3://$B/many/"
[ -z "$(awsx s3 ls "s3://$B/many/")" ] || fail "multi-object delete left keys"
$FMFS obj rm -r "s3://$B/"
[ -z "$(awsx s3 ls --recursive "s3://$B/")" ] || fail "bucket not empty after rm -r"

note "mkdir: the empty marker DIR/, with or without the slash; no key is refused"
$FMFS obj mkdir "s3://$B/made/a"
$FMFS obj mkdir "s3://$B/made/b/" -m mode=750
[ "$(awsx s3api head-object --bucket "$B" --key made/a/ --query ContentLength)" = 0 ] ||
	fail "mkdir made no empty made/a/"
awsx s3api head-object --bucket "$B" --key made/b/ --query Metadata | grep -q '"mode": "750"' ||
	fail "mkdir lost its metadata"
expect_exit 2 "must name a directory" $FMFS obj mkdir "s3://$B"
mkdir -p fstore
$FMFS obj mkdir "file://$TEST_DIR/fstore/d1"
[ "$($FMFS obj ls "file://$TEST_DIR/fstore/")" = "d1/" ] || fail "file:// mkdir"

note "bucket prefix as store root (s3://BUCKET/PREFIX)"
echo hi >hi.txt
awsx s3 cp --quiet hi.txt "s3://$B/root/sub/hi.txt"
[ "$($FMFS obj ls -r "s3://$B/root/sub/")" = "root/sub/hi.txt" ] || fail "prefix listing"
[ "$($FMFS obj ls "s3://$B/root/")" = "root/sub/" ] || fail "prefix level listing"
echo "all object operations ok"
