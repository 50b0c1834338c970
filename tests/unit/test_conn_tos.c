/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for pr_conn_lowdelay (daemon/base/conn_tos.c): a TCP conn
 * over IPv4 loopback gets IPTOS_LOWDELAY in IP_TOS, over IPv6 in
 * IPV6_TCLASS, and an IPv6 socket that carries IPv4 (a dual-stack
 * listener's) in IP_TOS; each the socket priority a host's pfifo_fast
 * sends first. A conn with no socket yet and a Unix socket conn are
 * refused with their errno, and the socket is left as it was.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/conn.h"
#include "daemon/base/log.h"
#include "tests/check_run.h"

static int closed;

static int on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    (void)c;
    (void)m;
    return 0;
}

static void on_close(struct pr_conn *c, int status)
{
    (void)c;
    (void)status;
    closed++;
}

static const struct pr_conn_ops ops = {.on_msg = on_msg, .on_close = on_close};

/* The ways a daemon's TCP socket can be. */
enum { V4, V6, MAPPED, NKINDS };

/*
 * A connected TCP socket on loopback, the other end closed: V4 and V6
 * the dialling end; MAPPED the accepting end of a dual-stack IPv6
 * listener that an IPv4 peer dialled (an AF_INET6 socket carrying IPv4,
 * as with a listen address of [::]). -1 when the family has no loopback
 * here.
 */
static int loopback_socket(int kind)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (kind == V4) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = kind == V6 ? in6addr_loopback : in6addr_any;
        len = sizeof(*a);
    }
    int l = socket(ss.ss_family, SOCK_STREAM, 0), no = 0;
    if (l < 0)
        return -1;
    if ((kind == MAPPED &&
         setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no)) < 0) ||
        bind(l, (struct sockaddr *)&ss, len) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&ss, &len) < 0) {
        close(l);
        return -1;
    }
    if (kind == MAPPED) { /* dial it over IPv4 */
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port =
                                    ((struct sockaddr_in6 *)&ss)->sin6_port};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ss = (struct sockaddr_storage){0};
        memcpy(&ss, &a, sizeof(a));
        len = sizeof(a);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&ss, len), 0);
    int a = accept(l, NULL, NULL);
    ck_assert_int_ge(a, 0);
    close(l);
    if (kind == MAPPED) {
        close(fd);
        return a;
    }
    close(a);
    return fd;
}

/* c closed and freed through the loop. */
static void conn_done(uv_loop_t *loop, struct pr_conn *c)
{
    int before = closed;
    pr_conn_close(c, 0);
    while (closed == before)
        uv_run(loop, UV_RUN_ONCE);
    uv_run(loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* An int socket option of fd. */
static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof(v);
    ck_assert_int_eq(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

/*
 * The byte the packets carry (IP_TOS for IPv4, through an IPv6 socket
 * too; IPV6_TCLASS for IPv6), and the priority the host's queue goes by
 * (TC_PRIO_INTERACTIVE, 6), both set; skipped where there is no IPv6.
 */
START_TEST(test_conn_tos_marks_tcp)
{
    int fd = loopback_socket(_i);
    if (fd < 0 && _i != V4)
        return; /* no IPv6 in this namespace */
    ck_assert_int_ge(fd, 0);
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_conn *c = pr_conn_create_tcp(&loop, 1024, &ops, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(uv_tcp_open(&c->h.tcp, fd), 0);
    int level = _i == V6 ? IPPROTO_IPV6 : IPPROTO_IP;
    int name = _i == V6 ? IPV6_TCLASS : IP_TOS;
    ck_assert_int_eq(sockopt(fd, level, name), 0);
    ck_assert_int_eq(sockopt(fd, SOL_SOCKET, SO_PRIORITY), 0);
    ck_assert_int_eq(pr_conn_lowdelay(c), 0);
    ck_assert_int_eq(sockopt(fd, level, name), IPTOS_LOWDELAY);
    ck_assert_int_eq(sockopt(fd, SOL_SOCKET, SO_PRIORITY), 6);
    conn_done(&loop, c);
}
END_TEST

/* No socket yet: -EBADF, and nothing else happens to the conn. */
START_TEST(test_conn_tos_no_socket)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_conn *c = pr_conn_create_tcp(&loop, 1024, &ops, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(pr_conn_lowdelay(c), -EBADF);
    conn_done(&loop, c);
}
END_TEST

/* A Unix socket conn (a trainer's): -EAFNOSUPPORT, its socket untouched. */
START_TEST(test_conn_tos_unix_refused)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_conn *c = pr_conn_create_pipe(&loop, 1024, &ops, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(uv_pipe_open(&c->h.pipe, sv[0]), 0);
    ck_assert_int_eq(pr_conn_lowdelay(c), -EAFNOSUPPORT);
    int prio = -1;
    socklen_t len = sizeof(prio);
    ck_assert_int_eq(getsockopt(sv[0], SOL_SOCKET, SO_PRIORITY, &prio, &len),
                     0);
    ck_assert_int_eq(prio, 0);
    conn_done(&loop, c);
    close(sv[1]);
}
END_TEST

static Suite *conn_tos_suite(void)
{
    Suite *s = suite_create("conn_tos");
    TCase *tc = tcase_create("tos");
    tcase_add_loop_test(tc, test_conn_tos_marks_tcp, 0, NKINDS);
    tcase_add_test(tc, test_conn_tos_no_socket);
    tcase_add_test(tc, test_conn_tos_unix_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(conn_tos_suite());
}
