/* SPDX-License-Identifier: MIT */
/*
 * libpreduce: the reduce calls, their results, and error texts.
 *
 * preduce_reduce() is start plus wait. start sends reduce{seq, version + 1,
 * tensor_ids, timeout_ms, deadline_ns, in_place, heal, tag, wire} and
 * marks the tensors busy; the answer is read by whichever call reads the
 * socket next (client.c dispatches every frame) and waits in the
 * client's done_* fields until wait hands it over. The daemon always
 * answers; if it has not within timeout_ms + PREDUCE_REDUCE_SLACK_MS, the
 * client gives the connection up, because the tensors' state is unknown.
 *
 * What the reduce calls return is the table in preduce.h: the daemon's
 * status (client.c maps it with pr_reduce_status), a wrong call, or, when
 * the connection broke, -ETIMEDOUT for a daemon that did not answer in
 * time and -ENOTCONN for anything else (whatever the socket said: a
 * -ECONNRESET from it would read as a lost peer, worth a retry here).
 *
 * A result is a copy of the daemon's ReduceDone, checked before it is
 * believed: the member arrays are parallel and the group contains this
 * worker. preduce_last_result() points into the client, so it stays valid
 * until the next successful reduce replaces it, or close.
 */
#include "preduce.h"
#include "client/client_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* What a reduce call returns for a failure `rc` that broke the connection. */
static int broken(int rc)
{
    return rc == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN;
}

