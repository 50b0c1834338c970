/* SPDX-License-Identifier: MIT */
/*
 * A pool of threads for the engine's arithmetic: a job is one operation over
 * n floats, cut into slices that the threads run side by side.
 *
 * Who owns what:
 *  - The loop thread owns every job's bookkeeping fields between submit and
 *    done(), and all engine state; a pool thread runs fn(arg, lo, hi) and
 *    touches only the memory that slice [lo, hi) of the job names. The owner
 *    of a job keeps that memory valid until done() has run.
 *  - done() runs on the loop thread (through a uv_async_t), exactly once per
 *    job that was submitted, never from inside pr_pool_submit().
 *  - pr_pool_cancel() skips the slices no thread has begun; done() still
 *    waits for the ones running, so memory is released only after the last
 *    thread left it.
 *
 * The loop's own uv_async_t is referenced only while jobs are out, so an
 * idle pool does not keep the loop alive.
 */
#ifndef PR_POOL_H
#define PR_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* At most this many threads (node.reduce_threads' upper bound). */
#define PR_POOL_MAX_THREADS 64
/* Slice boundaries fall on multiples of this many floats (a cache line). */
#define PR_POOL_ALIGN_FLOATS 16
/*
 * No slice is cut smaller than this (64 KiB): below it a thread hand-off
 * costs more than it saves, and callers run such work inline.
 */
#define PR_POOL_MIN_SLICE 16384
/*
 * Nor larger than this (1 MiB) when that leaves more slices than threads:
 * threads that run late (a busy machine) leave their share to the others,
 * a cancel skips more, and the loop's pr_pool_run waits less behind them.
 */
#define PR_POOL_MAX_SLICE 262144

struct pr_pool;
struct pr_pool_job;

/* On a pool thread (or the loop's, in pr_pool_run): floats [lo, hi). */
typedef void (*pr_pool_fn)(void *arg, size_t lo, size_t hi);
/* On the loop thread: 0, or -ECANCELED when the job was cancelled. */
typedef void (*pr_pool_done_fn)(struct pr_pool_job *j, int status);

struct pr_pool_job {
    pr_pool_fn fn;
    void *arg;
    size_t n;
    pr_pool_done_fn done;
    /*
     * Queued ahead of the jobs waiting (not of slices already begun): a
     * write-back whose deadline was checked when it was submitted.
     */
    int first;
    /* The pool's, from submit to done(). */
    struct pr_pool_job *next;
    uint32_t nslices, claimed, finished;
    int cancelled;
    int queued;
};

/*
 * nthreads threads (1..PR_POOL_MAX_THREADS) whose completions come back on
 * `loop`: 0 and *out, or a negative errno.
 */
int pr_pool_create(uv_loop_t *loop, unsigned nthreads, struct pr_pool **out);
/*
 * Waits for every job out (pr_pool_drain), stops and joins the threads and
 * closes the async handle; the pool frees itself in its close callback.
 */
void pr_pool_destroy(struct pr_pool *p);
unsigned pr_pool_threads(const struct pr_pool *p);

/*
 * Queues j (fn, arg, n and done set by the caller; n > 0). 0: done() will
 * run exactly once, on the loop, never inside this call. -EINVAL.
 */
int pr_pool_submit(struct pr_pool *p, struct pr_pool_job *j);
/*
 * Slices of j that no thread has begun will not run; done(-ECANCELED)
 * follows once the running ones have ended. No effect after done().
 */
void pr_pool_cancel(struct pr_pool *p, struct pr_pool_job *j);
/*
 * fn over [0, n) in slices, the calling (loop) thread taking slices too,
 * returning when all have run: for input that lives only during the
 * caller's call (a received chunk).
 */
void pr_pool_run(struct pr_pool *p, pr_pool_fn fn, void *arg, size_t n);
/*
 * Blocks until no submitted job is out, running their done() callbacks here
 * (for teardown: what they touch must stay valid meanwhile).
 */
void pr_pool_drain(struct pr_pool *p);
/* Jobs submitted whose done() has not run yet. */
size_t pr_pool_outstanding(const struct pr_pool *p);

/*
 * How many slices a job of n floats is cut into on p: as many as threads,
 * or more to keep them at most PR_POOL_MAX_SLICE, but none smaller than
 * PR_POOL_MIN_SLICE (and at least 1).
 */
uint32_t pr_pool_nslices(const struct pr_pool *p, size_t n);
/*
 * Slice i of nslices over n floats: [*lo, *hi). The slices cover [0, n) in
 * order, without gap or overlap, and every boundary but n is a multiple of
 * PR_POOL_ALIGN_FLOATS (some slices may be empty when n is small).
 */
void pr_pool_slice(size_t n, uint32_t nslices, uint32_t i, size_t *lo,
                   size_t *hi);
/*
 * node.reduce_threads' default: the CPUs this process may run on
 * (sched_getaffinity), at most `cap`, at least 1.
 */
unsigned pr_pool_default_threads(unsigned cap);

#endif
