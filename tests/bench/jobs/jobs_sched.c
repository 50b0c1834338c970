/* SPDX-License-Identifier: MIT */
/*
 * Part "sched" of bench_jobs: how many READYs the scheduler handles per
 * second of its own CPU time when it serves many jobs at once.
 *
 * One scheduler, BENCH_JOBS_NODES node daemons (4) and BENCH_JOBS_JOBS
 * jobs (64) of BENCH_JOBS_WORKERS workers (16) each, every worker a
 * connection of libpreduce with a tensor of BENCH_JOBS_FLOATS floats (4),
 * its job named through preduce_options_set(o, "job", ...). A job's
 * workers are spread over BENCH_JOBS_SPAN nodes (2), so its groups cross
 * a peer link as a real job's do, and the jobs over all nodes. The
 * connections are held by driver processes, one per node as its machine's
 * trainers would be (BENCH_JOBS_DRIVERS, default the nodes), each one
 * thread over epoll: a worker starts its next reduce as soon as the last
 * one returned, so each job reduces as fast as its slowest member.
 *
 * After BENCH_JOBS_WARMUP_S (3), BENCH_JOBS_ROUNDS (3) windows of
 * BENCH_JOBS_RUN_S (10) seconds each. Per window, from the scheduler's
 * metrics endpoint and /proc/PID/stat read at both ends:
 *   - READYs: the sum over workers of preduce_worker_steps_total, every
 *     READY the scheduler took (one it refused would fail its reduce,
 *     counted below);
 *   - their number over the scheduler's CPU seconds (utime + stime, all
 *     its threads): READYs per scheduler core-second;
 *   - groups/s and the mean group size, from preduce_sched_groups_total
 *     and preduce_sched_member_updates_total;
 *   - the CPU the scheduler, the nodes and the drivers took, in cores:
 *     on a small machine the scheduler shares the CPUs with everyone, and
 *     these say who had them;
 *   - the p50 and p99 of one reduce as a worker sees it, from its start to
 *     its answer, over the reduces that began and ended in the window (a
 *     driver's poll loop is part of it).
 * The CPU is read inside the two metrics fetches, so rendering the 1024
 * workers' series costs the window nothing.
 *
 * BENCH_JOBS_POLICY sets every job's policy (a job setting, as
 * PREDUCE_POLICY would); unset, the scheduler's default (allreduce): a
 * job's group is all its workers.
 */
#include "tests/bench/jobs/bench_jobs.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preduce.h"
#include "tests/integration/harness.h"

#define MAX_DRIVERS 16
#define REDUCE_MS   30000
/* The first failed reduces a driver reports on stderr. */
#define SAY_ERRORS 5

struct cfg {
    int jobs, per_job, nodes, span, drivers, rounds;
    size_t floats;
    double warmup_s, run_s;
    const char *policy; /* NULL: the scheduler's */
};

enum { PH_CONNECT, PH_RUN, PH_STOP };

/* What one driver process fills; the bench reads it once it has exited. */
struct driver_share {
    atomic_int connected; /* 1: all its workers connected; -1: failed */
    uint64_t done[BJ_MAX_ROUNDS];
    uint64_t errors; /* failed reduces after the warm-up began */
    uint64_t broken; /* connections lost (not retryable) */
    struct bj_lat lat[BJ_MAX_ROUNDS];
};

/* Shared (MAP_SHARED) between the bench and its drivers. */
struct share {
    atomic_int phase;
    atomic_int round; /* the window being measured, -1 between them */
    struct driver_share d[MAX_DRIVERS];
};

static int node_of(const struct cfg *k, int job, int w)
{
    return (job * k->span + w % k->span) % k->nodes;
}

/* A worker connection of a driver and the reduce it has in flight. */
struct conn {
    preduce_client_t *cl;
    preduce_tensor_t *t;
    double t0;
    int round; /* the window its reduce began in */
    char name[32];
};

