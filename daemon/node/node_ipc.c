/* SPDX-License-Identifier: MIT */
/*
 * The trainers' side of a node daemon: a Unix socket where each trainer
 * (libpreduce) registers, creates shared tensors and asks for reduces.
 *
 * Protocol with a trainer, in order:
 *  1. trainer -> Hello{version, role CLIENT, name}; the daemon registers the
 *     worker with the scheduler and answers Welcome{id = rank} or Error.
 *     A name is 1..63 bytes without control characters (it goes into log
 *     lines and metrics), as libpreduce requires too. Until its hello, a
 *     connection is a stranger (stranger.h: at most TRAINER_STRANGERS_MAX,
 * closed after connect_timeout_ms) and no trainer: only those past it count
 *     against max_clients, and one more gets Error{-EUSERS}.
 *  2. TensorCreate{nfloats} -> TensorCreated{tensor_id} with the memfd
 *     passed by SCM_RIGHTS on that frame; both sides map it. The daemon
 *     seals the memfd's size first, so a trainer cannot truncate it under
 *     the daemon's mapping (which would SIGBUS the daemon). A tensor the
 *     daemon cannot make (over max_tensor_mb: -EINVAL; past the trainer's
 *     quota: -EDQUOT; past the node's node.max_tensors: -ENOSPC; memfd,
 *     mmap or RDMA registration failed: their errno) is answered with
 * Error{code, reason} instead, and the connection stays: creates are answered
 * in order, which is how the trainer knows which create an Error answers.
 *  3. Reduce{seq, version, tensor_ids, timeout_ms, deadline_ns, wire, ...}
 *     -> READY to the scheduler; then ReduceDone{seq, status, group, ...}
 *     when the group ran, the scheduler refused, or the deadline passed.
 *     The deadline is the trainer's (deadline_ns, or timeout_ms from now),
 *     no later than node.reduce_timeout_ms from now; the answer comes at
 *     most PR_NODE_GRACE_MS after it. A status is one of proto/status.h's
 *     (pr_reduce_status maps whatever the group, the scheduler or this
 *     daemon produced). READY carries the encoding the trainer asked for
 *     (Reduce.wire, 0: the node's transport.wire); under int8 the group
 *     gets the trainer's error feedback for these tensors
 *     (node_feedback.c).
 *  4. TensorDestroy{id}: no answer.
 * Any other failure is answered with Error, and the connection closes.
 * A trainer that hangs up mid-reduce leaves its tensors mapped here until
 * its group (if one comes) has finished: the group never waits on it, and
 * (in the default mode) no longer writes its result into them, since the
 * trainer may still hold them and was never told the reduce succeeded
 * (final floats the engine had begun to write stay: pr_engine_detach).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/node/node_int.h"
#include "proto/status.h"

#define MAX_TENSORS_PER_REDUCE 4096
/*
 * Trainer connections before their hello (stranger.h): at most
 * TRAINER_STRANGERS_MAX, TRAINER_STRANGERS_PER_UID of them from one user, each
 * for connect_timeout_ms. They do not count against max_clients.
 */
#define TRAINER_STRANGERS_MAX     64
#define TRAINER_STRANGERS_PER_UID 32

static const struct pr_conn_ops trainer_ops;

struct node_trainer *pr_node_trainer_by_cookie(struct pr_node *n,
                                               uint32_t cookie)
{
    for (struct node_trainer *c = n->trainers; c; c = c->next)
        if (c->cookie == cookie)
            return c;
    return NULL;
}

struct node_trainer *pr_node_trainer_by_rank(struct node_sched *s, uint32_t job,
                                             uint32_t rank)
{
    for (struct node_trainer *c = s->n->trainers; c; c = c->next)
        if (c->s == s && c->rank == (int64_t)rank && c->job_id == job)
            return c;
    return NULL;
}

static void send_to(struct node_trainer *c, Pr__V1__Msg *m)
{
    if (!c->conn)
        return;
    int rc = pr_conn_send(c->conn, m);
    if (rc < 0)
        pr_warn("%s: send %s: %s", c->conn->name, pr_msg_name(m),
                strerror(-rc));
}

