/* SPDX-License-Identifier: MIT */
/*
 * The trainers' socket of a real node daemon (daemon/node/node_ipc.c), spoken
 * by hand: the branches a well-behaved libpreduce never takes. Tensors
 * destroyed while unknown, idle or busy in a reduce; reduces the daemon
 * refuses (one already in flight, no or too many tensors, an unknown or
 * repeated tensor id, a length the job does not reduce); a tensor over
 * max_tensor_mb; messages out of turn; a name with control characters;
 * and a trainer that hangs up while its reduce is queued at the scheduler
 * or running in its group. Each test checks what the daemon answers or
 * logs, and then that the cluster still serves real trainers.
 *
 * Whether the daemon really freed a tensor is read from its
 * /proc/<pid>/maps: each tensor is a memfd named preduce:<trainer>:<id>.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/* The fixture's node.max_tensor_mb, and the largest tensor it allows. */
#define MAX_TENSOR_MB     1
#define MAX_TENSOR_FLOATS (MAX_TENSOR_MB * 1024 * 1024 / 4)
/* A deadline no test reaches: a reduce ends for another reason. */
#define LONG_TIMEOUT_MS 60000

static struct h_cluster c;
static uint16_t sched_metrics_port;
static uint16_t node0_metrics_port; /* setup_node_metrics() only */

static void setup(void)
{
    static char metrics[64];
    sched_metrics_port = h_free_port();
    snprintf(metrics, sizeof(metrics), "metrics.listen=127.0.0.1:%u",
             sched_metrics_port);
    const char *const sets[] = {"scheduler.policy=allreduce", metrics, NULL};
    const char *const node_sets[] = {"node.max_tensor_mb=1", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, node_sets), 0);
}

/* The same, but node0 serves metrics too (node1 gets none: one port). */
static void setup_node_metrics(void)
{
    static char metrics[64], node_metrics[64];
    sched_metrics_port = h_free_port();
    node0_metrics_port = h_free_port();
    snprintf(metrics, sizeof(metrics), "metrics.listen=127.0.0.1:%u",
             sched_metrics_port);
    snprintf(node_metrics, sizeof(node_metrics), "metrics.listen=127.0.0.1:%u",
             node0_metrics_port);
    const char *const sets[] = {"scheduler.policy=allreduce", metrics, NULL};
    const char *const node0_sets[] = {"node.max_tensor_mb=1", node_metrics,
                                      NULL};
    const char *const node_sets[] = {"node.max_tensor_mb=1", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node0_sets), 0);
    ck_assert_int_eq(h_node_start(&c, 1, node_sets), 0);
    c.nnodes = 2;
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls a log for up to 3 s. */
static int logged(const char *who, const char *s)
{
    for (int i = 0; i < 300; i++) {
        if (h_log_contains(&c, who, s))
            return 1;
        sleep_ms(10);
    }
    h_log_dump(&c, who);
    return 0;
}

/* The cluster still reduces: 4 trainers, 5 steps, correct results. */
static void still_serving(void)
{
    pid_t pids[4];
    char names[4][24];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "after%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % 2,
                                   .n = 1000,
                                   .steps = 5,
                                   .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(h_wait(pids[i], 30000), 0);
}

/*
 * A trainer spoken by hand: one Unix socket, a frame reader, and the last
 * descriptor that came with a frame (TensorCreated's memfd).
 */
struct raw {
    char name[32];
    int node;
    int fd;
    int eof;
    int passed_fd;
    uint32_t rank;
    struct pr_frame_reader rd;
};

static void raw_connect(struct raw *t, int node, const char *name)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->node = node;
    t->passed_fd = -1;
    ck_assert_int_eq(pr_frame_reader_init(&t->rd, PR_CTRL_MAX_FRAME), 0);
    t->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(t->fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", c.sock[node]);
    if (connect(t->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        ck_abort_msg("connect %s", c.sock[node]);
}

static void raw_close(struct raw *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->passed_fd >= 0)
        close(t->passed_fd);
    t->passed_fd = -1;
    pr_frame_reader_fini(&t->rd);
}

static void raw_send(struct raw *t, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len), 0);
    ck_assert_int_eq(write(t->fd, buf, len), (ssize_t)len);
    free(buf);
}

/* One recvmsg() into the reader, keeping a descriptor that came with it. */
static void raw_read(struct raw *t)
{
    void *p;
    size_t n;
    ck_assert_int_eq(pr_frame_reader_reserve(&t->rd, 65536, &p, &n), 0);
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = p, .iov_len = n};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    ssize_t r = recvmsg(t->fd, &mh, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR)
        return;
    if (r <= 0) {
        t->eof = 1; /* closed by the daemon (or reset: the same here) */
        return;
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
         cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        if (t->passed_fd >= 0)
            close(t->passed_fd);
        memcpy(&t->passed_fd, CMSG_DATA(cm), sizeof(int));
    }
    pr_frame_reader_commit(&t->rd, (size_t)r);
}

