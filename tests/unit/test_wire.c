/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the wire encodings of a chunk's floats
 * (daemon/engine/wire.c): bf16 rounding against a reference computed in
 * double, what int8's blocks carry and lose, the byte layouts, the names,
 * and error feedback over repeated rounds. Plain functions, no loop.
 *
 * What "lost" is checked against: src - decoded computed in double, where
 * the difference of two floats is exact, so that a lost vector that is
 * itself rounded (or fused with the product) shows.
 */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/wire.h"
#include "tests/wire_bits.h"
#include "tests/check_run.h"

#define CANARY_BYTE 0xa5
#define CANARY      -12345.0f

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Uniform in [lo, hi). */
static double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* A float of random sign and mantissa with its exponent in [lo, hi]. */
static float rng_float(int lo, int hi)
{
    int e = lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
    double m = rng_uniform(1.0, 2.0);
    return (float)(rng_next() & 1 ? -ldexp(m, e) : ldexp(m, e));
}

/* Floats between a and b of the same sign: 0 when equal. */
static uint32_t ulps(float a, float b)
{
    uint32_t x = bits(a), y = bits(b);
    return x > y ? x - y : y - x;
}

/* bf16 of a finite float by the definition (tests/wire_bits.h). */
static uint16_t bf16_ref(float x)
{
    return (uint16_t)(bf16_ref_bits(x) >> 16);
}

/* Against bf16_ref, for a u that is not a NaN (test_wire_bf16_nan). */
static void check_bf16(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return;
    float x = flt(u);
    uint16_t got = pr_wire_bf16(x), want = bf16_ref(x);
    ck_assert_msg(got == want, "bf16 of 0x%08x (%a): 0x%04x, want 0x%04x", u,
                  (double)x, got, want);
}

START_TEST(test_wire_bf16_rne_reference)
{
    /* Every bf16 value with low halves at and around each tie... */
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000,
                                    0x8001, 0xfffe, 0xffff};
    rng_state = 0xbf16bf16bf16ULL;
    for (uint32_t hi = 0; hi <= 0xffff; hi++) {
        for (size_t k = 0; k < sizeof(lows) / sizeof(lows[0]); k++)
            check_bf16(hi << 16 | lows[k]);
        check_bf16(hi << 16 | (uint32_t)(rng_next() & 0xffff));
    }
    /* ... then a million random patterns. */
    for (int i = 0; i < 1000000; i++)
        check_bf16((uint32_t)(rng_next() >> 32));
}
END_TEST

START_TEST(test_wire_bf16_ties_and_edges)
{
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f808000, 0x3f80}, /* tie, kept half even: stays */
        {0x3f818000, 0x3f82}, /* tie, kept half odd: up to even */
        {0x3f808001, 0x3f81}, /* just past the tie */
        {0x3f807fff, 0x3f80}, /* just short of it */
        {0xbf818000, 0xbf82}, /* negative ties away from zero to even */
        {0xbf808000, 0xbf80},
        {0x3f7fffff, 0x3f80}, /* a carry into the exponent: 1 - 2^-24 */
        {0x00000000, 0x0000},
        {0x80000000, 0x8000}, /* negative zero keeps its sign */
        {0x00000001, 0x0000}, /* the smallest subnormal */
        {0x00008000, 0x0000}, /* subnormal tie, even: to zero */
        {0x00018000, 0x0002}, /* subnormal tie, odd: up */
        {0x80008000, 0x8000},
        {0x80018000, 0x8002},
        {0x007fffff, 0x0080}, /* the largest subnormal: up to FLT_MIN */
        {0x00800000, 0x0080}, /* FLT_MIN */
        {0x7f800000, 0x7f80}, /* infinities stay */
        {0xff800000, 0xff80},
        {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to infinity */
        {0xff7fffff, 0xff80},
        {0x7f7f8000, 0x7f80}, /* the tie to infinity: infinity is even */
        {0x7f7f7fff, 0x7f7f}, /* the largest that stays finite */
        {0x7f7e8000, 0x7f7e}, /* a tie just below: stays */
        {0x7f7effff, 0x7f7f},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint16_t got = pr_wire_bf16(flt(cases[i].in));
        ck_assert_msg(got == cases[i].out,
                      "bf16 of 0x%08x: 0x%04x, want 0x%04x", cases[i].in, got,
                      cases[i].out);
    }
    ck_assert_uint_eq(pr_wire_bf16(FLT_MAX), 0x7f80);
    ck_assert_uint_eq(pr_wire_bf16(-FLT_MAX), 0xff80);
    ck_assert_uint_eq(pr_wire_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(pr_wire_bf16(-2.0f), 0xc000);
}
END_TEST

