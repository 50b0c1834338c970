/* SPDX-License-Identifier: MIT */
/*
 * SIGHUP reloads of a running preduced (daemon/main.c, daemon/base/conf.c's
 * pr_conf_reload), on the real binary: a changed reloadable key that
 * /metrics shows, a key that needs a restart, the log level, broken files
 * that are refused while the daemon keeps serving, a file that lost keys,
 * --set overrides that outlive a reload, and a daemon without a file.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/cli_fixture.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/* The path daemon/main.c falls back to without -c. */
#define DEFAULT_CONF "/etc/preduce/preduced.conf"

/* The dynamic policy's window from /metrics, in ms. */
static double window_ms(uint16_t port)
{
    char *m = h_metrics_fetch(port);
    ck_assert_ptr_nonnull(m);
    double w = h_metric(m, "preduce_sched_window_seconds ") * 1000;
    free(m);
    return w;
}

/* A scheduler config with a dynamic window and metrics on port. */
static const char *sched_conf(uint16_t port, const char *window,
                              const char *extra)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "role = scheduler\n"
             "[scheduler]\n"
             "listen = 127.0.0.1:0\n"
             "policy = dynamic\n"
             "window_ms = %s\n"
             "%s"
             "[metrics]\n"
             "listen = 127.0.0.1:%u\n",
             window, extra, port);
    return cli_write_file("sched.conf", text);
}

