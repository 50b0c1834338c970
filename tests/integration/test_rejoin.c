/* SPDX-License-Identifier: MIT */
/*
 * A node daemon that comes back to the scheduler while its previous
 * connection still looks alive there (its reset never arrived, or its close
 * is not seen yet): the scheduler forgets the previous one at once, so the
 * daemon's trainers get their names back. And what a node's READY may ask
 * of the group's encoding. Speaks the node protocol over loopback to a
 * real scheduler.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static struct h_cluster c;

static void setup(void)
{
    ck_assert_int_eq(h_cluster_start(&c, 0, NULL, NULL), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

static int dial_sched(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(c.sched_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_msg(int fd, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(m, 1 << 20, &buf, &len), 0);
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
    free(buf);
}

/* 0 on n bytes, -1 when the connection ended or timed out first. */
static int read_full(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* The next message, or NULL when the connection ended. */
static Pr__V1__Msg *recv_msg(int fd)
{
    uint8_t hb[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr h;
    if (read_full(fd, hb, sizeof(hb)) < 0)
        return NULL;
    ck_assert_int_eq(pr_frame_hdr_decode(hb, 1 << 20, &h), 0);
    ck_assert_int_eq(h.type, PR_FRAME_MSG);
    uint8_t *p = malloc(h.len ? h.len : 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(read_full(fd, p, h.len), 0);
    Pr__V1__Msg *m = pr_msg_unpack(p, h.len);
    free(p);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* Skips what else the scheduler says (peer lists) up to a `body` message. */
static Pr__V1__Msg *expect(int fd, Pr__V1__Msg__BodyCase body)
{
    for (;;) {
        Pr__V1__Msg *m = recv_msg(fd);
        ck_assert_msg(m != NULL, "connection ended before message %d", body);
        if (m->body_case == body)
            return m;
        pr_msg_free(m);
    }
}

/* Says hello as node `name` with data address `addr`; returns its id. */
static uint32_t node_hello(int fd, const char *name, const char *addr)
{
    pr_msg_free(expect(fd, PR__V1__MSG__BODY_CHALLENGE));
    Pr__V1__Hello hello = PR__V1__HELLO__INIT;
    hello.version = PR_PROTO_VERSION;
    hello.role = PR__V1__ROLE__ROLE_NODE;
    hello.name = (char *)name;
    hello.data_addr = (char *)addr;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &hello;
    send_msg(fd, &m);
    Pr__V1__Msg *w = expect(fd, PR__V1__MSG__BODY_WELCOME);
    uint32_t id = w->welcome->id;
    pr_msg_free(w);
    return id;
}

/* Registers worker `name`; returns WorkerJoined's status. */
static int worker_join(int fd, const char *name, uint32_t cookie)
{
    Pr__V1__WorkerJoin j = PR__V1__WORKER_JOIN__INIT;
    j.cookie = cookie;
    j.name = (char *)name;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_WORKER_JOIN;
    m.worker_join = &j;
    send_msg(fd, &m);
    Pr__V1__Msg *r = expect(fd, PR__V1__MSG__BODY_WORKER_JOINED);
    ck_assert_uint_eq(r->worker_joined->cookie, cookie);
    int status = r->worker_joined->status;
    pr_msg_free(r);
    return status;
}

/*
 * The scheduler closed fd: reading past what it sent before ends in EOF
 * or a reset, not in the 5 s receive timeout.
 */
static int closed_by_peer(int fd)
{
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        ;
    return r == 0 || errno == ECONNRESET;
}

START_TEST(test_rejoin_same_node_frees_names)
{
    int a = dial_sched();
    uint32_t ida = node_hello(a, "n0", "127.0.0.1:9");
    ck_assert_int_eq(worker_join(a, "w0", 1), 0);
    /* Another node's worker of the same name is refused... */
    int other = dial_sched();
    node_hello(other, "n1", "127.0.0.1:10");
    ck_assert_int_eq(worker_join(other, "w0", 2), -EEXIST);

    /* ...but the same daemon back (name and address) takes over. */
    int b = dial_sched();
    uint32_t idb = node_hello(b, "n0", "127.0.0.1:9");
    ck_assert_uint_ne(idb, ida);
    ck_assert_int_eq(worker_join(b, "w0", 3), 0);
    ck_assert(closed_by_peer(a));
    ck_assert(h_log_contains(&c, "sched", "its daemon connected again"));
    /* The node of the other name stays. */
    ck_assert_int_eq(worker_join(other, "w1", 4), 0);
    close(a);
    close(b);
    close(other);
}
END_TEST

/*
 * Two live daemons of one name but other data addresses (a copied
 * config): both are served, and the scheduler warns, naming both
 * addresses, rather than accepting the second without a word.
 */
START_TEST(test_rejoin_name_conflict_warned)
{
    int a = dial_sched();
    uint32_t ida = node_hello(a, "twin", "127.0.0.1:9");
    int b = dial_sched();
    uint32_t idb = node_hello(b, "twin", "127.0.0.1:11");
    char want[200];
    snprintf(want, sizeof(want),
             "node %u: name 'twin' is node %u's too (data at 127.0.0.1:9); "
             "this one's data is at 127.0.0.1:11: two daemons with one name",
             idb, ida);
    for (int i = 0; i < 300 && !h_log_contains(&c, "sched", want); i++)
        usleep(10000);
    ck_assert_msg(h_log_contains(&c, "sched", want), "no \"%s\"", want);
    /* Neither was taken for the other's previous life. */
    ck_assert_int_eq(worker_join(a, "wa", 1), 0);
    ck_assert_int_eq(worker_join(b, "wb", 2), 0);
    ck_assert(!h_log_contains(&c, "sched", "its daemon connected again"));
    close(a);
    close(b);
}
END_TEST

/* Registers worker `name` in job `job` under allreduce: its rank. */
static uint32_t worker_join_allreduce(int fd, const char *name, uint32_t cookie,
                                      const char *job, uint32_t *job_id)
{
    char *settings[] = {"policy=allreduce"};
    Pr__V1__WorkerJoin j = PR__V1__WORKER_JOIN__INIT;
    j.cookie = cookie;
    j.name = (char *)name;
    j.job = (char *)job;
    j.n_settings = 1;
    j.settings = settings;
    Pr__V1__Msg m = PR_MSG_OF(WORKER_JOIN, worker_join, &j);
    send_msg(fd, &m);
    Pr__V1__Msg *r = expect(fd, PR__V1__MSG__BODY_WORKER_JOINED);
    ck_assert_int_eq(r->worker_joined->status, 0);
    uint32_t rank = r->worker_joined->rank;
    *job_id = r->worker_joined->job;
    pr_msg_free(r);
    return rank;
}

static void ready(int fd, uint32_t job, uint32_t rank, uint64_t seq,
                  uint32_t wire)
{
    Pr__V1__Ready r = PR__V1__READY__INIT;
    r.job = job;
    r.rank = rank;
    r.seq = seq;
    r.version = seq;
    r.nfloats = 64;
    r.wire = wire;
    Pr__V1__Msg m = PR_MSG_OF(READY, ready, &r);
    send_msg(fd, &m);
}

/*
 * A READY's wire is enum pr_wire (0 fp32, 1 bf16, 2 int8): one past it is
 * refused with -EINVAL and a reason, the node's link and the worker stay;
 * a group takes the most precise encoding its members asked for.
 */
START_TEST(test_ready_wire_refused_or_most_precise)
{
    int fd = dial_sched();
    node_hello(fd, "n0", "127.0.0.1:9");
    uint32_t job, job2;
    uint32_t r0 = worker_join_allreduce(fd, "w0", 1, "wires", &job);
    uint32_t r1 = worker_join_allreduce(fd, "w1", 2, "wires", &job2);
    ck_assert_uint_eq(job, job2);

    ready(fd, job, r0, 1, 3);
    Pr__V1__Msg *m = expect(fd, PR__V1__MSG__BODY_REJECT);
    ck_assert_uint_eq(m->reject->rank, r0);
    ck_assert_uint_eq(m->reject->seq, 1);
    ck_assert_int_eq(m->reject->status, -EINVAL);
    ck_assert_str_eq(m->reject->reason,
                     "an encoding this scheduler does not know");
    pr_msg_free(m);

    ready(fd, job, r0, 2, 2); /* int8 */
    ready(fd, job, r1, 2, 1); /* bf16 */
    m = expect(fd, PR__V1__MSG__BODY_GROUP);
    ck_assert_uint_eq(m->group->n_members, 2);
    ck_assert_uint_eq(m->group->nfloats, 64);
    ck_assert_uint_eq(m->group->wire, 1);
    pr_msg_free(m);
    close(fd);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_rejoin");
    TCase *tc = tcase_create("rejoin");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_rejoin_same_node_frees_names);
    tcase_add_test(tc, test_rejoin_name_conflict_warned);
    tcase_add_test(tc, test_ready_wire_refused_or_most_precise);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
