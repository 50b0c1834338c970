/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for coalesced control writes (daemon/base/conn_batch.c,
 * pr_conn_set_batch): two conns through the relay of seal_fixture.h,
 * sealed or in clear. A batched conn's messages wait in its buffer while
 * the loop turn runs (pr_conn_write_queue counts them, nothing is
 * written) and go out at the batch's flush, in order with the data
 * frames between them; a batch set before the handshake still seals it
 * right; pr_conn_fail's Error goes out after what waited; taking the
 * batch away writes what waited; a closed batch frees itself.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/conn.h"
#include "tests/unit/seal_fixture.h"

/* Both sides back to unbatched, the batch closed, then sp_fini. */
static void batch_fini(struct sp *t, struct pr_conn_batch *b)
{
    if (t->s.c)
        pr_conn_set_batch(t->s.c, NULL);
    if (t->c.c)
        pr_conn_set_batch(t->c.c, NULL);
    pr_conn_batch_close(b);
    sp_fini(t);
}

/*
 * The two conns up (sealed with cipher, 0: in clear), and a batch for S,
 * and for C too when both.
 */
static struct pr_conn_batch *batch_up(struct sp *t, uint32_t cipher, int both)
{
    sp_init(t, cipher, &sp_whole_ops, &sp_whole_ops, 0);
    sp_run_until(t, sp_both_up);
    struct pr_conn_batch *b = pr_conn_batch_create(&t->loop);
    ck_assert_ptr_nonnull(b);
    pr_conn_set_batch(t->s.c, b);
    if (both)
        pr_conn_set_batch(t->c.c, b);
    return b;
}

/*
 * Pings, a data frame between them, and the marker from S in one turn:
 * before the loop runs they wait in S's buffer (a data frame flushes
 * what is before it, the pings after it wait again); C gets all, in
 * order and intact. Sealed and in clear.
 */
START_TEST(test_conn_batch_messages_wait_for_the_turn)
{
    uint32_t cipher = _i < SP_NCIPHERS ? sp_cipher_of(_i) : 0;
    if (_i < SP_NCIPHERS && !cipher)
        return;
    struct sp t;
    struct pr_conn_batch *b = batch_up(&t, cipher, 1);
    size_t before = t.wire[SP_S_TO_C].len;
    size_t pings = 0;
    for (uint32_t k = 0; k < 10; k++) {
        sp_send_ping(&t.s, 100 + k);
        pings += cipher ? sp_ping_wire_len(100 + k) : 0;
    }
    if (cipher)
        ck_assert_uint_eq(pr_conn_write_queue(t.s.c), pings);
    else
        ck_assert_uint_gt(pr_conn_write_queue(t.s.c), 0);
    sp_send_data(&t.s, 1, 5000); /* writes the pings before it, and itself */
    size_t queued = pr_conn_write_queue(t.s.c);
    for (uint32_t k = 10; k < 20; k++)
        sp_send_ping(&t.s, 100 + k);
    ck_assert_uint_gt(pr_conn_write_queue(t.s.c), queued); /* they wait */
    sp_send_marker(&t.s);
    sp_send_ping(&t.c, 7); /* the other way too, through the same batch */
    ck_assert_uint_eq(t.wire[SP_S_TO_C].len, before);
    sp_run_events(&t, &t.c, 22);
    sp_run_events(&t, &t.s, 1);
    for (uint32_t k = 0; k < 10; k++)
        sp_check_event(&t.c, k, 'M', 100 + k, 0);
    sp_check_event(&t.c, 10, 'D', 1, 5000);
    for (uint32_t k = 10; k < 20; k++)
        sp_check_event(&t.c, k + 1, 'M', 100 + k, 0);
    sp_check_event(&t.c, 21, 'E', 7, 0);
    sp_check_event(&t.s, 0, 'M', 7, 0);
    ck_assert_uint_eq(pr_conn_write_queue(t.s.c), 0);
    batch_fini(&t, b);
}
END_TEST

/*
 * The batch set before the handshake's Hello and Welcome: the transcript
 * hashes each frame when it is sent, so both sides seal alike, and the
 * sealed pings after the Welcome that waited with it open.
 */
START_TEST(test_conn_batch_through_the_handshake)
{
    uint32_t cipher = sp_cipher_of(_i);
    if (!cipher)
        return;
    struct sp t;
    sp_init(&t, cipher, &sp_whole_ops, &sp_whole_ops, 0);
    struct pr_conn_batch *b = pr_conn_batch_create(&t.loop);
    ck_assert_ptr_nonnull(b);
    pr_conn_set_batch(t.s.c, b);
    pr_conn_set_batch(t.c.c, b);
    sp_run_until(&t, sp_both_up);
    ck_assert_ptr_nonnull(t.s.c->seal);
    ck_assert_ptr_nonnull(t.c.c->seal);
    for (uint32_t k = 0; k < 5; k++) {
        sp_send_ping(&t.s, 10 + k);
        sp_send_ping(&t.c, 20 + k);
    }
    sp_run_events(&t, &t.c, 5);
    sp_run_events(&t, &t.s, 5);
    for (uint32_t k = 0; k < 5; k++) {
        sp_check_event(&t.c, k, 'M', 10 + k, 0);
        sp_check_event(&t.s, k, 'M', 20 + k, 0);
    }
    batch_fini(&t, b);
}
END_TEST

