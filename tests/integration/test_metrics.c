/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoints of real daemons and preducectl: a scheduler and
 * node0 with [metrics] listen set, node1 without, trainers on both nodes
 * (one with a quote and a backslash in its name); /metrics is fetched
 * with a plain socket while the trainers run, then preducectl reads both
 * daemons: status and workers, as tables and as JSON (checked by a strict
 * parser, tests/integration/json_check.c). Then what preducectl says of
 * daemons it cannot read, and of its own usage.
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

#include "preduce.h"
#include "tests/integration/harness.h"
#include "tests/integration/json_check.h"
#include "tests/check_run.h"

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

/* Runs preducectl with args (a shell command line's tail): run()'s. */
static int ctl(const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/preducectl %s", build_dir(), args);
    return run(cmd, out, cap);
}

/* The line of text that starts with prefix (after a newline), or "". */
static const char *line_of(const char *text, const char *prefix, char *line,
                           size_t cap)
{
    char key[128];
    snprintf(key, sizeof(key), "\n%s", prefix);
    const char *at = strstr(text, key);
    if (!at)
        return strcpy(line, "");
    snprintf(line, cap, "%.*s", (int)strcspn(at + 1, "\n"), at + 1);
    return line;
}

/*
 * The JSON object in text that starts with `start` ('{' and a first
 * member): up to its closing brace, for objects without nested ones, or
 * "".
 */
static const char *object_of(const char *text, const char *start, char *obj,
                             size_t cap)
{
    const char *at = strstr(text, start);
    if (!at)
        return strcpy(obj, "");
    snprintf(obj, cap, "%.*s", (int)(strchr(at, '}') - at + 1), at);
    return obj;
}

/* Fails the test, showing where, unless text is one valid JSON value. */
static void assert_json(const char *text)
{
    const char *where = NULL;
    ck_assert_msg(h_json_check(text, &where) == 0, "not JSON at byte %td: %s",
                  where - text, text);
}

/* The names of the cluster test's trainers, and the JSON of each. */
static const char *const names[] = {"w0", "w\"1\\", "w2"};
static const char *const json_names[] = {"w0", "w\\\"1\\\\", "w2"};

/*
 * A Prometheus histogram in text: its TYPE line, then its buckets in
 * order of their bounds, cumulative, the last +Inf and equal to _count.
 * The count.
 */
static double check_histogram(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "\n# TYPE %s histogram\n", name);
    ck_assert_msg(strstr(text, key) != NULL, "no %s", key + 1);
    snprintf(key, sizeof(key), "\n%s_bucket{le=\"", name);
    double prev_le = -1, prev = 0, inf = NAN;
    int n = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *le = p + strlen(key);
        double bound = strncmp(le, "+Inf\"", 5) ? strtod(le, NULL) : INFINITY;
        double count = strtod(strchr(le, ' ') + 1, NULL);
        ck_assert_msg(bound > prev_le && isnan(inf), "%s: bucket %d, le %g",
                      name, n, bound);
        ck_assert_msg(count >= prev, "%s: le %g: %g after %g", name, bound,
                      count, prev);
        if (isinf(bound))
            inf = count;
        prev_le = bound;
        prev = count;
        n++;
    }
    snprintf(key, sizeof(key), "%s_count ", name);
    double count = h_metric(text, key);
    ck_assert_msg(n > 1 && inf == count, "%s: %d buckets, +Inf %g, count %g",
                  name, n, inf, count);
    return count;
}

