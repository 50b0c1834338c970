/* SPDX-License-Identifier: MIT */
/*
 * Private to the scheduler core (sched_core.c, sched_gen.c,
 * sched_weights.c, sched_window.c): the core's state and its calls into
 * the other three (sched_core.c calls sched_gen.c, sched_weights.c and
 * sched_window.c, never back). Nothing outside these four files includes
 * it.
 */
#ifndef PR_SCHED_CORE_INT_H
#define PR_SCHED_CORE_INT_H

#include "daemon/sched/core/sched_core.h"

#include <math.h>
#include <stdint.h>

/* "No worker": the end of the ready queue, an empty queue. */
#define PR_SCHED_NIL UINT32_MAX

/* See the state diagram in sched_core.h; ABSENT = never added or removed. */
enum pr_sched_wstate {
    PR_SCHED_ABSENT = 0,
    PR_SCHED_IDLE,
    PR_SCHED_READY,
    PR_SCHED_GROUPED,
};

/*
 * One slot per rank, in an array grown on demand. A slot stays allocated
 * after remove_worker() (state ABSENT) so that ranks can come back.
 */
struct pr_sched_wk {
    uint8_t state; /* enum pr_sched_wstate */
    /*
     * Pace, for the generator's adaptive hold (sched_gen.c): readied once a
     * READY arrived since the worker joined, timed once ewma_us holds at
     * least one ready-to-ready interval, late once a hold that waited for
     * it expired, until its next READY (or the window's reset).
     */
    uint8_t readied;
    uint8_t timed;
    uint8_t late;
    /*
     * Healing (docs/algorithm.md): the worker's next group with a member
     * that is not healing gives it that group's model and takes nothing
     * of its own (weight 0). Set by pr_sched_core_heal() or by a READY at
     * version 1 (a fresh model) once the job has gone past it; kept
     * through groups without such a member.
     */
    uint8_t heal;
    uint32_t node;
    uint64_t version;  /* of the queued READY */
    uint64_t seq;      /* of the queued READY */
    uint32_t tag;      /* of the queued READY (allreduce: groups one tag) */
    uint64_t ready_us; /* when its latest READY arrived */
    uint64_t left_us;  /* when it joined, or last left the queue */
    uint64_t ewma_us;  /* EWMA of its ready-to-ready interval (if timed) */
    uint64_t dev_us;   /* EWMA of |interval - ewma_us|, its spread */
    uint64_t red_us;   /* EWMA of its groups' reduce times, if red_known */
    uint8_t red_known;
    uint32_t prev; /* ready queue links (READY only), PR_SCHED_NIL */
    uint32_t next;

    /*
     * Union-find over live workers (sched_gen.c). size, qcnt and lcnt are
     * valid at roots only: the number of workers in the component, how
     * many of them are queued and how many are late. Only live workers
     * are ever in a tree.
     */
    uint32_t parent;
    uint32_t size;
    uint32_t qcnt;
    uint32_t lcnt;
    uint32_t aux; /* scratch for remove_worker()'s rebuild */

    /* Selection marks: equal to the core's stamp when set in this pass. */
    uint64_t picked; /* this worker is in the group being chosen */
    uint64_t comp;   /* (at a root) its component is in that group */
};

struct pr_sched_core {
    struct pr_sched_params p;

    struct pr_sched_wk *w; /* cap slots, ranks 0 .. cap - 1 */
    uint32_t cap;
    uint32_t live;       /* workers added and not removed */
    int started;         /* min_workers have been live at once */
    uint64_t started_us; /* when (0: from the start, or on a reload) */
    uint32_t queued;     /* workers READY, the length of the ready queue */
    uint32_t head;       /* oldest READY, PR_SCHED_NIL if none */
    uint32_t tail;       /* newest READY */
    uint64_t next_id;
    uint64_t job_version; /* the largest version a group has reached */
    double window_ms;     /* dynamic: the adapted window, one per core */

    /* Group generator and connectivity windows (sched_gen.c). */
    uint32_t ncomp;   /* components among live workers */
    uint32_t qcomps;  /* components with at least one queued worker */
    uint64_t updates; /* member-updates since the last reset */
    uint64_t mark;    /* updates when steering began */
    int steering;     /* the window reached B x live unconnected */
    int holding;      /* a due group is held for another component */
    int hold_exact;   /* hold_until_us is the bound, not the 1 ms floor */
    uint32_t nlate;   /* live workers marked late */
    uint64_t hold_start_us;
    uint64_t hold_until_us; /* while holding: when to look again */
    uint64_t hold_max_us;   /* gen_hold_max_ms or its default */
    uint64_t stamp;         /* selection pass counter for picked/comp */

    struct pr_sched_stats st;
};

/*
 * Milliseconds (validated: finite, >= 0, bounded) to whole microseconds.
 * Inline here, not in sched_core.c, so that sched_gen.c, which the core
 * calls, needs nothing back from it: the core's files depend one way.
 */
static inline uint64_t pr_sched_ms_to_us(double ms)
{
    return (uint64_t)ceil(ms * 1000.0);
}

/* sched_gen.c: union-find, windows and steered selection. */
uint32_t pr_sched_gen_find(struct pr_sched_core *c, uint32_t x);
void pr_sched_gen_reset(struct pr_sched_core *c);
void pr_sched_gen_add(struct pr_sched_core *c, uint32_t rank, uint64_t now_us);
void pr_sched_gen_enqueued(struct pr_sched_core *c, uint32_t rank);
void pr_sched_gen_dequeued(struct pr_sched_core *c, uint32_t rank);
void pr_sched_gen_remove(struct pr_sched_core *c, uint32_t rank);
int pr_sched_gen_active(const struct pr_sched_core *c);
void pr_sched_gen_params_changed(struct pr_sched_core *c);
void pr_sched_gen_unlate(struct pr_sched_core *c, uint32_t rank);
int pr_sched_gen_hold(struct pr_sched_core *c, uint32_t group_cap,
                      uint64_t now_us);
void pr_sched_gen_select(struct pr_sched_core *c, uint32_t n,
                         struct pr_sched_member *m);
void pr_sched_gen_formed(struct pr_sched_core *c,
                         const struct pr_sched_member *m, uint32_t n);
void pr_sched_gen_check(struct pr_sched_core *c);

/*
 * sched_window.c: the dynamic window, with a worker queued (c->head
 * valid): when it opened (the oldest queued READY, or when min_workers
 * were reached if later), when the one opened at t0 closes, and its
 * adaptation after a dynamic group of n.
 */
uint64_t pr_sched_window_open_us(const struct pr_sched_core *c);
uint64_t pr_sched_window_close_us(const struct pr_sched_core *c, uint64_t t0);
void pr_sched_window_adapt(struct pr_sched_core *c, uint32_t n);

/* sched_weights.c: staleness weights written into m[i].weight. */
int pr_sched_weights_members(struct pr_sched_member *m, uint32_t n,
                             double alpha);

#endif
