/* SPDX-License-Identifier: MIT */
/*
 * preduced's messages to systemd (daemon/main.c), without systemd: the
 * test plays the service manager, a datagram socket named in NOTIFY_SOCKET,
 * and reads what the real daemon sends there. READY=1 once it serves,
 * WATCHDOG=1 every half of WATCHDOG_USEC from its loop while it runs (none
 * without WATCHDOG_USEC), STOPPING=1 on SIGTERM. Every wait has a deadline.
 */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/integration/cli_fixture.h"
#include "tests/check_run.h"

/* The manager's end: a bound datagram socket at cli_dir/notify. */
static int manager_open(void)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cli_path("notify"));
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", sa.sun_path, 1), 0);
    return fd;
}

/*
 * Counts the datagrams holding `what` among those that arrive within
 * `ms` milliseconds, stopping early once `enough` have.
 */
static int count_within(int fd, const char *what, int enough, int ms)
{
    int n = 0;
    for (double end = cli_now_s() + ms / 1000.0; n < enough;) {
        int left = (int)((end - cli_now_s()) * 1000);
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        char msg[512];
        ssize_t len = recv(fd, msg, sizeof(msg) - 1, 0);
        ck_assert_int_gt(len, 0);
        msg[len] = '\0';
        if (strstr(msg, what))
            n++;
    }
    return n;
}

static const char *const sched_args[] = {"--role", "scheduler", "--set",
                                         "scheduler.listen=127.0.0.1:0", NULL};

START_TEST(test_notify_watchdog)
{
    int fd = manager_open();
    ck_assert_int_eq(setenv("WATCHDOG_USEC", "100000", 1), 0);
    unsetenv("WATCHDOG_PID");
    const char *log = cli_path("daemon.log");
    cli_daemon_pid = cli_spawn(sched_args, log, log);
    ck_assert_int_eq(count_within(fd, "READY=1", 1, 5000), 1);
    /* A ping every 50 ms: 5 of them come well within 2 s. */
    ck_assert_int_eq(count_within(fd, "WATCHDOG=1", 5, 2000), 5);
    cli_wait_log("systemd watchdog: WATCHDOG=1 every 50 ms", 1);
    ck_assert_int_eq(kill(cli_daemon_pid, SIGTERM), 0);
    ck_assert_int_eq(count_within(fd, "STOPPING=1", 1, 5000), 1);
    /* Stopped cleanly: the timer's handle was closed with the rest. */
    ck_assert_int_eq(cli_wait_exit(cli_daemon_pid, CLI_RUN_TIMEOUT_MS), 0);
    cli_daemon_pid = 0;
    close(fd);
}
END_TEST

START_TEST(test_notify_no_watchdog_without_usec)
{
    int fd = manager_open();
    unsetenv("WATCHDOG_USEC");
    const char *log = cli_path("daemon.log");
    cli_daemon_pid = cli_spawn(sched_args, log, log);
    ck_assert_int_eq(count_within(fd, "READY=1", 1, 5000), 1);
    ck_assert_int_eq(count_within(fd, "WATCHDOG=1", 1, 300), 0);
    cli_daemon_stop();
    ck_assert_int_eq(cli_log_count("systemd watchdog"), 0);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("sd_notify");
    tcase_add_unchecked_fixture(tc, cli_top_setup, cli_top_teardown);
    tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_notify_watchdog);
    tcase_add_test(tc, test_notify_no_watchdog_without_usec);
    suite_add_tcase(s, tc);
    return check_run(s);
}
