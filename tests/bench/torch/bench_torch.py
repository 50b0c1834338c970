#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""make bench-torch: the same PyTorch job, 4 workers (2 node daemons x 2
trainers), under torch.distributed with gloo and under preduce's policies,
side by side, on the same data, model and heterogeneity profile. Two
workloads:
- transformer (client/examples/torch_lm.py): a small decoder-only
  character language model trained with AdamW on the licence texts of
  base-files; the anchor is DistributedDataParallel over gloo; the target
  is a validation loss;
- mlp (client/examples/torch_train.py): an MLP on scikit-learn's digits
  with SGD and momentum; the anchor is DistributedDataParallel over gloo;
  the target is a test accuracy.

For each profile and repeat, every configuration runs once, in turn, for
the same wall time. Printed and written to build/bench-torch/WORKLOAD/
(table.md, results.json, curves.png):
- time until the median worker's replica reaches the target, and until
  every replica does; the steps the median worker took by then;
- the metric (median over the workers) at the end of the time budget;
- each as the median over the repeats with its range, and the ratio of
  the anchor's time to the configuration's (above 1: sooner);
- the metric (median over the workers) at the same step for every
  configuration, the last that every run's median worker evaluated at:
  what a configuration's averages are worth per step, apart from how
  fast its steps are.

