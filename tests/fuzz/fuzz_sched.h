/* SPDX-License-Identifier: MIT */
/*
 * fuzz_sched.c's model of what the scheduler told its three nodes, and
 * the checks of each step against it, apart from the steps that play the
 * nodes: snapshots of the scheduler's workers before and after a step,
 * the groups and the GroupAborts they are owed, the messages a step
 * brought, and what the scheduler must answer each node's message (its
 * rules restated). The target's opening comment lists what these checks
 * abort on. Its state is the target's alone: only fuzz_sched.c includes
 * this header.
 */
#ifndef PREDUCE_TESTS_FUZZ_SCHED_H
#define PREDUCE_TESTS_FUZZ_SCHED_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sched/sched_int.h"
#include "tests/fuzz/fuzz_sock.h"

#define NNODE       3
#define MAX_WORKERS 3 /* scheduler.max_workers_per_node */
#define MAX_STEPS   64
#define MAX_GROUPS  (2 * MAX_STEPS)
#define MAX_GOT     512
/* Live workers at most: every node at its cap. */
#define MAX_LIVE (NNODE * MAX_WORKERS)

/* A node daemon as the harness plays it. */
struct fnode {
    struct fuzz_sock sock;
    uint32_t id;
    int gen;
};

/* A group as its nodes were told, and what each node said of it. */
struct mgroup {
    uint64_t id;
    uint32_t nring;
    uint32_t ring[NNODE];
    uint8_t done[NNODE];
    int live; /* no failure yet and some ring node not done */
};

/* A live worker in the scheduler's tables at one moment. */
struct wk {
    uint32_t job, rank, node;
    int queued;
    uint64_t seq;
    int grouped; /* its queued READY went into a Group this step */
};

struct snap {
    struct wk w[MAX_LIVE];
    int n;
    uint32_t default_job; /* the id of the job named `job`, or 0 */
};

/* A message the scheduler sent a node during a step. */
struct got {
    int k; /* the node's index */
    Pr__V1__Msg *m;
    int used;
};

/* The scheduler under test, and its nodes as the harness plays them. */
static struct pr_conf conf;
static struct pr_sched *sched;
static struct fnode nodes[NNODE];
/* The groups the nodes were sent, in order, and the top id so far. */
static struct mgroup groups[MAX_GROUPS];
static int ngroups;
static uint64_t last_group_id;
/* What the scheduler sent during this step, each to be explained once. */
static struct got got[MAX_GOT];
static int ngot;

static int alive(int k)
{
    return nodes[k].sock.fd >= 0 && nodes[k].id != 0;
}

static void got_clear(void)
{
    for (int i = 0; i < ngot; i++) {
        if (!got[i].used)
            abort(); /* a message nothing in the step explains */
        pr_msg_free(got[i].m);
    }
    ngot = 0;
}

/* The next unused message of `body` to node k (any node: k < 0). */
static struct got *take(int k, Pr__V1__Msg__BodyCase body)
{
    for (int i = 0; i < ngot; i++)
        if (!got[i].used && got[i].m->body_case == body &&
            (k < 0 || got[i].k == k)) {
            got[i].used = 1;
            return &got[i];
        }
    return NULL;
}

/* The scheduler's live workers now, each with its READY queued if any. */
static void snap(struct snap *sn)
{
    struct sched_job *dj = pr_sched_job_by_id(sched, 0);
    sn->n = 0;
    sn->default_job = dj ? dj->id : 0;
    for (struct sched_job *j = sched->jobs; j; j = j->next)
        for (uint32_t r = 0; r < j->nworkers_cap; r++) {
            if (!j->workers[r].live)
                continue;
            if (sn->n == MAX_LIVE)
                abort(); /* more workers than the nodes' caps allow */
            struct wk *w = &sn->w[sn->n++];
            uint32_t tag;
            *w = (struct wk){0};
            w->job = j->id;
            w->rank = r;
            w->node = j->workers[r].node;
            w->queued =
                pr_sched_core_queued_tag(j->core, r, &tag, &w->seq) == 0;
        }
}

