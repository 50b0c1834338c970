/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for data frames read straight into place by a conn
 * (daemon/base/conn.c: pr_conn_ops.on_data_begin/on_data_end): a pr_conn
 * with the tests' own ops reads one end of a socket pair, and the test
 * writes raw frames into the other end, split where it likes.
 *
 * What must hold: every frame comes exactly once, in order, with its
 * bytes: a data frame either landed (on_data_end, status 0) or whole
 * (on_data, when the owner said 0 or the frame came in one read); a read
 * that ends inside a data frame's header or prefix takes only what they
 * miss, so that none of the payload goes through the read buffer; a
 * control message reads as usual; a landing cut short by the peer or by
 * a local close ends once with an error; a socket that holds more than
 * the read budget is read over several loop turns. Each test runs a
 * private loop, closes every handle and checks uv_loop_close() == 0.
 *
 * With an I/O thread (conn_io.h; the tests whose loop index says so) the
 * same must hold, the thread reading the large payloads; and a writer
 * conn with one writes frames whole and in order, what it was handed
 * after a large frame (a message) behind it, each callback once, and a
 * close reports the writes the thread still held before on_close.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/conn.h"
#include "daemon/base/conn_io.h"
#include "daemon/base/log.h"
#include "proto/frame.h"
#include "tests/check_run.h"

#define LIMIT_MS  10000
#define PREFIX    40 /* data_prefix: the TCP transport's chunk header */
#define MAX_FRAME (8u << 20)
/* conn.c's first read of a frame when it may land (LAND_FIRST_READ). */
#define FIRST_READ 4096
#define MAXEV      32

/* What the conn handed its owner, in order. */
struct event {
    char kind;     /* 'M' message, 'D' whole data frame, 'L' landed, 'X' cut */
    uint32_t k;    /* the ping's nonce, or the data frame's number */
    size_t len;    /* payload bytes after the prefix */
    int status;    /* on_data_end's */
    int ok;        /* its bytes were the ones sent */
    size_t copied; /* landed: payload bytes already in the read buffer */
};

struct landing {
    uint32_t k;
    size_t len;
    uint8_t *buf;
};

struct t {
    uv_loop_t loop;
    uv_timer_t limit;
    int timed_out;
    int fds[2];
    struct pr_conn *c; /* reads fds[0]; NULL once closed */
    uv_pipe_t w;       /* writes fds[1] */
    int w_open;
    size_t writes_out;
    int write_errors; /* writes after the conn closed its end */
    struct event ev[MAXEV];
    size_t nev;
    int begins, ends, closes;
    int close_status;
    struct pr_conn_io *io; /* t_io: the I/O thread of c (or of wc) */
    struct pr_conn *wc;    /* t_init_writer: a conn writes fds[1] */
    int wc_closes;
    int cb_order[MAXEV]; /* wc's write callbacks: their numbers, in turn */
    int cb_status[MAXEV];
    size_t ncb;
    size_t cb_at_close; /* ncb when wc's on_close ran */
    int refuse_k;       /* on_data_begin says 0 for frame refuse_k (-1: none) */
    uint64_t wipe;      /* on_msg zeroes the ping of this nonce (0: none) */
    int begin_rc;       /* < 0: on_data_begin answers this */
};

/* Byte i of data frame k's payload: not periodic in 256 or 4096. */
static uint8_t pat(uint32_t k, size_t i)
{
    return (uint8_t)(((i + 1) * 2654435761u >> 11) + k * 37 + (i >> 12));
}

static int pat_ok(uint32_t k, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(k, i))
            return 0;
    return 1;
}

static void record(struct t *t, struct event e)
{
    ck_assert_uint_lt(t->nev, MAXEV);
    t->ev[t->nev++] = e;
}

static int t_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct t *t = c->owner;
    ck_assert_int_eq(m->body_case, PR__V1__MSG__BODY_PING);
    record(t, (struct event){.kind = 'M', .k = (uint32_t)m->ping->nonce});
    if (t->wipe && m->ping->nonce == t->wipe)
        pr_conn_wipe_msg(c);
    return 0;
}

static uint32_t prefix_k(const uint8_t *prefix)
{
    uint32_t k;
    memcpy(&k, prefix, sizeof(k));
    return k;
}

static int t_on_data(struct pr_conn *c, const uint8_t *p, size_t n)
{
    struct t *t = c->owner;
    ck_assert_uint_ge(n, PREFIX);
    uint32_t k = prefix_k(p);
    record(t, (struct event){.kind = 'D',
                             .k = k,
                             .len = n - PREFIX,
                             .ok = pat_ok(k, p + PREFIX, n - PREFIX)});
    return 0;
}

static void t_on_close(struct pr_conn *c, int status)
{
    struct t *t = c->owner;
    t->closes++;
    t->close_status = status;
    t->c = NULL;
}

