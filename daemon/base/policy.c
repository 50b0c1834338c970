/* SPDX-License-Identifier: MIT */
#include "daemon/base/policy.h"

const struct pr_name pr_policy_names[] = {{"allreduce", PR_POLICY_ALLREDUCE},
                                          {"constant", PR_POLICY_CONSTANT},
                                          {"dynamic", PR_POLICY_DYNAMIC},
                                          {NULL, 0}};

const struct pr_name pr_weighting_names[] = {{"uniform", PR_WEIGHT_UNIFORM},
                                             {"staleness", PR_WEIGHT_STALENESS},
                                             {NULL, 0}};

const struct pr_name pr_ring_order_names[] = {
    {"measured", PR_RING_MEASURED}, {"id", PR_RING_ID}, {NULL, 0}};

const char *pr_policy_name(enum pr_policy p)
{
    const char *s = pr_name_of(pr_policy_names, (int)p);
    return s ? s : "?";
}

const char *pr_weighting_name(enum pr_weighting w)
{
    const char *s = pr_name_of(pr_weighting_names, (int)w);
    return s ? s : "?";
}