static struct wk *find(struct snap *sn, uint32_t job, uint32_t rank)
{
    for (int i = 0; i < sn->n; i++)
        if (sn->w[i].job == job && sn->w[i].rank == rank)
            return &sn->w[i];
    return NULL;
}

/* A job id off the wire as the scheduler read it (0: the default job). */
static uint32_t job_id(const struct snap *sn, uint32_t id)
{
    return id ? id : sn->default_job;
}

/* PeerLists: each lists exactly the nodes alive now, with addresses. */
static void check_peer_lists(void)
{
    struct got *g;
    while ((g = take(-1, PR__V1__MSG__BODY_PEER_LIST))) {
        const Pr__V1__PeerList *pl = g->m->peer_list;
        size_t want = 0;
        for (int k = 0; k < NNODE; k++)
            want += alive(k);
        if (pl->n_peers != want || !alive(g->k))
            abort();
        for (size_t i = 0; i < pl->n_peers; i++) {
            uint32_t id = pl->peers[i]->node_id;
            char addr[32];
            if (id == 0 || id > NNODE || !alive((int)id - 1))
                abort();
            snprintf(addr, sizeof(addr), "127.0.0.1:%u", 7000 + id);
            if (strcmp(pl->peers[i]->data_addr, addr) != 0)
                abort();
        }
    }
}

/* The groups node k is in that still run, for GroupAbort's prediction. */
struct abort_want {
    int k;
    uint64_t id;
    int status;
};

static struct abort_want wants[MAX_GROUPS * NNODE];
static int nwants;

static int ring_index(const struct mgroup *g, uint32_t node)
{
    for (uint32_t i = 0; i < g->nring; i++)
        if (g->ring[i] == node)
            return (int)i;
    return -1;
}

/* Group g fails from node `from`: the other ring nodes not done hear. */
static void predict_aborts(struct mgroup *g, uint32_t from, int status)
{
    for (uint32_t i = 0; i < g->nring; i++) {
        int k = (int)g->ring[i] - 1;
        if (g->ring[i] != from && !g->done[i] && alive(k))
            wants[nwants++] = (struct abort_want){k, g->id, status};
    }
    g->live = 0;
}

/* Node `id` is gone: every group it is in fails on the others. */
static void node_lost(uint32_t id)
{
    for (int i = 0; i < ngroups; i++)
        if (groups[i].live && ring_index(&groups[i], id) >= 0)
            predict_aborts(&groups[i], id, -ECONNRESET);
}

static void check_aborts(void)
{
    for (int i = 0; i < nwants; i++) {
        struct got *g = NULL;
        for (int j = 0; j < ngot && !g; j++)
            if (!got[j].used &&
                got[j].m->body_case == PR__V1__MSG__BODY_GROUP_ABORT &&
                got[j].k == wants[i].k &&
                got[j].m->group_abort->id == wants[i].id &&
                got[j].m->group_abort->status == wants[i].status)
                g = &got[j];
        if (!g)
            abort(); /* a node of a failed group not told */
        g->used = 1;
    }
    nwants = 0;
    if (take(-1, PR__V1__MSG__BODY_GROUP_ABORT))
        abort(); /* an abort nothing failed */
}

/* Whether two Groups pack to the same bytes. */
static int same(const Pr__V1__Group *a, const Pr__V1__Group *b)
{
    size_t n = pr__v1__group__get_packed_size(a);
    if (n != pr__v1__group__get_packed_size(b))
        return 0;
    uint8_t *x = malloc(n + 1), *y = malloc(n + 1);
    if (!x || !y)
        abort();
    pr__v1__group__pack(a, x);
    pr__v1__group__pack(b, y);
    int eq = memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return eq;
}

/*
 * The Groups of this step: each sent to exactly its ring (but nodes we
 * hung up on), its members READY (queued before, in `pre`, or by this
 * step's READY, `ready`) and grouped once; recorded for the GroupDones
 * to come. *fresh counts the groups that took `ready`.
 */
