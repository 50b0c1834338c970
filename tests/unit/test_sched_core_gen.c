/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the scheduler core's group generator
 * (daemon/sched/core/sched_core.h): steering groups so that every window of
 * member-updates connects the workers, and a 1024-worker run with churn. The
 * fixture is sched_fixture.h.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"
#include "tests/unit/sched_fixture.h"
#include "tests/check_run.h"

/* ---- group generator -------------------------------------------------- */

static int mixed(const struct pr_sched_group *g)
{
    int lo = 0, hi = 0;

    for (uint32_t i = 0; i < g->n; i++) {
        if (g->members[i].rank < 4) {
            lo = 1;
        } else {
            hi = 1;
        }
    }
    return lo && hi;
}

struct drive {
    struct pr_sched_core *c;
    int queued[8];
    uint64_t groups;
    uint64_t first_mixed; /* group id, 0 if none */
    uint32_t first_mixed_ranks[8];
    uint32_t min_components;
};

static void drain(struct drive *d, uint64_t now)
{
    struct pr_sched_group g;
    int rc;

    while ((rc = pr_sched_core_next_group(d->c, now, &g)) == 1) {
        d->groups++;
        if (mixed(&g) && d->first_mixed == 0) {
            d->first_mixed = g.id;
            for (uint32_t i = 0; i < g.n; i++) {
                d->first_mixed_ranks[i] = g.members[i].rank;
            }
        }
        for (uint32_t i = 0; i < g.n; i++) {
            d->queued[g.members[i].rank] = 0;
        }
        pr_sched_group_fini(&g);
    }
    ck_assert_int_eq(rc, 0);
    uint32_t comps = pr_sched_core_components(d->c);
    if (comps < d->min_components) {
        d->min_components = comps;
    }
}

/*
 * One round: workers 0-3 are ready first (all at time t), then 4-7 at
 * t + 10. Without steering the groups are always {0..3} and {4..7}.
 */
static void round_8(struct drive *d, uint64_t t)
{
    for (uint32_t r = 0; r < 8; r++) {
        uint64_t now = r < 4 ? t : t + 10;

        if (d->queued[r]) {
            continue;
        }
        ck_assert_int_eq(pr_sched_core_ready(d->c, r, 1, 100 + r, now), 0);
        d->queued[r] = 1;
        drain(d, now);
    }
}

START_TEST(test_sched_core_generator_off_isolates)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.isolation_bound = 0;
    struct drive d = {.c = sf_make(&p, 8), .min_components = 8};
    struct pr_sched_stats st;

    for (int i = 0; i < 100; i++) {
        round_8(&d, (uint64_t)i * 1000);
    }
    ck_assert_uint_eq(d.groups, 200);
    ck_assert_uint_eq(d.first_mixed, 0);
    ck_assert_uint_eq(d.min_components, 2);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.groups, 200);
    ck_assert_uint_eq(st.members, 800);
    /* Windows of 10 x 8 member-updates, none connected. */
    ck_assert_uint_eq(st.windows_checked, 10);
    ck_assert_uint_eq(st.windows_connected, 0);
    ck_assert_uint_eq(st.generator_forced, 0);
    ck_assert_uint_eq(st.generator_held, 0);
    pr_sched_core_destroy(d.c);
}
END_TEST

