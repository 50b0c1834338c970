/* SPDX-License-Identifier: MIT */
/*
 * The reduction maths: plain functions over float32 buffers, no state, no
 * I/O, so tests call them directly. Accumulation is in float32 (what goes on
 * the wire); callers that need a reference compute one in double.
 */
#ifndef PR_REDUCE_H
#define PR_REDUCE_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = w * src[i] (dst may be src) */
void pr_reduce_scale(float *dst, const float *src, float w, size_t n);
/* dst[i] += w * src[i] */
void pr_reduce_axpy(float *restrict dst, const float *restrict src, float w,
                    size_t n);
/* dst[i] = a[i] + b[i] */
void pr_reduce_sum2(float *restrict dst, const float *restrict a,
                    const float *restrict b, size_t n);
/* dst[i] = (a[i] + b[i]) * s; dst may be a (the mean, in one pass) */
void pr_reduce_sum2_scale(float *dst, const float *a, const float *restrict b,
                          float s, size_t n);
/* dst[i] = w * a[i] + b[i]; dst may be a */
void pr_reduce_axpb_inplace(float *dst, const float *a, float w,
                            const float *restrict b, size_t n);
/* dst[i] = w * a[i] + b[i] */
void pr_reduce_axpb(float *restrict dst, const float *restrict a, float w,
                    const float *restrict b, size_t n);
/*
 * The last reduce-scatter step straight into a member, keeping what it
 * held: save[i] = x[i], then x[i] = (x[i] + in[i]) * s (the mean),
 * w * x[i] + in[i] (weighted) or in[i] (weight 0), the same values as the
 * functions above give. save may be in (the chunk read into the place its
 * floats are saved to), never overlap it otherwise.
 */
void pr_reduce_fold_save_mean(float *restrict x, const float *in, float *save,
                              float s, size_t n);
void pr_reduce_fold_save_axpb(float *restrict x, float w, const float *in,
                              float *save, size_t n);
void pr_reduce_fold_save_copy(float *restrict x, const float *in, float *save,
                              size_t n);
/* dst[i] += src[i] */
void pr_reduce_add(float *restrict dst, const float *restrict src, size_t n);

/*
 * A member's personal result (docs/algorithm.md, staleness weights):
 *   out = (own + (k - 1) * (sum - e * own) / (1 - e)) / k
 * where sum = sum_j e_j x_j over the whole group and e = this member's
 * weight. With k == 1 (or e == 1) out = own. `out` may alias `own`.
 */
void pr_reduce_personal(float *out, const float *own, const float *sum,
                        double e, uint32_t k, size_t n);

/*
 * Splits n floats into m ring segments: segment i is [start, start + len).
 * The first n % m segments get one float more.
 */
void pr_ring_segment(size_t n, uint32_t m, uint32_t i, size_t *start,
                     size_t *len);
/* Chunks of a segment of `len` floats (at least 1, even when len is 0). */
size_t pr_ring_chunks(size_t len, size_t chunk_floats);

#endif
