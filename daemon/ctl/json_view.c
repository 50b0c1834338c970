/* SPDX-License-Identifier: MIT */
/*
 * The JSON objects. A node's:
 *   {"address", "role": "node", "name", "job", "node_id", "scheduler_up",
 *    "trainers", "reduces_ok", "reduces_failed", "reduce_mean_ms",
 *    "groups_ok", "groups_failed", "groups_running",
 *    "bytes": {"tcp": {"sent", "received"}, "rdma": {...}},
 *    "wire_default", "wire": {"fp32": {"groups", "bytes_sent"}, ...},
 *    "peer_links_up", "rdma_device",
 *    "workers": [{"job", "name", "rank", "version"}...]}
 * A scheduler's:
 *   {"address", "role": "scheduler", "name", "job", "nodes",
 *    "workers_live", "workers_waiting", "groups_formed", "mean_group_size",
 *    "group_sizes": [{"from", "to", "groups"}...] ("to" null: no bound),
 *    "stragglers": [name...],
 *    "workers": [{"job", "name", "rank", "node", "version", "staleness",
 *                 "steps", "updates_per_s", "step_ms", "straggler"}...]}
 * `workers --json` has the keys up to "job" (and a node's "node_id"),
 * then "workers".
 */
#include "daemon/ctl/json_view.h"

#include <math.h>

static void who(struct pr_json *j, const struct pr_ctl_view *v,
                const char *addr)
{
    pr_json_str(j, "address", addr);
    pr_json_str(j, "role", v->role == PR_CTL_NODE ? "node" : "scheduler");
    pr_json_str(j, "name", v->name);
    pr_json_str(j, "job", v->job);
    if (v->role == PR_CTL_NODE)
        pr_json_num(j, "node_id", v->node_id);
}

static void workers(struct pr_json *j, const struct pr_ctl_view *v)
{
    pr_json_open_array(j, "workers");
    for (size_t k = 0; k < v->nworkers; k++) {
        const struct pr_ctl_worker *w = &v->workers[k];
        pr_json_open_object(j, NULL);
        pr_json_str(j, "job", w->job);
        pr_json_str(j, "name", w->name);
        pr_json_num(j, "rank", w->rank);
        if (v->role == PR_CTL_SCHED)
            pr_json_num(j, "node", w->node);
        pr_json_num(j, "version", w->version);
        if (v->role == PR_CTL_SCHED) {
            pr_json_num(j, "staleness", w->staleness);
            pr_json_num(j, "steps", w->steps);
            pr_json_num(j, "updates_per_s", w->rate);
            pr_json_num(j, "step_ms", w->step_s * 1000);
            pr_json_bool(j, "straggler", w->straggler);
        }
        pr_json_close_object(j);
    }
    pr_json_close_array(j);
}

static void node(struct pr_json *j, const struct pr_ctl_view *v)
{
    pr_json_bool(j, "scheduler_up", v->sched_up);
    pr_json_num(j, "trainers", v->trainers);
    pr_json_num(j, "reduces_ok", v->reduces_ok);
    pr_json_num(j, "reduces_failed", v->reduces_failed);
    pr_json_num(j, "reduce_mean_ms",
                v->reduce_count > 0 ? v->reduce_sum_s / v->reduce_count * 1000
                                    : NAN);
    pr_json_num(j, "groups_ok", v->groups_ok);
    pr_json_num(j, "groups_failed", v->groups_failed);
    pr_json_num(j, "groups_running", v->groups_running);
    static const char *const xports[PR_CTL_XPORTS] = {"tcp", "rdma"};
    pr_json_open_object(j, "bytes");
    for (int i = 0; i < PR_CTL_XPORTS; i++) {
        pr_json_open_object(j, xports[i]);
        pr_json_num(j, "sent", v->bytes[i][PR_CTL_SENT]);
        pr_json_num(j, "received", v->bytes[i][PR_CTL_RECEIVED]);
        pr_json_close_object(j);
    }
    pr_json_close_object(j);
    pr_json_str(j, "wire_default", v->wire_default);
    pr_json_open_object(j, "wire");
    for (size_t k = 0; k < v->nwires; k++) {
        pr_json_open_object(j, v->wires[k].name);
        pr_json_num(j, "groups", v->wires[k].groups);
        pr_json_num(j, "bytes_sent", v->wires[k].bytes_sent);
        pr_json_close_object(j);
    }
    pr_json_close_object(j);
    pr_json_num(j, "peer_links_up", v->links_up);
    pr_json_bool(j, "rdma_device", v->rdma);
}

static void sched(struct pr_json *j, const struct pr_ctl_view *v)
{
    pr_json_num(j, "nodes", v->nodes);
    pr_json_num(j, "workers_live", v->live);
    pr_json_num(j, "workers_waiting", v->queued);
    pr_json_num(j, "groups_formed", v->groups);
    pr_json_num(j, "mean_group_size",
                v->groups > 0 ? v->members / v->groups : NAN);
    pr_json_open_array(j, "group_sizes");
    for (size_t k = 0; k < v->nsizes; k++) {
        pr_json_open_object(j, NULL);
        pr_json_num(j, "from", v->sizes[k].from);
        pr_json_num(j, "to", v->sizes[k].to);
        pr_json_num(j, "groups", v->sizes[k].groups);
        pr_json_close_object(j);
    }
    pr_json_close_array(j);
    pr_json_open_array(j, "stragglers");
    for (size_t k = 0; k < v->nworkers; k++)
        if (v->workers[k].straggler == 1)
            pr_json_str(j, NULL, v->workers[k].name);
    pr_json_close_array(j);
}

void pr_ctl_json_status(struct pr_json *j, const struct pr_ctl_view *v,
                        const char *addr)
{
    pr_json_open_object(j, NULL);
    who(j, v, addr);
    if (v->role == PR_CTL_NODE)
        node(j, v);
    else
        sched(j, v);
    workers(j, v);
    pr_json_close_object(j);
}

void pr_ctl_json_workers(struct pr_json *j, const struct pr_ctl_view *v,
                         const char *addr)
{
    pr_json_open_object(j, NULL);
    who(j, v, addr);
    workers(j, v);
    pr_json_close_object(j);
}

void pr_ctl_json_jobs(struct pr_json *j, const struct pr_ctl_view *v,
                      const char *addr)
{
    pr_json_open_object(j, NULL);
    who(j, v, addr);
    if (v->role == PR_CTL_SCHED) {
        pr_json_open_array(j, "jobs");
        for (size_t k = 0; k < v->njobs; k++) {
            const struct pr_ctl_job *x = &v->jobs[k];
            pr_json_open_object(j, NULL);
            pr_json_str(j, "name", x->name);
            pr_json_num(j, "id", x->id);
            pr_json_str(j, "policy", x->policy);
            pr_json_str(j, "key", x->key);
            pr_json_num(j, "workers", x->workers);
            pr_json_num(j, "waiting", x->queued);
            pr_json_num(j, "groups", x->groups);
            pr_json_close_object(j);
        }
        pr_json_close_array(j);
    }
    pr_json_close_object(j);
}

void pr_ctl_json_error(struct pr_json *j, const char *addr, const char *why)
{
    pr_json_open_object(j, NULL);
    pr_json_str(j, "address", addr);
    pr_json_str(j, "error", why);
    pr_json_close_object(j);
}
