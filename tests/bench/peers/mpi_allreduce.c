/* SPDX-License-Identifier: MIT */
/*
 * MPI_Allreduce (sum of float32, then / size: the same mean preduce
 * computes) between the ranks mpirun started, for a few tensor sizes: the
 * anchor tests/bench/peers/peers.sh runs next to bench_allreduce. Prints the
 * bus bandwidth as bench_allreduce defines it for 2 workers: tensor bytes per
 * all-reduce, divided by the time of one all-reduce. Every result is
 * checked against the known mean, so a broken run cannot print a figure.
 *
 *   mpirun -n 2 mpi_allreduce [MiB ...]     (BENCH_RUN_S: seconds per size)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Rank r's input at step s: small integers, so every sum is exact. */
static float input(int rank, long step, size_t i)
{
    return (float)((rank + 1) * 3 + (long)(i % 7) + step % 5);
}

static int check(const float *x, size_t n, int size, long step)
{
    for (size_t i = 0; i < n; i += 4099) {
        double want = 0;
        for (int r = 0; r < size; r++)
            want += input(r, step, i);
        want /= size;
        if (fabs(x[i] - want) > 1e-4 * fabs(want))
            return -1;
    }
    return 0;
}

/* One all-reduce of x (the mean over the ranks), checked. */
static int step_once(float *x, size_t n, int rank, int size, long step)
{
    for (size_t i = 0; i < n; i++)
        x[i] = input(rank, step, i);
    if (MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD) != MPI_SUCCESS)
        return -1;
    float inv = 1.0f / (float)size;
    for (size_t i = 0; i < n; i++)
        x[i] *= inv;
    return check(x, n, size, step);
}

static int bench(double mib, double run_s, int rank, int size)
{
    size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
    float *x = malloc(n * sizeof(float));
    if (!x)
        return -1;
    int bad = 0;
    long step = 0;
    /* Warm-up: connections and buffers, as bench_allreduce's 2 steps. */
    for (; step < 2 && !bad; step++)
        bad = step_once(x, n, rank, size, step) < 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), busy = 0;
    long steps = 0;
    int more = 1;
    while (more && !bad) {
        /* Input and checking are not the all-reduce: time only the call. */
        for (size_t i = 0; i < n; i++)
            x[i] = input(rank, step, i);
        /* Nobody waits in the all-reduce for another's input loop. */
        MPI_Barrier(MPI_COMM_WORLD);
        double a = MPI_Wtime();
        bad = MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD) != MPI_SUCCESS;
        float inv = 1.0f / (float)size;
        for (size_t i = 0; i < n; i++)
            x[i] *= inv;
        busy += MPI_Wtime() - a;
        bad = bad || check(x, n, size, step) < 0;
        step++;
        steps++;
        /* Rank 0 decides when to stop, so every rank runs the same steps. */
        more = MPI_Wtime() - t0 < run_s;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    int any = bad;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any)
        printf("mpi allreduce %d ranks: %6.1f MiB tensor: %5ld ops in %5.2f s, "
               "%7.2f ms/op, bus bandwidth %8.2f MB/s\n",
               size, mib, steps, busy, 1000.0 * busy / (double)steps,
               (double)n * sizeof(float) * (double)steps / busy / 1e6);
    if (rank == 0 && any)
        fprintf(stderr, "mpi_allreduce: %.0f MiB: wrong result\n", mib);
    free(x);
    return any ? -1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 5.0;
    double dflt[] = {1, 16};
    int rc = 0, n = argc < 2 ? 2 : argc - 1;
    for (int i = 0; i < n; i++)
        rc |= bench(argc < 2 ? dflt[i] : atof(argv[i + 1]), run_s, rank, size);
    MPI_Finalize();
    return rc ? 1 : 0;
}
