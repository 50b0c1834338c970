/* SPDX-License-Identifier: MIT */
/*
 * A strict JSON (RFC 8259) checker for the tests of preducectl --json,
 * written apart from the writer it checks (daemon/ctl/json.c).
 */
#ifndef H_JSON_CHECK_H
#define H_JSON_CHECK_H

/*
 * 0 when s is exactly one JSON value (with whitespace around it), every
 * string valid UTF-8 without raw control characters; otherwise -1, with
 * *where at what follows a whole value, or at s when the value itself is
 * wrong.
 */
int h_json_check(const char *s, const char **where);

#endif
