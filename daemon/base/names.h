/* SPDX-License-Identifier: MIT */
/*
 * Name tables: an enum's values and the names they have in the config
 * file, the logs, the metrics and the command lines. Each enum has one
 * table, beside its definition, so a name is spelled in one place.
 */
#ifndef PR_NAMES_H
#define PR_NAMES_H

#include <stddef.h>

/* One row; a table ends with {NULL, 0}. */
struct pr_name {
    const char *name;
    int value;
};

/* value's name in t, or NULL when t has none. */
const char *pr_name_of(const struct pr_name *t, int value);
/* s's value in t into *value: 0, or -EINVAL when t has no such name. */
int pr_name_parse(const struct pr_name *t, const char *s, int *value);
/*
 * t's names joined by ", " into buf (for "not one of: ..." errors),
 * truncated to fit; returns buf.
 */
char *pr_name_list(const struct pr_name *t, char *buf, size_t len);

#endif
