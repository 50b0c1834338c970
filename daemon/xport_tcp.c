#include "daemon/xport_tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/auth.h"
#include "daemon/conf.h"
#include "daemon/conn.h"
#include "daemon/engine.h"
#include "daemon/log.h"
#include "daemon/rdma.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define HELLO_MAX      4096
#define SWEEP_MS       250

enum pstate {
    P_DOWN,
    P_CONNECTING, /* TCP connect in progress (outgoing) */
    P_CHALLENGE,  /* connected; waiting for the peer's challenge */
    P_HELLO,      /* hello sent, waiting for welcome (outgoing) */
    P_RDMA_WAIT,  /* welcome sent with RDMA; waiting for RdmaReady */
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
    uint8_t nc[PR_AUTH_NONCE_LEN]; /* outgoing: our nonce */
    uint8_t ns[PR_AUTH_NONCE_LEN]; /* outgoing: the peer's challenge */
};

/* An incoming connection that has not said hello yet. */
struct stranger {
    struct stranger *next;
    struct pr_conn *conn;
    uint64_t expires_ms;
    uint8_t ns[PR_AUTH_NONCE_LEN]; /* the challenge it was sent */
};

struct pr_tcp_xport {
    uv_loop_t *loop;
    uint32_t self;
    size_t max_frame;
    uint32_t connect_timeout_ms;
    uv_tcp_t listener;
    int listening;
    struct pr_engine *engine;
    struct tpeer *peers;
    int closing;
    int handles; /* open handles that still reference x */
    uint64_t bytes_sent, bytes_recv;
    struct pr_rdma *rdma; /* NULL: TCP only */
    int rdma_required;    /* transport = rdma: refuse peers without it */
    struct stranger *strangers;
    const struct pr_auth_key *key; /* NULL: no cluster key */
    uv_timer_t sweep;              /* hello and link-setup deadlines */
};

static const struct pr_link_ops tcp_link_ops;
static const struct pr_conn_ops peer_ops;
static const struct pr_conn_ops stranger_ops;
static void start_connect(struct tpeer *p);
static struct tpeer *find_peer(struct pr_tcp_xport *x, uint32_t id);
static int on_challenge(struct tpeer *p, struct pr_conn *c,
                        const Pr__V1__Challenge *ch);

struct pr_tcp_xport *pr_tcp_xport_create(uv_loop_t *loop, uint32_t self,
                                         size_t max_chunk_bytes,
                                         uint32_t connect_timeout_ms)
{
    struct pr_tcp_xport *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->loop = loop;
    x->self = self;
    x->max_frame = max_chunk_bytes + PR_CHUNK_HDR_LEN + HELLO_MAX;
    x->connect_timeout_ms = connect_timeout_ms;
    uv_tcp_init(loop, &x->listener);
    x->listener.data = x;
    uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    x->handles = 2;
    return x;
}

void pr_tcp_xport_set_engine(struct pr_tcp_xport *x, struct pr_engine *e)
{
    x->engine = e;
}

static void rdma_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const float *data)
{
    struct pr_tcp_xport *x = ctx;
    if (x->engine)
        pr_engine_on_chunk(x->engine, node, h, data);
}

/* A queue pair failed: drop the whole link (and reconnect from scratch). */
static void rdma_on_error(void *ctx, uint32_t node, int status)
{
    struct pr_tcp_xport *x = ctx;
    struct tpeer *p = find_peer(x, node);
    if (p && p->conn)
        pr_conn_close(p->conn, status);
}

static const struct pr_rdma_ops rdma_ops = {
    .on_chunk = rdma_on_chunk,
    .on_error = rdma_on_error,
};

const struct pr_rdma_ops *pr_tcp_xport_rdma_ops(void)
{
    return &rdma_ops;
}

void pr_tcp_xport_set_rdma(struct pr_tcp_xport *x, struct pr_rdma *r,
                           int required)
{
    x->rdma = r;
    x->rdma_required = required;
}

void pr_tcp_xport_set_key(struct pr_tcp_xport *x, const struct pr_auth_key *key)
{
    x->key = key;
}

void pr_tcp_xport_set_self(struct pr_tcp_xport *x, uint32_t self)
{
    x->self = self;
}