struct driver {
    const struct cfg *k;
    struct share *sh;
    struct driver_share *me;
    int ep;
    struct conn *cs;
    int n;
};

/* Connects worker w of job j: 0, or -1 after saying why. */
static int open_worker(struct driver *dr, const struct h_cluster *c, int j,
                       int w)
{
    struct conn *x = &dr->cs[dr->n];
    char job[16], setting[64];
    preduce_options_t *o = NULL;

    snprintf(job, sizeof(job), "j%02d", j);
    snprintf(x->name, sizeof(x->name), "j%02d-w%02d", j, w);
    int rc = preduce_options_create(&o);
    if (rc == 0)
        rc = preduce_options_set(o, "job", job);
    if (rc == 0 && dr->k->policy) {
        snprintf(setting, sizeof(setting), "policy=%s", dr->k->policy);
        rc = preduce_options_set(o, "setting", setting);
    }
    if (rc == 0)
        rc = preduce_connect_with(c->sock[node_of(dr->k, j, w)], x->name, o,
                                  10000, &x->cl);
    preduce_options_destroy(o);
    if (rc < 0) {
        fprintf(stderr, "%s: connect: %s (%s)\n", x->name, preduce_strerror(rc),
                preduce_last_error(NULL));
        return -1;
    }
    rc = preduce_tensor_create(x->cl, dr->k->floats, 10000, &x->t);
    if (rc < 0) {
        fprintf(stderr, "%s: tensor_create: %s\n", x->name,
                preduce_strerror(rc));
        return -1;
    }
    float *v = preduce_tensor_data(x->t);
    for (size_t i = 0; i < dr->k->floats; i++)
        v[i] = 1.0f + (float)i;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)dr->n};
    if (epoll_ctl(dr->ep, EPOLL_CTL_ADD, preduce_fd(x->cl), &ev) < 0) {
        perror("epoll_ctl");
        return -1;
    }
    dr->n++;
    return 0;
}

/* Counts a failed reduce; the first SAY_ERRORS say why on stderr. */
static void failed(struct driver *dr, struct conn *x, int rc)
{
    if (dr->me->errors++ < SAY_ERRORS)
        fprintf(stderr, "%s: reduce: %s (%s)\n", x->name, preduce_strerror(rc),
                preduce_last_error(x->cl));
}

/*
 * Starts x's next reduce, again after a retryable failure (a few times: a
 * start that keeps failing must not spin). A worker that cannot start one
 * is no longer polled and counts as a lost connection.
 */
static void start(struct driver *dr, struct conn *x)
{
    for (int tries = 0; tries < 3; tries++) {
        x->t0 = h_now();
        x->round = atomic_load(&dr->sh->round);
        int rc = preduce_reduce_start(x->cl, &x->t, 1, REDUCE_MS);
        if (rc == 0)
            return;
        failed(dr, x, rc);
        if (!preduce_error_retryable(rc))
            break;
    }
    epoll_ctl(dr->ep, EPOLL_CTL_DEL, preduce_fd(x->cl), NULL);
    dr->me->broken++;
}

/* x's fd was readable: its answer, counted, and the next reduce. */
static void answer(struct driver *dr, struct conn *x)
{
    int rc = preduce_reduce_wait(x->cl, 0);

    if (rc == -EAGAIN)
        return;
    int r = atomic_load(&dr->sh->round);
    if (rc == 0 && r >= 0 && r == x->round) {
        bj_lat_add(&dr->me->lat[r], h_now() - x->t0);
        dr->me->done[r]++;
    } else if (rc < 0) {
        failed(dr, x, rc);
        if (!preduce_error_retryable(rc)) {
            epoll_ctl(dr->ep, EPOLL_CTL_DEL, preduce_fd(x->cl), NULL);
            dr->me->broken++;
            return;
        }
    }
    start(dr, x);
}

/* A driver process: the workers of the nodes n with n % drivers == d. */
static int driver_main(const struct cfg *k, const struct h_cluster *c,
                       struct share *sh, int d)
{
    struct driver dr = {.k = k, .sh = sh, .me = &sh->d[d]};
    int status = 0;

