/* SPDX-License-Identifier: MIT */
/*
 * Preset runs (scenario.h): calibration, the side-by-side comparison, the
 * scale run and the acceptance scenarios. All figures come from
 * pr_sim_run(); this file only chooses configurations and prints.
 */
#include "daemon/sim/scenario.h"
#include "daemon/base/conf.h"
#include "daemon/sim/model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Acceptance scenario 3: its simulated length and the windows it needs. */
#define A3_DURATION_S  600.0
#define A3_MIN_WINDOWS 20
/* Acceptance scenario 4: the longest run (allreduce needs about 20 s). */
#define A4_DURATION_S 120.0
/* Acceptance scenario 5 and the figure it must reach. */
#define A5_WORKERS      1024u
#define A5_DURATION_S   20.0
#define A5_READY_PER_S  200000.0
#define A4_SPEEDUP_SLOW 1.5
#define A4_HOMOG_LIMIT  1.05
/* Times closer than this (relative) are reported equal. */
#define EQUAL_TOL 0.005

static const struct {
    int policy;
    int weighting;
    const char *label;
} rows[PR_SIM_ROWS] = {
    {PR_POLICY_ALLREDUCE, PR_WEIGHT_UNIFORM, "allreduce"},
    {PR_POLICY_CONSTANT, PR_WEIGHT_UNIFORM, "constant/uniform"},
    {PR_POLICY_CONSTANT, PR_WEIGHT_STALENESS, "constant/staleness"},
    {PR_POLICY_DYNAMIC, PR_WEIGHT_UNIFORM, "dynamic/uniform"},
    {PR_POLICY_DYNAMIC, PR_WEIGHT_STALENESS, "dynamic/staleness"},
};

static const char *verdict(int ok)
{
    return ok ? "PASS" : "FAIL";
}

int pr_sim_calibrate(FILE *out, struct pr_sim_model *m, uint32_t workers,
                     uint32_t steps, double frac, uint64_t seed, double *target)
{
    double l0;
    double ls;
    int rc =
        pr_sim_model_calibrate(m, workers, steps, frac, seed, target, &l0, &ls);

    if (rc == 0 && out != NULL) {
        fprintf(out,
                "target loss %.4f: %.0f%% of the way from %.4f (start) to "
                "%.4f (homogeneous allreduce, N %u, after %u rounds)\n",
                *target, frac * 100.0, l0, ls, workers, steps);
    }
    return rc;
}

int pr_sim_compare(FILE *out, const struct pr_sim_conf *base, int verbose,
                   double *target_s)
{
    struct pr_sim_conf c[PR_SIM_ROWS];
    struct pr_sim_result r[PR_SIM_ROWS];
    int with_model = base->model != NULL;
    int done = 0;
    int rc = 0;

    for (; done < PR_SIM_ROWS; done++) {
        c[done] = *base;
        c[done].sched.policy = rows[done].policy;
        c[done].sched.weighting = rows[done].weighting;
        rc = pr_sim_run(&c[done], &r[done]);
        if (rc < 0) {
            break;
        }
        if (target_s != NULL) {
            target_s[done] = r[done].target_s;
        }
    }
    if (rc == 0 && out != NULL) {
        pr_sim_print_table_head(out, with_model);
        for (int i = 0; i < PR_SIM_ROWS; i++) {
            pr_sim_print_table_row(out, rows[i].label, &r[i], with_model,
                                   r[PR_SIM_ALLREDUCE].target_s);
        }
        for (int i = 0; verbose && i < PR_SIM_ROWS; i++) {
            pr_sim_print_run(out, rows[i].label, &c[i], &r[i]);
        }
    }
    for (int i = 0; i < done; i++) {
        pr_sim_result_fini(&r[i]);
    }
    return rc;
}