static void check_groups(struct snap *pre, const struct wk *ready,
                         struct snap *post, int *fresh)
{
    struct got *g;
    uint64_t before = last_group_id;
    int first = ngroups;
    while ((g = take(-1, PR__V1__MSG__BODY_GROUP))) {
        const Pr__V1__Group *gm = g->m->group;
        struct sched_job *j = pr_sched_job_by_id(sched, gm->job);
        /* Read node by node: this step's groups in any order. */
        for (int i = first; i < ngroups; i++)
            if (groups[i].id == gm->id)
                abort(); /* one id, two groups (or sent twice) */
        if (gm->id <= before || ngroups == MAX_GROUPS || !j || gm->job == 0 ||
            gm->nfloats != j->nfloats || gm->n_members == 0 ||
            gm->n_ring == 0 || gm->n_ring > NNODE)
            abort();
        if (gm->id > last_group_id)
            last_group_id = gm->id;
        struct mgroup *mg = &groups[ngroups++];
        *mg = (struct mgroup){
            .id = gm->id, .nring = (uint32_t)gm->n_ring, .live = 1};
        for (size_t i = 0; i < gm->n_ring; i++) {
            mg->ring[i] = gm->ring[i];
            if (gm->ring[i] == 0 || gm->ring[i] > NNODE ||
                ring_index(mg, gm->ring[i]) != (int)i)
                abort(); /* a ring of unknown or repeated nodes */
        }
        double sum = 0;
        uint8_t seen[NNODE] = {0};
        for (size_t i = 0; i < gm->n_members; i++) {
            const Pr__V1__Member *mb = gm->members[i];
            struct wk *w = find(pre, gm->job, mb->rank);
            int old = w && w->queued && !w->grouped && w->seq == mb->seq &&
                      w->node == mb->node_id;
            /* This step's READY (queued again if it reused the seq). */
            int again = ready && ready->job == gm->job &&
                        ready->rank == mb->rank && ready->seq == mb->seq &&
                        ready->node == mb->node_id;
            if (!old && !again)
                abort(); /* grouped without a READY of that seq, or twice */
            if (ring_index(mg, mb->node_id) < 0 || !isfinite(mb->weight) ||
                mb->weight < 0 || mb->weight > 1)
                abort();
            for (size_t p = 0; p < i; p++)
                if (gm->members[p]->rank == mb->rank)
                    abort(); /* a worker twice in one group */
            struct wk *now = find(post, gm->job, mb->rank);
            if (now && now->queued && now->seq == mb->seq && !again)
                abort(); /* grouped, and still queued */
            if (old)
                w->grouped = 1; /* its READY is spent: once */
            else if ((*fresh)++)
                abort(); /* one READY, two groups */
            seen[mb->node_id - 1] = 1;
            sum += mb->weight;
        }
        for (uint32_t i = 0; i < mg->nring; i++)
            if (!seen[mg->ring[i] - 1])
                abort(); /* a ring node without a member */
        if (fabs(sum - 1) > 1e-9)
            abort();
        /* The same Group to each other ring node, to no other. */
        for (uint32_t i = 0; i < mg->nring; i++) {
            int k = (int)mg->ring[i] - 1;
            if (k == g->k || nodes[k].sock.fd < 0)
                continue;
            struct got *o = NULL;
            for (int x = 0; x < ngot && !o; x++)
                if (!got[x].used && got[x].k == k &&
                    got[x].m->body_case == PR__V1__MSG__BODY_GROUP &&
                    got[x].m->group->id == gm->id)
                    o = &got[x];
            if (!o || !alive(k) || !same(o->m->group, gm))
                abort();
            o->used = 1;
        }
        if (ring_index(mg, nodes[g->k].id) < 0)
            abort(); /* sent to a node outside its ring */
    }
}

