/*
 * Unit tests for the reduce engine (daemon/engine.c).
 *
 * Every test runs a private libuv loop with several engines ("nodes") in it,
 * wired by in-memory links (struct memlink) that copy each chunk at send()
 * and deliver it later from a uv_idle callback, then complete the send. The
 * links have knobs to drop, fail, hold or corrupt chunks. Tests count every
 * done() call, check that none runs inside pr_engine_start, compare results
 * against a double-precision reference, and end with uv_loop_close() == 0.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/engine.h"
#include "daemon/log.h"
#include "daemon/reduce.h"
#include "daemon/xport.h"

#define MAXN      5   /* nodes in one test network */
#define MAXMB     3   /* local members per node and group */
#define MAXPARTS  3   /* tensors per member */
#define NODE0     100 /* node ids are NODE0 + index: ids differ from positions */
#define LONG_MS   10000
#define STASH_MAX (64u << 20)

#define container_of(p, type, field)                                           \
    ((type *)((char *)(p)-offsetof(type, field)))

/* Set around pr_engine_start(): done() must never run inside it. */
static int in_start;

/* ------------------------------------------------------------------ */
/* In-memory links                                                      */

enum field { F_NONE, F_TOTAL, F_OFF, F_STEP, F_SEG, F_FROM };

struct msg {
    struct msg *next;
    struct pr_chunk_hdr h;
    pr_send_cb cb;
    void *arg;
    float data[];
};

struct net;

struct memlink {
    struct pr_link base;
    struct net *net;
    int from, to; /* node indexes */
    int up;       /* the resolve function finds this link */
    int drop;     /* complete sends with 0, deliver nothing */
    int fail;     /* send() returns this negative errno */
    int fail_cb;  /* sends from message fail_after on complete with this */
    size_t fail_after;
    int hold; /* queue until released */
    enum field corrupt;
    uint64_t corrupt_value;
    size_t corrupt_at; /* index of the message whose header is corrupted */
    struct msg *head, **tail;
    size_t queued;    /* messages waiting */
    size_t posted;    /* successful send() calls */
    size_t processed; /* messages taken off the queue */
    size_t delivered; /* handed to the destination engine */
};

struct node {
    struct net *net;
    int idx;
    struct pr_engine *e;
};

typedef int (*pred_fn)(struct net *net, void *arg);

struct net {
    uv_loop_t loop;
    uv_idle_t idle;
    uv_prepare_t waiter; /* stops the loop once `pred` holds */
    pred_fn pred;
    void *pred_arg;
    int shuffle; /* deliver in random order, across and within links */
    int n;
    struct node nodes[MAXN];
    struct memlink links[MAXN][MAXN];
};

static void idle_cb(uv_idle_t *h);

static void net_kick(struct net *net)
{
    if (!uv_is_active((uv_handle_t *)&net->idle))
        ck_assert_int_eq(uv_idle_start(&net->idle, idle_cb), 0);
}

static int ml_send(struct pr_link *base, const struct pr_chunk_hdr *h,
                   const float *data, pr_send_cb cb, void *arg)
{
    struct memlink *l = container_of(base, struct memlink, base);
    ck_assert_uint_eq(base->node_id, NODE0 + (uint32_t)l->to);
    if (l->fail)
        return l->fail;
    size_t bytes = (size_t)h->nfloats * sizeof(float);
    struct msg *m = malloc(sizeof(*m) + bytes);
    ck_assert_ptr_nonnull(m);
    m->next = NULL;
    m->h = *h;
    m->cb = cb;
    m->arg = arg;
    memcpy(m->data, data, bytes);
    *l->tail = m;
    l->tail = &m->next;
    l->queued++;
    l->posted++;
    l->base.bytes_sent += bytes;
    if (!l->hold)
        net_kick(l->net);
    return 0;
}

static const struct pr_link_ops ml_ops = {.send = ml_send};

static void corrupt(struct memlink *l, struct pr_chunk_hdr *h, uint32_t *from)
{
    switch (l->corrupt) {
    case F_NONE:
        break;
    case F_TOTAL:
        h->total = l->corrupt_value;
        break;
    case F_OFF:
        h->off = l->corrupt_value;
        break;
    case F_STEP:
        h->step = (uint32_t)l->corrupt_value;
        break;
    case F_SEG:
        h->seg = (uint32_t)l->corrupt_value;
        break;
    case F_FROM:
        *from = (uint32_t)l->corrupt_value;
        break;
    }
}

static uint64_t rng_next(void);
static size_t net_queued(const struct net *net, int held_too);

/* Takes *pp off l's queue, delivers it and completes the send. */
static void deliver(struct memlink *l, struct msg **pp)
{
    struct msg *m = *pp;
    *pp = m->next;
    if (l->tail == &m->next)
        l->tail = pp;
    l->queued--;
    size_t idx = l->processed++;
    if (l->fail_cb && idx >= l->fail_after) {
        m->cb(m->arg, l->fail_cb);
        free(m);
        return;
    }
    struct pr_chunk_hdr h = m->h;
    uint32_t from = NODE0 + (uint32_t)l->from;
    if (idx == l->corrupt_at)
        corrupt(l, &h, &from);
    struct pr_engine *dst = l->net->nodes[l->to].e;
    if (!l->drop && dst) {
        l->delivered++;
        l->net->links[l->to][l->from].base.bytes_recv +=
            (size_t)h.nfloats * sizeof(float);
        pr_engine_on_chunk(dst, from, &h, m->data);
    }
    m->cb(m->arg, 0);
    free(m);
}

/* One random message of one random unheld link; 0 when there is none. */
static int deliver_random(struct net *net)
{
    struct memlink *ready[MAXN * MAXN];
    size_t n = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            if (net->links[a][b].head && !net->links[a][b].hold)
                ready[n++] = &net->links[a][b];
    if (n == 0)
        return 0;
    struct memlink *l = ready[rng_next() % n];
    struct msg **pp = &l->head;
    for (size_t i = rng_next() % l->queued; i > 0; i--)
        pp = &(*pp)->next;
    deliver(l, pp);
    return 1;
}

/* Delivers what each unheld link had queued when the callback started. */
static void idle_cb(uv_idle_t *h)
{
    struct net *net = h->data;
    int more = 0;
    if (net->shuffle) {
        for (size_t n = net_queued(net, 0); n > 0; n--)
            if (!deliver_random(net))
                break;
    } else {
        for (int a = 0; a < net->n; a++) {
            for (int b = 0; b < net->n; b++) {
                struct memlink *l = &net->links[a][b];
                for (size_t n = l->queued; n > 0 && !l->hold && l->head; n--)
                    deliver(l, &l->head);
            }
        }
    }
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            if (net->links[a][b].head && !net->links[a][b].hold)
                more = 1;
    if (!more)
        uv_idle_stop(h);
}

