/* SPDX-License-Identifier: MIT */
/*
 * The log's rate limit: at most `burst` lines of one kind per interval.
 * A kind is a format string (one pr_log call site), so a flood of one
 * message (a fake peer's bad frames, a scheduler's refusals) cannot bury
 * the others, and a message seen once always gets through. Past the
 * burst, lines are counted; the count is written as one summary line when
 * the kind's interval ends, either on its next line or by
 * pr_log_limit_flush(), which the daemon runs from a timer so that the
 * tail of a flood that stopped is reported too.
 *
 * Loop and worker threads log: the table is behind a mutex, held only to
 * count, never while a line is written.
 */
#include "daemon/base/log_int.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/*
 * Kinds tracked at once. Call sites are a few hundred; past this many in
 * one interval, a new kind is written unlimited rather than dropped.
 */
#define KINDS 1024

struct kind {
    const char *fmt; /* NULL: a free slot */
    enum pr_log_level level;
    uint64_t start_ms; /* the interval's start */
    uint32_t lines;    /* lines of the interval, written or not */
    uint64_t dropped;  /* of those, not written */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kind kinds[KINDS];
static uint32_t burst = PR_LOG_BURST;
static uint32_t interval_ms = PR_LOG_BURST_MS;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t (*now_ms)(void) = mono_ms;

void pr_log_set_limit(uint32_t lines, uint32_t ms)
{
    pthread_mutex_lock(&lock);
    burst = lines;
    interval_ms = ms ? ms : 1;
    pthread_mutex_unlock(&lock);
}

void pr_log_limit_set_clock(uint64_t (*clock_ms)(void))
{
    pthread_mutex_lock(&lock);
    now_ms = clock_ms ? clock_ms : mono_ms;
    memset(kinds, 0, sizeof(kinds));
    pthread_mutex_unlock(&lock);
}

static struct kind *find(const char *fmt)
{
    size_t h = ((uintptr_t)fmt >> 3) * 0x9E3779B97F4A7C15ull % KINDS;
    for (size_t i = 0; i < KINDS; i++) {
        struct kind *k = &kinds[(h + i) % KINDS];
        if (k->fmt == fmt || !k->fmt)
            return k;
    }
    return NULL;
}

/* Ends k's interval at now; its summary into *s when lines were dropped. */
static int close_interval(struct kind *k, uint64_t now,
                          struct pr_log_summary *s)
{
    int any = k->dropped > 0;
    if (any) {
        s->fmt = k->fmt;
        s->level = k->level;
        s->dropped = k->dropped;
        s->ms = now - k->start_ms;
    }
    k->start_ms = now;
    k->lines = 0;
    k->dropped = 0;
    return any;
}

int pr_log_limit_admit(enum pr_log_level level, const char *fmt,
                       struct pr_log_summary *s)
{
    int admit = 1;

    s->dropped = 0;
    pthread_mutex_lock(&lock);
    if (burst == 0)
        goto out;
    uint64_t now = now_ms();
    struct kind *k = find(fmt);
    if (!k)
        goto out;
    if (!k->fmt) {
        k->fmt = fmt;
        k->start_ms = now;
    }
    k->level = level;
    if (now - k->start_ms >= interval_ms)
        close_interval(k, now, s);
    if (++k->lines > burst) {
        k->dropped++;
        admit = 0;
    }
out:
    pthread_mutex_unlock(&lock);
    return admit;
}

size_t pr_log_limit_due(struct pr_log_summary *out, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&lock);
    uint64_t now = now_ms();
    for (size_t i = 0; i < KINDS && n < max; i++) {
        struct kind *k = &kinds[i];
        if (k->fmt && k->dropped && now - k->start_ms >= interval_ms)
            n += (size_t)close_interval(k, now, &out[n]);
    }
    pthread_mutex_unlock(&lock);
    return n;
}
