"""Counting a layer's costs inline against counting them on a worker thread (issue 15, item 5).

``simulate`` may count a mask-reading machine's costs on one worker thread while the main thread
computes the outputs, with BLAS held to one thread fewer meanwhile (``simulate._Costs``; it does
so in mode run only, where it pays). Here two long-lived child processes of this tree (same
environment, same CPU affinity) run the same cells in every mode: one with the worker thread
wherever the machine reads masks (``RunConfig.background`` forced on), one with the costs
counted inline (forced off, BLAS at its own thread count). After one warm-up of every cell
in each child, the parent asks them for one timed ``simulate`` at a time, alternating sides
within each round (and which side goes first from round to round), so load from other
processes falls on both; a cell's figure is the median over rounds of thread / inline (below 1:
the thread pays). On one core,
or with ``OMP_NUM_THREADS=1``, both sides count inline (``parallel.threads``).

Run: ``python bench/bench_costs_thread.py [--rounds 5] [--networks resnet50 vgg16]
[--presets input-reuse-1024 ...] [--modes estimate run]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESETS = {"input-reuse-1024": 0.3, "sparse-pairs-32x32": 0.3, "systolic-32x32-ws": None}
NETWORKS = ("resnet50", "vgg16")
MODES = ("estimate", "run")


def serve(side: str) -> None:
    """The child: build the cells named on stdin's first line, warm each up, then time one
    ``simulate`` per request line ("network preset mode") and answer its seconds. ``side``
    "thread" counts a mask-reading machine's costs on the worker thread, "inline" on the
    main thread."""
    import importlib

    import npusim
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune

    sim = importlib.import_module("npusim.simulate")  # the module, not the function
    sim.RunConfig.background = property(
        lambda cfg: side == "thread" and len(cfg.machines) == 1 and cfg.machines[0].reads_masks)
    spec = json.loads(sys.stdin.readline())
    nets = {}
    for name in spec["networks"]:
        graph, x = zoo.build(name), zoo.input_for(name)
        nets[name] = x, {p: graph if d is None else prune(graph, d)
                         for p, d in PRESETS.items() if p in spec["presets"]}
    for x, graphs in nets.values():
        for preset, g in graphs.items():
            for mode in spec["modes"]:
                npusim.simulate(g, x, preset, mode=mode)  # numba compiles, caches fill
    from npusim.parallel import threads

    print("ready", threads(), flush=True)
    for line in sys.stdin:
        name, preset, mode = line.split()
        x, graphs = nets[name]
        start = time.perf_counter()
        npusim.simulate(graphs[preset], x, preset, mode=mode)
        print(time.perf_counter() - start, flush=True)


def start(side: str, spec: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, __file__, "--serve", side], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(json.dumps(spec) + "\n")
    proc.stdin.flush()
    return proc


def ask(proc: subprocess.Popen, request: str) -> float:
    proc.stdin.write(request + "\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS))
    parser.add_argument("--presets", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--serve", choices=("inline", "thread"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    spec = {"networks": args.networks, "presets": args.presets, "modes": args.modes}
    sides = {side: start(side, spec) for side in ("inline", "thread")}
    for proc in sides.values():
        ready = proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise SystemExit("bench_costs_thread: a child failed while warming up")
    cells = [(n, p, m) for n in args.networks for p in args.presets for m in args.modes]
    times = {c: {"inline": [], "thread": []} for c in cells}
    for r in range(args.rounds):
        for c in cells:
            for side in ("inline", "thread")[:: 1 if r % 2 == 0 else -1]:
                times[c][side].append(ask(sides[side], " ".join(c)))
        print(f"  round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    for proc in sides.values():
        proc.stdin.close()
        proc.wait()
    print(f"\ncosts on the worker thread / counted inline, {len(os.sched_getaffinity(0))} "
          f"core(s), npusim threads {ready[1]}, median of {args.rounds} paired rounds "
          "(below 1: the thread pays)")
    print("| network | preset | mode | inline s | thread s | thread / inline |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (n, p, m), t in times.items():
        ratio = statistics.median(b / a for a, b in zip(t["inline"], t["thread"], strict=True))
        label = p if PRESETS[p] is None else f"{p} ({PRESETS[p]})"
        print(f"| {n} | {label} | {m} | {statistics.median(t['inline']):.3f} | "
              f"{statistics.median(t['thread']):.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
