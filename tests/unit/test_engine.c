/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the reduce engine (daemon/engine/engine.c): correct results
 * over rings of every size, early chunks and their stash, several groups at
 * once. The fixture (engine_fixture.h) describes the in-memory network;
 * failures are in test_engine_fail.c, results written in place in
 * test_engine_inplace.c.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/base/log.h"
#include "daemon/engine/reduce.h"
#include "daemon/engine/xport.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

/* ------------------------------------------------------------------ */
/* Correct results                                                      */

/* One member per node, sent straight from its memory: the same means. */
START_TEST(test_engine_ring_mean_direct)
{
    static const uint32_t ms[] = {2, 3, 5};
    static const size_t totals[] = {1, 7, 1000, 100003};
    static const size_t chunks[] = {1, 64, 4096};
    uint64_t seed = 400;
    direct_sends = 1;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 3; c++) {
                run_mean_n(ms[a], totals[b], chunks[c], seed++, 1);
                run_mean_n(ms[a], totals[b], chunks[c], seed++, 0);
            }
    direct_sends = 0;
}
END_TEST

START_TEST(test_engine_ring_mean)
{
    static const uint32_t ms[] = {1, 2, 3, 5};
    static const size_t totals[] = {1, 2, 7, 1000};
    static const size_t chunks[] = {1, 3, 64, 4096};
    uint64_t seed = 1;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                run_mean(ms[a], totals[b], chunks[c], seed++);
}
END_TEST

START_TEST(test_engine_ring_mean_large)
{
    static const uint32_t ms[] = {1, 2, 3, 5};
    for (size_t a = 0; a < 4; a++)
        run_mean(ms[a], 1000003, 4096, 100 + a);
    run_mean(3, 1000003, 64, 200);
}
END_TEST

START_TEST(test_engine_ring_mean_four)
{
    run_mean(4, 1000, 3, 300);
    run_mean(4, 3, 1, 301);
}
END_TEST

