/* SPDX-License-Identifier: MIT */
/* A recursive-descent check of RFC 8259's grammar, nested 64 deep at most. */
#include "tests/integration/json_check.h"

#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64

static const char *value(const char *p, int depth);

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static int hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

/* A well-formed UTF-8 sequence of 2..4 bytes at p: past it, or NULL. */
static const char *utf8(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    int n = u[0] >= 0xf0 && u[0] <= 0xf4   ? 4
            : u[0] >= 0xe0                 ? 3
            : u[0] >= 0xc2 && u[0] <= 0xdf ? 2
                                           : 0;
    if (!n)
        return NULL;
    uint32_t cp = u[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return NULL;
        cp = cp << 6 | (u[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return NULL;
    return p + n;
}

static const char *string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20)
            return NULL; /* the NUL at the end included */
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!hex(p[i]))
                        return NULL;
                p += 5;
            } else if (*p && strchr("\"\\/bfnrt", *p)) {
                p++;
            } else {
                return NULL;
            }
        } else if (c < 0x80) {
            p++;
        } else if (!(p = utf8(p))) {
            return NULL;
        }
    }
    return p + 1;
}

static const char *digits(const char *p)
{
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p >= '0' && *p <= '9')
        p++;
    return p;
}

static const char *number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (!(p = digits(p)))
        return NULL;
    if (*p == '.' && !(p = digits(p + 1)))
        return NULL;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        p = digits(p);
    }
    return p;
}

/* An object or array: members (with keys) or elements, then `close`. */
static const char *items(const char *p, char close, int depth)
{
    p = ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            if (!(p = string(p)))
                return NULL;
            p = ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = value(p, depth + 1)))
            return NULL;
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
        p = ws(p);
    }
}

static const char *value(const char *p, int depth)
{
    if (depth > MAX_DEPTH)
        return NULL;
    p = ws(p);
    if (*p == '{' || *p == '[')
        p = items(p, *p == '{' ? '}' : ']', depth);
    else if (*p == '"')
        p = string(p);
    else if (!strncmp(p, "true", 4))
        p += 4;
    else if (!strncmp(p, "false", 5))
        p += 5;
    else if (!strncmp(p, "null", 4))
        p += 4;
    else
        p = number(p);
    return p ? ws(p) : NULL;
}

int h_json_check(const char *s, const char **where)
{
    const char *end = value(s, 0);
    if (end && *end == '\0')
        return 0;
    *where = end ? end : s;
    return -1;
}
