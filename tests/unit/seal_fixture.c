/* SPDX-License-Identifier: MIT */
#include "tests/unit/seal_fixture.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/base/log.h"
#include "daemon/base/seal.h"
#include "proto/frame.h"
#include "tests/check_run.h"

#define LIMIT_MS 10000
#define T        PR_SEAL_TAG_LEN

uint8_t sp_pat(uint32_t k, size_t i)
{
    return (uint8_t)(((i + 1) * 2654435761u >> 11) + k * 37 + (i >> 12));
}

static int pat_ok(uint32_t k, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != sp_pat(k, i))
            return 0;
    return 1;
}

static struct sp_side *side_of(struct pr_conn *c)
{
    return c->owner;
}

static void record(struct sp_side *d, struct sp_event e)
{
    ck_assert_uint_lt(d->nev, SP_MAXEV);
    d->ev[d->nev++] = e;
}

/* ------------------------------------------------------------------ */
/* The handshake, as the daemons run it                                 */

static int on_challenge(struct sp_side *d, const Pr__V1__Challenge *ch)
{
    struct sp *t = d->t;
    const struct pr_auth_key *key = t->keyed ? &t->key : NULL;
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why = NULL;
    if (t->late_transcript)
        ck_assert_int_eq(pr_conn_transcript_start(d->c), 0);
    int rc = pr_auth_answer(key, ch, d->s_nonce, d->c_nonce, buf, &len,
                            &d->cipher, &why);
    ck_assert_msg(rc == 0, "answer: %d %s", rc, why ? why : "");
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.auth.data = buf;
    h.auth.len = len;
    h.seal = d->cipher;
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &h);
    return pr_conn_send(d->c, &m);
}

static int on_hello(struct sp_side *d, const Pr__V1__Hello *h)
{
    struct sp *t = d->t;
    const struct pr_auth_key *key = t->keyed ? &t->key : NULL;
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen;
    const char *why = NULL;
    int rc = pr_auth_check_hello(key, d->s_nonce, &h->auth, h->seal, proof,
                                 &plen, &why);
    ck_assert_msg(rc == 0, "hello: %d %s", rc, why ? why : "");
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.auth.data = proof;
    w.auth.len = plen;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    ck_assert_int_eq(pr_conn_send(d->c, &m), 0);
    if (key) {
        memcpy(d->c_nonce, h->auth.data, PR_AUTH_NONCE_LEN);
        d->cipher = h->seal;
        ck_assert_int_eq(
            pr_conn_seal(d->c, h->seal, key, 'S', d->s_nonce, d->c_nonce), 0);
    }
    d->up = 1;
    return 0;
}

static int on_welcome(struct sp_side *d, const Pr__V1__Welcome *w)
{
    struct sp *t = d->t;
    const struct pr_auth_key *key = t->keyed ? &t->key : NULL;
    const char *why = NULL;
    ck_assert_int_eq(
        pr_auth_check_welcome(key, d->c_nonce, d->s_nonce, &w->auth, &why), 0);
    if (key)
        ck_assert_int_eq(
            pr_conn_seal(d->c, d->cipher, key, 'C', d->s_nonce, d->c_nonce), 0);
    d->up = 1;
    return 0;
}

static int t_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct sp_side *d = side_of(c);
    switch (m->body_case) {
    case PR__V1__MSG__BODY_CHALLENGE:
        ck_assert_int_eq(d->role, 'C');
        return on_challenge(d, m->challenge);
    case PR__V1__MSG__BODY_HELLO:
        ck_assert_int_eq(d->role, 'S');
        return on_hello(d, m->hello);
    case PR__V1__MSG__BODY_WELCOME:
        ck_assert_int_eq(d->role, 'C');
        return on_welcome(d, m->welcome);
    case PR__V1__MSG__BODY_PING:
        ck_assert(d->up);
        record(d,
               (struct sp_event){.kind = 'M', .k = (uint32_t)m->ping->nonce});
        return 0;
    case PR__V1__MSG__BODY_ERROR:
        record(d, (struct sp_event){.kind = 'E',
                                    .k = (uint32_t)m->error->code,
                                    .ok = m->error->reason &&
                                          strcmp(m->error->reason, SP_MARKER) ==
                                              0});
        return 0;
    default:
        ck_abort_msg("unexpected message %s", pr_msg_name(m));
        return -EPROTO;
    }
}

/* ------------------------------------------------------------------ */
/* Data frames, whole or landed                                         */

static uint32_t prefix_k(const uint8_t *prefix)
{
    uint32_t k;
    memcpy(&k, prefix, sizeof(k));
    return k;
}

