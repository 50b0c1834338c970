/* SPDX-License-Identifier: MIT */
/*
 * Preset runs built on pr_sim_run() (scenario.c): the target-loss
 * calibration, the side-by-side comparison of every policy and weighting,
 * the scale run, and the acceptance scenarios. They print to `out`
 * and return 0 or a negative errno; a figure that misses its target is
 * printed as FAIL, not returned as an error.
 */
#ifndef PR_SIM_SCENARIO_H
#define PR_SIM_SCENARIO_H

#include "daemon/sim/sim.h"

#include <stdint.h>
#include <stdio.h>

/* The comparison's rows, in this order. */
enum pr_sim_row {
    PR_SIM_ALLREDUCE = 0,
    PR_SIM_CONSTANT_UNIFORM,
    PR_SIM_CONSTANT_STALENESS,
    PR_SIM_DYNAMIC_UNIFORM,
    PR_SIM_DYNAMIC_STALENESS,
    PR_SIM_ROWS,
};

/* Calibration defaults: the loss 80% of the way to 200 allreduce rounds. */
#define PR_SIM_CALIB_STEPS 200u
#define PR_SIM_CALIB_FRAC  0.8

/*
 * The target loss, from a homogeneous allreduce of `workers` replicas (see
 * pr_sim_model_calibrate): printed to out (unless NULL) and returned in
 * *target. 0 or a negative errno.
 */
int pr_sim_calibrate(FILE *out, struct pr_sim_model *m, uint32_t workers,
                     uint32_t steps, double frac, uint64_t seed,
                     double *target);

/*
 * Runs base (its profile, sizes, window, B, model and target) under every
 * row's policy and weighting, and prints one table row each (with details
 * when verbose), speedups relative to allreduce. out may be NULL. Each
 * row's time to target (-1 if never) goes to target_s[row] if not NULL.
 */
int pr_sim_compare(FILE *out, const struct pr_sim_conf *base, int verbose,
                   double *target_s);

/*
 * The scheduler at scale: base.workers workers (no model), each policy
 * with base's parameters; prints ready events and decisions per second of
 * real time spent in the core, and returns the lowest ready events per
 * second in *min_ready_per_s if not NULL.
 */
int pr_sim_scale(FILE *out, const struct pr_sim_conf *base,
                 double *min_ready_per_s);

/*
 * The acceptance scenarios 3 (connectivity windows, generator off
 * and on), 4 (time to target, one 3x slow worker and homogeneous, with the
 * uniform vs staleness comparison, over `seeds` seeds from `seed`) and 5
 * (decisions per second at 1024 workers), with PASS/FAIL per figure.
 */
int pr_sim_acceptance(FILE *out, uint64_t seed, uint32_t seeds);

#endif
