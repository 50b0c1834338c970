/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for groups whose chunks travel encoded (bf16, int8:
 * daemon/engine/engine_wire.c, wire.h) through the engine's in-memory
 * network (engine_fixture.h).
 *
 * What must hold: every member of the group ends with the same bits under
 * every encoding, whatever the ring, chunk size, delivery order or path
 * (landed or handed over); the results are the mean within what the
 * encoding can lose on m hops; each daemon sends each float once per
 * half of the ring in the group's encoding and nothing in another; a
 * chunk in another encoding fails the group; a failed group leaves the
 * members' tensors and their error-feedback vectors as they were; and
 * error feedback keeps the error of repeated reduces of one vector from
 * piling up (without it, int8's rounding bias grows with each reduce).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/log.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/reduce.h"
#include "daemon/engine/wire.h"
#include "tests/check_run.h"
#include "tests/unit/engine_fixture.h"

/* sum_j |w_j x_j| per float, and its largest value. */
static double abs_sum_max(const struct tgroup *tg, double *abs_sum)
{
    double max = 0;
    for (size_t j = 0; j < tg->total; j++) {
        double a = 0;
        for (uint32_t p = 0; p < tg->m; p++)
            for (size_t i = 0; i < tg->nlocal[p]; i++)
                a += fabs(tg->spec[p][i].weight * tg->mb[p][i].input[j]);
        if (abs_sum)
            abs_sum[j] = a;
        max = a > max ? a : max;
    }
    return max;
}

/*
 * Every member holds the same bits, within what m hops of the encoding
 * lose of the weighted mean: bf16 rounds each partial sum to 2^-9 of
 * itself, int8 to 1/254 of its block's largest (bounded here by the
 * largest over the vector); twice that for slack.
 */
static void check_encoded_mean(const struct tgroup *tg)
{
    tg_check_done(tg, 0);
    size_t n = tg->total;
    double *want = calloc(n, sizeof(double));
    double *abs_sum = calloc(n, sizeof(double));
    float *first = malloc(n * sizeof(float));
    float *res = malloc(n * sizeof(float));
    ck_assert(want && abs_sum && first && res);
    for (uint32_t p = 0; p < tg->m; p++)
        for (size_t i = 0; i < tg->nlocal[p]; i++)
            for (size_t j = 0; j < n; j++)
                want[j] += tg->spec[p][i].weight * tg->mb[p][i].input[j];
    double max = abs_sum_max(tg, abs_sum);
    tg_result(&tg->mb[0][0], first);
    for (uint32_t p = 0; p < tg->m; p++) {
        for (size_t i = 0; i < tg->nlocal[p]; i++) {
            tg_result(&tg->mb[p][i], res);
            ck_assert_msg(memcmp(res, first, n * sizeof(float)) == 0,
                          "%s m %u total %zu: pos %u member %zu differs",
                          pr_wire_name(tg->wire), tg->m, n, p, i);
            for (size_t j = 0; j < n; j++) {
                double tol = tg->wire == PR_WIRE_BF16
                                 ? tg->m * abs_sum[j] * ldexp(1, -8)
                                 : tg->m * max / 127.0;
                ck_assert_msg(fabs(res[j] - want[j]) <= tol + 1e-30,
                              "%s m %u total %zu [%zu]: %.9g vs %.9g "
                              "(tol %.3g)",
                              pr_wire_name(tg->wire), tg->m, n, j, res[j],
                              want[j], tol);
            }
        }
    }
    free(res);
    free(first);
    free(abs_sum);
    free(want);
}

/* Floats a daemon at pos sends: all but one segment each way round. */
static size_t floats_sent(const struct tgroup *tg, uint32_t pos)
{
    size_t s1, l1, s2, l2;
    pr_ring_segment(tg->total, tg->m, (pos + 1) % tg->m, &s1, &l1);
    pr_ring_segment(tg->total, tg->m, (pos + 2) % tg->m, &s2, &l2);
    return 2 * tg->total - l1 - l2;
}

struct wire_case {
    uint32_t m;
    size_t total, chunk;
    int land, shuffle, many;
    enum tg_weights weights;
};

static const struct wire_case cases[] = {
    {2, 1, 64, 0, 0, 0, TG_UNIFORM},
    {2, 7, 64, 1, 0, 0, TG_UNIFORM},
    {3, 255, 64, 1, 1, 1, TG_UNIFORM},
    {3, 256, 100, 0, 0, 1, TG_WEIGHTED},
    {4, 257, 300, 1, 0, 0, TG_UNIFORM},
    {2, 1000, 256, 1, 1, 1, TG_UNIFORM},
    {5, 5000, 1024, 0, 1, 1, TG_WEIGHTED},
    {4, 70000, 4096, 1, 0, 0, TG_UNIFORM},
    {2, 100000, 1 << 20, 1, 0, 1, TG_UNIFORM},
    {3, 40000, 1000, 0, 0, 0, TG_UNIFORM},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Case _i / 2 under bf16 (even _i) or int8. */
START_TEST(test_engine_wire_rings_identical)
{
    const struct wire_case *c = &cases[_i / 2];
    uint32_t wire = _i % 2 ? PR_WIRE_INT8 : PR_WIRE_BF16;
    /* Every other case encodes a lone member's segment from its memory. */
    direct_sends = (_i / 2) % 2;
    struct net *net = net_new((int)c->m, c->chunk);
    net_land_all(net, c->land);
    net->shuffle = c->shuffle;
    size_t nlocal[MAXN];
    for (uint32_t p = 0; p < c->m; p++)
        nlocal[p] = c->many ? 1 + p % MAXMB : 1;
    struct tgroup *tg = tg_new(9, c->total, c->m, rings[c->m], nlocal,
                               c->weights, 900 + (uint64_t)_i);
    tg->wire = wire;
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    check_encoded_mean(tg);
    for (uint32_t p = 0; p < c->m; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.groups_ok, 1);
        ck_assert_uint_eq(st.wire_groups[wire], 1);
        ck_assert_uint_eq(st.wire_groups[PR_WIRE_FP32], 0);
        ck_assert_uint_eq(st.wire_bytes[PR_WIRE_FP32], 0);
        size_t n = floats_sent(tg, p);
        if (wire == PR_WIRE_BF16)
            ck_assert_uint_eq(st.wire_bytes[wire], 2 * n);
        else /* a block's scale per chunk's started block */
            ck_assert(st.wire_bytes[wire] >= n &&
                      st.wire_bytes[wire] <= n + 4 * (n / 256 + 4 * c->m));
    }
    tg_free(tg);
    net_free(net);
}
END_TEST

/* fp32 groups count as such, and bytes as floats times four. */
START_TEST(test_engine_wire_fp32_counted)
{
    struct net *net = net_new(3, 128);
    static const size_t nlocal[MAXN] = {1, 1, 1};
    struct tgroup *tg = tg_new(3, 1000, 3, rings[3], nlocal, 0, 31);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    for (uint32_t p = 0; p < 3; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.wire_groups[PR_WIRE_FP32], 1);
        ck_assert_uint_eq(st.wire_bytes[PR_WIRE_FP32], 4 * floats_sent(tg, p));
        ck_assert_uint_eq(st.wire_bytes[PR_WIRE_BF16], 0);
    }
    tg_free(tg);
    net_free(net);
}
END_TEST

