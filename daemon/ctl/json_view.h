/* SPDX-License-Identifier: MIT */
/*
 * preducectl --json: a daemon's view as one JSON object, an element of the
 * document's array (cmd.c). The keys are the tables' fields (table.c);
 * numbers are numbers, a figure the daemon did not export is null.
 */
#ifndef PR_CTL_JSON_VIEW_H
#define PR_CTL_JSON_VIEW_H

#include "daemon/ctl/json.h"
#include "daemon/ctl/view.h"

/* `status --json`: everything `status` prints. */
void pr_ctl_json_status(struct pr_json *j, const struct pr_ctl_view *v,
                        const char *addr);
/* `workers --json`: who the daemon is and its "workers" array. */
/* {"address", "role", "name", "job", "jobs": [{"name", "id", "policy",
 * "workers", "waiting", "groups"}...]} (a node's: no "jobs"). */
void pr_ctl_json_jobs(struct pr_json *j, const struct pr_ctl_view *v,
                      const char *addr);
void pr_ctl_json_workers(struct pr_json *j, const struct pr_ctl_view *v,
                         const char *addr);
/* A daemon that could not be read: {"address": addr, "error": why}. */
void pr_ctl_json_error(struct pr_json *j, const char *addr, const char *why);

#endif
