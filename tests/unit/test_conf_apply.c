/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/base/conf.c, applying a config: cross-key validation,
 * reload (only reloadable keys move, nothing moves on error) and the dump
 * round trip (test_conf.c: parsing).
 */
#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "tests/unit/conf_fixture.h"
#include "tests/check_run.h"

START_TEST(test_conf_validate_cross_keys)
{
    static const struct {
        const char *set[2];
        const char *key;
    } cases[] = {
        {{"scheduler.group_min=5", "scheduler.group_max=4"},
         "scheduler.group_min"},
        {{"scheduler.window_min_ms=6", NULL}, "scheduler.window_ms"},
        {{"scheduler.window_max_ms=4", NULL}, "scheduler.window_ms"},
        {{"scheduler.staleness_alpha=0", NULL}, "scheduler.staleness_alpha"},
        {{"scheduler.staleness_alpha=1", NULL}, "scheduler.staleness_alpha"},
        {{"scheduler.heartbeat_ms=3000", "scheduler.node_timeout_ms=1000"},
         "scheduler.node_timeout_ms"},
        {{"scheduler.heartbeat_ms=334", "scheduler.node_timeout_ms=1001"},
         "scheduler.node_timeout_ms"},
        {{"node.scheduler=127.0.0.1:0", NULL}, "node.scheduler"},
        {{"node.scheduler=localhost", NULL}, "node.scheduler"},
        {{"node.data_listen=1.2.3.4:65536", NULL}, "node.data_listen"},
        {{"node.data_advertise=h:0", NULL}, "node.data_advertise"},
        {{"scheduler.listen=:7070", NULL}, "scheduler.listen"},
        {{"metrics.listen=0.0.0.0", NULL}, "metrics.listen"},
    };
    for (size_t i = 0; i < NCASES(cases); i++) {
        struct pr_conf c;
        struct pr_conf_err err;
        ck_assert_int_eq(pr_conf_init(&c), 0);
        for (int j = 0; j < 2 && cases[i].set[j]; j++)
            ck_assert_int_eq(pr_conf_set(&c, cases[i].set[j], &err), 0);
        ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
        ck_assert_int_eq(err.line, 0);
        ck_assert_str_eq(err.key, cases[i].key);
        pr_conf_fini(&c);
    }

    /* The edges that are allowed. */
    struct pr_conf c;
    struct pr_conf_err err;
    ck_assert_int_eq(pr_conf_init(&c), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.group_min=4", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.group_max=4", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.window_min_ms=5", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.window_max_ms=5", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "node.data_listen=0.0.0.0:0", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.listen=[::1]:0", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "metrics.listen=[::]:9100", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.heartbeat_ms=333", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.node_timeout_ms=999", &err), 0);
    ck_assert_int_eq(pr_conf_validate(&c, &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.group_max=0", &err), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.group_min=9", &err), 0);
    ck_assert_int_eq(pr_conf_validate(&c, &err), 0);

    /* Structs filled in code get the per-key bounds checked too. */
    c.xport_chunk_kb = 2;
    ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
    ck_assert_str_eq(err.key, "transport.chunk_kb");
    c.xport_chunk_kb = 1024;
    c.xport_inflight = 0;
    ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
    ck_assert_str_eq(err.key, "transport.inflight");
    c.xport_inflight = 8;
    c.sched_group_size = 0;
    ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
    ck_assert_str_eq(err.key, "scheduler.group_size");
    c.sched_group_size = 2;
    c.sched_policy = 7;
    ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
    ck_assert_str_eq(err.key, "scheduler.policy");
    c.sched_policy = PR_POLICY_DYNAMIC;
    ck_assert_int_eq(pr_conf_validate(&c, NULL), 0);
    pr_conf_fini(&c);
}
END_TEST

static const char reload_base[] = "[node]\n"
                                  "name = n1\n"
                                  "reduce_timeout_ms = 1000\n"
                                  "[scheduler]\n"
                                  "policy = constant\n"
                                  "group_size = 4\n";

/* Live config as the daemon holds it: defaults + reload_base + --set. */
static void live_init(struct pr_conf *live, const char *path)
{
    struct pr_conf_err err;

    ck_assert_int_eq(pr_conf_init(live), 0);
    ck_assert_int_eq(pr_conf_load(live, path, &err), 0);
    ck_assert_int_eq(pr_conf_set(live, "transport.inflight=16", &err), 0);
}

START_TEST(test_conf_reload_swaps_reloadable)
{
    static const char *const overrides[] = {"transport.inflight=16",
                                            "scheduler.window_ms=7"};
    char *base = tmpconf(reload_base);
    char *next = tmpconf("[node]\n"
                         "name = n2\n"                /* fixed */
                         "reduce_timeout_ms = 2000\n" /* reloadable */
                         "max_clients = 10\n"         /* fixed */
                         "[scheduler]\n"
                         "policy = dynamic\n"  /* reloadable */
                         "group_size = 4\n"    /* unchanged */
                         "group_max = 6\n"     /* reloadable */
                         "heartbeat_ms = 50\n" /* fixed */
                         "[log]\n"
                         "level = debug\n"); /* reloadable */
    struct pr_conf live, want;
    struct pr_conf_err err;
    int changed = -1;

    live_init(&live, base);
    live_init(&want, base);
    int rc =
        pr_conf_reload(&live, next, overrides, 2, NULL, NULL, &err, &changed);
    ck_assert_msg(rc == 0, "%d: %s: %s", err.line, err.key, err.msg);
    ck_assert_int_eq(changed, 5);
    ck_assert_uint_eq(live.node_reduce_timeout_ms, 2000);
    ck_assert_int_eq(live.sched_policy, PR_POLICY_DYNAMIC);
    ck_assert_uint_eq(live.sched_group_max, 6);
    ck_assert_double_eq(live.sched_window_ms, 7.0);
    ck_assert_int_eq(live.log_level, PR_LOG_DEBUG);
    ck_assert_str_eq(live.node_name, "n1");
    ck_assert_uint_eq(live.node_max_clients, 64);
    ck_assert_uint_eq(live.sched_heartbeat_ms, 1000);
    ck_assert_uint_eq(live.xport_inflight, 16);
    /* And nothing else moved. */
    want.node_reduce_timeout_ms = 2000;
    want.sched_policy = PR_POLICY_DYNAMIC;
    want.sched_group_max = 6;
    want.sched_window_ms = 7;
    want.log_level = PR_LOG_DEBUG;
    assert_conf_eq(&live, &want);

    /* The same file again changes nothing. */
    ck_assert_int_eq(
        pr_conf_reload(&live, next, overrides, 2, NULL, NULL, NULL, &changed),
        0);
    ck_assert_int_eq(changed, 0);
    assert_conf_eq(&live, &want);

    /*
     * Back to the base file, which lacks keys the last file set: refused,
     * the first missing key named, nothing changed (a truncated file).
     */
    changed = -1;
    ck_assert_int_eq(
        pr_conf_reload(&live, base, NULL, 0, NULL, NULL, &err, &changed),
        -EINVAL);
    ck_assert_str_eq(err.key, "node.max_clients");
    ck_assert_msg(strstr(err.msg, "missing now (and 3 more keys)"), "%s",
                  err.msg);
    ck_assert_int_eq(changed, 0);
    assert_conf_eq(&live, &want);

    /*
     * Said to be meant (reload_missing = default), without overrides:
     * reduce_timeout_ms, policy, group_max, window_ms and level change back
     * (and reload_missing itself); the inflight override is gone too, but
     * that key waits for a restart.
     */
    char *meant = tmpconf("reload_missing = default\n"
                          "[node]\n"
                          "name = n1\n"
                          "reduce_timeout_ms = 1000\n"
                          "[scheduler]\n"
                          "policy = constant\n"
                          "group_size = 4\n");
    ck_assert_int_eq(
        pr_conf_reload(&live, meant, NULL, 0, NULL, NULL, &err, &changed), 0);
    ck_assert_int_eq(changed, 6);
    ck_assert_uint_eq(live.xport_inflight, 16);
    ck_assert_int_eq(live.sched_policy, PR_POLICY_CONSTANT);
    ck_assert_uint_eq(live.sched_group_max, 0);
    ck_assert_double_eq(live.sched_window_ms, 5.0);
    ck_assert_int_eq(live.log_level, PR_LOG_INFO);
    ck_assert_uint_eq(live.node_reduce_timeout_ms, 1000);

    /* Then the base file again: it lacks only reload_missing. */
    ck_assert_int_eq(
        pr_conf_reload(&live, base, NULL, 0, NULL, NULL, &err, &changed),
        -EINVAL);
    ck_assert_str_eq(err.key, "reload_missing");

    pr_conf_fini(&live);
    pr_conf_fini(&want);
    rm_tmp(base);
    rm_tmp(next);
    rm_tmp(meant);
}
END_TEST

START_TEST(test_conf_reload_error_leaves_live)
{
    static const struct {
        const char *text; /* NULL: a file that does not exist */
        const char *override;
        int rc;
        int line;
    } cases[] = {
        {"[scheduler]\ngroup_size = 8\ngroup_max = x\n", NULL, -EINVAL, 3},
        {"[scheduler]\ngroup_size = 8\ngroup_max = 70000\n", NULL, -ERANGE, 3},
        {"[scheduler]\ngroup_size = 8\ngroup_min = 5\ngroup_max = 4\n", NULL,
         -EINVAL, 0},
        {"[scheduler]\ngroup_size = 8\n", "scheduler.window_max_ms=1", -EINVAL,
         0},
        {"[scheduler]\ngroup_size = 8\n", "scheduler.bogus=1", -EINVAL, 0},
        {NULL, NULL, -ENOENT, 0},
    };
    char *base = tmpconf(reload_base);

    for (size_t i = 0; i < NCASES(cases); i++) {
        struct pr_conf live, want;
        struct pr_conf_err err;
        int changed = -1;
        char *path = cases[i].text ? tmpconf(cases[i].text)
                                   : strdup("/nonexistent/preduced.conf");
        const char *ov[1] = {cases[i].override};

        live_init(&live, base);
        live_init(&want, base);
        int rc = pr_conf_reload(&live, path, ov, cases[i].override ? 1 : 0,
                                NULL, NULL, &err, &changed);
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc,
                      err.msg);
        ck_assert_int_eq(err.line, cases[i].line);
        ck_assert_int_eq(changed, 0);
        ck_assert_uint_eq(live.sched_group_size, 4);
        assert_conf_eq(&live, &want);
        pr_conf_fini(&live);
        pr_conf_fini(&want);
        rm_tmp(path);
    }
    rm_tmp(base);
}
END_TEST

