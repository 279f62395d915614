#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gpu-pack.sh - packs what the GPU checks need, for a GPU machine that
# has the NVIDIA driver and the CUDA toolkit but not the project's other
# build dependencies (OpenBLAS, libcurl headers, Ceph...): the CUDA
# test, gpubench and fmtrain as built here, and every shared library
# they load that is not glibc's or CUDA's, into .gpu/pack.tar.xz (.gpu/
# is ignored by git), with .gpu/run.sh (tools/bench/gpu-run.sh) to
# unpack and run it there:
#
#   here:   tools/bench/gpu-pack.sh        (configures and builds first;
#                                          needs nvcc for a CUDA build)
#   then:   copy the .gpu/ directory to the GPU machine (scp -r, rsync)
#   there:  bash .gpu/run.sh [OUT_DIR]
#
# run.sh runs tests/unit/test_train_gpu, then gpubench for GPT-2 124M
# (three runs), then fmtrain --device cuda on a small tokenized text
# with checkpoints to a local directory, and writes their output to
# OUT_DIR (default .gpu/out).  libnccl comes from the CUDA toolkit there,
# or from the nvidia-nccl pip package of its Python. This script sources
# nothing; it runs ./configure (if config.mak is missing) and make.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f config.mak ] || ./configure
make -j2 >/dev/null
grep -q '^HAVE_CUDA = 1' config.mak || {
	echo "gpu-pack: this build has no CUDA (./configure did not find nvcc)" >&2
	exit 1
}
bins="tests/unit/test_train_gpu tools/bench/gpubench tools/fmtrain tools/fmfs
	tools/fmckpt tests/fmtrain-fakegpu"
rm -rf .gpu/stage && mkdir -p .gpu/stage/bin .gpu/stage/lib
for b in $bins; do cp "$b" .gpu/stage/bin/; done
for b in $bins; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
	grep -v '^/usr/local/cuda' |
	grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' |
	grep -vE '/(libstdc\+\+|libgcc_s)\.so' |
	while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
cp tools/bench/gpu-run.sh .gpu/run.sh
cp README.md .gpu/stage/sample.txt
cat docs/*.md >.gpu/stage/docs.txt
mkdir -p .gpu/stage/top/tests/lib .gpu/stage/top/tests/integration
cp tests/lib/common.sh .gpu/stage/top/tests/lib/
cp tests/integration/81-train-gpu.sh .gpu/stage/top/tests/integration/
tar -C .gpu/stage -cJf .gpu/pack.tar.xz .
rm -rf .gpu/stage
ls -la .gpu/pack.tar.xz
echo "copy .gpu/ to a machine with an NVIDIA GPU and the CUDA toolkit, and run there: bash .gpu/run.sh OUT_DIR"