static struct tpeer *find_peer(struct pr_tcp_xport *x, uint32_t id)
{
    for (struct tpeer *p = x->peers; p; p = p->next)
        if (p->base.node_id == id)
            return p;
    return NULL;
}

struct pr_link *pr_tcp_xport_link(struct pr_tcp_xport *x, uint32_t node_id)
{
    struct tpeer *p = find_peer(x, node_id);
    return p && p->listed ? &p->base : NULL;
}

static void fail_pending(struct tpeer *p, int status)
{
    while (p->q) {
        struct pending *s = p->q;
        p->q = s->next;
        s->cb(s->arg, status);
        free(s);
    }
    p->qtail = &p->q;
}

static void flush_pending(struct tpeer *p)
{
    while (p->q && p->state == P_UP) {
        struct pending *s = p->q;
        p->q = s->next;
        if (!p->q)
            p->qtail = &p->q;
        int rc = tcp_link_ops.send(&p->base, &s->h, s->data, s->cb, s->arg);
        if (rc < 0)
            s->cb(s->arg, rc);
        free(s);
    }
}

static int link_send(struct pr_link *l, const struct pr_chunk_hdr *h,
                     const float *data, pr_send_cb cb, void *arg)
{
    struct tpeer *p = (struct tpeer *)l;
    if (!p->listed)
        return -ENOTCONN;
    if (p->state != P_UP) {
        struct pending *s = malloc(sizeof(*s));
        if (!s)
            return -ENOMEM;
        if (!p->q)
            p->since_ms = uv_now(p->x->loop);
        *s = (struct pending){.h = *h, .data = data, .cb = cb, .arg = arg};
        *p->qtail = s;
        p->qtail = &s->next;
        return 0;
    }
    if (p->qp) {
        struct pr_link *rl = pr_rdma_qp_link(p->qp);
        return rl->ops->send(rl, h, data, cb, arg);
    }
    uint8_t hdr[PR_CHUNK_HDR_LEN];
    pr_chunk_hdr_encode(hdr, h);
    size_t len = (size_t)h->nfloats * sizeof(float);
    int rc = pr_conn_send_data(p->conn, hdr, sizeof(hdr), data, len, cb, arg);
    if (rc == 0) {
        p->base.bytes_sent += len;
        p->x->bytes_sent += len;
    }
    return rc;
}

/*
 * Closing the connection fails the pending queue, the libuv writes and the
 * queue pair (link_down), and the peer notices the close.
 */
static void link_reset(struct pr_link *l, int status)
{
    struct tpeer *p = (struct tpeer *)l;
    if (p->conn && p->state == P_UP) {
        pr_warn("peer node %u (%s): sends stalled: dropping the link",
                p->base.node_id, p->addr);
        pr_conn_fail(p->conn, status, "sends stalled");
    }
}

static const struct pr_link_ops tcp_link_ops = {.send = link_send,
                                                .reset = link_reset};

static void retry_cb(uv_timer_t *t)
{
    struct tpeer *p = t->data;
    if (p->state == P_CONNECTING || p->state == P_CHALLENGE ||
        p->state == P_HELLO) {
        /* The connect deadline passed: give up on this attempt. */
        pr_warn("peer node %u at %s: no answer within %u ms", p->base.node_id,
                p->addr, p->x->connect_timeout_ms);
        pr_conn_close(p->conn, -ETIMEDOUT);
        return;
    }
    if (p->state == P_DOWN && p->outgoing && p->listed)
        start_connect(p);
}

static void drop_qp(struct tpeer *p)
{
    if (p->qp) {
        pr_rdma_qp_destroy(p->qp);
        p->qp = NULL;
    }
}

static void link_down(struct tpeer *p, int status)
{
    p->conn = NULL;
    p->state = P_DOWN;
    drop_qp(p);
    if (p->x->engine)
        pr_engine_link_down(p->x->engine, p->base.node_id,
                            status ? status : -ECONNRESET);
    fail_pending(p, status ? status : -ECONNRESET);
    if (p->outgoing && p->listed && !p->x->closing) {
        uv_timer_start(&p->retry, retry_cb, p->backoff_ms, 0);
        p->backoff_ms *= 2;
        if (p->backoff_ms > BACKOFF_MAX_MS)
            p->backoff_ms = BACKOFF_MAX_MS;
    }
}

