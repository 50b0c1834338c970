/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a byte stream as any control or data port reads it
 * (daemon/base/conn.c): the frame reader fed in pieces of the sizes the input
 * chooses, every whole MSG frame unpacked (and re-framed when it unpacks:
 * what a daemon parses it can also send) and every DATA frame's chunk
 * header decoded. A malformed header must end the stream with an error,
 * never read outside the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/engine/xport.h"
#include "proto/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* The first byte: how the stream is cut into reads. */
    size_t piece = (size_t)data[0] % 64 + 1;
    data++;
    size--;
    struct pr_frame_reader r;
    if (pr_frame_reader_init(&r, 1 << 16) < 0)
        return 0;
    size_t at = 0;
    int dead = 0;
    while (at < size && !dead) {
        void *p;
        size_t room;
        if (pr_frame_reader_reserve(&r, piece, &p, &room) < 0)
            break;
        size_t n = size - at < piece ? size - at : piece;
        if (n > room)
            n = room;
        memcpy(p, data + at, n);
        pr_frame_reader_commit(&r, n);
        at += n;
        for (;;) {
            struct pr_frame_hdr h;
            const uint8_t *payload;
            int rc = pr_frame_reader_next(&r, &h, &payload);
            if (rc < 0) {
                dead = 1;
                break;
            }
            if (rc == 0)
                break;
            if (h.type == PR_FRAME_MSG) {
                Pr__V1__Msg *m = pr_msg_unpack(payload, h.len);
                if (m) {
                    (void)pr_msg_name(m);
                    uint8_t *out;
                    size_t len;
                    if (pr_msg_frame(m, PR_CTRL_MAX_FRAME, &out, &len) == 0)
                        free(out);
                    pr_msg_free(m);
                }
            } else if (h.len >= PR_CHUNK_HDR_LEN) {
                struct pr_chunk_hdr ch;
                pr_chunk_hdr_decode(payload, &ch);
            }
        }
    }
    pr_frame_reader_fini(&r);
    return 0;
}