static void link_hold(struct net *net, int a, int b, int hold)
{
    net->links[a][b].hold = hold;
    if (!hold && net->links[a][b].head)
        net_kick(net);
}

static void net_hold_all(struct net *net, int hold)
{
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            link_hold(net, a, b, hold);
}

static struct pr_link *resolve(void *ctx, uint32_t node_id)
{
    struct node *nd = ctx;
    if (node_id < NODE0 || node_id >= NODE0 + (uint32_t)nd->net->n)
        return NULL;
    struct memlink *l = &nd->net->links[nd->idx][node_id - NODE0];
    return l->up ? &l->base : NULL;
}

/* Engines post a lone member's own segment from its memory (no copy). */
static int direct_sends;

static struct net *net_new_stash(int n, size_t chunk, size_t stash_max)
{
    struct net *net = calloc(1, sizeof(*net));
    ck_assert_ptr_nonnull(net);
    ck_assert_int_eq(uv_loop_init(&net->loop), 0);
    ck_assert_int_eq(uv_idle_init(&net->loop, &net->idle), 0);
    net->idle.data = net;
    ck_assert_int_eq(uv_prepare_init(&net->loop, &net->waiter), 0);
    net->waiter.data = net;
    uv_unref((uv_handle_t *)&net->waiter);
    net->n = n;
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            struct memlink *l = &net->links[a][b];
            l->base.ops = &ml_ops;
            l->base.node_id = NODE0 + (uint32_t)b;
            l->base.kind = "mem";
            l->net = net;
            l->from = a;
            l->to = b;
            l->up = a != b;
            l->corrupt_at = SIZE_MAX;
            l->tail = &l->head;
        }
        net->nodes[a].net = net;
        net->nodes[a].idx = a;
        net->nodes[a].e = pr_engine_create(&net->loop, chunk, stash_max,
                                           resolve, &net->nodes[a]);
        ck_assert_ptr_nonnull(net->nodes[a].e);
        pr_engine_set_direct(net->nodes[a].e, direct_sends);
    }
    return net;
}

static struct net *net_new(int n, size_t chunk)
{
    return net_new_stash(n, chunk, STASH_MAX);
}

static struct pr_engine *E(struct net *net, int idx)
{
    return net->nodes[idx].e;
}

static size_t net_queued(const struct net *net, int held_too)
{
    size_t q = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            if (held_too || !net->links[a][b].hold)
                q += net->links[a][b].queued;
    return q;
}

static void destroy_node(struct net *net, int idx)
{
    pr_engine_destroy(net->nodes[idx].e);
    net->nodes[idx].e = NULL;
}

/* Destroys the engines, closes the loop and frees the network. */
static void net_free(struct net *net)
{
    ck_assert_msg(net_queued(net, 1) == 0, "%zu chunks still queued",
                  net_queued(net, 1));
    for (int a = 0; a < net->n; a++)
        destroy_node(net, a);
    uv_close((uv_handle_t *)&net->idle, NULL);
    uv_close((uv_handle_t *)&net->waiter, NULL);
    ck_assert_int_eq(uv_run(&net->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&net->loop), 0);
    free(net);
}

/* Runs before the loop would block: stop it if the condition holds. */
static void waiter_cb(uv_prepare_t *h)
{
    struct net *net = h->data;
    if (net->pred(net, net->pred_arg))
        uv_stop(&net->loop);
}

/*
 * Runs the loop until pred() holds. The waiter is unreferenced: when
 * nothing else is left to run, uv_run() returns 0 and the test fails
 * instead of hanging.
 */
static void run_until(struct net *net, pred_fn pred, void *arg)
{
    net->pred = pred;
    net->pred_arg = arg;
    ck_assert_int_eq(uv_prepare_start(&net->waiter, waiter_cb), 0);
    while (!pred(net, arg)) {
        int alive = uv_run(&net->loop, UV_RUN_DEFAULT);
        ck_assert_msg(alive || pred(net, arg),
                      "the loop went idle before the condition held");
    }
    uv_prepare_stop(&net->waiter);
}

static int quiet(struct net *net, void *arg)
{
    (void)arg;
    return net_queued(net, 0) == 0;
}

/* Delivers everything that can be delivered. */
static void run_quiet(struct net *net)
{
    run_until(net, quiet, NULL);
}

static struct pr_engine_stats stats(struct net *net, int idx)
{
    struct pr_engine_stats st;
    pr_engine_stats(E(net, idx), &st);
    return st;
}

/* ------------------------------------------------------------------ */
/* Groups spread over the network                                       */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static float rng_input(void)
{
    /* Positive, in [0.5, 1.5). */
    return 0.5f + (float)(rng_next() >> 40) / (float)(1u << 24);
}

struct done_rec {
    uint64_t id;
    int calls;
    int status;
};

struct tmember {
    float *part[MAXPARTS];
    struct pr_engine_part parts[MAXPARTS];
    size_t nparts;
    float *input; /* the vector as started: the parts, concatenated */
};

struct tgroup {
    uint64_t id;
    size_t total;
    uint32_t m, k;
    int personal;
    uint32_t ring[MAXN]; /* node ids in ring order */
    size_t nlocal[MAXN];
    struct tmember mb[MAXN][MAXMB];
    struct pr_engine_member spec[MAXN][MAXMB];
    struct done_rec done[MAXN];
};

static void done_cb(void *arg, uint64_t id, int status)
{
    struct done_rec *d = arg;
    ck_assert_msg(!in_start, "done() ran inside pr_engine_start()");
    ck_assert_uint_eq(id, d->id);
    d->calls++;
    d->status = status;
}

/*
 * A group of m nodes (ring_idx: node indexes in ring order), nlocal[p]
 * members at position p, each with 1 to 3 parts of random lengths (some may
 * be empty). Weights: uniform 1/k, or normalised staleness-like ones.
 */
