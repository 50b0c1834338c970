/* SPDX-License-Identifier: MIT */
/*
 * What encryption (security.encrypt) costs: all-reduce throughput of 2
 * node daemons over TCP, 1 trainer each, policy allreduce, with sealed
 * links against the same cluster key with encrypt = off (the anchor:
 * authenticated handshake, then clear text), for 1 and 16 MiB tensors.
 * The two alternate, BENCH_SEAL_ROUNDS rounds (default 3) of
 * BENCH_RUN_S seconds each (default 4); the figures are medians with
 * [min-max] ranges, and the ratio is taken per round (on / off of the
 * same round) so that drift on the machine cancels out.
 *
 * First, one core's AEAD throughput on this machine (1 MiB records, both
 * ciphers seal.h picks from, through pr_seal as the links run it, and
 * libsodium's for comparison): what sealing a stream costs where the
 * network is not the bound.
 *
 *   bench_seal [MiB ...]      (default: 1 16)
 *
 * Prints figures; never fails on timing (exit 1 only when a run fails).
 */
#include <openssl/crypto.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/bench/bench_util.h"
#include "daemon/base/seal.h"
#include "tests/integration/harness.h"

#define ROUNDS_MAX 15

static void print_stat(const char *what, double *v, int n, const char *unit)
{
    double med = median(v, n);
    printf("  %-28s %9.2f %s [%.2f-%.2f]\n", what, med, unit, v[0], v[n - 1]);
}

/*
 * MB/s of sealing (open 0) or opening (open 1) 1 MiB records for about
 * `secs`, through pr_seal: what the links run. A batch is sealed by one
 * side and opened in order by the other; only the timed half counts.
 */
static double pr_rate(uint32_t cipher, int open, double secs)
{
    enum { BATCH = 32 };
    const size_t n = 1u << 20;
    struct pr_auth_key key = {.seal = cipher};
    uint8_t sn[PR_AUTH_NONCE_LEN], cn[PR_AUTH_NONCE_LEN], th[PR_SEAL_HASH_LEN];
    uint8_t ad[PR_SEAL_AD_LEN] = {0}, tags[BATCH][PR_SEAL_TAG_LEN];
    struct pr_seal c, s;
    uint8_t *m = malloc(n * BATCH);
    randombytes_buf(key.k, sizeof(key.k));
    randombytes_buf(sn, sizeof(sn));
    randombytes_buf(cn, sizeof(cn));
    randombytes_buf(th, sizeof(th));
    if (!m || pr_seal_init(&c, cipher, &key, 'C', sn, cn, th) < 0 ||
        pr_seal_init(&s, cipher, &key, 'S', sn, cn, th) < 0) {
        free(m);
        return 0;
    }
    randombytes_buf(m, n * BATCH);
    double spent = 0;
    long ops = 0;
    int bad = 0;
    while (spent < secs && !bad) {
        double t0 = now_s();
        for (int i = 0; i < BATCH; i++)
            bad |= pr_seal_encrypt(&c, ad, m + (size_t)i * n, m + (size_t)i * n,
                                   n, tags[i]) < 0;
        double t1 = now_s();
        for (int i = 0; i < BATCH; i++)
            bad |= pr_seal_decrypt(&s, ad, m + (size_t)i * n, n, tags[i]) < 0;
        spent += open ? now_s() - t1 : t1 - t0;
        ops += BATCH;
    }
    pr_seal_clear(&c);
    pr_seal_clear(&s);
    free(m);
    return bad ? 0 : (double)ops * (double)n / spent / 1e6;
}

/* The same for libsodium's own AEAD, which the links do not use. */
static double sodium_rate(int aes, double secs)
{
    const size_t n = 1u << 20;
    unsigned char *m = malloc(n), tag[16], key[32], nonce[12] = {0};
    crypto_aead_aes256gcm_state st;
    if (!m)
        return 0;
    randombytes_buf(m, n);
    randombytes_buf(key, sizeof(key));
    if (aes)
        crypto_aead_aes256gcm_beforenm(&st, key);
    long ops = 0;
    double t0 = now_s(), t;
    do {
        nonce[11] = (unsigned char)ops;
        if (aes)
            crypto_aead_aes256gcm_encrypt_detached_afternm(
                m, tag, NULL, m, n, NULL, 0, NULL, nonce, &st);
        else
            crypto_aead_chacha20poly1305_ietf_encrypt_detached(
                m, tag, NULL, m, n, NULL, 0, NULL, nonce, key);
        ops++;
        t = now_s();
    } while (t - t0 < secs);
    free(m);
    return (double)ops * (double)n / (t - t0) / 1e6;
}

