/* SPDX-License-Identifier: MIT */
#include "daemon/engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/engine_int.h"
#include "daemon/base/log.h"
#include "daemon/engine/reduce.h"

/* How often deadlines and the stash are swept. */
#define ENGINE_SWEEP_MS 50
/*
 * How long past the deadline a landing into a shadow member may take to
 * end by itself before the link it comes over is reset (sweep_cb): a
 * landing nearly done on a slow link is not worth the link.
 */
#define SHADOW_LAND_GRACE_NS (100ull * 1000000)

static void finish(struct group *g, int status);
static void sweep_cb(uv_timer_t *t);
static void kick_cb(uv_timer_t *t);

struct pr_engine *pr_engine_create(uv_loop_t *loop, size_t chunk_floats,
                                   size_t stash_max_bytes,
                                   pr_engine_resolve_fn resolve, void *ctx)
{
    if (chunk_floats == 0 || !resolve)
        return NULL;
    struct pr_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->loop = loop;
    e->chunk_floats = chunk_floats;
    e->stash_max = stash_max_bytes;
    e->stash_ms = PR_ENGINE_STASH_MS;
    e->resolve = resolve;
    e->ctx = ctx;
    e->stash_tail = &e->stash;
    uv_timer_init(loop, &e->sweep);
    uv_timer_init(loop, &e->kick);
    e->sweep.data = e;
    e->kick.data = e;
    return e;
}

void pr_engine_set_allocator(struct pr_engine *e,
                             void *(*alloc)(void *ctx, size_t bytes),
                             void (*release)(void *ctx, void *p), void *ctx)
{
    e->mem_alloc = alloc;
    e->mem_free = release;
    e->mem_ctx = ctx;
}

void pr_engine_set_direct(struct pr_engine *e, int direct)
{
    e->direct = direct;
}

void pr_engine_set_chunk(struct pr_engine *e, size_t chunk_floats)
{
    if (chunk_floats > 0)
        e->chunk_floats = chunk_floats;
}

void pr_engine_set_stash_ms(struct pr_engine *e, uint32_t stash_ms)
{
    e->stash_ms = stash_ms ? stash_ms : PR_ENGINE_STASH_MS;
}

static void group_free(struct group *g)
{
    free(g->ring);
    free(g->local);
    pr_engine_wire_free(g);
    pr_engine_scratch_put(g->e, g->scratch, g->total * sizeof(float));
    for (uint32_t i = 0; g->steps && i < 2 * (g->m - 1); i++)
        free(g->steps[i].spans);
    free(g->steps);
    free(g->own_sent.spans);
    free(g->folded.spans);
    free(g);
}

static void unlink_group(struct group *g)
{
    struct group **pp = &g->e->groups;
    while (*pp && *pp != g)
        pp = &(*pp)->next;
    if (*pp)
        *pp = g->next;
}

/* The engine outlives destroy() until its timers closed and no send posted
 * by one of its groups is still out with a transport. */
static void maybe_free_engine(struct pr_engine *e)
{
    if (e->closing == 3 && !e->groups)
        free(e);
}

static void engine_free_cb(uv_handle_t *h)
{
    struct pr_engine *e = h->data;
    e->closing++;
    maybe_free_engine(e);
}

void pr_engine_destroy(struct pr_engine *e)
{
    if (!e)
        return;
    /*
     * Pool threads may be in the members' memory: what a running group
     * had queued is dropped, what runs (and a write-back, which decides
     * the group's outcome) is waited for, before any done().
     */
    e->closing = 1;
    for (struct group *g = e->groups; g && e->pool; g = g->next)
        if (g->state == G_RUNNING)
            pr_engine_cancel_jobs(g);
    pr_pool_destroy(e->pool);
    e->pool = NULL;
    struct group **pp = &e->groups;
    while (*pp) {
        struct group *g = *pp;
        if (!g->reported) {
            /*
             * A group that finished but was not reported yet keeps its
             * outcome: on success its results are in the members' tensors.
             */
            int status = g->state == G_RUNNING ? -ECANCELED : g->status;
            g->reported = 1;
            g->state = G_DRAINING;
            /*
             * Put back without waiting for landings into the member or
             * sends from it: the node destroys its transports first,
             * which ends them all (a caller that did not would have them
             * write or read the member after its done()).
             */
            pr_engine_shadow_settle(g, status);
            if (g->done)
                g->done(g->arg, g->id, status);
        }
        g->done = NULL;
        if (g->sends_done == g->sends_posted && g->rx_out == 0) {
            *pp = g->next;
            group_free(g);
        } else {
            pp = &g->next;
        }
    }
    pr_engine_stash_clear(e);
    pr_engine_scratch_release(e, e->spare);
    e->spare = NULL;
    e->closing = 1;
    uv_close((uv_handle_t *)&e->sweep, engine_free_cb);
    uv_close((uv_handle_t *)&e->kick, engine_free_cb);
}

