/* SPDX-License-Identifier: MIT */
/*
 * Private to the simulator's files (sim.c, stats.c): the statistics kept
 * while a run forms groups. One run owns one pr_sim_stats.
 */
#ifndef PR_SIM_INT_H
#define PR_SIM_INT_H

#include "daemon/sim/sim.h"

#include <stdint.h>

/* Union-find over ranks 0 .. n - 1 with a component count. */
struct pr_sim_uf {
    uint32_t *parent;
    uint32_t n;
    uint32_t comps;
};

struct pr_sim_stats {
    uint32_t n;
    uint64_t window_len; /* B x N member-updates */
    int gen_active;      /* the core steers unconnected windows */

    struct pr_sim_uf win; /* the core-rule windows */
    uint64_t win_updates;
    struct pr_sim_uf strict;
    uint64_t strict_updates;

    uint8_t *slow; /* n flags */
    double *mix;   /* n x n: the sum of (W_g - I), or NULL */
    uint64_t mix_groups;
};

int pr_sim_stats_init(struct pr_sim_stats *s, const struct pr_sim_conf *c,
                      struct pr_sim_result *r);
void pr_sim_stats_fini(struct pr_sim_stats *s);
/* Counts one formed group into *s and *r. */
void pr_sim_stats_group(struct pr_sim_stats *s, const struct pr_sched_group *g,
                        struct pr_sim_result *r);
/* Fills what is computed at the end (the spectral gap). 0 or -ENOMEM. */
int pr_sim_stats_finish(struct pr_sim_stats *s, struct pr_sim_result *r);

#endif
