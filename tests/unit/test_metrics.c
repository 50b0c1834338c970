/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the metrics endpoint (daemon/base/metrics.c).
 *
 * Each test runs a private libuv loop in the test thread, stepped with
 * UV_RUN_NOWAIT while plain non-blocking client sockets talk to the server
 * on 127.0.0.1 (port 0: whatever is free). Tests count render calls, check
 * whole answers, then stop the server, run the loop dry and check
 * uv_loop_close() == 0.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/http_req.h"
#include "daemon/base/log.h"
#include "daemon/base/metrics.h"
#include "daemon/base/stranger.h"
#include "preduce.h"
#include "tests/check_run.h"

#define ANSWER_MAX (4u << 20)
#define GET10      "GET /metrics HTTP/1.0\r\n\r\n"

struct fix {
    uv_loop_t loop;
    struct pr_metrics *m;
    uint16_t port;
    int renders;
    int render_rc; /* returned by render() when non-zero */
    size_t big;    /* extra lines render() writes */
};

static int render(void *ctx, struct pr_metrics_buf *out)
{
    struct fix *f = ctx;
    f->renders++;
    if (f->render_rc)
        return f->render_rc;
    char esc[64];
    pr_metrics_header(out, "test_metric", "gauge", "A test.");
    pr_metrics_printf(out, "test_metric{worker=\"%s\"} 42\n",
                      pr_metrics_escape("w\"0", esc, sizeof(esc)));
    for (size_t i = 0; i < f->big; i++)
        pr_metrics_printf(out, "big_metric{i=\"%zu\"} %zu\n", i, i);
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs the loop for about ms milliseconds. */
static void pump(struct fix *f, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    do {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    } while (now_ms() < end);
}

static void fix_start(struct fix *f)
{
    memset(f, 0, sizeof(*f));
    pr_log_set_level(PR_LOG_WARN);
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    ck_assert_int_eq(
        pr_metrics_start(&f->loop, "127.0.0.1:0", render, f, &f->m), 0);
    f->port = pr_metrics_port(f->m);
    ck_assert_uint_ne(f->port, 0);
}

static void fix_stop(struct fix *f)
{
    pr_metrics_stop(f->m);
    ck_assert_int_eq(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&f->loop), 0);
}

static int cli_connect(struct fix *f)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    ck_assert(rc == 0 || errno == EINPROGRESS);
    pump(f, 5); /* let the server accept it */
    return fd;
}

static void cli_send(int fd, const char *s, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, s + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) {
            sleep_ms(1);
            continue;
        }
        ck_assert_int_gt(w, 0);
        off += (size_t)w;
    }
}

/*
 * Reads until the server closes, running the loop meanwhile. The bytes
 * read (buf NUL-terminated), -ETIMEDOUT, or -errno.
 */
static ssize_t cli_read(struct fix *f, int fd, char *buf, size_t cap,
                        int timeout_ms)
{
    size_t n = 0;
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (now_ms() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r > 0) {
            n += (size_t)r;
            continue;
        }
        if (r == 0) {
            buf[n] = '\0';
            return (ssize_t)n;
        }
        if (errno != EAGAIN)
            return -errno;
        sleep_ms(1);
    }
    return -ETIMEDOUT;
}

/* 1 if the server closed the connection (EOF), 0 if it is open and quiet. */
static int cli_closed(int fd)
{
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
    ck_assert(r == 0 || (r < 0 && errno == EAGAIN));
    return r == 0;
}

/* Sends `req` on a new connection; the whole answer in buf. */
static ssize_t request(struct fix *f, const char *req, char *buf, size_t cap)
{
    int fd = cli_connect(f);
    cli_send(fd, req, strlen(req));
    ssize_t n = cli_read(f, fd, buf, cap, 3000);
    close(fd);
    return n;
}

static int status_of(const char *answer)
{
    int code = 0;
    if (sscanf(answer, "HTTP/1.0 %d ", &code) != 1)
        return -1;
    return code;
}

