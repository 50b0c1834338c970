/* SPDX-License-Identifier: MIT */
/*
 * The job's layout (floats per reduce) is the one most live workers
 * reduce, a tie keeping the job's: a trainer of another layout is refused
 * alone, with both layouts named, whether it came first or not; once the
 * trainers of a new layout outnumber the old one's, it is the job's (a
 * rolling upgrade to a changed model). One node
 * daemon, policy dynamic: a trainer that reduces alone gets a group of one
 * at the end of the window, so the trainers here run one after another in
 * this process.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "preduce.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static struct h_cluster c;

static const char *const sched_sets[] = {"scheduler.policy=dynamic",
                                         "scheduler.window_ms=5", NULL};

static void setup(void)
{
    ck_assert_int_eq(h_cluster_start(&c, 1, sched_sets, NULL), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

/* A connected trainer with one tensor of n floats, all set to `value`. */
struct trainer {
    preduce_client_t *cl;
    preduce_tensor_t *t;
};

static void trainer_open(struct trainer *tr, const char *name, size_t n,
                         float value)
{
    ck_assert_int_eq(preduce_connect(c.sock[0], name, 5000, &tr->cl), 0);
    ck_assert_int_eq(preduce_tensor_create(tr->cl, n, 5000, &tr->t), 0);
    float *x = preduce_tensor_data(tr->t);
    for (size_t i = 0; i < n; i++)
        x[i] = value;
}

static int trainer_reduce(struct trainer *tr)
{
    return preduce_reduce(tr->cl, &tr->t, 1, 10000);
}

