/* SPDX-License-Identifier: MIT */
/*
 * What the TCP transport's files share. Private to it: other modules use
 * xport_tcp.h. The files call each other in layers, each only those
 * below it:
 *
 *   xport_tcp.c        the public calls: create, peers, destroy, stats
 *   xport_accept.c     the listener: strangers, deadlines of link setup
 *        |      \
 *        v       v
 *   xport_handshake.c  hello and welcome, both sides, every connection;
 *        |             a link's dial, loss and redial
 *        v
 *   xport_link.c       a peer link for the engine: sends, queue, up,
 *        |             chunks in
 *        v
 *   xport_fair.c       a link's chunks from its groups in turn
 *        |
 *        v
 *   xport_streams.c    a link's further connections: which, and which
 *                      takes the next chunk
 *
 * xport_tcp.c calls xport_handshake.c, xport_link.c and xport_streams.c
 * (and owns xport_fair.c's check handle); xport_accept.c calls
 * xport_handshake.c and xport_link.c.
 */
#ifndef PR_XPORT_TCP_INT_H
#define PR_XPORT_TCP_INT_H

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/conn.h"
#include "daemon/xport/rdma/rdma.h"
#include "daemon/base/stranger.h"
#include "daemon/xport/tcp/xport_tcp.h"

/* A lost peer link is redialled after this, doubling up to the max. */
#define PEER_BACKOFF_MIN_MS 50
#define PEER_BACKOFF_MAX_MS 2000
/* How often the hello and link-setup deadlines are swept. */
#define PEER_SWEEP_MS 250
/*
 * Incoming connections before their hello: at most STRANGERS_MAX, and
 * STRANGERS_PER_SOURCE from one IP address (stranger.h), each for
 * connect_timeout_ms; both with room for the listed peers' further
 * streams (xport_accept.c).
 */
#define STRANGERS_MAX        64
#define STRANGERS_PER_SOURCE 32
/*
 * Room for listed peers' further streams (x streams - 1, and the express
 * one), at most.
 */
#define STRANGERS_EXTRA_MAX 256

enum pstate {
    P_DOWN,
    P_CONNECTING, /* TCP connect in progress (outgoing) */
    P_CHALLENGE,  /* connected; waiting for the peer's challenge */
    P_HELLO,      /* hello sent, waiting for welcome (outgoing) */
    P_RDMA_WAIT,  /* welcome sent with RDMA; waiting for RdmaReady */
    P_STREAMS,    /* first connection welcomed; the others joining */
    P_UP,
};

struct txflow;

/*
 * A send posted while the link was not up (tpeer.q), or waiting for its
 * group's turn on a link that is (xport_fair.c).
 */
struct pending {
    struct pending *next;
    struct pr_chunk_hdr h;
    const void *data;
    pr_send_cb cb;
    void *arg;
};

/*
 * One of a link's connections beyond its first (transport.streams > 1):
 * xport_streams.c, and its hellos xport_handshake.c. The dialling side
 * owns it through its own hello
 * exchange (owner: this struct); once welcomed, or on the accepting side
 * once joined, its conn carries chunks as the first one does (owner: the
 * tpeer). The first connection stays the link: its close, or any
 * stream's, takes the whole link down.
 */
struct tstream {
    struct tpeer *p;
    uint32_t index;       /* 1.. in the link's hellos */
    struct pr_conn *conn; /* NULL: not open */
    int hello_sent;       /* dialling: the challenge was answered */
    int up;               /* carries chunks */
    uint8_t our_nonce[PR_AUTH_NONCE_LEN];
    uint8_t peer_challenge[PR_AUTH_NONCE_LEN];
    uint32_t cipher; /* dialling: the one its hello picked (seal.h) */
};

struct tpeer {
    struct pr_link base;
    struct pr_tcp_xport *x;
    struct tpeer *next;
    char addr[128];
    struct pr_conn *conn;
    enum pstate state;
    int outgoing; /* this side connects (self > node_id) */
    int listed;
    struct pending *q, **qtail;
    struct txflow *tx_ring; /* xport_fair.c: groups with chunks waiting */
    uv_timer_t retry;
    uint32_t backoff_ms;
    void *abuf; /* aligned copy for a payload at an odd address */
    size_t abuf_len;
    struct pr_rdma_qp *qp; /* data over RDMA when set and the link is up */
    uint64_t since_ms;     /* when the current state (or queueing) began */
    uint8_t our_nonce[PR_AUTH_NONCE_LEN];      /* outgoing: in our hello */
    uint8_t peer_challenge[PR_AUTH_NONCE_LEN]; /* outgoing: the peer's */
    uint32_t cipher; /* outgoing: the one our hello picked (seal.h) */
    /*
     * The link's connections: conn, then more[0 .. nstreams - 2]; with
     * `express`, the last of them is the express one (xport_streams.c)
     * and the others, nstreams - 1, carry the rest.
     */
    uint32_t nstreams;   /* agreed in the welcome; 1 before */
    int express;         /* agreed in the welcome; 0 before */
    uint32_t streams_up; /* of more[] */
    uint32_t tx_last;    /* the stream the last chunk went on */
    uint64_t link_id;    /* the dialling side's, repeated by each stream */
    uint64_t streams_ms; /* when P_STREAMS began: its deadline starts */
    struct tstream more[PR_TCP_STREAMS_MAX]; /* room for the express */
};

