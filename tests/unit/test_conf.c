/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/base/conf.c, parsing: defaults, the shipped annotated
 * file, every parse error with its line and key, --set and the host:port
 * parser (test_conf_apply.c: validation, reload, dump). Runs with cwd = the
 * repository root, because it reads conf/preduced.conf.
 */
#include "daemon/base/conf.h"
#include "daemon/engine/wire.h"
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

START_TEST(test_conf_defaults)
{
    struct pr_conf c;
    char host[256];

    ck_assert_int_eq(pr_conf_init(&c), 0);
    ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
    ck_assert_int_eq(c.role, PR_ROLE_NODE);
    ck_assert_str_eq(c.job, "default");
    ck_assert_str_eq(c.node_name, host);
    ck_assert_str_eq(c.node_socket, "/run/preduce/preduced.sock");
    ck_assert_str_eq(c.node_socket_group, "");
    ck_assert_str_eq(c.node_scheduler, "127.0.0.1:7070");
    ck_assert_str_eq(c.node_data_listen, "127.0.0.1:7071");
    ck_assert_str_eq(c.node_data_advertise, "");
    ck_assert_uint_eq(c.node_max_clients, 64);
    ck_assert_uint_eq(c.node_max_tensor_mb, 1024);
    ck_assert_uint_eq(c.node_reduce_timeout_ms, 30000);
    ck_assert_uint_eq(c.node_connect_timeout_ms, 5000);
    ck_assert_str_eq(c.sched_listen, "127.0.0.1:7070");
    ck_assert_int_eq(c.sched_policy, PR_POLICY_ALLREDUCE);
    ck_assert_uint_eq(c.sched_group_size, 2);
    ck_assert_uint_eq(c.sched_group_min, 2);
    ck_assert_uint_eq(c.sched_group_max, 0);
    ck_assert_double_eq(c.sched_window_ms, 5.0);
    ck_assert_double_eq(c.sched_window_min_ms, 0.01);
    ck_assert_double_eq(c.sched_window_max_ms, 10.0);
    ck_assert_int_eq(c.sched_weighting, PR_WEIGHT_UNIFORM);
    ck_assert_double_eq(c.sched_staleness_alpha, 0.9);
    ck_assert_uint_eq(c.sched_isolation_bound, 10);
    ck_assert_double_eq(c.sched_gen_hold_ms, 0.0);
    ck_assert_double_eq(c.sched_gen_hold_max_ms, 5000.0);
    ck_assert_uint_eq(c.sched_heartbeat_ms, 1000);
    ck_assert_uint_eq(c.sched_node_timeout_ms, 5000);
    ck_assert_uint_eq(c.sched_group_timeout_ms, 30000);
    ck_assert_int_eq(c.xport_type, PR_XPORT_AUTO);
    ck_assert_int_eq(c.xport_wire, PR_WIRE_FP32);
    ck_assert_uint_eq(c.xport_chunk_kb, 1024);
    ck_assert_uint_eq(c.xport_inflight, 8);
    ck_assert_str_eq(c.xport_rdma_device, "");
    ck_assert_uint_eq(c.xport_rdma_port, 1);
    ck_assert_uint_eq(c.xport_gid_index, 1);
    ck_assert_uint_eq(c.xport_rdma_timeout, 18);
    ck_assert_str_eq(c.sec_key_file, "");
    ck_assert_str_eq(c.metrics_listen, "");
    ck_assert_int_eq(c.log_level, PR_LOG_INFO);
    ck_assert_int_eq(pr_conf_validate(&c, NULL), 0);
    pr_conf_fini(&c);
    ck_assert_ptr_null(c.job);
    pr_conf_fini(&c); /* twice is harmless */
}
END_TEST

