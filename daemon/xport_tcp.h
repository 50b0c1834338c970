/*
 * TCP links between node daemons: one connection per peer pair, set up once
 * and reused by every group (the node with the higher id connects to the
 * lower one, so each pair has exactly one connection).
 *
 * Link protocol, in order:
 *  1. The connecting side sends Msg.hello{version, role NODE, node_id}.
 *  2. The accepting side checks the version, answers Msg.welcome{id = its
 *     own node id}, and the link is up on both sides.
 *  3. Then only PR_FRAME_DATA frames flow: a chunk header (xport.h) and
 *     the float32 payload, written straight from the group's vector.
 * Sends posted before the link is up wait in the link; a link that fails
 * completes them with an error and tells the engine, which fails the
 * groups that needed that peer.
 */
#ifndef PR_XPORT_TCP_H
#define PR_XPORT_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/xport.h"

struct pr_engine;
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
void pr_tcp_xport_set_engine(struct pr_tcp_xport *x, struct pr_engine *e);
void pr_tcp_xport_set_self(struct pr_tcp_xport *x, uint32_t self);
/* The peers there are now; links to peers no longer listed are closed. */
int pr_tcp_xport_set_peers(struct pr_tcp_xport *x,
                           const struct pr_tcp_peer_info *peers, size_t n);
/* The link to a peer (known, connected or not), or NULL. */
struct pr_link *pr_tcp_xport_link(struct pr_tcp_xport *x, uint32_t node_id);
/* Closes everything; the struct is freed once the handles are closed. */
void pr_tcp_xport_destroy(struct pr_tcp_xport *x);

struct pr_tcp_xport_stats {
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    uint32_t links_up;
};
void pr_tcp_xport_stats(const struct pr_tcp_xport *x,
                        struct pr_tcp_xport_stats *st);

#endif
