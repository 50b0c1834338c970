/* SPDX-License-Identifier: MIT */
/*
 * Ring order from measured link rates (sched_ring.h). The cost of a ring
 * is the sum over its links of 1/rate: the seconds per byte it spends on
 * each link. Not the slowest link alone: when several ring links share
 * one slow path (two racks and their uplink), the measured rate of each
 * crossing already shows the sharing, and only the sum counts how many
 * times the ring crosses (PCCL orders its ring from measured bandwidth
 * the same way). An asymmetric travelling-salesman tour: exact by
 * Held-Karp for the small groups partial reduce forms, a heuristic above.
 */
#include "daemon/sched/sched_ring.h"

#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

/*
 * The given order stays unless the best saves more than this fraction,
 * and known rates within a factor 1 / (1 - RING_ALIKE) of each other are
 * all alike: rates measured on fast links swing with the hosts' load
 * (loopback: 0.5 to 4 GB/s in one test), and a ring reordered on that
 * noise gains nothing. Slow links that matter differ by far more.
 */
#define RING_KEEP_SLACK  0.10
#define RING_ALIKE       0.50
#define RING_SWAP_PASSES 20
/*
 * An unknown link counts as this many times the best known one: a ring
 * whose links all measured alike (node id order over two racks crosses
 * the slow link on every hop) would otherwise never try the others. Each
 * link is tried once, then known (for 60 s: sched_work.c).
 */
#define RING_UNKNOWN 2.0

static double ring_cost(const double *c, size_t m, const size_t *ord)
{
    double t = 0;
    for (size_t i = 0; i < m; i++)
        t += c[ord[i] * m + ord[(i + 1) % m]];
    return t;
}

/*
 * Held-Karp over the tours from index 0: best[mask][j] is the cheapest
 * path from 0 through the indices in mask (bits for 1 .. m-1) ending at
 * j. Writes the best tour into ord. 0 or -ENOMEM.
 */
static int exact_tour(const double *c, size_t m, size_t *ord)
{
    size_t full = (size_t)1 << (m - 1);
    double *best = malloc(full * m * sizeof(*best));
    uint8_t *from = malloc(full * m);
    if (!best || !from) {
        free(best);
        free(from);
        return -ENOMEM;
    }
    for (size_t i = 0; i < full * m; i++)
        best[i] = DBL_MAX;
    for (size_t j = 1; j < m; j++) {
        size_t mask = (size_t)1 << (j - 1);
        best[mask * m + j] = c[j];
        from[mask * m + j] = 0;
    }
    for (size_t mask = 1; mask < full; mask++)
        for (size_t j = 1; j < m; j++) {
            double here = best[mask * m + j];
            if (!(mask >> (j - 1) & 1) || here == DBL_MAX)
                continue;
            for (size_t k = 1; k < m; k++) {
                size_t bit = (size_t)1 << (k - 1);
                if (mask & bit)
                    continue;
                double v = here + c[j * m + k];
                size_t at = (mask | bit) * m + k;
                if (v < best[at]) {
                    best[at] = v;
                    from[at] = (uint8_t)j;
                }
            }
        }
    size_t mask = full - 1, last = 1;
    double top = DBL_MAX;
    for (size_t j = 1; j < m; j++) {
        double v = best[mask * m + j] + c[j * m];
        if (v < top) {
            top = v;
            last = j;
        }
    }
    ord[0] = 0;
    for (size_t i = m - 1; i >= 1; i--) {
        ord[i] = last;
        size_t prev = from[mask * m + last];
        mask &= ~((size_t)1 << (last - 1));
        last = prev;
    }
    free(best);
    free(from);
    return 0;
}

/* Nearest neighbour from index 0, then swaps while one helps. */
static void heuristic_tour(const double *c, size_t m, size_t *ord)
{
    ord[0] = 0;
    for (size_t i = 1; i < m; i++)
        ord[i] = i;
    for (size_t i = 1; i < m; i++) {
        size_t pick = i;
        for (size_t k = i + 1; k < m; k++)
            if (c[ord[i - 1] * m + ord[k]] < c[ord[i - 1] * m + ord[pick]])
                pick = k;
        size_t t = ord[i];
        ord[i] = ord[pick];
        ord[pick] = t;
    }
    double cur = ring_cost(c, m, ord);
    for (int pass = 0; pass < RING_SWAP_PASSES; pass++) {
        int better = 0;
        for (size_t a = 1; a < m; a++)
            for (size_t b = a + 1; b < m; b++) {
                size_t t = ord[a];
                ord[a] = ord[b];
                ord[b] = t;
                double v = ring_cost(c, m, ord);
                if (v < cur * (1 - 1e-12)) {
                    cur = v;
                    better = 1;
                } else {
                    ord[b] = ord[a];
                    ord[a] = t;
                }
            }
        if (!better)
            break;
    }
}

/*
 * The m x m costs (seconds per byte) of the ring's nodes, an unknown rate
 * at RING_UNKNOWN x the best known. 0: computed; 1: nothing to choose (no
 * rate known, or every one known and all alike); -ENOMEM.
 */
static int costs(const uint32_t *ring, size_t m, pr_ring_rate_fn rate,
                 void *ctx, double **out)
{
    double *r = calloc(m * m, sizeof(*r));
    if (!r)
        return -ENOMEM;
    double lo = DBL_MAX, hi = 0;
    int unknown = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < m; j++) {
            if (i == j)
                continue;
            double v = rate(ctx, ring[i], ring[j]);
            r[i * m + j] = v > 0 ? v : 0;
            unknown |= !(v > 0);
            if (v > 0) {
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
        }
    if (hi == 0 || (!unknown && lo >= hi * (1 - RING_ALIKE))) {
        free(r);
        return 1;
    }
    for (size_t i = 0; i < m * m; i++)
        r[i] = 1.0 / (r[i] > 0 ? r[i] : RING_UNKNOWN * hi);
    *out = r;
    return 0;
}

int pr_sched_ring_order(uint32_t *ring, size_t m, pr_ring_rate_fn rate,
                        void *ctx)
{
    /*
     * One ring of two: both orders are the same links. Above
     * PR_RING_ORDER_MAX nodes the heuristic's O(m^3) and the m^2 rate
     * lookups would hold up the scheduler's loop at every group: the
     * given order stays.
     */
    if (m < 3 || m > PR_RING_ORDER_MAX)
        return 0;
    double *c = NULL;
    int rc = costs(ring, m, rate, ctx, &c);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    size_t *ord = malloc(m * sizeof(*ord));
    size_t *given = malloc(m * sizeof(*given));
    uint32_t *ids = malloc(m * sizeof(*ids));
    if (!ord || !given || !ids) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < m; i++)
        given[i] = i;
    if (m <= PR_RING_EXACT_MAX)
        rc = exact_tour(c, m, ord);
    else
        heuristic_tour(c, m, ord);
    if (rc < 0)
        goto out;
    if (ring_cost(c, m, given) <= ring_cost(c, m, ord) * (1 + RING_KEEP_SLACK))
        goto out; /* rc 0: kept */
    for (size_t i = 0; i < m; i++)
        ids[i] = ring[ord[i]];
    memcpy(ring, ids, m * sizeof(*ids));
    rc = 1;
out:
    free(c);
    free(ord);
    free(given);
    free(ids);
    return rc;
}