/* `workers`: the scheduler's rows with their pace; node0's trainers. */
static void check_workers(uint16_t sport, uint16_t nport)
{
    char args[256], line[256];
    static char out[65536];
    snprintf(args, sizeof(args), "workers --metrics 127.0.0.1:%u 2>&1", sport);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 0);
    fprintf(stderr, "%s", out);
    ck_assert_msg(strstr(out, "scheduler (job ") == out, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "\n  job      worker  "));
    ck_assert_ptr_null(strstr(out, "groups")); /* status's, not here */
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof(key), "  default  %s ", names[i]);
        line_of(out, key, line, sizeof(line));
        ck_assert_msg(line[0] && !strstr(line, " - "), "row of %s: %s",
                      names[i], line);
        ck_assert_msg((strstr(line, "  straggler") != NULL) == (i == 2),
                      "row %s", line);
    }
    /* node0 has w0 and w2 (trainer i runs on node i == 1). */
    snprintf(args, sizeof(args), "workers --metrics 127.0.0.1:%u 2>&1", nport);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 0);
    fprintf(stderr, "%s", out);
    ck_assert_msg(strstr(out, "node node0 (job ") == out, "%s", out);
    /* The job column as wide as its longest name, at least "job". */
    ck_assert_msg(strstr(out, "\n  trainer  job ") &&
                      strstr(out, " rank   version\n"),
                  "%s", out);
    ck_assert(line_of(out, "  w0 ", line, sizeof(line))[0]);
    ck_assert(line_of(out, "  w2 ", line, sizeof(line))[0]);
    ck_assert_ptr_null(strstr(out, "w\"1"));
}

/*
 * --json for both commands: one valid document, an element per daemon in
 * order (an unreachable third one too), the tables' fields with numbers
 * as numbers and names escaped.
 */
