/* SPDX-License-Identifier: MIT */
/*
 * libpreduce: the connection to the node daemon (socket, frames, dispatch).
 *
 * Protocol on the daemon's Unix socket (SOCK_STREAM), client side. Every
 * frame is a PR_FRAME_MSG carrying one pr.v1.Msg (proto/frame.h); the
 * daemon's frames may be at most PR_CLIENT_MAX_FRAME bytes.
 *
 * 1. connect(); send hello{version = PR_PROTO_VERSION, ROLE_CLIENT, name}.
 *    The daemon answers welcome{id = the worker's rank} once the scheduler
 *    registered the worker, or error{code, reason} and closes.
 * 2. tensor_create{nfloats} -> tensor_created{tensor_id, nfloats}, with the
 *    memfd attached to that frame (SCM_RIGHTS); the client maps it shared
 *    and closes the memfd. Descriptors are queued as they arrive; a
 *    tensor_created takes the oldest one. A descriptor the kernel could
 *    not install (MSG_CTRUNC: this process is out of descriptors) fails
 *    only that create, with -EMFILE, and the client sends tensor_destroy
 *    for the tensor it could not map. The daemon may instead refuse the
 *    tensor with error{code} (too large, out of memory): creates are
 *    answered in order, so an error that comes while a create is pending
 *    is the answer to the oldest one, and the connection stays.
 * 3. tensor_destroy{tensor_id}: no answer; the client unmaps.
 * 4. reduce{seq = 1, 2, ..., version = local version + 1, tensor_ids,
 *    timeout_ms, deadline_ns} -> reduce_done{seq, status, group, members,
 *    ...}. deadline_ns is when timeout_ms ends, on CLOCK_MONOTONIC, which
 *    the daemon reads too. The daemon ends the reduce by then (plus its
 *    grace, see PREDUCE_REDUCE_SLACK_MS) and always answers; the client
 *    waits PREDUCE_REDUCE_SLACK_MS past the deadline and then gives the
 *    connection up, because the tensors' state is unknown. A status is
 *    passed through pr_reduce_status() (proto/status.h), so that an older
 *    daemon's codes are not handed on either. On success the local
 *    version becomes reduce_done.version.
 * 5. error{code} when no create is pending breaks the connection: the call
 *    that reads it returns code, later calls -ENOTCONN. (A fatal error
 *    that comes while a create is pending is that create's answer, and
 *    the close that follows it breaks the connection for the next call.)
 *
 * Frames interleave: a reduce_done may arrive while a call waits for a
 * tensor_created. Every frame read is dispatched at once, whatever call
 * reads it, and its content stays in the client (created_*, done_*) until
 * the call it belongs to picks it up. Because frames are dispatched as soon
 * as they are complete, the reader never holds a whole frame between calls,
 * so preduce_fd() (the socket, plus an eventfd for answers already in
 * memory) is readable whenever preduce_reduce_wait() has something to do.
 */
#include "preduce.h"
#include "client/client_int.h"
#include "proto/status.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* At most this many descriptors are taken from one recvmsg(). */
#define CMSG_FDS 8

int64_t pr_client_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t pr_client_deadline(int timeout_ms)
{
    return pr_client_now() + (int64_t)timeout_ms * 1000000;
}

/* Milliseconds left until `deadline` for poll(), rounded up; 0 if passed. */
static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - pr_client_now();
    if (left <= 0)
        return 0;
    left = (left + 999999) / 1000000;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* 1 when `fd` is ready for `events`, 0 at the deadline, or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = remaining_ms(deadline);
        int rc = poll(&p, 1, ms);
        if (rc > 0)
            return 1;
        if (rc == 0 && ms == 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -errno;
    }
}

static void notify(struct preduce_client *c)
{
    uint64_t one = 1;
    if (c->evfd >= 0 && write(c->evfd, &one, sizeof(one)) < 0) {
        /* Only EAGAIN at a full counter: it is readable already. */
    }
}

void pr_client_unnotify(struct preduce_client *c)
{
    uint64_t v;
    if (c->evfd >= 0 && read(c->evfd, &v, sizeof(v)) < 0) {
        /* EAGAIN: it was not signalled. */
    }
}

