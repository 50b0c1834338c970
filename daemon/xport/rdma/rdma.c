/* SPDX-License-Identifier: MIT */
#include "daemon/xport/rdma/rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/base/log.h"
#include "daemon/xport/rdma/rdma_int.h"

static void on_cq(uv_poll_t *h, int status, int events);

/* Unwinds the device objects that exist, in reverse order of creation. */
static void device_free(struct pr_rdma *r)
{
    if (r->cq)
        ibv_destroy_cq(r->cq);
    if (r->ch)
        ibv_destroy_comp_channel(r->ch);
    if (r->pd)
        ibv_dealloc_pd(r->pd);
    if (r->ctx)
        ibv_close_device(r->ctx);
    free(r);
}

/* errno after a verbs call that returned NULL or -1, never 0. */
static int sys_errno(void)
{
    return errno ? errno : EIO;
}

/* Logs the failed verbs call and returns -rc (rc a positive errno). */
static int failed(const struct pr_rdma *r, const char *what, int rc)
{
    pr_err("rdma: %s on %s: %s", what, r->name, strerror(rc));
    return -rc;
}

/* The device named name, or the first one if name is NULL or empty. */
static struct ibv_device *find_device(struct ibv_device **list, int n,
                                      const char *name)
{
    for (int i = 0; i < n; i++)
        if (!name || !name[0] ||
            strcmp(ibv_get_device_name(list[i]), name) == 0)
            return list[i];
    return NULL;
}

/* A transport with its settings and no verbs object yet. */
static struct pr_rdma *rdma_new(uv_loop_t *loop,
                                const struct pr_rdma_conf *conf,
                                const struct pr_rdma_ops *ops, void *octx,
                                const char *name)
{
    struct pr_rdma *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->loop = loop;
    r->ops = ops;
    r->octx = octx;
    r->port = conf->port;
    r->gid_index = conf->gid_index;
    r->timeout = conf->timeout ? conf->timeout : 18;
    r->slots = conf->slots;
    r->slot_bytes = pr_round_up(PR_CHUNK_HDR_LEN + conf->slot_payload, 64);
    snprintf(r->name, sizeof(r->name), "%s", name);
    return r;
}

/* The port's LID, MTU and GID; -ENETDOWN if the port is not active. */
static int port_query(struct pr_rdma *r)
{
    struct ibv_port_attr pa;
    int rc;
    if ((rc = ibv_query_port(r->ctx, r->port, &pa)) != 0)
        return failed(r, "ibv_query_port", rc);
    if (pa.state != IBV_PORT_ACTIVE) {
        pr_warn("rdma: %s port %u is not active (state %d)", r->name, r->port,
                (int)pa.state);
        return -ENETDOWN;
    }
    r->lid = pa.lid;
    r->mtu = pa.active_mtu;
    if ((rc = ibv_query_gid(r->ctx, r->port, r->gid_index, &r->gid)) != 0)
        return failed(r, "ibv_query_gid", rc);
    return 0;
}

/*
 * The protection domain and the one completion queue, armed, with its
 * channel non-blocking (the loop reads it until EAGAIN). What exists on
 * failure is device_free()'s to undo.
 */
