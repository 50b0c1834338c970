/* SPDX-License-Identifier: MIT */
/*
 * A peer link's handshake, both sides and on each of its connections:
 * from the dial to the link up, and back to the dial when it is lost. In
 * one place because each side's steps answer the other's, and the first
 * connection and the further streams share them.
 *
 * Dialling side (the higher node id: pr_tcp_handshake_dial, redialled
 * with backoff by retry_cb, which also holds the connect deadline):
 *  1. connect; the accepting side speaks first: its Challenge;
 *  2. Hello{version, node id, the key's proof, the streams it wants and
 *     whether an express one, a random link id, its queue pair's info if
 *     it has RDMA} (hello_send);
 *  3. the Welcome checked (welcome_check); then with RDMA on both ends the
 *     queue pair to RTS and RdmaReady, with several streams (the
 *     express one the last) the others dialled, each with its own
 *     challenge, hello (its index and the link id) and welcome
 *     (dial_*), else the link is up.
 * Accepting side (a stranger of xport_accept.c until its hello passes):
 *  1. the Hello checked (hello_check: version and proof by base/hello.c,
 *     and a peer that dials this node);
 *  2. stream 0: the peer's link (an older connection replaced), its RDMA
 *     offer taken or not, the Welcome (welcome_send), then up, or with
 *     RDMA up at its RdmaReady; stream > 0 joins the link that waits for
 *     it (streams_join), which is up when its last stream is.
 * A connection of the link that closes takes the link down (link_down):
 * its queued sends fail, the sink hears of it, the dialling side redials.
 *
 * Called by xport_tcp.c (the dial) and xport_accept.c (a stranger's
 * hello); calls xport_link.c and xport_streams.c, which never call back
 * (xport_tcp_int.h has the graph).
 */
#include "daemon/xport/tcp/xport_tcp_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/xport/rdma/rdma.h"

static const struct pr_conn_ops peer_ops;
static int streams_dial(struct tpeer *p);
static int streams_join(struct pr_tcp_xport *x, struct pr_conn *c,
                        const Pr__V1__Hello *h, const uint8_t *challenge,
                        const uint8_t *proof, size_t plen);

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

/*
 * Answers the peer's challenge on c, one of p's connections: the hello
 * with our id and the key's proof (the nonces kept for the welcome's
 * check), the cipher to seal with (*cipher, 0 for none), the link's
 * streams and whether it has (or asks for) an express connection, this
 * one's index and the link id, and `ri` when it offers RDMA. 0, or < 0
 * (logged).
 */
static int hello_send(struct tpeer *p, struct pr_conn *c,
                      const Pr__V1__Challenge *ch,
                      uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                      uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                      uint32_t *cipher, uint32_t streams, int express,
                      uint32_t stream, Pr__V1__RdmaInfo *ri)
{
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why;
    int rc = pr_auth_answer(p->x->key, ch, peer_challenge, our_nonce, buf, &len,
                            cipher, &why);
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
    hello.express = express;
    hello.stream = stream;
    hello.link_id = p->link_id;
    hello.rdma = ri;
    hello.seal = *cipher;
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &hello);
    return pr_conn_send(c, &m);
}

/*
 * The dialling side's check of a Welcome on c, one of p's connections
 * (`stream`, for logs): our protocol version, the expected node, the
 * key's proof against the nonces of that connection's hello; then c is
 * sealed with `cipher` (0: not). 0, or -EPROTO / -EACCES (logged).
 */
static int welcome_check(const struct tpeer *p, struct pr_conn *c,
                         const Pr__V1__Welcome *w,
                         const uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                         const uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                         uint32_t cipher, uint32_t stream)
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
    int rc = cipher ? pr_conn_seal(c, cipher, p->x->key, 'C', peer_challenge,
                                   our_nonce)
                    : 0;
    if (rc < 0)
        pr_err("peer node %u (%s) stream %u: cannot encrypt the link: %s: "
               "closing",
               p->base.node_id, p->addr, stream, strerror(-rc));
    return rc;
}

