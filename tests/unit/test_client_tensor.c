/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for libpreduce's tensors and reduces (suite "client_tensor"),
 * without a daemon: shared memory, answers out of order, waiting and
 * polling, the daemon's errors and wrong answers, and timeouts. The
 * scripted server is client_fixture.h.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "preduce.h"
#include "proto/frame.h"
#include "tests/unit/client_fixture.h"
#include "tests/check_run.h"

/* ---- tensors and reduces ---------------------------------------------- */

static void script_shared(struct srv *s, int fd)
{
    uint32_t id = 11;
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, id) ||
        !cf_srv_reduce(s, fd, 1, 1, &id, 1))
        return;
    /* The client wrote i / 2 before it called reduce. */
    for (size_t i = 0; i < s->nfloats; i++) {
        if (!EXPECT(s, s->map[i] == (float)i / 2))
            return;
        s->map[i] = 100.0f + (float)i;
    }
    uint32_t members[] = {3, 5};
    uint64_t versions[] = {1, 6};
    double weights[] = {0.25, 0.75};
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    d.seq = 1;
    d.group_id = 42;
    d.n_members = d.n_member_versions = d.n_member_weights = 2;
    d.members = members;
    d.member_versions = versions;
    d.member_weights = weights;
    d.weight = 0.25;
    d.version = 7;
    d.rank = 3;
    d.wire = 3; /* int8 */
    m.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
    m.reduce_done = &d;
    cf_srv_send(fd, &m, -1);

    /* Second reduce: version 7 + 1; a member dies. */
    if (!cf_srv_reduce(s, fd, 2, 8, &id, 1))
        return;
    cf_send_done(fd, 2, -ECONNRESET, 0, 0);
    Pr__V1__Msg *x = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_DESTROY);
    if (x)
        EXPECT(s, x->tensor_destroy->tensor_id == id);
    pr_msg_free(x);
    cf_wait_eof(fd);
}

START_TEST(test_client_shared_tensor)
{
    struct srv s;
    int fds = cf_count_fds();
    cf_srv_start(&s, script_shared, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 1000, 3000, &t), 0);
    ck_assert_uint_eq(preduce_tensor_len(t), 1000);
    float *x = preduce_tensor_data(t);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < 1000; i++) {
        ck_assert(x[i] == 0.0f);
        x[i] = (float)i / 2;
    }
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), 0);
    for (size_t i = 0; i < 1000; i++)
        ck_assert(x[i] == 100.0f + (float)i);

    const preduce_result_t *r = preduce_last_result(c);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(preduce_result_group(r), 42);
    ck_assert_uint_eq(preduce_result_size(r), 2);
    ck_assert_uint_eq(preduce_result_version(r), 7);
    ck_assert(preduce_result_weight(r) == 0.25);
    ck_assert_str_eq(preduce_result_wire(r), "int8");
    /* This daemon's welcome said no transport.wire (an older one). */
    ck_assert_str_eq(preduce_wire(c), "");
    uint32_t rank;
    uint64_t version;
    double weight;
    ck_assert_int_eq(preduce_result_member(r, 1, &rank, &version, &weight), 0);
    ck_assert_uint_eq(rank, 5);
    ck_assert_uint_eq(version, 6);
    ck_assert(weight == 0.75);
    ck_assert_int_eq(preduce_result_member(r, 0, &rank, NULL, NULL), 0);
    ck_assert_uint_eq(rank, 3);
    ck_assert_int_eq(preduce_result_member(r, 2, &rank, NULL, NULL), -EINVAL);

    /* A failed reduce leaves tensors, version and last result alone. */
    x[0] = -1.0f;
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ECONNRESET);
    ck_assert(x[0] == -1.0f);
    ck_assert_ptr_eq(preduce_last_result(c), r);
    ck_assert_uint_eq(preduce_result_group(r), 42);

    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
    ck_assert_int_eq(cf_count_fds(), fds);
}
END_TEST

