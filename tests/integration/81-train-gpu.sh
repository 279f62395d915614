#!/bin/bash
# SPDX-License-Identifier: MIT
#
# fmtrain --device and ranks, on local shards (no mount, no bucket).
# Everywhere: a --device other than cpu or cuda, WORLD_SIZE=2 with the
# CPU back end, WORLD_SIZE=2 with cuda but no MASTER_ADDR/MASTER_PORT nor
# --rendezvous, a bad --rendezvous and a RANK out of range are usage
# errors (exit 2, saying what to do).
#
# The multi-rank paths, on any machine, with tests/fmtrain-fakegpu
# (fmtrain whose gpu.h is the CPU model with collectives over local TCP,
# tests/fake_gpu.c): a CPU checkpoint resumed on "cuda" and back, bit for
# bit (it is the same model); two ranks through a tcp rendezvous, only
# rank 0 printing and writing the CSV, a shard per rank; resumed through
# a file rendezvous bit for bit; refused with another WORLD_SIZE; SIGTERM
# to rank 1 alone stopping both ranks after the same step with a
# checkpoint, every --ckpt-secs checkpoint complete; ranks started with
# different options stopped at the rendezvous.
#
# Without CUDA or without a GPU, the real --device cuda exits 1 at once,
# naming the cause, also with WORLD_SIZE=2 (before any rendezvous wait).
# With a GPU: a few steps on it; a CPU checkpoint resumed on the GPU and a
# GPU one on the CPU (close, not bit-exact); a GPU resume bit-exact; with
# two GPUs, two ranks by hand through a tcp rendezvous, checkpointed and
# resumed bit-exactly.
. "$TOP/tests/lib/common.sh"

cd "$TEST_DIR"
FT=$TOP/tools/fmtrain
FAKE=$TOP/tests/fmtrain-fakegpu
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT FMCKPT_RUN_ID \
	TORCHELASTIC_USE_AGENT_STORE OMP_NUM_THREADS

# losses FILE [AFTER]: "N LOSS" of each step line with N > AFTER.
losses() {
	awk -v s="${2:-0}" '$1 == "step" && $3 == "loss" && $2 > s { print $2, $4 }' "$1"
}
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# close A B AFTER: the loss lines of A and those of B after step AFTER
# are the same steps, each loss within 0.05 (bf16 on the GPU, fp32 on the
# CPU).
close() {
	paste -d' ' <(losses "$1") <(losses "$2" "$3") | awk '
		NF != 4 || $1 != $3 || $2 ~ /nan|inf/ { bad = 1 }
		{ d = $2 - $4; if (d < 0) d = -d; if (d > 0.05) bad = 1; n++ }
		END { exit (bad || n == 0) }' ||
		fail "$1 and $2 are not close: $(paste -d' ' <(losses "$1") <(losses "$2" "$3"))"
}

