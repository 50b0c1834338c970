/* SPDX-License-Identifier: MIT */
/*
 * The RDMA transport's bookkeeping without a device: credits, the
 * immediate-data encoding and the cutting of chunks into slot-sized
 * writes (daemon/xport/rdma/rdma_flow.h).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "daemon/engine/wire.h"
#include "daemon/xport/rdma/rdma_flow.h"
#include "tests/check_run.h"

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

START_TEST(test_rdma_flow_credit_return_threshold)
{
    struct pr_credit c;
    pr_credit_init(&c, 8);
    ck_assert_uint_eq(pr_credit_due(&c, 8), 0);
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 8), 0); /* 1 of 8 held: waits */
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 8), 2); /* a quarter: a message */
    ck_assert_uint_eq(pr_credit_due(&c, 8), 0); /* forgotten once due */
    /* With fewer than 4 slots of its own a side holds none back. */
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 3), 1);
    pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_due(&c, 1), 1);
}
END_TEST

START_TEST(test_rdma_flow_credit_piggyback_takes_all)
{
    struct pr_credit c;
    pr_credit_init(&c, 8);
    ck_assert_uint_eq(pr_credit_piggyback(&c), 0);
    for (int i = 0; i < 3; i++)
        pr_credit_consumed(&c);
    ck_assert_uint_eq(pr_credit_piggyback(&c), 3);
    ck_assert_uint_eq(pr_credit_due(&c, 4), 0); /* none left to send */
    /* More than an immediate can carry: the rest stays held. */
    c.consumed = PR_IMM_PIGGY_MAX + 2;
    ck_assert_uint_eq(pr_credit_piggyback(&c), PR_IMM_PIGGY_MAX);
    ck_assert_uint_eq(c.consumed, 2);
}
END_TEST

START_TEST(test_rdma_flow_imm_round_trip)
{
    uint32_t n, back;
    ck_assert_int_eq(pr_imm_decode(pr_imm_data(5, 0), 8, &n, &back), 0);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(back, 0);
    ck_assert_int_eq(pr_imm_decode(pr_imm_data(1023, 1024), 1024, &n, &back),
                     0);
    ck_assert_uint_eq(n, 1023);
    ck_assert_uint_eq(back, 1024);
    /* A data write from a daemon that returns no credits in it. */
    ck_assert_int_eq(pr_imm_decode(7, 8, &n, &back), 0);
    ck_assert_uint_eq(n, 7);
    ck_assert_uint_eq(back, 0);
    ck_assert_int_eq(pr_imm_decode(pr_imm_credit(3), 8, &n, &back), 1);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(back, 0);
    /* A slot the receiver does not have, or a credit message of none. */
    ck_assert_int_eq(pr_imm_decode(pr_imm_data(8, 1), 8, &n, &back), -EPROTO);
    ck_assert_int_eq(pr_imm_decode(PR_IMM_CREDIT, 8, &n, &back), -EPROTO);
}
END_TEST

/*
 * Two sides writing to each other over an in-order link, in random
 * interleavings, with the transport's rules: a write takes a credit and
 * the credits held along; after each chunk the receiver sends a credit
 * message only when pr_credit_due says so. No slot is written while its
 * chunk is unread, and every write gets through (no deadlock), also when
 * one side never sends data that could carry its credits.
 */
#define SIM_MSGS 64
struct sim_side {
    struct pr_credit cr; /* sending to the other side */
    uint32_t own_slots;
    int busy[16]; /* own slots written, not yet consumed */
    int to_send;
    /* the link towards the other side: FIFO of (is_credit, slot, back) */
    uint32_t q[SIM_MSGS * 2][3];
    size_t qh, qt;
};

static uint64_t sim_rng = 0x2545f4914f6cdd1dULL;
static uint32_t sim_rand(uint32_t n)
{
    sim_rng ^= sim_rng << 13;
    sim_rng ^= sim_rng >> 7;
    sim_rng ^= sim_rng << 17;
    return (uint32_t)(sim_rng % n);
}

static void sim_push(struct sim_side *s, uint32_t credit, uint32_t a,
                     uint32_t b)
{
    ck_assert_uint_lt(s->qt, SIM_MSGS * 2);
    s->q[s->qt][0] = credit;
    s->q[s->qt][1] = a;
    s->q[s->qt][2] = b;
    s->qt++;
}

/* Delivers the next message from `from` to `to`; 0 if there was none. */
static int sim_deliver(struct sim_side *from, struct sim_side *to)
{
    if (from->qh == from->qt)
        return 0;
    const uint32_t *m = from->q[from->qh++];
    uint32_t back = m[0] ? m[1] : m[2];
    ck_assert_int_eq(pr_credit_give(&to->cr, back), 0);
    if (m[0])
        return 1;
    ck_assert(to->busy[m[1]]);
    to->busy[m[1]] = 0; /* the engine read it */
    pr_credit_consumed(&to->cr);
    uint32_t due = pr_credit_due(&to->cr, to->own_slots);
    if (due)
        sim_push(to, 1, due, 0);
    return 1;
}

