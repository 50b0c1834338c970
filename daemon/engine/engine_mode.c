/* SPDX-License-Identifier: MIT */
/*
 * How a group gets its results into its local members' tensors: in place
 * (final floats written there as they come and forwarded from there), the
 * shadow (two segments written as they come, what they replace kept to be
 * put back if the group fails; engine_int.h, struct group), or written
 * back at the end. The choice, and what each costs against the deadline,
 * are rules of their own; a group's life (engine.c) only asks them.
 */
#include "daemon/engine/engine_int.h"

/*
 * The write-back of a group's results is counted at this many bytes per
 * microsecond (1 GB/s, far below what memcpy manages, with room for a
 * loaded machine): a write-back that would not end by the deadline is not
 * started.
 */
#define COPY_BYTES_PER_US 1000
/*
 * The shadow (engine_int.h) is used only where putting a failed group's
 * floats back (at most its own and its completed segment) takes about a
 * quarter of a second at COPY_BYTES_PER_US: a group that fails at its
 * deadline (the trainer's plus PR_NODE_GRACE_MS) restores before done(),
 * and so before its trainer is answered, which the library waits a
 * second past the trainer's deadline for. Larger models are written back
 * at the end.
 */
#define SHADOW_MAX_RESTORE_BYTES (256ull << 20)

/* The most a shadow group of `total` floats over m daemons puts back. */
static uint64_t shadow_restore_bytes(size_t total, uint32_t m)
{
    return ((uint64_t)total + m - 1) / m * 2 * sizeof(float);
}

void pr_engine_choose_mode(struct group *g, const struct pr_engine_group *spec)
{
    struct pr_engine *e = g->e;
    uint32_t m = spec->m;
    /* An encoded group's chunks go out of and land in its wire buffer. */
    if (g->enc != PR_WIRE_FP32) {
        g->in_place = g->shadow = 0;
        return;
    }
    /* Forwarding from the member's memory needs direct sends. */
    g->in_place = m > 1 && spec->nlocal == 1 && spec->local[0].in_place &&
                  !spec->personal && e->direct;
    /*
     * The shadow (struct group) keeps the own segment's originals where
     * the scratch vector is free: it is when that segment goes to the
     * wire from the member's memory (pr_engine_direct_src).
     */
    g->shadow =
        m > 1 && spec->nlocal == 1 && !g->in_place && !spec->personal &&
        e->direct && !spec->local[0].detached &&
        (g->mean_scale != 0 || spec->local[0].weight == 1.0) &&
        shadow_restore_bytes(spec->total, m) <= SHADOW_MAX_RESTORE_BYTES;
}

/*
 * Whether the results can be written into the members' tensors before the
 * deadline (see COPY_BYTES_PER_US): a trainer whose daemon writes after it
 * may have been told already, or have decided, that the reduce failed.
 */
int pr_engine_write_back_fits(const struct group *g)
{
    uint64_t bytes =
        (uint64_t)pr_engine_write_back_floats(g) * sizeof(float) * g->nlocal;
    /* int8's feedback pass first: lost read, each member's err written. */
    if (g->lost)
        bytes += (uint64_t)g->total * sizeof(float) * (1 + g->nlocal);
    return uv_hrtime() + bytes * 1000 / COPY_BYTES_PER_US <= g->deadline_ns;
}

/*
 * Just before a shadow group's done(), once nothing writes or reads its
 * member's memory: a failed group puts back the floats it replaced.
 */
void pr_engine_shadow_settle(struct group *g, int status)
{
    if (!g->shadow || status == 0)
        return;
    pr_engine_shadow_restore(g);
    g->e->st.groups_restored++;
}
