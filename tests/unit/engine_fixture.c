/* SPDX-License-Identifier: MIT */
/*
 * The reduce engine tests' fixture (engine_fixture.h): in-memory links,
 * loop helpers, and groups spread over the network with their checks.
 */
#include "tests/unit/engine_fixture.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/reduce.h"
#include "daemon/engine/xport.h"

/* The memlink that embeds a struct pr_link. */
#define container_of(p, type, field)                                           \
    ((type *)((char *)(p)-offsetof(type, field)))

int in_start;
int direct_sends;
unsigned reduce_threads; /* 0: from the environment */

static unsigned test_threads(void)
{
    if (reduce_threads == 0) {
        const char *v = getenv("PR_TEST_REDUCE_THREADS");
        reduce_threads = v && atoi(v) > 0 ? (unsigned)atoi(v) : 1;
    }
    return reduce_threads;
}

/* Inputs and part cuts; tg_new() seeds it, shuffled delivery draws from it. */
static uint64_t rng_state;

/* ------------------------------------------------------------------ */
/* In-memory links                                                      */

struct msg {
    struct msg *next;
    struct pr_chunk_hdr h;
    pr_send_cb cb;
    void *arg;
    max_align_t data[]; /* the payload, pr_chunk_payload_bytes() */
};

static void idle_cb(uv_idle_t *h);

static void net_kick(struct net *net)
{
    if (!uv_is_active((uv_handle_t *)&net->idle))
        ck_assert_int_eq(uv_idle_start(&net->idle, idle_cb), 0);
}

static int ml_send(struct pr_link *base, const struct pr_chunk_hdr *h,
                   const void *data, pr_send_cb cb, void *arg)
{
    struct memlink *l = container_of(base, struct memlink, base);
    ck_assert_uint_eq(base->node_id, NODE0 + (uint32_t)l->to);
    if (l->fail)
        return l->fail;
    size_t bytes = pr_chunk_payload_bytes(h);
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

/*
 * As a real transport drops a stalled link: what is queued fails, now,
 * and what was landing from the peer over it (a TCP connection carries
 * both ways) ends with the same status, half of it written.
 */
static void ml_reset(struct pr_link *base, int status)
{
    struct memlink *l = container_of(base, struct memlink, base);
    l->resets++;
    while (l->head) {
        struct msg *m = l->head;
        l->head = m->next;
        l->queued--;
        l->processed++;
        m->cb(m->arg, status);
        free(m);
    }
    l->tail = &l->head;
    link_land_release(l->net, l->to, l->from, status);
}

static const struct pr_link_ops ml_ops = {.send = ml_send, .reset = ml_reset};

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
            pr_chunk_payload_bytes(&h);
        if (l->land)
            memlink_land(l, dst, from, &h, m->data);
        else
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

void link_hold(struct net *net, int a, int b, int hold)
{
    net->links[a][b].hold = hold;
    if (!hold && net->links[a][b].head)
        net_kick(net);
}

void net_hold_all(struct net *net, int hold)
{
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            link_hold(net, a, b, hold);
}

size_t link_deliver(struct net *net, int a, int b, size_t n)
{
    struct memlink *l = &net->links[a][b];
    size_t done = 0;
    for (; done < n && l->head; done++)
        deliver(l, &l->head);
    return done;
}

static struct pr_link *resolve(void *ctx, uint32_t node_id)
{
    struct node *nd = ctx;
    if (node_id < NODE0 || node_id >= NODE0 + (uint32_t)nd->net->n)
        return NULL;
    struct memlink *l = &nd->net->links[nd->idx][node_id - NODE0];
    return l->up ? &l->base : NULL;
}

struct net *net_new_stash(int n, size_t chunk, size_t stash_max)
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
            l->land_fail_at = SIZE_MAX;
            l->held_tail = &l->held;
        }
        net->nodes[a].net = net;
        net->nodes[a].idx = a;
        net->nodes[a].e = pr_engine_create(&net->loop, chunk, stash_max,
                                           resolve, &net->nodes[a]);
        ck_assert_ptr_nonnull(net->nodes[a].e);
        pr_engine_set_direct(net->nodes[a].e, direct_sends);
        ck_assert_int_eq(pr_engine_set_threads(net->nodes[a].e, test_threads()),
                         0);
    }
    return net;
}

struct net *net_new(int n, size_t chunk)
{
    return net_new_stash(n, chunk, STASH_MAX);
}

size_t net_queued(const struct net *net, int held_too)
{
    size_t q = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            if (held_too || !net->links[a][b].hold)
                q += net->links[a][b].queued;
    return q;
}

void destroy_node(struct net *net, int idx)
{
    pr_engine_destroy(net->nodes[idx].e);
    net->nodes[idx].e = NULL;
}

