/* SPDX-License-Identifier: MIT */
#include "daemon/xport/tcp/xport_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/conn.h"
#include "daemon/base/log.h"
#include "daemon/xport/rdma/rdma.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

static const struct pr_link_ops tcp_link_ops;
static void start_connect(struct tpeer *p);
static int on_challenge(struct tpeer *p, struct pr_conn *c,
                        const Pr__V1__Challenge *ch);

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
    x->handles = 2;
    return x;
}

void pr_tcp_xport_set_streams(struct pr_tcp_xport *x, uint32_t streams)
{
    if (streams < 1)
        streams = 1;
    x->streams = streams > PR_TCP_STREAMS_MAX ? PR_TCP_STREAMS_MAX : streams;
}

void pr_tcp_xport_set_sink(struct pr_tcp_xport *x,
                           const struct pr_link_sink *sink)
{
    x->sink = sink ? *sink : (struct pr_link_sink){0};
}

static void rdma_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const float *data)
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

struct tpeer *pr_tcp_peer_find(struct pr_tcp_xport *x, uint32_t id)
{
    for (struct tpeer *p = x->peers; p; p = p->next)
        if (p->base.node_id == id)
            return p;
    return NULL;
}

struct pr_link *pr_tcp_xport_link(struct pr_tcp_xport *x, uint32_t node_id)
{
    struct tpeer *p = pr_tcp_peer_find(x, node_id);
    return p && p->listed ? &p->base : NULL;
}

void pr_tcp_peer_fail_pending(struct tpeer *p, int status)
{
    while (p->q) {
        struct pending *s = p->q;
        p->q = s->next;
        s->cb(s->arg, status);
        free(s);
    }
    p->qtail = &p->q;
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
                     const float *data, pr_send_cb cb, void *arg)
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
    struct pr_conn *c = pr_tcp_streams_pick(p);
    if (!c)
        return -ENOTCONN;
    uint8_t hdr[PR_CHUNK_HDR_LEN];
    pr_chunk_hdr_encode(hdr, h);
    size_t len = (size_t)h->nfloats * sizeof(float);
    int rc = pr_conn_send_data(c, hdr, sizeof(hdr), data, len, cb, arg);
    if (rc == 0) {
        p->base.bytes_sent += len;
        p->x->bytes_sent += len;
    }
    return rc;
}

/*
 * Closing the connection fails the pending queue, the libuv writes and the
 * queue pair (pr_tcp_peer_link_down), and the peer notices the close.
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

static void retry_cb(uv_timer_t *t)
{
    struct tpeer *p = t->data;
    if (p->state == P_CONNECTING || p->state == P_CHALLENGE ||
        p->state == P_HELLO || p->state == P_STREAMS) {
        /* The connect deadline passed: give up on this attempt. */
        pr_warn("peer node %u at %s: no answer within %u ms", p->base.node_id,
                p->addr, p->x->connect_timeout_ms);
        pr_conn_close(p->conn, -ETIMEDOUT);
        return;
    }
    if (p->state == P_DOWN && p->outgoing && p->listed)
        start_connect(p);
}

void pr_tcp_peer_drop_qp(struct tpeer *p)
{
    if (p->qp) {
        pr_rdma_qp_destroy(p->qp);
        p->qp = NULL;
    }
}

void pr_tcp_peer_link_down(struct tpeer *p, int status)
{
    pr_tcp_streams_drop(p);
    p->conn = NULL;
    p->state = P_DOWN;
    pr_tcp_peer_drop_qp(p);
    if (p->x->sink.on_link_down)
        p->x->sink.on_link_down(p->x->sink.ctx, p->base.node_id,
                                status ? status : -ECONNRESET);
    pr_tcp_peer_fail_pending(p, status ? status : -ECONNRESET);
    if (p->outgoing && p->listed && !p->x->closing) {
        uv_timer_start(&p->retry, retry_cb, p->backoff_ms, 0);
        p->backoff_ms *= 2;
        if (p->backoff_ms > PEER_BACKOFF_MAX_MS)
            p->backoff_ms = PEER_BACKOFF_MAX_MS;
    }
}

