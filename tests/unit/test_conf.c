/*
 * Unit tests for daemon/conf.c: defaults, the shipped annotated file, every
 * parse error with its line and key, --set, cross-key validation, reload
 * (only reloadable keys move, nothing moves on error), dump round trip and
 * the host:port parser. Runs with cwd = the repository root, because it
 * reads conf/preduced.conf.
 */
#include "daemon/conf.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"

#define SHIPPED   "conf/preduced.conf"
#define NKEYS     36
#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

/* Writes text to a new file under /tmp; free it with rm_tmp(). */
static char *tmpconf(const char *text)
{
    char *path = strdup("/tmp/test_conf.XXXXXX");
    ck_assert_ptr_nonnull(path);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    ck_assert_int_eq(close(fd), 0);
    return path;
}

static void rm_tmp(char *path)
{
    unlink(path);
    free(path);
}

/* Defaults, then `text` as a file. Returns pr_conf_load()'s result. */
static int load_text(struct pr_conf *c, const char *text,
                     struct pr_conf_err *err)
{
    ck_assert_int_eq(pr_conf_init(c), 0);
    char *path = tmpconf(text);
    int rc = pr_conf_load(c, path, err);
    rm_tmp(path);
    return rc;
}

/* pr_conf_dump() into a string; the caller frees it. */
static char *dump_text(const struct pr_conf *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(pr_conf_dump(c, out), 0);
    ck_assert_int_eq(fclose(out), 0);
    return text;
}

/*
 * Equal configs dump to the same text: pr_conf_dump() writes every key
 * (test_conf_dump_roundtrip counts them) and doubles exactly.
 */
static void assert_conf_eq(const struct pr_conf *a, const struct pr_conf *b)
{
    char *ta = dump_text(a), *tb = dump_text(b);

    ck_assert_str_eq(ta, tb);
    free(ta);
    free(tb);
}

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
    ck_assert_uint_eq(c.xport_chunk_kb, 1024);
    ck_assert_uint_eq(c.xport_inflight, 8);
    ck_assert_str_eq(c.xport_rdma_device, "");
    ck_assert_uint_eq(c.xport_rdma_port, 1);
    ck_assert_uint_eq(c.xport_gid_index, 1);
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
    int rc = pr_conf_reload(&live, next, overrides, 2, &err, &changed);
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
    ck_assert_int_eq(pr_conf_reload(&live, next, overrides, 2, NULL, &changed),
                     0);
    ck_assert_int_eq(changed, 0);
    assert_conf_eq(&live, &want);

    /*
     * Back to the base file without overrides: reduce_timeout_ms, policy,
     * group_max, window_ms and level change back; the inflight override is
     * gone too, but that key waits for a restart.
     */
    ck_assert_int_eq(pr_conf_reload(&live, base, NULL, 0, &err, &changed), 0);
    ck_assert_int_eq(changed, 5);
    ck_assert_uint_eq(live.xport_inflight, 16);
    ck_assert_int_eq(live.sched_policy, PR_POLICY_CONSTANT);
    ck_assert_uint_eq(live.sched_group_max, 0);
    ck_assert_double_eq(live.sched_window_ms, 5.0);
    ck_assert_int_eq(live.log_level, PR_LOG_INFO);
    ck_assert_uint_eq(live.node_reduce_timeout_ms, 1000);

    pr_conf_fini(&live);
    pr_conf_fini(&want);
    rm_tmp(base);
    rm_tmp(next);
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
                                &err, &changed);
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
    suite_add_tcase(s, tc);

    tc = tcase_create("apply");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_conf_validate_cross_keys);
    tcase_add_test(tc, test_conf_reload_swaps_reloadable);
    tcase_add_test(tc, test_conf_reload_error_leaves_live);
    tcase_add_test(tc, test_conf_dump_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(conf_suite());

    /* Reload logs every changed key; keep the output to Check's summary. */
    pr_log_set_level(PR_LOG_ERROR);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
