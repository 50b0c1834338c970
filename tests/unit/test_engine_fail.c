/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the reduce engine (daemon/engine/engine.c) when things go
 * wrong: failed sends, lost links, deadlines, aborts, destroy() with groups in
 * flight, bad chunks and corrupted headers, and start() arguments it must
 * refuse. Failed groups leave the members' tensors as they were. The
 * fixture (engine_fixture.h) describes the in-memory network.
 */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/base/log.h"
#include "daemon/engine/reduce.h"
#include "daemon/engine/xport.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

/* ------------------------------------------------------------------ */
/* Failures                                                             */

START_TEST(test_engine_send_fails_sync)
{
    static const size_t nlocal[2] = {2, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, rings[2], nlocal, 0, 20);
    /* Ring 101, 100: node 0 is at position 1 and sends to node 1. */
    net->links[0][1].fail = -EPIPE;
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    ck_assert_int_eq(tg_start(net, tg, 1), 0); /* first send fails inside */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPIPE);
    ck_assert_uint_eq(stats(net, 0).groups_failed, 1);
    /* Node 1 waits for node 0 until its transport reports the loss. */
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    pr_engine_link_down(E(net, 1), 100, -EPIPE);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -EPIPE);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_check_done(tg, -EPIPE);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_send_fails_async)
{
    static const size_t nlocal[3] = {1, 2, 1};
    static const int ring[3] = {0, 1, 2};
    struct net *net = net_new(3, 16);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 21);
    /* Node 1's fourth send to node 2 completes with -EIO; later ones too. */
    net->links[1][2].fail_cb = -EIO;
    net->links[1][2].fail_after = 3;
    tg_start_all(net, tg);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EIO);
    run_quiet(net);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 0);
    pr_engine_link_down(E(net, 0), 101, -EIO);
    pr_engine_link_down(E(net, 2), 101, -EIO);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -EIO);
    for (uint32_t p = 0; p < 3; p++)
        tg_check_unchanged(tg, p);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_link_down_mid_group)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {2, 2, 2};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(9, 1000, 3, ring, nlocal, 0, 22);
    link_hold(net, 2, 0, 1); /* the ring cannot close */
    tg_start_all(net, tg);
    run_quiet(net);
    size_t held = net->links[2][0].queued;
    /* Own segment, then segments 1 (step 1) and 0 (step 2) forwarded. */
    ck_assert_uint_eq(held, 3 * 6);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(pr_engine_running(E(net, i)), 1);

    pr_engine_link_down(E(net, 1), 104, -ECONNRESET); /* not in the ring */
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    pr_engine_link_down(E(net, 1), 102, -ECONNRESET);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 0);
    ck_assert_int_eq(tg->done[1].calls, 0); /* not from inside the call */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECONNRESET);

    pr_engine_link_down(E(net, 0), 102, -ECONNRESET);
    pr_engine_link_down(E(net, 2), 101, -ECONNRESET);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -ECONNRESET);

    /* The held chunks now reach a finished group: dropped as stale. */
    link_hold(net, 2, 0, 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, held);
    for (uint32_t p = 0; p < 3; p++)
        tg_check_unchanged(tg, p);
    net_free(net);
    tg_check_done(tg, -ECONNRESET);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_deadline)
{
    static const size_t nlocal[2] = {2, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 23);
    net->links[0][1].drop = 1; /* node 1 never hears of it */
    uint64_t t0 = uv_hrtime();
    ck_assert_int_eq(tg_start_timeout(net, tg, 0, 100), 0);
    run_until(net, pos_done, &tg->done[0]);
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    ck_assert_int_eq(tg->done[0].status, -ETIMEDOUT);
    ck_assert_uint_ge(ms, 99);
    ck_assert_uint_lt(ms, 400);
    ck_assert_uint_eq(stats(net, 0).groups_failed, 1);
    tg_check_unchanged(tg, 0);
    /* Nothing else keeps the loop alive once the group is gone. */
    ck_assert_int_eq(uv_run(&net->loop, UV_RUN_DEFAULT), 0);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 0);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_abort)
{
    static const size_t nlocal[2] = {1, 2};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(4, 1000, 2, rings[2], nlocal, 0, 24);
    net_hold_all(net, 1);
    tg_start_all(net, tg);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 99, -ECANCELED), -ENOENT);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 4, -ECANCELED), 0);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 4, -EINTR), -ENOENT);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 4, -EINTR), 0);
    ck_assert_int_eq(tg->done[0].calls + tg->done[1].calls, 0);
    /* Their sends are still posted: they drain after done(). */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED); /* ring 101, 100 */
    ck_assert_int_eq(tg->done[1].status, -EINTR);
    net_hold_all(net, 0);
    run_quiet(net);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 4, -EINTR), -ENOENT);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_cancels_running)
{
    static const size_t nlocal[2] = {2, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 100, 2, ring, nlocal, 0, 25);
    net->links[0][1].drop = 1;
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_quiet(net); /* every send has completed */
    destroy_node(net, 0);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_with_sends_posted)
{
    /* destroy() may come first; the engine goes with the last completion. */
    static const size_t nlocal[2] = {1, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 16);
    struct tgroup *tg = tg_new(1, 100, 2, ring, nlocal, 0, 27);
    link_hold(net, 0, 1, 1);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    size_t posted = net->links[0][1].queued;
    ck_assert_uint_eq(posted, pr_ring_chunks(50, 16));
    destroy_node(net, 0);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    /* The transport closes: one send went out, the others fail. */
    net->links[0][1].fail_cb = -ECANCELED;
    net->links[0][1].fail_after = 1;
    link_hold(net, 0, 1, 0);
    run_quiet(net);
    ck_assert_uint_eq(net->links[0][1].processed, posted);
    ck_assert_uint_eq(net->links[0][1].delivered, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_reports_finished_group)
{
    /*
     * A group that finished but whose done() has not run yet keeps its
     * outcome: results already written are reported as success, not as a
     * cancellation that claims the inputs are untouched.
     */
    static const size_t nlocal[1] = {3};
    struct net *net = net_new(1, 64);
    struct tgroup *tg = tg_new(1, 100, 1, rings[1], nlocal, 0, 26);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    destroy_node(net, 0);
    tg_check_mean(tg);
    net_free(net);
    tg_check_mean(tg);
    tg_free(tg);
}
END_TEST

/*
 * A member whose trainer left mid-group (pr_engine_detach), or before its
 * group came (detached in the spec): the group completes for everyone
 * else with its floats counted, and its tensors get no write-back. In
 * place, the final floats still land (its contract). _i: bit 0 in place,
 * bit 1 detached at start.
 */
START_TEST(test_engine_detached_member_not_written)
{
    static const size_t nlocal[2] = {1, 2};
    static const int ring[2] = {0, 1};
    int in_place = _i & 1, at_start = _i >> 1;
    direct_sends = in_place; /* in place needs direct sends */
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 90);
    if (in_place)
        tg_set_in_place(tg, 0, 1);
    net_hold_all(net, 1);
    /* Node 0's lone member leaves; node 1's two members stay. */
    uint32_t gone = tg->spec[0][0].rank;
    tg->spec[0][0].detached = at_start;
    tg_start_all(net, tg);
    if (!at_start)
        ck_assert_int_eq(pr_engine_detach(E(net, 0), 1, gone), 0);
    ck_assert_int_eq(pr_engine_detach(E(net, 0), 1, gone + 1000), -ENOENT);
    ck_assert_int_eq(pr_engine_detach(E(net, 0), 2, gone), -ENOENT);
    net_hold_all(net, 0);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, 0);
    /* The others hold the mean of all three inputs. */
    tg_check_mean_at(tg, 1);
    if (in_place)
        tg_check_mean_at(tg, 0);
    else
        tg_check_unchanged(tg, 0);
    /* Not running any more: nothing to detach. */
    ck_assert_int_eq(pr_engine_detach(E(net, 0), 1, gone), -ENOENT);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * No result reaches a member's tensors after its group's deadline, even
 * when the loop was held up past it (a stopped daemon) with the chunks that
 * complete the group waiting: the first chunk read after the deadline fails
 * the group, in place (_i = 1) as well. (The node daemon's trainers are
 * told, or give up, by then: their tensors must keep their inputs.)
 */
