/*
 * Unit tests for libpreduce (suite "client"), without a daemon: every test
 * that needs one runs a scripted server thread on a Unix socket in a fresh
 * mkdtemp() directory. The script plays the daemon's side of the protocol
 * (client/client.c has the sketch) frame by frame, including the memfd
 * passed with SCM_RIGHTS, and records its first failed expectation in the
 * server struct; the test asserts on it after joining the thread, so Check
 * assertions run only on the test's own thread.
 */
#include "preduce.h"
#include "proto/frame.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define IO_MS 5000 /* bound on every wait of the scripted server */

struct srv;
typedef void (*script_fn)(struct srv *s, int fd);

struct srv {
    char dir[64];
    char path[108];
    int lfd;
    pthread_t th;
    script_fn script;
    int variant;
    char fail[256]; /* first failed expectation, "" if none */

    /* The tensor the script created. */
    int memfd;
    float *map;
    size_t nfloats;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

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

__attribute__((format(printf, 2, 3))) static void
srv_failf(struct srv *s, const char *fmt, ...)
{
    if (s->fail[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fail, sizeof(s->fail), fmt, ap);
    va_end(ap);
}

#define EXPECT(s, cond)                                                        \
    ((cond)                                                                    \
         ? true                                                                \
         : (srv_failf((s), "%s:%d: expected %s", __FILE__, __LINE__, #cond),   \
            false))

/* 0 when n bytes were read, -1 on EOF, error or after IO_MS. */
static int read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, IO_MS) <= 0)
            return -1;
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Blocks until the client closes its end (or timeout_ms passes). */
static void wait_eof_ms(int fd, int timeout_ms)
{
    char b[256];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (poll(&pf, 1, timeout_ms) > 0 && read(fd, b, sizeof(b)) > 0) {
    }
}

static void wait_eof(int fd)
{
    wait_eof_ms(fd, IO_MS);
}

static Pr__V1__Msg *srv_recv(struct srv *s, int fd)
{
    uint8_t hdr[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr h;
    if (read_full(fd, hdr, sizeof(hdr)) < 0 ||
        pr_frame_hdr_decode(hdr, 1 << 20, &h) < 0 || h.type != PR_FRAME_MSG) {
        srv_failf(s, "no frame from the client");
        return NULL;
    }
    uint8_t *p = malloc(h.len ? h.len : 1);
    Pr__V1__Msg *m = NULL;
    if (p && read_full(fd, p, h.len) == 0)
        m = pr_msg_unpack(p, h.len);
    free(p);
    if (!m)
        srv_failf(s, "bad frame from the client");
    return m;
}

/* Receives one Msg and checks its case; NULL (and a failure) otherwise. */
static Pr__V1__Msg *srv_expect(struct srv *s, int fd, int body_case)
{
    Pr__V1__Msg *m = srv_recv(s, fd);
    if (m && m->body_case != (Pr__V1__Msg__BodyCase)body_case) {
        srv_failf(s, "expected msg %d, got %s", body_case, pr_msg_name(m));
        pr_msg_free(m);
        m = NULL;
    }
    return m;
}

static void send_raw(int fd, const void *p, size_t n, int pass_fd)
{
    struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof(u.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)n) {
        /* The client went away: its own assertions say why. */
    }
}

static void srv_send(int fd, const Pr__V1__Msg *m, int pass_fd)
{
    uint8_t *buf;
    size_t len;
    if (pr_msg_frame(m, 1 << 20, &buf, &len) == 0) {
        send_raw(fd, buf, len, pass_fd);
        free(buf);
    }
}

static void send_welcome(int fd, uint32_t version, uint32_t rank)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    w.version = version;
    w.id = rank;
    m.body_case = PR__V1__MSG__BODY_WELCOME;
    m.welcome = &w;
    srv_send(fd, &m, -1);
}

static void send_error(int fd, int code)
{
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    e.code = code;
    e.reason = (char *)"scripted error";
    m.body_case = PR__V1__MSG__BODY_ERROR;
    m.error = &e;
    srv_send(fd, &m, -1);
}

static void send_created(int fd, uint32_t id, uint64_t nfloats, int pass_fd)
{
    Pr__V1__TensorCreated t = PR__V1__TENSOR_CREATED__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    t.tensor_id = id;
    t.nfloats = nfloats;
    m.body_case = PR__V1__MSG__BODY_TENSOR_CREATED;
    m.tensor_created = &t;
    srv_send(fd, &m, pass_fd);
}

