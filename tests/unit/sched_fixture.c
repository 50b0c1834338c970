/* SPDX-License-Identifier: MIT */
/*
 * The scheduler core tests' fixture (sched_fixture.h): default parameters,
 * a core with workers, checks on the groups it forms, and the runner of
 * scripted scenarios.
 */
#include "tests/unit/sched_fixture.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"

struct pr_sched_params sf_params(int policy)
{
    struct pr_sched_params p;

    memset(&p, 0, sizeof(p));
    p.policy = policy;
    p.group_size = 4;
    p.group_min = 2;
    p.group_max = 0;
    p.window_ms = 5.0;
    p.window_min_ms = 0.01;
    p.window_max_ms = 10.0;
    p.weighting = PR_WEIGHT_UNIFORM;
    p.staleness_alpha = 0.9;
    return p;
}

/* A core with workers 0 .. n-1, worker r on node r / 2. */
struct pr_sched_core *sf_make(const struct pr_sched_params *p, uint32_t n)
{
    struct pr_sched_core *c = pr_sched_core_create(p);

    ck_assert_ptr_nonnull(c);
    for (uint32_t r = 0; r < n; r++) {
        ck_assert_int_eq(pr_sched_core_add_worker(c, r, r / 2, 0), 0);
    }
    ck_assert_uint_eq(pr_sched_core_live(c), n);
    return c;
}

/*
 * The checks below name where they failed: the script and its step, or
 * "-" (step 0) when a test calls them itself.
 */
static void ready_at(struct pr_sched_core *c, uint32_t rank, uint64_t version,
                     uint64_t now_us, const char *name, size_t step)
{
    int rc = pr_sched_core_ready(c, rank, version, 100 + rank, now_us);

    ck_assert_msg(rc == 0, "%s, step %zu: ready(%u) returned %d", name, step,
                  rank, rc);
}

static void none_at(struct pr_sched_core *c, uint64_t now_us, const char *name,
                    size_t step)
{
    struct pr_sched_group g;
    int rc = pr_sched_core_next_group(c, now_us, &g);

    ck_assert_msg(rc == 0, "%s, step %zu: next_group(%llu) returned %d", name,
                  step, (unsigned long long)now_us, rc);
}

static void group_at(struct pr_sched_core *c, uint64_t now_us,
                     const uint32_t *ranks, uint32_t n,
                     struct pr_sched_group *g, const char *name, size_t step)
{
    int rc = pr_sched_core_next_group(c, now_us, g);

    ck_assert_msg(rc == 1, "%s, step %zu: next_group(%llu) returned %d", name,
                  step, (unsigned long long)now_us, rc);
    ck_assert_msg(g->n == n, "%s, step %zu: a group of %u, not %u", name, step,
                  g->n, n);
    for (uint32_t i = 0; i < n; i++) {
        const struct pr_sched_member *m = &g->members[i];

        ck_assert_msg(m->rank == ranks[i] && m->seq == 100 + ranks[i] &&
                          m->node == ranks[i] / 2,
                      "%s, step %zu: member %u is rank %u (seq %llu, node "
                      "%u), not %u",
                      name, step, i, m->rank, (unsigned long long)m->seq,
                      m->node, ranks[i]);
    }
}

void sf_ready(struct pr_sched_core *c, uint32_t rank, uint64_t version,
              uint64_t now_us)
{
    ready_at(c, rank, version, now_us, "-", 0);
}

void sf_ready_all(struct pr_sched_core *c, uint32_t first, uint32_t n,
                  uint64_t version, uint64_t now_us)
{
    for (uint32_t r = first; r < first + n; r++) {
        ready_at(c, r, version, now_us, "-", 0);
    }
}

void sf_expect_none(struct pr_sched_core *c, uint64_t now_us)
{
    none_at(c, now_us, "-", 0);
}

/* The next group must be exactly `ranks`, in this order. */
void sf_expect_group(struct pr_sched_core *c, uint64_t now_us,
                     const uint32_t *ranks, uint32_t n,
                     struct pr_sched_group *out)
{
    struct pr_sched_group g;

    group_at(c, now_us, ranks, n, &g, "-", 0);
    if (out != NULL) {
        *out = g;
    } else {
        pr_sched_group_fini(&g);
    }
}