START_TEST(test_engine_no_write_after_deadline)
{
    static const size_t nlocal[2] = {1, 1};
    static const int ring[2] = {0, 1};
    direct_sends = _i; /* in place needs direct sends */
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 91);
    if (_i)
        tg_set_in_place(tg, 0, 1);
    link_hold(net, 1, 0, 1);
    ck_assert_int_eq(tg_start_timeout(net, tg, 0, 100), 0);
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, LONG_MS), 0);
    /* Node 1 has all it needs and has sent everything node 0 lacks. */
    run_quiet(net);
    ck_assert_uint_gt(net->links[1][0].queued, 0);
    ck_assert_int_eq(tg->done[0].calls, 0);
    struct timespec ts = {0, 150 * 1000000L};
    nanosleep(&ts, NULL);
    link_deliver(net, 1, 0, SIZE_MAX);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].status, -ETIMEDOUT);
    tg_check_unchanged(tg, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * A write-back that could not end by the deadline is not begun: a group
 * that starts with no time left (a member whose trainer's deadline has
 * passed) fails without touching its members' tensors, even one that
 * completes at once (a single node).
 */
START_TEST(test_engine_no_write_back_without_time)
{
    static const size_t nlocal[1] = {2};
    static const int ring[1] = {0};
    struct net *net = net_new(1, 64);
    struct tgroup *tg = tg_new(1, 1000, 1, ring, nlocal, 0, 92);
    ck_assert_int_eq(tg_start_timeout(net, tg, 0, 0), 0);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].status, -ETIMEDOUT);
    ck_assert_uint_eq(stats(net, 0).groups_failed, 1);
    tg_check_unchanged(tg, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Bad chunks                                                           */

struct bad_case {
    const char *name;
    size_t npre; /* valid-looking chunks sent first */
    struct pr_chunk_hdr pre[3];
    struct pr_chunk_hdr bad;
    uint32_t from;
};

/*
 * Node 101 at position 1 of the ring 100, 101, 102 with 12 floats:
 * segments [0,4) [4,8) [8,12); step 0 brings segment 0 from node 100,
 * step 1 segment 2, step 2 segment 1, step 3 segment 0.
 */
#define H(off, n, step, seg)                                                   \
    {                                                                          \
        1, 12, off, n, step, seg, 0                                            \
    }
static const struct bad_case bad_cases[] = {
    {"total too large", 0, {{0}}, {1, 13, 0, 4, 0, 0, 0}, 100},
    {"total too small", 0, {{0}}, {1, 11, 0, 4, 0, 0, 0}, 100},
    {"encoding not the group's",
     0,
     {{0}},
     {1, 12, 0, 4, 0, 0, PR_WIRE_BF16},
     100},
    {"wrong segment", 0, {{0}}, H(4, 4, 0, 1), 100},
    {"step out of range", 0, {{0}}, H(0, 4, 4, 0), 100},
    {"step huge", 0, {{0}}, H(0, 4, UINT32_MAX, 0), 100},
    {"more than the segment", 0, {{0}}, H(0, 5, 0, 0), 100},
    {"past the segment end", 0, {{0}}, H(1, 4, 0, 0), 100},
    {"before the segment", 0, {{0}}, H(7, 2, 1, 2), 100},
    {"offset wraps around", 0, {{0}}, H(UINT64_MAX - 1, 2, 0, 0), 100},
    {"offset wraps, later step", 0, {{0}}, H(UINT64_MAX - 1, 4, 1, 2), 100},
    {"duplicate chunk", 1, {H(0, 4, 0, 0)}, H(0, 4, 0, 0), 100},
    {"overlapping chunks", 1, {H(0, 3, 0, 0)}, H(1, 3, 0, 0), 100},
    /* Within the segment's length in count: only which floats tells. */
    {"half chunk repeated", 1, {H(0, 2, 0, 0)}, H(0, 2, 0, 0), 100},
    {"overlap with a later chunk", 1, {H(2, 2, 0, 0)}, H(1, 2, 0, 0), 100},
    {"overlap between two chunks",
     2,
     {H(0, 1, 0, 0), H(3, 1, 0, 0)},
     H(1, 3, 0, 0),
     100},
    {"empty chunk, non-empty segment", 0, {{0}}, H(0, 0, 0, 0), 100},
    {"empty chunks after a full step",
     3,
     {H(0, 4, 0, 0), H(4, 0, 0, 0), H(4, 0, 0, 0)},
     H(4, 0, 0, 0),
     100},
};
#undef H
#define NBAD (int)(sizeof(bad_cases) / sizeof(bad_cases[0]))

START_TEST(test_engine_bad_chunk)
{
    const struct bad_case *bc = &bad_cases[_i];
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {0, 2, 0};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 12, 3, ring, nlocal, 0, 30 + (uint64_t)_i);
    net->links[1][2].drop = 1;
    /* A short deadline turns a missed check into a failure, not a hang. */
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 2000), 0);
    run_quiet(net);
    float data[16];
    for (int i = 0; i < 16; i++)
        data[i] = 1.0f;
    /* The engine may read at most nfloats floats of `data`. */
    for (size_t i = 0; i < bc->npre; i++)
        pr_engine_on_chunk(E(net, 1), 100, &bc->pre[i], data);
    struct pr_chunk_hdr h = bc->bad;
    pr_engine_on_chunk(E(net, 1), bc->from, &h, data);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_msg(tg->done[1].status == -EPROTO, "%s: status %d", bc->name,
                  tg->done[1].status);
    ck_assert_uint_eq(stats(net, 1).groups_failed, 1);
    tg_check_unchanged(tg, 1);
    /* A chunk after the failure changes nothing. */
    struct pr_chunk_hdr ok = {1, 12, 0, 4, 0, 0, 0};
    pr_engine_on_chunk(E(net, 1), 100, &ok, data);
    run_quiet(net);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

