/* SPDX-License-Identifier: MIT */
#include "daemon/sched/sched.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/base/conn.h"
#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/base/metrics.h"
#include "daemon/sched/core/sched_core.h"
#include "daemon/sched/sched_int.h"

static void broadcast_peers(struct pr_sched *s)
{
    size_t n = 0;
    for (struct sched_node *x = s->nodes; x; x = x->next)
        n += x->id != 0;
    Pr__V1__Peer *peers = calloc(n ? n : 1, sizeof(*peers));
    Pr__V1__Peer **pp = calloc(n ? n : 1, sizeof(*pp));
    if (!peers || !pp) {
        free(peers);
        free(pp);
        return;
    }
    size_t i = 0;
    for (struct sched_node *x = s->nodes; x; x = x->next) {
        if (!x->id)
            continue;
        pr__v1__peer__init(&peers[i]);
        peers[i].node_id = x->id;
        peers[i].data_addr = x->data_addr;
        pp[i] = &peers[i];
        i++;
    }
    Pr__V1__PeerList pl = PR__V1__PEER_LIST__INIT;
    pl.n_peers = n;
    pl.peers = pp;
    Pr__V1__Msg m = PR_MSG_OF(PEER_LIST, peer_list, &pl);
    for (struct sched_node *x = s->nodes; x; x = x->next)
        if (x->id)
            pr_sched_send(x, &m);
    free(peers);
    free(pp);
}

static void sched_release(struct pr_sched *s);

static void node_forget(struct pr_sched *s, struct sched_node *n,
                        const char *why);

int pr_sched_hello_fields(const Pr__V1__Hello *h, const char **why)
{
    char host[96];
    uint16_t port;
    if (h->role != PR__V1__ROLE__ROLE_NODE || !h->data_addr ||
        pr_conf_parse_hostport(h->data_addr, host, sizeof(host), &port) < 0 ||
        port == 0)
        return *why = "expected a node hello", -EPROTO;
    /*
     * Ids come from a microsecond clock (2^51 now): one near 2^64 is not
     * a daemon's, and the base after it would wrap to 0.
     */
    if (h->max_group_id >= PR_SCHED_GROUP_ID_MAX)
        return *why = "group id out of range", -EPROTO;
    return 0;
}

/*
 * Whether hello h is a node daemon's of our protocol that proves the
 * cluster key: 0 and the proof for our Welcome (*plen bytes), or -1 with
 * the reason logged and n's connection failed.
 */
static int hello_check(struct sched_node *n, const Pr__V1__Hello *h,
                       uint8_t proof[PR_AUTH_PROOF_LEN], size_t *plen)
{
    if (pr_hello_version(n->conn, h) < 0)
        return -1;
    const char *why;
    if (pr_sched_hello_fields(h, &why) < 0) {
        pr_warn("%s: hello is not from a node daemon with a data address: "
                "closing",
                n->conn->name);
        pr_conn_fail(n->conn, -EPROTO, why);
        return -1;
    }
    char who[96];
    snprintf(who, sizeof(who), "node '%s'", h->name ? h->name : "");
    if (pr_hello_auth(n->conn, n->s->key, n->challenge, h, who, proof, plen) <
        0)
        return -1;
    return 0;
}

/*
 * A node daemon listens on its data address alone: a node of the same
 * name already known there is this one's previous life, whose connection
 * has not looked dead yet (a reset that never arrived, or its close not
 * yet seen). Forget it now, or its workers would keep their names from the
 * ones this daemon registers again next. Returns whether one was
 * forgotten; *namesake is a live node of n's name elsewhere, or NULL.
 */
static int forget_previous_life(struct sched_node *n,
                                const struct sched_node **namesake)
{
    struct pr_sched *s = n->s;
    int forgot = 0;
    *namesake = NULL;
    for (struct sched_node *old = s->nodes; old; old = old->next) {
        if (old == n || !old->id || strcmp(old->name, n->name))
            continue;
        if (!strcmp(old->data_addr, n->data_addr)) {
            node_forget(s, old, "its daemon connected again");
            pr_conn_close(old->conn, -ECONNRESET);
            forgot = 1;
        } else if (!old->conn->closing) {
            *namesake = old;
        }
    }
    return forgot;
}

