/* SPDX-License-Identifier: MIT */
/*
 * A peer link as the engine sees it (xport.h): struct tpeer's lookup and
 * creation, its sends (queued while the link is not up, then through
 * xport_fair.c, or on the queue pair), its coming up,
 * and the chunks it receives (read whole, or landed in place through the sink's
 * reserve). How the link's connections are set up, lost and redialled is
 * xport_handshake.c's; this file calls only xport_fair.c and
 * xport_streams.c and is called by the files above it (xport_tcp_int.h
 * has the graph).
 */
#include "daemon/xport/tcp/xport_tcp_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conn_io.h"
#include "daemon/base/log.h"
#include "daemon/base/seal.h"
#include "daemon/engine/wire.h"
#include "daemon/xport/rdma/rdma.h"

static const struct pr_link_ops tcp_link_ops;

struct tpeer *pr_tcp_peer_find(struct pr_tcp_xport *x, uint32_t id)
{
    for (struct tpeer *p = x->peers; p; p = p->next)
        if (p->base.node_id == id)
            return p;
    return NULL;
}

void pr_tcp_peer_fail_pending(struct tpeer *p, int status)
{
    while (p->q) {
        struct pending *s = p->q;
        p->q = s->next;
        /* Before the callback, which may queue a send of its own. */
        if (!p->q)
            p->qtail = &p->q;
        s->cb(s->arg, status);
        free(s);
    }
    p->qtail = &p->q;
    pr_tcp_fair_fail(p, status);
}

static void flush_pending(struct tpeer *p)
{
    while (p->q && p->state == P_UP) {
        struct pending *s = p->q;
        p->q = s->next;
        if (!p->q)
            p->qtail = &p->q;
        int rc = tcp_link_ops.send(&p->base, &s->h, s->data, s->cb, s->arg);
        if (rc < 0)
            s->cb(s->arg, rc);
        free(s);
    }
}

static int link_send(struct pr_link *l, const struct pr_chunk_hdr *h,
                     const void *data, pr_send_cb cb, void *arg)
{
    struct tpeer *p = (struct tpeer *)l;
    if (!p->listed)
        return -ENOTCONN;
    if (p->state != P_UP) {
        struct pending *s = malloc(sizeof(*s));
        if (!s)
            return -ENOMEM;
        if (!p->q)
            p->since_ms = uv_now(p->x->loop);
        *s = (struct pending){.h = *h, .data = data, .cb = cb, .arg = arg};
        *p->qtail = s;
        p->qtail = &s->next;
        return 0;
    }
    if (p->qp) {
        struct pr_link *rl = pr_rdma_qp_link(p->qp);
        return rl->ops->send(rl, h, data, cb, arg);
    }
    return pr_tcp_fair_send(p, h, data, cb, arg);
}

/*
 * Closing the connection fails the pending queue, the libuv writes and the
 * queue pair (link_down, xport_handshake.c), and the peer notices the
 * close.
 */
static void link_reset(struct pr_link *l, int status)
{
    struct tpeer *p = (struct tpeer *)l;
    if (p->conn && p->state == P_UP) {
        pr_warn("peer node %u (%s): sends stalled: dropping the link",
                p->base.node_id, p->addr);
        pr_conn_fail(p->conn, status, "sends stalled");
    }
}

static const struct pr_link_ops tcp_link_ops = {.send = link_send,
                                                .reset = link_reset};

void pr_tcp_peer_drop_qp(struct tpeer *p)
{
    if (p->qp) {
        pr_rdma_qp_destroy(p->qp);
        p->qp = NULL;
    }
}

/*
 * The connections that carry p's large chunks (not the express one,
 * whose small chunks the loop reads at once) get the transport's I/O
 * thread, started with the first link. Without it they work as before.
 */