static struct tgroup *tg_new(uint64_t id, size_t total, uint32_t m,
                             const int *ring_idx, const size_t *nlocal,
                             int personal, uint64_t seed)
{
    struct tgroup *tg = calloc(1, sizeof(*tg));
    ck_assert_ptr_nonnull(tg);
    rng_state = seed * 0x9e3779b97f4a7c15ULL + 1;
    tg->id = id;
    tg->total = total;
    tg->m = m;
    tg->personal = personal;
    for (uint32_t p = 0; p < m; p++) {
        tg->ring[p] = NODE0 + (uint32_t)ring_idx[p];
        tg->nlocal[p] = nlocal[p];
        tg->k += (uint32_t)nlocal[p];
        tg->done[p].id = id;
    }
    double wsum = 0;
    uint32_t rank = 0;
    for (uint32_t p = 0; p < m; p++) {
        for (size_t i = 0; i < nlocal[p]; i++, rank++) {
            struct tmember *tm = &tg->mb[p][i];
            tm->nparts = 1 + rng_next() % MAXPARTS;
            size_t cut[MAXPARTS + 1];
            cut[0] = 0;
            cut[tm->nparts] = total;
            for (size_t q = 1; q < tm->nparts; q++)
                cut[q] = rng_next() % (total + 1);
            for (size_t q = 1; q < tm->nparts; q++)
                for (size_t r = q + 1; r < tm->nparts; r++)
                    if (cut[r] < cut[q]) {
                        size_t t = cut[q];
                        cut[q] = cut[r];
                        cut[r] = t;
                    }
            tm->input = malloc(total * sizeof(float));
            ck_assert_ptr_nonnull(tm->input);
            for (size_t j = 0; j < total; j++)
                tm->input[j] = rng_input();
            for (size_t q = 0; q < tm->nparts; q++) {
                size_t len = cut[q + 1] - cut[q];
                tm->part[q] = malloc((len ? len : 1) * sizeof(float));
                ck_assert_ptr_nonnull(tm->part[q]);
                memcpy(tm->part[q], tm->input + cut[q], len * sizeof(float));
                tm->parts[q].data = tm->part[q];
                tm->parts[q].len = len;
            }
            struct pr_engine_member *sm = &tg->spec[p][i];
            sm->rank = rank;
            sm->weight = personal ? 1.0 / (1.0 + rank % 4) : 1.0;
            sm->parts = tm->parts;
            sm->nparts = tm->nparts;
            wsum += sm->weight;
        }
    }
    for (uint32_t p = 0; p < m; p++)
        for (size_t i = 0; i < nlocal[p]; i++)
            tg->spec[p][i].weight /= wsum;
    return tg;
}

static void tg_free(struct tgroup *tg)
{
    for (uint32_t p = 0; p < tg->m; p++) {
        for (size_t i = 0; i < tg->nlocal[p]; i++) {
            struct tmember *tm = &tg->mb[p][i];
            for (size_t q = 0; q < tm->nparts; q++)
                free(tm->part[q]);
            free(tm->input);
        }
    }
    free(tg);
}

static int tg_node(const struct tgroup *tg, uint32_t pos)
{
    return (int)(tg->ring[pos] - NODE0);
}

/*
 * Starts position `pos` from copies of the ring and member arrays that are
 * scribbled over afterwards: start() must have copied them.
 */
static int tg_start_timeout(struct net *net, struct tgroup *tg, uint32_t pos,
                            uint32_t timeout_ms)
{
    uint32_t ring[MAXN];
    struct pr_engine_member local[MAXMB];
    memcpy(ring, tg->ring, sizeof(ring));
    memcpy(local, tg->spec[pos], sizeof(local));
    struct pr_engine_group g = {
        .id = tg->id,
        .total = tg->total,
        .k = tg->k,
        .personal = tg->personal,
        .m = tg->m,
        .pos = pos,
        .ring = ring,
        .local = local,
        .nlocal = tg->nlocal[pos],
        .timeout_ms = timeout_ms,
        .done = done_cb,
        .arg = &tg->done[pos],
    };
    int calls = tg->done[pos].calls;
    uv_update_time(&net->loop);
    in_start = 1;
    int rc = pr_engine_start(E(net, tg_node(tg, pos)), &g);
    in_start = 0;
    ck_assert_int_eq(tg->done[pos].calls, calls);
    memset(ring, 0xff, sizeof(ring));
    memset(local, 0xff, sizeof(local));
    return rc;
}

static int tg_start(struct net *net, struct tgroup *tg, uint32_t pos)
{
    return tg_start_timeout(net, tg, pos, LONG_MS);
}

static void tg_start_all(struct net *net, struct tgroup *tg)
{
    for (uint32_t p = 0; p < tg->m; p++)
        ck_assert_int_eq(tg_start(net, tg, p), 0);
}

static int tg_all_done(struct net *net, void *arg)
{
    struct tgroup *tg = arg;
    for (uint32_t p = 0; p < tg->m; p++)
        if (tg->done[p].calls == 0)
            return 0;
    return quiet(net, NULL);
}

static int pos_done(struct net *net, void *arg)
{
    (void)net;
    return ((struct done_rec *)arg)->calls > 0;
}

static void tg_result(const struct tmember *tm, float *out)
{
    size_t off = 0;
    for (size_t q = 0; q < tm->nparts; q++) {
        memcpy(out + off, tm->part[q], tm->parts[q].len * sizeof(float));
        off += tm->parts[q].len;
    }
}

static void tg_check_done(const struct tgroup *tg, int status)
{
    for (uint32_t p = 0; p < tg->m; p++) {
        ck_assert_msg(tg->done[p].calls == 1,
                      "group %llu pos %u: done() ran %d times",
                      (unsigned long long)tg->id, p, tg->done[p].calls);
        ck_assert_msg(tg->done[p].status == status,
                      "group %llu pos %u: status %d, want %d",
                      (unsigned long long)tg->id, p, tg->done[p].status,
                      status);
    }
}

/* sum_j w_j x_j over the whole group, in double. */
static double *tg_reference(const struct tgroup *tg)
{
    double *ref = calloc(tg->total ? tg->total : 1, sizeof(double));
    ck_assert_ptr_nonnull(ref);
    for (uint32_t p = 0; p < tg->m; p++)
        for (size_t i = 0; i < tg->nlocal[p]; i++)
            for (size_t j = 0; j < tg->total; j++)
                ref[j] += tg->spec[p][i].weight * tg->mb[p][i].input[j];
    return ref;
}

static void check_rel(double got, double want, const struct tgroup *tg,
                      uint32_t p, size_t i, size_t j)
{
    double rel = fabs(got - want) / fabs(want);
    if (rel > 1e-6)
        ck_abort_msg("group %llu total %zu pos %u member %zu [%zu]: %.9g "
                     "vs %.9g (rel %.3g)",
                     (unsigned long long)tg->id, tg->total, p, i, j, got, want,
                     rel);
}

/* Every member holds the weighted mean, bitwise the same everywhere. */
static void tg_check_mean(const struct tgroup *tg)
{
    tg_check_done(tg, 0);
    double *ref = tg_reference(tg);
    float *first = malloc(tg->total * sizeof(float));
    float *res = malloc(tg->total * sizeof(float));
    ck_assert(first && res);
    tg_result(&tg->mb[0][0], first);
    for (uint32_t p = 0; p < tg->m; p++) {
        for (size_t i = 0; i < tg->nlocal[p]; i++) {
            tg_result(&tg->mb[p][i], res);
            for (size_t j = 0; j < tg->total; j++)
                check_rel(res[j], ref[j], tg, p, i, j);
            ck_assert_msg(memcmp(res, first, tg->total * sizeof(float)) == 0,
                          "group %llu pos %u member %zu differs from pos 0",
                          (unsigned long long)tg->id, p, i);
        }
    }
    free(res);
    free(first);
    free(ref);
}