/*
 * An incoming connection that has not said hello yet: its conn's owner
 * until the hello passes, freed then or when the conn closes.
 */
struct stranger {
    struct pr_stranger base; /* on x->strangers */
    struct pr_tcp_xport *x;
    struct pr_conn *conn;
    uint8_t challenge[PR_AUTH_NONCE_LEN]; /* the challenge it was sent */
};

struct pr_tcp_xport {
    uv_loop_t *loop;
    uint32_t self;
    size_t max_frame;
    uint32_t connect_timeout_ms;
    uint32_t streams;     /* transport.streams: wanted per link */
    size_t express_bytes; /* transport.express_kb, bytes; 0: no express */
    uv_tcp_t listener;
    int listening;
    struct pr_link_sink sink; /* the engine's, from the node */
    struct tpeer *peers;
    int closing;
    int handles; /* open handles that still reference x */
    uint64_t bytes_sent, bytes_recv;
    uint64_t auth_failures; /* links ended by a record that did not open */
    struct pr_rdma *rdma;   /* NULL: TCP only */
    int rdma_required;      /* transport = rdma: refuse peers without it */
    struct pr_strangers strangers;       /* of struct stranger */
    const struct pr_auth_key *key;       /* NULL: no cluster key */
    uv_timer_t sweep;                    /* hello and link-setup deadlines */
    uv_check_t pump;                     /* xport_fair.c: while chunks wait */
    int io_mode;                         /* transport.io_thread */
    int io_shared;                       /* pr_tcp_xport_set_io_shared */
    struct pr_conn_io *io;               /* started at the first link up */
    uint64_t io_recv_gone, io_sent_gone; /* by a thread since stopped */
};

/*
 * xport_link.c: the peer of that id, or NULL; a peer the scheduler has not
 * listed yet (addr may be ""): NULL on ENOMEM; its queue pair closed; its
 * queued sends completed with status; the link carries chunks: queued
 * sends go. And the chunk frames of a peer's connections (pr_conn_ops).
 */
struct tpeer *pr_tcp_peer_find(struct pr_tcp_xport *x, uint32_t id);
struct tpeer *pr_tcp_peer_add(struct pr_tcp_xport *x, uint32_t id,
                              const char *addr);
void pr_tcp_peer_drop_qp(struct tpeer *p);
void pr_tcp_peer_fail_pending(struct tpeer *p, int status);
void pr_tcp_peer_up(struct tpeer *p);
int pr_tcp_peer_on_data(struct pr_conn *c, const uint8_t *b, size_t n);
int pr_tcp_peer_on_data_begin(struct pr_conn *c, const uint8_t *prefix,
                              size_t rest, void **dst, void **token);
void pr_tcp_peer_on_data_end(struct pr_conn *c, void *token, int status);

/*
 * xport_handshake.c: dial p's link (its first connection; the hello
 * exchange follows, then the further streams), and the message handler
 * of a connection that has not said hello yet (a struct stranger's, from
 * xport_accept.c): its hello checked, then a welcome and the conn handed
 * to its peer, or the conn failed.
 */
void pr_tcp_handshake_dial(struct tpeer *p);
int pr_tcp_handshake_accept(struct pr_conn *c, const Pr__V1__Msg *m);

/*
 * xport_fair.c: a chunk on p, which is up over TCP: to libuv now, or
 * queued for its group's turn (0, cb will run; or a negative errno, it
 * will not). Every queued chunk of p failed with status. A connection's
 * kernel buffer of unsent bytes kept small (TCP_NOTSENT_LOWAT).
 */
int pr_tcp_fair_send(struct tpeer *p, const struct pr_chunk_hdr *h,
                     const void *data, pr_send_cb cb, void *arg);
void pr_tcp_fair_fail(struct tpeer *p, int status);
void pr_tcp_fair_lowat(struct pr_conn *c);

/*
 * xport_tcp.c: whether the I/O thread takes the bytes now
 * (transport.io_thread, and the node's jobs).
 */
int pr_tcp_xport_io_wanted(const struct pr_tcp_xport *x);

/* xport_streams.c */
/* Closes every connection but the first (detached: no callbacks). */
void pr_tcp_streams_drop(struct tpeer *p);
/* c is one of p's connections beyond the first: its tstream, or NULL. */
struct tstream *pr_tcp_streams_of(struct tpeer *p, const struct pr_conn *c);
/*
 * The connection the next chunk goes on: p's express one for a chunk
 * that pr_tcp_streams_express() says is one of a small reduce's, else
 * the least backed up of the others.
 */
struct pr_conn *pr_tcp_streams_pick(struct tpeer *p,
                                    const struct pr_chunk_hdr *h);
/* h's reduce is small enough for p's express connection, which p has. */
int pr_tcp_streams_express(const struct tpeer *p, const struct pr_chunk_hdr *h);
/*
 * How many of p's connections share its bandwidth now: `self`, which
 * just took a whole chunk, and those inside a frame.
 */
uint32_t pr_tcp_streams_busy(struct tpeer *p, const struct pr_conn *self);

#endif