/*
 * The id node n gets: `prev`, the one its last scheduler gave it, unless
 * another live node has it (peers key their links by ids: a node that
 * keeps its id across a failover keeps its links); else the next free.
 */
static uint32_t node_id_for(struct pr_sched *s, const struct sched_node *n,
                            uint32_t prev)
{
    uint32_t id = prev;
    for (;;) {
        int taken = id == 0;
        for (const struct sched_node *o = s->nodes; o && !taken; o = o->next)
            taken = o != n && o->id == id;
        if (!taken)
            break;
        id = ++s->next_node_id;
    }
    if (id > s->next_node_id)
        s->next_node_id = id;
    return id;
}

/*
 * Node id is gone and the others are told to drop their links to it
 * (broadcast_peers): if it comes back with its id, it must drop its own.
 */
static void remember_gone(struct pr_sched *s, uint32_t id)
{
    size_t max = sizeof(s->forgotten) / sizeof(s->forgotten[0]);
    if (s->nforgotten == max) { /* the oldest goes */
        memmove(s->forgotten, s->forgotten + 1,
                (max - 1) * sizeof(s->forgotten[0]));
        s->nforgotten--;
    }
    s->forgotten[s->nforgotten++] = id;
}

/* Whether id was judged gone here (and no longer is): its peers know. */
static int unforget(struct pr_sched *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->nforgotten; i++) {
        if (s->forgotten[i] != id)
            continue;
        memmove(s->forgotten + i, s->forgotten + i + 1,
                (s->nforgotten - i - 1) * sizeof(s->forgotten[0]));
        s->nforgotten--;
        return 1;
    }
    return 0;
}

/* The wall clock in microseconds: the base of a session's group ids. */
static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000;
}

/* Whether n is the only node past its hello. */
static int only_node(const struct pr_sched *s, const struct sched_node *n)
{
    for (const struct sched_node *o = s->nodes; o; o = o->next)
        if (o != n && o->id != 0)
            return 0;
    return 1;
}

static void send_welcome(struct sched_node *n, uint8_t *proof, size_t plen,
                         int peers_dropped)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = n->id;
    w.job = n->s->conf->job;
    w.auth.data = proof;
    w.auth.len = plen;
    w.group_id_base = n->s->id_base;
    w.heartbeat_ms = n->s->conf->sched_heartbeat_ms;
    w.node_timeout_ms = n->s->conf->sched_node_timeout_ms;
    w.peers_dropped = peers_dropped != 0;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    pr_sched_send(n, &m);
}

