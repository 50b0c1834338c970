/* SPDX-License-Identifier: MIT */
/*
 * Connections that never finish their hello, on each listener of real
 * daemons (daemon/base/stranger.h): they are bounded per source and closed at
 * their deadline, and real clients get in past them at once.
 *
 *  1. Trainer socket: idle connections, more than max_clients and than the
 *     stranger cap, do not keep trainers out; over max_clients real
 *     trainers, the next one is refused with -EUSERS; the idle ones are
 *     closed at the hello deadline (node.connect_timeout_ms).
 *  2. Scheduler with a cluster key: 70 idle connections (over its cap of
 *     64) are held; a keyed node daemon still joins in about the time the
 *     one before it took, and trainers on it reduce.
 *  3. Metrics: 40 idle connections; GET /metrics is answered at once, and
 *     an idle connection is closed after the read deadline (1 s).
 *  4. Peer port: 200 idle connections; the daemon keeps at most its
 *     per-source share open, and a real peer's link still forms (trainers
 *     on both nodes reduce).
 *  5. Worker registrations: past scheduler.max_workers_per_node one node's
 *     next worker is refused with -EUSERS, logged and counted; one that
 *     leaves makes room.
 * Every connection here comes from 127.0.0.1, as the real clients' do: the
 * per-source cap is the one that binds.
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
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "preduce.h"
#include "tests/integration/harness.h"
#include "tests/integration/idle.h"
#include "tests/check_run.h"

/* The daemons' caps per source (daemon/sched/sched_int.h, xport_tcp_int.h...).
 */
#define PER_SOURCE         32
#define METRICS_PER_SOURCE 8
#define METRICS_READ_MS    1000
#define HELLO_TIMEOUT_MS   1500

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls a log for up to timeout_ms: 1 if it has s. */
static int wait_log(struct h_cluster *c, const char *who, const char *s,
                    int timeout_ms)
{
    for (double end = now_ms() + timeout_ms; now_ms() < end; sleep_ms(5))
        if (h_log_contains(c, who, s))
            return 1;
    return h_log_contains(c, who, s);
}

static pid_t trainer(struct h_cluster *c, const char *name, int node,
                     double run_s)
{
    struct h_trainer_opts o = {.name = name,
                               .node = node,
                               .n = 1000,
                               .steps = 5,
                               .uniform = 1,
                               .run_s = run_s};
    return h_trainer_spawn(c, &o);
}