/*
 * reduce_done for seq 1 arrives before the tensor_created the client waits
 * for; then a reduce over two tensors checks the ids' order.
 */
static void script_interleave(struct srv *s, int fd)
{
    uint32_t ids[] = {2, 1};
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1) ||
        !cf_srv_reduce(s, fd, 1, 1, ids + 1, 1))
        return;
    munmap(s->map, s->nfloats * 4);
    close(s->memfd);
    s->map = NULL;
    s->memfd = -1;
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    cf_send_done(fd, 1, 0, 9, 4);
    s->nfloats = 8;
    s->memfd = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(s->memfd, 32) == 0))
        return;
    cf_send_created(fd, 2, 8, s->memfd);
    if (!cf_srv_reduce(s, fd, 2, 5, ids, 2))
        return;
    cf_send_done(fd, 2, 0, 10, 6);
    cf_wait_eof(fd);
}

START_TEST(test_client_interleave)
{
    struct srv s;
    cf_srv_start(&s, script_interleave, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t1, *t2;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t1), 0);
    ck_assert_int_eq(preduce_reduce_start(c, &t1, 1, 5000), 0);
    ck_assert_int_eq(preduce_tensor_destroy(t1), -EBUSY);
    ck_assert_int_eq(preduce_reduce_start(c, &t1, 1, 5000), -EBUSY);
    ck_assert_int_eq(preduce_reduce(c, &t1, 1, 5000), -EBUSY);
    /* The answer to the reduce is read (and kept) while this waits. */
    ck_assert_int_eq(preduce_tensor_create(c, 8, 3000, &t2), 0);
    struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 1);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), 0);
    ck_assert_int_eq(poll(&pf, 1, 0), 0);
    ck_assert_uint_eq(preduce_result_group(preduce_last_result(c)), 9);
    ck_assert_uint_eq(preduce_result_version(preduce_last_result(c)), 4);

    preduce_tensor_t *both[] = {t2, t1};
    ck_assert_int_eq(preduce_reduce(c, both, 2, 5000), 0);
    ck_assert_uint_eq(preduce_result_group(preduce_last_result(c)), 10);
    preduce_close(c); /* frees both tensors */
    cf_srv_stop(&s);
}
END_TEST

/* Answers the reduce only after the test wrote a byte to go_pipe. */
static int go_pipe[2];

static void script_late(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1) ||
        !cf_srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    char b;
    if (!EXPECT(s, cf_read_full(go_pipe[0], &b, 1) == 0))
        return;
    cf_send_done(fd, 1, 0, 5, 3);
    cf_wait_eof(fd);
}

START_TEST(test_client_wait_poll)
{
    struct srv s;
    ck_assert_int_eq(pipe(go_pipe), 0);
    cf_srv_start(&s, script_late, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce_start(c, &t, 1, 5000), 0);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), -EAGAIN);
    int64_t t0 = cf_now_ms();
    ck_assert_int_eq(preduce_reduce_wait(c, 200), -EAGAIN);
    ck_assert_int_ge(cf_now_ms() - t0, 190);
    struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 0);
    ck_assert_int_eq(write(go_pipe[1], "g", 1), 1);
    ck_assert_int_eq(poll(&pf, 1, 3000), 1);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), 0);
    ck_assert_uint_eq(preduce_result_version(preduce_last_result(c)), 3);
    preduce_close(c);
    cf_srv_stop(&s);
    close(go_pipe[0]);
    close(go_pipe[1]);
}
END_TEST

static void script_wrong_seq(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1) ||
        !cf_srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    cf_send_done(fd, 99, 0, 1, 2);
    cf_wait_eof(fd);
}

