/* SPDX-License-Identifier: MIT */
/* preducectl's commands, over the daemons named on the command line. */
#ifndef PR_CTL_CMD_H
#define PR_CTL_CMD_H

#define PR_CTL_MAX_DAEMONS 64
/* Where preducectl looks without --metrics: the conf's usual listen. */
#define PR_CTL_DEFAULT_METRICS "127.0.0.1:9464"

enum pr_ctl_cmd {
    PR_CTL_STATUS,  /* each daemon's figures and its workers */
    PR_CTL_WORKERS, /* each daemon's workers (a node's trainers) */
    PR_CTL_JOBS,    /* each scheduler's jobs */
};

struct pr_ctl_args {
    enum pr_ctl_cmd cmd;
    const char *job; /* workers JOB: that job's alone; NULL: all */
    int json;        /* one JSON document instead of the tables */
    const char *addrs[PR_CTL_MAX_DAEMONS]; /* HOST:PORT each */
    int naddrs;
    int default_addr; /* no --metrics: addrs holds PR_CTL_DEFAULT_METRICS */
    int timeout_ms;   /* per daemon: connect, request and answer */
};

/*
 * Runs a command: fetches each daemon in order and prints it on stdout
 * (with json, one array for all), each failure on stderr (and, with
 * json, as that daemon's element). 0; 1 when a daemon could not be read
 * or stdout could not be written.
 */
int pr_ctl_run(const struct pr_ctl_args *a);

#endif
