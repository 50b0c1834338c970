/*
 * Private to the scheduler core (sched_core.c, sched_gen.c,
 * sched_weights.c): the core's state and the calls between its files.
 * Nothing outside these three files includes it.
 */
#ifndef PR_SCHED_CORE_INT_H
#define PR_SCHED_CORE_INT_H

#include "daemon/sched_core.h"

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
    uint32_t node;
    uint64_t version;  /* of the queued READY */
    uint64_t seq;      /* of the queued READY */
    uint64_t ready_us; /* when the queued READY arrived */
    uint32_t prev;     /* ready queue links (READY only), PR_SCHED_NIL */
    uint32_t next;

    /*
     * Union-find over live workers (sched_gen.c). size and qcnt are valid
     * at roots only: the number of workers in the component and how many
     * of them are queued. Only live workers are ever in a tree.
     */
    uint32_t parent;
    uint32_t size;
    uint32_t qcnt;
    uint32_t aux; /* scratch for remove_worker()'s rebuild */

    /* Selection marks: equal to the core's stamp when set in this pass. */
    uint64_t picked; /* this worker is in the group being chosen */
    uint64_t comp;   /* (at a root) its component is in that group */
};

struct pr_sched_core {
    struct pr_sched_params p;

    struct pr_sched_wk *w; /* cap slots, ranks 0 .. cap - 1 */
    uint32_t cap;
    uint32_t live;   /* workers added and not removed */
    uint32_t queued; /* workers READY, the length of the ready queue */
    uint32_t head;   /* oldest READY, PR_SCHED_NIL if none */
    uint32_t tail;   /* newest READY */
    uint64_t next_id;
    double window_ms; /* dynamic: the adapted window, one per core */

    /* Group generator and connectivity windows (sched_gen.c). */
    uint32_t ncomp;   /* components among live workers */
    uint32_t qcomps;  /* components with at least one queued worker */
    uint64_t updates; /* member-updates since the last reset */
    uint64_t mark;    /* updates when steering began */
    int steering;     /* the window reached B x live unconnected */
    int holding;      /* a due group is held for another component */
    int hold_spent;   /* a hold expired in this window: no more holds */
    uint64_t hold_start_us;
    uint64_t stamp; /* selection pass counter for picked/comp */

    struct pr_sched_stats st;
};

/* Milliseconds (validated: finite, >= 0, bounded) to whole microseconds. */
uint64_t pr_sched_ms_to_us(double ms);

/* sched_gen.c: union-find, windows and steered selection. */
uint32_t pr_sched_gen_find(struct pr_sched_core *c, uint32_t x);
void pr_sched_gen_reset(struct pr_sched_core *c);
void pr_sched_gen_add(struct pr_sched_core *c, uint32_t rank);
void pr_sched_gen_enqueued(struct pr_sched_core *c, uint32_t rank);
void pr_sched_gen_dequeued(struct pr_sched_core *c, uint32_t rank);
void pr_sched_gen_remove(struct pr_sched_core *c, uint32_t rank);
int pr_sched_gen_active(const struct pr_sched_core *c);
void pr_sched_gen_params_changed(struct pr_sched_core *c);
int pr_sched_gen_hold(struct pr_sched_core *c, uint32_t group_cap,
                      uint64_t now_us);
uint64_t pr_sched_gen_hold_us(const struct pr_sched_params *p);
void pr_sched_gen_select(struct pr_sched_core *c, uint32_t n,
                         struct pr_sched_member *m);
void pr_sched_gen_formed(struct pr_sched_core *c,
                         const struct pr_sched_member *m, uint32_t n);
void pr_sched_gen_check(struct pr_sched_core *c);

/* sched_weights.c: staleness weights written into m[i].weight. */
int pr_sched_weights_members(struct pr_sched_member *m, uint32_t n,
                             double alpha);

#endif