cat "$TOP"/docs/*.md >text.txt
$FT tokenize --shard-tokens 16K shards text.txt >/dev/null || fail "tokenize"
OPTS=(--data shards --seed 7 --threads 2)

note "usage errors: exit 2, saying what to do"
expect_exit 2 "--device 'bogus': give cpu or cuda" $FT train "${OPTS[@]}" --device bogus
expect_exit 2 "WORLD_SIZE=2: --device cpu runs as one process.*--device cuda" \
	env WORLD_SIZE=2 RANK=0 $FT train "${OPTS[@]}"
expect_exit 2 "WORLD_SIZE=2: --device cpu runs as one process" \
	env WORLD_SIZE=2 RANK=1 $FT train "${OPTS[@]}" --device cpu
expect_exit 2 "set MASTER_ADDR and MASTER_PORT .* or give --rendezvous" \
	env WORLD_SIZE=2 RANK=0 $FT train "${OPTS[@]}" --device cuda
expect_exit 2 "--rendezvous 'udp:x:1': unknown kind; give file:PATH" \
	env WORLD_SIZE=2 RANK=0 $FT train "${OPTS[@]}" --device cuda \
	--rendezvous udp:x:1
expect_exit 2 "RANK=2 with a world of 2" \
	env WORLD_SIZE=2 RANK=2 $FT train "${OPTS[@]}" --device cuda
expect_exit 2 "WORLD_SIZE=2 but no RANK" \
	env WORLD_SIZE=2 $FT train "${OPTS[@]}" --device cuda
expect_exit 2 "--job 'a b'" $FT train "${OPTS[@]}" --device cuda --job 'a b'
[ -z "$(losses out)" ] || fail "trained after a usage error"

note "fake GPU, one rank: CPU and \"cuda\" resume each other's checkpoints"
$FT train "${OPTS[@]}" --steps 12 --ckpt-every 6 --ckpt fc >fc.out 2>fc.err ||
	fail "cpu run: $(cat fc.err)"
rm -rf fc6 && mkdir fc6 && cp -r fc/step-0000000006 fc6/
$FAKE train "${OPTS[@]}" --device cuda --steps 12 --ckpt fc6 --resume \
	>fg.out 2>fg.err || fail "fake cuda from CPU: $(cat fg.err)"
[ "$(losses fg.out)" = "$(losses fc.out 6)" ] || fail "fake cuda from CPU differs"
rm -rf fg6 && mkdir fg6 && cp -r fc6/step-0000000012 fg6/
$FT train "${OPTS[@]}" --steps 14 --ckpt fg6 --resume >fgc.out 2>fgc.err ||
	fail "CPU from fake cuda: $(cat fgc.err)"
$FT train "${OPTS[@]}" --steps 14 --ckpt fc --resume >fc14.out 2>/dev/null ||
	fail "cpu resume"
[ "$(losses fgc.out)" = "$(losses fc14.out)" ] || fail "CPU from fake cuda differs"

# two_ranks PROG STEPS OUT WHERE [options]: ranks 0 and 1 of PROG with
# --device cuda meeting at WHERE; rank 0's output in OUT, rank 1's in
# OUT.1.
two_ranks() {
	local prog=$1 steps=$2 out=$3 where=$4 pid0 pid1 rc0=0 rc1=0
	shift 4
	RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 $prog train "${OPTS[@]}" \
		--device cuda --rendezvous "$where" --rendezvous-timeout 60 \
		--steps "$steps" "$@" >"$out.1" 2>"$out.1.err" &
	pid1=$!
	RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 $prog train "${OPTS[@]}" \
		--device cuda --rendezvous "$where" --rendezvous-timeout 60 \
		--steps "$steps" "$@" >"$out" 2>"$out.err" &
	pid0=$!
	wait $pid0 || rc0=$?
	wait $pid1 || rc1=$?
	[ $rc0 = 0 ] && [ $rc1 = 0 ] ||
		fail "two ranks: exit $rc0 and $rc1: $(cat "$out.err" "$out.1.err")"
	[ -z "$(losses "$out.1")" ] || fail "rank 1 printed step lines"
}

note "fake GPU, two ranks: tcp rendezvous, a shard per rank, rank 0 prints"
two_ranks "$FAKE" 12 f2.out "tcp:127.0.0.1:$(free_port)" --ckpt-every 6 \
	--ckpt f2 --csv f2.csv
grep -q "rendezvous tcp:127.0.0.1:[0-9]*: 2 ranks joined" f2.out.err ||
	fail "$(cat f2.out.err)"
grep -q "on fake GPU 0, 2 rank(s)" f2.out.err || fail "$(cat f2.out.err)"
[ "$(losses f2.out | wc -l)" = 12 ] || fail "two ranks: $(cat f2.out)"
[ "$(wc -l <f2.csv)" = 13 ] || fail "f2.csv has $(wc -l <f2.csv) lines"
[ ! -s f2.out.1.err ] || fail "rank 1 said: $(cat f2.out.1.err)"
for s in 6 12; do
	for f in manifest shard-00000.bin shard-00001.bin; do
		[ -e "f2/step-00000000$(printf %02d $s)/$f" ] ||
			fail "step $s has no $f: $(ls f2/*)"
	done
done
[ "$(losses f2.out)" != "$(losses fc.out)" ] || fail "two ranks trained as one"

note "fake GPU, two ranks: resumed through a file rendezvous, bit for bit"
rm -rf f2b && mkdir f2b && cp -r f2/step-0000000006 f2b/
two_ranks "$FAKE" 12 f2b.out "file:$TEST_DIR/rdv" --ckpt f2b --resume
grep -q "resumed from checkpoint step 6 " f2b.out.err || fail "$(cat f2b.out.err)"
[ "$(losses f2b.out)" = "$(losses f2.out 6)" ] ||
	fail "two-rank resume differs: $(diff <(losses f2.out 6) <(losses f2b.out))"
expect_exit 2 "saved by 2 rank\(s\); this run has WORLD_SIZE 1" \
	$FAKE train "${OPTS[@]}" --device cuda --steps 14 --ckpt f2 --resume

note "fake GPU, two ranks: SIGTERM to rank 1 alone stops both after one step"
port=$(free_port)
RANK=1 WORLD_SIZE=2 $FAKE train "${OPTS[@]}" --device cuda --steps 100000 \
	--rendezvous "tcp:127.0.0.1:$port" --ckpt-secs 0.2 --ckpt ft \
	>ft.out.1 2>ft.err.1 &
pid1=$!
RANK=0 WORLD_SIZE=2 $FAKE train "${OPTS[@]}" --device cuda --steps 100000 \
	--rendezvous "tcp:127.0.0.1:$port" --ckpt-secs 0.2 --ckpt ft \
	>ft.out 2>ft.err &
pid0=$!
for _ in $(seq 600); do
	[ "$(losses ft.out | wc -l)" -ge 10 ] && break
	sleep 0.05
done
kill -TERM $pid1
rc0=0 rc1=0
wait $pid0 || rc0=$?
wait $pid1 || rc1=$?
[ $rc0 = 143 ] && [ $rc1 = 143 ] ||
	fail "SIGTERM: exit $rc0 and $rc1: $(cat ft.err ft.err.1)"
last=$(losses ft.out | tail -1 | cut -d' ' -f1)
grep -q "stopped by signal 15 (Terminated) after step $last, checkpoint saved" ft.err ||
	fail "SIGTERM: $(cat ft.err)"
grep -q "^checkpoint step $last durable" ft.out || fail "SIGTERM: $(tail -2 ft.out)"
n=$(ls -d ft/step-* | wc -l)
[ "$n" -ge 2 ] && [ "$(ls ft/step-*/manifest | wc -l)" = "$n" ] ||
	fail "--ckpt-secs with two ranks: not every checkpoint complete: $(ls ft/*)"