static void check_json(uint16_t sport, uint16_t nport)
{
    char args[256], obj[1024], want[128];
    static char out[65536];
    uint16_t none = h_free_port();
    snprintf(args, sizeof(args),
             "status --json --metrics 127.0.0.1:%u --metrics 127.0.0.1:%u "
             "--metrics 127.0.0.1:%u 2>/dev/null",
             sport, nport, none);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
    fprintf(stderr, "%s", out);
    assert_json(out);
    snprintf(want, sizeof(want), "[{\"address\":\"127.0.0.1:%u\",", sport);
    ck_assert_msg(strstr(out, want) == out, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, ",\"role\":\"scheduler\","));
    ck_assert_ptr_nonnull(strstr(out, ",\"workers_live\":3,"));
    ck_assert_ptr_nonnull(strstr(out, ",\"nodes\":2,"));
    ck_assert_ptr_nonnull(strstr(out, ",\"stragglers\":[\"w2\"],"));
    ck_assert_ptr_nonnull(strstr(out, "{\"from\":3,\"to\":3,\"groups\":"));
    for (int i = 0; i < 3; i++) {
        snprintf(
            want, sizeof(want),
            "{\"job\":\"default\",\"name\":\"%s\",\"rank\":", json_names[i]);
        object_of(out, want, obj, sizeof(obj));
        ck_assert_msg(obj[0] && strstr(obj, ",\"steps\":") &&
                          !strstr(obj, "null"),
                      "worker %s: %s", names[i], obj);
        ck_assert_msg(strstr(obj, i == 2 ? "\"straggler\":true}"
                                         : "\"straggler\":false}"),
                      "%s", obj);
    }
    snprintf(want, sizeof(want), "},{\"address\":\"127.0.0.1:%u\",", nport);
    ck_assert_ptr_nonnull(strstr(out, want));
    ck_assert_ptr_nonnull(
        strstr(out, ",\"role\":\"node\",\"name\":\"node0\","));
    ck_assert_ptr_nonnull(strstr(out, ",\"trainers\":2,"));
    const char *mean = strstr(out, ",\"reduce_mean_ms\":");
    ck_assert_ptr_nonnull(mean);
    ck_assert_msg(strtod(mean + 18, NULL) > 0, "%.40s", mean);
    ck_assert_ptr_nonnull(strstr(out, ",\"scheduler_up\":true,"));
    ck_assert_ptr_nonnull(strstr(out, ",\"bytes\":{\"tcp\":{\"sent\":"));
    snprintf(want, sizeof(want), "},{\"address\":\"127.0.0.1:%u\",\"error\":\"",
             none);
    ck_assert_ptr_nonnull(strstr(out, want));
    ck_assert_msg(strstr(out, "\"}]\n") == out + strlen(out) - 4, "%s", out);

    snprintf(args, sizeof(args),
             "workers --json --metrics 127.0.0.1:%u --metrics 127.0.0.1:%u",
             sport, nport);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 0);
    fprintf(stderr, "%s", out);
    assert_json(out);
    ck_assert_ptr_null(strstr(out, "\"groups_formed\""));
    ck_assert_ptr_null(strstr(out, "\"error\""));
    object_of(out, "{\"job\":\"default\",\"name\":\"w2\",", obj, sizeof(obj));
    ck_assert_msg(strstr(obj, ",\"straggler\":true}"), "%s", obj);
    /* On the node: job, name, rank and version alone. */
    snprintf(want, sizeof(want), "{\"address\":\"127.0.0.1:%u\",", nport);
    const char *at = strstr(out, want);
    ck_assert_ptr_nonnull(at);
    object_of(at, "{\"job\":\"default\",\"name\":\"w0\",", obj, sizeof(obj));
    ck_assert_msg(
        strstr(obj, "{\"job\":\"default\",\"name\":\"w0\",\"rank\":") == obj &&
            strstr(obj, ",\"version\":") && !strstr(obj, "stale"),
        "%s", obj);

    /* Output that cannot be written is an error, said on stderr. */
    snprintf(args, sizeof(args),
             "status --metrics 127.0.0.1:%u 2>&1 >/dev/full", sport);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
    ck_assert_msg(strstr(out, "preducectl: writing the output: No space "
                              "left on device\n"),
                  "%s", out);
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
    /* The latency histogram, 100 us to 60 s: these reduces are in it. */
    ck_assert(check_histogram(node, "preduce_node_reduce_seconds") > 0);
    ck_assert(
        h_metric(node, "preduce_node_reduce_seconds_bucket{le=\"60\"} ") ==
        h_metric(node, "preduce_node_reduce_seconds_count "));
    ck_assert(h_metric(node, "preduce_node_reduce_seconds_sum ") > 0);
    check_histogram(sched, "preduce_sched_group_size");
    ck_assert_ptr_nonnull(
        strstr(node, "preduce_worker_version{job=\"default\",worker=\"w0\""));
    ck_assert_ptr_nonnull(
        strstr(sched, "preduce_worker_version{job=\"default\",worker=\"w\\\"1"
                      "\\\\\""));
    ck_assert_ptr_nonnull(
        strstr(node, "preduce_worker_version{job=\"default\",worker=\"w2\""));
    ck_assert(h_metric(sched, "preduce_sched_groups_total ") > 0);
    ck_assert(h_metric(sched, "preduce_sched_workers_live ") == 3);
    ck_assert(h_metric(sched, "preduce_sched_nodes ") == 2);
    ck_assert(h_metric(sched, "preduce_sched_group_size_bucket{le=\"3\"} ") >
              0);
    ck_assert(h_metric(sched, "preduce_worker_straggler{job=\"default\","
                              "worker=\"w2\"") == 1);
    ck_assert(
        h_metric(sched,
                 "preduce_worker_straggler{job=\"default\",worker=\"w0\"") ==
        0);
    /* Both roles: the release, as preduce.h has it. */
    char build_info[64];
    snprintf(build_info, sizeof(build_info),
             "\npreduce_build_info{version=\"%d.%d\"} 1\n",
             PREDUCE_VERSION_MAJOR, PREDUCE_VERSION_MINOR);
    ck_assert_ptr_nonnull(strstr(node, build_info));
    ck_assert_ptr_nonnull(strstr(sched, build_info));

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
    /* The mean reduce time, from the histogram's _sum and _count. */
    ck_assert_ptr_nonnull(strstr(out, " ok, 0 failed, mean "));
    /* The worker rows: each worker's own gauges, w2 marked. */
    for (int i = 0; i < 3; i++) {
        char key[16], row[256];
        snprintf(key, sizeof(key), "\n  default  %s ", names[i]);
        const char *at = strstr(out, key);
        ck_assert_msg(at != NULL, "no row for %s", names[i]);
        size_t len = strcspn(at + 1, "\n");
        snprintf(row, sizeof(row), "%.*s", (int)len, at + 1);
        ck_assert_msg(!strstr(row, "nan"), "row %s", row);
        ck_assert_msg((strstr(row, "  straggler") != NULL) == (i == 2),
                      "row %s", row);
    }

    check_workers(sport, nport);
    check_json(sport, nport);

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

