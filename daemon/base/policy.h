/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's vocabulary: how groups are formed, how members are
 * weighted and how a group's ring is ordered. The config parses these
 * names and the scheduler core acts on the values; they live here, below
 * both, so the config needs nothing of the core to name them.
 */
#ifndef PR_POLICY_H
#define PR_POLICY_H

#include "daemon/base/names.h"

/* How groups are formed (scheduler.policy). */
enum pr_policy {
    PR_POLICY_ALLREDUCE = 0,
    PR_POLICY_CONSTANT = 1,
    PR_POLICY_DYNAMIC = 2,
};

/* How members are weighted (scheduler.weighting). */
enum pr_weighting {
    PR_WEIGHT_UNIFORM = 0,
    PR_WEIGHT_STALENESS = 1,
};

/* How a group's ring is ordered (scheduler.ring_order). */
enum pr_ring_order {
    PR_RING_MEASURED = 0, /* by the nodes' measured link rates */
    PR_RING_ID = 1,       /* node id order */
};

extern const struct pr_name pr_policy_names[];
extern const struct pr_name pr_weighting_names[];
extern const struct pr_name pr_ring_order_names[];

/* The value's name; "?" for a value outside the enum. */
const char *pr_policy_name(enum pr_policy p);
const char *pr_weighting_name(enum pr_weighting w);

#endif