static void send_leave(struct node_trainer *c)
{
    if (c->rank < 0 || !pr_node_sched_up(c->s))
        return;
    Pr__V1__WorkerLeave l = PR__V1__WORKER_LEAVE__INIT;
    l.rank = (uint32_t)c->rank;
    l.job = c->job_id;
    Pr__V1__Msg m = PR_MSG_OF(WORKER_LEAVE, worker_leave, &l);
    pr_node_send(c->s, &m);
}

/* Frees a trainer that is gone and whose reduce has ended. */
static void trainer_free(struct node_trainer *c)
{
    struct pr_node *n = c->node;
    struct node_trainer **pp = &n->trainers;
    while (*pp && *pp != c)
        pp = &(*pp)->next;
    if (*pp)
        *pp = c->next;
    n->ntrainers--;
    c->s->users--;
    pr_node_set_rstate(c, R_NONE);
    if (c->greeted)
        n->ngreeted--;
    pr_stranger_remove(&c->st);
    send_leave(c);
    pr_node_feedback_free(c);
    for (size_t i = 0; i < c->ntensors; i++)
        pr_node_tensor_free(c, &c->tensors[i]);
    free(c->tensors);
    free(c->parts);
    for (size_t i = 0; i < c->nsettings; i++)
        free(c->settings[i]);
    free(c->settings);
    /* The proof lets whoever holds it register workers in the job. */
    explicit_bzero(c->job_proof, sizeof(c->job_proof));
    free(c);
}

/*
 * The reduce ended: its tensors are free again, and those the trainer
 * destroyed meanwhile go, with the error feedback that held their loss
 * (the engine is done with it).
 */
static void release_tensors(struct node_trainer *c)
{
    size_t w = 0;
    c->err = NULL;
    for (size_t i = 0; i < c->ntensors; i++) {
        struct node_tensor *t = &c->tensors[i];
        t->busy = 0;
        if (t->doomed)
            pr_node_feedback_forget(c, t);
    }
    for (size_t i = 0; i < c->ntensors; i++) {
        struct node_tensor *t = &c->tensors[i];
        if (t->doomed)
            pr_node_tensor_free(c, t);
        else
            c->tensors[w++] = *t;
    }
    c->ntensors = w;
    free(c->parts);
    c->parts = NULL;
    c->nparts = 0;
    pr_node_set_rstate(c, R_NONE);
}

void pr_node_reduce_reply(struct node_trainer *c, const Pr__V1__ReduceDone *d)
{
    release_tensors(c);
    if (!c->conn) {
        trainer_free(c);
        return;
    }
    /* Only the codes the library documents to its trainers. */
    Pr__V1__ReduceDone out = *d;
    out.status = pr_reduce_status(out.status);
    if (out.status == 0) {
        c->version = out.version;
        c->node->reduces_ok++;
        pr_node_reduce_observe(c->node,
                               uv_hrtime() / 1000 - c->reduce_start_us);
    } else {
        c->node->reduces_failed++;
    }
    Pr__V1__Msg m = PR_MSG_OF(REDUCE_DONE, reduce_done, &out);
    send_to(c, &m);
}

void pr_node_reduce_fail(struct node_trainer *c, int status)
{
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    d.seq = c->seq;
    d.status = status;
    d.version = c->version;
    d.rank = c->rank < 0 ? 0 : (uint32_t)c->rank;
    pr_node_reduce_reply(c, &d);
}

static int send_join(struct node_trainer *c);

/*
 * A scheduler's refusal of a trainer's registration as the trainer may see
 * it: a negative errno in -4095..-1 as it is, anything else (0, positive,
 * out of range) -EPROTO. (A reduce's status goes through pr_reduce_status,
 * proto/status.h, instead.)
 */
static int join_fail_status(int64_t status)
{
    return status < 0 && status >= -4095 ? (int)status : -EPROTO;
}

/*
 * Trainer c left while its reduce is R_GROUPED: its group runs on without
 * writing c's tensors. The engine knows the member by the rank the group
 * used, which c keeps (the scheduler may have given it another since).
 */
