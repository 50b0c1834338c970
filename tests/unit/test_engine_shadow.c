/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the default mode's shadow (daemon/engine/engine_int.h,
 * struct group): a group's lone local member, with direct sends and the
 * default contract (tensors unchanged on failure), gets the final floats
 * of the segment its daemon completes and of its own segment as they
 * come, what they replace kept in the scratch vector, so that between 2
 * daemons nothing is written back at the end.
 *
 * What must hold: the results are the write-back's, bit for bit, whatever
 * the ring size, chunk order or way of delivery; a group that fails at any
 * point leaves the member's tensors as they were when done() runs, and
 * nothing changes them after; a member that leaves gets nothing more
 * written (each float its input or its final value); a landing into the
 * member that stalls past the deadline is ended by resetting the link, so
 * done() still comes; where the shadow cannot apply (in place, several
 * members, no direct sends, weights other than 1 or the mean) the engine
 * writes the results back once the group is done. The fixture
 * (engine_fixture.h) describes the in-memory network.
 */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/log.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/reduce.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

struct scase {
    uint32_t m;
    size_t total, chunk;
    int land;      /* chunks land through reserve() */
    int shuffle;   /* reordered delivery */
    int staggered; /* started last first: early chunks, stashed */
};

/* One member per position, uniform weights. */
static struct tgroup *group(const struct scase *c, uint64_t seed)
{
    size_t nlocal[MAXN] = {1, 1, 1, 1, 1};
    return tg_new(7, c->total, c->m, rings[c->m], nlocal, TG_UNIFORM, seed);
}

static struct net *network(const struct scase *c, int direct)
{
    direct_sends = direct;
    struct net *net = net_new((int)c->m, c->chunk);
    direct_sends = 0;
    net->shuffle = c->shuffle;
    net_land_all(net, c->land);
    return net;
}

/* Runs the case to success; every member's vector, [position][total]. */
static float *run_ok(const struct scase *c, uint64_t seed, int direct)
{
    struct tgroup *tg = group(c, seed);
    struct net *net = network(c, direct);
    for (uint32_t i = 0; i < c->m; i++) {
        uint32_t p = c->staggered ? c->m - 1 - i : i;
        ck_assert_int_eq(tg_start(net, tg, p), 0);
        if (c->staggered)
            run_quiet(net);
    }
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    float *res = malloc(c->m * c->total * sizeof(float));
    ck_assert_ptr_nonnull(res);
    for (uint32_t p = 0; p < c->m; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.groups_ok, 1);
        ck_assert_uint_eq(st.groups_shadow, (uint64_t)direct);
        ck_assert_uint_eq(st.groups_restored, 0);
        ck_assert_uint_eq(st.bytes_reduced, c->total * sizeof(float));
        tg_result(&tg->mb[p][0], res + p * c->total);
    }
    net_free(net);
    tg_check_done(tg, 0);
    tg_free(tg);
    return res;
}

START_TEST(test_shadow_same_as_write_back)
{
    static const struct scase cases[] = {
        {.m = 2, .total = 1000, .chunk = 64},
        {.m = 2, .total = 1000, .chunk = 64, .land = 1},
        {.m = 2, .total = 1001, .chunk = 7, .land = 1, .shuffle = 1},
        {.m = 2, .total = 999, .chunk = 64, .land = 1, .staggered = 1},
        {.m = 3, .total = 1000, .chunk = 64, .land = 1},
        {.m = 3, .total = 1000, .chunk = 5, .shuffle = 1},
        {.m = 4, .total = 1003, .chunk = 16, .land = 1, .shuffle = 1},
        {.m = 4, .total = 3, .chunk = 1, .land = 1}, /* empty segments */
        {.m = 5, .total = 777, .chunk = 32, .staggered = 1},
    };
    const struct scase *c = &cases[_i];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        float *wb = run_ok(c, 900 + seed, 0);
        float *sh = run_ok(c, 900 + seed, 1);
        for (uint32_t p = 0; p < c->m; p++)
            ck_assert_msg(memcmp(wb + p * c->total, sh + p * c->total,
                                 c->total * sizeof(float)) == 0,
                          "case %d seed %llu: position %u differs from the "
                          "write-back",
                          _i, (unsigned long long)seed, p);
        free(wb);
        free(sh);
    }
}
END_TEST

/* Floats of position p's member that differ from its input. */
static size_t changed(const struct tgroup *tg, uint32_t p)
{
    float *now = malloc(tg->total * sizeof(float));
    ck_assert_ptr_nonnull(now);
    tg_result(&tg->mb[p][0], now);
    size_t n = 0;
    for (size_t j = 0; j < tg->total; j++)
        n += memcmp(&now[j], &tg->mb[p][0].input[j], sizeof(float)) != 0;
    free(now);
    return n;
}

