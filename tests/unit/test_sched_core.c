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

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- weights ---------------------------------------------------------- */

START_TEST(test_sched_core_weights_one_member)
{
    uint64_t v[] = {42};
    double w[1] = {-1.0};

    ck_assert_int_eq(pr_sched_staleness_weights(v, 1, 0.9, w), 0);
    ck_assert(w[0] == 1.0);
}
END_TEST

START_TEST(test_sched_core_weights_equal_versions)
{
    uint64_t v[] = {7, 7, 7, 7};
    double w[4];

    ck_assert_int_eq(pr_sched_staleness_weights(v, 4, 0.9, w), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq_tol(w[i], 0.25, 1e-15);
    }
}
END_TEST

/*
 * versions {10, 10, 8}, alpha 0.9: T = 10, s = {1, 1, 3}, S = 3.
 * Level masses: s=1: 0.1, s=2: 0.09, s=3: 0.081; they sum to
 * 0.271 = 1 - 0.9^3. Nobody is on level 2, so its 0.09 goes to level 1:
 * 0.19, split over two members: 0.095 each. Normalized by 0.271:
 *   w = {0.095/0.271, 0.095/0.271, 0.081/0.271}
 *     = {0.350553505535..., 0.350553505535..., 0.298892988929...}.
 */
START_TEST(test_sched_core_weights_level_gap)
{
    uint64_t v[] = {10, 10, 8};
    double w[3];

    ck_assert_int_eq(pr_sched_staleness_weights(v, 3, 0.9, w), 0);
    ck_assert_double_eq_tol(w[0], 0.095 / 0.271, 1e-12);
    ck_assert_double_eq_tol(w[1], 0.095 / 0.271, 1e-12);
    ck_assert_double_eq_tol(w[2], 0.081 / 0.271, 1e-12);
    ck_assert_double_eq_tol(w[0], 0.350553505535055, 1e-12);
    ck_assert_double_eq_tol(w[2], 0.298892988929889, 1e-12);
}
END_TEST

/*
 * versions {4, 2, 5, 4} (unsorted), alpha 0.5: T = 5, s = {2, 4, 1, 2},
 * S = 4. Masses: s=1 0.5, s=2 0.25, s=3 0.125 (empty: to level 1),
 * s=4 0.0625; sum 0.9375. Level 1: 0.625 -> 2/3; level 2: 0.25 over two
 * members -> 0.125 / 0.9375 = 2/15 each; level 4: 0.0625 / 0.9375 = 1/15.
 */
START_TEST(test_sched_core_weights_shared_level)
{
    uint64_t v[] = {4, 2, 5, 4};
    double w[4];

    ck_assert_int_eq(pr_sched_staleness_weights(v, 4, 0.5, w), 0);
    ck_assert_double_eq_tol(w[0], 2.0 / 15.0, 1e-12);
    ck_assert_double_eq_tol(w[1], 1.0 / 15.0, 1e-12);
    ck_assert_double_eq_tol(w[2], 2.0 / 3.0, 1e-12);
    ck_assert_double_eq_tol(w[3], 2.0 / 15.0, 1e-12);
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

    /* S = 2^64: the stale member's mass underflows to exactly 0. */
    uint64_t far[] = {UINT64_MAX, 0};
    double wf[2];
    ck_assert_int_eq(pr_sched_staleness_weights(far, 2, 0.9, wf), 0);
    ck_assert(wf[0] == 1.0);
    ck_assert(wf[1] == 0.0);

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

/* A GROUPED worker that is ready again is simply queued again. */
START_TEST(test_sched_core_ready_after_group)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);
    struct pr_sched_group g;

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_uint_eq(g.id, 1);
    pr_sched_group_fini(&g);
    sf_ready(c, 1, 2, 10);
    sf_ready(c, 0, 2, 11);
    sf_expect_group(c, 11, (const uint32_t[]){1, 0}, 2, &g);
    ck_assert_uint_eq(g.id, 2);
    ck_assert_uint_eq(g.max_version, 2);
    pr_sched_group_fini(&g);
    sf_expect_none(c, 12);
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

/* ---- allreduce -------------------------------------------------------- */

