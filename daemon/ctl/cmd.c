/* SPDX-License-Identifier: MIT */
/*
 * The commands: each daemon in the order given is fetched, parsed, read
 * into a view and printed before the next is asked, so a slow one delays
 * only those after it.
 */
#include "daemon/ctl/cmd.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/ctl/fetch.h"
#include "daemon/ctl/promtext.h"
#include "daemon/ctl/table.h"
#include "daemon/ctl/view.h"

/* Fetches and prints one daemon. 0, or 1 after a message on stderr. */
static int status_one(const char *addr, int timeout_ms)
{
    char *body = NULL;
    const char *what = "";
    int rc = pr_ctl_fetch(addr, timeout_ms, &body, &what);
    if (rc < 0) {
        fprintf(stderr, "preducectl: %s: %s: %s\n", addr, what,
                rc == -ETIMEDOUT ? "no answer in time"
                : rc == -EPROTO  ? "bad answer"
                                 : strerror(-rc));
        return 1;
    }
    struct pr_promtext m;
    struct pr_ctl_view v = {0};
    rc = pr_promtext_parse(body, &m);
    if (rc == 0)
        rc = pr_ctl_view_build(&m, &v);
    if (rc == 0)
        pr_ctl_table_status(stdout, &v, addr);
    else if (rc == -ENOENT)
        fprintf(stderr,
                "preducectl: %s: no preduce_info metric: not a "
                "preduced metrics endpoint\n",
                addr);
    else
        fprintf(stderr, "preducectl: %s: out of memory\n", addr);
    pr_ctl_view_free(&v);
    pr_promtext_free(&m);
    return rc < 0;
}

int pr_ctl_status(const struct pr_ctl_args *a)
{
    int failed = 0;
    for (int i = 0; i < a->naddrs; i++) {
        if (i > 0)
            printf("\n");
        failed |= status_one(a->addrs[i], a->timeout_ms);
        fflush(stdout);
    }
    return failed;
}
