#include "daemon/rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "daemon/log.h"
#include "daemon/rdma_flow.h"

#define CQ_DEPTH   4096
#define POLL_BATCH 32
/*
 * Work request ids: a data write's is its send context; these two are
 * never an address. Error completions carry only wr_id, status and qp_num
 * valid (ibv_poll_cq(3)), so the id alone says what completed.
 */
#define WRID_CREDIT 0 /* a credit message (a send) */
#define WRID_RECV   1 /* a posted receive */

#define POOL_KEEP 8 /* registered buffers kept for reuse */
/*
 * Pool buffers start this far into their mapping, a different distance
 * each (1 to 15 steps): a scratch vector mapped next to a trainer's tensor
 * of the same size would otherwise sit at the same address modulo every
 * power of two up to that size, and the reduce and write-back passes,
 * which walk both in step, would contend for the same cache sets (and in
 * QEMU's direct-mapped software TLB, for the same entries: measured in the
 * Soft-RoCE guest, a 16 MiB copy 2x and the 3-stream reduce 2.4x slower).
 */
#define COLOUR_STEP 4160 /* a page and a cache line */
#define COLOUR_MAX  (15 * COLOUR_STEP)

/* A registered buffer of the pool. */
struct pbuf {
    struct pbuf *next;
    uint8_t *p; /* what pr_rdma_alloc() hands out: base + colour */
    size_t cap; /* bytes usable at p */
    uint8_t *base;
    size_t maplen;
    struct ibv_mr *mr;
    int used;
};

/* Memory registered for its owner's lifetime (trainers' shared tensors). */
struct ureg {
    struct ureg *next;
    const uint8_t *p;
    size_t len;
    struct ibv_mr *mr;
};

/* One engine send, possibly cut into several writes. */
struct sctx {
    pr_send_cb cb;
    void *arg;
    uint32_t left;   /* writes not yet completed */
    uint32_t posted; /* of those, the ones on the send queue */
    int status;
    /* On its queue pair's list while posted > 0 (see qp_abandon). */
    struct sctx *inext, **iprev;
};

/* A write waiting for a credit. */
struct pending {
    struct pending *next;
    struct sctx *s;
    struct pr_chunk_hdr h;
    const float *data;
};

struct pr_rdma_qp {
    struct pr_link link; /* first: the engine's view */
    struct pr_rdma *r;
    struct pr_rdma_qp *next;
    uint32_t node;
    struct ibv_qp *qp;
    uint32_t psn;
    uint8_t *slots; /* our receive slots */
    struct ibv_mr *slots_mr;
    uint8_t *hdrs; /* headers of our writes, one per peer slot */
    struct ibv_mr *hdrs_mr;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t rslot_bytes;
    int piggyback; /* the peer reads credits in data immediates */
    struct pr_credit cr;
    struct pending *q, **qtail;
    struct sctx *inflight;      /* sends with writes on the send queue */
    uint32_t sq_depth, sq_used; /* send work requests outstanding */
    uint32_t rq_posted;
    int started;
    int dying;
    uint8_t gid[16];
};

struct pr_rdma {
    uv_loop_t *loop;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    uv_poll_t poll;
    uint8_t port;
    int gid_index;
    uint8_t timeout;
    union ibv_gid gid;
    uint16_t lid;
    enum ibv_mtu mtu;
    uint32_t slots;
    size_t slot_bytes;
    struct pbuf *pool;
    unsigned pool_seq; /* buffers made so far: picks each one's colour */
    struct ureg *regs;
    struct pr_rdma_qp *qps;
    const struct pr_rdma_ops *ops;
    void *octx;
    char name[64];
    struct pr_rdma_stats st;
    int closed; /* the poll handle is closed; free once the pool is idle */
    /*
     * A received chunk is with the engine: writes it posts wait until the
     * call returns, when its slot is free and they can return its credit.
     */
    int delivering;
};

static const struct pr_link_ops rdma_link_ops;
static void on_cq(uv_poll_t *h, int status, int events);

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

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

