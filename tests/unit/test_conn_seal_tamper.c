/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for sealed connections (daemon/base/conn.c with seal.h),
 * what must not get through: between two pr_conn after the cluster
 * key's handshake (tests/unit/seal_fixture.h), the relay alters a byte
 * of a data frame or message (header, prefix, payload, tags), replays,
 * drops or swaps whole frames, or the two sides hashed different
 * transcripts. The receiving conn closes with the reason; the altered
 * frame never reaches its owner (a landing begun for it ends < 0), and
 * nothing after it does; what came before it did, intact.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/conn.h"
#include "daemon/base/seal.h"
#include "proto/frame.h"
#include "tests/unit/seal_fixture.h"

#define T PR_SEAL_TAG_LEN

/*
 * One byte altered on the way S -> C, in the second of three data
 * frames (the first and third clean, a ping after them); where:
 */
static const struct {
    const char *what;
    size_t len;    /* the altered frame's payload */
    int at;        /* byte offset in the frame; < 0: from its end */
    int status;    /* C's close status */
    int cut_ended; /* a landing began for it, ended < 0: 1 must, 2 may */
} tampers[] = {
    {"landed payload", 1 << 20, PR_FRAME_HDR_LEN + SP_PREFIX + T + 300000,
     -EBADMSG, 1},
    {"landed payload's tag", 1 << 20, -1, -EBADMSG, 1},
    {"landed payload, the copied part", 4095,
     PR_FRAME_HDR_LEN + SP_PREFIX + T + 100, -EBADMSG, 1},
    {"prefix", 1 << 20, PR_FRAME_HDR_LEN + 3, -EBADMSG, 0},
    {"prefix's tag", 1 << 20, PR_FRAME_HDR_LEN + SP_PREFIX + 5, -EBADMSG, 0},
    {"header flags", 1 << 20, 7, -EBADMSG, 0},
    {"header type", 1 << 20, 5, -EPROTO, 0},
    {"small frame's payload", 100, PR_FRAME_HDR_LEN + SP_PREFIX + T + 50,
     -EBADMSG, 2},
    {"small frame's payload tag", 100, -16, -EBADMSG, 2},
};
#define NTAMPERS (int)(sizeof(tampers) / sizeof(tampers[0]))

/*
 * The frame never reaches the owner with its bytes (a landing begun for
 * it ends < 0, and through the bounce buffer it wrote nothing at the
 * owner's place), C closes with the reason, and nothing after it
 * arrives. Landings go through the bounce buffer, or (_i odd) open in
 * place.
 */
START_TEST(test_conn_seal_tampered_data)
{
    uint32_t cipher = pr_seal_pick(pr_seal_ciphers());
    int in_place = _i % 2, which = _i / 2;
    struct sp t;
    sp_init(&t, cipher, &sp_whole_ops, &sp_land_ops, 0);
    t.c.in_place = in_place;
    sp_run_until(&t, sp_both_up);
    const size_t first = 5000, len = tampers[which].len;
    int at = tampers[which].at;
    size_t frame = sp_data_wire_len(len);
    size_t off = t.wire[SP_S_TO_C].len + sp_data_wire_len(first) +
                 (at >= 0 ? (size_t)at : frame - (size_t)-at);
    t.wire[SP_S_TO_C].flip_at = off;
    sp_send_data(&t.s, 0, first);
    sp_send_data(&t.s, 1, len);
    sp_send_data(&t.s, 2, 3000);
    sp_send_ping(&t.s, 77);
    sp_run_until(&t, sp_c_closed);
    ck_assert_msg(t.c.close_status == tampers[which].status,
                  "%s: closed with %d", tampers[which].what, t.c.close_status);
    ck_assert_uint_ge(t.wire[SP_S_TO_C].len, off + 1);
    sp_check_event(&t.c, 0, first + sp_data_wire_len(0) > 4096 ? 'L' : 'D', 0,
                   first);
    int cut = tampers[which].cut_ended;
    if (cut == 2)
        cut = t.c.nev > 1;
    ck_assert_uint_eq(t.c.nev, 1 + (size_t)cut);
    if (cut) {
        ck_assert_int_eq(t.c.ev[1].kind, 'X');
        ck_assert_int_eq(t.c.ev[1].k, 1);
        ck_assert_int_eq(t.c.ev[1].status, -EBADMSG);
        ck_assert_int_eq(t.c.ev[1].in_place, in_place);
        if (!in_place)
            ck_assert_msg(t.c.ev[1].untouched, "%s: bytes written at dst",
                          tampers[which].what);
    }
    for (size_t i = 0; i < t.c.nev; i++)
        ck_assert(t.c.ev[i].kind != 'D' || t.c.ev[i].ok);
    ck_assert_int_eq(t.c.begins, t.c.ends);
    sp_fini(&t);
}
END_TEST

/*
 * What S must do with its second sealed ping altered at byte `at` of its
 * frame: close with this status at once, or (0) wait for the rest of a
 * frame whose length grew within the limit.
 */
