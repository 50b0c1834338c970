/* SPDX-License-Identifier: MIT */
/*
 * Two jobs of one model size on the same 4 hosts (network namespaces on a
 * bridge, tests/hosts/hosts.h), one scheduler, a trainer of each job on
 * every host: each trainer names its job, and its inputs differ from the
 * other job's trainer of the same rank and version (the harness's job
 * salt), so every result is checked against its own job's members alone
 * and one that mixed the jobs would fail. Then one job's trainers are
 * SIGKILLed while the other job's go on: not one of the other job's
 * reduces may fail. In the first test each job has its own key, and a
 * trainer that names one job with the other's key is refused. In the
 * last, the second job runs on a scheduler of its own on host 1
 * (PREDUCE_SCHEDULER), which is SIGKILLed: again none of the first job's
 * reduces may fail.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check_run.h"
#include "tests/hosts/hosts.h"

#define NHOSTS 4
#define NJOBS  2
#define NTRAIN (NHOSTS * NJOBS)
#define NFLOAT 20011

static const char *const jobs[NJOBS] = {"sweep-a", "sweep-b"};

static struct hh h;

static void setup(void)
{
    ck_assert_int_eq(hh_up(&h, NHOSTS), 0);
    for (int i = 0; i < NHOSTS; i++)
        ck_assert_int_eq(hh_net(&h, "cap %d 200mbit", i), 0);
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    ck_assert_int_eq(hh_start(&h, sets, NULL), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(hh_down(&h), 0);
}

/* Each job's key file (test_hosts_two_jobs_never_mix); "": none. */
static char keys[NJOBS][320];

