/* SPDX-License-Identifier: MIT */
/*
 * The scheduler core tests' fixture (sched_fixture.h): default parameters,
 * a core with workers, and checks on the groups it forms.
 */
#include "tests/unit/sched_fixture.h"

#include <check.h>
#include <stdint.h>
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

void sf_ready(struct pr_sched_core *c, uint32_t rank, uint64_t version,
              uint64_t now_us)
{
    ck_assert_int_eq(pr_sched_core_ready(c, rank, version, 100 + rank, now_us),
                     0);
}

void sf_expect_none(struct pr_sched_core *c, uint64_t now_us)
{
    struct pr_sched_group g;

    ck_assert_int_eq(pr_sched_core_next_group(c, now_us, &g), 0);
}

/* The next group must be exactly `ranks`, in this order. */
void sf_expect_group(struct pr_sched_core *c, uint64_t now_us,
                     const uint32_t *ranks, uint32_t n,
                     struct pr_sched_group *out)
{
    struct pr_sched_group g;

    ck_assert_int_eq(pr_sched_core_next_group(c, now_us, &g), 1);
    ck_assert_uint_eq(g.n, n);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_eq(g.members[i].rank, ranks[i]);
        ck_assert_uint_eq(g.members[i].seq, 100 + ranks[i]);
        ck_assert_uint_eq(g.members[i].node, ranks[i] / 2);
    }
    if (out != NULL) {
        *out = g;
    } else {
        pr_sched_group_fini(&g);
    }
}
