/* SPDX-License-Identifier: MIT */
/*
 * The simulation engine (protocol sketch in sim.h): a binary heap of
 * events in simulated microseconds, the real scheduler core, and, with a
 * model, one real replica per worker.
 *
 * Ownership: a run owns its core, heap, workers, replicas and the groups in
 * flight (at most one per worker, so N slots); pr_sim_run() frees them all
 * before it returns. The result's arrays belong to the caller
 * (pr_sim_result_fini).
 */
#include "daemon/sim/sim.h"
#include "daemon/base/conf.h"
#include "daemon/engine/reduce.h"
#include "daemon/sim/model.h"
#include "daemon/sim/rng.h"
#include "daemon/sim/sim_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stream ids under conf.seed (model.c has the minibatch streams). */
#define STEP_STREAM 0x57e9000000ull

enum ev_kind {
    EV_STEP,     /* worker idx finished computing */
    EV_REDUCED,  /* the group in slot idx finished its reduce */
    EV_DEADLINE, /* the core's deadline */
    EV_EVAL,     /* evaluate the replicas */
};

struct ev {
    uint64_t t_us;
    uint64_t seq; /* ties at equal times break in push order */
    uint32_t kind;
    uint32_t idx;
};

struct heap {
    struct ev *a;
    size_t n;
    size_t cap;
};

/* Where a simulated worker is; the core must only group W_QUEUED ones. */
enum wstate {
    W_COMPUTING = 0,
    W_QUEUED,  /* READY sent, no group yet */
    W_GROUPED, /* in a group whose reduce is in flight */
};

struct worker {
    int state;         /* enum wstate */
    uint64_t rng;      /* step times */
    uint64_t brng;     /* minibatches */
    uint64_t version;  /* of its last group result */
    uint64_t seq;      /* of its last READY */
    uint64_t ready_us; /* when it sent it */
    float *x;          /* replica, or NULL without a model */
    double loss;       /* of x at the last evaluation */
    int dirty;         /* x changed since then */
};

struct run {
    const struct pr_sim_conf *c;
    struct pr_sim_result *r;
    struct pr_sched_core *core;
    struct heap h;
    uint64_t ev_seq;
    uint64_t now_us;
    uint64_t end_us;
    int64_t armed_us; /* the latest deadline pushed, or -1 */
    uint64_t active;  /* pending step, reduce and deadline events */
    struct worker *w;
    struct pr_sched_group *slots; /* N groups in flight */
    uint32_t *free_slots;
    uint32_t nfree;
    struct pr_sim_stats st;
    size_t dim;
    float *xs;  /* N x dim replicas */
    float *sum; /* dim: a group's weighted sum */
    struct timespec core_t0;
};

