/* SPDX-License-Identifier: MIT */
/*
 * A group's chunks in an encoding other than fp32 (wire.h; struct group,
 * engine_int.h): its wire buffer, what is encoded where, and int8's error
 * feedback. The sums stay in float32 in the scratch vector: a chunk is
 * decoded into its place there before the reduce-scatter adds the local
 * members (engine_local.c, as a chunk read into place over TCP), and the
 * floats this daemon sends are encoded from there just before they are
 * posted. Apart from a group's life (engine.c), which asks here for the
 * bytes to post and hands received payloads here first.
 *
 * Every daemon of the ring ends with the same bits: the segment a daemon
 * completes is encoded once, its own floats replaced by what that
 * encoding decodes to, and the all-gather forwards the bytes it received,
 * never a new encoding of them.
 *
 * Error feedback (int8): each daemon encodes each float of the vector
 * exactly once per group (the reduce-scatter sends every segment but the
 * one it completes, which the all-gather sends), so what its encodings
 * lost is one vector (g->lost), in the sum's terms: the completed
 * segment's loss, of the mean, counts k times. When the group succeeds it
 * becomes the local members' err vectors, split evenly, and each adds its
 * share to its next contribution (sum_into): the rounding's bias cancels
 * over reduces instead of piling up. A group that fails leaves them.
 */
#include "daemon/engine/engine_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/reduce.h"

static void *wire_alloc(struct pr_engine *e, size_t bytes)
{
    /* Registered memory with RDMA: chunks are posted from it. */
    return e->mem_alloc ? e->mem_alloc(e->mem_ctx, bytes) : malloc(bytes);
}

/* Whether member i's err vector is summed in (and gets a share back). */
static int feeds_back(const struct group *g, size_t i)
{
    const struct pr_engine_member *mb = &g->local[i];
    return mb->err && (g->mean_scale != 0 || mb->weight != 0.0);
}

int pr_engine_wire_setup(struct group *g)
{
    if (g->enc == PR_WIRE_FP32)
        return 0;
    g->wseg = malloc((g->m + 1) * sizeof(*g->wseg));
    if (!g->wseg)
        return -ENOMEM;
    size_t at = 0;
    for (uint32_t s = 0; s < g->m; s++) {
        size_t start, len;
        pr_ring_segment(g->total, g->m, s, &start, &len);
        g->wseg[s] = at;
        at += pr_wire_bytes((enum pr_wire)g->enc, len);
    }
    g->wseg[g->m] = at;
    g->wire_bytes = at;
    g->wire = wire_alloc(g->e, 2 * at);
    if (!g->wire)
        return -ENOMEM;
    int ef = 0;
    for (size_t i = 0; i < g->nlocal; i++)
        ef |= feeds_back(g, i);
    /*
     * Zeroed: every float is encoded once when the group succeeds, but a
     * peer that breaks the ring's order could have it succeed first.
     */
    if (g->enc == PR_WIRE_INT8 && ef) {
        g->lost = calloc(g->total, sizeof(float));
        if (!g->lost)
            return -ENOMEM;
    }
    return 0;
}

void pr_engine_wire_free(struct group *g)
{
    if (g->wire)
        pr_engine_scratch_release(g->e, (float *)(void *)g->wire);
    free(g->wseg);
    free(g->lost);
}

uint8_t *pr_engine_wire_at(const struct group *g, uint32_t step, uint32_t seg,
                           size_t off)
{
    size_t start, len;
    pr_ring_segment(g->total, g->m, seg, &start, &len);
    uint8_t *region = g->wire + (step >= g->m - 1 ? g->wire_bytes : 0);
    return region + g->wseg[seg] +
           pr_wire_bytes((enum pr_wire)g->enc, off - start);
}

/* One encode or decode over floats [off, off + n) of the group. */
struct wire_op {
    struct group *g;
    size_t off, n;
    uint8_t *bytes; /* the chunk's, from its first float */
    const uint8_t *in;
    const float *from; /* encode: the floats, if not the scratch vector's */
    int encode;
    int settle; /* encode: the floats become what the bytes decode to */
};

static size_t block_up(size_t i, size_t n)
{
    i = (i + PR_WIRE_BLOCK - 1) / PR_WIRE_BLOCK * PR_WIRE_BLOCK;
    return i < n ? i : n;
}

/*
 * Floats [lo, hi) of the op, on a pool thread or the loop's: the cuts,
 * rounded up to int8 blocks, are still a partition of the chunk, and
 * each slice's bytes start where its first float's do.
 */