/* On success, a group of one: the worker itself (rank 3). */
static void send_done(int fd, uint64_t seq, int status, uint64_t group,
                      uint64_t version)
{
    uint32_t members[] = {3};
    uint64_t versions[] = {version};
    double weights[] = {1.0};
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    d.seq = seq;
    d.status = status;
    d.group_id = group;
    if (status == 0) {
        d.n_members = d.n_member_versions = d.n_member_weights = 1;
        d.members = members;
        d.member_versions = versions;
        d.member_weights = weights;
        d.weight = 1.0;
        d.version = version;
        d.rank = 3; /* the rank the group knew the worker by */
    }
    m.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
    m.reduce_done = &d;
    srv_send(fd, &m, -1);
}

/* Reads the hello of worker "w0" and welcomes it as rank 3. */
static bool srv_welcome(struct srv *s, int fd)
{
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return false;
    bool ok = EXPECT(s, m->hello->version == PR_PROTO_VERSION) &&
              EXPECT(s, m->hello->role == PR__V1__ROLE__ROLE_CLIENT) &&
              EXPECT(s, strcmp(m->hello->name, "w0") == 0);
    pr_msg_free(m);
    if (ok)
        send_welcome(fd, PR_PROTO_VERSION, 3);
    return ok;
}

/* Answers one tensor_create with a real memfd of the size asked for. */
static bool srv_tensor(struct srv *s, int fd, uint32_t id)
{
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return false;
    s->nfloats = m->tensor_create->nfloats;
    pr_msg_free(m);
    s->memfd = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, s->memfd >= 0) ||
        !EXPECT(s, ftruncate(s->memfd, (off_t)(s->nfloats * 4)) == 0))
        return false;
    s->map = mmap(NULL, s->nfloats * 4, PROT_READ | PROT_WRITE, MAP_SHARED,
                  s->memfd, 0);
    if (!EXPECT(s, s->map != MAP_FAILED))
        return false;
    send_created(fd, id, s->nfloats, s->memfd);
    return true;
}

/* Receives a reduce and checks seq, version and (if n > 0) the ids. */
static bool srv_reduce(struct srv *s, int fd, uint64_t seq, uint64_t version,
                       const uint32_t *ids, size_t n)
{
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_REDUCE);
    if (!m)
        return false;
    const Pr__V1__Reduce *r = m->reduce;
    bool ok = EXPECT(s, r->seq == seq) && EXPECT(s, r->version == version);
    if (ok && n > 0) {
        ok = EXPECT(s, r->n_tensor_ids == n) &&
             EXPECT(s, memcmp(r->tensor_ids, ids, n * sizeof(*ids)) == 0);
    }
    pr_msg_free(m);
    return ok;
}

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    struct pollfd pf = {.fd = s->lfd, .events = POLLIN};
    if (poll(&pf, 1, IO_MS) <= 0) {
        srv_failf(s, "no client connected");
        return NULL;
    }
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        srv_failf(s, "accept: %s", strerror(errno));
        return NULL;
    }
    s->script(s, fd);
    close(fd);
    return NULL;
}