START_TEST(test_conf_shipped_file_is_defaults)
{
    struct pr_conf def, c;
    struct pr_conf_err err;

    ck_assert_int_eq(pr_conf_init(&def), 0);
    ck_assert_int_eq(pr_conf_init(&c), 0);
    int rc = pr_conf_load(&c, SHIPPED, &err);
    ck_assert_msg(rc == 0, "%s:%d: %s: %s", SHIPPED, err.line, err.key,
                  err.msg);
    ck_assert_int_eq(pr_conf_validate(&c, &err), 0);
    assert_conf_eq(&c, &def);
    pr_conf_fini(&c);
    pr_conf_fini(&def);
}
END_TEST

/*
 * Uncomments every "#name = value" line of the shipped file: each key must
 * be there exactly once (duplicates and unknown keys are errors), and the
 * value shown must be the real default.
 */
START_TEST(test_conf_shipped_file_documents_every_key)
{
    FILE *in = fopen(SHIPPED, "r");
    char line[512], *text = NULL;
    size_t textlen = 0;
    FILE *out = open_memstream(&text, &textlen);
    int nkeys = 0;

    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    while (fgets(line, sizeof(line), in)) {
        size_t name = strspn(line + 1, "abcdefghijklmnopqrstuvwxyz_");
        if (line[0] == '#' && name > 0 && line[1 + name] == ' ' &&
            line[2 + name] == '=') {
            fputs(line + 1, out);
            nkeys++;
        } else {
            fputs(line, out);
        }
    }
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_int_eq(nkeys, NKEYS);

    struct pr_conf def, c;
    struct pr_conf_err err;
    ck_assert_int_eq(pr_conf_init(&def), 0);
    int rc = load_text(&c, text, &err);
    ck_assert_msg(rc == 0, "line %d: %s: %s", err.line, err.key, err.msg);
    assert_conf_eq(&c, &def);
    pr_conf_fini(&c);
    pr_conf_fini(&def);
    free(text);
}
END_TEST

START_TEST(test_conf_load_values)
{
    struct pr_conf c;
    struct pr_conf_err err;
    int rc = load_text(&c,
                       "; comment\n"
                       "role = scheduler\n"
                       "job=\"big job\"\n"
                       "\n"
                       "[node]\n"
                       "name = n1\n"
                       "data_advertise = 10.0.0.1:7071 ; inline comment\n"
                       "max_clients = 4096\n"
                       "[scheduler]\n"
                       "policy = dynamic\n"
                       "group_max = 0\n"
                       "window_ms = 2.5e-1\n"
                       "staleness_alpha = .5\n"
                       "weighting = staleness\n"
                       "[transport]\n"
                       "type = tcp\n"
                       "wire = bf16\n"
                       "rdma_device = \"\"\n"
                       "[log]\n"
                       "level = debug\n",
                       &err);
    ck_assert_msg(rc == 0, "line %d: %s: %s", err.line, err.key, err.msg);
    ck_assert_int_eq(c.role, PR_ROLE_SCHEDULER);
    ck_assert_str_eq(c.job, "big job");
    ck_assert_str_eq(c.node_name, "n1");
    ck_assert_str_eq(c.node_data_advertise, "10.0.0.1:7071");
    ck_assert_uint_eq(c.node_max_clients, 4096);
    ck_assert_int_eq(c.sched_policy, PR_POLICY_DYNAMIC);
    ck_assert_double_eq(c.sched_window_ms, 0.25);
    ck_assert_double_eq(c.sched_staleness_alpha, 0.5);
    ck_assert_int_eq(c.sched_weighting, PR_WEIGHT_STALENESS);
    ck_assert_int_eq(c.xport_type, PR_XPORT_TCP);
    ck_assert_int_eq(c.xport_wire, PR_WIRE_BF16);
    ck_assert_str_eq(c.xport_rdma_device, "");
    ck_assert_int_eq(c.log_level, PR_LOG_DEBUG);
    pr_conf_fini(&c);
}
END_TEST

struct bad_case {
    const char *lines; /* from line 3 of a file, after "[node]\nname = a" */
    int rc;
    const char *key;
    const char *msg; /* a substring of err.msg */
};