/* The peer's challenge came: offer RDMA and prove the key in the hello. */
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
    int rc = hello_send(p, c, ch, p->our_nonce, p->peer_challenge, &p->cipher,
                        p->x->streams, p->x->express_bytes > 0, 0, offer);
    if (rc < 0)
        return rc;
    p->state = P_HELLO;
    return 0;
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
    int e = w->express;
    if (n > p->x->streams || (e && !p->x->express_bytes) ||
        (ri && p->qp && (n != 1 || e))) {
        pr_warn("peer node %u (%s): welcome for %u streams%s, %s: closing",
                p->base.node_id, p->addr, n, e ? " and an express one" : "",
                ri && p->qp ? "over RDMA" : "more than this node asked for");
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
        if (n + e > 1) {
            /* Up when the others are in (retry_cb's deadline holds). */
            p->nstreams = n + e;
            p->express = e;
            p->state = P_STREAMS;
            p->streams_ms = uv_now(p->x->loop);
            return streams_dial(p);
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
        int rc = welcome_check(p, c, m->welcome, p->our_nonce,
                               p->peer_challenge, p->cipher, 0);
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
        pr_tcp_handshake_dial(p);
}

void pr_tcp_handshake_dial(struct tpeer *p)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(p->addr, host, sizeof(host), &port) < 0) {
        pr_err("peer node %u: bad address '%s'", p->base.node_id, p->addr);
        return;
    }
    struct pr_conn *c =
        pr_conn_create_tcp(p->x->loop, p->x->max_frame, &peer_ops, p);
    if (!c)
        return;
    p->conn = c;
    p->state = P_CONNECTING;
    if (pr_hello_transcript(c, p->x->key) < 0)
        return;
    int rc = pr_conn_connect(c, host, port, connect_cb);
    if (rc < 0) {
        pr_warn("peer node %u: connect %s: %s", p->base.node_id, p->addr,
                uv_strerror(rc));
        pr_conn_close(c, rc);
        return;
    }
    uv_timer_start(&p->retry, retry_cb, p->x->connect_timeout_ms, 0);
}

/*
 * Every connection of the link is gone: its sends fail, the sink hears of
 * it, and the dialling side redials after the backoff.
 */
static void link_down(struct tpeer *p, int status)
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

/* The link is lost with all its connections, as if its first closed. */
static void peer_lost(struct tpeer *p, int status)
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
    link_down(p, status);
}

static void peer_on_close(struct pr_conn *c, int status)
{
    struct tpeer *p = c->owner;
    /* This side found a record that did not open: not the peer's word. */
    if (c->auth_failed)
        p->x->auth_failures++;
    struct tstream *s;
    if (p->conn == c) {
        p->conn = NULL; /* closing already */
        peer_lost(p, status);
    } else if ((s = pr_tcp_streams_of(p, c))) {
        s->conn = NULL;
        pr_info("peer node %u (%s): stream %u closed: the link goes with it",
                p->base.node_id, p->addr, s->index);
        peer_lost(p, status ? status : -ECONNRESET);
    }
    /* Else a connection this peer already replaced. */
}

static const struct pr_conn_ops peer_ops = {
    .on_msg = peer_on_msg,
    .on_data = pr_tcp_peer_on_data,
    .on_close = peer_on_close,
    .data_prefix = PR_CHUNK_HDR_LEN,
    .on_data_begin = pr_tcp_peer_on_data_begin,
    .on_data_end = pr_tcp_peer_on_data_end,
};

/*
 * The accepting side of the RDMA offer in a hello: a queue pair brought to
 * RTS against the peer's, whose info then goes back in the welcome.
 */
static int accept_rdma(struct pr_tcp_xport *x, struct tpeer *p,
                       const Pr__V1__RdmaInfo *offer, Pr__V1__RdmaInfo *ri)
{
    pr_tcp_peer_drop_qp(p);
    if (!offer || !x->rdma) {
        if (x->rdma_required) {
            pr_err("peer node %u offers no RDMA and transport = rdma",
                   p->base.node_id);
            return -EPROTONOSUPPORT;
        }
        return 0;
    }
    int rc = pr_rdma_qp_create(x->rdma, p->base.node_id, &p->qp);
    if (rc == 0)
        rc = pr_rdma_qp_connect(p->qp, offer);
    if (rc < 0) {
        pr_tcp_peer_drop_qp(p);
        return x->rdma_required ? rc : 0;
    }
    pr_rdma_qp_info(p->qp, ri);
    return 0;
}