/* The next message (free it), or NULL at EOF or after timeout_ms. */
static Pr__V1__Msg *raw_recv(struct raw *t, int timeout_ms)
{
    double end = now_ms() + timeout_ms;
    for (;;) {
        struct pr_frame_hdr h;
        const uint8_t *payload;
        int rc = pr_frame_reader_next(&t->rd, &h, &payload);
        ck_assert_int_ge(rc, 0);
        if (rc == 1) {
            ck_assert_int_eq(h.type, PR_FRAME_MSG);
            Pr__V1__Msg *m = pr_msg_unpack(payload, h.len);
            ck_assert_msg(m != NULL, "%s: a frame that is no message", t->name);
            return m;
        }
        int left = (int)(end - now_ms());
        if (t->eof || left <= 0)
            return NULL;
        struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
        if (poll(&pfd, 1, left) > 0)
            raw_read(t);
    }
}

/* The next message, which must be of case `want` (within 5 s). */
static Pr__V1__Msg *raw_expect(struct raw *t, Pr__V1__Msg__BodyCase want)
{
    Pr__V1__Msg *m = raw_recv(t, 5000);
    ck_assert_msg(m != NULL, "%s: %s instead of message %d", t->name,
                  t->eof ? "closed" : "nothing for 5 s", (int)want);
    if (m->body_case != want) {
        const char *why =
            m->body_case == PR__V1__MSG__BODY_ERROR && m->error->reason
                ? m->error->reason
                : "";
        ck_abort_msg("%s: a %s message (%s) instead of message %d", t->name,
                     pr_msg_name(m), why, (int)want);
    }
    return m;
}

/*
 * Waits (3 s at most) until the daemon closes the connection; only an Error
 * may come first. Returns that Error's code, or 0 if none came.
 */
static int raw_expect_closed(struct raw *t)
{
    int code = 0;
    Pr__V1__Msg *m;
    while ((m = raw_recv(t, 3000)) != NULL) {
        ck_assert_msg(m->body_case == PR__V1__MSG__BODY_ERROR,
                      "%s: a %s message instead of the close", t->name,
                      pr_msg_name(m));
        code = m->error->code;
        pr_msg_free(m);
    }
    ck_assert_msg(t->eof, "%s: still open after 3 s", t->name);
    return code;
}

static void send_hello(struct raw *t, int role, const char *name)
{
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = role;
    h.name = (char *)name;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &h;
    raw_send(t, &m);
}

/* Connects and registers: returns when the Welcome came. */
static void raw_open(struct raw *t, int node, const char *name)
{
    raw_connect(t, node, name);
    send_hello(t, PR__V1__ROLE__ROLE_CLIENT, name);
    Pr__V1__Msg *m = raw_expect(t, PR__V1__MSG__BODY_WELCOME);
    t->rank = m->welcome->id;
    pr_msg_free(m);
}

/* Hangs up, and waits until the scheduler has seen the worker leave. */
static void raw_retire(struct raw *t)
{
    raw_close(t);
    char s[96];
    snprintf(s, sizeof(s), "worker %u (%s) left", t->rank, t->name);
    ck_assert_msg(logged("sched", s), "no '%s'", s);
}

static void send_create(struct raw *t, uint64_t nfloats)
{
    Pr__V1__TensorCreate tc = PR__V1__TENSOR_CREATE__INIT;
    tc.nfloats = nfloats;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_TENSOR_CREATE;
    m.tensor_create = &tc;
    raw_send(t, &m);
}

/* Creates a tensor and maps it here: its id, and *data when wanted. */
static uint32_t raw_create(struct raw *t, uint64_t nfloats, float **data)
{
    send_create(t, nfloats);
    Pr__V1__Msg *m = raw_expect(t, PR__V1__MSG__BODY_TENSOR_CREATED);
    uint32_t id = m->tensor_created->tensor_id;
    ck_assert_uint_eq(m->tensor_created->nfloats, nfloats);
    pr_msg_free(m);
    ck_assert_msg(t->passed_fd >= 0, "%s: no memfd with tensor %u", t->name,
                  id);
    if (data) {
        *data = mmap(NULL, nfloats * sizeof(float), PROT_READ | PROT_WRITE,
                     MAP_SHARED, t->passed_fd, 0);
        ck_assert_ptr_ne(*data, MAP_FAILED);
    }
    close(t->passed_fd);
    t->passed_fd = -1;
    return id;
}

static void raw_destroy(struct raw *t, uint32_t id)
{
    Pr__V1__TensorDestroy d = PR__V1__TENSOR_DESTROY__INIT;
    d.tensor_id = id;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_TENSOR_DESTROY;
    m.tensor_destroy = &d;
    raw_send(t, &m);
}