/* The accept hook: sees the mix, and its refusal leaves live untouched. */
struct accept_probe {
    int calls;
    int rc;
    uint32_t group_max;
    uint32_t heartbeat_ms;
};

static int probe_accept(const struct pr_conf *merged, void *ctx,
                        struct pr_conf_err *err)
{
    struct accept_probe *p = ctx;
    p->calls++;
    p->group_max = merged->sched_group_max;
    p->heartbeat_ms = merged->sched_heartbeat_ms;
    if (p->rc)
        snprintf(err->msg, sizeof(err->msg), "refused by the probe");
    return p->rc;
}

START_TEST(test_conf_reload_accept_decides)
{
    char *base = tmpconf(reload_base);
    char *next = tmpconf("[node]\n"
                         "name = n1\n"
                         "reduce_timeout_ms = 1000\n"
                         "[scheduler]\n"
                         "group_size = 4\n"
                         "policy = dynamic\n" /* reloadable */
                         "group_max = 6\n"    /* reloadable */
                         "heartbeat_ms = 50\n");
    /* fixed */ /* fixed */
    struct pr_conf live, want;
    struct pr_conf_err err;
    struct accept_probe probe = {.rc = -EINVAL};
    int changed = -1;

    live_init(&live, base);
    live_init(&want, base);
    ck_assert_int_eq(pr_conf_reload(&live, next, NULL, 0, probe_accept, &probe,
                                    &err, &changed),
                     -EINVAL);
    ck_assert_int_eq(probe.calls, 1);
    /* It saw the new reloadable value next to the live fixed one. */
    ck_assert_uint_eq(probe.group_max, 6);
    ck_assert_uint_eq(probe.heartbeat_ms, 1000);
    ck_assert_str_eq(err.msg, "refused by the probe");
    ck_assert_int_eq(changed, 0);
    assert_conf_eq(&live, &want);

    probe.rc = 0;
    ck_assert_int_eq(pr_conf_reload(&live, next, NULL, 0, probe_accept, &probe,
                                    &err, &changed),
                     0);
    ck_assert_int_eq(probe.calls, 2);
    ck_assert_int_eq(changed, 2);
    ck_assert_int_eq(live.sched_policy, PR_POLICY_DYNAMIC);
    ck_assert_uint_eq(live.sched_group_max, 6);
    ck_assert_uint_eq(live.sched_heartbeat_ms, 1000);
    pr_conf_fini(&live);
    pr_conf_fini(&want);
    rm_tmp(base);
    rm_tmp(next);
}
END_TEST