/* Is something listening on 127.0.0.1:port? */
static int listening(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    return rc == 0;
}

#define REFUSED                                                                \
    "connection refused: is metrics.listen set in that daemon's "              \
    "preduced.conf? (metrics are off by default"

/*
 * Nothing listening: the message names the likely cause and its fix, in
 * the table's stderr and the JSON's element alike, and that the address
 * was the default when no --metrics was given; exit status 1. A bad
 * address; a listener that never answers: the timeout, not a hang.
 */
START_TEST(test_metrics_ctl_unreachable)
{
    uint16_t port = h_free_port();
    char args[256], want[512];
    static char out[4096];
    snprintf(args, sizeof(args), "status --metrics 127.0.0.1:%u 2>&1", port);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want), "preducectl: 127.0.0.1:%u: " REFUSED ")\n",
             port);
    ck_assert_msg(!strcmp(out, want), "output: %s", out);
    snprintf(args, sizeof(args),
             "workers --json --metrics 127.0.0.1:%u 2>/dev/null", port);
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want),
             "[{\"address\":\"127.0.0.1:%u\",\"error\":\"" REFUSED ")\"}]\n",
             port);
    ck_assert_msg(!strcmp(out, want), "output: %s", out);
    if (listening(9464)) {
        fprintf(stderr, "127.0.0.1:9464 is in use here: preducectl's "
                        "default address not tried\n");
    } else {
        ck_assert_int_eq(ctl("status 2>&1", out, sizeof(out)), 1);
        ck_assert_str_eq(out, "preducectl: 127.0.0.1:9464: " REFUSED
                              "; without --metrics preducectl reads "
                              "127.0.0.1:9464)\n");
    }

    ck_assert_int_eq(ctl("status --metrics 127.0.0.1 2>&1", out, sizeof(out)),
                     1);
    ck_assert_str_eq(out, "preducectl: 127.0.0.1: bad address (HOST:PORT, "
                          "HOST numeric or localhost)\n");

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(args, sizeof(args),
             "status --timeout-ms 300 --metrics 127.0.0.1:%u 2>&1",
             ntohs(sa.sin_port));
    ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
    snprintf(want, sizeof(want),
             "preducectl: 127.0.0.1:%u: reading the answer: no answer in "
             "time\n",
             ntohs(sa.sin_port));
    ck_assert_msg(!strcmp(out, want), "output: %s", out);
    close(fd);
}
END_TEST

/*
 * A server on 127.0.0.1 (its port in *port) that answers one connection
 * with `answer` and `pad` bytes of 'x' once the request's blank line
 * came, in a child process (reap it with h_wait: 0 when all was sent).
 */
static pid_t canned(uint16_t *port, const char *answer, size_t pad)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(10);
        int c = accept(fd, NULL, NULL);
        char req[4096];
        size_t n = 0;
        ssize_t r;
        while (n < sizeof(req) - 1 &&
               (r = recv(c, req + n, sizeof(req) - 1 - n, 0)) > 0) {
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        ssize_t w = send(c, answer, strlen(answer), MSG_NOSIGNAL);
        int ok = w == (ssize_t)strlen(answer);
        static char x[65536];
        memset(x, 'x', sizeof(x));
        for (size_t sent = 0; ok && sent < pad; sent += sizeof(x))
            ok = send(c, x, sizeof(x), MSG_NOSIGNAL) == (ssize_t)sizeof(x);
        close(c);
        _exit(ok ? 0 : 1);
    }
    close(fd);
    return pid;
}

/*
 * Answers preducectl cannot use, each named, in the table's stderr and
 * the JSON's element; exit status 1. (preducectl stops reading the one
 * over 16 MiB, so its server may not send it all.)
 */