/*
 * A hello this node takes: our protocol version, from a peer node that
 * connects to us (the higher id dials the lower one), passing the
 * cluster key's check; proof (plen bytes) then answers it in the welcome.
 * -1 if not, with c failed and the reason logged.
 */
static int hello_check(struct stranger *st, const Pr__V1__Hello *h,
                       uint8_t proof[PR_AUTH_PROOF_LEN], size_t *plen)
{
    struct pr_conn *c = st->conn;
    struct pr_tcp_xport *x = st->x;
    if (pr_hello_version(c, h) < 0)
        return -1;
    if (h->role != PR__V1__ROLE__ROLE_NODE || h->node_id == x->self ||
        h->node_id < x->self) {
        pr_warn("%s: hello from role %d node %u is not a peer that connects "
                "to node %u: closing",
                c->name, (int)h->role, h->node_id, x->self);
        pr_conn_fail(c, -EPROTO, "not a peer of this node");
        return -1;
    }
    char who[32];
    snprintf(who, sizeof(who), "node %u", h->node_id);
    if (pr_hello_auth(c, x->key, st->challenge, h, who, proof, plen) < 0)
        return -1;
    return 0;
}

/*
 * The peer a checked hello names, without a connection: added if the
 * scheduler's peer list has not reached us yet (NULL on ENOMEM), its old
 * connection closed if it had one.
 */
static struct tpeer *hello_peer(struct pr_tcp_xport *x, uint32_t node_id)
{
    struct tpeer *p = pr_tcp_peer_find(x, node_id);
    if (!p) {
        p = pr_tcp_peer_add(x, node_id, "");
        if (!p)
            return NULL;
        p->listed = 1;
    }
    if (p->conn) {
        pr_info("peer node %u: new connection replaces the old one",
                p->base.node_id);
        struct pr_conn *old = p->conn;
        p->conn = NULL;
        /*
         * Detached: its close callback may run after p is gone (the peer
         * dropped from the list in this loop turn); link_down does what
         * that callback would.
         */
        pr_conn_detach_close(old);
        link_down(p, -ECONNRESET);
    }
    return p;
}

/*
 * The welcome on c: our id, the proof, our queue pair, the streams and
 * the express connection.
 */
static int welcome_send(struct pr_tcp_xport *x, struct pr_conn *c,
                        const uint8_t *proof, size_t plen, Pr__V1__RdmaInfo *ri,
                        uint32_t streams, int express)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = x->self;
    w.auth.data = (uint8_t *)proof;
    w.auth.len = plen;
    w.rdma = ri;
    w.streams = streams;
    w.express = express;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    return pr_conn_send(c, &m);
}

/*
 * The stranger's connection becomes p's link, of `streams` connections
 * and an express one if `express` (the others join later: streams_join);
 * st is freed.
 */
static void become_peer(struct stranger *st, struct tpeer *p, uint32_t streams,
                        int express, uint64_t link_id)
{
    struct pr_conn *c = st->conn;
    struct pr_tcp_xport *x = st->x;
    pr_stranger_remove(&st->base);
    free(st);
    c->ops = &peer_ops;
    c->owner = p;
    snprintf(c->name, sizeof(c->name), "peer node %u", p->base.node_id);
    p->conn = c;
    /*
     * A peer's frames may be chunk-sized now; before up(), which sends the
     * chunks queued for this peer over c with this limit.
     */
    c->rd.max_len = x->max_frame;
    p->nstreams = streams + express;
    p->express = express;
    p->link_id = link_id;
    /* With RDMA, writes wait until the peer's queue pair is ready. */
    if (p->qp) {
        p->state = P_RDMA_WAIT;
        p->since_ms = uv_now(x->loop);
    } else if (p->nstreams > 1) {
        /* Its own deadline: since_ms times the queued sends' wait. */
        p->state = P_STREAMS;
        p->streams_ms = uv_now(x->loop);
    } else {
        pr_tcp_peer_up(p);
    }
}

