/* SPDX-License-Identifier: MIT */
#include "daemon/base/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/http_req.h"
#include "daemon/base/log.h"
#include "daemon/base/stranger.h"
#include "preduce.h" /* the release's version */

#define BUF_MIN           4096
#define REFUSE_LOG_GAP_MS 10000 /* at most one "refusing" line per gap */

/* One accepted connection; freed after both its handles closed. */
struct mconn {
    struct pr_stranger st; /* listed until answered; first (stranger_close) */
    struct mconn *next;
    struct pr_metrics *m;
    uv_tcp_t tcp;
    uv_timer_t timer; /* the per-connection deadline */
    uv_write_t wr;
    uv_shutdown_t sd;
    int handles; /* still open; the struct is freed at 0 */
    int closing;
    int answered;  /* from then on, input is read and dropped */
    int lingering; /* the answer and FIN are out: only waiting for EOF */
    char peer[64];
    size_t len; /* bytes of the request in req */
    char req[PR_METRICS_MAX_REQUEST];
    char head[256];
    struct pr_metrics_buf body; /* lives until the write completed */
};

/* A connection over the limit: accepted only to be closed. */
struct refused {
    uv_tcp_t tcp;
    struct pr_metrics *m;
};

struct pr_metrics {
    uv_loop_t *loop;
    uv_tcp_t listener;
    pr_metrics_render_fn render;
    void *ctx;
    struct mconn *conns; /* open (not closing) connections */
    unsigned nconns;
    unsigned refs; /* the listener and every struct not yet freed */
    uint16_t port;
    uint64_t refused;
    uint64_t refuse_logged_ms;
    struct pr_strangers waiting; /* connections not yet answered */
};

static const struct pr_stranger_rules waiting_rules = {
    .what = "metrics",
    .awaits = "request",
    .max = PR_METRICS_MAX_WAITING,
    .per_source_max = PR_METRICS_MAX_PER_SOURCE,
};

/* ------------------------------------------------------------------ */
/* Text buffer                                                          */

void pr_metrics_buf_init(struct pr_metrics_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void pr_metrics_buf_fini(struct pr_metrics_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static int reserve(struct pr_metrics_buf *b, size_t more)
{
    if (b->err)
        return b->err;
    if (more >= PR_METRICS_BUF_MAX - b->len) {
        b->err = -EMSGSIZE;
        return b->err;
    }
    size_t need = b->len + more + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : BUF_MIN;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->err = -ENOMEM;
        return b->err;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void pr_metrics_printf(struct pr_metrics_buf *b, const char *fmt, ...)
{
    if (reserve(b, 0) < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->err = -EINVAL;
        return;
    }
    if ((size_t)n >= b->cap - b->len) {
        if (reserve(b, (size_t)n) < 0)
            return;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void pr_metrics_header(struct pr_metrics_buf *b, const char *name,
                       const char *type, const char *help)
{
    pr_metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                      type);
}

void pr_metrics_build_info(struct pr_metrics_buf *b)
{
    pr_metrics_header(b, "preduce_build_info", "gauge",
                      "The preduce release this daemon runs.");
    pr_metrics_printf(b, "preduce_build_info{version=\"%d.%d\"} 1\n",
                      PREDUCE_VERSION_MAJOR, PREDUCE_VERSION_MINOR);
}

const char *pr_metrics_escape(const char *s, char *dst, size_t dst_len)
{
    size_t o = 0;
    for (s = s ? s : ""; *s && o + 1 < dst_len; s++) {
        char e = *s == '\\' ? '\\' : *s == '"' ? '"' : *s == '\n' ? 'n' : 0;
        if (e) {
            if (o + 2 >= dst_len)
                break;
            dst[o++] = '\\';
            dst[o++] = e;
        } else {
            dst[o++] = *s;
        }
    }
    if (dst_len)
        dst[o] = '\0';
    return dst;
}

/* ------------------------------------------------------------------ */
/* Connections                                                          */

static void release(struct pr_metrics *m)
{
    if (--m->refs == 0)
        free(m);
}

static void conn_closed_cb(uv_handle_t *h)
{
    struct mconn *c = h->data;
    if (--c->handles > 0)
        return;
    struct pr_metrics *m = c->m;
    pr_metrics_buf_fini(&c->body);
    free(c);
    release(m);
}

static void conn_close(struct mconn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    pr_stranger_remove(&c->st);
    struct pr_metrics *m = c->m;
    struct mconn **pp = &m->conns;
    while (*pp && *pp != c)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = c->next;
        m->nconns--;
    }
    uv_close((uv_handle_t *)&c->tcp, conn_closed_cb);
    uv_close((uv_handle_t *)&c->timer, conn_closed_cb);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    struct mconn *c = req->data;
    if (status < 0 || c->closing ||
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0)
        conn_close(c);
    else
        c->lingering = 1;
}

/*
 * The answer is out: send FIN, then read and drop what the client still
 * sends until it closes (or the deadline), since closing a socket with
 * unread input sends a reset that can destroy the answer in flight.
 */
static void write_cb(uv_write_t *req, int status)
{
    struct mconn *c = req->data;
    if (status < 0 && status != UV_ECANCELED)
        pr_dbg("metrics: %s: write: %s", c->peer, uv_strerror(status));
    c->sd.data = c;
    if (status < 0 || c->closing ||
        uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, shutdown_cb) < 0)
        conn_close(c);
}

static const char *reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    default:
        return "Internal Server Error";
    }
}

