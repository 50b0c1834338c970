/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus text exposition format (0.0.4) as preducectl reads it: a
 * daemon's /metrics body, which comes from the network and is untrusted
 * (tests/fuzz/fuzz_promtext.c). Only sample lines are kept ("# HELP" and
 * "# TYPE" lines, and lines that do not parse, are skipped); a timestamp
 * after the value is ignored.
 */
#ifndef PR_PROMTEXT_H
#define PR_PROMTEXT_H

#include <stddef.h>

struct pr_prom_sample {
    const char *name;
    const char *labels; /* between the braces, still escaped; "" when none */
    double value;
};

struct pr_promtext {
    char *text; /* the body, owned; the samples point into it */
    struct pr_prom_sample *s;
    size_t n, cap;
};

/*
 * Parses every sample line of `text`, a NUL-terminated heap string whose
 * ownership passes to m (freed by pr_promtext_free, whatever this
 * returns); text is modified in place. 0 or -ENOMEM.
 */
int pr_promtext_parse(char *text, struct pr_promtext *m);
void pr_promtext_free(struct pr_promtext *m);

/*
 * Copies label `key` of sample s into out[outlen] (outlen >= 1),
 * unescaped, truncated to fit. 0, or -ENOENT when s has no such label.
 */
int pr_promtext_label(const struct pr_prom_sample *s, const char *key,
                      char *out, size_t outlen);
/*
 * The first sample `name` whose label key equals val (key NULL: the
 * first sample `name`); NULL if none.
 */
const struct pr_prom_sample *pr_promtext_find(const struct pr_promtext *m,
                                              const char *name, const char *key,
                                              const char *val);
/* pr_promtext_find's value, or NAN. */
double pr_promtext_get(const struct pr_promtext *m, const char *name,
                       const char *key, const char *val);

#endif
