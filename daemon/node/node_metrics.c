/* SPDX-License-Identifier: MIT */
/*
 * The node role's metrics (metrics.h): what the node, its reduce engine and
 * its transports counted since start, and each local trainer's version.
 * Read on the loop thread, like everything in struct pr_node.
 */
#include <stdio.h>

#include "daemon/base/metrics.h"
#include "daemon/node/node_int.h"
#include "daemon/xport/rdma/rdma.h"

static void counter2(struct pr_metrics_buf *b, const char *name,
                     const char *help, const char *label, const char *v1,
                     uint64_t x1, const char *v2, uint64_t x2)
{
    pr_metrics_header(b, name, "counter", help);
    pr_metrics_printf(b, "%s{%s=\"%s\"} %llu\n%s{%s=\"%s\"} %llu\n", name,
                      label, v1, (unsigned long long)x1, name, label, v2,
                      (unsigned long long)x2);
}

static void one(struct pr_metrics_buf *b, const char *name, const char *type,
                const char *help, uint64_t x)
{
    pr_metrics_header(b, name, type, help);
    pr_metrics_printf(b, "%s %llu\n", name, (unsigned long long)x);
}

static void gauge(struct pr_metrics_buf *b, const char *name, const char *help,
                  uint64_t x)
{
    one(b, name, "gauge", help, x);
}

static void counter(struct pr_metrics_buf *b, const char *name,
                    const char *help, uint64_t x)
{
    one(b, name, "counter", help, x);
}

static void bytes(struct pr_metrics_buf *b, const char *transport,
                  uint64_t sent, uint64_t recv)
{
    pr_metrics_printf(b,
                      "preduce_node_bytes_total{transport=\"%s\","
                      "direction=\"sent\"} %llu\n"
                      "preduce_node_bytes_total{transport=\"%s\","
                      "direction=\"received\"} %llu\n",
                      transport, (unsigned long long)sent, transport,
                      (unsigned long long)recv);
}

/* Who this daemon is: the one preduce_info line, and its release. */
static void render_info(struct pr_metrics_buf *b, const struct pr_node *n)
{
    const struct pr_conf *c = n->conf;
    char job[2 * 64 + 1], name[2 * 64 + 1];
    pr_metrics_header(b, "preduce_info", "gauge",
                      "This daemon: role, job and name.");
    pr_metrics_printf(b,
                      "preduce_info{role=\"node\",job=\"%s\",name=\"%s\","
                      "node_id=\"%u\"} 1\n",
                      pr_metrics_escape(c->job, job, sizeof(job)),
                      pr_metrics_escape(c->node_name, name, sizeof(name)),
                      n->sched[0] ? n->sched[0]->self : 0);
    pr_metrics_build_info(b);
}

/*
 * The reduce latency histogram's upper bounds (inclusive), in us and as
 * the le label says them: a reduce of a small model on one host takes a
 * few hundred us, a large one across hosts seconds. The last is past
 * node.reduce_timeout_ms's default (30 s), after which a reduce fails
 * and is not counted; with the timeout raised, a longer one counts in
 * +Inf alone.
 */
static const struct {
    uint64_t us;
    const char *le;
} reduce_bounds[PR_NODE_REDUCE_BUCKETS] = {
    {100, "0.0001"},  {250, "0.00025"}, {500, "0.0005"},  {1000, "0.001"},
    {2500, "0.0025"}, {5000, "0.005"},  {10000, "0.01"},  {25000, "0.025"},
    {50000, "0.05"},  {100000, "0.1"},  {250000, "0.25"}, {500000, "0.5"},
    {1000000, "1"},   {2500000, "2.5"}, {5000000, "5"},   {10000000, "10"},
    {30000000, "30"}, {60000000, "60"},
};

void pr_node_reduce_observe(struct pr_node *n, uint64_t us)
{
    n->reduce_us_sum += us;
    n->reduce_us_count++;
    for (size_t i = 0; i < PR_NODE_REDUCE_BUCKETS; i++) {
        if (us <= reduce_bounds[i].us) {
            n->reduce_us_buckets[i]++;
            break;
        }
    }
}

/*
 * A Prometheus histogram: cumulative buckets, +Inf equal to _count, and
 * _sum and _count as the summary it replaced had them.
 */
