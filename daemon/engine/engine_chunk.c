/* SPDX-License-Identifier: MIT */
/*
 * What a received chunk may be, and which floats of its ring step it
 * claims: plain functions over a group's state, no loop and no I/O.
 */
#include "daemon/engine/engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/reduce.h"

/* Segment that position `pos` receives at ring step `step`. */
static uint32_t recv_seg(const struct group *g, uint32_t step)
{
    uint32_t m = g->m;
    if (step < m - 1)
        return (g->pos + 2 * m - step - 1) % m;
    return (g->pos + 2 * m - (step - (m - 1))) % m;
}

int pr_engine_chunk_ok(const struct group *g, const struct pr_chunk_hdr *h,
                       const char **why)
{
    size_t start, len;
    if (h->total != g->total)
        return *why = "vector length differs from this node's", 0;
    if (h->step >= 2 * (g->m - 1))
        return *why = "ring step out of range", 0;
    if (h->seg != recv_seg(g, h->step))
        return *why = "segment does not match the ring step", 0;
    pr_ring_segment(g->total, g->m, h->seg, &start, &len);
    /* off and nfloats come off the wire: no sum of them may wrap. */
    if (h->off < start || h->nfloats > len || h->off - start > len - h->nfloats)
        return *why = "chunk outside its segment", 0;
    /* Only an empty segment travels as an empty chunk. */
    if (len > 0 && h->nfloats == 0)
        return *why = "empty chunk for a non-empty segment", 0;
    const struct step *s = &g->steps[h->step];
    if (s->got + h->nfloats > len || (len == 0 && s->chunks > 0))
        return *why = "more data than the segment holds", 0;
    /*
     * The shadow's own segment comes back only over floats this node
     * posted, each copied aside first (engine_int.h, struct group): the
     * chunk would be written into the member over originals not saved.
     */
    if (g->saved && h->step == g->m - 1 &&
        !pr_engine_step_covers(&g->own_sent, h->off, h->off + h->nfloats))
        return *why = "this node's own segment before it was sent", 0;
    return pr_engine_wire_chunk_ok(g, h, why);
}

int pr_engine_step_covers(const struct step *s, size_t lo, size_t hi)
{
    if (lo == hi)
        return 1;
    for (size_t i = 0; i < s->nspans; i++)
        if (s->spans[i].lo <= lo && hi <= s->spans[i].hi)
            return 1;
    return 0;
}

/*
 * Spans of one step kept apart at most. A link of one TCP connection
 * delivers in order, so a step has one span; over several (the TCP
 * transport's streams) each run of chunks still in flight on a stream
 * that lags the others is a gap (its sender gives chunks in runs of 256
 * KiB, and none to a stream that lags: xport_streams.c). Each insert moves
 * the spans after it: past this, the group fails instead of the loop
 * stalling on a peer that sends a segment one float at a time backwards
 * (at most about MAX_SPANS^2 x 8 bytes moved per step, 32 MB).
 */
#define MAX_SPANS 2048

/*
 * Records floats [lo, hi) of a step as received: 0, -EPROTO when some of
 * them had arrived already, -E2BIG past MAX_SPANS, -ENOMEM.
 */
int pr_engine_step_claim(struct step *s, size_t lo, size_t hi)
{
    if (lo == hi)
        return 0;
    /* Chunks mostly come in order: search from the end. */
    size_t i = s->nspans;
    while (i > 0 && s->spans[i - 1].lo >= lo)
        i--;
    struct span *pred = i > 0 ? &s->spans[i - 1] : NULL;
    struct span *succ = i < s->nspans ? &s->spans[i] : NULL;
    if ((pred && pred->hi > lo) || (succ && succ->lo < hi))
        return -EPROTO;
    if (pred && pred->hi == lo && succ && succ->lo == hi) {
        pred->hi = succ->hi;
        memmove(succ, succ + 1, (s->nspans - i - 1) * sizeof(*succ));
        s->nspans--;
    } else if (pred && pred->hi == lo) {
        pred->hi = hi;
    } else if (succ && succ->lo == hi) {
        succ->lo = lo;
    } else {
        if (s->nspans == MAX_SPANS)
            return -E2BIG;
        if (s->nspans == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 4;
            struct span *n = realloc(s->spans, cap * sizeof(*n));
            if (!n)
                return -ENOMEM;
            s->spans = n;
            s->cap = cap;
        }
        memmove(&s->spans[i + 1], &s->spans[i],
                (s->nspans - i) * sizeof(*s->spans));
        s->spans[i] = (struct span){lo, hi};
        s->nspans++;
    }
    return 0;
}
