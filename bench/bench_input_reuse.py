"""The input-reuse machine (seeds 000/004) on real networks and real photographs, against
the dense systolic baseline with the same number of multipliers (1024).

For ResNet-18, VGG-16 and AlexNet, pruned to 0.3 weight density and (VGG-16, AlexNet) to
the deep-compression per-layer densities, each fed its zoo photograph, this prints per
conv layer and in total:

- ``systolic``: cycles of the 32x32 systolic array (1024 MACs), the best of its OS, WS and
  IS dataflows for each layer (the most generous dense baseline; a dense machine's cycles
  do not depend on the values);
- ``ir``/``ir-nows``: cycles of ``input-reuse-1024`` with work stealing on / off (from one
  ``simulate(mode='estimate')``: stealing off = on + the reported time saved);
- ``speed-up`` = systolic / ir; ``ideal`` = dense MACs / non-zero-weight MACs (what a
  machine that skipped exactly the zero weights, at the same multiplier count and full
  utilisation, would reach); ``of ideal`` = speed-up / ideal.

Then the simulator's own time on ResNet-50 (float32, 0.3 density, input-reuse, modes
'run' and 'estimate') over PyTorch eager inference of the same network: the best of three
timed calls each after a warm-up. Target (issue 3): within 3x.
Run: python bench/bench_input_reuse.py
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

import npusim
from npusim.arch import load_arch
from npusim.dataflows import get
from npusim.frontends import zoo
from npusim.frontends.prune import prune
from npusim.stats import total
from npusim.torch_ref import to_torch

sys.path.insert(0, str(Path(__file__).parent))
from common import best_time, report  # noqa: E402

IR = "input-reuse-1024"
SYSTOLIC = ("systolic-32x32-os", "systolic-32x32-ws", "systolic-32x32-is")
CASES = [("resnet18", 0.3), ("alexnet", 0.3), ("alexnet", "deep-compression"),
         ("vgg16", 0.3), ("vgg16", "deep-compression")]


def nonzero_weight_macs(layer, weight) -> int:
    """MACs of a machine that skips exactly the zero weights: N*P*Q per non-zero weight."""
    return layer.N * layer.P * layer.Q * int(np.count_nonzero(weight))


def layer_rows(graph, result):
    """One row per conv layer: name, shape, systolic, ir, ir without stealing, ideal."""
    archs = [load_arch(a) for a in SYSTOLIC]
    rows = []
    for st in result.conv_layers:
        layer = graph.layers[st.name].with_dtype("float32")
        sys_cycles = min(get("systolic").stats(layer, a).cycles for a in archs)
        nows = st.cycles + int(st.extra["stealing_saved_cycles"])
        ideal = layer.macs / max(nonzero_weight_macs(layer, graph.node(st.name).op.weight), 1)
        rows.append((st.name, layer.describe(), sys_cycles, st.cycles, nows, ideal,
                     layer.macs, nonzero_weight_macs(layer, graph.node(st.name).op.weight)))
    return rows


def print_table(title: str, rows) -> dict:
    print(f"\n{title}")
    print(f"{'layer':<16}{'shape':<36}{'systolic':>12}{'ir':>12}{'ir-nows':>12}"
          f"{'speed-up':>10}{'ideal':>8}{'of ideal':>10}")
    for name, shape, sy, ir, nows, ideal, _, _ in rows:
        print(f"{name:<16}{shape:<36}{sy:>12,}{ir:>12,}{nows:>12,}{sy / ir:>10.2f}"
              f"{ideal:>8.2f}{sy / ir / ideal:>10.2f}")
    sy, ir, nows = (sum(r[i] for r in rows) for i in (2, 3, 4))
    ideal = sum(r[6] for r in rows) / sum(r[7] for r in rows)
    print(f"{'total':<52}{sy:>12,}{ir:>12,}{nows:>12,}{sy / ir:>10.2f}{ideal:>8.2f}"
          f"{sy / ir / ideal:>10.2f}")
    print(f"work stealing saves {100 * (nows - ir) / nows:.1f}% of input-reuse cycles; "
          f"without it the speed-up is {sy / nows:.2f}")
    conv = [r for r in rows if "x1x1->" not in r[1]]  # without the fully connected layers
    sy_c, ir_c = sum(r[2] for r in conv), sum(r[3] for r in conv)
    ideal_c = sum(r[6] for r in conv) / sum(r[7] for r in conv)
    return {"speedup": sy / ir, "ideal": ideal, "speedup_nows": sy / nows,
            "conv_speedup": sy_c / ir_c, "conv_ideal": ideal_c}


def network_case(name: str, density) -> dict:
    graph = prune(zoo.build(name), density)
    x = zoo.input_for(name)
    start = time.perf_counter()
    result = npusim.simulate(graph, x, IR, mode="estimate")
    took = time.perf_counter() - start
    t = result.total
    title = (f"{name} at density {density}, photo input ({took:.1f} s to simulate); "
             f"multiplier utilisation {t.utilisation:.3f}, IFM compressed "
             f"{t.dram_ifmap_bytes:,} B of {int(t.extra['ifm_bytes_dense']):,} B dense")
    return print_table(title, layer_rows(graph, result))


def interconnects() -> None:
    """ResNet-18 at 0.3: total cycles with each interconnect (the bus is the default)."""
    graph, x = prune(zoo.build("resnet18"), 0.3), zoo.input_for("resnet18")
    print("\nresnet18 0.3, total conv cycles by interconnect (bus width 64 px/cycle, 4 output "
          "units):")
    base = load_arch(IR)
    for link in ("full", "bus", "chain"):
        p = dataclasses.replace(base.params("input-reuse"), interconnect=link)
        arch = dataclasses.replace(base, sections={"input-reuse": p})
        t = total(npusim.simulate(graph, x, arch, mode="estimate").conv_layers)
        moved = int(t.extra["transfers"])
        print(f"  {link:<6}{t.cycles:>10,} cycles, {moved:>8,} transfers, "
              f"{t.extra['contention_cycles'] / max(moved, 1):>10,.0f} cycles waited per "
              f"transfer, {int(t.extra['chain_hops']):>9,} hops")


def speed_vs_torch() -> None:
    graph = prune(zoo.build("resnet50"), 0.3)
    x = zoo.input_for("resnet50")
    module = to_torch(graph).eval()
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        t_torch = best_time(lambda: module(xt), repeat=3)
    t_run = best_time(lambda: npusim.simulate(graph, x, IR), repeat=3)
    t_est = best_time(lambda: npusim.simulate(graph, x, IR, mode="estimate"), repeat=3)
    print(f"\ntorch threads: {torch.get_num_threads()}")
    report("resnet50 0.3 input-reuse simulate(run)", t_run, t_torch, "torch eager", "< 3x")
    report("resnet50 0.3 input-reuse simulate(estimate)", t_est, t_torch, "torch eager",
           "< 3x")


def main() -> None:
    summary = {f"{n} {d}": network_case(n, d) for n, d in CASES}
    print("\nsummary: speed-up over systolic (stealing on / off), ideal; "
          "the same for the conv layers alone (no fully connected)")
    for key, s in summary.items():
        print(f"  {key:<28} {s['speedup']:6.2f} / {s['speedup_nows']:6.2f}   "
              f"ideal {s['ideal']:5.2f}   conv only {s['conv_speedup']:5.2f}, "
              f"ideal {s['conv_ideal']:5.2f}")
    interconnects()
    speed_vs_torch()


if __name__ == "__main__":
    main()
