/* SPDX-License-Identifier: MIT */
/*
 * One node daemon and its trainers on this machine (`make bench-local`):
 * the daemon's all-reduce of k trainers' tensors next to Open MPI's
 * MPI_Allreduce over shared memory (vader) with k ranks, torch.distributed's
 * Gloo all-reduce with k processes on this host, and next to a
 * STREAM-style copy and add over buffers of the same size, all in one run,
 * alternating, for BENCH_LOCAL_REPEATS rounds. Figures, never a test.
 *
 * Per configuration (trainers k, MiB, mode default or in place,
 * node.reduce_threads 1 or N) a round gives the median time of one
 * all-reduce; the summary prints the median over rounds and the range,
 * and for each:
 *   - per-op time, ms;
 *   - bus bandwidth as bench_allreduce defines it: tensor bytes per op over
 *     the time of one op;
 *   - the bytes the daemon must move per op: each of the k tensors read once
 *     and written once, 2 k S (its memory traffic, the least it can be);
 *   - that traffic over the time of one op, as a fraction of the memory
 *     bound: the best of the STREAM copy and add (counted as bytes read and
 *     written) on 1 and N threads, measured in the same round.
 * Then the latency of a 1-float all-reduce, p50 and p99 over all its ops:
 * 2 trainers on one daemon, and 2 daemons with one trainer each.
 *
 *   bench_local OUT_FILE
 * Environment: BENCH_LOCAL_SIZES (MiB, default "1 16 64"),
 * BENCH_LOCAL_TRAINERS (default "2 4", plus 8 when there are 8 CPUs),
 * BENCH_LOCAL_REPEATS (3), BENCH_RUN_S (seconds per run, 1.5),
 * BENCH_LOCAL_THREADS (node.reduce_threads values, default "1 N" with N
 * the CPUs it may use, at most 8; -1 leaves the key unset, for a preduced
 * from before it),
 * BENCH_LOCAL_MPI (the mpi_allreduce binary; none: MPI skipped),
 * BENCH_LOCAL_GLOO (gloo_allreduce.py: torch.distributed's Gloo with k
 * processes on this host; none: skipped),
 * BENCH_LOCAL_HIER_SIZES (MiB, default "16": of BENCH_LOCAL_SIZES, those
 * also run hierarchically, 2 daemons over TCP with 2 trainers each, next to
 * MPI with 4 ranks over TCP; the memory-bound fraction does not apply).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"
#include "daemon/engine/pool.h"
#include "preduce.h"
#include "tests/integration/harness.h"

#define MAXCFG    256
#define MAXROUNDS 16
#define MAXOPS    200000
#define MAXK      8
#define UNSET     ((unsigned)-1) /* node.reduce_threads not given */

/* The q-quantile (0..1) of v[0, n), which it sorts. */
static double quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* ------------------------------------------------------------------ */
/* Trainers                                                             */

struct run_opts {
    int k;     /* trainers */
    int nodes; /* daemons; trainer i on node i % nodes */
    size_t n;  /* floats per tensor */
    int in_place;
    unsigned threads; /* node.reduce_threads */
    double run_s;
};

/*
 * A trainer in a child process: warms up until a group of all k came
 * back (and 2 steps), then times each reduce for run_s seconds and writes
 * the times (seconds, doubles) to dir/tI.times. Exit 0 on success.
 */