/* A NaN stays a NaN of its sign, quiet, with its top payload bits. */
static void check_bf16_nan(uint32_t u)
{
    uint16_t b = pr_wire_bf16(flt(u));
    ck_assert_msg((b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0,
                  "bf16 of NaN 0x%08x: 0x%04x is not a NaN", u, b);
    ck_assert_msg(b & 0x40u, "bf16 of NaN 0x%08x: 0x%04x is not quiet", u, b);
    ck_assert_msg((b & 0x8000u) == (u >> 16 & 0x8000u),
                  "bf16 of NaN 0x%08x: 0x%04x lost its sign", u, b);
    ck_assert_msg((b | 0x40u) == (uint16_t)(u >> 16 | 0x40u),
                  "bf16 of NaN 0x%08x: 0x%04x lost its payload", u, b);
}

START_TEST(test_wire_bf16_nan)
{
    static const uint32_t nans[] = {
        0x7fc00000, 0xffc00000, /* quiet */
        0x7f800001, 0xff800001, /* signalling, payload only in the low half */
        0x7f808000, 0x7f80ffff, /* ... which must not round to infinity */
        0x7fbfffff, 0x7fffffff, /* nor carry into the sign */
        0xffffffff, 0x7fc0ffff,
    };
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++)
        check_bf16_nan(nans[i]);
    ck_assert_uint_eq(pr_wire_bf16(flt(0x7f800001)), 0x7fc0);
    ck_assert_uint_eq(pr_wire_bf16(flt(0xffffffff)), 0xffff);
    ck_assert(isnan((double)flt((uint32_t)pr_wire_bf16(NAN) << 16)));
    rng_state = 0x0a0a0a0a0aULL;
    for (int i = 0; i < 100000; i++) {
        uint32_t u = (uint32_t)(rng_next() >> 32) | 0x7f800000u;
        if (u & 0x7fffffu)
            check_bf16_nan(u);
    }
}
END_TEST

/*
 * n floats through bf16 and back: the bytes are pr_wire_bf16's,
 * little-endian; the decoded float is that value's bits in the upper
 * half; lost is src - decoded exactly, with lost apart from src or src
 * itself. Nothing past the n floats or 2n bytes is written.
 */
static void check_bf16_roundtrip(const float *x, size_t n)
{
    uint8_t *enc = malloc(2 * n + 8);
    float *dec = malloc((n + 1) * sizeof(float));
    float *lost = malloc((n + 1) * sizeof(float));
    float *inplace = malloc((n + 1) * sizeof(float));
    ck_assert(enc && dec && lost && inplace);
    memset(enc, CANARY_BYTE, 2 * n + 8);
    dec[n] = lost[n] = CANARY;
    pr_wire_encode(PR_WIRE_BF16, enc, x, n, lost);
    for (size_t k = 0; k < 8; k++)
        ck_assert_uint_eq(enc[2 * n + k], CANARY_BYTE);
    ck_assert_float_eq(lost[n], CANARY);
    pr_wire_decode(PR_WIRE_BF16, dec, enc, n);
    ck_assert_float_eq(dec[n], CANARY);
    for (size_t i = 0; i < n; i++) {
        uint16_t b = pr_wire_bf16(x[i]);
        ck_assert_msg(enc[2 * i] == (b & 0xff) && enc[2 * i + 1] == b >> 8,
                      "float %zu (0x%08x): bytes %02x %02x, want 0x%04x", i,
                      bits(x[i]), enc[2 * i], enc[2 * i + 1], b);
        ck_assert_msg(bits(dec[i]) == (uint32_t)b << 16,
                      "float %zu (0x%08x) decodes to 0x%08x", i, bits(x[i]),
                      bits(dec[i]));
        double want = (double)x[i] - (double)dec[i];
        if (isnan(want))
            ck_assert_msg(isnan(lost[i]), "float %zu: lost %a, want NaN", i,
                          (double)lost[i]);
        else
            ck_assert_msg((double)lost[i] == want,
                          "float %zu (%a): lost %a, want %a exactly", i,
                          (double)x[i], (double)lost[i], want);
    }
    /* lost may be src: the same bytes, src replaced by what was lost. */
    memcpy(inplace, x, n * sizeof(float));
    uint8_t *enc2 = malloc(2 * n + 1);
    ck_assert(enc2);
    pr_wire_encode(PR_WIRE_BF16, enc2, inplace, n, inplace);
    ck_assert_mem_eq(enc2, enc, 2 * n);
    ck_assert_mem_eq(inplace, lost, n * sizeof(float));
    free(enc2);
    free(inplace);
    free(lost);
    free(dec);
    free(enc);
}

