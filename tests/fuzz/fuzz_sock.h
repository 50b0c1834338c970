/* SPDX-License-Identifier: MIT */
/*
 * Our end of a socket to the daemon under test, for the fuzz targets that
 * play its peers over real connections (fuzz_sched: node daemons over
 * TCP; fuzz_trainer: trainers over the node's socket file). A step sends
 * its frames whole, runs the loop, then reads all the daemon answered at
 * once, frame by frame, so that the answers are checked against what the
 * step expects. Header-only, as each target links alone.
 */
#ifndef PREDUCE_TESTS_FUZZ_SOCK_H
#define PREDUCE_TESTS_FUZZ_SOCK_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>
#include <uv.h>

#include "proto/frame.h"
#include "tests/fuzz/fuzz_input.h"

struct fuzz_sock {
    int fd; /* -1: not connected */
    struct pr_frame_reader rd;
    int eof; /* the daemon closed (or reset) it */
};

/*
 * Reads into buf as recv(MSG_DONTWAIT) does: the bytes, 0 at the end, or
 * -1 with errno. A target that takes more than bytes (a memfd) reads
 * with one of its own.
 */
typedef ssize_t (*fuzz_recv_fn)(int fd, void *buf, size_t cap, void *arg);
/* A Msg the daemon sent, the callee's from then on. */
typedef void (*fuzz_msg_fn)(Pr__V1__Msg *m, void *arg);

/*
 * Runs the loop a few times without blocking: what a step sent is read
 * and handled, and an answer queued in one turn is written in the next.
 */
static inline void fuzz_settle(uv_loop_t *loop)
{
    for (int i = 0; i < 4; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

static inline void fuzz_sock_send_bytes(struct fuzz_sock *k, const uint8_t *p,
                                        size_t len)
{
    while (len > 0) {
        ssize_t w = send(k->fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        /*
         * The daemon closed it without the harness seeing, or the socket
         * buffer is full: a step sends far less than it holds.
         */
        if (w <= 0)
            abort();
        p += w;
        len -= (size_t)w;
    }
}

static inline void fuzz_sock_send_msg(struct fuzz_sock *k, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    if (pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len) < 0)
        abort();
    fuzz_sock_send_bytes(k, buf, len);
    free(buf);
}

/*
 * Reads all the daemon has sent on k until it would block or closes (eof
 * then set), each frame's Msg to on_msg; rcv reads (NULL: recv()).
 * Aborts on a read that fails but by a reset, a frame cut short by the
 * close, a frame the reader refuses, or one that is not a Msg.
 */
static inline void fuzz_sock_drain(struct fuzz_sock *k, fuzz_recv_fn rcv,
                                   fuzz_msg_fn on_msg, void *arg)
{
    while (k->fd >= 0 && !k->eof) {
        void *p;
        size_t cap;
        if (pr_frame_reader_reserve(&k->rd, 65536, &p, &cap) < 0)
            abort();
        ssize_t r =
            rcv ? rcv(k->fd, p, cap, arg) : recv(k->fd, p, cap, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (r < 0 && errno != ECONNRESET)
            abort();
        if (r <= 0) {
            k->eof = 1;
            if (pr_frame_reader_pending(&k->rd) != 0)
                abort(); /* a frame cut short */
            break;
        }
        pr_frame_reader_commit(&k->rd, (size_t)r);
        struct pr_frame_hdr h;
        const uint8_t *payload;
        int rc;
        while ((rc = pr_frame_reader_next(&k->rd, &h, &payload)) == 1) {
            Pr__V1__Msg *m =
                h.type == PR_FRAME_MSG ? pr_msg_unpack(payload, h.len) : NULL;
            if (!m)
                abort();
            on_msg(m, arg);
        }
        if (rc < 0)
            abort();
    }
}

/* Our end goes with a plain close: the daemon reads its end. */
static inline void fuzz_sock_close(struct fuzz_sock *k)
{
    close(k->fd);
    k->fd = -1;
    pr_frame_reader_fini(&k->rd);
}

/*
 * A frame of the input's own bytes: a length byte, then that many bytes
 * (or what is left) as a Msg frame's payload, which may be any garbage.
 * Returns the frame, which the caller frees, its length in *len, and in
 * *m what the payload unpacks to (NULL if nothing; pr_msg_free() it).
 */
static inline uint8_t *fuzz_raw_frame(struct fuzz_cursor *c, size_t *len,
                                      Pr__V1__Msg **m)
{
    size_t n = fuzz_take(c, 1);
    if (n > c->n)
        n = c->n;
    uint8_t *frame = malloc(PR_FRAME_HDR_LEN + n + 1);
    if (!frame)
        abort();
    pr_frame_hdr_encode(frame, (uint32_t)n, PR_FRAME_MSG, 0);
    memcpy(frame + PR_FRAME_HDR_LEN, c->p, n);
    c->p += n;
    c->n -= n;
    *m = pr_msg_unpack(frame + PR_FRAME_HDR_LEN, n);
    *len = PR_FRAME_HDR_LEN + n;
    return frame;
}

#endif
