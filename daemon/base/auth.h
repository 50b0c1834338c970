/* SPDX-License-Identifier: MIT */
/*
 * Cluster-key authentication of the TCP links between daemons and to the
 * scheduler: a mutual challenge-response with HMAC-SHA-256 (libsodium), so
 * the key itself never crosses the wire and a recorded handshake cannot be
 * replayed.
 *
 * s_nonce is the accepting side S's nonce (its challenge), c_nonce the
 * connecting side C's; each side draws its own afresh per connection.
 *
 *  1. S -> Challenge{nonce = s_nonce, required}  (on accept)
 *  2. C -> Hello{auth = c_nonce || HMAC(k, "C" || s_nonce || c_nonce)}
 *  3. S checks C's proof before it answers anything (so nothing, not even
 *     RDMA queue pair details, goes to a peer without the key), then
 *     -> Welcome{auth = HMAC(k, "S" || c_nonce || s_nonce)}
 *  4. C checks S's proof before it trusts the link.
 * k is BLAKE2b-256 of the key file's bytes (at least 16 of them; the file
 * must not be readable by group or others).
 *
 * Sealing (seal.h) rides on the same exchange: the Challenge offers the
 * accepting side's ciphers, the Hello names the one the connecting side
 * picked, and after the Welcome both seal the connection with keys from
 * k, both nonces and the transcript of these frames.
 */
#ifndef PR_AUTH_H
#define PR_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"

#define PR_AUTH_KEY_LEN   32
#define PR_AUTH_NONCE_LEN 32
#define PR_AUTH_PROOF_LEN 32

struct pr_auth_key {
    uint8_t k[PR_AUTH_KEY_LEN];
    /*
     * The ciphers this side seals its links with (seal.h): all it has
     * after pr_auth_load, 0 with security.encrypt = off. Both ends of a
     * link must agree on sealing, or the handshake refuses the link (no
     * side can be talked into clear text).
     */
    uint32_t seal;
};

/*
 * Loads the key. 0, or -ENOENT/-EACCES (unreadable), -EPERM (readable by
 * group or others), -EINVAL (under 16 bytes, or over 4 KiB); *why says it.
 */
int pr_auth_load(const char *path, struct pr_auth_key *key, const char **why);
/*
 * Writes a new key to `path` (64 hex digits of 32 random bytes, mode
 * 0600), which must not exist: a new key locks out every daemon that has
 * the old one. 0, or a negative errno with *why.
 */
int pr_auth_generate(const char *path, const char **why);
void pr_auth_nonce(uint8_t nonce[PR_AUTH_NONCE_LEN]);
/* role 'S' or 'C': proof over (first, second) in that order. */
void pr_auth_prove(const struct pr_auth_key *key, char role,
                   const uint8_t first[PR_AUTH_NONCE_LEN],
                   const uint8_t second[PR_AUTH_NONCE_LEN],
                   uint8_t proof[PR_AUTH_PROOF_LEN]);
/* 0 if `proof` (len bytes) is right, in constant time; else -EACCES. */
int pr_auth_verify(const struct pr_auth_key *key, char role,
                   const uint8_t first[PR_AUTH_NONCE_LEN],
                   const uint8_t second[PR_AUTH_NONCE_LEN],
                   const uint8_t *proof, size_t len);
/*
 * The handshake steps, for whichever link: `key` NULL means this side has
 * none. The Msg parts they fill point into the caller's buffers.
 */
/*
 * 1. Accepting side: a fresh nonce into s_nonce, and the Challenge to send
 * (with key->seal's ciphers on offer).
 */
void pr_auth_challenge(const struct pr_auth_key *key,
                       uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                       Pr__V1__Challenge *ch);
/*
 * 2. Connecting side: given the Challenge, copies its nonce into s_nonce,
 * draws c_nonce, and fills buf (64 bytes) with Hello.auth; *len 0 when no auth
 * goes out; *cipher the one to seal with (Hello.seal), 0 for none.
 * -EPROTO (with *why) for a Challenge whose nonce is not PR_AUTH_NONCE_LEN
 * bytes, or one whose ciphers this side has none of; -EACCES (with *why)
 * when one side has a key and the other none, or one seals and the other
 * does not.
 */
int pr_auth_answer(const struct pr_auth_key *key, const Pr__V1__Challenge *ch,
                   uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t buf[2 * PR_AUTH_NONCE_LEN], size_t *len,
                   uint32_t *cipher, const char **why);
/*
 * 3. Accepting side: checks Hello.auth against s_nonce, and that Hello.seal
 * (`seal`) is a cipher it offered, or 0 when it does not seal; fills proof
 * (Welcome.auth, 32 bytes). 0 (also when no key: *len 0), or -EACCES with
 * *why.
 */
int pr_auth_check_hello(const struct pr_auth_key *key,
                        const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                        const ProtobufCBinaryData *auth, uint32_t seal,
                        uint8_t proof[PR_AUTH_PROOF_LEN], size_t *len,
                        const char **why);
/* 4. Connecting side: checks Welcome.auth. 0, or -EACCES with *why. */
int pr_auth_check_welcome(const struct pr_auth_key *key,
                          const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                          const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                          const ProtobufCBinaryData *auth, const char **why);

/* Wipes the key from memory. */
void pr_auth_clear(struct pr_auth_key *key);

/*
 * A job's key (Hello.job_key: the bytes of a key file, checked here as
 * pr_auth_load checks the cluster's, 16 to 4096 of them) proved for job
 * `job`: HMAC-SHA-256 under BLAKE2b-256 of the bytes, over a label and the
 * job's name, so that one key proves nothing for another job and the
 * scheduler, which compares proofs, never holds a key. 0, or -EINVAL with
 * *why.
 */
#define PR_AUTH_JOB_PROOF_LEN 32
int pr_auth_job_proof(const uint8_t *key, size_t len, const char *job,
                      uint8_t proof[PR_AUTH_JOB_PROOF_LEN], const char **why);
/*
 * Whether proofs a and b (each 0 or PR_AUTH_JOB_PROOF_LEN bytes long) are
 * equal; two of that length are compared in constant time.
 */
int pr_auth_job_proof_equal(const uint8_t *a, size_t alen, const uint8_t *b,
                            size_t blen);

#endif