static int msg_tamper_status(size_t at, size_t frame)
{
    uint8_t h[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr fh;
    pr_frame_hdr_encode(h, (uint32_t)(frame - PR_FRAME_HDR_LEN), PR_FRAME_MSG,
                        0);
    if (at >= PR_FRAME_HDR_LEN)
        return -EBADMSG;
    h[at] ^= 0x10;
    int rc = pr_frame_hdr_decode(h, SP_MAX_FRAME + 2 * T, &fh);
    if (rc < 0)
        return rc;
    if (fh.len + PR_FRAME_HDR_LEN > frame)
        return 0;
    return fh.len < T ? -EPROTO : -EBADMSG;
}

/*
 * A sealed message altered on the way C -> S, at each byte of its frame
 * in turn (header, body, tag): S takes the ping before it, never this
 * one or the one after, and closes with the reason; a length that grew
 * leaves S waiting until C goes.
 */
START_TEST(test_conn_seal_tampered_message)
{
    uint32_t cipher = pr_seal_pick(pr_seal_ciphers());
    size_t frame = sp_ping_wire_len(6);
    int waited = 0, refused = 0;
    for (size_t at = 0; at < frame; at++) {
        struct sp t;
        sp_init(&t, cipher, &sp_whole_ops, &sp_whole_ops, 0);
        sp_run_until(&t, sp_both_up);
        t.wire[SP_C_TO_S].flip_at =
            t.wire[SP_C_TO_S].len + sp_ping_wire_len(5) + at;
        sp_send_ping(&t.c, 5);
        sp_send_ping(&t.c, 6);
        sp_send_ping(&t.c, 7);
        int want = msg_tamper_status(at, frame);
        if (want == 0) {
            sp_run_events(&t, &t.s, 1);
            /* Turns more: what was sent is in, and still no close. */
            for (int i = 0; i < 10; i++)
                uv_run(&t.loop, UV_RUN_NOWAIT);
            ck_assert_int_eq(t.s.closes, 0);
            pr_conn_close(t.c.c, 0);
            waited++;
        }
        sp_run_until(&t, sp_s_closed);
        ck_assert_msg(t.s.close_status == want, "byte %zu: closed with %d", at,
                      t.s.close_status);
        ck_assert_uint_eq(t.s.nev, 1);
        sp_check_event(&t.s, 0, 'M', 5, 0);
        refused += want < 0;
        sp_fini(&t);
    }
    ck_assert_int_gt(waited, 0);
    ck_assert_int_eq(waited + refused, (int)frame);
}
END_TEST

/*
 * Whole sealed frames out of their place on the way S -> C, of four
 * pings: the second sent twice (replayed), left out (dropped), or after
 * the third (swapped). C takes what came in order before the first
 * frame out of place (two pings, or one), then closes -EBADMSG there and
 * takes nothing after.
 */
START_TEST(test_conn_seal_replayed_dropped_swapped)
{
    uint32_t cipher = sp_cipher_of(_i / 3);
    if (!cipher)
        return;
    struct sp t;
    sp_init(&t, cipher, &sp_whole_ops, &sp_whole_ops, 0);
    sp_run_until(&t, sp_both_up);
    struct sp_wire *w = &t.wire[SP_S_TO_C];
    size_t f1 = w->len + sp_ping_wire_len(1), f2 = f1 + sp_ping_wire_len(2);
    size_t f3 = f2 + sp_ping_wire_len(3);
    switch (_i % 3) {
    case 0:
        w->copy_a = f1, w->copy_b = f2, w->copy_after = f2;
        break;
    case 1:
        w->drop_a = f1, w->drop_b = f2;
        break;
    default:
        w->drop_a = f1, w->drop_b = f2;
        w->copy_a = f1, w->copy_b = f2, w->copy_after = f3;
        break;
    }
    for (uint32_t k = 1; k <= 4; k++)
        sp_send_ping(&t.s, k);
    sp_run_until(&t, sp_c_closed);
    ck_assert_int_eq(t.c.close_status, -EBADMSG);
    size_t in_order = _i % 3 == 0 ? 2 : 1;
    ck_assert_uint_eq(t.c.nev, in_order);
    for (uint32_t k = 0; k < in_order; k++)
        sp_check_event(&t.c, k, 'M', k + 1, 0);
    sp_fini(&t);
}
END_TEST

/*
 * C's transcript lacks the Challenge (it began hashing one frame late):
 * both sides seal under different keys, and the first sealed frame
 * either way fails to open and closes its receiver.
 */
START_TEST(test_conn_seal_transcript_mismatch)
{
    uint32_t cipher = pr_seal_pick(pr_seal_ciphers());
    struct sp t;
    sp_init(&t, cipher, &sp_whole_ops, &sp_whole_ops, 1);
    sp_run_until(&t, sp_both_up);
    struct sp_side *from = _i ? &t.c : &t.s, *to = _i ? &t.s : &t.c;
    sp_send_ping(from, 1);
    sp_run_until(&t, _i ? sp_s_closed : sp_c_closed);
    ck_assert_int_eq(to->close_status, -EBADMSG);
    ck_assert_uint_eq(to->nev, 0);
    sp_fini(&t);
}
END_TEST

static Suite *conn_seal_tamper_suite(void)
{
    Suite *s = suite_create("conn_seal_tamper");
    TCase *tc = tcase_create("altered");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_conn_seal_tampered_data, 0, 2 * NTAMPERS);
    tcase_add_test(tc, test_conn_seal_tampered_message);
    tcase_add_loop_test(tc, test_conn_seal_replayed_dropped_swapped, 0,
                        3 * SP_NCIPHERS);
    tcase_add_loop_test(tc, test_conn_seal_transcript_mismatch, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sp_main(conn_seal_tamper_suite());
}