The anchor is DDP unless --anchor names another configuration. With
--cap-mbit R the preduce configurations run on two hosts whose links are
capped at R Mbit/s each way (tests/python/netns.py: network namespaces,
tbf; the scheduler beside node 0; the trainers connect through the
nodes' sockets); DDP runs stay on loopback, uncapped. The wire encodings
(transport.wire fp32, bf16, int8) are measured there against fp32
(`make bench-torch-wire`).

    bench_torch.py [--workload transformer|mlp] [--repeats 3]
                   [--seconds S] [--target T] [--quick] [--configs A,B]
                   [--profiles P] [--anchor NAME] [--cap-mbit R]
                   [--link-queue fifo|prio]
"""

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))
from cluster import Cluster, free_port  # noqa: E402
import netns  # noqa: E402

EXAMPLES = os.path.join(TOP, "client", "examples")
PYTHON = "/usr/bin/python3"
WORLD = 4


def pr(*options):
    """PartialReduce keywords as torch_lm.py's --pr-option arguments."""
    return tuple(a for o in options for a in ("--pr-option", o))


DYNAMIC = ("scheduler.policy=dynamic",)
ALLREDUCE = ("scheduler.policy=allreduce", f"scheduler.min_workers={WORLD}")
STALENESS = ("scheduler.weighting=staleness",)


def wire(name):
    """The node settings of wire encoding `name` (preduced.conf(5))."""
    return (f"transport.wire={name}",)


# The configurations `make bench-torch` runs unless --configs names others.
DEFAULT_CONFIGS = {
    "transformer": ["ddp", "allreduce", "dynamic", "dynamic staleness",
                    "dynamic staleness busy_poll_us=0"],
}

# A workload: its trainer, the anchor's backend, the metric it prints,
# whether lower is better, the default target and run length, its
# configurations (name, backend, scheduler settings, trainer arguments[,
# node settings]) and heterogeneity profiles (name, trainer arguments).
WORKLOADS = {
    "transformer": {
        "train": os.path.join(EXAMPLES, "torch_lm.py"),
        "metric": "loss", "lower": True, "target": 2.3, "seconds": 100.0,
        "configs": [
            ("ddp", "ddp", (), ()),
            # PartialReduce's defaults: under allreduce DDP's path
            # (gradient buckets while backward runs); under dynamic a
            # consensus step (models, AdamW's moments and gradients).
            ("allreduce", "preduce", ALLREDUCE, ()),
            ("dynamic", "preduce", DYNAMIC, ()),
            ("dynamic staleness", "preduce", DYNAMIC + STALENESS, ()),
            ("dynamic staleness busy_poll_us=0", "preduce",
             DYNAMIC + STALENESS, (), ("node.busy_poll_us=0",)),
            # The candidates measured against it (docs/algorithm.md 11).
            ("allreduce consensus", "preduce", ALLREDUCE, pr("state=True")),
            ("dynamic gradients only", "preduce", DYNAMIC,
             pr("state=False")),
            ("dynamic model", "preduce", DYNAMIC, pr("average='model'")),
            ("dynamic model+state", "preduce", DYNAMIC,
             pr("average='model'", "state=True")),
            ("dynamic model+overlap", "preduce", DYNAMIC,
             pr("overlap=True")),
            # The wire encodings, against fp32 over a capped link
            # (--cap-mbit, --anchor "dynamic fp32").
            *((f"{policy} {enc}", "preduce", sets, (), wire(enc))
              for policy, sets in (("dynamic", DYNAMIC),
                                   ("allreduce", ALLREDUCE))
              for enc in ("fp32", "bf16", "int8")),
        ],
        "profiles": [
            ("straggler", ("--slow", "3:3", "--slow", "2:1.5",
                           "--stall", "0.01:0.5")),
            ("homogeneous", ()),
        ],
    },
    "mlp": {
        "train": os.path.join(EXAMPLES, "torch_train.py"),
        "metric": "acc", "lower": False, "target": 0.93, "seconds": 12.0,
        "configs": [
            ("ddp", "ddp", (), ()),
            ("preduce allreduce", "preduce", ALLREDUCE, ()),
            ("constant P=2", "preduce",
             ("scheduler.policy=constant", "scheduler.group_size=2"), ()),
            ("dynamic", "preduce", DYNAMIC, ()),
            ("dynamic (adaptive window only)", "preduce",
             ("scheduler.policy=dynamic", "scheduler.window_wait=0"), ()),
            ("dynamic staleness", "preduce",
             ("scheduler.policy=dynamic", "scheduler.weighting=staleness"),
             ()),
            ("dynamic + outer", "preduce", DYNAMIC,
             ("--outer-lr", "0.7", "--outer-momentum", "0.5")),
            ("dynamic + overlap", "preduce", DYNAMIC, ("--overlap",)),
            ("dynamic model", "preduce", DYNAMIC, ("--average", "model")),
        ],
        "profiles": [
            ("one worker 3x slower", ("--slow", "3:3")),
            ("homogeneous", ()),
        ],
    },
}


def run_once(w, cfg, profile, seconds, tmp, cap_mbit=None, queue="fifo"):
    """One run: the workers' JSON lines, by worker. With cap_mbit the
    node daemons are on two hosts capped at that rate, their links'
    queue `queue` (DDP stays on loopback)."""
    name, backend, sched_sets, opts = cfg[:4]
    node_sets = cfg[4] if len(cfg) > 4 else ()
    queue = cfg[5] if len(cfg) > 5 else queue
    cluster = None
    if backend == "preduce" and cap_mbit:
        cluster = netns.CappedCluster(tmp, 2, sched_sets, node_sets,
                                      cap_mbit, queue)
    elif backend == "preduce":
        cluster = Cluster(tmp, 2, sched_sets, node_sets)
    master = f"127.0.0.1:{free_port()}"
    start_at = time.time() + 5.0  # setup (imports, joins) before it
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "client", "python"),
               PREDUCE_LIB=os.environ.get(
                   "PREDUCE_LIB", os.path.join(TOP, "build",
                                               "libpreduce.so.1")))
    procs = []
    for r in range(WORLD):
        args = [PYTHON, w["train"], "--backend", backend, "--world",
                str(WORLD), "--rank", str(r), "--seconds", str(seconds),
                "--start-at", str(start_at), *profile, *opts]
        if backend == "preduce":
            args += ["--socket", cluster.sock[r // 2]]
        else:
            args += ["--master", master]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    lines = {}
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=seconds + 90)
            if p.returncode != 0:
                raise RuntimeError(f"{name}: worker {r} exited "
                                   f"{p.returncode}: {err[-2000:]}")
            lines[r] = [json.loads(x) for x in out.splitlines() if x]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if cluster:
            bad = cluster.stop()
            if bad:
                raise RuntimeError(f"{name}: daemons {bad} did not exit 0")
    return lines


def figures(w, lines, target):
    """Per run: the median worker's and every replica's time to target
    (None if not reached), the median worker's steps by then, the median
    final metric, each worker's mean group size, the curves against time
    and against steps."""
    key, lower = w["metric"], w["lower"]
    reach, steps, final = {}, {}, []
    for r, ls in lines.items():
        evals = [x for x in ls if "t" in x]
        hit = [x for x in evals
               if (x[key] <= target if lower else x[key] >= target)]
        reach[r] = hit[0]["t"] if hit else None
        steps[r] = hit[0]["step"] if hit else None
        final.append(ls[-1][key])
    times = sorted(v if v is not None else math.inf for v in reach.values())
    med = statistics.median(times)
    every = times[-1]
    done = sorted(v for v in steps.values() if v is not None)
    sizes = {r: ls[-1].get("group_size") for r, ls in lines.items()}
    # A worker's own time per step: forward, backward, the optimizer and
    # (preduce) the averaging; and the averaging's part of it.
    per_step = {r: (ls[-1].get("busy_s", 0) / max(1, ls[-1]["steps"]),
                    ls[-1].get("sync_s", 0) / max(1, ls[-1]["steps"]))
                for r, ls in lines.items()}
    return {"median": med if med < math.inf else None,
            "every": every if every < math.inf else None,
            "steps": statistics.median(done) if done else None,
            "final": statistics.median(final), "sizes": sizes,
            "per_step": per_step,
            "curves": {r: [(x["t"], x[key]) for x in ls if "t" in x]
                       for r, ls in lines.items()},
            "evals": {r: [(x["step"], x[key]) for x in ls if "t" in x]
                      for r, ls in lines.items()}}


def med_range(vals, fmt="{:.2f}"):
    ok = [v for v in vals if v is not None]
    if len(ok) < len(vals) or not ok:
        miss = len(vals) - len(ok)
        if not ok:
            return "not reached", None
        return (fmt.format(statistics.median(ok)) + f" ({miss} of "
                f"{len(vals)} not reached)", None)
    m = statistics.median(ok)
    return f"{fmt.format(m)} ({fmt.format(min(ok))}-{fmt.format(max(ok))})", m


def ratio_range(base_runs, runs, key):
    """The anchor's time over this one's, within each repeat (the two ran
    minutes apart, so a repeat's pair shares the machine's state): the
    median and range of those ratios."""
    rs = [b[key] / r[key] for b, r in zip(base_runs, runs)
          if b[key] and r[key]]
    if not rs:
        return "-"
    if len(rs) == 1:
        return f"{rs[0]:.2f}"
    return f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})"