static const char *body_of(const char *answer)
{
    const char *p = strstr(answer, "\r\n\r\n");
    ck_assert_ptr_nonnull(p);
    return p + 4;
}

START_TEST(test_metrics_get_returns_rendered_text)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    ssize_t n = request(&f,
                        "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                        "Accept: */*\r\n\r\n",
                        buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(status_of(buf), 200);
    ck_assert_ptr_nonnull(
        strstr(buf, "\r\nContent-Type: text/plain; version=0.0.4\r\n"));
    const char *body = body_of(buf);
    const char *want = "# HELP test_metric A test.\n"
                       "# TYPE test_metric gauge\n"
                       "test_metric{worker=\"w\\\"0\"} 42\n";
    ck_assert_str_eq(body, want);
    char cl[64];
    snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n", strlen(want));
    ck_assert_ptr_nonnull(strstr(buf, cl));
    ck_assert_int_eq(f.renders, 1);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_request_in_pieces)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    int fd = cli_connect(&f);
    cli_send(fd, "GET /metr", strlen("GET /metr"));
    pump(&f, 20);
    const char *rest = "ics?x=1 HTTP/1.0\r\nHost: x\r\n";
    cli_send(fd, rest, strlen(rest));
    pump(&f, 20);
    ck_assert_int_eq(f.renders, 0); /* the headers have not ended yet */
    ck_assert_int_eq(cli_closed(fd), 0);
    cli_send(fd, "\r\n", strlen("\r\n"));
    ck_assert_int_gt(cli_read(&f, fd, buf, sizeof(buf), 3000), 0);
    close(fd);
    ck_assert_int_eq(status_of(buf), 200);
    ck_assert_int_eq(f.renders, 1);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_simple_request_line)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    /* No version, no headers (HTTP/0.9 style): answered at once. */
    ck_assert_int_gt(request(&f, "GET /metrics\n", buf, sizeof(buf)), 0);
    ck_assert_int_eq(status_of(buf), 200);
    ck_assert_int_eq(f.renders, 1);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_head_has_no_body)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    ck_assert_int_gt(
        request(&f, "HEAD /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)), 0);
    ck_assert_int_eq(status_of(buf), 200);
    ck_assert_str_eq(body_of(buf), "");
    ck_assert_ptr_null(strstr(buf, "Content-Length: 0\r\n"));
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_large_body)
{
    struct fix f;
    fix_start(&f);
    f.big = 50000; /* about 1.5 MiB: many partial writes */
    char *buf = malloc(ANSWER_MAX);
    ck_assert_ptr_nonnull(buf);
    ssize_t n = request(&f, "GET /metrics HTTP/1.0\r\n\r\n", buf, ANSWER_MAX);
    ck_assert_int_gt(n, 1000000);
    ck_assert_int_eq(status_of(buf), 200);
    const char *body = body_of(buf);
    size_t len = strlen(body);
    char cl[64];
    snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n", len);
    ck_assert_ptr_nonnull(strstr(buf, cl));
    ck_assert_ptr_nonnull(strstr(body, "big_metric{i=\"49999\"} 49999\n"));
    free(buf);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_other_path_404)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    static const char *const reqs[] = {
        "GET /other HTTP/1.0\r\n\r\n",
        "GET /metricsx HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        ck_assert_int_gt(request(&f, reqs[i], buf, sizeof(buf)), 0);
        ck_assert_int_eq(status_of(buf), 404);
    }
    ck_assert_int_eq(f.renders, 0);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_other_method_405)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    ck_assert_int_gt(request(&f,
                             "POST /metrics HTTP/1.0\r\n"
                             "Content-Length: 0\r\n\r\n",
                             buf, sizeof(buf)),
                     0);
    ck_assert_int_eq(status_of(buf), 405);
    ck_assert_ptr_nonnull(strstr(buf, "\r\nAllow: GET, HEAD\r\n"));
    ck_assert_int_eq(f.renders, 0);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_garbage_400)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    static const char *const reqs[] = {
        "garbage\r\n\r\n",
        "GET metrics HTTP/1.0\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /metrics HTTP/1.0 extra\r\n\r\n",
        "get /metrics HTTP/1.0\r\n\r\n",
        "GET  /metrics HTTP/1.0\r\n\r\n",
        "GET /met\x01rics HTTP/1.0\r\n\r\n",
        "\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        ck_assert_int_gt(request(&f, reqs[i], buf, sizeof(buf)), 0);
        ck_assert_msg(status_of(buf) == 400, "request %zu: %s", i, buf);
    }
    /* Bytes and then EOF without a whole line: 400 as well. */
    int fd = cli_connect(&f);
    cli_send(fd, "\x16\x03\x01", 3);
    shutdown(fd, SHUT_WR);
    ck_assert_int_gt(cli_read(&f, fd, buf, sizeof(buf), 3000), 0);
    close(fd);
    ck_assert_int_eq(status_of(buf), 400);
    ck_assert_int_eq(f.renders, 0);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_oversized_request_400)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    static char big[PR_METRICS_MAX_REQUEST + 2000];
    /* A request line that never ends, then headers that never end. */
    for (int pass = 0; pass < 2; pass++) {
        memset(big, 'a', sizeof(big));
        if (pass == 1)
            memcpy(big, "GET /metrics HTTP/1.0\r\nX: ", 26);
        int fd = cli_connect(&f);
        cli_send(fd, big, sizeof(big));
        ssize_t n = cli_read(&f, fd, buf, sizeof(buf), 3000);
        close(fd);
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(status_of(buf), 400);
    }
    ck_assert_int_eq(f.renders, 0);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_render_failure_500)
{
    struct fix f;
    fix_start(&f);
    f.render_rc = -EIO;
    static char buf[65536];
    ck_assert_int_gt(
        request(&f, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)), 0);
    ck_assert_int_eq(status_of(buf), 500);
    ck_assert_int_eq(f.renders, 1);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_silent_client_closed_after_read_deadline)
{
    struct fix f;
    fix_start(&f);
    static char buf[256];
    int fd = cli_connect(&f);
    uint64_t t0 = now_ms();
    pump(&f, PR_METRICS_READ_MS - 300);
    ck_assert_int_eq(cli_closed(fd), 0);
    ck_assert_int_eq(cli_read(&f, fd, buf, sizeof(buf), 2000), 0);
    uint64_t took = now_ms() - t0;
    ck_assert_uint_ge(took, PR_METRICS_READ_MS - 50);
    ck_assert_uint_le(took, PR_METRICS_READ_MS + 500);
    close(fd);
    ck_assert_int_eq(f.renders, 0);
    fix_stop(&f);
}
END_TEST