static void peer_on_close(struct pr_conn *c, int status)
{
    struct tpeer *p = c->owner;
    if (p->conn != c)
        return; /* a connection this peer already replaced */
    if (p->state == P_UP)
        pr_warn("peer node %u (%s): link down: %s", p->base.node_id, p->addr,
                status ? strerror(-status) : "closed");
    link_down(p, status);
}

static void up(struct tpeer *p)
{
    p->state = P_UP;
    p->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_stop(&p->retry);
    if (p->qp)
        pr_info("peer node %u (%s): link up (rdma, device %s; tcp for "
                "control)",
                p->base.node_id, p->addr, pr_rdma_device(p->x->rdma));
    else
        pr_info("peer node %u (%s): link up (tcp)", p->base.node_id, p->addr);
    flush_pending(p);
}

/*
 * The connecting side got the welcome: with the peer's RDMA info, bring
 * the queue pair to RTS and tell the peer it may write; without it, the
 * data goes over this TCP link (unless RDMA is required).
 */
static int welcomed(struct tpeer *p, const Pr__V1__RdmaInfo *ri)
{
    if (!ri || !p->qp) {
        drop_qp(p);
        if (p->x->rdma_required) {
            pr_err("peer node %u (%s) offers no RDMA and transport = rdma: "
                   "closing",
                   p->base.node_id, p->addr);
            return -EPROTONOSUPPORT;
        }
        up(p);
        return 0;
    }
    int rc = pr_rdma_qp_connect(p->qp, ri);
    if (rc < 0)
        return rc;
    Pr__V1__Msg m = PR_MSG_INIT;
    Pr__V1__RdmaReady rr = PR__V1__RDMA_READY__INIT;
    m.body_case = PR__V1__MSG__BODY_RDMA_READY;
    m.rdma_ready = &rr;
    rc = pr_conn_send(p->conn, &m);
    if (rc < 0)
        return rc;
    pr_rdma_qp_start(p->qp);
    up(p);
    return 0;
}

static int peer_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct tpeer *p = c->owner;
    if (p->state == P_CHALLENGE && m->body_case == PR__V1__MSG__BODY_CHALLENGE)
        return on_challenge(p, c, m->challenge);
    if (p->state == P_HELLO && m->body_case == PR__V1__MSG__BODY_WELCOME) {
        if (m->welcome->version != PR_PROTO_VERSION ||
            m->welcome->id != p->base.node_id) {
            pr_warn("peer %s: welcome from node %u version %u, expected node "
                    "%u version %u: closing",
                    p->addr, m->welcome->id, m->welcome->version,
                    p->base.node_id, PR_PROTO_VERSION);
            return -EPROTO;
        }
        const char *why;
        if (pr_auth_check_welcome(p->x->key, p->nc, p->ns, &m->welcome->auth,
                                  &why) < 0) {
            pr_err("peer node %u (%s): %s: closing", p->base.node_id, p->addr,
                   why);
            return -EACCES;
        }
        return welcomed(p, m->welcome->rdma);
    }
    if (p->state == P_RDMA_WAIT &&
        m->body_case == PR__V1__MSG__BODY_RDMA_READY) {
        pr_rdma_qp_start(p->qp);
        up(p);
        return 0;
    }
    if (m->body_case == PR__V1__MSG__BODY_ERROR) {
        pr_warn("peer node %u: error %d: %s", p->base.node_id, m->error->code,
                m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    }
    pr_warn("peer node %u: unexpected %s message: closing", p->base.node_id,
            pr_msg_name(m));
    return -EPROTO;
}

