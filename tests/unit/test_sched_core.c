/*
 * Unit tests of the scheduler core (daemon/sched_core.h): the staleness
 * weights, worker bookkeeping, the three policies driven by a fake clock,
 * the group generator and a 1024-worker run.
 */
#include "daemon/sched_core.h"
#include "daemon/conf.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static struct pr_sched_params params(int policy)
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
static struct pr_sched_core *make(const struct pr_sched_params *p, uint32_t n)
{
    struct pr_sched_core *c = pr_sched_core_create(p);

    ck_assert_ptr_nonnull(c);
    for (uint32_t r = 0; r < n; r++) {
        ck_assert_int_eq(pr_sched_core_add_worker(c, r, r / 2, 0), 0);
    }
    ck_assert_uint_eq(pr_sched_core_live(c), n);
    return c;
}

static void ready(struct pr_sched_core *c, uint32_t rank, uint64_t version,
                  uint64_t now_us)
{
    ck_assert_int_eq(pr_sched_core_ready(c, rank, version, 100 + rank, now_us),
                     0);
}

static void expect_none(struct pr_sched_core *c, uint64_t now_us)
{
    struct pr_sched_group g;

    ck_assert_int_eq(pr_sched_core_next_group(c, now_us, &g), 0);
}

/* The next group must be exactly `ranks`, in this order. */
static void expect_group(struct pr_sched_core *c, uint64_t now_us,
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
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c = make(&p, 2);

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
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c = make(&p, 4);

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
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = make(&p, 2);
    struct pr_sched_group g;

    ready(c, 0, 1, 0);
    ready(c, 1, 1, 0);
    expect_group(c, 0, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_uint_eq(g.id, 1);
    pr_sched_group_fini(&g);
    ready(c, 1, 2, 10);
    ready(c, 0, 2, 11);
    expect_group(c, 11, (const uint32_t[]){1, 0}, 2, &g);
    ck_assert_uint_eq(g.id, 2);
    ck_assert_uint_eq(g.max_version, 2);
    pr_sched_group_fini(&g);
    expect_none(c, 12);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_cancel)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = make(&p, 3);

    ready(c, 0, 1, 0);
    ready(c, 1, 1, 1);
    /* Wrong seq: not withdrawn. */
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 999, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 2), 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 2), -ENOENT);
    ck_assert_int_eq(pr_sched_core_cancel(c, 77, 1, 2), -ENOENT);
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    expect_none(c, 3);
    ready(c, 2, 1, 4);
    expect_group(c, 4, (const uint32_t[]){0, 2}, 2, NULL);
    /* Grouped now: nothing to withdraw. */
    ck_assert_int_eq(pr_sched_core_cancel(c, 0, 100, 5), -ENOENT);
    /* A cancelled worker may be ready again. */
    ready(c, 1, 2, 6);
    ready(c, 0, 2, 7);
    expect_group(c, 7, (const uint32_t[]){1, 0}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_params_invalid)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);

    ck_assert_ptr_null(pr_sched_core_create(NULL));
    p.policy = 7;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_CONSTANT);
    p.group_size = 0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_DYNAMIC);
    p.window_min_ms = 6.0; /* > window_ms */
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_DYNAMIC);
    p.group_min = 5;
    p.group_max = 3;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_DYNAMIC);
    p.window_max_ms = NAN;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_CONSTANT);
    p.weighting = PR_WEIGHT_STALENESS;
    p.staleness_alpha = 1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p.weighting = 9;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_CONSTANT);
    p.gen_hold_ms = -1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p = params(PR_POLICY_CONSTANT);
    p.gen_hold_max_ms = NAN;
    ck_assert_ptr_null(pr_sched_core_create(&p));
    p.gen_hold_max_ms = -1.0;
    ck_assert_ptr_null(pr_sched_core_create(&p));

    /* A rejected reload leaves the old params in force: P stays 2. */
    p = params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = make(&p, 3);
    struct pr_sched_params bad = p;
    bad.group_size = 0;
    ck_assert_int_eq(pr_sched_core_set_params(c, &bad), -EINVAL);
    ck_assert_int_eq(pr_sched_core_set_params(c, NULL), -EINVAL);
    ready(c, 0, 1, 0);
    ready(c, 1, 1, 0);
    expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    /* A good one takes effect: P = 3. */
    struct pr_sched_params good = p;
    good.group_size = 3;
    ck_assert_int_eq(pr_sched_core_set_params(c, &good), 0);
    ready(c, 0, 1, 0);
    ready(c, 1, 1, 0);
    expect_none(c, 0);
    ready(c, 2, 1, 0);
    expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- allreduce -------------------------------------------------------- */

