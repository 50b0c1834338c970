/* SPDX-License-Identifier: MIT */
/*
 * What the wire encodings (daemon/engine/wire.c) cost on one core:
 * encoding 16 MiB of floats as bf16 and int8, with and without what was
 * lost, and decoding them, in GB/s of floats (16 MiB over the time, in or
 * out), next to memcpy of the same 16 MiB as the anchor: what moving the
 * floats costs with no arithmetic. Each case and the anchor alternate
 * (which goes first alternates too), BENCH_WIRE_ROUNDS rounds (default
 * 7) of about 50 ms each; the figures are medians with [min-max] ranges,
 * and the ratio is taken per round (case / memcpy of the same round), so
 * that drift on the machine cancels out. About 5 seconds.
 *
 * A benchmark that prints figures, not a test: it exits 0 unless
 * something fails outright.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/bench/bench_util.h"
#include "daemon/engine/wire.h"

#define MIB        16
#define N          ((size_t)MIB * 1024 * 1024 / sizeof(float))
#define ROUNDS_MAX 15
#define ROUND_S    0.05 /* each measurement at least this long */

enum op { MEMCPY, ENCODE, ENCODE_LOST, DECODE };

struct bufs {
    float *src, *dst, *lost;
    uint8_t *enc;
};

struct bench_case {
    const char *label;
    enum op op;
    enum pr_wire w;
};

static void run_op(const struct bufs *b, enum op op, enum pr_wire w)
{
    switch (op) {
    case MEMCPY:
        memcpy(b->dst, b->src, N * sizeof(float));
        break;
    case ENCODE:
        pr_wire_encode(w, b->enc, b->src, N, NULL);
        break;
    case ENCODE_LOST:
        pr_wire_encode(w, b->enc, b->src, N, b->lost);
        break;
    case DECODE:
        pr_wire_decode(w, b->dst, b->enc, N);
        break;
    }
}

/* GB/s of the floats over `iters` calls. */
static double rate(const struct bufs *b, enum op op, enum pr_wire w, int iters)
{
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        run_op(b, op, w);
    return (double)iters * (double)(N * sizeof(float)) / (now_s() - t0) / 1e9;
}

/* Calls of op that take about ROUND_S, from one timed call after a warm one. */
static int calibrate(const struct bufs *b, enum op op, enum pr_wire w)
{
    run_op(b, op, w);
    double t0 = now_s();
    run_op(b, op, w);
    double t = now_s() - t0;
    int iters = t > 0 ? (int)(ROUND_S / t) : 1000;
    return iters < 1 ? 1 : iters > 1000 ? 1000 : iters;
}

static void print_stat(const char *what, double *v, int n, const char *unit)
{
    double med = median(v, n);
    printf("  %-28s %9.3f %s [%.3f-%.3f]\n", what, med, unit, v[0], v[n - 1]);
}

int main(void)
{
    int rounds =
        getenv("BENCH_WIRE_ROUNDS") ? atoi(getenv("BENCH_WIRE_ROUNDS")) : 7;
    if (rounds < 1 || rounds > ROUNDS_MAX) {
        fprintf(stderr, "bench_wire: BENCH_WIRE_ROUNDS 1..%d\n", ROUNDS_MAX);
        return 2;
    }
    struct bufs b = {malloc(N * sizeof(float)), malloc(N * sizeof(float)),
                     malloc(N * sizeof(float)),
                     malloc(pr_wire_bytes(PR_WIRE_FP32, N))};
    if (!b.src || !b.dst || !b.lost || !b.enc) {
        fprintf(stderr, "bench_wire: out of memory\n");
        return 1;
    }
    /* Gradient-like floats: normal, of mixed signs and magnitudes. */
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < N; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b.src[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 1e-2f;
    }
    memset(b.dst, 0, N * sizeof(float));
    memset(b.lost, 0, N * sizeof(float));
    memset(b.enc, 0, pr_wire_bytes(PR_WIRE_FP32, N));

    static const struct bench_case cases[] = {
        {"bf16 encode", ENCODE, PR_WIRE_BF16},
        {"bf16 encode with lost", ENCODE_LOST, PR_WIRE_BF16},
        {"bf16 decode", DECODE, PR_WIRE_BF16},
        {"int8 encode", ENCODE, PR_WIRE_INT8},
        {"int8 encode with lost", ENCODE_LOST, PR_WIRE_INT8},
        {"int8 decode", DECODE, PR_WIRE_INT8},
    };
    enum { NCASES = sizeof(cases) / sizeof(cases[0]) };
    printf("bench_wire: %d MiB of floats (%zu), one core, %d rounds; GB/s "
           "of floats in or out, medians [min-max]; the ratio to memcpy "
           "per round:\n",
           MIB, N, rounds);
    int anchor_iters = calibrate(&b, MEMCPY, PR_WIRE_FP32);
    double anchor_all[NCASES * ROUNDS_MAX];
    int na = 0;
    for (int c = 0; c < NCASES; c++) {
        const struct bench_case *k = &cases[c];
        /* A decode reads what an encode of the same wire wrote. */
        if (k->op == DECODE)
            pr_wire_encode(k->w, b.enc, b.src, N, NULL);
        int iters = calibrate(&b, k->op, k->w);
        double gbs[ROUNDS_MAX], anchor[ROUNDS_MAX], ratio[ROUNDS_MAX];
        for (int r = 0; r < rounds; r++) {
            if (r % 2) {
                gbs[r] = rate(&b, k->op, k->w, iters);
                anchor[r] = rate(&b, MEMCPY, PR_WIRE_FP32, anchor_iters);
            } else {
                anchor[r] = rate(&b, MEMCPY, PR_WIRE_FP32, anchor_iters);
                gbs[r] = rate(&b, k->op, k->w, iters);
            }
            ratio[r] = gbs[r] / anchor[r];
            anchor_all[na++] = anchor[r];
        }
        print_stat(k->label, gbs, rounds, "GB/s");
        print_stat("  / memcpy", ratio, rounds, "x   ");
    }
    print_stat("memcpy (anchor, all rounds)", anchor_all, na, "GB/s");
    free(b.enc);
    free(b.lost);
    free(b.dst);
    free(b.src);
    return 0;
}
