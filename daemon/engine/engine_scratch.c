/* SPDX-License-Identifier: MIT */
/*
 * The groups' scratch vectors: from the node's allocator (registered
 * memory with RDMA) or malloc, and the last one freed kept for the next
 * group. Apart from a group's life (engine.c) so that the rule for reusing
 * a vector, and the engine's one spare, are in one place.
 */
#include "daemon/engine/engine_int.h"

#include <stdlib.h>

void pr_engine_scratch_release(struct pr_engine *e, float *p)
{
    if (p && e->mem_free)
        e->mem_free(e->mem_ctx, p);
    else
        free(p);
}

/*
 * The last scratch vector freed is kept for the next group of its size (or
 * down to half of it): a fresh vector of many MiB comes from mmap and
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

void pr_engine_scratch_put(struct pr_engine *e, float *p, size_t bytes)
{
    if (!p)
        return;
    pr_engine_scratch_release(e, e->spare);
    e->spare = NULL;
    if (e->closing) {
        pr_engine_scratch_release(e, p);
        return;
    }
    e->spare = p;
    e->spare_bytes = bytes;
}
