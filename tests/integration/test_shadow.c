/* SPDX-License-Identifier: MIT */
/*
 * The default mode's shadow in real daemons (daemon/engine/engine_int.h,
 * struct group): with one trainer per node, results go into its tensors as
 * they come over TCP (chunks read straight into them), its inputs kept
 * aside. A peer killed in the middle of a transfer fails the group, and
 * the trainer's tensors must hold its input again when it is answered:
 * the strict trainers check exactly that after every failed reduce, and
 * node 0's metrics say its inputs were put back. Node 1 is stopped first
 * and killed only once node 0's group is seen waiting for it, so the kill
 * never falls between two groups.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

START_TEST(test_shadow_peer_killed_inputs_back)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce",
                                "scheduler.heartbeat_ms=100",
                                "scheduler.node_timeout_ms=1000", NULL};
    uint16_t mport = h_free_port();
    char mset[64];
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u", mport);
    const char *const node0_sets[] = {mset, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node0_sets), 0);
    c.nnodes = 2;
    ck_assert_int_eq(h_node_start(&c, 1, NULL), 0);
    char names[2][16] = {"k0", "k1"};
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        /*
         * 32 MiB in 3 tensors: a group lasts long enough that the kill
         * lands inside it, after node 0 has put final floats into k0's
         * tensors. Strict: after a failed reduce the tensors must hold
         * the input (checked in full), after a good one the mean.
         */
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = 8388608,
                                   .nparts = 3,
                                   .uniform = 1,
                                   .strict = 1,
                                   .run_s = 10.0,
                                   .timeout_ms = 10000,
                                   .tolerate_errors = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    sleep_ms(1000);
    /*
     * Node 1 is stopped early in a group; if node 0's part of it still
     * ended (node 1 had sent all it needed, or the stop came late on a
     * loaded machine), node 1 goes on and the next group is tried. Killed
     * while stopped, it fails a group in flight.
     */
    int caught = 0;
    /* Tries while the trainers still run (10 s from their start). */
    time_t until = time(NULL) + 7;
    for (int tries = 0; time(NULL) < until && !caught; tries++) {
        ck_assert_int_eq(h_node_wait_transfer(mport, "tcp", 5), 0);
        ck_assert_int_eq(kill(c.node_pid[1], SIGSTOP), 0);
        const char *ok = "preduce_node_reduces_total{status=\"ok\"} ";
        double ok0 = h_metric_at(mport, ok);
        sleep_ms(300);
        caught = h_metric_at(mport, "preduce_node_groups_running ") == 1 &&
                 h_metric_at(mport, ok) == ok0;
        fprintf(stderr, "try %d: %s\n", tries,
                caught ? "node 0 waits for node 1" : "missed, again");
        if (!caught)
            ck_assert_int_eq(kill(c.node_pid[1], SIGCONT), 0);
    }
    ck_assert(caught);
    kill(c.node_pid[1], SIGKILL);
    c.node_pid[1] = 0;
    h_wait(pids[1], 30000);
    int st = h_wait(pids[0], 30000);
    double shadow = h_metric_at(mport, "preduce_node_groups_shadow_total ");
    double restored = h_metric_at(mport, "preduce_node_groups_restored_total ");
    fprintf(stderr, "node0: %.0f groups in the shadow, %.0f restored\n", shadow,
            restored);
    if (st != 0)
        h_log_dump(&c, "node0");
    long failed = 0;
    const char *const survivors[] = {names[0]};
    ck_assert_int_eq(h_survivors(&c, survivors, 1, &failed), 0);
    ck_assert_int_eq(st, 0);
    ck_assert_int_gt(failed, 0);
    ck_assert(shadow >= 1);
    ck_assert(restored >= 1);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("shadow");
    TCase *tc = tcase_create("shadow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shadow_peer_killed_inputs_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
