/* SPDX-License-Identifier: MIT */
/*
 * The reduce engine: runs one node daemon's part of every group in flight.
 *
 * Per group, on the loop thread (the arithmetic itself, on large vectors,
 * in slices on the engine's threads: pr_engine_set_threads, pool.h):
 *  1. start(): sum the local members' tensors, each scaled by its weight,
 *     into one scratch vector (read straight from their shared memory);
 *     a group of this daemon alone sums straight into its members (3.).
 *  2. If the group spans m > 1 daemons, run a chunked, pipelined ring
 *     all-reduce of the scratch vector over the links to the left and
 *     right neighbours (xport.h): reduce-scatter steps 0..m-2, then
 *     all-gather steps m-1..2m-3. A chunk received at one step is summed
 *     (or copied) in place and forwarded at once as the next step's chunk,
 *     so chunks stream around the ring.
 *  3. Write each local member's result into its tensors (the mean, or the
 *     member's personal result under staleness weights) and call done(0),
 *     once no thread of the pool is in the group's memory any more.
 * Any failure (bad chunk, link down, deadline, abort) calls done(-errno)
 * without touching the members' tensors: they keep their inputs (except
 * for an in-place member, see pr_engine_member).
 *
 * Chunks may arrive before the scheduler's GROUP reached this daemon: they
 * are stashed (copied, bounded in bytes and time) and replayed at start().
 * Group ids from one scheduler rise, so a chunk for an id at or below the
 * highest started one that is not running is stale and dropped.
 */
#ifndef PR_ENGINE_H
#define PR_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/engine/wire.h"
#include "daemon/engine/xport.h"

struct pr_engine_part {
    float *data;
    size_t len;
};

struct pr_engine_member {
    uint32_t rank;
    double weight;
    const struct pr_engine_part *parts; /* valid until done() */
    size_t nparts;
    /*
     * The member lets its result be written as it arrives (the trainer
     * asked, preduce_set_in_place): when it is the group's only local member
     * and results are not personal, final chunks go straight into its
     * tensors and are forwarded from there, with no scratch copy and no
     * write-back pass. A failed group then leaves each float either as it
     * was or at its final value.
     */
    int in_place;
    /*
     * The member's trainer is gone (it was told its reduce failed): its
     * floats still count, but its tensors get no write-back (in place, or
     * written in the default mode's shadow before it left, final floats
     * already under way still land: each float as it was or at its final
     * value). Set at start by
     * a caller whose trainer left before the group came, or later by
     * pr_engine_detach().
     */
    int detached;
    /*
     * int8's error feedback (docs/algorithm.md, "Wire encodings"): what
     * this member's earlier reduces lost to rounding, `total` floats kept
     * by the node per trainer, added to its contribution and replaced by
     * what this group's encoding lost when the group succeeds; left as it
     * was when the group fails. NULL: none kept (fp32, bf16).
     */
    float *err;
};

typedef void (*pr_engine_done_cb)(void *arg, uint64_t group_id, int status);

struct pr_engine_group {
    uint64_t id;
    size_t total; /* floats in each member's vector */
    uint32_t k;   /* members in the whole group */
    int personal; /* personal results (staleness weights) */
    /*
     * Some member of the whole group weighs other than 1/k (a healing
     * member's 0 beside staleness weights): every daemon must then scale
     * each member's floats, even one whose own members weigh 1/k, or the
     * ring would mix unscaled and scaled sums.
     */
    int weighted;
    uint32_t m;           /* daemons in the ring */
    uint32_t pos;         /* this daemon's position in the ring */
    const uint32_t *ring; /* m node ids in ring order; copied by start() */
    const struct pr_engine_member *local; /* copied by start() */
    size_t nlocal;
    /*
     * From start(): then the group fails with -ETIMEDOUT, and no result is
     * written into the members' tensors after it (a write-back that would
     * not end in time is not begun: it fails the group the same way).
     */
    uint32_t timeout_ms;
    /*
     * The encoding of the group's chunks (enum pr_wire), the same on every
     * daemon of the ring (the scheduler's Group.wire): a chunk in another
     * fails the group. Unused by a group of this daemon alone.
     */
    uint32_t wire;
    pr_engine_done_cb done;
    void *arg;
};

/* Finds the link to a peer, or NULL when there is none (yet). */
typedef struct pr_link *(*pr_engine_resolve_fn)(void *ctx, uint32_t node_id);

struct pr_engine_stats {
    uint64_t groups_ok;
    uint64_t groups_failed;
    uint64_t groups_in_place; /* of groups_ok: results written in place */
    /*
     * Groups whose lone local member got final floats as they came, its
     * originals kept aside (the default mode's shadow, engine_int.h), and
     * those of them whose originals were put back (failed, or detached).
     */
    uint64_t groups_shadow;
    uint64_t groups_restored;
    uint64_t chunks_stashed;
    uint64_t chunks_dropped;
    uint64_t bytes_reduced; /* floats * 4 written back to members */
    /*
     * By encoding (enum pr_wire): groups over the wire that sent in it,
     * and the payload bytes of their chunks posted to peers.
     */
    uint64_t wire_groups[PR_WIRE_COUNT];
    uint64_t wire_bytes[PR_WIRE_COUNT];
};

