/* SPDX-License-Identifier: MIT */
/*
 * The daemon's file descriptor limit (daemon/base/fdlimit.c, main.c): a
 * preduced started with a soft RLIMIT_NOFILE of 256 raises it to its hard
 * limit (here 4096, below the 65536 it asks for) and logs it; one whose
 * hard limit is 1000 raises it to 1000 and warns that connections may be
 * refused; one already at its hard limit keeps it. The limits are set in the
 * test's own (forked) process, which the daemon inherits, as a unit's
 * LimitNOFILE= would give them.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/integration/cli_fixture.h"
#include "tests/check_run.h"

/* The soft and hard "Max open files" of pid from /proc. */
static void proc_nofile(pid_t pid, unsigned long *soft, unsigned long *hard)
{
    char path[64], text[8192];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    cli_read_into(path, text, sizeof(text));
    const char *line = strstr(text, "Max open files");
    ck_assert_ptr_nonnull(line);
    ck_assert_int_eq(sscanf(line, "Max open files %lu %lu", soft, hard), 2);
}

/* A scheduler started with RLIMIT_NOFILE soft/hard. */
static void start_with(rlim_t soft, rlim_t hard)
{
    struct rlimit rl = {soft, hard};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    const char *args[] = {"--role", "scheduler",
                          "--set",  "scheduler.listen=127.0.0.1:0",
                          "--set",  "node.socket=/nonexistent/unused.sock",
                          NULL};
    cli_daemon_start(args);
}

START_TEST(test_fdlimit_raised_to_hard)
{
    start_with(256, 4096);
    cli_wait_log("file descriptors: limit raised from 256 to 4096\n", 1);
    unsigned long soft, hard;
    proc_nofile(cli_daemon_pid, &soft, &hard);
    ck_assert_uint_eq(soft, 4096);
    ck_assert_uint_eq(hard, 4096);
    ck_assert_int_eq(cli_log_count("file descriptors: only"), 0);
    cli_daemon_stop();
}
END_TEST

START_TEST(test_fdlimit_low_hard_warns)
{
    start_with(256, 1000);
    cli_wait_log("file descriptors: limit raised from 256 to 1000\n", 1);
    cli_wait_log("file descriptors: only 1000 (RLIMIT_NOFILE)", 1);
    unsigned long soft, hard;
    proc_nofile(cli_daemon_pid, &soft, &hard);
    ck_assert_uint_eq(soft, 1000);
    cli_daemon_stop();
}
END_TEST

/* A soft limit already at the hard one (as raised as it goes) is kept. */
START_TEST(test_fdlimit_high_enough_untouched)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    start_with(rl.rlim_max, rl.rlim_max);
    unsigned long soft, hard;
    proc_nofile(cli_daemon_pid, &soft, &hard);
    ck_assert_uint_eq(soft, hard);
    ck_assert_int_eq(cli_log_count("limit raised"), 0);
    cli_daemon_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fdlimit");
    TCase *tc = tcase_create("fdlimit");
    tcase_add_unchecked_fixture(tc, cli_top_setup, cli_top_teardown);
    tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fdlimit_raised_to_hard);
    tcase_add_test(tc, test_fdlimit_low_hard_warns);
    tcase_add_test(tc, test_fdlimit_high_enough_untouched);
    suite_add_tcase(s, tc);
    return check_run(s);
}