def group_sizes(runs):
    """Each worker's mean group size, the median over the runs ("-" for
    the anchor, whose groups are always everyone)."""
    per = []
    for r in range(WORLD):
        v = [run["sizes"].get(r) for run in runs]
        v = [x for x in v if x is not None]
        per.append(f"{statistics.median(v):.2f}" if v else "-")
    return "-" if all(x == "-" for x in per) else " / ".join(per)


def common_step(runs):
    """The last step at which every run's median worker evaluated (its
    workers' evaluations being every --eval-every steps), or None."""
    last = []
    for run in runs:
        ends = sorted(ev[-1][0] for ev in run["evals"].values() if ev)
        if not ends:
            return None
        last.append(ends[(len(ends) - 1) // 2])
    return min(last) if last else None


def at_step(run, step):
    """The median over the workers of the metric at their last
    evaluation at or before `step` (None if none had one)."""
    vals = []
    for ev in run["evals"].values():
        before = [v for s, v in ev if s <= step]
        if before:
            vals.append(before[-1])
    return statistics.median(vals) if vals else None


# The capped links' queues (--link-queue), as the table names them.
QUEUES = {"fifo": "tbf, one queue", "prio": "htb, low-delay packets first"}


def table(w, results, target, seconds, repeats, anchor, cap_mbit=None,
          queue="fifo"):
    """The Markdown table of every profile: times to target with ranges
    and ratios against `anchor`, the metric at the end and at a common
    step, the group sizes."""
    what = "validation loss" if w["metric"] == "loss" else "test accuracy"
    out = [f"Target {what} {target}, {seconds:g} s per run, {repeats} "
           f"repeats, medians (range); x {anchor}: {anchor}'s time over "
           "this one's in the same repeat (above 1 is sooner); "
           f"{w['metric']} at step K: at the last evaluation step every "
           "run's median worker reached (the value of a step, apart from "
           "its speed)."]
    if cap_mbit:
        out[0] += (f" preduce: 2 hosts (network namespaces), each link "
                   f"capped at {cap_mbit:g} Mbit/s each way ("
                   + (QUEUES[queue] if queue in QUEUES else "; ".join(
                       f"{q}: {QUEUES[q]}" for q in queue.split(",")))
                   + ")")
        if any(c[1] != "preduce" for c in w["configs"]):
            out[0] += "; ddp: loopback, uncapped"
        out[0] += "."
    out.append("")
    for prof, _ in w["profiles"]:
        every = [r for c in w["configs"] for r in results[prof][c[0]]]
        k = common_step(every)
        out += [f"**{prof}**", "",
                "| configuration | median worker to target, s | "
                f"x {anchor} | every replica to target, s | x {anchor} | "
                f"steps to target | {w['metric']} at {seconds:g} s | "
                f"{w['metric']} at step {k} | "
                f"mean group size, w0-w{WORLD - 1} |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        base = results[prof][anchor]
        for name, *_ in w["configs"]:
            runs = results[prof][name]
            f, _ = med_range([r["median"] for r in runs])
            e, _ = med_range([r["every"] for r in runs])
            st, _ = med_range([r["steps"] for r in runs], "{:.0f}")
            a, _ = med_range([r["final"] for r in runs], "{:.3f}")
            ak = "-" if k is None else med_range(
                [at_step(r, k) for r in runs], "{:.3f}")[0]
            out.append(f"| {name} | {f} | {ratio_range(base, runs, 'median')}"
                       f" | {e} | {ratio_range(base, runs, 'every')} | {st} "
                       f"| {a} | {ak} | {group_sizes(runs)} |")
        out.append("")
    return "\n".join(out)


def plot(w, results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    profiles = w["profiles"]
    fig, axes = plt.subplots(1, len(profiles), figsize=(12, 4.5),
                             sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (prof, _) in zip(axes, profiles):
        for name, *_ in w["configs"]:
            run = results[prof][name][0]  # the first repeat
            pts = sorted(p for c in run["curves"].values() for p in c)
            if not pts:
                continue
            # The workers' mean, binned by a second.
            bins = {}
            for t, v in pts:
                bins.setdefault(round(t), []).append(v)
            xs = sorted(bins)
            ax.plot(xs, [statistics.mean(bins[x]) for x in xs], label=name)
        ax.set_title(prof)
        ax.set_xlabel("wall time, s")
        ax.grid(alpha=0.3)
    what = "validation loss" if w["metric"] == "loss" else "test accuracy"
    axes[0].set_ylabel(f"{what} (mean of the {WORLD} replicas)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def pick(w, configs, profiles, anchor):
    """Keeps the named configurations (and the anchor) and profiles."""
    if anchor not in {c[0] for c in w["configs"]}:
        sys.exit(f"bench_torch: no configuration {anchor!r} to be the "
                 f"anchor; known: {[c[0] for c in w['configs']]}")
    if configs and configs != "all":
        want = {anchor, *configs.split(",")}
        bad = want - {c[0] for c in w["configs"]}
        if bad:
            sys.exit(f"bench_torch: no configuration {sorted(bad)}; "
                     f"known: {[c[0] for c in w['configs']]}")
        w["configs"] = [c for c in w["configs"] if c[0] in want]
    if profiles:
        want = set(profiles.split(","))
        bad = want - {p[0] for p in w["profiles"]}
        if bad:
            sys.exit(f"bench_torch: no profile {sorted(bad)}; "
                     f"known: {[p[0] for p in w['profiles']]}")
        w["profiles"] = [p for p in w["profiles"] if p[0] in want]


# ^C, timeout(1)'s SIGTERM, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def interrupted(signum, _frame):
    """Unwinds: run_once's cleanup kills the trainers, stops the daemons
    and deletes the namespaces. Further signals are ignored meanwhile, so
    that a second ^C (or timeout(1) signalling the whole process group)
    does not cut the cleanup short; it is bounded by its own timeouts."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    print(f"bench_torch: {signal.Signals(signum).name}, cleaning up",
          file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=sorted(WORKLOADS),
                   default="transformer")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--quick", action="store_true",
                   help="1 repeat of 8 s: a smoke test of the bench itself")
    p.add_argument("--configs", default="",
                   help="comma-separated configuration names to run "
                   "(default: the workload's main ones; 'all' for every "
                   "one; the anchor always runs)")
    p.add_argument("--profiles", default="",
                   help="comma-separated profile names (default: all)")
    p.add_argument("--anchor", default=None,
                   help="the configuration the ratios are against "
                   "(default: the workload's first, ddp)")
    p.add_argument("--cap-mbit", type=float, default=None, metavar="R",
                   help="preduce runs on 2 hosts (network namespaces, "
                   "root) whose links are capped at R Mbit/s each way; "
                   "ddp runs stay on loopback")
    p.add_argument("--link-queue", default="fifo",
                   help="with --cap-mbit, the capped links' queue: one "
                   "FIFO of 200 ms (fifo), or low-delay packets (the "
                   "daemons' scheduler and express connections) before "
                   "the others (prio), as pfifo_fast sends them; "
                   "'fifo,prio' runs each configuration on both, in turn "
                   "(named '<configuration> <queue>')")
    p.add_argument("--out", default=os.path.join(TOP, "build",
                                                 "bench-torch"))
    a = p.parse_args(argv)
    w = dict(WORKLOADS[a.workload])
    seconds = a.seconds or w["seconds"]
    target = a.target if a.target is not None else w["target"]
    if a.quick:
        a.repeats, seconds = 1, 8.0
    out = os.path.join(a.out, a.workload)
    os.makedirs(out, exist_ok=True)
    anchor = a.anchor or w["configs"][0][0]
    pick(w, a.configs or ",".join(DEFAULT_CONFIGS.get(a.workload, [])),
         a.profiles, anchor)
    queues = a.link_queue.split(",")
    if not set(queues) <= set(QUEUES) or len(set(queues)) != len(queues):
        sys.exit(f"bench_torch: --link-queue {a.link_queue}: fifo, prio "
                 "or both, comma-separated")
    if len(queues) > 1:
        anchor = f"{anchor} {queues[0]}"
        w["configs"] = [(f"{c[0]} {q}", c[1], c[2], c[3],
                         c[4] if len(c) > 4 else (), q)
                        for c in w["configs"] for q in queues]
    if a.cap_mbit is not None:
        why = netns.unavailable()
        if a.cap_mbit <= 0 or why:
            sys.exit(f"bench_torch: --cap-mbit {a.cap_mbit:g}: "
                     + (why or "a rate above 0"))
    for sig in STOP_SIGNALS:
        signal.signal(sig, interrupted)
    results = {prof: {name: [] for name, *_ in w["configs"]}
               for prof, _ in w["profiles"]}
    for rep in range(a.repeats):
        for prof, popts in w["profiles"]:
            for cfg in w["configs"]:  # in turn: the machine's drift hits all
                with tempfile.TemporaryDirectory(prefix="preduce-bt-") as d:
                    f = figures(w, run_once(w, cfg, popts, seconds, d,
                                            a.cap_mbit, a.link_queue),
                                target)
                results[prof][cfg[0]].append(f)
                print(f"repeat {rep + 1}/{a.repeats}, {prof}, {cfg[0]}: "
                      f"median {f['median']}, every {f['every']}, steps "
                      f"{f['steps']}, final {f['final']:.3f}, group sizes "
                      f"{f['sizes']}, ms per step (busy, averaging) "
                      + ", ".join(f"{b * 1e3:.0f}/{s * 1e3:.0f}" for b, s
                                  in f["per_step"].values()), flush=True)
    md = table(w, results, target, seconds, a.repeats, anchor,
               a.cap_mbit, a.link_queue)
    print(md)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f)
    plot(w, results, os.path.join(out, "curves.png"))
    print(f"written: {out}/table.md, results.json, curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
