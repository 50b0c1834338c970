#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch.distributed's all-reduce with Gloo, k processes on this host.

The anchor bench_local runs next to one node daemon with k trainers: the
mean of a float32 tensor (all_reduce of the sum, then a division, as
preduce computes it), timed per call after a warm-up, the result checked.
Rank 0 prints one line in mpi_allreduce's format:

    gloo allreduce K ranks: M MiB tensor: N ops in S s, ...

Usage: gloo_allreduce.py K MIB RUN_S
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, n, run_s, port, out):
    """One rank: warm-up, then timed all-reduces for run_s seconds."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    x = torch.empty(n, dtype=torch.float32)
    want = sum(range(1, world + 1)) / world
    busy, ops = 0.0, 0
    for _ in range(2):
        x.fill_(rank + 1)
        dist.all_reduce(x)
    start = time.monotonic()
    more = torch.ones(1)
    while more.item() > 0:
        x.fill_(rank + 1)
        dist.barrier()
        t = time.monotonic()
        dist.all_reduce(x)
        x.div_(world)
        busy += time.monotonic() - t
        ops += 1
        if abs(x[n // 2].item() - want) > 1e-4 * want:
            out.put("wrong result")
            return
        # Rank 0 decides when to stop, so every rank runs the same steps.
        more.fill_(1 if time.monotonic() - start < run_s else 0)
        dist.broadcast(more, 0)
    if rank == 0:
        mib = n * 4 / 1048576
        out.put(f"gloo allreduce {world} ranks: {mib:6.1f} MiB tensor: "
                f"{ops:5d} ops in {busy:5.2f} s, "
                f"{1000 * busy / ops:7.2f} ms/op")
    dist.destroy_process_group()


def main():
    world, mib = int(sys.argv[1]), float(sys.argv[2])
    run_s = float(sys.argv[3])
    n = max(1, int(mib * 1048576 / 4))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, n, run_s, port, out))
             for r in range(world)]
    for p in procs:
        p.start()
    line = out.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
    print(line, flush=True)
    return 0 if line.startswith("gloo") else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
