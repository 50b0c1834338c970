/*
 * The RDMA transport's bookkeeping without a device: credits, the
 * immediate-data encoding and the cutting of chunks into slot-sized
 * writes (daemon/rdma_flow.h).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "daemon/rdma_flow.h"

START_TEST(test_rdma_flow_credit_window)
{
    struct pr_credit c;
    pr_credit_init(&c, 4);
    uint32_t slot, seen[6];
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(pr_credit_take(&c, &slot), 0);
        seen[i] = slot;
    }
    /* Four writes in flight: the fifth waits for a credit. */
    ck_assert_int_eq(pr_credit_take(&c, &slot), -EAGAIN);
    ck_assert_int_eq(seen[0], 0);
    ck_assert_int_eq(seen[3], 3);
    ck_assert_int_eq(pr_credit_give(&c, 2), 0);
    ck_assert_int_eq(pr_credit_take(&c, &seen[4]), 0);
    ck_assert_int_eq(pr_credit_take(&c, &seen[5]), 0);
    /* Slots go round robin: the oldest freed ones are reused. */
    ck_assert_int_eq(seen[4], 0);
    ck_assert_int_eq(seen[5], 1);
    ck_assert_int_eq(pr_credit_take(&c, &slot), -EAGAIN);
}
END_TEST

START_TEST(test_rdma_flow_credit_overflow_refused)
{
    struct pr_credit c;
    pr_credit_init(&c, 3);
    uint32_t slot;
    ck_assert_int_eq(pr_credit_take(&c, &slot), 0);
    /* A peer returning more than it was given is a protocol error. */
    ck_assert_int_eq(pr_credit_give(&c, 2), -EPROTO);
    ck_assert_int_eq(pr_credit_give(&c, 1), 0);
    ck_assert_int_eq(c.credits, 3);
    ck_assert_int_eq(pr_credit_give(&c, 1), -EPROTO);
}
END_TEST

START_TEST(test_rdma_flow_credit_return_batches)
{
    struct pr_credit c;
    pr_credit_init(&c, 8);
    ck_assert_uint_eq(pr_credit_due(&c, 4, 0), 0);
    for (int i = 0; i < 3; i++)
        pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 4, 0), 0); /* below the batch */
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 4, 0), 4);
    ck_assert_uint_eq(pr_credit_due(&c, 4, 0), 0); /* forgotten once due */
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 4, 1), 1); /* a flush returns all */
    ck_assert_uint_eq(pr_credit_due(&c, 4, 1), 0);
}
END_TEST

START_TEST(test_rdma_flow_imm_round_trip)
{
    uint32_t n;
    ck_assert_int_eq(pr_imm_decode(pr_imm_slot(5), 8, &n), 0);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(pr_imm_decode(pr_imm_credit(3), 8, &n), 1);
    ck_assert_uint_eq(n, 3);
    /* A slot the receiver does not have, or a credit of zero. */
    ck_assert_int_eq(pr_imm_decode(pr_imm_slot(8), 8, &n), -EPROTO);
    ck_assert_int_eq(pr_imm_decode(PR_IMM_CREDIT, 8, &n), -EPROTO);
}
END_TEST

START_TEST(test_rdma_flow_pieces_cover_chunk)
{
    struct pr_chunk_hdr h = {.group_id = 9,
                             .total = 100000,
                             .off = 1000,
                             .nfloats = 2501,
                             .step = 3,
                             .seg = 1};
    uint32_t per;
    /* A slot of a header and 1000 floats: 3 pieces, the last of 501. */
    size_t n = pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 4000, &per);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(per, 1000);
    uint64_t next = h.off;
    uint32_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        struct pr_chunk_hdr p;
        pr_rdma_piece(&h, per, i, &p);
        ck_assert_uint_eq(p.off, next);
        ck_assert_uint_eq(p.group_id, 9);
        ck_assert_uint_eq(p.step, 3);
        ck_assert_uint_eq(p.seg, 1);
        ck_assert_uint_eq(p.total, 100000);
        next += p.nfloats;
        sum += p.nfloats;
    }
    ck_assert_uint_eq(sum, 2501);
    struct pr_chunk_hdr last;
    pr_rdma_piece(&h, per, 2, &last);
    ck_assert_uint_eq(last.nfloats, 501);
}
END_TEST

START_TEST(test_rdma_flow_pieces_edge_cases)
{
    uint32_t per;
    struct pr_chunk_hdr empty = {.nfloats = 0};
    /* An empty segment still needs its one (empty) write. */
    ck_assert_uint_eq(pr_rdma_pieces(&empty, 4096, &per), 1);
    struct pr_chunk_hdr h = {.nfloats = 1000};
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 4000, &per), 1);
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 3999, &per), 2);
    /* A slot that cannot hold a header and a float is refused. */
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 3, &per), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rdma_flow");
    TCase *tc = tcase_create("credits");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_rdma_flow_credit_window);
    tcase_add_test(tc, test_rdma_flow_credit_overflow_refused);
    tcase_add_test(tc, test_rdma_flow_credit_return_batches);
    tcase_add_test(tc, test_rdma_flow_imm_round_trip);
    suite_add_tcase(s, tc);
    tc = tcase_create("pieces");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_rdma_flow_pieces_cover_chunk);
    tcase_add_test(tc, test_rdma_flow_pieces_edge_cases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