void net_free(struct net *net)
{
    ck_assert_msg(net_queued(net, 1) == 0, "%zu chunks still queued",
                  net_queued(net, 1));
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            ck_assert_msg(net->links[a][b].nheld == 0,
                          "link %d -> %d: %zu landings still held", a, b,
                          net->links[a][b].nheld);
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
void run_until(struct net *net, pred_fn pred, void *arg)
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

int quiet(struct net *net, void *arg)
{
    (void)arg;
    return net_queued(net, 0) == 0;
}

void run_quiet(struct net *net)
{
    run_until(net, quiet, NULL);
}

void run_turns(struct net *net)
{
    for (int i = 0; i < 3; i++)
        uv_run(&net->loop, UV_RUN_NOWAIT);
}

struct pr_engine_stats stats(struct net *net, int idx)
{
    struct pr_engine_stats st;
    pr_engine_stats(E(net, idx), &st);
    return st;
}

/* ------------------------------------------------------------------ */
/* Groups spread over the network                                       */

uint64_t rng_next(void)
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

void done_cb(void *arg, uint64_t id, int status)
{
    struct done_rec *d = arg;
    ck_assert_msg(!in_start, "done() ran inside pr_engine_start()");
    ck_assert_uint_eq(id, d->id);
    d->calls++;
    d->status = status;
}

/* Weights: uniform 1/k, or normalised staleness-like ones. */
struct tgroup *tg_new(uint64_t id, size_t total, uint32_t m,
                      const int *ring_idx, const size_t *nlocal,
                      enum tg_weights weights, uint64_t seed)
{
    struct tgroup *tg = calloc(1, sizeof(*tg));
    ck_assert_ptr_nonnull(tg);
    rng_state = seed * 0x9e3779b97f4a7c15ULL + 1;
    tg->id = id;
    tg->total = total;
    tg->m = m;
    tg->personal = weights == TG_PERSONAL;
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
            sm->weight = weights != TG_UNIFORM ? 1.0 / (1.0 + rank % 4) : 1.0;
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

void tg_free(struct tgroup *tg)
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

void tg_set_in_place(struct tgroup *tg, uint32_t p, int in_place)
{
    for (size_t i = 0; i < tg->nlocal[p]; i++)
        tg->spec[p][i].in_place = in_place;
}

int tg_node(const struct tgroup *tg, uint32_t pos)
{
    return (int)(tg->ring[pos] - NODE0);
}

/* 1 if some member weighs other than 1/k, as the node tells its engine. */
static int tg_weighted(const struct tgroup *tg)
{
    for (uint32_t p = 0; p < tg->m; p++)
        for (size_t i = 0; i < tg->nlocal[p]; i++)
            if (fabs(tg->spec[p][i].weight - 1.0 / tg->k) > 1e-12)
                return 1;
    return 0;
}

int tg_start_timeout(struct net *net, struct tgroup *tg, uint32_t pos,
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
        .weighted = tg_weighted(tg),
        .m = tg->m,
        .pos = pos,
        .ring = ring,
        .local = local,
        .nlocal = tg->nlocal[pos],
        .timeout_ms = timeout_ms,
        .wire = tg->wire,
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

int tg_start(struct net *net, struct tgroup *tg, uint32_t pos)
{
    return tg_start_timeout(net, tg, pos, LONG_MS);
}

void tg_start_all(struct net *net, struct tgroup *tg)
{
    for (uint32_t p = 0; p < tg->m; p++)
        ck_assert_int_eq(tg_start(net, tg, p), 0);
}

int tg_all_done(struct net *net, void *arg)
{
    struct tgroup *tg = arg;
    for (uint32_t p = 0; p < tg->m; p++)
        if (tg->done[p].calls == 0)
            return 0;
    return quiet(net, NULL);
}

int pos_done(struct net *net, void *arg)
{
    (void)net;
    return ((struct done_rec *)arg)->calls > 0;
}

void tg_result(const struct tmember *tm, float *out)
{
    size_t off = 0;
    for (size_t q = 0; q < tm->nparts; q++) {
        memcpy(out + off, tm->part[q], tm->parts[q].len * sizeof(float));
        off += tm->parts[q].len;
    }
}

void tg_check_done(const struct tgroup *tg, int status)
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
                if (tg->spec[p][i].weight != 0) /* healing: not read */
                    ref[j] += tg->spec[p][i].weight * tg->mb[p][i].input[j];
    return ref;
}

static void check_rel(double got, double want, const struct tgroup *tg,
                      uint32_t p, size_t i, size_t j)
{
    if (got == want)
        return;
    double rel = fabs(got - want) / fabs(want);
    if (!(rel <= 1e-6)) /* a NaN fails too */
        ck_abort_msg("group %llu total %zu pos %u member %zu [%zu]: %.9g "
                     "vs %.9g (rel %.3g)",
                     (unsigned long long)tg->id, tg->total, p, i, j, got, want,
                     rel);
}

void tg_check_mean(const struct tgroup *tg)
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

void tg_check_mean_at(const struct tgroup *tg, uint32_t p)
{
    double *ref = tg_reference(tg);
    float *res = malloc((tg->total ? tg->total : 1) * sizeof(float));
    ck_assert_ptr_nonnull(res);
    for (size_t i = 0; i < tg->nlocal[p]; i++) {
        tg_result(&tg->mb[p][i], res);
        for (size_t j = 0; j < tg->total; j++)
            check_rel(res[j], ref[j], tg, p, i, j);
    }
    free(res);
    free(ref);
}

void tg_check_personal(const struct tgroup *tg)
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

void tg_check_unchanged(const struct tgroup *tg, uint32_t p)
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
/* Whole rings                                                          */

const int rings[6][MAXN] = {
    {0}, {0}, {1, 0}, {2, 0, 1}, {0, 1, 2, 3}, {3, 0, 4, 1, 2},
};

void run_mean_n(uint32_t m, size_t total, size_t chunk, uint64_t seed,
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

void run_mean(uint32_t m, size_t total, size_t chunk, uint64_t seed)
{
    run_mean_n(m, total, chunk, seed, 0);
}
