/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the reduction maths (daemon/engine/reduce.c) and the chunk
 * header codec (daemon/engine/xport.c): plain functions, no loop.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/reduce.h"
#include "daemon/engine/wire.h"
#include "daemon/engine/xport.h"
#include "tests/check_run.h"

/* A canary past the end of every output buffer: nothing may write there. */
#define CANARY -12345.0f

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

START_TEST(test_reduce_scale)
{
    float src[5] = {1.0f, -2.0f, 0.5f, 3.0f, 7.0f};
    float dst[6] = {9, 9, 9, 9, 9, CANARY};
    pr_reduce_scale(dst, src, 0.25f, 5);
    ck_assert_float_eq(dst[0], 0.25f);
    ck_assert_float_eq(dst[1], -0.5f);
    ck_assert_float_eq(dst[2], 0.125f);
    ck_assert_float_eq(dst[3], 0.75f);
    ck_assert_float_eq(dst[4], 1.75f);
    ck_assert_float_eq(dst[5], CANARY);

    /* n == 0 touches nothing; in place works. */
    pr_reduce_scale(dst, src, 100.0f, 0);
    ck_assert_float_eq(dst[0], 0.25f);
    pr_reduce_scale(dst, dst, 4.0f, 5);
    ck_assert_float_eq(dst[0], 1.0f);
    ck_assert_float_eq(dst[4], 7.0f);
    ck_assert_float_eq(dst[5], CANARY);
}
END_TEST

START_TEST(test_reduce_axpy)
{
    float src[4] = {1.0f, 2.0f, -4.0f, 8.0f};
    float dst[5] = {1.0f, 1.0f, 1.0f, 1.0f, CANARY};
    pr_reduce_axpy(dst, src, 0.5f, 4);
    ck_assert_float_eq(dst[0], 1.5f);
    ck_assert_float_eq(dst[1], 2.0f);
    ck_assert_float_eq(dst[2], -1.0f);
    ck_assert_float_eq(dst[3], 5.0f);
    ck_assert_float_eq(dst[4], CANARY);
    pr_reduce_axpy(dst, src, 0.0f, 4);
    ck_assert_float_eq(dst[3], 5.0f);
    pr_reduce_axpy(dst, src, 3.0f, 0);
    ck_assert_float_eq(dst[0], 1.5f);
}
END_TEST

START_TEST(test_reduce_add)
{
    float src[3] = {0.5f, -1.0f, 1e6f};
    float dst[4] = {1.0f, 1.0f, 1.0f, CANARY};
    pr_reduce_add(dst, src, 3);
    ck_assert_float_eq(dst[0], 1.5f);
    ck_assert_float_eq(dst[1], 0.0f);
    ck_assert_float_eq(dst[2], 1000001.0f);
    ck_assert_float_eq(dst[3], CANARY);
    pr_reduce_add(dst, src, 0);
    ck_assert_float_eq(dst[0], 1.5f);
}
END_TEST

/*
 * The fused kernels the in-place engine relies on, against plain scalar
 * loops over the same float expression: equal bit for bit (the engine's
 * in-place results must match its scratch-vector results), with dst a
 * separate buffer or a itself, at odd lengths and unaligned starts.
 */
enum fused { SUM2_SCALE, AXPB_INPLACE };

static void fused_ref(enum fused f, float *dst, const float *a, const float *b,
                      float s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (f == SUM2_SCALE) {
            float t = a[i] + b[i];
            dst[i] = t * s;
        } else {
            float t = s * a[i];
            dst[i] = t + b[i];
        }
    }
}

static void fused_call(enum fused f, float *dst, const float *a, const float *b,
                       float s, size_t n)
{
    if (f == SUM2_SCALE)
        pr_reduce_sum2_scale(dst, a, b, s, n);
    else
        pr_reduce_axpb_inplace(dst, a, s, b, n);
}