/* Every member holds pr_reduce_personal() of the reference sum. */
static void tg_check_personal(const struct tgroup *tg)
{
    tg_check_done(tg, 0);
    double *ref = tg_reference(tg);
    float *sumf = malloc(tg->total * sizeof(float));
    float *want = malloc(tg->total * sizeof(float));
    float *res = malloc(tg->total * sizeof(float));
    ck_assert(sumf && want && res);
    for (size_t j = 0; j < tg->total; j++)
        sumf[j] = (float)ref[j];
    for (uint32_t p = 0; p < tg->m; p++) {
        for (size_t i = 0; i < tg->nlocal[p]; i++) {
            const struct tmember *tm = &tg->mb[p][i];
            pr_reduce_personal(want, tm->input, sumf, tg->spec[p][i].weight,
                               tg->k, tg->total);
            tg_result(tm, res);
            for (size_t j = 0; j < tg->total; j++)
                check_rel(res[j], want[j], tg, p, i, j);
        }
    }
    free(res);
    free(want);
    free(sumf);
    free(ref);
}

/* The members at position p still hold their inputs, bit for bit. */
static void tg_check_unchanged(const struct tgroup *tg, uint32_t p)
{
    float *res = malloc((tg->total ? tg->total : 1) * sizeof(float));
    ck_assert_ptr_nonnull(res);
    for (size_t i = 0; i < tg->nlocal[p]; i++) {
        tg_result(&tg->mb[p][i], res);
        ck_assert_msg(
            memcmp(res, tg->mb[p][i].input, tg->total * sizeof(float)) == 0,
            "group %llu pos %u member %zu: inputs were changed",
            (unsigned long long)tg->id, p, i);
    }
    free(res);
}

/* ------------------------------------------------------------------ */
/* Correct results                                                      */

static const int rings[6][MAXN] = {
    {0}, {0}, {1, 0}, {2, 0, 1}, {0, 1, 2, 3}, {3, 0, 4, 1, 2},
};

/* One ring of m nodes, all started in order, run to completion. */
static void run_mean_n(uint32_t m, size_t total, size_t chunk, uint64_t seed,
                       int one_member)
{
    struct net *net = net_new((int)m, chunk);
    size_t nlocal[MAXN] = {0};
    for (uint32_t p = 0; p < m; p++)
        nlocal[p] = one_member ? 1 : 1 + (p + total + seed) % MAXMB;
    struct tgroup *tg = tg_new(7, total, m, rings[m], nlocal, 0, seed);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    for (uint32_t p = 0; p < m; p++) {
        struct pr_engine_stats st = stats(net, tg_node(tg, p));
        ck_assert_uint_eq(st.groups_ok, 1);
        ck_assert_uint_eq(st.groups_failed, 0);
        ck_assert_uint_eq(st.chunks_dropped, 0);
        ck_assert_uint_eq(st.bytes_reduced, nlocal[p] * total * sizeof(float));
        ck_assert_uint_eq(pr_engine_running(E(net, tg_node(tg, p))), 0);
    }
    net_free(net);
    tg_check_done(tg, 0); /* still exactly once after destroy */
    tg_free(tg);
}

static void run_mean(uint32_t m, size_t total, size_t chunk, uint64_t seed)
{
    run_mean_n(m, total, chunk, seed, 0);
}

/* One member per node, sent straight from its memory: the same means. */
START_TEST(test_engine_ring_mean_direct)
{
    static const uint32_t ms[] = {2, 3, 5};
    static const size_t totals[] = {1, 7, 1000, 100003};
    static const size_t chunks[] = {1, 64, 4096};
    uint64_t seed = 400;
    direct_sends = 1;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 3; c++) {
                run_mean_n(ms[a], totals[b], chunks[c], seed++, 1);
                run_mean_n(ms[a], totals[b], chunks[c], seed++, 0);
            }
    direct_sends = 0;
}
END_TEST

START_TEST(test_engine_ring_mean)
{
    static const uint32_t ms[] = {1, 2, 3, 5};
    static const size_t totals[] = {1, 2, 7, 1000};
    static const size_t chunks[] = {1, 3, 64, 4096};
    uint64_t seed = 1;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 4; c++)
                run_mean(ms[a], totals[b], chunks[c], seed++);
}
END_TEST

START_TEST(test_engine_ring_mean_large)
{
    static const uint32_t ms[] = {1, 2, 3, 5};
    for (size_t a = 0; a < 4; a++)
        run_mean(ms[a], 1000003, 4096, 100 + a);
    run_mean(3, 1000003, 64, 200);
}
END_TEST

START_TEST(test_engine_ring_mean_four)
{
    run_mean(4, 1000, 3, 300);
    run_mean(4, 3, 1, 301);
}
END_TEST

