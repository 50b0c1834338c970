/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of peer links: a connection is a stranger until its
 * hello names a peer that connects to this node and passes the cluster
 * key's check; then it becomes that peer's link (with a queue pair when
 * the hello offers RDMA). Strangers are bounded (stranger.h: STRANGERS_MAX,
 * STRANGERS_PER_SOURCE per IP address); the sweep enforces their hello
 * deadline and the other deadlines of link setup.
 */
#include "daemon/xport/tcp/xport_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

static const struct pr_conn_ops stranger_ops;

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
 * Bounds per listener and per source address, with room for the extra
 * streams of every peer the scheduler listed: each opens streams - 1
 * connections more at once, strangers until their hello passes (several
 * nodes may share an address: one machine's namespaces, or loopback).
 * Not the bounds times the streams: a flood from a few addresses would
 * then hold a thousand descriptors.
 */
static struct pr_stranger_rules stranger_rules(const struct pr_tcp_xport *x)
{
    unsigned peers = 0;
    for (const struct tpeer *p = x->peers; p; p = p->next)
        peers += p->listed;
    unsigned extra = peers * (x->streams - 1);
    if (extra > STRANGERS_EXTRA_MAX)
        extra = STRANGERS_EXTRA_MAX;
    return (struct pr_stranger_rules){
        .what = "peer listener",
        .awaits = "hello",
        .max = STRANGERS_MAX + extra,
        .per_source_max = STRANGERS_PER_SOURCE + extra,
    };
}

/* base is the first member: a listed pr_stranger is a struct stranger. */
static void stranger_close(struct pr_stranger *base, int status)
{
    struct stranger *st = (struct stranger *)base;
    pr_conn_close(st->conn, status);
}

/*
 * Deadlines no single callback enforces: a hello that never comes, a
 * queued send whose link never comes up, an RDMA handshake that
 * stalls.
 */
static void sweep_cb(uv_timer_t *t)
{
    struct pr_tcp_xport *x = t->data;
    uint64_t now = uv_now(x->loop);
    struct pr_stranger_rules rules = stranger_rules(x);
    pr_strangers_sweep(&x->strangers, &rules, x->connect_timeout_ms, now);
    for (struct tpeer *p = x->peers; p; p = p->next) {
        if (p->state == P_STREAMS && p->conn &&
            now - p->streams_ms >= x->connect_timeout_ms) {
            pr_warn("peer node %u: %u of %u streams joined within %u ms: "
                    "closing",
                    p->base.node_id, p->streams_up + 1, p->nstreams,
                    x->connect_timeout_ms);
            pr_conn_close(p->conn, -ETIMEDOUT);
        }
        if (p->state == P_UP || now - p->since_ms < x->connect_timeout_ms)
            continue;
        if (p->q) {
            pr_warn("peer node %u: link not up within %u ms: "
                    "failing its "
                    "queued sends",
                    p->base.node_id, x->connect_timeout_ms);
            pr_tcp_peer_fail_pending(p, -ETIMEDOUT);
        }
        if (p->state == P_RDMA_WAIT && p->conn) {
            pr_warn("peer node %u: no rdma_ready within %u ms: closing",
                    p->base.node_id, x->connect_timeout_ms);
            pr_conn_close(p->conn, -ETIMEDOUT);
        }
    }
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
        pr_tcp_peer_link_down(p, -ECONNRESET);
    }
    return p;
}

int pr_tcp_send_welcome(struct pr_tcp_xport *x, struct pr_conn *c,
                        const uint8_t *proof, size_t plen, Pr__V1__RdmaInfo *ri,
                        uint32_t streams)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = x->self;
    w.auth.data = (uint8_t *)proof;
    w.auth.len = plen;
    w.rdma = ri;
    w.streams = streams;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    return pr_conn_send(c, &m);
}

/*
 * The stranger's connection becomes p's link, of `streams` connections
 * (the others join later: pr_tcp_streams_join); st is freed.
 */