int pr_rdma_open(uv_loop_t *loop, const struct pr_rdma_conf *conf,
                 const struct pr_rdma_ops *ops, void *octx,
                 struct pr_rdma **out)
{
    int n = 0, rc = -ENODEV;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return errno == ENOSYS ? -ENODEV : -errno;
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n && !dev; i++)
        if (!conf->device || !conf->device[0] ||
            strcmp(ibv_get_device_name(list[i]), conf->device) == 0)
            dev = list[i];
    if (!dev) {
        ibv_free_device_list(list);
        return -ENODEV;
    }
    struct pr_rdma *r = calloc(1, sizeof(*r));
    if (!r) {
        ibv_free_device_list(list);
        return -ENOMEM;
    }
    r->loop = loop;
    r->ops = ops;
    r->octx = octx;
    r->port = conf->port;
    r->gid_index = conf->gid_index;
    r->timeout = conf->timeout ? conf->timeout : 18;
    r->slots = conf->slots;
    r->slot_bytes = round_up(PR_CHUNK_HDR_LEN + conf->slot_payload, 64);
    snprintf(r->name, sizeof(r->name), "%s", ibv_get_device_name(dev));
    struct ibv_port_attr pa;
    const char *what = "ibv_open_device";
    r->ctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (!r->ctx)
        goto fail;
    what = "ibv_query_port";
    if ((rc = ibv_query_port(r->ctx, r->port, &pa)) != 0)
        goto fail_rc;
    if (pa.state != IBV_PORT_ACTIVE) {
        pr_warn("rdma: %s port %u is not active (state %d)", r->name, r->port,
                (int)pa.state);
        rc = -ENETDOWN;
        goto out;
    }
    r->lid = pa.lid;
    r->mtu = pa.active_mtu;
    what = "ibv_query_gid";
    if ((rc = ibv_query_gid(r->ctx, r->port, r->gid_index, &r->gid)) != 0)
        goto fail_rc;
    what = "ibv_alloc_pd";
    if (!(r->pd = ibv_alloc_pd(r->ctx)))
        goto fail;
    what = "ibv_create_comp_channel";
    if (!(r->ch = ibv_create_comp_channel(r->ctx)))
        goto fail;
    what = "ibv_create_cq";
    if (!(r->cq = ibv_create_cq(r->ctx, CQ_DEPTH, r, r->ch, 0)))
        goto fail;
    what = "ibv_req_notify_cq";
    if ((rc = ibv_req_notify_cq(r->cq, 0)) != 0)
        goto fail_rc;
    /* The channel fd is read until EAGAIN from the loop: non-blocking. */
    int fl = fcntl(r->ch->fd, F_GETFL);
    what = "fcntl(O_NONBLOCK)";
    if (fl < 0 || fcntl(r->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        goto fail;
    uv_poll_init(loop, &r->poll, r->ch->fd);
    r->poll.data = r;
    uv_poll_start(&r->poll, UV_READABLE, on_cq);
    pr_info("rdma: %s port %u gid index %d, mtu %d, %u slots of %zu bytes "
            "per peer",
            r->name, r->port, r->gid_index, 128 << r->mtu, r->slots,
            r->slot_bytes);
    *out = r;
    return 0;
fail:
    rc = errno ? errno : EIO;
fail_rc:
    pr_err("rdma: %s on %s: %s", what, r->name, strerror(rc));
    rc = -rc;
out:
    device_free(r);
    return rc;
}

const char *pr_rdma_device(const struct pr_rdma *r)
{
    return r->name;
}

static void free_pbuf(struct pbuf *b)
{
    ibv_dereg_mr(b->mr);
    munmap(b->base, b->maplen);
    free(b);
}

/* The last step: nothing of the device is in use any more. */
static void finish_close(struct pr_rdma *r)
{
    while (r->regs) {
        struct ureg *u = r->regs;
        r->regs = u->next;
        ibv_dereg_mr(u->mr);
        free(u);
    }
    while (r->pool) {
        struct pbuf *b = r->pool;
        r->pool = b->next;
        free_pbuf(b);
    }
    device_free(r);
}

static int pool_in_use(const struct pr_rdma *r)
{
    for (const struct pbuf *b = r->pool; b; b = b->next)
        if (b->used)
            return 1;
    return 0;
}

/*
 * Buffers the engine still holds (groups whose TCP sends are being
 * cancelled) come back through pr_rdma_free(), which finishes the close.
 */
static void poll_closed(uv_handle_t *h)
{
    struct pr_rdma *r = h->data;
    r->closed = 1;
    if (!pool_in_use(r))
        finish_close(r);
}

static void qp_free(struct pr_rdma_qp *q);
static void handle(struct pr_rdma *r, const struct ibv_wc *wc);
static void sctx_unpost(struct sctx *s, uint32_t n);

/*
 * The device never flushed q's send queue: its writes are given up as
 * failed, so every sender still hears back once (the engine frees its
 * groups) although no completion will come.
 */
static void qp_abandon(struct pr_rdma_qp *q)
{
    while (q->inflight) {
        struct sctx *s = q->inflight;
        uint32_t n = s->posted;
        sctx_unpost(s, n);
        s->status = -ECONNRESET;
        s->left -= n;
        if (s->left == 0) {
            s->cb(s->arg, s->status);
            free(s);
        }
    }
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
            handle(r, &wc[i]);
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
        /* The device lets go of the requests before their memory does. */
        ibv_destroy_qp(q->qp);
        q->qp = NULL;
        qp_abandon(q);
        qp_free(q);
    }
    uv_close((uv_handle_t *)&r->poll, poll_closed);
}

