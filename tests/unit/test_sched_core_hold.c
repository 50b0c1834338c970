/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the group generator's adaptive hold
 * (daemon/sched/core/sched_core.h): how long the scheduler holds a group back
 * to mix in workers of another component, with workers that keep a pace on a
 * fake clock. The fixture is sched_fixture.h.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"
#include "tests/unit/sched_fixture.h"
#include "tests/check_run.h"

/* ---- adaptive hold: workers with a pace, on a fake clock ---------------- */

#define NEVER UINT64_MAX

/*
 * A small event loop: worker r is ready period_us[r] after its group
 * formed (0: never again), the core's deadline is honoured, and the loop
 * notes the first hold (when it started, and its last deadline before the
 * first group formed while steering), that group, and every group formed
 * after its last member's READY, i.e. delayed by a hold.
 */
struct paced {
    struct pr_sched_core *c;
    uint32_t n;
    uint64_t period_us[8];
    uint64_t next_us[8];  /* next READY; NEVER while queued or hung */
    uint64_t ready_at[8]; /* when its queued READY arrived */
    uint64_t now;
    uint64_t groups;
    uint64_t delayed; /* groups formed after their last member's READY */
    uint64_t max_delay_us;
    uint64_t hold_from;  /* the first hold: when it started ... */
    int64_t hold_until;  /* ... and its final deadline; -1: none yet */
    uint64_t steered_at; /* the first group formed while steering */
    uint32_t steered_n;
    uint32_t steered[8];
};

static void paced_init(struct paced *d, const struct pr_sched_params *p,
                       uint32_t n)
{
    memset(d, 0, sizeof(*d));
    d->c = sf_make(p, n);
    d->n = n;
    d->hold_until = -1;
    d->steered_at = NEVER;
    for (uint32_t r = 0; r < 8; r++) {
        d->next_us[r] = NEVER;
    }
}

static void paced_drain(struct paced *d)
{
    struct pr_sched_group g;
    int steering = pr_sched_core_steering(d->c);
    int rc;

    while ((rc = pr_sched_core_next_group(d->c, d->now, &g)) == 1) {
        uint64_t last = 0;

        for (uint32_t i = 0; i < g.n; i++) {
            uint32_t r = g.members[i].rank;

            last = d->ready_at[r] > last ? d->ready_at[r] : last;
            d->next_us[r] = d->period_us[r] ? d->now + d->period_us[r] : NEVER;
        }
        if (d->now > last) {
            d->delayed++;
            if (d->now - last > d->max_delay_us) {
                d->max_delay_us = d->now - last;
            }
        }
        if (steering && d->steered_at == NEVER) {
            d->steered_at = d->now;
            d->steered_n = g.n;
            for (uint32_t i = 0; i < g.n; i++) {
                d->steered[i] = g.members[i].rank;
            }
        }
        d->groups++;
        pr_sched_group_fini(&g);
        steering = pr_sched_core_steering(d->c);
    }
    ck_assert_int_eq(rc, 0);
    /* Constant groups have no window: a deadline is a hold's. */
    int64_t dl = pr_sched_core_deadline_us(d->c);
    if (dl >= 0 && d->steered_at == NEVER) {
        if (d->hold_until < 0) {
            d->hold_from = d->now;
        }
        d->hold_until = dl;
    }
}

/* Runs every event up to and including time `until`. */
static void paced_run(struct paced *d, uint64_t until)
{
    for (;;) {
        uint64_t t = NEVER;
        int64_t dl = pr_sched_core_deadline_us(d->c);

        for (uint32_t r = 0; r < d->n; r++) {
            t = d->next_us[r] < t ? d->next_us[r] : t;
        }
        if (dl >= 0 && (uint64_t)dl < t) {
            t = (uint64_t)dl;
        }
        if (t > until) {
            return;
        }
        ck_assert_uint_ge(t, d->now);
        d->now = t;
        for (uint32_t r = 0; r < d->n; r++) {
            if (d->next_us[r] == t) {
                sf_ready(d->c, r, 1, t);
                d->next_us[r] = NEVER;
                d->ready_at[r] = t;
                paced_drain(d);
            }
        }
        paced_drain(d);
    }
}

/*
 * Workers 0-3 take 100 ms per step, 4-7 take 300 ms (first ready at
 * 150 ms); constant P = 4, B = 4. Groups are {0-3} at 0, 100, 200, ... and
 * {4-7} at 150, 450, 750, ...: 32 member-updates by 500 ms, unconnected,
 * so steering starts. At 600 ms 0-3 alone are due and held. The slow
 * workers were grouped at 450 ms with a 300 ms interval: expected by
 * 450 + 1.5 x 300 = 900 ms. Worker 4 comes at 750 ms, 150 ms into the
 * hold (a fixed 100 ms would have run out), and joins the group.
 */
