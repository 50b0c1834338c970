/* SPDX-License-Identifier: MIT */
#include "daemon/xport/rdma/rdma_flow.h"

#include <errno.h>

#include "daemon/engine/wire.h"

void pr_credit_init(struct pr_credit *c, uint32_t peer_slots)
{
    c->slots = peer_slots;
    c->credits = peer_slots;
    c->next_slot = 0;
    c->consumed = 0;
}

int pr_credit_take(struct pr_credit *c, uint32_t *slot)
{
    if (c->credits == 0 || c->slots == 0)
        return -EAGAIN;
    c->credits--;
    *slot = c->next_slot;
    c->next_slot = (c->next_slot + 1) % c->slots;
    return 0;
}

int pr_credit_give(struct pr_credit *c, uint32_t n)
{
    if (n > c->slots - c->credits)
        return -EPROTO;
    c->credits += n;
    return 0;
}

void pr_credit_consumed(struct pr_credit *c)
{
    c->consumed++;
}

uint32_t pr_credit_due(struct pr_credit *c, uint32_t own_slots)
{
    uint32_t hold = own_slots / 4 ? own_slots / 4 : 1;
    if (c->consumed < hold)
        return 0;
    uint32_t n = c->consumed;
    c->consumed = 0;
    return n;
}

uint32_t pr_credit_piggyback(struct pr_credit *c)
{
    uint32_t n =
        c->consumed < PR_IMM_PIGGY_MAX ? c->consumed : PR_IMM_PIGGY_MAX;
    c->consumed -= n;
    return n;
}

uint32_t pr_imm_data(uint32_t slot, uint32_t credits)
{
    return (slot & PR_IMM_SLOT_MASK) | (credits & PR_IMM_PIGGY_MAX) << 16;
}

uint32_t pr_imm_credit(uint32_t n)
{
    return PR_IMM_CREDIT | (n & PR_IMM_MASK);
}

int pr_imm_decode(uint32_t imm, uint32_t slots, uint32_t *n, uint32_t *credits)
{
    if (imm & PR_IMM_CREDIT) {
        *n = imm & PR_IMM_MASK;
        *credits = 0;
        return *n == 0 ? -EPROTO : 1;
    }
    *n = imm & PR_IMM_SLOT_MASK;
    *credits = imm >> 16 & PR_IMM_PIGGY_MAX;
    return *n < slots ? 0 : -EPROTO;
}

size_t pr_rdma_pieces(const struct pr_chunk_hdr *h, size_t slot_bytes,
                      uint32_t *per_piece)
{
    if (slot_bytes < PR_CHUNK_HDR_LEN + sizeof(float) ||
        h->enc >= PR_WIRE_COUNT)
        return 0;
    size_t room = slot_bytes - PR_CHUNK_HDR_LEN, per;
    /* int8 pieces are whole blocks, as the chunk's own (wire.h). */
    if (h->enc == PR_WIRE_INT8)
        per = room / PR_WIRE_BLOCK_BYTES * PR_WIRE_BLOCK;
    else
        per = room / (pr_wire_bytes((enum pr_wire)h->enc, 2) / 2);
    if (per == 0)
        return 0;
    if (per > UINT32_MAX)
        per = UINT32_MAX;
    *per_piece = (uint32_t)per;
    if (h->nfloats == 0)
        return 1;
    return (h->nfloats + per - 1) / per;
}

void pr_rdma_piece(const struct pr_chunk_hdr *h, uint32_t per, size_t i,
                   struct pr_chunk_hdr *out)
{
    *out = *h;
    size_t first = i * (size_t)per;
    out->off = h->off + first;
    size_t left = h->nfloats > first ? h->nfloats - first : 0;
    out->nfloats = (uint32_t)(left < per ? left : per);
}

int pr_rdma_slots_ok(uint32_t slots, uint32_t slot_bytes)
{
    if (slots == 0 || slots > PR_RDMA_SLOTS_MAX ||
        slot_bytes < PR_RDMA_SLOT_MIN || slot_bytes > PR_RDMA_SLOT_MAX)
        return -EPROTO;
    return 0;
}

int pr_rdma_write_ok(uint32_t byte_len, size_t slot_bytes,
                     const struct pr_chunk_hdr *h)
{
    if (byte_len > slot_bytes || byte_len < PR_CHUNK_HDR_LEN ||
        h->enc >= PR_WIRE_COUNT ||
        byte_len - PR_CHUNK_HDR_LEN != pr_chunk_payload_bytes(h))
        return -EPROTO;
    return 0;
}
