/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the immediate word of an RDMA write from a peer
 * (pr_imm_decode, daemon/xport/rdma/rdma_flow.c), and the credits it
 * returns, as on_recv() in rdma_qp.c takes them. The first four bytes
 * choose this side's receive slots and the peer's (1..PR_RDMA_SLOTS_MAX,
 * as pr_rdma_slots_ok admits); then each record is either an immediate
 * that arrives (an even byte and the 4-byte word), or a write this side
 * posts (an odd byte), whose immediate the peer decodes. rdma_flow.h's contract
 * is checked, abort() on a breach: a decode is one of its three answers, in
 * range, and gives back exactly the word pr_imm_data or pr_imm_credit makes of
 * its results; what this side encodes decodes to what it meant; credits never
 * exceed the peer's slots, and a return of more than were taken is refused and
 * changes nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/xport/rdma/rdma_flow.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decodes imm against `slots` and checks the answer: returns it. */
static int decode(uint32_t imm, uint32_t slots, uint32_t *n, uint32_t *back)
{
    *n = *back = 0x5555;
    int kind = pr_imm_decode(imm, slots, n, back);
    switch (kind) {
    case 1:
        if (!(imm & PR_IMM_CREDIT) || *n == 0 || *n > PR_IMM_MASK ||
            *back != 0 || pr_imm_credit(*n) != imm)
            abort();
        break;
    case 0:
        if ((imm & PR_IMM_CREDIT) || *n >= slots || *n > PR_IMM_SLOT_MASK ||
            *back > PR_IMM_PIGGY_MAX || pr_imm_data(*n, *back) != imm)
            abort();
        /* An older peer's immediate, the slot alone, returns nothing. */
        if (imm <= PR_IMM_SLOT_MASK && *back != 0)
            abort();
        break;
    case -EPROTO:
        /* Only a credit message of none or a slot past ours is refused. */
        if (imm & PR_IMM_CREDIT ? (imm & PR_IMM_MASK) != 0
                                : (imm & PR_IMM_SLOT_MASK) < slots)
            abort();
        break;
    default:
        abort();
    }
    return kind;
}

/* The peer returned n credits: pr_credit_give's contract. */
static void give(struct pr_credit *cr, uint32_t n)
{
    struct pr_credit before = *cr;
    int rc = pr_credit_give(cr, n);
    if (rc != 0 && rc != -EPROTO)
        abort();
    if ((rc < 0) != (n > before.slots - before.credits))
        abort();
    if (rc < 0 && memcmp(&before, cr, sizeof(before)) != 0)
        abort();
    if (rc == 0 && cr->credits != before.credits + n)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_cursor c = {data, size};
    uint32_t own = fuzz_take(&c, 2) % PR_RDMA_SLOTS_MAX + 1;
    uint32_t peer = fuzz_take(&c, 2) % PR_RDMA_SLOTS_MAX + 1;
    /* The peer's slots as this side spends them; its own it holds. */
    struct pr_credit cr;
    pr_credit_init(&cr, peer);
    while (c.n > 0) {
        uint32_t op = fuzz_take(&c, 1);
        uint32_t n, back;
        if (op & 1) {
            /* This side writes: into a peer slot, while credits last. */
            uint32_t had = cr.credits, slot = UINT32_MAX;
            int rc = pr_credit_take(&cr, &slot);
            if (rc != (had ? 0 : -EAGAIN))
                abort();
            if (rc < 0)
                continue;
            if (slot >= peer || cr.next_slot >= peer || cr.credits != had - 1)
                abort();
            uint32_t held = cr.consumed;
            uint32_t with = op & 2 ? pr_credit_piggyback(&cr) : 0;
            if (with > PR_IMM_PIGGY_MAX || cr.consumed != held - with)
                abort();
            /* The peer, with `peer` slots, reads what was meant. */
            if (decode(pr_imm_data(slot, with), peer, &n, &back) != 0 ||
                n != slot || back != with)
                abort();
            continue;
        }
        int kind = decode(fuzz_take(&c, 4), own, &n, &back);
        if (kind < 0)
            continue; /* on_recv fails the link; the next word goes on */
        give(&cr, kind == 1 ? n : back);
        if (cr.credits > cr.slots)
            abort();
        if (kind == 0)
            pr_credit_consumed(&cr);
        uint32_t held = cr.consumed;
        uint32_t due = pr_credit_due(&cr, own);
        uint32_t hold = own / 4 ? own / 4 : 1;
        if (due ? due != held || due < hold || cr.consumed != 0
                : held >= hold || cr.consumed != held)
            abort();
        /* The credit message this side sends decodes as one at the peer. */
        if (due &&
            (decode(pr_imm_credit(due), peer, &n, &back) != 1 || n != due))
            abort();
    }
    return 0;
}
