/* SPDX-License-Identifier: MIT */
/*
 * Policies with real processes. Constant: results are the mean of exactly the
 * members each result reports, every trainer keeps making steps, and a 5x
 * straggler slows the others by less than a third (figures printed; the
 * timing is not asserted, since a loaded machine would make it flaky).
 * scheduler.min_workers: groups of all N from the first step.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

#define NTRAIN  6
#define STEP_MS 20

static const char *const constant_sets[] = {
    "scheduler.policy=constant", "scheduler.group_size=3",
    "scheduler.isolation_bound=0", NULL};

/* Runs 6 trainers for run_s; trainer 0 sleeps slow_factor x STEP_MS. */
static void run(struct h_cluster *c, double run_s, int slow_factor,
                double rate[NTRAIN])
{
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    for (int i = 0; i < NTRAIN; i++) {
        snprintf(names[i], sizeof(names[i]), "s%dw%d", slow_factor, i);
        struct h_trainer_opts o = {
            .name = names[i],
            .node = i % 2,
            .n = 10000,
            .nparts = 1,
            .uniform = 1,
            .slow_ms = i == 0 ? STEP_MS * slow_factor : STEP_MS,
            .run_s = run_s,
        };
        pids[i] = h_trainer_spawn(c, &o);
    }
    int failed = 0;
    for (int i = 0; i < NTRAIN; i++)
        if (h_wait(pids[i], (int)(run_s * 1000) + 30000) != 0)
            failed = 1;
    if (failed)
        h_log_dump(c, "node0");
    ck_assert_int_eq(failed, 0);
    for (int i = 0; i < NTRAIN; i++) {
        long steps, errors;
        double secs;
        ck_assert_int_eq(h_trainer_figures(c, names[i], &steps, &secs, &errors),
                         0);
        /* Every trainer, the straggler too, keeps making steps. */
        ck_assert_int_gt(steps, 5);
        rate[i] = (double)steps / secs;
    }
}

/*
 * scheduler.min_workers = N with policy allreduce: trainers that come one
 * after another, with no warm-up of their own, are all in every group from
 * the first step on (the scheduler holds the early ones back).
 */
START_TEST(test_policy_min_workers_first_steps)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce",
                                "scheduler.min_workers=4", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, NULL), 0);
    pid_t pids[4];
    char names[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "m%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 1000,
                                   .steps = 5,
                                   .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
        /* The first ones would reduce alone in the meantime. */
        struct timespec ts = {0, 300 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(h_wait(pids[i], 30000), 0);
    for (int i = 0; i < 4; i++) {
        long mink = 0, steps, errors;
        double secs;
        ck_assert_int_eq(
            h_trainer_figures(&c, names[i], &steps, &secs, &errors), 0);
        ck_assert_int_eq(steps, 5);
        ck_assert_int_eq(h_trainer_min_k(&c, names[i], &mink), 0);
        ck_assert_int_eq(mink, 4);
    }
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_policy_constant_straggler)
{
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 2, constant_sets, NULL), 0);
    double base[NTRAIN], slow[NTRAIN];
    run(&c, 3.0, 1, base);
    run(&c, 3.0, 5, slow);
    double b = 0, s = 0;
    for (int i = 1; i < NTRAIN; i++) {
        b += base[i];
        s += slow[i];
    }
    b /= NTRAIN - 1;
    s /= NTRAIN - 1;
    printf("constant P=3, 6 trainers, %d ms steps: others' step rate %.1f/s "
           "without a straggler, %.1f/s with trainer 0 slowed 5x "
           "(%.1f/s): drop %.1f%% (target < 33%%)\n",
           STEP_MS, b, s, slow[0], 100.0 * (1 - s / b));
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_policy");
    TCase *tc = tcase_create("constant");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_policy_constant_straggler);
    tcase_add_test(tc, test_policy_min_workers_first_steps);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