START_TEST(test_engine_reordered_delivery)
{
    /* Links that reorder chunks, even their own: results stay exact. */
    static const struct {
        uint32_t m;
        size_t total, chunk;
    } cases[] = {
        {2, 1000, 64}, {3, 1000, 3}, {3, 7, 1}, {5, 1000, 16}, {5, 3, 1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct net *net = net_new((int)cases[c].m, cases[c].chunk);
        net->shuffle = 1;
        size_t nlocal[MAXN] = {1, 2, 3, 1, 2};
        struct tgroup *tg = tg_new(2, cases[c].total, cases[c].m,
                                   rings[cases[c].m], nlocal, 0, 80 + c);
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        tg_check_mean(tg);
        net_free(net);
        tg_free(tg);
    }
}
END_TEST

START_TEST(test_engine_mixed_chunk_sizes)
{
    /* Chunk boundaries are the owner's; everyone forwards them as cut. */
    static const size_t chunk[3] = {1, 7, 4096};
    struct net *net = net_new(3, 64);
    for (int i = 0; i < 3; i++)
        pr_engine_set_chunk(E(net, i), chunk[i]);
    pr_engine_set_chunk(E(net, 0), 0); /* ignored */
    static const size_t nlocal[3] = {2, 1, 3};
    struct tgroup *tg = tg_new(1, 1000, 3, rings[3], nlocal, 0, 5);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    /* Node 0 (chunk 1) posted its own segment float by float. */
    size_t start, len;
    pr_ring_segment(1000, 3, 1, &start, &len); /* node 0 is at position 1 */
    ck_assert_uint_ge(net->links[0][1].posted, len);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_personal)
{
    static const struct {
        uint32_t m;
        size_t total, chunk, nlocal[MAXN];
    } cases[] = {
        {1, 1000, 64, {3}},           {1, 5, 64, {1}},
        {2, 1000, 3, {1, 1}},         {3, 1000, 64, {1, 2, 3}},
        {3, 7, 1, {2, 2, 2}},         {5, 1000, 64, {1, 3, 1, 2, 1}},
        {3, 100003, 4096, {2, 1, 2}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct net *net = net_new((int)cases[c].m, cases[c].chunk);
        struct tgroup *tg = tg_new(3, cases[c].total, cases[c].m,
                                   rings[cases[c].m], cases[c].nlocal, 1, c);
        tg_start_all(net, tg);
        run_until(net, tg_all_done, tg);
        if (tg->k == 1)
            tg_check_unchanged(tg, 0); /* k == 1: own model */
        tg_check_personal(tg);
        net_free(net);
        tg_free(tg);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Early chunks                                                         */

START_TEST(test_engine_early_chunks_stashed)
{
    /* Ring 100, 101, 102; segments [0,334) [334,667) [667,1000). */
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {1, 2, 1};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 11);

    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_quiet(net);
    /* Node 1 holds node 0's step-0 chunks of segment 0. */
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, pr_ring_chunks(334, 64));
    ck_assert_uint_eq(stats(net, 2).chunks_stashed, 0);

    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_quiet(net);
    /* Node 2: node 1's own segment (step 0) and segment 0 (step 1). */
    ck_assert_uint_eq(stats(net, 2).chunks_stashed,
                      pr_ring_chunks(333, 64) + pr_ring_chunks(334, 64));
    ck_assert_uint_eq(tg->done[0].calls + tg->done[1].calls, 0);

    ck_assert_int_eq(tg_start(net, tg, 2), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(stats(net, i).chunks_dropped, 0);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_held_chunks_before_start)
{
    /* Start order 2, 0, 1; node 1 gets a burst of chunks before its start. */
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {3, 1, 2};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 12);
    net_hold_all(net, 1);
    ck_assert_int_eq(tg_start(net, tg, 2), 0);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    ck_assert_int_eq(uv_run(&net->loop, UV_RUN_NOWAIT), 1);
    ck_assert_uint_eq(net->links[2][0].queued, pr_ring_chunks(333, 64));
    ck_assert_uint_eq(net->links[0][1].queued, pr_ring_chunks(334, 64));
    ck_assert_uint_eq(net->links[0][1].delivered, 0);

    /* Node 0 applies node 2's segment and forwards it to node 1. */
    link_hold(net, 2, 0, 0);
    link_hold(net, 0, 1, 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed,
                      pr_ring_chunks(334, 64) + pr_ring_chunks(333, 64));
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 0);

    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    net_hold_all(net, 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_stale_chunk_dropped)
{
    static const size_t nlocal[2] = {1, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(5, 100, 2, rings[2], nlocal, 0, 13);
    tg_start_all(net, tg);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);

    float data[50] = {0};
    struct pr_chunk_hdr h = {.group_id = 3, .total = 100, .nfloats = 50};
    pr_engine_on_chunk(E(net, 0), 101, &h, data); /* below the max started */
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 1);
    h.group_id = 5; /* the max started, finished */
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 2);
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 0);
    h.group_id = 6; /* not started yet: kept */
    pr_engine_on_chunk(E(net, 0), 101, &h, data);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, 2);
    ck_assert_uint_eq(stats(net, 0).chunks_stashed, 1);
    tg_check_mean(tg); /* nothing written after done() */
    net_free(net);     /* frees the stashed chunk */
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_stash_full_drops)
{
    /* Room for 8 floats: the second early chunk of 8 does not fit. */
    static const size_t nlocal[2] = {1, 1};
    struct net *net = net_new_stash(2, 8, 8 * sizeof(float));
    struct tgroup *tg = tg_new(1, 32, 2, rings[2], nlocal, 0, 14);
    ck_assert_int_eq(tg_start(net, tg, 1), 0); /* node 0 is at position 1 */
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 1);
    /* The group cannot finish; fail it where it runs. */
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 1, -ECANCELED), 0);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECANCELED);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 0); /* never started */
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_failed_start_releases_stash)
{
    /*
     * A group whose first send fails inside start() must still take its
     * early chunks out of the stash, or they fill it for a minute and the
     * next groups' early chunks are dropped.
     */
    static const size_t nlocal[2] = {1, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new_stash(2, 64, 4 * sizeof(float));
    struct tgroup *g1 = tg_new(1, 8, 2, ring, nlocal, 0, 15);
    struct tgroup *g2 = tg_new(2, 8, 2, ring, nlocal, 0, 16);
    ck_assert_int_eq(tg_start(net, g1, 0), 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1); /* stash now full */

    net->links[1][0].fail = -EPIPE;
    ck_assert_int_eq(tg_start(net, g1, 1), 0);
    run_until(net, pos_done, &g1->done[1]);
    ck_assert_int_eq(g1->done[1].status, -EPIPE);
    tg_check_unchanged(g1, 1);

    ck_assert_int_eq(tg_start(net, g2, 0), 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 2);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);

    pr_engine_link_down(E(net, 0), 101, -EPIPE);
    run_until(net, pos_done, &g2->done[0]);
    ck_assert_int_eq(g1->done[0].status, -EPIPE);
    ck_assert_int_eq(g2->done[0].status, -EPIPE);
    tg_check_unchanged(g1, 0);
    tg_check_unchanged(g2, 0);
    net_free(net);
    ck_assert_int_eq(g1->done[0].calls + g1->done[1].calls, 2);
    ck_assert_int_eq(g2->done[0].calls + g2->done[1].calls, 1);
    tg_free(g1);
    tg_free(g2);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Failures                                                             */

START_TEST(test_engine_send_fails_sync)
{
    static const size_t nlocal[2] = {2, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, rings[2], nlocal, 0, 20);
    /* Ring 101, 100: node 0 is at position 1 and sends to node 1. */
    net->links[0][1].fail = -EPIPE;
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    ck_assert_int_eq(tg_start(net, tg, 1), 0); /* first send fails inside */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPIPE);
    ck_assert_uint_eq(stats(net, 0).groups_failed, 1);
    /* Node 1 waits for node 0 until its transport reports the loss. */
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    pr_engine_link_down(E(net, 1), 100, -EPIPE);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -EPIPE);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    tg_check_done(tg, -EPIPE);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_send_fails_async)
{
    static const size_t nlocal[3] = {1, 2, 1};
    static const int ring[3] = {0, 1, 2};
    struct net *net = net_new(3, 16);
    struct tgroup *tg = tg_new(1, 1000, 3, ring, nlocal, 0, 21);
    /* Node 1's fourth send to node 2 completes with -EIO; later ones too. */
    net->links[1][2].fail_cb = -EIO;
    net->links[1][2].fail_after = 3;
    tg_start_all(net, tg);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EIO);
    run_quiet(net);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 0);
    pr_engine_link_down(E(net, 0), 101, -EIO);
    pr_engine_link_down(E(net, 2), 101, -EIO);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -EIO);
    for (uint32_t p = 0; p < 3; p++)
        tg_check_unchanged(tg, p);
    net_free(net);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_link_down_mid_group)
{
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {2, 2, 2};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(9, 1000, 3, ring, nlocal, 0, 22);
    link_hold(net, 2, 0, 1); /* the ring cannot close */
    tg_start_all(net, tg);
    run_quiet(net);
    size_t held = net->links[2][0].queued;
    /* Own segment, then segments 1 (step 1) and 0 (step 2) forwarded. */
    ck_assert_uint_eq(held, 3 * 6);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(pr_engine_running(E(net, i)), 1);

    pr_engine_link_down(E(net, 1), 104, -ECONNRESET); /* not in the ring */
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 1);
    pr_engine_link_down(E(net, 1), 102, -ECONNRESET);
    ck_assert_uint_eq(pr_engine_running(E(net, 1)), 0);
    ck_assert_int_eq(tg->done[1].calls, 0); /* not from inside the call */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -ECONNRESET);

    pr_engine_link_down(E(net, 0), 102, -ECONNRESET);
    pr_engine_link_down(E(net, 2), 101, -ECONNRESET);
    run_until(net, tg_all_done, tg);
    tg_check_done(tg, -ECONNRESET);

    /* The held chunks now reach a finished group: dropped as stale. */
    link_hold(net, 2, 0, 0);
    run_quiet(net);
    ck_assert_uint_eq(stats(net, 0).chunks_dropped, held);
    for (uint32_t p = 0; p < 3; p++)
        tg_check_unchanged(tg, p);
    net_free(net);
    tg_check_done(tg, -ECONNRESET);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_deadline)
{
    static const size_t nlocal[2] = {2, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 23);
    net->links[0][1].drop = 1; /* node 1 never hears of it */
    uint64_t t0 = uv_hrtime();
    ck_assert_int_eq(tg_start_timeout(net, tg, 0, 100), 0);
    run_until(net, pos_done, &tg->done[0]);
    uint64_t ms = (uv_hrtime() - t0) / 1000000;
    ck_assert_int_eq(tg->done[0].status, -ETIMEDOUT);
    ck_assert_uint_ge(ms, 99);
    ck_assert_uint_lt(ms, 400);
    ck_assert_uint_eq(stats(net, 0).groups_failed, 1);
    tg_check_unchanged(tg, 0);
    /* Nothing else keeps the loop alive once the group is gone. */
    ck_assert_int_eq(uv_run(&net->loop, UV_RUN_DEFAULT), 0);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 0);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_abort)
{
    static const size_t nlocal[2] = {1, 2};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(4, 1000, 2, rings[2], nlocal, 0, 24);
    net_hold_all(net, 1);
    tg_start_all(net, tg);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 99, -ECANCELED), -ENOENT);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 4, -ECANCELED), 0);
    ck_assert_int_eq(pr_engine_abort(E(net, 1), 4, -EINTR), -ENOENT);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 4, -EINTR), 0);
    ck_assert_int_eq(tg->done[0].calls + tg->done[1].calls, 0);
    /* Their sends are still posted: they drain after done(). */
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED); /* ring 101, 100 */
    ck_assert_int_eq(tg->done[1].status, -EINTR);
    net_hold_all(net, 0);
    run_quiet(net);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 4, -EINTR), -ENOENT);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_cancels_running)
{
    static const size_t nlocal[2] = {2, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 100, 2, ring, nlocal, 0, 25);
    net->links[0][1].drop = 1;
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    run_quiet(net); /* every send has completed */
    destroy_node(net, 0);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_with_sends_posted)
{
    /* destroy() may come first; the engine goes with the last completion. */
    static const size_t nlocal[2] = {1, 1};
    static const int ring[2] = {0, 1};
    struct net *net = net_new(2, 16);
    struct tgroup *tg = tg_new(1, 100, 2, ring, nlocal, 0, 27);
    link_hold(net, 0, 1, 1);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    size_t posted = net->links[0][1].queued;
    ck_assert_uint_eq(posted, pr_ring_chunks(50, 16));
    destroy_node(net, 0);
    ck_assert_int_eq(tg->done[0].calls, 1);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    /* The transport closes: one send went out, the others fail. */
    net->links[0][1].fail_cb = -ECANCELED;
    net->links[0][1].fail_after = 1;
    link_hold(net, 0, 1, 0);
    run_quiet(net);
    ck_assert_uint_eq(net->links[0][1].processed, posted);
    ck_assert_uint_eq(net->links[0][1].delivered, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls, 1);
    tg_free(tg);
}
END_TEST

