/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: what a trainer sends its node daemon once welcomed,
 * as the node's trainer connection hands each frame to its handler
 * (trainer_on_msg, daemon/node/node_ipc.c; tensors in node_tensor.c).
 * The node is the least real one that serves trainers: zeroed, as in
 * fuzz_group.c, listening on a socket file of its own
 * (pr_node_ipc_listen; node.trainer_max_tensors 4, node.trainer_max_mb
 * 2, node.max_tensors 6, node.max_tensor_mb 1), its scheduler link one
 * end of a socketpair read by a conn of ours, its engine on a private
 * loop with a queued link to node 2, which never sends. Two trainers
 * connect to the socket, say hello and are welcomed; then each step of
 * the input is a byte and its arguments (fuzz_take): a TensorCreate,
 * TensorDestroy or Reduce from one trainer, with fields near the ones
 * that pass; any packed Msg as its bytes; a trainer hanging up or
 * connecting again; or the scheduler's part: a tick, a Reject, a Group
 * of the trainers waiting, the groups aborted, the link lost and back
 * (the trainers joining again, or refused). The loop runs after each
 * step and each trainer's end is read whole, memfds with their frames.
 *
 * It aborts when the node breaks node_ipc.c's protocol: a request
 * answered twice, not at all or by another kind of frame; a
 * TensorCreate given a tensor that its size or a limit refuses, or an
 * Error (or another code) that they do not; a TensorCreated without its
 * memfd, or with one of another size, unsealed, or not the memory the
 * node holds as that id; an id given twice; a Reduce accepted that the
 * rules refuse, or refused that they accept or with another code, or
 * accepted without one READY of its rank, seq and floats; a ReduceDone
 * of a code proto/status.h does not list, or of no reduce in flight; a
 * connection closed that broke no rule, or left open that did. After
 * each step the node's tables must agree with what the trainers were
 * told: their live ids and sizes, tensors destroyed mid-reduce kept
 * until it ends and only then, a reduce in flight exactly when one was
 * accepted and not answered, no limit passed, the node's counts of
 * mapped tensors and reduces in flight right, no trainer kept that hung
 * up with nothing in flight. At the end the groups fail and the
 * scheduler is lost, which must answer every reduce still waiting; the
 * trainers hang up, and the node must free each, unmap every tensor
 * (no memfd left in /proc/self/maps) and leave its loop empty.
 */
#include "tests/fuzz/fuzz_trainer.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_links.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SELF      1
#define PEER      2 /* a neighbour that never sends: its groups wait */
#define JOB       7
#define MAX_STEPS 64

/* What the scheduler's end heard during a step. */
static struct {
    struct {
        uint32_t cookie, prev_plus1;
        char name[64];
    } joins[2 * NSLOT];
    int njoins;
    Pr__V1__Ready ready; /* rank, job, seq, nfloats */
    int nready;
} heard;

static struct fuzz_link links[1];
static char sock_dir[32];
static char sock_path[64];

static struct pr_link *resolve(void *ctx, uint32_t id)
{
    (void)ctx;
    return id == PEER ? &links[0].base : NULL;
}

static int sched_on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    (void)c;
    if (m->body_case == PR__V1__MSG__BODY_WORKER_JOIN) {
        if (heard.njoins == 2 * NSLOT)
            abort(); /* more joins than trainers */
        heard.joins[heard.njoins].cookie = m->worker_join->cookie;
        heard.joins[heard.njoins].prev_plus1 = m->worker_join->prev_rank_plus1;
        snprintf(heard.joins[heard.njoins++].name, 64, "%s",
                 m->worker_join->name);
    } else if (m->body_case == PR__V1__MSG__BODY_READY) {
        if (heard.nready++)
            abort(); /* a step accepts one reduce at most */
        heard.ready = *m->ready;
    } else if (m->body_case != PR__V1__MSG__BODY_CANCEL &&
               m->body_case != PR__V1__MSG__BODY_WORKER_LEAVE &&
               m->body_case != PR__V1__MSG__BODY_GROUP_DONE) {
        abort(); /* nothing else goes to the scheduler here */
    }
    return 0;
}