START_TEST(test_sched_core_allreduce_waits_for_all)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    p.weighting = PR_WEIGHT_STALENESS; /* ignored: allreduce is uniform */
    struct pr_sched_core *c = sf_make(&p, 4);
    struct pr_sched_group g;

    sf_ready(c, 2, 5, 0);
    sf_ready(c, 0, 3, 1);
    sf_ready(c, 3, 5, 2);
    sf_expect_none(c, 3);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    sf_ready(c, 1, 4, 4);
    sf_expect_group(c, 4, (const uint32_t[]){2, 0, 3, 1}, 4, &g);
    ck_assert_uint_eq(g.id, 1);
    ck_assert_uint_eq(g.max_version, 5);
    ck_assert_int_eq(g.personal, 0);
    for (int i = 0; i < 4; i++) {
        ck_assert(g.members[i].weight == 0.25);
    }
    pr_sched_group_fini(&g);
    ck_assert_ptr_null(g.members);
    sf_expect_none(c, 5);
    pr_sched_core_destroy(c);
}
END_TEST

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
    /* Untagged READYs (tag 0) group as before. */
    for (uint32_t r = 0; r < 3; r++) {
        sf_ready(c, r, 3, 30);
    }
    sf_expect_group(c, 31, (const uint32_t[]){0, 1, 2}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * min_workers: nothing forms (and no deadline is armed) until that many
 * workers joined; then the policy runs as usual, and a worker that leaves
 * afterwards is not waited for.
 */
START_TEST(test_sched_core_min_workers_allreduce)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    p.min_workers = 3;
    struct pr_sched_core *c = sf_make(&p, 2);

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 1);
    sf_expect_none(c, 2); /* 2 of 3 joined: all 2 ready, still no group */
    ck_assert_int_eq(pr_sched_core_add_worker(c, 2, 1, 3), 0);
    sf_expect_none(c, 4); /* the third joined, not ready yet */
    sf_ready(c, 2, 1, 5);
    sf_expect_group(c, 5, (const uint32_t[]){0, 1, 2}, 3, NULL);
    /* Started: one leaves, the other two go on without it. */
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 6), 0);
    sf_ready(c, 0, 2, 7);
    sf_ready(c, 2, 2, 8);
    sf_expect_group(c, 8, (const uint32_t[]){0, 2}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_min_workers_constant_and_dynamic)
{
    for (int policy = PR_POLICY_CONSTANT; policy <= PR_POLICY_DYNAMIC;
         policy++) {
        struct pr_sched_params p = sf_params(policy);
        p.group_size = 2;
        p.group_max = 2;
        p.min_workers = 4;
        struct pr_sched_core *c = sf_make(&p, 3);

        sf_ready(c, 0, 1, 0);
        sf_ready(c, 1, 1, 1);
        sf_ready(c, 2, 1, 2);
        /* P ready, but only 3 of 4 joined: past any window, nothing. */
        sf_expect_none(c, 1000000);
        ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
        ck_assert_int_eq(pr_sched_core_add_worker(c, 3, 1, 1000001), 0);
        sf_expect_group(c, 1000002, (const uint32_t[]){0, 1}, 2, NULL);
        pr_sched_core_destroy(c);
    }
}
END_TEST

/*
 * Dynamic, groups of all live workers: the window opens when the last
 * worker joins, not when the first queued one became ready, so the late
 * one still makes the first group.
 */
START_TEST(test_sched_core_min_workers_dynamic_window)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.min_workers = 4; /* window 5 ms, group_max 0 = all live */
    struct pr_sched_core *c = sf_make(&p, 3);

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 1);
    sf_ready(c, 2, 1, 2);
    sf_expect_none(c, 1000000);
    ck_assert_int_eq(pr_sched_core_add_worker(c, 3, 1, 1000000), 0);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 1000000 + 5000);
    sf_expect_none(c, 1000001);
    sf_ready(c, 3, 1, 1000002);
    sf_expect_group(c, 1000002, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    /* Later windows run from the oldest ready worker as usual. */
    sf_ready(c, 0, 2, 1000010);
    sf_expect_none(c, 1000011);
    ck_assert_int_eq(pr_sched_core_deadline_us(c),
                     1000010 + 4500); /* the window shrank by 0.9 */
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * Workers registering again with a restarted scheduler mark the job as
 * started: one that left meanwhile is not waited for. Everybody leaving
 * makes the next job wait for min_workers again.
 */
START_TEST(test_sched_core_min_workers_marked_and_reset)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    p.min_workers = 3;
    struct pr_sched_core *c = sf_make(&p, 2);

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 1);
    sf_expect_none(c, 2);
    pr_sched_core_mark_started(c, 3);
    sf_expect_group(c, 3, (const uint32_t[]){0, 1}, 2, NULL);

    ck_assert_int_eq(pr_sched_core_remove_worker(c, 0, 4), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 5), 0);
    ck_assert_int_eq(pr_sched_core_add_worker(c, 0, 0, 6), 0);
    sf_ready(c, 0, 1, 7);
    sf_expect_none(c, 8); /* a new job: 1 of 3 */
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