START_TEST(test_engine_destroy_reports_finished_group)
{
    /*
     * A group that finished but whose done() has not run yet keeps its
     * outcome: results already written are reported as success, not as a
     * cancellation that claims the inputs are untouched.
     */
    static const size_t nlocal[1] = {3};
    struct net *net = net_new(1, 64);
    struct tgroup *tg = tg_new(1, 100, 1, rings[1], nlocal, 0, 26);
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    destroy_node(net, 0);
    tg_check_mean(tg);
    net_free(net);
    tg_check_mean(tg);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Bad chunks                                                           */

struct bad_case {
    const char *name;
    size_t npre; /* valid-looking chunks sent first */
    struct pr_chunk_hdr pre[3];
    struct pr_chunk_hdr bad;
    uint32_t from;
};

/*
 * Node 101 at position 1 of the ring 100, 101, 102 with 12 floats:
 * segments [0,4) [4,8) [8,12); step 0 brings segment 0 from node 100,
 * step 1 segment 2, step 2 segment 1, step 3 segment 0.
 */
#define H(off, n, step, seg)                                                   \
    {                                                                          \
        1, 12, off, n, step, seg                                               \
    }
static const struct bad_case bad_cases[] = {
    {"total too large", 0, {{0}}, {1, 13, 0, 4, 0, 0}, 100},
    {"total too small", 0, {{0}}, {1, 11, 0, 4, 0, 0}, 100},
    {"wrong segment", 0, {{0}}, H(4, 4, 0, 1), 100},
    {"step out of range", 0, {{0}}, H(0, 4, 4, 0), 100},
    {"step huge", 0, {{0}}, H(0, 4, UINT32_MAX, 0), 100},
    {"from the right neighbour", 0, {{0}}, H(0, 4, 0, 0), 102},
    {"from a stranger", 0, {{0}}, H(0, 4, 0, 0), 7},
    {"more than the segment", 0, {{0}}, H(0, 5, 0, 0), 100},
    {"past the segment end", 0, {{0}}, H(1, 4, 0, 0), 100},
    {"before the segment", 0, {{0}}, H(7, 2, 1, 2), 100},
    {"offset wraps around", 0, {{0}}, H(UINT64_MAX - 1, 2, 0, 0), 100},
    {"offset wraps, later step", 0, {{0}}, H(UINT64_MAX - 1, 4, 1, 2), 100},
    {"duplicate chunk", 1, {H(0, 4, 0, 0)}, H(0, 4, 0, 0), 100},
    {"overlapping chunks", 1, {H(0, 3, 0, 0)}, H(1, 3, 0, 0), 100},
    {"empty chunk, non-empty segment", 0, {{0}}, H(0, 0, 0, 0), 100},
    {"empty chunks after a full step",
     3,
     {H(0, 4, 0, 0), H(4, 0, 0, 0), H(4, 0, 0, 0)},
     H(4, 0, 0, 0),
     100},
};
#undef H
#define NBAD (int)(sizeof(bad_cases) / sizeof(bad_cases[0]))

START_TEST(test_engine_bad_chunk)
{
    const struct bad_case *bc = &bad_cases[_i];
    static const int ring[3] = {0, 1, 2};
    static const size_t nlocal[3] = {0, 2, 0};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(1, 12, 3, ring, nlocal, 0, 30 + (uint64_t)_i);
    net->links[1][2].drop = 1;
    /* A short deadline turns a missed check into a failure, not a hang. */
    ck_assert_int_eq(tg_start_timeout(net, tg, 1, 2000), 0);
    run_quiet(net);
    float data[16];
    for (int i = 0; i < 16; i++)
        data[i] = 1.0f;
    /* The engine may read at most nfloats floats of `data`. */
    for (size_t i = 0; i < bc->npre; i++)
        pr_engine_on_chunk(E(net, 1), 100, &bc->pre[i], data);
    struct pr_chunk_hdr h = bc->bad;
    pr_engine_on_chunk(E(net, 1), bc->from, &h, data);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_msg(tg->done[1].status == -EPROTO, "%s: status %d", bc->name,
                  tg->done[1].status);
    ck_assert_uint_eq(stats(net, 1).groups_failed, 1);
    tg_check_unchanged(tg, 1);
    /* A chunk after the failure changes nothing. */
    struct pr_chunk_hdr ok = {1, 12, 0, 4, 0, 0};
    pr_engine_on_chunk(E(net, 1), 100, &ok, data);
    run_quiet(net);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[1].calls, 1);
    tg_free(tg);
}
END_TEST

