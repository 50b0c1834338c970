/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the scheduler core's unit tests (test_sched_core*.c),
 * linked into each of their binaries (and, unused, into every other unit
 * binary: hence the sf_ prefix).
 *
 * The tests drive a struct pr_sched_core directly with a fake clock (times
 * in microseconds); nothing here keeps state between calls.
 *
 * Most scenarios are scripts: a table of steps (sf_step), each one call
 * into the core or one check of what it returned, run in order by
 * sf_script(); a case (sf_case) adds the params and the workers, so that a
 * test file is a table of cases run by one Check loop test.
 */
#ifndef SCHED_FIXTURE_H
#define SCHED_FIXTURE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"

/* The largest group a script names. */
#define SF_MAX 8

#define SF_NELEM(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Parameters for `policy`: P = 4, groups of 2 or more, a 5 ms window
 * (0.01 to 10 ms), uniform weights, staleness alpha 0.9.
 */
struct pr_sched_params sf_params(int policy);
/* A core with workers 0 .. n-1, worker r on node r / 2. */
struct pr_sched_core *sf_make(const struct pr_sched_params *p, uint32_t n);
/* Worker `rank` is ready with `version`; its READY has seq 100 + rank. */
void sf_ready(struct pr_sched_core *c, uint32_t rank, uint64_t version,
              uint64_t now_us);
/* Workers first .. first + n - 1 are ready with `version` (sf_ready). */
void sf_ready_all(struct pr_sched_core *c, uint32_t first, uint32_t n,
                  uint64_t version, uint64_t now_us);
/* got is want within tol; a tolerance of 0 asks for exact equality. */
int sf_close_to(double got, double want, double tol);
/* No group is due at now_us. */
void sf_expect_none(struct pr_sched_core *c, uint64_t now_us);
/*
 * The next group must be exactly `ranks`, in this order; it is stored in
 * *out (which the caller then finishes) or, if out is NULL, finished here.
 */
void sf_expect_group(struct pr_sched_core *c, uint64_t now_us,
                     const uint32_t *ranks, uint32_t n,
                     struct pr_sched_group *out);

/* ---- scripts ------------------------------------------------------------ */

enum sf_op {
    SF_OP_END = 0,      /* the end of a script */
    SF_OP_READY,        /* sf_ready(rank, value, t) */
    SF_OP_READY_ALL,    /* sf_ready_all(rank, n, value, t) */
    SF_OP_HEAL,         /* pr_sched_core_heal(rank) returns value */
    SF_OP_ADD,          /* add_worker(rank, on node rank / 2, t) succeeds */
    SF_OP_REMOVE,       /* remove_worker(rank, t) succeeds */
    SF_OP_MARK_STARTED, /* pr_sched_core_mark_started(t) */
    SF_OP_NONE,         /* no group is due at t */
    SF_OP_GROUP,        /* the next group at t is ranks[0 .. n), in order */
    SF_OP_WEIGHT,       /* member rank's weight in it is w, within tol */
    SF_OP_WEIGHTS,      /* every member's weight is w, within tol */
    SF_OP_VERSION,      /* member rank's version in it is value */
    SF_OP_ID,           /* its id is value */
    SF_OP_MAX_VERSION,  /* its max_version is value */
    SF_OP_PERSONAL,     /* its personal flag is value */
    SF_OP_DEADLINE,     /* pr_sched_core_deadline_us() is value */
    SF_OP_WINDOW,       /* pr_sched_core_window_ms() is w, within 1e-12 */
    SF_OP_QUEUED,       /* pr_sched_core_queued() is value */
    SF_OP_STEERING,     /* pr_sched_core_steering() is value */
    SF_OP_COMPONENTS,   /* pr_sched_core_components() is value */
    SF_OP_STAT,         /* the uint64_t at offset n of the stats is value */
};

/*
 * One step. The weight checks and the group's fields are of the group the
 * last SF_OP_GROUP took; a tolerance of 0 asks for exact equality.
 */
struct sf_step {
    enum sf_op op;
    uint32_t rank; /* a worker; in a check of a member, its index */
    uint64_t t;    /* now_us */
    int64_t value;
    uint32_t n;
    uint32_t ranks[SF_MAX];
    double w;
    double tol;
};