static void render_reduce_seconds(struct pr_metrics_buf *b,
                                  const struct pr_node *n)
{
    pr_metrics_header(b, "preduce_node_reduce_seconds", "histogram",
                      "Time from a trainer's reduce request to its "
                      "successful answer.");
    uint64_t cum = 0;
    for (size_t i = 0; i < PR_NODE_REDUCE_BUCKETS; i++) {
        cum += n->reduce_us_buckets[i];
        pr_metrics_printf(b,
                          "preduce_node_reduce_seconds_bucket{le=\"%s\"} "
                          "%llu\n",
                          reduce_bounds[i].le, (unsigned long long)cum);
    }
    pr_metrics_printf(b,
                      "preduce_node_reduce_seconds_bucket{le=\"+Inf\"} %llu\n"
                      "preduce_node_reduce_seconds_sum %.6f\n"
                      "preduce_node_reduce_seconds_count %llu\n",
                      (unsigned long long)n->reduce_us_count,
                      (double)n->reduce_us_sum / 1e6,
                      (unsigned long long)n->reduce_us_count);
}

/* The schedulers followed now: node.scheduler's and the trainers'. */
static uint64_t schedulers(const struct pr_node *n)
{
    uint64_t k = 0;
    for (uint32_t i = 0; i < n->nsched; i++)
        k += n->sched[i] != NULL;
    return k;
}

/* What the node itself counts: its scheduler links, trainers, reduces. */
static void render_node(struct pr_metrics_buf *b, const struct pr_node *n)
{
    gauge(b, "preduce_node_scheduler_up",
          "1 while the link to the node's scheduler (node.scheduler) is up.",
          (uint64_t)(n->sched[0] && pr_node_sched_up(n->sched[0])));
    gauge(b, "preduce_node_schedulers",
          "Schedulers this node follows: its own and those its trainers "
          "named (PREDUCE_SCHEDULER).",
          schedulers(n));
    /* Connections before their hello are no trainers yet (stranger.h). */
    gauge(b, "preduce_node_trainers", "Trainers connected to this node.",
          n->ngreeted);
    counter(b, "preduce_node_busy_polls_total",
            "Times the loop began polling without sleeping while a reduce "
            "was in flight (node.busy_poll_us).",
            n->spins);
    counter(b, "preduce_node_busy_polls_skipped_total",
            "Times polling did not begin: no CPU was spare (as many "
            "runnable tasks as CPUs).",
            n->spins_skipped);
    pr_metrics_header(b, "preduce_node_busy_poll_seconds_total", "counter",
                      "Time the loop spent polling without sleeping (a CPU "
                      "kept busy).");
    pr_metrics_printf(b, "preduce_node_busy_poll_seconds_total %.6f\n",
                      (double)pr_node_spin_ns(n) / 1e9);
    counter2(b, "preduce_node_reduces_total",
             "Trainers' reduces answered, by outcome.", "status", "ok",
             n->reduces_ok, "failed", n->reduces_failed);
    render_reduce_seconds(b, n);
}

/*
 * What the engines count (pr_engine_stats), summed over the schedulers
 * followed now and those closed before; *running: groups in them now.
 */
static void sum_engines(const struct pr_node *n, struct pr_engine_stats *t,
                        uint64_t *running)
{
    *t = n->gone_engine;
    *running = 0;
    for (uint32_t i = 0; i < n->nsched; i++) {
        const struct node_sched *s = n->sched[i];
        if (!s || !s->engine)
            continue;
        struct pr_engine_stats es;
        pr_engine_stats(s->engine, &es);
        pr_engine_stats_add(t, &es);
        *running += pr_engine_running(s->engine);
    }
}

/* What the reduce engines count: groups and chunks. */
static void render_engine(struct pr_metrics_buf *b, const struct pr_node *n)
{
    struct pr_engine_stats es;
    uint64_t running;
    sum_engines(n, &es, &running);
    counter2(b, "preduce_node_groups_total",
             "This node's parts of groups run by the reduce engine, by "
             "outcome.",
             "status", "ok", es.groups_ok, "failed", es.groups_failed);
    counter(b, "preduce_node_groups_in_place_total",
            "Of the groups that ended ok, those whose results went straight "
            "into the tensor of a trainer that asked for it "
            "(preduce_set_in_place).",
            es.groups_in_place);
    counter(b, "preduce_node_groups_shadow_total",
            "Of the groups that ended ok, those whose lone local trainer got "
            "its final floats as they came, its inputs kept aside (the "
            "default mode with one trainer on the node).",
            es.groups_shadow);
    counter(b, "preduce_node_groups_restored_total",
            "Groups that put a trainer's kept inputs back into its tensors "
            "(failed, or the trainer left).",
            es.groups_restored);
    gauge(b, "preduce_node_groups_running", "Groups in the reduce engine now.",
          running);
    counter2(b, "preduce_node_stash_chunks_total",
             "Chunks that arrived before their group: kept for it, or "
             "dropped (stale, or the stash full).",
             "result", "stashed", es.chunks_stashed, "dropped",
             es.chunks_dropped);
    counter(b, "preduce_node_reduced_bytes_total",
            "Result bytes written back into trainers' tensors.",
            es.bytes_reduced);
    pr_node_render_wire(b, n, &es);
}