/* A connection from 127.0.0.`last` (all of 127/8 is loopback). */
static int cli_connect_from(struct fix *f, int last)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + (uint32_t)last);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    ck_assert(rc == 0 || errno == EINPROGRESS);
    pump(f, 5);
    return fd;
}

/*
 * Idle clients of one address hold at most PR_METRICS_MAX_PER_SOURCE
 * places: a new client from there takes the oldest one's place, once that
 * one is past the grace (a flood within it is refused instead).
 */
START_TEST(test_metrics_idle_clients_make_room)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    int fds[PR_METRICS_MAX_PER_SOURCE];
    for (int i = 0; i < PR_METRICS_MAX_PER_SOURCE; i++)
        fds[i] = cli_connect(&f);
    pump(&f, 20);
    /* Within the grace: one more is accepted and closed, unanswered. */
    int extra = cli_connect(&f);
    ck_assert_int_eq(cli_read(&f, extra, buf, sizeof(buf), 1000), 0);
    close(extra);
    for (int i = 0; i < PR_METRICS_MAX_PER_SOURCE; i++)
        ck_assert_int_eq(cli_closed(fds[i]), 0);
    /* Past it, the oldest idle one makes room for a scraper. */
    pump(&f, PR_STRANGER_GRACE_MS);
    int next = cli_connect(&f);
    cli_send(next, GET10, strlen(GET10));
    ck_assert_int_gt(cli_read(&f, next, buf, sizeof(buf), 1000), 0);
    ck_assert_int_eq(status_of(buf), 200);
    close(next);
    ck_assert_int_eq(cli_closed(fds[0]), 1);
    for (int i = 1; i < PR_METRICS_MAX_PER_SOURCE; i++)
        ck_assert_int_eq(cli_closed(fds[i]), 0);
    /* Those still open are served. */
    cli_send(fds[1], GET10, strlen(GET10));
    ck_assert_int_gt(cli_read(&f, fds[1], buf, sizeof(buf), 1000), 0);
    ck_assert_int_eq(status_of(buf), 200);
    ck_assert_int_eq(f.renders, 2);
    for (int i = 0; i < PR_METRICS_MAX_PER_SOURCE; i++)
        close(fds[i]);
    fix_stop(&f);
}
END_TEST