START_TEST(test_wire_bf16_roundtrip_lost)
{
    enum { N = 4099 };
    static float x[N];
    static const float edges[] = {
        0.0f,      -0.0f,    1.0f,        -1.0f,      FLT_MAX, -FLT_MAX,
        FLT_MIN,   -FLT_MIN, 1e-45f,      -1e-45f,    3.0e38f, INFINITY,
        -INFINITY, NAN,      1.00390625f, 1.01171875f};
    size_t ne = sizeof(edges) / sizeof(edges[0]);
    rng_state = 0x7777ULL;
    for (size_t i = 0; i < N; i++)
        x[i] = i < ne ? edges[i] : rng_float(-149, 127);
    check_bf16_roundtrip(x, N);
    check_bf16_roundtrip(x, 1);
    check_bf16_roundtrip(x + 3, 0);
    /* The overflow: FLT_MAX decodes to infinity and loses -infinity. */
    float lost, dec;
    uint8_t b[2];
    pr_wire_encode(PR_WIRE_BF16, b, (const float[]){FLT_MAX}, 1, &lost);
    pr_wire_decode(PR_WIRE_BF16, &dec, b, 1);
    ck_assert(isinf(dec) && dec > 0);
    ck_assert(isinf(lost) && lost < 0);
}
END_TEST

START_TEST(test_wire_fp32_copies)
{
    const float x[5] = {1.5f, -0.0f, NAN, INFINITY, 1e-45f};
    uint8_t enc[24];
    float dec[6], lost[6];
    memset(enc, CANARY_BYTE, sizeof(enc));
    dec[5] = lost[5] = CANARY;
    pr_wire_encode(PR_WIRE_FP32, enc, x, 5, lost);
    ck_assert_mem_eq(enc, x, sizeof(x));
    ck_assert_uint_eq(enc[20], CANARY_BYTE);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(bits(lost[i]), 0);
    ck_assert_float_eq(lost[5], CANARY);
    pr_wire_decode(PR_WIRE_FP32, dec, enc, 5);
    ck_assert_mem_eq(dec, x, sizeof(x));
    ck_assert_float_eq(dec[5], CANARY);
}
END_TEST

/*
 * n floats through int8 and back, checking each block: its scale's bytes
 * are max|x| / 127 in float (NaN when the block holds a NaN or an
 * infinity), each decoded float is q * scale, within int8_bound of x for a
 * finite block and NaN otherwise; lost is x - decoded as float
 * subtraction has it (0 in a block that is not finite), and exact where
 * the decoded float is at most 2 |x| (Sterbenz: every float that rounds
 * to the nearer step; x just under half a step may round up, its
 * difference then rounded); the largest magnitude decodes within one ulp
 * when the scale is a normal float. Nothing is written past the bytes or
 * floats due; lost may be src.
 */