note "stopped after step $last, $n checkpoints, all complete"

note "fake GPU, two ranks with different options stop at the rendezvous"
port=$(free_port)
RANK=0 WORLD_SIZE=2 $FAKE train "${OPTS[@]}" --device cuda --steps 5 \
	--rendezvous "tcp:127.0.0.1:$port" --rendezvous-timeout 3 >fx.out \
	2>fx.err &
pid0=$!
expect_exit 1 "rank 0 refused rank 1: rank 1's hello has job 'fmtrain//" \
	env RANK=1 WORLD_SIZE=2 $FAKE train "${OPTS[@]}" --device cuda \
	--steps 6 --rendezvous "tcp:127.0.0.1:$port"
grep -q "start every rank with the same options" err || fail "$(cat err)"
rc0=0
wait $pid0 || rc0=$?
[ $rc0 = 1 ] && grep -q "rank 1 (1 of 1) did not connect .* within 3000 ms" fx.err ||
	fail "rank 0: exit $rc0: $(cat fx.err)"

rc=0
$FT train "${OPTS[@]}" --device cuda --steps 3 >gpu.out 2>gpu.err || rc=$?
if [ $rc != 0 ]; then
	note "no GPU here: --device cuda refused, exit 1, naming the cause"
	[ $rc = 1 ] || fail "--device cuda exited $rc, not 1: $(cat gpu.err)"
	grep -Eq -- "--device cuda: .*(CUDA|GPU)" gpu.err ||
		fail "--device cuda: no cause named: $(cat gpu.err)"
	[ -z "$(losses gpu.out)" ] || fail "--device cuda printed steps"
	note "$(head -1 gpu.err)"
	# Before any rendezvous: no 600 s wait for a rank 1 that never comes.
	t0=$(date +%s)
	expect_exit 1 "--device cuda: .*(CUDA|GPU)" env WORLD_SIZE=2 RANK=0 \
		$FT train "${OPTS[@]}" --device cuda --rendezvous "file:$TEST_DIR/rdv-none"
	[ $(($(date +%s) - t0)) -lt 30 ] || fail "the refusal waited"
	[ ! -e rdv-none ] || fail "a rendezvous file was written"
	echo "fmtrain device ok (no GPU)"
	exit 0