static int trainer_main(const struct h_cluster *c, const struct run_opts *o,
                        int idx)
{
    char name[32], path[400];
    snprintf(name, sizeof(name), "t%d", idx);
    preduce_client_t *cl;
    int rc = preduce_connect(c->sock[idx % o->nodes], name, 5000, &cl);
    if (rc < 0) {
        fprintf(stderr, "%s: connect: %s\n", name, preduce_strerror(rc));
        return 2;
    }
    if (o->in_place && preduce_set_in_place(cl, 1) < 0)
        return 2;
    preduce_tensor_t *t;
    rc = preduce_tensor_create(cl, o->n, 5000, &t);
    if (rc < 0) {
        fprintf(stderr, "%s: tensor_create(%zu): %s\n", name, o->n,
                preduce_strerror(rc));
        return 3;
    }
    float *x = preduce_tensor_data(t);
    for (size_t i = 0; i < o->n; i++)
        x[i] = (float)(idx + 1) + (float)(i % 13);
    double *times = malloc(MAXOPS * sizeof(double));
    if (!times)
        return 3;
    size_t nt = 0;
    double t0 = now_s(), start = 0;
    int warm = 0, good = 0;
    for (;;) {
        double a = now_s();
        if (!warm && a - t0 > 60) {
            fprintf(stderr, "%s: no group of %d in 60 s\n", name, o->k);
            return 6;
        }
        if (warm && (a - start >= o->run_s || nt == MAXOPS))
            break;
        rc = preduce_reduce(cl, &t, 1, 60000);
        double b = now_s();
        if (rc < 0) {
            fprintf(stderr, "%s: reduce: %s\n", name, preduce_strerror(rc));
            return 4;
        }
        if (warm) {
            times[nt++] = b - a;
        } else if ((int)preduce_result_size(preduce_last_result(cl)) == o->k &&
                   ++good >= 2) {
            warm = 1;
            start = now_s();
        }
    }
    snprintf(path, sizeof(path), "%s/%s.times", c->dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(times, sizeof(double), nt, f) != nt)
        return 5;
    fclose(f);
    free(times);
    preduce_close(cl);
    return 0;
}

/*
 * One run: a cluster of o->nodes daemons, k trainers. The op times of
 * trainer 0 into *times (malloc'd), their number returned; -1 on failure.
 */
static long run_preduce(const struct run_opts *o, double **times)
{
    struct h_cluster c;
    char thr[64];
    snprintf(thr, sizeof(thr), "node.reduce_threads=%u", o->threads);
    /* The harness logs at debug level: a line per group costs a write. */
    const char *const sched_sets[] = {"scheduler.policy=allreduce",
                                      "log.level=info", NULL};
    const char *const node_sets[] = {"log.level=info",
                                     o->threads == UNSET ? NULL : thr, NULL};
    if (h_cluster_start(&c, o->nodes, sched_sets, node_sets) < 0) {
        fprintf(stderr, "bench_local: cluster did not start\n");
        return -1;
    }
    pid_t pids[MAXK];
    for (int i = 0; i < o->k; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(trainer_main(&c, o, i));
    }
    int bad = 0;
    for (int i = 0; i < o->k; i++)
        bad |= pids[i] < 0 ||
               h_wait(pids[i], (int)(o->run_s * 1000) + 120000) != 0;
    long nt = -1;
    if (!bad) {
        char path[400];
        snprintf(path, sizeof(path), "%s/t0.times", c.dir);
        FILE *f = fopen(path, "r");
        *times = malloc(MAXOPS * sizeof(double));
        if (f && *times)
            nt = (long)fread(*times, sizeof(double), MAXOPS, f);
        if (f)
            fclose(f);
    }
    bad |= h_cluster_stop(&c) != 0;
    if (bad || nt <= 0) {
        fprintf(stderr, "bench_local: run failed (k %d, %zu floats)\n", o->k,
                o->n);
        return -1;
    }
    return nt;
}

/* ------------------------------------------------------------------ */
/* STREAM-style anchor                                                  */

struct stream_arg {
    float *a, *b, *c;
    size_t lo, hi;
    int add;
};

static void *stream_slice(void *arg)
{
    struct stream_arg *s = arg;
    if (s->add)
        for (size_t i = s->lo; i < s->hi; i++)
            s->c[i] = s->a[i] + s->b[i];
    else
        memcpy(s->c + s->lo, s->a + s->lo, (s->hi - s->lo) * sizeof(float));
    return NULL;
}

/*
 * Best bytes per second (read + written) of copy (c = a) or add (c = a +
 * b) over n floats on `threads` threads, over a few passes.
 */
