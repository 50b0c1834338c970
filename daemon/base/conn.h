/* SPDX-License-Identifier: MIT */
/*
 * A framed stream connection on the daemon's loop (TCP to the scheduler and
 * between daemons, or a Unix socket to a trainer): reads frames
 * (proto/frame.h) and hands each to its owner; writes packed messages
 * (copied) and data frames (zero-copy, with a completion callback).
 *
 * A malformed frame (oversized length, unknown type, payload that is not a
 * Msg) closes the connection after one log line that names the peer and
 * the reason; nothing else on the loop is affected.
 *
 * Sealed (pr_conn_seal, after a keyed handshake): every frame after it,
 * both ways, is an AEAD record of seal.h, and one that fails to open
 * (altered, replayed, reordered, dropped, truncated) closes the
 * connection with -EBADMSG after one log line. A data frame is two
 * records, its prefix (the chunk header) and its payload, so that the
 * prefix is authentic before it says where the payload lands, and the
 * payload is opened in place there before on_data_end says it arrived.
 *
 * Ownership: pr_conn_create() allocates; the conn frees itself after
 * on_close() ran, which happens exactly once, after pr_conn_close() or an
 * error. Writes pending at close complete with an error status.
 */
#ifndef PR_CONN_H
#define PR_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/base/seal.h"
#include "proto/frame.h"

struct pr_auth_key;
struct pr_conn;
struct pr_seal;

struct pr_conn_ops {
    /* A control message; `m` is freed after the call. Return < 0 to close. */
    int (*on_msg)(struct pr_conn *c, const Pr__V1__Msg *m);
    /* A data frame payload (NULL: data frames are refused). */
    int (*on_data)(struct pr_conn *c, const uint8_t *p, size_t n);
    /* Once, when the connection is gone; status 0 for a local close. */
    void (*on_close)(struct pr_conn *c, int status);
    /*
     * Optional: data frames whose payload is read straight into the
     * owner's memory (a chunk into its place in a reduce's vector), not
     * into the read buffer and copied from there. Once the first
     * `data_prefix` payload bytes of a data frame are in (and the rest is
     * not), on_data_begin(prefix, payload bytes after it) answers 1 with
     * *dst (room for that many bytes) and *token, 0 to have the frame come
     * whole through on_data, or < 0 to close. Sealed, the payload lands in
     * a bounce buffer and is copied to *dst once it opened, unless the
     * answer is 2: *dst is memory nobody reads before on_data_end, where
     * it may land and open in place (no copy). After a 1, on_data_end runs
     * exactly once with that token: status 0 when all the bytes are at
     * *dst, or < 0 when the connection closed first (from pr_conn_close,
     * before it returns: no byte lands after). Nothing else is read from
     * the connection in between.
     */
    size_t data_prefix;
    int (*on_data_begin)(struct pr_conn *c, const uint8_t *prefix, size_t rest,
                         void **dst, void **token);
    void (*on_data_end)(struct pr_conn *c, void *token, int status);
};

typedef void (*pr_conn_write_cb)(void *arg, int status);

/*
 * Coalesced control writes (conn_batch.c), as Redis writes its replies
 * before it sleeps: a conn given a batch (pr_conn_set_batch) frames the
 * messages pr_conn_send gets during a loop turn into a buffer of its own,
 * and the batch writes each conn's buffer in one write() once the loop
 * ran its I/O callbacks (uv_check) or before it waits (uv_prepare, for
 * what timers sent). A scheduler answering READYs from many trainers of
 * a node, or a node sending its trainers' READYs, then costs the other
 * side one wakeup and one read for many messages, not one each.
 */
struct pr_conn_batch;