/*
 * Every READY queued before the step ends in one way: still queued with
 * its seq, grouped (check_groups cleared it), refused (a Reject of its
 * seq to its node) or its worker gone.
 */
static void check_fates(struct snap *pre, struct snap *post)
{
    for (int i = 0; i < pre->n; i++) {
        struct wk *w = &pre->w[i];
        if (!w->queued || w->grouped)
            continue;
        struct wk *now = find(post, w->job, w->rank);
        if (now && now->queued && now->seq == w->seq)
            continue;
        struct got *r = NULL;
        for (int x = 0; x < ngot && !r; x++)
            if (!got[x].used && got[x].k == (int)w->node - 1 &&
                got[x].m->body_case == PR__V1__MSG__BODY_REJECT &&
                got[x].m->reject->job == w->job &&
                got[x].m->reject->rank == w->rank &&
                got[x].m->reject->seq == w->seq)
                r = &got[x];
        if (r)
            r->used = 1;
        else if (now)
            abort(); /* a READY lost: not grouped, refused, or left */
    }
}

/* Each node's count, each job's core, against the live workers. */
static void check_tables(struct snap *post)
{
    uint32_t count[NNODE] = {0};
    uint32_t njobs = 0;
    for (int i = 0; i < post->n; i++) {
        uint32_t id = post->w[i].node;
        if (id == 0 || id > NNODE || !alive((int)id - 1))
            abort(); /* a worker on a node that is gone */
        count[id - 1]++;
    }
    for (struct sched_job *j = sched->jobs; j; j = j->next) {
        uint32_t live = 0;
        for (int i = 0; i < post->n; i++)
            live += post->w[i].job == j->id;
        if (live == 0 || pr_sched_core_live(j->core) != live ||
            j->holders > live)
            abort();
        for (struct sched_job *o = j->next; o; o = o->next)
            if (o->id == j->id || !strcmp(o->name, j->name))
                abort();
        njobs++;
    }
    if (njobs != sched->njobs)
        abort();
    for (struct sched_node *n = sched->nodes; n; n = n->next) {
        if (n->id == 0)
            continue;
        if (n->id > NNODE || n->workers != count[n->id - 1] ||
            n->workers > MAX_WORKERS)
            abort();
    }
}

/*
 * Whether the step sent nothing but Groups: a dynamic window's timer may
 * close during any step (check_groups judges those).
 */
static int quiet(void)
{
    for (int i = 0; i < ngot; i++)
        if (got[i].m->body_case != PR__V1__MSG__BODY_GROUP)
            return 0;
    return 1;
}