/*
 * The registration cache: buffers are mmap'ed and registered once, and
 * handed out again for vectors that fit, so a group's scratch vector is
 * already registered when its chunks go to the wire.
 */
void *pr_rdma_alloc(void *rv, size_t bytes)
{
    struct pr_rdma *r = rv;
    struct pbuf *best = NULL;
    for (struct pbuf *b = r->pool; b; b = b->next)
        if (!b->used && b->cap >= bytes && (!best || b->cap < best->cap))
            best = b;
    if (best) {
        best->used = 1;
        return best->p;
    }
    struct pbuf *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = round_up(bytes ? bytes : 1, 1 << 16);
    b->maplen = b->cap + COLOUR_MAX;
    b->base = mmap(NULL, b->maplen, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->base == MAP_FAILED) {
        free(b);
        return NULL;
    }
    b->p = b->base + (1 + r->pool_seq++ % 15) * COLOUR_STEP;
    b->mr = ibv_reg_mr(r->pd, b->p, b->cap, IBV_ACCESS_LOCAL_WRITE);
    if (!b->mr) {
        pr_err("rdma: ibv_reg_mr(%zu bytes): %s", b->cap, strerror(errno));
        munmap(b->base, b->maplen);
        free(b);
        return NULL;
    }
    b->used = 1;
    b->next = r->pool;
    r->pool = b;
    return b->p;
}

void pr_rdma_free(void *rv, void *p)
{
    struct pr_rdma *r = rv;
    size_t idle = 0;
    struct pbuf **pp = &r->pool;
    while (*pp) {
        struct pbuf *b = *pp;
        if (b->p == p)
            b->used = 0;
        /* Keep a few idle buffers registered; give the rest back. */
        if (!b->used && ++idle > POOL_KEEP) {
            *pp = b->next;
            free_pbuf(b);
            continue;
        }
        pp = &b->next;
    }
    if (r->closed && !pool_in_use(r))
        finish_close(r);
}

static struct ibv_mr *mr_of(struct pr_rdma *r, const void *p, size_t n)
{
    for (struct pbuf *b = r->pool; b; b = b->next)
        if ((const uint8_t *)p >= b->p &&
            (const uint8_t *)p + n <= b->p + b->cap)
            return b->mr;
    for (struct ureg *u = r->regs; u; u = u->next)
        if ((const uint8_t *)p >= u->p &&
            (const uint8_t *)p + n <= u->p + u->len)
            return u->mr;
    return NULL;
}

int pr_rdma_reg(struct pr_rdma *r, void *p, size_t len)
{
    struct ureg *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->mr = ibv_reg_mr(r->pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    if (!u->mr) {
        int rc = errno ? -errno : -EIO;
        pr_err("rdma: ibv_reg_mr(tensor, %zu bytes): %s", len, strerror(-rc));
        free(u);
        return rc;
    }
    u->p = p;
    u->len = len;
    u->next = r->regs;
    r->regs = u;
    return 0;
}

void pr_rdma_unreg(struct pr_rdma *r, void *p)
{
    for (struct ureg **pp = &r->regs; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p) {
            struct ureg *u = *pp;
            *pp = u->next;
            ibv_dereg_mr(u->mr);
            free(u);
            return;
        }
    }
}

static int post_recv(struct pr_rdma_qp *q)
{
    /* A write-with-immediate consumes a receive request with no buffer. */
    struct ibv_recv_wr wr = {.wr_id = WRID_RECV, .sg_list = NULL, .num_sge = 0};
    struct ibv_recv_wr *bad;
    int rc = ibv_post_recv(q->qp, &wr, &bad);
    if (rc != 0)
        return -rc;
    q->rq_posted++;
    return 0;
}

