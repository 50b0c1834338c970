/* SPDX-License-Identifier: MIT */
/*
 * A standby scheduler (node.scheduler = first,standby): two node daemons
 * with two strict trainers each follow the first scheduler; it is killed
 * (SIGKILL) and every trainer is back in a group of all four, under the
 * standby, within a second (a restart-only job stopped about 3 s); the
 * first comes back and, once it has answered for node.scheduler_settle_ms,
 * both nodes follow it again and the trainers go on in groups of four.
 * Each trainer checks every result against its members' exact inputs and
 * that group ids and versions keep rising across both moves.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

#define TRAINERS 4
#define RUN_S    8.0

static const char *const sched_sets[] = {
    "scheduler.policy=allreduce", "scheduler.heartbeat_ms=200",
    "scheduler.node_timeout_ms=1000", NULL};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls who's log in cluster c for up to 10 s. */
static int says(const struct h_cluster *c, const char *who, const char *s)
{
    return h_log_wait(c, who, s, 10000);
}

/*
 * The longest time between two results in groups of all TRAINERS in a
 * trace, from `from` on; *last: the end of the last such result.
 */
static double longest_gap(const struct h_trace *t, int n, double from,
                          double *last)
{
    double prev = from, gap = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].rc != 0 || t[i].k != TRAINERS || t[i].t1 < from)
            continue;
        if (t[i].t1 - prev > gap)
            gap = t[i].t1 - prev;
        prev = t[i].t1;
    }
    *last = prev;
    return gap;
}

START_TEST(test_failover_to_standby_and_back)
{
    struct h_cluster first, standby;
    ck_assert_int_eq(h_cluster_start(&standby, 0, sched_sets, NULL), 0);
    ck_assert_int_eq(h_cluster_start(&first, 0, sched_sets, NULL), 0);
    char list[128];
    snprintf(list, sizeof(list), "node.scheduler=127.0.0.1:%u,127.0.0.1:%u",
             first.sched_port, standby.sched_port);
    const char *const node_sets[] = {list, "scheduler.heartbeat_ms=200",
                                     "scheduler.node_timeout_ms=1000",
                                     "node.scheduler_settle_ms=500", NULL};
    first.nnodes = 2;
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(h_node_start(&first, i, node_sets), 0);

    pid_t pids[TRAINERS];
    char names[TRAINERS][16];
    for (int i = 0; i < TRAINERS; i++) {
        snprintf(names[i], sizeof(names[i]), "f%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 4096,
                                   .uniform = 1,
                                   .run_s = RUN_S,
                                   .tolerate_errors = 1,
                                   .retry_ms = 5,
                                   .trace = 1,
                                   .strict = 1};
        pids[i] = h_trainer_spawn(&first, &o);
    }
    sleep_ms(1500);
    double killed = h_now();
    ck_assert_int_eq(kill(first.sched_pid, SIGKILL), 0);
    h_wait(first.sched_pid, 5000);
    first.sched_pid = 0;
    for (int i = 0; i < 2; i++) {
        char who[16], joined[32];
        snprintf(who, sizeof(who), "node%d", i);
        snprintf(joined, sizeof(joined), "(node%d) joined", i);
        ck_assert(says(&standby, "sched", joined));
        ck_assert(says(&first, who, "following scheduler 127.0.0.1:"));
    }
    sleep_ms(1500);
    ck_assert_int_eq(h_sched_start(&first, sched_sets), 0);
    for (int i = 0; i < 2; i++) {
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        ck_assert(says(&first, who, "following it again"));
    }
    double returned = h_now();
    ck_assert(says(&standby, "sched", "(node0) lost"));
    ck_assert(says(&standby, "sched", "(node1) lost"));

    ck_assert_int_eq(h_wait_trainers(pids, names, TRAINERS, 30000), 0);
    /*
     * From just before the kill to the end: the longest a trainer went
     * without a result in a group of all four (both moves included).
     */
    double worst = 0;
    long steps = 0, errors = 0;
    for (int i = 0; i < TRAINERS; i++) {
        long s, e;
        double secs;
        ck_assert_int_eq(h_trainer_figures(&first, names[i], &s, &secs, &e), 0);
        steps += s;
        errors += e;
        struct h_trace *t;
        int n = h_trace_read(&first, names[i], &t);
        ck_assert_int_gt(n, 0);
        double last;
        double gap = longest_gap(t, n, killed - 0.2, &last);
        ck_assert_msg(last > returned, "%s: no group of %d after the return",
                      names[i], TRAINERS);
        if (gap > worst)
            worst = gap;
        free(t);
    }
    printf("failover: the longest a trainer went without a result in a "
           "group of %d, across the kill and the return: %.3f s (%ld "
           "checked results, %ld failed reduces)\n",
           TRAINERS, worst, steps, errors);
    /* A restart-only job stops about 3 s; the target is 0.5 s. */
    ck_assert_msg(worst < 1.5, "%.3f s without a result", worst);
    ck_assert_int_eq(h_cluster_stop(&first), 0);
    ck_assert_int_eq(h_cluster_stop(&standby), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_failover");
    TCase *tc = tcase_create("failover");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_failover_to_standby_and_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