static double stream_bw(float *a, float *b, float *c, size_t n,
                        unsigned threads, int add)
{
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        pthread_t th[PR_POOL_MAX_THREADS];
        struct stream_arg sa[PR_POOL_MAX_THREADS];
        double t0 = now_s();
        for (unsigned i = 0; i < threads; i++) {
            size_t lo, hi;
            pr_pool_slice(n, threads, i, &lo, &hi);
            sa[i] = (struct stream_arg){a, b, c, lo, hi, add};
            if (threads == 1)
                stream_slice(&sa[i]);
            else
                pthread_create(&th[i], NULL, stream_slice, &sa[i]);
        }
        for (unsigned i = 0; threads > 1 && i < threads; i++)
            pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        double bytes = (double)n * sizeof(float) * (add ? 3 : 2);
        if (dt > 0 && bytes / dt > best)
            best = bytes / dt;
    }
    return best;
}

/* ------------------------------------------------------------------ */
/* Open MPI                                                             */

/* ms per MPI_Allreduce of k ranks over vader, or NAN. */
/*
 * ms per all-reduce from an anchor's "... allreduce K ranks: M MiB tensor:
 * N ops in S s" line (mpi_allreduce, gloo_allreduce.py), or NAN.
 */
static double run_anchor(const char *cmd)
{
    char line[512];
    FILE *p = popen(cmd, "r");
    if (!p)
        return NAN;
    double ms = NAN;
    while (fgets(line, sizeof(line), p)) {
        /* "...: N ops in S s, ...": per op from those, not the rounded ms. */
        char *at = strstr(line, " ops in ");
        char *colon = strstr(line, "tensor:");
        if (at && colon && strstr(line, " allreduce ")) {
            long ops = atol(colon + strlen("tensor:"));
            double secs = atof(at + strlen(" ops in "));
            if (ops > 0)
                ms = 1e3 * secs / (double)ops;
        } else {
            fputs(line, stderr);
        }
    }
    if (pclose(p) != 0)
        return NAN;
    return ms;
}

static double run_mpi(const char *bin, int k, double mib, double run_s,
                      const char *btl)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "BENCH_RUN_S=%g OMPI_ALLOW_RUN_AS_ROOT=1 "
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun -n %d "
             "--oversubscribe --bind-to none --mca btl %s %s %.17g 2>&1",
             run_s, k, btl, bin, mib);
    return run_anchor(cmd);
}

/* torch.distributed's Gloo all-reduce, k processes on this host. */
static double run_gloo(const char *script, int k, double mib, double run_s)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "timeout 300 /usr/bin/python3 %s %d %.17g %g 2>&1", script, k, mib,
             run_s);
    return run_anchor(cmd);
}

/* ------------------------------------------------------------------ */
/* The run                                                              */

/* 1 daemon; MPI over vader; 2 daemons over TCP; MPI over TCP. */
enum { K_LOCAL, K_MPI, K_HIER, K_MPI_TCP, K_GLOO };

struct cfg {
    char what[96]; /* its label */
    int kind;      /* K_* */
    int k;
    double mib;
    int in_place;
    unsigned threads;
    double ms[MAXROUNDS]; /* per round: the median op, ms */
    double p99[MAXROUNDS];
    int nr;
};

static struct cfg cfgs[MAXCFG];
static int ncfg;
static double bound[8][MAXROUNDS]; /* per size index: memory bound, B/s */
static double copy1[8][MAXROUNDS], copyn[8][MAXROUNDS], add1[8][MAXROUNDS],
    addn[8][MAXROUNDS];

static void median_range(const double *v, int n, double *med, double *lo,
                         double *hi)
{
    double t[MAXROUNDS];
    memcpy(t, v, (size_t)n * sizeof(double));
    *med = quantile(t, (size_t)n, 0.5);
    *lo = t[0];
    *hi = t[n - 1];
}

static struct cfg *cfg_find(int kind, int k, double mib, int in_place,
                            unsigned threads)
{
    for (int i = 0; i < ncfg; i++) {
        struct cfg *c = &cfgs[i];
        if (c->kind == kind && c->k == k && c->mib == mib &&
            c->in_place == in_place && c->threads == threads)
            return c;
    }
    return NULL;
}