    dr.cs = calloc((size_t)(k->jobs * k->per_job), sizeof(*dr.cs));
    dr.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!dr.cs || dr.ep < 0)
        return 3;
    for (int j = 0; j < k->jobs && status == 0; j++)
        for (int w = 0; w < k->per_job && status == 0; w++)
            if (node_of(k, j, w) % k->drivers == d &&
                open_worker(&dr, c, j, w) < 0)
                status = 2;
    atomic_store(&dr.me->connected, status == 0 ? 1 : -1);
    /* The bench ends the wait (and PR_SET_PDEATHSIG a dead bench). */
    while (status == 0 && atomic_load(&sh->phase) == PH_CONNECT)
        bj_sleep_ms(5);
    for (int i = 0;
         status == 0 && atomic_load(&sh->phase) == PH_RUN && i < dr.n; i++)
        start(&dr, &dr.cs[i]);
    while (status == 0 && atomic_load(&sh->phase) == PH_RUN) {
        struct epoll_event ev[64];
        int m = epoll_wait(dr.ep, ev, 64, 50);
        for (int i = 0; i < m; i++)
            answer(&dr, &dr.cs[ev[i].data.u32]);
    }
    /* Reduces still in flight end with their connections. */
    for (int i = 0; i < dr.n; i++)
        preduce_close(dr.cs[i].cl);
    free(dr.cs);
    return status;
}

/* The sum of the values of text's lines that start with prefix, and n. */
static double metric_sum(const char *text, const char *prefix, long *n)
{
    size_t len = strlen(prefix);
    double sum = 0;

    *n = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        if (!strncmp(p, prefix, len)) {
            const char *v = eol;
            while (v > p && v[-1] != ' ')
                v--;
            sum += strtod(v, NULL);
            (*n)++;
        }
        p = *eol ? eol + 1 : eol;
    }
    return sum;
}

/* The scheduler's counters at one end of a window. */
struct sample {
    double readies, groups, members;
    double t, sched_cpu, nodes_cpu, drivers_cpu, busy;
};

static double cpu_sum(const pid_t *pids, int n)
{
    double s = 0;

    for (int i = 0; i < n; i++) {
        double x = bj_cpu_s(pids[i]);
        s += x > 0 ? x : 0;
    }
    return s;
}

/* The metrics part of a sample: 0, or -1 (no answer, or workers missing). */
static int sample_metrics(uint16_t port, int workers, struct sample *s)
{
    char *m = h_metrics_fetch(port);
    long n;

    if (!m)
        return -1;
    s->readies = metric_sum(m, "preduce_worker_steps_total{", &n);
    s->groups = h_metric(m, "preduce_sched_groups_total ");
    s->members = h_metric(m, "preduce_sched_member_updates_total ");
    free(m);
    if (n != workers) {
        fprintf(stderr,
                "bench_jobs: %ld workers' steps in the metrics, not "
                "%d\n",
                n, workers);
        return -1;
    }
    return 0;
}

static void sample_cpu(const struct h_cluster *c, const pid_t *drivers,
                       int ndrivers, struct sample *s)
{
    s->t = h_now();
    s->sched_cpu = bj_cpu_s(c->sched_pid);
    s->nodes_cpu = cpu_sum(c->node_pid, c->nnodes);
    s->drivers_cpu = cpu_sum(drivers, ndrivers);
    s->busy = bj_busy_s();
}

/* Per window: what the summary takes the median of. */
struct figures {
    double per_core_s[BJ_MAX_ROUNDS], ready_s[BJ_MAX_ROUNDS],
        groups_s[BJ_MAX_ROUNDS], size[BJ_MAX_ROUNDS], sched[BJ_MAX_ROUNDS],
        nodes[BJ_MAX_ROUNDS], drivers[BJ_MAX_ROUNDS], others[BJ_MAX_ROUNDS],
        p50[BJ_MAX_ROUNDS], p99[BJ_MAX_ROUNDS];
    int n;
};

