/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the scheduler core (daemon/sched/core/sched_core.h): the
 * staleness weights, worker bookkeeping, and the three policies driven by a
 * fake clock. The group generator is tested in test_sched_core_gen.c, its
 * adaptive hold in test_sched_core_hold.c; the fixture is sched_fixture.h.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"
#include "tests/unit/sched_fixture.h"
#include "tests/check_run.h"

/* ---- weights ---------------------------------------------------------- */

/* Staleness weights of k versions against their exact values. */
struct weight_case {
    const char *name;
    uint64_t v[4];
    size_t k;
    double alpha;
    double w[4];
    double tol; /* 0: exactly */
};

static const struct weight_case weight_cases[] = {
    {"one_member", {42}, 1, 0.9, {1.0}, 0},
    {"equal_versions", {7, 7, 7, 7}, 4, 0.9, {0.25, 0.25, 0.25, 0.25}, 1e-15},
    /*
     * versions {10, 10, 8}, alpha 0.9: T = 10, s = {1, 1, 3}, S = 3.
     * Level masses: s=1: 0.1, s=2: 0.09, s=3: 0.081; they sum to
     * 0.271 = 1 - 0.9^3. Nobody is on level 2, so its 0.09 goes to level 1:
     * 0.19, split over two members: 0.095 each. Normalized by 0.271:
     *   w = {0.095/0.271, 0.095/0.271, 0.081/0.271}
     *     = {0.350553505535..., 0.350553505535..., 0.298892988929...}.
     */
    {"level_gap",
     {10, 10, 8},
     3,
     0.9,
     {0.095 / 0.271, 0.095 / 0.271, 0.081 / 0.271},
     1e-12},
    {"level_gap_decimal",
     {10, 10, 8},
     3,
     0.9,
     {0.350553505535055, 0.350553505535055, 0.298892988929889},
     1e-12},
    /*
     * versions {4, 2, 5, 4} (unsorted), alpha 0.5: T = 5, s = {2, 4, 1, 2},
     * S = 4. Masses: s=1 0.5, s=2 0.25, s=3 0.125 (empty: to level 1),
     * s=4 0.0625; sum 0.9375. Level 1: 0.625 -> 2/3; level 2: 0.25 over two
     * members -> 0.125 / 0.9375 = 2/15 each; level 4: 0.0625 / 0.9375 = 1/15.
     */
    {"shared_level",
     {4, 2, 5, 4},
     4,
     0.5,
     {2.0 / 15.0, 1.0 / 15.0, 2.0 / 3.0, 2.0 / 15.0},
     1e-12},
    /* S = 2^64: the stale member's mass underflows to exactly 0. */
    {"far", {UINT64_MAX, 0}, 2, 0.9, {1.0, 0.0}, 0},
};

START_TEST(test_sched_core_weights_case)
{
    const struct weight_case *k = &weight_cases[_i];
    double w[4] = {-1.0, -1.0, -1.0, -1.0};

    ck_assert_int_eq(pr_sched_staleness_weights(k->v, k->k, k->alpha, w), 0);
    for (size_t i = 0; i < k->k; i++) {
        ck_assert_msg(sf_close_to(w[i], k->w[i], k->tol),
                      "%s: w[%zu] = %.17g, not %.17g", k->name, i, w[i],
                      k->w[i]);
    }
}
END_TEST

START_TEST(test_sched_core_weights_sum_to_one)
{
    enum { K = 1000 };
    static uint64_t v[K];
    static double w[K];
    uint64_t x = 88172645463325252ull;

    /* Many levels, some far apart: more than the stack buffer holds. */
    for (int i = 0; i < K; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v[i] = 1000000 + x % (i % 3 == 0 ? 5 : 200);
    }
    ck_assert_int_eq(pr_sched_staleness_weights(v, K, 0.9, w), 0);
    double sum = 0.0;
    for (int i = 0; i < K; i++) {
        ck_assert(w[i] >= 0.0);
        sum += w[i];
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-12);

    /* A gap of 10^6 levels with several members per level. */
    uint64_t gap[] = {3000000, 2000000, 3000000, 2000000, 2999999};
    double wg[5];
    ck_assert_int_eq(pr_sched_staleness_weights(gap, 5, 0.999, wg), 0);
    sum = 0.0;
    for (int i = 0; i < 5; i++) {
        sum += wg[i];
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-12);
    ck_assert_double_eq_tol(wg[0], wg[2], 1e-15);
    ck_assert(wg[0] > wg[4] && wg[4] > wg[1]);
    ck_assert_double_eq_tol(wg[1], 0.0, 1e-300);
}
END_TEST

