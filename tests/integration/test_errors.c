/* SPDX-License-Identifier: MIT */
/*
 * What a failed reduce returns, and when (docs/operations.md, "Failure
 * behaviour"): only the codes of that table, each with
 * preduce_error_retryable()'s verdict, within the call's timeout plus
 * PREDUCE_REDUCE_SLACK_MS, and no later than node.reduce_timeout_ms (at start
 * and after a reload) allows. Real daemons on loopback.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "preduce.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to 5 s until process `pid` is stopped (state T in its stat). */
static int wait_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        /* "pid (comm) S ...": the state follows the last ')'. */
        const char *p = strrchr(buf, ')');
        if (p && p[1] == ' ' && p[2] == 'T')
            return 0;
        sleep_ms(10);
    }
    return -ETIMEDOUT;
}

/* Waits up to 5 s for the log of `who` to hold s. */
static int wait_log(const struct h_cluster *c, const char *who, const char *s)
{
    for (int i = 0; i < 500; i++) {
        if (h_log_contains(c, who, s))
            return 0;
        sleep_ms(10);
    }
    return -ETIMEDOUT;
}

/* A trainer in this process, connected to node 0, with one tensor. */
static preduce_client_t *connect_one(const struct h_cluster *c,
                                     const char *name, preduce_tensor_t **t)
{
    preduce_client_t *cl;
    ck_assert_int_eq(preduce_connect(c->sock[0], name, 5000, &cl), 0);
    ck_assert_int_eq(preduce_tensor_create(cl, 1024, 5000, t), 0);
    return cl;
}

/* One reduce of t with timeout_ms; its code, and its duration in *ms. */
static int timed_reduce(preduce_client_t *cl, preduce_tensor_t *t,
                        int timeout_ms, long *ms)
{
    long t0 = now_ms();
    int rc = preduce_reduce(cl, &t, 1, timeout_ms);
    *ms = now_ms() - t0;
    printf("reduce(%d ms): %d (%s) after %ld ms\n", timeout_ms, rc,
           preduce_strerror(rc), *ms);
    return rc;
}

/* A node's metric at 127.0.0.1:port (the line starting with key), or NAN. */
static double metric(uint16_t port, const char *key)
{
    char *m = h_metrics_fetch(port);
    if (!m)
        return NAN;
    double v = h_metric(m, key);
    free(m);
    return v;
}

static const char reduces_ok[] = "preduce_node_reduces_total{status=\"ok\"} ";
static const char running[] = "preduce_node_groups_running ";

/*
 * Stops node 2's daemon just after its trainer asked for a reduce (see
 * below) and waits until node 0 runs the group that follows, with node 2
 * in it. 0, or -EAGAIN when no group came (node 2 was stopped before its
 * READY left: then the others wait for it), node 2 running again.
 */
static int stop_with_group_waiting(struct h_cluster *c, uint16_t mport)
{
    double ok = metric(mport, reduces_ok);
    for (int i = 0; i < 5000 && !(metric(mport, reduces_ok) > ok); i++)
        sleep_ms(2);
    ck_assert_msg(metric(mport, reduces_ok) > ok, "no reduce ended on node 0");
    sleep_ms(50);
    ck_assert_int_eq(kill(c->node_pid[2], SIGSTOP), 0);
    ck_assert_int_eq(wait_stopped(c->node_pid[2]), 0);
    for (int i = 0; i < 100; i++) {
        if (metric(mport, running) == 1)
            return 0;
        sleep_ms(10);
    }
    ck_assert_int_eq(kill(c->node_pid[2], SIGCONT), 0);
    return -EAGAIN;
}

/*
 * A peer daemon dies while a group of 64 MiB tensors moves data, with
 * chunks queued for it at its left neighbour. Its trainer asks for every
 * reduce at once, the others 200 ms after theirs ended, so just after a
 * reduce ended on node 0 its daemon has sent READY and waits; stopped then
 * (SIGSTOP), it cannot read what the next group sends it, which queues (a
 * segment is 22 MB, more than the sockets hold); then it is killed, with
 * that group in flight and the scheduler held up. The survivors' failed
 * reduces carry only the documented codes for a lost peer or a group out
 * of time, which preduce_error_retryable() says to retry, and they go on
 * reducing: not the transport's own codes, such as -ECANCELED from the
 * sends still queued for the dead peer, or -EPIPE from a write to it.
 */
