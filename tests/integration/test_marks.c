/* SPDX-License-Identifier: MIT */
/*
 * Which connections the daemons mark low-delay (IPTOS_LOWDELAY,
 * pr_conn_lowdelay): a scheduler and two node daemons on loopback, a
 * trainer on each node reducing small tensors in groups of two, so that
 * the peer link is up with its express connection. Read from the kernel
 * (ss --tos), every end of every connection to the scheduler is marked;
 * of the peer link's connections, the express one is at both ends and
 * the bulk one at neither: bulk chunks keep the default, so a link's
 * queue can send the messages a reduce waits on before them.
 */
#include <check.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "tests/check_run.h"
#include "tests/integration/harness.h"

/* What ss says of the connection ends that have `port` at one side. */
struct ends {
    int marked, plain;
};

/*
 * Counts the established TCP ends between loopback addresses with `port`
 * as their own or their peer's, marked (IPTOS_LOWDELAY in the TOS byte
 * or the IPv6 traffic class, whatever ECN adds to the low bits) or not,
 * from ss.
 */
static struct ends ends_of(unsigned port)
{
    struct ends e = {0, 0};
    char cmd[160];
    snprintf(cmd, sizeof(cmd),
             "ss -Htn --tos state established '( sport = :%u or dport = "
             ":%u )' 2>&1",
             port, port);
    FILE *f = popen(cmd, "r");
    ck_assert_msg(f != NULL, "cannot run ss");
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof(line), f)) {
        char local[128], peer[128];
        lines++;
        if (sscanf(line, "%*s %*s %127s %127s", local, peer) != 2 ||
            strncmp(local, "127.0.0.1:", 10) != 0 ||
            strncmp(peer, "127.0.0.1:", 10) != 0)
            continue;
        const char *t = strstr(line, "tos:");
        ck_assert_msg(t != NULL, "ss shows no TOS: %s", line);
        unsigned long v = strtoul(t + 4, NULL, 0);
        const char *tc = strstr(line, "tclass:");
        if (tc)
            v |= strtoul(tc + 7, NULL, 0);
        if ((v & 0xfc) == IPTOS_LOWDELAY)
            e.marked++;
        else
            e.plain++;
    }
    int st = pclose(f);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 127,
                  "ss (iproute2) is not installed");
    ck_assert_msg(st == 0, "ss failed (status %d, %d lines)", st, lines);
    return e;
}

/*
 * The cases: with an express connection (the link's two connections, the
 * bulk one and the express one, each seen at both ends: the express one
 * marked) and without (the one connection plain).
 */
static const struct {
    const char *set;  /* the nodes' transport.express_kb */
    const char *link; /* node0's log when the link is up */
    int marked, plain;
} cases[] = {
    {"transport.express_kb=256", "and an express connection", 2, 2},
    {"transport.express_kb=0", "link up (tcp)", 0, 2},
};

START_TEST(test_marks_scheduler_and_express)
{
    struct h_cluster c;
    const char *node_sets[] = {cases[_i].set, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, NULL, node_sets), 0);
    pid_t pids[2];
    char names[2][16];
    for (int i = 0; i < 2; i++) {
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = 1000,
                                   .steps = 20,
                                   .uniform = 1,
                                   .join_k = 2};
        pids[i] = h_trainer_spawn(&c, &o);
        ck_assert_int_gt(pids[i], 0);
    }
    ck_assert_int_eq(h_wait_trainers(pids, names, 2, 30000), 0);
    ck_assert(h_log_wait(&c, "node0", cases[_i].link, 5000));

    /* Each node's connection to the scheduler, at both ends. */
    struct ends s = ends_of(c.sched_port);
    ck_assert_int_eq(s.marked, 4);
    ck_assert_int_eq(s.plain, 0);
    /* The link: one node dialled the other's data port. */
    struct ends a = ends_of(c.node_port[0]), b = ends_of(c.node_port[1]);
    ck_assert_int_eq(a.marked + b.marked, cases[_i].marked);
    ck_assert_int_eq(a.plain + b.plain, cases[_i].plain);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("marks");
    TCase *tc = tcase_create("marks");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_marks_scheduler_and_express, 0,
                        sizeof(cases) / sizeof(cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The counts are of one TCP link of one bulk and one express stream. */
    unsetenv("PREDUCE_TEST_NODE_SETS");
    return check_run(suite());
}
