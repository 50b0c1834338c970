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

/* Workers 0 and 1 average at version `v`: the job reaches v. */
static void progress(struct pr_sched_core *c, uint64_t v, uint64_t now_us)
{
    sf_ready(c, 0, v, now_us);
    sf_ready(c, 1, v, now_us);
    sf_expect_group(c, now_us, (const uint32_t[]){0, 1}, 2, NULL);
}

START_TEST(test_sched_core_heal_fresh_joiner_takes_the_model)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    progress(c, 5, 0);
    sf_ready(c, 2, 1, 10); /* a fresh model: worker 2 joined late */
    sf_ready(c, 0, 6, 10);
    sf_expect_group(c, 10, (const uint32_t[]){2, 0}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.0);
    ck_assert_double_eq(g.members[1].weight, 1.0);
    ck_assert_int_eq(g.personal, 0);
    ck_assert_uint_eq(g.max_version, 6);
    pr_sched_group_fini(&g);
    /* Healed: from now on it gives its model like everyone. */
    sf_ready(c, 2, 7, 20);
    sf_ready(c, 1, 6, 20);
    sf_expect_group(c, 20, (const uint32_t[]){2, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.5);
    ck_assert_double_eq(g.members[1].weight, 0.5);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/* At the start of a job every model is fresh: nobody heals. */
START_TEST(test_sched_core_heal_not_at_the_start)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);
    struct pr_sched_group g;

    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.5);
    ck_assert_double_eq(g.members[1].weight, 0.5);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/* Asked for (a restart from a checkpoint): at any version. */
START_TEST(test_sched_core_heal_explicit)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);
    struct pr_sched_group g;

    ck_assert_int_eq(pr_sched_core_heal(c, 1), 0);
    ck_assert_int_eq(pr_sched_core_heal(c, 7), -ENOENT);
    sf_ready(c, 0, 5, 0);
    sf_ready(c, 1, 5, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 1.0);
    ck_assert_double_eq(g.members[1].weight, 0.0);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/* A group of healers alone averages them; the mark stays for later. */
START_TEST(test_sched_core_heal_kept_until_a_giver)
{
    struct pr_sched_params p = sf_params(PR_POLICY_DYNAMIC);
    p.group_min = 1;
    p.isolation_bound = 0; /* no generator holding worker 2's group */
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    sf_ready(c, 0, 5, 0);
    sf_ready(c, 1, 5, 0);
    sf_expect_group(c, 10000, (const uint32_t[]){0, 1}, 2, NULL);
    sf_ready(c, 2, 1, 100000);
    /* Alone at the end of its window: it keeps its own model. */
    sf_expect_group(c, 200000, (const uint32_t[]){2}, 1, &g);
    ck_assert_double_eq(g.members[0].weight, 1.0);
    pr_sched_group_fini(&g);
    sf_ready(c, 2, 2, 300000); /* version 2 now, still healing */
    sf_ready(c, 0, 6, 300000);
    sf_expect_group(c, 400000, (const uint32_t[]){2, 0}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.0);
    ck_assert_double_eq(g.members[1].weight, 1.0);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
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

/* allreduce: the others share 1/(N-1) each. */
/*
 * A job that ended (every worker left) is not the next job's past: its
 * fresh models average as equals, none taken for a joiner.
 */
START_TEST(test_sched_core_heal_not_across_jobs)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);
    struct pr_sched_group g;

    progress(c, 9, 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 0, 10), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 1, 10), 0);
    ck_assert_int_eq(pr_sched_core_add_worker(c, 0, 0, 20), 0);
    ck_assert_int_eq(pr_sched_core_add_worker(c, 1, 0, 20), 0);
    sf_ready(c, 0, 1, 30);
    sf_ready(c, 1, 1, 30);
    sf_expect_group(c, 30, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.5);
    ck_assert_double_eq(g.members[1].weight, 0.5);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * After a scheduler restart no group has formed yet, but the trained
 * workers' READYs show how far the job got: a fresh joiner still heals.
 */
START_TEST(test_sched_core_heal_after_restart)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 2;
    struct pr_sched_core *c = sf_make(&p, 2);
    struct pr_sched_group g;

    sf_ready(c, 0, 40, 0); /* a trained worker, re-registered */
    sf_ready(c, 1, 1, 5);  /* a fresh one */
    sf_expect_group(c, 5, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 1.0);
    ck_assert_double_eq(g.members[1].weight, 0.0);
    ck_assert_uint_eq(g.max_version, 40);
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
    struct pr_sched_group g;

    ck_assert_int_eq(pr_sched_core_heal(c, 0), 0);
    sf_ready(c, 0, 90, 0);
    sf_ready(c, 1, 12, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, &g);
    ck_assert_double_eq(g.members[0].weight, 0.0);
    ck_assert_uint_eq(g.max_version, 12);
    pr_sched_group_fini(&g);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 0), 0);
    sf_ready(c, 0, 13, 10);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 0), 1);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 1), 0);
    ck_assert_int_eq(pr_sched_core_is_ready(c, 99), 0);
    ck_assert_int_eq(pr_sched_core_is_ready(NULL, 0), 0);
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_heal_allreduce)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    struct pr_sched_core *c = sf_make(&p, 3);
    struct pr_sched_group g;

    sf_ready(c, 0, 4, 0);
    sf_ready(c, 1, 4, 0);
    ck_assert_int_eq(pr_sched_core_heal(c, 2), 0);
    sf_ready(c, 2, 4, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1, 2}, 3, &g);
    ck_assert_double_eq(g.members[0].weight, 0.5);
    ck_assert_double_eq(g.members[1].weight, 0.5);
    ck_assert_double_eq(g.members[2].weight, 0.0);
    pr_sched_group_fini(&g);
    pr_sched_core_destroy(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_core_heal");
    TCase *tc = tcase_create("heal");
    tcase_add_test(tc, test_sched_core_heal_fresh_joiner_takes_the_model);
    tcase_add_test(tc, test_sched_core_heal_not_at_the_start);
    tcase_add_test(tc, test_sched_core_heal_explicit);
    tcase_add_test(tc, test_sched_core_heal_kept_until_a_giver);
    tcase_add_test(tc, test_sched_core_heal_with_staleness);
    tcase_add_test(tc, test_sched_core_heal_allreduce);
    tcase_add_test(tc, test_sched_core_heal_not_across_jobs);
    tcase_add_test(tc, test_sched_core_heal_after_restart);
    tcase_add_test(tc, test_sched_core_heal_version_is_the_givers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