START_TEST(test_sched_core_weights_invalid_args)
{
    uint64_t v[] = {1, 2};
    double w[2];

    ck_assert_int_eq(pr_sched_staleness_weights(v, 0, 0.9, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(v, 2, 0.0, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(v, 2, 1.0, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(v, 2, -0.5, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(v, 2, NAN, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(NULL, 2, 0.9, w), -EINVAL);
    ck_assert_int_eq(pr_sched_staleness_weights(v, 2, 0.9, NULL), -EINVAL);
}
END_TEST

/* ---- workers and params ----------------------------------------------- */

START_TEST(test_sched_core_add_remove_errors)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c = sf_make(&p, 2);

    ck_assert_int_eq(pr_sched_core_add_worker(c, 1, 0, 0), -EEXIST);
    ck_assert_int_eq(pr_sched_core_add_worker(c, PR_SCHED_MAX, 0, 0), -EINVAL);
    ck_assert_int_eq(pr_sched_core_add_worker(c, PR_SCHED_MAX - 1, 0, 0), 0);
    ck_assert_uint_eq(pr_sched_core_live(c), 3);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 7, 0), -ENOENT);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, PR_SCHED_MAX + 5, 0),
                     -ENOENT);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, PR_SCHED_MAX - 1, 0), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, PR_SCHED_MAX - 1, 0),
                     -ENOENT);
    ck_assert_int_eq(pr_sched_core_add_worker(c, PR_SCHED_MAX - 1, 0, 0), 0);
    ck_assert_uint_eq(pr_sched_core_live(c), 3);
    ck_assert_uint_eq(pr_sched_core_components(c), 3);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_ready_errors)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c = sf_make(&p, 4);

    ck_assert_int_eq(pr_sched_core_ready(c, 9, 0, 1, 0), -ENOENT);
    ck_assert_int_eq(pr_sched_core_ready(c, 1, 0, 1, 0), 0);
    ck_assert_int_eq(pr_sched_core_ready(c, 1, 0, 2, 0), -EALREADY);
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 0), 0);
    ck_assert_uint_eq(pr_sched_core_queued(c), 0);
    ck_assert_int_eq(pr_sched_core_ready(c, 1, 0, 3, 0), -ENOENT);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_cancel)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 3);

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 1);
    /* Wrong seq: not withdrawn. */
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 999, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 2), 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 77, 1, 2), -ENOENT);
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    sf_expect_none(c, 3);
    sf_ready(c, 2, 1, 4);
    sf_expect_group(c, 4, (const uint32_t[]){0, 2}, 2, NULL);
    /* Grouped now: nothing to withdraw. */
    ck_assert_int_eq(pr_sched_core_cancel(c, 0, 100, 5), -ENOENT);
    /* A cancelled worker may be ready again. */
    sf_ready(c, 1, 2, 6);
    sf_ready(c, 0, 2, 7);
    sf_expect_group(c, 7, (const uint32_t[]){1, 0}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_params_invalid)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);

    ck_assert_ptr_null(pr_sched_core_create(NULL));
    p.policy = 7;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_DYNAMIC);
    p.window_min_ms = 6.0; /* > window_ms */
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_DYNAMIC);
    p.group_min = 5;
    p.group_max = 3;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_DYNAMIC);
    p.window_max_ms = NAN;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_CONSTANT);
    p.weighting = PR_WEIGHT_STALENESS;
    p.staleness_alpha = 1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p.weighting = 9;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_CONSTANT);
    p.gen_hold_ms = -1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = sf_params(PR_POLICY_CONSTANT);
    p.gen_hold_max_ms = NAN;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p.gen_hold_max_ms = -1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));

    /* A rejected reload leaves the old params in force: P stays 2. */
    p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_params bad = p;
    bad.group_size = 0;
    ck_assert_int_eq(pr_sched_core_set_params(c, &bad), -EINVAL);
    ck_assert_int_eq(pr_sched_core_set_params(c, NULL), -EINVAL);
    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    /* A good one takes effect: P = 3. */
    struct pr_sched_params good = p;
    good.group_size = 3;
    ck_assert_int_eq(pr_sched_core_set_params(c, &good), 0);
    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_expect_none(c, 0);
    sf_ready(c, 2, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- the policies, scripted (sched_fixture.h) ------------------------- */

static const struct sf_case allreduce_cases[] = {
    {
        .name = "waits_for_all",
        .policy = PR_POLICY_ALLREDUCE,
        .weighting = PR_WEIGHT_STALENESS, /* ignored: allreduce is uniform */
        .workers = 4,
        .steps =
            (const struct sf_step[]){
                SF_READY(2, 5, 0),
                SF_READY(0, 3, 1),
                SF_READY(3, 5, 2),
                SF_NONE(3),
                SF_DEADLINE(-1),
                SF_READY(1, 4, 4),
                SF_GROUP(4, 2, 0, 3, 1),
                SF_ID(1),
                SF_MAX_VERSION(5),
                SF_PERSONAL(0),
                SF_WEIGHTS(0.25, 0),
                SF_NONE(5),
                SF_END,
            },
    },
    {
        .name = "after_remove",
        .policy = PR_POLICY_ALLREDUCE,
        .workers = 4,
        .steps =
            (const struct sf_step[]){
                /* Removing the one not ready completes the group. */
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 0),
                SF_READY(2, 1, 0),
                SF_NONE(0),
                SF_REMOVE(3, 1),
                SF_GROUP(1, 0, 1, 2),
                SF_WEIGHT(0, 1.0 / 3.0, 1e-15),
                /* Removing a queued one: the rest are all of the live ones. */
                SF_READY(2, 2, 2),
                SF_READY(0, 2, 2),
                SF_NONE(2),
                SF_REMOVE(2, 3),
                SF_NONE(3),
                SF_READY(1, 2, 4),
                SF_GROUP(4, 0, 1),
                SF_END,
            },
    },
};

