/* SPDX-License-Identifier: MIT */
/*
 * Malformed input on every port a daemon listens on (the trainers' Unix
 * socket, the scheduler's TCP port, a node's peer TCP port) is rejected with
 * a logged reason, and the daemons keep serving well-behaved trainers.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static struct h_cluster c;

static void setup(void)
{
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, NULL), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

static int dial(const char *who)
{
    int fd;
    if (strcmp(who, "unix") == 0) {
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", c.sock[0]);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            ck_abort_msg("connect %s", c.sock[0]);
        return fd;
    }
    uint16_t port = strcmp(who, "sched") == 0 ? c.sched_port : c.node_port[0];
    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        ck_abort_msg("connect port %u", port);
    return fd;
}

/* Sends bytes, then waits until the daemon closes (or 2 s pass). */
static void send_and_close(const char *who, const void *p, size_t n,
                           int wait_close)
{
    int fd = dial(who);
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
    /*
     * Not waiting for the daemon to close: end our side with a FIN and
     * read what the daemon sent (a TCP port's challenge), so the close is
     * orderly rather than a reset over unread data.
     */
    if (!wait_close)
        shutdown(fd, SHUT_WR);
    {
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[256];
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
    }
    close(fd);
}

static const char *log_of(const char *who)
{
    return strcmp(who, "sched") == 0 ? "sched" : "node0";
}

/* Polls the log for up to 2 s. */
static int logged(const char *who, const char *s)
{
    for (int i = 0; i < 200; i++) {
        if (h_log_contains(&c, log_of(who), s))
            return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    h_log_dump(&c, log_of(who));
    return 0;
}

/* The cluster still reduces: 4 trainers, 5 steps, correct results. */
static void still_serving(void)
{
    static int round;
    pid_t pids[4];
    char names[4][16];
    round++;
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "r%dt%d", round, i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 1000,
                                   .steps = 5,
                                   .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(h_wait(pids[i], 30000), 0);
}

static const char *const ports[] = {"unix", "sched", "peer"};

START_TEST(test_malformed_oversized_length)
{
    const char *who = ports[_i];
    uint8_t h[PR_FRAME_HDR_LEN];
    pr_frame_hdr_encode(h, 0x7fffffffu, PR_FRAME_MSG, 0);
    send_and_close(who, h, sizeof(h), 1);
    ck_assert(logged(who, "exceeds the maximum"));
    still_serving();
}
END_TEST

START_TEST(test_malformed_garbage_payload)
{
    const char *who = ports[_i];
    uint8_t b[PR_FRAME_HDR_LEN + 32];
    pr_frame_hdr_encode(b, 32, PR_FRAME_MSG, 0);
    for (int i = 0; i < 32; i++)
        b[PR_FRAME_HDR_LEN + i] = (uint8_t)(0xff - i * 7);
    send_and_close(who, b, sizeof(b), 1);
    ck_assert(logged(who, "not a valid message"));
    still_serving();
}
END_TEST

START_TEST(test_malformed_truncated_frame)
{
    const char *who = ports[_i];
    uint8_t b[PR_FRAME_HDR_LEN + 10];
    pr_frame_hdr_encode(b, 100, PR_FRAME_MSG, 0);
    memset(b + PR_FRAME_HDR_LEN, 0x0a, 10);
    send_and_close(who, b, sizeof(b), 0);
    ck_assert(logged(who, "closed inside a frame"));
    still_serving();
}
END_TEST

START_TEST(test_malformed_unknown_type)
{
    const char *who = ports[_i];
    uint8_t h[PR_FRAME_HDR_LEN];
    pr_frame_hdr_encode(h, 0, 77, 0);
    send_and_close(who, h, sizeof(h), 1);
    ck_assert(logged(who, "unknown type 77"));
    still_serving();
}
END_TEST

START_TEST(test_malformed_wrong_version)
{
    const char *who = ports[_i];
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Hello hello = PR__V1__HELLO__INIT;
    hello.version = PR_PROTO_VERSION + 41;
    hello.role = strcmp(who, "unix") == 0 ? PR__V1__ROLE__ROLE_CLIENT
                                          : PR__V1__ROLE__ROLE_NODE;
    hello.name = "intruder";
    hello.node_id = 99;
    hello.data_addr = "127.0.0.1:9";
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &hello;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(&m, 1 << 20, &buf, &len), 0);
    send_and_close(who, buf, len, 1);
    free(buf);
    ck_assert(logged(who, "protocol version 42"));
    still_serving();
}
END_TEST

START_TEST(test_malformed_message_before_hello)
{
    const char *who = ports[_i];
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Ping p = PR__V1__PING__INIT;
    m.body_case = PR__V1__MSG__BODY_PING;
    m.ping = &p;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(&m, 1 << 20, &buf, &len), 0);
    send_and_close(who, buf, len, 1);
    free(buf);
    ck_assert(logged(who, "message before hello"));
    still_serving();
}
END_TEST

