/* SPDX-License-Identifier: MIT */
/*
 * Policy dynamic with real processes: 2 daemons, 6 trainers of different
 * speeds. Every result equals the reference combination of the members
 * and versions it reports: the weighted mean under uniform weights, the
 * member's personal result under staleness weights.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

#define NTRAIN 6

static void run(const char *weighting, int personal)
{
    char w[64];
    snprintf(w, sizeof(w), "scheduler.weighting=%s", weighting);
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=3",
                                "scheduler.window_max_ms=6", w, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, NULL), 0);
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    /* Speeds differ so that groups vary and versions drift apart. */
    static const int slow_ms[NTRAIN] = {2, 3, 5, 8, 13, 21};
    for (int i = 0; i < NTRAIN; i++) {
        snprintf(names[i], sizeof(names[i]), "d%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 100003,
                                   .nparts = 2,
                                   .uniform = !personal,
                                   .personal = personal,
                                   .slow_ms = slow_ms[i],
                                   .run_s = 3.0};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int failed = 0;
    for (int i = 0; i < NTRAIN; i++)
        if (h_wait(pids[i], 60000) != 0)
            failed = 1;
    if (failed)
        h_log_dump(&c, "sched");
    ck_assert_int_eq(failed, 0);
    long nonuniform_total = 0, maxk = 0, steps_total = 0;
    for (int i = 0; i < NTRAIN; i++) {
        long steps, errors, nonuni, k;
        double secs;
        ck_assert_int_eq(
            h_trainer_figures(&c, names[i], &steps, &secs, &errors), 0);
        ck_assert_int_eq(h_trainer_groups(&c, names[i], &nonuni, &k), 0);
        ck_assert_int_gt(steps, 10);
        nonuniform_total += nonuni;
        steps_total += steps;
        if (k > maxk)
            maxk = k;
    }
    printf("dynamic/%s: %ld checked results, largest group %ld, %ld with "
           "non-uniform weights\n",
           weighting, steps_total, maxk, nonuniform_total);
    /* The runs really exercised groups of several and, for staleness,
     * weights that are not all equal. */
    ck_assert_int_gt(maxk, 1);
    if (personal)
        ck_assert_int_gt(nonuniform_total, 0);
    else
        ck_assert_int_eq(nonuniform_total, 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

START_TEST(test_dynamic_uniform)
{
    run("uniform", 0);
}
END_TEST

START_TEST(test_dynamic_staleness)
{
    run("staleness", 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_dynamic");
    TCase *tc = tcase_create("dynamic");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_dynamic_uniform);
    tcase_add_test(tc, test_dynamic_staleness);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