static void io_thread_for(struct tpeer *p)
{
    struct pr_tcp_xport *x = p->x;
    if (x->io_mode == PR_IO_THREAD_OFF)
        return;
    int rc = x->io ? 0 : pr_conn_io_create(x->loop, &x->io);
    if (rc < 0) {
        pr_warn("cannot start the I/O thread: %s; the loop moves the "
                "chunks",
                strerror(-rc));
        x->io_mode = PR_IO_THREAD_OFF;
        return;
    }
    pr_conn_io_set_on(x->io, pr_tcp_xport_io_wanted(x));
    for (uint32_t i = 0; i < p->nstreams - (uint32_t)p->express; i++) {
        struct pr_conn *c = i == 0 ? p->conn : p->more[i - 1].conn;
        if (c && (i == 0 || p->more[i - 1].up) &&
            (rc = pr_conn_set_io(c, x->io)) < 0 && rc != -EALREADY)
            pr_warn("%s: not on the I/O thread: %s", c->name, strerror(-rc));
    }
}

void pr_tcp_peer_up(struct tpeer *p)
{
    p->state = P_UP;
    p->backoff_ms = PEER_BACKOFF_MIN_MS;
    uv_timer_stop(&p->retry);
    /* Every connection of a link is sealed alike (or none is). */
    const char *enc = p->conn->seal ? ", encrypted with " : "";
    const char *cipher =
        p->conn->seal ? pr_seal_cipher_name(p->conn->seal->cipher) : "";
    if (p->qp)
        pr_info("peer node %u (%s): link up (rdma, device %s; tcp for "
                "control)",
                p->base.node_id, p->addr, pr_rdma_device(p->x->rdma));
    else if (p->nstreams - p->express > 1)
        pr_info("peer node %u (%s): link up (tcp, %u streams%s%s)%s",
                p->base.node_id, p->addr, p->nstreams - p->express, enc, cipher,
                p->express ? ", and an express connection" : "");
    else
        pr_info("peer node %u (%s): link up (tcp%s%s)%s", p->base.node_id,
                p->addr, enc, cipher,
                p->express ? ", and an express connection" : "");
    if (!p->qp) {
        pr_tcp_fair_lowat(p->conn);
        for (uint32_t i = 0; i + 1 < p->nstreams; i++)
            if (p->more[i].up && p->more[i].conn)
                pr_tcp_fair_lowat(p->more[i].conn);
        io_thread_for(p);
        /*
         * The express connection's small reduces pass a large one's chunks
         * in the sockets; marked, they pass them in the link's queues too.
         */
        struct pr_conn *ex = p->express ? p->more[p->nstreams - 2].conn : NULL;
        int rc = ex ? pr_conn_lowdelay(ex) : 0;
        if (rc < 0)
            pr_dbg("%s: not marked low-delay: %s", ex->name, strerror(-rc));
    }
    flush_pending(p);
}

/* A chunk frame's header: 0, or -EPROTO (logged) when it cannot be one. */
static int chunk_frame_ok(struct tpeer *p, const uint8_t *b, size_t n,
                          size_t payload, struct pr_chunk_hdr *h)
{
    /*
     * The accepting side of a link of several streams is up when the
     * last joins, and may send before that stream's welcome reaches us:
     * chunks on the streams already in are the link's.
     */
    if ((p->state != P_UP && p->state != P_STREAMS) || n < PR_CHUNK_HDR_LEN) {
        pr_warn("peer node %u: data frame of %zu bytes before the link was "
                "up or shorter than a chunk header: closing",
                p->base.node_id, n);
        return -EPROTO;
    }
    pr_chunk_hdr_decode(b, h);
    if (h->enc >= PR_WIRE_COUNT) {
        pr_warn("peer node %u: chunk in encoding %u, which is none: closing",
                p->base.node_id, h->enc);
        return -EPROTO;
    }
    if (payload != pr_chunk_payload_bytes(h)) {
        pr_warn("peer node %u: chunk says %u floats in %s but carries %zu "
                "bytes: closing",
                p->base.node_id, h->nfloats, pr_wire_name(h->enc), payload);
        return -EPROTO;
    }
    return 0;
}