/*
 * min_workers: nothing forms (and no deadline is armed) until that many
 * workers joined; then the policy runs as usual, and a worker that leaves
 * afterwards is not waited for.
 */
/* Constant or dynamic, P = 2, min_workers 4, 3 workers joined. */
static const struct sf_step min_workers_4_of_3[] = {
    SF_READY(0, 1, 0),
    SF_READY(1, 1, 1),
    SF_READY(2, 1, 2),
    /* P ready, but only 3 of 4 joined: past any window, nothing. */
    SF_NONE(1000000),
    SF_DEADLINE(-1),
    SF_ADD(3, 1000001),
    SF_GROUP(1000002, 0, 1),
    SF_END,
};

static const struct sf_case min_workers_cases[] = {
    {
        .name = "allreduce",
        .policy = PR_POLICY_ALLREDUCE,
        .min_workers = 3,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 1),
                SF_NONE(2), /* 2 of 3 joined: all 2 ready, still no group */
                SF_ADD(2, 3),
                SF_NONE(4), /* the third joined, not ready yet */
                SF_READY(2, 1, 5),
                SF_GROUP(5, 0, 1, 2),
                /* Started: one leaves, the other two go on without it. */
                SF_REMOVE(1, 6),
                SF_READY(0, 2, 7),
                SF_READY(2, 2, 8),
                SF_GROUP(8, 0, 2),
                SF_END,
            },
    },
    {
        .name = "constant",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .group_max = 2,
        .min_workers = 4,
        .workers = 3,
        .steps = min_workers_4_of_3,
    },
    {
        .name = "dynamic",
        .policy = PR_POLICY_DYNAMIC,
        .group_size = 2,
        .group_max = 2,
        .min_workers = 4,
        .workers = 3,
        .steps = min_workers_4_of_3,
    },
    {
        /*
         * Dynamic, groups of all live workers: the window opens when the
         * last worker joins, not when the first queued one became ready,
         * so the late one still makes the first group.
         */
        .name = "dynamic_window",
        .policy = PR_POLICY_DYNAMIC,
        .min_workers = 4, /* window 5 ms, group_max 0 = all live */
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 1),
                SF_READY(2, 1, 2),
                SF_NONE(1000000),
                SF_ADD(3, 1000000),
                SF_DEADLINE(1000000 + 5000),
                SF_NONE(1000001),
                SF_READY(3, 1, 1000002),
                SF_GROUP(1000002, 0, 1, 2, 3),
                /* Later windows run from the oldest ready worker as usual. */
                SF_READY(0, 2, 1000010),
                SF_NONE(1000011),
                SF_DEADLINE(1000010 + 4500), /* the window shrank by 0.9 */
                SF_END,
            },
    },
    {
        /*
         * Workers registering again with a restarted scheduler mark the
         * job as started: one that left meanwhile is not waited for.
         * Everybody leaving makes the next job wait for min_workers again.
         */
        .name = "marked_and_reset",
        .policy = PR_POLICY_ALLREDUCE,
        .min_workers = 3,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 1),
                SF_NONE(2),
                SF_MARK_STARTED(3),
                SF_GROUP(3, 0, 1),
                SF_REMOVE(0, 4),
                SF_REMOVE(1, 5),
                SF_ADD(0, 6),
                SF_READY(0, 1, 7),
                SF_NONE(8), /* a new job: 1 of 3 */
                SF_END,
            },
    },
};

