/* SPDX-License-Identifier: MIT */
/*
 * peer.h - the cache group (docs/cluster-cache.md): the mounts of one
 * job share their caches, each unit of each object version owned by
 * one member, so the bucket serves a dataset about once per cluster.
 * cache/group.c is its one caller in the mount: it asks owners for runs
 * and serves this member's.
 *
 *   - the member list: parsing "host:port,host:port" or a file of them,
 *     validated, duplicates refused, this member found by its listen
 *     address;
 *   - placement: rendezvous hashing of (key, etag, unit) with bounded
 *     loads, so no member owns more than 1.25 x its share of any 64
 *     units of an object, and a member joining or leaving moves little
 *     more than its own share;
 *   - the wire format: frame headers, GET, WORKING and DATA bodies as
 *     the offset/size tables of docs/cluster-cache.md, and the
 *     HELLO/AUTH exchange (HMAC-SHA256 over both nonces and both ids
 *     with the group's shared secret, libcrypto);
 *   - the TCP transport: a server answering GETs through a serve
 *     callback and saying it is still working on a slow one, a client
 *     with kept connections, waits bounded by silence, and members
 *     marked down with back-off and the reason;
 *   - the RDMA data plane through libfabric (fabric.c), where built.
 *
 * peer/ depends on util/, libcrypto and (optionally) libfabric.  Every
 * function here is thread-safe.  Decoders never trust their input:
 * lengths are checked against the bytes given and against the limits
 * below, and a bad frame is -EPROTO (or -EMSGSIZE), never an assertion.
 */
#ifndef FMFS_PEER_H
#define FMFS_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits ---- */
#define PEER_MEMBERS_MAX 4096      /* members in one group */
#define PEER_ID_MAX 255            /* "host:port" bytes */
#define PEER_KEY_MAX 1024          /* S3 keys are at most 1024 bytes */
#define PEER_ETAG_MAX 255
#define PEER_NONCE_BYTES 32
#define PEER_MAC_BYTES 32          /* HMAC-SHA256 */
#define PEER_SECRET_MIN 16         /* bytes of shared secret, at least */
#define PEER_SECRET_MAX 4096
/* A DATA frame holds one run: its CRC table and bytes. */
#define PEER_RUN_MAX_BYTES (8u << 20)
#define PEER_BODY_MAX (PEER_RUN_MAX_BYTES + 64u * 1024)

/* ---- members and placement (member.c) ---- */

struct peer_member {
	char id[PEER_ID_MAX + 1];  /* "host:port", as listed */
	uint64_t id_hash;          /* placement's hash of id */
};

struct peer_group {
	struct peer_member *m;     /* n members, in list order */
	unsigned n;
	int self;                  /* index of this member, or -1 */
};

/* Parses a member list: entries separated by commas, spaces or newlines;
 * '#' starts a comment that runs to the end of its line.  Each entry is
 * host:port (host a name or IPv4 address, or [IPv6]:port), port 1-65535.
 * An empty list, a bad entry or the same entry twice is -EINVAL with a
 * message in msg naming the entry.  self_id (may be NULL) is this
 * member's listen address: g->self is its index, or -1 if not listed.
 * On success *g owns its array (peer_group_release). */
int peer_group_parse(const char *text, const char *self_id,
		     struct peer_group *g, char *msg, size_t msg_len);

/* The same, from a file of at most 1 MiB. */
int peer_group_load(const char *path, const char *self_id,
		    struct peer_group *g, char *msg, size_t msg_len);

void peer_group_release(struct peer_group *g);

/* "host:port" or "[v6]:port" into host (host_len bytes) and port
 * strings: 0, or -EINVAL. */
int peer_split_id(const char *id, char *host, size_t host_len,
		  char port[8]);

/* Placement (member.c, docs/cluster-cache.md "Placement"): an object
 * of S bytes is cut into units of peer_unit_bytes(S) (1 MiB, doubled
 * while the object has over 64 of them, at most 8 MiB), and its units
 * into windows of 64.  Unit u goes to the member of highest rendezvous
 * weight for (key, etag, u) that holds fewer than ceil(1.25 x units in
 * the window / N) units of the window (bounded loads). */
#define PEER_PLACE_UNIT_MIN (1u << 20)
#define PEER_PLACE_UNIT_MAX (8u << 20)
#define PEER_PLACE_WINDOW 64u
uint64_t peer_unit_bytes(uint64_t size);

