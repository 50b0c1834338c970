/* SPDX-License-Identifier: MIT */
/*
 * The groups the scheduler sends, on this node: each Group's local members
 * are matched to their trainers' waiting reduces (node_ipc.c), the engine
 * runs the node's part, and when it calls back every local trainer gets its
 * ReduceDone and the scheduler the node's GroupDone. A group that cannot
 * run is refused: the members matched fail (their READY is spent) and the
 * scheduler hears at once.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/node/node_int.h"

/* A member of a group that is on this node: its trainer and its terms. */
struct group_local {
    struct node_trainer *trainer;
    uint32_t rank; /* the rank this group knows it by (the engine's too) */
    double weight;
};

/*
 * This node's part of one group, kept until the engine calls back. The
 * whole group's ranks, versions and weights stay three arrays because
 * they go into every local member's ReduceDone as they are (its repeated
 * fields); they share one allocation, `whole`.
 */
struct node_group {
    struct node_group *next;
    struct node_sched *s; /* the scheduler that sent it */
    uint64_t id;
    uint64_t max_version;
    size_t nlocal;
    struct group_local *local; /* nlocal of at most k */
    size_t k;
    void *whole;        /* versions, weights, ranks: k each */
    uint64_t *versions; /* in whole */
    double *weights;    /* in whole */
    uint32_t *ranks;    /* in whole */
    uint32_t wire;      /* what the floats travel in, enum pr_wire */
};

static void group_free(struct node_group *g)
{
    free(g->local);
    free(g->whole);
    free(g);
}

static void send_group_done(struct node_sched *s, uint64_t id, int status)
{
    Pr__V1__GroupDone d = PR__V1__GROUP_DONE__INIT;
    d.id = id;
    d.status = status;
    Pr__V1__Msg m = PR_MSG_OF(GROUP_DONE, group_done, &d);
    if (pr_node_sched_up(s))
        pr_node_send(s, &m);
}

/* The engine finished (or failed) this node's part: answer the trainers. */
static void group_done_cb(void *arg, uint64_t id, int status)
{
    struct node_group *g = arg;
    struct node_sched *s = g->s;
    struct node_group **pp = &s->groups;
    while (*pp && *pp != g)
        pp = &(*pp)->next;
    if (*pp)
        *pp = g->next;
    if (status < 0)
        pr_warn("group %llu failed: %s", (unsigned long long)id,
                strerror(-status));
    for (size_t i = 0; i < g->nlocal; i++) {
        struct node_trainer *c = g->local[i].trainer;
        Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
        d.seq = c->seq;
        d.status = status;
        d.group_id = id;
        d.n_members = g->k;
        d.members = g->ranks;
        d.weight = g->local[i].weight;
        d.version = status == 0 ? g->max_version : c->version;
        d.n_member_versions = g->k;
        d.member_versions = g->versions;
        d.n_member_weights = g->k;
        d.member_weights = g->weights;
        d.rank = g->local[i].rank;
        d.wire = status == 0 ? g->wire + 1 : 0;
        pr_node_reduce_reply(c, &d);
    }
    if (!s->n->stopping)
        send_group_done(s, id, status);
    group_free(g);
}

/* Fails the local members found so far and tells the scheduler. */
static void group_refuse(struct node_sched *s, uint64_t id,
                         const struct group_local *found, size_t nfound,
                         int status, const char *why)
{
    pr_warn("group %llu refused: %s", (unsigned long long)id, why);
    for (size_t i = 0; i < nfound; i++)
        pr_node_reduce_fail(found[i].trainer, status);
    send_group_done(s, id, status);
}

/*
 * How long the engine may run this group, in ms: the scheduler's group
 * timeout, but never past a local member's reduce deadline plus
 * PR_NODE_GRACE_MS. The engine writes no result into a member's tensors
 * after that (engine.c finish, engine_rx.c pr_engine_apply_chunk), and
 * its trainer has its answer by then, well before its library gives up: a
 * trainer told that its reduce failed, or that gave up on it, finds its
 * tensors untouched. A member already past it gets 0: the group fails
 * without writing.
 */