/* Waits (up to 5 s) until the scheduler's log says `what`. */
static int sched_says(const char *what)
{
    for (int i = 0; i < 500; i++) {
        if (h_log_contains(&c, "sched", what))
            return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/*
 * A trainer of another length reduced first and left: it no longer pins
 * the job, so trainers of the right length reduce (they failed with
 * -EINVAL until every worker had left).
 */
START_TEST(test_layout_defined_again_after_holders_left)
{
    struct trainer old, a, b;
    trainer_open(&old, "old", 100, 1.0f);
    ck_assert_int_eq(trainer_reduce(&old), 0);
    /* A live worker that never reduced holds no layout. */
    trainer_open(&a, "a", 200, 2.0f);
    preduce_close(old.cl);
    ck_assert(sched_says("(old) left"));
    ck_assert_int_eq(trainer_reduce(&a), 0);
    ck_assert(sched_says("its layout is now 200 floats (was 100"));
    trainer_open(&b, "b", 200, 4.0f);
    ck_assert_int_eq(trainer_reduce(&b), 0);
    ck_assert_int_eq(trainer_reduce(&a), 0);
    preduce_close(a.cl);
    preduce_close(b.cl);
}
END_TEST

/*
 * While live workers hold the job's layout, a trainer of another one is
 * refused alone (-EINVAL, both layouts named); the holders go on; when the
 * last holder leaves, the refused trainer's layout becomes the job's and
 * a trainer of the old one is refused in turn.
 */
START_TEST(test_layout_mismatch_refused_alone)
{
    struct trainer a, b, d;
    trainer_open(&a, "a", 200, 2.0f);
    ck_assert_int_eq(trainer_reduce(&a), 0);
    trainer_open(&b, "b", 300, 3.0f);
    ck_assert_int_eq(trainer_reduce(&b), -EINVAL);
    ck_assert(sched_says("worker 1 (b): reduce of 300 floats, but this job "
                         "reduces 200 (the layout of 1 live worker"));
    ck_assert_str_eq(preduce_last_error(b.cl),
                     "reduce of 300 floats, but this job reduces 200 (the "
                     "layout of 1 live worker; the job takes the layout most "
                     "live workers reduce)");
    ck_assert(preduce_tensor_data(b.t)[299] == 3.0f);
    /* The refusal is b's alone: its connection and a's reduces go on. */
    ck_assert_int_eq(trainer_reduce(&a), 0);
    ck_assert_int_eq(trainer_reduce(&b), -EINVAL);
    ck_assert_int_ge(preduce_rank(b.cl), 0);
    preduce_close(a.cl);
    ck_assert(sched_says("(a) left"));
    ck_assert_int_eq(trainer_reduce(&b), 0);
    trainer_open(&d, "d", 200, 5.0f);
    ck_assert_int_eq(trainer_reduce(&d), -EINVAL);
    ck_assert(sched_says("reduce of 200 floats, but this job reduces 300"));
    preduce_close(b.cl);
    preduce_close(d.cl);
}
END_TEST

/*
 * A trainer of a wrong model that reduced first does not pin the job: on
 * a tie it keeps it, but once two trainers of the right model have asked,
 * theirs is the job's layout and the lone one is refused, its tensor
 * untouched: the two correct trainers average, not the one.
 */
START_TEST(test_layout_majority_over_lone_first)
{
    struct trainer bad, a, b;
    trainer_open(&bad, "bad", 100, 1.0f);
    ck_assert_int_eq(trainer_reduce(&bad), 0);
    trainer_open(&a, "a", 200, 2.0f);
    trainer_open(&b, "b", 200, 4.0f);
    ck_assert_int_eq(trainer_reduce(&a), -EINVAL); /* 1 against 1 */
    ck_assert(sched_says("worker 1 (a): reduce of 200 floats, but this job "
                         "reduces 100 (the layout of 1 live worker;"));
    ck_assert_int_eq(trainer_reduce(&b), 0); /* 2 against 1 */
    ck_assert(sched_says("its layout is now 200 floats (was 100: 2 "
                         "live workers against 1)"));
    ck_assert_int_eq(trainer_reduce(&a), 0);
    ck_assert_int_eq(trainer_reduce(&bad), -EINVAL);
    ck_assert(sched_says("worker 0 (bad): reduce of 100 floats, but this job "
                         "reduces 200 (the layout of 2 live workers;"));
    ck_assert(preduce_tensor_data(bad.t)[99] == 1.0f);
    ck_assert_int_eq(trainer_reduce(&b), 0);
    preduce_close(bad.cl);
    preduce_close(a.cl);
    preduce_close(b.cl);
}
END_TEST

/*
 * The only holder changes its own model (a new tensor): its new layout is
 * the job's at once, since nobody else holds the old one.
 */
START_TEST(test_layout_sole_holder_changes)
{
    struct trainer a;
    trainer_open(&a, "a", 200, 2.0f);
    ck_assert_int_eq(trainer_reduce(&a), 0);
    preduce_tensor_t *t2;
    ck_assert_int_eq(preduce_tensor_create(a.cl, 50, 5000, &t2), 0);
    preduce_tensor_t *both[2] = {a.t, t2};
    ck_assert_int_eq(preduce_reduce(a.cl, both, 2, 10000), 0);
    ck_assert(sched_says("its layout is now 250 floats (was 200"));
    preduce_close(a.cl);
}
END_TEST

/*
 * After a scheduler restart the job's layout is learnt again, and an idle
 * trainer of a wrong model that happens to reduce first does not pin it
 * (it did: 7.8 s of -EINVAL for the right ones): each right trainer is
 * refused at most once, then the two average and the wrong one is
 * refused, its tensor untouched.
 */
START_TEST(test_layout_after_scheduler_restart)
{
    struct trainer a, b, w;
    trainer_open(&a, "a", 200, 2.0f);
    trainer_open(&b, "b", 200, 4.0f);
    ck_assert_int_eq(trainer_reduce(&a), 0);
    ck_assert_int_eq(trainer_reduce(&b), 0);
    trainer_open(&w, "w", 100, 1.0f); /* idle until the restart */
    kill(c.sched_pid, SIGKILL);
    ck_assert_int_eq(h_wait(c.sched_pid, 5000), 128 + SIGKILL);
    ck_assert_int_eq(h_sched_start(&c, sched_sets), 0);
    /* w's reduce is the job's first once its node is back. */
    int rc = -EAGAIN;
    for (int i = 0; i < 200 && rc != 0; i++) {
        rc = trainer_reduce(&w);
        ck_assert_msg(rc == 0 || preduce_error_retryable(rc),
                      "w's reduce after the restart: %d", rc);
        if (rc != 0) { /* the node redials with a backoff */
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    ck_assert_int_eq(rc, 0);
    int ra = trainer_reduce(&a); /* 1 against 1: maybe refused */
    ck_assert(ra == 0 || ra == -EINVAL);
    ck_assert_int_eq(trainer_reduce(&b), 0);
    ck_assert_int_eq(trainer_reduce(&a), 0);
    ck_assert_int_eq(trainer_reduce(&w), -EINVAL);
    ck_assert(preduce_tensor_data(w.t)[99] == 1.0f);
    ck_assert_int_eq(trainer_reduce(&b), 0);
    preduce_close(a.cl);
    preduce_close(b.cl);
    preduce_close(w.cl);
}
END_TEST

static Suite *layout_suite(void)
{
    Suite *s = suite_create("integration_layout");
    TCase *tc = tcase_create("layout");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_layout_defined_again_after_holders_left);
    tcase_add_test(tc, test_layout_mismatch_refused_alone);
    tcase_add_test(tc, test_layout_majority_over_lone_first);
    tcase_add_test(tc, test_layout_sole_holder_changes);
    tcase_add_test(tc, test_layout_after_scheduler_restart);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(layout_suite());
}
