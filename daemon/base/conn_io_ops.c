/* SPDX-License-Identifier: MIT */
/*
 * A conn's side of its I/O thread (conn_io.h, conn_io.c): what it hands
 * the thread (a landing's rest, with its reading stopped; a write, which
 * must not pass another), what it does with what the thread did, and how
 * a close takes its socket back. conn.c calls these where it reads,
 * writes and closes; they are between the two files (conn_int.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "daemon/base/conn.h"
#include "daemon/base/conn_int.h"
#include "daemon/base/conn_io.h"
#include "daemon/base/log.h"

/*
 * The I/O thread lets go of c's socket and of the memory of c's
 * operations before this returns (conn_io.c): its read is dropped (the
 * landing it was for is the caller's to end), its writes kept for
 * close_cb to report.
 */
void pr_conn_io_release(struct pr_conn *c)
{
    if (!c->io_slot)
        return;
    struct pr_io_op *op = pr_io_detach(c->io, c);
    while (op) {
        struct pr_io_op *next = op->next;
        if (op->rx) {
            c->io_rx = 0;
            free(op);
        } else {
            op->next = c->io_left;
            c->io_left = op;
        }
        op = next;
    }
}

/*
 * A landing with at least PR_CONN_IO_MIN bytes left on a connection with
 * an I/O thread: the thread reads them, libuv's reading stopped until it
 * is done (pr_conn_io_done). Otherwise the loop goes on reading.
 */
void pr_conn_io_take_rx(struct pr_conn *c)
{
    if (!c->io_slot || !pr_conn_io_on(c->io) || !c->land.active || c->closing ||
        c->io_rx)
        return;
    size_t left = c->land.len - c->land.got;
    size_t tag = c->seal ? PR_SEAL_TAG_LEN - c->land.tag_got : 0;
    if (left + tag < PR_CONN_IO_MIN)
        return;
    struct pr_io_op *op = calloc(1, sizeof(*op));
    if (!op)
        return; /* the loop reads it */
    op->c = c;
    op->rx = 1;
    if (left > 0)
        op->iov[op->iovcnt++] = (struct iovec){c->land.at + c->land.got, left};
    if (tag > 0)
        op->iov[op->iovcnt++] =
            (struct iovec){c->land.tag + c->land.tag_got, tag};
    op->len = left + tag;
    uv_read_stop(&c->h.stream);
    c->io_rx = 1;
    pr_io_submit(c->io, op);
}

/*
 * A write goes to the I/O thread while it holds any of c's (it must not
 * pass them), and a large data frame when libuv holds none (it must not
 * pass libuv's). The op's iov set; 0 (cb will run), or < 0 (not queued).
 * (Its bytes are counted in c->bytes_out by the callers, as on libuv's
 * paths: a batch's when framed.)
 */
static int io_write(struct pr_conn *c, struct pr_io_op *op)
{
    op->c = c;
    op->len = 0;
    for (int i = 0; i < op->iovcnt; i++)
        op->len += op->iov[i].iov_len;
    c->io_tx_n++;
    c->io_tx_bytes += op->len;
    pr_io_submit(c->io, op);
    return 0;
}

int pr_conn_io_wants(const struct pr_conn *c, size_t frame_len)
{
    if (!c->io_slot)
        return 0;
    if (c->io_tx_n > 0)
        return 1;
    return pr_conn_io_on(c->io) && frame_len >= PR_CONN_IO_MIN &&
           uv_stream_get_write_queue_size(&c->h.stream) == 0;
}

/* owned[off, off + len) to the thread, freed when written. */
int pr_conn_io_write_owned(struct pr_conn *c, uint8_t *owned, size_t off,
                           size_t len, pr_conn_write_cb cb, void *arg)
{
    struct pr_io_op *op = calloc(1, sizeof(*op));
    if (!op) {
        free(owned);
        return -ENOMEM;
    }
    op->owned = owned;
    op->cb = cb;
    op->arg = arg;
    op->iov[op->iovcnt++] = (struct iovec){owned + off, len};
    return io_write(c, op);
}

/* pr_conn_send_data through the I/O thread. */
int pr_conn_io_send_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                         const void *data, size_t len, pr_conn_write_cb cb,
                         void *arg)
{
    if (c->seal) {
        uint8_t *owned;
        size_t n;
        int rc = pr_conn_seal_data(c, hdr, hdr_len, data, len, &owned, &n);
        if (rc < 0)
            return rc;
        rc = pr_conn_io_write_owned(c, owned, 0, n, cb, arg);
        if (rc < 0)
            return pr_conn_seal_lost(c, rc, "a chunk");
        c->bytes_out += n;
        return 0;
    }
    struct pr_io_op *op = calloc(1, sizeof(*op));
    if (!op)
        return -ENOMEM;
    op->cb = cb;
    op->arg = arg;
    pr_frame_hdr_encode(op->hdr, (uint32_t)(hdr_len + len), PR_FRAME_DATA, 0);
    memcpy(op->hdr + PR_FRAME_HDR_LEN, hdr, hdr_len);
    op->iov[op->iovcnt++] = (struct iovec){op->hdr, PR_FRAME_HDR_LEN + hdr_len};
    if (len > 0)
        op->iov[op->iovcnt++] = (struct iovec){(void *)data, len};
    c->bytes_out += PR_FRAME_HDR_LEN + hdr_len + len;
    return io_write(c, op);
}

int pr_conn_set_io(struct pr_conn *c, struct pr_conn_io *io)
{
    if (c->io_slot)
        return -EALREADY;
    if (c->closing)
        return -ENOTCONN;
    return pr_io_attach(io, c);
}

/* A write the thread did: c's count, the caller's callback. */
static void io_tx_done(struct pr_conn *c, struct pr_io_op *op)
{
    c->io_tx_n--;
    c->io_tx_bytes -= op->len;
    if (op->status == 0)
        c->io_ops++;
    if (op->cb)
        op->cb(op->arg, op->status < 0 ? op->status : 0);
    free(op->owned);
    free(op);
}

void pr_conn_io_done(struct pr_io_op *op)
{
    struct pr_conn *c = op->c;
    if (!op->rx) {
        int status = op->status;
        io_tx_done(c, op);
        if (status < 0 && !c->closing) {
            pr_info("%s: write: %s", c->name, uv_strerror(status));
            pr_conn_close(c, status);
        }
        return;
    }
    c->io_rx = 0;
    int status = op->status;
    size_t got = op->done;
    uint64_t done_ns = op->done_ns;
    free(op);
    /* What it read: the payload's rest first, then the tag's. */
    size_t left = c->land.len - c->land.got;
    size_t into = got < left ? got : left;
    c->land.got += into;
    c->land.tag_got += got - into;
    c->bytes_in += got;
    if (status < 0) {
        pr_conn_read_ended(c, status);
        return;
    }
    c->io_ops++;
    c->burst = 0;
    pr_conn_land_done(c, done_ns);
    if (!c->closing && pr_conn_read_resume(c) < 0)
        pr_conn_close(c, -EIO);
}

/* The thread's writes that the close took back: their callbacks, now. */
void pr_conn_io_left_report(struct pr_conn *c)
{
    /* Taken back newest first: reported in the order they were given. */
    struct pr_io_op *rev = NULL;
    while (c->io_left) {
        struct pr_io_op *op = c->io_left;
        c->io_left = op->next;
        op->next = rev;
        rev = op;
    }
    while (rev) {
        struct pr_io_op *next = rev->next;
        io_tx_done(c, rev);
        rev = next;
    }
}