static void aead_figures(void)
{
    printf("one core's AEAD throughput, 1 MiB records, MB/s (the links: "
           "pr_seal on %s; libsodium %s's seal for comparison):\n",
           OpenSSL_version(OPENSSL_VERSION), sodium_version_string());
    const uint32_t ciphers[] = {PR_SEAL_AES256GCM, PR_SEAL_CHACHA20POLY1305};
    for (int i = 0; i < 2; i++) {
        uint32_t cph = ciphers[i];
        if (!(pr_seal_ciphers() & cph)) {
            printf("  %-18s not on this CPU (no AES-NI): links use "
                   "ChaCha20-Poly1305\n",
                   pr_seal_cipher_name(cph));
            continue;
        }
        printf("  %-18s seal %7.0f   open %7.0f   (libsodium seal %7.0f)\n",
               pr_seal_cipher_name(cph), pr_rate(cph, 0, 1.0),
               pr_rate(cph, 1, 1.0),
               sodium_rate(cph == PR_SEAL_AES256GCM, 1.0));
    }
}

/* One round: MB/s of the all-reduce (tensor bytes per op / time per op). */
static int round_rate(double mib, double run_s, const char *key_set,
                      int encrypt, double *mbps)
{
    struct h_cluster c;
    const char *enc = encrypt ? "security.encrypt=on" : "security.encrypt=off";
    const char *const sched[] = {"scheduler.policy=allreduce", key_set, enc,
                                 NULL};
    const char *const node[] = {key_set, enc, "transport.type=tcp", NULL};
    if (h_cluster_start(&c, 2, sched, node) < 0) {
        fprintf(stderr, "bench_seal: cluster did not start\n");
        return -1;
    }
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    const char *names[2] = {"s0", "s1"};
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = n,
                                   .run_s = run_s,
                                   .no_check = 1,
                                   .warmup = 2,
                                   .timeout_ms = 120000};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int bad = 0;
    for (int i = 0; i < 2; i++)
        bad |= h_trainer_warm(&c, names[i], 180000) < 0;
    for (int i = 0; i < 2; i++)
        bad |= h_wait(pids[i], (int)(run_s * 1000) + 180000) != 0;
    long steps = 0, errors = 0;
    double secs = 0;
    if (!bad)
        bad = h_trainer_figures(&c, "s0", &steps, &secs, &errors) < 0;
    /* A sealed run must have sealed: its nodes say so in their logs. */
    if (!bad && encrypt && !h_log_contains(&c, "node0", "encrypted")) {
        fprintf(stderr, "bench_seal: node0 did not report its links "
                        "encrypted\n");
        bad = 1;
    }
    h_cluster_stop(&c);
    if (bad || steps == 0 || errors) {
        fprintf(stderr, "bench_seal: %.0f MiB run (encrypt %s) failed\n", mib,
                encrypt ? "on" : "off");
        return -1;
    }
    *mbps = (double)n * sizeof(float) * (double)steps / secs / 1e6;
    return 0;
}

static int bench_size(double mib, double run_s, int rounds, const char *set)
{
    double on[ROUNDS_MAX], off[ROUNDS_MAX], ratio[ROUNDS_MAX];
    for (int r = 0; r < rounds; r++) {
        /* Alternate which goes first, so neither always runs warm. */
        int first = r % 2;
        for (int k = 0; k < 2; k++) {
            int enc = k == 0 ? first : !first;
            if (round_rate(mib, run_s, set, enc, enc ? &on[r] : &off[r]) < 0)
                return -1;
        }
        ratio[r] = on[r] / off[r];
        printf("  round %d: encrypt off %8.1f MB/s, on %8.1f MB/s: %.3fx\n",
               r + 1, off[r], on[r], ratio[r]);
    }
    printf("allreduce 2 daemons over TCP, %.0f MiB, %d rounds of %.0f s:\n",
           mib, rounds, run_s);
    print_stat("encrypt off (anchor)", off, rounds, "MB/s");
    print_stat("encrypt on", on, rounds, "MB/s");
    print_stat("on / off", ratio, rounds, "x   ");
    return 0;
}

int main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return 1;
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 4.0;
    int rounds =
        getenv("BENCH_SEAL_ROUNDS") ? atoi(getenv("BENCH_SEAL_ROUNDS")) : 3;
    if (rounds < 1 || rounds > ROUNDS_MAX || !(run_s > 0)) {
        fprintf(stderr,
                "bench_seal: BENCH_SEAL_ROUNDS 1..%d, BENCH_RUN_S "
                "> 0\n",
                ROUNDS_MAX);
        return 2;
    }
    aead_figures();
    char key[] = "/tmp/preduce-bench-key-XXXXXX";
    int fd = mkstemp(key); /* mode 0600 */
    unsigned char k[32];
    randombytes_buf(k, sizeof(k));
    if (fd < 0 || write(fd, k, sizeof(k)) != (ssize_t)sizeof(k)) {
        perror("bench_seal: key file");
        return 1;
    }
    close(fd);
    char set[96];
    snprintf(set, sizeof(set), "security.key_file=%s", key);
    double dflt[] = {1, 16};
    int rc = 0, n = argc < 2 ? 2 : argc - 1;
    for (int i = 0; i < n && rc == 0; i++)
        rc = bench_size(argc < 2 ? dflt[i] : atof(argv[i + 1]), run_s, rounds,
                        set);
    unlink(key);
    return rc ? 1 : 0;
}
