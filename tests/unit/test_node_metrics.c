/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the node's metrics (daemon/node/node_metrics.c) of a
 * node that runs nothing: a zeroed struct pr_node with the default
 * config, its reduce latencies counted by pr_node_reduce_observe and the
 * exposition rendered whole.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/metrics.h"
#include "daemon/node/node_int.h"
#include "preduce.h"
#include "tests/check_run.h"

struct fix {
    struct pr_conf conf;
    struct pr_node n;
    struct pr_metrics_buf b;
};

static void fix_init(struct fix *f)
{
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(pr_conf_init(&f->conf), 0);
    f->n.conf = &f->conf;
    pr_metrics_buf_init(&f->b);
}

static void fix_fini(struct fix *f)
{
    pr_metrics_buf_fini(&f->b);
    pr_conf_fini(&f->conf);
}

/* The histogram's lines, in order, from HELP to _count. */
static const char *const want_hist =
    "# HELP preduce_node_reduce_seconds Time from a trainer's reduce "
    "request to its successful answer.\n"
    "# TYPE preduce_node_reduce_seconds histogram\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.0001\"} 2\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.00025\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.0005\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.001\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.0025\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.005\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.01\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.025\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.05\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.1\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.25\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.5\"} 3\n"
    "preduce_node_reduce_seconds_bucket{le=\"1\"} 5\n"
    "preduce_node_reduce_seconds_bucket{le=\"2.5\"} 5\n"
    "preduce_node_reduce_seconds_bucket{le=\"5\"} 5\n"
    "preduce_node_reduce_seconds_bucket{le=\"10\"} 5\n"
    "preduce_node_reduce_seconds_bucket{le=\"30\"} 5\n"
    "preduce_node_reduce_seconds_bucket{le=\"60\"} 6\n"
    "preduce_node_reduce_seconds_bucket{le=\"+Inf\"} 7\n"
    "preduce_node_reduce_seconds_sum 121.500203\n"
    "preduce_node_reduce_seconds_count 7\n";

/*
 * Each bound is inclusive: 100 us is in le="0.0001", 101 us in the next;
 * 60 s in the last bucket, a microsecond more only in +Inf (and _count).
 */
START_TEST(test_node_metrics_reduce_histogram)
{
    struct fix f;
    fix_init(&f);
    static const uint64_t us[] = {0,       100,      101,     500000 + 1,
                                  1000000, 60000000, 60000001};
    for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++)
        pr_node_reduce_observe(&f.n, us[i]);
    ck_assert_int_eq(pr_node_render_metrics(&f.n, &f.b), 0);
    const char *at = strstr(f.b.data, "# HELP preduce_node_reduce_seconds ");
    ck_assert_ptr_nonnull(at);
    ck_assert_msg(!strncmp(at, want_hist, strlen(want_hist)), "%.1500s", at);
    fix_fini(&f);
}
END_TEST

/* Nothing counted yet: every bucket 0, the release beside preduce_info. */
START_TEST(test_node_metrics_empty)
{
    struct fix f;
    fix_init(&f);
    ck_assert_int_eq(pr_node_render_metrics(&f.n, &f.b), 0);
    ck_assert_ptr_nonnull(strstr(
        f.b.data, "\npreduce_node_reduce_seconds_bucket{le=\"0.0001\"} 0\n"));
    ck_assert_ptr_nonnull(
        strstr(f.b.data, "\npreduce_node_reduce_seconds_bucket{le=\"+Inf\"} 0\n"
                         "preduce_node_reduce_seconds_sum 0.000000\n"
                         "preduce_node_reduce_seconds_count 0\n"));
    char want[64];
    snprintf(want, sizeof(want), "\npreduce_build_info{version=\"%d.%d\"} 1\n",
             PREDUCE_VERSION_MAJOR, PREDUCE_VERSION_MINOR);
    ck_assert_ptr_nonnull(strstr(f.b.data, want));
    ck_assert_ptr_nonnull(strstr(f.b.data, "preduce_info{role=\"node\","));
    fix_fini(&f);
}
END_TEST