/* A Reduce with Reduce.wire = wire (0: the node's transport.wire). */
static void raw_reduce_wire(struct raw *t, uint64_t seq, uint32_t *ids,
                            size_t n, uint32_t wire)
{
    Pr__V1__Reduce r = PR__V1__REDUCE__INIT;
    r.seq = seq;
    r.tensor_ids = ids;
    r.n_tensor_ids = n;
    r.timeout_ms = LONG_TIMEOUT_MS;
    r.wire = wire;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_REDUCE;
    m.reduce = &r;
    raw_send(t, &m);
}

static void raw_reduce(struct raw *t, uint64_t seq, uint32_t *ids, size_t n)
{
    raw_reduce_wire(t, seq, ids, n, 0);
}

/* The next message is ReduceDone for `seq`: its status. */
static int raw_done(struct raw *t, uint64_t seq)
{
    Pr__V1__Msg *m = raw_expect(t, PR__V1__MSG__BODY_REDUCE_DONE);
    ck_assert_uint_eq(m->reduce_done->seq, seq);
    int status = m->reduce_done->status;
    pr_msg_free(m);
    return status;
}

/* A gauge at `port`, polled for up to 3 s until it reads `want`. */
static int gauge_is(uint16_t port, const char *name, double want)
{
    double v = NAN;
    for (int i = 0; i < 30; i++) {
        char *text = h_metrics_fetch(port);
        ck_assert_ptr_nonnull(text);
        v = h_metric(text, name);
        free(text);
        if (v == want)
            return 1;
        sleep_ms(100);
    }
    fprintf(stderr, "%s is %g, not %g\n", name, v, want);
    return 0;
}

static int sched_gauge_is(const char *name, double want)
{
    return gauge_is(sched_metrics_port, name, want);
}