/* Binds a socket in a fresh directory; listens and serves if script. */
static void srv_init(struct srv *s, script_fn script, int variant,
                     bool do_listen)
{
    memset(s, 0, sizeof(*s));
    s->memfd = -1;
    s->script = script;
    s->variant = variant;
    strcpy(s->dir, "/tmp/preduce-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
    snprintf(s->path, sizeof(s->path), "%s/d.sock", s->dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, s->path);
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(s->lfd, 0);
    ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (do_listen)
        ck_assert_int_eq(listen(s->lfd, 8), 0);
    if (script)
        ck_assert_int_eq(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_start(struct srv *s, script_fn script, int variant)
{
    srv_init(s, script, variant, true);
}

/* Joins the script, frees what it made, and fails on its verdict. */
static void srv_stop(struct srv *s)
{
    if (s->script)
        pthread_join(s->th, NULL);
    s->script = NULL;
    if (s->map && s->map != MAP_FAILED)
        munmap(s->map, s->nfloats * 4);
    s->map = NULL;
    if (s->memfd >= 0)
        close(s->memfd);
    s->memfd = -1;
    if (s->lfd >= 0)
        close(s->lfd);
    s->lfd = -1;
    unlink(s->path);
    rmdir(s->dir);
    ck_assert_msg(s->fail[0] == 0, "server: %s", s->fail);
}

static preduce_client_t *connect_ok(struct srv *s)
{
    preduce_client_t *c = NULL;
    int rc = preduce_connect(s->path, "w0", 3000, &c);
    ck_assert_msg(rc == 0, "connect: %s (server: %s)", preduce_strerror(rc),
                  s->fail);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* ---- argument validation ---------------------------------------------- */

START_TEST(test_client_connect_args)
{
    preduce_client_t *c = (preduce_client_t *)&c;
    char longname[65], longpath[200];
    memset(longname, 'a', 64);
    longname[64] = 0;
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = 0;

    ck_assert_int_eq(preduce_connect(NULL, "w0", 100, &c), -EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(preduce_connect("/nonexistent", NULL, 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, NULL), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", longname, 100, &c),
                     -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "a\nb", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", -1, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("", "w0", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect(longpath, "w0", 100, &c), -EINVAL);
    /* 63 bytes is still a valid name: the socket is what is missing. */
    longname[63] = 0;
    ck_assert_int_eq(preduce_connect("/nonexistent", longname, 100, &c),
                     -ENOENT);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_client_null_handles)
{
    preduce_tensor_t *t = (preduce_tensor_t *)&t;
    uint32_t rank;
    ck_assert_int_eq(preduce_close(NULL), 0);
    ck_assert_int_eq(preduce_rank(NULL), -EINVAL);
    ck_assert_int_eq(preduce_fd(NULL), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(NULL, 4, 100, &t), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_ptr_null(preduce_tensor_data(NULL));
    ck_assert_uint_eq(preduce_tensor_len(NULL), 0);
    ck_assert_int_eq(preduce_tensor_destroy(NULL), -EINVAL);
    ck_assert_int_eq(preduce_reduce(NULL, &t, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_start(NULL, &t, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_wait(NULL, 0), -EINVAL);
    ck_assert_ptr_null(preduce_last_result(NULL));
    ck_assert_uint_eq(preduce_result_group(NULL), 0);
    ck_assert_uint_eq(preduce_result_size(NULL), 0);
    ck_assert_int_eq(preduce_result_member(NULL, 0, &rank, NULL, NULL),
                     -EINVAL);
    ck_assert_uint_eq(preduce_result_version(NULL), 0);
    ck_assert(preduce_result_weight(NULL) == 0.0);
}
END_TEST

static void script_two_tensors_idle(struct srv *s, int fd)
{
    if (srv_welcome(s, fd) && srv_tensor(s, fd, 1))
        wait_eof(fd);
}

START_TEST(test_client_reduce_args)
{
    struct srv s1, s2;
    srv_start(&s1, script_two_tensors_idle, 0);
    srv_start(&s2, script_two_tensors_idle, 0);
    preduce_client_t *c1 = connect_ok(&s1);
    preduce_client_t *c2 = connect_ok(&s2);
    preduce_tensor_t *t1, *t2, *t;
    ck_assert_int_eq(preduce_tensor_create(c1, 16, 3000, &t1), 0);
    ck_assert_int_eq(preduce_tensor_create(c2, 16, 3000, &t2), 0);

    ck_assert_int_eq(preduce_tensor_create(c1, 0, 3000, &t), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(preduce_tensor_create(c1, 16, -1, &t), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(c1, SIZE_MAX, 100, &t), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(c1, 16, 100, NULL), -EINVAL);

    preduce_tensor_t *dup[] = {t1, t1};
    preduce_tensor_t *other[] = {t1, t2};
    preduce_tensor_t *null[] = {t1, NULL};
    ck_assert_int_eq(preduce_reduce(c1, NULL, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, &t1, 0, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, &t1, 1, -5), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, dup, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, other, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, null, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c2, &t1, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_wait(c1, 0), -EINVAL); /* none started */
    ck_assert_int_eq(preduce_reduce_wait(c1, -1), -EINVAL);
    ck_assert_ptr_null(preduce_last_result(c1));

    ck_assert_int_eq(preduce_tensor_destroy(t1), 0);
    ck_assert_int_eq(preduce_close(c1), 0);
    ck_assert_int_eq(preduce_close(c2), 0); /* frees t2 */
    srv_stop(&s1);
    srv_stop(&s2);
}
END_TEST

/* ---- connecting ------------------------------------------------------- */

START_TEST(test_client_connect_missing)
{
    char dir[] = "/tmp/preduce-test-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/none.sock", dir);
    preduce_client_t *c;
    ck_assert_int_eq(preduce_connect(path, "w0", 1000, &c), -ENOENT);
    ck_assert_ptr_null(c);
    rmdir(dir);
}
END_TEST

START_TEST(test_client_connect_refused)
{
    struct srv s;
    srv_init(&s, NULL, 0, false); /* bound, nobody listening */
    preduce_client_t *c;
    ck_assert_int_eq(preduce_connect(s.path, "w0", 1000, &c), -ECONNREFUSED);
    ck_assert_ptr_null(c);
    srv_stop(&s);
}
END_TEST

static void script_silent(struct srv *s, int fd)
{
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    pr_msg_free(m);
    wait_eof(fd);
}

START_TEST(test_client_connect_timeout)
{
    struct srv s;
    int fds = count_fds();
    srv_start(&s, script_silent, 0);
    preduce_client_t *c;
    int64_t t0 = now_ms();
    ck_assert_int_eq(preduce_connect(s.path, "w0", 300, &c), -ETIMEDOUT);
    int64_t dt = now_ms() - t0;
    ck_assert_ptr_null(c);
    ck_assert_int_ge(dt, 290);
    ck_assert_int_lt(dt, 300 + 1500);
    srv_stop(&s);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

static void script_ping_first(struct srv *s, int fd)
{
    Pr__V1__Ping p = PR__V1__PING__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    p.nonce = 77;
    m.body_case = PR__V1__MSG__BODY_PING;
    m.ping = &p;
    Pr__V1__Msg *h = srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!h)
        return;
    pr_msg_free(h);
    srv_send(fd, &m, -1);
    Pr__V1__Msg *r = srv_expect(s, fd, PR__V1__MSG__BODY_PONG);
    if (!r)
        return;
    bool ok = EXPECT(s, r->pong->nonce == 77);
    pr_msg_free(r);
    if (ok)
        send_welcome(fd, PR_PROTO_VERSION, 3);
    wait_eof(fd);
}

START_TEST(test_client_connect_ok)
{
    struct srv s;
    srv_start(&s, script_ping_first, 0);
    preduce_client_t *c = connect_ok(&s);
    ck_assert_int_eq(preduce_rank(c), 3);
    ck_assert_int_ge(preduce_fd(c), 0);
    struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 0); /* nothing to wait for */
    preduce_close(c);
    srv_stop(&s);
}
END_TEST

/* Wrong answers to a hello, and the code each must produce. */
static const struct bad_answer {
    const char *what;
    int code;
    int alt; /* also acceptable */
} bad_answers[] = {
    {"length prefix 2 GiB", -EMSGSIZE, -EPROTO},
    {"length prefix 1 MiB + 1", -EMSGSIZE, -EPROTO},
    {"garbage payload", -EPROTO, -EPROTO},
    {"unknown frame type", -EPROTO, -EPROTO},
    {"data frame", -EPROTO, -EPROTO},
    {"empty Msg", -EPROTO, -EPROTO},
    {"welcome of version 2", -EPROTO, -EPROTO},
    {"welcome with a rank over INT_MAX", -EPROTO, -EPROTO},
    {"reduce_done before welcome", -EPROTO, -EPROTO},
    {"error with a positive code", -EPROTO, -EPROTO},
    {"error -EEXIST", -EEXIST, -EEXIST},
    {"close", -EPIPE, -ECONNRESET},
    {"close mid-frame", -EPIPE, -ECONNRESET},
};

static void script_bad_answer(struct srv *s, int fd)
{
    uint8_t buf[64];
    memset(buf, 0xff, sizeof(buf));
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return;
    pr_msg_free(m);
    switch (s->variant) {
    case 0:
        pr_frame_hdr_encode(buf, 0x7fffffff, PR_FRAME_MSG, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 1:
        pr_frame_hdr_encode(buf, (1 << 20) + 1, PR_FRAME_MSG, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 2:
        pr_frame_hdr_encode(buf, 16, PR_FRAME_MSG, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN + 16, -1);
        break;
    case 3:
        pr_frame_hdr_encode(buf, 4, 9, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN + 4, -1);
        break;
    case 4:
        pr_frame_hdr_encode(buf, 4, PR_FRAME_DATA, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN + 4, -1);
        break;
    case 5:
        pr_frame_hdr_encode(buf, 0, PR_FRAME_MSG, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 6:
        send_welcome(fd, PR_PROTO_VERSION + 1, 3);
        break;
    case 7:
        send_welcome(fd, PR_PROTO_VERSION, 0x80000000u);
        break;
    case 8:
        send_done(fd, 1, 0, 1, 1);
        break;
    case 9:
        send_error(fd, 5);
        break;
    case 10:
        send_error(fd, -EEXIST);
        return; /* and close, as the daemon does */
    case 11:
        return;
    case 12:
        pr_frame_hdr_encode(buf, 40, PR_FRAME_MSG, 0);
        send_raw(fd, buf, PR_FRAME_HDR_LEN + 10, -1);
        return;
    }
    wait_eof(fd);
}

START_TEST(test_client_connect_bad_answer)
{
    const struct bad_answer *b = &bad_answers[_i];
    struct srv s;
    int fds = count_fds();
    srv_start(&s, script_bad_answer, _i);
    preduce_client_t *c;
    int rc = preduce_connect(s.path, "w0", 3000, &c);
    ck_assert_msg(rc == b->code || rc == b->alt, "%s: got %d (%s)", b->what, rc,
                  preduce_strerror(rc));
    ck_assert_ptr_null(c);
    srv_stop(&s);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/* ---- tensors and reduces ---------------------------------------------- */

static void script_shared(struct srv *s, int fd)
{
    uint32_t id = 11;
    if (!srv_welcome(s, fd) || !srv_tensor(s, fd, id) ||
        !srv_reduce(s, fd, 1, 1, &id, 1))
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
    m.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
    m.reduce_done = &d;
    srv_send(fd, &m, -1);

    /* Second reduce: version 7 + 1; a member dies. */
    if (!srv_reduce(s, fd, 2, 8, &id, 1))
        return;
    send_done(fd, 2, -ECONNRESET, 0, 0);
    Pr__V1__Msg *x = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_DESTROY);
    if (x)
        EXPECT(s, x->tensor_destroy->tensor_id == id);
    pr_msg_free(x);
    wait_eof(fd);
}

START_TEST(test_client_shared_tensor)
{
    struct srv s;
    int fds = count_fds();
    srv_start(&s, script_shared, 0);
    preduce_client_t *c = connect_ok(&s);
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
    srv_stop(&s);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/*
 * reduce_done for seq 1 arrives before the tensor_created the client waits
 * for; then a reduce over two tensors checks the ids' order.
 */
static void script_interleave(struct srv *s, int fd)
{
    uint32_t ids[] = {2, 1};
    if (!srv_welcome(s, fd) || !srv_tensor(s, fd, 1) ||
        !srv_reduce(s, fd, 1, 1, ids + 1, 1))
        return;
    munmap(s->map, s->nfloats * 4);
    close(s->memfd);
    s->map = NULL;
    s->memfd = -1;
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    send_done(fd, 1, 0, 9, 4);
    s->nfloats = 8;
    s->memfd = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(s->memfd, 32) == 0))
        return;
    send_created(fd, 2, 8, s->memfd);
    if (!srv_reduce(s, fd, 2, 5, ids, 2))
        return;
    send_done(fd, 2, 0, 10, 6);
    wait_eof(fd);
}

START_TEST(test_client_interleave)
{
    struct srv s;
    srv_start(&s, script_interleave, 0);
    preduce_client_t *c = connect_ok(&s);
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
    srv_stop(&s);
}
END_TEST

/* Answers the reduce only after the test wrote a byte to go_pipe. */
static int go_pipe[2];

static void script_late(struct srv *s, int fd)
{
    if (!srv_welcome(s, fd) || !srv_tensor(s, fd, 1) ||
        !srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    char b;
    if (!EXPECT(s, read_full(go_pipe[0], &b, 1) == 0))
        return;
    send_done(fd, 1, 0, 5, 3);
    wait_eof(fd);
}

START_TEST(test_client_wait_poll)
{
    struct srv s;
    ck_assert_int_eq(pipe(go_pipe), 0);
    srv_start(&s, script_late, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce_start(c, &t, 1, 5000), 0);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), -EAGAIN);
    int64_t t0 = now_ms();
    ck_assert_int_eq(preduce_reduce_wait(c, 200), -EAGAIN);
    ck_assert_int_ge(now_ms() - t0, 190);
    struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 0);
    ck_assert_int_eq(write(go_pipe[1], "g", 1), 1);
    ck_assert_int_eq(poll(&pf, 1, 3000), 1);
    ck_assert_int_eq(preduce_reduce_wait(c, 0), 0);
    ck_assert_uint_eq(preduce_result_version(preduce_last_result(c)), 3);
    preduce_close(c);
    srv_stop(&s);
    close(go_pipe[0]);
    close(go_pipe[1]);
}
END_TEST

static void script_wrong_seq(struct srv *s, int fd)
{
    if (!srv_welcome(s, fd) || !srv_tensor(s, fd, 1) ||
        !srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    send_done(fd, 99, 0, 1, 2);
    wait_eof(fd);
}

START_TEST(test_client_reduce_wrong_seq)
{
    struct srv s;
    srv_start(&s, script_wrong_seq, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -EPROTO);
    ck_assert_ptr_null(preduce_last_result(c));
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ENOTCONN);
    preduce_tensor_t *u;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &u), -ENOTCONN);
    ck_assert_ptr_null(u);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    srv_stop(&s);
}
END_TEST

/* The daemon gives up on the worker in the middle of a reduce. */
static void script_error_midway(struct srv *s, int fd)
{
    if (!srv_welcome(s, fd) || !srv_tensor(s, fd, 1) ||
        !srv_reduce(s, fd, 1, 1, NULL, 0))
        return;
    send_error(fd, -ESHUTDOWN);
}

START_TEST(test_client_daemon_error)
{
    struct srv s;
    srv_start(&s, script_error_midway, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t, *u;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ESHUTDOWN);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 5000), -ESHUTDOWN);
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &u), -ESHUTDOWN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    srv_stop(&s);
}
END_TEST

static void script_close_after_tensor(struct srv *s, int fd)
{
    if (srv_welcome(s, fd))
        srv_tensor(s, fd, 1);
}

START_TEST(test_client_no_sigpipe)
{
    struct srv s;
    signal(SIGPIPE, SIG_DFL);
    srv_start(&s, script_close_after_tensor, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    srv_stop(&s); /* the server has closed its end */
    int rc = preduce_reduce(c, &t, 1, 1000);
    ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "got %d", rc);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1000), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
}
END_TEST

static void script_never_done(struct srv *s, int fd)
{
    if (srv_welcome(s, fd) && srv_tensor(s, fd, 1) &&
        srv_reduce(s, fd, 1, 1, NULL, 0))
        wait_eof_ms(fd, 20000);
}

START_TEST(test_client_reduce_timeout)
{
    struct srv s;
    srv_start(&s, script_never_done, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    ck_assert_int_eq(preduce_tensor_create(c, 4, 3000, &t), 0);
    /* A reduce needs a deadline: 0 is refused before anything is sent. */
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 0), -EINVAL);
    /* The daemon never answers: the client gives up after 1 + 10 s. */
    int64_t t0 = now_ms();
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 1), -ETIMEDOUT);
    int64_t dt = now_ms() - t0;
    ck_assert_int_ge(dt, 9990);
    ck_assert_int_lt(dt, 12000);
    ck_assert_int_eq(preduce_reduce(c, &t, 1, 100), -ENOTCONN);
    ck_assert_int_eq(preduce_tensor_destroy(t), 0);
    preduce_close(c);
    srv_stop(&s);
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
    if (!srv_welcome(s, fd))
        return;
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    s->memfd = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(s->memfd, 16) == 0))
        return;
    switch (s->variant) {
    case 0:
        send_error(fd, -EINVAL);
        return;
    case 1:
        send_created(fd, 1, 4, -1);
        break;
    case 2:
        send_created(fd, 1, 3, s->memfd);
        break;
    case 3:
        send_created(fd, 1, 4, s->memfd);
        break;
    case 4:
        send_done(fd, 1, 0, 1, 1);
        break;
    }
    wait_eof(fd);
}

