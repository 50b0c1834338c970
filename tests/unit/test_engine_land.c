/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for chunks that land in place (daemon/engine/engine.c:
 * reserve() and land_cb(); struct pr_landing in xport.h): a transport
 * that can (TCP) asks the engine where a chunk's payload goes, reads it
 * straight there and then says it has landed, or that its link closed
 * first. The fixture's links do the same when told to (memlink.land,
 * engine_fixture.h).
 *
 * What must hold: the results are the on_chunk path's, bit for bit; a
 * landing that ends with an error fails its group with that error, and
 * the group is still freed; reserve() says 0 (and the chunk then comes by
 * on_chunk, stashed, failed or dropped there) for a chunk it cannot place:
 * an unknown or early group, floats that came already, a group past its
 * deadline, a node other than the left neighbour; a group's vector stays
 * until its last landing ended, even past pr_engine_destroy(), and a large
 * group's vector is kept for the next one past smaller groups.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "daemon/base/log.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/xport.h"
#include "tests/unit/engine_fixture.h"
#include "tests/check_run.h"

/* A ring, its group, and how its chunks travel. */
struct land_case {
    uint32_t m;
    size_t total, chunk;
    enum tg_weights weights;
    int in_place;  /* each position's lone member asks for it */
    int shuffle;   /* reordered delivery */
    int staggered; /* started last first: early chunks, stashed */
    int heal;      /* position 0's members weigh 0 and hold NaN */
};

/* What one run left: every member's vector and the links' counts. */
struct land_run {
    float *res; /* [position][member][total] */
    size_t delivered, reserved, refused, refused_floats, stashed;
};

static size_t members(const struct land_case *rc, uint32_t p, uint64_t seed)
{
    return rc->in_place || rc->heal ? 1 : 1 + (p + seed) % MAXMB;
}

static float *member_res(const struct land_case *rc, float *res, uint32_t p,
                         size_t i)
{
    return res + (p * MAXMB + i) * rc->total;
}

/* Runs the case to success over landing links or not, checked, kept. */
static struct land_run run_case(const struct land_case *rc, uint64_t seed,
                                int land)
{
    size_t nlocal[MAXN] = {0};
    for (uint32_t p = 0; p < rc->m; p++)
        nlocal[p] = members(rc, p, seed);
    enum tg_weights w = rc->heal ? TG_WEIGHTED : rc->weights;
    struct tgroup *tg =
        tg_new(7, rc->total, rc->m, rings[rc->m], nlocal, w, seed);
    for (uint32_t p = 0; p < rc->m; p++)
        tg_set_in_place(tg, p, rc->in_place);
    if (rc->heal) {
        struct tmember *h = &tg->mb[0][0];
        tg->spec[0][0].weight = 0;
        for (size_t q = 0; q < h->nparts; q++)
            for (size_t j = 0; j < h->parts[q].len; j++)
                h->part[q][j] = NAN;
    }
    direct_sends = rc->in_place;
    struct net *net = net_new((int)rc->m, rc->chunk);
    direct_sends = 0;
    net->shuffle = rc->shuffle;
    net_land_all(net, land);
    for (uint32_t i = 0; i < rc->m; i++) {
        uint32_t p = rc->staggered ? rc->m - 1 - i : i;
        ck_assert_int_eq(tg_start(net, tg, p), 0);
        if (rc->staggered)
            run_quiet(net);
    }
    run_until(net, tg_all_done, tg);
    if (w == TG_PERSONAL)
        tg_check_personal(tg);
    else
        tg_check_mean(tg);
    struct land_run run = {0};
    run.res = malloc(rc->m * MAXMB * rc->total * sizeof(float));
    ck_assert_ptr_nonnull(run.res);
    for (uint32_t p = 0; p < rc->m; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.groups_ok, 1);
        ck_assert_uint_eq(st.chunks_dropped, 0);
        run.stashed += st.chunks_stashed;
        for (size_t i = 0; i < nlocal[p]; i++)
            tg_result(&tg->mb[p][i], member_res(rc, run.res, p, i));
    }
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            run.delivered += net->links[a][b].delivered;
    run.reserved = net_reserved(net);
    run.refused = net_refused(net);
    run.refused_floats = net_refused_floats(net);
    net_free(net);
    tg_check_done(tg, 0);
    tg_free(tg);
    return run;
}

