/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for preducectl's JSON writer (daemon/ctl/json.c): strings
 * escaped and always valid UTF-8, numbers as JSON numbers (null for what
 * JSON cannot say), and the commas of nested objects and arrays. Output is
 * captured with open_memstream and compared whole.
 */
#include "daemon/ctl/json.h"
#include "tests/check_run.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct out {
    char *text;
    size_t len;
    FILE *f;
};

static void out_open(struct out *o)
{
    o->text = NULL;
    o->f = open_memstream(&o->text, &o->len);
    ck_assert_ptr_nonnull(o->f);
}

/* Closes the stream; the text, NUL-terminated (the caller frees it). */
static char *out_close(struct out *o)
{
    ck_assert_int_eq(fclose(o->f), 0);
    return o->text;
}

static const struct {
    const char *in, *want;
} strings[] = {
    {"", "\"\""},
    {"w0", "\"w0\""},
    {"a\"b", "\"a\\\"b\""},
    {"a\\b", "\"a\\\\b\""},
    {"/", "\"/\""},
    {"\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\""},
    {"\x01\x1f", "\"\\u0001\\u001f\""},
    {"\x7f", "\"\\u007f\""},
    /* Well-formed UTF-8 passes as it is: 2, 3 and 4 bytes, the limits. */
    {"\xc3\xa9", "\"\xc3\xa9\""},
    {"\xe2\x82\xac", "\"\xe2\x82\xac\""},
    {"\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\""},
    {"\xc2\x80", "\"\xc2\x80\""},
    {"\xef\xbf\xbf", "\"\xef\xbf\xbf\""},
    {"\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""},
    /* Each byte of what is not: a lone continuation or lead byte,
     * overlong forms, a surrogate, past U+10FFFF, 0xf8.., cut short. */
    {"\x80", "\"\\ufffd\""},
    {"\xff", "\"\\ufffd\""},
    {"\xc0\xaf", "\"\\ufffd\\ufffd\""},
    {"\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\""},
    {"\xf0\x80\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
    {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},
    {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
    {"\xf8\x88\x80\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\""},
    {"\xe2\x82", "\"\\ufffd\\ufffd\""},
    {"\xc3(", "\"\\ufffd(\""},
    {"x\xe2\x82\xacy\xffz", "\"x\xe2\x82\xacy\\ufffdz\""},
};

START_TEST(test_ctl_json_string_escapes)
{
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        struct out o;
        out_open(&o);
        pr_json_string(o.f, strings[i].in);
        char *got = out_close(&o);
        ck_assert_msg(!strcmp(got, strings[i].want), "row %zu: %s, not %s", i,
                      got, strings[i].want);
        free(got);
    }
}
END_TEST

static const struct {
    double x;
    const char *want;
} numbers[] = {
    {0, "0"},
    {42, "42"},
    {-3, "-3"},
    {1e15, "1000000000000000"},
    {18446744073709551616.0, "18446744073709551616"},
    {0.5, "0.5"},
    {9.87654321, "9.87654321"},
    {1.0 / 3, "0.333333333"},
    {1e-5, "1e-05"},
    {NAN, "null"},
    {INFINITY, "null"},
    {-INFINITY, "null"},
};

START_TEST(test_ctl_json_numbers)
{
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        struct out o;
        struct pr_json j;
        out_open(&o);
        pr_json_init(&j, o.f);
        pr_json_num(&j, NULL, numbers[i].x);
        char *got = out_close(&o);
        ck_assert_msg(!strcmp(got, numbers[i].want), "row %zu: %s, not %s", i,
                      got, numbers[i].want);
        free(got);
    }
}
END_TEST

/* Commas between members and elements, none after an opening bracket. */
START_TEST(test_ctl_json_writer_nesting)
{
    struct out o;
    struct pr_json j;
    out_open(&o);
    pr_json_init(&j, o.f);
    pr_json_open_array(&j, NULL);
    pr_json_open_object(&j, NULL);
    pr_json_num(&j, "a", 1);
    pr_json_open_array(&j, "b");
    pr_json_bool(&j, NULL, 1);
    pr_json_bool(&j, NULL, 0);
    pr_json_bool(&j, NULL, NAN);
    pr_json_bool(&j, NULL, 2);
    pr_json_close_array(&j);
    pr_json_open_object(&j, "c");
    pr_json_close_object(&j);
    pr_json_str(&j, "k\"ey", "v");
    pr_json_close_object(&j);
    pr_json_open_array(&j, NULL);
    pr_json_close_array(&j);
    pr_json_str(&j, NULL, "last");
    pr_json_close_array(&j);
    char *got = out_close(&o);
    ck_assert_str_eq(got, "[{\"a\":1,\"b\":[true,false,null,true],\"c\":{},"
                          "\"k\\\"ey\":\"v\"},[],\"last\"]");
    free(got);
}
END_TEST

static Suite *ctl_json_suite(void)
{
    Suite *s = suite_create("ctl_json");
    TCase *tc = tcase_create("json");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_ctl_json_string_escapes);
    tcase_add_test(tc, test_ctl_json_numbers);
    tcase_add_test(tc, test_ctl_json_writer_nesting);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(ctl_json_suite());
}
