/* SPDX-License-Identifier: MIT */
/*
 * The node role's control half: the link to the scheduler, and the node
 * itself (create, reload, destroy). See sched.h for the protocol on this
 * link; node_group.c takes the groups it sends, node_ipc.c serves the
 * trainers, engine.c runs the reductions.
 */
#include "daemon/node/node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/base/metrics.h"
#include "daemon/base/seal.h"
#include "daemon/engine/pool.h"
#include "daemon/node/node_int.h"
#include "daemon/xport/rdma/rdma.h"
#include "preduce.h"

/*
 * A trainer waits PREDUCE_REDUCE_SLACK_MS past its deadline for the answer
 * the daemon sends by PR_NODE_GRACE_MS past it: the rest is for the answer's
 * way (a tick, a sweep, a loaded loop, the trainer's scheduling).
 */
_Static_assert(PR_NODE_GRACE_MS + 500 <= PREDUCE_REDUCE_SLACK_MS,
               "the daemon's grace leaves the library's slack no margin");

#define TICK_MS         20
#define STASH_MAX_BYTES (256u << 20)
#define MAX_CHUNK_BYTES (64u << 20) /* transport.chunk_kb's upper bound */
/* Peers whose link rates one Ping carries; more are left out. */
#define NODE_RATES_MAX 128

static void connect_sched(struct pr_node *n);
static int on_challenge(struct pr_node *n, const Pr__V1__Msg *m);

static void on_peer_list(struct pr_node *n, const Pr__V1__PeerList *pl)
{
    struct pr_tcp_peer_info *pi =
        calloc(pl->n_peers ? pl->n_peers : 1, sizeof(*pi));
    if (!pi)
        return;
    for (size_t i = 0; i < pl->n_peers; i++) {
        pi[i].node_id = pl->peers[i]->node_id;
        pi[i].addr = pl->peers[i]->data_addr ? pl->peers[i]->data_addr : "";
    }
    pr_tcp_xport_set_peers(n->xport, pi, pl->n_peers);
    free(pi);
}

