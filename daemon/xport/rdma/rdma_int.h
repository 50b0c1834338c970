/* SPDX-License-Identifier: MIT */
/*
 * What the parts of the verbs transport share (rdma.c: the device, its
 * completion queue and close; rdma_mem.c: the registration cache;
 * rdma_qp.c: queue pairs and the data path). Not for other modules: they
 * use rdma.h.
 */
#ifndef PR_RDMA_INT_H
#define PR_RDMA_INT_H

#include <infiniband/verbs.h>

#include "daemon/xport/rdma/rdma.h"
#include "daemon/xport/rdma/rdma_flow.h"

#define CQ_DEPTH   4096
#define POLL_BATCH 32
/*
 * Work request ids: a data write's is its send context; these two are
 * never an address. Error completions carry only wr_id, status and qp_num
 * valid (ibv_poll_cq(3)), so the id alone says what completed.
 */
#define WRID_CREDIT 0 /* a credit message (a send) */
#define WRID_RECV   1 /* a posted receive */

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
    const void *data;
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
    /*
     * Until pr_rdma_qp_destroy(): the transport holds q, so a queue pair
     * that failed on its own (fail_qp) stays allocated, dying, until its
     * owner lets go; only then may the last completion free it.
     */
    int owned;
    uint32_t cq_share; /* CQ entries reserved for it (pr_rdma.cq_used) */
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
    /*
     * Every posted request may complete at once (a flush): the CQ holds
     * cq_cap entries, and queue pairs are created only while the sum of
     * their send and receive queue depths (cq_used) fits.
     */
    uint32_t cq_cap, cq_used;
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

static inline size_t pr_round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/*
 * The parts depend one way: rdma.c (device, CQ, close) calls into
 * rdma_qp.c and rdma_mem.c, and rdma_qp.c into rdma_mem.c; neither calls
 * back up by name. What they need of the device they find in struct
 * pr_rdma, which rdma.c hands them.
 */

/* rdma_mem.c */
struct ibv_mr *pr_rdma_mr_of(struct pr_rdma *r, const void *p, size_t n);
int pr_rdma_pool_in_use(const struct pr_rdma *r);
/*
 * Marks p (from pr_rdma_alloc()) idle again, keeping a few idle buffers
 * registered and giving the rest back. Finishing a close is the caller's
 * (pr_rdma_free() in rdma.c).
 */
void pr_rdma_pool_put(struct pr_rdma *r, void *p);
/* Deregisters and unmaps every buffer: the pool's and the trainers'. */
void pr_rdma_mem_release(struct pr_rdma *r);

/* rdma_qp.c */
/* One work completion of the shared CQ, for whichever queue pair it is. */
void pr_rdma_qp_complete(struct pr_rdma *r, const struct ibv_wc *wc);
/* A credit message to q's peer, if it is due (rdma_flow.h). */
void pr_rdma_qp_send_credits(struct pr_rdma_qp *q);
/*
 * At close, for a queue pair whose flushed completions never came: the
 * QP is destroyed, its sends fail without a completion, and q is freed.
 */
void pr_rdma_qp_drop(struct pr_rdma_qp *q);

#endif