START_TEST(test_sched_core_generator_connects)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.isolation_bound = 2;
    struct drive d = {.c = sf_make(&p, 8), .min_components = 8};
    struct pr_sched_stats st;

    /* Rounds 1-2: four isolated groups reach B x live = 16 updates. */
    round_8(&d, 0);
    round_8(&d, 1000);
    ck_assert_uint_eq(d.groups, 4);
    ck_assert_uint_eq(d.first_mixed, 0);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 2);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);

    /*
     * Round 3: 0-3 alone would connect nothing: held until 4-7 are
     * expected, 1.5 x their 1 ms interval after their group at 1010 us,
     * which the 1 ms floor raises to 3000 us.
     */
    for (uint32_t r = 0; r < 4; r++) {
        ck_assert_int_eq(pr_sched_core_ready(d.c, r, 1, 100 + r, 2000), 0);
        d.queued[r] = 1;
        drain(&d, 2000);
    }
    ck_assert_uint_eq(d.groups, 4);
    ck_assert_int_eq(pr_sched_core_deadline_us(d.c), 2000 + 1000);
    /* Worker 4 joins the oldest of the other half. */
    ck_assert_int_eq(pr_sched_core_ready(d.c, 4, 1, 104, 2010), 0);
    d.queued[4] = 1;
    drain(&d, 2010);
    ck_assert_uint_eq(d.first_mixed, 5);
    ck_assert_uint_eq(d.first_mixed_ranks[0], 0);
    ck_assert_uint_eq(d.first_mixed_ranks[1], 4);
    ck_assert_uint_eq(d.first_mixed_ranks[2], 1);
    ck_assert_uint_eq(d.first_mixed_ranks[3], 2);
    ck_assert_uint_eq(d.min_components, 2);

    /* That union connected all 8: the window ended and reset. */
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.windows_checked, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_uint_eq(st.windows_unaided, 0);
    ck_assert_uint_eq(st.generator_forced, 1);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_eq(st.window_extra_updates, 4);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 0);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 8);

    /* Every later window connects too. */
    for (int i = 3; i < 100; i++) {
        round_8(&d, (uint64_t)i * 1000000);
    }
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_ge(st.windows_checked, 20);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    pr_sched_core_destroy(d.c);
}
END_TEST

static const struct sf_case generator_cases[] = {
    {
        .name = "hold_expires",
        .policy = PR_POLICY_CONSTANT,
        .isolation_bound = 1,
        .gen_hold_ms = 5.0,
        .workers = 8,
        .steps =
            (const struct sf_step[]){
                SF_READY_ALL(0, 8, 1, 0),
                SF_GROUP(0, 0, 1, 2, 3),
                SF_GROUP(0, 4, 5, 6, 7),
                SF_STEERING(1),
                SF_READY_ALL(0, 4, 2, 1000),
                SF_NONE(1000),
                SF_DEADLINE(6000),
                SF_NONE(5999),
                SF_GROUP(6000, 0, 1, 2, 3),
                SF_STAT(generator_held, 1),
                SF_STAT(generator_expired, 1),
                SF_STAT(generator_forced, 1),
                SF_STEERING(1),
                SF_DEADLINE(-1),
                /*
                 * The hold waited for 4-7 and they missed it: they are late,
                 * and no group waits for them until one of them is ready
                 * again.
                 */
                SF_READY_ALL(0, 4, 3, 7000),
                SF_GROUP(7000, 0, 1, 2, 3),
                SF_STAT(generator_held, 1),
                SF_STAT(generator_forced, 2),
                /* 4 is ready again; steering picks across components: 0, 4,
                   1, 2. */
                SF_READY_ALL(0, 5, 4, 8000),
                SF_GROUP(8000, 0, 4, 1, 2),
                SF_STEERING(0),
                SF_STAT(windows_connected, 1), /* the window ended connected */
                SF_END,
            },
    },
    {
        /*
         * Dynamic: adaptive hold. It runs 1 ms first; when nobody came by
         * then it extends to the bound: 2 and 3 have no interval yet, so
         * they are waited for up to gen_hold_max_ms (5 s) after their
         * group. Steering skips 1.
         */
        .name = "dynamic",
        .policy = PR_POLICY_DYNAMIC,
        .group_max = 2,
        .window_max_ms = 2.0,
        .window_ms = 1.0,
        .isolation_bound = 1,
        .workers = 4,
        .steps =
            (const struct sf_step[]){
                SF_READY_ALL(0, 4, 1, 0),
                SF_GROUP(0, 0, 1),
                SF_GROUP(0, 2, 3),
                SF_STEERING(1),
                SF_READY(0, 2, 100),
                SF_READY(1, 2, 100),
                SF_NONE(100),
                SF_DEADLINE(1100),
                SF_NONE(1100),
                SF_DEADLINE(5000000),
                SF_READY(3, 2, 2000),
                SF_GROUP(2000, 0, 3),
                SF_STEERING(0),
                SF_STAT(windows_connected, 1),
                SF_STAT(generator_forced, 1),
                /* Worker 1 is still queued: a new group, opened at its ready
                   time. */
                SF_QUEUED(1),
                SF_END,
            },
    },
    {
        /* A removed worker no longer counts toward connectivity. */
        .name = "remove",
        .policy = PR_POLICY_CONSTANT,
        .group_size = 2,
        .isolation_bound = 1,
        .workers = 3,
        .steps =
            (const struct sf_step[]){
                /* {0,1} twice: 4 >= 1 x 3 updates, and worker 2 is apart. */
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 0),
                SF_GROUP(0, 0, 1),
                SF_READY(0, 1, 0),
                SF_READY(1, 1, 0),
                SF_GROUP(0, 0, 1),
                SF_COMPONENTS(2),
                SF_STEERING(1),
                SF_REMOVE(2, 1),
                SF_STEERING(0),
                SF_STAT(windows_checked, 1),
                SF_STAT(windows_connected, 1),
                SF_END,
            },
    },
};