static void on_reject(struct pr_node *n, const Pr__V1__Reject *r)
{
    struct node_trainer *c = pr_node_trainer_by_rank(n, r->job, r->rank);
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
static int on_welcome(struct pr_node *n, const Pr__V1__Msg *m)
{
    if (m->body_case == PR__V1__MSG__BODY_ERROR) {
        pr_err("scheduler refused this node: %s",
               m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    }
    if (m->body_case != PR__V1__MSG__BODY_WELCOME ||
        m->welcome->version != PR_PROTO_VERSION) {
        pr_warn("scheduler: expected a welcome of version %u, got %s: "
                "closing",
                PR_PROTO_VERSION, pr_msg_name(m));
        return -EPROTO;
    }
    const char *why;
    if (pr_auth_check_welcome(n->key, n->my_nonce, n->sched_challenge,
                              &m->welcome->auth, &why) < 0) {
        pr_err("scheduler %s: %s: closing", pr_node_sched_addr(n), why);
        return -EACCES;
    }
    if (n->sched_cipher) {
        int rc = pr_conn_seal(n->sched, n->sched_cipher, n->key, 'C',
                              n->sched_challenge, n->my_nonce);
        if (rc < 0) {
            pr_err("scheduler %s: cannot encrypt the link: %s: closing",
                   pr_node_sched_addr(n), strerror(-rc));
            return rc;
        }
    }
    n->self = m->welcome->id;
    n->sstate = S_UP;
    if (m->welcome->peers_dropped)
        pr_tcp_xport_drop_links(n->xport, "the scheduler had judged this "
                                          "node gone, and the peers dropped "
                                          "theirs");
    pr_tcp_xport_set_self(n->xport, n->self);
    /* A new scheduler session numbers groups from its own clock. */
    uint64_t base = m->welcome->group_id_base;
    if (base != 0 && base != n->sched_id_base) {
        pr_engine_new_session(n->engine, base);
        n->sched_id_base = base;
    }
    /* "joined job": tests and Slurm scripts wait for these words. */
    pr_info("joined job '%s' as node %u (scheduler %s%s%s)", n->conf->job,
            n->self, pr_node_sched_addr(n),
            n->sched_cipher ? ", encrypted with " : "",
            n->sched_cipher ? pr_seal_cipher_name(n->sched_cipher) : "");
    char differs[160];
    if (pr_hello_timing_differs(
            n->conf->sched_heartbeat_ms, n->conf->sched_node_timeout_ms,
            m->welcome->heartbeat_ms, m->welcome->node_timeout_ms, differs,
            sizeof(differs)))
        pr_warn("scheduler %s: settings differ (%s): one side may drop the "
                "link while the other is alive, or see it die late; set "
                "them alike on every daemon",
                pr_node_sched_addr(n), differs);
    pr_node_ipc_sched_up(n);
    pr_node_scheds_up(n);
    return 0;
}

/*
 * The scheduler registered (or refused) a trainer. One that left while
 * joining has no cookie here any more: its new rank is given back.
 */
static void on_worker_joined(struct pr_node *n, const Pr__V1__WorkerJoined *j)
{
    struct node_trainer *c = pr_node_trainer_by_cookie(n, j->cookie);
    if (c) {
        pr_node_trainer_joined(c, j);
    } else if (j->status == 0) {
        Pr__V1__WorkerLeave l = PR__V1__WORKER_LEAVE__INIT;
        l.rank = j->rank;
        l.job = j->job;
        Pr__V1__Msg r = PR_MSG_OF(WORKER_LEAVE, worker_leave, &l);
        pr_node_send(n, &r);
    }
}

/*
 * The group failed on another node, for that node's reason (its trainer's
 * wrong length, its memory...): for the trainers here, a peer was lost, or
 * the group ran out of time.
 */
static void on_group_abort(struct pr_node *n, const Pr__V1__GroupAbort *a)
{
    pr_engine_abort(n->engine, a->id,
                    a->status == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET);
}

static int sched_on_msg(struct pr_conn *conn, const Pr__V1__Msg *m)
{
    struct pr_node *n = conn->owner;
    if (n->sstate == S_CHALLENGE && m->body_case != PR__V1__MSG__BODY_ERROR)
        return on_challenge(n, m);
    if (n->sstate == S_HELLO || n->sstate == S_CHALLENGE)
        return on_welcome(n, m);
    switch (m->body_case) {
    case PR__V1__MSG__BODY_PEER_LIST:
        on_peer_list(n, m->peer_list);
        return 0;
    case PR__V1__MSG__BODY_WORKER_JOINED:
        on_worker_joined(n, m->worker_joined);
        return 0;
    case PR__V1__MSG__BODY_GROUP:
        pr_node_on_group(n, m->group);
        return 0;
    case PR__V1__MSG__BODY_GROUP_ABORT:
        on_group_abort(n, m->group_abort);
        return 0;
    case PR__V1__MSG__BODY_REJECT:
        on_reject(n, m->reject);
        return 0;
    case PR__V1__MSG__BODY_PING: {
        Pr__V1__Msg r = PR_MSG_OF(PONG, pong, m->ping);
        pr_node_send(n, &r);
        return 0;
    }
    case PR__V1__MSG__BODY_PONG:
        return 0;
    case PR__V1__MSG__BODY_ERROR:
        pr_err("scheduler: error %d: %s", m->error->code,
               m->error->reason ? m->error->reason : "");
        return m->error->code < 0 ? m->error->code : -EPROTO;
    default:
        pr_warn("scheduler: unexpected %s message: closing", pr_msg_name(m));
        return -EPROTO;
    }
}

static void retry_cb(uv_timer_t *t)
{
    struct pr_node *n = t->data;
    if (n->sstate == S_CONNECTING || n->sstate == S_CHALLENGE ||
        n->sstate == S_HELLO) {
        pr_warn("scheduler %s: no answer within %u ms", pr_node_sched_addr(n),
                n->conf->node_connect_timeout_ms);
        pr_conn_close(n->sched, -ETIMEDOUT);
        return;
    }
    if (n->sstate == S_DOWN && !n->stopping)
        connect_sched(n);
}

static void sched_on_close(struct pr_conn *conn, int status)
{
    struct pr_node *n = conn->owner;
    if (n->sched != conn)
        return;
    int was_up = n->sstate == S_UP;
    n->sched = NULL;
    n->sstate = S_DOWN;
    if (conn->auth_failed)
        n->sched_auth_failures++;
    if (n->stopping)
        return;
    if (was_up) {
        pr_warn("scheduler link lost (%s): %s; reconnecting",
                pr_node_sched_addr(n), status ? strerror(-status) : "closed");
        pr_node_ipc_sched_lost(n);
    }
    uv_timer_start(&n->sched_retry, retry_cb, pr_node_scheds_next(n, was_up),
                   0);
}

static const struct pr_conn_ops sched_ops = {
    .on_msg = sched_on_msg,
    .on_data = NULL,
    .on_close = sched_on_close,
};

static void sched_connected(struct pr_conn *c, int status)
{
    struct pr_node *n = c->owner;
    if (n->sched != c)
        return;
    if (status < 0) {
        if (n->scheds.tries == 0)
            pr_warn("scheduler %s: %s; retrying", pr_node_sched_addr(n),
                    uv_strerror(status));
        pr_conn_close(c, status);
        return;
    }
    /* The scheduler speaks first: its challenge (auth.h). */
    n->sstate = S_CHALLENGE;
}

/* The scheduler's challenge came: answer with the hello. */
static int on_challenge(struct pr_node *n, const Pr__V1__Msg *m)
{
    if (m->body_case != PR__V1__MSG__BODY_CHALLENGE) {
        pr_warn("scheduler: expected a challenge, got %s: closing",
                pr_msg_name(m));
        return -EPROTO;
    }
    uint8_t buf[2 * PR_AUTH_NONCE_LEN];
    size_t len;
    const char *why;
    int rc = pr_auth_answer(n->key, m->challenge, n->sched_challenge,
                            n->my_nonce, buf, &len, &n->sched_cipher, &why);
    if (rc < 0) {
        pr_err("scheduler %s: %s", pr_node_sched_addr(n), why);
        return rc;
    }
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.name = n->conf->node_name;
    h.data_addr = n->data_addr;
    h.heartbeat_ms = n->conf->sched_heartbeat_ms;
    h.node_timeout_ms = n->conf->sched_node_timeout_ms;
    h.max_group_id = n->max_group_id;
    h.prev_node_id = n->self;
    h.auth.data = buf;
    h.auth.len = len;
    h.seal = n->sched_cipher;
    Pr__V1__Msg r = PR_MSG_OF(HELLO, hello, &h);
    n->sstate = S_HELLO;
    return pr_node_send(n, &r);
}

static void connect_sched(struct pr_node *n)
{
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(pr_node_sched_addr(n), host, sizeof(host),
                               &port) < 0)
        return; /* pr_conf_validate() checked every entry */
    n->sched = pr_conn_create_tcp(n->loop, PR_CTRL_MAX_FRAME, &sched_ops, n);
    if (!n->sched)
        return;
    pr_conn_set_batch(n->sched, n->sched_batch);
    n->sstate = S_CONNECTING;
    n->sched_cipher = 0;
    int rc = pr_hello_transcript(n->sched, n->key);
    if (rc < 0)
        return;
    rc = pr_conn_connect(n->sched, host, port, sched_connected);
    if (rc < 0) {
        pr_err("scheduler %s: %s", pr_node_sched_addr(n), uv_strerror(rc));
        pr_conn_close(n->sched, rc);
        return;
    }
    snprintf(n->sched->name, sizeof(n->sched->name), "scheduler %s",
             pr_node_sched_addr(n));
    uv_timer_start(&n->sched_retry, retry_cb, n->conf->node_connect_timeout_ms,
                   0);
}

/*
 * The heartbeat, with how fast each peer's chunks arrived here: the
 * scheduler orders rings by these rates (sched_ring.c).
 */
static void send_ping(struct pr_node *n, uint64_t now)
{
    struct pr_link_rate lr[NODE_RATES_MAX];
    Pr__V1__LinkRate rb[NODE_RATES_MAX], *rp[NODE_RATES_MAX];
    size_t k = pr_tcp_xport_rates(n->xport, now, lr, NODE_RATES_MAX);
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
    pr_node_send(n, &m);
}

static void tick_cb(uv_timer_t *t)
{
    struct pr_node *n = t->data;
    uint64_t now = uv_now(n->loop);
    pr_node_ipc_tick(n, now);
    if (n->sstate != S_UP)
        return;
    if (now - n->sched->last_rx_ms > n->conf->sched_node_timeout_ms) {
        pr_warn("scheduler silent for %llu ms: dropping the link",
                (unsigned long long)(now - n->sched->last_rx_ms));
        /*
         * By the same timeout the scheduler judges this node gone, aborts
         * its groups on the other nodes and has the peers drop their links
         * to it; a partition keeps all of that from arriving here. The
         * groups running here cannot finish: their trainers hear so now,
         * not at their deadline.
         */
        pr_node_groups_fail(n, -ECONNRESET);
        pr_conn_close(n->sched, -ETIMEDOUT);
        return;
    }
    if (now - n->last_ping_ms >= n->conf->sched_heartbeat_ms) {
        n->last_ping_ms = now;
        send_ping(n, now);
    }
}

static struct pr_link *resolve(void *ctx, uint32_t node_id)
{
    struct pr_node *n = ctx;
    return pr_tcp_xport_link(n->xport, node_id);
}

/* node.reduce_threads' default: the CPUs this daemon may run on, capped. */
#define DEFAULT_THREADS_CAP 8

static int set_reduce_threads(struct pr_node *n)
{
    unsigned t = n->conf->node_reduce_threads;
    if (t == 0)
        t = pr_pool_default_threads(DEFAULT_THREADS_CAP);
    int rc = pr_engine_set_threads(n->engine, t);
    if (rc < 0)
        pr_err("pr_engine_set_threads(%u): %s", t, strerror(-rc));
    else
        pr_info("arithmetic on %u thread%s", t, t == 1 ? "" : "s");
    return rc;
}

static size_t chunk_floats(const struct pr_conf *c)
{
    return (size_t)c->xport_chunk_kb * 1024 / sizeof(float);
}

/*
 * transport = auto uses RDMA when this node has a usable device (and each
 * peer link then uses it if the peer has one too); rdma requires it; tcp
 * never opens a device.
 */
static int open_rdma(struct pr_node *n)
{
    const struct pr_conf *c = n->conf;
    if (c->xport_type == PR_XPORT_TCP)
        return 0;
    /* pr_conf_validate() refused transport.type = rdma with it. */
    if (pr_conf_encrypts(c)) {
        pr_info("transport: encrypted links carry the data over TCP; RDMA "
                "is not used (security.encrypt, docs/operations.md, Security)");
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
    int rc = pr_rdma_open(n->loop, &rc_conf, pr_tcp_xport_rdma_ops(), n->xport,
                          &n->rdma);
    if (rc < 0) {
        if (c->xport_type == PR_XPORT_RDMA) {
            pr_err("transport = rdma, but RDMA device '%s' is not usable: "
                   "%s",
                   c->xport_rdma_device[0] ? c->xport_rdma_device : "(any)",
                   strerror(-rc));
            return rc;
        }
        pr_info("no usable RDMA device (%s): peers use TCP", strerror(-rc));
        n->rdma = NULL;
        return 0;
    }
    pr_tcp_xport_set_rdma(n->xport, n->rdma, c->xport_type == PR_XPORT_RDMA);
    pr_engine_set_allocator(n->engine, pr_rdma_alloc, pr_rdma_free, n->rdma);
    return 0;
}

/* The kernel's limit on this process's memory maps, or 0 if unknown. */
static uint64_t read_max_map_count(void)
{
    unsigned long long v = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/*
 * Says so when vm.max_map_count leaves room for fewer tensors than
 * node.max_tensors: node_tensor.c then caps them lower, and a trainer's
 * create is refused before node.max_tensors is reached.
 */
static void warn_max_map_count(const struct pr_node *n)
{
    uint32_t max_tensors = n->conf->node_max_tensors;
    uint64_t maps = n->max_map_count;
    if (!maps || maps >= max_tensors + PR_NODE_MAP_RESERVE)
        return;
    pr_warn("vm.max_map_count is %llu: this node maps at most %llu "
            "trainers' tensors (node.max_tensors = %u)",
            (unsigned long long)maps,
            maps > PR_NODE_MAP_RESERVE
                ? (unsigned long long)(maps - PR_NODE_MAP_RESERVE)
                : 0ULL,
            max_tensors);
}

/*
 * The peers' listener on node.data_listen, and the address the scheduler
 * hands peers (node.data_advertise, else the address bound): 0 or the
 * error, logged.
 */
static int listen_peers(struct pr_node *n)
{
    const struct pr_conf *conf = n->conf;
    char host[96];
    uint16_t port, bound = 0;
    int rc = pr_conf_parse_hostport(conf->node_data_listen, host, sizeof(host),
                                    &port);
    if (rc == 0)
        rc = pr_tcp_xport_listen(n->xport, host, port, &bound);
    if (rc < 0) {
        pr_err("peer listener on %s: %s", conf->node_data_listen,
               rc == -EINVAL ? "bad address" : uv_strerror(rc));
        return rc;
    }
    if (conf->node_data_advertise && conf->node_data_advertise[0])
        snprintf(n->data_addr, sizeof(n->data_addr), "%s",
                 conf->node_data_advertise);
    else
        snprintf(n->data_addr, sizeof(n->data_addr),
                 strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, bound);
    return 0;
}

int pr_node_create(uv_loop_t *loop, struct pr_conf *conf,
                   const struct pr_auth_key *key, struct pr_node **out)
{
    struct pr_node *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->loop = loop;
    n->conf = conf;
    n->key = key;
    uv_timer_init(loop, &n->sched_retry);
    uv_timer_init(loop, &n->tick);
    n->sched_retry.data = n;
    n->tick.data = n;
    uv_idle_init(loop, &n->spin);
    n->spin.data = n;
    n->handles = 3;
    int rc = pr_node_scheds_init(n);
    if (rc < 0) {
        /* Nothing but the timers above to close. */
        pr_node_destroy(n);
        return rc;
    }
    n->handles++;
    n->max_map_count = read_max_map_count();
    warn_max_map_count(n);
    /*
     * Forwarded chunks keep their originator's size, which may be another
     * node's chunk_kb (or ours before a reload): accept up to the largest
     * chunk any configuration allows. The reader grows only as needed.
     */
    n->xport = pr_tcp_xport_create(loop, 0, MAX_CHUNK_BYTES,
                                   conf->node_connect_timeout_ms);
    n->engine =
        pr_engine_create(loop, chunk_floats(conf), STASH_MAX_BYTES, resolve, n);
    n->sched_batch = pr_conn_batch_create(loop);
    if (!n->xport || !n->engine || !n->sched_batch) {
        rc = -ENOMEM;
        goto fail;
    }
    /* Early chunks wait for their group as long as a reduce may take. */
    pr_engine_set_stash_ms(n->engine, conf->node_reduce_timeout_ms);
    struct pr_link_sink sink = pr_node_spin_sink(n);
    pr_tcp_xport_set_sink(n->xport, &sink);
    pr_tcp_xport_set_key(n->xport, key);
    pr_tcp_xport_set_streams(n->xport, conf->xport_streams);
    pr_tcp_xport_set_express(n->xport, (size_t)conf->xport_express_kb << 10);
    /* TCP reads any memory; with RDMA every tensor is registered. */
    pr_engine_set_direct(n->engine, 1);
    rc = set_reduce_threads(n);
    if (rc < 0)
        goto fail;
    rc = open_rdma(n);
    if (rc < 0)
        goto fail;
    rc = listen_peers(n);
    if (rc == 0)
        rc = pr_node_ipc_listen(n);
    if (rc == 0 && conf->metrics_listen[0])
        rc = pr_metrics_start(loop, conf->metrics_listen,
                              pr_node_render_metrics, n, &n->metrics);
    if (rc < 0)
        goto fail;
    pr_info("node '%s': peers connect to %s; scheduler at %s", conf->node_name,
            n->data_addr, conf->node_scheduler);
    connect_sched(n);
    uv_timer_start(&n->tick, tick_cb, TICK_MS, TICK_MS);
    *out = n;
    return 0;
fail:
    pr_node_destroy(n);
    return rc;
}

int pr_node_reload(struct pr_node *n)
{
    pr_engine_set_chunk(n->engine, chunk_floats(n->conf));
    pr_engine_set_stash_ms(n->engine, n->conf->node_reduce_timeout_ms);
    return 0;
}

static void node_closed_cb(uv_handle_t *h)
{
    struct pr_node *n = h->data;
    if (--n->handles == 0)
        free(n);
}

void pr_node_destroy(struct pr_node *n)
{
    if (!n)
        return;
    n->stopping = 1;
    pr_metrics_stop(n->metrics);
    n->metrics = NULL;
    if (n->xport) {
        struct pr_tcp_xport_stats ts;
        pr_tcp_xport_stats(n->xport, &ts);
        struct pr_rdma_stats rs = {0};
        if (n->rdma)
            pr_rdma_stats(n->rdma, &rs);
        pr_info("data sent: %llu bytes over tcp, %llu over rdma; received: "
                "%llu over tcp, %llu over rdma (rdma: %llu data writes, "
                "%llu credit messages, %llu completion events)",
                (unsigned long long)ts.bytes_sent,
                (unsigned long long)rs.bytes_sent,
                (unsigned long long)ts.bytes_recv,
                (unsigned long long)rs.bytes_recv,
                (unsigned long long)rs.writes,
                (unsigned long long)rs.credit_msgs,
                (unsigned long long)rs.cq_events);
    }
    /*
     * The transports stop first, so that no send reads a trainer's tensor
     * any more when its group is answered below (the trainer may change it
     * at once, and a neighbour must not finish on such floats).
     */
    pr_tcp_xport_destroy(n->xport);
    n->xport = NULL;
    /* After the links: it fails and reaps their queue pairs' requests. */
    pr_rdma_close(n->rdma);
    n->rdma = NULL;
    if (n->engine) {
        struct pr_engine_stats es;
        pr_engine_stats(n->engine, &es);
        pr_info("groups: %llu ok (%llu in place), %llu failed; over the "
                "wire in fp32 %llu, bf16 %llu, int8 %llu",
                (unsigned long long)es.groups_ok,
                (unsigned long long)es.groups_in_place,
                (unsigned long long)es.groups_failed,
                (unsigned long long)es.wire_groups[PR_WIRE_FP32],
                (unsigned long long)es.wire_groups[PR_WIRE_BF16],
                (unsigned long long)es.wire_groups[PR_WIRE_INT8]);
    }
    /* Groups still running fail, so their trainers still get an answer. */
    pr_engine_destroy(n->engine);
    n->engine = NULL;
    pr_node_ipc_close(n);
    if (n->sched) {
        struct pr_conn *c = n->sched;
        n->sched = NULL;
        pr_conn_detach_close(c);
    }
    pr_conn_batch_close(n->sched_batch);
    n->sched_batch = NULL;
    pr_node_scheds_stop(n);
    if (n->scheds.n)
        uv_close((uv_handle_t *)&n->scheds.probe_timer, node_closed_cb);
    uv_close((uv_handle_t *)&n->sched_retry, node_closed_cb);
    uv_close((uv_handle_t *)&n->tick, node_closed_cb);
    uv_close((uv_handle_t *)&n->spin, node_closed_cb);
}
