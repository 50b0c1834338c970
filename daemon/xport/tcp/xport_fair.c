/* SPDX-License-Identifier: MIT */
/*
 * The chunks of a link that is up, taken from its groups in turn. Jobs
 * share the links between two daemons; a group posts every chunk of its
 * own segment at once (engine.c), half of a large tensor, and a
 * connection sends in the order it was given: a small reduce of another
 * job waited behind all of it (make bench-jobs: a 1 KiB reduce's p99
 * 500-1300 times its own next to a 256 MiB one).
 *
 * So a link hands libuv a chunk only while what libuv holds for it is
 * under FAIR_QUEUE_BYTES per connection, and keeps the rest in a queue
 * per group, the groups with chunks waiting in a ring served one chunk
 * each in turn (as an HTTP/2 server serves its streams). The kernel's
 * part is bounded too: TCP_NOTSENT_LOWAT keeps its not-yet-sent bytes
 * low, so that what waits waits here, where the turns are taken, and not
 * in the socket. A chunk goes straight to libuv when nothing waits and
 * there is room: one group alone is sent as before. The queue is topped
 * up after each loop turn's I/O (a check handle, active only while
 * chunks wait), when libuv has written what it held.
 *
 * The turns are a group's, not a job's: a job with several groups in
 * flight on a link (a bucketed reduce) gets that many. Over RDMA the
 * queue pair's own send queue takes the chunks (rdma_flow.c); this is
 * TCP's.
 *
 * A small reduce's chunks on a link with an express connection
 * (xport_streams.c) take no turn: they go to libuv at once, on that
 * connection, which only such chunks use: what libuv holds for it is at
 * most transport.express_kb per small reduce in flight, first come first
 * sent, and counts against no bound here.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/base/log.h"
#include "daemon/xport/tcp/xport_tcp_int.h"

/*
 * What libuv may hold for a link, per connection that carries its
 * chunks (the express one aside), before chunks wait their turn: under
 * it, one more chunk goes. Small, as the kernel's share below: both are
 * bytes a small reduce's turn comes after, and the loop writes what
 * libuv holds as long as the kernel takes it (on loopback, where the
 * write also delivers, all of it) while its other connections wait. At
 * 512 KiB a link and 256 KiB a 1 KiB reduce's p99 next to a 256 MiB
 * one was 13-19 ms; at 128 and 64 KiB 7.4-8.4 ms, with the large one's
 * rate unchanged (make bench-jobs, docs/benchmarks.md). Per connection,
 * so that several streams still take turns in runs (xport_streams.c)
 * and each has a chunk to send where its window, not the loop, is what
 * holds it. The window in flight is bounded by neither: TCP_NOTSENT_LOWAT
 * counts only bytes the kernel has not sent.
 */
#define FAIR_QUEUE_BYTES (128u << 10)
/* The kernel's not-yet-sent bytes per connection (TCP_NOTSENT_LOWAT). */
#define FAIR_NOTSENT_BYTES (64u << 10)

/* One group's chunks waiting on a link. */
struct txflow {
    struct txflow *next; /* the ring of p's flows with chunks waiting */
    uint64_t group;
    struct pending *head, **tail;
};

void pr_tcp_fair_lowat(struct pr_conn *c)
{
    uv_os_fd_t fd;
    int v = FAIR_NOTSENT_BYTES;
    if (uv_fileno(&c->h.handle, &fd) == 0 &&
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)) < 0)
        pr_dbg("%s: TCP_NOTSENT_LOWAT: %s", c->name, strerror(errno));
}

/* Bytes libuv holds for p's connections, the express one aside. */
static size_t queued(const struct tpeer *p)
{
    size_t q = p->conn ? pr_conn_write_queue(p->conn) : 0;
    for (uint32_t i = 0; i + 1 < p->nstreams - (uint32_t)p->express; i++)
        if (p->more[i].up && p->more[i].conn)
            q += pr_conn_write_queue(p->more[i].conn);
    return q;
}