START_TEST(test_client_tensor_bad_answer)
{
    const struct bad_answer *b = &bad_creates[_i];
    struct srv s;
    int fds = count_fds();
    srv_start(&s, script_bad_create, _i);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    size_t n = _i == 3 ? 1000 : 4; /* 4000 bytes asked, 16 given */
    int rc = preduce_tensor_create(c, n, 3000, &t);
    ck_assert_msg(rc == b->code, "%s: got %d (%s)", b->what, rc,
                  preduce_strerror(rc));
    ck_assert_ptr_null(t);
    preduce_close(c);
    srv_stop(&s);
    ck_assert_int_eq(count_fds(), fds);
}
END_TEST

/*
 * The first tensor_created comes after its call timed out: the client must
 * give that tensor back and map the second one.
 */
static void script_late_create(struct srv *s, int fd)
{
    if (!srv_welcome(s, fd))
        return;
    Pr__V1__Msg *m = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
    if (!m)
        return;
    pr_msg_free(m);
    sleep_ms(400);
    int late = memfd_create("preduce-test", MFD_CLOEXEC);
    if (!EXPECT(s, ftruncate(late, 16) == 0))
        return;
    send_created(fd, 1, 4, late);
    close(late);
    if (!srv_tensor(s, fd, 2))
        return;
    m = srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_DESTROY);
    if (m)
        EXPECT(s, m->tensor_destroy->tensor_id == 1);
    pr_msg_free(m);
    wait_eof(fd);
}