static void group_detach(struct node_trainer *c)
{
    int rc = pr_engine_detach(c->s->engine, c->group_id, c->group_rank);
    if (rc == 0)
        pr_info("group %llu: worker %u left: its tensors will not be written",
                (unsigned long long)c->group_id, c->group_rank);
    else
        pr_warn("group %llu: pr_engine_detach(worker %u): %s",
                (unsigned long long)c->group_id, c->group_rank, strerror(-rc));
}

/*
 * The job the trainer's hello names (or the node's `job`), its settings
 * and the proof of its key, copied into c; checked for size and control
 * characters only (pr_node_hello_job, pr_node_hello_job_key), since the
 * scheduler judges the rest. 0, or -1
 * with c's connection failed and told why.
 */
static int take_job(struct node_trainer *c, const Pr__V1__Hello *h)
{
    const char *job, *why;
    if (pr_node_hello_job(h, c->node->conf->job, &job, &why) < 0) {
        pr_warn("%s: %s: closing", c->conn->name, why);
        pr_conn_fail(c->conn, -EINVAL, why);
        return -1;
    }
    memcpy(c->job, job, strlen(job) + 1);
    if (pr_node_hello_job_key(h, c->job, c->job_proof, &c->job_proof_len,
                              &why) < 0) {
        pr_warn("%s: job '%s': %s: closing", c->conn->name, c->job, why);
        pr_conn_fail(c->conn, -EINVAL, why);
        return -1;
    }
    if (h->n_settings > 0) {
        c->settings = calloc(h->n_settings, sizeof(*c->settings));
        for (size_t i = 0; c->settings && i < h->n_settings; i++) {
            c->settings[i] = strdup(h->settings[i]);
            if (!c->settings[i])
                break;
            c->nsettings++;
        }
        if (c->nsettings < h->n_settings) {
            pr_conn_fail(c->conn, -ENOMEM, "out of memory");
            return -1;
        }
    }
    return 0;
}

/*
 * The scheduler the trainer's hello names, if any: c follows it from now
 * on (pr_node_sched_for). 0, or -1 with c's connection failed and told
 * why.
 */
static int take_sched(struct node_trainer *c, const Pr__V1__Hello *h)
{
    char spec[PR_NODE_SCHED_SPEC_MAX + 1];
    const char *why;
    int rc = pr_node_hello_sched(h, spec, &why);
    if (rc == 0)
        return 0;
    struct node_sched *s = NULL;
    if (rc > 0)
        rc = pr_node_sched_for(c->node, spec, &s, &why);
    if (rc < 0) {
        pr_warn("%s: scheduler '%s': %s: closing", c->conn->name,
                rc == -EINVAL ? "(malformed)" : spec, why);
        pr_conn_fail(c->conn, rc, why);
        return -1;
    }
    c->s->users--;
    c->s = s;
    s->users++;
    c->named_sched = 1;
    return 0;
}

static int on_hello(struct node_trainer *c, const Pr__V1__Hello *h)
{
    struct pr_node *n = c->node;
    if (pr_hello_version(c->conn, h) < 0)
        return 0;
    const char *reason;
    char why[96];
    if (pr_node_hello_name(h, &reason, why, sizeof(why)) < 0) {
        pr_warn("%s: %s: closing", c->conn->name, why);
        pr_conn_fail(c->conn, -EINVAL, reason);
        return 0;
    }
    size_t len = strlen(h->name);
    uint32_t trainers = n->ngreeted;
    if (trainers >= n->conf->node_max_clients) {
        /*
         * -EUSERS, not -EMFILE: the trainer's own descriptors are fine, it
         * is this node that serves max_clients trainers already.
         */
        pr_warn("%s: %u trainers (max_clients) already: refusing '%.*s'",
                c->conn->name, trainers, (int)len, h->name);
        pr_conn_fail(c->conn, -EUSERS, "too many trainers on this node");
        return 0;
    }
    if (take_job(c, h) < 0 || take_sched(c, h) < 0)
        return 0;
    pr_stranger_remove(&c->st);
    c->greeted = 1;
    n->ngreeted++;
    memcpy(c->name, h->name, len + 1);
    snprintf(c->conn->name, sizeof(c->conn->name), "trainer '%s'", c->name);
    if (!pr_node_sched_up(c->s)) {
        /*
         * A trainer may start with its daemon (at boot, in a test), or
         * name a scheduler the node has just begun to dial: it waits
         * until the link is up, at most connect_timeout_ms for each of
         * the scheduler's addresses, which are dialled in turn
         * (pr_node_ipc_tick), within its own connect timeout.
         */
        c->state = C_WAIT;
        c->deadline_ms =
            uv_now(n->loop) + (uint64_t)n->conf->node_connect_timeout_ms *
                                  (c->s->list.n ? c->s->list.n : 1);
        return 0;
    }
    return send_join(c);
}