static int t_on_data_begin(struct pr_conn *c, const uint8_t *prefix,
                           size_t rest, void **dst, void **token)
{
    struct t *t = c->owner;
    uint32_t k = prefix_k(prefix);
    t->begins++;
    if (t->begin_rc < 0)
        return t->begin_rc;
    if ((int)k == t->refuse_k)
        return 0;
    struct landing *l = malloc(sizeof(*l));
    ck_assert_ptr_nonnull(l);
    l->k = k;
    l->len = rest;
    l->buf = malloc(rest);
    ck_assert_ptr_nonnull(l->buf);
    memset(l->buf, 0xee, rest);
    *dst = l->buf;
    *token = l;
    /*
     * What the conn copies from its read buffer: the payload bytes that
     * came with the header and prefix.
     */
    size_t pending = pr_frame_reader_pending(&c->rd);
    ck_assert_uint_ge(pending, PR_FRAME_HDR_LEN + PREFIX);
    record(t, (struct event){.kind = 'L',
                             .k = k,
                             .len = rest,
                             .status = 1, /* not ended yet */
                             .copied = pending - PR_FRAME_HDR_LEN - PREFIX});
    return 1;
}

static void t_on_data_end(struct pr_conn *c, void *token, int status)
{
    struct t *t = c->owner;
    struct landing *l = token;
    t->ends++;
    struct event *e = NULL;
    for (size_t i = t->nev; i > 0 && !e; i--)
        if (t->ev[i - 1].kind == 'L' && t->ev[i - 1].k == l->k &&
            t->ev[i - 1].status == 1)
            e = &t->ev[i - 1];
    ck_assert_ptr_nonnull(e);
    e->status = status;
    e->ok = status == 0 && pat_ok(l->k, l->buf, l->len);
    if (status < 0)
        e->kind = 'X';
    free(l->buf);
    free(l);
}

static const struct pr_conn_ops land_ops = {
    .on_msg = t_on_msg,
    .on_data = t_on_data,
    .on_close = t_on_close,
    .data_prefix = PREFIX,
    .on_data_begin = t_on_data_begin,
    .on_data_end = t_on_data_end,
};

static void limit_cb(uv_timer_t *h)
{
    struct t *t = h->data;
    t->timed_out = 1;
    uv_stop(&t->loop);
}

/* Gives `c` an I/O thread of its own (t->io). */
static void t_io(struct t *t, struct pr_conn *c)
{
    ck_assert_int_eq(pr_conn_io_create(&t->loop, &t->io), 0);
    ck_assert_int_eq(pr_conn_set_io(c, t->io), 0);
    ck_assert_int_eq(pr_conn_set_io(c, t->io), -EALREADY);
}

static void t_init(struct t *t)
{
    memset(t, 0, sizeof(*t));
    t->refuse_k = -1;
    ck_assert_int_eq(uv_loop_init(&t->loop), 0);
    uv_timer_init(&t->loop, &t->limit);
    t->limit.data = t;
    uv_timer_start(&t->limit, limit_cb, LIMIT_MS, 0);
    uv_unref((uv_handle_t *)&t->limit);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, t->fds), 0);
    t->c = pr_conn_create_pipe(&t->loop, MAX_FRAME, &land_ops, t);
    ck_assert_ptr_nonnull(t->c);
    ck_assert_int_eq(uv_pipe_open(&t->c->h.pipe, t->fds[0]), 0);
    snprintf(t->c->name, sizeof(t->c->name), "test conn");
    ck_assert_int_eq(pr_conn_start(t->c), 0);
    ck_assert_int_eq(uv_pipe_init(&t->loop, &t->w, 0), 0);
    ck_assert_int_eq(uv_pipe_open(&t->w, t->fds[1]), 0);
    t->w.data = t;
    t->w_open = 1;
}

/* Runs the loop until pred holds; fails on the time limit. */
static void run_until(struct t *t, int (*pred)(struct t *t))
{
    while (!pred(t)) {
        ck_assert_msg(!t->timed_out, "time limit: the condition never held");
        uv_run(&t->loop, UV_RUN_ONCE);
    }
}

static void w_close(struct t *t)
{
    if (t->w_open)
        uv_close((uv_handle_t *)&t->w, NULL);
    t->w_open = 0;
}

static size_t count_kind(const struct t *t, char kind)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nev; i++)
        n += t->ev[i].kind == kind;
    return n;
}

