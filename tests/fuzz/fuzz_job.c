/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a job as trainers name it and a scheduler starts it
 * (daemon/sched/sched_job.c): the input's lines are a job name, then
 * its settings ("key=value"), as Hello.job and Hello.settings carry them
 * from any local trainer. The job is asked for twice with the same
 * settings, as its first worker and a later one: the answer must be one
 * of the documented codes with a reason on refusal, and a job that
 * started must take the second worker (the same settings agree). Every
 * key a job may set is allowed here, so that each value parser runs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/sched/sched_int.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINES (PR_JOB_SETTINGS_MAX + 2)

static int get(struct pr_sched *s, char **line, size_t n, struct sched_job **j)
{
    char why[512];
    memset(why, 0x55, sizeof(why));
    int rc = pr_sched_job_get(s, line[0], line + 1, n - 1, j, why, sizeof(why));
    if (rc != 0 && rc != -EINVAL && rc != -EPERM && rc != -ENOMEM)
        abort();
    if (rc < 0 && (!memchr(why, 0, sizeof(why)) || !why[0]))
        abort(); /* a refusal says why, in a string */
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct pr_conf conf;
    static int ready;
    if (!ready) {
        fuzz_sched_conf(&conf);
        ready = 1;
    }
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *line[LINES];
    size_t n = 0;
    for (char *p = text; n < LINES && p;) {
        line[n++] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    struct pr_sched s;
    memset(&s, 0, sizeof(s));
    s.conf = &conf;
    struct sched_job *first = NULL, *again = NULL;
    if (get(&s, line, n, &first) == 0) {
        if (strcmp(first->name, line[0]) != 0 || s.njobs != 1)
            abort();
        if (get(&s, line, n, &again) != 0 || again != first)
            abort(); /* the same settings must agree with themselves */
    }
    pr_sched_jobs_fini(&s);
    free(text);
    return 0;
}