static int sim_write(struct sim_side *from, struct sim_side *to)
{
    uint32_t slot;
    if (from->to_send == 0 || pr_credit_take(&from->cr, &slot) < 0)
        return 0;
    ck_assert(!to->busy[slot]); /* never overwritten unread */
    to->busy[slot] = 1;
    sim_push(from, 0, slot, pr_credit_piggyback(&from->cr));
    from->to_send--;
    return 1;
}

START_TEST(test_rdma_flow_credits_never_deadlock)
{
    static const uint32_t slots[][2] = {{8, 8}, {1, 1}, {3, 8}, {16, 2}};
    static const int sends[][2] = {
        {SIM_MSGS / 2, SIM_MSGS / 2}, {SIM_MSGS / 2, 0}, {SIM_MSGS / 2, 3}};
    for (size_t i = 0; i < 4; i++) {
        for (size_t j = 0; j < 3; j++) {
            for (int run = 0; run < 50; run++) {
                struct sim_side a = {.own_slots = slots[i][0],
                                     .to_send = sends[j][0]},
                                b = {.own_slots = slots[i][1],
                                     .to_send = sends[j][1]};
                pr_credit_init(&a.cr, b.own_slots);
                pr_credit_init(&b.cr, a.own_slots);
                for (;;) {
                    int (*const acts[4])(struct sim_side *,
                                         struct sim_side *) = {
                        sim_write, sim_write, sim_deliver, sim_deliver};
                    struct sim_side *from[4] = {&a, &b, &a, &b};
                    struct sim_side *to[4] = {&b, &a, &b, &a};
                    uint32_t k = sim_rand(4);
                    int moved = 0;
                    for (uint32_t t = 0; t < 4 && !moved; t++)
                        moved = acts[(k + t) % 4](from[(k + t) % 4],
                                                  to[(k + t) % 4]);
                    if (!moved)
                        break;
                }
                ck_assert_msg(a.to_send == 0 && b.to_send == 0,
                              "slots %u/%u sends %d/%d: stuck with %d/%d "
                              "writes left",
                              slots[i][0], slots[i][1], sends[j][0],
                              sends[j][1], a.to_send, b.to_send);
            }
        }
    }
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

/* pr_rdma_write_ok for a chunk of n fp32 floats. */
static int write_ok(uint32_t byte_len, size_t slot, uint32_t n)
{
    struct pr_chunk_hdr h = {.nfloats = n};
    return pr_rdma_write_ok(byte_len, slot, &h);
}

/*
 * A peer writes where its rkey lets it: across several of our slots at
 * once. A write longer than one slot is refused even when the header in
 * the named slot claims exactly that many floats, or the engine would read
 * past the slots' mapping.
 */
START_TEST(test_rdma_flow_write_checked_against_slot)
{
    const size_t slot = 4160;
    const uint32_t hdr = PR_CHUNK_HDR_LEN;
    uint32_t fit = (uint32_t)((slot - hdr) / sizeof(float));
    ck_assert_int_eq(write_ok(hdr + fit * 4, slot, fit), 0);
    ck_assert_int_eq(write_ok(hdr, slot, 0), 0);
    ck_assert_int_eq(write_ok(hdr + 4, slot, 1), 0);
    /* Two slots' worth, header and length agreeing. */
    uint32_t two = (uint32_t)((2 * slot - hdr) / sizeof(float));
    ck_assert_int_eq(write_ok(hdr + two * 4, slot, two), -EPROTO);
    ck_assert_int_eq(write_ok((uint32_t)slot + 4, slot, fit + 1), -EPROTO);
    /* Length and header disagree, or no header at all. */
    ck_assert_int_eq(write_ok(hdr + 8, slot, 1), -EPROTO);
    ck_assert_int_eq(write_ok(hdr + 4, slot, 2), -EPROTO);
    ck_assert_int_eq(write_ok(hdr - 1, slot, 0), -EPROTO);
    ck_assert_int_eq(write_ok(0, slot, 0), -EPROTO);
    /* nfloats * 4 must not wrap to match a short write. */
    ck_assert_int_eq(write_ok(hdr, slot, 0x40000000u), -EPROTO);
}
END_TEST

/*
 * Encoded chunks: pieces as many floats as a slot's bytes hold in the
 * encoding, whole int8 blocks (a piece's bytes start on one of the
 * chunk's blocks), and writes whose length is the encoded payload's.
 */
START_TEST(test_rdma_flow_encoded_pieces)
{
    uint32_t per;
    struct pr_chunk_hdr h = {.off = 100, .nfloats = 1000, .enc = PR_WIRE_BF16};
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 2000, &per), 1);
    ck_assert_uint_eq(per, 1000);
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 1999, &per), 2);
    h.enc = PR_WIRE_INT8;
    /* 4096 bytes: 15 blocks of 260. */
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 4096, &per), 1);
    ck_assert_uint_eq(per, 15 * PR_WIRE_BLOCK);
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 1000, &per), 2);
    ck_assert_uint_eq(per, 3 * PR_WIRE_BLOCK);
    struct pr_chunk_hdr p;
    pr_rdma_piece(&h, per, 1, &p);
    ck_assert_uint_eq(p.off, 100 + 768);
    ck_assert_uint_eq(p.nfloats, 1000 - 768);
    ck_assert_uint_eq(p.enc, PR_WIRE_INT8);
    /* Less than a block's bytes: no piece fits. */
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 259, &per), 0);
    /* An encoding that is none. */
    h.enc = PR_WIRE_COUNT;
    ck_assert_uint_eq(pr_rdma_pieces(&h, PR_CHUNK_HDR_LEN + 4096, &per), 0);

    const size_t slot = 4160;
    const uint32_t hdr = PR_CHUNK_HDR_LEN;
    struct pr_chunk_hdr b = {.nfloats = 3, .enc = PR_WIRE_BF16};
    ck_assert_int_eq(pr_rdma_write_ok(hdr + 6, slot, &b), 0);
    ck_assert_int_eq(pr_rdma_write_ok(hdr + 12, slot, &b), -EPROTO);
    struct pr_chunk_hdr q = {.nfloats = 257, .enc = PR_WIRE_INT8};
    ck_assert_int_eq(pr_rdma_write_ok(hdr + 257 + 8, slot, &q), 0);
    ck_assert_int_eq(pr_rdma_write_ok(hdr + 257 + 4, slot, &q), -EPROTO);
    q.enc = 7;
    ck_assert_int_eq(pr_rdma_write_ok(hdr + 257 + 8, slot, &q), -EPROTO);
}
END_TEST

