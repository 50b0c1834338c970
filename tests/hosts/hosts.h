/*
 * The multi-host fixture: H hosts, each a network namespace with its own
 * address on a bridge that the test makes (tests/hosts/net.sh), one node
 * daemon per host, the scheduler on host 0, trainers in their host's
 * namespace (the integration harness, tests/integration/harness.h, runs
 * them and checks every result exactly). Link caps and partitions are
 * net.sh commands. Everything is deleted by hh_down(), and by run.sh's
 * trap when a test dies first.
 */
#ifndef PR_HOSTS_H
#define PR_HOSTS_H

#include "tests/integration/harness.h"

struct hh {
    char prefix[32]; /* namespaces <prefix>-sw, <prefix>-h<i> */
    int nhosts;
    struct h_cluster c;
};

/*
 * Makes the hosts' network: 0, or -errno after printing why. The prefix
 * is $PREDUCE_HOSTS_PREFIX (run.sh's) or prh<pid>, and this process's pid.
 */
int hh_up(struct hh *h, int nhosts);
/* Runs `net.sh CMD PREFIX ARGS` (printf-style args): 0, or -EIO. */
int hh_net(const struct hh *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Host i's address, 10.77.0.<i+1>. */
void hh_addr(int i, char *buf, size_t len);
/* The scheduler on host 0 and node i on host i: h_cluster_start_at's. */
int hh_start(struct hh *h, const char *const *sched_sets,
             const char *const *node_sets);
/* h_cluster_stop's count, then the namespaces deleted. */
int hh_down(struct hh *h);

#endif
