/* SPDX-License-Identifier: MIT */
/*
 * bench_jobs: the two parts in turn (bench_jobs.h says what each
 * measures), and what they share.
 *
 *   bench_jobs OUT_FILE [sched] [isolation]     (default: both)
 *
 * Each part starts its own scheduler and node daemons on 127.0.0.1 through
 * the integration tests' harness and stops them before it returns, also
 * after Ctrl-C; every wait has a deadline, and every process it starts
 * dies with it (PR_SET_PDEATHSIG). `make bench-jobs` bounds the whole with
 * timeout(1).
 */
#include "tests/bench/jobs/bench_jobs.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

volatile sig_atomic_t bj_stop;

static FILE *report;

void bj_out(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (report) {
        va_start(ap, fmt);
        vfprintf(report, fmt, ap);
        va_end(ap);
        fflush(report);
    }
}

int bj_report_open(const char *path)
{
    report = fopen(path, "w");
    return report ? 0 : -errno;
}

void bj_report_close(void)
{
    if (report)
        fclose(report);
    report = NULL;
}

double bj_env(const char *name, double dflt, double lo, double hi)
{
    const char *s = getenv(name);
    char *end;

    if (!s || !*s)
        return dflt;
    double v = strtod(s, &end);
    if (*end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr,
                "bench_jobs: %s=%s: not a number in [%g, %g], %g "
                "taken\n",
                name, s, lo, hi, dflt);
        return dflt;
    }
    return v;
}

/*
 * Slices of at most 20 ms up to a deadline: on a loaded machine each
 * nanosleep overshoots, and a window must still last what it says.
 */
int bj_sleep_ms(int ms)
{
    double end = h_now() + ms / 1000.0, left;

    while (!bj_stop && (left = end - h_now()) > 0) {
        double step = left < 0.02 ? left : 0.02;
        struct timespec ts = {0, (long)(step * 1e9)};

        nanosleep(&ts, NULL);
    }
    return bj_stop ? -EINTR : 0;
}

static void on_signal(int sig)
{
    (void)sig;
    bj_stop = 1;
}

void bj_signals(int on)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on ? on_signal : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

pid_t bj_fork(void)
{
    pid_t parent = getpid();

    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    bj_signals(0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* the parent died before the line above */
    return 0;
}

double bj_cpu_s(pid_t pid)
{
    char path[64], buf[1024];

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /*
     * utime and stime are the 12th and 13th fields after the command
     * name's closing parenthesis (the name may hold spaces).
     */
    const char *p = strrchr(buf, ')');
    unsigned long ut, st;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double bj_busy_s(void)
{
    unsigned long long v[8];

    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n != 8)
        return -1;
    /* user, nice, system, irq, softirq and steal: all but idle and iowait. */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) /
           (double)sysconf(_SC_CLK_TCK);
}

double bj_hwm_mib(pid_t pid)
{
    char path[64], line[256];
    double kib = -1;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1)
            break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

/* Bucket i holds [LAT_MIN_S * LAT_GROWTH^i, LAT_MIN_S * LAT_GROWTH^(i+1)). */
#define LAT_MIN_S  100e-9
#define LAT_GROWTH 1.02

void bj_lat_add(struct bj_lat *h, double secs)
{
    long i = 0;

    if (secs > LAT_MIN_S)
        i = (long)(log(secs / LAT_MIN_S) / log(LAT_GROWTH));
    if (i >= BJ_LAT_BUCKETS)
        i = BJ_LAT_BUCKETS - 1;
    h->b[i]++;
    h->n++;
}

void bj_lat_merge(struct bj_lat *dst, const struct bj_lat *src)
{
    for (int i = 0; i < BJ_LAT_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->n += src->n;
}

double bj_lat_quantile(const struct bj_lat *h, double q)
{
    if (h->n == 0)
        return NAN;
    /* The nearest rank: the smallest sample with at least q n at or below. */
    uint64_t rank = (uint64_t)ceil(q * (double)h->n);
    uint64_t seen = 0;

    if (rank < 1)
        rank = 1;
    for (int i = 0; i < BJ_LAT_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank)
            return LAT_MIN_S * pow(LAT_GROWTH, i + 0.5);
    }
    return LAT_MIN_S * pow(LAT_GROWTH, BJ_LAT_BUCKETS);
}

int bj_wait_metric(uint16_t port, const char *metric, double want,
                   int timeout_ms)
{
    double v = NAN;

    for (int waited = 0; waited < timeout_ms; waited += 50) {
        v = h_metric_at(port, metric);
        if (v == want)
            return 0;
        if (bj_sleep_ms(50) < 0)
            return -1;
    }
    fprintf(stderr, "bench_jobs: metric %s is %g, not %g\n", metric, v, want);
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

void bj_median_range(const double *v, int n, double *med, double *lo,
                     double *hi)
{
    double t[BJ_MAX_ROUNDS];
    int m = 0;

    for (int i = 0; i < n && m < BJ_MAX_ROUNDS; i++)
        if (!isnan(v[i]))
            t[m++] = v[i];
    if (m == 0) {
        *med = *lo = *hi = NAN;
        return;
    }
    qsort(t, (size_t)m, sizeof(*t), cmp_double);
    *med = m % 2 ? t[m / 2] : (t[m / 2 - 1] + t[m / 2]) / 2;
    *lo = t[0];
    *hi = t[m - 1];
}

int main(int argc, char **argv)
{
    int sched = argc < 3, isolation = argc < 3, rc = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: bench_jobs OUT_FILE [sched] [isolation]\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "sched")) {
            sched = 1;
        } else if (!strcmp(argv[i], "isolation")) {
            isolation = 1;
        } else {
            fprintf(stderr, "bench_jobs: no part '%s' (sched, isolation)\n",
                    argv[i]);
            return 2;
        }
    }
    int err = bj_report_open(argv[1]);
    if (err < 0) {
        fprintf(stderr, "bench_jobs: %s: %s\n", argv[1], strerror(-err));
        return 2;
    }
    bj_signals(1);
    bj_out("== bench-jobs: %ld CPUs online\n", sysconf(_SC_NPROCESSORS_ONLN));
    if (sched && !bj_stop)
        rc |= bj_sched_run();
    if (isolation && !bj_stop)
        rc |= bj_isolation_run();
    if (bj_stop)
        bj_out("== bench-jobs: interrupted, every process stopped\n");
    else
        bj_out("figures written to %s\n", argv[1]);
    bj_report_close();
    return bj_stop ? 130 : rc ? 1 : 0;
}