static double now_real(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int heap_push(struct heap *h, uint64_t t_us, uint64_t seq, uint32_t kind,
                     uint32_t idx)
{
    if (h->n == h->cap) {
        size_t cap = h->cap > 0 ? h->cap * 2 : 64;
        struct ev *a = realloc(h->a, cap * sizeof(*a));

        if (a == NULL) {
            return -ENOMEM;
        }
        h->a = a;
        h->cap = cap;
    }
    struct ev e = {t_us, seq, kind, idx};
    size_t i = h->n++;

    while (i > 0) {
        size_t up = (i - 1) / 2;
        const struct ev *p = &h->a[up];

        if (p->t_us < t_us || (p->t_us == t_us && p->seq < seq)) {
            break;
        }
        h->a[i] = *p;
        i = up;
    }
    h->a[i] = e;
    return 0;
}

static int ev_less(const struct ev *a, const struct ev *b)
{
    return a->t_us < b->t_us || (a->t_us == b->t_us && a->seq < b->seq);
}

static struct ev heap_pop(struct heap *h)
{
    struct ev top = h->a[0];
    struct ev last = h->a[--h->n];
    size_t i = 0;

    for (;;) {
        size_t l = 2 * i + 1;
        size_t m = l;

        if (l >= h->n) {
            break;
        }
        if (l + 1 < h->n && ev_less(&h->a[l + 1], &h->a[l])) {
            m = l + 1;
        }
        if (!ev_less(&h->a[m], &last)) {
            break;
        }
        h->a[i] = h->a[m];
        i = m;
    }
    if (h->n > 0) {
        h->a[i] = last;
    }
    return top;
}

static int push(struct run *u, uint64_t t_us, uint32_t kind, uint32_t idx)
{
    if (kind != EV_EVAL) {
        u->active++;
    }
    return heap_push(&u->h, t_us, u->ev_seq++, kind, idx);
}

void pr_sim_conf_defaults(struct pr_sim_conf *c, int policy, uint32_t workers)
{
    memset(c, 0, sizeof(*c));
    /* The daemon's defaults, conf/preduced.conf. */
    c->sched.policy = policy;
    c->sched.group_size = 2;
    c->sched.group_min = 2;
    c->sched.group_max = 0;
    c->sched.window_ms = 5.0;
    c->sched.window_min_ms = 0.01;
    c->sched.window_max_ms = 10.0;
    c->sched.window_wait = 0.5;
    c->sched.weighting = PR_WEIGHT_UNIFORM;
    c->sched.staleness_alpha = 0.9;
    c->sched.isolation_bound = 10;
    c->workers = workers;
    c->base_ms = 100.0;
    c->comm_us = 1000.0;
    c->duration_s = 60.0;
    c->seed = 1;
}

static int conf_ok(const struct pr_sim_conf *c)
{
    if (c == NULL || c->workers == 0 || c->workers > PR_SCHED_MAX ||
        !(c->base_ms > 0.0) || !(c->jitter >= 0.0 && c->jitter < 1.0) ||
        !(c->stall_prob >= 0.0 && c->stall_prob <= 1.0) ||
        !(c->stall_ms >= 0.0) || !(c->comm_us >= 0.0) ||
        !(c->duration_s > 0.0 && c->duration_s < 1e7) || !(c->eval_ms >= 0.0)) {
        return 0;
    }
    for (uint32_t i = 0; c->speed != NULL && i < c->workers; i++) {
        if (!(c->speed[i] > 0.0 && c->speed[i] < 1e6)) {
            return 0;
        }
    }
    return 1;
}

/* The next compute step of worker i, in microseconds (at least 1). */
static uint64_t step_us(struct run *u, uint32_t i)
{
    const struct pr_sim_conf *c = u->c;
    struct worker *k = &u->w[i];
    double f = c->speed != NULL ? c->speed[i] : 1.0;
    double us = c->base_ms * 1000.0 * f *
                (1.0 + c->jitter * (2.0 * pr_sim_rng_unit(&k->rng) - 1.0));

    if (c->stall_prob > 0.0 && pr_sim_rng_unit(&k->rng) < c->stall_prob) {
        us += c->stall_ms * 1000.0;
    }
    return us < 1.0 ? 1 : (uint64_t)llround(us);
}

static uint64_t comm_us(const struct pr_sim_conf *c, uint32_t k)
{
    return (uint64_t)llround(c->comm_us * 2.0 * (k - 1) / k);
}

static void core_enter(struct run *u)
{
    clock_gettime(CLOCK_MONOTONIC, &u->core_t0);
}

static void core_leave(struct run *u)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    u->r->core_s += (double)(t.tv_sec - u->core_t0.tv_sec) +
                    (double)(t.tv_nsec - u->core_t0.tv_nsec) * 1e-9;
}

/* Forms every group due now, then arms the core's deadline. */
static int drain(struct run *u)
{
    for (;;) {
        uint32_t slot;
        struct pr_sched_group g;
        int rc;

        core_enter(u);
        rc = pr_sched_core_next_group(u->core, u->now_us, &g);
        core_leave(u);
        if (rc <= 0) {
            if (rc < 0) {
                return rc;
            }
            break;
        }
        /* The core's contract: a group of queued workers, each once. */
        for (uint32_t j = 0; j < g.n; j++) {
            uint32_t i = g.members[j].rank;

            if (i >= u->c->workers || u->w[i].state != W_QUEUED) {
                pr_sched_group_fini(&g);
                return -EPROTO;
            }
            u->w[i].state = W_GROUPED;
            u->r->wait_us += u->now_us - u->w[i].ready_us;
        }
        if (g.n == 0 || u->nfree == 0) {
            pr_sched_group_fini(&g); /* nfree: one group per worker */
            return -EPROTO;
        }
        pr_sim_stats_group(&u->st, &g, u->r);
        slot = u->free_slots[--u->nfree];
        u->slots[slot] = g;
        rc = push(u, u->now_us + comm_us(u->c, g.n), EV_REDUCED, slot);
        if (rc < 0) {
            return rc;
        }
    }
    core_enter(u);
    int64_t d = pr_sched_core_deadline_us(u->core);
    core_leave(u);
    if (d >= 0 && d != u->armed_us) {
        uint64_t at = (uint64_t)d > u->now_us ? (uint64_t)d : u->now_us + 1;

        u->armed_us = d;
        return push(u, at, EV_DEADLINE, 0);
    }
    return 0;
}

static int on_step(struct run *u, uint32_t i)
{
    struct worker *k = &u->w[i];
    int rc;

    if (k->x != NULL) {
        pr_sim_model_step(u->c->model, k->x, i, u->c->workers, &k->brng);
        k->dirty = 1;
    }
    k->seq++;
    k->ready_us = u->now_us;
    k->state = W_QUEUED;
    u->r->ready_events++;
    core_enter(u);
    rc = pr_sched_core_ready(u->core, i, k->version + 1, k->seq, u->now_us);
    core_leave(u);
    return rc;
}