struct pr_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    const struct pr_conn_ops *ops;
    void *owner; /* the owner's object, for its callbacks */
    struct pr_frame_reader rd;
    char name[128]; /* peer, for logs: "10.0.0.2:7071" or "client 3" */
    int closing;
    int status; /* reason passed to on_close */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t last_rx_ms; /* loop time of the last frame received */
    /*
     * While a frame is handed to on_data/on_msg: how long it took to
     * arrive, from the read that brought its first bytes (or the end of
     * the frame before it) to the read that completed it, in ns; 0 when
     * it came whole in one read. For link rates (pr_link_rate_sample).
     */
    uint64_t rx_frame_ns;
    uint64_t rx_start_ns; /* uv_hrtime() when the pending frame began */
    /*
     * What one readiness of the socket may read before the loop serves
     * its other handles (PR_CONN_READ_BURST; conn.c alloc_cb), the bytes
     * read so far in this one, and the times a read stopped there. Set
     * `yield` when the budget stopped the run, so that read_cb takes the
     * ENOBUFS that follows for that and not for a lack of memory.
     */
    size_t read_burst;
    size_t burst;
    uint64_t read_yields;
    int yield;
    /* A payload being read into the owner's memory (on_data_begin). */
    struct {
        uint8_t *dst;
        size_t len, got;
        void *token;
        int active;
        int refused; /* the frame being assembled was answered 0 */
        /*
         * Sealed: the payload lands at `at`, the bounce buffer, and goes
         * to dst once it opened; its tag, and the frame header it is
         * bound to. In clear, `at` is dst.
         */
        uint8_t *at;
        uint8_t tag[PR_SEAL_TAG_LEN];
        size_t tag_got;
        uint8_t ad[PR_FRAME_HDR_LEN];
    } land;
    struct pr_seal *seal; /* NULL: frames in clear */
    void *transcript;     /* the handshake's hash until sealed, or NULL */
    /* Sealed: the data frame being assembled had its prefix opened. */
    int prefix_open;
    /* pr_conn_wipe_msg: zero the frame being handed to on_msg after it. */
    int wipe_msg;
    /*
     * Set by the owner of a connection whose frames may carry a secret
     * (a trainer's, whose hello has its job's key): the read buffer is
     * zeroed when the connection closes, with whatever part of a frame,
     * or frame that did not decode, it still holds.
     */
    int wipe_rx;
    int auth_failed; /* closed for a record that did not authenticate */
    uint8_t *bounce; /* sealed payloads land here, bounce_cap bytes */
    size_t bounce_cap;
    uint64_t frames_landed; /* data frames read straight into place */
    /* Coalesced writes (pr_conn_set_batch): framed, not yet written. */
    struct pr_conn_batch *batch;
    /* On batch's list of conns to write while out_len > 0. */
    struct pr_conn *batch_next, **batch_pprev;
    uint8_t *out;
    size_t out_len, out_cap;
    /*
     * The I/O thread that moves this connection's bulk bytes
     * (pr_conn_set_io, conn_io.h) and its slot there; what the thread
     * holds of it: writes (how many, their bytes) and a read (a landing
     * payload's rest, with libuv's reading stopped); and the writes that
     * the close took back, reported before on_close as libuv's are.
     */
    struct pr_conn_io *io;
    struct pr_io_slot *io_slot;
    uint32_t io_tx_n;
    size_t io_tx_bytes;
    int io_rx;
    struct pr_io_op *io_left;
    uint64_t io_ops; /* operations the thread did for it */
};

/* Allocates an unconnected TCP conn (uv_tcp_init done). NULL: no memory. */
struct pr_conn *pr_conn_create_tcp(uv_loop_t *loop, size_t max_frame,
                                   const struct pr_conn_ops *ops, void *owner);
struct pr_conn *pr_conn_create_pipe(uv_loop_t *loop, size_t max_frame,
                                    const struct pr_conn_ops *ops, void *owner);
/* Starts reading (after accept or connect). */
int pr_conn_start(struct pr_conn *c);
/*
 * Called from on_msg: the bytes of the frame it was handed are zeroed in
 * the read buffer once on_msg returns (a trainer's Hello, which carries
 * its job's key), so that they do not stay there until overwritten. The
 * unpacked message is the handler's to wipe.
 */
void pr_conn_wipe_msg(struct pr_conn *c);
/*
 * Connects a TCP conn to host:port; cb(conn, status) runs once; on success
 * reading has started. On failure the caller still owns `c` and must close.
 */
int pr_conn_connect(struct pr_conn *c, const char *host, uint16_t port,
                    void (*cb)(struct pr_conn *c, int status));

/*
 * Marks a TCP conn's packets low-delay (IPTOS_LOWDELAY and the socket
 * priority TC_PRIO_INTERACTIVE: a host's pfifo_fast and a network that
 * honours the byte send them before bulk data); 0 or a negative errno.
 * conn_tos.c says where it is used.
 */
int pr_conn_lowdelay(struct pr_conn *c);