static void deadline_cb(uv_timer_t *t);

/* Writes the answer; write_cb() then winds the connection down. */
static void answer(struct mconn *c, int code, int head_only)
{
    struct pr_metrics *m = c->m;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->answered = 1;
    /*
     * No longer a stranger: the answer is on its way. The rest of the
     * connection's time (PR_METRICS_DEADLINE_MS from its accept) is for
     * writing it and for the client's close.
     */
    pr_stranger_remove(&c->st);
    uint64_t age = uv_now(m->loop) - c->st.since_ms;
    uv_timer_start(
        &c->timer, deadline_cb,
        age < PR_METRICS_DEADLINE_MS ? PR_METRICS_DEADLINE_MS - age : 0, 0);
    if (code == 200) {
        int rc = m->render(m->ctx, &c->body);
        if (rc == 0 && c->body.err)
            rc = c->body.err;
        if (rc < 0) {
            pr_warn("metrics: rendering failed: %s", strerror(-rc));
            pr_metrics_buf_fini(&c->body);
            code = 500;
        }
    }
    if (code != 200)
        pr_metrics_printf(&c->body, "%s\n", reason(code));
    if (c->body.err) {
        conn_close(c);
        return;
    }
    int n = snprintf(c->head, sizeof(c->head),
                     "HTTP/1.0 %d %s\r\n"
                     "Content-Type: %s\r\n"
                     "Content-Length: %zu\r\n"
                     "%s"
                     "Connection: close\r\n\r\n",
                     code, reason(code),
                     code == 200 ? PR_METRICS_CONTENT_TYPE
                                 : "text/plain; charset=utf-8",
                     c->body.len, code == 405 ? "Allow: GET, HEAD\r\n" : "");
    uv_buf_t bufs[2] = {
        uv_buf_init(c->head, (unsigned)n),
        uv_buf_init(c->body.data, (unsigned)c->body.len),
    };
    pr_dbg("metrics: %s: %d %s", c->peer, code, reason(code));
    c->wr.data = c;
    int rc = uv_write(&c->wr, (uv_stream_t *)&c->tcp, bufs, head_only ? 1 : 2,
                      write_cb);
    if (rc < 0) {
        pr_dbg("metrics: %s: write: %s", c->peer, uv_strerror(rc));
        conn_close(c);
    }
}

/*
 * Answers once the request is complete (or must be refused); `eof`: the
 * client will send nothing more.
 */
