/* SPDX-License-Identifier: MIT */
/*
 * Links to peers for the fuzz targets that drive the reduce engine
 * (fuzz_engine, fuzz_group): a send is queued, not written, and completes
 * when the target says, with the status it chooses, so that the input
 * decides when chunks leave and whether they fail. Header-only, as each
 * target links alone.
 */
#ifndef PREDUCE_TESTS_FUZZ_LINKS_H
#define PREDUCE_TESTS_FUZZ_LINKS_H

#include <errno.h>
#include <stdlib.h>

#include "daemon/engine/xport.h"

struct fuzz_send {
    struct fuzz_send *next;
    pr_send_cb cb;
    void *arg;
};

struct fuzz_link {
    struct pr_link base; /* base.ops = &fuzz_link_ops */
    struct fuzz_send *q;
};

static inline int fuzz_link_send(struct pr_link *l,
                                 const struct pr_chunk_hdr *h, const void *data,
                                 pr_send_cb cb, void *arg)
{
    (void)h;
    (void)data;
    struct fuzz_link *f = (struct fuzz_link *)l;
    struct fuzz_send *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->cb = cb;
    s->arg = arg;
    s->next = f->q;
    f->q = s;
    return 0;
}

/* A reset leaves the queue: the target completes it, with an error. */
static inline void fuzz_link_reset(struct pr_link *l, int status)
{
    (void)l;
    (void)status;
}

static const struct pr_link_ops fuzz_link_ops = {.send = fuzz_link_send,
                                                 .reset = fuzz_link_reset};

/* Completes every send queued on the n links with status. */
static inline void fuzz_links_complete(struct fuzz_link *links, int n,
                                       int status)
{
    for (int i = 0; i < n; i++) {
        while (links[i].q) {
            struct fuzz_send *s = links[i].q;
            links[i].q = s->next;
            s->cb(s->arg, status);
            free(s);
        }
    }
}

#endif
