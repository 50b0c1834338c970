/* SPDX-License-Identifier: MIT */
/*
 * A group's arithmetic over its local members' memory: the weighted local
 * sum folded into the chunks from the left, the in-place writes of final
 * floats, and the write-back of results. No sends and no state changes:
 * those are engine.c's.
 *
 * Passes over memory per reduce, in vectors of S bytes (the tensor), for
 * k local members, m daemons, uniform weights (the mean):
 *  - m == 1: each member read once and written once, 2k S: the sum of a
 *    16 KiB block stays in cache between the reads and the writes, and
 *    there is no scratch vector (pr_engine_local_mean). The writes go to
 *    lines just read, so non-temporal stores would not save a read.
 *  - m > 1, default mode: the local sum read once, k S, folded into the
 *    chunk from the left (its S/m segments) or summed for the own segment
 *    (k == 1 with direct sends: posted from the member, no pass); the
 *    scratch vector written once per float, by the reduce-scatter or the
 *    all-gather, S; the write-back, 2k S (k == 1: a memcpy, whose large
 *    copies glibc already makes with non-temporal stores). The scratch
 *    copy and write-back are what "tensors unchanged on failure" costs
 *    with several local members.
 *    Over TCP a chunk from the left is read by the kernel straight into
 *    its place in scratch (engine_rx.c, conn.c maybe_land()), and
 *    the fold sums there in place (in == out): no copy out of a read
 *    buffer, which was one more read and write of every received float.
 *  - m > 1, default mode, k == 1 (the shadow, engine_int.h): the segment
 *    completed here is summed into the member and its floats saved over
 *    the chunk in scratch in one pass (2 reads, 2 writes of S/m); the own
 *    segment copied aside a chunk at a time, each before it is posted
 *    (S/m), its all-gather read by the kernel straight into the member;
 *    the other m - 2 segments land in scratch and are written back as
 *    above. Between 2 daemons: 3 S of memory traffic where the
 *    write-back took 3.5 S, and none of it after the last chunk.
 *  - m > 1 in place (k == 1): the member read once and written once, no
 *    scratch vector and no write-back.
 */
#include "daemon/engine/engine_int.h"

#include <math.h>
#include <string.h>

#include "daemon/engine/reduce.h"

/*
 * dst[0, b - a) = this daemon's weighted local sum over [a, b), plus
 * in[0, b - a) when `in` is not NULL: the reduce-scatter folds the local
 * members into the chunk from the left in one pass, so their floats are
 * read once, when needed. Uniform groups add unscaled and multiply by
 * `scale` (not 0) once the sum is complete: in the same pass when there is
 * one local member. Each float sees the same operations in the same order
 * however [a, b) is cut, so slices give bit-identical results. A member
 * of weight 0 (healing: it takes the group's model, gives none) is not
 * read at all: 0 x NaN is NaN, and a restarted trainer's diverged floats
 * would poison every member.
 */