struct group *pr_engine_find(struct pr_engine *e, uint64_t id)
{
    for (struct group *g = e->groups; g; g = g->next)
        if (g->id == id)
            return g;
    return NULL;
}

static void arm_sweep(struct pr_engine *e)
{
    if (uv_is_active((uv_handle_t *)&e->sweep))
        return;
    /*
     * The spare's time counts while groups run (the sweep's), not while
     * the engine was idle: a large job back after a pause finds it.
     */
    e->spare_ms = uv_now(e->loop);
    uv_timer_start(&e->sweep, sweep_cb, ENGINE_SWEEP_MS, ENGINE_SWEEP_MS);
}

/* Reported, and nothing (send, job, landing) still uses its memory. */
static int freeable(const struct group *g)
{
    return g->state == G_DRAINING && g->reported &&
           g->sends_done == g->sends_posted && g->jobs_out == 0 &&
           g->rx_out == 0;
}

/* Frees g if nothing uses it any more (the engine too, once closing). */
void pr_engine_maybe_free(struct group *g)
{
    if (!freeable(g))
        return;
    struct pr_engine *e = g->e;
    unlink_group(g);
    group_free(g);
    if (e->closing)
        maybe_free_engine(e);
}

static void send_done_cb(void *arg, int status)
{
    struct group *g = arg;
    g->sends_done++;
    if (status < 0 && g->state == G_RUNNING) {
        pr_warn("group %llu: send to node %u failed: %s",
                (unsigned long long)g->id, g->right, strerror(-status));
        finish(g, status);
    }
    /* Such a group is reported once nothing reads its member's memory. */
    if (g->state == G_DRAINING && !g->reported && g->reads_member &&
        g->sends_done == g->sends_posted && !g->e->closing)
        uv_timer_start(&g->e->kick, kick_cb, 0, 0);
    pr_engine_maybe_free(g);
}

/* Posts floats [off, off + n) from src (NULL: the scratch vector). */
int pr_engine_post_from(struct group *g, uint32_t step, uint32_t seg,
                        size_t off, size_t n, const float *src)
{
    struct pr_link *l = g->e->resolve(g->e->ctx, g->right);
    if (!l)
        return -ENOTCONN;
    struct pr_chunk_hdr h = {
        .group_id = g->id,
        .total = g->total,
        .off = off,
        .nfloats = (uint32_t)n,
        .step = step,
        .seg = seg,
        .enc = g->enc,
    };
    const void *data = src ? (const void *)src : g->scratch + off;
    /* Encoded, what goes out is the wire buffer's, not the member's. */
    if (g->enc != PR_WIRE_FP32)
        data = pr_engine_wire_out(g, step, seg, off, n, src);
    else if (src)
        g->reads_member = 1;
    int rc = l->ops->send(l, &h, data, send_done_cb, g);
    if (rc == 0) {
        g->sends_posted++;
        g->e->st.wire_bytes[g->enc] += pr_chunk_payload_bytes(&h);
    }
    return rc;
}

static int post(struct group *g, uint32_t step, uint32_t seg, size_t off,
                size_t n)
{
    return pr_engine_post_from(g, step, seg, off, n, NULL);
}

int pr_engine_post(struct group *g, uint32_t step, uint32_t seg, size_t off,
                   size_t n)
{
    return post(g, step, seg, off, n);
}

int pr_engine_post_own(struct group *g, size_t off, size_t n)
{
    size_t in_part;
    const float *src = pr_engine_direct_src(g, off, &in_part);
    int rc = pr_engine_post_from(g, 0, g->pos, off, n, src);
    if (rc == 0)
        rc = pr_engine_step_claim(&g->own_sent, off, off + n);
    return rc;
}

/*
 * Step 0: this daemon's own segment, cut into chunks of its chunk size. A
 * lone local member's memory goes to the wire as it is (its region of the
 * scratch vector is only ever written by the all-gather, or holds the
 * shadow's copy); otherwise each chunk is summed into the scratch vector
 * just before it is posted. The other segments are summed when their
 * chunks arrive (local_sum).
 */
