/* SPDX-License-Identifier: MIT */
/*
 * libpreduce against a real node daemon when something is refused or runs
 * out: a tensor over the daemon's max_tensor_mb, a trainer with a small
 * RLIMIT_NOFILE making many tensors, one whose descriptor table is full
 * when a memfd arrives, and (with a scripted scheduler in this process) a
 * scheduler status that is no errno. Each such failure must fail the one
 * call it concerns, never the connection.
 *
 * The trainers that change their own limits run in child processes, which
 * report through their exit status (and a line on stderr); the scripted
 * scheduler speaks the node's protocol (daemon/sched/sched.h) frame by frame.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/auth.h"
#include "preduce.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/* The fixture's node.max_tensor_mb, and the largest tensor it allows. */
#define MAX_TENSOR_FLOATS (1024 * 1024 / 4)
/* The descriptor limit the children set for themselves. */
#define CHILD_NOFILE 64

static struct h_cluster c;

static void setup(void)
{
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    const char *const node_sets[] = {"node.max_tensor_mb=1", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node_sets), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

/* Open descriptors of this process (the directory's own included). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Lowers this process's soft RLIMIT_NOFILE to `n`. 0 or -errno. */
static int limit_fds(rlim_t n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    rl.rlim_cur = n;
    return setrlimit(RLIMIT_NOFILE, &rl) < 0 ? -errno : 0;
}

/* Runs fn in a child process, whose exit status is fn's return value. */
static pid_t spawn(int (*fn)(void *arg), void *arg)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

/*
 * A tensor over max_tensor_mb fails its create with -EINVAL; the same
 * connection then makes a tensor and reduces with the ones made before.
 */
START_TEST(test_client_create_over_limit)
{
    preduce_client_t *cl;
    ck_assert_int_eq(preduce_connect(c.sock[0], "greedy", 5000, &cl), 0);
    preduce_tensor_t *t[2], *big = (preduce_tensor_t *)&big;
    ck_assert_int_eq(preduce_tensor_create(cl, 16, 5000, &t[0]), 0);
    int rc = preduce_tensor_create(cl, MAX_TENSOR_FLOATS + 1, 5000, &big);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_null(big);
    ck_assert(h_log_contains(&c, "node0",
                             "trainer 'greedy': tensor of 262145 "
                             "floats: must be 1..262144"));
    rc = preduce_tensor_create(cl, 16, 5000, &t[1]);
    ck_assert_msg(rc == 0, "create after a refused one: %s",
                  preduce_strerror(rc));
    ck_assert_int_ge(preduce_rank(cl), 0);
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < 16; j++)
            preduce_tensor_data(t[i])[j] = (float)(i + 1);
    /* Alone in the job: a group of one, which keeps the model. */
    ck_assert_int_eq(preduce_reduce(cl, t, 2, 20000), 0);
    ck_assert_uint_eq(preduce_result_size(preduce_last_result(cl)), 1);
    ck_assert(preduce_tensor_data(t[1])[15] == 2.0f);
    ck_assert(!h_log_contains(&c, "sched", "(greedy) left"));
    preduce_close(cl);
}
END_TEST

/*
 * With RLIMIT_NOFILE at 64, 200 tensors: each create succeeds, the
 * process holds no more descriptors afterwards than before, and one
 * reduce covers them all.
 */
enum { MANY = 200 };