static void window(const struct sample *a, const struct sample *b,
                   struct figures *f, int r)
{
    double wall = b->t - a->t, cpu = b->sched_cpu - a->sched_cpu;
    double readies = b->readies - a->readies;
    double groups = b->groups - a->groups;

    f->per_core_s[r] = cpu > 0 ? readies / cpu : NAN;
    f->ready_s[r] = readies / wall;
    f->groups_s[r] = groups / wall;
    f->size[r] = groups > 0 ? (b->members - a->members) / groups : NAN;
    f->sched[r] = cpu / wall;
    f->nodes[r] = (b->nodes_cpu - a->nodes_cpu) / wall;
    f->drivers[r] = (b->drivers_cpu - a->drivers_cpu) / wall;
    f->others[r] =
        (b->busy - a->busy) / wall - f->sched[r] - f->nodes[r] - f->drivers[r];
    bj_out("round %d: %.0f READYs in %.2f s on %.2f s of scheduler CPU: "
           "%.0f READY per core-second; %.0f groups/s of %.1f; cores: "
           "scheduler %.2f, nodes %.2f, drivers %.2f, others %.2f\n",
           r + 1, readies, wall, cpu, f->per_core_s[r], f->groups_s[r],
           f->size[r], f->sched[r], f->nodes[r], f->drivers[r], f->others[r]);
}

static void summary(const struct cfg *k, struct figures *f,
                    const struct share *sh, uint64_t errors, uint64_t broken)
{
    double m, lo, hi;

    for (int r = 0; r < f->n; r++) {
        struct bj_lat all;
        uint64_t done = 0;

        memset(&all, 0, sizeof(all));
        for (int d = 0; d < k->drivers; d++) {
            bj_lat_merge(&all, &sh->d[d].lat[r]);
            done += sh->d[d].done[r];
        }
        f->p50[r] = bj_lat_quantile(&all, 0.5) * 1e3;
        f->p99[r] = bj_lat_quantile(&all, 0.99) * 1e3;
        bj_out("round %d: %llu reduces timed: p50 %.2f ms, p99 %.2f ms\n",
               r + 1, (unsigned long long)done, f->p50[r], f->p99[r]);
    }
    bj_out("== sched summary: %d jobs x %d workers, %zu floats, %d nodes, "
           "%d drivers: median of %d rounds [range]\n",
           k->jobs, k->per_job, k->floats, k->nodes, k->drivers, f->n);
    bj_median_range(f->per_core_s, f->n, &m, &lo, &hi);
    bj_out("READY per scheduler core-second: %.0f [%.0f-%.0f] (the goal, "
           ">= 500000: %s)\n",
           m, lo, hi, m >= 500000 ? "met" : "missed");
    double s, slo, shi;
    bj_median_range(f->ready_s, f->n, &m, &lo, &hi);
    bj_median_range(f->sched, f->n, &s, &slo, &shi);
    bj_out("READYs/s: %.0f [%.0f-%.0f]; scheduler CPU: %.2f cores "
           "[%.2f-%.2f]\n",
           m, lo, hi, s, slo, shi);
    bj_median_range(f->groups_s, f->n, &m, &lo, &hi);
    bj_median_range(f->size, f->n, &s, &slo, &shi);
    bj_out("groups/s: %.0f [%.0f-%.0f] of %.1f members [%.1f-%.1f]\n", m, lo,
           hi, s, slo, shi);
    bj_median_range(f->nodes, f->n, &m, &lo, &hi);
    bj_median_range(f->drivers, f->n, &s, &slo, &shi);
    bj_out("nodes' CPU: %.2f cores [%.2f-%.2f]; drivers' CPU: %.2f cores "
           "[%.2f-%.2f]\n",
           m, lo, hi, s, slo, shi);
    bj_median_range(f->others, f->n, &m, &lo, &hi);
    bj_out("other processes on this machine: %.2f cores [%.2f-%.2f]\n", m, lo,
           hi);
    double per[3][BJ_MAX_ROUNDS], us[3];
    for (int r = 0; r < f->n; r++) {
        per[0][r] = 1e6 * f->sched[r] / f->ready_s[r];
        per[1][r] = 1e6 * f->nodes[r] / f->ready_s[r];
        per[2][r] = 1e6 * f->drivers[r] / f->ready_s[r];
    }
    for (int i = 0; i < 3; i++)
        bj_median_range(per[i], f->n, &us[i], &lo, &hi);
    bj_out("CPU per READY: scheduler %.1f us, nodes %.1f us, drivers %.1f "
           "us (medians)\n",
           us[0], us[1], us[2]);
    bj_median_range(f->p50, f->n, &m, &lo, &hi);
    bj_median_range(f->p99, f->n, &s, &slo, &shi);
    bj_out("reduce latency: p50 %.2f ms [%.2f-%.2f], p99 %.2f ms "
           "[%.2f-%.2f]\n",
           m, lo, hi, s, slo, shi);
    bj_out("failed reduces: %llu; connections lost: %llu\n",
           (unsigned long long)errors, (unsigned long long)broken);
}

