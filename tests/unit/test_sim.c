/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the simulator (daemon/sim): the real scheduler core under a
 * simulated clock. Connectivity windows with the group generator off and on
 * (acceptance scenario 3), the policies' group sizes and update rates, the
 * spectral gap, reproducibility, and the convergence model.
 */
#include "daemon/sim/sim.h"
#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"
#include "daemon/sim/model.h"
#include "daemon/sim/scenario.h"
#include "tests/check_run.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 8

/* Half the workers (the upper ranks) `factor` times slower. */
static void half_slow(double *speed, double factor)
{
    for (int i = 0; i < N; i++) {
        speed[i] = i >= N / 2 ? factor : 1.0;
    }
}

/* Acceptance 3's profile: N 8, constant P = 4, +-5% jitter, B = 10. */
static void acceptance3_conf(struct pr_sim_conf *c, const double *speed,
                             int policy, uint32_t bound)
{
    pr_sim_conf_defaults(c, policy, N);
    c->sched.group_size = 4;
    c->sched.group_max = 4;
    c->sched.isolation_bound = bound;
    c->window_rounds = 10;
    c->speed = speed;
    c->jitter = 0.05;
    c->duration_s = 600.0;
}

static void run_ok(const struct pr_sim_conf *c, struct pr_sim_result *r)
{
    ck_assert_int_eq(pr_sim_run(c, r), 0);
    ck_assert(!r->stalled);
    ck_assert_uint_gt(r->groups, 0);
}

/* The simulator's own windows agree with the core's counters. */
static void check_windows_match_core(const struct pr_sim_result *r)
{
    ck_assert_uint_eq(r->windows, r->core.windows_checked);
    ck_assert_uint_eq(r->windows_connected, r->core.windows_connected);
}

START_TEST(test_sim_generator_connects_every_window)
{
    static const int policies[] = {PR_POLICY_CONSTANT, PR_POLICY_DYNAMIC};
    double speed[N];

    half_slow(speed, 2.5);
    for (size_t i = 0; i < sizeof(policies) / sizeof(*policies); i++) {
        struct pr_sim_conf c;
        struct pr_sim_result r;

        acceptance3_conf(&c, speed, policies[i], 10);
        run_ok(&c, &r);
        printf("sim: %s P 4, half 2.5x slower, generator on (B 10): "
               "%llu/%llu windows connected, mean %.1f max %.1f rounds, "
               "strict 10-round windows %.1f%%\n",
               pr_policy_name(policies[i]),
               (unsigned long long)r.windows_connected,
               (unsigned long long)r.windows,
               (double)r.window_updates / ((double)r.windows * N),
               (double)r.window_max_updates / N,
               100.0 * (double)r.strict_connected / (double)r.strict_windows);
        ck_assert_uint_ge(r.windows, 20);
        ck_assert_uint_eq(r.windows_connected, r.windows);
        check_windows_match_core(&r);
        /* Every window reached B rounds before it could end. */
        ck_assert_uint_ge(r.window_updates, r.windows * 10 * N);
        pr_sim_result_fini(&r);
    }
}
END_TEST

START_TEST(test_sim_generator_off_leaves_windows_unconnected)
{
    static const double factors[] = {2.5, 2.0, 3.0};
    double speed[N];

    for (size_t i = 0; i < sizeof(factors) / sizeof(*factors); i++) {
        struct pr_sim_conf c;
        struct pr_sim_result r;

        half_slow(speed, factors[i]);
        acceptance3_conf(&c, speed, PR_POLICY_CONSTANT, 0);
        run_ok(&c, &r);
        printf("sim: constant P 4, half %.1fx slower, generator off: "
               "%llu/%llu = %.1f%% windows connected, %.1f%% groups mix "
               "fast and slow\n",
               factors[i], (unsigned long long)r.windows_connected,
               (unsigned long long)r.windows,
               100.0 * (double)r.windows_connected / (double)r.windows,
               100.0 * (double)r.mixed / (double)r.multi);
        ck_assert_uint_ge(r.windows, 20);
        ck_assert_uint_lt(r.windows_connected, r.windows);
        check_windows_match_core(&r);
        /* Without steering, windows are exactly B rounds long. */
        ck_assert_uint_eq(r.windows, r.strict_windows);
        ck_assert_uint_eq(r.windows_connected, r.strict_connected);
        ck_assert_uint_eq(r.core.generator_forced, 0);
        pr_sim_result_fini(&r);
    }
}
END_TEST

