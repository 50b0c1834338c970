/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for proto/frame.c: at the scheduler's limits, a Group of
 * PR_SCHED_MAX members and the ReduceDone a trainer gets for it fit in
 * PR_CTRL_MAX_FRAME at their longest encoding, and a frame over the limit
 * is refused rather than cut; and the reader's view of a partial frame
 * (partial, drop_partial, pending), which a conn uses to read a data
 * frame's payload straight into place.
 */
#include "proto/frame.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sched/core/sched_core.h"
#include "tests/check_run.h"

/* Every field at its longest varint or fixed encoding. */
static Pr__V1__Msg *big_group(size_t nmembers, Pr__V1__Group *g,
                              Pr__V1__Member **pp, Pr__V1__Member *mb,
                              uint32_t *ring, size_t nring)
{
    static Pr__V1__Msg m;
    pr__v1__msg__init(&m);
    pr__v1__group__init(g);
    for (size_t i = 0; i < nmembers; i++) {
        pr__v1__member__init(&mb[i]);
        mb[i].rank = PR_SCHED_MAX - 1;
        mb[i].node_id = UINT32_MAX;
        mb[i].weight = 1.0 / 3.0;
        mb[i].version = UINT64_MAX;
        mb[i].seq = UINT64_MAX;
        pp[i] = &mb[i];
    }
    for (size_t i = 0; i < nring; i++)
        ring[i] = UINT32_MAX;
    g->id = UINT64_MAX;
    g->n_members = nmembers;
    g->members = pp;
    g->n_ring = nring;
    g->ring = ring;
    g->max_version = UINT64_MAX;
    g->nfloats = UINT64_MAX;
    g->personal = 1;
    g->timeout_ms = UINT32_MAX;
    m.body_case = PR__V1__MSG__BODY_GROUP;
    m.group = g;
    return &m;
}

static void check_group_frames(size_t nmembers, int want)
{
    Pr__V1__Group g;
    Pr__V1__Member **pp = calloc(nmembers, sizeof(*pp));
    Pr__V1__Member *mb = calloc(nmembers, sizeof(*mb));
    /* One node per member: the longest ring too. */
    uint32_t *ring = calloc(nmembers, sizeof(*ring));
    ck_assert(pp && mb && ring);
    Pr__V1__Msg *m = big_group(nmembers, &g, pp, mb, ring, nmembers);
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len), want);
    if (want == 0) {
        ck_assert_uint_le(len, PR_FRAME_HDR_LEN + PR_CTRL_MAX_FRAME);
        Pr__V1__Msg *back =
            pr_msg_unpack(buf + PR_FRAME_HDR_LEN, len - PR_FRAME_HDR_LEN);
        ck_assert_ptr_nonnull(back);
        ck_assert_uint_eq(back->group->n_members, nmembers);
        ck_assert_uint_eq(back->group->members[nmembers - 1]->seq, UINT64_MAX);
        pr_msg_free(back);
    }
    free(buf);
    free(pp);
    free(mb);
    free(ring);
}

START_TEST(test_frame_largest_group_fits)
{
    check_group_frames(PR_SCHED_MAX, 0);
}
END_TEST

START_TEST(test_frame_oversized_refused)
{
    /* Twice the members the scheduler can have: over the limit. */
    check_group_frames(2 * PR_SCHED_MAX, -EMSGSIZE);
}
END_TEST