static void fill(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

/*
 * TensorDestroy of an id the trainer does not have is ignored: the
 * connection stays up, the trainer's real tensor stays mapped and reduces.
 */
START_TEST(test_ipc_destroy_unknown_id)
{
    struct raw a;
    raw_open(&a, 0, "ghost");
    float *x;
    uint32_t id = raw_create(&a, 256, &x);
    raw_destroy(&a, id + 41);
    raw_destroy(&a, 0);
    /* Answered in order: the destroys were read before this create. */
    uint32_t id2 = raw_create(&a, 128, NULL);
    ck_assert_uint_eq(id2, id + 1);
    ck_assert(h_node_maps_tensor(&c, 0, "ghost", id));
    /* Alone in the job, the trainer's reduce is a group of one. */
    fill(x, 256, 5.0f);
    uint32_t ids[] = {id};
    raw_reduce(&a, 1, ids, 1);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert(x[0] == 5.0f && x[255] == 5.0f);
    munmap(x, 256 * sizeof(float));
    raw_retire(&a);
    still_serving();
}
END_TEST

/*
 * TensorDestroy of a tensor busy in a reduce dooms it: it stays mapped and
 * the reduce completes with correct results; once the reduce ended the
 * daemon frees it and no reduce may name it again.
 */
START_TEST(test_ipc_destroy_busy_tensor)
{
    const size_t n = 1024;
    struct raw a, b;
    raw_open(&a, 0, "doomA");
    raw_open(&b, 1, "doomB");
    float *xa, *xb;
    uint32_t ta = raw_create(&a, n, &xa);
    uint32_t tb = raw_create(&b, n, &xb);
    fill(xa, n, 1.0f);
    fill(xb, n, 3.0f);
    /* Queued at the scheduler until b is ready too (allreduce). */
    raw_reduce(&a, 1, &ta, 1);
    raw_destroy(&a, ta);
    /*
     * A second reduce is refused while the first is in flight; its answer
     * also says that the destroy before it was read.
     */
    raw_reduce(&a, 2, &ta, 1);
    ck_assert_int_eq(raw_done(&a, 2), -EBUSY);
    ck_assert(logged("node0", "trainer 'doomA': reduce 2 refused: a reduce "
                              "is already in flight"));
    ck_assert_msg(h_node_maps_tensor(&c, 0, "doomA", ta),
                  "a busy tensor was freed");
    raw_reduce(&b, 1, &tb, 1);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert_int_eq(raw_done(&b, 1), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_float_eq_tol(xa[i], 2.0f, 1e-6f);
        ck_assert_float_eq_tol(xb[i], 2.0f, 1e-6f);
    }
    ck_assert_msg(h_node_wait_maps(&c, 0, "doomA", ta, 0),
                  "the doomed tensor is still mapped after its reduce");
    raw_reduce(&a, 3, &ta, 1);
    ck_assert_int_eq(raw_done(&a, 3), -EINVAL);
    ck_assert(logged("node0", "trainer 'doomA': reduce 3 refused: unknown "
                              "tensor id"));
    /* b's tensor was not touched by any of this. */
    ck_assert(h_node_maps_tensor(&c, 1, "doomB", tb));
    munmap(xa, n * sizeof(float));
    munmap(xb, n * sizeof(float));
    raw_retire(&a);
    raw_retire(&b);
    still_serving();
}
END_TEST

/*
 * A plain TensorDestroy unmaps the tensor at once; a reduce that names it
 * afterwards is refused with -EINVAL; the other tensors still reduce.
 */
START_TEST(test_ipc_destroy_then_reduce)
{
    struct raw a;
    raw_open(&a, 0, "gone");
    uint32_t t1 = raw_create(&a, 64, NULL);
    uint32_t t2 = raw_create(&a, 64, NULL);
    uint32_t t3 = raw_create(&a, 64, NULL);
    ck_assert(h_node_maps_tensor(&c, 0, "gone", t1));
    raw_destroy(&a, t1);
    ck_assert_msg(h_node_wait_maps(&c, 0, "gone", t1, 0),
                  "a destroyed tensor stays");
    ck_assert(h_node_maps_tensor(&c, 0, "gone", t2) &&
              h_node_maps_tensor(&c, 0, "gone", t3));
    uint32_t ids[] = {t2, t1};
    raw_reduce(&a, 1, ids, 2);
    ck_assert_int_eq(raw_done(&a, 1), -EINVAL);
    ck_assert(
        logged("node0", "trainer 'gone': reduce 1 refused: unknown tensor id"));
    /* The refusal released t2, which it had marked busy before t1. */
    uint32_t ok[] = {t2, t3};
    raw_reduce(&a, 2, ok, 2);
    ck_assert_int_eq(raw_done(&a, 2), 0);
    raw_retire(&a);
    still_serving();
}
END_TEST

/*
 * Reduces refused before anything reaches the scheduler: no tensors, more
 * than the daemon takes in one reduce (4096), one tensor twice, a wire
 * encoding past int8 (Reduce.wire 4). Each answers -EINVAL with its
 * reason logged, and the connection stays usable.
 */
START_TEST(test_ipc_reduce_refusals)
{
    struct raw a;
    raw_open(&a, 0, "picky");
    uint32_t t = raw_create(&a, 32, NULL);
    raw_reduce(&a, 1, NULL, 0);
    ck_assert_int_eq(raw_done(&a, 1), -EINVAL);
    ck_assert(logged("node0", "trainer 'picky': reduce 1 refused: no "
                              "tensors, or too many"));
    enum { TOO_MANY = 4097 };
    uint32_t *many = malloc(TOO_MANY * sizeof(*many));
    ck_assert_ptr_nonnull(many);
    for (size_t i = 0; i < TOO_MANY; i++)
        many[i] = t;
    raw_reduce(&a, 2, many, TOO_MANY);
    free(many);
    ck_assert_int_eq(raw_done(&a, 2), -EINVAL);
    ck_assert(logged("node0", "trainer 'picky': reduce 2 refused: no "
                              "tensors, or too many"));
    uint32_t twice[] = {t, t};
    raw_reduce(&a, 3, twice, 2);
    ck_assert_int_eq(raw_done(&a, 3), -EINVAL);
    ck_assert(logged("node0", "trainer 'picky': reduce 3 refused: a tensor "
                              "appears twice"));
    raw_reduce_wire(&a, 4, &t, 1, 4);
    ck_assert_int_eq(raw_done(&a, 4), -EINVAL);
    ck_assert(logged("node0", "trainer 'picky': reduce 4 refused: unknown "
                              "wire encoding"));
    /* Nothing was left busy: the tensor still reduces, in int8 too. */
    raw_reduce(&a, 5, &t, 1);
    ck_assert_int_eq(raw_done(&a, 5), 0);
    raw_reduce_wire(&a, 6, &t, 1, 3);
    ck_assert_int_eq(raw_done(&a, 6), 0);
    raw_retire(&a);
    still_serving();
}
END_TEST

/*
 * A reduce whose total length differs from the job's passes the daemon and
 * is refused by the scheduler while another worker holds the job's length:
 * the trainer gets -EINVAL, both daemons log why, and a reduce of the
 * job's length still works (test_layout has the rest of the rule).
 */
START_TEST(test_ipc_reduce_length_mismatch)
{
    struct raw a, b;
    raw_open(&a, 0, "ragged");
    raw_open(&b, 1, "holder");
    uint32_t t1 = raw_create(&a, 100, NULL);
    uint32_t t2 = raw_create(&a, 60, NULL);
    uint32_t tb = raw_create(&b, 100, NULL);
    raw_reduce(&a, 1, &t1, 1);
    raw_reduce(&b, 1, &tb, 1);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert_int_eq(raw_done(&b, 1), 0);
    raw_reduce(&a, 2, &t2, 1);
    ck_assert_int_eq(raw_done(&a, 2), -EINVAL);
    ck_assert(logged("sched", "reduce of 60 floats, but this job reduces 100"));
    ck_assert(logged("node0", "reduce 2 refused by the scheduler"));
    raw_reduce(&a, 3, &t1, 1);
    raw_reduce(&b, 2, &tb, 1);
    ck_assert_int_eq(raw_done(&a, 3), 0);
    ck_assert_int_eq(raw_done(&b, 2), 0);
    raw_retire(&a);
    raw_retire(&b);
    still_serving();
}
END_TEST

/*
 * TensorCreate outside 1..max_tensor_mb is answered with Error -EINVAL and
 * logged; the connection stays usable and a tensor of the maximum is made.
 */
START_TEST(test_ipc_tensor_create_limits)
{
    struct raw a;
    raw_open(&a, 0, "greedy");
    const uint64_t sizes[] = {MAX_TENSOR_FLOATS + 1, 0, UINT64_MAX / 4};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        send_create(&a, sizes[i]);
        Pr__V1__Msg *m = raw_expect(&a, PR__V1__MSG__BODY_ERROR);
        ck_assert_int_eq(m->error->code, -EINVAL);
        ck_assert_ptr_nonnull(m->error->reason);
        ck_assert_ptr_nonnull(strstr(m->error->reason, "max_tensor_mb"));
        pr_msg_free(m);
        ck_assert_int_eq(a.passed_fd, -1);
        char s[128];
        snprintf(s, sizeof(s),
                 "trainer 'greedy': tensor of %llu floats: must be 1..%u",
                 (unsigned long long)sizes[i], MAX_TENSOR_FLOATS);
        ck_assert_msg(logged("node0", s), "no '%s'", s);
    }
    uint32_t t = raw_create(&a, MAX_TENSOR_FLOATS, NULL);
    ck_assert_uint_eq(t, 1);
    ck_assert(h_node_maps_tensor(&c, 0, "greedy", t));
    raw_retire(&a);
    still_serving();
}
END_TEST