/* A flood from one address closes none of another address's clients. */
START_TEST(test_metrics_per_source_share)
{
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    int other = cli_connect_from(&f, 2);
    int fds[PR_METRICS_MAX_PER_SOURCE + 4];
    for (int i = 0; i < PR_METRICS_MAX_PER_SOURCE; i++)
        fds[i] = cli_connect(&f);
    pump(&f, PR_STRANGER_GRACE_MS + 20);
    for (int i = PR_METRICS_MAX_PER_SOURCE; i < PR_METRICS_MAX_PER_SOURCE + 4;
         i++)
        fds[i] = cli_connect(&f);
    pump(&f, 20);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(cli_closed(fds[i]), 1);
    for (int i = 4; i < PR_METRICS_MAX_PER_SOURCE + 4; i++)
        ck_assert_int_eq(cli_closed(fds[i]), 0);
    /* The oldest of all, but from 127.0.0.2: still open, and served. */
    ck_assert_int_eq(cli_closed(other), 0);
    cli_send(other, GET10, strlen(GET10));
    ck_assert_int_gt(cli_read(&f, other, buf, sizeof(buf), 1000), 0);
    ck_assert_int_eq(status_of(buf), 200);
    close(other);
    for (int i = 0; i < PR_METRICS_MAX_PER_SOURCE + 4; i++)
        close(fds[i]);
    fix_stop(&f);
}
END_TEST

/*
 * With PR_METRICS_MAX_CONNS open, a client that has its whole answer and
 * does not close gives way to a new one.
 */
START_TEST(test_metrics_answered_client_gives_way)
{
    enum { IDLE = PR_METRICS_MAX_PER_SOURCE - 1 };
    enum { SERVED = PR_METRICS_MAX_CONNS - IDLE };
    struct fix f;
    fix_start(&f);
    static char buf[65536];
    int done[SERVED];
    for (int i = 0; i < SERVED; i++) {
        done[i] = cli_connect(&f);
        cli_send(done[i], GET10, strlen(GET10));
        ck_assert_int_gt(cli_read(&f, done[i], buf, sizeof(buf), 1000), 0);
    }
    int fds[IDLE];
    for (int i = 0; i < IDLE; i++)
        fds[i] = cli_connect(&f);
    pump(&f, 50);
    /* At the limit: a served one is closed to make room. */
    int next = cli_connect(&f);
    cli_send(next, GET10, strlen(GET10));
    ck_assert_int_gt(cli_read(&f, next, buf, sizeof(buf), 1000), 0);
    ck_assert_int_eq(status_of(buf), 200);
    close(next);
    for (int i = 0; i < IDLE; i++) {
        ck_assert_int_eq(cli_closed(fds[i]), 0);
        close(fds[i]);
    }
    for (int i = 0; i < SERVED; i++)
        close(done[i]);
    ck_assert_int_eq(f.renders, SERVED + 1);
    fix_stop(&f);
}
END_TEST

