/* SPDX-License-Identifier: MIT */
/*
 * make bench-hosts: the all-reduce's bus bandwidth across 2 and 4 hosts
 * (network namespaces on a bridge, tests/hosts/hosts.h), every host's link
 * capped at the same rate each way (tbf), one trainer per host, policy
 * allreduce. Bus bandwidth: the bytes a node sends per all-reduce in a
 * ring of H, 2 (H - 1) / H of the model, over the time of one all-reduce;
 * the ring's bound is the cap itself. Next to it, in the same topology and
 * round, iperf3 over the same link (host 0 to host 1): what one TCP stream
 * gets through that cap, one way and both ways at once (--bidir: a ring
 * node sends and receives at once, which at high rates costs this
 * machine's shared cores more than the cap). Rounds alternate the two; medians
 * and ranges are printed and written to a file. Figures, never a pass or fail.
 *
 *   bench_hosts [RATE_MBIT [MIB [ROUNDS]]]      (100 4 3)
 *
 * The table goes to $BENCH_HOSTS_OUT (build/bench-hosts.txt).
 *
 * Ring order (`bench_hosts ring [TRUNK_MBIT [MIB [ROUNDS]]]`, 40 1 3): two
 * racks of two hosts on two bridges joined by one trunk capped at
 * TRUNK_MBIT (net.sh trunk), hosts 0 and 2 in one, 1 and 3 in the other,
 * so that node id order crosses the trunk on every hop (each way of it
 * then carries two ring links) where two crossings would do. The same
 * all-reduce with scheduler.ring_order = id and = measured, alternating
 * which goes first; measured gets warm-up steps to time its links (the
 * nodes report every 100 ms here). The table goes to $BENCH_RING_OUT.
 *
 * Streams per peer pair (`bench_hosts streams [DELAY_MS [WINDOW_KB
 * [RATE_MBIT [MIB [ROUNDS]]]]]`, 20 256 200 16 3): 2 hosts capped at
 * RATE_MBIT each way, node 1's data link to node 0 through a delay relay
 * on host 0 (tests/hosts/relay.c: at most WINDOW_KB per DELAY_MS a
 * connection, as a window-limited TCP stream over a long path), so that
 * one stream cannot fill the cap and several can. The all-reduce with
 * transport.streams = 1, 2 and 4, each next to iperf3 -P 1, 2, 4 from
 * host 1 to host 0 through a relay of the same settings, one way and
 * both ways at once (the ring's two nodes send to each other at once), in
 * the same topology and round; counts and tools alternate their order
 * round by round. The table goes to $BENCH_STREAMS_OUT.
 *
 * Encryption (`bench_hosts seal [RATE_MBIT [MIB [ROUNDS]]]`, 1000 16 3):
 * 2 hosts capped at RATE_MBIT each way, one cluster key, the all-reduce
 * with security.encrypt = on against off (the anchor: the same
 * authenticated handshake, then clear text), alternating which goes
 * first; the ratio is taken per round. Where the link is the bound, as
 * across a network, a core's sealing rate is what decides the cost
 * (bench_seal gives it). The table goes to $BENCH_SEAL_OUT.
 *
 * Wire encodings (`bench_hosts wire [RATE_MBIT [MIB [ROUNDS]]]`, 500 16
 * 3): 2 hosts capped at RATE_MBIT each way (0: uncapped, the veth pair at
 * whatever this machine's cores move), the all-reduce with
 * transport.wire = fp32 (the anchor), bf16 and int8, the order rotated
 * round by round; throughput is the model's float32 bytes per second
 * (bus bandwidth as if it went as fp32), so the ratios are what a user
 * gains. The table goes to $BENCH_WIRE_OUT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/hosts/hosts.h"

#define MAX_ROUNDS 9

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n, double *lo, double *hi)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof(*s));
    qsort(s, (size_t)n, sizeof(*s), cmp_d);
    *lo = s[0];
    *hi = s[n - 1];
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/*
 * An iperf3 server on host `srv` at port 5201, in the background: for one
 * test (once), or until the namespace goes (net.sh down kills it).
 */