/* Trainer c's WorkerJoin, pointing into c: its first or a re-join. */
static void join_msg(struct node_trainer *c, Pr__V1__WorkerJoin *j)
{
    pr__v1__worker_join__init(j);
    j->cookie = c->cookie;
    j->name = c->name;
    j->job = c->job;
    j->n_settings = c->nsettings;
    j->settings = c->settings;
    j->job_proof.data = c->job_proof;
    j->job_proof.len = c->job_proof_len;
}

/* Registers the trainer with the scheduler (WorkerJoin, C_JOINING). */
static int send_join(struct node_trainer *c)
{
    Pr__V1__WorkerJoin j;
    join_msg(c, &j);
    Pr__V1__Msg m = PR_MSG_OF(WORKER_JOIN, worker_join, &j);
    int rc = pr_node_send(c->s, &m);
    if (rc < 0) {
        pr_conn_fail(c->conn, rc, "the node has no link to its scheduler");
        return 0;
    }
    c->state = C_JOINING;
    return 0;
}

void pr_node_trainer_joined(struct node_trainer *c,
                            const Pr__V1__WorkerJoined *j)
{
    int status = j->status;
    uint32_t rank = j->rank;
    const char *reason = j->reason && j->reason[0] ? j->reason : NULL;
    if (status != 0)
        status = join_fail_status(status);
    if (status == 0) {
        c->rank = rank;
        c->job_id = j->job;
        /*
         * A scheduler from before jobs answers 0 and puts every worker in
         * its one job: a trainer of another job would be averaged with
         * strangers, so it is refused and its registration undone.
         */
        if (j->job == 0 && strcmp(c->job, c->node->conf->job) != 0) {
            send_leave(c);
            c->rank = -1;
            status = -EPROTO;
            reason = "the scheduler is older than jobs: it serves only this "
                     "node's job";
        } else if (c->job_proof_len > 0 && !j->keyed) {
            /* It ignored the key: anyone could have joined the job. */
            send_leave(c);
            c->rank = -1;
            status = -EPROTO;
            reason = "the scheduler is older than job keys: it would let "
                     "workers without the key into the job";
        }
    }
    if (!c->conn) {
        /*
         * The trainer left while joining: undo the registration, unless a
         * group of an earlier scheduler session still uses its tensors.
         */
        if (c->rstate == R_NONE)
            trainer_free(c);
        return;
    }
    if (c->state == C_UP) {
        /* A re-join after the scheduler came back. */
        if (status < 0) {
            pr_conn_fail(c->conn, status,
                         reason ? reason : "re-registration refused");
            c->rank = -1;
        }
        return;
    }
    if (status < 0) {
        if (reason)
            pr_warn("trainer '%s' refused by the scheduler: %s", c->name,
                    reason);
        /*
         * The answer came: no longer joining, so that the close frees the
         * trainer (trainer_on_close waits for an answer to a C_JOINING
         * one) and its place under max_clients.
         */
        c->state = C_HELLO;
        pr_conn_fail(c->conn, status,
                     reason              ? reason
                     : status == -EEXIST ? "worker name already in use"
                                         : "registration refused");
        return;
    }
    c->state = C_UP;
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = rank;
    w.job = c->job;
    w.grace_ms = PR_NODE_GRACE_MS;
    w.wire = (uint32_t)c->node->conf->xport_wire + 1;
    w.keyed = c->job_proof_len > 0 && j->keyed;
    w.own_scheduler = c->named_sched;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    send_to(c, &m);
    pr_info("trainer '%s' is worker %u of job '%s'", c->name, rank, c->job);
}

