/* SPDX-License-Identifier: MIT */
/*
 * A job on its own scheduler (PREDUCE_SCHEDULER): two node daemons follow
 * their own scheduler (node.scheduler), where job "a" runs, and, for the
 * trainers that name it, a second one, where job "b" runs with the same
 * model size. Every trainer checks every result against its own job's
 * members (a job's inputs differ from the other's, so a mixed result
 * fails). Killing b's scheduler fails no reduce of a's, and killing the
 * nodes' scheduler none of b's; a scheduler no
 * trainer names any more is left; a malformed one, or one past
 * node.max_schedulers, is refused at connect with the reason. The node's
 * metrics count over both schedulers, and keep a left one's counts.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "preduce.h"
#include "tests/check_run.h"
#include "tests/integration/harness.h"

#define PER_JOB 2

static const char *const sched_sets[] = {
    "scheduler.policy=allreduce", "scheduler.heartbeat_ms=200",
    "scheduler.node_timeout_ms=1000", NULL};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls who's log in cluster c for up to 10 s. */
static int says(const struct h_cluster *c, const char *who, const char *s)
{
    return h_log_wait(c, who, s, 10000);
}

/*
 * The node's scheduler (cluster c, two nodes) and job b's (jb, no node
 * of its own); *spec gets b's address for PREDUCE_SCHEDULER.
 */
static void start(struct h_cluster *c, struct h_cluster *jb, char *spec,
                  size_t len, const char *extra)
{
    ck_assert_int_eq(h_cluster_start(jb, 0, sched_sets, NULL), 0);
    const char *const node_sets[] = {"scheduler.heartbeat_ms=200",
                                     "scheduler.node_timeout_ms=1000", extra,
                                     NULL};
    ck_assert_int_eq(h_cluster_start(c, 2, sched_sets, node_sets), 0);
    snprintf(spec, len, "127.0.0.1:%u", jb->sched_port);
}

/* Spawns job `job`'s PER_JOB trainers, one a node, into pids/names. */
static void spawn_job(const struct h_cluster *c, const char *job,
                      const char *sched, double run_s, int tolerate,
                      pid_t *pids, char (*names)[16])
{
    for (int i = 0; i < PER_JOB; i++) {
        snprintf(names[i], sizeof(names[i]), "%s%d", job, i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 4096,
                                   .nparts = 2,
                                   .uniform = 1,
                                   .run_s = run_s,
                                   .join_k = PER_JOB,
                                   .tolerate_errors = tolerate,
                                   .retry_ms = 5,
                                   .trace = 1,
                                   .strict = 1,
                                   .job = job,
                                   .scheduler = sched};
        pids[i] = h_trainer_spawn(c, &o);
        ck_assert_int_gt(pids[i], 0);
    }
}

/* Results a trainer's trace holds in groups of PER_JOB, after `from`. */
static int full_groups_after(const struct h_cluster *c, const char *name,
                             double from)
{
    struct h_trace *t;
    int n = h_trace_read(c, name, &t);
    ck_assert_int_gt(n, 0);
    int k = 0;
    for (int i = 0; i < n; i++)
        k += t[i].rc == 0 && t[i].k == PER_JOB && t[i].t0 >= from;
    free(t);
    return k;
}

