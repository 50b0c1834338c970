/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for what preducectl shows of a daemon (daemon/ctl/view.c,
 * table.c, json_view.c): canned metrics texts, shaped like the daemons'
 * (node_metrics.c, sched_metrics.c) or hostile, are parsed into a view,
 * and the tables and JSON printed from it are checked.
 */
#include "daemon/ctl/view.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/ctl/json_view.h"
#include "daemon/ctl/table.h"
#include "tests/check_run.h"

static const char sched_text[] =
    "# HELP preduce_info This daemon: role, job and name.\n"
    "# TYPE preduce_info gauge\n"
    "preduce_info{role=\"scheduler\",job=\"j1\",name=\"scheduler\"} 1\n"
    "preduce_sched_nodes 2\n"
    "preduce_sched_workers_live 3\n"
    "preduce_sched_workers_queued 1\n"
    "preduce_sched_groups_total 10\n"
    "preduce_sched_group_size_bucket{le=\"1\"} 0\n"
    "preduce_sched_group_size_bucket{le=\"2\"} 2\n"
    "preduce_sched_group_size_bucket{le=\"3\"} 9\n"
    "preduce_sched_group_size_bucket{le=\"16\"} 9\n"
    "preduce_sched_group_size_bucket{le=\"32\"} 10\n"
    "preduce_sched_group_size_bucket{le=\"+Inf\"} 10\n"
    "preduce_sched_member_updates_total 29\n"
    /* Out of rank order; w"2 has a quote in its name. */
    "preduce_worker_version{job=\"j1\",worker=\"w\\\"2\",rank=\"2\",node=\"1\"}"
    " 7\n"
    "preduce_worker_version{job=\"j1\",worker=\"w0\",rank=\"0\",node=\"1\"} 9\n"
    "preduce_worker_version{job=\"j1\",worker=\"w1\",rank=\"1\",node=\"2\"} 9\n"
    "preduce_worker_staleness{job=\"j1\",worker=\"w0\",rank=\"0\",node=\"1\"} "
    "0\n"
    "preduce_worker_staleness{job=\"j1\",worker=\"w\\\"2\",rank=\"2\",node="
    "\"1\"} 2\n"
    "preduce_worker_steps_total{job=\"j1\",worker=\"w0\",rank=\"0\",node=\"1\"}"
    " 9\n"
    "preduce_worker_update_rate{job=\"j1\",worker=\"w0\",rank=\"0\",node=\"1\"}"
    " 9.5\n"
    "preduce_worker_step_seconds{job=\"j1\",worker=\"w0\",rank=\"0\",node="
    "\"1\"} "
    "0.0125\n"
    "preduce_worker_straggler{job=\"j1\",worker=\"w0\",rank=\"0\",node=\"1\"} "
    "0\n"
    "preduce_worker_straggler{job=\"j1\",worker=\"w\\\"2\",rank=\"2\",node="
    "\"1\"} 1\n"
    /* A series of a worker that has no version: no row of its own. */
    "preduce_worker_straggler{job=\"j1\",worker=\"gone\",rank=\"5\","
    "node=\"1\"} 1\n"
    /* Job j2's w0, rank 0 too: a row of its own. */
    "preduce_worker_version{job=\"j2\",worker=\"w0\",rank=\"0\",node=\"2\"} 4\n"
    "preduce_worker_steps_total{job=\"j2\",worker=\"w0\",rank=\"0\","
    "node=\"2\"} 1\n"
    "preduce_sched_job_info{job=\"j2\",id=\"7\",policy=\"allreduce\","
    "key=\"yes\"} 1\n"
    /* j1's from a scheduler older than job keys: no key label. */
    "preduce_sched_job_info{job=\"j1\",id=\"3\",policy=\"dynamic\"} 1\n"
    "preduce_sched_job_workers{job=\"j1\"} 3\n"
    "preduce_sched_job_workers{job=\"j2\"} 1\n"
    "preduce_sched_job_queued{job=\"j1\"} 1\n"
    "preduce_sched_job_groups_total{job=\"j1\"} 8\n"
    "preduce_sched_job_groups_total{job=\"j2\"} 2\n";

