/* SPDX-License-Identifier: MIT */
/*
 * Chunks read straight into place by the TCP transport (xport_link.c
 * pr_tcp_peer_on_data_begin/end, the sink's reserve and land), with two real
 * transports on loopback and a private loop: node 2 dials node 1, and
 * the receiving side's sink hands out a buffer per chunk (or has no
 * reserve at all).
 *
 * What must hold: every chunk comes once with its exact bytes, landed or
 * through on_chunk, whatever its size; a chunk whose frame is larger than
 * the first read between frames (conn.c's LAND_FIRST_READ, 4096 bytes)
 * lands, and the conn's frames_landed counts each landing; a sink without
 * reserve gets every chunk through on_chunk; a link that closes inside a
 * payload, at either end, ends that landing once with an error. Each test
 * closes every handle and checks uv_loop_close() == 0.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/base/log.h"
#include "daemon/xport/tcp/xport_tcp.h"
#include "daemon/xport/tcp/xport_tcp_int.h"
#include "tests/check_run.h"

#define LIMIT_MS   20000
#define MAX_CHUNK  (64u << 20)
#define FIRST_READ 4096 /* conn.c's LAND_FIRST_READ */
#define NCH        16

/* One chunk sent, and how it came. */
struct chunk {
    uint32_t nfloats;
    float *sent;
    float *dst;      /* the landing's buffer, until land() */
    int whole;       /* on_chunk calls */
    int lands;       /* land() calls */
    int land_status; /* the last one's */
    int ok;          /* the floats that came were the ones sent */
};

struct world {
    uv_loop_t loop;
    uv_timer_t limit;
    uv_check_t check;
    int timed_out;
    struct pr_tcp_xport *x[2]; /* node 1 (listens), node 2 (dials) */
    char addr[64];
    struct chunk ch[NCH];
    size_t nch;
    int sends, send_errors;
    int link_downs;
    int reserves;
    /*
     * In reserve(): 1 destroys the sending transport at once (its peer
     * closes inside the payload); 2 destroys the receiving one at the
     * end of this loop turn (this side closes inside it).
     */
    int close_in_reserve;
    int close_receiver;
};

static void limit_cb(uv_timer_t *t)
{
    struct world *w = t->data;
    w->timed_out = 1;
    uv_stop(&w->loop);
}

static void check_cb(uv_check_t *h)
{
    struct world *w = h->data;
    if (w->close_receiver == 1) {
        w->close_receiver = 2;
        pr_tcp_xport_destroy(w->x[0]);
        w->x[0] = NULL;
    }
}

static struct chunk *chunk_of(struct world *w, const struct pr_chunk_hdr *h)
{
    ck_assert_uint_ge(h->group_id, 1);
    ck_assert_uint_le(h->group_id, w->nch);
    struct chunk *c = &w->ch[h->group_id - 1];
    ck_assert_uint_eq(h->nfloats, c->nfloats);
    return c;
}

static void sink_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const void *data)
{
    struct world *w = ctx;
    (void)node;
    struct chunk *c = chunk_of(w, h);
    c->whole++;
    c->ok = memcmp(data, c->sent, c->nfloats * sizeof(float)) == 0;
}

static void sink_on_link_down(void *ctx, uint32_t node, int status)
{
    struct world *w = ctx;
    (void)node;
    ck_assert_int_lt(status, 0);
    w->link_downs++;
}

static void sink_land(struct pr_landing *l, uint32_t node,
                      const struct pr_chunk_hdr *h, int status)
{
    struct chunk *c = l->token;
    (void)node;
    ck_assert_uint_eq(h->nfloats, c->nfloats);
    ck_assert_ptr_eq(l->dst, c->dst);
    c->lands++;
    c->land_status = status;
    c->ok =
        status == 0 && memcmp(c->dst, c->sent, c->nfloats * sizeof(float)) == 0;
    free(c->dst);
    c->dst = NULL;
}