int pr_sim_scale(FILE *out, const struct pr_sim_conf *base,
                 double *min_ready_per_s)
{
    double lo = INFINITY;

    fprintf(out,
            "scheduler at scale: N %u, %.0f s simulated, %.0f ms steps, "
            "jitter %.0f%%, B %u (real time measured around every core "
            "call, so it includes the clock reads)\n",
            base->workers, base->duration_s, base->base_ms,
            base->jitter * 100.0, base->sched.isolation_bound);
    fprintf(out, "%-20s %9s %8s %9s %8s %12s %12s %7s\n", "policy/weighting",
            "groups", "size", "ready", "core_s", "ready/s", "decisions/s",
            "run_s");
    for (int i = 0; i < PR_SIM_ROWS; i++) {
        struct pr_sim_conf c = *base;
        struct pr_sim_result r;
        int rc;

        c.model = NULL;
        c.sched.policy = rows[i].policy;
        c.sched.weighting = rows[i].weighting;
        rc = pr_sim_run(&c, &r);
        if (rc < 0) {
            return rc;
        }
        double ready = r.core_s > 0.0 ? (double)r.ready_events / r.core_s : 0.0;

        lo = ready < lo ? ready : lo;
        fprintf(out, "%-20s %9llu %8.1f %9llu %8.3f %12.0f %12.0f %7.2f\n",
                rows[i].label, (unsigned long long)r.groups,
                r.groups > 0 ? (double)r.members / (double)r.groups : 0.0,
                (unsigned long long)r.ready_events, r.core_s, ready,
                r.core_s > 0.0 ? (double)r.groups / r.core_s : 0.0, r.wall_s);
        pr_sim_result_fini(&r);
    }
    if (min_ready_per_s != NULL) {
        *min_ready_per_s = lo;
    }
    return 0;
}

/* Acceptance 3: one policy, generator off then on. */
static int a3_case(FILE *out, int policy, const double *speed, uint64_t seed,
                   int judge)
{
    struct pr_sim_result r[2];

    for (int on = 0; on < 2; on++) {
        struct pr_sim_conf c;
        int rc;

        pr_sim_conf_defaults(&c, policy, 8);
        c.sched.group_size = 4;
        c.sched.group_max = 4;
        c.sched.isolation_bound = on ? 10 : 0;
        c.window_rounds = 10;
        c.speed = speed;
        c.jitter = 0.05;
        c.duration_s = A3_DURATION_S;
        c.seed = seed;
        rc = pr_sim_run(&c, &r[on]);
        if (rc < 0) {
            if (on) {
                pr_sim_result_fini(&r[0]);
            }
            return rc;
        }
    }
    fprintf(out, "  %s (P%s 4):\n", pr_policy_name(policy),
            policy == PR_POLICY_CONSTANT ? " =" : "_max =");
    for (int on = 0; on < 2; on++) {
        const struct pr_sim_result *x = &r[on];
        double frac = x->windows > 0
                          ? (double)x->windows_connected / (double)x->windows
                          : 0.0;

        fprintf(out,
                "    generator %-12s connected windows %4llu/%-4llu = "
                "%5.1f%%  (length mean %.1f max %.1f rounds; core %llu/%llu; "
                "strict 10-round windows %.1f%%; fast+slow groups %.1f%%)\n",
                on ? "on (B = 10)" : "off",
                (unsigned long long)x->windows_connected,
                (unsigned long long)x->windows, 100.0 * frac,
                x->windows > 0
                    ? (double)x->window_updates / (8.0 * (double)x->windows)
                    : 0.0,
                (double)x->window_max_updates / 8.0,
                (unsigned long long)x->core.windows_connected,
                (unsigned long long)x->core.windows_checked,
                x->strict_windows > 0 ? 100.0 * (double)x->strict_connected /
                                            (double)x->strict_windows
                                      : 0.0,
                x->multi > 0 ? 100.0 * (double)x->mixed / (double)x->multi
                             : 0.0);
    }
    if (judge) {
        int ok = r[1].windows >= A3_MIN_WINDOWS &&
                 r[1].windows_connected == r[1].windows &&
                 r[1].windows == r[1].core.windows_checked;

        fprintf(out,
                "    %s: with the generator on every one of %llu windows "
                "connects (needs >= %d windows, all connected, matching "
                "the core's count)\n",
                verdict(ok), (unsigned long long)r[1].windows, A3_MIN_WINDOWS);
        fprintf(out,
                "    (figure) with it off %.1f%% of windows connect (paper: "
                "fewer than a third)\n",
                r[0].windows > 0 ? 100.0 * (double)r[0].windows_connected /
                                       (double)r[0].windows
                                 : 0.0);
    }
    pr_sim_result_fini(&r[0]);
    pr_sim_result_fini(&r[1]);
    return 0;
}

