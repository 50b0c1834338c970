/* SPDX-License-Identifier: MIT */
/*
 * A TCP relay that delays (tests/hosts/): this kernel has no netem, so a
 * long path is played in user space. Every byte is held DELAY_MS after it
 * was read before it is written on, and at most WINDOW_KB are held per
 * direction of a connection: one connection then moves at most
 * WINDOW_KB / DELAY_MS, as a TCP stream whose window is that size does
 * over a path of that round trip, and several connections move that much
 * each (what several streams per peer pair are for).
 *
 *   relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS WINDOW_KB
 *
 * Hosts are numeric IPv4 or [IPv6] addresses; a listen port of 0 picks a
 * free one. "relay: listening on HOST:PORT ..." goes to stderr once it
 * accepts; a line per connection opened and closed follows.
 *
 * A connection's life:
 *  1. Accepted: the relay dials the target; nothing is read from the
 *     client before that connect succeeds (it fails: the client is reset).
 *  2. Each direction reads while it holds fewer than WINDOW_KB bytes
 *     (a read is one chunk, due DELAY_MS after it was read) and writes
 *     due chunks in order; a chunk stops counting when its write is done.
 *  3. EOF from one side: once that direction's held bytes are written,
 *     the other side is shut down for writing (the half-close goes on).
 *     When both directions are shut, both sockets close.
 *  4. An error on either side (a reset, a failed write): both close at
 *     once, the other side with a reset, so that its peer sees the loss.
 *
 * The relay's own socket buffers are small (SOCK_BUF each way, no
 * autotuning): over a real long path a sender's unacknowledged bytes are
 * the ones on the path, and its send queue shows the backlog. With the
 * kernel's buffers (autotuned to megabytes) the relay's kernel would
 * acknowledge a sender's bytes long before they pass, and a sender that
 * picks the least backed-up of several streams would see none.
 *
 * Single-threaded, one libuv loop. Exit 2 on bad arguments, 1 when the
 * listener cannot be set up.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* The most one read takes (and so the largest chunk), bytes. */
#define READ_MAX (64 * 1024)
/* SO_RCVBUF and SO_SNDBUF of every socket (the kernel doubles them). */
#define SOCK_BUF (64 * 1024)

struct relay {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct sockaddr_storage target;
    char target_name[64];
    uint64_t delay_ms;
    size_t window;        /* bytes per direction of a connection */
    unsigned long serial; /* connections accepted */
};

struct pair;

/* Bytes read at one time, held until due, then written. */
struct chunk {
    struct chunk *next;
    struct dir *d;
    uv_write_t req;
    uint64_t due_ms; /* uv_now() when it may be written */
    size_t len;
    char data[];
};

/* One direction of a connection: what is read from `from` goes to `to`. */
struct dir {
    struct pair *pr;
    uv_tcp_t *from, *to;
    uv_timer_t timer;           /* the head chunk's due time */
    struct chunk *head, **tail; /* held, not yet written, oldest first */
    size_t held;                /* bytes held or being written */
    unsigned long long moved;   /* bytes written on */
    int reading;                /* read started on `from` */
    int eof;                    /* `from` sent EOF */
    int shut;                   /* 1: shutdown of `to` asked, 2: done */
    uv_shutdown_t sreq;
};

struct pair {
    struct relay *r;
    unsigned long id;
    char peer[64];   /* the client's address */
    uv_tcp_t client; /* data: &up (what reads from it) */
    uv_tcp_t target; /* data: &down */
    uv_connect_t creq;
    struct dir up, down;
    int closing;
    int handles; /* open handles of the four; freed at 0 */
};

static void usage(void)
{
    fprintf(stderr,
            "usage: relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS "
            "WINDOW_KB\n"
            "  holds each byte DELAY_MS (0..600000) before passing it on, at "
            "most\n"
            "  WINDOW_KB (1..1048576) per direction of a connection; hosts "
            "are\n"
            "  numeric (IPv4, or [IPv6]); a listen port of 0 picks one\n");
}