/*
 * An incoming connection before its hello: its owner is a struct stranger.
 * A hello that passes makes it the named peer's link, after the welcome.
 */
int pr_tcp_handshake_accept(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct stranger *st = c->owner;
    if (m->body_case != PR__V1__MSG__BODY_HELLO) {
        pr_warn("%s: %s message before hello: closing", c->name,
                pr_msg_name(m));
        return -EPROTO;
    }
    const Pr__V1__Hello *h = m->hello;
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen;
    if (hello_check(st, h, proof, &plen) < 0)
        return 0;
    if (h->stream > 0) {
        int rc = streams_join(st->x, c, h, st->challenge, proof, plen);
        if (rc == 0) {
            pr_stranger_remove(&st->base);
            free(st);
        }
        return c->closing ? 0 : rc;
    }
    struct tpeer *p = hello_peer(st->x, h->node_id);
    if (!p)
        return -ENOMEM;
    Pr__V1__RdmaInfo ri;
    int rc = accept_rdma(st->x, p, h->rdma, &ri);
    if (rc < 0) {
        pr_conn_fail(c, rc,
                     rc == -EPROTONOSUPPORT ? "this node requires RDMA"
                                            : "RDMA setup failed");
        return 0;
    }
    /* The smaller count of the two nodes'; data over RDMA needs one. */
    uint32_t streams = h->streams ? h->streams : 1;
    if (streams > st->x->streams)
        streams = st->x->streams;
    if (p->qp)
        streams = 1;
    /* Both ends want it, and the data is on TCP. */
    int express = h->express && st->x->express_bytes > 0 && !p->qp;
    rc = welcome_send(st->x, c, proof, plen, p->qp ? &ri : NULL, streams,
                      express);
    /* A failed seal closed c (logged): nothing more to do, and no error. */
    if (rc == 0)
        (void)pr_hello_seal(c, st->x->key, st->challenge, h);
    if (rc < 0 || c->closing) {
        pr_tcp_peer_drop_qp(p);
        return rc;
    }
    become_peer(st, p, streams, express, h->link_id);
    return 0;
}

/* A stream is in: the link is up when the last one is. */
static void stream_up(struct tstream *s, struct pr_conn *c)
{
    struct tpeer *p = s->p;
    c->ops = &peer_ops;
    c->owner = p;
    if (p->express && s->index == p->nstreams - 1)
        snprintf(c->name, sizeof(c->name), "peer node %u express",
                 p->base.node_id);
    else
        snprintf(c->name, sizeof(c->name), "peer node %u stream %u",
                 p->base.node_id, s->index);
    s->up = 1;
    if (++p->streams_up == p->nstreams - 1)
        pr_tcp_peer_up(p);
}

/* The dialling side's hello on stream s, answering the peer's challenge. */
static int dial_hello(struct tstream *s, const Pr__V1__Challenge *ch)
{
    struct tpeer *p = s->p;
    int rc =
        hello_send(p, s->conn, ch, s->our_nonce, s->peer_challenge, &s->cipher,
                   p->nstreams - p->express, p->express, s->index, NULL);
    if (rc == 0)
        s->hello_sent = 1;
    return rc;
}

static int dial_welcome(struct tstream *s, struct pr_conn *c,
                        const Pr__V1__Welcome *w)
{
    struct tpeer *p = s->p;
    int rc = welcome_check(p, c, w, s->our_nonce, s->peer_challenge, s->cipher,
                           s->index);
    if (rc < 0)
        return rc;
    if (w->streams != p->nstreams - p->express || w->express != p->express ||
        w->rdma) {
        pr_warn("peer node %u stream %u: welcome for %u streams%s%s, "
                "expected %u%s: closing",
                p->base.node_id, s->index, w->streams,
                w->express ? " and an express one" : "",
                w->rdma ? " with RDMA" : "", p->nstreams - p->express,
                p->express ? " and an express one" : "");
        return -EPROTO;
    }
    stream_up(s, c);
    return 0;
}