static void check_fused(enum fused f)
{
    enum { NMAX = 1001, SHIFT = 3 };
    static const size_t lens[] = {0, 1, 3, 17, 1001};
    static const float factors[] = {1.0f / 3.0f, 0.7f, -2.5f, 1e-3f};
    /* Room for the shift and a canary past the end. */
    static float a[NMAX + SHIFT + 1], b[NMAX + SHIFT], keep[NMAX + SHIFT];
    static float want[NMAX], dst[NMAX + SHIFT + 1];
    rng_state = 0x5eed0000u + (uint64_t)f;
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        size_t n = lens[l];
        for (size_t k = 0; k < sizeof(factors) / sizeof(factors[0]); k++) {
            float s = factors[k];
            size_t sh = (l + k) % (SHIFT + 1); /* unaligned starts */
            for (size_t i = 0; i < n + sh; i++) {
                a[i] = (float)rng_uniform(-1e3, 1e3);
                b[i] = (float)rng_uniform(-1.0, 1.0);
            }
            fused_ref(f, want, a + sh, b + sh, s, n);

            /* dst apart from a and b, which stay as they were. */
            memcpy(keep, a, (n + sh) * sizeof(float));
            dst[sh + n] = CANARY;
            fused_call(f, dst + sh, a + sh, b + sh, s, n);
            ck_assert_msg(memcmp(dst + sh, want, n * sizeof(float)) == 0,
                          "kernel %d n=%zu s=%g: differs from the loop", (int)f,
                          n, (double)s);
            ck_assert_float_eq(dst[sh + n], CANARY);
            ck_assert_mem_eq(a, keep, (n + sh) * sizeof(float));

            /* dst == a. */
            a[sh + n] = CANARY;
            fused_call(f, a + sh, a + sh, b + sh, s, n);
            ck_assert_msg(memcmp(a + sh, want, n * sizeof(float)) == 0,
                          "kernel %d n=%zu s=%g in place: differs from the "
                          "loop",
                          (int)f, n, (double)s);
            ck_assert_float_eq(a[sh + n], CANARY);
            ck_assert_mem_eq(a, keep, sh * sizeof(float));
        }
    }
}

START_TEST(test_reduce_sum2_scale)
{
    check_fused(SUM2_SCALE);
    /* Small exact cases, dst == a. */
    float a[3] = {1.0f, 3.0f, -2.0f}, b[3] = {2.0f, 5.0f, 2.0f};
    pr_reduce_sum2_scale(a, a, b, 0.5f, 3);
    ck_assert_float_eq(a[0], 1.5f);
    ck_assert_float_eq(a[1], 4.0f);
    ck_assert_float_eq(a[2], 0.0f);
}
END_TEST

START_TEST(test_reduce_axpb_inplace)
{
    check_fused(AXPB_INPLACE);
    float a[3] = {1.0f, 3.0f, -2.0f}, b[3] = {2.0f, 5.0f, 2.0f};
    pr_reduce_axpb_inplace(a, a, 0.5f, b, 3);
    ck_assert_float_eq(a[0], 2.5f);
    ck_assert_float_eq(a[1], 6.5f);
    ck_assert_float_eq(a[2], 1.0f);
}
END_TEST

/* Checks that the m segments of n tile [0, n) in order, sizes as documented. */
static void check_tiling(size_t n, uint32_t m)
{
    size_t next = 0, base = n / m, rem = n % m;
    for (uint32_t i = 0; i < m; i++) {
        size_t start = (size_t)-1, len = (size_t)-1;
        pr_ring_segment(n, m, i, &start, &len);
        ck_assert_msg(start == next, "n=%zu m=%u seg %u starts at %zu not %zu",
                      n, m, i, start, next);
        ck_assert_msg(len == base + (i < rem ? 1 : 0),
                      "n=%zu m=%u seg %u has %zu floats", n, m, i, len);
        next = start + len;
    }
    ck_assert_msg(next == n, "n=%zu m=%u segments end at %zu", n, m, next);
}

START_TEST(test_reduce_segment_tiles)
{
    for (size_t n = 0; n <= 300; n++)
        for (uint32_t m = 1; m <= 17; m++)
            check_tiling(n, m);
    static const size_t big[] = {1000003, 4096, 65537, (size_t)1 << 33,
                                 ((size_t)1 << 40) + 7};
    static const uint32_t ms[] = {1, 2, 3, 5, 7, 64, 1000, 65521};
    for (size_t b = 0; b < sizeof(big) / sizeof(big[0]); b++)
        for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++)
            check_tiling(big[b], ms[j]);
}
END_TEST

