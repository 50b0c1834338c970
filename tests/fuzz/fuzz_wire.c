/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the wire encodings of a chunk's floats
 * (daemon/engine/wire.c). The first byte picks the encoding (its value
 * modulo PR_WIRE_COUNT); the rest is read twice.
 *
 * 1. As a peer's chunk: the floats that fit in it are decoded from a copy
 *    of exactly pr_wire_bytes(w, n) bytes into exactly n floats, so that
 *    ASan sees a read or write past either. Each float must be what the
 *    layout says: fp32 its four bytes, bf16 its two as the upper half,
 *    int8 its signed byte times its block's little-endian scale. bf16
 *    encodes what it decoded back to the same bytes (a NaN made quiet).
 *
 * 2. As little-endian floats x, encoded with lost and decoded to y. For
 *    each x: fp32 carries it bit for bit and loses +0. bf16 gives the
 *    nearer of the two bf16 values around x (ties to even, infinity past
 *    the largest), so |x - y| <= 2^-8 |x| for a normal x and <= 2^-134
 *    (half of bf16's subnormal step) below; a NaN stays a NaN of its sign.
 *    int8 sends max|x| / 127 as each block's scale s and y within
 *    s / 2 (and a few float ulps of 127 s) of x, its largest magnitude
 *    within a ulp when s is a normal float; a block holding a NaN or an
 *    infinity is NaN throughout, its lost 0. Else lost is x - y: bit for
 *    bit the float
 *    subtraction, and exact (as the difference in double) where y is
 *    within [x / 2, 2 x] or 0: always for bf16; for int8 but where an x
 *    just under half a step rounds up to one.
 *    Encoding with lost == src gives the same bytes and lost.
 *
 * It prints the breach and aborts.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/wire.h"
#include "tests/wire_bits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void breach(const char *what, size_t i, float x, float y)
{
    fprintf(stderr, "fuzz_wire: float %zu (%a -> %a): %s\n", i, (double)x,
            (double)y, what);
    abort();
}

/* The most floats whose encoding in w fits in len bytes. */
static size_t fitting(enum pr_wire w, size_t len)
{
    if (w == PR_WIRE_FP32)
        return len / 4;
    if (w == PR_WIRE_BF16)
        return len / 2;
    size_t rem = len % PR_WIRE_BLOCK_BYTES;
    return len / PR_WIRE_BLOCK_BYTES * PR_WIRE_BLOCK + (rem > 4 ? rem - 4 : 0);
}

static void check_decode(enum pr_wire w, const uint8_t *data, size_t len)
{
    size_t n = fitting(w, len), nb = pr_wire_bytes(w, n);
    if (nb > len)
        breach("pr_wire_bytes past what fits", n, 0, 0);
    uint8_t *src = malloc(nb ? nb : 1), *again = malloc(nb ? nb : 1);
    float *dst = malloc(n ? n * sizeof(float) : 1);
    if (!src || !again || !dst)
        abort();
    memcpy(src, data, nb);
    pr_wire_decode(w, dst, src, n);
    float s = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t want;
        if (w == PR_WIRE_FP32) {
            want = bits(le_float(src + 4 * i));
        } else if (w == PR_WIRE_BF16) {
            want = ((uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8) << 16;
        } else {
            /* Block b starts at b * PR_WIRE_BLOCK_BYTES, its byte j at 4 + j.
             */
            size_t at = i / PR_WIRE_BLOCK * PR_WIRE_BLOCK_BYTES;
            if (i % PR_WIRE_BLOCK == 0)
                s = le_float(src + at);
            want = bits((float)(int8_t)src[at + 4 + i % PR_WIRE_BLOCK] * s);
        }
        if (bits(dst[i]) != want)
            breach("decodes other than its bytes say", i, flt(want), dst[i]);
    }
    if (w == PR_WIRE_BF16) {
        pr_wire_encode(w, again, dst, n, NULL);
        for (size_t i = 0; i < n; i++) {
            uint16_t b = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            int nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu);
            uint16_t want = nan ? (uint16_t)(b | 0x40u) : b;
            if (again[2 * i] != (want & 0xff) || again[2 * i + 1] != want >> 8)
                breach("a bf16 value re-encodes otherwise", i, dst[i], 0);
        }
    }
    free(dst);
    free(again);
    free(src);
}