static int on_hello(struct sched_node *n, const Pr__V1__Hello *h)
{
    struct pr_sched *s = n->s;
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen;
    if (hello_check(n, h, proof, &plen) < 0)
        return 0;
    /* A known node: no stranger, and its frames may be control-sized. */
    pr_stranger_remove(&n->st);
    n->conn->rd.max_len = PR_CTRL_MAX_FRAME;
    snprintf(n->name, sizeof(n->name), "%s", h->name ? h->name : "");
    snprintf(n->data_addr, sizeof(n->data_addr), "%s", h->data_addr);
    const struct sched_node *namesake;
    int forgot = forget_previous_life(n, &namesake);
    n->id = node_id_for(s, n, h->prev_node_id);
    int dropped = n->id == h->prev_node_id && unforget(s, n->id);
    /*
     * Two live daemons of one name (a copied config, a host cloned): both
     * are served, but logs, metrics and preducectl cannot tell them apart.
     */
    if (namesake)
        pr_warn("node %u: name '%s' is node %u's too (data at %s); this one's "
                "data is at %s: two daemons with one name (set node.name)",
                n->id, n->name, namesake->id, namesake->data_addr,
                n->data_addr);
    snprintf(n->conn->name, sizeof(n->conn->name), "node %u (%s)", n->id,
             n->name);
    /*
     * A scheduler that gets its first node takes the job over (at start,
     * after a restart, or as the standby the nodes moved to): its group
     * ids start from now, above every id a scheduler before it gave
     * (fewer than one group a microsecond), so a daemon never takes a new
     * group for a stale one, and a trainer's group ids keep rising.
     */
    if (!s->groups && !s->jobs && only_node(s, n))
        s->id_base = wall_us();
    /*
     * A node that comes from another scheduler (a standby and the first
     * both active across a partition) may have taken higher ids there:
     * this one's go on above them. Groups in flight keep the ids they
     * were sent with, and the base only grows, so every node's ids still
     * rise.
     */
    if (h->max_group_id >= s->id_base)
        s->id_base = h->max_group_id + 1;
    send_welcome(n, proof, plen, dropped);
    if (pr_hello_seal(n->conn, s->key, n->challenge, h) < 0)
        return 0;
    pr_info("node %u (%s) joined, data at %s", n->id, n->name, n->data_addr);
    char differs[160];
    if (pr_hello_timing_differs(s->conf->sched_heartbeat_ms,
                                s->conf->sched_node_timeout_ms, h->heartbeat_ms,
                                h->node_timeout_ms, differs, sizeof(differs)))
        pr_warn("node %u (%s): settings differ (%s): one side may drop the "
                "link while the other is alive, or see it die late; set "
                "them alike on every daemon",
                n->id, n->name, differs);
    broadcast_peers(s);
    /* Without the workers forgotten, a group may be due. */
    if (forgot)
        pr_sched_schedule_all(s);
    return 0;
}

/*
 * A Pong carries the Ping's nonce back (heartbeat_cb() sends ours); the
 * node's link rates are kept for ring order (sched_ring.c). Out of
 * memory, the last ones stay.
 */
static void answer_ping(struct sched_node *n, Pr__V1__Ping *ping)
{
    size_t k = ping->n_rates;
    struct sched_rate *r = k ? calloc(k, sizeof(*r)) : NULL;
    if (r || k == 0) {
        for (size_t i = 0; i < k; i++)
            r[i] =
                (struct sched_rate){.from = ping->rates[i]->node,
                                    .bytes_per_s = ping->rates[i]->bytes_per_s,
                                    .age_ms = ping->rates[i]->age_ms};
        free(n->rates);
        n->rates = r;
        n->nrates = k;
        n->rates_ms = uv_now(n->s->loop);
    }
    Pr__V1__Ping back = PR__V1__PING__INIT;
    back.nonce = ping->nonce;
    Pr__V1__Msg pong = PR_MSG_OF(PONG, pong, &back);
    pr_sched_send(n, &pong);
}

static int node_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct sched_node *n = c->owner;
    if (!n->id) {
        if (m->body_case != PR__V1__MSG__BODY_HELLO) {
            pr_warn("%s: %s message before hello: closing", c->name,
                    pr_msg_name(m));
            return -EPROTO;
        }
        return on_hello(n, m->hello);
    }
    switch (m->body_case) {
    case PR__V1__MSG__BODY_WORKER_JOIN:
        pr_sched_on_worker_join(n, m->worker_join);
        return 0;
    case PR__V1__MSG__BODY_WORKER_LEAVE:
        pr_sched_on_worker_leave(n, m->worker_leave);
        return 0;
    case PR__V1__MSG__BODY_READY:
        pr_sched_on_ready(n, m->ready);
        return 0;
    case PR__V1__MSG__BODY_CANCEL:
        pr_sched_on_cancel(n, m->cancel);
        return 0;
    case PR__V1__MSG__BODY_GROUP_DONE:
        pr_sched_on_group_done(n, m->group_done);
        return 0;
    case PR__V1__MSG__BODY_PING:
        answer_ping(n, m->ping);
        return 0;
    case PR__V1__MSG__BODY_PONG:
        return 0;
    default:
        pr_warn("%s: unexpected %s message: closing", c->name, pr_msg_name(m));
        return -EPROTO;
    }
}

/*
 * Node n is gone: its workers leave and its groups in flight fail on the
 * other nodes. It keeps its place on the node list (its connection closes
 * later) with id 0, as one that never said hello.
 */
