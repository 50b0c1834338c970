/* SPDX-License-Identifier: MIT */
/*
 * What preducectl shows of one daemon, read out of its parsed metrics
 * once: the tables (table.c) and the JSON (json_view.c) print the same
 * fields from it. A figure the daemon did not export is NAN.
 */
#ifndef PR_CTL_VIEW_H
#define PR_CTL_VIEW_H

#include <stddef.h>

#include "daemon/ctl/promtext.h"

enum pr_ctl_role { PR_CTL_NODE, PR_CTL_SCHED };

/* A scheduler's worker, or a node's trainer (job, rank and version). */
struct pr_ctl_worker {
    char job[128]; /* its job; "" from a daemon that gives none */
    char name[128];
    double rank; /* a node's trainer not registered yet: -1 */
    double node; /* the node id (scheduler) */
    double version, staleness, steps;
    double rate;      /* updates per second */
    double step_s;    /* its own step time, seconds */
    double straggler; /* 1 or 0 */
};

/* A scheduler's job. */
struct pr_ctl_job {
    char name[128], policy[32];
    char key[8]; /* "yes", "no", or "?" from a scheduler older than keys */
    double id, workers, queued, groups;
};

/* Groups of from..to members (to: INFINITY for the last bucket). */
struct pr_ctl_sizes {
    double from, to, groups;
};

enum { PR_CTL_TCP, PR_CTL_RDMA, PR_CTL_XPORTS };
enum { PR_CTL_SENT, PR_CTL_RECEIVED };

/*
 * A node's wire encoding (transport.wire): its name as the daemon's
 * labels spell it, and what went in it. At most PR_CTL_WIRES are kept.
 */
#define PR_CTL_WIRES 8
struct pr_ctl_wire {
    char name[16];
    double groups, bytes_sent;
};

struct pr_ctl_view {
    enum pr_ctl_role role;
    char name[128], job[128];
    double node_id;
    /* A node's. */
    double sched_up, trainers, reduces_ok, reduces_failed;
    double reduce_sum_s, reduce_count;
    double groups_ok, groups_failed, groups_running, links_up, rdma;
    double bytes[PR_CTL_XPORTS][2]; /* 0 where not exported */
    /* The node's transport.wire ("" when not exported) and each one's. */
    char wire_default[16];
    struct pr_ctl_wire wires[PR_CTL_WIRES]; /* in the daemon's order */
    size_t nwires;
    /* A scheduler's. */
    double nodes, live, queued, groups, members;
    struct pr_ctl_sizes *sizes; /* only the sizes seen; heap */
    size_t nsizes;
    /* A scheduler's: by name; heap. */
    struct pr_ctl_job *jobs;
    size_t njobs;
    /* Both: by job, then rank order (then by name); heap. */
    struct pr_ctl_worker *workers;
    size_t nworkers;
};

/*
 * Reads v out of m. 0; -ENOENT when m has no preduce_info of a node or a
 * scheduler (not a preduced endpoint); -ENOMEM. v is for
 * pr_ctl_view_free whatever this returns.
 */
int pr_ctl_view_build(const struct pr_promtext *m, struct pr_ctl_view *v);
void pr_ctl_view_free(struct pr_ctl_view *v);
/* Keeps only job's workers and job (preducectl workers JOB). */
void pr_ctl_view_keep_job(struct pr_ctl_view *v, const char *job);

#endif
