/* SPDX-License-Identifier: MIT */
/*
 * Every Check suite's main(): runs the suite, prints Check's closing line
 * ("100%: Checks: N, Failures: 0, Errors: 0", which CI counts) and exits
 * non-zero when a test failed.
 */
#ifndef PREDUCE_TESTS_CHECK_RUN_H
#define PREDUCE_TESTS_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
