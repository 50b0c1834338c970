/* SPDX-License-Identifier: MIT */
/*
 * The dynamic policy's arrival-aware window (window_wait > 0,
 * sched_window.c pr_sched_window_close_us(), docs/algorithm.md): whom a group
 * waits for, until when, and when it no longer waits.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "daemon/sched/core/sched_core.h"
#include "tests/unit/sched_fixture.h"
#include "tests/check_run.h"

#define STEP_US   10000u /* the fast workers' ready-to-ready interval */
#define WARM      12     /* rounds that teach the core everyone's pace */
#define REDUCE_US 200u   /* a reduce: short beside the step */

static struct pr_sched_params arrival_params(void)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);

    p.window_wait = 0.5;
    return p;
}

/* The group of ranks took `us` to reduce (the scheduler's GroupDones). */
static void reduced(struct pr_sched_core *c, const uint32_t *ranks, uint32_t n,
                    uint64_t us)
{
    for (uint32_t i = 0; i < n; i++)
        pr_sched_core_reduced(c, ranks[i], us);
}

/*
 * Workers 0 .. n-1 all READY together every STEP_US for WARM rounds, so
 * each one's interval is STEP_US and its spread has decayed; every round
 * is a group of all of them at once (group_max 0: all live). Returns the
 * time of the last round.
 */
static uint64_t warm_up(struct pr_sched_core *c, uint32_t n)
{
    uint32_t all[8];
    uint64_t t = 0;

    ck_assert_uint_le(n, 8);
    for (uint32_t r = 0; r < n; r++) {
        all[r] = r;
    }
    for (int i = 0; i < WARM; i++) {
        t = (uint64_t)i * STEP_US;
        for (uint32_t r = 0; r < n; r++) {
            sf_ready(c, r, 1, t);
        }
        sf_expect_group(c, t, all, n, NULL);
        reduced(c, all, n, REDUCE_US);
    }
    return t;
}

/*
 * Two of three in step are queued: the third is expected at once, so the
 * group waits for it (past the 10 us window_min_ms, for its spread and
 * 1/32 of its step) and forms the moment it is in.
 */