/* The error is on the last of t->lines; one more key line follows it. */
static void check_bad(const struct bad_case *t)
{
    char text[512];
    struct pr_conf c;
    struct pr_conf_err err;
    int line = 3;

    for (const char *p = t->lines; *p; p++)
        line += *p == '\n';
    snprintf(text, sizeof(text), "[node]\nname = a\n%s\nmax_clients = 9\n",
             t->lines);
    int rc = load_text(&c, text, &err);
    ck_assert_msg(rc == t->rc, "'%s': rc %d, want %d (%s)", t->lines, rc, t->rc,
                  err.msg);
    ck_assert_msg(err.line == line, "'%s': line %d", t->lines, err.line);
    ck_assert_str_eq(err.key, t->key);
    ck_assert_msg(strstr(err.msg, t->msg), "'%s': msg '%s' lacks '%s'",
                  t->lines, err.msg, t->msg);
    /* The first error stops the parse: the line after it was not applied. */
    ck_assert_uint_eq(c.node_max_clients, 64);
    pr_conf_fini(&c);
}

START_TEST(test_conf_u32_errors)
{
    static const struct bad_case cases[] = {
        {"max_tensor_mb = abc", -EINVAL, "node.max_tensor_mb", "whole"},
        {"max_tensor_mb = 12x", -EINVAL, "node.max_tensor_mb", "junk"},
        {"max_tensor_mb = 1.5", -EINVAL, "node.max_tensor_mb", "junk"},
        {"max_tensor_mb = -1", -EINVAL, "node.max_tensor_mb", "whole"},
        {"max_tensor_mb = 0x10", -EINVAL, "node.max_tensor_mb", "junk"},
        {"max_tensor_mb =", -EINVAL, "node.max_tensor_mb", "whole"},
        {"max_tensor_mb = 0", -ERANGE, "node.max_tensor_mb", "1..65536"},
        {"max_tensor_mb = 65537", -ERANGE, "node.max_tensor_mb", "range"},
        {"max_tensor_mb = 99999999999999999999999", -ERANGE,
         "node.max_tensor_mb", "range"},
        {"max_clients = 4097", -ERANGE, "node.max_clients", "1..4096"},
        {"reduce_timeout_ms = 99", -ERANGE, "node.reduce_timeout_ms",
         "100..3600000"},
    };
    for (size_t i = 0; i < NCASES(cases); i++)
        check_bad(&cases[i]);
}
END_TEST

START_TEST(test_conf_double_errors)
{
    static const struct bad_case cases[] = {
        {"[scheduler]\nwindow_ms = x", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\nwindow_ms = 1.5.2", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\nwindow_ms = 3ms", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\nwindow_ms = nan", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\nwindow_ms = inf", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\nwindow_ms = 0x1p3", -EINVAL, "scheduler.window_ms",
         "decimal"},
        {"[scheduler]\n\nwindow_ms = 10000.5", -ERANGE, "scheduler.window_ms",
         "range"},
        {"[scheduler]\nwindow_ms = 1e999", -ERANGE, "scheduler.window_ms",
         "range"},
        {"[scheduler]\nstaleness_alpha = -0.1", -ERANGE,
         "scheduler.staleness_alpha", "range"},
    };
    for (size_t i = 0; i < NCASES(cases); i++)
        check_bad(&cases[i]);
}
END_TEST