START_TEST(test_sim_allreduce_groups_of_n)
{
    struct pr_sim_conf c;
    struct pr_sim_result r;
    double speed[N];

    half_slow(speed, 1.0);
    speed[3] = 2.0; /* one worker 2x slower */
    pr_sim_conf_defaults(&c, PR_POLICY_ALLREDUCE, N);
    c.speed = speed;
    c.jitter = 0.05;
    c.duration_s = 30.0;
    run_ok(&c, &r);
    ck_assert_uint_eq(r.hist[N], r.groups);
    ck_assert_uint_eq(r.members, r.groups * N);
    /* Everyone waits for the slow one: the same update rate for all. */
    for (uint32_t i = 1; i < N; i++) {
        ck_assert_uint_eq(r.updates[i], r.updates[0]);
        ck_assert_double_eq_tol(pr_sim_rate(&r, i), pr_sim_rate(&r, 0), 1e-12);
    }
    /* A 200 ms step (plus up to 5% jitter) bounds the rate. */
    ck_assert_double_le(pr_sim_rate(&r, 0), 5.0);
    ck_assert_double_ge(pr_sim_rate(&r, 0), 4.5);
    ck_assert_double_eq_tol(r.gap, 1.0, 1e-9);
    pr_sim_result_fini(&r);
}
END_TEST

START_TEST(test_sim_constant_groups_of_p)
{
    static const uint32_t sizes[] = {2, 3, 4};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
        struct pr_sim_conf c;
        struct pr_sim_result r;

        pr_sim_conf_defaults(&c, PR_POLICY_CONSTANT, N);
        c.sched.group_size = sizes[i];
        c.jitter = 0.05;
        c.duration_s = 30.0;
        run_ok(&c, &r);
        ck_assert_uint_eq(r.hist[sizes[i]], r.groups);
        pr_sim_result_fini(&r);
    }
}
END_TEST

START_TEST(test_sim_constant_pairs_gap)
{
    struct pr_sim_conf c;
    struct pr_sim_result r;

    pr_sim_conf_defaults(&c, PR_POLICY_CONSTANT, N);
    c.sched.group_size = 2;
    c.jitter = 0.05;
    c.duration_s = 60.0;
    run_ok(&c, &r);
    printf("sim: constant P 2 on N 8: spectral gap %.4f (uniformly random "
           "pairs: 1/7 = %.4f)\n",
           r.gap, 1.0 / 7.0);
    ck_assert(r.gap > 0.0 && r.gap < 1.0);
    pr_sim_result_fini(&r);
}
END_TEST

START_TEST(test_sim_spectral_gap_known)
{
    double m[N * N];
    double a = 0.3;

    /* (1 - a) I + a J / N: lambda_2 = 1 - a. */
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            m[i * N + j] = a / N + (i == j ? 1.0 - a : 0.0);
        }
    }
    ck_assert_double_eq_tol(pr_sim_spectral_gap(m, N), a, 1e-9);
    /* Two cliques that never meet: lambda_2 = 1, no gap. */
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            m[i * N + j] = (i < N / 2) == (j < N / 2) ? 2.0 / N : 0.0;
        }
    }
    ck_assert_double_eq_tol(pr_sim_spectral_gap(m, N), 0.0, 1e-9);
}
END_TEST

