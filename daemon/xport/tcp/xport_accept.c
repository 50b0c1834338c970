/* SPDX-License-Identifier: MIT */
/*
 * The accepting side of peer links: a connection is a stranger until its
 * hello names a peer that connects to this node and passes the cluster
 * key's check; then it becomes that peer's link (with a queue pair when
 * the hello offers RDMA). Strangers are bounded (stranger.h: STRANGERS_MAX,
 * STRANGERS_PER_SOURCE per IP address); the sweep enforces their hello
 * deadline and the other deadlines of link setup. The hello itself, and
 * what follows it, is the handshake's (xport_handshake.c); this file
 * calls it and xport_link.c (xport_tcp_int.h has the graph).
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
 * Bounds per listener and per source address, with room for the extra
 * streams of every peer the scheduler listed: each opens streams - 1
 * connections more at once, and its express one (the one this node
 * grants if it has transport.express_kb), strangers until their hello
 * passes (several
 * nodes may share an address: one machine's namespaces, or loopback).
 * Not the bounds times the streams: a flood from a few addresses would
 * then hold a thousand descriptors.
 */
static struct pr_stranger_rules stranger_rules(const struct pr_tcp_xport *x)
{
    unsigned peers = 0;
    for (const struct tpeer *p = x->peers; p; p = p->next)
        peers += p->listed;
    unsigned extra = peers * (x->streams - 1 + (x->express_bytes > 0));
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

static void stranger_on_close(struct pr_conn *c, int status)
{
    struct stranger *st = c->owner;
    (void)status;
    pr_stranger_remove(&st->base);
    free(st);
}

static const struct pr_conn_ops stranger_ops = {
    .on_msg = pr_tcp_handshake_accept,
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
    if (pr_hello_transcript(c, x->key) < 0)
        return;
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
