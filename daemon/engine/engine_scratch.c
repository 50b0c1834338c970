/* SPDX-License-Identifier: MIT */
/*
 * The groups' scratch vectors: from the node's allocator (registered
 * memory with RDMA) or malloc, and the largest one freed lately kept for
 * the next group. Apart from a group's life (engine.c) so that the rule
 * for reusing a vector, and the engine's one spare, are in one place.
 */
#include "daemon/engine/engine_int.h"

#include <stdlib.h>

/*
 * A spare that no group took for this long, while groups ran, is freed
 * (pr_engine_scratch_expire): a large job that left does not hold its
 * vector for good in a daemon where small jobs go on.
 */
#define SPARE_KEEP_MS 10000

void pr_engine_scratch_release(struct pr_engine *e, float *p)
{
    if (p && e->mem_free)
        e->mem_free(e->mem_ctx, p);
    else
        free(p);
}

/*
 * The spare goes to the next group of its size (or down to half of it):
 * a fresh vector of many MiB comes from mmap and
 * costs a page fault per 4 KiB on first touch, about as much as the sums
 * over it, and with RDMA a registration.
 */
float *pr_engine_scratch_get(struct pr_engine *e, size_t bytes)
{
    if (e->spare && e->spare_bytes >= bytes && e->spare_bytes / 2 <= bytes) {
        float *p = e->spare;
        e->spare = NULL;
        return p;
    }
    return e->mem_alloc ? e->mem_alloc(e->mem_ctx, bytes) : malloc(bytes);
}

/*
 * The larger of the spare and p is kept: with jobs of different sizes on
 * one daemon, a small group that ends must not free a large job's vector
 * (make bench-jobs: a 1 KiB job's groups, ending every few hundred
 * microseconds, had each 256 MiB reduce of its neighbour map and fault a
 * fresh vector, and unmapped it again on the loop).
 */
void pr_engine_scratch_put(struct pr_engine *e, float *p, size_t bytes)
{
    if (!p)
        return;
    if (e->closing || (e->spare && e->spare_bytes > bytes)) {
        pr_engine_scratch_release(e, p);
        return;
    }
    pr_engine_scratch_release(e, e->spare);
    e->spare = p;
    e->spare_bytes = bytes;
    e->spare_ms = uv_now(e->loop);
}

void pr_engine_scratch_expire(struct pr_engine *e, uint64_t now_ms)
{
    if (e->spare && now_ms - e->spare_ms >= SPARE_KEEP_MS) {
        pr_engine_scratch_release(e, e->spare);
        e->spare = NULL;
    }
}