static void check_int8(const float *x, size_t n)
{
    size_t nb = pr_wire_bytes(PR_WIRE_INT8, n);
    uint8_t *enc = malloc(nb + 8), *enc2 = malloc(nb + 1);
    float *dec = malloc((n + 1) * sizeof(float));
    float *lost = malloc((n + 1) * sizeof(float));
    float *inplace = malloc((n + 1) * sizeof(float));
    ck_assert(enc && enc2 && dec && lost && inplace);
    memset(enc, CANARY_BYTE, nb + 8);
    dec[n] = lost[n] = CANARY;
    pr_wire_encode(PR_WIRE_INT8, enc, x, n, lost);
    for (size_t k = 0; k < 8; k++)
        ck_assert_uint_eq(enc[nb + k], CANARY_BYTE);
    ck_assert_float_eq(lost[n], CANARY);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, n);
    ck_assert_float_eq(dec[n], CANARY);

    const uint8_t *p = enc;
    for (size_t b0 = 0; b0 < n; b0 += PR_WIRE_BLOCK) {
        size_t k = n - b0 < PR_WIRE_BLOCK ? n - b0 : PR_WIRE_BLOCK;
        float max = 0;
        size_t at = b0;
        int finite = 1;
        for (size_t i = b0; i < b0 + k; i++) {
            finite &= isfinite(x[i]) != 0;
            if (fabsf(x[i]) > max) {
                max = fabsf(x[i]);
                at = i;
            }
        }
        float s = le_float(p);
        if (!finite) {
            ck_assert_msg(isnan(s), "block at %zu: scale %a, want NaN", b0,
                          (double)s);
        } else {
            ck_assert_msg(bits(s) == bits(max / 127.0f),
                          "block at %zu: scale %a, want %a / 127", b0,
                          (double)s, (double)max);
        }
        const int8_t *q = (const int8_t *)(p + 4);
        for (size_t j = 0; j < k; j++) {
            size_t i = b0 + j;
            ck_assert_msg(bits(dec[i]) == bits((float)q[j] * s),
                          "float %zu: decoded %a, not %d * %a", i,
                          (double)dec[i], q[j], (double)s);
            if (!finite) {
                ck_assert_msg(isnan(dec[i]) && bits(lost[i]) == 0,
                              "float %zu in a block that is not finite: "
                              "decoded %a, lost %a, want NaN and 0",
                              i, (double)dec[i], (double)lost[i]);
                continue;
            }
            double err = fabs((double)x[i] - (double)dec[i]);
            ck_assert_msg(err <= int8_bound(s),
                          "float %zu (%a, q %d, scale %a): off by %a, more "
                          "than %a",
                          i, (double)x[i], q[j], (double)s, err, int8_bound(s));
            float d = x[i] - dec[i];
            ck_assert_msg(bits(lost[i]) == bits(d),
                          "float %zu (%a): lost %a, not x - y (%a)", i,
                          (double)x[i], (double)lost[i], (double)d);
            if (2 * fabsf(x[i]) >= fabsf(dec[i]))
                ck_assert_msg((double)d == (double)x[i] - (double)dec[i],
                              "float %zu (%a): lost %a, want %a exactly", i,
                              (double)x[i], (double)lost[i],
                              (double)x[i] - (double)dec[i]);
        }
        if (finite && isnormal(s))
            ck_assert_msg(ulps(fabsf(dec[at]), max) <= 1,
                          "block at %zu: max %a decodes to %a", b0,
                          (double)x[at], (double)dec[at]);
        p += 4 + k;
    }
    ck_assert_ptr_eq(p, enc + nb);

    memcpy(inplace, x, n * sizeof(float));
    pr_wire_encode(PR_WIRE_INT8, enc2, inplace, n, inplace);
    ck_assert_mem_eq(enc2, enc, nb);
    ck_assert_mem_eq(inplace, lost, n * sizeof(float));
    free(inplace);
    free(lost);
    free(dec);
    free(enc2);
    free(enc);
}

START_TEST(test_wire_int8_zero_block)
{
    float x[PR_WIRE_BLOCK] = {0}, dec[PR_WIRE_BLOCK], lost[PR_WIRE_BLOCK];
    uint8_t enc[PR_WIRE_BLOCK_BYTES];
    x[7] = -0.0f;
    for (size_t i = 0; i < PR_WIRE_BLOCK; i++)
        dec[i] = lost[i] = 1.0f;
    pr_wire_encode(PR_WIRE_INT8, enc, x, PR_WIRE_BLOCK, lost);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, PR_WIRE_BLOCK);
    ck_assert_uint_eq(bits(le_float(enc)), 0);
    for (size_t i = 0; i < PR_WIRE_BLOCK; i++) {
        ck_assert_int_eq(((int8_t *)enc)[4 + i], 0);
        ck_assert(dec[i] == 0.0f);
        ck_assert(lost[i] == 0.0f);
    }
    check_int8(x, PR_WIRE_BLOCK);
}
END_TEST