START_TEST(test_client_reduce_wrong_seq)
{
    struct srv s;
    cf_srv_start(&s, script_wrong_seq, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    /* A reduce that breaks the connection says so, whatever broke it. */
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ENOTCONN);
    ck_assert_ptr_null(preduce_last_result(c));
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ENOTCONN);
    preduce_tensor_t *u;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &u), -ENOTCONN);
    ck_assert_ptr_null(u);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/* The daemon gives up on the worker in the middle of a reduce. */
static void script_error_midway(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1) ||
        !cf_srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    cf_send_error(fd, -ESHUTDOWN);
}

/*
 * The error breaks the connection: the reduce that reads it returns
 * -ENOTCONN (a reduce returns only the codes preduce.h lists), and so do
 * later calls.
 */
START_TEST(test_client_daemon_error)
{
    struct srv s;
    cf_srv_start(&s, script_error_midway, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t, *u;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ENOTCONN);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &u), -ENOTCONN);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

static void script_close_after_tensor(struct srv *s, int fd)
{
    if (cf_srv_welcome(s, fd))
        cf_srv_tensor(s, fd, 1);
}

START_TEST(test_client_no_sigpipe)
{
    struct srv s;
    signal(SIGPIPE, SIG_DFL);
    cf_srv_start(&s, script_close_after_tensor, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    cf_srv_stop(&s); /* the server has closed its end */
    /* Not the socket's -EPIPE or -ECONNRESET: that would read as retryable. */
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1000), -ENOTCONN);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1000), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
}
END_TEST

static void script_never_done(struct srv *s, int fd)
{
    if (cf_srv_welcome(s, fd) && cf_srv_tensor(s, fd, 1) &&
        cf_srv_reduce(s, fd, 1, 1, NULL, 0))
        cf_wait_eof_ms(fd, 20000);
}

START_TEST(test_client_reduce_timeout)
{
    struct srv s;
    cf_srv_start(&s, script_never_done, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    /* A reduce needs a deadline: 0 is refused before anything is sent. */
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 0), -EINVAL);
    /* The daemon never answers: the client gives up after 1 ms + slack. */
    int64_t t0 = cf_now_ms();
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1), -ETIMEDOUT);
    int64_t dt = cf_now_ms() - t0;
    ck_assert_int_ge(dt, PREDUCE_REDUCE_SLACK_MS);
    ck_assert_int_lt(dt, PREDUCE_REDUCE_SLACK_MS + 500);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 100), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/*
 * A daemon whose welcome does not state its grace is an older one, which
 * may write the tensors up to 5 s past a deadline: the library waits 10 s
 * past it, not 1 s, before it takes the daemon for hung.
 */
START_TEST(test_client_reduce_old_daemon_waits_longer)
{
    struct srv s;
    cf_welcome_grace_ms = 0;
    cf_srv_start(&s, script_never_done, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce_start(c, &t, 1, 1), 0);
    /* Past 1 ms + PREDUCE_REDUCE_SLACK_MS: still waiting, not broken. */
    ck_assert_int_eq(preduce_reduce_wait(c, PREDUCE_REDUCE_SLACK_MS + 500),
                     -EAGAIN);
    ck_assert_int_eq(preduce_rank(c), 3);
    preduce_close(c);
    cf_srv_stop(&s);

    /* A daemon stating a grace of 2 s is waited for 2.5 s past a deadline. */
    cf_welcome_grace_ms = 2000;
    cf_srv_start(&s, script_never_done, 0);
    c = cf_connect_ok(&s);
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce_start(c, &t, 1, 1), 0);
    ck_assert_int_eq(preduce_reduce_wait(c, 2000), -EAGAIN);
    ck_assert_int_eq(preduce_reduce_wait(c, 1000), -ETIMEDOUT);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/* Wrong answers to a tensor_create, and the code each must produce. */
static const struct bad_answer bad_creates[] = {
    {"error -EINVAL", -EINVAL, -EINVAL},
    {"tensor_created without a memfd", -EPROTO, -EPROTO},
    {"tensor_created of another size", -EPROTO, -EPROTO},
    {"memfd smaller than the tensor", -EPROTO, -EPROTO},
    {"reduce_done with no reduce", -EPROTO, -EPROTO},
};