static int sink_reserve(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                        struct pr_landing *out)
{
    struct world *w = ctx;
    (void)node;
    struct chunk *c = chunk_of(w, h);
    ck_assert_ptr_null(c->dst);
    w->reserves++;
    c->dst = malloc(c->nfloats * sizeof(float));
    ck_assert_ptr_nonnull(c->dst);
    memset(c->dst, 0xee, c->nfloats * sizeof(float));
    out->dst = c->dst;
    out->token = c;
    out->land = sink_land;
    if (w->close_in_reserve == 1) {
        pr_tcp_xport_destroy(w->x[1]);
        w->x[1] = NULL;
    } else if (w->close_in_reserve == 2) {
        w->close_receiver = 1;
    }
    return 1;
}

static void world_init(struct world *w)
{
    memset(w, 0, sizeof(*w));
    ck_assert_int_eq(uv_loop_init(&w->loop), 0);
    uv_timer_init(&w->loop, &w->limit);
    uv_check_init(&w->loop, &w->check);
    w->limit.data = w;
    w->check.data = w;
    uv_timer_start(&w->limit, limit_cb, LIMIT_MS, 0);
    uv_check_start(&w->check, check_cb);
}

/* Node 1 listens, node 2 dials it; `rx` (0 or 1) gets a sink. */
static void world_link(struct world *w, int rx, int with_reserve)
{
    uint16_t port = 0;
    w->x[0] = pr_tcp_xport_create(&w->loop, 1, MAX_CHUNK, LIMIT_MS);
    ck_assert_ptr_nonnull(w->x[0]);
    ck_assert_int_eq(pr_tcp_xport_listen(w->x[0], "127.0.0.1", 0, &port), 0);
    snprintf(w->addr, sizeof(w->addr), "127.0.0.1:%u", port);
    struct pr_tcp_peer_info two = {2, "127.0.0.1:1"};
    ck_assert_int_eq(pr_tcp_xport_set_peers(w->x[0], &two, 1), 0);
    w->x[1] = pr_tcp_xport_create(&w->loop, 2, MAX_CHUNK, LIMIT_MS);
    ck_assert_ptr_nonnull(w->x[1]);
    struct pr_link_sink sink = {
        .on_chunk = sink_on_chunk,
        .on_link_down = sink_on_link_down,
        .reserve = with_reserve ? sink_reserve : NULL,
        .ctx = w,
    };
    pr_tcp_xport_set_sink(w->x[rx], &sink);
}

static void world_dial(struct world *w)
{
    struct pr_tcp_peer_info one = {1, w->addr};
    ck_assert_int_eq(pr_tcp_xport_set_peers(w->x[1], &one, 1), 0);
}

static void world_fini(struct world *w)
{
    pr_tcp_xport_destroy(w->x[0]);
    pr_tcp_xport_destroy(w->x[1]);
    uv_close((uv_handle_t *)&w->limit, NULL);
    uv_close((uv_handle_t *)&w->check, NULL);
    ck_assert_int_eq(uv_run(&w->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&w->loop), 0);
    for (size_t i = 0; i < w->nch; i++) {
        ck_assert_ptr_null(w->ch[i].dst); /* every landing ended */
        free(w->ch[i].sent);
    }
}

/* Runs the loop until pred holds; fails on the time limit. */
static void run_until(struct world *w, int (*pred)(struct world *w, void *a),
                      void *arg)
{
    while (!pred(w, arg)) {
        ck_assert_msg(!w->timed_out, "time limit: the condition never held");
        uv_run(&w->loop, UV_RUN_ONCE);
    }
}

static void send_cb(void *arg, int status)
{
    struct world *w = arg;
    w->sends++;
    w->send_errors += status < 0;
}