START_TEST(test_client_tensor_create_timeout)
{
    struct srv s;
    srv_start(&s, script_late_create, 0);
    preduce_client_t *c = connect_ok(&s);
    preduce_tensor_t *t;
    int64_t t0 = now_ms();
    ck_assert_int_eq(preduce_tensor_create(c, 4, 100, &t), -ETIMEDOUT);
    ck_assert_int_lt(now_ms() - t0, 350);
    ck_assert_int_eq(preduce_tensor_create(c, 6, 3000, &t), 0);
    ck_assert_uint_eq(preduce_tensor_len(t), 6);
    preduce_tensor_data(t)[5] = 1.5f;
    preduce_close(c);
    srv_stop(&s);
}
END_TEST

/* ---- error texts and the exported symbols ----------------------------- */

START_TEST(test_client_strerror)
{
    for (int e = -300; e <= 300; e++) {
        const char *s = preduce_strerror(e);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_gt((int)strlen(s), 0);
    }
    int odd[] = {INT_MIN, INT_MIN + 1, INT_MAX, -4095, -100000};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        ck_assert_ptr_nonnull(preduce_strerror(odd[i]));
        ck_assert_int_gt((int)strlen(preduce_strerror(odd[i])), 0);
    }
    /* The documented codes have texts of their own. */
    ck_assert_str_ne(preduce_strerror(-EPROTO), preduce_strerror(-EEXIST));
    ck_assert_str_ne(preduce_strerror(-ETIMEDOUT), preduce_strerror(-EBUSY));
}
END_TEST

