/* SPDX-License-Identifier: MIT */
/* Between conn.c and conn_batch.c only. */
#ifndef PR_CONN_INT_H
#define PR_CONN_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "daemon/base/conn.h"

/*
 * The message frame at f, of payload n, becomes its sealed record in
 * place (room for the tag after it), its header saying so. 0, or < 0
 * with c closed (a spent key).
 */
int pr_conn_seal_msg_at(struct pr_conn *c, uint8_t *f, size_t n);
/*
 * owned[off, off + len) written through libuv's queue; owned is freed
 * when written (or at once on an error). 0 or < 0.
 */
int pr_conn_write_owned(struct pr_conn *c, uint8_t *owned, size_t off,
                        size_t len);
/* pr_conn_send for a conn with a batch: framed into its buffer. */
int pr_conn_send_batched(struct pr_conn *c, const Pr__V1__Msg *m);
/* Writes c's buffer, off the dirty list; 0 or < 0, c left open. */
int pr_conn_flush_out(struct pr_conn *c);
/* c goes off its batch's dirty list (flushed, or closing). */
void pr_conn_batch_unlink(struct pr_conn *c);

/*
 * Between conn.c and conn_io.c: one operation on a connection's socket
 * that the I/O thread does, a read of exactly `len` bytes into iov or a
 * write of them from it. The thread writes only `iov` (advanced), `done`,
 * `status` and `done_ns`, and only while the operation is its own.
 */
struct pr_io_op {
    struct pr_io_op *next;
    struct pr_conn *c;
    int rx; /* 1: read into iov; 0: write from it */
    struct iovec iov[2];
    int iovcnt;
    size_t len, done;
    int status;       /* 0, UV_EOF, or a negative errno */
    uint64_t done_ns; /* uv_hrtime() when it ended */
    /* A write's: its frame header, memory to free and callback. */
    uint8_t *owned;
    pr_conn_write_cb cb;
    void *arg;
    uint8_t hdr[PR_FRAME_HDR_LEN + 64];
};

/*
 * c's socket goes to io's thread (its descriptor watched there): 0 or a
 * negative errno. pr_io_detach takes it back, at once: the thread is
 * out of every system call on it when it returns, and the operations it
 * still had, or had done and not yet reported, are returned as a list
 * (to complete on the loop). pr_io_submit queues op on c's socket, after
 * c's others of its direction; the thread does one read at a time.
 */
int pr_io_attach(struct pr_conn_io *io, struct pr_conn *c);
struct pr_io_op *pr_io_detach(struct pr_conn_io *io, struct pr_conn *c);
void pr_io_submit(struct pr_conn_io *io, struct pr_io_op *op);
/*
 * conn_io_ops.c, for conn.c: an operation the thread finished, on the
 * loop; c's socket taken back from the thread (its read dropped, its
 * writes kept for pr_conn_io_left_report, from close_cb); a landing's
 * rest to the thread, if it is large and c has one; whether a frame of
 * frame_len bytes (0: a message) is to be written by the thread, and
 * the writes for it (0, or < 0 not queued: owned freed).
 */
void pr_conn_io_done(struct pr_io_op *op);
void pr_conn_io_release(struct pr_conn *c);
void pr_conn_io_left_report(struct pr_conn *c);
void pr_conn_io_take_rx(struct pr_conn *c);
int pr_conn_io_wants(const struct pr_conn *c, size_t frame_len);
int pr_conn_io_write_owned(struct pr_conn *c, uint8_t *owned, size_t off,
                           size_t len, pr_conn_write_cb cb, void *arg);
int pr_conn_io_send_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                         const void *data, size_t len, pr_conn_write_cb cb,
                         void *arg);
/*
 * conn.c, for conn_io_ops.c: a landing's bytes all in (opened if sealed,
 * the owner told, times from now_ns); the peer closed or a read failed
 * (UV_EOF or a negative errno: c closed); libuv's reading of c again; a
 * data frame sealed into a buffer of its own; a record that could not
 * go (c closed, rc returned).
 */
void pr_conn_land_done(struct pr_conn *c, uint64_t now_ns);
void pr_conn_read_ended(struct pr_conn *c, int err);
int pr_conn_read_resume(struct pr_conn *c);
int pr_conn_seal_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                      const void *data, size_t len, uint8_t **out,
                      size_t *out_len);
int pr_conn_seal_lost(struct pr_conn *c, int rc, const char *what);

#endif
