/* SPDX-License-Identifier: MIT */
#include "daemon/base/log.h"

#include "daemon/base/log_int.h"

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

/*
 * Appends msg to line[0..n), at most cap bytes in all, and returns the
 * new length. Names and addresses in messages come from peers and
 * trainers: a control byte (a newline, an escape sequence) among them
 * could forge a line or rewrite the terminal, so it is written as \xNN.
 * The line is cut where the next byte or escape would not fit.
 */
static size_t escape(char *line, size_t n, size_t cap, const char *msg)
{
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p >= 0x20 && *p != 0x7f) {
            if (n + 1 > cap)
                break;
            line[n++] = (char)*p;
            continue;
        }
        if (n + 4 > cap)
            break;
        line[n++] = '\\';
        line[n++] = 'x';
        line[n++] = hex[*p >> 4];
        line[n++] = hex[*p & 15];
    }
    return n;
}

/* One line: the prefix, then fmt over ap, then a newline; one write(2). */
__attribute__((format(printf, 2, 0))) static void
emit(enum pr_log_level level, const char *fmt, va_list ap)
{
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
    char msg[sizeof(line)];
    if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
        msg[0] = '\0';
    n = escape(line, n, sizeof(line) - 1, msg);
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

static void emit_fmt(enum pr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void emit_fmt(enum pr_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(level, fmt, ap);
    va_end(ap);
}

static void summarize(const struct pr_log_summary *s)
{
    emit_fmt(s->level, "%llu similar messages suppressed in %.1f s: %s",
             (unsigned long long)s->dropped, (double)s->ms / 1000.0, s->fmt);
}

void pr_log(enum pr_log_level level, const char *fmt, ...)
{
    if (level > cur_level)
        return;
    int saved = errno;
    struct pr_log_summary s;
    int admit = pr_log_limit_admit(level, fmt, &s);
    if (s.dropped)
        summarize(&s);
    if (admit) {
        va_list ap;
        va_start(ap, fmt);
        emit(level, fmt, ap);
        va_end(ap);
    }
    errno = saved;
}

void pr_log_all(enum pr_log_level level, const char *fmt, ...)
{
    if (level > cur_level)
        return;
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    emit(level, fmt, ap);
    va_end(ap);
    errno = saved;
}

void pr_log_limit_flush(void)
{
    struct pr_log_summary s[16];
    size_t n;
    int saved = errno;
    do {
        n = pr_log_limit_due(s, sizeof(s) / sizeof(s[0]));
        for (size_t i = 0; i < n; i++)
            summarize(&s[i]);
    } while (n == sizeof(s) / sizeof(s[0]));
    errno = saved;
}
