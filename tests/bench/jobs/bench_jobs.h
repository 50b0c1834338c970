/* SPDX-License-Identifier: MIT */
/*
 * bench_jobs (`make bench-jobs`): many jobs on one scheduler and on shared
 * node daemons (docs/operations.md, "Jobs"). Two parts, each a file:
 *   - jobs_sched.c: the scheduler's throughput, READYs per core-second of
 *     the scheduler process, with 64 jobs of 16 workers reducing tiny
 *     tensors as fast as they can;
 *   - jobs_isolation.c: a job's small reduces while another job's large
 *     ones share the same peer link, against the same reduces alone.
 * This header has what both use: the printed and written report, a
 * latency histogram that driver processes fill in shared memory, a
 * process's CPU time from /proc, and the flag Ctrl-C sets. Figures, never
 * a test: the program exits 0 unless something fails outright.
 */
#ifndef PR_BENCH_JOBS_H
#define PR_BENCH_JOBS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BJ_MAX_ROUNDS 16

/* Set by SIGINT and SIGTERM: every wait of the benchmark ends early. */
extern volatile sig_atomic_t bj_stop;

/* Prints to stdout and appends to the report file (bj_report_open). */
void bj_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int bj_report_open(const char *path);
void bj_report_close(void);

/*
 * An environment variable as a number, or dflt when unset or outside
 * [lo, hi] (then saying so on stderr).
 */
double bj_env(const char *name, double dflt, double lo, double hi);

/* Sleeps ms milliseconds, in slices; -EINTR as soon as bj_stop is set. */
int bj_sleep_ms(int ms);

/*
 * Forks a child that dies with this process (PR_SET_PDEATHSIG) and takes
 * SIGINT and SIGTERM's default action (the parent's handler only sets
 * bj_stop, which the child would never look at). Returns as fork().
 */
pid_t bj_fork(void);
/*
 * The benchmark's own handler for SIGINT and SIGTERM (on = 1), or the
 * default action (on = 0, around a fork the harness makes: its trainers
 * must die of them).
 */
void bj_signals(int on);

/* A process's user + system CPU seconds (/proc/PID/stat), or -1. */
double bj_cpu_s(pid_t pid);
/*
 * The CPU seconds the whole machine has been busy since it started
 * (/proc/stat), or -1: what is not this benchmark's is someone else's.
 */
double bj_busy_s(void);
/* A process's peak resident memory, MiB (VmHWM in /proc/PID/status), or -1. */
double bj_hwm_mib(pid_t pid);

/*
 * Latencies in buckets 2% wide (from 100 ns to beyond an hour), so that
 * many processes can fill one in shared memory without keeping every
 * sample: a quantile comes back within 1% of the sample's value.
 */
#define BJ_LAT_BUCKETS 1200
struct bj_lat {
    uint64_t n;
    uint64_t b[BJ_LAT_BUCKETS];
};
void bj_lat_add(struct bj_lat *h, double secs);
void bj_lat_merge(struct bj_lat *dst, const struct bj_lat *src);
/* The q-quantile (0..1), seconds: the middle of its bucket; NAN if empty. */
double bj_lat_quantile(const struct bj_lat *h, double q);

/*
 * Waits up to timeout_ms until the metric (a line's prefix) that the
 * endpoint on 127.0.0.1:port serves is `want`: 0, or -1 after saying what
 * it was.
 */
int bj_wait_metric(uint16_t port, const char *metric, double want,
                   int timeout_ms);

/* The median of v[0, n) and its lowest and highest (NAN when n is 0). */
void bj_median_range(const double *v, int n, double *med, double *lo,
                     double *hi);

/* The parts; each returns 0, or -1 after saying what failed. */
int bj_sched_run(void);
int bj_isolation_run(void);

#endif