static int read_cfg(struct cfg *k)
{
    k->jobs = (int)bj_env("BENCH_JOBS_JOBS", 64, 1, 1000);
    k->per_job = (int)bj_env("BENCH_JOBS_WORKERS", 16, 1, 100);
    k->nodes = (int)bj_env("BENCH_JOBS_NODES", 4, 1, H_MAX_NODES);
    k->span = (int)bj_env("BENCH_JOBS_SPAN", 2, 1, k->nodes);
    k->drivers = (int)bj_env("BENCH_JOBS_DRIVERS", k->nodes, 1, MAX_DRIVERS);
    k->rounds = (int)bj_env("BENCH_JOBS_ROUNDS", 3, 1, BJ_MAX_ROUNDS);
    k->floats = (size_t)bj_env("BENCH_JOBS_FLOATS", 4, 1, 1 << 20);
    k->warmup_s = bj_env("BENCH_JOBS_WARMUP_S", 3, 0, 600);
    k->run_s = bj_env("BENCH_JOBS_RUN_S", 10, 0.1, 600);
    k->policy = getenv("BENCH_JOBS_POLICY");
    if (k->policy && !*k->policy)
        k->policy = NULL;
    if (k->span > k->per_job)
        k->span = k->per_job;
    return 0;
}

/* The most workers any node gets: its node.max_clients. */
static int busiest_node(const struct cfg *k)
{
    int count[H_MAX_NODES] = {0}, most = 0;

    for (int j = 0; j < k->jobs; j++)
        for (int w = 0; w < k->per_job; w++)
            count[node_of(k, j, w)]++;
    for (int i = 0; i < k->nodes; i++)
        most = count[i] > most ? count[i] : most;
    return most;
}

/* Waits up to timeout_ms for every driver to say whether it connected. */
static int wait_connected(const struct share *sh, int drivers, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        int ok = 0;
        for (int d = 0; d < drivers; d++) {
            int v = atomic_load(&sh->d[d].connected);
            if (v < 0)
                return -1;
            ok += v;
        }
        if (ok == drivers)
            return 0;
        if (bj_sleep_ms(20) < 0)
            return -1;
    }
    fprintf(stderr, "bench_jobs: workers not connected in %d s\n",
            timeout_ms / 1000);
    return -1;
}

/* The windows, once every worker reduces: 0, or -1. */
static int measure(const struct cfg *k, const struct h_cluster *c,
                   uint16_t port, struct share *sh, const pid_t *drivers,
                   struct figures *f)
{
    int workers = k->jobs * k->per_job;