START_TEST(test_engine_reordered_delivery)
{
    /* Links that reorder chunks, even their own: results stay exact. */
    static const struct {
        uint32_t m;
        size_t total, chunk;
    } cases[] = {
        {2, 1000, 64}, {3, 1000, 3}, {3, 7, 1}, {5, 1000, 16}, {5, 3, 1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct net *net = net_new((int)cases[c].m, cases[c].chunk);
        net->shuffle = 1;
        size_t nlocal[MAXN] = {1, 2, 3, 1, 2};
        struct tgroup *tg = tg_new(2, cases[c].total, cases[c].m,
                                   rings[cases[c].m], nlocal, 0, 80 + c);
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_mean(tg);
        net_free(net);
        tg_free(tg);
    }
}
END_TEST

/*
 * A healing member (weight 0) beside staleness weights: 0, 2/3, 1/3 over
 * three daemons. The last daemon's one member weighs 1/k = 1/3, as in a
 * uniform group; it must still scale, or the ring mixes its unscaled
 * floats with the others' scaled ones (the mean came out 42% off). The
 * healer's floats are NaN: weight 0 must mean not read (0 x NaN is NaN).
 */
START_TEST(test_engine_heal_weights_mixed)
{
    static const double w[3] = {0.0, 2.0 / 3.0, 1.0 / 3.0};
    static const size_t nlocal[3] = {1, 1, 1};
    for (size_t total = 1; total <= 1000; total *= 10) {
        struct net *net = net_new(3, 64);
        struct tgroup *tg =
            tg_new(9, total, 3, rings[3], nlocal, TG_WEIGHTED, 30 + total);
        for (uint32_t p = 0; p < 3; p++)
            tg->spec[p][0].weight = w[p];
        /* The healer's model diverged: none of it may reach the others. */
        struct tmember *h = &tg->mb[0][0];
        for (size_t q = 0; q < h->nparts; q++)
            for (size_t j = 0; j < h->parts[q].len; j++)
                h->part[q][j] = NAN;
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_done(tg, 0);
        tg_check_mean(tg);
        net_free(net);
        tg_free(tg);
    }
}
END_TEST

START_TEST(test_engine_mixed_chunk_sizes)
{
    /* Chunk boundaries are the owner's; everyone forwards them as cut. */
    static const size_t chunk[3] = {1, 7, 4096};
    struct net *net = net_new(3, 64);
    for (int i = 0; i < 3; i++)
        pr_engine_set_chunk(E(net, i), chunk[i]);
    pr_engine_set_chunk(E(net, 0), 0); /* ignored */
    static const size_t nlocal[3] = {2, 1, 3};
    struct tgroup *tg = tg_new(1, 1000, 3, rings[3], nlocal, 0, 5);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    /* Node 0 (chunk 1) posted its own segment float by float. */
    size_t start, len;
    pr_ring_segment(1000, 3, 1, &start, &len); /* node 0 is at position 1 */
    ck_assert_uint_ge(net->links[0][1].posted, len);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_personal)
{
    static const struct {
        uint32_t m;
        size_t total, chunk, nlocal[MAXN];
    } cases[] = {
        {1, 1000, 64, {3}},           {1, 5, 64, {1}},
        {2, 1000, 3, {1, 1}},         {3, 1000, 64, {1, 2, 3}},
        {3, 7, 1, {2, 2, 2}},         {5, 1000, 64, {1, 3, 1, 2, 1}},
        {3, 100003, 4096, {2, 1, 2}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct net *net = net_new((int)cases[c].m, cases[c].chunk);
        struct tgroup *tg = tg_new(3, cases[c].total, cases[c].m,
                                   rings[cases[c].m], cases[c].nlocal, 1, c);
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        if (tg->k == 1)
            tg_check_unchanged(tg, 0); /* k == 1: own model */
        tg_check_personal(tg);
        net_free(net);
        tg_free(tg);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Early chunks                                                         */

START_TEST(test_engine_early_chunks_stashed)
{
    /* Ring 100, 101, 102; segments [0,334) [334,667) [667,1000). */
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {1, 2, 1};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 11);

    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_quiet(net);
    /* Node 1 holds node 0's step-0 chunks of segment 0. */
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, pr_ring_chunks(334, 64));
    ck_assert_uint_eq(stats(net, 2).chunks_stashed, 0);

    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_quiet(net);
    /* Node 2: node 1's own segment (step 0) and segment 0 (step 1). */
    ck_assert_uint_eq(stats(net, 2).chunks_stashed,
                      pr_ring_chunks(333, 64) + pr_ring_chunks(334, 64));
    ck_assert_uint_eq(tg->done[0].calls + tg->done[1].calls, 0);

    ck_assert_int_eq(tg_start(net, tg, 2), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(stats(net, i).chunks_dropped, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_held_chunks_before_start)
{
    /* Start order 2, 0, 1; node 1 gets a burst of chunks before its start. */
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {3, 1, 2};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 12);
    net_hold_all(net, 1);
    ck_assert_int_eq(tg_start(net, tg, 2), 0);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    ck_assert_int_eq(uv_run(&net->loop, UV_RUN_NOWAIT), 1);
    ck_assert_uint_eq(net->links[2][0].queued, pr_ring_chunks(333, 64));
    ck_assert_uint_eq(net->links[0][1].queued, pr_ring_chunks(334, 64));
    ck_assert_uint_eq(net->links[0][1].delivered, 0);

    /* Node 0 applies node 2's segment and forwards it to node 1. */
    link_hold(net, 2, 0, 0);
    link_hold(net, 0, 1, 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed,
                      pr_ring_chunks(334, 64) + pr_ring_chunks(333, 64));
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 0);

    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    net_hold_all(net, 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_stale_chunk_dropped)
{
    static const size_t nlocal[2] = {1, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(5, 100, 2, rings[2], nlocal, 0, 13);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);

    float data[50] = {0};
    struct pr_chunk_hdr h = {.group_id = 3, .total = 100, .nfloats = 50};
    pr_engine_on_chunk(E(net, 0), 101, &h, data); /* below the max started */
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 1);
    h.group_id = 5; /* the max started, finished */
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 2);
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 0);
    h.group_id = 6; /* not started yet: kept */
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 2);
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 1);
    tg_check_mean(tg); /* nothing written after done() */
    net_free(net);     /* frees the stashed chunk */
    tg_free(tg);
}
END_TEST

