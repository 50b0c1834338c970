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

int pr_node_scheds_init(struct node_sched *s)
{
    struct node_scheds *l = &s->list;
    int k = pr_conf_addr_list(s->spec, l->addr, PR_SCHED_LIST_MAX);
    if (k <= 0) /* refused before: pr_conf_validate(), or at the hello */
        return k < 0 ? k : -EINVAL;
    l->n = (uint32_t)k;
    l->switch_to = -1;
    l->backoff_ms = BACKOFF_MIN_MS;
    uv_timer_init(s->n->loop, &l->probe_timer);
    l->probe_timer.data = s;
    return 0;
}

const char *pr_node_sched_addr(const struct node_sched *s)
{
    return s->list.n ? s->list.addr[s->list.cur] : "";
}

uint32_t pr_node_scheds_next(struct node_sched *s, int was_up)
{
    struct node_scheds *l = &s->list;
    pr_node_scheds_stop(s);
    if (l->switch_to >= 0) {
        l->cur = (uint32_t)l->switch_to;
        l->switch_to = -1;
        l->tries = 0;
        return 0;
    }
    if (was_up)
        l->tries = 0;
    if (l->n > 1) {
        l->cur = (l->cur + 1) % l->n;
        if (++l->tries < l->n) {
            if (was_up)
                pr_info("following scheduler %s next", l->addr[l->cur]);
            return 0;
        }
        l->tries = 0;
    }
    uint32_t wait = l->backoff_ms;
    l->backoff_ms =
        l->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : l->backoff_ms * 2;
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
    struct node_sched *s = c->owner;
    if (s->list.probe == c)
        s->list.probe = NULL;
}

static const struct pr_conn_ops probe_ops = {
    .on_msg = probe_on_msg,
    .on_data = NULL,
    .on_close = probe_on_close,
};

/* Leaves the scheduler followed for an earlier one that stayed up. */
static void maybe_switch(struct node_sched *s, uint64_t now)
{
    struct node_scheds *l = &s->list;
    for (uint32_t i = 0; i < l->cur; i++) {
        if (!l->ok_since_ms[i] ||
            now - l->ok_since_ms[i] < s->n->conf->node_sched_settle_ms)
            continue;
        pr_info("scheduler %s has answered for %llu ms: following it again, "
                "leaving %s",
                l->addr[i], (unsigned long long)(now - l->ok_since_ms[i]),
                l->addr[l->cur]);
        l->switch_to = (int)i;
        pr_node_scheds_stop(s);
        if (s->conn)
            pr_conn_close(s->conn, 0);
        return;
    }
}

static void probe_connected(struct pr_conn *c, int status)
{
    struct node_sched *s = c->owner;
    struct node_scheds *l = &s->list;
    if (l->probe != c)
        return;
    uint64_t now = uv_now(s->n->loop);
    if (status < 0) {
        l->ok_since_ms[l->probe_idx] = 0;
    } else if (!l->ok_since_ms[l->probe_idx]) {
        l->ok_since_ms[l->probe_idx] = now;
    }
    l->probe = NULL;
    pr_conn_detach_close(c);
    l->probe_idx = l->cur ? (l->probe_idx + 1) % l->cur : 0;
    if (status == 0)
        maybe_switch(s, now);
}

/* One probe a heartbeat: the earlier schedulers in turn. */
static void probe_cb(uv_timer_t *t)
{
    struct node_sched *s = t->data;
    struct node_scheds *l = &s->list;
    uint64_t now = uv_now(s->n->loop);
    if (l->probe) {
        if (now - l->probe_start_ms < s->n->conf->node_connect_timeout_ms)
            return;
        /* No answer in time: as unreachable as a refusal. */
        l->ok_since_ms[l->probe_idx] = 0;
        struct pr_conn *c = l->probe;
        l->probe = NULL;
        pr_conn_detach_close(c);
        l->probe_idx = l->cur ? (l->probe_idx + 1) % l->cur : 0;
    }
    if (l->cur == 0 || s->state != S_UP)
        return;
    char host[96];
    uint16_t port;
    if (pr_conf_parse_hostport(l->addr[l->probe_idx], host, sizeof(host),
                               &port) < 0)
        return;
    struct pr_conn *c =
        pr_conn_create_tcp(s->n->loop, PR_CTRL_MAX_FRAME, &probe_ops, s);
    if (!c)
        return;
    l->probe = c;
    l->probe_start_ms = now;
    if (pr_conn_connect(c, host, port, probe_connected) < 0) {
        l->probe = NULL;
        l->ok_since_ms[l->probe_idx] = 0;
        pr_conn_detach_close(c);
    }
}

void pr_node_scheds_up(struct node_sched *s)
{
    struct node_scheds *l = &s->list;
    l->tries = 0;
    l->backoff_ms = BACKOFF_MIN_MS;
    if (l->cur == 0 || s->n->stopping)
        return;
    memset(l->ok_since_ms, 0, sizeof(l->ok_since_ms));
    l->probe_idx = 0;
    uint32_t period = s->n->conf->sched_heartbeat_ms;
    uv_timer_start(&l->probe_timer, probe_cb, period, period);
}

void pr_node_scheds_stop(struct node_sched *s)
{
    struct node_scheds *l = &s->list;
    if (!l->n)
        return; /* init failed: no timer */
    uv_timer_stop(&l->probe_timer);
    if (l->probe) {
        struct pr_conn *c = l->probe;
        l->probe = NULL;
        pr_conn_detach_close(c);
    }
}