static int peer_on_data(struct pr_conn *c, const uint8_t *b, size_t n)
{
    struct tpeer *p = c->owner;
    struct pr_chunk_hdr h;
    if (p->state != P_UP || n < PR_CHUNK_HDR_LEN) {
        pr_warn("peer node %u: data frame of %zu bytes before the link was "
                "up or shorter than a chunk header: closing",
                p->base.node_id, n);
        return -EPROTO;
    }
    pr_chunk_hdr_decode(b, &h);
    size_t len = n - PR_CHUNK_HDR_LEN;
    if (len != (size_t)h.nfloats * sizeof(float)) {
        pr_warn("peer node %u: chunk says %u floats but carries %zu bytes: "
                "closing",
                p->base.node_id, h.nfloats, len);
        return -EPROTO;
    }
    const uint8_t *payload = b + PR_CHUNK_HDR_LEN;
    const float *data = (const float *)(const void *)payload;
    /*
     * An empty chunk has nothing to copy (and abuf may still be NULL,
     * which memcpy must not be given even for 0 bytes).
     */
    if (len > 0 && (uintptr_t)payload % _Alignof(float) != 0) {
        if (p->abuf_len < len) {
            float *nb = realloc(p->abuf, len);
            if (!nb)
                return -ENOMEM;
            p->abuf = nb;
            p->abuf_len = len;
        }
        memcpy(p->abuf, payload, len);
        data = p->abuf;
    }
    p->base.bytes_recv += len;
    p->x->bytes_recv += len;
    if (p->x->engine)
        pr_engine_on_chunk(p->x->engine, p->base.node_id, &h, data);
    return 0;
}

static const struct pr_conn_ops peer_ops = {
    .on_msg = peer_on_msg,
    .on_data = peer_on_data,
    .on_close = peer_on_close,
};

static void connect_cb(struct pr_conn *c, int status)
{
    struct tpeer *p = c->owner;
    if (p->conn != c)
        return;
    if (status < 0) {
        pr_dbg("peer node %u (%s): connect: %s", p->base.node_id, p->addr,
               uv_strerror(status));
        pr_conn_close(c, status);
        return;
    }
    /* The accepting side speaks first: its challenge (auth.h). */
    p->state = P_CHALLENGE;
}

/* The peer's challenge came: offer RDMA and prove the key in the hello. */
static int on_challenge(struct tpeer *p, struct pr_conn *c,
                        const Pr__V1__Challenge *ch)
{
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why;
    int rc = pr_auth_answer(p->x->key, ch, p->ns, p->nc, buf, &len, &why);
    if (rc < 0) {
        pr_err("peer node %u (%s): %s", p->base.node_id, p->addr, why);
        return rc;
    }
    Pr__V1__Msg m = PR_MSG_INIT;
    Pr__V1__Hello hello = PR__V1__HELLO__INIT;
    hello.auth.data = buf;
    hello.auth.len = len;
    hello.version = PR_PROTO_VERSION;
    hello.role = PR__V1__ROLE__ROLE_NODE;
    hello.node_id = p->x->self;
    Pr__V1__RdmaInfo ri;
    drop_qp(p);
    if (p->x->rdma &&
        pr_rdma_qp_create(p->x->rdma, p->base.node_id, &p->qp) == 0) {
        pr_rdma_qp_info(p->qp, &ri);
        hello.rdma = &ri;
    } else if (p->x->rdma_required) {
        return -EPROTONOSUPPORT;
    }
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &hello;
    rc = pr_conn_send(c, &m);
    if (rc < 0)
        return rc;
    p->state = P_HELLO;
    return 0;
}

static void start_connect(struct tpeer *p)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(p->addr, host, sizeof(host), &port) < 0) {
        pr_err("peer node %u: bad address '%s'", p->base.node_id, p->addr);
        return;
    }
    struct pr_conn *c =
        pr_conn_create_tcp(p->x->loop, p->x->max_frame, &peer_ops, p);
    if (!c)
        return;
    p->conn = c;
    p->state = P_CONNECTING;
    int rc = pr_conn_connect(c, host, port, connect_cb);
    if (rc < 0) {
        pr_warn("peer node %u: connect %s: %s", p->base.node_id, p->addr,
                uv_strerror(rc));
        pr_conn_close(c, rc);
        return;
    }
    uv_timer_start(&p->retry, retry_cb, p->x->connect_timeout_ms, 0);
}

