/* SPDX-License-Identifier: MIT */
/*
 * The JSON writer. One flag is all the state commas need: an opening
 * bracket clears it (the first member needs none) and every value that
 * ends, a closing bracket included, sets it.
 */
#include "daemon/ctl/json.h"

#include <math.h>
#include <stdint.h>

void pr_json_init(struct pr_json *j, FILE *f)
{
    j->f = f;
    j->comma = 0;
}

/* What precedes any value: the comma, then the key. */
static void begin(struct pr_json *j, const char *key)
{
    if (j->comma)
        fputc(',', j->f);
    if (key) {
        pr_json_string(j->f, key);
        fputc(':', j->f);
    }
}

void pr_json_open_object(struct pr_json *j, const char *key)
{
    begin(j, key);
    fputc('{', j->f);
    j->comma = 0;
}

void pr_json_close_object(struct pr_json *j)
{
    fputc('}', j->f);
    j->comma = 1;
}

void pr_json_open_array(struct pr_json *j, const char *key)
{
    begin(j, key);
    fputc('[', j->f);
    j->comma = 0;
}

void pr_json_close_array(struct pr_json *j)
{
    fputc(']', j->f);
    j->comma = 1;
}

void pr_json_str(struct pr_json *j, const char *key, const char *s)
{
    begin(j, key);
    pr_json_string(j->f, s);
    j->comma = 1;
}

void pr_json_num(struct pr_json *j, const char *key, double x)
{
    begin(j, key);
    if (!isfinite(x))
        fputs("null", j->f);
    else if (x == trunc(x))
        fprintf(j->f, "%.0f", x); /* counters: every digit, no exponent */
    else
        fprintf(j->f, "%.9g", x);
    j->comma = 1;
}

void pr_json_bool(struct pr_json *j, const char *key, double x)
{
    begin(j, key);
    fputs(isnan(x) ? "null" : x != 0 ? "true" : "false", j->f);
    j->comma = 1;
}

/* The length of the well-formed UTF-8 sequence at s, or 0 if none. */
static int utf8_len(const unsigned char *s)
{
    /* By the lead byte: the length, its payload bits, the least code
     * point of that length (below it: an overlong form). */
    static const struct {
        unsigned char mask, lead;
        int n;
        uint32_t min;
    } forms[] = {{0xe0, 0xc0, 2, 0x80},
                 {0xf0, 0xe0, 3, 0x800},
                 {0xf8, 0xf0, 4, 0x10000}};
    if (s[0] < 0x80)
        return 1;
    int n = 0;
    uint32_t cp = 0, min = 0;
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]) && !n; i++) {
        if ((s[0] & forms[i].mask) == forms[i].lead) {
            n = forms[i].n;
            cp = s[0] & (uint32_t)~forms[i].mask;
            min = forms[i].min;
        }
    }
    if (!n)
        return 0; /* a continuation byte, or 0xf8..0xff */
    /* The terminating NUL is no continuation byte: the scan stops there. */
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void pr_json_string(FILE *f, const char *s)
{
    static const char short_esc[0x20] = {
        ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n;
        if (*p == '"' || *p == '\\') {
            fputc('\\', f);
            fputc(*p++, f);
        } else if (*p < 0x20 && short_esc[*p]) {
            fputc('\\', f);
            fputc(short_esc[*p++], f);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\u%04x", *p++);
        } else if ((n = utf8_len(p)) > 0) {
            fwrite(p, 1, (size_t)n, f);
            p += n;
        } else {
            fputs("\\ufffd", f);
            p++;
        }
    }
    fputc('"', f);
}