/* Chunk i of n floats, numbered floats from a seed, sent from tx. */
static void send_chunk(struct world *w, int tx, uint32_t peer, uint32_t n)
{
    ck_assert_uint_lt(w->nch, NCH);
    struct chunk *c = &w->ch[w->nch++];
    c->nfloats = n;
    c->sent = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(c->sent);
    for (uint32_t i = 0; i < n; i++)
        c->sent[i] = (float)w->nch * 1e6f + (float)i * 0.25f;
    struct pr_chunk_hdr h = {
        .group_id = w->nch, .total = n ? n : 1, .nfloats = n};
    struct pr_link *l = pr_tcp_xport_link(w->x[tx], peer);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->ops->send(l, &h, c->sent, send_cb, w), 0);
}

static int arrived(struct world *w, void *arg)
{
    size_t n = *(size_t *)arg;
    for (size_t i = 0; i < n; i++)
        if (w->ch[i].whole + w->ch[i].lands == 0)
            return 0;
    return w->sends >= (int)n;
}

static uint64_t frames_landed(struct world *w, int rx)
{
    struct tpeer *p = pr_tcp_peer_find(w->x[rx], rx ? 1 : 2);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(p->conn);
    return p->conn->frames_landed;
}

static size_t frame_bytes(uint32_t nfloats)
{
    return PR_FRAME_HDR_LEN + PR_CHUNK_HDR_LEN + (size_t)nfloats * 4;
}

/*
 * Each chunk came once, exactly; the ones too large for the first read
 * landed (and, sent one at a time, only those); frames_landed and the
 * transport's byte count agree.
 */
static void check_chunks(struct world *w, int rx, int one_at_a_time)
{
    size_t landed = 0, bytes = 0;
    for (size_t i = 0; i < w->nch; i++) {
        struct chunk *c = &w->ch[i];
        ck_assert_msg(c->whole + c->lands == 1 && c->ok,
                      "chunk %zu (%u floats): %d whole, %d landed, ok %d", i,
                      c->nfloats, c->whole, c->lands, c->ok);
        if (c->lands)
            ck_assert_int_eq(c->land_status, 0);
        if (frame_bytes(c->nfloats) > FIRST_READ)
            ck_assert_msg(c->lands == 1, "chunk %zu (%u floats) not landed", i,
                          c->nfloats);
        else if (one_at_a_time)
            ck_assert_msg(c->whole == 1, "chunk %zu (%u floats) landed", i,
                          c->nfloats);
        landed += c->lands;
        bytes += c->nfloats * sizeof(float);
    }
    ck_assert_uint_eq(frames_landed(w, rx), landed);
    ck_assert_int_eq(w->reserves, (int)landed);
    struct pr_tcp_xport_stats st;
    pr_tcp_xport_stats(w->x[rx], &st);
    ck_assert_uint_eq(st.bytes_recv, bytes);
    ck_assert_int_eq(w->send_errors, 0);
}

/*
 * 0 floats, 1, odd, frames under 4096 bytes, exactly 4096 (1012 floats),
 * just over it, and several MiB.
 */
