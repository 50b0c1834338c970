/* SPDX-License-Identifier: MIT */
/*
 * What the engine's files share. engine.c: a group's life (start, posts,
 * the end and done(), deadlines, link loss). Around it: engine_rx.c (a
 * received chunk's way into its group), engine_chunk.c (whether a chunk
 * fits its group), engine_local.c (a group's arithmetic over its local
 * members' memory), engine_jobs.c (that arithmetic on the thread pool),
 * engine_mode.c (in place, shadow or write-back), engine_scratch.c (the
 * scratch vectors) and engine_stash.c (chunks that came before their
 * group). engine.c calls the others. Calls back into engine.c come only
 * from engine_rx.c and engine_jobs.c, for what a chunk or a job leads to
 * (a post, the group's end); engine_stash.c calls only engine_rx.c, to
 * hand a started group its early chunks.
 * Private to the engine: other modules use engine.h.
 */
#ifndef PR_ENGINE_INT_H
#define PR_ENGINE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/pool.h"

enum gstate {
    G_RUNNING,  /* receiving and forwarding chunks */
    G_DRAINING, /* done() has run; waiting for posted sends to complete */
};

/* A stretch [lo, hi) of a segment's floats that has arrived. */
struct span {
    size_t lo, hi;
};

/*
 * Per ring step: how much of its segment has arrived, and which floats (a
 * sorted list of disjoint spans, merged as they touch: one span when chunks
 * come in order), so a chunk repeated or overlapping another is refused,
 * whatever order the links deliver in.
 */
struct step {
    size_t got;    /* floats received */
    size_t chunks; /* chunks received */
    struct span *spans;
    size_t nspans, cap;
};

struct group {
    struct group *next;
    struct pr_engine *e;
    uint64_t id;
    size_t total;
    uint32_t k, m, pos;
    int personal;
    /*
     * Uniform weights (1/k each, no personal results): members are summed
     * unscaled and each daemon divides only the segment it completes, once,
     * before the all-gather: a third fewer float passes than weighting every
     * member up front, and the same mean on every member.
     */
    float mean_scale; /* 1/k when uniform, else 0 */
    /* Final values go straight into the lone local member's tensors. */
    int in_place;
    /*
     * The default mode's shadow: a lone local member (not in place, its
     * own segment sent from its memory) gets the final floats of the
     * segment this daemon completes (step m - 2) and of its own segment
     * (its all-gather, read straight into its memory over TCP) as they
     * come, as in place, while what they replace is kept in the scratch
     * vector, where nothing else is then: the own segment's floats are
     * copied there before each of its chunks is posted (`saved`; on the
     * pool when there is one, J_SAVE, so that the loop does not copy up
     * to half of a large model in one go while other groups' chunks
     * wait; `own_sent` records what was posted), the completed segment's
     * written there by the same pass that sums each chunk, over the chunk
     * read there (`folded` records which). A group that fails puts back
     * what may have been written (the own segment's claimed chunks, the
     * folded ones) before done() (pr_engine_shadow_settle), once no
     * landing or send uses the member's memory. A member that leaves
     * ends the shadow: nothing more goes into it and nothing is put back.
     * Only the other m - 2 segments are written back at the end: none
     * between 2 daemons. Not for models so large that putting back would
     * hold the answer past what the trainer waits
     * (SHADOW_MAX_RESTORE_BYTES, engine_mode.c).
     */
    int shadow;
    /*
     * From here on own_sent rules: a chunk of the own segment back from
     * the left is taken only inside it (its originals were copied before
     * it was posted), and a restore puts back steps[m - 1], which lies
     * within it.
     */
    int saved;
    struct step own_sent;
    struct step folded;
    size_t rx_member; /* landings into the member's memory out */
    int left_reset;   /* the left link was reset: such a landing stalled */
    /*
     * Some send posted from the member's memory (a direct send, or any in
     * place): done() waits until every send completed, since the trainer
     * may change or free its tensors once it has its answer.
     */
    int reads_member;
    int reset_sent;   /* the right link was reset: sends stalled too long */
    int stray_logged; /* a chunk from a non-neighbour was logged */
    uint32_t *ring;
    uint32_t left, right;
    struct pr_engine_member *local;
    size_t nlocal;
    float *scratch;
    struct step *steps;  /* 2m - 2 entries */
    uint32_t steps_left; /* steps not yet complete */
    size_t sends_posted, sends_done;
    /*
     * Arithmetic handed to the pool (engine.c, struct gjob): while any is
     * out, done() is not called and nothing is freed, since pool threads
     * read the members' memory and write the scratch vector.
     */
    struct gjob *jobs;
    size_t jobs_out;
    /*
     * Chunks being read straight into the scratch vector (pr_landing):
     * while any is out the group is not freed, since a transport writes
     * there. They do not touch members' memory, so done() does not wait.
     */
    size_t rx_out;
    enum gstate state;
    int status; /* set when done() is due */
    int reported;
    /*
     * uv_hrtime() at which the group fails: no result goes into a member's
     * tensors after it (the node daemon's promise to its trainers), so it
     * is read from the clock where a write is decided, not from the loop's
     * cached time, which a stopped or busy loop leaves behind.
     */
    uint64_t deadline_ns;
    /*
     * The group's encoding (enum pr_wire; engine_wire.c). Other than fp32,
     * every chunk goes out of and lands in `wire`: the reduce-scatter's
     * region [0, wire_bytes) and the all-gather's [wire_bytes, 2 *
     * wire_bytes), segment s at wseg[s] in each, a chunk at the bytes its
     * offset in the segment encodes to (int8 chunks start on a block of
     * their segment). Each float is encoded once per region at most, and
     * the all-gather forwards the bytes it received, so every daemon
     * decodes the same bits. Such a group is never in place nor a shadow,
     * and never sends from a member's memory.
     */
    uint32_t enc;
    uint8_t *wire;
    size_t wire_bytes;
    size_t *wseg;
    /*
     * int8 error feedback (some local member has an err vector): what this
     * daemon's encodings of the group lost, in the sum's terms, handed to
     * the members' err vectors when the group succeeds.
     */
    float *lost;
    pr_engine_done_cb done;
    void *arg;
};