int pr_conn_send(struct pr_conn *c, const Pr__V1__Msg *m);
/* A data frame: `hdr` is copied, `data` must live until cb. */
int pr_conn_send_data(struct pr_conn *c, const void *hdr, size_t hdr_len,
                      const void *data, size_t len, pr_conn_write_cb cb,
                      void *arg);
/* Sends an Error message, then closes. */
void pr_conn_fail(struct pr_conn *c, int code, const char *reason);
void pr_conn_close(struct pr_conn *c, int status);
/*
 * Closes without calling the owner back: for an owner that goes away
 * before the close callback could run.
 */
void pr_conn_detach_close(struct pr_conn *c);
/*
 * From now until pr_conn_seal, the frames sent and received are hashed
 * into the handshake's transcript (seal.h): a side that will seal starts
 * it before the handshake's first frame. 0 or -ENOMEM.
 */
int pr_conn_transcript_start(struct pr_conn *c);
/*
 * Seals the connection with `cipher` (seal.h) under keys from `key`, the
 * two nonces and the transcript: the frames after the last one this side
 * sent (role 'S': its Welcome) or received (role 'C': the Welcome) are
 * records. 0, -EINVAL (no transcript, or a cipher this side lacks) or
 * -ENOMEM; the caller closes the connection on an error.
 */
int pr_conn_seal(struct pr_conn *c, uint32_t cipher,
                 const struct pr_auth_key *key, char role,
                 const uint8_t *s_nonce, const uint8_t *c_nonce);
/*
 * From now on c's large payloads are read, and its large data frames
 * written, by io's thread (conn_io.h), what is written after such a frame
 * too while it waits; c is a TCP connection on io's loop. 0, -EALREADY,
 * or a negative errno (c then works on the loop alone, as before).
 */
int pr_conn_set_io(struct pr_conn *c, struct pr_conn_io *io);
/*
 * Bytes queued to be written: libuv's queue, a batch's buffer, and what
 * the I/O thread holds.
 */
size_t pr_conn_write_queue(const struct pr_conn *c);

/* A batch on loop (its handles unreferenced), or NULL: no memory. */
struct pr_conn_batch *pr_conn_batch_create(uv_loop_t *loop);
/*
 * Writes what waits and frees the batch once its handles closed; the
 * conns given it are closed (pr_conn_close leaves its batch at once) or
 * given NULL before. NULL is a no-op.
 */
void pr_conn_batch_close(struct pr_conn_batch *b);
/*
 * From now on c's messages wait in its buffer for b's next flush (NULL:
 * written at once again, what waits written first).
 */
void pr_conn_set_batch(struct pr_conn *c, struct pr_conn_batch *b);
/* Writes c's buffer now (before a close, or another kind of frame). */
void pr_conn_flush(struct pr_conn *c);

/*
 * The largest frame a connection may send before its hello passes (the
 * scheduler's and a node's peer listener): anyone can connect, and a
 * reader buffers a whole frame, so this is far below PR_CTRL_MAX_FRAME.
 */
#define PR_HELLO_MAX_FRAME 4096

/* Control bytes a peer may leave unread before the conn is closed. */
#define PR_CONN_MAX_QUEUED (8u << 20)

/*
 * What a connection reads while its socket stays readable before the
 * loop serves its other handles (pr_conn.read_burst). libuv reads until
 * a read comes back short, and a chunk lands in one read of up to its
 * whole payload, so a connection whose socket held megabytes (a large
 * reduce's, where the receiving daemon is the bottleneck) took the loop
 * for milliseconds while every other readable connection waited: a
 * link's express connection too (xport_streams.c). No read is larger,
 * and once a readiness's reads reach it the next one stops (an empty
 * buffer, which libuv reports as UV_ENOBUFS, leaving the socket
 * readable) and goes on in the next loop turn, after the others. A
 * megabyte is reads of a tenth of a millisecond or more: few enough
 * turns not to cost a large transfer its rate, and a chunk of the
 * default 1 MiB lands whole in one readiness.
 */
#define PR_CONN_READ_BURST (1u << 20)

/* The Msg to use in a frame: zero-initialised, with a body set by caller. */
#define PR_MSG_INIT PR__V1__MSG__INIT
/* One body's envelope in one expression: PR_MSG_OF in proto/frame.h. */

#endif