static int cq_setup(struct pr_rdma *r)
{
    int rc;
    if (!(r->pd = ibv_alloc_pd(r->ctx)))
        return failed(r, "ibv_alloc_pd", sys_errno());
    if (!(r->ch = ibv_create_comp_channel(r->ctx)))
        return failed(r, "ibv_create_comp_channel", sys_errno());
    if (!(r->cq = ibv_create_cq(r->ctx, CQ_DEPTH, r, r->ch, 0)))
        return failed(r, "ibv_create_cq", sys_errno());
    r->cq_cap = (uint32_t)r->cq->cqe;
    if ((rc = ibv_req_notify_cq(r->cq, 0)) != 0)
        return failed(r, "ibv_req_notify_cq", rc);
    int fl = fcntl(r->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(r->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return failed(r, "fcntl(O_NONBLOCK)", sys_errno());
    return 0;
}

int pr_rdma_open(uv_loop_t *loop, const struct pr_rdma_conf *conf,
                 const struct pr_rdma_ops *ops, void *octx,
                 struct pr_rdma **out)
{
    int n = 0, rc;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return errno == ENOSYS ? -ENODEV : -errno;
    struct ibv_device *dev = find_device(list, n, conf->device);
    struct pr_rdma *r =
        dev ? rdma_new(loop, conf, ops, octx, ibv_get_device_name(dev)) : NULL;
    if (!r) {
        ibv_free_device_list(list);
        return dev ? -ENOMEM : -ENODEV;
    }
    r->ctx = ibv_open_device(dev);
    rc = r->ctx ? 0 : failed(r, "ibv_open_device", sys_errno());
    ibv_free_device_list(list);
    if (rc < 0 || (rc = port_query(r)) < 0 || (rc = cq_setup(r)) < 0) {
        device_free(r);
        return rc;
    }
    uv_poll_init(loop, &r->poll, r->ch->fd);
    r->poll.data = r;
    uv_poll_start(&r->poll, UV_READABLE, on_cq);
    pr_info("rdma: %s port %u gid index %d, mtu %d, %u slots of %zu bytes "
            "per peer",
            r->name, r->port, r->gid_index, 128 << r->mtu, r->slots,
            r->slot_bytes);
    *out = r;
    return 0;
}

const char *pr_rdma_device(const struct pr_rdma *r)
{
    return r->name;
}

/* The last step: nothing of the device is in use any more. */
static void finish_close(struct pr_rdma *r)
{
    pr_rdma_mem_release(r);
    device_free(r);
}

/*
 * Here rather than in rdma_mem.c: the buffer that comes back last after
 * pr_rdma_close() finishes the close, and only this file frees the device.
 */
void pr_rdma_free(void *rv, void *p)
{
    struct pr_rdma *r = rv;
    pr_rdma_pool_put(r, p);
    if (r->closed && !pr_rdma_pool_in_use(r))
        finish_close(r);
}

/*
 * Buffers the engine still holds (groups whose TCP sends are being
 * cancelled) come back through pr_rdma_free(), which finishes the close.
 */
static void poll_closed(uv_handle_t *h)
{
    struct pr_rdma *r = h->data;
    r->closed = 1;
    if (!pr_rdma_pool_in_use(r))
        finish_close(r);
}

void pr_rdma_close(struct pr_rdma *r)
{
    if (!r)
        return;
    /*
     * Every queue pair to ERR, then reap the flushed completions, so each
     * posted send's callback runs (and the engine can free its groups)
     * before the memory goes. Flushes are quick; the wait is bounded.
     */
    for (struct pr_rdma_qp *q = r->qps, *next; q; q = next) {
        next = q->next; /* destroy may reap q at once */
        pr_rdma_qp_destroy(q);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (r->qps) {
        struct ibv_wc wc[POLL_BATCH];
        int n = ibv_poll_cq(r->cq, POLL_BATCH, wc);
        for (int i = 0; i < n; i++)
            pr_rdma_qp_complete(r, &wc[i]);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (n <= 0 &&
            (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) >
                1000000000L)
            break;
    }
    while (r->qps) {
        struct pr_rdma_qp *q = r->qps;
        r->qps = q->next;
        pr_warn("rdma: peer node %u: completions not flushed at close",
                q->node);
        pr_rdma_qp_drop(q);
    }
    uv_close((uv_handle_t *)&r->poll, poll_closed);
}

static void on_cq(uv_poll_t *h, int status, int events)
{
    struct pr_rdma *r = h->data;
    (void)events;
    if (status < 0)
        return;
    struct ibv_cq *cq;
    void *cctx;
    unsigned nev = 0;
    while (ibv_get_cq_event(r->ch, &cq, &cctx) == 0)
        nev++;
    if (nev) {
        ibv_ack_cq_events(r->cq, nev);
        r->st.cq_events += nev;
    }
    /* Re-arm first, then poll dry: nothing slips between the two. */
    ibv_req_notify_cq(r->cq, 0);
    struct ibv_wc wc[POLL_BATCH];
    int n;
    while ((n = ibv_poll_cq(r->cq, POLL_BATCH, wc)) > 0)
        for (int i = 0; i < n; i++)
            pr_rdma_qp_complete(r, &wc[i]);
    /* Credits no data write took along, if they are many (rdma_flow.h). */
    for (struct pr_rdma_qp *q = r->qps; q; q = q->next)
        pr_rdma_qp_send_credits(q);
}

void pr_rdma_stats(const struct pr_rdma *r, struct pr_rdma_stats *st)
{
    *st = r->st;
}

void pr_rdma_stats_add(struct pr_rdma_stats *sum, const struct pr_rdma_stats *x)
{
    sum->bytes_sent += x->bytes_sent;
    sum->bytes_recv += x->bytes_recv;
    sum->writes += x->writes;
    sum->credit_msgs += x->credit_msgs;
    sum->cq_events += x->cq_events;
}
