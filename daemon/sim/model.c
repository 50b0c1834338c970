/* SPDX-License-Identifier: MIT */
/*
 * The convergence model (model.h): softmax regression trained by minibatch
 * SGD, on synthetic gaussian clusters. Replicas are float32 like the
 * tensors the daemon reduces; losses are accumulated in double.
 */
#include "daemon/sim/model.h"
#include "daemon/engine/reduce.h"
#include "daemon/sim/rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Salts that keep the data set's and the minibatches' streams apart. */
#define DATA_SALT  0x5eed0da7aull
#define BATCH_SALT 0xba7c4ull
/* Bounds that keep allocations sane; the CLI never gets near them. */
#define MAX_CLASSES  1024u
#define MAX_FEATURES 4096u
#define MAX_SAMPLES  (1u << 22)

struct pr_sim_model {
    struct pr_sim_model_params p;
    size_t dim;     /* classes * (features + 1) */
    float *train_x; /* train x features, row major */
    uint16_t *train_y;
    float *eval_x; /* eval x features */
    uint16_t *eval_y;
    float *grad;    /* dim: the step's scratch gradient */
    double *logits; /* classes: scratch */
};

void pr_sim_model_defaults(struct pr_sim_model_params *p)
{
    memset(p, 0, sizeof(*p));
    p->classes = 10;
    p->features = 32;
    p->train = 8192;
    p->eval = 2000;
    p->batch = 32;
    p->lr = 0.1;
    p->sep = 0.35;
    p->seed = 1;
}

static int params_ok(const struct pr_sim_model_params *p)
{
    return p != NULL && p->classes >= 2 && p->classes <= MAX_CLASSES &&
           p->features >= 1 && p->features <= MAX_FEATURES && p->train >= 1 &&
           p->train <= MAX_SAMPLES && p->eval >= 1 && p->eval <= MAX_SAMPLES &&
           p->batch >= 1 && p->lr > 0.0 && isfinite(p->lr) && p->sep >= 0.0 &&
           isfinite(p->sep);
}

/* Draws n samples: class uniform, features = class mean + N(0, 1). */
static void draw(const struct pr_sim_model_params *p, const double *means,
                 uint64_t *rng, uint32_t n, float *x, uint16_t *y)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c = pr_sim_rng_below(rng, p->classes);
        const double *mu = &means[(size_t)c * p->features];

        y[i] = (uint16_t)c;
        for (uint32_t f = 0; f < p->features; f++) {
            x[(size_t)i * p->features + f] =
                (float)(mu[f] + pr_sim_rng_gauss(rng));
        }
    }
}

struct pr_sim_model *pr_sim_model_create(const struct pr_sim_model_params *p)
{
    struct pr_sim_model *m;
    double *means;
    uint64_t rng;

    if (!params_ok(p)) {
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return NULL;
    }
    m->p = *p;
    m->dim = (size_t)p->classes * (p->features + 1);
    m->train_x = malloc((size_t)p->train * p->features * sizeof(float));
    m->train_y = malloc((size_t)p->train * sizeof(uint16_t));
    m->eval_x = malloc((size_t)p->eval * p->features * sizeof(float));
    m->eval_y = malloc((size_t)p->eval * sizeof(uint16_t));
    m->grad = malloc(m->dim * sizeof(float));
    m->logits = malloc((size_t)p->classes * sizeof(double));
    means = malloc((size_t)p->classes * p->features * sizeof(double));
    if (m->train_x == NULL || m->train_y == NULL || m->eval_x == NULL ||
        m->eval_y == NULL || m->grad == NULL || m->logits == NULL ||
        means == NULL) {
        free(means);
        pr_sim_model_destroy(m);
        return NULL;
    }
    rng = pr_sim_rng_seed(p->seed, DATA_SALT);
    for (size_t i = 0; i < (size_t)p->classes * p->features; i++) {
        means[i] = p->sep * pr_sim_rng_gauss(&rng);
    }
    draw(p, means, &rng, p->train, m->train_x, m->train_y);
    draw(p, means, &rng, p->eval, m->eval_x, m->eval_y);
    free(means);
    return m;
}

void pr_sim_model_destroy(struct pr_sim_model *m)
{
    if (m == NULL) {
        return;
    }
    free(m->train_x);
    free(m->train_y);
    free(m->eval_x);
    free(m->eval_y);
    free(m->grad);
    free(m->logits);
    free(m);
}

size_t pr_sim_model_dim(const struct pr_sim_model *m)
{
    return m->dim;
}

const struct pr_sim_model_params *
pr_sim_model_params(const struct pr_sim_model *m)
{
    return &m->p;
}

void pr_sim_model_init(const struct pr_sim_model *m, float *x)
{
    memset(x, 0, m->dim * sizeof(*x));
}