START_TEST(test_sched_core_generator_case)
{
    sf_run(&generator_cases[_i]);
}
END_TEST

/*
 * Components against a reference: labels relabelled on every group, and
 * a removed worker's label dropped (its component survives in the others).
 */
START_TEST(test_sched_core_generator_components)
{
    enum { N = 16 };
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    p.group_size = 3;
    p.stats_bound = 1000000; /* no window ends during the test */
    struct pr_sched_core *c = sf_make(&p, N);
    uint32_t label[N];
    int live[N], queued[N];
    uint64_t x = 0x9e3779b97f4a7c15ull;

    for (uint32_t r = 0; r < N; r++) {
        label[r] = r;
        live[r] = 1;
        queued[r] = 0;
    }
    for (int step = 0; step < 4000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33) % N;
        int op = (int)((x >> 20) % 16);

        if (op == 0 && live[r]) {
            ck_assert_int_eq(pr_sched_core_remove_worker(c, r, 0), 0);
            live[r] = 0;
            queued[r] = 0;
        } else if (op == 1 && !live[r]) {
            ck_assert_int_eq(pr_sched_core_add_worker(c, r, 0, 0), 0);
            live[r] = 1;
            label[r] = 1000 + (uint32_t)step; /* a fresh component */
        } else if (live[r] && !queued[r]) {
            ck_assert_int_eq(pr_sched_core_ready(c, r, 0, 0, 0), 0);
            queued[r] = 1;
        }
        struct pr_sched_group g;
        int rc;
        while ((rc = pr_sched_core_next_group(c, 0, &g)) == 1) {
            uint32_t to = label[g.members[0].rank];
            for (uint32_t i = 1; i < g.n; i++) {
                uint32_t from = label[g.members[i].rank];
                for (uint32_t k = 0; k < N; k++) {
                    if (label[k] == from) {
                        label[k] = to;
                    }
                }
            }
            for (uint32_t i = 0; i < g.n; i++) {
                queued[g.members[i].rank] = 0;
            }
            pr_sched_group_fini(&g);
        }
        ck_assert_int_eq(rc, 0);
        uint32_t distinct = 0;
        for (uint32_t k = 0; k < N; k++) {
            int first = live[k];
            for (uint32_t j = 0; j < k && first; j++) {
                if (live[j] && label[j] == label[k]) {
                    first = 0;
                }
            }
            distinct += (uint32_t)first;
        }
        ck_assert_uint_eq(pr_sched_core_components(c), distinct);
    }
    pr_sched_core_destroy(c);
}
END_TEST

START_TEST(test_sched_core_generator_allreduce_off)
{
    struct pr_sched_params p = sf_params(PR_POLICY_ALLREDUCE);
    p.isolation_bound = 1;
    struct pr_sched_core *c = sf_make(&p, 4);
    struct pr_sched_stats st;

    for (int i = 0; i < 8; i++) {
        sf_ready_all(c, 0, 4, 1, 0);
        sf_expect_group(c, 0, (const uint32_t[]){0, 1, 2, 3}, 4, NULL);
        ck_assert_int_eq(pr_sched_core_steering(c), 0);
    }
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.windows_checked, 8);
    ck_assert_uint_eq(st.windows_unaided, 8);
    ck_assert_uint_eq(st.generator_forced, 0);
    pr_sched_core_destroy(c);
}
END_TEST

/* ---- scale ------------------------------------------------------------ */