static int t_on_data(struct pr_conn *c, const uint8_t *p, size_t n)
{
    struct sp_side *d = side_of(c);
    ck_assert_uint_ge(n, SP_PREFIX);
    uint32_t k = prefix_k(p);
    int ok = pat_ok(k, p + SP_PREFIX, n - SP_PREFIX);
    for (size_t i = sizeof(k); i < SP_PREFIX; i++)
        ok &= p[i] == 0xab;
    record(d, (struct sp_event){
                  .kind = 'D', .k = k, .len = n - SP_PREFIX, .ok = ok});
    return 0;
}

static void t_on_close(struct pr_conn *c, int status)
{
    struct sp_side *d = side_of(c);
    d->closes++;
    d->close_status = status;
    d->c = NULL;
}

struct landing {
    uint32_t k;
    size_t len;
    uint8_t *buf;
};

static int t_on_data_begin(struct pr_conn *c, const uint8_t *prefix,
                           size_t rest, void **dst, void **token)
{
    struct sp_side *d = side_of(c);
    for (size_t i = sizeof(uint32_t); i < SP_PREFIX; i++)
        ck_assert_uint_eq(prefix[i], 0xab); /* opened before it is used */
    if (d->refuse_odd && prefix_k(prefix) % 2)
        return 0;
    d->begins++;
    struct landing *l = malloc(sizeof(*l));
    ck_assert_ptr_nonnull(l);
    l->k = prefix_k(prefix);
    l->len = rest;
    l->buf = malloc(rest ? rest : 1);
    ck_assert_ptr_nonnull(l->buf);
    memset(l->buf, 0xee, rest);
    *dst = l->buf;
    *token = l;
    record(d, (struct sp_event){.kind = 'L',
                                .k = l->k,
                                .len = rest,
                                .status = 1,
                                .in_place = d->in_place});
    return d->in_place ? 2 : 1;
}

static void t_on_data_end(struct pr_conn *c, void *token, int status)
{
    struct sp_side *d = side_of(c);
    struct landing *l = token;
    d->ends++;
    struct sp_event *e = NULL;
    for (size_t i = d->nev; i > 0 && !e; i--)
        if (d->ev[i - 1].kind == 'L' && d->ev[i - 1].status == 1)
            e = &d->ev[i - 1];
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->k, l->k);
    e->status = status;
    e->ok = status == 0 && pat_ok(l->k, l->buf, l->len);
    if (status < 0) {
        e->kind = 'X';
        e->untouched = 1;
        for (size_t i = 0; i < l->len; i++)
            e->untouched &= l->buf[i] == 0xee;
    }
    free(l->buf);
    free(l);
}

const struct pr_conn_ops sp_whole_ops = {
    .on_msg = t_on_msg,
    .on_data = t_on_data,
    .on_close = t_on_close,
};

const struct pr_conn_ops sp_land_ops = {
    .on_msg = t_on_msg,
    .on_data = t_on_data,
    .on_close = t_on_close,
    .data_prefix = SP_PREFIX,
    .on_data_begin = t_on_data_begin,
    .on_data_end = t_on_data_end,
};

/* ------------------------------------------------------------------ */
/* The relay between the two conns' socket pairs                        */

static void relay_close(struct sp *t)
{
    if (!t->relay_open)
        return;
    t->relay_open = 0;
    uv_close((uv_handle_t *)&t->relay[0], NULL);
    uv_close((uv_handle_t *)&t->relay[1], NULL);
}

static void relay_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct sp *t = h->data;
    int dir = h == (uv_handle_t *)&t->relay[SP_S_TO_C] ? SP_S_TO_C : SP_C_TO_S;
    (void)hint;
    buf->base = (char *)t->rbuf[dir];
    buf->len = sizeof(t->rbuf[dir]);
}

static void relay_written(uv_write_t *req, int status)
{
    struct sp *t = req->data;
    (void)status;
    t->writes_out--;
    free(req);
}

/* n bytes at p on to the other side (copied). */
static void relay_put(struct sp *t, uv_stream_t *to, const uint8_t *p, size_t n)
{
    uv_write_t *req = malloc(sizeof(*req) + n);
    ck_assert_ptr_nonnull(req);
    memcpy(req + 1, p, n);
    req->data = t;
    uv_buf_t b = uv_buf_init((char *)(req + 1), (unsigned)n);
    ck_assert_int_eq(uv_write(req, to, &b, 1, relay_written), 0);
    t->writes_out++;
}

