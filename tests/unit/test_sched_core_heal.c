/* SPDX-License-Identifier: MIT */
/*
 * Healing joins in the scheduler core: a worker with a fresh model
 * (version 1) in a job that has gone past it, or one marked with
 * pr_sched_core_heal(), takes its first group's model without giving its
 * own: weight 0, the others weighted among themselves, no personal
 * results in that group, and its version becomes the group's.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "daemon/sched/core/sched_core.h"
#include "tests/unit/sched_fixture.h"
#include "tests/check_run.h"

/* Workers 0 and 1 average at version `v`: the job reaches v. */
#define PROGRESS(v, at)                                                        \
    SF_READY(0, v, at), SF_READY(1, v, at), SF_GROUP(at, 0, 1)

static const struct sf_case heal_cases[] = {
    {
        .name = "fresh_joiner_takes_the_model",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                PROGRESS(5, 0),
                SF_READY(2, 1, 10), /* a fresh model: worker 2 joined late */
                SF_READY(0, 6, 10),
                SF_GROUP(10, 2, 0),
                SF_WEIGHT(0, 0.0, 0),
                SF_WEIGHT(1, 1.0, 0),
                SF_PERSONAL(0),
                SF_MAX_VERSION(6),
                /* Healed: from now on it gives its model like everyone. */
                SF_READY(2, 7, 20),
                SF_READY(1, 6, 20),
                SF_GROUP(20, 2, 1),
                SF_WEIGHTS(0.5, 0),
                SF_END,
            },
    },
    {
        /* At the start of a job every model is fresh: nobody heals. */
        .name = "not_at_the_start",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 0),
                SF_GROUP(0, 0, 1),
                SF_WEIGHTS(0.5, 0),
                SF_END,
            },
    },
    {
        /* Asked for (a restart from a checkpoint): at any version. */
        .name = "explicit",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_HEAL(1, 0),
                SF_HEAL(7, -ENOENT),
                SF_READY(0, 5, 0),
                SF_READY(1, 5, 0),
                SF_GROUP(0, 0, 1),
                SF_WEIGHT(0, 1.0, 0),
                SF_WEIGHT(1, 0.0, 0),
                SF_END,
            },
    },
    {
        /*
         * A group of healers alone averages them; the mark stays for
         * later. isolation_bound stays 0: no generator holds worker 2's
         * group.
         */
        .name = "kept_until_a_giver",
        .policy = PR_POLICY_DYNAMIC,
        .group_min = 1,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 5, 0),
                SF_READY(1, 5, 0),
                SF_GROUP(10000, 0, 1),
                SF_READY(2, 1, 100000),
                /* Alone at the end of its window: it keeps its own model. */
                SF_GROUP(200000, 2),
                SF_WEIGHT(0, 1.0, 0),
                SF_READY(2, 2, 300000), /* version 2 now, still healing */
                SF_READY(0, 6, 300000),
                SF_GROUP(400000, 2, 0),
                SF_WEIGHT(0, 0.0, 0),
                SF_WEIGHT(1, 1.0, 0),
                SF_END,
            },
    },
    {
        /* allreduce: the others share 1/(N-1) each. */
        .name = "allreduce",
        .policy = PR_POLICY_ALLREDUCE,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 4, 0),
                SF_READY(1, 4, 0),
                SF_HEAL(2, 0),
                SF_READY(2, 4, 0),
                SF_GROUP(0, 0, 1, 2),
                SF_WEIGHT(0, 0.5, 0),
                SF_WEIGHT(1, 0.5, 0),
                SF_WEIGHT(2, 0.0, 0),
                SF_END,
            },
    },
    {
        /*
         * A job that ended (every worker left) is not the next job's
         * past: its fresh models average as equals, none taken for a
         * joiner.
         */
        .name = "not_across_jobs",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                PROGRESS(9, 0),
                SF_REMOVE(0, 10),
                SF_REMOVE(1, 10),
                SF_ADD(0, 20),
                SF_ADD(1, 20),
                SF_READY(0, 1, 30),
                SF_READY(1, 1, 30),
                SF_GROUP(30, 0, 1),
                SF_WEIGHTS(0.5, 0),
                SF_END,
            },
    },
    {
        /*
         * After a scheduler restart no group has formed yet, but the
         * trained workers' READYs show how far the job got: a fresh
         * joiner still heals.
         */
        .name = "after_restart",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .workers = 2,
        .steps =
            (const struct sf_step[]){
                SF_READY(0, 40, 0), /* a trained worker, re-registered */
                SF_READY(1, 1, 5),  /* a fresh one */
                SF_GROUP(5, 0, 1),
                SF_WEIGHT(0, 1.0, 0),
                SF_WEIGHT(1, 0.0, 0),
                SF_MAX_VERSION(40),
                SF_END,
            },
    },
};

START_TEST(test_sched_core_heal_case)
{
    sf_run(&heal_cases[_i]);
}
END_TEST

/* Staleness weighting: the givers' own weights, no personal results. */
START_TEST(test_sched_core_heal_with_staleness)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    p.weighting = PR_WEIGHT_STALENESS;
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    sf_ready(c, 0, 10, 0);
    sf_ready(c, 1, 8, 0);
    ck_assert_int_eq(pr_sched_core_heal(c, 2), 0);
    sf_ready(c, 2, 3, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, &g);
    double want[2];
    ck_assert_int_eq(pr_sched_staleness_weights((const uint64_t[]){10, 8}, 2,
                                                p.staleness_alpha, want),
                     0);
    ck_assert_double_eq_tol(g.members[0].weight, want[0], 1e-12);
    ck_assert_double_eq_tol(g.members[1].weight, want[1], 1e-12);
    ck_assert_double_eq(g.members[2].weight, 0.0);
    ck_assert_int_eq(g.personal, 0);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * A healer's own version does not set the group's: a worker restarted
 * from a checkpoint at a higher version takes the givers' version.
 */
START_TEST(test_sched_core_heal_version_is_the_givers)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);

    sf_script(c, "version_is_the_givers",
              (const struct sf_step[]){
                  SF_HEAL(0, 0),
                  SF_READY(0, 90, 0),
                  SF_READY(1, 12, 0),
                  SF_GROUP(0, 0, 1),
                  SF_WEIGHT(0, 0.0, 0),
                  SF_MAX_VERSION(12),
                  SF_END,
              });
    ck_assert_int_eq(pr_sched_core_is_ready(c, 0), 0);
    sf_ready(c, 0, 13, 10);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 0), 1);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 1), 0);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 99), 0);
    ck_assert_int_eq(pr_sched_core_is_ready(NULL, 0), 0);
    pr_sched_core_destroy(c);
}
END_TEST

static Suite *heal_suite(void)
{
    Suite *s = suite_create("sched_core_heal");
    TCase *tc = tcase_create("heal");

    tcase_add_loop_test(tc, test_sched_core_heal_case, 0,
                        (int)SF_NELEM(heal_cases));
    tcase_add_test(tc, test_sched_core_heal_with_staleness);
    tcase_add_test(tc, test_sched_core_heal_version_is_the_givers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(heal_suite());
}