static void become_peer(struct stranger *st, struct tpeer *p, uint32_t streams,
                        uint64_t link_id)
{
    struct pr_conn *c = st->conn;
    struct pr_tcp_xport *x = st->x;
    pr_stranger_remove(&st->base);
    free(st);
    c->ops = &pr_tcp_peer_ops;
    c->owner = p;
    snprintf(c->name, sizeof(c->name), "peer node %u", p->base.node_id);
    p->conn = c;
    /*
     * A peer's frames may be chunk-sized now; before up(), which sends the
     * chunks queued for this peer over c with this limit.
     */
    c->rd.max_len = x->max_frame;
    p->nstreams = streams;
    p->link_id = link_id;
    /* With RDMA, writes wait until the peer's queue pair is ready. */
    if (p->qp) {
        p->state = P_RDMA_WAIT;
        p->since_ms = uv_now(x->loop);
    } else if (streams > 1) {
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
static int stranger_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
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
        int rc = pr_tcp_streams_join(st->x, c, h, proof, plen);
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
    rc =
        pr_tcp_send_welcome(st->x, c, proof, plen, p->qp ? &ri : NULL, streams);
    if (rc < 0) {
        pr_tcp_peer_drop_qp(p);
        return rc;
    }
    become_peer(st, p, streams, h->link_id);
    return 0;
}

static void stranger_on_close(struct pr_conn *c, int status)
{
    struct stranger *st = c->owner;
    (void)status;
    pr_stranger_remove(&st->base);
    free(st);
}

static const struct pr_conn_ops stranger_ops = {
    .on_msg = stranger_on_msg,
    .on_data = NULL,
    .on_close = stranger_on_close,
};

static void on_connection(uv_stream_t *server, int status)
{
    struct pr_tcp_xport *x = server->data;
    if (status < 0) {
        pr_warn("peer listener: %s", uv_strerror(status));
        return;
    }
    struct stranger *st = calloc(1, sizeof(*st));
    /* Until its hello says who it is, a connection gets small frames. */
    struct pr_conn *c =
        st ? pr_conn_create_tcp(x->loop, PR_HELLO_MAX_FRAME, &stranger_ops, st)
           : NULL;
    if (!c) {
        free(st);
        return;
    }
    st->x = x;
    st->conn = c;
    if (uv_accept(server, &c->h.stream) < 0) {
        pr_conn_close(c, -ECONNABORTED);
        return;
    }
    pr_source_tcp(&c->h.tcp, st->base.source, sizeof(st->base.source));
    snprintf(c->name, sizeof(c->name), "peer link from %s", st->base.source);
    st->base.name = c->name;
    st->base.close = stranger_close;
    struct pr_stranger_rules rules = stranger_rules(x);
    if (pr_strangers_admit(&x->strangers, &rules, &st->base, uv_now(x->loop)) <
        0) {
        pr_conn_close(c, -EBUSY);
        return;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    if (pr_conn_start(c) < 0) {
        pr_conn_close(c, -EIO);
        return;
    }
    Pr__V1__Challenge ch;
    pr_auth_challenge(x->key, st->challenge, &ch);
    Pr__V1__Msg m = PR_MSG_OF(CHALLENGE, challenge, &ch);
    if (pr_conn_send(c, &m) < 0)
        pr_conn_close(c, -EIO);
}

int pr_tcp_xport_listen(struct pr_tcp_xport *x, const char *host, uint16_t port,
                        uint16_t *bound)
{
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return -EINVAL;
    int rc = uv_tcp_bind(&x->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&x->listener, 64, on_connection);
    if (rc < 0)
        return rc;
    x->listening = 1;
    uv_timer_start(&x->sweep, sweep_cb, PEER_SWEEP_MS, PEER_SWEEP_MS);
    int len = sizeof(ss);
    uv_tcp_getsockname(&x->listener, (struct sockaddr *)&ss, &len);
    if (bound)
        *bound = ntohs(ss.ss_family == AF_INET
                           ? ((struct sockaddr_in *)&ss)->sin_port
                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}
