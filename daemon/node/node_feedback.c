/* SPDX-License-Identifier: MIT */
/*
 * int8's error feedback on the node (transport.wire, docs/algorithm.md):
 * what rounding to int8 lost from a trainer's floats, kept here and added
 * to its next reduce of the same tensors, so that nothing the trainer
 * sends is lost for good, only late.
 *
 * The engine takes one vector per member, parallel to the member's parts
 * (pr_engine_member.err), so a vector belongs to one list of tensors in
 * one order: a trainer that reduces its model in buckets has one per
 * bucket, and one that reduces all of it at once has one. Invariants:
 *  - a tensor's loss is in at most one vector (node_tensor.fb), so a
 *    trainer's vectors hold at most as many floats as its tensors: a
 *    reduce of a list that shares a tensor with a kept one drops that
 *    one, and a new vector starts at zero;
 *  - a vector lives as long as every one of its tensors and its trainer:
 *    destroying a tensor drops the vector that holds it, when no reduce
 *    reads the tensor any more (node_tensor.c, node_ipc.c);
 *  - only the reduce in flight uses one (node_trainer.err), whose tensors
 *    are all busy, and vectors are dropped only while the trainer has no
 *    reduce in flight or for a tensor that is not busy, so the engine's
 *    vector outlives its group.
 * The vectors are the daemon's own memory (calloc), never the memory it
 * shares with the trainer, and not counted in the tensor quotas; their
 * bytes are in pr_node.feedback_bytes. Loop thread only, though the
 * engine's pool threads read and write the floats while a group runs.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/node/node_int.h"

struct node_feedback {
    struct node_feedback *next;
    float *err;   /* total floats, the parts' concatenation's order */
    size_t total; /* floats */
    size_t nids;
    uint32_t ids[]; /* the reduce's tensor ids, in its order */
};

/* Unlinks fb from c's list, clears its tensors' marks and frees it. */
static void drop(struct node_trainer *c, struct node_feedback *fb)
{
    struct node_feedback **pp = &c->feedback;
    while (*pp && *pp != fb)
        pp = &(*pp)->next;
    if (*pp)
        *pp = fb->next;
    for (size_t i = 0; i < c->ntensors; i++)
        if (c->tensors[i].fb == fb)
            c->tensors[i].fb = NULL;
    c->node->feedback_bytes -= fb->total * sizeof(float);
    free(fb->err);
    free(fb);
}

/* Whether fb is the vector of exactly these tensors, in this order. */
static int same(const struct node_feedback *fb, struct node_tensor *const *ts,
                size_t n, size_t total)
{
    if (!fb || fb->nids != n || fb->total != total)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (ts[i]->id != fb->ids[i])
            return 0;
    return 1;
}

int pr_node_feedback_get(struct node_trainer *c, struct node_tensor *const *ts,
                         size_t n, size_t total, float **err)
{
    if (n > 0 && same(ts[0]->fb, ts, n, total)) {
        *err = ts[0]->fb->err;
        return 0;
    }
    struct node_feedback *fb = malloc(sizeof(*fb) + n * sizeof(fb->ids[0]));
    float *e = calloc(total ? total : 1, sizeof(float));
    if (!fb || !e) {
        free(fb);
        free(e);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        if (ts[i]->fb)
            drop(c, ts[i]->fb);
    fb->err = e;
    fb->total = total;
    fb->nids = n;
    for (size_t i = 0; i < n; i++) {
        fb->ids[i] = ts[i]->id;
        ts[i]->fb = fb;
    }
    fb->next = c->feedback;
    c->feedback = fb;
    c->node->feedback_bytes += total * sizeof(float);
    *err = e;
    return 0;
}

void pr_node_feedback_forget(struct node_trainer *c, struct node_tensor *t)
{
    if (t->fb)
        drop(c, t->fb);
}

void pr_node_feedback_free(struct node_trainer *c)
{
    while (c->feedback) {
        struct node_feedback *fb = c->feedback;
        c->feedback = fb->next;
        c->node->feedback_bytes -= fb->total * sizeof(float);
        free(fb->err);
        free(fb);
    }
    for (size_t i = 0; i < c->ntensors; i++)
        c->tensors[i].fb = NULL;
    c->err = NULL;
}
