/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the reduce engine's unit tests (test_engine*.c), linked
 * into each of their binaries.
 *
 * Every test runs a private libuv loop with several engines ("nodes") in it,
 * wired by in-memory links (struct memlink) that copy each chunk at send()
 * and deliver it later from a uv_idle callback, then complete the send. The
 * links have knobs to drop, fail, hold or corrupt chunks, and to deliver
 * them as TCP does when it can: through the sink's reserve() and land()
 * (the payload copied to where reserve() said), not on_chunk. A group spread
 * over the network (struct tgroup) gives each member random inputs cut into
 * random parts; the checks count every done() call, check that none runs
 * inside pr_engine_start, and compare results against a double-precision
 * reference. net_free() ends with uv_loop_close() == 0.
 *
 * Everything here runs on the test's loop thread; the tests run forked (one
 * process per test), so the globals below start fresh in each test.
 */
#ifndef ENGINE_FIXTURE_H
#define ENGINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/xport.h"

#define MAXN      5   /* nodes in one test network */
#define MAXMB     3   /* local members per node and group */
#define MAXPARTS  3   /* tensors per member */
#define NODE0     100 /* node ids are NODE0 + index: ids differ from positions */
#define LONG_MS   10000
#define STASH_MAX (64u << 20)

/* Set around pr_engine_start(): done() must never run inside it. */
extern int in_start;
/* Engines post a lone member's own segment from its memory (no copy). */
extern int direct_sends;
/*
 * Threads each new engine does its arithmetic on (pr_engine_set_threads):
 * PR_TEST_REDUCE_THREADS from the environment, else 1. make check runs
 * the engine suites with 1 and again with 3.
 */
extern unsigned reduce_threads;

/* ------------------------------------------------------------------ */
/* In-memory links                                                      */

/* The header field (or sender id) a link corrupts in one message. */
enum field { F_NONE, F_TOTAL, F_OFF, F_STEP, F_SEG, F_FROM };

struct msg;     /* one queued chunk, copied at send() */
struct landing; /* one landing held out (land_hold) */
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
    int resets;       /* reset() calls: each fails what is queued */
    /*
     * Landing (land set): each chunk is offered to the engine's reserve();
     * when it says 1 the payload is copied to the place it gave and land()
     * is called, at once or (land_hold) at link_land_release(); when it
     * says 0 the chunk goes to on_chunk. From landing number land_fail_at
     * on, a landing ends with land_fail (< 0) after half of its payload,
     * as when a TCP link closes inside a frame.
     */
    int land;
    int land_hold;
    int land_fail;
    size_t land_fail_at;
    struct landing *held, **held_tail;
    size_t nheld;
    size_t reserved;       /* reserve() said 1 */
    size_t refused;        /* reserve() said 0: on_chunk took it */
    size_t refused_floats; /* of those, floats (empty chunks have none) */
    size_t landed;         /* land() calls, whatever their status */
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
    struct memlink links[MAXN][MAXN]; /* links[a][b]: from node a to b */
};

/* n nodes whose engines cut chunks of `chunk` floats; direct_sends applies. */
struct net *net_new(int n, size_t chunk);
struct net *net_new_stash(int n, size_t chunk, size_t stash_max);
/* Destroys the engines, closes the loop and frees the network. */
void net_free(struct net *net);
void destroy_node(struct net *net, int idx);

static inline struct pr_engine *E(struct net *net, int idx)
{
    return net->nodes[idx].e;
}

void link_hold(struct net *net, int a, int b, int hold);
void net_hold_all(struct net *net, int hold);
/*
 * Delivers (and completes) up to n messages of link a -> b, held or not,
 * in order, from the caller's stack; returns how many.
 */
size_t link_deliver(struct net *net, int a, int b, size_t n);
/* Messages waiting on all links; held links count only when held_too. */
size_t net_queued(const struct net *net, int held_too);
/*
 * Delivers a chunk of link l by landing (engine_fixture_land.c): reserve(),
 * then the payload and land(), or on_chunk when reserve() says 0.
 */
void memlink_land(struct memlink *l, struct pr_engine *e, uint32_t from,
                  const struct pr_chunk_hdr *h, const void *data);