    atomic_store(&sh->round, -1);
    atomic_store(&sh->phase, PH_RUN);
    if (bj_sleep_ms((int)(k->warmup_s * 1000)) < 0)
        return -1;
    for (int r = 0; r < k->rounds; r++) {
        struct sample a, b;

        if (sample_metrics(port, workers, &a) < 0)
            return -1;
        sample_cpu(c, drivers, k->drivers, &a);
        atomic_store(&sh->round, r);
        if (bj_sleep_ms((int)(k->run_s * 1000)) < 0)
            return -1;
        atomic_store(&sh->round, -1);
        sample_cpu(c, drivers, k->drivers, &b);
        if (sample_metrics(port, workers, &b) < 0)
            return -1;
        window(&a, &b, f, r);
        f->n = r + 1;
    }
    return 0;
}

int bj_sched_run(void)
{
    struct cfg k;
    struct h_cluster c;
    char listen[64], clients[64];
    pid_t drivers[MAX_DRIVERS];
    struct figures f;
    int rc = -1, nd = 0;

    read_cfg(&k);
    memset(&f, 0, sizeof(f));
    /* Three descriptors per connection (libpreduce: socket, epoll, event). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct share *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("bench_jobs: mmap");
        return -1;
    }
    memset(sh, 0, sizeof(*sh));
    uint16_t port = h_free_port();
    snprintf(listen, sizeof(listen), "metrics.listen=127.0.0.1:%u", port);
    snprintf(clients, sizeof(clients), "node.max_clients=%d",
             busiest_node(&k) + 16);
    /* The harness logs at debug level: a line per group costs a write. */
    const char *const sched_sets[] = {"log.level=info", listen, NULL};
    const char *const node_sets[] = {"log.level=info", clients, NULL};
    bj_out("== sched: %d jobs x %d workers (%s), %zu floats, on %d nodes "
           "(a job on %d), %d drivers; %.0f s warm-up, %d rounds of "
           "%.0f s\n",
           k.jobs, k.per_job, k.policy ? k.policy : "scheduler's policy",
           k.floats, k.nodes, k.span, k.drivers, k.warmup_s, k.rounds, k.run_s);
    if (h_cluster_start(&c, k.nodes, sched_sets, node_sets) < 0) {
        fprintf(stderr, "bench_jobs: cluster did not start\n");
        h_cluster_stop(&c);
        munmap(sh, sizeof(*sh));
        return -1;
    }
    if (bj_wait_metric(port, "preduce_sched_nodes ", k.nodes, 10000) < 0)
        goto stop;
    double t0 = h_now();
    for (; nd < k.drivers; nd++) {
        drivers[nd] = bj_fork();
        if (drivers[nd] == 0)
            _exit(driver_main(&k, &c, sh, nd));
        if (drivers[nd] < 0)
            goto stop;
    }
    if (wait_connected(sh, k.drivers, 300000) < 0 ||
        bj_wait_metric(port, "preduce_sched_workers_live ", k.jobs * k.per_job,
                       10000) < 0 ||
        bj_wait_metric(port, "preduce_sched_jobs ", k.jobs, 10000) < 0)
        goto stop;
    bj_out("%d workers in %d jobs connected in %.1f s\n", k.jobs * k.per_job,
           k.jobs, h_now() - t0);
    rc = measure(&k, &c, port, sh, drivers, &f);
stop:
    atomic_store(&sh->phase, PH_STOP);
    for (int d = 0; d < nd; d++) {
        int st = h_wait(drivers[d], 30000);
        if (st != 0 && !bj_stop) {
            fprintf(stderr, "bench_jobs: driver %d: status %d\n", d, st);
            rc = -1;
        }
    }
    if (h_cluster_stop(&c) != 0)
        rc = -1;
    if (f.n > 0) {
        uint64_t errors = 0, broken = 0;
        for (int d = 0; d < k.drivers; d++) {
            errors += sh->d[d].errors;
            broken += sh->d[d].broken;
        }
        summary(&k, &f, sh, errors, broken);
    }
    munmap(sh, sizeof(*sh));
    if (rc < 0 && !bj_stop)
        bj_out("== sched: failed\n");
    return rc;
}