static const struct {
    enum field f;
    uint64_t value;
} corruptions[] = {
    {F_TOTAL, 1001},
    {F_OFF, 999},
    {F_STEP, 2},
    {F_SEG, 1},
};
#define NCORRUPT (int)(sizeof(corruptions) / sizeof(corruptions[0]))

/*
 * A chunk from a node that is not the left neighbour (the right one, or one
 * outside the group: a stray of an older session with the same group id)
 * is dropped and counted; the group goes on and its tensors are untouched.
 */
static const uint32_t stray_from[] = {102, 7};

START_TEST(test_engine_stray_chunk_dropped)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {0, 2, 0};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 12, 3, ring, nlocal, 0, 60 + (uint64_t)_i);
    net->links[1][2].drop = 1;
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 2000), 0);
    run_quiet(net);
    float data[4] = {1, 1, 1, 1};
    struct pr_chunk_hdr h = {1, 12, 0, 4, 0, 0, 0}; /* step 0, segment 0 */
    pr_engine_on_chunk(E(net, 1), stray_from[_i], &h, data);
    run_quiet(net);
    ck_assert_int_eq(tg->done[1].calls, 0);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 1);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    /* The left neighbour's own chunk for that step is still taken. */
    pr_engine_on_chunk(E(net, 1), 100, &h, data);
    run_quiet(net);
    ck_assert_int_eq(tg->done[1].calls, 0);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 1, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECANCELED);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 1);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * The left neighbour sends a segment one float at a time, every other
 * float, backwards: each chunk is a new span before the others. Past the
 * span limit the group fails (-EPROTO) instead of the loop spending
 * quadratic time on the peer's chunks.
 */
