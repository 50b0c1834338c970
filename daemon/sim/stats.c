/* SPDX-License-Identifier: MIT */
/*
 * What the simulator measures about the groups the core forms: the size
 * histogram, groups mixing fast and slow workers, connectivity windows
 * (with a union-find of its own, so that the generator-off and -on cases
 * are measured the same way) and the spectral gap of the mean mixing
 * matrix.
 */
#include "daemon/sim/sim_int.h"
#include "daemon/base/conf.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Slow: a step-time factor above this times the fastest worker's. */
#define SLOW_FACTOR 1.25
/* Default window length B in rounds when neither conf nor B gives one. */
#define DEFAULT_ROUNDS 10u
/* Power iteration: the most iterations and the convergence threshold. */
#define POWER_ITERS 5000
#define POWER_TOL   1e-13

static int uf_init(struct pr_sim_uf *u, uint32_t n)
{
    u->parent = malloc((size_t)n * sizeof(*u->parent));
    if (u->parent == NULL) {
        return -ENOMEM;
    }
    u->n = n;
    for (uint32_t i = 0; i < n; i++) {
        u->parent[i] = i;
    }
    u->comps = n;
    return 0;
}

static void uf_reset(struct pr_sim_uf *u)
{
    for (uint32_t i = 0; i < u->n; i++) {
        u->parent[i] = i;
    }
    u->comps = u->n;
}

static uint32_t uf_find(struct pr_sim_uf *u, uint32_t x)
{
    while (u->parent[x] != x) {
        u->parent[x] = u->parent[u->parent[x]];
        x = u->parent[x];
    }
    return x;
}

static void uf_unite(struct pr_sim_uf *u, uint32_t a, uint32_t b)
{
    uint32_t ra = uf_find(u, a);
    uint32_t rb = uf_find(u, b);

    if (ra != rb) {
        u->parent[rb] = ra;
        u->comps--;
    }
}

int pr_sim_stats_init(struct pr_sim_stats *s, const struct pr_sim_conf *c,
                      struct pr_sim_result *r)
{
    uint32_t n = c->workers;
    uint32_t rounds = c->window_rounds;
    double fastest = INFINITY;

    memset(s, 0, sizeof(*s));
    s->n = n;
    if (rounds == 0) {
        rounds = c->sched.isolation_bound > 0 ? c->sched.isolation_bound
                                              : DEFAULT_ROUNDS;
    }
    r->window_rounds = rounds;
    s->window_len = (uint64_t)rounds * n;
    s->gen_active =
        c->sched.isolation_bound > 0 && c->sched.policy != PR_POLICY_ALLREDUCE;
    s->slow = calloc(n, 1);
    if (s->slow == NULL || uf_init(&s->win, n) < 0 ||
        uf_init(&s->strict, n) < 0) {
        pr_sim_stats_fini(s);
        return -ENOMEM;
    }
    if (n <= PR_SIM_GAP_MAX) {
        s->mix = calloc((size_t)n * n, sizeof(*s->mix));
        if (s->mix == NULL) {
            pr_sim_stats_fini(s);
            return -ENOMEM;
        }
    }
    for (uint32_t i = 0; c->speed != NULL && i < n; i++) {
        if (c->speed[i] < fastest) {
            fastest = c->speed[i];
        }
    }
    r->slow_factor = SLOW_FACTOR;
    for (uint32_t i = 0; c->speed != NULL && i < n; i++) {
        s->slow[i] = c->speed[i] > SLOW_FACTOR * fastest;
        r->slow += s->slow[i];
    }
    return 0;
}

void pr_sim_stats_fini(struct pr_sim_stats *s)
{
    free(s->win.parent);
    free(s->strict.parent);
    free(s->slow);
    free(s->mix);
    memset(s, 0, sizeof(*s));
}

/* The core's window rule (sched_gen.c), applied to our own union-find. */
static void window_group(struct pr_sim_stats *s, uint32_t k,
                         struct pr_sim_result *r)
{
    int connected = s->win.comps <= 1;

    s->win_updates += k;
    if (s->win_updates < s->window_len) {
        return;
    }
    if (!connected && s->gen_active) {
        return; /* the core steers until it connects */
    }
    r->windows++;
    r->windows_connected += connected;
    r->window_updates += s->win_updates;
    if (s->win_updates > r->window_max_updates) {
        r->window_max_updates = s->win_updates;
    }
    s->win_updates = 0;
    uf_reset(&s->win);
}