static const struct sf_case constant_cases[] = {
    {
        /* A GROUPED worker that is ready again is simply queued again. */
        .name = "ready_after_group",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 0),
                SF_GROUP(0, 0, 1),
                SF_ID(1),
                SF_READY(1, 2, 10),
                SF_READY(0, 2, 11),
                SF_GROUP(11, 1, 0),
                SF_ID(2),
                SF_MAX_VERSION(2),
                SF_NONE(12),
                SF_END,
            },
    },
    {
        .name = "fifo",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 3,
        .workers = 6,
        .steps =
            (const struct sf_step[]){
                /* Ready in the order 5, 2, 4, 0, 1, 3. */
                SF_READY(5, 10, 0),
                SF_NONE(0),
                SF_READY(2, 11, 1),
                SF_NONE(1),
                SF_READY(4, 12, 2),
                SF_GROUP(2, 5, 2, 4),
                SF_ID(1),
                SF_VERSION(0, 10),
                SF_MAX_VERSION(12),
                SF_WEIGHT(1, 1.0 / 3.0, 1e-15),
                SF_NONE(2),
                SF_READY(0, 1, 3),
                SF_READY(1, 1, 3),
                SF_READY(3, 1, 3),
                SF_READY(5, 13, 3),
                SF_GROUP(3, 0, 1, 3),
                SF_ID(2),
                SF_QUEUED(1),
                SF_NONE(4),
                SF_DEADLINE(-1),
                SF_END,
            },
    },
    {
        /* P = min(group_size, live): fewer live workers than P never deadlock.
         */
        .name = "fewer_than_p",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 4,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                SF_READY(1, 1, 0),
                SF_READY(0, 1, 0),
                SF_NONE(0),
                SF_READY(2, 1, 0),
                SF_GROUP(0, 1, 0, 2),
                SF_READY(0, 2, 1),
                SF_NONE(1),
                SF_REMOVE(2, 1),
                SF_REMOVE(1, 1),
                SF_GROUP(1, 0),
                SF_END,
            },
    },
    {
        /* The level_gap weights (weight_cases), as personal results. */
        .name = "staleness",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 3,
        .weighting = PR_WEIGHT_STALENESS,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 10, 0),
                SF_READY(1, 8, 0),
                SF_READY(2, 10, 0),
                SF_GROUP(0, 0, 1, 2),
                SF_PERSONAL(1),
                SF_MAX_VERSION(10),
                SF_WEIGHT(0, 0.095 / 0.271, 1e-12),
                SF_WEIGHT(1, 0.081 / 0.271, 1e-12),
                SF_WEIGHT(2, 0.095 / 0.271, 1e-12),
                SF_END,
            },
    },
};