START_TEST(test_sched_core_allreduce_waits_for_all)
{
    struct pr_sched_params p = params(PR_POLICY_ALLREDUCE);
    p.weighting = PR_WEIGHT_STALENESS; /* ignored: allreduce is uniform */
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_group g;

    ready(c, 2, 5, 0);
    ready(c, 0, 3, 1);
    ready(c, 3, 5, 2);
    expect_none(c, 3);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    ready(c, 1, 4, 4);
    expect_group(c, 4, (const uint32_t[]){2, 0, 3, 1}, 4, &g);
    ck_assert_uint_eq(g.id, 1);
    ck_assert_uint_eq(g.max_version, 5);
    ck_assert_int_eq(g.personal, 0);
    for (int i = 0; i < 4; i++) {
        ck_assert(g.members[i].weight == 0.25);
    }
    pr_sched_group_fini(&g);
    ck_assert_ptr_null(g.members);
    expect_none(c, 5);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_allreduce_after_remove)
{
    struct pr_sched_params p = params(PR_POLICY_ALLREDUCE);
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_group g;

    /* Removing the one not ready completes the group. */
    ready(c, 0, 1, 0);
    ready(c, 1, 1, 0);
    ready(c, 2, 1, 0);
    expect_none(c, 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 3, 1), 0);
    expect_group(c, 1, (const uint32_t[]){0, 1, 2}, 3, &g);
    ck_assert_double_eq_tol(g.members[0].weight, 1.0 / 3.0, 1e-15);
    pr_sched_group_fini(&g);

    /* Removing a queued one: the rest are all of the live ones. */
    ready(c, 2, 2, 2);
    ready(c, 0, 2, 2);
    expect_none(c, 2);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 3), 0);
    expect_none(c, 3);
    ready(c, 1, 2, 4);
    expect_group(c, 4, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- constant --------------------------------------------------------- */

START_TEST(test_sched_core_constant_fifo)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    struct pr_sched_core *c = make(&p, 6);
    const uint32_t order[] = {5, 2, 4, 0, 1, 3};
    struct pr_sched_group g;

    for (uint32_t i = 0; i < 2; i++) {
        ready(c, order[i], 10 + i, i);
        expect_none(c, i);
    }
    ready(c, order[2], 12, 2);
    expect_group(c, 2, (const uint32_t[]){5, 2, 4}, 3, &g);
    ck_assert_uint_eq(g.id, 1);
    ck_assert_uint_eq(g.members[0].version, 10);
    ck_assert_uint_eq(g.max_version, 12);
    ck_assert_double_eq_tol(g.members[1].weight, 1.0 / 3.0, 1e-15);
    pr_sched_group_fini(&g);
    expect_none(c, 2);
    ready(c, 0, 1, 3);
    ready(c, 1, 1, 3);
    ready(c, 3, 1, 3);
    ready(c, 5, 13, 3);
    expect_group(c, 3, (const uint32_t[]){0, 1, 3}, 3, &g);
    ck_assert_uint_eq(g.id, 2);
    pr_sched_group_fini(&g);
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    expect_none(c, 4);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    pr_sched_core_destroy(c);
}
END_TEST