/* Daemons that disagree on the encoding fail the group, not hang it. */
START_TEST(test_engine_wire_mismatch_fails)
{
    struct net *net = net_new(2, 256);
    static const size_t nlocal[MAXN] = {1, 1};
    struct tgroup *tg = tg_new(4, 1000, 2, rings[2], nlocal, 0, 41);
    tg->wire = PR_WIRE_BF16;
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    tg->wire = _i ? PR_WIRE_INT8 : PR_WIRE_FP32;
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -EPROTO);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    tg_free(tg);
    net_free(net);
}
END_TEST

/* An encoding that is none is refused at start. */
START_TEST(test_engine_wire_unknown_refused)
{
    struct net *net = net_new(2, 256);
    static const size_t nlocal[MAXN] = {1, 1};
    struct tgroup *tg = tg_new(5, 100, 2, rings[2], nlocal, 0, 51);
    tg->wire = PR_WIRE_COUNT;
    ck_assert_int_eq(tg_start(net, tg, 0), -EINVAL);
    tg_free(tg);
    net_free(net);
}
END_TEST

/*
 * A group that fails part way (the link out of node 0 fails its sends
 * from the third on) leaves the tensors and the err vectors as they were.
 */
START_TEST(test_engine_wire_failure_restores)
{
    struct net *net = net_new(3, 256);
    net_land_all(net, _i % 2);
    static const size_t nlocal[MAXN] = {1, 2, 1};
    struct tgroup *tg = tg_new(6, 5000, 3, rings[3], nlocal, 0, 61);
    tg->wire = PR_WIRE_INT8;
    float *err[MAXN][MAXMB], *before[MAXN][MAXMB];
    for (uint32_t p = 0; p < 3; p++) {
        for (size_t i = 0; i < nlocal[p]; i++) {
            err[p][i] = malloc(5000 * sizeof(float));
            before[p][i] = malloc(5000 * sizeof(float));
            ck_assert(err[p][i] && before[p][i]);
            for (size_t j = 0; j < 5000; j++)
                err[p][i][j] = (float)((j % 7) - 3) * 1e-3f;
            memcpy(before[p][i], err[p][i], 5000 * sizeof(float));
            tg->spec[p][i].err = err[p][i];
        }
    }
    int from = tg_node(tg, 0), to = tg_node(tg, 1);
    net->links[from][to].fail_cb = -ECONNRESET;
    net->links[from][to].fail_after = 2;
    /* The others wait for what node 0 never sent: their deadline. */
    for (uint32_t p = 0; p < 3; p++)
        ck_assert_int_eq(tg_start_timeout(net, tg, p, 300), 0);
    run_until(net, tg_all_done, tg);
    for (uint32_t p = 0; p < 3; p++) {
        ck_assert_int_lt(tg->done[p].status, 0);
        tg_check_unchanged(tg, p);
        for (size_t i = 0; i < nlocal[p]; i++) {
            ck_assert_mem_eq(err[p][i], before[p][i], 5000 * sizeof(float));
            free(err[p][i]);
            free(before[p][i]);
        }
    }
    tg_free(tg);
    net_free(net);
}
END_TEST