START_TEST(test_engine_scattered_chunks_fail)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {0, 1};
    const size_t total = 16384; /* segments of 8192 */
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, total, 2, ring, nlocal, 0, 70);
    net->links[1][0].drop = 1;
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 5000), 0);
    run_quiet(net);
    float one = 1.0f;
    size_t sent = 0;
    for (size_t off = 8190; tg->done[1].calls == 0 && off > 0; off -= 2) {
        struct pr_chunk_hdr h = {1, total, off, 1, 0, 0, 0};
        pr_engine_on_chunk(E(net, 1), 100, &h, &one);
        sent++;
        run_turns(net);
    }
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPROTO);
    /* 2048 spans kept apart, the next one refused. */
    ck_assert_uint_eq(sent, 2049);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_corrupt_header)
{
    /* A live ring of two; node 0's first chunk to node 1 is corrupted. */
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 2};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 40);
    net->links[0][1].corrupt = corruptions[_i].f;
    net->links[0][1].corrupt_value = corruptions[_i].value;
    net->links[0][1].corrupt_at = 0;
    tg_start_all(net, tg);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPROTO);
    /* Node 0 would wait for the deadline; its control plane aborts it. */
    run_quiet(net);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 1, -ECANCELED), 0);
    run_until(net, tg_all_done, tg);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls + tg->done[1].calls, 2);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* start() arguments                                                    */

