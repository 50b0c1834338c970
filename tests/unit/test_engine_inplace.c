/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for results written in place (daemon/engine/engine.c,
 * pr_engine_member.in_place): a group's only local member, with direct
 * sends and results that are not personal, gets its final floats straight
 * into its tensors as they arrive and forwards them from there.
 *
 * What must hold: the results are the default mode's, bit for bit; the flag
 * is ignored where the engine cannot honour it (and a failed group then
 * leaves the tensors as they were); a failed in-place group leaves each
 * float at its input or at its final value; done() runs once, after every
 * send that reads the member's tensors has completed. The fixture
 * (engine_fixture.h) describes the in-memory network.
 */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/base/log.h"
#include "daemon/engine/reduce.h"
#include "daemon/engine/xport.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

/* A ring (rings[m]) and how each of its positions is set up. */
struct ring_case {
    uint32_t m;
    size_t total, chunk;
    size_t nlocal[MAXN]; /* members per position; 0 means 1 */
    unsigned in_place;   /* bit p: position p's members ask for it */
    unsigned no_direct;  /* bit p: position p's engine posts no member memory */
    enum tg_weights weights;
    int shuffle;         /* reordered delivery */
    int staggered;       /* started one by one, last first: early chunks */
    uint32_t timeout_ms; /* 0: LONG_MS */
};

/* What a successful run left: every member's vector, chunks sent. */
struct ring_run {
    float *res; /* [position][member][total] */
    size_t posted;
};

/* Empty parts among the groups made so far (each test is its own process). */
static size_t empty_parts;

static size_t members(const struct ring_case *rc, uint32_t p)
{
    return rc->nlocal[p] ? rc->nlocal[p] : 1;
}

/* Whether the engine at position p may honour its member's flag. */
static int honoured(const struct ring_case *rc, uint32_t p, int in_place)
{
    return in_place && (rc->in_place >> p & 1) && rc->m > 1 &&
           members(rc, p) == 1 && rc->weights != TG_PERSONAL &&
           !(rc->no_direct >> p & 1);
}

/* The case's group; the same seed gives the same inputs and parts. */
static struct tgroup *case_group(const struct ring_case *rc, uint64_t seed,
                                 int in_place)
{
    size_t nlocal[MAXN] = {0};
    for (uint32_t p = 0; p < rc->m; p++)
        nlocal[p] = members(rc, p);
    struct tgroup *tg =
        tg_new(7, rc->total, rc->m, rings[rc->m], nlocal, rc->weights, seed);
    for (uint32_t p = 0; p < rc->m; p++) {
        tg_set_in_place(tg, p, in_place && (rc->in_place >> p & 1));
        for (size_t i = 0; i < nlocal[p]; i++)
            for (size_t q = 0; q < tg->mb[p][i].nparts; q++)
                empty_parts += tg->mb[p][i].parts[q].len == 0;
    }
    return tg;
}

static struct net *case_net(const struct ring_case *rc, const struct tgroup *tg)
{
    direct_sends = 1;
    struct net *net = net_new((int)rc->m, rc->chunk);
    net->shuffle = rc->shuffle;
    for (uint32_t p = 0; p < rc->m; p++)
        if (rc->no_direct >> p & 1)
            pr_engine_set_direct(E(net, tg_node(tg, p)), 0);
    return net;
}

static float *member_res(const struct ring_case *rc, float *res, uint32_t p,
                         size_t i)
{
    return res + (p * MAXMB + i) * rc->total;
}

/* Runs the case to success, checks it against the reference, keeps it. */
static struct ring_run run_case(const struct ring_case *rc, uint64_t seed,
                                int in_place)
{
    uint32_t timeout_ms = rc->timeout_ms ? rc->timeout_ms : LONG_MS;
    struct tgroup *tg = case_group(rc, seed, in_place);
    struct net *net = case_net(rc, tg);
    for (uint32_t i = 0; i < rc->m; i++) {
        uint32_t p = rc->staggered ? rc->m - 1 - i : i;
        ck_assert_int_eq(tg_start_timeout(net, tg, p, timeout_ms), 0);
        if (rc->staggered)
            run_quiet(net);
    }
    run_until(net, tg_all_done, tg);
    if (rc->weights == TG_PERSONAL)
        tg_check_personal(tg);
    else
        tg_check_mean(tg);
    struct ring_run run = {
        malloc(rc->m * MAXMB * rc->total * sizeof(float)),
        0,
    };
    ck_assert_ptr_nonnull(run.res);
    for (uint32_t p = 0; p < rc->m; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.groups_ok, 1);
        ck_assert_uint_eq(st.groups_in_place, honoured(rc, p, in_place));
        ck_assert_uint_eq(st.bytes_reduced,
                          members(rc, p) * rc->total * sizeof(float));
        for (size_t i = 0; i < members(rc, p); i++)
            tg_result(&tg->mb[p][i], member_res(rc, run.res, p, i));
    }
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            run.posted += net->links[a][b].posted;
    net_free(net);
    tg_check_done(tg, 0);
    tg_free(tg);
    return run;
}