static const uint32_t sizes[] = {
    0,    1,    3,     100,    1011,     1012,           1013,
    1024, 4096, 65536, 100001, 2u << 20, (3u << 20) + 1,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Sent one at a time (each after the last arrived), or all at once. */
START_TEST(test_xport_land_sizes)
{
    struct world w;
    world_init(&w);
    world_link(&w, 0, 1);
    world_dial(&w);
    for (size_t i = 0; i < NSIZES; i++) {
        send_chunk(&w, 1, 1, sizes[i]);
        size_t n = i + 1;
        if (!_i)
            run_until(&w, arrived, &n);
    }
    size_t all = NSIZES;
    run_until(&w, arrived, &all);
    check_chunks(&w, 0, !_i);
    world_fini(&w);
}
END_TEST

/* A sink without reserve: every chunk through on_chunk, none landed. */
START_TEST(test_xport_land_no_reserve)
{
    struct world w;
    world_init(&w);
    world_link(&w, 0, 0);
    world_dial(&w);
    for (size_t i = 0; i < NSIZES; i++)
        send_chunk(&w, 1, 1, sizes[i]);
    size_t all = NSIZES;
    run_until(&w, arrived, &all);
    for (size_t i = 0; i < w.nch; i++)
        ck_assert(w.ch[i].whole == 1 && w.ch[i].lands == 0 && w.ch[i].ok);
    ck_assert_uint_eq(frames_landed(&w, 0), 0);
    ck_assert_int_eq(w.reserves, 0);
    world_fini(&w);
}
END_TEST

/*
 * Chunks queued at node 1 before node 2 dials go right after node 1's
 * control messages (challenge, welcome) on the same connection: node 2
 * reads them behind those, in the same reads.
 */
START_TEST(test_xport_land_after_control)
{
    struct world w;
    world_init(&w);
    world_link(&w, 1, 1);
    for (size_t i = 0; i < NSIZES; i++)
        send_chunk(&w, 0, 2, sizes[i]);
    world_dial(&w);
    size_t all = NSIZES;
    run_until(&w, arrived, &all);
    check_chunks(&w, 1, 0);
    world_fini(&w);
}
END_TEST

/* The landing ended, and the receiver heard of the loss (if it is up). */
/*
 * A read that ends inside a chunk's header: after a landing the next read
 * takes 4096 bytes, a 4092-byte frame (1011 floats) and the first 4 bytes
 * of the next (1024 floats, 4144 bytes). That one must land all the same:
 * the read after takes only what its header and prefix miss, not 64 KiB
 * (which would bring it whole into the read buffer).
 */
START_TEST(test_xport_land_header_split_across_reads)
{
    struct world w;
    world_init(&w);
    world_link(&w, 0, 1);
    world_dial(&w);
    for (int i = 0; i < 4; i++) {
        send_chunk(&w, 1, 1, 65536);
        send_chunk(&w, 1, 1, 1011);
        send_chunk(&w, 1, 1, 1024);
    }
    size_t all = w.nch;
    run_until(&w, arrived, &all);
    check_chunks(&w, 0, 0);
    world_fini(&w);
}
END_TEST

static int landing_ended(struct world *w, void *arg)
{
    (void)arg;
    return w->ch[0].lands > 0 && (w->link_downs > 0 || !w->x[0]);
}

/*
 * The link closes inside a 32 MiB payload: the sender's end (its
 * transport destroyed as the payload begins to land) or the receiver's.
 * land() runs once, with an error; the chunk does not come otherwise.
 */
START_TEST(test_xport_land_closed_mid_payload)
{
    struct world w;
    world_init(&w);
    world_link(&w, 0, 1);
    w.close_in_reserve = 1 + _i;
    world_dial(&w);
    send_chunk(&w, 1, 1, 8u << 20);
    run_until(&w, landing_ended, NULL);
    for (int i = 0; i < 20; i++)
        uv_run(&w.loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(w.reserves, 1);
    ck_assert_int_eq(w.ch[0].lands, 1);
    ck_assert_int_lt(w.ch[0].land_status, 0);
    ck_assert_int_eq(w.ch[0].whole, 0);
    world_fini(&w);
    ck_assert_int_eq(w.ch[0].lands, 1);
    /* The sender's send failed with its link, or went into the socket. */
    ck_assert_int_eq(w.sends, 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("xport_land");
    TCase *tc = tcase_create("chunks");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_xport_land_sizes, 0, 2);
    tcase_add_test(tc, test_xport_land_no_reserve);
    tcase_add_test(tc, test_xport_land_after_control);
    tcase_add_test(tc, test_xport_land_header_split_across_reads);
    tcase_add_loop_test(tc, test_xport_land_closed_mid_payload, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* Links closed inside a frame warn; keep the output to errors. */
    pr_log_set_level(PR_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    return check_run(suite());
}
