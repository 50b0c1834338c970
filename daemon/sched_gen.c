/*
 * The group generator: union-find over the live workers, connectivity
 * windows and steered member selection. Called only from sched_core.c, on
 * the thread that owns the core.
 *
 * Design
 *
 *  1. Every formed group merges its members in a union-find over the live
 *     workers (union by size, path halving). Per root it also keeps qcnt,
 *     the component's queued workers, so the core knows at O(1) how many
 *     components the ready queue spans (qcomps). Each ready, cancel and
 *     group member costs one find: O(alpha(n)) amortized, no scans.
 *
 *  2. A window counts member-updates (the sum of group sizes) since the
 *     last reset. When they reach B x live: if the union already connects
 *     every live worker the window ends "unaided"; otherwise, with the
 *     generator on (isolation_bound > 0, policy not allreduce), the core
 *     starts steering; with it off the window ends unconnected (windows are
 *     then kept for statistics only, with B = stats_bound).
 *
 *  3. Steering changes which queued workers a due group takes, never when
 *     a group is due: the oldest queued worker always, then, in FIFO order,
 *     one worker of each component not yet in the group until the group
 *     spans min(n, qcomps) components, then the oldest of the rest. Every
 *     steered group of two or more components merges them, so ncomp falls.
 *     The scan stops as soon as the span cannot grow: usually O(P), at
 *     worst the queue length, and only while steering.
 *
 *  4. Hold: while steering, a due group whose queue holds workers of a
 *     single component (qcomps == 1 < ncomp) would connect nothing, so it
 *     is held open until a worker of another component is queued, or for
 *     at most gen_hold_ms (default: 10 x window_max_ms for dynamic, 100 ms
 *     otherwise); then it forms anyway, and the window holds no more groups
 *     (it keeps steering the selection). So no group waits forever, and a
 *     worker that stays live but never ready (hung, or far slower than the
 *     rest) costs one hold per window, not one per group. A policy whose
 *     groups hold one worker at most (P = 1) cannot connect anything: no
 *     hold.
 *
 *  5. Once ncomp reaches 1 the window ends: the union-find and the counter
 *     reset, steering stops. The reset is O(live), once per B x live
 *     member-updates, so O(1/B) per update amortized.
 *
 *  6. remove_worker() takes the worker out of its tree; the others keep
 *     their components (their models already mixed through it), and a
 *     component of that worker alone disappears. The tree is rebuilt in
 *     O(cap), which only removals pay.
 */
#include "daemon/sched_core.h"
#include "daemon/conf.h"
#include "daemon/sched_core_int.h"

/* The default window length B for statistics when the generator is off. */
#define STATS_BOUND_DEFAULT 10
/* The default hold for policies without a window, and the fallback. */
#define HOLD_DEFAULT_MS 100.0

uint32_t pr_sched_gen_find(struct pr_sched_core *c, uint32_t x)
{
    struct pr_sched_wk *w = c->w;

    while (w[x].parent != x) {
        w[x].parent = w[w[x].parent].parent;
        x = w[x].parent;
    }
    return x;
}

static void unite(struct pr_sched_core *c, uint32_t a, uint32_t b)
{
    struct pr_sched_wk *w = c->w;
    uint32_t ra = pr_sched_gen_find(c, a);
    uint32_t rb = pr_sched_gen_find(c, b);

    if (ra == rb) {
        return;
    }
    if (w[ra].size < w[rb].size) {
        uint32_t t = ra;
        ra = rb;
        rb = t;
    }
    w[rb].parent = ra;
    w[ra].size += w[rb].size;
    if (w[ra].qcnt > 0 && w[rb].qcnt > 0) {
        c->qcomps--;
    }
    w[ra].qcnt += w[rb].qcnt;
    c->ncomp--;
}

void pr_sched_gen_reset(struct pr_sched_core *c)
{
    for (uint32_t r = 0; r < c->cap; r++) {
        struct pr_sched_wk *k = &c->w[r];

        if (k->state == PR_SCHED_ABSENT) {
            continue;
        }
        k->parent = r;
        k->size = 1;
        k->qcnt = k->state == PR_SCHED_READY;
    }
    c->ncomp = c->live;
    c->qcomps = c->queued;
    c->updates = 0;
    c->mark = 0;
    c->steering = 0;
    c->holding = 0;
    c->hold_spent = 0;
}

void pr_sched_gen_add(struct pr_sched_core *c, uint32_t rank)
{
    struct pr_sched_wk *k = &c->w[rank];

    k->parent = rank;
    k->size = 1;
    k->qcnt = 0;
    c->ncomp++;
}

void pr_sched_gen_enqueued(struct pr_sched_core *c, uint32_t rank)
{
    uint32_t r = pr_sched_gen_find(c, rank);

    if (c->w[r].qcnt++ == 0) {
        c->qcomps++;
    }
}

void pr_sched_gen_dequeued(struct pr_sched_core *c, uint32_t rank)
{
    uint32_t r = pr_sched_gen_find(c, rank);

    if (--c->w[r].qcnt == 0) {
        c->qcomps--;
    }
}

