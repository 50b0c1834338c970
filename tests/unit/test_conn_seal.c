/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for sealed connections (daemon/base/conn.c with seal.h),
 * what gets through: two pr_conn on one loop after the cluster key's
 * handshake (tests/unit/seal_fixture.h) exchange messages and data
 * frames both ways, whole (on_data) and read straight into place
 * (on_data_begin/end), of sizes from 0 bytes to 1 MiB, across re-keys,
 * all intact and in order; what crosses the relay between them is not
 * the clear bytes (and is, through the same relay, without a key: the
 * check can see them). pr_conn_seal refuses without a transcript. The
 * frames altered on the way are test_conn_seal_tamper.c's.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/conn.h"
#include "daemon/base/conn_io.h"
#include "daemon/base/seal.h"
#include "proto/frame.h"
#include "tests/unit/seal_fixture.h"

#define T PR_SEAL_TAG_LEN

/*
 * Messages both ways, intact and in order; a message whose text is
 * plain in its packed form does not cross in clear (and does, through
 * the same relay, when the link is not keyed: the check can see it).
 */
START_TEST(test_conn_seal_messages)
{
    uint32_t cipher = sp_cipher_of(_i);
    if (!cipher)
        return;
    for (int keyed = 1; keyed >= 0; keyed--) {
        struct sp t;
        sp_init(&t, keyed ? cipher : 0, &sp_whole_ops, &sp_whole_ops, 0);
        sp_run_until(&t, sp_both_up);
        ck_assert_int_eq(t.s.c->seal != NULL, keyed);
        ck_assert_int_eq(t.c.c->seal != NULL, keyed);
        if (keyed)
            ck_assert_uint_eq(t.c.cipher, cipher);
        for (uint32_t k = 0; k < 20; k++) {
            sp_send_ping(&t.s, 100 + k);
            sp_send_ping(&t.c, 200 + k);
        }
        sp_send_marker(&t.s);
        sp_run_events(&t, &t.c, 21);
        sp_run_events(&t, &t.s, 20);
        for (uint32_t k = 0; k < 20; k++) {
            sp_check_event(&t.c, k, 'M', 100 + k, 0);
            sp_check_event(&t.s, k, 'M', 200 + k, 0);
        }
        sp_check_event(&t.c, 20, 'E', 7, 0);
        ck_assert(t.c.ev[20].ok);
        int seen = memmem(t.wire[SP_S_TO_C].b, t.wire[SP_S_TO_C].len, SP_MARKER,
                          strlen(SP_MARKER)) != NULL;
        ck_assert_int_eq(seen, !keyed);
        sp_fini(&t);
    }
}
END_TEST

static const size_t data_sizes[] = {0, 1, 4095, 65536 + 7, 1 << 20};
#define NDATA (sizeof(data_sizes) / sizeof(data_sizes[0]))

/*
 * Data frames of every size both ways, with messages between them. C
 * lands them (on_data_begin, on_data_end: through the bounce buffer, or
 * in mode 3 opened in place), or in mode 2 lands even numbers and has
 * the others come whole (their prefix opened already); S takes them
 * whole (mode 0) or lands them. The landed bytes are the ones sent,
 * frames too large for one read land, and the payloads are not on the
 * wire. In the second half of the range each conn has an I/O thread
 * (conn_io.h), which writes the sealed records of large frames and reads
 * large landings' records and tags: all the same holds.
 */
