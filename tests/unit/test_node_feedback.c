/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for int8's error feedback on the node
 * (daemon/node/node_feedback.c) and how a reduce's tensors take it
 * (pr_node_tensors_take, node_tensor.c): a trainer of a node that runs
 * nothing, its tensors slots without memory (data NULL), so no loop, no
 * scheduler and no engine.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/node/node_int.h"
#include "tests/check_run.h"

/* Tensor i + 1 has 4 << i floats. */
#define NTENSORS 4

struct fix {
    struct pr_node n;
    struct node_sched s; /* the scheduler it follows: down */
    struct node_trainer *c;
};

static void fix_init(struct fix *f)
{
    memset(f, 0, sizeof(*f));
    f->c = calloc(1, sizeof(*f->c));
    ck_assert_ptr_nonnull(f->c);
    f->c->node = &f->n;
    f->s.n = &f->n;
    f->s.users = 1;
    f->n.sched[0] = &f->s;
    f->n.nsched = 1;
    f->c->s = &f->s;
    f->c->rank = -1;
    f->c->prev_rank = -1;
    f->c->state = C_UP;
    f->c->tensors = calloc(NTENSORS, sizeof(*f->c->tensors));
    ck_assert_ptr_nonnull(f->c->tensors);
    f->c->cap = NTENSORS;
    for (uint32_t i = 0; i < NTENSORS; i++)
        f->c->tensors[i] = (struct node_tensor){.id = i + 1, .n = 4u << i};
    f->c->ntensors = NTENSORS;
    f->c->next_tensor_id = NTENSORS;
    f->n.trainers = f->c;
    f->n.ntrainers = 1;
}

/* The trainer as the node frees one that left (no connection). */
static void fix_fini(struct fix *f)
{
    if (f->c) {
        pr_node_feedback_free(f->c);
        ck_assert_uint_eq(f->n.feedback_bytes, 0);
        free(f->c->tensors);
        free(f->c->parts);
        free(f->c);
    }
}

/*
 * A reduce of ids[0..n) as on_reduce takes it; the tensors stay busy
 * until release() (the reduce's end). *err: its vector, NULL unless int8.
 */
static int take(struct fix *f, const uint32_t *ids, size_t n, int int8,
                float **err)
{
    struct pr_engine_part *parts = NULL;
    uint64_t total = 0;
    const char *why = NULL;
    int rc =
        pr_node_tensors_take(f->c, ids, n, int8, &parts, &total, err, &why);
    if (rc < 0) {
        ck_assert_ptr_nonnull(why);
        return rc;
    }
    f->c->parts = parts;
    f->c->nparts = n;
    f->c->err = *err;
    return 0;
}

/* The reduce ended well: no tensor busy, no vector in use. */
static void release(struct fix *f)
{
    for (size_t i = 0; i < f->c->ntensors; i++)
        f->c->tensors[i].busy = 0;
    free(f->c->parts);
    f->c->parts = NULL;
    f->c->nparts = 0;
    f->c->err = NULL;
}

static size_t busy_count(const struct fix *f)
{
    size_t k = 0;
    for (size_t i = 0; i < f->c->ntensors; i++)
        k += f->c->tensors[i].busy != 0;
    return k;
}

/*
 * The same list in the same order finds the vector it had, with what the
 * engine left in it; it starts at zero, and fp32 or bf16 take none.
 */
START_TEST(test_node_feedback_kept_per_list)
{
    struct fix f;
    fix_init(&f);
    const uint32_t ids[] = {1, 2};
    float *e1, *e2, *none = (float *)&f;
    ck_assert_int_eq(take(&f, ids, 2, 0, &none), 0);
    ck_assert_ptr_null(none);
    ck_assert_uint_eq(f.n.feedback_bytes, 0);
    ck_assert_uint_eq(busy_count(&f), 2);
    release(&f);

    ck_assert_int_eq(take(&f, ids, 2, 1, &e1), 0);
    ck_assert_ptr_nonnull(e1);
    ck_assert_uint_eq(f.n.feedback_bytes, (4 + 8) * sizeof(float));
    for (size_t i = 0; i < 12; i++) {
        ck_assert(e1[i] == 0.0f);
        e1[i] = (float)i + 0.5f; /* what the engine's rounding lost */
    }
    release(&f);
    ck_assert_int_eq(take(&f, ids, 2, 1, &e2), 0);
    ck_assert_ptr_eq(e2, e1);
    for (size_t i = 0; i < 12; i++)
        ck_assert(e2[i] == (float)i + 0.5f);
    ck_assert_uint_eq(f.n.feedback_bytes, 12 * sizeof(float));
    release(&f);
    fix_fini(&f);
}
END_TEST

/*
 * Buckets (disjoint lists, one after another) keep a vector each; a list
 * that shares a tensor with a kept one, or the same tensors in another
 * order, drops that one and starts from zero: a tensor's loss is never
 * added at another's place. The daemon keeps at most as many floats as
 * the trainer's tensors.
 */
