/* SPDX-License-Identifier: MIT */
/*
 * The dynamic policy's window (sched_core.h): when the window a group
 * waits in opens and closes, and how it adapts after each group. Not the
 * generator's connectivity windows (sched_gen.c), which count member
 * updates. Apart from the core's queue and states (sched_core.c), which
 * asks it whether a dynamic group is due and when to look again; it
 * reads the core's state and changes only the adapted window_ms.
 *
 * One adapted window per core, not per worker. A group is opened by the
 * oldest queued worker, so a per-worker window would in effect be that
 * worker's; one window shared by the core adapts to the cluster as a
 * whole and keeps deadline_us() O(1). After every dynamic group: size <
 * min(group_min, live) doubles it (from at least 1 us, up to
 * window_max_ms), else it is multiplied by 0.9 (down to window_min_ms).
 */
#include "daemon/sched/core/sched_core_int.h"

/* The smallest window doubling starts from, so that 0 can still grow. */
#define WINDOW_FLOOR_MS 0.001

static uint32_t min_u32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/*
 * When the dynamic window opened: when the oldest queued worker became
 * ready, or when min_workers were reached if that came later.
 */
uint64_t pr_sched_window_open_us(const struct pr_sched_core *c)
{
    uint64_t t = c->w[c->head].ready_us;
    return t > c->started_us ? t : c->started_us;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/*
 * When the dynamic window that opened at t0 closes. The adaptive window
 * alone: t0 + window_ms. Arrival-aware (window_wait > 0, the opener's pace
 * known): the group waits for each live worker not queued whose next READY
 * is expected (its last READY + its interval) within the horizon, t0 +
 * window_wait x the opener's interval, until that time plus twice its
 * spread (plus 1/32 of its interval, the jitter a steady one still has),
 * never past the horizon; for nobody else, so no longer than
 * window_min_ms once those it expects are queued. A worker whose pace is
 * not known yet (it just joined) is waited for as the adaptive window
 * would. Only workers whose reduces are short beside their step count
 * (compute_bound()): an opener that is not closes at the adaptive window,
 * and one that is waits for no worker that is not. Why: with a fixed or
 * adaptive window, two fast workers that once met stay in step and keep meeting
 * while a third, out of phase, ends up alone or with the straggler, and the
 * straggler meets one fast worker at a time (docs/algorithm.md has the
 * figures). O(cap): a pass over the slots per call, made only by dynamic's
 * due() and deadline.
 */
/*
 * Its reduces are short beside its step: waiting for it costs its group
 * little. A worker whose reduces take a quarter of its step or more (a
 * slow link, or a model large for the network) makes every group it
 * joins slow: drawn into one group with everyone, the fast workers would
 * wait on its link at every step (make bench-hosts' slow-link case went
 * from 4 to 9 s that way).
 */
static int compute_bound(const struct pr_sched_wk *k)
{
    return k->timed && k->red_known && k->red_us * 4 < k->ewma_us;
}

uint64_t pr_sched_window_close_us(const struct pr_sched_core *c, uint64_t t0)
{
    const struct pr_sched_wk *h = &c->w[c->head];
    uint64_t base = t0 + pr_sched_ms_to_us(c->window_ms);

    if (!(c->p.window_wait > 0.0) || !compute_bound(h)) {
        return base;
    }
    uint64_t horizon = t0 + (uint64_t)(c->p.window_wait * (double)h->ewma_us);
    uint64_t close = t0 + pr_sched_ms_to_us(c->p.window_min_ms);

    for (uint32_t r = 0; r < c->cap; r++) {
        const struct pr_sched_wk *k = &c->w[r];

        if (k->state == PR_SCHED_ABSENT || k->state == PR_SCHED_READY) {
            continue;
        }
        if (!k->timed) {
            close = max_u64(close, base);
            continue;
        }
        if (!compute_bound(k)) {
            continue; /* not worth its reduce time to the group */
        }
        uint64_t e = k->ready_us + k->ewma_us;

        if (e <= horizon) {
            uint64_t until = e + 2 * k->dev_us + k->ewma_us / 32;

            close = max_u64(close, until < horizon ? until : horizon);
        }
    }
    return close;
}

void pr_sched_window_adapt(struct pr_sched_core *c, uint32_t n)
{
    uint32_t gmin = min_u32(c->p.group_min, c->live);
    double win = c->window_ms;

    if (n < gmin) {
        win *= 2.0;
        if (win < WINDOW_FLOOR_MS) {
            win = WINDOW_FLOOR_MS;
        }
        if (win > c->p.window_max_ms) {
            win = c->p.window_max_ms;
        }
    } else {
        win *= 0.9;
        if (win < c->p.window_min_ms) {
            win = c->p.window_min_ms;
        }
    }
    c->window_ms = win;
}