/* What a peer may advertise: no slots so small a chunk becomes thousands
 * of writes, none beyond the largest chunk, at most 1024 of them. */
START_TEST(test_rdma_flow_peer_slots_bounded)
{
    ck_assert_int_eq(pr_rdma_slots_ok(8, PR_RDMA_SLOT_MIN), 0);
    ck_assert_int_eq(pr_rdma_slots_ok(1024, PR_RDMA_SLOT_MAX), 0);
    ck_assert_int_eq(pr_rdma_slots_ok(8, PR_CHUNK_HDR_LEN + 4), -EPROTO);
    ck_assert_int_eq(pr_rdma_slots_ok(8, PR_RDMA_SLOT_MIN - 1), -EPROTO);
    ck_assert_int_eq(pr_rdma_slots_ok(8, PR_RDMA_SLOT_MAX + 1), -EPROTO);
    ck_assert_int_eq(pr_rdma_slots_ok(0, PR_RDMA_SLOT_MIN), -EPROTO);
    ck_assert_int_eq(pr_rdma_slots_ok(1025, PR_RDMA_SLOT_MIN), -EPROTO);
    /* This daemon's own slots at transport.chunk_kb's bounds (4, 65536
     * KiB; rounded up to 64 bytes as rdma.c does) pass a peer's check. */
    ck_assert_int_eq(
        pr_rdma_slots_ok(1, (PR_CHUNK_HDR_LEN + 4096 + 63) / 64 * 64), 0);
    ck_assert_int_eq(
        pr_rdma_slots_ok(1, (PR_CHUNK_HDR_LEN + (64u << 20) + 63) / 64 * 64),
        0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rdma_flow");
    TCase *tc = tcase_create("credits");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_rdma_flow_credit_window);
    tcase_add_test(tc, test_rdma_flow_credit_overflow_refused);
    tcase_add_test(tc, test_rdma_flow_credit_return_threshold);
    tcase_add_test(tc, test_rdma_flow_credit_piggyback_takes_all);
    tcase_add_test(tc, test_rdma_flow_imm_round_trip);
    tcase_add_test(tc, test_rdma_flow_credits_never_deadlock);
    suite_add_tcase(s, tc);
    tc = tcase_create("pieces");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_rdma_flow_pieces_cover_chunk);
    tcase_add_test(tc, test_rdma_flow_pieces_edge_cases);
    tcase_add_test(tc, test_rdma_flow_encoded_pieces);
    suite_add_tcase(s, tc);
    tc = tcase_create("peer_input");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_rdma_flow_write_checked_against_slot);
    tcase_add_test(tc, test_rdma_flow_peer_slots_bounded);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
