/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for preducectl's Prometheus text parser
 * (daemon/ctl/promtext.c): which lines are samples, how names, labels and
 * values are cut, labels unescaped, found and truncated, and the lines
 * that are skipped rather than failing the whole answer. Its fuzz target
 * is tests/fuzz/fuzz_promtext.c.
 */
#include "daemon/ctl/promtext.h"
#include "tests/check_run.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses a heap copy of text into m (free it with pr_promtext_free). */
static void parse(const char *text, struct pr_promtext *m)
{
    char *copy = strdup(text);
    ck_assert_ptr_nonnull(copy);
    ck_assert_int_eq(pr_promtext_parse(copy, m), 0);
}

/* One line each: a sample (name, labels, value) or skipped (name NULL). */
static const struct {
    const char *line;
    const char *name, *labels;
    double value;
} lines[] = {
    {"a 1\n", "a", "", 1},
    {"a_b:c 2.5", "a_b:c", "", 2.5}, /* no final newline */
    {"a{b=\"c\"} 3\n", "a", "b=\"c\"", 3},
    {"a{b=\"}\",c=\"{\"} 4\n", "a", "b=\"}\",c=\"{\"", 4},
    {"a{b=\"\\\"}\"} 5\n", "a", "b=\"\\\"}\"", 5},
    {"a{} 6\n", "a", "", 6},
    {"a 7 1700000000000\n", "a", "", 7}, /* a timestamp: ignored */
    {"a 8\r\n", "a", "", 8},
    {"a -1e3\n", "a", "", -1000},
    {"{b=\"c\"} 9\n", "", "b=\"c\"", 9},
    {"# HELP a b 1\n", NULL, NULL, 0},
    {"# TYPE a gauge\n", NULL, NULL, 0},
    {"\n", NULL, NULL, 0},
    {"a\n", NULL, NULL, 0},
    {"a \n", NULL, NULL, 0},
    {"a x\n", NULL, NULL, 0},
    {"a{b=\"c\" 1\n", NULL, NULL, 0},
    {"a{b=\"c} 1\n", NULL, NULL, 0},
    {"a\t1\n", NULL, NULL, 0},
};

START_TEST(test_promtext_lines)
{
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        struct pr_promtext m;
        parse(lines[i].line, &m);
        if (!lines[i].name) {
            ck_assert_msg(m.n == 0, "row %zu: %zu samples", i, m.n);
        } else {
            ck_assert_msg(m.n == 1, "row %zu: %zu samples", i, m.n);
            ck_assert_msg(!strcmp(m.s[0].name, lines[i].name) &&
                              !strcmp(m.s[0].labels, lines[i].labels) &&
                              m.s[0].value == lines[i].value,
                          "row %zu: %s {%s} %g", i, m.s[0].name, m.s[0].labels,
                          m.s[0].value);
        }
        pr_promtext_free(&m);
    }
    /* NaN and the infinities are values like any other. */
    struct pr_promtext m;
    parse("a NaN\nb +Inf\nc -Inf\n", &m);
    ck_assert_uint_eq(m.n, 3);
    ck_assert(isnan(m.s[0].value) && m.s[1].value == INFINITY &&
              m.s[2].value == -INFINITY);
    pr_promtext_free(&m);
}
END_TEST

/* Many samples (the array grows), every one kept in order. */
START_TEST(test_promtext_many)
{
    enum { N = 5000 };
    char *text = malloc(N * 32);
    ck_assert_ptr_nonnull(text);
    size_t o = 0;
    for (int i = 0; i < N; i++)
        o += (size_t)sprintf(text + o, "# c\nm{i=\"%d\"} %d\n", i, i);
    struct pr_promtext m;
    ck_assert_int_eq(pr_promtext_parse(text, &m), 0);
    ck_assert_uint_eq(m.n, N);
    char v[16];
    ck_assert_int_eq(pr_promtext_label(&m.s[N - 1], "i", v, sizeof(v)), 0);
    ck_assert_str_eq(v, "4999");
    ck_assert(m.s[1234].value == 1234);
    pr_promtext_free(&m);
    /* Blank lines between samples end nothing. */
    parse("a 1\n\n\r\nb 2\n\n", &m);
    ck_assert_uint_eq(m.n, 2);
    ck_assert_str_eq(m.s[1].name, "b");
    pr_promtext_free(&m);
}
END_TEST