/* A chunk that came before its group. */
struct stashed {
    struct stashed *next;
    uint32_t from;
    struct pr_chunk_hdr h;
    uint64_t expires_ms;
    max_align_t data[]; /* the payload, pr_chunk_payload_bytes(&h) */
};

struct pr_engine {
    uv_loop_t *loop;
    uv_timer_t sweep;
    uv_timer_t kick; /* delivers done() outside of the caller's stack */
    size_t chunk_floats;
    size_t stash_max;
    size_t stash_bytes;
    uint32_t stash_ms; /* how long an early chunk waits for its group */
    pr_engine_resolve_fn resolve;
    void *ctx;
    struct group *groups;
    struct stashed *stash, **stash_tail;
    uint64_t max_started;
    struct pr_engine_stats st;
    int closing;
    int direct; /* members' memory may be posted as it is */
    void *(*mem_alloc)(void *ctx, size_t bytes);
    void (*mem_free)(void *ctx, void *p);
    void *mem_ctx;
    struct pr_pool *pool; /* NULL: all arithmetic inline, on the loop */
    float *spare;         /* a scratch vector freed, for the next group */
    size_t spare_bytes;
    uint64_t spare_ms; /* uv_now() when it became the spare */
};

/*
 * engine_jobs.c: arithmetic on the pool. J_SUM: a chunk of this daemon's
 * own segment, posted when summed; J_SAVE: one of the shadow's own
 * segment, its floats copied aside, posted (from the member) when copied;
 * J_WRITE: the results into the members; J_MEAN: a group of this daemon
 * alone, summed straight into them.
 */
enum jkind { J_SUM, J_SAVE, J_WRITE, J_MEAN };
/* Whether n floats of work go to the pool (else they run inline). */
int pr_engine_offload(const struct group *g, size_t n);
/* 0: the job's end comes back on the loop (posting a J_SUM); -ENOMEM. */
int pr_engine_submit(struct group *g, enum jkind kind, size_t off, size_t n);
/* The group's jobs skip the slices not begun; their ends still come. */
void pr_engine_cancel_jobs(struct group *g);
/*
 * The results into the members' tensors, on the pool or inline: from the
 * scratch vector, or for a group of this daemon alone summed and written
 * in one pass. The group is complete: an abort or detach that comes while
 * pool threads write is refused, as one that came after the write.
 */
void pr_engine_write_back(struct group *g);
/* The floats that write-back writes per member (the shadow's fewer). */
size_t pr_engine_write_back_floats(const struct group *g);

/*
 * engine.c, for engine_jobs.c: post a chunk from the scratch vector (0 or
 * the link's error), fail or end a running group, and schedule done() of
 * the groups that have ended (kick_cb: it checks what each still waits for).
 */
