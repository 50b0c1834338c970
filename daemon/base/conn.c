/* SPDX-License-Identifier: MIT */
#include "daemon/base/conn.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conn_int.h"
#include "daemon/base/conn_io.h"
#include "daemon/base/log.h"
#include "daemon/base/seal.h"

static const struct pr_conn_ops detached_ops;
static void land_abort(struct pr_conn *c, int status);

struct wreq {
    uv_write_t req;
    struct pr_conn *c;
    uint8_t *owned; /* frame bytes we allocated, or NULL */
    pr_conn_write_cb cb;
    void *arg;
    uint8_t hdr[PR_FRAME_HDR_LEN + 64];
};

struct creq {
    uv_connect_t req;
    struct pr_conn *c;
    void (*cb)(struct pr_conn *c, int status);
};

static void conn_init(struct pr_conn *c, size_t max_frame,
                      const struct pr_conn_ops *ops, void *owner)
{
    c->ops = ops;
    c->owner = owner;
    c->h.handle.data = c;
    c->read_burst = PR_CONN_READ_BURST;
    snprintf(c->name, sizeof(c->name), "?");
    (void)max_frame;
}

struct pr_conn *pr_conn_create_tcp(uv_loop_t *loop, size_t max_frame,
                                   const struct pr_conn_ops *ops, void *owner)
{
    struct pr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (pr_frame_reader_init(&c->rd, max_frame) < 0) {
        free(c);
        return NULL;
    }
    uv_tcp_init(loop, &c->h.tcp);
    conn_init(c, max_frame, ops, owner);
    return c;
}

struct pr_conn *pr_conn_create_pipe(uv_loop_t *loop, size_t max_frame,
                                    const struct pr_conn_ops *ops, void *owner)
{
    struct pr_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (pr_frame_reader_init(&c->rd, max_frame) < 0) {
        free(c);
        return NULL;
    }
    uv_pipe_init(loop, &c->h.pipe, 0);
    conn_init(c, max_frame, ops, owner);
    return c;
}

static void close_cb(uv_handle_t *h)
{
    struct pr_conn *c = h->data;
    pr_conn_io_left_report(c);
    if (c->ops->on_close)
        c->ops->on_close(c, c->status);
    if (c->wipe_rx && c->rd.buf)
        sodium_memzero(c->rd.buf, c->rd.cap);
    pr_frame_reader_fini(&c->rd);
    if (c->seal) {
        pr_seal_clear(c->seal);
        free(c->seal);
    }
    free(c->transcript);
    free(c->bounce);
    free(c->out);
    free(c);
}

void pr_conn_close(struct pr_conn *c, int status)
{
    if (c->closing)
        return;
    /* What waits in the buffer goes first (pr_conn_fail's Error). */
    pr_conn_flush_out(c);
    pr_conn_batch_unlink(c);
    c->batch = NULL;
    c->closing = 1;
    c->status = status;
    /* The thread lets go of the socket and the landing's memory first. */
    pr_conn_io_release(c);
    land_abort(c, status);
    uv_close(&c->h.handle, close_cb);
}

/*
 * Between frames, a conn whose data frames may land in place reads at
 * most this much: what a read brings of a payload beyond its prefix is
 * copied from the read buffer, and control messages fit.
 */
#define LAND_FIRST_READ 4096

/* A data frame's bytes before its payload: header, prefix (and its tag). */
static size_t land_head(const struct pr_conn *c)
{
    return PR_FRAME_HDR_LEN + c->ops->data_prefix +
           (c->seal ? PR_SEAL_TAG_LEN : 0);
}

/*
 * What the next read may take (at most `want`) while less than a header
 * and data prefix of a frame that may land in place is buffered. Between
 * frames, LAND_FIRST_READ. Inside a header or prefix, only the bytes it
 * still misses: the read then ends where the payload begins, and all of
 * the payload lands (a 64 KiB read would bring most of a chunk into the
 * read buffer, to be copied from there). A control message, once its
 * header says so, reads as usual.
 */
