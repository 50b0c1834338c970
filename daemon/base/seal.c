/* SPDX-License-Identifier: MIT */
#include "daemon/base/seal.h"

#include <errno.h>
#include <string.h>

uint32_t pr_seal_ciphers(void)
{
    uint32_t m = PR_SEAL_CHACHA20POLY1305;
    if (crypto_aead_aes256gcm_is_available())
        m |= PR_SEAL_AES256GCM;
    return m;
}

uint32_t pr_seal_pick(uint32_t offered)
{
    uint32_t both = offered & pr_seal_ciphers();
    if (both & PR_SEAL_AES256GCM)
        return PR_SEAL_AES256GCM;
    if (both & PR_SEAL_CHACHA20POLY1305)
        return PR_SEAL_CHACHA20POLY1305;
    return 0;
}

const char *pr_seal_cipher_name(uint32_t cipher)
{
    switch (cipher) {
    case PR_SEAL_AES256GCM:
        return "AES-256-GCM";
    case PR_SEAL_CHACHA20POLY1305:
        return "ChaCha20-Poly1305";
    default:
        return "none";
    }
}

/* A BLAKE2b-256 keyed by `key` over the label and then `in`. */
static void kdf(uint8_t out[32], const uint8_t key[32], const char *label,
                const uint8_t *in, size_t n)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, 32, 32);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
    if (n)
        crypto_generichash_update(&st, in, n);
    crypto_generichash_final(&st, out, 32);
    sodium_memzero(&st, sizeof(st));
}

static void dir_key(struct pr_seal *s, struct pr_seal_dir *d,
                    const uint8_t key[32])
{
    memcpy(d->key, key, 32);
    if (s->cipher == PR_SEAL_AES256GCM)
        crypto_aead_aes256gcm_beforenm(&d->aes, d->key);
    d->bytes = 0;
}

int pr_seal_init(struct pr_seal *s, uint32_t cipher,
                 const struct pr_auth_key *key, char role,
                 const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t transcript[PR_SEAL_HASH_LEN])
{
    if (cipher != pr_seal_pick(cipher) || (role != 'C' && role != 'S'))
        return -EINVAL;
    memset(s, 0, sizeof(*s));
    s->cipher = cipher;
    s->rekey_bytes = PR_SEAL_REKEY_BYTES;
    uint8_t in[1 + 2 * PR_AUTH_NONCE_LEN + PR_SEAL_HASH_LEN];
    in[0] = (uint8_t)cipher;
    memcpy(in + 1, s_nonce, PR_AUTH_NONCE_LEN);
    memcpy(in + 1 + PR_AUTH_NONCE_LEN, c_nonce, PR_AUTH_NONCE_LEN);
    memcpy(in + 1 + 2 * PR_AUTH_NONCE_LEN, transcript, PR_SEAL_HASH_LEN);
    uint8_t secret[32], cs[32], sc[32];
    kdf(secret, key->k, "preduce seal v1", in, sizeof(in));
    kdf(cs, secret, "C>S", NULL, 0);
    kdf(sc, secret, "S>C", NULL, 0);
    dir_key(s, &s->tx, role == 'C' ? cs : sc);
    dir_key(s, &s->rx, role == 'C' ? sc : cs);
    sodium_memzero(secret, sizeof(secret));
    sodium_memzero(cs, sizeof(cs));
    sodium_memzero(sc, sizeof(sc));
    return 0;
}

void pr_seal_clear(struct pr_seal *s)
{
    sodium_memzero(s, sizeof(*s));
}

/*
 * Record seq's nonce, and the key moved on when the bytes under it would
 * pass the re-key volume: both sides do this at the same record.
 */
static int next_record(struct pr_seal *s, struct pr_seal_dir *d, size_t n,
                       uint8_t nonce[12])
{
    if (d->seq >= PR_SEAL_MAX_RECORDS)
        return -EKEYEXPIRED;
    if (d->bytes + n > s->rekey_bytes && d->bytes > 0) {
        uint8_t next[32];
        kdf(next, d->key, "next", NULL, 0);
        dir_key(s, d, next);
        sodium_memzero(next, sizeof(next));
        d->rekeys++;
    }
    memset(nonce, 0, 4);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(d->seq >> (56 - 8 * i));
    return 0;
}

int pr_seal_encrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *dst, const uint8_t *src, size_t n,
                    uint8_t tag[PR_SEAL_TAG_LEN])
{
    struct pr_seal_dir *d = &s->tx;
    uint8_t nonce[12];
    int rc = next_record(s, d, n, nonce);
    if (rc < 0)
        return rc;
    if (s->cipher == PR_SEAL_AES256GCM)
        crypto_aead_aes256gcm_encrypt_detached_afternm(
            dst, tag, NULL, src, n, ad, PR_SEAL_AD_LEN, NULL, nonce, &d->aes);
    else
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(
            dst, tag, NULL, src, n, ad, PR_SEAL_AD_LEN, NULL, nonce, d->key);
    d->seq++;
    d->bytes += n;
    return 0;
}

int pr_seal_decrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *buf, size_t n, const uint8_t tag[PR_SEAL_TAG_LEN])
{
    struct pr_seal_dir *d = &s->rx;
    uint8_t nonce[12];
    int rc = next_record(s, d, n, nonce);
    if (rc < 0)
        return rc;
    if (s->cipher == PR_SEAL_AES256GCM)
        rc = crypto_aead_aes256gcm_decrypt_detached_afternm(
            buf, NULL, buf, n, tag, ad, PR_SEAL_AD_LEN, nonce, &d->aes);
    else
        rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(
            buf, NULL, buf, n, tag, ad, PR_SEAL_AD_LEN, nonce, d->key);
    if (rc != 0)
        return -EBADMSG;
    d->seq++;
    d->bytes += n;
    return 0;
}