/*
 * The same seed by on_chunk and by landing: the same floats, bit for bit;
 * every chunk went one way or the other, and every float landed but those
 * of chunks that came before their group.
 */
static void check_same(const struct land_case *rc, uint64_t seed)
{
    struct land_run a = run_case(rc, seed, 0);
    struct land_run b = run_case(rc, seed, 1);
    for (uint32_t p = 0; p < rc->m; p++)
        for (size_t i = 0; i < members(rc, p, seed); i++)
            ck_assert_msg(
                memcmp(member_res(rc, a.res, p, i), member_res(rc, b.res, p, i),
                       rc->total * sizeof(float)) == 0,
                "m %u total %zu chunk %zu seed %llu: pos %u member "
                "%zu differs from the on_chunk path",
                rc->m, rc->total, rc->chunk, (unsigned long long)seed, p, i);
    ck_assert_uint_eq(a.reserved + a.refused, 0);
    ck_assert_uint_eq(b.delivered, a.delivered);
    ck_assert_uint_eq(b.reserved + b.refused, b.delivered);
    ck_assert_uint_gt(b.reserved, 0);
    ck_assert_uint_eq(b.stashed, a.stashed);
    /* Refused: the early chunks (stashed) and the empty ones. */
    ck_assert_uint_ge(b.refused, b.stashed);
    if (!rc->staggered)
        ck_assert_uint_eq(b.refused_floats, 0);
    free(a.res);
    free(b.res);
}

/* ------------------------------------------------------------------ */
/* The same results as on_chunk                                         */

START_TEST(test_engine_land_same_as_on_chunk)
{
    static const uint32_t ms[] = {2, 3, 4};
    /* 1 float, fewer than the nodes, odd lengths, uneven segments. */
    static const size_t totals[] = {1, 3, 7, 1001, 4099};
    static const size_t chunks[] = {1, 5, 64, 1u << 20};
    uint64_t seed = 900;
    for (size_t a = 0; a < 3; a++) {
        for (size_t b = 0; b < 5; b++) {
            for (size_t c = 0; c < 4; c++, seed++) {
                struct land_case rc = {
                    .m = ms[a],
                    .total = totals[b],
                    .chunk = chunks[c],
                    .weights = (enum tg_weights)(seed % 3),
                    .in_place = seed % 4 == 1,
                    .shuffle = seed % 3 == 2,
                    .staggered = seed % 5 == 0,
                };
                check_same(&rc, seed);
            }
        }
    }
}
END_TEST

