/* SPDX-License-Identifier: MIT */
/* preducectl's tables, for people: a daemon's view as text. */
#ifndef PR_CTL_TABLE_H
#define PR_CTL_TABLE_H

#include <stdio.h>

#include "daemon/ctl/view.h"

/* `preducectl status`: the daemon at addr, then its workers' table. */
void pr_ctl_table_status(FILE *f, const struct pr_ctl_view *v,
                         const char *addr);

/*
 * `preducectl workers`: the daemon's first line, then a row per worker
 * (a scheduler's) or trainer (a node's).
 */
/* A scheduler's jobs: name, id, policy, workers, waiting, groups. */
void pr_ctl_table_jobs(FILE *f, const struct pr_ctl_view *v, const char *addr);
void pr_ctl_table_workers(FILE *f, const struct pr_ctl_view *v,
                          const char *addr);

#endif