static void sum_into(struct group *g, float *out, size_t a, size_t b,
                     const float *in, float scale)
{
    int uniform = g->mean_scale != 0;
    int fused = scale != 0 && in && g->nlocal == 1 && !g->lost;
    for (size_t i = 0; i < g->nlocal; i++) {
        const struct pr_engine_member *mb = &g->local[i];
        float w = (float)mb->weight;
        size_t off = 0;
        for (size_t p = 0; p < mb->nparts && off < b; p++) {
            size_t len = mb->parts[p].len;
            size_t lo = a > off ? a : off;
            size_t hi = b < off + len ? b : off + len;
            off += len;
            if (lo >= hi)
                continue;
            const float *x = mb->parts[p].data + (lo - (off - len));
            float *dst = out + (lo - a);
            size_t n = hi - lo;
            /*
             * `in` may be `out` itself (a chunk read into its place in the
             * scratch vector): then the first member adds to it. Either
             * way each float gets the same operations in the same order
             * (addition commutes exactly), so the results are the same.
             */
            const float *src = in ? in + (lo - a) : NULL;
            int here = src == dst;
            if (!uniform && w == 0.0f) {
                if (i == 0 && src && !here)
                    memcpy(dst, src, n * sizeof(float));
                else if (i == 0 && !src)
                    memset(dst, 0, n * sizeof(float));
                continue; /* i > 0: adds nothing */
            }
            if (i > 0 && uniform)
                pr_reduce_add(dst, x, n);
            else if (i > 0)
                pr_reduce_axpy(dst, x, w, n);
            else if (fused)
                pr_reduce_sum2_scale(dst, src, x, scale, n);
            else if (src && uniform && here)
                pr_reduce_add(dst, x, n);
            else if (src && uniform)
                pr_reduce_sum2(dst, x, src, n);
            else if (src && here)
                pr_reduce_axpy(dst, x, w, n);
            else if (src)
                pr_reduce_axpb(dst, x, w, src, n);
            else if (uniform)
                memcpy(dst, x, n * sizeof(float));
            else
                pr_reduce_scale(dst, x, w, n);
        }
    }
    /* int8's error feedback: what earlier encodings lost (engine_wire.c). */
    for (size_t i = 0; g->lost && i < g->nlocal; i++) {
        const struct pr_engine_member *mb = &g->local[i];
        if (mb->err && (uniform || mb->weight != 0.0))
            pr_reduce_add(out, mb->err + a, b - a);
    }
    if (scale != 0 && !fused)
        pr_reduce_scale(out, out, scale, b - a);
}

void pr_engine_local_sum(struct group *g, size_t a, size_t b, const float *in,
                         float scale)
{
    sum_into(g, g->scratch + a, a, b, in, scale);
}

/*
 * For each stretch of floats [off, off + n) as it lies in the lone local
 * member's parts: fn(g, its memory, the index of its first float).
 */
int pr_engine_each_piece(struct group *g, size_t off, size_t n,
                         int (*fn)(struct group *g, float *x, size_t at,
                                   size_t len, const float *in, void *arg),
                         const float *in, void *arg)
{
    const struct pr_engine_member *mb = &g->local[0];
    size_t base = 0, end = off + n;
    for (size_t p = 0; p < mb->nparts && base < end; p++) {
        size_t len = mb->parts[p].len;
        size_t lo = off > base ? off : base;
        size_t hi = end < base + len ? end : base + len;
        if (lo < hi) {
            int rc = fn(g, mb->parts[p].data + (lo - base), lo, hi - lo,
                        in ? in + (lo - off) : NULL, arg);
            if (rc < 0)
                return rc;
        }
        base += len;
    }
    return 0;
}

/* The last reduce-scatter step, in place: x = own contribution + in. */
int pr_engine_final_in_place(struct group *g, float *x, size_t at, size_t len,
                             const float *in, void *arg)
{
    (void)at;
    (void)arg;
    if (g->mean_scale != 0)
        pr_reduce_sum2_scale(x, x, in, g->mean_scale, len);
    else if (g->local[0].weight == 0.0)
        memcpy(x, in, len * sizeof(float)); /* healing: not x's floats */
    else
        pr_reduce_axpb_inplace(x, x, (float)g->local[0].weight, in, len);
    return 0;
}

/* An all-gather chunk, in place: the final floats themselves. */
int pr_engine_copy_in_place(struct group *g, float *x, size_t at, size_t len,
                            const float *in, void *arg)
{
    (void)g;
    (void)at;
    (void)arg;
    if (x != in) /* else it landed there */
        memcpy(x, in, len * sizeof(float));
    return 0;
}

/*
 * The shadow's last reduce-scatter step: x as final_in_place makes it,
 * what it held saved at its place in the scratch vector (where the chunk
 * from the left may have landed: in == save, read before written).
 */
