/* SPDX-License-Identifier: MIT */
/*
 * What several fuzz targets share, kept in one place so that they read
 * their inputs and set up their scheduler alike. Header-only: each target
 * links alone (the Makefile's fuzz and replay rules take one object).
 */
#ifndef PREDUCE_TESTS_FUZZ_INPUT_H
#define PREDUCE_TESTS_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"

/* The input read front to back; past its end it reads as zeros. */
struct fuzz_cursor {
    const uint8_t *p;
    size_t n;
};

/* The next BYTES bytes (at most 4) as a big-endian number. */
static inline uint32_t fuzz_take(struct fuzz_cursor *c, int bytes)
{
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = v << 8 | (c->n ? *c->p : 0);
        if (c->n) {
            c->p++;
            c->n--;
        }
    }
    return v;
}

/*
 * A scheduler's config that lets a job set every key a job may set, so
 * that each value parser runs; quiet logs. Aborts when the table refuses
 * it (then the target would test nothing).
 */
static inline void fuzz_sched_conf(struct pr_conf *conf)
{
    pr_log_set_level(PR_LOG_ERROR);
    if (pr_conf_init(conf) < 0 ||
        pr_conf_set(conf,
                    "scheduler.job_settings=policy,group_size,"
                    "group_min,group_max,min_workers,weighting,"
                    "staleness_alpha,isolation_bound,window_ms,"
                    "window_min_ms,window_max_ms,window_wait",
                    NULL) < 0)
        abort();
}

#endif
