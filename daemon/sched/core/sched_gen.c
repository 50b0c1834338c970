/* SPDX-License-Identifier: MIT */
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
 *     single component Q (qcomps == 1 < ncomp) would connect nothing, so
 *     it is held open until a worker of another component is queued (it
 *     then forms at once, steered) or the hold expires (it then forms
 *     anyway). A policy whose groups hold one worker at most (P = 1)
 *     cannot connect anything: no hold.
 *
 *  5. How long (gen_hold_ms = 0: adaptive). Paces differ by design, so no
 *     fixed time fits: 100 ms ran out before a 300 ms worker arrived, while
 *     a time sized for the slowest cluster would stall a fast one for long
 *     whenever a worker hangs. The core sees every READY, so it keeps per
 *     worker an EWMA (weight 1/4) of its ready-to-ready interval: only
 *     intervals while it stayed live (the first READY after it joins gives
 *     none, and a removal wipes the slot, so time while removed never
 *     counts; a cancel breaks nothing, the worker stayed live), each
 *     sample capped at gen_hold_max_ms so that one long pause cannot
 *     dominate. A hold waits for W, the live workers outside Q that are
 *     not late (6); none of them is queued. Each w in W is expected at
 *     e(w) = when it last left the queue (its group formed, its READY was
 *     cancelled; or it joined) + 1.5 x its EWMA (one interval, plus half
 *     of one for jitter), or, with no interval yet, that time +
 *     gen_hold_max_ms: nothing to go on but the bound. Counting from when
 *     it left the queue, not from its READY, matters after a hold: workers
 *     held in a queue would otherwise look overdue at once. The interval
 *     includes some queue time too, so e(w) errs late, the safe side for
 *     an "at the latest". The hold lasts until the latest e(w) over W,
 *     clamped to [start + 1 ms, start + gen_hold_max_ms]. The latest, not
 *     the soonest: any one arrival ends the hold at once, so a long bound
 *     costs only when nobody comes, and at expiry every worker waited for
 *     has then missed its expected arrival, which is what (6) needs.
 *     gen_hold_max_ms (default 5 s, the order of the failure timeouts)
 *     bounds every hold: never forever. gen_hold_ms > 0 is a fixed hold
 *     instead (tests), also at most gen_hold_max_ms.
 *     Cost: the bound takes an O(cap) scan, so a hold first runs for the
 *     1 ms floor, and only a hold that nobody ended by then scans (the
 *     deadline then moves out to the bound; W changes meanwhile only by
 *     joins and removals, which the bound sees). Holds that end within a
 *     millisecond, the common case on a big cluster, stay O(1), and the
 *     scans are at most one per millisecond of held time.
 *
 *  6. Late workers: when a hold expires, every worker it waited for is
 *     marked late, and a late worker is not waited for until it is seen
 *     READY again. So a live worker that never becomes ready (hung, or far
 *     slower than its EWMA says) delays one group per window, by at most
 *     gen_hold_max_ms, and no more while it stays away; once it shows up
 *     it is worth waiting for again. Marks per worker, not "no more holds
 *     in this window once one expired": that would leave the rest of a
 *     window to chance after one too-short hold, while a slow worker
 *     that missed a hold re-arms holds by its next READY. If no
 *     worker outside Q is left to wait for, no hold starts; per-root
 *     counts of late workers (lcnt, kept like qcnt) and the live total
 *     make that test O(1). Marking is O(cap), once per expired hold, and
 *     every expired hold lasted at least 1 ms. The window reset clears
 *     the marks.
 *
 *  7. Once ncomp reaches 1 the window ends: the union-find and the counter
 *     reset, steering stops. The reset is O(live), once per B x live
 *     member-updates, so O(1/B) per update amortized.
 *
 *  8. remove_worker() takes the worker out of its tree; the others keep
 *     their components (their models already mixed through it), and a
 *     component of that worker alone disappears. The tree is rebuilt in
 *     O(cap), which only removals pay.
 */
#include "daemon/sched/core/sched_core.h"
#include "daemon/sched/core/sched_core_int.h"

/* The default window length B for statistics when the generator is off. */
#define STATS_BOUND_DEFAULT 10
/* The longest hold when gen_hold_max_ms is 0. */
#define HOLD_MAX_DEFAULT_MS 5000.0
/* The shortest adaptive hold, us. */
#define HOLD_MIN_US 1000u
/* A worker is expected 1.5 EWMA intervals after it left the queue. */
#define EXPECT_FACTOR 1.5

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
    w[ra].lcnt += w[rb].lcnt;
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
        k->lcnt = 0;
        k->late = 0;
    }
    c->ncomp = c->live;
    c->qcomps = c->queued;
    c->updates = 0;
    c->mark = 0;
    c->steering = 0;
    c->holding = 0;
    c->nlate = 0;
}

/* `rank`'s slot is fresh (zeroed): no pace, not late. */
void pr_sched_gen_add(struct pr_sched_core *c, uint32_t rank, uint64_t now_us)
{
    struct pr_sched_wk *k = &c->w[rank];

    k->parent = rank;
    k->size = 1;
    k->qcnt = 0;
    k->lcnt = 0;
    k->left_us = now_us;
    c->ncomp++;
}

