/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's decision logic, with no I/O and no clock of its own: the
 * caller passes `now_us` (a monotonic time in microseconds) into every call,
 * so tests and preduce-sim drive it with a fake clock.
 *
 * Worker states (one transition function, sched_core.c):
 *
 *   IDLE --ready()--> READY --group formed--> GROUPED --ready()--> READY
 *     ^                 |                        |
 *     +----cancel()-----+                        +--(next ready() implies
 *                                                    its part ended)
 *   remove_worker() from any state drops the worker.
 *
 * Policies: allreduce (all live workers, uniform weights), constant (the
 * first P ready in FIFO order), dynamic (a window that closes at group_max
 * members or when it expires, and adapts; see docs/algorithm.md). Weights are
 * uniform or staleness-aware. The group generator (isolation_bound > 0, all
 * policies but allreduce) steers groups so the union of groups over a window
 * connects every live worker (design: the comment block at the top of
 * sched_gen.c).
 *
 * Ranks are small integers chosen by the caller (dense, < PR_SCHED_MAX).
 */
#ifndef PR_SCHED_CORE_H
#define PR_SCHED_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/policy.h"

#define PR_SCHED_MAX 65536

struct pr_sched_params {
    enum pr_policy policy;
    uint32_t group_size; /* constant: P */
    uint32_t group_min;  /* dynamic: window grows when below */
    uint32_t group_max;  /* dynamic: 0 = all live workers */
    double window_ms;    /* dynamic: initial window */
    double window_min_ms;
    double window_max_ms;
    /*
     * dynamic: the arrival-aware window (docs/algorithm.md). > 0: a group
     * waits for the workers expected READY within this fraction of the
     * opener's ready-to-ready interval, and for no one else; 0: the
     * adaptive window alone. In [0, 1].
     */
    double window_wait;
    enum pr_weighting weighting;
    double staleness_alpha;   /* (0, 1) */
    uint32_t isolation_bound; /* B; 0 = generator off */
    /*
     * No group forms before this many workers have joined (0: at once):
     * the first steps of an allreduce job then average all N. Once
     * reached it holds nothing back: a worker that leaves is not waited
     * for.
     */
    uint32_t min_workers;
    /*
     * Generator: how long a due group is held open waiting for a worker of
     * another union-find component. 0 = adaptive: until the workers waited
     * for are expected, from each one's EWMA ready-to-ready interval; > 0 =
     * this fixed time (tests). Either way at most gen_hold_max_ms, and a
     * worker that let a hold expire is not waited for again until it is
     * ready again (design: the top of sched_gen.c).
     */
    double gen_hold_ms;
    double gen_hold_max_ms; /* the longest hold; 0 = 5000 ms */
    /*
     * Statistics only: the window length B used for windows_checked and
     * windows_connected when the generator is off; 0 = 10.
     */
    uint32_t stats_bound;
};

struct pr_sched_member {
    uint32_t rank;
    uint32_t node;
    uint64_t version;
    uint64_t seq; /* the READY's seq, echoed to the daemon */
    double weight;
};

struct pr_sched_group {
    uint64_t id; /* 1, 2, ... per core */
    uint32_t n;
    struct pr_sched_member *members; /* n entries, heap, owned by the group */
    uint64_t max_version;
    int personal; /* staleness weighting: members get personal results */
};

struct pr_sched_core;

/* NULL on allocation failure or invalid params. */
struct pr_sched_core *pr_sched_core_create(const struct pr_sched_params *p);
void pr_sched_core_destroy(struct pr_sched_core *c);
/* 0 when set_params would take p, else -EINVAL. */
int pr_sched_core_check_params(const struct pr_sched_params *p);
/* Swap params (reload). -EINVAL if invalid; the old ones then stay. */
int pr_sched_core_set_params(struct pr_sched_core *c,
                             const struct pr_sched_params *p);

/*
 * The job had started before (workers registering again after a scheduler
 * restart): min_workers holds nothing back, even if some never come back.
 */
void pr_sched_core_mark_started(struct pr_sched_core *c, uint64_t now_us);
/* -EEXIST (rank known), -EINVAL (rank out of range), -ENOMEM. */
int pr_sched_core_add_worker(struct pr_sched_core *c, uint32_t rank,
                             uint32_t node, uint64_t now_us);
/* Drops the worker from every queue. -ENOENT if unknown. */
int pr_sched_core_remove_worker(struct pr_sched_core *c, uint32_t rank,
                                uint64_t now_us);
/*
 * Worker `rank` is ready with a model at `version`. -ENOENT (unknown),
 * -EALREADY (already queued).
 */
