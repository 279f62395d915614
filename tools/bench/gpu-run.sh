#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gpu-run.sh - the GPU side of gpu-pack.sh, which copies it to
# .gpu/run.sh next to .gpu/pack.tar.xz. On a machine with an NVIDIA GPU,
# its driver (nvidia-smi) and the CUDA toolkit's libraries in
# /usr/local/cuda, with the .gpu/ directory copied there:
#
#   bash .gpu/run.sh [OUT_DIR] [STEPS]
#   (GPU_BUDGET=SECONDS, GPU_BENCH_BATCHES="8 16 ..." in the environment)
#
# unpacks the binaries and libraries into /tmp/fmgpu and runs, each step
# under its own time limit and the whole within GPU_BUDGET seconds
# (default 480; a step that would start after it is skipped, saying so):
#
#   kernels   tests/unit/test_train_gpu (every kernel against the CPU
#             reference, the model against model.c, determinism, resume)
#   resume    fmtrain --device cuda, N steps straight against k steps,
#             kill -9, --resume, N-k steps: the losses bit for bit
#   bench     gpubench on GPT-2 124M, B 8 twice, then 16, 32, 64, 128,
#             256, 512 until one does not fit; B 16 and 64 (the batches
#             from GPU_BENCH_UNFUSED) with the kernels the defaults
#             replace (GPU_BENCH_VARIANTS: the unfused attention, the
#             bias in our kernels); then B 16 on
#             byte-level text instead of random tokens
#   train     fmtrain on GPT-2 124M (vocabulary 50257) reading byte
#             tokens: from the local disk without checkpoints, with a
#             checkpoint every 100 steps, and through an fmfs mount of a
#             file:// bucket on the same disk (cold cache), with and
#             without checkpoints
#   it81      tests/integration/81-train-gpu.sh (its GPU part too)
#   profile   ncu's time of every kernel of two steps at B 8, summed by
#             kernel name (where ncu is installed): gpubench on random
#             tokens, fmtrain on byte-level text
#
# STEPS (default all) picks some: "kernels bench". OUT_DIR (default
# .gpu/out) gets summary.txt (also on stdout) and all.tar.gz with every
# log, CSV and profile (the device tool brings back 8 files); the exit
# status is the kernel tests'. It sources nothing: it needs bash, tar
# with xz, coreutils and what the pack holds (python3 only to find an
# NCCL installed with pip).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
steps=${2:-"kernels resume bench train it81 profile"}
budget=${GPU_BUDGET:-480}
t0=$(date +%s)
mkdir -p "$out"
rm -rf /tmp/fmgpu && mkdir -p /tmp/fmgpu
tar -C /tmp/fmgpu -xJf "$here/pack.tar.xz"
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH=/tmp/fmgpu/lib:/usr/local/cuda/lib64${nccl:+:$nccl}
bin=/tmp/fmgpu/bin
sum=$out/summary.txt
: >"$sum"
rc=1

say() { echo "$*" | tee -a "$sum"; }
left() { echo $((budget - ($(date +%s) - t0))); }
# want STEP SECONDS: STEP is asked for and SECONDS are left for it.
want() {
	case " $steps " in *" $1 "*) ;; *) return 1 ;; esac
	if [ "$(left)" -lt "$2" ]; then
		say "$1: SKIPPED, $(left) s of the budget left, it needs $2"
		return 1
	fi
	echo "== $1 at $(($(date +%s) - t0)) s" >&2
}
losses() { awk -F, 'NR > 1 { print $1, $2 }' "$1"; }

