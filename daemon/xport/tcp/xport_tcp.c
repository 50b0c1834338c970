/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport's public calls (xport_tcp.h): the transport's life,
 * its settings, the peer list the scheduler sends (a link dialled for
 * each peer this node dials, removed for each that left), and the
 * figures read from it. At the top of the transport's files: it calls
 * xport_handshake.c, xport_link.c and xport_streams.c, and none calls it
 * (xport_tcp_int.h has the graph).
 */
#include "daemon/xport/tcp/xport_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/base/auth.h"
#include "daemon/base/conn.h"
#include "daemon/base/conn_io.h"
#include "daemon/base/log.h"
#include "daemon/xport/rdma/rdma.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

struct pr_tcp_xport *pr_tcp_xport_create(uv_loop_t *loop, uint32_t self,
                                         size_t max_chunk_bytes,
                                         uint32_t connect_timeout_ms)
{
    struct pr_tcp_xport *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->loop = loop;
    x->self = self;
    /* A chunk's frame, with room for the largest control message. */
    x->max_frame = max_chunk_bytes + PR_CHUNK_HDR_LEN + PR_HELLO_MAX_FRAME;
    x->connect_timeout_ms = connect_timeout_ms;
    x->streams = 1;
    uv_tcp_init(loop, &x->listener);
    x->listener.data = x;
    uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    uv_check_init(loop, &x->pump);
    x->pump.data = x;
    x->handles = 3;
    return x;
}

void pr_tcp_xport_set_streams(struct pr_tcp_xport *x, uint32_t streams)
{
    if (streams < 1)
        streams = 1;
    x->streams = streams > PR_TCP_STREAMS_MAX ? PR_TCP_STREAMS_MAX : streams;
}

int pr_tcp_xport_io_wanted(const struct pr_tcp_xport *x)
{
    return x->io_mode == PR_IO_THREAD_ON ||
           (x->io_mode == PR_IO_THREAD_AUTO && x->io_shared);
}

static void io_apply(struct pr_tcp_xport *x)
{
    if (x->io)
        pr_conn_io_set_on(x->io, pr_tcp_xport_io_wanted(x));
}

void pr_tcp_xport_set_io_thread(struct pr_tcp_xport *x, int mode)
{
    x->io_mode = mode;
    io_apply(x);
}

void pr_tcp_xport_set_io_shared(struct pr_tcp_xport *x, int shared)
{
    x->io_shared = !!shared;
    io_apply(x);
}

void pr_tcp_xport_set_express(struct pr_tcp_xport *x, size_t bytes)
{
    x->express_bytes = bytes;
}

void pr_tcp_xport_set_sink(struct pr_tcp_xport *x,
                           const struct pr_link_sink *sink)
{
    x->sink = sink ? *sink : (struct pr_link_sink){0};
}

static void rdma_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const void *data)
{
    struct pr_tcp_xport *x = ctx;
    if (x->sink.on_chunk)
        x->sink.on_chunk(x->sink.ctx, node, h, data);
}

/* A queue pair failed: drop the whole link (and reconnect from scratch). */
static void rdma_on_error(void *ctx, uint32_t node, int status)
{
    struct pr_tcp_xport *x = ctx;
    struct tpeer *p = pr_tcp_peer_find(x, node);
    if (p && p->conn)
        pr_conn_close(p->conn, status);
}

static const struct pr_rdma_ops rdma_ops = {
    .on_chunk = rdma_on_chunk,
    .on_error = rdma_on_error,
};

const struct pr_rdma_ops *pr_tcp_xport_rdma_ops(void)
{
    return &rdma_ops;
}

void pr_tcp_xport_set_rdma(struct pr_tcp_xport *x, struct pr_rdma *r,
                           int required)
{
    x->rdma = r;
    x->rdma_required = required;
}

void pr_tcp_xport_set_key(struct pr_tcp_xport *x, const struct pr_auth_key *key)
{
    x->key = key;
}

struct pr_link *pr_tcp_xport_link(struct pr_tcp_xport *x, uint32_t node_id)
{
    struct tpeer *p = pr_tcp_peer_find(x, node_id);
    return p && p->listed ? &p->base : NULL;
}

static void maybe_free_x(struct pr_tcp_xport *x)
{
    if (x->closing && x->handles == 0)
        free(x);
}

static void peer_closed_cb(uv_handle_t *h)
{
    struct tpeer *p = h->data;
    struct pr_tcp_xport *x = p->x;
    free(p->abuf);
    free(p);
    x->handles--;
    maybe_free_x(x);
}

static void remove_peer(struct tpeer *p)
{
    struct tpeer **pp = &p->x->peers;
    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    p->listed = 0;
    if (p->conn) {
        /*
         * The peer is freed before this conn's close callback may run
         * (close callbacks come in any order): detach the conn from it.
         */
        struct pr_conn *c = p->conn;
        p->conn = NULL;
        pr_conn_detach_close(c);
    }
    pr_tcp_streams_drop(p);
    pr_tcp_peer_drop_qp(p);
    if (p->x->sink.on_link_down)
        p->x->sink.on_link_down(p->x->sink.ctx, p->base.node_id, -ECONNRESET);
    pr_tcp_peer_fail_pending(p, -ECONNRESET);
    uv_close((uv_handle_t *)&p->retry, peer_closed_cb);
}

/*
 * Every link came up under the id its hello named. A new id is a new
 * membership: the scheduler dropped the old one, and the peers their links
 * to it; but their closing may not have arrived (a partition: the FIN is
 * retransmitted with backoff, seconds after the network is back), and until
 * it does such a link looks up here, so this node would neither dial the
 * peers that now wait for its new id nor hear from them. Drop them all;
 * the next peer list dials anew.
 */