int pr_engine_post(struct group *g, uint32_t step, uint32_t seg, size_t off,
                   size_t n);
/*
 * Floats [off, off + n) of the own segment, within one of the lone
 * member's tensors, posted from its memory and recorded in own_sent: 0,
 * the link's error or -ENOMEM.
 */
int pr_engine_post_own(struct group *g, size_t off, size_t n);
void pr_engine_finish(struct group *g, int status);
void pr_engine_kick(struct pr_engine *e);
/*
 * engine.c, for engine_rx.c too: post floats [off, off + n) from src
 * (NULL: the scratch vector; 0 or the link's error); the group of that
 * id, or NULL; free g if nothing uses it any more (the engine too, once
 * closing); fail a group whose deadline passed, logged.
 */
int pr_engine_post_from(struct group *g, uint32_t step, uint32_t seg,
                        size_t off, size_t n, const float *src);
struct group *pr_engine_find(struct pr_engine *e, uint64_t id);
void pr_engine_maybe_free(struct group *g);
void pr_engine_fail_late(struct group *g);

/*
 * The group's deadline has passed: read from the clock, not the loop's
 * cached time (struct group, deadline_ns).
 */
static inline int pr_engine_past_deadline(const struct group *g)
{
    return uv_hrtime() >= g->deadline_ns;
}

/*
 * engine_rx.c: a chunk from `from` into running group g (data valid
 * during the call): checked, absorbed, forwarded; a bad or late one fails
 * the group, one from elsewhere than the left is dropped. And for a
 * transport that reads payloads into place (pr_link_sink.reserve): 1 with
 * *out where chunk h lands (claimed now; out->land absorbs it), or 0 when
 * it takes the usual way (on_chunk).
 */
void pr_engine_apply_chunk(struct group *g, uint32_t from,
                           const struct pr_chunk_hdr *h, const void *data);
int pr_engine_reserve(struct pr_engine *e, uint32_t from,
                      const struct pr_chunk_hdr *h, struct pr_landing *out);

/*
 * engine_scratch.c: a scratch vector of `bytes` (the spare one when it
 * fits, else a new one; NULL on ENOMEM), one given back (kept as the
 * spare unless the engine closes or the spare is larger), one freed for
 * good, and the spare freed when no group took it for a while (now_ms:
 * uv_now).
 */
float *pr_engine_scratch_get(struct pr_engine *e, size_t bytes);
void pr_engine_scratch_put(struct pr_engine *e, float *p, size_t bytes);
void pr_engine_scratch_release(struct pr_engine *e, float *p);
void pr_engine_scratch_expire(struct pr_engine *e, uint64_t now_ms);

/*
 * engine_stash.c: an early chunk copied into the stash (0; -ENOBUFS when
 * the stash is full, -ENOMEM; counted as dropped then); the chunks that
 * came before group g handed to it in arrival order (those of a group
 * that has failed only dropped); those from a node, or expired at now_ms
 * (uv_now), dropped; and all freed when the engine closes.
 */
int pr_engine_stash_chunk(struct pr_engine *e, uint32_t from,
                          const struct pr_chunk_hdr *h, const void *data);
void pr_engine_stash_replay(struct pr_engine *e, struct group *g);
void pr_engine_stash_drop_from(struct pr_engine *e, uint32_t node);
void pr_engine_stash_expire(struct pr_engine *e, uint64_t now_ms);
void pr_engine_stash_clear(struct pr_engine *e);

/*
 * engine_mode.c: sets g->in_place and g->shadow for the group spec
 * describes (g->e and g->mean_scale set); whether the write-back still
 * ends before the deadline; and, just before a shadow group's done() once
 * nothing uses its member's memory, a failed group's floats put back.
 */
void pr_engine_choose_mode(struct group *g, const struct pr_engine_group *spec);
int pr_engine_write_back_fits(const struct group *g);
void pr_engine_shadow_settle(struct group *g, int status);

/*
 * engine_wire.c: a group's wire buffer (and error-feedback vector) at
 * start (0 or -ENOMEM) and freed; where chunk bytes of a step lie in it;
 * the bytes to post for floats [off, off + n) of a step, encoded from src
 * (a lone member's memory) or the scratch vector where this daemon
 * encodes them (the reduce-scatter, and
 * the segment it completed, whose floats then become what every daemon
 * decodes); a received chunk's payload decoded into its place in the
 * scratch vector (and kept where the all-gather forwards it from); whether
 * a chunk's encoding and bounds fit (1, or 0 with *why); and the members'
 * error feedback replaced once the group succeeded.
 */
