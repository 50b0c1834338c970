/* SPDX-License-Identifier: MIT */
/*
 * A scheduler the node follows, and the data plane of its groups (node_int.h,
 * struct node_sched): the link to it (dial, challenge, hello, welcome, the
 * messages it sends, heartbeats, retries) and the peer listener, links and
 * engine that only its groups use. See sched.h for the protocol on the
 * link; node_group.c takes the groups it sends, node_ipc.c serves the
 * trainers, engine.c runs the reductions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/base/seal.h"
#include "daemon/engine/pool.h"
#include "daemon/node/node_int.h"
#include "daemon/xport/rdma/rdma.h"

#define STASH_MAX_BYTES (256u << 20)
#define MAX_CHUNK_BYTES (64u << 20) /* transport.chunk_kb's upper bound */
/* Peers whose link rates one Ping carries; more are left out. */
#define NODE_RATES_MAX 128

static void connect_sched(struct node_sched *s);
static int on_challenge(struct node_sched *s, const Pr__V1__Msg *m);

static void on_peer_list(struct node_sched *s, const Pr__V1__PeerList *pl)
{
    struct pr_tcp_peer_info *pi =
        calloc(pl->n_peers ? pl->n_peers : 1, sizeof(*pi));
    if (!pi)
        return;
    for (size_t i = 0; i < pl->n_peers; i++) {
        pi[i].node_id = pl->peers[i]->node_id;
        pi[i].addr = pl->peers[i]->data_addr ? pl->peers[i]->data_addr : "";
    }
    pr_tcp_xport_set_peers(s->xport, pi, pl->n_peers);
    free(pi);
}

static void on_reject(struct node_sched *s, const Pr__V1__Reject *r)
{
    struct node_trainer *c = pr_node_trainer_by_rank(s, r->job, r->rank);
    if (!c || c->seq != r->seq ||
        (c->rstate != R_QUEUED && c->rstate != R_CANCELLING))
        return;
    if (r->status != -ETIMEDOUT)
        pr_warn("worker %u: reduce %llu refused by the scheduler: %s", r->rank,
                (unsigned long long)r->seq, r->reason ? r->reason : "");
    /* The reason (both layouts of a mismatch, say) goes to the trainer. */
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    d.seq = c->seq;
    d.status = r->status; /* pr_node_reduce_reply maps it */
    d.version = c->version;
    d.rank = r->rank;
    d.reason = r->reason ? r->reason : "";
    pr_node_reduce_reply(c, &d);
}

/*
 * The scheduler's answer to this node's hello: a Welcome that proves it
 * knows the cluster key makes the link S_UP (and the trainers waiting for
 * it may join); an Error or anything else closes it.
 */
