#!/usr/bin/python3
"""make bench-torch: the same PyTorch job (client/examples/torch_train.py,
an MLP on scikit-learn's digits, 4 workers, 2 node daemons x 2 trainers)
under torch.distributed gloo and under preduce's policies, side by side,
on the same data, model and heterogeneity profile.

For each profile (one worker 3x slower; homogeneous) and repeat, every
configuration runs once, in turn, for the same wall time. Printed and
written to build/bench-torch/ (table.md, results.json, accuracy.png):
- time until the median fast worker's replica reaches the target test
  accuracy, and until every replica does;
- test accuracy (median over the workers) at the end of the time budget;
- each as the median over the repeats with its range, and the ratio of
  gloo's time to the configuration's (above 1: sooner than gloo).

    bench_torch.py [--repeats 3] [--seconds 12] [--target 0.93] [--quick]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))
from cluster import Cluster, free_port  # noqa: E402

TRAIN = os.path.join(TOP, "client", "examples", "torch_train.py")
PYTHON = "/usr/bin/python3"
WORLD = 4
SLOW_RANK = 3

# name, backend, scheduler settings, worker options
CONFIGS = [
    ("gloo", "gloo", (), ()),
    ("preduce allreduce", "preduce",
     ("scheduler.policy=allreduce", f"scheduler.min_workers={WORLD}"), ()),
    ("constant P=2", "preduce",
     ("scheduler.policy=constant", "scheduler.group_size=2"), ()),
    ("dynamic", "preduce", ("scheduler.policy=dynamic",), ()),
    ("dynamic (adaptive window only)", "preduce",
     ("scheduler.policy=dynamic", "scheduler.window_wait=0"), ()),
    ("dynamic staleness", "preduce",
     ("scheduler.policy=dynamic", "scheduler.weighting=staleness"), ()),
    ("dynamic + outer", "preduce", ("scheduler.policy=dynamic",),
     ("--outer-lr", "0.7", "--outer-momentum", "0.5")),
    ("dynamic + overlap", "preduce", ("scheduler.policy=dynamic",),
     ("--overlap",)),
]
PROFILES = [
    ("one worker 3x slower", ("--slow", f"{SLOW_RANK}:3")),
    ("homogeneous", ()),
]


def run_once(cfg, profile, seconds, tmp):
    """One run: the workers' JSON lines, by worker."""
    name, backend, sched_sets, opts = cfg
    cluster = None
    if backend == "preduce":
        cluster = Cluster(tmp, 2, sched_sets)
    master = f"127.0.0.1:{free_port()}"
    start_at = time.time() + 3.0  # setup (imports, joins) before it
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "client", "python"),
               PREDUCE_LIB=os.environ.get(
                   "PREDUCE_LIB", os.path.join(TOP, "build",
                                               "libpreduce.so.1")))
    procs = []
    for r in range(WORLD):
        args = [PYTHON, TRAIN, "--backend", backend, "--world", str(WORLD),
                "--rank", str(r), "--seconds", str(seconds),
                "--start-at", str(start_at), *profile, *opts]
        if backend == "gloo":
            args += ["--master", master]
        else:
            args += ["--socket", cluster.sock[r // 2]]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    lines = {}
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=seconds + 60)
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


def figures(lines, target):
    """Per run: median fast worker's and every replica's time to target
    (None if not reached), median final accuracy, the curves."""
    reach, final = {}, []
    for r, ls in lines.items():
        evals = [x for x in ls if "t" in x]
        hit = [x["t"] for x in evals if x["acc"] >= target]
        reach[r] = hit[0] if hit else None
        final.append(ls[-1]["acc"])
    fast = [reach[r] for r in reach if r != SLOW_RANK]
    fast_t = (statistics.median(fast) if all(v is not None for v in fast)
              else None)
    every = (max(reach.values()) if all(v is not None
                                        for v in reach.values()) else None)
    sizes = {r: ls[-1].get("group_size") for r, ls in lines.items()}
    return {"fast": fast_t, "every": every,
            "final": statistics.median(final), "sizes": sizes,
            "curves": {r: [(x["t"], x["acc"]) for x in ls if "t" in x]
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


def group_sizes(runs):
    """Each worker's mean group size, the median over the runs ("-" for
    gloo, whose groups are always everyone)."""
    per = []
    for r in range(WORLD):
        v = [run["sizes"].get(r) for run in runs]
        v = [x for x in v if x is not None]
        per.append(f"{statistics.median(v):.2f}" if v else "-")
    return "-" if all(x == "-" for x in per) else " / ".join(per)


def table(results, target, seconds, repeats):
    out = [f"Target test accuracy {target}, {seconds:g} s per run, "
           f"{repeats} repeats, medians (range); x gloo: gloo's median "
           "time over this one's (above 1 is sooner).", ""]
    for prof, _ in PROFILES:
        out += [f"**{prof}**", "",
                "| configuration | median fast worker to target, s | x gloo "
                "| every replica to target, s | x gloo | accuracy at "
                f"{seconds:g} s | mean group size, w0-w{WORLD - 1} |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        base = {}
        for name, *_ in CONFIGS:
            runs = results[prof][name]
            f, fm = med_range([r["fast"] for r in runs])
            e, em = med_range([r["every"] for r in runs])
            a, _ = med_range([r["final"] for r in runs], "{:.3f}")
            if name == "gloo":
                base = {"fast": fm, "every": em}
            rf = (f"{base['fast'] / fm:.2f}" if fm and base.get("fast")
                  else "-")
            re_ = (f"{base['every'] / em:.2f}" if em and base.get("every")
                   else "-")
            out.append(f"| {name} | {f} | {rf} | {e} | {re_} | {a} "
                       f"| {group_sizes(runs)} |")
        out.append("")
    return "\n".join(out)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(PROFILES), figsize=(12, 4.5),
                             sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (prof, _) in zip(axes, PROFILES):
        for name, *_ in CONFIGS:
            run = results[prof][name][0]  # the first repeat
            pts = sorted(p for c in run["curves"].values() for p in c)
            if not pts:
                continue
            # The workers' mean accuracy, binned by half a second.
            bins = {}
            for t, acc in pts:
                bins.setdefault(round(t * 2) / 2, []).append(acc)
            xs = sorted(bins)
            ax.plot(xs, [statistics.mean(bins[x]) for x in xs], label=name)
        ax.set_title(prof)
        ax.set_xlabel("wall time, s")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (mean of the 4 replicas)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def pick(configs, profiles):
    """Keeps the named configurations (and gloo) and profiles."""
    if configs:
        want = {"gloo", *configs.split(",")}
        bad = want - {c[0] for c in CONFIGS}
        if bad:
            sys.exit(f"bench_torch: no configuration {sorted(bad)}; "
                     f"known: {[c[0] for c in CONFIGS]}")
        CONFIGS[:] = [c for c in CONFIGS if c[0] in want]
    if profiles:
        want = set(profiles.split(","))
        bad = want - {p[0] for p in PROFILES}
        if bad:
            sys.exit(f"bench_torch: no profile {sorted(bad)}; "
                     f"known: {[p[0] for p in PROFILES]}")
        PROFILES[:] = [p for p in PROFILES if p[0] in want]


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--target", type=float, default=0.93)
    p.add_argument("--quick", action="store_true",
                   help="1 repeat of 4 s: a smoke test of the bench itself")
    p.add_argument("--configs", default="",
                   help="comma-separated configuration names to run "
                   "(default: all; gloo always runs, the anchor)")
    p.add_argument("--profiles", default="",
                   help="comma-separated profile names (default: all)")
    p.add_argument("--out", default=os.path.join(TOP, "build",
                                                 "bench-torch"))
    a = p.parse_args(argv)
    if a.quick:
        a.repeats, a.seconds = 1, 4.0
    os.makedirs(a.out, exist_ok=True)
    pick(a.configs, a.profiles)
    results = {prof: {name: [] for name, *_ in CONFIGS}
               for prof, _ in PROFILES}
    for rep in range(a.repeats):
        for prof, popts in PROFILES:
            for cfg in CONFIGS:  # in turn: the machine's drift hits all
                with tempfile.TemporaryDirectory(prefix="preduce-bt-") as d:
                    f = figures(run_once(cfg, popts, a.seconds, d), a.target)
                results[prof][cfg[0]].append(f)
                print(f"repeat {rep + 1}/{a.repeats}, {prof}, {cfg[0]}: "
                      f"fast {f['fast']}, every {f['every']}, final "
                      f"{f['final']:.3f}, group sizes {f['sizes']}",
                      flush=True)
    md = table(results, a.target, a.seconds, a.repeats)
    print(md)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f)
    plot(results, os.path.join(a.out, "accuracy.png"))
    print(f"written: {a.out}/table.md, results.json, accuracy.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
