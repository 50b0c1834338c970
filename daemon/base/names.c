/* SPDX-License-Identifier: MIT */
#include "daemon/base/names.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *pr_name_of(const struct pr_name *t, int value)
{
    for (; t->name; t++)
        if (t->value == value)
            return t->name;
    return NULL;
}

int pr_name_parse(const struct pr_name *t, const char *s, int *value)
{
    for (; t->name; t++) {
        if (strcmp(t->name, s) == 0) {
            *value = t->value;
            return 0;
        }
    }
    return -EINVAL;
}

char *pr_name_list(const struct pr_name *t, char *buf, size_t len)
{
    size_t n = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (; t->name && n + 1 < len; t++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", t->name);
    return buf;
}
