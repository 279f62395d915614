/* SPDX-License-Identifier: MIT */
/*
 * fmtrain.c - the fmtrain command: tokenizes text into token shards and
 * trains a GPT-2-style model on the CPU or on GPUs (one process per GPU,
 * data parallel), reading the shards (through an fmfs mount or any
 * directory) and checkpointing asynchronously through libfmckpt, with a
 * bit-exact --resume.  This file holds main(), the usage text and the
 * table of subcommands, each a cmd_<verb>() (fmtrain.h): tokenize
 * (fmtrain_tokenize.c), train (fmtrain_train.c: its options and their
 * checks; the run itself is in fmtrain_run.c, what a checkpoint holds in
 * fmtrain_ckpt.c, the back ends in fmtrain_cpu.c and fmtrain_cuda.c).
 * Exit codes as in tools.h (and docs/fmtrain.1).
 */
#include <stdio.h>

#include "config.h"
#include "fmtrain.h"

void fmtrain_usage(FILE *f)
{
	fprintf(f,
"usage: fmtrain <command> [options] [args]\n"
"\n"
"  tokenize [--shard-tokens N] [--prefix P] OUT_DIR FILE...\n"
"      byte-level tokens (vocabulary 257: bytes and an end-of-text token\n"
"      between files) into shards OUT_DIR/P_000000.bin, ... (P: shard;\n"
"      N tokens a shard, default 100M; suffixes K, M, G)\n"
"\n"
"  train --data PATH [--data PATH...] [options]\n"
"      trains a GPT-2-style model on the CPU or a GPU; PATH is a shard or\n"
"      a directory of *.bin shards (an fmfs mount works best)\n"
"  model (defaults: a tiny model for a small CPU):\n"
"    --layers L (2)  --heads H (2)  --channels C (64)  --seq-len T (64)\n"
"    --batch B (4)   --vocab V (257, the byte tokenizer's)\n"
"    --padded-vocab P  rows of the token embedding, at least V (V up to\n"
"                    4096, else V rounded up to a multiple of 128)\n"
"  run:\n"
"    --steps N       train until step N (100); step N is the N-th update\n"
"    --lr X          AdamW learning rate, constant (0.001)\n"
"    --seed S        parameter init and data shuffle (1337)\n"
"    --threads N     OpenMP threads (default: OMP_NUM_THREADS, else all\n"
"                    cores); results do not depend on it\n"
"    --csv FILE      the per-step figures as CSV too (appended on a\n"
"                    --resume that found a checkpoint)\n"
"    --metrics ADDR:PORT  serve Prometheus metrics (step time, tokens/s,\n"
"                    data wait, checkpoint blocking, libfmckpt) on\n"
"                    PORT + LOCAL_RANK: the ranks of a machine apart\n"
"  device and ranks:\n"
"    --device cpu|cuda  where the model runs (cpu); cuda: one GPU per\n"
"                    process, several processes (WORLD_SIZE > 1) data\n"
"                    parallel with NCCL, B sequences each per step\n"
"    --rendezvous file:PATH|tcp:HOST:PORT  where the ranks meet (default\n"
"                    tcp:$MASTER_ADDR:$MASTER_PORT)\n"
"    --rendezvous-timeout S  how long ranks wait for each other (600)\n"
"    --job ID        tells this job apart from others meeting at the\n"
"                    same place (default: none)\n"
"  checkpoints (libfmckpt, asynchronous; training waits only for the copy):\n"
"    --ckpt DIR|URL  a directory (one on an fmfs mount drains to the\n"
"                    bucket), s3://BUCKET/PREFIX or file:///DIR; twice\n"
"                    for a directory and a remote copy\n"
"    --ckpt-every N  every N steps\n"
"    --ckpt-secs S   when S seconds have passed since the last one\n"
"    --ckpt-mtbf H   at Young's interval sqrt(2 x cost x MTBF) for an\n"
"                    MTBF of H hours, the cost being the measured\n"
"                    blocking time (the first one after step 1)\n"
"                    (several: whichever comes first; a checkpoint is\n"
"                    also saved after the last step, and when SIGINT or\n"
"                    SIGTERM stops the run)\n"
"    --keep N        keep the newest N (default: all)\n"
"    --ckpt-staging SIZE  staging memory (default: room for two)\n"
"    --resume[=STEP] continue from the newest complete checkpoint (or\n"
"                    STEP), bit-exactly; with none, start at step 0\n"
"    --endpoint URL, --region R, --profile P, --path-style: the object\n"
"                    store, as for fmckpt and the aws CLI\n"
"\n"
"Output: one line a step on stdout (rank 0's),\n"
"  step N loss X tok/s Y data-wait-ms Z ckpt-block-ms W\n"
"then a summary line and, with --ckpt, when the last checkpoint became\n"
"durable; notes and errors on stderr.  Environment: RANK, WORLD_SIZE,\n"
"LOCAL_RANK (as torchrun sets them; WORLD_SIZE > 1 needs --device cuda),\n"
"MASTER_ADDR, MASTER_PORT.\n"
"\n"
"Exit status: 0 ok, 1 failed (data, checkpoint, I/O; no CUDA or no GPU\n"
"for --device cuda; a rendezvous that failed), 2 usage (also options\n"
"that do not match the checkpoint resumed), 128+N stopped by signal N\n"
"after a final checkpoint.  See fmtrain(1).\n");
}

static const struct tools_cmd cmds[] = {
	{ "tokenize", cmd_tokenize },
	{ "train", cmd_train },
};

int main(int argc, char **argv)
{
	char version[96];

	setvbuf(stdout, NULL, _IOLBF, 0);   /* each step line as it comes */
	snprintf(version, sizeof(version), "fmtrain %s (checkpoint format %d, "
		 "run record %d)", FMFS_VERSION, CKPT_FORMAT_VERSION,
		 FMTRAIN_RUN_VERSION);
	return tools_main(argc, argv, PROG, version, fmtrain_usage, cmds,
			  sizeof(cmds) / sizeof(cmds[0]));
}