/* The wire encodings' lines, in order, for the case below. */
static const char *const want_wire =
    "# HELP preduce_node_wire_default 1 for the encoding of floats between "
    "daemons that this node uses unless a trainer asks for another "
    "(transport.wire), 0 for the others.\n"
    "# TYPE preduce_node_wire_default gauge\n"
    "preduce_node_wire_default{wire=\"fp32\"} 0\n"
    "preduce_node_wire_default{wire=\"bf16\"} 1\n"
    "preduce_node_wire_default{wire=\"int8\"} 0\n"
    "# HELP preduce_node_wire_groups_total Groups that sent their chunks to "
    "peer daemons, by encoding.\n"
    "# TYPE preduce_node_wire_groups_total counter\n"
    "preduce_node_wire_groups_total{wire=\"fp32\"} 3\n"
    "preduce_node_wire_groups_total{wire=\"bf16\"} 0\n"
    "preduce_node_wire_groups_total{wire=\"int8\"} 5\n"
    "# HELP preduce_node_wire_bytes_sent_total Chunk payload bytes posted to "
    "peer daemons, by encoding (without the transports' framing).\n"
    "# TYPE preduce_node_wire_bytes_sent_total counter\n"
    "preduce_node_wire_bytes_sent_total{wire=\"fp32\"} 4096\n"
    "preduce_node_wire_bytes_sent_total{wire=\"bf16\"} 0\n"
    "preduce_node_wire_bytes_sent_total{wire=\"int8\"} 18446744073709551615\n"
    "# HELP preduce_node_wire_feedback_bytes Memory this node keeps for "
    "int8's error feedback (what rounding lost, per trainer and list of "
    "tensors), bytes.\n"
    "# TYPE preduce_node_wire_feedback_bytes gauge\n"
    "preduce_node_wire_feedback_bytes 1024\n";

/*
 * Each encoding has a line of its own in each family, labelled with
 * pr_wire_name()'s names, the node's transport.wire the one default.
 */
START_TEST(test_node_metrics_wire)
{
    struct fix f;
    fix_init(&f);
    struct pr_conf_err err;
    ck_assert_int_eq(pr_conf_set(&f.conf, "transport.wire=bf16", &err), 0);
    f.n.feedback_bytes = 1024;
    struct pr_engine_stats es = {0};
    es.wire_groups[PR_WIRE_FP32] = 3;
    es.wire_groups[PR_WIRE_INT8] = 5;
    es.wire_bytes[PR_WIRE_FP32] = 4096;
    es.wire_bytes[PR_WIRE_INT8] = UINT64_MAX;
    pr_node_render_wire(&f.b, &f.n, &es);
    ck_assert_int_eq(f.b.err, 0);
    ck_assert_msg(!strcmp(f.b.data, want_wire), "%s", f.b.data);
    fix_fini(&f);
}
END_TEST

/* A node that ran nothing: every encoding's counters there, at 0. */
START_TEST(test_node_metrics_wire_empty)
{
    struct fix f;
    fix_init(&f);
    ck_assert_int_eq(pr_node_render_metrics(&f.n, &f.b), 0);
    static const char *const want[] = {
        "\npreduce_node_wire_default{wire=\"fp32\"} 1\n"
        "preduce_node_wire_default{wire=\"bf16\"} 0\n"
        "preduce_node_wire_default{wire=\"int8\"} 0\n",
        "\npreduce_node_wire_groups_total{wire=\"int8\"} 0\n",
        "\npreduce_node_wire_bytes_sent_total{wire=\"bf16\"} 0\n",
        "\npreduce_node_wire_feedback_bytes 0\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(f.b.data, want[i]), "no %s", want[i]);
    fix_fini(&f);
}
END_TEST

static Suite *node_metrics_suite(void)
{
    Suite *s = suite_create("node_metrics");
    TCase *tc = tcase_create("render");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_node_metrics_reduce_histogram);
    tcase_add_test(tc, test_node_metrics_empty);
    tcase_add_test(tc, test_node_metrics_wire);
    tcase_add_test(tc, test_node_metrics_wire_empty);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(node_metrics_suite());
}