/* One series per wire encoding (enum pr_wire), labelled with its name. */
static void by_wire(struct pr_metrics_buf *b, const char *name,
                    const char *type, const char *help, const uint64_t *x)
{
    pr_metrics_header(b, name, type, help);
    for (uint32_t w = 0; w < PR_WIRE_COUNT; w++)
        pr_metrics_printf(b, "%s{wire=\"%s\"} %llu\n", name, pr_wire_name(w),
                          (unsigned long long)x[w]);
}

void pr_node_render_wire(struct pr_metrics_buf *b, const struct pr_node *n,
                         const struct pr_engine_stats *es)
{
    /* A state set: the node's default is 1, the others 0. */
    uint64_t def[PR_WIRE_COUNT] = {0};
    if ((uint32_t)n->conf->xport_wire < PR_WIRE_COUNT)
        def[n->conf->xport_wire] = 1;
    by_wire(b, "preduce_node_wire_default", "gauge",
            "1 for the encoding of floats between daemons that this node "
            "uses unless a trainer asks for another (transport.wire), 0 for "
            "the others.",
            def);
    by_wire(b, "preduce_node_wire_groups_total", "counter",
            "Groups that sent their chunks to peer daemons, by encoding.",
            es->wire_groups);
    by_wire(b, "preduce_node_wire_bytes_sent_total", "counter",
            "Chunk payload bytes posted to peer daemons, by encoding "
            "(without the transports' framing).",
            es->wire_bytes);
    gauge(b, "preduce_node_wire_feedback_bytes",
          "Memory this node keeps for int8's error feedback (what rounding "
          "lost, per trainer and list of tensors), bytes.",
          n->feedback_bytes);
}

/*
 * The link rates this node reports to its schedulers (ring order), by
 * peer: node ids are a scheduler's own, so those of a scheduler a
 * trainer named carry its address too.
 */
static void render_rates(struct pr_metrics_buf *b, const struct pr_node *n)
{
    pr_metrics_header(b, "preduce_node_link_rate_bytes_per_second", "gauge",
                      "How fast chunks of 64 KiB or more from each peer "
                      "arrived (EWMA), by peer node id (and scheduler, for "
                      "one a trainer named).");
    char sched[2 * PR_NODE_SCHED_SPEC_MAX + 1];
    for (uint32_t j = 0; j < n->nsched; j++) {
        const struct node_sched *s = n->sched[j];
        if (!s || !s->xport)
            continue;
        struct pr_link_rate lr[64];
        size_t k = pr_tcp_xport_rates(s->xport, uv_now(n->loop), lr, 64);
        for (size_t i = 0; i < k; i++) {
            if (j == 0)
                pr_metrics_printf(b,
                                  "preduce_node_link_rate_bytes_per_second{"
                                  "peer=\"%u\"} %.0f\n",
                                  lr[i].node, lr[i].bytes_per_s);
            else
                pr_metrics_printf(
                    b,
                    "preduce_node_link_rate_bytes_per_second{scheduler="
                    "\"%s\",peer=\"%u\"} %.0f\n",
                    pr_metrics_escape(s->spec, sched, sizeof(sched)),
                    lr[i].node, lr[i].bytes_per_s);
        }
    }
}

/*
 * What the transports count, summed over the schedulers followed and
 * those closed before; *rdma: whether one has an RDMA device open.
 */
