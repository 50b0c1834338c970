/* SPDX-License-Identifier: MIT */
/*
 * A float's bits and back, a little-endian float32 from bytes, and the
 * references the wire encodings' test suite and fuzz target (test_wire.c,
 * fuzz_wire.c) both check encoded chunks against.
 */
#ifndef PR_TESTS_WIRE_BITS_H
#define PR_TESTS_WIRE_BITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float flt(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static inline float le_float(const uint8_t *p)
{
    return flt((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24);
}

/*
 * The float32 bits of a finite float's bf16 by the definition: of the two
 * bf16 values around |x| (x with its low half cleared, and the next one
 * up, 2^128 standing for infinity as IEEE 754's overflow rule has it),
 * the nearer in double, or on a tie the one with an even last bit. Both
 * distances are exact in double.
 */
static inline uint32_t bf16_ref_bits(float x)
{
    uint32_t sign = bits(x) & 0x80000000u;
    uint32_t lo = bits(x) & 0x7fff0000u;
    uint32_t hi = lo + 0x10000u;
    double ax = fabs((double)x);
    double dlo = ax - (double)flt(lo);
    double dhi = (hi == 0x7f800000u ? ldexp(1.0, 128) : (double)flt(hi)) - ax;
    return sign | (dlo < dhi ? lo : dhi < dlo ? hi : (lo & 0x10000u ? hi : lo));
}

/*
 * What one int8 element may be off by, given its block's scale s: half a
 * step, plus what rounding the reciprocal, the product x * (1 / s) and
 * q * s adds (a few float ulps of at most 127 s: under 2^-13 s), plus
 * what clamping at 127 steps costs when s came out below max / 127: at
 * most 127 half ulps of s, which matters only for a subnormal s (ulp
 * 2^-149): under 2^-143.
 */
static inline double int8_bound(float s)
{
    return 0.5 * (double)s * (1.0 + 0x1p-12) + 0x1p-143;
}

#endif
