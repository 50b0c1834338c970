/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/base/stranger.c, the rules alone: no loop and no
 * sockets; the caller's clock is a number and a "close" records which
 * stranger went and why.
 */
#include "daemon/base/stranger.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "tests/check_run.h"

#define N 16

struct fake {
    struct pr_stranger st; /* first: a close gets back to its fake */
    int closed;            /* 0, or the status it was closed with */
    int order;             /* when, among the closes of a test */
};

static int closes;

static void fake_close(struct pr_stranger *st, int status)
{
    struct fake *f = (struct fake *)st;
    ck_assert_int_eq(f->closed, 0);
    ck_assert_ptr_null(st->list);
    f->closed = status;
    f->order = ++closes;
}

static const struct pr_stranger_rules rules = {
    .what = "test listener", .awaits = "hello", .max = 4, .per_source_max = 2};

static struct fake fakes[N];

static void setup(void)
{
    memset(fakes, 0, sizeof(fakes));
    closes = 0;
    pr_log_set_level(PR_LOG_ERROR);
}

static int admit(struct pr_strangers *l, int i, const char *source,
                 uint64_t now)
{
    snprintf(fakes[i].st.source, sizeof(fakes[i].st.source), "%s", source);
    fakes[i].st.name = source;
    fakes[i].st.close = fake_close;
    return pr_strangers_admit(l, &rules, &fakes[i].st, now);
}

START_TEST(test_stranger_per_source_evicts_own_oldest)
{
    struct pr_strangers l = {0};
    ck_assert_int_eq(admit(&l, 0, "10.0.0.1", 1000), 0);
    ck_assert_int_eq(admit(&l, 1, "10.0.0.2", 1001), 0);
    ck_assert_int_eq(admit(&l, 2, "10.0.0.2", 1002), 0);
    ck_assert_uint_eq(pr_strangers_from(&l, "10.0.0.2"), 2);
    /* 10.0.0.2 is at its share: its oldest goes, not the older 10.0.0.1. */
    ck_assert_int_eq(admit(&l, 3, "10.0.0.2", 2000), 0);
    ck_assert_int_eq(fakes[1].closed, -EBUSY);
    ck_assert_int_eq(fakes[0].closed, 0);
    ck_assert_int_eq(fakes[2].closed, 0);
    ck_assert_uint_eq(l.count, 3);
    ck_assert_uint_eq(l.made_room, 1);
}
END_TEST

START_TEST(test_stranger_full_evicts_oldest_of_all)
{
    struct pr_strangers l = {0};
    const char *src[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(admit(&l, i, src[i], 1000 + (uint64_t)i), 0);
    ck_assert_int_eq(admit(&l, 4, "e", 2000), 0);
    ck_assert_int_eq(fakes[0].closed, -EBUSY);
    ck_assert_uint_eq(l.count, 4);
    ck_assert_ptr_eq(l.head, &fakes[1].st);
    ck_assert_ptr_eq(l.tail, &fakes[4].st);
}
END_TEST

START_TEST(test_stranger_young_ones_refuse_newcomer)
{
    struct pr_strangers l = {0};
    const char *src[] = {"a", "a", "c", "d"};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(admit(&l, i, src[i], 1000), 0);
    /* All within the grace: the new one is refused, nobody closed. */
    ck_assert_int_eq(admit(&l, 4, "e", 1000 + PR_STRANGER_GRACE_MS - 1),
                     -EBUSY);
    ck_assert_ptr_null(fakes[4].st.list);
    ck_assert_int_eq(closes, 0);
    ck_assert_uint_eq(l.refused, 1);
    /* Same from a source at its share. */
    ck_assert_int_eq(admit(&l, 5, "a", 1000 + PR_STRANGER_GRACE_MS - 1),
                     -EBUSY);
    ck_assert_uint_eq(l.count, 4);
    /* At the grace, the oldest makes room. */
    ck_assert_int_eq(admit(&l, 6, "e", 1000 + PR_STRANGER_GRACE_MS), 0);
    ck_assert_int_eq(fakes[0].closed, -EBUSY);
}
END_TEST

START_TEST(test_stranger_sweep_closes_expired_in_order)
{
    struct pr_strangers l = {0};
    ck_assert_int_eq(admit(&l, 0, "a", 1000), 0);
    ck_assert_int_eq(admit(&l, 1, "b", 1500), 0);
    ck_assert_int_eq(admit(&l, 2, "c", 2500), 0);
    pr_strangers_sweep(&l, &rules, 1000, 1999);
    ck_assert_int_eq(closes, 0);
    pr_strangers_sweep(&l, &rules, 1000, 2500);
    ck_assert_int_eq(fakes[0].closed, -ETIMEDOUT);
    ck_assert_int_eq(fakes[1].closed, -ETIMEDOUT);
    ck_assert_int_eq(fakes[0].order, 1);
    ck_assert_int_eq(fakes[1].order, 2);
    ck_assert_int_eq(fakes[2].closed, 0);
    ck_assert_uint_eq(l.count, 1);
    ck_assert_uint_eq(l.expired, 2);
}
END_TEST

START_TEST(test_stranger_remove_is_idempotent)
{
    struct pr_strangers l = {0};
    ck_assert_int_eq(admit(&l, 0, "a", 1000), 0);
    ck_assert_int_eq(admit(&l, 1, "a", 1001), 0);
    ck_assert_int_eq(admit(&l, 2, "b", 1002), 0);
    /* The middle one's hello passed; then its connection closed. */
    pr_stranger_remove(&fakes[1].st);
    pr_stranger_remove(&fakes[1].st);
    ck_assert_uint_eq(l.count, 2);
    ck_assert_ptr_eq(l.head->next, &fakes[2].st);
    ck_assert_ptr_eq(l.tail->prev, &fakes[0].st);
    ck_assert_uint_eq(pr_strangers_from(&l, "a"), 1);
    /* It no longer counts against its source's share. */
    ck_assert_int_eq(admit(&l, 3, "a", 1003), 0);
    ck_assert_int_eq(closes, 0);
    pr_stranger_remove(&fakes[0].st);
    pr_stranger_remove(&fakes[2].st);
    pr_stranger_remove(&fakes[3].st);
    ck_assert_uint_eq(l.count, 0);
    ck_assert_ptr_null(l.head);
    ck_assert_ptr_null(l.tail);
    /* Never listed: a no-op too. */
    pr_stranger_remove(&fakes[9].st);
}
END_TEST

static Suite *stranger_suite(void)
{
    Suite *s = suite_create("stranger");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_stranger_per_source_evicts_own_oldest);
    tcase_add_test(tc, test_stranger_full_evicts_oldest_of_all);
    tcase_add_test(tc, test_stranger_young_ones_refuse_newcomer);
    tcase_add_test(tc, test_stranger_sweep_closes_expired_in_order);
    tcase_add_test(tc, test_stranger_remove_is_idempotent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(stranger_suite());
}