/*
 * Out of turn on the trainers' socket: a hello that is not a client's or
 * has no name, a message after the hello but before the welcome. Each
 * closes that connection only; a registration it began is undone, so the
 * name is free again.
 */
START_TEST(test_ipc_message_before_welcome)
{
    /* A welcome on node0 shows its scheduler link is up: hellos join. */
    struct raw probe;
    raw_open(&probe, 0, "probe");

    struct raw x;
    raw_connect(&x, 0, "node-role");
    send_hello(&x, PR__V1__ROLE__ROLE_NODE, "node-role");
    ck_assert_int_eq(raw_expect_closed(&x), -EINVAL);
    ck_assert(logged("node0", "hello with role 2 and a name of 9 bytes"));
    raw_close(&x);
    raw_connect(&x, 0, "nameless");
    send_hello(&x, PR__V1__ROLE__ROLE_CLIENT, "");
    ck_assert_int_eq(raw_expect_closed(&x), -EINVAL);
    ck_assert(logged("node0", "hello with role 1 and a name of 0 bytes"));
    raw_close(&x);

    /*
     * Hello and TensorCreate in one write: the daemon reads the second
     * while the scheduler has not answered the first (C_JOINING).
     */
    raw_connect(&x, 0, "early");
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_CLIENT;
    h.name = "early";
    Pr__V1__Msg m1 = PR__V1__MSG__INIT;
    m1.body_case = PR__V1__MSG__BODY_HELLO;
    m1.hello = &h;
    Pr__V1__TensorCreate tc = PR__V1__TENSOR_CREATE__INIT;
    tc.nfloats = 16;
    Pr__V1__Msg m2 = PR__V1__MSG__INIT;
    m2.body_case = PR__V1__MSG__BODY_TENSOR_CREATE;
    m2.tensor_create = &tc;
    uint8_t *f1, *f2, both[256];
    size_t n1, n2;
    ck_assert_int_eq(pr_msg_frame(&m1, sizeof(both), &f1, &n1), 0);
    ck_assert_int_eq(pr_msg_frame(&m2, sizeof(both), &f2, &n2), 0);
    ck_assert_uint_le(n1 + n2, sizeof(both));
    memcpy(both, f1, n1);
    memcpy(both + n1, f2, n2);
    free(f1);
    free(f2);
    ck_assert_int_eq(write(x.fd, both, n1 + n2), (ssize_t)(n1 + n2));
    raw_expect_closed(&x);
    ck_assert(logged("node0", "trainer 'early': tensor_create message before "
                              "the welcome: closing"));
    raw_close(&x);
    /* Its registration, answered after the close, is undone. */
    ck_assert(logged("sched", "(early) left"));
    raw_open(&x, 0, "early");
    ck_assert_int_eq(raw_create(&x, 16, NULL), 1);
    raw_retire(&x);

    /* The other trainer on that node never noticed. */
    ck_assert_int_eq(raw_create(&probe, 16, NULL), 1);
    raw_retire(&probe);
    still_serving();
}
END_TEST

