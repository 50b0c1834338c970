/* SPDX-License-Identifier: MIT */
/*
 * A JSON writer for preducectl --json (RFC 8259): one document, written
 * as it goes to a FILE, compact. Commas are the writer's: each value
 * written after another at the same level gets one. Strings come from
 * daemons (worker names, jobs), so each is escaped and always comes out
 * as valid UTF-8.
 */
#ifndef PR_CTL_JSON_H
#define PR_CTL_JSON_H

#include <stdio.h>

struct pr_json {
    FILE *f;
    int comma; /* a value ended at this level: the next needs a ',' */
};

void pr_json_init(struct pr_json *j, FILE *f);
/*
 * Each writes one value; `key` names it inside an object and is NULL
 * inside an array or for the document itself. Opens and closes must
 * pair up; the writer does not check.
 */
void pr_json_open_object(struct pr_json *j, const char *key);
void pr_json_close_object(struct pr_json *j);
void pr_json_open_array(struct pr_json *j, const char *key);
void pr_json_close_array(struct pr_json *j);
void pr_json_str(struct pr_json *j, const char *key, const char *s);
/* A number; NAN or an infinity (which JSON has not) as null. */
void pr_json_num(struct pr_json *j, const char *key, double x);
/* 1 as true, 0 as false, NAN (not exported) as null. */
void pr_json_bool(struct pr_json *j, const char *key, double x);

/*
 * s as a JSON string, quotes included: '"' and '\' escaped, control
 * characters and DEL as \n, \t... or \u00XX, and each byte that is not
 * part of well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or
 * code points past U+10FFFF) as \ufffd.
 */
void pr_json_string(FILE *f, const char *s);

#endif
