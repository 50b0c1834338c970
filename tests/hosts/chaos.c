/* SPDX-License-Identifier: MIT */
/*
 * make check-chaos (make soak-chaos for longer): a job under random
 * failures across 4 hosts (tests/hosts/hosts.h), against the same job
 * without them.
 *
 * The job: the first scheduler on host 0, a standby on host 1 (every node
 * lists both, node.scheduler), a node daemon and 2 strict trainers on each
 * host, host 3's trainers 3x slower, policy dynamic, each link capped at
 * 200 mbit. Strict trainers check every result against their members'
 * exact inputs, that versions and group ids never go back, and that a
 * failed reduce left their input in place.
 *
 * First CHAOS_S seconds without failures, then CHAOS_S seconds in which
 * every CHAOS_EVERY_S seconds one of these happens, in turn and on a
 * host chosen at random (seed CHAOS_SEED, printed): a trainer killed
 * (SIGKILL) and a new one started 2 s later; a node daemon killed with
 * its trainers, restarted with new ones 2 s later; the active scheduler
 * killed and restarted 2 s later; a host's cable out for 5 s.
 *
 * It prints the goodput (results in the chaos run over results in the
 * failure-free run), failed reduces by code, for each kind of failure the
 * longest the other trainers went without a result after it (the stall),
 * and the daemons' memory; it fails on any wrong result (a trainer that
 * exits non-zero), a hang (a trainer past its end by 60 s) or a daemon
 * that crashed.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/hosts/hosts.h"

#define NHOSTS     4
#define PER        2
#define MAX_TRAIN  256
#define MAX_EVENTS 256
#define SLOW_HOST  3

enum kind { K_TRAINER, K_NODE, K_SCHED, K_CUT, K_KINDS };
static const char *const kind_names[K_KINDS] = {"trainer", "node daemon",
                                                "scheduler", "cable cut"};

struct trainer {
    char name[16];
    pid_t pid; /* 0: exited and checked, or killed */
    int host;
    int killed;
};

struct event {
    enum kind kind;
    int host;
    double t; /* h_now() when it struck */
};

static struct hh h;
static struct h_cluster standby;
static struct trainer tr[MAX_TRAIN];
static int ntr;
static struct event ev[MAX_EVENTS];
static int nev;
static char node_list[160];

/* The first scheduler's; [0] is its scheduler.listen, set at the start. */
static char first_listen[80];
static const char *sched_sets[] = {first_listen,
                                   "scheduler.policy=dynamic",
                                   "scheduler.window_ms=5",
                                   "scheduler.heartbeat_ms=200",
                                   "scheduler.node_timeout_ms=1000",
                                   NULL};

static const char *const *node_sets(void)
{
    static const char *sets[] = {NULL,
                                 "node.scheduler_settle_ms=1000",
                                 "scheduler.heartbeat_ms=200",
                                 "scheduler.node_timeout_ms=1000",
                                 "node.connect_timeout_ms=1000",
                                 NULL};
    sets[0] = node_list;
    return sets;
}

