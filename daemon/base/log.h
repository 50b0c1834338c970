/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr in a form journald keeps: each line starts with a
 * syslog priority prefix ("<3>") when stderr is the journal, and with a
 * timestamp otherwise. One global level; loop thread and workers alike may
 * log (each line is one write(2)).
 *
 * Rate-limited per kind (a format string, so one call site): past
 * log.burst lines of a kind in log.burst_ms, its lines are counted, not
 * written, and one line says how many ("N similar messages suppressed in
 * T s: FORMAT") when the interval ends. A flood from one bad peer thus
 * costs a few lines per interval, and other messages still get through.
 */
#ifndef PR_LOG_H
#define PR_LOG_H

#include <stdint.h>

#include "daemon/base/names.h"

/* The limit's defaults (log.burst, log.burst_ms). */
#define PR_LOG_BURST    20
#define PR_LOG_BURST_MS 5000

enum pr_log_level {
    PR_LOG_ERROR = 3,
    PR_LOG_WARN = 4,
    PR_LOG_INFO = 6,
    PR_LOG_DEBUG = 7,
};

void pr_log_set_level(enum pr_log_level level);
/* "error", "warn", "info", "debug" (log.level). */
extern const struct pr_name pr_log_level_names[];
void pr_log_set_ident(const char *ident);
/*
 * Written whatever the limit: for lines an operator's own action causes,
 * bounded by that action (a reload's line per changed key).
 */
void pr_log_all(enum pr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* At most lines of a kind per ms (lines 0: no limit). */
void pr_log_set_limit(uint32_t lines, uint32_t ms);
/*
 * Writes the summaries of kinds whose interval ended with lines dropped
 * and no line since: the daemon runs it once a second from its loop.
 */
void pr_log_limit_flush(void);
void pr_log(enum pr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define pr_err(...)  pr_log(PR_LOG_ERROR, __VA_ARGS__)
#define pr_warn(...) pr_log(PR_LOG_WARN, __VA_ARGS__)
#define pr_info(...) pr_log(PR_LOG_INFO, __VA_ARGS__)
#define pr_dbg(...)  pr_log(PR_LOG_DEBUG, __VA_ARGS__)

#endif