static void no_close(struct pr_conn *c, int status)
{
    (void)c;
    (void)status;
}

static const struct pr_conn_ops node_end = {.on_close = no_close};
static const struct pr_conn_ops sched_end = {.on_msg = sched_on_msg,
                                             .on_close = no_close};

/* What drain reads for: the slot, and what its step expects. */
struct reading {
    struct slot *s;
    struct expect *e;
};

/* recvmsg(), for drain: a memfd that comes with the bytes is queued. */
static ssize_t recv_fds(int fd, void *p, size_t cap, void *arg)
{
    struct slot *s = ((struct reading *)arg)->s;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = p, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    /* A read stops after a memfd: one at most, with its frame. */
    struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    if ((mh.msg_flags & MSG_CTRUNC) ||
        (cm && (cm->cmsg_type != SCM_RIGHTS || s->nfdq == 4)))
        abort();
    if (cm)
        memcpy(&s->fdq[s->nfdq++], CMSG_DATA(cm), sizeof(int));
    return r;
}

static void reply(Pr__V1__Msg *m, void *arg)
{
    struct reading *rd = arg;
    on_reply(rd->s, m, rd->e);
    pr_msg_free(m);
}

/* Reads all the node sent slot s, each frame to on_reply. */
static void drain(struct slot *s, struct expect *e)
{
    struct reading rd = {s, e};
    fuzz_sock_drain(&s->sock, recv_fds, reply, &rd);
    if (s->nfdq != 0)
        abort(); /* a memfd with no TensorCreated */
}

/* Our end of slot s goes (hung up by us, or closed by the node). */
static void slot_close(struct slot *s)
{
    fuzz_sock_close(&s->sock);
    s->welcomed = s->joined = s->inflight = 0;
    s->nheld = 0;
}

/* Answers the WorkerJoins heard, as the scheduler would, with status. */
static void serve_joins(int status)
{
    for (int i = 0; i < heard.njoins; i++) {
        struct node_trainer *c =
            pr_node_trainer_by_cookie(node, heard.joins[i].cookie);
        struct slot *s = NULL;
        for (int k = 0; k < NSLOT; k++)
            if (!strcmp(slots[k].name, heard.joins[i].name))
                s = &slots[k];
        /* A join again asks for the rank it had. */
        uint32_t prev = heard.joins[i].prev_plus1;
        if (!c || !s || (prev && prev - 1 != s->rank))
            abort();
        Pr__V1__WorkerJoined j = PR__V1__WORKER_JOINED__INIT;
        j.cookie = heard.joins[i].cookie;
        j.status = status;
        j.rank = s->rank;
        j.job = JOB;
        pr_node_trainer_joined(c, &j);
    }
    heard.njoins = 0;
}

/*
 * Each open slot read and held to its expectation; every READY heard
 * must be the one accepted reduce's.
 */
static void step_end(struct expect *e, const struct slot *accepted)
{
    for (int k = 0; k < NSLOT; k++) {
        struct slot *s = &slots[k];
        enum want w = e[k].what;
        if (s->sock.fd < 0)
            continue;
        drain(s, &e[k]);
        int closes = w == W_CLOSE || w == W_REFUSED;
        int answer = w == W_CREATE || w == W_WELCOME || w == W_REFUSED ||
                     (w == W_REDUCE && e[k].code != 0);
        if (s->sock.eof != closes || e[k].got != answer)
            abort(); /* closed for no reason, or unanswered */
        if (s->sock.eof)
            slot_close(s);
    }
    const Pr__V1__Ready *r = &heard.ready;
    if (heard.nready != (accepted != NULL) ||
        (accepted &&
         (r->rank != accepted->rank || r->job != JOB ||
          r->seq != accepted->seq || r->nfloats != accepted->total)))
        abort();
    if (heard.njoins)
        abort(); /* a join nobody asked for */
    heard.nready = 0;
}