int preduce_reduce_start(preduce_client_t *c, preduce_tensor_t *const *tensors,
                         size_t n, int timeout_ms)
{
    if (!c)
        return -EINVAL;
    /*
     * A reason from an earlier call would be taken for this one's; a
     * broken connection keeps the one it broke with.
     */
    if (!c->err)
        c->last_error[0] = '\0';
    /* A reduce always waits for a group: it needs a deadline above 0. */
    if (!tensors || n == 0 || timeout_ms <= 0)
        return -EINVAL;
    if (c->err)
        return pr_client_err(c);
    if (c->inflight)
        return -EBUSY;
    if (n > PR_CLIENT_MAX_FRAME / sizeof(uint32_t))
        return -EINVAL;
    /* Each tensor once, and only this client's. */
    uint64_t gen = ++c->mark_gen;
    for (size_t i = 0; i < n; i++) {
        struct preduce_tensor *t = tensors[i];
        if (!t || t->c != c || t->mark == gen)
            return -EINVAL;
        t->mark = gen;
    }
    uint32_t *ids = malloc(n * sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        ids[i] = tensors[i]->id;

    Pr__V1__Reduce r = PR__V1__REDUCE__INIT;
    r.seq = c->seq + 1;
    r.version = c->version + 1; /* one local update since the last reduce */
    r.n_tensor_ids = n;
    r.tensor_ids = ids;
    r.timeout_ms = (uint32_t)timeout_ms;
    r.in_place = c->in_place;
    r.heal = c->heal;
    r.tag = c->tag;
    r.wire = c->wire;
    /* The same clock as the daemon's uv_hrtime(): CLOCK_MONOTONIC, in ns. */
    r.deadline_ns = (uint64_t)pr_client_deadline(timeout_ms);
    Pr__V1__Msg m = PR_MSG_OF(REDUCE, reduce, &r);
    int64_t deadline = (int64_t)r.deadline_ns + (int64_t)c->slack_ms * 1000000;
    int rc = pr_client_send(c, &m, deadline);
    free(ids);
    if (rc < 0 && c->err)
        return broken(rc);
    if (rc < 0)
        return rc == -ENOMEM ? rc : -EINVAL; /* -EMSGSIZE: too many */
    c->seq++;
    c->inflight = true;
    c->reduce_deadline = deadline;
    for (size_t i = 0; i < n; i++)
        tensors[i]->busy = true;
    return 0;
}

int preduce_set_in_place(preduce_client_t *c, int on)
{
    if (!c || (on != 0 && on != 1))
        return -EINVAL;
    c->in_place = on;
    return 0;
}

int preduce_set_heal(preduce_client_t *c, int on)
{
    if (!c || (on != 0 && on != 1))
        return -EINVAL;
    c->heal = on;
    return 0;
}

int preduce_set_tag(preduce_client_t *c, uint32_t tag)
{
    if (!c)
        return -EINVAL;
    c->tag = tag;
    return 0;
}

/* Hands the stashed answer to the caller and ends the reduce. */
static int finish(struct preduce_client *c)
{
    c->inflight = false;
    c->done_ready = false;
    pr_client_tensors_unbusy(c);
    pr_client_unnotify(c);
    if (c->done_status < 0)
        return c->done_status;
    struct preduce_result old = c->result;
    c->result = c->done;
    memset(&c->done, 0, sizeof(c->done));
    pr_client_result_fini(&old);
    c->have_result = true;
    c->version = c->result.version;
    c->heal = false; /* healed: the model is the group's now */
    return 0;
}

/*
 * Waits until `deadline` for the answer: -EAGAIN when that comes first,
 * -ETIMEDOUT (and a broken connection) when the reduce's own deadline does.
 * An answer that came is delivered even if the connection broke since (or
 * right after it, in the same read): it says what the tensors hold.
 */
static int wait_until(struct preduce_client *c, int64_t deadline)
{
    if (c->inflight && c->done_ready)
        return finish(c);
    if (c->err)
        return pr_client_err(c);
    if (!c->inflight)
        return -EINVAL;
    bool final = deadline >= c->reduce_deadline;
    int rc = pr_client_pump(c, &c->done_ready,
                            final ? c->reduce_deadline : deadline);
    if (c->done_ready)
        return finish(c);
    if (rc == -ETIMEDOUT && !c->err) {
        if (!final)
            return -EAGAIN;
        pr_client_fail(c, rc);
    }
    return broken(rc);
}

int preduce_reduce_wait(preduce_client_t *c, int timeout_ms)
{
    if (!c || timeout_ms < 0)
        return -EINVAL;
    return wait_until(c, pr_client_deadline(timeout_ms));
}

int preduce_reduce(preduce_client_t *c, preduce_tensor_t *const *tensors,
                   size_t n, int timeout_ms)
{
    int rc = preduce_reduce_start(c, tensors, n, timeout_ms);
    if (rc < 0)
        return rc;
    return wait_until(c, INT64_MAX);
}

const preduce_result_t *preduce_last_result(const preduce_client_t *c)
{
    return c && c->have_result ? &c->result : NULL;
}

uint64_t preduce_result_group(const preduce_result_t *r)
{
    return r ? r->group : 0;
}

size_t preduce_result_size(const preduce_result_t *r)
{
    return r ? r->n : 0;
}

int preduce_result_member(const preduce_result_t *r, size_t i, uint32_t *rank,
                          uint64_t *version, double *weight)
{
    if (!r || i >= r->n)
        return -EINVAL;
    if (rank)
        *rank = r->ranks[i];
    if (version)
        *version = r->versions[i];
    if (weight)
        *weight = r->weights[i];
    return 0;
}

double preduce_result_weight(const preduce_result_t *r)
{
    return r ? r->weight : 0.0;
}

uint64_t preduce_result_version(const preduce_result_t *r)
{
    return r ? r->version : 0;
}

const char *preduce_result_wire(const preduce_result_t *r)
{
    return r ? pr_client_wire_name(r->wire) : "";
}

const char *preduce_wire(const preduce_client_t *c)
{
    if (!c)
        return "";
    return pr_client_wire_name(c->wire ? c->wire : c->node_wire);
}

static const struct {
    int code;
    const char *text;
} texts[] = {
    {0, "success"},
    {-ENOENT, "no daemon socket at that path"},
    {-ECONNREFUSED, "no daemon is listening on that socket"},
    {-ETIMEDOUT, "timed out: no group formed, or the group did not "
                 "finish, in time; retry"},
    {-EPROTO, "protocol error: the daemon speaks another protocol version "
              "or sent a malformed message"},
    {-EMSGSIZE, "message larger than the protocol allows"},
    {-EEXIST, "worker name already taken in this job"},
    {-EINVAL, "invalid argument, or tensor length differs from the job's"},
    {-EBUSY, "busy: a reduce is in flight"},
    {-ECONNRESET, "the group failed: a peer daemon, a link to it or the "
                  "scheduler was lost; retry"},
    {-ENOTCONN, "not connected: the connection to the daemon is broken "
                "(close and connect again)"},
    {-EPIPE, "the daemon closed the connection"},
    {-EAGAIN, "not yet: the reduce has not finished, or the daemon is "
              "busy with new connections (try again)"},
    {-ENOMEM, "out of memory"},
    {-EMFILE, "out of file descriptors in this process (RLIMIT_NOFILE)"},
    {-EUSERS, "too many trainers on this node (node.max_clients), or "
              "schedulers (node.max_schedulers)"},
    {-EDQUOT, "over this trainer's tensor quota (node.trainer_max_tensors "
              "or node.trainer_max_mb)"},
    {-ENOSPC, "the node holds all the tensors it may (node.max_tensors)"},
};

int preduce_error_retryable(int err)
{
    return err == -ETIMEDOUT || err == -ECONNRESET;
}

const char *preduce_strerror(int err)
{
    static _Thread_local char buf[128];
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        if (texts[i].code == err)
            return texts[i].text;
    }
    if (err == INT_MIN)
        return "unknown error";
    /* GNU strerror_r: returns buf or a static string, never NULL. */
    return strerror_r(err < 0 ? -err : err, buf, sizeof(buf));
}
