/* SPDX-License-Identifier: MIT */
/*
 * The cluster-key handshake (daemon/base/auth.h): both proofs, what a wrong or
 * missing key gets, and the key file's checks; and sealing's negotiation
 * on the same frames (the Challenge offers ciphers, the Hello picks one):
 * two sides that seal agree on pr_seal_pick of both, a side that seals
 * never talks to one that does not, and a Hello's pick is checked.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/base/auth.h"
#include "daemon/base/seal.h"
#include "tests/check_run.h"

static char path[64];

static void write_key(const char *text, mode_t mode)
{
    snprintf(path, sizeof(path), "/tmp/preduce-key-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    ck_assert_int_eq(fchmod(fd, mode), 0);
    close(fd);
}

static void load(const char *text, struct pr_auth_key *k)
{
    const char *why;
    write_key(text, 0600);
    ck_assert_int_eq(pr_auth_load(path, k, &why), 0);
    unlink(path);
}

/* One whole handshake; returns where it failed (0: none). */
static int handshake(const struct pr_auth_key *s_key,
                     const struct pr_auth_key *c_key, int tamper)
{
    uint8_t s_ns[32], c_ns[32], nc[32], buf[64], proof[32];
    size_t len, plen;
    uint32_t cipher;
    const char *why;
    Pr__V1__Challenge ch;
    pr_auth_challenge(s_key, s_ns, &ch);
    if (pr_auth_answer(c_key, &ch, c_ns, nc, buf, &len, &cipher, &why) < 0)
        return 2;
    ck_assert(memcmp(c_ns, s_ns, 32) == 0);
    if (tamper == 1)
        buf[40] ^= 1;
    ProtobufCBinaryData hello = {len, buf};
    if (pr_auth_check_hello(s_key, s_ns, &hello, cipher, proof, &plen, &why) <
        0)
        return 3;
    if (tamper == 2)
        proof[0] ^= 0x80;
    ProtobufCBinaryData welcome = {plen, proof};
    if (pr_auth_check_welcome(c_key, nc, c_ns, &welcome, &why) < 0)
        return 4;
    return 0;
}

START_TEST(test_auth_same_key_passes)
{
    struct pr_auth_key a, b;
    load("correct horse battery staple", &a);
    load("correct horse battery staple", &b);
    ck_assert(memcmp(a.k, b.k, sizeof(a.k)) == 0);
    ck_assert_int_eq(handshake(&a, &b, 0), 0);
    ck_assert_int_eq(handshake(NULL, NULL, 0), 0);
}
END_TEST

START_TEST(test_auth_wrong_key_refused)
{
    struct pr_auth_key a, b;
    load("correct horse battery staple", &a);
    load("correct horse battery stapler", &b);
    /* The accepting side sees the wrong proof before it answers. */
    ck_assert_int_eq(handshake(&a, &b, 0), 3);
}
END_TEST

START_TEST(test_auth_tampered_proofs_refused)
{
    struct pr_auth_key a;
    load("sixteen bytes at least", &a);
    ck_assert_int_eq(handshake(&a, &a, 1), 3);
    ck_assert_int_eq(handshake(&a, &a, 2), 4);
}
END_TEST

START_TEST(test_auth_key_on_one_side_only)
{
    struct pr_auth_key a;
    load("sixteen bytes at least", &a);
    /* Each side refuses in the answer to the challenge, with a reason. */
    ck_assert_int_eq(handshake(&a, NULL, 0), 2);
    ck_assert_int_eq(handshake(NULL, &a, 0), 2);
}
END_TEST

