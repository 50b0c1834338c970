/* SPDX-License-Identifier: MIT */
/*
 * A node and its scheduler tell each other their heartbeat settings
 * (scheduler.heartbeat_ms and node_timeout_ms, in the Hello and the
 * Welcome): when they differ, both logs say which and how, since each
 * side judges the other by its own timeout while the other pings at its
 * own period; when they agree, neither says anything.
 */
#include <check.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/base/hello.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static struct h_cluster c;

/* Polls who's log for up to 5 s. */
static int says(const char *who, const char *s)
{
    for (int i = 0; i < 500; i++) {
        if (h_log_contains(&c, who, s))
            return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

START_TEST(test_timing_differs_logged_on_both_sides)
{
    const char *const sched[] = {"scheduler.heartbeat_ms=500",
                                 "scheduler.node_timeout_ms=4000", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, NULL), 0);
    ck_assert(says("sched",
                   "settings differ (scheduler.heartbeat_ms 500 here, "
                   "1000 there; scheduler.node_timeout_ms 4000 here, 5000 "
                   "there)"));
    ck_assert(says("node0", "settings differ (scheduler.heartbeat_ms 1000 "
                            "here, 500 there; scheduler.node_timeout_ms "
                            "5000 here, 4000 there)"));
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_timing_alike_not_logged)
{
    const char *const same[] = {"scheduler.heartbeat_ms=500", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, same, same), 0);
    ck_assert(says("sched", "(node0) joined"));
    ck_assert(says("node0", "joined job"));
    ck_assert(!h_log_contains(&c, "sched", "settings differ"));
    ck_assert(!h_log_contains(&c, "node0", "settings differ"));
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* The comparison itself: what differs, and silence from an older peer. */
START_TEST(test_timing_compare)
{
    char b[160];
    ck_assert_int_eq(
        pr_hello_timing_differs(1000, 5000, 1000, 5000, b, sizeof(b)), 0);
    ck_assert_str_eq(b, "");
    ck_assert_int_eq(pr_hello_timing_differs(1000, 5000, 0, 0, b, sizeof(b)),
                     0);
    ck_assert_int_eq(
        pr_hello_timing_differs(1000, 5000, 200, 5000, b, sizeof(b)), 1);
    ck_assert_str_eq(b, "scheduler.heartbeat_ms 1000 here, 200 there");
    ck_assert_int_eq(
        pr_hello_timing_differs(1000, 5000, 1000, 900, b, sizeof(b)), 1);
    ck_assert_str_eq(b, "scheduler.node_timeout_ms 5000 here, 900 there");
    /* A short buffer is cut, never overrun. */
    ck_assert_int_eq(pr_hello_timing_differs(1000, 5000, 2, 3, b, 10), 1);
    ck_assert_str_eq(b, "scheduler");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_timing");
    TCase *tc = tcase_create("timing");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_timing_differs_logged_on_both_sides);
    tcase_add_test(tc, test_timing_alike_not_logged);
    tcase_add_test(tc, test_timing_compare);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