static void wire_slice(void *arg, size_t lo, size_t hi)
{
    const struct wire_op *op = arg;
    struct group *g = op->g;
    enum pr_wire w = (enum pr_wire)g->enc;
    if (w == PR_WIRE_INT8) {
        lo = block_up(lo, op->n);
        hi = block_up(hi, op->n);
    }
    if (lo >= hi)
        return;
    float *x = g->scratch + op->off + lo;
    size_t n = hi - lo, at = pr_wire_bytes(w, lo);
    if (!op->encode) {
        pr_wire_decode(w, x, op->in + at, n);
        return;
    }
    float *lost = g->lost ? g->lost + op->off + lo : NULL;
    pr_wire_encode(w, op->bytes + at, op->from ? op->from + lo : x, n, lost);
    if (!op->settle)
        return;
    pr_wire_decode(w, x, op->bytes + at, n);
    /* The mean's loss, in the sum's terms (see the top of this file). */
    if (lost && g->mean_scale != 0)
        pr_reduce_scale(lost, lost, (float)g->k, n);
}

static void wire_run(struct wire_op *op)
{
    struct pr_engine *e = op->g->e;
    if (op->n == 0)
        return;
    if (e->pool && op->n >= PR_POOL_MIN_SLICE)
        pr_pool_run(e->pool, wire_slice, op, op->n);
    else
        wire_slice(op, 0, op->n);
}

const void *pr_engine_wire_out(struct group *g, uint32_t step, uint32_t seg,
                               size_t off, size_t n, const float *src)
{
    uint8_t *at = pr_engine_wire_at(g, step, seg, off);
    /* The all-gather forwards what it received (pr_engine_wire_in). */
    if (step >= g->m)
        return at;
    struct wire_op op = {.g = g,
                         .off = off,
                         .n = n,
                         .bytes = at,
                         .from = src,
                         .encode = 1,
                         .settle = step == g->m - 1};
    wire_run(&op);
    return at;
}

void pr_engine_wire_in(struct group *g, const struct pr_chunk_hdr *h,
                       const void *data)
{
    uint8_t *at = pr_engine_wire_at(g, h->step, h->seg, h->off);
    struct wire_op op = {.g = g, .off = h->off, .n = h->nfloats, .in = data};
    wire_run(&op);
    /*
     * An all-gather chunk that goes on is forwarded as it came: kept where
     * the next step's post takes it from, unless it landed there.
     */
    if (h->step >= g->m - 1 && h->step + 1 < 2 * (g->m - 1) && data != at)
        memcpy(at, data, pr_chunk_payload_bytes(h));
}

int pr_engine_wire_chunk_ok(const struct group *g, const struct pr_chunk_hdr *h,
                            const char **why)
{
    if (h->enc != g->enc)
        return *why = "encoding differs from the group's", 0;
    if (g->enc != PR_WIRE_INT8)
        return 1;
    size_t start, len;
    pr_ring_segment(g->total, g->m, h->seg, &start, &len);
    size_t in_seg = h->off - start;
    if (in_seg % PR_WIRE_BLOCK != 0 ||
        (h->nfloats % PR_WIRE_BLOCK != 0 && in_seg + h->nfloats != len))
        return *why = "int8 chunk not on its segment's blocks", 0;
    return 1;
}

/*
 * Whether member i gets a share of what was lost: it fed back, and its
 * trainer is still there (a detached one's vector goes with it).
 */
static int takes_share(const struct group *g, size_t i)
{
    return feeds_back(g, i) && !g->local[i].detached;
}

/*
 * Floats [lo, hi) of the members' err vectors: their shares of lost, but
 * none that is not finite (the mean's loss times k may overflow), which
 * would come back in every reduce after.
 */
static void feedback_slice(void *arg, size_t lo, size_t hi)
{
    struct group *g = arg;
    size_t k = 0;
    for (size_t i = 0; i < g->nlocal; i++)
        k += takes_share(g, i) != 0;
    for (size_t i = 0; i < g->nlocal; i++) {
        if (!takes_share(g, i))
            continue;
        float *err = g->local[i].err;
        pr_reduce_scale(err + lo, g->lost + lo, 1.0f / (float)k, hi - lo);
        for (size_t j = lo; j < hi; j++)
            err[j] = isfinite(err[j]) ? err[j] : 0;
    }
}

void pr_engine_wire_feedback(struct group *g)
{
    if (!g->lost)
        return;
    if (g->e->pool && g->total >= PR_POOL_MIN_SLICE)
        pr_pool_run(g->e->pool, feedback_slice, g, g->total);
    else
        feedback_slice(g, 0, g->total);
}