/* Closes both ends; `closes`: on_close calls expected in all (0 or 1). */
static void t_fini(struct t *t, int closes)
{
    if (t->c)
        pr_conn_close(t->c, 0);
    if (t->wc)
        pr_conn_close(t->wc, 0);
    /* After its conns, which let go of it as they closed. */
    pr_conn_io_destroy(t->io, NULL, NULL);
    w_close(t);
    uv_close((uv_handle_t *)&t->limit, NULL);
    ck_assert_int_eq(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(t->closes, closes);
    ck_assert_uint_eq(t->writes_out, 0);
    ck_assert_int_eq(uv_loop_close(&t->loop), 0);
    /* Every landing begun has ended, once. */
    ck_assert_uint_eq((size_t)t->ends, count_kind(t, 'L') + count_kind(t, 'X'));
    for (size_t i = 0; i < t->nev; i++)
        ck_assert_int_ne(t->ev[i].status, 1);
}

static void write_cb(uv_write_t *req, int status)
{
    struct t *t = req->data;
    if (status < 0)
        t->write_errors++;
    t->writes_out--;
    free(req);
}

/* n bytes of p to the conn's peer end (copied). */
static void put(struct t *t, const uint8_t *p, size_t n)
{
    uv_write_t *req = malloc(sizeof(*req) + n);
    ck_assert_ptr_nonnull(req);
    memcpy(req + 1, p, n);
    req->data = t;
    uv_buf_t b = uv_buf_init((char *)(req + 1), (unsigned)n);
    ck_assert_int_eq(uv_write(req, (uv_stream_t *)&t->w, &b, 1, write_cb), 0);
    t->writes_out++;
}

/* Data frame k with `len` payload bytes after its prefix: malloc'd. */
static uint8_t *data_frame(uint32_t k, size_t len, size_t *n)
{
    *n = PR_FRAME_HDR_LEN + PREFIX + len;
    uint8_t *f = malloc(*n);
    ck_assert_ptr_nonnull(f);
    pr_frame_hdr_encode(f, (uint32_t)(PREFIX + len), PR_FRAME_DATA, 0);
    memset(f + PR_FRAME_HDR_LEN, 0xab, PREFIX);
    memcpy(f + PR_FRAME_HDR_LEN, &k, sizeof(k));
    for (size_t i = 0; i < len; i++)
        f[PR_FRAME_HDR_LEN + PREFIX + i] = pat(k, i);
    return f;
}

/* A Ping with this nonce, framed: malloc'd. */
static uint8_t *ping_frame(uint64_t nonce, size_t *n)
{
    Pr__V1__Ping ping = PR__V1__PING__INIT;
    ping.nonce = nonce;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &ping);
    uint8_t *f = NULL;
    ck_assert_int_eq(pr_msg_frame(&m, MAX_FRAME, &f, n), 0);
    return f;
}

static size_t want_bytes, want_events;

static int got_bytes(struct t *t)
{
    return t->c && t->c->bytes_in >= want_bytes;
}

static int got_events(struct t *t)
{
    return t->nev >= want_events &&
           count_kind(t, 'L') + count_kind(t, 'X') == (size_t)t->ends;
}

static int closed(struct t *t)
{
    return t->closes > 0;
}

/* Runs until the conn has read n bytes in all. */
static void run_bytes(struct t *t, size_t n)
{
    want_bytes = n;
    run_until(t, got_bytes);
}

/* Runs until n events, every landing ended. */
static void run_events(struct t *t, size_t n)
{
    want_events = n;
    run_until(t, got_events);
}

static void check_event(const struct t *t, size_t i, char kind, uint32_t k,
                        size_t len)
{
    ck_assert_uint_lt(i, t->nev);
    const struct event *e = &t->ev[i];
    ck_assert_msg(e->kind == kind && e->k == k, "event %zu: %c %u, want %c %u",
                  i, e->kind, e->k, kind, k);
    if (kind == 'D' || kind == 'L') {
        ck_assert_uint_eq(e->len, len);
        ck_assert_msg(e->ok, "event %zu (%c %u): bytes differ", i, kind, k);
    }
    if (kind == 'L')
        ck_assert_int_eq(e->status, 0);
}

/* ------------------------------------------------------------------ */
/* Split reads                                                          */

/* Where the first write of the frame ends: inside its header or prefix. */
static const size_t splits[] = {
    1, 3, 7, 8, 9, 18, PR_FRAME_HDR_LEN + PREFIX - 1};
#define NSPLITS (int)(sizeof(splits) / sizeof(splits[0]))

/*
 * A data frame's first bytes come alone, the rest after: the conn reads
 * only what its header and prefix miss, and all of the payload lands,
 * none of it through the read buffer (a 64 KiB read would have brought
 * most of it there, to be copied).
 */
START_TEST(test_conn_land_split_header)
{
    static const size_t lens[] = {100, 256 << 10};
    for (size_t j = 0; j < 2; j++) {
        struct t t;
        t_init(&t);
        size_t n, at = splits[_i];
        uint8_t *f = data_frame(7, lens[j], &n);
        put(&t, f, at);
        run_bytes(&t, at);
        ck_assert_int_eq(t.begins, 0);
        put(&t, f + at, n - at);
        run_events(&t, 1);
        ck_assert_uint_eq(t.nev, 1);
        check_event(&t, 0, 'L', 7, lens[j]);
        ck_assert_uint_eq(t.ev[0].copied, 0);
        ck_assert_uint_eq(t.c->frames_landed, 1);
        ck_assert_uint_eq(t.c->bytes_in, n);
        /* The read buffer did not grow to hold the payload it never got. */
        ck_assert_uint_le(t.c->rd.cap, 65536);
        free(f);
        t_fini(&t, 1);
    }
}
END_TEST