START_TEST(test_sched_core_allreduce_after_remove)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    struct pr_sched_core *c = sf_make(&p, 4);
    struct pr_sched_group g;

    /* Removing the one not ready completes the group. */
    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_ready(c, 2, 1, 0);
    sf_expect_none(c, 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 3, 1), 0);
    sf_expect_group(c, 1, (const uint32_t[]){0, 1, 2}, 3, &g);
    ck_assert_double_eq_tol(g.members[0].weight, 1.0 / 3.0, 1e-15);
    pr_sched_group_fini(&g);

    /* Removing a queued one: the rest are all of the live ones. */
    sf_ready(c, 2, 2, 2);
    sf_ready(c, 0, 2, 2);
    sf_expect_none(c, 2);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 3), 0);
    sf_expect_none(c, 3);
    sf_ready(c, 1, 2, 4);
    sf_expect_group(c, 4, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- constant --------------------------------------------------------- */

START_TEST(test_sched_core_constant_fifo)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    struct pr_sched_core *c = sf_make(&p, 6);
    const uint32_t order[] = {5, 2, 4, 0, 1, 3};
    struct pr_sched_group g;

    for (uint32_t i = 0; i < 2; i++) {
        sf_ready(c, order[i], 10 + i, i);
        sf_expect_none(c, i);
    }
    sf_ready(c, order[2], 12, 2);
    sf_expect_group(c, 2, (const uint32_t[]){5, 2, 4}, 3, &g);
    ck_assert_uint_eq(g.id, 1);
    ck_assert_uint_eq(g.members[0].version, 10);
    ck_assert_uint_eq(g.max_version, 12);
    ck_assert_double_eq_tol(g.members[1].weight, 1.0 / 3.0, 1e-15);
    pr_sched_group_fini(&g);
    sf_expect_none(c, 2);
    sf_ready(c, 0, 1, 3);
    sf_ready(c, 1, 1, 3);
    sf_ready(c, 3, 1, 3);
    sf_ready(c, 5, 13, 3);
    sf_expect_group(c, 3, (const uint32_t[]){0, 1, 3}, 3, &g);
    ck_assert_uint_eq(g.id, 2);
    pr_sched_group_fini(&g);
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    sf_expect_none(c, 4);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    pr_sched_core_destroy(c);
}
END_TEST

/* P = min(group_size, live): fewer live workers than P never deadlock. */
START_TEST(test_sched_core_constant_fewer_than_p)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 4;
    struct pr_sched_core *c = sf_make(&p, 3);

    sf_ready(c, 1, 1, 0);
    sf_ready(c, 0, 1, 0);
    sf_expect_none(c, 0);
    sf_ready(c, 2, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){1, 0, 2}, 3, NULL);
    sf_ready(c, 0, 2, 1);
    sf_expect_none(c, 1);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 1), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 1), 0);
    sf_expect_group(c, 1, (const uint32_t[]){0}, 1, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_constant_staleness)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    p.weighting = PR_WEIGHT_STALENESS;
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    sf_ready(c, 0, 10, 0);
    sf_ready(c, 1, 8, 0);
    sf_ready(c, 2, 10, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, &g);
    ck_assert_int_eq(g.personal, 1);
    ck_assert_uint_eq(g.max_version, 10);
    ck_assert_double_eq_tol(g.members[0].weight, 0.095 / 0.271, 1e-12);
    ck_assert_double_eq_tol(g.members[1].weight, 0.081 / 0.271, 1e-12);
    ck_assert_double_eq_tol(g.members[2].weight, 0.095 / 0.271, 1e-12);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- dynamic ---------------------------------------------------------- */

