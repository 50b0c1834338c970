#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""One data-parallel worker of a small PyTorch job, synchronised by preduce
or by PyTorch's DistributedDataParallel over gloo, for comparing the two on
one data set.

The model is an MLP on scikit-learn's digits (8x8 images, 10 classes; the
data set ships with python3-sklearn, nothing is downloaded). Each of the
--world workers trains on its own shard of the training set and evaluates
its replica on the whole test set every --eval-every steps, printing one
JSON line per evaluation: {"t": seconds since the common start, "step",
"acc", "worker"}.

    torch_train.py --backend preduce --socket /run/preduce/preduced.sock \\
        --world 4 --rank 0 [--policy-options ...]
    torch_train.py --backend ddp --master 127.0.0.1:29500 --world 4 --rank 0

Heterogeneity (a step's compute is ~1 ms here, so a step also sleeps):
--step-ms (every worker), --slow RANK:FACTOR (that worker's steps take
FACTOR times as long; repeatable), --stall P:SECONDS (with probability P a
step sleeps SECONDS more). With gloo the model is wrapped in
DistributedDataParallel (gradients averaged during backward, what a
PyTorch user runs today); with preduce, preduce.torch.PartialReduce
averages (its default, or --average/--period/--outer-lr/--overlap).
"""

import argparse
import json
import random
import sys
import time

import numpy as np
import torch
from sklearn.datasets import load_digits


def data(world, rank, seed):
    """The worker's training shard and the common test set, as tensors."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    xt, yt = x[:n_test], y[:n_test]
    xs, ys = x[n_test:][rank::world], y[n_test:][rank::world]
    return (torch.from_numpy(xs), torch.from_numpy(ys).long(),
            torch.from_numpy(xt), torch.from_numpy(yt).long())


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("preduce", "ddp"),
                   default="preduce")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--socket", default="/run/preduce/preduced.sock")
    p.add_argument("--master", default="127.0.0.1:29500",
                   help="gloo: host:port of rank 0's rendezvous")
    p.add_argument("--seconds", type=float, default=15.0,
                   help="train for this long after the common start")
    p.add_argument("--start-at", type=float, default=0.0,
                   help="time.time() at which every worker starts")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--slow", action="append", default=[],
                   metavar="RANK:FACTOR")
    p.add_argument("--stall", default="", metavar="P:SECONDS")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--period", type=int, default=1)
    p.add_argument("--average", choices=("model", "gradients"),
                   default=None, help="PartialReduce's average (default: "
                   "its own choice)")
    p.add_argument("--outer-lr", type=float, default=None)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--overlap", action="store_true")
    return p.parse_args(argv)


def main(argv):
    a = parse(argv)
    torch.set_num_threads(1)
    xs, ys, xt, yt = data(a.world, a.rank, a.seed)
    model = make_model(a.seed)  # the same start on every worker
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    factor = 1.0
    for s in a.slow:
        r, f = s.split(":")
        if int(r) == a.rank:
            factor = float(f)
    stall_p, stall_s = (float(v) for v in a.stall.split(":")) \
        if a.stall else (0.0, 0.0)
    rng = random.Random(a.seed * 1000 + a.rank)

    if a.backend == "ddp":
        import torch.distributed as dist
        host, port = a.master.rsplit(":", 1)
        dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                                rank=a.rank, world_size=a.world)
        net = torch.nn.parallel.DistributedDataParallel(model)
        flag = torch.zeros(1)

        def sync(done):
            # Every worker stops at the same step (one that left alone
            # would leave the others waiting in theirs): a small
            # all-reduce says whether any worker's time is up.
            flag.fill_(1.0 if done else 0.0)
            dist.all_reduce(flag)
            return flag.item() > 0
        step_fn = opt.step
    else:
        import preduce
        import preduce.torch
        client = preduce.Client(a.socket, f"w{a.rank}", timeout_ms=20000)
        pr = preduce.torch.PartialReduce(
            model, opt, client, period=a.period, average=a.average,
            outer_lr=a.outer_lr, outer_momentum=a.outer_momentum,
            overlap=a.overlap, timeout_ms=10000)
        sync = None
        step_fn = pr.step
        net = model

    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    t0 = time.monotonic()
    step = 0
    loss_fn = torch.nn.CrossEntropyLoss()
    stop = False
    while not stop:
        i = torch.randint(0, len(xs), (a.batch,))
        opt.zero_grad()
        loss_fn(net(xs[i]), ys[i]).backward()
        pause = a.step_ms * factor / 1000.0
        if stall_p and rng.random() < stall_p:
            pause += stall_s
        time.sleep(pause)
        step_fn()
        done = time.monotonic() - t0 >= a.seconds
        stop = sync(done) if sync else done
        step += 1
        if step % a.eval_every == 0:
            print(json.dumps({"t": round(time.monotonic() - t0, 4),
                              "step": step, "worker": a.rank,
                              "acc": round(accuracy(model, xt, yt), 4)}),
                  flush=True)
    if a.backend == "preduce":
        pr.finish()
        print(json.dumps({"worker": a.rank, "done": True, "steps": step,
                          "reduces": pr.reduces, "failed": pr.failed,
                          "group_size": round(pr.mean_group_size, 3),
                          "acc": accuracy(model, xt, yt)}), flush=True)
        client.close()
    else:
        print(json.dumps({"worker": a.rank, "done": True, "steps": step,
                          "acc": accuracy(model, xt, yt)}), flush=True)
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