int sf_close_to(double got, double want, double tol)
{
    return tol == 0.0 ? got == want : got >= want - tol && got <= want + tol;
}

/* One check of the group g a script took last. */
static void check_group(const struct sf_step *s, const struct pr_sched_group *g,
                        const char *name, size_t i)
{
    ck_assert_msg(g->members != NULL, "%s, step %zu: no group to check", name,
                  i);
    switch (s->op) {
    case SF_OP_WEIGHT:
        ck_assert_msg(s->rank < g->n, "%s, step %zu: no member %u", name, i,
                      s->rank);
        ck_assert_msg(sf_close_to(g->members[s->rank].weight, s->w, s->tol),
                      "%s, step %zu: member %u weighs %.17g, not %.17g", name,
                      i, s->rank, g->members[s->rank].weight, s->w);
        break;
    case SF_OP_WEIGHTS:
        for (uint32_t m = 0; m < g->n; m++) {
            ck_assert_msg(sf_close_to(g->members[m].weight, s->w, s->tol),
                          "%s, step %zu: member %u weighs %.17g, not %.17g",
                          name, i, m, g->members[m].weight, s->w);
        }
        break;
    case SF_OP_VERSION:
        ck_assert_msg(s->rank < g->n, "%s, step %zu: no member %u", name, i,
                      s->rank);
        ck_assert_msg(g->members[s->rank].version == (uint64_t)s->value,
                      "%s, step %zu: member %u has version %llu", name, i,
                      s->rank, (unsigned long long)g->members[s->rank].version);
        break;
    case SF_OP_ID:
        ck_assert_msg(g->id == (uint64_t)s->value, "%s, step %zu: id %llu",
                      name, i, (unsigned long long)g->id);
        break;
    case SF_OP_MAX_VERSION:
        ck_assert_msg(g->max_version == (uint64_t)s->value,
                      "%s, step %zu: max_version %llu", name, i,
                      (unsigned long long)g->max_version);
        break;
    case SF_OP_PERSONAL:
        ck_assert_msg(g->personal == s->value, "%s, step %zu: personal %d",
                      name, i, g->personal);
        break;
    default:
        ck_abort_msg("%s, step %zu: op %d is not a check", name, i, s->op);
    }
}

/* Finishes the group a script took, if any: fini must clear it. */
static void drop(struct pr_sched_group *g)
{
    if (g->members != NULL) {
        pr_sched_group_fini(g);
        ck_assert_ptr_null(g->members);
    }
}

/* The stats counter at byte offset s->n is s->value. */
static void stat_step(struct pr_sched_core *c, const struct sf_step *s,
                      const char *name, size_t i)
{
    struct pr_sched_stats st;
    uint64_t got;

    ck_assert_msg(s->n % sizeof(uint64_t) == 0 && s->n < sizeof(st),
                  "%s, step %zu: no counter at %u", name, i, s->n);
    pr_sched_core_stats(c, &st);
    memcpy(&got, (const char *)&st + s->n, sizeof(got));
    ck_assert_msg(got == (uint64_t)s->value,
                  "%s, step %zu: the counter at %u is %llu, not %lld", name, i,
                  s->n, (unsigned long long)got, (long long)s->value);
}

/* One check of the core's state. */
static void check_core(struct pr_sched_core *c, const struct sf_step *s,
                       const char *name, size_t i)
{
    switch (s->op) {
    case SF_OP_NONE:
        none_at(c, s->t, name, i);
        break;
    case SF_OP_DEADLINE:
        ck_assert_msg(pr_sched_core_deadline_us(c) == s->value,
                      "%s, step %zu: deadline %lld, not %lld", name, i,
                      (long long)pr_sched_core_deadline_us(c),
                      (long long)s->value);
        break;
    case SF_OP_WINDOW:
        ck_assert_msg(sf_close_to(pr_sched_core_window_ms(c), s->w, 1e-12),
                      "%s, step %zu: window %.17g ms, not %.17g", name, i,
                      pr_sched_core_window_ms(c), s->w);
        break;
    case SF_OP_QUEUED:
        ck_assert_msg(pr_sched_core_queued(c) == (uint32_t)s->value,
                      "%s, step %zu: %u queued", name, i,
                      pr_sched_core_queued(c));
        break;
    case SF_OP_STEERING:
        ck_assert_msg(pr_sched_core_steering(c) == s->value,
                      "%s, step %zu: steering %d", name, i,
                      pr_sched_core_steering(c));
        break;
    case SF_OP_COMPONENTS:
        ck_assert_msg(pr_sched_core_components(c) == (uint32_t)s->value,
                      "%s, step %zu: %u components", name, i,
                      pr_sched_core_components(c));
        break;
    case SF_OP_STAT:
        stat_step(c, s, name, i);
        break;
    default:
        ck_abort_msg("%s, step %zu: unknown op %d", name, i, s->op);
    }
}