/* A new scheduler whose clock went back: its lower ids still get through. */
START_TEST(test_engine_new_session_lower_ids)
{
    static const size_t nlocal[2] = {1, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *old = tg_new(500, 100, 2, rings[2], nlocal, 0, 13);
    tg_start_all(net, old);
    run_until(net, tg_all_done, old);
    tg_check_mean(old);

    /* A session whose ids are all above the old ones changes nothing. */
    pr_engine_new_session(E(net, 0), 1000);
    float data[50] = {0};
    struct pr_chunk_hdr h = {.group_id = 5, .total = 100, .nfloats = 50};
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 1);
    /* One that numbers from 6 keeps what comes early for 7. */
    for (uint32_t i = 0; i < 2; i++)
        pr_engine_new_session(E(net, i), 6);
    /* Position 1 starts first: its chunks come before the group does. */
    struct tgroup *tg = tg_new(7, 100, 2, rings[2], nlocal, 0, 17);
    int first = tg_node(tg, 0);
    uint64_t dropped = stats(net, first).chunks_dropped;
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, first).chunks_dropped, dropped);
    ck_assert_uint_gt(stats(net, first).chunks_stashed, 0);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    net_free(net);
    tg_free(old);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_stash_full_drops)
{
    /* Room for 8 floats: the second early chunk of 8 does not fit. */
    static const size_t nlocal[2] = {1, 1};
    struct net *net = net_new_stash(2, 8, 8 * sizeof(float));
    struct tgroup *tg = tg_new(1, 32, 2, rings[2], nlocal, 0, 14);
    ck_assert_int_eq(tg_start(net, tg, 1), 0); /* node 0 is at position 1 */
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 1);
    /* The group cannot finish; fail it where it runs. */
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 1, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECANCELED);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 0); /* never started */
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_failed_start_releases_stash)
{
    /*
     * A group whose first send fails inside start() must still take its
     * early chunks out of the stash, or they fill it for the stash time
     * and the next groups' early chunks are dropped.
     */
    static const size_t nlocal[2] = {1, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new_stash(2, 64, 4 * sizeof(float));
    struct tgroup *g1 = tg_new(1, 8, 2, ring, nlocal, 0, 15);
    struct tgroup *g2 = tg_new(2, 8, 2, ring, nlocal, 0, 16);
    ck_assert_int_eq(tg_start(net, g1, 0), 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1); /* stash now full */

    net->links[1][0].fail = -EPIPE;
    ck_assert_int_eq(tg_start(net, g1, 1), 0);
    run_until(net, pos_done, &g1->done[1]);
    ck_assert_int_eq(g1->done[1].status, -EPIPE);
    tg_check_unchanged(g1, 1);

    ck_assert_int_eq(tg_start(net, g2, 0), 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 2);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);

    pr_engine_link_down(E(net, 0), 101, -EPIPE);
    run_until(net, pos_done, &g2->done[0]);
    ck_assert_int_eq(g1->done[0].status, -EPIPE);
    ck_assert_int_eq(g2->done[0].status, -EPIPE);
    tg_check_unchanged(g1, 0);
    tg_check_unchanged(g2, 0);
    net_free(net);
    ck_assert_int_eq(g1->done[0].calls + g1->done[1].calls, 2);
    ck_assert_int_eq(g2->done[0].calls + g2->done[1].calls, 1);
    tg_free(g1);
    tg_free(g2);
}
END_TEST

static int dropped_one(struct net *net, void *arg)
{
    (void)arg;
    return stats(net, 0).chunks_dropped == 1;
}

/* An early chunk waits as long as the node's reduce timeout, then goes. */
START_TEST(test_engine_stash_expiry_follows_set_ms)
{
    struct net *net = net_new(2, 64);
    pr_engine_set_stash_ms(E(net, 0), 120);
    float data[50] = {0};
    struct pr_chunk_hdr h = {.group_id = 6, .total = 100, .nfloats = 50};
    uv_update_time(&net->loop);
    uint64_t t0 = uv_now(&net->loop);
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    pr_engine_on_chunk(E(net, 1), 100, &h, data); /* the default: a minute */
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 1);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 0);
    run_until(net, dropped_one, NULL);
    uint64_t waited = uv_now(&net->loop) - t0;
    ck_assert_uint_ge(waited, 120);
    ck_assert_uint_lt(waited, 2000);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);

    /* A reload's value applies to chunks kept from then on; 0: default. */
    pr_engine_set_stash_ms(E(net, 0), 0);
    h.group_id = 7;
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    run_turns(net);
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 2);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 1);
    net_free(net); /* frees the chunks still kept */
}
END_TEST

/* ------------------------------------------------------------------ */
/* Several groups at once                                               */

