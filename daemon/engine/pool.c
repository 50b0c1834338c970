/* SPDX-License-Identifier: MIT */
/*
 * The engine's thread pool (pool.h). One mutex guards the queue of jobs
 * with slices left to claim, every job's counters and the list of jobs
 * whose slices have all ended; slices are large (PR_POOL_MIN_SLICE floats
 * and up), so the lock is taken a few times per 64 KiB at most. A thread
 * claims a slice under the lock and runs it outside it.
 */
#include "daemon/engine/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"

struct pr_pool {
    uv_loop_t *loop;
    uv_async_t async; /* done jobs are waiting */
    pthread_mutex_t mu;
    pthread_cond_t work;   /* a job was queued, or stop */
    pthread_cond_t joined; /* a job of pr_pool_run ended, or one got done */
    struct pr_pool_job *head, *tail; /* jobs with slices to claim */
    struct pr_pool_job *done_head, **done_tail;
    size_t outstanding;  /* loop thread only: submitted, done() not run */
    size_t done_pending; /* under mu: on the done list */
    int stop;
    unsigned nthreads, started;
    pthread_t threads[PR_POOL_MAX_THREADS];
};

void pr_pool_slice(size_t n, uint32_t nslices, uint32_t i, size_t *lo,
                   size_t *hi)
{
    size_t units = (n + PR_POOL_ALIGN_FLOATS - 1) / PR_POOL_ALIGN_FLOATS;
    size_t base = units / nslices, rem = units % nslices;
    size_t a = i * base + (i < rem ? i : rem);
    size_t b = a + base + (i < rem ? 1 : 0);
    a *= PR_POOL_ALIGN_FLOATS;
    b *= PR_POOL_ALIGN_FLOATS;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

uint32_t pr_pool_nslices(const struct pr_pool *p, size_t n)
{
    size_t most = n / PR_POOL_MIN_SLICE;
    size_t want = (n + PR_POOL_MAX_SLICE - 1) / PR_POOL_MAX_SLICE;
    if (want < p->nthreads)
        want = p->nthreads;
    if (most < 1)
        most = 1;
    return (uint32_t)(most < want ? most : want);
}

unsigned pr_pool_threads(const struct pr_pool *p)
{
    return p->nthreads;
}

size_t pr_pool_outstanding(const struct pr_pool *p)
{
    return p->outstanding;
}

unsigned pr_pool_default_threads(unsigned cap)
{
    cpu_set_t set;
    unsigned n = 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = (unsigned)CPU_COUNT(&set);
    if (cap > 0 && n > cap)
        n = cap;
    return n;
}

static void unqueue(struct pr_pool *p, struct pr_pool_job *j)
{
    struct pr_pool_job **pp = &p->head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = j->next;
    if (p->tail == j)
        p->tail = prev;
    j->next = NULL;
    j->queued = 0;
}

/* Under mu: slice i of j has ended (run or skipped). */
static void slice_ended(struct pr_pool *p, struct pr_pool_job *j, int *wake)
{
    if (++j->finished < j->nslices)
        return;
    if (!j->done) {
        pthread_cond_broadcast(&p->joined);
        return;
    }
    j->next = NULL;
    *p->done_tail = j;
    p->done_tail = &j->next;
    p->done_pending++;
    pthread_cond_broadcast(&p->joined);
    *wake = 1;
}

/*
 * Under mu: claims the next slice of j (which has one left), taking j off
 * the queue with its last; whether it is to run.
 */
static int claim(struct pr_pool *p, struct pr_pool_job *j, size_t *lo,
                 size_t *hi)
{
    uint32_t i = j->claimed++;
    if (j->claimed == j->nslices)
        unqueue(p, j);
    pr_pool_slice(j->n, j->nslices, i, lo, hi);
    return !j->cancelled;
}

static void *worker(void *arg)
{
    struct pr_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;
        struct pr_pool_job *j = p->head;
        size_t lo, hi;
        int run = claim(p, j, &lo, &hi);
        pthread_mutex_unlock(&p->mu);
        if (run && lo < hi)
            j->fn(j->arg, lo, hi);
        int wake = 0;
        pthread_mutex_lock(&p->mu);
        slice_ended(p, j, &wake);
        if (wake)
            uv_async_send(&p->async);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* On the loop: runs done() of the jobs whose slices have all ended. */
static void deliver(struct pr_pool *p)
{
    pthread_mutex_lock(&p->mu);
    struct pr_pool_job *j = p->done_head;
    p->done_head = NULL;
    p->done_tail = &p->done_head;
    p->done_pending = 0;
    pthread_mutex_unlock(&p->mu);
    while (j) {
        struct pr_pool_job *next = j->next;
        p->outstanding--;
        if (p->outstanding == 0)
            uv_unref((uv_handle_t *)&p->async);
        j->done(j, j->cancelled ? -ECANCELED : 0);
        j = next;
    }
}

static void async_cb(uv_async_t *a)
{
    deliver(a->data);
}

static void close_cb(uv_handle_t *h)
{
    struct pr_pool *p = h->data;
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->joined);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void stop_threads(struct pr_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}

int pr_pool_create(uv_loop_t *loop, unsigned nthreads, struct pr_pool **out)
{
    if (nthreads < 1 || nthreads > PR_POOL_MAX_THREADS)
        return -EINVAL;
    struct pr_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    p->nthreads = nthreads;
    p->done_tail = &p->done_head;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->joined, NULL);
    /* Before init: close_cb finds the pool through it, on failure too. */
    p->async.data = p;
    int rc = uv_async_init(loop, &p->async, async_cb);
    if (rc < 0) {
        close_cb((uv_handle_t *)&p->async);
        return rc;
    }
    p->async.data = p;
    uv_unref((uv_handle_t *)&p->async);
    /* Signals go to the loop thread: the threads block them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (unsigned i = 0; i < nthreads; i++) {
        rc = -pthread_create(&p->threads[i], NULL, worker, p);
        if (rc < 0) {
            pr_err("pthread_create(reduce thread %u of %u): %s", i + 1,
                   nthreads, strerror(-rc));
            break;
        }
        p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        stop_threads(p);
        uv_close((uv_handle_t *)&p->async, close_cb);
        return rc;
    }
    *out = p;
    return 0;
}

void pr_pool_destroy(struct pr_pool *p)
{
    if (!p)
        return;
    pr_pool_drain(p);
    stop_threads(p);
    uv_close((uv_handle_t *)&p->async, close_cb);
}

static void enqueue(struct pr_pool *p, struct pr_pool_job *j, int first)
{
    j->next = NULL;
    j->queued = 1;
    if (!p->head) {
        p->head = p->tail = j;
    } else if (first) {
        j->next = p->head;
        p->head = j;
    } else {
        p->tail->next = j;
        p->tail = j;
    }
    if (j->nslices > 1)
        pthread_cond_broadcast(&p->work);
    else
        pthread_cond_signal(&p->work);
}

int pr_pool_submit(struct pr_pool *p, struct pr_pool_job *j)
{
    if (!j->fn || !j->done || j->n == 0)
        return -EINVAL;
    j->nslices = pr_pool_nslices(p, j->n);
    j->claimed = j->finished = 0;
    j->cancelled = 0;
    if (p->outstanding++ == 0)
        uv_ref((uv_handle_t *)&p->async);
    pthread_mutex_lock(&p->mu);
    enqueue(p, j, j->first);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void pr_pool_cancel(struct pr_pool *p, struct pr_pool_job *j)
{
    int wake = 0;
    pthread_mutex_lock(&p->mu);
    if (j->finished < j->nslices && !j->cancelled) {
        j->cancelled = 1;
        if (j->queued) {
            /* The slices nobody claimed end here, unrun. */
            unqueue(p, j);
            while (j->claimed < j->nslices) {
                j->claimed++;
                slice_ended(p, j, &wake);
            }
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (wake)
        uv_async_send(&p->async);
}

void pr_pool_run(struct pr_pool *p, pr_pool_fn fn, void *arg, size_t n)
{
    struct pr_pool_job j = {.fn = fn, .arg = arg, .n = n};
    j.nslices = pr_pool_nslices(p, n);
    if (j.nslices <= 1) {
        fn(arg, 0, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    /* The loop waits on it: ahead of the queued jobs. */
    enqueue(p, &j, 1);
    while (j.claimed < j.nslices) {
        size_t lo, hi;
        claim(p, &j, &lo, &hi);
        pthread_mutex_unlock(&p->mu);
        if (lo < hi)
            fn(arg, lo, hi);
        int wake = 0;
        pthread_mutex_lock(&p->mu);
        slice_ended(p, &j, &wake);
    }
    while (j.finished < j.nslices)
        pthread_cond_wait(&p->joined, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pr_pool_drain(struct pr_pool *p)
{
    while (p->outstanding > 0) {
        pthread_mutex_lock(&p->mu);
        while (p->done_pending == 0)
            pthread_cond_wait(&p->joined, &p->mu);
        pthread_mutex_unlock(&p->mu);
        deliver(p);
    }
}