static struct tpeer *add_peer(struct pr_tcp_xport *x, uint32_t id,
                              const char *addr)
{
    struct tpeer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base.ops = &tcp_link_ops;
    p->base.node_id = id;
    p->base.kind = "tcp";
    p->x = x;
    p->qtail = &p->q;
    p->backoff_ms = BACKOFF_MIN_MS;
    snprintf(p->addr, sizeof(p->addr), "%s", addr ? addr : "");
    uv_timer_init(x->loop, &p->retry);
    p->retry.data = p;
    x->handles++;
    p->next = x->peers;
    x->peers = p;
    return p;
}

static void maybe_free_x(struct pr_tcp_xport *x)
{
    if (x->closing && x->handles == 0)
        free(x);
}

static void peer_closed_cb(uv_handle_t *h)
{
    struct tpeer *p = h->data;
    struct pr_tcp_xport *x = p->x;
    free(p->abuf);
    free(p);
    x->handles--;
    maybe_free_x(x);
}

static void remove_peer(struct tpeer *p)
{
    struct tpeer **pp = &p->x->peers;
    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    p->listed = 0;
    if (p->conn) {
        /*
         * The peer is freed before this conn's close callback may run
         * (close callbacks come in any order): detach the conn from it.
         */
        struct pr_conn *c = p->conn;
        p->conn = NULL;
        pr_conn_detach_close(c);
    }
    drop_qp(p);
    if (p->x->engine)
        pr_engine_link_down(p->x->engine, p->base.node_id, -ECONNRESET);
    fail_pending(p, -ECONNRESET);
    uv_close((uv_handle_t *)&p->retry, peer_closed_cb);
}

int pr_tcp_xport_set_peers(struct pr_tcp_xport *x,
                           const struct pr_tcp_peer_info *peers, size_t n)
{
    for (struct tpeer *p = x->peers; p; p = p->next)
        p->listed = 0;
    for (size_t i = 0; i < n; i++) {
        if (peers[i].node_id == x->self)
            continue;
        struct tpeer *p = find_peer(x, peers[i].node_id);
        if (!p && !(p = add_peer(x, peers[i].node_id, peers[i].addr)))
            return -ENOMEM;
        snprintf(p->addr, sizeof(p->addr), "%s", peers[i].addr);
        p->listed = 1;
        p->outgoing = x->self > p->base.node_id;
        if (p->outgoing && p->state == P_DOWN &&
            !uv_is_active((uv_handle_t *)&p->retry))
            start_connect(p);
    }
    struct tpeer *p = x->peers;
    while (p) {
        struct tpeer *next = p->next;
        if (!p->listed) {
            pr_info("peer node %u (%s) left the job", p->base.node_id, p->addr);
            remove_peer(p);
        }
        p = next;
    }
    return 0;
}

/*
 * The accepting side of the RDMA offer in a hello: a queue pair brought to
 * RTS against the peer's, whose info then goes back in the welcome.
 */
static int accept_rdma(struct pr_tcp_xport *x, struct tpeer *p,
                       const Pr__V1__RdmaInfo *offer, Pr__V1__RdmaInfo *ri)
{
    drop_qp(p);
    if (!offer || !x->rdma) {
        if (x->rdma_required) {
            pr_err("peer node %u offers no RDMA and transport = rdma",
                   p->base.node_id);
            return -EPROTONOSUPPORT;
        }
        return 0;
    }
    int rc = pr_rdma_qp_create(x->rdma, p->base.node_id, &p->qp);
    if (rc == 0)
        rc = pr_rdma_qp_connect(p->qp, offer);
    if (rc < 0) {
        drop_qp(p);
        return x->rdma_required ? rc : 0;
    }
    pr_rdma_qp_info(p->qp, ri);
    return 0;
}

static const struct stranger *find_stranger(struct pr_tcp_xport *x,
                                            const struct pr_conn *c)
{
    for (const struct stranger *st = x->strangers; st; st = st->next)
        if (st->conn == c)
            return st;
    return NULL;
}

static void unlist_stranger(struct pr_tcp_xport *x, struct pr_conn *c)
{
    for (struct stranger **pp = &x->strangers; *pp; pp = &(*pp)->next) {
        if ((*pp)->conn == c) {
            struct stranger *st = *pp;
            *pp = st->next;
            free(st);
            return;
        }
    }
}