/* Slot k connects as a fresh trainer and says hello. */
static void slot_connect(uv_loop_t *loop, int k, struct expect *e)
{
    struct slot *s = &slots[k];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    s->gen++;
    snprintf(s->name, sizeof(s->name), "fz%d.%d", k, s->gen);
    s->rank = (uint32_t)(k + NSLOT * s->gen);
    s->sock.eof = 0;
    s->max_id = 0;
    s->sock.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->sock.fd < 0 ||
        connect(s->sock.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        pr_frame_reader_init(&s->sock.rd, PR_CTRL_MAX_FRAME) < 0)
        abort();
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_CLIENT;
    h.name = s->name;
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &h);
    fuzz_sock_send_msg(&s->sock, &m);
    fuzz_settle(loop);
    serve_joins(0);
    fuzz_settle(loop);
    e[k].what = sched_up ? W_WELCOME : W_NONE;
}

/*
 * Sends m from slot s (`raw` instead, its bytes as they came, when
 * given; m then what they unpack to, or NULL) and sets what the node
 * must answer. Returns s if the node must accept its reduce.
 */
static struct slot *request(struct slot *s, const Pr__V1__Msg *m,
                            const uint8_t *raw, size_t raw_len,
                            struct expect *e)
{
    Pr__V1__Msg__BodyCase body = m ? m->body_case : 0;
    struct slot *accepted = NULL;
    if (!s->welcomed) {
        e->what = W_CLOSE;
    } else if (body == PR__V1__MSG__BODY_TENSOR_CREATE) {
        e->what = W_CREATE;
        e->nfloats = m->tensor_create->nfloats;
        e->code = create_code(s, e->nfloats);
    } else if (body == PR__V1__MSG__BODY_TENSOR_DESTROY) {
        uint32_t id = m->tensor_destroy->tensor_id;
        for (size_t i = 0; i < s->nheld; i++) {
            if (s->held[i].id != id || s->held[i].doomed)
                continue;
            if (busy(s, id))
                s->held[i].doomed = 1;
            else
                s->held[i] = s->held[--s->nheld];
            break;
        }
    } else if (body == PR__V1__MSG__BODY_REDUCE) {
        /* A seq of the reduce in flight would make its answers ambiguous. */
        if (s->inflight && m->reduce->seq == s->seq)
            return NULL;
        e->what = W_REDUCE;
        e->seq = m->reduce->seq;
        e->code = reduce_code(s, m->reduce);
        if (e->code == 0) {
            s->inflight = 1;
            s->seq = e->seq;
            accepted = s;
        }
    } else {
        e->what = W_CLOSE; /* garbage, or a body a trainer does not send */
    }
    if (raw)
        fuzz_sock_send_bytes(&s->sock, raw, raw_len);
    else
        fuzz_sock_send_msg(&s->sock, m);
    return accepted;
}

/* A frame of the input's bytes, as any packed Msg, from slot s. */
static struct slot *raw_request(struct slot *s, struct fuzz_cursor *c,
                                struct expect *e)
{
    size_t len;
    Pr__V1__Msg *m;
    uint8_t *frame = fuzz_raw_frame(c, &len, &m);
    struct slot *accepted = request(s, m, frame, len, e);
    if (m)
        pr_msg_free(m);
    free(frame);
    return accepted;
}

/*
 * A TensorCreate (kind 0-7), TensorDestroy (8-10) or Reduce (11-16,
 * 29-31) from slot s, its fields from the input: sizes from a table
 * around the limits, ids mostly of the trainer's tensors.
 */
