/* SPDX-License-Identifier: MIT */
/*
 * preduce-sim's engine: drives the real scheduler core (sched_core.h) with
 * a simulated clock, from a heterogeneity profile and without data, and
 * optionally trains a real replica per worker (model.h) to measure the
 * simulated time to a target loss.
 *
 * Simulated worker loop (one per rank, times in microseconds):
 *
 *  1. compute for base_ms x speed[i] x (1 + U(-jitter, +jitter)), plus
 *     stall_ms with probability stall_prob; with a model, take one real
 *     SGD step on the replica;
 *  2. READY(version + 1) into the core (the daemon's client does the
 *     same: each reduce carries its last result's version + 1);
 *  3. after every event, pr_sched_core_next_group() until it returns 0, and
 *     a deadline event at pr_sched_core_deadline_us();
 *  4. a formed group of k completes comm_us x 2 (k - 1) / k later (a
 *     bandwidth-bound ring); then every member's replica becomes the group
 *     result (uniform: the weighted mean; staleness: each member's personal
 *     result, pr_reduce_personal), its version the group's max_version,
 *     and it goes back to 1.
 *
 * Everything random is seeded from conf.seed, so a run is reproducible.
 * Nothing here prints but the pr_sim_print_* reports (report.c).
 */
#ifndef PR_SIM_H
#define PR_SIM_H

#include "daemon/sched/core/sched_core.h"

#include <stdint.h>
#include <stdio.h>

struct pr_sim_model;

/* The spectral gap is estimated (dense N x N) up to this many workers. */
#define PR_SIM_GAP_MAX 64u

struct pr_sim_conf {
    struct pr_sched_params sched; /* the real core's parameters */
    uint32_t workers;             /* N, ranks 0 .. N - 1 */
    const double *speed; /* N step-time factors (caller's); NULL = all 1 */
    double base_ms;      /* a factor-1 worker's step */
    double jitter;       /* relative, in [0, 1) */
    double stall_prob;   /* per step */
    double stall_ms;
    double comm_us;         /* a group of k communicates comm_us x 2(k-1)/k */
    double duration_s;      /* simulated time to run for */
    uint32_t window_rounds; /* B for window stats; 0 = isolation_bound or 10 */
    uint64_t seed;

    /* Convergence model: NULL runs without replicas (fast). */
    struct pr_sim_model *model;
    double eval_ms;     /* evaluation period, simulated; 0 = base_ms / 2 */
    double target_loss; /* <= 0: none */
    int stop_at_target; /* end the run once every replica reached it */
};

struct pr_sim_result {
    uint32_t workers;
    double sim_s;          /* simulated time covered */
    int stalled;           /* nothing left to happen before the end */
    uint64_t ready_events; /* READYs given to the core */
    uint64_t groups;
    uint64_t members;   /* member-updates: the sum of group sizes */
    uint64_t *hist;     /* workers + 1 entries: groups of each size */
    uint64_t *updates;  /* workers entries: groups each one completed */
    uint64_t *sizes;    /* workers entries: the sizes of those groups, summed */
    uint32_t slow;      /* workers counted slow (see slow_factor) */
    double slow_factor; /* slow: speed > slow_factor x the fastest's */
    uint64_t wait_us;   /* summed over member-updates: READY to group */
    double window_ms;   /* dynamic: the core's adapted window at the end */
    uint64_t multi;     /* groups of two or more */
    uint64_t mixed;     /* ... holding a fast and a slow worker */

    /*
     * Connectivity windows, measured by the simulator's own union-find over
     * the formed groups with the core's rule (sched_gen.c), so that they
     * should match pr_sched_stats': B = window_rounds, a round = N
     * member-updates. A window ends at the first group that brings it to
     * B x N updates, connected if the union of its groups spans every
     * worker; but with the generator on (isolation_bound > 0, not
     * allreduce) the core steers an unconnected window until it connects,
     * so such a window stays open until it does: then every window that
     * ends is connected, and what the generator costs shows in the windows'
     * length (mean, max). The strict windows are exactly B rounds in both
     * cases, which the generator does not promise to connect.
     */
    uint32_t window_rounds;
    uint64_t windows;
    uint64_t windows_connected;
    uint64_t window_updates;     /* their total length in member-updates */
    uint64_t window_max_updates; /* the longest one */
    uint64_t strict_windows;
    uint64_t strict_connected;
    struct pr_sched_stats core; /* the core's own counters */

    /*
     * 1 - |lambda_2| of the mean over formed groups of W_g (W_g averages
     * its members uniformly, identity elsewhere); NAN above PR_SIM_GAP_MAX.
     */
    double gap;

    double wall_s; /* real time of the run */
    double core_s; /* real time inside pr_sched_core_* calls */

    /* With a model. */
    double loss0;      /* mean replica loss at time 0 */
    double loss_final; /* at the last evaluation: evaluations stop once */
    double loss_worst; /* the largest replica loss at that evaluation */
    double target_s;   /* one is at or below the target (its time), or -1 */
    double every_s;    /* every replica's loss is (its time), or -1 */
    uint64_t evals;
};

/*
 * conf with the daemon's defaults (conf/preduced.conf) for the scheduler,
 * policy `policy`, N workers, all of speed 1, 100 ms steps, no jitter.
 */
void pr_sim_conf_defaults(struct pr_sim_conf *c, int policy, uint32_t workers);

/*
 * Runs one simulation. 0, -EINVAL (bad conf, or the core refused the
 * params), -ENOMEM, or -EPROTO if the core broke its contract (a group
 * holding a worker that was not queued, or twice); *r is filled on success
 * and must be released with pr_sim_result_fini().
 */
int pr_sim_run(const struct pr_sim_conf *c, struct pr_sim_result *r);
void pr_sim_result_fini(struct pr_sim_result *r);

/* Per-worker update rate: groups completed per simulated second. */
double pr_sim_rate(const struct pr_sim_result *r, uint32_t worker);

/*
 * 1 - lambda_2 of the N x N symmetric matrix m (row major, rows summing to
 * 1, positive semidefinite): power iteration on vectors orthogonal to the
 * all-ones vector. Exposed for tests.
 */
double pr_sim_spectral_gap(const double *m, uint32_t n);

/* Reports (report.c). */
void pr_sim_print_run(FILE *out, const char *label, const struct pr_sim_conf *c,
                      const struct pr_sim_result *r);
void pr_sim_print_table_head(FILE *out, int with_model);
void pr_sim_print_table_row(FILE *out, const char *label,
                            const struct pr_sim_result *r, int with_model,
                            double baseline_s);

#endif