/*
 * Deadlines no single callback enforces: a hello that never comes, a
 * queued send whose link never comes up, an RDMA handshake that stalls.
 */
static void sweep_cb(uv_timer_t *t)
{
    struct pr_tcp_xport *x = t->data;
    uint64_t now = uv_now(x->loop);
    struct stranger *st = x->strangers;
    while (st) {
        struct stranger *next = st->next;
        if (now >= st->expires_ms) {
            pr_warn("%s: no hello within %u ms: closing", st->conn->name,
                    x->connect_timeout_ms);
            pr_conn_close(st->conn, -ETIMEDOUT);
        }
        st = next;
    }
    for (struct tpeer *p = x->peers; p; p = p->next) {
        if (p->state == P_UP || now - p->since_ms < x->connect_timeout_ms)
            continue;
        if (p->q) {
            pr_warn("peer node %u: link not up within %u ms: failing its "
                    "queued sends",
                    p->base.node_id, x->connect_timeout_ms);
            fail_pending(p, -ETIMEDOUT);
        }
        if (p->state == P_RDMA_WAIT && p->conn) {
            pr_warn("peer node %u: no rdma_ready within %u ms: closing",
                    p->base.node_id, x->connect_timeout_ms);
            pr_conn_close(p->conn, -ETIMEDOUT);
        }
    }
}

/* An incoming connection before its hello: its owner is the transport. */
static int stranger_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct pr_tcp_xport *x = c->owner;
    if (m->body_case != PR__V1__MSG__BODY_HELLO) {
        pr_warn("%s: %s message before hello: closing", c->name,
                pr_msg_name(m));
        return -EPROTO;
    }
    const Pr__V1__Hello *h = m->hello;
    if (h->version != PR_PROTO_VERSION) {
        pr_warn("%s: protocol version %u, this daemon speaks %u: closing",
                c->name, h->version, PR_PROTO_VERSION);
        pr_conn_fail(c, -EPROTO, "protocol version mismatch");
        return 0;
    }
    if (h->role != PR__V1__ROLE__ROLE_NODE || h->node_id == x->self ||
        h->node_id < x->self) {
        pr_warn("%s: hello from role %d node %u is not a peer that connects "
                "to node %u: closing",
                c->name, (int)h->role, h->node_id, x->self);
        pr_conn_fail(c, -EPROTO, "not a peer of this node");
        return 0;
    }
    const struct stranger *st = find_stranger(x, c);
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen;
    const char *why;
    if (!st ||
        pr_auth_check_hello(x->key, st->ns, &h->auth, proof, &plen, &why) < 0) {
        pr_warn("%s (node %u): authentication failed: %s: closing", c->name,
                h->node_id, st ? why : "no challenge on record");
        pr_conn_fail(c, -EACCES, "authentication failed");
        return 0;
    }
    struct tpeer *p = find_peer(x, h->node_id);
    if (!p) {
        /* The scheduler's peer list has not reached us yet. */
        p = add_peer(x, h->node_id, "");
        if (!p)
            return -ENOMEM;
        p->listed = 1;
    }
    if (p->conn) {
        pr_info("peer node %u: new connection replaces the old one",
                p->base.node_id);
        struct pr_conn *old = p->conn;
        p->conn = NULL;
        pr_conn_close(old, -ECONNRESET);
        link_down(p, -ECONNRESET);
    }
    Pr__V1__Msg r = PR_MSG_INIT;
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = x->self;
    w.auth.data = proof;
    w.auth.len = plen;
    Pr__V1__RdmaInfo ri;
    int rc = accept_rdma(x, p, h->rdma, &ri);
    if (rc < 0) {
        pr_conn_fail(c, rc,
                     rc == -EPROTONOSUPPORT ? "this node requires RDMA"
                                            : "RDMA setup failed");
        return 0;
    }
    if (p->qp)
        w.rdma = &ri;
    r.body_case = PR__V1__MSG__BODY_WELCOME;
    r.welcome = &w;
    rc = pr_conn_send(c, &r);
    if (rc < 0) {
        drop_qp(p);
        return rc;
    }
    c->ops = &peer_ops;
    c->owner = p;
    snprintf(c->name, sizeof(c->name), "peer node %u", p->base.node_id);
    p->conn = c;
    /* With RDMA, writes wait until the peer's queue pair is ready. */
    if (p->qp) {
        p->state = P_RDMA_WAIT;
        p->since_ms = uv_now(x->loop);
    } else {
        up(p);
    }
    unlist_stranger(x, c);
    c->rd.max_len = x->max_frame;
    return 0;
}

