/* SPDX-License-Identifier: MIT */
/*
 * The multi-host fixture: H hosts, each a network namespace with its own
 * address on a bridge that the test makes (tests/hosts/net.sh), one node
 * daemon per host, the scheduler on host 0, trainers in their host's
 * namespace (the integration harness, tests/integration/harness.h, runs
 * them and checks every result exactly). Link caps and partitions are
 * net.sh commands. A host's data links can go through a delay relay
 * (tests/hosts/relay.c, in that host's namespace: a long path without
 * netem). Everything is deleted by hh_down(), and by run.sh's trap when a
 * test dies first (net.sh down kills what still runs in the namespaces).
 */
#ifndef PR_HOSTS_H
#define PR_HOSTS_H

#include "tests/integration/harness.h"

/*
 * hh_route()'s relay port: below those h_free_port() picks, so that no
 * daemon of the test takes it.
 */
#define HH_RELAY_PORT 7100
#define HH_MAX_RELAYS 4

/*
 * A relay process: in host `host`'s namespace, listening on that host's
 * address at `port`, forwarding to the same address at `target_port`.
 */
struct hh_relay {
    pid_t pid; /* 0: not running */
    int host;
    uint16_t port, target_port;
    int delay_ms, window_kb;
};

struct hh {
    char prefix[32]; /* namespaces <prefix>-sw, <prefix>-h<i> */
    int nhosts;
    struct h_cluster c;
    char dir[64]; /* the relays' logs, relay<k>.log; removed by hh_down */
    struct hh_relay relay[HH_MAX_RELAYS];
    int nrelays;
    /*
     * hh_route(): hh_start puts relay `route` (an index into relay[], or
     * -1) in front of node route_host's data listener.
     */
    int route, route_host;
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
/*
 * The scheduler on host 0 and node i on host i: h_cluster_start_at's.
 * After hh_route(): node i starts when node i - 1 has joined (node ids
 * follow host order, and the higher id dials the lower), and the routed
 * host's relay starts right after its node.
 */
int hh_start(struct hh *h, const char *const *sched_sets,
             const char *const *node_sets);
/*
 * h_cluster_stop's count; h->c is cleared and the routed relay killed
 * (hh_start may run again).
 */
int hh_stop(struct hh *h);
/* hh_stop's count, then the relays killed and the namespaces deleted. */
int hh_down(struct hh *h);

/*
 * Adds a relay (not started) on host `host`, listening at `port` there
 * and forwarding to `target_port` there, with DELAY_MS and WINDOW_KB (see
 * relay.c): its index, or -ENOSPC.
 */
int hh_relay_add(struct hh *h, int host, uint16_t port, uint16_t target_port,
                 int delay_ms, int window_kb);
/*
 * Starts relay k (again, after hh_relay_kill) and waits up to 5 s for it
 * to listen: 0, or -errno after printing its log.
 */
int hh_relay_start(struct hh *h, int k);
/* SIGKILL to relay k, reaped: every connection through it drops at once. */
void hh_relay_kill(struct hh *h, int k);
/* Relay k's log, relay<k>.log in h->dir (for a test to read). */
void hh_relay_log(const struct hh *h, int k, char *buf, size_t len);
/* A connection through a relay, from its log. */
struct hh_relay_conn {
    unsigned long id;
    char peer[64];               /* the client's host:port */
    int closed;                  /* its end logged, with what it carried */
    unsigned long long up, down; /* bytes to the target, back */
};
/*
 * The connections relay k took since it last started, oldest first: how
 * many (the first max into v), or -errno.
 */
int hh_relay_conns(const struct hh *h, int k, struct hh_relay_conn *v, int max);
/*
 * Before hh_start: the data links to node `host` go through a relay at
 * HH_RELAY_PORT on its host (node.data_advertise names it; its target is
 * the node's data port, known once the node starts). The relay's index.
 */
int hh_route(struct hh *h, int host, int delay_ms, int window_kb);

#endif
