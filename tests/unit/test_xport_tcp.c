/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport's link set-up, with real sockets on loopback and a
 * private loop: transports of made-up node ids that connect to each other
 * (the lower id listens, the higher one dials). Each test closes every
 * handle and checks uv_loop_close() == 0.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/xport/tcp/xport_tcp.h"
#include "daemon/xport/tcp/xport_tcp_int.h"
#include "tests/check_run.h"

#define LIMIT_MS 5000

struct world {
    uv_loop_t loop;
    uv_timer_t limit; /* ends a test that would hang */
    uv_check_t check; /* runs the test's step at the end of each turn */
    int (*step)(struct world *w);
    struct pr_tcp_xport *x[3];
    char addr[64];
    int sends, send_status;
    struct pr_conn *first; /* the link a replacement is compared with */
    int replaced;
};

static void limit_cb(uv_timer_t *t)
{
    struct world *w = t->data;
    uv_stop(&w->loop);
}

static void check_cb(uv_check_t *h)
{
    struct world *w = h->data;
    if (w->step && w->step(w))
        uv_stop(&w->loop);
}

static void world_init(struct world *w, int (*step)(struct world *w))
{
    memset(w, 0, sizeof(*w));
    ck_assert_int_eq(uv_loop_init(&w->loop), 0);
    uv_timer_init(&w->loop, &w->limit);
    uv_check_init(&w->loop, &w->check);
    w->limit.data = w;
    w->check.data = w;
    w->step = step;
    w->send_status = 1;
    uv_timer_start(&w->limit, limit_cb, LIMIT_MS, 0);
    uv_check_start(&w->check, check_cb);
}

/* Transport 0 is node 1 and listens; w->addr is where. */
static void listen_first(struct world *w)
{
    uint16_t port = 0;
    w->x[0] = pr_tcp_xport_create(&w->loop, 1, 1 << 20, LIMIT_MS);
    ck_assert_ptr_nonnull(w->x[0]);
    ck_assert_int_eq(pr_tcp_xport_listen(w->x[0], "127.0.0.1", 0, &port), 0);
    snprintf(w->addr, sizeof(w->addr), "127.0.0.1:%u", port);
}

/* Node `id` (transport i) dials node 1. */
static void dial_first(struct world *w, int i, uint32_t id)
{
    w->x[i] = pr_tcp_xport_create(&w->loop, id, 1 << 20, LIMIT_MS);
    ck_assert_ptr_nonnull(w->x[i]);
    struct pr_tcp_peer_info pi = {1, w->addr};
    ck_assert_int_eq(pr_tcp_xport_set_peers(w->x[i], &pi, 1), 0);
}

static void world_fini(struct world *w)
{
    for (int i = 0; i < 3; i++)
        pr_tcp_xport_destroy(w->x[i]);
    uv_close((uv_handle_t *)&w->limit, NULL);
    uv_close((uv_handle_t *)&w->check, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&w->loop), 0);
}

static void send_cb(void *arg, int status)
{
    struct world *w = arg;
    w->sends++;
    w->send_status = status;
}

static int sent(struct world *w)
{
    return w->sends > 0;
}

/*
 * A chunk queued for a peer that has not connected yet goes once it has,
 * whatever its size: the link's frame limit is the data limit by then,
 * not the small one of a connection that has not said hello.
 */
START_TEST(test_xport_tcp_queued_chunk_goes_when_peer_connects)
{
    struct world w;
    world_init(&w, sent);
    listen_first(&w);
    /* Node 1 waits for node 2 to dial (the higher id connects). */
    struct pr_tcp_peer_info pi = {2, "127.0.0.1:1"};
    ck_assert_int_eq(pr_tcp_xport_set_peers(w.x[0], &pi, 1), 0);
    static float data[8192]; /* 32 KiB: well over a hello's frame */
    struct pr_chunk_hdr h = {
        .group_id = 1, .total = 16384, .off = 0, .nfloats = 8192};
    struct pr_link *l = pr_tcp_xport_link(w.x[0], 2);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->ops->send(l, &h, data, send_cb, &w), 0);
    ck_assert_int_eq(w.sends, 0); /* queued */
    dial_first(&w, 1, 2);
    uv_run(&w.loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(w.sends, 1);
    ck_assert_int_eq(w.send_status, 0);
    struct pr_tcp_xport_stats st;
    pr_tcp_xport_stats(w.x[0], &st);
    ck_assert_uint_eq(st.bytes_sent, sizeof(data));
    world_fini(&w);
}
END_TEST

/*
 * Node 2 dials node 1 twice (a restarted daemon): the second connection
 * replaces the first. When node 1 drops the peer in the same loop turn
 * (here: its transport is destroyed), the first connection's close
 * callback must not reach the freed peer (make asan reports it if so).
 */
static int replace_step(struct world *w)
{
    if (!w->x[0])
        return 0;
    struct tpeer *p = pr_tcp_peer_find(w->x[0], 2);
    if (!p || !p->conn || p->state != P_UP)
        return 0;
    if (!w->first) {
        w->first = p->conn;
        dial_first(w, 2, 2); /* the restarted node 2 */
        return 0;
    }
    if (p->conn == w->first)
        return 0;
    w->replaced = 1;
    pr_tcp_xport_destroy(w->x[0]);
    w->x[0] = NULL;
    return 1;
}

START_TEST(test_xport_tcp_replaced_link_then_peer_gone)
{
    struct world w;
    world_init(&w, replace_step);
    listen_first(&w);
    dial_first(&w, 1, 2);
    uv_run(&w.loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(w.replaced, 1);
    world_fini(&w);
}
END_TEST

/*
 * Node 2 comes back to the scheduler as node 3 (it was dropped, say, by a
 * partition) while its link to node 1 still looks up on its side: the
 * peers forgot node 2 with its links, and wait for node 3 to dial. The
 * new id drops the old links, and node 3 dials node 1 anew.
 */
static int renumber_step(struct world *w)
{
    struct tpeer *p = pr_tcp_peer_find(w->x[1], 1);
    if (!p || !p->conn || p->state != P_UP)
        return 0;
    if (!w->first) {
        w->first = p->conn;
        pr_tcp_xport_set_self(w->x[1], 3);
        struct pr_tcp_peer_info pi = {1, w->addr};
        ck_assert_int_eq(pr_tcp_xport_set_peers(w->x[1], &pi, 1), 0);
        return 0;
    }
    struct tpeer *q = pr_tcp_peer_find(w->x[0], 3);
    if (p->conn == w->first || !q || q->state != P_UP)
        return 0;
    w->replaced = 1;
    return 1;
}

START_TEST(test_xport_tcp_new_id_dials_anew)
{
    struct world w;
    world_init(&w, renumber_step);
    listen_first(&w);
    dial_first(&w, 1, 2);
    uv_run(&w.loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(w.replaced, 1);
    world_fini(&w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("xport_tcp");
    TCase *tc = tcase_create("links");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_xport_tcp_queued_chunk_goes_when_peer_connects);
    tcase_add_test(tc, test_xport_tcp_replaced_link_then_peer_gone);
    tcase_add_test(tc, test_xport_tcp_new_id_dials_anew);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
