/* SPDX-License-Identifier: MIT */
#include "daemon/engine/reduce.h"

void pr_reduce_scale(float *dst, const float *src, float w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = w * src[i];
}

void pr_reduce_axpy(float *restrict dst, const float *restrict src, float w,
                    size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += w * src[i];
}

void pr_reduce_add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void pr_reduce_sum2(float *restrict dst, const float *restrict a,
                    const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

/*
 * Without restrict on dst and a, which may be the same buffer: GCC checks
 * for overlap once and runs the vector loop either way (dst[i] depends on
 * a[i] alone).
 */
void pr_reduce_sum2_scale(float *dst, const float *a, const float *restrict b,
                          float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (a[i] + b[i]) * s;
}

void pr_reduce_axpb_inplace(float *dst, const float *a, float w,
                            const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = w * a[i] + b[i];
}

void pr_reduce_axpb(float *restrict dst, const float *restrict a, float w,
                    const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = w * a[i] + b[i];
}

/*
 * Each element is read (x[i], in[i]) before either write, so save may be
 * in; GCC checks for any other overlap once and vectorizes either way.
 */
void pr_reduce_fold_save_mean(float *restrict x, const float *in, float *save,
                              float s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float a = x[i], b = in[i];
        x[i] = (a + b) * s;
        save[i] = a;
    }
}

void pr_reduce_fold_save_axpb(float *restrict x, float w, const float *in,
                              float *save, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float a = x[i], b = in[i];
        x[i] = w * a + b;
        save[i] = a;
    }
}

void pr_reduce_fold_save_copy(float *restrict x, const float *in, float *save,
                              size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float a = x[i], b = in[i];
        x[i] = b;
        save[i] = a;
    }
}

void pr_reduce_personal(float *out, const float *own, const float *sum,
                        double e, uint32_t k, size_t n)
{
    if (k <= 1 || e >= 1.0) {
        if (out != own)
            for (size_t i = 0; i < n; i++)
                out[i] = own[i];
        return;
    }
    /*
     * Computed in double per element: (sum - e*own) cancels much of sum when
     * e is large, and the 1/(1-e) factor would amplify float rounding.
     */
    double a = (double)(k - 1) / (1.0 - e);
    double inv_k = 1.0 / (double)k;
    for (size_t i = 0; i < n; i++) {
        double x = own[i];
        double others = (double)sum[i] - e * x;
        out[i] = (float)((x + a * others) * inv_k);
    }
}

void pr_ring_segment(size_t n, uint32_t m, uint32_t i, size_t *start,
                     size_t *len)
{
    size_t base = n / m, rem = n % m;
    *start = i * base + (i < rem ? i : rem);
    *len = base + (i < rem ? 1 : 0);
}

size_t pr_ring_chunks(size_t len, size_t chunk_floats)
{
    if (len == 0)
        return 1;
    return (len + chunk_floats - 1) / chunk_floats;
}
