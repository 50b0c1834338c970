/* SPDX-License-Identifier: MIT */
/*
 * Between log.c, which writes lines, and log_limit.c, which decides
 * which lines of a flood are written (log.h says the rule).
 */
#ifndef PR_LOG_INT_H
#define PR_LOG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/log.h"

/* Lines of one kind that an ended interval did not write. */
struct pr_log_summary {
    const char *fmt; /* the kind */
    enum pr_log_level level;
    uint64_t dropped; /* 0: nothing to say */
    uint64_t ms;      /* the interval's length */
};

/*
 * Whether a line of this kind is written now (1) or counted (0). When the
 * line ends the kind's interval and lines were dropped in it, *s holds
 * their summary (s->dropped > 0), to be written before the line.
 */
int pr_log_limit_admit(enum pr_log_level level, const char *fmt,
                       struct pr_log_summary *s);
/*
 * The summaries of kinds whose interval has ended with lines dropped, at
 * most max into out, each kind's interval restarted: their count.
 */
size_t pr_log_limit_due(struct pr_log_summary *out, size_t max);
/* Tests: the clock in ms (NULL: CLOCK_MONOTONIC); forgets every kind. */
void pr_log_limit_set_clock(uint64_t (*clock_ms)(void));

#endif