static int acceptance3(FILE *out, uint64_t seed)
{
    static const double factors[] = {2.5, 2.0, 3.0};
    double speed[8];
    int rc = 0;

    fprintf(out,
            "\n[3] connectivity: N 8, half the workers slower, +-5%% "
            "jitter, %.0f s simulated, windows of 10 rounds (80 "
            "member-updates)\n",
            A3_DURATION_S);
    for (size_t f = 0; rc == 0 && f < sizeof(factors) / sizeof(*factors); f++) {
        for (int i = 0; i < 8; i++) {
            speed[i] = i >= 4 ? factors[f] : 1.0;
        }
        fprintf(out, " half %.1fx slower%s\n", factors[f],
                f == 0 ? " (the acceptance scenario)" : " (for comparison)");
        rc = a3_case(out, PR_POLICY_CONSTANT, speed, seed, f == 0);
        if (rc == 0 && f == 0) {
            rc = a3_case(out, PR_POLICY_DYNAMIC, speed, seed, 0);
        }
    }
    return rc;
}

struct a4_stats {
    double t[PR_SIM_ROWS][2]; /* first seed's times, per profile */
    double sum[PR_SIM_ROWS][2];
    double speed_min[2];
    double speed_max[2];
    uint32_t missed[2]; /* allreduce or dynamic runs that never did */
};

