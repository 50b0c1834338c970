/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's jobs at work: workers join a job (a rank each within
 * it, kept across a scheduler restart when free) and leave, READY and
 * Cancel feed the job's decision core (sched_core.c), and the groups it
 * forms go to their nodes as Group messages; a GroupDone per node closes
 * each, a failure aborts it on the others. It owns the groups in flight
 * (struct sched_group is its alone) and the jobs' worker tables; it reads
 * the node list that sched.c keeps, and calls nothing in sched.c. Every
 * message about a worker names it by (job id, rank): a job's ranks are
 * its own, and a message naming another node's worker, or a job that
 * ended, changes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/engine/wire.h"
#include "daemon/sched/sched_int.h"
#include "daemon/sched/sched_ring.h"

/*
 * A node's reported rate older than this is not used: links change, and
 * an unknown rate counts as the best known, so the link gets tried again.
 */
#define SCHED_RATE_MAX_AGE_MS 60000

/* A group in flight: which nodes still owe a GroupDone. */
struct sched_group {
    struct sched_group *next;
    uint64_t id;
    uint32_t nnodes;
    uint32_t *nodes;
    uint8_t *done; /* per node */
    uint64_t expires_ms;
    uint64_t formed_us; /* pr_sched_now_us() at dispatch */
    uint32_t *ranks;    /* its members, told its reduce time at the end */
    uint32_t nranks;
    uint32_t job; /* its job's id: the job may end before the group */
};

static struct sched_node *node_by_id(struct pr_sched *s, uint32_t id)
{
    for (struct sched_node *n = s->nodes; n; n = n->next)
        if (n->id == id)
            return n;
    return NULL;
}

void pr_sched_send(struct sched_node *n, Pr__V1__Msg *m)
{
    int rc = pr_conn_send(n->conn, m);
    if (rc < 0)
        pr_warn("node %u: send %s: %s", n->id, pr_msg_name(m), strerror(-rc));
}

static void group_free(struct sched_group *g)
{
    free(g->nodes);
    free(g->done);
    free(g->ranks);
    free(g);
}

/* GroupAbort{status} to g's nodes but `except` and those done. */
static void send_abort(struct pr_sched *s, struct sched_group *g,
                       uint32_t except, int status)
{
    Pr__V1__GroupAbort a = PR__V1__GROUP_ABORT__INIT;
    a.id = g->id;
    a.status = status;
    Pr__V1__Msg m = PR_MSG_OF(GROUP_ABORT, group_abort, &a);
    for (uint32_t i = 0; i < g->nnodes; i++) {
        struct sched_node *n;
        if (g->nodes[i] == except || g->done[i] ||
            !(n = node_by_id(s, g->nodes[i])))
            continue;
        pr_sched_send(n, &m);
    }
}