/* The member (an index into g) that owns the byte at off of the object
 * version (key, etag) of size bytes; *end (may be NULL) receives where
 * that member's range from off ends (the end of the last unit in a row
 * of units it owns, within the window).  g->n must be at least 1.  The
 * same answer whatever the list's order.  UINT32_MAX only when a list
 * of over 256 members finds no memory (no owner: use the bucket). */
unsigned peer_place(const struct peer_group *g, const char *key,
		    const char *etag, uint64_t size, uint64_t off,
		    uint64_t *end);
unsigned peer_owner(const struct peer_group *g, const char *key,
		    const char *etag, uint64_t size, uint64_t off);

/* ---- the wire format (proto.c) ----
 *
 * A frame: a 16-byte header, then the body.  Little-endian.
 *
 * | offset | size | field                                   |
 * |--------|------|-----------------------------------------|
 * | 0      | 4    | magic "FMPC"                            |
 * | 4      | 1    | type (enum peer_type)                   |
 * | 5      | 3    | reserved, 0                             |
 * | 8      | 4    | body length in bytes                    |
 * | 12     | 4    | CRC32C of bytes 0-11                    |
 */
#define PEER_HDR_BYTES 16

enum peer_type {
	PEER_HELLO = 1,
	PEER_AUTH = 2,
	PEER_GET = 3,
	PEER_DATA = 4,
	PEER_BYE = 5,
	PEER_RELEASE = 6,
	PEER_PREFETCH = 7,
	PEER_RMA_OFFER = 8,
	PEER_DATA_RMA = 9,
	PEER_PROGRESS = 10,
	PEER_WORKING = 11,
};

void peer_hdr_encode(unsigned char hdr[PEER_HDR_BYTES], enum peer_type t,
		     uint32_t body_len);
/* -EPROTO for a wrong magic, CRC, reserved bytes or type; -EMSGSIZE for
 * a body over PEER_BODY_MAX. */
int peer_hdr_decode(const unsigned char hdr[PEER_HDR_BYTES],
		    enum peer_type *t, uint32_t *body_len);

/* HELLO body: version (u32, 1), id (u16 length + bytes), nonce (32). */
#define PEER_VERSION 1
struct peer_hello {
	uint32_t version;
	char id[PEER_ID_MAX + 1];
	unsigned char nonce[PEER_NONCE_BYTES];
};
/* Encoders write into buf (cap bytes) and return the body length, or
 * -ENOSPC / -EINVAL (a field over its limit). */
int peer_hello_encode(const struct peer_hello *h, unsigned char *buf,
		      size_t cap);
int peer_hello_decode(const unsigned char *body, size_t len,
		      struct peer_hello *h);

/* AUTH body: HMAC-SHA256(secret, "fmfs-peer-v1" || role || own nonce ||
 * other's nonce || own id || other's id), each id as u16 length +
 * bytes, role one byte: 'C' for the side that connected, 'S' for the
 * one that accepted.  `own` is the HELLO the sender sent, `other` the
 * one it received.  The role stops a MAC that one member computed as a
 * server from passing as a client's at another member (or the same one
 * on another connection), and the client proves itself first: a server
 * computes nothing with the secret for a client that has not.  A HELLO
 * whose nonce is the receiver's own is refused (a reflection). */
enum peer_role { PEER_ROLE_CLIENT = 'C', PEER_ROLE_SERVER = 'S' };
int peer_auth_mac(const unsigned char *secret, size_t secret_len,
		  enum peer_role role, const struct peer_hello *own,
		  const struct peer_hello *other,
		  unsigned char mac[PEER_MAC_BYTES]);
/* 0 when mac is what `sender` (in role, whose HELLO is sender, who
 * received receiver) computes; -EACCES otherwise.  Constant time. */
int peer_auth_check(const unsigned char *secret, size_t secret_len,
		    enum peer_role role, const struct peer_hello *sender,
		    const struct peer_hello *receiver,
		    const unsigned char mac[PEER_MAC_BYTES]);

/* GET (and PREFETCH) body: request id (u64), object size (u64), offset
 * (u64), length (u32), key (u16 + bytes), etag (u16 + bytes).  The
 * decoder refuses a length of 0 or over PEER_RUN_MAX_BYTES and a range
 * past the object's size. */
