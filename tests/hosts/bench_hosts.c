/*
 * make bench-hosts: the all-reduce's bus bandwidth across 2 and 4 hosts
 * (network namespaces on a bridge, tests/hosts/hosts.h), every host's link
 * capped at the same rate each way (tbf), one trainer per host, policy
 * allreduce. Bus bandwidth: the bytes a node sends per all-reduce in a
 * ring of H, 2 (H - 1) / H of the model, over the time of one all-reduce;
 * the ring's bound is the cap itself. Next to it, in the same topology and
 * round, iperf3 over the same link (host 0 to host 1): what one TCP stream
 * gets through that cap. Rounds alternate the two; medians and ranges are
 * printed and written to a file. Figures, never a pass or fail.
 *
 *   bench_hosts [RATE_MBIT [MIB [ROUNDS]]]      (100 4 3)
 *
 * The table goes to $BENCH_HOSTS_OUT (build/bench-hosts.txt).
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

/* iperf3 from host 0 to host 1 for 3 s: received bits per second, or -1. */
static double iperf(const struct hh *h)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "ip netns exec %s-h1 timeout 20 iperf3 -s -1 -B 10.77.0.2 "
             ">/dev/null 2>&1 &",
             h->prefix);
    if (system(cmd) != 0)
        return -1;
    double bps = -1;
    for (int tries = 0; tries < 20 && bps < 0; tries++) {
        usleep(200000);
        snprintf(cmd, sizeof(cmd),
                 "ip netns exec %s-h0 timeout 20 iperf3 -J -t 3 -c 10.77.0.2 "
                 "2>/dev/null | python3 -c 'import json,sys; "
                 "print(json.load(sys.stdin)[\"end\"][\"sum_received\"]"
                 "[\"bits_per_second\"])' 2>/dev/null",
                 h->prefix);
        FILE *f = popen(cmd, "r");
        if (!f)
            break;
        if (fscanf(f, "%lf", &bps) != 1)
            bps = -1;
        pclose(f);
    }
    return bps;
}

/*
 * One run of `hosts` trainers, one per host, `steps` all-reduces of
 * `floats` after 2 of warm-up: the bus bandwidth in bytes per second, or
 * -1 after printing why.
 */
static double preduce(struct hh *h, size_t floats, int steps)
{
    char mw[64];
    snprintf(mw, sizeof(mw), "scheduler.min_workers=%d", h->nhosts);
    const char *const sets[] = {"scheduler.policy=allreduce", mw, NULL};
    if (hh_start(h, sets, NULL) < 0) {
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
                                   .warmup = 2,
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
            return -1;
        }
        if (secs > worst)
            worst = secs;
    }
    int bad = h_cluster_stop(&h->c);
    memset(&h->c, 0, sizeof(h->c));
    if (bad)
        return -1;
    double per = worst / steps;
    double ring = 2.0 * (h->nhosts - 1) / h->nhosts;
    return ring * (double)floats * sizeof(float) / per;
}

int main(int argc, char **argv)
{
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
    double bus[2][MAX_ROUNDS], ip[2][MAX_ROUNDS];
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
            if (r % 2 == 0)
                ip[k][r] = iperf(&h) / 8;
            bus[k][r] = preduce(&h, floats, steps);
            if (r % 2 == 1)
                ip[k][r] = iperf(&h) / 8;
            hh_down(&h);
            printf("round %d, %d hosts: all-reduce bus %.2f MB/s, iperf3 "
                   "%.2f MB/s, cap %.2f MB/s\n",
                   r + 1, hosts[k], bus[k][r] / 1e6, ip[k][r] / 1e6, cap / 1e6);
            fflush(stdout);
            if (bus[k][r] < 0 || ip[k][r] < 0)
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
        fprintf(o, "%-6s %-24s %-24s %-18s %s\n", "hosts", "bus MB/s",
                "iperf3 MB/s", "bus/cap", "bus/iperf3");
        for (int k = 0; k < 2; k++) {
            double lo, hi, lo2, hi2, rc[MAX_ROUNDS], ri[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++) {
                rc[r] = bus[k][r] / cap;
                ri[r] = bus[k][r] / ip[k][r];
            }
            double b = median(bus[k], rounds, &lo, &hi);
            double i = median(ip[k], rounds, &lo2, &hi2);
            char c1[64], c2[64];
            snprintf(c1, sizeof(c1), "%.2f (%.2f-%.2f)", b / 1e6, lo / 1e6,
                     hi / 1e6);
            snprintf(c2, sizeof(c2), "%.2f (%.2f-%.2f)", i / 1e6, lo2 / 1e6,
                     hi2 / 1e6);
            double mc = median(rc, rounds, &lo, &hi);
            double mi = median(ri, rounds, &lo2, &hi2);
            fprintf(o, "%-6d %-24s %-24s %.3f (%.3f-%.3f) %.3f (%.3f-%.3f)\n",
                    hosts[k], c1, c2, mc, lo, hi, mi, lo2, hi2);
        }
    }
    if (f) {
        fclose(f);
        printf("written to %s\n", out);
    }
    return 0;
}