static void deadline_cb(uv_timer_t *t)
{
    struct pr_sched *s = t->data;
    s->deadline_us = -1;
    pr_sched_schedule_all(s);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * Sends the core's group `g` to every daemon that hosts a member, and
 * keeps it in flight until their GroupDones (or its expiry). Out of
 * memory, the group is dropped before anything is sent (logged).
 */
/*
 * Chunks from `from` reach `to` at this rate (bytes/s), as `to` last
 * reported it (sched_ring.h's rate function); 0 when unknown or older
 * than SCHED_RATE_MAX_AGE_MS.
 */
static double link_rate(void *ctx, uint32_t from, uint32_t to)
{
    struct pr_sched *s = ctx;
    const struct sched_node *n = node_by_id(s, to);
    if (!n)
        return 0;
    uint64_t since = uv_now(s->loop) - n->rates_ms;
    for (size_t i = 0; i < n->nrates; i++)
        if (n->rates[i].from == from)
            /* Checked so that no age off the wire can wrap the sum. */
            return since <= SCHED_RATE_MAX_AGE_MS &&
                           n->rates[i].age_ms <= SCHED_RATE_MAX_AGE_MS - since
                       ? (double)n->rates[i].bytes_per_s
                       : 0;
    return 0;
}

/*
 * The ring of group g into ring[] (room for g->n): the members' distinct
 * nodes, in node id order, then (scheduler.ring_order = measured) in the
 * order that crosses slow links least (sched_ring.c). Returns its length.
 */
static uint32_t group_ring(struct pr_sched *s, const struct pr_sched_group *g,
                           uint32_t *ring)
{
    for (uint32_t i = 0; i < g->n; i++)
        ring[i] = g->members[i].node;
    qsort(ring, g->n, sizeof(*ring), cmp_u32);
    uint32_t m = 0;
    for (uint32_t i = 0; i < g->n; i++)
        if (m == 0 || ring[m - 1] != ring[i])
            ring[m++] = ring[i];
    if (s->conf->sched_ring_order == PR_RING_MEASURED) {
        int rc = pr_sched_ring_order(ring, m, link_rate, s);
        if (rc < 0)
            pr_warn("group ring: no memory to order it: node id order");
        s->rings_reordered += rc > 0;
    }
    return m;
}

static void dispatch(struct sched_job *j, const struct pr_sched_group *g)
{
    struct pr_sched *s = j->s;
    struct sched_group *sg = calloc(1, sizeof(*sg));
    uint32_t *ring = calloc(g->n, sizeof(*ring));
    Pr__V1__Member *mem = calloc(g->n, sizeof(*mem));
    Pr__V1__Member **mp = calloc(g->n, sizeof(*mp));
    if (!sg || !ring || !mem || !mp)
        goto out;
    uint32_t m = group_ring(s, g, ring);
    for (uint32_t i = 0; i < g->n; i++) {
        pr__v1__member__init(&mem[i]);
        mem[i].rank = g->members[i].rank;
        mem[i].node_id = g->members[i].node;
        mem[i].weight = g->members[i].weight;
        mem[i].version = g->members[i].version;
        mem[i].seq = g->members[i].seq;
        mp[i] = &mem[i];
    }
    Pr__V1__Group gm = PR__V1__GROUP__INIT;
    /* Each job's core counts its own: the wire id counts all jobs'. */
    gm.id = s->id_base + ++s->group_seq;
    gm.n_members = g->n;
    gm.members = mp;
    gm.n_ring = m;
    gm.ring = ring;
    gm.max_version = g->max_version;
    gm.nfloats = j->nfloats;
    gm.job = j->id;
    gm.personal = g->personal != 0;
    gm.timeout_ms = s->conf->sched_group_timeout_ms;
    /* The most precise any member asked for (enum pr_wire's order). */
    gm.wire = PR_WIRE_COUNT - 1;
    for (uint32_t i = 0; i < g->n; i++)
        if (j->workers[g->members[i].rank].wire < gm.wire)
            gm.wire = j->workers[g->members[i].rank].wire;
    Pr__V1__Msg msg = PR_MSG_OF(GROUP, group, &gm);

    sg->id = gm.id;
    sg->job = j->id;
    sg->nnodes = m;
    sg->nodes = malloc(m * sizeof(*sg->nodes));
    sg->done = calloc(m, 1);
    if (!sg->nodes || !sg->done)
        goto out;
    memcpy(sg->nodes, ring, m * sizeof(*ring));
    sg->expires_ms = uv_now(s->loop) + 2ull * gm.timeout_ms + 1000;
    sg->formed_us = pr_sched_now_us();
    sg->ranks = malloc(g->n * sizeof(*sg->ranks));
    if (sg->ranks) {
        for (uint32_t i = 0; i < g->n; i++)
            sg->ranks[i] = g->members[i].rank;
        sg->nranks = g->n;
    }
    for (uint32_t i = 0; i < m; i++) {
        struct sched_node *n = node_by_id(s, ring[i]);
        if (n)
            pr_sched_send(n, &msg);
    }
    pr_dbg("job '%s': group %llu: %u members on %u nodes", j->name,
           (unsigned long long)gm.id, g->n, m);
    sg->next = s->groups;
    s->groups = sg;
    sg = NULL;
    /* Counted together, so that the histogram's count is its +Inf. */
    s->groups_formed++;
    s->sizes[g->n <= PR_SCHED_SIZES ? g->n : 0]++;
    s->members += g->n;
    j->groups_formed++;
out:
    if (sg) {
        pr_err("group %llu: out of memory: dropped", (unsigned long long)g->id);
        group_free(sg);
    }
    free(ring);
    free(mem);
    free(mp);
}

/* Forms job j's due groups and keeps its next due time; arms nothing. */
static void schedule_job(struct sched_job *j)
{
    struct pr_sched_group g;
    int rc;
    while ((rc = pr_sched_core_next_group(j->core, pr_sched_now_us(), &g)) ==
           1) {
        for (uint32_t i = 0; i < g.n; i++)
            j->workers[g.members[i].rank].st.grouped_us = pr_sched_now_us();
        dispatch(j, &g);
        pr_sched_group_fini(&g);
    }
    if (rc < 0)
        pr_err("job '%s': scheduler core: %s", j->name, strerror(-rc));
    j->due_us = pr_sched_core_deadline_us(j->core);
}

/* The deadline timer set for `due` (a pr_sched_now_us() time). */
static void arm_at(struct pr_sched *s, int64_t due)
{
    int64_t wait_us = due - (int64_t)pr_sched_now_us();
    uint64_t wait_ms = wait_us <= 0 ? 0 : (uint64_t)(wait_us + 999) / 1000;
    s->deadline_us = due;
    uv_timer_start(&s->deadline, deadline_cb, wait_ms, 0);
}

/*
 * After job j alone was scheduled (a READY, a cancel, a worker gone): the
 * timer is brought forward when j is due before what it is set for, and
 * otherwise left as it is. A pass over every job here, per READY, cost
 * as much as the READY at 64 jobs (make bench-jobs). A due time that
 * moved later costs at most one early wake-up: deadline_cb schedules
 * every job and sets the timer from a whole pass.
 */
static void arm_job(const struct sched_job *j)
{
    struct pr_sched *s = j->s;
    if (j->due_us >= 0 && (s->deadline_us < 0 || j->due_us < s->deadline_us))
        arm_at(s, j->due_us);
}

/* The deadline timer at the jobs' earliest due time, or stopped. */
static void arm_all(struct pr_sched *s)
{
    int64_t due = -1;
    for (const struct sched_job *j = s->jobs; j; j = j->next)
        if (j->due_us >= 0 && (due < 0 || j->due_us < due))
            due = j->due_us;
    if (due >= 0) {
        arm_at(s, due);
        return;
    }
    s->deadline_us = -1;
    uv_timer_stop(&s->deadline);
}

void pr_sched_schedule(struct sched_job *j)
{
    schedule_job(j);
    arm_job(j);
}

void pr_sched_schedule_all(struct pr_sched *s)
{
    for (struct sched_job *j = s->jobs; j; j = j->next)
        schedule_job(j);
    arm_all(s);
}

static int ensure_workers(struct sched_job *j, uint32_t rank)
{
    if (rank < j->nworkers_cap)
        return 0;
    uint32_t cap = j->nworkers_cap ? j->nworkers_cap : 64;
    while (cap <= rank)
        cap *= 2;
    struct sched_worker *w = realloc(j->workers, cap * sizeof(*w));
    if (!w)
        return -ENOMEM;
    memset(w + j->nworkers_cap, 0, (cap - j->nworkers_cap) * sizeof(*w));
    j->workers = w;
    j->nworkers_cap = cap;
    return 0;
}

uint32_t pr_sched_live_workers(const struct pr_sched *s)
{
    uint32_t n = 0;
    for (const struct sched_job *j = s->jobs; j; j = j->next)
        n += pr_sched_core_live(j->core);
    return n;
}

/* Worker w no longer holds a layout (it left, or its model changed). */
static void drop_layout(struct sched_job *j, struct sched_worker *w)
{
    if (w->nfloats && w->nfloats == j->nfloats && j->holders > 0)
        j->holders--;
    w->nfloats = 0;
}

/* The caller ends the job if it was the last (pr_sched_job_end_if_idle). */
static void remove_worker(struct sched_job *j, uint32_t rank)
{
    if (rank >= j->nworkers_cap || !j->workers[rank].live)
        return;
    j->workers[rank].live = 0;
    struct sched_node *n = node_by_id(j->s, j->workers[rank].node);
    if (n && n->workers > 0)
        n->workers--;
    drop_layout(j, &j->workers[rank]);
    pr_sched_core_remove_worker(j->core, rank, pr_sched_now_us());
    pr_info("job '%s': worker %u (%s) left", j->name, rank,
            j->workers[rank].name);
}

static void reject(struct sched_node *n, uint32_t job, uint32_t rank,
                   uint64_t seq, int status, const char *reason)
{
    Pr__V1__Reject r = PR__V1__REJECT__INIT;
    r.job = job;
    r.rank = rank;
    r.seq = seq;
    r.status = status;
    r.reason = (char *)reason;
    Pr__V1__Msg m = PR_MSG_OF(REJECT, reject, &r);
    pr_sched_send(n, &m);
}

/* Live workers whose last READY was of nfloats floats. */
static uint32_t wanting(const struct sched_job *j, uint64_t nfloats)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < j->nworkers_cap; r++)
        n += j->workers[r].live && j->workers[r].nfloats == nfloats;
    return n;
}

