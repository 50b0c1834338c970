/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the AEAD records of a sealed link (daemon/base/seal.h),
 * plain memory, no loop: a dialling side ('C') and an accepting side
 * ('S') set up from the same key, nonces and transcript exchange records
 * both ways; an altered bit anywhere in a record (ciphertext, tag, the
 * frame header bound to it) fails it, and so does a record out of its
 * place (replayed, dropped, swapped); different handshakes give different
 * keys; both sides move to the next key at the same record, and a side
 * that did not cannot read past the boundary; the record count runs out
 * with -EKEYEXPIRED. Each test runs for each cipher this machine has
 * (AES-256-GCM only where libsodium says AES-NI is there).
 */
#include "daemon/base/seal.h"

#include <check.h>
#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "tests/check_run.h"

#define T PR_SEAL_TAG_LEN

/* The two ciphers in the order the loop tests take them. */
static const uint32_t ciphers[] = {PR_SEAL_CHACHA20POLY1305, PR_SEAL_AES256GCM};
#define NCIPHERS 2

/* What one handshake left both sides with. */
struct hs {
    struct pr_auth_key key;
    uint8_t s_nonce[PR_AUTH_NONCE_LEN];
    uint8_t c_nonce[PR_AUTH_NONCE_LEN];
    uint8_t th[PR_SEAL_HASH_LEN];
    uint32_t cipher;
};

static void hs_init(struct hs *h, uint32_t cipher)
{
    memset(h, 0, sizeof(*h));
    for (int i = 0; i < PR_AUTH_KEY_LEN; i++)
        h->key.k[i] = (uint8_t)(i * 7 + 1);
    h->key.seal = pr_seal_ciphers();
    for (int i = 0; i < PR_AUTH_NONCE_LEN; i++) {
        h->s_nonce[i] = (uint8_t)(0x50 + i);
        h->c_nonce[i] = (uint8_t)(0xc0 ^ i);
    }
    for (int i = 0; i < PR_SEAL_HASH_LEN; i++)
        h->th[i] = (uint8_t)(i * 13);
    h->cipher = cipher;
}

static int seal_init(struct pr_seal *s, const struct hs *h, char role)
{
    return pr_seal_init(s, h->cipher, &h->key, role, h->s_nonce, h->c_nonce,
                        h->th);
}

/* Both ends of one connection; 0, or 1 when this machine lacks the cipher. */
static int pair(struct pr_seal *c, struct pr_seal *s, uint32_t cipher)
{
    if (!(pr_seal_ciphers() & cipher))
        return 1;
    struct hs h;
    hs_init(&h, cipher);
    ck_assert_int_eq(seal_init(c, &h, 'C'), 0);
    ck_assert_int_eq(seal_init(s, &h, 'S'), 0);
    ck_assert_uint_eq(c->cipher, cipher);
    return 0;
}

/* The frame header a record of n clear bytes is bound to. */
static void header(uint8_t ad[PR_SEAL_AD_LEN], size_t n)
{
    pr_frame_hdr_encode(ad, (uint32_t)(n + T), PR_FRAME_MSG, 0);
}

/* Byte i of record k's plaintext. */
static uint8_t pat(uint32_t k, size_t i)
{
    return (uint8_t)(((i + 1) * 2654435761u >> 9) + k * 29);
}

/* A record: its header, n bytes (clear, then sealed) and its tag. */
struct rec {
    uint8_t ad[PR_SEAL_AD_LEN];
    uint8_t *b;
    size_t n;
    uint8_t tag[T];
};

/* Record k of n bytes sealed by `tx`; the caller frees r->b. */
static void seal_rec(struct pr_seal *tx, struct rec *r, uint32_t k, size_t n)
{
    r->n = n;
    r->b = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(r->b);
    for (size_t i = 0; i < n; i++)
        r->b[i] = pat(k, i);
    header(r->ad, n);
    ck_assert_int_eq(pr_seal_encrypt(tx, r->ad, r->b, r->b, n, r->tag), 0);
}

/* pr_seal_decrypt of a copy of r (r stays sealed); 1 if it is record k. */
static int open_rec(struct pr_seal *rx, const struct rec *r, uint32_t k,
                    int *rc)
{
    uint8_t *b = malloc(r->n ? r->n : 1);
    ck_assert_ptr_nonnull(b);
    memcpy(b, r->b, r->n);
    *rc = pr_seal_decrypt(rx, r->ad, b, r->n, r->tag);
    int same = 1;
    for (size_t i = 0; i < r->n; i++)
        same &= b[i] == pat(k, i);
    free(b);
    return *rc == 0 && same;
}

