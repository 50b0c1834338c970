/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a Group from the scheduler once it is unpacked, as
 * the node's control connection hands it to pr_node_on_group()
 * (daemon/node/node_group.c), the input being the packed Group. The node
 * is the least real one that can run a group (pr_node_create would bind
 * the peer port and the trainer socket and dial a scheduler for every
 * input): zeroed, as test_node_metrics.c builds it, its config the
 * defaults (busy polling off: no transport to poll), its engine on a
 * private loop with fake links to nodes 2 and 3 as in fuzz_engine.c, and
 * four trainers of job 7 as node_ipc.c leaves them after a Reduce:
 * ranks 0 and 1 connected with 16 floats queued (one part, and two),
 * rank 2 hung up with its reduce being cancelled, rank 3 with none;
 * rank 0 asked for int8 on the wire, rank 1 for bf16, the others fp32. A
 * connected trainer's end of its socket is read by a conn of ours, which
 * takes its ReduceDone. It aborts when the node accepts a group that
 * does not hold together (this node not in the ring, no members, a
 * local member without this very reduce queued, twice, or of another
 * length), when an accepted trainer is not marked as in the group, or
 * when a refusal leaves a matched trainer waiting, answers it with a
 * code other than the ones for a refusal, or touches one it did not
 * match, or a group of an encoding the node does not know or less precise
 * than a local member asked for, or when a ReduceDone does not say the
 * encoding its floats travelled in (success: the group's, fp32 when the
 * ring is this node alone) or says one (failure). A trainer sees a
 * refusal's -ESRCH and -EPROTO as -ECONNRESET
 * (pr_reduce_status); the refusal's reason goes to the log only
 * (ReduceDone.reason stays empty), so it is not checked here. Groups left
 * running are aborted; nothing may leak.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/engine/wire.h"
#include "daemon/node/node_int.h"
#include "tests/fuzz/fuzz_links.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SELF     1
#define JOB      7
#define NTRAINER 4
#define NPEER    2
#define NFLOATS  16

static struct fuzz_link links[NPEER];

static struct pr_link *resolve(void *ctx, uint32_t node)
{
    (void)ctx;
    return node >= 2 && node < 2 + NPEER ? &links[node - 2].base : NULL;
}

/* What each connected trainer's library heard: ReduceDone statuses. */
struct heard {
    int n;
    int status;
    uint32_t wire; /* ReduceDone.wire */
};

static struct heard heard[NTRAINER];

static int lib_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    struct heard *h = c->owner;
    if (m->body_case != PR__V1__MSG__BODY_REDUCE_DONE)
        abort(); /* the node says nothing else about a group */
    h->n++;
    h->status = m->reduce_done->status;
    h->wire = m->reduce_done->wire;
    return 0;
}

static void no_close(struct pr_conn *c, int status)
{
    (void)c;
    (void)status;
}

/* Both ends: the node's (its trainer's conn) and the library's. */
static const struct pr_conn_ops node_end = {.on_close = no_close};
static const struct pr_conn_ops lib_end = {.on_msg = lib_on_msg,
                                           .on_close = no_close};

static struct pr_conn *lib[NTRAINER];

static float tensors[NTRAINER][NFLOATS];

/* Trainer i as on_reduce() leaves it; 0, or -1 when out of resources. */
static int add_trainer(struct pr_node *n, uv_loop_t *loop, int i,
                       struct node_trainer **out)
{
    struct node_trainer *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->node = n;
    c->s = n->sched[0];
    c->s->users++;
    c->rank = i;
    c->prev_rank = -1;
    c->job_id = JOB;
    c->state = C_UP;
    c->seq = 5 + (uint64_t)i;
    c->reduce_deadline_ns = uv_hrtime() + 10ull * 1000 * 1000 * 1000;
    c->nparts = i == 1 ? 2 : 1;
    c->parts = calloc(c->nparts, sizeof(*c->parts));
    if (!c->parts) {
        free(c);
        return -1;
    }
    c->parts[0].data = tensors[i];
    c->parts[0].len = c->nparts == 2 ? 10 : NFLOATS;
    if (c->nparts == 2) {
        c->parts[1].data = tensors[i] + 10;
        c->parts[1].len = NFLOATS - 10;
    }
    c->in_place = i == 1;
    c->wire = i == 0 ? PR_WIRE_INT8 : i == 1 ? PR_WIRE_BF16 : PR_WIRE_FP32;
    c->next = n->trainers;
    n->trainers = c;
    n->ntrainers++;
    *out = c;
    if (i == 3)
        return 0; /* no reduce */
    pr_node_set_rstate(c, i == 2 ? R_CANCELLING : R_QUEUED);
    if (i == 2)
        return 0; /* hung up */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    c->conn = pr_conn_create_pipe(loop, PR_CTRL_MAX_FRAME, &node_end, c);
    lib[i] = pr_conn_create_pipe(loop, PR_CTRL_MAX_FRAME, &lib_end, &heard[i]);
    if (!c->conn || !lib[i] || uv_pipe_open(&c->conn->h.pipe, sv[0]) < 0 ||
        uv_pipe_open(&lib[i]->h.pipe, sv[1]) < 0 || pr_conn_start(lib[i]) < 0)
        abort();
    return 0;
}

static int listed(const struct pr_node *n, const struct node_trainer *c)
{
    for (const struct node_trainer *t = n->trainers; t; t = t->next)
        if (t == c)
            return 1;
    return 0;
}