static void script_bad_create(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd))
        return;
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    s->memfd = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(s->memfd, 16) == 0))
        return;
    switch (s->variant) {
    case 0:
        cf_send_error(fd, -EINVAL);
        return;
    case 1:
        cf_send_created(fd, 1, 4, -1);
        break;
    case 2:
        cf_send_created(fd, 1, 3, s->memfd);
        break;
    case 3:
        cf_send_created(fd, 1, 4, s->memfd);
        break;
    case 4:
        cf_send_done(fd, 1, 0, 1, 1);
        break;
    }
    cf_wait_eof(fd);
}

START_TEST(test_client_tensor_bad_answer)
{
    const struct bad_answer *b = &bad_creates[_i];
    struct srv s;
    int fds = cf_count_fds();
    cf_srv_start(&s, script_bad_create, _i);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    size_t n = _i == 3 ? 1000 : 4; /* 4000 bytes asked, 16 given */
    int rc = preduce_tensor_create(c, n, 3000, &t);
    ck_assert_msg(rc == b->code, "%s: got %d (%s)", b->what, rc,
                  preduce_strerror(rc));
    ck_assert_ptr_null(t);
    preduce_close(c);
    cf_srv_stop(&s);
    ck_assert_int_eq(cf_count_fds(), fds);
}
END_TEST

/*
 * The first tensor_created comes after its call timed out: the client must
 * give that tensor back and map the second one.
 */
static void script_late_create(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd))
        return;
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    cf_sleep_ms(400);
    int late = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(late, 16) == 0))
        return;
    cf_send_created(fd, 1, 4, late);
    close(late);
    if (!cf_srv_tensor(s, fd, 2))
        return;
    m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_DESTROY);
    if (m)
        EXPECT(s, m->tensor_destroy->tensor_id == 1);
    pr_msg_free(m);
    cf_wait_eof(fd);
}

START_TEST(test_client_tensor_create_timeout)
{
    struct srv s;
    cf_srv_start(&s, script_late_create, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    int64_t t0 = cf_now_ms();
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &t), -ETIMEDOUT);
    ck_assert_int_lt(cf_now_ms() - t0, 350);
    ck_assert_int_eq(preduce_tensor_create(c, 6, 3000, &t), 0);
    ck_assert_uint_eq(preduce_tensor_len(t), 6);
    preduce_tensor_data(t)[5] = 1.5f;
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/* Drops the tensor the script made, so that it can make another. */
static void srv_forget_tensor(struct srv *s)
{
    if (s->map)
        munmap(s->map, s->nfloats * 4);
    if (s->memfd >= 0)
        close(s->memfd);
    s->map = NULL;
    s->memfd = -1;
}

/*
 * The daemon refuses tensors (Error answers a create, as node_ipc.c does
 * for max_tensor_mb, memfd or mmap failures): only that create fails; one
 * whose call timed out is refused late and nobody notices; the connection,
 * the tensors made before and reduces go on.
 */
static void script_refused(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1))
        return;
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    EXPECT(s, m->tensor_create->nfloats == 1u << 20);
    pr_msg_free(m);
    cf_send_error(fd, -EINVAL);
    m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    cf_send_error(fd, -ENOMEM);
    uint32_t id = 1;
    if (!cf_srv_reduce(s, fd, 1, 1, &id, 1))
        return;
    cf_send_done(fd, 1, 0, 7, 1);
    /* The answer to a create that timed out: a refusal, late. */
    m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    cf_sleep_ms(300);
    cf_send_error(fd, -EFBIG);
    srv_forget_tensor(s);
    if (cf_srv_tensor(s, fd, 2))
        cf_wait_eof(fd);
}

