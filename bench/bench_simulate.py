"""simulate() on ResNet-50 (224x224, batch 1, float32, systolic) against PyTorch eager inference
of the same network (npusim.torch_ref.to_torch), both timed in this run on this machine.

Target (issue 2): simulate within 3x of PyTorch inference.
Run: python bench/bench_simulate.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

import npusim
from npusim.frontends import zoo
from npusim.torch_ref import to_torch

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time, report  # noqa: E402


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
    out = npusim.simulate(graph, x).output
    with torch.inference_mode():
        ref = module(xt).numpy()
    print(f"max relative error vs torch: {np.abs(out - ref).max() / np.abs(ref).max():.2e}")


if __name__ == "__main__":
    main()
