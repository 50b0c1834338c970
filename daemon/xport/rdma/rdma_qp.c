/* SPDX-License-Identifier: MIT */
/*
 * Queue pairs and the data path: one RC queue pair per peer, chunks
 * written into the peer's slots under credits, receives handed to the
 * engine, and completions (the CQ is read in rdma.c) matched back to the
 * sends that posted them.
 */
#include "daemon/xport/rdma/rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "daemon/base/log.h"
#include "daemon/engine/wire.h"
#include "daemon/xport/rdma/rdma_int.h"

static const struct pr_link_ops rdma_link_ops;
static void qp_free(struct pr_rdma_qp *q);
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

/*
 * Reserves `n` completion queue entries for q, growing the CQ when the
 * queue pairs' depths would pass it: a flush completes every posted
 * request at once, and an overrun CQ loses completions (sends whose
 * callbacks never run). 0, or a positive errno as verbs calls give.
 */
static int cq_reserve(struct pr_rdma *r, struct pr_rdma_qp *q, uint32_t n)
{
    if (r->cq_used + n > r->cq_cap) {
        uint32_t want = r->cq_used + n;
        if (want < 2 * r->cq_cap)
            want = 2 * r->cq_cap;
        int rc = ibv_resize_cq(r->cq, (int)want);
        /* Doubling may pass the device's max_cqe where the need does not. */
        if (rc != 0 && want > r->cq_used + n)
            rc = ibv_resize_cq(r->cq, (int)(r->cq_used + n));
        if (rc != 0)
            return rc;
        r->cq_cap = (uint32_t)r->cq->cqe;
        if (r->cq_used + n > r->cq_cap)
            return ENOBUFS;
    }
    r->cq_used += n;
    q->cq_share = n;
    return 0;
}

/* Logs the failed call for q's peer and returns -rc (rc a positive errno). */
static int qp_failed(const struct pr_rdma_qp *q, const char *what, int rc)
{
    pr_err("rdma: peer node %u: %s: %s", q->node, what, strerror(rc));
    return -rc;
}

/* errno after a call that returned NULL or MAP_FAILED, never 0. */
static int sys_errno(void)
{
    return errno ? errno : EIO;
}

/*
 * Our receive slots (the peer writes chunks into them) and the headers of
 * our writes, each registered. What exists on failure is qp_free()'s.
 */
static int buffers_reg(struct pr_rdma_qp *q)
{
    struct pr_rdma *r = q->r;
    size_t sbytes = r->slots * r->slot_bytes;
    q->slots = mmap(NULL, sbytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q->slots == MAP_FAILED) {
        q->slots = NULL;
        return qp_failed(q, "mmap", sys_errno());
    }
    q->slots_mr = ibv_reg_mr(r->pd, q->slots, sbytes,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!q->slots_mr)
        return qp_failed(q, "ibv_reg_mr(slots)", sys_errno());
    /* Enough headers for any peer slot count (bounded by our config). */
    q->hdrs = calloc(PR_CHUNK_HDR_LEN, 1024);
    if (!q->hdrs ||
        !(q->hdrs_mr = ibv_reg_mr(r->pd, q->hdrs, PR_CHUNK_HDR_LEN * 1024,
                                  IBV_ACCESS_LOCAL_WRITE)))
        return qp_failed(q, "ibv_reg_mr(headers)", sys_errno());
    return 0;
}