static struct slot *build(uint32_t kind, struct slot *s, struct fuzz_cursor *c,
                          struct expect *e)
{
    static const uint64_t sizes[8] = {1,
                                      3,
                                      1000,
                                      65536,
                                      TENSOR_FLOATS,
                                      TENSOR_FLOATS + 1,
                                      0,
                                      2 * TENSOR_FLOATS};
    uint32_t v = fuzz_take(c, 1), ids[4];
    Pr__V1__TensorCreate tc = PR__V1__TENSOR_CREATE__INIT;
    Pr__V1__TensorDestroy td = PR__V1__TENSOR_DESTROY__INIT;
    Pr__V1__Reduce r = PR__V1__REDUCE__INIT;
    Pr__V1__Msg m;
    if (kind < 8) {
        tc.nfloats = v < 0xe0
                         ? sizes[v % 8]
                         : (uint64_t)fuzz_take(c, 4) << 32 | fuzz_take(c, 4);
        m = PR_MSG_OF(TENSOR_CREATE, tensor_create, &tc);
        return request(s, &m, NULL, 0, e);
    }
    if (kind < 11) {
        td.tensor_id = v < 0xc0 && s->nheld ? s->held[v % s->nheld].id : v & 15;
        m = PR_MSG_OF(TENSOR_DESTROY, tensor_destroy, &td);
        return request(s, &m, NULL, 0, e);
    }
    r.n_tensor_ids = v % 5;
    for (size_t i = 0; i < r.n_tensor_ids; i++) {
        v = fuzz_take(c, 1);
        ids[i] = v < 0xc0 && s->nheld ? s->held[v % s->nheld].id : v & 15;
    }
    r.tensor_ids = ids;
    v = fuzz_take(c, 1);
    r.seq = ++s->next_seq;
    r.in_place = v & 1;
    r.heal = (v & 2) != 0;
    r.tag = v & 4 ? 3 : 0;
    r.version = v >> 5;
    /* None; past (a tick cancels it); a minute away; 1 ms from now. */
    if (((v >> 3) & 3) == 1)
        r.deadline_ns = 1;
    else if (((v >> 3) & 3) == 2)
        r.deadline_ns = uv_hrtime() + 60ull * 1000 * 1000 * 1000;
    r.timeout_ms = ((v >> 3) & 3) == 3;
    m = PR_MSG_OF(REDUCE, reduce, &r);
    return request(s, &m, NULL, 0, e);
}

/*
 * The scheduler's Group of the slots in `mask` (bits 0 and 1) whose
 * reduces wait: this node alone or with PEER (bit 2); bits 3 and 4 spoil
 * its length or a member's seq, bit 5 asks for personal results.
 */
static void group(uint32_t mask, uint64_t id)
{
    Pr__V1__Member mb[NSLOT], *mp[NSLOT];
    uint32_t ring[2] = {SELF, PEER};
    Pr__V1__Group g = PR__V1__GROUP__INIT;
    for (int k = 0; k < NSLOT; k++) {
        const struct node_trainer *c = node_of(&slots[k]);
        if (!(mask & (1u << k)) || !c ||
            (c->rstate != R_QUEUED && c->rstate != R_CANCELLING))
            continue;
        pr__v1__member__init(&mb[g.n_members]);
        mb[g.n_members].rank = (uint32_t)c->rank;
        mb[g.n_members].node_id = SELF;
        mb[g.n_members].seq = c->seq + (mask & 16 ? 1 : 0);
        mp[g.n_members] = &mb[g.n_members];
        for (size_t p = 0; !g.n_members && p < c->nparts; p++)
            g.nfloats += c->parts[p].len;
        g.n_members++;
    }
    for (size_t i = 0; i < g.n_members; i++)
        mb[i].weight = 1.0 / (double)g.n_members;
    g.id = id;
    g.job = JOB;
    g.members = mp;
    g.ring = ring;
    g.n_ring = mask & 4 ? 2 : 1;
    g.nfloats += mask & 8 ? 1 : 0;
    g.personal = (mask & 32) != 0;
    g.timeout_ms = 60000;
    pr_node_on_group(node->sched[0], &g);
}

