/* SPDX-License-Identifier: MIT */
/*
 * The engine fixture's landing links (engine_fixture.h, struct memlink's
 * land knobs): chunks delivered through the sink's reserve() and land(),
 * as the TCP transport reads a payload straight into its place.
 */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/xport.h"
#include "tests/unit/engine_fixture.h"

/* A landing that reserve() granted and land() has not ended yet. */
struct landing {
    struct landing *next;
    struct pr_landing ld;
    struct pr_chunk_hdr h;
    uint32_t from;
    max_align_t data[]; /* the payload, pr_chunk_payload_bytes() */
};

/*
 * Ends a landing as a transport would: the payload (status 0), or half of
 * it (the link closed inside the frame), at the place reserve() gave,
 * then land(), exactly once.
 */
static void land_end(struct memlink *l, struct pr_landing *ld, uint32_t from,
                     const struct pr_chunk_hdr *h, const void *data, int status)
{
    size_t n = pr_chunk_payload_bytes(h);
    memcpy(ld->dst, data, status == 0 ? n : n / 2);
    l->landed++;
    ld->land(ld, from, h, status);
}

/* A chunk by way of the engine's reserve(), as TCP reads one into place. */
void memlink_land(struct memlink *l, struct pr_engine *e, uint32_t from,
                  const struct pr_chunk_hdr *h, const void *data)
{
    struct pr_link_sink sink = pr_engine_sink(e);
    struct pr_landing ld = {0};
    if (!sink.reserve(sink.ctx, from, h, &ld)) {
        l->refused++;
        l->refused_floats += h->nfloats;
        sink.on_chunk(sink.ctx, from, h, data);
        return;
    }
    ck_assert_ptr_nonnull(ld.dst);
    ck_assert_ptr_nonnull(ld.land);
    l->reserved++;
    if (l->land_hold) {
        size_t bytes = pr_chunk_payload_bytes(h);
        struct landing *hl = malloc(sizeof(*hl) + bytes);
        ck_assert_ptr_nonnull(hl);
        hl->next = NULL;
        hl->ld = ld;
        hl->h = *h;
        hl->from = from;
        memcpy(hl->data, data, bytes);
        *l->held_tail = hl;
        l->held_tail = &hl->next;
        l->nheld++;
        return;
    }
    int status = l->landed >= l->land_fail_at ? l->land_fail : 0;
    land_end(l, &ld, from, h, data, status);
}

size_t link_land_release(struct net *net, int a, int b, int status)
{
    struct memlink *l = &net->links[a][b];
    size_t n = 0;
    while (l->held) {
        struct landing *hl = l->held;
        l->held = hl->next;
        if (!l->held)
            l->held_tail = &l->held;
        l->nheld--;
        land_end(l, &hl->ld, hl->from, &hl->h, hl->data, status);
        free(hl);
        n++;
    }
    return n;
}

void net_land_all(struct net *net, int land)
{
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            net->links[a][b].land = land;
}

size_t net_reserved(const struct net *net)
{
    size_t n = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            n += net->links[a][b].reserved;
    return n;
}

size_t net_refused(const struct net *net)
{
    size_t n = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            n += net->links[a][b].refused;
    return n;
}

size_t net_refused_floats(const struct net *net)
{
    size_t n = 0;
    for (int a = 0; a < net->n; a++)
        for (int b = 0; b < net->n; b++)
            n += net->links[a][b].refused_floats;
    return n;
}
