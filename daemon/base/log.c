/* SPDX-License-Identifier: MIT */
#include "daemon/base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum pr_log_level cur_level = PR_LOG_INFO;
static char ident[32] = "preduced";

void pr_log_set_level(enum pr_log_level level)
{
    cur_level = level;
}

const struct pr_name pr_log_level_names[] = {{"error", PR_LOG_ERROR},
                                             {"warn", PR_LOG_WARN},
                                             {"info", PR_LOG_INFO},
                                             {"debug", PR_LOG_DEBUG},
                                             {NULL, 0}};

void pr_log_set_ident(const char *s)
{
    snprintf(ident, sizeof(ident), "%s", s);
}

void pr_log(enum pr_log_level level, const char *fmt, ...)
{
    if (level > cur_level)
        return;
    int saved = errno;
    char line[1024];
    size_t n;
    /* Under systemd, JOURNAL_STREAM is set and the journal adds the time. */
    if (getenv("JOURNAL_STREAM")) {
        n = (size_t)snprintf(line, sizeof(line), "<%d>", (int)level);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof(line), "%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ld %s[%d] ",
                              ts.tv_nsec / 1000000, ident, (int)getpid());
    }
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m;
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
    errno = saved;
}
