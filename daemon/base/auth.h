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
};

/*
 * Loads the key. 0, or -ENOENT/-EACCES (unreadable), -EPERM (readable by
 * group or others), -EINVAL (under 16 bytes, or over 4 KiB); *why says it.
 */
int pr_auth_load(const char *path, struct pr_auth_key *key, const char **why);
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
/* 1. Accepting side: a fresh nonce into s_nonce, and the Challenge to send. */
void pr_auth_challenge(const struct pr_auth_key *key,
                       uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                       Pr__V1__Challenge *ch);
/*
 * 2. Connecting side: given the Challenge, copies its nonce into s_nonce,
 * draws c_nonce, and fills buf (64 bytes) with Hello.auth; *len 0 when no auth
 * goes out. -EPROTO (with *why) for a Challenge whose nonce is not
 * PR_AUTH_NONCE_LEN bytes; -EACCES (with *why) when one side has a key and
 * the other none.
 */
int pr_auth_answer(const struct pr_auth_key *key, const Pr__V1__Challenge *ch,
                   uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t buf[2 * PR_AUTH_NONCE_LEN], size_t *len,
                   const char **why);
/*
 * 3. Accepting side: checks Hello.auth against s_nonce; fills proof
 * (Welcome.auth, 32 bytes). 0 (also when no key: *len 0), or -EACCES with *why.
 */
int pr_auth_check_hello(const struct pr_auth_key *key,
                        const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                        const ProtobufCBinaryData *auth,
                        uint8_t proof[PR_AUTH_PROOF_LEN], size_t *len,
                        const char **why);
/* 4. Connecting side: checks Welcome.auth. 0, or -EACCES with *why. */
int pr_auth_check_welcome(const struct pr_auth_key *key,
                          const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                          const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                          const ProtobufCBinaryData *auth, const char **why);

/* Wipes the key from memory. */
void pr_auth_clear(struct pr_auth_key *key);

#endif
