/* SPDX-License-Identifier: MIT */
/*
 * preduce-sim: choose a scheduling policy for a cluster before running it.
 * Drives the real scheduler core with a simulated clock and a heterogeneity
 * profile (sim.h), optionally training a real replica per worker
 * (model.h), and prints plain-text tables. See --help.
 */
#include "daemon/base/conf.h"
#include "daemon/sim/model.h"
#include "daemon/sim/scenario.h"
#include "daemon/sim/sim.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLICY_ALL     -1
#define SCALE_WORKERS  1024u
#define SCALE_DURATION 20.0

struct opts {
    struct pr_sim_conf conf;
    int policy; /* enum pr_policy or POLICY_ALL */
    int workers_set;
    int duration_set;
    int model;
    double target_loss;
    double target_frac;
    uint32_t calib_steps;
    const char *slow;
    double slow_half;
    double slow_one;
    int scale;
    int acceptance;
    uint32_t seeds;
    int verbose;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: preduce-sim [options]\n"
            "Simulates the preduce scheduler (the real core, a simulated "
            "clock) on a\nheterogeneity profile and compares policies.\n"
            "\nscheduler (defaults: the daemon's, conf/preduced.conf):\n"
            "  --policy P            allreduce|constant|dynamic|all (all)\n"
            "  --group-size P        constant: P (2)\n"
            "  --group-min K         dynamic: window grows below (2)\n"
            "  --group-max K         dynamic: 0 = all workers (0)\n"
            "  --window-ms MS        dynamic: initial window (5)\n"
            "  --window-min-ms MS    (0.01)\n"
            "  --window-max-ms MS    (10)\n"
            "  --window-wait F       arrival-aware window, 0 = off (0.5)\n"
            "  --weighting W         uniform|staleness (uniform)\n"
            "  --alpha A             staleness decay (0.9)\n"
            "  --isolation-bound B   group generator window, 0 = off (10)\n"
            "  --gen-hold-ms MS      generator hold, 0 = default (0)\n"
            "\ncluster profile:\n"
            "  --workers N           (8; 1024 with --scale)\n"
            "  --base-ms MS          a speed-1 worker's step (100)\n"
            "  --slow I:F,I:F        worker I's step takes F x base\n"
            "  --slow-half F         the upper half of the ranks F x slower\n"
            "  --slow-one F          the last rank F x slower\n"
            "  --jitter J            step x (1 + U(-J, J)) (0.05)\n"
            "  --stall-prob P        per step, sleep --stall-ms (0)\n"
            "  --stall-ms MS         (100)\n"
            "  --comm-us US          a group of k reduces in US x 2(k-1)/k "
            "(1000)\n"
            "\nrun:\n"
            "  --duration-s S        simulated seconds (60)\n"
            "  --window-rounds B     window length for the statistics "
            "(B or 10)\n"
            "  --model / --no-model  train a replica per worker (on)\n"
            "  --target-loss L       instead of calibrating it\n"
            "  --target-frac F       calibration: fraction of the way (0.8)\n"
            "  --calib-steps S       calibration: allreduce rounds (200)\n"
            "  --eval-ms MS          evaluation period (base / 2)\n"
            "  --seed S              (1)\n"
            "  --verbose             details for every policy\n"
            "\nmodes:\n"
            "  --scale               decisions/s of every policy, no model\n"
            "  --acceptance          the issue's scenarios, PASS/FAIL\n"
            "  --seeds K             acceptance: seeds to average (5)\n");
}

static int bad(const char *opt, const char *val)
{
    fprintf(stderr, "preduce-sim: %s: invalid value '%s'\n", opt, val);
    return -EINVAL;
}

static int num(const char *opt, const char *s, double lo, double hi,
               double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        return bad(opt, s);
    }
    *out = v;
    return 0;
}

static int u32(const char *opt, const char *s, uint32_t lo, uint32_t hi,
               uint32_t *out)
{
    double v;

    if (num(opt, s, lo, hi, &v) < 0 || v != floor(v)) {
        return bad(opt, s);
    }
    *out = (uint32_t)v;
    return 0;
}

static int name(const char *opt, const char *s, const struct pr_name *t,
                int *out)
{
    return pr_name_parse(t, s, out) == 0 ? 0 : bad(opt, s);
}