static void strict_group(struct pr_sim_stats *s, uint32_t k,
                         struct pr_sim_result *r)
{
    s->strict_updates += k;
    if (s->strict_updates < s->window_len) {
        return;
    }
    r->strict_windows++;
    r->strict_connected += s->strict.comps <= 1;
    s->strict_updates = 0;
    uf_reset(&s->strict);
}

void pr_sim_stats_group(struct pr_sim_stats *s, const struct pr_sched_group *g,
                        struct pr_sim_result *r)
{
    const struct pr_sched_member *m = g->members;
    uint32_t k = g->n;
    uint32_t nslow = 0;

    r->groups++;
    r->members += k;
    if (k <= s->n) {
        r->hist[k]++;
    }
    for (uint32_t i = 0; i < k; i++) {
        nslow += s->slow[m[i].rank];
        if (i > 0) {
            uf_unite(&s->win, m[0].rank, m[i].rank);
            uf_unite(&s->strict, m[0].rank, m[i].rank);
        }
    }
    if (k >= 2) {
        r->multi++;
        r->mixed += nslow > 0 && nslow < k;
    }
    window_group(s, k, r);
    strict_group(s, k, r);
    if (s->mix != NULL) {
        /* W_g - I: 1/k - delta_ij on the members' block, 0 elsewhere. */
        for (uint32_t i = 0; i < k; i++) {
            double *row = &s->mix[(size_t)m[i].rank * s->n];

            for (uint32_t j = 0; j < k; j++) {
                row[m[j].rank] += 1.0 / k - (i == j ? 1.0 : 0.0);
            }
        }
        s->mix_groups++;
    }
}

/* y = m x for an n x n row-major m. */
static void matvec(const double *m, const double *x, double *y, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        double acc = 0.0;

        for (uint32_t j = 0; j < n; j++) {
            acc += m[(size_t)i * n + j] * x[j];
        }
        y[i] = acc;
    }
}

/* Removes x's mean (its component along the all-ones vector); |x|. */
static double center(double *x, uint32_t n)
{
    double mean = 0.0;
    double norm = 0.0;

    for (uint32_t i = 0; i < n; i++) {
        mean += x[i];
    }
    mean /= n;
    for (uint32_t i = 0; i < n; i++) {
        x[i] -= mean;
        norm += x[i] * x[i];
    }
    return sqrt(norm);
}

double pr_sim_spectral_gap(const double *m, uint32_t n)
{
    double *x;
    double *y;
    double lambda = 0.0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;

    if (n < 2) {
        return 1.0;
    }
    x = malloc((size_t)n * sizeof(*x));
    y = malloc((size_t)n * sizeof(*y));
    if (x == NULL || y == NULL) {
        free(x);
        free(y);
        return NAN;
    }
    /* A fixed pseudo-random start: not orthogonal to any eigenvector. */
    for (uint32_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (double)(rng >> 11) * 0x1.0p-53 - 0.5;
    }
    double norm = center(x, n);

    for (int it = 0; it < POWER_ITERS && norm > 0.0; it++) {
        for (uint32_t i = 0; i < n; i++) {
            x[i] /= norm;
        }
        matvec(m, x, y, n);
        norm = center(y, n);
        /* m is symmetric PSD: the Rayleigh quotient x.y is lambda_2's. */
        double rq = 0.0;

        for (uint32_t i = 0; i < n; i++) {
            rq += x[i] * y[i];
        }
        double prev = lambda;

        lambda = rq;
        memcpy(x, y, (size_t)n * sizeof(*x));
        if (it > 10 && fabs(lambda - prev) < POWER_TOL) {
            break;
        }
    }
    free(x);
    free(y);
    return 1.0 - fabs(lambda);
}

int pr_sim_stats_finish(struct pr_sim_stats *s, struct pr_sim_result *r)
{
    uint32_t n = s->n;
    double *m;

    r->gap = NAN;
    if (s->mix == NULL || s->mix_groups == 0) {
        return 0;
    }
    m = malloc((size_t)n * n * sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < n; j++) {
            m[(size_t)i * n + j] = s->mix[(size_t)i * n + j] / s->mix_groups +
                                   (i == j ? 1.0 : 0.0);
        }
    }
    r->gap = pr_sim_spectral_gap(m, n);
    free(m);
    return 0;
}