/* `x` is live and already out of the ready queue. */
void pr_sched_gen_remove(struct pr_sched_core *c, uint32_t x)
{
    struct pr_sched_wk *w = c->w;
    uint32_t r = pr_sched_gen_find(c, x);
    uint32_t root = r;

    if (w[r].size == 1) {
        c->ncomp--; /* x alone: its component goes with it */
        return;
    }
    /* Point every live worker at its root, so none reaches x. */
    for (uint32_t i = 0; i < c->cap; i++) {
        if (i != x && w[i].state != PR_SCHED_ABSENT) {
            w[i].aux = pr_sched_gen_find(c, i);
        }
    }
    if (r == x) {
        /* x was the root: its first other member takes over. */
        for (uint32_t i = 0; i < c->cap; i++) {
            if (i != x && w[i].state != PR_SCHED_ABSENT && w[i].aux == x) {
                root = i;
                break;
            }
        }
        w[root].qcnt = w[x].qcnt;
    }
    for (uint32_t i = 0; i < c->cap; i++) {
        if (i != x && w[i].state != PR_SCHED_ABSENT) {
            w[i].parent = w[i].aux == r ? root : w[i].aux;
        }
    }
    w[root].size = w[r].size - 1;
    w[x].parent = x;
    w[x].size = 1;
    w[x].qcnt = 0;
}

int pr_sched_gen_active(const struct pr_sched_core *c)
{
    return c->p.isolation_bound > 0 && c->p.policy != PR_POLICY_ALLREDUCE;
}

uint64_t pr_sched_gen_hold_us(const struct pr_sched_params *p)
{
    double ms = p->gen_hold_ms;

    if (ms <= 0.0) {
        ms = HOLD_DEFAULT_MS;
        if (p->policy == PR_POLICY_DYNAMIC && p->window_max_ms > 0.0) {
            ms = p->window_max_ms * 10.0;
        }
    }
    return pr_sched_ms_to_us(ms);
}

static uint64_t window_bound(const struct pr_sched_core *c)
{
    if (c->p.isolation_bound > 0) {
        return c->p.isolation_bound;
    }
    return c->p.stats_bound > 0 ? c->p.stats_bound : STATS_BOUND_DEFAULT;
}

static void end_window(struct pr_sched_core *c, int connected)
{
    c->st.windows_checked++;
    if (connected) {
        c->st.windows_connected++;
    }
    if (c->steering) {
        c->st.window_extra_updates += c->updates - c->mark;
    }
    pr_sched_gen_reset(c);
}

void pr_sched_gen_check(struct pr_sched_core *c)
{
    if (c->steering) {
        if (c->ncomp <= 1) {
            end_window(c, 1);
        }
        return;
    }
    if (c->live == 0 || c->updates < window_bound(c) * c->live) {
        return;
    }
    if (c->ncomp <= 1) {
        c->st.windows_unaided++;
        end_window(c, 1);
    } else if (pr_sched_gen_active(c)) {
        c->steering = 1;
        c->mark = c->updates;
    } else {
        end_window(c, 0);
    }
}

void pr_sched_gen_params_changed(struct pr_sched_core *c)
{
    if (!pr_sched_gen_active(c)) {
        c->steering = 0;
        c->holding = 0;
    }
    pr_sched_gen_check(c);
}

int pr_sched_gen_hold(struct pr_sched_core *c, uint32_t group_cap,
                      uint64_t now_us)
{
    if (!c->steering || c->hold_spent || group_cap < 2 || c->ncomp <= 1 ||
        c->qcomps >= 2) {
        return 0;
    }
    if (!c->holding) {
        c->holding = 1;
        c->hold_start_us = now_us;
        c->st.generator_held++;
    }
    if (now_us < c->hold_start_us + pr_sched_gen_hold_us(&c->p)) {
        return 1;
    }
    c->st.generator_expired++;
    c->hold_spent = 1;
    return 0;
}

void pr_sched_gen_select(struct pr_sched_core *c, uint32_t n,
                         struct pr_sched_member *m)
{
    struct pr_sched_wk *w = c->w;
    uint64_t stamp = ++c->stamp;
    uint32_t want = n < c->qcomps ? n : c->qcomps;
    uint32_t got = 0;
    uint32_t span = 1;
    uint32_t i = c->head;

    w[i].picked = stamp;
    w[pr_sched_gen_find(c, i)].comp = stamp;
    m[got++].rank = i;
    for (i = w[i].next; i != PR_SCHED_NIL && got < n && span < want;
         i = w[i].next) {
        uint32_t r = pr_sched_gen_find(c, i);

        if (w[r].comp != stamp) {
            w[r].comp = stamp;
            w[i].picked = stamp;
            m[got++].rank = i;
            span++;
        }
    }
    for (i = c->head; i != PR_SCHED_NIL && got < n; i = w[i].next) {
        if (w[i].picked != stamp) {
            w[i].picked = stamp;
            m[got++].rank = i;
        }
    }
}

/* The members are out of the queue; merge them and count the updates. */
void pr_sched_gen_formed(struct pr_sched_core *c,
                         const struct pr_sched_member *m, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        unite(c, m[0].rank, m[i].rank);
    }
    c->st.groups++;
    c->st.members += n;
    if (c->steering) {
        c->st.generator_forced++;
    }
    c->updates += n;
    pr_sched_gen_check(c);
}
