/* SPDX-License-Identifier: MIT */
/*
 * The I/O thread of conn_io.h. The loop attaches a connection (its socket
 * goes on the thread's epoll, watching nothing yet), then submits
 * operations: at most one read (a landing payload's rest) and a queue of
 * writes (data frames, and what follows them while any waits). The thread
 * goes over its connections, one system call per operation that has bytes
 * left, until a pass moves nothing (every socket said EAGAIN); then it
 * arms each socket that has operations for their directions, once
 * (EPOLLONESHOT), and sleeps in epoll_wait until one is ready or the
 * eventfd the loop writes when it submits wakes it. A socket is watched
 * only while the thread has something to do on it: the loop reads the
 * rest of a connection's frames, and a socket watched for them too would
 * wake the thread for every one. An operation that ended goes to
 * the done list, and the loop's async handle reports it (conn.c,
 * pr_conn_io_done).
 *
 * What is shared sits under one mutex: the slots and their operations,
 * the done list. The thread drops it around each system call, with the
 * slot marked busy: a detach (the connection closing on the loop) marks
 * the slot gone and waits while it is busy, so that when it returns the
 * thread is in no call on that socket and never will be, and the loop
 * may close the descriptor and free the memory the operations pointed
 * at. The wait is one system call of at most an operation's bytes.
 */
#include "daemon/base/conn_io.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/base/conn.h"
#include "daemon/base/conn_int.h"
#include "daemon/base/log.h"

/* A connection's socket on the thread. */
struct pr_io_slot {
    struct pr_io_slot *next;
    struct pr_conn *c;
    int fd;
    struct pr_io_op *rx;            /* the read in progress, or NULL */
    struct pr_io_op *tx, **tx_tail; /* writes, in order */
    int busy;                       /* the thread is in a call on fd */
    int gone;                       /* detached: the thread lets it be */
};

struct pr_conn_io {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t thread;
    int epfd, evfd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct pr_io_slot *slots;
    struct pr_io_op *done, **done_tail;
    int stop;
    int sleeping;     /* in epoll_wait, or about to be: submits write evfd */
    uint64_t submits; /* operations submitted, ever */
    /* The loop's alone: */
    int on;                 /* pr_conn_io_set_on */
    uint64_t read, written; /* what the reported operations moved */
    void (*on_closed)(void *arg);
    void *closed_arg;
};

static void wake(struct pr_conn_io *io)
{
    uint64_t one = 1;
    /* EAGAIN: the counter is full, the thread will wake anyway. */
    if (write(io->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        pr_err("I/O thread: cannot wake it: %s", strerror(errno));
}

/* op's iov after its first `n` bytes. */
static void advance(struct pr_io_op *op, size_t n)
{
    op->done += n;
    while (n > 0 && op->iovcnt > 0) {
        size_t k = n < op->iov[0].iov_len ? n : op->iov[0].iov_len;
        op->iov[0].iov_base = (uint8_t *)op->iov[0].iov_base + k;
        op->iov[0].iov_len -= k;
        n -= k;
        if (op->iov[0].iov_len == 0) {
            op->iov[0] = op->iov[1];
            op->iovcnt--;
        }
    }
}

/* op ended (status set): off its slot, onto the done list. Under mu. */
static void finish(struct pr_conn_io *io, struct pr_io_slot *s,
                   struct pr_io_op *op)
{
    if (op->rx) {
        s->rx = NULL;
    } else {
        s->tx = op->next;
        if (!s->tx)
            s->tx_tail = &s->tx;
    }
    op->next = NULL;
    op->done_ns = uv_hrtime();
    int was_empty = io->done == NULL;
    *io->done_tail = op;
    io->done_tail = &op->next;
    if (was_empty)
        uv_async_send(&io->async);
}

/*
 * s's socket failed (status < 0): every operation it has ends with it,
 * no call made, so that no write follows one cut short. Under mu.
 */
static void fail_slot(struct pr_conn_io *io, struct pr_io_slot *s, int status)
{
    if (s->rx) {
        s->rx->status = status;
        finish(io, s, s->rx);
    }
    while (s->tx) {
        s->tx->status = status;
        finish(io, s, s->tx);
    }
}

/*
 * One system call for op on s, mu dropped around it: 1 if it moved bytes
 * or ended op, 0 if the socket would block, -1 if s went meanwhile.
 */
static int step(struct pr_conn_io *io, struct pr_io_slot *s,
                struct pr_io_op *op)
{
    struct iovec iov[2];
    int cnt = op->iovcnt;
    memcpy(iov, op->iov, sizeof(iov));
    s->busy = 1;
    pthread_mutex_unlock(&io->mu);
    ssize_t n;
    if (op->rx) {
        n = readv(s->fd, iov, cnt);
    } else {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    int err = n < 0 ? errno : 0;
    pthread_mutex_lock(&io->mu);
    s->busy = 0;
    if (s->gone) {
        pthread_cond_broadcast(&io->cv);
        return -1;
    }
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))
        return 0;
    if (n < 0 && err == EINTR)
        return 1;
    if (n < 0) {
        fail_slot(io, s, -err);
        return 1;
    }
    if (n == 0 && op->rx) {
        op->status = UV_EOF;
    } else {
        advance(op, (size_t)n);
        if (op->done < op->len)
            return 1;
    }
    finish(io, s, op);
    return 1;
}

/*
 * The thread's own niceness, above the process's: on a host whose cores
 * are busy (the trainers', the reduce threads', this thread's copies),
 * the loop, which serves every job's small reduces and the control
 * plane, then gets a core first when it wakes, and a large transfer
 * waits a little for it. On 2 cores, a small job's p99 next to a 256 MiB
 * one was 4-5 times its own with this thread at the process's niceness
 * (single runs), 2.5-2.6 times at +10 (3 runs; make bench-jobs,
 * docs/benchmarks.md).
 */
#define IO_NICE 10

/* The thread's niceness (IO_NICE) and name (for top -H, ps -L). */
static void thread_setup(void)
{
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (nice == -1 && errno != 0)
        return;
    nice = nice + IO_NICE > 19 ? 19 : nice + IO_NICE;
    /* Linux: a thread's niceness is its own (setpriority(2), NOTES). */
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), nice) < 0)
        pr_dbg("I/O thread: setpriority: %s", strerror(errno));
    pthread_setname_np(pthread_self(), "preduced-io");
}