/*
 * Between frames a read takes at most FIRST_READ bytes: a data frame of
 * that size or less comes whole (on_data), a larger one lands with what
 * that read brought of its payload copied.
 */
START_TEST(test_conn_land_first_read)
{
    static const size_t frames[] = {PR_FRAME_HDR_LEN + PREFIX,
                                    FIRST_READ - 1,
                                    FIRST_READ,
                                    FIRST_READ + 1,
                                    FIRST_READ + 4,
                                    3u << 20};
    struct t t;
    t_init(&t);
    size_t landed = 0, total = 0;
    for (uint32_t k = 0; k < 6; k++) {
        size_t n, len = frames[k] - PR_FRAME_HDR_LEN - PREFIX;
        uint8_t *f = data_frame(k, len, &n);
        put(&t, f, n);
        total += n;
        run_events(&t, k + 1);
        /* One frame at a time: each read begins one. */
        ck_assert_uint_eq(t.c->bytes_in, total);
        if (n <= FIRST_READ) {
            check_event(&t, k, 'D', k, len);
        } else {
            check_event(&t, k, 'L', k, len);
            ck_assert_uint_eq(t.ev[k].copied,
                              FIRST_READ - PR_FRAME_HDR_LEN - PREFIX);
            landed++;
        }
        ck_assert_uint_eq(t.c->frames_landed, landed);
        free(f);
    }
    ck_assert_uint_eq(landed, 3);
    t_fini(&t, 1);
}
END_TEST

/*
 * A socket that holds more than the conn's read budget (read_burst, 16
 * KiB here; PR_CONN_READ_BURST in the daemons) is read in turns: a read
 * stops at the budget, which libuv hears as UV_ENOBUFS, and the rest
 * comes in the next loop turns, the conn open all along. A 192 KiB
 * frame written before the loop runs, landing, and a ping behind it
 * arrive whole and in order, and the reads stopped at the budget at
 * least 4 times (all of it in the socket at once: 11).
 */
START_TEST(test_conn_land_read_budget_yields)
{
    struct t t;
    t_init(&t);
    t.c->read_burst = 16u << 10;
    size_t n, pn;
    uint8_t *f = data_frame(1, 192u << 10, &n);
    uint8_t *p = ping_frame(7, &pn);
    put(&t, f, n);
    put(&t, p, pn);
    run_events(&t, 2);
    check_event(&t, 0, 'L', 1, 192u << 10);
    check_event(&t, 1, 'M', 7, 0);
    ck_assert_uint_eq(t.c->bytes_in, n + pn);
    ck_assert_uint_ge(t.c->read_yields, 4);
    ck_assert_int_eq(t.closes, 0);
    free(f);
    free(p);
    t_fini(&t, 1);
}
END_TEST

/*
 * pr_conn_wipe_msg from on_msg (a trainer's Hello, which carries a job's
 * key): the frame's payload is zeroed in the read buffer once on_msg
 * returned, and only it: the ping that came in the same read behind it
 * is handed over whole and its bytes stay. Without the call the first
 * one's bytes stay there too: what the scan sees.
 */
static int in_read_buffer(const struct pr_conn *c, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + n <= c->rd.cap; i++)
        if (memcmp(c->rd.buf + i, p, n) == 0)
            return 1;
    return 0;
}

START_TEST(test_conn_land_wipe_msg)
{
    for (int wipe = 0; wipe < 2; wipe++) {
        struct t t;
        t_init(&t);
        t.wipe = wipe ? 0x5eed5eed5eed5eedULL : 0;
        size_t pn, qn;
        uint8_t *p = ping_frame(0x5eed5eed5eed5eedULL, &pn);
        uint8_t *q = ping_frame(0x7117711771177117ULL, &qn);
        uint8_t both[256];
        ck_assert_uint_le(pn + qn, sizeof(both));
        memcpy(both, p, pn);
        memcpy(both + pn, q, qn);
        put(&t, both, pn + qn);
        run_events(&t, 2);
        check_event(&t, 0, 'M', 0x5eed5eed, 0);
        check_event(&t, 1, 'M', 0x71177117, 0);
        ck_assert_int_eq(
            in_read_buffer(t.c, p + PR_FRAME_HDR_LEN, pn - PR_FRAME_HDR_LEN),
            !wipe);
        ck_assert(
            in_read_buffer(t.c, q + PR_FRAME_HDR_LEN, qn - PR_FRAME_HDR_LEN));
        ck_assert_int_eq(t.c->wipe_msg, 0);
        free(p);
        free(q);
        t_fini(&t, 1);
    }
}
END_TEST

/*
 * A control message reads as usual, even split: once its header is in,
 * the next read takes up to 64 KiB, so a data frame that follows it in
 * the same write comes whole with it.
 */