/*
 * T reduces of the same inputs under int8: the error of each against the
 * mean, summed over the reduces, per float. With error feedback what one
 * reduce's rounding lost goes into the next, so the sum stays within a
 * few quanta; without, the same rounding repeats and the sum grows T
 * times one reduce's error.
 */
#define EF_T     40
#define EF_TOTAL 3000

static double accumulated_error(int feedback, uint32_t m)
{
    struct net *net = net_new((int)m, 512);
    size_t nlocal[MAXN] = {1, 1, 1, 1, 1};
    float *err[MAXN];
    for (uint32_t p = 0; p < m; p++) {
        err[p] = calloc(EF_TOTAL, sizeof(float));
        ck_assert_ptr_nonnull(err[p]);
    }
    double *acc = calloc(EF_TOTAL, sizeof(double));
    float *res = malloc(EF_TOTAL * sizeof(float));
    ck_assert(acc && res);
    double quantum = 0;
    for (int t = 0; t < EF_T; t++) {
        /* The same seed: the same inputs every time. */
        struct tgroup *tg =
            tg_new(1 + (uint64_t)t, EF_TOTAL, m, rings[m], nlocal, 0, 77);
        tg->wire = PR_WIRE_INT8;
        for (uint32_t p = 0; p < m && feedback; p++)
            tg->spec[p][0].err = err[p];
        quantum = abs_sum_max(tg, NULL) / 127.0;
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_done(tg, 0);
        tg_result(&tg->mb[0][0], res);
        for (size_t j = 0; j < EF_TOTAL; j++) {
            double want = 0;
            for (uint32_t p = 0; p < m; p++)
                want += tg->spec[p][0].weight * tg->mb[p][0].input[j];
            acc[j] += res[j] - want;
        }
        tg_free(tg);
    }
    double worst = 0;
    for (size_t j = 0; j < EF_TOTAL; j++)
        worst = fabs(acc[j]) > worst ? fabs(acc[j]) : worst;
    for (uint32_t p = 0; p < m; p++)
        free(err[p]);
    free(acc);
    free(res);
    net_free(net);
    return worst / quantum; /* in quanta */
}

START_TEST(test_engine_wire_feedback_cancels_bias)
{
    uint32_t m = 2 + (uint32_t)_i;
    double with = accumulated_error(1, m);
    double without = accumulated_error(0, m);
    ck_assert_msg(with <= 3.0, "m %u: with feedback %.3g quanta", m, with);
    ck_assert_msg(without >= 5 * with && without >= 5.0,
                  "m %u: without feedback %.3g quanta (with %.3g)", m, without,
                  with);
}
END_TEST