int pr_rdma_qp_create(struct pr_rdma *r, uint32_t node, struct pr_rdma_qp **out)
{
    struct pr_rdma_qp *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->r = r;
    q->node = node;
    q->link.ops = &rdma_link_ops;
    q->link.node_id = node;
    q->link.kind = "rdma";
    q->qtail = &q->q;
    q->sq_depth = 2 * r->slots + 16;
    const char *what = "mmap";
    int rc = 0;
    size_t sbytes = r->slots * r->slot_bytes;
    q->slots = mmap(NULL, sbytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q->slots == MAP_FAILED) {
        q->slots = NULL;
        goto fail;
    }
    what = "ibv_reg_mr(slots)";
    q->slots_mr = ibv_reg_mr(r->pd, q->slots, sbytes,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!q->slots_mr)
        goto fail;
    what = "ibv_reg_mr(headers)";
    /* Enough headers for any peer slot count (bounded by our config). */
    q->hdrs = calloc(PR_CHUNK_HDR_LEN, 1024);
    if (!q->hdrs ||
        !(q->hdrs_mr = ibv_reg_mr(r->pd, q->hdrs, PR_CHUNK_HDR_LEN * 1024,
                                  IBV_ACCESS_LOCAL_WRITE)))
        goto fail;
    struct ibv_qp_init_attr ia = {
        .send_cq = r->cq,
        .recv_cq = r->cq,
        .cap = {.max_send_wr = q->sq_depth,
                .max_recv_wr = 2 * r->slots + 16,
                .max_send_sge = 2,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    what = "ibv_create_qp";
    if (!(q->qp = ibv_create_qp(r->pd, &ia)))
        goto fail;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = r->port,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    };
    what = "ibv_modify_qp(INIT)";
    rc = ibv_modify_qp(q->qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
    if (rc != 0)
        goto fail_rc;
    what = "ibv_post_recv";
    for (uint32_t i = 0; i < 2 * r->slots + 8; i++)
        if ((rc = -post_recv(q)) != 0)
            goto fail_rc;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    q->psn = (uint32_t)(ts.tv_nsec ^ (uint64_t)node * 2654435761u) & 0xffffff;
    memcpy(q->gid, r->gid.raw, 16);
    q->next = r->qps;
    r->qps = q;
    *out = q;
    return 0;
fail:
    rc = errno ? errno : EIO;
fail_rc:
    pr_err("rdma: peer node %u: %s: %s", node, what, strerror(rc));
    qp_free(q);
    return -rc;
}

void pr_rdma_qp_info(struct pr_rdma_qp *q, Pr__V1__RdmaInfo *info)
{
    struct pr_rdma *r = q->r;
    pr__v1__rdma_info__init(info);
    info->qpn = q->qp->qp_num;
    info->gid.data = q->gid;
    info->gid.len = 16;
    info->lid = r->lid;
    info->psn = q->psn;
    info->mtu = (uint32_t)r->mtu;
    info->addr = (uint64_t)(uintptr_t)q->slots;
    info->rkey = q->slots_mr->rkey;
    info->slots = r->slots;
    info->slot_bytes = (uint32_t)r->slot_bytes;
    info->device = r->name;
    info->credit_imm = 1;
}

int pr_rdma_qp_connect(struct pr_rdma_qp *q, const Pr__V1__RdmaInfo *p)
{
    struct pr_rdma *r = q->r;
    if (p->gid.len != 16 || p->slots == 0 || p->slots > 1024 ||
        p->slot_bytes < PR_CHUNK_HDR_LEN + sizeof(float) || p->psn > 0xffffff ||
        p->mtu < IBV_MTU_256 || p->mtu > IBV_MTU_4096) {
        pr_warn("rdma: peer node %u: queue pair info out of range", q->node);
        return -EPROTO;
    }
    q->raddr = p->addr;
    q->rkey = p->rkey;
    q->rslot_bytes = p->slot_bytes;
    q->piggyback = p->credit_imm >= 1;
    pr_credit_init(&q->cr, p->slots);
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu =
            (enum ibv_mtu)p->mtu < r->mtu ? (enum ibv_mtu)p->mtu : r->mtu,
        .dest_qp_num = p->qpn,
        .rq_psn = p->psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12,
        .ah_attr = {.is_global = 1,
                    .dlid = (uint16_t)p->lid,
                    .sl = 0,
                    .src_path_bits = 0,
                    .port_num = r->port,
                    .grh = {.hop_limit = 64,
                            .sgid_index = (uint8_t)r->gid_index}},
    };
    memcpy(a.ah_attr.grh.dgid.raw, p->gid.data, 16);
    int rc = ibv_modify_qp(
        q->qp, &a,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
        pr_err("rdma: peer node %u: ibv_modify_qp(RTR, qpn %u): %s", q->node,
               p->qpn, strerror(rc));
        return -rc;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    /*
     * The local ACK timeout: a write not acknowledged within 4.096 us *
     * 2^timeout is sent again. Too short and a busy receiver (Soft-RoCE
     * runs on the CPUs the daemons reduce on) triggers retransmissions of
     * data that was never lost; a dead peer is found by its TCP control
     * link first, so a long one costs nothing there. 18 (about 1 s) as
     * NCCL_IB_TIMEOUT defaults to (20 in
     * later NCCL versions).
     */
    a.timeout = r->timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = q->psn;
    a.max_rd_atomic = 1;
    rc = ibv_modify_qp(q->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        pr_err("rdma: peer node %u: ibv_modify_qp(RTS): %s", q->node,
               strerror(rc));
        return -rc;
    }
    return 0;
}

struct pr_link *pr_rdma_qp_link(struct pr_rdma_qp *q)
{
    return &q->link;
}

/* Posts one write of `h` (payload at data) into the peer's next slot. */
static int post_write(struct pr_rdma_qp *q, struct sctx *s,
                      const struct pr_chunk_hdr *h, const float *data)
{
    struct pr_rdma *r = q->r;
    size_t len = (size_t)h->nfloats * sizeof(float);
    struct ibv_mr *mr = len ? mr_of(r, data, len) : NULL;
    if (len && !mr)
        return -EFAULT; /* not memory from pr_rdma_alloc() */
    uint32_t slot;
    if (q->sq_used + 1 >= q->sq_depth || pr_credit_take(&q->cr, &slot) < 0)
        return -EAGAIN;
    uint32_t back = q->piggyback ? pr_credit_piggyback(&q->cr) : 0;
    uint8_t *hdr = q->hdrs + (size_t)(slot % 1024) * PR_CHUNK_HDR_LEN;
    pr_chunk_hdr_encode(hdr, h);
    struct ibv_sge sge[2] = {
        {.addr = (uintptr_t)hdr,
         .length = PR_CHUNK_HDR_LEN,
         .lkey = q->hdrs_mr->lkey},
        {.addr = (uintptr_t)data,
         .length = (uint32_t)len,
         .lkey = mr ? mr->lkey : 0},
    };
    struct ibv_send_wr wr = {
        .wr_id = (uintptr_t)s,
        .sg_list = sge,
        .num_sge = len ? 2 : 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(pr_imm_data(slot, back)),
        .wr.rdma = {.remote_addr = q->raddr + (uint64_t)slot * q->rslot_bytes,
                    .rkey = q->rkey},
    };
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc != 0) {
        /* The credit was not used after all, nor were those returned. */
        pr_credit_give(&q->cr, 1);
        q->cr.next_slot = slot;
        q->cr.consumed += back;
        return -rc;
    }
    q->sq_used++;
    if (s->posted++ == 0) {
        s->inext = q->inflight;
        if (q->inflight)
            q->inflight->iprev = &s->inext;
        s->iprev = &q->inflight;
        q->inflight = s;
    }
    r->st.writes++;
    r->st.bytes_sent += len;
    q->link.bytes_sent += len;
    return 0;
}

/* Posts the queued writes while credits last. */
static void flush(struct pr_rdma_qp *q)
{
    while (q->q && q->started && !q->dying && !q->r->delivering) {
        struct pending *p = q->q;
        int rc = post_write(q, p->s, &p->h, p->data);
        if (rc == -EAGAIN)
            return;
        q->q = p->next;
        if (!q->q)
            q->qtail = &q->q;
        if (rc < 0) {
            pr_warn("rdma: peer node %u: write: %s", q->node, strerror(-rc));
            p->s->status = rc;
            if (--p->s->left == 0) {
                p->s->cb(p->s->arg, p->s->status);
                free(p->s);
            }
        }
        free(p);
    }
}

static int link_send(struct pr_link *l, const struct pr_chunk_hdr *h,
                     const float *data, pr_send_cb cb, void *arg)
{
    struct pr_rdma_qp *q = (struct pr_rdma_qp *)l;
    if (q->dying)
        return -ENOTCONN;
    uint32_t per;
    size_t n = pr_rdma_pieces(h, q->rslot_bytes, &per);
    if (n == 0)
        return -EMSGSIZE;
    struct sctx *s = calloc(1, sizeof(*s));
    struct pending **ps = calloc(n, sizeof(*ps));
    if (!s || !ps) {
        free(s);
        free(ps);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(ps[i] = malloc(sizeof(**ps)))) {
            while (i--)
                free(ps[i]);
            free(ps);
            free(s);
            return -ENOMEM;
        }
    }
    s->cb = cb;
    s->arg = arg;
    s->left = (uint32_t)n;
    /* Queued in order behind earlier writes, so the peer sees them so. */
    for (size_t i = 0; i < n; i++) {
        struct pending *p = ps[i];
        p->next = NULL;
        p->s = s;
        pr_rdma_piece(h, per, i, &p->h);
        p->data = data + (p->h.off - h->off);
        *q->qtail = p;
        q->qtail = &p->next;
    }
    free(ps);
    flush(q);
    return 0;
}