START_TEST(test_sim_dynamic_mixes_sizes)
{
    struct pr_sim_conf c;
    struct pr_sim_result r;
    double speed[N];
    uint64_t sizes = 0;

    half_slow(speed, 2.5);
    pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, N);
    c.speed = speed;
    c.jitter = 0.05;
    c.duration_s = 60.0;
    run_ok(&c, &r);
    for (uint32_t k = 1; k <= N; k++) {
        sizes += r.hist[k] > 0;
    }
    ck_assert_uint_ge(sizes, 2);
    /* The fast workers update about 2.5x as often as the slow ones. */
    double ratio = pr_sim_rate(&r, 0) / pr_sim_rate(&r, N - 1);

    ck_assert_double_gt(ratio, 2.0);
    ck_assert_double_lt(ratio, 2.7);
    ck_assert_uint_eq(r.slow, N / 2);
    pr_sim_result_fini(&r);
}
END_TEST

static double mean_size(const struct pr_sim_result *r, uint32_t i)
{
    return r->updates[i] > 0 ? (double)r->sizes[i] / (double)r->updates[i]
                             : 0.0;
}

/*
 * bench-torch's straggler profile (4 workers, 21 ms steps, the last 3x
 * slower): with the adaptive window alone two fast workers in step keep
 * meeting while the straggler meets about one at a time; the
 * arrival-aware window (window_wait 0.5, the default) brings the
 * straggler into groups of nearly everyone and the fast workers into
 * bigger groups, with less waiting.
 */
START_TEST(test_sim_arrival_window_grows_small_groups)
{
    double speed[4] = {1.0, 1.0, 1.0, 3.0};
    struct pr_sim_result r[2];
    const double wait[2] = {0.0, 0.5};

    for (int k = 0; k < 2; k++) {
        struct pr_sim_conf c;

        pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, 4);
        c.sched.window_wait = wait[k];
        c.speed = speed;
        c.base_ms = 21.0;
        c.comm_us = 300.0;
        c.jitter = 0.05;
        c.duration_s = 30.0;
        run_ok(&c, &r[k]);
        printf("sim: window_wait %.1f: mean group size w0 %.2f w3 (slow) "
               "%.2f, wait %.2f ms per update\n",
               wait[k], mean_size(&r[k], 0), mean_size(&r[k], 3),
               (double)r[k].wait_us / 1000.0 / (double)r[k].members);
    }
    ck_assert_double_lt(mean_size(&r[0], 3), 3.0);
    ck_assert_double_gt(mean_size(&r[1], 3), 3.5);
    for (uint32_t i = 0; i < 3; i++) {
        ck_assert_double_gt(mean_size(&r[1], i), mean_size(&r[0], i));
    }
    ck_assert_uint_lt(r[1].wait_us * r[0].members, r[0].wait_us * r[1].members);
    pr_sim_result_fini(&r[0]);
    pr_sim_result_fini(&r[1]);
}
END_TEST

START_TEST(test_sim_reproducible)
{
    struct pr_sim_conf c;
    struct pr_sim_result a;
    struct pr_sim_result b;
    double speed[N];

    half_slow(speed, 2.0);
    pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, N);
    c.speed = speed;
    c.jitter = 0.1;
    c.stall_prob = 0.1;
    c.stall_ms = 100.0;
    c.duration_s = 30.0;
    run_ok(&c, &a);
    run_ok(&c, &b);
    ck_assert_uint_eq(a.groups, b.groups);
    ck_assert_uint_eq(a.ready_events, b.ready_events);
    ck_assert_int_eq(memcmp(a.updates, b.updates, N * sizeof(*a.updates)), 0);
    ck_assert_int_eq(memcmp(a.hist, b.hist, (N + 1) * sizeof(*a.hist)), 0);
    pr_sim_result_fini(&b);
    c.seed = 2;
    run_ok(&c, &b);
    ck_assert(a.groups != b.groups || a.ready_events != b.ready_events ||
              memcmp(a.updates, b.updates, N * sizeof(*a.updates)) != 0);
    pr_sim_result_fini(&a);
    pr_sim_result_fini(&b);
}
END_TEST