static int many_tensors(void *arg)
{
    (void)arg;
    if (limit_fds(CHILD_NOFILE) < 0)
        return 2;
    preduce_client_t *cl;
    int rc = preduce_connect(c.sock[0], "many", 5000, &cl);
    if (rc < 0)
        return 3;
    int before = count_fds();
    static preduce_tensor_t *t[MANY];
    for (int i = 0; i < MANY; i++) {
        rc = preduce_tensor_create(cl, 16, 5000, &t[i]);
        if (rc < 0) {
            fprintf(stderr, "many: tensor %d: %s\n", i, preduce_strerror(rc));
            return 4;
        }
        preduce_tensor_data(t[i])[0] = (float)i;
    }
    int after = count_fds();
    if (after != before) {
        fprintf(stderr, "many: %d descriptors before, %d after\n", before,
                after);
        return 5;
    }
    rc = preduce_reduce(cl, t, MANY, 20000);
    if (rc < 0) {
        fprintf(stderr, "many: reduce: %s\n", preduce_strerror(rc));
        return 6;
    }
    for (int i = 0; i < MANY; i++)
        if (preduce_tensor_data(t[i])[0] != (float)i)
            return 7;
    preduce_close(cl);
    return 0;
}

START_TEST(test_client_many_tensors)
{
    pid_t pid = spawn(many_tensors, NULL);
    ck_assert_int_eq(h_wait(pid, 30000), 0);
}
END_TEST

/*
 * The descriptor table is full when a tensor's memfd arrives: the kernel
 * drops it, and that create fails with -EMFILE. The connection goes on:
 * once descriptors are free again, the next create and a reduce over the
 * old and the new tensor work. The daemon freed the tensor that never
 * arrived (the parent checks its maps while the child waits on `sync`).
 */
static int sync_up[2], sync_down[2];

static int out_of_fds(void *arg)
{
    (void)arg;
    if (limit_fds(CHILD_NOFILE) < 0)
        return 2;
    preduce_client_t *cl;
    int rc = preduce_connect(c.sock[0], "fdless", 5000, &cl);
    if (rc < 0)
        return 3;
    preduce_tensor_t *t[2], *lost;
    if (preduce_tensor_create(cl, 16, 5000, &t[0]) < 0)
        return 4;
    int dups[2 * CHILD_NOFILE], ndups = 0, fd;
    while (ndups < 2 * CHILD_NOFILE && (fd = dup(sync_up[1])) >= 0)
        dups[ndups++] = fd;
    if (errno != EMFILE)
        return 5;
    rc = preduce_tensor_create(cl, 16, 5000, &lost);
    while (ndups > 0)
        close(dups[--ndups]);
    if (rc != -EMFILE) {
        fprintf(stderr, "fdless: create with no descriptor free: %d (%s)\n", rc,
                preduce_strerror(rc));
        return 6;
    }
    if (preduce_rank(cl) < 0)
        return 7;
    rc = preduce_tensor_create(cl, 16, 5000, &t[1]);
    if (rc < 0) {
        fprintf(stderr, "fdless: create afterwards: %s\n",
                preduce_strerror(rc));
        return 8;
    }
    preduce_tensor_data(t[0])[0] = 1.0f;
    preduce_tensor_data(t[1])[0] = 2.0f;
    rc = preduce_reduce(cl, t, 2, 20000);
    if (rc < 0) {
        fprintf(stderr, "fdless: reduce: %s\n", preduce_strerror(rc));
        return 9;
    }
    char b = 'k';
    if (write(sync_up[1], &b, 1) != 1 || read(sync_down[0], &b, 1) != 1)
        return 10;
    preduce_close(cl);
    return 0;
}

START_TEST(test_client_out_of_fds)
{
    ck_assert_int_eq(pipe(sync_up), 0);
    ck_assert_int_eq(pipe(sync_down), 0);
    pid_t pid = spawn(out_of_fds, NULL);
    struct pollfd pf = {.fd = sync_up[0], .events = POLLIN};
    char b = 0;
    int ready = poll(&pf, 1, 20000) == 1 && read(sync_up[0], &b, 1) == 1;
    int kept = ready && h_node_maps_tensor(&c, 0, "fdless", 1) &&
               h_node_maps_tensor(&c, 0, "fdless", 3);
    int freed = ready && h_node_wait_maps(&c, 0, "fdless", 2, 0);
    ck_assert_int_eq(write(sync_down[1], "g", 1), 1);
    int st = h_wait(pid, 10000);
    ck_assert_msg(ready, "the child did not get there (status %d)", st);
    ck_assert_msg(kept, "tensors 1 and 3 are not mapped in the daemon");
    ck_assert_msg(freed, "the daemon still maps the tensor that was lost");
    ck_assert_int_eq(st, 0);
}
END_TEST

