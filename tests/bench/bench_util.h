/* SPDX-License-Identifier: MIT */
/*
 * What the benchmarks each measured with: a monotonic clock in seconds,
 * and the median of a run's figures.
 */
#ifndef PR_TESTS_BENCH_UTIL_H
#define PR_TESTS_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort's order of doubles. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorted in place). */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