static void *thread_main(void *arg)
{
    struct pr_conn_io *io = arg;
    struct epoll_event ev[16];
    thread_setup();
    pthread_mutex_lock(&io->mu);
    while (!io->stop) {
        int moved = 0;
        uint64_t seen = io->submits;
    again:
        for (struct pr_io_slot *s = io->slots; s; s = s->next) {
            if (s->gone)
                continue;
            for (int dir = 0; dir < 2; dir++) {
                struct pr_io_op *op = dir == 0 ? s->rx : s->tx;
                if (!op)
                    continue;
                int r = step(io, s, op);
                if (r < 0)
                    goto again; /* the list changed under us */
                moved |= r;
            }
        }
        /* What came while the pass ran gets a pass before any sleep. */
        if (moved || io->stop || io->submits != seen)
            continue;
        /*
         * Every operation said EAGAIN: its socket is watched for its
         * directions, level-triggered (ready already: at once), once. (An
         * arm whose operations ended meanwhile wakes the thread once more,
         * for nothing.) A detach takes the socket off the epoll before it
         * marks the slot gone, so a slot not gone is still on it, or the
         * call says ENOENT, harmless. Another error would leave the
         * socket unwatched and its operations waiting for ever: they fail.
         */
        int failed = 0;
        for (struct pr_io_slot *s = io->slots; s; s = s->next) {
            uint32_t want = (s->rx ? EPOLLIN : 0) | (s->tx ? EPOLLOUT : 0);
            if (!want || s->gone)
                continue;
            struct epoll_event arm = {.events = want | EPOLLONESHOT,
                                      .data.ptr = s};
            if (epoll_ctl(io->epfd, EPOLL_CTL_MOD, s->fd, &arm) < 0 &&
                errno != ENOENT) {
                fail_slot(io, s, -errno);
                failed = 1;
            }
        }
        if (failed)
            continue;
        io->sleeping = 1;
        pthread_mutex_unlock(&io->mu);
        int n = epoll_wait(io->epfd, ev, 16, -1);
        for (int i = 0; i < n; i++)
            if (ev[i].data.ptr == NULL) {
                uint64_t v;
                if (read(io->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                    pr_err("I/O thread: eventfd: %s", strerror(errno));
            }
        pthread_mutex_lock(&io->mu);
        io->sleeping = 0;
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/*
 * One at a time: reporting one may close another connection, whose
 * detach then takes its own ended operations from the list.
 */
static void async_cb(uv_async_t *h)
{
    struct pr_conn_io *io = h->data;
    for (;;) {
        pthread_mutex_lock(&io->mu);
        struct pr_io_op *op = io->done;
        if (op) {
            io->done = op->next;
            if (!io->done)
                io->done_tail = &io->done;
        }
        pthread_mutex_unlock(&io->mu);
        if (!op)
            return;
        op->next = NULL;
        if (op->rx)
            io->read += op->done;
        else
            io->written += op->done;
        pr_conn_io_done(op);
    }
}

static void io_closed_cb(uv_handle_t *h)
{
    struct pr_conn_io *io = h->data;
    void (*cb)(void *) = io->on_closed;
    void *arg = io->closed_arg;
    pthread_cond_destroy(&io->cv);
    pthread_mutex_destroy(&io->mu);
    free(io);
    if (cb)
        cb(arg);
}

int pr_conn_io_create(uv_loop_t *loop, struct pr_conn_io **out)
{
    struct pr_conn_io *io = calloc(1, sizeof(*io));
    if (!io)
        return -ENOMEM;
    io->loop = loop;
    io->on = 1;
    io->done_tail = &io->done;
    io->epfd = epoll_create1(EPOLL_CLOEXEC);
    io->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = 0;
    if (io->epfd < 0 || io->evfd < 0) {
        rc = -errno;
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->evfd, &ev) < 0) {
        rc = -errno;
        goto fail;
    }
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv, NULL);
    rc = uv_async_init(loop, &io->async, async_cb);
    if (rc < 0)
        goto fail_sync;
    io->async.data = io;
    /* Signals go to the loop thread: this one blocks them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&io->thread, NULL, thread_main, io);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        /* The handle's close frees io (io_closed_cb). */
        close(io->epfd);
        close(io->evfd);
        uv_close((uv_handle_t *)&io->async, io_closed_cb);
        return rc;
    }
    *out = io;
    return 0;
fail_sync:
    pthread_cond_destroy(&io->cv);
    pthread_mutex_destroy(&io->mu);
fail:
    if (io->epfd >= 0)
        close(io->epfd);
    if (io->evfd >= 0)
        close(io->evfd);
    free(io);
    return rc;
}

void pr_conn_io_destroy(struct pr_conn_io *io, void (*on_closed)(void *arg),
                        void *arg)
{
    if (!io)
        return;
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_mutex_unlock(&io->mu);
    wake(io);
    pthread_join(io->thread, NULL);
    close(io->epfd);
    close(io->evfd);
    io->on_closed = on_closed;
    io->closed_arg = arg;
    uv_close((uv_handle_t *)&io->async, io_closed_cb);
}

void pr_conn_io_set_on(struct pr_conn_io *io, int on)
{
    io->on = on;
}

int pr_conn_io_on(const struct pr_conn_io *io)
{
    return io->on;
}

uint64_t pr_conn_io_read(const struct pr_conn_io *io)
{
    return io->read;
}

uint64_t pr_conn_io_written(const struct pr_conn_io *io)
{
    return io->written;
}

int pr_io_attach(struct pr_conn_io *io, struct pr_conn *c)
{
    uv_os_fd_t fd;
    int rc = uv_fileno(&c->h.handle, &fd);
    if (rc < 0)
        return rc;
    struct pr_io_slot *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = c;
    s->fd = fd;
    s->tx_tail = &s->tx;
    /* Nothing watched until the thread arms it (thread_main). */
    struct epoll_event ev = {.events = EPOLLONESHOT, .data.ptr = s};
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        rc = -errno;
        free(s);
        return rc;
    }
    pthread_mutex_lock(&io->mu);
    s->next = io->slots;
    io->slots = s;
    pthread_mutex_unlock(&io->mu);
    c->io = io;
    c->io_slot = s;
    return 0;
}

