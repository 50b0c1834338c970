/* SPDX-License-Identifier: MIT */
/*
 * The RDMA verbs data path between node daemons (libibverbs, RC queue
 * pairs), behind the transport interface of xport.h. The TCP link between
 * two daemons (xport/tcp) stays up as the control connection: the queue
 * pair numbers, GIDs, PSNs and the receive-slot address and rkey travel in
 * its Hello/Welcome (pr.v1.RdmaInfo, xport_handshake.c); then chunks go as
 * RDMA WRITE WITH IMMEDIATE into the slots the peer advertised, under
 * credits (rdma_flow.h).
 *
 * Per peer, in order:
 *  1. pr_rdma_qp_create(): a QP in INIT, receive slots registered, receive
 *     work requests posted; pr_rdma_qp_info() gives what the peer needs.
 *  2. pr_rdma_qp_connect(peer info): RTR, then RTS.
 *  3. pr_rdma_qp_start(): writes may go (the peer's QP is at least RTR).
 *  4. pr_rdma_qp_destroy(): QP to ERR; posted sends complete with an
 *     error; the QP is destroyed once its flushed completions are in.
 * One device context owns the protection domain, one completion queue and
 * its channel, whose fd libuv watches (uv_poll); completion events are
 * read until EAGAIN, acknowledged, the CQ re-armed and then polled dry, as
 * ibv_get_cq_event(3) describes. Any completion error marks the peer down
 * (on_error), never a hang.
 *
 * Tensor memory: the engine's scratch vectors (the weighted local sum that
 * goes to the wire) come from pr_rdma_alloc(), a pool of buffers registered
 * once and reused (the registration cache), so sends need no copy and no
 * registration on the hot path.
 */
#ifndef PR_RDMA_H
#define PR_RDMA_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/engine/xport.h"
#include "proto/frame.h"

struct pr_rdma;
struct pr_rdma_qp;

struct pr_rdma_ops {
    /* A chunk arrived from `node` (data valid during the call). */
    void (*on_chunk)(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                     const void *data);
    /* The queue pair to `node` failed (status: negative errno). */
    void (*on_error)(void *ctx, uint32_t node, int status);
};

struct pr_rdma_conf {
    const char *device; /* NULL or "": the first device */
    uint8_t port;
    int gid_index;
    uint8_t timeout;     /* queue pair ack timeout: 4.096 us * 2^timeout */
    uint32_t slots;      /* receive slots per peer */
    size_t slot_payload; /* bytes of float32 per slot */
};

/*
 * Opens the device. -ENODEV when there is none (or not the one named);
 * other negative errnos when a verbs call fails (logged with its name).
 */
int pr_rdma_open(uv_loop_t *loop, const struct pr_rdma_conf *conf,
                 const struct pr_rdma_ops *ops, void *ctx,
                 struct pr_rdma **out);
void pr_rdma_close(struct pr_rdma *r);
const char *pr_rdma_device(const struct pr_rdma *r);

/* Registered memory for the engine's vectors; NULL on failure. */
void *pr_rdma_alloc(void *r, size_t bytes);
void pr_rdma_free(void *r, void *p);

/*
 * Registers memory that lives until pr_rdma_unreg (a trainer's shared
 * tensor), so the engine may post it to the wire as it is.
 */
int pr_rdma_reg(struct pr_rdma *r, void *p, size_t len);
void pr_rdma_unreg(struct pr_rdma *r, void *p);

int pr_rdma_qp_create(struct pr_rdma *r, uint32_t node,
                      struct pr_rdma_qp **out);
/* Fills *info (gid points into q); valid while q lives. */
void pr_rdma_qp_info(struct pr_rdma_qp *q, Pr__V1__RdmaInfo *info);
int pr_rdma_qp_connect(struct pr_rdma_qp *q, const Pr__V1__RdmaInfo *peer);
void pr_rdma_qp_start(struct pr_rdma_qp *q);
/* The link the engine sends on (valid until destroy). */
struct pr_link *pr_rdma_qp_link(struct pr_rdma_qp *q);
void pr_rdma_qp_destroy(struct pr_rdma_qp *q);

struct pr_rdma_stats {
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    uint64_t writes;
    uint64_t credit_msgs;
    uint64_t cq_events;
};
void pr_rdma_stats(const struct pr_rdma *r, struct pr_rdma_stats *st);
/* Adds x's counters to sum's (a node's devices, one per scheduler). */
void pr_rdma_stats_add(struct pr_rdma_stats *sum,
                       const struct pr_rdma_stats *x);

#endif
