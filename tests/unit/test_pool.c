/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the engine's thread pool (daemon/engine/pool.c) and for
 * the engine on it: slices cover a range exactly, every job's done() runs
 * once on the loop, a cancelled job skips the slices not begun and reports
 * only after the running ones ended; groups give bit-identical results on
 * 1 and N threads, and a failed, aborted or destroyed group stops its
 * slices before its done() (its members' memory is released after it).
 */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/engine/pool.h"
#include "daemon/base/log.h"
#include "daemon/engine/engine.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

/* ------------------------------------------------------------------ */
/* Slices                                                               */

START_TEST(test_pool_slices_cover_range)
{
    static const size_t ns[] = {0,  1,   2,    15,    16,     17,     31,
                                33, 255, 1000, 16383, 100003, 1000003};
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        for (uint32_t k = 1; k <= 9; k++) {
            size_t next = 0, nonempty = 0;
            for (uint32_t i = 0; i < k; i++) {
                size_t lo, hi;
                pr_pool_slice(ns[a], k, i, &lo, &hi);
                ck_assert_uint_eq(lo, next); /* no gap, no overlap */
                ck_assert_uint_le(lo, hi);
                if (lo < ns[a])
                    ck_assert_uint_eq(lo % PR_POOL_ALIGN_FLOATS, 0);
                nonempty += hi > lo;
                next = hi;
            }
            ck_assert_uint_eq(next, ns[a]); /* covers it all */
            /* Balanced: as many slices as the cache lines allow. */
            size_t lines =
                (ns[a] + PR_POOL_ALIGN_FLOATS - 1) / PR_POOL_ALIGN_FLOATS;
            ck_assert_uint_eq(nonempty, lines < k ? lines : k);
        }
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Jobs on a private loop                                               */

struct rec {
    struct pr_pool_job j;
    unsigned char *marks; /* one per float: how often a slice covered it */
    atomic_int slices;    /* slices run */
    atomic_int started;   /* slices that entered the gate */
    atomic_int *gate;     /* NULL, or slices wait while it is 0 */
    int done_calls;
    int status;
};

static void mark_slice(void *arg, size_t lo, size_t hi)
{
    struct rec *r = arg;
    atomic_fetch_add(&r->started, 1);
    while (r->gate && !atomic_load(r->gate))
        sched_yield();
    for (size_t i = lo; i < hi; i++)
        r->marks[i]++;
    atomic_fetch_add(&r->slices, 1);
}

static void rec_done(struct pr_pool_job *j, int status)
{
    struct rec *r = (struct rec *)j;
    r->done_calls++;
    r->status = status;
}

static struct rec *rec_new(size_t n, atomic_int *gate)
{
    struct rec *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->marks = calloc(n, 1);
    ck_assert_ptr_nonnull(r->marks);
    r->j = (struct pr_pool_job){
        .fn = mark_slice, .arg = r, .n = n, .done = rec_done};
    r->gate = gate;
    return r;
}

static void rec_check_covered(const struct rec *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r->marks[i] == 1, "float %zu covered %d times", i,
                      r->marks[i]);
}

static void rec_free(struct rec *r)
{
    free(r->marks);
    free(r);
}

static void close_loop(uv_loop_t *loop, struct pr_pool *p)
{
    pr_pool_destroy(p);
    ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

START_TEST(test_pool_job_covers_range)
{
    static const size_t ns[] = {1, 17, PR_POOL_MIN_SLICE * 3 + 5, 1000003};
    /* 1000003 floats: more slices than threads, none past 1 MiB. */
    static const uint32_t nslices[] = {1, 1, 3, 4};
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_pool *p;
    ck_assert_int_eq(pr_pool_create(&loop, 3, &p), 0);
    ck_assert_uint_eq(pr_pool_threads(p), 3);
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        struct rec *r = rec_new(ns[a], NULL);
        ck_assert_int_eq(pr_pool_submit(p, &r->j), 0);
        ck_assert_int_eq(r->done_calls, 0); /* never inside submit */
        ck_assert_uint_eq(pr_pool_outstanding(p), 1);
        /* The job keeps the loop alive until its done() ran. */
        ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
        ck_assert_int_eq(r->done_calls, 1);
        ck_assert_int_eq(r->status, 0);
        uint32_t k = pr_pool_nslices(p, ns[a]);
        ck_assert_uint_eq(k, nslices[a]);
        ck_assert_int_eq(atomic_load(&r->slices), (int)k);
        rec_check_covered(r, ns[a]);
        ck_assert_uint_eq(pr_pool_outstanding(p), 0);
        rec_free(r);
    }
    struct pr_pool_job bad = {.fn = mark_slice, .n = 0, .done = rec_done};
    ck_assert_int_eq(pr_pool_submit(p, &bad), -EINVAL);
    close_loop(&loop, p);
}
END_TEST

START_TEST(test_pool_create_bounds)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_pool *p = NULL;
    ck_assert_int_eq(pr_pool_create(&loop, 0, &p), -EINVAL);
    ck_assert_int_eq(pr_pool_create(&loop, PR_POOL_MAX_THREADS + 1, &p),
                     -EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    unsigned n = pr_pool_default_threads(8);
    ck_assert_uint_ge(n, 1);
    ck_assert_uint_le(n, 8);
    ck_assert_uint_eq(pr_pool_default_threads(1), 1);
}
END_TEST

/* Waits (bounded) until `want` slices of r have begun. */
static void wait_started(const struct rec *r, int want)
{
    for (int i = 0; i < 100000 && atomic_load(&r->started) < want; i++)
        sched_yield();
    ck_assert_int_eq(atomic_load(&r->started), want);
}

/*
 * Job a (8 slices) holds both threads inside the gate in its first two;
 * b waits in the queue. Both are cancelled: b's slices never run, nor a's
 * last six, a's two running ones finish, and neither done() comes while a
 * slice of a is still running.
 */
START_TEST(test_pool_cancel_stops_slices)
{
    size_t n = 4 * PR_POOL_MIN_SLICE, na = 8 * PR_POOL_MAX_SLICE;
    atomic_int gate = 0;
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_pool *p;
    ck_assert_int_eq(pr_pool_create(&loop, 2, &p), 0);
    struct rec *a = rec_new(na, &gate), *b = rec_new(n, NULL);
    ck_assert_uint_eq(pr_pool_nslices(p, na), 8);
    ck_assert_int_eq(pr_pool_submit(p, &a->j), 0);
    ck_assert_int_eq(pr_pool_submit(p, &b->j), 0);
    wait_started(a, 2);
    pr_pool_cancel(p, &b->j);
    pr_pool_cancel(p, &a->j);
    pr_pool_cancel(p, &a->j); /* twice: no effect */
    /* b ended unrun; a is still running, so its done() must wait. */
    for (int i = 0; i < 1000 && b->done_calls == 0; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(b->done_calls, 1);
    ck_assert_int_eq(b->status, -ECANCELED);
    ck_assert_int_eq(atomic_load(&b->slices), 0);
    ck_assert_int_eq(a->done_calls, 0);
    atomic_store(&gate, 1);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(a->done_calls, 1);
    ck_assert_int_eq(a->status, -ECANCELED);
    ck_assert_int_eq(atomic_load(&a->slices), 2);
    /* Slices are claimed in order: the first two ran, the rest did not. */
    for (size_t i = 0; i < na; i++)
        ck_assert_msg(a->marks[i] == (i < 2 * PR_POOL_MAX_SLICE),
                      "float %zu covered %d times", i, a->marks[i]);
    ck_assert_int_eq(b->done_calls, 1);
    pr_pool_cancel(p, &a->j); /* after done(): no effect */
    ck_assert_int_eq(a->done_calls, 1);
    close_loop(&loop, p);
    rec_free(a);
    rec_free(b);
}
END_TEST

START_TEST(test_pool_run_joins)
{
    size_t n = 5 * PR_POOL_MIN_SLICE + 3;
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_pool *p;
    ck_assert_int_eq(pr_pool_create(&loop, 4, &p), 0);
    /* Queued jobs do not hold up the loop's own. */
    struct rec *q = rec_new(n, NULL), *r = rec_new(n, NULL);
    ck_assert_int_eq(pr_pool_submit(p, &q->j), 0);
    pr_pool_run(p, mark_slice, r, n);
    ck_assert_int_eq(atomic_load(&r->slices), 4);
    rec_check_covered(r, n);
    ck_assert_int_eq(r->done_calls, 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(q->done_calls, 1);
    rec_check_covered(q, n);
    close_loop(&loop, p);
    rec_free(q);
    rec_free(r);
}
END_TEST

/* destroy() waits for the jobs out and runs their done() once. */
START_TEST(test_pool_destroy_drains)
{
    size_t n = 8 * PR_POOL_MIN_SLICE;
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_pool *p;
    ck_assert_int_eq(pr_pool_create(&loop, 2, &p), 0);
    struct rec *r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = rec_new(n, NULL);
        ck_assert_int_eq(pr_pool_submit(p, &r[i]->j), 0);
    }
    pr_pool_cancel(p, &r[2]->j);
    close_loop(&loop, p);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(r[i]->done_calls, 1);
        if (i < 2)
            rec_check_covered(r[i], n);
        rec_free(r[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* The engine on the pool                                               */

/* Every member's result, concatenated, in position and member order. */
static float *collect(const struct tgroup *tg, size_t *len)
{
    size_t n = 0;
    for (uint32_t p = 0; p < tg->m; p++)
        n += tg->nlocal[p] * tg->total;
    float *out = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(out);
    size_t at = 0;
    for (uint32_t p = 0; p < tg->m; p++)
        for (size_t i = 0; i < tg->nlocal[p]; i++, at += tg->total)
            tg_result(&tg->mb[p][i], out + at);
    *len = n;
    return out;
}

struct bit_case {
    uint32_t m;
    size_t total, chunk;
    enum tg_weights w;
    int one_member, in_place;
};

static const struct bit_case bit_cases[] = {
    {1, 17, 4096, TG_UNIFORM, 0, 0},
    {1, 1000003, 4096, TG_UNIFORM, 0, 0},
    {1, 1000003, 4096, TG_WEIGHTED, 0, 0},
    {1, 300007, 4096, TG_PERSONAL, 0, 0},
    {2, 1000003, 65536, TG_UNIFORM, 0, 0},
    {2, 1000003, 65536, TG_UNIFORM, 1, 0},
    {2, 1000003, 65536, TG_UNIFORM, 1, 1},
    {3, 700001, 40000, TG_WEIGHTED, 0, 0},
    {3, 700001, 100000, TG_PERSONAL, 0, 0},
    {3, 700001, 100000, TG_UNIFORM, 1, 1},
    {2, 33, 4, TG_UNIFORM, 0, 0},
};

static float *run_case(const struct bit_case *c, unsigned threads, size_t *len)
{
    reduce_threads = threads;
    direct_sends = c->one_member;
    struct net *net = net_new((int)c->m, c->chunk);
    size_t nlocal[MAXN];
    for (uint32_t p = 0; p < c->m; p++)
        nlocal[p] = c->one_member ? 1 : 1 + (p + 1) % MAXMB + (c->m == 1);
    struct tgroup *tg =
        tg_new(9, c->total, c->m, rings[c->m], nlocal, c->w, 77 + c->m);
    for (uint32_t p = 0; c->in_place && p < c->m; p++)
        tg_set_in_place(tg, p, 1);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, 0);
    if (c->w == TG_PERSONAL)
        tg_check_personal(tg);
    else
        tg_check_mean(tg);
    for (uint32_t p = 0; p < c->m; p++)
        ck_assert_uint_eq(stats(net, tg_node(tg, p)).groups_in_place,
                          c->in_place && c->m > 1);
    float *res = collect(tg, len);
    net_free(net);
    tg_free(tg);
    direct_sends = 0;
    return res;
}

/*
 * The same group on 1 thread (inline) and on 2, 3 and 4: the slices do
 * the same operations on each float in the same order, so the results
 * agree bit for bit, whatever cut the slices fall on.
 */
START_TEST(test_pool_engine_bit_identical)
{
    const struct bit_case *c = &bit_cases[_i];
    size_t n1, n;
    float *one = run_case(c, 1, &n1);
    for (unsigned t = 2; t <= 4; t++) {
        float *many = run_case(c, t, &n);
        ck_assert_uint_eq(n, n1);
        ck_assert_msg(memcmp(one, many, n * sizeof(float)) == 0,
                      "case %d: %u threads differ from 1", _i, t);
        free(many);
    }
    free(one);
}
END_TEST

/*
 * A node whose own-segment sums are out on the pool (its neighbour never
 * started): how it ends, by abort, link loss or destroy.
 */
enum stop_how { STOP_ABORT, STOP_LINK_DOWN, STOP_DESTROY, NSTOP };

START_TEST(test_pool_engine_failed_group_stops_slices)
{
    static const size_t nlocal[2] = {3, 1};
    reduce_threads = 2;
    struct net *net = net_new(2, PR_POOL_MIN_SLICE);
    struct tgroup *tg =
        tg_new(5, 64 * PR_POOL_MIN_SLICE, 2, rings[2], nlocal, 0, 31);
    int n0 = tg_node(tg, 0);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    /* Chunks go out only from the loop, once their sum is back. */
    size_t posted = net->links[n0][tg_node(tg, 1)].posted;
    int want = -ECANCELED;
    switch (_i) {
    case STOP_ABORT:
        ck_assert_int_eq(pr_engine_abort(E(net, n0), 5, -ECANCELED), 0);
        break;
    case STOP_LINK_DOWN:
        pr_engine_link_down(E(net, n0), NODE0 + tg_node(tg, 1), -ECONNRESET);
        want = -ECONNRESET;
        break;
    case STOP_DESTROY:
        destroy_node(net, n0);
        /* done() ran inside destroy, after the pool let go of the group. */
        ck_assert_int_eq(tg->done[0].calls, 1);
        break;
    }
    ck_assert_int_eq(tg->done[0].calls, _i == STOP_DESTROY);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, want);
    ck_assert_uint_eq(net->links[n0][tg_node(tg, 1)].posted, posted);
    tg_check_unchanged(tg, 0);
    /* Held chunks of node 0 reach node 1, whose group never started. */
    run_quiet(net);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 0);
    tg_free(tg);
}
END_TEST

/*
 * A trainer leaves while its node's sums are out on the pool: the group
 * completes, its floats count, its tensors are not written.
 */
START_TEST(test_pool_engine_detach_while_summing)
{
    static const size_t nlocal[2] = {2, 1};
    reduce_threads = 3;
    struct net *net = net_new(2, PR_POOL_MIN_SLICE);
    struct tgroup *tg =
        tg_new(6, 32 * PR_POOL_MIN_SLICE + 7, 2, rings[2], nlocal, 0, 32);
    tg_start_all(net, tg);
    uint32_t rank = tg->spec[0][1].rank;
    ck_assert_int_eq(pr_engine_detach(E(net, tg_node(tg, 0)), 6, rank), 0);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, 0);
    tg_check_mean_at(tg, 1);
    float *res = malloc(tg->total * sizeof(float));
    ck_assert_ptr_nonnull(res);
    tg_result(&tg->mb[0][0], res);
    ck_assert(memcmp(res, tg->mb[0][0].input, tg->total * sizeof(float)));
    tg_result(&tg->mb[0][1], res);
    ck_assert(!memcmp(res, tg->mb[0][1].input, tg->total * sizeof(float)));
    free(res);
    net_free(net);
    tg_free(tg);
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_pool_slices_cover_range);
    tcase_add_test(tc, test_pool_job_covers_range);
    tcase_add_test(tc, test_pool_create_bounds);
    tcase_add_test(tc, test_pool_cancel_stops_slices);
    tcase_add_test(tc, test_pool_run_joins);
    tcase_add_test(tc, test_pool_destroy_drains);
    suite_add_tcase(s, tc);

    tc = tcase_create("engine");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_pool_engine_bit_identical, 0,
                        (int)(sizeof(bit_cases) / sizeof(bit_cases[0])));
    tcase_add_loop_test(tc, test_pool_engine_failed_group_stops_slices, 0,
                        NSTOP);
    tcase_add_test(tc, test_pool_engine_detach_while_summing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(pool_suite());
}