START_TEST(test_strangers_trainer_socket)
{
    enum { MAXC = 2, IDLE = MAXC + 70 };
    char hello[64];
    snprintf(hello, sizeof(hello), "node.connect_timeout_ms=%d",
             HELLO_TIMEOUT_MS);
    const char *const sched[] = {"scheduler.policy=allreduce", NULL};
    const char *const node[] = {"node.max_clients=2", hello, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, node), 0);
    int fds[IDLE];
    double opened = now_ms();
    ck_assert_int_eq(h_idle_open(c.sock[0], 0, IDLE, fds), 0);
    /* Past the grace in which a new stranger is never closed for room. */
    sleep_ms(300);
    /* max_clients real trainers get in past the idle connections... */
    pid_t a = trainer(&c, "u0", 0, 3.0), b = trainer(&c, "u1", 0, 3.0);
    ck_assert(wait_log(&c, "node0", "trainer 'u0' is worker", 5000));
    ck_assert(wait_log(&c, "node0", "trainer 'u1' is worker", 5000));
    /* ... and one more is refused as one too many, not as EMFILE. */
    preduce_client_t *cl = NULL;
    int rc = preduce_connect(c.sock[0], "u2", 5000, &cl);
    ck_assert_msg(rc == -EUSERS, "third trainer: %d (%s)", rc,
                  preduce_strerror(rc));
    ck_assert(h_log_contains(&c, "node0", "trainers (max_clients) already"));
    ck_assert_int_eq(h_wait(a, 30000), 0);
    ck_assert_int_eq(h_wait(b, 30000), 0);
    /* The oldest idle ones made room; the rest meet the hello deadline. */
    ck_assert_int_le(h_idle_count_open(fds, IDLE), PER_SOURCE);
    int left = (int)(opened + HELLO_TIMEOUT_MS + 1500 - now_ms());
    ck_assert_int_eq(
        h_idle_wait_open_at_most(fds, IDLE, 0, left > 0 ? left : 0), 0);
    char s[64];
    snprintf(s, sizeof(s), "no hello within %d ms", HELLO_TIMEOUT_MS);
    ck_assert(h_log_contains(&c, "node0", s));
    h_idle_close(fds, IDLE);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_strangers_sched_worker_cap)
{
    enum { CAP = 3 };
    uint16_t port = h_free_port();
    char mset[64];
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u", port);
    const char *const sched[] = {"scheduler.policy=dynamic",
                                 "scheduler.max_workers_per_node=3", mset,
                                 NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, NULL), 0);
    preduce_client_t *cl[CAP + 1] = {0};
    char name[16];
    for (int i = 0; i < CAP; i++) {
        snprintf(name, sizeof(name), "w%d", i);
        ck_assert_int_eq(preduce_connect(c.sock[0], name, 5000, &cl[i]), 0);
    }
    int rc = preduce_connect(c.sock[0], "w3", 5000, &cl[CAP]);
    ck_assert_msg(rc == -EUSERS, "worker past the cap: %d (%s)", rc,
                  preduce_strerror(rc));
    ck_assert(wait_log(&c, "sched",
                       "worker 'w3' refused: the node has 3 workers "
                       "registered (scheduler.max_workers_per_node)",
                       5000));
    char *text = h_metrics_fetch(port);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(
        strstr(text, "\npreduce_sched_workers_refused_total 1\n"));
    free(text);
    /* One leaves: its place is free again. */
    preduce_close(cl[0]);
    ck_assert(wait_log(&c, "sched", "(w0) left", 5000));
    ck_assert_int_eq(preduce_connect(c.sock[0], "w3", 5000, &cl[CAP]), 0);
    for (int i = 1; i <= CAP; i++)
        preduce_close(cl[i]);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* Starts node i with `sets` and returns how long until it joined, ms. */
static double join_ms(struct h_cluster *c, int i, const char *const *sets)
{
    char s[32];
    snprintf(s, sizeof(s), "(node%d) joined", i);
    double t0 = now_ms();
    ck_assert_int_eq(h_node_start(c, i, sets), 0);
    c->nnodes = i + 1;
    ck_assert_msg(wait_log(c, "sched", s, 15000), "node%d did not join", i);
    return now_ms() - t0;
}

START_TEST(test_strangers_sched_keyed_join)
{
    enum { IDLE = 70 };
    char key[64], kset[96];
    snprintf(key, sizeof(key), "/tmp/preduce-itkey-XXXXXX");
    int kfd = mkstemp(key);
    ck_assert_int_ge(kfd, 0);
    const char secret[] = "the cluster key of the strangers test";
    ck_assert_int_eq(write(kfd, secret, sizeof(secret) - 1),
                     (ssize_t)sizeof(secret) - 1);
    close(kfd);
    snprintf(kset, sizeof(kset), "security.key_file=%s", key);
    const char *const sched[] = {"scheduler.policy=allreduce", kset, NULL};
    const char *const node[] = {kset, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 0, sched, node), 0);
    double usual = join_ms(&c, 0, node);
    usual = fmax(usual, join_ms(&c, 1, node));
    int fds[IDLE];
    ck_assert_int_eq(h_idle_open(NULL, c.sched_port, IDLE, fds), 0);
    sleep_ms(300);
    double took = join_ms(&c, 2, node);
    /*
     * Before, the 64 strangers kept it out until they reached their
     * deadline (node_timeout_ms, 5 s).
     */
    double bound = fmin(4000, fmax(2000, 3 * usual));
    printf("strangers: keyed node joined in %.0f ms past %d idle "
           "connections (%.0f ms without)\n",
           took, IDLE, usual);
    ck_assert_msg(took <= bound, "joined after %.0f ms (usual %.0f ms)", took,
                  usual);
    ck_assert_int_le(h_idle_count_open(fds, IDLE), PER_SOURCE);
    pid_t a = trainer(&c, "k0", 0, 0), b = trainer(&c, "k2", 2, 0);
    ck_assert_int_eq(h_wait(a, 30000), 0);
    ck_assert_int_eq(h_wait(b, 30000), 0);
    h_idle_close(fds, IDLE);
    unlink(key);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* One GET /metrics with a 1 s receive timeout: the HTTP status, or -1. */