/*
 * The job's layout becomes nfloats, wanted by `holders` live workers:
 * READYs of the old one still queued are withdrawn and refused, or a
 * group could mix the two.
 */
static void switch_layout(struct sched_job *j, uint64_t nfloats,
                          uint32_t holders)
{
    uint64_t old = j->nfloats;
    char why[192];

    if (old)
        pr_info("job '%s': its layout is now %llu floats (was %llu: %u live "
                "worker%s against %u)",
                j->name, (unsigned long long)nfloats, (unsigned long long)old,
                holders, holders == 1 ? "" : "s", j->holders);
    j->nfloats = nfloats;
    j->holders = holders;
    snprintf(why, sizeof(why),
             "reduce of %llu floats, but this job now reduces %llu (the "
             "layout of most live workers)",
             (unsigned long long)old, (unsigned long long)nfloats);
    for (uint32_t rank = 0; old && rank < j->nworkers_cap; rank++) {
        uint32_t tag;
        uint64_t seq;
        if (!j->workers[rank].live || j->workers[rank].nfloats != old ||
            pr_sched_core_queued_tag(j->core, rank, &tag, &seq) < 0 ||
            pr_sched_core_cancel(j->core, rank, seq, pr_sched_now_us()) < 0)
            continue;
        struct sched_node *n = node_by_id(j->s, j->workers[rank].node);
        if (n)
            reject(n, j->id, rank, seq, -EINVAL, why);
    }
}