static void node_forget(struct pr_sched *s, struct sched_node *n,
                        const char *why)
{
    pr_warn("node %u (%s) lost: %s", n->id, n->name, why);
    pr_sched_forget_node(s, n->id);
    n->id = 0;
}

static void node_on_close(struct pr_conn *c, int status)
{
    struct sched_node *n = c->owner;
    struct pr_sched *s = n->s;
    pr_stranger_remove(&n->st);
    struct sched_node **pp = &s->nodes;
    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    if (s->stopping) {
        free(n->rates);
        free(n);
        sched_release(s);
        return;
    }
    if (!n->id) {
        free(n->rates); /* a node forgotten on its reconnect had some */
        free(n);
        return;
    }
    remember_gone(s, n->id);
    node_forget(s, n, status ? strerror(-status) : "closed");
    free(n->rates);
    free(n);
    broadcast_peers(s);
    pr_sched_schedule_all(s);
}

static const struct pr_conn_ops node_ops = {
    .on_msg = node_on_msg,
    .on_data = NULL,
    .on_close = node_on_close,
};

static const struct pr_stranger_rules stranger_rules = {
    .what = "scheduler listener",
    .awaits = "hello",
    .max = SCHED_STRANGERS_MAX,
    .per_source_max = SCHED_STRANGERS_PER_SOURCE,
};

static void stranger_close(struct pr_stranger *st, int status)
{
    struct sched_node *n =
        (struct sched_node *)((char *)st - offsetof(struct sched_node, st));
    pr_conn_close(n->conn, status);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct pr_sched *s = server->data;
    if (status < 0) {
        pr_warn("scheduler listener: %s", uv_strerror(status));
        return;
    }
    struct sched_node *n = calloc(1, sizeof(*n));
    if (!n)
        return;
    n->s = s;
    n->conn = pr_conn_create_tcp(s->loop, PR_HELLO_MAX_FRAME, &node_ops, n);
    if (!n->conn) {
        free(n);
        return;
    }
    pr_conn_set_batch(n->conn, s->batch);
    n->next = s->nodes;
    s->nodes = n;
    if (uv_accept(server, &n->conn->h.stream) < 0) {
        pr_conn_close(n->conn, -ECONNABORTED);
        return;
    }
    pr_source_tcp(&n->conn->h.tcp, n->st.source, sizeof(n->st.source));
    snprintf(n->conn->name, sizeof(n->conn->name), "scheduler link from %s",
             n->st.source);
    n->st.name = n->conn->name;
    n->st.close = stranger_close;
    if (pr_strangers_admit(&s->strangers, &stranger_rules, &n->st,
                           uv_now(s->loop)) < 0 ||
        pr_conn_start(n->conn) < 0) {
        pr_conn_close(n->conn, -EBUSY);
        return;
    }
    uv_tcp_nodelay(&n->conn->h.tcp, 1);
    /* GROUP and the rest must not wait behind chunks in a link's queue. */
    int rc = pr_conn_lowdelay(n->conn);
    if (rc < 0)
        pr_dbg("%s: not marked low-delay: %s", n->conn->name, strerror(-rc));
    if (pr_hello_transcript(n->conn, s->key) < 0)
        return;
    Pr__V1__Challenge ch;
    pr_auth_challenge(s->key, n->challenge, &ch);
    Pr__V1__Msg m = PR_MSG_OF(CHALLENGE, challenge, &ch);
    pr_sched_send(n, &m);
}