static int fold_save(struct group *g, float *x, size_t at, size_t len,
                     const float *in, void *arg)
{
    (void)arg;
    float *save = g->scratch + at;
    if (g->mean_scale != 0)
        pr_reduce_fold_save_mean(x, in, save, g->mean_scale, len);
    else if (g->local[0].weight == 0.0)
        pr_reduce_fold_save_copy(x, in, save, len);
    else
        pr_reduce_fold_save_axpb(x, (float)g->local[0].weight, in, save, len);
    return 0;
}

int pr_engine_in_member(const struct group *g, const struct pr_chunk_hdr *h)
{
    uint32_t m = g->m;
    if (g->in_place)
        return h->step >= m - 2;
    return g->shadow &&
           (h->step == m - 2 || (h->step >= m - 1 && h->seg == g->pos));
}

float *pr_engine_member_dst(const struct group *g, const struct pr_chunk_hdr *h)
{
    if (!g->shadow || h->step < g->m - 1 || h->seg != g->pos)
        return NULL;
    const struct pr_engine_member *mb = &g->local[0];
    size_t base = 0;
    for (size_t p = 0; p < mb->nparts; p++) {
        size_t len = mb->parts[p].len;
        if (h->off >= base && h->off + h->nfloats <= base + len)
            return mb->parts[p].data + (h->off - base);
        base += len;
    }
    return NULL;
}

static int save_piece(struct group *g, float *x, size_t at, size_t len,
                      const float *in, void *arg)
{
    (void)in;
    (void)arg;
    memcpy(g->scratch + at, x, len * sizeof(float));
    return 0;
}

static int restore_piece(struct group *g, float *x, size_t at, size_t len,
                         const float *in, void *arg)
{
    (void)in;
    (void)arg;
    memcpy(x, g->scratch + at, len * sizeof(float));
    return 0;
}

struct save_arg {
    struct group *g;
    size_t off;
};

void pr_engine_shadow_save_range(struct group *g, size_t off, size_t n)
{
    pr_engine_each_piece(g, off, n, save_piece, NULL, NULL);
}

/* Floats [off + lo, off + hi) (pr_pool_run's slices). */
static void save_slice(void *arg, size_t lo, size_t hi)
{
    const struct save_arg *a = arg;
    pr_engine_shadow_save_range(a->g, a->off + lo, hi - lo);
}

void pr_engine_shadow_save(struct group *g, size_t off, size_t n)
{
    struct save_arg a = {g, off};
    if (g->e->pool)
        pr_pool_run(g->e->pool, save_slice, &a, n);
    else
        save_slice(&a, 0, n);
}

/* Floats [lo, hi) of every span in s back from the scratch vector. */
static void restore_spans(struct group *g, const struct step *s)
{
    for (size_t i = 0; i < s->nspans; i++) {
        const struct span *sp = &s->spans[i];
        pr_engine_each_piece(g, sp->lo, sp->hi - sp->lo, restore_piece, NULL,
                             NULL);
    }
}

/*
 * Only what may have been written: the own segment's all-gather chunks
 * claimed (step m - 1: each claimed before its first byte lands, whether
 * it ended or not) and the completed segment's chunks folded.
 */
void pr_engine_shadow_restore(struct group *g)
{
    if (g->saved)
        restore_spans(g, &g->steps[g->m - 1]);
    restore_spans(g, &g->folded);
}

struct absorb_arg {
    struct group *g;
    const struct pr_chunk_hdr *h;
    const float *data;
};

/* Floats [lo, hi) of the chunk: on the loop thread or a pool thread. */
static void absorb_slice(void *arg, size_t lo, size_t hi)
{
    const struct absorb_arg *a = arg;
    struct group *g = a->g;
    uint32_t m = g->m;
    size_t off = a->h->off + lo, n = hi - lo;
    const float *in = a->data + lo;
    if (pr_engine_in_member(g, a->h) && a->h->step == m - 2)
        pr_engine_each_piece(g, off, n,
                             g->shadow ? fold_save : pr_engine_final_in_place,
                             in, NULL);
    else if (pr_engine_in_member(g, a->h))
        pr_engine_each_piece(g, off, n, pr_engine_copy_in_place, in, NULL);
    else if (a->h->step < m - 1)
        pr_engine_local_sum(g, off, off + n, in,
                            a->h->step == m - 2 ? g->mean_scale : 0);
    else if (in != g->scratch + off) /* else it landed there */
        memcpy(g->scratch + off, in, n * sizeof(float));
}