START_TEST(test_client_exports)
{
    const char *build = getenv("PREDUCE_BUILD");
    char lib[PATH_MAX], cmd[PATH_MAX + 64], line[512];
    snprintf(lib, sizeof(lib), "%s/libpreduce.so", build ? build : "build");
    if (access(lib, R_OK) != 0) {
        printf("test_client_exports: %s not built, skipped\n", lib);
        return;
    }
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", lib);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int public = 0;
    char bad[300] = "";
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
            continue;
        name[strcspn(name, "@")] = 0; /* drop @@PREDUCE_0.1 */
        if (strncmp(name, "preduce_", 8) == 0)
        public++;
        else if (strcmp(name, "PREDUCE_0.1") != 0 &&
                 strcmp(name, "_init") != 0 && strcmp(name, "_fini") != 0 &&
                 !bad[0]) snprintf(bad, sizeof(bad), "%s (%s)", name, type);
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(!bad[0], "%s exports %s", lib, bad);
    ck_assert_int_ge(public, 18);
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("args");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_connect_args);
    tcase_add_test(tc, test_client_null_handles);
    tcase_add_test(tc, test_client_reduce_args);
    tcase_add_test(tc, test_client_strerror);
    tcase_add_test(tc, test_client_exports);
    suite_add_tcase(s, tc);

    tc = tcase_create("connect");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_connect_missing);
    tcase_add_test(tc, test_client_connect_refused);
    tcase_add_test(tc, test_client_connect_timeout);
    tcase_add_test(tc, test_client_connect_ok);
    tcase_add_loop_test(tc, test_client_connect_bad_answer, 0,
                        sizeof(bad_answers) / sizeof(bad_answers[0]));
    suite_add_tcase(s, tc);

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
    suite_add_tcase(s, tc);

    /* The client's grace period is 10 s past the reduce's timeout. */
    tc = tcase_create("timeout");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_client_reduce_timeout);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