static void heartbeat_cb(uv_timer_t *t)
{
    struct pr_sched *s = t->data;
    uint64_t now = uv_now(s->loop);
    Pr__V1__Ping p = PR__V1__PING__INIT;
    p.nonce = now;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &p);
    /*
     * After this loop was held up (a long callback, or the whole process
     * off the CPU), timers run before the reads that waited: every node
     * would look silent. Such a late tick judges no one; the next does.
     */
    int late = s->last_beat_ms && now - s->last_beat_ms >
                                      2 * (uint64_t)s->conf->sched_heartbeat_ms;
    if (late)
        pr_warn("scheduler: heartbeat %llu ms late: no node is judged "
                "silent on this tick",
                (unsigned long long)(now - s->last_beat_ms -
                                     s->conf->sched_heartbeat_ms));
    s->last_beat_ms = now;
    uint32_t limit = s->conf->sched_node_timeout_ms;
    if (!late)
        pr_strangers_sweep(&s->strangers, &stranger_rules, limit, now);
    for (struct sched_node *n = s->nodes; n; n = n->next) {
        if (n->conn->closing)
            continue;
        if (!late && now - n->conn->last_rx_ms > limit) {
            pr_warn("%s: silent for %llu ms: dropping it", n->conn->name,
                    (unsigned long long)(now - n->conn->last_rx_ms));
            pr_conn_close(n->conn, -ETIMEDOUT);
            continue;
        }
        if (n->id)
            pr_sched_send(n, &m);
    }
    pr_sched_expire_groups(s, now);
}

/* The link rates the nodes reported, and how often they moved a ring. */
static int render_rates(const struct pr_sched *s, struct pr_metrics_buf *b)
{
    pr_metrics_header(b, "preduce_sched_rings_reordered_total", "counter",
                      "Group rings ordered by the link rates, not by node "
                      "id (scheduler.ring_order = measured).");
    pr_metrics_printf(b, "preduce_sched_rings_reordered_total %llu\n",
                      (unsigned long long)s->rings_reordered);
    pr_metrics_header(b, "preduce_sched_link_rate_bytes_per_second", "gauge",
                      "How fast chunks from node `from` reached node `to`, "
                      "as `to` last reported it.");
    for (const struct sched_node *n = s->nodes; n; n = n->next)
        for (size_t i = 0; i < n->nrates; i++)
            pr_metrics_printf(b,
                              "preduce_sched_link_rate_bytes_per_second{"
                              "from=\"%u\",to=\"%u\"} %llu\n",
                              n->rates[i].from, n->id,
                              (unsigned long long)n->rates[i].bytes_per_s);
    return b->err;
}

/* metrics.h's callback: a snapshot of the live workers for rendering. */
static int render_metrics(void *ctx, struct pr_metrics_buf *out)
{
    struct pr_sched *s = ctx;
    struct pr_sched_view v = {.job = s->conf->job,
                              .now_us = pr_sched_now_us(),
                              .live = pr_sched_live_workers(s),
                              .workers_refused = s->workers_refused,
                              .key_refused = s->key_refused,
                              .groups_formed = s->groups_formed,
                              .window_ms = s->conf->sched_window_ms,
                              .members = s->members,
                              .sizes = s->sizes};
    for (struct sched_node *n = s->nodes; n; n = n->next)
        v.nodes += n->id != 0;
    size_t nw = 0;
    for (const struct sched_job *j = s->jobs; j; j = j->next)
        nw += pr_sched_core_live(j->core);
    struct pr_sched_job_view *jv = calloc(s->njobs + 1, sizeof(*jv));
    struct pr_sched_stats *st = calloc(s->njobs + 1, sizeof(*st));
    struct pr_sched_worker_view *w = calloc(nw + 1, sizeof(*w));
    int rc = -ENOMEM;
    if (!jv || !st || !w)
        goto out;
    size_t used = 0;
    for (const struct sched_job *j = s->jobs; j; j = j->next) {
        struct pr_sched_job_view *x = &jv[v.njobs];
        pr_sched_core_stats(j->core, &st[v.njobs]);
        *x = (struct pr_sched_job_view){
            .name = j->name,
            .id = j->id,
            .policy = pr_policy_name(j->policy),
            .queued = pr_sched_core_queued(j->core),
            .window_ms = pr_sched_core_window_ms(j->core),
            .keyed = j->proof_len > 0,
            .core = &st[v.njobs],
            .workers = w + used,
        };
        for (uint32_t r = 0; r < j->nworkers_cap && used < nw; r++)
            if (j->workers[r].live)
                w[used + x->nworkers++] = (struct pr_sched_worker_view){
                    j->workers[r].name, r, j->workers[r].node,
                    &j->workers[r].st};
        used += x->nworkers;
        v.queued += x->queued;
        v.njobs++;
    }
    v.jobs = jv;
    rc = pr_sched_metrics_render(&v, out);
out:
    free(jv);
    free(st);
    free(w);
    if (rc == 0)
        rc = render_rates(s, out);
    return rc;
}

