/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the log's rate limit (daemon/base/log_limit.c): a flood
 * of one message is cut to log.burst lines an interval plus one line that
 * counts the rest, other messages still get through, and the counts are
 * right with several threads logging at once; a message's control bytes
 * are escaped, so a name from a peer cannot forge a line, and a long one
 * is cut. The clock is the test's; stderr is a temporary file read back.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/base/log_int.h"
#include "tests/check_run.h"

static uint64_t clock_ms = 1000;
static uint64_t test_clock(void)
{
    return clock_ms;
}

static FILE *captured;

static void setup(void)
{
    captured = tmpfile();
    ck_assert_ptr_nonnull(captured);
    ck_assert_int_ge(dup2(fileno(captured), STDERR_FILENO), 0);
    clock_ms = 1000;
    pr_log_limit_set_clock(test_clock);
    pr_log_set_level(PR_LOG_INFO);
    pr_log_set_limit(5, 1000);
}

/* Lines written so far containing needle, summaries not counted. */
static int count(const char *needle)
{
    char line[1200];
    int n = 0;
    fflush(captured);
    rewind(captured);
    while (fgets(line, sizeof(line), captured))
        if (strstr(line, needle) && !strstr(line, "suppressed"))
            n++;
    fseek(captured, 0, SEEK_END);
    return n;
}

/* Summary lines written so far. */
static int summaries(void)
{
    char line[1200];
    int n = 0;
    fflush(captured);
    rewind(captured);
    while (fgets(line, sizeof(line), captured))
        n += strstr(line, "similar messages suppressed") != NULL;
    fseek(captured, 0, SEEK_END);
    return n;
}

/* The count in the last "N similar messages suppressed" line with needle. */
static long long suppressed(const char *needle, double *secs)
{
    char line[1200];
    long long n = -1;
    rewind(captured);
    while (fgets(line, sizeof(line), captured)) {
        const char *p = strstr(line, "] ");
        if (p && strstr(line, "similar messages suppressed") &&
            strstr(line, needle))
            sscanf(p + 2, "%lld similar messages suppressed in %lf s", &n,
                   secs);
    }
    fseek(captured, 0, SEEK_END);
    return n;
}

START_TEST(test_log_under_burst_all_written)
{
    for (int i = 0; i < 5; i++)
        pr_info("calm %d", i);
    ck_assert_int_eq(count("calm "), 5);
    ck_assert_int_eq(summaries(), 0);
}
END_TEST

START_TEST(test_log_flood_cut_and_counted_on_next_line)
{
    for (int i = 0; i < 1000; i++)
        pr_warn("flood from peer %d", i);
    ck_assert_int_eq(count("flood from peer"), 5);
    ck_assert_int_eq(summaries(), 0); /* the interval runs on */
    clock_ms += 1500;
    pr_warn("flood from peer %d", 1000);
    double secs = 0;
    ck_assert_int_eq(suppressed("flood from peer %d", &secs), 995);
    ck_assert(secs > 1.49 && secs < 1.51);
    ck_assert_int_eq(count("flood from peer 1000"), 1);
    /* The line that ended the interval is the first of the next. */
    for (int i = 0; i < 10; i++)
        pr_warn("flood from peer %d", i);
    ck_assert_int_eq(count("flood from peer"), 5 + 1 + 4);
    ck_assert_int_eq(summaries(), 1);
}
END_TEST

START_TEST(test_log_other_kinds_get_through)
{
    for (int i = 0; i < 100; i++) {
        pr_warn("flood %d", i);
        if (i % 20 == 0)
            pr_info("heartbeat %d", i);
    }
    ck_assert_int_eq(count("flood "), 5);
    ck_assert_int_eq(count("heartbeat "), 5);
    pr_err("once");
    ck_assert_int_eq(count("once"), 1);
    /* An operator's action is logged in full. */
    for (int i = 0; i < 30; i++)
        pr_log_all(PR_LOG_INFO, "conf: key%d changed", i);
    ck_assert_int_eq(count("conf: key"), 30);
    ck_assert_int_eq(summaries(), 0);
}
END_TEST