START_TEST(test_conn_seal_data)
{
    int io = _i >= 4 * SP_NCIPHERS, j = _i % (4 * SP_NCIPHERS);
    uint32_t cipher = sp_cipher_of(j / 4);
    if (!cipher)
        return;
    int land = j % 4 > 0, refuse = j % 4 == 2;
    struct sp t;
    sp_init(&t, cipher, land ? &sp_land_ops : &sp_whole_ops, &sp_land_ops, 0);
    t.c.refuse_odd = refuse;
    t.c.in_place = t.s.in_place = j % 4 == 3;
    sp_run_until(&t, sp_both_up);
    struct pr_conn_io *ios[2] = {NULL, NULL};
    if (io) {
        for (int i = 0; i < 2; i++) {
            ck_assert_int_eq(pr_conn_io_create(&t.loop, &ios[i]), 0);
            ck_assert_int_eq(pr_conn_set_io(i ? t.c.c : t.s.c, ios[i]), 0);
        }
    }
    for (uint32_t k = 0; k < NDATA; k++) {
        sp_send_data(&t.s, k, data_sizes[k]);
        sp_send_ping(&t.s, 1000 + k);
        sp_send_data(&t.c, 10 + k, data_sizes[k]);
    }
    sp_run_events(&t, &t.c, 2 * NDATA);
    sp_run_events(&t, &t.s, NDATA);
    size_t landed = 0, slanded = 0;
    for (uint32_t k = 0; k < NDATA; k++) {
        size_t len = data_sizes[k];
        /*
         * C lands what cannot come whole in its first read (4 KiB); a
         * smaller frame lands too when a read ends inside it.
         */
        char kind = t.c.ev[2 * k].kind;
        if (refuse && k % 2)
            ck_assert_int_eq(kind, 'D');
        else if (sp_data_wire_len(len) > 4096)
            ck_assert_int_eq(kind, 'L');
        sp_check_event(&t.c, 2 * k, kind == 'L' ? 'L' : 'D', k, len);
        sp_check_event(&t.c, 2 * k + 1, 'M', 1000 + k, 0);
        landed += kind == 'L';
        char skind = t.s.ev[k].kind;
        if (!land || sp_data_wire_len(len) > 4096)
            ck_assert_int_eq(skind, land ? 'L' : 'D');
        sp_check_event(&t.s, k, skind == 'L' ? 'L' : 'D', 10 + k, len);
        slanded += skind == 'L';
        if (len >= 64) {
            uint8_t clear[64];
            for (size_t i = 0; i < sizeof(clear); i++)
                clear[i] = sp_pat(k, len / 2 + i);
            ck_assert_ptr_null(memmem(t.wire[SP_S_TO_C].b,
                                      t.wire[SP_S_TO_C].len, clear,
                                      sizeof(clear)));
        }
    }
    ck_assert_uint_ge(landed, refuse ? 2 : 3);
    ck_assert_uint_eq(t.c.c->frames_landed, landed);
    ck_assert_uint_eq(t.s.c->frames_landed, slanded);
    ck_assert_uint_ge(slanded, land ? 3 : 0);
    if (io) {
        /*
         * C read S's 1 MiB record on its thread, but for what one read
         * of the loop's (at most 64 KiB) brought before its landing
         * began; both wrote theirs.
         */
        ck_assert_uint_ge(pr_conn_io_read(ios[1]), (1u << 20) - (64u << 10));
        ck_assert_uint_ge(pr_conn_io_written(ios[1]), 1u << 20);
        ck_assert_uint_ge(pr_conn_io_written(ios[0]), 1u << 20);
        /* S lands C's (modes 1-3): on its thread too. */
        if (land)
            ck_assert_uint_ge(pr_conn_io_read(ios[0]),
                              (1u << 20) - (64u << 10));
        /* The conns let go of the threads as they close, then they go. */
        pr_conn_close(t.s.c, 0);
        pr_conn_close(t.c.c, 0);
        pr_conn_io_destroy(ios[0], NULL, NULL);
        pr_conn_io_destroy(ios[1], NULL, NULL);
    }
    sp_fini(&t);
}
END_TEST

/*
 * Keys move on every 64 KiB sealed (rekey_bytes set on both sides once
 * sealed): data frames landed and whole, and messages, both ways across
 * many boundaries, all intact; each side's send count of re-keys
 * is the other's receive count.
 */