/*
 * The client owns its tensors (on c->tensors) and its results (done,
 * result): they are kept here, with the connection that fills and breaks
 * them, so that tensor.c and result.c call down into this file only.
 */
void pr_client_tensor_release(struct preduce_tensor *t)
{
    struct preduce_client *c = t->c;
    if (t->prev)
        t->prev->next = t->next;
    else
        c->tensors = t->next;
    if (t->next)
        t->next->prev = t->prev;
    munmap(t->data, t->nfloats * sizeof(float));
    free(t);
}

static void tensors_free(struct preduce_client *c)
{
    while (c->tensors)
        pr_client_tensor_release(c->tensors);
}

void pr_client_tensors_unbusy(struct preduce_client *c)
{
    for (struct preduce_tensor *t = c->tensors; t; t = t->next)
        t->busy = false;
}

void pr_client_result_fini(struct preduce_result *r)
{
    free(r->ranks);
    free(r->versions);
    free(r->weights);
    memset(r, 0, sizeof(*r));
}

int pr_client_result_set(struct preduce_result *r, const Pr__V1__ReduceDone *d,
                         uint32_t rank)
{
    size_t n = d->n_members;
    if (n == 0 || d->n_member_versions != n || d->n_member_weights != n)
        return -EPROTO;
    bool self = false;
    for (size_t i = 0; i < n; i++)
        self = self || d->members[i] == rank;
    if (!self)
        return -EPROTO;
    struct preduce_result nr = {
        .group = d->group_id,
        .version = d->version,
        .weight = d->weight,
        .wire = d->wire,
        .n = n,
        .ranks = malloc(n * sizeof(uint32_t)),
        .versions = malloc(n * sizeof(uint64_t)),
        .weights = malloc(n * sizeof(double)),
    };
    if (!nr.ranks || !nr.versions || !nr.weights) {
        pr_client_result_fini(&nr);
        return -ENOMEM;
    }
    memcpy(nr.ranks, d->members, n * sizeof(*nr.ranks));
    memcpy(nr.versions, d->member_versions, n * sizeof(*nr.versions));
    memcpy(nr.weights, d->member_weights, n * sizeof(*nr.weights));
    pr_client_result_fini(r);
    *r = nr;
    return 0;
}

int pr_client_err(const struct preduce_client *c)
{
    return c->err;
}

int pr_client_fail(struct preduce_client *c, int rc)
{
    if (!c->err) {
        c->err = -ENOTCONN;
        shutdown(c->fd, SHUT_RDWR);
        /*
         * A reduce_done that came before the break is the reduce's
         * outcome: the daemon has already written the tensors (or left
         * them alone). It stays for the next wait to deliver. A reduce
         * still unanswered is abandoned.
         */
        if (!c->done_ready) {
            c->inflight = false;
            pr_client_result_fini(&c->done);
            pr_client_tensors_unbusy(c);
        }
        if (c->created_fd >= 0)
            close(c->created_fd);
        c->created_fd = -1;
        c->created_ready = false;
        c->created_err = 0;
        /* A poll()ing trainer must call in to learn about it. */
        notify(c);
    }
    return c->daemon_err ? c->daemon_err : rc;
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w >= 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = wait_fd(fd, POLLOUT, deadline);
        if (rc == 0)
            return -ETIMEDOUT;
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int recv_some(struct preduce_client *c);

/*
 * `drain`: after a failed send, read what the daemon left in the socket, so
 * that the caller gets the reason from its Msg.error rather than -EPIPE.
 * Never from inside dispatch(), where the reader still holds a frame.
 */
static int send_msg(struct preduce_client *c, const Pr__V1__Msg *m,
                    int64_t deadline, bool drain)
{
    if (c->err)
        return pr_client_err(c);
    uint8_t *buf;
    size_t len;
    int rc = pr_msg_frame(m, PR_CLIENT_MAX_FRAME, &buf, &len);
    if (rc < 0)
        return rc; /* nothing was sent: the connection is fine */
    rc = send_all(c->fd, buf, len, deadline);
    /* Control frames are small; the Hello's may hold a job key. */
    explicit_bzero(buf, len);
    free(buf);
    if (rc < 0 && drain && rc != -ETIMEDOUT) {
        while (!c->err && recv_some(c) > 0) {
        }
    }
    return rc < 0 ? pr_client_fail(c, rc) : 0;
}

int pr_client_send(struct preduce_client *c, const Pr__V1__Msg *m,
                   int64_t deadline)
{
    return send_msg(c, m, deadline, true);
}

/* Appends fd (or PR_CLIENT_FD_LOST) to the FIFO. 0, or -EPROTO if full. */
static int push_fd(struct preduce_client *c, int fd)
{
    if (c->fd_count == PR_CLIENT_MAX_FDS) {
        if (fd >= 0)
            close(fd);
        return -EPROTO;
    }
    c->fds[(c->fd_head + c->fd_count) % PR_CLIENT_MAX_FDS] = fd;
    c->fd_count++;
    return 0;
}

/* Moves the descriptors of one recvmsg() into the FIFO. 0 or -EPROTO. */
static int take_fds(struct preduce_client *c, struct msghdr *mh)
{
    int rc = 0;
    size_t got = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
            got++;
            if (push_fd(c, fd) < 0)
                rc = -EPROTO;
        }
    }
    if (mh->msg_flags & MSG_CTRUNC) {
        /*
         * The kernel dropped a descriptor it could not install here: with
         * room for CMSG_FDS of them, this process is at its limit
         * (RLIMIT_NOFILE). The daemon passes one descriptor per frame and
         * one recvmsg() takes those of one sendmsg() at most, so exactly
         * one was lost: the marker takes its place for the tensor_created
         * it came with. If some came through, the peer sent several with
         * one frame, which is not this protocol.
         */
        if (got > 0)
            return -EPROTO;
        rc = push_fd(c, PR_CLIENT_FD_LOST);
    }
    return rc;
}