static void reduce_refuse(struct node_trainer *c, uint64_t seq, int status,
                          const char *why)
{
    pr_warn("%s: reduce %llu refused: %s", c->conn->name,
            (unsigned long long)seq, why);
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    d.seq = seq;
    d.status = pr_reduce_status(status);
    d.version = c->version;
    d.rank = c->rank < 0 ? 0 : (uint32_t)c->rank;
    d.reason = (char *)why; /* preduce_last_error() */
    Pr__V1__Msg m = PR_MSG_OF(REDUCE_DONE, reduce_done, &d);
    send_to(c, &m);
}

/*
 * The reduce's deadline on uv_hrtime()'s clock: the one the trainer sends
 * (its library reads CLOCK_MONOTONIC too), or timeout_ms from now for a
 * library that sends none, but never later than node.reduce_timeout_ms
 * from now: the key caps what a trainer may ask for (as read now, so a
 * reload applies from the next reduce on). A deadline already past (a
 * request that waited long in the socket) just times out at the next tick.
 */
static uint64_t reduce_deadline(const struct pr_node *n,
                                const Pr__V1__Reduce *r)
{
    uint64_t now = uv_hrtime();
    uint64_t end = now + (uint64_t)n->conf->node_reduce_timeout_ms * 1000000;
    if (r->timeout_ms && now + (uint64_t)r->timeout_ms * 1000000 < end)
        end = now + (uint64_t)r->timeout_ms * 1000000;
    if (r->deadline_ns && r->deadline_ns < end)
        end = r->deadline_ns;
    return end;
}

static int on_reduce(struct node_trainer *c, const Pr__V1__Reduce *r)
{
    struct pr_node *n = c->node;
    if (c->rstate != R_NONE) {
        reduce_refuse(c, r->seq, -EBUSY, "a reduce is already in flight");
        return 0;
    }
    if (r->n_tensor_ids == 0 || r->n_tensor_ids > MAX_TENSORS_PER_REDUCE) {
        reduce_refuse(c, r->seq, -EINVAL, "no tensors, or too many");
        return 0;
    }
    /*
     * -ECONNRESET, as for a reduce whose scheduler goes away while it is
     * queued: retry later. (-ENOTCONN would tell the trainer that its own
     * connection is gone.)
     */
    if (!pr_node_sched_up(c->s) || c->rank < 0) {
        reduce_refuse(c, r->seq, -ECONNRESET,
                      "the node has no link to its scheduler");
        return 0;
    }
    if (r->wire > PR_WIRE_COUNT) {
        reduce_refuse(c, r->seq, -EINVAL, "unknown wire encoding");
        return 0;
    }
    uint32_t wire = r->wire ? r->wire - 1 : (uint32_t)n->conf->xport_wire;
    struct pr_engine_part *parts;
    uint64_t total;
    float *err;
    const char *why;
    int rc =
        pr_node_tensors_take(c, r->tensor_ids, r->n_tensor_ids,
                             wire == PR_WIRE_INT8, &parts, &total, &err, &why);
    if (rc < 0) {
        reduce_refuse(c, r->seq, rc, why);
        return 0;
    }
    c->parts = parts;
    c->nparts = r->n_tensor_ids;
    c->wire = wire;
    c->err = err;
    c->in_place = r->in_place;
    c->seq = r->seq;
    c->reduce_start_us = uv_hrtime() / 1000;
    c->reduce_deadline_ns = reduce_deadline(n, r);
    Pr__V1__Ready rd = PR__V1__READY__INIT;
    rd.rank = (uint32_t)c->rank;
    rd.job = c->job_id;
    rd.version = r->version;
    rd.nfloats = total;
    rd.seq = r->seq;
    rd.heal = r->heal;
    rd.tag = r->tag;
    rd.wire = wire;
    Pr__V1__Msg m = PR_MSG_OF(READY, ready, &rd);
    pr_node_set_rstate(c, R_QUEUED);
    pr_node_spin(n);
    rc = pr_node_send(c->s, &m);
    if (rc < 0)
        pr_node_reduce_fail(c, rc);
    return 0;
}