START_TEST(test_promtext_labels)
{
    struct pr_promtext m;
    parse("a{workers=\"x\",worker=\"a\\\"b\\\\c\\nd\",e=\"\",rank=\"7\"} 1\n"
          "b{k=v,j=\"w\"} 1\n"
          "c{k=\"v\"junk,j=\"w\"} 1\n"
          "d{k=\"unterminated} 1\n",
          &m);
    ck_assert_uint_eq(m.n, 3);
    char out[32];
    /* Unescaped: \" \\ \n; a key that another key starts with. */
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "worker", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "a\"b\\c\nd");
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "workers", out, sizeof(out)),
                     0);
    ck_assert_str_eq(out, "x");
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "e", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "rank", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "7");
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "node", out, sizeof(out)),
                     -ENOENT);
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "", out, sizeof(out)), -ENOENT);
    /* Truncated to fit, NUL-terminated; a 1-byte buffer gets "". */
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "worker", out, 4), 0);
    ck_assert_str_eq(out, "a\"b");
    ck_assert_int_eq(pr_promtext_label(&m.s[0], "worker", out, 1), 0);
    ck_assert_str_eq(out, "");
    /* An unquoted value ends the labels that can be read. */
    ck_assert_int_eq(pr_promtext_label(&m.s[1], "j", out, sizeof(out)),
                     -ENOENT);
    /* Junk after a value: the next key reads "junk,j", not "j". */
    ck_assert_int_eq(pr_promtext_label(&m.s[2], "k", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "v");
    ck_assert_int_eq(pr_promtext_label(&m.s[2], "j", out, sizeof(out)),
                     -ENOENT);
    /* No label text at all. */
    struct pr_prom_sample bare = {.name = "x", .labels = ""};
    ck_assert_int_eq(pr_promtext_label(&bare, "k", out, sizeof(out)), -ENOENT);
    pr_promtext_free(&m);
}
END_TEST

START_TEST(test_promtext_find_and_get)
{
    struct pr_promtext m;
    parse("r{status=\"ok\"} 4\nr{status=\"failed\"} 1\nr{status=\"ok\"} 9\n"
          "s 2\n",
          &m);
    ck_assert(pr_promtext_find(&m, "r", NULL, NULL) == &m.s[0]);
    ck_assert(pr_promtext_find(&m, "r", "status", "failed") == &m.s[1]);
    ck_assert_ptr_null(pr_promtext_find(&m, "r", "status", "gone"));
    ck_assert_ptr_null(pr_promtext_find(&m, "r", "other", "ok"));
    ck_assert_ptr_null(pr_promtext_find(&m, "t", NULL, NULL));
    ck_assert(pr_promtext_get(&m, "r", "status", "ok") == 4);
    ck_assert(pr_promtext_get(&m, "s", NULL, NULL) == 2);
    ck_assert(isnan(pr_promtext_get(&m, "s", "status", "ok")));
    ck_assert(isnan(pr_promtext_get(&m, "", NULL, NULL)));
    pr_promtext_free(&m);
}
END_TEST

static Suite *promtext_suite(void)
{
    Suite *s = suite_create("promtext");
    TCase *tc = tcase_create("parse");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_promtext_lines);
    tcase_add_test(tc, test_promtext_many);
    tcase_add_test(tc, test_promtext_labels);
    tcase_add_test(tc, test_promtext_find_and_get);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(promtext_suite());
}
