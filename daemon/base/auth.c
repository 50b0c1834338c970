/* SPDX-License-Identifier: MIT */
#include "daemon/base/auth.h"

#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/base/seal.h"

#define KEY_MIN 16
#define KEY_MAX 4096

int pr_auth_load(const char *path, struct pr_auth_key *key, const char **why)
{
    if (sodium_init() < 0)
        return *why = "libsodium failed to initialise", -EIO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        *why = "cannot open the key file";
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return *why = "the key file is not a regular file", -EINVAL;
    }
    if (st.st_mode & 077) {
        close(fd);
        return *why = "the key file is readable by group or others "
                      "(chmod 600 it)",
               -EPERM;
    }
    uint8_t buf[KEY_MAX + 1];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - n)) > 0)
        n += (size_t)r;
    close(fd);
    if (n < KEY_MIN || n > KEY_MAX) {
        sodium_memzero(buf, sizeof(buf));
        return *why = "the key file must hold 16 to 4096 bytes", -EINVAL;
    }
    crypto_generichash(key->k, sizeof(key->k), buf, n, NULL, 0);
    key->seal = pr_seal_ciphers();
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

int pr_auth_generate(const char *path, const char **why)
{
    uint8_t k[32];
    char hex[2 * sizeof(k) + 2];
    if (sodium_init() < 0)
        return *why = "libsodium cannot start", -EIO;
    int fd =
        open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        *why = e == EEXIST ? "the file exists; a new key would lock out "
                             "every daemon that has it: remove it first"
                           : "cannot create the file";
        return -e;
    }
    randombytes_buf(k, sizeof(k));
    sodium_bin2hex(hex, sizeof(hex) - 1, k, sizeof(k));
    sodium_memzero(k, sizeof(k));
    size_t n = strlen(hex);
    hex[n++] = '\n';
    int rc = 0;
    errno = 0;
    /* umask cannot widen 0600, but an inherited ACL default could. */
    if (fchmod(fd, 0600) < 0 || write(fd, hex, n) != (ssize_t)n ||
        fsync(fd) < 0)
        rc = errno ? -errno : -EIO; /* a short write leaves errno 0 */
    sodium_memzero(hex, sizeof(hex));
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc < 0) {
        unlink(path);
        *why = "cannot write the file";
    }
    return rc;
}

void pr_auth_nonce(uint8_t nonce[PR_AUTH_NONCE_LEN])
{
    randombytes_buf(nonce, PR_AUTH_NONCE_LEN);
}

void pr_auth_prove(const struct pr_auth_key *key, char role,
                   const uint8_t first[PR_AUTH_NONCE_LEN],
                   const uint8_t second[PR_AUTH_NONCE_LEN],
                   uint8_t proof[PR_AUTH_PROOF_LEN])
{
    crypto_auth_hmacsha256_state st;
    uint8_t r = (uint8_t)role;
    crypto_auth_hmacsha256_init(&st, key->k, sizeof(key->k));
    crypto_auth_hmacsha256_update(&st, &r, 1);
    crypto_auth_hmacsha256_update(&st, first, PR_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, second, PR_AUTH_NONCE_LEN);
    crypto_auth_hmacsha256_final(&st, proof);
    sodium_memzero(&st, sizeof(st));
}

int pr_auth_verify(const struct pr_auth_key *key, char role,
                   const uint8_t first[PR_AUTH_NONCE_LEN],
                   const uint8_t second[PR_AUTH_NONCE_LEN],
                   const uint8_t *proof, size_t len)
{
    uint8_t want[PR_AUTH_PROOF_LEN];
    if (len != PR_AUTH_PROOF_LEN)
        return -EACCES;
    pr_auth_prove(key, role, first, second, want);
    int ok = crypto_verify_32(want, proof) == 0;
    sodium_memzero(want, sizeof(want));
    return ok ? 0 : -EACCES;
}

void pr_auth_clear(struct pr_auth_key *key)
{
    sodium_memzero(key, sizeof(*key));
}

int pr_auth_job_proof(const uint8_t *key, size_t len, const char *job,
                      uint8_t proof[PR_AUTH_JOB_PROOF_LEN], const char **why)
{
    static const char label[] = "preduce job key v1";
    if (len < KEY_MIN || len > KEY_MAX)
        return *why = "a job key file must hold 16 to 4096 bytes", -EINVAL;
    if (sodium_init() < 0)
        return *why = "libsodium failed to initialise", -EIO;
    uint8_t k[crypto_auth_hmacsha256_KEYBYTES];
    crypto_generichash(k, sizeof(k), key, len, NULL, 0);
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, k, sizeof(k));
    /* The label's NUL ends it, so no job name can extend it. */
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof(label));
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)job, strlen(job));
    crypto_auth_hmacsha256_final(&st, proof);
    sodium_memzero(&st, sizeof(st));
    sodium_memzero(k, sizeof(k));
    return 0;
}

