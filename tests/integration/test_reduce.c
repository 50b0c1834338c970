/*
 * End-to-end partial reduces with real processes on loopback: a scheduler,
 * node daemons and trainers (forked children using libpreduce), checking
 * every result against a double-precision reference.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tests/integration/harness.h"

static const char *const allreduce_sets[] = {"scheduler.policy=allreduce",
                                             NULL};

/* 3 daemons x 2 trainers, allreduce, 20 steps of size n in nparts parts. */
static void run_allreduce(size_t n, int nparts, int steps)
{
    struct h_cluster c;
    const char *const node_sets[] = {"transport.chunk_kb=256", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 3, allreduce_sets, node_sets), 0);
    pid_t pids[6];
    char names[6][16];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof(names[i]), "w%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 3,
                                   .n = n,
                                   .nparts = nparts,
                                   .steps = steps,
                                   .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        int st = h_wait(pids[i], 120000);
        if (st != 0) {
            fprintf(stderr, "trainer %s exited %d\n", names[i], st);
            failed = 1;
        }
    }
    for (int i = 0; i < 6 && !failed; i++) {
        long s, e;
        double secs;
        ck_assert_int_eq(h_trainer_figures(&c, names[i], &s, &secs, &e), 0);
        ck_assert_int_eq(s, steps);
    }
    if (failed) {
        h_log_dump(&c, "sched");
        h_log_dump(&c, "node0");
    }
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(failed, 0);
}

START_TEST(test_reduce_allreduce_size1)
{
    run_allreduce(1, 1, 20);
}
END_TEST

START_TEST(test_reduce_allreduce_size1000)
{
    run_allreduce(1000, 1, 20);
}
END_TEST

START_TEST(test_reduce_allreduce_size1000003)
{
    run_allreduce(1000003, 1, 20);
}
END_TEST

START_TEST(test_reduce_allreduce_size4194304)
{
    run_allreduce(4194304, 1, 20);
}
END_TEST

START_TEST(test_reduce_allreduce_multi_tensor)
{
    /* One reduce call covers three tensors of one model. */
    run_allreduce(100003, 3, 20);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_reduce");
    TCase *tc = tcase_create("allreduce");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_reduce_allreduce_size1);
    tcase_add_test(tc, test_reduce_allreduce_size1000);
    tcase_add_test(tc, test_reduce_allreduce_size1000003);
    tcase_add_test(tc, test_reduce_allreduce_size4194304);
    tcase_add_test(tc, test_reduce_allreduce_multi_tensor);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
