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
 * That set-up is the handshake's (xport_handshake.c); this file keeps
 * the streams of a link that is set up: which connection is which, which
 * takes the next chunk, and closing them. It calls no other file of the
 * transport (xport_tcp_int.h has the graph).
 *
 * Chunks need no order across streams: a chunk's header says where its
 * floats go, and the engine claims each step's floats as spans
 * (engine_chunk.c), in whatever order they arrive.
 *
 * A link may have one connection more, its express one
 * (transport.express_kb): the chunks of small reduces go there and no
 * others. Jobs share the links between two daemons, and the link
 * queue's turns (xport_fair.c) bound only what waits in this daemon:
 * a large reduce's bytes already in the sockets, megabytes in the
 * receiving one's queue where the receiving daemon is the bottleneck,
 * would still come before a small reduce's chunk on one connection (make
 * bench-jobs: a 1 KiB reduce's p99 30-130 times its own next to a 256
 * MiB one). The express connection's queues hold only small reduces'
 * chunks, which pass the large one's. It is set up as the other
 * streams, the last of them, and is no rate sample: its frames are too
 * small to time.
 */
#include <linux/sockios.h>
#include <stdint.h>
#include <sys/ioctl.h>

#include "daemon/engine/wire.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

struct tstream *pr_tcp_streams_of(struct tpeer *p, const struct pr_conn *c)
{
    for (uint32_t i = 0; i + 1 < p->nstreams; i++)
        if (p->more[i].conn == c)
            return &p->more[i];
    return NULL;
}

void pr_tcp_streams_drop(struct tpeer *p)
{
    for (uint32_t i = 0; i < PR_TCP_STREAMS_MAX; i++) {
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
    p->express = 0;
    p->streams_up = 0;
    p->tx_last = 0;
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

int pr_tcp_streams_express(const struct tpeer *p, const struct pr_chunk_hdr *h)
{
    /* The whole reduce's bytes in its encoding, not this chunk's. */
    return p->express && h->enc < PR_WIRE_COUNT &&
           pr_wire_bytes((enum pr_wire)h->enc, h->total) <= p->x->express_bytes;
}

struct pr_conn *pr_tcp_streams_pick(struct tpeer *p,
                                    const struct pr_chunk_hdr *h)
{
    if (pr_tcp_streams_express(p, h)) {
        struct pr_conn *c = stream_conn(p, p->nstreams - 1);
        if (c && !c->closing)
            return c;
    }
    /* The express connection, if any, is not among these. */
    uint32_t n = p->nstreams - p->express;
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
    for (uint32_t i = 0; i < p->nstreams - p->express; i++) {
        const struct pr_conn *c = stream_conn(p, i);
        if (c && c != self &&
            (c->land.active || pr_frame_reader_pending(&c->rd) > 0))
            busy++;
    }
    return busy;
}