static size_t land_want(struct pr_conn *c, size_t want)
{
    size_t pending = pr_frame_reader_pending(&c->rd);
    size_t need = land_head(c);
    struct pr_frame_hdr fh;
    const uint8_t *p;
    size_t n;
    if (pending == 0)
        return want < LAND_FIRST_READ ? want : LAND_FIRST_READ;
    if (pending >= PR_FRAME_HDR_LEN &&
        (!pr_frame_reader_partial(&c->rd, &fh, &p, &n) ||
         fh.type != PR_FRAME_DATA))
        return want;
    return want < need - pending ? want : need - pending;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct pr_conn *c = h->data;
    void *p;
    size_t n;
    (void)hint;
    /* The budget spent (PR_CONN_READ_BURST): the loop's other handles. */
    if (c->burst >= c->read_burst) {
        c->burst = 0;
        c->yield = 1;
        c->read_yields++;
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    /*
     * A read takes up to the whole budget, whatever this readiness read
     * before it: the budget is checked between reads, so a chunk of the
     * budget's size still lands in one read after its header's.
     */
    if (c->land.active) {
        size_t left = c->land.len - c->land.got;
        buf->base = (char *)c->land.at + c->land.got;
        buf->len = left < c->read_burst ? left : c->read_burst;
        /* The payload is in: its tag, which follows it, next. */
        if (left == 0) {
            buf->base = (char *)c->land.tag + c->land.tag_got;
            buf->len = PR_SEAL_TAG_LEN - c->land.tag_got;
        }
        return;
    }
    /*
     * Reads of up to 64 KiB, but no more than one frame of this conn's
     * limit: a connection before its hello (4 KiB frames) then holds a
     * buffer of a few KiB, not 64, however many bytes it sends.
     */
    size_t want = c->rd.max_len + PR_FRAME_HDR_LEN;
    if (want > 65536)
        want = 65536;
    /* A frame that may still land in place: no more than it needs now. */
    int may_land = c->ops->on_data_begin && !c->land.refused &&
                   pr_frame_reader_pending(&c->rd) < land_head(c);
    if (may_land)
        want = land_want(c, want);
    /*
     * Such a frame's payload goes to its place, not here: the buffer need
     * not grow to hold it (a 1 MiB chunk would leave it at 2 MiB).
     */
    int rc = may_land ? pr_frame_reader_reserve_few(&c->rd, want, &p, &n)
                      : pr_frame_reader_reserve(&c->rd, want, &p, &n);
    if (rc < 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    if (may_land && n > want)
        n = want;
    if (n > c->read_burst)
        n = c->read_burst;
    buf->base = p;
    buf->len = n;
}

/*
 * A sealed record that did not open: logged; the errno to close with.
 * Only -EBADMSG is a record that does not authenticate.
 */
static int seal_failed(struct pr_conn *c, int rc, const char *what)
{
    if (rc == -EBADMSG) {
        c->auth_failed = 1;
        pr_warn("%s: %s failed authentication (altered, replayed, "
                "reordered or lost on the way): closing",
                c->name, what);
    } else if (rc == -EKEYEXPIRED) {
        pr_warn("%s: sealed link used up its record numbers: closing", c->name);
    } else {
        pr_err("%s: cannot open %s: %s: closing", c->name, what, strerror(-rc));
    }
    return rc;
}

/*
 * This side could not seal a record, or sealed one that will not go out:
 * its number is spent, and the peer would take the next one for
 * tampering. Logged; the connection is closed.
 */
int pr_conn_seal_lost(struct pr_conn *c, int rc, const char *what)
{
    pr_err("%s: cannot send %s sealed: %s: closing", c->name, what,
           strerror(-rc));
    pr_conn_close(c, rc);
    return rc;
}

/*
 * A whole frame of a sealed connection, opened in place at p: fh->len
 * becomes its clear payload's. A data frame's prefix record may be open
 * already (maybe_land), and its payload record moves down over the
 * prefix's tag, so the clear bytes are contiguous. 0, or < 0 (logged).
 */
static int open_frame(struct pr_conn *c, struct pr_frame_hdr *fh, uint8_t *p)
{
    const size_t T = PR_SEAL_TAG_LEN;
    uint8_t ad[PR_FRAME_HDR_LEN];
    int rc;
    pr_frame_hdr_encode(ad, fh->len, fh->type, fh->flags);
    if (fh->type != PR_FRAME_DATA) {
        if (fh->len < T)
            goto short_frame;
        size_t n = fh->len - T;
        rc = pr_seal_decrypt(c->seal, ad, p, n, p + n);
        if (rc < 0)
            return seal_failed(c, rc, "a message");
        fh->len = (uint32_t)n;
        return 0;
    }
    /* A data frame's flags say where its prefix record ends. */
    size_t split = fh->flags;
    if (fh->len < split + 2 * T)
        goto short_frame;
    if (!c->prefix_open) {
        rc = pr_seal_decrypt(c->seal, ad, p, split, p + split);
        if (rc < 0)
            return seal_failed(c, rc, "a chunk header");
    }
    c->prefix_open = 0;
    size_t rest = fh->len - split - 2 * T;
    uint8_t tag[PR_SEAL_TAG_LEN];
    memcpy(tag, p + split + T + rest, T);
    memmove(p + split, p + split + T, rest);
    rc = pr_seal_decrypt(c->seal, ad, p + split, rest, tag);
    if (rc < 0)
        return seal_failed(c, rc, "a chunk");
    fh->len = (uint32_t)(split + rest);
    return 0;
short_frame:
    pr_warn("%s: sealed frame of %u bytes is too short for its tags: "
            "closing",
            c->name, fh->len);
    return -EPROTO;
}

static int dispatch(struct pr_conn *c, const struct pr_frame_hdr *fh,
                    const uint8_t *payload)
{
    if (fh->type == PR_FRAME_DATA) {
        if (!c->ops->on_data) {
            pr_warn("%s: data frame on a control link: closing", c->name);
            return -EPROTO;
        }
        return c->ops->on_data(c, payload, fh->len);
    }
    Pr__V1__Msg *m = pr_msg_unpack(payload, fh->len);
    if (!m) {
        pr_warn("%s: frame of %u bytes is not a valid message: closing",
                c->name, fh->len);
        return -EPROTO;
    }
    int rc = c->ops->on_msg(c, m);
    pr_msg_free(m);
    return rc;
}

/*
 * The payload bytes of the frame being assembled that the reads brought
 * went to their place (the read buffer was bypassed): when it is all
 * there, the owner is told.
 */
static void landed_bytes(struct pr_conn *c, size_t n, uint64_t now_ns)
{
    /* alloc_cb never hands out a buffer across the payload and its tag. */
    if (c->land.got < c->land.len)
        c->land.got += n;
    else
        c->land.tag_got += n;
    if (c->land.got < c->land.len ||
        (c->seal && c->land.tag_got < PR_SEAL_TAG_LEN))
        return;
    pr_conn_land_done(c, now_ns);
}

/* All of the landing's bytes are in: opened if sealed, the owner told. */
void pr_conn_land_done(struct pr_conn *c, uint64_t now_ns)
{
    c->land.active = 0;
    int status = 0;
    /*
     * Opened in the bounce buffer, and copied to its place only once it
     * authenticated: the owner's memory (a trainer's tensor, maybe) never
     * holds ciphertext or bytes that failed. Memory the owner said nobody
     * reads before on_data_end (answer 2) is opened in place.
     */
    if (c->seal) {
        int rc = pr_seal_decrypt(c->seal, c->land.ad, c->land.at, c->land.len,
                                 c->land.tag);
        if (rc < 0)
            status = seal_failed(c, rc, "a chunk");
        else if (c->land.at != c->land.dst)
            memcpy(c->land.dst, c->land.at, c->land.len);
    }
    if (status == 0) {
        c->frames_landed++;
        c->last_rx_ms = uv_now(c->h.handle.loop);
        c->rx_frame_ns = now_ns - c->rx_start_ns;
        c->rx_start_ns = now_ns;
    }
    c->ops->on_data_end(c, c->land.token, status);
    if (status < 0)
        pr_conn_close(c, status);
}

/*
 * The reads so far end inside a data frame whose prefix is in: asks the
 * owner where the rest goes, moves what came of it already, and leaves
 * the read buffer empty. 0 (landing or not), or < 0 to close.
 */
static int maybe_land(struct pr_conn *c)
{
    const struct pr_conn_ops *ops = c->ops;
    struct pr_frame_hdr fh;
    const uint8_t *p;
    size_t n, pre = ops->data_prefix;
    size_t head = land_head(c) - PR_FRAME_HDR_LEN; /* prefix and its tag */
    size_t tail = c->seal ? PR_SEAL_TAG_LEN : 0;   /* the payload's tag */
    if (!ops->on_data_begin || c->land.refused ||
        !pr_frame_reader_partial(&c->rd, &fh, &p, &n) ||
        fh.type != PR_FRAME_DATA || fh.len < head + tail ||
        n < PR_FRAME_HDR_LEN + head || (c->seal && fh.flags != pre))
        return 0;
    uint8_t *q = (uint8_t *)p + PR_FRAME_HDR_LEN;
    int rc;
    /* The prefix says where the payload goes: authentic first. */
    if (c->seal && !c->prefix_open) {
        rc = pr_seal_decrypt(c->seal, p, q, pre, q + pre);
        if (rc < 0)
            return seal_failed(c, rc, "a chunk header");
        c->prefix_open = 1;
    }
    size_t rest = fh.len - head - tail;
    void *dst = NULL, *token = NULL;
    rc = ops->on_data_begin(c, q, rest, &dst, &token);
    if (rc <= 0) {
        c->land.refused = 1;
        return rc;
    }
    /* Sealed, the payload lands in the bounce buffer first (but see 2). */
    uint8_t *at = dst;
    if (c->seal && rc != 2) {
        /* A byte at least: an empty payload still opens at an address. */
        size_t cap = rest ? rest : 1;
        if (c->bounce_cap < cap) {
            uint8_t *b = realloc(c->bounce, cap);
            if (!b) {
                pr_err("%s: out of memory for a chunk of %zu bytes: closing",
                       c->name, rest);
                ops->on_data_end(c, token, -ENOMEM);
                return -ENOMEM;
            }
            c->bounce = b;
            c->bounce_cap = cap;
        }
        at = c->bounce;
    }
    /* Less than the whole frame is in: next() would have taken it. */
    size_t have = n - PR_FRAME_HDR_LEN - head;
    size_t into = have < rest ? have : rest;
    memcpy(at, q + head, into);
    memcpy(c->land.tag, q + head + into, have - into);
    c->land.tag_got = have - into;
    memcpy(c->land.ad, p, PR_FRAME_HDR_LEN);
    c->prefix_open = 0;
    pr_frame_reader_drop_partial(&c->rd);
    c->land.dst = dst;
    c->land.at = at;
    c->land.len = rest;
    c->land.got = into;
    c->land.token = token;
    c->land.active = 1;
    return 0;
}

/* The landing in progress ends without its bytes: the conn is closing. */
static void land_abort(struct pr_conn *c, int status)
{
    if (!c->land.active)
        return;
    c->land.active = 0;
    c->ops->on_data_end(c, c->land.token, status < 0 ? status : -ECONNRESET);
}

/* The peer closed, or a read failed (UV_EOF or a negative errno). */
void pr_conn_read_ended(struct pr_conn *c, int err)
{
    size_t pending =
        pr_frame_reader_pending(&c->rd) + (c->land.active ? c->land.got : 0);
    /*
     * However it ended (a peer that leaves unread data behind resets
     * rather than closes), a partial frame is reported as truncated.
     */
    if (pending > 0)
        pr_warn("%s: connection closed inside a frame (%zu bytes of "
                "a truncated frame dropped)%s%s",
                c->name, pending, err == UV_EOF ? "" : ": ",
                err == UV_EOF ? "" : uv_strerror(err));
    else if (err != UV_EOF)
        pr_info("%s: read: %s", c->name, uv_strerror(err));
    /* An orderly EOF is a close by the peer, not an error. */
    pr_conn_close(c, err == UV_EOF ? 0 : err);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct pr_conn *c = s->data;
    if (nread == UV_ENOBUFS && c->yield) {
        /* The budget's pause (alloc_cb): the socket is still readable. */
        c->yield = 0;
        return;
    }
    if (nread == UV_ENOBUFS) {
        pr_err("%s: out of memory for the read buffer: closing", c->name);
        pr_conn_close(c, -ENOMEM);
        return;
    }
    if (nread < 0) {
        pr_conn_read_ended(c, (int)nread);
        return;
    }
    /*
     * A short read, or none (EAGAIN), ends libuv's run of reads on this
     * readiness: the next one starts with the whole budget. (A run that
     * libuv ends at its own count of reads carries what it read into the
     * next, which then yields early once.)
     */
    if (nread == 0) {
        c->burst = 0;
        return;
    }
    c->burst = (size_t)nread < buf->len ? 0 : c->burst + (size_t)nread;
    uint64_t now_ns = uv_hrtime();
    c->bytes_in += (size_t)nread;
    if (c->land.active) {
        landed_bytes(c, (size_t)nread, now_ns);
        pr_conn_io_take_rx(c);
        return;
    }
    /* No piece of a frame was waiting: this read begins the next one. */
    if (pr_frame_reader_pending(&c->rd) == 0)
        c->rx_start_ns = now_ns;
    pr_frame_reader_commit(&c->rd, (size_t)nread);
    for (;;) {
        struct pr_frame_hdr fh;
        const uint8_t *payload;
        int rc = pr_frame_reader_next(&c->rd, &fh, &payload);
        if (rc == 0) {
            rc = maybe_land(c);
            if (rc < 0)
                pr_conn_close(c, rc);
            else
                pr_conn_io_take_rx(c);
            return;
        }
        if (rc < 0) {
            if (rc == -EMSGSIZE)
                pr_warn("%s: frame length %u exceeds the maximum %zu: "
                        "closing",
                        c->name, fh.len, c->rd.max_len);
            else
                pr_warn("%s: frame of unknown type %u: closing", c->name,
                        fh.type);
            pr_conn_close(c, rc);
            return;
        }
        c->land.refused = 0;
        if (c->transcript && fh.type == PR_FRAME_MSG) {
            uint8_t h[PR_FRAME_HDR_LEN];
            pr_frame_hdr_encode(h, fh.len, fh.type, fh.flags);
            crypto_generichash_update(c->transcript, h, sizeof(h));
            crypto_generichash_update(c->transcript, payload, fh.len);
        }
        if (c->seal) {
            rc = open_frame(c, &fh, (uint8_t *)payload);
            if (rc < 0) {
                pr_conn_close(c, rc);
                return;
            }
        }
        c->last_rx_ms = uv_now(s->loop);
        c->rx_frame_ns = now_ns - c->rx_start_ns;
        /* Whatever follows in this read belongs to the next frame. */
        c->rx_start_ns = now_ns;
        rc = dispatch(c, &fh, payload);
        if (c->wipe_msg) {
            sodium_memzero((uint8_t *)payload, fh.len);
            c->wipe_msg = 0;
        }
        if (rc < 0) {
            pr_conn_close(c, rc);
            return;
        }
        if (c->closing)
            return;
    }
}

void pr_conn_wipe_msg(struct pr_conn *c)
{
    c->wipe_msg = 1;
}

int pr_conn_read_resume(struct pr_conn *c)
{
    return uv_read_start(&c->h.stream, alloc_cb, read_cb);
}

int pr_conn_start(struct pr_conn *c)
{
    c->last_rx_ms = uv_now(c->h.handle.loop);
    int rc = uv_read_start(&c->h.stream, alloc_cb, read_cb);
    return rc < 0 ? rc : 0;
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct creq *cr = (struct creq *)req;
    struct pr_conn *c = cr->c;
    void (*cb)(struct pr_conn *, int) = cr->cb;
    free(cr);
    /* Its owner is gone (pr_conn_detach_close): nobody to tell. */
    if (c->ops == &detached_ops)
        return;
    if (status == 0 && !c->closing)
        status = pr_conn_start(c);
    if (c->closing && status == 0)
        status = -ECANCELED;
    cb(c, status);
}

int pr_conn_connect(struct pr_conn *c, const char *host, uint16_t port,
                    void (*cb)(struct pr_conn *c, int status))
{
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return -EINVAL;
    struct creq *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return -ENOMEM;
    cr->c = c;
    cr->cb = cb;
    snprintf(c->name, sizeof(c->name), "%s:%u", host, port);
    int rc =
        uv_tcp_connect(&cr->req, &c->h.tcp, (struct sockaddr *)&ss, connect_cb);
    if (rc < 0) {
        free(cr);
        return rc;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    return 0;
}

static void write_cb(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    if (w->cb)
        w->cb(w->arg, status < 0 ? status : 0);
    free(w->owned);
    free(w);
}

/*
 * The message frame at f, of payload n, becomes its sealed record in
 * place (room for the tag after it): the header says so.
 */
int pr_conn_seal_msg_at(struct pr_conn *c, uint8_t *f, size_t n)
{
    pr_frame_hdr_encode(f, (uint32_t)(n + PR_SEAL_TAG_LEN), PR_FRAME_MSG, 0);
    int rc = pr_seal_encrypt(c->seal, f, f + PR_FRAME_HDR_LEN,
                             f + PR_FRAME_HDR_LEN, n, f + PR_FRAME_HDR_LEN + n);
    return rc < 0 ? pr_conn_seal_lost(c, rc, "a message") : 0;
}

/* A message frame (*frame, *len) becomes its sealed record. */
static int seal_msg(struct pr_conn *c, uint8_t **frame, size_t *len)
{
    uint8_t *f = realloc(*frame, *len + PR_SEAL_TAG_LEN);
    if (!f)
        return -ENOMEM;
    *frame = f;
    int rc = pr_conn_seal_msg_at(c, f, *len - PR_FRAME_HDR_LEN);
    if (rc == 0)
        *len += PR_SEAL_TAG_LEN;
    return rc;
}

/*
 * A data frame sealed into a buffer of its own (*out, *out_len): the
 * header, whose flags say where the prefix record ends, then the prefix
 * record and its tag, then the payload record and its tag.
 */
int pr_conn_seal_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                      const void *data, size_t len, uint8_t **out,
                      size_t *out_len)
{
    const size_t T = PR_SEAL_TAG_LEN;
    size_t total = hdr_len + T + len + T;
    if (total > UINT32_MAX)
        return -EMSGSIZE;
    uint8_t *f = malloc(PR_FRAME_HDR_LEN + total);
    if (!f)
        return -ENOMEM;
    pr_frame_hdr_encode(f, (uint32_t)total, PR_FRAME_DATA, (uint16_t)hdr_len);
    uint8_t *q = f + PR_FRAME_HDR_LEN;
    int rc = pr_seal_encrypt(c->seal, f, q, hdr, hdr_len, q + hdr_len);
    if (rc == 0)
        rc = pr_seal_encrypt(c->seal, f, q + hdr_len + T, data, len,
                             q + hdr_len + T + len);
    if (rc < 0) {
        free(f);
        /* The header's record may have gone, the payload's not. */
        return pr_conn_seal_lost(c, rc, "a chunk");
    }
    *out = f;
    *out_len = PR_FRAME_HDR_LEN + total;
    return 0;
}

int pr_conn_write_owned(struct pr_conn *c, uint8_t *owned, size_t off,
                        size_t len)
{
    if (c->io_left) { /* as in pr_conn_send */
        free(owned);
        return -ENOTCONN;
    }
    if (pr_conn_io_wants(c, 0))
        return pr_conn_io_write_owned(c, owned, off, len, NULL, NULL);
    struct wreq *w = calloc(1, sizeof(*w));
    if (!w) {
        free(owned);
        return -ENOMEM;
    }
    w->c = c;
    w->owned = owned;
    uv_buf_t b = uv_buf_init((char *)owned + off, (unsigned)len);
    int rc = uv_write(&w->req, &c->h.stream, &b, 1, write_cb);
    if (rc < 0) {
        free(owned);
        free(w);
    }
    return rc;
}

int pr_conn_send(struct pr_conn *c, const Pr__V1__Msg *m)
{
    /*
     * io_left: a detached close took writes back from the I/O thread,
     * one maybe cut short; nothing may follow it (pr_conn_io_release).
     */
    if (c->closing || c->io_left)
        return -ENOTCONN;
    /* A peer that stops reading must not make this side queue forever. */
    if (pr_conn_write_queue(c) > PR_CONN_MAX_QUEUED) {
        pr_warn("%s: more than %u bytes unread by the peer: closing", c->name,
                PR_CONN_MAX_QUEUED);
        pr_conn_close(c, -ENOBUFS);
        return -ENOBUFS;
    }
    if (c->batch)
        return pr_conn_send_batched(c, m);
    struct wreq *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    size_t len;
    int rc = pr_msg_frame(m, c->rd.max_len, &w->owned, &len);
    if (rc == 0 && c->transcript)
        crypto_generichash_update(c->transcript, w->owned, len);
    if (rc == 0 && c->seal)
        rc = seal_msg(c, &w->owned, &len);
    if (rc < 0) {
        free(w->owned);
        free(w);
        return rc;
    }
    if (pr_conn_io_wants(c, 0)) {
        uint8_t *owned = w->owned;
        free(w);
        rc = pr_conn_io_write_owned(c, owned, 0, len, NULL, NULL);
        /* A sealed record's number is spent: the next would not open. */
        if (rc < 0)
            return c->seal ? pr_conn_seal_lost(c, rc, "a message") : rc;
        c->bytes_out += len;
        return 0;
    }
    w->c = c;
    uv_buf_t b = uv_buf_init((char *)w->owned, (unsigned)len);
    /*
     * Nothing queued: the socket mostly takes a control message at once,
     * and then it costs one write(), where uv_write would also arm and
     * disarm the poll for writing (two epoll_ctl) and defer a callback to
     * the next loop turn: most of a small reduce's syscalls on the node.
     */
    if (uv_stream_get_write_queue_size(&c->h.stream) == 0) {
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n == (int)len) {
            free(w->owned);
            free(w);
            c->bytes_out += len;
            return 0;
        }
        if (n > 0) {
            b.base += n;
            b.len -= (size_t)n;
        }
    }
    rc = uv_write(&w->req, &c->h.stream, &b, 1, write_cb);
    if (rc < 0) {
        free(w->owned);
        free(w);
        return c->seal ? pr_conn_seal_lost(c, rc, "a message") : rc;
    }
    c->bytes_out += len;
    return 0;
}

int pr_conn_send_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                      const void *data, size_t len, pr_conn_write_cb cb,
                      void *arg)
{
    if (c->closing || c->io_left) /* as in pr_conn_send */
        return -ENOTCONN;
    if (hdr_len > 64 || hdr_len + len > c->rd.max_len ||
        hdr_len + len > UINT32_MAX)
        return -EMSGSIZE;
    pr_conn_flush(c); /* the messages before it go first */
    if (c->closing)
        return -ENOTCONN;
    if (pr_conn_io_wants(c, PR_FRAME_HDR_LEN + hdr_len + len))
        return pr_conn_io_send_data(c, hdr, hdr_len, data, len, cb, arg);
    struct wreq *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->c = c;
    w->cb = cb;
    w->arg = arg;
    if (c->seal) {
        size_t n;
        int rc = pr_conn_seal_data(c, hdr, hdr_len, data, len, &w->owned, &n);
        if (rc < 0) {
            free(w);
            return rc;
        }
        uv_buf_t b = uv_buf_init((char *)w->owned, (unsigned)n);
        rc = uv_write(&w->req, &c->h.stream, &b, 1, write_cb);
        if (rc < 0) {
            free(w->owned);
            free(w);
            return pr_conn_seal_lost(c, rc, "a chunk");
        }
        c->bytes_out += n;
        return 0;
    }
    pr_frame_hdr_encode(w->hdr, (uint32_t)(hdr_len + len), PR_FRAME_DATA, 0);
    memcpy(w->hdr + PR_FRAME_HDR_LEN, hdr, hdr_len);
    uv_buf_t b[2] = {
        uv_buf_init((char *)w->hdr, (unsigned)(PR_FRAME_HDR_LEN + hdr_len)),
        uv_buf_init((char *)data, (unsigned)len),
    };
    int rc = uv_write(&w->req, &c->h.stream, b, len ? 2 : 1, write_cb);
    if (rc < 0) {
        free(w);
        return rc;
    }
    c->bytes_out += PR_FRAME_HDR_LEN + hdr_len + len;
    return 0;
}