enum fail_kind { FAIL_ABORT, FAIL_LINK_DOWN, FAIL_DEADLINE, NFAIL };

static const int fail_status[NFAIL] = {-ECANCELED, -ECONNRESET, -ETIMEDOUT};

/*
 * The link into the last position X held; X gets the first half of what
 * waits there (the chunks it completes its segment with, some final ones
 * of its own segment at m == 2), so its member holds final floats, then
 * fails by `kind`. At done() and after the held chunks came the member
 * holds its input, and the engine says it put floats back.
 */
START_TEST(test_shadow_failure_restores)
{
    enum fail_kind kind = _i % NFAIL;
    struct scase c = {.m = 2 + (uint32_t)(_i / NFAIL / 2),
                      .total = 600,
                      .chunk = 16,
                      .land = _i / NFAIL % 2};
    struct tgroup *tg = group(&c, 940 + (uint64_t)_i);
    struct net *net = network(&c, 1);
    uint32_t x = c.m - 1;
    int me = tg_node(tg, x), left = tg_node(tg, x - 1);
    link_hold(net, left, me, 1);
    for (uint32_t p = 0; p < c.m; p++) {
        uint32_t ms = p == x && kind == FAIL_DEADLINE ? 300 : LONG_MS;
        ck_assert_int_eq(tg_start_timeout(net, tg, p, ms), 0);
    }
    run_quiet(net);
    size_t q = net->links[left][me].queued;
    ck_assert_uint_ge(q, 4);
    ck_assert_uint_eq(link_deliver(net, left, me, q / 2), q / 2);
    run_turns(net);
    ck_assert_uint_eq(pr_engine_running(E(net, me)), 1);
    ck_assert_uint_gt(changed(tg, x), 0); /* final floats in the member */
    if (kind == FAIL_ABORT)
        ck_assert_int_eq(pr_engine_abort(E(net, me), tg->id, -ECANCELED), 0);
    else if (kind == FAIL_LINK_DOWN)
        pr_engine_link_down(E(net, me), tg->ring[x - 1], -ECONNRESET);
    run_until(net, pos_done, &tg->done[x]);
    ck_assert_int_eq(tg->done[x].status, fail_status[kind]);
    tg_check_unchanged(tg, x);
    ck_assert_uint_eq(stats(net, me).groups_restored, 1);
    ck_assert_uint_eq(stats(net, me).groups_failed, 1);
    /* What was held arrives at a finished group: nothing more written. */
    net_hold_all(net, 0);
    run_quiet(net);
    run_turns(net);
    tg_check_unchanged(tg, x);
    ck_assert_int_eq(tg->done[x].calls, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[x].calls, 1);
    tg_free(tg);
}
END_TEST

/*
 * Between 2 daemons, X's own segment lands in its member's memory; with
 * those landings held out past X's deadline, the sweep fails the group,
 * then resets the link the landings come over (which ends them half
 * written), and done() comes with the member's input put back.
 */