static int acceptance4(FILE *out, uint64_t seed, uint32_t seeds)
{
    static const char *const names[2] = {"one worker 3x slower", "homogeneous"};
    struct pr_sim_model_params mp;
    struct pr_sim_model *m;
    struct a4_stats a;
    double target;
    double speed[2][8];
    int rc = 0;

    memset(&a, 0, sizeof(a));
    pr_sim_model_defaults(&mp);
    mp.seed = seed;
    m = pr_sim_model_create(&mp);
    if (m == NULL) {
        return -ENOMEM;
    }
    fprintf(out,
            "\n[4] time to target loss: N 8, softmax regression (%u classes, "
            "%u features, batch %u, lr %.2f), 100 ms steps, +-5%% jitter, "
            "constant P = 4, dynamic and B at the daemon's defaults\n  ",
            mp.classes, mp.features, mp.batch, mp.lr);
    rc = pr_sim_calibrate(out, m, 8, PR_SIM_CALIB_STEPS, PR_SIM_CALIB_FRAC,
                          seed, &target);
    for (int p = 0; p < 2; p++) {
        a.speed_min[p] = INFINITY;
        for (int i = 0; i < 8; i++) {
            speed[p][i] = p == 0 && i == 7 ? 3.0 : 1.0;
        }
    }
    for (uint32_t s = 0; rc == 0 && s < seeds; s++) {
        for (int p = 0; rc == 0 && p < 2; p++) {
            struct pr_sim_conf c;
            double t[PR_SIM_ROWS];

            pr_sim_conf_defaults(&c, PR_POLICY_ALLREDUCE, 8);
            c.sched.group_size = 4;
            c.speed = speed[p];
            c.jitter = 0.05;
            c.duration_s = A4_DURATION_S;
            c.seed = seed + s;
            c.model = m;
            c.target_loss = target;
            c.stop_at_target = 1;
            if (s == 0) {
                fprintf(out, "  %s (seed %llu):\n", names[p],
                        (unsigned long long)c.seed);
            }
            rc = pr_sim_compare(s == 0 ? out : NULL, &c, 0, t);
            for (int i = 0; rc == 0 && i < PR_SIM_ROWS; i++) {
                if (t[i] < 0.0) {
                    /* Counted at the cap; a miss fails the verdicts. */
                    a.missed[p] +=
                        i == PR_SIM_ALLREDUCE || i == PR_SIM_DYNAMIC_UNIFORM;
                    t[i] = A4_DURATION_S;
                }
                a.sum[i][p] += t[i];
                if (s == 0) {
                    a.t[i][p] = t[i];
                }
            }
            double sp = t[PR_SIM_ALLREDUCE] / t[PR_SIM_DYNAMIC_UNIFORM];

            a.speed_min[p] = sp < a.speed_min[p] ? sp : a.speed_min[p];
            a.speed_max[p] = sp > a.speed_max[p] ? sp : a.speed_max[p];
        }
    }
    pr_sim_model_destroy(m);
    if (rc < 0) {
        return rc;
    }
    double slow = a.t[PR_SIM_ALLREDUCE][0] / a.t[PR_SIM_DYNAMIC_UNIFORM][0];
    double homog = a.t[PR_SIM_DYNAMIC_UNIFORM][1] / a.t[PR_SIM_ALLREDUCE][1];

    fprintf(out,
            "  %s: one 3x slow: dynamic reaches the target %.2fx sooner "
            "than allreduce (needs >= %.1fx); seeds: %u, range %.2fx .. "
            "%.2fx\n",
            verdict(slow >= A4_SPEEDUP_SLOW &&
                    a.speed_min[0] >= A4_SPEEDUP_SLOW && a.missed[0] == 0),
            slow, A4_SPEEDUP_SLOW, seeds, a.speed_min[0], a.speed_max[0]);
    fprintf(out,
            "  %s: homogeneous: dynamic takes %.3fx allreduce's time (needs "
            "<= %.2fx); seeds: %u, range %.3fx .. %.3fx\n",
            verdict(homog <= A4_HOMOG_LIMIT &&
                    1.0 / a.speed_min[1] <= A4_HOMOG_LIMIT && a.missed[1] == 0),
            homog, A4_HOMOG_LIMIT, seeds, 1.0 / a.speed_max[1],
            1.0 / a.speed_min[1]);
    fprintf(out, "  weighting, mean time to target over %u seeds (s):\n",
            seeds);
    for (int p = 0; p < 2; p++) {
        for (int pol = 0; pol < 2; pol++) {
            int u = pol == 0 ? PR_SIM_CONSTANT_UNIFORM : PR_SIM_DYNAMIC_UNIFORM;
            double tu = a.sum[u][p] / seeds;
            double ts = a.sum[u + 1][p] / seeds;

            fprintf(out,
                    "    %-21s %-9s uniform %6.2f  staleness %6.2f  -> %s "
                    "(%.3fx)\n",
                    names[p],
                    pr_policy_name(pol == 0 ? PR_POLICY_CONSTANT
                                            : PR_POLICY_DYNAMIC),
                    tu, ts,
                    fabs(ts / tu - 1.0) < EQUAL_TOL ? "equal"
                    : ts < tu                       ? "staleness faster"
                                                    : "uniform faster",
                    ts / tu);
        }
    }
    return 0;
}

static int acceptance5(FILE *out, uint64_t seed)
{
    struct pr_sim_conf c;
    double ready;
    int rc;

    fprintf(out, "\n[5] scale: ");
    pr_sim_conf_defaults(&c, PR_POLICY_DYNAMIC, A5_WORKERS);
    c.sched.group_size = 4;
    c.jitter = 0.05;
    c.duration_s = A5_DURATION_S;
    c.seed = seed;
    rc = pr_sim_scale(out, &c, &ready);
    if (rc < 0) {
        return rc;
    }
    fprintf(out,
            "  %s: at %u workers the slowest policy takes %.0f ready "
            "events/s in the core (needs >= %.0f; tests/bench/bench_sched.c "
            "has the benchmark with its anchor)\n",
            verdict(ready >= A5_READY_PER_S), A5_WORKERS, ready,
            A5_READY_PER_S);
    return 0;
}

int pr_sim_acceptance(FILE *out, uint64_t seed, uint32_t seeds)
{
    int rc;

    if (seeds == 0) {
        return -EINVAL;
    }
    fprintf(out, "preduce-sim acceptance scenarios (seed %llu)\n",
            (unsigned long long)seed);
    rc = acceptance3(out, seed);
    if (rc == 0) {
        rc = acceptance4(out, seed, seeds);
    }
    if (rc == 0) {
        rc = acceptance5(out, seed);
    }
    return rc;
}