/*
 * After the welcome, a message only the scheduler's link carries (Group)
 * or one the daemon sends (ReduceDone) closes that connection with a log
 * line, and the worker leaves the job; another trainer is not disturbed.
 */
START_TEST(test_ipc_unexpected_message)
{
    struct raw other;
    raw_open(&other, 1, "bystander");
    uint32_t t = raw_create(&other, 8, NULL);
    for (int i = 0; i < 2; i++) {
        char name[24];
        snprintf(name, sizeof(name), "rogue%d", i);
        struct raw a;
        raw_open(&a, 0, name);
        Pr__V1__Msg m = PR__V1__MSG__INIT;
        Pr__V1__Group g = PR__V1__GROUP__INIT;
        Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
        if (i == 0) {
            g.id = 7;
            g.nfloats = 8;
            m.body_case = PR__V1__MSG__BODY_GROUP;
            m.group = &g;
        } else {
            d.seq = 1;
            m.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
            m.reduce_done = &d;
        }
        raw_send(&a, &m);
        raw_expect_closed(&a);
        char s[96];
        snprintf(s, sizeof(s), "trainer '%s': unexpected %s message: closing",
                 name, i == 0 ? "group" : "reduce_done");
        ck_assert_msg(logged("node0", s), "no '%s'", s);
        raw_close(&a);
        snprintf(s, sizeof(s), "worker %u (%s) left", a.rank, name);
        ck_assert_msg(logged("sched", s), "no '%s'", s);
    }
    /* Alone again in the job: its reduce is a group of one. */
    raw_reduce(&other, 1, &t, 1);
    ck_assert_int_eq(raw_done(&other, 1), 0);
    raw_retire(&other);
    still_serving();
}
END_TEST

/*
 * A trainer hangs up while its reduce waits at the scheduler for the job's
 * other worker (allreduce): the daemon cancels the READY, and once the
 * scheduler answered it frees the worker, long before the reduce's own
 * deadline. The other worker then reduces alone, and fresh trainers work.
 */
START_TEST(test_ipc_disconnect_while_queued)
{
    const size_t n = 512;
    struct raw a, b;
    raw_open(&a, 0, "quitter");
    raw_open(&b, 1, "waiter");
    uint32_t ta = raw_create(&a, n, NULL);
    uint32_t tb = raw_create(&b, n, NULL);
    ck_assert(sched_gauge_is("preduce_sched_workers_live ", 2));
    raw_reduce(&a, 1, &ta, 1);
    ck_assert(sched_gauge_is("preduce_sched_workers_queued ", 1));
    raw_close(&a);
    char s[96];
    snprintf(s, sizeof(s), "trainer 'quitter' (worker %u) disconnected",
             a.rank);
    ck_assert_msg(logged("node0", s), "no '%s'", s);
    snprintf(s, sizeof(s), "worker %u (quitter) left", a.rank);
    /* Within logged()'s 3 s: at the cancel, not at the 60 s deadline. */
    ck_assert_msg(logged("sched", s), "no '%s'", s);
    ck_assert(sched_gauge_is("preduce_sched_workers_queued ", 0));
    ck_assert(sched_gauge_is("preduce_sched_workers_live ", 1));
    raw_reduce(&b, 1, &tb, 1);
    ck_assert_int_eq(raw_done(&b, 1), 0);
    raw_retire(&b);
    still_serving();
}
END_TEST

/*
 * Hellos whose names carry control characters (a newline would forge log
 * lines) are refused as libpreduce refuses them, with -EINVAL; the log
 * line gives the length only. Other trainers are not disturbed.
 */
START_TEST(test_ipc_hello_control_chars)
{
    struct raw probe;
    raw_open(&probe, 0, "probe");
    const char *names[] = {"evil\nnode0 forged line", "tab\there", "del\x7f"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct raw x;
        raw_connect(&x, 0, "control");
        send_hello(&x, PR__V1__ROLE__ROLE_CLIENT, names[i]);
        ck_assert_int_eq(raw_expect_closed(&x), -EINVAL);
        raw_close(&x);
        char s[128];
        snprintf(s, sizeof(s),
                 "hello with a name of %zu bytes that has control "
                 "characters: closing",
                 strlen(names[i]));
        ck_assert_msg(logged("node0", s), "no '%s'", s);
    }
    ck_assert(!h_log_contains(&c, "sched", "forged"));
    ck_assert(!h_log_contains(&c, "node0", "\nnode0 forged line"));
    ck_assert_int_eq(raw_create(&probe, 16, NULL), 1);
    raw_retire(&probe);
}
END_TEST