/* ---- a scripted scheduler ---------------------------------------------- */

static int sched_lfd = -1;

static void setup_scripted(void)
{
    memset(&c, 0, sizeof(c));
    snprintf(c.dir, sizeof(c.dir), "/tmp/preduce-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(c.dir));
    sched_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sched_lfd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(sched_lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(sched_lfd, 4), 0);
    ck_assert_int_eq(getsockname(sched_lfd, (struct sockaddr *)&sa, &len), 0);
    c.sched_port = ntohs(sa.sin_port);
    c.nnodes = 1;
    ck_assert_int_eq(h_node_start(&c, 0, NULL), 0);
}

static void teardown_scripted(void)
{
    close(sched_lfd);
    sched_lfd = -1;
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

/* n bytes within 5 s: 0, or -1 (and a message) on EOF or timeout. */
static int read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 5000) <= 0)
            return -1;
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void sched_send(int fd, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len), 0);
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
    free(buf);
}

/* The node's next message but pings (answered) and pongs: of case want. */
static Pr__V1__Msg *sched_expect(int fd, Pr__V1__Msg__BodyCase want)
{
    for (;;) {
        uint8_t hdr[PR_FRAME_HDR_LEN];
        struct pr_frame_hdr h;
        ck_assert_msg(read_full(fd, hdr, sizeof(hdr)) == 0,
                      "the node sent nothing for 5 s (message %d wanted)",
                      (int)want);
        ck_assert_int_eq(pr_frame_hdr_decode(hdr, PR_CTRL_MAX_FRAME, &h), 0);
        ck_assert_int_eq(h.type, PR_FRAME_MSG);
        uint8_t *p = malloc(h.len ? h.len : 1);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(read_full(fd, p, h.len), 0);
        Pr__V1__Msg *m = pr_msg_unpack(p, h.len);
        free(p);
        ck_assert_ptr_nonnull(m);
        if (m->body_case == PR__V1__MSG__BODY_PING) {
            Pr__V1__Msg r = PR__V1__MSG__INIT;
            r.body_case = PR__V1__MSG__BODY_PONG;
            r.pong = m->ping;
            sched_send(fd, &r);
        }
        if (m->body_case == PR__V1__MSG__BODY_PING ||
            m->body_case == PR__V1__MSG__BODY_PONG) {
            pr_msg_free(m);
            continue;
        }
        ck_assert_msg(m->body_case == want, "a %s message instead of %d",
                      pr_msg_name(m), (int)want);
        return m;
    }
}

/* Accepts node 0 and takes it into the job as node 1 (no cluster key). */
static int sched_accept_node(void)
{
    struct pollfd pf = {.fd = sched_lfd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 5000), 1);
    int fd = accept4(sched_lfd, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    uint8_t ns[PR_AUTH_NONCE_LEN];
    Pr__V1__Challenge ch = PR__V1__CHALLENGE__INIT;
    pr_auth_challenge(NULL, ns, &ch);
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_CHALLENGE;
    m.challenge = &ch;
    sched_send(fd, &m);
    Pr__V1__Msg *h = sched_expect(fd, PR__V1__MSG__BODY_HELLO);
    ck_assert_int_eq(h->hello->role, PR__V1__ROLE__ROLE_NODE);
    pr_msg_free(h);
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = 1;
    w.job = "scripted";
    m.body_case = PR__V1__MSG__BODY_WELCOME;
    m.welcome = &w;
    sched_send(fd, &m);
    return fd;
}