void pr_engine_absorb(struct group *g, const struct pr_chunk_hdr *h,
                      const float *data)
{
    struct absorb_arg a = {g, h, data};
    if (h->nfloats == 0)
        return;
    if (g->e->pool)
        pr_pool_run(g->e->pool, absorb_slice, &a, h->nfloats);
    else
        absorb_slice(&a, 0, h->nfloats);
}

/*
 * The floats [at, ...) of the only local member's memory, when that memory
 * can go to the wire as it is (one member, counted unscaled; a bf16 group
 * encodes from it, not int8, whose chunks are whole blocks where a direct
 * one ends with its tensor), and how many follow in the same part; NULL
 * otherwise.
 */
const float *pr_engine_direct_src(const struct group *g, size_t at, size_t *n)
{
    if (!g->e->direct || g->nlocal != 1 || g->enc == PR_WIRE_INT8 ||
        (g->mean_scale == 0 && g->local[0].weight != 1.0))
        return NULL;
    const struct pr_engine_member *mb = &g->local[0];
    size_t off = 0;
    for (size_t p = 0; p < mb->nparts; p++) {
        if (at < off + mb->parts[p].len) {
            *n = off + mb->parts[p].len - at;
            return mb->parts[p].data + (at - off);
        }
        off += mb->parts[p].len;
    }
    return NULL;
}

/* Results res[0, b - a) for floats [a, b) into every attached member. */
static void write_into(struct group *g, const float *res, size_t a, size_t b)
{
    for (size_t i = 0; i < g->nlocal; i++) {
        const struct pr_engine_member *mb = &g->local[i];
        if (mb->detached)
            continue;
        size_t off = 0;
        for (size_t p = 0; p < mb->nparts && off < b; p++) {
            const struct pr_engine_part *pt = &mb->parts[p];
            size_t lo = a > off ? a : off;
            size_t hi = b < off + pt->len ? b : off + pt->len;
            size_t base = off;
            off += pt->len;
            if (lo >= hi)
                continue;
            float *x = pt->data + (lo - base);
            if (g->personal)
                pr_reduce_personal(x, x, res + (lo - a), mb->weight, g->k,
                                   hi - lo);
            else
                memcpy(x, res + (lo - a), (hi - lo) * sizeof(float));
        }
    }
}

void pr_engine_write_range(struct group *g, size_t lo, size_t hi)
{
    write_into(g, g->scratch + lo, lo, hi);
}

/*
 * Floats per block of pr_engine_local_mean: the block's sum (16 KiB) stays
 * in the first-level cache between the sum and the writes.
 */
#define MEAN_BLOCK 4096

void pr_engine_local_mean(struct group *g, size_t lo, size_t hi)
{
    float sum[MEAN_BLOCK];
    for (size_t a = lo; a < hi; a += MEAN_BLOCK) {
        size_t b = hi - a < MEAN_BLOCK ? hi : a + MEAN_BLOCK;
        sum_into(g, sum, a, b, NULL, g->mean_scale);
        write_into(g, sum, a, b);
    }
}

/*
 * 1/k when every member weighs exactly 1/k and results are not personal:
 * the whole group's (spec->weighted, from the node), then the local ones.
 */
float pr_engine_uniform_scale(const struct pr_engine_group *spec)
{
    if (spec->personal || spec->weighted || spec->k <= 1)
        return 0;
    double u = 1.0 / (double)spec->k;
    for (size_t i = 0; i < spec->nlocal; i++)
        if (fabs(spec->local[i].weight - u) > 1e-12)
            return 0;
    return (float)u;
}