START_TEST(test_frame_largest_reduce_done_fits)
{
    size_t n = PR_SCHED_MAX;
    uint32_t *members = calloc(n, sizeof(*members));
    uint64_t *versions = calloc(n, sizeof(*versions));
    double *weights = calloc(n, sizeof(*weights));
    ck_assert(members && versions && weights);
    for (size_t i = 0; i < n; i++) {
        members[i] = PR_SCHED_MAX - 1;
        versions[i] = UINT64_MAX;
        weights[i] = 1.0 / 3.0;
    }
    Pr__V1__ReduceDone d = PR__V1__REDUCE_DONE__INIT;
    d.seq = UINT64_MAX;
    d.status = -4095;
    d.group_id = UINT64_MAX;
    d.n_members = n;
    d.members = members;
    d.weight = 1.0 / 3.0;
    d.version = UINT64_MAX;
    d.n_member_versions = n;
    d.member_versions = versions;
    d.n_member_weights = n;
    d.member_weights = weights;
    d.rank = UINT32_MAX;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    m.body_case = PR__V1__MSG__BODY_REDUCE_DONE;
    m.reduce_done = &d;
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(pr_msg_frame(&m, PR_CTRL_MAX_FRAME, &buf, &len), 0);
    Pr__V1__Msg *back =
        pr_msg_unpack(buf + PR_FRAME_HDR_LEN, len - PR_FRAME_HDR_LEN);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(back->reduce_done->n_member_weights, n);
    pr_msg_free(back);
    free(buf);
    free(members);
    free(versions);
    free(weights);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Partial frames                                                       */

#define MAX_LEN 1024

/* n bytes into the reader, as a read would bring them. */
static void feed(struct pr_frame_reader *r, const uint8_t *b, size_t n)
{
    void *p;
    size_t room;
    ck_assert_int_eq(pr_frame_reader_reserve(r, n, &p, &room), 0);
    ck_assert_uint_ge(room, n);
    memcpy(p, b, n);
    pr_frame_reader_commit(r, n);
}

/* A frame of `len` payload bytes b[i] = seed + i, header included. */
static size_t make_frame(uint8_t *out, uint16_t type, uint32_t len,
                         uint8_t seed)
{
    pr_frame_hdr_encode(out, len, type, 0x0102);
    for (uint32_t i = 0; i < len; i++)
        out[PR_FRAME_HDR_LEN + i] = (uint8_t)(seed + i);
    return PR_FRAME_HDR_LEN + len;
}

START_TEST(test_frame_partial_header_incomplete)
{
    struct pr_frame_reader r;
    uint8_t f[PR_FRAME_HDR_LEN + 100];
    make_frame(f, PR_FRAME_DATA, 100, 0);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    struct pr_frame_hdr h;
    const uint8_t *p = NULL;
    size_t n = 0;
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    /* Each byte of the header short of the last: not a partial frame yet. */
    for (size_t i = 0; i < PR_FRAME_HDR_LEN - 1; i++) {
        feed(&r, f + i, 1);
        ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
        ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
        ck_assert_uint_eq(pr_frame_reader_pending(&r), i + 1);
    }
    feed(&r, f + PR_FRAME_HDR_LEN - 1, 1);
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 1);
    ck_assert_uint_eq(n, PR_FRAME_HDR_LEN);
    pr_frame_reader_fini(&r);
}
END_TEST

START_TEST(test_frame_partial_complete_frame)
{
    struct pr_frame_reader r;
    uint8_t f[PR_FRAME_HDR_LEN + 100];
    size_t len = make_frame(f, PR_FRAME_DATA, 100, 3);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    feed(&r, f, len);
    struct pr_frame_hdr h;
    const uint8_t *p = NULL;
    size_t n = 0;
    /* A whole frame is next()'s to hand out, not a partial one. */
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(h.len, 100);
    ck_assert_int_eq(p[0], 3);
    /* Consumed: nothing partial is left either. */
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    /* An empty payload is whole with its header alone. */
    len = make_frame(f, PR_FRAME_MSG, 0, 0);
    feed(&r, f, len);
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(h.len, 0);
    pr_frame_reader_fini(&r);
}
END_TEST

START_TEST(test_frame_partial_data_frame)
{
    struct pr_frame_reader r;
    uint8_t a[PR_FRAME_HDR_LEN + 20], b[PR_FRAME_HDR_LEN + 300];
    size_t alen = make_frame(a, PR_FRAME_MSG, 20, 50);
    make_frame(b, PR_FRAME_DATA, 300, 7);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    /* One read: a whole frame, then 8 + 41 bytes of the next. */
    uint8_t both[sizeof(a) + PR_FRAME_HDR_LEN + 41];
    memcpy(both, a, alen);
    memcpy(both + alen, b, PR_FRAME_HDR_LEN + 41);
    feed(&r, both, sizeof(both));
    struct pr_frame_hdr h;
    const uint8_t *p = NULL;
    size_t n = 0;
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(h.type, PR_FRAME_MSG);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    memset(&h, 0, sizeof(h));
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 1);
    ck_assert_uint_eq(h.len, 300);
    ck_assert_uint_eq(h.type, PR_FRAME_DATA);
    ck_assert_uint_eq(h.flags, 0x0102);
    ck_assert_uint_eq(n, PR_FRAME_HDR_LEN + 41);
    /* p: the partial frame itself, header first, not the frame before. */
    ck_assert_int_eq(memcmp(p, b, n), 0);
    /* More of it comes: the same frame, more bytes. */
    feed(&r, b + n, 100);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 1);
    ck_assert_uint_eq(n, PR_FRAME_HDR_LEN + 141);
    ck_assert_int_eq(memcmp(p, b, n), 0);
    pr_frame_reader_fini(&r);
}
END_TEST

