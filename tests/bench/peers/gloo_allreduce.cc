/* SPDX-License-Identifier: MIT */
/*
 * Gloo's pipelined ring all-reduce (AllreduceRingChunked, float32 sum,
 * then / size: the mean preduce computes) between 2 processes over its TCP
 * transport on 127.0.0.1, for a few tensor sizes: the anchor
 * tests/bench/peers.sh runs next to bench_allreduce. Prints the bus
 * bandwidth as bench_allreduce defines it for 2 workers: tensor bytes per
 * all-reduce, divided by the time of one all-reduce. Every result is
 * checked against the known mean, so a broken run cannot print a figure.
 *
 *   gloo_allreduce [MiB ...]      (BENCH_RUN_S: seconds per size)
 */
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

const int kSize = 2;

double now_s()
{
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/* Rank r's input at step s: small integers, so every sum is exact. */
float input(int rank, long step, size_t i)
{
    return (float)((rank + 1) * 3 + (long)(i % 7) + step % 5);
}

bool check(const std::vector<float> &x, long step)
{
    for (size_t i = 0; i < x.size(); i += 4099) {
        double want = 0;
        for (int r = 0; r < kSize; r++)
            want += input(r, step, i);
        want /= kSize;
        if (std::fabs(x[i] - want) > 1e-4 * std::fabs(want))
            return false;
    }
    return true;
}

/* One rank: returns 0, or 1 on a wrong result. */
int run(int rank, const std::string &dir, const std::vector<double> &sizes,
        double run_s)
{
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, kSize);
    ctx->connectFullMesh(store, dev);
    int bad = 0;
    for (double mib : sizes) {
        size_t n = (size_t)(mib * 1024 * 1024 / sizeof(float));
        std::vector<float> x(n);
        std::vector<float *> ptrs{x.data()};
        gloo::AllreduceRingChunked<float> ar(ctx, ptrs, (int)n);
        gloo::BarrierAllToOne barrier(ctx);
        int more = 1;
        gloo::BroadcastOneToAll<int> stop(ctx, {&more}, 1, 0);
        long step = 0, steps = 0;
        double busy = 0, t0 = 0;
        const float inv = 1.0f / kSize;
        for (;; step++) {
            for (size_t i = 0; i < n; i++)
                x[i] = input(rank, step, i);
            /* Nobody waits in the all-reduce for another's input loop. */
            barrier.run();
            double a = now_s();
            ar.run();
            for (size_t i = 0; i < n; i++)
                x[i] *= inv;
            /* Warm-up: connections and buffers, as bench_allreduce's 2. */
            if (step >= 2) {
                busy += now_s() - a;
                steps++;
            } else {
                t0 = now_s();
            }
            bad |= !check(x, step);
            more = step < 2 || now_s() - t0 < run_s;
            stop.run();
            if (!more)
                break;
        }
        if (rank == 0 && !bad)
            std::printf("gloo allreduce %d ranks: %6.1f MiB tensor: %5ld ops "
                        "in %5.2f s, %7.2f ms/op, bus bandwidth %8.2f MB/s\n",
                        kSize, mib, steps, busy, 1000.0 * busy / steps,
                        (double)n * sizeof(float) * steps / busy / 1e6);
        std::fflush(stdout);
    }
    return bad;
}

} // namespace

int main(int argc, char **argv)
{
    double run_s = getenv("BENCH_RUN_S") ? atof(getenv("BENCH_RUN_S")) : 5.0;
    std::vector<double> sizes;
    for (int i = 1; i < argc; i++)
        sizes.push_back(atof(argv[i]));
    if (sizes.empty())
        sizes = {1, 16};
    char dir[] = "/tmp/gloo_allreduce.XXXXXX";
    if (!mkdtemp(dir)) {
        std::perror("mkdtemp");
        return 1;
    }
    pid_t kids[kSize];
    for (int r = 0; r < kSize; r++) {
        kids[r] = fork();
        if (kids[r] == 0) {
            int rc = 1;
            try {
                rc = run(r, dir, sizes, run_s);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "gloo_allreduce rank %d: %s\n", r,
                             e.what());
            }
            if (rc)
                std::fprintf(stderr, "gloo_allreduce rank %d: wrong result\n",
                             r);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0;
    for (int r = 0; r < kSize; r++) {
        int st = 0;
        waitpid(kids[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    std::string rm = std::string("rm -rf ") + dir;
    if (std::system(rm.c_str()) != 0)
        failed = 1;
    return failed;
}