START_TEST(test_wire_int8_huge_range)
{
    float x[PR_WIRE_BLOCK], dec[PR_WIRE_BLOCK], lost[PR_WIRE_BLOCK];
    uint8_t enc[PR_WIRE_BLOCK_BYTES];
    for (size_t i = 0; i < PR_WIRE_BLOCK; i++)
        x[i] = i % 2 ? -1e-30f : 1e-30f;
    x[100] = 1e30f;
    x[101] = -4e29f;
    pr_wire_encode(PR_WIRE_INT8, enc, x, PR_WIRE_BLOCK, lost);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, PR_WIRE_BLOCK);
    ck_assert_int_eq(((int8_t *)enc)[4 + 100], 127);
    ck_assert_uint_le(ulps(dec[100], 1e30f), 1);
    /* 4e29 is 50.8 steps: 51. */
    ck_assert_int_eq(((int8_t *)enc)[4 + 101], -51);
    for (size_t i = 0; i < PR_WIRE_BLOCK; i++) {
        if (i == 100 || i == 101)
            continue;
        ck_assert(dec[i] == 0.0f);
        ck_assert_uint_eq(bits(lost[i]), bits(x[i])); /* all of it lost */
    }
    check_int8(x, PR_WIRE_BLOCK);
}
END_TEST

START_TEST(test_wire_int8_error_bound)
{
    enum { BLOCKS = 64 };
    static float x[BLOCKS * PR_WIRE_BLOCK];
    rng_state = 0x1b8b1b8bULL;
    /*
     * Each block its own magnitude, from 1e-30 to 1e30 (its scale a normal
     * float), and its own shape: uniform, spread over many exponents, or
     * steps that fall on and beside halves of the scale.
     */
    for (size_t b = 0; b < BLOCKS; b++) {
        int e = (int)(rng_next() % 200) - 100;
        float *v = x + b * PR_WIRE_BLOCK;
        for (size_t i = 0; i < PR_WIRE_BLOCK; i++) {
            switch (b % 3) {
            case 0:
                v[i] = (float)ldexp(rng_uniform(-1.0, 1.0), e);
                break;
            case 1:
                v[i] = rng_float(e - 30, e);
                break;
            default:
                /* Beside halves of a step: max 127 steps, the rest k + 1/2. */
                v[i] = (float)ldexp(
                    i ? ((double)(i % 254) - 127.0 + (i % 3 ? 0.5 : 0.4999)) /
                            127.0
                      : 1.0,
                    e);
                break;
            }
        }
    }
    check_int8(x, BLOCKS * PR_WIRE_BLOCK);
}
END_TEST

START_TEST(test_wire_int8_partial_blocks)
{
    static const size_t lens[] = {1, 2, 255, 256, 257, 511, 1000};
    static float x[1000];
    rng_state = 0x9a9a9aULL;
    for (size_t i = 0; i < 1000; i++)
        x[i] = (float)rng_uniform(-3.0, 3.0);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        check_int8(x, lens[l]);
    /* A last block of one float carries it within a ulp. */
    static uint8_t enc[2 * PR_WIRE_BLOCK_BYTES];
    float dec[257];
    pr_wire_encode(PR_WIRE_INT8, enc, x, 257, NULL);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, 257);
    ck_assert_int_eq(((int8_t *)enc)[PR_WIRE_BLOCK_BYTES + 4],
                     x[256] < 0 ? -127 : 127);
    ck_assert_uint_le(ulps(dec[256], x[256]), 1);
}
END_TEST

START_TEST(test_wire_int8_negative_max)
{
    float x[4] = {-5.0f, 2.5f, -1.0f, 4.9f}, dec[4];
    uint8_t enc[8 + 4];
    pr_wire_encode(PR_WIRE_INT8, enc, x, 4, NULL);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, 4);
    ck_assert_uint_eq(bits(le_float(enc)), bits(5.0f / 127.0f));
    ck_assert_int_eq(((int8_t *)enc)[4], -127);
    ck_assert_uint_le(ulps(dec[0], -5.0f), 1);
    check_int8(x, 4);
}
END_TEST

/*
 * The largest magnitude of a block is 127 steps and comes back within a
 * ulp, positive or negative, whatever its value (its scale a normal
 * float).
 */