START_TEST(test_cli_reload)
{
    uint16_t port = h_free_port();
    const char *conf = sched_conf(port, "5", "");
    const char *args[] = {"-c", conf, NULL};
    cli_daemon_start(args);
    ck_assert_double_eq_tol(window_ms(port), 5, 1e-6);

    char reloaded[400], refused[400], want[700];
    snprintf(reloaded, sizeof(reloaded), "reloaded %s: ", conf);
    snprintf(refused, sizeof(refused),
             "reload of %s refused, old configuration kept: ", conf);

    /* A reloadable key takes effect; one that needs a restart does not. */
    sched_conf(port, "7", "heartbeat_ms = 1500\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    cli_wait_log(want, 1);
    ck_assert_int_eq(cli_log_count("conf: scheduler.window_ms: 5 -> 7\n"), 1);
    ck_assert_int_eq(
        cli_log_count("conf: scheduler.heartbeat_ms: 1000 -> 1500 needs a "
                      "restart\n"),
        1);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    /*
     * log.level = warn: the change is logged at the old level, then the
     * "reloaded" line (info) is not. The next reload's error line shows
     * that this one was done by then.
     */
    sched_conf(port, "7", "heartbeat_ms = 1500\n[log]\nlevel = warn\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    cli_wait_log("conf: log.level: info -> warn\n", 1);

    /* Broken files: refused with the reason; the old values stay. */
    cli_write_file("sched.conf", "role = scheduler\n"
                                 "[scheduler]\n"
                                 "policy = dynamic\n"
                                 "window_ms 9\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want),
             "%sline 4: expected 'name = value' or '[section]'\n", refused);
    cli_wait_log(want, 1);
    ck_assert_int_eq(cli_log_count(reloaded), 1);

    sched_conf(port, "20", "[log]\nlevel = warn\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want),
             "%sscheduler.window_ms: window_ms 20 is above window_max_ms "
             "10\n",
             refused);
    cli_wait_log(want, 1);

    ck_assert_int_eq(unlink(conf), 0);
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "%sfopen(%s): No such file or directory\n",
             refused, conf);
    cli_wait_log(want, 1);

    /* Still running, still serving, still at the last good values. */
    ck_assert_int_eq(waitpid(cli_daemon_pid, NULL, WNOHANG), 0);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    /* Back to info: this reload's own line shows again. */
    sched_conf(port, "7", "heartbeat_ms = 1500\n[log]\nlevel = info\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    cli_wait_log(want, 2);
    ck_assert_int_eq(cli_log_count(reloaded), 2);
    cli_daemon_stop();
}
END_TEST

/*
 * A file that lost keys the running one had from its file (an empty file:
 * a truncated save) is refused, naming the first, and nothing changes;
 * the same file saying reload_missing = default is applied.
 */
START_TEST(test_cli_reload_refuses_lost_keys)
{
    uint16_t port = h_free_port();
    const char *conf = sched_conf(port, "7", "group_size = 4\n");
    const char *args[] = {"-c", conf, NULL};
    cli_daemon_start(args);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    cli_write_file("sched.conf", "");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    char want[700];
    snprintf(want, sizeof(want),
             "reload of %s refused, old configuration kept: role: set by "
             "the file before, missing now (and 5 more keys): a truncated "
             "file? reload_missing = default returns such keys to "
             "defaults\n",
             conf);
    cli_wait_log(want, 1);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    /* Said to be meant: the window returns to its default of 5 ms. */
    char text[512];
    snprintf(text, sizeof(text),
             "role = scheduler\n"
             "reload_missing = default\n"
             "[scheduler]\n"
             "listen = 127.0.0.1:0\n"
             "policy = dynamic\n"
             "[metrics]\n"
             "listen = 127.0.0.1:%u\n",
             port);
    cli_write_file("sched.conf", text);
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "reloaded %s: 3 keys changed\n", conf);
    cli_wait_log(want, 1);
    ck_assert_int_eq(cli_log_count("conf: scheduler.window_ms: 7 -> 5\n"), 1);
    ck_assert_double_eq_tol(window_ms(port), 5, 1e-6);
    cli_daemon_stop();
}
END_TEST

START_TEST(test_cli_reload_keeps_set)
{
    /* A --set still beats the file after a reload. */
    uint16_t port = h_free_port();
    const char *conf = sched_conf(port, "5", "");
    const char *args[] = {"-c", conf, "--set", "scheduler.window_ms=3", NULL};
    cli_daemon_start(args);
    ck_assert_double_eq_tol(window_ms(port), 3, 1e-6);

    sched_conf(port, "7", "group_size = 4\n");
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    char want[400];
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    cli_wait_log(want, 1);
    ck_assert_int_eq(cli_log_count("conf: scheduler.group_size: 2 -> 4\n"), 1);
    ck_assert_int_eq(cli_log_count("scheduler.window_ms"), 0);
    ck_assert_double_eq_tol(window_ms(port), 3, 1e-6);
    cli_daemon_stop();
}
END_TEST

START_TEST(test_cli_reload_without_file)
{
    if (access(DEFAULT_CONF, R_OK) == 0) {
        fprintf(stderr,
                "test_cli_reload_without_file: skipped, %s exists "
                "(preduced would reload it)\n",
                DEFAULT_CONF);
        return;
    }
    uint16_t port = h_free_port();
    char metrics[64];
    snprintf(metrics, sizeof(metrics), "metrics.listen=127.0.0.1:%u", port);
    const char *args[] = {"--role", "scheduler",
                          "--set",  "scheduler.listen=127.0.0.1:0",
                          "--set",  "scheduler.policy=dynamic",
                          "--set",  metrics,
                          NULL};
    cli_daemon_start(args);
    ck_assert_int_eq(kill(cli_daemon_pid, SIGHUP), 0);
    cli_wait_log("SIGHUP: no configuration file to reload\n", 1);
    ck_assert_int_eq(cli_log_count("reloaded"), 0);
    ck_assert_double_eq_tol(window_ms(port), 5, 1e-6);
    cli_daemon_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reload");
    TCase *hup = tcase_create("sighup");
    tcase_add_unchecked_fixture(hup, cli_top_setup, cli_top_teardown);
    tcase_add_checked_fixture(hup, cli_setup, cli_teardown);
    tcase_set_timeout(hup, 30);
    tcase_add_test(hup, test_cli_reload);
    tcase_add_test(hup, test_cli_reload_refuses_lost_keys);
    tcase_add_test(hup, test_cli_reload_keeps_set);
    tcase_add_test(hup, test_cli_reload_without_file);
    suite_add_tcase(s, hup);
    return check_run(s);
}
