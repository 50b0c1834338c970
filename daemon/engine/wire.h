/* SPDX-License-Identifier: MIT */
/*
 * Wire encodings of a chunk's floats (transport.wire, preduced.conf(5)):
 * fp32 as it is, bf16 (the upper half of each float, rounded to nearest
 * even), or int8 in blocks of PR_WIRE_BLOCK floats, each block a float32
 * scale (little-endian; its largest magnitude / 127) followed by one
 * signed byte per float. Sums stay in float32: a daemon decodes what it
 * receives before it adds (docs/protocol.md, "Wire encodings").
 *
 * Plain functions over buffers, no state and no I/O, so tests and the
 * fuzzer call them directly; they run on the engine's pool threads, at
 * memory speed (the loops are written for the compiler to vectorise).
 *
 * int8 carries finite floats: a block holding a NaN or an infinity has a
 * NaN scale and decodes to NaN in all its floats, as such a float would
 * poison the sum in float32 anyway.
 */
#ifndef PR_WIRE_H
#define PR_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum pr_wire {
    PR_WIRE_FP32 = 0,
    PR_WIRE_BF16 = 1,
    PR_WIRE_INT8 = 2,
};
#define PR_WIRE_COUNT 3

/* Floats per int8 block, and bytes per block with its scale. */
#define PR_WIRE_BLOCK       256
#define PR_WIRE_BLOCK_BYTES (4 + PR_WIRE_BLOCK)

/* "fp32", "bf16", "int8"; "?" for anything else. */
const char *pr_wire_name(uint32_t w);
/* 0 and *out for one of the names above; -EINVAL otherwise. */
int pr_wire_parse(const char *s, enum pr_wire *out);

/* Bytes of n floats in encoding w (w < PR_WIRE_COUNT). */
size_t pr_wire_bytes(enum pr_wire w, size_t n);

/*
 * n floats of src into dst (pr_wire_bytes(w, n) bytes). lost, when not
 * NULL, gets what the encoding lost: lost[i] = src[i] - decoded[i] (0 for
 * fp32; NaN where src[i] is not finite under bf16; 0 in all of an int8
 * block that holds a NaN or an infinity, which has nothing to carry to
 * the next reduce: error feedback would keep a NaN for ever). lost may be
 * src.
 */
void pr_wire_encode(enum pr_wire w, void *restrict dst, const float *src,
                    size_t n, float *lost);
/* pr_wire_bytes(w, n) bytes of src into n floats at dst. */
void pr_wire_decode(enum pr_wire w, float *restrict dst,
                    const void *restrict src, size_t n);

/* bf16 of one float, rounded to nearest even (NaN stays a quiet NaN). */
uint16_t pr_wire_bf16(float x);

#endif