/* The median over rounds of an anchor's op time, ms, or NAN. */
static double anchor_ms(int kind, int k, double mib)
{
    const struct cfg *c = cfg_find(kind, k, mib, 0, 0);
    double med = NAN, lo, hi;
    if (c && c->nr > 0)
        median_range(c->ms, c->nr, &med, &lo, &hi);
    return med;
}

static struct cfg *cfg_get(int kind, int k, double mib, int in_place,
                           unsigned threads)
{
    struct cfg *c = cfg_find(kind, k, mib, in_place, threads);
    if (c)
        return c;
    c = &cfgs[ncfg++];
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    c->k = k;
    c->mib = mib;
    c->in_place = in_place;
    c->threads = threads;
    if (kind == K_LOCAL)
        snprintf(c->what, sizeof(c->what), "preduce %d trainers %s %d thr", k,
                 in_place ? "in-place" : "default", (int)threads);
    else if (kind == K_HIER)
        snprintf(c->what, sizeof(c->what), "preduce 2x%d tcp %s %d thr", k / 2,
                 in_place ? "in-place" : "default", (int)threads);
    else if (kind == K_GLOO)
        snprintf(c->what, sizeof(c->what), "torch gloo %d ranks", k);
    else
        snprintf(c->what, sizeof(c->what), "mpi %s %d ranks",
                 kind == K_MPI ? "vader" : "tcp", k);
    return c;
}