static void paced_300_100(struct paced *d, double hold_ms)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);

    p.isolation_bound = 4;
    p.gen_hold_ms = hold_ms;
    paced_init(d, &p, 8);
    for (uint32_t r = 0; r < 8; r++) {
        d->period_us[r] = r < 4 ? 100000 : 300000;
        d->next_us[r] = r < 4 ? 0 : 150000;
    }
}

START_TEST(test_sched_core_generator_hold_adaptive)
{
    struct paced d;
    struct pr_sched_stats st;

    paced_300_100(&d, 0.0);
    paced_run(&d, 500000);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_eq(pr_sched_core_components(d.c), 2);
    paced_run(&d, 749999);
    ck_assert_uint_eq(d.hold_from, 600000);
    ck_assert_int_eq(d.hold_until, 900000);
    ck_assert_uint_eq(d.steered_at, NEVER); /* still held */
    paced_run(&d, 750000);
    ck_assert_uint_eq(d.steered_at, 750000);
    ck_assert_uint_eq(d.steered_n, 4);
    ck_assert_uint_eq(d.steered[0], 0);
    ck_assert_uint_eq(d.steered[1], 4); /* the slow worker, at once */
    ck_assert_uint_eq(d.steered[2], 1);
    ck_assert_uint_eq(d.steered[3], 2);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_eq(st.windows_connected, 1);

    /*
     * Every later window connects too, and no hold runs out: each window
     * that needs steering ends with its first steered group (4 updates).
     */
    paced_run(&d, 60000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_ge(st.windows_checked, 20);
    ck_assert_uint_eq(st.windows_connected, st.windows_checked);
    ck_assert_uint_eq(st.generator_expired, 0);
    ck_assert_uint_ge(st.generator_held, 20);
    ck_assert_uint_le(st.generator_forced,
                      st.windows_checked - st.windows_unaided);
    pr_sched_core_destroy(d.c);

    /*
     * The same with a fixed 100 ms hold: it runs out at 700 ms, and the
     * group formed then is 0-3 again.
     */
    paced_300_100(&d, 100.0);
    paced_run(&d, 700000);
    ck_assert_int_eq(d.hold_until, 700000);
    ck_assert_uint_eq(d.steered_at, 700000);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(d.steered[i], i);
    }
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(st.windows_connected, 0);
    pr_sched_core_destroy(d.c);
}
END_TEST

/*
 * Worker 4 is live but never ready: 0-3 (10 ms steps, P = 4, B = 1) are
 * held for it once, for at most gen_hold_max_ms (50 ms), and then never
 * again while it stays away. When it is ready once, that window ends and
 * the next one may hold one group for it again: one per window.
 */
START_TEST(test_sched_core_generator_hold_never_ready)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    struct paced d;
    struct pr_sched_stats st;

    p.isolation_bound = 1;
    p.gen_hold_max_ms = 50.0;
    paced_init(&d, &p, 5);
    for (uint32_t r = 0; r < 4; r++) {
        d.period_us[r] = 10000;
        d.next_us[r] = 0;
    }
    paced_run(&d, 1000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_ge(d.groups, 90);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(d.delayed, 1);
    ck_assert_uint_le(d.max_delay_us, 50000);
    /* It joined at 0 and had no interval: waited for until 0 + 50 ms. */
    ck_assert_uint_eq(d.hold_from, 20000);
    ck_assert_int_eq(d.hold_until, 50000);
    ck_assert_uint_eq(st.windows_checked, 0);

    /* Ready once (it joins the next group), then gone again. */
    d.next_us[4] = d.now + 1;
    paced_run(&d, 3000000);
    pr_sched_core_stats(d.c, &st);
    ck_assert_uint_eq(st.windows_checked, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_int_eq(pr_sched_core_steering(d.c), 1);
    ck_assert_uint_eq(st.generator_held, 2);
    ck_assert_uint_eq(st.generator_expired, 2);
    ck_assert_uint_eq(d.delayed, 2);
    ck_assert_uint_le(d.max_delay_us, 50000);
    pr_sched_core_destroy(d.c);
}
END_TEST

/*
 * Re-arming (fixed 5 ms holds, P = 2, B = 1): 2 and 3 let a hold for them
 * expire, so they are late and the next group of 0 and 1 is not held.
 * Once ready again they count again: a group of theirs alone is held for
 * 0 and 1, and 0 joins it.
 */
START_TEST(test_sched_core_generator_hold_rearmed)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c;
    struct pr_sched_stats st;

    p.group_size = 2;
    p.isolation_bound = 1;
    p.gen_hold_ms = 5.0;
    c = sf_make(&p, 4);
    sf_ready(c, 0, 1, 0);
    sf_ready(c, 1, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){0, 1}, 2, NULL);
    sf_ready(c, 2, 1, 0);
    sf_ready(c, 3, 1, 0);
    sf_expect_group(c, 0, (const uint32_t[]){2, 3}, 2, NULL);
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    sf_ready(c, 0, 2, 1000);
    sf_ready(c, 1, 2, 1000);
    sf_expect_none(c, 1000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 6000);
    sf_expect_group(c, 6000, (const uint32_t[]){0, 1}, 2, NULL);
    sf_ready(c, 0, 3, 7000);
    sf_ready(c, 1, 3, 7000);
    sf_expect_group(c, 7000, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 1);
    ck_assert_uint_eq(st.generator_expired, 1);
    sf_ready(c, 2, 2, 8000);
    sf_ready(c, 3, 2, 8000);
    sf_expect_none(c, 8000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 13000);
    sf_ready(c, 0, 4, 9000);
    sf_expect_group(c, 9000, (const uint32_t[]){2, 0}, 2, NULL);
    pr_sched_core_stats(c, &st);
    ck_assert_uint_eq(st.generator_held, 2);
    ck_assert_uint_eq(st.generator_expired, 1);
    ck_assert_uint_eq(st.windows_connected, 1);
    ck_assert_int_eq(pr_sched_core_steering(c), 0);
    pr_sched_core_destroy(c);
}
END_TEST