/* Waits for a READY and refuses it with `status`. */
static void sched_reject(int fd, int status)
{
    Pr__V1__Msg *m = sched_expect(fd, PR__V1__MSG__BODY_READY);
    Pr__V1__Reject r = PR__V1__REJECT__INIT;
    r.rank = m->ready->rank;
    r.seq = m->ready->seq;
    r.status = status;
    r.reason = "scripted";
    pr_msg_free(m);
    Pr__V1__Msg out = PR__V1__MSG__INIT;
    out.body_case = PR__V1__MSG__BODY_REJECT;
    out.reject = &r;
    sched_send(fd, &out);
}

/* A trainer whose first reduce the scheduler refuses with no errno. */
static int refused_trainer(void *arg)
{
    (void)arg;
    preduce_client_t *cl;
    int rc = preduce_connect(c.sock[0], "w0", 5000, &cl);
    if (rc < 0) {
        fprintf(stderr, "w0: connect: %s\n", preduce_strerror(rc));
        return 2;
    }
    preduce_tensor_t *t;
    if (preduce_tensor_create(cl, 16, 5000, &t) < 0)
        return 3;
    rc = preduce_reduce(cl, &t, 1, 5000);
    if (rc != -ECONNRESET) {
        fprintf(stderr, "w0: reduce 1: %d, not -ECONNRESET\n", rc);
        return 4;
    }
    rc = preduce_reduce(cl, &t, 1, 5000);
    if (rc != -ETIMEDOUT) {
        fprintf(stderr, "w0: reduce 2: %d (%s), not -ETIMEDOUT\n", rc,
                preduce_strerror(rc));
        return 5;
    }
    if (preduce_rank(cl) != 4)
        return 6;
    preduce_close(cl);
    return 0;
}

/*
 * The scheduler refuses a READY with status -5000, which is no errno: the
 * node gives the trainer -ECONNRESET as that reduce's status, as for any
 * status outside the documented codes (proto/status.h; one out of range
 * would make the library drop the connection), and the next reduce is
 * answered normally.
 */
START_TEST(test_client_sched_status_out_of_range)
{
    int fd = sched_accept_node();
    pid_t pid = spawn(refused_trainer, NULL);
    Pr__V1__Msg *m = sched_expect(fd, PR__V1__MSG__BODY_WORKER_JOIN);
    ck_assert_str_eq(m->worker_join->name, "w0");
    Pr__V1__WorkerJoined j = PR__V1__WORKER_JOINED__INIT;
    j.cookie = m->worker_join->cookie;
    j.rank = 4;
    pr_msg_free(m);
    Pr__V1__Msg out = PR__V1__MSG__INIT;
    out.body_case = PR__V1__MSG__BODY_WORKER_JOINED;
    out.worker_joined = &j;
    sched_send(fd, &out);
    sched_reject(fd, -5000);
    sched_reject(fd, -ETIMEDOUT);
    m = sched_expect(fd, PR__V1__MSG__BODY_WORKER_LEAVE);
    ck_assert_uint_eq(m->worker_leave->rank, 4);
    pr_msg_free(m);
    ck_assert_int_eq(h_wait(pid, 10000), 0);
    close(fd);
}
END_TEST

/* A node with small quotas: 8 tensors and 2 MiB a trainer, 12 in all. */
static void setup_quotas(void)
{
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    const char *const node_sets[] = {
        "node.max_tensor_mb=1", "node.trainer_max_tensors=8",
        "node.trainer_max_mb=2", "node.max_tensors=12", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node_sets), 0);
}

/*
 * Tensors past a trainer's quota fail with -EDQUOT, past the node's with
 * -ENOSPC; each refusal fails only that create (one trainer made 65,336
 * tensors and the node then ran out of maps for everyone).
 */