/*
 * The job's layout (floats per reduce) is the one most live workers
 * reduce, each counted by its last READY, refused or not; a tie keeps the
 * job's. So a lone trainer of a wrong model neither pins the job when it
 * comes first nor takes it over after a scheduler restart: it is refused
 * alone, with both layouts named, once the others outnumber it, and a
 * rolling upgrade to a changed model takes over as its trainers do.
 * Returns 0, or -EINVAL with why[] filled in.
 */
static int check_layout(struct sched_job *j, struct sched_worker *w,
                        uint64_t nfloats, char *why, size_t why_len)
{
    if (w->nfloats != nfloats) {
        drop_layout(j, w);
        w->nfloats = nfloats;
        if (nfloats == j->nfloats)
            j->holders++;
    }
    if (nfloats == j->nfloats)
        return 0;
    /*
     * Counting the others costs a pass over the workers: only when they
     * could outnumber the job's holders, so a wrong trainer's repeated
     * READYs against a larger job cost nothing.
     */
    uint32_t live = pr_sched_core_live(j->core);
    if (j->holders == 0 || live - j->holders > j->holders) {
        uint32_t n = wanting(j, nfloats);
        if (n > j->holders) {
            switch_layout(j, nfloats, n);
            return 0;
        }
    }
    snprintf(why, why_len,
             "reduce of %llu floats, but this job reduces %llu (the layout "
             "of %u live worker%s; the job takes the layout most live "
             "workers reduce)",
             (unsigned long long)nfloats, (unsigned long long)j->nfloats,
             j->holders, j->holders == 1 ? "" : "s");
    return -EINVAL;
}

/*
 * Worker `name` of node n into job j, at the rank it had under an earlier
 * scheduler (prev_rank_plus1 - 1) when that is free, else the lowest
 * free one. 0 and *rank, or -EEXIST (the name is taken in j), -ENOSPC
 * (no rank left, or no memory) or the core's code, with why[] filled in.
 */