static void relay_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct sp *t = s->data;
    int dir = s == (uv_stream_t *)&t->relay[SP_S_TO_C] ? SP_S_TO_C : SP_C_TO_S;
    if (nread < 0) {
        /* One side went: the other sees its end of the wire go too. */
        relay_close(t);
        return;
    }
    if (nread == 0)
        return;
    struct sp_wire *w = &t->wire[dir];
    size_t n = (size_t)nread;
    if (w->len + n > w->cap) {
        while (w->len + n > w->cap)
            w->cap = w->cap ? 2 * w->cap : 1 << 20;
        w->b = realloc(w->b, w->cap);
        ck_assert_ptr_nonnull(w->b);
    }
    uint8_t *p = w->b + w->len;
    memcpy(p, buf->base, n);
    size_t at = w->len;
    if (w->flip_at >= at && w->flip_at < at + n)
        p[w->flip_at - at] ^= 0x10;
    w->len += n;
    uv_stream_t *to =
        (uv_stream_t *)&t->relay[dir == SP_S_TO_C ? SP_C_TO_S : SP_S_TO_C];
    /* In runs: up to the next offset where something is done. */
    for (size_t i = 0; i < n;) {
        size_t end = at + n, o = at + i;
        const size_t marks[] = {w->drop_a, w->drop_b, w->copy_after};
        for (int j = 0; j < 3; j++)
            if (marks[j] > o && marks[j] < end)
                end = marks[j];
        if (o < w->drop_a || o >= w->drop_b)
            relay_put(t, to, p + i, end - o);
        if (end == w->copy_after)
            relay_put(t, to, w->b + w->copy_a, w->copy_b - w->copy_a);
        i = end - at;
    }
}

/* ------------------------------------------------------------------ */
/* Set-up, the loop, tear-down                                          */

static void limit_cb(uv_timer_t *h)
{
    struct sp *t = h->data;
    t->timed_out = 1;
    uv_stop(&t->loop);
}

static void side_init(struct sp *t, struct sp_side *d, char role,
                      const struct pr_conn_ops *ops, int fd, uv_pipe_t *relay,
                      int relay_fd)
{
    d->t = t;
    d->role = role;
    d->c = pr_conn_create_pipe(&t->loop, SP_MAX_FRAME, ops, d);
    ck_assert_ptr_nonnull(d->c);
    ck_assert_int_eq(uv_pipe_open(&d->c->h.pipe, fd), 0);
    snprintf(d->c->name, sizeof(d->c->name), "side %c", role);
    ck_assert_int_eq(uv_pipe_init(&t->loop, relay, 0), 0);
    ck_assert_int_eq(uv_pipe_open(relay, relay_fd), 0);
    relay->data = t;
    ck_assert_int_eq(
        uv_read_start((uv_stream_t *)relay, relay_alloc, relay_read), 0);
}

void sp_init(struct sp *t, uint32_t cipher, const struct pr_conn_ops *s_ops,
             const struct pr_conn_ops *c_ops, int late_transcript)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < PR_AUTH_KEY_LEN; i++)
        t->key.k[i] = (uint8_t)(3 * i + 11);
    t->key.seal = cipher;
    t->keyed = cipher != 0;
    t->late_transcript = late_transcript;
    for (int i = 0; i < 2; i++) {
        t->wire[i].flip_at = SIZE_MAX;
        t->wire[i].drop_a = t->wire[i].drop_b = SIZE_MAX;
        t->wire[i].copy_after = SIZE_MAX;
    }
    ck_assert_int_eq(uv_loop_init(&t->loop), 0);
    uv_timer_init(&t->loop, &t->limit);
    t->limit.data = t;
    uv_timer_start(&t->limit, limit_cb, LIMIT_MS, 0);
    uv_unref((uv_handle_t *)&t->limit);
    int sf[2], cf[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sf), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, cf), 0);
    side_init(t, &t->s, 'S', s_ops, sf[0], &t->relay[SP_S_TO_C], sf[1]);
    side_init(t, &t->c, 'C', c_ops, cf[0], &t->relay[SP_C_TO_S], cf[1]);
    t->relay_open = 1;
    if (t->keyed) {
        ck_assert_int_eq(pr_conn_transcript_start(t->s.c), 0);
        if (!late_transcript)
            ck_assert_int_eq(pr_conn_transcript_start(t->c.c), 0);
    }
    ck_assert_int_eq(pr_conn_start(t->s.c), 0);
    ck_assert_int_eq(pr_conn_start(t->c.c), 0);
    Pr__V1__Challenge ch;
    pr_auth_challenge(t->keyed ? &t->key : NULL, t->s.s_nonce, &ch);
    Pr__V1__Msg m = PR_MSG_OF(CHALLENGE, challenge, &ch);
    ck_assert_int_eq(pr_conn_send(t->s.c, &m), 0);
}

