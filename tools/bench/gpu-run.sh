#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gpu-run.sh - the GPU side of gpu-pack.sh, which copies it to
# .gpu/run.sh next to .gpu/pack.tar.xz. On a machine with an NVIDIA GPU,
# its driver (nvidia-smi) and the CUDA toolkit's libraries in
# /usr/local/cuda, with the .gpu/ directory copied there:
#
#   bash .gpu/run.sh [OUT_DIR]
#
# unpacks the binaries and libraries into /tmp/fmgpu, then runs the CUDA
# kernel tests, gpubench on GPT-2 124M and a short fmtrain --device cuda
# run with checkpoints. Everything goes to OUT_DIR (default .gpu/out);
# the exit status is the kernel tests'. It sources nothing: it needs
# only bash, tar with xz and what the pack holds (python3 only to find
# an NCCL installed with pip).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
mkdir -p "$out" /tmp/fmgpu
tar -C /tmp/fmgpu -xJf "$here/pack.tar.xz"
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH=/tmp/fmgpu/lib:/usr/local/cuda/lib64${nccl:+:$nccl}
bin=/tmp/fmgpu/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"

echo "== test_train_gpu" | tee "$out/test.txt"
"$bin/test_train_gpu" 2>&1 | tee -a "$out/test.txt"
rc=${PIPESTATUS[0]}

echo "== gpubench GPT-2 124M, B 8, T 1024" | tee "$out/bench.txt"
for _ in 1 2 3; do "$bin/gpubench" 2>&1 | tee -a "$out/bench.txt"; done
"$bin/gpubench" --batch 16 2>&1 | tee -a "$out/bench.txt"

echo "== fmtrain --device cuda" | tee "$out/train.txt"
d=/tmp/fmgpu/run && rm -rf "$d" && mkdir -p "$d"
for _ in $(seq 200); do cat /tmp/fmgpu/sample.txt; done > "$d/text.txt"
"$bin/fmtrain" tokenize "$d/shards" "$d/text.txt" >>"$out/train.txt" 2>&1
"$bin/fmtrain" train --device cuda --data "$d/shards" --layers 12 \
	--heads 12 --channels 768 --seq-len 1024 --batch 8 --steps 60 \
	--ckpt "$d/ckpt" --ckpt-every 20 --csv "$out/train.csv" \
	>>"$out/train.txt" 2>&1 || echo "fmtrain exit $?" >>"$out/train.txt"
tail -5 "$out/train.txt"
exit "$rc"
