/*
 * All-reduce bandwidth of 2 node daemons, 1 trainer each, policy
 * allreduce, for a few tensor sizes. Prints per-node bus bandwidth (for 2
 * nodes, the tensor bytes each node sends per all-reduce, divided by the
 * time of one all-reduce). The transport is whatever the daemons pick
 * (PREDUCE_TEST_NODE_SETS="transport.type=rdma" in the RDMA guest, where
 * tests/rdma/check.sh prints it next to ib_write_bw on the same device).
 *
 *   bench_allreduce [MiB ...]      (default: 1 16)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tests/integration/harness.h"

static int bench(double mib, double run_s)
{
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce", NULL};
    if (h_cluster_start(&c, 2, sets, NULL) < 0) {
        fprintf(stderr, "bench_allreduce: cluster did not start\n");
        return -1;
    }
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    pid_t pids[2];
    const char *names[2] = {"b0", "b1"};
    for (int i = 0; i < 2; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = n,
                                   .run_s = run_s,
                                   .no_check = 1,
                                   .timeout_ms = 120000};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int bad = 0;
    for (int i = 0; i < 2; i++)
        bad |= h_wait(pids[i], (int)(run_s * 1000) + 180000) != 0;
    long steps = 0, errors = 0;
    double secs = 0;
    if (!bad)
        bad = h_trainer_figures(&c, "b0", &steps, &secs, &errors) < 0;
    unsigned long long tcp = 0, rdma = 0;
    h_node_stop(&c, 0);
    h_node_data_bytes(&c, 0, &tcp, &rdma);
    h_cluster_stop(&c);
    if (bad || steps == 0) {
        fprintf(stderr, "bench_allreduce: %.0f MiB run failed\n", mib);
        return -1;
    }
    double bytes = (double)n * sizeof(float);
    printf("allreduce 2 daemons: %6.1f MiB tensor: %5ld ops in %5.2f s, "
           "%7.2f ms/op, bus bandwidth %8.2f MB/s (data over %s)\n",
           mib, steps, secs, 1000.0 * secs / (double)steps,
           bytes * (double)steps / secs / 1e6, rdma > tcp ? "rdma" : "tcp");
    return 0;
}

int main(int argc, char **argv)
{
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 5.0;
    int rc = 0;
    if (argc < 2) {
        rc |= bench(1, run_s);
        rc |= bench(16, run_s);
    }
    for (int i = 1; i < argc; i++)
        rc |= bench(atof(argv[i]), run_s);
    return rc ? 1 : 0;
}