int pr_auth_job_proof_equal(const uint8_t *a, size_t alen, const uint8_t *b,
                            size_t blen)
{
    if (alen != blen)
        return 0;
    return alen == 0 ||
           (alen == PR_AUTH_JOB_PROOF_LEN && crypto_verify_32(a, b) == 0);
}

void pr_auth_challenge(const struct pr_auth_key *key,
                       uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                       Pr__V1__Challenge *ch)
{
    pr__v1__challenge__init(ch);
    pr_auth_nonce(s_nonce);
    ch->nonce.data = s_nonce;
    ch->nonce.len = PR_AUTH_NONCE_LEN;
    ch->required = key != NULL;
    ch->seal = key ? key->seal : 0;
}

int pr_auth_answer(const struct pr_auth_key *key, const Pr__V1__Challenge *ch,
                   uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                   uint8_t buf[2 * PR_AUTH_NONCE_LEN], size_t *len,
                   uint32_t *cipher, const char **why)
{
    *len = 0;
    *cipher = 0;
    if (ch->nonce.len != PR_AUTH_NONCE_LEN)
        return *why = "challenge without a nonce", -EPROTO;
    memcpy(s_nonce, ch->nonce.data, PR_AUTH_NONCE_LEN);
    if (ch->required && !key)
        return *why = "it requires a cluster key and this side has none "
                      "(security.key_file)",
               -EACCES;
    if (!ch->required && key)
        return *why = "this side has a cluster key and it does not "
                      "authenticate",
               -EACCES;
    if (!key)
        return 0;
    if (key->seal && !ch->seal)
        return *why = "this side encrypts its links (security.encrypt) and "
                      "the other does not",
               -EACCES;
    if (!key->seal && ch->seal)
        return *why = "the other side encrypts its links and this side does "
                      "not (security.encrypt = off)",
               -EACCES;
    if (key->seal) {
        *cipher = pr_seal_pick(ch->seal & key->seal);
        if (!*cipher)
            return *why = "no cipher in common to encrypt the link", -EPROTO;
    }
    pr_auth_nonce(c_nonce);
    memcpy(buf, c_nonce, PR_AUTH_NONCE_LEN);
    pr_auth_prove(key, 'C', s_nonce, c_nonce, buf + PR_AUTH_NONCE_LEN);
    *len = 2 * PR_AUTH_NONCE_LEN;
    return 0;
}

int pr_auth_check_hello(const struct pr_auth_key *key,
                        const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                        const ProtobufCBinaryData *auth, uint32_t seal,
                        uint8_t proof[PR_AUTH_PROOF_LEN], size_t *len,
                        const char **why)
{
    *len = 0;
    if (!key)
        return 0;
    if (auth->len != 2 * PR_AUTH_NONCE_LEN)
        return *why = "no proof of the cluster key in its hello", -EACCES;
    const uint8_t *c_nonce = auth->data;
    if (pr_auth_verify(key, 'C', s_nonce, c_nonce,
                       auth->data + PR_AUTH_NONCE_LEN, PR_AUTH_PROOF_LEN) < 0)
        return *why = "wrong proof of the cluster key (another key?)", -EACCES;
    if (key->seal && !(seal & key->seal && pr_seal_pick(seal) == seal))
        return *why = seal ? "its hello picks a cipher this side did not "
                             "offer"
                           : "it does not encrypt its links and this side "
                             "does (security.encrypt)",
               -EACCES;
    if (!key->seal && seal)
        return *why = "it encrypts its links and this side does not "
                      "(security.encrypt = off)",
               -EACCES;
    pr_auth_prove(key, 'S', c_nonce, s_nonce, proof);
    *len = PR_AUTH_PROOF_LEN;
    return 0;
}

int pr_auth_check_welcome(const struct pr_auth_key *key,
                          const uint8_t c_nonce[PR_AUTH_NONCE_LEN],
                          const uint8_t s_nonce[PR_AUTH_NONCE_LEN],
                          const ProtobufCBinaryData *auth, const char **why)
{
    if (!key)
        return 0;
    if (pr_auth_verify(key, 'S', c_nonce, s_nonce, auth->data, auth->len) < 0)
        return *why = "its welcome does not prove the cluster key", -EACCES;
    return 0;
}
