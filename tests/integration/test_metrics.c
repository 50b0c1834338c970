/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoints of real daemons and preducectl status: a scheduler
 * and node0 with [metrics] listen set, node1 without, trainers on both
 * nodes; /metrics is fetched with a plain socket while the trainers run,
 * then preducectl reads both daemons.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs a shell command; its exit status, and its output in out. */
static int run(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return -errno;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *build_dir(void)
{
    const char *b = getenv("PREDUCE_BUILD");
    return b ? b : "build";
}

START_TEST(test_metrics_cluster_and_preducectl)
{
    uint16_t sport = h_free_port(), nport = h_free_port();
    char sset[64], nset[64];
    snprintf(sset, sizeof(sset), "metrics.listen=127.0.0.1:%u", sport);
    snprintf(nset, sizeof(nset), "metrics.listen=127.0.0.1:%u", nport);
    const char *const sched_sets[] = {"scheduler.policy=allreduce", sset, NULL};
    const char *const node0_sets[] = {nset, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, sched_sets, node0_sets), 0);
    c.nnodes = 2;
    ck_assert_int_eq(h_node_start(&c, 1, NULL), 0);
    sleep_ms(200);

    /* w2 sleeps 100 ms a step, the others 5: w2 is the straggler. */
    static const char *const names[] = {"w0", "w1", "w2"};
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i == 1,
                                   .n = 1000,
                                   .nparts = 1,
                                   .uniform = 1,
                                   .slow_ms = i == 2 ? 100 : 5,
                                   .run_s = 4.0};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    sleep_ms(2000);

    char *node = h_metrics_fetch(nport), *sched = h_metrics_fetch(sport);
    ck_assert_ptr_nonnull(node);
    ck_assert_ptr_nonnull(sched);
    ck_assert(h_metric(node, "preduce_node_reduces_total{status=\"ok\"} ") > 0);
    ck_assert(
        h_metric(node, "preduce_node_reduces_total{status=\"failed\"} ") == 0);
    ck_assert(h_metric(node, "preduce_node_trainers ") == 2);
    ck_assert(h_metric(node, "preduce_node_bytes_total{transport=\"tcp\","
                             "direction=\"sent\"} ") > 0);
    ck_assert(h_metric(node, "preduce_node_reduce_seconds_count ") > 0);
    ck_assert_ptr_nonnull(strstr(node, "preduce_worker_version{worker=\"w0\""));
    ck_assert_ptr_nonnull(strstr(node, "preduce_worker_version{worker=\"w2\""));
    ck_assert(h_metric(sched, "preduce_sched_groups_total ") > 0);
    ck_assert(h_metric(sched, "preduce_sched_workers_live ") == 3);
    ck_assert(h_metric(sched, "preduce_sched_nodes ") == 2);
    ck_assert(h_metric(sched, "preduce_sched_group_size_bucket{le=\"3\"} ") >
              0);
    ck_assert(h_metric(sched, "preduce_worker_straggler{worker=\"w2\"") == 1);
    ck_assert(h_metric(sched, "preduce_worker_straggler{worker=\"w0\"") == 0);

    char cmd[512];
    static char out[65536];
    snprintf(cmd, sizeof(cmd),
             "%s/preducectl status --metrics 127.0.0.1:%u "
             "--metrics 127.0.0.1:%u 2>&1",
             build_dir(), sport, nport);
    int st = run(cmd, out, sizeof(out));
    fprintf(stderr, "%s", out);
    ck_assert_int_eq(st, 0);
    ck_assert_ptr_nonnull(strstr(out, "scheduler (job "));
    ck_assert_ptr_nonnull(strstr(out, "node node0 "));
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_nonnull(strstr(out, names[i]));
    ck_assert_ptr_nonnull(strstr(out, "straggler"));
    /* The worker rows: each worker's own gauges, w2 marked. */
    for (int i = 0; i < 3; i++) {
        char key[16], row[256];
        snprintf(key, sizeof(key), "\n  %s ", names[i]);
        const char *at = strstr(out, key);
        ck_assert_msg(at != NULL, "no row for %s", names[i]);
        size_t len = strcspn(at + 1, "\n");
        snprintf(row, sizeof(row), "%.*s", (int)len, at + 1);
        ck_assert_msg(!strstr(row, "nan"), "row %s", row);
        ck_assert_msg((strstr(row, "  straggler") != NULL) == (i == 2),
                      "row %s", row);
    }

    int failed = 0;
    for (int i = 0; i < 3; i++)
        failed |= h_wait(pids[i], 30000) != 0;
    if (failed) {
        h_log_dump(&c, "sched");
        h_log_dump(&c, "node0");
    }
    free(node);
    free(sched);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(failed, 0);
}
END_TEST

