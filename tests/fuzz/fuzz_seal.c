/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the reading side of a sealed connection
 * (daemon/base/conn.c with seal.h), as a daemon's dialling side has it.
 * A real pr_conn reads one end of a socket pair on a private loop; the
 * harness, playing the accepting side, writes the other end: first a
 * Welcome-like frame in clear, which the conn hashes into its transcript
 * and on which it seals (role 'C', as node.c and xport_handshake.c do on
 * a Welcome), then the frames the input asks for, in pieces of the
 * input's size with the loop run after each, so that reads end
 * anywhere: inside headers, prefixes, payloads and tags, and the clear
 * frame and sealed ones share a read.
 *
 * The input: a setup (cipher; how the owner takes data frames: whole,
 * landed through the conn's bounce buffer, the same but for odd frames,
 * which it refuses, or landed and opened in place; the write size; a
 * small re-key volume on both sides or none), then steps,
 * each a byte and its arguments (fuzz_take): a Ping, a data frame (its
 * prefix length, its payload length up to 300 KB; the bytes are a
 * pattern of its number), or a message of the input's bytes, each sealed
 * by the harness with the right key and record number; the same with
 * one byte altered at an input-chosen offset (header, ciphertext or a
 * tag) by an input-chosen mask; or raw bytes of the input's. The nonces
 * are a hash of the whole input, so that no input can carry a record
 * that opens.
 *
 * It aborts when the conn hands its owner anything but the frames sealed
 * before the first altered frame or raw bytes, each once, in order, with
 * the bytes sealed (a message as it unpacks; a landing's bytes once it
 * ends with 0); when on_data_begin comes for a frame whose prefix is not
 * authentic, or a landing it begins does not end exactly once (< 0 for
 * an altered frame, and then, through the bounce buffer, with not a byte
 * written at the owner's place); when a frame sealed before the first
 * alteration is not delivered; when the conn's close status is not < 0
 * for a first altered frame (or raw bytes) that is whole in the stream,
 * not <= 0 for one the stream ends inside, -EPROTO for an authentic
 * message that is not a Msg, 0 (the harness's close) without any; or
 * when the loop is not left empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conn.h"
#include "daemon/base/log.h"
#include "daemon/base/seal.h"
#include "proto/frame.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PREFIX      40 /* the TCP transport's data_prefix */
#define MAX_FRAME   (1u << 20)
#define T           PR_SEAL_TAG_LEN
#define MAX_ITEMS   48
#define MAX_PAYLOAD 300000
#define BUDGET      (1u << 20) /* stream bytes per input, and ... */
/* ... per write of the input's size: at most this many writes. */
#define MAX_WRITES 1024
#define WELCOME    0x5eedu /* the clear frame's Ping nonce */
#define FILL       0xee    /* the owner's landing memory, before */

enum kind { I_PING, I_DATA, I_MSG, I_RAW };

/* One thing the harness wrote, in stream order. */
struct item {
    enum kind kind;
    uint32_t k;        /* its number: the Ping's nonce, the data's pattern */
    size_t start, end; /* where it is in the stream */
    int altered;       /* a byte changed after sealing, or raw bytes */
    size_t altered_at; /* offset of that byte in the frame */
    size_t hdr_len;    /* data: the prefix's length */
    size_t len;        /* data: payload after the prefix */
    uint8_t *packed;   /* I_MSG: the Msg re-packed, NULL if not a Msg */
    size_t packed_len;
};

struct h {
    uv_loop_t loop;
    struct pr_conn *c;
    int fd; /* the harness's end */
    struct pr_auth_key key;
    uint8_t s_nonce[PR_AUTH_NONCE_LEN], c_nonce[PR_AUTH_NONCE_LEN];
    uint32_t cipher;
    uint64_t rekey; /* 0: the default volume */
    struct pr_seal tx;
    uint8_t th[PR_SEAL_HASH_LEN];
    uint8_t *s; /* the stream */
    size_t len, cap;
    struct item it[MAX_ITEMS];
    size_t nit;
    size_t next;  /* the item the conn must hand over next */
    size_t first; /* the first altered, raw or not-a-Msg item (nit: none) */
    int sealed, closed, status;
    /* 0: whole; land (1), but not odd numbers (2), or in place (3) */
    int land_mode;
    int landing; /* a landing of item `next` is open */
    uint8_t *land_buf;
};

static struct h H;

/* Byte i of data frame k's payload. */
static uint8_t pat(uint32_t k, size_t i)
{
    return (uint8_t)(((i + 1) * 2654435761u >> 11) + k * 37 + (i >> 12));
}

/* Byte i of data frame k's prefix: its number, then a filler. */
static uint8_t prefix_byte(uint32_t k, size_t i)
{
    return i < 4 ? (uint8_t)(k >> (8 * i)) : 0xab;
}

static uint8_t *grow(struct h *h, size_t n)
{
    if (h->len + n > h->cap) {
        size_t cap = h->cap ? h->cap : 4096;
        while (cap < h->len + n)
            cap *= 2;
        uint8_t *b = realloc(h->s, cap);
        if (!b)
            abort();
        h->s = b;
        h->cap = cap;
    }
    uint8_t *p = h->s + h->len;
    h->len += n;
    return p;
}

/* A sealed message frame of these payload bytes, as seal_msg() makes it. */
static void put_msg(struct h *h, const uint8_t *payload, size_t n)
{
    uint8_t *f = grow(h, PR_FRAME_HDR_LEN + n + T);
    pr_frame_hdr_encode(f, (uint32_t)(n + T), PR_FRAME_MSG, 0);
    memcpy(f + PR_FRAME_HDR_LEN, payload, n);
    if (pr_seal_encrypt(&h->tx, f, f + PR_FRAME_HDR_LEN, f + PR_FRAME_HDR_LEN,
                        n, f + PR_FRAME_HDR_LEN + n) < 0)
        abort();
}

static size_t pack_ping(uint64_t nonce, uint8_t *out)
{
    Pr__V1__Ping ping = PR__V1__PING__INIT;
    ping.nonce = nonce;
    Pr__V1__Msg m = PR_MSG_OF(PING, ping, &ping);
    return pr__v1__msg__pack(&m, out);
}

/*
 * A sealed data frame, as seal_data() makes it: the header (flags: the
 * prefix's length), the prefix record and its tag, the payload record
 * and its tag.
 */
static void put_data(struct h *h, uint32_t k, size_t hdr_len, size_t len)
{
    size_t total = hdr_len + T + len + T;
    uint8_t *f = grow(h, PR_FRAME_HDR_LEN + total);
    pr_frame_hdr_encode(f, (uint32_t)total, PR_FRAME_DATA, (uint16_t)hdr_len);
    uint8_t *q = f + PR_FRAME_HDR_LEN;
    for (size_t i = 0; i < hdr_len; i++)
        q[i] = prefix_byte(k, i);
    uint8_t *pl = q + hdr_len + T;
    for (size_t i = 0; i < len; i++)
        pl[i] = pat(k, i);
    if (pr_seal_encrypt(&h->tx, f, q, q, hdr_len, q + hdr_len) < 0 ||
        pr_seal_encrypt(&h->tx, f, pl, pl, len, pl + len) < 0)
        abort();
}

/* The payload length a step asks for: mostly small, some over 64 KiB. */
static size_t take_len(struct fuzz_cursor *in)
{
    switch (fuzz_take(in, 1) % 4) {
    case 0:
        return fuzz_take(in, 1);
    case 1:
        return fuzz_take(in, 2) % 5000;
    case 2:
        return 4000 + fuzz_take(in, 2);
    default:
        return fuzz_take(in, 3) % (MAX_PAYLOAD + 1);
    }
}

/* A sealed Ping or data frame as a step asks for it. */
static void put_frame(struct h *h, struct item *it, struct fuzz_cursor *in,
                      int data, size_t room)
{
    if (!data) {
        uint8_t buf[32];
        it->kind = I_PING;
        it->k = 1000 + (uint32_t)h->nit;
        put_msg(h, buf, pack_ping(it->k, buf));
        return;
    }
    uint32_t pl = fuzz_take(in, 1);
    it->kind = I_DATA;
    it->hdr_len = pl < 192 ? PREFIX : pl % 65;
    it->len = take_len(in);
    /* Within the budget: small writes of a large frame would take long. */
    if (it->len > room)
        it->len = room;
    put_data(h, it->k, it->hdr_len, it->len);
}

/* Any bytes of the input, sealed: authentic, a Msg or not. */
static void put_any(struct h *h, struct item *it, struct fuzz_cursor *in)
{
    size_t n = fuzz_take(in, 1);
    n = n < in->n ? n : in->n;
    it->kind = I_MSG;
    Pr__V1__Msg *m = pr_msg_unpack(in->p, n);
    if (m) {
        it->packed_len = pr__v1__msg__get_packed_size(m);
        it->packed = malloc(it->packed_len + 1);
        if (!it->packed)
            abort();
        pr__v1__msg__pack(m, it->packed);
        pr_msg_free(m);
    }
    put_msg(h, in->p, n);
    in->p += n;
    in->n -= n;
}

/* Builds the stream from the steps; stops at the budget. */
static void build(struct h *h, struct fuzz_cursor *in, size_t budget)
{
    while (in->n > 0 && h->nit < MAX_ITEMS && h->len < budget) {
        uint32_t op = fuzz_take(in, 1) % 8;
        struct item *it = &h->it[h->nit];
        memset(it, 0, sizeof(*it));
        it->k = (uint32_t)h->nit;
        it->start = h->len;
        size_t room = budget - h->len;
        if (op < 2) {
            put_frame(h, it, in, 0, room);
        } else if (op < 5) {
            put_frame(h, it, in, 1, room);
        } else if (op == 5) {
            put_any(h, it, in);
        } else if (op == 6) {
            /* A frame sealed, then one of its bytes altered. */
            put_frame(h, it, in, fuzz_take(in, 1) & 1, room);
            size_t n = h->len - it->start;
            uint8_t mask = (uint8_t)fuzz_take(in, 1);
            it->altered = 1;
            it->altered_at = fuzz_take(in, 3) % n;
            h->s[it->start + it->altered_at] ^= mask ? mask : 0x80;
        } else {
            size_t n = fuzz_take(in, 1) + 1;
            n = n < in->n ? n : in->n;
            if (n == 0)
                return;
            it->kind = I_RAW;
            it->altered = 1;
            memcpy(grow(h, n), in->p, n);
            in->p += n;
            in->n -= n;
        }
        it->end = h->len;
        h->nit++;
    }
}

/* ------------------------------------------------------------------ */
/* The conn's owner: each frame must be item `next`, whole and right    */

static struct item *expect(void)
{
    /* Nothing comes at or after the first altered item but its landing. */
    if (H.next >= H.first)
        abort();
    return &H.it[H.next];
}

/* The clear frame seals the conn, as a Welcome does. */
static int on_welcome(struct pr_conn *c, const Pr__V1__Msg *m)
{
    if (m->body_case != PR__V1__MSG__BODY_PING || m->ping->nonce != WELCOME)
        abort();
    if (pr_conn_seal(c, H.cipher, &H.key, 'C', H.s_nonce, H.c_nonce) != 0)
        abort();
    if (H.rekey)
        c->seal->rekey_bytes = H.rekey;
    H.sealed = 1;
    return 0;
}

static int on_msg(struct pr_conn *c, const Pr__V1__Msg *m)
{
    if (!H.sealed)
        return on_welcome(c, m);
    struct item *it = expect();
    if (it->kind == I_PING) {
        if (m->body_case != PR__V1__MSG__BODY_PING || m->ping->nonce != it->k)
            abort();
    } else if (it->kind == I_MSG && it->packed) {
        uint8_t *b = malloc(it->packed_len + 1);
        if (!b || pr__v1__msg__get_packed_size(m) != it->packed_len)
            abort();
        pr__v1__msg__pack(m, b);
        if (memcmp(b, it->packed, it->packed_len) != 0)
            abort();
        free(b);
    } else {
        abort();
    }
    H.next++;
    return 0;
}

/* The n bytes are data item it's prefix and payload. */
static int data_ok(const struct item *it, const uint8_t *p, size_t n)
{
    if (n != it->hdr_len + it->len)
        return 0;
    for (size_t i = 0; i < it->hdr_len; i++)
        if (p[i] != prefix_byte(it->k, i))
            return 0;
    for (size_t i = 0; i < it->len; i++)
        if (p[it->hdr_len + i] != pat(it->k, i))
            return 0;
    return 1;
}

static int on_data(struct pr_conn *c, const uint8_t *p, size_t n)
{
    (void)c;
    struct item *it = expect();
    if (it->kind != I_DATA || it->altered || H.landing || !data_ok(it, p, n))
        abort();
    H.next++;
    return 0;
}

static void on_close(struct pr_conn *c, int status)
{
    (void)c;
    H.closed = 1;
    H.status = status;
    H.c = NULL;
}

static int on_data_begin(struct pr_conn *c, const uint8_t *prefix, size_t rest,
                         void **dst, void **token)
{
    (void)c;
    /* The altered item's may begin: its alteration is past the prefix. */
    if (H.landing || H.next > H.first || H.next >= H.nit)
        abort();
    struct item *it = &H.it[H.next];
    if (it->kind != I_DATA || it->hdr_len != PREFIX || rest != it->len ||
        (it->altered && it->altered_at < PR_FRAME_HDR_LEN + PREFIX + T))
        abort();
    for (size_t i = 0; i < PREFIX; i++)
        if (prefix[i] != prefix_byte(it->k, i))
            abort();
    if (H.land_mode == 2 && it->k % 2)
        return 0;
    /* FILL until the conn writes there: see on_data_end(). */
    H.land_buf = malloc(rest ? rest : 1);
    if (!H.land_buf)
        abort();
    memset(H.land_buf, FILL, rest);
    H.landing = 1;
    *dst = H.land_buf;
    *token = it;
    return H.land_mode == 3 ? 2 : 1;
}

static void on_data_end(struct pr_conn *c, void *token, int status)
{
    (void)c;
    struct item *it = token;
    if (!H.landing || it != &H.it[H.next])
        abort();
    H.landing = 0;
    if (status == 0) {
        /* Landed: sealed before any alteration, and its bytes. */
        if (it->altered || H.next >= H.first)
            abort();
        for (size_t i = 0; i < it->len; i++)
            if (H.land_buf[i] != pat(it->k, i))
                abort();
        H.next++;
    } else if (!it->altered) {
        /* All of an unaltered frame is written before the harness closes. */
        abort();
    } else if (H.land_mode != 3) {
        /* Through the bounce buffer: nothing of it at the owner's place. */
        for (size_t i = 0; i < it->len; i++)
            if (H.land_buf[i] != FILL)
                abort();
    }
    free(H.land_buf);
    H.land_buf = NULL;
}

static const struct pr_conn_ops whole_ops = {
    .on_msg = on_msg,
    .on_data = on_data,
    .on_close = on_close,
};

static const struct pr_conn_ops land_ops = {
    .on_msg = on_msg,
    .on_data = on_data,
    .on_close = on_close,
    .data_prefix = PREFIX,
    .on_data_begin = on_data_begin,
    .on_data_end = on_data_end,
};

/* ------------------------------------------------------------------ */

/* What want_status() allows besides an exact status. */
#define ANY_ERROR   1 /* any status < 0 */
#define ERROR_OR_OK 2 /* < 0 or 0 */

/*
 * The close status the first altered item (or raw bytes, or a message
 * that is not a Msg) must bring: < 0 when a whole frame (or a header the
 * reader refuses) starts there. When the stream ends inside that frame,
 * the conn may wait for the rest and then see the harness close (0), or
 * fail it already on a prefix that does not open (< 0). 0 without one.
 */
static int want_status(const struct h *h)
{
    if (h->first == h->nit)
        return 0;
    const struct item *it = &h->it[h->first];
    if (it->kind == I_MSG && !it->altered)
        return -EPROTO;
    size_t at = it->start;
    if (h->len - at < PR_FRAME_HDR_LEN)
        return 0;
    struct pr_frame_hdr fh;
    if (pr_frame_hdr_decode(h->s + at, MAX_FRAME + 2 * T, &fh) < 0)
        return ANY_ERROR;
    return h->len - at - PR_FRAME_HDR_LEN >= fh.len ? ANY_ERROR : ERROR_OR_OK;
}

/* Writes the stream in pieces of `piece` bytes, the loop run after each. */
static void feed(struct h *h, size_t piece)
{
    for (size_t at = 0; at < h->len && !h->closed;) {
        size_t n = h->len - at < piece ? h->len - at : piece;
        ssize_t w = send(h->fd, h->s + at, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break; /* the conn closed its end */
        if (w > 0)
            at += (size_t)w;
        uv_run(&h->loop, UV_RUN_NOWAIT);
    }
}

static void one_input(const uint8_t *data, size_t size)
{
    struct fuzz_cursor in = {data, size};
    uint32_t setup = fuzz_take(&in, 1);
    uint32_t p0 = fuzz_take(&in, 1), p1 = fuzz_take(&in, 1);
    uint32_t rekey = fuzz_take(&in, 2);
    size_t piece = (size_t)(p0 % 64 + 1) << (p1 % 13);
    size_t budget = piece * MAX_WRITES < BUDGET ? piece * MAX_WRITES : BUDGET;

    memset(&H, 0, sizeof(H));
    memset(H.key.k, 0x42, sizeof(H.key.k));
    H.cipher = setup & 1 && pr_seal_ciphers() & PR_SEAL_AES256GCM
                   ? PR_SEAL_AES256GCM
                   : PR_SEAL_CHACHA20POLY1305;
    H.key.seal = H.cipher;
    H.land_mode = (int)(setup >> 1 & 3);
    H.rekey = rekey ? (uint64_t)rekey * 16 : 0;
    crypto_generichash(H.s_nonce, sizeof(H.s_nonce), data, size, NULL, 0);
    memcpy(H.c_nonce, H.s_nonce, sizeof(H.c_nonce));
    H.c_nonce[0] ^= 0xc0;

    /* The clear frame first: both sides hash it, then seal. */
    uint8_t buf[32];
    size_t n = pack_ping(WELCOME, buf);
    uint8_t *f = grow(&H, PR_FRAME_HDR_LEN + n);
    pr_frame_hdr_encode(f, (uint32_t)n, PR_FRAME_MSG, 0);
    memcpy(f + PR_FRAME_HDR_LEN, buf, n);
    crypto_generichash(H.th, sizeof(H.th), f, PR_FRAME_HDR_LEN + n, NULL, 0);
    if (pr_seal_init(&H.tx, H.cipher, &H.key, 'S', H.s_nonce, H.c_nonce,
                     H.th) != 0)
        abort();
    if (H.rekey)
        H.tx.rekey_bytes = H.rekey;
    build(&H, &in, budget);
    H.first = H.nit;
    for (size_t i = 0; i < H.nit && H.first == H.nit; i++)
        if (H.it[i].altered || (H.it[i].kind == I_MSG && !H.it[i].packed))
            H.first = i;

    int sv[2];
    if (uv_loop_init(&H.loop) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    H.fd = sv[1];
    H.c = pr_conn_create_pipe(&H.loop, MAX_FRAME,
                              H.land_mode ? &land_ops : &whole_ops, NULL);
    if (!H.c || uv_pipe_open(&H.c->h.pipe, sv[0]) != 0 ||
        pr_conn_transcript_start(H.c) != 0 || pr_conn_start(H.c) != 0)
        abort();
    snprintf(H.c->name, sizeof(H.c->name), "fuzz_seal");

    feed(&H, piece);
    /* The harness closes: the conn reads the rest, then the end. */
    close(H.fd);
    for (int i = 0; !H.closed; i++) {
        if (i > 100000)
            abort(); /* neither the rest nor the end closed it */
        uv_run(&H.loop, UV_RUN_ONCE);
    }
    uv_run(&H.loop, UV_RUN_DEFAULT);

    /* Everything before the first alteration came, nothing after. */
    int want = want_status(&H);
    int status_ok = want == ANY_ERROR     ? H.status < 0
                    : want == ERROR_OR_OK ? H.status <= 0
                                          : H.status == want;
    if (!H.sealed || H.next != H.first || H.landing || !status_ok)
        abort();
    if (uv_loop_close(&H.loop) != 0)
        abort();
    pr_seal_clear(&H.tx);
    for (size_t i = 0; i < H.nit; i++)
        free(H.it[i].packed);
    free(H.s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (sodium_init() < 0)
            abort();
        pr_log_set_level(PR_LOG_ERROR);
        ready = 1;
    }
    one_input(data, size);
    return 0;
}
