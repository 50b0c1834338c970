/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's metrics (metrics.h): nodes, workers and groups over all
 * jobs (their counters include the jobs that ended); per job (label job)
 * its workers, queue, groups, window and the group generator's counters;
 * and per worker (labels job, worker, rank, node) its version, staleness,
 * steps, update rate, step time and whether it is a straggler. Staleness
 * and stragglers are judged within the worker's job.
 *
 * Two paces per worker, both EWMAs (weight EWMA_NEW on the newest sample):
 *  - the update rate, from READY-to-READY intervals: how often its model
 *    is averaged. Under allreduce every worker has the slowest one's rate.
 *  - the step time, from the formation of its group to its next READY: the
 *    reduce plus its own compute, which waiting for others does not hide.
 * A straggler is a worker whose pace by step time is below half the
 * median pace of the live workers. A worker silent for longer than its
 * EWMA counts with the time it has been silent, so a stalled one shows.
 */
#include "daemon/sched/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/base/metrics.h"
#include "daemon/sched/core/sched_core.h"

#define EWMA_NEW 0.25

void pr_sched_wstats_ready(struct pr_sched_wstats *w, uint64_t version,
                           uint64_t now_us)
{
    if (w->readies > 0 && now_us > w->last_ready_us) {
        double dt = (double)(now_us - w->last_ready_us);
        w->interval_us = w->interval_us > 0
                             ? (1 - EWMA_NEW) * w->interval_us + EWMA_NEW * dt
                             : dt;
    }
    if (w->grouped_us > w->last_ready_us && now_us > w->grouped_us) {
        double dt = (double)(now_us - w->grouped_us);
        w->step_us =
            w->step_us > 0 ? (1 - EWMA_NEW) * w->step_us + EWMA_NEW * dt : dt;
    }
    w->readies++;
    w->version = version;
    w->last_ready_us = now_us;
}

/* Updates per second, or -1 while not known. */
static double update_rate(const struct pr_sched_wstats *w, uint64_t now_us)
{
    if (w->interval_us <= 0)
        return -1;
    double us = w->interval_us;
    if (now_us > w->last_ready_us && (double)(now_us - w->last_ready_us) > us)
        us = (double)(now_us - w->last_ready_us);
    return 1e6 / us;
}