START_TEST(test_conn_land_split_control)
{
    struct t t;
    t_init(&t);
    size_t pn, dn;
    uint8_t *p = ping_frame(42, &pn);
    uint8_t *d = data_frame(1, 10000, &dn);
    size_t at = _i ? PR_FRAME_HDR_LEN : 3;
    uint8_t *both = malloc(pn + dn);
    ck_assert_ptr_nonnull(both);
    memcpy(both, p, pn);
    memcpy(both + pn, d, dn);
    put(&t, both, at);
    run_bytes(&t, at);
    put(&t, both + at, pn + dn - at);
    run_events(&t, 2);
    check_event(&t, 0, 'M', 42, 0);
    if (_i) {
        check_event(&t, 1, 'D', 1, 10000);
        ck_assert_uint_eq(t.c->frames_landed, 0);
    } else {
        /* Inside the header, the type is not known yet: it may land. */
        ck_assert(t.ev[1].kind == 'D' || t.ev[1].kind == 'L');
        check_event(&t, 1, t.ev[1].kind, 1, 10000);
    }
    free(both);
    free(p);
    free(d);
    t_fini(&t, 1);
}
END_TEST

/*
 * Control messages and data frames of many sizes in one stream: each
 * comes once, in order, with its bytes; frames too large for any one
 * read land, and frames_landed counts every landing.
 */
/*
 * _i: 0 the loop reads all; 1 an I/O thread reads the large payloads; 2
 * the thread is there, switched off: the loop reads all again.
 */
