/* SPDX-License-Identifier: MIT */
/*
 * bench_sched: how many ready events per second the scheduler core takes
 * at 1024 workers, for every policy, next to an anchor measured in the same
 * run: a plain FIFO queue that forms groups of P from the same sequence of
 * ready events (no per-worker state, no union-find, no weights). The ratio
 * core / anchor says how much a decision costs beyond the least any
 * scheduler must do, whatever this machine's speed. A benchmark that prints
 * figures, not a test: it exits 0 unless something fails outright.
 *
 * Each run: workers start in a shuffled order; a worker whose group formed
 * goes to the back of a "computing" FIFO and is ready again when it comes
 * out, so groups form as fast as the core decides. The clock advances
 * DT_US per ready event (and jumps to the core's deadline when nobody is
 * computing), so the dynamic policy's window sees a steady arrival rate.
 */
#include "daemon/base/conf.h"
#include "daemon/sched/core/sched_core.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS  1024u
#define ROUNDS   1000u /* ready events per run: WORKERS x ROUNDS */
#define REPEATS  3     /* each figure is the best of this many runs */
#define DT_US    10u
#define ANCHOR_P 4u
/* What acceptance point 5 asks of the core. */
#define TARGET_READY_PER_S 200000.0

struct ring {
    uint32_t *a;
    uint32_t cap; /* a power of two */
    uint32_t head;
    uint32_t n;
};

static int ring_init(struct ring *q, uint32_t min_cap)
{
    uint32_t cap = 1;

    while (cap < min_cap) {
        cap *= 2;
    }
    q->a = malloc(cap * sizeof(*q->a));
    q->cap = cap;
    q->head = 0;
    q->n = 0;
    return q->a != NULL ? 0 : -ENOMEM;
}

static void ring_push(struct ring *q, uint32_t x)
{
    q->a[(q->head + q->n++) & (q->cap - 1)] = x;
}

static uint32_t ring_pop(struct ring *q)
{
    uint32_t x = q->a[q->head];

    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
    return x;
}

