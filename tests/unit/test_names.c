/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for daemon/base/names.c and the name tables beside their
 * enums (policy.c, log.c, the config's): every value has one name, every
 * name parses back to its value, and what is not in a table is refused.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/conf_int.h"
#include "daemon/base/log.h"
#include "daemon/base/names.h"
#include "daemon/base/policy.h"
#include "tests/check_run.h"

static const struct pr_name colours[] = {
    {"red", 1}, {"green", 2}, {"blue", 7}, {NULL, 0}};

START_TEST(test_names_lookup_both_ways)
{
    int v = -1;
    ck_assert_str_eq(pr_name_of(colours, 7), "blue");
    ck_assert_int_eq(pr_name_parse(colours, "green", &v), 0);
    ck_assert_int_eq(v, 2);
}
END_TEST

START_TEST(test_names_unknown_refused)
{
    int v = 42;
    ck_assert_ptr_null(pr_name_of(colours, 3));
    ck_assert_ptr_null(pr_name_of(colours, 0)); /* the end row is no value */
    ck_assert_int_eq(pr_name_parse(colours, "Red", &v), -EINVAL);
    ck_assert_int_eq(pr_name_parse(colours, "", &v), -EINVAL);
    ck_assert_int_eq(pr_name_parse(colours, "red ", &v), -EINVAL);
    ck_assert_int_eq(v, 42); /* untouched on refusal */
}
END_TEST

START_TEST(test_names_list)
{
    char buf[64];
    ck_assert_str_eq(pr_name_list(colours, buf, sizeof(buf)),
                     "red, green, blue");
    /* Too small: cut, still a string. */
    ck_assert_str_eq(pr_name_list(colours, buf, 6), "red, ");
    ck_assert_str_eq(pr_name_list(colours, buf, 1), "");
    static const struct pr_name none[] = {{NULL, 0}};
    ck_assert_str_eq(pr_name_list(none, buf, sizeof(buf)), "");
}
END_TEST

/* The tables the config, the logs and preduce-sim share. */
static const struct {
    const struct pr_name *table;
    int count; /* the enum's values, 0 .. count-1 unless listed */
} tables[] = {
    {pr_policy_names, 3},
    {pr_weighting_names, 2},
    {pr_ring_order_names, 2},
    {pr_log_level_names, 4},
};

/* Every name parses to its own value and no two rows share either. */
START_TEST(test_names_tables_one_to_one)
{
    const struct pr_name *t = tables[_i].table;
    int n = 0;
    for (const struct pr_name *a = t; a->name; a++, n++) {
        int v = -1;
        ck_assert_int_eq(pr_name_parse(t, a->name, &v), 0);
        ck_assert_int_eq(v, a->value);
        ck_assert_str_eq(pr_name_of(t, a->value), a->name);
        for (const struct pr_name *b = a + 1; b->name; b++) {
            ck_assert_str_ne(a->name, b->name);
            ck_assert_int_ne(a->value, b->value);
        }
    }
    ck_assert_int_eq(n, tables[_i].count);
}
END_TEST

START_TEST(test_names_typed)
{
    ck_assert_str_eq(pr_policy_name(PR_POLICY_ALLREDUCE), "allreduce");
    ck_assert_str_eq(pr_policy_name(PR_POLICY_CONSTANT), "constant");
    ck_assert_str_eq(pr_policy_name(PR_POLICY_DYNAMIC), "dynamic");
    ck_assert_str_eq(pr_policy_name((enum pr_policy)9), "?");
    ck_assert_str_eq(pr_weighting_name(PR_WEIGHT_UNIFORM), "uniform");
    ck_assert_str_eq(pr_weighting_name(PR_WEIGHT_STALENESS), "staleness");
    ck_assert_str_eq(pr_weighting_name((enum pr_weighting) - 1), "?");
}
END_TEST

/* Each T_ENUM key of the config names its values with one of the tables. */
START_TEST(test_names_config_keys_use_tables)
{
    int enums = 0;
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        const struct entry *e = &pr_conf_keys[i];
        if (e->type != T_ENUM) {
            ck_assert_ptr_null(e->names);
            continue;
        }
        enums++;
        ck_assert_ptr_nonnull(e->names);
        int v = -1;
        ck_assert_msg(pr_name_parse(e->names, e->def, &v) == 0,
                      "%s.%s: default '%s' not in its table", e->section,
                      e->name, e->def);
    }
    ck_assert_int_eq(enums, 10);
    ck_assert_int_le((int)pr_conf_nkeys, PR_CONF_KEYS_MAX);
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("names");
    tcase_add_test(tc, test_names_lookup_both_ways);
    tcase_add_test(tc, test_names_unknown_refused);
    tcase_add_test(tc, test_names_list);
    tcase_add_loop_test(tc, test_names_tables_one_to_one, 0,
                        (int)(sizeof(tables) / sizeof(tables[0])));
    tcase_add_test(tc, test_names_typed);
    tcase_add_test(tc, test_names_config_keys_use_tables);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(names_suite());
}