START_TEST(test_wire_int8_max_is_127)
{
    rng_state = 0x127127ULL;
    for (int t = 0; t < 20000; t++) {
        float m = fabsf(rng_float(-119, 126));
        float x[3] = {m, -m, m / 3}, dec[3];
        uint8_t enc[4 + 3];
        pr_wire_encode(PR_WIRE_INT8, enc, x, 3, NULL);
        pr_wire_decode(PR_WIRE_INT8, dec, enc, 3);
        const int8_t *q = (const int8_t *)(enc + 4);
        ck_assert_msg(q[0] == 127 && q[1] == -127,
                      "max %a: q %d and %d, want 127 and -127", (double)m, q[0],
                      q[1]);
        ck_assert_msg(ulps(dec[0], m) <= 1 && ulps(dec[1], -m) <= 1,
                      "max %a decodes to %a and %a", (double)m, (double)dec[0],
                      (double)dec[1]);
    }
}
END_TEST

/*
 * A NaN or an infinity makes its whole block NaN (scale, decoded floats),
 * its lost 0 (feedback would keep a NaN for ever), and leaves the blocks
 * around it as they would be.
 */
START_TEST(test_wire_int8_nonfinite_block)
{
    enum { N = 3 * PR_WIRE_BLOCK - 10 };
    static const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    static float x[N];
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        rng_state = 0xbadULL + k;
        for (size_t i = 0; i < N; i++)
            x[i] = (float)rng_uniform(-2.0, 2.0);
        x[PR_WIRE_BLOCK + 17 * k] = bad[k];
        check_int8(x, N);

        float dec[N], lost[N], clean_dec[N];
        static uint8_t enc[3 * PR_WIRE_BLOCK_BYTES];
        pr_wire_encode(PR_WIRE_INT8, enc, x, N, lost);
        pr_wire_decode(PR_WIRE_INT8, dec, enc, N);
        ck_assert(isnan(le_float(enc + PR_WIRE_BLOCK_BYTES)));
        for (size_t i = PR_WIRE_BLOCK; i < 2 * PR_WIRE_BLOCK; i++)
            ck_assert(isnan(dec[i]) && bits(lost[i]) == 0);
        /* The other blocks decode as they do without the bad float. */
        x[PR_WIRE_BLOCK + 17 * k] = 0;
        pr_wire_encode(PR_WIRE_INT8, enc, x, N, NULL);
        pr_wire_decode(PR_WIRE_INT8, clean_dec, enc, N);
        ck_assert_mem_eq(dec, clean_dec, PR_WIRE_BLOCK * sizeof(float));
        ck_assert_mem_eq(dec + 2 * PR_WIRE_BLOCK, clean_dec + 2 * PR_WIRE_BLOCK,
                         (N - 2 * PR_WIRE_BLOCK) * sizeof(float));
    }
}
END_TEST

/*
 * A block so small that 127 / max overflows in float (max below 127 /
 * FLT_MAX, about 3.7e-37, down to the subnormals): each float still
 * within half a step, and a zero stays a zero.
 */
START_TEST(test_wire_int8_tiny_scale)
{
    static const float maxes[] = {3.7e-37f, 1e-37f, FLT_MIN, 1e-38f,
                                  5e-39f,   1e-40f, 2e-42f};
    for (size_t k = 0; k < sizeof(maxes) / sizeof(maxes[0]); k++) {
        float m = maxes[k];
        float x[6] = {m, m / 2, -m / 3, 0.0f, -0.0f, m / 64};
        check_int8(x, 6);
    }
}
END_TEST

/*
 * FLT_MAX is finite: its block decodes finite, within half a step of the
 * scale sent (a hair under FLT_MAX / 127, which rounds up).
 */
START_TEST(test_wire_int8_flt_max)
{
    float x[3] = {FLT_MAX, -FLT_MAX / 2, 1.0f}, dec[3];
    uint8_t enc[4 + 3];
    pr_wire_encode(PR_WIRE_INT8, enc, x, 3, NULL);
    pr_wire_decode(PR_WIRE_INT8, dec, enc, 3);
    float s = le_float(enc);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(isfinite(dec[i]) &&
                          fabs((double)x[i] - (double)dec[i]) <= int8_bound(s),
                      "float %d (%a): decoded %a, scale %a", i, (double)x[i],
                      (double)dec[i], (double)s);
}
END_TEST

/*
 * The bytes of a block: its scale as a little-endian float32, then one
 * two's complement byte per float; halves round to even (wire.c).
 */