static int trainer_msg(struct pr_conn *conn, const Pr__V1__Msg *m)
{
    struct node_trainer *c = conn->owner;
    if (c->state == C_HELLO) {
        if (m->body_case != PR__V1__MSG__BODY_HELLO) {
            pr_warn("%s: %s message before hello: closing", conn->name,
                    pr_msg_name(m));
            return -EPROTO;
        }
        return on_hello(c, m->hello);
    }
    if (c->state != C_UP) {
        pr_warn("%s: %s message before the welcome: closing", conn->name,
                pr_msg_name(m));
        return -EPROTO;
    }
    switch (m->body_case) {
    case PR__V1__MSG__BODY_TENSOR_CREATE:
        return pr_node_tensor_create(c, m->tensor_create);
    case PR__V1__MSG__BODY_TENSOR_DESTROY:
        pr_node_tensor_destroy(c, m->tensor_destroy->tensor_id);
        return 0;
    case PR__V1__MSG__BODY_REDUCE:
        return on_reduce(c, m->reduce);
    default:
        pr_warn("%s: unexpected %s message: closing", conn->name,
                pr_msg_name(m));
        return -EPROTO;
    }
}

/*
 * A trainer's message. A Hello's job key, in whatever state it comes,
 * serves the proof (take_job) and is not kept: its bytes are zeroed in
 * the read buffer (pr_conn_wipe_msg) and in the decoded message, which
 * conn.c frees after this call. conn, not its trainer, which the call
 * may have freed.
 */
static int trainer_on_msg(struct pr_conn *conn, const Pr__V1__Msg *m)
{
    int rc = trainer_msg(conn, m);
    if (m->body_case == PR__V1__MSG__BODY_HELLO && m->hello->job_key.len) {
        pr_conn_wipe_msg(conn);
        explicit_bzero(m->hello->job_key.data, m->hello->job_key.len);
    }
    return rc;
}

static void send_cancel(struct node_trainer *c)
{
    Pr__V1__Cancel k = PR__V1__CANCEL__INIT;
    k.rank = (uint32_t)c->rank;
    k.job = c->job_id;
    k.seq = c->seq;
    Pr__V1__Msg m = PR_MSG_OF(CANCEL, cancel, &k);
    pr_node_set_rstate(c, R_CANCELLING);
    if (pr_node_send(c->s, &m) < 0)
        pr_node_reduce_fail(c, -ETIMEDOUT);
}

static void trainer_on_close(struct pr_conn *conn, int status)
{
    struct node_trainer *c = conn->owner;
    c->conn = NULL;
    if (c->state == C_UP || c->state == C_JOINING)
        pr_info("trainer '%s' (worker %lld) disconnected%s%s", c->name,
                (long long)c->rank, status ? ": " : "",
                status ? strerror(-status) : "");
    switch (c->rstate) {
    case R_QUEUED:
        /* A group may already be on its way: withdraw, then free. */
        send_cancel(c);
        return;
    case R_GROUPED:
        /*
         * The group goes on for the others, but the trainer will never
         * hear how it ended (a library client whose connection broke has
         * reported a failure already) and may still hold its tensors: they
         * must keep their inputs.
         */
        group_detach(c);
        return; /* freed when the reduce ends */
    case R_CANCELLING:
        return; /* freed when the reduce ends */
    case R_NONE:
        break;
    }
    if (c->state == C_JOINING)
        return; /* freed when the scheduler answers */
    trainer_free(c);
}

static const struct pr_conn_ops trainer_ops = {
    .on_msg = trainer_on_msg,
    .on_data = NULL,
    .on_close = trainer_on_close,
};

static void on_connection(uv_stream_t *server, int status);