static const struct {
    enum field f;
    uint64_t value;
} corruptions[] = {
    {F_TOTAL, 1001}, {F_OFF, 999}, {F_STEP, 2}, {F_SEG, 1}, {F_FROM, 103},
};
#define NCORRUPT (int)(sizeof(corruptions) / sizeof(corruptions[0]))

START_TEST(test_engine_corrupt_header)
{
    /* A live ring of two; node 0's first chunk to node 1 is corrupted. */
    static const int ring[2] = {0, 1};
    static const size_t nlocal[2] = {1, 2};
    struct net *net = net_new(2, 64);
    struct tgroup *tg = tg_new(1, 1000, 2, ring, nlocal, 0, 40);
    net->links[0][1].corrupt = corruptions[_i].f;
    net->links[0][1].corrupt_value = corruptions[_i].value;
    net->links[0][1].corrupt_at = 0;
    tg_start_all(net, tg);
    run_until(net, pos_done, &tg->done[1]);
    ck_assert_int_eq(tg->done[1].status, -EPROTO);
    /* Node 0 would wait for the deadline; its control plane aborts it. */
    run_quiet(net);
    ck_assert_int_eq(pr_engine_abort(E(net, 0), 1, -ECANCELED), 0);
    run_until(net, tg_all_done, tg);
    ck_assert_int_eq(tg->done[0].status, -ECANCELED);
    tg_check_unchanged(tg, 0);
    tg_check_unchanged(tg, 1);
    net_free(net);
    ck_assert_int_eq(tg->done[0].calls + tg->done[1].calls, 2);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* start() arguments                                                    */

START_TEST(test_engine_start_invalid_args)
{
    static const size_t nlocal[2] = {2, 1};
    struct net *net = net_new(3, 64);
    struct tgroup *tg = tg_new(5, 10, 2, rings[2], nlocal, 0, 50);
    struct done_rec never = {.id = 5};
    const struct pr_engine_group good = {
        .id = 5,
        .total = 10,
        .k = 3,
        .m = 2,
        .pos = 0,
        .ring = tg->ring,
        .local = tg->spec[0],
        .nlocal = 2,
        .timeout_ms = LONG_MS,
        .done = done_cb,
        .arg = &never,
    };
    struct pr_engine *e1 = E(net, 1); /* ring 101, 100: position 0 */
    struct pr_engine_group g;
    struct pr_engine_part short_part = {tg->mb[0][0].part[0], 1};
    struct pr_engine_member bad_mb[2];

    in_start = 1;
    g = good, g.nlocal = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.local = NULL;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.m = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.pos = 2;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.ring = NULL;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.k = 1;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.total = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    g = good, g.total = 11;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    memcpy(bad_mb, tg->spec[0], sizeof(bad_mb));
    bad_mb[1].parts = &short_part, bad_mb[1].nparts = 1;
    g = good, g.local = bad_mb;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    bad_mb[1].nparts = 0;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EINVAL);
    in_start = 0;

    /* Missing links: right neighbour, then left neighbour. */
    static const uint32_t ring3[3] = {101, 100, 102};
    net->links[1][0].up = 0;
    in_start = 1;
    g = good;
    ck_assert_int_eq(pr_engine_start(e1, &g), -ENOTCONN);
    in_start = 0;
    net->links[1][0].up = 1;
    net->links[1][2].up = 0;
    in_start = 1;
    g = good, g.ring = ring3, g.m = 3, g.id = 7;
    ck_assert_int_eq(pr_engine_start(e1, &g), -ENOTCONN);
    in_start = 0;
    net->links[1][2].up = 1;
    ck_assert_uint_eq(pr_engine_running(e1), 0);

    /* None of them counts as started: an early chunk for 7 is kept. */
    float data[4] = {0};
    struct pr_chunk_hdr h = {.group_id = 7, .total = 10, .nfloats = 4};
    pr_engine_on_chunk(e1, 102, &h, data);
    ck_assert_uint_eq(stats(net, 1).chunks_stashed, 1);
    ck_assert_uint_eq(stats(net, 1).chunks_dropped, 0);

    /* The real group, then a duplicate of it. */
    ck_assert_int_eq(tg_start(net, tg, 0), 0);
    in_start = 1;
    g = good;
    ck_assert_int_eq(pr_engine_start(e1, &g), -EEXIST);
    in_start = 0;
    ck_assert_int_eq(tg_start(net, tg, 1), 0);
    run_until(net, tg_all_done, tg);
    tg_check_mean(tg);
    net_free(net);
    ck_assert_int_eq(never.calls, 0);
    tg_check_done(tg, 0);
    tg_free(tg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Several groups at once                                               */

START_TEST(test_engine_groups_in_flight)
{
    struct net *net = net_new(4, 64);
    static const int r1[4] = {0, 1, 2, 3}, r2[2] = {2, 0}, r3[1] = {1},
                     r4[3] = {3, 1, 0}, r5[4] = {1, 3, 0, 2};
    static const size_t n1[4] = {1, 2, 1, 1}, n2[2] = {2, 1}, n3[1] = {3},
                        n4[3] = {1, 1, 2}, n5[4] = {1, 1, 1, 2};
    struct tgroup *g1 = tg_new(1, 1000, 4, r1, n1, 0, 61);
    struct tgroup *g2 = tg_new(2, 7, 2, r2, n2, 0, 62);
    struct tgroup *g3 = tg_new(3, 1000, 1, r3, n3, 0, 63);
    struct tgroup *g4 = tg_new(4, 20000, 3, r4, n4, 0, 64);
    struct tgroup *g5 = tg_new(5, 333, 4, r5, n5, 1, 65);

    /* Each node starts its groups in id order; nodes interleave. */
    ck_assert_int_eq(tg_start(net, g1, 0), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g1, 2), 0); /* node 2 */
    ck_assert_int_eq(tg_start(net, g2, 0), 0); /* node 2 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g2, 1), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g1, 1), 0); /* node 1 */
    ck_assert_int_eq(tg_start(net, g4, 2), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g3, 0), 0); /* node 1 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g5, 2), 0); /* node 0 */
    ck_assert_int_eq(tg_start(net, g4, 1), 0); /* node 1 */
    ck_assert_int_eq(tg_start(net, g5, 3), 0); /* node 2 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g1, 3), 0); /* node 3 */
    ck_assert_int_eq(tg_start(net, g5, 0), 0); /* node 1 */
    uv_run(&net->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(tg_start(net, g4, 0), 0); /* node 3 */
    ck_assert_int_eq(tg_start(net, g5, 1), 0); /* node 3 */

    run_until(net, tg_all_done, g1);
    run_until(net, tg_all_done, g2);
    run_until(net, tg_all_done, g3);
    run_until(net, tg_all_done, g4);
    run_until(net, tg_all_done, g5);
    tg_check_mean(g1);
    tg_check_mean(g2);
    tg_check_mean(g3);
    tg_check_mean(g4);
    tg_check_personal(g5);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(stats(net, i).chunks_dropped, 0);
        ck_assert_uint_eq(pr_engine_running(E(net, i)), 0);
    }
    ck_assert_uint_eq(stats(net, 0).groups_ok, 4);
    ck_assert_uint_eq(stats(net, 1).groups_ok, 4);
    ck_assert_uint_eq(stats(net, 2).groups_ok, 3);
    ck_assert_uint_eq(stats(net, 3).groups_ok, 3);
    net_free(net);
    tg_free(g1);
    tg_free(g2);
    tg_free(g3);
    tg_free(g4);
    tg_free(g5);
}
END_TEST

