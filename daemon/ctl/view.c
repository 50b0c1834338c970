/* SPDX-License-Identifier: MIT */
/*
 * A daemon's view from its samples. The per-worker series are matched to
 * their worker by sorting the workers once and searching them per sample:
 * a search of every sample per worker and series would be quadratic in
 * the workers (4000 took 6 s), and an array indexed by rank would let a
 * rank label size an allocation.
 */
#include "daemon/ctl/view.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_WORKER "preduce_worker_"

/* A label's value as a number: NAN when absent or not all a number. */
static double label_num(const struct pr_prom_sample *s, const char *key)
{
    char buf[64], *end;
    if (pr_promtext_label(s, key, buf, sizeof(buf)) < 0 || !buf[0])
        return NAN;
    double x = strtod(buf, &end);
    return *end ? NAN : x;
}

static double get(const struct pr_promtext *m, const char *name)
{
    return pr_promtext_get(m, name, NULL, NULL);
}

/* NAN sorts after every number, so workers without a rank come last. */
static int cmp_num(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) - isnan(y);
    return x < y ? -1 : x > y;
}

static int cmp_worker(const void *a, const void *b)
{
    const struct pr_ctl_worker *x = a, *y = b;
    int c = strcmp(x->job, y->job);
    if (c)
        return c;
    c = cmp_num(x->rank, y->rank);
    return c ? c : strcmp(x->name, y->name);
}

static int cmp_job(const void *a, const void *b)
{
    return strcmp(((const struct pr_ctl_job *)a)->name,
                  ((const struct pr_ctl_job *)b)->name);
}

/* A sample's job label into job[128]; "" without one (older daemons). */
static void job_of(const struct pr_prom_sample *s, char *job)
{
    if (pr_promtext_label(s, "job", job, 128) < 0)
        job[0] = '\0';
}

static void worker_init(struct pr_ctl_worker *w)
{
    w->rank = w->node = w->version = w->staleness = w->steps = NAN;
    w->rate = w->step_s = w->straggler = NAN;
}

/* Its worker's row of a preduce_worker_* sample; NULL if none. */
static struct pr_ctl_worker *row_of(const struct pr_ctl_view *v,
                                    const struct pr_prom_sample *s)
{
    struct pr_ctl_worker key;
    if (pr_promtext_label(s, "worker", key.name, sizeof(key.name)) < 0)
        return NULL;
    job_of(s, key.job);
    key.rank = label_num(s, "rank");
    return bsearch(&key, v->workers, v->nworkers, sizeof(key), cmp_worker);
}

/*
 * The workers: one row per preduce_worker_version sample with a worker
 * label, then each other per-worker series into its row.
 */
static int build_workers(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    size_t n = 0;
    for (size_t k = 0; k < m->n; k++)
        n += !strcmp(m->s[k].name, "preduce_worker_version");
    v->workers = calloc(n ? n : 1, sizeof(*v->workers));
    if (!v->workers)
        return -ENOMEM;
    for (size_t k = 0; k < m->n; k++) {
        const struct pr_prom_sample *s = &m->s[k];
        struct pr_ctl_worker *w = &v->workers[v->nworkers];
        if (strcmp(s->name, "preduce_worker_version") != 0 ||
            pr_promtext_label(s, "worker", w->name, sizeof(w->name)) < 0)
            continue;
        worker_init(w);
        job_of(s, w->job);
        w->rank = label_num(s, "rank");
        w->node = label_num(s, "node");
        w->version = s->value;
        v->nworkers++;
    }
    qsort(v->workers, v->nworkers, sizeof(*v->workers), cmp_worker);
    static const struct {
        const char *name;
        size_t field;
    } series[] = {
        {"preduce_worker_staleness", offsetof(struct pr_ctl_worker, staleness)},
        {"preduce_worker_steps_total", offsetof(struct pr_ctl_worker, steps)},
        {"preduce_worker_update_rate", offsetof(struct pr_ctl_worker, rate)},
        {"preduce_worker_step_seconds", offsetof(struct pr_ctl_worker, step_s)},
        {"preduce_worker_straggler", offsetof(struct pr_ctl_worker, straggler)},
    };
    for (size_t k = 0; k < m->n; k++) {
        const struct pr_prom_sample *s = &m->s[k];
        if (strncmp(s->name, PREFIX_WORKER, strlen(PREFIX_WORKER)) != 0)
            continue;
        for (size_t i = 0; i < sizeof(series) / sizeof(series[0]); i++) {
            struct pr_ctl_worker *w;
            if (strcmp(s->name, series[i].name) == 0 &&
                (w = row_of(v, s)) != NULL) {
                *(double *)((char *)w + series[i].field) = s->value;
                break;
            }
        }
    }
    return 0;
}

