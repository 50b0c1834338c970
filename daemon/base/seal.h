/* SPDX-License-Identifier: MIT */
/*
 * The AEAD of a sealed link (security.encrypt): every frame after the
 * handshake is encrypted and authenticated, with keys of its own per
 * connection and per direction (plain memory, no I/O, so the connection
 * code, the tests and the fuzzers share it). The keys come from libsodium
 * (BLAKE2b); the records are sealed by OpenSSL's libcrypto, whose
 * AES-256-GCM and ChaCha20-Poly1305 run 2.3x and 1.6x as fast as
 * libsodium 1.0.18's on this project's machines (docs/benchmarks.md):
 * what a core seals per second is what a link can carry.
 *
 * Keys. From the cluster key k, both handshake nonces and a hash of the
 * handshake's frames as each side saw them (the transcript: Challenge,
 * Hello, Welcome), a BLAKE2b keyed by k gives a connection secret, and
 * from it one key per direction. A handshake frame altered in flight
 * leaves the two sides with different keys, and the first sealed frame
 * fails.
 *
 * Records. Each direction numbers its records 0, 1, 2 ... and the number
 * is the nonce (96 bits: 32 zero, then the 64-bit count): nothing is sent
 * twice under one key and nonce, and nothing carries the number, so a
 * receiver that opens record i with nonce i refuses a replayed, reordered,
 * dropped or duplicated record as surely as an altered one. The frame
 * header (8 bytes: length, type, flags) stays in clear, so the reader can
 * cut frames, and is authenticated as the record's associated data.
 *
 * Re-keying. After PR_SEAL_REKEY_BYTES sealed under one key, both sides
 * move to the next key, BLAKE2b(key, "next"), at the same record: GCM's
 * safe volume per key is never approached, and the 64-bit count cannot
 * wrap (past 2^62 records the link refuses to go on, with -EKEYEXPIRED).
 *
 * Cipher: AES-256-GCM where both ends have AES-NI and carry-less multiply
 * (libsodium's check; without them AES is slow and its tables leak
 * timing), else ChaCha20-Poly1305 (IETF); the accepting side offers, the
 * dialling side picks (auth.h), and the choice is in the transcript.
 */
#ifndef PR_SEAL_H
#define PR_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/auth.h"

#define PR_SEAL_TAG_LEN  16
#define PR_SEAL_HASH_LEN 32
#define PR_SEAL_AD_LEN   8 /* the frame header */
/* Bytes under one key before both sides move to the next: 16 GiB. */
#define PR_SEAL_REKEY_BYTES (1ull << 34)
#define PR_SEAL_MAX_RECORDS (1ull << 62)

/* Cipher bits, in a Challenge's offer; one of them in a Hello. */
enum pr_seal_cipher {
    PR_SEAL_AES256GCM = 1,
    PR_SEAL_CHACHA20POLY1305 = 2,
};

struct evp_cipher_ctx_st;

struct pr_seal_dir {
    struct evp_cipher_ctx_st *ctx; /* the cipher, keyed */
    uint8_t key[32];
    uint64_t seq;   /* the next record's number */
    uint64_t bytes; /* sealed under key */
    uint64_t rekeys;
};

struct pr_seal {
    uint32_t cipher; /* enum pr_seal_cipher */
    uint64_t rekey_bytes;
    struct pr_seal_dir tx, rx;
};

/* The ciphers this machine seals with (a mask; ChaCha20 always). */
uint32_t pr_seal_ciphers(void);
/* The one to use of an offer: AES-256-GCM if both can, else ChaCha20. */
uint32_t pr_seal_pick(uint32_t offered);
const char *pr_seal_cipher_name(uint32_t cipher);

/*
 * Keys for one connection: role 'C' (the dialling side) or 'S'. 0, or
 * -EINVAL for a cipher that is not one bit of pr_seal_ciphers(), or
 * -ENOMEM. A struct pr_seal holds cipher contexts: not to be copied;
 * pr_seal_clear() frees them.
 */
int pr_seal_init(struct pr_seal *s, uint32_t cipher,
                 const struct pr_auth_key *key, char role,
                 const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t transcript[PR_SEAL_HASH_LEN]);
/* Wipes the keys and frees the contexts (a zeroed struct: nothing). */
void pr_seal_clear(struct pr_seal *s);

/*
 * The next outgoing record: the n bytes at src, encrypted to dst (which
 * may be src), and their tag; ad is the frame header. 0, -EKEYEXPIRED, or
 * -EINVAL, -ENOMEM when libcrypto fails (the record's number is spent).
 */
int pr_seal_encrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *dst, const uint8_t *src, size_t n,
                    uint8_t tag[PR_SEAL_TAG_LEN]);
/*
 * The next incoming record, decrypted in place. 0; -EBADMSG when it does
 * not authenticate as the next record (altered, replayed, reordered,
 * dropped before it): buf's contents are then undefined, and the link is
 * unusable; -EKEYEXPIRED; or -EINVAL, -ENOMEM when libcrypto fails.
 */
int pr_seal_decrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *buf, size_t n, const uint8_t tag[PR_SEAL_TAG_LEN]);

#endif
