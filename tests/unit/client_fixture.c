/* SPDX-License-Identifier: MIT */
/*
 * The client library tests' fixture (client_fixture.h): the scripted
 * server, its frame helpers and the small clocks and counters the tests
 * share.
 */
#include "tests/unit/client_fixture.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
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

#include "preduce.h"
#include "proto/frame.h"

int64_t cf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cf_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

int cf_count_fds(void)
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

void cf_srv_failf(struct srv *s, const char *fmt, ...)
{
    if (s->fail[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fail, sizeof(s->fail), fmt, ap);
    va_end(ap);
}

/* 0 when n bytes were read, -1 on EOF, error or after IO_MS. */
int cf_read_full(int fd, void *buf, size_t n)
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
void cf_wait_eof_ms(int fd, int timeout_ms)
{
    char b[256];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (poll(&pf, 1, timeout_ms) > 0 && read(fd, b, sizeof(b)) > 0) {
    }
}

void cf_wait_eof(int fd)
{
    cf_wait_eof_ms(fd, IO_MS);
}

Pr__V1__Msg *cf_srv_recv(struct srv *s, int fd)
{
    uint8_t hdr[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr h;
    if (cf_read_full(fd, hdr, sizeof(hdr)) < 0 ||
        pr_frame_hdr_decode(hdr, PR_CTRL_MAX_FRAME, &h) < 0 ||
        h.type != PR_FRAME_MSG) {
        cf_srv_failf(s, "no frame from the client");
        return NULL;
    }
    uint8_t *p = malloc(h.len ? h.len : 1);
    Pr__V1__Msg *m = NULL;
    if (p && cf_read_full(fd, p, h.len) == 0)
        m = pr_msg_unpack(p, h.len);
    free(p);
    if (!m)
        cf_srv_failf(s, "bad frame from the client");
    return m;
}

/* Receives one Msg and checks its case; NULL (and a failure) otherwise. */
Pr__V1__Msg *cf_srv_expect(struct srv *s, int fd, int body_case)
{
    Pr__V1__Msg *m = cf_srv_recv(s, fd);
    if (m && m->body_case != (Pr__V1__Msg__BodyCase)body_case) {
        cf_srv_failf(s, "expected msg %d, got %s", body_case, pr_msg_name(m));
        pr_msg_free(m);
        m = NULL;
    }
    return m;
}

void cf_send_raw(int fd, const void *p, size_t n, int pass_fd)
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

void cf_srv_send(int fd, const Pr__V1__Msg *m, int pass_fd)
{
    uint8_t *buf;
    size_t len;
    if (pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len) == 0) {
        cf_send_raw(fd, buf, len, pass_fd);
        free(buf);
    }
}

uint32_t cf_welcome_grace_ms = 250;

void cf_send_welcome(int fd, uint32_t version, uint32_t rank)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    w.version = version;
    w.id = rank;
    w.grace_ms = cf_welcome_grace_ms;
    m.body_case = PR__V1__MSG__BODY_WELCOME;
    m.welcome = &w;
    cf_srv_send(fd, &m, -1);
}

void cf_send_error(int fd, int code)
{
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    e.code = code;
    e.reason = (char *)"scripted error";
    m.body_case = PR__V1__MSG__BODY_ERROR;
    m.error = &e;
    cf_srv_send(fd, &m, -1);
}

void cf_send_created(int fd, uint32_t id, uint64_t nfloats, int pass_fd)
{
    Pr__V1__TensorCreated t = PR__V1__TENSOR_CREATED__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    t.tensor_id = id;
    t.nfloats = nfloats;
    m.body_case = PR__V1__MSG__BODY_TENSOR_CREATED;
    m.tensor_created = &t;
    cf_srv_send(fd, &m, pass_fd);
}

/* On success, a group of one: the worker itself (rank 3). */
void cf_send_done(int fd, uint64_t seq, int status, uint64_t group,
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
    cf_srv_send(fd, &m, -1);
}

/* Reads the hello of worker "w0" and welcomes it as rank 3. */
bool cf_srv_welcome(struct srv *s, int fd)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return false;
    bool ok = EXPECT(s, m->hello->version == PR_PROTO_VERSION) &&
              EXPECT(s, m->hello->role == PR__V1__ROLE__ROLE_CLIENT) &&
              EXPECT(s, strcmp(m->hello->name, "w0") == 0);
    pr_msg_free(m);
    if (ok)
        cf_send_welcome(fd, PR_PROTO_VERSION, 3);
    return ok;
}

/* Answers one tensor_create with a real memfd of the size asked for. */
bool cf_srv_tensor(struct srv *s, int fd, uint32_t id)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_TENSOR_CREATE);
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
    cf_send_created(fd, id, s->nfloats, s->memfd);
    return true;
}

/* Receives a reduce and checks seq, version and (if n > 0) the ids. */
bool cf_srv_reduce(struct srv *s, int fd, uint64_t seq, uint64_t version,
                   const uint32_t *ids, size_t n)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_REDUCE);
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
        cf_srv_failf(s, "no client connected");
        return NULL;
    }
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        cf_srv_failf(s, "accept: %s", strerror(errno));
        return NULL;
    }
    s->script(s, fd);
    close(fd);
    return NULL;
}

/* Binds a socket in a fresh directory; listens and serves if script. */
void cf_srv_init(struct srv *s, script_fn script, int variant, bool do_listen)
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

void cf_srv_start(struct srv *s, script_fn script, int variant)
{
    cf_srv_init(s, script, variant, true);
}

/* Joins the script, frees what it made, and fails on its verdict. */
void cf_srv_stop(struct srv *s)
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

preduce_client_t *cf_connect_ok(struct srv *s)
{
    preduce_client_t *c = NULL;
    int rc = preduce_connect(s->path, "w0", 3000, &c);
    ck_assert_msg(rc == 0, "connect: %s (server: %s)", preduce_strerror(rc),
                  s->fail);
    ck_assert_ptr_nonnull(c);
    return c;
}