START_TEST(test_client_tensor_create_refused)
{
    struct srv s;
    int fds = cf_count_fds();
    cf_srv_start(&s, script_refused, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t, *u = (preduce_tensor_t *)&u;
    ck_assert_int_eq(preduce_tensor_create(c, 16, 3000, &t), 0);
    ck_assert_int_eq(preduce_tensor_create(c, 1u << 20, 3000, &u), -EINVAL);
    ck_assert_ptr_null(u);
    ck_assert_int_eq(preduce_tensor_create(c, 16, 3000, &u), -ENOMEM);
    ck_assert_int_eq(preduce_rank(c), 3);
    preduce_tensor_data(t)[0] = 2.5f;
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 3000), 0);
    ck_assert_uint_eq(preduce_result_group(preduce_last_result(c)), 7);
    ck_assert(preduce_tensor_data(t)[0] == 2.5f);
    ck_assert_int_eq(preduce_tensor_create(c, 16, 100, &u), -ETIMEDOUT);
    ck_assert_int_eq(preduce_tensor_create(c, 8, 3000, &u), 0);
    ck_assert_uint_eq(preduce_tensor_len(u), 8);
    preduce_close(c);
    cf_srv_stop(&s);
    ck_assert_int_eq(cf_count_fds(), fds);
}
END_TEST

/*
 * A reduce_done with status 0 came, and then the connection broke before
 * the trainer waited: variant 0, the done was read by a tensor_create that
 * then saw the daemon close; variant 1, the done and an Error came in one
 * read. The result is in the tensors, so the reduce succeeded: the wait
 * says so, and only later calls find the connection gone.
 */
static void script_done_then_break(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1) ||
        !cf_srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    for (size_t i = 0; i < s->nfloats; i++)
        s->map[i] = 7.0f;
    if (s->variant == 0) {
        Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
        pr_msg_free(m);
        cf_send_done(fd, 1, 0, 5, 2);
        return; /* and close */
    }
    uint32_t members[] = {3};
    uint64_t versions[] = {2};
    double weights[] = {1.0};
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    d.seq = 1;
    d.group_id = 5;
    d.n_members = d.n_member_versions = d.n_member_weights = 1;
    d.members = members;
    d.member_versions = versions;
    d.member_weights = weights;
    d.weight = 1.0;
    d.version = 2;
    d.rank = 3;
    Pr__V1__Msg m1 = PR__V1__MSG__INIT;
    m1.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
    m1.reduce_done = &d;
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    e.code = -ESHUTDOWN;
    Pr__V1__Msg m2 = PR__V1__MSG__INIT;
    m2.body_case = PR__V1__MSG__BODY_ERROR;
    m2.error = &e;
    uint8_t *f1, *f2, both[512];
    size_t n1, n2;
    if (!EXPECT(s, pr_msg_frame(&m1, 256, &f1, &n1) == 0))
        return;
    if (!EXPECT(s, pr_msg_frame(&m2, 256, &f2, &n2) == 0)) {
        free(f1);
        return;
    }
    memcpy(both, f1, n1);
    memcpy(both + n1, f2, n2);
    free(f1);
    free(f2);
    cf_send_raw(fd, both, n1 + n2, -1);
    cf_wait_eof(fd);
}

START_TEST(test_client_done_then_break)
{
    struct srv s;
    cf_srv_start(&s, script_done_then_break, _i);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t, *u;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    float *x = preduce_tensor_data(t);
    int rc;
    if (_i == 0) {
        ck_assert_int_eq(preduce_reduce_start(c, &t, 1, 5000), 0);
        rc = preduce_tensor_create(c, 4, 3000, &u);
        ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "create: %d", rc);
        /* preduce_fd() stays readable: an answer waits. */
        struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
        ck_assert_int_eq(poll(&pf, 1, 0), 1);
        rc = preduce_reduce_wait(c, 0);
    } else {
        rc = preduce_reduce(c, &t, 1, 5000);
    }
    ck_assert_msg(rc == 0, "the reduce that succeeded: %d (%s)", rc,
                  preduce_strerror(rc));
    ck_assert(x[0] == 7.0f && x[3] == 7.0f);
    ck_assert_uint_eq(preduce_result_group(preduce_last_result(c)), 5);
    ck_assert_uint_eq(preduce_result_version(preduce_last_result(c)), 2);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), -ENOTCONN);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1000), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/* What a daemon (an older one, say) answers, and what the trainer gets. */