static int get_once(uint16_t port)
{
    int fd = h_idle_dial(NULL, port, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    int status = -1;
    char buf[256];
    if (write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1) {
        ssize_t r = read(fd, buf, sizeof(buf) - 1);
        if (r > 0) {
            buf[r] = '\0';
            if (sscanf(buf, "HTTP/1.0 %d", &status) != 1)
                status = -1;
        }
    }
    close(fd);
    return status;
}

START_TEST(test_strangers_metrics)
{
    enum { IDLE = 40 };
    uint16_t port = h_free_port();
    char mset[64];
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u", port);
    const char *const node[] = {mset, NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, NULL, node), 0);
    int fds[IDLE];
    ck_assert_int_eq(h_idle_open(NULL, port, IDLE, fds), 0);
    sleep_ms(300);
    /* Answered at once, not after the idle ones' deadline. */
    double t0 = now_ms();
    ck_assert_int_eq(get_once(port), 200);
    printf("strangers: /metrics answered in %.0f ms past %d idle "
           "connections\n",
           now_ms() - t0, IDLE);
    ck_assert_int_le(h_idle_count_open(fds, IDLE), METRICS_PER_SOURCE);
    h_idle_close(fds, IDLE);
    /* A connection that sends nothing is closed at the read deadline. */
    int fd = h_idle_dial(NULL, port, 0);
    ck_assert_int_ge(fd, 0);
    t0 = now_ms();
    ck_assert_int_eq(h_idle_wait_open_at_most(&fd, 1, 0, 3000), 0);
    double waited = now_ms() - t0;
    close(fd);
    ck_assert_msg(waited >= METRICS_READ_MS - 100 &&
                      waited <= METRICS_READ_MS + 600,
                  "idle connection closed after %.0f ms", waited);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_strangers_peer_port)
{
    enum { IDLE = 200 };
    const char *const sched[] = {"scheduler.policy=allreduce", NULL};
    struct h_cluster c;
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, NULL), 0);
    ck_assert(wait_log(&c, "sched", "(node0) joined", 5000));
    int fds[IDLE];
    ck_assert_int_eq(h_idle_open(NULL, c.node_port[0], IDLE, fds), 0);
    /* Each gets its challenge; the daemon keeps no more than its cap. */
    ck_assert_int_eq(h_idle_wait_open_at_most(fds, IDLE, PER_SOURCE, 2000), 0);
    printf("strangers: peer port of node0 holds %d of %d idle connections, "
           "%d descriptors\n",
           h_idle_count_open(fds, IDLE), IDLE, h_fd_count(c.node_pid[0]));
    sleep_ms(300);
    /* node1 has the higher id: it is the one that dials node0's port. */
    ck_assert_int_eq(h_node_start(&c, 1, NULL), 0);
    c.nnodes = 2;
    ck_assert(wait_log(&c, "sched", "(node1) joined", 5000));
    pid_t a = trainer(&c, "p0", 0, 0), b = trainer(&c, "p1", 1, 0);
    ck_assert_int_eq(h_wait(a, 30000), 0);
    ck_assert_int_eq(h_wait(b, 30000), 0);
    /* node0 took node1's link through its crowded port. */
    ck_assert(h_log_contains(&c, "node0", "link up"));
    h_idle_close(fds, IDLE);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_strangers");
    TCase *tc = tcase_create("strangers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_strangers_trainer_socket);
    tcase_add_test(tc, test_strangers_sched_keyed_join);
    tcase_add_test(tc, test_strangers_metrics);
    tcase_add_test(tc, test_strangers_peer_port);
    tcase_add_test(tc, test_strangers_sched_worker_cap);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
