/* SPDX-License-Identifier: MIT */
#include "proto/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

void pr_frame_hdr_encode(uint8_t out[PR_FRAME_HDR_LEN], uint32_t len,
                         uint16_t type, uint16_t flags)
{
    put32(out, len);
    out[4] = type >> 8;
    out[5] = type;
    out[6] = flags >> 8;
    out[7] = flags;
}

int pr_frame_hdr_decode(const uint8_t in[PR_FRAME_HDR_LEN], size_t max_len,
                        struct pr_frame_hdr *h)
{
    h->len = get32(in);
    h->type = (uint16_t)(in[4] << 8 | in[5]);
    h->flags = (uint16_t)(in[6] << 8 | in[7]);
    if (h->len > max_len)
        return -EMSGSIZE;
    if (h->type != PR_FRAME_MSG && h->type != PR_FRAME_DATA)
        return -EPROTO;
    return 0;
}

int pr_frame_reader_init(struct pr_frame_reader *r, size_t max_len)
{
    memset(r, 0, sizeof(*r));
    r->max_len = max_len;
    r->cap = 4096;
    r->buf = malloc(r->cap);
    return r->buf ? 0 : -ENOMEM;
}

void pr_frame_reader_fini(struct pr_frame_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

/* Drops the frame handed out last and moves the rest to the front. */
static void settle(struct pr_frame_reader *r)
{
    r->off += r->cur;
    r->cur = 0;
    if (r->off == r->len) {
        r->off = 0;
        r->len = 0;
    } else if (r->off > r->cap / 2) {
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->len -= r->off;
        r->off = 0;
    }
}

static int reserve(struct pr_frame_reader *r, size_t want, int whole, void **p,
                   size_t *n)
{
    settle(r);
    if (r->off > 0) {
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->len -= r->off;
        r->off = 0;
    }
    /*
     * Grow to hold the frame being assembled, so a large data chunk arrives
     * in few reads; never beyond one whole frame plus a header.
     */
    size_t need = r->len + want;
    if (whole && r->len >= PR_FRAME_HDR_LEN) {
        struct pr_frame_hdr h;
        if (pr_frame_hdr_decode(r->buf, r->max_len + r->extra, &h) == 0 &&
            PR_FRAME_HDR_LEN + (size_t)h.len + PR_FRAME_HDR_LEN > need)
            need = PR_FRAME_HDR_LEN + (size_t)h.len + PR_FRAME_HDR_LEN;
    }
    if (need > r->cap) {
        size_t cap = r->cap;
        while (cap < need)
            cap *= 2;
        uint8_t *b = realloc(r->buf, cap);
        if (!b)
            return -ENOMEM;
        r->buf = b;
        r->cap = cap;
    }
    *p = r->buf + r->len;
    *n = r->cap - r->len;
    return 0;
}

int pr_frame_reader_reserve(struct pr_frame_reader *r, size_t want, void **p,
                            size_t *n)
{
    return reserve(r, want, 1, p, n);
}

int pr_frame_reader_reserve_few(struct pr_frame_reader *r, size_t want,
                                void **p, size_t *n)
{
    return reserve(r, want, 0, p, n);
}

void pr_frame_reader_commit(struct pr_frame_reader *r, size_t n)
{
    r->len += n;
}

int pr_frame_reader_next(struct pr_frame_reader *r, struct pr_frame_hdr *h,
                         const uint8_t **payload)
{
    settle(r);
    size_t avail = r->len - r->off;
    if (avail < PR_FRAME_HDR_LEN)
        return 0;
    int rc = pr_frame_hdr_decode(r->buf + r->off, r->max_len + r->extra, h);
    if (rc < 0)
        return rc;
    if (avail < PR_FRAME_HDR_LEN + (size_t)h->len)
        return 0;
    *payload = r->buf + r->off + PR_FRAME_HDR_LEN;
    r->cur = PR_FRAME_HDR_LEN + h->len;
    return 1;
}

int pr_frame_reader_partial(struct pr_frame_reader *r, struct pr_frame_hdr *h,
                            const uint8_t **p, size_t *n)
{
    settle(r);
    size_t avail = r->len - r->off;
    if (avail < PR_FRAME_HDR_LEN ||
        pr_frame_hdr_decode(r->buf + r->off, r->max_len + r->extra, h) < 0 ||
        avail >= PR_FRAME_HDR_LEN + (size_t)h->len)
        return 0;
    *p = r->buf + r->off;
    *n = avail;
    return 1;
}

void pr_frame_reader_drop_partial(struct pr_frame_reader *r)
{
    r->off = 0;
    r->len = 0;
    r->cur = 0;
}

size_t pr_frame_reader_pending(const struct pr_frame_reader *r)
{
    return r->len - r->off - r->cur;
}

int pr_msg_frame(const Pr__V1__Msg *m, size_t max_len, uint8_t **out,
                 size_t *out_len)
{
    size_t n = pr__v1__msg__get_packed_size(m);
    if (n > max_len || n > UINT32_MAX)
        return -EMSGSIZE;
    uint8_t *b = malloc(PR_FRAME_HDR_LEN + n);
    if (!b)
        return -ENOMEM;
    pr_frame_hdr_encode(b, (uint32_t)n, PR_FRAME_MSG, 0);
    pr__v1__msg__pack(m, b + PR_FRAME_HDR_LEN);
    *out = b;
    *out_len = PR_FRAME_HDR_LEN + n;
    return 0;
}

Pr__V1__Msg *pr_msg_unpack(const uint8_t *p, size_t n)
{
    Pr__V1__Msg *m = pr__v1__msg__unpack(NULL, n, p);
    if (m && m->body_case == PR__V1__MSG__BODY__NOT_SET) {
        pr__v1__msg__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void pr_msg_free(Pr__V1__Msg *m)
{
    if (m)
        pr__v1__msg__free_unpacked(m, NULL);
}

const char *pr_msg_name(const Pr__V1__Msg *m)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(
        &pr__v1__msg__descriptor, (unsigned)m->body_case);
    return f ? f->name : "unknown";
}