static int add_worker(struct sched_job *j, struct sched_node *n,
                      const char *name, uint32_t prev_rank_plus1, uint32_t *out,
                      char *why, size_t why_len)
{
    uint32_t rank, free_rank = UINT32_MAX;
    for (rank = 0; rank < j->nworkers_cap; rank++) {
        if (j->workers[rank].live && !strcmp(j->workers[rank].name, name))
            break;
        if (!j->workers[rank].live && free_rank == UINT32_MAX)
            free_rank = rank;
    }
    if (rank < j->nworkers_cap) {
        snprintf(why, why_len, "worker name '%s' is taken in job '%s'", name,
                 j->name);
        pr_warn("node %u: %s (rank %u)", n->id, why, rank);
        return -EEXIST;
    }
    rank = free_rank != UINT32_MAX ? free_rank : j->nworkers_cap;
    /* A worker re-registering after a scheduler restart keeps its rank
     * when nobody took it in the meantime. */
    uint32_t want = prev_rank_plus1 - 1;
    if (prev_rank_plus1 > 0 && want < PR_SCHED_MAX &&
        (want >= j->nworkers_cap || !j->workers[want].live))
        rank = want;
    int rc =
        rank >= PR_SCHED_MAX || ensure_workers(j, rank) < 0
            ? -ENOSPC
            : pr_sched_core_add_worker(j->core, rank, n->id, pr_sched_now_us());
    if (rc < 0) {
        snprintf(why, why_len, "job '%s': no rank for worker '%s': %s", j->name,
                 name, strerror(-rc));
        return rc;
    }
    struct sched_worker *w = &j->workers[rank];
    w->live = 1;
    w->node = n->id;
    n->workers++;
    w->nfloats = 0;
    memset(&w->st, 0, sizeof(w->st));
    snprintf(w->name, sizeof(w->name), "%s", name);
    /*
     * A worker of an earlier scheduler session: the job had started, and
     * min_workers must not wait for workers that left while no scheduler
     * was there to see them go.
     */
    if (prev_rank_plus1 > 0)
        pr_sched_core_mark_started(j->core, pr_sched_now_us());
    pr_info("job '%s': worker %u (%s) joined on node %u", j->name, rank, name,
            n->id);
    *out = rank;
    return 0;
}

int pr_sched_worker_name(const char *name, char *why, size_t why_len)
{
    size_t max = sizeof(((struct sched_worker *)0)->name) - 1;
    if (!name[0] || strlen(name) > max) {
        snprintf(why, why_len, "a worker name of 1..%zu bytes", max);
        return -EINVAL;
    }
    return 0;
}

void pr_sched_on_worker_join(struct sched_node *n, const Pr__V1__WorkerJoin *wj)
{
    struct pr_sched *s = n->s;
    Pr__V1__WorkerJoined r = PR__V1__WORKER_JOINED__INIT;
    r.cookie = wj->cookie;
    const char *name = wj->name ? wj->name : "";
    /* An older node names no job: the scheduler's own. */
    const char *jobname = wj->job && wj->job[0] ? wj->job : s->conf->job;
    char why[384] = "";
    struct sched_job *j = NULL;
    /*
     * Before the pass over the workers: a node past its cap is refused
     * at once, so its flood costs neither memory nor that pass.
     */
    if (n->workers >= s->conf->sched_max_workers_node) {
        s->workers_refused++;
        pr_warn("node %u (%s): worker '%.64s' refused: the node has %u "
                "workers registered (scheduler.max_workers_per_node)",
                n->id, n->name, name, n->workers);
        r.status = -EUSERS;
        goto answer;
    }
    r.status = pr_sched_worker_name(name, why, sizeof(why));
    if (r.status < 0)
        goto answer;
    /*
     * The key before the settings: a worker without the job's key learns
     * nothing of the job (its settings are in the refusal's reason).
     */
    struct sched_job *had = pr_sched_job_by_name(s, jobname);
    if (had)
        r.status = pr_sched_job_key(had, wj->job_proof.data, wj->job_proof.len,
                                    why, sizeof(why));
    if (r.status == 0)
        r.status = pr_sched_job_get(s, jobname, wj->settings, wj->n_settings,
                                    &j, why, sizeof(why));
    if (r.status == 0 && !had)
        r.status = pr_sched_job_key(j, wj->job_proof.data, wj->job_proof.len,
                                    why, sizeof(why));
    if (r.status < 0) {
        pr_warn("node %u (%s): worker '%.64s' refused: %s", n->id, n->name,
                name, why);
        goto answer;
    }
    r.status =
        add_worker(j, n, name, wj->prev_rank_plus1, &r.rank, why, sizeof(why));
    if (r.status == 0) {
        r.job = j->id;
        r.keyed = j->proof_len > 0;
    }
answer:
    r.reason = why;
    Pr__V1__Msg m = PR_MSG_OF(WORKER_JOINED, worker_joined, &r);
    pr_sched_send(n, &m);
    if (!j)
        return;
    if (r.status < 0) {
        pr_sched_job_end_if_idle(j); /* it may have started for this one */
        return;
    }
    /* allreduce may have been waiting for nobody but this worker's peers */
    pr_sched_schedule(j);
}