static int on_welcome(struct node_sched *s, const Pr__V1__Msg *m)
{
    struct pr_node *n = s->n;
    if (m->body_case == PR__V1__MSG__BODY_ERROR) {
        pr_err("scheduler %s refused this node: %s", pr_node_sched_addr(s),
               m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    }
    if (m->body_case != PR__V1__MSG__BODY_WELCOME ||
        m->welcome->version != PR_PROTO_VERSION) {
        pr_warn("scheduler %s: expected a welcome of version %u, got %s: "
                "closing",
                pr_node_sched_addr(s), PR_PROTO_VERSION, pr_msg_name(m));
        return -EPROTO;
    }
    const char *why;
    if (pr_auth_check_welcome(n->key, s->my_nonce, s->challenge,
                              &m->welcome->auth, &why) < 0) {
        pr_err("scheduler %s: %s: closing", pr_node_sched_addr(s), why);
        return -EACCES;
    }
    if (s->cipher) {
        int rc = pr_conn_seal(s->conn, s->cipher, n->key, 'C', s->challenge,
                              s->my_nonce);
        if (rc < 0) {
            pr_err("scheduler %s: cannot encrypt the link: %s: closing",
                   pr_node_sched_addr(s), strerror(-rc));
            return rc;
        }
    }
    s->self = m->welcome->id;
    s->state = S_UP;
    if (m->welcome->peers_dropped)
        pr_tcp_xport_drop_links(s->xport, "the scheduler had judged this "
                                          "node gone, and the peers dropped "
                                          "theirs");
    pr_tcp_xport_set_self(s->xport, s->self);
    /* A new scheduler session numbers groups from its own clock. */
    uint64_t base = m->welcome->group_id_base;
    if (base != 0 && base != s->id_base) {
        pr_engine_new_session(s->engine, base);
        s->id_base = base;
    }
    /* "joined job": tests and Slurm scripts wait for these words. */
    pr_info("joined job '%s' as node %u (scheduler %s%s%s)",
            s->idx ? (m->welcome->job ? m->welcome->job : "") : n->conf->job,
            s->self, pr_node_sched_addr(s),
            s->cipher ? ", encrypted with " : "",
            s->cipher ? pr_seal_cipher_name(s->cipher) : "");
    char differs[160];
    if (pr_hello_timing_differs(
            n->conf->sched_heartbeat_ms, n->conf->sched_node_timeout_ms,
            m->welcome->heartbeat_ms, m->welcome->node_timeout_ms, differs,
            sizeof(differs)))
        pr_warn("scheduler %s: settings differ (%s): one side may drop the "
                "link while the other is alive, or see it die late; set "
                "them alike on every daemon",
                pr_node_sched_addr(s), differs);
    pr_node_ipc_sched_up(s);
    pr_node_scheds_up(s);
    return 0;
}

/*
 * The scheduler registered (or refused) a trainer. One that left while
 * joining has no cookie here any more: its new rank is given back.
 */
static void on_worker_joined(struct node_sched *s,
                             const Pr__V1__WorkerJoined *j)
{
    struct node_trainer *c = pr_node_trainer_by_cookie(s->n, j->cookie);
    if (c && c->s == s) {
        pr_node_trainer_joined(c, j);
    } else if (j->status == 0) {
        Pr__V1__WorkerLeave l = PR__V1__WORKER_LEAVE__INIT;
        l.rank = j->rank;
        l.job = j->job;
        Pr__V1__Msg r = PR_MSG_OF(WORKER_LEAVE, worker_leave, &l);
        pr_node_send(s, &r);
    }
}

/*
 * The group failed on another node, for that node's reason (its trainer's
 * wrong length, its memory...): for the trainers here, a peer was lost, or
 * the group ran out of time.
 */
static void on_group_abort(struct node_sched *s, const Pr__V1__GroupAbort *a)
{
    pr_engine_abort(s->engine, a->id,
                    a->status == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET);
}

static int sched_on_msg(struct pr_conn *conn, const Pr__V1__Msg *m)
{
    struct node_sched *s = conn->owner;
    if (s->state == S_CHALLENGE && m->body_case != PR__V1__MSG__BODY_ERROR)
        return on_challenge(s, m);
    if (s->state == S_HELLO || s->state == S_CHALLENGE)
        return on_welcome(s, m);
    switch (m->body_case) {
    case PR__V1__MSG__BODY_PEER_LIST:
        on_peer_list(s, m->peer_list);
        return 0;
    case PR__V1__MSG__BODY_WORKER_JOINED:
        on_worker_joined(s, m->worker_joined);
        return 0;
    case PR__V1__MSG__BODY_GROUP:
        pr_node_on_group(s, m->group);
        return 0;
    case PR__V1__MSG__BODY_GROUP_ABORT:
        on_group_abort(s, m->group_abort);
        return 0;
    case PR__V1__MSG__BODY_REJECT:
        on_reject(s, m->reject);
        return 0;
    case PR__V1__MSG__BODY_PING: {
        Pr__V1__Msg r = PR_MSG_OF(PONG, pong, m->ping);
        pr_node_send(s, &r);
        return 0;
    }
    case PR__V1__MSG__BODY_PONG:
        return 0;
    case PR__V1__MSG__BODY_ERROR:
        pr_err("scheduler %s: error %d: %s", pr_node_sched_addr(s),
               m->error->code, m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    default:
        pr_warn("scheduler %s: unexpected %s message: closing",
                pr_node_sched_addr(s), pr_msg_name(m));
        return -EPROTO;
    }
}

static void retry_cb(uv_timer_t *t)
{
    struct node_sched *s = t->data;
    if (s->state == S_CONNECTING || s->state == S_CHALLENGE ||
        s->state == S_HELLO) {
        pr_warn("scheduler %s: no answer within %u ms", pr_node_sched_addr(s),
                s->n->conf->node_connect_timeout_ms);
        pr_conn_close(s->conn, -ETIMEDOUT);
        return;
    }
    if (s->state == S_DOWN && !s->n->stopping)
        connect_sched(s);
}

static void sched_on_close(struct pr_conn *conn, int status)
{
    struct node_sched *s = conn->owner;
    if (s->conn != conn)
        return;
    int was_up = s->state == S_UP;
    s->conn = NULL;
    s->state = S_DOWN;
    if (conn->auth_failed)
        s->auth_failures++;
    if (s->n->stopping)
        return;
    if (was_up) {
        pr_warn("scheduler link lost (%s): %s; reconnecting",
                pr_node_sched_addr(s), status ? strerror(-status) : "closed");
        pr_node_ipc_sched_lost(s);
    }
    uv_timer_start(&s->retry, retry_cb, pr_node_scheds_next(s, was_up), 0);
}

static const struct pr_conn_ops sched_ops = {
    .on_msg = sched_on_msg,
    .on_data = NULL,
    .on_close = sched_on_close,
};

static void sched_connected(struct pr_conn *c, int status)
{
    struct node_sched *s = c->owner;
    if (s->conn != c)
        return;
    if (status < 0) {
        if (s->list.tries == 0)
            pr_warn("scheduler %s: %s; retrying", pr_node_sched_addr(s),
                    uv_strerror(status));
        pr_conn_close(c, status);
        return;
    }
    /* The scheduler speaks first: its challenge (auth.h). */
    s->state = S_CHALLENGE;
}

/* The scheduler's challenge came: answer with the hello. */
static int on_challenge(struct node_sched *s, const Pr__V1__Msg *m)
{
    const struct pr_node *n = s->n;
    if (m->body_case != PR__V1__MSG__BODY_CHALLENGE) {
        pr_warn("scheduler %s: expected a challenge, got %s: closing",
                pr_node_sched_addr(s), pr_msg_name(m));
        return -EPROTO;
    }
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why;
    int rc = pr_auth_answer(n->key, m->challenge, s->challenge, s->my_nonce,
                            buf, &len, &s->cipher, &why);
    if (rc < 0) {
        pr_err("scheduler %s: %s", pr_node_sched_addr(s), why);
        return rc;
    }
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.name = n->conf->node_name;
    h.data_addr = s->data_addr;
    h.heartbeat_ms = n->conf->sched_heartbeat_ms;
    h.node_timeout_ms = n->conf->sched_node_timeout_ms;
    h.max_group_id = s->max_group_id;
    h.prev_node_id = s->self;
    h.auth.data = buf;
    h.auth.len = len;
    h.seal = s->cipher;
    Pr__V1__Msg r = PR_MSG_OF(HELLO, hello, &h);
    s->state = S_HELLO;
    return pr_node_send(s, &r);
}

static void connect_sched(struct node_sched *s)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(pr_node_sched_addr(s), host, sizeof(host),
                               &port) < 0)
        return; /* every entry was checked before s was opened */
    s->conn = pr_conn_create_tcp(s->n->loop, PR_CTRL_MAX_FRAME, &sched_ops, s);
    if (!s->conn)
        return;
    pr_conn_set_batch(s->conn, s->batch);
    s->state = S_CONNECTING;
    s->cipher = 0;
    int rc = pr_hello_transcript(s->conn, s->n->key);
    if (rc < 0)
        return;
    rc = pr_conn_connect(s->conn, host, port, sched_connected);
    if (rc < 0) {
        pr_err("scheduler %s: %s", pr_node_sched_addr(s), uv_strerror(rc));
        pr_conn_close(s->conn, rc);
        return;
    }
    /* READY and GROUP must not wait behind the chunks in a link's queue. */
    if ((rc = pr_conn_lowdelay(s->conn)) < 0)
        pr_dbg("scheduler %s: not marked low-delay: %s", pr_node_sched_addr(s),
               strerror(-rc));
    snprintf(s->conn->name, sizeof(s->conn->name), "scheduler %s",
             pr_node_sched_addr(s));
    uv_timer_start(&s->retry, retry_cb, s->n->conf->node_connect_timeout_ms, 0);
}

