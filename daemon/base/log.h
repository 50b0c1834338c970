/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr in a form journald keeps: each line starts with a
 * syslog priority prefix ("<3>") when stderr is the journal, and with a
 * timestamp otherwise. One global level; loop thread and workers alike may
 * log (each line is one write(2)).
 */
#ifndef PR_LOG_H
#define PR_LOG_H

#include "daemon/base/names.h"

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
void pr_log(enum pr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define pr_err(...)  pr_log(PR_LOG_ERROR, __VA_ARGS__)
#define pr_warn(...) pr_log(PR_LOG_WARN, __VA_ARGS__)
#define pr_info(...) pr_log(PR_LOG_INFO, __VA_ARGS__)
#define pr_dbg(...)  pr_log(PR_LOG_DEBUG, __VA_ARGS__)

#endif