static uint32_t group_deadline(struct pr_node *n, const Pr__V1__Group *gm,
                               const struct node_group *g)
{
    uint64_t now = uv_hrtime();
    uint64_t limit =
        gm->timeout_ms ? gm->timeout_ms : n->conf->node_reduce_timeout_ms;
    for (size_t i = 0; i < g->nlocal; i++) {
        /* Nobody waits for a detached member's answer: no deadline. */
        if (!g->local[i].trainer->conn)
            continue;
        uint64_t end = g->local[i].trainer->reduce_deadline_ns +
                       (uint64_t)PR_NODE_GRACE_MS * 1000000;
        /* Rounded down: never a millisecond past the end. */
        uint64_t left = end > now ? (end - now) / 1000000 : 0;
        if (left < limit)
            limit = left;
    }
    return (uint32_t)limit;
}

/* This node's position in the group's ring, or UINT32_MAX if not in it. */
static uint32_t ring_pos(const Pr__V1__Group *gm, uint32_t self)
{
    uint32_t pos = UINT32_MAX;
    for (size_t i = 0; i < gm->n_ring; i++)
        if (gm->ring[i] == self)
            pos = (uint32_t)i;
    return pos;
}

/*
 * A group with room for every member to be local and a copy of the whole
 * group's terms (the trainers' results need them after the Group message
 * is gone), or NULL when out of memory. Versions and weights come first in
 * `whole`, so that each array is aligned for its type.
 */
static struct node_group *group_alloc(struct node_sched *s,
                                      const Pr__V1__Group *gm)
{
    size_t k = gm->n_members;
    size_t slots = k ? k : 1;
    struct node_group *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->local = calloc(slots, sizeof(*g->local));
    g->whole =
        calloc(slots, sizeof(uint64_t) + sizeof(double) + sizeof(uint32_t));
    if (!g->local || !g->whole) {
        group_free(g);
        return NULL;
    }
    g->versions = g->whole;
    g->weights = (double *)(g->versions + slots);
    g->ranks = (uint32_t *)(g->weights + slots);
    g->s = s;
    g->id = gm->id;
    g->k = k;
    g->max_version = gm->max_version;
    /* Alone on this node, nothing travels: exact (the engine's rule). */
    g->wire = gm->n_ring > 1 ? gm->wire : PR_WIRE_FP32;
    for (size_t i = 0; i < k; i++) {
        g->ranks[i] = gm->members[i]->rank;
        g->versions[i] = gm->members[i]->version;
        g->weights[i] = gm->members[i]->weight;
    }
    return g;
}

/*
 * Collects the group's members on this node into g->local. Every one must
 * have this very reduce waiting, once; a member that does not is left out
 * and makes the group fail (*why, *status). One whose tensors differ in
 * length makes it fail too, but is kept: its READY was used up by this
 * group all the same, so the refusal must fail it as well.
 */
static void group_match_local(struct node_sched *s, const Pr__V1__Group *gm,
                              struct node_group *g, const char **why,
                              int *status)
{
    for (size_t i = 0; i < g->k; i++) {
        const Pr__V1__Member *mb = gm->members[i];
        if (mb->node_id != s->self)
            continue;
        struct node_trainer *c = pr_node_trainer_by_rank(s, gm->job, mb->rank);
        int dup = 0;
        for (size_t j = 0; c && j < g->nlocal; j++)
            dup |= g->local[j].trainer == c;
        if (!c || dup || c->seq != mb->seq ||
            (c->rstate != R_QUEUED && c->rstate != R_CANCELLING)) {
            *why = dup ? "a member appears twice"
                       : "a local member has no reduce waiting";
            *status = -ESRCH;
            continue;
        }
        size_t total = 0;
        for (size_t p = 0; p < c->nparts; p++)
            total += c->parts[p].len;
        if (total != gm->nfloats) {
            *why = "a local member's tensors differ in length from the group";
            *status = -EINVAL;
        }
        g->local[g->nlocal++] = (struct group_local){
            .trainer = c, .rank = mb->rank, .weight = mb->weight};
    }
}