/* P = min(group_size, live): fewer live workers than P never deadlock. */
START_TEST(test_sched_core_constant_fewer_than_p)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 4;
    struct pr_sched_core *c = make(&p, 3);

    ready(c, 1, 1, 0);
    ready(c, 0, 1, 0);
    expect_none(c, 0);
    ready(c, 2, 1, 0);
    expect_group(c, 0, (const uint32_t[]){1, 0, 2}, 3, NULL);
    ready(c, 0, 2, 1);
    expect_none(c, 1);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 1), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 1), 0);
    expect_group(c, 1, (const uint32_t[]){0}, 1, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_constant_staleness)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    p.weighting = PR_WEIGHT_STALENESS;
    struct pr_sched_core *c = make(&p, 3);
    struct pr_sched_group g;

    ready(c, 0, 10, 0);
    ready(c, 1, 8, 0);
    ready(c, 2, 10, 0);
    expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, &g);
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
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.group_max = 3;
    struct pr_sched_core *c = make(&p, 5);

    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    ready(c, 4, 1, 1000);
    expect_none(c, 1000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    ready(c, 1, 1, 1100);
    expect_none(c, 1200);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    ready(c, 3, 1, 1300);
    ready(c, 0, 1, 1300);
    expect_group(c, 1300, (const uint32_t[]){4, 1, 3}, 3, NULL);
    /* 3 >= group_min 2: the window shrinks to 4.5 ms. */
    ck_assert_double_eq_tol(pr_sched_core_window_ms(c), 4.5, 1e-12);
    /* The next group opened when worker 0 became ready. */
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 1300 + 4500);
    expect_none(c, 5799);
    expect_group(c, 5800, (const uint32_t[]){0}, 1, NULL);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_dynamic_closes_on_window)
{
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_group g;

    ready(c, 2, 1, 1000);
    ready(c, 0, 3, 1500);
    expect_none(c, 1999);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 2000);
    expect_group(c, 2000, (const uint32_t[]){2, 0}, 2, &g);
    ck_assert_double_eq_tol(g.members[0].weight, 0.5, 1e-15);
    ck_assert_uint_eq(g.max_version, 3);
    pr_sched_group_fini(&g);
    ck_assert_double_eq_tol(pr_sched_core_window_ms(c), 0.9, 1e-12);
    /* group_max 0: all four live ready closes the group at once. */
    for (uint32_t r = 0; r < 4; r++) {
        ready(c, r, 4, 3000);
    }
    expect_group(c, 3000, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_dynamic_group_of_one)
{
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    p.weighting = PR_WEIGHT_STALENESS;
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_group g;

    ready(c, 3, 17, 0);
    expect_none(c, 999);
    expect_group(c, 1000, (const uint32_t[]){3}, 1, &g);
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
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.window_ms = 1.0;
    p.window_min_ms = 0.5;
    p.window_max_ms = 4.0;
    p.group_min = 3;
    p.group_max = 3;
    struct pr_sched_core *c = make(&p, 3);
    const double grow[] = {2.0, 4.0, 4.0};
    uint64_t t = 0;

    for (size_t i = 0; i < NELEM(grow); i++) {
        ready(c, 0, 1, t);
        t += 100000;
        expect_group(c, t, (const uint32_t[]){0}, 1, NULL);
        ck_assert_double_eq_tol(pr_sched_core_window_ms(c), grow[i], 1e-12);
    }
    /* Full groups: 4 * 0.9^k, never below 0.5 (0.9^20 * 4 = 0.486). */
    double want = 4.0;
    for (int i = 0; i < 30; i++) {
        for (uint32_t r = 0; r < 3; r++) {
            ready(c, r, 1, t);
        }
        expect_group(c, t, (const uint32_t[]){0, 1, 2}, 3, NULL);
        want = want * 0.9 < 0.5 ? 0.5 : want * 0.9;
        ck_assert_double_eq_tol(pr_sched_core_window_ms(c), want, 1e-12);
    }
    ck_assert(pr_sched_core_window_ms(c) == 0.5);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- group generator -------------------------------------------------- */

static int mixed(const struct pr_sched_group *g)
{
    int lo = 0, hi = 0;

    for (uint32_t i = 0; i < g->n; i++) {
        if (g->members[i].rank < 4) {
            lo = 1;
        } else {
            hi = 1;
        }
    }
    return lo && hi;
}

struct drive {
    struct pr_sched_core *c;
    int queued[8];
    uint64_t groups;
    uint64_t first_mixed; /* group id, 0 if none */
    uint32_t first_mixed_ranks[8];
    uint32_t min_components;
};

static void drain(struct drive *d, uint64_t now)
{
    struct pr_sched_group g;
    int rc;

    while ((rc = pr_sched_core_next_group(d->c, now, &g)) == 1) {
        d->groups++;
        if (mixed(&g) && d->first_mixed == 0) {
            d->first_mixed = g.id;
            for (uint32_t i = 0; i < g.n; i++) {
                d->first_mixed_ranks[i] = g.members[i].rank;
            }
        }
        for (uint32_t i = 0; i < g.n; i++) {
            d->queued[g.members[i].rank] = 0;
        }
        pr_sched_group_fini(&g);
    }
    ck_assert_int_eq(rc, 0);
    uint32_t comps = pr_sched_core_components(d->c);
    if (comps < d->min_components) {
        d->min_components = comps;
    }
}

/*
 * One round: workers 0-3 are ready first (all at time t), then 4-7 at
 * t + 10. Without steering the groups are always {0..3} and {4..7}.
 */
static void round_8(struct drive *d, uint64_t t)
{
    for (uint32_t r = 0; r < 8; r++) {
        uint64_t now = r < 4 ? t : t + 10;

        if (d->queued[r]) {
            continue;
        }
        ck_assert_int_eq(pr_sched_core_ready(d->c, r, 1, 100 + r, now), 0);
        d->queued[r] = 1;
        drain(d, now);
    }
}

START_TEST(test_sched_core_generator_off_isolates)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.isolation_bound = 0;
    struct drive d = {.c = make(&p, 8), .min_components = 8};
    struct pr_sched_stats st;

    for (int i = 0; i < 100; i++) {
        round_8(&d, (uint64_t)i * 1000);
    }
    ck_assert_uint_eq(d.groups, 200);
    ck_assert_uint_eq(d.first_mixed, 0);
    ck_assert_uint_eq(d.min_components, 2);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.groups, 200);
    ck_assert_uint_eq(st.members, 800);
    /* Windows of 10 x 8 member-updates, none connected. */
    ck_assert_uint_eq(st.windows_checked, 10);
    ck_assert_uint_eq(st.windows_connected, 0);
    ck_assert_uint_eq(st.generator_forced, 0);
    ck_assert_uint_eq(st.generator_held, 0);
    pr_sched_core_destroy(d.c);
}
END_TEST