START_TEST(test_auth_replayed_hello_refused)
{
    struct pr_auth_key a;
    load("sixteen bytes at least", &a);
    uint8_t ns1[32], ns2[32], c_ns[32], nc[32], buf[64], proof[32];
    size_t len, plen;
    uint32_t cipher;
    const char *why;
    Pr__V1__Challenge ch;
    pr_auth_challenge(&a, ns1, &ch);
    ck_assert_int_eq(
        pr_auth_answer(&a, &ch, c_ns, nc, buf, &len, &cipher, &why), 0);
    /* A recorded hello does not answer a fresh challenge. */
    pr_auth_challenge(&a, ns2, &ch);
    ProtobufCBinaryData hello = {len, buf};
    ck_assert_int_eq(
        pr_auth_check_hello(&a, ns2, &hello, cipher, proof, &plen, &why),
        -EACCES);
    ck_assert_int_eq(
        pr_auth_check_hello(&a, ns1, &hello, cipher, proof, &plen, &why), 0);
}
END_TEST

/* Where a negotiation stopped: step 0 (none), 2 (the answer) or 3. */
struct neg {
    int step;
    int rc;
    uint32_t cipher; /* the answer's */
    const char *why;
};

/*
 * The dialling side's answer to a Challenge from S, and S's check of the
 * Hello that picks `pick` (~0u: the cipher the answer chose).
 */
static struct neg negotiate(const struct pr_auth_key *s_key,
                            const struct pr_auth_key *c_key, uint32_t pick)
{
    uint8_t s_ns[32], c_ns[32], nc[32], buf[64], proof[32];
    size_t len, plen = 99;
    Pr__V1__Challenge ch;
    struct neg n = {0};
    pr_auth_challenge(s_key, s_ns, &ch);
    ck_assert_uint_eq(ch.seal, s_key->seal);
    n.rc = pr_auth_answer(c_key, &ch, c_ns, nc, buf, &len, &n.cipher, &n.why);
    if (n.rc < 0) {
        ck_assert_uint_eq(n.cipher, 0);
        ck_assert_uint_eq(len, 0);
        n.step = 2;
        return n;
    }
    ProtobufCBinaryData hello = {len, buf};
    n.rc =
        pr_auth_check_hello(s_key, s_ns, &hello, pick == ~0u ? n.cipher : pick,
                            proof, &plen, &n.why);
    if (n.rc < 0) {
        ck_assert_uint_eq(plen, 0);
        n.step = 3;
        return n;
    }
    ProtobufCBinaryData welcome = {plen, proof};
    ck_assert_int_eq(pr_auth_check_welcome(c_key, nc, c_ns, &welcome, &n.why),
                     0);
    return n;
}

/* A refusal at step `step` with `err` and a reason. */
static void refused_at(struct neg n, int step, int err)
{
    ck_assert_int_eq(n.step, step);
    ck_assert_int_eq(n.rc, err);
    ck_assert_ptr_nonnull(n.why);
    ck_assert_uint_gt(strlen(n.why), 0);
}

/*
 * Both seal: the cipher is pr_seal_pick of what S offers and C has, and
 * S takes the Hello that names it; without one in common, the answer
 * refuses (-EPROTO).
 */
START_TEST(test_auth_seal_negotiated)
{
    const uint32_t A = PR_SEAL_AES256GCM, C = PR_SEAL_CHACHA20POLY1305;
    static const uint32_t masks[][2] = {
        {A | C, A | C}, {C, A | C}, {A | C, C}, {C, C},
        {A, A | C},     {A, A},     {C | 8, C}, {A | C | 4, A | C},
    };
    struct pr_auth_key s_key, c_key;
    load("sixteen bytes at least", &s_key);
    c_key = s_key;
    ck_assert_uint_eq(s_key.seal, pr_seal_ciphers());
    for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
        s_key.seal = masks[i][0];
        c_key.seal = masks[i][1];
        uint32_t want = pr_seal_pick(masks[i][0] & masks[i][1]);
        struct neg n = negotiate(&s_key, &c_key, ~0u);
        if (!want) {
            /* AES alone on a machine without it. */
            refused_at(n, 2, -EPROTO);
            continue;
        }
        ck_assert_msg(n.step == 0, "masks %#x %#x: step %d: %s", masks[i][0],
                      masks[i][1], n.step, n.why);
        ck_assert_uint_eq(n.cipher, want);
    }
    /* What S offers and C lacks: nothing to pick. */
    s_key.seal = A;
    c_key.seal = C;
    refused_at(negotiate(&s_key, &c_key, ~0u), 2, -EPROTO);
}
END_TEST