/* "host:port" or "[v6]:port" into sa: 0 or -EINVAL. */
static int parse_addr(const char *s, int port_zero_ok,
                      struct sockaddr_storage *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < !port_zero_ok ||
        port > 65535)
        return -EINVAL;
    memset(sa, 0, sizeof(*sa));
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        return uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)sa) == 0
                   ? 0
                   : -EINVAL;
    }
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0
               ? 0
               : -EINVAL;
}

/* A whole decimal number in lo..hi: 0 or -EINVAL. */
static int parse_num(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

static void addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[48] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(s6, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
        return;
    }
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    uv_ip4_name(s4, host, sizeof(host));
    port = ntohs(s4->sin_port);
    snprintf(buf, len, "%s:%d", host, port);
}

/*
 * Small buffers both ways (see the top): 0 or a libuv error. On a
 * listener before listen(), so that accepted sockets have them from
 * their SYN on (the window scale is agreed then).
 */
static int small_buffers(uv_handle_t *h)
{
    int v = SOCK_BUF;
    int rc = uv_recv_buffer_size(h, &v);
    v = SOCK_BUF;
    return rc < 0 ? rc : uv_send_buffer_size(h, &v);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct pair *pr = h->data == NULL ? NULL : ((struct dir *)h->data)->pr;
    if (pr && --pr->handles == 0)
        free(pr);
}

static void free_held(struct dir *d)
{
    while (d->head) {
        struct chunk *c = d->head;
        d->head = c->next;
        d->held -= c->len;
        free(c);
    }
    d->tail = &d->head;
}

/*
 * Closes both sides and the timers. `bad` is the side that failed (NULL:
 * a clean end); the other one is reset unless it was shut down already.
 * Writes in flight end with UV_ECANCELED and free their chunks.
 */