START_TEST(test_engine_land_same_variants)
{
    static const struct land_case cases[] = {
        /* Every mode on one ring size each: in place lands final floats. */
        {.m = 2, .total = 1000, .chunk = 64, .in_place = 1},
        {.m = 3, .total = 1000, .chunk = 7, .in_place = 1, .shuffle = 1},
        {.m = 4, .total = 999, .chunk = 16, .in_place = 1, .staggered = 1},
        {.m = 3, .total = 1001, .chunk = 64, .weights = TG_PERSONAL},
        {.m = 4, .total = 1001, .chunk = 3, .weights = TG_WEIGHTED},
        /* A healing member (weight 0): its NaN floats must not be read. */
        {.m = 2, .total = 10, .chunk = 3, .heal = 1},
        {.m = 3, .total = 1000, .chunk = 64, .heal = 1},
        {.m = 4, .total = 4099, .chunk = 100, .heal = 1, .shuffle = 1},
        /* Large: the pool's slices, when there is a pool, land too. */
        {.m = 3, .total = 1000003, .chunk = 4096},
        {.m = 2, .total = 1000003, .chunk = 65536, .in_place = 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_same(&cases[i], 950 + i);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Landings that fail                                                   */

/* Scratch vectors of one engine, counted (pr_engine_set_allocator). */
struct counting {
    size_t allocs, releases;
};

static void *count_alloc(void *ctx, size_t bytes)
{
    ((struct counting *)ctx)->allocs++;
    return malloc(bytes);
}

static void count_release(void *ctx, void *p)
{
    ((struct counting *)ctx)->releases++;
    free(p);
}

static void count_scratch(struct net *net, int idx, struct counting *ct)
{
    pr_engine_set_allocator(E(net, idx), count_alloc, count_release, ct);
}

/*
 * How a landing on link 0 -> 1 fails, and which one (0: the first; 6 a
 * step: 333 or 334 floats in chunks of 64). Past the reduce-scatter
 * (from landing 12 on) the other nodes have all they need and succeed.
 */
static const struct {
    int status;
    size_t at;
    int others_ok;
} aborts[] = {
    {-ECONNRESET, 0, 0},
    {-EPIPE, 3, 0},
    {-ECANCELED, 7, 0},
    {-EIO, 20, 1},
};

/*
 * Ring 0, 1, 2: node 1's landing number `at` from node 0 ends with an
 * error (the link closed inside the chunk, half of it in). Node 1's group
 * fails with that error and is freed: the next group of its size gets its
 * vector back (no new allocation), and the engine works on.
 */
START_TEST(test_engine_land_aborted_fails_group)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {1, 2, 1};
    int status = aborts[_i].status;
    struct counting ct = {0};
    struct net *net = net_new(3, 64);
    count_scratch(net, 1, &ct);
    net_land_all(net, 1);
    net->links[0][1].land_fail = status;
    net->links[0][1].land_fail_at = aborts[_i].at;
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 70 + _i);
    tg_start_all(net, tg);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, status);
    ck_assert_uint_eq(net->links[0][1].landed, aborts[_i].at + 1);
    ck_assert_uint_eq(stats(net, 1).groups_failed, 1);
    tg_check_unchanged(tg, 1);
    /* The transport tells both ends that the link is gone. */
    run_quiet(net);
    pr_engine_link_down(E(net, 0), 101, status);
    pr_engine_link_down(E(net, 2), 101, status);
    run_until(net, tg_all_done, tg);
    for (uint32_t p = 0; p < 3; p += 2) {
        ck_assert_int_eq(tg->done[p].calls, 1);
        if (aborts[_i].others_ok) {
            ck_assert_int_eq(tg->done[p].status, 0);
            tg_check_mean_at(tg, p);
        } else {
            ck_assert_int_eq(tg->done[p].status, status);
            tg_check_unchanged(tg, p);
        }
    }
    ck_assert_uint_eq(ct.allocs, 1);

    /* A new group of the same length, landing without error. */
    net->links[0][1].land_fail_at = SIZE_MAX;
    struct tgroup *tg2 = tg_new(2, 1000, 3, ring, nlocal, 0, 80 + _i);
    tg_start_all(net, tg2);
    run_until(net, tg_all_done, tg2);
    tg_check_mean(tg2);
    ck_assert_uint_eq(ct.allocs, 1); /* the failed group's vector, freed */
    net_free(net);
    ck_assert_uint_eq(ct.releases, ct.allocs);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
    tg_free(tg2);
}
END_TEST

/*
 * Jobs of different sizes on one engine: the vector of a large group
 * that ended stays the spare while small groups start and end (each of
 * those gets its own), so the next large group gets it back, and does
 * not map and fault a fresh vector.
 */