struct peer_get {
	uint64_t req_id;
	uint64_t size_bytes;
	uint64_t off;
	uint32_t len;
	char key[PEER_KEY_MAX + 1];
	char etag[PEER_ETAG_MAX + 1];
};
int peer_get_encode(const struct peer_get *g, unsigned char *buf,
		    size_t cap);
int peer_get_decode(const unsigned char *body, size_t len,
		    struct peer_get *g);

/* DATA body head: request id (u64), status (i32: 0 or -errno), block
 * bytes (u32), block count (u32), then count CRC32Cs (u32 each), then
 * the bytes.  peer_data_head_bytes is the length of everything before
 * the bytes. */
struct peer_data {
	uint64_t req_id;
	int32_t status;
	uint32_t block_bytes;
	uint32_t nblocks;
	const unsigned char *crcs;  /* nblocks u32s, in the frame (borrowed) */
	const unsigned char *bytes; /* in the frame (borrowed) */
	uint32_t nbytes;
};
#define PEER_DATA_FIXED_BYTES 20     /* the head before the CRC table */
#define PEER_BLOCKS_MAX (PEER_RUN_MAX_BYTES / 512)
size_t peer_data_head_bytes(uint32_t nblocks);
/* Writes the head for nbytes of data in blocks of block_bytes, with the
 * CRCs crcs[0..n) computed by the caller; returns the head's length. */
int peer_data_head_encode(uint64_t req_id, int32_t status,
			  uint32_t block_bytes, const uint32_t *crcs,
			  uint32_t nblocks, unsigned char *buf, size_t cap);
/* Decodes a whole DATA body and checks each block's CRC32C against the
 * table: -EBADMSG names the first bad block in *bad_block.  A status
 * other than 0 must carry no bytes. */
int peer_data_decode(const unsigned char *body, size_t len,
		     struct peer_data *d, uint32_t *bad_block);
/* The same in two steps, for a receiver that reads the bytes straight
 * into their destination: fixed_decode takes the first
 * PEER_DATA_FIXED_BYTES of a body of body_len bytes and checks every
 * rule that does not need the CRCs or the bytes (d->nblocks then says
 * how long the CRC table is, d->nbytes how many bytes follow it); the
 * caller points d->crcs and d->bytes at them and calls check. */
int peer_data_fixed_decode(const unsigned char *fixed, size_t body_len,
			   struct peer_data *d);
int peer_data_check(const struct peer_data *d, uint32_t *bad_block);

/* RMA_OFFER body (client, after AUTH; the server answers one too):
 * provider (u16 length + bytes), fabric address (u16 length + bytes).
 * The client's address is empty; the server's is empty when it has no
 * endpoint of that provider (the connection then carries DATA inline). */
#define PEER_FABRIC_ADDR_MAX 256
#define PEER_PROV_MAX 63
struct peer_rma_offer {
	char prov[PEER_PROV_MAX + 1];
	unsigned char addr[PEER_FABRIC_ADDR_MAX];
	uint16_t addr_len;
};
int peer_rma_offer_encode(const struct peer_rma_offer *o, unsigned char *buf,
			  size_t cap);
int peer_rma_offer_decode(const unsigned char *body, size_t len,
			  struct peer_rma_offer *o);

/* PROGRESS body (client, after AUTH, before any RMA_OFFER; the server
 * answers one too): an interval in milliseconds (u32).  The client asks
 * for WORKING frames at that interval while a GET is being served; the
 * server answers the interval it will keep (at least
 * PEER_PROGRESS_MIN_MS).  A member from before the frame closes the
 * connection on it; the client then dials again without asking and
 * waits for that member's answers as before (the whole timeout).
 *
 * WORKING body (server, between a GET and its DATA, on a connection that
 * asked): the GET's request id (u64).  "Still fetching it": the reader's
 * --peer-timeout measures silence, not the owner's whole fetch. */
#define PEER_PROGRESS_MIN_MS 50
#define PEER_PROGRESS_BYTES 4
#define PEER_WORKING_BYTES 8

/* DATA_RMA body: the DATA head (request id, status, block bytes, block
 * count, the CRC table) for the bytes that stay at the owner, then
 * length (u32), remote address (u64) and key (u64) of its registered
 * buffer.  The reader pulls them with peer_fabric_read, checks them
 * with peer_data_check and answers RELEASE (request id, u64), after
 * which the owner closes the registration.  A status other than 0
 * carries length 0. */
