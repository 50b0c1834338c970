/*
 * A group's arithmetic over its local members' memory: the weighted local
 * sum folded into the chunks from the left, the in-place writes of final
 * floats, and the write-back of results. No sends and no state changes:
 * those are engine.c's.
 */
#include "daemon/engine/engine_int.h"

#include <math.h>
#include <string.h>

#include "daemon/engine/reduce.h"

/*
 * scratch[a, b) = this daemon's weighted local sum over [a, b), plus
 * in[0, b - a) when `in` is not NULL: the reduce-scatter folds the local
 * members into the chunk from the left in one pass, so their floats are
 * read once, when needed. Uniform groups add unscaled and multiply by
 * `scale` (not 0) once the sum is complete: in the same pass when there is
 * one local member.
 */
void pr_engine_local_sum(struct group *g, size_t a, size_t b, const float *in,
                         float scale)
{
    int uniform = g->mean_scale != 0;
    int fused = scale != 0 && in && g->nlocal == 1;
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
            float *dst = g->scratch + lo;
            size_t n = hi - lo;
            if (i > 0 && uniform)
                pr_reduce_add(dst, x, n);
            else if (i > 0)
                pr_reduce_axpy(dst, x, w, n);
            else if (fused)
                pr_reduce_sum2_scale(dst, x, in + (lo - a), scale, n);
            else if (in && uniform)
                pr_reduce_sum2(dst, x, in + (lo - a), n);
            else if (in)
                pr_reduce_axpb(dst, x, w, in + (lo - a), n);
            else if (uniform)
                memcpy(dst, x, n * sizeof(float));
            else
                pr_reduce_scale(dst, x, w, n);
        }
    }
    if (scale != 0 && !fused)
        pr_reduce_scale(g->scratch + a, g->scratch + a, scale, b - a);
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
    memcpy(x, in, len * sizeof(float));
    return 0;
}

/*
 * The floats [at, ...) of the only local member's memory, when that memory
 * can go to the wire as it is (one member, counted unscaled), and how many
 * follow in the same part; NULL otherwise.
 */
const float *pr_engine_direct_src(const struct group *g, size_t at, size_t *n)
{
    if (!g->e->direct || g->nlocal != 1 ||
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

void pr_engine_write_results(struct group *g)
{
    for (size_t i = 0; i < g->nlocal; i++) {
        const struct pr_engine_member *mb = &g->local[i];
        if (mb->detached)
            continue;
        size_t off = 0;
        for (size_t p = 0; p < mb->nparts; p++) {
            const struct pr_engine_part *pt = &mb->parts[p];
            if (g->personal)
                pr_reduce_personal(pt->data, pt->data, g->scratch + off,
                                   mb->weight, g->k, pt->len);
            else
                memcpy(pt->data, g->scratch + off, pt->len * sizeof(float));
            off += pt->len;
        }
        g->e->st.bytes_reduced += g->total * sizeof(float);
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