/* One step that calls the core or checks its state, not a group's. */
static void core_step(struct pr_sched_core *c, const struct sf_step *s,
                      const char *name, size_t i)
{
    int rc = 0;

    switch (s->op) {
    case SF_OP_READY:
        ready_at(c, s->rank, (uint64_t)s->value, s->t, name, i);
        break;
    case SF_OP_READY_ALL:
        for (uint32_t r = s->rank; r < s->rank + s->n; r++) {
            ready_at(c, r, (uint64_t)s->value, s->t, name, i);
        }
        break;
    case SF_OP_HEAL:
        rc = pr_sched_core_heal(c, s->rank);
        ck_assert_msg(rc == s->value, "%s, step %zu: heal(%u) returned %d",
                      name, i, s->rank, rc);
        break;
    case SF_OP_ADD:
        rc = pr_sched_core_add_worker(c, s->rank, s->rank / 2, s->t);
        ck_assert_msg(rc == 0, "%s, step %zu: add_worker(%u) returned %d", name,
                      i, s->rank, rc);
        break;
    case SF_OP_REMOVE:
        rc = pr_sched_core_remove_worker(c, s->rank, s->t);
        ck_assert_msg(rc == 0, "%s, step %zu: remove_worker(%u) returned %d",
                      name, i, s->rank, rc);
        break;
    case SF_OP_MARK_STARTED:
        pr_sched_core_mark_started(c, s->t);
        break;
    default:
        check_core(c, s, name, i);
        break;
    }
}

void sf_script(struct pr_sched_core *c, const char *name,
               const struct sf_step *steps)
{
    struct pr_sched_group g = {0};

    for (size_t i = 0; steps[i].op != SF_OP_END; i++) {
        const struct sf_step *s = &steps[i];

        switch (s->op) {
        case SF_OP_GROUP:
            ck_assert_msg(s->n >= 1 && s->n <= SF_MAX,
                          "%s, step %zu: a group of %u", name, i, s->n);
            drop(&g);
            group_at(c, s->t, s->ranks, s->n, &g, name, i);
            break;
        case SF_OP_WEIGHT:
        case SF_OP_WEIGHTS:
        case SF_OP_VERSION:
        case SF_OP_ID:
        case SF_OP_MAX_VERSION:
        case SF_OP_PERSONAL:
            check_group(s, &g, name, i);
            break;
        default:
            core_step(c, s, name, i);
            break;
        }
    }
    drop(&g);
}

/* A field of k that is not 0 replaces the default's. */
#define OVERRIDE(p, k, field)                                                  \
    do {                                                                       \
        if ((k)->field != 0) {                                                 \
            (p).field = (k)->field;                                            \
        }                                                                      \
    } while (0)

struct pr_sched_params sf_case_params(const struct sf_case *k)
{
    struct pr_sched_params p = sf_params(k->policy);

    OVERRIDE(p, k, group_size);
    OVERRIDE(p, k, group_min);
    OVERRIDE(p, k, group_max);
    OVERRIDE(p, k, window_ms);
    OVERRIDE(p, k, window_min_ms);
    OVERRIDE(p, k, window_max_ms);
    OVERRIDE(p, k, weighting);
    OVERRIDE(p, k, min_workers);
    OVERRIDE(p, k, isolation_bound);
    OVERRIDE(p, k, gen_hold_ms);
    return p;
}

void sf_run(const struct sf_case *k)
{
    struct pr_sched_params p = sf_case_params(k);
    struct pr_sched_core *c = sf_make(&p, k->workers);

    sf_script(c, k->name, k->steps);
    pr_sched_core_destroy(c);
}
