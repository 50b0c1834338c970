/* SPDX-License-Identifier: MIT */
/*
 * Length-prefixed frames, shared by every preduce link.
 *
 * Wire format (all integers big-endian):
 *
 *   0      4      6      8
 *   +------+------+------+----------------------+
 *   | len  | type | flags| payload (len bytes)  |
 *   +------+------+------+----------------------+
 *
 * type PR_FRAME_MSG carries one packed pr.v1.Msg; PR_FRAME_DATA carries a
 * binary chunk (daemon/engine/xport.h). A receiver refuses a frame whose length
 * exceeds its maximum before it buffers a single payload byte, so an
 * oversized prefix costs nothing but the header.
 *
 * The reader is plain memory: it never does I/O, so the event-loop code, the
 * blocking client and the tests all share it.
 */
#ifndef PR_FRAME_H
#define PR_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto/preduce.pb-c.h"

#define PR_PROTO_VERSION 1
#define PR_FRAME_HDR_LEN 8
/*
 * Largest control frame on the scheduler's and the trainers' links: a Group
 * of PR_SCHED_MAX (65536) members at their longest encoding (43 bytes each)
 * takes 2.8 MB, the ReduceDone a trainer gets for it 1.4 MB.
 */
#define PR_CTRL_MAX_FRAME (4u << 20)

enum pr_frame_type {
    PR_FRAME_MSG = 1,
    PR_FRAME_DATA = 2,
};

struct pr_frame_hdr {
    uint32_t len;
    uint16_t type;
    uint16_t flags;
};

void pr_frame_hdr_encode(uint8_t out[PR_FRAME_HDR_LEN], uint32_t len,
                         uint16_t type, uint16_t flags);
/* 0, -EMSGSIZE when len > max_len, -EPROTO on an unknown type. */
int pr_frame_hdr_decode(const uint8_t in[PR_FRAME_HDR_LEN], size_t max_len,
                        struct pr_frame_hdr *h);

/*
 * Reassembles frames from a byte stream. Owns one growable buffer that holds
 * at most one header plus max_len (+ extra) payload bytes beyond what was
 * consumed.
 */
struct pr_frame_reader {
    uint8_t *buf;
    size_t len; /* bytes buffered */
    size_t off; /* start of the unconsumed bytes */
    size_t cap;
    size_t max_len;
    /*
     * Bytes a frame may carry beyond max_len: a sealed link's tags
     * (daemon/base/seal.h), which the limits of what a frame says leave out.
     */
    size_t extra;
    size_t cur; /* bytes of the frame handed out by next(), 0 if none */
};

int pr_frame_reader_init(struct pr_frame_reader *r, size_t max_len);
void pr_frame_reader_fini(struct pr_frame_reader *r);
/* Space for at least `want` more bytes: *p, *n. 0 or -ENOMEM. */
int pr_frame_reader_reserve(struct pr_frame_reader *r, size_t want, void **p,
                            size_t *n);
/*
 * The same, without growing to hold the whole frame being assembled: for
 * a reader that takes only a frame's first bytes and has its payload read
 * elsewhere (a data frame landing in place, conn.c).
 */
int pr_frame_reader_reserve_few(struct pr_frame_reader *r, size_t want,
                                void **p, size_t *n);
void pr_frame_reader_commit(struct pr_frame_reader *r, size_t n);
/*
 * 1 and the next whole frame (the payload stays valid until the next call
 * to any reader function), 0 when more bytes are needed, or a negative errno
 * for a malformed header (the stream is then unusable).
 */
int pr_frame_reader_next(struct pr_frame_reader *r, struct pr_frame_hdr *h,
                         const uint8_t **payload);
/*
 * After next() returned 0: 1 when the bytes buffered are the start of one
 * frame whose header is in (*h, and the *n bytes buffered of it, header
 * included, at *p); 0 otherwise (less than a header, or a bad one, which
 * next() reports).
 */
int pr_frame_reader_partial(struct pr_frame_reader *r, struct pr_frame_hdr *h,
                            const uint8_t **p, size_t *n);
/*
 * Forgets the partial frame's buffered bytes: its caller takes the rest of
 * that frame off the stream itself (a payload read straight into place).
 */
void pr_frame_reader_drop_partial(struct pr_frame_reader *r);
/* Bytes buffered and not yet handed out. */
size_t pr_frame_reader_pending(const struct pr_frame_reader *r);

/*
 * A Msg carrying one body, in one expression: PR_MSG_OF(READY, ready, &rd)
 * is the envelope with body_case PR__V1__MSG__BODY_READY and .ready = &rd
 * (the body stays the caller's; the Msg only points to it).
 */
#define PR_MSG_OF(kind, member, body)                                          \
    ((Pr__V1__Msg){PROTOBUF_C_MESSAGE_INIT(&pr__v1__msg__descriptor),          \
                   .body_case = PR__V1__MSG__BODY_##kind, .member = (body)})

/*
 * Packs `m` into a freshly allocated frame (header included): *out is the
 * caller's to free. 0, -ENOMEM or -EMSGSIZE (larger than max_len).
 */
int pr_msg_frame(const Pr__V1__Msg *m, size_t max_len, uint8_t **out,
                 size_t *out_len);
/* Unpacks a MSG payload, or NULL on garbage. Free with pr_msg_free(). */
Pr__V1__Msg *pr_msg_unpack(const uint8_t *p, size_t n);
void pr_msg_free(Pr__V1__Msg *m);
/* The Msg case as a short name for logs ("hello", "ready", ...). */
const char *pr_msg_name(const Pr__V1__Msg *m);

#endif
