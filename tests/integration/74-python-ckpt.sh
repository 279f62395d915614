#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Python package fmckpt (python/fmckpt) over this tree's
# libfmckpt.so, with Debian's python3-torch and python3-numpy:
# tests/python/test_fmckpt.py (an nn.Module and its AdamW state against
# torch.save/torch.load, a save overlapping training, a damaged shard,
# slices loaded by another world size, bad input), its remote case
# against the gateway, and the keys it left checked with the aws CLI.
# Skips (77) where torch or numpy is not installed (.ci/run installs
# them).
. "$TOP/tests/lib/common.sh"

PY=/usr/bin/python3
$PY -c 'import torch, numpy' 2>/dev/null ||
	{ echo "SKIP: python3-torch or python3-numpy not installed"; exit 77; }
B=$(new_bucket pyckpt)
cd "$TEST_DIR"
unset RANK WORLD_SIZE FMCKPT_RUN_ID

note "fmckpt (Python): unit cases, and the remote one against the gateway"
# shellcheck disable=SC2046 # words VAR=VALUE, or none
env $(sanitizer_preload "$TOP/ckpt/libfmckpt.so.0") \
	FMCKPT_LIB=$TOP/ckpt/libfmckpt.so.0 PYTHONPATH=$TOP/python \
	FMCKPT_TEST_REMOTE="s3://$B/py" \
	$PY "$TOP/tests/python/test_fmckpt.py" >py.out 2>&1 ||
	fail "test_fmckpt.py: $(tail -30 py.out)"
grep -q "test_remote .* ok$" py.out || fail "the remote case did not run: $(cat py.out)"
grep -q "skipped" py.out && fail "a case was skipped: $(cat py.out)"

note "what it stored, as the aws CLI sees it"
awsx s3api list-objects-v2 --bucket "$B" --prefix py/ \
	--query 'Contents[].Key' --output text | tr '\t' '\n' >keys.txt
for k in py/step-0000000002/manifest py/step-0000000002/shard-00000.bin; do
	grep -qx "$k" keys.txt || fail "aws does not see $k: $(cat keys.txt)"
done
awsx s3 cp --quiet "s3://$B/py/step-0000000002/manifest" manifest.aws
# A manifest with no slice or replicated tensor stays format version 1.
v=$(od -An -tu4 -j8 -N4 manifest.aws | tr -d ' ')
[ "$v" = 1 ] || fail "manifest version $v, not 1"
$TOP/tools/fmckpt verify 2 -t "s3://$B/py" >verify.txt ||
	fail "fmckpt verify: $(cat verify.txt)"
echo "python fmckpt ok"
