/* SPDX-License-Identifier: MIT */
/*
 * A peer link over several TCP connections (transport.streams). One
 * stream's throughput is bounded by its window over the path's round
 * trip; where that is below the link's rate (a long path, a small
 * receive buffer, a relay), one connection leaves the link partly idle
 * and several fill it, as iperf3 -P or GridFTP's parallel streams do.
 *
 * The first connection is set up as always, its hello saying how many
 * the dialling node wants and the link's random id; the welcome answers
 * how many the link gets (the smaller of the two nodes' values, 1 over
 * RDMA). The dialling node then opens the others, each with its own
 * challenge, hello and welcome (so each proves the cluster key), naming
 * its index and the link id; the accepting node attaches them to the
 * peer whose first connection waits for them. The link is up when all
 * are in, and down when any closes: chunks may be on any of them, and
 * a stream lost silently would lose them.
 *
 * Chunks need no order across streams: a chunk's header says where its
 * floats go, and the engine claims each step's floats as spans
 * (engine_chunk.c), in whatever order they arrive.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

static const struct pr_conn_ops dial_ops;

struct tstream *pr_tcp_streams_of(struct tpeer *p, const struct pr_conn *c)
{
    for (uint32_t i = 0; i + 1 < p->nstreams; i++)
        if (p->more[i].conn == c)
            return &p->more[i];
    return NULL;
}

void pr_tcp_streams_drop(struct tpeer *p)
{
    for (uint32_t i = 0; i < PR_TCP_STREAMS_MAX - 1; i++) {
        struct tstream *s = &p->more[i];
        if (s->conn) {
            struct pr_conn *c = s->conn;
            s->conn = NULL;
            pr_conn_detach_close(c);
        }
        s->up = 0;
        s->hello_sent = 0;
    }
    p->nstreams = 1;
    p->streams_up = 0;
    p->tx_last = 0;
}

/* A stream is in: the link is up when the last one is. */
static void stream_up(struct tstream *s, struct pr_conn *c)
{
    struct tpeer *p = s->p;
    c->ops = &pr_tcp_peer_ops;
    c->owner = p;
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
    int rc = pr_tcp_send_hello(p, s->conn, ch, s->our_nonce, s->peer_challenge,
                               p->nstreams, s->index, NULL);
    if (rc == 0)
        s->hello_sent = 1;
    return rc;
}

static int dial_welcome(struct tstream *s, struct pr_conn *c,
                        const Pr__V1__Welcome *w)
{
    struct tpeer *p = s->p;
    int rc =
        pr_tcp_check_welcome(p, w, s->our_nonce, s->peer_challenge, s->index);
    if (rc < 0)
        return rc;
    if (w->streams != p->nstreams || w->rdma) {
        pr_warn("peer node %u stream %u: welcome for %u streams%s, expected "
                "%u: closing",
                p->base.node_id, s->index, w->streams,
                w->rdma ? " with RDMA" : "", p->nstreams);
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
    pr_tcp_peer_lost(s->p, status ? status : -ECONNRESET);
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

int pr_tcp_streams_dial(struct tpeer *p)
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
        int rc = pr_conn_connect(c, host, port, dial_connect_cb);
        if (rc < 0) {
            s->conn = NULL;
            pr_conn_detach_close(c);
            return rc;
        }
    }
    return 0;
}

int pr_tcp_streams_join(struct pr_tcp_xport *x, struct pr_conn *c,
                        const Pr__V1__Hello *h, const uint8_t *proof,
                        size_t plen)
{
    struct tpeer *p = pr_tcp_peer_find(x, h->node_id);
    /*
     * Only the link whose first connection named this id and count, and
     * only once per index: anything else is a stale or stray connection
     * (a link that was replaced meanwhile), refused without touching
     * the link.
     */
    if (!p || p->state != P_STREAMS || p->outgoing ||
        h->link_id != p->link_id || h->streams != p->nstreams ||
        h->stream >= p->nstreams || p->more[h->stream - 1].conn) {
        pr_warn("%s: stream %u of node %u's link %016llx joins no link "
                "waiting for it: closing",
                c->name, h->stream, h->node_id, (unsigned long long)h->link_id);
        pr_conn_fail(c, -EPROTO, "no link waiting for this stream");
        return -EPROTO;
    }
    int rc = pr_tcp_send_welcome(x, c, proof, plen, NULL, p->nstreams);
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

static struct pr_conn *stream_conn(struct tpeer *p, uint32_t i)
{
    if (i == 0)
        return p->conn;
    return p->more[i - 1].up ? p->more[i - 1].conn : NULL;
}

/*
 * Bytes written to c and not yet acknowledged by the peer: libuv's queue
 * and the kernel's send queue (SIOCOUTQ), which a stream whose window is
 * full, or which recovers a loss, keeps long.
 */
static size_t unacked(struct pr_conn *c)
{
    size_t q = pr_conn_write_queue(c);
    uv_os_fd_t fd;
    int outq = 0;
    if (uv_fileno(&c->h.handle, &fd) == 0 && ioctl(fd, SIOCOUTQ, &outq) == 0 &&
        outq > 0)
        q += (size_t)outq;
    return q;
}

/*
 * A stream keeps taking chunks while it has less than this more in
 * flight than the least busy one: runs of consecutive chunks, not one
 * each in turn (see pr_tcp_streams_pick).
 */
#define STREAM_RUN_BYTES (256u << 10)

struct pr_conn *pr_tcp_streams_pick(struct tpeer *p)
{
    uint32_t n = p->nstreams;
    if (n <= 1)
        return p->conn;
    /*
     * The one with the least in flight, or the last one used while it has
     * less than STREAM_RUN_BYTES more than that. What a stream has in
     * flight when it lags (a full window, a loss to recover) are gaps in
     * what the peer has of a ring step, each a span it keeps
     * (engine_chunk.c): in runs, a lagging stream leaves a gap per run
     * rather than per chunk (with 4 KiB chunks, 1 in 64), and it gets
     * no more until it has caught up. Runs of a quarter megabyte still
     * spread a large all-reduce over all streams.
     */
    struct pr_conn *last = stream_conn(p, p->tx_last);
    size_t last_q = last && !last->closing ? unacked(last) : SIZE_MAX;
    /* Under a run's worth in flight: it stays, whatever the others have. */
    if (last_q < STREAM_RUN_BYTES)
        return last;
    last = NULL;
    struct pr_conn *best = NULL;
    size_t best_q = 0;
    uint32_t best_i = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct pr_conn *c = stream_conn(p, i);
        if (!c || c->closing)
            continue;
        size_t q = i == p->tx_last ? last_q : unacked(c);
        if (i == p->tx_last)
            last = c;
        /* Ties go to the stream after the last one: round robin. */
        uint32_t rank = (i + n - p->tx_last - 1) % n;
        uint32_t best_rank = (best_i + n - p->tx_last - 1) % n;
        if (!best || q < best_q || (q == best_q && rank < best_rank)) {
            best = c;
            best_q = q;
            best_i = i;
        }
    }
    if (last && last_q < best_q + STREAM_RUN_BYTES)
        return last;
    p->tx_last = best_i;
    return best;
}

uint32_t pr_tcp_streams_busy(struct tpeer *p, const struct pr_conn *self)
{
    uint32_t busy = 1;
    for (uint32_t i = 0; i < p->nstreams; i++) {
        const struct pr_conn *c = stream_conn(p, i);
        if (c && c != self &&
            (c->land.active || pr_frame_reader_pending(&c->rd) > 0))
            busy++;
    }
    return busy;
}