static void sum_xports(const struct pr_node *n, struct pr_tcp_xport_stats *ts,
                       struct pr_rdma_stats *rs, uint64_t *sched_auth,
                       int *rdma)
{
    *ts = n->gone_tcp;
    *rs = n->gone_rdma;
    *sched_auth = n->gone_auth_failures;
    *rdma = 0;
    for (uint32_t i = 0; i < n->nsched; i++) {
        const struct node_sched *s = n->sched[i];
        if (!s || !s->xport)
            continue;
        struct pr_tcp_xport_stats t;
        pr_tcp_xport_stats(s->xport, &t);
        pr_tcp_xport_stats_add(ts, &t);
        *sched_auth += s->auth_failures;
        if (s->rdma) {
            struct pr_rdma_stats r;
            pr_rdma_stats(s->rdma, &r);
            pr_rdma_stats_add(rs, &r);
            *rdma = 1;
        }
    }
}

/* What the transports count: bytes by transport, links, RDMA's work. */
static void render_xport(struct pr_metrics_buf *b, const struct pr_node *n)
{
    struct pr_tcp_xport_stats ts;
    struct pr_rdma_stats rs;
    uint64_t sched_auth;
    int rdma;
    sum_xports(n, &ts, &rs, &sched_auth, &rdma);
    pr_metrics_header(b, "preduce_node_bytes_total", "counter",
                      "Data bytes to and from peer daemons, by transport.");
    bytes(b, "tcp", ts.bytes_sent, ts.bytes_recv);
    bytes(b, "rdma", rs.bytes_sent, rs.bytes_recv);
    gauge(b, "preduce_node_links_up", "Links to peer daemons that are up.",
          ts.links_up);
    gauge(b, "preduce_node_links_encrypted",
          "Links to peer daemons that are up and encrypted "
          "(security.encrypt).",
          ts.links_encrypted);
    counter2(b, "preduce_node_link_auth_failures_total",
             "Links ended by an encrypted frame that failed authentication "
             "(altered, replayed, reordered or lost on the way).",
             "link", "peer", ts.auth_failures, "scheduler", sched_auth);
    pr_metrics_header(b, "preduce_node_io_thread_bytes_total", "counter",
                      "Of the TCP bytes, those the I/O thread read or wrote "
                      "(transport.io_thread), frame headers included.");
    pr_metrics_printf(b,
                      "preduce_node_io_thread_bytes_total{direction=\"sent\"} "
                      "%llu\n"
                      "preduce_node_io_thread_bytes_total{direction="
                      "\"received\"} %llu\n",
                      (unsigned long long)ts.io_bytes_sent,
                      (unsigned long long)ts.io_bytes_recv);
    render_rates(b, n);
    gauge(b, "preduce_node_rdma", "1 when an RDMA device is open.",
          (uint64_t)rdma);
    counter2(b, "preduce_node_rdma_writes_total",
             "RDMA writes posted to peer daemons: data (returned credits "
             "ride along) and credit-only messages.",
             "kind", "data", rs.writes, "credit", rs.credit_msgs);
    counter(b, "preduce_node_rdma_cq_events_total",
            "Completion-channel events read (wake-ups for RDMA completions).",
            rs.cq_events);
}

/* One line per local trainer that said its name: its model version. */
static void render_workers(struct pr_metrics_buf *b, const struct pr_node *n)
{
    char name[2 * 64 + 1], job[2 * 64 + 1];
    pr_metrics_header(b, "preduce_worker_version", "gauge",
                      "Model version of each local trainer after its last "
                      "reduce (rank -1: not registered).");
    /*
     * Names are unique within a job of one scheduler: the job label, and
     * for a scheduler a trainer named its address, keep series apart.
     */
    char sched[2 * PR_NODE_SCHED_SPEC_MAX + 1];
    for (const struct node_trainer *w = n->trainers; w; w = w->next) {
        if (!w->conn || !w->name[0])
            continue;
        if (w->s && w->s->idx)
            pr_metrics_printf(
                b, "preduce_worker_version{scheduler=\"%s\",",
                pr_metrics_escape(w->s->spec, sched, sizeof(sched)));
        else
            pr_metrics_printf(b, "preduce_worker_version{");
        pr_metrics_printf(b, "job=\"%s\",",
                          pr_metrics_escape(w->job, job, sizeof(job)));
        pr_metrics_printf(b, "worker=\"%s\",rank=\"%lld\"} %llu\n",
                          pr_metrics_escape(w->name, name, sizeof(name)),
                          (long long)w->rank, (unsigned long long)w->version);
    }
}

int pr_node_render_metrics(void *ctx, struct pr_metrics_buf *b)
{
    const struct pr_node *n = ctx;
    render_info(b, n);
    render_node(b, n);
    render_engine(b, n);
    render_xport(b, n);
    render_workers(b, n);
    return b->err;
}