START_TEST(test_metrics_stop_with_clients_connected)
{
    struct fix f;
    fix_start(&f);
    f.big = 200000; /* an answer still being written at stop */
    int idle[3], partial, reading;
    for (int i = 0; i < 3; i++)
        idle[i] = cli_connect(&f);
    partial = cli_connect(&f);
    cli_send(partial, "GET /met", strlen("GET /met"));
    reading = cli_connect(&f);
    cli_send(reading, GET10, strlen(GET10));
    pump(&f, 20);
    ck_assert_int_eq(f.renders, 1);
    fix_stop(&f);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cli_closed(idle[i]), 1);
        close(idle[i]);
    }
    ck_assert_int_eq(cli_closed(partial), 1);
    close(partial);
    close(reading);
}
END_TEST

START_TEST(test_metrics_bind_errors)
{
    uv_loop_t loop;
    struct pr_metrics *m = NULL;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    /* A port in use. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    char hp[64];
    snprintf(hp, sizeof(hp), "127.0.0.1:%u", ntohs(sa.sin_port));
    ck_assert_int_eq(pr_metrics_start(&loop, hp, render, NULL, &m),
                     UV_EADDRINUSE);
    ck_assert_ptr_null(m);
    close(fd);
    /* Not numeric, or not host:port at all. */
    ck_assert_int_eq(
        pr_metrics_start(&loop, "localhost:9464", render, NULL, &m), -EINVAL);
    ck_assert_int_eq(pr_metrics_start(&loop, "9464", render, NULL, &m),
                     -EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(test_metrics_buf_and_escape)
{
    struct pr_metrics_buf b;
    pr_metrics_buf_init(&b);
    for (int i = 0; i < 10000; i++)
        pr_metrics_printf(&b, "line %d\n", i);
    ck_assert_int_eq(b.err, 0);
    ck_assert_ptr_nonnull(strstr(b.data, "line 0\nline 1\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "line 9999\n"));
    ck_assert_uint_eq(b.len, strlen(b.data));
    pr_metrics_buf_fini(&b);

    char out[64];
    ck_assert_str_eq(pr_metrics_escape("a\"b\\c\nd", out, sizeof(out)),
                     "a\\\"b\\\\c\\nd");
    ck_assert_str_eq(pr_metrics_escape(NULL, out, sizeof(out)), "");
    /* Truncation never splits an escape. */
    ck_assert_str_eq(pr_metrics_escape("ab\"", out, 4), "ab");
    ck_assert_str_eq(pr_metrics_escape("abcdef", out, 4), "abc");
}
END_TEST

/* preduce_build_info: preduce.h's version, the same for both roles. */
START_TEST(test_metrics_build_info)
{
    struct pr_metrics_buf b;
    char want[256];
    pr_metrics_buf_init(&b);
    pr_metrics_build_info(&b);
    ck_assert_int_eq(b.err, 0);
    snprintf(want, sizeof(want),
             "# HELP preduce_build_info The preduce release this daemon "
             "runs.\n"
             "# TYPE preduce_build_info gauge\n"
             "preduce_build_info{version=\"%d.%d\"} 1\n",
             PREDUCE_VERSION_MAJOR, PREDUCE_VERSION_MINOR);
    ck_assert_str_eq(b.data, want);
    pr_metrics_buf_fini(&b);
}
END_TEST

/* The request parser alone (http_req.c), one row per verdict. */
static const struct {
    const char *req;
    int eof;
    int code;
    int head;
} requests[] = {
    {"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 0, 200, 0},
    {"GET /metrics?name=x HTTP/1.0\n\n", 0, 200, 0},
    {"HEAD /metrics HTTP/1.0\r\n\r\n", 0, 200, 1},
    {"GET /metrics\r\n", 0, 200, 0},        /* no version: no headers */
    {"GET /metrics HTTP/1.1\r\n", 0, 0, 0}, /* headers to come */
    {"GET /metrics HTTP/1.1\r\nA: b\r\n", 1, 200, 0}, /* they won't */
    {"GET /metr", 0, 0, 0},
    {"GET /metr", 1, 400, 0},
    {"", 0, 0, 0},
    {"", 1, -ENODATA, 0},
    {"GET /other HTTP/1.0\r\n\r\n", 0, 404, 0},
    {"GET /metricsx\r\n", 0, 404, 0},
    {"POST /metrics HTTP/1.0\r\n\r\n", 0, 405, 0},
    {"HEAD /x HTTP/1.0\r\n\r\n", 0, 404, 0},
    {"GET /metrics HTTP/2.0\r\n\r\n", 0, 400, 0},
    {"GET /metrics HTTP/1.x\r\n\r\n", 0, 400, 0},
    {"GET /metrics HTTP/1.1 x\r\n\r\n", 0, 400, 0},
    {"get /metrics\r\n", 0, 400, 0},
    {"GET metrics\r\n", 0, 400, 0},
    {" GET /metrics\r\n", 0, 400, 0},
    {"GET\r\n", 0, 400, 0},
    {"GET /m\x01etrics\r\n", 0, 400, 0},
    {"GET /m\x7f\r\n", 0, 400, 0},
};

START_TEST(test_metrics_request_status)
{
    for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
        size_t len = strlen(requests[i].req);
        int head = -1;
        int code = pr_http_request_status(requests[i].req, len, 64,
                                          requests[i].eof, &head);
        ck_assert_msg(code == requests[i].code && head == requests[i].head,
                      "row %zu \"%s\": %d head %d", i, requests[i].req, code,
                      head);
    }
    /* A full buffer without its line end, or its headers' end, is 400. */
    int head;
    ck_assert_int_eq(pr_http_request_status("GET /metrics", 12, 12, 0, &head),
                     400);
    const char *h = "GET /metrics HTTP/1.1\r\nA: b\r\n";
    ck_assert_int_eq(pr_http_request_status(h, strlen(h), strlen(h), 0, &head),
                     400);
    /* Only the given bytes are read: what follows them is not seen. */
    ck_assert_int_eq(
        pr_http_request_status("GET /metrics\r\n", 5, 64, 0, &head), 0);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_metrics_get_returns_rendered_text);
    tcase_add_test(tc, test_metrics_request_in_pieces);
    tcase_add_test(tc, test_metrics_simple_request_line);
    tcase_add_test(tc, test_metrics_head_has_no_body);
    tcase_add_test(tc, test_metrics_large_body);
    tcase_add_test(tc, test_metrics_other_path_404);
    tcase_add_test(tc, test_metrics_other_method_405);
    tcase_add_test(tc, test_metrics_garbage_400);
    tcase_add_test(tc, test_metrics_oversized_request_400);
    tcase_add_test(tc, test_metrics_render_failure_500);
    suite_add_tcase(s, tc);

    tc = tcase_create("limits");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_metrics_silent_client_closed_after_read_deadline);
    tcase_add_test(tc, test_metrics_idle_clients_make_room);
    tcase_add_test(tc, test_metrics_per_source_share);
    tcase_add_test(tc, test_metrics_answered_client_gives_way);
    tcase_add_test(tc, test_metrics_stop_with_clients_connected);
    tcase_add_test(tc, test_metrics_bind_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("buffer");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_metrics_buf_and_escape);
    tcase_add_test(tc, test_metrics_build_info);
    tcase_add_test(tc, test_metrics_request_status);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(metrics_suite());
}