/* 1 if some member of the whole group weighs other than 1/k. */
static int group_weighted(const Pr__V1__Group *gm)
{
    double u = 1.0 / (double)(gm->n_members ? gm->n_members : 1);
    for (size_t i = 0; i < gm->n_members; i++)
        if (fabs(gm->members[i]->weight - u) > 1e-12)
            return 1;
    return 0;
}

/*
 * Hands the group to the engine: 0, or pr_engine_start's error. The
 * engine copies its members, so their array lives only here.
 */
static int group_start(struct node_sched *s, const Pr__V1__Group *gm,
                       struct node_group *g, uint32_t pos)
{
    struct pr_engine_member *em = calloc(g->nlocal, sizeof(*em));
    if (!em)
        return -ENOMEM;
    for (size_t i = 0; i < g->nlocal; i++) {
        const struct node_trainer *c = g->local[i].trainer;
        /*
         * A trainer that hung up while its reduce was queued (R_CANCELLING,
         * no connection) was told it failed: its tensors must keep their
         * inputs, whatever the group does with its floats.
         */
        em[i] = (struct pr_engine_member){.rank = g->local[i].rank,
                                          .weight = g->local[i].weight,
                                          .parts = c->parts,
                                          .nparts = c->nparts,
                                          .in_place = c->in_place,
                                          .detached = !c->conn,
                                          .err = c->err};
    }
    struct pr_engine_group spec = {
        .id = gm->id,
        .total = gm->nfloats,
        .k = (uint32_t)g->k,
        .personal = gm->personal,
        .weighted = group_weighted(gm),
        .m = (uint32_t)gm->n_ring,
        .pos = pos,
        .ring = gm->ring,
        .local = em,
        .nlocal = g->nlocal,
        .timeout_ms = group_deadline(s->n, gm, g),
        .wire = gm->wire,
        .done = group_done_cb,
        .arg = g,
    };
    int rc = pr_engine_start(s->engine, &spec);
    free(em);
    return rc;
}

void pr_node_on_group(struct node_sched *s, const Pr__V1__Group *gm)
{
    if (gm->id > s->max_group_id)
        s->max_group_id = gm->id;
    uint32_t pos = ring_pos(gm, s->self);
    pr_node_spin(s->n);
    struct node_group *g = group_alloc(s, gm);
    if (!g) {
        group_refuse(s, gm->id, NULL, 0, -ENOMEM, "out of memory");
        return;
    }
    const char *why = NULL;
    int status = -EPROTO;
    if (g->k == 0 || pos == UINT32_MAX || gm->nfloats == 0)
        why = "malformed group (no members, or this node not in the ring)";
    else if (gm->wire >= PR_WIRE_COUNT)
        why = "malformed group (an encoding this node does not know)";
    if (pos != UINT32_MAX)
        group_match_local(s, gm, g, &why, &status);
    if (!why && g->nlocal == 0)
        why = "no member of the group is on this node";
    /*
     * The scheduler gives the most precise encoding its members asked
     * for: one less precise than a trainer here asked for is its error.
     */
    for (size_t i = 0; !why && i < g->nlocal; i++)
        if (gm->wire > g->local[i].trainer->wire)
            why = "malformed group (less precise than a member asked for)";
    if (why) {
        group_refuse(s, gm->id, g->local, g->nlocal, status, why);
        group_free(g);
        return;
    }
    int rc = group_start(s, gm, g, pos);
    if (rc < 0) {
        /*
         * The spec was checked above: what is left is no link to a
         * neighbour (yet), a group id running already, or no memory.
         */
        group_refuse(s, gm->id, g->local, g->nlocal,
                     rc == -ENOMEM ? rc : -ECONNRESET,
                     "the engine could not start it");
        group_free(g);
        return;
    }
    for (size_t i = 0; i < g->nlocal; i++) {
        pr_node_set_rstate(g->local[i].trainer, R_GROUPED);
        g->local[i].trainer->group_id = gm->id;
        g->local[i].trainer->group_rank = g->local[i].rank;
    }
    g->next = s->groups;
    s->groups = g;
}

void pr_node_groups_fail(struct node_sched *s, int status)
{
    /* pr_engine_abort() runs group_done_cb later: the list stays as is. */
    for (struct node_group *g = s->groups; g; g = g->next)
        pr_engine_abort(s->engine, g->id, status);
}