/* Every link delivers by landing (land != 0) or by on_chunk. */
void net_land_all(struct net *net, int land);
/*
 * Ends every landing held on link a -> b, in order, with `status` (0: the
 * whole payload at its place first; < 0: half of it): how many.
 */
size_t link_land_release(struct net *net, int a, int b, int status);
/* Sums of the links' landing counters. */
size_t net_reserved(const struct net *net);
size_t net_refused(const struct net *net);
size_t net_refused_floats(const struct net *net);

/* Runs the loop until pred() holds; fails the test if it goes idle first. */
void run_until(struct net *net, pred_fn pred, void *arg);
int quiet(struct net *net, void *arg);
/* Delivers everything that can be delivered. */
void run_quiet(struct net *net);
/*
 * A few non-blocking loop turns: long enough for the zero-delay timers set
 * by the previous turn (how the engine defers done()) to run.
 */
void run_turns(struct net *net);
struct pr_engine_stats stats(struct net *net, int idx);

/* ------------------------------------------------------------------ */
/* Groups spread over the network                                       */

/* tg_new's weights. */
enum tg_weights {
    TG_UNIFORM = 0,  /* 1/k each, the mean */
    TG_PERSONAL = 1, /* staleness-like weights, personal results */
    TG_WEIGHTED = 2, /* staleness-like weights, one weighted mean for all */
};

uint64_t rng_next(void);

struct done_rec {
    uint64_t id;
    int calls;
    int status;
};

void done_cb(void *arg, uint64_t id, int status);

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
    uint32_t wire;       /* the group's encoding (enum pr_wire), 0: fp32 */
    uint32_t ring[MAXN]; /* node ids in ring order */
    size_t nlocal[MAXN];
    struct tmember mb[MAXN][MAXMB];
    struct pr_engine_member spec[MAXN][MAXMB];
    struct done_rec done[MAXN];
};

/*
 * A group of m nodes (ring_idx: node indexes in ring order), nlocal[p]
 * members at position p, each with 1 to 3 parts of random lengths (some may
 * be empty). The same seed gives the same inputs and parts.
 */
struct tgroup *tg_new(uint64_t id, size_t total, uint32_t m,
                      const int *ring_idx, const size_t *nlocal,
                      enum tg_weights weights, uint64_t seed);
void tg_free(struct tgroup *tg);
/* Marks every member at position p as letting results be written in place. */
void tg_set_in_place(struct tgroup *tg, uint32_t p, int in_place);
int tg_node(const struct tgroup *tg, uint32_t pos);
/*
 * Starts position `pos` from copies of the ring and member arrays that are
 * scribbled over afterwards: start() must have copied them.
 */
int tg_start_timeout(struct net *net, struct tgroup *tg, uint32_t pos,
                     uint32_t timeout_ms);
int tg_start(struct net *net, struct tgroup *tg, uint32_t pos);
void tg_start_all(struct net *net, struct tgroup *tg);
/* Predicates for run_until(). */
int tg_all_done(struct net *net, void *arg);
int pos_done(struct net *net, void *arg); /* arg: a struct done_rec */

/* A member's parts, concatenated into out (tm->input's length). */
void tg_result(const struct tmember *tm, float *out);
void tg_check_done(const struct tgroup *tg, int status);
/* Every member holds the weighted mean, bitwise the same everywhere. */
void tg_check_mean(const struct tgroup *tg);
/* The members at position p hold the weighted mean (done() not checked). */
void tg_check_mean_at(const struct tgroup *tg, uint32_t p);
/* Every member holds pr_reduce_personal() of the reference sum. */
void tg_check_personal(const struct tgroup *tg);
/* The members at position p still hold their inputs, bit for bit. */
void tg_check_unchanged(const struct tgroup *tg, uint32_t p);

/* Node indexes in ring order for m = 0..5 nodes: ids differ from positions. */
extern const int rings[6][MAXN];

/* One ring of m nodes, all started in order, run to completion. */
void run_mean_n(uint32_t m, size_t total, size_t chunk, uint64_t seed,
                int one_member);
void run_mean(uint32_t m, size_t total, size_t chunk, uint64_t seed);

#endif
