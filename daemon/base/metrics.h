/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint ([metrics] listen): a tiny HTTP/1.0 server on the
 * daemon's loop that answers GET /metrics with the Prometheus text
 * exposition format (version 0.0.4), rendered on each request by a callback
 * of the role (node_metrics.c, sched_metrics.c).
 *
 * Per connection, in order:
 *  1. Accept. With PR_METRICS_MAX_CONNS open already, one that has its
 *     whole answer and only waits for the client to close is closed to
 *     make room; if there is none, the new one is accepted and closed at
 *     once. Connections without their request yet are strangers
 *     (stranger.h): at most PR_METRICS_MAX_WAITING, PR_METRICS_MAX_PER_SOURCE
 *     of them from one IP address; a new one takes the oldest one's place,
 *     so idle connections cannot keep a scraper out.
 *  2. Read the request line and headers, at most 8 KiB, until the blank
 *     line (an HTTP/0.9-style line without a version is answered at once),
 *     within PR_METRICS_READ_MS of the accept.
 *  3. Answer 200 with the rendered text for GET or HEAD of /metrics, 404
 *     for another path, 405 for another method, 400 for anything malformed
 *     or too long, 500 when rendering fails; every answer is HTTP/1.0 with
 *     Content-Length and Connection: close.
 *  4. After the answer, shut down the sending side and drop any input
 *     until the client closes (closing with unread input would reset the
 *     connection and could destroy the answer), then close. A connection
 *     still open PR_METRICS_DEADLINE_MS after it was accepted (a slow
 *     reader, or one that does not close) is closed as it is.
 * Everything runs on the loop thread; the render callback too.
 */
#ifndef PR_METRICS_H
#define PR_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PR_METRICS_MAX_CONNS      32
#define PR_METRICS_MAX_WAITING    16
#define PR_METRICS_MAX_PER_SOURCE 8
#define PR_METRICS_MAX_REQUEST    8192
#define PR_METRICS_READ_MS        1000
#define PR_METRICS_DEADLINE_MS    2000
#define PR_METRICS_CONTENT_TYPE   "text/plain; version=0.0.4"

/*
 * A growable text buffer. Appends never fail on the spot: the first
 * failure (-ENOMEM, or -EMSGSIZE past PR_METRICS_BUF_MAX) sticks in err and
 * later appends do nothing, so a render function checks once at the end.
 */
#define PR_METRICS_BUF_MAX (16u << 20)

struct pr_metrics_buf {
    char *data; /* NUL-terminated while len < cap; owned, free with fini */
    size_t len;
    size_t cap;
    int err; /* 0 or the first negative errno */
};

void pr_metrics_buf_init(struct pr_metrics_buf *b);
void pr_metrics_buf_fini(struct pr_metrics_buf *b);
void pr_metrics_printf(struct pr_metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "# HELP name help\n# TYPE name type\n" (type: counter, gauge, ...). */
void pr_metrics_header(struct pr_metrics_buf *b, const char *name,
                       const char *type, const char *help);
/*
 * The release, the same line from every role:
 * preduce_build_info{version="MAJOR.MINOR"} 1, from preduce.h's
 * PREDUCE_VERSION_MAJOR and _MINOR (what preduced -V prints).
 */
void pr_metrics_build_info(struct pr_metrics_buf *b);
/*
 * Copies `s` into dst[dst_len] escaped for a label value (backslash,
 * double quote and newline), truncated if need be; returns dst. A dst of
 * 2 * strlen(s) + 1 bytes always holds all of it.
 */
const char *pr_metrics_escape(const char *s, char *dst, size_t dst_len);

/*
 * Appends the whole exposition to `out`. 0, or a negative errno (the
 * request then gets a 500). Called on the loop thread.
 */
typedef int (*pr_metrics_render_fn)(void *ctx, struct pr_metrics_buf *out);

struct pr_metrics;

/*
 * Listens on `hostport` ("host:port" or "[v6]:port", numeric; port 0 picks
 * a free port, see pr_metrics_port). 0 and *out set, or a negative errno
 * (-EINVAL for a bad address, or the bind/listen error), logged.
 */
int pr_metrics_start(uv_loop_t *loop, const char *hostport,
                     pr_metrics_render_fn fn, void *ctx,
                     struct pr_metrics **out);
/* The port bound. */
uint16_t pr_metrics_port(const struct pr_metrics *m);
/*
 * Closes the listener and every connection; the callback is not called
 * again. Memory is freed after the last close callback, so the loop must
 * run once more. NULL is allowed.
 */
void pr_metrics_stop(struct pr_metrics *m);

#endif
