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
  utilisation, would reach); ``of ideal`` = speed-up / ideal;
- all of it stall-free (DRAM bandwidth unlimited), then the same machines at the presets'
  own DRAM bandwidth (both 17.064 B/cycle, the same 64 KiB buffers): systolic, ir, the share
  of ir's cycles stalled, and the speed-up.

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
from common import best_time, memory_line, report  # noqa: E402

IR = "input-reuse-1024"
SYSTOLIC = ("systolic-32x32-os", "systolic-32x32-ws", "systolic-32x32-is")
CASES = [("resnet18", 0.3), ("alexnet", 0.3), ("alexnet", "deep-compression"),
         ("vgg16", 0.3), ("vgg16", "deep-compression")]


def nonzero_weight_macs(layer, weight) -> int:
    """MACs of a machine that skips exactly the zero weights: N*P*Q per non-zero weight."""
    return layer.N * layer.P * layer.Q * int(np.count_nonzero(weight))


def stall_free(arch):
    """``arch`` with unlimited DRAM bandwidth: the compute cycles alone."""
    return arch.with_memory(dram_bytes_per_cycle="unlimited")


def best_systolic(layer, archs):
    """The systolic array's stats with its best stationarity for this layer."""
    return min((get("systolic").stats(layer, a) for a in archs), key=lambda st: st.cycles)


def layer_rows(graph, free, finite):
    """One row per conv layer: name, shape, systolic / ir / ir without stealing stall-free,
    ideal, dense MACs, non-zero-weight MACs, then systolic / ir at the presets' bandwidth and
    the share of ir's time stalled."""
    archs = [load_arch(a) for a in SYSTOLIC]
    free_archs = [stall_free(a) for a in archs]
    rows = []
    for st, fin in zip(free.conv_layers, finite.conv_layers, strict=True):
        layer = graph.layers[st.name].with_dtype("float32")
        nows = st.cycles + int(st.extra["stealing_saved_cycles"])
        nz = nonzero_weight_macs(layer, graph.node(st.name).op.weight)
        rows.append((st.name, layer.describe(), best_systolic(layer, free_archs).cycles,
                     st.cycles, nows, layer.macs / max(nz, 1), layer.macs, nz,
                     best_systolic(layer, archs).cycles, fin.cycles, fin.stalled_share))
    return rows


def print_table(title: str, rows, bandwidth) -> dict:
    print(f"\n{title}")
    print(f"{'':52}{'stall-free':-^54}{'':8}{'':10}{f'at {bandwidth:g} B/cycle':-^46}")
    print(f"{'layer':<16}{'shape':<36}{'systolic':>12}{'ir':>12}{'ir-nows':>12}"
          f"{'speed-up':>10}{'ideal':>8}{'of ideal':>10}{'systolic':>12}{'ir':>12}"
          f"{'stalled':>9}{'speed-up':>10}")
    for name, shape, sy, ir, nows, ideal, _, _, sy_b, ir_b, stalled in rows:
        print(f"{name:<16}{shape:<36}{sy:>12,}{ir:>12,}{nows:>12,}{sy / ir:>10.2f}"
              f"{ideal:>8.2f}{sy / ir / ideal:>10.2f}{sy_b:>12,}{ir_b:>12,}{stalled:>9.2f}"
              f"{sy_b / ir_b:>10.2f}")
    sy, ir, nows, sy_b, ir_b = (sum(r[i] for r in rows) for i in (2, 3, 4, 8, 9))
    ideal = sum(r[6] for r in rows) / sum(r[7] for r in rows)
    stalled = 1 - ir / ir_b
    print(f"{'total':<52}{sy:>12,}{ir:>12,}{nows:>12,}{sy / ir:>10.2f}{ideal:>8.2f}"
          f"{sy / ir / ideal:>10.2f}{sy_b:>12,}{ir_b:>12,}{stalled:>9.2f}{sy_b / ir_b:>10.2f}")
    print(f"work stealing saves {100 * (nows - ir) / nows:.1f}% of input-reuse compute cycles; "
          f"without it the stall-free speed-up is {sy / nows:.2f}")
    conv = [r for r in rows if "x1x1->" not in r[1]]  # without the fully connected layers
    sy_c, ir_c, sy_cb, ir_cb = (sum(r[i] for r in conv) for i in (2, 3, 8, 9))
    ideal_c = sum(r[6] for r in conv) / sum(r[7] for r in conv)
    return {"speedup": sy / ir, "ideal": ideal, "speedup_nows": sy / nows,
            "conv_speedup": sy_c / ir_c, "conv_ideal": ideal_c, "speedup_bw": sy_b / ir_b,
            "conv_speedup_bw": sy_cb / ir_cb, "stalled": stalled,
            "conv_stalled": 1 - ir_c / ir_cb}


def network_case(name: str, density) -> dict:
    graph = prune(zoo.build(name), density)
    x = zoo.input_for(name)
    arch = load_arch(IR)
    start = time.perf_counter()
    free = npusim.simulate(graph, x, stall_free(arch), mode="estimate")
    took = time.perf_counter() - start
    finite = npusim.simulate(graph, x, arch, mode="estimate")
    t = free.total
    title = (f"{name} at density {density}, photo input ({took:.1f} s to simulate); "
             f"multiplier utilisation {t.utilisation:.3f} stall-free, IFM compressed "
             f"{int(t.extra['ifm_stream_bytes']):,} B of {int(t.extra['ifm_bytes_dense']):,} B "
             f"dense; DRAM at {arch.memory.dram_bytes_per_cycle:g} B/cycle: "
             f"{finite.total.dram_bytes:,} B")
    return print_table(title, layer_rows(graph, free, finite), arch.memory.dram_bytes_per_cycle)


def interconnects() -> None:
    """ResNet-18 at 0.3: total cycles with each interconnect (the bus is the default)."""
    graph, x = prune(zoo.build("resnet18"), 0.3), zoo.input_for("resnet18")
    print("\nresnet18 0.3, total conv cycles (stall-free) by interconnect (bus width 64 "
          "px/cycle, 4 output units):")
    base = load_arch(IR)
    for link in ("full", "bus", "chain"):
        p = dataclasses.replace(base.params("input-reuse"), interconnect=link)
        arch = dataclasses.replace(base, sections={"input-reuse": p})
        t = total(npusim.simulate(graph, x, stall_free(arch), mode="estimate").conv_layers)
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
    print(memory_line(load_arch(IR), *(load_arch(a) for a in SYSTOLIC)))
    summary = {f"{n} {d}": network_case(n, d) for n, d in CASES}
    print("\nsummary: speed-up over systolic stall-free (stealing on / off), ideal; "
          "the same for the conv layers alone (no fully connected); then at the presets' "
          "bandwidth: speed-up (all, conv only) and the share of input-reuse's time stalled")
    for key, s in summary.items():
        print(f"  {key:<28} {s['speedup']:6.2f} / {s['speedup_nows']:6.2f}   "
              f"ideal {s['ideal']:5.2f}   conv only {s['conv_speedup']:5.2f}, "
              f"ideal {s['conv_ideal']:5.2f}   | at bandwidth {s['speedup_bw']:6.2f}, "
              f"conv only {s['conv_speedup_bw']:5.2f}, stalled {s['stalled']:.2f} "
              f"(conv {s['conv_stalled']:.2f})")
    interconnects()
    speed_vs_torch()


if __name__ == "__main__":
    main()