struct peer_data_rma {
	struct peer_data d;          /* d.bytes NULL, d.nbytes the length */
	uint64_t raddr, key;
};
int peer_data_rma_encode(uint64_t req_id, int32_t status,
			 uint32_t block_bytes, const uint32_t *crcs,
			 uint32_t nblocks, uint32_t nbytes, uint64_t raddr,
			 uint64_t key, unsigned char *buf, size_t cap);
/* Checks every rule of peer_data_fixed_decode; d->d.crcs points into
 * body. */
int peer_data_rma_decode(const unsigned char *body, size_t len,
			 struct peer_data_rma *d);

/* ---- the RDMA data plane (fabric.c): libfabric, when built with it ----
 *
 * One FI_EP_RDM endpoint with FI_RMA per mount, bound to the member's
 * listen host, through the provider named (NULL: the first libfabric
 * offers there; "verbs;ofi_rxm" on an RDMA network, "tcp;ofi_rxm" over
 * plain TCP, which is how tests run it on a machine without RDMA).
 * Thread-safe. */
struct peer_fabric;
struct peer_fabric_exposed;
/* Whether this build has libfabric. */
bool peer_fabric_built(void);
/* -ENODEV (no such provider there), -ENOTSUP (built without), with a
 * message. */
int peer_fabric_open(const char *host, const char *prov,
		     struct peer_fabric **out, char *msg, size_t msg_len);
void peer_fabric_close(struct peer_fabric *f);
const char *peer_fabric_provider(const struct peer_fabric *f);
size_t peer_fabric_addr(const struct peer_fabric *f, const unsigned char **a);
/* Drives the provider's data progress; a waiting owner calls it. */
void peer_fabric_progress(struct peer_fabric *f);
/* Registers buf for remote reads until unexpose (under a random key
 * where the provider takes the caller's).  -ENOBUFS when 8 buffers are
 * parked (below). */
int peer_fabric_expose(struct peer_fabric *f, void *buf, size_t len,
		       uint64_t *raddr, uint64_t *key,
		       struct peer_fabric_exposed **out);
void peer_fabric_unexpose(struct peer_fabric_exposed *x);
/* Takes buf (malloc'd) from an owner whose reader never said RELEASE:
 * the provider may still send from it after unexpose, so it is freed
 * with the endpoint (peer_fabric_close).  At most 8 are held; past that
 * expose answers -ENOBUFS and the owner answers inline. */
void peer_fabric_park(struct peer_fabric *f, void *buf);
/* Pulls len bytes at (raddr, key) of the endpoint at addr into dst (via
 * a registered buffer of this endpoint: dst is never the target of the
 * transfer, so a read given up at the deadline cannot write into it
 * later; that buffer is freed when its completion comes, or with the
 * endpoint).  0, -ETIMEDOUT, -EIO (the transfer failed), -EPROTO (an
 * address not of this provider's length), -ENOBUFS (8 reads given up on
 * are still outstanding). */
int peer_fabric_read(struct peer_fabric *f, const unsigned char *addr,
		     size_t addr_len, uint64_t raddr, uint64_t key, void *dst,
		     size_t len, uint64_t deadline_ms);

/* ---- the TCP transport (tcp.c, tcp_server.c, tcp_client.c) ----
 *
 * One member serves runs of its cache to the others (peer_server) and
 * asks the others for theirs (peer_client).  Each connection starts with
 * HELLO and AUTH both ways; nothing else is read or answered before the
 * other side's AUTH checks.  Then the client sends a GET, the server
 * answers one DATA, and so on; a connection carries one request at a
 * time, and a client keeps up to PEER_CONNS_PER_MEMBER idle connections
 * per member for the next requests.
 *
 * Every wait is bounded.  Connecting and the handshake: timeout_ms from
 * the request's start.  The answer: timeout_ms of silence, where the
 * member sends WORKING frames while it fetches (PROGRESS), and total_ms
 * in all; with a member that does not, timeout_ms in all.  A member
 * that is unreachable (refuses, resets), silent for timeout_ms, fails
 * AUTH, or answers a bad frame or bytes that do not match their CRCs is
 * down for 5 s, then 10, 20, up to 60 s after each further failure, and
 * peer_client_get answers -EHOSTDOWN for it at once meanwhile; its first
 * good answer makes it up again.  One that answers "not that version"
 * (-ENOENT), "busy" (-EBUSY), "my fetch failed" (-EREMOTEIO), or is
 * still working at total_ms (-ETIME) stays up.  The caller then reads
 * from the bucket. */
#define PEER_CONNS_PER_MEMBER 4