START_TEST(test_sched_core_generator_connects)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.isolation_bound = 2;
    struct drive d = {.c = make(&p, 8), .min_components = 8};
    struct pr_sched_stats st;

    /* Rounds 1-2: four isolated groups reach B x live = 16 updates. */
    round_8(&d, 0);
    round_8(&d, 1000);
    ck_assert_uint_eq(d.groups, 4);
    ck_assert_uint_eq(d.first_mixed, 0);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 2);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);

    /*
     * Round 3: 0-3 alone would connect nothing: held until 4-7 are
     * expected, 1.5 x their 1 ms interval after their group at 1010 us,
     * which the 1 ms floor raises to 3000 us.
     */
    for (uint32_t r = 0; r < 4; r++) {
        ck_assert_int_eq(pr_sched_core_ready(d.c, r, 1, 100 + r, 2000), 0);
        d.queued[r] = 1;
        drain(&d, 2000);
    }
    ck_assert_uint_eq(d.groups, 4);
    ck_assert_int_eq(pr_sched_core_deadline_us(d.c), 2000 + 1000);
    /* Worker 4 joins the oldest of the other half. */
    ck_assert_int_eq(pr_sched_core_ready(d.c, 4, 1, 104, 2010), 0);
    d.queued[4] = 1;
    drain(&d, 2010);
    ck_assert_uint_eq(d.first_mixed, 5);
    ck_assert_uint_eq(d.first_mixed_ranks[0], 0);
    ck_assert_uint_eq(d.first_mixed_ranks[1], 4);
    ck_assert_uint_eq(d.first_mixed_ranks[2], 1);
    ck_assert_uint_eq(d.first_mixed_ranks[3], 2);
    ck_assert_uint_eq(d.min_components, 2);

    /* That union connected all 8: the window ended and reset. */
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.windows_checked, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_uint_eq(st.windows_unaided, 0);
    ck_assert_uint_eq(st.generator_forced, 1);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_eq(st.window_extra_updates, 4);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 0);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 8);

    /* Every later window connects too. */
    for (int i = 3; i < 100; i++) {
        round_8(&d, (uint64_t)i * 1000000);
    }
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_ge(st.windows_checked, 20);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    pr_sched_core_destroy(d.c);
}
END_TEST

START_TEST(test_sched_core_generator_hold_expires)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.isolation_bound = 1;
    p.gen_hold_ms = 5.0;
    struct pr_sched_core *c = make(&p, 8);
    struct pr_sched_stats st;

    for (uint32_t r = 0; r < 8; r++) {
        ready(c, r, 1, 0);
    }
    expect_group(c, 0, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    expect_group(c, 0, (const uint32_t[]){4, 5, 6, 7}, 4, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    for (uint32_t r = 0; r < 4; r++) {
        ready(c, r, 2, 1000);
    }
    expect_none(c, 1000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    expect_none(c, 5999);
    expect_group(c, 6000, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(st.generator_forced, 1);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    /*
     * The hold waited for 4-7 and they missed it: they are late, and no
     * group waits for them until one of them is ready again.
     */
    for (uint32_t r = 0; r < 4; r++) {
        ready(c, r, 3, 7000);
    }
    expect_group(c, 7000, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_forced, 2);
    /* 4 is ready again; steering picks across components: 0, 4, 1, 2. */
    for (uint32_t r = 0; r < 5; r++) {
        ready(c, r, 4, 8000);
    }
    expect_group(c, 8000, (const uint32_t[]){0, 4, 1, 2}, 4, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 0);
    /* The window ended connected. */
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.windows_connected, 1);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * Dynamic: adaptive hold. It runs 1 ms first; when nobody came by then it
 * extends to the bound: 2 and 3 have no interval yet, so they are waited
 * for up to gen_hold_max_ms (5 s) after their group. Steering skips 1.
 */
START_TEST(test_sched_core_generator_dynamic)
{
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.group_max = 2;
    p.window_max_ms = 2.0;
    p.window_ms = 1.0;
    p.isolation_bound = 1;
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_stats st;

    for (uint32_t r = 0; r < 4; r++) {
        ready(c, r, 1, 0);
    }
    expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    expect_group(c, 0, (const uint32_t[]){2, 3}, 2, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    ready(c, 0, 2, 100);
    ready(c, 1, 2, 100);
    expect_none(c, 100);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 1100);
    expect_none(c, 1100);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 5000000);
    ready(c, 3, 2, 2000);
    expect_group(c, 2000, (const uint32_t[]){0, 3}, 2, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 0);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_uint_eq(st.generator_forced, 1);
    /* Worker 1 is still queued: a new group, opened at its ready time. */
    ck_assert_uint_eq(pr_sched_core_queued(c), 1);
    pr_sched_core_destroy(c);
}
END_TEST

/* A removed worker no longer counts toward connectivity. */
START_TEST(test_sched_core_generator_remove)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    p.isolation_bound = 1;
    struct pr_sched_core *c = make(&p, 3);
    struct pr_sched_stats st;

    /* {0,1} twice: 4 >= 1 x 3 updates, and worker 2 is apart. */
    for (int i = 0; i < 2; i++) {
        ready(c, 0, 1, 0);
        ready(c, 1, 1, 0);
        expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    }
    ck_assert_uint_eq(pr_sched_core_components(c), 2);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 1), 0);
    ck_assert_int_eq(pr_sched_core_steering(c), 0);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.windows_checked, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * Components against a reference: labels relabelled on every group, and
 * a removed worker's label dropped (its component survives in the others).
 */