/* The scheduler link is lost (up = 0) or back, its joins answered. */
static void sched_link(uv_loop_t *loop, int up, uint32_t v, struct expect *e)
{
    node->sched[0]->state = up ? S_UP : S_DOWN;
    sched_up = up;
    if (!up) {
        pr_node_ipc_sched_lost(node->sched[0]);
        for (int i = 0; i < NSLOT; i++)
            slots[i].joined = 0;
        return;
    }
    pr_node_ipc_sched_up(node->sched[0]);
    fuzz_settle(loop);
    for (int i = 0; i < NSLOT; i++) {
        if (slots[i].sock.fd < 0)
            continue;
        if (v >= 0xe0)
            e[i].what = W_REFUSED;
        else if (slots[i].welcomed)
            slots[i].joined = 1;
        else
            e[i].what = W_WELCOME;
    }
    serve_joins(v < 0xe0 ? 0 : -EEXIST);
}

/*
 * One step of the input: its first byte's bit 0 picks the slot, bits
 * 1-5 what happens (a trainer's request, none from a slot with no
 * connection; or the scheduler's or time's part). Returns the slot whose
 * reduce the node must accept, if any.
 */
static struct slot *step(uv_loop_t *loop, struct fuzz_cursor *c,
                         struct expect *e)
{
    static const int codes[4] = {-ETIMEDOUT, -EINVAL, -ECANCELED, -EPROTO};
    static uint64_t group_id = 1000;
    uint32_t op = fuzz_take(c, 1), kind = (op >> 1) & 31, v;
    int k = op & 1;
    struct slot *s = &slots[k];
    struct node_trainer *t = node_of(s);
    if ((kind < 20 || kind > 28) && s->sock.fd < 0)
        return NULL;
    if (kind < 17 || kind > 28)
        return build(kind, s, c, &e[k]);
    switch (kind) {
    case 17:
    case 18:
        return raw_request(s, c, &e[k]);
    case 19:
        slot_close(s); /* the trainer hangs up */
        break;
    case 20:
        if (s->sock.fd < 0)
            slot_connect(loop, k, e);
        break;
    case 21:
        pr_node_ipc_tick(node, uv_now(loop));
        break;
    case 22:
        /* A Reject, also of a trainer that hung up (it keeps its name). */
        v = fuzz_take(c, 1);
        if (t && (t->rstate == R_QUEUED || t->rstate == R_CANCELLING))
            pr_node_reduce_fail(t, codes[v % 4]);
        break;
    case 23:
    case 24:
        group(fuzz_take(c, 1), ++group_id);
        break;
    case 25:
        v = fuzz_take(c, 1);
        pr_node_groups_fail(node->sched[0], v & 1 ? -ECONNRESET : -ETIMEDOUT);
        fuzz_settle(loop);
        fuzz_links_complete(links, 1, -ECANCELED);
        break;
    case 26:
        fuzz_links_complete(links, 1, 0);
        break;
    case 27:
    case 28:
        if (sched_up != (kind == 27))
            break;
        sched_link(loop, kind == 28, kind == 28 ? fuzz_take(c, 1) : 0, e);
        break;
    }
    return NULL;
}

/* The socket's directory: the node removed the socket at each close. */
static void remove_dir(void)
{
    rmdir(sock_dir);
}

static void setup(struct pr_conf *conf)
{
    char set[128];
    pr_log_set_level(PR_LOG_ERROR);
    /* As preduced does: a trainer gone mid-write is an error, no signal. */
    signal(SIGPIPE, SIG_IGN);
    snprintf(sock_dir, sizeof(sock_dir), "/tmp/fuzz_trainer.XXXXXX");
    if (!mkdtemp(sock_dir) || atexit(remove_dir) != 0)
        abort();
    snprintf(sock_path, sizeof(sock_path), "%s/node.sock", sock_dir);
    snprintf(set, sizeof(set), "node.socket=%s", sock_path);
    if (pr_conf_init(conf) < 0 || pr_conf_set(conf, set, NULL) < 0 ||
        pr_conf_set(conf, "node.trainer_max_tensors=4", NULL) < 0 ||
        pr_conf_set(conf, "node.trainer_max_mb=2", NULL) < 0 ||
        pr_conf_set(conf, "node.max_tensors=6", NULL) < 0 ||
        pr_conf_set(conf, "node.max_tensor_mb=1", NULL) < 0 ||
        pr_conf_set(conf, "node.busy_poll_us=0", NULL) < 0)
        abort();
}

