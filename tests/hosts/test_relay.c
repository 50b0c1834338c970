/* SPDX-License-Identifier: MIT */
/*
 * The delay relay (tests/hosts/relay.c) that the streams suite and make
 * bench-hosts route a link through: checked on its own between two hosts
 * (network namespaces, tests/hosts/hosts.h), since their figures mean
 * something only if it holds each byte DELAY_MS, passes at most
 * WINDOW_KB / DELAY_MS per connection (and that much for each of several
 * connections), and passes a half-close, a reset and its own death on as
 * a long path would. The client runs on host 1, the relay and the server
 * on host 0.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/hosts/hosts.h"
#include "tests/check_run.h"

#define SERVER_PORT 7200

static struct hh h;

static void setup(void)
{
    ck_assert_int_eq(hh_up(&h, 2), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(hh_down(&h), 0);
}

/* A TCP socket made in host i's namespace (a socket keeps its own). */
static int socket_in(int host)
{
    char path[128];
    snprintf(path, sizeof(path), "/run/netns/%s-h%d", h.prefix, host);
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(home, 0);
    ck_assert_int_ge(ns, 0);
    ck_assert_int_eq(setns(ns, CLONE_NEWNET), 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (setns(home, CLONE_NEWNET) < 0)
        abort(); /* the test cannot go on in the wrong namespace */
    close(ns);
    close(home);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static struct sockaddr_in addr_of(int host, uint16_t port)
{
    char a[32];
    hh_addr(host, a, sizeof(a));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    ck_assert_int_eq(inet_pton(AF_INET, a, &sa.sin_addr), 1);
    return sa;
}

/* The server: listening on host 0 at SERVER_PORT. */
static int server_listen(void)
{
    int fd = socket_in(0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = addr_of(0, SERVER_PORT);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    return fd;
}

/* A relay on host 0 in front of the server: its index, started. */
static int relay(int delay_ms, int window_kb)
{
    int k =
        hh_relay_add(&h, 0, HH_RELAY_PORT, SERVER_PORT, delay_ms, window_kb);
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(hh_relay_start(&h, k), 0);
    return k;
}

/* A client on host 1 connected through the relay. */
static int client_connect(void)
{
    int fd = socket_in(1);
    struct sockaddr_in sa = addr_of(0, HH_RELAY_PORT);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* The server's side of the next connection, within 2 s. */
static int server_accept(int lfd)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    ck_assert_int_eq(poll(&p, 1, 2000), 1);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static double now_s(void)
{
    return h_now();
}

/*
 * recv() within timeout_ms: its result (0 at EOF), -errno on an error,
 * or -ETIMEDOUT when nothing came.
 */
static ssize_t recv_within(int fd, void *buf, size_t len, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc == 0)
        return -ETIMEDOUT;
    ssize_t n = recv(fd, buf, len, 0);
    return n < 0 ? -errno : n;
}

/* Exactly `len` bytes within timeout_ms: 0, or what stopped it. */
static ssize_t recv_exact(int fd, char *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv_within(fd, buf + got, len - got, timeout_ms);
        if (n <= 0)
            return n == 0 ? -EPIPE : n;
        got += (size_t)n;
    }
    return 0;
}

/* One byte each way: each arrives DELAY_MS after it was sent, not sooner. */
START_TEST(test_relay_delay)
{
    const int delay_ms = 60;
    int lfd = server_listen();
    relay(delay_ms, 64);
    int c = client_connect();
    int s = server_accept(lfd);
    char b = 'x';
    for (int way = 0; way < 2; way++) {
        int from = way ? s : c, to = way ? c : s;
        double t0 = now_s();
        ck_assert_int_eq(send(from, &b, 1, 0), 1);
        ck_assert_int_eq(recv_within(to, &b, 1, 2000), 1);
        double ms = (now_s() - t0) * 1e3;
        printf("relay: %s %.1f ms (delay %d ms)\n", way ? "down" : "up", ms,
               delay_ms);
        ck_assert_msg(ms >= delay_ms - 1 && ms < delay_ms + 30,
                      "%s took %.1f ms", way ? "down" : "up", ms);
    }
    close(c);
    close(s);
    close(lfd);
}
END_TEST

/*
 * Pumps n client connections' data to the server for secs: the bytes the
 * server received on each (nonblocking, one loop for all).
 */
static void pump(int lfd, int n, double secs, long long *got)
{
    int c[4], s[4];
    static char buf[1 << 16];
    struct pollfd p[8];
    for (int i = 0; i < n; i++) {
        c[i] = client_connect();
        s[i] = server_accept(lfd);
        fcntl(c[i], F_SETFL, O_NONBLOCK);
        fcntl(s[i], F_SETFL, O_NONBLOCK);
        got[i] = 0;
    }
    double end = now_s() + secs;
    while (now_s() < end) {
        for (int i = 0; i < n; i++) {
            p[2 * i] = (struct pollfd){.fd = c[i], .events = POLLOUT};
            p[2 * i + 1] = (struct pollfd){.fd = s[i], .events = POLLIN};
        }
        ck_assert_int_ge(poll(p, (nfds_t)(2 * n), 10), 0);
        for (int i = 0; i < n; i++) {
            if (p[2 * i].revents & POLLOUT)
                ck_assert_int_gt(send(c[i], buf, sizeof(buf), 0), 0);
            ssize_t r = recv(s[i], buf, sizeof(buf), 0);
            ck_assert(r > 0 || (r < 0 && errno == EAGAIN));
            if (r > 0)
                got[i] += r;
        }
    }
    for (int i = 0; i < n; i++) {
        close(c[i]);
        close(s[i]);
    }
}

/*
 * One connection moves WINDOW_KB per DELAY_MS (within a delay's worth of
 * the run, and less only by the first delay); two move that much each:
 * the window is per connection, as TCP's is per stream.
 */
START_TEST(test_relay_window)
{
    const int delay_ms = 50, window_kb = 64;
    const double secs = 1.5;
    double bound = window_kb * 1024.0 / (delay_ms / 1e3); /* bytes/s */
    int lfd = server_listen();
    relay(delay_ms, window_kb);
    for (int n = 1; n <= 2; n++) {
        long long got[4], all = 0;
        pump(lfd, n, secs, got);
        for (int i = 0; i < n; i++) {
            double r = got[i] / secs / bound;
            printf("relay: %d connection%s: #%d %.3f MB/s, %.3f of the "
                   "window's bound %.3f MB/s\n",
                   n, n > 1 ? "s" : "", i, got[i] / secs / 1e6, r, bound / 1e6);
            ck_assert_msg(r <= 1.0 + delay_ms / 1e3 / secs + 0.01,
                          "%.3f of the bound", r);
            ck_assert_msg(r >= 0.75, "%.3f of the bound", r);
            all += got[i];
        }
        ck_assert_double_ge(all / secs / bound, 0.75 * n);
    }
    close(lfd);
}
END_TEST

/*
 * A half-close crosses the relay after the bytes before it, and the other
 * way goes on until its own end.
 */
START_TEST(test_relay_half_close)
{
    int lfd = server_listen();
    relay(20, 64);
    int c = client_connect();
    int s = server_accept(lfd);
    char buf[16];
    ck_assert_int_eq(send(c, "abc", 3, 0), 3);
    ck_assert_int_eq(shutdown(c, SHUT_WR), 0);
    ck_assert_int_eq(recv_exact(s, buf, 3, 2000), 0);
    ck_assert_int_eq(memcmp(buf, "abc", 3), 0);
    ck_assert_int_eq(recv_within(s, buf, sizeof(buf), 2000), 0); /* EOF */
    ck_assert_int_eq(send(s, "xyz", 3, 0), 3);
    ck_assert_int_eq(recv_exact(c, buf, 3, 2000), 0);
    ck_assert_int_eq(memcmp(buf, "xyz", 3), 0);
    ck_assert_int_eq(send(s, "more", 4, 0), 4);
    ck_assert_int_eq(close(s), 0);
    ck_assert_int_eq(recv_exact(c, buf, 4, 2000), 0);
    ck_assert_int_eq(memcmp(buf, "more", 4), 0);
    ck_assert_int_eq(recv_within(c, buf, sizeof(buf), 2000), 0); /* EOF */
    close(c);
    close(lfd);
    char log[128];
    hh_relay_log(&h, 0, log, sizeof(log));
    /* The relay closed both sides when both had ended. */
    for (int i = 0; i < 100; i++) {
        FILE *f = fopen(log, "r");
        char line[512];
        int found = 0;
        while (f && fgets(line, sizeof(line), f))
            found |= strstr(line, "closed (both sides ended): 3 bytes up, "
                                  "7 down") != NULL;
        if (f)
            fclose(f);
        if (found)
            return;
        usleep(10000);
    }
    ck_abort_msg("the relay did not log the connection's end");
}
END_TEST

/*
 * A reset on one side is a reset on the other, at once (not a polite
 * EOF, which a peer would take for a half-close); a target that refuses
 * resets the client.
 */
START_TEST(test_relay_reset)
{
    int lfd = server_listen();
    relay(20, 64);
    int c = client_connect();
    int s = server_accept(lfd);
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    ck_assert_int_eq(setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
    close(s);
    char buf[16];
    ck_assert_int_eq(recv_within(c, buf, sizeof(buf), 2000), -ECONNRESET);
    close(c);
    close(lfd);
    /* Nothing listens at the target now. */
    c = client_connect();
    ck_assert_int_eq(recv_within(c, buf, sizeof(buf), 2000), -ECONNRESET);
    close(c);
}
END_TEST

/*
 * The relay killed: both sides of every connection through it hear at
 * once (EOF or a reset); started again, it relays new connections.
 */
START_TEST(test_relay_killed)
{
    int lfd = server_listen();
    int k = relay(20, 64);
    int c[2], s[2];
    for (int i = 0; i < 2; i++) {
        c[i] = client_connect();
        s[i] = server_accept(lfd);
    }
    hh_relay_kill(&h, k);
    char buf[16];
    for (int i = 0; i < 2; i++) {
        ssize_t a = recv_within(c[i], buf, sizeof(buf), 2000);
        ssize_t b = recv_within(s[i], buf, sizeof(buf), 2000);
        ck_assert_msg(a == 0 || a == -ECONNRESET, "client %d: %zd", i, a);
        ck_assert_msg(b == 0 || b == -ECONNRESET, "server %d: %zd", i, b);
        close(c[i]);
        close(s[i]);
    }
    ck_assert_int_eq(hh_relay_start(&h, k), 0);
    int c2 = client_connect();
    int s2 = server_accept(lfd);
    ck_assert_int_eq(send(c2, "ok", 2, 0), 2);
    ck_assert_int_eq(recv_exact(s2, buf, 2, 2000), 0);
    close(c2);
    close(s2);
    close(lfd);
}
END_TEST

/* Exit status and stderr of the relay with these arguments. */
static int run_relay(const char *const *args, char *err, size_t len)
{
    const char *relay_bin = getenv("PREDUCE_HOSTS_RELAY");
    char cmd[512];
    int off = snprintf(cmd, sizeof(cmd), "%s",
                       relay_bin ? relay_bin : "build/tests/hosts/relay");
    for (int i = 0; args[i]; i++)
        off += snprintf(cmd + off, sizeof(cmd) - (size_t)off, " '%s'", args[i]);
    snprintf(cmd + off, sizeof(cmd) - (size_t)off, " 2>&1");
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(err, 1, len - 1, f);
    err[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Bad arguments: exit 2, saying which and how it is used. */
START_TEST(test_relay_bad_args)
{
    static const char *const bad[][5] = {
        {NULL},
        {"10.77.0.1:7100", "10.77.0.1:1", "5", NULL},
        {"10.77.0.1", "10.77.0.1:1", "5", "64", NULL},
        {"10.77.0.1:7100", "10.77.0.1:0", "5", "64", NULL},
        {"10.77.0.1:70000", "10.77.0.1:1", "5", "64", NULL},
        {"host:7100", "10.77.0.1:1", "5", "64", NULL},
        {"10.77.0.1:7100", "10.77.0.1:1", "-1", "64", NULL},
        {"10.77.0.1:7100", "10.77.0.1:1", "5ms", "64", NULL},
        {"10.77.0.1:7100", "10.77.0.1:1", "5", "0", NULL},
        {"10.77.0.1:7100", "10.77.0.1:1", "5", "2000000", NULL},
    };
    char err[2048];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int st = run_relay(bad[i], err, sizeof(err));
        ck_assert_msg(st == 2, "case %zu: exit %d", i, st);
        ck_assert_msg(strstr(err, "usage: relay LISTEN_HOST:PORT"),
                      "case %zu: %s", i, err);
        ck_assert_msg(strstr(err, "relay: bad ") ||
                          strstr(err, "relay: expected 4 arguments"),
                      "case %zu: %s", i, err);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hosts_relay");
    TCase *tc = tcase_create("relay");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_relay_delay);
    tcase_add_test(tc, test_relay_window);
    tcase_add_test(tc, test_relay_half_close);
    tcase_add_test(tc, test_relay_reset);
    tcase_add_test(tc, test_relay_killed);
    tcase_add_test(tc, test_relay_bad_args);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