START_TEST(test_conn_land_mixed)
{
    static const struct {
        char kind;
        size_t len; /* data: payload after the prefix */
    } seq[] = {
        {'M', 0},     {'D', 0},       {'M', 0},       {'D', 1},
        {'D', 4000},  {'M', 0},       {'D', 4049},    {'D', 70000},
        {'M', 0},     {'D', 3 << 20}, {'D', 5},       {'M', 0},
        {'D', 65536}, {'D', 12345},   {'D', 1 << 20}, {'M', 0},
    };
    const size_t nseq = sizeof(seq) / sizeof(seq[0]);
    struct t t;
    t_init(&t);
    if (_i > 0)
        t_io(&t, t.c);
    if (_i == 2)
        pr_conn_io_set_on(t.io, 0);
    size_t cap = 0;
    for (size_t i = 0; i < nseq; i++)
        cap += PR_FRAME_HDR_LEN + PREFIX + seq[i].len + 64;
    uint8_t *all = malloc(cap);
    ck_assert_ptr_nonnull(all);
    size_t off = 0;
    for (uint32_t i = 0; i < nseq; i++) {
        size_t n;
        uint8_t *f = seq[i].kind == 'M' ? ping_frame(1000 + i, &n)
                                        : data_frame(i, seq[i].len, &n);
        memcpy(all + off, f, n);
        off += n;
        free(f);
    }
    /* In pieces that end anywhere: inside headers, prefixes, payloads. */
    for (size_t pos = 0, step = 1; pos < off; pos += step, step = step * 7 + 3)
        put(&t, all + pos, pos + step > off ? off - pos : step);
    run_events(&t, nseq);
    ck_assert_uint_eq(t.nev, nseq);
    size_t landed = 0;
    for (uint32_t i = 0; i < nseq; i++) {
        char kind = t.ev[i].kind;
        if (seq[i].kind == 'M') {
            check_event(&t, i, 'M', 1000 + i, 0);
            continue;
        }
        ck_assert_msg(kind == 'D' || kind == 'L', "event %u: %c", i, kind);
        check_event(&t, i, kind, i, seq[i].len);
        /* No read holds more than 64 KiB: larger frames must land. */
        if (PR_FRAME_HDR_LEN + PREFIX + seq[i].len > 65536)
            ck_assert_int_eq(kind, 'L');
        landed += kind == 'L';
    }
    ck_assert_uint_eq(t.c->frames_landed, landed);
    ck_assert_uint_eq(t.c->bytes_in, off);
    /*
     * The thread read the rest of every payload of 64 KiB or more left
     * when its landing began (3 MiB, 1 MiB, 70000 and 65536 bytes: at
     * least the whole of the two largest), and nothing when off.
     */
    if (_i == 1) {
        ck_assert_uint_ge(t.c->io_ops, 2);
        ck_assert_uint_ge(pr_conn_io_read(t.io),
                          (3u << 20) + (1u << 20) - 2 * FIRST_READ);
    } else {
        ck_assert_uint_eq(t.c->io_ops, 0);
        ck_assert_uint_eq(t.io ? pr_conn_io_read(t.io) : 0, 0);
    }
    free(all);
    t_fini(&t, 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The owner's answers                                                  */

/*
 * A frame the owner did not place comes whole, and the owner is asked
 * once for it however many reads it takes; the next frame lands again.
 */
START_TEST(test_conn_land_refused_comes_whole)
{
    struct t t;
    t_init(&t);
    if (_i)
        t_io(&t, t.c); /* the refused frame is the loop's all the same */
    t.refuse_k = 0;
    size_t n0, n1;
    uint8_t *f0 = data_frame(0, 3 << 20, &n0);
    uint8_t *f1 = data_frame(1, 200000, &n1);
    put(&t, f0, n0);
    put(&t, f1, n1);
    run_events(&t, 2);
    ck_assert_int_eq(t.begins, 2);
    check_event(&t, 0, 'D', 0, 3 << 20);
    check_event(&t, 1, 'L', 1, 200000);
    ck_assert_uint_eq(t.c->frames_landed, 1);
    free(f0);
    free(f1);
    t_fini(&t, 1);
}
END_TEST

/* on_data_begin < 0 closes the conn with it; no landing to end. */
START_TEST(test_conn_land_begin_error_closes)
{
    struct t t;
    t_init(&t);
    t.begin_rc = -EPROTO;
    size_t n;
    uint8_t *f = data_frame(0, 100000, &n);
    put(&t, f, n);
    run_until(&t, closed);
    ck_assert_int_eq(t.close_status, -EPROTO);
    ck_assert_int_eq(t.begins, 1);
    ck_assert_int_eq(t.ends, 0);
    ck_assert_uint_eq(t.nev, 0);
    free(f);
    t_fini(&t, 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Landings cut short                                                   */

static int began(struct t *t)
{
    return t->begins > 0;
}

/* The I/O thread holds the landing's read. */
static int io_reading(struct t *t)
{
    return t->c && t->c->io_rx;
}

/*
 * Until half the frame is in: the conn's count, or, with an I/O thread,
 * the thread holding the read of the rest (its bytes are counted when
 * it is done).
 */
static void run_half(struct t *t, size_t half)
{
    run_until(t, began);
    if (t->io)
        run_until(t, io_reading);
    else
        run_bytes(t, half);
}

/* The peer closes inside the payload: the landing ends once, < 0. */
START_TEST(test_conn_land_peer_closes_mid_payload)
{
    struct t t;
    t_init(&t);
    size_t n;
    uint8_t *f = data_frame(3, 1 << 20, &n);
    if (_i)
        t_io(&t, t.c);
    put(&t, f, n / 2);
    run_half(&t, n / 2);
    w_close(&t);
    run_until(&t, closed);
    ck_assert_int_eq(t.ends, 1);
    ck_assert_uint_eq(t.nev, 1);
    ck_assert_int_eq(t.ev[0].kind, 'X');
    ck_assert_int_lt(t.ev[0].status, 0);
    ck_assert_int_eq(t.close_status, 0); /* an orderly EOF */
    free(f);
    t_fini(&t, 1);
}
END_TEST

/*
 * This side closes inside the payload (pr_conn_close, or detached from
 * its owner: _i odd): the landing ends with an error before the call
 * returns, and no byte lands after, also when an I/O thread held the
 * read (_i >= 2; under ASan a byte written to the freed landing fails).
 */
START_TEST(test_conn_land_local_close_mid_payload)
{
    struct t t;
    t_init(&t);
    if (_i >= 2)
        t_io(&t, t.c);
    size_t n;
    uint8_t *f = data_frame(4, 1 << 20, &n);
    put(&t, f, n / 2);
    run_half(&t, n / 2);
    struct pr_conn *c = t.c;
    int detach = _i % 2;
    if (detach) {
        pr_conn_detach_close(c);
        t.c = NULL;
    } else {
        pr_conn_close(c, -ETIMEDOUT);
    }
    ck_assert_int_eq(t.ends, 1);
    ck_assert_int_eq(t.ev[0].kind, 'X');
    ck_assert_int_eq(t.ev[0].status, detach ? -ECANCELED : -ETIMEDOUT);
    /* The rest of the frame, written now, goes nowhere (or fails). */
    put(&t, f + n / 2, n - n / 2);
    uv_run(&t.loop, UV_RUN_NOWAIT);
    free(f);
    t_fini(&t, detach ? 0 : 1);
    ck_assert_int_eq(t.ends, 1);
    if (!detach)
        ck_assert_int_eq(t.close_status, -ETIMEDOUT);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Written by the I/O thread                                            */

static int wc_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    (void)c;
    (void)m;
    return 0;
}

static void wc_on_close(struct pr_conn *c, int status)
{
    struct t *t = c->owner;
    (void)status;
    t->wc_closes++;
    t->cb_at_close = t->ncb;
    t->wc = NULL;
}

static const struct pr_conn_ops writer_ops = {.on_msg = wc_on_msg,
                                              .on_close = wc_on_close};

/* The writer's end is a conn (t->wc) with an I/O thread, not t->w. */
static void t_init_writer(struct t *t)
{
    t_init(t);
    /*
     * Small socket buffers, whatever the host's defaults: a 1 MiB frame
     * then never fits in them whole (test_conn_land_io_close_reports_
     * writes relies on it).
     */
    int small = 64 << 10;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(
            setsockopt(t->fds[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)),
            0);
        ck_assert_int_eq(
            setsockopt(t->fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)),
            0);
    }
    /* t->w keeps fds[1] open: the conn writes a duplicate of it. */
    int fd = dup(t->fds[1]);
    ck_assert_int_ge(fd, 0);
    t->wc = pr_conn_create_pipe(&t->loop, MAX_FRAME, &writer_ops, t);
    ck_assert_ptr_nonnull(t->wc);
    ck_assert_int_eq(uv_pipe_open(&t->wc->h.pipe, fd), 0);
    snprintf(t->wc->name, sizeof(t->wc->name), "test writer");
    ck_assert_int_eq(pr_conn_start(t->wc), 0);
    t_io(t, t->wc);
}

struct wcb {
    struct t *t;
    int k;
};

static void wc_write_cb(void *arg, int status)
{
    struct wcb *w = arg;
    struct t *t = w->t;
    ck_assert_uint_lt(t->ncb, MAXEV);
    t->cb_order[t->ncb] = w->k;
    t->cb_status[t->ncb++] = status;
    free(w);
}

/* Data frame k (len payload bytes after the prefix) through t->wc. */
static void wc_send(struct t *t, uint32_t k, size_t len, uint8_t **keep)
{
    size_t n;
    uint8_t *f = data_frame(k, len, &n);
    struct wcb *w = malloc(sizeof(*w));
    ck_assert_ptr_nonnull(w);
    *w = (struct wcb){.t = t, .k = (int)k};
    ck_assert_int_eq(pr_conn_send_data(t->wc, f + PR_FRAME_HDR_LEN, PREFIX,
                                       f + PR_FRAME_HDR_LEN + PREFIX, len,
                                       wc_write_cb, w),
                     0);
    *keep = f; /* the payload lives until its callback */
}

static void wc_ping(struct t *t, uint64_t nonce)
{
    Pr__V1__Ping ping = PR__V1__PING__INIT;
    ping.nonce = nonce;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &ping);
    ck_assert_int_eq(pr_conn_send(t->wc, &m), 0);
}

static int wc_idle(struct t *t)
{
    return t->wc && t->wc->io_tx_n == 0;
}

/*
 * A large frame goes to the thread, and what follows it while the thread
 * holds any write goes there too, a message included, so that the peer
 * reads all in the order given; once the thread is idle a message goes
 * by the loop again. Every byte the thread wrote is counted.
 */
START_TEST(test_conn_land_io_writes_in_order)
{
    struct t t;
    t_init_writer(&t);
    uint8_t *keep[3];
    wc_send(&t, 0, 1u << 20, &keep[0]);
    ck_assert_uint_eq(t.wc->io_tx_n, 1);
    wc_ping(&t, 100); /* behind frame 0, on the thread */
    wc_send(&t, 1, 100, &keep[1]);
    wc_send(&t, 2, 300u << 10, &keep[2]);
    ck_assert_uint_eq(t.wc->io_tx_n, 4);
    size_t thread_bytes = pr_conn_write_queue(t.wc);
    run_events(&t, 4);
    run_until(&t, wc_idle);
    wc_ping(&t, 101); /* the thread idle: by the loop */
    ck_assert_uint_eq(t.wc->io_tx_n, 0);
    run_events(&t, 5);
    check_event(&t, 0, 'L', 0, 1u << 20);
    check_event(&t, 1, 'M', 100, 0);
    check_event(&t, 2, 'D', 1, 100);
    check_event(&t, 3, 'L', 2, 300u << 10);
    check_event(&t, 4, 'M', 101, 0);
    ck_assert_uint_eq(t.ncb, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(t.cb_order[i], i);
        ck_assert_int_eq(t.cb_status[i], 0);
    }
    ck_assert_uint_eq(t.wc->io_ops, 4);
    ck_assert_uint_eq(pr_conn_io_written(t.io), thread_bytes);
    ck_assert_uint_eq(pr_conn_io_read(t.io), 0);
    for (int i = 0; i < 3; i++)
        free(keep[i]);
    t_fini(&t, 1);
    ck_assert_int_eq(t.wc_closes, 1);
}
END_TEST

static int wc_closed(struct t *t)
{
    return t->wc_closes > 0;
}

static int wc_stuck(struct t *t)
{
    return t->wc && t->wc->io_tx_n == 4 && t->c->bytes_in == 0 &&
           t->wc->io_slot != NULL;
}

/*
 * The peer reads nothing: the thread holds the writes it cannot finish,
 * and a close takes them back; each callback runs once, with an error,
 * in the order given and before on_close, as libuv reports the writes a
 * close cut short.
 */
START_TEST(test_conn_land_io_close_reports_writes)
{
    struct t t;
    t_init_writer(&t);
    uv_read_stop(&t.c->h.stream); /* the peer stops reading */
    uint8_t *keep[4];
    for (uint32_t k = 0; k < 4; k++)
        wc_send(&t, k, 1u << 20, &keep[k]);
    /* A socket pair holds far less than 4 MiB: the thread is stuck. */
    run_until(&t, wc_stuck);
    for (int i = 0; i < 20; i++)
        uv_run(&t.loop, UV_RUN_NOWAIT);
    ck_assert_uint_eq(t.ncb, 0);
    pr_conn_close(t.wc, 0);
    ck_assert_uint_eq(t.ncb, 0); /* reported by the close, later */
    run_until(&t, wc_closed);
    ck_assert_uint_eq(t.ncb, 4);
    ck_assert_uint_eq(t.cb_at_close, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(t.cb_order[i], i);
        ck_assert_int_eq(t.cb_status[i], -ECANCELED);
    }
    for (int i = 0; i < 4; i++)
        free(keep[i]);
    t_fini(&t, 1);
}
END_TEST

/* The peer's end holds n bytes, unread. */
static void wait_unread(struct t *t, size_t n)
{
    for (int i = 0; i < 2000; i++) {
        int q = 0;
        ck_assert_int_eq(ioctl(t->fds[0], FIONREAD, &q), 0);
        if ((size_t)q >= n)
            return;
        usleep(1000);
    }
    ck_abort_msg("the peer's end never held %zu bytes", n);
}

/*
 * A write the thread finished and the loop has not heard of yet, when
 * the conn closes: the close takes it from the thread's list of ended
 * writes and reports it as it ended (0), before on_close. The loop does
 * not run between the write and the close.
 */
START_TEST(test_conn_land_io_close_reports_done_write)
{
    struct t t;
    t_init_writer(&t);
    uv_read_stop(&t.c->h.stream); /* the peer's end keeps what comes */
    uint8_t *keep;
    size_t len = 80u << 10;
    wc_send(&t, 0, len, &keep);
    ck_assert_uint_eq(t.wc->io_tx_n, 1);
    wait_unread(&t, PR_FRAME_HDR_LEN + PREFIX + len);
    usleep(20000); /* from its last byte to its end on the thread's list */
    pr_conn_close(t.wc, 0);
    run_until(&t, wc_closed);
    ck_assert_uint_eq(t.ncb, 1);
    ck_assert_uint_eq(t.cb_at_close, 1);
    ck_assert_int_eq(t.cb_status[0], 0);
    free(keep);
    t_fini(&t, 1);
}
END_TEST

/*
 * A write fails (the peer's end is gone): it ends with that error, and
 * every write behind it too, or is taken back by the close that the
 * error causes (whichever comes first); each callback once, in order.
 */
START_TEST(test_conn_land_io_write_error_fails_the_rest)
{
    struct t t;
    t_init_writer(&t);
    /* The write's failure, not a read's EOF, is what closes the writer. */
    uv_read_stop(&t.wc->h.stream);
    /* Both of the peer's descriptors: the pair is broken. */
    pr_conn_close(t.c, 0);
    w_close(&t);
    run_until(&t, closed);
    uint8_t *keep[3];
    for (uint32_t k = 0; k < 3; k++)
        wc_send(&t, k, 256u << 10, &keep[k]);
    run_until(&t, wc_closed);
    ck_assert_uint_eq(t.ncb, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(t.cb_order[i], i);
        if (i == 0)
            ck_assert_int_eq(t.cb_status[i], -EPIPE);
        else
            ck_assert(t.cb_status[i] == -EPIPE || t.cb_status[i] == -ECANCELED);
    }
    for (int i = 0; i < 3; i++)
        free(keep[i]);
    t_fini(&t, 1);
}
END_TEST

static Suite *conn_land_suite(void)
{
    Suite *s = suite_create("conn_land");
    TCase *tc = tcase_create("reads");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_conn_land_split_header, 0, NSPLITS);
    tcase_add_test(tc, test_conn_land_first_read);
    tcase_add_loop_test(tc, test_conn_land_split_control, 0, 2);
    tcase_add_loop_test(tc, test_conn_land_mixed, 0, 3);
    suite_add_tcase(s, tc);

    tc = tcase_create("owner");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_conn_land_refused_comes_whole, 0, 2);
    tcase_add_test(tc, test_conn_land_read_budget_yields);
    tcase_add_test(tc, test_conn_land_wipe_msg);
    tcase_add_test(tc, test_conn_land_begin_error_closes);
    tcase_add_loop_test(tc, test_conn_land_peer_closes_mid_payload, 0, 2);
    tcase_add_loop_test(tc, test_conn_land_local_close_mid_payload, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("written by the I/O thread");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_conn_land_io_writes_in_order);
    tcase_add_test(tc, test_conn_land_io_close_reports_writes);
    tcase_add_test(tc, test_conn_land_io_close_reports_done_write);
    tcase_add_test(tc, test_conn_land_io_write_error_fails_the_rest);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Closing inside a frame warns; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    /* Writes into an end the conn closed fail with EPIPE, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    return check_run(conn_land_suite());
}