static void out2(FILE *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void out2(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* One preduce run into its configuration's next round. */
static void one_preduce(FILE *out, int kind, int k, double mib, int ip,
                        unsigned threads, double run_s)
{
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    struct run_opts o = {k, kind == K_HIER ? 2 : 1, n, ip, threads, run_s};
    double *times = NULL;
    long nt = run_preduce(&o, &times);
    struct cfg *c = cfg_get(kind, k, mib, ip, threads);
    if (nt > 0) {
        c->ms[c->nr] = 1e3 * quantile(times, (size_t)nt, 0.5);
        c->p99[c->nr] = 1e3 * quantile(times, (size_t)nt, 0.99);
        out2(out, "%-36s %5.0f MiB: %6ld ops, median %8.3f ms/op, p99 %8.3f\n",
             c->what, mib, nt, c->ms[c->nr], c->p99[c->nr]);
        c->nr++;
    }
    free(times);
}

static void one_mpi(FILE *out, const char *mpi, int kind, int k, double mib,
                    double run_s)
{
    double ms =
        kind == K_GLOO
            ? run_gloo(mpi, k, mib, run_s)
            : run_mpi(mpi, k, mib, run_s,
                      kind == K_MPI ? "vader,self"
                                    : "tcp,self --mca btl_tcp_if_include lo");
    struct cfg *c = cfg_get(kind, k, mib, 0, 0);
    if (!isnan(ms)) {
        c->ms[c->nr++] = ms;
        out2(out, "%-36s %5.0f MiB: mean %8.3f ms/op\n", c->what, mib, ms);
    }
}

static int parse_list(const char *env, const char *dflt, double *out, int max)
{
    const char *s = getenv(env) ? getenv(env) : dflt;
    int n = 0;
    char *end;
    while (n < max) {
        double v = strtod(s, &end);
        if (end == s)
            break;
        out[n++] = v;
        s = end;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_local OUT_FILE\n");
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) {
        perror(argv[1]);
        return 2;
    }
    double sizes[8], ks[4];
    int nsizes = parse_list("BENCH_LOCAL_SIZES", "1 16 64", sizes, 8);
    double hsizes[8];
    int nhier = parse_list("BENCH_LOCAL_HIER_SIZES", "16", hsizes, 8);
    unsigned nthr = pr_pool_default_threads(8);
    int nks =
        parse_list("BENCH_LOCAL_TRAINERS", nthr >= 8 ? "2 4 8" : "2 4", ks, 4);
    int rounds = (int)(getenv("BENCH_LOCAL_REPEATS")
                           ? atoi(getenv("BENCH_LOCAL_REPEATS"))
                           : 3);
    if (rounds < 1 || rounds > MAXROUNDS)
        rounds = 3;
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 1.5;
    const char *mpi = getenv("BENCH_LOCAL_MPI");
    if (mpi && (!*mpi || access(mpi, X_OK) != 0))
        mpi = NULL;
    const char *gloo = getenv("BENCH_LOCAL_GLOO");
    if (gloo && (!*gloo || access(gloo, R_OK) != 0))
        gloo = NULL;
    unsigned thr[4] = {1, nthr};
    int nthrs = nthr > 1 ? 2 : 1;
    if (getenv("BENCH_LOCAL_THREADS")) {
        double v[4];
        nthrs = parse_list("BENCH_LOCAL_THREADS", "", v, 4);
        for (int i = 0; i < nthrs; i++)
            thr[i] = v[i] < 0 ? UNSET : (unsigned)v[i];
    }

    out2(out,
         "== bench-local: %ld CPUs online, N = %u threads; %d rounds, %.1f s "
         "per run; MPI %s\n",
         sysconf(_SC_NPROCESSORS_ONLN), nthr, rounds, run_s,
         mpi ? "vader" : "skipped (no mpi_allreduce)");
    for (int r = 0; r < rounds; r++) {
        out2(out, "== round %d of %d\n", r + 1, rounds);
        for (int si = 0; si < nsizes; si++) {
            size_t n = (size_t)(sizes[si] * 1024 * 1024 / sizeof(float));
            /* The memory anchor, over 3 buffers of the tensors' size. */
            float *a = malloc(n * sizeof(float)), *b = malloc(n * 4),
                  *cc = malloc(n * 4);
            if (!a || !b || !cc)
                return 3;
            for (size_t i = 0; i < n; i++)
                a[i] = b[i] = cc[i] = (float)(i % 7);
            copy1[si][r] = stream_bw(a, b, cc, n, 1, 0);
            add1[si][r] = stream_bw(a, b, cc, n, 1, 1);
            copyn[si][r] = stream_bw(a, b, cc, n, nthr, 0);
            addn[si][r] = stream_bw(a, b, cc, n, nthr, 1);
            free(a);
            free(b);
            free(cc);
            double best = copy1[si][r];
            double all[3] = {add1[si][r], copyn[si][r], addn[si][r]};
            for (int i = 0; i < 3; i++)
                if (all[i] > best)
                    best = all[i];
            bound[si][r] = best;
            out2(out,
                 "stream %5.0f MiB: copy %.2f GB/s (1 thr) %.2f (%u thr), "
                 "add %.2f (1) %.2f (%u)\n",
                 sizes[si], copy1[si][r] / 1e9, copyn[si][r] / 1e9, nthr,
                 add1[si][r] / 1e9, addn[si][r] / 1e9, nthr);
            for (int ki = 0; ki < nks; ki++) {
                int k = (int)ks[ki];
                if (k < 2 || k > MAXK)
                    continue;
                for (int ti = 0; ti < nthrs; ti++)
                    for (int ip = 0; ip < 2; ip++)
                        one_preduce(out, K_LOCAL, k, sizes[si], ip, thr[ti],
                                    run_s);
                if (mpi)
                    one_mpi(out, mpi, K_MPI, k, sizes[si], run_s);
                if (gloo)
                    one_mpi(out, gloo, K_GLOO, k, sizes[si], run_s);
            }
            /* Hierarchical: 2 daemons with 2 trainers each, over TCP. */
            int hier = 0;
            for (int hi = 0; hi < nhier; hi++)
                hier |= hsizes[hi] == sizes[si];
            for (int ti = 0; hier && ti < nthrs; ti++)
                for (int ip = 0; ip < 2; ip++)
                    one_preduce(out, K_HIER, 4, sizes[si], ip, thr[ti], run_s);
            if (hier && mpi)
                one_mpi(out, mpi, K_MPI_TCP, 4, sizes[si], run_s);
        }
    }

    out2(out,
         "== summary: median of %d rounds [range]; bus bandwidth = "
         "tensor bytes / op time; moved = 2 k S (each tensor read and "
         "written once); of bound = moved / op time / best STREAM\n",
         rounds);
    for (int si = 0; si < nsizes; si++) {
        double med, lo, hi;
        median_range(bound[si], rounds, &med, &lo, &hi);
        double bnd = med;
        out2(out, "%g MiB: memory bound %.2f GB/s [%.2f-%.2f]\n", sizes[si],
             med / 1e9, lo / 1e9, hi / 1e9);
        for (int i = 0; i < ncfg; i++) {
            struct cfg *c = &cfgs[i];
            if (c->mib != sizes[si] || c->nr == 0)
                continue;
            median_range(c->ms, c->nr, &med, &lo, &hi);
            double s = c->mib * 1024 * 1024;
            double moved = 2.0 * c->k * s;
            double mm = c->kind == K_LOCAL  ? anchor_ms(K_MPI, c->k, c->mib)
                        : c->kind == K_HIER ? anchor_ms(K_MPI_TCP, c->k, c->mib)
                                            : NAN;
            double gm =
                c->kind == K_LOCAL ? anchor_ms(K_GLOO, c->k, c->mib) : NAN;
            out2(out,
                 "  %-36s %8.3f ms/op [%.3f-%.3f]  bus %7.2f GB/s  moved "
                 "%6.1f MiB/op",
                 c->what, med, lo, hi, s / (med / 1e3) / 1e9,
                 moved / 1048576.0);
            /* Over TCP the memory is not what bounds it. */
            if (c->kind == K_LOCAL || c->kind == K_MPI)
                out2(out, "  %.2f of bound", moved / (med / 1e3) / bnd);
            if (!isnan(mm))
                out2(out, "  %.2fx MPI", mm / med);
            if (!isnan(gm))
                out2(out, "  %.2fx gloo", gm / med);
            out2(out, "\n");
        }
    }

    /* 1-float latency: every op of every round. */
    static const struct {
        int k, nodes;
    } lat[] = {{2, 1}, {2, 2}};
    for (size_t li = 0; li < sizeof(lat) / sizeof(lat[0]); li++) {
        for (int ti = 0; ti < nthrs; ti++) {
            double *all = malloc((size_t)rounds * MAXOPS * sizeof(double));
            size_t na = 0;
            for (int r = 0; r < rounds && all; r++) {
                struct run_opts o = {lat[li].k, lat[li].nodes, 1,
                                     0,         thr[ti],       run_s};
                double *times = NULL;
                long nt = run_preduce(&o, &times);
                if (nt > 0) {
                    memcpy(all + na, times, (size_t)nt * sizeof(double));
                    na += (size_t)nt;
                }
                free(times);
            }
            if (na > 0) {
                double p50 = quantile(all, na, 0.5) * 1e6;
                double p99 = quantile(all, na, 0.99) * 1e6;
                out2(out,
                     "1-float latency, %d trainers on %d daemon%s, %d thr: "
                     "p50 %.1f us, p99 %.1f us (%zu ops)\n",
                     lat[li].k, lat[li].nodes, lat[li].nodes > 1 ? "s" : "",
                     (int)thr[ti], p50, p99, na);
            }
            free(all);
        }
    }
    if (mpi) {
        double mib = 4.0 / 1048576.0;
        double v = run_mpi(mpi, 2, mib, run_s, "vader,self");
        double t =
            run_mpi(mpi, 2, mib, run_s, "tcp,self --mca btl_tcp_if_include lo");
        out2(out,
             "1-float MPI_Allreduce, 2 ranks: vader mean %.1f us, tcp "
             "mean %.1f us\n",
             v * 1e3, t * 1e3);
    }
    fclose(out);
    printf("figures written to %s\n", argv[1]);
    return 0;
}