START_TEST(test_node_feedback_buckets_and_overlap)
{
    struct fix f;
    fix_init(&f);
    const uint32_t b1[] = {1, 2}, b2[] = {3}, b3[] = {4};
    float *e1, *e2, *e3, *e;
    ck_assert_int_eq(take(&f, b1, 2, 1, &e1), 0);
    e1[0] = 1.0f;
    release(&f);
    ck_assert_int_eq(take(&f, b2, 1, 1, &e2), 0);
    e2[0] = 2.0f;
    release(&f);
    ck_assert_int_eq(take(&f, b3, 1, 1, &e3), 0);
    e3[0] = 3.0f;
    release(&f);
    ck_assert_uint_eq(f.n.feedback_bytes, (4 + 8 + 16 + 32) * sizeof(float));
    ck_assert_int_eq(take(&f, b1, 2, 1, &e), 0);
    ck_assert_ptr_eq(e, e1);
    ck_assert(e[0] == 1.0f);
    release(&f);
    ck_assert_int_eq(take(&f, b2, 1, 1, &e), 0);
    ck_assert_ptr_eq(e, e2);
    ck_assert(e[0] == 2.0f);
    release(&f);

    /* Tensors 2 and 3 together: both buckets' vectors go, 4's stays. */
    const uint32_t mix[] = {2, 3};
    ck_assert_int_eq(take(&f, mix, 2, 1, &e), 0);
    for (size_t i = 0; i < 8 + 16; i++)
        ck_assert(e[i] == 0.0f);
    ck_assert_uint_eq(f.n.feedback_bytes, (8 + 16 + 32) * sizeof(float));
    release(&f);
    ck_assert_int_eq(take(&f, b3, 1, 1, &e), 0);
    ck_assert_ptr_eq(e, e3);
    ck_assert(e[0] == 3.0f);
    release(&f);

    /* The same tensors in another order are another vector. */
    const uint32_t rev[] = {3, 2};
    ck_assert_int_eq(take(&f, rev, 2, 1, &e), 0);
    ck_assert(e[0] == 0.0f);
    ck_assert_uint_eq(f.n.feedback_bytes, (16 + 8 + 32) * sizeof(float));
    release(&f);
    fix_fini(&f);
}
END_TEST

/* A refused reduce leaves no tensor busy and the vectors as they were. */
START_TEST(test_node_feedback_refused_reduce)
{
    struct fix f;
    fix_init(&f);
    const uint32_t ok[] = {1, 2}, unknown[] = {2, 9}, twice[] = {1, 3, 1};
    float *e1, *e;
    ck_assert_int_eq(take(&f, ok, 2, 1, &e1), 0);
    e1[5] = 7.0f;
    release(&f);
    ck_assert_int_eq(take(&f, unknown, 2, 1, &e), -EINVAL);
    ck_assert_uint_eq(busy_count(&f), 0);
    ck_assert_int_eq(take(&f, twice, 3, 1, &e), -EINVAL);
    ck_assert_uint_eq(busy_count(&f), 0);
    ck_assert_uint_eq(f.n.feedback_bytes, 12 * sizeof(float));
    ck_assert_int_eq(take(&f, ok, 2, 1, &e), 0);
    ck_assert_ptr_eq(e, e1);
    ck_assert(e[5] == 7.0f);
    release(&f);
    fix_fini(&f);
}
END_TEST

/*
 * A destroyed tensor takes the vector holding its loss along, but only
 * once no reduce reads it: while one does (the engine writes the vector
 * until its group ends), the tensor is doomed and the vector stays. The
 * trainer's end frees what is left.
 */
START_TEST(test_node_feedback_tensor_destroyed)
{
    struct fix f;
    fix_init(&f);
    const uint32_t b1[] = {1, 2}, b2[] = {3, 4};
    float *e1, *e2;
    ck_assert_int_eq(take(&f, b1, 2, 1, &e1), 0);
    release(&f);
    pr_node_tensor_destroy(f.c, 2);
    ck_assert_uint_eq(f.c->ntensors, NTENSORS - 1);
    ck_assert_uint_eq(f.n.feedback_bytes, 0);
    for (size_t i = 0; i < f.c->ntensors; i++)
        ck_assert_ptr_null(f.c->tensors[i].fb);

    ck_assert_int_eq(take(&f, b2, 2, 1, &e2), 0);
    pr_node_set_rstate(f.c, R_QUEUED);
    pr_node_tensor_destroy(f.c, 4);
    ck_assert_uint_eq(f.c->ntensors, NTENSORS - 1); /* doomed, not gone */
    ck_assert_uint_eq(f.n.feedback_bytes, (16 + 32) * sizeof(float));
    ck_assert_ptr_eq(f.c->err, e2);
    e2[47] = 1.0f; /* the engine may still write it */

    /* It left: the reduce's end frees the trainer, vectors and all. */
    pr_node_reduce_fail(f.c, -ETIMEDOUT);
    ck_assert_uint_eq(f.n.ntrainers, 0);
    ck_assert_uint_eq(f.n.feedback_bytes, 0);
    ck_assert_uint_eq(f.n.nreducing, 0);
    f.c = NULL;
    fix_fini(&f);
}
END_TEST

static Suite *node_feedback_suite(void)
{
    Suite *s = suite_create("node_feedback");
    TCase *tc = tcase_create("feedback");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_node_feedback_kept_per_list);
    tcase_add_test(tc, test_node_feedback_buckets_and_overlap);
    tcase_add_test(tc, test_node_feedback_refused_reduce);
    tcase_add_test(tc, test_node_feedback_tensor_destroyed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(node_feedback_suite());
}