void sp_run_until(struct sp *t, int (*pred)(struct sp *t))
{
    while (!pred(t)) {
        ck_assert_msg(!t->timed_out, "time limit: the condition never held");
        uv_run(&t->loop, UV_RUN_ONCE);
    }
}

int sp_both_up(struct sp *t)
{
    return t->s.up && t->c.up;
}

static int got_events(struct sp *t)
{
    return t->want_side->nev >= t->want_events &&
           t->want_side->begins == t->want_side->ends;
}

void sp_run_events(struct sp *t, struct sp_side *d, size_t n)
{
    t->want_side = d;
    t->want_events = n;
    sp_run_until(t, got_events);
}

int sp_c_closed(struct sp *t)
{
    return t->c.closes > 0;
}

int sp_s_closed(struct sp *t)
{
    return t->s.closes > 0;
}

void sp_fini(struct sp *t)
{
    if (t->s.c)
        pr_conn_close(t->s.c, 0);
    if (t->c.c)
        pr_conn_close(t->c.c, 0);
    relay_close(t);
    uv_close((uv_handle_t *)&t->limit, NULL);
    ck_assert_int_eq(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(t->s.closes, 1);
    ck_assert_int_eq(t->c.closes, 1);
    ck_assert_uint_eq(t->writes_out, 0);
    ck_assert_int_eq(uv_loop_close(&t->loop), 0);
    /* Every landing begun ended, once. */
    ck_assert_int_eq(t->s.begins, t->s.ends);
    ck_assert_int_eq(t->c.begins, t->c.ends);
    free(t->wire[0].b);
    free(t->wire[1].b);
}

/* ------------------------------------------------------------------ */
/* What the sides send                                                  */

void sp_send_ping(struct sp_side *d, uint32_t nonce)
{
    Pr__V1__Ping ping = PR__V1__PING__INIT;
    ping.nonce = nonce;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &ping);
    ck_assert_int_eq(pr_conn_send(d->c, &m), 0);
}

size_t sp_ping_wire_len(uint32_t nonce)
{
    Pr__V1__Ping ping = PR__V1__PING__INIT;
    ping.nonce = nonce;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &ping);
    return PR_FRAME_HDR_LEN + pr__v1__msg__get_packed_size(&m) + T;
}

void sp_send_marker(struct sp_side *d)
{
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    e.code = 7;
    e.reason = SP_MARKER;
    Pr__V1__Msg m = PR_MSG_OF(ERROR, error, &e);
    ck_assert_int_eq(pr_conn_send(d->c, &m), 0);
}

static void data_sent(void *arg, int status)
{
    (void)status;
    free(arg);
}

void sp_send_data(struct sp_side *d, uint32_t k, size_t len)
{
    uint8_t prefix[SP_PREFIX];
    memset(prefix, 0xab, sizeof(prefix));
    memcpy(prefix, &k, sizeof(k));
    uint8_t *p = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < len; i++)
        p[i] = sp_pat(k, i);
    ck_assert_int_eq(
        pr_conn_send_data(d->c, prefix, SP_PREFIX, p, len, data_sent, p), 0);
}

size_t sp_data_wire_len(size_t len)
{
    return PR_FRAME_HDR_LEN + SP_PREFIX + T + len + T;
}

void sp_check_event(const struct sp_side *d, size_t i, char kind, uint32_t k,
                    size_t len)
{
    ck_assert_uint_lt(i, d->nev);
    const struct sp_event *e = &d->ev[i];
    ck_assert_msg(e->kind == kind && e->k == k, "event %zu: %c %u, want %c %u",
                  i, e->kind, e->k, kind, k);
    if (kind == 'D' || kind == 'L') {
        ck_assert_uint_eq(e->len, len);
        ck_assert_msg(e->ok, "event %zu (%c %u): bytes differ", i, kind, k);
    }
    if (kind == 'L')
        ck_assert_int_eq(e->status, 0);
}

int sp_main(struct Suite *s)
{
    if (sodium_init() < 0)
        return EXIT_FAILURE;
    pr_log_set_level(PR_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    return check_run(s);
}

static const uint32_t ciphers[] = {PR_SEAL_CHACHA20POLY1305, PR_SEAL_AES256GCM};
#define SP_NCIPHERS 2

uint32_t sp_cipher_of(int i)
{
    return pr_seal_ciphers() & ciphers[i] ? ciphers[i] : 0;
}