START_TEST(test_sched_core_generator_components)
{
    enum { N = 16 };
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    p.stats_bound = 1000000; /* no window ends during the test */
    struct pr_sched_core *c = make(&p, N);
    uint32_t label[N];
    int live[N], queued[N];
    uint64_t x = 0x9e3779b97f4a7c15ull;

    for (uint32_t r = 0; r < N; r++) {
        label[r] = r;
        live[r] = 1;
        queued[r] = 0;
    }
    for (int step = 0; step < 4000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33) % N;
        int op = (int)((x >> 20) % 16);

        if (op == 0 && live[r]) {
            ck_assert_int_eq(pr_sched_core_remove_worker(c, r, 0), 0);
            live[r] = 0;
            queued[r] = 0;
        } else if (op == 1 && !live[r]) {
            ck_assert_int_eq(pr_sched_core_add_worker(c, r, 0, 0), 0);
            live[r] = 1;
            label[r] = 1000 + (uint32_t)step; /* a fresh component */
        } else if (live[r] && !queued[r]) {
            ck_assert_int_eq(pr_sched_core_ready(c, r, 0, 0, 0), 0);
            queued[r] = 1;
        }
        struct pr_sched_group g;
        int rc;
        while ((rc = pr_sched_core_next_group(c, 0, &g)) == 1) {
            uint32_t to = label[g.members[0].rank];
            for (uint32_t i = 1; i < g.n; i++) {
                uint32_t from = label[g.members[i].rank];
                for (uint32_t k = 0; k < N; k++) {
                    if (label[k] == from) {
                        label[k] = to;
                    }
                }
            }
            for (uint32_t i = 0; i < g.n; i++) {
                queued[g.members[i].rank] = 0;
            }
            pr_sched_group_fini(&g);
        }
        ck_assert_int_eq(rc, 0);
        uint32_t distinct = 0;
        for (uint32_t k = 0; k < N; k++) {
            int first = live[k];
            for (uint32_t j = 0; j < k && first; j++) {
                if (live[j] && label[j] == label[k]) {
                    first = 0;
                }
            }
            distinct += (uint32_t)first;
        }
        ck_assert_uint_eq(pr_sched_core_components(c), distinct);
    }
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_generator_allreduce_off)
{
    struct pr_sched_params p = params(PR_POLICY_ALLREDUCE);
    p.isolation_bound = 1;
    struct pr_sched_core *c = make(&p, 4);
    struct pr_sched_stats st;

    for (int i = 0; i < 8; i++) {
        for (uint32_t r = 0; r < 4; r++) {
            ready(c, r, 1, 0);
        }
        expect_group(c, 0, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
        ck_assert_int_eq(pr_sched_core_steering(c), 0);
    }
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.windows_checked, 8);
    ck_assert_uint_eq(st.windows_unaided, 8);
    ck_assert_uint_eq(st.generator_forced, 0);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- adaptive hold: workers with a pace, on a fake clock ---------------- */

#define NEVER UINT64_MAX

/*
 * A small event loop: worker r is ready period_us[r] after its group
 * formed (0: never again), the core's deadline is honoured, and the loop
 * notes the first hold (when it started, and its last deadline before the
 * first group formed while steering), that group, and every group formed
 * after its last member's READY, i.e. delayed by a hold.
 */
struct paced {
    struct pr_sched_core *c;
    uint32_t n;
    uint64_t period_us[8];
    uint64_t next_us[8];  /* next READY; NEVER while queued or hung */
    uint64_t ready_at[8]; /* when its queued READY arrived */
    uint64_t now;
    uint64_t groups;
    uint64_t delayed; /* groups formed after their last member's READY */
    uint64_t max_delay_us;
    uint64_t hold_from;  /* the first hold: when it started ... */
    int64_t hold_until;  /* ... and its final deadline; -1: none yet */
    uint64_t steered_at; /* the first group formed while steering */
    uint32_t steered_n;
    uint32_t steered[8];
};

static void paced_init(struct paced *d, const struct pr_sched_params *p,
                       uint32_t n)
{
    memset(d, 0, sizeof(*d));
    d->c = make(p, n);
    d->n = n;
    d->hold_until = -1;
    d->steered_at = NEVER;
    for (uint32_t r = 0; r < 8; r++) {
        d->next_us[r] = NEVER;
    }
}

static void paced_drain(struct paced *d)
{
    struct pr_sched_group g;
    int steering = pr_sched_core_steering(d->c);
    int rc;

    while ((rc = pr_sched_core_next_group(d->c, d->now, &g)) == 1) {
        uint64_t last = 0;

        for (uint32_t i = 0; i < g.n; i++) {
            uint32_t r = g.members[i].rank;

            last = d->ready_at[r] > last ? d->ready_at[r] : last;
            d->next_us[r] = d->period_us[r] ? d->now + d->period_us[r] : NEVER;
        }
        if (d->now > last) {
            d->delayed++;
            if (d->now - last > d->max_delay_us) {
                d->max_delay_us = d->now - last;
            }
        }
        if (steering && d->steered_at == NEVER) {
            d->steered_at = d->now;
            d->steered_n = g.n;
            for (uint32_t i = 0; i < g.n; i++) {
                d->steered[i] = g.members[i].rank;
            }
        }
        d->groups++;
        pr_sched_group_fini(&g);
        steering = pr_sched_core_steering(d->c);
    }
    ck_assert_int_eq(rc, 0);
    /* Constant groups have no window: a deadline is a hold's. */
    int64_t dl = pr_sched_core_deadline_us(d->c);
    if (dl >= 0 && d->steered_at == NEVER) {
        if (d->hold_until < 0) {
            d->hold_from = d->now;
        }
        d->hold_until = dl;
    }
}

/* Runs every event up to and including time `until`. */
static void paced_run(struct paced *d, uint64_t until)
{
    for (;;) {
        uint64_t t = NEVER;
        int64_t dl = pr_sched_core_deadline_us(d->c);

        for (uint32_t r = 0; r < d->n; r++) {
            t = d->next_us[r] < t ? d->next_us[r] : t;
        }
        if (dl >= 0 && (uint64_t)dl < t) {
            t = (uint64_t)dl;
        }
        if (t > until) {
            return;
        }
        ck_assert_uint_ge(t, d->now);
        d->now = t;
        for (uint32_t r = 0; r < d->n; r++) {
            if (d->next_us[r] == t) {
                ready(d->c, r, 1, t);
                d->next_us[r] = NEVER;
                d->ready_at[r] = t;
                paced_drain(d);
            }
        }
        paced_drain(d);
    }
}

/*
 * Workers 0-3 take 100 ms per step, 4-7 take 300 ms (first ready at
 * 150 ms); constant P = 4, B = 4. Groups are {0-3} at 0, 100, 200, ... and
 * {4-7} at 150, 450, 750, ...: 32 member-updates by 500 ms, unconnected,
 * so steering starts. At 600 ms 0-3 alone are due and held. The slow
 * workers were grouped at 450 ms with a 300 ms interval: expected by
 * 450 + 1.5 x 300 = 900 ms. Worker 4 comes at 750 ms, 150 ms into the
 * hold (a fixed 100 ms would have run out), and joins the group.
 */
static void paced_300_100(struct paced *d, double hold_ms)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);

    p.isolation_bound = 4;
    p.gen_hold_ms = hold_ms;
    paced_init(d, &p, 8);
    for (uint32_t r = 0; r < 8; r++) {
        d->period_us[r] = r < 4 ? 100000 : 300000;
        d->next_us[r] = r < 4 ? 0 : 150000;
    }
}

