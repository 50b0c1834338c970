/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's decision logic (see sched_core.h): worker states, the
 * ready queue and the three policies. The group generator lives in
 * sched_gen.c, the staleness weights in sched_weights.c, the dynamic
 * policy's window in sched_window.c.
 *
 * Costs: per-worker state is an array indexed by rank, grown by doubling.
 * The ready queue is an intrusive doubly linked FIFO through that array, so
 * ready(), cancel() and the "is a group due" test are O(1) (plus one
 * union-find find for the generator's bookkeeping); forming a group costs
 * O(group size). Nothing scans all workers except remove_worker() of a
 * worker that shares a component, the generator's window reset, and a
 * generator hold that lasts over 1 ms (its bound, its expiry: at most one
 * scan per millisecond held, see sched_gen.c).
 *
 * The dynamic policy's window is in sched_window.c.
 */
#include "daemon/sched/core/sched_core.h"
#include "daemon/sched/core/sched_core_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Times in params are at most this many milliseconds (about 11.6 days). */
#define MS_LIMIT    1e9
#define INITIAL_CAP 16u

static int ms_ok(double ms)
{
    return ms >= 0.0 && ms <= MS_LIMIT; /* false for NaN */
}

/*
 * Groups may form from the moment min_workers workers are live (now_us:
 * when; a dynamic window opens no earlier than that).
 */
static void check_started(struct pr_sched_core *c, uint64_t now_us)
{
    if (!c->started && c->live >= c->p.min_workers) {
        c->started = 1;
        c->started_us = now_us;
    }
}

void pr_sched_core_mark_started(struct pr_sched_core *c, uint64_t now_us)
{
    if (c != NULL && !c->started) {
        c->started = 1;
        c->started_us = now_us;
    }
}

static int params_ok(const struct pr_sched_params *p)
{
    if (p == NULL) {
        return 0;
    }
    switch (p->policy) {
    case PR_POLICY_ALLREDUCE:
        break;
    case PR_POLICY_CONSTANT:
        if (p->group_size < 1) {
            return 0;
        }
        break;
    case PR_POLICY_DYNAMIC:
        if (p->group_max != 0 && p->group_min > p->group_max) {
            return 0;
        }
        if (!ms_ok(p->window_min_ms) || !ms_ok(p->window_ms) ||
            !ms_ok(p->window_max_ms) || p->window_min_ms > p->window_ms ||
            p->window_ms > p->window_max_ms ||
            !(p->window_wait >= 0.0 && p->window_wait <= 1.0)) {
            return 0;
        }
        break;
    default:
        return 0;
    }
    switch (p->weighting) {
    case PR_WEIGHT_UNIFORM:
        break;
    case PR_WEIGHT_STALENESS:
        if (!(p->staleness_alpha > 0.0 && p->staleness_alpha < 1.0)) {
            return 0;
        }
        break;
    default:
        return 0;
    }
    return ms_ok(p->gen_hold_ms) && ms_ok(p->gen_hold_max_ms);
}

struct pr_sched_core *pr_sched_core_create(const struct pr_sched_params *p)
{
    struct pr_sched_core *c;

    if (!params_ok(p)) {
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->p = *p;
    c->head = PR_SCHED_NIL;
    c->tail = PR_SCHED_NIL;
    c->next_id = 1;
    c->window_ms = p->window_ms;
    check_started(c, 0);
    pr_sched_gen_params_changed(c);
    return c;
}

void pr_sched_core_destroy(struct pr_sched_core *c)
{
    if (c == NULL) {
        return;
    }
    free(c->w);
    free(c);
}

int pr_sched_core_check_params(const struct pr_sched_params *p)
{
    return params_ok(p) ? 0 : -EINVAL;
}

int pr_sched_core_set_params(struct pr_sched_core *c,
                             const struct pr_sched_params *p)
{
    if (c == NULL || !params_ok(p)) {
        return -EINVAL;
    }
    int restart =
        c->p.policy != PR_POLICY_DYNAMIC || c->p.window_ms != p->window_ms;

    c->p = *p;
    /* Lowered to what has joined: the queued ones have waited enough. */
    check_started(c, 0);
    /* A new initial window restarts adaptation; else keep what was learnt */
    if (restart) {
        c->window_ms = p->window_ms;
    }
    if (c->window_ms < p->window_min_ms) {
        c->window_ms = p->window_min_ms;
    }
    if (c->window_ms > p->window_max_ms) {
        c->window_ms = p->window_max_ms;
    }
    pr_sched_gen_params_changed(c);
    return 0;
}

static int grow(struct pr_sched_core *c, uint32_t rank)
{
    uint32_t cap = c->cap > 0 ? c->cap : INITIAL_CAP;
    struct pr_sched_wk *w;

    while (cap <= rank) {
        cap *= 2;
    }
    if (cap > PR_SCHED_MAX) {
        cap = PR_SCHED_MAX;
    }
    w = realloc(c->w, (size_t)cap * sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    memset(&w[c->cap], 0, (size_t)(cap - c->cap) * sizeof(*w));
    c->w = w;
    c->cap = cap;
    return 0;
}

static int known(const struct pr_sched_core *c, uint32_t rank)
{
    return rank < c->cap && c->w[rank].state != PR_SCHED_ABSENT;
}

int pr_sched_core_add_worker(struct pr_sched_core *c, uint32_t rank,
                             uint32_t node, uint64_t now_us)
{
    if (c == NULL || rank >= PR_SCHED_MAX) {
        return -EINVAL;
    }
    if (known(c, rank)) {
        return -EEXIST;
    }
    if (rank >= c->cap) {
        int rc = grow(c, rank);

        if (rc < 0) {
            return rc;
        }
    }
    struct pr_sched_wk *k = &c->w[rank];

    memset(k, 0, sizeof(*k));
    k->state = PR_SCHED_IDLE;
    k->node = node;
    k->prev = PR_SCHED_NIL;
    k->next = PR_SCHED_NIL;
    c->live++;
    check_started(c, now_us);
    pr_sched_gen_add(c, rank, now_us);
    return 0;
}

static void enqueue(struct pr_sched_core *c, uint32_t rank)
{
    struct pr_sched_wk *k = &c->w[rank];

    k->prev = c->tail;
    k->next = PR_SCHED_NIL;
    if (c->tail != PR_SCHED_NIL) {
        c->w[c->tail].next = rank;
    } else {
        c->head = rank;
    }
    c->tail = rank;
    c->queued++;
    pr_sched_gen_enqueued(c, rank);
}

static void unlink_ready(struct pr_sched_core *c, uint32_t rank)
{
    struct pr_sched_wk *k = &c->w[rank];

    if (k->prev != PR_SCHED_NIL) {
        c->w[k->prev].next = k->next;
    } else {
        c->head = k->next;
    }
    if (k->next != PR_SCHED_NIL) {
        c->w[k->next].prev = k->prev;
    } else {
        c->tail = k->prev;
    }
    k->prev = PR_SCHED_NIL;
    k->next = PR_SCHED_NIL;
    c->queued--;
    pr_sched_gen_dequeued(c, rank);
    if (c->queued == 0) {
        c->holding = 0;
    }
}

int pr_sched_core_remove_worker(struct pr_sched_core *c, uint32_t rank,
                                uint64_t now_us)
{
    (void)now_us;
    if (c == NULL) {
        return -EINVAL;
    }
    if (!known(c, rank)) {
        return -ENOENT;
    }
    if (c->w[rank].state == PR_SCHED_READY) {
        unlink_ready(c, rank);
    }
    pr_sched_gen_remove(c, rank);
    c->w[rank].state = PR_SCHED_ABSENT;
    c->live--;
    /*
     * Everybody left: a job that comes next waits for min_workers again,
     * and its fresh models are not taken for joiners of this one.
     */
    if (c->live == 0) {
        c->started = 0;
        c->job_version = 0;
    }
    pr_sched_gen_check(c);
    return 0;
}

/*
 * The worker's pace, for the generator's hold (sched_gen.c, design 5) and
 * the arrival-aware window: an EWMA (weight 1/4) of its ready-to-ready
 * interval and one of its deviation from it (as TCP keeps RTT and its
 * variance), each sample capped at the longest hold. The first READY
 * since it joined gives no interval.
 */
static void pace(const struct pr_sched_core *c, struct pr_sched_wk *k,
                 uint64_t now_us)
{
    if (k->readied) {
        uint64_t dt = now_us > k->ready_us ? now_us - k->ready_us : 0;

        if (dt > c->hold_max_us) {
            dt = c->hold_max_us;
        }
        if (k->timed) {
            uint64_t d = dt > k->ewma_us ? dt - k->ewma_us : k->ewma_us - dt;

            k->dev_us = k->dev_us - k->dev_us / 4 + d / 4;
            k->ewma_us = k->ewma_us - k->ewma_us / 4 + dt / 4;
        } else {
            k->ewma_us = dt;
            k->dev_us = dt / 2; /* no spread seen yet: assume a wide one */
        }
        k->timed = 1;
    }
    k->readied = 1;
}

int pr_sched_core_ready(struct pr_sched_core *c, uint32_t rank,
                        uint64_t version, uint64_t seq, uint64_t now_us)
{
    return pr_sched_core_ready_tagged(c, rank, version, seq, 0, now_us);
}

int pr_sched_core_ready_tagged(struct pr_sched_core *c, uint32_t rank,
                               uint64_t version, uint64_t seq, uint32_t tag,
                               uint64_t now_us)
{
    if (c == NULL) {
        return -EINVAL;
    }
    if (!known(c, rank)) {
        return -ENOENT;
    }
    struct pr_sched_wk *k = &c->w[rank];

    if (k->state == PR_SCHED_READY) {
        return -EALREADY;
    }
    /* From IDLE, or GROUPED: a new READY means its group part ended. */
    pace(c, k, now_us);
    if (k->late) {
        pr_sched_gen_unlate(c, rank);
    }
    k->state = PR_SCHED_READY;
    k->version = version;
    k->seq = seq;
    k->tag = tag;
    /*
     * A fresh model joining a job that has gone past it. The job's version
     * is the largest any READY or group has shown: after a scheduler
     * restart the trained workers' first READYs tell it.
     */
    if (version <= 1 && c->job_version > 1) {
        k->heal = 1;
    }
    if (version > c->job_version) {
        c->job_version = version;
    }
    k->ready_us = now_us;
    enqueue(c, rank);
    return 0;
}

int pr_sched_core_queued_tag(const struct pr_sched_core *c, uint32_t rank,
                             uint32_t *tag, uint64_t *seq)
{
    if (c == NULL || !known(c, rank) || c->w[rank].state != PR_SCHED_READY) {
        return -ENOENT;
    }
    *tag = c->w[rank].tag;
    *seq = c->w[rank].seq;
    return 0;
}

int pr_sched_core_heal(struct pr_sched_core *c, uint32_t rank)
{
    if (c == NULL) {
        return -EINVAL;
    }
    if (!known(c, rank)) {
        return -ENOENT;
    }
    c->w[rank].heal = 1;
    return 0;
}

void pr_sched_core_reduced(struct pr_sched_core *c, uint32_t rank, uint64_t us)
{
    if (c == NULL || !known(c, rank)) {
        return;
    }
    struct pr_sched_wk *k = &c->w[rank];

    k->red_us = k->red_known ? k->red_us - k->red_us / 4 + us / 4 : us;
    k->red_known = 1;
}

int pr_sched_core_is_ready(const struct pr_sched_core *c, uint32_t rank)
{
    return c != NULL && known(c, rank) && c->w[rank].state == PR_SCHED_READY;
}

int pr_sched_core_cancel(struct pr_sched_core *c, uint32_t rank, uint64_t seq,
                         uint64_t now_us)
{
    if (c == NULL) {
        return -EINVAL;
    }
    if (!known(c, rank) || c->w[rank].state != PR_SCHED_READY ||
        c->w[rank].seq != seq) {
        return -ENOENT;
    }
    unlink_ready(c, rank);
    c->w[rank].state = PR_SCHED_IDLE;
    c->w[rank].left_us = now_us;
    return 0;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/* Every queued READY carries the same tag (allreduce's rule). */
static int one_tag(const struct pr_sched_core *c)
{
    uint32_t first = c->head;

    for (uint32_t r = first; r != PR_SCHED_NIL; r = c->w[r].next) {
        if (c->w[r].tag != c->w[first].tag) {
            return 0;
        }
    }
    return 1;
}

/*
 * Is a group due at now_us? If so, *n is how many queued workers it takes
 * and *cap the most it could ever hold (for the generator's hold rule).
 */
static int due(const struct pr_sched_core *c, uint64_t now_us, uint32_t *n,
               uint32_t *cap)
{
    if (c->queued == 0 || !c->started) {
        return 0;
    }
    switch (c->p.policy) {
    case PR_POLICY_ALLREDUCE:
        *n = *cap = c->live;
        return c->queued == c->live && one_tag(c);
    case PR_POLICY_CONSTANT:
        *n = *cap = min_u32(c->p.group_size, c->live);
        return c->queued >= *n;
    default: {
        uint32_t gmax = c->live;

        if (c->p.group_max != 0) {
            gmax = min_u32(c->p.group_max, c->live);
        }
        *cap = gmax;
        *n = min_u32(c->queued, gmax);
        if (c->queued >= gmax) {
            return 1;
        }
        return now_us >=
               pr_sched_window_close_us(c, pr_sched_window_open_us(c));
    }
    }
}

/*
 * Fills m[0 .. n-1] with the queued workers a due group of n takes (the
 * generator's steered choice, else the n oldest) and their READYs, at
 * uniform weights. Nothing observable changes. Returns the members'
 * largest model version.
 */
static uint64_t choose(struct pr_sched_core *c, uint32_t n,
                       struct pr_sched_member *m)
{
    uint64_t max_version = 0;

    if (c->steering) {
        pr_sched_gen_select(c, n, m);
    } else {
        uint32_t i = c->head;

        for (uint32_t j = 0; j < n; j++, i = c->w[i].next) {
            m[j].rank = i;
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        const struct pr_sched_wk *k = &c->w[m[j].rank];

        m[j].node = k->node;
        m[j].version = k->version;
        m[j].seq = k->seq;
        m[j].weight = 1.0 / (double)n;
        if (k->version > max_version) {
            max_version = k->version;
        }
    }
    return max_version;
}

/*
 * The largest version among the members that give their model (a healer
 * takes the group's version, it does not set it).
 */
static uint64_t givers_version(const struct pr_sched_core *c,
                               const struct pr_sched_member *m, uint32_t n)
{
    uint64_t v = 0;

    for (uint32_t j = 0; j < n; j++) {
        if (!c->w[m[j].rank].heal && m[j].version > v) {
            v = m[j].version;
        }
    }
    return v;
}

/* How many of the chosen members heal in this group. */
static uint32_t count_healing(const struct pr_sched_core *c,
                              const struct pr_sched_member *m, uint32_t n)
{
    uint32_t h = 0;

    for (uint32_t j = 0; j < n; j++) {
        h += c->w[m[j].rank].heal;
    }
    return h;
}

/*
 * A group with healing members (and others): the healers weigh 0, the
 * others share the mean as they would among themselves (uniform, or their
 * staleness weights), and everyone gets that one mean, the healers'
 * model included: no personal results in such a group.
 */
static int heal_weights(struct pr_sched_core *c, struct pr_sched_member *m,
                        uint32_t n)
{
    struct pr_sched_member *give = calloc(n, sizeof(*give));
    uint32_t g = 0;

    if (give == NULL) {
        return -ENOMEM;
    }
    for (uint32_t j = 0; j < n; j++) {
        if (!c->w[m[j].rank].heal) {
            give[g++] = m[j];
        }
    }
    int rc = 0;

    if (c->p.policy != PR_POLICY_ALLREDUCE &&
        c->p.weighting == PR_WEIGHT_STALENESS) {
        rc = pr_sched_weights_members(give, g, c->p.staleness_alpha);
    } else {
        for (uint32_t j = 0; j < g; j++) {
            give[j].weight = 1.0 / (double)g;
        }
    }
    for (uint32_t j = 0, i = 0; rc == 0 && j < n; j++) {
        m[j].weight = c->w[m[j].rank].heal ? 0.0 : give[i++].weight;
    }
    free(give);
    return rc;
}

/* The chosen members leave the queue as GROUPED; the window adapts. */
static void commit(struct pr_sched_core *c, const struct pr_sched_member *m,
                   uint32_t n, uint64_t now_us)
{
    for (uint32_t j = 0; j < n; j++) {
        unlink_ready(c, m[j].rank);
        c->w[m[j].rank].state = PR_SCHED_GROUPED;
        c->w[m[j].rank].left_us = now_us;
    }
    c->holding = 0;
    pr_sched_gen_formed(c, m, n);
    if (c->p.policy == PR_POLICY_DYNAMIC) {
        pr_sched_window_adapt(c, n);
    }
}

int pr_sched_core_next_group(struct pr_sched_core *c, uint64_t now_us,
                             struct pr_sched_group *g)
{
    uint32_t n = 0;
    uint32_t cap = 0;
    int personal = 0;

    if (c == NULL || g == NULL) {
        return -EINVAL;
    }
    memset(g, 0, sizeof(*g));
    if (!due(c, now_us, &n, &cap)) {
        c->holding = 0;
        return 0;
    }
    if (pr_sched_gen_hold(c, cap, now_us)) {
        return 0;
    }
    struct pr_sched_member *m = calloc(n, sizeof(*m));

    if (m == NULL) {
        return -ENOMEM;
    }
    uint64_t max_version = choose(c, n, m);
    uint32_t healing = count_healing(c, m, n);
    int rc = 0;

    /* Weights may fail: the queue is untouched until they are in. */
    if (healing > 0 && healing < n) {
        max_version = givers_version(c, m, n);
        rc = heal_weights(c, m, n);
    } else if (c->p.policy != PR_POLICY_ALLREDUCE &&
               c->p.weighting == PR_WEIGHT_STALENESS) {
        rc = pr_sched_weights_members(m, n, c->p.staleness_alpha);
        personal = 1;
    }
    if (rc < 0) {
        free(m);
        return rc;
    }
    commit(c, m, n, now_us);
    if (healing > 0 && healing < n) {
        for (uint32_t j = 0; j < n; j++) {
            c->w[m[j].rank].heal = 0;
        }
    }
    if (max_version > c->job_version) {
        c->job_version = max_version;
    }
    g->id = c->next_id++;
    g->n = n;
    g->members = m;
    g->max_version = max_version;
    g->personal = personal;
    return 1;
}

void pr_sched_group_fini(struct pr_sched_group *g)
{
    if (g == NULL) {
        return;
    }
    free(g->members);
    g->members = NULL;
    g->n = 0;
}

int64_t pr_sched_core_deadline_us(const struct pr_sched_core *c)
{
    if (c == NULL || c->queued == 0 || !c->started) {
        return -1;
    }
    if (c->holding) {
        return (int64_t)c->hold_until_us;
    }
    if (c->p.policy == PR_POLICY_DYNAMIC) {
        return (int64_t)pr_sched_window_close_us(c, pr_sched_window_open_us(c));
    }
    return -1;
}

uint32_t pr_sched_core_live(const struct pr_sched_core *c)
{
    return c != NULL ? c->live : 0;
}

uint32_t pr_sched_core_queued(const struct pr_sched_core *c)
{
    return c != NULL ? c->queued : 0;
}

void pr_sched_core_stats(const struct pr_sched_core *c,
                         struct pr_sched_stats *st)
{
    if (st == NULL) {
        return;
    }
    if (c == NULL) {
        memset(st, 0, sizeof(*st));
        return;
    }
    *st = c->st;
}

uint32_t pr_sched_core_components(const struct pr_sched_core *c)
{
    return c != NULL ? c->ncomp : 0;
}

int pr_sched_core_steering(const struct pr_sched_core *c)
{
    return c != NULL && c->steering;
}

double pr_sched_core_window_ms(const struct pr_sched_core *c)
{
    return c != NULL ? c->window_ms : 0.0;
}
