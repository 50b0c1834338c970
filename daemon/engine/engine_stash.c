/* SPDX-License-Identifier: MIT */
/*
 * The stash: chunks that arrive before their group starts on this node
 * (its neighbour got the scheduler's Group first), kept in arrival order
 * until the group starts, their sender's link goes or they expire. Apart
 * from a group's life (engine.c) since it holds no group: only copies of
 * chunks, bounded in bytes (stash_max) and in time (stash_ms).
 */
#include "daemon/engine/engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"

static void stash_drop(struct pr_engine *e, struct stashed **pp)
{
    struct stashed *s = *pp;
    *pp = s->next;
    if (!*pp)
        e->stash_tail = pp;
    e->stash_bytes -= pr_chunk_payload_bytes(&s->h);
    free(s);
}

void pr_engine_stash_replay(struct pr_engine *e, struct group *g)
{
    struct stashed **pp = &e->stash;
    while (*pp) {
        struct stashed *s = *pp;
        if (s->h.group_id != g->id) {
            pp = &s->next;
            continue;
        }
        if (g->state == G_RUNNING)
            pr_engine_apply_chunk(g, s->from, &s->h, s->data);
        stash_drop(e, pp);
    }
}

int pr_engine_stash_chunk(struct pr_engine *e, uint32_t from,
                          const struct pr_chunk_hdr *h, const void *data)
{
    size_t bytes = pr_chunk_payload_bytes(h);
    if (e->stash_bytes + bytes > e->stash_max) {
        e->st.chunks_dropped++;
        pr_warn("group %llu: early chunk from node %u dropped: stash full "
                "(%zu bytes)",
                (unsigned long long)h->group_id, from, e->stash_bytes);
        return -ENOBUFS;
    }
    struct stashed *s = malloc(sizeof(*s) + bytes);
    if (!s) {
        e->st.chunks_dropped++;
        return -ENOMEM;
    }
    s->next = NULL;
    s->from = from;
    s->h = *h;
    /*
     * An early chunk waits for its group as long as a reduce may take (the
     * node's reduce timeout): a group that has not started by then has
     * failed on the nodes that sent it, and its chunks only fill the stash.
     */
    s->expires_ms = uv_now(e->loop) + e->stash_ms;
    memcpy(s->data, data, bytes);
    *e->stash_tail = s;
    e->stash_tail = &s->next;
    e->stash_bytes += bytes;
    e->st.chunks_stashed++;
    return 0;
}

void pr_engine_stash_drop_from(struct pr_engine *e, uint32_t node)
{
    struct stashed **pp = &e->stash;
    while (*pp) {
        if ((*pp)->from == node)
            stash_drop(e, pp);
        else
            pp = &(*pp)->next;
    }
}

void pr_engine_stash_expire(struct pr_engine *e, uint64_t now_ms)
{
    struct stashed **pp = &e->stash;
    while (*pp) {
        if (now_ms >= (*pp)->expires_ms) {
            e->st.chunks_dropped++;
            stash_drop(e, pp);
        } else {
            pp = &(*pp)->next;
        }
    }
}

void pr_engine_stash_clear(struct pr_engine *e)
{
    while (e->stash) {
        struct stashed *s = e->stash;
        e->stash = s->next;
        free(s);
    }
}
