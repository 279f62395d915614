/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_tokenize.c - `fmtrain tokenize`: one subcommand,
 * cmd_tokenize().  Turns text files into token shards with the byte
 * tokenizer of train/ (train_tokenize_files: vocabulary 257, the bytes
 * and an end-of-text token between files), OUT_DIR/PREFIX_000000.bin and
 * on, and says how many tokens and shards it wrote.  `fmtrain train
 * --data` reads them.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fmtrain.h"

#define DEF_PREFIX "shard"   /* --prefix */

int cmd_tokenize(int argc, char **argv)
{
	enum { OPT_SHARD = 256, OPT_PREFIX };
	static const struct option lo[] = {
		{ "shard-tokens", required_argument, 0, OPT_SHARD },
		{ "prefix", required_argument, 0, OPT_PREFIX },
		{ "help", no_argument, 0, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *prefix = DEF_PREFIX;
	uint64_t shard_tokens = 0, tokens = 0;
	char msg[1024] = "", path[PATH_MAX + 300];
	size_t nshards = 0;
	int ch, rc;

	argv[0] = (char *)PROG " tokenize";   /* getopt's messages */
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case OPT_SHARD:
			if (tools_parse_size(optarg, &shard_tokens) ||
			    !shard_tokens || shard_tokens > (1ull << 40)) {
				tools_bad_opt(PROG, "--shard-tokens", optarg,
					      "a number of tokens from 1 to 1T "
					      "(suffixes K, M, G)");
				return EXIT_USAGE;
			}
			break;
		case OPT_PREFIX:
			if (!*optarg || strchr(optarg, '/')) {
				tools_bad_opt(PROG, "--prefix", optarg,
					      "a name without '/'");
				return EXIT_USAGE;
			}
			prefix = optarg;
			break;
		case 'h': fmtrain_usage(stdout); return EXIT_OK;
		default:
			fprintf(stderr, PROG " tokenize: see fmtrain --help\n");
			return EXIT_USAGE;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 2) {
		fprintf(stderr, PROG " tokenize: give OUT_DIR and at least one "
			"FILE to tokenize\n");
		return EXIT_USAGE;
	}
	rc = util_mkdir_p(argv[0], 0777);
	if (rc) {
		fprintf(stderr, PROG " tokenize: cannot create %s: %s\n",
			argv[0], strerror(-rc));
		return EXIT_FAIL;
	}
	rc = train_tokenize_files((const char *const *)argv + 1,
				  (size_t)argc - 1, argv[0], prefix,
				  shard_tokens, &nshards, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG " tokenize: %s\n", msg[0] ? msg :
			strerror(-rc));
		return rc == -EINVAL ? EXIT_USAGE : EXIT_FAIL;
	}
	for (size_t i = 0; i < nshards; i++) {
		struct train_shard_info in;

		snprintf(path, sizeof(path), "%s/%s_%06zu.bin", argv[0], prefix,
			 i);
		if (!train_shard_info(path, &in, NULL, 0))
			tokens += in.ntokens;
	}
	printf("tokenized %d file(s): %" PRIu64 " tokens in %zu shard(s) %s/"
	       "%s_*.bin (vocabulary %u)\n", argc - 1, tokens, nshards,
	       argv[0], prefix, TRAIN_BYTE_VOCAB);
	return EXIT_OK;
}