struct pr_engine;

struct pr_engine *pr_engine_create(uv_loop_t *loop, size_t chunk_floats,
                                   size_t stash_max_bytes,
                                   pr_engine_resolve_fn resolve, void *ctx);
/*
 * Fails every group still running with -ECANCELED (one whose sends a
 * transport closed before failed already reports that error, such as
 * -ECONNRESET). Memory that a transport
 * still reads (posted sends) is freed when the transport completes those
 * sends. Unlike a group's normal end, done() runs here at once even for a
 * group whose sends still read its member's tensors: close the transports
 * first (the node daemon does), so that nothing reads them any more.
 */
void pr_engine_destroy(struct pr_engine *e);
void pr_engine_set_chunk(struct pr_engine *e, size_t chunk_floats);
/*
 * The threads that do the arithmetic (sums, scaling, copies, write-back),
 * each on slices of a vector: 1 (or 0), inline on the loop; more, a pool
 * (daemon/engine/pool.h), with results bit for bit the same. done() then
 * waits until no thread is in the group's memory. 0, -EINVAL, -EBUSY
 * while work is out with the current pool, or pthread_create's error.
 */
int pr_engine_set_threads(struct pr_engine *e, unsigned nthreads);
/*
 * How long an early chunk (one that came before its group started here)
 * is kept: the node passes its reduce timeout, at create and on reload,
 * since a group that has not started within it has failed on the nodes
 * that sent the chunk. Chunks already kept keep their expiry. 0 restores
 * the default, PR_ENGINE_STASH_MS.
 */
#define PR_ENGINE_STASH_MS 60000
void pr_engine_set_stash_ms(struct pr_engine *e, uint32_t stash_ms);
/*
 * Whether the transports can send straight from the members' memory (TCP
 * always; RDMA when every tensor is registered). Then a lone local member's
 * own segment goes to the wire without a copy.
 */
void pr_engine_set_direct(struct pr_engine *e, int direct);
/*
 * Where scratch vectors come from (default malloc): the RDMA transport
 * hands out registered memory, so chunks go to the wire without a copy.
 * Set it before the first group starts.
 */
void pr_engine_set_allocator(struct pr_engine *e,
                             void *(*alloc)(void *ctx, size_t bytes),
                             void (*release)(void *ctx, void *p), void *ctx);

/*
 * Starts a group. 0: done() will run exactly once, never from inside this
 * call. Negative errno (-EINVAL, -EEXIST, -ENOMEM, -ENOTCONN when a
 * neighbour has no link): done() will not run.
 */
int pr_engine_start(struct pr_engine *e, const struct pr_engine_group *g);
/* A chunk from peer `from`; data valid during the call only. */
void pr_engine_on_chunk(struct pr_engine *e, uint32_t from,
                        const struct pr_chunk_hdr *h, const void *data);
/* Fails every group whose ring contains `node`. */
void pr_engine_link_down(struct pr_engine *e, uint32_t node, int status);
/* The sink that hands a transport's chunks and link losses to e. */
struct pr_link_sink pr_engine_sink(struct pr_engine *e);
/*
 * A new scheduler session numbers its groups above id_base: chunks that
 * come before their group are kept even when the new ids are lower than
 * the old session's (its clock went back). Only then do late chunks of the
 * old session with higher ids wait in the stash too, until they expire.
 */
void pr_engine_new_session(struct pr_engine *e, uint64_t id_base);
/* Fails group `id` with `status`; -ENOENT when not running. */
int pr_engine_abort(struct pr_engine *e, uint64_t id, int status);
/*
 * The trainer of local member `rank` of group `id` is gone (its answer
 * can no longer be delivered, and it was told the reduce failed): the
 * group goes on for the others, its floats still count, but its tensors
 * get no write-back, so a trainer that saw the failure finds them
 * unchanged, or (in place, or where the default mode's shadow had begun
 * writing final floats into them) each float as it was or at its final
 * value, nothing written after landings under way. -ENOENT when there is
 * no such running group or member.
 */
int pr_engine_detach(struct pr_engine *e, uint64_t id, uint32_t rank);
void pr_engine_stats(const struct pr_engine *e, struct pr_engine_stats *st);
/* Adds every counter of x to sum's (a node's engines, one per scheduler). */
void pr_engine_stats_add(struct pr_engine_stats *sum,
                         const struct pr_engine_stats *x);
size_t pr_engine_running(const struct pr_engine *e);

#endif