void pr_tcp_xport_set_self(struct pr_tcp_xport *x, uint32_t self)
{
    if (x->self != 0 && x->self != self && x->peers) {
        pr_info("now node %u (was %u): dropping the links of node %u", self,
                x->self, x->self);
        while (x->peers)
            remove_peer(x->peers);
    }
    x->self = self;
}

void pr_tcp_xport_drop_links(struct pr_tcp_xport *x, const char *why)
{
    if (!x->peers)
        return;
    pr_info("dropping every peer link: %s", why);
    while (x->peers)
        remove_peer(x->peers);
}

int pr_tcp_xport_set_peers(struct pr_tcp_xport *x,
                           const struct pr_tcp_peer_info *peers, size_t n)
{
    for (struct tpeer *p = x->peers; p; p = p->next)
        p->listed = 0;
    for (size_t i = 0; i < n; i++) {
        if (peers[i].node_id == x->self)
            continue;
        struct tpeer *p = pr_tcp_peer_find(x, peers[i].node_id);
        if (!p && !(p = pr_tcp_peer_add(x, peers[i].node_id, peers[i].addr)))
            return -ENOMEM;
        snprintf(p->addr, sizeof(p->addr), "%s", peers[i].addr);
        p->listed = 1;
        p->outgoing = x->self > p->base.node_id;
        if (p->outgoing && p->state == P_DOWN &&
            !uv_is_active((uv_handle_t *)&p->retry))
            pr_tcp_handshake_dial(p);
    }
    struct tpeer *p = x->peers;
    while (p) {
        struct tpeer *next = p->next;
        if (!p->listed) {
            pr_info("peer node %u (%s) left the job", p->base.node_id, p->addr);
            remove_peer(p);
        }
        p = next;
    }
    return 0;
}

static void listener_closed_cb(uv_handle_t *h)
{
    struct pr_tcp_xport *x = h->data;
    x->handles--;
    maybe_free_x(x);
}

static void io_closed_cb(void *arg)
{
    struct pr_tcp_xport *x = arg;
    x->handles--;
    maybe_free_x(x);
}

void pr_tcp_xport_destroy(struct pr_tcp_xport *x)
{
    if (!x)
        return;
    x->closing = 1;
    x->sink = (struct pr_link_sink){0};
    while (x->peers)
        remove_peer(x->peers);
    while (x->strangers.head) {
        struct stranger *st = (struct stranger *)x->strangers.head;
        pr_stranger_remove(&st->base);
        pr_conn_detach_close(st->conn);
        free(st);
    }
    uv_close((uv_handle_t *)&x->listener, listener_closed_cb);
    uv_close((uv_handle_t *)&x->sweep, listener_closed_cb);
    uv_close((uv_handle_t *)&x->pump, listener_closed_cb);
    /* After the links' connections, which let go of it as they closed. */
    if (x->io) {
        x->handles++;
        x->io_recv_gone += pr_conn_io_read(x->io);
        x->io_sent_gone += pr_conn_io_written(x->io);
        pr_conn_io_destroy(x->io, io_closed_cb, x);
        x->io = NULL;
    }
}

void pr_tcp_xport_stats(const struct pr_tcp_xport *x,
                        struct pr_tcp_xport_stats *st)
{
    st->bytes_sent = x->bytes_sent;
    st->bytes_recv = x->bytes_recv;
    st->links_up = 0;
    st->links_encrypted = 0;
    st->auth_failures = x->auth_failures;
    st->io_bytes_recv = x->io_recv_gone + (x->io ? pr_conn_io_read(x->io) : 0);
    st->io_bytes_sent =
        x->io_sent_gone + (x->io ? pr_conn_io_written(x->io) : 0);
    for (const struct tpeer *p = x->peers; p; p = p->next) {
        st->links_up += p->state == P_UP;
        st->links_encrypted += p->state == P_UP && p->conn && p->conn->seal;
    }
}

void pr_tcp_xport_stats_add(struct pr_tcp_xport_stats *sum,
                            const struct pr_tcp_xport_stats *x)
{
    sum->bytes_sent += x->bytes_sent;
    sum->bytes_recv += x->bytes_recv;
    sum->links_up += x->links_up;
    sum->links_encrypted += x->links_encrypted;
    sum->auth_failures += x->auth_failures;
    sum->io_bytes_recv += x->io_bytes_recv;
    sum->io_bytes_sent += x->io_bytes_sent;
}

uint64_t pr_tcp_xport_bytes_in(const struct pr_tcp_xport *x)
{
    uint64_t sum = 0;
    for (const struct tpeer *p = x->peers; p; p = p->next) {
        if (p->conn)
            sum += p->conn->bytes_in;
        for (uint32_t i = 0; i + 1 < p->nstreams; i++)
            if (p->more[i].conn)
                sum += p->more[i].conn->bytes_in;
    }
    return sum;
}

size_t pr_tcp_xport_rates(const struct pr_tcp_xport *x, uint64_t now_ms,
                          struct pr_link_rate *out, size_t max)
{
    size_t n = 0;
    for (const struct tpeer *p = x->peers; p && n < max; p = p->next) {
        if (p->base.rate_in <= 0)
            continue;
        out[n++] = (struct pr_link_rate){
            .node = p->base.node_id,
            .bytes_per_s = p->base.rate_in,
            .age_ms =
                now_ms > p->base.rate_in_ms ? now_ms - p->base.rate_in_ms : 0,
        };
    }
    return n;
}
