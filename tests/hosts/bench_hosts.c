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
 * iperf3 from host 0 to host 1 for 3 s: received bits per second, or -1.
 * bidir: both ways at once (a ring node sends and receives at once), the
 * mean of the two ways.
 */
static double iperf(const struct hh *h, int bidir)
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
                 "ip netns exec %s-h0 timeout 20 iperf3 -J -t 3 %s -c "
                 "10.77.0.2 2>/dev/null | python3 -c 'import json,sys; "
                 "e = json.load(sys.stdin)[\"end\"]; "
                 "v = [e[k][\"bits_per_second\"] for k in "
                 "(\"sum_received\", \"sum_received_bidir_reverse\") "
                 "if k in e]; print(sum(v) / len(v))' 2>/dev/null",
                 h->prefix, bidir ? "--bidir" : "");
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
            bus[k][r] = preduce(&h, floats, steps);
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
