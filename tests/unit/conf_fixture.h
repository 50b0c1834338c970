/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the config unit tests (test_conf.c, test_conf_apply.c):
 * configs written to temporary files, loaded and dumped.
 */
#ifndef PREDUCE_TESTS_CONF_FIXTURE_H
#define PREDUCE_TESTS_CONF_FIXTURE_H

#include "daemon/base/conf.h"
#include "daemon/base/conf_int.h"

#define SHIPPED "conf/preduced.conf"
/* The keys in the table: the shipped file and a dump must have each. */
#define NKEYS     ((int)pr_conf_nkeys)
#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

/* Writes text to a new file under /tmp; free it with rm_tmp(). */
char *tmpconf(const char *text);
void rm_tmp(char *path);
/* Defaults, then `text` as a file. Returns pr_conf_load()'s result. */
int load_text(struct pr_conf *c, const char *text, struct pr_conf_err *err);
/* pr_conf_dump() into a string; the caller frees it. */
char *dump_text(const struct pr_conf *c);
/*
 * Equal configs dump to the same text: pr_conf_dump() writes every key
 * (test_conf_dump_roundtrip counts them) and doubles exactly.
 */
void assert_conf_eq(const struct pr_conf *a, const struct pr_conf *b);

#endif