static void on_request_data(struct mconn *c, int eof)
{
    int head;
    int code =
        pr_http_request_status(c->req, c->len, sizeof(c->req), eof, &head);
    if (code == -ENODATA)
        conn_close(c);
    else if (code > 0)
        answer(c, code, head);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct mconn *c = h->data;
    *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - c->len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    struct mconn *c = s->data;
    if (c->answered) {
        c->len = 0;
        if (nread < 0)
            conn_close(c);
        return;
    }
    if (nread == UV_EOF) {
        on_request_data(c, 1);
        return;
    }
    if (nread < 0) {
        pr_dbg("metrics: %s: read: %s", c->peer, uv_strerror((int)nread));
        conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    if (nread > 0)
        on_request_data(c, 0);
}

static void deadline_cb(uv_timer_t *t)
{
    struct mconn *c = t->data;
    if (c->answered)
        pr_dbg("metrics: %s: not done within %d ms: closing", c->peer,
               PR_METRICS_DEADLINE_MS);
    else
        pr_dbg("metrics: %s: no request within %d ms: closing", c->peer,
               PR_METRICS_READ_MS);
    conn_close(c);
}

/* A connection without its request closed for a newer one. */
static void stranger_close(struct pr_stranger *st, int status)
{
    (void)status;
    conn_close((struct mconn *)st);
}

static void refused_closed_cb(uv_handle_t *h)
{
    struct refused *r = h->data;
    struct pr_metrics *m = r->m;
    free(r);
    release(m);
}

/* Accepts a connection over the limit and closes it at once. */
static void refuse(struct pr_metrics *m)
{
    struct refused *r = calloc(1, sizeof(*r));
    if (!r) {
        pr_err("metrics: out of memory: cannot refuse a connection");
        return;
    }
    r->m = m;
    uv_tcp_init(m->loop, &r->tcp);
    r->tcp.data = r;
    m->refs++;
    uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&r->tcp);
    uv_close((uv_handle_t *)&r->tcp, refused_closed_cb);
    m->refused++;
    uint64_t now = uv_now(m->loop);
    if (m->refused == 1 || now - m->refuse_logged_ms >= REFUSE_LOG_GAP_MS) {
        m->refuse_logged_ms = now;
        pr_warn("metrics: %u connections open: refusing more (%llu so far)",
                PR_METRICS_MAX_CONNS, (unsigned long long)m->refused);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    struct pr_metrics *m = server->data;
    if (status < 0) {
        pr_warn("metrics: accept: %s", uv_strerror(status));
        return;
    }
    if (m->nconns >= PR_METRICS_MAX_CONNS) {
        /* A client that has its whole answer gives way to a new one. */
        struct mconn *old = m->conns;
        while (old && !old->lingering)
            old = old->next;
        if (!old) {
            refuse(m);
            return;
        }
        conn_close(old);
    }
    struct mconn *c = calloc(1, sizeof(*c));
    if (!c) {
        refuse(m);
        return;
    }
    c->m = m;
    uv_tcp_init(m->loop, &c->tcp);
    uv_timer_init(m->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles = 2;
    m->refs++;
    c->next = m->conns;
    m->conns = c;
    m->nconns++;
    snprintf(c->peer, sizeof(c->peer), "?");
    int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc == 0) {
        pr_source_tcp(&c->tcp, c->st.source, sizeof(c->st.source));
        snprintf(c->peer, sizeof(c->peer), "%s", c->st.source);
        c->st.name = c->peer;
        c->st.close = stranger_close;
        /*
         * Idle connections cannot keep a scraper out: the oldest one
         * without its request (from this address, past its share) makes
         * room (stranger.h).
         */
        if (pr_strangers_admit(&m->waiting, &waiting_rules, &c->st,
                               uv_now(m->loop)) < 0) {
            conn_close(c);
            return;
        }
        rc = uv_timer_start(&c->timer, deadline_cb, PR_METRICS_READ_MS, 0);
    }
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rc < 0) {
        pr_dbg("metrics: accept: %s", uv_strerror(rc));
        conn_close(c);
    }
}

/* ------------------------------------------------------------------ */
/* Server                                                               */

static void listener_closed_cb(uv_handle_t *h)
{
    release(h->data);
}

int pr_metrics_start(uv_loop_t *loop, const char *hostport,
                     pr_metrics_render_fn fn, void *ctx,
                     struct pr_metrics **out)
{
    char host[96];
    uint16_t port;
    struct sockaddr_storage ss;
    int rc = pr_conf_parse_hostport(hostport, host, sizeof(host), &port);
    if (rc == 0 && uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        rc = -EINVAL;
    if (rc < 0) {
        pr_err("metrics: listen on '%s': not a numeric host:port", hostport);
        return -EINVAL;
    }
    struct pr_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->loop = loop;
    m->render = fn;
    m->ctx = ctx;
    m->refs = 1;
    uv_tcp_init(loop, &m->listener);
    m->listener.data = m;
    rc = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&m->listener, 128, on_connection);
    int len = sizeof(ss);
    if (rc == 0)
        rc = uv_tcp_getsockname(&m->listener, (struct sockaddr *)&ss, &len);
    if (rc < 0) {
        pr_err("metrics: listen on %s: %s", hostport, uv_strerror(rc));
        uv_close((uv_handle_t *)&m->listener, listener_closed_cb);
        return rc;
    }
    m->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    int v6 = strchr(host, ':') != NULL;
    pr_info("metrics at http://%s%s%s:%u/metrics", v6 ? "[" : "", host,
            v6 ? "]" : "", m->port);
    *out = m;
    return 0;
}

uint16_t pr_metrics_port(const struct pr_metrics *m)
{
    return m->port;
}

void pr_metrics_stop(struct pr_metrics *m)
{
    if (!m)
        return;
    while (m->conns)
        conn_close(m->conns);
    uv_close((uv_handle_t *)&m->listener, listener_closed_cb);
}
