/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the cluster key's handshake (daemon/base/auth.c) as a
 * peer drives it. The first byte says whether this side holds the key
 * (bit 0 clear: it does) and which ciphers it seals with (bits 1 and 2,
 * AES-256-GCM and ChaCha20-Poly1305, of those this machine has; none:
 * security.encrypt = off); the rest is a packed Msg as conn.c hands it
 * up. A Challenge
 * is answered as a dialling side does (pr_auth_answer); a Hello's proof
 * is checked against the nonce this side sent (pr_auth_check_hello); a
 * Welcome's against both nonces of the hello this side sent
 * (pr_auth_check_welcome). The nonces are fixed, so that a seed can carry
 * a right proof. Each answer is checked against auth.h's contract,
 * abort() on a breach: a proof is taken if and only if it is the one the
 * key makes for those nonces in that role (a forged, truncated, other
 * key's or reflected proof is refused with -EACCES and a reason); an
 * answer to a challenge is taken by the side that sent it, and the proof
 * that side sends back is taken by the answering side. Sealing: a side
 * that seals and one that does not never make a link, either way (the
 * answer to a Challenge, the check of a Hello, each -EACCES with a
 * reason); two that seal agree on pr_seal_pick of the offer and this
 * side's ciphers (-EPROTO when there is none); a Hello is taken only
 * with one cipher the checking side offered, or none when it does not
 * seal.
 */
#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/auth.h"
#include "daemon/base/seal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N PR_AUTH_NONCE_LEN

static const struct pr_auth_key key = {.k = "fuzz_auth: the cluster key 1234"};
static const struct pr_auth_key other = {.k =
                                             "fuzz_auth: another key, 5678901"};
/* The nonce of the Challenge this side sent, and of its own Hello. */
static const uint8_t s_sent[N] = "the challenge this side sent...";
static const uint8_t c_sent[N] = "the nonce of this side's hello.";

/* A refusal: -EACCES (or `other_rc`) with a reason in a string. */
static void refused(int rc, int other_rc, const char *why)
{
    if ((rc != -EACCES && rc != other_rc) || !why || !why[0])
        abort();
}

/*
 * Whether a side that offered `offer` (its key's seal, 0: it does not
 * seal) takes a Hello that picks `seal`: one cipher of its offer that
 * this machine has, or none when it offered none.
 */
static int pick_ok(uint32_t offer, uint32_t seal)
{
    if (!offer)
        return seal == 0;
    int one_bit = seal != 0 && (seal & (seal - 1)) == 0;
    return one_bit && (seal & offer) && (seal & pr_seal_ciphers());
}

/* The dialling side answers a challenge from the peer. */
static void on_challenge(const struct pr_auth_key *k,
                         const Pr__V1__Challenge *ch)
{
    uint8_t s_nonce[N], c_nonce[N], buf[2 * N];
    size_t len = 1234;
    const char *why = NULL;
    uint32_t cipher = 0;
    int rc = pr_auth_answer(k, ch, s_nonce, c_nonce, buf, &len, &cipher, &why);
    if (ch->nonce.len != N) {
        refused(rc, -EPROTO, why);
        if (rc != -EPROTO || len != 0 || cipher != 0)
            abort();
        return;
    }
    if (!ch->required != !k) {
        /* One side has a key, the other none: no link either way. */
        refused(rc, -EACCES, why);
        if (len != 0 || cipher != 0)
            abort();
        return;
    }
    if (k && !k->seal != !ch->seal) {
        /* One side seals, the other not: no link, and no clear text. */
        refused(rc, -EACCES, why);
        if (len != 0 || cipher != 0)
            abort();
        return;
    }
    uint32_t want = k && k->seal ? pr_seal_pick(ch->seal & k->seal) : 0;
    if (k && k->seal && !want) {
        refused(rc, -EPROTO, why);
        if (len != 0 || cipher != 0)
            abort();
        return;
    }
    if (rc != 0 || memcmp(s_nonce, ch->nonce.data, N) != 0 || cipher != want)
        abort();
    if (!k) {
        if (len != 0)
            abort();
        return;
    }
    if (len != 2 * N || memcmp(buf, c_nonce, N) != 0)
        abort();
    /*
     * The side that challenged (the key, offering what the Challenge
     * did) takes the answer; with another key, or another pick, not.
     */
    struct pr_auth_key s_key = {.seal = ch->seal};
    memcpy(s_key.k, k->k, sizeof(s_key.k));
    ProtobufCBinaryData auth = {.len = len, .data = buf};
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen = 0;
    if (!pick_ok(s_key.seal, cipher) ||
        pr_auth_check_hello(&s_key, s_nonce, &auth, cipher, proof, &plen,
                            &why) != 0 ||
        plen != PR_AUTH_PROOF_LEN)
        abort();
    ProtobufCBinaryData back = {.len = plen, .data = proof};
    if (pr_auth_check_welcome(k, c_nonce, s_nonce, &back, &why) != 0)
        abort();
    struct pr_auth_key wrong = other;
    wrong.seal = s_key.seal;
    why = NULL;
    rc =
        pr_auth_check_hello(&wrong, s_nonce, &auth, cipher, proof, &plen, &why);
    refused(rc, -EACCES, why);
    /* The other cipher, both, or none, where S seals: refused. */
    const uint32_t picks[] = {
        cipher ^ (PR_SEAL_AES256GCM | PR_SEAL_CHACHA20POLY1305),
        PR_SEAL_AES256GCM | PR_SEAL_CHACHA20POLY1305, 0};
    for (size_t i = 0; i < sizeof(picks) / sizeof(picks[0]); i++) {
        if (pick_ok(s_key.seal, picks[i]))
            continue;
        why = NULL;
        plen = 1234;
        rc = pr_auth_check_hello(&s_key, s_nonce, &auth, picks[i], proof, &plen,
                                 &why);
        refused(rc, -EACCES, why);
        if (plen != 0)
            abort();
    }
}

/* This side challenged with s_sent; the peer's Hello proves the key. */
static void on_hello(const struct pr_auth_key *k, const Pr__V1__Hello *h)
{
    uint8_t proof[PR_AUTH_PROOF_LEN];
    size_t plen = 1234;
    const char *why = NULL;
    int rc =
        pr_auth_check_hello(k, s_sent, &h->auth, h->seal, proof, &plen, &why);
    if (!k) {
        if (rc != 0 || plen != 0)
            abort();
        return;
    }
    /* The one proof to take: the key's, in role C, over both nonces. */
    uint8_t want[PR_AUTH_PROOF_LEN];
    int right = h->auth.len == 2 * N;
    if (right) {
        pr_auth_prove(k, 'C', s_sent, h->auth.data, want);
        right = memcmp(want, h->auth.data + N, sizeof(want)) == 0;
    }
    /* A right proof, then a pick of what this side offered (or none). */
    if (!right || !pick_ok(k->seal, h->seal)) {
        refused(rc, -EACCES, why);
        if (plen != 0)
            abort();
        return;
    }
    if (rc != 0 || plen != PR_AUTH_PROOF_LEN)
        abort();
    /* This side's answer, and the peer's proof sent back at it (refused). */
    ProtobufCBinaryData back = {.len = plen, .data = proof};
    if (pr_auth_check_welcome(k, h->auth.data, s_sent, &back, &why) != 0)
        abort();
    ProtobufCBinaryData reflected = {.len = PR_AUTH_PROOF_LEN,
                                     .data = h->auth.data + N};
    why = NULL;
    rc = pr_auth_check_welcome(k, h->auth.data, s_sent, &reflected, &why);
    refused(rc, -EACCES, why);
}

/* This side sent a Hello with c_sent against s_sent; the Welcome proves. */
static void on_welcome(const struct pr_auth_key *k, const Pr__V1__Welcome *w)
{
    const char *why = NULL;
    int rc = pr_auth_check_welcome(k, c_sent, s_sent, &w->auth, &why);
    if (!k) {
        if (rc != 0)
            abort();
        return;
    }
    uint8_t want[PR_AUTH_PROOF_LEN];
    pr_auth_prove(k, 'S', c_sent, s_sent, want);
    int right = w->auth.len == PR_AUTH_PROOF_LEN &&
                memcmp(want, w->auth.data, sizeof(want)) == 0;
    if (right && rc != 0)
        abort();
    if (!right)
        refused(rc, -EACCES, why);
    /* pr_auth_verify agrees; no proof is right in both roles. */
    int as_s =
        pr_auth_verify(k, 'S', c_sent, s_sent, w->auth.data, w->auth.len);
    int as_c =
        pr_auth_verify(k, 'C', c_sent, s_sent, w->auth.data, w->auth.len);
    if ((as_s != 0 && as_s != -EACCES) || (as_c != 0 && as_c != -EACCES) ||
        (as_s == 0) != right || (as_s == 0 && as_c == 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (sodium_init() < 0)
            abort();
        ready = 1;
    }
    if (size < 1)
        return 0;
    struct pr_auth_key mine = key;
    mine.seal = (uint32_t)(data[0] >> 1 & 3) & pr_seal_ciphers();
    const struct pr_auth_key *k = data[0] & 1 ? NULL : &mine;
    Pr__V1__Msg *m = pr_msg_unpack(data + 1, size - 1);
    if (!m)
        return 0;
    switch (m->body_case) {
    case PR__V1__MSG__BODY_CHALLENGE:
        on_challenge(k, m->challenge);
        break;
    case PR__V1__MSG__BODY_HELLO:
        on_hello(k, m->hello);
        break;
    case PR__V1__MSG__BODY_WELCOME:
        on_welcome(k, m->welcome);
        break;
    default:
        break;
    }
    pr_msg_free(m);
    return 0;
}