/*
 * The heartbeat, with how fast each peer's chunks arrived here: the
 * scheduler orders rings by these rates (sched_ring.c).
 */
static void send_ping(struct node_sched *s, uint64_t now)
{
    struct pr_link_rate lr[NODE_RATES_MAX];
    Pr__V1__LinkRate rb[NODE_RATES_MAX], *rp[NODE_RATES_MAX];
    size_t k = pr_tcp_xport_rates(s->xport, now, lr, NODE_RATES_MAX);
    for (size_t i = 0; i < k; i++) {
        pr__v1__link_rate__init(&rb[i]);
        rb[i].node = lr[i].node;
        rb[i].bytes_per_s = (uint64_t)lr[i].bytes_per_s;
        rb[i].age_ms = lr[i].age_ms;
        rp[i] = &rb[i];
    }
    Pr__V1__Ping p = PR__V1__PING__INIT;
    p.nonce = now;
    p.n_rates = k;
    p.rates = rp;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &p);
    pr_node_send(s, &m);
}

void pr_node_sched_tick(struct node_sched *s, uint64_t now)
{
    if (s->state != S_UP)
        return;
    if (now - s->conn->last_rx_ms > s->n->conf->sched_node_timeout_ms) {
        pr_warn("scheduler %s silent for %llu ms: dropping the link",
                pr_node_sched_addr(s),
                (unsigned long long)(now - s->conn->last_rx_ms));
        /*
         * By the same timeout the scheduler judges this node gone, aborts
         * its groups on the other nodes and has the peers drop their links
         * to it; a partition keeps all of that from arriving here. The
         * groups running here cannot finish: their trainers hear so now,
         * not at their deadline.
         */
        pr_node_groups_fail(s, -ECONNRESET);
        pr_conn_close(s->conn, -ETIMEDOUT);
        return;
    }
    if (now - s->last_ping_ms >= s->n->conf->sched_heartbeat_ms) {
        s->last_ping_ms = now;
        send_ping(s, now);
    }
}

