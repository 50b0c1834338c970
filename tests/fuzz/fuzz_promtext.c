/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the bytes preducectl reads from a metrics port
 * (daemon/ctl/promtext.c), parsed and then shown as it shows a daemon
 * (view.c, table.c, json_view.c). The parser takes a NUL-terminated heap
 * string: it gets a copy of exactly the input and its NUL, so that ASan
 * sees any read past the end. Every sample must point into that copy;
 * the view must build or say why (-ENOENT, -ENOMEM); the tables must
 * hold no control character but the line ends, and the JSON of both
 * commands must be one valid document (tests/integration/json_check.c),
 * whatever the bytes were.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ctl/json_view.h"
#include "daemon/ctl/promtext.h"
#include "daemon/ctl/table.h"
#include "daemon/ctl/view.h"
#include "tests/integration/json_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const char *p, const char *text, size_t size)
{
    return p >= text && p <= text + size;
}

/* The tables of v: no byte below 0x20 but '\n', and no DEL. */
static void check_tables(const struct pr_ctl_view *v)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return;
    pr_ctl_table_status(f, v, "ADDR");
    pr_ctl_table_workers(f, v, "ADDR");
    if (fclose(f) != 0)
        abort();
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)out[i] < 0x20 && out[i] != '\n') || out[i] == 0x7f)
            abort();
    free(out);
}

/* The JSON of both commands, as cmd.c writes them: one array each. */
static void check_json(const struct pr_ctl_view *v)
{
    for (int cmd = 0; cmd < 2; cmd++) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        if (!f)
            return;
        struct pr_json j;
        pr_json_init(&j, f);
        pr_json_open_array(&j, NULL);
        (cmd ? pr_ctl_json_workers : pr_ctl_json_status)(&j, v, "ADDR");
        pr_ctl_json_error(&j, "ADDR", v->job);
        pr_json_close_array(&j);
        if (fclose(f) != 0)
            abort();
        const char *where;
        if (h_json_check(out, &where) != 0)
            abort();
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct pr_promtext m;
    struct pr_ctl_view v = {0};
    int rc = pr_promtext_parse(text, &m); /* m owns text from here */
    if (rc != 0 && rc != -ENOMEM)
        abort();
    for (size_t i = 0; rc == 0 && i < m.n; i++) {
        char out[64];
        /* Labels: "" when none, else in the text after the name. */
        if (!inside(m.s[i].name, text, size) ||
            (m.s[i].labels[0] && (!inside(m.s[i].labels, text, size) ||
                                  m.s[i].labels <= m.s[i].name)))
            abort();
        if (pr_promtext_label(&m.s[i], "worker", out, sizeof(out)) == 0 &&
            strlen(out) >= sizeof(out))
            abort();
        pr_promtext_label(&m.s[i], "le", out, 1);
    }
    if (rc == 0) {
        rc = pr_ctl_view_build(&m, &v);
        if (rc != 0 && rc != -ENOENT && rc != -ENOMEM)
            abort();
    }
    if (rc == 0) {
        check_tables(&v);
        check_json(&v);
    }
    pr_ctl_view_free(&v);
    pr_promtext_free(&m);
    return 0;
}