/* done() may start the next group on the same engine. */
struct chain {
    struct net *net;
    struct tgroup *next;
    struct done_rec rec;
};

static void chain_done(void *arg, uint64_t id, int status)
{
    struct chain *c = arg;
    done_cb(&c->rec, id, status);
    if (c->next) {
        ck_assert_int_eq(tg_start(c->net, c->next, 0), 0);
        c->next = NULL;
    }
}

START_TEST(test_engine_done_starts_next_group)
{
    static const size_t nlocal[1] = {2};
    struct net *net = net_new(1, 64);
    struct tgroup *g1 = tg_new(1, 50, 1, rings[1], nlocal, 0, 70);
    struct tgroup *g2 = tg_new(2, 60, 1, rings[1], nlocal, 0, 71);
    struct chain c = {net, g2, {.id = 1}};
    struct pr_engine_group g = {
        .id = 1,
        .total = 50,
        .k = 2,
        .m = 1,
        .ring = g1->ring,
        .local = g1->spec[0],
        .nlocal = 2,
        .timeout_ms = LONG_MS,
        .done = chain_done,
        .arg = &c,
    };
    in_start = 1;
    ck_assert_int_eq(pr_engine_start(E(net, 0), &g), 0);
    in_start = 0;
    run_until(net, tg_all_done, g2);
    ck_assert_int_eq(c.rec.calls, 1);
    ck_assert_int_eq(c.rec.status, 0);
    g1->done[0] = c.rec;
    tg_check_mean(g1);
    tg_check_mean(g2);
    net_free(net);
    tg_free(g1);
    tg_free(g2);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");

    TCase *tc = tcase_create("results");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_engine_ring_mean);
    tcase_add_test(tc, test_engine_ring_mean_direct);
    tcase_add_test(tc, test_engine_ring_mean_large);
    tcase_add_test(tc, test_engine_ring_mean_four);
    tcase_add_test(tc, test_engine_reordered_delivery);
    tcase_add_test(tc, test_engine_mixed_chunk_sizes);
    tcase_add_test(tc, test_engine_personal);
    tcase_add_test(tc, test_engine_groups_in_flight);
    tcase_add_test(tc, test_engine_done_starts_next_group);
    suite_add_tcase(s, tc);

    tc = tcase_create("stash");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_early_chunks_stashed);
    tcase_add_test(tc, test_engine_held_chunks_before_start);
    tcase_add_test(tc, test_engine_stale_chunk_dropped);
    tcase_add_test(tc, test_engine_stash_full_drops);
    tcase_add_test(tc, test_engine_failed_start_releases_stash);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_send_fails_sync);
    tcase_add_test(tc, test_engine_send_fails_async);
    tcase_add_test(tc, test_engine_link_down_mid_group);
    tcase_add_test(tc, test_engine_deadline);
    tcase_add_test(tc, test_engine_abort);
    tcase_add_test(tc, test_engine_destroy_cancels_running);
    tcase_add_test(tc, test_engine_destroy_with_sends_posted);
    tcase_add_test(tc, test_engine_destroy_reports_finished_group);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_chunks");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_engine_bad_chunk, 0, NBAD);
    tcase_add_loop_test(tc, test_engine_corrupt_header, 0, NCORRUPT);
    suite_add_tcase(s, tc);

    tc = tcase_create("start");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_engine_start_invalid_args);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The failure tests make the engine warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    SRunner *sr = srunner_create(engine_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