/* One chunk to libuv on the connection pr_tcp_streams_pick chooses. */
static int write_chunk(struct tpeer *p, const struct pr_chunk_hdr *h,
                       const void *data, pr_send_cb cb, void *arg)
{
    struct pr_conn *c = pr_tcp_streams_pick(p, h);
    if (!c)
        return -ENOTCONN;
    uint8_t hdr[PR_CHUNK_HDR_LEN];
    pr_chunk_hdr_encode(hdr, h);
    size_t len = pr_chunk_payload_bytes(h);
    int rc = pr_conn_send_data(c, hdr, sizeof(hdr), data, len, cb, arg);
    if (rc == 0) {
        p->base.bytes_sent += len;
        p->x->bytes_sent += len;
    }
    return rc;
}

/* p's flow of `group`, added behind the others when it has none: or NULL. */
static struct txflow *flow_of(struct tpeer *p, uint64_t group)
{
    struct txflow *f = p->tx_ring;
    if (f) {
        do {
            if (f->group == group)
                return f;
            f = f->next;
        } while (f != p->tx_ring);
    }
    f = malloc(sizeof(*f));
    if (!f)
        return NULL;
    *f = (struct txflow){.group = group};
    f->tail = &f->head;
    if (!p->tx_ring) {
        f->next = f;
        p->tx_ring = f;
    } else {
        /* Behind the others: just before the one whose turn is next. */
        struct txflow *last = p->tx_ring;
        while (last->next != p->tx_ring)
            last = last->next;
        last->next = f;
        f->next = p->tx_ring;
    }
    return f;
}

/* Takes p's next flow's first chunk out of the ring: it, or NULL. */
static struct pending *take(struct tpeer *p)
{
    struct txflow *f = p->tx_ring;
    if (!f)
        return NULL;
    struct pending *s = f->head;
    f->head = s->next;
    if (f->head) {
        p->tx_ring = f->next; /* the next group's turn */
        return s;
    }
    /* f is empty: out of the ring. */
    if (f->next == f) {
        p->tx_ring = NULL;
    } else {
        struct txflow *prev = f;
        while (prev->next != f)
            prev = prev->next;
        prev->next = f->next;
        p->tx_ring = f->next;
    }
    free(f);
    return s;
}

/* What libuv may hold for p before chunks wait (FAIR_QUEUE_BYTES). */
static size_t bound(const struct tpeer *p)
{
    return (size_t)FAIR_QUEUE_BYTES * (p->nstreams - (uint32_t)p->express);
}

/* Chunks from p's flows in turn while libuv holds under the bound. */
static void top_up(struct tpeer *p)
{
    while (p->tx_ring && queued(p) < bound(p)) {
        struct pending *s = take(p);
        int rc = write_chunk(p, &s->h, s->data, s->cb, s->arg);
        if (rc < 0)
            s->cb(s->arg, rc);
        free(s);
    }
}

static void pump_cb(uv_check_t *h)
{
    struct pr_tcp_xport *x = h->data;
    for (struct tpeer *p = x->peers; p; p = p->next)
        if (p->tx_ring && p->state == P_UP)
            top_up(p);
    /*
     * Stopped only when nothing waits after the whole pass: a failed
     * chunk's callback may have posted to a peer the pass had left.
     */
    for (struct tpeer *p = x->peers; p; p = p->next)
        if (p->tx_ring)
            return;
    uv_check_stop(h);
}

int pr_tcp_fair_send(struct tpeer *p, const struct pr_chunk_hdr *h,
                     const void *data, pr_send_cb cb, void *arg)
{
    if (pr_tcp_streams_express(p, h) || (!p->tx_ring && queued(p) < bound(p)))
        return write_chunk(p, h, data, cb, arg);
    struct pending *s = malloc(sizeof(*s));
    struct txflow *f = s ? flow_of(p, h->group_id) : NULL;
    if (!f) {
        free(s);
        return -ENOMEM;
    }
    *s = (struct pending){.h = *h, .data = data, .cb = cb, .arg = arg};
    *f->tail = s;
    f->tail = &s->next;
    uv_check_start(&p->x->pump, pump_cb); /* nothing if it runs already */
    return 0;
}

void pr_tcp_fair_fail(struct tpeer *p, int status)
{
    struct pending *s;
    while ((s = take(p)) != NULL) {
        s->cb(s->arg, status);
        free(s);
    }
}