static const struct sf_case dynamic_cases[] = {
    {
        .name = "closes_on_group_max",
        .policy = PR_POLICY_DYNAMIC,
        .group_max = 3,
        .workers = 5,
        .steps =
            (const struct sf_step[]){
                SF_DEADLINE(-1),
                SF_READY(4, 1, 1000),
                SF_NONE(1000),
                SF_DEADLINE(6000),
                SF_READY(1, 1, 1100),
                SF_NONE(1200),
                SF_DEADLINE(6000),
                SF_READY(3, 1, 1300),
                SF_READY(0, 1, 1300),
                SF_GROUP(1300, 4, 1, 3),
                /* 3 >= group_min 2: the window shrinks to 4.5 ms. */
                SF_WINDOW(4.5),
                /* The next group opened when worker 0 became ready. */
                SF_DEADLINE(1300 + 4500),
                SF_NONE(5799),
                SF_GROUP(5800, 0),
                SF_DEADLINE(-1),
                SF_END,
            },
    },
    {
        .name = "closes_on_window",
        .policy = PR_POLICY_DYNAMIC,
        .window_ms = 1.0,
        .workers = 4,
        .steps =
            (const struct sf_step[]){
                SF_READY(2, 1, 1000),
                SF_READY(0, 3, 1500),
                SF_NONE(1999),
                SF_DEADLINE(2000),
                SF_GROUP(2000, 2, 0),
                SF_WEIGHT(0, 0.5, 1e-15),
                SF_MAX_VERSION(3),
                SF_WINDOW(0.9),
                /* group_max 0: all four live ready closes the group at once. */
                SF_READY(0, 4, 3000),
                SF_READY(1, 4, 3000),
                SF_READY(2, 4, 3000),
                SF_READY(3, 4, 3000),
                SF_GROUP(3000, 0, 1, 2, 3),
                SF_END,
            },
    },
    {
        .name = "group_of_one",
        .policy = PR_POLICY_DYNAMIC,
        .window_ms = 1.0,
        .weighting = PR_WEIGHT_STALENESS,
        .workers = 4,
        .steps =
            (const struct sf_step[]){
                SF_READY(3, 17, 0),
                SF_NONE(999),
                SF_GROUP(1000, 3),
                SF_WEIGHT(0, 1.0, 0),
                SF_PERSONAL(1),
                SF_MAX_VERSION(17),
                /* 1 < group_min 2: the window doubles. */
                SF_WINDOW(2.0),
                SF_END,
            },
    },
};

START_TEST(test_sched_core_allreduce_case)
{
    sf_run(&allreduce_cases[_i]);
}
END_TEST

START_TEST(test_sched_core_min_workers_case)
{
    sf_run(&min_workers_cases[_i]);
}
END_TEST

START_TEST(test_sched_core_constant_case)
{
    sf_run(&constant_cases[_i]);
}
END_TEST

START_TEST(test_sched_core_dynamic_case)
{
    sf_run(&dynamic_cases[_i]);
}
END_TEST

/* ---- coded: tags, reloads, many rounds -------------------------------- */

/*
 * Tags (buckets of one step reduced in turn): a group forms only when all
 * live workers are READY with one tag. A worker that has gone on to the
 * next bucket waits for the others, whose READY with the old tag is then
 * withdrawn at its deadline (cancel) and sent again with the new one.
 */