fi

note "a GPU: $(grep -o 'on [^,]*, [0-9]* rank(s)' gpu.err)"
[ "$(losses gpu.out | wc -l)" = 3 ] || fail "--device cuda: $(cat gpu.out)"

note "a CPU checkpoint resumed on the GPU, and a GPU one on the CPU"
$FT train "${OPTS[@]}" --steps 12 --ckpt-every 6 --ckpt cpu >cpu.out 2>cpu.err ||
	fail "cpu run: $(cat cpu.err)"
rm -rf cpu6 && mkdir cpu6 && cp -r cpu/step-0000000006 cpu6/
$FT train "${OPTS[@]}" --device cuda --steps 12 --ckpt cpu6 --resume \
	>g-from-c.out 2>g-from-c.err || fail "GPU from CPU: $(cat g-from-c.err)"
grep -q "resumed from checkpoint step 6 " g-from-c.err || fail "$(cat g-from-c.err)"
close g-from-c.out cpu.out 6
$FT train "${OPTS[@]}" --device cuda --steps 12 --ckpt-every 6 --ckpt gpu \
	>gpu12.out 2>gpu12.err || fail "gpu run: $(cat gpu12.err)"
rm -rf gpu6 && mkdir gpu6 && cp -r gpu/step-0000000006 gpu6/
$FT train "${OPTS[@]}" --steps 12 --ckpt gpu6 --resume >c-from-g.out \
	2>c-from-g.err || fail "CPU from GPU: $(cat c-from-g.err)"
close c-from-g.out gpu12.out 6

note "a GPU resume is bit-exact"
rm -rf gpu6b && mkdir gpu6b && cp -r gpu/step-0000000006 gpu6b/
$FT train "${OPTS[@]}" --device cuda --steps 12 --ckpt gpu6b --resume \
	>g-from-g.out 2>g-from-g.err || fail "GPU resume: $(cat g-from-g.err)"
[ "$(losses g-from-g.out)" = "$(losses gpu12.out 6)" ] ||
	fail "GPU resume differs: $(diff <(losses gpu12.out 6) <(losses g-from-g.out))"

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
	note "SKIP two ranks: $ngpu GPU(s)"
	echo "fmtrain device ok (one GPU)"
	exit 0
fi

note "two ranks through tcp:127.0.0.1 (by hand), checkpointed and resumed"
two_ranks "$FT" 12 r2.out "tcp:127.0.0.1:$(free_port)" --ckpt-every 6 \
	--ckpt r2
grep -q "2 ranks joined" r2.out.err || fail "$(cat r2.out.err)"
[ "$(losses r2.out | wc -l)" = 12 ] || fail "two ranks: $(cat r2.out)"
[ -e r2/step-0000000012/shard-00001.bin ] || fail "no shard of rank 1: $(ls r2/*)"
rm -rf r2b && mkdir r2b && cp -r r2/step-0000000006 r2b/
two_ranks "$FT" 12 r2b.out "tcp:127.0.0.1:$(free_port)" --ckpt r2b \
	--resume
[ "$(losses r2b.out)" = "$(losses r2.out 6)" ] ||
	fail "two-rank resume differs: $(diff <(losses r2.out 6) <(losses r2b.out))"
expect_exit 2 "saved by 2 rank\(s\); this run has WORLD_SIZE 1" \
	$FT train "${OPTS[@]}" --device cuda --steps 14 --ckpt r2 --resume
echo "fmtrain device ok (two GPUs)"