int pr_sched_core_ready(struct pr_sched_core *c, uint32_t rank,
                        uint64_t version, uint64_t seq, uint64_t now_us);
/*
 * The same with a tag (preduce_set_tag()): under the allreduce policy a
 * group forms only when every live worker is READY with one tag; workers
 * READY with another wait for the others (or their deadline). Other
 * policies take no tags: the daemon refuses them, and withdraws those
 * queued when a reload leaves allreduce (pr_sched_core_queued_tag()).
 */
int pr_sched_core_ready_tagged(struct pr_sched_core *c, uint32_t rank,
                               uint64_t version, uint64_t seq, uint32_t tag,
                               uint64_t now_us);
/*
 * The tag and seq of worker `rank`'s queued READY: 0, or -ENOENT when it
 * is not queued. A reload that leaves allreduce withdraws the tagged ones
 * (other policies would group them across tags).
 */
int pr_sched_core_queued_tag(const struct pr_sched_core *c, uint32_t rank,
                             uint32_t *tag, uint64_t *seq);

/*
 * Worker `rank`'s next group gives it the group's model and takes none of
 * its own (weight 0 in the mean; the others' weights over themselves; no
 * personal results in that group): for a trainer restarted with a stale
 * model. A READY at version 1 (a fresh model) after the job went past
 * version 1 heals by itself. The mark stays until the worker is grouped
 * with a member that is not healing. -ENOENT if unknown.
 */
int pr_sched_core_heal(struct pr_sched_core *c, uint32_t rank);
/*
 * The group `rank` was last in took `us` from its formation to its end on
 * every node (the scheduler's GroupDones; the simulator's model): the
 * arrival-aware window waits only for workers whose reduces are short
 * beside their step (docs/algorithm.md 4.4). Unknown ranks are ignored.
 */
void pr_sched_core_reduced(struct pr_sched_core *c, uint32_t rank, uint64_t us);
/* 1 if worker `rank` is queued READY (its next ready() is -EALREADY). */
int pr_sched_core_is_ready(const struct pr_sched_core *c, uint32_t rank);
/*
 * Withdraws a queued READY with this seq: 0 if it was withdrawn, -ENOENT if
 * the worker is not queued with that seq (already grouped, or unknown).
 */
int pr_sched_core_cancel(struct pr_sched_core *c, uint32_t rank, uint64_t seq,
                         uint64_t now_us);

/*
 * Forms at most one group: 1 with *g filled (free with
 * pr_sched_group_fini), 0 if no group is due now, -ENOMEM. Call it until it
 * returns 0 after every event and when the deadline below passes.
 */
int pr_sched_core_next_group(struct pr_sched_core *c, uint64_t now_us,
                             struct pr_sched_group *g);
void pr_sched_group_fini(struct pr_sched_group *g);

/* When next_group() should be called again without a new event, or -1. */
int64_t pr_sched_core_deadline_us(const struct pr_sched_core *c);

uint32_t pr_sched_core_live(const struct pr_sched_core *c);
uint32_t pr_sched_core_queued(const struct pr_sched_core *c);

/*
 * Staleness weights (docs/algorithm.md): versions[k] -> weights[k], summing
 * to 1. alpha in (0, 1). 0 or -EINVAL (k == 0, alpha out of range) or -ENOMEM.
 */
int pr_sched_staleness_weights(const uint64_t *versions, size_t k, double alpha,
                               double *weights);

/*
 * Counters since create (set_params keeps them). A window is the run of
 * groups between two union-find resets: it ends once its member-updates
 * reach B x live and (with the generator on) its union connects every live
 * worker.
 */
struct pr_sched_stats {
    uint64_t groups;               /* groups formed */
    uint64_t members;              /* member-updates: the sum of their sizes */
    uint64_t generator_forced;     /* groups formed while steering */
    uint64_t generator_held;       /* times a due group was held open */
    uint64_t generator_expired;    /* held groups formed at the hold deadline */
    uint64_t windows_checked;      /* windows ended */
    uint64_t windows_connected;    /* ... whose union connected all live */
    uint64_t windows_unaided;      /* ... connected at B x live, unsteered */
    uint64_t window_extra_updates; /* member-updates spent steering */
};

void pr_sched_core_stats(const struct pr_sched_core *c,
                         struct pr_sched_stats *st);
/* Components of the union of this window's groups over the live workers. */
uint32_t pr_sched_core_components(const struct pr_sched_core *c);
/* 1 while the generator steers groups to connect the window, else 0. */
int pr_sched_core_steering(const struct pr_sched_core *c);
/* The dynamic policy's current (adapted) window. */
double pr_sched_core_window_ms(const struct pr_sched_core *c);

#endif