static const char node_text[] =
    "preduce_info{role=\"node\",job=\"j1\",name=\"n0\",node_id=\"3\"} 1\n"
    "preduce_node_scheduler_up 1\n"
    "preduce_node_trainers 2\n"
    "preduce_node_reduces_total{status=\"ok\"} 4\n"
    "preduce_node_reduces_total{status=\"failed\"} 1\n"
    "preduce_node_reduce_seconds_bucket{le=\"0.001\"} 1\n"
    "preduce_node_reduce_seconds_bucket{le=\"+Inf\"} 4\n"
    "preduce_node_reduce_seconds_sum 0.01\n"
    "preduce_node_reduce_seconds_count 4\n"
    "preduce_node_groups_total{status=\"ok\"} 3\n"
    "preduce_node_groups_total{status=\"failed\"} 0\n"
    "preduce_node_groups_running 1\n"
    "preduce_node_bytes_total{transport=\"tcp\",direction=\"sent\"} 2048\n"
    "preduce_node_bytes_total{transport=\"tcp\",direction=\"received\"} "
    "1000\n"
    "preduce_node_wire_default{wire=\"fp32\"} 0\n"
    "preduce_node_wire_default{wire=\"bf16\"} 1\n"
    "preduce_node_wire_default{wire=\"int8\"} 0\n"
    "preduce_node_wire_groups_total{wire=\"fp32\"} 1\n"
    "preduce_node_wire_groups_total{wire=\"bf16\"} 2\n"
    "preduce_node_wire_groups_total{wire=\"int8\"} 0\n"
    "preduce_node_wire_bytes_sent_total{wire=\"fp32\"} 1024\n"
    "preduce_node_wire_bytes_sent_total{wire=\"bf16\"} 1024\n"
    "preduce_node_wire_bytes_sent_total{wire=\"int8\"} 0\n"
    "preduce_node_links_up 1\n"
    "preduce_node_rdma 0\n"
    "preduce_worker_version{job=\"j1\",worker=\"b\",rank=\"-1\"} 0\n"
    "preduce_worker_version{job=\"sweep-2\",worker=\"a\",rank=\"4\"} 3\n";

struct fix {
    struct pr_promtext m;
    struct pr_ctl_view v;
};

/* Parses a copy of text and builds its view: pr_ctl_view_build's code. */
static int build(struct fix *x, const char *text)
{
    char *copy = strdup(text);
    ck_assert_ptr_nonnull(copy);
    ck_assert_int_eq(pr_promtext_parse(copy, &x->m), 0);
    return pr_ctl_view_build(&x->m, &x->v);
}

static void fix_free(struct fix *x)
{
    pr_ctl_view_free(&x->v);
    pr_promtext_free(&x->m);
}

typedef void (*print_fn)(const struct pr_ctl_view *v, FILE *f);

static void table_status(const struct pr_ctl_view *v, FILE *f)
{
    pr_ctl_table_status(f, v, "ADDR");
}

static void table_workers(const struct pr_ctl_view *v, FILE *f)
{
    pr_ctl_table_workers(f, v, "ADDR");
}

static void table_jobs(const struct pr_ctl_view *v, FILE *f)
{
    pr_ctl_table_jobs(f, v, "ADDR");
}

static void json_jobs(const struct pr_ctl_view *v, FILE *f)
{
    struct pr_json j;
    pr_json_init(&j, f);
    pr_ctl_json_jobs(&j, v, "ADDR");
}

static void json_status(const struct pr_ctl_view *v, FILE *f)
{
    struct pr_json j;
    pr_json_init(&j, f);
    pr_ctl_json_status(&j, v, "ADDR");
}

static void json_workers(const struct pr_ctl_view *v, FILE *f)
{
    struct pr_json j;
    pr_json_init(&j, f);
    pr_ctl_json_workers(&j, v, "ADDR");
}

