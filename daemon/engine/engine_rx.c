/* SPDX-License-Identifier: MIT */
/*
 * A received chunk's way into its running group: only from the left
 * neighbour, checked and claimed (engine_chunk.c), absorbed (summed,
 * copied or written into the member: engine_local.c) and forwarded to the
 * right; and, over a transport that reads payloads straight into place
 * (TCP), where a chunk may land before it is in and what happens when it
 * has. Apart from a group's life (engine.c), which hands chunks here and
 * gets back the posts and the group's end they lead to.
 */
#include "daemon/engine/engine_int.h"

#include <errno.h>

#include "daemon/base/log.h"
#include "daemon/engine/reduce.h"

struct fwd {
    uint32_t step, seg;
};

/* Forwards final floats from the member's memory (a chunk per part). */
static int post_piece(struct group *g, float *x, size_t at, size_t len,
                      const float *in, void *arg)
{
    (void)in;
    const struct fwd *f = arg;
    return pr_engine_post_from(g, f->step, f->seg, at, len, x);
}

/*
 * Only the left neighbour sends into this group: a chunk from another
 * node (a stray of an older session with the same id, or a node that is
 * not in the group) is dropped, so it cannot fail the group.
 */
static int from_left(struct group *g, uint32_t from)
{
    if (from == g->left)
        return 1;
    g->e->st.chunks_dropped++;
    /* Once per group: a peer that keeps sending cannot flood the log. */
    if (!g->stray_logged)
        pr_warn("group %llu: chunk from node %u, which is not the left "
                "neighbour (node %u): dropped (and any more)",
                (unsigned long long)g->id, from, g->left);
    g->stray_logged = 1;
    return 0;
}

/*
 * Checks the chunk against the group and claims its floats: 0, or the
 * group failed (-EPROTO for a bad chunk, logged; -ENOMEM).
 */
static int claim_chunk(struct group *g, uint32_t from,
                       const struct pr_chunk_hdr *h)
{
    const char *why = NULL;
    int claimed = 0;
    if (pr_engine_chunk_ok(g, h, &why)) {
        claimed = pr_engine_step_claim(&g->steps[h->step], h->off,
                                       h->off + h->nfloats);
        if (claimed == -EPROTO)
            why = "floats that had arrived already";
        else if (claimed == -E2BIG)
            why = "chunks scattered over too many pieces";
    }
    if (claimed == -ENOMEM) {
        pr_engine_finish(g, -ENOMEM);
        return -ENOMEM;
    }
    if (why) {
        pr_warn("group %llu: bad chunk from node %u (step %u seg %u off "
                "%llu n %u): %s",
                (unsigned long long)g->id, from, h->step, h->seg,
                (unsigned long long)h->off, h->nfloats, why);
        pr_engine_finish(g, -EPROTO);
        return -EPROTO;
    }
    return 0;
}

/*
 * A claimed chunk into the group: summed in during the reduce-scatter
 * (the last step of it also scales), copied during the all-gather, or
 * written into the lone member's tensors in place; then counted.
 */
static int absorb(struct group *g, const struct pr_chunk_hdr *h,
                  const float *data)
{
    uint32_t m = g->m;
    /* Recorded first: floats folded into the member can always go back. */
    if (g->shadow && h->step == m - 2 && h->nfloats > 0) {
        int rc = pr_engine_step_claim(&g->folded, h->off, h->off + h->nfloats);
        if (rc < 0)
            return rc;
    }
    pr_engine_absorb(g, h, data);

    struct step *s = &g->steps[h->step];
    s->got += h->nfloats;
    s->chunks++;
    size_t start, len;
    pr_ring_segment(g->total, m, h->seg, &start, &len);
    if (s->got == len)
        g->steps_left--;
    return 0;
}

/*
 * The chunk just absorbed is the next step's chunk: it goes right, from
 * the member's memory when in place and final (a chunk per part; an empty
 * segment's chunk has no piece and goes as it came).
 */
static int forward(struct group *g, const struct pr_chunk_hdr *h)
{
    if (h->step + 1 >= 2 * (g->m - 1))
        return 0;
    struct fwd f = {h->step + 1, h->seg};
    if (pr_engine_in_member(g, h) && h->nfloats > 0)
        return pr_engine_each_piece(g, h->off, h->nfloats, post_piece, NULL,
                                    &f);
    return pr_engine_post(g, h->step + 1, h->seg, h->off, h->nfloats);
}

