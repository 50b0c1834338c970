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
#include "tests/fuzz/fuzz_sched.h"

#include <errno.h>
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
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint16_t port;

/* Keeps a Msg the scheduler sent node *arg for the step's checks. */
static void keep(Pr__V1__Msg *m, void *arg)
{
    if (ngot == MAX_GOT)
        abort();
    got[ngot++] = (struct got){.k = *(int *)arg, .m = m};
}

/* Reads all the scheduler sent node k into got[]. */
static void drain(int k)
{
    fuzz_sock_drain(&nodes[k].sock, NULL, keep, &k);
}

static void drain_all(void)
{
    for (int k = 0; k < NNODE; k++)
        drain(k);
}

/* Our end of node k goes, with a reset (no TIME_WAIT on either side). */
static void node_close(int k)
{
    struct fnode *f = &nodes[k];
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(f->sock.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    fuzz_sock_close(&f->sock);
    f->id = 0;
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
    f->sock.eof = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    f->sock.fd = fd;
    if (fd < 0 || connect_wait(fd, &sa) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        pr_frame_reader_init(&f->sock.rd, PR_CTRL_MAX_FRAME) < 0)
        abort();
    fuzz_settle(loop);
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
    fuzz_sock_send_msg(&f->sock, &m);
    fuzz_settle(loop);
    drain_all();
    struct got *w = take(k, PR__V1__MSG__BODY_WELCOME);
    /* Its id back; its peers were told to drop it if it was lost before. */
    if (!w || w->m->welcome->id != (uint32_t)k + 1 ||
        w->m->welcome->peers_dropped != (f->gen > 0))
        abort();
    f->id = (uint32_t)k + 1;
    check_peer_lists();
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
            fuzz_settle(loop);
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
        size_t len;
        uint8_t *frame = fuzz_raw_frame(c, &len, &raw);
        fuzz_sock_send_bytes(&nodes[k].sock, frame, len);
        free(frame);
    } else {
        build(kind, k, c, &pre, &b, &m, rates, rp);
        fuzz_sock_send_msg(&nodes[k].sock, &m);
    }
    fuzz_settle(loop);
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
        if (!nodes[k].sock.eof)
            abort(); /* a body no node sends, and the link stays */
        node_close(k);
        node_lost(id);
    }
    for (int i = 0; i < NNODE; i++)
        if (nodes[i].sock.fd >= 0 && nodes[i].sock.eof)
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
        nodes[k].sock.fd = -1;
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
        if (nodes[k].sock.fd >= 0)
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