START_TEST(test_conf_enum_error_lists_allowed)
{
    static const struct bad_case cases[] = {
        {"[scheduler]\npolicy = fifo", -EINVAL, "scheduler.policy",
         "allreduce, constant, dynamic"},
        {"[scheduler]\npolicy = Dynamic", -EINVAL, "scheduler.policy",
         "'Dynamic' is not one of"},
        {"[transport]\ntype = ib", -EINVAL, "transport.type",
         "auto, rdma, tcp"},
        {"[transport]\nwire = fp16", -EINVAL, "transport.wire",
         "'fp16' is not one of: fp32, bf16, int8"},
        {"[transport]\nwire = INT8", -EINVAL, "transport.wire",
         "fp32, bf16, int8"},
        {"[log]\nlevel = verbose", -EINVAL, "log.level",
         "error, warn, info, debug"},
        {"[scheduler]\nweighting =", -EINVAL, "scheduler.weighting",
         "uniform, staleness"},
    };
    for (size_t i = 0; i < NCASES(cases); i++)
        check_bad(&cases[i]);

    struct pr_conf c;
    struct pr_conf_err err;
    ck_assert_int_eq(load_text(&c, "role = both\n", &err), -EINVAL);
    ck_assert_int_eq(err.line, 1);
    ck_assert_str_eq(err.key, "role");
    ck_assert_ptr_nonnull(strstr(err.msg, "node, scheduler"));
    ck_assert_int_eq(c.role, PR_ROLE_NODE);
    pr_conf_fini(&c);
}
END_TEST

START_TEST(test_conf_unknown_key_and_section)
{
    static const struct bad_case cases[] = {
        {"colour = red", -EINVAL, "node.colour", "unknown key"},
        {"[nodes]\nname = x", -EINVAL, "nodes.name", "unknown section [nodes]"},
        {"[node]\ngroup_size = 4", -EINVAL, "node.group_size",
         "did you mean scheduler.group_size?"},
        {"[Node]\nname = x", -EINVAL, "Node.name", "unknown section"},
    };
    for (size_t i = 0; i < NCASES(cases); i++)
        check_bad(&cases[i]);
}
END_TEST

START_TEST(test_conf_file_shape_errors)
{
    static const struct bad_case cases[] = {
        {"name = b", -EINVAL, "node.name", "already set on line 2"},
        {"  max_clients = 8", -EINVAL, "node.name", "indented"},
        {"just words", -EINVAL, "", "expected"},
        {"[node", -EINVAL, "", "expected"},
    };
    for (size_t i = 0; i < NCASES(cases); i++)
        check_bad(&cases[i]);

    /* libinih's 200-byte line buffer would split this line in two. */
    char text[400];
    struct pr_conf c;
    struct pr_conf_err err;
    memset(text, 0, sizeof(text));
    strcpy(text, "[node]\nname = ");
    memset(text + strlen(text), 'x', 250);
    strcat(text, "\nmax_clients = 9\n");
    ck_assert_int_eq(load_text(&c, text, &err), -EINVAL);
    ck_assert_int_eq(err.line, 2);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer"));
    ck_assert_uint_eq(c.node_max_clients, 64);
    pr_conf_fini(&c);
}
END_TEST

