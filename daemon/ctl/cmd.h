/* SPDX-License-Identifier: MIT */
/* preducectl's commands, over the daemons named on the command line. */
#ifndef PR_CTL_CMD_H
#define PR_CTL_CMD_H

#define PR_CTL_MAX_DAEMONS 64

struct pr_ctl_args {
    const char *addrs[PR_CTL_MAX_DAEMONS]; /* HOST:PORT each */
    int naddrs;
    int timeout_ms; /* per daemon: connect, request and answer */
};

/*
 * `status`: fetches each daemon in order and prints it on stdout, a
 * failure on stderr. 0, or 1 when any daemon could not be read.
 */
int pr_ctl_status(const struct pr_ctl_args *a);

#endif