START_TEST(test_engine_scratch_kept_past_small_groups)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 1};
    struct counting ct = {0};
    struct net *net = net_new(2, 64);
    count_scratch(net, 1, &ct);
    net_land_all(net, _i);
    static const size_t sizes[] = {20000, 100, 20000, 50, 100, 20000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct tgroup *tg =
            tg_new(1 + i, sizes[i], 2, ring, nlocal, 0, 300 + (uint64_t)i);
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_done(tg, 0);
        tg_check_mean(tg);
        run_turns(net);
        tg_free(tg);
    }
    /* One large vector; each small group's, freed at its end. */
    ck_assert_uint_eq(ct.allocs, 4);
    ck_assert_uint_eq(ct.releases, 3);
    net_free(net);
    ck_assert_uint_eq(ct.releases, ct.allocs);
}
END_TEST

/*
 * A landing is still out (its transport reads into the group's vector)
 * when the group ends: aborted first or not, and then the engine is
 * destroyed. done() runs once and does not wait for the landing; the
 * vector stays until the landing ends (status 0 or < 0, before or after
 * the engine's handles closed), and then it and the engine are freed.
 */
START_TEST(test_engine_land_out_at_destroy)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 1};
    int status = _i & 1 ? -ECANCELED : 0;
    int after_close = _i & 2;
    int abort_first = _i & 4;
    struct counting ct = {0};
    struct net *net = net_new(2, 64);
    count_scratch(net, 1, &ct);
    net_land_all(net, 1);
    net->links[0][1].land_hold = 1;
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 90 + _i);
    tg_start_all(net, tg);
    run_quiet(net);
    /*
     * Held mid-landing: node 0's segment (500 floats, 8 chunks) and the
     * 8 of node 1's that node 0 completed and sent back.
     */
    ck_assert_uint_eq(net->links[0][1].nheld, 16);
    if (abort_first) {
        ck_assert_int_eq(pr_engine_abort(E(net, 1), 1, -EINTR), 0);
        run_until(net, pos_done, &tg->done[1]);
        ck_assert_int_eq(tg->done[1].status, -EINTR);
    }
    destroy_node(net, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    ck_assert_int_eq(tg->done[1].status, abort_first ? -EINTR : -ECANCELED);
    if (after_close)
        run_turns(net);
    ck_assert_uint_eq(ct.releases, 0); /* still the landings' */
    ck_assert_uint_eq(link_land_release(net, 0, 1, status), 16);
    ck_assert_uint_eq(ct.releases, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    pr_engine_link_down(E(net, 0), 101, -ECONNRESET);
    run_until(net, pos_done, &tg->done[0]);
    ck_assert_int_eq(tg->done[0].status, -ECONNRESET);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_uint_eq(ct.allocs, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

/*
 * A landing granted before the deadline that ends after it: the group
 * fails with -ETIMEDOUT, its tensors untouched, and is freed.
 */
START_TEST(test_engine_land_ends_past_deadline)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {2, 1};
    struct counting ct = {0};
    struct net *net = net_new(2, 64);
    count_scratch(net, 1, &ct);
    net_land_all(net, 1);
    net->links[0][1].land_hold = 1;
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 100);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 30), 0);
    run_quiet(net);
    ck_assert_uint_gt(net->links[0][1].nheld, 0);
    struct timespec ts = {0, 60 * 1000000};
    nanosleep(&ts, NULL);
    /* From the caller's stack: the sweep has not run yet. */
    link_land_release(net, 0, 1, 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ETIMEDOUT);
    tg_check_unchanged(tg, 1);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 1, -ECANCELED), 0);
    run_until(net, tg_all_done, tg);
    destroy_node(net, 1);
    ck_assert_uint_eq(ct.releases, ct.allocs);
    net_free(net);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* What reserve() refuses                                               */

/* Node 1's engine's reserve(): 1 or 0, *ld filled on 1. */
static int reserve(struct net *net, uint32_t from, struct pr_chunk_hdr h,
                   struct pr_landing *ld)
{
    struct pr_link_sink sink = pr_engine_sink(E(net, 1));
    memset(ld, 0, sizeof(*ld));
    int rc = sink.reserve(sink.ctx, from, &h, ld);
    ck_assert_int_ge(rc, 0);
    ck_assert_int_le(rc, 1);
    if (rc == 1)
        ck_assert(ld->dst && ld->land);
    return rc;
}