/*
 * Before its hello, a connection to the scheduler (anyone can open one)
 * may send no frame larger than a hello: a length of 8 KiB, far below the
 * control frame limit, is refused at once, so strangers cannot make the
 * scheduler buffer megabytes each.
 */
START_TEST(test_malformed_sched_stranger_frame_limit)
{
    uint8_t h[PR_FRAME_HDR_LEN];
    pr_frame_hdr_encode(h, 8192, PR_FRAME_MSG, 0);
    int fd = dial("sched");
    ck_assert_int_eq(write(fd, h, sizeof(h)), (ssize_t)sizeof(h));
    /* The scheduler closes: read reaches EOF well before 2 s. */
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[256];
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        ;
    ck_assert_msg(r == 0, "the scheduler kept the connection open");
    close(fd);
    ck_assert(logged("sched", "frame length 8192 exceeds the maximum 4096"));
    still_serving();
}
END_TEST

/*
 * At most 32 connections without a hello from one address at once (64 in
 * all): the ones past that are closed, the oldest first once they are
 * past their grace (daemon/base/stranger.h); the nodes already joined go on
 * serving.
 */
START_TEST(test_malformed_sched_strangers_capped)
{
    enum { N = 70, PER_SOURCE = 32 };
    int fds[N];
    /* Both nodes are past their hello, or they would count as strangers. */
    ck_assert(logged("sched", "(node0) joined") &&
              logged("sched", "(node1) joined"));
    for (int i = 0; i < N; i++)
        fds[i] = dial("sched");
    ck_assert(logged("sched", "connections without a hello, 32 from "));
    /*
     * Well within the hello deadline (node_timeout_ms, 5 s), which would
     * close them all: each got its challenge, and a closed one is at EOF.
     */
    struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
    int closed = 0;
    for (int i = 0; i < N; i++) {
        char buf[256];
        ssize_t r;
        while ((r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            ;
        closed += r == 0;
    }
    ck_assert_int_eq(closed, N - PER_SOURCE);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    still_serving();
}
END_TEST

static void setup_limited(void)
{
    const char *const sets[] = {"scheduler.policy=allreduce", "log.burst=10",
                                "log.burst_ms=1000", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, NULL), 0);
}

/*
 * In the scheduler's log: *written lines with needle (not summaries),
 * and the sum of the counts of the summaries naming needle.
 */
static void log_lines(const char *needle, int *written, long long *dropped)
{
    char path[400], line[2048];
    snprintf(path, sizeof(path), "%s/sched.log", c.dir);
    *written = 0;
    *dropped = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        const char *s = strstr(line, "similar messages suppressed in");
        long long n;
        if (!strstr(line, needle))
            continue;
        if (!s)
            (*written)++;
        else if (sscanf(strstr(line, "] ") + 2, "%lld similar", &n) == 1)
            *dropped += n;
    }
    fclose(f);
}

/*
 * A flood of one bad message from a stranger costs log.burst lines an
 * interval, plus a line that counts the rest: every bad frame is either
 * written or counted, none twice, and the scheduler goes on serving.
 */
START_TEST(test_malformed_flood_log_limited)
{
    enum { N = 120 };
    const char *needle = "is not a valid message";
    uint8_t b[PR_FRAME_HDR_LEN + 32];
    pr_frame_hdr_encode(b, 32, PR_FRAME_MSG, 0);
    for (int i = 0; i < 32; i++)
        b[PR_FRAME_HDR_LEN + i] = (uint8_t)(0xff - i * 7);
    double t0 = h_now();
    for (int i = 0; i < N; i++)
        send_and_close("sched", b, sizeof(b), 1);
    double took = h_now() - t0;
    int written = 0;
    long long dropped = 0;
    /* The last interval's count comes within a second of its end. */
    for (int i = 0; i < 400 && written + dropped < N; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        log_lines(needle, &written, &dropped);
    }
    ck_assert_msg(written + dropped == N, "%d written + %lld counted != %d",
                  written, dropped, N);
    /* At most 10 an interval of 1 s (the flood took `took` s). */
    ck_assert_msg(written <= 10 * ((int)took + 2), "%d lines in %.1f s",
                  written, took);
    ck_assert_int_gt(dropped, 0);
    still_serving();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_malformed");
    TCase *tc = tcase_create("frames");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_malformed_oversized_length, 0, 3);
    tcase_add_loop_test(tc, test_malformed_garbage_payload, 0, 3);
    tcase_add_loop_test(tc, test_malformed_truncated_frame, 0, 3);
    tcase_add_loop_test(tc, test_malformed_unknown_type, 0, 3);
    tcase_add_loop_test(tc, test_malformed_wrong_version, 0, 3);
    tcase_add_loop_test(tc, test_malformed_message_before_hello, 0, 3);
    tcase_add_test(tc, test_malformed_sched_stranger_frame_limit);
    tcase_add_test(tc, test_malformed_sched_strangers_capped);
    suite_add_tcase(s, tc);

    tc = tcase_create("log_limit");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup_limited, teardown);
    tcase_add_test(tc, test_malformed_flood_log_limited);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