/* A claimed chunk's floats, wherever they are: summed, counted, sent on. */
static void absorb_and_forward(struct group *g, const struct pr_chunk_hdr *h,
                               const float *data)
{
    int rc = absorb(g, h, data);
    if (rc == 0)
        rc = forward(g, h);
    if (rc < 0)
        pr_engine_finish(g, rc);
    else if (g->steps_left == 0)
        pr_engine_finish(g, 0);
}

static void land_cb(struct pr_landing *l, uint32_t from,
                    const struct pr_chunk_hdr *h, int status);

void pr_engine_apply_chunk(struct group *g, uint32_t from,
                           const struct pr_chunk_hdr *h, const void *data)
{
    /*
     * A chunk after the deadline (the loop was held up, or the sweep has
     * not come round yet) fails the group first: in place it would be
     * written into a member's tensors.
     */
    if (pr_engine_past_deadline(g)) {
        pr_engine_fail_late(g);
        return;
    }
    if (!from_left(g, from) || claim_chunk(g, from, h) < 0)
        return;
    if (g->enc != PR_WIRE_FP32) {
        /* Decoded into its place, as if it had landed there. */
        pr_engine_wire_in(g, h, data);
        data = g->scratch + h->off;
    }
    absorb_and_forward(g, h, data);
}

/*
 * Where chunk h's payload may be read to, by a transport that can (TCP):
 * its own place in the scratch vector, claimed now. The chunk sums or
 * copies there in place when it has landed (land_cb). Early chunks, a
 * group past its deadline and chunks from elsewhere than the left take
 * the usual way (on_chunk: stashed, failed or dropped there).
 */
int pr_engine_reserve(struct pr_engine *e, uint32_t from,
                      const struct pr_chunk_hdr *h, struct pr_landing *out)
{
    struct group *g = pr_engine_find(e, h->group_id);
    if (!g || g->state != G_RUNNING || h->nfloats == 0 || from != g->left ||
        pr_engine_past_deadline(g))
        return 0;
    /*
     * The shadow's own segment lands in the member's memory (its originals
     * are where it would land otherwise), unless the chunk spans two of
     * its tensors: then it comes through on_chunk and is copied.
     */
    float *dst = pr_engine_member_dst(g, h);
    if (!dst && g->shadow && h->step >= g->m - 1 && h->seg == g->pos)
        return 0;
    if (claim_chunk(g, from, h) < 0)
        return 0;
    g->rx_out++;
    g->rx_member += dst != NULL;
    if (dst)
        out->dst = dst;
    else if (g->enc != PR_WIRE_FP32)
        out->dst = pr_engine_wire_at(g, h->step, h->seg, h->off);
    else
        out->dst = g->scratch + h->off;
    out->scratch = dst == NULL;
    out->token = g;
    out->land = land_cb;
    return 1;
}

static void land_cb(struct pr_landing *l, uint32_t from,
                    const struct pr_chunk_hdr *h, int status)
{
    struct group *g = l->token;
    struct pr_engine *e = g->e;
    (void)from;
    g->rx_out--;
    /* Only an fp32 group (a shadow) lands in a member's memory. */
    int member = g->enc == PR_WIRE_FP32 && l->dst != g->scratch + h->off;
    g->rx_member -= member;
    if (g->state == G_RUNNING && status < 0)
        pr_engine_finish(g,
                         status); /* its floats are claimed and will not come */
    else if (g->state == G_RUNNING && pr_engine_past_deadline(g))
        pr_engine_fail_late(g);
    else if (g->state == G_RUNNING && g->enc != PR_WIRE_FP32) {
        pr_engine_wire_in(g, h, l->dst);
        absorb_and_forward(g, h, g->scratch + h->off);
    } else if (g->state == G_RUNNING)
        absorb_and_forward(g, h, l->dst);
    /* A group that ended waits for its member's landings to report. */
    int wake = member && g->rx_member == 0 && g->state == G_DRAINING &&
               !g->reported && !e->closing;
    /*
     * A landing called off comes from a link's close, which the engine
     * itself may have caused while it walks its groups: the group is
     * freed from kick_cb then, not here.
     */
    if (status == 0 || e->closing)
        pr_engine_maybe_free(g);
    else if (g->rx_out == 0)
        pr_engine_kick(e);
    if (wake)
        pr_engine_kick(e);
}