START_TEST(test_client_tensor_quotas)
{
    preduce_client_t *a, *b, *d;
    preduce_tensor_t *ta[9], *tb[3], *td[3];
    ck_assert_int_eq(preduce_connect(c.sock[0], "many", 5000, &a), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(preduce_tensor_create(a, 16, 5000, &ta[i]), 0);
    ck_assert_int_eq(preduce_tensor_create(a, 16, 5000, &ta[8]), -EDQUOT);
    ck_assert_str_eq(preduce_last_error(a),
                     "the trainer holds 8 tensors, at most 8 "
                     "(node.trainer_max_tensors)");
    ck_assert(h_log_contains(&c, "node0",
                             "trainer 'many': tensor of 16 floats refused: "
                             "the trainer holds 8 tensors, at most 8 "
                             "(node.trainer_max_tensors)"));
    /* A failure the library finds itself has no daemon reason. */
    ck_assert_int_eq(preduce_reduce(a, ta, 0, 10000), -EINVAL);
    ck_assert_str_eq(preduce_last_error(a), "");
    /* The connection and the 8 tensors stay usable. */
    ck_assert_int_eq(preduce_reduce(a, ta, 8, 10000), 0);
    ck_assert_str_eq(preduce_last_error(a), "");
    preduce_tensor_destroy(ta[7]);
    ck_assert_int_eq(preduce_tensor_create(a, 16, 5000, &ta[7]), 0);

    /* By size: two tensors of 1 MiB fill a 2 MiB quota. */
    ck_assert_int_eq(preduce_connect(c.sock[0], "large", 5000, &b), 0);
    ck_assert_int_eq(preduce_tensor_create(b, MAX_TENSOR_FLOATS, 5000, &tb[0]),
                     0);
    ck_assert_int_eq(preduce_tensor_create(b, MAX_TENSOR_FLOATS, 5000, &tb[1]),
                     0);
    ck_assert_int_eq(preduce_tensor_create(b, 1, 5000, &tb[2]), -EDQUOT);
    ck_assert(h_log_contains(&c, "node0",
                             "the trainer's tensors would take 3 MiB, at "
                             "most 2 (node.trainer_max_mb)"));

    /* The node holds 10: a third trainer gets 2 more, then -ENOSPC. */
    ck_assert_int_eq(preduce_connect(c.sock[0], "third", 5000, &d), 0);
    ck_assert_int_eq(preduce_tensor_create(d, 16, 5000, &td[0]), 0);
    ck_assert_int_eq(preduce_tensor_create(d, 16, 5000, &td[1]), 0);
    ck_assert_int_eq(preduce_tensor_create(d, 16, 5000, &td[2]), -ENOSPC);
    ck_assert(
        h_log_contains(&c, "node0", "this node holds 12 tensors, at most 12"));
    /* A trainer that leaves gives its tensors back to the node. */
    preduce_close(b);
    int rc = -ENOSPC;
    for (int i = 0; i < 300 && rc == -ENOSPC; i++) {
        rc = preduce_tensor_create(d, 16, 5000, &td[2]);
        if (rc == -ENOSPC)
            usleep(10000);
    }
    ck_assert_int_eq(rc, 0);
    /* Alone in the job (a's layout, 128 floats, would refuse 48). */
    preduce_close(a);
    for (int i = 0; i < 300 && !h_log_contains(&c, "sched", "(many) left"); i++)
        usleep(10000);
    ck_assert_int_eq(preduce_reduce(d, td, 3, 10000), 0);
    preduce_close(d);
}
END_TEST

/* A node with quotas per job: 5 tensors and 3 MiB for each job. */
static void setup_job_quotas(void)
{
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    const char *const node_sets[] = {"node.max_tensor_mb=1",
                                     "node.job_max_tensors=5",
                                     "node.job_max_mb=3", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, node_sets), 0);
}

/* A trainer of job `job` on node 0. */
static preduce_client_t *connect_job(const char *name, const char *job)
{
    preduce_options_t *o;
    preduce_client_t *cl = NULL;
    ck_assert_int_eq(preduce_options_create(&o), 0);
    ck_assert_int_eq(preduce_options_set(o, "job", job), 0);
    ck_assert_int_eq(preduce_connect_with(c.sock[0], name, o, 5000, &cl), 0);
    preduce_options_destroy(o);
    ck_assert_str_eq(preduce_job(cl), job);
    return cl;
}