#define SF_COUNT(...) (sizeof((uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

/* A step's initializer: the designators given, every other field 0. */
#define SF_STEP(...)                                                           \
    {                                                                          \
        __VA_ARGS__                                                            \
    }

#define SF_END SF_STEP(.op = SF_OP_END)
#define SF_READY(r, v, at)                                                     \
    SF_STEP(.op = SF_OP_READY, .rank = (r), .value = (v), .t = (at))
#define SF_READY_ALL(first, k, v, at)                                          \
    SF_STEP(.op = SF_OP_READY_ALL, .rank = (first), .n = (k), .value = (v),    \
            .t = (at))
#define SF_HEAL(r, rc)      SF_STEP(.op = SF_OP_HEAL, .rank = (r), .value = (rc))
#define SF_ADD(r, at)       SF_STEP(.op = SF_OP_ADD, .rank = (r), .t = (at))
#define SF_REMOVE(r, at)    SF_STEP(.op = SF_OP_REMOVE, .rank = (r), .t = (at))
#define SF_MARK_STARTED(at) SF_STEP(.op = SF_OP_MARK_STARTED, .t = (at))
#define SF_NONE(at)         SF_STEP(.op = SF_OP_NONE, .t = (at))
#define SF_GROUP(at, ...)                                                      \
    SF_STEP(.op = SF_OP_GROUP, .t = (at), .n = SF_COUNT(__VA_ARGS__),          \
            .ranks = {__VA_ARGS__})
#define SF_WEIGHT(i, weight, tolerance)                                        \
    SF_STEP(.op = SF_OP_WEIGHT, .rank = (i), .w = (weight), .tol = (tolerance))
#define SF_WEIGHTS(weight, tolerance)                                          \
    SF_STEP(.op = SF_OP_WEIGHTS, .w = (weight), .tol = (tolerance))
#define SF_VERSION(i, v)  SF_STEP(.op = SF_OP_VERSION, .rank = (i), .value = (v))
#define SF_ID(id)         SF_STEP(.op = SF_OP_ID, .value = (id))
#define SF_MAX_VERSION(v) SF_STEP(.op = SF_OP_MAX_VERSION, .value = (v))
#define SF_PERSONAL(p)    SF_STEP(.op = SF_OP_PERSONAL, .value = (p))
#define SF_DEADLINE(us)   SF_STEP(.op = SF_OP_DEADLINE, .value = (us))
#define SF_WINDOW(ms)     SF_STEP(.op = SF_OP_WINDOW, .w = (ms))
#define SF_STEERING(on)   SF_STEP(.op = SF_OP_STEERING, .value = (on))
#define SF_COMPONENTS(k)  SF_STEP(.op = SF_OP_COMPONENTS, .value = (k))
#define SF_STAT(field, v)                                                      \
    SF_STEP(.op = SF_OP_STAT, .n = offsetof(struct pr_sched_stats, field),     \
            .value = (v))
#define SF_QUEUED(k) SF_STEP(.op = SF_OP_QUEUED, .value = (k))

/*
 * Runs `steps` up to SF_OP_END on c; `name` labels its failures. The last
 * group it took is finished before the next one and at the end.
 */
void sf_script(struct pr_sched_core *c, const char *name,
               const struct sf_step *steps);

/*
 * A scripted scenario: sf_params(policy) with the fields below that are
 * not 0 in place of its own, `workers` workers (sf_make), then `steps`.
 */
struct sf_case {
    const char *name;
    int policy;
    uint32_t workers;
    uint32_t group_size;
    uint32_t group_min;
    uint32_t group_max;
    double window_ms;
    double window_min_ms;
    double window_max_ms;
    int weighting;
    uint32_t min_workers;
    uint32_t isolation_bound;
    double gen_hold_ms;
    const struct sf_step *steps;
};

/* The params of case k. */
struct pr_sched_params sf_case_params(const struct sf_case *k);
/* Makes k's core, runs its script and destroys the core. */
void sf_run(const struct sf_case *k);

#endif