static void refused_closed_cb(uv_handle_t *h)
{
    struct pr_node *n = h->data;
    int again = n->refused_pending && !n->stopping;
    n->refused_busy = 0;
    n->refused_pending = 0;
    if (--n->handles == 0) {
        free(n);
        return;
    }
    /* libuv holds the connection that waited, and accepts no other. */
    if (again)
        on_connection((uv_stream_t *)&n->ipc, 0);
}

/*
 * A trainer this daemon cannot take on (no memory for it): accept it into
 * the spare handle and close it, so that the trainer sees the connection
 * end. Left unaccepted, it would stop libuv from accepting on this socket
 * for good. While the spare is still closing, the connection waits (and
 * libuv with it) until refused_closed_cb tries it again.
 */
static void refuse(struct pr_node *n, uv_stream_t *server)
{
    if (n->refused_busy) {
        n->refused_pending = 1;
        return;
    }
    int rc = uv_pipe_init(n->loop, &n->refused, 0);
    if (rc < 0) {
        pr_err("trainer socket: uv_pipe_init: %s", uv_strerror(rc));
        return;
    }
    n->refused.data = n;
    n->refused_busy = 1;
    n->handles++;
    rc = uv_accept(server, (uv_stream_t *)&n->refused);
    if (rc < 0)
        pr_warn("trainer socket: accept: %s", uv_strerror(rc));
    uv_close((uv_handle_t *)&n->refused, refused_closed_cb);
}

static const struct pr_stranger_rules stranger_rules = {
    .what = "trainer socket",
    .awaits = "hello",
    .max = TRAINER_STRANGERS_MAX,
    .per_source_max = TRAINER_STRANGERS_PER_UID,
};

/* A trainer before its hello: told why, as a slow real one may read it. */
static void stranger_close(struct pr_stranger *st, int status)
{
    struct node_trainer *c =
        (struct node_trainer *)((char *)st - offsetof(struct node_trainer, st));
    if (!c->conn)
        return;
    if (status == -ETIMEDOUT)
        pr_conn_fail(c->conn, -ETIMEDOUT, "no hello in time");
    else
        pr_conn_fail(c->conn, -EAGAIN,
                     "too many connections without a hello: try again");
}

static void on_connection(uv_stream_t *server, int status)
{
    struct pr_node *n = server->data;
    if (status < 0) {
        pr_warn("trainer socket: %s", uv_strerror(status));
        return;
    }
    struct node_trainer *c = calloc(1, sizeof(*c));
    if (c) {
        c->conn =
            pr_conn_create_pipe(n->loop, PR_CTRL_MAX_FRAME, &trainer_ops, c);
    }
    if (!c || !c->conn) {
        pr_err("trainer socket: out of memory for a trainer: refusing it");
        free(c);
        refuse(n, server);
        return;
    }
    c->node = n;
    c->s = n->sched[0];
    c->s->users++;
    c->rank = -1;
    c->prev_rank = -1;
    /* Its hello may carry a job's key: a part of one too (conn.h). */
    c->conn->wipe_rx = 1;
    c->cookie = ++n->next_cookie;
    snprintf(c->conn->name, sizeof(c->conn->name), "trainer connection %u",
             c->cookie);
    c->next = n->trainers;
    n->trainers = c;
    n->ntrainers++;
    if (uv_accept(server, &c->conn->h.stream) < 0) {
        pr_conn_close(c->conn, -ECONNABORTED);
        return;
    }
    pr_source_pipe(&c->conn->h.pipe, c->st.source, sizeof(c->st.source));
    c->st.name = c->conn->name;
    c->st.close = stranger_close;
    if (pr_strangers_admit(&n->strangers, &stranger_rules, &c->st,
                           uv_now(n->loop)) < 0) {
        pr_conn_fail(c->conn, -EAGAIN,
                     "too many connections without a hello: try again");
        return;
    }
    if (pr_conn_start(c->conn) < 0)
        pr_conn_close(c->conn, -EIO);
}

int pr_node_ipc_listen(struct pr_node *n)
{
    return pr_node_socket_open(n, on_connection);
}

