/* SPDX-License-Identifier: MIT */
/*
 * preducectl: a person's view of running preduced daemons.
 *
 *   preducectl status|jobs|workers [JOB] [--json]
 *              [--metrics HOST:PORT]... [--timeout-ms MS]
 *
 * For each daemon, in order: fetch http://HOST:PORT/metrics (the daemon's
 * [metrics] listen address; default 127.0.0.1:9464) with one plain HTTP/1.0
 * request (fetch.c), parse the Prometheus text (promtext.c), read what is
 * shown out of it (view.c) and print it (cmd.c), as a table (table.c) or
 * with --json as one JSON document for all (json_view.c). `status`: for a
 * node, its trainers, reduces and bytes by transport; for a scheduler, its
 * workers, groups, group sizes, per-worker versions and rates, and
 * stragglers. `jobs`: a scheduler's jobs. `workers`: a scheduler's
 * workers (with JOB, that job's alone), a node's trainers.
 *
 * Each daemon's connect, request and answer together must finish within
 * --timeout-ms (2000). Exit status: 0, 1 when a daemon could not be
 * reached or answered badly (after printing the others), 2 for a usage
 * error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/ctl/cmd.h"

#define DEFAULT_TIMEOUT_MS 2000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: preducectl status|jobs|workers [JOB] [--json] "
            "[--metrics HOST:PORT]...\n"
            "                  [--timeout-ms MS]\n"
            "Shows the state of running preduced daemons, read from their\n"
            "metrics endpoints ([metrics] listen in preduced.conf).\n"
            "\n"
            "  status               each daemon's figures and workers\n"
            "  jobs                 a scheduler's jobs: id, policy,\n"
            "                       workers, waiting, groups\n"
            "  workers [JOB]        a scheduler's workers (JOB's alone):\n"
            "                       job, rank, node, version, staleness,\n"
            "                       steps, pace, straggler; a node's\n"
            "                       trainers\n"
            "  --json               one JSON array, an object per daemon\n"
            "  --metrics HOST:PORT  a daemon's metrics address; repeat for\n"
            "                       several (default " PR_CTL_DEFAULT_METRICS
            ").\n"
            "                       HOST: an IP address or localhost\n"
            "  --timeout-ms MS      limit per daemon for connect, request\n"
            "                       and answer (%d)\n"
            "  -h, --help           this text\n"
            "Exit status: 0; 1 if a daemon could not be reached; 2 on a\n"
            "usage error.\n",
            DEFAULT_TIMEOUT_MS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"metrics", required_argument, NULL, 'm'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    static const char *const cmds[] = {[PR_CTL_STATUS] = "status",
                                       [PR_CTL_WORKERS] = "workers",
                                       [PR_CTL_JOBS] = "jobs"};
    int cmd = -1;
    for (int i = 0; argc >= 2 && i < (int)(sizeof(cmds) / sizeof(*cmds)); i++)
        if (!strcmp(argv[1], cmds[i]))
            cmd = i;
    if (cmd < 0) {
        fprintf(stderr, "preducectl: %s%s\n",
                argc < 2 ? "a command is needed" : "unknown command ",
                argc < 2 ? "" : argv[1]);
        usage(stderr);
        return 2;
    }
    struct pr_ctl_args a = {.cmd = (enum pr_ctl_cmd)cmd,
                            .timeout_ms = DEFAULT_TIMEOUT_MS};
    /* getopt's messages name argv[0]: the program's, not the command's. */
    static char prog[] = "preducectl";
    argv[1] = prog;
    int c;
    char *end;
    long v;
    while ((c = getopt_long(argc - 1, argv + 1, "m:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (a.naddrs == PR_CTL_MAX_DAEMONS) {
                fprintf(stderr, "preducectl: more than %d --metrics\n",
                        PR_CTL_MAX_DAEMONS);
                return 2;
            }
            a.addrs[a.naddrs++] = optarg;
            break;
        case 't':
            v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 600000) {
                fprintf(stderr,
                        "preducectl: --timeout-ms %s: must be 1..600000\n",
                        optarg);
                return 2;
            }
            a.timeout_ms = (int)v;
            break;
        case 'j':
            a.json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    /* workers JOB: one argument after the options (getopt moved it). */
    if (a.cmd == PR_CTL_WORKERS && optind == argc - 2)
        a.job = argv[optind++ + 1];
    if (optind < argc - 1) {
        fprintf(stderr, "preducectl: unexpected argument '%s'\n",
                argv[optind + 1]);
        return 2;
    }
    if (a.naddrs == 0) {
        a.addrs[a.naddrs++] = PR_CTL_DEFAULT_METRICS;
        a.default_addr = 1;
    }
    return pr_ctl_run(&a);
}