START_TEST(test_two_schedulers_keep_jobs_apart)
{
    struct h_cluster c, jb;
    char spec[64];
    start(&c, &jb, spec, sizeof(spec), NULL);
    pid_t pids[2 * PER_JOB];
    char names[2 * PER_JOB][16];
    spawn_job(&c, "a", NULL, 3.0, 0, pids, names);
    spawn_job(&c, "b", spec, 3.0, 0, pids + PER_JOB, names + PER_JOB);
    /* Every reduce of both jobs succeeds, each checked against its job. */
    ck_assert_int_eq(h_wait_trainers(pids, names, 2 * PER_JOB, 30000), 0);
    for (int i = 0; i < 2 * PER_JOB; i++)
        ck_assert_int_gt(full_groups_after(&c, names[i], 0), 10);
    /* b's groups came from b's scheduler, a's from the nodes'. */
    ck_assert(says(&jb, "sched", "(node0) joined"));
    ck_assert(says(&jb, "sched", "(node1) joined"));
    ck_assert(says(&jb, "sched", "(b0) joined"));
    ck_assert(!h_log_contains(&jb, "sched", "(a0)"));
    ck_assert(says(&c, "sched", "(a0) joined"));
    ck_assert(!h_log_contains(&c, "sched", "(b0)"));
    /* Its last trainer gone, the nodes leave b's scheduler. */
    for (int i = 0; i < 2; i++) {
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        ck_assert(says(&c, who, "no trainer follows it: leaving it"));
    }
    ck_assert(says(&jb, "sched", "(node0) lost"));
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

/*
 * _i 0: b's own scheduler is killed, and a (on the nodes') must go on;
 * _i 1: the nodes' scheduler is killed, and b (on its own) must go on.
 */
START_TEST(test_job_scheduler_killed_spares_the_other_job)
{
    struct h_cluster c, jb;
    char spec[64];
    start(&c, &jb, spec, sizeof(spec), NULL);
    pid_t pids[2 * PER_JOB];
    char names[2 * PER_JOB][16];
    /* The job that goes on tolerates no failed reduce; the other must. */
    int spared = _i == 0 ? 0 : PER_JOB, hit = PER_JOB - spared;
    spawn_job(&c, "a", NULL, 4.0, _i == 1, pids, names);
    spawn_job(&c, "b", spec, 4.0, _i == 0, pids + PER_JOB, names + PER_JOB);
    sleep_ms(1500);
    double killed = h_now();
    struct h_cluster *victim = _i == 0 ? &jb : &c;
    ck_assert_int_eq(kill(victim->sched_pid, SIGKILL), 0);
    h_wait(victim->sched_pid, 5000);
    victim->sched_pid = 0;
    ck_assert_int_eq(h_wait_trainers(pids, names, 2 * PER_JOB, 30000), 0);
    long errors[2] = {0, 0};
    for (int i = 0; i < 2 * PER_JOB; i++) {
        long steps, e;
        double secs;
        ck_assert_int_eq(h_trainer_figures(&c, names[i], &steps, &secs, &e), 0);
        errors[i >= PER_JOB] += e;
    }
    /* The spared job went on in full groups after the kill; not the other. */
    for (int i = spared; i < spared + PER_JOB; i++)
        ck_assert_int_gt(full_groups_after(&c, names[i], killed + 0.5), 10);
    ck_assert_int_eq(errors[spared / PER_JOB], 0);
    ck_assert_int_gt(errors[hit / PER_JOB], 0);
    printf("jobsched: %s scheduler killed: a's reduces failed %ld, b's "
           "%ld\n",
           _i == 0 ? "b's own" : "the nodes'", errors[0], errors[1]);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

/*
 * Connects as `name` naming scheduler `sched` ("": none) and closes: the
 * code, *why the reason.
 */
static int connect_naming(const struct h_cluster *c, const char *name,
                          const char *sched, char *why, size_t len)
{
    preduce_options_t *o;
    ck_assert_int_eq(preduce_options_create(&o), 0);
    if (sched[0])
        ck_assert_int_eq(preduce_options_set(o, "scheduler", sched), 0);
    preduce_client_t *cl = NULL;
    int rc = preduce_connect_with(c->sock[0], name, o, 5000, &cl);
    snprintf(why, len, "%s", rc < 0 ? preduce_last_error(NULL) : "");
    preduce_options_destroy(o);
    if (cl)
        preduce_close(cl);
    return rc;
}

START_TEST(test_bad_or_one_too_many_scheduler_refused)
{
    struct h_cluster c, jb;
    char spec[64], why[256];
    start(&c, &jb, spec, sizeof(spec), "node.max_schedulers=1");
    /* The library takes it (it has a ':'); the daemon checks the port. */
    ck_assert_int_eq(connect_naming(&c, "w0", "127.0.0.1:0", why, sizeof(why)),
                     -EINVAL);
    ck_assert_msg(strstr(why, "scheduler is host:port"), "%s", why);
    /* With node.max_schedulers = 1 only the node's own may be named. */
    ck_assert_int_eq(connect_naming(&c, "w1", spec, why, sizeof(why)), -EUSERS);
    ck_assert_msg(strstr(why, "node.max_schedulers"), "%s", why);
    char own[64];
    snprintf(own, sizeof(own), " 127.0.0.1:%u ", c.sched_port);
    ck_assert_int_eq(connect_naming(&c, "w2", own, why, sizeof(why)), 0);
    /* Nothing opened for the others. */
    char opened[96];
    snprintf(opened, sizeof(opened), "scheduler %s: peers", spec);
    ck_assert(!h_log_contains(&c, "node0", opened));
    ck_assert(!h_log_contains(&c, "node0", "scheduler 127.0.0.1:0: peers"));
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

/*
 * A named scheduler that does not answer: the trainer's connect fails
 * after node.connect_timeout_ms, naming it, and the node leaves it.
 */
START_TEST(test_unreachable_scheduler_named)
{
    struct h_cluster c, jb;
    char spec[64], why[256];
    start(&c, &jb, spec, sizeof(spec), "node.connect_timeout_ms=500");
    snprintf(spec, sizeof(spec), "127.0.0.1:%u", h_free_port());
    ck_assert_int_eq(connect_naming(&c, "w0", spec, why, sizeof(why)),
                     -ENOTCONN);
    char says_why[128];
    snprintf(says_why, sizeof(says_why), "no link to scheduler %s", spec);
    ck_assert_msg(strstr(why, says_why), "%s", why);
    ck_assert(says(&c, "node0", "no trainer follows it: leaving it"));
    /* The node's own scheduler serves on. */
    ck_assert_int_eq(connect_naming(&c, "w1", "", why, sizeof(why)), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

/* A counter of node metrics `text`; it must be there. */
static double metric(const char *text, const char *prefix)
{
    double v = h_metric(text, prefix);
    ck_assert_msg(v == v, "%s: not in the metrics", prefix);
    return v;
}

static const char groups_ok[] = "preduce_node_groups_total{status=\"ok\"} ";
static const char tcp_sent[] = "preduce_node_bytes_total{transport=\"tcp\","
                               "direction=\"sent\"} ";

START_TEST(test_metrics_over_schedulers)
{
    struct h_cluster c, jb;
    ck_assert_int_eq(h_cluster_start(&jb, 0, sched_sets, NULL), 0);
    ck_assert_int_eq(h_cluster_start(&c, 0, sched_sets, NULL), 0);
    uint16_t mport = h_free_port();
    char listen[64];
    snprintf(listen, sizeof(listen), "metrics.listen=127.0.0.1:%u", mport);
    const char *const with[] = {listen, NULL};
    c.nnodes = 2;
    ck_assert_int_eq(h_node_start(&c, 0, with), 0);
    ck_assert_int_eq(h_node_start(&c, 1, NULL), 0);
    char spec[64];
    snprintf(spec, sizeof(spec), "127.0.0.1:%u", jb.sched_port);
    /*
     * A trainer of another job on b's scheduler, connected throughout:
     * node 0 follows that scheduler until it leaves, whenever b's end.
     */
    preduce_options_t *o;
    preduce_client_t *hold = NULL;
    ck_assert_int_eq(preduce_options_create(&o), 0);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", spec), 0);
    ck_assert_int_eq(preduce_options_set(o, "job", "hold"), 0);
    ck_assert_int_eq(preduce_connect_with(c.sock[0], "h0", o, 5000, &hold), 0);
    preduce_options_destroy(o);
    pid_t pids[2 * PER_JOB];
    char names[2 * PER_JOB][16];
    spawn_job(&c, "a", NULL, 3.0, 0, pids, names);
    spawn_job(&c, "b", spec, 3.0, 0, pids + PER_JOB, names + PER_JOB);
    ck_assert_int_eq(h_trainer_warm(&c, "b0", 10000), 0);
    ck_assert_int_eq(h_trainer_warm(&c, "a0", 10000), 0);
    char *during = h_metrics_fetch(mport);
    ck_assert_ptr_nonnull(during);
    ck_assert_int_eq(metric(during, "preduce_node_schedulers "), 2);
    /* b's workers carry their scheduler: names are a job's own there. */
    char b0[128];
    snprintf(b0, sizeof(b0),
             "preduce_worker_version{scheduler=\"%s\",job=\"b\","
             "worker=\"b0\"",
             spec);
    ck_assert_msg(strstr(during, b0), "no %s", b0);
    ck_assert(strstr(during, "preduce_worker_version{job=\"a\",worker=\"a0\""));
    free(during);
    ck_assert_int_eq(h_wait_trainers(pids, names, 2 * PER_JOB, 30000), 0);
    /* Every reducing trainer gone; b's scheduler is followed for h0. */
    char *gone = h_metrics_fetch(mport);
    ck_assert_ptr_nonnull(gone);
    ck_assert_int_eq(metric(gone, "preduce_node_schedulers "), 2);
    double ok0 = metric(gone, groups_ok), sent0 = metric(gone, tcp_sent);
    free(gone);
    preduce_close(hold);
    ck_assert(says(&c, "node0", "no trainer follows it: leaving it"));
    char *after = h_metrics_fetch(mport);
    ck_assert_ptr_nonnull(after);
    ck_assert_int_eq(metric(after, "preduce_node_schedulers "), 1);
    /* b's groups and bytes stay counted once its scheduler is left. */
    ck_assert(metric(after, groups_ok) >= ok0);
    ck_assert(metric(after, tcp_sent) >= sent0);
    ck_assert(!strstr(after, "scheduler=\""));
    free(after);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_jobsched");
    TCase *tc = tcase_create("jobsched");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_two_schedulers_keep_jobs_apart);
    tcase_add_loop_test(tc, test_job_scheduler_killed_spares_the_other_job, 0,
                        2);
    tcase_add_test(tc, test_bad_or_one_too_many_scheduler_refused);
    tcase_add_test(tc, test_metrics_over_schedulers);
    tcase_add_test(tc, test_unreachable_scheduler_named);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