START_TEST(test_arrival_waits_for_the_expected)
{
    struct pr_sched_params p = arrival_params();
    struct pr_sched_core *c = sf_make(&p, 3);
    uint64_t t = warm_up(c, 3) + STEP_US;

    sf_ready(c, 0, 2, t);
    sf_ready(c, 1, 2, t);
    int64_t dl = pr_sched_core_deadline_us(c);

    /* Its spread decayed from 5 ms to under 0.3: under 1 ms of waiting. */
    ck_assert_int_gt(dl, (int64_t)t + 300); /* past window_min_ms */
    ck_assert_int_lt(dl, (int64_t)t + 1000);
    sf_expect_none(c, t + 300);
    sf_ready(c, 2, 2, t + 300);
    sf_expect_group(c, t + 300, (const uint32_t[]){0, 1, 2}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * The same, but the third never comes: the pair waits until the third's
 * expected time plus its spread, then goes without it; next round, the
 * third overdue, the pair waits window_min_ms only.
 */
START_TEST(test_arrival_overdue_not_waited_for)
{
    struct pr_sched_params p = arrival_params();
    struct pr_sched_core *c = sf_make(&p, 3);
    uint64_t t = warm_up(c, 3) + STEP_US;

    sf_ready(c, 0, 2, t);
    sf_ready(c, 1, 2, t);
    int64_t dl = pr_sched_core_deadline_us(c);

    sf_expect_none(c, (uint64_t)dl - 1);
    sf_expect_group(c, (uint64_t)dl, (const uint32_t[]){0, 1}, 2, NULL);
    t += STEP_US;
    sf_ready(c, 0, 3, t);
    sf_ready(c, 1, 3, t);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), (int64_t)t + 10);
    sf_expect_group(c, t + 10, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * A worker three steps slow is expected beyond a fast opener's horizon
 * (half the opener's step): the fast pair does not wait for it. The slow
 * one, opening a group itself (horizon: half its own step), waits for the
 * fast pair, which comes within it: a group of all three.
 */
START_TEST(test_arrival_horizon_is_the_openers)
{
    struct pr_sched_params p = arrival_params();
    struct pr_sched_core *c = sf_make(&p, 3);
    uint64_t t = 0;

    /*
     * Worker 2 READY every 3 steps, 2 ms before the pair; the loop ends on
     * such a round (i = 3 x WARM).
     */
    for (int i = 0; i <= 3 * WARM; i++) {
        t = (uint64_t)i * STEP_US;
        if (i % 3 == 0) {
            sf_ready(c, 2, 1, t - (i > 0 ? 2000 : 0));
        }
        sf_ready(c, 0, 1, t);
        sf_ready(c, 1, 1, t);
        if (i % 3 == 0) {
            sf_expect_group(c, t, (const uint32_t[]){2, 0, 1}, 3, NULL);
            reduced(c, (const uint32_t[]){2, 0, 1}, 3, REDUCE_US);
        } else {
            /* Within the initial 5 ms window, before the next round. */
            sf_expect_group(c, t + 5000, (const uint32_t[]){0, 1}, 2, NULL);
            reduced(c, (const uint32_t[]){0, 1}, 2, REDUCE_US);
        }
    }
    /* Two fast rounds: worker 2 is due in 18 and 8 ms, beyond 5 ms. */
    for (int i = 1; i <= 2; i++) {
        t += STEP_US;
        sf_ready(c, 0, 2, t);
        sf_ready(c, 1, 2, t);
        ck_assert_int_eq(pr_sched_core_deadline_us(c), (int64_t)t + 10);
        sf_expect_group(c, t + 10, (const uint32_t[]){0, 1}, 2, NULL);
    }
    /* Worker 2 first: it waits for the pair, expected 2 ms later. */
    t += STEP_US - 2000;
    sf_ready(c, 2, 2, t);
    sf_expect_none(c, t + 1999);
    sf_ready(c, 0, 3, t + 2000);
    sf_expect_none(c, t + 2000);
    sf_ready(c, 1, 3, t + 2000);
    sf_expect_group(c, t + 2000, (const uint32_t[]){2, 0, 1}, 3, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * A worker whose pace is not known yet (it just joined) is waited for as
 * the adaptive window would: the window then closes at window_ms.
 */
START_TEST(test_arrival_unknown_pace_falls_back)
{
    struct pr_sched_params p = arrival_params();
    struct pr_sched_core *c = sf_make(&p, 2);
    uint64_t t = warm_up(c, 2) + STEP_US;
    double win = pr_sched_core_window_ms(c);

    ck_assert_int_eq(pr_sched_core_add_worker(c, 2, 1, t - 1), 0);
    sf_ready(c, 0, 2, t);
    sf_ready(c, 1, 2, t);
    ck_assert_int_eq(pr_sched_core_deadline_us(c),
                     (int64_t)(t + (uint64_t)ceil(win * 1000.0)));
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * A worker whose reduces take a quarter of its step or more (a slow link)
 * is not waited for: the group would wait on its link. As the opener, it
 * waits the adaptive window only. Reduces unknown yet: the same.
 */
START_TEST(test_arrival_not_for_slow_reduces)
{
    struct pr_sched_params p = arrival_params();
    struct pr_sched_core *c = sf_make(&p, 3);
    uint64_t t = warm_up(c, 3) + STEP_US;
    double win;

    /* Worker 2's reduces now take 4 ms of its 10 ms step. */
    for (int i = 0; i < 8; i++)
        pr_sched_core_reduced(c, 2, 4000);
    sf_ready(c, 0, 2, t);
    sf_ready(c, 1, 2, t);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), (int64_t)t + 10);
    sf_expect_group(c, t + 10, (const uint32_t[]){0, 1}, 2, NULL);
    /* Worker 2 opens: the adaptive window, not a wait for the pair. */
    win = pr_sched_core_window_ms(c);
    sf_ready(c, 2, 2, t + 20);
    ck_assert_int_eq(pr_sched_core_deadline_us(c),
                     (int64_t)(t + 20 + (uint64_t)ceil(win * 1000.0)));
    pr_sched_core_destroy(c);

    /* Nothing known of the reduces: the adaptive window too. */
    c = sf_make(&p, 2);
    for (int i = 0; i < WARM; i++) {
        t = (uint64_t)i * STEP_US;
        sf_ready(c, 0, 1, t);
        sf_ready(c, 1, 1, t);
        sf_expect_group(c, t, (const uint32_t[]){0, 1}, 2, NULL);
    }
    ck_assert_int_eq(pr_sched_core_add_worker(c, 2, 1, t), 0);
    pr_sched_core_reduced(c, 99, 5); /* unknown: ignored */
    pr_sched_core_reduced(NULL, 0, 5);
    win = pr_sched_core_window_ms(c);
    t += STEP_US;
    sf_ready(c, 0, 2, t);
    ck_assert_int_eq(pr_sched_core_deadline_us(c),
                     (int64_t)(t + (uint64_t)ceil(win * 1000.0)));
    pr_sched_core_destroy(c);
}
END_TEST

/* window_wait 0: the adaptive window alone, waiting for no one. */
START_TEST(test_arrival_off_is_the_adaptive_window)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    struct pr_sched_core *c = sf_make(&p, 3);
    uint64_t t = warm_up(c, 3) + STEP_US;
    double win = pr_sched_core_window_ms(c);

    sf_ready(c, 0, 2, t);
    sf_ready(c, 1, 2, t);
    ck_assert_int_eq(pr_sched_core_deadline_us(c),
                     (int64_t)(t + (uint64_t)ceil(win * 1000.0)));
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_arrival_params_checked)
{
    struct pr_sched_params p = arrival_params();
    const double bad[] = {-0.1, 1.01, NAN, INFINITY};

    ck_assert_int_eq(pr_sched_core_check_params(&p), 0);
    p.window_wait = 1.0;
    ck_assert_int_eq(pr_sched_core_check_params(&p), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p.window_wait = bad[i];
        ck_assert_int_eq(pr_sched_core_check_params(&p), -EINVAL);
        ck_assert_ptr_null(pr_sched_core_create(&p));
    }
}
END_TEST

static Suite *arrival_suite(void)
{
    Suite *s = suite_create("sched_core_arrival");
    TCase *tc = tcase_create("window");

    tcase_add_test(tc, test_arrival_waits_for_the_expected);
    tcase_add_test(tc, test_arrival_overdue_not_waited_for);
    tcase_add_test(tc, test_arrival_horizon_is_the_openers);
    tcase_add_test(tc, test_arrival_unknown_pace_falls_back);
    tcase_add_test(tc, test_arrival_not_for_slow_reduces);
    tcase_add_test(tc, test_arrival_off_is_the_adaptive_window);
    tcase_add_test(tc, test_arrival_params_checked);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(arrival_suite());
}
