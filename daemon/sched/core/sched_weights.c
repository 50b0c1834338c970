/* SPDX-License-Identifier: MIT */
/*
 * Staleness-aware weights (docs/algorithm.md, section 5).
 *
 * For k members with versions t_j: T = max t_j, s_j = T - t_j + 1 (the
 * freshest have s = 1), S = max s_j. Level s carries mass
 * alpha^(s-1) * (1 - alpha), s = 1 .. S; these sum to 1 - alpha^S. The mass
 * of every level no member has goes to level 1; a level's mass is split
 * equally among its members; dividing by 1 - alpha^S makes the weights sum
 * to 1.
 *
 * S can be huge (a worker that slept through many updates), so nothing is
 * sized by S: the members are sorted by d = s - 1 = T - t_j and only the
 * distinct levels present are visited. The weight of a present level
 * d > 0 is (1 - alpha) alpha^d / (1 - alpha^S), computed with exp/log1p
 * style functions so that neither alpha^d nor 1 - alpha^S loses precision;
 * level 1 takes what is left, 1 minus the others, which is at least
 * (1 - alpha) / (1 - alpha^S) > 0 and makes the sum exactly 1 up to
 * rounding.
 */
#include "daemon/sched/core/sched_core.h"
#include "daemon/sched/core/sched_core_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Members this many or fewer are sorted in a stack buffer. */
#define STACK_MEMBERS 64

struct lvl {
    uint64_t d; /* T - t_j: the level minus 1 */
    size_t idx; /* the member */
};

static int cmp_lvl(const void *a, const void *b)
{
    const struct lvl *x = a;
    const struct lvl *y = b;

    if (x->d != y->d) {
        return x->d < y->d ? -1 : 1;
    }
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/*
 * The shared body: versions and weights are read and written through byte
 * strides so that the same code serves plain arrays and the group's member
 * array.
 */
static int stale(const char *vbase, size_t vstride, size_t k, double alpha,
                 char *wbase, size_t wstride)
{
    struct lvl stack_buf[STACK_MEMBERS];
    struct lvl *l = stack_buf;
    uint64_t t_max = 0;

    if (k == 0 || !(alpha > 0.0 && alpha < 1.0)) {
        return -EINVAL;
    }
    if (k > STACK_MEMBERS) {
        l = malloc(k * sizeof(*l));
        if (l == NULL) {
            return -ENOMEM;
        }
    }
#define VER(i) (*(const uint64_t *)(const void *)(vbase + (i)*vstride))
#define WGT(i) (*(double *)(void *)(wbase + (i)*wstride))
    for (size_t i = 0; i < k; i++) {
        if (VER(i) > t_max) {
            t_max = VER(i);
        }
    }
    for (size_t i = 0; i < k; i++) {
        l[i].d = t_max - VER(i);
        l[i].idx = i;
    }
    qsort(l, k, sizeof(*l), cmp_lvl);

    /*
     * ln_a < 0. 1 - alpha^S = -expm1(S ln_a), with S = d_max + 1 taken as a
     * double: past 2^53 the rounding no longer matters, alpha^S is 0.
     */
    double ln_a = log(alpha);
    double s_max = (double)l[k - 1].d + 1.0;
    double norm = -expm1(s_max * ln_a);
    double scale = -expm1(ln_a) / norm; /* (1 - alpha) / (1 - alpha^S) */
    double rest = 0.0;                  /* the mass of levels above 1 */

    /* Members are sorted by level; visit each run of equal d once. */
    size_t i = 0;
    while (i < k && l[i].d == 0) {
        i++;
    }
    size_t n_fresh = i;
    while (i < k) {
        size_t j = i;
        while (j < k && l[j].d == l[i].d) {
            j++;
        }
        double mass = scale * exp((double)l[i].d * ln_a);
        for (size_t m = i; m < j; m++) {
            WGT(l[m].idx) = mass / (double)(j - i);
        }
        rest += mass;
        i = j;
    }
    double fresh = (1.0 - rest) / (double)n_fresh;
    for (size_t m = 0; m < n_fresh; m++) {
        WGT(l[m].idx) = fresh;
    }
#undef VER
#undef WGT
    if (l != stack_buf) {
        free(l);
    }
    return 0;
}

int pr_sched_staleness_weights(const uint64_t *versions, size_t k, double alpha,
                               double *weights)
{
    if (versions == NULL || weights == NULL) {
        return -EINVAL;
    }
    return stale((const char *)versions, sizeof(*versions), k, alpha,
                 (char *)weights, sizeof(*weights));
}

int pr_sched_weights_members(struct pr_sched_member *m, uint32_t n,
                             double alpha)
{
    if (m == NULL) {
        return -EINVAL;
    }
    return stale((const char *)&m[0].version, sizeof(*m), n, alpha,
                 (char *)&m[0].weight, sizeof(*m));
}