static const struct pr_link_ops rdma_link_ops = {.send = link_send};

static void send_credits(struct pr_rdma_qp *q);

void pr_rdma_qp_start(struct pr_rdma_qp *q)
{
    q->started = 1;
    flush(q);
    /* Chunks may have come before: their credits were held until now. */
    send_credits(q);
}

/* A credit message, when the credits held are too many to wait for data. */
static void send_credits(struct pr_rdma_qp *q)
{
    if (!q->started || q->dying || q->sq_used + 1 >= q->sq_depth)
        return;
    uint32_t n = pr_credit_due(&q->cr, q->r->slots);
    if (n == 0)
        return;
    struct ibv_send_wr wr = {
        .wr_id = WRID_CREDIT,
        .sg_list = NULL,
        .num_sge = 0,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(pr_imm_credit(n)),
        .wr.rdma = {.remote_addr = q->raddr, .rkey = q->rkey},
    };
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc != 0) {
        q->cr.consumed += n; /* try again on the next completion */
        return;
    }
    q->sq_used++;
    q->r->st.credit_msgs++;
}

static struct pr_rdma_qp *qp_by_num(struct pr_rdma *r, uint32_t qpn)
{
    for (struct pr_rdma_qp *q = r->qps; q; q = q->next)
        if (q->qp && q->qp->qp_num == qpn)
            return q;
    return NULL;
}