/*
 * 1024 workers, random arrivals with the fast half twice as likely,
 * plus churn (remove and re-add). Every call must succeed, the counts must
 * stay consistent, and with the generator every window must connect.
 */
static void run_scale(struct pr_sched_params *p, uint32_t members_each)
{
    enum { N = 1024, EVENTS = 300000 };
    struct pr_sched_core *c = sf_make(p, N);
    static uint8_t queued[N];
    uint64_t x = 12345;
    uint64_t now = 0, groups = 0, members = 0;
    uint32_t nqueued = 0;
    struct pr_sched_stats st;

    memset(queued, 0, sizeof(queued));
    for (int e = 0; e < EVENTS; e++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(x >> 33) % (N + N / 2);
        r = r >= N ? r - N : r; /* ranks < 512 are drawn twice as often */
        now += 1 + (x >> 60);

        if (e % 5000 == 4999) {
            ck_assert_int_eq(pr_sched_core_remove_worker(c, r, now), 0);
            nqueued -= queued[r];
            queued[r] = 0;
            ck_assert_int_eq(pr_sched_core_add_worker(c, r, 0, now), 0);
        } else if (!queued[r]) {
            ck_assert_int_eq(pr_sched_core_ready(c, r, (uint64_t)e, 7, now), 0);
            queued[r] = 1;
            nqueued++;
        }
        int64_t dl = pr_sched_core_deadline_us(c);
        if (dl >= 0 && (uint64_t)dl > now && e % 64 == 0) {
            now = (uint64_t)dl; /* let windows and holds expire */
        }
        struct pr_sched_group g;
        int rc;
        while ((rc = pr_sched_core_next_group(c, now, &g)) == 1) {
            ck_assert_uint_ge(g.n, 1);
            if (members_each > 0) {
                ck_assert_uint_eq(g.n, members_each);
            }
            double sum = 0.0;
            for (uint32_t i = 0; i < g.n; i++) {
                ck_assert(queued[g.members[i].rank]);
                queued[g.members[i].rank] = 0;
                sum += g.members[i].weight;
            }
            ck_assert_double_eq_tol(sum, 1.0, 1e-12);
            nqueued -= g.n;
            groups++;
            members += g.n;
            pr_sched_group_fini(&g);
        }
        ck_assert_int_eq(rc, 0);
        ck_assert_uint_eq(pr_sched_core_queued(c), nqueued);
    }
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.groups, groups);
    ck_assert_uint_eq(st.members, members);
    ck_assert_uint_gt(groups, 1000);
    ck_assert_uint_gt(st.windows_checked, 5);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    ck_assert_uint_le(pr_sched_core_components(c), N);
    pr_sched_core_destroy(c);
}

/* The scale runs: every group of members_each workers (0: any size). */
static const struct scale_case {
    struct sf_case params;
    uint32_t members_each;
} scale_cases[] = {
    {{.name = "constant",
      .policy = PR_POLICY_CONSTANT,
      .group_size = 8,
      .isolation_bound = 2},
     8},
    {{.name = "dynamic",
      .policy = PR_POLICY_DYNAMIC,
      .group_min = 4,
      .group_max = 16,
      .window_ms = 0.05,
      .window_max_ms = 0.2,
      .isolation_bound = 2,
      .weighting = PR_WEIGHT_STALENESS},
     0},
};

START_TEST(test_sched_core_scale_case)
{
    struct pr_sched_params p = sf_case_params(&scale_cases[_i].params);

    run_scale(&p, scale_cases[_i].members_each);
}
END_TEST

static Suite *sched_core_gen_suite(void)
{
    Suite *s = suite_create("sched_core_gen");
    TCase *tc;

    tc = tcase_create("generator");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_sched_core_generator_off_isolates);
    tcase_add_test(tc, test_sched_core_generator_connects);
    tcase_add_loop_test(tc, test_sched_core_generator_case, 0,
                        (int)SF_NELEM(generator_cases));
    tcase_add_test(tc, test_sched_core_generator_components);
    tcase_add_test(tc, test_sched_core_generator_allreduce_off);
    suite_add_tcase(s, tc);

    tc = tcase_create("scale");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_sched_core_scale_case, 0,
                        (int)SF_NELEM(scale_cases));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sched_core_gen_suite());
}