/* What the scheduler must answer node k's message m, pre its tables. */
static void expect(int k, const Pr__V1__Msg *m, struct snap *pre,
                   struct snap *post, int fresh, int *closes)
{
    uint32_t me = nodes[k].id;
    switch (m->body_case) {
    case PR__V1__MSG__BODY_WORKER_JOIN: {
        const Pr__V1__WorkerJoin *wj = m->worker_join;
        struct got *g = take(k, PR__V1__MSG__BODY_WORKER_JOINED);
        if (!g || g->m->worker_joined->cookie != wj->cookie ||
            take(k, PR__V1__MSG__BODY_WORKER_JOINED))
            abort(); /* one answer, to its cookie */
        const Pr__V1__WorkerJoined *r = g->m->worker_joined;
        uint32_t mine = 0;
        for (int i = 0; i < pre->n; i++)
            mine += pre->w[i].node == me;
        if ((r->status == -EUSERS) != (mine >= MAX_WORKERS))
            abort(); /* the cap, and only the cap */
        if (r->status < 0)
            return;
        struct sched_job *j = pr_sched_job_by_id(sched, r->job);
        const struct wk *w = find(post, r->job, r->rank);
        const char *jn = wj->job && wj->job[0] ? wj->job : conf.job;
        const char *name = wj->name ? wj->name : "";
        if (r->status != 0 || !j || !w || w->node != me ||
            find(pre, r->job, r->rank) || strcmp(j->name, jn) != 0 ||
            strcmp(j->workers[r->rank].name, name) != 0)
            abort();
        return;
    }
    case PR__V1__MSG__BODY_WORKER_LEAVE: {
        const Pr__V1__WorkerLeave *l = m->worker_leave;
        struct wk *w = find(pre, job_id(pre, l->job), l->rank);
        if (w && w->node == me) {
            if (find(post, w->job, w->rank))
                abort(); /* its own worker stays */
            return;
        }
        /* Another node's worker, or none: nothing changes. */
        if (post->n != pre->n || !quiet())
            abort();
        return;
    }
    case PR__V1__MSG__BODY_READY: {
        const Pr__V1__Ready *r = m->ready;
        struct wk *w = find(pre, job_id(pre, r->job), r->rank);
        struct sched_job *j = w ? pr_sched_job_by_id(sched, w->job) : NULL;
        int code = 0;
        if (!w || w->node != me)
            code = -ENOENT;
        else if (r->nfloats == 0)
            code = -EINVAL;
        else if (w->queued && !w->grouped)
            code = -EALREADY;
        else if (r->tag != 0 && j && j->policy != PR_POLICY_ALLREDUCE)
            code = -EINVAL;
        struct got *g = NULL;
        for (int x = 0; x < ngot && !g; x++)
            if (!got[x].used && got[x].k == k &&
                got[x].m->body_case == PR__V1__MSG__BODY_REJECT &&
                got[x].m->reject->rank == r->rank &&
                got[x].m->reject->seq == r->seq &&
                got[x].m->reject->job == (code == -ENOENT ? r->job : w->job))
                g = &got[x];
        if (code && (!g || g->m->reject->status != code))
            abort(); /* the rules refuse it with their code */
        if (g) {
            g->used = 1;
            if (g->m->reject->status >= 0 || fresh)
                abort(); /* a code, and the READY refused stays out */
        } else if (!fresh) {
            /* Accepted and not grouped at once: queued. */
            struct wk *now = find(post, w->job, r->rank);
            if (!now || !now->queued || now->seq != r->seq)
                abort();
        }
        return;
    }
    case PR__V1__MSG__BODY_CANCEL: {
        const Pr__V1__Cancel *cl = m->cancel;
        struct wk *w = find(pre, job_id(pre, cl->job), cl->rank);
        /* A timer's group may have taken it first: then no answer. */
        if (w && w->node == me && w->queued && !w->grouped &&
            w->seq == cl->seq) {
            struct got *g = take(k, PR__V1__MSG__BODY_REJECT);
            if (!g || g->m->reject->status != -ETIMEDOUT ||
                g->m->reject->seq != cl->seq || g->m->reject->rank != cl->rank)
                abort();
            w->grouped = 1; /* its fate is this Reject */
        }
        return;
    }
    case PR__V1__MSG__BODY_GROUP_DONE: {
        const Pr__V1__GroupDone *d = m->group_done;
        for (int i = 0; i < ngroups; i++) {
            struct mgroup *g = &groups[i];
            int at = ring_index(g, me);
            if (g->id != d->id || !g->live || at < 0)
                continue;
            g->done[at] = 1;
            if (d->status < 0) {
                predict_aborts(g, me, d->status >= -4095 ? d->status : -EPROTO);
                return;
            }
            int all = 1;
            for (uint32_t x = 0; x < g->nring; x++)
                all &= g->done[x];
            g->live = !all;
            return;
        }
        /* Not its group, or one that ended: nothing at all. */
        if (post->n != pre->n || !quiet())
            abort();
        return;
    }
    case PR__V1__MSG__BODY_PING: {
        struct got *g = take(k, PR__V1__MSG__BODY_PONG);
        if (!g || g->m->pong->nonce != m->ping->nonce)
            abort();
        return;
    }
    case PR__V1__MSG__BODY_PONG:
        return;
    default:
        *closes = 1;
        return;
    }
}

#endif