static void must_open(struct pr_seal *rx, const struct rec *r, uint32_t k)
{
    int rc;
    ck_assert_msg(open_rec(rx, r, k, &rc), "record %u: rc %d", k, rc);
}

static void must_fail(struct pr_seal *rx, const struct rec *r, uint32_t k)
{
    int rc;
    ck_assert_int_eq(open_rec(rx, r, k, &rc), 0);
    ck_assert_int_eq(rc, -EBADMSG);
}

/* ------------------------------------------------------------------ */

static const size_t sizes[] = {0, 1, 15, 16, 17, 1000, 65536 + 7};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Records of every size, both ways, in place and not; seq counts them. */
START_TEST(test_seal_round_trip)
{
    struct pr_seal c, s, c2;
    if (pair(&c, &s, ciphers[_i]))
        return;
    struct hs h;
    hs_init(&h, ciphers[_i]);
    ck_assert_int_eq(seal_init(&c2, &h, 'C'), 0);
    for (uint32_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        struct rec cs, sc;
        seal_rec(&c, &cs, k, n);
        seal_rec(&s, &sc, k + 100, n);
        /* Sealed: not the clear bytes (8 or more cannot match by chance). */
        if (n >= 8) {
            uint8_t *clear = malloc(n);
            ck_assert_ptr_nonnull(clear);
            for (size_t i = 0; i < n; i++)
                clear[i] = pat(k, i);
            ck_assert(memcmp(clear, cs.b, n) != 0);
            free(clear);
        }
        /* Out of place, the same record as in place. */
        uint8_t *src = malloc(n + 1), *dst = malloc(n + 1), tag[T];
        ck_assert(src && dst);
        for (size_t i = 0; i < n; i++)
            src[i] = pat(k, i);
        ck_assert_int_eq(pr_seal_encrypt(&c2, cs.ad, dst, src, n, tag), 0);
        ck_assert(memcmp(dst, cs.b, n) == 0);
        ck_assert(memcmp(tag, cs.tag, T) == 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(src[i], pat(k, i));
        free(src);
        free(dst);
        must_open(&s, &cs, k);
        must_open(&c, &sc, k + 100);
        free(cs.b);
        free(sc.b);
    }
    ck_assert_uint_eq(c.tx.seq, NSIZES);
    ck_assert_uint_eq(c.rx.seq, NSIZES);
    ck_assert_uint_eq(s.tx.seq, NSIZES);
    ck_assert_uint_eq(s.rx.seq, NSIZES);
    pr_seal_clear(&c);
    pr_seal_clear(&s);
    pr_seal_clear(&c2);
}
END_TEST

/*
 * Each direction has its own key: what C seals S opens and the other
 * way round, but a record is not taken back by a side of the role that
 * sealed it (a reflected record), nor by the sender's own receive key.
 */
START_TEST(test_seal_roles_agree)
{
    struct pr_seal c, s, c2, s2;
    if (pair(&c, &s, ciphers[_i]))
        return;
    ck_assert_int_eq(pair(&c2, &s2, ciphers[_i]), 0);
    struct rec a, b;
    seal_rec(&c, &a, 1, 64);
    seal_rec(&s, &b, 2, 64);
    must_fail(&c2, &a, 1); /* C's record at another C */
    must_fail(&s2, &b, 2); /* S's record at another S */
    must_fail(&c, &a, 1);  /* C's record back at itself */
    must_open(&s, &a, 1);
    must_open(&c2, &b, 2);
    free(a.b);
    free(b.b);
    pr_seal_clear(&c);
    pr_seal_clear(&s);
    pr_seal_clear(&c2);
    pr_seal_clear(&s2);
}
END_TEST

/*
 * One bit flipped anywhere (each byte of the ciphertext, of the tag and
 * of the frame header it is bound to, one bit in turn) fails the record.
 */
START_TEST(test_seal_flipped_bit_fails)
{
    const size_t n = 40;
    for (int where = 0; where < 3; where++) {
        size_t len = where == 0 ? n : where == 1 ? T : PR_SEAL_AD_LEN;
        for (size_t at = 0; at < len; at++) {
            struct pr_seal c, s;
            if (pair(&c, &s, ciphers[_i]))
                return;
            struct rec r;
            seal_rec(&c, &r, 7, n);
            uint8_t *p = where == 0 ? r.b : where == 1 ? r.tag : r.ad;
            p[at] ^= (uint8_t)(1u << (at % 8));
            must_fail(&s, &r, 7);
            /* The record as sealed opens: the bit made the difference. */
            struct pr_seal c2, s2;
            ck_assert_int_eq(pair(&c2, &s2, ciphers[_i]), 0);
            p[at] ^= (uint8_t)(1u << (at % 8));
            must_open(&s2, &r, 7);
            free(r.b);
            pr_seal_clear(&c);
            pr_seal_clear(&s);
            pr_seal_clear(&c2);
            pr_seal_clear(&s2);
        }
    }
}
END_TEST

/* A record opened twice, one skipped, two swapped: each fails. */
START_TEST(test_seal_out_of_order_fails)
{
    struct pr_seal c, s;
    struct rec r[3];
    for (int order = 0; order < 3; order++) {
        if (pair(&c, &s, ciphers[_i]))
            return;
        for (uint32_t k = 0; k < 3; k++)
            seal_rec(&c, &r[k], k, 100);
        if (order == 0) { /* replayed */
            must_open(&s, &r[0], 0);
            must_fail(&s, &r[0], 0);
        } else if (order == 1) { /* record 0 dropped */
            must_fail(&s, &r[1], 1);
            must_fail(&s, &r[2], 2);
        } else { /* 0 and 1 swapped */
            must_fail(&s, &r[1], 1);
        }
        /* In order they all open: the refusals were the order's. */
        pr_seal_clear(&s);
        struct pr_seal c2, s2;
        ck_assert_int_eq(pair(&c2, &s2, ciphers[_i]), 0);
        for (uint32_t k = 0; k < 3; k++)
            must_open(&s2, &r[k], k);
        for (uint32_t k = 0; k < 3; k++)
            free(r[k].b);
        pr_seal_clear(&c);
        pr_seal_clear(&c2);
        pr_seal_clear(&s2);
    }
}
END_TEST

/*
 * Record 0 of the same bytes differs between handshakes that differ in
 * one input (either nonce, the transcript, the cipher, the cluster key),
 * and a receiver whose handshake differs cannot open it.
 */
START_TEST(test_seal_keys_per_connection)
{
    struct hs base;
    hs_init(&base, ciphers[_i]);
    if (!(pr_seal_ciphers() & base.cipher))
        return;
    struct pr_seal c;
    struct rec r0;
    ck_assert_int_eq(seal_init(&c, &base, 'C'), 0);
    seal_rec(&c, &r0, 0, 64);
    pr_seal_clear(&c);
    for (int what = 0; what < 5; what++) {
        struct hs h = base;
        switch (what) {
        case 0:
            h.s_nonce[31] ^= 1;
            break;
        case 1:
            h.c_nonce[0] ^= 0x80;
            break;
        case 2:
            h.th[16] ^= 4;
            break;
        case 3:
            h.cipher ^= PR_SEAL_AES256GCM | PR_SEAL_CHACHA20POLY1305;
            break;
        default:
            h.key.k[5] ^= 2;
            break;
        }
        if (!(pr_seal_ciphers() & h.cipher))
            continue;
        struct pr_seal c1, s1;
        struct rec r;
        ck_assert_int_eq(seal_init(&c1, &h, 'C'), 0);
        seal_rec(&c1, &r, 0, 64);
        ck_assert_msg(memcmp(r.b, r0.b, 64) != 0, "input %d: same bytes", what);
        ck_assert_msg(memcmp(r.tag, r0.tag, T) != 0, "input %d: same tag",
                      what);
        /* The other handshake's receiver refuses the first's record. */
        ck_assert_int_eq(seal_init(&s1, &h, 'S'), 0);
        must_fail(&s1, &r0, 0);
        free(r.b);
        pr_seal_clear(&c1);
        pr_seal_clear(&s1);
    }
    /* And the same handshake's receiver takes it. */
    struct pr_seal s;
    ck_assert_int_eq(seal_init(&s, &base, 'S'), 0);
    must_open(&s, &r0, 0);
    pr_seal_clear(&s);
    free(r0.b);
}
END_TEST

/*
 * Re-keying: with rekey_bytes of 1000 on both sides and records of 300
 * bytes, the key moves on before every third record after the first
 * three (a record that would pass the volume goes under the next key):
 * all 40 open, and both sides re-keyed 13 times. A receiver left at the
 * default volume keeps pace up to the first boundary and fails the first
 * record after it, and so does a receiver that re-keys where the sender
 * did not.
 */
START_TEST(test_seal_rekey)
{
    struct pr_seal c, s, stale, eager, c_stale;
    if (pair(&c, &s, ciphers[_i]))
        return;
    ck_assert_int_eq(pair(&c_stale, &eager, ciphers[_i]), 0);
    struct hs h;
    hs_init(&h, ciphers[_i]);
    ck_assert_int_eq(seal_init(&stale, &h, 'S'), 0);
    ck_assert_uint_eq(stale.rekey_bytes, PR_SEAL_REKEY_BYTES);
    c.rekey_bytes = s.rekey_bytes = 1000;
    eager.rekey_bytes = 1000;
    int stale_failed = 0, eager_failed = 0;
    for (uint32_t k = 0; k < 40; k++) {
        struct rec r, r2;
        seal_rec(&c, &r, k, 300);
        seal_rec(&c_stale, &r2, k, 300);
        /* The sender's bytes before this record: 300 k under the keys. */
        ck_assert_uint_eq(c.tx.rekeys, k / 3);
        must_open(&s, &r, k);
        ck_assert_uint_eq(s.rx.rekeys, c.tx.rekeys);
        if (k < 3) {
            must_open(&stale, &r, k);
            must_open(&eager, &r2, k);
        } else if (k == 3) {
            must_fail(&stale, &r, k);
            must_fail(&eager, &r2, k);
            stale_failed = eager_failed = 1;
        }
        free(r.b);
        free(r2.b);
    }
    ck_assert(stale_failed && eager_failed);
    ck_assert_uint_eq(c.tx.rekeys, 13);
    ck_assert_uint_eq(s.rx.rekeys, 13);
    ck_assert_uint_eq(stale.rx.rekeys, 0);
    /* The other direction has its own count: nothing went that way. */
    ck_assert_uint_eq(s.tx.rekeys, 0);
    ck_assert_uint_eq(c.rx.rekeys, 0);
    pr_seal_clear(&c);
    pr_seal_clear(&s);
    pr_seal_clear(&stale);
    pr_seal_clear(&eager);
    pr_seal_clear(&c_stale);
}
END_TEST

/*
 * Records of mixed sizes, some larger than the volume alone (sealed
 * under the key in use, the next one moves on), across many boundaries
 * both ways: both sides agree on every record and on the re-key counts.
 */
START_TEST(test_seal_rekey_mixed_sizes)
{
    struct pr_seal c, s;
    if (pair(&c, &s, ciphers[_i]))
        return;
    c.rekey_bytes = s.rekey_bytes = 4096;
    for (uint32_t k = 0; k < 200; k++) {
        size_t n = (k * 977u) % 9000;
        struct rec a, b;
        seal_rec(&c, &a, k, n);
        seal_rec(&s, &b, k + 1000, n / 3);
        must_open(&s, &a, k);
        must_open(&c, &b, k + 1000);
        free(a.b);
        free(b.b);
    }
    ck_assert_uint_gt(c.tx.rekeys, 50);
    ck_assert_uint_gt(s.tx.rekeys, 20);
    ck_assert_uint_eq(c.tx.rekeys, s.rx.rekeys);
    ck_assert_uint_eq(s.tx.rekeys, c.rx.rekeys);
    pr_seal_clear(&c);
    pr_seal_clear(&s);
}
END_TEST

/* The last record numbers: the one before the limit goes, the limit not. */
START_TEST(test_seal_records_run_out)
{
    struct pr_seal c, s;
    if (pair(&c, &s, ciphers[_i]))
        return;
    c.tx.seq = s.rx.seq = PR_SEAL_MAX_RECORDS - 1;
    struct rec r;
    seal_rec(&c, &r, 3, 50);
    must_open(&s, &r, 3);
    ck_assert_uint_eq(c.tx.seq, PR_SEAL_MAX_RECORDS);
    uint8_t b[50] = {0}, tag[T], ad[PR_SEAL_AD_LEN];
    header(ad, sizeof(b));
    ck_assert_int_eq(pr_seal_encrypt(&c, ad, b, b, sizeof(b), tag),
                     -EKEYEXPIRED);
    ck_assert_uint_eq(c.tx.seq, PR_SEAL_MAX_RECORDS);
    /* The receiver refuses at the limit whatever the record. */
    ck_assert_uint_eq(s.rx.seq, PR_SEAL_MAX_RECORDS);
    ck_assert_int_eq(pr_seal_decrypt(&s, r.ad, r.b, r.n, r.tag), -EKEYEXPIRED);
    s.tx.seq = PR_SEAL_MAX_RECORDS;
    ck_assert_int_eq(pr_seal_encrypt(&s, ad, b, b, sizeof(b), tag),
                     -EKEYEXPIRED);
    free(r.b);
    pr_seal_clear(&c);
    pr_seal_clear(&s);
}
END_TEST

/*
 * pr_seal_init takes one cipher bit this machine has and role 'C' or
 * 'S': none, two bits, an unknown bit, a bit this machine lacks and any
 * other role are -EINVAL.
 */
START_TEST(test_seal_init_refuses)
{
    struct hs h;
    struct pr_seal x;
    static const uint32_t bad[] = {
        0,           PR_SEAL_AES256GCM | PR_SEAL_CHACHA20POLY1305,
        4,           PR_SEAL_CHACHA20POLY1305 | 4,
        0x80000000u, UINT32_MAX,
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        hs_init(&h, bad[i]);
        memset(&x, 0, sizeof(x));
        ck_assert_msg(seal_init(&x, &h, 'C') == -EINVAL, "cipher %#x taken",
                      bad[i]);
        pr_seal_clear(&x);
    }
    if (!(pr_seal_ciphers() & PR_SEAL_AES256GCM)) {
        hs_init(&h, PR_SEAL_AES256GCM);
        memset(&x, 0, sizeof(x));
        ck_assert_int_eq(seal_init(&x, &h, 'S'), -EINVAL);
        pr_seal_clear(&x);
    }
    static const char roles[] = {'c', 's', 'X', 0, 'C' + 128};
    for (size_t i = 0; i < sizeof(roles); i++) {
        hs_init(&h, PR_SEAL_CHACHA20POLY1305);
        memset(&x, 0, sizeof(x));
        ck_assert_int_eq(seal_init(&x, &h, roles[i]), -EINVAL);
        pr_seal_clear(&x);
    }
}
END_TEST

/*
 * The ciphers: ChaCha20-Poly1305 always, AES-256-GCM where libsodium
 * finds AES-NI; of an offer, AES if both have it, else ChaCha20, else
 * none; the names logs print.
 */
START_TEST(test_seal_pick_and_names)
{
    const uint32_t A = PR_SEAL_AES256GCM, C = PR_SEAL_CHACHA20POLY1305;
    uint32_t have = pr_seal_ciphers();
    int aes = crypto_aead_aes256gcm_is_available();
    ck_assert_uint_eq(have, aes ? (A | C) : C);
    ck_assert_uint_eq(pr_seal_pick(0), 0);
    ck_assert_uint_eq(pr_seal_pick(4), 0);
    ck_assert_uint_eq(pr_seal_pick(0xfffffff0u), 0);
    ck_assert_uint_eq(pr_seal_pick(C), C);
    ck_assert_uint_eq(pr_seal_pick(C | 4), C);
    ck_assert_uint_eq(pr_seal_pick(A), aes ? A : 0);
    ck_assert_uint_eq(pr_seal_pick(A | C), aes ? A : C);
    ck_assert_uint_eq(pr_seal_pick(UINT32_MAX), aes ? A : C);
    ck_assert_str_eq(pr_seal_cipher_name(A), "AES-256-GCM");
    ck_assert_str_eq(pr_seal_cipher_name(C), "ChaCha20-Poly1305");
    ck_assert_str_eq(pr_seal_cipher_name(0), "none");
    ck_assert_str_eq(pr_seal_cipher_name(A | C), "none");
    ck_assert_str_eq(pr_seal_cipher_name(4), "none");
}
END_TEST

static Suite *seal_suite(void)
{
    Suite *s = suite_create("seal");
    TCase *tc = tcase_create("records");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_seal_round_trip, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_roles_agree, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_flipped_bit_fails, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_out_of_order_fails, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_keys_per_connection, 0, NCIPHERS);
    suite_add_tcase(s, tc);

    tc = tcase_create("keys");
    tcase_set_timeout(tc, 20);
    tcase_add_loop_test(tc, test_seal_rekey, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_rekey_mixed_sizes, 0, NCIPHERS);
    tcase_add_loop_test(tc, test_seal_records_run_out, 0, NCIPHERS);
    tcase_add_test(tc, test_seal_init_refuses);
    tcase_add_test(tc, test_seal_pick_and_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (sodium_init() < 0)
        return EXIT_FAILURE;
    return check_run(seal_suite());
}
