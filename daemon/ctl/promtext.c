/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text, parsed in place: each sample line is cut into its name,
 * its label text and its value, and the samples point into the body. The
 * body is untrusted: every scan stops at its terminating NUL, and a line
 * that does not parse is skipped, never an error.
 */
#include "daemon/ctl/promtext.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cuts one line into s; 0, or -1 when it is no sample line. */
static int parse_line(char *line, struct pr_prom_sample *s)
{
    s->name = line;
    s->labels = "";
    char *p = line + strcspn(line, "{ ");
    if (*p == '{') {
        *p++ = '\0';
        s->labels = p;
        /* The closing brace is the first one outside quotes. */
        int quoted = 0;
        for (; *p && (quoted || *p != '}'); p++) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                quoted = !quoted;
        }
        if (*p != '}')
            return -1;
        *p++ = '\0';
    } else if (*p == ' ') {
        *p++ = '\0';
    } else {
        return -1;
    }
    char *e;
    s->value = strtod(p, &e);
    return e == p ? -1 : 0;
}

int pr_promtext_parse(char *text, struct pr_promtext *m)
{
    memset(m, 0, sizeof(*m));
    m->text = text;
    /* A blank line may sit between samples: it ends nothing. */
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        struct pr_prom_sample s;
        if (line[0] == '#' || parse_line(line, &s) < 0)
            continue;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 256;
            struct pr_prom_sample *ns = realloc(m->s, cap * sizeof(*ns));
            if (!ns)
                return -ENOMEM;
            m->s = ns;
            m->cap = cap;
        }
        m->s[m->n++] = s;
    }
    return 0;
}

void pr_promtext_free(struct pr_promtext *m)
{
    free(m->s);
    free(m->text);
    memset(m, 0, sizeof(*m));
}

int pr_promtext_label(const struct pr_prom_sample *s, const char *key,
                      char *out, size_t outlen)
{
    size_t klen = strlen(key);
    const char *p = s->labels;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '"')
            return -ENOENT;
        int match = (size_t)(eq - p) == klen && !strncmp(p, key, klen);
        size_t o = 0;
        for (p = eq + 2; *p && *p != '"'; p++) {
            char c = *p;
            if (c == '\\' && p[1])
                c = *++p == 'n' ? '\n' : *p;
            if (match && o + 1 < outlen)
                out[o++] = c;
        }
        if (match) {
            out[o] = '\0';
            return 0;
        }
        if (*p == '"')
            p++;
        if (*p == ',')
            p++;
    }
    return -ENOENT;
}

const struct pr_prom_sample *pr_promtext_find(const struct pr_promtext *m,
                                              const char *name, const char *key,
                                              const char *val)
{
    char buf[256];
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->s[i].name, name) != 0)
            continue;
        if (!key || (pr_promtext_label(&m->s[i], key, buf, sizeof(buf)) == 0 &&
                     !strcmp(buf, val)))
            return &m->s[i];
    }
    return NULL;
}

double pr_promtext_get(const struct pr_promtext *m, const char *name,
                       const char *key, const char *val)
{
    const struct pr_prom_sample *s = pr_promtext_find(m, name, key, val);
    return s ? s->value : NAN;
}
