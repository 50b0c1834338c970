/* SPDX-License-Identifier: MIT */
/*
 * The transport interface between node daemons: what the reduce engine
 * (engine.c) needs from a link to one peer, and nothing more, so that TCP,
 * RDMA verbs and the tests' in-memory links plug in behind it.
 *
 * The model is the RDMA one: a send is a one-sided write of one chunk
 * (header + payload: its floats in the chunk's encoding, wire.h) into
 * the peer, with a completion callback that
 * fires exactly once when the payload buffer may be reused. The receiving
 * side hands each chunk up through its pr_link_sink (the engine's, given
 * by whoever wires the two together) with a pointer that is valid only
 * during that call: TCP points into its read buffer,
 * RDMA into a registered receive slot whose credit goes back to the sender
 * when the call returns. A transport with credits (RDMA) queues sends
 * beyond its window itself; the engine may post any number.
 *
 * Chunk header on the wire (PR_FRAME_DATA payload prefix, little-endian,
 * PR_CHUNK_HDR_LEN bytes): group_id u64, total u64 (floats in the group's
 * vector), off u64 (first float), nfloats u32, step u32, seg u32, enc u32
 * (enum pr_wire: 0, fp32, is what daemons that predate encodings send in
 * that field, which was padding). The payload is pr_chunk_payload_bytes().
 */
#ifndef PR_XPORT_H
#define PR_XPORT_H

#include <stddef.h>
#include <stdint.h>

#define PR_CHUNK_HDR_LEN 40

struct pr_chunk_hdr {
    uint64_t group_id;
    uint64_t total;
    uint64_t off;
    uint32_t nfloats;
    uint32_t step; /* ring step: 0..m-2 reduce-scatter, m-1..2m-3 gather */
    uint32_t seg;
    uint32_t enc; /* enum pr_wire */
};

/*
 * Bytes of chunk h's payload; 0 with an encoding that is none (which a
 * transport refuses, as it does a payload of another length, before it
 * hands the chunk up).
 */
size_t pr_chunk_payload_bytes(const struct pr_chunk_hdr *h);

void pr_chunk_hdr_encode(uint8_t out[PR_CHUNK_HDR_LEN],
                         const struct pr_chunk_hdr *h);
void pr_chunk_hdr_decode(const uint8_t in[PR_CHUNK_HDR_LEN],
                         struct pr_chunk_hdr *h);

/* Called once per send: status 0, or a negative errno if it was dropped. */
typedef void (*pr_send_cb)(void *arg, int status);

struct pr_link;

struct pr_link_ops {
    /*
     * Posts one chunk. `data` (pr_chunk_payload_bytes(h) bytes) must stay
     * valid until cb.
     * 0 (cb will run), or a negative errno (cb will not run).
     */
    int (*send)(struct pr_link *l, const struct pr_chunk_hdr *h,
                const void *data, pr_send_cb cb, void *arg);
    /*
     * Optional (may be NULL). Drops the link because sends on it stopped
     * completing: every send still out completes with an error, soon, and
     * the peer sees the link go down (and fails its groups) too.
     */
    void (*reset)(struct pr_link *l, int status);
};

/*
 * A chunk's payload received straight into its place (the engine's
 * scratch vector, or its wire buffer for an encoded chunk) instead of a
 * read buffer: dst has room for the chunk's payload and stays valid, token
 * pinned, until land() ran, which it does exactly once: status 0 with the
 * payload all at dst, or < 0 when the link went down first (no byte lands after
 * that call).
 */
struct pr_landing {
    void *dst;
    /*
     * dst is the engine's own scratch, which nothing reads before land():
     * an encrypted link may open the payload there (conn.h). 0: dst may
     * be a trainer's memory, which must never hold ciphertext.
     */
    int scratch;
    void *token;
    void (*land)(struct pr_landing *l, uint32_t node,
                 const struct pr_chunk_hdr *h, int status);
};

/*
 * What a transport hands up, and to whom: chunks as they arrive and the
 * loss of a link. The transport knows only this struct, never the engine
 * (pr_engine_sink() fills one in; tests may plug in their own).
 */
struct pr_link_sink {
    /* One chunk from peer `node`; data valid during the call only. */
    void (*on_chunk)(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                     const void *data);
    /* The link to `node` is gone: its sends have failed or will fail. */
    void (*on_link_down)(void *ctx, uint32_t node, int status);
    /*
     * Optional, for transports that can read a payload into place: 1 and
     * *out for chunk h from `node` (its floats already claimed: a repeat
     * or overlap is refused before any byte lands), or 0 to have it come
     * through on_chunk as usual.
     */
    int (*reserve)(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                   struct pr_landing *out);
    void *ctx;
};

/* One peer as the engine sees it; embedded in the transport's own struct. */
struct pr_link {
    const struct pr_link_ops *ops;
    uint32_t node_id;
    const char *kind; /* "tcp", "rdma", "mem": for logs and metrics */
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    /*
     * How fast this peer's chunks arrive: an EWMA (weight 1/4) of bytes
     * per second over chunks of at least PR_LINK_RATE_MIN bytes, timed
     * from the first read that held a piece of each to the read that
     * completed it (pr_link_rate_sample()). 0 until the first sample.
     * The node reports it to the scheduler, which orders rings by it.
     */
    double rate_in;
    uint64_t rate_in_ms; /* loop time of the latest sample */
};

/* One link's rate as reported to the scheduler (Ping.rates). */
struct pr_link_rate {
    uint32_t node;
    double bytes_per_s;
    uint64_t age_ms; /* since its latest sample */
};

/* Chunks smaller than this arrive too fast to time: no sample. */
#define PR_LINK_RATE_MIN (64u << 10)

/*
 * A chunk of `bytes` from l's peer took `ns` to arrive (0: it came in one
 * read, too fast to time). now_ms: the loop's time.
 */
void pr_link_rate_sample(struct pr_link *l, size_t bytes, uint64_t ns,
                         uint64_t now_ms);

#endif