/* Every member's replica becomes the group's result. */
static void apply(struct run *u, const struct pr_sched_group *g)
{
    const struct pr_sched_member *m = g->members;

    if (u->xs == NULL) {
        return;
    }
    memset(u->sum, 0, u->dim * sizeof(*u->sum));
    for (uint32_t j = 0; j < g->n; j++) {
        pr_reduce_axpy(u->sum, u->w[m[j].rank].x, (float)m[j].weight, u->dim);
    }
    for (uint32_t j = 0; j < g->n; j++) {
        struct worker *k = &u->w[m[j].rank];

        if (g->personal) {
            pr_reduce_personal(k->x, k->x, u->sum, m[j].weight, g->n, u->dim);
        } else {
            memcpy(k->x, u->sum, u->dim * sizeof(*k->x));
        }
        k->dirty = 1;
    }
}

static int on_reduced(struct run *u, uint32_t slot)
{
    struct pr_sched_group *g = &u->slots[slot];
    int rc = 0;

    apply(u, g);
    core_enter(u);
    for (uint32_t j = 0; j < g->n; j++) {
        /* What the scheduler learns from the nodes' GroupDones. */
        pr_sched_core_reduced(u->core, g->members[j].rank, comm_us(u->c, g->n));
    }
    core_leave(u);
    for (uint32_t j = 0; j < g->n && rc == 0; j++) {
        uint32_t i = g->members[j].rank;

        u->w[i].state = W_COMPUTING;
        u->w[i].version = g->max_version;
        u->r->updates[i]++;
        u->r->sizes[i] += g->n;
        rc = push(u, u->now_us + step_us(u, i), EV_STEP, i);
    }
    pr_sched_group_fini(g);
    u->free_slots[u->nfree++] = slot;
    return rc;
}

/*
 * The mean over workers of each replica's evaluation loss; *worst gets
 * the largest.
 */
static double evaluate(struct run *u, double *worst)
{
    uint32_t n = u->c->workers;
    double total = 0.0;

    *worst = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        struct worker *k = &u->w[i];

        if (k->dirty) {
            /* Equal replicas (all of them after an allreduce) share one. */
            if (i > 0 &&
                memcmp(k->x, u->w[i - 1].x, u->dim * sizeof(*k->x)) == 0) {
                k->loss = u->w[i - 1].loss;
            } else {
                k->loss = pr_sim_model_loss(u->c->model, k->x);
            }
            k->dirty = 0;
        }
        total += k->loss;
        if (k->loss > *worst) {
            *worst = k->loss;
        }
    }
    u->r->evals++;
    return total / n;
}

static uint64_t eval_us(const struct pr_sim_conf *c)
{
    double ms = c->eval_ms > 0.0 ? c->eval_ms : c->base_ms / 2.0;
    uint64_t us = (uint64_t)llround(ms * 1000.0);

    return us > 0 ? us : 1;
}

/* 1 when the run should end now. */
static int on_eval(struct run *u)
{
    const struct pr_sim_conf *c = u->c;
    double worst;
    double loss = evaluate(u, &worst);
    double now_s = (double)u->now_us * 1e-6;

    u->r->loss_final = loss;
    u->r->loss_worst = worst;
    if (u->now_us == 0) {
        u->r->loss0 = loss;
    }
    if (c->target_loss > 0.0 && loss <= c->target_loss &&
        u->r->target_s < 0.0) {
        u->r->target_s = now_s;
    }
    if (c->target_loss > 0.0 && worst <= c->target_loss) {
        u->r->every_s = now_s;
        /*
         * Every replica there: the run ends, or goes on for the group
         * statistics without evaluations (they are the model's main cost).
         */
        return c->stop_at_target ? 1 : 0;
    }
    return push(u, u->now_us + eval_us(c), EV_EVAL, 0) < 0 ? -ENOMEM : 0;
}