/*
 * logits[c] = w_c . s + b_c for one sample s; returns log(sum exp logits)
 * (max-shifted, so it cannot overflow).
 */
static double forward(const struct pr_sim_model_params *p, const float *x,
                      const float *s, double *logits)
{
    uint32_t stride = p->features + 1;
    double top = -INFINITY;
    double sum = 0.0;

    for (uint32_t c = 0; c < p->classes; c++) {
        const float *w = &x[(size_t)c * stride];
        float z = w[p->features];

        for (uint32_t f = 0; f < p->features; f++) {
            z += w[f] * s[f];
        }
        logits[c] = z;
        if (z > top) {
            top = z;
        }
    }
    for (uint32_t c = 0; c < p->classes; c++) {
        sum += exp(logits[c] - top);
    }
    return top + log(sum);
}

void pr_sim_model_step(struct pr_sim_model *m, float *x, uint32_t shard,
                       uint32_t nshards, uint64_t *rng)
{
    const struct pr_sim_model_params *p = &m->p;
    uint32_t stride = p->features + 1;
    uint32_t count = 0;

    if (nshards > 0 && shard < nshards && shard < p->train) {
        count = (p->train - shard + nshards - 1) / nshards;
    }
    memset(m->grad, 0, m->dim * sizeof(*m->grad));
    for (uint32_t b = 0; b < p->batch; b++) {
        /* An empty shard (more workers than samples) uses the whole set. */
        uint32_t idx = count > 0
                           ? shard + nshards * pr_sim_rng_below(rng, count)
                           : pr_sim_rng_below(rng, p->train);
        const float *s = &m->train_x[(size_t)idx * p->features];
        double lse = forward(p, x, s, m->logits);

        for (uint32_t c = 0; c < p->classes; c++) {
            float g = (float)(exp(m->logits[c] - lse) -
                              (c == m->train_y[idx] ? 1.0 : 0.0));
            float *gw = &m->grad[(size_t)c * stride];

            for (uint32_t f = 0; f < p->features; f++) {
                gw[f] += g * s[f];
            }
            gw[p->features] += g;
        }
    }
    pr_reduce_axpy(x, m->grad, (float)(-p->lr / p->batch), m->dim);
}

double pr_sim_model_loss(const struct pr_sim_model *m, const float *x)
{
    const struct pr_sim_model_params *p = &m->p;
    double sum = 0.0;

    for (uint32_t i = 0; i < p->eval; i++) {
        const float *s = &m->eval_x[(size_t)i * p->features];
        double lse = forward(p, x, s, m->logits);

        sum += lse - m->logits[m->eval_y[i]];
    }
    return sum / p->eval;
}

uint64_t pr_sim_batch_seed(uint64_t seed, uint32_t worker)
{
    return pr_sim_rng_seed(seed ^ BATCH_SALT, worker);
}

int pr_sim_model_calibrate(struct pr_sim_model *m, uint32_t workers,
                           uint32_t steps, double frac, uint64_t seed,
                           double *target, double *l0, double *ls)
{
    size_t bytes;
    float *avg;
    float *rep;
    float *next;
    uint64_t *rng;

    if (m == NULL || workers == 0 || !(frac > 0.0 && frac <= 1.0)) {
        return -EINVAL;
    }
    bytes = m->dim * sizeof(float);
    avg = malloc(bytes);
    rep = malloc(bytes);
    next = malloc(bytes);
    rng = malloc((size_t)workers * sizeof(*rng));
    if (avg == NULL || rep == NULL || next == NULL || rng == NULL) {
        free(avg);
        free(rep);
        free(next);
        free(rng);
        return -ENOMEM;
    }
    for (uint32_t w = 0; w < workers; w++) {
        rng[w] = pr_sim_batch_seed(seed, w);
    }
    pr_sim_model_init(m, avg);
    *l0 = pr_sim_model_loss(m, avg);
    /*
     * All replicas are equal after every round, so one copy suffices: each
     * worker steps from it, and the uniform mean (weights 1 / workers, as
     * the simulator's allreduce groups carry) is the next copy.
     */
    for (uint32_t t = 0; t < steps; t++) {
        memset(next, 0, bytes);
        for (uint32_t w = 0; w < workers; w++) {
            memcpy(rep, avg, bytes);
            pr_sim_model_step(m, rep, w, workers, &rng[w]);
            pr_reduce_axpy(next, rep, (float)(1.0 / workers), m->dim);
        }
        memcpy(avg, next, bytes);
    }
    *ls = pr_sim_model_loss(m, avg);
    *target = *l0 - frac * (*l0 - *ls);
    free(avg);
    free(rep);
    free(next);
    free(rng);
    return 0;
}