/* Serves g: writes g->len bytes of (g->key, g->etag, g->size_bytes) at
 * g->off into buf.  0, or -ENOENT (not that version: the owner knows a
 * newer one or the bucket refused it), -EBUSY (this member is asking
 * another for those bytes: the reader should not wait), or another
 * -errno (the server answers -EIO for it).  Called from the
 * connection's thread, or a thread of its own while that one sends
 * WORKING; several at once. */
typedef int (*peer_serve_fn)(void *arg, const struct peer_get *g,
			     unsigned char *buf);
/* Whether a client that authenticated as id may be served (a member). */
typedef bool (*peer_admit_fn)(void *arg, const char *id);

struct peer_server_config {
	const char *listen;          /* "addr:port"; port 0: any (tests) */
	const char *self_id;         /* this member's id in the list */
	const unsigned char *secret; /* borrowed until stop */
	size_t secret_len;
	uint32_t block_bytes;        /* CRC granularity of DATA; 0: 1 MiB */
	unsigned timeout_ms;         /* handshake and each frame; 0: 2000 */
	unsigned max_conns;          /* connections at once; 0: 256 */
	peer_serve_fn serve;
	peer_admit_fn admit;         /* NULL: every authenticated client */
	void *arg;
	/* The RDMA data plane (borrowed until stop), or NULL: a client
	 * that offers the same provider gets DATA_RMA answers, others
	 * DATA with the bytes inline. */
	struct peer_fabric *fabric;
};
struct peer_server;

/* Binds and listens (an address in use, or not this host's, is an error
 * with a message naming it) and starts serving. */
int peer_server_start(const struct peer_server_config *cfg,
		      struct peer_server **out, char *msg, size_t msg_len);
/* The port bound (for a listen port of 0). */
unsigned peer_server_port(const struct peer_server *s);
/* Counters. */
struct peer_server_stats {
	uint64_t conns, auth_failures, requests, bytes_served, errors;
	uint64_t working;            /* WORKING frames sent */
};
void peer_server_get_stats(struct peer_server *s,
			   struct peer_server_stats *out);
/* Closes the listener and every connection, waits for their threads. */
void peer_server_stop(struct peer_server *s);

struct peer_client_config {
	const char *self_id;
	const unsigned char *secret; /* borrowed until free */
	size_t secret_len;
	unsigned timeout_ms;         /* connect + handshake; silence in an
	                              * answer; 0: 2000 */
	unsigned total_ms;           /* the longest wait for one answer from
	                              * a member that says WORKING; 0: 4 x
	                              * timeout_ms */
	/* Offered to each member after AUTH (borrowed until free), or
	 * NULL; a member without it answers inline. */
	struct peer_fabric *fabric;
};
struct peer_client;

int peer_client_new(const struct peer_client_config *cfg,
		    struct peer_client **out);
void peer_client_free(struct peer_client *pc);

/* Asks member (its "host:port" id) for g (g->req_id is set here) and
 * puts the g->len bytes in buf, each block checked against the CRC
 * the owner sent and the one computed here.  0, or -ENOENT (the owner
 * says that version is gone: revalidate), -EHOSTDOWN (member down, not
 * asked), or another -errno with msg saying what failed.  Thread-safe. */
int peer_client_get(struct peer_client *pc, const char *member,
		    struct peer_get *g, void *buf, char *msg, size_t msg_len);

/* One line describing each member of g but this one, for status:
 * "ID up" or "ID down Ns (WHY)", "; " between them, written into buf
 * (truncated to len).  WHY: "silent for N.N s", "unreachable: ERROR",
 * "bad frames: ERROR", "authentication failed".  Members never asked
 * are up. */
void peer_client_describe(struct peer_client *pc, const struct peer_group *g,
			  char *buf, size_t len);

/* How answers move: "tcp" (inline), or the libfabric provider. */
const char *peer_client_transport(const struct peer_client *pc);

struct peer_client_stats {
	uint64_t requests, bytes_received, errors, skipped_down;
	uint64_t rma_reads;          /* answers pulled through the fabric */
	uint64_t silent;             /* members silent for the timeout */
	uint64_t working;            /* WORKING frames received */
	uint64_t busy;               /* "busy" answers */
	unsigned members_down;       /* members down now */
};
void peer_client_get_stats(struct peer_client *pc,
			   struct peer_client_stats *out);

#ifdef __cplusplus
}
#endif
#endif