START_TEST(test_shadow_stalled_landing_reset)
{
    struct scase c = {.m = 2, .total = 600, .chunk = 16, .land = 1};
    struct tgroup *tg = group(&c, 960);
    struct net *net = network(&c, 1);
    int me = tg_node(tg, 1), left = tg_node(tg, 0);
    link_hold(net, left, me, 1);
    ck_assert_int_eq(tg_start_timeout(net, tg, 0, LONG_MS), 0);
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 200), 0);
    run_quiet(net);
    /* The left's own segment (X completes it), then X's own, final. */
    size_t q = net->links[left][me].queued, own = q / 2;
    ck_assert_uint_eq(link_deliver(net, left, me, own), own);
    net->links[left][me].land_hold = 1;
    ck_assert_uint_eq(link_deliver(net, left, me, q - own), q - own);
    ck_assert_uint_gt(net->links[left][me].nheld, 0);
    ck_assert_uint_eq(pr_engine_running(E(net, me)), 1);
    uint64_t t0 = uv_hrtime();
    run_until(net, pos_done, &tg->done[1]);
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    ck_assert_int_eq(tg->done[1].status, -ETIMEDOUT);
    ck_assert_uint_lt(ms, 2000);
    ck_assert_int_ge(net->links[me][left].resets, 1);
    ck_assert_uint_eq(net->links[left][me].nheld, 0);
    tg_check_unchanged(tg, 1);
    ck_assert_uint_eq(stats(net, me).groups_restored, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * A ring of 2 with position 1's incoming link held, everything started and
 * half of what waits for position 1 delivered: its member holds final
 * floats now.
 */
static struct net *half_way(const struct scase *c, struct tgroup *tg)
{
    struct net *net = network(c, 1);
    int me = tg_node(tg, 1), left = tg_node(tg, 0);
    link_hold(net, left, me, 1);
    tg_start_all(net, tg);
    run_quiet(net);
    size_t q = net->links[left][me].queued;
    ck_assert_uint_eq(link_deliver(net, left, me, q / 2), q / 2);
    return net;
}

/*
 * A member that leaves while its group runs (its trainer was told its
 * connection broke, and may write its tensors again): the shadow stops,
 * nothing more is written into them and nothing is put back later, so
 * each float holds its input or its final value, as written before the
 * member left. The others hold the mean.
 */
START_TEST(test_shadow_detached_stops)
{
    struct scase c = {.m = 2, .total = 600, .chunk = 16, .land = _i};
    struct tgroup *tg = group(&c, 970 + (uint64_t)_i);
    struct net *net = half_way(&c, tg);
    int me = tg_node(tg, 1);
    size_t at_detach = changed(tg, 1);
    ck_assert_uint_gt(at_detach, 0);
    ck_assert_int_eq(pr_engine_detach(E(net, me), tg->id, tg->spec[1][0].rank),
                     0);
    net_hold_all(net, 0);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, 0);
    tg_check_mean_at(tg, 0);
    ck_assert_uint_eq(changed(tg, 1), at_detach);
    float *fin = malloc(c.total * sizeof(float));
    float *now = malloc(c.total * sizeof(float));
    ck_assert(fin && now);
    tg_result(&tg->mb[0][0], fin);
    tg_result(&tg->mb[1][0], now);
    for (size_t j = 0; j < c.total; j++)
        ck_assert_msg(memcmp(&now[j], &tg->mb[1][0].input[j], sizeof(float)) ==
                              0 ||
                          memcmp(&now[j], &fin[j], sizeof(float)) == 0,
                      "float %zu is neither input nor final", j);
    free(fin);
    free(now);
    ck_assert_uint_eq(stats(net, me).groups_ok, 1);
    ck_assert_uint_eq(stats(net, me).groups_shadow, 0);
    ck_assert_uint_eq(stats(net, me).groups_restored, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

/* An engine destroyed while its group runs answers it with the input. */
START_TEST(test_shadow_destroy_restores)
{
    struct scase c = {.m = 2, .total = 600, .chunk = 16, .land = _i};
    struct tgroup *tg = group(&c, 980 + (uint64_t)_i);
    struct net *net = half_way(&c, tg);
    int me = tg_node(tg, 1), left = tg_node(tg, 0);
    ck_assert_uint_gt(changed(tg, 1), 0);
    destroy_node(net, me);
    ck_assert_int_eq(tg->done[1].calls, 1);
    ck_assert_int_eq(tg->done[1].status, -ECANCELED);
    tg_check_unchanged(tg, 1);
    /* What was held for the engine that is gone goes nowhere. */
    net->links[left][me].drop = 1;
    link_hold(net, left, me, 0);
    run_quiet(net);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * Chunks of at least PR_POOL_MIN_SLICE floats: with a pool, the own
 * segment's originals are copied aside on it (J_SAVE), each chunk posted
 * once copied, not all on the loop at start. The results are the
 * write-back's, bit for bit, and a failure half-way still puts back.
 */
START_TEST(test_shadow_save_on_pool)
{
    static const struct scase cases[] = {
        {.m = 2, .total = 200000, .chunk = 20000},
        {.m = 2, .total = 200000, .chunk = 20000, .land = 1},
        {.m = 2, .total = 200001, .chunk = 17000, .land = 1, .shuffle = 1},
        {.m = 2, .total = 200000, .chunk = 20000, .land = 1, .staggered = 1},
        {.m = 3, .total = 300000, .chunk = 20000, .land = 1, .shuffle = 1},
    };
    const struct scase *c = &cases[_i];
    reduce_threads = 3;
    float *wb = run_ok(c, 1000 + (uint64_t)_i, 0);
    float *sh = run_ok(c, 1000 + (uint64_t)_i, 1);
    for (uint32_t p = 0; p < c->m; p++)
        ck_assert_msg(memcmp(wb + p * c->total, sh + p * c->total,
                             c->total * sizeof(float)) == 0,
                      "case %d: position %u differs from the write-back", _i,
                      p);
    free(wb);
    free(sh);
}
END_TEST

/* Link arg holds all 10 of the case's chunks one way (both steps). */
static int all_held(struct net *net, void *arg)
{
    (void)net;
    return ((const struct memlink *)arg)->queued >= 10;
}

/*
 * As test_shadow_failure_restores, the own segment copied on the pool:
 * position 1 gets all but one of position 0's 10 chunks (5 a step), so
 * that the all-gather's have written final floats over the originals the
 * pool copied (more floats changed than the reduce-scatter's 5 chunks
 * could), then fails: they must come back.
 */
START_TEST(test_shadow_save_on_pool_fails)
{
    struct scase c = {.m = 2, .total = 200000, .chunk = 20000, .land = _i};
    reduce_threads = 3;
    struct tgroup *tg = group(&c, 1010 + (uint64_t)_i);
    struct net *net = network(&c, 1);
    int me = tg_node(tg, 1), left = tg_node(tg, 0);
    link_hold(net, left, me, 1);
    tg_start_all(net, tg);
    run_until(net, all_held, &net->links[left][me]);
    ck_assert_uint_eq(link_deliver(net, left, me, 9), 9);
    run_turns(net);
    ck_assert_uint_gt(changed(tg, 1), 5 * (size_t)c.chunk);
    ck_assert_int_eq(pr_engine_abort(E(net, me), tg->id, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECANCELED);
    tg_check_unchanged(tg, 1);
    ck_assert_uint_eq(stats(net, me).groups_restored, 1);
    net_hold_all(net, 0);
    run_quiet(net);
    run_turns(net);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * A peer that sends this node's own segment back before this node sent
 * it (a broken or stale one): with the originals copied on the pool, the
 * chunk would be written into the member over floats not yet saved. The
 * group fails and the member keeps its input. Started alone, nothing of
 * the segment that went to the pool has been posted yet (a job's end
 * comes back on the loop, which has not run); with at most 3 parts, some
 * chunk of the segment is a whole one, large enough for the pool.
 */
START_TEST(test_shadow_own_segment_too_early)
{
    struct scase c = {.m = 2, .total = 200000, .chunk = 20000, .land = _i};
    reduce_threads = 3;
    struct tgroup *tg = group(&c, 1020 + (uint64_t)_i);
    struct net *net = network(&c, 1);
    int me = tg_node(tg, 0);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    size_t start, len;
    pr_ring_segment(c.total, c.m, 0, &start, &len);
    float *data = calloc(len, sizeof(float));
    ck_assert_ptr_nonnull(data);
    struct pr_chunk_hdr h = {.group_id = tg->id,
                             .total = c.total,
                             .off = start,
                             .nfloats = (uint32_t)len,
                             .step = 1,
                             .seg = 0};
    pr_engine_on_chunk(E(net, me), tg->ring[1], &h, data);
    free(data);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].status, -EPROTO);
    tg_check_unchanged(tg, 0);
    ck_assert_uint_eq(stats(net, me).groups_failed, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * Where the shadow does not apply the engine writes back: a member in
 * place, two members, no direct sends, weights that are neither 1 nor
 * the mean; and a group of one daemon.
 */
START_TEST(test_shadow_not_used)
{
    static const size_t two[MAXN] = {2, 1}, one[MAXN] = {1, 1};
    const size_t *nlocal = _i == 1 ? two : one;
    enum tg_weights w = _i == 3 ? TG_WEIGHTED : TG_UNIFORM;
    uint32_t m = _i == 4 ? 1 : 2;
    struct tgroup *tg = tg_new(7, 500, m, rings[m], nlocal, w, 990);
    if (_i == 0)
        tg_set_in_place(tg, 0, 1);
    direct_sends = _i != 2;
    struct net *net = net_new((int)m, 16);
    direct_sends = 0;
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, 0);
    tg_check_mean(tg);
    struct pr_engine_stats st = stats(net, tg_node(tg, 0));
    ck_assert_uint_eq(st.groups_ok, 1);
    ck_assert_uint_eq(st.groups_shadow, 0);
    ck_assert_uint_eq(st.groups_in_place, _i == 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

static Suite *engine_shadow_suite(void)
{
    Suite *s = suite_create("engine_shadow");
    TCase *tc = tcase_create("results");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_shadow_same_as_write_back, 0, 9);
    tcase_add_loop_test(tc, test_shadow_not_used, 0, 5);
    tcase_add_loop_test(tc, test_shadow_save_on_pool, 0, 5);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_shadow_failure_restores, 0, 2 * 2 * NFAIL);
    tcase_add_test(tc, test_shadow_stalled_landing_reset);
    tcase_add_loop_test(tc, test_shadow_detached_stops, 0, 2);
    tcase_add_loop_test(tc, test_shadow_destroy_restores, 0, 2);
    tcase_add_loop_test(tc, test_shadow_save_on_pool_fails, 0, 2);
    tcase_add_loop_test(tc, test_shadow_own_segment_too_early, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_shadow_suite());
}