/*
 * pr_conn_fail on a batched conn with pings waiting: they go out first,
 * then its Error, then it closes; C gets all three kinds in order.
 */
START_TEST(test_conn_batch_fail_sends_what_waited)
{
    struct sp t;
    struct pr_conn_batch *b = batch_up(&t, 0, 0);
    for (uint32_t k = 0; k < 3; k++)
        sp_send_ping(&t.s, 30 + k);
    pr_conn_fail(t.s.c, 7, SP_MARKER);
    sp_run_events(&t, &t.c, 4);
    for (uint32_t k = 0; k < 3; k++)
        sp_check_event(&t.c, k, 'M', 30 + k, 0);
    sp_check_event(&t.c, 3, 'E', 7, 0);
    sp_run_until(&t, sp_s_closed);
    batch_fini(&t, b);
}
END_TEST

/*
 * The batch's list: S then C waiting; C leaves the batch (its frames go
 * at once, the list's tail goes back to S), S's wait for the turn; C
 * joins again and waits first, S after it. Everything arrives.
 */
START_TEST(test_conn_batch_list_order)
{
    struct sp t;
    struct pr_conn_batch *b = batch_up(&t, 0, 1);
    sp_send_ping(&t.s, 1);
    sp_send_ping(&t.c, 2);
    pr_conn_set_batch(t.c.c, NULL);
    ck_assert_uint_eq(pr_conn_write_queue(t.c.c), 0);
    sp_send_ping(&t.s, 3);
    ck_assert_uint_gt(pr_conn_write_queue(t.s.c), 0);
    sp_run_events(&t, &t.c, 2);
    sp_run_events(&t, &t.s, 1);
    pr_conn_set_batch(t.c.c, b);
    sp_send_ping(&t.c, 4);
    sp_send_ping(&t.s, 5);
    sp_run_events(&t, &t.c, 3);
    sp_run_events(&t, &t.s, 2);
    sp_check_event(&t.c, 0, 'M', 1, 0);
    sp_check_event(&t.c, 1, 'M', 3, 0);
    sp_check_event(&t.c, 2, 'M', 5, 0);
    sp_check_event(&t.s, 0, 'M', 2, 0);
    sp_check_event(&t.s, 1, 'M', 4, 0);
    batch_fini(&t, b);
}
END_TEST

static void timer_sends(uv_timer_t *h)
{
    sp_send_ping(h->data, 50);
}

/*
 * A message sent from a timer, with nothing else to wake the loop: the
 * batch writes it before the loop waits (its prepare handle), not at the
 * next I/O (that would be the fixture's 10 s limit, and a failure).
 */
START_TEST(test_conn_batch_timer_send_goes_before_the_wait)
{
    struct sp t;
    struct pr_conn_batch *b = batch_up(&t, 0, 0);
    uv_timer_t timer;
    uv_timer_init(&t.loop, &timer);
    timer.data = &t.s;
    uv_timer_start(&timer, timer_sends, 50, 0);
    uint64_t t0 = uv_hrtime();
    sp_run_events(&t, &t.c, 1);
    ck_assert_uint_lt(uv_hrtime() - t0, 2000000000ull);
    sp_check_event(&t.c, 0, 'M', 50, 0);
    uv_close((uv_handle_t *)&timer, NULL);
    batch_fini(&t, b);
}
END_TEST

/* Taking a conn's batch away writes what waited, at once. */
START_TEST(test_conn_batch_unset_flushes)
{
    struct sp t;
    struct pr_conn_batch *b = batch_up(&t, 0, 0);
    sp_send_ping(&t.s, 40);
    ck_assert_uint_gt(pr_conn_write_queue(t.s.c), 0);
    pr_conn_set_batch(t.s.c, NULL);
    ck_assert_uint_eq(pr_conn_write_queue(t.s.c), 0); /* in the socket */
    pr_conn_batch_close(b);
    sp_run_events(&t, &t.c, 1);
    sp_check_event(&t.c, 0, 'M', 40, 0);
    sp_fini(&t);
}
END_TEST

static Suite *conn_batch_suite(void)
{
    Suite *s = suite_create("conn_batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_conn_batch_messages_wait_for_the_turn, 0,
                        SP_NCIPHERS + 1);
    tcase_add_loop_test(tc, test_conn_batch_through_the_handshake, 0,
                        SP_NCIPHERS);
    tcase_add_test(tc, test_conn_batch_fail_sends_what_waited);
    tcase_add_test(tc, test_conn_batch_unset_flushes);
    tcase_add_test(tc, test_conn_batch_list_order);
    tcase_add_test(tc, test_conn_batch_timer_send_goes_before_the_wait);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sp_main(conn_batch_suite());
}