void pr_tcp_peer_lost(struct tpeer *p, int status)
{
    if (p->state == P_UP)
        pr_warn("peer node %u (%s): link down: %s", p->base.node_id, p->addr,
                status ? strerror(-status) : "closed");
    if (p->conn) {
        /* Its close callback would come after the link is gone. */
        struct pr_conn *c = p->conn;
        p->conn = NULL;
        pr_conn_detach_close(c);
    }
    pr_tcp_peer_link_down(p, status);
}

static void peer_on_close(struct pr_conn *c, int status)
{
    struct tpeer *p = c->owner;
    struct tstream *s;
    if (p->conn == c) {
        p->conn = NULL; /* closing already */
        pr_tcp_peer_lost(p, status);
    } else if ((s = pr_tcp_streams_of(p, c))) {
        s->conn = NULL;
        pr_info("peer node %u (%s): stream %u closed: the link goes with it",
                p->base.node_id, p->addr, s->index);
        pr_tcp_peer_lost(p, status ? status : -ECONNRESET);
    }
    /* Else a connection this peer already replaced. */
}

void pr_tcp_peer_up(struct tpeer *p)
{
    p->state = P_UP;
    p->backoff_ms = PEER_BACKOFF_MIN_MS;
    uv_timer_stop(&p->retry);
    if (p->qp)
        pr_info("peer node %u (%s): link up (rdma, device %s; tcp for "
                "control)",
                p->base.node_id, p->addr, pr_rdma_device(p->x->rdma));
    else if (p->nstreams > 1)
        pr_info("peer node %u (%s): link up (tcp, %u streams)", p->base.node_id,
                p->addr, p->nstreams);
    else
        pr_info("peer node %u (%s): link up (tcp)", p->base.node_id, p->addr);
    flush_pending(p);
}

/*
 * The connecting side got the welcome: with the peer's RDMA info, bring
 * the queue pair to RTS and tell the peer it may write; without it, the
 * data goes over this TCP link (unless RDMA is required).
 */
static int welcomed(struct tpeer *p, const Pr__V1__Welcome *w)
{
    const Pr__V1__RdmaInfo *ri = w->rdma;
    uint32_t n = w->streams ? w->streams : 1;
    if (n > p->x->streams || (ri && p->qp && n != 1)) {
        pr_warn("peer node %u (%s): welcome for %u streams, %s: closing",
                p->base.node_id, p->addr, n,
                n > p->x->streams ? "more than this node asked for"
                                  : "over RDMA");
        return -EPROTO;
    }
    if (!ri || !p->qp) {
        pr_tcp_peer_drop_qp(p);
        if (p->x->rdma_required) {
            pr_err("peer node %u (%s) offers no RDMA and transport = rdma: "
                   "closing",
                   p->base.node_id, p->addr);
            return -EPROTONOSUPPORT;
        }
        if (n > 1) {
            /* Up when the others are in (retry_cb's deadline holds). */
            p->nstreams = n;
            p->state = P_STREAMS;
            p->streams_ms = uv_now(p->x->loop);
            return pr_tcp_streams_dial(p);
        }
        pr_tcp_peer_up(p);
        return 0;
    }
    int rc = pr_rdma_qp_connect(p->qp, ri);
    if (rc < 0)
        return rc;
    Pr__V1__RdmaReady rr = PR__V1__RDMA_READY__INIT;
    Pr__V1__Msg m = PR_MSG_OF(RDMA_READY, rdma_ready, &rr);
    rc = pr_conn_send(p->conn, &m);
    if (rc < 0)
        return rc;
    pr_rdma_qp_start(p->qp);
    pr_tcp_peer_up(p);
    return 0;
}