START_TEST(test_engine_start_invalid_args)
{
    static const size_t nlocal[2] = {2, 1};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(5, 10, 2, rings[2], nlocal, 0, 50);
    struct done_rec never = {.id = 5};
    const struct pr_engine_group good = {
        .id = 5,
        .total = 10,
        .k = 3,
        .m = 2,
        .pos = 0,
        .ring = tg->ring,
        .local = tg->spec[0],
        .nlocal = 2,
        .timeout_ms = LONG_MS,
        .done = done_cb,
        .arg = &never,
    };
    struct pr_engine *e1 = E(net, 1); /* ring 101, 100: position 0 */
    struct pr_engine_group g;
    struct pr_engine_part short_part = {tg->mb[0][0].part[0], 1};
    struct pr_engine_member bad_mb[2];

    in_start = 1;
    g = good, g.nlocal = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.local = NULL;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.m = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.pos = 2;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.ring = NULL;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.k = 1;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.total = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.total = 11;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    memcpy(bad_mb, tg->spec[0], sizeof(bad_mb));
    bad_mb[1].parts = &short_part, bad_mb[1].nparts = 1;
    g = good, g.local = bad_mb;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    bad_mb[1].nparts = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    in_start = 0;

    /* Missing links: right neighbour, then left neighbour. */
    static const uint32_t ring3[3] = {101, 100, 102};
    net->links[1][0].up = 0;
    in_start = 1;
    g = good;
    ck_assert_int_eq(pr_engine_start(e1, &g), -ENOTCONN);
    in_start = 0;
    net->links[1][0].up = 1;
    net->links[1][2].up = 0;
    in_start = 1;
    g = good, g.ring = ring3, g.m = 3, g.id = 7;
    ck_assert_int_eq(pr_engine_start(e1, &g), -ENOTCONN);
    in_start = 0;
    net->links[1][2].up = 1;
    ck_assert_uint_eq(pr_engine_running(e1), 0);

    /* None of them counts as started: an early chunk for 7 is kept. */
    float data[4] = {0};
    struct pr_chunk_hdr h = {.group_id = 7, .total = 10, .nfloats = 4};
    pr_engine_on_chunk(e1, 102, &h, data);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);

    /* The real group, then a duplicate of it. */
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    in_start = 1;
    g = good;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EEXIST);
    in_start = 0;
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    net_free(net);
    ck_assert_int_eq(never.calls, 0);
    tg_check_done(tg, 0);
    tg_free(tg);
}
END_TEST

static Suite *engine_fail_suite(void)
{
    Suite *s = suite_create("engine_fail");

    TCase *tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_send_fails_sync);
    tcase_add_test(tc, test_engine_send_fails_async);
    tcase_add_test(tc, test_engine_link_down_mid_group);
    tcase_add_test(tc, test_engine_deadline);
    tcase_add_test(tc, test_engine_abort);
    tcase_add_test(tc, test_engine_destroy_cancels_running);
    tcase_add_test(tc, test_engine_destroy_with_sends_posted);
    tcase_add_test(tc, test_engine_destroy_reports_finished_group);
    tcase_add_loop_test(tc, test_engine_detached_member_not_written, 0, 4);
    tcase_add_loop_test(tc, test_engine_no_write_after_deadline, 0, 2);
    tcase_add_test(tc, test_engine_no_write_back_without_time);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_chunks");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_bad_chunk, 0, NBAD);
    tcase_add_loop_test(tc, test_engine_corrupt_header, 0, NCORRUPT);
    tcase_add_loop_test(tc, test_engine_stray_chunk_dropped, 0,
                        (int)(sizeof(stray_from) / sizeof(stray_from[0])));
    tcase_add_test(tc, test_engine_scattered_chunks_fail);
    suite_add_tcase(s, tc);

    tc = tcase_create("start");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_start_invalid_args);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_fail_suite());
}
