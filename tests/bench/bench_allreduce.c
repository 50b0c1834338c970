/* SPDX-License-Identifier: MIT */
/*
 * All-reduce bandwidth of 2 node daemons, 1 trainer each, policy
 * allreduce, for a few tensor sizes. Prints per-node bus bandwidth (for 2
 * nodes, the tensor bytes each node sends per all-reduce, divided by the
 * time of one all-reduce). The transport is whatever the daemons pick
 * (PREDUCE_TEST_NODE_SETS="transport.type=rdma" in the RDMA guest, where
 * tests/rdma/check.sh prints it next to ib_write_bw on the same device).
 *
 * Each size runs twice: trainers with the default contract (tensors
 * unchanged when a reduce fails: results are assembled aside and written
 * back at the end) and with preduce_set_in_place() (results written as
 * they arrive). BENCH_MODES=default or in-place runs one of them.
 *
 *   bench_allreduce [MiB ...]      (default: 1 16)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/*
 * Where the CPU time goes, read from /proc: the daemons' and the
 * scheduler's user and system time, and the machine's totals (in the RDMA
 * guest, Soft-RoCE's own work shows as system and softirq time). Wall-clock
 * figures in an emulated guest swing by +-20% from run to run; CPU time per
 * operation is steadier and tells which side a change helped.
 */
struct cpu {
    double proc[H_MAX_NODES + 1][2]; /* nodes, then the scheduler */
    double user, sys, softirq, idle, total;
    double kids;    /* reaped children: the trainers, at the end */
    double running; /* the trainers while they run */
};

static void proc_times(pid_t pid, double t[2])
{
    char path[64], buf[1024];
    t[0] = t[1] = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Fields after the command name, which may hold spaces: utime and
     * stime are the 12th and 13th after the closing parenthesis. */
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) == 2) {
        double hz = (double)sysconf(_SC_CLK_TCK);
        t[0] = (double)ut / hz;
        t[1] = (double)st / hz;
    }
}

static void cpu_read(const struct h_cluster *c, const pid_t *trainers, int nt,
                     struct cpu *u)
{
    memset(u, 0, sizeof(*u));
    for (int i = 0; i < nt; i++) {
        double t[2];
        proc_times(trainers[i], t);
        u->running += t[0] + t[1];
    }
    for (int i = 0; i < c->nnodes; i++)
        proc_times(c->node_pid[i], u->proc[i]);
    proc_times(c->sched_pid, u->proc[H_MAX_NODES]);
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
            memset(v, 0, sizeof(v));
        fclose(f);
    }
    double hz = (double)sysconf(_SC_CLK_TCK);
    u->user = (double)(v[0] + v[1]) / hz;
    u->sys = (double)(v[2] + v[5]) / hz; /* system + irq */
    u->softirq = (double)v[6] / hz;
    u->idle = (double)(v[3] + v[4]) / hz;
    u->total = u->user + u->sys + u->softirq + u->idle + (double)v[7] / hz;
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    u->kids = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void cpu_print(const struct h_cluster *c, const struct cpu *a,
                      const struct cpu *b, long ops)
{
    double ms = 1000.0 / (double)ops, nu = 0, ns = 0;
    for (int i = 0; i < c->nnodes; i++) {
        nu += b->proc[i][0] - a->proc[i][0];
        ns += b->proc[i][1] - a->proc[i][1];
    }
    double wall = b->total - a->total;
    printf("  cpu ms/op: daemons user %.1f sys %.1f, scheduler %.1f, "
           "trainers %.1f; machine user %.1f sys %.1f softirq %.1f idle "
           "%.1f (of %.1f)\n",
           nu * ms, ns * ms,
           (b->proc[H_MAX_NODES][0] + b->proc[H_MAX_NODES][1] -
            a->proc[H_MAX_NODES][0] - a->proc[H_MAX_NODES][1]) *
               ms,
           (b->kids - a->kids - a->running) * ms, (b->user - a->user) * ms,
           (b->sys - a->sys) * ms, (b->softirq - a->softirq) * ms,
           (b->idle - a->idle) * ms, wall * ms);
}

static int bench(double mib, double run_s, int in_place)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    if (h_cluster_start(&c, 2, sets, NULL) < 0) {
        fprintf(stderr, "bench_allreduce: cluster did not start\n");
        return -1;
    }
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    pid_t pids[2];
    struct cpu before, after;
    const char *names[2] = {"b0", "b1"};
    for (int i = 0; i < 2; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = n,
                                   .run_s = run_s,
                                   .no_check = 1,
                                   .warmup = 2,
                                   .in_place = in_place,
                                   .timeout_ms = 120000};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    /* Timing and CPU accounting start after both trainers' warm-up. */
    int bad = 0;
    for (int i = 0; i < 2; i++)
        bad |= h_trainer_warm(&c, names[i], 180000) < 0;
    cpu_read(&c, pids, 2, &before);
    for (int i = 0; i < 2; i++)
        bad |= h_wait(pids[i], (int)(run_s * 1000) + 180000) != 0;
    cpu_read(&c, NULL, 0, &after);
    long steps = 0, errors = 0;
    double secs = 0, slowest = 0;
    if (!bad)
        bad = h_trainer_figures(&c, "b0", &steps, &secs, &errors) < 0 ||
              h_trainer_slowest(&c, "b0", &slowest) < 0;
    unsigned long long tcp = 0, rdma = 0, verbs[3];
    h_node_stop(&c, 0);
    h_node_data_bytes(&c, 0, &tcp, &rdma);
    int have_verbs = rdma > tcp && h_node_rdma_counts(&c, 0, verbs) == 0;
    h_cluster_stop(&c);
    if (bad || steps == 0) {
        fprintf(stderr, "bench_allreduce: %.0f MiB run failed\n", mib);
        return -1;
    }
    double bytes = (double)n * sizeof(float);
    printf("allreduce 2 daemons: %6.1f MiB tensor%s: %5ld ops in %5.2f s, "
           "%7.2f ms/op (slowest %.2f), bus bandwidth %8.2f MB/s (data "
           "over %s)\n",
           mib, in_place ? " in place" : "", steps, secs,
           1000.0 * secs / (double)steps, 1000.0 * slowest,
           bytes * (double)steps / secs / 1e6, rdma > tcp ? "rdma" : "tcp");
    cpu_print(&c, &before, &after, steps);
    /* Over the whole run, warm-up and start included: a rough per-op mix. */
    if (have_verbs) {
        double ops = (double)steps + 2; /* the warm-up steps */
        printf("  node 0 per op: %.1f RDMA data writes, %.2f credit "
               "messages, %.1f completion events\n",
               (double)verbs[0] / ops, (double)verbs[1] / ops,
               (double)verbs[2] / ops);
    }
    return 0;
}

int main(int argc, char **argv)
{
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 5.0;
    const char *modes = getenv("BENCH_MODES") ? getenv("BENCH_MODES") : "";
    int def = strcmp(modes, "in-place") != 0;
    int inp = strcmp(modes, "default") != 0;
    double dflt[] = {1, 16};
    int rc = 0, n = argc < 2 ? 2 : argc - 1;
    for (int i = 0; i < n; i++) {
        double mib = argc < 2 ? dflt[i] : atof(argv[i + 1]);
        if (def)
            rc |= bench(mib, run_s, 0);
        if (inp)
            rc |= bench(mib, run_s, 1);
    }
    return rc ? 1 : 0;
}