/* What fn prints of v (free it). */
static char *printed(const struct pr_ctl_view *v, print_fn fn)
{
    char *text = NULL;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    fn(v, f);
    ck_assert_int_eq(fclose(f), 0);
    return text;
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

START_TEST(test_ctl_view_scheduler)
{
    struct fix x;
    ck_assert_int_eq(build(&x, sched_text), 0);
    const struct pr_ctl_view *v = &x.v;
    ck_assert_int_eq(v->role, PR_CTL_SCHED);
    ck_assert_str_eq(v->job, "j1");
    ck_assert(v->nodes == 2 && v->live == 3 && v->queued == 1);
    /*
     * By job, then rank; each series in its worker's row; "gone" has
     * none; j2's w0 is not j1's.
     */
    ck_assert_uint_eq(v->nworkers, 4);
    ck_assert_str_eq(v->workers[3].job, "j2");
    ck_assert(v->workers[3].version == 4 && v->workers[3].steps == 1);
    ck_assert_str_eq(v->workers[0].name, "w0");
    ck_assert_str_eq(v->workers[1].name, "w1");
    ck_assert_str_eq(v->workers[2].name, "w\"2");
    ck_assert(v->workers[0].step_s == 0.0125 && v->workers[0].rate == 9.5);
    ck_assert(isnan(v->workers[1].staleness) && v->workers[2].straggler == 1);
    /* Sizes 2: 2 groups, 3: 7, 17-32: 1 (the empty buckets are no size). */
    ck_assert_uint_eq(v->nsizes, 3);
    ck_assert(v->sizes[1].from == 3 && v->sizes[1].to == 3 &&
              v->sizes[1].groups == 7);
    ck_assert(v->sizes[2].from == 17 && v->sizes[2].to == 32);

    char *t = printed(v, table_status);
    ck_assert_msg(strstr(t, "scheduler (job j1) at ADDR\n"
                            "  nodes            2\n"
                            "  workers          3 live, 1 waiting for a "
                            "group\n"
                            "  groups           10 formed, mean size 2.9\n"
                            "  group sizes      2: 2, 3: 7, 17-32: 1\n"
                            "  stragglers       w\"2\n") == t,
                  "%s", t);
    ck_assert_ptr_nonnull(strstr(t,
                                 "\n  j1   w0          0     1         9"
                                 "      0         9        9.5      12.5\n"));
    ck_assert_ptr_nonnull(strstr(t,
                                 "\n  j1   w1          1     2         9"
                                 "      -         -          -         -\n"));
    ck_assert_ptr_nonnull(strstr(t,
                                 "\n  j2   w0          0     2         4"
                                 "      -         1          -         -\n"));
    ck_assert_ptr_nonnull(strstr(t, "  straggler\n"));
    free(t);

    t = printed(v, table_workers);
    ck_assert_msg(starts(t, "scheduler (job j1) at ADDR\n"
                            "  job  worker   rank  node   version  stale"
                            "     steps  updates/s   step ms\n"
                            "  j1   w0 "),
                  "%s", t);
    free(t);

    t = printed(v, json_status);
    ck_assert_str_eq(
        t,
        "{\"address\":\"ADDR\",\"role\":\"scheduler\",\"name\":"
        "\"scheduler\",\"job\":\"j1\",\"nodes\":2,\"workers_live\":3,"
        "\"workers_waiting\":1,\"groups_formed\":10,"
        "\"mean_group_size\":2.9,\"group_sizes\":[{\"from\":2,\"to\":2,"
        "\"groups\":2},{\"from\":3,\"to\":3,\"groups\":7},{\"from\":17,"
        "\"to\":32,\"groups\":1}],\"stragglers\":[\"w\\\"2\"],"
        "\"workers\":[{\"job\":\"j1\",\"name\":\"w0\",\"rank\":0,\"node\":1,"
        "\"version\":9,"
        "\"staleness\":0,\"steps\":9,\"updates_per_s\":9.5,"
        "\"step_ms\":12.5,\"straggler\":false},{\"job\":\"j1\",\"name\":\"w1\","
        "\"rank\":1,\"node\":2,\"version\":9,\"staleness\":null,"
        "\"steps\":null,\"updates_per_s\":null,\"step_ms\":null,"
        "\"straggler\":null},{\"job\":\"j1\",\"name\":\"w\\\"2\",\"rank\":2,"
        "\"node\":1,"
        "\"version\":7,\"staleness\":2,\"steps\":null,"
        "\"updates_per_s\":null,\"step_ms\":null,\"straggler\":true},"
        "{\"job\":\"j2\",\"name\":\"w0\",\"rank\":0,\"node\":2,\"version\":4,"
        "\"staleness\":null,\"steps\":1,\"updates_per_s\":null,"
        "\"step_ms\":null,\"straggler\":null}]}");
    free(t);

    t = printed(v, json_workers);
    ck_assert_msg(starts(t, "{\"address\":\"ADDR\",\"role\":\"scheduler\","
                            "\"name\":\"scheduler\",\"job\":\"j1\","
                            "\"workers\":[{\"job\":\"j1\",\"name\":\"w0\","),
                  "%s", t);
    free(t);
    fix_free(&x);
}
END_TEST

/* preducectl jobs, and workers JOB: the job's rows alone. */
START_TEST(test_ctl_view_jobs)
{
    struct fix x;
    ck_assert_int_eq(build(&x, sched_text), 0);
    struct pr_ctl_view *v = &x.v;
    ck_assert_uint_eq(v->njobs, 2);
    ck_assert_str_eq(v->jobs[0].name, "j1");
    ck_assert(v->jobs[0].id == 3 && v->jobs[0].workers == 3 &&
              v->jobs[0].queued == 1 && v->jobs[0].groups == 8);
    ck_assert(isnan(v->jobs[1].queued) && v->jobs[1].groups == 2);
    char *t = printed(v, table_jobs);
    ck_assert_str_eq(t,
                     "scheduler (job j1) at ADDR\n"
                     "  job     id  policy     key  workers  waiting    "
                     "groups\n"
                     "  j1       3  dynamic      ?        3        1         "
                     "8\n"
                     "  j2       7  allreduce  yes        1        -         "
                     "2\n");
    free(t);
    t = printed(v, json_jobs);
    ck_assert_str_eq(
        t, "{\"address\":\"ADDR\",\"role\":\"scheduler\",\"name\":"
           "\"scheduler\",\"job\":\"j1\",\"jobs\":[{\"name\":\"j1\",\"id\":3,"
           "\"policy\":\"dynamic\",\"key\":\"?\",\"workers\":3,\"waiting\":1,"
           "\"groups\":8},{\"name\":\"j2\",\"id\":7,\"policy\":\"allreduce\","
           "\"key\":\"yes\",\"workers\":1,"
           "\"waiting\":null,\"groups\":2}]}");
    free(t);
    pr_ctl_view_keep_job(v, "j2");
    ck_assert(v->nworkers == 1 && v->njobs == 1);
    ck_assert(!strcmp(v->workers[0].job, "j2") && v->workers[0].version == 4);
    pr_ctl_view_keep_job(v, "none");
    ck_assert(v->nworkers == 0 && v->njobs == 0);
    fix_free(&x);
}
END_TEST

START_TEST(test_ctl_view_node)
{
    struct fix x;
    ck_assert_int_eq(build(&x, node_text), 0);
    const struct pr_ctl_view *v = &x.v;
    ck_assert_int_eq(v->role, PR_CTL_NODE);
    ck_assert(v->node_id == 3 && v->reduce_count == 4);
    ck_assert(v->bytes[PR_CTL_TCP][PR_CTL_SENT] == 2048);
    ck_assert(v->bytes[PR_CTL_RDMA][PR_CTL_RECEIVED] == 0);
    /* The trainer not registered yet (rank -1) first. */
    ck_assert_uint_eq(v->nworkers, 2);
    ck_assert_str_eq(v->workers[0].name, "b");

    char *t = printed(v, table_status);
    ck_assert_str_eq(t, "node n0 (job j1, node id 3) at ADDR\n"
                        "  scheduler link   up\n"
                        "  trainers         2\n"
                        "  reduces          4 ok, 1 failed, mean 2.50 ms\n"
                        "  groups           3 ok, 0 failed, 1 running\n"
                        "  bytes tcp        2.0 KiB sent, 1000 B received\n"
                        "  bytes rdma       0 B sent, 0 B received\n"
                        "  wire             bf16 by default; sent fp32 1.0 "
                        "KiB, bf16 1.0 KiB, int8 0 B\n"
                        "  peer links up    1\n"
                        "  trainer  job       rank   version\n"
                        "  b        j1          -1         0\n"
                        "  a        sweep-2      4         3\n");
    free(t);
    t = printed(v, table_workers);
    ck_assert_str_eq(t, "node n0 (job j1, node id 3) at ADDR\n"
                        "  trainer  job       rank   version\n"
                        "  b        j1          -1         0\n"
                        "  a        sweep-2      4         3\n");
    free(t);
    t = printed(v, json_status);
    ck_assert_str_eq(
        t, "{\"address\":\"ADDR\",\"role\":\"node\",\"name\":\"n0\","
           "\"job\":\"j1\",\"node_id\":3,\"scheduler_up\":true,"
           "\"trainers\":2,\"reduces_ok\":4,\"reduces_failed\":1,"
           "\"reduce_mean_ms\":2.5,\"groups_ok\":3,\"groups_failed\":0,"
           "\"groups_running\":1,\"bytes\":{\"tcp\":{\"sent\":2048,"
           "\"received\":1000},\"rdma\":{\"sent\":0,\"received\":0}},"
           "\"wire_default\":\"bf16\",\"wire\":{\"fp32\":{\"groups\":1,"
           "\"bytes_sent\":1024},\"bf16\":{\"groups\":2,\"bytes_sent\":"
           "1024},\"int8\":{\"groups\":0,\"bytes_sent\":0}},"
           "\"peer_links_up\":1,\"rdma_device\":false,\"workers\":[{"
           "\"job\":\"j1\",\"name\":\"b\",\"rank\":-1,\"version\":0},{"
           "\"job\":\"sweep-2\",\"name\":\"a\",\"rank\":4,\"version\":3}]}");
    free(t);
    t = printed(v, json_workers);
    ck_assert_str_eq(t, "{\"address\":\"ADDR\",\"role\":\"node\",\"name\":"
                        "\"n0\",\"job\":\"j1\",\"node_id\":3,\"workers\":[{"
                        "\"job\":\"j1\",\"name\":\"b\",\"rank\":-1,"
                        "\"version\":0},{\"job\":\"sweep-2\",\"name\":"
                        "\"a\",\"rank\":4,\"version\":3}]}");
    free(t);
    fix_free(&x);
}
END_TEST

/*
 * A node from before wire encodings exports none: no wire line, and
 * the JSON says so with an empty default and no encodings.
 */
START_TEST(test_ctl_view_node_without_wire)
{
    struct fix x;
    ck_assert_int_eq(build(&x,
                           "preduce_info{role=\"node\",job=\"j\",name=\"n\","
                           "node_id=\"1\"} 1\n"),
                     0);
    ck_assert_str_eq(x.v.wire_default, "");
    ck_assert_uint_eq(x.v.nwires, 0);
    char *t = printed(&x.v, table_status);
    ck_assert_ptr_null(strstr(t, "wire"));
    free(t);
    t = printed(&x.v, json_status);
    ck_assert_ptr_nonnull(strstr(t, "\"wire_default\":\"\",\"wire\":{},"));
    free(t);
    fix_free(&x);
}
END_TEST

/* No preduce_info of a known role: not a preduced endpoint. */
START_TEST(test_ctl_view_not_preduced)
{
    static const char *const texts[] = {
        "",
        "up 1\n",
        "preduce_info 1\n",
        "preduce_info{role=\"proxy\"} 1\n",
        "preduce_info{job=\"j\"} 1\npreduce_info{role=\"node\"} 1\n",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct fix x;
        ck_assert_msg(build(&x, texts[i]) == -ENOENT, "text %zu", i);
        ck_assert_uint_eq(x.v.nworkers, 0);
        fix_free(&x);
    }
    /* Without name and job: "?", and no sizes nor workers. */
    struct fix x;
    ck_assert_int_eq(build(&x, "preduce_info{role=\"scheduler\"} 1\n"), 0);
    ck_assert_str_eq(x.v.job, "?");
    ck_assert_uint_eq(x.v.nsizes + x.v.nworkers, 0);
    char *t = printed(&x.v, table_workers);
    ck_assert_str_eq(t, "scheduler (job ?) at ADDR\n  no workers\n");
    free(t);
    fix_free(&x);
    ck_assert_int_eq(build(&x, "preduce_info{role=\"node\"} 1\n"), 0);
    t = printed(&x.v, table_workers);
    ck_assert_str_eq(t, "node ? (job ?, node id ?) at ADDR\n  no trainers\n");
    free(t);
    fix_free(&x);
}
END_TEST

/*
 * Labels a daemon would not send: a rank far past any array (the rows are
 * matched by search, nothing is sized by it), one that is no number,
 * none, and control characters, which the tables show as '?' and the
 * JSON escapes.
 */
START_TEST(test_ctl_view_hostile_labels)
{
    struct fix x;
    ck_assert_int_eq(
        build(&x,
              "preduce_info{role=\"scheduler\",job=\"\x1b[2J\"} 1\n"
              "preduce_worker_version{worker=\"big\",rank=\"4000000000\"} 1\n"
              "preduce_worker_version{worker=\"nan\",rank=\"x\"} 2\n"
              "preduce_worker_version{worker=\"none\"} 3\n"
              "preduce_worker_version{rank=\"0\"} 4\n"
              "preduce_worker_version{worker=\"c\\n\x01\",rank=\"0\"} 5\n"
              "preduce_worker_step_seconds{worker=\"big\",rank=\"4000000000\"}"
              " 2\n"
              "preduce_worker_step_seconds{worker=\"nan\",rank=\"x\"} 3\n"),
        0);
    const struct pr_ctl_view *v = &x.v;
    ck_assert_uint_eq(v->nworkers, 4);
    ck_assert_str_eq(v->workers[0].name, "c\n\x01");
    ck_assert(v->workers[1].rank == 4e9 && v->workers[1].step_s == 2);
    /* Without a rank: last, and matched by name alone. */
    ck_assert(isnan(v->workers[2].rank) && v->workers[2].step_s == 3);
    ck_assert_str_eq(v->workers[3].name, "none");
    char *t = printed(v, table_workers);
    ck_assert_ptr_nonnull(strstr(t, "(job ?[2J)"));
    ck_assert_ptr_nonnull(strstr(t, "\n       c??  "));
    ck_assert_ptr_nonnull(strstr(t, "\n       big     4000000000     -  "));
    ck_assert_ptr_null(strchr(t, '\x1b'));
    free(t);
    t = printed(v, json_workers);
    ck_assert_ptr_nonnull(strstr(t, "\"job\":\"\\u001b[2J\""));
    ck_assert_ptr_nonnull(
        strstr(t, "{\"job\":\"\",\"name\":\"c\\n\\u0001\",\"rank\":0,"));
    ck_assert_ptr_nonnull(
        strstr(t, "{\"job\":\"\",\"name\":\"nan\",\"rank\":null,"));
    free(t);
    fix_free(&x);
}
END_TEST

/*
 * Under make asan a failed allocation returns NULL, as libc's does,
 * rather than ending the process, so that the next test sees its error
 * path. (ASan reads this hook at start.)
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/*
 * The view of a daemon's info line and a million samples `name` (all
 * pointing at one line) built under an address-space limit of what is
 * mapped now and 16 MiB: room for neither a million workers' rows
 * (~200 bytes each) nor a million sizes (24 bytes each). The test runs
 * in a process of its own (Check's fork mode).
 */
static int view_of_many(const char *role, const char *name, const char *labels)
{
    enum { N = 1000000 };
    struct pr_promtext m = {0};
    m.s = malloc(N * sizeof(*m.s));
    ck_assert_ptr_nonnull(m.s);
    m.n = m.cap = N;
    m.s[0] = (struct pr_prom_sample){.name = "preduce_info", .labels = role};
    for (size_t i = 1; i < N; i++)
        m.s[i] = (struct pr_prom_sample){.name = name, .labels = labels};
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_AS, &old), 0);
    lim = old;
    lim.rlim_cur = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (16ul << 20);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
    struct pr_ctl_view v;
    int rc = pr_ctl_view_build(&m, &v);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
    pr_ctl_view_free(&v);
    free(m.s);
    return rc;
}

START_TEST(test_ctl_view_out_of_memory)
{
    const char *node = "role=\"node\"", *sched = "role=\"scheduler\"";
    /* The limit alone fails nothing: samples that make no rows. */
    ck_assert_int_eq(view_of_many(node, "up", ""), 0);
    ck_assert_int_eq(
        view_of_many(node, "preduce_worker_version", "worker=\"w\",rank=\"1\""),
        -ENOMEM);
    ck_assert_int_eq(
        view_of_many(sched, "preduce_sched_group_size_bucket", "le=\"1\""),
        -ENOMEM);
}
END_TEST

static Suite *ctl_view_suite(void)
{
    Suite *s = suite_create("ctl_view");
    TCase *tc = tcase_create("view");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ctl_view_scheduler);
    tcase_add_test(tc, test_ctl_view_jobs);
    tcase_add_test(tc, test_ctl_view_node);
    tcase_add_test(tc, test_ctl_view_node_without_wire);
    tcase_add_test(tc, test_ctl_view_not_preduced);
    tcase_add_test(tc, test_ctl_view_hostile_labels);
    tcase_add_test(tc, test_ctl_view_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(ctl_view_suite());
}