/* Ends what runs; every trainer hangs up; nothing may be left. */
static void finish(uv_loop_t *loop, struct pr_conn *sched)
{
    struct expect e[NSLOT] = {0};
    char line[512];
    pr_node_groups_fail(node->sched[0], -ECANCELED);
    fuzz_settle(loop);
    fuzz_links_complete(links, 1, -ECANCELED);
    fuzz_settle(loop);
    if (sched_up)
        sched_link(loop, 0, 0, e);
    fuzz_settle(loop);
    step_end(e, NULL);
    check_node();
    for (int k = 0; k < NSLOT; k++) {
        if (slots[k].sock.fd >= 0 && slots[k].inflight)
            abort(); /* a reduce never answered */
        if (slots[k].sock.fd >= 0)
            slot_close(&slots[k]);
    }
    fuzz_settle(loop);
    if (node->trainers || node->ntrainers || node->ntensors ||
        node->nreducing || node->ngreeted || node->sched[0]->groups)
        abort(); /* trainers gone, and something of theirs kept */
    pr_node_ipc_close(node);
    pr_conn_close(node->sched[0]->conn, 0);
    pr_conn_close(sched, 0);
    pr_engine_destroy(node->sched[0]->engine);
    fuzz_links_complete(links, 1, -ECANCELED);
    uv_run(loop, UV_RUN_DEFAULT);
    if (uv_loop_close(loop) != 0 || node->handles != 1)
        abort();
    free(node->sched[0]);
    free(node);
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, "/memfd:preduce:fz"))
            abort(); /* a tensor's memory outlived its trainer */
    if (f)
        fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct pr_conf conf;
    static int ready;
    int sv[2];
    if (!ready) {
        setup(&conf);
        ready = 1;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    links[0].base.ops = &fuzz_link_ops;
    links[0].base.node_id = PEER;
    links[0].base.kind = "fuzz";
    links[0].q = NULL;
    node = calloc(1, sizeof(*node));
    if (!node)
        abort();
    /* Its own scheduler, the one its trainers follow: a link, an engine. */
    struct node_sched *ns = calloc(1, sizeof(*ns));
    if (!ns)
        abort();
    node->loop = &loop;
    node->conf = &conf;
    node->sched[0] = ns;
    node->nsched = 1;
    ns->n = node;
    ns->self = SELF;
    node->handles = 1; /* ours: the socket's close callback counts down */
    ns->engine = pr_engine_create(&loop, 4096, 1 << 20, resolve, NULL);
    if (!ns->engine || pr_node_ipc_listen(node) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    pr_engine_set_direct(ns->engine, 1);
    ns->conn = pr_conn_create_pipe(&loop, PR_CTRL_MAX_FRAME, &node_end, ns);
    struct pr_conn *sched =
        pr_conn_create_pipe(&loop, PR_CTRL_MAX_FRAME, &sched_end, NULL);
    if (!ns->conn || !sched || uv_pipe_open(&ns->conn->h.pipe, sv[0]) ||
        uv_pipe_open(&sched->h.pipe, sv[1]) || pr_conn_start(sched) < 0)
        abort();
    ns->state = S_UP;
    sched_up = 1;
    memset(&heard, 0, sizeof(heard));
    memset(slots, 0, sizeof(slots));
    struct expect e[NSLOT] = {0};
    for (int k = 0; k < NSLOT; k++) {
        slots[k].gen = -1;
        slot_connect(&loop, k, e);
    }
    step_end(e, NULL);
    check_node();
    struct fuzz_cursor c = {data, size};
    for (int n = 0; n < MAX_STEPS && c.n > 0; n++) {
        memset(e, 0, sizeof(e));
        struct slot *accepted = step(&loop, &c, e);
        fuzz_settle(&loop);
        step_end(e, accepted);
        check_node();
    }
    finish(&loop, sched);
    return 0;
}