static int iperf_server(const struct hh *h, int srv, int once)
{
    char cmd[256], at[32];
    hh_addr(srv, at, sizeof(at));
    snprintf(cmd, sizeof(cmd),
             "ip netns exec %s-h%d timeout %d iperf3 -s %s -B %s -p 5201 "
             ">/dev/null 2>&1 &",
             h->prefix, srv, once ? 20 : 600, once ? "-1" : "", at);
    return system(cmd) == 0 ? 0 : -1;
}

/*
 * iperf3 from host `cli` to host `srv` for 3 s, to port `port` there
 * (5201, the server's own, or a relay's in front of it), `parallel`
 * streams: received bits per second (all streams), or -1. bidir: both
 * ways at once (a ring node sends and receives at once), the mean of the
 * two. Tried for 4 s while the server is not up yet (or busy).
 */
static double iperf_client(const struct hh *h, int srv, int cli, uint16_t port,
                           int parallel, int bidir)
{
    char cmd[640], at[32];
    hh_addr(srv, at, sizeof(at));
    double bps = -1;
    for (int tries = 0; tries < 20 && bps < 0; tries++) {
        usleep(200000);
        snprintf(cmd, sizeof(cmd),
                 "ip netns exec %s-h%d timeout 20 iperf3 -J -t 3 -P %d %s -c "
                 "%s -p %u 2>/dev/null | python3 -c 'import json,sys; "
                 "e = json.load(sys.stdin)[\"end\"]; "
                 "v = [e[k][\"bits_per_second\"] for k in "
                 "(\"sum_received\", \"sum_received_bidir_reverse\") "
                 "if k in e]; print(sum(v) / len(v))' 2>/dev/null",
                 h->prefix, cli, parallel, bidir ? "--bidir" : "", at, port);
        FILE *f = popen(cmd, "r");
        if (!f)
            break;
        if (fscanf(f, "%lf", &bps) != 1)
            bps = -1;
        pclose(f);
    }
    return bps;
}

/* iperf3 from host 0 to host 1 directly, one stream. */
static double iperf(const struct hh *h, int bidir)
{
    if (iperf_server(h, 1, 1) < 0)
        return -1;
    return iperf_client(h, 1, 0, 5201, 1, bidir);
}

/*
 * One run of `hosts` trainers, one per host, `steps` all-reduces of
 * `floats` after 2 of warm-up: the bus bandwidth in bytes per second, or
 * -1 after printing why.
 */
static double preduce(struct hh *h, size_t floats, int steps, int warmup,
                      const char *const *extra)
{
    char mw[64];
    snprintf(mw, sizeof(mw), "scheduler.min_workers=%d", h->nhosts);
    const char *sets[8] = {"scheduler.policy=allreduce", mw};
    for (int i = 0; extra && extra[i] && i < 5; i++)
        sets[2 + i] = extra[i];
    if (hh_start(h, sets, extra) < 0) {
        fprintf(stderr, "bench_hosts: daemons did not start\n");
        return -1;
    }
    pid_t pids[H_MAX_NODES];
    char names[H_MAX_NODES][16];
    for (int i = 0; i < h->nhosts; i++) {
        snprintf(names[i], sizeof(names[i]), "b%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = floats,
                                   .nparts = 1,
                                   .steps = steps,
                                   .warmup = warmup,
                                   .no_check = 1,
                                   .timeout_ms = 60000};
        pids[i] = h_trainer_spawn(&h->c, &o);
    }
    double worst = 0;
    for (int i = 0; i < h->nhosts; i++) {
        long n, errors;
        double secs;
        if (h_wait(pids[i], 120000) != 0 ||
            h_trainer_figures(&h->c, names[i], &n, &secs, &errors) < 0 ||
            n != steps || errors) {
            fprintf(stderr, "bench_hosts: trainer %s failed\n", names[i]);
            h_log_dump(&h->c, names[i]);
            h_log_dump(&h->c, "node0");
            h_log_dump(&h->c, "node1");
            hh_stop(h);
            return -1;
        }
        if (secs > worst)
            worst = secs;
    }
    if (hh_stop(h))
        return -1;
    double per = worst / steps;
    double ring = 2.0 * (h->nhosts - 1) / h->nhosts;
    return ring * (double)floats * sizeof(float) / per;
}