START_TEST(test_sim_stalls_slow_everyone_under_allreduce)
{
    struct pr_sim_conf c;
    struct pr_sim_result plain;
    struct pr_sim_result stalls;

    pr_sim_conf_defaults(&c, PR_POLICY_ALLREDUCE, N);
    c.duration_s = 60.0;
    run_ok(&c, &plain);
    c.stall_prob = 0.1;
    c.stall_ms = 100.0;
    run_ok(&c, &stalls);
    /* P(some worker of 8 stalls in a round) = 1 - 0.9^8, about 0.57. */
    double slowdown = pr_sim_rate(&plain, 0) / pr_sim_rate(&stalls, 0);

    ck_assert_double_gt(slowdown, 1.4);
    ck_assert_double_lt(slowdown, 1.75);
    pr_sim_result_fini(&plain);
    pr_sim_result_fini(&stalls);
}
END_TEST

START_TEST(test_sim_invalid_conf)
{
    struct pr_sim_conf c;
    struct pr_sim_result r;

    pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, 0);
    ck_assert_int_eq(pr_sim_run(&c, &r), -EINVAL);
    pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, N);
    c.sched.group_min = 5;
    c.sched.group_max = 4;
    ck_assert_int_eq(pr_sim_run(&c, &r), -EINVAL);
    pr_sim_conf_defaults(&c, PR_POLICY_CONSTANT, N);
    c.jitter = 1.5;
    ck_assert_int_eq(pr_sim_run(&c, &r), -EINVAL);
    ck_assert_int_eq(pr_sim_run(NULL, &r), -EINVAL);
}
END_TEST

/* The model every convergence test shares, and its calibrated target. */
static struct pr_sim_model *model;
static double target;

static void model_setup(void)
{
    struct pr_sim_model_params mp;

    pr_sim_model_defaults(&mp);
    model = pr_sim_model_create(&mp);
    ck_assert_ptr_nonnull(model);
    ck_assert_int_eq(pr_sim_calibrate(NULL, model, N, PR_SIM_CALIB_STEPS,
                                      PR_SIM_CALIB_FRAC, 1, &target),
                     0);
}

static void model_teardown(void)
{
    pr_sim_model_destroy(model);
    model = NULL;
}

static void model_conf(struct pr_sim_conf *c, int policy, const double *speed)
{
    pr_sim_conf_defaults(c, policy, N);
    c->sched.group_size = 4;
    c->speed = speed;
    c->jitter = 0.05;
    c->duration_s = 120.0;
    c->model = model;
    c->target_loss = target;
    c->stop_at_target = 1;
}

START_TEST(test_sim_model_allreduce_reaches_target)
{
    struct pr_sim_conf c;
    struct pr_sim_result r;

    model_conf(&c, PR_POLICY_ALLREDUCE, NULL);
    run_ok(&c, &r);
    ck_assert_double_eq_tol(r.loss0, log(10.0), 1e-6);
    ck_assert_double_gt(r.target_s, 0.0);
    ck_assert_double_le(r.loss_final, target);
    /*
     * The calibration reaches this target within its 200 rounds, and a
     * round takes at least one 95 ms step.
     */
    ck_assert_double_lt(r.target_s, PR_SIM_CALIB_STEPS * 0.12);
    ck_assert_double_gt(r.target_s, 10 * 0.095);
    printf("sim: target %.4f, allreduce (homogeneous) reaches it at "
           "%.2f s\n",
           target, r.target_s);
    pr_sim_result_fini(&r);
}
END_TEST