START_TEST(test_conf_dump_roundtrip)
{
    static const char *const sets[] = {
        "role=scheduler",
        "job= spaced job ",
        "node.name=\" n1 \"",
        "node.socket=/tmp/p#1.sock",
        "node.data_advertise=[fe80::1%eth0]:7071",
        "node.max_tensor_mb=65536",
        "scheduler.policy=dynamic",
        "scheduler.group_max=16",
        "scheduler.window_ms=0.1",
        "scheduler.window_min_ms=0.001",
        "scheduler.window_max_ms=10000",
        "scheduler.staleness_alpha=0.3333333333333333",
        "scheduler.weighting=staleness",
        "scheduler.isolation_bound=0",
        "scheduler.generator_hold_ms=0.25",
        "scheduler.generator_hold_max_ms=3600000",
        "transport.type=rdma",
        "transport.rdma_device=rxe0",
        "transport.gid_index=0",
        "transport.rdma_timeout=24",
        "security.key_file=\"/etc/preduce/key\"",
        "metrics.listen=0.0.0.0:9100",
        "log.level=error",
    };
    static const char *const order[] = {
        "role =",         "\n[node]\n",    "\n[scheduler]\n", "\n[transport]\n",
        "\n[security]\n", "\n[metrics]\n", "\n[log]\n"};
    struct pr_conf c, back;
    struct pr_conf_err err;
    int nkeys = 0;

    ck_assert_int_eq(pr_conf_init(&c), 0);
    for (size_t i = 0; i < NCASES(sets); i++)
        ck_assert_msg(pr_conf_set(&c, sets[i], &err) == 0, "%s: %s", sets[i],
                      err.msg);
    ck_assert_str_eq(c.node_name, " n1 ");
    ck_assert_str_eq(c.job, "spaced job");
    char *text = dump_text(&c);

    ck_assert_ptr_nonnull(strstr(text, "role = scheduler\n"));
    ck_assert_ptr_nonnull(strstr(text, "window_ms = 0.1\n"));
    ck_assert_ptr_nonnull(strstr(text, "name = \" n1 \"\n"));
    ck_assert_ptr_nonnull(strstr(text, "level = error\n"));
    ck_assert_ptr_null(strstr(text, "[]"));
    for (size_t i = 1; i < NCASES(order); i++) {
        const char *a = strstr(text, order[i - 1]), *b = strstr(text, order[i]);
        ck_assert_msg(a && b && a < b, "%s before %s", order[i - 1], order[i]);
    }
    /* Key lines are the ones that are neither comments nor headers. */
    for (const char *p = text; p; p = strchr(p + 1, '\n'))
        if (p[*p == '\n'] >= 'a' && p[*p == '\n'] <= 'z')
            nkeys++;
    ck_assert_int_eq(nkeys, NKEYS);

    int rc = load_text(&back, text, &err);
    ck_assert_msg(rc == 0, "line %d: %s: %s", err.line, err.key, err.msg);
    ck_assert_str_eq(back.node_name, " n1 ");
    ck_assert_double_eq(back.sched_staleness_alpha, 0.3333333333333333);
    assert_conf_eq(&back, &c);
    pr_conf_fini(&back);

    /* Defaults round-trip as well, the empty strings included. */
    pr_conf_fini(&c);
    ck_assert_int_eq(pr_conf_init(&c), 0);
    free(text);
    text = dump_text(&c);
    ck_assert_ptr_nonnull(strstr(text, "data_advertise = \n"));
    ck_assert_int_eq(load_text(&back, text, &err), 0);
    assert_conf_eq(&back, &c);
    pr_conf_fini(&back);
    pr_conf_fini(&c);
    free(text);
}
END_TEST

static Suite *conf_apply_suite(void)
{
    Suite *s = suite_create("conf_apply");
    TCase *tc = tcase_create("apply");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_conf_validate_cross_keys);
    tcase_add_test(tc, test_conf_reload_swaps_reloadable);
    tcase_add_test(tc, test_conf_reload_error_leaves_live);
    tcase_add_test(tc, test_conf_reload_accept_decides);
    tcase_add_test(tc, test_conf_dump_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Reload logs every changed key; keep the output to Check's summary. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(conf_apply_suite());
}
