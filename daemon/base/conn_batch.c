/* SPDX-License-Identifier: MIT */
/*
 * Coalesced control writes (conn.h, struct pr_conn_batch): a batched
 * conn frames its messages into a buffer of its own (out, out_len), and
 * its batch keeps the conns whose buffers hold frames on a list, first
 * come first written, emptied by a check handle (after the loop's I/O
 * callbacks) and a prepare handle (before it waits, for what timers and
 * idle callbacks sent). Both run only while the list is not empty, and
 * are unreferenced: a batch never keeps a loop alive.
 */
#include "daemon/base/conn.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conn_int.h"
#include "daemon/base/log.h"

/* A buffer above this is given back after it was written whole. */
#define OUT_KEEP (64u << 10)

struct pr_conn_batch {
    uv_prepare_t prepare;
    uv_check_t check;
    struct pr_conn *dirty; /* conns with bytes waiting, oldest first */
    struct pr_conn **tail; /* &last->batch_next, or &dirty */
    int armed;             /* the two handles started */
    int open;              /* handles not closed yet, of 2 */
};

static void flush_all(struct pr_conn_batch *b)
{
    /* Each flush unlinks its conn; a close it causes unlinks it too. */
    while (b->dirty)
        pr_conn_flush(b->dirty);
    if (b->armed) {
        uv_prepare_stop(&b->prepare);
        uv_check_stop(&b->check);
        b->armed = 0;
    }
}

static void prepare_cb(uv_prepare_t *h)
{
    flush_all(h->data);
}

static void check_cb(uv_check_t *h)
{
    flush_all(h->data);
}

struct pr_conn_batch *pr_conn_batch_create(uv_loop_t *loop)
{
    struct pr_conn_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->tail = &b->dirty;
    b->open = 2;
    uv_prepare_init(loop, &b->prepare);
    uv_check_init(loop, &b->check);
    b->prepare.data = b;
    b->check.data = b;
    uv_unref((uv_handle_t *)&b->prepare);
    uv_unref((uv_handle_t *)&b->check);
    return b;
}

static void closed_cb(uv_handle_t *h)
{
    struct pr_conn_batch *b = h->data;
    if (--b->open == 0)
        free(b);
}

void pr_conn_batch_close(struct pr_conn_batch *b)
{
    if (!b)
        return;
    flush_all(b);
    uv_close((uv_handle_t *)&b->prepare, closed_cb);
    uv_close((uv_handle_t *)&b->check, closed_cb);
}

void pr_conn_set_batch(struct pr_conn *c, struct pr_conn_batch *b)
{
    /* A closing conn left its batch for good (pr_conn_close). */
    if (c->batch == b || c->closing)
        return;
    pr_conn_flush(c);
    if (!c->closing)
        c->batch = b;
}

/* c's buffer held nothing and holds frames now: last on the list. */
static void mark(struct pr_conn *c)
{
    struct pr_conn_batch *b = c->batch;
    c->batch_next = NULL;
    c->batch_pprev = b->tail;
    *b->tail = c;
    b->tail = &c->batch_next;
    if (!b->armed) {
        uv_prepare_start(&b->prepare, prepare_cb);
        uv_check_start(&b->check, check_cb);
        b->armed = 1;
    }
}

void pr_conn_batch_unlink(struct pr_conn *c)
{
    struct pr_conn_batch *b = c->batch;
    if (!b || !c->batch_pprev)
        return;
    *c->batch_pprev = c->batch_next;
    if (c->batch_next)
        c->batch_next->batch_pprev = c->batch_pprev;
    else
        b->tail = c->batch_pprev;
    c->batch_next = NULL;
    c->batch_pprev = NULL;
}

int pr_conn_send_batched(struct pr_conn *c, const Pr__V1__Msg *m)
{
    size_t n = pr__v1__msg__get_packed_size(m);
    if (n > c->rd.max_len || n > UINT32_MAX - PR_SEAL_TAG_LEN)
        return -EMSGSIZE;
    size_t need = c->out_len + PR_FRAME_HDR_LEN + n + PR_SEAL_TAG_LEN;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? 2 * c->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *o = realloc(c->out, cap);
        if (!o)
            return -ENOMEM;
        c->out = o;
        c->out_cap = cap;
    }
    uint8_t *f = c->out + c->out_len;
    pr_frame_hdr_encode(f, (uint32_t)n, PR_FRAME_MSG, 0);
    pr__v1__msg__pack(m, f + PR_FRAME_HDR_LEN);
    size_t len = PR_FRAME_HDR_LEN + n;
    /* Hashed and sealed now, in the order the frames are sent. */
    if (c->transcript)
        crypto_generichash_update(c->transcript, f, len);
    if (c->seal) {
        int rc = pr_conn_seal_msg_at(c, f, n);
        if (rc < 0)
            return rc;
        len += PR_SEAL_TAG_LEN;
    }
    int was_empty = c->out_len == 0;
    c->out_len += len;
    c->bytes_out += len;
    if (was_empty)
        mark(c);
    return 0;
}

int pr_conn_flush_out(struct pr_conn *c)
{
    pr_conn_batch_unlink(c);
    size_t len = c->out_len;
    c->out_len = 0;
    if (len == 0 || c->closing)
        return 0;
    size_t off = 0;
    /*
     * Nothing queued before it: one write() mostly takes it all, and the
     * buffer stays for the next turn's frames (unless a burst grew it).
     */
    if (uv_stream_get_write_queue_size(&c->h.stream) == 0 && c->io_tx_n == 0) {
        /* (Not while the I/O thread holds writes: it goes behind them.) */
        uv_buf_t b = uv_buf_init((char *)c->out, (unsigned)len);
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n == (int)len) {
            if (c->out_cap > OUT_KEEP) {
                free(c->out);
                c->out = NULL;
                c->out_cap = 0;
            }
            return 0;
        }
        if (n > 0)
            off = (size_t)n;
    }
    /* The rest goes with its write request; a new buffer comes later. */
    uint8_t *owned = c->out;
    c->out = NULL;
    c->out_cap = 0;
    return pr_conn_write_owned(c, owned, off, len - off);
}

void pr_conn_flush(struct pr_conn *c)
{
    int rc = pr_conn_flush_out(c);
    if (rc < 0) {
        pr_warn("%s: cannot write its messages: %s: closing", c->name,
                uv_strerror(rc));
        pr_conn_close(c, rc);
    }
}