START_TEST(test_sched_core_allreduce_one_tag)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    for (uint32_t r = 0; r < 3; r++) {
        ck_assert_int_eq(pr_sched_core_ready_tagged(c, r, 1, 100 + r, 1, 0), 0);
    }
    sf_expect_group(c, 1, (const uint32_t[]){0, 1, 2}, 3, NULL);
    /* Worker 2 timed out on tag 2 and is on tag 3; 0 and 1 are on tag 2. */
    ck_assert_int_eq(pr_sched_core_ready_tagged(c, 0, 2, 200, 2, 10), 0);
    ck_assert_int_eq(pr_sched_core_ready_tagged(c, 2, 2, 202, 3, 11), 0);
    ck_assert_int_eq(pr_sched_core_ready_tagged(c, 1, 2, 201, 2, 12), 0);
    sf_expect_none(c, 13);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    /* 0 and 1 time out on tag 2 in turn and go on to tag 3. */
    ck_assert_int_eq(pr_sched_core_cancel(c, 0, 200, 20), 0);
    ck_assert_int_eq(pr_sched_core_ready_tagged(c, 0, 2, 300, 3, 21), 0);
    sf_expect_none(c, 22);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 201, 23), 0);
    ck_assert_int_eq(pr_sched_core_ready_tagged(c, 1, 2, 301, 3, 24), 0);
    ck_assert_int_eq(pr_sched_core_next_group(c, 25, &g), 1);
    ck_assert_uint_eq(g.n, 3);
    ck_assert_uint_eq(g.members[0].seq, 202); /* FIFO: 2, 0, 1 */
    ck_assert_uint_eq(g.members[1].seq, 300);
    ck_assert_uint_eq(g.members[2].seq, 301);
    pr_sched_group_fini(&g);
    /* Untagged READYs (tag 0) group as any READYs do. */
    for (uint32_t r = 0; r < 3; r++) {
        sf_ready(c, r, 3, 30);
    }
    sf_expect_group(c, 31, (const uint32_t[]){0, 1, 2}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* A reload that lowers min_workers to what joined starts the job. */
START_TEST(test_sched_core_min_workers_reload)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    p.min_workers = 8;
    struct pr_sched_core *c = sf_make(&p, 2);

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 1);
    sf_expect_none(c, 2);
    p.min_workers = 2;
    ck_assert_int_eq(pr_sched_core_set_params(c, &p), 0);
    sf_expect_group(c, 3, (const uint32_t[]){0, 1}, 2, NULL);
    /* Raising it again holds nothing back once started. */
    p.min_workers = 8;
    ck_assert_int_eq(pr_sched_core_set_params(c, &p), 0);
    sf_ready(c, 0, 2, 4);
    sf_ready(c, 1, 2, 5);
    sf_expect_group(c, 5, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_dynamic_window_bounds)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    p.window_min_ms = 0.5;
    p.window_max_ms = 4.0;
    p.group_min = 3;
    p.group_max = 3;
    struct pr_sched_core *c = sf_make(&p, 3);
    const double grow[] = {2.0, 4.0, 4.0};
    uint64_t t = 0;

    for (size_t i = 0; i < SF_NELEM(grow); i++) {
        sf_ready(c, 0, 1, t);
        t += 100000;
        sf_expect_group(c, t, (const uint32_t[]){0}, 1, NULL);
        ck_assert_double_eq_tol(pr_sched_core_window_ms(c), grow[i], 1e-12);
    }
    /* Full groups: 4 * 0.9^k, never below 0.5 (0.9^20 * 4 = 0.486). */
    double want = 4.0;
    for (int i = 0; i < 30; i++) {
        for (uint32_t r = 0; r < 3; r++) {
            sf_ready(c, r, 1, t);
        }
        sf_expect_group(c, t, (const uint32_t[]){0, 1, 2}, 3, NULL);
        want = want * 0.9 < 0.5 ? 0.5 : want * 0.9;
        ck_assert_double_eq_tol(pr_sched_core_window_ms(c), want, 1e-12);
    }
    ck_assert(pr_sched_core_window_ms(c) == 0.5);
    pr_sched_core_destroy(c);
}
END_TEST

static Suite *sched_core_suite(void)
{
    Suite *s = suite_create("sched_core");
    TCase *tc;

    tc = tcase_create("weights");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_sched_core_weights_case, 0,
                        (int)SF_NELEM(weight_cases));
    tcase_add_test(tc, test_sched_core_weights_sum_to_one);
    tcase_add_test(tc, test_sched_core_weights_invalid_args);
    suite_add_tcase(s, tc);

    tc = tcase_create("workers");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_sched_core_add_remove_errors);
    tcase_add_test(tc, test_sched_core_ready_errors);
    tcase_add_test(tc, test_sched_core_cancel);
    tcase_add_test(tc, test_sched_core_params_invalid);
    suite_add_tcase(s, tc);

    tc = tcase_create("allreduce");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_sched_core_allreduce_case, 0,
                        (int)SF_NELEM(allreduce_cases));
    tcase_add_test(tc, test_sched_core_allreduce_one_tag);
    tcase_add_loop_test(tc, test_sched_core_min_workers_case, 0,
                        (int)SF_NELEM(min_workers_cases));
    tcase_add_test(tc, test_sched_core_min_workers_reload);
    suite_add_tcase(s, tc);

    tc = tcase_create("constant");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_sched_core_constant_case, 0,
                        (int)SF_NELEM(constant_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("dynamic");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_sched_core_dynamic_case, 0,
                        (int)SF_NELEM(dynamic_cases));
    tcase_add_test(tc, test_sched_core_dynamic_window_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sched_core_suite());
}