START_TEST(test_frame_partial_bad_header)
{
    struct pr_frame_reader r;
    uint8_t f[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr h;
    const uint8_t *p = NULL;
    size_t n = 0;
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    /* Longer than the limit: next() reports it, partial() says no. */
    pr_frame_hdr_encode(f, MAX_LEN + 1, PR_FRAME_DATA, 0);
    feed(&r, f, sizeof(f));
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), -EMSGSIZE);
    pr_frame_reader_fini(&r);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    pr_frame_hdr_encode(f, 10, 9, 0); /* unknown type */
    feed(&r, f, sizeof(f));
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), -EPROTO);
    pr_frame_reader_fini(&r);
}
END_TEST

/*
 * The caller took the rest of a partial frame off the stream itself: the
 * reader forgets it, and the next bytes begin the next frame.
 */
START_TEST(test_frame_drop_partial)
{
    struct pr_frame_reader r;
    uint8_t a[PR_FRAME_HDR_LEN + 16], b[PR_FRAME_HDR_LEN + 500];
    uint8_t c[PR_FRAME_HDR_LEN + 30];
    size_t alen = make_frame(a, PR_FRAME_MSG, 16, 1);
    make_frame(b, PR_FRAME_DATA, 500, 2);
    size_t clen = make_frame(c, PR_FRAME_MSG, 30, 9);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    uint8_t both[sizeof(a) + 60];
    memcpy(both, a, alen);
    memcpy(both + alen, b, 60);
    feed(&r, both, alen + 60);
    struct pr_frame_hdr h;
    const uint8_t *p = NULL;
    size_t n = 0;
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 1);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 60);
    pr_frame_reader_drop_partial(&r);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_int_eq(pr_frame_reader_partial(&r, &h, &p, &n), 0);
    /* The next frame, in two pieces, reads as if b had never been. */
    feed(&r, c, 5);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    feed(&r, c + 5, clen - 5);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(h.type, PR_FRAME_MSG);
    ck_assert_uint_eq(h.len, 30);
    ck_assert_int_eq(memcmp(p, c + PR_FRAME_HDR_LEN, 30), 0);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    pr_frame_reader_fini(&r);
}
END_TEST

/* Buffered bytes not handed out, across commits and next() calls. */
START_TEST(test_frame_pending)
{
    struct pr_frame_reader r;
    uint8_t a[PR_FRAME_HDR_LEN + 10], b[PR_FRAME_HDR_LEN + 700];
    size_t alen = make_frame(a, PR_FRAME_MSG, 10, 0);
    size_t blen = make_frame(b, PR_FRAME_DATA, 700, 0);
    uint8_t s[sizeof(a) + sizeof(b)];
    memcpy(s, a, alen);
    memcpy(s + alen, b, blen);
    ck_assert_int_eq(pr_frame_reader_init(&r, MAX_LEN), 0);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    struct pr_frame_hdr h;
    const uint8_t *p;
    feed(&r, s, 3);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 3);
    feed(&r, s + 3, alen + 20 - 3);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), alen + 20);
    /* The frame handed out is no longer pending, before any other call. */
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 20);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 20);
    feed(&r, s + alen + 20, blen - 20 - 1);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), blen - 1);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    feed(&r, s + alen + blen - 1, 1);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), blen);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 1);
    ck_assert_uint_eq(h.len, 700);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    ck_assert_int_eq(pr_frame_reader_next(&r, &h, &p), 0);
    ck_assert_uint_eq(pr_frame_reader_pending(&r), 0);
    pr_frame_reader_fini(&r);
}
END_TEST

static Suite *frame_suite(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_frame_largest_group_fits);
    tcase_add_test(tc, test_frame_oversized_refused);
    tcase_add_test(tc, test_frame_largest_reduce_done_fits);
    suite_add_tcase(s, tc);

    tc = tcase_create("partial");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_frame_partial_header_incomplete);
    tcase_add_test(tc, test_frame_partial_complete_frame);
    tcase_add_test(tc, test_frame_partial_data_frame);
    tcase_add_test(tc, test_frame_partial_bad_header);
    tcase_add_test(tc, test_frame_drop_partial);
    tcase_add_test(tc, test_frame_pending);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(frame_suite());
}
