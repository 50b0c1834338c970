/* SPDX-License-Identifier: MIT */
/*
 * The order of a group's ring (daemon/sched/sched_ring.c): a ring
 * all-reduce moves the same bytes over each of its m links, so the slow
 * links it crosses set its time; with two racks joined by a slow link,
 * node id order may cross it four times where two would do. Pure
 * functions of the link rates the nodes report (Ping.rates), so the unit
 * tests drive them with a table.
 */
#ifndef PR_SCHED_RING_H
#define PR_SCHED_RING_H

#include <stddef.h>
#include <stdint.h>

/* Bytes/s at which chunks from node `from` reach node `to`; 0: unknown. */
typedef double (*pr_ring_rate_fn)(void *ctx, uint32_t from, uint32_t to);

/*
 * Reorders ring[0 .. m) (node ids; ring[0] stays first) so that the sum
 * over its links ring[i] -> ring[i + 1 mod m] of 1/rate is least, an
 * unknown rate taken as twice the best known one (so that unmeasured
 * links get tried). The given order is kept when no rate among the m
 * nodes is known, when every one is known and all are within a factor of
 * 2 of each other, or when it costs at most 10% more than the best (no
 * churn on noise). Exact for
 * m <= PR_RING_EXACT_MAX (Held-Karp), else nearest neighbour improved by
 * swaps, up to PR_RING_ORDER_MAX nodes (larger rings keep their order).
 * 1 if reordered, 0 if kept, -ENOMEM.
 */
#define PR_RING_EXACT_MAX 12
#define PR_RING_ORDER_MAX 64
int pr_sched_ring_order(uint32_t *ring, size_t m, pr_ring_rate_fn rate,
                        void *ctx);

#endif
