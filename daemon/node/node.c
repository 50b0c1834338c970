/* SPDX-License-Identifier: MIT */
/*
 * The node role: the node itself (create, reload, destroy) and its tick.
 * node_sched.c follows the schedulers, node_group.c takes the groups they
 * send, node_ipc.c serves the trainers, engine.c runs the reductions.
 */
#include "daemon/node/node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/base/metrics.h"
#include "daemon/node/node_int.h"
#include "preduce.h"

/*
 * A trainer waits PREDUCE_REDUCE_SLACK_MS past its deadline for the answer
 * the daemon sends by PR_NODE_GRACE_MS past it: the rest is for the answer's
 * way (a tick, a sweep, a loaded loop, the trainer's scheduling).
 */
_Static_assert(PR_NODE_GRACE_MS + 500 <= PREDUCE_REDUCE_SLACK_MS,
               "the daemon's grace leaves the library's slack no margin");

#define TICK_MS 20

static void tick_cb(uv_timer_t *t)
{
    struct pr_node *n = t->data;
    uint64_t now = uv_now(n->loop);
    pr_node_ipc_tick(n, now);
    pr_node_scheds_reap(n);
    pr_node_scheds_jobs(n);
    for (uint32_t i = 0; i < n->nsched; i++)
        if (n->sched[i])
            pr_node_sched_tick(n->sched[i], now);
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

int pr_node_create(uv_loop_t *loop, struct pr_conf *conf,
                   const struct pr_auth_key *key, struct pr_node **out)
{
    struct pr_node *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->loop = loop;
    n->conf = conf;
    n->key = key;
    uv_timer_init(loop, &n->tick);
    n->tick.data = n;
    uv_idle_init(loop, &n->spin);
    n->spin.data = n;
    n->handles = 2;
    n->max_map_count = read_max_map_count();
    warn_max_map_count(n);
    int rc = pr_node_sched_open(n, 0, conf->node_scheduler);
    if (rc == 0)
        rc = pr_node_ipc_listen(n);
    if (rc == 0 && conf->metrics_listen[0])
        rc = pr_metrics_start(loop, conf->metrics_listen,
                              pr_node_render_metrics, n, &n->metrics);
    if (rc < 0)
        goto fail;
    pr_info("node '%s': peers connect to %s; scheduler at %s", conf->node_name,
            n->sched[0]->data_addr, conf->node_scheduler);
    uv_timer_start(&n->tick, tick_cb, TICK_MS, TICK_MS);
    *out = n;
    return 0;
fail:
    pr_node_destroy(n);
    return rc;
}

int pr_node_reload(struct pr_node *n)
{
    for (uint32_t i = 0; i < n->nsched; i++)
        if (n->sched[i])
            pr_node_sched_reload(n->sched[i]);
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
    /*
     * Each scheduler's transports stop, then its engine fails the groups
     * still running, so that their trainers still get an answer (and no
     * send reads a tensor once it is answered).
     */
    for (uint32_t i = n->nsched; i-- > 0;)
        if (n->sched[i])
            pr_node_sched_close(n->sched[i]);
    pr_node_ipc_close(n);
    uv_close((uv_handle_t *)&n->tick, node_closed_cb);
    uv_close((uv_handle_t *)&n->spin, node_closed_cb);
}
