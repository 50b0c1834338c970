#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""One data-parallel worker training a small decoder-only transformer
language model with AdamW, synchronised by preduce or by PyTorch's
DistributedDataParallel over gloo, for comparing the two.

The model is a character-level GPT (pre-norm blocks, causal
self-attention, tied embeddings) trained on the licence texts that every
Debian system ships in /usr/share/common-licenses (package base-files;
nothing is downloaded). The last tenth of the text is the validation
split. Each worker samples its own training windows (its seed is its
rank) and evaluates its replica on the same fixed validation windows
every --eval-every steps, printing one JSON line per evaluation:
{"t": seconds since the common start, "step", "loss", "worker"}; a last
line {"done": true, ...} has its counters.

    torch_lm.py --backend preduce --socket /run/preduce/preduced.sock \\
        --world 4 --rank 0
    torch_lm.py --backend ddp --master 127.0.0.1:29500 --world 4 --rank 0

Heterogeneity: --slow RANK:FACTOR makes that worker's steps take FACTOR
times as long: before the start it times a few steps of its own compute
(forward and backward, no synchronisation) and then sleeps FACTOR - 1
times that after each step, as a slower device would (leaving the CPU to
the others); --stall P:SECONDS adds a pause of SECONDS to a step with
probability P (a preempted or paging worker).
"""

import argparse
import glob
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS = "/usr/share/common-licenses"


def load_text(path=CORPUS):
    """The corpus as bytes: each licence once (several names are links to
    one file), in name order so every worker reads the same text."""
    seen, parts = set(), []
    for name in sorted(glob.glob(os.path.join(path, "*"))):
        real = os.path.realpath(name)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, "rb") as f:
            parts.append(f.read())
    if not parts:
        raise FileNotFoundError(f"no text under {path} (package base-files)")
    return b"\n".join(parts)


class Corpus:
    """The text as a tensor of token ids, split into training and
    validation parts; the vocabulary is the bytes that occur."""

    def __init__(self, text, ctx):
        vocab = sorted(set(text))
        index = {b: i for i, b in enumerate(vocab)}
        ids = torch.tensor([index[b] for b in text], dtype=torch.long)
        cut = len(ids) * 9 // 10
        self.train, self.val = ids[:cut], ids[cut:]
        self.vocab, self.ctx = len(vocab), ctx

    def batch(self, gen, n, split=None):
        """n random windows (inputs, next-token targets) drawn with gen."""
        data = self.train if split is None else split
        starts = torch.randint(0, len(data) - self.ctx - 1, (n,),
                               generator=gen)
        x = torch.stack([data[s:s + self.ctx] for s in starts])
        y = torch.stack([data[s + 1:s + self.ctx + 1] for s in starts])
        return x, y


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, dim, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                 nn.Linear(4 * dim, dim))
        mask = torch.full((ctx, ctx), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = F.softmax(att + self.mask[:t, :t], dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small decoder-only language model with tied embeddings."""

    def __init__(self, vocab, ctx, dim=64, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(ctx, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, ctx)
                                      for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           y.reshape(-1))


def calibrate(model, corpus, gen, batch, steps=5):
    """The median time of a training step's forward and backward on this
    machine, on the model alone (its gradients are cleared after)."""
    times = []
    for _ in range(steps):
        x, y = corpus.batch(gen, batch)
        t = time.monotonic()
        loss_of(model, x, y).backward()
        times.append(time.monotonic() - t)
    model.zero_grad(set_to_none=True)
    return sorted(times)[len(times) // 2]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("preduce", "ddp"),
                   default="preduce")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--socket", default="/run/preduce/preduced.sock")
    p.add_argument("--master", default="127.0.0.1:29500",
                   help="ddp: host:port of rank 0's rendezvous")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="train for this long after the common start")
    p.add_argument("--start-at", type=float, default=0.0,
                   help="time.time() at which every worker starts")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=20,
                   help="optimizer steps of linear learning-rate warm-up")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--dim", type=int, default=48)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--slow", action="append", default=[],
                   metavar="RANK:FACTOR")
    p.add_argument("--stall", default="", metavar="P:SECONDS")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-windows", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pr-option", action="append", default=[],
                   metavar="NAME=VALUE",
                   help="preduce: a keyword of PartialReduce (repeatable; "
                   "values are Python literals)")
    return p.parse_args(argv)