static struct pr_link *resolve(void *ctx, uint32_t node_id)
{
    struct node_sched *s = ctx;
    return pr_tcp_xport_link(s->xport, node_id);
}

/* node.reduce_threads' default: the CPUs this daemon may run on, capped. */
#define DEFAULT_THREADS_CAP 8

static int set_reduce_threads(struct node_sched *s)
{
    unsigned t = s->n->conf->node_reduce_threads;
    if (t == 0)
        t = pr_pool_default_threads(DEFAULT_THREADS_CAP);
    int rc = pr_engine_set_threads(s->engine, t);
    if (rc < 0)
        pr_err("pr_engine_set_threads(%u): %s", t, strerror(-rc));
    else if (s->idx == 0)
        pr_info("arithmetic on %u thread%s", t, t == 1 ? "" : "s");
    return rc;
}

/* The chunk size in floats that transport.chunk_kb says. */
static size_t chunk_floats(const struct pr_conf *c)
{
    return (size_t)c->xport_chunk_kb * 1024 / sizeof(float);
}

/*
 * transport = auto uses RDMA when this node has a usable device (and each
 * peer link then uses it if the peer has one too); rdma requires it; tcp
 * never opens a device.
 */
static int open_rdma(struct node_sched *s)
{
    const struct pr_conf *c = s->n->conf;
    if (c->xport_type == PR_XPORT_TCP)
        return 0;
    /* pr_conf_validate() refused transport.type = rdma with it. */
    if (pr_conf_encrypts(c)) {
        if (s->idx == 0)
            pr_info("transport: encrypted links carry the data over TCP; "
                    "RDMA is not used (security.encrypt, "
                    "docs/operations.md, Security)");
        return 0;
    }
    struct pr_rdma_conf rc_conf = {
        .device = c->xport_rdma_device,
        .port = (uint8_t)c->xport_rdma_port,
        .gid_index = (int)c->xport_gid_index,
        .timeout = (uint8_t)c->xport_rdma_timeout,
        .slots = c->xport_inflight,
        .slot_payload = chunk_floats(c) * sizeof(float),
    };
    int rc = pr_rdma_open(s->n->loop, &rc_conf, pr_tcp_xport_rdma_ops(),
                          s->xport, &s->rdma);
    if (rc < 0) {
        if (c->xport_type == PR_XPORT_RDMA) {
            pr_err("transport = rdma, but RDMA device '%s' is not usable: "
                   "%s",
                   c->xport_rdma_device[0] ? c->xport_rdma_device : "(any)",
                   strerror(-rc));
            return rc;
        }
        if (s->idx == 0)
            pr_info("no usable RDMA device (%s): peers use TCP", strerror(-rc));
        s->rdma = NULL;
        return 0;
    }
    pr_tcp_xport_set_rdma(s->xport, s->rdma, c->xport_type == PR_XPORT_RDMA);
    pr_engine_set_allocator(s->engine, pr_rdma_alloc, pr_rdma_free, s->rdma);
    return 0;
}

