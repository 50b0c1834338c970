/* SPDX-License-Identifier: MIT */
/*
 * The simulator's convergence model: softmax regression on a synthetic
 * data set of gaussian clusters, generated from a fixed seed. Every
 * simulated worker holds a real replica (a float vector of
 * pr_sim_model_dim() entries) and takes real minibatch SGD steps on its
 * shard, while time is simulated (sim.c).
 *
 * Data: `classes` cluster means drawn N(0, sep^2) per feature; a sample is
 * its class mean plus N(0, 1) noise per feature. `train` samples are
 * sharded by index (worker i of n takes samples i, i + n, ...); `eval`
 * further samples from the same distribution are the fixed evaluation set.
 *
 * Parameters: for class c, weights x[c * (features + 1) + f] and the bias
 * x[c * (features + 1) + features]. Replicas start at zero (loss ln C).
 *
 * One model serves one run at a time: it owns scratch space, so it is not
 * for concurrent use from several threads.
 */
#ifndef PR_SIM_MODEL_H
#define PR_SIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct pr_sim_model_params {
    uint32_t classes;  /* C */
    uint32_t features; /* F */
    uint32_t train;    /* training samples, split into shards */
    uint32_t eval;     /* evaluation samples */
    uint32_t batch;    /* minibatch size */
    double lr;         /* SGD learning rate */
    double sep;        /* cluster mean scale (larger = easier) */
    uint64_t seed;     /* the data set's seed */
};

struct pr_sim_model;

/* The defaults above filled in: C 10, F 32, 8192 / 2000 samples, ... */
void pr_sim_model_defaults(struct pr_sim_model_params *p);

/* NULL on allocation failure or invalid params. */
struct pr_sim_model *pr_sim_model_create(const struct pr_sim_model_params *p);
void pr_sim_model_destroy(struct pr_sim_model *m);

/* Floats in one replica. */
size_t pr_sim_model_dim(const struct pr_sim_model *m);
const struct pr_sim_model_params *
pr_sim_model_params(const struct pr_sim_model *m);

/* x = the initial replica (zeros). */
void pr_sim_model_init(const struct pr_sim_model *m, float *x);

/*
 * One SGD step on a minibatch drawn with `rng` from shard `shard` of
 * `nshards`: x -= lr * gradient.
 */
void pr_sim_model_step(struct pr_sim_model *m, float *x, uint32_t shard,
                       uint32_t nshards, uint64_t *rng);

/* Mean cross-entropy of replica x over the evaluation set. */
double pr_sim_model_loss(const struct pr_sim_model *m, const float *x);

/*
 * Synchronous model averaging of `workers` replicas for `steps` rounds
 * (what allreduce computes, without a clock), each worker drawing its
 * minibatches from the stream pr_sim_batch_seed(seed, worker) as the
 * simulator does: *l0 = the initial loss, *ls = the loss after the last
 * round, *target = l0 - frac * (l0 - ls). 0, -EINVAL or -ENOMEM.
 */
int pr_sim_model_calibrate(struct pr_sim_model *m, uint32_t workers,
                           uint32_t steps, double frac, uint64_t seed,
                           double *target, double *l0, double *ls);

/* The minibatch stream of `worker` in a run seeded with `seed`. */
uint64_t pr_sim_batch_seed(uint64_t seed, uint32_t worker);

#endif
