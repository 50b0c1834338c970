/* SPDX-License-Identifier: MIT */
/*
 * The cluster-key handshake (daemon/base/auth.h): both proofs, what a wrong or
 * missing key gets, and the key file's checks.
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
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