/* The workers in a shuffled order (fixed seed), into the computing FIFO. */
static void start_order(struct ring *q)
{
    uint32_t order[WORKERS];
    uint64_t s = 0x2545f4914f6cdd1dull;

    for (uint32_t i = 0; i < WORKERS; i++) {
        order[i] = i;
    }
    for (uint32_t i = WORKERS - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t j = (uint32_t)((s >> 33) % (i + 1));
        uint32_t t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
    for (uint32_t i = 0; i < WORKERS; i++) {
        ring_push(q, order[i]);
    }
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct figures {
    double seconds;
    uint64_t ready;
    uint64_t groups;
    uint64_t members;
};

static int run_core(const struct pr_sched_params *p, struct figures *f)
{
    static uint64_t version[WORKERS];
    struct pr_sched_core *c = pr_sched_core_create(p);
    struct ring computing;
    uint64_t total = (uint64_t)WORKERS * ROUNDS;
    uint64_t now = 0;
    uint64_t seq = 0;
    double t0;
    int rc = 0;

    memset(f, 0, sizeof(*f));
    memset(version, 0, sizeof(version));
    if (c == NULL || ring_init(&computing, WORKERS) < 0) {
        pr_sched_core_destroy(c);
        return -ENOMEM;
    }
    for (uint32_t r = 0; r < WORKERS; r++) {
        pr_sched_core_add_worker(c, r, r, 0);
    }
    start_order(&computing);
    t0 = now_s();
    while (f->ready < total && rc == 0) {
        struct pr_sched_group g;

        if (computing.n > 0) {
            uint32_t r = ring_pop(&computing);

            now += DT_US;
            rc = pr_sched_core_ready(c, r, version[r] + 1, ++seq, now);
            f->ready++;
        } else {
            int64_t d = pr_sched_core_deadline_us(c);

            if (d < 0) {
                rc = -EDEADLK; /* everyone queued, nothing due */
                break;
            }
            now = (uint64_t)d > now ? (uint64_t)d : now + 1;
        }
        while (rc == 0 && (rc = pr_sched_core_next_group(c, now, &g)) == 1) {
            for (uint32_t i = 0; i < g.n; i++) {
                version[g.members[i].rank] = g.max_version;
                ring_push(&computing, g.members[i].rank);
            }
            f->groups++;
            f->members += g.n;
            pr_sched_group_fini(&g);
            rc = 0;
        }
    }
    f->seconds = now_s() - t0;
    pr_sched_core_destroy(c);
    free(computing.a);
    return rc < 0 ? rc : 0;
}

/*
 * The anchor: the same loop with a FIFO queue of ready ranks that hands
 * out groups of ANCHOR_P. `sink` keeps the work observable.
 */
static int run_fifo(struct figures *f, uint64_t *sink)
{
    struct ring computing;
    struct ring ready;
    uint32_t group[ANCHOR_P];
    uint64_t total = (uint64_t)WORKERS * ROUNDS;
    uint64_t acc = 0;
    double t0;

    memset(f, 0, sizeof(*f));
    if (ring_init(&computing, WORKERS) < 0 || ring_init(&ready, WORKERS) < 0) {
        free(computing.a);
        return -ENOMEM;
    }
    start_order(&computing);
    t0 = now_s();
    while (f->ready < total) {
        ring_push(&ready, ring_pop(&computing));
        f->ready++;
        if (ready.n >= ANCHOR_P) {
            for (uint32_t i = 0; i < ANCHOR_P; i++) {
                group[i] = ring_pop(&ready);
                acc += group[i];
            }
            for (uint32_t i = 0; i < ANCHOR_P; i++) {
                ring_push(&computing, group[i]);
            }
            f->groups++;
            f->members += ANCHOR_P;
        }
    }
    f->seconds = now_s() - t0;
    *sink += acc;
    free(computing.a);
    free(ready.a);
    return 0;
}

static struct pr_sched_params params(int policy, int weighting, uint32_t bound)
{
    struct pr_sched_params p;

    memset(&p, 0, sizeof(p));
    p.policy = policy;
    p.group_size = 4;
    p.group_min = 2;
    p.group_max = 0;
    p.window_ms = 5.0;
    p.window_min_ms = 0.01;
    p.window_max_ms = 10.0;
    p.weighting = weighting;
    p.staleness_alpha = 0.9;
    p.isolation_bound = bound;
    return p;
}

static void best_of(struct figures *best, const struct figures *f)
{
    if (best->seconds == 0.0 || f->seconds < best->seconds) {
        *best = *f;
    }
}

int main(void)
{
    static const struct {
        const char *label;
        int policy;
        int weighting;
        uint32_t bound;
        uint32_t group_max;
    } cases[] = {
        {"allreduce", PR_POLICY_ALLREDUCE, PR_WEIGHT_UNIFORM, 10, 0},
        {"constant P4 gen off", PR_POLICY_CONSTANT, PR_WEIGHT_UNIFORM, 0, 0},
        {"constant P4", PR_POLICY_CONSTANT, PR_WEIGHT_UNIFORM, 10, 0},
        {"constant P4 stale", PR_POLICY_CONSTANT, PR_WEIGHT_STALENESS, 10, 0},
        {"dynamic max 16", PR_POLICY_DYNAMIC, PR_WEIGHT_UNIFORM, 10, 16},
        {"dynamic max 16 stale", PR_POLICY_DYNAMIC, PR_WEIGHT_STALENESS, 10,
         16},
        {"dynamic max all", PR_POLICY_DYNAMIC, PR_WEIGHT_UNIFORM, 10, 0},
    };
    struct figures anchor;
    uint64_t sink = 0;
    double anchor_ns;
    double worst = 0.0;

    memset(&anchor, 0, sizeof(anchor));
    for (int k = 0; k < REPEATS; k++) {
        struct figures f;

        if (run_fifo(&f, &sink) < 0) {
            fprintf(stderr, "bench_sched: out of memory\n");
            return 1;
        }
        best_of(&anchor, &f);
    }
    anchor_ns = anchor.seconds * 1e9 / (double)anchor.ready;
    printf("bench_sched: %u workers, %llu ready events per run, best of %d "
           "(B = isolation_bound)\n",
           WORKERS, (unsigned long long)anchor.ready, REPEATS);
    printf("%-22s %9s %7s %12s %9s %9s\n", "case", "groups", "size", "ready/s",
           "ns/ready", "x anchor");
    printf("%-22s %9llu %7.1f %12.0f %9.1f %9.2f\n", "anchor: FIFO of P4",
           (unsigned long long)anchor.groups,
           (double)anchor.members / (double)anchor.groups,
           (double)anchor.ready / anchor.seconds, anchor_ns, 1.0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct pr_sched_params p =
            params(cases[i].policy, cases[i].weighting, cases[i].bound);
        struct figures best;

        p.group_max = cases[i].group_max;
        memset(&best, 0, sizeof(best));
        for (int k = 0; k < REPEATS; k++) {
            struct figures f;
            int rc = run_core(&p, &f);

            if (rc < 0) {
                fprintf(stderr, "bench_sched: %s: %s\n", cases[i].label,
                        strerror(-rc));
                return 1;
            }
            best_of(&best, &f);
        }
        double rate = (double)best.ready / best.seconds;
        double ns = best.seconds * 1e9 / (double)best.ready;

        if (worst == 0.0 || rate < worst) {
            worst = rate;
        }
        printf("%-22s %9llu %7.1f %12.0f %9.1f %9.2f\n", cases[i].label,
               (unsigned long long)best.groups,
               (double)best.members / (double)best.groups, rate, ns,
               ns / anchor_ns);
    }
    printf("slowest case: %.0f ready events/s (%s: >= %.0f); anchor "
           "checksum %llu\n",
           worst, worst >= TARGET_READY_PER_S ? "meets" : "MISSES",
           TARGET_READY_PER_S, (unsigned long long)(sink & 0xffff));
    return 0;
}