/*
 * Link rates: with tensors of 1 MiB each ring chunk (512 KiB) is timed as
 * it arrives; node0 shows the rate from node1, and the scheduler the one
 * node0 reported with its heartbeat (what ring order uses).
 */
START_TEST(test_metrics_link_rates)
{
    uint16_t sport = h_free_port(), nport = h_free_port();
    char sset[64], nset[64];
    snprintf(sset, sizeof(sset), "metrics.listen=127.0.0.1:%u", sport);
    snprintf(nset, sizeof(nset), "metrics.listen=127.0.0.1:%u", nport);
    const char *const sched_sets[] = {
        "scheduler.policy=allreduce", "scheduler.heartbeat_ms=100",
        "scheduler.node_timeout_ms=2000", sset, NULL};
    const char *const node0_sets[] = {nset, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, sched_sets, node0_sets), 0);
    c.nnodes = 2;
    ck_assert_int_eq(h_node_start(&c, 1, NULL), 0);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        struct h_trainer_opts o = {.name = i ? "w1" : "w0",
                                   .node = i,
                                   .n = 256 * 1024,
                                   .nparts = 1,
                                   .uniform = 1,
                                   .steps = 20};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int failed = 0;
    for (int i = 0; i < 2; i++)
        failed |= h_wait(pids[i], 30000) != 0;
    ck_assert_int_eq(failed, 0);
    /* Heartbeats every 100 ms carry node0's rates to the scheduler. */
    char *node = NULL, *sched = NULL;
    double rn = NAN, rs = NAN;
    for (int i = 0; i < 100 && !(rn > 0 && rs > 0); i++) {
        free(node);
        free(sched);
        sleep_ms(100);
        node = h_metrics_fetch(nport);
        sched = h_metrics_fetch(sport);
        ck_assert_ptr_nonnull(node);
        ck_assert_ptr_nonnull(sched);
        rn = h_metric(node, "preduce_node_link_rate_bytes_per_second{");
        rs = h_metric(sched, "preduce_sched_link_rate_bytes_per_second{");
    }
    fprintf(stderr,
            "link rate node1 -> node0: %.0f B/s at node0, %.0f B/s "
            "at the scheduler\n",
            rn, rs);
    /* Loopback: far above 1 MB/s; the scheduler has node0's figure. */
    ck_assert(rn > 1e6);
    ck_assert(rs > 1e6);
    ck_assert(h_metric(sched, "preduce_sched_rings_reordered_total ") == 0);
    free(node);
    free(sched);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_metrics_ctl_unreachable)
{
    uint16_t port = h_free_port();
    char cmd[512], want[64];
    static char out[4096];
    snprintf(cmd, sizeof(cmd),
             "%s/preducectl status --metrics 127.0.0.1:%u 2>&1", build_dir(),
             port);
    ck_assert_int_eq(run(cmd, out, sizeof(out)), 1);
    snprintf(want, sizeof(want), "127.0.0.1:%u: cannot connect", port);
    ck_assert_msg(strstr(out, want) != NULL, "output: %s", out);

    /* A listener that never answers: the timeout, not a hang. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(cmd, sizeof(cmd),
             "%s/preducectl status --timeout-ms 300 --metrics 127.0.0.1:%u "
             "2>&1",
             build_dir(), ntohs(sa.sin_port));
    ck_assert_int_eq(run(cmd, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "no answer in time") != NULL, "output: %s", out);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_metrics_cluster_and_preducectl);
    tcase_add_test(tc, test_metrics_link_rates);
    tcase_add_test(tc, test_metrics_ctl_unreachable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
