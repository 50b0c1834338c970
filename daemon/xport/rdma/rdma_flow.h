/* SPDX-License-Identifier: MIT */
/*
 * The pure bookkeeping of the RDMA transport, apart from verbs so that
 * plain unit tests cover it: receive-slot credits and the cutting of an
 * engine chunk into writes that fit the peer's slots.
 *
 * Credits: the receiver owns `slots` receive slots of `slot_bytes` each and
 * advertises them once. The sender writes slot after slot, round robin,
 * spending one credit per write, and stops at zero. The receiver consumes
 * slots in order (an RC queue pair delivers in order) and returns the count
 * it consumed, and the sender adds them back, so a slot is never
 * overwritten before the receiver is done with it. Returns ride in the
 * immediate of the receiver's own next data write to that peer (in a ring
 * of two daemons every chunk is answered by one going back, so no message
 * is spent on credits); a zero-length write-with-immediate flagged as a
 * credit message carries them only once a quarter of the slots is held
 * (pr_credit_due), so the sender's window never shrinks by more than that.
 * A sender out of credits has every slot written and unreturned; the
 * receiver consumes them all and so passes the threshold: no deadlock.
 * Returns ride only to a peer that said it reads them (RdmaInfo.credit_imm);
 * an older peer's data immediates (the slot alone) decode the same here.
 */
#ifndef PR_RDMA_FLOW_H
#define PR_RDMA_FLOW_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/engine/xport.h"

/*
 * Immediate data: a credit message (flag | count), or a data write: the
 * slot in the low 16 bits, credits returned with it in bits 16..30.
 */
#define PR_IMM_CREDIT    0x80000000u
#define PR_IMM_MASK      0x7fffffffu
#define PR_IMM_SLOT_MASK 0xffffu
#define PR_IMM_PIGGY_MAX 0x7fffu

struct pr_credit {
    uint32_t slots;     /* the peer's receive slots */
    uint32_t credits;   /* writes this side may still post */
    uint32_t next_slot; /* the peer slot the next write goes to */
    uint32_t consumed;  /* our slots consumed, not yet returned */
};

void pr_credit_init(struct pr_credit *c, uint32_t peer_slots);
/* Takes a credit: 0 and the slot to write, or -EAGAIN at zero credits. */
int pr_credit_take(struct pr_credit *c, uint32_t *slot);
/* The peer returned n credits; -EPROTO if that exceeds what was taken. */
int pr_credit_give(struct pr_credit *c, uint32_t n);
/* This side consumed one of its own slots. */
void pr_credit_consumed(struct pr_credit *c);
/*
 * How many credits a credit message should return now (and forgets them),
 * or 0: all that are held once they reach a quarter of this side's
 * `own_slots` (at least 1).
 */
uint32_t pr_credit_due(struct pr_credit *c, uint32_t own_slots);
/* The credits a data write takes along: all that are held (forgotten). */
uint32_t pr_credit_piggyback(struct pr_credit *c);

/* Encodes and decodes the immediate (host order). */
uint32_t pr_imm_data(uint32_t slot, uint32_t credits);
uint32_t pr_imm_credit(uint32_t n);
/*
 * 1: a credit message returning *n; 0: data in slot *n returning
 * *credits; -EPROTO: out of range (a slot beyond `slots`, a credit message
 * returning none).
 */
int pr_imm_decode(uint32_t imm, uint32_t slots, uint32_t *n, uint32_t *credits);

/*
 * Cuts chunk `h` into pieces that fit a peer slot of `slot_bytes` (a chunk
 * header plus payload). Piece i covers floats [h->off + i * per, ...).
 * Returns the number of pieces (>= 1), or 0 if a slot cannot hold even a
 * header and one float (one block for int8) or h's encoding is none.
 * Pieces of an int8 chunk are whole blocks of it (wire.h).
 */
size_t pr_rdma_pieces(const struct pr_chunk_hdr *h, size_t slot_bytes,
                      uint32_t *per_piece);
/* The header of piece i of `h` (same group, step, segment). */
void pr_rdma_piece(const struct pr_chunk_hdr *h, uint32_t per, size_t i,
                   struct pr_chunk_hdr *out);

/*
 * The smallest and largest receive slot a peer may advertise: a chunk
 * header plus 4 KiB to 64 MiB (transport.chunk_kb's bounds). Smaller
 * slots would cut every chunk into thousands of writes.
 */
#define PR_RDMA_SLOT_MIN  (PR_CHUNK_HDR_LEN + 4096u)
#define PR_RDMA_SLOT_MAX  (PR_CHUNK_HDR_LEN + (64u << 20) + 64u)
#define PR_RDMA_SLOTS_MAX 1024u
/* 0 when a peer's advertised slots are within those bounds, else -EPROTO. */
int pr_rdma_slots_ok(uint32_t slots, uint32_t slot_bytes);
/*
 * A data write that landed in one of this side's slots of `slot_bytes`:
 * 0 when its length fits the slot and matches the chunk header written
 * with it (h's payload after the header), else -EPROTO. The length
 * must be checked against the slot: the peer may write across slots.
 */
int pr_rdma_write_ok(uint32_t byte_len, size_t slot_bytes,
                     const struct pr_chunk_hdr *h);

#endif
