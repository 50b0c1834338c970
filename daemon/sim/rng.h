/* SPDX-License-Identifier: MIT */
/*
 * The simulator's random numbers: splitmix64, one 64-bit state per stream,
 * so every run is reproducible from --seed and streams (workers, the data
 * set) do not disturb each other. Header only; nothing here is thread-safe
 * beyond "one state per thread".
 */
#ifndef PR_SIM_RNG_H
#define PR_SIM_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t pr_sim_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A seed for stream `k` derived from a base seed. */
static inline uint64_t pr_sim_rng_seed(uint64_t base, uint64_t k)
{
    uint64_t s = base ^ (k * 0xd1b54a32d192ed03ull);

    return pr_sim_rng_next(&s);
}

/* Uniform in [0, 1). */
static inline double pr_sim_rng_unit(uint64_t *s)
{
    return (double)(pr_sim_rng_next(s) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n > 0 (the modulo bias is far below what matters). */
static inline uint32_t pr_sim_rng_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(pr_sim_rng_next(s) % n);
}

/* Standard normal (Box-Muller, one of the pair). */
static inline double pr_sim_rng_gauss(uint64_t *s)
{
    double u = pr_sim_rng_unit(s);
    double v = pr_sim_rng_unit(s);

    if (u < 1e-300) {
        u = 1e-300;
    }
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