START_TEST(test_sched_core_generator_hold_adaptive)
{
    struct paced d;
    struct pr_sched_stats st;

    paced_300_100(&d, 0.0);
    paced_run(&d, 500000);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 2);
    paced_run(&d, 749999);
    ck_assert_uint_eq(d.hold_from, 600000);
    ck_assert_int_eq(d.hold_until, 900000);
    ck_assert_uint_eq(d.steered_at, NEVER); /* still held */
    paced_run(&d, 750000);
    ck_assert_uint_eq(d.steered_at, 750000);
    ck_assert_uint_eq(d.steered_n, 4);
    ck_assert_uint_eq(d.steered[0], 0);
    ck_assert_uint_eq(d.steered[1], 4); /* the slow worker, at once */
    ck_assert_uint_eq(d.steered[2], 1);
    ck_assert_uint_eq(d.steered[3], 2);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_eq(st.windows_connected, 1);

    /*
     * Every later window connects too, and no hold runs out: each window
     * that needs steering ends with its first steered group (4 updates).
     */
    paced_run(&d, 60000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_ge(st.windows_checked, 20);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_ge(st.generator_held, 20);
    ck_assert_uint_le(st.generator_forced,
                      st.windows_checked - st.windows_unaided);
    pr_sched_core_destroy(d.c);

    /*
     * The same with a fixed 100 ms hold: it runs out at 700 ms, and the
     * group formed then is 0-3 again.
     */
    paced_300_100(&d, 100.0);
    paced_run(&d, 700000);
    ck_assert_int_eq(d.hold_until, 700000);
    ck_assert_uint_eq(d.steered_at, 700000);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(d.steered[i], i);
    }
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(st.windows_connected, 0);
    pr_sched_core_destroy(d.c);
}
END_TEST