START_TEST(test_conf_missing_file)
{
    struct pr_conf c;
    struct pr_conf_err err;

    ck_assert_int_eq(pr_conf_init(&c), 0);
    ck_assert_int_eq(pr_conf_load(&c, "/nonexistent/preduced.conf", &err),
                     -ENOENT);
    ck_assert_int_eq(err.line, 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/preduced.conf"));
    ck_assert_int_eq(pr_conf_load(&c, "/nonexistent/x.conf", NULL), -ENOENT);
    ck_assert_uint_eq(c.node_max_clients, 64);
    pr_conf_fini(&c);
}
END_TEST

START_TEST(test_conf_set_forms)
{
    static const struct {
        const char *set;
        int rc;
        const char *key, *msg;
    } bad[] = {
        {"scheduler.group_size", -EINVAL, "scheduler.group_size",
         "section.name=value"},
        {"group_size=4", -EINVAL, "group_size", "scheduler.group_size"},
        {"nosuch.key=1", -EINVAL, "nosuch.key", "unknown section"},
        {"scheduler.group_size=0", -ERANGE, "scheduler.group_size", "1..65536"},
        {"transport.inflight=8k", -EINVAL, "transport.inflight", "junk"},
        {"node.socket=a\nb", -EINVAL, "node.socket", "control"},
        {"node.socket=/a ;b", -EINVAL, "node.socket", "comment"},
    };
    struct pr_conf c;
    struct pr_conf_err err;
    char host[256];

    ck_assert_int_eq(pr_conf_init(&c), 0);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.group_size=8", &err), 0);
    ck_assert_uint_eq(c.sched_group_size, 8);
    ck_assert_int_eq(pr_conf_set(&c, "role=scheduler", &err), 0);
    ck_assert_int_eq(c.role, PR_ROLE_SCHEDULER);
    ck_assert_int_eq(pr_conf_set(&c, ".role=node", &err), 0);
    ck_assert_int_eq(c.role, PR_ROLE_NODE);
    ck_assert_int_eq(pr_conf_set(&c, " node.name = n7 ", &err), 0);
    ck_assert_str_eq(c.node_name, "n7");
    ck_assert_int_eq(pr_conf_set(&c, "job=a=b", &err), 0);
    ck_assert_str_eq(c.job, "a=b");
    ck_assert_int_eq(pr_conf_set(&c, "log.level=warn", NULL), 0);
    ck_assert_int_eq(c.log_level, PR_LOG_WARN);
    ck_assert_int_eq(pr_conf_set(&c, "scheduler.window_max_ms=20", &err), 0);
    ck_assert_double_eq(c.sched_window_max_ms, 20.0);
    /* An empty name means the host name, wherever it comes from. */
    ck_assert_int_eq(pr_conf_set(&c, "node.name=", &err), 0);
    ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
    ck_assert_str_eq(c.node_name, host);

    for (size_t i = 0; i < NCASES(bad); i++) {
        ck_assert_int_eq(pr_conf_set(&c, bad[i].set, &err), bad[i].rc);
        ck_assert_int_eq(err.line, 0);
        ck_assert_str_eq(err.key, bad[i].key);
        ck_assert_msg(strstr(err.msg, bad[i].msg), "msg '%s'", err.msg);
    }
    char longset[300] = "node.socket=/";
    memset(longset + strlen(longset), 'p', 200);
    ck_assert_int_eq(pr_conf_set(&c, longset, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer"));
    /* Failed sets left everything as it was. */
    ck_assert_uint_eq(c.sched_group_size, 8);
    ck_assert_uint_eq(c.xport_inflight, 8);
    ck_assert_str_eq(c.node_socket, "/run/preduce/preduced.sock");
    pr_conf_fini(&c);
}
END_TEST

START_TEST(test_conf_hostport)
{
    static const struct {
        const char *s;
        int rc;
        const char *host;
        uint16_t port;
    } cases[] = {
        {"127.0.0.1:7070", 0, "127.0.0.1", 7070},
        {"node-1.example.com:1", 0, "node-1.example.com", 1},
        {"h:65535", 0, "h", 65535},
        {"h:0", 0, "h", 0},
        {"h:007", 0, "h", 7},
        {"[::1]:80", 0, "::1", 80},
        {"[fe80::1%eth0]:9", 0, "fe80::1%eth0", 9},
        {"h:65536", -EINVAL, NULL, 0},
        {"h:123456", -EINVAL, NULL, 0},
        {"h:-1", -EINVAL, NULL, 0},
        {"h:+80", -EINVAL, NULL, 0},
        {"h:80x", -EINVAL, NULL, 0},
        {"h:", -EINVAL, NULL, 0},
        {"h", -EINVAL, NULL, 0},
        {":80", -EINVAL, NULL, 0},
        {"", -EINVAL, NULL, 0},
        {"::1:80", -EINVAL, NULL, 0},
        {"[::1]80", -EINVAL, NULL, 0},
        {"[::1:80", -EINVAL, NULL, 0},
        {"[]:80", -EINVAL, NULL, 0},
        {"a b:80", -EINVAL, NULL, 0},
        {"h:80 ", -EINVAL, NULL, 0},
    };
    for (size_t i = 0; i < NCASES(cases); i++) {
        char host[64] = "unchanged";
        uint16_t port = 4242;
        int rc = pr_conf_parse_hostport(cases[i].s, host, sizeof(host), &port);
        ck_assert_msg(rc == cases[i].rc, "'%s': rc %d", cases[i].s, rc);
        if (rc == 0) {
            ck_assert_str_eq(host, cases[i].host);
            ck_assert_uint_eq(port, cases[i].port);
        }
    }

    /* The host buffer is never overrun, and both outputs are optional. */
    char small[4];
    uint16_t port = 0;
    ck_assert_int_eq(
        pr_conf_parse_hostport("abcd:1", small, sizeof(small), &port), -EINVAL);
    ck_assert_int_eq(
        pr_conf_parse_hostport("abc:1", small, sizeof(small), &port), 0);
    ck_assert_str_eq(small, "abc");
    ck_assert_int_eq(pr_conf_parse_hostport("abcdef:99", NULL, 0, &port), 0);
    ck_assert_uint_eq(port, 99);
    ck_assert_int_eq(pr_conf_parse_hostport("abcdef:99", NULL, 0, NULL), 0);
}
END_TEST

/* node.scheduler's list of standbys: split, checked, bounded. */
START_TEST(test_conf_scheduler_list)
{
    static const struct {
        const char *s;
        int rc;
        const char *first, *last;
    } cases[] = {
        {"a:1", 1, "a:1", "a:1"},
        {"a:1,b:2", 2, "a:1", "b:2"},
        {" a:1 , [::1]:7070 ,c:3", 3, "a:1", "c:3"},
        {"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8", 8, "a:1", "h:8"},
        {"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9", -E2BIG, NULL, NULL},
        {"a:1,,b:2", -EINVAL, NULL, NULL},
        {"a:1,", -EINVAL, NULL, NULL},
        {",a:1", -EINVAL, NULL, NULL},
        {"", -EINVAL, NULL, NULL},
        {"a:1,b", -EINVAL, NULL, NULL},
        {"a:0", -EINVAL, NULL, NULL},
        {"a:1;b:2", -EINVAL, NULL, NULL},
    };
    char out[PR_SCHED_LIST_MAX][PR_CONF_ADDR_MAX];
    for (size_t i = 0; i < NCASES(cases); i++) {
        int rc = pr_conf_addr_list(cases[i].s, out, PR_SCHED_LIST_MAX);
        ck_assert_msg(rc == cases[i].rc, "'%s': rc %d", cases[i].s, rc);
        ck_assert_int_eq(pr_conf_addr_list(cases[i].s, NULL, PR_SCHED_LIST_MAX),
                         rc);
        if (rc > 0) {
            ck_assert_str_eq(out[0], cases[i].first);
            ck_assert_str_eq(out[rc - 1], cases[i].last);
        }
    }
    /* An entry longer than an address may be is refused, not cut. */
    char big[PR_CONF_ADDR_MAX + 16];
    memset(big, 'h', sizeof(big));
    memcpy(big + sizeof(big) - 4, ":80", 4);
    ck_assert_int_eq(pr_conf_addr_list(big, out, PR_SCHED_LIST_MAX), -EINVAL);

    /* The config refuses a bad list with the key and the reason. */
    static const struct bad_case bad[] = {
        {"scheduler = a:1,,b:2", -EINVAL, "node.scheduler",
         "not a list of host:port"},
        {"scheduler = a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9", -E2BIG,
         "node.scheduler", "more than 8 addresses"},
    };
    for (size_t i = 0; i < NCASES(bad); i++) {
        char text[256];
        struct pr_conf c;
        struct pr_conf_err err;
        snprintf(text, sizeof(text), "[node]\n%s\n", bad[i].lines);
        ck_assert_int_eq(load_text(&c, text, &err), 0);
        ck_assert_int_eq(pr_conf_validate(&c, &err), bad[i].rc);
        ck_assert_str_eq(err.key, bad[i].key);
        ck_assert_ptr_nonnull(strstr(err.msg, bad[i].msg));
        pr_conf_fini(&c);
    }
}
END_TEST

/*
 * `job` is a name for logs and metrics labels: 1..63 printable bytes, no
 * spaces or quotes. pr_conf_set_scalar() sets numbers and names alone,
 * so a shallow copy of a live config may take it without touching the
 * strings the copy shares (daemon/sched/sched_job.c).
 */
START_TEST(test_conf_job_name_and_scalar_set)
{
    static const char *const bad[] = {"job=two words", "job=quo\"te",
                                      "job=back\\slash", "job="};
    struct pr_conf c, copy;
    struct pr_conf_err err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(pr_conf_init(&c), 0);
        ck_assert_int_eq(pr_conf_set(&c, bad[i], NULL), 0);
        ck_assert_int_eq(pr_conf_validate(&c, &err), -EINVAL);
        ck_assert_str_eq(err.key, "job");
        pr_conf_fini(&c);
    }
    ck_assert_int_eq(pr_conf_init(&c), 0);
    ck_assert_int_eq(pr_conf_set(&c, "job=sweep-1.a_b", NULL), 0);
    ck_assert_int_eq(pr_conf_validate(&c, NULL), 0);
    copy = c;
    ck_assert_int_eq(pr_conf_set_scalar(&copy, "scheduler.group_max=4", &err),
                     0);
    ck_assert_int_eq(
        pr_conf_set_scalar(&copy, "scheduler.policy=dynamic", &err), 0);
    ck_assert_int_eq(pr_conf_set_scalar(&copy, "node.name=x", &err), -EINVAL);
    ck_assert_str_eq(err.msg, "not a number or a name");
    ck_assert_ptr_eq(copy.node_name, c.node_name);
    ck_assert_ptr_eq(copy.job, c.job);
    ck_assert_uint_eq(copy.sched_group_max, 4);
    ck_assert_uint_eq(c.sched_group_max, 0);
    pr_conf_fini(&c);
}
END_TEST

/*
 * transport.wire's names are enum pr_wire's (daemon/engine/wire.h): the
 * config spells them in its own table, being below the engine, so each
 * value's name must parse to that value, and the names the config lists
 * in an error must be the engine's, in order, and no others.
 */
START_TEST(test_conf_wire_names_agree)
{
    struct pr_conf c;
    struct pr_conf_err err;
    char set[64], want[128] = "'x' is not one of: ";
    ck_assert_int_eq(pr_conf_init(&c), 0);
    for (uint32_t w = 0; w < PR_WIRE_COUNT; w++) {
        snprintf(set, sizeof(set), "transport.wire=%s", pr_wire_name(w));
        ck_assert_int_eq(pr_conf_set(&c, set, &err), 0);
        ck_assert_int_eq(c.xport_wire, (int)w);
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s",
                 w ? ", " : "", pr_wire_name(w));
    }
    ck_assert_int_eq(pr_conf_set(&c, "transport.wire=x", &err), -EINVAL);
    ck_assert_str_eq(err.key, "transport.wire");
    ck_assert_str_eq(err.msg, want);
    ck_assert_int_eq(c.xport_wire, PR_WIRE_INT8);
    pr_conf_fini(&c);
}
END_TEST

static Suite *conf_suite(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("parse");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_conf_defaults);
    tcase_add_test(tc, test_conf_shipped_file_is_defaults);
    tcase_add_test(tc, test_conf_shipped_file_documents_every_key);
    tcase_add_test(tc, test_conf_load_values);
    tcase_add_test(tc, test_conf_u32_errors);
    tcase_add_test(tc, test_conf_double_errors);
    tcase_add_test(tc, test_conf_enum_error_lists_allowed);
    tcase_add_test(tc, test_conf_unknown_key_and_section);
    tcase_add_test(tc, test_conf_file_shape_errors);
    tcase_add_test(tc, test_conf_missing_file);
    tcase_add_test(tc, test_conf_set_forms);
    tcase_add_test(tc, test_conf_hostport);
    tcase_add_test(tc, test_conf_scheduler_list);
    tcase_add_test(tc, test_conf_job_name_and_scalar_set);
    tcase_add_test(tc, test_conf_wire_names_agree);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Reload logs every changed key; keep the output to Check's summary. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(conf_suite());
}