/*
 * The peers' listener, and the address the scheduler hands peers: for the
 * node's own scheduler node.data_listen and node.data_advertise (else the
 * address bound); for a trainer's, a port the system picks on the same
 * host, advertised with node.data_advertise's host if it is set. 0 or
 * the error, logged.
 */
static int listen_peers(struct node_sched *s)
{
    const struct pr_conf *conf = s->n->conf;
    char host[96], ahost[96];
    uint16_t port, aport, bound = 0;
    int rc = pr_conf_parse_hostport(conf->node_data_listen, host, sizeof(host),
                                    &port);
    if (rc == 0)
        rc = pr_tcp_xport_listen(s->xport, host, s->idx ? 0 : port, &bound);
    if (rc < 0) {
        pr_err("peer listener on %s%s: %s", conf->node_data_listen,
               s->idx ? " (another port)" : "",
               rc == -EINVAL ? "bad address" : uv_strerror(rc));
        return rc;
    }
    const char *adv = conf->node_data_advertise;
    if (adv && adv[0] && s->idx == 0)
        snprintf(s->data_addr, sizeof(s->data_addr), "%s", adv);
    else if (adv && adv[0] &&
             pr_conf_parse_hostport(adv, ahost, sizeof(ahost), &aport) == 0)
        snprintf(s->data_addr, sizeof(s->data_addr),
                 strchr(ahost, ':') ? "[%s]:%u" : "%s:%u", ahost, bound);
    else
        snprintf(s->data_addr, sizeof(s->data_addr),
                 strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, bound);
    return 0;
}

/* Makes s's transports and engine (n->sched[s->idx] is s already). */
static int sched_plane(struct node_sched *s)
{
    struct pr_node *n = s->n;
    const struct pr_conf *conf = n->conf;
    /*
     * Forwarded chunks keep their originator's size, which may be another
     * node's chunk_kb (or ours before a reload): accept up to the largest
     * chunk any configuration allows. The reader grows only as needed.
     */
    s->xport = pr_tcp_xport_create(n->loop, 0, MAX_CHUNK_BYTES,
                                   conf->node_connect_timeout_ms);
    s->engine = pr_engine_create(n->loop, chunk_floats(conf), STASH_MAX_BYTES,
                                 resolve, s);
    s->batch = pr_conn_batch_create(n->loop);
    if (!s->xport || !s->engine || !s->batch)
        return -ENOMEM;
    /* Early chunks wait for their group as long as a reduce may take. */
    pr_engine_set_stash_ms(s->engine, conf->node_reduce_timeout_ms);
    struct pr_link_sink sink = pr_node_spin_sink(s);
    pr_tcp_xport_set_sink(s->xport, &sink);
    pr_tcp_xport_set_key(s->xport, n->key);
    pr_tcp_xport_set_streams(s->xport, conf->xport_streams);
    pr_tcp_xport_set_express(s->xport, (size_t)conf->xport_express_kb << 10);
    pr_tcp_xport_set_io_thread(s->xport, conf->xport_io_thread);
    pr_tcp_xport_set_io_shared(s->xport, n->io_shared);
    /* TCP reads any memory; with RDMA every tensor is registered. */
    pr_engine_set_direct(s->engine, 1);
    int rc = set_reduce_threads(s);
    if (rc == 0)
        rc = open_rdma(s);
    if (rc == 0)
        rc = listen_peers(s);
    return rc;
}