int pr_engine_wire_setup(struct group *g);
void pr_engine_wire_free(struct group *g);
uint8_t *pr_engine_wire_at(const struct group *g, uint32_t step, uint32_t seg,
                           size_t off);
const void *pr_engine_wire_out(struct group *g, uint32_t step, uint32_t seg,
                               size_t off, size_t n, const float *src);
void pr_engine_wire_in(struct group *g, const struct pr_chunk_hdr *h,
                       const void *data);
int pr_engine_wire_chunk_ok(const struct group *g, const struct pr_chunk_hdr *h,
                            const char **why);
void pr_engine_wire_feedback(struct group *g);

/*
 * engine_chunk.c: whether a chunk fits the group (its length, ring step,
 * segment and place in it; no more floats than the segment holds): 1, or
 * 0 with *why the reason for the log.
 */
int pr_engine_chunk_ok(const struct group *g, const struct pr_chunk_hdr *h,
                       const char **why);
/*
 * Records floats [lo, hi) of a step as received: 0, -EPROTO when some of
 * them had arrived already, -E2BIG when the step's arrivals are scattered
 * over too many pieces, -ENOMEM.
 */
int pr_engine_step_claim(struct step *s, size_t lo, size_t hi);
/* Whether floats [lo, hi) all lie in the spans of s (1 when lo == hi). */
int pr_engine_step_covers(const struct step *s, size_t lo, size_t hi);

/*
 * engine_local.c: floats are numbered across the members' parts, as in
 * the group's vector.
 */
void pr_engine_local_sum(struct group *g, size_t a, size_t b, const float *in,
                         float scale);
int pr_engine_each_piece(struct group *g, size_t off, size_t n,
                         int (*fn)(struct group *g, float *x, size_t at,
                                   size_t len, const float *in, void *arg),
                         const float *in, void *arg);
int pr_engine_final_in_place(struct group *g, float *x, size_t at, size_t len,
                             const float *in, void *arg);
int pr_engine_copy_in_place(struct group *g, float *x, size_t at, size_t len,
                            const float *in, void *arg);
/*
 * Whether chunk h's floats go into the member's memory (in place, or the
 * shadow's two segments) and are forwarded from there.
 */
int pr_engine_in_member(const struct group *g, const struct pr_chunk_hdr *h);
/*
 * Where a shadow group's all-gather chunk h lands in its member's memory:
 * NULL when h is none, or spans two of its tensors.
 */
float *pr_engine_member_dst(const struct group *g,
                            const struct pr_chunk_hdr *h);
/*
 * Floats [off, off + n) of the own segment into the scratch vector: cut
 * over the pool's threads while the loop waits, or (_range) on the
 * calling thread only, which may be a pool thread.
 */
void pr_engine_shadow_save(struct group *g, size_t off, size_t n);
void pr_engine_shadow_save_range(struct group *g, size_t off, size_t n);
/* The shadow's saved floats back into the member. */
void pr_engine_shadow_restore(struct group *g);
/*
 * A claimed chunk's floats into the group: summed in during the
 * reduce-scatter (the last step of it also scales), copied during the
 * all-gather, or written into the lone member's tensors
 * (pr_engine_in_member: in place from the last reduce-scatter step on, or
 * the shadow's two segments, their originals saved). Large chunks are cut
 * over the pool's threads, the loop thread taking its share and waiting
 * for the rest, since `data` lives only during the call.
 */
void pr_engine_absorb(struct group *g, const struct pr_chunk_hdr *h,
                      const float *data);
const float *pr_engine_direct_src(const struct group *g, size_t at, size_t *n);
/*
 * Floats [lo, hi) of the results into every local member's tensors that
 * is not detached (not in place). Runs on a pool thread: reads only the
 * members' parts and the scratch vector in that range.
 */
void pr_engine_write_range(struct group *g, size_t lo, size_t hi);
/*
 * A group of this daemon alone (m == 1, no scratch vector): floats
 * [lo, hi) of the local members' weighted sum, scaled, written straight
 * into each member that is not detached, a cache-sized block at a time:
 * each member's floats are read once and written once. Runs on a pool
 * thread, like pr_engine_write_range.
 */
void pr_engine_local_mean(struct group *g, size_t lo, size_t hi);
float pr_engine_uniform_scale(const struct pr_engine_group *spec);

#endif