/*
 * Sends an Error and closes. The error is written at once if the socket
 * takes it (uv_write tries a write before queueing), and then reaches the
 * peer even though the handle closes right after; a peer that does not
 * read loses it, and nothing waits on such a peer.
 */
void pr_conn_fail(struct pr_conn *c, int code, const char *reason)
{
    if (c->closing)
        return;
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    e.code = code;
    e.reason = (char *)reason;
    Pr__V1__Msg m = PR_MSG_OF(ERROR, error, &e);
    pr_conn_send(c, &m);
    pr_conn_close(c, code);
}

static int detached_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    (void)c;
    (void)m;
    return -ECANCELED;
}

static void detached_on_close(struct pr_conn *c, int status)
{
    (void)c;
    (void)status;
}

static const struct pr_conn_ops detached_ops = {
    .on_msg = detached_on_msg,
    .on_data = NULL,
    .on_close = detached_on_close,
};

void pr_conn_detach_close(struct pr_conn *c)
{
    /*
     * The owner is still there to take its landing back, once no thread
     * writes into it.
     */
    pr_conn_io_release(c);
    land_abort(c, -ECANCELED);
    c->ops = &detached_ops;
    c->owner = NULL;
    pr_conn_close(c, 0);
}

/* aligned_alloc of n bytes rounded up to the 64 that libsodium's states need */
static void *alloc64(size_t n)
{
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

int pr_conn_transcript_start(struct pr_conn *c)
{
    if (c->transcript || c->seal)
        return -EINVAL;
    crypto_generichash_state *st = alloc64(sizeof(*st));
    if (!st)
        return -ENOMEM;
    crypto_generichash_init(st, NULL, 0, PR_SEAL_HASH_LEN);
    c->transcript = st;
    return 0;
}

int pr_conn_seal(struct pr_conn *c, uint32_t cipher,
                 const struct pr_auth_key *key, char role,
                 const uint8_t *s_nonce, const uint8_t *c_nonce)
{
    if (!c->transcript || c->seal)
        return -EINVAL;
    uint8_t th[PR_SEAL_HASH_LEN];
    crypto_generichash_final(c->transcript, th, sizeof(th));
    free(c->transcript);
    c->transcript = NULL;
    struct pr_seal *s = alloc64(sizeof(*s));
    if (!s)
        return -ENOMEM;
    int rc = pr_seal_init(s, cipher, key, role, s_nonce, c_nonce, th);
    if (rc < 0) {
        free(s);
        return rc;
    }
    c->seal = s;
    /* Frames carry their tags beyond what their limit says. */
    c->rd.extra = 2 * PR_SEAL_TAG_LEN;
    return 0;
}

size_t pr_conn_write_queue(const struct pr_conn *c)
{
    return uv_stream_get_write_queue_size(&c->h.stream) + c->out_len +
           c->io_tx_bytes;
}
