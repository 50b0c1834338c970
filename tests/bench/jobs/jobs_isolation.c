/* SPDX-License-Identifier: MIT */
/*
 * Part "isolation" of bench_jobs: what one job's large reduces do to
 * another job's small ones when both cross the same peer link.
 *
 * Two node daemons, 0 and 1. Job "b": a trainer on each, reducing
 * BENCH_JOBS_SMALL_KIB (1) KiB in a loop, every result checked. Job "a":
 * a trainer on each, reducing BENCH_JOBS_BIG_MIB (256) MiB back to back.
 * Both jobs' chunks go over the one link between the two daemons, in
 * the same daemons' loops. b's
 * reduce latency is measured in phases of BENCH_JOBS_PHASE_S (10) seconds
 * under each condition, BENCH_JOBS_ROUNDS (3) rounds, the order of the
 * conditions turning each round so that none always comes first:
 *   - alone: a idle (its trainers paused with SIGSTOP, connections and
 *     tensors kept, and its last reduce finished: node 0 receives less
 *     than IDLE_BPS);
 *   - with a: a reducing;
 *   - a apart (BENCH_JOBS_APART=1, the default): the same large reduces
 *     by job "a-apart" on daemons 2 and 3 and the link between them. On
 *     a machine of few cores a's reduces also take CPU from b's daemons;
 *     this condition has that load without sharing b's daemons and link,
 *     so the two ratios together say how much of b's slowdown the sharing
 *     adds beyond the CPU.
 * The trainers are the integration tests' (h_trainer_spawn), each job
 * named by PREDUCE_JOB; b's trace gives the start and end of every reduce
 * (CLOCK_MONOTONIC), and a reduce counts in a phase when it began and
 * ended within it. Printed per round and condition: b's p50 and p99 and
 * the rate node 0 (and 2) received data at; then the medians over rounds
 * and the ratio p99(with a) / p99(alone) of each round, median [range].
 */
#include "tests/bench/jobs/bench_jobs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/*
 * A big job counts as idle below this receive rate on its first node (b
 * alone moves a few MB/s; a, hundreds).
 */
#define IDLE_BPS 50e6
/* Its last group's write-back, after its data stopped. */
#define SETTLE_MS 300
/* What a node received from its peers, bytes. */
static const char rx_metric[] = "preduce_node_bytes_total{transport=\"tcp\","
                                "direction=\"received\"} ";

enum { C_ALONE, C_WITH, C_APART, NCOND };
static const char *const cond_name[NCOND] = {"alone", "with a", "a apart"};

enum { T_B0, T_B1, T_A0, T_A1, T_C0, T_C1, NTRAINERS };

struct cfg {
    size_t small, big; /* floats */
    double phase_s;
    int rounds, apart;
};

/* A phase as measured: which, when, and what node 0 and 2 received. */
struct phase {
    int round, cond;
    double t0, t1;
    double rx0[2], rx1[2];
    double busy0, busy1; /* the machine's busy CPU seconds */
};

struct run {
    struct cfg k;
    struct h_cluster c;
    uint16_t sched_port, port[4];
    pid_t pid[NTRAINERS];
    char name[NTRAINERS][16];
    int running[2]; /* a, a-apart: not paused */
    struct phase ph[BJ_MAX_ROUNDS * NCOND];
    int nph;
};

/* Starts the trainer t of job `job` on node `node`: 0, or -1. */
static int spawn(struct run *u, int t, const char *job, int node, size_t n)
{
    static const char *const names[NTRAINERS] = {"b0", "b1", "a0",
                                                 "a1", "c0", "c1"};
    int big = t >= T_A0;
    struct h_trainer_opts o = {.name = names[t],
                               .node = node,
                               .n = n,
                               .run_s = 3600, /* ended by the bench */
                               .warmup = big ? 1 : 2,
                               .no_check = big,
                               /* A paused peer must not time it out. */
                               .timeout_ms = big ? 600000 : 60000,
                               .trace = 1};

    snprintf(u->name[t], sizeof(u->name[t]), "%s", names[t]);
    setenv("PREDUCE_JOB", job, 1);
    bj_signals(0);
    u->pid[t] = h_trainer_spawn(&u->c, &o);
    bj_signals(1);
    unsetenv("PREDUCE_JOB");
    return u->pid[t] > 0 ? 0 : -1;
}

