/* SPDX-License-Identifier: MIT */
/*
 * fuzz_trainer.c's model of its two trainers and the node's rules for
 * them, apart from the steps that drive them: what each trainer was told
 * (its tensors, its reduce in flight), the node's answer each request
 * must get (node_tensor.c's and node_ipc.c's rules, restated), and the
 * checks of the node's replies and tables against that model. The
 * target's opening comment lists what these checks abort on. Its state
 * is the target's alone: only fuzz_trainer.c includes this header.
 */
#ifndef PREDUCE_TESTS_FUZZ_TRAINER_H
#define PREDUCE_TESTS_FUZZ_TRAINER_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/node/node_int.h"
#include "proto/status.h"
#include "tests/fuzz/fuzz_sock.h"

#define NSLOT 2
/* The node's limits, as the target's setup() sets them. */
#define TRAINER_TENSORS 4
#define TRAINER_MB      2
#define NODE_TENSORS    6
#define TENSOR_FLOATS   (1u << 18) /* node.max_tensor_mb = 1 */
#define REDUCE_IDS_MAX  4096       /* node_ipc.c's MAX_TENSORS_PER_REDUCE */

struct held {
    uint32_t id;
    uint64_t n;
    int doomed; /* destroyed while its reduce runs: kept until it ends */
};

/* A trainer as the harness knows it, from what the node told it. */
struct slot {
    struct fuzz_sock sock; /* our end of its connection */
    int gen;
    char name[16];
    uint32_t rank;
    int welcomed;
    int joined; /* the node holds a rank for it (its rank >= 0) */
    int fdq[4]; /* memfds received, not yet matched to their frame */
    int nfdq;
    struct held held[TRAINER_TENSORS];
    size_t nheld;
    uint32_t max_id;
    int inflight; /* a reduce accepted and not answered */
    uint64_t seq;
    uint32_t ids[TRAINER_TENSORS];
    size_t nids;
    uint64_t total;
    uint64_t next_seq;
};

/* What one step asks of a trainer's connection. */
enum want {
    W_NONE,    /* no answer (the reduce in flight may end) */
    W_CREATE,  /* TensorCreated, or Error with `code` */
    W_REDUCE,  /* ReduceDone `seq` with `code`, or accepted (code 0) */
    W_CLOSE,   /* the connection closes, unanswered */
    W_WELCOME, /* Welcome with the slot's rank */
    W_REFUSED, /* a (re-)join refused: Error, then the close */
};

struct expect {
    enum want what;
    uint64_t nfloats;
    uint64_t seq;
    int code;
    int got;
};

/* The node under test, and its trainers as the harness plays them. */
static struct pr_node *node;
static struct slot slots[NSLOT];
static int sched_up; /* the node's scheduler link, as the harness set it */

/* The node's trainer for slot s (its latest connection), or NULL. */
static struct node_trainer *node_of(const struct slot *s)
{
    for (struct node_trainer *c = node->trainers; c; c = c->next)
        if (!strcmp(c->name, s->name))
            return c;
    return NULL;
}

/* The memfd of a TensorCreated: sealed, of its size, the node's memory. */
static void check_shared(struct slot *s, int fd, const Pr__V1__TensorCreated *t)
{
    size_t bytes = (size_t)t->nfloats * sizeof(float);
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != bytes || seals < 0 ||
        (seals & want) != want)
        abort();
    float *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        abort();
    static float marker; /* a new value each time: not a stale match */
    marker += 1;
    p[0] = p[t->nfloats - 1] = marker;
    struct node_trainer *c = node_of(s);
    struct node_tensor *nt = c ? pr_node_tensor_by_id(c, t->tensor_id) : NULL;
    if (!nt || nt->n != t->nfloats || nt->data[0] != marker ||
        nt->data[t->nfloats - 1] != marker)
        abort(); /* the id is not that memory */
    munmap(p, bytes);
}

/* A frame the node sent slot s, held to e; the slot learns from it. */
static void on_reply(struct slot *s, const Pr__V1__Msg *m, struct expect *e)
{
    switch (m->body_case) {
    case PR__V1__MSG__BODY_TENSOR_CREATED: {
        const Pr__V1__TensorCreated *t = m->tensor_created;
        if (e->what != W_CREATE || e->got++ || e->code != 0 || s->nfdq == 0 ||
            t->nfloats != e->nfloats || t->tensor_id <= s->max_id ||
            s->nheld == TRAINER_TENSORS)
            abort();
        check_shared(s, s->fdq[0], t);
        close(s->fdq[0]);
        memmove(s->fdq, s->fdq + 1, --s->nfdq * sizeof(int));
        s->max_id = t->tensor_id;
        s->held[s->nheld++] =
            (struct held){.id = t->tensor_id, .n = t->nfloats};
        return;
    }
    case PR__V1__MSG__BODY_ERROR:
        if (!m->error->reason || !m->error->reason[0])
            abort(); /* an Error says why */
        if (e->what == W_CREATE && !e->got++ && e->code != 0 &&
            m->error->code == e->code)
            return;
        if (e->what == W_REFUSED && !e->got++ && m->error->code < 0)
            return;
        abort();
    case PR__V1__MSG__BODY_REDUCE_DONE: {
        const Pr__V1__ReduceDone *d = m->reduce_done;
        if (pr_reduce_status(d->status) != d->status)
            abort(); /* only the codes the library documents */
        if (s->inflight && d->seq == s->seq) {
            /* It ended: what it destroyed goes now. */
            size_t w = 0;
            for (size_t i = 0; i < s->nheld; i++)
                if (!s->held[i].doomed)
                    s->held[w++] = s->held[i];
            s->nheld = w;
            s->inflight = 0;
            return;
        }
        if (e->what == W_REDUCE && e->code != 0 && !e->got++ &&
            d->seq == e->seq && d->status == e->code)
            return;
        abort();
    }
    case PR__V1__MSG__BODY_WELCOME:
        if (e->what != W_WELCOME || e->got++ || m->welcome->id != s->rank)
            abort();
        s->welcomed = s->joined = 1;
        return;
    default:
        abort(); /* nothing else goes to a trainer */
    }
}