static void stranger_on_close(struct pr_conn *c, int status)
{
    (void)status;
    if (c->owner)
        unlist_stranger(c->owner, c);
}

static const struct pr_conn_ops stranger_ops = {
    .on_msg = stranger_on_msg,
    .on_data = NULL,
    .on_close = stranger_on_close,
};

static void on_connection(uv_stream_t *server, int status)
{
    struct pr_tcp_xport *x = server->data;
    if (status < 0) {
        pr_warn("peer listener: %s", uv_strerror(status));
        return;
    }
    /* Until its hello says who it is, a connection gets small frames. */
    struct pr_conn *c =
        pr_conn_create_tcp(x->loop, HELLO_MAX, &stranger_ops, x);
    struct stranger *st = calloc(1, sizeof(*st));
    if (!c || !st) {
        free(st);
        if (c)
            pr_conn_close(c, -ENOMEM);
        return;
    }
    st->conn = c;
    st->expires_ms = uv_now(x->loop) + x->connect_timeout_ms;
    st->next = x->strangers;
    x->strangers = st;
    if (uv_accept(server, &c->h.stream) < 0) {
        pr_conn_close(c, -ECONNABORTED);
        return;
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[64] = "?";
    if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        else
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
    }
    snprintf(c->name, sizeof(c->name), "peer link from %s", ip);
    uv_tcp_nodelay(&c->h.tcp, 1);
    if (pr_conn_start(c) < 0) {
        pr_conn_close(c, -EIO);
        return;
    }
    Pr__V1__Challenge ch;
    pr_auth_challenge(x->key, st->ns, &ch);
    Pr__V1__Msg m = PR_MSG_INIT;
    m.body_case = PR__V1__MSG__BODY_CHALLENGE;
    m.challenge = &ch;
    if (pr_conn_send(c, &m) < 0)
        pr_conn_close(c, -EIO);
}

int pr_tcp_xport_listen(struct pr_tcp_xport *x, const char *host, uint16_t port,
                        uint16_t *bound)
{
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return -EINVAL;
    int rc = uv_tcp_bind(&x->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&x->listener, 64, on_connection);
    if (rc < 0)
        return rc;
    x->listening = 1;
    uv_timer_start(&x->sweep, sweep_cb, SWEEP_MS, SWEEP_MS);
    int len = sizeof(ss);
    uv_tcp_getsockname(&x->listener, (struct sockaddr *)&ss, &len);
    if (bound)
        *bound = ntohs(ss.ss_family == AF_INET
                           ? ((struct sockaddr_in *)&ss)->sin_port
                           : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

static void listener_closed_cb(uv_handle_t *h)
{
    struct pr_tcp_xport *x = h->data;
    x->handles--;
    maybe_free_x(x);
}

void pr_tcp_xport_destroy(struct pr_tcp_xport *x)
{
    if (!x)
        return;
    x->closing = 1;
    x->engine = NULL;
    while (x->peers)
        remove_peer(x->peers);
    while (x->strangers) {
        struct stranger *st = x->strangers;
        x->strangers = st->next;
        pr_conn_detach_close(st->conn);
        free(st);
    }
    uv_close((uv_handle_t *)&x->listener, listener_closed_cb);
    uv_close((uv_handle_t *)&x->sweep, listener_closed_cb);
}

void pr_tcp_xport_stats(const struct pr_tcp_xport *x,
                        struct pr_tcp_xport_stats *st)
{
    st->bytes_sent = x->bytes_sent;
    st->bytes_recv = x->bytes_recv;
    st->links_up = 0;
    for (const struct tpeer *p = x->peers; p; p = p->next)
        st->links_up += p->state == P_UP;
}