/*
 * Whether member mb holds (1: this very reduce queued, its trainer not
 * matched by an earlier member; 0: it names none or does not hold), and
 * which trainer it matched: the rules of group_match_local, kept apart
 * from it. A member that did not hold matches nothing, so a later one
 * for the same trainer is no duplicate.
 */
static int member_ok(const Pr__V1__Group *gm, const Pr__V1__Member *mb,
                     struct node_trainer *const *t, const int *matched,
                     int *which)
{
    if (gm->job != JOB || mb->rank >= NTRAINER || matched[mb->rank])
        return 0;
    const struct node_trainer *c = t[mb->rank];
    if (c->seq != mb->seq ||
        (c->rstate != R_QUEUED && c->rstate != R_CANCELLING))
        return 0;
    *which = (int)mb->rank;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct pr_conf conf;
    static int ready;
    if (!ready) {
        pr_log_set_level(PR_LOG_ERROR);
        if (pr_conf_init(&conf) < 0)
            abort();
        conf.node_busy_poll_us = 0;
        ready = 1;
    }
    Pr__V1__Group *gm = pr__v1__group__unpack(NULL, size, data);
    if (!gm)
        return 0;
    uv_loop_t loop;
    uv_loop_init(&loop);
    for (int i = 0; i < NPEER; i++) {
        links[i].base.ops = &fuzz_link_ops;
        links[i].base.node_id = 2 + (uint32_t)i;
        links[i].base.kind = "fuzz";
        links[i].q = NULL;
    }
    struct pr_node n;
    struct node_sched ns;
    memset(&n, 0, sizeof(n));
    memset(&ns, 0, sizeof(ns));
    n.loop = &loop;
    n.conf = &conf;
    ns.n = &n;
    ns.self = SELF;
    ns.engine = pr_engine_create(&loop, 4, 64 * 1024, resolve, NULL);
    if (!ns.engine)
        abort();
    n.sched[0] = &ns;
    n.nsched = 1;
    pr_engine_set_direct(ns.engine, 1);
    struct node_trainer *t[NTRAINER];
    memset(heard, 0, sizeof(heard));
    memset(lib, 0, sizeof(lib));
    for (int i = 0; i < NTRAINER; i++)
        if (add_trainer(&n, &loop, i, &t[i]) < 0)
            abort();

    /* What the node must decide, worked out apart from it. */
    int holds =
            gm->n_members > 0 && gm->nfloats > 0 && gm->wire < PR_WIRE_COUNT,
        in_ring = 0, nlocal = 0;
    int matched[NTRAINER] = {0};
    for (size_t i = 0; i < gm->n_ring; i++)
        in_ring |= gm->ring[i] == SELF;
    holds &= in_ring;
    for (size_t i = 0; in_ring && i < gm->n_members; i++) {
        if (gm->members[i]->node_id != SELF)
            continue;
        int w;
        if (!member_ok(gm, gm->members[i], t, matched, &w)) {
            holds = 0;
            continue;
        }
        matched[w] = 1;
        nlocal++;
        holds &= gm->nfloats == NFLOATS && gm->wire <= t[w]->wire;
    }
    holds &= nlocal > 0;

    pr_node_on_group(&ns, gm);
    int accepted = ns.groups != NULL;
    if (accepted && !holds)
        abort(); /* a group that does not hold together started */
    for (int i = 0; i < NTRAINER; i++) {
        int here = listed(&n, t[i]);
        if (accepted && matched[i] &&
            (!here || t[i]->rstate != R_GROUPED || t[i]->group_id != gm->id))
            abort();
        if (!accepted && matched[i] && here && t[i]->rstate != R_NONE)
            abort(); /* a refusal must answer what it matched */
        if (!matched[i] && (!here || t[i]->rstate == R_GROUPED))
            abort(); /* nor touch what it did not */
    }
    for (int r = 0; r < 4; r++) {
        fuzz_links_complete(links, NPEER, 0);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    for (int i = 0; i < NTRAINER; i++) {
        if (!lib[i] || !matched[i] || accepted)
            continue;
        int s = heard[i].status;
        if (heard[i].n != 1 ||
            (s != -ECONNRESET && s != -EINVAL && s != -ENOMEM) ||
            (holds && s == -EINVAL))
            abort(); /* a refusal's codes: trainers see these three */
    }
    if (gm->id > ns.max_group_id)
        abort();
    pr_node_groups_fail(&ns, -ECANCELED);
    for (int r = 0; r < 2; r++) {
        fuzz_links_complete(links, NPEER, -ECANCELED);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    if (ns.groups)
        abort(); /* every group answered */
    /* A group on this node alone sends nothing: its results are exact. */
    uint32_t went = gm->n_ring > 1 ? gm->wire : PR_WIRE_FP32;
    for (int i = 0; i < NTRAINER; i++)
        if (lib[i] && heard[i].n == 1 &&
            heard[i].wire != (heard[i].status == 0 ? went + 1 : 0))
            abort(); /* a result says its encoding, a failure none */
    pr_engine_destroy(ns.engine);
    fuzz_links_complete(links, NPEER, -ECANCELED);
    int left[NTRAINER]; /* the node freed those that had hung up */
    for (int i = 0; i < NTRAINER; i++)
        left[i] = listed(&n, t[i]);
    for (int i = 0; i < NTRAINER; i++) {
        if (lib[i])
            pr_conn_close(lib[i], 0);
        if (!left[i])
            continue;
        if (t[i]->conn)
            pr_conn_close(t[i]->conn, 0);
        free(t[i]->parts);
        free(t[i]);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        abort();
    pr__v1__group__free_unpacked(gm, NULL);
    return 0;
}