/* Seconds per step of its own, or -1 while not known. */
static double step_s(const struct pr_sched_wstats *w, uint64_t now_us)
{
    if (w->step_us <= 0)
        return -1;
    double us = w->step_us;
    /* Grouped and not ready again yet: it is computing (or stalled). */
    if (w->grouped_us > w->last_ready_us && now_us > w->grouped_us &&
        (double)(now_us - w->grouped_us) > us)
        us = (double)(now_us - w->grouped_us);
    return us / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median pace (steps/s) of the job's workers whose step time is known. */
static double median_pace(const struct pr_sched_job_view *v, uint64_t now_us,
                          double *tmp)
{
    size_t n = 0;
    for (size_t i = 0; i < v->nworkers; i++) {
        double s = step_s(v->workers[i].st, now_us);
        if (s > 0)
            tmp[n++] = 1 / s;
    }
    if (n == 0)
        return -1;
    qsort(tmp, n, sizeof(*tmp), cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static void scalar(struct pr_metrics_buf *b, const char *name, const char *type,
                   const char *help, uint64_t x)
{
    pr_metrics_header(b, name, type, help);
    pr_metrics_printf(b, "%s %llu\n", name, (unsigned long long)x);
}

static void histogram(struct pr_metrics_buf *b, const struct pr_sched_view *v)
{
    static const unsigned les[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,
                                   10, 11, 12, 13, 14, 15, 16, 32, 64};
    pr_metrics_header(b, "preduce_sched_group_size", "histogram",
                      "Members per group formed.");
    uint64_t cum = 0;
    unsigned k = 1;
    for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
        for (; k <= les[i] && k <= PR_SCHED_SIZES; k++)
            cum += v->sizes[k];
        pr_metrics_printf(b,
                          "preduce_sched_group_size_bucket{le=\"%u\"} %llu\n",
                          les[i], (unsigned long long)cum);
    }
    pr_metrics_printf(b,
                      "preduce_sched_group_size_bucket{le=\"+Inf\"} %llu\n"
                      "preduce_sched_group_size_sum %llu\n"
                      "preduce_sched_group_size_count %llu\n",
                      (unsigned long long)(cum + v->sizes[0]),
                      (unsigned long long)v->members,
                      (unsigned long long)v->groups_formed);
}

/* One line per worker: NAME{job="..",worker="..",rank="..",node=".."} V. */
static void per_worker(struct pr_metrics_buf *b, const char *name,
                       const char *job, const struct pr_sched_worker_view *w,
                       const char *value)
{
    char esc[2 * 64 + 1];
    pr_metrics_printf(b, "%s{job=\"%s\",", name, job);
    pr_metrics_printf(b, "worker=\"%s\",rank=\"%u\",node=\"%u\"} %s\n",
                      pr_metrics_escape(w->name, esc, sizeof(esc)), w->rank,
                      w->node, value);
}

/* One line per job: NAME{job=".."} VALUE, under one header. */
static void per_job(struct pr_metrics_buf *b, const struct pr_sched_view *v,
                    char (*esc)[2 * 64 + 1], const char *name, const char *type,
                    const char *help,
                    double (*value)(const struct pr_sched_job_view *j),
                    int decimals)
{
    pr_metrics_header(b, name, type, help);
    for (size_t i = 0; i < v->njobs; i++)
        pr_metrics_printf(b, "%s{job=\"%s\"} %.*f\n", name, esc[i], decimals,
                          value(&v->jobs[i]));
}

static double j_workers(const struct pr_sched_job_view *j)
{
    return (double)j->nworkers;
}

static double j_queued(const struct pr_sched_job_view *j)
{
    return j->queued;
}

static double j_groups(const struct pr_sched_job_view *j)
{
    return (double)j->core->groups;
}

static double j_forced(const struct pr_sched_job_view *j)
{
    return (double)j->core->generator_forced;
}

static double j_held(const struct pr_sched_job_view *j)
{
    return (double)j->core->generator_held;
}

static double j_checked(const struct pr_sched_job_view *j)
{
    return (double)j->core->windows_checked;
}

static double j_connected(const struct pr_sched_job_view *j)
{
    return (double)j->core->windows_connected;
}

static double j_window_s(const struct pr_sched_job_view *j)
{
    return j->window_ms / 1000;
}

/* The per-job series: one table, rendered in this order. */
static const struct {
    const char *name, *type, *help;
    double (*value)(const struct pr_sched_job_view *j);
    int decimals;
} job_series[] = {
    {"preduce_sched_job_workers", "gauge", "Workers registered in the job.",
     j_workers, 0},
    {"preduce_sched_job_queued", "gauge",
     "The job's workers ready and waiting for a group.", j_queued, 0},
    {"preduce_sched_job_groups_total", "counter",
     "Groups formed in the job since it started.", j_groups, 0},
    {"preduce_sched_generator_forced_total", "counter",
     "Groups formed while the generator steered.", j_forced, 0},
    {"preduce_sched_generator_held_total", "counter",
     "Times the generator held a due group open.", j_held, 0},
    {"preduce_sched_windows_checked_total", "counter", "Mixing windows ended.",
     j_checked, 0},
    {"preduce_sched_windows_connected_total", "counter",
     "Mixing windows whose groups connected every live worker.", j_connected,
     0},
    {"preduce_sched_job_window_seconds", "gauge",
     "The dynamic policy's current window in the job.", j_window_s, 6},
};

/* What the per-worker series need besides the worker. */
struct series_ctx {
    uint64_t newest; /* the newest version of any worker */
    uint64_t now_us;
};

static double w_version(const struct pr_sched_wstats *w,
                        const struct series_ctx *c)
{
    (void)c;
    return (double)w->version;
}

static double w_staleness(const struct pr_sched_wstats *w,
                          const struct series_ctx *c)
{
    return (double)(c->newest - w->version);
}

static double w_steps(const struct pr_sched_wstats *w,
                      const struct series_ctx *c)
{
    (void)c;
    return (double)w->readies;
}

static double w_rate(const struct pr_sched_wstats *w,
                     const struct series_ctx *c)
{
    return update_rate(w, c->now_us);
}

static double w_step_s(const struct pr_sched_wstats *w,
                       const struct series_ctx *c)
{
    return step_s(w, c->now_us);
}

/* One table of the per-worker series; a negative value is not printed. */
static const struct {
    const char *name, *type, *help;
    int decimals;
    double (*value)(const struct pr_sched_wstats *w,
                    const struct series_ctx *c);
} series[] = {
    {"preduce_worker_version", "gauge",
     "Model version of each worker's last READY.", 0, w_version},
    {"preduce_worker_staleness", "gauge", "Versions behind the newest worker.",
     0, w_staleness},
    {"preduce_worker_steps_total", "counter",
     "READYs (steps) since the worker joined.", 0, w_steps},
    {"preduce_worker_update_rate", "gauge",
     "Updates per second (EWMA of READY intervals).", 4, w_rate},
    {"preduce_worker_step_seconds", "gauge",
     "Time from its group's formation to its next READY (EWMA): its own "
     "pace.",
     6, w_step_s},
};

/*
 * The per-worker series, each family's samples together over the jobs;
 * staleness and stragglers within each worker's job. The stragglers.
 */
static uint64_t render_workers(struct pr_metrics_buf *b,
                               const struct pr_sched_view *v,
                               char (*jesc)[2 * 64 + 1], const double *median)
{
    char val[64];
    for (size_t s = 0; s < sizeof(series) / sizeof(series[0]); s++) {
        pr_metrics_header(b, series[s].name, series[s].type, series[s].help);
        for (size_t i = 0; i < v->njobs; i++) {
            const struct pr_sched_job_view *j = &v->jobs[i];
            uint64_t newest = 0;
            for (size_t k = 0; k < j->nworkers; k++)
                if (j->workers[k].st->version > newest)
                    newest = j->workers[k].st->version;
            struct series_ctx ctx = {.newest = newest, .now_us = v->now_us};
            for (size_t k = 0; k < j->nworkers; k++) {
                double x = series[s].value(j->workers[k].st, &ctx);
                if (x < 0)
                    continue; /* not known yet */
                snprintf(val, sizeof(val), "%.*f", series[s].decimals, x);
                per_worker(b, series[s].name, jesc[i], &j->workers[k], val);
            }
        }
    }
    pr_metrics_header(b, "preduce_worker_straggler", "gauge",
                      "1 when the worker's pace is below half the median of "
                      "its job.");
    uint64_t stragglers = 0;
    for (size_t i = 0; i < v->njobs; i++) {
        const struct pr_sched_job_view *j = &v->jobs[i];
        for (size_t k = 0; k < j->nworkers; k++) {
            double s = step_s(j->workers[k].st, v->now_us);
            int slow = s > 0 && median[i] > 0 && 1 / s < median[i] / 2;
            stragglers += (uint64_t)slow;
            per_worker(b, "preduce_worker_straggler", jesc[i], &j->workers[k],
                       slow ? "1" : "0");
        }
    }
    return stragglers;
}

int pr_sched_metrics_render(const struct pr_sched_view *v,
                            struct pr_metrics_buf *b)
{
    char esc[2 * 64 + 1];
    char(*jesc)[2 * 64 + 1] = calloc(v->njobs + 1, sizeof(*jesc));
    size_t nw = 0;
    for (size_t i = 0; i < v->njobs; i++)
        nw += v->jobs[i].nworkers;
    double *tmp = calloc(nw + 1, sizeof(*tmp));
    double *median = calloc(v->njobs + 1, sizeof(*median));
    if (!jesc || !tmp || !median) {
        free(jesc);
        free(tmp);
        free(median);
        return -ENOMEM;
    }
    for (size_t i = 0; i < v->njobs; i++) {
        pr_metrics_escape(v->jobs[i].name, jesc[i], sizeof(jesc[i]));
        median[i] = median_pace(&v->jobs[i], v->now_us, tmp);
    }
    free(tmp);

    pr_metrics_header(b, "preduce_info", "gauge",
                      "This daemon: role, job and name.");
    pr_metrics_printf(b,
                      "preduce_info{role=\"scheduler\",job=\"%s\","
                      "name=\"scheduler\"} 1\n",
                      pr_metrics_escape(v->job, esc, sizeof(esc)));
    pr_metrics_build_info(b);
    scalar(b, "preduce_sched_nodes", "gauge", "Node daemons connected.",
           v->nodes);
    scalar(b, "preduce_sched_jobs", "gauge", "Jobs with a live worker.",
           v->njobs);
    scalar(b, "preduce_sched_workers_live", "gauge",
           "Workers registered, all jobs.", v->live);
    scalar(b, "preduce_sched_workers_queued", "gauge",
           "Workers ready and waiting for a group, all jobs.", v->queued);
    scalar(b, "preduce_sched_workers_refused_total", "counter",
           "Worker registrations refused: past scheduler.max_workers_per_node.",
           v->workers_refused);
    scalar(b, "preduce_sched_job_key_refused_total", "counter",
           "Worker registrations refused: no proof, or another proof, of "
           "their job's key.",
           v->key_refused);
    scalar(b, "preduce_sched_groups_total", "counter",
           "Groups formed, all jobs.", v->groups_formed);
    histogram(b, v);
    scalar(b, "preduce_sched_member_updates_total", "counter",
           "Member-updates: the sum of the groups' sizes, all jobs.",
           v->members);
    pr_metrics_header(b, "preduce_sched_window_seconds", "gauge",
                      "The dynamic policy's first window in a job that starts "
                      "now (scheduler.window_ms).");
    pr_metrics_printf(b, "preduce_sched_window_seconds %.6f\n",
                      v->window_ms / 1000);
    pr_metrics_header(b, "preduce_sched_job_info", "gauge",
                      "A job: its id on the wire, its policy, whether its "
                      "workers prove a job key.");
    for (size_t i = 0; i < v->njobs; i++)
        pr_metrics_printf(b,
                          "preduce_sched_job_info{job=\"%s\",id=\"%u\","
                          "policy=\"%s\",key=\"%s\"} 1\n",
                          jesc[i], v->jobs[i].id, v->jobs[i].policy,
                          v->jobs[i].keyed ? "yes" : "no");
    for (size_t k = 0; k < sizeof(job_series) / sizeof(job_series[0]); k++)
        per_job(b, v, jesc, job_series[k].name, job_series[k].type,
                job_series[k].help, job_series[k].value,
                job_series[k].decimals);

    uint64_t stragglers = render_workers(b, v, jesc, median);
    scalar(b, "preduce_sched_stragglers", "gauge",
           "Workers flagged as stragglers.", stragglers);
    free(jesc);
    free(median);
    return b->err;
}