/* The queue pair on the shared CQ, in INIT, with its receives posted. */
static int qp_init(struct pr_rdma_qp *q)
{
    struct pr_rdma *r = q->r;
    struct ibv_qp_init_attr ia = {
        .send_cq = r->cq,
        .recv_cq = r->cq,
        .cap = {.max_send_wr = q->sq_depth,
                .max_recv_wr = 2 * r->slots + 16,
                .max_send_sge = 2,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    if (!(q->qp = ibv_create_qp(r->pd, &ia)))
        return qp_failed(q, "ibv_create_qp", sys_errno());
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = r->port,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    };
    int rc = ibv_modify_qp(q->qp, &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                               IBV_QP_ACCESS_FLAGS);
    if (rc != 0)
        return qp_failed(q, "ibv_modify_qp(INIT)", rc);
    for (uint32_t i = 0; i < 2 * r->slots + 8; i++)
        if ((rc = -post_recv(q)) != 0)
            return qp_failed(q, "ibv_post_recv", rc);
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
    q->owned = 1;
    int rc = cq_reserve(r, q, q->sq_depth + 2 * r->slots + 16);
    if (rc != 0)
        rc = qp_failed(q, "ibv_resize_cq", rc);
    if (rc < 0 || (rc = buffers_reg(q)) < 0 || (rc = qp_init(q)) < 0) {
        qp_free(q);
        return rc;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    q->psn = (uint32_t)(ts.tv_nsec ^ (uint64_t)node * 2654435761u) & 0xffffff;
    memcpy(q->gid, r->gid.raw, 16);
    q->next = r->qps;
    r->qps = q;
    *out = q;
    return 0;
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
    if (p->gid.len != 16 || pr_rdma_slots_ok(p->slots, p->slot_bytes) < 0 ||
        p->psn > 0xffffff || p->mtu < IBV_MTU_256 || p->mtu > IBV_MTU_4096) {
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
                      const struct pr_chunk_hdr *h, const void *data)
{
    struct pr_rdma *r = q->r;
    size_t len = pr_chunk_payload_bytes(h);
    struct ibv_mr *mr = len ? pr_rdma_mr_of(r, data, len) : NULL;
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
                     const void *data, pr_send_cb cb, void *arg)
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
        p->data = (const uint8_t *)data +
                  pr_wire_bytes((enum pr_wire)h->enc, p->h.off - h->off);
        *q->qtail = p;
        q->qtail = &p->next;
    }
    free(ps);
    flush(q);
    return 0;
}

static const struct pr_link_ops rdma_link_ops = {.send = link_send};

void pr_rdma_qp_start(struct pr_rdma_qp *q)
{
    q->started = 1;
    flush(q);
    /* Chunks may have come before: their credits were held until now. */
    pr_rdma_qp_send_credits(q);
}

/* A credit message, when the credits held are too many to wait for data. */
void pr_rdma_qp_send_credits(struct pr_rdma_qp *q)
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
    if (pr_rdma_write_ok(wc->byte_len, r->slot_bytes, &h) < 0) {
        pr_warn("rdma: peer node %u: write of %u bytes (slots of %zu) for "
                "a chunk of %u floats in encoding %u",
                q->node, wc->byte_len, r->slot_bytes, h.nfloats, h.enc);
        fail_qp(q, -EPROTO);
        return;
    }
    r->st.bytes_recv += pr_chunk_payload_bytes(&h);
    q->link.bytes_recv += pr_chunk_payload_bytes(&h);
    r->delivering = 1;
    r->ops->on_chunk(r->octx, q->node, &h, slot + PR_CHUNK_HDR_LEN);
    r->delivering = 0;
    pr_credit_consumed(&q->cr);
    /* What the engine sent meanwhile goes now, the credit riding along. */
    for (struct pr_rdma_qp *o = r->qps; o; o = o->next)
        flush(o);
    pr_rdma_qp_send_credits(q);
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

void pr_rdma_qp_complete(struct pr_rdma *r, const struct ibv_wc *wc)
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

static void qp_free(struct pr_rdma_qp *q)
{
    q->r->cq_used -= q->cq_share;
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
    if (q->owned || !q->dying || q->sq_used || q->rq_posted)
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

void pr_rdma_qp_drop(struct pr_rdma_qp *q)
{
    /* The device lets go of the requests before their memory does. */
    ibv_destroy_qp(q->qp);
    q->qp = NULL;
    qp_abandon(q);
    qp_free(q);
}

/* Fails what is queued; the owner asked, so no on_error callback. */
void pr_rdma_qp_destroy(struct pr_rdma_qp *q)
{
    if (!q)
        return;
    q->owned = 0;
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