/*
 * Two trainers on node0 and one on node1 reduce together (allreduce). The
 * group is held running on node0 by stopping node1 (SIGSTOP) before it
 * takes part; meanwhile the first trainer's connection breaks. The group
 * then finishes for the others, with the departed trainer's floats in the
 * mean, but its tensor (which it still maps, as a client that saw its
 * connection fail still does) keeps its values: it was never told that
 * the reduce succeeded.
 */
START_TEST(test_ipc_disconnect_while_grouped)
{
    const size_t n = 4096;
    struct raw a, b, r;
    raw_open(&a, 0, "leaver");
    raw_open(&b, 0, "stayer");
    raw_open(&r, 1, "remote");
    float *xa, *xb, *xr;
    uint32_t ta = raw_create(&a, n, &xa);
    uint32_t tb = raw_create(&b, n, &xb);
    uint32_t tr = raw_create(&r, n, &xr);
    ck_assert(sched_gauge_is("preduce_sched_workers_live ", 3));
    /* A first reduce of all three sets up the link between the nodes. */
    raw_reduce(&a, 1, &ta, 1);
    raw_reduce(&b, 1, &tb, 1);
    raw_reduce(&r, 1, &tr, 1);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert_int_eq(raw_done(&b, 1), 0);
    ck_assert_int_eq(raw_done(&r, 1), 0);

    fill(xa, n, 1.0f);
    fill(xb, n, 3.0f);
    fill(xr, n, 5.0f);
    raw_reduce(&r, 2, &tr, 1);
    ck_assert(sched_gauge_is("preduce_sched_workers_queued ", 1));
    ck_assert_int_eq(kill(c.node_pid[1], SIGSTOP), 0);
    raw_reduce(&a, 2, &ta, 1);
    raw_reduce(&b, 2, &tb, 1);
    int running =
        gauge_is(node0_metrics_port, "preduce_node_groups_running ", 1);
    char s[96];
    snprintf(s, sizeof(s), "trainer 'leaver' (worker %u) disconnected", a.rank);
    if (running) {
        raw_close(&a);
        running = logged("node0", s);
    }
    kill(c.node_pid[1], SIGCONT);
    ck_assert_msg(running, "the group did not run, or node0 missed the close");
    ck_assert_int_eq(raw_done(&b, 2), 0);
    ck_assert_int_eq(raw_done(&r, 2), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_float_eq_tol(xb[i], 3.0f, 1e-5f);
        ck_assert_float_eq_tol(xr[i], 3.0f, 1e-5f);
        ck_assert_msg(xa[i] == 1.0f, "float %zu of the departed: %g", i,
                      (double)xa[i]);
    }
    snprintf(s, sizeof(s), "worker %u left: its tensors will not be written",
             a.rank);
    ck_assert_msg(logged("node0", s), "no '%s'", s);
    snprintf(s, sizeof(s), "worker %u (leaver) left", a.rank);
    ck_assert_msg(logged("sched", s), "no '%s'", s);
    munmap(xa, n * sizeof(float));
    munmap(xb, n * sizeof(float));
    munmap(xr, n * sizeof(float));
    raw_retire(&b);
    raw_retire(&r);
    still_serving();
}
END_TEST

/*
 * int8's error feedback as the node keeps it: a vector per list of
 * tensors reduced, made on the list's first int8 reduce, dropped for a
 * list that shares a tensor with it and with a destroyed tensor, all of
 * it gone with the trainer (preduce_node_wire_feedback_bytes).
 */
START_TEST(test_ipc_wire_feedback)
{
    struct raw a;
    const char *g = "preduce_node_wire_feedback_bytes ";
    ck_assert(gauge_is(node0_metrics_port,
                       "preduce_node_wire_default{wire=\"fp32\"} ", 1));
    raw_open(&a, 0, "rounder");
    uint32_t both[2];
    both[0] = raw_create(&a, 1000, NULL);
    both[1] = raw_create(&a, 500, NULL);
    raw_reduce_wire(&a, 1, both, 2, 3);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert(gauge_is(node0_metrics_port, g, 6000));
    raw_reduce_wire(&a, 2, both, 1, 3); /* shares tensor 1: dropped */
    ck_assert_int_eq(raw_done(&a, 2), 0);
    ck_assert(gauge_is(node0_metrics_port, g, 4000));
    raw_reduce_wire(&a, 3, both + 1, 1, 3);
    ck_assert_int_eq(raw_done(&a, 3), 0);
    ck_assert(gauge_is(node0_metrics_port, g, 6000));
    raw_reduce(&a, 4, both, 2); /* the node's fp32: kept as it was */
    ck_assert_int_eq(raw_done(&a, 4), 0);
    ck_assert(gauge_is(node0_metrics_port, g, 6000));
    raw_destroy(&a, both[0]);
    ck_assert(gauge_is(node0_metrics_port, g, 2000));
    raw_retire(&a);
    ck_assert(gauge_is(node0_metrics_port, g, 0));
}
END_TEST

