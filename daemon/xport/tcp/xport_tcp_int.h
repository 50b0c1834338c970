/* SPDX-License-Identifier: MIT */
/*
 * What xport_tcp.c (peer links: connecting, the hello exchange, chunks in
 * and out) and xport_accept.c (the listener: connections before their
 * hello, and the deadlines of link setup) share. Private to the TCP
 * transport: other modules use xport_tcp.h.
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
/* Room for listed peers' further streams (x streams - 1), at most. */
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

/* A send posted while the link was not up. */
struct pending {
    struct pending *next;
    struct pr_chunk_hdr h;
    const float *data;
    pr_send_cb cb;
    void *arg;
};

/*
 * One of a link's connections beyond its first (transport.streams > 1),
 * xport_streams.c. The dialling side owns it through its own hello
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
    uv_timer_t retry;
    uint32_t backoff_ms;
    float *abuf; /* aligned copy for a payload at an odd address */
    size_t abuf_len;
    struct pr_rdma_qp *qp; /* data over RDMA when set and the link is up */
    uint64_t since_ms;     /* when the current state (or queueing) began */
    uint8_t our_nonce[PR_AUTH_NONCE_LEN];      /* outgoing: in our hello */
    uint8_t peer_challenge[PR_AUTH_NONCE_LEN]; /* outgoing: the peer's */
    /* The link's connections: conn, then more[0 .. nstreams - 2]. */
    uint32_t nstreams;   /* agreed in the welcome; 1 before */
    uint32_t streams_up; /* of more[] */
    uint32_t tx_last;    /* the stream the last chunk went on */
    uint64_t link_id;    /* the dialling side's, repeated by each stream */
    uint64_t streams_ms; /* when P_STREAMS began: its deadline starts */
    struct tstream more[PR_TCP_STREAMS_MAX - 1];
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
    uint32_t streams; /* transport.streams: wanted per link */
    uv_tcp_t listener;
    int listening;
    struct pr_link_sink sink; /* the engine's, from the node */
    struct tpeer *peers;
    int closing;
    int handles; /* open handles that still reference x */
    uint64_t bytes_sent, bytes_recv;
    struct pr_rdma *rdma; /* NULL: TCP only */
    int rdma_required;    /* transport = rdma: refuse peers without it */
    struct pr_strangers strangers; /* of struct stranger */
    const struct pr_auth_key *key; /* NULL: no cluster key */
    uv_timer_t sweep;              /* hello and link-setup deadlines */
};

/* xport_tcp.c */
extern const struct pr_conn_ops pr_tcp_peer_ops;
struct tpeer *pr_tcp_peer_find(struct pr_tcp_xport *x, uint32_t id);
/* A peer the scheduler has not listed yet (addr may be ""): NULL on ENOMEM. */
struct tpeer *pr_tcp_peer_add(struct pr_tcp_xport *x, uint32_t id,
                              const char *addr);
void pr_tcp_peer_drop_qp(struct tpeer *p);
void pr_tcp_peer_link_down(struct tpeer *p, int status);
/* The link carries chunks: queued sends go. */
void pr_tcp_peer_up(struct tpeer *p);
void pr_tcp_peer_fail_pending(struct tpeer *p, int status);
/*
 * Answers the peer's challenge on c, one of p's connections: the hello
 * with our id and the key's proof (the nonces kept for the welcome's
 * check), the link's streams, this one's index and the link id, and `ri`
 * when it offers RDMA. 0, or < 0 (logged).
 */
int pr_tcp_send_hello(struct tpeer *p, struct pr_conn *c,
                      const Pr__V1__Challenge *ch,
                      uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                      uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                      uint32_t streams, uint32_t stream, Pr__V1__RdmaInfo *ri);
/*
 * The dialling side's check of a Welcome on one of p's connections
 * (`stream`, for logs): our protocol version, the expected node, the
 * key's proof against the nonces of that connection's hello. 0, or
 * -EPROTO / -EACCES (logged).
 */
int pr_tcp_check_welcome(const struct tpeer *p, const Pr__V1__Welcome *w,
                         const uint8_t our_nonce[PR_AUTH_NONCE_LEN],
                         const uint8_t peer_challenge[PR_AUTH_NONCE_LEN],
                         uint32_t stream);
/* The link is lost with all its connections, as if its first closed. */
void pr_tcp_peer_lost(struct tpeer *p, int status);

/* xport_streams.c */
/* Dials connections 1..nstreams-1 after the first's welcome: 0 or < 0. */
int pr_tcp_streams_dial(struct tpeer *p);
/*
 * Accepting side: a checked hello naming stream > 0 joins its link (the
 * welcome goes out on c, whose owner becomes p): 0, or < 0 when no link
 * of that peer waits for it (c is then failed, the link left as it is).
 */
int pr_tcp_streams_join(struct pr_tcp_xport *x, struct pr_conn *c,
                        const Pr__V1__Hello *h, const uint8_t *proof,
                        size_t plen);
/* Closes every connection but the first (detached: no callbacks). */
void pr_tcp_streams_drop(struct tpeer *p);
/* c is one of p's connections beyond the first: its tstream, or NULL. */
struct tstream *pr_tcp_streams_of(struct tpeer *p, const struct pr_conn *c);
/* The connection the next chunk goes on: the least backed up. */
struct pr_conn *pr_tcp_streams_pick(struct tpeer *p);
/*
 * How many of p's connections share its bandwidth now: `self`, which
 * just took a whole chunk, and those inside a frame.
 */
uint32_t pr_tcp_streams_busy(struct tpeer *p, const struct pr_conn *self);
/* The welcome on c: our id, the proof, our queue pair, the streams. */
int pr_tcp_send_welcome(struct pr_tcp_xport *x, struct pr_conn *c,
                        const uint8_t *proof, size_t plen, Pr__V1__RdmaInfo *ri,
                        uint32_t streams);

#endif