/*
 * The group size histogram's buckets, cumulative and in order, as the
 * sizes seen: a bucket that grew since the one before holds groups of
 * the sizes between the two bounds.
 */
static int build_sizes(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    size_t n = 0;
    for (size_t k = 0; k < m->n; k++)
        n += !strcmp(m->s[k].name, "preduce_sched_group_size_bucket");
    v->sizes = calloc(n ? n : 1, sizeof(*v->sizes));
    if (!v->sizes)
        return -ENOMEM;
    double prev = 0, prev_le = 0;
    for (size_t k = 0; k < m->n; k++) {
        double le;
        if (strcmp(m->s[k].name, "preduce_sched_group_size_bucket") != 0 ||
            isnan(le = label_num(&m->s[k], "le")))
            continue;
        double cur = m->s[k].value;
        if (cur > prev)
            v->sizes[v->nsizes++] = (struct pr_ctl_sizes){
                .from = prev_le + 1, .to = le, .groups = cur - prev};
        prev = cur;
        prev_le = le;
    }
    return 0;
}

/* The wire encoding named by s's label, added to v's if new; or NULL. */
static struct pr_ctl_wire *wire_of(const struct pr_prom_sample *s,
                                   struct pr_ctl_view *v)
{
    char name[16];
    if (pr_promtext_label(s, "wire", name, sizeof(name)) < 0 || !name[0])
        return NULL;
    for (size_t k = 0; k < v->nwires; k++)
        if (!strcmp(v->wires[k].name, name))
            return &v->wires[k];
    if (v->nwires == PR_CTL_WIRES)
        return NULL;
    struct pr_ctl_wire *w = &v->wires[v->nwires++];
    memcpy(w->name, name, sizeof(name));
    w->groups = w->bytes_sent = 0;
    return w;
}

/* A node's wire encodings: its default, and groups and bytes by each. */
static void build_wires(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    for (size_t k = 0; k < m->n; k++) {
        const struct pr_prom_sample *s = &m->s[k];
        int is_default = !strcmp(s->name, "preduce_node_wire_default");
        int groups = !strcmp(s->name, "preduce_node_wire_groups_total");
        if (!is_default && !groups &&
            strcmp(s->name, "preduce_node_wire_bytes_sent_total") != 0)
            continue;
        struct pr_ctl_wire *w = wire_of(s, v);
        if (!w)
            continue;
        if (is_default && s->value == 1)
            memcpy(v->wire_default, w->name, sizeof(w->name));
        else if (groups)
            w->groups = s->value;
        else if (!is_default)
            w->bytes_sent = s->value;
    }
}

static void build_node(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    v->sched_up = get(m, "preduce_node_scheduler_up");
    v->trainers = get(m, "preduce_node_trainers");
    v->reduces_ok =
        pr_promtext_get(m, "preduce_node_reduces_total", "status", "ok");
    v->reduces_failed =
        pr_promtext_get(m, "preduce_node_reduces_total", "status", "failed");
    v->reduce_sum_s = get(m, "preduce_node_reduce_seconds_sum");
    v->reduce_count = get(m, "preduce_node_reduce_seconds_count");
    v->groups_ok =
        pr_promtext_get(m, "preduce_node_groups_total", "status", "ok");
    v->groups_failed =
        pr_promtext_get(m, "preduce_node_groups_total", "status", "failed");
    v->groups_running = get(m, "preduce_node_groups_running");
    v->links_up = get(m, "preduce_node_links_up");
    v->rdma = get(m, "preduce_node_rdma");
    static const char *const xports[PR_CTL_XPORTS] = {"tcp", "rdma"};
    for (size_t k = 0; k < m->n; k++) {
        char t[16], d[16];
        if (strcmp(m->s[k].name, "preduce_node_bytes_total") != 0 ||
            pr_promtext_label(&m->s[k], "transport", t, sizeof(t)) < 0 ||
            pr_promtext_label(&m->s[k], "direction", d, sizeof(d)) < 0)
            continue;
        for (int i = 0; i < PR_CTL_XPORTS; i++)
            if (!strcmp(t, xports[i]))
                v->bytes[i][strcmp(d, "sent") ? PR_CTL_RECEIVED : PR_CTL_SENT] =
                    m->s[k].value;
    }
    build_wires(m, v);
}