/*
 * An infinity in one reduce poisons that reduce's block (every replica's
 * NaN there, as float32's sum would be inf), but not the err vectors:
 * the reduces after it, of finite inputs, come out finite everywhere.
 */
START_TEST(test_engine_wire_feedback_recovers_from_inf)
{
    struct net *net = net_new(2, 512);
    static const size_t nlocal[MAXN] = {1, 1};
    float *err[2];
    for (int p = 0; p < 2; p++)
        ck_assert_ptr_nonnull(err[p] = calloc(2000, sizeof(float)));
    for (int t = 0; t < 4; t++) {
        struct tgroup *tg =
            tg_new(1 + (uint64_t)t, 2000, 2, rings[2], nlocal, 0, 5 + t);
        tg->wire = PR_WIRE_INT8;
        for (int p = 0; p < 2; p++)
            tg->spec[p][0].err = err[p];
        if (t == 0) /* one float of node 0's member */
            tg->mb[0][0].part[0][0] = tg->mb[0][0].input[0] = INFINITY;
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_done(tg, 0);
        float res[2000];
        tg_result(&tg->mb[1][0], res);
        size_t bad = 0;
        for (size_t j = 0; j < 2000; j++)
            bad += !isfinite(res[j]);
        if (t == 0)
            ck_assert_uint_gt(bad, 0);
        else
            ck_assert_msg(bad == 0, "reduce %d: %zu floats not finite", t, bad);
        for (int p = 0; p < 2; p++)
            for (size_t j = 0; j < 2000; j++)
                ck_assert_msg(isfinite(err[p][j]), "reduce %d: err[%d][%zu]", t,
                              p, j);
        tg_free(tg);
    }
    free(err[0]);
    free(err[1]);
    net_free(net);
}
END_TEST

/*
 * An int8 chunk must start on a block of its segment and hold whole
 * blocks but at the segment's end: one that does not fails the group.
 * Ring of 2, 1000 floats: node 1 takes segment 0, [0, 500), at step 0.
 */
START_TEST(test_engine_wire_int8_blocks_enforced)
{
    static const struct {
        uint64_t off;
        uint32_t n;
        int ok;
    } c[] = {
        {100, 256, 0}, /* not on a block */
        {0, 300, 0},   /* a partial block before the segment's end */
        {256, 244, 1}, /* the segment's last, partial block */
        {0, 256, 1},
    };
    struct net *net = net_new(2, 512);
    static const size_t nlocal[MAXN] = {1, 1};
    struct tgroup *tg = tg_new(3, 1000, 2, rings[2], nlocal, 0, 17);
    tg->wire = PR_WIRE_INT8;
    net->links[1][0].drop = 1; /* node 1's own sends go nowhere */
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 2000), 0);
    run_quiet(net);
    static uint8_t payload[512];
    struct pr_chunk_hdr h = {3, 1000, c[_i].off, c[_i].n, 0, 0, PR_WIRE_INT8};
    pr_engine_on_chunk(E(net, tg_node(tg, 1)), tg->ring[0], &h, payload);
    run_turns(net);
    ck_assert_int_eq(tg->done[1].calls, c[_i].ok ? 0 : 1);
    if (!c[_i].ok) {
        ck_assert_int_eq(tg->done[1].status, -EPROTO);
        tg_check_unchanged(tg, 1);
    }
    /* A chunk it took: the group runs on; ended here. */
    ck_assert_int_eq(pr_engine_abort(E(net, tg_node(tg, 1)), 3, -ECANCELED),
                     c[_i].ok ? 0 : -ENOENT);
    run_turns(net);
    ck_assert_int_eq(tg->done[1].calls, 1);
    run_quiet(net);
    tg_free(tg);
    net_free(net);
}
END_TEST

static Suite *engine_wire_suite(void)
{
    Suite *s = suite_create("engine_wire");
    TCase *tc = tcase_create("rings");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_engine_wire_rings_identical, 0,
                        (int)(2 * NCASES));
    tcase_add_test(tc, test_engine_wire_fp32_counted);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_wire_mismatch_fails, 0, 2);
    tcase_add_test(tc, test_engine_wire_unknown_refused);
    tcase_add_loop_test(tc, test_engine_wire_failure_restores, 0, 2);
    tcase_add_loop_test(tc, test_engine_wire_int8_blocks_enforced, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("feedback");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_engine_wire_feedback_cancels_bias, 0, 3);
    tcase_add_test(tc, test_engine_wire_feedback_recovers_from_inf);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_wire_suite());
}