START_TEST(test_conn_seal_rekey)
{
    uint32_t cipher = sp_cipher_of(_i);
    if (!cipher)
        return;
    struct sp t;
    sp_init(&t, cipher, &sp_land_ops, &sp_land_ops, 0);
    sp_run_until(&t, sp_both_up);
    t.s.c->seal->rekey_bytes = t.c.c->seal->rekey_bytes = 65536;
    const uint32_t n = 20;
    for (uint32_t k = 0; k < n; k++) {
        size_t len = (size_t)k * 37000 % 300000;
        sp_send_data(&t.s, k, len);
        sp_send_ping(&t.s, 500 + k);
        sp_send_data(&t.c, 100 + k, len / 2);
    }
    sp_run_events(&t, &t.c, 2 * n);
    sp_run_events(&t, &t.s, n);
    for (uint32_t k = 0; k < n; k++) {
        size_t len = (size_t)k * 37000 % 300000;
        char kind = t.c.ev[2 * k].kind == 'L' ? 'L' : 'D';
        sp_check_event(&t.c, 2 * k, kind, k, len);
        sp_check_event(&t.c, 2 * k + 1, 'M', 500 + k, 0);
        kind = t.s.ev[k].kind == 'L' ? 'L' : 'D';
        sp_check_event(&t.s, k, kind, 100 + k, len / 2);
    }
    ck_assert_uint_gt(t.s.c->seal->tx.rekeys, 20);
    ck_assert_uint_gt(t.c.c->seal->tx.rekeys, 10);
    ck_assert_uint_eq(t.s.c->seal->tx.rekeys, t.c.c->seal->rx.rekeys);
    ck_assert_uint_eq(t.c.c->seal->tx.rekeys, t.s.c->seal->rx.rekeys);
    sp_fini(&t);
}
END_TEST

/*
 * pr_conn_seal needs a transcript begun (-EINVAL without one), seals
 * once, and takes one cipher this machine has (not none, not two); a
 * transcript does not begin twice, nor once sealed.
 */
START_TEST(test_conn_seal_needs_transcript)
{
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct pr_auth_key key = {.seal = pr_seal_ciphers()};
    uint8_t n1[PR_AUTH_NONCE_LEN] = {1}, n2[PR_AUTH_NONCE_LEN] = {2};
    const uint32_t ok = PR_SEAL_CHACHA20POLY1305;
    struct pr_conn *c[5];
    for (int i = 0; i < 5; i++) {
        c[i] = pr_conn_create_pipe(&loop, SP_MAX_FRAME, &sp_whole_ops, NULL);
        ck_assert_ptr_nonnull(c[i]);
    }
    /* Unkeyed: no transcript, no seal. */
    ck_assert_int_eq(pr_conn_seal(c[0], ok, &key, 'S', n1, n2), -EINVAL);
    ck_assert_ptr_null(c[0]->seal);
    /* A transcript, then the seal; neither again. */
    ck_assert_int_eq(pr_conn_transcript_start(c[1]), 0);
    ck_assert_int_eq(pr_conn_transcript_start(c[1]), -EINVAL);
    ck_assert_int_eq(pr_conn_seal(c[1], ok, &key, 'C', n1, n2), 0);
    ck_assert_ptr_nonnull(c[1]->seal);
    ck_assert_ptr_null(c[1]->transcript);
    ck_assert_int_eq(pr_conn_seal(c[1], ok, &key, 'C', n1, n2), -EINVAL);
    ck_assert_int_eq(pr_conn_transcript_start(c[1]), -EINVAL);
    /* No cipher, two at once, or a role that is not one: refused. */
    ck_assert_int_eq(pr_conn_transcript_start(c[2]), 0);
    ck_assert_int_eq(
        pr_conn_seal(c[2], PR_SEAL_AES256GCM | ok, &key, 'C', n1, n2), -EINVAL);
    ck_assert_ptr_null(c[2]->seal);
    ck_assert_int_eq(pr_conn_transcript_start(c[4]), 0);
    ck_assert_int_eq(pr_conn_seal(c[4], 0, &key, 'S', n1, n2), -EINVAL);
    ck_assert_ptr_null(c[4]->seal);
    ck_assert_int_eq(pr_conn_transcript_start(c[3]), 0);
    ck_assert_int_eq(pr_conn_seal(c[3], ok, &key, 'x', n1, n2), -EINVAL);
    ck_assert_ptr_null(c[3]->seal);
    for (int i = 0; i < 5; i++)
        pr_conn_detach_close(c[i]);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *conn_seal_suite(void)
{
    Suite *s = suite_create("conn_seal");
    TCase *tc = tcase_create("sealed");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_conn_seal_messages, 0, SP_NCIPHERS);
    tcase_add_loop_test(tc, test_conn_seal_data, 0, 8 * SP_NCIPHERS);
    tcase_add_loop_test(tc, test_conn_seal_rekey, 0, SP_NCIPHERS);
    tcase_add_test(tc, test_conn_seal_needs_transcript);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sp_main(conn_seal_suite());
}