/* A timer of s closed: s->handles and the node's count down. */
static void handle_closed(uv_handle_t *h)
{
    struct node_sched *s = h->data;
    struct pr_node *n = s->n;
    if (--s->handles == 0) {
        free(s->spec);
        free(s);
    }
    if (--n->handles == 0)
        free(n);
}

int pr_node_sched_open(struct pr_node *n, uint32_t idx, const char *spec)
{
    char canon[PR_NODE_SCHED_SPEC_MAX + 1];
    if (pr_node_sched_canon(spec, canon, sizeof(canon)) < 0)
        return -EINVAL; /* pr_conf_validate() refused it already */
    struct node_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->spec = strdup(canon);
    if (!s->spec) {
        free(s);
        return -ENOMEM;
    }
    s->n = n;
    s->idx = idx;
    n->sched[idx] = s;
    if (idx >= n->nsched)
        n->nsched = idx + 1;
    uv_timer_init(n->loop, &s->retry);
    s->retry.data = s;
    s->handles = 1;
    n->handles++;
    int rc = pr_node_scheds_init(s);
    if (rc == 0) {
        s->handles++;
        n->handles++;
        rc = sched_plane(s);
    }
    if (rc < 0) {
        pr_node_sched_close(s);
        return rc;
    }
    pr_info("scheduler %s: peers of its groups connect to %s", spec,
            s->data_addr);
    connect_sched(s);
    return 0;
}

int pr_node_sched_for(struct pr_node *n, const char *spec,
                      struct node_sched **out, const char **why)
{
    uint32_t open = 0, free_idx = 0;
    for (uint32_t i = 0; i < PR_NODE_SCHED_MAX; i++) {
        struct node_sched *s = n->sched[i];
        if (!s) {
            if (!free_idx && i)
                free_idx = i;
            continue;
        }
        open++;
        if (!strcmp(s->spec, spec)) {
            *out = s;
            return 0;
        }
    }
    if (open >= n->conf->node_max_schedulers || !free_idx) {
        *why = "this node follows as many schedulers as it may "
               "(node.max_schedulers)";
        return -EUSERS;
    }
    int rc = pr_node_sched_open(n, free_idx, spec);
    if (rc < 0) {
        *why = "this node cannot follow that scheduler (its log says why)";
        return rc;
    }
    *out = n->sched[free_idx];
    return 0;
}

void pr_node_scheds_reap(struct pr_node *n)
{
    uint64_t now = uv_now(n->loop);
    for (uint32_t i = 1; i < n->nsched; i++) {
        struct node_sched *s = n->sched[i];
        if (s && s->users > 0)
            s->idle_since_ms = 0;
        else if (s && !s->idle_since_ms)
            s->idle_since_ms = now;
        else if (s && now - s->idle_since_ms >= PR_NODE_SCHED_LINGER_MS) {
            pr_info("scheduler %s: no trainer follows it: leaving it", s->spec);
            pr_node_sched_close(s);
        }
    }
}

void pr_node_scheds_jobs(struct pr_node *n)
{
    const struct node_trainer *first = NULL;
    int shared = 0;
    for (const struct node_trainer *t = n->trainers; t && !shared;
         t = t->next) {
        if (!t->greeted || !t->conn)
            continue;
        if (!first)
            first = t;
        else if (t->s != first->s || strcmp(t->job, first->job) != 0)
            shared = 1;
    }
    if (shared == n->io_shared)
        return;
    n->io_shared = shared;
    if (n->conf->xport_io_thread == PR_IO_THREAD_AUTO)
        pr_info("%s: large chunks' bytes now move on %s",
                shared ? "trainers of several jobs here"
                       : "trainers of one job here, or none",
                shared ? "the I/O thread" : "the loop");
    for (uint32_t i = 0; i < n->nsched; i++)
        if (n->sched[i])
            pr_tcp_xport_set_io_shared(n->sched[i]->xport, shared);
}

