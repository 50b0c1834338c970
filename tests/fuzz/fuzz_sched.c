/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: what node daemons send the scheduler once past their
 * hello, as its node connection hands each frame to its dispatch
 * (node_on_msg, daemon/sched/sched.c; jobs in sched_job.c, workers and
 * groups in sched_work.c, decisions in core/). The scheduler is a real
 * one (pr_sched_create) on a private loop, on 127.0.0.1 at a port of its
 * choosing, with no cluster key, scheduler.max_workers_per_node = 3,
 * every job setting allowed (so that jobs run any policy) and heartbeats
 * too slow to fire within an input. Three nodes connect over TCP, answer
 * its Challenge and are welcomed as nodes 1, 2 and 3; then each step of
 * the input is a byte and its arguments (fuzz_take): a WorkerJoin,
 * WorkerLeave, Ready, Cancel, GroupDone, Ping or Pong from one node, its
 * fields near the ones that pass (its own workers, its groups, the seq
 * of a READY queued); any packed Msg as its bytes; a node hanging up, or
 * connecting again with its id. The loop runs after each step and every
 * node's end is read whole. Time runs too: a dynamic job's window may
 * close during any step, so a group may form in any step.
 *
 * It aborts when the scheduler breaks its rules: a WorkerJoin not
 * answered once, to its cookie, with a worker then live on that node in
 * that job, or taken past max_workers_per_node (or refused -EUSERS
 * below it); a Ready of another node's worker, of no floats, already
 * queued, or tagged outside allreduce, not refused with its code, or
 * any Ready answered twice; a Cancel of a queued READY not refused
 * -ETIMEDOUT, or one of none answered; a Ping without one Pong of its
 * nonce; a body no node sends, or garbage, that leaves the connection
 * open, or a close for anything else. Every Group must go to exactly its
 * ring, the ring being its members' nodes once each, with an id above
 * every one before it; each member a worker of that job on that node
 * whose READY of that seq was queued (or came in this step), taken once:
 * a worker is grouped again only after its node said READY again; its
 * weights sum to 1. Every READY queued ends in one way: grouped, refused
 * (withdrawn), or its worker gone. A GroupDone of a group the node is not
 * in (or that ended) changes nothing and sends nothing; a member's
 * failure sends GroupAbort to exactly the other ring nodes not done and
 * ends the group; a node lost sends GroupAbort -ECONNRESET for each of
 * its groups to the others, its workers leave, and the nodes left get
 * the new PeerList. After each step each node's worker count must be its
 * live workers (at most 3), each job's core must count its live workers,
 * a job without one must have ended, and no worker may stay on a node
 * that is gone. At the end the nodes hang up; the scheduler must then
 * hold no node, job or group, and close its loop.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/sched/sched_int.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NNODE       3
#define MAX_WORKERS 3 /* scheduler.max_workers_per_node */
#define MAX_STEPS   64
#define MAX_GROUPS  (2 * MAX_STEPS)
#define MAX_GOT     512
/* Live workers at most: every node at its cap. */
#define MAX_LIVE (NNODE * MAX_WORKERS)