/* A late worker is ready again: it counts again (design, 6). */
void pr_sched_gen_unlate(struct pr_sched_core *c, uint32_t rank)
{
    c->w[rank].late = 0;
    c->w[pr_sched_gen_find(c, rank)].lcnt--;
    c->nlate--;
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
    uint32_t lcnt = w[r].lcnt - w[x].late; /* the others' */

    c->nlate -= w[x].late;
    w[x].late = 0;
    if (w[r].size == 1) {
        c->ncomp--; /* x alone: its component goes with it */
        w[x].lcnt = 0;
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
    w[root].lcnt = lcnt;
    w[x].parent = x;
    w[x].size = 1;
    w[x].qcnt = 0;
    w[x].lcnt = 0;
}

int pr_sched_gen_active(const struct pr_sched_core *c)
{
    return c->p.isolation_bound > 0 && c->p.policy != PR_POLICY_ALLREDUCE;
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

/* After create and every set_params: the params are c->p. */
void pr_sched_gen_params_changed(struct pr_sched_core *c)
{
    double max_ms = c->p.gen_hold_max_ms;

    c->hold_max_us =
        pr_sched_ms_to_us(max_ms > 0.0 ? max_ms : HOLD_MAX_DEFAULT_MS);
    if (!pr_sched_gen_active(c)) {
        c->steering = 0;
        c->holding = 0;
    }
    pr_sched_gen_check(c);
}

/* Is worker i one a hold for the queued component `q` waits for? */
static int waited_for(struct pr_sched_core *c, uint32_t i, uint32_t q)
{
    const struct pr_sched_wk *k = &c->w[i];

    return k->state != PR_SCHED_ABSENT && !k->late &&
           pr_sched_gen_find(c, i) != q;
}

/*
 * Are there such workers? The live ones not late, less those of q's
 * component not late: O(1) with the per-root late counts.
 */
static int anyone_to_wait_for(const struct pr_sched_core *c, uint32_t q)
{
    const struct pr_sched_wk *k = &c->w[q];

    return c->live - c->nlate > k->size - k->lcnt;
}

/* When a worker's next READY is due at the latest (design, 5). */
static uint64_t expected_us(const struct pr_sched_wk *k, uint64_t max_us)
{
    if (!k->timed) {
        return k->left_us + max_us;
    }
    return k->left_us + (uint64_t)(EXPECT_FACTOR * (double)k->ewma_us);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/*
 * The adaptive hold's bound (design, 5): the latest expected READY of the
 * workers waited for, within [start + 1 ms, start + the longest hold].
 * O(cap), and only for a hold that lasted its first millisecond.
 */
static void hold_bound(struct pr_sched_core *c)
{
    uint64_t max_us = c->hold_max_us;
    uint64_t lo = c->hold_start_us + min_u64(HOLD_MIN_US, max_us);
    uint32_t q = pr_sched_gen_find(c, c->head);
    uint64_t until = lo;

    for (uint32_t i = 0; i < c->cap; i++) {
        if (waited_for(c, i, q)) {
            uint64_t e = expected_us(&c->w[i], max_us);

            until = e > until ? e : until;
        }
    }
    c->hold_until_us = min_u64(until, c->hold_start_us + max_us);
    c->hold_exact = 1;
}

/* The hold expired: everyone it waited for is late (design, 6). */
static void hold_expired(struct pr_sched_core *c)
{
    uint32_t q = pr_sched_gen_find(c, c->head);

    for (uint32_t i = 0; i < c->cap; i++) {
        if (waited_for(c, i, q)) {
            c->w[i].late = 1;
            c->w[pr_sched_gen_find(c, i)].lcnt++;
            c->nlate++;
        }
    }
    c->st.generator_expired++;
    c->holding = 0;
}

int pr_sched_gen_hold(struct pr_sched_core *c, uint32_t group_cap,
                      uint64_t now_us)
{
    if (!c->steering || group_cap < 2 || c->ncomp <= 1 || c->qcomps >= 2) {
        return 0;
    }
    if (!c->holding) {
        uint64_t max_us = c->hold_max_us;

        if (!anyone_to_wait_for(c, pr_sched_gen_find(c, c->head))) {
            return 0;
        }
        c->holding = 1;
        c->hold_start_us = now_us;
        c->st.generator_held++;
        /* Adaptive: the 1 ms floor first, the bound if it runs out. */
        c->hold_exact = c->p.gen_hold_ms > 0.0;
        c->hold_until_us =
            now_us + min_u64(c->hold_exact ? pr_sched_ms_to_us(c->p.gen_hold_ms)
                                           : HOLD_MIN_US,
                             max_us);
    }
    if (now_us < c->hold_until_us) {
        return 1;
    }
    if (!c->hold_exact) {
        hold_bound(c);
        if (now_us < c->hold_until_us) {
            return 1;
        }
    }
    hold_expired(c);
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