static int pop_fd(struct preduce_client *c)
{
    if (c->fd_count == 0)
        return -1;
    int fd = c->fds[c->fd_head];
    c->fd_head = (c->fd_head + 1) % PR_CLIENT_MAX_FDS;
    c->fd_count--;
    return fd;
}

/*
 * Keeps the daemon's words on a failure for preduce_last_error(): printable
 * ASCII only (they come off the socket and go to a trainer's log).
 */
static void set_last_error(struct preduce_client *c, const char *reason)
{
    size_t n = 0;
    for (; reason && reason[n] && n + 1 < sizeof(c->last_error); n++) {
        unsigned char ch = (unsigned char)reason[n];
        c->last_error[n] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    c->last_error[n] = '\0';
}

static int on_error(struct preduce_client *c, const Pr__V1__Error *e)
{
    /* Only a negative errno is a code a caller can act on. */
    if (e->code >= 0 || e->code < -4095) {
        c->daemon_err = -EPROTO;
        return c->daemon_err;
    }
    if (c->creates_pending > 0 && !c->created_ready) {
        /* The daemon refused the oldest create still pending. */
        c->creates_pending--;
        if (c->creates_orphaned > 0) {
            c->creates_orphaned--;
            return 0;
        }
        c->created_ready = true;
        c->created_err = e->code;
        set_last_error(c, e->reason);
        return 0;
    }
    c->daemon_err = e->code;
    if (!c->welcomed)
        set_last_error(c, e->reason); /* why the connect was refused */
    return c->daemon_err;
}

static int on_welcome(struct preduce_client *c, const Pr__V1__Welcome *w)
{
    if (w->version != PR_PROTO_VERSION || w->id > INT_MAX)
        return -EPROTO;
    c->rank = w->id;
    snprintf(c->job, sizeof(c->job), "%s", w->job ? w->job : "");
    /*
     * A daemon that does not say its grace is one from before it (5 s):
     * waiting only 1 s past a deadline, the library would give up while
     * that daemon may still write the tensors.
     */
    c->slack_ms = PR_CLIENT_OLD_DAEMON_SLACK_MS;
    if (w->grace_ms) {
        /* At least its grace and half a second for the answer to come. */
        uint32_t g = w->grace_ms < 60000 ? w->grace_ms : 60000;
        c->slack_ms = g + 500 > PREDUCE_REDUCE_SLACK_MS
                          ? (int)(g + 500)
                          : PREDUCE_REDUCE_SLACK_MS;
    }
    c->node_wire = w->wire;
    if (c->sent_key && !w->keyed) {
        set_last_error(c, "the node daemon is older than job keys: it "
                          "dropped the key (PREDUCE_JOB_KEY), and the job "
                          "would be open to anyone");
        return -EPROTO;
    }
    if (c->sent_sched && !w->own_scheduler) {
        set_last_error(c, "the node daemon is older than job schedulers: "
                          "it ignored PREDUCE_SCHEDULER, and the job would "
                          "run on the node's scheduler");
        return -EPROTO;
    }
    c->welcomed = true;
    return 0;
}

static int send_destroy(struct preduce_client *c, uint32_t id, bool drain);

static int on_tensor_created(struct preduce_client *c,
                             const Pr__V1__TensorCreated *t)
{
    if (c->creates_pending == 0 || c->created_ready)
        return -EPROTO;
    int fd = pop_fd(c);
    if (fd == -1)
        return -EPROTO; /* no descriptor came with it */
    c->creates_pending--;
    if (c->creates_orphaned > 0 || fd == PR_CLIENT_FD_LOST) {
        /*
         * The call that asked for it gave up, or its memory cannot be
         * mapped here: hand it straight back, and fail only that call.
         */
        if (c->creates_orphaned > 0) {
            c->creates_orphaned--;
        } else {
            c->created_ready = true;
            c->created_err = -EMFILE;
        }
        if (fd >= 0)
            close(fd);
        return send_destroy(c, t->tensor_id, false);
    }
    c->created_ready = true;
    c->created_err = 0;
    c->created_id = t->tensor_id;
    c->created_nfloats = t->nfloats;
    c->created_fd = fd;
    return 0;
}

static int send_destroy(struct preduce_client *c, uint32_t id, bool drain)
{
    Pr__V1__TensorDestroy d = PR__V1__TENSOR_DESTROY__INIT;
    d.tensor_id = id;
    Pr__V1__Msg m = PR_MSG_OF(TENSOR_DESTROY, tensor_destroy, &d);
    return send_msg(c, &m, pr_client_deadline(PR_CLIENT_SEND_MS), drain);
}

int pr_client_send_destroy(struct preduce_client *c, uint32_t id)
{
    return send_destroy(c, id, true);
}

static int on_reduce_done(struct preduce_client *c, const Pr__V1__ReduceDone *d)
{
    if (!c->inflight || c->done_ready || d->seq != c->seq)
        return -EPROTO;
    if (d->status > 0 || d->status < -4095)
        return -EPROTO;
    if (d->status == 0) {
        /*
         * The rank is the one the group used: it changes when the daemon
         * re-registered this worker with a restarted scheduler.
         */
        if (d->rank > INT32_MAX)
            return -EPROTO;
        int rc = pr_client_result_set(&c->done, d, d->rank);
        if (rc < 0)
            return rc;
        c->rank = d->rank;
    }
    c->done_status = pr_reduce_status(d->status);
    if (d->status < 0)
        set_last_error(c, d->reason);
    c->done_ready = true;
    notify(c);
    return 0;
}

static int on_ping(struct preduce_client *c, const Pr__V1__Ping *p)
{
    Pr__V1__Ping pong = PR__V1__PING__INIT;
    pong.nonce = p->nonce;
    Pr__V1__Msg m = PR_MSG_OF(PONG, pong, &pong);
    return send_msg(c, &m, pr_client_deadline(PR_CLIENT_SEND_MS), false);
}

/* Handles one frame. 0, or the error that broke the connection. */
static int dispatch(struct preduce_client *c, const struct pr_frame_hdr *h,
                    const uint8_t *payload)
{
    if (h->type != PR_FRAME_MSG)
        return pr_client_fail(c, -EPROTO);
    Pr__V1__Msg *m = pr_msg_unpack(payload, h->len);
    if (!m)
        return pr_client_fail(c, -EPROTO);
    int rc = -EPROTO;
    switch (m->body_case) {
    case PR__V1__MSG__BODY_ERROR:
        rc = on_error(c, m->error);
        break;
    case PR__V1__MSG__BODY_PING:
        rc = on_ping(c, m->ping);
        break;
    case PR__V1__MSG__BODY_PONG:
        rc = 0;
        break;
    case PR__V1__MSG__BODY_WELCOME:
        if (!c->welcomed)
            rc = on_welcome(c, m->welcome);
        break;
    case PR__V1__MSG__BODY_TENSOR_CREATED:
        if (c->welcomed)
            rc = on_tensor_created(c, m->tensor_created);
        break;
    case PR__V1__MSG__BODY_REDUCE_DONE:
        if (c->welcomed)
            rc = on_reduce_done(c, m->reduce_done);
        break;
    default:
        break;
    }
    pr_msg_free(m);
    return rc < 0 ? pr_client_fail(c, rc) : 0;
}

/*
 * One recvmsg() without waiting, then every complete frame dispatched.
 * 1 after progress, 0 when nothing was there, or the error that broke the
 * connection.
 */
static int recv_some(struct preduce_client *c)
{
    void *p;
    size_t n;
    int rc = pr_frame_reader_reserve(&c->rd, 4096, &p, &n);
    if (rc < 0)
        return pr_client_fail(c, rc);
    union {
        char buf[CMSG_SPACE(CMSG_FDS * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = p, .iov_len = n};
    struct msghdr mh = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = u.buf,
        .msg_controllen = sizeof(u.buf),
    };
    ssize_t r;
    do {
        r = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return pr_client_fail(c, -errno);
    }
    rc = take_fds(c, &mh);
    if (rc < 0)
        return pr_client_fail(c, rc);
    if (r == 0)
        return pr_client_fail(c, -EPIPE);
    pr_frame_reader_commit(&c->rd, (size_t)r);
    struct pr_frame_hdr h;
    const uint8_t *payload;
    while ((rc = pr_frame_reader_next(&c->rd, &h, &payload)) == 1) {
        rc = dispatch(c, &h, payload);
        if (rc < 0)
            return rc;
    }
    if (rc < 0)
        return pr_client_fail(c, rc);
    return 1;
}

int pr_client_pump(struct preduce_client *c, const bool *flag, int64_t deadline)
{
    while (!*flag) {
        if (c->err)
            return pr_client_err(c);
        int rc = wait_fd(c->fd, POLLIN, deadline);
        if (rc == 0)
            return -ETIMEDOUT;
        if (rc < 0)
            return pr_client_fail(c, rc);
        rc = recv_some(c);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* 1..63 bytes, no control characters (names end up in logs and metrics). */
static bool valid_name(const char *name)
{
    if (!name)
        return false;
    size_t n = strnlen(name, PR_CLIENT_NAME_MAX + 1);
    if (n == 0 || n > PR_CLIENT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return false;
    }
    return true;
}

static int open_socket(struct preduce_client *c, const struct sockaddr_un *sa,
                       int64_t deadline)
{
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return -errno;
    for (;;) {
        if (connect(c->fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        /*
         * The daemon's backlog is full. A Unix socket cannot be polled for
         * that: retry every 10 ms until the deadline.
         */
        int ms = remaining_ms(deadline);
        if (ms == 0)
            return -ETIMEDOUT;
        struct timespec ts = {0, (ms < 10 ? ms : 10) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* preduce_fd(): readable when the socket is, or an answer is in memory. */
static int open_notify(struct preduce_client *c)
{
    c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->evfd < 0)
        return -errno;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0)
        return -errno;
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = c->fd;
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
        return -errno;
    ev.data.fd = c->evfd;
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) < 0)
        return -errno;
    return 0;
}

static int say_hello(struct preduce_client *c, const char *name,
                     const struct preduce_options *o, const uint8_t *key,
                     size_t key_len, int64_t deadline)
{
    Pr__V1__Hello hello = PR__V1__HELLO__INIT;
    char *settings[PR_CLIENT_SETTINGS_MAX];
    hello.version = PR_PROTO_VERSION;
    hello.role = PR__V1__ROLE__ROLE_CLIENT;
    hello.name = (char *)name;
    if (o->has_job)
        hello.job = (char *)o->job;
    for (size_t i = 0; i < o->nsettings; i++)
        settings[i] = (char *)o->settings[i];
    hello.n_settings = o->nsettings;
    hello.settings = settings;
    /* The key's bytes go to the daemon on this socket alone (Hello.job_key). */
    hello.job_key.data = (uint8_t *)key;
    hello.job_key.len = key_len;
    c->sent_key = key_len > 0;
    if (o->scheduler[0])
        hello.scheduler = (char *)o->scheduler;
    c->sent_sched = o->scheduler[0] != '\0';
    Pr__V1__Msg m = PR_MSG_OF(HELLO, hello, &hello);
    int rc = pr_client_send(c, &m, deadline);
    if (rc < 0)
        return rc;
    return pr_client_pump(c, &c->welcomed, deadline);
}

/* Why this thread's last connect failed: preduce_last_error(NULL). */
static _Thread_local char connect_error[256];

int preduce_connect(const char *socket_path, const char *name, int timeout_ms,
                    preduce_client_t **out)
{
    return preduce_connect_with(socket_path, name, NULL, timeout_ms, out);
}

int preduce_connect_with(const char *socket_path, const char *name,
                         const preduce_options_t *options, int timeout_ms,
                         preduce_client_t **out)
{
    struct preduce_options o;
    connect_error[0] = '\0';
    if (out)
        *out = NULL;
    if (!socket_path || !out || timeout_ms < 0 || !valid_name(name)) {
        snprintf(connect_error, sizeof(connect_error),
                 "bad arguments: a socket path, a worker name of 1..63 bytes "
                 "without control characters, a timeout >= 0");
        return -EINVAL;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(socket_path);
    if (len == 0 || len >= sizeof(sa.sun_path)) {
        snprintf(connect_error, sizeof(connect_error),
                 "socket path of %zu bytes: 1..%zu", len,
                 sizeof(sa.sun_path) - 1);
        return -EINVAL;
    }
    memcpy(sa.sun_path, socket_path, len + 1);
    const char *why = "";
    int rc = pr_client_options_resolve(options, &o, &why);
    if (rc < 0) {
        snprintf(connect_error, sizeof(connect_error), "%s", why);
        return rc;
    }
    int64_t deadline = pr_client_deadline(timeout_ms);
    /* Wiped once the hello is out (its frame too: send_msg). */
    uint8_t key[PR_CLIENT_KEY_MAX];
    size_t key_len = 0;
    rc = pr_client_job_key_read(&o, key, &key_len, &why);
    if (rc < 0) {
        snprintf(connect_error, sizeof(connect_error), "%s (%.100s)%s%s", why,
                 o.job_key, rc != -EINVAL ? ": " : "",
                 rc != -EINVAL ? strerror(-rc) : "");
        return rc;
    }
    struct preduce_client *c = calloc(1, sizeof(*c));
    if (!c) {
        explicit_bzero(key, sizeof(key));
        snprintf(connect_error, sizeof(connect_error), "out of memory");
        return -ENOMEM;
    }
    c->fd = -1;
    c->epfd = -1;
    c->evfd = -1;
    c->created_fd = -1;
    c->wire = o.wire;
    rc = pr_frame_reader_init(&c->rd, PR_CLIENT_MAX_FRAME);
    if (rc == 0)
        rc = open_socket(c, &sa, deadline);
    if (rc == 0)
        rc = open_notify(c);
    if (rc == 0)
        rc = say_hello(c, name, &o, key, key_len, deadline);
    explicit_bzero(key, sizeof(key));
    if (rc < 0) {
        snprintf(connect_error, sizeof(connect_error), "%s",
                 c->last_error[0] ? c->last_error : preduce_strerror(rc));
        preduce_close(c);
        return rc;
    }
    connect_error[0] = '\0';
    *out = c;
    return 0;
}

int preduce_close(preduce_client_t *c)
{
    if (!c)
        return 0;
    tensors_free(c);
    while (c->fd_count > 0) {
        int fd = pop_fd(c);
        if (fd >= 0)
            close(fd);
    }
    if (c->created_fd >= 0)
        close(c->created_fd);
    pr_client_result_fini(&c->done);
    pr_client_result_fini(&c->result);
    pr_frame_reader_fini(&c->rd);
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->evfd >= 0)
        close(c->evfd);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
    return 0;
}

int preduce_rank(const preduce_client_t *c)
{
    if (!c)
        return -EINVAL;
    return c->err ? pr_client_err(c) : (int)c->rank;
}

const char *preduce_job(const preduce_client_t *c)
{
    return c ? c->job : "";
}

int preduce_fd(const preduce_client_t *c)
{
    return c ? c->epfd : -EINVAL;
}

const char *preduce_last_error(const preduce_client_t *c)
{
    return c ? c->last_error : connect_error;
}
