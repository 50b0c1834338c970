/* SPDX-License-Identifier: MIT */
/*
 * The schedulers a node follows (node.scheduler, a list): which one it
 * dials next, and the probes that bring it back to an earlier one.
 *
 * Every scheduler of the list is started alike; nodes keep no state a
 * scheduler must hand over, since a scheduler rebuilds the job from the
 * nodes' registrations (the trainers' ranks and versions come back with
 * them, as after a restart). A node follows the first it reaches in list
 * order. When the link is lost (a reset at once, silence after
 * scheduler.node_timeout_ms) it dials the next without waiting; only a
 * whole round of failed dials waits the usual backoff. While it follows
 * any but the first, it probes the earlier ones (a TCP connect each
 * heartbeat_ms, closed at once: schedulers log nothing for a connection
 * without a hello), and once one has answered for
 * node.scheduler_settle_ms it leaves the one it follows for it, so that
 * after a failure heals every node of the job follows the same scheduler
 * again: no worker is in two schedulers' groups at once, since each node
 * follows one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/node/node_int.h"

/* The wait after a round of failed dials, doubling up to the max. */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

int pr_node_scheds_init(struct pr_node *n)
{
    struct node_scheds *s = &n->scheds;
    int k =
        pr_conf_addr_list(n->conf->node_scheduler, s->addr, PR_SCHED_LIST_MAX);
    if (k < 0)
        return k; /* pr_conf_validate() refused it already */
    s->n = (uint32_t)k;
    s->switch_to = -1;
    s->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(n->loop, &s->probe_timer);
    s->probe_timer.data = n;
    return 0;
}

const char *pr_node_sched_addr(const struct pr_node *n)
{
    return n->scheds.n ? n->scheds.addr[n->scheds.cur] : "";
}

uint32_t pr_node_scheds_next(struct pr_node *n, int was_up)
{
    struct node_scheds *s = &n->scheds;
    pr_node_scheds_stop(n);
    if (s->switch_to >= 0) {
        s->cur = (uint32_t)s->switch_to;
        s->switch_to = -1;
        s->tries = 0;
        return 0;
    }
    if (was_up)
        s->tries = 0;
    if (s->n > 1) {
        s->cur = (s->cur + 1) % s->n;
        if (++s->tries < s->n) {
            if (was_up)
                pr_info("following scheduler %s next", s->addr[s->cur]);
            return 0;
        }
        s->tries = 0;
    }
    uint32_t wait = s->backoff_ms;
    s->backoff_ms =
        s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
    return wait;
}

static int probe_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    (void)c;
    (void)m;
    return 0;
}

static void probe_on_close(struct pr_conn *c, int status)
{
    (void)status;
    struct pr_node *n = c->owner;
    if (n->scheds.probe == c)
        n->scheds.probe = NULL;
}

static const struct pr_conn_ops probe_ops = {
    .on_msg = probe_on_msg,
    .on_data = NULL,
    .on_close = probe_on_close,
};

/* Leaves the scheduler followed for an earlier one that stayed up. */
static void maybe_switch(struct pr_node *n, uint64_t now)
{
    struct node_scheds *s = &n->scheds;
    for (uint32_t i = 0; i < s->cur; i++) {
        if (!s->ok_since_ms[i] ||
            now - s->ok_since_ms[i] < n->conf->node_sched_settle_ms)
            continue;
        pr_info("scheduler %s has answered for %llu ms: following it again, "
                "leaving %s",
                s->addr[i], (unsigned long long)(now - s->ok_since_ms[i]),
                s->addr[s->cur]);
        s->switch_to = (int)i;
        pr_node_scheds_stop(n);
        if (n->sched)
            pr_conn_close(n->sched, 0);
        return;
    }
}

static void probe_connected(struct pr_conn *c, int status)
{
    struct pr_node *n = c->owner;
    struct node_scheds *s = &n->scheds;
    if (s->probe != c)
        return;
    uint64_t now = uv_now(n->loop);
    if (status < 0) {
        s->ok_since_ms[s->probe_idx] = 0;
    } else if (!s->ok_since_ms[s->probe_idx]) {
        s->ok_since_ms[s->probe_idx] = now;
    }
    s->probe = NULL;
    pr_conn_close(c, 0);
    s->probe_idx = s->cur ? (s->probe_idx + 1) % s->cur : 0;
    if (status == 0)
        maybe_switch(n, now);
}

/* One probe a heartbeat: the earlier schedulers in turn. */
static void probe_cb(uv_timer_t *t)
{
    struct pr_node *n = t->data;
    struct node_scheds *s = &n->scheds;
    uint64_t now = uv_now(n->loop);
    if (s->probe) {
        if (now - s->probe_start_ms < n->conf->node_connect_timeout_ms)
            return;
        /* No answer in time: as unreachable as a refusal. */
        s->ok_since_ms[s->probe_idx] = 0;
        struct pr_conn *c = s->probe;
        s->probe = NULL;
        pr_conn_close(c, -ETIMEDOUT);
        s->probe_idx = s->cur ? (s->probe_idx + 1) % s->cur : 0;
    }
    if (s->cur == 0 || n->sstate != S_UP)
        return;
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(s->addr[s->probe_idx], host, sizeof(host),
                               &port) < 0)
        return;
    struct pr_conn *c =
        pr_conn_create_tcp(n->loop, PR_CTRL_MAX_FRAME, &probe_ops, n);
    if (!c)
        return;
    s->probe = c;
    s->probe_start_ms = now;
    if (pr_conn_connect(c, host, port, probe_connected) < 0) {
        s->probe = NULL;
        s->ok_since_ms[s->probe_idx] = 0;
        pr_conn_close(c, -EINVAL);
    }
}

void pr_node_scheds_up(struct pr_node *n)
{
    struct node_scheds *s = &n->scheds;
    s->tries = 0;
    s->backoff_ms = BACKOFF_MIN_MS;
    if (s->cur == 0 || n->stopping)
        return;
    memset(s->ok_since_ms, 0, sizeof(s->ok_since_ms));
    s->probe_idx = 0;
    uint32_t period = n->conf->sched_heartbeat_ms;
    uv_timer_start(&s->probe_timer, probe_cb, period, period);
}

void pr_node_scheds_stop(struct pr_node *n)
{
    struct node_scheds *s = &n->scheds;
    if (!s->n)
        return; /* init failed: no timer */
    uv_timer_stop(&s->probe_timer);
    if (s->probe) {
        struct pr_conn *c = s->probe;
        s->probe = NULL;
        pr_conn_detach_close(c);
    }
}