/* 2 capped hosts, one key: the all-reduce sealed against in clear. */
static int seal_main(int argc, char **argv)
{
    int mbit = argc > 2 ? atoi(argv[2]) : 1000;
    double mib = argc > 3 ? atof(argv[3]) : 16;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (mbit <= 0 || mib <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_hosts seal [RATE_MBIT [MIB [ROUNDS<=%d]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    char key[] = "/tmp/preduce-bench-key-XXXXXX", set[80];
    int fd = mkstemp(key); /* mode 0600 */
    if (fd < 0 || write(fd, "bench_hosts seal: the cluster key", 33) != 33) {
        perror("bench_hosts: key file");
        return 1;
    }
    close(fd);
    snprintf(set, sizeof(set), "security.key_file=%s", key);
    size_t floats = (size_t)(mib * 262144);
    double cap = mbit * 1e6 / 8;
    int steps = (int)(6.0 * cap / ((double)floats * sizeof(float)));
    steps = steps < 4 ? 4 : steps;
    double on[MAX_ROUNDS], off[MAX_ROUNDS], ratio[MAX_ROUNDS];
    int rc = 0;
    for (int r = 0; r < rounds && rc == 0; r++) {
        struct hh h;
        if (hh_up(&h, 2) < 0 || hh_net(&h, "cap 0 %dmbit", mbit) < 0 ||
            hh_net(&h, "cap 1 %dmbit", mbit) < 0) {
            rc = 1;
            break;
        }
        for (int k = 0; k < 2 && rc == 0; k++) {
            int enc = (k + r) % 2; /* alternate which goes first */
            const char *extra[] = {
                set, enc ? "security.encrypt=on" : "security.encrypt=off",
                "transport.type=tcp", NULL};
            double bus = preduce(&h, floats, steps, 2, extra);
            if (bus < 0)
                rc = 1;
            *(enc ? &on[r] : &off[r]) = bus;
        }
        hh_down(&h);
        if (rc)
            break;
        ratio[r] = on[r] / off[r];
        printf("round %d: all-reduce bus %.2f MB/s encrypted, %.2f MB/s in "
               "clear: %.3fx; cap %.2f MB/s\n",
               r + 1, on[r] / 1e6, off[r] / 1e6, ratio[r], cap / 1e6);
        fflush(stdout);
    }
    unlink(key);
    if (rc)
        return rc;
    const char *out = getenv("BENCH_SEAL_OUT");
    out = out ? out : "build/bench-hosts-seal.txt";
    FILE *f = fopen(out, "w");
    double lo, hi, m;
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        fprintf(o,
                "encrypted against clear links, 2 hosts capped at %d Mbit/s "
                "each way, %.0f MiB all-reduce, %d rounds (medians "
                "[min-max]):\n",
                mbit, mib, rounds);
        m = median(off, rounds, &lo, &hi);
        fprintf(o, "  clear (anchor)  bus %8.2f MB/s [%.2f-%.2f]\n", m / 1e6,
                lo / 1e6, hi / 1e6);
        m = median(on, rounds, &lo, &hi);
        fprintf(o, "  encrypted       bus %8.2f MB/s [%.2f-%.2f]\n", m / 1e6,
                lo / 1e6, hi / 1e6);
        m = median(ratio, rounds, &lo, &hi);
        fprintf(o, "  encrypted / clear   %8.3fx     [%.3f-%.3f]\n", m, lo, hi);
    }
    if (f)
        fclose(f);
    return 0;
}

/* 2 hosts: the all-reduce in bf16 and int8 against fp32. */
static int wire_main(int argc, char **argv)
{
    int mbit = argc > 2 ? atoi(argv[2]) : 500;
    double mib = argc > 3 ? atof(argv[3]) : 16;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (mbit < 0 || mib <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_hosts wire [RATE_MBIT [MIB [ROUNDS<=%d]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    static const char *const wire[3] = {"fp32", "bf16", "int8"};
    size_t floats = (size_t)(mib * 262144);
    double cap = mbit * 1e6 / 8;
    /* About 6 s of fp32 at the cap; uncapped, as if at 4 Gbit/s. */
    double rate = mbit ? cap : 4e9 / 8;
    int steps = (int)(6.0 * rate / ((double)floats * sizeof(float)));
    steps = steps < 4 ? 4 : steps;
    double bus[3][MAX_ROUNDS], ratio[3][MAX_ROUNDS];
    int rc = 0;
    for (int r = 0; r < rounds && rc == 0; r++) {
        struct hh h;
        if (hh_up(&h, 2) < 0 ||
            (mbit && (hh_net(&h, "cap 0 %dmbit", mbit) < 0 ||
                      hh_net(&h, "cap 1 %dmbit", mbit) < 0))) {
            rc = 1;
            break;
        }
        for (int j = 0; j < 3 && rc == 0; j++) {
            int k = (j + r) % 3; /* rotate which goes first */
            char set[40];
            snprintf(set, sizeof(set), "transport.wire=%s", wire[k]);
            const char *extra[] = {set, "transport.type=tcp", NULL};
            bus[k][r] = preduce(&h, floats, steps, 2, extra);
            rc = bus[k][r] < 0;
        }
        hh_down(&h);
        if (rc)
            break;
        for (int k = 0; k < 3; k++)
            ratio[k][r] = bus[k][r] / bus[0][r];
        printf("round %d: all-reduce bus %.2f MB/s fp32, %.2f bf16 (%.3fx), "
               "%.2f int8 (%.3fx)\n",
               r + 1, bus[0][r] / 1e6, bus[1][r] / 1e6, ratio[1][r],
               bus[2][r] / 1e6, ratio[2][r]);
        fflush(stdout);
    }
    if (rc)
        return rc;
    const char *out = getenv("BENCH_WIRE_OUT");
    out = out ? out : "build/bench-hosts-wire.txt";
    FILE *f = fopen(out, "w");
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        if (mbit)
            fprintf(o, "wire encodings, 2 hosts capped at %d Mbit/s each way",
                    mbit);
        else
            fprintf(o, "wire encodings, 2 hosts on an uncapped veth pair");
        fprintf(o,
                ", %.0f MiB all-reduce, %d rounds (bus bandwidth of the "
                "float32 model; medians [min-max]):\n",
                mib, rounds);
        for (int k = 0; k < 3; k++) {
            double lo, hi, m = median(bus[k], rounds, &lo, &hi);
            fprintf(o, "  %s%s bus %8.2f MB/s [%.2f-%.2f]", wire[k],
                    k ? "         " : " (anchor)", m / 1e6, lo / 1e6, hi / 1e6);
            if (k) {
                m = median(ratio[k], rounds, &lo, &hi);
                fprintf(o, "  %.3fx [%.3f-%.3f]", m, lo, hi);
            }
            fprintf(o, "\n");
        }
    }
    if (f) {
        fclose(f);
        printf("written to %s\n", out);
    }
    return 0;
}

/* Two racks joined by a capped trunk: ring_order id against measured. */
static int ring_main(int argc, char **argv)
{
    int mbit = argc > 2 ? atoi(argv[2]) : 40;
    double mib = argc > 3 ? atof(argv[3]) : 1;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (mbit <= 0 || mib <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_hosts ring [TRUNK_MBIT [MIB [ROUNDS<=%d]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    const char *out = getenv("BENCH_RING_OUT");
    out = out ? out : "build/bench-hosts-ring.txt";
    size_t floats = (size_t)(mib * 262144);
    double trunk = mbit * 1e6 / 8;
    static const char *const mode[2] = {"id", "measured"};
    double bus[2][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < 2; j++) {
            int k = r % 2 ? 1 - j : j; /* alternate which goes first */
            char order[64];
            snprintf(order, sizeof(order), "scheduler.ring_order=%s", mode[k]);
            const char *const extra[] = {order, "scheduler.heartbeat_ms=100",
                                         NULL};
            struct hh h;
            if (hh_up(&h, 4) < 0 || hh_net(&h, "trunk %dmbit 0 1 0 1", mbit))
                return 1;
            /* About 4 s of the worst order's time for the timed steps. */
            int steps = (int)(4.0 * trunk / (3.0 * floats * sizeof(float)));
            steps = steps < 5 ? 5 : steps;
            bus[k][r] = preduce(&h, floats, steps, 12, extra);
            hh_down(&h);
            printf("round %d, ring_order %s: all-reduce bus %.2f MB/s "
                   "(trunk %.2f MB/s each way)\n",
                   r + 1, mode[k], bus[k][r] / 1e6, trunk / 1e6);
            fflush(stdout);
            if (bus[k][r] < 0)
                return 1;
        }
    }
    FILE *f = fopen(out, "w");
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        fprintf(o,
                "ring order: 4 hosts in two racks (hosts 0, 2 | 1, 3) "
                "joined by one trunk at %d Mbit/s (%.2f MB/s) each way, "
                "%.1f MiB model, allreduce, %d rounds: median (min-max)\n",
                mbit, trunk / 1e6, mib, rounds);
        double v[MAX_ROUNDS], lo, hi, m;
        for (int k = 0; k < 2; k++) {
            m = median(bus[k], rounds, &lo, &hi);
            fprintf(o, "ring_order %-8s bus %.2f (%.2f-%.2f) MB/s\n", mode[k],
                    m / 1e6, lo / 1e6, hi / 1e6);
        }
        for (int r = 0; r < rounds; r++)
            v[r] = bus[1][r] / bus[0][r];
        m = median(v, rounds, &lo, &hi);
        fprintf(o, "measured / id: %.2fx (%.2f-%.2f)\n", m, lo, hi);
    }
    if (f) {
        fclose(f);
        printf("written to %s\n", out);
    }
    return 0;
}

/*
 * Streams per peer pair over a long path: node 1's link to node 0 and
 * iperf3 from host 1 to host 0 each through a relay of DELAY_MS and
 * WINDOW_KB per connection on host 0, both hosts capped at RATE_MBIT.
 */
static int streams_main(int argc, char **argv)
{
    int delay_ms = argc > 2 ? atoi(argv[2]) : 20;
    int window_kb = argc > 3 ? atoi(argv[3]) : 256;
    int mbit = argc > 4 ? atoi(argv[4]) : 200;
    double mib = argc > 5 ? atof(argv[5]) : 16;
    int rounds = argc > 6 ? atoi(argv[6]) : 3;
    if (delay_ms <= 0 || window_kb <= 0 || mbit <= 0 || mib <= 0 ||
        rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr,
                "usage: bench_hosts streams [DELAY_MS [WINDOW_KB [RATE_MBIT "
                "[MIB [ROUNDS<=%d]]]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    const char *out = getenv("BENCH_STREAMS_OUT");
    out = out ? out : "build/bench-hosts-streams.txt";
    size_t floats = (size_t)(mib * 262144);
    double cap = mbit * 1e6 / 8;
    double per_stream = window_kb * 1024.0 / (delay_ms / 1e3); /* bytes/s */
    enum { NS = 3 };
    static const int counts[NS] = {1, 2, 4};
    double bus[NS][MAX_ROUNDS], ip[NS][MAX_ROUNDS], bi[NS][MAX_ROUNDS];
    /*
     * Each step moves the model each way between the 2 nodes: about 3 s
     * of steps for one stream, the slowest.
     */
    double one = per_stream < cap ? per_stream : cap;
    int steps = (int)(3.0 * one / ((double)floats * sizeof(float)));
    steps = steps < 3 ? 3 : steps;
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < NS; j++) {
            /* Alternate the order of the counts, and of the two tools. */
            int k = r % 2 ? NS - 1 - j : j, n = counts[k];
            struct hh h;
            if (hh_up(&h, 2) < 0)
                return 1;
            for (int i = 0; i < 2; i++)
                if (hh_net(&h, "cap %d %dmbit", i, mbit) < 0)
                    return 1;
            int rk = hh_route(&h, 0, delay_ms, window_kb);
            int ik = hh_relay_add(&h, 0, HH_RELAY_PORT + 1, 5201, delay_ms,
                                  window_kb);
            if (rk < 0 || ik < 0 || hh_relay_start(&h, ik) < 0 ||
                iperf_server(&h, 0, 0) < 0)
                return 1;
            char sv[64];
            snprintf(sv, sizeof(sv), "transport.streams=%d", n);
            const char *const extra[] = {sv, NULL};
            if (r % 2 == 0) {
                ip[k][r] = iperf_client(&h, 0, 1, HH_RELAY_PORT + 1, n, 0) / 8;
                bi[k][r] = iperf_client(&h, 0, 1, HH_RELAY_PORT + 1, n, 1) / 8;
            }
            bus[k][r] = preduce(&h, floats, steps, 2, extra);
            if (r % 2 == 1) {
                ip[k][r] = iperf_client(&h, 0, 1, HH_RELAY_PORT + 1, n, 0) / 8;
                bi[k][r] = iperf_client(&h, 0, 1, HH_RELAY_PORT + 1, n, 1) / 8;
            }
            hh_down(&h);
            printf("round %d, streams %d: all-reduce bus %.2f MB/s, iperf3 "
                   "-P %d %.2f MB/s one way, %.2f MB/s each way both at once "
                   "(per-stream bound %.2f MB/s, cap %.2f MB/s)\n",
                   r + 1, n, bus[k][r] / 1e6, n, ip[k][r] / 1e6, bi[k][r] / 1e6,
                   per_stream / 1e6, cap / 1e6);
            fflush(stdout);
            if (bus[k][r] < 0 || ip[k][r] < 0 || bi[k][r] < 0)
                return 1;
        }
    }
    FILE *f = fopen(out, "w");
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        fprintf(o,
                "streams per peer pair: 2 hosts, the link through a relay of "
                "%d ms and %d KiB per connection (at most %.2f MB/s a "
                "stream), capped at %d Mbit/s (%.2f MB/s) each way, %.1f MiB "
                "model, allreduce, %d steps, %d rounds: median (min-max)\n",
                delay_ms, window_kb, per_stream / 1e6, mbit, cap / 1e6, mib,
                steps, rounds);
        fprintf(o, "%-7s %-21s %-21s %-21s %-19s %-19s %s\n", "streams",
                "bus MB/s", "iperf3 -P N MB/s", "iperf3 bidir MB/s",
                "bus/iperf3", "bus/iperf3 bidir", "bus/cap");
        for (int k = 0; k < NS; k++) {
            const double *cols[3] = {bus[k], ip[k], bi[k]};
            char cell[6][64];
            for (int c = 0; c < 3; c++) {
                double lo, hi, m = median(cols[c], rounds, &lo, &hi);
                snprintf(cell[c], sizeof(cell[c]), "%.2f (%.2f-%.2f)", m / 1e6,
                         lo / 1e6, hi / 1e6);
            }
            for (int c = 0; c < 3; c++) {
                double v[MAX_ROUNDS], lo, hi;
                for (int r = 0; r < rounds; r++)
                    v[r] = bus[k][r] / (c == 2 ? cap : cols[c + 1][r]);
                double m = median(v, rounds, &lo, &hi);
                snprintf(cell[3 + c], sizeof(cell[3 + c]), "%.3f (%.3f-%.3f)",
                         m, lo, hi);
            }
            fprintf(o, "%-7d %-21s %-21s %-21s %-19s %-19s %s\n", counts[k],
                    cell[0], cell[1], cell[2], cell[3], cell[4], cell[5]);
        }
        double v[MAX_ROUNDS], lo, hi, m;
        for (int r = 0; r < rounds; r++)
            v[r] = bus[NS - 1][r] / bus[0][r];
        m = median(v, rounds, &lo, &hi);
        fprintf(o, "streams=4 / streams=1: %.2fx (%.2f-%.2f)", m, lo, hi);
        for (int r = 0; r < rounds; r++)
            v[r] = ip[NS - 1][r] / ip[0][r];
        m = median(v, rounds, &lo, &hi);
        fprintf(o, "; iperf3 -P 4 / -P 1: %.2fx (%.2f-%.2f)", m, lo, hi);
        for (int r = 0; r < rounds; r++)
            v[r] = bi[NS - 1][r] / bi[0][r];
        m = median(v, rounds, &lo, &hi);
        fprintf(o, ", both ways at once %.2fx (%.2f-%.2f)\n", m, lo, hi);
    }
    if (f) {
        fclose(f);
        printf("written to %s\n", out);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "ring") || !strcmp(argv[1], "streams") ||
                     !strcmp(argv[1], "seal") || !strcmp(argv[1], "wire"))) {
        if (access("/run/netns", F_OK) != 0 && geteuid() != 0) {
            printf("bench-hosts %s: SKIPPED: network namespaces need "
                   "root\n",
                   argv[1]);
            return 0;
        }
        if (!strcmp(argv[1], "seal"))
            return seal_main(argc, argv);
        if (!strcmp(argv[1], "wire"))
            return wire_main(argc, argv);
        return argv[1][0] == 'r' ? ring_main(argc, argv)
                                 : streams_main(argc, argv);
    }
    int mbit = argc > 1 ? atoi(argv[1]) : 100;
    double mib = argc > 2 ? atof(argv[2]) : 4;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    if (mbit <= 0 || mib <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_hosts [RATE_MBIT [MIB [ROUNDS<=%d]]]\n",
                MAX_ROUNDS);
        return 2;
    }
    if (access("/run/netns", F_OK) != 0 && geteuid() != 0) {
        printf("bench-hosts: SKIPPED: network namespaces need root\n");
        return 0;
    }
    const char *out = getenv("BENCH_HOSTS_OUT");
    out = out ? out : "build/bench-hosts.txt";
    size_t floats = (size_t)(mib * 262144);
    double cap = mbit * 1e6 / 8; /* bytes/s */
    static const int hosts[] = {2, 4};
    double bus[2][MAX_ROUNDS], ip[2][MAX_ROUNDS], bi[2][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            struct hh h;
            if (hh_up(&h, hosts[k]) < 0)
                return 1;
            for (int i = 0; i < hosts[k]; i++)
                if (hh_net(&h, "cap %d %dmbit", i, mbit) < 0)
                    return 1;
            double ring = 2.0 * (hosts[k] - 1) / hosts[k];
            int steps = (int)(4.0 * cap / (ring * floats * sizeof(float)));
            steps = steps < 3 ? 3 : steps;
            /* Alternate which goes first, round by round. */
            if (r % 2 == 0) {
                ip[k][r] = iperf(&h, 0) / 8;
                bi[k][r] = iperf(&h, 1) / 8;
            }
            bus[k][r] = preduce(&h, floats, steps, 2, NULL);
            if (r % 2 == 1) {
                ip[k][r] = iperf(&h, 0) / 8;
                bi[k][r] = iperf(&h, 1) / 8;
            }
            hh_down(&h);
            printf("round %d, %d hosts: all-reduce bus %.2f MB/s, iperf3 "
                   "%.2f MB/s one way, %.2f MB/s each way both at once, cap "
                   "%.2f MB/s\n",
                   r + 1, hosts[k], bus[k][r] / 1e6, ip[k][r] / 1e6,
                   bi[k][r] / 1e6, cap / 1e6);
            fflush(stdout);
            if (bus[k][r] < 0 || ip[k][r] < 0 || bi[k][r] < 0)
                return 1;
        }
    }
    FILE *f = fopen(out, "w");
    for (int pass = 0; pass < 2; pass++) {
        FILE *o = pass ? f : stdout;
        if (!o)
            continue;
        fprintf(o,
                "all-reduce across hosts, links capped at %d Mbit/s "
                "(%.2f MB/s) each way, %.1f MiB model, %d rounds: median "
                "(min-max)\n",
                mbit, cap / 1e6, mib, rounds);
        fprintf(o, "%-5s %-21s %-21s %-21s %-19s %-19s %s\n", "hosts",
                "bus MB/s", "iperf3 MB/s", "iperf3 bidir MB/s", "bus/cap",
                "bus/iperf3", "bus/iperf3 bidir");
        for (int k = 0; k < 2; k++) {
            const double *cols[3] = {bus[k], ip[k], bi[k]};
            char cell[6][64];
            for (int c = 0; c < 3; c++) {
                double lo, hi, m = median(cols[c], rounds, &lo, &hi);
                snprintf(cell[c], sizeof(cell[c]), "%.2f (%.2f-%.2f)", m / 1e6,
                         lo / 1e6, hi / 1e6);
            }
            for (int c = 0; c < 3; c++) {
                double v[MAX_ROUNDS], lo, hi;
                for (int r = 0; r < rounds; r++)
                    v[r] = bus[k][r] / (c == 0 ? cap : cols[c][r]);
                double m = median(v, rounds, &lo, &hi);
                snprintf(cell[3 + c], sizeof(cell[3 + c]), "%.3f (%.3f-%.3f)",
                         m, lo, hi);
            }
            fprintf(o, "%-5d %-21s %-21s %-21s %-19s %-19s %s\n", hosts[k],
                    cell[0], cell[1], cell[2], cell[3], cell[4], cell[5]);
        }
    }
    if (f) {
        fclose(f);
        printf("written to %s\n", out);
    }
    return 0;
}