def pr_options(pairs):
    """--pr-option NAME=VALUE pairs as PartialReduce keywords."""
    import ast
    out = {}
    for s in pairs:
        name, _, value = s.partition("=")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name] = value
    return out


def main(argv):
    a = parse(argv)
    torch.set_num_threads(1)
    corpus = Corpus(load_text(), a.ctx)
    torch.manual_seed(a.seed)  # the same start on every worker
    model = GPT(corpus.vocab, a.ctx, a.dim, layers=a.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr,
                            betas=(0.9, 0.99), weight_decay=a.weight_decay)
    factor = 1.0
    for s in a.slow:
        r, f = s.split(":")
        if int(r) == a.rank:
            factor = float(f)
    stall_p, stall_s = ((float(v) for v in a.stall.split(":"))
                        if a.stall else (0.0, 0.0))
    rng = random.Random(a.seed * 1000 + a.rank)
    gen = torch.Generator().manual_seed(a.seed * 1000 + a.rank)
    vgen = torch.Generator().manual_seed(12345)
    xv, yv = corpus.batch(vgen, a.eval_windows, corpus.val)
    # Before DDP or PartialReduce hook the gradients: a backward pass
    # that no step follows must not reach them.
    compute_s = calibrate(model, corpus, gen, a.batch) if factor > 1 else 0

    if a.backend == "ddp":
        import torch.distributed as dist
        host, port = a.master.rsplit(":", 1)
        dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                                rank=a.rank, world_size=a.world)
        net = nn.parallel.DistributedDataParallel(model)
        flag = torch.zeros(1)

        def finish_step(done):
            # Every worker stops at the same step: one small all-reduce
            # says whether any worker's time is up.
            flag.fill_(1.0 if done else 0.0)
            dist.all_reduce(flag)
            return flag.item() > 0
        step_fn, pr = opt.step, None
    else:
        import preduce
        import preduce.torch
        net = model
        client = preduce.Client(a.socket, f"w{a.rank}", timeout_ms=20000)
        pr = preduce.torch.PartialReduce(model, opt, client,
                                         timeout_ms=10000,
                                         **pr_options(a.pr_option))
        finish_step = None
        step_fn = pr.step

    def evaluate():
        model.eval()
        with torch.no_grad():
            v = loss_of(model, xv, yv).item()
        model.train()
        return v

    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    t0 = time.monotonic()
    step, stop = 0, False
    busy = 0.0  # forward, backward and the step, the averaging included
    while not stop:
        c0 = time.monotonic()
        for g in opt.param_groups:
            g["lr"] = a.lr * min(1.0, (step + 1) / a.warmup)
        x, y = corpus.batch(gen, a.batch)
        opt.zero_grad()
        loss_of(net, x, y).backward()
        step_fn()
        busy += time.monotonic() - c0
        pause = compute_s * (factor - 1.0)
        if stall_p and rng.random() < stall_p:
            pause += stall_s
        if pause > 0:
            time.sleep(pause)
        done = time.monotonic() - t0 >= a.seconds
        stop = finish_step(done) if finish_step else done
        step += 1
        if step % a.eval_every == 0 or stop:
            print(json.dumps({"t": round(time.monotonic() - t0, 4),
                              "step": step, "worker": a.rank,
                              "loss": round(evaluate(), 4)}), flush=True)
    last = {"worker": a.rank, "done": True, "steps": step,
            "loss": evaluate(), "busy_s": round(busy, 3)}
    if pr is not None:
        pr.finish()
        last.update(reduces=pr.reduces, failed=pr.failed,
                    group_size=round(pr.mean_group_size, 3),
                    sync_s=round(pr.sync_seconds, 3),
                    consensus=pr.consensus)
        client.close()
    else:
        dist.destroy_process_group()
    print(json.dumps(last), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