/* preduce.torch recognises this refusal by its first words. */
#define TAGS_NEED_ALLREDUCE                                                    \
    "tagged reduces (gradient buckets) need scheduler.policy = allreduce"

/* The job of id `job` if `rank` is a live worker of it on node n. */
static struct sched_job *own_worker(struct sched_node *n, uint32_t job,
                                    uint32_t rank)
{
    struct sched_job *j = pr_sched_job_by_id(n->s, job);
    if (j && rank < j->nworkers_cap && j->workers[rank].live &&
        j->workers[rank].node == n->id)
        return j;
    return NULL;
}

void pr_sched_on_worker_leave(struct sched_node *n,
                              const Pr__V1__WorkerLeave *l)
{
    struct sched_job *j = own_worker(n, l->job, l->rank);
    if (!j)
        return;
    remove_worker(j, l->rank);
    pr_sched_schedule(j);
    pr_sched_job_end_if_idle(j);
}

void pr_sched_on_ready(struct sched_node *n, const Pr__V1__Ready *r)
{
    char why[256];
    struct sched_job *j = own_worker(n, r->job, r->rank);
    if (!j) {
        reject(n, r->job, r->rank, r->seq, -ENOENT, "unknown worker");
        return;
    }
    if (r->nfloats == 0) {
        reject(n, j->id, r->rank, r->seq, -EINVAL, "empty reduce");
        return;
    }
    /*
     * Refused before anything changes: check_layout() may redefine the
     * job's layout and heal marks the worker, neither of which a READY
     * the core then refuses may leave behind.
     */
    if (pr_sched_core_is_ready(j->core, r->rank)) {
        reject(n, j->id, r->rank, r->seq, -EALREADY, "already queued");
        return;
    }
    if (r->tag != 0 && j->policy != PR_POLICY_ALLREDUCE) {
        /* Tags keep the parts of a bucketed reduce apart; other policies
         * group whoever is ready, so a bucket could meet another bucket. */
        reject(n, j->id, r->rank, r->seq, -EINVAL, TAGS_NEED_ALLREDUCE);
        return;
    }
    if (r->wire >= PR_WIRE_COUNT) {
        reject(n, j->id, r->rank, r->seq, -EINVAL,
               "an encoding this scheduler does not know");
        return;
    }
    struct sched_worker *w = &j->workers[r->rank];
    if (check_layout(j, w, r->nfloats, why, sizeof(why)) < 0) {
        pr_warn("job '%s': worker %u (%s): %s", j->name, r->rank, w->name, why);
        reject(n, j->id, r->rank, r->seq, -EINVAL, why);
        return;
    }
    if (r->heal && pr_sched_core_heal(j->core, r->rank) == 0)
        pr_info("job '%s': worker %u (%s) heals: its next group's model, "
                "none of its own",
                j->name, r->rank, w->name);
    int rc = pr_sched_core_ready_tagged(j->core, r->rank, r->version, r->seq,
                                        r->tag, pr_sched_now_us());
    if (rc < 0) {
        reject(n, j->id, r->rank, r->seq, rc, "ready refused");
        return;
    }
    w->wire = r->wire;
    pr_sched_wstats_ready(&w->st, r->version, pr_sched_now_us());
    pr_sched_schedule(j);
}

