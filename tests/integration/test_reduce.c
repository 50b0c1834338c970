/* SPDX-License-Identifier: MIT */
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

#include "daemon/engine/wire.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static const char *const allreduce_sets[] = {"scheduler.policy=allreduce",
                                             NULL};

/*
 * 3 daemons x `per_node` trainers, allreduce, `steps` steps of size n in
 * nparts parts; in_place: the trainers call preduce_set_in_place().
 */
static const char *const chunk256_sets[] = {"transport.chunk_kb=256", NULL};
/* Peer links of three TCP connections each (transport.streams). */
static const char *const streams_sets[] = {"transport.chunk_kb=256",
                                           "transport.streams=3", NULL};

/*
 * The trainers' wire encoding (NULL: the nodes' fp32) and the relative
 * error their results may have (harness.h); set by the wire test.
 */
static const char *wire;
static double wire_tol;

static void run_trainers_on(const char *const *sched_sets,
                            const char *const *node_sets, size_t n, int nparts,
                            int steps, int per_node, int in_place)
{
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 3, sched_sets, node_sets), 0);
    int nt = 3 * per_node;
    pid_t pids[6];
    char names[6][16];
    for (int i = 0; i < nt; i++) {
        snprintf(names[i], sizeof(names[i]), "w%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 3,
                                   .n = n,
                                   .nparts = nparts,
                                   .steps = steps,
                                   .uniform = 1,
                                   .in_place = in_place,
                                   .join_k = in_place ? 3 : 0,
                                   .wire = wire,
                                   .tol = wire_tol};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int failed = h_wait_trainers(pids, names, nt, 120000);
    for (int i = 0; i < nt && !failed; i++) {
        long s, e;
        double secs;
        ck_assert_int_eq(h_trainer_figures(&c, names[i], &s, &secs, &e), 0);
        ck_assert_int_eq(s, steps);
    }
    if (failed) {
        h_log_dump(&c, "sched");
        h_log_dump(&c, "node0");
    }
    ck_assert_int_eq(failed, 0);
    /* The links had the streams asked for (each node dials or accepts). */
    for (int i = 0; node_sets == streams_sets && i < 3; i++) {
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        ck_assert(h_log_contains(&c, who, "link up (tcp, 3 streams)"));
    }
    /*
     * The daemons' own count: with one trainer per node asking for it (and
     * groups of all three), every group was written in place; otherwise
     * none was.
     */
    for (int i = 0; i < 3; i++) {
        unsigned long long ok = 0, inp = 0;
        ck_assert_int_eq(h_node_stop(&c, i), 0);
        ck_assert_int_eq(h_node_groups(&c, i, &ok, &inp), 0);
        /*
         * After the trainers' warm-up (until all 3 had joined), every
         * group spans 3 daemons: at least `steps` written in place.
         */
        if (in_place)
            ck_assert_uint_ge(inp, (unsigned long long)steps);
        else
            ck_assert_uint_eq(inp, 0);
        /* Every group over the wire went in the trainers' encoding. */
        unsigned long long wg[3];
        enum pr_wire enc = PR_WIRE_FP32;
        ck_assert(!wire || pr_wire_parse(wire, &enc) == 0);
        ck_assert_int_eq(h_node_wire_groups(&c, i, wg), 0);
        /* Not every step's group: a trainer may reduce alone at first. */
        ck_assert_uint_gt(wg[enc], 0);
        ck_assert_uint_eq(wg[0] + wg[1] + wg[2], wg[enc]);
    }
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

static void run_trainers(const char *const *sched_sets, size_t n, int nparts,
                         int steps, int per_node, int in_place)
{
    run_trainers_on(sched_sets, chunk256_sets, n, nparts, steps, per_node,
                    in_place);
}

/* 3 daemons x 2 trainers, allreduce, 20 steps of size n in nparts parts. */
static void run_allreduce(size_t n, int nparts, int steps)
{
    run_trainers(allreduce_sets, n, nparts, steps, 2, 0);
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

/*
 * One trainer per daemon with preduce_set_in_place(): final chunks go
 * straight into its tensors and are forwarded from there (chunks of 256
 * KiB cut across the three tensors' boundaries); every step is checked.
 * Groups of exactly 3 (constant P = 3), so none is a trainer alone, which
 * has nothing to write in place (allreduce groups whoever has joined).
 */
static const char *const three_sets[] = {"scheduler.policy=constant",
                                         "scheduler.group_size=3", NULL};

START_TEST(test_reduce_in_place)
{
    run_trainers(three_sets, 1000003, 1, 20, 1, 1);
}
END_TEST

START_TEST(test_reduce_in_place_multi_tensor)
{
    run_trainers(three_sets, 300007, 3, 20, 1, 1);
}
END_TEST

/*
 * Peer links of three TCP connections each (transport.streams): chunks
 * spread over them arrive in any order across streams, and every result
 * is still exact, read whole or written in place.
 */
START_TEST(test_reduce_streams)
{
    run_trainers_on(allreduce_sets, streams_sets, 1000003, 1, 20, 2, 0);
}
END_TEST

START_TEST(test_reduce_streams_in_place)
{
    run_trainers_on(three_sets, streams_sets, 1000003, 1, 20, 1, 1);
}
END_TEST

/*
 * Trainers asking for bf16 or int8 (PREDUCE_WIRE): 3 daemons x 2
 * trainers, allreduce, in 3 parts, every result within what 3 hops of
 * the encoding lose of the reference, for inputs in [1, 2): bf16 2^-9 of
 * each partial sum a hop, int8 1/254 of its block's largest (at most
 * twice the float's own), with room.
 */
START_TEST(test_reduce_wire)
{
    wire = _i ? "int8" : "bf16";
    wire_tol = _i ? 0.03 : 0.01;
    run_trainers(allreduce_sets, 1000003, 3, 10, 2, 0);
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
    tcase_add_test(tc, test_reduce_in_place);
    tcase_add_test(tc, test_reduce_in_place_multi_tensor);
    tcase_add_test(tc, test_reduce_streams);
    tcase_add_test(tc, test_reduce_streams_in_place);
    tcase_add_loop_test(tc, test_reduce_wire, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
