/* SPDX-License-Identifier: MIT */
/*
 * peer-fault.c - a fault-injecting member of a cache group, for the
 * integration tests (tests/integration/58-mount-group-faults.sh).  It
 * knows the group's secret and passes the handshake as a member would,
 * then answers every GET wrongly in the way --mode says:
 *
 *   corrupt  a DATA of the right length whose CRC32C table does not
 *            match its bytes (what a flipped bit on the wire or in an
 *            owner's memory looks like to the reader);
 *   stall    no answer at all, the connection kept open;
 *   short    a DATA one block short of what was asked;
 *   garbage  a frame that is not one (bad magic).
 *
 * It serves each connection in its own thread until the reader closes
 * it, and runs until killed.  It prints "ready PORT" once listening.
 *
 *   tests/peer-fault --listen 127.0.0.1:PORT --secret-file F --mode M
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "peer/peer.h"
#include "tests/lib/peer_frames.h"

enum mode { CORRUPT, STALL, SHORT, GARBAGE };

static enum mode g_mode;
static char g_id[PEER_ID_MAX + 1];
static unsigned char g_secret[PEER_SECRET_MAX + 1];
static size_t g_secret_len;

static int handshake(int fd)
{
	struct peer_hello me = { .version = PEER_VERSION }, them;
	unsigned char b[4096], mac[PEER_MAC_BYTES];
	enum peer_type t;
	long n;
	int k;

	snprintf(me.id, sizeof(me.id), "%s", g_id);
	if (RAND_bytes(me.nonce, sizeof(me.nonce)) != 1)
		return -1;
	n = fr_recv(fd, &t, b, sizeof(b));
	if (n < 0 || t != PEER_HELLO || peer_hello_decode(b, (size_t)n, &them))
		return -1;
	k = peer_hello_encode(&me, b, sizeof(b));
	if (k < 0 || fr_send(fd, PEER_HELLO, b, (size_t)k))
		return -1;
	n = fr_recv(fd, &t, b, sizeof(b));
	if (n != PEER_MAC_BYTES || t != PEER_AUTH ||
	    peer_auth_check(g_secret, g_secret_len, PEER_ROLE_CLIENT, &them,
			    &me, b) ||
	    peer_auth_mac(g_secret, g_secret_len, PEER_ROLE_SERVER, &me, &them,
			  mac))
		return -1;
	return fr_send(fd, PEER_AUTH, mac, sizeof(mac));
}

/* The wrong answer to g. */
static int answer(int fd, const struct peer_get *g)
{
	const uint32_t bb = 1u << 20;
	uint32_t nb = (g->len + bb - 1) / bb, crcs[PEER_RUN_MAX_BYTES / (1u << 20) + 1];
	size_t head = peer_data_head_bytes(nb);
	unsigned char *fr = malloc(head + g->len);
	uint32_t len = g->len;
	int rc;

	if (!fr)
		return -1;
	RAND_bytes(fr + head, (int)len);
	fr_block_crcs(fr + head, len, bb, crcs);
	if (g_mode == CORRUPT)
		fr[head + len / 2] ^= 0x10;      /* after the CRCs: a bad block */
	if (g_mode == SHORT && nb > 1) {
		nb--;
		len = nb * bb;
		head = peer_data_head_bytes(nb);
		memmove(fr + head, fr + peer_data_head_bytes(nb + 1), len);
	} else if (g_mode == SHORT) {
		len /= 2;
	}
	if (peer_data_head_encode(g->req_id, 0, bb, crcs, nb, fr, head) < 0) {
		free(fr);
		return -1;
	}
	if (g_mode == GARBAGE) {
		static const unsigned char junk[PEER_HDR_BYTES] = "not a frame!!!!";

		rc = fr_write_n(fd, junk, sizeof(junk));
	} else {
		rc = fr_send(fd, PEER_DATA, fr, head + len);
	}
	free(fr);
	return rc;
}

static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	unsigned char b[PEER_KEY_MAX + PEER_ETAG_MAX + 512];
	struct peer_get g;
	enum peer_type t;
	long n;

	if (handshake(fd))
		goto out;
	while ((n = fr_recv(fd, &t, b, sizeof(b))) >= 0) {
		if (t == PEER_RMA_OFFER) {       /* no fabric here */
			struct peer_rma_offer o = { 0 };
			int k;

			snprintf(o.prov, sizeof(o.prov), "none");
			k = peer_rma_offer_encode(&o, b, sizeof(b));
			if (k < 0 || fr_send(fd, PEER_RMA_OFFER, b, (size_t)k))
				break;
			continue;
		}
		if (t != PEER_GET || peer_get_decode(b, (size_t)n, &g))
			break;
		fprintf(stderr, "peer-fault: GET %s at %llu\n", g.key,
			(unsigned long long)g.off);
		if (g_mode == STALL) {
			while (read(fd, b, sizeof(b)) > 0)
				;    /* until the reader gives up */
			break;
		}
		if (answer(fd, &g))
			break;
	}
out:
	close(fd);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: peer-fault --listen 127.0.0.1:PORT "
		"--secret-file FILE --mode corrupt|stall|short|garbage\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *listen_at = NULL, *secret = NULL, *mode = NULL;
	struct sockaddr_in a = { .sin_family = AF_INET };
	char host[64];
	unsigned port;
	FILE *sf;
	int lfd, one = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--listen"))
			listen_at = argv[i + 1];
		else if (!strcmp(argv[i], "--secret-file"))
			secret = argv[i + 1];
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[i + 1];
		else
			usage();
	}
	if (!listen_at || !secret || !mode ||
	    sscanf(listen_at, "%63[^:]:%u", host, &port) != 2 ||
	    inet_pton(AF_INET, host, &a.sin_addr) != 1 || port > 65535)
		usage();
	if (!strcmp(mode, "corrupt"))
		g_mode = CORRUPT;
	else if (!strcmp(mode, "stall"))
		g_mode = STALL;
	else if (!strcmp(mode, "short"))
		g_mode = SHORT;
	else if (!strcmp(mode, "garbage"))
		g_mode = GARBAGE;
	else
		usage();
	snprintf(g_id, sizeof(g_id), "%s", listen_at);
	sf = fopen(secret, "rb");
	if (!sf) {
		perror(secret);
		return 1;
	}
	g_secret_len = fread(g_secret, 1, sizeof(g_secret) - 1, sf);
	fclose(sf);
	/* As fmfs reads it: a trailing newline is not part of the secret. */
	if (g_secret_len && g_secret[g_secret_len - 1] == '\n')
		g_secret_len--;
	a.sin_port = htons((uint16_t)port);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lfd, 64)) {
		perror("peer-fault: listen");
		return 1;
	}
	printf("ready %u\n", port);
	fflush(stdout);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd))
			close(fd);
		else
			pthread_detach(t);
	}
}
