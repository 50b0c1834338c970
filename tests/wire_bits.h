/* SPDX-License-Identifier: MIT */
/*
 * A float's bits and back, and a little-endian float32 from bytes: what
 * the wire encodings' test suite and fuzz target (test_wire.c,
 * fuzz_wire.c) both read encoded chunks with.
 */
#ifndef PR_TESTS_WIRE_BITS_H
#define PR_TESTS_WIRE_BITS_H

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

#endif