static double rx(const struct run *u, int node)
{
    return node < u->c.nnodes ? h_metric_at(u->port[node], rx_metric) : 0;
}

/*
 * Waits until node `node` receives below (busy 0) or above (busy 1)
 * IDLE_BPS, sampled every 100 ms; two samples in a row for idle. 0, or
 * -1 after timeout_ms (said) or an interrupt.
 */
static int wait_rate(const struct run *u, int node, int busy, int timeout_ms)
{
    double last = rx(u, node);
    int quiet = 0;

    for (int waited = 0; waited < timeout_ms; waited += 100) {
        if (bj_sleep_ms(100) < 0)
            return -1;
        double now = rx(u, node);
        double bps = (now - last) * 10;
        last = now;
        if (busy && bps > IDLE_BPS)
            return 0;
        quiet = !busy && bps < IDLE_BPS ? quiet + 1 : 0;
        if (quiet >= 2)
            return bj_sleep_ms(SETTLE_MS);
    }
    fprintf(stderr, "bench_jobs: node %d still %s after %d s\n", node,
            busy ? "idle" : "busy", timeout_ms / 1000);
    return -1;
}

/* Pauses (run 0) or resumes (run 1) big job j (0: a, 1: a-apart). */
static int set_big(struct run *u, int j, int run)
{
    int t = j == 0 ? T_A0 : T_C0, node = j == 0 ? 0 : 2;

    if (u->running[j] == run || (j == 1 && !u->k.apart))
        return 0;
    for (int i = t; i < t + 2; i++)
        kill(u->pid[i], run ? SIGCONT : SIGSTOP);
    u->running[j] = run;
    /* Resumed: its next reduce's data flows within a second or two. */
    return wait_rate(u, node, run, run ? 20000 : 60000);
}

static int one_phase(struct run *u, int r, int cond)
{
    struct phase *p = &u->ph[u->nph];

    if (set_big(u, 0, cond == C_WITH) < 0 || set_big(u, 1, cond == C_APART) < 0)
        return -1;
    p->round = r;
    p->cond = cond;
    p->rx0[0] = rx(u, 0);
    p->rx0[1] = rx(u, 2);
    p->busy0 = bj_busy_s();
    p->t0 = h_now();
    if (bj_sleep_ms((int)(u->k.phase_s * 1000)) < 0)
        return -1;
    p->t1 = h_now();
    p->busy1 = bj_busy_s();
    p->rx1[0] = rx(u, 0);
    p->rx1[1] = rx(u, 2);
    u->nph++;
    return 0;
}