START_TEST(test_engine_groups_in_flight)
{
    struct net *net = net_new(4, 64);
    static const int r1[4] = {0, 1, 2, 3}, r2[2] = {2, 0}, r3[1] = {1},
                     r4[3] = {3, 1, 0}, r5[4] = {1, 3, 0, 2};
    static const size_t n1[4] = {1, 2, 1, 1}, n2[2] = {2, 1}, n3[1] = {3},
                        n4[3] = {1, 1, 2}, n5[4] = {1, 1, 1, 2};
    struct tgroup *g1 = tg_new(1, 1000, 4, r1, n1, 0, 61);
    struct tgroup *g2 = tg_new(2, 7, 2, r2, n2, 0, 62);
    struct tgroup *g3 = tg_new(3, 1000, 1, r3, n3, 0, 63);
    struct tgroup *g4 = tg_new(4, 20000, 3, r4, n4, 0, 64);
    struct tgroup *g5 = tg_new(5, 333, 4, r5, n5, 1, 65);

    /* Each node starts its groups in id order; nodes interleave. */
    ck_assert_int_eq(tg_start(net, g1, 0), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g1, 2), 0); /* node 2 */
    ck_assert_int_eq(tg_start(net, g2, 0), 0); /* node 2 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g2, 1), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g1, 1), 0); /* node 1 */
    ck_assert_int_eq(tg_start(net, g4, 2), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g3, 0), 0); /* node 1 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g5, 2), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g4, 1), 0); /* node 1 */
    ck_assert_int_eq(tg_start(net, g5, 3), 0); /* node 2 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g1, 3), 0); /* node 3 */
    ck_assert_int_eq(tg_start(net, g5, 0), 0); /* node 1 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g4, 0), 0); /* node 3 */
    ck_assert_int_eq(tg_start(net, g5, 1), 0); /* node 3 */

    run_until(net, tg_all_done, g1);
    run_until(net, tg_all_done, g2);
    run_until(net, tg_all_done, g3);
    run_until(net, tg_all_done, g4);
    run_until(net, tg_all_done, g5);
    tg_check_mean(g1);
    tg_check_mean(g2);
    tg_check_mean(g3);
    tg_check_mean(g4);
    tg_check_personal(g5);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(stats(net, i).chunks_dropped, 0);
        ck_assert_uint_eq(pr_engine_running(E(net, i)), 0);
    }
    ck_assert_uint_eq(stats(net, 0).groups_ok, 4);
    ck_assert_uint_eq(stats(net, 1).groups_ok, 4);
    ck_assert_uint_eq(stats(net, 2).groups_ok, 3);
    ck_assert_uint_eq(stats(net, 3).groups_ok, 3);
    net_free(net);
    tg_free(g1);
    tg_free(g2);
    tg_free(g3);
    tg_free(g4);
    tg_free(g5);
}
END_TEST

/* done() may start the next group on the same engine. */
struct chain {
    struct net *net;
    struct tgroup *next;
    struct done_rec rec;
};

static void chain_done(void *arg, uint64_t id, int status)
{
    struct chain *c = arg;
    done_cb(&c->rec, id, status);
    if (c->next) {
        ck_assert_int_eq(tg_start(c->net, c->next, 0), 0);
        c->next = NULL;
    }
}

START_TEST(test_engine_done_starts_next_group)
{
    static const size_t nlocal[1] = {2};
    struct net *net = net_new(1, 64);
    struct tgroup *g1 = tg_new(1, 50, 1, rings[1], nlocal, 0, 70);
    struct tgroup *g2 = tg_new(2, 60, 1, rings[1], nlocal, 0, 71);
    struct chain c = {net, g2, {.id = 1}};
    struct pr_engine_group g = {
        .id = 1,
        .total = 50,
        .k = 2,
        .m = 1,
        .ring = g1->ring,
        .local = g1->spec[0],
        .nlocal = 2,
        .timeout_ms = LONG_MS,
        .done = chain_done,
        .arg = &c,
    };
    in_start = 1;
    ck_assert_int_eq(pr_engine_start(E(net, 0), &g), 0);
    in_start = 0;
    run_until(net, tg_all_done, g2);
    ck_assert_int_eq(c.rec.calls, 1);
    ck_assert_int_eq(c.rec.status, 0);
    g1->done[0] = c.rec;
    tg_check_mean(g1);
    tg_check_mean(g2);
    net_free(net);
    tg_free(g1);
    tg_free(g2);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");

    TCase *tc = tcase_create("results");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_ring_mean);
    tcase_add_test(tc, test_engine_ring_mean_direct);
    tcase_add_test(tc, test_engine_ring_mean_large);
    tcase_add_test(tc, test_engine_ring_mean_four);
    tcase_add_test(tc, test_engine_reordered_delivery);
    tcase_add_test(tc, test_engine_mixed_chunk_sizes);
    tcase_add_test(tc, test_engine_heal_weights_mixed);
    tcase_add_test(tc, test_engine_personal);
    tcase_add_test(tc, test_engine_groups_in_flight);
    tcase_add_test(tc, test_engine_done_starts_next_group);
    suite_add_tcase(s, tc);

    tc = tcase_create("stash");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_early_chunks_stashed);
    tcase_add_test(tc, test_engine_held_chunks_before_start);
    tcase_add_test(tc, test_engine_stale_chunk_dropped);
    tcase_add_test(tc, test_engine_new_session_lower_ids);
    tcase_add_test(tc, test_engine_stash_full_drops);
    tcase_add_test(tc, test_engine_failed_start_releases_stash);
    tcase_add_test(tc, test_engine_stash_expiry_follows_set_ms);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The stash tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_suite());
}
