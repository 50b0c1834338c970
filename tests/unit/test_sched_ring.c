/* SPDX-License-Identifier: MIT */
/*
 * Ring order from link rates (daemon/sched/sched_ring.c): two racks joined
 * by a slow link are crossed twice, not on every hop; nothing changes
 * without rates or when they are alike; unmeasured links get tried.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sched/sched_ring.h"
#include "tests/check_run.h"

#define MAXN 16
#define FAST 100e6
#define SLOW 10e6

/* rate[from][to] by node id (ids 1 .. MAXN - 1); 0 = unknown. */
struct table {
    double rate[MAXN][MAXN];
};

static double table_rate(void *ctx, uint32_t from, uint32_t to)
{
    const struct table *t = ctx;
    return t->rate[from][to];
}

/* Two racks, odd ids and even ids: fast inside one, slow between. */
static void two_racks(struct table *t, uint32_t n)
{
    memset(t, 0, sizeof(*t));
    for (uint32_t a = 1; a <= n; a++)
        for (uint32_t b = 1; b <= n; b++)
            if (a != b)
                t->rate[a][b] = (a % 2) == (b % 2) ? FAST : SLOW;
}

static void id_ring(uint32_t *ring, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        ring[i] = i + 1;
}

/* How many ring links join the two racks. */
static int crossings(const uint32_t *ring, uint32_t n)
{
    int c = 0;
    for (uint32_t i = 0; i < n; i++)
        c += ring[i] % 2 != ring[(i + 1) % n] % 2;
    return c;
}

/* ring holds each of 1 .. n once, and 1 first. */
static void check_permutation(const uint32_t *ring, uint32_t n)
{
    int seen[MAXN] = {0};
    ck_assert_uint_eq(ring[0], 1);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert(ring[i] >= 1 && ring[i] <= n);
        ck_assert_int_eq(seen[ring[i]]++, 0);
    }
}

/* Id order over interleaved racks crosses on every hop; ordered: twice. */
START_TEST(test_ring_two_racks_cross_twice)
{
    static const uint32_t sizes[] = {4, 6, 8, 12, 13, 15};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint32_t n = sizes[k], ring[MAXN];
        struct table t;
        two_racks(&t, n);
        id_ring(ring, n);
        ck_assert_int_eq(crossings(ring, n), (int)(n - n % 2));
        ck_assert_int_eq(pr_sched_ring_order(ring, n, table_rate, &t), 1);
        check_permutation(ring, n);
        ck_assert_int_eq(crossings(ring, n), 2);
    }
}
END_TEST

/* No rate, or rates within a factor of 2 (1.67 here): measurement noise. */
START_TEST(test_ring_kept_without_rates_or_when_alike)
{
    uint32_t ring[MAXN];
    struct table t;
    memset(&t, 0, sizeof(t));
    id_ring(ring, 6);
    ck_assert_int_eq(pr_sched_ring_order(ring, 6, table_rate, &t), 0);
    for (uint32_t a = 1; a <= 6; a++)
        for (uint32_t b = 1; b <= 6; b++)
            t.rate[a][b] = a == b ? 0 : FAST * (1 - 0.1 * ((a + b) % 5));
    ck_assert_int_eq(pr_sched_ring_order(ring, 6, table_rate, &t), 0);
    for (uint32_t i = 0; i < 6; i++)
        ck_assert_uint_eq(ring[i], i + 1);
    /* Rings of one and two nodes have one order. */
    two_racks(&t, 2);
    ck_assert_int_eq(pr_sched_ring_order(ring, 2, table_rate, &t), 0);
    ck_assert_int_eq(pr_sched_ring_order(ring, 1, table_rate, &t), 0);
}
END_TEST

/*
 * Only the id order's links measured, all alike and slow (what id order
 * over two racks shows at first): the unmeasured links get tried.
 */
START_TEST(test_ring_unmeasured_links_tried)
{
    uint32_t ring[MAXN];
    struct table t;
    memset(&t, 0, sizeof(t));
    for (uint32_t i = 1; i <= 4; i++)
        t.rate[i][i % 4 + 1] = SLOW;
    id_ring(ring, 4);
    ck_assert_int_eq(pr_sched_ring_order(ring, 4, table_rate, &t), 1);
    check_permutation(ring, 4);
    int known = 0;
    for (uint32_t i = 0; i < 4; i++)
        known += t.rate[ring[i]][ring[(i + 1) % 4]] > 0;
    ck_assert_int_lt(known, 4);
}
END_TEST

/*
 * Every order costs the same (each has one slow link out of node 1): the
 * given order stays, no churn.
 */
START_TEST(test_ring_ties_keep_the_given_order)
{
    uint32_t ring[MAXN];
    struct table t;
    for (uint32_t a = 1; a <= 4; a++)
        for (uint32_t b = 1; b <= 4; b++)
            t.rate[a][b] = a == b ? 0 : a == 1 ? SLOW : FAST;
    id_ring(ring, 4);
    ck_assert_int_eq(pr_sched_ring_order(ring, 4, table_rate, &t), 0);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_uint_eq(ring[i], i + 1);
}
END_TEST

/* Directed rates: the ring runs the way its fast links point. */
START_TEST(test_ring_follows_direction)
{
    uint32_t ring[MAXN] = {1, 2, 3};
    struct table t;
    memset(&t, 0, sizeof(t));
    /* 1 -> 3 -> 2 -> 1 fast, the reverse slow. */
    t.rate[1][3] = t.rate[3][2] = t.rate[2][1] = FAST;
    t.rate[1][2] = t.rate[2][3] = t.rate[3][1] = SLOW;
    ck_assert_int_eq(pr_sched_ring_order(ring, 3, table_rate, &t), 1);
    ck_assert_uint_eq(ring[0], 1);
    ck_assert_uint_eq(ring[1], 3);
    ck_assert_uint_eq(ring[2], 2);
    ck_assert_int_eq(pr_sched_ring_order(ring, 3, table_rate, &t), 0);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("sched_ring");
    TCase *tc = tcase_create("order");
    tcase_add_test(tc, test_ring_two_racks_cross_twice);
    tcase_add_test(tc, test_ring_kept_without_rates_or_when_alike);
    tcase_add_test(tc, test_ring_unmeasured_links_tried);
    tcase_add_test(tc, test_ring_ties_keep_the_given_order);
    tcase_add_test(tc, test_ring_follows_direction);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(ring_suite());
}