/*
 * After a reload that left allreduce: the queued tagged READYs are
 * withdrawn and refused as a new one would be, since the new policy would
 * group them across tags. Their trainers learn the policy from it.
 */
void pr_sched_drop_tagged(struct sched_job *j)
{
    if (j->policy == PR_POLICY_ALLREDUCE)
        return;
    for (uint32_t rank = 0; rank < j->nworkers_cap; rank++) {
        uint32_t tag;
        uint64_t seq;
        if (!j->workers[rank].live ||
            pr_sched_core_queued_tag(j->core, rank, &tag, &seq) < 0 ||
            tag == 0 ||
            pr_sched_core_cancel(j->core, rank, seq, pr_sched_now_us()) < 0)
            continue;
        struct sched_node *n = node_by_id(j->s, j->workers[rank].node);
        if (n)
            reject(n, j->id, rank, seq, -EINVAL, TAGS_NEED_ALLREDUCE);
    }
}

void pr_sched_on_cancel(struct sched_node *n, const Pr__V1__Cancel *c)
{
    struct sched_job *j = own_worker(n, c->job, c->rank);
    if (!j)
        return;
    if (pr_sched_core_cancel(j->core, c->rank, c->seq, pr_sched_now_us()) == 0)
        reject(n, j->id, c->rank, c->seq, -ETIMEDOUT,
               "no group formed within the deadline");
    pr_sched_schedule(j);
}

void pr_sched_on_group_done(struct sched_node *n, const Pr__V1__GroupDone *d)
{
    struct pr_sched *s = n->s;
    struct sched_group **pp = &s->groups;
    while (*pp && (*pp)->id != d->id)
        pp = &(*pp)->next;
    struct sched_group *g = *pp;
    if (!g)
        return;
    int all = 1, member = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        if (g->nodes[i] == n->id)
            g->done[i] = member = 1;
        all &= g->done[i];
    }
    if (!member)
        return; /* not a node of this group: it has no say in it */
    if (d->status < 0) {
        /* Passed on to the others: an errno they can print, or EPROTO. */
        int status = d->status >= -4095 ? d->status : -EPROTO;
        pr_warn("group %llu failed on node %u: %s", (unsigned long long)d->id,
                n->id, strerror(-status));
        send_abort(s, g, n->id, status);
        all = 1;
    }
    if (all) {
        /* Done everywhere: its members' reduce time, for the window. */
        uint64_t us = pr_sched_now_us() - g->formed_us;
        struct sched_job *j = pr_sched_job_by_id(s, g->job);
        for (uint32_t i = 0; j && d->status >= 0 && i < g->nranks; i++)
            pr_sched_core_reduced(j->core, g->ranks[i], us);
        *pp = g->next;
        group_free(g);
    }
}

void pr_sched_forget_node(struct pr_sched *s, uint32_t node)
{
    struct sched_job *j = s->jobs;
    while (j) {
        struct sched_job *next = j->next;
        for (uint32_t r = 0; r < j->nworkers_cap; r++)
            if (j->workers[r].live && j->workers[r].node == node)
                remove_worker(j, r);
        pr_sched_job_end_if_idle(j);
        j = next;
    }
    struct sched_group **gp = &s->groups;
    while (*gp) {
        struct sched_group *g = *gp;
        int in = 0;
        for (uint32_t i = 0; i < g->nnodes; i++)
            in |= g->nodes[i] == node;
        if (in) {
            send_abort(s, g, node, -ECONNRESET);
            *gp = g->next;
            group_free(g);
        } else {
            gp = &g->next;
        }
    }
}

void pr_sched_expire_groups(struct pr_sched *s, uint64_t now_ms)
{
    struct sched_group **gp = &s->groups;
    while (*gp) {
        struct sched_group *g = *gp;
        if (now_ms >= g->expires_ms) {
            *gp = g->next;
            group_free(g);
        } else {
            gp = &g->next;
        }
    }
}

void pr_sched_groups_fini(struct pr_sched *s)
{
    while (s->groups) {
        struct sched_group *g = s->groups;
        s->groups = g->next;
        group_free(g);
    }
}