/* A whole chunk came in: counted, timed and handed up. */
static void chunk_in(struct tpeer *p, struct pr_conn *c, size_t frame_len)
{
    size_t len = frame_len - PR_CHUNK_HDR_LEN;
    p->base.bytes_recv += len;
    p->x->bytes_recv += len;
    /*
     * A chunk's time on one of several streams that share the link is
     * the link's time for as many chunks as there are streams in a frame.
     */
    size_t busy = p->nstreams > 1 ? pr_tcp_streams_busy(p, c) : 1;
    /*
     * Too small a chunk to time, however many streams shared the link;
     * and none from the express connection, whose small reduces' chunks
     * pass the others' and are not what the link moves (xport_streams.c).
     */
    int express = p->express && c == p->more[p->nstreams - 2].conn;
    if (frame_len >= PR_LINK_RATE_MIN && !express)
        pr_link_rate_sample(&p->base, frame_len * busy, c->rx_frame_ns,
                            uv_now(p->x->loop));
}

int pr_tcp_peer_on_data(struct pr_conn *c, const uint8_t *b, size_t n)
{
    struct tpeer *p = c->owner;
    struct pr_chunk_hdr h;
    if (chunk_frame_ok(
            p, b, n, n >= PR_CHUNK_HDR_LEN ? n - PR_CHUNK_HDR_LEN : 0, &h) < 0)
        return -EPROTO;
    size_t len = n - PR_CHUNK_HDR_LEN;
    const uint8_t *payload = b + PR_CHUNK_HDR_LEN;
    const void *data = payload;
    /*
     * An empty chunk has nothing to copy (and abuf may still be NULL,
     * which memcpy must not be given even for 0 bytes).
     */
    if (len > 0 && (uintptr_t)payload % _Alignof(float) != 0) {
        if (p->abuf_len < len) {
            void *nb = realloc(p->abuf, len);
            if (!nb)
                return -ENOMEM;
            p->abuf = nb;
            p->abuf_len = len;
        }
        memcpy(p->abuf, payload, len);
        data = p->abuf;
    }
    chunk_in(p, c, n);
    if (p->x->sink.on_chunk)
        p->x->sink.on_chunk(p->x->sink.ctx, p->base.node_id, &h, data);
    return 0;
}

/* A chunk on its way into place: what on_data_end needs of it. */
struct landing {
    struct pr_landing l;
    struct pr_chunk_hdr h;
    uint32_t node;
};

/*
 * A chunk's header is in and its payload is not: the engine says where
 * the payload goes (a group's scratch vector), and it is read there, with
 * no pass through the read buffer.
 */
int pr_tcp_peer_on_data_begin(struct pr_conn *c, const uint8_t *prefix,
                              size_t rest, void **dst, void **token)
{
    struct tpeer *p = c->owner;
    struct pr_chunk_hdr h;
    if (chunk_frame_ok(p, prefix, PR_CHUNK_HDR_LEN, rest, &h) < 0)
        return -EPROTO;
    if (!p->x->sink.reserve)
        return 0;
    struct landing *ld = malloc(sizeof(*ld));
    if (!ld)
        return 0; /* read whole, as any chunk */
    ld->h = h;
    ld->node = p->base.node_id;
    if (!p->x->sink.reserve(p->x->sink.ctx, ld->node, &h, &ld->l)) {
        free(ld);
        return 0;
    }
    *dst = ld->l.dst;
    *token = ld;
    return ld->l.scratch ? 2 : 1;
}

void pr_tcp_peer_on_data_end(struct pr_conn *c, void *token, int status)
{
    struct landing *ld = token;
    /* On a close the owner may be on its way out: only counted when in. */
    if (status == 0)
        chunk_in(c->owner, c,
                 PR_CHUNK_HDR_LEN + pr_chunk_payload_bytes(&ld->h));
    ld->l.land(&ld->l, ld->node, &ld->h, status);
    free(ld);
}

struct tpeer *pr_tcp_peer_add(struct pr_tcp_xport *x, uint32_t id,
                              const char *addr)
{
    struct tpeer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base.ops = &tcp_link_ops;
    p->base.node_id = id;
    p->base.kind = "tcp";
    p->x = x;
    p->qtail = &p->q;
    p->nstreams = 1;
    p->backoff_ms = PEER_BACKOFF_MIN_MS;
    snprintf(p->addr, sizeof(p->addr), "%s", addr ? addr : "");
    uv_timer_init(x->loop, &p->retry);
    p->retry.data = p;
    x->handles++;
    p->next = x->peers;
    x->peers = p;
    return p;
}