START_TEST(test_wire_int8_layout)
{
    const float x[8] = {127.0f, -3.0f, 1.4f, -126.6f, 0.0f, 2.5f, -2.5f, 0.5f};
    static const uint8_t want[4 + 8] = {
        0x00, 0x00, 0x80, 0x3f, /* scale 1.0f */
        0x7f, 0xfd, 0x01, 0x81, 0x00, 0x02, 0xfe, 0x00,
    };
    uint8_t enc[sizeof(want) + 1];
    enc[sizeof(want)] = CANARY_BYTE;
    pr_wire_encode(PR_WIRE_INT8, enc, x, 8, NULL);
    ck_assert_mem_eq(enc, want, sizeof(want));
    ck_assert_uint_eq(enc[sizeof(want)], CANARY_BYTE);

    /* Decoding reads the same layout: 0.5 * q. */
    static const uint8_t in[4 + 4] = {0x00, 0x00, 0x00, 0x3f,
                                      0x80, 0x7f, 0xff, 0x00};
    float dec[4];
    pr_wire_decode(PR_WIRE_INT8, dec, in, 4);
    ck_assert_float_eq(dec[0], -64.0f);
    ck_assert_float_eq(dec[1], 63.5f);
    ck_assert_float_eq(dec[2], -0.5f);
    ck_assert_float_eq(dec[3], 0.0f);
}
END_TEST

START_TEST(test_wire_bytes)
{
    static const struct {
        size_t n, fp32, bf16, int8;
    } cases[] = {
        {0, 0, 0, 0},
        {1, 4, 2, 5},
        {255, 1020, 510, 259},
        {256, 1024, 512, 260},
        {257, 1028, 514, 265},
        {512, 2048, 1024, 520},
        {1000, 4000, 2000, 1016},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_uint_eq(pr_wire_bytes(PR_WIRE_FP32, cases[i].n),
                          cases[i].fp32);
        ck_assert_uint_eq(pr_wire_bytes(PR_WIRE_BF16, cases[i].n),
                          cases[i].bf16);
        ck_assert_uint_eq(pr_wire_bytes(PR_WIRE_INT8, cases[i].n),
                          cases[i].int8);
    }
}
END_TEST

START_TEST(test_wire_names)
{
    for (uint32_t w = 0; w < PR_WIRE_COUNT; w++) {
        enum pr_wire got = PR_WIRE_COUNT;
        ck_assert_int_eq(pr_wire_parse(pr_wire_name(w), &got), 0);
        ck_assert_uint_eq(got, w);
    }
    ck_assert_str_eq(pr_wire_name(PR_WIRE_FP32), "fp32");
    ck_assert_str_eq(pr_wire_name(PR_WIRE_BF16), "bf16");
    ck_assert_str_eq(pr_wire_name(PR_WIRE_INT8), "int8");
    ck_assert_str_eq(pr_wire_name(PR_WIRE_COUNT), "?");
    ck_assert_str_eq(pr_wire_name(UINT32_MAX), "?");

    static const char *const bad[] = {"fp16", "", "int", "int8x", "bf16 ", "?"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        enum pr_wire out = PR_WIRE_BF16;
        ck_assert_int_eq(pr_wire_parse(bad[i], &out), -EINVAL);
        ck_assert_uint_eq(out, PR_WIRE_BF16); /* untouched */
    }
    enum pr_wire out = PR_WIRE_INT8;
    ck_assert_int_eq(pr_wire_parse(NULL, &out), -EINVAL);
    ck_assert_uint_eq(out, PR_WIRE_INT8);
}
END_TEST

/*
 * Error feedback as the engine is to run it: each round sends c + e,
 * where e is what the previous round lost. The decoded values then sum to
 * T c minus the last round's loss, within one step of the encoding for
 * every T; sending c alone repeats the same rounding error, a bias that
 * grows linearly with T (but in the first `exact` floats, which the
 * encoding carries as they are). Sums in double, so that they add nothing
 * of their own.
 */