START_TEST(test_reduce_segment_fewer_floats_than_segments)
{
    size_t start, len;
    /* n < m: the first n segments hold one float, the rest are empty. */
    for (uint32_t i = 0; i < 5; i++) {
        pr_ring_segment(2, 5, i, &start, &len);
        ck_assert_uint_eq(len, i < 2 ? 1 : 0);
        ck_assert_uint_eq(start, i < 2 ? i : 2);
    }
    pr_ring_segment(0, 3, 2, &start, &len);
    ck_assert_uint_eq(start, 0);
    ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(test_reduce_chunks)
{
    ck_assert_uint_eq(pr_ring_chunks(0, 1), 1);
    ck_assert_uint_eq(pr_ring_chunks(0, 4096), 1);
    ck_assert_uint_eq(pr_ring_chunks(1, 1), 1);
    ck_assert_uint_eq(pr_ring_chunks(1, 4096), 1);
    ck_assert_uint_eq(pr_ring_chunks(9, 3), 3);
    ck_assert_uint_eq(pr_ring_chunks(10, 3), 4);
    ck_assert_uint_eq(pr_ring_chunks(4096, 4096), 1);
    ck_assert_uint_eq(pr_ring_chunks(4097, 4096), 2);
    ck_assert_uint_eq(pr_ring_chunks(1000003, 1), 1000003);
    /* Agrees with cutting a segment the way the engine does. */
    for (size_t len = 1; len <= 200; len++) {
        for (size_t c = 1; c <= 70; c++) {
            size_t n = 0;
            for (size_t off = 0; off < len; off += c)
                n++;
            ck_assert_uint_eq(pr_ring_chunks(len, c), n);
        }
    }
}
END_TEST

/* The header's formula, in double. */
static double personal_ref(double own, double sum, double e, uint32_t k)
{
    return (own + (double)(k - 1) * (sum - e * own) / (1.0 - e)) / k;
}

START_TEST(test_reduce_personal_matches_formula)
{
    enum { N = 257, KMAX = 9 };
    rng_state = 0x9e3779b97f4a7c15ULL;
    float x[KMAX][N], sum[N], out[N + 1];
    double e[KMAX];
    for (uint32_t k = 2; k <= KMAX; k++) {
        for (int trial = 0; trial < 20; trial++) {
            /* Staleness-like weights e_j > 0 summing to 1. */
            double tot = 0;
            for (uint32_t j = 0; j < k; j++)
                tot += e[j] = 1.0 / (1.0 + (double)(rng_next() % 6));
            for (uint32_t j = 0; j < k; j++)
                e[j] /= tot;
            for (size_t i = 0; i < N; i++) {
                double s = 0;
                for (uint32_t j = 0; j < k; j++) {
                    x[j][i] = (float)rng_uniform(0.5, 1.5);
                    s += e[j] * x[j][i];
                }
                sum[i] = (float)s;
            }
            for (uint32_t j = 0; j < k; j++) {
                out[N] = CANARY;
                pr_reduce_personal(out, x[j], sum, e[j], k, N);
                ck_assert_float_eq(out[N], CANARY);
                for (size_t i = 0; i < N; i++) {
                    double ref = personal_ref(x[j][i], sum[i], e[j], k);
                    double rel = fabs(out[i] - ref) / fabs(ref);
                    ck_assert_msg(rel <= 1e-6,
                                  "k=%u member %u i=%zu: %.9g vs %.9g", k, j, i,
                                  (double)out[i], ref);
                }
            }
        }
    }
}
END_TEST

START_TEST(test_reduce_personal_k1_returns_own)
{
    float own[4] = {1.5f, -2.0f, 3.25f, 1e-30f};
    float sum[4] = {100.0f, 200.0f, 300.0f, 400.0f};
    float out[4] = {0};
    pr_reduce_personal(out, own, sum, 0.3, 1, 4);
    ck_assert_mem_eq(out, own, sizeof(own));
    memset(out, 0, sizeof(out));
    pr_reduce_personal(out, own, sum, 1.0, 7, 4);
    ck_assert_mem_eq(out, own, sizeof(own));
    /* k == 0 is degenerate; it must not divide by zero either. */
    memset(out, 0, sizeof(out));
    pr_reduce_personal(out, own, sum, 0.5, 0, 4);
    ck_assert_mem_eq(out, own, sizeof(own));
    /* In place with k == 1 leaves own as it was. */
    float keep[4];
    memcpy(keep, own, sizeof(own));
    pr_reduce_personal(own, own, sum, 1.0, 1, 4);
    ck_assert_mem_eq(own, keep, sizeof(own));
}
END_TEST

START_TEST(test_reduce_personal_aliasing)
{
    enum { N = 1000 };
    static float own[N], sum[N], out[N];
    rng_state = 42;
    for (size_t i = 0; i < N; i++) {
        own[i] = (float)rng_uniform(0.5, 1.5);
        sum[i] = (float)rng_uniform(0.5, 1.5);
    }
    pr_reduce_personal(out, own, sum, 0.2, 4, N);
    pr_reduce_personal(own, own, sum, 0.2, 4, N);
    ck_assert_mem_eq(own, out, sizeof(out));
}
END_TEST

START_TEST(test_reduce_personal_uniform_is_mean)
{
    /* Uniform weights e = 1/k: the personal result is the plain mean. */
    float x[4][3] = {{1, 2, 3}, {5, 6, 7}, {9, 10, 11}, {13, 14, 15}};
    float sum[3] = {7, 8, 9}, out[3];
    for (int j = 0; j < 4; j++) {
        pr_reduce_personal(out, x[j], sum, 0.25, 4, 3);
        ck_assert_float_eq_tol(out[0], 7.0f, 1e-5f);
        ck_assert_float_eq_tol(out[1], 8.0f, 1e-5f);
        ck_assert_float_eq_tol(out[2], 9.0f, 1e-5f);
    }
}
END_TEST

START_TEST(test_reduce_chunk_hdr_roundtrip)
{
    static const struct pr_chunk_hdr cases[] = {
        {0, 0, 0, 0, 0, 0, 0},
        {1, 1000003, 999999, 4096, 3, 4, PR_WIRE_INT8},
        {0x0102030405060708ULL, 0x1112131415161718ULL, 0x2122232425262728ULL,
         0x31323334U, 0x41424344U, 0x51525354U, 0x61626364U},
        {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX,
         UINT32_MAX},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint8_t buf[PR_CHUNK_HDR_LEN + 1];
        memset(buf, 0xa5, sizeof(buf));
        pr_chunk_hdr_encode(buf, &cases[c]);
        ck_assert_uint_eq(buf[PR_CHUNK_HDR_LEN], 0xa5);
        /* enc, little-endian, where daemons before encodings sent 0. */
        for (int i = 36; i < 40; i++)
            ck_assert_uint_eq(buf[i], (cases[c].enc >> (8 * (i - 36))) & 0xff);
        struct pr_chunk_hdr h;
        memset(&h, 0xee, sizeof(h));
        pr_chunk_hdr_decode(buf, &h);
        ck_assert_uint_eq(h.group_id, cases[c].group_id);
        ck_assert_uint_eq(h.total, cases[c].total);
        ck_assert_uint_eq(h.off, cases[c].off);
        ck_assert_uint_eq(h.nfloats, cases[c].nfloats);
        ck_assert_uint_eq(h.step, cases[c].step);
        ck_assert_uint_eq(h.seg, cases[c].seg);
        ck_assert_uint_eq(h.enc, cases[c].enc);
    }
}
END_TEST

START_TEST(test_reduce_chunk_hdr_little_endian)
{
    const struct pr_chunk_hdr h = {0x0102030405060708ULL,
                                   0x1112131415161718ULL,
                                   0x2122232425262728ULL,
                                   0x31323334U,
                                   0x41424344U,
                                   0x51525354U,
                                   0x61626364U};
    static const uint8_t want[PR_CHUNK_HDR_LEN] = {
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* group_id */
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* total */
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, /* off */
        0x34, 0x33, 0x32, 0x31,                         /* nfloats */
        0x44, 0x43, 0x42, 0x41,                         /* step */
        0x54, 0x53, 0x52, 0x51,                         /* seg */
        0x64, 0x63, 0x62, 0x61,                         /* enc */
    };
    uint8_t buf[PR_CHUNK_HDR_LEN];
    pr_chunk_hdr_encode(buf, &h);
    ck_assert_mem_eq(buf, want, sizeof(want));

    /* A peer's non-zero pad is ignored on decode. */
    uint8_t in[PR_CHUNK_HDR_LEN];
    memcpy(in, want, sizeof(in));
    memset(in + 36, 0xff, 4);
    struct pr_chunk_hdr d;
    pr_chunk_hdr_decode(in, &d);
    ck_assert_uint_eq(d.group_id, h.group_id);
    ck_assert_uint_eq(d.seg, h.seg);
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");

    TCase *tc = tcase_create("arith");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_reduce_scale);
    tcase_add_test(tc, test_reduce_axpy);
    tcase_add_test(tc, test_reduce_add);
    tcase_add_test(tc, test_reduce_sum2_scale);
    tcase_add_test(tc, test_reduce_axpb_inplace);
    suite_add_tcase(s, tc);

    tc = tcase_create("ring");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_reduce_segment_tiles);
    tcase_add_test(tc, test_reduce_segment_fewer_floats_than_segments);
    tcase_add_test(tc, test_reduce_chunks);
    suite_add_tcase(s, tc);

    tc = tcase_create("personal");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_reduce_personal_matches_formula);
    tcase_add_test(tc, test_reduce_personal_k1_returns_own);
    tcase_add_test(tc, test_reduce_personal_aliasing);
    tcase_add_test(tc, test_reduce_personal_uniform_is_mean);
    suite_add_tcase(s, tc);

    tc = tcase_create("chunk_hdr");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_reduce_chunk_hdr_roundtrip);
    tcase_add_test(tc, test_reduce_chunk_hdr_little_endian);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(reduce_suite());
}