/*
 * The same seed without and with in place: the same floats, bit for bit.
 * Returns how many more chunks the in-place run sent (its final chunks are
 * cut again at the forwarding member's part boundaries).
 */
static size_t check_same(const struct ring_case *rc, uint64_t seed)
{
    struct ring_run def = run_case(rc, seed, 0);
    struct ring_run inp = run_case(rc, seed, 1);
    for (uint32_t p = 0; p < rc->m; p++)
        for (size_t i = 0; i < members(rc, p); i++)
            ck_assert_msg(memcmp(member_res(rc, def.res, p, i),
                                 member_res(rc, inp.res, p, i),
                                 rc->total * sizeof(float)) == 0,
                          "m %u total %zu chunk %zu seed %llu: pos %u member "
                          "%zu differs from the default mode",
                          rc->m, rc->total, rc->chunk, (unsigned long long)seed,
                          p, i);
    ck_assert_uint_ge(inp.posted, def.posted);
    size_t extra = inp.posted - def.posted;
    free(def.res);
    free(inp.res);
    return extra;
}

/* ------------------------------------------------------------------ */
/* The same results as the default mode                                 */

START_TEST(test_engine_inplace_same_as_default)
{
    static const uint32_t ms[] = {2, 3, 4, 5};
    static const size_t totals[] = {0 /* m: one float a segment */, 7, 100,
                                    1001};
    static const size_t chunks[] = {1, 3, 5, 64};
    uint64_t seed = 500;
    size_t extra = 0;
    for (size_t a = 0; a < 4; a++) {
        for (size_t b = 0; b < 4; b++) {
            for (size_t c = 0; c < 4; c++, seed++) {
                struct ring_case rc = {
                    .m = ms[a],
                    .total = totals[b] ? totals[b] : ms[a],
                    .chunk = chunks[c],
                    .in_place = 0x1f,
                    .shuffle = seed % 3 == 0,
                    .staggered = seed % 5 == 0,
                };
                extra += check_same(&rc, seed);
            }
        }
    }
    /* The in-place path ran: some final chunks were cut at part bounds. */
    ck_assert_uint_gt(extra, 0);
    ck_assert_uint_gt(empty_parts, 0);
}
END_TEST

START_TEST(test_engine_inplace_some_nodes)
{
    /*
     * Only some positions in place; their peers cut chunks across part
     * boundaries (no direct sends, or several members).
     */
    static const struct ring_case cases[] = {
        {.m = 2, .total = 100, .chunk = 7, .in_place = 0x1, .no_direct = 0x2},
        {.m = 3, .total = 100, .chunk = 5, .in_place = 0x2, .no_direct = 0x5},
        {.m = 3,
         .total = 1001,
         .chunk = 64,
         .nlocal = {1, 2, 1},
         .in_place = 0x5},
        {.m = 4,
         .total = 333,
         .chunk = 3,
         .in_place = 0x9,
         .no_direct = 0x6,
         .shuffle = 1},
        {.m = 5,
         .total = 1001,
         .chunk = 16,
         .nlocal = {3, 1, 1, 2, 1},
         .in_place = 0x16,
         .no_direct = 0x1,
         .staggered = 1},
    };
    size_t extra = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        extra += check_same(&cases[c], 600 + c);
    ck_assert_uint_gt(extra, 0);
}
END_TEST