static int peer_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct tpeer *p = c->owner;
    if (p->state == P_CHALLENGE && m->body_case == PR__V1__MSG__BODY_CHALLENGE)
        return on_challenge(p, c, m->challenge);
    if (p->state == P_HELLO && m->body_case == PR__V1__MSG__BODY_WELCOME) {
        int rc = pr_tcp_check_welcome(p, m->welcome, p->our_nonce,
                                      p->peer_challenge, 0);
        return rc < 0 ? rc : welcomed(p, m->welcome);
    }
    if (p->state == P_RDMA_WAIT &&
        m->body_case == PR__V1__MSG__BODY_RDMA_READY) {
        pr_rdma_qp_start(p->qp);
        pr_tcp_peer_up(p);
        return 0;
    }
    if (m->body_case == PR__V1__MSG__BODY_ERROR) {
        pr_warn("peer node %u: error %d: %s", p->base.node_id, m->error->code,
                m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    }
    pr_warn("peer node %u: unexpected %s message: closing", p->base.node_id,
            pr_msg_name(m));
    return -EPROTO;
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
    if (payload != (size_t)h->nfloats * sizeof(float)) {
        pr_warn("peer node %u: chunk says %u floats but carries %zu bytes: "
                "closing",
                p->base.node_id, h->nfloats, payload);
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
    /* Too small a chunk to time, however many streams shared the link. */
    if (frame_len >= PR_LINK_RATE_MIN)
        pr_link_rate_sample(&p->base, frame_len * busy, c->rx_frame_ns,
                            uv_now(p->x->loop));
}

static int peer_on_data(struct pr_conn *c, const uint8_t *b, size_t n)
{
    struct tpeer *p = c->owner;
    struct pr_chunk_hdr h;
    if (chunk_frame_ok(
            p, b, n, n >= PR_CHUNK_HDR_LEN ? n - PR_CHUNK_HDR_LEN : 0, &h) < 0)
        return -EPROTO;
    size_t len = n - PR_CHUNK_HDR_LEN;
    const uint8_t *payload = b + PR_CHUNK_HDR_LEN;
    const float *data = (const float *)(const void *)payload;
    /*
     * An empty chunk has nothing to copy (and abuf may still be NULL,
     * which memcpy must not be given even for 0 bytes).
     */
    if (len > 0 && (uintptr_t)payload % _Alignof(float) != 0) {
        if (p->abuf_len < len) {
            float *nb = realloc(p->abuf, len);
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
static int peer_on_data_begin(struct pr_conn *c, const uint8_t *prefix,
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
    return 1;
}

static void peer_on_data_end(struct pr_conn *c, void *token, int status)
{
    struct landing *ld = token;
    /* On a close the owner may be on its way out: only counted when in. */
    if (status == 0)
        chunk_in(c->owner, c,
                 PR_CHUNK_HDR_LEN + (size_t)ld->h.nfloats * sizeof(float));
    ld->l.land(&ld->l, ld->node, &ld->h, status);
    free(ld);
}

const struct pr_conn_ops pr_tcp_peer_ops = {
    .on_msg = peer_on_msg,
    .on_data = peer_on_data,
    .on_close = peer_on_close,
    .data_prefix = PR_CHUNK_HDR_LEN,
    .on_data_begin = peer_on_data_begin,
    .on_data_end = peer_on_data_end,
};

static void connect_cb(struct pr_conn *c, int status)
{
    struct tpeer *p = c->owner;
    if (p->conn != c)
        return;
    if (status < 0) {
        pr_dbg("peer node %u (%s): connect: %s", p->base.node_id, p->addr,
               uv_strerror(status));
        pr_conn_close(c, status);
        return;
    }
    /* The accepting side speaks first: its challenge (auth.h). */
    p->state = P_CHALLENGE;
}

/* The peer's challenge came: offer RDMA and prove the key in the hello. */
int pr_tcp_send_hello(struct tpeer *p, struct pr_conn *c,
                      const Pr__V1__Challenge *ch,
                      uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                      uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                      uint32_t streams, uint32_t stream, Pr__V1__RdmaInfo *ri)
{
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why;
    int rc = pr_auth_answer(p->x->key, ch, peer_challenge, our_nonce, buf, &len,
                            &why);
    if (rc < 0) {
        pr_err("peer node %u (%s): %s", p->base.node_id, p->addr, why);
        return rc;
    }
    Pr__V1__Hello hello = PR__V1__HELLO__INIT;
    hello.auth.data = buf;
    hello.auth.len = len;
    hello.version = PR_PROTO_VERSION;
    hello.role = PR__V1__ROLE__ROLE_NODE;
    hello.node_id = p->x->self;
    hello.streams = streams;
    hello.stream = stream;
    hello.link_id = p->link_id;
    hello.rdma = ri;
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &hello);
    return pr_conn_send(c, &m);
}

int pr_tcp_check_welcome(const struct tpeer *p, const Pr__V1__Welcome *w,
                         const uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                         const uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                         uint32_t stream)
{
    if (w->version != PR_PROTO_VERSION || w->id != p->base.node_id) {
        pr_warn("peer %s stream %u: welcome from node %u version %u, "
                "expected node %u version %u: closing",
                p->addr, stream, w->id, w->version, p->base.node_id,
                PR_PROTO_VERSION);
        return -EPROTO;
    }
    const char *why;
    if (pr_auth_check_welcome(p->x->key, our_nonce, peer_challenge, &w->auth,
                              &why) < 0) {
        pr_err("peer node %u (%s) stream %u: %s: closing", p->base.node_id,
               p->addr, stream, why);
        return -EACCES;
    }
    return 0;
}

static int on_challenge(struct tpeer *p, struct pr_conn *c,
                        const Pr__V1__Challenge *ch)
{
    Pr__V1__RdmaInfo ri, *offer = NULL;
    pr_tcp_peer_drop_qp(p);
    if (p->x->rdma &&
        pr_rdma_qp_create(p->x->rdma, p->base.node_id, &p->qp) == 0) {
        pr_rdma_qp_info(p->qp, &ri);
        offer = &ri;
    } else if (p->x->rdma_required) {
        return -EPROTONOSUPPORT;
    }
    /* Names this link to the accepting side as its other streams join. */
    randombytes_buf(&p->link_id, sizeof(p->link_id));
    int rc = pr_tcp_send_hello(p, c, ch, p->our_nonce, p->peer_challenge,
                               p->x->streams, 0, offer);
    if (rc < 0)
        return rc;
    p->state = P_HELLO;
    return 0;
}

static void start_connect(struct tpeer *p)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(p->addr, host, sizeof(host), &port) < 0) {
        pr_err("peer node %u: bad address '%s'", p->base.node_id, p->addr);
        return;
    }
    struct pr_conn *c =
        pr_conn_create_tcp(p->x->loop, p->x->max_frame, &pr_tcp_peer_ops, p);
    if (!c)
        return;
    p->conn = c;
    p->state = P_CONNECTING;
    int rc = pr_conn_connect(c, host, port, connect_cb);
    if (rc < 0) {
        pr_warn("peer node %u: connect %s: %s", p->base.node_id, p->addr,
                uv_strerror(rc));
        pr_conn_close(c, rc);
        return;
    }
    uv_timer_start(&p->retry, retry_cb, p->x->connect_timeout_ms, 0);
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
            start_connect(p);
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
}

void pr_tcp_xport_stats(const struct pr_tcp_xport *x,
                        struct pr_tcp_xport_stats *st)
{
    st->bytes_sent = x->bytes_sent;
    st->bytes_recv = x->bytes_recv;
    st->links_up = 0;
    for (const struct tpeer *p = x->peers; p; p = p->next)
        st->links_up += p->state == P_UP;
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
