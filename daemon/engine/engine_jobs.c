/* SPDX-License-Identifier: MIT */
/*
 * A group's arithmetic on the engine's thread pool (pool.h): which work
 * goes to the pool, its jobs, and what the loop does when one is back.
 * The loop owns every struct gjob; pool threads read only the job's kind,
 * offset and group (which do not change while it is out) and the memory
 * those name: the members' parts and the scratch vector in its range.
 */
#include "daemon/engine/engine_int.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon/engine/pool.h"
#include "daemon/engine/reduce.h"

/*
 * Arithmetic a group hands to the pool: the sum of one chunk of its own
 * segment or the shadow's copy of one (posted when done), the write-back
 * of its results, or the whole mean of a group of this daemon alone.
 * Owned by the loop; the pool's threads read g, kind and off, which do
 * not change while it is out, and the memory that those name.
 */
struct gjob {
    struct pr_pool_job j; /* first: the pool hands it back */
    struct group *g;
    struct gjob *next; /* the group's jobs out */
    enum jkind kind;
    size_t off; /* J_SUM, J_SAVE: first float of the chunk; j.n floats */
};

/* Less than this and the work runs inline: a thread hand-off costs more. */
int pr_engine_offload(const struct group *g, size_t n)
{
    return g->e->pool && n >= PR_POOL_MIN_SLICE;
}

static void job_slice(void *arg, size_t lo, size_t hi)
{
    struct gjob *gj = arg;
    if (gj->kind == J_SUM)
        pr_engine_local_sum(gj->g, gj->off + lo, gj->off + hi, NULL, 0);
    else if (gj->kind == J_SAVE)
        pr_engine_shadow_save_range(gj->g, gj->off + lo, hi - lo);
    else if (gj->kind == J_WRITE)
        pr_engine_write_range(gj->g, gj->off + lo, gj->off + hi);
    else
        pr_engine_local_mean(gj->g, lo, hi);
}

/* A group that has ended reports once its last job is back (kick_cb). */
static void job_done(struct pr_pool_job *j, int status)
{
    struct gjob *gj = (struct gjob *)j;
    struct group *g = gj->g;
    struct gjob **pp = &g->jobs;
    while (*pp != gj)
        pp = &(*pp)->next;
    *pp = gj->next;
    g->jobs_out--;
    if ((gj->kind == J_SUM || gj->kind == J_SAVE) && status == 0 &&
        g->state == G_RUNNING && !g->e->closing) {
        int rc = gj->kind == J_SUM
                     ? pr_engine_post(g, 0, g->pos, gj->off, gj->j.n)
                     : pr_engine_post_own(g, gj->off, gj->j.n);
        if (rc < 0)
            pr_engine_finish(g, rc);
    }
    free(gj);
    if (g->state == G_DRAINING && g->jobs_out == 0)
        pr_engine_kick(g->e);
}

/* 0: done() of the job will come (job_done); -ENOMEM, -EINVAL. */
int pr_engine_submit(struct group *g, enum jkind kind, size_t off, size_t n)
{
    struct gjob *gj = calloc(1, sizeof(*gj));
    if (!gj)
        return -ENOMEM;
    /*
     * A write-back goes ahead of the sums waiting:
     * pr_engine_write_back_fits() judged its deadline as if it began now,
     * and behind other groups' sums it could end after the trainer gave up
     * on it.
     */
    gj->j = (struct pr_pool_job){.fn = job_slice,
                                 .arg = gj,
                                 .n = n,
                                 .done = job_done,
                                 .first = kind == J_WRITE || kind == J_MEAN};
    gj->g = g;
    gj->kind = kind;
    gj->off = off;
    int rc = pr_pool_submit(g->e->pool, &gj->j);
    if (rc < 0) {
        free(gj);
        return rc;
    }
    gj->next = g->jobs;
    g->jobs = gj;
    g->jobs_out++;
    return 0;
}

/* Slices no thread has begun are dropped; job_done() still comes. */
void pr_engine_cancel_jobs(struct group *g)
{
    for (struct gjob *gj = g->jobs; gj; gj = gj->next)
        pr_pool_cancel(g->e->pool, &gj->j);
}

int pr_engine_set_threads(struct pr_engine *e, unsigned nthreads)
{
    if (nthreads > PR_POOL_MAX_THREADS)
        return -EINVAL;
    if (e->pool && pr_pool_outstanding(e->pool) > 0)
        return -EBUSY;
    struct pr_pool *p = NULL;
    if (nthreads > 1) {
        int rc = pr_pool_create(e->loop, nthreads, &p);
        if (rc < 0)
            return rc;
    }
    pr_pool_destroy(e->pool);
    e->pool = p;
    return 0;
}

/* Results [off, off + n) into the members: on the pool, or inline. */
static void write_span(struct group *g, enum jkind kind, size_t off, size_t n)
{
    if (pr_engine_offload(g, n) && pr_engine_submit(g, kind, off, n) == 0)
        return;
    if (kind == J_MEAN)
        pr_engine_local_mean(g, off, off + n);
    else
        pr_engine_write_range(g, off, off + n);
}

/* Whether segment seg is one the shadow wrote into its member already. */
static int shadow_seg(const struct group *g, uint32_t seg)
{
    return g->shadow && (seg == g->pos || seg == (g->pos + 1) % g->m);
}

size_t pr_engine_write_back_floats(const struct group *g)
{
    if (!g->shadow)
        return g->total;
    size_t n = 0;
    for (uint32_t s = 0; s < g->m; s++) {
        size_t start, len;
        pr_ring_segment(g->total, g->m, s, &start, &len);
        n += shadow_seg(g, s) ? 0 : len;
    }
    return n;
}

void pr_engine_write_back(struct group *g)
{
    enum jkind kind = g->m == 1 ? J_MEAN : J_WRITE;
    for (size_t i = 0; i < g->nlocal; i++)
        if (!g->local[i].detached)
            g->e->st.bytes_reduced += g->total * sizeof(float);
    if (!g->shadow) {
        write_span(g, kind, 0, g->total);
        return;
    }
    for (uint32_t s = 0; s < g->m; s++) {
        size_t start, len;
        pr_ring_segment(g->total, g->m, s, &start, &len);
        if (!shadow_seg(g, s) && len > 0)
            write_span(g, kind, start, len);
    }
}