START_TEST(test_errors_peer_killed_mid_transfer)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    uint16_t mport = h_free_port();
    char mset[64];
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u", mport);
    const char *const node0_sets[] = {mset, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node0_sets), 0);
    c.nnodes = 3;
    for (int i = 1; i < 3; i++)
        ck_assert_int_eq(h_node_start(&c, i, NULL), 0);
    const char *names[] = {"p0", "p1", "p2"};
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = 16u << 20,
                                   .no_check = 1,
                                   .slow_ms = i < 2 ? 200 : 0,
                                   .run_s = 8.0,
                                   .timeout_ms = 10000,
                                   .tolerate_errors = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    sleep_ms(1000);
    int rc = -EAGAIN;
    for (int attempt = 0; attempt < 5 && rc == -EAGAIN; attempt++)
        rc = stop_with_group_waiting(&c, mport);
    ck_assert_int_eq(rc, 0);
    sleep_ms(300); /* the sockets to node 2 fill up; the rest queues */
    /*
     * The scheduler is held up across the kill, so that the survivors
     * learn of it from their own links first (as when the scheduler is
     * far or busy), not from its GroupAbort.
     */
    ck_assert_int_eq(kill(c.sched_pid, SIGSTOP), 0);
    ck_assert_int_eq(wait_stopped(c.sched_pid), 0);
    ck_assert_int_eq(kill(c.node_pid[2], SIGKILL), 0);
    c.node_pid[2] = 0;
    sleep_ms(300);
    ck_assert_int_eq(kill(c.sched_pid, SIGCONT), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(h_wait(pids[i], 30000), 0);
    h_wait(pids[2], 30000);
    long failed = 0;
    for (int i = 0; i < 2; i++) {
        int codes[16];
        long counts[16];
        int n = h_trainer_codes(&c, names[i], codes, counts, 16);
        ck_assert_int_ge(n, 0);
        ck_assert_int_le(n, 16);
        for (int k = 0; k < n; k++) {
            printf("%s: %ld reduces failed with %d (%s)\n", names[i], counts[k],
                   codes[k], preduce_strerror(codes[k]));
            ck_assert_msg(codes[k] == -ECONNRESET || codes[k] == -ETIMEDOUT,
                          "%s: a reduce failed with %d (%s), not a code "
                          "for a lost peer",
                          names[i], codes[k], preduce_strerror(codes[k]));
            ck_assert(preduce_error_retryable(codes[k]));
            failed += counts[k];
        }
    }
    ck_assert_int_gt(failed, 0);
    long again = 0;
    ck_assert_int_eq(h_survivors(&c, names, 2, &again), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * The node daemon is stopped (SIGSTOP): it cannot answer, so the library
 * gives up at the reduce's deadline plus PREDUCE_REDUCE_SLACK_MS with
 * -ETIMEDOUT, and breaks the connection (it cannot know what the daemon
 * does with the tensors when it runs again): later calls -ENOTCONN.
 */
START_TEST(test_errors_node_stopped)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, NULL), 0);
    preduce_tensor_t *t;
    preduce_client_t *cl = connect_one(&c, "stopped", &t);
    ck_assert_int_eq(kill(c.node_pid[0], SIGSTOP), 0);
    ck_assert_int_eq(wait_stopped(c.node_pid[0]), 0);
    long ms;
    int rc = timed_reduce(cl, t, 2000, &ms);
    ck_assert_int_eq(kill(c.node_pid[0], SIGCONT), 0);
    ck_assert_int_eq(rc, -ETIMEDOUT);
    ck_assert(preduce_error_retryable(rc));
    ck_assert_int_ge(ms, 2000);
    ck_assert_int_lt(ms, 2000 + PREDUCE_REDUCE_SLACK_MS + 500);
    ck_assert_int_eq(preduce_rank(cl), -ENOTCONN);
    ck_assert_int_eq(timed_reduce(cl, t, 2000, &ms), -ENOTCONN);
    ck_assert(!preduce_error_retryable(-ENOTCONN));
    preduce_close(cl);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static void write_conf(const struct h_cluster *c, unsigned reduce_timeout_ms)
{
    FILE *f = fopen(c->node_conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[node]\nreduce_timeout_ms = %u\n", reduce_timeout_ms);
    ck_assert_int_eq(fclose(f), 0);
}

/*
 * node.reduce_timeout_ms caps the timeout a trainer asks for: with 1000 in
 * the node's file and no group possible (the job wants two workers, one
 * came), a reduce asking for 30 s fails with -ETIMEDOUT after about 1 s,
 * answered by the daemon (the connection stays); one asking for less keeps
 * its own. Reloaded (SIGHUP) as 2000, the cap moves with it.
 */
START_TEST(test_errors_node_timeout_caps)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce",
                                "scheduler.min_workers=2", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 0, sets, NULL), 0);
    snprintf(c.node_conf, sizeof(c.node_conf), "%s/node.conf", c.dir);
    write_conf(&c, 1000);
    c.nnodes = 1;
    ck_assert_int_eq(h_node_start(&c, 0, NULL), 0);
    preduce_tensor_t *t;
    preduce_client_t *cl = connect_one(&c, "alone", &t);
    long ms;
    int rc = timed_reduce(cl, t, 30000, &ms);
    ck_assert_int_eq(rc, -ETIMEDOUT);
    ck_assert(preduce_error_retryable(rc));
    ck_assert_int_ge(ms, 950);
    ck_assert_int_lt(ms, 1000 + PREDUCE_REDUCE_SLACK_MS);
    ck_assert_int_ge(preduce_rank(cl), 0);
    ck_assert_int_eq(timed_reduce(cl, t, 500, &ms), -ETIMEDOUT);
    ck_assert_int_ge(ms, 450);
    ck_assert_int_lt(ms, 950);

    write_conf(&c, 2000);
    ck_assert_int_eq(kill(c.node_pid[0], SIGHUP), 0);
    ck_assert_int_eq(wait_log(&c, "node0", "reloaded"), 0);
    ck_assert_int_eq(timed_reduce(cl, t, 30000, &ms), -ETIMEDOUT);
    ck_assert_int_ge(ms, 1950);
    ck_assert_int_lt(ms, 2000 + PREDUCE_REDUCE_SLACK_MS);
    ck_assert_int_ge(preduce_rank(cl), 0);
    preduce_close(cl);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * The node has lost its scheduler: a reduce fails at once with
 * -ECONNRESET (retry later, as after a scheduler lost mid-reduce), not
 * with -ENOTCONN, which says this trainer's own connection is gone.
 */
START_TEST(test_errors_scheduler_down)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, NULL), 0);
    preduce_tensor_t *t;
    preduce_client_t *cl = connect_one(&c, "orphan", &t);
    ck_assert_int_eq(kill(c.sched_pid, SIGKILL), 0);
    h_wait(c.sched_pid, 5000);
    c.sched_pid = 0;
    ck_assert_int_eq(wait_log(&c, "node0", "scheduler link lost"), 0);
    long ms;
    int rc = timed_reduce(cl, t, 2000, &ms);
    ck_assert_int_eq(rc, -ECONNRESET);
    ck_assert(preduce_error_retryable(rc));
    ck_assert_int_lt(ms, 1000);
    ck_assert_int_ge(preduce_rank(cl), 0);
    preduce_close(cl);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_errors");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_errors_peer_killed_mid_transfer);
    tcase_add_test(tc, test_errors_node_stopped);
    tcase_add_test(tc, test_errors_node_timeout_caps);
    tcase_add_test(tc, test_errors_scheduler_down);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
