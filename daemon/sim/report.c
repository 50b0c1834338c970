/* SPDX-License-Identifier: MIT */
/*
 * Plain-text reports of simulation results (sim.h). Only formatting here:
 * every figure comes from struct pr_sim_result.
 */
#include "daemon/sim/sim.h"
#include "daemon/base/conf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Up to this many distinct sizes the histogram lists each one. */
#define HIST_EXACT 16
/* Up to this many workers the update rate is listed per worker. */
#define RATES_LISTED 16

static double pct(uint64_t a, uint64_t b)
{
    return b > 0 ? 100.0 * (double)a / (double)b : NAN;
}

static double mean_wait_ms(const struct pr_sim_result *r)
{
    return r->members > 0 ? (double)r->wait_us / (double)r->members / 1000.0
                          : 0.0;
}

static void print_hist(FILE *out, const struct pr_sim_result *r)
{
    uint32_t distinct = 0;

    for (uint32_t k = 1; k <= r->workers; k++) {
        distinct += r->hist[k] > 0;
    }
    fprintf(out, "  group sizes       ");
    if (distinct <= HIST_EXACT) {
        for (uint32_t k = 1; k <= r->workers; k++) {
            if (r->hist[k] > 0) {
                fprintf(out, " %u:%.1f%%", k, pct(r->hist[k], r->groups));
            }
        }
        fprintf(out, "\n");
        return;
    }
    /* Power-of-two buckets: [1], [2, 3], [4, 7], ... */
    for (uint32_t lo = 1; lo <= r->workers; lo *= 2) {
        uint32_t hi = lo * 2 - 1 < r->workers ? lo * 2 - 1 : r->workers;
        uint64_t cnt = 0;

        for (uint32_t k = lo; k <= hi; k++) {
            cnt += r->hist[k];
        }
        if (cnt > 0) {
            fprintf(out, " %u-%u:%.1f%%", lo, hi, pct(cnt, r->groups));
        }
    }
    fprintf(out, "\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return (x > y) - (x < y);
}

static void print_rates(FILE *out, const struct pr_sim_result *r)
{
    double *v = malloc((size_t)r->workers * sizeof(*v));

    if (v == NULL) {
        return;
    }
    for (uint32_t i = 0; i < r->workers; i++) {
        v[i] = pr_sim_rate(r, i);
    }
    if (r->workers <= RATES_LISTED) {
        fprintf(out, "  update rate (/s) ");
        for (uint32_t i = 0; i < r->workers; i++) {
            fprintf(out, " w%u:%.2f", i, v[i]);
        }
        fprintf(out, "\n  mean group size   ");
        for (uint32_t i = 0; i < r->workers; i++) {
            fprintf(out, " w%u:%.2f", i,
                    r->updates[i] > 0
                        ? (double)r->sizes[i] / (double)r->updates[i]
                        : 0.0);
        }
        fprintf(out, "\n");
    }
    qsort(v, r->workers, sizeof(*v), cmp_double);
    fprintf(out, "  update rate (/s)   min %.2f  median %.2f  max %.2f\n", v[0],
            v[r->workers / 2], v[r->workers - 1]);
    free(v);
}

void pr_sim_print_run(FILE *out, const char *label, const struct pr_sim_conf *c,
                      const struct pr_sim_result *r)
{
    const struct pr_sched_params *p = &c->sched;

    fprintf(out, "== %s: %s/%s, N %u, B %u, %.1f s simulated%s\n", label,
            pr_policy_name(p->policy), pr_weighting_name(p->weighting),
            c->workers, p->isolation_bound, r->sim_s,
            r->stalled ? " (STALLED)" : "");
    fprintf(out, "  groups formed      %llu  (mean size %.2f, %llu ready)\n",
            (unsigned long long)r->groups,
            r->groups > 0 ? (double)r->members / (double)r->groups : 0.0,
            (unsigned long long)r->ready_events);
    print_hist(out, r);
    fprintf(out, "  wait for a group   %.2f ms per update (READY to formed)",
            mean_wait_ms(r));
    if (p->policy == PR_POLICY_DYNAMIC) {
        fprintf(out, "; adapted window %.3f ms at the end", r->window_ms);
    }
    fprintf(out, "\n");
    if (r->slow > 0 && r->slow < r->workers) {
        fprintf(out,
                "  fast+slow groups   %.1f%% of groups of 2+ (%u slow: "
                "speed factor > %.2f x the fastest)\n",
                pct(r->mixed, r->multi), r->slow, r->slow_factor);
    } else {
        fprintf(out, "  fast+slow groups   n/a (no persistently slow "
                     "workers)\n");
    }
    fprintf(out,
            "  connected windows  %llu/%llu = %.1f%% (B %u rounds; length "
            "mean %.2f max %.2f rounds; core: %llu/%llu)\n",
            (unsigned long long)r->windows_connected,
            (unsigned long long)r->windows,
            pct(r->windows_connected, r->windows), r->window_rounds,
            r->windows > 0
                ? (double)r->window_updates / ((double)r->windows * r->workers)
                : 0.0,
            (double)r->window_max_updates / r->workers,
            (unsigned long long)r->core.windows_connected,
            (unsigned long long)r->core.windows_checked);
    fprintf(out,
            "  strict windows     %llu/%llu = %.1f%% (exactly %u rounds)\n",
            (unsigned long long)r->strict_connected,
            (unsigned long long)r->strict_windows,
            pct(r->strict_connected, r->strict_windows), r->window_rounds);
    if (isnan(r->gap)) {
        fprintf(out, "  spectral gap       n/a (N > %u)\n", PR_SIM_GAP_MAX);
    } else {
        fprintf(out,
                "  spectral gap       %.4f (1 - |lambda_2| of the mean "
                "group-averaging matrix)\n",
                r->gap);
    }
    print_rates(out, r);
    if (r->core_s > 0.0) {
        fprintf(out,
                "  scheduler core     %.0f ready/s, %.0f decisions/s (%.3f s "
                "real in the core, %.3f s run)\n",
                (double)r->ready_events / r->core_s,
                (double)r->groups / r->core_s, r->core_s, r->wall_s);
    }
    if (r->evals > 0) {
        fprintf(out, "  model              loss %.4f -> %.4f; target ",
                r->loss0, r->loss_final);
        if (c->target_loss <= 0.0) {
            fprintf(out, "none\n");
        } else if (r->target_s >= 0.0) {
            fprintf(out, "%.4f reached at %.2f s (the mean replica loss); ",
                    c->target_loss, r->target_s);
            if (r->every_s >= 0.0) {
                fprintf(out, "by every replica at %.2f s\n", r->every_s);
            } else {
                fprintf(out, "not by every replica (worst %.4f)\n",
                        r->loss_worst);
            }
        } else {
            fprintf(out, "%.4f not reached\n", c->target_loss);
        }
    }
}

void pr_sim_print_table_head(FILE *out, int with_model)
{
    fprintf(out, "%-20s %7s %5s %7s %6s %6s %7s %12s", "policy/weighting",
            "groups", "size", "wait_ms", "mixed%", "conn%", "gap",
            "rate min-max");
    if (with_model) {
        fprintf(out, " %8s %8s %8s", "target_s", "speedup", "every_s");
    }
    fprintf(out, "\n");
}

void pr_sim_print_table_row(FILE *out, const char *label,
                            const struct pr_sim_result *r, int with_model,
                            double baseline_s)
{
    double lo = INFINITY;
    double hi = 0.0;
    char rate[32];

    for (uint32_t i = 0; i < r->workers; i++) {
        double v = pr_sim_rate(r, i);

        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    snprintf(rate, sizeof(rate), "%.2f-%.2f", lo, hi);
    fprintf(out, "%-20s %7llu %5.2f %7.2f", label,
            (unsigned long long)r->groups,
            r->groups > 0 ? (double)r->members / (double)r->groups : 0.0,
            mean_wait_ms(r));
    if (r->slow > 0 && r->slow < r->workers && r->multi > 0) {
        fprintf(out, " %6.1f", pct(r->mixed, r->multi));
    } else {
        fprintf(out, " %6s", "-");
    }
    if (r->windows > 0) {
        fprintf(out, " %6.1f", pct(r->windows_connected, r->windows));
    } else {
        fprintf(out, " %6s", "-");
    }
    if (isnan(r->gap)) {
        fprintf(out, " %7s", "n/a");
    } else {
        fprintf(out, " %7.4f", r->gap);
    }
    fprintf(out, " %12s", rate);
    if (with_model) {
        if (r->target_s >= 0.0) {
            fprintf(out, " %8.2f", r->target_s);
            if (baseline_s > 0.0) {
                fprintf(out, " %7.2fx", baseline_s / r->target_s);
            } else {
                fprintf(out, " %8s", "-");
            }
        } else {
            fprintf(out, " %8s %8s", "never", "-");
        }
        if (r->every_s >= 0.0) {
            fprintf(out, " %8.2f", r->every_s);
        } else {
            fprintf(out, " %8s", "never");
        }
    }
    fprintf(out, "\n");
}