static int setup(struct run *u)
{
    const struct pr_sim_conf *c = u->c;
    struct pr_sim_result *r = u->r;
    uint32_t n = c->workers;
    struct pr_sched_params p = c->sched;
    int rc;

    if (p.stats_bound == 0) {
        p.stats_bound = r->window_rounds;
    }
    u->core = pr_sched_core_create(&p);
    if (u->core == NULL) {
        return -EINVAL;
    }
    u->w = calloc(n, sizeof(*u->w));
    u->slots = calloc(n, sizeof(*u->slots));
    u->free_slots = malloc((size_t)n * sizeof(*u->free_slots));
    if (u->w == NULL || u->slots == NULL || u->free_slots == NULL) {
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < n; s++) {
        u->free_slots[u->nfree++] = n - 1 - s;
    }
    if (c->model != NULL) {
        u->dim = pr_sim_model_dim(c->model);
        u->xs = malloc((size_t)n * u->dim * sizeof(*u->xs));
        u->sum = malloc(u->dim * sizeof(*u->sum));
        if (u->xs == NULL || u->sum == NULL) {
            return -ENOMEM;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        struct worker *k = &u->w[i];

        k->rng = pr_sim_rng_seed(c->seed, STEP_STREAM + i);
        k->brng = pr_sim_batch_seed(c->seed, i);
        if (u->xs != NULL) {
            k->x = &u->xs[(size_t)i * u->dim];
            pr_sim_model_init(c->model, k->x);
            k->dirty = 1;
        }
        rc = pr_sched_core_add_worker(u->core, i, i, 0);
        if (rc == 0) {
            rc = push(u, step_us(u, i), EV_STEP, i);
        }
        if (rc < 0) {
            return rc;
        }
    }
    return c->model != NULL ? push(u, 0, EV_EVAL, 0) : 0;
}

static void teardown(struct run *u)
{
    for (uint32_t s = 0; u->slots != NULL && s < u->c->workers; s++) {
        pr_sched_group_fini(&u->slots[s]);
    }
    pr_sched_core_destroy(u->core);
    free(u->h.a);
    free(u->w);
    free(u->slots);
    free(u->free_slots);
    free(u->xs);
    free(u->sum);
    pr_sim_stats_fini(&u->st);
}

static int loop(struct run *u)
{
    int rc = 0;

    while (rc == 0 && u->h.n > 0) {
        if (u->active == 0) {
            u->r->stalled = 1; /* everyone waits and no deadline is armed */
            break;
        }
        if (u->h.a[0].t_us > u->end_us) {
            u->now_us = u->end_us;
            break;
        }
        struct ev e = heap_pop(&u->h);

        u->now_us = e.t_us;
        if (e.kind != EV_EVAL) {
            u->active--;
        }
        switch (e.kind) {
        case EV_STEP:
            rc = on_step(u, e.idx);
            break;
        case EV_REDUCED:
            rc = on_reduced(u, e.idx);
            break;
        case EV_DEADLINE:
            if ((int64_t)e.t_us >= u->armed_us) {
                u->armed_us = -1;
            }
            break;
        default:
            rc = on_eval(u);
            if (rc == 1) {
                return 0;
            }
            break;
        }
        if (rc == 0) {
            rc = drain(u);
        }
    }
    return rc;
}

int pr_sim_run(const struct pr_sim_conf *c, struct pr_sim_result *r)
{
    struct run u;
    double t0 = now_real();
    int rc;

    if (r == NULL || !conf_ok(c)) {
        return -EINVAL;
    }
    memset(r, 0, sizeof(*r));
    memset(&u, 0, sizeof(u));
    u.c = c;
    u.r = r;
    u.armed_us = -1;
    u.end_us = (uint64_t)llround(c->duration_s * 1e6);
    r->workers = c->workers;
    r->target_s = -1.0;
    r->every_s = -1.0;
    r->gap = NAN;
    r->hist = calloc((size_t)c->workers + 1, sizeof(*r->hist));
    r->updates = calloc(c->workers, sizeof(*r->updates));
    r->sizes = calloc(c->workers, sizeof(*r->sizes));
    if (r->hist == NULL || r->updates == NULL || r->sizes == NULL) {
        pr_sim_result_fini(r);
        return -ENOMEM;
    }
    rc = pr_sim_stats_init(&u.st, c, r);
    if (rc == 0) {
        rc = setup(&u);
    }
    if (rc == 0) {
        rc = loop(&u);
    }
    if (rc == 0) {
        r->sim_s = (double)u.now_us * 1e-6;
        pr_sched_core_stats(u.core, &r->core);
        r->window_ms = pr_sched_core_window_ms(u.core);
        rc = pr_sim_stats_finish(&u.st, r);
    }
    teardown(&u);
    if (rc < 0) {
        pr_sim_result_fini(r);
        return rc;
    }
    r->wall_s = now_real() - t0;
    return 0;
}

void pr_sim_result_fini(struct pr_sim_result *r)
{
    if (r == NULL) {
        return;
    }
    free(r->hist);
    free(r->updates);
    free(r->sizes);
    r->hist = NULL;
    r->updates = NULL;
    r->sizes = NULL;
}

double pr_sim_rate(const struct pr_sim_result *r, uint32_t worker)
{
    if (r == NULL || worker >= r->workers || !(r->sim_s > 0.0)) {
        return 0.0;
    }
    return (double)r->updates[worker] / r->sim_s;
}