static int dial_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct tstream *s = c->owner;
    if (!s->hello_sent && m->body_case == PR__V1__MSG__BODY_CHALLENGE)
        return dial_hello(s, m->challenge);
    if (s->hello_sent && m->body_case == PR__V1__MSG__BODY_WELCOME)
        return dial_welcome(s, c, m->welcome);
    if (m->body_case == PR__V1__MSG__BODY_ERROR) {
        pr_warn("peer node %u stream %u: error %d: %s", s->p->base.node_id,
                s->index, m->error->code,
                m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    }
    pr_warn("peer node %u stream %u: unexpected %s message: closing",
            s->p->base.node_id, s->index, pr_msg_name(m));
    return -EPROTO;
}

/* A stream that fails to come in takes the link with it: it redials. */
static void dial_on_close(struct pr_conn *c, int status)
{
    struct tstream *s = c->owner;
    if (s->conn != c)
        return;
    s->conn = NULL;
    pr_warn("peer node %u (%s): stream %u did not come up: %s",
            s->p->base.node_id, s->p->addr, s->index,
            status ? strerror(-status) : "closed");
    peer_lost(s->p, status ? status : -ECONNRESET);
}

static const struct pr_conn_ops dial_ops = {
    .on_msg = dial_on_msg,
    .on_data = NULL,
    .on_close = dial_on_close,
};

static void dial_connect_cb(struct pr_conn *c, int status)
{
    struct tstream *s = c->owner;
    if (s->conn != c)
        return;
    if (status < 0)
        pr_conn_close(c, status);
    /* Else the peer speaks first: its challenge. */
}

/* Dials connections 1..nstreams-1 after the first's welcome: 0 or < 0. */
static int streams_dial(struct tpeer *p)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(p->addr, host, sizeof(host), &port) < 0)
        return -EINVAL;
    for (uint32_t i = 0; i + 1 < p->nstreams; i++) {
        struct tstream *s = &p->more[i];
        s->p = p;
        s->index = i + 1;
        s->hello_sent = 0;
        s->up = 0;
        struct pr_conn *c =
            pr_conn_create_tcp(p->x->loop, p->x->max_frame, &dial_ops, s);
        if (!c)
            return -ENOMEM;
        s->conn = c;
        const struct pr_auth_key *key = p->x->key;
        int rc = key && key->seal ? pr_conn_transcript_start(c) : 0;
        if (rc == 0)
            rc = pr_conn_connect(c, host, port, dial_connect_cb);
        if (rc < 0) {
            s->conn = NULL;
            pr_conn_detach_close(c);
            return rc;
        }
    }
    return 0;
}

/*
 * Accepting side: a checked hello naming stream > 0 joins its link (the
 * welcome goes out on c, whose owner becomes p): 0, or < 0 when no link
 * of that peer waits for it (c is then failed, the link left as it is).
 */
static int streams_join(struct pr_tcp_xport *x, struct pr_conn *c,
                        const Pr__V1__Hello *h, const uint8_t *challenge,
                        const uint8_t *proof, size_t plen)
{
    struct tpeer *p = pr_tcp_peer_find(x, h->node_id);
    /*
     * Only the link whose first connection named this id and count, and
     * only once per index: anything else is a stale or stray connection
     * (a link that was replaced meanwhile), refused without touching
     * the link.
     */
    if (!p || p->state != P_STREAMS || p->outgoing ||
        h->link_id != p->link_id || h->streams != p->nstreams - p->express ||
        h->express != p->express || h->stream >= p->nstreams ||
        p->more[h->stream - 1].conn) {
        pr_warn("%s: stream %u of node %u's link %016llx joins no link "
                "waiting for it: closing",
                c->name, h->stream, h->node_id, (unsigned long long)h->link_id);
        pr_conn_fail(c, -EPROTO, "no link waiting for this stream");
        return -EPROTO;
    }
    int rc = welcome_send(x, c, proof, plen, NULL, p->nstreams - p->express,
                          p->express);
    if (rc == 0)
        rc = pr_hello_seal(c, x->key, challenge, h);
    if (rc < 0)
        return rc;
    struct tstream *s = &p->more[h->stream - 1];
    s->p = p;
    s->index = h->stream;
    s->conn = c;
    c->rd.max_len = x->max_frame;
    stream_up(s, c);
    return 0;
}