static void fail_qp(struct pr_rdma_qp *q, int status)
{
    if (q->dying)
        return;
    q->dying = 1;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
    while (q->q) {
        struct pending *p = q->q;
        q->q = p->next;
        p->s->status = status;
        if (--p->s->left == 0) {
            p->s->cb(p->s->arg, status);
            free(p->s);
        }
        free(p);
    }
    q->qtail = &q->q;
    q->r->ops->on_error(q->r->octx, q->node, status);
}

static void on_recv(struct pr_rdma_qp *q, const struct ibv_wc *wc)
{
    struct pr_rdma *r = q->r;
    q->rq_posted--;
    if (!q->dying && post_recv(q) < 0) {
        fail_qp(q, -EIO);
        return;
    }
    if (q->dying)
        return;
    uint32_t n, back;
    int kind = pr_imm_decode(ntohl(wc->imm_data), r->slots, &n, &back);
    if (kind < 0) {
        pr_warn("rdma: peer node %u: immediate 0x%x out of range", q->node,
                ntohl(wc->imm_data));
        fail_qp(q, -EPROTO);
        return;
    }
    if (kind == 1)
        back = n;
    if (back && pr_credit_give(&q->cr, back) < 0) {
        pr_warn("rdma: peer node %u returned %u credits it never had", q->node,
                back);
        fail_qp(q, -EPROTO);
        return;
    }
    if (kind == 1) {
        flush(q);
        return;
    }
    const uint8_t *slot = q->slots + (size_t)n * r->slot_bytes;
    struct pr_chunk_hdr h;
    pr_chunk_hdr_decode(slot, &h);
    if (wc->byte_len < PR_CHUNK_HDR_LEN ||
        wc->byte_len - PR_CHUNK_HDR_LEN != (size_t)h.nfloats * sizeof(float)) {
        pr_warn("rdma: peer node %u: write of %u bytes for a chunk of %u "
                "floats",
                q->node, wc->byte_len, h.nfloats);
        fail_qp(q, -EPROTO);
        return;
    }
    r->st.bytes_recv += (size_t)h.nfloats * sizeof(float);
    q->link.bytes_recv += (size_t)h.nfloats * sizeof(float);
    r->delivering = 1;
    r->ops->on_chunk(r->octx, q->node, &h,
                     (const float *)(const void *)(slot + PR_CHUNK_HDR_LEN));
    r->delivering = 0;
    pr_credit_consumed(&q->cr);
    /* What the engine sent meanwhile goes now, the credit riding along. */
    for (struct pr_rdma_qp *o = r->qps; o; o = o->next)
        flush(o);
    send_credits(q);
}