START_TEST(test_sim_model_dynamic_beats_allreduce_one_slow)
{
    struct pr_sim_conf c;
    struct pr_sim_result ar;
    struct pr_sim_result dyn;
    double speed[N];

    half_slow(speed, 1.0);
    speed[N - 1] = 3.0;
    model_conf(&c, PR_POLICY_ALLREDUCE, speed);
    run_ok(&c, &ar);
    model_conf(&c, PR_POLICY_DYNAMIC, speed);
    run_ok(&c, &dyn);
    ck_assert_double_gt(ar.target_s, 0.0);
    ck_assert_double_gt(dyn.target_s, 0.0);
    printf("sim: one worker 3x slower: allreduce %.2f s, dynamic %.2f s to "
           "the target: %.2fx sooner\n",
           ar.target_s, dyn.target_s, ar.target_s / dyn.target_s);
    ck_assert_double_gt(ar.target_s / dyn.target_s, 1.2);
    pr_sim_result_fini(&ar);
    pr_sim_result_fini(&dyn);
}
END_TEST

/*
 * The demo's personal result for a pair is the plain mean whatever the
 * weights, so constant P = 2 trains alike under both weightings;
 * dynamic groups of three or more with stale members do not.
 */
START_TEST(test_sim_model_personal_results)
{
    struct pr_sim_conf c;
    struct pr_sim_result u;
    struct pr_sim_result s;
    double speed[N];

    half_slow(speed, 1.0);
    speed[N - 1] = 3.0;
    model_conf(&c, PR_POLICY_CONSTANT, speed);
    c.sched.group_size = 2;
    c.stop_at_target = 0;
    c.target_loss = 0.0;
    c.duration_s = 5.0;
    run_ok(&c, &u);
    c.sched.weighting = PR_WEIGHT_STALENESS;
    run_ok(&c, &s);
    /* Equal up to float rounding (personal results round differently). */
    ck_assert_double_eq_tol(u.loss_final, s.loss_final, 1e-5);
    pr_sim_result_fini(&u);
    pr_sim_result_fini(&s);

    c.sched.policy = PR_POLICY_DYNAMIC;
    c.sched.weighting = PR_WEIGHT_UNIFORM;
    run_ok(&c, &u);
    c.sched.weighting = PR_WEIGHT_STALENESS;
    run_ok(&c, &s);
    ck_assert_uint_eq(u.groups, s.groups); /* the same groups */
    printf("sim: dynamic, one 3x slow, 5 s: loss %.5f uniform, %.5f "
           "staleness\n",
           u.loss_final, s.loss_final);
    ck_assert_double_gt(fabs(u.loss_final - s.loss_final), 1e-4);
    pr_sim_result_fini(&u);
    pr_sim_result_fini(&s);
}
END_TEST

static Suite *sim_suite(void)
{
    Suite *s = suite_create("sim");
    TCase *tc;

    tc = tcase_create("connectivity");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_sim_generator_connects_every_window);
    tcase_add_test(tc, test_sim_generator_off_leaves_windows_unconnected);
    suite_add_tcase(s, tc);

    tc = tcase_create("policies");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_sim_allreduce_groups_of_n);
    tcase_add_test(tc, test_sim_constant_groups_of_p);
    tcase_add_test(tc, test_sim_constant_pairs_gap);
    tcase_add_test(tc, test_sim_spectral_gap_known);
    tcase_add_test(tc, test_sim_dynamic_mixes_sizes);
    tcase_add_test(tc, test_sim_arrival_window_grows_small_groups);
    tcase_add_test(tc, test_sim_reproducible);
    tcase_add_test(tc, test_sim_stalls_slow_everyone_under_allreduce);
    tcase_add_test(tc, test_sim_invalid_conf);
    suite_add_tcase(s, tc);

    tc = tcase_create("model");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, model_setup, model_teardown);
    tcase_add_test(tc, test_sim_model_allreduce_reaches_target);
    tcase_add_test(tc, test_sim_model_dynamic_beats_allreduce_one_slow);
    tcase_add_test(tc, test_sim_model_personal_results);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sim_suite());
}