{
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
		--format=csv
	ls /usr/local/cuda/lib64/libcublas.so.* 2>/dev/null | head -2
	echo "nccl: ${nccl:-none}"
	for b in "$bin"/*; do
		ldd "$b" | grep 'not found' | sed "s|^|$(basename "$b"): |"
	done
} >"$out/gpu.txt" 2>&1
say "gpu: $(sed -n 2p "$out/gpu.txt")"

if want kernels 60; then
	timeout -k 5 240 "$bin/test_train_gpu" >"$out/kernels.txt" 2>&1
	rc=$?
	say "kernels: exit $rc; $(grep -c '^FAIL' "$out/kernels.txt") FAIL line(s); $(tail -1 "$out/kernels.txt")"
fi

d=/tmp/fmgpu/run && mkdir -p "$d"
# small: 22M byte tokens of text in $d/small, shards of 8M
small() {
	[ -d "$d/small" ] && return
	for _ in $(seq 100); do cat /tmp/fmgpu/docs.txt; done >"$d/small.txt"
	"$bin/fmtrain" tokenize --shard-tokens 8M "$d/small" "$d/small.txt" \
		>/dev/null 2>&1
	rm -f "$d/small.txt"
}
if want resume 60; then
	small
	# a small model, so that the steps are many and quick
	RN=600
	R=(train --device cuda --data "$d/small" --layers 4 --heads 4
	   --channels 256 --seq-len 256 --batch 8 --seed 11)
	{
		timeout 120 "$bin/fmtrain" "${R[@]}" --steps $RN --csv "$d/straight.csv"
		echo "straight exit $?"
		# not under timeout: the kill must reach fmtrain itself
		"$bin/fmtrain" "${R[@]}" --steps $RN --ckpt "$d/rck" \
			--ckpt-every 50 --csv "$d/killed.csv" &
		pid=$!
		for _ in $(seq 600); do
			n=$(awk -F, 'NR > 1 { n = $1 } END { print n + 0 }' \
				"$d/killed.csv" 2>/dev/null)
			[ "${n:-0}" -ge $((RN / 2 + 20)) ] && break
			kill -0 $pid 2>/dev/null || break
			sleep 0.05
		done
		kill -9 $pid; wait $pid
		echo "killed after step $n, exit $? (137: SIGKILL)"
		ls "$d/rck"
		timeout 120 "$bin/fmtrain" "${R[@]}" --steps $RN --ckpt "$d/rck" \
			--ckpt-every 50 --resume --csv "$d/resumed.csv"
		echo "resumed exit $?"
	} >"$out/resume.txt" 2>&1
	from=$(grep -o 'resumed from checkpoint step [0-9]*' "$out/resume.txt" |
		grep -o '[0-9]*$')
	if [ -n "$from" ] && [ "$from" -lt $RN ] &&
		grep -q 'exit 137 (137' "$out/resume.txt" &&
		[ "$(losses "$d/resumed.csv")" = \
		"$(losses "$d/straight.csv" | awk -v s="$from" '$1 > s')" ] &&
		[ "$(losses "$d/straight.csv" | wc -l)" = $RN ]; then
		say "resume: BIT-EXACT: killed after step $n, resumed from $from, steps $((from + 1))-$RN equal to the straight run"
	else
		say "resume: DIFFERS or failed (resumed from '${from:-none}'): see resume.txt"
		diff <(losses "$d/straight.csv") <(losses "$d/resumed.csv") \
			>>"$out/resume.txt"
	fi
	cp "$d"/*.csv "$out/" 2>/dev/null
fi

big=8
if want bench 40; then
	: >"$out/bench.txt"
	for b in ${GPU_BENCH_BATCHES:-8 8 16 32 64 128 256 512}; do
		[ "$(left)" -lt 30 ] && break
		if timeout -k 5 90 "$bin/gpubench" --batch $b \
			>>"$out/bench.txt" 2>&1; then
			big=$b
		else
			echo "batch $b: exit $? (does not fit?)" >>"$out/bench.txt"
			break
		fi
	done
	# the kernels the defaults replace, for ratios (docs/gpu.md)
	for v in ${GPU_BENCH_VARIANTS:-FMTRAIN_ATTENTION=unfused \
		FMTRAIN_BIAS=kernels}; do
		for b in ${GPU_BENCH_UNFUSED:-16 64}; do
			[ "$(left)" -lt 30 ] && break
			echo "$v:" >>"$out/bench.txt"
			env "$v" timeout -k 5 90 "$bin/gpubench" --batch $b \
				>>"$out/bench.txt" 2>&1
		done
	done
	# byte-level text: the embedding's backward pass sums long groups
	# of repeated tokens
	small
	for b in 16; do
		[ "$(left)" -lt 30 ] && break
		echo "byte tokens:" >>"$out/bench.txt"
		timeout -k 5 90 "$bin/gpubench" --batch $b \
			--data "$d/small/shard_000000.bin" >>"$out/bench.txt" 2>&1
	done
	sed 's/^/bench: /' "$out/bench.txt" | tee -a "$sum"
fi

if want train 100; then
	for _ in $(seq 40); do cat /tmp/fmgpu/docs.txt; done >"$d/big.txt"
	for _ in 1 2 3 4; do cat "$d/big.txt"; done >"$d/text.txt"
	mkdir -p "$d/bucket"
	"$bin/fmtrain" tokenize --shard-tokens 16M "$d/bucket/gpt2" \
		"$d/text.txt" >"$out/train.txt" 2>&1
	rm -f "$d/big.txt" "$d/text.txt"
	du -sh "$d/bucket/gpt2" >>"$out/train.txt"
	G=(train --device cuda --layers 12 --heads 12 --channels 768
	   --seq-len 1024 --vocab 50257 --batch 16 --steps 200 --seed 5)
	# run NAME DATA [OPTS...]: one fmtrain run, its summary line kept.
	run() {
		local name=$1 data=$2
		shift 2
		[ "$(left)" -lt 45 ] && { say "train $name: SKIPPED (budget)"; return; }
		echo "== $name" >>"$out/train.txt"
		timeout -k 5 100 "$bin/fmtrain" "${G[@]}" --data "$data" "$@" \
			--csv "$out/train-$name.csv" >"$d/$name.out" 2>"$d/$name.err"
		echo "exit $?" >>"$d/$name.out"
		cat "$d/$name.err" "$d/$name.out" | grep -v '^step ' >>"$out/train.txt"
		# tokens/s of steps 11 on (the first ones warm up)
		say "train $name: $(grep '^summary' "$d/$name.out" | cut -c9-) | steps 11+: $(awk -F, 'NR > 12 { t += $3; w += $4; n++ } END { if (n) printf "mean tok/s %.0f data-wait-ms %.3f", t / n, w / n }' "$out/train-$name.csv")"
	}
	run local "$d/bucket/gpt2"
	run local-ckpt100 "$d/bucket/gpt2" --ckpt "$d/ck-local" --ckpt-every 100
	mnt=/tmp/fmgpu/mnt && mkdir -p "$mnt"
	[ -e /dev/fuse ] || mknod /dev/fuse c 10 229 2>/dev/null
	if "$bin/fmfs" mount "file://$d/bucket" "$mnt" --cache-dir "$d/cache" \
		>>"$out/train.txt" 2>&1; then
		run fmfs "$mnt/gpt2"
		"$bin/fmfs" status "$mnt" >>"$out/train.txt" 2>&1
		run fmfs-ckpt100 "$mnt/gpt2" --ckpt "$mnt/ck" --ckpt-every 100
		timeout 60 "$bin/fmfs" flush "$mnt" --wait >>"$out/train.txt" 2>&1
		"$bin/fmfs" status "$mnt" >>"$out/train.txt" 2>&1
		"$bin/fmfs" umount "$mnt" >>"$out/train.txt" 2>&1
		say "train: checkpoints in the bucket: $(ls "$d/bucket/ck" 2>&1 | tr '\n' ' ')"
	else
		say "train fmfs: the mount failed: $(tail -2 "$out/train.txt" | tr '\n' ' ')"
	fi
fi

if want it81 60; then
	T=/tmp/fmgpu/top
	mkdir -p "$T/tools" "$T/docs" "$T/tests/81"
	cp "$bin/fmtrain" "$T/tools/fmtrain"
	cp "$bin/fmtrain-fakegpu" "$T/tests/fmtrain-fakegpu"
	cp /tmp/fmgpu/docs.txt "$T/docs/all.md"
	TOP=$T TEST_DIR=$T/tests/81 FMFS=$bin/fmfs RGW_ENDPOINT=http://127.0.0.1:1 \
		timeout -k 5 150 bash "$T/tests/integration/81-train-gpu.sh" \
		>"$out/it81.txt" 2>&1
	say "it81: exit $?: $(tail -1 "$out/it81.txt")"
fi

# prof NAME CMD...: ncu's time of every kernel CMD runs, by kernel name.
prof() {
	local name=$1
	shift
	timeout -k 5 120 ncu --clock-control none \
		--metrics gpu__time_duration.sum --csv --print-units base "$@" \
		>"$out/ncu-$name.csv" 2>"$out/ncu-$name.err"
	say "profile $name: exit $?; time by kernel (ns):"
	python3 - "$out/ncu-$name.csv" <<'EOF' | tee -a "$sum"
import csv, sys, collections
t = collections.Counter(); n = collections.Counter()
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    k = r["Kernel Name"].split("(")[0][:60]
    t[k] += float(r["Metric Value"].replace(",", "")); n[k] += 1
tot = sum(t.values()) or 1
for k, v in t.most_common(25):
    print(f"  {v/1e6:9.3f} ms {100*v/tot:5.1f}% x{n[k]:<4} {k}")
print(f"  {tot/1e6:9.3f} ms in all")
EOF
}
if want profile 60 && command -v ncu >/dev/null; then
	# two steps each (one warm-up), B 8: random tokens, then byte text
	prof gpubench "$bin/gpubench" --batch 8 --steps 1 --warmup 1
	small
	[ "$(left)" -ge 40 ] && prof fmtrain "$bin/fmtrain" train --device cuda \
		--data "$d/small" --layers 12 --heads 12 --channels 768 \
		--seq-len 1024 --vocab 50257 --batch 8 --steps 2
fi
say "elapsed $(($(date +%s) - t0)) s"
# at most 8 files come back from the device tool: the summary and one tar
tar -C "$out" -czf /tmp/fmgpu/all.tar.gz . &&
	mv /tmp/fmgpu/all.tar.gz "$out/" &&
	find "$out" -maxdepth 1 -type f ! -name all.tar.gz ! -name summary.txt \
		-delete
exit "$rc"