START_TEST(test_sched_core_dynamic_closes_on_group_max)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.group_max = 3;
    struct pr_sched_core *c = sf_make(&p, 5);

    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    sf_ready(c, 4, 1, 1000);
    sf_expect_none(c, 1000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    sf_ready(c, 1, 1, 1100);
    sf_expect_none(c, 1200);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    sf_ready(c, 3, 1, 1300);
    sf_ready(c, 0, 1, 1300);
    sf_expect_group(c, 1300, (const uint32_t[]){4, 1, 3}, 3, NULL);
    /* 3 >= group_min 2: the window shrinks to 4.5 ms. */
    ck_assert_double_eq_tol(pr_sched_core_window_ms(c), 4.5, 1e-12);
    /* The next group opened when worker 0 became ready. */
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 1300 + 4500);
    sf_expect_none(c, 5799);
    sf_expect_group(c, 5800, (const uint32_t[]){0}, 1, NULL);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_dynamic_closes_on_window)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    struct pr_sched_core *c = sf_make(&p, 4);
    struct pr_sched_group g;

    sf_ready(c, 2, 1, 1000);
    sf_ready(c, 0, 3, 1500);
    sf_expect_none(c, 1999);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 2000);
    sf_expect_group(c, 2000, (const uint32_t[]){2, 0}, 2, &g);
    ck_assert_double_eq_tol(g.members[0].weight, 0.5, 1e-15);
    ck_assert_uint_eq(g.max_version, 3);
    pr_sched_group_fini(&g);
    ck_assert_double_eq_tol(pr_sched_core_window_ms(c), 0.9, 1e-12);
    /* group_max 0: all four live ready closes the group at once. */
    for (uint32_t r = 0; r < 4; r++) {
        sf_ready(c, r, 4, 3000);
    }
    sf_expect_group(c, 3000, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_dynamic_group_of_one)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    p.weighting = PR_WEIGHT_STALENESS;
    struct pr_sched_core *c = sf_make(&p, 4);
    struct pr_sched_group g;

    sf_ready(c, 3, 17, 0);
    sf_expect_none(c, 999);
    sf_expect_group(c, 1000, (const uint32_t[]){3}, 1, &g);
    ck_assert(g.members[0].weight == 1.0);
    ck_assert_int_eq(g.personal, 1);
    ck_assert_uint_eq(g.max_version, 17);
    pr_sched_group_fini(&g);
    /* 1 < group_min 2: the window doubles. */
    ck_assert_double_eq_tol(pr_sched_core_window_ms(c), 2.0, 1e-12);
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

    for (size_t i = 0; i < NELEM(grow); i++) {
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
    tcase_add_test(tc, test_sched_core_weights_one_member);
    tcase_add_test(tc, test_sched_core_weights_equal_versions);
    tcase_add_test(tc, test_sched_core_weights_level_gap);
    tcase_add_test(tc, test_sched_core_weights_shared_level);
    tcase_add_test(tc, test_sched_core_weights_sum_to_one);
    tcase_add_test(tc, test_sched_core_weights_invalid_args);
    suite_add_tcase(s, tc);

    tc = tcase_create("workers");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_sched_core_add_remove_errors);
    tcase_add_test(tc, test_sched_core_ready_errors);
    tcase_add_test(tc, test_sched_core_ready_after_group);
    tcase_add_test(tc, test_sched_core_cancel);
    tcase_add_test(tc, test_sched_core_params_invalid);
    suite_add_tcase(s, tc);

    tc = tcase_create("allreduce");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_sched_core_allreduce_waits_for_all);
    tcase_add_test(tc, test_sched_core_allreduce_one_tag);
    tcase_add_test(tc, test_sched_core_allreduce_after_remove);
    tcase_add_test(tc, test_sched_core_min_workers_allreduce);
    tcase_add_test(tc, test_sched_core_min_workers_constant_and_dynamic);
    tcase_add_test(tc, test_sched_core_min_workers_dynamic_window);
    tcase_add_test(tc, test_sched_core_min_workers_marked_and_reset);
    tcase_add_test(tc, test_sched_core_min_workers_reload);
    suite_add_tcase(s, tc);

    tc = tcase_create("constant");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_sched_core_constant_fifo);
    tcase_add_test(tc, test_sched_core_constant_fewer_than_p);
    tcase_add_test(tc, test_sched_core_constant_staleness);
    suite_add_tcase(s, tc);

    tc = tcase_create("dynamic");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_sched_core_dynamic_closes_on_group_max);
    tcase_add_test(tc, test_sched_core_dynamic_closes_on_window);
    tcase_add_test(tc, test_sched_core_dynamic_group_of_one);
    tcase_add_test(tc, test_sched_core_dynamic_window_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sched_core_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
