/*
 * Unit tests for proto/frame.c at the scheduler's limits: a Group of
 * PR_SCHED_MAX members and the ReduceDone a trainer gets for it fit in
 * PR_CTRL_MAX_FRAME at their longest encoding, and a frame over the limit
 * is refused rather than cut.
 */
#include "proto/frame.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sched/core/sched_core.h"

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

static Suite *frame_suite(void)
{
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_frame_largest_group_fits);
    tcase_add_test(tc, test_frame_oversized_refused);
    tcase_add_test(tc, test_frame_largest_reduce_done_fits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(frame_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