/*
 * Worker 4 is live but never ready: 0-3 (10 ms steps, P = 4, B = 1) are
 * held for it once, for at most gen_hold_max_ms (50 ms), and then never
 * again while it stays away. When it is ready once, that window ends and
 * the next one may hold one group for it again: one per window.
 */
START_TEST(test_sched_core_generator_hold_never_ready)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    struct paced d;
    struct pr_sched_stats st;

    p.isolation_bound = 1;
    p.gen_hold_max_ms = 50.0;
    paced_init(&d, &p, 5);
    for (uint32_t r = 0; r < 4; r++) {
        d.period_us[r] = 10000;
        d.next_us[r] = 0;
    }
    paced_run(&d, 1000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_ge(d.groups, 90);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(d.delayed, 1);
    ck_assert_uint_le(d.max_delay_us, 50000);
    /* It joined at 0 and had no interval: waited for until 0 + 50 ms. */
    ck_assert_uint_eq(d.hold_from, 20000);
    ck_assert_int_eq(d.hold_until, 50000);
    ck_assert_uint_eq(st.windows_checked, 0);

    /* Ready once (it joins the next group), then gone again. */
    d.next_us[4] = d.now + 1;
    paced_run(&d, 3000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.windows_checked, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_eq(st.generator_held, 2);
    ck_assert_uint_eq(st.generator_expired, 2);
    ck_assert_uint_eq(d.delayed, 2);
    ck_assert_uint_le(d.max_delay_us, 50000);
    pr_sched_core_destroy(d.c);
}
END_TEST

/*
 * Re-arming (fixed 5 ms holds, P = 2, B = 1): 2 and 3 let a hold for them
 * expire, so they are late and the next group of 0 and 1 is not held.
 * Once ready again they count again: a group of theirs alone is held for
 * 0 and 1, and 0 joins it.
 */
START_TEST(test_sched_core_generator_hold_rearmed)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c;
    struct pr_sched_stats st;

    p.group_size = 2;
    p.isolation_bound = 1;
    p.gen_hold_ms = 5.0;
    c = make(&p, 4);
    ready(c, 0, 1, 0);
    ready(c, 1, 1, 0);
    expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    ready(c, 2, 1, 0);
    ready(c, 3, 1, 0);
    expect_group(c, 0, (const uint32_t[]){2, 3}, 2, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    ready(c, 0, 2, 1000);
    ready(c, 1, 2, 1000);
    expect_none(c, 1000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    expect_group(c, 6000, (const uint32_t[]){0, 1}, 2, NULL);
    ready(c, 0, 3, 7000);
    ready(c, 1, 3, 7000);
    expect_group(c, 7000, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 1);
    ready(c, 2, 2, 8000);
    ready(c, 3, 2, 8000);
    expect_none(c, 8000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 13000);
    ready(c, 0, 4, 9000);
    expect_group(c, 9000, (const uint32_t[]){2, 0}, 2, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 2);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_int_eq(pr_sched_core_steering(c), 0);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * The pace is learnt only while a worker is live: removal wipes it, and
 * the first READY after it joins again gives no interval. Worker 2 is
 * made ready and cancelled (so it stays out of every group) while 0 and 1
 * form groups; P = 2, B = 1.
 */
START_TEST(test_sched_core_generator_hold_ewma_removed)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c;

    p.group_size = 2;
    p.isolation_bound = 1;
    c = make(&p, 3);
    /* A 100 ms pace before the removal. */
    ready(c, 2, 1, 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 0), 0);
    ready(c, 2, 1, 100000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 100000), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 200000), 0);
    /* Back 10 s later: one READY, no interval yet. */
    ck_assert_int_eq(pr_sched_core_add_worker(c, 2, 1, 10000000), 0);
    ready(c, 2, 1, 10000000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 10000000), 0);
    for (int i = 0; i < 2; i++) {
        ready(c, 0, 1, 10010000);
        ready(c, 1, 1, 10010000);
        expect_group(c, 10010000, (const uint32_t[]){0, 1}, 2, NULL);
    }
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    /*
     * Held for 2 by neither its old 100 ms pace (until 10.15 s) nor an
     * interval across the removal (about 12 s): it has no interval, so
     * until its cancel + the 5 s longest hold.
     */
    ready(c, 0, 1, 10020000);
    ready(c, 1, 1, 10020000);
    expect_none(c, 10020000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 10021000); /* 1 ms */
    expect_none(c, 10021000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 15000000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 0, 100, 10030000), 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 10030000), 0);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    /* A second READY 300 ms later: expected 1.5 x 300 ms after it. */
    ready(c, 2, 1, 10300000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 10300000), 0);
    ready(c, 0, 1, 10310000);
    ready(c, 1, 1, 10310000);
    expect_none(c, 10310000);
    expect_none(c, 10311000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 10300000 + 450000);
    expect_none(c, 10749999);
    expect_group(c, 10750000, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- scale ------------------------------------------------------------ */

/*
 * 1024 workers, random arrivals with the fast half twice as likely,
 * plus churn (remove and re-add). Every call must succeed, the counts must
 * stay consistent, and with the generator every window must connect.
 */
static void run_scale(struct pr_sched_params *p, uint32_t members_each)
{
    enum { N = 1024, EVENTS = 300000 };
    struct pr_sched_core *c = make(p, N);
    static uint8_t queued[N];
    uint64_t x = 12345;
    uint64_t now = 0, groups = 0, members = 0;
    uint32_t nqueued = 0;
    struct pr_sched_stats st;

    memset(queued, 0, sizeof(queued));
    for (int e = 0; e < EVENTS; e++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33) % (N + N / 2);
        r = r >= N ? r - N : r; /* ranks < 512 are drawn twice as often */
        now += 1 + (x >> 60);

        if (e % 5000 == 4999) {
            ck_assert_int_eq(pr_sched_core_remove_worker(c, r, now), 0);
            nqueued -= queued[r];
            queued[r] = 0;
            ck_assert_int_eq(pr_sched_core_add_worker(c, r, 0, now), 0);
        } else if (!queued[r]) {
            ck_assert_int_eq(pr_sched_core_ready(c, r, (uint64_t)e, 7, now), 0);
            queued[r] = 1;
            nqueued++;
        }
        int64_t dl = pr_sched_core_deadline_us(c);
        if (dl >= 0 && (uint64_t)dl > now && e % 64 == 0) {
            now = (uint64_t)dl; /* let windows and holds expire */
        }
        struct pr_sched_group g;
        int rc;
        while ((rc = pr_sched_core_next_group(c, now, &g)) == 1) {
            ck_assert_uint_ge(g.n, 1);
            if (members_each > 0) {
                ck_assert_uint_eq(g.n, members_each);
            }
            double sum = 0.0;
            for (uint32_t i = 0; i < g.n; i++) {
                ck_assert(queued[g.members[i].rank]);
                queued[g.members[i].rank] = 0;
                sum += g.members[i].weight;
            }
            ck_assert_double_eq_tol(sum, 1.0, 1e-12);
            nqueued -= g.n;
            groups++;
            members += g.n;
            pr_sched_group_fini(&g);
        }
        ck_assert_int_eq(rc, 0);
        ck_assert_uint_eq(pr_sched_core_queued(c), nqueued);
    }
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.groups, groups);
    ck_assert_uint_eq(st.members, members);
    ck_assert_uint_gt(groups, 1000);
    ck_assert_uint_gt(st.windows_checked, 5);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    ck_assert_uint_le(pr_sched_core_components(c), N);
    pr_sched_core_destroy(c);
}