enum {
    O_WORKERS = 256,
    O_POLICY,
    O_GSIZE,
    O_GMIN,
    O_GMAX,
    O_WIN,
    O_WINMIN,
    O_WINMAX,
    O_WINWAIT,
    O_WEIGHT,
    O_ALPHA,
    O_BOUND,
    O_HOLD,
    O_ROUNDS,
    O_BASE,
    O_SLOW,
    O_SLOWHALF,
    O_SLOWONE,
    O_JITTER,
    O_STALLP,
    O_STALLMS,
    O_COMM,
    O_DUR,
    O_MODEL,
    O_NOMODEL,
    O_TARGET,
    O_FRAC,
    O_CALIB,
    O_EVAL,
    O_SEED,
    O_SEEDS,
    O_SCALE,
    O_ACCEPT,
    O_VERBOSE,
    O_HELP,
};

static const struct option longopts[] = {
    {"workers", required_argument, NULL, O_WORKERS},
    {"policy", required_argument, NULL, O_POLICY},
    {"group-size", required_argument, NULL, O_GSIZE},
    {"group-min", required_argument, NULL, O_GMIN},
    {"group-max", required_argument, NULL, O_GMAX},
    {"window-ms", required_argument, NULL, O_WIN},
    {"window-min-ms", required_argument, NULL, O_WINMIN},
    {"window-max-ms", required_argument, NULL, O_WINMAX},
    {"window-wait", required_argument, NULL, O_WINWAIT},
    {"weighting", required_argument, NULL, O_WEIGHT},
    {"alpha", required_argument, NULL, O_ALPHA},
    {"isolation-bound", required_argument, NULL, O_BOUND},
    {"gen-hold-ms", required_argument, NULL, O_HOLD},
    {"window-rounds", required_argument, NULL, O_ROUNDS},
    {"base-ms", required_argument, NULL, O_BASE},
    {"slow", required_argument, NULL, O_SLOW},
    {"slow-half", required_argument, NULL, O_SLOWHALF},
    {"slow-one", required_argument, NULL, O_SLOWONE},
    {"jitter", required_argument, NULL, O_JITTER},
    {"stall-prob", required_argument, NULL, O_STALLP},
    {"stall-ms", required_argument, NULL, O_STALLMS},
    {"comm-us", required_argument, NULL, O_COMM},
    {"duration-s", required_argument, NULL, O_DUR},
    {"model", no_argument, NULL, O_MODEL},
    {"no-model", no_argument, NULL, O_NOMODEL},
    {"target-loss", required_argument, NULL, O_TARGET},
    {"target-frac", required_argument, NULL, O_FRAC},
    {"calib-steps", required_argument, NULL, O_CALIB},
    {"eval-ms", required_argument, NULL, O_EVAL},
    {"seed", required_argument, NULL, O_SEED},
    {"seeds", required_argument, NULL, O_SEEDS},
    {"scale", no_argument, NULL, O_SCALE},
    {"acceptance", no_argument, NULL, O_ACCEPT},
    {"verbose", no_argument, NULL, O_VERBOSE},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

static int parse_one(struct opts *o, int ch, const char *arg)
{
    struct pr_sim_conf *c = &o->conf;
    struct pr_sched_params *p = &c->sched;
    const char *opt = NULL;
    double v = 0.0;
    int w, rc;

    for (const struct option *lo = longopts; lo->name != NULL; lo++) {
        if (lo->val == ch) {
            opt = lo->name;
        }
    }
    switch (ch) {
    case O_WORKERS:
        o->workers_set = 1;
        return u32(opt, arg, 1, PR_SCHED_MAX, &c->workers);
    case O_POLICY:
        if (strcmp(arg, "all") == 0) {
            o->policy = POLICY_ALL;
            return 0;
        }
        return name(opt, arg, pr_policy_names, &o->policy);
    case O_GSIZE:
        return u32(opt, arg, 1, PR_SCHED_MAX, &p->group_size);
    case O_GMIN:
        return u32(opt, arg, 1, PR_SCHED_MAX, &p->group_min);
    case O_GMAX:
        return u32(opt, arg, 0, PR_SCHED_MAX, &p->group_max);
    case O_WIN:
        return num(opt, arg, 0.0, 1e6, &p->window_ms);
    case O_WINMIN:
        return num(opt, arg, 0.0, 1e6, &p->window_min_ms);
    case O_WINMAX:
        return num(opt, arg, 0.0, 1e6, &p->window_max_ms);
    case O_WINWAIT:
        return num(opt, arg, 0.0, 1.0, &p->window_wait);
    case O_WEIGHT:
        rc = name(opt, arg, pr_weighting_names, &w);
        p->weighting = (enum pr_weighting)w;
        return rc;
    case O_ALPHA:
        return num(opt, arg, 1e-9, 1.0 - 1e-9, &p->staleness_alpha);
    case O_BOUND:
        return u32(opt, arg, 0, 1000000, &p->isolation_bound);
    case O_HOLD:
        return num(opt, arg, 0.0, 1e6, &p->gen_hold_ms);
    case O_ROUNDS:
        return u32(opt, arg, 1, 1000000, &c->window_rounds);
    case O_BASE:
        return num(opt, arg, 1e-3, 1e7, &c->base_ms);
    case O_SLOW:
        o->slow = arg;
        return 0;
    case O_SLOWHALF:
        return num(opt, arg, 1e-3, 1e5, &o->slow_half);
    case O_SLOWONE:
        return num(opt, arg, 1e-3, 1e5, &o->slow_one);
    case O_JITTER:
        return num(opt, arg, 0.0, 0.99, &c->jitter);
    case O_STALLP:
        return num(opt, arg, 0.0, 1.0, &c->stall_prob);
    case O_STALLMS:
        return num(opt, arg, 0.0, 1e7, &c->stall_ms);
    case O_COMM:
        return num(opt, arg, 0.0, 1e9, &c->comm_us);
    case O_DUR:
        o->duration_set = 1;
        return num(opt, arg, 1e-3, 1e6, &c->duration_s);
    case O_MODEL:
        o->model = 1;
        return 0;
    case O_NOMODEL:
        o->model = 0;
        return 0;
    case O_TARGET:
        return num(opt, arg, 1e-9, 1e9, &o->target_loss);
    case O_FRAC:
        return num(opt, arg, 1e-3, 1.0, &o->target_frac);
    case O_CALIB:
        return u32(opt, arg, 1, 1000000, &o->calib_steps);
    case O_EVAL:
        return num(opt, arg, 1e-3, 1e7, &c->eval_ms);
    case O_SEED:
        if (num(opt, arg, 0.0, 1e18, &v) < 0) {
            return -EINVAL;
        }
        c->seed = (uint64_t)v;
        return 0;
    case O_SEEDS:
        return u32(opt, arg, 1, 1000, &o->seeds);
    case O_SCALE:
        o->scale = 1;
        return 0;
    case O_ACCEPT:
        o->acceptance = 1;
        return 0;
    case O_VERBOSE:
        o->verbose = 1;
        return 0;
    default:
        return -EINVAL;
    }
}

/* "I:F,I:F": worker I's step takes F x base_ms. */
static int parse_slow(const char *spec, double *speed, uint32_t n)
{
    const char *s = spec;

    while (*s != '\0') {
        char *end;
        unsigned long i = strtoul(s, &end, 10);
        double f;

        if (end == s || *end != ':' || i >= n) {
            return bad("slow", spec);
        }
        s = end + 1;
        f = strtod(s, &end);
        if (end == s || !(f > 0.0 && f < 1e5) ||
            (*end != ',' && *end != '\0')) {
            return bad("slow", spec);
        }
        speed[i] = f;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static void print_profile(const struct opts *o, const double *speed)
{
    const struct pr_sim_conf *c = &o->conf;
    uint32_t shown = 0;

    printf("profile: N %u, %.1f ms steps, jitter +-%.0f%%, stalls %.0f%% x "
           "%.0f ms, comm %.0f us, %.0f s simulated, seed %llu\n",
           c->workers, c->base_ms, c->jitter * 100.0, c->stall_prob * 100.0,
           c->stall_ms, c->comm_us, c->duration_s, (unsigned long long)c->seed);
    printf("slower workers:");
    for (uint32_t i = 0; i < c->workers; i++) {
        if (speed[i] != 1.0 && shown++ < 16) {
            printf(" %u:%.2gx", i, speed[i]);
        }
    }
    printf(shown == 0 ? " none\n" : shown > 16 ? " ...\n" : "\n");
}

static int run_single(const struct opts *o)
{
    struct pr_sim_conf c = o->conf;
    struct pr_sim_result r;
    double baseline = -1.0;
    int rc;

    c.sched.policy = o->policy;
    if (c.model != NULL && o->policy != PR_POLICY_ALLREDUCE) {
        struct pr_sim_conf a = c;

        a.sched.policy = PR_POLICY_ALLREDUCE;
        a.stop_at_target = 1;
        rc = pr_sim_run(&a, &r);
        if (rc < 0) {
            return rc;
        }
        baseline = r.target_s;
        pr_sim_result_fini(&r);
    }
    rc = pr_sim_run(&c, &r);
    if (rc < 0) {
        return rc;
    }
    pr_sim_print_run(stdout, pr_policy_name(o->policy), &c, &r);
    if (baseline > 0.0 && r.target_s > 0.0) {
        printf("  vs allreduce       target at %.2f s: %.2fx sooner\n",
               baseline, baseline / r.target_s);
    } else if (c.model != NULL && o->policy != PR_POLICY_ALLREDUCE) {
        printf("  vs allreduce       target at %.2f s\n", baseline);
    }
    pr_sim_result_fini(&r);
    return 0;
}

static int run(struct opts *o, double *speed)
{
    struct pr_sim_model_params mp;
    struct pr_sim_model *m = NULL;
    int rc = 0;

    if (o->scale) {
        return pr_sim_scale(stdout, &o->conf, NULL);
    }
    print_profile(o, speed);
    if (o->model) {
        pr_sim_model_defaults(&mp);
        mp.seed = o->conf.seed;
        m = pr_sim_model_create(&mp);
        if (m == NULL) {
            return -ENOMEM;
        }
        o->conf.model = m;
        o->conf.target_loss = o->target_loss;
        if (o->target_loss <= 0.0) {
            rc = pr_sim_calibrate(stdout, m, o->conf.workers, o->calib_steps,
                                  o->target_frac, o->conf.seed,
                                  &o->conf.target_loss);
        } else {
            printf("target loss %.4f (given)\n", o->target_loss);
        }
    }
    if (rc == 0) {
        rc = o->policy == POLICY_ALL
                 ? pr_sim_compare(stdout, &o->conf, o->verbose, NULL)
                 : run_single(o);
    }
    pr_sim_model_destroy(m);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    double *speed;
    int ch;
    int rc;

    memset(&o, 0, sizeof(o));
    pr_sim_conf_defaults(&o.conf, PR_POLICY_ALLREDUCE, 8);
    o.conf.jitter = 0.05;
    o.conf.stall_ms = 100.0;
    o.policy = POLICY_ALL;
    o.model = 1;
    o.target_frac = PR_SIM_CALIB_FRAC;
    o.calib_steps = PR_SIM_CALIB_STEPS;
    o.seeds = 5;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h' || ch == O_HELP) {
            usage(stdout);
            return 0;
        }
        if (ch == '?' || parse_one(&o, ch, optarg) < 0) {
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "preduce-sim: unexpected argument '%s'\n",
                argv[optind]);
        return 2;
    }
    if (o.acceptance) {
        rc = pr_sim_acceptance(stdout, o.conf.seed, o.seeds);
        if (rc < 0) {
            fprintf(stderr, "preduce-sim: acceptance: %s\n", strerror(-rc));
            return 1;
        }
        return 0;
    }
    if (o.scale) {
        o.model = 0;
        if (!o.workers_set) {
            o.conf.workers = SCALE_WORKERS;
        }
        if (!o.duration_set) {
            o.conf.duration_s = SCALE_DURATION;
        }
    }
    speed = malloc((size_t)o.conf.workers * sizeof(*speed));
    if (speed == NULL) {
        fprintf(stderr, "preduce-sim: out of memory\n");
        return 1;
    }
    for (uint32_t i = 0; i < o.conf.workers; i++) {
        speed[i] =
            o.slow_half > 0.0 && i >= o.conf.workers / 2 ? o.slow_half : 1.0;
    }
    if (o.slow_one > 0.0) {
        speed[o.conf.workers - 1] = o.slow_one;
    }
    if (o.slow != NULL && parse_slow(o.slow, speed, o.conf.workers) < 0) {
        free(speed);
        return 2;
    }
    o.conf.speed = speed;
    rc = run(&o, speed);
    free(speed);
    if (rc < 0) {
        fprintf(stderr,
                "preduce-sim: %s (check the scheduler parameters: "
                "group_min <= group_max, window_min <= window <= "
                "window_max)\n",
                strerror(-rc));
        return 1;
    }
    return 0;
}