static void pair_close(struct pair *pr, uv_tcp_t *bad, const char *why)
{
    if (pr->closing)
        return;
    pr->closing = 1;
    fprintf(stderr,
            "relay: connection %lu from %s closed (%s): %llu bytes up, "
            "%llu down\n",
            pr->id, pr->peer, why, pr->up.moved, pr->down.moved);
    free_held(&pr->up);
    free_held(&pr->down);
    uv_tcp_t *sides[2] = {&pr->client, &pr->target};
    for (int i = 0; i < 2; i++) {
        uv_handle_t *h = (uv_handle_t *)sides[i];
        if (bad && sides[i] != bad &&
            uv_tcp_close_reset(sides[i], on_handle_closed) == 0)
            continue;
        uv_close(h, on_handle_closed);
    }
    uv_close((uv_handle_t *)&pr->up.timer, on_handle_closed);
    uv_close((uv_handle_t *)&pr->down.timer, on_handle_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct dir *d = req->data;
    struct pair *pr = d->pr;
    if (pr->closing)
        return;
    if (status < 0) {
        pair_close(pr, d->to, uv_strerror(status));
        return;
    }
    d->shut = 2;
    if (pr->up.shut == 2 && pr->down.shut == 2)
        pair_close(pr, NULL, "both sides ended");
}

/* After EOF from `from`: shut `to` down once every held byte is written. */
static void maybe_shutdown(struct dir *d)
{
    if (!d->eof || d->held > 0 || d->shut)
        return;
    d->shut = 1;
    d->sreq.data = d;
    int rc = uv_shutdown(&d->sreq, (uv_stream_t *)d->to, on_shutdown);
    if (rc < 0)
        pair_close(d->pr, d->to, uv_strerror(rc));
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct dir *d = h->data;
    size_t room = d->held < d->pr->r->window ? d->pr->r->window - d->held : 0;
    size_t n = room < READ_MAX ? room : READ_MAX;
    (void)suggested;
    struct chunk *c = n ? malloc(offsetof(struct chunk, data) + n) : NULL;
    /* A zero-length buffer makes libuv report UV_ENOBUFS: read again later. */
    *buf = uv_buf_init(c ? c->data : NULL, c ? (unsigned)n : 0);
}

static void start_reading(struct dir *d);

static void on_written(uv_write_t *req, int status)
{
    struct chunk *c = req->data;
    struct dir *d = c->d;
    struct pair *pr = d->pr;
    d->held -= c->len;
    if (status == 0)
        d->moved += c->len;
    free(c);
    if (pr->closing)
        return;
    if (status < 0) {
        pair_close(pr, d->to, uv_strerror(status));
        return;
    }
    start_reading(d);
    maybe_shutdown(d);
}

/* Writes every chunk that is due, oldest first. */
static void on_due(uv_timer_t *t)
{
    struct dir *d = t->data;
    uint64_t now = uv_now(d->pr->r->loop);
    while (d->head && d->head->due_ms <= now) {
        struct chunk *c = d->head;
        d->head = c->next;
        if (!d->head)
            d->tail = &d->head;
        uv_buf_t b = uv_buf_init(c->data, (unsigned)c->len);
        c->req.data = c;
        int rc = uv_write(&c->req, (uv_stream_t *)d->to, &b, 1, on_written);
        if (rc < 0) {
            d->held -= c->len;
            free(c);
            pair_close(d->pr, d->to, uv_strerror(rc));
            return;
        }
    }
    if (d->head) {
        uint64_t wait = d->head->due_ms - now;
        uv_timer_start(&d->timer, on_due, wait, 0);
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct dir *d = s->data;
    struct pair *pr = d->pr;
    struct chunk *c =
        buf->base ? (struct chunk *)(buf->base - offsetof(struct chunk, data))
                  : NULL;
    if (nread <= 0 || pr->closing) {
        free(c);
        if (pr->closing || nread == 0)
            return;
        uv_read_stop(s);
        d->reading = 0;
        if (nread == UV_ENOBUFS && d->held >= pr->r->window)
            return; /* full: on_written() reads again */
        if (nread == UV_ENOBUFS) {
            pair_close(pr, d->from, "out of memory");
            return;
        }
        if (nread == UV_EOF) {
            d->eof = 1;
            maybe_shutdown(d);
            return;
        }
        pair_close(pr, d->from, uv_strerror((int)nread));
        return;
    }
    /* Give back what the read did not fill: small reads are common. */
    if ((size_t)nread < buf->len) {
        struct chunk *smaller =
            realloc(c, offsetof(struct chunk, data) + (size_t)nread);
        if (smaller)
            c = smaller;
    }
    c->next = NULL;
    c->d = d;
    c->len = (size_t)nread;
    c->due_ms = uv_now(pr->r->loop) + pr->r->delay_ms;
    int was_empty = d->head == NULL;
    *d->tail = c;
    d->tail = &c->next;
    d->held += c->len;
    if (was_empty)
        uv_timer_start(&d->timer, on_due, pr->r->delay_ms, 0);
    if (d->held >= pr->r->window) {
        uv_read_stop(s);
        d->reading = 0;
    }
}

static void start_reading(struct dir *d)
{
    if (d->reading || d->eof || d->held >= d->pr->r->window)
        return;
    int rc = uv_read_start((uv_stream_t *)d->from, on_alloc, on_read);
    if (rc < 0) {
        pair_close(d->pr, d->from, uv_strerror(rc));
        return;
    }
    d->reading = 1;
}

static void on_connected(uv_connect_t *req, int status)
{
    struct pair *pr = req->data;
    if (pr->closing)
        return;
    if (status < 0) {
        fprintf(stderr, "relay: connection %lu from %s: connect to %s: %s\n",
                pr->id, pr->peer, pr->r->target_name, uv_strerror(status));
        pair_close(pr, &pr->target, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&pr->target, 1);
    start_reading(&pr->up);
    start_reading(&pr->down);
}

static void dir_init(struct pair *pr, struct dir *d, uv_tcp_t *from,
                     uv_tcp_t *to)
{
    d->pr = pr;
    d->from = from;
    d->to = to;
    d->tail = &d->head;
    uv_timer_init(pr->r->loop, &d->timer);
    d->timer.data = d;
    from->data = d;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct relay *r = server->data;
    if (status < 0) {
        fprintf(stderr, "relay: accept: %s\n", uv_strerror(status));
        return;
    }
    struct pair *pr = calloc(1, sizeof(*pr));
    if (!pr) {
        fprintf(stderr, "relay: out of memory for a connection\n");
        return;
    }
    pr->r = r;
    pr->id = ++r->serial;
    snprintf(pr->peer, sizeof(pr->peer), "?");
    uv_tcp_init(r->loop, &pr->client);
    int rc = uv_accept(server, (uv_stream_t *)&pr->client);
    /*
     * The target's socket now, so that its buffers are set before its
     * SYN; the handle is there to close whatever failed.
     */
    int trc = uv_tcp_init_ex(r->loop, &pr->target, r->target.ss_family);
    if (trc < 0)
        uv_tcp_init(r->loop, &pr->target);
    dir_init(pr, &pr->up, &pr->client, &pr->target);
    dir_init(pr, &pr->down, &pr->target, &pr->client);
    pr->handles = 4;
    if (rc < 0 || trc < 0) {
        fprintf(stderr, "relay: %s: %s\n", rc < 0 ? "accept" : "socket",
                uv_strerror(rc < 0 ? rc : trc));
        pair_close(pr, NULL, rc < 0 ? "accept failed" : "no socket");
        return;
    }
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    if (uv_tcp_getpeername(&pr->client, (struct sockaddr *)&sa, &len) == 0)
        addr_name((struct sockaddr *)&sa, pr->peer, sizeof(pr->peer));
    uv_tcp_nodelay(&pr->client, 1);
    rc = small_buffers((uv_handle_t *)&pr->target);
    if (rc < 0)
        fprintf(stderr, "relay: connection %lu: target's buffers: %s\n", pr->id,
                uv_strerror(rc));
    fprintf(stderr, "relay: connection %lu from %s opened\n", pr->id, pr->peer);
    pr->creq.data = pr;
    rc = uv_tcp_connect(&pr->creq, &pr->target,
                        (const struct sockaddr *)&r->target, on_connected);
    if (rc < 0) {
        fprintf(stderr, "relay: connection %lu: connect to %s: %s\n", pr->id,
                r->target_name, uv_strerror(rc));
        pair_close(pr, &pr->target, uv_strerror(rc));
    }
}

int main(int argc, char **argv)
{
    struct relay r = {0};
    struct sockaddr_storage listen_at;
    long delay_ms, window_kb;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage();
        return 0;
    }
    if (argc != 5) {
        fprintf(stderr, "relay: expected 4 arguments, got %d\n", argc - 1);
        usage();
        return 2;
    }
    if (parse_addr(argv[1], 1, &listen_at) < 0) {
        fprintf(stderr, "relay: bad listen address '%s'\n", argv[1]);
        usage();
        return 2;
    }
    if (parse_addr(argv[2], 0, &r.target) < 0) {
        fprintf(stderr, "relay: bad target address '%s'\n", argv[2]);
        usage();
        return 2;
    }
    if (parse_num(argv[3], 0, 600000, &delay_ms) < 0) {
        fprintf(stderr, "relay: bad DELAY_MS '%s'\n", argv[3]);
        usage();
        return 2;
    }
    if (parse_num(argv[4], 1, 1048576, &window_kb) < 0) {
        fprintf(stderr, "relay: bad WINDOW_KB '%s'\n", argv[4]);
        usage();
        return 2;
    }
    r.delay_ms = (uint64_t)delay_ms;
    r.window = (size_t)window_kb * 1024;
    addr_name((struct sockaddr *)&r.target, r.target_name,
              sizeof(r.target_name));
    /* A peer that resets while a write is queued must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    r.loop = uv_default_loop();
    uv_tcp_init(r.loop, &r.listener);
    r.listener.data = &r;
    int rc = uv_tcp_bind(&r.listener, (struct sockaddr *)&listen_at, 0);
    if (rc == 0)
        rc = small_buffers((uv_handle_t *)&r.listener);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&r.listener, 128, on_connection);
    if (rc < 0) {
        fprintf(stderr, "relay: listen on %s: %s\n", argv[1], uv_strerror(rc));
        return 1;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    char bound_name[64] = "?";
    if (uv_tcp_getsockname(&r.listener, (struct sockaddr *)&bound, &len) == 0)
        addr_name((struct sockaddr *)&bound, bound_name, sizeof(bound_name));
    fprintf(stderr,
            "relay: listening on %s, to %s, delay %ld ms, window %ld KiB "
            "per direction of a connection\n",
            bound_name, r.target_name, delay_ms, window_kb);
    return uv_run(r.loop, UV_RUN_DEFAULT) < 0 ? 1 : 0;
}