static void check_bf16(size_t i, float x, float y)
{
    if (isnan(x)) {
        if (!isnan(y) || !(bits(y) & 0x400000u) ||
            (bits(y) ^ bits(x)) & 0x80000000u)
            breach("a NaN is not a quiet NaN of its sign", i, x, y);
        return;
    }
    if (bits(y) != bf16_ref_bits(x))
        breach("not the nearest bf16, ties to even", i, x, y);
    double err = fabs((double)x - (double)y);
    if (isfinite(y) && err > fmax(0x1p-8 * fabs((double)x), 0x1p-134))
        breach("off by more than 2^-8 |x| or 2^-134", i, x, y);
}

static void check_int8(const float *x, const float *y, const uint8_t *enc,
                       size_t n)
{
    for (size_t b = 0; b < n; b += PR_WIRE_BLOCK) {
        size_t k = n - b < PR_WIRE_BLOCK ? n - b : PR_WIRE_BLOCK;
        float max = 0, s = le_float(enc);
        size_t at = b;
        int finite = 1;
        for (size_t i = b; i < b + k; i++) {
            finite &= isfinite(x[i]) != 0;
            if (fabsf(x[i]) > max) {
                max = fabsf(x[i]);
                at = i;
            }
        }
        /* max / 127, a float down where 127 of it would overflow. */
        float want = max / 127.0f;
        if (!(127.0f * want <= FLT_MAX))
            want = nextafterf(want, 0);
        if (finite ? bits(s) != bits(want) : !isnan(s))
            breach("a block's scale is not max / 127 (NaN if not finite)", b,
                   max, s);
        for (size_t i = b; i < b + k; i++) {
            if (!finite ? !isnan(y[i])
                        : fabs((double)x[i] - (double)y[i]) > int8_bound(s))
                breach("off by more than half a step", i, x[i], y[i]);
        }
        if (finite && isnormal(s)) {
            uint32_t a = bits(fabsf(y[at])), m = bits(max);
            if ((a > m ? a - m : m - a) > 1)
                breach("the block's max is not within a ulp", at, x[at], y[at]);
        }
        enc += 4 + k;
    }
}

static void check_encode(enum pr_wire w, const uint8_t *data, size_t len)
{
    size_t n = len / 4, nb = pr_wire_bytes(w, n), fb = n * sizeof(float);
    float *x = malloc(fb ? fb : 1), *y = malloc(fb ? fb : 1);
    float *lost = malloc(fb ? fb : 1), *alias = malloc(fb ? fb : 1);
    uint8_t *enc = malloc(nb ? nb : 1), *enc2 = malloc(nb ? nb : 1);
    if (!x || !y || !lost || !alias || !enc || !enc2)
        abort();
    for (size_t i = 0; i < n; i++)
        x[i] = le_float(data + 4 * i);
    pr_wire_encode(w, enc, x, n, lost);
    pr_wire_decode(w, y, enc, n);

    for (size_t i = 0; i < n; i++) {
        if (w == PR_WIRE_FP32 && (bits(y[i]) != bits(x[i]) || bits(lost[i])))
            breach("fp32 is not carried bit for bit, losing +0", i, x[i], y[i]);
        if (w == PR_WIRE_BF16)
            check_bf16(i, x[i], y[i]);
        float d = x[i] - y[i];
        /* An int8 block that is not finite (y NaN) carries nothing on. */
        if (w == PR_WIRE_INT8 && isnan(y[i]) && bits(lost[i]) != 0)
            breach("lost is not 0 in a block that is not finite", i, x[i],
                   lost[i]);
        else if (w != PR_WIRE_FP32 && !(w == PR_WIRE_INT8 && isnan(y[i])) &&
                 bits(lost[i]) != bits(d) && !(isnan(lost[i]) && isnan(d)))
            breach("lost is not x - y", i, x[i], lost[i]);
        /* Exact where y is within [x / 2, 2 x] (Sterbenz) or 0. */
        if (w != PR_WIRE_FP32 && isfinite(lost[i]) &&
            2 * fabsf(x[i]) >= fabsf(y[i]) &&
            (double)lost[i] != (double)x[i] - (double)y[i])
            breach("lost is not exact", i, x[i], lost[i]);
    }
    if (w == PR_WIRE_INT8)
        check_int8(x, y, enc, n);

    /* lost == src: the same bytes, and x replaced by what was lost. */
    memcpy(alias, x, fb);
    pr_wire_encode(w, enc2, alias, n, alias);
    if (memcmp(enc, enc2, nb) != 0 || memcmp(alias, lost, fb) != 0)
        breach("lost == src encodes otherwise", 0, 0, 0);
    free(enc2);
    free(enc);
    free(alias);
    free(lost);
    free(y);
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum pr_wire w = (enum pr_wire)(data[0] % PR_WIRE_COUNT);
    check_decode(w, data + 1, size - 1);
    check_encode(w, data + 1, size - 1);
    return 0;
}