/* A node daemon as the harness plays it. */
struct fnode {
    int fd; /* -1: not connected */
    uint32_t id;
    int gen;
    struct pr_frame_reader rd;
    int eof;
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

static struct pr_conf conf;
static struct pr_sched *sched;
static struct fnode nodes[NNODE];
static uint16_t port;
static struct mgroup groups[MAX_GROUPS];
static int ngroups;
static uint64_t last_group_id;
static struct got got[MAX_GOT];
static int ngot;

static void settle(uv_loop_t *loop)
{
    for (int i = 0; i < 4; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

static int alive(int k)
{
    return nodes[k].fd >= 0 && nodes[k].id != 0;
}

static void send_bytes(struct fnode *f, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t w = send(f->fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            abort(); /* closed unseen by the harness */
        p += w;
        len -= (size_t)w;
    }
}

static void send_msg(struct fnode *f, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    if (pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len) < 0)
        abort();
    send_bytes(f, buf, len);
    free(buf);
}

/* Reads all the scheduler sent node k into got[]. */
static void drain(int k)
{
    struct fnode *f = &nodes[k];
    while (f->fd >= 0 && !f->eof) {
        void *p;
        size_t cap;
        if (pr_frame_reader_reserve(&f->rd, 65536, &p, &cap) < 0)
            abort();
        ssize_t r = recv(f->fd, p, cap, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (r < 0 && errno != ECONNRESET)
            abort();
        if (r <= 0) {
            f->eof = 1;
            if (pr_frame_reader_pending(&f->rd) != 0)
                abort(); /* a frame cut short */
            break;
        }
        pr_frame_reader_commit(&f->rd, (size_t)r);
        struct pr_frame_hdr h;
        const uint8_t *payload;
        int rc;
        while ((rc = pr_frame_reader_next(&f->rd, &h, &payload)) == 1) {
            Pr__V1__Msg *m =
                h.type == PR_FRAME_MSG ? pr_msg_unpack(payload, h.len) : NULL;
            if (!m || ngot == MAX_GOT)
                abort();
            got[ngot++] = (struct got){.k = k, .m = m};
        }
        if (rc < 0)
            abort();
    }
}

static void drain_all(void)
{
    for (int k = 0; k < NNODE; k++)
        drain(k);
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

/* Our end of node k goes, with a reset (no TIME_WAIT on either side). */
static void node_close(int k)
{
    struct fnode *f = &nodes[k];
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(f->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(f->fd);
    f->fd = -1;
    f->id = 0;
    pr_frame_reader_fini(&f->rd);
}

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

/*
 * Connects fd, non-blocking, and waits for it: a blocking connect()
 * interrupted by libFuzzer's timer signal fails with EINTR while the
 * handshake goes on.
 */
static int connect_wait(int fd, const struct sockaddr_in *sa)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EINTR)
        return -1;
    while (poll(&p, 1, 10000) < 0)
        if (errno != EINTR)
            return -1;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0)
        return -1;
    return 0;
}

/* Node k (index) connects, is challenged, says hello and is welcomed. */
static void node_connect(uv_loop_t *loop, int k)
{
    struct fnode *f = &nodes[k];
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    f->gen++;
    f->eof = 0;
    f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (f->fd < 0 || connect_wait(f->fd, &sa) < 0 ||
        setsockopt(f->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        pr_frame_reader_init(&f->rd, PR_CTRL_MAX_FRAME) < 0)
        abort();
    settle(loop);
    drain(k);
    if (!take(k, PR__V1__MSG__BODY_CHALLENGE))
        abort();
    char name[16], addr[32];
    snprintf(name, sizeof(name), "n%d", k);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", 7001 + k);
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.name = name;
    h.data_addr = addr;
    h.prev_node_id = (uint32_t)k + 1;
    h.heartbeat_ms = conf.sched_heartbeat_ms;
    h.node_timeout_ms = conf.sched_node_timeout_ms;
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &h);
    send_msg(f, &m);
    settle(loop);
    drain_all();
    struct got *w = take(k, PR__V1__MSG__BODY_WELCOME);
    /* Its id back; its peers were told to drop it if it was lost before. */
    if (!w || w->m->welcome->id != (uint32_t)k + 1 ||
        w->m->welcome->peers_dropped != (f->gen > 0))
        abort();
    f->id = (uint32_t)k + 1;
    check_peer_lists();
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
            if (k == g->k || nodes[k].fd < 0)
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

static const char *const names[8] = {"w0", "w1", "w2", "w3",
                                     "w4", "",   "w6", "w7"};
static const char *const jobs[4] = {"", "a", "b", "default"};
static const char *const settings[6][3] = {
    {NULL},
    {"policy=constant", "group_size=2", NULL},
    {"policy=allreduce", NULL},
    {"policy=dynamic", "group_max=2", NULL},
    {"policy=constant", "group_size=3", "weighting=staleness"},
    {"policy=nope", NULL},
};

/* A worker of node k in `pre`, by v (or none): the fields most steps use. */
static const struct wk *own(const struct snap *pre, int k, uint32_t v)
{
    const struct wk *mine[MAX_LIVE];
    int n = 0;
    for (int i = 0; i < pre->n; i++)
        if (pre->w[i].node == nodes[k].id)
            mine[n++] = &pre->w[i];
    return n ? mine[v % (uint32_t)n] : NULL;
}

/*
 * Builds node k's message for step `op` into m (its bodies in b), near
 * valid fields from pre and the input. Returns 0, or -1 for no message.
 */
union body {
    Pr__V1__WorkerJoin join;
    Pr__V1__WorkerLeave leave;
    Pr__V1__Ready ready;
    Pr__V1__Cancel cancel;
    Pr__V1__GroupDone done;
    Pr__V1__Ping ping;
};

static void build(uint32_t kind, int k, struct fuzz_cursor *c,
                  const struct snap *pre, union body *b, Pr__V1__Msg *m,
                  Pr__V1__LinkRate *rates, Pr__V1__LinkRate **rp)
{
    static uint32_t cookie;
    static uint64_t seq;
    uint32_t v = fuzz_take(c, 1);
    const struct wk *w = v < 0xc0 ? own(pre, k, v) : NULL;
    uint32_t job = w ? w->job : v & 3, rank = w ? w->rank : (v >> 2) % 10;
    if (kind < 5) {
        uint32_t s = fuzz_take(c, 1);
        pr__v1__worker_join__init(&b->join);
        b->join.cookie = ++cookie;
        b->join.name = (char *)names[v % 8];
        b->join.job = (char *)jobs[(v >> 3) % 4];
        b->join.settings = (char **)settings[s % 6];
        while (b->join.n_settings < 3 && b->join.settings[b->join.n_settings])
            b->join.n_settings++;
        b->join.prev_rank_plus1 = (s >> 3) % 4;
        *m = PR_MSG_OF(WORKER_JOIN, worker_join, &b->join);
    } else if (kind < 7) {
        pr__v1__worker_leave__init(&b->leave);
        b->leave.job = job;
        b->leave.rank = rank;
        *m = PR_MSG_OF(WORKER_LEAVE, worker_leave, &b->leave);
    } else if (kind < 15 || kind >= 27) {
        static const uint64_t floats[4] = {1000, 1000, 2000, 0};
        uint32_t f = fuzz_take(c, 1);
        pr__v1__ready__init(&b->ready);
        b->ready.job = job;
        b->ready.rank = rank;
        b->ready.seq = f & 128 && w && w->queued ? w->seq : ++seq;
        b->ready.nfloats = floats[f % 4];
        b->ready.tag = f & 4 ? 1 : 0;
        b->ready.heal = (f & 8) != 0;
        b->ready.version = (f >> 4) & 7;
        *m = PR_MSG_OF(READY, ready, &b->ready);
    } else if (kind < 17) {
        pr__v1__cancel__init(&b->cancel);
        b->cancel.job = job;
        b->cancel.rank = rank;
        b->cancel.seq = w && w->queued && !(v & 1) ? w->seq : v;
        *m = PR_MSG_OF(CANCEL, cancel, &b->cancel);
    } else if (kind < 21) {
        static const int codes[6] = {0,          0,         -ECONNRESET,
                                     -ETIMEDOUT, INT32_MIN, -5000};
        uint32_t s = fuzz_take(c, 1);
        pr__v1__group_done__init(&b->done);
        /* A group it is in (most often), any group, or none. */
        const struct mgroup *g = NULL;
        for (int i = ngroups - 1; i >= 0 && !g && s < 0xc0; i--)
            if (ring_index(&groups[i], nodes[k].id) >= 0 &&
                (groups[i].live || s & 1))
                g = &groups[i];
        if (!g && ngroups && s < 0xf0)
            g = &groups[(s >> 1) % (uint32_t)ngroups];
        b->done.id = g ? g->id : s;
        b->done.status = codes[v % 6];
        *m = PR_MSG_OF(GROUP_DONE, group_done, &b->done);
    } else {
        pr__v1__ping__init(&b->ping);
        b->ping.nonce = fuzz_take(c, 4);
        b->ping.n_rates = v % 4;
        for (size_t i = 0; i < b->ping.n_rates; i++) {
            pr__v1__link_rate__init(&rates[i]);
            rates[i].node = fuzz_take(c, 1) % 5;
            rates[i].bytes_per_s = fuzz_take(c, 4);
            rates[i].age_ms = v & 64 ? UINT64_MAX - fuzz_take(c, 1) : 0;
            rp[i] = &rates[i];
        }
        b->ping.rates = rp;
        *m = kind == 21 ? PR_MSG_OF(PING, ping, &b->ping)
                        : PR_MSG_OF(PONG, pong, &b->ping);
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

/*
 * One step: node k's message (built, or the input's bytes), a hang-up or
 * a new connection; then every answer checked.
 */
static void step(uv_loop_t *loop, struct fuzz_cursor *c)
{
    uint32_t op = fuzz_take(c, 1);
    int k = (int)((op >> 5) % NNODE);
    uint32_t kind = op & 31;
    struct snap pre, post;
    snap(&pre);
    if (kind == 25 || kind == 26) {
        if ((kind == 25) != alive(k))
            return;
        uint32_t id = nodes[k].id;
        if (kind == 26) {
            node_connect(loop, k);
        } else {
            node_close(k);
            settle(loop);
        }
        drain_all();
        snap(&post);
        check_peer_lists();
        check_groups(&pre, NULL, &post, &(int){0});
        if (kind == 25)
            node_lost(id);
        check_aborts();
        check_fates(&pre, &post);
        got_clear();
        check_tables(&post);
        return;
    }
    if (!alive(k))
        return;
    union body b;
    Pr__V1__Msg m, *raw = NULL;
    Pr__V1__LinkRate rates[4], *rp[4];
    int is_raw = kind == 23 || kind == 24;
    if (is_raw) {
        size_t len = fuzz_take(c, 1);
        if (len > c->n)
            len = c->n;
        uint8_t *frame = malloc(PR_FRAME_HDR_LEN + len + 1);
        if (!frame)
            abort();
        pr_frame_hdr_encode(frame, (uint32_t)len, PR_FRAME_MSG, 0);
        memcpy(frame + PR_FRAME_HDR_LEN, c->p, len);
        c->p += len;
        c->n -= len;
        raw = pr_msg_unpack(frame + PR_FRAME_HDR_LEN, len);
        send_bytes(&nodes[k], frame, PR_FRAME_HDR_LEN + len);
        free(frame);
    } else {
        build(kind, k, c, &pre, &b, &m, rates, rp);
        send_msg(&nodes[k], &m);
    }
    settle(loop);
    drain_all();
    snap(&post);
    const Pr__V1__Msg *sent = is_raw ? raw : &m;
    /* This step's READY as a Group would name its worker. */
    struct wk ready = {0}, *rd = NULL;
    if (sent && sent->body_case == PR__V1__MSG__BODY_READY) {
        ready.job = job_id(&pre, sent->ready->job);
        ready.rank = sent->ready->rank;
        ready.node = nodes[k].id;
        ready.seq = sent->ready->seq;
        rd = &ready;
    }
    int closes = is_raw && !raw, fresh = 0;
    uint32_t id = nodes[k].id;
    /* First the Groups: a timer may have formed one before the message. */
    check_groups(&pre, rd, &post, &fresh);
    if (!closes)
        expect(k, sent, &pre, &post, fresh, &closes);
    if (closes) {
        if (!nodes[k].eof)
            abort(); /* a body no node sends, and the link stays */
        node_close(k);
        node_lost(id);
    }
    for (int i = 0; i < NNODE; i++)
        if (nodes[i].fd >= 0 && nodes[i].eof)
            abort(); /* closed for no reason */
    check_peer_lists();
    check_aborts();
    check_fates(&pre, &post);
    got_clear();
    check_tables(&post);
    if (raw)
        pr_msg_free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        fuzz_sched_conf(&conf);
        /* As preduced does: a node gone mid-write is an error, no signal. */
        signal(SIGPIPE, SIG_IGN);
        if (pr_conf_set(&conf, "scheduler.listen=127.0.0.1:0", NULL) < 0 ||
            pr_conf_set(&conf, "scheduler.max_workers_per_node=3", NULL) < 0 ||
            pr_conf_set(&conf, "scheduler.heartbeat_ms=600000", NULL) < 0 ||
            pr_conf_set(&conf, "scheduler.node_timeout_ms=3600000", NULL) < 0)
            abort();
        ready = 1;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    if (pr_sched_create(&loop, &conf, NULL, &sched) < 0)
        abort();
    port = pr_sched_port(sched);
    ngroups = 0;
    last_group_id = 0;
    nwants = 0;
    for (int k = 0; k < NNODE; k++) {
        nodes[k].fd = -1;
        nodes[k].id = 0;
        nodes[k].gen = -1;
    }
    for (int k = 0; k < NNODE; k++)
        node_connect(&loop, k);
    got_clear();
    struct fuzz_cursor c = {data, size};
    for (int n = 0; n < MAX_STEPS && c.n > 0; n++)
        step(&loop, &c);
    /* Every node hangs up: nothing of theirs may stay. */
    for (int k = 0; k < NNODE; k++)
        if (nodes[k].fd >= 0)
            node_close(k);
    for (int i = 0; i < 100 && sched->nodes; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    if (sched->nodes || sched->jobs || sched->njobs || sched->groups ||
        pr_sched_live_workers(sched) != 0)
        abort();
    pr_sched_destroy(sched);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        abort();
    return 0;
}