static void write_keys(void)
{
    for (int j = 0; j < NJOBS; j++) {
        snprintf(keys[j], sizeof(keys[j]), "%s/%s.key", h.c.dir, jobs[j]);
        FILE *f = fopen(keys[j], "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "the key of %s, 0123456789abcdef\n", jobs[j]);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(chmod(keys[j], 0600), 0);
    }
}

/*
 * Trainer i: job i / NHOSTS, on host i % NHOSTS; on scheduler `sched`
 * (NULL: its node's), with failed reduces allowed if `tolerate`.
 */
static pid_t spawn_on(int i, char *name, size_t len, double run_s, int trace,
                      const char *sched, int tolerate)
{
    snprintf(name, len, "%c%d", 'a' + i / NHOSTS, i % NHOSTS);
    struct h_trainer_opts o = {.name = name,
                               .node = i % NHOSTS,
                               .n = NFLOAT,
                               .nparts = 2,
                               .slow_ms = 1 + i % 3,
                               .run_s = run_s,
                               .trace = trace,
                               .strict = 1,
                               .job = jobs[i / NHOSTS],
                               .job_key = keys[i / NHOSTS][0] ? keys[i / NHOSTS]
                                                              : NULL,
                               .scheduler = sched,
                               .tolerate_errors = tolerate,
                               .retry_ms = tolerate ? 20 : 0};
    pid_t pid = h_trainer_spawn(&h.c, &o);
    ck_assert_int_gt(pid, 0);
    return pid;
}

static pid_t spawn(int i, char *name, size_t len, double run_s, int trace)
{
    return spawn_on(i, name, len, run_s, trace, NULL, 0);
}

/* Trainer `name`'s checked results and largest group; none failed. */
static long results(const char *name, long *maxk)
{
    long steps, errors, nonuni;
    double secs;
    ck_assert_int_eq(h_trainer_figures(&h.c, name, &steps, &secs, &errors), 0);
    ck_assert_int_eq(h_trainer_groups(&h.c, name, &nonuni, maxk), 0);
    ck_assert_msg(errors == 0, "%s: %ld failed reduces", name, errors);
    return steps;
}

START_TEST(test_hosts_two_jobs_never_mix)
{
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    write_keys();
    for (int i = 0; i < NTRAIN; i++)
        pids[i] = spawn(i, names[i], sizeof(names[i]), 3.0, 0);
    /* Once job a runs, keyed: a trainer naming it with b's key, on host 3. */
    for (int t = 0;
         t < 200 && !h_log_contains(&h.c, "sched", "job 'sweep-a' has a key");
         t++)
        usleep(50 * 1000);
    ck_assert(h_log_contains(&h.c, "sched", "job 'sweep-a' has a key"));
    struct h_trainer_opts in = {.name = "intruder",
                                .node = 3,
                                .n = NFLOAT,
                                .nparts = 2,
                                .steps = 5,
                                .job = jobs[0],
                                .job_key = keys[1]};
    pid_t intruder = h_trainer_spawn(&h.c, &in);
    ck_assert_int_gt(intruder, 0);
    ck_assert_int_eq(h_wait(intruder, 10000), 2); /* its connect failed */
    ck_assert(h_log_contains(&h.c, "sched",
                             "worker 'intruder' refused: job "
                             "'sweep-a' has another key"));
    ck_assert_int_eq(h_wait_trainers(pids, names, NTRAIN, 60000), 0);
    long total[NJOBS] = {0}, maxk[NJOBS] = {0};
    for (int i = 0; i < NTRAIN; i++) {
        long k;
        long steps = results(names[i], &k);
        ck_assert_int_gt(steps, 3);
        /* More than a job's 4 workers in a group would mix the jobs. */
        ck_assert_msg(k <= NHOSTS, "%s: a group of %ld", names[i], k);
        total[i / NHOSTS] += steps;
        if (k > maxk[i / NHOSTS])
            maxk[i / NHOSTS] = k;
    }
    for (int j = 0; j < NJOBS; j++) {
        char started[64];
        snprintf(started, sizeof(started), "job '%s' started", jobs[j]);
        ck_assert(h_log_contains(&h.c, "sched", started));
        /* Both jobs formed groups, not just groups of one. */
        ck_assert_int_gt(maxk[j], 1);
        printf("two jobs: %s: %ld checked results, groups of up to %ld\n",
               jobs[j], total[j], maxk[j]);
    }
}
END_TEST

/* Trainer `name`'s traced reduces: all ok, and how many began after t. */
static long ok_after(const char *name, double t)
{
    struct h_trace *tr;
    int n = h_trace_read(&h.c, name, &tr);
    ck_assert_int_gt(n, 0);
    long mine = 0;
    for (int j = 0; j < n; j++) {
        ck_assert_msg(tr[j].rc == 0, "%s: reduce %d failed: %d", name, j,
                      tr[j].rc);
        mine += tr[j].t0 > t;
    }
    free(tr);
    return mine;
}

/*
 * The NHOSTS trainers names[] of the job that went on while the other
 * job's trainers or scheduler were killed at `killed`: every result
 * checked, none failed, no group beyond the job's, and each reduced in
 * groups after the kill. Their results after it; *total all of them.
 */
static long went_on(char (*names)[16], double killed, long *total)
{
    long after = 0;
    *total = 0;
    for (int i = 0; i < NHOSTS; i++) {
        long k;
        *total += results(names[i], &k);
        ck_assert_msg(k <= NHOSTS, "%s: a group of %ld", names[i], k);
        long mine = ok_after(names[i], killed);
        ck_assert_msg(mine > 3, "%s: %ld results after the kill", names[i],
                      mine);
        after += mine;
    }
    return after;
}

START_TEST(test_hosts_job_killed_other_unharmed)
{
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    /* Job a's trainers would run 20 s; job b's 6 s, traced. */
    for (int i = 0; i < NTRAIN; i++)
        pids[i] = spawn(i, names[i], sizeof(names[i]), i < NHOSTS ? 20.0 : 6.0,
                        i >= NHOSTS);
    usleep(2500 * 1000);
    double killed = h_now();
    for (int i = 0; i < NHOSTS; i++) {
        ck_assert_int_eq(kill(pids[i], SIGKILL), 0);
        h_wait(pids[i], 5000);
    }
    ck_assert_int_eq(
        h_wait_trainers(pids + NHOSTS, names + NHOSTS, NHOSTS, 60000), 0);
    long total, after = went_on(names + NHOSTS, killed, &total);
    printf("job killed: %s's 4 trainers SIGKILLed; %s: %ld checked results, "
           "%ld after the kill, none failed\n",
           jobs[0], jobs[1], total, after);
}
END_TEST

START_TEST(test_hosts_job_scheduler_killed_other_unharmed)
{
    struct h_cluster jb;
    struct h_place at = {{0}, {0}};
    snprintf(at.netns, sizeof(at.netns), "%s-h1", h.prefix);
    hh_addr(1, at.addr, sizeof(at.addr));
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    ck_assert_int_eq(h_cluster_start_at(&jb, 0, &at, NULL, sets, NULL), 0);
    char spec[64];
    snprintf(spec, sizeof(spec), "%s:%u", at.addr, jb.sched_port);
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    /* Job a on the nodes' scheduler, traced; job b on its own. */
    for (int i = 0; i < NTRAIN; i++)
        pids[i] = spawn_on(i, names[i], sizeof(names[i]), 6.0, i < NHOSTS,
                           i < NHOSTS ? NULL : spec, i >= NHOSTS);
    usleep(2500 * 1000);
    char started[64];
    snprintf(started, sizeof(started), "job '%s' started", jobs[1]);
    ck_assert(h_log_contains(&jb, "sched", started));
    double killed = h_now();
    ck_assert_int_eq(kill(jb.sched_pid, SIGKILL), 0);
    h_wait(jb.sched_pid, 5000);
    jb.sched_pid = 0;
    ck_assert_int_eq(h_wait_trainers(pids, names, NTRAIN, 60000), 0);
    long total, after = went_on(names, killed, &total);
    /*
     * Job b reduced on its own scheduler, never on the nodes', and lost
     * reduces once its scheduler was gone.
     */
    long b_done = 0, b_failed = 0;
    for (int i = NHOSTS; i < NTRAIN; i++) {
        long steps, errors;
        double secs;
        ck_assert_int_eq(
            h_trainer_figures(&h.c, names[i], &steps, &secs, &errors), 0);
        b_done += steps;
        b_failed += errors;
    }
    ck_assert_int_gt(b_done, 3 * NHOSTS);
    ck_assert_int_gt(b_failed, 0);
    snprintf(started, sizeof(started), "job '%s'", jobs[1]);
    ck_assert(!h_log_contains(&h.c, "sched", started));
    printf("job scheduler killed: %s's own scheduler SIGKILLed; %s: %ld "
           "checked results, %ld after the kill, none failed\n",
           jobs[1], jobs[0], total, after);
    ck_assert_int_eq(h_cluster_stop(&jb), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hosts_jobs");
    TCase *tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_hosts_two_jobs_never_mix);
    tcase_add_test(tc, test_hosts_job_killed_other_unharmed);
    tcase_add_test(tc, test_hosts_job_scheduler_killed_other_unharmed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