static const struct {
    const char *answer;
    size_t pad;
    const char *why;
} bad_answers[] = {
    {"HTTP/1.0 200 OK\r\n\r\nup 1\n", 0,
     "no preduce_info metric: not a preduced metrics endpoint"},
    {"HTTP/1.0 404 Not Found\r\n\r\n", 0, "HTTP 404: no /metrics there"},
    {"HTTP/1.0 500 Oops\r\n\r\n", 0, "the daemon answered with HTTP 500"},
    {"SSH-2.0-OpenSSH_9.2\r\n", 0, "not an HTTP answer with metrics"},
    {"HTTP/1.0 200 OK\r\n\r\n", 17u << 20, "reading the answer: over 16 MiB"},
};

START_TEST(test_metrics_ctl_bad_answers)
{
    char args[256], want[256];
    static char out[4096];
    uint16_t port;
    for (size_t i = 0; i < sizeof(bad_answers) / sizeof(bad_answers[0]); i++) {
        for (int json = 0; json < 2; json++) {
            pid_t pid =
                canned(&port, bad_answers[i].answer, bad_answers[i].pad);
            snprintf(args, sizeof(args),
                     "workers%s --metrics 127.0.0.1:%u 2>&1",
                     json ? " --json" : "", port);
            ck_assert_int_eq(ctl(args, out, sizeof(out)), 1);
            int st = h_wait(pid, 5000);
            ck_assert_msg(st == 0 || bad_answers[i].pad, "server: %d", st);
            snprintf(want, sizeof(want), "preducectl: 127.0.0.1:%u: %s\n", port,
                     bad_answers[i].why);
            ck_assert_msg(strstr(out, want) != NULL, "output: %s", out);
            snprintf(want, sizeof(want),
                     "[{\"address\":\"127.0.0.1:%u\",\"error\":\"%s\"}]\n",
                     port, bad_answers[i].why);
            ck_assert_msg((strstr(out, want) != NULL) == json, "output: %s",
                          out);
        }
    }
}
END_TEST

/* Usage errors: exit status 2 and the usage; --help: 0 on stdout. */
START_TEST(test_metrics_ctl_usage)
{
    static const char *const bad[] = {
        "",
        "stats",
        "workers --bogus",
        "workers a b",
        "jobs extra",
        "status --json=1",
        "workers --timeout-ms 0",
    };
    static char out[4096];
    char args[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(args, sizeof(args), "%s 2>&1 >/dev/null", bad[i]);
        ck_assert_msg(ctl(args, out, sizeof(out)) == 2, "%s: %s", bad[i], out);
        ck_assert_msg(strstr(out, "preducectl: ") == out, "%s: %s", bad[i],
                      out);
    }
    ck_assert_int_eq(ctl("--help 2>/dev/null", out, sizeof(out)), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: preducectl status|jobs|workers"));
    ck_assert_ptr_nonnull(strstr(out, "--json"));
}
END_TEST

/* The JSON checker the tests above rely on refuses what is not JSON. */
START_TEST(test_metrics_json_check)
{
    static const char *const good[] = {
        "[]\n", "{}", " [1,-2.5e+3,0,true,false,null,\"\\u00e9\\n\xc3\xa9\"] ",
        "[{\"a\":{\"b\":[]}}]"};
    static const char *const bad[] = {
        "",         "[1,]",    "{\"a\" 1}", "[01]",  "[1.]",  "\"\x01\"",
        "\"\xff\"", "\"\\x\"", "[] []",     "{1:2}", "[nul]", "[\"a]"};
    const char *where;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(h_json_check(good[i], &where) == 0, "%s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(h_json_check(bad[i], &where) == -1, "%s", bad[i]);
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
    tcase_add_test(tc, test_metrics_ctl_bad_answers);
    tcase_add_test(tc, test_metrics_ctl_usage);
    tcase_add_test(tc, test_metrics_json_check);
    suite_add_tcase(s, tc);
    return check_run(s);
}