void pr_node_ipc_close(struct pr_node *n)
{
    while (n->trainers) {
        struct node_trainer *c = n->trainers;
        if (c->conn) {
            /* Detach: the conn's close callback must not see c. */
            struct pr_conn *conn = c->conn;
            c->conn = NULL;
            pr_conn_detach_close(conn);
        }
        n->trainers = c->next;
        pr_stranger_remove(&c->st);
        pr_node_feedback_free(c);
        for (size_t i = 0; i < c->ntensors; i++)
            pr_node_tensor_free(c, &c->tensors[i]);
        free(c->tensors);
        free(c->parts);
        free(c);
    }
    pr_node_socket_close(n);
}

void pr_node_ipc_tick(struct pr_node *n, uint64_t now_ms)
{
    uint64_t now_ns = uv_hrtime();
    pr_strangers_sweep(&n->strangers, &stranger_rules,
                       n->conf->node_connect_timeout_ms, now_ms);
    struct node_trainer *c = n->trainers;
    while (c) {
        struct node_trainer *next = c->next;
        if (c->state == C_WAIT && now_ms >= c->deadline_ms) {
            c->state = C_HELLO;
            /* A scheduler the trainer named: say which did not answer. */
            char why[PR_NODE_SCHED_SPEC_MAX + 64];
            snprintf(why, sizeof(why), "the node has no link to %s%s",
                     c->named_sched ? "scheduler " : "its scheduler",
                     c->named_sched ? c->s->spec : "");
            if (c->conn)
                pr_conn_fail(c->conn, -ENOTCONN, why);
        } else if (c->rstate == R_QUEUED && now_ns >= c->reduce_deadline_ns) {
            send_cancel(c);
        } else if (c->rstate == R_CANCELLING &&
                   now_ns >= c->reduce_deadline_ns +
                                 (uint64_t)PR_NODE_GRACE_MS * 1000000) {
            /*
             * Neither a Group nor a Reject came in the grace: give up, so
             * that the trainer hears in time. A Group that still comes
             * finds no reduce waiting and is refused.
             */
            pr_warn("worker %lld: no answer to its cancel: failing its "
                    "reduce",
                    (long long)c->rank);
            pr_node_reduce_fail(c, -ETIMEDOUT);
        }
        c = next;
    }
}

void pr_node_ipc_sched_lost(struct node_sched *s)
{
    struct node_trainer *c = s->n->trainers;
    while (c) {
        struct node_trainer *next = c->next;
        if (c->s != s) {
            c = next;
            continue;
        }
        /*
         * Ranks belong to the scheduler session that gave them; the next
         * session is asked for the same one (pr_node_ipc_sched_up).
         */
        if (c->rank >= 0)
            c->prev_rank = c->rank;
        c->rank = -1;
        if (c->rstate == R_QUEUED || c->rstate == R_CANCELLING) {
            pr_node_reduce_fail(c, -ECONNRESET);
        } else if (c->state == C_JOINING) {
            /* No WorkerJoined will come: the trainer must start over. */
            c->state = C_HELLO;
            if (c->conn)
                pr_conn_fail(c->conn, -ECONNRESET, "the scheduler went away");
            else
                trainer_free(c);
        }
        c = next;
    }
}

void pr_node_ipc_sched_up(struct node_sched *s)
{
    struct pr_node *n = s->n;
    /*
     * The running trainers' re-joins go first, then those that waited:
     * a (new) scheduler's jobs start again from the workers they had, so
     * a newcomer does not start a job, and set its key, before them.
     */
    for (struct node_trainer *c = n->trainers; c; c = c->next) {
        if (c->s != s || c->state != C_UP || !c->conn)
            continue;
        c->rank = -1;
        Pr__V1__WorkerJoin j;
        join_msg(c, &j);
        j.prev_rank_plus1 = c->prev_rank >= 0 ? (uint32_t)c->prev_rank + 1 : 0;
        Pr__V1__Msg m = PR_MSG_OF(WORKER_JOIN, worker_join, &j);
        pr_node_send(s, &m);
    }
    for (struct node_trainer *c = n->trainers; c; c = c->next)
        if (c->s == s && c->state == C_WAIT && c->conn)
            send_join(c);
}