/*
 * Trainers' encodings end to end, over two nodes: each trainer's
 * Reduce.wire goes into its node's READY, the scheduler gives the group
 * the most precise of them and both nodes run it in that one (node0's
 * metrics count it), every member ends with the same bits, close to the
 * mean; an int8 trainer's node keeps its error feedback.
 */
START_TEST(test_ipc_wire_group)
{
    const size_t n = 4096;
    struct raw a, r;
    raw_open(&a, 0, "near");
    raw_open(&r, 1, "far");
    float *xa, *xr;
    uint32_t ta = raw_create(&a, n, &xa);
    uint32_t tr = raw_create(&r, n, &xr);
    ck_assert(sched_gauge_is("preduce_sched_workers_live ", 2));
    /* A first reduce in fp32 sets up the link between the nodes. */
    raw_reduce(&a, 1, &ta, 1);
    raw_reduce(&r, 1, &tr, 1);
    ck_assert_int_eq(raw_done(&a, 1), 0);
    ck_assert_int_eq(raw_done(&r, 1), 0);
    ck_assert(gauge_is(node0_metrics_port,
                       "preduce_node_wire_groups_total{wire=\"fp32\"} ", 1));

    static const struct {
        uint32_t wa, wr; /* Reduce.wire of each: enum pr_wire + 1 */
        const char *group;
        float tol; /* the encoding's loss over two hops, at most */
    } steps[] = {{3, 3, "int8", 0.2f}, {2, 3, "bf16", 0.05f}};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        for (size_t i = 0; i < n; i++) {
            xa[i] = (float)i * 0.001f;
            xr[i] = 1.0f - (float)i * 0.002f;
        }
        raw_reduce_wire(&a, 2 + k, &ta, 1, steps[k].wa);
        raw_reduce_wire(&r, 2 + k, &tr, 1, steps[k].wr);
        ck_assert_int_eq(raw_done(&a, 2 + k), 0);
        ck_assert_int_eq(raw_done(&r, 2 + k), 0);
        for (size_t i = 0; i < n; i++) {
            float mean = 0.5f - (float)i * 0.0005f;
            ck_assert_msg(xa[i] == xr[i], "%s: float %zu differs: %g, %g",
                          steps[k].group, i, (double)xa[i], (double)xr[i]);
            ck_assert_msg(fabsf(xa[i] - mean) <= steps[k].tol,
                          "%s: float %zu is %g, the mean %g", steps[k].group, i,
                          (double)xa[i], (double)mean);
        }
        char name[96];
        snprintf(name, sizeof(name),
                 "preduce_node_wire_groups_total{wire=\"%s\"} ",
                 steps[k].group);
        ck_assert(gauge_is(node0_metrics_port, name, 1));
        snprintf(name, sizeof(name),
                 "preduce_node_wire_bytes_sent_total{wire=\"%s\"} ",
                 steps[k].group);
        ck_assert(h_metric_at(node0_metrics_port, name) > 0);
        /* The int8 vector of "near" stays, as it reduced in bf16 since. */
        ck_assert(gauge_is(node0_metrics_port,
                           "preduce_node_wire_feedback_bytes ", n * 4));
    }
    raw_retire(&a);
    raw_retire(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_ipc");
    TCase *tc = tcase_create("trainer_socket");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ipc_destroy_unknown_id);
    tcase_add_test(tc, test_ipc_destroy_busy_tensor);
    tcase_add_test(tc, test_ipc_destroy_then_reduce);
    tcase_add_test(tc, test_ipc_reduce_refusals);
    tcase_add_test(tc, test_ipc_reduce_length_mismatch);
    tcase_add_test(tc, test_ipc_tensor_create_limits);
    tcase_add_test(tc, test_ipc_message_before_welcome);
    tcase_add_test(tc, test_ipc_unexpected_message);
    tcase_add_test(tc, test_ipc_disconnect_while_queued);
    tcase_add_test(tc, test_ipc_hello_control_chars);
    suite_add_tcase(s, tc);

    tc = tcase_create("grouped");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup_node_metrics, teardown);
    tcase_add_test(tc, test_ipc_disconnect_while_grouped);
    tcase_add_test(tc, test_ipc_wire_feedback);
    tcase_add_test(tc, test_ipc_wire_group);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
