/* SPDX-License-Identifier: MIT */
/*
 * The tables: one line per figure, then a row per worker in rank order.
 * A figure the daemon did not export shows as "-".
 */
#include "daemon/ctl/table.h"

#include <math.h>
#include <string.h>

/* x with `decimals` decimals times scale into out, or "-" for NAN. */
static const char *num(double x, int decimals, double scale, char *out,
                       size_t len)
{
    if (isnan(x))
        snprintf(out, len, "-");
    else
        snprintf(out, len, "%.*f", decimals, x * scale);
    return out;
}

/*
 * s with each control character as '?', into buf[128] (names are at most
 * 127 bytes, view.h): a daemon cannot send a terminal escape through.
 */
static const char *shown(const char *s, char *buf)
{
    size_t i = 0;
    for (; s[i] && i + 1 < 128; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

/* A whole number into buf[32], or "-". */
#define N(x, buf) num((x), 0, 1, (buf), sizeof(buf))

static const char *human_bytes(double b, char *out, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
    return out;
}

/* The widest worker name, at least min. */
static int name_width(const struct pr_ctl_view *v, int min)
{
    int w = min;
    for (size_t k = 0; k < v->nworkers; k++)
        if ((int)strlen(v->workers[k].name) > w)
            w = (int)strlen(v->workers[k].name);
    return w;
}

/* The widest job name of the workers, at least min. */
static int job_width(const struct pr_ctl_view *v, int min)
{
    int w = min;
    for (size_t k = 0; k < v->nworkers; k++)
        if ((int)strlen(v->workers[k].job) > w)
            w = (int)strlen(v->workers[k].job);
    return w;
}

/* A node's trainers: name, job, rank, version. */
static void trainers(FILE *f, const struct pr_ctl_view *v)
{
    int w = name_width(v, 7), jw = job_width(v, 3);
    char a[32], b[32], s[128], js[128];
    if (v->nworkers == 0)
        fprintf(f, "  no trainers\n");
    else
        fprintf(f, "  %-*s  %-*s  %5s  %8s\n", w, "trainer", jw, "job", "rank",
                "version");
    for (size_t k = 0; k < v->nworkers; k++) {
        const struct pr_ctl_worker *t = &v->workers[k];
        fprintf(f, "  %-*s  %-*s  %5s  %8s\n", w, shown(t->name, s), jw,
                shown(t->job, js), num(t->rank, 0, 1, a, sizeof(a)),
                num(t->version, 0, 1, b, sizeof(b)));
    }
}

/* A scheduler's workers: a row each, by job, with its pace. */
static void workers(FILE *f, const struct pr_ctl_view *v)
{
    int w = name_width(v, 6), jw = job_width(v, 3);
    if (v->nworkers == 0)
        fprintf(f, "  no workers\n");
    else
        fprintf(f, "  %-*s  %-*s  %5s  %4s  %8s  %5s  %8s  %9s  %8s\n", jw,
                "job", w, "worker", "rank", "node", "version", "stale", "steps",
                "updates/s", "step ms");
    for (size_t k = 0; k < v->nworkers; k++) {
        const struct pr_ctl_worker *x = &v->workers[k];
        char c[7][32], s[128], js[128];
        fprintf(f, "  %-*s  %-*s  %5s  %4s  %8s  %5s  %8s  %9s  %8s%s\n", jw,
                shown(x->job, js), w, shown(x->name, s),
                num(x->rank, 0, 1, c[0], sizeof(c[0])),
                num(x->node, 0, 1, c[1], sizeof(c[1])),
                num(x->version, 0, 1, c[2], sizeof(c[2])),
                num(x->staleness, 0, 1, c[3], sizeof(c[3])),
                num(x->steps, 0, 1, c[4], sizeof(c[4])),
                num(x->rate, 1, 1, c[5], sizeof(c[5])),
                num(x->step_s, 1, 1000, c[6], sizeof(c[6])),
                x->straggler == 1 ? "  straggler" : "");
    }
}

/* The daemon's first line: who it is. */
static void title(FILE *f, const struct pr_ctl_view *v, const char *addr)
{
    char id[32], s[128], j[128];
    if (v->role == PR_CTL_NODE)
        fprintf(f, "node %s (job %s, node id %s) at %s\n", shown(v->name, s),
                shown(v->job, j), isnan(v->node_id) ? "?" : N(v->node_id, id),
                addr);
    else
        fprintf(f, "scheduler (job %s) at %s\n", shown(v->job, j), addr);
}

static void node(FILE *f, const struct pr_ctl_view *v)
{
    char b[4][32];
    fprintf(f, "  scheduler link   %s\n", v->sched_up == 1 ? "up" : "down");
    fprintf(f, "  trainers         %s\n", N(v->trainers, b[0]));
    fprintf(f, "  reduces          %s ok, %s failed", N(v->reduces_ok, b[0]),
            N(v->reduces_failed, b[1]));
    if (v->reduce_count > 0)
        fprintf(f, ", mean %.2f ms", v->reduce_sum_s / v->reduce_count * 1000);
    fprintf(f, "\n  groups           %s ok, %s failed, %s running\n",
            N(v->groups_ok, b[0]), N(v->groups_failed, b[1]),
            N(v->groups_running, b[2]));
    static const char *const xports[PR_CTL_XPORTS] = {"tcp", "rdma"};
    for (int i = 0; i < PR_CTL_XPORTS; i++)
        fprintf(f, "  bytes %-4s       %s sent, %s received\n", xports[i],
                human_bytes(v->bytes[i][PR_CTL_SENT], b[0], sizeof(b[0])),
                human_bytes(v->bytes[i][PR_CTL_RECEIVED], b[1], sizeof(b[1])));
    if (v->wire_default[0] || v->nwires) {
        char s[128];
        fprintf(f, "  wire             %s by default",
                shown(v->wire_default[0] ? v->wire_default : "?", s));
        for (size_t k = 0; k < v->nwires; k++)
            fprintf(f, "%s %s %s", k ? "," : "; sent",
                    shown(v->wires[k].name, s),
                    human_bytes(v->wires[k].bytes_sent, b[0], sizeof(b[0])));
        fprintf(f, "\n");
    }
    fprintf(f, "  peer links up    %s%s\n", N(v->links_up, b[0]),
            v->rdma == 1 ? " (RDMA device open)" : "");
    trainers(f, v);
}

/* "4: 47, 2: 3, 17-32: 1": groups by size. */
static void sizes(FILE *f, const struct pr_ctl_view *v)
{
    fprintf(f, "  group sizes     ");
    for (size_t k = 0; k < v->nsizes; k++) {
        const struct pr_ctl_sizes *s = &v->sizes[k];
        const char *sep = k ? ", " : " ";
        if (isinf(s->to))
            fprintf(f, "%s>%.0f: %.0f", sep, s->from - 1, s->groups);
        else if (s->to == s->from)
            fprintf(f, "%s%.0f: %.0f", sep, s->to, s->groups);
        else
            fprintf(f, "%s%.0f-%.0f: %.0f", sep, s->from, s->to, s->groups);
    }
    fprintf(f, "%s\n", v->nsizes ? "" : " none yet");
}

static void sched(FILE *f, const struct pr_ctl_view *v)
{
    char b[2][32], s[128];
    fprintf(f, "  nodes            %s\n", N(v->nodes, b[0]));
    fprintf(f, "  workers          %s live, %s waiting for a group\n",
            N(v->live, b[0]), N(v->queued, b[1]));
    fprintf(f, "  groups           %s formed", N(v->groups, b[0]));
    if (v->groups > 0)
        fprintf(f, ", mean size %.1f", v->members / v->groups);
    fprintf(f, "\n");
    sizes(f, v);
    fprintf(f, "  stragglers      ");
    int any = 0;
    for (size_t k = 0; k < v->nworkers; k++) {
        if (v->workers[k].straggler == 1) {
            fprintf(f, "%s%s", any ? ", " : " ", shown(v->workers[k].name, s));
            any = 1;
        }
    }
    fprintf(f, "%s\n", any ? "" : " none");
    workers(f, v);
}

void pr_ctl_table_status(FILE *f, const struct pr_ctl_view *v, const char *addr)
{
    title(f, v, addr);
    if (v->role == PR_CTL_NODE)
        node(f, v);
    else
        sched(f, v);
}

void pr_ctl_table_jobs(FILE *f, const struct pr_ctl_view *v, const char *addr)
{
    title(f, v, addr);
    if (v->role == PR_CTL_NODE) {
        fprintf(f, "  a node daemon: its scheduler lists the jobs\n");
        return;
    }
    if (v->njobs == 0) {
        fprintf(f, "  no jobs\n");
        return;
    }
    int w = 3;
    for (size_t k = 0; k < v->njobs; k++)
        if ((int)strlen(v->jobs[k].name) > w)
            w = (int)strlen(v->jobs[k].name);
    fprintf(f, "  %-*s  %5s  %-9s  %3s  %7s  %7s  %8s\n", w, "job", "id",
            "policy", "key", "workers", "waiting", "groups");
    for (size_t k = 0; k < v->njobs; k++) {
        const struct pr_ctl_job *x = &v->jobs[k];
        char c[4][32], s[128], p[128], q[128];
        fprintf(f, "  %-*s  %5s  %-9s  %3s  %7s  %7s  %8s\n", w,
                shown(x->name, s), N(x->id, c[0]), shown(x->policy, p),
                shown(x->key, q), N(x->workers, c[1]), N(x->queued, c[2]),
                N(x->groups, c[3]));
    }
}

void pr_ctl_table_workers(FILE *f, const struct pr_ctl_view *v,
                          const char *addr)
{
    title(f, v, addr);
    if (v->role == PR_CTL_NODE)
        trainers(f, v);
    else
        workers(f, v);
}
