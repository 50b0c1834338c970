/* SPDX-License-Identifier: MIT */
/*
 * TCP links between node daemons: one connection per peer pair, set up once
 * and reused by every group (the node with the higher id connects to the
 * lower one, so each pair has exactly one connection).
 *
 * Link protocol, in order:
 *  0. The accepting side sends Msg.challenge (cluster-key nonce, auth.h).
 *  1. The connecting side sends Msg.hello{version, role NODE, node_id,
 *     rdma = its queue pair's info if it has an RDMA device}.
 *  2. The accepting side checks the version and answers Msg.welcome{id =
 *     its own node id, rdma = its queue pair's info if it took the offer}.
 *  3. With RDMA on both ends, the connecting side brings its queue pair to
 *     RTS and sends Msg.rdma_ready; the accepting side writes only after
 *     that. The data then goes by RDMA WRITE WITH IMMEDIATE (rdma.h).
 *  4. Without, PR_FRAME_DATA frames flow on this link: a chunk header
 *     (xport.h) and the float32 payload, written straight from the group's
 *     vector.
 * Sends posted before the link is up wait in the link; a link that fails
 * completes them with an error and tells its sink (the engine's, which
 * fails the groups that needed that peer).
 */
#ifndef PR_XPORT_TCP_H
#define PR_XPORT_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/engine/xport.h"

struct pr_rdma;
struct pr_rdma_ops;
struct pr_tcp_xport;

struct pr_tcp_peer_info {
    uint32_t node_id;
    const char *addr; /* host:port */
};

struct pr_tcp_xport *pr_tcp_xport_create(uv_loop_t *loop, uint32_t self,
                                         size_t max_chunk_bytes,
                                         uint32_t connect_timeout_ms);
/* Binds host:port (port 0: any); *bound gets the port. */
int pr_tcp_xport_listen(struct pr_tcp_xport *x, const char *host, uint16_t port,
                        uint16_t *bound);
/* Where chunks and link losses go (copied; NULL: nowhere). */
void pr_tcp_xport_set_sink(struct pr_tcp_xport *x,
                           const struct pr_link_sink *sink);
void pr_tcp_xport_set_self(struct pr_tcp_xport *x, uint32_t self);
/* Closes every peer link (the peers dropped theirs): set up afresh. */
void pr_tcp_xport_drop_links(struct pr_tcp_xport *x, const char *why);
struct pr_auth_key;
/* Peers must prove the cluster key (auth.h); NULL: none. Set before use. */
/*
 * TCP connections per peer link that this node asks for
 * (transport.streams, 1..PR_TCP_STREAMS_MAX; xport_streams.c): for the
 * links it dials from now on; a link gets the smaller of both ends'.
 */
void pr_tcp_xport_set_streams(struct pr_tcp_xport *x, uint32_t streams);
/*
 * The largest reduce, in bytes on the wire, whose chunks take a link's
 * express connection (transport.express_kb; xport_streams.c): one TCP
 * connection more per link, that a large reduce's bytes never queue in.
 * 0: links have none. For the links set up from now on; a link has one
 * when both ends want it and its data is not on RDMA.
 */
void pr_tcp_xport_set_express(struct pr_tcp_xport *x, size_t bytes);
/*
 * transport.io_thread (enum pr_io_thread, conf.h): whether a thread of
 * the transport's own reads the payloads of large chunks and writes them
 * (conn_io.h), off the loop, or the loop does; auto: while `shared` (the
 * node serves trainers of two or more jobs, pr_tcp_xport_set_io_shared),
 * when the loop has other jobs' reduces to serve meanwhile. The thread
 * starts with the first link up; either call may come any time.
 */
void pr_tcp_xport_set_io_thread(struct pr_tcp_xport *x, int mode);
void pr_tcp_xport_set_io_shared(struct pr_tcp_xport *x, int shared);
void pr_tcp_xport_set_key(struct pr_tcp_xport *x,
                          const struct pr_auth_key *key);
/*
 * Moves the data of every link that both ends can serve by RDMA onto a
 * verbs queue pair (rdma.h); the TCP link stays for control. `required`:
 * refuse peers without RDMA (transport = rdma) instead of using TCP.
 * pr_rdma_open() takes pr_tcp_xport_rdma_ops() with x as its context.
 */
void pr_tcp_xport_set_rdma(struct pr_tcp_xport *x, struct pr_rdma *r,
                           int required);
const struct pr_rdma_ops *pr_tcp_xport_rdma_ops(void);
/* The peers there are now; links to peers no longer listed are closed. */
int pr_tcp_xport_set_peers(struct pr_tcp_xport *x,
                           const struct pr_tcp_peer_info *peers, size_t n);
/* The link to a peer (known, connected or not), or NULL. */
struct pr_link *pr_tcp_xport_link(struct pr_tcp_xport *x, uint32_t node_id);
/* Closes everything; the struct is freed once the handles are closed. */
void pr_tcp_xport_destroy(struct pr_tcp_xport *x);

/*
 * The peers whose links have a rate sample (pr_link.rate_in), at most
 * `max` of them, into out[]: how many.
 */
size_t pr_tcp_xport_rates(const struct pr_tcp_xport *x, uint64_t now_ms,
                          struct pr_link_rate *out, size_t max);

struct pr_tcp_xport_stats {
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    uint32_t links_up;
    uint32_t links_encrypted; /* of links_up: sealed (security.encrypt) */
    /* Links ended by a sealed frame that did not open (altered, ...). */
    uint64_t auth_failures;
    /* Of the bytes, those the I/O thread read and wrote. */
    uint64_t io_bytes_recv, io_bytes_sent;
};
void pr_tcp_xport_stats(const struct pr_tcp_xport *x,
                        struct pr_tcp_xport_stats *st);
/* Adds every field of x to sum's (a node's transports, one per scheduler). */
void pr_tcp_xport_stats_add(struct pr_tcp_xport_stats *sum,
                            const struct pr_tcp_xport_stats *x);
/*
 * Bytes read so far on the peer links' connections open now, frames in
 * progress included: it changes with every read, so that a caller can
 * tell that data is flowing (node_spin.c). Not a total: it drops when a
 * connection closes.
 */
uint64_t pr_tcp_xport_bytes_in(const struct pr_tcp_xport *x);

#endif