/*
 * One side seals and the other does not: refused whichever it is, at
 * the answer (it sees the Challenge's offer) and at S's check (it sees
 * the Hello's pick), each with a reason; never a link in clear.
 */
START_TEST(test_auth_seal_one_side_refused)
{
    struct pr_auth_key seals, clear;
    load("sixteen bytes at least", &seals);
    clear = seals;
    clear.seal = 0;
    /* S seals, C does not; C seals, S does not: the answer refuses. */
    refused_at(negotiate(&seals, &clear, ~0u), 2, -EACCES);
    refused_at(negotiate(&clear, &seals, ~0u), 2, -EACCES);
    /*
     * S's own check, should C not refuse: a Hello without a cipher to S
     * that seals, and one with a cipher to S that does not.
     */
    struct neg n = negotiate(&seals, &seals, 0);
    refused_at(n, 3, -EACCES);
    ck_assert_uint_ne(n.cipher, 0);
    refused_at(negotiate(&clear, &clear, PR_SEAL_CHACHA20POLY1305), 3, -EACCES);
    /* Neither seals: the keyed link in clear, as before. */
    n = negotiate(&clear, &clear, ~0u);
    ck_assert_int_eq(n.step, 0);
    ck_assert_uint_eq(n.cipher, 0);
}
END_TEST

/*
 * S takes a Hello's pick only if it is one cipher it offered: one it did
 * not offer, two at once, an unknown bit or none are refused.
 */
START_TEST(test_auth_seal_hello_pick_checked)
{
    const uint32_t A = PR_SEAL_AES256GCM, C = PR_SEAL_CHACHA20POLY1305;
    struct pr_auth_key s_key, c_key;
    load("sixteen bytes at least", &s_key);
    c_key = s_key;
    /* S offers ChaCha20 alone. */
    s_key.seal = C;
    static const uint32_t bad[] = {A, A | C, 4, C | 4, 0, 0x80000000u};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        refused_at(negotiate(&s_key, &c_key, bad[i]), 3, -EACCES);
    ck_assert_int_eq(negotiate(&s_key, &c_key, C).step, 0);
    /* S offers both (where it has AES): a pick of either is taken. */
    s_key.seal = pr_seal_ciphers();
    ck_assert_int_eq(negotiate(&s_key, &c_key, C).step, 0);
    struct neg n = negotiate(&s_key, &c_key, A);
    if (s_key.seal & A)
        ck_assert_int_eq(n.step, 0);
    else
        refused_at(n, 3, -EACCES);
    refused_at(negotiate(&s_key, &c_key, A | C), 3, -EACCES);
}
END_TEST

/*
 * A job key's proof: the same for the same key and job, another for
 * another key or job, the key being hashed whole (its last byte counts),
 * and compared only as equal proofs of its length.
 */
START_TEST(test_auth_job_proof)
{
    uint8_t k1[64], k2[64], p[4][PR_AUTH_JOB_PROOF_LEN];
    const char *why = NULL;
    memset(k1, 'a', sizeof(k1));
    memcpy(k2, k1, sizeof(k2));
    k2[63] = 'b';
    ck_assert_int_eq(pr_auth_job_proof(k1, 64, "job-a", p[0], &why), 0);
    ck_assert_int_eq(pr_auth_job_proof(k1, 64, "job-a", p[1], &why), 0);
    ck_assert_int_eq(pr_auth_job_proof(k2, 64, "job-a", p[2], &why), 0);
    ck_assert_int_eq(pr_auth_job_proof(k1, 64, "job-b", p[3], &why), 0);
    ck_assert(pr_auth_job_proof_equal(p[0], 32, p[1], 32));
    ck_assert(!pr_auth_job_proof_equal(p[0], 32, p[2], 32));
    ck_assert(!pr_auth_job_proof_equal(p[0], 32, p[3], 32));
    /* Not the key's hash, nor anything that holds the key's bytes. */
    ck_assert(memcmp(p[0], k1, 32) != 0);
    /* No proof equals no proof only; lengths other than 32 never match. */
    ck_assert(pr_auth_job_proof_equal(NULL, 0, NULL, 0));
    ck_assert(!pr_auth_job_proof_equal(p[0], 32, NULL, 0));
    ck_assert(!pr_auth_job_proof_equal(NULL, 0, p[0], 32));
    ck_assert(!pr_auth_job_proof_equal(p[0], 31, p[1], 31));
}
END_TEST

