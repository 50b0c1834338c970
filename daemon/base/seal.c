/* SPDX-License-Identifier: MIT */
#include "daemon/base/seal.h"

#include <errno.h>
#include <openssl/evp.h>
#include <sodium.h>
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

static const EVP_CIPHER *evp_cipher(uint32_t cipher)
{
    return cipher == PR_SEAL_AES256GCM ? EVP_aes_256_gcm()
                                       : EVP_chacha20_poly1305();
}

/* d takes `key`: its context keyed for what it does (enc 1: seal). */
static int dir_key(struct pr_seal *s, struct pr_seal_dir *d,
                   const uint8_t key[32], int enc)
{
    if (!d->ctx && !(d->ctx = EVP_CIPHER_CTX_new()))
        return -ENOMEM;
    memcpy(d->key, key, 32);
    d->bytes = 0;
    const EVP_CIPHER *c = d->rekeys ? NULL : evp_cipher(s->cipher);
    int ok = enc ? EVP_EncryptInit_ex(d->ctx, c, NULL, d->key, NULL)
                 : EVP_DecryptInit_ex(d->ctx, c, NULL, d->key, NULL);
    return ok == 1 ? 0 : -EINVAL;
}

int pr_seal_init(struct pr_seal *s, uint32_t cipher,
                 const struct pr_auth_key *key, char role,
                 const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                 const uint8_t transcript[PR_SEAL_HASH_LEN])
{
    if (!cipher || cipher != pr_seal_pick(cipher) ||
        (role != 'C' && role != 'S'))
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
    int rc = dir_key(s, &s->tx, role == 'C' ? cs : sc, 1);
    if (rc == 0)
        rc = dir_key(s, &s->rx, role == 'C' ? sc : cs, 0);
    sodium_memzero(secret, sizeof(secret));
    sodium_memzero(cs, sizeof(cs));
    sodium_memzero(sc, sizeof(sc));
    if (rc < 0)
        pr_seal_clear(s);
    return rc;
}

void pr_seal_clear(struct pr_seal *s)
{
    /* EVP_CIPHER_CTX_free() wipes the expanded keys it held. */
    EVP_CIPHER_CTX_free(s->tx.ctx);
    EVP_CIPHER_CTX_free(s->rx.ctx);
    sodium_memzero(s, sizeof(*s));
}

/*
 * Record seq's nonce, and the key moved on when the bytes under it would
 * pass the re-key volume: both sides do this at the same record.
 */
static int next_record(struct pr_seal *s, struct pr_seal_dir *d, size_t n,
                       int enc, uint8_t nonce[12])
{
    if (d->seq >= PR_SEAL_MAX_RECORDS)
        return -EKEYEXPIRED;
    if (!d->ctx)
        return -EINVAL;
    if (d->bytes + n > s->rekey_bytes && d->bytes > 0) {
        uint8_t next[32];
        kdf(next, d->key, "next", NULL, 0);
        d->rekeys++;
        int rc = dir_key(s, d, next, enc);
        sodium_memzero(next, sizeof(next));
        if (rc < 0)
            return rc;
    }
    memset(nonce, 0, 4);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(d->seq >> (56 - 8 * i));
    return 0;
}

/* The cipher's update over n bytes, in steps that fit its int lengths. */
static int update(EVP_CIPHER_CTX *ctx, int enc, uint8_t *dst,
                  const uint8_t *src, size_t n)
{
    const size_t step = 1u << 30;
    for (size_t off = 0; off < n; off += step) {
        int len = (int)(n - off < step ? n - off : step), out;
        int ok = enc ? EVP_EncryptUpdate(ctx, dst + off, &out, src + off, len)
                     : EVP_DecryptUpdate(ctx, dst + off, &out, src + off, len);
        if (ok != 1 || out != len)
            return -EINVAL;
    }
    return 0;
}

int pr_seal_encrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *dst, const uint8_t *src, size_t n,
                    uint8_t tag[PR_SEAL_TAG_LEN])
{
    struct pr_seal_dir *d = &s->tx;
    uint8_t nonce[12];
    int out;
    int rc = next_record(s, d, n, 1, nonce);
    if (rc < 0)
        return rc;
    EVP_CIPHER_CTX *ctx = d->ctx;
    if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_EncryptUpdate(ctx, NULL, &out, ad, PR_SEAL_AD_LEN) != 1 ||
        update(ctx, 1, dst, src, n) < 0 ||
        EVP_EncryptFinal_ex(ctx, dst + n, &out) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, PR_SEAL_TAG_LEN, tag) !=
            1)
        return -EINVAL;
    d->seq++;
    d->bytes += n;
    return 0;
}

int pr_seal_decrypt(struct pr_seal *s, const uint8_t ad[PR_SEAL_AD_LEN],
                    uint8_t *buf, size_t n, const uint8_t tag[PR_SEAL_TAG_LEN])
{
    struct pr_seal_dir *d = &s->rx;
    uint8_t nonce[12];
    int out;
    int rc = next_record(s, d, n, 0, nonce);
    if (rc < 0)
        return rc;
    EVP_CIPHER_CTX *ctx = d->ctx;
    if (EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_DecryptUpdate(ctx, NULL, &out, ad, PR_SEAL_AD_LEN) != 1 ||
        update(ctx, 0, buf, buf, n) < 0 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, PR_SEAL_TAG_LEN,
                            (void *)tag) != 1)
        return -EINVAL;
    /* The tag is checked here, after the bytes were decrypted in place. */
    if (EVP_DecryptFinal_ex(ctx, buf + n, &out) != 1)
        return -EBADMSG;
    d->seq++;
    d->bytes += n;
    return 0;
}
