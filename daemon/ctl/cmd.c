/* SPDX-License-Identifier: MIT */
/*
 * The commands: each daemon in the order given is fetched, parsed, read
 * into a view and printed before the next is asked, so a slow one delays
 * only those after it, and what was printed is flushed at once. With
 * --json the document is an array, one element per daemon, which a
 * daemon that could not be read also gets, so that its place is kept.
 */
#include "daemon/ctl/cmd.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/ctl/fetch.h"
#include "daemon/ctl/json_view.h"
#include "daemon/ctl/promtext.h"
#include "daemon/ctl/table.h"
#include "daemon/ctl/view.h"

/*
 * Fetches one daemon and reads its view. 0, or a negative errno with
 * why[] saying what failed, for a person. Nothing listening is most
 * often a daemon without metrics.listen: the message says so, and that
 * the address was the default when it was.
 */
static int read_view(const struct pr_ctl_args *a, const char *addr,
                     struct pr_promtext *m, struct pr_ctl_view *v, char *why,
                     size_t whylen)
{
    char *body = NULL;
    int rc = pr_ctl_fetch(addr, a->timeout_ms, &body, why, whylen);
    if (rc == -ECONNREFUSED)
        snprintf(
            why, whylen,
            "connection refused: is metrics.listen set in that daemon's "
            "preduced.conf? (metrics are off by default%s)",
            a->default_addr
                ? "; without --metrics preducectl reads " PR_CTL_DEFAULT_METRICS
                : "");
    if (rc < 0)
        return rc;
    rc = pr_promtext_parse(body, m);
    if (rc == 0)
        rc = pr_ctl_view_build(m, v);
    if (rc == -ENOENT)
        snprintf(why, whylen,
                 "no preduce_info metric: not a preduced metrics endpoint");
    else if (rc < 0)
        snprintf(why, whylen, "%s", strerror(-rc));
    return rc;
}

/* Flushes stdout: 0, or 1 after saying why it failed. */
static int flush_out(void)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    fprintf(stderr, "preducectl: writing the output: %s\n",
            strerror(errno ? errno : EIO));
    return 1;
}

/* Each command's printer, by enum pr_ctl_cmd. */
static void (*const json[])(struct pr_json *, const struct pr_ctl_view *,
                            const char *) = {
    [PR_CTL_STATUS] = pr_ctl_json_status,
    [PR_CTL_WORKERS] = pr_ctl_json_workers,
    [PR_CTL_JOBS] = pr_ctl_json_jobs,
};
static void (*const table[])(FILE *, const struct pr_ctl_view *,
                             const char *) = {
    [PR_CTL_STATUS] = pr_ctl_table_status,
    [PR_CTL_WORKERS] = pr_ctl_table_workers,
    [PR_CTL_JOBS] = pr_ctl_table_jobs,
};

int pr_ctl_run(const struct pr_ctl_args *a)
{
    struct pr_json j;
    pr_json_init(&j, stdout);
    if (a->json)
        pr_json_open_array(&j, NULL);
    int failed = 0, shown = 0;
    for (int i = 0; i < a->naddrs; i++) {
        const char *addr = a->addrs[i];
        struct pr_promtext m = {0};
        struct pr_ctl_view v = {0};
        char why[256];
        if (read_view(a, addr, &m, &v, why, sizeof(why)) < 0) {
            fprintf(stderr, "preducectl: %s: %s\n", addr, why);
            if (a->json)
                pr_ctl_json_error(&j, addr, why);
            failed = 1;
        } else {
            if (a->job)
                pr_ctl_view_keep_job(&v, a->job);
            if (!a->json && shown++)
                printf("\n");
            if (a->json)
                json[a->cmd](&j, &v, addr);
            else
                table[a->cmd](stdout, &v, addr);
        }
        pr_ctl_view_free(&v);
        pr_promtext_free(&m);
        if (flush_out())
            return 1;
    }
    if (a->json) {
        pr_json_close_array(&j);
        printf("\n");
    }
    return flush_out() || failed;
}