/*
 * The pace is learnt only while a worker is live: removal wipes it, and
 * the first READY after it joins again gives no interval. Worker 2 is
 * made ready and cancelled (so it stays out of every group) while 0 and 1
 * form groups; P = 2, B = 1.
 */
START_TEST(test_sched_core_generator_hold_ewma_removed)
{
    struct pr_sched_params p = sf_params(PR_POLICY_CONSTANT);
    struct pr_sched_core *c;

    p.group_size = 2;
    p.isolation_bound = 1;
    c = sf_make(&p, 3);
    /* A 100 ms pace before the removal. */
    sf_ready(c, 2, 1, 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 0), 0);
    sf_ready(c, 2, 1, 100000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 100000), 0);
    ck_assert_int_eq(pr_sched_core_remove_worker(c, 2, 200000), 0);
    /* Back 10 s later: one READY, no interval yet. */
    ck_assert_int_eq(pr_sched_core_add_worker(c, 2, 1, 10000000), 0);
    sf_ready(c, 2, 1, 10000000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 10000000), 0);
    for (int i = 0; i < 2; i++) {
        sf_ready(c, 0, 1, 10010000);
        sf_ready(c, 1, 1, 10010000);
        sf_expect_group(c, 10010000, (const uint32_t[]){0, 1}, 2, NULL);
    }
    ck_assert_int_eq(pr_sched_core_steering(c), 1);
    /*
     * Held for 2 by neither its old 100 ms pace (until 10.15 s) nor an
     * interval across the removal (about 12 s): it has no interval, so
     * until its cancel + the 5 s longest hold.
     */
    sf_ready(c, 0, 1, 10020000);
    sf_ready(c, 1, 1, 10020000);
    sf_expect_none(c, 10020000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 10021000); /* 1 ms */
    sf_expect_none(c, 10021000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 15000000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 0, 100, 10030000), 0);
    ck_assert_int_eq(pr_sched_core_cancel(c, 1, 101, 10030000), 0);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), -1);
    /* A second READY 300 ms later: expected 1.5 x 300 ms after it. */
    sf_ready(c, 2, 1, 10300000);
    ck_assert_int_eq(pr_sched_core_cancel(c, 2, 102, 10300000), 0);
    sf_ready(c, 0, 1, 10310000);
    sf_ready(c, 1, 1, 10310000);
    sf_expect_none(c, 10310000);
    sf_expect_none(c, 10311000);
    ck_assert_int_eq(pr_sched_core_deadline_us(c), 10300000 + 450000);
    sf_expect_none(c, 10749999);
    sf_expect_group(c, 10750000, (const uint32_t[]){0, 1}, 2, NULL);
    pr_sched_core_destroy(c);
}
END_TEST

static Suite *sched_core_hold_suite(void)
{
    Suite *s = suite_create("sched_core_hold");
    TCase *tc;

    tc = tcase_create("generator");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_sched_core_generator_hold_adaptive);
    tcase_add_test(tc, test_sched_core_generator_hold_never_ready);
    tcase_add_test(tc, test_sched_core_generator_hold_rearmed);
    tcase_add_test(tc, test_sched_core_generator_hold_ewma_removed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sched_core_hold_suite());
}