static int sum_and_post_own_segment(struct group *g)
{
    size_t start, len;
    pr_ring_segment(g->total, g->m, g->pos, &start, &len);
    size_t c = g->e->chunk_floats;
    /* int8 chunks are whole blocks but the segment's last (wire.h). */
    if (g->enc == PR_WIRE_INT8)
        c = (c + PR_WIRE_BLOCK - 1) / PR_WIRE_BLOCK * PR_WIRE_BLOCK;
    if (len == 0)
        return post(g, 0, g->pos, start, 0);
    for (size_t off = 0, n; off < len; off += n) {
        size_t in_part;
        n = len - off < c ? len - off : c;
        const float *src = pr_engine_direct_src(g, start + off, &in_part);
        if (src && in_part < n)
            n = in_part; /* a chunk never spans two tensors */
        int rc;
        if (src && g->shadow && pr_engine_offload(g, n)) {
            /*
             * Posted when copied aside: the loop does not copy the whole
             * segment now (half of the model between 2 daemons: 128 MiB
             * held every other job's groups back for about 100 ms, make
             * bench-jobs), and no chunk of it can come back before its
             * copy is made.
             */
            rc = pr_engine_submit(g, J_SAVE, start + off, n);
        } else if (src) {
            rc = pr_engine_post_own(g, start + off, n);
            /* Saved while the kernel's copy of it may still be in cache. */
            if (rc == 0 && g->shadow)
                pr_engine_shadow_save(g, start + off, n);
        } else if (pr_engine_offload(g, n)) {
            /* Posted when summed: this sum overlaps the previous send. */
            rc = pr_engine_submit(g, J_SUM, start + off, n);
        } else {
            pr_engine_local_sum(g, start + off, start + off + n, NULL, 0);
            rc = post(g, 0, g->pos, start + off, n);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

void pr_engine_fail_late(struct group *g)
{
    pr_warn("group %llu: deadline passed with %u of %u ring steps missing",
            (unsigned long long)g->id, g->steps_left, 2 * (g->m - 1));
    finish(g, -ETIMEDOUT);
}

/*
 * The one transition out of G_RUNNING: records the status and schedules
 * done(). The group stays allocated while sends that read its scratch
 * vector are posted.
 */
static void finish(struct group *g, int status)
{
    if (g->state != G_RUNNING)
        return;
    if (status == 0 && !g->in_place && !pr_engine_write_back_fits(g)) {
        pr_warn("group %llu: complete, but too late to write its results "
                "(%zu floats for %zu local members) before the deadline",
                (unsigned long long)g->id, g->total, g->nlocal);
        status = -ETIMEDOUT;
    }
    g->state = G_DRAINING;
    g->status = status;
    if (status == 0 && g->in_place) {
        g->e->st.bytes_reduced += g->total * sizeof(float);
        g->e->st.groups_ok++;
        g->e->st.groups_in_place++;
    } else if (status == 0) {
        pr_engine_wire_feedback(g);
        pr_engine_write_back(g);
        g->e->st.groups_ok++;
        g->e->st.groups_shadow += g->shadow != 0;
    } else {
        g->e->st.groups_failed++;
        if (g->e->pool)
            pr_engine_cancel_jobs(g);
    }
    if (!g->e->closing)
        uv_timer_start(&g->e->kick, kick_cb, 0, 0);
}

void pr_engine_finish(struct group *g, int status)
{
    finish(g, status);
}

void pr_engine_kick(struct pr_engine *e)
{
    if (!e->closing)
        uv_timer_start(&e->kick, kick_cb, 0, 0);
}

static void kick_cb(uv_timer_t *t)
{
    struct pr_engine *e = t->data;
    struct group **pp = &e->groups;
    while (*pp) {
        struct group *g = *pp;
        /*
         * Sends from the member's memory (in place, or a direct step-0
         * send) may still be reading it: its trainer gets it back once
         * those are done (every posted send completes: a dead link fails
         * them, and sweep_cb resets a stalled one at the deadline).
         */
        if (g->state == G_DRAINING && !g->reported && g->jobs_out == 0 &&
            g->rx_member == 0 &&
            (!g->reads_member || g->sends_done == g->sends_posted)) {
            g->reported = 1;
            pr_engine_shadow_settle(g, g->status);
            if (g->done)
                g->done(g->arg, g->id, g->status);
            /* done() may have started or aborted groups: rescan. */
            pp = &e->groups;
            continue;
        }
        if (freeable(g)) {
            *pp = g->next;
            group_free(g);
            continue;
        }
        pp = &g->next;
    }
}

int pr_engine_start(struct pr_engine *e, const struct pr_engine_group *spec)
{
    if (!spec->nlocal || !spec->local || spec->m == 0 || spec->pos >= spec->m ||
        !spec->ring || spec->k < spec->nlocal || spec->total == 0 ||
        spec->wire >= PR_WIRE_COUNT)
        return -EINVAL;
    if (pr_engine_find(e, spec->id))
        return -EEXIST;
    for (size_t i = 0; i < spec->nlocal; i++) {
        size_t sum = 0;
        for (size_t p = 0; p < spec->local[i].nparts; p++)
            sum += spec->local[i].parts[p].len;
        if (sum != spec->total)
            return -EINVAL;
    }
    uint32_t m = spec->m;
    if (m > 1) {
        if (!e->resolve(e->ctx, spec->ring[(spec->pos + 1) % m]) ||
            !e->resolve(e->ctx, spec->ring[(spec->pos + m - 1) % m]))
            return -ENOTCONN;
    }

    struct group *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->e = e;
    g->id = spec->id;
    g->total = spec->total;
    g->k = spec->k;
    g->m = m;
    g->pos = spec->pos;
    g->personal = spec->personal;
    g->mean_scale = pr_engine_uniform_scale(spec);
    /* Alone, nothing goes over the wire. */
    g->enc = m > 1 ? spec->wire : PR_WIRE_FP32;
    pr_engine_choose_mode(g, spec);
    g->done = spec->done;
    g->arg = spec->arg;
    g->nlocal = spec->nlocal;
    g->ring = malloc(m * sizeof(*g->ring));
    g->local = malloc(spec->nlocal * sizeof(*g->local));
    /* A group of this daemon alone sums straight into its members. */
    if (m > 1)
        g->scratch = pr_engine_scratch_get(e, spec->total * sizeof(float));
    g->steps = calloc(m > 1 ? 2 * (m - 1) : 1, sizeof(*g->steps));
    if (!g->ring || !g->local || (m > 1 && !g->scratch) || !g->steps) {
        group_free(g);
        return -ENOMEM;
    }
    memcpy(g->ring, spec->ring, m * sizeof(*g->ring));
    memcpy(g->local, spec->local, spec->nlocal * sizeof(*g->local));
    int rc = pr_engine_wire_setup(g);
    if (rc < 0) {
        group_free(g);
        return rc;
    }
    g->left = g->ring[(g->pos + m - 1) % m];
    g->right = g->ring[(g->pos + 1) % m];
    g->steps_left = m > 1 ? 2 * (m - 1) : 0;
    g->deadline_ns = uv_hrtime() + (uint64_t)spec->timeout_ms * 1000000;

    g->next = e->groups;
    e->groups = g;
    if (g->id > e->max_started)
        e->max_started = g->id;
    if (m > 1)
        e->st.wire_groups[g->enc]++;
    arm_sweep(e);

    /* 1. Alone: the weighted local sum goes into the members at once. */
    if (m == 1) {
        finish(g, 0);
        return 0;
    }
    /*
     * 2. Our segment goes right, and the shadow saves it while it travels;
     * then what came early from the left.
     */
    rc = sum_and_post_own_segment(g);
    if (rc < 0)
        finish(g, rc);
    g->saved = g->shadow;
    /* Even a failed group takes its early chunks out of the stash. */
    pr_engine_stash_replay(e, g);
    return 0;
}

void pr_engine_on_chunk(struct pr_engine *e, uint32_t from,
                        const struct pr_chunk_hdr *h, const void *data)
{
    struct group *g = pr_engine_find(e, h->group_id);
    if (g) {
        if (g->state == G_RUNNING)
            pr_engine_apply_chunk(g, from, h, data);
        return;
    }
    if (h->group_id <= e->max_started) {
        e->st.chunks_dropped++;
        pr_dbg("group %llu: stale chunk from node %u dropped",
               (unsigned long long)h->group_id, from);
        return;
    }
    if (pr_engine_stash_chunk(e, from, h, data) == 0)
        arm_sweep(e);
}

void pr_engine_link_down(struct pr_engine *e, uint32_t node, int status)
{
    for (struct group *g = e->groups; g; g = g->next) {
        if (g->state != G_RUNNING)
            continue;
        for (uint32_t i = 0; i < g->m; i++) {
            if (g->ring[i] == node) {
                pr_warn("group %llu: node %u lost: %s",
                        (unsigned long long)g->id, node, strerror(-status));
                finish(g, status);
                break;
            }
        }
    }
    /* Early chunks from that node belong to groups that cannot finish. */
    pr_engine_stash_drop_from(e, node);
}

void pr_engine_new_session(struct pr_engine *e, uint64_t id_base)
{
    if (id_base < e->max_started)
        e->max_started = id_base;
}

int pr_engine_abort(struct pr_engine *e, uint64_t id, int status)
{
    struct group *g = pr_engine_find(e, id);
    if (!g || g->state != G_RUNNING)
        return -ENOENT;
    finish(g, status);
    return 0;
}

int pr_engine_detach(struct pr_engine *e, uint64_t id, uint32_t rank)
{
    struct group *g = pr_engine_find(e, id);
    if (!g || g->state != G_RUNNING)
        return -ENOENT;
    for (size_t i = 0; i < g->nlocal; i++) {
        if (g->local[i].rank == rank) {
            /*
             * In place, final floats keep going into its tensors (they are
             * what is forwarded), within that contract: each float as it
             * was or at its final value. The shadow stops: what comes now
             * goes into the scratch vector, and nothing is put back later
             * (the trainer, told its connection broke, may be writing its
             * tensors again by then); what it wrote, and landings under
             * way, leave each float as it was or at its final value.
             */
            g->local[i].detached = 1;
            g->shadow = 0;
            return 0;
        }
    }
    return -ENOENT;
}

static void sweep_cb(uv_timer_t *t)
{
    struct pr_engine *e = t->data;
    uint64_t now = uv_now(e->loop);
    for (struct group *g = e->groups; g; g = g->next) {
        int late = pr_engine_past_deadline(g);
        if (g->state == G_RUNNING && late)
            pr_engine_fail_late(g);
        /*
         * Past the deadline a group that waits for sends from its member's
         * memory drops the right link, which fails them: the trainer gets
         * its answer within its timeout, and the neighbour cannot finish
         * on floats the trainer changes afterwards.
         */
        if (g->state == G_DRAINING && !g->reported && g->reads_member &&
            g->sends_done != g->sends_posted && !g->reset_sent && late) {
            struct pr_link *l = e->resolve(e->ctx, g->right);
            g->reset_sent = 1;
            pr_warn("group %llu: %zu sends from a trainer's memory still out "
                    "at the deadline",
                    (unsigned long long)g->id, g->sends_posted - g->sends_done);
            if (l && l->ops->reset)
                l->ops->reset(l, -ETIMEDOUT);
        }
        /*
         * Likewise a landing into a shadow member's memory that stalled:
         * the left link goes, the landing fails, and the member's floats
         * can be put back before its trainer's answer.
         */
        if (g->state == G_DRAINING && !g->reported && g->rx_member > 0 &&
            !g->left_reset &&
            uv_hrtime() >= g->deadline_ns + SHADOW_LAND_GRACE_NS) {
            struct pr_link *l = e->resolve(e->ctx, g->left);
            g->left_reset = 1;
            pr_warn("group %llu: a chunk landing in a trainer's memory "
                    "stalled past the deadline",
                    (unsigned long long)g->id);
            if (l && l->ops->reset)
                l->ops->reset(l, -ETIMEDOUT);
        }
    }
    pr_engine_stash_expire(e, now);
    pr_engine_scratch_expire(e, now);
    if (!e->groups && !e->stash)
        uv_timer_stop(&e->sweep);
}

void pr_engine_stats(const struct pr_engine *e, struct pr_engine_stats *st)
{
    *st = e->st;
}

void pr_engine_stats_add(struct pr_engine_stats *sum,
                         const struct pr_engine_stats *x)
{
    sum->groups_ok += x->groups_ok;
    sum->groups_failed += x->groups_failed;
    sum->groups_in_place += x->groups_in_place;
    sum->groups_shadow += x->groups_shadow;
    sum->groups_restored += x->groups_restored;
    sum->chunks_stashed += x->chunks_stashed;
    sum->chunks_dropped += x->chunks_dropped;
    sum->bytes_reduced += x->bytes_reduced;
    for (uint32_t w = 0; w < PR_WIRE_COUNT; w++) {
        sum->wire_groups[w] += x->wire_groups[w];
        sum->wire_bytes[w] += x->wire_bytes[w];
    }
}

size_t pr_engine_running(const struct pr_engine *e)
{
    size_t n = 0;
    for (const struct group *g = e->groups; g; g = g->next)
        if (g->state == G_RUNNING)
            n++;
    return n;
}

static void sink_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const void *data)
{
    pr_engine_on_chunk(ctx, node, h, data);
}

static void sink_on_link_down(void *ctx, uint32_t node, int status)
{
    pr_engine_link_down(ctx, node, status);
}

static int sink_reserve(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                        struct pr_landing *out)
{
    return pr_engine_reserve(ctx, node, h, out);
}

struct pr_link_sink pr_engine_sink(struct pr_engine *e)
{
    return (struct pr_link_sink){.on_chunk = sink_on_chunk,
                                 .on_link_down = sink_on_link_down,
                                 .reserve = sink_reserve,
                                 .ctx = e};
}
