"""simulate() on ResNet-50 (224x224, batch 1, float32, systolic) against PyTorch eager inference
of the same network (npusim.torch_ref.to_torch), both timed in this run on this machine.

Target (issue 2): simulate within 3x of PyTorch inference.
Target (issue 12): the memory model (``memory.time_layer`` and ``time_layers``, as
``stats`` prices the layers with them, and the array's description of its folds for it,
``systolic.fold_steps``) at most 10 % of the whole simulate; its share is measured by timing
those calls inside one simulate at the preset's bandwidth (run mode on the systolic presets,
estimate mode on the patent machines). The systolic array's costs follow the shapes and are
kept per arch after a network's first call (``simulate.kept_costs``), so each measured call
starts with none kept: the call a sweep point makes, in which the memory model runs.
Run: python bench/bench_simulate.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

import npusim
from npusim import stats
from npusim.dataflows import systolic
from npusim.frontends import zoo
from npusim.simulate import _shape_costs as kept_costs
from npusim.torch_ref import to_torch

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time, report  # noqa: E402


def memory_share(graph, x, arch: str, mode: str = "run") -> tuple[float, float]:
    """(seconds inside the memory model, seconds of the whole simulate) for one run."""
    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        return wrapper

    saved = stats.time_layer, stats.time_layers, systolic.fold_steps
    stats.time_layer, stats.time_layers, systolic.fold_steps = map(timed, saved)
    try:
        kept_costs.clear()  # the shapes' costs counted again, the memory model with them
        start = time.perf_counter()
        npusim.simulate(graph, x, arch, mode=mode)
        whole = time.perf_counter() - start
    finally:
        stats.time_layer, stats.time_layers, systolic.fold_steps = saved
    return spent[0], whole


def main() -> None:
    graph = zoo.build("resnet50")
    x = zoo.input_for("resnet50")
    module = to_torch(graph).eval()
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        t_torch = best_time(lambda: module(xt))
    t_run = best_time(lambda: npusim.simulate(graph, x, "systolic-32x32-ws"))
    t_est = best_time(lambda: npusim.simulate(graph, x, "systolic-32x32-ws", mode="estimate"))
    print(f"torch threads: {torch.get_num_threads()}")
    report("resnet50 simulate(run)", t_run, t_torch, "torch eager", "< 3x")
    report("resnet50 simulate(estimate)", t_est, t_torch, "torch eager", "< 3x")
    for arch in ("systolic-32x32-ws", "systolic-32x32-os", "systolic-32x32-is"):
        inside, whole = min(memory_share(graph, x, arch) for _ in range(3))
        print(f"resnet50 memory model on {arch}: {inside * 1e3:.1f} ms of {whole:.2f} s "
              f"simulate = {100 * inside / whole:.2f} % (target: <= 10 %)")
    for arch in ("input-reuse-1024", "sparse-pairs-32x32", "group-tile-64mac"):
        try:
            npusim.simulate(graph, x, arch, mode="estimate")  # compiles the counting kernels
        except npusim.NpusimError as e:
            print(f"resnet50 on {arch}: {e}")
            continue
        inside, whole = min(memory_share(graph, x, arch, "estimate") for _ in range(3))
        print(f"resnet50 memory model on {arch} (estimate): {inside * 1e3:.1f} ms of "
              f"{whole:.2f} s simulate = {100 * inside / whole:.2f} % (target: <= 10 %)")
    out = npusim.simulate(graph, x).output
    with torch.inference_mode():
        ref = module(xt).numpy()
    print(f"max relative error vs torch: {np.abs(out - ref).max() / np.abs(ref).max():.2e}")


if __name__ == "__main__":
    main()