/* The node's tables against what its trainers were told. */
static void check_node(void)
{
    uint64_t mapped = 0;
    uint32_t reducing = 0;
    for (const struct node_trainer *c = node->trainers; c; c = c->next) {
        uint64_t bytes = 0;
        for (size_t i = 0; i < c->ntensors; i++) {
            const struct node_tensor *t = &c->tensors[i];
            if (!t->data || (t->doomed && !t->busy) ||
                (t->busy && c->rstate == R_NONE))
                abort();
            for (size_t j = 0; j < i; j++)
                if (c->tensors[j].id == t->id)
                    abort(); /* one id, two tensors */
            bytes += t->n * sizeof(float);
            mapped++;
        }
        if (c->ntensors > TRAINER_TENSORS || bytes > (uint64_t)TRAINER_MB << 20)
            abort();
        reducing += c->rstate != R_NONE;
        if (!c->conn && c->rstate == R_NONE)
            abort(); /* gone, nothing to wait for, and kept */
    }
    if (mapped != node->ntensors || mapped > NODE_TENSORS ||
        reducing != node->nreducing)
        abort();
    for (int k = 0; k < NSLOT; k++) {
        const struct slot *s = &slots[k];
        const struct node_trainer *c = node_of(s);
        if (s->sock.fd < 0)
            continue;
        if (!c || !c->conn || s->welcomed != (c->state == C_UP) ||
            (c->rstate != R_NONE) != s->inflight ||
            (s->inflight && c->seq != s->seq) || c->ntensors != s->nheld)
            abort();
        for (size_t i = 0; i < s->nheld; i++) {
            const struct node_tensor *t = NULL;
            int busy = 0;
            for (size_t j = 0; j < c->ntensors; j++)
                if (c->tensors[j].id == s->held[i].id)
                    t = &c->tensors[j];
            for (size_t j = 0; s->inflight && j < s->nids; j++)
                busy |= s->ids[j] == s->held[i].id;
            if (!t || t->n != s->held[i].n || t->doomed != s->held[i].doomed ||
                t->busy != busy)
                abort();
        }
    }
}

/* The node's answer to a TensorCreate by node_tensor.c's rules. */
static int create_code(const struct slot *s, uint64_t nf)
{
    if (nf == 0 || nf > TENSOR_FLOATS)
        return -EINVAL;
    uint64_t bytes = nf * sizeof(float);
    for (size_t i = 0; i < s->nheld; i++)
        bytes += s->held[i].n * sizeof(float);
    if (s->nheld >= TRAINER_TENSORS || bytes > (uint64_t)TRAINER_MB << 20)
        return -EDQUOT;
    return node->ntensors >= NODE_TENSORS ? -ENOSPC : 0;
}

/* Whether id is one of the reduce in flight's tensors. */
static int busy(const struct slot *s, uint32_t id)
{
    for (size_t j = 0; s->inflight && j < s->nids; j++)
        if (s->ids[j] == id)
            return 1;
    return 0;
}

/*
 * The node's answer to a Reduce by node_ipc.c's rules: 0 when it is
 * accepted (then its ids and floats go into s), else the refusal's code.
 */
static int reduce_code(struct slot *s, const Pr__V1__Reduce *r)
{
    if (s->inflight)
        return -EBUSY;
    if (r->n_tensor_ids == 0 || r->n_tensor_ids > REDUCE_IDS_MAX)
        return -EINVAL;
    if (!sched_up || !s->joined)
        return -ECONNRESET;
    if (r->n_tensor_ids > TRAINER_TENSORS)
        return -EINVAL; /* more ids than tensors: one is unknown or twice */
    s->total = 0;
    for (size_t i = 0; i < r->n_tensor_ids; i++) {
        const struct held *h = NULL;
        for (size_t j = 0; j < s->nheld; j++)
            if (s->held[j].id == r->tensor_ids[i] && !s->held[j].doomed)
                h = &s->held[j];
        for (size_t j = 0; h && j < i; j++)
            if (r->tensor_ids[j] == r->tensor_ids[i])
                h = NULL;
        if (!h)
            return -EINVAL;
        s->ids[i] = r->tensor_ids[i];
        s->total += h->n;
    }
    s->nids = r->n_tensor_ids;
    return 0;
}

#endif