START_TEST(test_engine_inplace_weighted)
{
    /* Weights that are not 1/k, one mean for all: w * x + in in place. */
    static const size_t totals[] = {0 /* m */, 100, 1001};
    static const size_t chunks[] = {1, 5, 64};
    uint64_t seed = 700;
    size_t extra = 0;
    for (uint32_t m = 2; m <= 5; m++) {
        for (size_t b = 0; b < 3; b++) {
            for (size_t c = 0; c < 3; c++, seed++) {
                struct ring_case rc = {
                    .m = m,
                    .total = totals[b] ? totals[b] : m,
                    .chunk = chunks[c],
                    .in_place = 0x1f,
                    .weights = TG_WEIGHTED,
                };
                extra += check_same(&rc, seed);
            }
        }
    }
    ck_assert_uint_gt(extra, 0);
}
END_TEST

START_TEST(test_engine_inplace_empty_segments)
{
    /*
     * Fewer floats than daemons: some segments are empty and travel as
     * empty chunks, which an in-place daemon must forward too.
     */
    static const struct ring_case cases[] = {
        {.m = 2, .total = 1, .chunk = 64, .in_place = 0x3},
        {.m = 3, .total = 2, .chunk = 1, .in_place = 0x7},
        {.m = 4, .total = 3, .chunk = 1, .in_place = 0x5},
        {.m = 5, .total = 3, .chunk = 2, .in_place = 0x1f},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct ring_case rc = cases[c];
        rc.timeout_ms = 1000; /* a lost empty chunk fails fast */
        check_same(&rc, 650 + c);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Where in_place is ignored                                            */

START_TEST(test_engine_inplace_ignored_results)
{
    /* The flag is ignored everywhere here: the same chunks go out. */
    static const struct ring_case cases[] = {
        /* Personal results are computed from the sum and written back. */
        {.m = 2,
         .total = 100,
         .chunk = 5,
         .in_place = 0x3,
         .weights = TG_PERSONAL},
        {.m = 3,
         .total = 1001,
         .chunk = 64,
         .in_place = 0x7,
         .weights = TG_PERSONAL},
        /* Several local members: each gets the mean. */
        {.m = 3,
         .total = 100,
         .chunk = 3,
         .nlocal = {2, 3, 2},
         .in_place = 0x7},
        /* No direct sends. */
        {.m = 4, .total = 100, .chunk = 5, .in_place = 0xf, .no_direct = 0xf},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        ck_assert_uint_eq(check_same(&cases[c], 800 + c), 0);
}
END_TEST

START_TEST(test_engine_inplace_ignored_single_node)
{
    /*
     * m == 1: nothing to forward, results are written back. A lone member
     * of a group of two (the other absent) weighing 1/2 gets half its
     * input: left in place, it would keep its input.
     */
    static const size_t one[1] = {1}, three[1] = {3};
    direct_sends = 1;
    struct net *net = net_new(1, 64);
    struct tgroup *g1 = tg_new(1, 100, 1, rings[1], three, TG_UNIFORM, 810);
    struct tgroup *g2 = tg_new(2, 100, 1, rings[1], one, TG_UNIFORM, 811);
    tg_set_in_place(g1, 0, 1);
    tg_set_in_place(g2, 0, 1);
    g2->k = 2;
    g2->spec[0][0].weight = 0.5;
    tg_start_all(net, g1);
    tg_start_all(net, g2);
    run_until(net, tg_all_done, g1);
    run_until(net, tg_all_done, g2);
    tg_check_mean(g1);
    tg_check_mean(g2);
    ck_assert_uint_eq(stats(net, 0).groups_ok, 2);
    ck_assert_uint_eq(stats(net, 0).groups_in_place, 0);
    float res[100];
    tg_result(&g2->mb[0][0], res);
    for (size_t j = 0; j < 100; j++)
        ck_assert_float_eq(res[j], g2->mb[0][0].input[j] * 0.5f);
    net_free(net);
    tg_free(g1);
    tg_free(g2);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Failed groups                                                        */

enum fail_kind { FAIL_ABORT, FAIL_LINK_DOWN, FAIL_DEADLINE, NFAIL };

static const int fail_status[NFAIL] = {-ECANCELED, -ECONNRESET, -ETIMEDOUT};

/*
 * Runs the case with the link into its last position X held, hands X the
 * first half of what waits there (final chunks among them; at m == 2 all
 * are) and fails X by `kind` while it runs. Checks that nothing is written
 * after X's done(), even when the held chunks arrive, and returns the group
 * (the network is gone).
 */
static struct tgroup *fail_midway(const struct ring_case *rc, uint64_t seed,
                                  int in_place, enum fail_kind kind)
{
    struct tgroup *tg = case_group(rc, seed, in_place);
    struct net *net = case_net(rc, tg);
    uint32_t x = rc->m - 1;
    int me = tg_node(tg, x), left = tg_node(tg, x - 1);
    link_hold(net, left, me, 1);
    for (uint32_t p = 0; p < rc->m; p++) {
        uint32_t ms = p == x && kind == FAIL_DEADLINE ? 500 : LONG_MS;
        ck_assert_int_eq(tg_start_timeout(net, tg, p, ms), 0);
    }
    run_quiet(net);
    size_t q = net->links[left][me].queued;
    ck_assert_uint_ge(q, 2);
    ck_assert_uint_eq(link_deliver(net, left, me, q / 2), q / 2);
    ck_assert_uint_eq(pr_engine_running(E(net, me)), 1);
    if (kind == FAIL_ABORT)
        ck_assert_int_eq(pr_engine_abort(E(net, me), tg->id, -ECANCELED), 0);
    else if (kind == FAIL_LINK_DOWN)
        pr_engine_link_down(E(net, me), tg->ring[x - 1], -ECONNRESET);
    run_until(net, pos_done, &tg->done[x]);
    ck_assert_int_eq(tg->done[x].status, fail_status[kind]);

    size_t n = members(rc, x) * rc->total;
    float *at_done = malloc(n * sizeof(float));
    float *now = malloc(n * sizeof(float));
    ck_assert(at_done && now);
    for (size_t i = 0; i < members(rc, x); i++)
        tg_result(&tg->mb[x][i], at_done + i * rc->total);
    net_hold_all(net, 0);
    run_quiet(net);
    run_turns(net);
    for (size_t i = 0; i < members(rc, x); i++)
        tg_result(&tg->mb[x][i], now + i * rc->total);
    ck_assert_msg(memcmp(at_done, now, n * sizeof(float)) == 0,
                  "tensors changed after done()");
    ck_assert_int_eq(tg->done[x].calls, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[x].calls, 1);
    free(now);
    free(at_done);
    return tg;
}

START_TEST(test_engine_inplace_ignored_failure)
{
    /* Where in place is ignored, a failed group leaves the inputs. */
    static const struct ring_case variants[] = {
        {.m = 2,
         .total = 60,
         .chunk = 4,
         .in_place = 0x3,
         .weights = TG_PERSONAL},
        {.m = 2, .total = 60, .chunk = 4, .nlocal = {1, 2}, .in_place = 0x3},
        {.m = 2, .total = 60, .chunk = 4, .in_place = 0x3, .no_direct = 0x2},
    };
    const struct ring_case *rc = &variants[_i / NFAIL];
    struct tgroup *tg = fail_midway(rc, 820 + (uint64_t)_i, 1, _i % NFAIL);
    tg_check_unchanged(tg, rc->m - 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_inplace_failure_input_or_final)
{
    /*
     * A failed in-place member holds, float by float, its input or what a
     * successful run of the same seed gave it; both kinds, by construction.
     */
    struct ring_case rc = {
        .m = 2 + (uint32_t)(_i / NFAIL),
        .total = 60,
        .chunk = 4,
        .in_place = 0x1f,
    };
    uint64_t seed = 830 + (uint64_t)_i;
    struct ring_run ok = run_case(&rc, seed, 1);
    struct tgroup *tg = fail_midway(&rc, seed, 1, _i % NFAIL);
    uint32_t x = rc.m - 1;
    const float *fin = member_res(&rc, ok.res, x, 0);
    float res[60];
    tg_result(&tg->mb[x][0], res);
    size_t inputs = 0, finals = 0;
    for (size_t j = 0; j < rc.total; j++) {
        if (memcmp(&res[j], &tg->mb[x][0].input[j], sizeof(float)) == 0)
            inputs++;
        else if (memcmp(&res[j], &fin[j], sizeof(float)) == 0)
            finals++;
        else
            ck_abort_msg("float %zu: %.9g, neither input %.9g nor final %.9g",
                         j, (double)res[j], (double)tg->mb[x][0].input[j],
                         (double)fin[j]);
    }
    ck_assert_uint_gt(inputs, 0);
    ck_assert_uint_gt(finals, 0);
    free(ok.res);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_inplace_repeated_chunk_rejected)
{
    /*
     * Node 101 at position 1 of the ring 100, 101, 102 with 12 floats,
     * in place: step 1 (the last reduce-scatter step) brings segment 2,
     * [8, 12), summed and scaled into the member's tensors. The same half
     * chunk twice adds up to the segment's length; applied twice, floats
     * 8 and 9 would be neither input nor final. It must be refused.
     */
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {1, 1, 1};
    direct_sends = 1;
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 12, 3, ring, nlocal, TG_UNIFORM, 840);
    tg_set_in_place(tg, 1, 1);
    net->links[1][2].drop = 1;
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_quiet(net);
    const float one[2] = {1.0f, 1.0f};
    struct pr_chunk_hdr h = {1, 12, 8, 2, 1, 2, 0};
    pr_engine_on_chunk(E(net, 1), 100, &h, one);
    pr_engine_on_chunk(E(net, 1), 100, &h, one);
    run_turns(net);
    if (pr_engine_running(E(net, 1)) == 1)
        pr_engine_abort(E(net, 1), 1, -ECANCELED);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPROTO);
    float res[12];
    const float *in = tg->mb[1][0].input;
    tg_result(&tg->mb[1][0], res);
    float third = (float)(1.0 / 3.0);
    for (size_t j = 0; j < 12; j++) {
        float want = j == 8 || j == 9 ? (in[j] + 1.0f) * third : in[j];
        ck_assert_msg(memcmp(&res[j], &want, sizeof(float)) == 0,
                      "float %zu: %.9g, want %.9g", j, (double)res[j],
                      (double)want);
    }
    net_free(net);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* done() waits for the sends that read the member's tensors           */

/*
 * Ring 100, 101 (node index = position), 40 floats in chunks of 4, every
 * link held at first. Node 1 gets node 0's segment and forwards the final
 * floats; node 0 then gets all of node 1's chunks: it has every float, but
 * its own forwards (step 1, from its member's tensors when in place) wait
 * on the held link 0 -> 1.
 */
static struct tgroup *hold_last_forwards(struct net *net, int in_place,
                                         uint32_t timeout_ms)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 1};
    struct tgroup *tg = tg_new(3, 40, 2, ring, nlocal, TG_UNIFORM, 850);
    tg_set_in_place(tg, 0, in_place);
    tg_set_in_place(tg, 1, in_place);
    net_hold_all(net, 1);
    for (uint32_t p = 0; p < 2; p++)
        ck_assert_int_eq(tg_start_timeout(net, tg, p, timeout_ms), 0);
    link_hold(net, 0, 1, 0);
    run_quiet(net);
    link_hold(net, 0, 1, 1);
    link_hold(net, 1, 0, 0);
    run_quiet(net);
    run_turns(net);
    ck_assert_uint_eq(pr_engine_running(E(net, 0)), 0);
    ck_assert_uint_eq(stats(net, 0).groups_ok, 1);
    ck_assert_uint_eq(stats(net, 0).groups_in_place, (uint64_t)in_place);
    ck_assert_uint_ge(net->links[0][1].queued, 2);
    tg_check_mean_at(tg, 0);
    return tg;
}

START_TEST(test_engine_inplace_done_waits_for_sends)
{
    /*
     * _i: 0 no sends from the member's memory, done() runs at once (the
     * control); 1 in place; 2 default mode with direct sends (the step-0
     * segment went from the member's memory): both wait for the sends.
     */
    direct_sends = _i != 0;
    struct net *net = net_new(2, 4);
    struct tgroup *tg = hold_last_forwards(net, _i == 1, LONG_MS);
    int calls_before_sends = _i == 0;
    ck_assert_int_eq(tg->done[0].calls, calls_before_sends);
    link_hold(net, 0, 1, 0);
    run_until(net, tg_all_done, tg);
    run_turns(net);
    tg_check_mean(tg);
    net_free(net);
    tg_check_done(tg, 0);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_inplace_send_error_after_results)
{
    /* The held forwards complete with an error: still one done(), 0. */
    direct_sends = _i != 0; /* as in test_engine_inplace_done_waits... */
    struct net *net = net_new(2, 4);
    struct tgroup *tg = hold_last_forwards(net, _i == 1, LONG_MS);
    int calls_before_sends = _i == 0;
    ck_assert_int_eq(tg->done[0].calls, calls_before_sends);
    net->links[0][1].fail_cb = -EIO;
    net->links[0][1].fail_after = net->links[0][1].processed;
    link_hold(net, 0, 1, 0);
    run_until(net, pos_done, &tg->done[0]);
    run_quiet(net);
    run_turns(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, 0); /* it had every float */
    tg_check_mean_at(tg, 0);
    /* Node 1 never gets its own segment back; its control plane aborts. */
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 3, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_inplace_stalled_sends_reset_at_deadline)
{
    /*
     * The held forwards never complete: at the group's deadline the engine
     * resets the right link, which fails them, and done() runs once, with
     * the group's own outcome (0: it had every float). _i as above.
     */
    direct_sends = _i != 0;
    struct net *net = net_new(2, 4);
    struct tgroup *tg = hold_last_forwards(net, _i == 1, 1000);
    ck_assert_int_eq(tg->done[0].calls, _i == 0);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, 0);
    /* Only a group that waited on its member's memory resets the link. */
    ck_assert_int_eq(net->links[0][1].resets, _i != 0);
    tg_check_mean_at(tg, 0);
    /* Node 1 ends on its own deadline, or with what is released now. */
    link_hold(net, 0, 1, 0);
    run_until(net, pos_done, &tg->done[1]);
    run_quiet(net);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_inplace_send_error_while_running)
{
    /*
     * Node 0 forwards node 1's segment from its member's tensors; the
     * second of those sends fails while the group runs and the rest are
     * still out: done() waits for them, then runs once with the error.
     */
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 1};
    direct_sends = _i != 0; /* as in test_engine_inplace_done_waits... */
    struct net *net = net_new(2, 4);
    struct tgroup *tg = tg_new(4, 40, 2, ring, nlocal, TG_UNIFORM, 860);
    tg_set_in_place(tg, 0, _i == 1);
    tg_set_in_place(tg, 1, _i == 1);
    net_hold_all(net, 1);
    tg_start_all(net, tg);
    size_t own = net->links[0][1].queued; /* node 0's segment, step 0 */
    link_hold(net, 1, 0, 0);
    run_quiet(net);
    link_hold(net, 1, 0, 1);
    size_t fwd = net->links[0][1].queued - own; /* step 1 */
    ck_assert_uint_ge(fwd, 3);
    net->links[0][1].fail_cb = -EIO;
    net->links[0][1].fail_after = own + 1;
    ck_assert_uint_eq(link_deliver(net, 0, 1, own + 2), own + 2);
    run_turns(net);
    ck_assert_uint_eq(pr_engine_running(E(net, 0)), 0);
    int calls_before_sends = _i == 0;
    ck_assert_int_eq(tg->done[0].calls, calls_before_sends);
    link_hold(net, 0, 1, 0);
    run_until(net, pos_done, &tg->done[0]);
    run_turns(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -EIO);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 4, -ECANCELED), 0);
    link_hold(net, 1, 0, 0);
    run_until(net, pos_done, &tg->done[1]);
    run_quiet(net);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