static void check_feedback(enum pr_wire w, const float *c, size_t n,
                           size_t exact, double step)
{
    enum { T = 200 };
    float *in = malloc(n * sizeof(float)), *e = calloc(n, sizeof(float));
    float *dec = malloc(n * sizeof(float));
    uint8_t *enc = malloc(pr_wire_bytes(w, n));
    double *fb = calloc(n, sizeof(double)), *nofb = calloc(n, sizeof(double));
    double *bias_half = calloc(n, sizeof(double));
    ck_assert(in && e && dec && enc && fb && nofb && bias_half);
    for (int t = 1; t <= T; t++) {
        for (size_t i = 0; i < n; i++)
            in[i] = c[i] + e[i];
        pr_wire_encode(w, enc, in, n, e);
        pr_wire_decode(w, dec, enc, n);
        for (size_t i = 0; i < n; i++) {
            fb[i] += dec[i];
            double off = fabs(fb[i] - t * (double)c[i]);
            ck_assert_msg(off <= step,
                          "%s float %zu, c %a, round %d: with feedback the "
                          "sum is off by %g, more than a step (%g)",
                          pr_wire_name(w), i, (double)c[i], t, off, step);
        }
        pr_wire_encode(w, enc, c, n, NULL);
        pr_wire_decode(w, dec, enc, n);
        for (size_t i = 0; i < n; i++) {
            nofb[i] += dec[i];
            if (t == T / 2)
                bias_half[i] = nofb[i] - t * (double)c[i];
        }
    }
    /* Without: T times the same error, twice the bias at T / 2. */
    for (size_t i = exact; i < n; i++) {
        double bias = nofb[i] - T * (double)c[i];
        ck_assert_msg(fabs(bias) > 10 * step,
                      "%s float %zu, c %a: without feedback off by only %g",
                      pr_wire_name(w), i, (double)c[i], bias);
        ck_assert_msg(fabs(bias - 2 * bias_half[i]) <= 1e-9 * fabs(bias),
                      "%s float %zu: bias %g at T, %g at T / 2: not linear",
                      pr_wire_name(w), i, bias, bias_half[i]);
    }
    free(bias_half);
    free(nofb);
    free(fb);
    free(enc);
    free(dec);
    free(e);
    free(in);
}

START_TEST(test_wire_int8_error_feedback)
{
    /*
     * One block: its max 1.0, so a step of 1 / 127, and the rest between
     * steps (k + 0.3 or k + 0.7 steps), each rounding off by 0.3 of a step
     * every round without feedback.
     */
    enum { N = PR_WIRE_BLOCK };
    float c[N];
    c[0] = 1.0f;
    for (size_t i = 1; i < N; i++) {
        double k = (double)(i % 120) + (i % 2 ? 0.3 : 0.7);
        c[i] = (float)((i % 4 < 2 ? k : -k) / 127.0);
    }
    check_feedback(PR_WIRE_INT8, c, N, 1, 1.0 / 127.0);
}
END_TEST

START_TEST(test_wire_bf16_error_feedback)
{
    /*
     * bf16 steps by 2^-7 in [1, 2) and 2^-6 in [2, 4): 1 + 2^-10 rounds to
     * 1, off 2^-10 a round; 1.0 is carried as it is.
     */
    float c[4] = {1.0f, 1.0f + 0x1p-10f, -1.0f - 0x1p-9f, 3.0f + 0x1.4p-7f};
    check_feedback(PR_WIRE_BF16, c, 4, 1, 0x1p-6);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");

    TCase *tc = tcase_create("bf16");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_wire_bf16_rne_reference);
    tcase_add_test(tc, test_wire_bf16_ties_and_edges);
    tcase_add_test(tc, test_wire_bf16_nan);
    tcase_add_test(tc, test_wire_bf16_roundtrip_lost);
    suite_add_tcase(s, tc);

    tc = tcase_create("fp32");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_wire_fp32_copies);
    suite_add_tcase(s, tc);

    tc = tcase_create("int8");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_wire_int8_zero_block);
    tcase_add_test(tc, test_wire_int8_huge_range);
    tcase_add_test(tc, test_wire_int8_error_bound);
    tcase_add_test(tc, test_wire_int8_partial_blocks);
    tcase_add_test(tc, test_wire_int8_negative_max);
    tcase_add_test(tc, test_wire_int8_max_is_127);
    tcase_add_test(tc, test_wire_int8_tiny_scale);
    tcase_add_test(tc, test_wire_int8_flt_max);
    tcase_add_test(tc, test_wire_int8_nonfinite_block);
    tcase_add_test(tc, test_wire_int8_layout);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_wire_bytes);
    tcase_add_test(tc, test_wire_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("feedback");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_wire_int8_error_feedback);
    tcase_add_test(tc, test_wire_bf16_error_feedback);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(wire_suite());
}
