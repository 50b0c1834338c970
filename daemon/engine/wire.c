/* SPDX-License-Identifier: MIT */
/*
 * The loops work on the floats' bits where that lets GCC vectorise them
 * without fast-math: the largest magnitude of a block is an integer
 * maximum of the bits with the sign cleared (the same order as the
 * magnitudes for every non-NaN float, and above every finite one for NaN
 * and infinity), and bf16 rounding is integer arithmetic. Built at -O3
 * (Makefile).
 */
#include "daemon/engine/wire.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

const char *pr_wire_name(uint32_t w)
{
    static const char *const names[PR_WIRE_COUNT] = {"fp32", "bf16", "int8"};
    return w < PR_WIRE_COUNT ? names[w] : "?";
}

int pr_wire_parse(const char *s, enum pr_wire *out)
{
    for (uint32_t w = 0; s && w < PR_WIRE_COUNT; w++) {
        if (!strcmp(s, pr_wire_name(w))) {
            *out = (enum pr_wire)w;
            return 0;
        }
    }
    return -EINVAL;
}

size_t pr_wire_bytes(enum pr_wire w, size_t n)
{
    switch (w) {
    case PR_WIRE_BF16:
        return 2 * n;
    case PR_WIRE_INT8:
        return n + 4 * ((n + PR_WIRE_BLOCK - 1) / PR_WIRE_BLOCK);
    default:
        return 4 * n;
    }
}

static inline uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/*
 * Round to nearest even on the bits: adding 0x7fff plus the lowest kept
 * bit carries into the kept half exactly when the dropped half is above
 * one half, or one half with the kept half odd. A carry out of the
 * largest finite values gives infinity, as rounding should. A NaN keeps
 * its sign and top payload bits, with the quiet bit set so that no
 * payload rounds to infinity.
 */
static inline uint16_t bf16_round(uint32_t u)
{
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

uint16_t pr_wire_bf16(float x)
{
    return bf16_round(bits_of(x));
}

static void bf16_encode(uint8_t *restrict dst, const float *src, size_t n,
                        float *lost)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = bits_of(src[i]);
        uint16_t b = bf16_round(u);
        dst[2 * i] = (uint8_t)b;
        dst[2 * i + 1] = (uint8_t)(b >> 8);
        if (lost)
            lost[i] = src[i] - float_of((uint32_t)b << 16);
    }
}

static void bf16_decode(float *restrict dst, const uint8_t *restrict src,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8;
        dst[i] = float_of(b << 16);
    }
}

/* The largest magnitude's bits (> 0x7f800000: a NaN, == it: infinity). */
static uint32_t max_abs_bits(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = bits_of(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* 1.5 x 2^23: adding and taking it away rounds |t| < 2^22 to an integer,
 * to nearest even, in the current (default) rounding mode. */
#define ROUND_MAGIC 12582912.0f

/*
 * One block of n <= PR_WIRE_BLOCK floats. q = x * 127 / max rounded to
 * nearest even (|x * 127 / max| is at most a few ulps past 127, which
 * rounds to 127: no clamp), decoded as q * scale with scale = max / 127
 * sent, rounded down where 127 x scale would pass the largest float. The
 * quantising loop has no branch, so that GCC vectorises it. An all-zero
 * block has scale 0 and decodes to zeros.
 */
static void int8_block(uint8_t *restrict dst, const float *src, size_t n,
                       float *lost)
{
    uint32_t mb = max_abs_bits(src, n);
    int8_t *q = (int8_t *)(dst + 4);
    float scale = NAN, inv = 0, pre = 1;
    if (mb < 0x7f800000u) {
        float max = float_of(mb);
        scale = max / 127.0f;
        if (!(127.0f * scale <= FLT_MAX))
            scale = nextafterf(scale, 0); /* FLT_MAX / 127 rounds up */
        /* Below 127 / FLT_MAX, 127 / max overflows: scaled up first. */
        pre = max > 127.0f / FLT_MAX ? 1.0f : 0x1p64f;
        inv = mb ? 127.0f / (max * pre) : 0;
    }
    uint32_t sb = bits_of(scale);
    for (int i = 0; i < 4; i++)
        dst[i] = (uint8_t)(sb >> (8 * i));
    if (mb >= 0x7f800000u) {
        memset(q, 0, n); /* x * 0 would be NaN, no integer */
        /*
         * Nothing to carry to the next reduce: a NaN kept for feedback
         * would come back in every reduce after, never to clear.
         */
        if (lost)
            memset(lost, 0, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float t = (src[i] * pre * inv + ROUND_MAGIC) - ROUND_MAGIC;
        q[i] = (int8_t)(int32_t)t;
    }
    if (lost)
        for (size_t i = 0; i < n; i++)
            lost[i] = src[i] - (float)q[i] * scale;
}

static void int8_encode(uint8_t *restrict dst, const float *src, size_t n,
                        float *lost)
{
    for (size_t i = 0; i < n; i += PR_WIRE_BLOCK) {
        size_t k = n - i < PR_WIRE_BLOCK ? n - i : PR_WIRE_BLOCK;
        int8_block(dst, src + i, k, lost ? lost + i : NULL);
        dst += 4 + k;
    }
}

static void int8_decode(float *restrict dst, const uint8_t *restrict src,
                        size_t n)
{
    for (size_t i = 0; i < n; i += PR_WIRE_BLOCK) {
        size_t k = n - i < PR_WIRE_BLOCK ? n - i : PR_WIRE_BLOCK;
        uint32_t sb = (uint32_t)src[0] | (uint32_t)src[1] << 8 |
                      (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24;
        float scale = float_of(sb);
        const int8_t *q = (const int8_t *)(src + 4);
        for (size_t j = 0; j < k; j++)
            dst[i + j] = (float)q[j] * scale;
        src += 4 + k;
    }
}

void pr_wire_encode(enum pr_wire w, void *restrict dst, const float *src,
                    size_t n, float *lost)
{
    switch (w) {
    case PR_WIRE_BF16:
        bf16_encode(dst, src, n, lost);
        break;
    case PR_WIRE_INT8:
        int8_encode(dst, src, n, lost);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        if (lost)
            memset(lost, 0, n * sizeof(float));
        break;
    }
}

void pr_wire_decode(enum pr_wire w, float *restrict dst,
                    const void *restrict src, size_t n)
{
    switch (w) {
    case PR_WIRE_BF16:
        bf16_decode(dst, src, n);
        break;
    case PR_WIRE_INT8:
        int8_decode(dst, src, n);
        break;
    default:
        memcpy(dst, src, n * sizeof(float));
        break;
    }
}