/* A scheduler's jobs: a row per preduce_sched_job_info, then figures. */
static int build_jobs(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    size_t n = 0;
    for (size_t k = 0; k < m->n; k++)
        n += !strcmp(m->s[k].name, "preduce_sched_job_info");
    v->jobs = calloc(n ? n : 1, sizeof(*v->jobs));
    if (!v->jobs)
        return -ENOMEM;
    for (size_t k = 0; k < m->n; k++) {
        const struct pr_prom_sample *s = &m->s[k];
        struct pr_ctl_job *j = &v->jobs[v->njobs];
        if (strcmp(s->name, "preduce_sched_job_info") != 0 ||
            pr_promtext_label(s, "job", j->name, sizeof(j->name)) < 0)
            continue;
        if (pr_promtext_label(s, "policy", j->policy, sizeof(j->policy)) < 0)
            strcpy(j->policy, "?");
        if (pr_promtext_label(s, "key", j->key, sizeof(j->key)) < 0)
            strcpy(j->key, "?");
        j->id = label_num(s, "id");
        j->workers =
            pr_promtext_get(m, "preduce_sched_job_workers", "job", j->name);
        j->queued =
            pr_promtext_get(m, "preduce_sched_job_queued", "job", j->name);
        j->groups = pr_promtext_get(m, "preduce_sched_job_groups_total", "job",
                                    j->name);
        v->njobs++;
    }
    qsort(v->jobs, v->njobs, sizeof(*v->jobs), cmp_job);
    return 0;
}

void pr_ctl_view_keep_job(struct pr_ctl_view *v, const char *job)
{
    size_t w = 0;
    for (size_t k = 0; k < v->nworkers; k++)
        if (!strcmp(v->workers[k].job, job))
            v->workers[w++] = v->workers[k];
    v->nworkers = w;
    w = 0;
    for (size_t k = 0; k < v->njobs; k++)
        if (!strcmp(v->jobs[k].name, job))
            v->jobs[w++] = v->jobs[k];
    v->njobs = w;
}

static void build_sched(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    v->nodes = get(m, "preduce_sched_nodes");
    v->live = get(m, "preduce_sched_workers_live");
    v->queued = get(m, "preduce_sched_workers_queued");
    v->groups = get(m, "preduce_sched_groups_total");
    v->members = get(m, "preduce_sched_member_updates_total");
}

int pr_ctl_view_build(const struct pr_promtext *m, struct pr_ctl_view *v)
{
    memset(v, 0, sizeof(*v));
    const struct pr_prom_sample *info =
        pr_promtext_find(m, "preduce_info", NULL, NULL);
    char role[32] = "";
    if (info)
        pr_promtext_label(info, "role", role, sizeof(role));
    if (!strcmp(role, "node"))
        v->role = PR_CTL_NODE;
    else if (!strcmp(role, "scheduler"))
        v->role = PR_CTL_SCHED;
    else
        return -ENOENT;
    if (pr_promtext_label(info, "name", v->name, sizeof(v->name)) < 0)
        strcpy(v->name, "?");
    if (pr_promtext_label(info, "job", v->job, sizeof(v->job)) < 0)
        strcpy(v->job, "?");
    v->node_id = label_num(info, "node_id");
    if (v->role == PR_CTL_NODE)
        build_node(m, v);
    else
        build_sched(m, v);
    int rc = build_workers(m, v);
    if (rc == 0)
        rc = build_jobs(m, v);
    return rc < 0 ? rc : build_sizes(m, v);
}

void pr_ctl_view_free(struct pr_ctl_view *v)
{
    free(v->workers);
    free(v->jobs);
    free(v->sizes);
    v->workers = NULL;
    v->jobs = NULL;
    v->sizes = NULL;
}