static double env_num(const char *name, double def)
{
    const char *s = getenv(name);
    return s && *s ? atof(s) : def;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A new trainer on host `host` that runs until `end` (h_now() clock). */
static void spawn(int host, double end, const char *prefix)
{
    ck_assert_int_lt(ntr, MAX_TRAIN);
    struct trainer *t = &tr[ntr];
    snprintf(t->name, sizeof(t->name), "%s%d", prefix, ntr);
    t->host = host;
    struct h_trainer_opts o = {.name = t->name,
                               .node = host,
                               .n = 50000,
                               .uniform = 1,
                               .slow_ms = host == SLOW_HOST ? 30 : 10,
                               .run_s = end - h_now(),
                               .timeout_ms = 4000,
                               .tolerate_errors = 1,
                               .retry_ms = 20,
                               .trace = 1,
                               .strict = 1};
    t->pid = h_trainer_spawn(&h.c, &o);
    ck_assert_int_gt(t->pid, 0);
    ntr++;
}

static void kill_trainer(struct trainer *t)
{
    if (t->pid <= 0)
        return;
    kill(t->pid, SIGKILL);
    h_wait(t->pid, 5000);
    t->pid = 0;
    t->killed = 1;
}

/* A live trainer on host (or on any host when host < 0), at random. */
static struct trainer *pick_trainer(int host)
{
    int live[MAX_TRAIN], n = 0;
    for (int i = 0; i < ntr; i++)
        if (tr[i].pid > 0 && (host < 0 || tr[i].host == host))
            live[n++] = i;
    return n ? &tr[live[rand() % n]] : NULL;
}

static void strike(enum kind k, int host, double end)
{
    struct event *e = &ev[nev++];
    e->kind = k;
    e->host = host;
    e->t = h_now();
    switch (k) {
    case K_TRAINER: {
        struct trainer *t = pick_trainer(host);
        if (!t)
            break;
        kill_trainer(t);
        sleep_s(2);
        spawn(t->host, end, "c");
        break;
    }
    case K_NODE: {
        for (int i = 0; i < ntr; i++)
            if (tr[i].host == host)
                kill_trainer(&tr[i]);
        kill(h.c.node_pid[host], SIGKILL);
        h_wait(h.c.node_pid[host], 5000);
        h.c.node_pid[host] = 0;
        sleep_s(2);
        ck_assert_int_eq(h_node_start(&h.c, host, node_sets()), 0);
        for (int i = 0; i < PER; i++)
            spawn(host, end, "c");
        break;
    }
    case K_SCHED:
        kill(h.c.sched_pid, SIGKILL);
        h_wait(h.c.sched_pid, 5000);
        h.c.sched_pid = 0;
        sleep_s(2);
        ck_assert_int_eq(h_sched_start(&h.c, sched_sets), 0);
        break;
    case K_CUT:
        ck_assert_int_eq(hh_net(&h, "link %d down", host), 0);
        sleep_s(5);
        ck_assert_int_eq(hh_net(&h, "link %d up", host), 0);
        break;
    case K_KINDS:
        break;
    }
}

/*
 * Waits for every trainer still running, which should end by `end`: how
 * many failed their checks (exit non-zero) or hung (60 s past it).
 */
static int reap_all(double end)
{
    int bad = 0;
    for (int i = 0; i < ntr; i++) {
        if (tr[i].pid <= 0)
            continue;
        double left = end + 60 - h_now();
        int rc = h_wait(tr[i].pid, left > 1 ? (int)(left * 1000) : 1000);
        if (rc != 0) {
            fprintf(stderr, "chaos: trainer %s (host %d): %s %d\n", tr[i].name,
                    tr[i].host, rc == -ETIMEDOUT ? "hung, killed:" : "exit",
                    rc);
            bad++;
        }
        tr[i].pid = 0;
    }
    return bad;
}

/* Results (rc 0) whose end falls in [from, to), over trainers [a, b). */
static long results(int a, int b, double from, double to)
{
    long n = 0;
    for (int i = a; i < b; i++) {
        struct h_trace *t;
        int k = h_trace_read(&h.c, tr[i].name, &t);
        for (int j = 0; j < k; j++)
            n += t[j].rc == 0 && t[j].t1 >= from && t[j].t1 < to;
        if (k > 0)
            free(t);
    }
    return n;
}

/*
 * After event e: the longest a trainer that lived through it, off the
 * victim's host, went without a result between e->t and `span` s later;
 * -1 when no trainer lived through all of it.
 */
static double stall_after(const struct event *e, int a, int b, double span)
{
    double worst = -1;
    for (int i = a; i < b; i++) {
        if (tr[i].killed || tr[i].host == e->host)
            continue;
        struct h_trace *t;
        int k = h_trace_read(&h.c, tr[i].name, &t);
        if (k <= 0)
            continue;
        if (t[0].t0 > e->t || t[k - 1].t1 < e->t + span) {
            free(t);
            continue; /* not there all along */
        }
        if (worst < 0)
            worst = 0;
        double prev = e->t;
        for (int j = 0; j < k && prev < e->t + span; j++) {
            if (t[j].rc != 0 || t[j].t1 <= e->t)
                continue;
            if (t[j].t1 - prev > worst)
                worst = t[j].t1 - prev;
            prev = t[j].t1;
        }
        free(t);
    }
    return worst;
}

/* Failed reduces by code over trainers [a, b), printed. */
static void print_codes(int a, int b)
{
    int codes[32];
    long counts[32], total[32] = {0};
    int all[32], nall = 0;
    for (int i = a; i < b; i++) {
        int k = h_trainer_codes(&h.c, tr[i].name, codes, counts, 32);
        for (int j = 0; j < k; j++) {
            int m = 0;
            while (m < nall && all[m] != codes[j])
                m++;
            if (m == nall && nall < 32)
                all[nall++] = codes[j];
            if (m < 32)
                total[m] += counts[j];
        }
    }
    printf("chaos: failed reduces by code:");
    for (int m = 0; m < nall; m++)
        printf(" %s %ld;", strerror(-all[m]), total[m]);
    printf("%s\n", nall ? "" : " none");
}

/* A process's resident memory, kB (0 when it is gone). */
static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void print_memory(const char *when)
{
    printf("chaos: memory %s: scheduler %ld kB, standby %ld kB, nodes", when,
           rss_kb(h.c.sched_pid), rss_kb(standby.sched_pid));
    for (int i = 0; i < NHOSTS; i++)
        printf(" %ld", rss_kb(h.c.node_pid[i]));
    printf(" kB\n");
}

static void start_job(void)
{
    ck_assert_int_eq(hh_up(&h, NHOSTS), 0);
    for (int i = 0; i < NHOSTS; i++)
        ck_assert_int_eq(hh_net(&h, "cap %d 200mbit", i), 0);
    /* The standby first, on host 1: its port goes into every node's list. */
    struct h_place at = {0};
    snprintf(at.netns, sizeof(at.netns), "%s-h1", h.prefix);
    hh_addr(1, at.addr, sizeof(at.addr));
    ck_assert_int_eq(
        h_cluster_start_at(&standby, 0, &at, NULL, sched_sets + 1, NULL), 0);
    /* The first one's port goes into every node's list before it starts. */
    char a0[48];
    hh_addr(0, a0, sizeof(a0));
    uint16_t port = h_free_port();
    snprintf(first_listen, sizeof(first_listen), "scheduler.listen=%s:%u", a0,
             port);
    snprintf(node_list, sizeof(node_list), "node.scheduler=%s:%u,%s:%u", a0,
             port, at.addr, standby.sched_port);
    ck_assert_int_eq(hh_start(&h, sched_sets, node_sets()), 0);
}

START_TEST(test_chaos)
{
    double run_s = env_num("CHAOS_S", 60);
    double every_s = env_num("CHAOS_EVERY_S", 10);
    unsigned seed = (unsigned)env_num("CHAOS_SEED", (double)time(NULL));
    srand(seed);
    printf("chaos: 4 hosts, 2 strict trainers each (host %d's 3x slower), "
           "policy dynamic, a standby scheduler; %.0f s without failures, "
           "then %.0f s with one every %.0f s (seed %u)\n",
           SLOW_HOST, run_s, run_s, every_s, seed);
    start_job();

    /* The failure-free run. */
    double t0 = h_now() + 2, end = t0 + run_s;
    for (int host = 0; host < NHOSTS; host++)
        for (int i = 0; i < PER; i++)
            spawn(host, end + 1, "q");
    ck_assert_int_eq(reap_all(end + 1), 0);
    int quiet_end = ntr;
    long quiet = results(0, quiet_end, t0, end);
    print_memory("after the failure-free run");

    /* The same length with failures. */
    double c0 = h_now() + 2, cend = c0 + run_s;
    for (int host = 0; host < NHOSTS; host++)
        for (int i = 0; i < PER; i++)
            spawn(host, cend + 1, "c");
    sleep_s(2 + every_s / 2);
    for (int i = 0; h_now() < cend - every_s && nev < MAX_EVENTS; i++) {
        double next = h_now() + every_s;
        strike((enum kind)(i % K_KINDS), rand() % NHOSTS, cend + 1);
        if (next > h_now())
            sleep_s(next - h_now());
    }
    int wrong = reap_all(cend + 1);
    long chaos = results(quiet_end, ntr, c0, cend);
    print_memory("after the chaos run");

    printf("chaos: %d failures struck; results: %ld without failures, %ld "
           "with: goodput %.3f\n",
           nev, quiet, chaos, quiet > 0 ? (double)chaos / (double)quiet : 0);
    for (int k = 0; k < K_KINDS; k++) {
        double worst = 0, sum = 0;
        int n = 0;
        for (int i = 0; i < nev; i++) {
            if (ev[i].kind != (enum kind)k)
                continue;
            /* 10 s after it, or what the run had left. */
            double span = cend - ev[i].t - 1;
            double s =
                stall_after(&ev[i], quiet_end, ntr, span < 10 ? span : 10);
            if (s < 0)
                continue;
            sum += s;
            worst = s > worst ? s : worst;
            n++;
        }
        if (n)
            printf("chaos: %-11s x%d: the others' longest stall after it "
                   "mean %.2f s, max %.2f s\n",
                   kind_names[k], n, sum / n, worst);
    }
    print_codes(quiet_end, ntr);
    ck_assert_msg(wrong == 0, "%d trainers found a wrong result or hung",
                  wrong);
    ck_assert_int_gt(chaos, 0);
    ck_assert_int_eq(h_cluster_stop(&standby), 0);
    ck_assert_int_eq(hh_down(&h), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chaos");
    TCase *tc = tcase_create("chaos");
    /* Both runs, the set-up and the trainers' ends; the caller bounds it. */
    tcase_set_timeout(tc, 2 * env_num("CHAOS_S", 60) + 240);
    tcase_add_test(tc, test_chaos);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* One process: the failures' pids and the traces stay in reach. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