/* n of s's writes left the send queue; off the list when none is left. */
static void sctx_unpost(struct sctx *s, uint32_t n)
{
    s->posted -= n;
    if (s->posted > 0)
        return;
    *s->iprev = s->inext;
    if (s->inext)
        s->inext->iprev = s->iprev;
}

static void on_send_done(struct pr_rdma_qp *q, const struct ibv_wc *wc)
{
    q->sq_used--;
    if (wc->wr_id == WRID_CREDIT)
        return;
    struct sctx *s = (struct sctx *)(uintptr_t)wc->wr_id;
    if (wc->status != IBV_WC_SUCCESS)
        s->status = -ECONNRESET;
    sctx_unpost(s, 1);
    if (--s->left == 0) {
        s->cb(s->arg, s->status);
        free(s);
    }
}

static void maybe_reap(struct pr_rdma_qp *q);

static void handle(struct pr_rdma *r, const struct ibv_wc *wc)
{
    struct pr_rdma_qp *q = qp_by_num(r, wc->qp_num);
    if (!q)
        return;
    /* Not wc->opcode: it is undefined in an error completion. */
    int is_recv = wc->wr_id == WRID_RECV;
    if (wc->status != IBV_WC_SUCCESS) {
        if (!q->dying)
            pr_warn("rdma: peer node %u: %s completion: %s", q->node,
                    is_recv ? "receive" : "send",
                    ibv_wc_status_str(wc->status));
        if (is_recv)
            q->rq_posted--;
        else
            on_send_done(q, wc);
        fail_qp(q, -ECONNRESET);
        maybe_reap(q);
        return;
    }
    if (is_recv)
        on_recv(q, wc);
    else
        on_send_done(q, wc);
    if (!q->dying)
        flush(q);
    maybe_reap(q);
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
            handle(r, &wc[i]);
    /* Credits no data write took along, if they are many (rdma_flow.h). */
    for (struct pr_rdma_qp *q = r->qps; q; q = q->next)
        send_credits(q);
}

static void qp_free(struct pr_rdma_qp *q)
{
    if (q->qp)
        ibv_destroy_qp(q->qp);
    if (q->hdrs_mr)
        ibv_dereg_mr(q->hdrs_mr);
    if (q->slots_mr)
        ibv_dereg_mr(q->slots_mr);
    if (q->slots)
        munmap(q->slots, q->r->slots * q->r->slot_bytes);
    free(q->hdrs);
    free(q);
}

/* A dying queue pair goes once every posted request has flushed. */
static void maybe_reap(struct pr_rdma_qp *q)
{
    if (!q->dying || q->sq_used || q->rq_posted)
        return;
    struct pr_rdma_qp **pp = &q->r->qps;
    while (*pp && *pp != q)
        pp = &(*pp)->next;
    if (*pp)
        *pp = q->next;
    /* Every posted write completed, so nothing is left here but in case. */
    qp_abandon(q);
    qp_free(q);
}

/* Fails what is queued; the owner asked, so no on_error callback. */
void pr_rdma_qp_destroy(struct pr_rdma_qp *q)
{
    if (!q)
        return;
    if (!q->dying) {
        q->dying = 1;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
        while (q->q) {
            struct pending *p = q->q;
            q->q = p->next;
            p->s->status = -ECONNRESET;
            if (--p->s->left == 0) {
                p->s->cb(p->s->arg, -ECONNRESET);
                free(p->s);
            }
            free(p);
        }
        q->qtail = &q->q;
    }
    maybe_reap(q);
}

void pr_rdma_stats(const struct pr_rdma *r, struct pr_rdma_stats *st)
{
    *st = r->st;
}