static Suite *engine_inplace_suite(void)
{
    Suite *s = suite_create("engine_inplace");

    TCase *tc = tcase_create("results");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_inplace_same_as_default);
    tcase_add_test(tc, test_engine_inplace_some_nodes);
    tcase_add_test(tc, test_engine_inplace_weighted);
    tcase_add_test(tc, test_engine_inplace_empty_segments);
    suite_add_tcase(s, tc);

    tc = tcase_create("ignored");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_inplace_ignored_results);
    tcase_add_test(tc, test_engine_inplace_ignored_single_node);
    tcase_add_loop_test(tc, test_engine_inplace_ignored_failure, 0, 3 * NFAIL);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_inplace_failure_input_or_final, 0,
                        2 * NFAIL);
    tcase_add_test(tc, test_engine_inplace_repeated_chunk_rejected);
    suite_add_tcase(s, tc);

    tc = tcase_create("done");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_inplace_done_waits_for_sends, 0, 3);
    tcase_add_loop_test(tc, test_engine_inplace_send_error_after_results, 0, 3);
    tcase_add_loop_test(tc, test_engine_inplace_send_error_while_running, 0, 3);
    tcase_add_loop_test(tc, test_engine_inplace_stalled_sends_reset_at_deadline,
                        0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_inplace_suite());
}
