/* SPDX-License-Identifier: MIT */
#include "daemon/engine/xport.h"

#include "daemon/engine/wire.h"

size_t pr_chunk_payload_bytes(const struct pr_chunk_hdr *h)
{
    if (h->enc >= PR_WIRE_COUNT)
        return 0;
    return pr_wire_bytes((enum pr_wire)h->enc, h->nfloats);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void pr_chunk_hdr_encode(uint8_t out[PR_CHUNK_HDR_LEN],
                         const struct pr_chunk_hdr *h)
{
    put64(out, h->group_id);
    put64(out + 8, h->total);
    put64(out + 16, h->off);
    put32(out + 24, h->nfloats);
    put32(out + 28, h->step);
    put32(out + 32, h->seg);
    put32(out + 36, h->enc);
}

void pr_chunk_hdr_decode(const uint8_t in[PR_CHUNK_HDR_LEN],
                         struct pr_chunk_hdr *h)
{
    h->group_id = get64(in);
    h->total = get64(in + 8);
    h->off = get64(in + 16);
    h->nfloats = get32(in + 24);
    h->step = get32(in + 28);
    h->seg = get32(in + 32);
    h->enc = get32(in + 36);
}

void pr_link_rate_sample(struct pr_link *l, size_t bytes, uint64_t ns,
                         uint64_t now_ms)
{
    if (bytes < PR_LINK_RATE_MIN || ns == 0)
        return;
    double r = (double)bytes * 1e9 / (double)ns;
    l->rate_in = l->rate_in > 0 ? 0.75 * l->rate_in + 0.25 * r : r;
    l->rate_in_ms = now_ms;
}