/* Ends a granted landing with status (the floats first on 0). */
static void land(struct pr_landing *ld, uint32_t from, struct pr_chunk_hdr h,
                 const float *data, int status)
{
    if (status == 0)
        memcpy(ld->dst, data, h.nfloats * sizeof(float));
    ld->land(ld, from, &h, status);
}

/*
 * Ring 0, 1, 2 of 12 floats with only node 1 started (its sends go
 * nowhere): at step 0 it takes segment 0, floats [0, 4), from node 0 (100).
 */
static struct net *lone_node1(struct tgroup **tg, uint32_t timeout_ms,
                              uint64_t seed)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {0, 2, 0};
    struct net *net = net_new(3, 64);
    *tg = tg_new(1, 12, 3, ring, nlocal, 0, seed);
    net->links[1][2].drop = 1;
    ck_assert_int_eq(tg_start_timeout(net, *tg, 1, timeout_ms), 0);
    run_quiet(net);
    return net;
}

/* Unknown groups, empty chunks and other nodes than the left one. */
START_TEST(test_engine_land_refuses_unplaceable)
{
    struct tgroup *tg;
    struct net *net = lone_node1(&tg, 2000, 110);
    static const float data[4] = {1, 1, 1, 1};
    struct pr_landing ld;
    /* A group that has not started here: 0, and on_chunk stashes it. */
    struct pr_chunk_hdr early = {2, 12, 0, 4, 0, 0, 0};
    ck_assert_int_eq(reserve(net, 100, early, &ld), 0);
    pr_engine_on_chunk(E(net, 1), 100, &early, data);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    /* Not the left neighbour: the right one, or a node not in the ring. */
    struct pr_chunk_hdr h = {1, 12, 0, 4, 0, 0, 0};
    ck_assert_int_eq(reserve(net, 102, h, &ld), 0);
    ck_assert_int_eq(reserve(net, 7, h, &ld), 0);
    /* An empty chunk has nothing to land (on_chunk judges it). */
    struct pr_chunk_hdr empty = {1, 12, 0, 0, 0, 0, 0};
    ck_assert_int_eq(reserve(net, 100, empty, &ld), 0);
    /* None of them claimed a float or failed the group. */
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    ck_assert_int_eq(reserve(net, 100, h, &ld), 1);
    land(&ld, 100, h, data, 0);
    run_quiet(net);
    ck_assert_int_eq(tg->done[1].calls, 0);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 1, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    /* A group that has ended: 0. */
    struct pr_chunk_hdr later = {1, 12, 8, 4, 1, 2, 0};
    ck_assert_int_eq(reserve(net, 100, later, &ld), 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * Floats that came already, whole (a repeat) or in part (an overlap,
 * here while the first chunk is still landing): 0, before a byte lands,
 * and the group fails with -EPROTO; the first landing ends later all the
 * same, and the group goes only then.
 */
START_TEST(test_engine_land_refuses_repeat)
{
    static const float data[4] = {1, 2, 3, 4};
    struct tgroup *tg;
    struct net *net = lone_node1(&tg, 2000, 120 + _i);
    struct pr_landing ld, ld2;
    struct pr_chunk_hdr h = {1, 12, 0, _i ? 2 : 4, 0, 0, 0};
    ck_assert_int_eq(reserve(net, 100, h, &ld), 1);
    if (!_i)
        land(&ld, 100, h, data, 0); /* landed: the repeat comes after */
    struct pr_chunk_hdr again =
        _i ? (struct pr_chunk_hdr){1, 12, 1, 3, 0, 0, 0} : h;
    ck_assert_int_eq(reserve(net, 100, again, &ld2), 0);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPROTO);
    if (_i)
        land(&ld, 100, h, data, 0); /* into a failed group: nothing */
    run_quiet(net);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/* Past the deadline: 0, and on_chunk fails the group (-ETIMEDOUT). */
START_TEST(test_engine_land_refuses_past_deadline)
{
    struct tgroup *tg;
    struct net *net = lone_node1(&tg, 30, 130);
    static const float data[4] = {1, 1, 1, 1};
    struct timespec ts = {0, 60 * 1000000};
    nanosleep(&ts, NULL);
    struct pr_landing ld;
    struct pr_chunk_hdr h = {1, 12, 0, 4, 0, 0, 0};
    ck_assert_int_eq(reserve(net, 100, h, &ld), 0);
    ck_assert_int_eq(tg->done[1].calls, 0);
    pr_engine_on_chunk(E(net, 1), 100, &h, data);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ETIMEDOUT);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * Over the links: a group that starts late gets its early chunks by
 * on_chunk (reserve() said 0, they were stashed and replayed), and the
 * rest by landing.
 */
START_TEST(test_engine_land_early_chunks_stashed)
{
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {2, 1};
    struct net *net = net_new(2, 64);
    net_land_all(net, 1);
    struct tgroup *tg = tg_new(3, 1000, 2, ring, nlocal, 0, 140);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_quiet(net);
    /* Node 0's segment, 500 floats in 8 chunks, all early at node 1. */
    ck_assert_uint_eq(net->links[0][1].refused, 8);
    ck_assert_uint_eq(net->links[0][1].reserved, 0);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 8);
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    /* The all-gather's 8 chunks landed at node 1, both steps at node 0. */
    ck_assert_uint_eq(net->links[0][1].reserved, 8);
    ck_assert_uint_eq(net->links[0][1].refused, 8);
    ck_assert_uint_eq(net->links[1][0].reserved, 16);
    ck_assert_uint_eq(net->links[1][0].refused, 0);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

/*
 * Over the links: node 0's chunk to node 1 says it is from node 2 (the
 * right neighbour): reserve() says 0 and on_chunk drops it, counted; the
 * group waits for the real one (its control plane aborts it here).
 */
START_TEST(test_engine_land_refuses_stray)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {1, 1, 1};
    struct net *net = net_new(3, 64);
    net_land_all(net, 1);
    net->links[0][1].corrupt = F_FROM;
    net->links[0][1].corrupt_value = 102;
    net->links[0][1].corrupt_at = 0;
    struct tgroup *tg = tg_new(1, 300, 3, ring, nlocal, 0, 150);
    tg_start_all(net, tg);
    run_quiet(net);
    ck_assert_uint_eq(net->links[0][1].refused, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 1);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    for (int i = 0; i < 3; i++)
        pr_engine_abort(E(net, i), 1, -ECANCELED);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -ECANCELED);
    net_free(net);
    tg_free(tg);
}
END_TEST

static Suite *engine_land_suite(void)
{
    Suite *s = suite_create("engine_land");

    TCase *tc = tcase_create("same");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_land_same_as_on_chunk);
    tcase_add_test(tc, test_engine_land_same_variants);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_land_aborted_fails_group, 0,
                        (int)(sizeof(aborts) / sizeof(aborts[0])));
    tcase_add_loop_test(tc, test_engine_land_out_at_destroy, 0, 8);
    tcase_add_loop_test(tc, test_engine_scratch_kept_past_small_groups, 0, 2);
    tcase_add_test(tc, test_engine_land_ends_past_deadline);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_land_refuses_unplaceable);
    tcase_add_loop_test(tc, test_engine_land_refuses_repeat, 0, 2);
    tcase_add_test(tc, test_engine_land_refuses_past_deadline);
    tcase_add_test(tc, test_engine_land_early_chunks_stashed);
    tcase_add_test(tc, test_engine_land_refuses_stray);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    return check_run(engine_land_suite());
}