int pr_sched_create(uv_loop_t *loop, struct pr_conf *conf,
                    const struct pr_auth_key *key, struct pr_sched **out)
{
    if (pr_sched_check_conf(conf) < 0)
        return -EINVAL;
    struct pr_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->loop = loop;
    s->conf = conf;
    s->key = key;
    s->id_base = wall_us();
    char host[96];
    uint16_t port;
    int rc =
        pr_conf_parse_hostport(conf->sched_listen, host, sizeof(host), &port);
    struct sockaddr_storage ss;
    if (rc == 0 && uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        rc = -EINVAL;
    s->batch = pr_conn_batch_create(loop);
    if (!s->batch) {
        free(s);
        return -ENOMEM;
    }
    uv_tcp_init(loop, &s->listener);
    uv_timer_init(loop, &s->deadline);
    uv_timer_init(loop, &s->heartbeat);
    s->listener.data = s;
    s->deadline.data = s;
    s->deadline_us = -1;
    s->heartbeat.data = s;
    if (rc == 0)
        rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc < 0) {
        pr_err("scheduler: listen on %s: %s", conf->sched_listen,
               rc == -EINVAL ? "bad address" : uv_strerror(rc));
        pr_sched_destroy(s);
        return rc;
    }
    int len = sizeof(ss);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_timer_start(&s->heartbeat, heartbeat_cb, conf->sched_heartbeat_ms,
                   conf->sched_heartbeat_ms);
    if (conf->metrics_listen[0] &&
        (rc = pr_metrics_start(loop, conf->metrics_listen, render_metrics, s,
                               &s->metrics)) < 0) {
        pr_sched_destroy(s);
        return rc;
    }
    pr_info("scheduler listening on %s:%u, policy %s; trainers that name "
            "no job join '%s'",
            host, s->port, pr_policy_name(conf->sched_policy), conf->job);
    *out = s;
    return 0;
}

int pr_sched_check_conf(const struct pr_conf *conf)
{
    struct pr_sched_params p;
    char why[512];
    if (pr_sched_job_settings_check(conf, why, sizeof(why)) < 0) {
        pr_err("%s", why);
        return -EINVAL;
    }
    pr_sched_params_from_conf(conf, &p);
    return pr_sched_core_check_params(&p);
}

int pr_sched_reload(struct pr_sched *s)
{
    int rc = pr_sched_jobs_reload(s);
    pr_sched_schedule_all(s);
    return rc;
}

uint16_t pr_sched_port(const struct pr_sched *s)
{
    return s->port;
}

/* Drops one of the references that destroy() counted; frees at zero. */
static void sched_release(struct pr_sched *s)
{
    if (--s->handles == 0) {
        pr_sched_groups_fini(s);
        pr_sched_jobs_fini(s);
        free(s);
    }
}

static void sched_closed_cb(uv_handle_t *h)
{
    sched_release(h->data);
}

void pr_sched_destroy(struct pr_sched *s)
{
    if (!s)
        return;
    s->stopping = 1;
    pr_metrics_stop(s->metrics);
    s->metrics = NULL;
    /* Close callbacks run in any order: s lives until the last of them. */
    s->handles = 3;
    for (struct sched_node *n = s->nodes; n; n = n->next) {
        s->handles++;
        pr_conn_close(n->conn, 0);
    }
    pr_conn_batch_close(s->batch);
    s->batch = NULL;
    uv_close((uv_handle_t *)&s->listener, sched_closed_cb);
    uv_close((uv_handle_t *)&s->deadline, sched_closed_cb);
    uv_close((uv_handle_t *)&s->heartbeat, sched_closed_cb);
}
