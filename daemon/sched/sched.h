/* SPDX-License-Identifier: MIT */
/*
 * The scheduler role: one serves many jobs (sched_job.c). Node daemons
 * connect over TCP; the scheduler registers their workers in the job each
 * names, feeds READY events to that job's decision core (sched_core.h),
 * and sends each group it forms to the daemons that host its members.
 *
 * Protocol with a node daemon, in order:
 *  0. scheduler -> Challenge{nonce, required} on accept (auth.h).
 *  1. node -> Hello{version, role NODE, name, data_addr, auth}; scheduler
 *     checks the proof, -> Welcome{id = node id, auth}, then PeerList to
 *     every node.
 *  2. node -> WorkerJoin{cookie, name, job, settings, job_proof}
 *     -> WorkerJoined{cookie, status, rank, job id, reason, keyed}; from here
 * on a worker is (job id, rank) in every message.
 *  3. node -> Ready{rank, job, version, nfloats, seq}: queued; or Reject.
 *  4. scheduler -> Group{id, members, ring, ...} to each daemon in the ring.
 *  5. node -> GroupDone{id, status}; a failure makes the scheduler send
 *     GroupAbort to the group's other daemons.
 *  6. node -> Cancel{rank, seq}: Reject(-ETIMEDOUT) if still queued.
 *  7. node -> WorkerLeave{rank}; Ping/Pong both ways every heartbeat_ms.
 * A node silent for node_timeout_ms, or whose connection drops, is removed
 * with its workers, and its groups in flight are aborted on the others.
 */
#ifndef PR_SCHED_H
#define PR_SCHED_H

#include <stdint.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"

struct pr_sched;

/*
 * Listens on conf->sched_listen. With a cluster key (NULL: none; it must
 * outlive the scheduler), nodes must prove they hold it (auth.h).
 */
int pr_sched_create(uv_loop_t *loop, struct pr_conf *conf,
                    const struct pr_auth_key *key, struct pr_sched **out);
/*
 * 0 when the scheduler would run with conf's parameters, else -EINVAL (a
 * reload checks its candidate with it before anything is changed).
 */
int pr_sched_check_conf(const struct pr_conf *conf);
/* Applies reloadable keys from the (already swapped) conf. */
int pr_sched_reload(struct pr_sched *s);
void pr_sched_destroy(struct pr_sched *s);
uint16_t pr_sched_port(const struct pr_sched *s);

/*
 * Metrics (sched_metrics.c renders what sched.c collects). Per worker,
 * from its READYs and its groups; times are sched.c's monotonic us.
 */
struct pr_sched_wstats {
    uint64_t readies;       /* READYs accepted since it joined: its steps */
    uint64_t version;       /* model version of the last one */
    uint64_t last_ready_us; /* when the last one came */
    uint64_t grouped_us;    /* when its last group was formed */
    double interval_us;     /* EWMA, READY to READY; 0 = not known yet */
    /* EWMA, its group formed to its next READY: its own pace, which
     * waiting for groups does not hide; 0 = not known yet. */
    double step_us;
};
void pr_sched_wstats_ready(struct pr_sched_wstats *w, uint64_t version,
                           uint64_t now_us);

#define PR_SCHED_SIZES 64 /* group sizes counted one by one up to this */

struct pr_sched_worker_view {
    const char *name;
    uint32_t rank, node;
    const struct pr_sched_wstats *st;
};

struct pr_sched_stats;
struct pr_metrics_buf;
/* A job as its metrics show it. */
struct pr_sched_job_view {
    const char *name;
    uint32_t id;
    const char *policy;
    uint32_t queued;
    double window_ms;                  /* the dynamic policy's window */
    int keyed;                         /* its workers prove a job key */
    const struct pr_sched_stats *core; /* groups, members, generator */
    const struct pr_sched_worker_view *workers; /* the live ones */
    size_t nworkers;
};
struct pr_sched_view {
    const char *job; /* the default job: that of a trainer that names none */
    uint64_t now_us;
    uint32_t nodes, live, queued; /* live, queued: all jobs' */
    uint64_t workers_refused;     /* past scheduler.max_workers_per_node */
    uint64_t key_refused;         /* without their job's key */
    uint64_t groups_formed;       /* all jobs', those ended included */
    double window_ms;             /* scheduler.window_ms */
    uint64_t members;             /* their member-updates */
    const uint64_t *sizes; /* [k]: groups of k members; [0]: larger ones */
    const struct pr_sched_job_view *jobs;
    size_t njobs;
};
/* The Prometheus text of a scheduler. 0 or out->err. */
int pr_sched_metrics_render(const struct pr_sched_view *v,
                            struct pr_metrics_buf *out);

#endif