/*
 * The construction protocol.md publishes, from an independent one
 * (Python's hashlib and hmac): HMAC-SHA-256 under BLAKE2b-256 of the
 * key's bytes 0..39, over "preduce job key v1\0" and "job-a".
 */
START_TEST(test_auth_job_proof_known_answer)
{
    static const uint8_t want[PR_AUTH_JOB_PROOF_LEN] = {
        0x5a, 0xaa, 0x8b, 0xc7, 0xef, 0x32, 0x82, 0xd0, 0xc9, 0x8b, 0xb4,
        0xdd, 0xc8, 0x0e, 0xab, 0xb6, 0xea, 0x17, 0xf0, 0xe4, 0x99, 0x29,
        0x9a, 0xa8, 0x62, 0xf0, 0xb6, 0x0f, 0xef, 0xf6, 0x0b, 0xfe};
    uint8_t key[40], p[PR_AUTH_JOB_PROOF_LEN];
    const char *why = NULL;
    for (int i = 0; i < 40; i++)
        key[i] = (uint8_t)i;
    ck_assert_int_eq(pr_auth_job_proof(key, 40, "job-a", p, &why), 0);
    ck_assert_mem_eq(p, want, sizeof(want));
}
END_TEST

START_TEST(test_auth_job_proof_sizes)
{
    static uint8_t key[4097];
    uint8_t p[PR_AUTH_JOB_PROOF_LEN];
    const char *why = NULL;
    memset(key, 7, sizeof(key));
    ck_assert_int_eq(pr_auth_job_proof(key, 15, "j", p, &why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "16 to 4096"));
    ck_assert_int_eq(pr_auth_job_proof(key, 4097, "j", p, &why), -EINVAL);
    ck_assert_int_eq(pr_auth_job_proof(key, 16, "j", p, &why), 0);
    ck_assert_int_eq(pr_auth_job_proof(key, 4096, "j", p, &why), 0);
}
END_TEST

START_TEST(test_auth_key_file_checks)
{
    struct pr_auth_key k;
    const char *why = NULL;
    ck_assert_int_eq(pr_auth_load("/nonexistent/key", &k, &why), -ENOENT);
    write_key("sixteen bytes at least", 0644);
    ck_assert_int_eq(pr_auth_load(path, &k, &why), -EPERM);
    ck_assert_ptr_nonnull(strstr(why, "chmod 600"));
    unlink(path);
    write_key("too short", 0600);
    ck_assert_int_eq(pr_auth_load(path, &k, &why), -EINVAL);
    unlink(path);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("handshake");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_auth_same_key_passes);
    tcase_add_test(tc, test_auth_wrong_key_refused);
    tcase_add_test(tc, test_auth_tampered_proofs_refused);
    tcase_add_test(tc, test_auth_key_on_one_side_only);
    tcase_add_test(tc, test_auth_replayed_hello_refused);
    tcase_add_test(tc, test_auth_key_file_checks);
    tcase_add_test(tc, test_auth_job_proof);
    tcase_add_test(tc, test_auth_job_proof_sizes);
    tcase_add_test(tc, test_auth_job_proof_known_answer);
    suite_add_tcase(s, tc);

    tc = tcase_create("seal");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_auth_seal_negotiated);
    tcase_add_test(tc, test_auth_seal_one_side_refused);
    tcase_add_test(tc, test_auth_seal_hello_pick_checked);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