void pr_node_sched_reload(struct node_sched *s)
{
    pr_engine_set_chunk(s->engine, chunk_floats(s->n->conf));
    pr_engine_set_stash_ms(s->engine, s->n->conf->node_reduce_timeout_ms);
}

/* Adds what s's engine and transports counted to n's gone_* totals. */
static void count_gone(struct node_sched *s)
{
    struct pr_node *n = s->n;
    struct pr_engine_stats es;
    pr_engine_stats(s->engine, &es);
    pr_engine_stats_add(&n->gone_engine, &es);
    struct pr_tcp_xport_stats ts;
    pr_tcp_xport_stats(s->xport, &ts);
    ts.links_up = ts.links_encrypted = 0; /* gauges: gone with it */
    pr_tcp_xport_stats_add(&n->gone_tcp, &ts);
    if (s->rdma) {
        struct pr_rdma_stats rs;
        pr_rdma_stats(s->rdma, &rs);
        pr_rdma_stats_add(&n->gone_rdma, &rs);
    }
    n->gone_auth_failures += s->auth_failures;
}

/* The totals a scheduler's data plane moved, logged as it closes. */
static void log_totals(const struct node_sched *s)
{
    struct pr_tcp_xport_stats ts;
    pr_tcp_xport_stats(s->xport, &ts);
    struct pr_rdma_stats rs = {0};
    if (s->rdma)
        pr_rdma_stats(s->rdma, &rs);
    pr_info(
        "scheduler %s: data sent: %llu bytes over tcp, %llu over rdma; "
        "received: %llu over tcp, %llu over rdma (rdma: %llu data "
        "writes, %llu credit messages, %llu completion events)",
        s->spec, (unsigned long long)ts.bytes_sent,
        (unsigned long long)rs.bytes_sent, (unsigned long long)ts.bytes_recv,
        (unsigned long long)rs.bytes_recv, (unsigned long long)rs.writes,
        (unsigned long long)rs.credit_msgs, (unsigned long long)rs.cq_events);
    struct pr_engine_stats es;
    pr_engine_stats(s->engine, &es);
    pr_info("scheduler %s: groups: %llu ok (%llu in place), %llu failed; "
            "over the wire in fp32 %llu, bf16 %llu, int8 %llu",
            s->spec, (unsigned long long)es.groups_ok,
            (unsigned long long)es.groups_in_place,
            (unsigned long long)es.groups_failed,
            (unsigned long long)es.wire_groups[PR_WIRE_FP32],
            (unsigned long long)es.wire_groups[PR_WIRE_BF16],
            (unsigned long long)es.wire_groups[PR_WIRE_INT8]);
}

void pr_node_sched_close(struct node_sched *s)
{
    struct pr_node *n = s->n;
    if (s->xport && s->engine) {
        log_totals(s);
        count_gone(s);
    }
    n->sched[s->idx] = NULL;
    while (n->nsched && !n->sched[n->nsched - 1])
        n->nsched--;
    /*
     * The transports stop first, so that no send reads a trainer's tensor
     * any more when its group is answered below (the trainer may change it
     * at once, and a neighbour must not finish on such floats).
     */
    if (s->xport)
        pr_tcp_xport_destroy(s->xport);
    s->xport = NULL;
    /* After the links: it fails and reaps their queue pairs' requests. */
    pr_rdma_close(s->rdma);
    s->rdma = NULL;
    /* Groups still running fail, so their trainers still get an answer. */
    pr_engine_destroy(s->engine);
    s->engine = NULL;
    if (s->conn) {
        struct pr_conn *c = s->conn;
        s->conn = NULL;
        pr_conn_detach_close(c);
    }
    pr_conn_batch_close(s->batch);
    s->batch = NULL;
    pr_node_scheds_stop(s);
    if (s->list.n)
        uv_close((uv_handle_t *)&s->list.probe_timer, handle_closed);
    uv_close((uv_handle_t *)&s->retry, handle_closed);
}