/* 0 when every trainer still runs (none failed); else says which. */
static int all_running(struct run *u)
{
    int bad = 0;

    for (int t = 0; t < NTRAINERS; t++) {
        int st;
        if (u->pid[t] > 0 && waitpid(u->pid[t], &st, WNOHANG) == u->pid[t]) {
            fprintf(stderr, "bench_jobs: trainer %s ended early: status %d\n",
                    u->name[t],
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            h_log_dump(&u->c, "node0");
            u->pid[t] = 0;
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

/* Ends the trainers (they run until stopped) and waits for them. */
static void end_trainers(struct run *u)
{
    for (int t = 0; t < NTRAINERS; t++) {
        if (u->pid[t] <= 0)
            continue;
        kill(u->pid[t], SIGCONT);
        kill(u->pid[t], SIGTERM);
        h_wait(u->pid[t], 10000);
        u->pid[t] = 0;
    }
}

/* b's reduces per round and condition, from both b trainers' traces. */
struct tally {
    struct bj_lat lat[BJ_MAX_ROUNDS][NCOND];
    long failed[BJ_MAX_ROUNDS][NCOND];
    long big_n[BJ_MAX_ROUNDS][NCOND];
    double big_s[BJ_MAX_ROUNDS][NCOND];
};

/* Adds trainer t's reduces that lie within a phase to the tally. */
static int tally_trace(const struct run *u, int t, struct tally *y)
{
    struct h_trace *tr;
    int n = h_trace_read(&u->c, u->name[t], &tr);

    if (n < 0) {
        fprintf(stderr, "bench_jobs: %s's trace: %s\n", u->name[t],
                strerror(-n));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < u->nph; k++) {
            const struct phase *p = &u->ph[k];
            if (tr[i].t0 < p->t0 || tr[i].t1 > p->t1)
                continue;
            if (t >= T_A0) {
                y->big_n[p->round][p->cond]++;
                y->big_s[p->round][p->cond] += tr[i].t1 - tr[i].t0;
            } else if (tr[i].rc != 0) {
                y->failed[p->round][p->cond]++;
            } else {
                bj_lat_add(&y->lat[p->round][p->cond], tr[i].t1 - tr[i].t0);
            }
            break;
        }
    }
    free(tr);
    return 0;
}

static void print_phases(const struct run *u, const struct tally *y,
                         double p50[][NCOND], double p99[][NCOND])
{
    double mib = (double)u->k.big * sizeof(float) / 1048576;

    for (int k = 0; k < u->nph; k++) {
        const struct phase *p = &u->ph[k];
        const struct bj_lat *h = &y->lat[p->round][p->cond];
        double dt = p->t1 - p->t0;
        long bn = y->big_n[p->round][p->cond];

        p50[p->round][p->cond] = bj_lat_quantile(h, 0.5) * 1e3;
        p99[p->round][p->cond] = bj_lat_quantile(h, 0.99) * 1e3;
        bj_out("round %d, b %-7s: p50 %8.3f ms, p99 %8.3f ms (%6llu reduces, "
               "%ld failed); machine busy %.2f cores; node 0 received "
               "%6.1f MB/s, node 2 %6.1f",
               p->round + 1, cond_name[p->cond], p50[p->round][p->cond],
               p99[p->round][p->cond], (unsigned long long)h->n,
               y->failed[p->round][p->cond], (p->busy1 - p->busy0) / dt,
               (p->rx1[0] - p->rx0[0]) / dt / 1e6,
               (p->rx1[1] - p->rx0[1]) / dt / 1e6);
        if (bn > 0)
            bj_out("; %ld reduces of %.0f MiB, %.0f ms each", bn / 2, mib,
                   1e3 * y->big_s[p->round][p->cond] / (double)bn);
        bj_out("\n");
    }
}

static void summary(const struct run *u, const struct tally *y)
{
    static double p50[BJ_MAX_ROUNDS][NCOND], p99[BJ_MAX_ROUNDS][NCOND];
    int ncond = u->k.apart ? NCOND : C_APART, rounds = u->nph / ncond;
    double v[BJ_MAX_ROUNDS], m, lo, hi, m2, lo2, hi2;

    print_phases(u, y, p50, p99);
    bj_out("== isolation summary: b's %zu-float reduces, median of %d rounds "
           "[range]\n",
           u->k.small, rounds);
    for (int cnd = 0; cnd < ncond; cnd++) {
        for (int r = 0; r < rounds; r++)
            v[r] = p50[r][cnd];
        bj_median_range(v, rounds, &m, &lo, &hi);
        for (int r = 0; r < rounds; r++)
            v[r] = p99[r][cnd];
        bj_median_range(v, rounds, &m2, &lo2, &hi2);
        bj_out("b %-7s: p50 %8.3f ms [%.3f-%.3f], p99 %8.3f ms [%.3f-%.3f]\n",
               cond_name[cnd], m, lo, hi, m2, lo2, hi2);
    }
    for (int cnd = C_WITH; cnd < ncond; cnd++) {
        for (int q = 0; q < 2; q++) {
            for (int r = 0; r < rounds; r++)
                v[r] = q ? p99[r][cnd] / p99[r][C_ALONE]
                         : p50[r][cnd] / p50[r][C_ALONE];
            bj_median_range(v, rounds, &m, &lo, &hi);
            bj_out("%s(%s) / %s(alone): %.1fx [%.1f-%.1f]", q ? "p99" : "p50",
                   cond_name[cnd], q ? "p99" : "p50", m, lo, hi);
            if (cnd == C_WITH && q)
                bj_out(" (the goal, <= 5x: %s)", m <= 5 ? "met" : "missed");
            bj_out("\n");
        }
    }
}

static int start_cluster(struct run *u)
{
    char listen[64];
    int nodes = u->k.apart ? 4 : 2;

    u->sched_port = h_free_port();
    snprintf(listen, sizeof(listen), "metrics.listen=127.0.0.1:%u",
             u->sched_port);
    const char *const sched_sets[] = {"log.level=info", listen, NULL};
    if (h_cluster_start(&u->c, 0, sched_sets, NULL) < 0)
        return -1;
    for (int i = 0; i < nodes; i++) {
        char m[64];
        u->port[i] = h_free_port();
        snprintf(m, sizeof(m), "metrics.listen=127.0.0.1:%u", u->port[i]);
        /* A paused trainer's peer waits with its READY queued. */
        const char *const sets[] = {"log.level=info",
                                    "node.reduce_timeout_ms=600000", m, NULL};
        u->c.nnodes = i + 1;
        if (h_node_start(&u->c, i, sets) < 0)
            return -1;
    }
    return bj_wait_metric(u->sched_port, "preduce_sched_nodes ", nodes, 10000);
}

static int start_trainers(struct run *u)
{
    if (spawn(u, T_B0, "b", 0, u->k.small) < 0 ||
        spawn(u, T_B1, "b", 1, u->k.small) < 0 ||
        spawn(u, T_A0, "a", 0, u->k.big) < 0 ||
        spawn(u, T_A1, "a", 1, u->k.big) < 0)
        return -1;
    if (u->k.apart && (spawn(u, T_C0, "a-apart", 2, u->k.big) < 0 ||
                       spawn(u, T_C1, "a-apart", 3, u->k.big) < 0))
        return -1;
    u->running[0] = u->running[1] = 1;
    for (int t = 0; t < NTRAINERS; t++) {
        if (u->pid[t] > 0 && h_trainer_warm(&u->c, u->name[t], 120000) < 0) {
            fprintf(stderr, "bench_jobs: %s not warm in 120 s\n", u->name[t]);
            return -1;
        }
    }
    return 0;
}

static void print_memory(const struct run *u)
{
    bj_out("peak resident memory, MiB: nodes");
    for (int i = 0; i < u->c.nnodes; i++)
        bj_out(" %.0f", bj_hwm_mib(u->c.node_pid[i]));
    bj_out("; trainers");
    for (int t = 0; t < NTRAINERS; t++)
        if (u->pid[t] > 0)
            bj_out(" %s %.0f", u->name[t], bj_hwm_mib(u->pid[t]));
    bj_out("\n");
}

int bj_isolation_run(void)
{
    static struct run u;
    static struct tally y;
    int rc = 0;

    memset(&u, 0, sizeof(u));
    memset(&y, 0, sizeof(y));
    u.k.small = (size_t)(bj_env("BENCH_JOBS_SMALL_KIB", 1, 0.004, 1024) * 1024 /
                         sizeof(float));
    u.k.big = (size_t)(bj_env("BENCH_JOBS_BIG_MIB", 256, 1, 1024) * 1048576 /
                       sizeof(float));
    u.k.phase_s = bj_env("BENCH_JOBS_PHASE_S", 10, 0.5, 600);
    u.k.rounds = (int)bj_env("BENCH_JOBS_ROUNDS", 3, 1, BJ_MAX_ROUNDS);
    u.k.apart = (int)bj_env("BENCH_JOBS_APART", 1, 0, 1);
    int ncond = u.k.apart ? NCOND : C_APART;
    bj_out("== isolation: job b %zu floats, job a %.0f MiB, %s; %d rounds "
           "of %.0f s phases\n",
           u.k.small, (double)u.k.big * sizeof(float) / 1048576,
           u.k.apart ? "job a-apart the same on 2 other daemons" : "no a-apart",
           u.k.rounds, u.k.phase_s);
    if (start_cluster(&u) < 0 || start_trainers(&u) < 0) {
        rc = -1;
        goto stop;
    }
    print_memory(&u);
    for (int r = 0; r < u.k.rounds && rc == 0; r++)
        for (int i = 0; i < ncond && rc == 0; i++)
            if (one_phase(&u, r, (i + r) % ncond) < 0 || all_running(&u) < 0)
                rc = -1;
    if (rc == 0)
        print_memory(&u);
    end_trainers(&u);
    if (rc == 0)
        for (int t = 0; t < NTRAINERS && rc == 0; t++)
            if (t < T_C0 || u.k.apart)
                rc = tally_trace(&u, t, &y);
stop:
    end_trainers(&u);
    if (h_cluster_stop(&u.c) != 0)
        rc = -1;
    if (rc == 0)
        summary(&u, &y);
    else if (!bj_stop)
        bj_out("== isolation: failed\n");
    return rc;
}