struct pr_io_op *pr_io_detach(struct pr_conn_io *io, struct pr_conn *c)
{
    struct pr_io_slot *s = c->io_slot;
    if (!s)
        return NULL;
    /* Off the epoll first: no event of it wakes the thread after. */
    epoll_ctl(io->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    pthread_mutex_lock(&io->mu);
    s->gone = 1;
    /*
     * At most one system call of the thread's, which runs below the
     * loop's priority: on a host with no core free, a close may wait
     * for it to get one. Closes are rare; a landing that outlives its
     * close would write into memory its owner freed.
     */
    while (s->busy)
        pthread_cond_wait(&io->cv, &io->mu);
    struct pr_io_slot **pp = &io->slots;
    while (*pp != s)
        pp = &(*pp)->next;
    *pp = s->next;
    /* What it had: the read, the writes, and what ended unreported. */
    struct pr_io_op *list = NULL, **tail = &list;
    for (struct pr_io_op **op = &io->done; *op;) {
        if ((*op)->c == c) {
            struct pr_io_op *o = *op;
            *op = o->next;
            o->next = NULL;
            *tail = o;
            tail = &o->next;
        } else {
            op = &(*op)->next;
        }
    }
    io->done_tail = &io->done;
    while (*io->done_tail)
        io->done_tail = &(*io->done_tail)->next;
    if (s->rx) {
        s->rx->status = -ECANCELED;
        *tail = s->rx;
        tail = &s->rx->next;
        s->rx->next = NULL;
    }
    for (struct pr_io_op *o = s->tx; o; o = o->next)
        o->status = -ECANCELED;
    *tail = s->tx;
    pthread_mutex_unlock(&io->mu);
    free(s);
    c->io = NULL;
    c->io_slot = NULL;
    /* What they moved counts, whether or not it was all. */
    for (const struct pr_io_op *op = list; op; op = op->next) {
        if (op->rx)
            io->read += op->done;
        else
            io->written += op->done;
    }
    return list;
}

void pr_io_submit(struct pr_conn_io *io, struct pr_io_op *op)
{
    struct pr_io_slot *s = op->c->io_slot;
    pthread_mutex_lock(&io->mu);
    if (op->rx) {
        s->rx = op;
    } else {
        op->next = NULL;
        *s->tx_tail = op;
        s->tx_tail = &op->next;
    }
    io->submits++;
    int sleeping = io->sleeping;
    pthread_mutex_unlock(&io->mu);
    if (sleeping)
        wake(io);
}
