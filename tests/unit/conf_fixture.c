/* SPDX-License-Identifier: MIT */
/* Helpers shared by the config unit tests (conf_fixture.h). */
#include "tests/unit/conf_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a new file under /tmp; free it with rm_tmp(). */
char *tmpconf(const char *text)
{
    char *path = strdup("/tmp/test_conf.XXXXXX");
    ck_assert_ptr_nonnull(path);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    ck_assert_int_eq(close(fd), 0);
    return path;
}

void rm_tmp(char *path)
{
    unlink(path);
    free(path);
}

/* Defaults, then `text` as a file. Returns pr_conf_load()'s result. */
int load_text(struct pr_conf *c, const char *text, struct pr_conf_err *err)
{
    ck_assert_int_eq(pr_conf_init(c), 0);
    char *path = tmpconf(text);
    int rc = pr_conf_load(c, path, err);
    rm_tmp(path);
    return rc;
}

/* pr_conf_dump() into a string; the caller frees it. */
char *dump_text(const struct pr_conf *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(pr_conf_dump(c, out), 0);
    ck_assert_int_eq(fclose(out), 0);
    return text;
}

/*
 * Equal configs dump to the same text: pr_conf_dump() writes every key
 * (test_conf_dump_roundtrip counts them) and doubles exactly.
 */
void assert_conf_eq(const struct pr_conf *a, const struct pr_conf *b)
{
    char *ta = dump_text(a), *tb = dump_text(b);

    ck_assert_str_eq(ta, tb);
    free(ta);
    free(tb);
}