START_TEST(test_log_flush_reports_a_stopped_flood)
{
    for (int i = 0; i < 42; i++)
        pr_warn("stopped %d", i);
    pr_log_limit_flush(); /* the interval has not ended */
    ck_assert_int_eq(summaries(), 0);
    clock_ms += 1000;
    pr_log_limit_flush();
    double secs = 0;
    ck_assert_int_eq(suppressed("stopped %d", &secs), 37);
    pr_log_limit_flush(); /* said once */
    clock_ms += 5000;
    pr_log_limit_flush();
    ck_assert_int_eq(summaries(), 1);
}
END_TEST

START_TEST(test_log_limit_off_and_level)
{
    pr_log_set_limit(0, 1000);
    for (int i = 0; i < 300; i++)
        pr_info("all %d", i);
    ck_assert_int_eq(count("all "), 300);
    /* Lines below the level are neither written nor counted. */
    pr_log_set_limit(2, 1000);
    for (int i = 0; i < 50; i++)
        pr_dbg("quiet %d", i);
    clock_ms += 2000;
    pr_log_limit_flush();
    ck_assert_int_eq(count("quiet"), 0);
}
END_TEST

#define THREADS 4
#define EACH    5000

static void *flood_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < EACH; i++)
        pr_warn("threaded %d", i);
    return NULL;
}

START_TEST(test_log_counts_right_across_threads)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, flood_thread, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    clock_ms += 1000;
    pr_log_limit_flush();
    double secs = 0;
    ck_assert_int_eq(count("threaded "), 5);
    ck_assert_int_eq(suppressed("threaded %d", &secs), THREADS * EACH - 5);
}
END_TEST

/* The whole of what was written to stderr so far, into buf. */
static size_t written(char *buf, size_t cap)
{
    fflush(captured);
    rewind(captured);
    size_t n = fread(buf, 1, cap - 1, captured);
    buf[n] = '\0';
    fseek(captured, 0, SEEK_END);
    return n;
}

START_TEST(test_log_control_bytes_escaped)
{
    char buf[4096];
    /* A worker name that tries to end the line and start a forged one. */
    pr_log(PR_LOG_WARN, "worker '%s' joined",
           "w1\n12:00:00.000 forged\x1b[2J\x7f");
    size_t n = written(buf, sizeof(buf));
    ck_assert_uint_gt(n, 0);
    ck_assert_int_eq(buf[n - 1], '\n');
    ck_assert_ptr_eq(strchr(buf, '\n'), buf + n - 1); /* one line */
    ck_assert_ptr_null(strchr(buf, '\x1b'));
    ck_assert_ptr_nonnull(strstr(
        buf, "worker 'w1\\x0a12:00:00.000 forged\\x1b[2J\\x7f' joined\n"));
}
END_TEST

START_TEST(test_log_long_line_cut_whole)
{
    char buf[4096], msg[3000];
    memset(msg, 'a', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    /* Escapes where the cut falls: it never takes half of one. */
    memset(msg + 900, '\t', 200);
    pr_log(PR_LOG_WARN, "%s", msg);
    size_t n = written(buf, sizeof(buf));
    ck_assert_uint_le(n, 1024);
    ck_assert_uint_ge(n, 1021);
    ck_assert_ptr_eq(strchr(buf, '\n'), buf + n - 1);
    ck_assert_ptr_null(strchr(buf, '\t'));
    ck_assert_str_eq(strrchr(buf, '\\'), "\\x09\n");
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("limit");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_log_under_burst_all_written);
    tcase_add_test(tc, test_log_flood_cut_and_counted_on_next_line);
    tcase_add_test(tc, test_log_other_kinds_get_through);
    tcase_add_test(tc, test_log_flush_reports_a_stopped_flood);
    tcase_add_test(tc, test_log_limit_off_and_level);
    tcase_add_test(tc, test_log_counts_right_across_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("escape");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_log_control_bytes_escaped);
    tcase_add_test(tc, test_log_long_line_cut_whole);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(log_suite());
}