/*
 * A job's trainers together stay within node.job_max_tensors and
 * node.job_max_mb: a create past them fails with -EDQUOT naming the job,
 * while another job on the same node still gets its own; a tensor given
 * back, or a trainer gone, makes room in its job again.
 */
START_TEST(test_client_job_quotas)
{
    preduce_client_t *a1 = connect_job("a1", "a");
    preduce_client_t *a2 = connect_job("a2", "a");
    preduce_client_t *b1 = connect_job("b1", "b");
    preduce_tensor_t *ta1[3], *ta2[3], *tb[4];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(preduce_tensor_create(a1, 16, 5000, &ta1[i]), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(preduce_tensor_create(a2, 16, 5000, &ta2[i]), 0);
    ck_assert_int_eq(preduce_tensor_create(a2, 16, 5000, &ta2[2]), -EDQUOT);
    ck_assert_str_eq(preduce_last_error(a2),
                     "job 'a' holds 5 tensors here, at most 5 "
                     "(node.job_max_tensors)");
    ck_assert(h_log_contains(&c, "node0",
                             "trainer 'a2': tensor of 16 floats refused: job "
                             "'a' holds 5 tensors here, at most 5"));

    /* Job b is not held back by a: by size, 3 MiB in all. */
    ck_assert_int_eq(preduce_tensor_create(b1, 16, 5000, &tb[0]), 0);
    ck_assert_int_eq(preduce_tensor_create(b1, MAX_TENSOR_FLOATS, 5000, &tb[1]),
                     0);
    ck_assert_int_eq(preduce_tensor_create(b1, MAX_TENSOR_FLOATS, 5000, &tb[2]),
                     0);
    ck_assert_int_eq(preduce_tensor_create(b1, MAX_TENSOR_FLOATS, 5000, &tb[3]),
                     -EDQUOT);
    ck_assert_str_eq(preduce_last_error(b1),
                     "job 'b' would hold 4 MiB here, at most 3 "
                     "(node.job_max_mb)");

    /*
     * A tensor given back, then a trainer gone, make room in job a. The
     * destroy has no answer and a2's create comes on another socket: the
     * node may read that first.
     */
    preduce_tensor_destroy(ta1[2]);
    int rc = -EDQUOT;
    for (int i = 0; i < 300 && rc == -EDQUOT; i++) {
        rc = preduce_tensor_create(a2, 16, 5000, &ta2[2]);
        if (rc == -EDQUOT)
            usleep(10000);
    }
    ck_assert_int_eq(rc, 0);
    preduce_tensor_t *more;
    ck_assert_int_eq(preduce_tensor_create(a2, 16, 5000, &more), -EDQUOT);
    preduce_close(a1);
    rc = -EDQUOT;
    for (int i = 0; i < 300 && rc == -EDQUOT; i++) {
        rc = preduce_tensor_create(a2, 16, 5000, &more);
        if (rc == -EDQUOT)
            usleep(10000);
    }
    ck_assert_int_eq(rc, 0);
    preduce_close(a2);
    preduce_close(b1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_client_errors");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_client_create_over_limit);
    tcase_add_test(tc, test_client_many_tensors);
    tcase_add_test(tc, test_client_out_of_fds);
    suite_add_tcase(s, tc);

    tc = tcase_create("quotas");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup_quotas, teardown);
    tcase_add_test(tc, test_client_tensor_quotas);
    suite_add_tcase(s, tc);

    tc = tcase_create("job_quotas");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup_job_quotas, teardown);
    tcase_add_test(tc, test_client_job_quotas);
    suite_add_tcase(s, tc);

    tc = tcase_create("scripted_scheduler");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_scripted, teardown_scripted);
    tcase_add_test(tc, test_client_sched_status_out_of_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