static const struct {
    int daemon, trainer;
} codes[] = {
    {-ETIMEDOUT, -ETIMEDOUT}, {-ECONNRESET, -ECONNRESET},
    {-EINVAL, -EINVAL},       {-EBUSY, -EBUSY},
    {-ENOMEM, -ENOMEM},       {-ECANCELED, -ECONNRESET},
    {-EPIPE, -ECONNRESET},    {-EIO, -ECONNRESET},
    {-EPROTO, -ECONNRESET},   {-ENOTCONN, -ECONNRESET},
    {-4095, -ECONNRESET},
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

/*
 * Answers every reduce with the next daemon code, after checking the
 * deadline it carries: its timeout (5000 ms) from about now, on this
 * process's CLOCK_MONOTONIC (which is the daemon's uv_hrtime()).
 */
static void script_codes(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1))
        return;
    for (size_t i = 0; i < NCODES; i++) {
        Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_REDUCE);
        if (!m)
            return;
        int64_t left_ms =
            (int64_t)m->reduce->deadline_ns / 1000000 - cf_now_ms();
        bool ok = EXPECT(s, m->reduce->timeout_ms == 5000) &&
                  EXPECT(s, left_ms > 4000 && left_ms <= 5000);
        uint64_t seq = m->reduce->seq;
        pr_msg_free(m);
        if (!ok)
            return;
        cf_send_done(fd, seq, codes[i].daemon, 0, 0);
    }
    cf_wait_eof(fd);
}

/*
 * A reduce returns only the codes preduce.h lists: a daemon's status
 * outside them is a failure of the group, -ECONNRESET. The connection
 * stays, and preduce_error_retryable() knows which to retry.
 */
START_TEST(test_client_reduce_codes)
{
    struct srv s;
    cf_srv_start(&s, script_codes, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    for (size_t i = 0; i < NCODES; i++) {
        int rc = preduce_reduce(c, &t, 1, 5000);
        ck_assert_msg(rc == codes[i].trainer, "daemon %d: got %d, not %d",
                      codes[i].daemon, rc, codes[i].trainer);
        ck_assert_int_eq(preduce_error_retryable(rc),
                         rc == -ETIMEDOUT || rc == -ECONNRESET);
    }
    ck_assert_int_eq(preduce_rank(c), 3);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

static Suite *client_tensor_suite(void)
{
    Suite *s = suite_create("client_tensor");
    TCase *tc;

    tc = tcase_create("tensor");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_shared_tensor);
    tcase_add_test(tc, test_client_interleave);
    tcase_add_test(tc, test_client_wait_poll);
    tcase_add_test(tc, test_client_reduce_wrong_seq);
    tcase_add_test(tc, test_client_daemon_error);
    tcase_add_test(tc, test_client_no_sigpipe);
    tcase_add_loop_test(tc, test_client_tensor_bad_answer, 0,
                        sizeof(bad_creates) / sizeof(bad_creates[0]));
    tcase_add_test(tc, test_client_tensor_create_timeout);
    tcase_add_test(tc, test_client_tensor_create_refused);
    tcase_add_loop_test(tc, test_client_done_then_break, 0, 2);
    tcase_add_test(tc, test_client_reduce_codes);
    suite_add_tcase(s, tc);

    /* The client gives up PREDUCE_REDUCE_SLACK_MS past a reduce's timeout. */
    tc = tcase_create("timeout");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_client_reduce_timeout);
    tcase_add_test(tc, test_client_reduce_old_daemon_waits_longer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(client_tensor_suite());
}