START_TEST(test_sched_core_scale_constant)
{
    struct pr_sched_params p = params(PR_POLICY_CONSTANT);
    p.group_size = 8;
    p.isolation_bound = 2;
    run_scale(&p, 8);
}
END_TEST

START_TEST(test_sched_core_scale_dynamic)
{
    struct pr_sched_params p = params(PR_POLICY_DYNAMIC);
    p.group_min = 4;
    p.group_max = 16;
    p.window_ms = 0.05;
    p.window_max_ms = 0.2;
    p.isolation_bound = 2;
    p.weighting = PR_WEIGHT_STALENESS;
    run_scale(&p, 0);
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
    tcase_add_test(tc, test_sched_core_allreduce_after_remove);
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

    tc = tcase_create("generator");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_sched_core_generator_off_isolates);
    tcase_add_test(tc, test_sched_core_generator_connects);
    tcase_add_test(tc, test_sched_core_generator_hold_expires);
    tcase_add_test(tc, test_sched_core_generator_dynamic);
    tcase_add_test(tc, test_sched_core_generator_remove);
    tcase_add_test(tc, test_sched_core_generator_components);
    tcase_add_test(tc, test_sched_core_generator_allreduce_off);
    tcase_add_test(tc, test_sched_core_generator_hold_adaptive);
    tcase_add_test(tc, test_sched_core_generator_hold_never_ready);
    tcase_add_test(tc, test_sched_core_generator_hold_rearmed);
    tcase_add_test(tc, test_sched_core_generator_hold_ewma_removed);
    suite_add_tcase(s, tc);

    tc = tcase_create("scale");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sched_core_scale_constant);
    tcase_add_test(tc, test_sched_core_scale_dynamic);
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
